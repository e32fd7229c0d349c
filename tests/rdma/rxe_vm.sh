#!/usr/bin/env bash
# rxe_vm.sh: runs commands against real libibverbs and the real kernel Soft-RoCE driver
# (rdma_rxe) on a host whose own kernel has no RDMA support.
#
# How: Debian's own kernel package is booted under QEMU with TCG (no KVM needed), from a
# busybox initramfs that carries the module closure of rdma_rxe, virtio, 9p, dummy and the
# netem/tbf qdiscs. The guest mounts the host root read-only over 9p, chroots into it,
# creates rxe0 and runs the command there, so binaries built on the host run unchanged.
#
# Usage:
#   rxe_vm.sh single [-t SECONDS] [-m MB] [-s SMP] [-d 1|2] [-q] [-v] -- 'COMMAND'
#   rxe_vm.sh pair   [-t SECONDS] [-m MB] [-s SMP] [-d 1|2] [-q] [-v] -- 'CMD_A' 'CMD_B'
#   rxe_vm.sh prepare [-t SECONDS]     installs the packages and fills the cache, boots nothing
#
# single: one guest ("rxe-vm"); rxe0 on dummy0 10.99.0.1/24, mtu 4200 (loopback RoCE: two
#   processes or two QPs in the guest talk through rxe0). Defaults: -m 2048, -s 2.
#   -d 2: a second device, rxe1 on dummy1 10.99.1.1/24 (each device loops back to
#   itself: a connection with a queue pair on each uses both).
# pair: two guests ("vm-a" and "vm-b") whose virtio eth0 are joined by a QEMU socket netdev
#   on a free 127.0.0.1 port; rxe0 on eth0, A = 10.98.0.1/24, B = 10.98.0.2/24, mtu 4200.
#   The commands start together, once rxe0 is up in both guests. Defaults: -m 1536, -s 1
#   (per guest). -d 2: a second link, eth1 of A (10.97.0.1/24) to eth1 of B (10.97.0.2/24)
#   over its own socket netdev, with rxe1 on it: two nodes with two NICs each.
#   -t SECONDS  bound on the whole run, preparation included (default 600). When it runs
#               out, the guests are killed and the exit status is 124.
#   -m MB, -s N memory and CPUs of each guest.
#   -q          no "RXE-VM:" progress and timing lines on stderr.
#   -v          print the guests' console logs on stderr after the run.
#
# Each COMMAND runs under `bash -c`, as root, chrooted into the host root (read-only), with
# stdin from /dev/null and cwd = the caller's cwd. Writable: /tmp, /var/tmp, /run, /dev/shm
# (tmpfs, fresh per guest; the repository and the cwd stay visible, read-only, when they lie
# below one of them) and HOME=/tmp/home. `ulimit -l unlimited` is in effect (verbs
# memory registration pins memory). /etc/hosts names rxe-vm, vm-a and vm-b. Environment:
#   all modes: SNCCL_RXE_DEV=rxe0, SNCCL_RXE_NDEV (1, or 2 with -d 2), SNCCL_RXE_ADDR (own
#     address), SNCCL_RXE_IFNAME (dummy0 or eth0), SNCCL_RXE_GID_INDEX (index of rxe0's RoCE v2 IPv4-mapped GID, normally 1),
#     SNCCL_RXE_MODE (single or pair), PATH, HOME, TMPDIR=/tmp, LANG=C.UTF-8.
#   pair: RANK (0 on A, 1 on B), WORLD_SIZE=2, MASTER_ADDR=10.98.0.1, MASTER_PORT=29500,
#     SNCCL_HOSTID=vm-a|vm-b, SNCCL_SOCKET_IFNAME=eth0, NCCL_SOCKET_IFNAME=eth0,
#     SNCCL_RXE_PEER_ADDR (the other guest's address).
#   The variables named in SNCCL_RXE_PASS_ENV (space-separated) are passed by value from the
#   caller; the ones above are set after them and win.
# The guests have iproute2's ip, tc (netem, tbf) and rdma, so a command can shape or cut its
# own link: `tc qdisc add dev eth0 root netem delay 2ms loss 1%`, `ip link set eth0 down`.
#
# Output and exit status: a command's stdout and stderr are written by the guest into a
# per-run directory shared over 9p and streamed from there to this script's stdout and
# stderr (kernel messages stay in the console logs). In pair mode every line is prefixed
# with "[A] " or "[B] ". The exit status is the command's; in pair mode it is the first
# non-zero one in time (A's when both are seen in the same poll), else 0. When one command
# fails, the other gets SNCCL_RXE_PEER_GRACE seconds (default 30) to end, then its guest is
# killed. 124: the -t bound ran out. 77: skipped, with a line "RXE-VM SKIP: <reason>" on
# stderr: a package could not be installed, the kernel package could not be downloaded, or
# rxe0 could not be created in the guest. A guest that ends without running its command is
# a failure (1), reported with the end of its console log.
#
# Other environment:
#   SNCCL_RXE_CACHE  where the unpacked kernel, the module closure and the initramfs are
#                    kept, keyed by kernel package and version (default <repo>/build/rxe-vm,
#                    about 15 MB per kernel). Concurrent runs share it under flock.
#   SNCCL_RXE_KEEP=1 keep the per-run directory (console logs, outputs) and print its path.
#   TMPDIR           where the per-run directory is created (default /tmp).
# Packages (installed with apt-get when missing; `apt-get update` only then): qemu-system-x86,
# busybox-static, kmod, cpio, ibverbs-providers, ibverbs-utils, perftest, iproute2 (which
# ships the `rdma` tool; Debian's rdma-core package is not needed).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly ROOT
readonly CACHE=${SNCCL_RXE_CACHE:-$ROOT/build/rxe-vm}
readonly PACKAGES=(qemu-system-x86 busybox-static kmod cpio ibverbs-providers ibverbs-utils
                   perftest iproute2)
