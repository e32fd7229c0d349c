#!/usr/bin/env bash
# Adaptive routing against a static split and the best single rail, side by side: two
# emulated nodes (network namespaces A and B) joined by RAILS veth pairs ("rail0", "rail1",
# ... on both sides, 10.78.<k>.1 and 10.78.<k>.2, MTU 9000) through a bridge per rail in a
# third namespace, the switch, whose two ports on each rail are shaped with tbf to a known
# rate (20 ms of queue). Needs root, iproute2 and iperf3.
#
#   perf/multirail.sh [-l RAILS] [-m MBIT] [-s BYTES] [-n ITERS] [-R ROUNDS] [-c CASES] [-t TOOLS]
#                     [-M MODES]
#
# Cases (-c, comma list; default all):
#   equal    every rail at MBIT
#   unequal  rail 0 at MBIT, the others at MBIT/4
#   load     every rail at MBIT; iperf3 (TCP, 4 flows, A to B) on rail 1 starts halfway through
#   udp      every rail at MBIT; iperf3 (UDP at 3/4 of MBIT each way) on rail 1 starts halfway
#   cut      every rail at MBIT; rail 1's cable is pulled halfway through
# ("halfway": once node A has sent, over all its rails, the bytes of the warm-up and of
# half of the timed out-of-place iterations, whatever the mode).
# Modes (-M, comma list; default all three), per case: adaptive (SNCCL_ROUTING=adaptive
# over every rail), static (SNCCL_ROUTING=static over every rail: an equal share per
# socket) and single (rail 0 alone, the fastest). Tools (-t): sendrecv,allreduce
# (sn_sendrecv_perf, sn_allreduce_perf), one size (-s, default 16M) for -n iterations
# (default 20) after 2 warm-up ones.
#
# Prints one line per run as it goes, then a table of medians over the -R rounds (default
# 3; rounds interleave the cases and modes) in MB/s of bus bandwidth (2 ranks: the bytes
# each rank sends per second), with the fraction of the available rate: the rails' summed
# shaped rate; for "cut" and "udp" what they can carry when half the timed bytes go
# before the event at the sum and half after at what is left (2 / (1/sum + 1/left));
# for "load" the same with what the TCP flows left beside adaptive routing (their rate is
# measured in every run and printed under the table). A run that fails or exceeds its
# time limit shows as "fail"; a mode not run, "-".
set -euo pipefail

rails=2 mbit=800 size=16M iters=20 rounds=3 cases=equal,unequal,load,udp,cut tools=sendrecv,allreduce
modeArg=adaptive,static,single
while getopts "l:m:s:n:R:c:t:M:h" o; do
  case $o in
    l) rails=$OPTARG ;;
    m) mbit=$OPTARG ;;
    s) size=$OPTARG ;;
    n) iters=$OPTARG ;;
    R) rounds=$OPTARG ;;
    c) cases=$OPTARG ;;
    t) tools=$OPTARG ;;
    M) modeArg=$OPTARG ;;
    *) sed -n '2,32p' "$0"; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then echo "multirail.sh: needs root (network namespaces); not run" >&2; exit 3; fi
command -v iperf3 >/dev/null || { echo "multirail.sh: needs iperf3 (apt-get install iperf3)" >&2; exit 3; }
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${SNCCL_PERF_BIN:-$root/build/perf}

# Each rail runs through a bridge in a third namespace S, the switch, and is shaped on the
# switch's ports: the bottleneck queue is in the switch, as in a fabric. A qdisc on the
# sender's own device would be no bottleneck for competing flows: the kernel holds a local
# socket back while its device's queue is full (TCP small queues, socket send buffers)
# instead of dropping its packets, so every flow on the rail, TCP or UDP, would get an
# equal turn, whatever it sends.
A="snmr$$a" B="snmr$$b" S="snmr$$s"
iperfLog=$(mktemp)
cleanup() {
  rm -f "$iperfLog"
  for ns in "$A" "$B" "$S"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ns in "$A" "$B" "$S"; do
  ip netns add "$ns"
  ip -n "$ns" link set lo up
done
for ((k = 0; k < rails; k++)); do
  ip -n "$S" link add "br$k" type bridge
  for side in a b; do
    ns=$A
    [ "$side" = b ] && ns=$B
    ip link add "r$side$$k" netns "$ns" type veth peer name "$side$k" netns "$S"
    ip -n "$ns" link set "r$side$$k" name "rail$k"
    ip -n "$ns" link set "rail$k" mtu 9000 up
    ip -n "$S" link set "$side$k" mtu 9000 master "br$k" up
  done
  ip -n "$S" link set "br$k" mtu 9000 up
  ip -n "$A" addr add "10.78.$k.1/24" dev "rail$k"
  ip -n "$B" addr add "10.78.$k.2/24" dev "rail$k"
done
for _ in $(seq 100); do
  (($(bridge -n "$S" link show | grep -c 'state forwarding') == 2 * rails)) && break
  sleep 0.05
done

shape() {  # rail mbit: the switch's port towards each node
  for side in a b; do
    tc -n "$S" qdisc replace dev "$side$1" root tbf rate "$2mbit" burst 256kb latency 20ms
  done
}

bytes() {  # 16M -> 16777216
  local v=${1%[KMG]} u=${1: -1}
  case $u in K) echo $((v << 10)) ;; M) echo $((v << 20)) ;; G) echo $((v << 30)) ;; *) echo "$1" ;; esac
}
nbytes=$(bytes "$size")

