#!/bin/sh
# Compares snccl's nccl.h with NVIDIA's using the compiler itself, so nothing is missed
# that the expectation lists do not name:
#   decls      GCC -aux-info prototypes of every nccl*/pnccl* function: same set, same text
#   macros     the NCCL_* macro names, and snccl's header defines nothing else
#   deprecated calling (p)ncclResetDebugInit warns "deprecated" with both headers
# usage: header_compare.sh MODE CC CXX CUDA_INCLUDE_DIR SNCCL_HEADER_DIR
# Without CUDA (CUDA_INCLUDE_DIR empty or without nccl.h) decls/macros exit 77 (skipped).
# SNCCL_HEADER_DIR holds snccl's nccl.h; CUDA_INCLUDE_DIR holds NVIDIA's.
set -eu
mode=$1 cc=$2 cxx=$3 cuda_inc=$4 snccl_inc=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C
printf '#include <nccl.h>\n' >"$tmp/inc.c"
status=0
have_cuda=1
if [ -z "$cuda_inc" ] || [ ! -f "$cuda_inc/nccl.h" ]; then
  have_cuda=0
  if [ "$mode" != deprecated ]; then
    echo "*** SKIPPED: CUDA toolkit not found (no NVIDIA nccl.h to compare with) ***"
    exit 77
  fi
  echo "note: CUDA toolkit not found, checking snccl's header only"
fi

case $mode in
decls)
  # CUDA's headers are not C99-clean, so use gnu11 for both (the prototypes do not depend on it).
  "$cc" -std=gnu11 -fsyntax-only -isystem "$cuda_inc" -aux-info "$tmp/cuda.aux" "$tmp/inc.c"
  "$cc" -std=gnu11 -fsyntax-only -I "$snccl_inc" -aux-info "$tmp/snccl.aux" "$tmp/inc.c"
  # Drop the location comment; "()" (no prototype) and "(void)" are the same C ABI, and
  # snccl spells it (void) so that -Wstrict-prototypes users stay quiet.
  for h in cuda snccl; do
    grep -E '[^A-Za-z0-9_]p?nccl[A-Za-z0-9_]* \(' "$tmp/$h.aux" | sed -e 's|^/\*[^*]*\*/ *||' \
      -e 's|(/\* ??? \*/)|(void)|' | sort >"$tmp/$h.decls"
  done
  echo "NVIDIA nccl.h: $(wc -l <"$tmp/cuda.decls") functions, snccl nccl.h: $(wc -l <"$tmp/snccl.decls")"
  if ! diff -u "$tmp/cuda.decls" "$tmp/snccl.decls"; then
    echo "FAIL: function declarations differ (- NVIDIA, + snccl)"
    status=1
  fi
  ;;
macros)
  printf '#include <stddef.h>\n#include <limits.h>\n' >"$tmp/base.c"
  "$cc" -E -dM -isystem "$cuda_inc" "$tmp/inc.c" | awk '{print $2}' | sed 's/(.*//' |
    grep -E '^NCCL_' | sort -u >"$tmp/cuda.names"
  "$cc" -E -dM -I "$snccl_inc" "$tmp/inc.c" | awk '{print $2}' | sed 's/(.*//' | sort -u >"$tmp/snccl.all"
  "$cc" -E -dM "$tmp/base.c" | awk '{print $2}' | sed 's/(.*//' | sort -u >"$tmp/base.names"
  comm -23 "$tmp/snccl.all" "$tmp/base.names" >"$tmp/snccl.names"
  echo "NVIDIA nccl.h: $(wc -l <"$tmp/cuda.names") NCCL_* macros, snccl nccl.h: $(wc -l <"$tmp/snccl.names") macros"
  if ! diff -u "$tmp/cuda.names" "$tmp/snccl.names"; then
    echo "FAIL: macro names differ (- NVIDIA, + snccl)"
    status=1
  fi
  ;;
deprecated)
  for h in cuda snccl; do
    [ $h = cuda ] && [ $have_cuda = 0 ] && continue
    if [ $h = cuda ]; then inc="-isystem $cuda_inc"; else inc="-I $snccl_inc"; fi
    for f in ncclResetDebugInit pncclResetDebugInit; do
      for lang in c c++; do
        if [ $lang = c ]; then comp=$cc; else comp=$cxx; fi
        printf '#include <nccl.h>\nint main(void) { %s(); return 0; }\n' "$f" >"$tmp/use.txt"
        # shellcheck disable=SC2086
        if "$comp" -x $lang -fsyntax-only -Wdeprecated-declarations $inc "$tmp/use.txt" >"$tmp/out" 2>&1 &&
          grep -E "[^A-Za-z0-9_]$f[^A-Za-z0-9_].*is deprecated" "$tmp/out" >/dev/null; then
          echo "ok: $h header, $lang: $f is deprecated"
        else
          echo "FAIL: $h header, $lang: calling $f gives no deprecation warning:"
          cat "$tmp/out"
          status=1
        fi
      done
    done
  done
  ;;
*)
  echo "unknown mode $mode" >&2
  exit 2
  ;;
esac
exit $status
