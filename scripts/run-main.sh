#!/usr/bin/env bash
# The main job: installs dependencies, builds snccl in build/ and runs the allreduce
# benchmark over 2 local ranks (8 B to 64 MiB, x4 steps).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
install_deps
configure build
build build sn_allreduce_perf
"$ROOT/build/perf/sn_allreduce_perf" -b 8 -e 64M -f 4 -g 2
