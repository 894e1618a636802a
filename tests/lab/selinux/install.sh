#!/bin/sh
# install.sh DEST - lays out the SELinux stand-in layer of the lab's rocky hosts in DEST.
# lab.sh runs it (as root) when these files change; DEST becomes an overlay lower layer.
set -eu
src=$(cd "$(dirname "$0")" && pwd)
d=$1
mkdir -p "$d/usr/sbin" "$d/etc/selinux/targeted" "$d/var/lib"
install -m 755 "$src/selinux-standin" "$d/usr/sbin/selinux-standin"
for t in getenforce setenforce selinuxenabled sestatus semodule setsebool getsebool semanage restorecon; do
  ln -s selinux-standin "$d/usr/sbin/$t"
done
# EL's knob, read by the stand-in at every call (a real host reads it at boot)
install -m 644 "$src/config" "$d/etc/selinux/config"
mkdir -m 700 "$d/var/lib/selinux-standin"