# The modules the guest loads, with their dependencies. crc32_generic is listed because
# rdma_rxe needs the "crc32" shash and the initramfs has no modprobe to load it on demand.
readonly MODULES="crc32_generic veth virtio_pci virtio_net 9pnet_virtio 9p dummy rdma_rxe
ib_uverbs rdma_ucm sch_netem sch_tbf"
# Load options, as "file.ko:options" words: no automatic dummy0 (single mode makes its own).
readonly MODULE_OPTIONS="dummy.ko:numdummies=0"
readonly MSIZE=262144  # 9p message size: fewer round trips for file reads than the default

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }
info() { ((quiet)) || echo "RXE-VM: $*" >&2; }
die() { echo "RXE-VM ERROR: $*" >&2; exit 1; }
skip() { echo "RXE-VM SKIP: $*" >&2; exit 77; }
timed_out() { echo "RXE-VM TIMEOUT: $* (bound -t $limit s)" >&2; exit 124; }
now() { date +%s.%N; }
# bounded WHAT LOG CMD...: runs CMD within the time left before the -t bound, its output
# appended to LOG; running out of time ends the script with 124.
bounded() {
  local what=$1 log=$2 rc=0 left=$((deadline - SECONDS))
  shift 2
  ((left > 0)) || timed_out "$what"
  timeout -k 5 "$left" "$@" >>"$log" 2>&1 || rc=$?
  ((rc != 124 && rc != 137)) || timed_out "$what"
  return "$rc"
}

# ---------------------------------------------------------------- host packages
missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"
  done
}

# lock_cache / unlock_cache: one builder or installer at a time among concurrent runs
lock_cache() {
  exec {lock}>"$CACHE/.lock"
  bounded "waiting for the lock $CACHE/.lock" /dev/null flock "$lock"
}
unlock_cache() { exec {lock}>&-; }

