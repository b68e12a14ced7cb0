#!/usr/bin/env bash
# Builds cloudtune and runs its tests against newer dependencies than Debian 12's: a Debian 13
# (trixie) chroot with LibTorch 2.6, Ceres 2.2, Boost 1.83, GTest 1.15, CMake 3.31 and GCC 14.
# The working tree (tracked and untracked files that git does not ignore) is copied in, so
# uncommitted changes are checked too. Not part of CI: it needs root, debootstrap and about 4 GB.
#
#   bash scripts/check-debian13.sh [ROOT] [-- CTEST_ARGS...]
#
# ROOT: where the chroot lives (default /var/tmp/cloudtune-trixie); made on the first run, reused
# after. CTEST_ARGS replace the default (`-j2 --timeout 900`, less the torchrun tests: below).
# Warnings are errors in this build (CMAKE_COMPILE_WARNING_AS_ERROR), so a newer compiler's new
# warning fails it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=/var/tmp/cloudtune-trixie
if [ $# -gt 0 ] && [ "$1" != "--" ]; then root=$1; shift; fi
[ "${1:-}" = "--" ] && shift
ctest_args=("$@")
# Debian 13's python3-torch 2.6 is built without libuv yet asks for it by default: a job's
# init_process_group works with USE_LIBUV=0 (set below), but torchrun's workers connect to its store
# on libuv whatever the setting, so no torchrun job starts there; the tests that start one are left
# out.
[ ${#ctest_args[@]} -eq 0 ] &&
  ctest_args=(-j2 --timeout 900 -E '^(python_torchrun_.*|python_elastic|python_online)$')
[ "$(id -u)" -eq 0 ] || { echo "check-debian13: needs root (debootstrap, chroot, mount)" >&2; exit 2; }

if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
fi
if [ ! -x "$root/usr/bin/apt-get" ]; then
  debootstrap --variant=minbase trixie "$root" http://deb.debian.org/debian
fi

# /dev with its submounts (the pseudo-terminals a CLI test runs under `script`), and the shared
# data next to the repository (../shared), where the tests look for it (/src/../shared).
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount -R -l "$m" || true; done; }
trap cleanup EXIT
for d in proc sys dev; do
  if ! mountpoint -q "$root/$d"; then mount --rbind "/$d" "$root/$d"; mounted+=("$root/$d"); fi
done
if [ -d ../shared ] && ! mountpoint -q "$root/shared"; then
  mkdir -p "$root/shared"
  mount --bind "$(cd ../shared && pwd)" "$root/shared"
  mounted+=("$root/shared")
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"

# The packages of scripts/install-deps.sh (Debian 13 has them under the same names), less the fuzz
# and browser tools: Debian 13 has no clang 14 runtime, and the sanitizer and fuzz runs stay on the
# Debian 12 build.
mapfile -t pkgs < <(bash scripts/install-deps.sh --list |
                    grep -vxE 'chromium|clang|libclang-rt-14-dev')
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -c \
  "dpkg-query -W -f='\${Status}\n' ${pkgs[*]} 2>/dev/null | grep -c 'install ok installed' \
     | grep -qx ${#pkgs[@]} || { apt-get update -qq && \
     apt-get install -y -qq --no-install-recommends ${pkgs[*]}; }"

# The working tree, fresh each run; the build directory is kept between runs.
mkdir -p "$root/src"
find "$root/src" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard | tar -cf - --null -T - | tar -xf - -C "$root/src"

chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root USE_LIBUV=0 bash -c "
  set -e
  cd /src
  echo \"check-debian13: LibTorch \$(dpkg-query -W -f='\${Version}' libtorch-dev),\" \
       \"Ceres \$(dpkg-query -W -f='\${Version}' libceres-dev), \$(g++ --version | head -1)\"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_COMPILE_WARNING_AS_ERROR=ON -Wno-dev
  cmake --build build -j\$(nproc)
  cd build && ctest --output-on-failure $(printf '%q ' "${ctest_args[@]}")
"
