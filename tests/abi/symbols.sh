#!/bin/sh
# Dynamic-symbol and packaging checks of the built shared libraries (as NCCL 2.28.9
# packages libnccl.so):
#   - libnccl.so -> libnccl.so.2 -> libnccl.so.2.28.9 in the drop-in directory, SONAME libnccl.so.2
#   - libsnccl.so.0 has SONAME libsnccl.so.0
#   - every defined dynamic symbol is nccl*, pnccl*, sncl* or snccl*, unversioned
#   - each of the 41 API functions: weak ncclX and strong (T) pncclX at the same address
#   - no DT_NEEDED on the CUDA driver/runtime, NVML or verbs (they are dlopen'ed)
#   - compared with NVIDIA's libnccl.so (when given): the 41 must be there, common symbols
#     must have the same binding; what NVIDIA exports that we do not is listed (allowed).
# usage: symbols.sh CC ABI_DIR NCCL_DIR SNCCL_LIB [NVIDIA_LIBNCCL]
#   ABI_DIR: tests/abi (holds abi_expectations.h), NCCL_DIR: <build>/nccl,
#   SNCCL_LIB: <build>/src/libsnccl.so.0...
set -eu
cc=$1 abi_dir=$2 nccl_dir=$3 snccl_lib=$4 nvidia_lib=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# The 41 API function names, from the same list the header checks use.
printf '#include "abi_expectations.h"\n#define NAME(ret, name, params) name\nSNCCL_ABI_FUNCTIONS(NAME)\n' |
  "$cc" -E -P -I "$abi_dir" -x c - | tr -s ' \t' '\n\n' | grep -E '^[A-Za-z]' | sort -u >"$tmp/api"
napi=$(wc -l <"$tmp/api")
[ "$napi" -eq 41 ] || fail "expected 41 API names from abi_expectations.h, got $napi"

# ---- packaging of the drop-in ----
for link in libnccl.so:libnccl.so.2 libnccl.so.2:libnccl.so.2.28.9; do
  name=${link%%:*} want=${link#*:}
  if [ ! -L "$nccl_dir/$name" ]; then
    fail "$nccl_dir/$name is not a symlink"
  elif [ "$(readlink "$nccl_dir/$name")" != "$want" ]; then
    fail "$nccl_dir/$name -> $(readlink "$nccl_dir/$name"), expected -> $want"
  fi
done
real=$nccl_dir/libnccl.so.2.28.9
if [ ! -f "$real" ] || [ -L "$real" ]; then
  fail "$real is not a regular file"
  echo "$fails check(s) failed"
  exit 1
fi
echo "ok: libnccl.so -> libnccl.so.2 -> libnccl.so.2.28.9"

soname() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p'; }
[ "$(soname "$real")" = libnccl.so.2 ] || fail "SONAME of $real is '$(soname "$real")', expected libnccl.so.2"
[ "$(soname "$snccl_lib")" = libsnccl.so.0 ] ||
  fail "SONAME of $snccl_lib is '$(soname "$snccl_lib")', expected libsnccl.so.0"

# ---- per-library symbol checks ----
check_lib() { # LIB TAG
  lib=$1 tag=$2
  nm -D --defined-only --format=posix "$lib" | awk '{print $1, $2, $3}' | sort >"$tmp/$tag.syms"
  echo "$tag: $(wc -l <"$tmp/$tag.syms") defined dynamic symbols" \
    "($(awk '$2=="W"' "$tmp/$tag.syms" | wc -l) W, $(awk '$2=="T"' "$tmp/$tag.syms" | wc -l) T)"
  bad=$(awk '$1 !~ /^(nccl|pnccl|sncl|snccl)/ || $1 ~ /@/ {print "  " $2 " " $1}' "$tmp/$tag.syms")
  [ -z "$bad" ] || fail "$tag exports symbols outside nccl*/pnccl*/sncl*/snccl* (or versioned):
$bad"
  # One awk pass: for each API name f, "nccl<f>" must be W and "pnccl<f>" T at the same address.
  api_errors=$(awk -v tag="$tag" '
    FNR == NR { api[$1] = 1; next }
    { type[$1] = $2; addr[$1] = $3 }
    END {
      for (f in api) {
        w = "nccl" f; t = "pnccl" f
        if (!(w in type) || !(t in type))
          printf "%s: nccl%s=\"%s %s\" pnccl%s=\"%s %s\" (both must be defined)\n", tag, f, type[w], addr[w], f, type[t], addr[t]
        else if (type[w] != "W" || type[t] != "T" || addr[w] != addr[t])
          printf "%s: expected W for nccl%s and T at the same address for pnccl%s, got %s %s / %s %s\n", tag, f, f, type[w], addr[w], type[t], addr[t]
      }
    }' "$tmp/api" "$tmp/$tag.syms" | sort)
  missing=0
  if [ -n "$api_errors" ]; then
    fail "$api_errors"
    missing=1
  fi
  [ $missing -eq 0 ] && echo "ok: $tag: 41 x (W ncclX, T pncclX) at the same address"
  needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' | tr '\n' ' ')
  echo "$tag: DT_NEEDED: $needed"
  for n in $needed; do
    case $n in
    libcuda.so* | libcudart.so* | libnvidia-ml.so* | libibverbs.so* | libnccl.so*)
      fail "$tag must not link $n (dlopen it at run time)"
      ;;
    esac
  done
  # shellcheck disable=SC2016
  undef=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | grep -E '^(cuda|cu[A-Z]|nvml|ibv_)' || true)
  [ -z "$undef" ] || fail "$tag has undefined references to dlopen-only libraries: $undef"
}
check_lib "$real" libnccl.so.2
check_lib "$snccl_lib" libsnccl.so.0
# Both are built from the same code: same names, same bindings (addresses may differ).
awk '{print $2, $1}' "$tmp/libnccl.so.2.syms" >"$tmp/a"
awk '{print $2, $1}' "$tmp/libsnccl.so.0.syms" >"$tmp/b"
if ! cmp -s "$tmp/a" "$tmp/b"; then
  echo "note: libnccl.so.2 (<) and libsnccl.so.0 (>) export different symbols:"
  diff "$tmp/a" "$tmp/b" | grep '^[<>]' | sed 's/^/  /' || true
