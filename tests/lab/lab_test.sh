#!/usr/bin/env bash
# lab_test.sh - self-check of lab.sh (root). Brings up a 3-host lab with
# mixed flavours under its own prefix and subnet (so it cannot collide with a
# lab someone else is using), checks it over real SSH, then tears it down and
# checks that nothing is left. Last line: "N passed, M failed"; exit 1 if any
# check failed. First run builds the shared cache (~1 min).
set -uo pipefail   # no -e: a failing check must not stop the others

LAB=$(cd "$(dirname "$0")" && pwd)/lab.sh
export LAB_PREFIX=cslt LAB_NET=10.251.0 LAB_STATE=/var/lib/cargoship-lab/cslt
export LAB_OS=debian,rocky LAB_INIT=systemd,runit   # h1 debian/systemd, h2 rocky/runit, h3 debian/systemd
S=$LAB_STATE
pass=0 fail=0 downed=0

ok() { echo "ok   - $1"; pass=$((pass + 1)); }
bad() { echo "FAIL - $1${2:+: $(echo "$2" | head -c 400)}"; fail=$((fail + 1)); }
check() {  # NAME CMD...: passes when CMD exits 0
  local name=$1 out; shift
  if out=$("$@" 2>&1); then ok "$name"; else bad "$name" "$out"; fi
}
expect() {  # NAME WANT CMD...: passes when CMD's stdout (trimmed) is WANT
  local name=$1 want=$2 got; shift 2
  got=$("$@" 2>&1 | tr -d '\r' | sed -e 's/[[:space:]]*$//')
  if [ "$got" = "$want" ]; then ok "$name"; else bad "$name" "want '$want', got '$got'"; fi
}
lab() { "$LAB" "$@"; }
rssh() { lab ssh "$@" 2>&1; }            # I [ssh args] CMD
snap() { (cd "$(lab upper "$1")" && find . -printf '%p %s %T@ %m %u\n' | sort); }
finish() {
  [ "$downed" = 1 ] || lab down >/dev/null 2>&1
  echo "$pass passed, $fail failed"
  [ "$fail" = 0 ]
}
trap 'finish; exit $?' EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || { echo "lab_test.sh: must run as root"; downed=1; exit 1; }
lab down >/dev/null 2>&1

# ---------------------------------------------------------------- up
out=$(lab up 3 2>/tmp/lab_test.$$.err); rc=$?
err=$(cat /tmp/lab_test.$$.err); rm -f /tmp/lab_test.$$.err
if [ $rc = 0 ]; then ok "up 3 (mixed flavours)"; else bad "up 3" "$err"; exit 1; fi   # nothing else to check
[ -z "$out" ] && ok "up prints nothing on stdout" || bad "up prints nothing on stdout" "$out"
[[ $(tail -1 <<<"$err") == *"3 host(s) up"* ]] && ok "up ends with a summary on stderr" || bad "up summary" "$err"

# ---------------------------------------------------------------- files
missing=""
for f in id_ed25519 id_ed25519.pub id_ecdsa id_ecdsa.pub id_rsa id_rsa.pub ssh_config known_hosts inventory.ini cluster.yaml hosts.tsv; do
  [ -s "$S/$f" ] || missing+=" $f"
done
expect "state files present" "" echo "$missing"
expect "client key types" "ED25519 ECDSA RSA" bash -c "for k in ed25519 ecdsa rsa; do ssh-keygen -lf $S/id_\$k.pub | sed 's/.*(\(.*\))/\1/'; done | tr '\n' ' '"
expect "hosts.tsv" "$(printf 'h1\t10.251.0.11\tdebian\tsystemd\nh2\t10.251.0.12\trocky\trunit\nh3\t10.251.0.13\tdebian\tsystemd')" cat "$S/hosts.tsv"
expect "known_hosts: 3 'hN,IP ssh-ed25519 KEY' lines" 3 grep -cE '^h[123],10\.251\.0\.1[123] ssh-ed25519 AAAA[A-Za-z0-9+/=]+$' "$S/known_hosts"
expect "cluster.yaml roles" "controller worker worker" bash -c "sed -n 's/^    - role: //p' $S/cluster.yaml | tr '\n' ' '"
check "cluster.yaml header, h1 address and key" grep -qzP "^apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: lab\nspec:\n  config:\n    loadbalancer: h1.lab.internal\n  hosts:\n    - role: controller\n      ssh:\n        address: 10.251.0.11\n        user: root\n        keyPath: $S/id_ed25519\n" "$S/cluster.yaml"
expect "inventory lists 3 hosts" 3 grep -c ansible_host= "$S/inventory.ini"

# ---------------------------------------------------------------- identity
want_os=(x debian rocky debian) want_init=(x systemd runsvdir systemd)
for i in 1 2 3; do
  expect "h$i hostname" "h$i" rssh "$i" hostname
  expect "h$i os-release ID" "${want_os[i]}" rssh "$i" '. /etc/os-release; echo $ID'
  expect "h$i PID 1 comm" "${want_init[i]}" rssh "$i" 'cat /proc/1/comm'
  expect "h$i eth0 address" "10.251.0.1$i/24" rssh "$i" "ip -4 -o addr show eth0 | awk '{print \$4}'"
  expect "h$i sudo -n as tb gives root" root rssh "$i" -l tb 'sudo -n id -un'
  out=$(rssh "$i" -l tbpw 'sudo -n true'); rc=$?
  [ $rc != 0 ] && [[ $out == *"password is required"* ]] && ok "h$i sudo -n as tbpw fails (needs a password)" \
    || bad "h$i sudo -n as tbpw fails" "rc=$rc $out"
  expect "h$i pid: /proc/PID/root is the host's root" "h$i" cat "/proc/$(lab pid "$i")/root/etc/hostname"
