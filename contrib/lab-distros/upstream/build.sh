#!/bin/sh
# build.sh OUT.tar.zst [CARGOSHIP]: kubeadm + kubelet stand-ins as one distro package carrying the RPM, APT and binary flavours.
# From tests/lab/standin: kubeadm and kubelet stamped v1.35.3, pkgs.k8s.io's kubelet.service and
# 10-kubeadm.conf, the kubelet's runit dir; plus this machine's kubectl and openssl. containerd is
# not carried: every lab host has Debian's real containerd (tests/lab/README.md).
# RPM: kubeadm, kubelet, kubectl (pkgs.k8s.io names); APT: the same as debs; binary: the same
# files at the same paths (tests/lab/standin/install.sh's). tests/lab/README.md ("lab-distros packages").
# shellcheck disable=SC2154 # src, s, tree: set by lib.sh (ld_init, ld_debtree)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=contrib/lab-distros/lib.sh
. "$here/../lib.sh"
ld_init "$@"
ld_version 1.35.3
ld_stamp "v$V" "$src/kubeadm"
ld_stamp "v$V" "$src/kubelet"
cp /usr/bin/kubectl /usr/bin/openssl "$s/systemd/kubelet.service" "$s/systemd/kubelet.service.d/10-kubeadm.conf" \
  "$here/kubelet.env" "$here/10-lab-bridge.conflist" "$here/../common/rpm-service.inc" "$src/"
ld_sv kubelet kubelet
# one image, so an install proves phase 14 uploads it and phase 18 imports it on every node
/usr/bin/python3 "$s/../mkimage.py" "$src/hello.tar" registry.lab.internal/cargoship/hello:1.0 "cargoship lab image"

# RPM flavour
ld_rpm "$here/kubernetes.spec" --define "k8s_version $V" --define "k8s_release 150500.1.1"
ld_container_selinux

# APT flavour
DV=$V-1.1
ld_debtree kubeadm "$DV" "$here/deb/kubeadm.control"
ld_put "$tree" /usr/bin/kubeadm 0755 "$src/kubeadm"
ld_put "$tree" /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf 0644 "$src/10-kubeadm.conf"
ld_deb "$tree"
ld_debtree kubelet "$DV" "$here/deb/kubelet.control" kubelet
ld_put "$tree" /usr/bin/kubelet 0755 "$src/kubelet"
ld_put "$tree" /usr/local/bin/openssl 0755 "$src/openssl"
ld_put "$tree" /usr/lib/systemd/system/kubelet.service 0644 "$src/kubelet.service"
for f in run finish log/run; do ld_put "$tree" "/etc/sv/kubelet/$f" 0755 "$src/sv/kubelet/$f"; done
mkdir -p "$tree/etc/kubernetes/manifests" "$tree/var/lib/kubelet"
ld_deb "$tree"
ld_debtree kubectl "$DV" "$here/deb/kubectl.control"
ld_put "$tree" /usr/bin/kubectl 0755 "$src/kubectl"
ld_deb "$tree"
ld_create
