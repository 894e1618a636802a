#!/usr/bin/env bash
# lab.sh - multi-host SSH test lab for cargoship, built from Linux namespaces.
#
# Every host hN is a set of namespaces on this machine: its own network
# namespace (eth0 = $LAB_NET.(10+N)/24), UTS (hostname), IPC, mount, PID and
# cgroup namespace; an overlayfs root (a per-host upper dir over a shared,
# cached debootstrap'd Debian 12 rootfs plus optional layers); a real OpenSSH
# sshd; and as PID 1 either systemd (default, what real engines run under) or
# runit's runsvdir.
#
# The hosts hang off a bridge that lives in a dedicated "lab" network
# namespace, never the machine's root namespace: the root namespace gets no
# route to $LAB_NET.0/24, so a client started outside the lab, before `up` or
# after `down` cannot send lab traffic out of the machine's default route.
# Clients (cargoship, test drivers, ansible) therefore run inside the lab:
# `lab.sh exec CMD...`.
#
# Usage:
#   lab.sh up N           hosts h1..hN (1..200; 1..2000 with a /16 LAB_NET); declarative
#                         and idempotent
#   lab.sh down           remove every host, the lab netns, cgroups, state
#   lab.sh reset I...     recreate hosts hI... as new (same flavour, new host key)
#   lab.sh reboot I...    power-cycle hosts hI...: every process killed, PID 1 started
#                         again on the same disk (upper dir kept; /run, /tmp fresh)
#   lab.sh status         one line for the lab, one per host
#   lab.sh exec CMD...    run CMD inside the lab network namespace
#   lab.sh ssh I CMD...   OpenSSH to host hI from inside the lab
#   lab.sh upper I        path of host hI's overlay upper dir
#   lab.sh pid I          host hI's PID 1 as seen from the machine
#   lab.sh link I up|down set host hI's link up/down (it stops answering)
#   lab.sh sshd I [LINE]  set sshd_config LINE on host hI only (e.g. 'MaxStartups 3'),
#                         none: back to the defaults; sshd reloads, sessions stay
#   lab.sh purge          down + delete the cached rootfs and layers
# Environment (see README.md):
#   LAB_PREFIX (cs)  LAB_NET (10.250.0: a /24; a.b: a /16, one bridge per 200 hosts)
#   LAB_STATE  LAB_CACHE  LAB_MIRROR
#   LAB_OS (debian|rocky, comma list cycled over hosts)
#   LAB_INIT (systemd|runit, comma list cycled over hosts; default systemd)
#   LAB_BOOT_WAIT (180: seconds a systemd host may take to boot)
#   LAB_RTT_MS (unset: plain veth links; a number: each host's link is a
#     user-space delay relay, tests/lab/delay.c, giving that round-trip time)
# Needs: root, util-linux, iproute2, openssh-client, debootstrap.
set -euo pipefail
umask 022   # the upper-dir seeding relies on dirs being created 0755

PREFIX=${LAB_PREFIX:-cs}
NET=${LAB_NET:-10.250.0}
STATE=${LAB_STATE:-/var/lib/cargoship-lab/$PREFIX}
CACHE=${LAB_CACHE:-/var/lib/cargoship-lab/cache}
LABNS=$PREFIX-lab            # network namespace holding the bridge; clients run here
BR=${PREFIX}br               # bridge (in $LABNS)
CGNAME=${PREFIX}lab          # cgroup v2 subtree; one child cgroup per host
RUN=/run/cargoship-lab       # machine-wide bookkeeping shared by all labs (tmpfs:
                             # gone after a reboot, like the namespaces themselves)
SUITE=bookworm
# Bump when the rootfs/layer recipe changes: a cache built by an older recipe
# is then rebuilt instead of silently reused.
RECIPE=cargoship-lab-2
# nftables, python3(-yaml) and containerd (+ runc) on every host (netbase:
# /etc/protocols and /etc/services, without which firewalld dies); ufw,
# firewalld, fapolicyd and the SELinux stand-ins per flavour (layers below)
PKGS=openssh-server,openssh-sftp-server,runit,sudo,iproute2,procps,python3,python3-yaml,coreutils,util-linux,iputils-ping,netbase,nftables,containerd
SELF=$(readlink -f "$0")
# cgroup2 mount: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid
# (v1 + v2) machine like this one (check: findmnt -t cgroup2)
CG2=$(findmnt -rn -t cgroup2 -o TARGET 2>/dev/null | head -1 || true)   # empty inside `ip netns exec` (it remounts /sys)
# Inside `lab.sh exec` (a spec calling reset or reboot): `ip netns exec` gave us a mount
# namespace of our own with a fresh /sys, so mount the unified hierarchy there. Without it a
# host (re)started from a spec joined no cgroup of its own, and every such systemd host took
# the machine's root cgroup for its tree: two of them shared /system.slice/ssh.service, and
# one stopping a unit killed the other's processes.
if [ -z "$CG2" ] && [ "$(id -u)" = 0 ] && [ -d /sys/fs/cgroup ] && [ -z "$(ls -A /sys/fs/cgroup 2>/dev/null)" ] \
   && [ -n "$(ip netns identify 2>/dev/null)" ] && mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null; then
  CG2=/sys/fs/cgroup
fi

log() { echo "lab[$PREFIX]: $*" >&2; }
die() { log "$*"; exit 1; }
in_lab() { ip netns exec "$LABNS" "$@"; }
H=$STATE/hosts                # per-host state: $H/hN/{upper,work,merged,pid,flavour,lower,console.log}
# (host index I -> address $NET.$((10 + I)); written inline: no subshells in loops over 200 hosts)

