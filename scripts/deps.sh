# Sourced by the run-*.sh scripts: installs the Debian 12 packages that are missing
# (apt-get update only when something is), and sets ROOT to the repository root.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${JOBS:-$(( $(nproc) < 2 ? 1 : 2 ))}

REQUIRED=(cmake ninja-build g++ libgtest-dev libbenchmark-dev pkg-config)
REQUIRED+=(python3 iproute2)  # tests: the perf tool runs, the network-namespace tests
OPTIONAL=(libhwloc-dev openmpi-bin libopenmpi-dev)
OPTIONAL+=(iperf3)  # perf/compare --cases netns: the TCP path's reference throughput
OPTIONAL+=(libibverbs-dev)  # rdma-core headers: the IB net (without them it is not built)
OPTIONAL+=(liblz4-dev libzstd-dev)  # the compressing net's codecs (SNCCL_NET_COMPRESS)
OPTIONAL+=(libucx-dev ucx-utils)  # UCX headers: the UCX net; ucx_perftest: its reference in perf/
OPTIONAL+=(python3-torch libtorch-dev pybind11-dev python3-pytest)  # the PyTorch backend, its tests
OPTIONAL+=(python3-venv python3-dev)  # the backend against torch 2.x from PyPI (torch2_venv)
OPTIONAL+=(ccache)  # run-tests.sh: the pip build of that backend reuses the release build's objects
# clang and its runtimes (libFuzzer; only recommended by clang, and recommends are not
# installed): the fuzz harnesses, scripts/fuzz.sh
OPTIONAL+=(clang libclang-rt-14-dev)

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"
  done
}

install_deps() {
  local sudo=() need
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  mapfile -t need < <(missing_packages "${REQUIRED[@]}" "${OPTIONAL[@]}")
  ((${#need[@]})) || return 0
  echo "== installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${REQUIRED[@]}" >/dev/null
}

# configure DIR [cmake options...]: (re)configures ROOT/DIR, so the test list is current.
configure() {
  local dir=$ROOT/$1
  shift
  cmake -S "$ROOT" -B "$dir" -G Ninja "$@"
}

# build DIR [targets...]: builds ROOT/DIR (default: everything); keeps going past a failed
# target so the tests that did build can still run.
build() {
  local dir=$ROOT/$1 targets=()
  shift
  (($#)) && targets=(--target "$@")
  cmake --build "$dir" -j "$JOBS" "${targets[@]}" -- -k 0
}

# test_targets DIR LABEL_REGEX: the build targets of the tests with those labels (so a
# build can skip what those tests do not run).
test_targets() {
  local dir=$ROOT/$1
  comm -12 <(ctest --test-dir "$dir" -N -L "$2" | awk '$1 == "Test" {print $3}' | sort -u) \
           <(ninja -C "$dir" -t targets all | sed -n 's/: phony$//p' | sort -u)
}

# torch2_venv: prints the path of a virtual environment (Debian's python3) holding the torch
# 2.x of python/requirements-torch2.txt, installing it from PyPI when missing or different
# (about 5 GiB with the CUDA libraries the Linux wheel depends on; they are not used). It
# lives outside the tree, in SNCCL_TORCH2_VENV or ~/.cache/snccl/venv-torch2, so that later
# runs on the same machine reuse it.
torch2_venv() {
  local venv=${SNCCL_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/snccl/venv-torch2}
  local req=$ROOT/python/requirements-torch2.txt
  if [[ ! -x $venv/bin/python ]]; then
    /usr/bin/python3 -m venv "$venv" >&2 || return 1
  fi
  "$venv/bin/python" -m pip install -q -r "$req" >&2 || return 1
  echo "$venv"
}
