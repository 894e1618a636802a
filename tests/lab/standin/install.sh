#!/bin/sh
# install.sh - lays one stand-in engine out under DESTDIR at the paths the real engine's packages use.
# usage: install.sh rke2|k3s|upstream|ctr DESTDIR [VERSION]
# Installs files only: it enables no service (the engine's phases, or the operator, do that).
set -eu
engine=${1:?engine}; dest=${2:?destdir}; version=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
bin() {  # name, path: the program, stamped with VERSION when given
  mkdir -p "$dest$(dirname "$2")"
  if [ -n "$version" ]; then
    /usr/bin/python3 "$here/standin.py" stamp "$version" "$dest$2"
  else
    install -m 0755 "$here/standin.py" "$dest$2"
  fi
}
unit() {  # file, dir
  mkdir -p "$dest$2"; install -m 0644 "$here/systemd/$1" "$dest$2/$1"
}
sv() {  # runit service directory; files replaced in place, so a running service's supervise/ survives
  mkdir -p "$dest/etc/sv/$1/log"
  for f in run finish log/run; do install -m 0755 "$here/runit/$1/$f" "$dest/etc/sv/$1/$f"; done
}
case $engine in
  rke2)
    bin rke2 /usr/local/bin/rke2
    unit rke2-server.service /usr/local/lib/systemd/system
    unit rke2-agent.service /usr/local/lib/systemd/system
    sv rke2-server; sv rke2-agent
    mkdir -p "$dest/var/lib/rancher/rke2/bin"
    ln -sf /usr/bin/kubectl "$dest/var/lib/rancher/rke2/bin/kubectl" ;;
  k3s)
    bin k3s /usr/local/bin/k3s
    unit k3s.service /etc/systemd/system
    unit k3s-agent.service /etc/systemd/system
    sv k3s; sv k3s-agent ;;
  upstream)
    bin kubeadm /usr/bin/kubeadm
    bin kubelet /usr/bin/kubelet
    unit kubelet.service /usr/lib/systemd/system
    mkdir -p "$dest/usr/lib/systemd/system/kubelet.service.d"
    install -m 0644 "$here/systemd/kubelet.service.d/10-kubeadm.conf" "$dest/usr/lib/systemd/system/kubelet.service.d/"
    sv kubelet ;;
  ctr)
    bin ctr /usr/bin/ctr ;;
  *) echo "install.sh: unknown engine $engine" >&2; exit 2 ;;
esac
