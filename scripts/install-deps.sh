#!/usr/bin/env bash
# Installs the Debian 12 packages cloudtune needs; skips what is already installed.
set -euo pipefail
pkgs=(build-essential cmake ccache pkg-config python3 python3-venv python3-setuptools python3-wheel
      libtorch-dev libgloo-dev libceres-dev libeigen3-dev libboost-dev nlohmann-json3-dev
      libcli11-dev libyaml-cpp-dev libsqlite3-dev libgtest-dev libgmock-dev libbenchmark-dev python3-torch dataset-fashion-mnist
      python3-matplotlib chromium clang libclang-rt-14-dev)  # clang + libFuzzer runtime: scripts/fuzz.sh
# --list: print the package names, one a line, and install nothing (scripts/check-debian13.sh).
if [ "${1:-}" = "--list" ]; then printf '%s\n' "${pkgs[@]}"; exit 0; fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#pkgs[@]} packages present"
fi
