#!/usr/bin/env bash
# The libFuzzer harnesses of fuzz/: builds them in build-fuzz/ (clang, SNCCL_FUZZ=ON), runs
# each over its seed corpus fuzz/corpus/<harness>/ and then fuzzes it for SECONDS (default
# 10), $JOBS harnesses at a time. New inputs go to build-fuzz/corpus/<harness>/ (the
# repository's seeds stay as they are); a crash leaves its input in build-fuzz/artifacts/
# and fails the run.
#   scripts/fuzz.sh                       # every harness, 10 s each (the run-tests.sh stage)
#   scripts/fuzz.sh fuzz_nccl_xml 600     # one harness, longer, by hand
# Without clang++ and its libFuzzer runtime it prints a SKIP line and succeeds.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
only=${1:-}
seconds=${2:-10}

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cc"
if ! command -v clang++ >/dev/null ||
   ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" >/dev/null 2>&1; then
  echo "== FUZZ SKIPPED: no clang++ with libFuzzer (packages clang, libclang-rt-14-dev): harnesses not built or run"
  exit 0
fi

if [[ -n $only && ! -d $ROOT/fuzz/corpus/$only ]]; then
  echo "no harness $only: the harnesses are the folders of fuzz/corpus/" >&2
  exit 2
fi
CC=clang CXX=clang++ configure build-fuzz -DSNCCL_FUZZ=ON -DSNCCL_BUILD_TESTS=OFF \
  -DSNCCL_BUILD_BENCHMARKS=OFF -DSNCCL_WITH_TORCH=OFF -DSNCCL_WITH_MPI=OFF >/dev/null
build build-fuzz fuzz

# One harness: its seeds, then fuzzing; prints its report and fails with the harness.
fuzz_one() {
  local name=$1 seeds=$2
  local bin=$ROOT/build-fuzz/fuzz/$name work=$ROOT/build-fuzz/corpus/$name
  echo "== fuzz: $name, seeds then ${seconds} s"
  # Seeds first, each once: a regression input that crashes again fails here by name.
  # Then fuzzing, with the scratch corpus first so new inputs are written there.
  if ! "$bin" -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$ROOT/build-fuzz/artifacts/$name-" \
        "$seeds"* >"$work.log" 2>&1 ||
     ! "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$ROOT/build-fuzz/artifacts/$name-" "$work" "$seeds" >>"$work.log" 2>&1; then
    echo "== fuzz: $name FAILED (build-fuzz/artifacts/, log: build-fuzz/corpus/$name.log):"
    grep -m1 -B2 -A25 -E 'ERROR:|invariant broken|runtime error' "$work.log" || tail -n 40 "$work.log"
    return 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$work.log" | tr '\n' ' '
  echo
}

# $JOBS harnesses at a time (each fuzzes on one core), reports printed in order.
fail=0
batch=()
run_batch() {
  local name i pids=()
  for name in "${batch[@]}"; do
    fuzz_one "$name" "$ROOT/fuzz/corpus/$name/" >"$ROOT/build-fuzz/corpus/$name.report" 2>&1 &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    wait "${pids[$i]}" || fail=1
    cat "$ROOT/build-fuzz/corpus/${batch[$i]}.report"
  done
  batch=()
}
mkdir -p "$ROOT/build-fuzz/artifacts"
for seeds in "$ROOT"/fuzz/corpus/*/; do
  name=$(basename "$seeds")
  [[ -z $only || $only == "$name" ]] || continue
  mkdir -p "$ROOT/build-fuzz/corpus/$name"
  batch+=("$name")
  (( ${#batch[@]} < JOBS )) || run_batch
done
(( ${#batch[@]} == 0 )) || run_batch
exit "$fail"