# Names end up in interface names (IFNAMSIZ: 15 chars incl. "v200"), netns
# and cgroup names: keep them short and boring.
[[ $PREFIX =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "LAB_PREFIX must match [a-z][a-z0-9]{0,9}"
# LAB_NET a.b.c: one /24 on one bridge (hosts .11-.210). LAB_NET a.b ("wide"): a /16 for
# big labs, 200 hosts per /24 a.b.K.0/24 on bridge ${BR}K (a Linux bridge takes at most 1024
# ports), the lab netns routing between them.
WIDE=0
if [[ $NET =~ ^[0-9]{1,3}\.[0-9]{1,3}$ ]]; then WIDE=1
else [[ $NET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "LAB_NET must be a /24 prefix like 10.250.0 (or a /16 like 10.160)"; fi
PER_BR=200
# host_net I: sets IP, GW and HBR (host hI's address, gateway and bridge); no subshell, so
# loops over 1000 hosts stay cheap
host_net() {
  if [ "$WIDE" = 1 ]; then
    local b=$((($1 - 1) / PER_BR))
    IP=$NET.$b.$((11 + ($1 - 1) % PER_BR)) GW=$NET.$b.1 HBR=$BR$b
  else
    IP=$NET.$((10 + $1)) GW=$NET.1 HBR=$BR
  fi
}

# ======================================================================
# Cached images: base rootfs and layers (shared by all prefixes)
# ======================================================================

# Debian mirror: LAB_MIRROR, else the machine's apt sources (deb822 stanza or
# one-line entry for our suite; -security and third-party repos don't match).
mirror() {
  local m=${LAB_MIRROR:-}
  if [ -z "$m" ]; then
    m=$(awk -v s="$SUITE" '
      function flush() { if (!done && u != "" && (" " su " ") ~ (" " s " ")) { print u; done = 1 } u = ""; su = "" }
      /^[ \t]*$/ { flush(); next }
      /^URIs:/ { u = $2 }
      /^Suites:/ { $1 = ""; su = $0 }
      END { flush() }' /dev/null /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  fi
  if [ -z "$m" ]; then
    m=$(sed -n -E "s/^deb +(\[[^]]*\] +)?([^ ]+) +$SUITE( .*)?$/\2/p" \
      /dev/null /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)
  fi
  [ -n "$m" ] || die "no Debian $SUITE mirror in the apt sources; set LAB_MIRROR"
  echo "$m"
}

# Base rootfs: debootstrap minbase once, customised, built in rootfs.tmp and
# renamed into place; rootfs.ok (written last) marks it complete, so an
# interrupted build is never used.
build_rootfs() {
  local R=$CACHE/rootfs.tmp M
  [ "$(cat "$CACHE/rootfs.ok" 2>/dev/null)" = "$RECIPE" ] && return
  rebuilding rootfs "$CACHE/rootfs"
  rm -rf "$R" "$CACHE/rootfs" "$CACHE/rootfs.ok" "$CACHE"/layer-*   # layers depend on it
  M=$(mirror)
  log "building the base rootfs: debootstrap $SUITE from $M (one-time, ~40 s)"
  # In a private mount namespace: the proc/sys mounts debootstrap makes inside
  # the target vanish with it, even if it is interrupted.
  unshare --mount --propagation private \
    debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$R" "$M" >"$CACHE/debootstrap.log" 2>&1 \
    || die "debootstrap failed, see $CACHE/debootstrap.log"
  # openssh-server's postinst baked host keys into the image: every host
  # would share them. Each host gets its own ed25519 key at `up` instead.
  rm -f "$R"/etc/ssh/ssh_host_*
  cat >"$R/etc/ssh/sshd_config.d/cargoship-lab.conf" <<'EOF'
# cargoship lab: one host key type, key-only logins. MaxSessions/MaxStartups
# stay at sshd's defaults on purpose (tests depend on 10 and 10:30:100).
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
# Per-host keys are dropped into /etc/ssh/authorized_keys/ (a dir the lower
# layer already has with the same owner/mode), never into /root or /home,
# whose modes the upper dir would otherwise override (StrictModes).
AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/authorized_keys/%u
EOF
  mkdir -m 755 "$R/etc/ssh/authorized_keys"
  # tb: passwordless sudo. tbpw: sudo that needs a password (error-path tests).
  chroot "$R" useradd -m -u 1000 -s /bin/bash tb
  chroot "$R" useradd -m -u 1001 -s /bin/bash tbpw
  echo 'tbpw:labpassword' | chroot "$R" chpasswd
  echo 'tb ALL=(ALL) NOPASSWD: ALL' >"$R/etc/sudoers.d/tb"
  echo 'tbpw ALL=(ALL) ALL' >"$R/etc/sudoers.d/tbpw"
  chmod 440 "$R/etc/sudoers.d/tb" "$R/etc/sudoers.d/tbpw"
  # runit's placeholder service (sleep 6000) only costs a process per host
  rm -f "$R/etc/runit/runsvdir/default/default-syslog"
  # Login records exist as on a real host (sshd complains without them); each
  # host bind-mounts RAM copies over them (see host_init).
  chroot "$R" sh -ec 'for f in wtmp btmp lastlog; do touch /var/log/$f; chgrp utmp /var/log/$f; done
    chmod 664 /var/log/wtmp /var/log/lastlog; chmod 660 /var/log/btmp'
  # containerd is installed, not started (one per host would cost ~40 MiB
  # RSS): systemd hosts have the unit disabled, runit hosts a service dir
  # that is not linked into /etc/service. Its root /var/lib/containerd is a
  # per-host directory outside the overlay (bind-mounted at boot): its
  # overlayfs snapshotter cannot use an overlayfs as its upper layer.
  rm -f "$R/etc/systemd/system/multi-user.target.wants/containerd.service" \
    "$R/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/containerd.service" \
    "$R/var/lib/systemd/deb-systemd-helper-enabled/containerd.service.dsh-also"
  mkdir -m 711 "$R/var/lib/containerd"
  mkdir -p "$R/etc/sv/containerd"
  printf '#!/bin/sh\n# containerd under runit: ln -s /etc/sv/containerd /etc/service/ to start it\nexec containerd 2>&1\n' \
    >"$R/etc/sv/containerd/run"
  chmod 755 "$R/etc/sv/containerd/run"
  : >"$R/etc/resolv.conf"   # debootstrap copied the machine's; hosts get no DNS
  : >"$R/etc/machine-id"    # seeded per host at `up`
  rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/*
  mv "$R" "$CACHE/rootfs"
  echo "$RECIPE" >"$CACHE/rootfs.ok"
}

# About to replace an image (missing, or built by another RECIPE): refuse
# while another lab's hosts have this cache's images as their lowerdirs
# (deleting a lower under a mounted overlay breaks them); our own hosts are
# recreated by cmd_up afterwards (REBUILT).
REBUILT=0
rebuilding() {  # WHAT PATH-IT-REPLACES
  local l n
  [ -e "$2" ] || return 0   # new: nobody can be using it
  for l in "$RUN"/labs/*; do
    [ -e "$l" ] || continue
    n=${l##*/}
    [ "$n" != "$PREFIX" ] && [ -e "/run/netns/$n-lab" ] && [ "$(cut -d' ' -f2 "$l")" = "$CACHE" ] \
      && die "$1 in $CACHE must be (re)built (recipe $RECIPE) but lab $n still runs on it: down it first, or set LAB_CACHE"
  done
  REBUILT=1
}

# Layer NAME = packages installed over BASE (a lowerdir string), captured as
# the upper dir of a throw-away overlay, so it holds only the delta. Built in
# layer-NAME.tmp and renamed; layer-NAME.ok marks it complete. POST (optional)
# is a shell script run in the chroot after the packages are in.
build_layer() {
  local name=$1 base=$2 pkgs=$3 post=${4:-} L=$CACHE/layer-$1 M
  [ "$(cat "$L.ok" 2>/dev/null)" = "$RECIPE" ] && return
  rebuilding "layer $name" "$L"
  rm -rf "$L" "$L.ok" "$L.tmp" "$L.work" "$L.mnt"
  mkdir -p "$L.tmp" "$L.work" "$L.mnt"
  M=$(mirror)
  log "building layer $name ($pkgs; one-time, ~10-40 s)"
  # private mount ns: the overlay and proc mounts vanish with it, even on
  # failure. policy-rc.d forbids maintainer scripts to start daemons: the
  # chroot shares the machine's network and mounts, and a firewalld or
  # fapolicyd started there would act on the machine itself.
  unshare --mount --propagation private bash -ec '
    L=$1 base=$2 mirror=$3 suite=$4 pkgs=$5 post=$6 M=$1.mnt
    mount -t overlay overlay -o "lowerdir=$base,upperdir=$L.tmp,workdir=$L.work" "$M"
    mount -t proc proc "$M/proc"
    cp /etc/resolv.conf "$M/etc/resolv.conf"
    printf "deb %s %s main\n" "$mirror" "$suite" >"$M/etc/apt/sources.list"
    printf "#!/bin/sh\nexit 101\n" >"$M/usr/sbin/policy-rc.d"; chmod 755 "$M/usr/sbin/policy-rc.d"
    chroot "$M" sh -ec "apt-get -q update
      DEBIAN_FRONTEND=noninteractive apt-get -qy install --no-install-recommends $pkgs
      apt-get clean; rm -rf /var/lib/apt/lists/*"
    [ -z "$post" ] || chroot "$M" sh -ec "$post"
    rm -f "$M/usr/sbin/policy-rc.d"
    : >"$M/etc/resolv.conf"' _ "$L" "$base" "$M" "$SUITE" "$pkgs" "$post" >"$CACHE/layer-$name.log" 2>&1 \
    || die "layer $name failed, see $CACHE/layer-$name.log"
  rm -rf "$L.work" "$L.mnt"
  # runit's postinst re-adds its placeholder service whenever packages change
  rm -f "$L.tmp/etc/runit/runsvdir/default/default-syslog"
  "fix_${name%%-*}" "$L.tmp" "${name#*-}"
  mv "$L.tmp" "$L"
  echo "$RECIPE" >"$L.ok"
}

# systemd as PID 1 of a container: no console to run a getty on; runit's
# own unit would start a second sshd (Debian's /etc/service/ssh) next to
# ssh.service; timers that would write into the upper dir (or try the
# network) at random times are masked; the journal stays in /run so an idle
# host's upper dir does not grow. systemd-logind is masked: where dbus is
# installed (rocky/systemd, for firewalld) it would track every SSH login and
# start a user@0 manager, writing /run/systemd/users and /run/user/0 at each
# login (specs prove a dry run changes nothing there); hosts without dbus
# never ran it anyway. Boot-time units with nothing to do in a host that
# shares the machine's kernel (kernel fs mounts, modprobe@, ext4 scrubbing,
# remounting / from an fstab it has not) are masked too: 25 systemd hosts
# boot on 2 cores.
fix_systemd() {
  local u
  for u in console-getty.service runit.service apt-daily.timer apt-daily-upgrade.timer \
    dpkg-db-backup.timer e2scrub_all.timer fstrim.timer systemd-logind.service \
    e2scrub_reap.service systemd-remount-fs.service modprobe@.service dev-hugepages.mount dev-mqueue.mount \
    sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount sys-fs-fuse-connections.mount; do
    ln -sf /dev/null "$1/etc/systemd/system/$u"
  done
  mkdir -p "$1/etc/systemd/journald.conf.d"
  printf '[Journal]\nStorage=volatile\n' >"$1/etc/systemd/journald.conf.d/cargoship-lab.conf"
}

# "Rocky Linux 9" look-alike: Debian's rpm + dnf, Rocky's os-release and
# release files, and /etc/debian_version hidden by an overlayfs whiteout
# (char device 0:0). Not a real EL userland (see README).
fix_rocky() {
  cat >"$1/usr/lib/os-release" <<'EOF'
NAME="Rocky Linux"
VERSION="9.3 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.3"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.3 (Blue Onyx)"
ANSI_COLOR="0;32"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
EOF
  rm -f "$1/etc/os-release"; ln -s ../usr/lib/os-release "$1/etc/os-release"
  echo "Rocky Linux release 9.3 (Blue Onyx)" >"$1/etc/rocky-release"
  ln -sf rocky-release "$1/etc/redhat-release"; ln -sf rocky-release "$1/etc/system-release"
  rm -f "$1/etc/debian_version"; mknod "$1/etc/debian_version" c 0 0
  mkdir -p "$1/etc/dnf/vars" "$1/etc/yum.repos.d"; echo 9 >"$1/etc/dnf/vars/releasever"
  # nftables as EL packs it: the boot-time file is /etc/sysconfig/nftables.conf
  # (comments only, service disabled); Debian's /etc/nftables.conf is hidden
  mkdir -p "$1/etc/sysconfig"
  printf '# Uncomment the include statement here to load the default config sample\n# in /etc/nftables for nftables service.\n\n#include "/etc/nftables/main.nft"\n' \
    >"$1/etc/sysconfig/nftables.conf"
  chmod 600 "$1/etc/sysconfig/nftables.conf"
  rm -f "$1/etc/nftables.conf"; mknod "$1/etc/nftables.conf" c 0 0
  [ "$2" = systemd ] || return 0
  mkdir -p "$1/usr/lib/systemd/system"
  sed -e 's#/etc/nftables.conf#/etc/sysconfig/nftables.conf#g' "$CACHE/rootfs/usr/lib/systemd/system/nftables.service" \
    >"$1/usr/lib/systemd/system/nftables.service"
  # fapolicyd: installed, disabled (as on EL, where it is an opt-in), and
  # permissive: started, it only logs its decisions and denies nothing. It
  # marks only mounts of the host's own mount namespace (overlay root and
  # tmpfs; never a filesystem mark, never the ext4 that /var/lib/containerd
  # is bound from). It runs as root: dropping to its own user needs
  # CAP_SYS_RESOURCE, which this machine's root does not have at all.
  sed -i -E -e 's/^permissive *=.*/permissive = 1/' -e 's/^watch_fs *=.*/watch_fs = overlay,tmpfs/' \
    -e 's/^allow_filesystem_mark *=.*/allow_filesystem_mark = 0/' -e 's/^uid *=.*/uid = root/' \
    -e 's/^gid *=.*/gid = root/' "$1/etc/fapolicyd/fapolicyd.conf"
  [ "$(grep -cE '^(permissive = 1|watch_fs = overlay,tmpfs|allow_filesystem_mark = 0|uid = root|gid = root)$' \
    "$1/etc/fapolicyd/fapolicyd.conf")" = 5 ]
  rm -f "$1/etc/systemd/system/multi-user.target.wants/fapolicyd.service"
  # firewalld: enabled (running after boot), as on EL; LAB_FIREWALLD=stopped
  # disables it per host at `up`. Its log goes to /run, not the upper dir.
  [ -L "$1/etc/systemd/system/multi-user.target.wants/firewalld.service" ] \
    || ln -s /usr/lib/systemd/system/firewalld.service "$1/etc/systemd/system/multi-user.target.wants/firewalld.service"
  ln -sf /run/firewalld.log "$1/var/log/firewalld"
}

# Debian flavour: ufw as Debian installs it (ufw.service enabled, but
# ENABLED=no in ufw.conf, so `ufw status` says inactive).
fix_debian() { grep -q '^ENABLED=no' "$1/etc/ufw/ufw.conf"; }

# lowerdir string for a flavour (leftmost wins). The debian and rocky layers
# are built per init on top of that init's stack, so their dpkg status,
# passwd/group and ld.so.cache include the init's packages instead of hiding
# them; the SELinux stand-in layer (no packages) sits on top for rocky.
lower_of() {  # OS INIT
  local l=$CACHE/rootfs
  [ "$2" != systemd ] || l=$CACHE/layer-systemd:$l
  l=$CACHE/layer-$1-$2:$l
  [ "$1" != rocky ] || l=$SELINUX_LAYER:$l
  echo "$l"
}

# Build whatever the requested flavours need, under a lock: several labs
# (prefixes) share one cache and may run `up` at the same time.
ensure_images() {  # "os init" pairs...
  local f
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.lock"; flock 8
  build_rootfs
  for f in "$@"; do
    case $f in *" systemd") build_layer systemd "$CACHE/rootfs" "systemd systemd-sysv" ;; esac
  done
  for f in "$@"; do
    case $f in
      "debian runit") build_layer debian-runit "$CACHE/rootfs" "ufw" ;;
      "debian systemd") build_layer debian-systemd "$CACHE/layer-systemd:$CACHE/rootfs" "ufw" ;;
      "rocky runit") build_layer rocky-runit "$CACHE/rootfs" "rpm dnf dnf-plugins-core file" "$(el_base_rpm runit)" ;;
      "rocky systemd") build_layer rocky-systemd "$CACHE/layer-systemd:$CACHE/rootfs" \
        "rpm dnf dnf-plugins-core file dbus firewalld fapolicyd" "$(el_base_rpm systemd)" ;;
    esac
  done
  case " $* " in *"rocky "*) build_selinux ;; esac
  exec 8>&-
}

