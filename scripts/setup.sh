#!/usr/bin/env bash
# Installs every Debian package Stretto's build and tests need. Idempotent and quick when
# everything is already present (checks with dpkg before calling apt-get).
# Usage: scripts/setup.sh   (everything CI builds and tests: simulator, LibTorch backend, GUI,
# sweeps with SQLite, the Python module and its pytest suite, the single-node Slurm test)
set -euo pipefail
pkgs=(cmake g++ make ninja-build ccache pkg-config
      nlohmann-json3-dev libfmt-dev libcli11-dev libboost-graph-dev libeigen3-dev
      libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev graphviz
      libsqlite3-dev sqlite3 zlib1g-dev libjemalloc-dev
      libtorch-dev libgloo-dev libopenblas0-pthread
      libimgui-dev libglfw3-dev libstb-dev xvfb xauth pngquant
      pybind11-dev python3-dev python3-pytest python3-numpy python3-pandas
      slurmctld slurmd slurm-client munge)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