install_packages() {
  local need sudo=() log=$CACHE/apt.log
  mapfile -t need < <(missing_packages)
  ((${#need[@]})) || return 0
  lock_cache
  mapfile -t need < <(missing_packages)  # a concurrent run may have installed them meanwhile
  ((${#need[@]})) || { unlock_cache; return 0; }
  if [[ $(id -u) != 0 ]]; then
    if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
      skip "not root, cannot install ${need[*]}"
    fi
    sudo=(sudo -n)
  fi
  info "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  : >"$log"
  if ! { bounded "apt-get update" "$log" "${sudo[@]}" apt-get update -qq &&
         bounded "apt-get install" "$log" "${sudo[@]}" apt-get install -y -qq \
           --no-install-recommends -o DPkg::Lock::Timeout=300 "${need[@]}"; }; then
    tail -n 5 "$log" >&2
    skip "cannot install ${need[*]} with apt-get (log: $log)"
  fi
  unlock_cache
}

# ---------------------------------------------------------------- kernel and initramfs cache
# resolve_kernel: prints "PACKAGE VERSION" of the kernel image that linux-image-amd64
# depends on, from the local package lists.
resolve_kernel() {
  local pkg ver
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
  [[ -n $pkg ]] || return 1
  ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | awk '$1 == "Version:" {print $2; exit}')
  [[ -n $ver ]] || return 1
  echo "$pkg $ver"
}

# download_kernel PKG VER DIR: apt-get download of the package into DIR (apt-get writes to
# the cwd; as root in a directory _apt cannot write, it must not drop to the sandbox user).
download_kernel() {
  local here=$PWD rc=0
  cd "$3"
  bounded "apt-get download $1" "$3/download.log" apt-get download -q \
    -o APT::Sandbox::User=root "$1=$2" || rc=$?
  cd "$here"
  return "$rc"
}

# build_kernel_dir PKG VER: downloads and unpacks the kernel package and keeps only vmlinuz
# and the module closure (mods/NN_name.ko in load order, listed in mods/order), in
# KDIR=CACHE/PKG_VER_MODKEY.
build_kernel_dir() {
  local pkg=$1 ver=$2 tmp kv resolved m path base n=0 name o opts
  tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
  if ! download_kernel "$pkg" "$ver" "$tmp"; then
    # the package lists may be stale (the mirror moved on): refresh them once and retry
    info "refreshing the package lists"
    bounded "apt-get update" "$tmp/download.log" apt-get update -qq || true
    resolved=$(resolve_kernel) || { rm -rf "$tmp"; skip "linux-image-amd64 is not in the package lists"; }
    read -r pkg ver <<<"$resolved"
    if ! download_kernel "$pkg" "$ver" "$tmp"; then
      tail -n 3 "$tmp/download.log" >&2
      rm -rf "$tmp"
      KDIR=$(newest_cached_kernel)
      [[ -n $KDIR ]] || skip "cannot download the kernel package $pkg=$ver"
      info "cannot download $pkg=$ver; using the cached ${KDIR##*/}"
      return 0
    fi
  fi
  KDIR=$CACHE/${pkg}_${ver}_$MODKEY
  [[ -f $KDIR/vmlinuz ]] && { rm -rf "$tmp"; return 0; }
  dpkg-deb -x "$tmp"/*.deb "$tmp/root"
  kv=$(ls "$tmp/root/lib/modules")
  [[ -n $kv && -f $tmp/root/boot/vmlinuz-$kv ]] || die "$pkg has no vmlinuz or module tree"
  depmod -b "$tmp/root" "$kv"
  mkdir -p "$tmp/out/mods"
  cp "$tmp/root/boot/vmlinuz-$kv" "$tmp/out/vmlinuz"
  echo "$kv" >"$tmp/out/kernel-release"
  # -C /dev/null: the module options in this host's modprobe.d are not the guest's
  for m in $MODULES; do
    if ! modprobe -C /dev/null -d "$tmp/root" -S "$kv" --show-depends "$m" >>"$tmp/closure" 2>&1; then
      rm -rf "$tmp"
      skip "kernel $kv has no module $m"
    fi
  done
  while read -r _ path; do
    n=$((n + 1))
    base=$(basename "$path")
    name=$(printf '%02d_%s' "$n" "$base")
    opts=
    for o in $MODULE_OPTIONS; do [[ ${o%%:*} == "${base%%.ko*}.ko" ]] && opts=${o#*:}; done
    case $path in
      *.ko.xz) name=${name%.xz}; xz -dc "$path" >"$tmp/out/mods/$name" ;;
      *.ko.zst) name=${name%.zst}; zstd -qdc "$path" >"$tmp/out/mods/$name" ;;
      *.ko.gz) name=${name%.gz}; gzip -dc "$path" >"$tmp/out/mods/$name" ;;
      *) cp "$path" "$tmp/out/mods/$name" ;;
    esac
    echo "$name $opts" >>"$tmp/out/mods/order"
  done < <(awk '$1 == "insmod" && !seen[$2]++ {print $1, $2}' "$tmp/closure")
  mv "$tmp/out" "$KDIR"
  rm -rf "$tmp"
}

# The initramfs's /init (busybox sh). It is the same for every run: what differs per run is
# in the run directory, shared as "snrun" and mounted at /run/snccl-rxe in the chroot.
read -r -d '' INIT <<'EOF' || true
#!/bin/sh
# PID 1 of an rxe_vm.sh guest: loads the module closure, mounts the host root (read-only)
# and the run directory (read-write) over 9p, prepares the chroot and runs guest.sh in it.
# It never returns: the guest powers off, which ends QEMU.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
role=$(sed -n 's/.*snccl\.role=\([a-z]*\).*/\1/p' /proc/cmdline)
while read -r ko opts; do
  insmod "/mods/$ko" $opts || echo "rxe-vm init: insmod $ko failed"
done </mods/order
H=/host
opts=trans=virtio,version=9p2000.L,msize=@MSIZE@
if mount -t 9p -o "$opts,ro,cache=loose" hostroot $H && mount -t 9p -o "$opts" snrun /snrun; then
  # The repository and the caller's cwd stay visible when they lie below one of the
  # tmpfs mount points (a checkout in /tmp): bound aside first, back after the tmpfs.
  kept=
  i=0
  while read -r dir; do
    case $dir in
      /tmp/?*|/var/tmp/?*|/run/?*|/dev/shm/?*)
        i=$((i + 1))
        mkdir -p "/keep$i" && mount -o bind "$H$dir" "/keep$i" && kept="$kept $i:$dir" ;;
    esac
  done </snrun/keep
  mount -t proc proc $H/proc
  mount -t sysfs sysfs $H/sys
  mount -t devtmpfs devtmpfs $H/dev
  mkdir -p $H/dev/shm $H/dev/pts
  mount -t tmpfs -o mode=1777 shm $H/dev/shm
  mount -t devpts devpts $H/dev/pts
  mount -t tmpfs -o mode=1777 tmp $H/tmp
  mount -t tmpfs -o mode=1777 vartmp $H/var/tmp
  mount -t tmpfs -o mode=755 run $H/run
  mkdir -p $H/run/snccl-rxe
  mount -o bind /snrun $H/run/snccl-rxe
  for k in $kept; do mkdir -p "$H${k#*:}" && mount -o bind "/keep${k%%:*}" "$H${k#*:}"; done
  chroot $H /bin/bash /run/snccl-rxe/guest.sh "$role"
else
  echo "rxe-vm init: cannot mount the 9p shares"
fi
sync
poweroff -f
EOF
INIT=${INIT//@MSIZE@/$MSIZE}

build_initramfs() {  # DEST
  local dest=$1 tmp
  tmp=$(mktemp -d "$CACHE/.initrd.XXXXXX")
  mkdir -p "$tmp/ir"/{bin,proc,sys,dev,host,snrun,keep}
  cp /bin/busybox "$tmp/ir/bin/busybox"
  ln -s busybox "$tmp/ir/bin/sh"  # the kernel runs /init through its #! line
  cp -r "$KDIR/mods" "$tmp/ir/mods"
  printf '%s\n' "$INIT" >"$tmp/ir/init"
  chmod 755 "$tmp/ir/init"
  (cd "$tmp/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initramfs.gz"
  mv "$tmp/initramfs.gz" "$dest"
  rm -rf "$tmp"
}

newest_cached_kernel() {
  local d best=
  for d in "$CACHE"/linux-image-*_"$MODKEY"; do
    [[ -f $d/vmlinuz ]] && [[ -z $best || $d -nt $best ]] && best=$d
  done
  echo "$best"
}

# prepare_cache: sets KDIR (vmlinuz, mods/) and INITRD, building what is missing. Complete
# entries appear only by rename, so a reader needs no lock; builders serialize on .lock.
prepare_cache() {
  local resolved pkg='' ver='' initrd_name
  MODKEY=$(printf '%s|%s' "$MODULES" "$MODULE_OPTIONS" | md5sum | cut -c1-8)
  initrd_name=initramfs-$(printf '%s' "$INIT" | cat - /bin/busybox | md5sum | cut -c1-8).gz
  if ! resolved=$(resolve_kernel); then
    bounded "apt-get update" /dev/null apt-get update -qq || true
    resolved=$(resolve_kernel) || resolved=
  fi
  if [[ -n $resolved ]]; then
    read -r pkg ver <<<"$resolved"
    KDIR=$CACHE/${pkg}_${ver}_$MODKEY
  else
    # no package lists (offline): the newest kernel already in the cache will do
    KDIR=$(newest_cached_kernel)
    [[ -n $KDIR ]] || skip "cannot resolve linux-image-amd64 and the cache is empty"
  fi
  INITRD=$KDIR/$initrd_name
  [[ -f $KDIR/vmlinuz && -f $INITRD ]] && return 0
  lock_cache
  if [[ ! -f $KDIR/vmlinuz ]]; then
    info "downloading and unpacking $pkg $ver into $CACHE"
    build_kernel_dir "$pkg" "$ver"
    INITRD=$KDIR/$initrd_name
  fi
  [[ -f $INITRD ]] || build_initramfs "$INITRD"
  unlock_cache
}

# ---------------------------------------------------------------- the guest side
# guest.sh runs in the chroot as root: network, rxe0, the peer barrier, then the command.
read -r -d '' GUEST <<'EOF' || true
#!/bin/bash
# Runs in an rxe_vm.sh guest, chrooted into the host root. Outcome files in the run
# directory (ROLE.ready, .start, .rc, .skip, .fail) are written whole and renamed, so the
# host never reads a partial one.
set -uo pipefail
role=$1
R=/run/snccl-rxe
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp/home TMPDIR=/tmp LANG=C.UTF-8
mkdir -p "$HOME"
note() { printf '%s\n' "$2" >"$R/$role.$1.tmp" && mv "$R/$role.$1.tmp" "$R/$role.$1"; }
skip() { note skip "$*"; exit 0; }
fail() { note fail "$*"; exit 0; }
source "$R/$role.env"

hostname "$NAME"
mount --bind "$R/hosts" /etc/hosts || fail "cannot bind-mount /etc/hosts"
ip link set lo up || fail "cannot bring lo up"
# make_rxe DEV IFNAME ADDR: IFNAME up with ADDR/24 (created as a dummy in single mode),
# DEV on it; sets gid_index to DEV's RoCE v2 GID of ADDR once the port is ACTIVE.
make_rxe() {
  local dev=$1 ifname=$2 addr=$3 out port want o1 o2 o3 o4 try f i
  if [[ $MODE == single ]] && ! ip link show "$ifname" >/dev/null 2>&1; then
    ip link add "$ifname" type dummy || fail "cannot create $ifname"
  fi
  ip addr add "$addr/24" dev "$ifname" && ip link set "$ifname" mtu 4200 up ||
    fail "cannot configure $ifname"
  out=$(rdma link add "$dev" type rxe netdev "$ifname" 2>&1) ||
    skip "rdma link add $dev type rxe netdev $ifname failed: $out"
  # The port turns ACTIVE and the IPv4 GID appears shortly after the link is added.
  port=/sys/class/infiniband/$dev/ports/1
  IFS=. read -r o1 o2 o3 o4 <<<"$addr"
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$o1" "$o2" "$o3" "$o4")
  gid_index=
  for ((try = 0; try < 100; try++)); do
    if [[ $(<"$port/state") == *ACTIVE* ]]; then
      for f in "$port"/gids/*; do
        i=${f##*/}
        if [[ $(<"$f") == "$want" && $(<"$port/gid_attrs/types/$i") == "RoCE v2" ]] 2>/dev/null; then
          gid_index=$i
          return 0
        fi
      done
    fi
    sleep 0.1
  done
  skip "$dev has no active port with a RoCE v2 GID for $addr"
}
make_rxe rxe0 "$IFNAME" "$ADDR"
if ((NDEV > 1)); then
  rxe0_gid=$gid_index
  make_rxe rxe1 "$IFNAME2" "$ADDR2"
  gid_index=$rxe0_gid
fi

# pair mode: the commands start once rxe0 is up in both guests
note ready "$gid_index"
if [[ -n ${PEER_ROLE:-} ]]; then
  until [[ -e $R/$PEER_ROLE.ready ]]; do sleep 0.1; done
fi

ulimit -l unlimited
ulimit -n 65536 2>/dev/null || true
set -a
source "$R/pass.env"
source "$R/$role.exports"
set +a
export SNCCL_RXE_GID_INDEX=$gid_index
cd "$CWD" || fail "cannot enter $CWD in the guest"
note start "$(date +%s.%N)"
bash -c "$(<"$R/$role.cmd")" </dev/null >>"$R/$role.out" 2>>"$R/$role.err"
note rc "$?"
EOF

# write_role ROLE NAME ADDR IFNAME ADDR2 IFNAME2 [PEER_ROLE PEER_ADDR RANK]: the role's
# files in the run dir (ADDR2 and IFNAME2: rxe1's, with -d 2)
write_role() {
  local role=$1 name=$2 addr=$3 ifname=$4 addr2=$5 ifname2=$6 peer_role=${7:-} peer_addr=${8:-} rank=${9:-}
  {
    printf 'MODE=%q NAME=%q ADDR=%q IFNAME=%q CWD=%q PEER_ROLE=%q NDEV=%q ADDR2=%q IFNAME2=%q\n' \
      "$mode" "$name" "$addr" "$ifname" "$PWD" "$peer_role" "$ndev" "$addr2" "$ifname2"
  } >"$RUN/$role.env"
  {
    printf 'SNCCL_RXE_MODE=%q\nSNCCL_RXE_DEV=rxe0\nSNCCL_RXE_NDEV=%q\nSNCCL_RXE_ADDR=%q\nSNCCL_RXE_IFNAME=%q\n' \
      "$mode" "$ndev" "$addr" "$ifname"
    if [[ -n $peer_role ]]; then
      printf 'RANK=%q\nWORLD_SIZE=2\nMASTER_ADDR=10.98.0.1\nMASTER_PORT=29500\n' "$rank"
      printf 'SNCCL_HOSTID=%q\nSNCCL_SOCKET_IFNAME=eth0\nNCCL_SOCKET_IFNAME=eth0\n' "$name"
      printf 'SNCCL_RXE_PEER_ADDR=%q\n' "$peer_addr"
    fi
  } >"$RUN/$role.exports"
  : >"$RUN/$role.out"
  : >"$RUN/$role.err"
}

write_run_dir() {
  local name
  printf '%s\n' "$GUEST" >"$RUN/guest.sh"
  printf '%s\n' "$PWD" >"$RUN/cwd"
  printf '%s\n' "$ROOT" "$PWD" >"$RUN/keep"  # bound into the guest if below a tmpfs point
  printf '%s\n' '127.0.0.1 localhost' '::1 localhost ip6-localhost ip6-loopback' \
    '10.99.0.1 rxe-vm' '10.98.0.1 vm-a' '10.98.0.2 vm-b' >"$RUN/hosts"
  : >"$RUN/pass.env"
  for name in ${SNCCL_RXE_PASS_ENV:-}; do
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "SNCCL_RXE_PASS_ENV: bad name '$name'"
    [[ -v $name ]] && printf '%s=%q\n' "$name" "${!name}" >>"$RUN/pass.env"
  done
  if [[ $mode == single ]]; then
    write_role a rxe-vm 10.99.0.1 dummy0 10.99.1.1 dummy1
    printf '%s\n' "${commands[0]}" >"$RUN/a.cmd"
  else
    write_role a vm-a 10.98.0.1 eth0 10.97.0.1 eth1 b 10.98.0.2 0
    write_role b vm-b 10.98.0.2 eth0 10.97.0.2 eth1 a 10.98.0.1 1
    printf '%s\n' "${commands[0]}" >"$RUN/a.cmd"
    printf '%s\n' "${commands[1]}" >"$RUN/b.cmd"
  fi
}

# ---------------------------------------------------------------- running the guests
declare -A qpid=() launched=() started=() ended=() outcome=()
streams=()

# launch ROLE EXTRA_QEMU_ARGS...: starts the role's guest in the background. PDEATHSIG:
# QEMU dies with this script even when the script itself is killed with SIGKILL.
launch() {
  local role=$1
  shift
  setpriv --pdeathsig KILL -- qemu-system-x86_64 \
    -machine q35 -accel tcg -cpu max -smp "$smp" -m "$mem" \
    -nodefaults -no-user-config -display none -no-reboot -monitor none \
    -serial "file:$RUN/$role.console" \
    -kernel "$KDIR/vmlinuz" -initrd "$INITRD" \
    -append "console=ttyS0 loglevel=4 panic=-1 snccl.role=$role" \
    -fsdev "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap" \
    -device "virtio-9p-pci,fsdev=root,mount_tag=hostroot" \
    -fsdev "local,id=run,path=$RUN,security_model=none,multidevs=remap" \
    -device "virtio-9p-pci,fsdev=run,mount_tag=snrun" \
    "$@" >"$RUN/$role.qemu.log" 2>&1 &
  qpid[$role]=$!
  launched[$role]=$(now)
}

# stream ROLE: copies the role's stdout and stderr files to ours while its QEMU runs
stream() {
  local role=$1 label
  if [[ $mode == single ]]; then
    tail -n +1 -s 0.2 --pid="${qpid[$role]}" -f "$RUN/$role.out" &
    streams+=($!)
    tail -n +1 -s 0.2 --pid="${qpid[$role]}" -f "$RUN/$role.err" >&2 &
    streams+=($!)
  else
    label=[${role^^}]
    tail -n +1 -s 0.2 --pid="${qpid[$role]}" -f "$RUN/$role.out" | sed -u "s/^/$label /" &
    streams+=($!)
    tail -n +1 -s 0.2 --pid="${qpid[$role]}" -f "$RUN/$role.err" | sed -u "s/^/$label /" >&2 &
    streams+=($!)
  fi
}

free_port() {
  local p
  for _ in {1..100}; do
    p=$(shuf -i 20000-60999 -n 1)
    [[ -z $(ss -Htln "sport = :$p") ]] && { echo "$p"; return 0; }
  done
  return 1
}

# listening PORT...: whether every PORT has a listener on this host
listening() {
  local p
  for p in "$@"; do [[ -n $(ss -Htln "sport = :$p") ]] || return 1; done
}

# launch_pair: A listens on a free port (two with -d 2: one link per NIC), B connects to
# it. A port taken between the check and QEMU's bind makes A exit at once; then other
# ports are tried.
launch_pair() {
  local i port ports nic a_args b_args
  for _ in 1 2 3 4 5; do
    ports=() a_args=() b_args=()
    for ((nic = 0; nic < ndev; nic++)); do
      port=$(free_port) || die "no free TCP port on 127.0.0.1"
      [[ " ${ports[*]} " == *" $port "* ]] && { ((nic--)); continue; }
      ports+=("$port")
      a_args+=(-netdev "socket,id=n$nic,listen=127.0.0.1:${ports[nic]}"
               -device "virtio-net-pci,netdev=n$nic,mac=52:54:00:9$((8 - nic)):00:01,romfile=")
      b_args+=(-netdev "socket,id=n$nic,connect=127.0.0.1:${ports[nic]}"
               -device "virtio-net-pci,netdev=n$nic,mac=52:54:00:9$((8 - nic)):00:02,romfile=")
    done
    launch a "${a_args[@]}"
    for ((i = 0; i < 100; i++)); do
      listening "${ports[@]}" && break
      kill -0 "${qpid[a]}" 2>/dev/null || break
      sleep 0.1
    done
    if listening "${ports[@]}"; then
      launch b "${b_args[@]}"
      info "guests vm-a and vm-b joined on 127.0.0.1:${ports[*]}"
      return 0
    fi
    stop_guest a
    wait "${qpid[a]}" 2>/dev/null || true
    grep -q 'in use' "$RUN/a.qemu.log" || { cat "$RUN/a.qemu.log" >&2; die "QEMU (vm-a) did not start"; }
  done
  die "no free TCP ports for the guests' links after 5 tries"
}

stop_guest() {  # ROLE
  kill -TERM "${qpid[$1]}" 2>/dev/null || true
}

alive() { kill -0 "${qpid[$1]}" 2>/dev/null; }

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }

# watch: polls the guests until all have ended; sets outcome[ROLE] and the failure order.
watch() {
  local role other t first_fail_at=
  failures=()
  while :; do
    t=$(now)
    for role in "${roles[@]}"; do
      [[ -n ${ended[$role]:-} ]] && continue
      [[ -z ${started[$role]:-} && -e $RUN/$role.start ]] && started[$role]=$t
      if [[ -e $RUN/$role.rc ]]; then
        outcome[$role]=rc:$(<"$RUN/$role.rc")
        ended[$role]=$t
        rc_seen[$role]=$SECONDS
      elif ! alive "$role"; then
        wait "${qpid[$role]}" 2>/dev/null && qexit[$role]=0 || qexit[$role]=$?
        if [[ -e $RUN/$role.skip ]]; then outcome[$role]=skip
        elif [[ -n ${killed[$role]:-} ]]; then outcome[$role]=killed
        else outcome[$role]=crash
        fi
        ended[$role]=$t
      else
        continue
      fi
      case ${outcome[$role]} in
        rc:0|killed) ;;
        *) failures+=("$role")
           [[ -n $first_fail_at ]] || first_fail_at=$SECONDS ;;
      esac
    done
    local all=1
    for role in "${roles[@]}"; do
      alive "$role" || continue
      all=0
      # the command is done and the guest only has to power off: do not wait on a hang there
      if [[ -n ${rc_seen[$role]:-} ]] && ((SECONDS - rc_seen[$role] > 15)); then
        stop_guest "$role"
      fi
    done
    ((all)) && break
    if ((SECONDS >= deadline)); then
      for role in "${roles[@]}"; do
        [[ -n ${ended[$role]:-} ]] || timeout_hit=1
        alive "$role" || continue
        killed[$role]=1
        # TERM first; a QEMU that has not gone 10 s later gets KILL
        if ((SECONDS >= deadline + 10)); then
          kill -KILL "${qpid[$role]}" 2>/dev/null || true
        else
          stop_guest "$role"
        fi
      done
    elif [[ -n $first_fail_at ]]; then
      # a guest that cannot start its command leaves its peer waiting at the barrier: end
      # it now; after a command failed, the other gets the grace period
      for role in "${roles[@]}"; do
        alive "$role" || continue
        [[ -n ${killed[$role]:-} ]] && continue
        other=${failures[0]}
        if [[ ${outcome[$other]} != rc:* ]] || ((SECONDS - first_fail_at >= grace)); then
          killed[$role]=1
          stop_guest "$role"
        fi
      done
    fi
    sleep 0.2
  done
}

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local role pid
  for role in "${!qpid[@]}"; do kill -TERM "${qpid[$role]}" 2>/dev/null || true; done
  for role in "${!qpid[@]}"; do
    for _ in {1..30}; do kill -0 "${qpid[$role]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${qpid[$role]}" 2>/dev/null || true
  done
  for pid in "${streams[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ -n ${RUN:-} && -d $RUN ]]; then
    if [[ ${SNCCL_RXE_KEEP:-0} == 1 ]]; then
      echo "RXE-VM: run directory kept: $RUN" >&2
    else
      rm -rf "$RUN"
    fi
  fi
}

# Run directories of runs that were killed with SIGKILL (no trap ran) are removed by the
# next run: each names its script's pid in "owner".
remove_stale_run_dirs() {
  local d pid
  for d in "${TMPDIR:-/tmp}"/snccl-rxe.*; do
    [[ -f $d/owner ]] || continue
    pid=$(<"$d/owner")
    [[ $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -rf "$d"
  done
  return 0
}

console_tail() {  # ROLE
  echo "---- end of the console of guest ${names[$1]} ($RUN/$1.console) ----" >&2
  tail -n 30 "$RUN/$1.console" >&2 2>/dev/null || true
  if [[ -s $RUN/$1.qemu.log ]]; then
    echo "---- QEMU's messages ----" >&2
    tail -n 10 "$RUN/$1.qemu.log" >&2
  fi
}

# ---------------------------------------------------------------- main
mode=${1:-}
case $mode in
  single|pair|prepare) shift ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
limit=600 mem='' smp='' ndev=1 quiet=0 verbose=0
while (($#)); do
  case $1 in
    -t) limit=${2:?-t needs SECONDS}; shift 2 ;;
    -m) mem=${2:?-m needs MB}; shift 2 ;;
    -s) smp=${2:?-s needs a CPU count}; shift 2 ;;
    -d) ndev=${2:?-d needs a device count}; shift 2 ;;
    -q) quiet=1; shift ;;
    -v) verbose=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "rxe_vm.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $limit =~ ^[1-9][0-9]*$ ]] || die "-t wants a positive number of seconds"