# Script (run in the rocky layer's chroot) that builds and installs an empty
# noarch rpm providing what the Debian userland underneath really has. The
# rpm database starts empty, so without it `dnf install ./x.rpm` refuses any
# package that needs /bin/sh ("nothing provides /bin/sh needed by ...").
el_base_rpm() {  # INIT
  local prov="/bin/sh, /bin/bash, /usr/bin/sh, /usr/bin/bash, /usr/bin/env, /usr/bin/python3, bash, coreutils,"
  prov+=" glibc, shadow-utils, util-linux, findutils, grep, sed, gawk, tar, gzip, procps-ng, iproute, sudo,"
  prov+=" openssh-server, python3, nftables, containerd, runc"
  [ "$1" != systemd ] || prov+=", systemd, systemd-units, dbus, firewalld, fapolicyd"
  cat <<EOF
# the rpm database where EL keeps it, for every user (Debian's rpm would use ~/.rpmdb)
mkdir -p /etc/rpm /var/lib/rpm
echo '%_dbpath /var/lib/rpm' >/etc/rpm/macros.dbpath
mkdir -p /tmp/elbase/SPECS
cat >/tmp/elbase/SPECS/lab-el-base.spec <<'SPEC'
Name: lab-el-base
Version: 9.3
Release: 1
Summary: What the lab host's Debian userland provides, for rpm's dependency checks
License: MIT
BuildArch: noarch
Provides: $prov
%description
No files: only tells rpm and dnf which capabilities this host already has.
%files
SPEC
rpmbuild --quiet --define '_topdir /tmp/elbase' -bb /tmp/elbase/SPECS/lab-el-base.spec
rpm -i /tmp/elbase/RPMS/noarch/lab-el-base-9.3-1.noarch.rpm
rpm -q lab-el-base
rm -rf /tmp/elbase /var/tmp/rpm-tmp.*
EOF
}

