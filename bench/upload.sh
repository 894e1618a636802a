#!/usr/bin/env bash
# bench/upload.sh - one ~256 MiB distro package to N lab hosts: cargoship apply vs OpenSSH scp fan-out vs an Ansible copy playbook.
#
# Usage: bench/upload.sh [N...]   (default: 10 50; RUNS=1 timed run of each per N, medians
#        when RUNS > 1; SIZE_MIB=256; LAB_PREFIX/LAB_NET override the lab's csup/10.247.0)
# Per N: brings up its own lab (debian/runit hosts), builds one package with `cargoship
# package create` holding one SIZE_MIB file of random bytes (incompressible), then, each
# cold, from an empty target directory on every host and after a `sync` (no run pays for
# the writeback of the one before it):
#   cargoship  apply --distro PKG --skip-phases 18-22 (the package carries no engine) --confirm
#              --concurrency N --concurrent-uploads N: the whole
#              apply (connect, facts, lock, the upload phases, release), so its fixed cost
#              is in the figure; the file goes to a temp name, is fsync'd, checked on the host
#              and renamed
#   cargoship --upload-transport openssh: the same apply, its upload phases sending through
#              an ssh master per host (encryption in one ssh process per host, on every core)
#   OpenSSH    scp (OpenSSH 9's scp speaks SFTP) of the same file to every host, xargs -P N,
#              one fresh connection per host; no fsync, no check
#   scp+checks the same with cargoship's guarantees: to a temp name, then one ssh per host
#              that syncs it, checks its sha256 and renames it (like for like)
#   Ansible    ansible-playbook, one `copy` task (mode 0644), forks N, fresh ControlPath dir
# TOOLS (default "cs cs_ossh ossh ossh_safe ans") picks the clients.
# Prints wall seconds, aggregate throughput (N x size / wall), client CPU (user+sys of the
# client and its children) and peak RSS (GNU time's %M: the largest single process of the
# client's tree, not their sum), then the ratios the targets are stated in:
# cargoship/OpenSSH throughput (target >= 1.0x) and Ansible/cargoship time (target >= 5x).
# Clients and the hosts' sshds share this machine's cores: ratios transfer, absolute
# figures do not. Needs root, a build (make) and Debian's ansible.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("${@:-10 50}")
read -r -a NS <<<"${SIZES[*]}"
RUNS=${RUNS:-1}
SIZE_MIB=${SIZE_MIB:-256}
TOOLS=${TOOLS:-cs cs_ossh ossh ossh_safe ans}
export LAB_PREFIX=${LAB_PREFIX:-csup} LAB_NET=${LAB_NET:-10.247.0} LAB_INIT=runit LAB_OS=debian
LAB=tests/lab/lab.sh
STATE=/var/lib/cargoship-lab/$LAB_PREFIX
BIN=$PWD/build/bin/cargoship
[ -x "$BIN" ] || { echo "build first: make" >&2; exit 1; }
case " $TOOLS " in *" ans "*) command -v ansible-playbook >/dev/null || { echo "needs Debian's ansible" >&2; exit 1; } ;; esac
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/cs-upload-bench.XXXXXX)
cleanup() { $LAB down >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

# the package: one big random file, and the target dir every client writes into
mkdir -p "$WORK/src"
head -c $((SIZE_MIB * 1048576)) /dev/urandom >"$WORK/src/blob.bin"
SUM=$(sha256sum "$WORK/src/blob.bin" | cut -c1-64)
cat >"$WORK/src/distro.yaml" <<EOF
kind: ZarfDistro
metadata: {name: upload-bench, version: 1.35.3, architecture: amd64}
spec:
  type: upstream
  version: 1.35.3
  config:
    files:
      - {source: blob.bin, target: /opt/cs-bench/blob.bin, perm: "0644", shasum: "$SUM"}
EOF
PKG=$("$BIN" package create "$WORK/src" -o "$WORK")
cat >"$WORK/copy.yml" <<EOF
- hosts: all
  gather_facts: false
  tasks:
    - copy: {src: $WORK/src/blob.bin, dest: /opt/cs-bench/blob.bin, mode: "0644"}
EOF

cat >"$WORK/inlab.sh" <<'INLAB'
set -euo pipefail
N=$1 RUNS=$2 STATE=$3 BIN=$4 WORK=$5 PKG=$6 SUM=$7 TOOLS=$8
CFG=$STATE/ssh_config HOSTS=$WORK/hosts-$N CLUSTER=$WORK/cluster-$N.yaml
med() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# every run starts with no dirty page cache: otherwise a run pays for the writeback of the
# one before it (scp leaves its files unsynced) or of the package just built (the first run)
reset_hosts() {
  xargs -a "$HOSTS" -P "$N" -I{} ssh -n -F "$CFG" {} \
    'rm -rf /opt/cs-bench /var/lib/cargoship/manifest.txt /etc/cargoship/distro-release.json; mkdir -p /opt/cs-bench'
  sync
}
check_hosts() {
  local good
  good=$(xargs -a "$HOSTS" -P "$N" -I{} ssh -n -F "$CFG" {} 'sha256sum /opt/cs-bench/blob.bin' 2>/dev/null \
    | grep -c "^$SUM " || true)
  [ "$good" = "$N" ] || { echo "only $good of $N hosts hold the file after $1" >&2; exit 1; }
}
# one run -> "wall cpu rss_kib"
timed() {
  local name=$1 s e rc=0; shift
  reset_hosts
  s=$(date +%s.%N)
  /usr/bin/time -o "$WORK/time" -f '%U %S %M' bash -c '"$@"' _ "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  e=$(date +%s.%N)
  [ "$rc" = 0 ] || { echo "$name failed (exit $rc), see $WORK/$name.err" >&2; tail -5 "$WORK/$name.err" >&2; exit 1; }
  check_hosts "$name"
  awk -v a="$s" -v b="$e" '{printf "%.3f %.3f %d\n", b-a, $1+$2, $3}' "$WORK/time"
}
cs() { "$BIN" apply "$CLUSTER" --distro "$PKG" --skip-phases 18-22 --confirm -q --concurrency "$N" --concurrent-uploads "$N"; }
cs_ossh() { cs --upload-transport openssh; }
ossh() { xargs -a "$HOSTS" -P "$N" -I{} scp -q -F "$CFG" "$WORK/src/blob.bin" {}:/opt/cs-bench/blob.bin; }
# the same guarantees as cargoship's upload: to a temp name, fsync'd, sha256 checked on the host, renamed
ossh_safe() {
  xargs -a "$HOSTS" -P "$N" -I{} sh -c 'scp -q -F "$1" "$2" "$3:/opt/cs-bench/.blob.bin.tmp" && ssh -n -F "$1" "$3" \
    "cd /opt/cs-bench && sync .blob.bin.tmp && echo \"$4  .blob.bin.tmp\" | sha256sum -c --quiet && mv .blob.bin.tmp blob.bin"' \
    _ "$CFG" "$WORK/src/blob.bin" {} "$SUM"
}
ans() {
  local cp; cp=$(mktemp -d)
  ANSIBLE_SSH_CONTROL_PATH_DIR=$cp ANSIBLE_NOCOLOR=1 ANSIBLE_HOST_KEY_CHECKING=False \
    ansible-playbook -i "$STATE/inventory.ini" -f "$N" "$WORK/copy.yml"
  local rc=$?; rm -rf "$cp"; return $rc
}
export N BIN CLUSTER PKG HOSTS CFG WORK STATE SUM
export -f cs cs_ossh ossh ossh_safe ans
for tool in $TOOLS; do
  : >"$WORK/$tool.runs"
  for _ in $(seq "$RUNS"); do timed "$tool" "$tool" >>"$WORK/$tool.runs"; done
  printf '%s %s %s %s\n' "$tool" "$(cut -d' ' -f1 "$WORK/$tool.runs" | med)" \
    "$(cut -d' ' -f2 "$WORK/$tool.runs" | med)" "$(cut -d' ' -f3 "$WORK/$tool.runs" | sort -n | tail -1)"
done
INLAB

for N in "${NS[@]}"; do
  $LAB up "$N" >/dev/null
  cut -f1 "$STATE/hosts.tsv" | head -n "$N" >"$WORK/hosts-$N"
  {
    printf 'apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: upload-bench\nspec:\n'
    printf '  config:\n    loadbalancer: h1.lab.internal\n  hosts:\n'
    while IFS=$'\t' read -r name addr _ _; do
      role=worker; [ "$name" = h1 ] && role=controller
      printf '    - role: %s\n      hostname: %s\n      ssh:\n        address: %s\n        user: root\n' \
        "$role" "$name" "$addr"
      printf '        keyPath: %s\n        options: {UserKnownHostsFile: %s}\n' "$STATE/id_ed25519" "$STATE/known_hosts"
    done <"$STATE/hosts.tsv"
  } >"$WORK/cluster-$N.yaml"
  $LAB exec bash "$WORK/inlab.sh" "$N" "$RUNS" "$STATE" "$BIN" "$WORK" "$PKG" "$SUM" "$TOOLS" </dev/null >"$WORK/result-$N"
  $LAB down >/dev/null
  sed 's/^/  raw: /' "$WORK/result-$N"   # tool wall cpu rss_kib, before any arithmetic
  awk -v n="$N" -v mib="$SIZE_MIB" '
    { wall[$1] = $2; cpu[$1] = $3; rss[$1] = $4; ran[$1] = 1 }
    function ratio(what, a, b, target,   r) {
      if (!(a in ran) || !(b in ran)) return
      r = wall[b] / wall[a]
      if (target) printf("  %s %.2fx (target >= %gx: %s)\n", what, r, target, r >= target ? "met" : "NOT met")
      else printf("  %s %.2fx\n", what, r)
    }
    END {
      printf "%d hosts, %d MiB each (%d MiB in all)\n", n, mib, n * mib
      split("cs cs_ossh ossh ossh_safe ans", order, " ")
      label["cs"] = "cargoship apply --distro"; label["cs_ossh"] = "cargoship --upload-transport openssh"
      label["ossh"] = "OpenSSH scp fan-out"
      label["ossh_safe"] = "scp + fsync + sha256 + mv"; label["ans"] = "Ansible copy playbook"
      printf("  %-36s %8s %11s %9s %10s\n", "", "wall s", "MiB/s", "cpu s", "peak RSS")
      for (i = 1; i <= 5; i++) { t = order[i]; if (!(t in ran)) continue
        printf("  %-36s %8.2f %11.1f %9.2f %7.1f MiB\n", label[t], wall[t], n * mib / wall[t], cpu[t], rss[t] / 1024) }
      ratio("cargoship / OpenSSH throughput:", "cs", "ossh", 1.0)
      ratio("Ansible / cargoship time:      ", "cs", "ans", 5)
      ratio("cargoship / (scp + fsync + sha256 + mv) throughput:", "cs", "ossh_safe", 0)
      ratio("cargoship openssh uploads / (scp + fsync + sha256 + mv) throughput:", "cs_ossh", "ossh_safe", 1.0)
      ratio("cargoship openssh uploads / libssh2 uploads throughput:", "cs_ossh", "cs", 0)
    }' "$WORK/result-$N"
done
