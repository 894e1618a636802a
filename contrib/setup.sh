#!/usr/bin/env bash
# setup.sh - the README's first command: dependencies, build, then a dry run on a 3-host lab.
#
# On a fresh Debian 12 machine, as root: installs what is missing (apt), builds cargoship,
# brings up a lab of three hosts in network namespaces (Debian/systemd, Rocky-like/runit,
# Debian/systemd) and runs `cargoship apply --dry-run` on it. The lab is torn down at the end
# unless KEEP_LAB=1; then try `tests/lab/lab.sh exec build/bin/cargoship ...` yourself
# (with LAB_PREFIX=csdemo LAB_NET=10.245.0 in the environment).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "setup.sh: run as root (the lab needs namespaces and mounts)" >&2; exit 1; }
./contrib/deps.sh
make
export LAB_PREFIX=csdemo LAB_NET=10.245.0 LAB_OS=debian,rocky LAB_INIT=systemd,runit
state=/var/lib/cargoship-lab/$LAB_PREFIX
[ "${KEEP_LAB:-0}" = 1 ] || trap 'tests/lab/lab.sh down' EXIT
tests/lab/lab.sh up 3
echo "== cargoship apply --dry-run on the lab's cluster file ($state/cluster.yaml)"
rc=0
tests/lab/lab.sh exec build/bin/cargoship apply --dry-run "$state/cluster.yaml" \
  --known-hosts "$state/known_hosts" || rc=$?
# 3 = the dry run worked and found work pending (the lock, at least): the expected outcome
case $rc in
  0|3) echo "== dry run done (exit $rc: $([ $rc = 3 ] && echo 'work pending' || echo 'nothing pending'))" ;;
  *) echo "== dry run FAILED (exit $rc)" >&2; exit "$rc" ;;
esac
