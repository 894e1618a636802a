#!/bin/sh
# build.sh OUT.tar.zst [CARGOSHIP]: the rke2 stand-in as one distro package carrying the RPM, APT and binary flavours.
# From tests/lab/standin: the program stamped v1.35.4+rke2r1, the tarball's units and the runit
# dirs; plus this machine's kubectl (at /var/lib/rancher/rke2/bin/kubectl, where real rke2
# extracts its own) and openssl (the stand-in's certificates; the lab images lack it).
# RPM: rke2-selinux, rke2-common, rke2-server, rke2-agent (/usr/bin/rke2, units in
# /usr/lib/systemd/system); APT: the same split as debs; binary: the tarball's layout
# (/usr/local/bin/rke2, units in /etc/systemd/system). tests/lab/README.md ("lab-distros packages").
# shellcheck disable=SC2154 # src, s, tree: set by lib.sh (ld_init, ld_debtree)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=contrib/lab-distros/lib.sh
. "$here/../lib.sh"
ld_init "$@"
ld_version 1.35.4; R=rke2r1
ld_stamp "v$V+$R" "$src/rke2"
cp /usr/bin/kubectl /usr/bin/openssl "$here/rke2.cil" "$here/80-rke2.rules" "$here/rke2-server.env" \
  "$here/rke2-agent.env" "$here/../common/rpm-service.inc" "$src/"
# binary flavour: the tarball's files as they are; packages: the same with /usr/local -> /usr
mkdir -p "$src/pkg"
for r in server agent; do
  cp "$s/systemd/rke2-$r.service" "$src/"
  sed 's#/usr/local/#/usr/#g' "$s/systemd/rke2-$r.service" > "$src/pkg/rke2-$r.service"
  ld_sv "rke2-$r" "rke2-$r"
  ld_sv "rke2-$r" "rke2-$r" 's#/usr/local/#/usr/#g' "$src/pkg/sv"
done

# RPM flavour
ld_rpm "$here/rke2.spec" --define "rke2_version $V~$R" --define "rke2_release 0.el9"
ld_rpm "$here/rke2-selinux.spec"
ld_container_selinux

# APT flavour
DV=$V+$R-1
ld_debtree rke2-common "$DV" "$here/deb/rke2-common.control"
ld_put "$tree" /usr/bin/rke2 0755 "$src/rke2"
ld_put "$tree" /var/lib/rancher/rke2/bin/kubectl 0755 "$src/kubectl"
ld_put "$tree" /usr/local/bin/openssl 0755 "$src/openssl"
mkdir -p "$tree/etc/rancher/rke2" "$tree/usr/share/rke2"
ld_deb "$tree"
for r in server agent; do
  ld_debtree "rke2-$r" "$DV" "$here/deb/rke2-$r.control" "rke2-$r"
  ld_put "$tree" "/lib/systemd/system/rke2-$r.service" 0644 "$src/pkg/rke2-$r.service"
  ld_put "$tree" "/etc/default/rke2-$r" 0644 "$src/rke2-$r.env"
  echo "/etc/default/rke2-$r" > "$tree/DEBIAN/conffiles"
  for f in run finish log/run; do ld_put "$tree" "/etc/sv/rke2-$r/$f" 0755 "$src/pkg/sv/rke2-$r/$f"; done
  ld_deb "$tree"
done
ld_create
