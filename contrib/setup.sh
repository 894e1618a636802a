#!/usr/bin/env bash
# setup.sh - the README's first command: dependencies, build, then install a k3s cluster on a 3-host lab.
#
# On a fresh Debian 12 machine, as root: installs what is missing (apt), builds cargoship and
# the lab's stand-in engine packages (cmake target lab-distros), brings up a lab of three
# hosts in network namespaces (h1 Debian/systemd, h2 Rocky-like/runit, h3 Debian/systemd),
# and on it:
#   1. cargoship apply --confirm -H: 1 controller (h1) + 2 workers, k3s from the package;
#   2. cargoship exec on the leader: its own kubectl shows every node Ready;
#   3. cargoship apply --dry-run: nothing is pending (exit 0).
# The lab is torn down at the end unless KEEP_LAB=1; then try
# `tests/lab/lab.sh exec build/bin/cargoship ...` yourself (with LAB_PREFIX=csdemo
# LAB_NET=10.245.0 in the environment). The k3s here is the lab's stand-in (tests/lab/README.md
# says what it does and does not imitate): real k3s cannot be downloaded in the lab.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "setup.sh: run as root (the lab needs namespaces and mounts)" >&2; exit 1; }
./contrib/deps.sh
make
cmake --build build --target lab-distros
export LAB_PREFIX=csdemo LAB_NET=10.245.0 LAB_OS=debian,rocky LAB_INIT=systemd,runit
state=/var/lib/cargoship-lab/$LAB_PREFIX
pkg=build/lab-distros/k3s.tar.zst
[ "${KEEP_LAB:-0}" = 1 ] || trap 'tests/lab/lab.sh down' EXIT
tests/lab/lab.sh up 3
cs() { tests/lab/lab.sh exec build/bin/cargoship "$@"; }
# the lab's cluster file names h1 the controller and the loadbalancer (h1.lab.internal):
# -H writes every node into each /etc/hosts, so the workers resolve it
echo "== cargoship apply --confirm -H on $state/cluster.yaml with $pkg"
cs apply --confirm -H "$state/cluster.yaml" --distro "$pkg" --known-hosts "$state/known_hosts"
echo "== the nodes, through the leader's own kubectl (cargoship exec on h1)"
cs exec "$state/cluster.yaml" --known-hosts "$state/known_hosts" --hosts "$LAB_NET.11" -- \
  k3s kubectl get nodes -o wide
echo "== cargoship apply --dry-run: a converged cluster has nothing pending"
rc=0
cs apply --dry-run -H "$state/cluster.yaml" --distro "$pkg" --known-hosts "$state/known_hosts" >/dev/null || rc=$?
case $rc in
  0) echo "== dry run: nothing pending (exit 0)" ;;
  *) echo "== dry run exit $rc: expected 0 (nothing pending) on the cluster just installed" >&2; exit 1 ;;
esac
