#!/usr/bin/env bash
# perftest_run.sh: runs a perftest program (ib_write_bw, ib_write_lat, ib_send_bw, ...) over
# rxe0 inside an rxe_vm.sh guest, with the device, GID index and -F options taken from the
# guest's environment (SNCCL_RXE_DEV, SNCCL_RXE_GID_INDEX).
#
# Usage (inside a guest):
#   perftest_run.sh loop   PROGRAM [ARGS...]  server and client in this guest, client to
#                                             SNCCL_RXE_ADDR (single mode)
#   perftest_run.sh server PROGRAM [ARGS...]  the server side (pair mode, on one guest)
#   perftest_run.sh client PROGRAM [ARGS...]  the client side, to SNCCL_RXE_PEER_ADDR
#                                             (pair mode, on the other guest)
# perftest's client connects once and gives up when the server is not listening yet, so the
# client here retries for up to PERFTEST_CONNECT_WAIT seconds (default 60); in loop mode it
# starts once the server's port is listening. Each program run
# is bounded by PERFTEST_TIMEOUT seconds (default 120). Both sides must get the same ARGS.
# Prints the client's output (in loop mode the server's too when either side failed); the
# exit status is the first failing side's.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }
(($# >= 2)) || { usage >&2; exit 2; }
role=$1 program=$2
shift 2
: "${SNCCL_RXE_DEV:?not in an rxe_vm.sh guest}" "${SNCCL_RXE_GID_INDEX:?not in an rxe_vm.sh guest}"
opts=(-d "$SNCCL_RXE_DEV" -x "$SNCCL_RXE_GID_INDEX" -F "$@")
run_timeout=${PERFTEST_TIMEOUT:-120}
connect_wait=${PERFTEST_CONNECT_WAIT:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# client ADDR: runs the client until it gets past connecting; its output in $tmp/client
client() {
  local rc give_up=$((SECONDS + connect_wait))
  while :; do
    rc=0
    timeout -k 5 "$run_timeout" "$program" "${opts[@]}" "$1" >"$tmp/client" 2>&1 || rc=$?
    ((rc != 0)) && grep -q "Couldn't connect" "$tmp/client" && ((SECONDS < give_up)) || return "$rc"
    sleep 0.5
  done
}

case $role in
  server) exec timeout -k 5 "$run_timeout" "$program" "${opts[@]}" ;;
  client)
    rc=0
    client "${SNCCL_RXE_PEER_ADDR:?pair mode only}" || rc=$?
    cat "$tmp/client"
    exit "$rc" ;;
  loop)
    timeout -k 5 "$run_timeout" "$program" "${opts[@]}" >"$tmp/server" 2>&1 &
    server=$!
    # perftest's TCP port (-p, default 18515): the client starts once the server listens
    port=18515
    for ((i = 1; i <= $#; i++)); do [[ ${!i} == -p ]] && j=$((i + 1)) && port=${!j}; done
    for ((i = 0; i < 10 * connect_wait; i++)); do
      [[ -n $(ss -Htln "sport = :$port") ]] || ! kill -0 "$server" 2>/dev/null && break
      sleep 0.1
    done
    rc=0 src=0
    client "${SNCCL_RXE_ADDR:?not in an rxe_vm.sh guest}" || rc=$?
    # a client that never connected leaves the server waiting: end it
    ((rc == 0)) || kill "$server" 2>/dev/null || true
    wait "$server" || src=$?
    cat "$tmp/client"
    if ((rc != 0 || src != 0)); then
      echo "---- $program server (exit $src) ----"
      cat "$tmp/server"
    fi
    ((rc != 0)) && exit "$rc"
    exit "$src" ;;
  *) usage >&2; exit 2 ;;
esac