done
expect "h2 looks like EL (no debian_version, rpm present)" "no-debian rpm" rssh 2 \
  'test -e /etc/debian_version && echo -n "debian " || echo -n "no-debian "; command -v rpm >/dev/null && echo rpm'
for i in 1 3; do expect "h$i systemd booted" running rssh "$i" 'systemctl is-system-running | sed s/degraded/running/'; done
expect "machine-ids are unique" 3 bash -c "for i in 1 2 3; do cat /proc/\$(\"$LAB\" pid \$i)/root/etc/machine-id; done | sort -u | wc -l"

# keys: ecdsa and rsa work as well (explicit options, not the generated config)
for k in ecdsa rsa; do
  expect "h1 accepts the $k client key" h1 lab exec ssh -F /dev/null -o IdentitiesOnly=yes -i "$S/id_$k" \
    -o UserKnownHostsFile="$S/known_hosts" -o StrictHostKeyChecking=yes -o BatchMode=yes root@10.251.0.11 hostname
done
check "host-to-host traffic over the bridge (h1 -> h3:22)" lab ssh 1 'exec 3<>/dev/tcp/10.251.0.13/22'
expect "no lab address in the machine's root netns" 0 bash -c "ip -o addr | grep -c ' 10\.251\.0\.' || true"

# ---------------------------------------------------------------- isolation
before=$(snap 1)
rssh 1 true >/dev/null; rssh 1 -tt true >/dev/null; rssh 1 -l tb 'sudo -n true' >/dev/null
[ "$(snap 1)" = "$before" ] && ok "logins and sudo leave h1's upper dir unchanged" \
  || bad "logins leave the upper dir unchanged" "$(diff <(echo "$before") <(snap 1))"
rssh 1 'echo lab-test >/etc/lab-test-marker' >/dev/null
[ -f "$(lab upper 1)/etc/lab-test-marker" ] && ok "write under /etc shows up in h1's upper dir" || bad "write under /etc shows up in h1's upper dir"
[ ! -e "$(lab upper 2)/etc/lab-test-marker" ] && [ ! -e "$(lab upper 3)/etc/lab-test-marker" ] \
  && ok "...and in no other host's upper dir" || bad "marker leaked to another upper dir"
expect "h2 does not see h1's file" absent rssh 2 'test -e /etc/lab-test-marker && echo present || echo absent'
[ ! -e /etc/lab-test-marker ] && ok "machine's /etc untouched" || bad "machine's /etc untouched"

# ---------------------------------------------------------------- idempotent up
p1=$(lab pid 1)
check "up 3 again is a no-op" lab up 3
expect "h1 kept its PID 1" "$p1" lab pid 1

# ---------------------------------------------------------------- link
lab link 2 down
t0=$EPOCHREALTIME
out=$(timeout 10 "$LAB" ssh 2 -o ConnectTimeout=3 true 2>&1); rc=$?
secs=$(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}")
[ $rc != 0 ] && ok "link 2 down: h2 unreachable (failed after ${secs}s)" || bad "link 2 down: h2 unreachable" "$out"
expect "link 2 down: h1 still answers" h1 rssh 1 hostname
lab link 2 up
for _ in 1 2 3 4 5; do out=$(rssh 2 -o ConnectTimeout=3 hostname) && break; sleep 1; done
[ "$out" = h2 ] && ok "link 2 up: h2 answers again" || bad "link 2 up: h2 answers again" "$out"

# ---------------------------------------------------------------- flavour change
# declarative up: switching the OS list recreates h1 (now rocky/systemd, the
# one combination not covered above) and h2, and keeps h3 as it is
p3=$(lab pid 3)
if LAB_OS=rocky,debian,debian lab up 3 2>/dev/null; then ok "up 3 with other flavours"; else bad "up 3 with other flavours"; fi
expect "h1 recreated as rocky/systemd" "rocky systemd" rssh 1 '. /etc/os-release; echo $ID $(cat /proc/1/comm)'
expect "h2 recreated as debian/runit" "debian runsvdir" rssh 2 '. /etc/os-release; echo $ID $(cat /proc/1/comm)'
expect "h3 kept" "$p3" lab pid 3
expect "h1's old upper dir is gone" absent rssh 1 'test -e /etc/lab-test-marker && echo present || echo absent'
expect "known_hosts follows the new host keys" h1 rssh 1 hostname

# ---------------------------------------------------------------- down
pids=$(for i in 1 2 3; do lab pid "$i"; cat "$S/hosts/h$i/pid"; done)
check "down" lab down
downed=1
expect "no netns with the prefix" "" bash -c "ip netns list | grep -E '^cslt-' || true"
expect "no cgroup left" "" bash -c "find /sys/fs/cgroup -maxdepth 2 -name csltlab 2>/dev/null"
live=""
for p in $pids; do
  [ -e "/proc/$p" ] && [ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)" != Z ] && live+=" $p"
done
expect "no host process left (zombies awaiting the machine's init excepted)" "" echo "$live"
host_procs() {  # pids whose command line is "... lab.sh _init $S ..." (bash builtins only,
  local f a p=""   # so no helper process matches itself)
  for f in /proc/[0-9]*/cmdline; do
    mapfile -d '' a 2>/dev/null <"$f" || continue
    [[ " ${a[*]} " == *" _init $S "* ]] && p+=" ${f//[!0-9]/}"
  done
  echo "$p"
}
expect "no process runs a host of this lab" "" host_procs
expect "state dir gone" "" bash -c "ls -A $S 2>/dev/null"
check "down again (nothing up)" lab down
