#!/bin/sh
# build.sh OUT.tar.zst [CARGOSHIP]: the k3s stand-in as one distro package carrying the RPM, APT and binary flavours.
# From tests/lab/standin: the program stamped v1.35.2+k3s1, the units and runit dirs under
# cargoship's service names (k3s-server, k3s-agent); plus this machine's /usr/bin/kubectl
# (what `k3s kubectl` runs: the lab images lack one) and /usr/bin/openssl (the stand-in's
# certificates; the images lack it). RPM: k3s-selinux, k3s-common, k3s-server, k3s-agent
# (rpmbuild); APT: k3s-common, k3s-server, k3s-agent (dpkg-deb); binary: the files themselves.
# tests/lab/README.md ("lab-distros packages") says what each flavour holds.
# shellcheck disable=SC2154 # src, s, tree: set by lib.sh (ld_init, ld_debtree)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=contrib/lab-distros/lib.sh
. "$here/../lib.sh"
ld_init "$@"
ld_version 1.35.2; R=k3s1
ld_stamp "v$V+$R" "$src/k3s"
cp /usr/bin/kubectl /usr/bin/openssl "$here/k3s.cil" "$here/../common/rpm-service.inc" "$src/"
sed 's#k3s.service.env#k3s-server.service.env#' "$s/systemd/k3s.service" > "$src/k3s-server.service"
cp "$s/systemd/k3s-agent.service" "$src/"
ld_sv k3s k3s-server 's#\(default\|sysconfig\)/k3s\( \|$\)#\1/k3s-server\2#g; s#k3s\.service\.env#k3s-server.service.env#g'
ld_sv k3s-agent k3s-agent

# RPM flavour
ld_rpm "$here/k3s.spec" --define "k3s_version $V~$R" --define "k3s_release 0.el9"
ld_rpm "$here/k3s-selinux.spec"
ld_container_selinux

# APT flavour
DV=$V+$R-1
ld_debtree k3s-common "$DV" "$here/deb/k3s-common.control"
ld_put "$tree" /usr/local/bin/k3s 0755 "$src/k3s"
ld_put "$tree" /usr/bin/kubectl 0755 "$src/kubectl"
ld_put "$tree" /usr/local/bin/openssl 0755 "$src/openssl"
mkdir -p "$tree/etc/rancher/k3s" "$tree/var/lib/rancher/k3s"
ld_deb "$tree"
for svc in k3s-server k3s-agent; do
  ld_debtree "$svc" "$DV" "$here/deb/$svc.control" "$svc"
  ld_put "$tree" "/lib/systemd/system/$svc.service" 0644 "$src/$svc.service"
  for f in run finish log/run; do ld_put "$tree" "/etc/sv/$svc/$f" 0755 "$src/sv/$svc/$f"; done
  ld_deb "$tree"
done
ld_create