# Bytes node A has sent on its rails so far (each rank sends about -s bytes per iteration
# with either tool at 2 ranks). Before the timed iterations come 8 warm-up ones: 2 per
# placement at the largest and the smallest size, both -s here (sn_perf_run.cc).
txbytes() {
  ip -n "$A" -s -o link show | awk '/ rail[0-9]+[:@]/ {
    n = split($0, s, "\\"); for (i = 1; i < n; i++) if (s[i] ~ /TX:/) {split(s[i + 1], v, " "); t += v[1]}}
    END {printf "%.0f\n", t}'
}
half=$(((8 + iters / 2) * nbytes))

# run TOOL MODE EVENT -> prints MB/s (or "fail")
run() {
  local tool=$1 mode=$2 event=$3 ifname=rail routing=adaptive
  [ "$mode" = static ] && routing=static
  [ "$mode" = single ] && ifname="=rail0"
  local port=$((20000 + RANDOM % 12000)) out rc=0 evpid=""
  local cmd="$bin/sn_${tool}_perf -b $size -e $size -n $iters -w 2 -c 0"
  local envs="WORLD_SIZE=2 MASTER_ADDR=10.78.0.1 MASTER_PORT=$port SNCCL_SOCKET_IFNAME=$ifname SNCCL_ROUTING=$routing SNCCL_TIMEOUT=30"
  local log
  log=$(mktemp)
  : >"$iperfLog"
  if [ "$event" != none ]; then
    # Halfway through the timed out-of-place iterations, by the bytes node A sent.
    local from
    from=$(txbytes)
    (for _ in $(seq 6000); do (($(txbytes) - from >= half)) && break; sleep 0.02; done
     $event) >/dev/null 2>&1 &
    evpid=$!
  fi
  env $envs RANK=1 SNCCL_HOSTID=mr-b timeout -k 5 120 ip netns exec "$B" $cmd >/dev/null 2>&1 &
  local p1=$!
  env $envs RANK=0 SNCCL_HOSTID=mr-a timeout -k 5 120 ip netns exec "$A" $cmd >"$log" 2>&1 || rc=$?
  out=$(cat "$log")
  rm -f "$log"
  wait "$p1" || rc=$((rc == 0 ? 1 : rc))
  [ -n "$evpid" ] && { kill "$evpid" 2>/dev/null || true; wait "$evpid" 2>/dev/null || true; }
  # Undo the event for the next run (the iperf3 servers stay).
  pkill -9 -f "iperf3 -c 10.78.1." 2>/dev/null || true
  ip -n "$A" link set rail1 up 2>/dev/null || true
  ip -n "$B" link set rail1 up 2>/dev/null || true
  local comp=-
  [ "$event" = load_rail1 ] && comp=$(competitor)
  if [ "$rc" != 0 ]; then echo "fail $comp"; return; fi
  # Out-of-place time (us) of the one size: column 6 of the data line.
  local us
  us=$(echo "$out" | awk -v n="$nbytes" '$1 == n && $2 ~ /^[0-9]+$/ {print $6; exit}')
  [ -z "$us" ] && { echo "fail $comp"; return; }
  awk -v b="$nbytes" -v us="$us" -v c="$comp" 'BEGIN {printf "%.1f %s\n", b / us, c}'
}

ip netns exec "$B" iperf3 -s -D -B 10.78.1.2 >/dev/null 2>&1 || true
ip netns exec "$A" iperf3 -s -D -B 10.78.1.1 >/dev/null 2>&1 || true
for _ in $(seq 50); do
  ip netns exec "$B" ss -ltn | grep -q '10.78.1.2:5201' && ip netns exec "$A" ss -ltn | grep -q '10.78.1.1:5201' && break
  sleep 0.1