commands=("$@")
case $mode in
  single) ((${#commands[@]} == 1)) || die "single wants one command after --"
          roles=(a); mem=${mem:-2048}; smp=${smp:-2} ;;
  pair) ((${#commands[@]} == 2)) || die "pair wants two commands after --"
        roles=(a b); mem=${mem:-1536}; smp=${smp:-1} ;;
  prepare) ((${#commands[@]} == 0)) || die "prepare takes no command" ;;
esac
[[ $mem =~ ^[0-9]*$ && $smp =~ ^[0-9]*$ ]] || die "-m and -s want numbers"
[[ $ndev == 1 || $ndev == 2 ]] || die "-d wants 1 or 2"
grace=${SNCCL_RXE_PEER_GRACE:-30}
[[ $grace =~ ^[0-9]+$ ]] || die "SNCCL_RXE_PEER_GRACE wants a number of seconds"
deadline=$((SECONDS + limit))
declare -A killed=() rc_seen=() qexit=() names=([a]=vm-a [b]=vm-b)
[[ $mode == single ]] && names[a]=rxe-vm
timeout_hit=0
RUN=
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$CACHE" || die "cannot create the cache directory $CACHE"
install_packages
prepare_cache
info "kernel $(<"$KDIR/kernel-release"), cache $KDIR"
[[ $mode == prepare ]] && exit 0

remove_stale_run_dirs
RUN=$(mktemp -d "${TMPDIR:-/tmp}/snccl-rxe.XXXXXX")
echo "$$" >"$RUN/owner"
[[ $RUN != *,* ]] || die "the run directory path $RUN has a comma, which QEMU options cannot take"
write_run_dir
if [[ $mode == single ]]; then
  launch a -nic none
else
  launch_pair
fi
for role in "${roles[@]}"; do stream "$role"; done
watch
for pid in "${streams[@]}"; do wait "$pid" 2>/dev/null || true; done
streams=()

status=0
for role in "${roles[@]}"; do
  o=${outcome[$role]}
  if [[ -n ${started[$role]:-} ]]; then
    boot=$(elapsed "${launched[$role]}" "${started[$role]}")
    info "${names[$role]}: boot ${boot} s, command $(elapsed "${started[$role]}" "${ended[$role]}") s, ${o/rc:/exit }"
  else
    info "${names[$role]}: ${o} after $(elapsed "${launched[$role]}" "${ended[$role]}") s"
  fi
done
if ((verbose)); then
  for role in "${roles[@]}"; do
    echo "---- console of guest ${names[$role]} ----" >&2
    cat "$RUN/$role.console" >&2 || true
  done
else
  # A guest stopped while its command still ran (its peer failed, or the time ran out):
  # its kernel's last words may say why (a lockup, a driver's warning).
  for role in "${roles[@]}"; do
    [[ ${outcome[$role]} == killed ]] && console_tail "$role"
  done
fi
((timeout_hit)) && timed_out "guests killed"
for role in "${roles[@]}"; do
  [[ ${outcome[$role]} == skip ]] && skip "$(<"$RUN/$role.skip") (guest ${names[$role]})"
done
if ((${#failures[@]})); then
  role=${failures[0]}
  case ${outcome[$role]} in
    rc:*) status=${outcome[$role]#rc:} ;;
    *) if [[ -e $RUN/$role.fail ]]; then
         echo "RXE-VM ERROR: guest ${names[$role]}: $(<"$RUN/$role.fail")" >&2
       else
         echo "RXE-VM ERROR: guest ${names[$role]} ended without running its command" \
              "(QEMU exit status ${qexit[$role]:-?})" >&2
       fi
       console_tail "$role"
       status=1 ;;
  esac
fi
exit "$status"
