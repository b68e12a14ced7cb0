#!/usr/bin/env bash
# Installs a cloudtune build into a temporary prefix and builds, links and runs a consumer project
# against it (find_package(cloudtune CONFIG REQUIRED) + cloudtune::plugin), the way docs/install.md
# says to.
#
#   tests/package/package_test.sh <cmake> <cloudtune build dir> <consumer source dir> [cmake args]
#
# The extra cmake arguments go to the consumer's configure step (the compiler, ccache). The
# temporary directory is removed on success and kept (and named) on failure.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 <cmake> <cloudtune build dir> <consumer source dir> [cmake args...]" >&2
  exit 2
fi
cmake=$1 build=$2 consumer=$3
shift 3

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cloudtune_package.XXXXXX")
cleanup() {
  local rc=$?
  if [ $rc -eq 0 ]; then
    rm -rf "$tmp"
  else
    echo "package_test: FAILED (rc $rc); files kept in $tmp" >&2
  fi
}
trap cleanup EXIT
prefix=$tmp/prefix

fail() { echo "package_test: $*" >&2; exit 1; }

echo "== install into $prefix"
"$cmake" --install "$build" --prefix "$prefix"
for f in lib/libcloudtune_plugin.so include/cloudtune/cloudtune.h bin/cloudtune \
         lib/cmake/cloudtune/cloudtuneConfig.cmake \
         lib/cmake/cloudtune/cloudtuneConfigVersion.cmake \
         lib/cmake/cloudtune/cloudtuneTargets.cmake share/cloudtune/paths.json; do
  [ -e "$prefix/$f" ] || fail "missing $prefix/$f"
done
"$prefix/bin/cloudtune" --help > /dev/null || fail "installed CLI: --help failed"

echo "== configure and build the consumer"
"$cmake" -S "$consumer" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "$@"
# The package must come from the temporary prefix, not from an install elsewhere on the machine.
grep -qx "cloudtune_DIR:PATH=$prefix/lib/cmake/cloudtune" "$tmp/build/CMakeCache.txt" ||
  fail "consumer found cloudtune elsewhere: $(grep '^cloudtune_DIR' "$tmp/build/CMakeCache.txt")"
"$cmake" --build "$tmp/build"
exe=$tmp/build/consumer
# (ldd's output is captured first: `ldd | grep -q` fails at random under pipefail, when grep
# exits before ldd has written everything.)
libs=$(ldd "$exe")
grep -q "$prefix/lib/libcloudtune_plugin.so" <<<"$libs" ||
  fail "consumer does not load the installed plugin: $(grep cloudtune <<<"$libs" || true)"

# Run with no CLOUDTUNE_* settings at all, inherited ones included.
clean_env=()
for v in $(env | sed -n 's/^\(CLOUDTUNE[A-Z_]*\)=.*/\1/p'); do clean_env+=(-u "$v"); done

echo "== run with CLOUDTUNE unset: off, writes nothing"
mkdir "$tmp/off"
out=$(cd "$tmp/off" && env "${clean_env[@]}" "$exe")
echo "$out"
[[ "$out" == *"init=0 enabled=0"* ]] || fail "expected the plugin off"
[ -z "$(ls -A "$tmp/off")" ] || fail "plugin off but wrote: $(ls -A "$tmp/off")"

echo "== run with CLOUDTUNE=1: on, writes the sidecar"
mkdir "$tmp/on"
out=$(cd "$tmp/on" && env "${clean_env[@]}" CLOUDTUNE=1 CLOUDTUNE_SIDECAR="$tmp/on/sidecar.jsonl" \
      CLOUDTUNE_PROFILE="$tmp/on/profile.csv" "$exe")
echo "$out"
[[ "$out" == *"init=1 enabled=1"* ]] || fail "expected the plugin on"
[ -s "$tmp/on/sidecar.jsonl" ] || fail "no sidecar written"
grep -q '"kind":"start"' <<<"$(head -n 1 "$tmp/on/sidecar.jsonl")" ||
  fail "first sidecar record is not \"start\": $(head -n 1 "$tmp/on/sidecar.jsonl")"
echo "package_test: OK"