done
# TCP, 4 flows one way; it reports its rate every 0.25 s, for competitor().
load_rail1() { ip netns exec "$A" iperf3 -c 10.78.1.2 -B 10.78.1.1 -t 60 -P 4 --forceflush -i 0.25 >"$iperfLog" 2>&1; }
# UDP at three quarters of the rail's rate, each way; 32000-byte datagrams keep iperf3's
# CPU low (the kernel fragments them at the MTU).
udp_rail1() {
  local rate=$((mbit * 3 / 4))M
  ip netns exec "$B" iperf3 -c 10.78.1.1 -B 10.78.1.2 -t 60 -u -l 32000 -b "$rate" >/dev/null 2>&1 &
  ip netns exec "$A" iperf3 -c 10.78.1.2 -B 10.78.1.1 -t 60 -u -l 32000 -b "$rate" >/dev/null 2>&1
}
# MB/s the competing TCP flows got while the run went on: the mean of iperf3's intervals
# but the first (its slow start); "-" without any.
competitor() {
  awk 'BEGIN {u["Kbits/sec"] = 0.001; u["Mbits/sec"] = 1; u["Gbits/sec"] = 1000}
       /^\[SUM\]/ && / sec / {for (i = 2; i < NF; i++) if ($(i + 1) in u) {if (n++) t += $i * u[$(i + 1)]; break}}
       END {if (n > 1) printf "%.1f\n", t / (n - 1) / 8; else print "-"}' "$iperfLog"
}
cut_rail1() { ip -n "$A" link set rail1 down; }

halves() { echo $((2 * $1 * $2 / ($1 + $2))); }  # the rate of half the bytes at $1, half at $2
available() {  # case -> the rate the rails offer in Mbit/s (see the top)
  local sum=$((rails * mbit))
  case $1 in
    unequal) echo $((mbit + (rails - 1) * (mbit / 4))) ;;
    udp) halves "$sum" $((sum - mbit * 3 / 4)) ;;
    cut) halves "$sum" $((sum - mbit)) ;;
    *) echo "$sum" ;;
  esac
}

declare -A res comps
IFS=, read -r -a caseList <<<"$cases"
IFS=, read -r -a toolList <<<"$tools"
IFS=, read -r -a modes <<<"$modeArg"
for ((r = 1; r <= rounds; r++)); do
  for c in "${caseList[@]}"; do
    shape 0 "$mbit"
    for ((k = 1; k < rails; k++)); do shape "$k" $([ "$c" = unequal ] && echo $((mbit / 4)) || echo "$mbit"); done
    sum=$(available "$c")
    for t in "${toolList[@]}"; do
      event=none
      [ "$c" = load ] && event=load_rail1
      [ "$c" = udp ] && event=udp_rail1
      [ "$c" = cut ] && event=cut_rail1
      for m in "${modes[@]}"; do
        read -r v comp < <(run "$t" "$m" "$event")
        if [ "$comp" = - ]; then
          echo "round $r  $c  $t  $m  $v MB/s (available $((sum / 8)) MB/s)"
        else
          echo "round $r  $c  $t  $m  $v MB/s (iperf3 on rail 1: $comp MB/s)"
          comps[$c,$t,$m]="${comps[$c,$t,$m]:-} $comp"
        fi
        res[$c,$t,$m]="${res[$c,$t,$m]:-} $v"
      done
    done
  done
done

# Median of the numbers among the words read; "fail" when every run failed, "-" when none ran.
median() {
  local w
  w=$(tr ' ' '\n')
  echo "$w" | { grep -E '^[0-9.]+$' || true; } | sort -g | awk -v f="$(echo "$w" | grep -c '^fail$')" '{a[NR] = $1}
    END {if (NR == 0) print (f > 0 ? "fail" : "-"); else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.1f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
echo
echo "| case | tool | available MB/s | adaptive | static | best single rail | adaptive / available | adaptive / static |"
echo "|---|---|---|---|---|---|---|---|"
notes=()
for c in "${caseList[@]}"; do
  sum=$(available "$c")
  for t in "${toolList[@]}"; do
    a=$(echo "${res[$c,$t,adaptive]:-}" | median)
    s=$(echo "${res[$c,$t,static]:-}" | median)
    g=$(echo "${res[$c,$t,single]:-}" | median)
    avail=$((sum / 8))
    if [ "$c" = load ]; then
      # What the competing flows leave of the rails once they start, beside adaptive
      # routing: its fraction says how much of what it could take it took.
      ca=$(echo "${comps[$c,$t,adaptive]:-}" | median)
      cs=$(echo "${comps[$c,$t,static]:-}" | median)
      notes+=("load, $t: iperf3 took $ca MB/s of rail 1 beside adaptive routing, $cs beside the static split")
      [ "$ca" != - ] && [ "$ca" != fail ] &&
        avail=$(awk -v s="$sum" -v c="$ca" 'BEGIN {b = s / 8; x = b - c; printf "%.0f", 2 * b * x / (b + x)}')
    fi
    fa=$(awk -v a="$a" -v s="$avail" 'BEGIN {if (a !~ /^[0-9.]+$/) print "-"; else printf "%.0f%%", 100 * a / s}')
    fs=$(awk -v a="$a" -v s="$s" 'BEGIN {if (a !~ /^[0-9.]+$/ || s !~ /^[0-9.]+$/) print "-"; else printf "%.2fx", a / s}')
    echo "| $c | $t | $avail | $a | $s | $g | $fa | $fs |"
  done
done
for n in "${notes[@]}"; do echo "$n"; done
