#!/usr/bin/env bash
# lab_test.sh - self-check of lab.sh (root). Brings up a 3-host lab with
# mixed flavours under its own prefix and subnet (so it cannot collide with a
# lab someone else is using), checks it over real SSH, the real parts the
# images carry (firewalls, containerd, rpm/dnf, the SELinux stand-in), then
# tears it down and checks that nothing is left. Last line: "N passed, M
# failed"; exit 1 if any check failed. First run builds the cache (~4 min).
# LAB_TEST_PREFIX / LAB_TEST_NET (default cslt / 10.251.0) choose its lab,
# never LAB_PREFIX/LAB_NET: a developer's exported lab is not downed by it.
# LAB_CACHE is used as lab.sh uses it.
set -uo pipefail   # no -e: a failing check must not stop the others

LAB=$(cd "$(dirname "$0")" && pwd)/lab.sh
P=${LAB_TEST_PREFIX:-cslt} N=${LAB_TEST_NET:-10.251.0}
export LAB_PREFIX=$P LAB_NET=$N LAB_STATE=/var/lib/cargoship-lab/$P
unset LAB_FIREWALLD
NR=${N//./\\.}   # $N as a regex
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
expect "hosts.tsv" "$(printf 'h1\t%s.11\tdebian\tsystemd\nh2\t%s.12\trocky\trunit\nh3\t%s.13\tdebian\tsystemd' "$N" "$N" "$N")" cat "$S/hosts.tsv"
expect "known_hosts: 3 'hN,IP ssh-ed25519 KEY' lines" 3 grep -cE "^h[123],$NR\\.1[123] ssh-ed25519 AAAA[A-Za-z0-9+/=]+\$" "$S/known_hosts"
expect "cluster.yaml roles" "controller worker worker" bash -c "sed -n 's/^    - role: //p' $S/cluster.yaml | tr '\n' ' '"
check "cluster.yaml header, h1 address and key" grep -qzP "^apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: lab\nspec:\n  config:\n    loadbalancer: h1.lab.internal\n  hosts:\n    - role: controller\n      ssh:\n        address: $NR\\.11\n        user: root\n        keyPath: $S/id_ed25519\n" "$S/cluster.yaml"
expect "inventory lists 3 hosts" 3 grep -c ansible_host= "$S/inventory.ini"

# ---------------------------------------------------------------- identity
want_os=(x debian rocky debian) want_init=(x systemd runsvdir systemd)
for i in 1 2 3; do
  expect "h$i hostname" "h$i" rssh "$i" hostname
  expect "h$i os-release ID" "${want_os[i]}" rssh "$i" '. /etc/os-release; echo $ID'
  expect "h$i PID 1 comm" "${want_init[i]}" rssh "$i" 'cat /proc/1/comm'
  expect "h$i eth0 address" "$N.1$i/24" rssh "$i" "ip -4 -o addr show eth0 | awk '{print \$4}'"
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
    -o UserKnownHostsFile="$S/known_hosts" -o StrictHostKeyChecking=yes -o BatchMode=yes "root@$N.11" hostname
done
check "host-to-host traffic over the bridge (h1 -> h3:22)" lab ssh 1  "exec 3<>/dev/tcp/$N.13/22"
expect "no lab address in the machine's root netns" 0 bash -c "ip -o addr | grep -c ' $NR\\.' || true"

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

# ---------------------------------------------------------------- reset from inside the lab
# as a spec does (lab.sh exec busted -> lab.sh reset): the host gets its own cgroup, as from
# outside, and a non-root login works at once (systemd-user-sessions has removed /run/nologin)
lab exec "$LAB" reset 3 >/dev/null 2>&1 && ok "reset 3 from inside the lab" || bad "reset 3 from inside the lab"
expect "h3 reset from inside the lab is in its own cgroup" "0::/${P}lab/h3/init.scope" \
  grep '^0::' "/proc/$(lab pid 3)/cgroup"
expect "h3: tb logs in at once after the reset" tb rssh 3 -l tb 'id -un'

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

# ---------------------------------------------------------------- real parts
# now h1 rocky/systemd (firewalld running, as on EL), h2 debian/runit, h3 debian/systemd
has() {  # I "CMD...": "cmd" when installed, "-cmd" when not
  rssh "$1" "for c in $2; do command -v \$c >/dev/null && printf '%s ' \$c || printf -- '-%s ' \$c; done"
}
tools="nft ufw firewall-cmd fapolicyd fapolicyd-cli ctr containerd runc python3 kubectl getenforce semodule setsebool getsebool semanage restorecon rpm rpmbuild dnf"
expect "h1 (rocky/systemd) carries" "nft -ufw firewall-cmd fapolicyd fapolicyd-cli ctr containerd runc python3 -kubectl getenforce semodule setsebool getsebool semanage restorecon rpm rpmbuild dnf" has 1 "$tools"
for i in 2 3; do
  expect "h$i (debian) carries" "nft ufw -firewall-cmd -fapolicyd -fapolicyd-cli ctr containerd runc python3 -kubectl -getenforce -semodule -setsebool -getsebool -semanage -restorecon -rpm -rpmbuild -dnf" has "$i" "$tools"
done
out=$(for i in 1 2 3; do rssh "$i" "python3 -c 'import yaml; print(yaml.safe_load(\"a: ok\")[\"a\"])'"; done | tr '\n' ' ')
expect "python3 with yaml on every host" "ok ok ok" echo "$out"
expect "h1 services: firewalld active; nftables, fapolicyd, containerd not" "active inactive inactive inactive" \
  rssh 1 'systemctl is-active firewalld nftables fapolicyd containerd | tr "\n" " "'
expect "h1 firewall-cmd --state, default zone" "running public" rssh 1 'echo $(firewall-cmd --state) $(firewall-cmd --get-default-zone)'
expect "h1 nftables boot file as on EL" "/etc/sysconfig/nftables.conf no-/etc/nftables.conf" \
  rssh 1 'echo $(ls /etc/sysconfig/nftables.conf) $(test -e /etc/nftables.conf || echo no-/etc/nftables.conf)'
expect "h3 ufw inactive, nftables/containerd services disabled" "Status: inactive disabled disabled" \
  rssh 3 'echo $(ufw status) $(systemctl is-enabled nftables containerd)'
expect "h2 ufw inactive, nothing in nft ruleset" "Status: inactive 0" rssh 2 'echo $(ufw status) $(nft list ruleset | wc -l)'
check "firewalld keeps SSH open: h3 -> h1:22" lab ssh 3 "exec 3<>/dev/tcp/$N.11/22"
rssh 1 'systemd-run -q --unit=labtest-web python3 -m http.server 8080' >/dev/null
rssh 1 'for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && break; sleep 0.1; done'
out=$(rssh 3 "timeout 5 bash -c 'exec 3<>/dev/tcp/$N.11/8080'"); rc=$?
[ $rc != 0 ] && ok "firewalld blocks a port it was not told to open (h3 -> h1:8080: $(echo "$out" | tail -1 | sed 's/.*: //'))" \
  || bad "firewalld blocks a port it was not told to open" "rc=$rc $out"
rssh 1 'firewall-cmd -q --add-port=8080/tcp' >/dev/null
check "...and lets it through after firewall-cmd --add-port=8080/tcp" lab ssh 3 "timeout 5 bash -c 'exec 3<>/dev/tcp/$N.11/8080'"
rssh 1 'firewall-cmd -q --reload; systemctl stop labtest-web' >/dev/null
expect "h1 rpm database has the base package; dnf versionlock plugin present" "lab-el-base-9.3-1.noarch 0" \
  rssh 1 'echo $(rpm -q lab-el-base 2>/dev/null) $(dnf -q versionlock list >/dev/null 2>&1; echo $?)'

# real package managers: an rpm built in the host installs with dnf (its %post runs), a .deb with apt
expect "h1 rpmbuild + dnf install ./x.rpm (Requires /bin/sh), %post ran, versionlock" "post-ran lab-pkg-1.0-1.noarch lab-pkg-0:1.0-1.*" rssh 1 \
  'mkdir -p /tmp/rb/SPECS; printf "%s\n" "Name: lab-pkg" "Version: 1.0" "Release: 1" "Summary: lab test" "License: MIT" \
     "BuildArch: noarch" "Requires: /bin/sh, bash" "%description" "lab test" "%install" \
     "mkdir -p %{buildroot}/opt/lab-pkg; echo hi >%{buildroot}/opt/lab-pkg/file" "%files" "/opt/lab-pkg/file" \
     "%post" "echo post-ran >/var/tmp/lab-pkg.post" >/tmp/rb/SPECS/p.spec
   rpmbuild --quiet --define "_topdir /tmp/rb" -bb /tmp/rb/SPECS/p.spec >/dev/null 2>&1
   dnf install -y -q --disablerepo="*" /tmp/rb/RPMS/noarch/lab-pkg-1.0-1.noarch.rpm >/dev/null 2>&1
   dnf -q versionlock add lab-pkg >/dev/null 2>&1; echo $(cat /var/tmp/lab-pkg.post) $(rpm -q lab-pkg) $(dnf -q versionlock list)'
expect "h3 dpkg-deb --build + apt-get install ./x.deb, postinst ran" "postinst-ran install ok installed" rssh 3 \
  'mkdir -p /tmp/deb/DEBIAN /tmp/deb/opt/lab-pkg; echo hi >/tmp/deb/opt/lab-pkg/file
   printf "Package: lab-pkg\nVersion: 1.0\nArchitecture: all\nMaintainer: lab <lab@lab>\nDescription: lab test\n" >/tmp/deb/DEBIAN/control
   printf "#!/bin/sh\necho postinst-ran >/var/tmp/lab-pkg.postinst\n" >/tmp/deb/DEBIAN/postinst; chmod 755 /tmp/deb/DEBIAN/postinst
   dpkg-deb --build /tmp/deb /tmp/lab-pkg.deb >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q /tmp/lab-pkg.deb >/dev/null 2>&1
   echo $(cat /var/tmp/lab-pkg.postinst) $(dpkg-query -W -f="\${Status}" lab-pkg)'

# ufw (debian/systemd h3) and plain nftables (debian/runit h2) filter inside their host's netns
rssh 3 'systemd-run -q --unit=labtest-web python3 -m http.server 8080; ufw allow 22/tcp >/dev/null; ufw --force enable >/dev/null' >/dev/null
expect "h3 ufw enabled" "Status: active" rssh 3 'ufw status | head -1'
out=$(rssh 1 "timeout 3 bash -c 'exec 3<>/dev/tcp/$N.13/8080'"); rc=$?
[ $rc != 0 ] && ok "ufw drops a port it was not told to open (h1 -> h3:8080, rc=$rc)" || bad "ufw drops h3:8080" "rc=$rc $out"
check "...and keeps SSH open: h1 -> h3:22" lab ssh 1 "exec 3<>/dev/tcp/$N.13/22"
rssh 3 'ufw --force disable >/dev/null; systemctl stop labtest-web' >/dev/null
rssh 2 'setsid -f python3 -m http.server 8080 >/dev/null 2>&1 </dev/null
  nft -f - <<EOF
table inet labtest {
  chain input { type filter hook input priority 0; policy accept; tcp dport 8080 drop; }
}
EOF' >/dev/null
out=$(rssh 1 "timeout 3 bash -c 'exec 3<>/dev/tcp/$N.12/8080'"); rc=$?
[ $rc != 0 ] && ok "nftables table drops h2:8080 (rc=$rc)" || bad "nftables table drops h2:8080" "rc=$rc $out"
rssh 2 'nft delete table inet labtest' >/dev/null
check "...and h2:8080 answers once the table is deleted" lab ssh 1 "timeout 3 bash -c 'exec 3<>/dev/tcp/$N.12/8080'"

# containerd: installed, not running; started, it imports an image archive
"$(dirname "$LAB")/mkimage.py" "/tmp/lab_test.$$.tar" registry.lab:5000/lab/hello:1.0 \
  && for i in 2 3; do cp "/tmp/lab_test.$$.tar" "/proc/$(lab pid $i)/root/tmp/hello.tar"; done; rm -f "/tmp/lab_test.$$.tar"
rssh 3 'systemctl start containerd' >/dev/null
rssh 2 'ln -s /etc/sv/containerd /etc/service/containerd' >/dev/null   # runsvdir starts it within 5 s
for i in 2 3; do
  expect "h$i ctr -n k8s.io images import" "registry.lab:5000/lab/hello:1.0" rssh "$i" \
    'for _ in $(seq 100); do test -S /run/containerd/containerd.sock && break; sleep 0.1; done
     ctr -n k8s.io images import /tmp/hello.tar >/dev/null && ctr -n k8s.io images ls -q | grep -v ^sha256'
done
check "h3 containerd state is in its own dir, outside the overlay upper dir" bash -c \
  "test -s $S/hosts/h3/containerd/io.containerd.metadata.v1.bolt/meta.db && test ! -e $(lab upper 3)/var/lib/containerd/io.containerd.metadata.v1.bolt"

# SELinux stand-in (rocky hosts)
expect "h1 getenforce" Enforcing rssh 1 getenforce
expect "h1 setsebool -P then getsebool" "container_manage_cgroup --> off container_manage_cgroup --> on" \
  rssh 1 'echo $(getsebool container_manage_cgroup) $(setsebool -P container_manage_cgroup on && getsebool container_manage_cgroup)'
expect "h1 unknown boolean refused as setsebool does" "Boolean no_such_boolean is not defined rc=255" \
  rssh 1 'echo $(setsebool -P no_such_boolean on 2>&1) rc=$?'
expect "h1 semodule -X 400 -i then -l / -lfull" "labtest 400 labtest cil" \
  rssh 1 'printf "(type labtest_t)\n(roletype object_r labtest_t) ; a comment (\n" >/tmp/labtest.cil
          semodule -X 400 -i /tmp/labtest.cil && echo $(semodule -l | grep -x labtest) $(semodule -lfull | grep " labtest ")'
expect "h1 semodule refuses unbalanced CIL" "Open parenthesis without matching close rc=1 not-installed" \
  rssh 1 'printf "(type broken_t\n" >/tmp/broken.cil; semodule -i /tmp/broken.cil 2>/tmp/broken.err; rc=$?
          echo $(head -1 /tmp/broken.err) rc=$rc $(semodule -l | grep -qx broken || echo not-installed)'
expect "h1 semanage fcontext -a with the module's type, restorecon" "/srv/labtest(/.*)? all files system_u:object_r:labtest_t:s0 0" \
  rssh 1 "semanage fcontext -a -t labtest_t '/srv/labtest(/.*)?' && echo \$(semanage fcontext -l -C -n) \$(restorecon -R -F /srv; echo \$?)"
expect "h1 semodule -X 400 -r" gone rssh 1 'semodule -X 400 -r labtest && { semodule -l | grep -qx labtest || echo gone; }'
expect "h1 /etc/selinux/config is the knob" "Permissive Disabled Enforcing" rssh 1 \
  'c=/etc/selinux/config; sed -i s/^SELINUX=.*/SELINUX=permissive/ $c; a=$(getenforce)
   sed -i s/^SELINUX=.*/SELINUX=disabled/ $c; b=$(getenforce); sed -i s/^SELINUX=.*/SELINUX=enforcing/ $c; echo $a $b $(getenforce)'

# LAB_FIREWALLD=stopped: firewalld installed but disabled (recreates h1 only)
p3=$(lab pid 3)
if LAB_OS=rocky,debian,debian LAB_FIREWALLD=stopped lab up 3 2>/dev/null; then ok "up 3 with LAB_FIREWALLD=stopped"; else bad "up 3 with LAB_FIREWALLD=stopped"; fi
expect "h1 firewalld installed, disabled, not running" "disabled not running" \
  rssh 1 'echo $(systemctl is-enabled firewalld) $(firewall-cmd --state 2>&1)'
expect "h3 kept meanwhile" "$p3" lab pid 3
# real fapolicyd (permissive) on the rocky/systemd host: starts, loads a rules.d file, stops
expect "h1 fapolicyd starts (permissive), loads rules.d, stops" \
  "active 1. allow perm=any all : dir=/var/lib/rancher/ inactive" rssh 1 \
  'echo "allow perm=any all : dir=/var/lib/rancher/" >/etc/fapolicyd/rules.d/31-cargoship.rules
   systemctl start fapolicyd; a=$(systemctl is-active fapolicyd); l=$(fapolicyd-cli --list | head -1)
   /bin/true && systemctl stop fapolicyd; echo $a $l $(systemctl is-active fapolicyd)'

# ---------------------------------------------------------------- down
pids=$(for i in 1 2 3; do lab pid "$i"; cat "$S/hosts/h$i/pid"; done)
check "down" lab down
downed=1
expect "no netns with the prefix" "" bash -c "ip netns list 2>/dev/null | grep -E '^$P-' || true"
expect "no cgroup left" "" bash -c "find /sys/fs/cgroup -maxdepth 2 -name ${P}lab 2>/dev/null"
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