# The SELinux stand-in layer (rocky hosts): tests/lab/selinux/ copied in by
# its install.sh, a new layer whenever those files change, so editing the
# stand-in never rebuilds the package layers.
# The layer's name carries the hash: a layer a running host (of any lab on
# this cache) has as its lowerdir is never rewritten underneath it.
selinux_layer() { echo "$CACHE/layer-selinux-$(cat "${SELF%/*}"/selinux/* | sha256sum | cut -c1-12)"; }
build_selinux() {
  local L
  L=$(selinux_layer)
  [ "$(cat "$L.ok" 2>/dev/null)" = "$RECIPE" ] && return
  rm -rf "$L" "$L.ok" "$L.tmp"
  "${SELF%/*}/selinux/install.sh" "$L.tmp" || die "SELinux stand-in layer failed"
  mv "$L.tmp" "$L"
  echo "$RECIPE" >"$L.ok"
}

# ======================================================================
# Hosts
# ======================================================================

hosts() { [ -d "$STATE/hosts" ] && find "$STATE/hosts" -mindepth 1 -maxdepth 1 -name 'h*' -printf '%f\n' | sort -V || true; }
unshare_pid() { local p=; [ ! -f "$H/h$1/pid" ] || read -r p <"$H/h$1/pid" || true; echo "$p"; }
running() {  # recorded pid alive AND still our unshare for this lab+host (pid reuse guard)
  local p='' a
  [ -f "$H/h$1/pid" ] && read -r p <"$H/h$1/pid" && [ -n "$p" ] \
    && mapfile -d '' a 2>/dev/null <"/proc/$p/cmdline" && [[ " ${a[*]} " == *" _init $STATE h$1 "* ]]
}
pid1() {  # the host's PID 1 = the only child of its unshare
  local p c
  running "$1" || return 1
  read -r p <"$H/h$1/pid"
  read -r c <"/proc/$p/task/$p/children" || true   # no trailing newline there
  [ -n "$c" ] && echo "$c"
}
dead() {  # gone, or a zombie (its namespaces are already released then)
  local st
  [ ! -e "/proc/$1" ] || { read -r st 2>/dev/null <"/proc/$1/stat"; st=${st##*) }; [ "${st%% *}" = Z ]; }
}

host_down() {  # I
  local i=$1 d p c cg t
  d=$H/h$i cg=$CG2/$CGNAME/h$i
  # 1. kill: cgroup.kill takes everything in the host's cgroup (its unshare,
  # PID 1 and all descendants, even with a lost pid file); SIGKILL to PID 1
  # also makes the kernel kill the whole PID namespace.
  [ ! -e "$cg/cgroup.kill" ] || echo 1 >"$cg/cgroup.kill" 2>/dev/null || true
  if running "$i"; then
    read -r p <"$d/pid"; c=$(pid1 "$i" || true)
    # shellcheck disable=SC2086  # $c: zero or one pid
    kill -KILL $c "$p" 2>/dev/null || true
    # Killed processes are reparented to the machine's init, which may reap
    # them only seconds later: "dead" = gone or zombie, so don't wait for reaping.
    for p in $c $p; do t=500; while ! dead "$p" && [ $((t -= 1)) -gt 0 ]; do sleep 0.02; done; done
  fi
  if [ -d "$cg" ]; then   # wait until the cgroup is empty (zombies don't count)
    t=500; while grep -q '^populated 1' "$cg/cgroup.events" 2>/dev/null && [ $((t -= 1)) -gt 0 ]; do sleep 0.02; done
  fi
  # the delay relay (LAB_RTT_MS) lives in the lab's netns: its own pid file
  if [ -s "$d/relay.pid" ]; then read -r p <"$d/relay.pid"; kill -KILL "$p" 2>/dev/null || true; fi
  # 2. belt and braces: anything still in the host's netns is killed by pid
  if [ -e "/run/netns/$PREFIX-h$i" ]; then
    for p in $(ip netns pids "$PREFIX-h$i" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$PREFIX-h$i"   # also destroys eth0 and its veth peer in the lab
  fi
  # 3. a systemd host leaves sub-cgroups behind: remove leaves first
  [ ! -d "$cg" ] || find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || log "cgroup $cg not removed"
  # 4. the overlay was mounted only in the host's private mount namespace, so
  # there is nothing to unmount here; refuse to rm through a mount anyway.
  if [ -d "$d" ]; then
    ! mountpoint -q "$d/merged" || die "$d/merged is mounted in the root namespace; not removing"
    rm -rf "$d"
  fi
}

# Seed the empty upper dir before the overlay is mounted, only with files in
# /etc whose parent dirs have the same owner/mode as in the lower layer (the
# merged dir takes the upper's attributes; /root or /home/tb would break
# sshd's StrictModes). Once mounted, write only through the host's view
# (/proc/PID/root), never into the upper dir.
host_seed() {  # I OS INIT [firewalld-running|firewalld-stopped]
  local i=$1 h=h$1 d u ip w IP GW HBR
  host_net "$i"
  d=$H/h$i ip=$IP
  mkdir -p "$d/upper/etc/ssh/authorized_keys" "$d/work" "$d/merged"
  mkdir -m 711 "$d/containerd"   # bind-mounted at /var/lib/containerd (see build_rootfs)
  if [ "${4:-}" = firewalld-stopped ]; then
    # installed but disabled, as after `systemctl disable firewalld`: overlay
    # whiteouts (char device 0:0) hide the layer's enable links
    w=$d/upper/etc/systemd/system
    mkdir -p "$w/multi-user.target.wants"
    mknod "$w/multi-user.target.wants/firewalld.service" c 0 0
    mknod "$w/dbus-org.fedoraproject.FirewallD1.service" c 0 0
  fi
  echo "$h" >"$d/upper/etc/hostname"
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n%s\t%s.lab.internal %s\n' \
    "$ip" "$h" "$h" >"$d/upper/etc/hosts"
  # unique per host: engines (k0s etc.) derive node identity from it
  printf '%04x%04x%04x%04x%04x%04x%04x%04x\n' $((SRANDOM & 65535)) $((SRANDOM & 65535)) $((SRANDOM & 65535)) \
    $((SRANDOM & 65535)) $((SRANDOM & 65535)) $((SRANDOM & 65535)) $((SRANDOM & 65535)) $((SRANDOM & 65535)) \
    >"$d/upper/etc/machine-id"
  chmod 444 "$d/upper/etc/machine-id"
  # all three client keys are authorized for all three users
  for u in root tb tbpw; do cat "$STATE"/id_{ed25519,ecdsa,rsa}.pub >"$d/upper/etc/ssh/authorized_keys/$u"; done
  lower_of "$2" "$3" >"$d/lower"
  echo "$2 $3${4:+ $4}" >"$d/flavour"
  # the shared host keys were deleted from the rootfs: one ed25519 key per host
  ssh-keygen -q -t ed25519 -N '' -C "root@$h" -f "$d/upper/etc/ssh/ssh_host_ed25519_key"
}

# LAB_RTT_MS: instead of a veth pair, each host's link is two taps joined by
# cs-lab-delay (tests/lab/delay.c), which holds every frame RTT/2 each way:
# the kernel here has no netem. Built on first use from the source (or
# LAB_DELAY_BIN); frames between two hosts cross two relays, each holding
# them RTT/4, so every pair sees the same RTT. Its pid is kept in the host's dir and killed by host_down.
delay_bin() {
  local src=${SELF%/*}/delay.c bin=${LAB_DELAY_BIN:-$STATE/cs-lab-delay}
  if [ -z "${LAB_DELAY_BIN:-}" ] && { [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; }; then
    cc -std=c11 -O2 -Wall -Wextra -Werror -o "$bin.tmp" "$src" && mv "$bin.tmp" "$bin" || die "building $bin failed"
  fi
  echo "$bin"
}
delay_wire() {  # I...
  local i bin us
  [[ $LAB_RTT_MS =~ ^[0-9]{1,5}$ ]] || die "LAB_RTT_MS must be a whole number of milliseconds"
  bin=$(delay_bin) us=$((LAB_RTT_MS * 500))
  for i in "$@"; do
    mkdir -p "$H/h$i"
    "$bin" "/run/netns/$PREFIX-h$i" eth0 "/run/netns/$LABNS" "${PREFIX}v$i" "$us" "$NET.1" >"$H/h$i/relay.pid" 7>&- 8>&- 9>&- \
      2>>"$H/h$i/relay.log" || die "h$i: cs-lab-delay failed (see $H/h$i/relay.log)"
    echo "$LAB_RTT_MS" >"$H/h$i/rtt"
    printf 'link set eth0 address 02:6c:61:62:%02x:%02x\n' $((i / 256)) $((i % 256)) | ip -n "$PREFIX-h$i" -batch -
  done
  for i in "$@"; do printf 'link set %s master %s up\n' "${PREFIX}v$i" "$BR"; done | ip -n "$LABNS" -batch -
}

# Network for hosts I...: a netns each and a veth pair created from the lab
# (one `ip -batch` for all), lab end on the bridge, host end eth0 (addressed
# by the host itself in host_init, so that part runs in parallel). Fixed MAC
# per host: a re-created host keeps its MAC, so peers' ARP caches stay valid
# (a new MAC on a known IP costs ~30 s of timeouts).
hosts_wire() {  # I...
  local i IP GW HBR
  for i in "$@"; do ip netns add "$PREFIX-h$i"; done
  if [ -n "${LAB_RTT_MS:-}" ]; then delay_wire "$@"; return; fi
  for i in "$@"; do
    host_net "$i"
    printf 'link add %s type veth peer name eth0 netns %s address 02:6c:61:62:%02x:%02x\nlink set %s master %s up\n' \
      "${PREFIX}v$i" "$PREFIX-h$i" $((i / 256)) $((i % 256)) "${PREFIX}v$i" "$HBR"
  done | ip -n "$LABNS" -batch -
}

host_start() {  # I INIT
  local i=$1 init=$2 h=h$1 d cg IP GW HBR
  d=$H/h$i cg=$CG2/$CGNAME/h$i
  host_net "$i"
  # Each host gets its own cgroup (one cgroup.kill ends it) and a cgroup
  # namespace rooted there: systemd needs a writable cgroup2 tree of its own.
  mkdir -p "$cg"
  # Start: the subshell joins the cgroup, then execs setsid (no fork: a
  # background job of a script is no process group leader) -> nsenter (no
  # fork for --net) -> unshare, so $! is unshare's pid. --kill-child ties
  # the host's lifetime to it. fds 7-9 (our locks) must not leak into hosts.
  ( echo "$BASHPID" >"$cg/cgroup.procs"
    exec setsid nsenter --net="/run/netns/$PREFIX-$h" \
      unshare --mount --propagation private --uts --ipc --pid --cgroup --kill-child \
      "$SELF" _init "$STATE" "$h" "$init" "$IP" "$GW" ) >"$d/console.log" 2>&1 </dev/null 7>&- 8>&- 9>&- &
  echo $! >"$d/pid"
}

# Runs as PID 1 of the new PID namespace, in a private copy of the mount ns.
host_init() {  # STATE hN INIT ADDRESS GATEWAY
  local d=$1/hosts/$2 h=$2 init=$3 m n
  m=$d/merged
  # the default route points at the bridge, but the lab neither forwards nor
  # has an uplink: nothing a host sends can leave the lab
  # flushed first: a rebooted host finds its eth0 (its netns outlives PID 1) addressed
  printf 'link set lo up\naddr flush dev eth0\naddr add %s/24 dev eth0\nlink set eth0 up\nroute add default via %s\n' \
    "$4" "$5" | ip -batch -
  mount -t overlay overlay -o "lowerdir=$(cat "$d/lower"),upperdir=$d/upper,workdir=$d/work" "$m"
  mount -t proc proc "$m/proc"                   # our PID namespace
  mount -t sysfs sysfs "$m/sys"                  # sysfs of our netns: /sys/class/net = lo, eth0
  mount -t cgroup2 cgroup2 "$m/sys/fs/cgroup"    # root = our cgroup namespace
  mount -t tmpfs -o mode=755,size=1m tmpfs "$m/dev"
  for n in null zero full random urandom tty; do touch "$m/dev/$n"; mount --bind "/dev/$n" "$m/dev/$n"; done
  mkdir "$m/dev/pts" "$m/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$m/dev/pts"   # own ptys for ssh -t
  ln -s pts/ptmx "$m/dev/ptmx"; ln -s /proc/self/fd "$m/dev/fd"
  ln -s /proc/self/fd/0 "$m/dev/stdin"; ln -s /proc/self/fd/1 "$m/dev/stdout"; ln -s /proc/self/fd/2 "$m/dev/stderr"
  mount -t tmpfs -o mode=1777 tmpfs "$m/dev/shm"
  mount -t tmpfs -o mode=755 tmpfs "$m/run"
  mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
  [ ! -d "$m/var/lib/containerd" ] || mount --bind "$d/containerd" "$m/var/lib/containerd"
  # sshd writes wtmp/lastlog on every login: keep those in RAM (bind-mounted
  # over the rootfs' files), so a login leaves no trace in the upper dir and
  # tests can diff it to prove that a dry run wrote nothing.
  mkdir -m 700 "$m/run/lab-login-records"
  for n in wtmp btmp lastlog; do
    cp -p "$m/var/log/$n" "$m/run/lab-login-records/$n"
    mount --bind "$m/run/lab-login-records/$n" "$m/var/log/$n"
  done
  hostname "$h"
  # pivot_root, not chroot: afterwards the old root with every mount of the
  # machine (including the /run/netns/* handles of the other hosts, which
  # would otherwise keep their netns alive after `ip netns del`) is detached.
  cd "$m"; pivot_root . mnt; umount -l /mnt; cd /
  if [ "$init" = systemd ]; then   # container= makes systemd skip hardware/kernel setup
    exec env -i container=cargoship-lab PATH=/usr/sbin:/usr/bin:/sbin:/bin /lib/systemd/systemd
  fi
  mkdir -p /run/runit/supervise /run/sshd
  # runit services log through svlogd into /var/log/runit/NAME (sshd: one
  # line per login); keep that in RAM, like the systemd hosts' journal, so a
  # login leaves no trace in the upper dir. The log dirs must exist.
  local logs; logs=$(ls /var/log/runit)
  mount -t tmpfs -o mode=755 tmpfs /var/log/runit
  for n in $logs; do mkdir "/var/log/runit/$n"; done
  # runsvdir reaps every child, so it is a valid PID 1; Debian already ships
  # and enables /etc/service/ssh.
  exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    runsvdir -P /etc/service 'log: ......................................................'
}

# ======================================================================
# Client files
# ======================================================================

write_files() {  # N: client files for hosts 1..N, each written to .tmp and renamed
  local n=$1 i f os init t key role k=$STATE/id_ed25519 IP GW HBR
  { echo "# generated by lab.sh; use inside the lab: lab.sh exec ssh -F $STATE/ssh_config h1"
    for i in $(seq 1 "$n"); do
      host_net "$i"
      printf 'Host h%s %s\n  HostName %s\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n' "$i" "$IP" "$IP" "$k"
      printf '  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n' "$STATE/known_hosts"
      printf '  BatchMode yes\n  ConnectTimeout 10\n  LogLevel ERROR\n'
    done
  } >"$STATE/ssh_config.tmp"
  for i in $(seq 1 "$n"); do
    read -r t key _ <"$H/h$i/upper/etc/ssh/ssh_host_ed25519_key.pub"
    host_net "$i"
    echo "h$i,$IP $t $key"
  done >"$STATE/known_hosts.tmp"
  { echo "[lab]"
    for i in $(seq 1 "$n"); do host_net "$i"; echo "h$i ansible_host=$IP"; done
    printf '[lab:vars]\nansible_user=root\nansible_python_interpreter=/usr/bin/python3\n'
    printf "ansible_ssh_common_args='-F %s'\n" "$STATE/ssh_config"
  } >"$STATE/inventory.ini.tmp"
  { printf 'apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: lab\nspec:\n'
    printf '  config:\n    loadbalancer: h1.lab.internal\n  hosts:\n'
    for i in $(seq 1 "$n"); do   # h1 is the (only) controller, all others are workers
      role=worker; [ "$i" != 1 ] || role=controller
      host_net "$i"
      printf '    - role: %s\n      ssh:\n        address: %s\n        user: root\n        keyPath: %s\n' \
        "$role" "$IP" "$k"
    done
  } >"$STATE/cluster.yaml.tmp"
  for i in $(seq 1 "$n"); do
    read -r os init _ <"$H/h$i/flavour"
    host_net "$i"
    printf 'h%s\t%s\t%s\t%s\n' "$i" "$IP" "$os" "$init"
  done >"$STATE/hosts.tsv.tmp"
  for f in ssh_config known_hosts inventory.ini cluster.yaml hosts.tsv; do mv "$STATE/$f.tmp" "$STATE/$f"; done
}

# ======================================================================
# Commands
# ======================================================================

lock() {  # serialise up/down/purge of one prefix
  mkdir -p "$RUN/labs"
  exec 9>"$RUN/$PREFIX.lock"; flock 9
}
# Serialises what all labs share: the registry $RUN/labs (who is up), the
# inotify sysctl, and /run/netns (created by the first `ip netns add`,
# unmounted by the last `down`).
machine_lock() { exec 7>"$RUN/machine.lock"; flock 7; }
machine_unlock() { exec 7>&-; }

# Raise fs.inotify.max_user_instances for systemd hosts: each systemd holds
# ~5 inotify instances and the limit (default 128) counts every root process
# of the machine, across namespaces; the ~26th systemd host dies silently.
# The original value is kept machine-wide and restored by the last lab down.
raise_inotify() {
  [ "$(sysctl -n fs.inotify.max_user_instances)" -lt 8192 ] || return 0
  [ -f "$RUN/inotify.orig" ] || sysctl -n fs.inotify.max_user_instances >"$RUN/inotify.orig"
  sysctl -qw fs.inotify.max_user_instances=8192
}

# Creates hosts ${todo[@]} of flavour ${fl[i]} and waits until hosts 1..$n all answer
# (bash's dynamic scope: the caller's locals n, fl and todo).
# A systemd host has booted when its job queue is empty and /run/nologin is gone: until
# systemd-user-sessions removes it, sshd (pam_nologin) lets root in but closes every other
# user's session ("Connection closed"), so a spec logging in as tb at once would fail. Early
# in a boot systemctl may answer "offline" (no bus yet): asked again. The state is printed
# last, so a wait cut short by timeout prints nothing. Bounded by BOOT_WAIT seconds (a loaded
# machine boots 50 hosts slowly).
BOOTED='until st=$(systemctl is-system-running --wait 2>/dev/null); [ "$st" = running ] || [ "$st" = degraded ]
do sleep 0.2; done; while [ -e /run/nologin ]; do sleep 0.1; done; echo "$st"'
BOOT_WAIT=${LAB_BOOT_WAIT:-180}

start_hosts() {
  local i p ips states h init bad="" seeding=() IP GW HBR
  # seed in parallel (ssh-keygen dominates), wire all at once, then start
  # all (each host addresses its own eth0 while it boots)
  # shellcheck disable=SC2086  # fl[i] is "OS INIT [FIREWALLD]"
  for i in "${todo[@]}"; do host_seed "$i" ${fl[i]} & seeding+=($!); done
  for p in "${seeding[@]}"; do wait "$p" || die "preparing a host's upper dir failed"; done
  [ ${#todo[@]} = 0 ] || hosts_wire "${todo[@]}"
  for i in "${todo[@]}"; do read -r _ init _ <<<"${fl[i]}"; host_start "$i" "$init"; done
  write_files "$n"
  # Wait from inside the lab until every sshd accepts connections; a host
  # whose unshare died meanwhile (e.g. a mount failed in _init) is reported
  # at once instead of after the timeout (/proc is the machine's in the lab).
  ips=$(for i in $(seq 1 "$n"); do host_net "$i"; echo "h$i:$IP:$(unshare_pid "$i")"; done | tr '\n' ' ')
  in_lab timeout $((60 + n / 5)) bash -c 'for x in '"$ips"'; do IFS=: read -r h ip p <<<"$x"
      until (exec 3<>"/dev/tcp/$ip/22") 2>/dev/null; do
        [ -e "/proc/$p" ] || { echo "$h died while booting" >&2; exit 1; }; sleep 0.05; done; done' \
    || die "sshd did not come up within $((60 + n / 5)) s; see $STATE/hosts/hN/console.log"
  # systemd hosts: wait (bounded) until boot finished, so tests can start at
  # once. nsenter into the host's mount+pid ns: no ssh handshake needed.
  states=$(for i in $(seq 1 "$n"); do
      [[ ${fl[i]} == *" systemd"* ]] || continue
      p=$(pid1 "$i") || { echo "h$i:dead"; continue; }
      ( ready=$(timeout "$BOOT_WAIT" nsenter -t "$p" -m -p env -i PATH=/usr/bin:/bin sh -c "$BOOTED" 2>/dev/null) || true
        echo "h$i:${ready:-timeout}" ) &
    done; wait)
  for h in $states; do [[ $h == *:running || $h == *:degraded ]] || bad+=" $h"; done
  [ -z "$bad" ] || die "systemd hosts not booted after $BOOT_WAIT s:$bad (see lab.sh ssh I systemctl --failed)"
}

# Wide labs: bridges ${BR}0..K for N hosts (one per 200 hosts, fixed MACs), and a neighbour
# table big enough for them: its limits (gc_thresh*) are machine-wide and count the entries
# of every namespace (the lab's ~N, each host's one or two), default 1024. The old values
# are kept machine-wide and restored by the last lab down, as the inotify limit.
wide_bridges() {  # N
  local b
  for b in $(seq 0 $((($1 - 1) / PER_BR))); do
    ip -n "$LABNS" link show "$BR$b" >/dev/null 2>&1 && continue
    printf 'link add %s address 02:6c:61:62:fe:%02x type bridge\naddr add %s.%s.1/24 dev %s\nlink set %s up\n' \
      "$BR$b" "$b" "$NET" "$b" "$BR$b" "$BR$b"
  done | ip -n "$LABNS" -batch -
  machine_lock
  if [ "$(sysctl -n net.ipv4.neigh.default.gc_thresh3)" -lt 16384 ]; then
    [ -f "$RUN/neigh.orig" ] || sysctl -n net.ipv4.neigh.default.gc_thresh{1,2,3} | tr '\n' ' ' >"$RUN/neigh.orig"
    sysctl -qw net.ipv4.neigh.default.gc_thresh1=4096 net.ipv4.neigh.default.gc_thresh2=8192 \
      net.ipv4.neigh.default.gc_thresh3=16384
  fi
  machine_unlock
}

cmd_up() {
  local n=${1:-} i h k os init t0=$EPOCHREALTIME fl=() need=() cur ready p states bad="" ips
  local max=200; [ "$WIDE" = 0 ] || max=2000
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le "$max" ] || die "usage: lab.sh up N (N = 1..$max)"
  local -a oses inits
  IFS=, read -ra oses <<<"${LAB_OS:-debian}"
  IFS=, read -ra inits <<<"${LAB_INIT:-systemd}"
  for os in "${oses[@]}"; do [[ $os =~ ^(debian|rocky)$ ]] || die "LAB_OS: unknown '$os' (debian|rocky)"; done
  for init in "${inits[@]}"; do [[ $init =~ ^(systemd|runit)$ ]] || die "LAB_INIT: unknown '$init' (systemd|runit)"; done
  local fw=${LAB_FIREWALLD:-running}
  [[ $fw =~ ^(running|stopped)$ ]] || die "LAB_FIREWALLD: unknown '$fw' (running|stopped)"
  # fl[i] = "OS INIT" (+ " firewalld-running|stopped" for rocky/systemd)
  for i in $(seq 1 "$n"); do
    fl[i]="${oses[(i - 1) % ${#oses[@]}]} ${inits[(i - 1) % ${#inits[@]}]}"
    [ "${fl[i]}" != "rocky systemd" ] || fl[i]+=" firewalld-$fw"
  done
  mapfile -t need < <(printf '%s\n' "${fl[@]}" | cut -d' ' -f1,2 | sort -u)
  [ -n "$CG2" ] || die "no cgroup2 mount (findmnt -t cgroup2): hosts need their own cgroup"
  lock
  ensure_images "${need[@]}"
  SELINUX_LAYER=$(selinux_layer)
  if [ "$REBUILT" = 1 ]; then   # our running hosts sit on the images just replaced
    for h in $(hosts); do host_down "${h#h}"; done
  fi
  mkdir -p "$STATE/hosts" "$CG2/$CGNAME"
  for k in ed25519 ecdsa rsa; do
    [ -f "$STATE/id_$k" ] || ssh-keygen -q -t "$k" -N '' -C "cargoship-lab-$PREFIX" -f "$STATE/id_$k"
  done
  machine_lock
  if [ ! -e "/run/netns/$LABNS" ]; then
    for h in $(hosts); do host_down "${h#h}"; done   # their veths died with the old lab
    ip netns add "$LABNS"
    ip -n "$LABNS" link set lo up
    # Fixed MAC: a bridge without one takes its lowest port's MAC, which
    # changes as hosts come and go (stale ARP again). STP is off by default,
    # so ports forward at once.
    if [ "$WIDE" = 0 ]; then
      ip -n "$LABNS" link add "$BR" address 02:6c:61:62:ff:ff type bridge
      ip -n "$LABNS" addr add "$NET.1/24" dev "$BR"
      ip -n "$LABNS" link set "$BR" up
    else   # routes between the /24s (still no uplink: nothing leaves the lab)
      ip netns exec "$LABNS" sysctl -qw net.ipv4.ip_forward=1
    fi
  fi
  [ "$WIDE" = 0 ] || wide_bridges "$n"
  echo "$STATE $CACHE" >"$RUN/labs/$PREFIX"
  [[ " ${need[*]} " != *" systemd "* ]] || raise_inotify
  machine_unlock
  # declarative: exactly hosts 1..N, each of the requested flavour, running,
  # with its veth still on the bridge; everything else is (re)created
  if [ "$WIDE" = 0 ]; then
    cur=" $(ip -n "$LABNS" -o link show master "$BR" | awk -F': ' '{print $2}' | sed 's/@.*//' | tr '\n' ' ') "
  else   # veths on any of the bridges
    cur=" $(ip -n "$LABNS" -o link show type veth | awk -F': ' '/ master /{print $2}' | sed 's/@.*//' | tr '\n' ' ') "
  fi
  for h in $(hosts); do
    i=${h#h}
    if [ "$i" -gt "$n" ]; then host_down "$i"; fi
  done
  local todo=() f r
  for i in $(seq 1 "$n"); do
    f=; [ ! -f "$H/h$i/flavour" ] || f=$(<"$H/h$i/flavour")
    r=; [ ! -f "$H/h$i/rtt" ] || r=$(<"$H/h$i/rtt")
    if running "$i" && [ "$f" = "${fl[i]}" ] && [ "$r" = "${LAB_RTT_MS:-}" ] && [[ $cur == *" ${PREFIX}v$i "* ]]; then continue; fi
    todo+=("$i")
    host_down "$i"   # clear leftovers of a crashed or wrong-flavour host
  done
  start_hosts
  log "$n host(s) up in $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}") s ($(printf '%s\n' "${fl[@]}" | sort | uniq -c | awk '{printf "%s%d %s/%s", (NR > 1 ? ", " : ""), $1, $2, $3}')); files in $STATE; clients: $SELF exec ..."
}

cmd_reset() {  # I...: those hosts recreated from the images, as new (flavour kept; new host key)
  local n i fl=() todo=()
  [ $# -gt 0 ] || die "usage: lab.sh reset I..."
  for i in "$@"; do need_host "$i"; done
  lock
  n=$(hosts | wc -l)
  for i in $(seq 1 "$n"); do fl[i]=$(<"$H/h$i/flavour"); done
  SELINUX_LAYER=$(selinux_layer)
  for i in "$@"; do host_down "$i"; todo+=("$i"); done
  start_hosts
  log "reset ${todo[*]/#/h}"
}

cmd_reboot() {  # I...: those hosts' processes killed at once, then booted again on the same disk
  local i p c x t cg init n st fl=()
  [ $# -gt 0 ] || die "usage: lab.sh reboot I..."
  for i in "$@"; do need_host "$i"; done
  lock
  n=$(hosts | wc -l)
  for i in $(seq 1 "$n"); do fl[i]=$(<"$H/h$i/flavour"); done
  for i in "$@"; do
    cg=$CG2/$CGNAME/h$i
    # the host's netns must outlive its processes: its /run/netns handle can be lost (another
    # lab's `ip netns add` stacking a new mount on /run/netns hides it), so pin it again first
    if ! findmnt -rn --mountpoint "/run/netns/$PREFIX-h$i" >/dev/null && p=$(pid1 "$i"); then
      mount --bind "/proc/$p/ns/net" "/run/netns/$PREFIX-h$i" || die "h$i: cannot pin its network namespace"
    fi
    # as host_down: a host started by an older lab.sh from inside the lab (no cgroup2 mount) is in no
    # cgroup of ours, and SIGKILL to its PID 1 ends its whole PID namespace
    [ ! -e "$cg/cgroup.kill" ] || echo 1 >"$cg/cgroup.kill" 2>/dev/null || true
    c=$(pid1 "$i" || true) p=$(unshare_pid "$i")
    # shellcheck disable=SC2086  # $c, $p: zero or one pid each
    kill -KILL $c $p 2>/dev/null || true
    for x in $c $p; do t=500; while ! dead "$x" && [ $((t -= 1)) -gt 0 ]; do sleep 0.02; done; done
    [ -z "$c" ] || dead "$c" || die "h$i: its PID 1 ($c) did not die"
    t=500; while grep -q '^populated 1' "$cg/cgroup.events" 2>/dev/null && [ $((t -= 1)) -gt 0 ]; do sleep 0.02; done
    [ ! -d "$cg" ] || find "$cg" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
    read -r _ init _ <<<"${fl[i]}"
    host_start "$i" "$init"
  done
  # up again: sshd answers and systemd, where it is PID 1, has finished booting (a boot just
  # after a kill may answer "offline" for a moment: asked again until the deadline)
  for i in "$@"; do
    t=600
    until in_lab timeout 1 bash -c "exec 3<>/dev/tcp/$NET.$((10 + i))/22" 2>/dev/null; do
      [ $((t -= 1)) -gt 0 ] || die "h$i: sshd did not come up within 60 s after the reboot"; sleep 0.1
    done
    [[ ${fl[i]} == *" systemd"* ]] || continue
    t=$BOOT_WAIT
    until p=$(pid1 "$i") && st=$(timeout 5 nsenter -t "$p" -m -p env -i PATH=/usr/bin:/bin \
        sh -c "$BOOTED" 2>/dev/null; true) && [[ $st == running || $st == degraded ]]; do
      [ $((t -= 1)) -gt 0 ] || die "h$i: systemd not booted $BOOT_WAIT s after the reboot (${st:-no answer})"; sleep 1
    done
  done
  log "rebooted ${*/#/h}"
}

cmd_down() {
  local h i cg g1 g2 g3 nj=0
  lock
  cg=$CG2
  # kill all hosts at once first, so their teardowns overlap (systemd hosts
  # take ~80 ms each to die); host_down then finds them dead
  [ -z "$cg" ] || [ ! -e "$cg/$CGNAME/cgroup.kill" ] || echo 1 >"$cg/$CGNAME/cgroup.kill" 2>/dev/null || true
  # hosts with a state dir, plus any netns or cgroup of our prefix whose
  # state was lost
  for i in $( { hosts | sed 's/^h//'
      ip netns list | sed -n "s/^$PREFIX-h\([0-9]\+\)\( .*\)\?$/\1/p"
      [ -z "$cg" ] || [ ! -d "$cg/$CGNAME" ] || find "$cg/$CGNAME" -mindepth 1 -maxdepth 1 -name 'h*' -printf '%f\n' | sed 's/^h//'
    } | sort -un); do
    if [ "$WIDE" = 0 ]; then host_down "$i"; continue; fi
    # a big lab: 8 teardowns at once (each mostly waits for the kernel to free a netns)
    host_down "$i" &
    if [ $((nj += 1)) -ge 8 ]; then wait -n || true; nj=$((nj - 1)); fi
  done
  wait
  [ ! -e "/run/netns/$LABNS" ] || ip netns del "$LABNS"   # takes the bridge with it
  [ -z "$cg" ] || [ ! -d "$cg/$CGNAME" ] || rmdir "$cg/$CGNAME" || log "cgroup $cg/$CGNAME not removed"
  # state: only the files we write (LAB_STATE might point somewhere odd)
  rm -f "$STATE"/{ssh_config,known_hosts,inventory.ini,cluster.yaml,hosts.tsv}{,.tmp} \
    "$STATE"/id_{ed25519,ecdsa,rsa}{,.pub}
  rmdir "$STATE/hosts" "$STATE" 2>/dev/null || true
  machine_lock
  rm -f "$RUN/labs/$PREFIX"
  # machine-wide leftovers, only when no other lab is up any more
  for h in "$RUN"/labs/*; do   # forget labs whose netns is gone (e.g. killed mid-way)
    [ -e "$h" ] || continue
    [ -e "/run/netns/${h##*/}-lab" ] || rm -f "$h"
  done
  if [ -z "$(ls -A "$RUN/labs")" ] && [ -f "$RUN/neigh.orig" ]; then
    # written without a final newline (tr), so read meets EOF: its status says nothing here
    read -r g1 g2 g3 <"$RUN/neigh.orig" || true
    sysctl -qw net.ipv4.neigh.default.gc_thresh1="$g1" net.ipv4.neigh.default.gc_thresh2="$g2" \
      net.ipv4.neigh.default.gc_thresh3="$g3"
    rm -f "$RUN/neigh.orig"
  fi
  if [ -z "$(ls -A "$RUN/labs")" ] && [ -f "$RUN/inotify.orig" ]; then
    sysctl -qw fs.inotify.max_user_instances="$(cat "$RUN/inotify.orig")"
    rm -f "$RUN/inotify.orig"
  fi
  # `ip netns add` bind-mounts /run/netns onto itself; drop it once empty
  if [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ]; then
    umount /run/netns 2>/dev/null || true; rmdir /run/netns 2>/dev/null || true
  fi
  machine_unlock
  # the lock file in $RUN stays: removing it could let two waiters lock
  # different inodes
}

cmd_purge() {
  local l
  cmd_down
  for l in "$RUN"/labs/*; do
    [ -e "$l" ] || continue
    [ "$(cut -d' ' -f2 "$l")" != "$CACHE" ] || die "lab ${l##*/} still uses $CACHE; down it first"
  done
  rm -rf "$CACHE"/rootfs "$CACHE"/rootfs.{ok,tmp} "$CACHE"/layer-* "$CACHE"/*.log "$CACHE/.lock"
  rmdir "$CACHE" 2>/dev/null || true
  rmdir "$(dirname "$CACHE")" "$(dirname "$STATE")" 2>/dev/null || true
}

cmd_status() {
  local h i st p link IP GW HBR net=$BR\ $NET.1/24
  [ "$WIDE" = 0 ] || net="${BR}0.. $NET.0.0/16"
  if [ -e "/run/netns/$LABNS" ]; then echo "lab $LABNS: up ($net, state $STATE)"; else echo "lab $LABNS: down"; fi
  for h in $(hosts); do
    i=${h#h} st=down
    if p=$(pid1 "$i"); then
      link=$(ip -n "$LABNS" -o link show "${PREFIX}v$i" 2>/dev/null | grep -q 'state UP' && echo up || echo down)
      st="up pid1=$p link=$link"
      host_net "$i"
      if in_lab timeout 1 bash -c "exec 3<>/dev/tcp/$IP/22" 2>/dev/null; then st+=" sshd=ok"; else st+=" sshd=no"; fi
    fi
    host_net "$i"
    printf '%-4s %-15s %-15s %s\n' "$h" "$IP" "$(cat "$STATE/hosts/$h/flavour" 2>/dev/null)" "$st"
  done
}

need_host() {  # I: validate a host index that exists
  [[ ${1:-} =~ ^[0-9]+$ ]] && [ -d "$H/h$1" ] || die "no host h${1:-?} in this lab"
}

# One host's sshd with extra settings (a file sorted before the lab's own: sshd keeps the
# first value of each keyword), or back to the defaults; SIGHUP re-reads it (the listener
# re-execs, sessions stay), then we wait until it accepts again.
cmd_sshd() {  # I [LINE...]
  local i=$1 p IP GW HBR f ino now t; shift
  p=$(pid1 "$i") || die "h$i is not running"
  f=/proc/$p/root/etc/ssh/sshd_config.d/00-lab-host.conf
  if [ $# -gt 0 ]; then printf '%s\n' "# lab.sh sshd $i" "$@" >"$f"; else rm -f "$f"; fi
  # the listening socket's inode: a new one once the re-exec'd sshd listens again
  ino=$(nsenter -t "$p" -n ss -Hltne 'sport = :22' 2>/dev/null | grep -o 'ino:[0-9]*' | head -1 || true)
  nsenter -t "$p" -m -p sh -c 'sshd -t && kill -HUP "$(cat /run/sshd.pid)"' || die "h$i: sshd refused the setting"
  host_net "$i"
  for t in $(seq 200); do
    now=$(nsenter -t "$p" -n ss -Hltne 'sport = :22' 2>/dev/null | grep -o 'ino:[0-9]*' | head -1 || true)
    [ -z "$now" ] || [ "$now" = "$ino" ] || break
    sleep 0.05
  done
  [ "$t" -lt 200 ] && in_lab timeout 10 bash -c "until (exec 3<>/dev/tcp/$IP/22) 2>/dev/null; do sleep 0.05; done" \
    || die "h$i: sshd does not accept connections after the reload"
}

usage() { sed -n '2,/^# Needs/p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "must run as root"
cmd=${1:-}; shift || true
case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  reset) cmd_reset "$@" ;;
  reboot) cmd_reboot "$@" ;;
  purge) cmd_purge ;;
  status) cmd_status ;;
  exec) [ $# -gt 0 ] || usage; [ -e "/run/netns/$LABNS" ] || die "lab is down"; in_lab "$@" ;;
  ssh) need_host "${1:-}"; i=$1; shift; in_lab ssh -F "$STATE/ssh_config" "h$i" "$@" ;;
  upper) need_host "${1:-}"; echo "$H/h$1/upper" ;;
  pid) need_host "${1:-}"; pid1 "$1" || die "h$1 is not running"; echo ;;
  link)
    need_host "${1:-}"; [[ ${2:-} =~ ^(up|down)$ ]] || usage
    # the lab end of the veth: the host keeps its address and routes but its
    # eth0 loses carrier, so it simply stops answering (like a pulled cable)
    ip -n "$LABNS" link set "${PREFIX}v$1" "$2" ;;
  sshd) need_host "${1:-}"; cmd_sshd "$@" ;;
  _init) host_init "$@" ;;
  *) usage ;;
esac