fi

# ---- comparison with NVIDIA's library ----
if [ -n "$nvidia_lib" ] && [ -f "$nvidia_lib" ]; then
  nm -D --defined-only --format=posix "$nvidia_lib" | awk '{print $1, $2}' | sort >"$tmp/nv"
  awk '{print $1, $2}' "$tmp/libnccl.so.2.syms" >"$tmp/ours"
  echo "NVIDIA $(basename "$(readlink -f "$nvidia_lib")"): $(wc -l <"$tmp/nv") defined dynamic symbols"
  awk '{print $1}' "$tmp/nv" | sort >"$tmp/nv.names"
  awk '{print $1}' "$tmp/ours" | sort >"$tmp/ours.names"
  for f in $(cat "$tmp/api"); do
    grep -qx "nccl$f" "$tmp/nv.names" || fail "nccl$f is in our API list but not in NVIDIA's library"
  done
  only_nv=$(comm -23 "$tmp/nv.names" "$tmp/ours.names")
  only_ours=$(comm -13 "$tmp/nv.names" "$tmp/ours.names" | grep -E '^p?nccl' || true)
  if [ -n "$only_nv" ]; then
    echo "exported by NVIDIA but not by snccl (allowed for now: device-API host functions etc.):"
    for s in $only_nv; do
      echo "  $(awk -v n="$s" '$1==n {print $2}' "$tmp/nv") $s"
    done
  else
    echo "ok: every symbol NVIDIA exports is exported"
  fi
  [ -z "$only_ours" ] || echo "note: nccl*/pnccl* symbols NVIDIA does not export: $(echo $only_ours)"
  # Same binding for what both export (weak nccl*, strong pnccl*, ...).
  diffbind=$(join "$tmp/nv" "$tmp/ours" | awk '$2 != $3 {print "  " $1 ": NVIDIA " $2 ", snccl " $3}')
  [ -z "$diffbind" ] || fail "symbol types differ from NVIDIA's:
$diffbind"
else
  echo "note: NVIDIA's libnccl.so not available, comparison skipped"
fi

if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "PASS"
