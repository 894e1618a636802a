#!/usr/bin/env bash
# bench/install.sh - a k3s cluster from nothing on N lab hosts: cargoship apply vs an Ansible playbook doing the same host work.
#
# Usage: bench/install.sh [N...]   (default: 10 50; RTT_MS="0 100" the round-trip times to run
#        each N at, default 0: the lab's user-space delay relay, LAB_RTT_MS; SKIP=ans leaves
#        Ansible out; LAB_PREFIX/LAB_NET override the lab's
#        csin/10.244.0; PKG=... another k3s package, default build/lab-distros/k3s.tar.zst;
#        ONLY=cs runs cargoship alone, for profiling; KEEP=1 keeps the work dir and its
#        debug log cs-N.log; BY_PROGRAM=1 also prints each run's CPU by program: a perf
#        sampling of the whole machine while it ran, the client's processes included)
# Per N: brings up its own lab of N debian/runit hosts (h1 the controller, the others workers;
# Debian hosts take the package's APT flavour), then, each on hosts that start from nothing:
#   cargoship  ONE run of apply CLUSTER --distro k3s.tar.zst --confirm --concurrency N
#              --concurrent-uploads N --output json, under GNU time: the whole apply (its
#              dry-run plan, facts, lock, APT upload, config, controller then workers, each
#              waited for until Ready through the leader's kubectl, release), checked after: N
#              nodes Ready through h1's `k3s kubectl`
#   reset      tests/lab/lab.sh reset 1..N: every host recreated from the images, as new
#   floor      the same host work the leanest way by hand: OpenSSH with one ControlMaster per
#              host; per host one tar stream over ssh (the same debs, the same files with their
#              modes), then one ssh running apt-get install, apt-mark hold, the service link,
#              supervise wait, sv up (and on h1 the wait for 6443): h1 first, the workers'
#              uploads meanwhile, then the workers at once; then h1 polled until N nodes Ready
#   reset      again, before Ansible
#   Ansible    ansible-playbook -f N, tuned as a user would (pipelining on, ControlPersist 300 s,
#              forks = hosts; a fresh ControlPath dir, the lab's key and known_hosts through its
#              ssh_config), the same
#              host work: upload the same debs (unpacked from the package: k3s-common + the
#              role's k3s-server/k3s-agent) to the same staging dir, write the same
#              /etc/rancher/k3s files (config.yaml, registries.yaml, token files: copied from
#              h1 and h2 after the cargoship run, node-name/node-ip/tls-san templated), apt-get
#              install the debs and hold them as cargoship does, start k3s-server on h1 (runit:
#              link into /etc/service, wait for its supervisor, sv up), wait for 6443, then
#              k3s-agent on the workers, then wait on h1 until all N nodes are Ready; checked
#              after: every host's config.yaml byte for byte what cargoship wrote, N nodes Ready
# Prints, from the one cargoship run: wall seconds, client CPU (user+sys of the client and its
# children), peak RSS (GNU time's %M), what the lab hosts burnt meanwhile (the lab's cgroup:
# sshd, apt-get, dpkg, the stand-ins, kubectl; for Ansible also its Python modules on every
# host) and SSH round trips per host per phase from the JSON report (its per-phase per-host
# probes and writes counters, see below); the same figures for the playbook, and the ratio
# Ansible time / cargoship time (target >= 5x).
# Round trips: `probes` counts reads (one exec each), `writes` one per executed action or
# host:run/check/write_file/upload call; an upload counts 1 though SFTP spends several requests
# on it (open, pipelined writes, fsync, close, plus the sha256 check and the rename); the host
# lock's heartbeat (every 15 s) counts as a write of whatever phase runs then. The plan
# (the dry run a real apply shows first) is counted apart: its own probes per host per phase.
# cargoship also does work the playbook does not (facts, validation, the host lock, its
# manifest and distro-release.json): the comparison favours Ansible.
# Clients and the hosts share this machine's cores (2 here): ratios transfer, absolute figures
# do not. Needs root, a build (make; the lab-distros target is built if missing), GNU time;
# installs Debian's ansible if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("${@:-10 50}")
read -r -a NS <<<"${SIZES[*]}"
read -r -a RTTS <<<"${RTT_MS:-0}"
export LAB_PREFIX=${LAB_PREFIX:-csin} LAB_NET=${LAB_NET:-10.244.0} LAB_INIT=runit LAB_OS=debian
export LAB_STATE=${LAB_STATE:-/var/lib/cargoship-lab/$LAB_PREFIX}
LAB=tests/lab/lab.sh
STATE=$LAB_STATE
BIN=$PWD/build/bin/cargoship
PKG=${PKG:-$PWD/build/lab-distros/k3s.tar.zst}
[ -x "$BIN" ] || { echo "build first: make" >&2; exit 1; }
if [ ! -f "$PKG" ]; then
  echo "building the lab-distros packages ..." >&2
  (cd build && cmake . >/dev/null && cmake --build . -t lab-distros >/dev/null)
fi
if ! command -v ansible-playbook >/dev/null; then
  echo "installing Debian's ansible (bench only) ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q ansible >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ansible >/dev/null; }
fi
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 1; }
# BY_PROGRAM=1: runs "$@" under a machine-wide perf sampling (-a, 199 Hz), then adds its top
# programs by CPU samples to $WORK/programs (every process of the machine: the client's too)
accounted() {
  local name=$1; shift
  if [ -z "${BY_PROGRAM:-}" ]; then "$@"; return; fi
  perf record -q -a -F 199 -o "$WORK/$name.perf" -- "$@"
  { echo "  $name: CPU by program (perf -a, % of the machine's samples while it ran)"
    perf report -q -i "$WORK/$name.perf" --sort comm --stdio 2>/dev/null | awk 'NF >= 2 && NR <= 14 { printf "    %8s  %s\n", $1, $2 }'
  } >>"$WORK/programs"
}
WORK=$(mktemp -d /tmp/cs-install-bench.XXXXXX)
cleanup() { $LAB down >/dev/null 2>&1 || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT

# the engine files of the APT flavour, as the package ships them
mkdir -p "$WORK/pkg" "$WORK/debs"
tar -C "$WORK/pkg" -xf "$PKG"
for d in common server agent; do
  f=$(find "$WORK/pkg/os" -name "k3s-${d}_*.deb" | head -1)
  [ -n "$f" ] || { echo "no k3s-$d deb in $PKG" >&2; exit 1; }
  cp "$f" "$WORK/debs/"
done
[[ $("$BIN" package inspect "$PKG") == *$'\nengine:'*' k3s '* ]] || { echo "$PKG is not a k3s package" >&2; exit 1; }

# round trips per host per phase from the report (python3: the lab needs it anyway)
cat >"$WORK/roundtrips.py" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["outcome"] == "ok", "apply %s: %s" % (doc["outcome"], doc.get("error"))
n = len(doc["hosts"])
plan = {p["id"]: p for p in (doc.get("plan") or {}).get("phases", [])}
def mmm(xs):
    xs = sorted(xs + [0] * (n - len(xs)))  # hosts a phase did not concern spent nothing
    return "%3d-%3d-%3d" % (xs[0], xs[(n - 1) // 2], xs[-1])
print("  %3s  %-46s %-11s %-11s %-11s %8s" % ("#", "phase (per host: min-median-max)", "plan reads", "run reads", "run writes", "run s"))
tp = tr = tw = tt = 0
for p in doc["phases"]:
    hs = p["hosts"]
    pp = plan.get(p["id"], {"hosts": []})["hosts"]
    r, w, q = [h["probes"] for h in hs], [h["writes"] for h in hs], [h.get("round_trips", h["probes"]) for h in pp]
    t = [h.get("round_trips", 0) for h in hs]; tt += sum(t)
    tp += sum(q); tr += sum(r); tw += sum(w)
    note = "  +1 SSH connection" if p["id"] == "connect" else ""
    print("  %3d  %-46s %s %s %s %8.2f%s" % (p["number"], p["title"][:46], mmm(q), mmm(r), mmm(w), p["elapsed"], note))
print("  total per host (mean): 1 connection + %.1f plan reads + %.1f run reads + %.1f run writes = %.1f round trips"
      % (tp / n, tr / n, tw / n, (tp + tr + tw) / n))
print("  the transport's count (every command and file sent, sudo checks and lock beats included): plan %.1f + run %.1f"
      " round trips per host" % (tp / n, tt / n))
print("  (the report's own elapsed: %.2f s)" % doc["elapsed"])
PY

cat >"$WORK/inlab.sh" <<'INLAB'
set -euo pipefail
mode=$1 N=$2 STATE=$3 BIN=$4 WORK=$5 PKG=$6
CFG=$STATE/ssh_config
ready() { ssh -n -F "$CFG" h1 'k3s kubectl get nodes --no-headers' 2>/dev/null | awk '$2 == "Ready"' | wc -l; }
sums() { xargs -a "$WORK/hosts-$N" -P "$N" -I{} ssh -n -F "$CFG" {} 'echo "$(hostname) $(sha256sum </etc/rancher/k3s/config.yaml)"' | sort; }
# what all lab hosts burnt so far (sshd, apt-get, dpkg, the stand-ins, kubectl): the lab's
# cgroup, fd 9, opened outside the netns
hosts_usec() { awk '/^usage_usec/{print $2}' /dev/fd/9; }
# one client run under GNU time -> "wall cpu rss_kib hosts_cpu" on stdout
timed() {
  local name=$1 s e h0 h1 rc=0; shift
  h0=$(hosts_usec); s=$(date +%s.%N)
  /usr/bin/time -o "$WORK/$name.time" -f '%U %S %M' "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  e=$(date +%s.%N); h1=$(hosts_usec)
  [ "$rc" = 0 ] || { echo "$name failed (exit $rc), see $WORK/$name.err" >&2; tail -15 "$WORK/$name.err" >&2; exit 1; }
  awk -v a="$s" -v b="$e" -v h="$((h1 - h0))" '{printf "%.3f %.3f %d %.3f\n", b-a, $1+$2, $3, h/1e6}' "$WORK/$name.time"
}
case $mode in
  floor)
    cp=$(mktemp -d)
    # shellcheck disable=SC2317  # run through xargs/timed
    # one ControlMaster per host, opened by its first ssh and reused by the rest
    fssh() { ssh -F "$CFG" -o ControlMaster=auto -o "ControlPath=$cp/%h" -o ControlPersist=300 "$@"; }
    up() { tar -C "$WORK/floor-$N/$1" -cf - . | fssh "$1" 'tar -C / -xpf - --no-overwrite-dir --no-same-owner'; }
    start() { fssh -n "$1" "$(cat "$WORK/floor-$N/$1.start")"; }
    floor_run() {
      local W; W=$(tail -n +2 "$WORK/hosts-$N")
      { up h1 && start h1; } &
      local c=$!
      [ -z "$W" ] || xargs -P "$N" -I{} bash -c 'up "$1"' _ {} <<<"$W"
      wait "$c"
      [ -z "$W" ] || xargs -P "$N" -I{} bash -c 'start "$1"' _ {} <<<"$W"
      until [ "$(fssh -n h1 'k3s kubectl get nodes --no-headers 2>/dev/null' | awk '$2 == "Ready"' | wc -l)" = "$N" ]; do
        sleep 0.5
      done
      xargs -a "$WORK/hosts-$N" -P "$N" -I{} bash -c 'fssh -n -O exit "$1"' _ {} 2>/dev/null || true
    }
    export -f fssh up start floor_run; export WORK N CFG cp
    timed "floor-$N" bash -c floor_run
    rm -rf "$cp"
    r=$(ready); [ "$r" = "$N" ] || { echo "floor: $r of $N nodes Ready" >&2; exit 1; }
    sums >"$WORK/sums-floor-$N"
    cmp -s "$WORK/sums-cs-$N" "$WORK/sums-floor-$N" \
      || { echo "the floor's config.yaml differs from cargoship's:" >&2; diff "$WORK/sums-cs-$N" "$WORK/sums-floor-$N" >&2; exit 1; }
    ;;
  cs)
    timed "cs-$N" "$BIN" apply "$WORK/cluster-$N.yaml" --distro "$PKG" --confirm \
      --concurrency "$N" --concurrent-uploads "$N" --output json --log-file "$WORK/cs-$N.log"
    cp "$WORK/cs-$N.out" "$WORK/report-$N.json"
    r=$(ready); [ "$r" = "$N" ] || { echo "cargoship: $r of $N nodes Ready" >&2; exit 1; }
    sums >"$WORK/sums-cs-$N"
    # the config cargoship wrote, from the controller and one worker, for the playbook
    mkdir -p "$WORK/cfg-$N"
    for f in config.yaml registries.yaml token agent-token; do
      ssh -n -F "$CFG" h1 "cat /etc/rancher/k3s/$f" >"$WORK/cfg-$N/controller-$f"
    done
    for f in config.yaml registries.yaml agent-token; do
      ssh -n -F "$CFG" h2 "cat /etc/rancher/k3s/$f" >"$WORK/cfg-$N/worker-$f"
    done
    ;;
  ans)
    cp=$(mktemp -d)
    ANSIBLE_SSH_CONTROL_PATH_DIR=$cp ANSIBLE_NOCOLOR=1 ANSIBLE_RETRY_FILES_ENABLED=False ANSIBLE_PIPELINING=True \
      ANSIBLE_SSH_ARGS='-C -o ControlMaster=auto -o ControlPersist=300s' \
      timed "ans-$N" ansible-playbook -i "$WORK/inventory-$N.ini" -f "$N" "$WORK/install.yml"
    rm -rf "$cp"
    r=$(ready); [ "$r" = "$N" ] || { echo "Ansible: $r of $N nodes Ready" >&2; exit 1; }
    sums >"$WORK/sums-ans-$N"
    cmp -s "$WORK/sums-cs-$N" "$WORK/sums-ans-$N" \
      || { echo "the playbook's config.yaml differs from cargoship's:" >&2; diff "$WORK/sums-cs-$N" "$WORK/sums-ans-$N" >&2; exit 1; }
    ;;
esac
INLAB

# the playbook: the same files, config and services, in cargoship's order
COMMON_DEB=$(basename "$(ls "$WORK"/debs/k3s-common_*.deb)")
cat >"$WORK/install.yml" <<EOF
- hosts: all
  gather_facts: false
  tasks:
    - file: {path: /var/lib/rancher/k3s/deb, state: directory, mode: "0755"}
    - copy: {src: "$WORK/debs/$COMMON_DEB", dest: "/var/lib/rancher/k3s/deb/$COMMON_DEB", mode: "0644"}
    - copy: {src: "{{ role_deb }}", dest: "/var/lib/rancher/k3s/deb/{{ role_deb | basename }}", mode: "0644"}
    - file: {path: /etc/rancher/k3s, state: directory, mode: "0755"}
    - template: {src: "{{ cfg }}/{{ role }}-config.yaml.j2", dest: /etc/rancher/k3s/config.yaml, mode: "0600"}
    - copy: {src: "{{ cfg }}/{{ role }}-registries.yaml", dest: /etc/rancher/k3s/registries.yaml, mode: "0640"}
    - copy: {src: "{{ cfg }}/{{ role }}-agent-token", dest: /etc/rancher/k3s/agent-token, mode: "0600"}
    - copy: {src: "{{ cfg }}/controller-token", dest: /etc/rancher/k3s/token, mode: "0600"}
      when: role == "controller"
- hosts: controller
  gather_facts: false
  tasks: &start
    - command: >-
        env DEBIAN_FRONTEND=noninteractive apt-get -q -y install
        /var/lib/rancher/k3s/deb/$COMMON_DEB /var/lib/rancher/k3s/deb/{{ role_deb | basename }}
    - command: apt-mark hold k3s-common {{ service }}
    - file: {src: "/etc/sv/{{ service }}", dest: "/etc/service/{{ service }}", state: link}
    - wait_for: {path: "/etc/service/{{ service }}/supervise/ok", timeout: 30}
    - command: sv up /etc/service/{{ service }}
    - wait_for: {host: "{{ ansible_host }}", port: 6443, timeout: 120}
      when: role == "controller"
- hosts: workers
  gather_facts: false
  tasks: *start
- hosts: controller
  gather_facts: false
  tasks:
    - shell: k3s kubectl get nodes --no-headers | awk '\$2 == "Ready"' | wc -l
      register: ready
      until: ready.stdout | int == groups['all'] | length
      retries: 300
      delay: 1
      changed_when: false
EOF

# a node-specific file -> a template: that host's address and name become variables
templ() {  # FILE ADDR NAME
  sed -e "s/${2//./\\.}/{{ ansible_host }}/g" -e "s/\\b$3\\b/{{ inventory_hostname }}/g" "$1"
}

# the floor's files per host: the same bytes and modes cargoship wrote (a worker's config.yaml
# is h2's with that host's address and name), and its start script
floor_tree() {  # N CTRL
  local n=$1 ctrl=$2 name addr role deb svc d c=$WORK/cfg-$1 a2
  a2=$(sed -n 2p "$STATE/hosts.tsv" | cut -f2)
  while IFS=$'\t' read -r name addr _ _; do
    role=worker svc=k3s-agent deb=$(basename "$(ls "$WORK"/debs/k3s-agent_*.deb)")
    [ "$name" = h1 ] && role=controller svc=k3s-server deb=$(basename "$(ls "$WORK"/debs/k3s-server_*.deb)")
    d=$WORK/floor-$n/$name
    rm -rf "$d"; mkdir -p "$d/var/lib/rancher/k3s/deb" "$d/etc/rancher/k3s"
    install -m 0644 "$WORK/debs/$COMMON_DEB" "$WORK/debs/$deb" "$d/var/lib/rancher/k3s/deb/"
    if [ "$role" = controller ]; then
      install -m 0600 "$c/controller-config.yaml" "$d/etc/rancher/k3s/config.yaml"
      install -m 0600 "$c/controller-token" "$d/etc/rancher/k3s/token"
    else
      sed -e "s/${a2//./\\.}/$addr/g" -e "s/\bh2\b/$name/g" "$c/worker-config.yaml" >"$d/etc/rancher/k3s/config.yaml"
      chmod 0600 "$d/etc/rancher/k3s/config.yaml"
    fi
    install -m 0640 "$c/$role-registries.yaml" "$d/etc/rancher/k3s/registries.yaml"
    install -m 0600 "$c/$role-agent-token" "$d/etc/rancher/k3s/agent-token"
    {
      echo 'set -e; cd /var/lib/rancher/k3s/deb'
      echo "DEBIAN_FRONTEND=noninteractive apt-get -q -y install ./$COMMON_DEB ./$deb >/dev/null"
      echo "apt-mark hold k3s-common $svc >/dev/null"
      echo "ln -sfn /etc/sv/$svc /etc/service/$svc"
      echo "until [ -e /etc/service/$svc/supervise/ok ]; do sleep 0.1; done"
      echo "sv up /etc/service/$svc >/dev/null"
      [ "$role" = worker ] || echo "until (exec 3<>/dev/tcp/$ctrl/6443) 2>/dev/null; do sleep 0.2; done"
    } >"$WORK/floor-$n/$name.start"
  done < <(head -n "$n" "$STATE/hosts.tsv")
}

for RTT in "${RTTS[@]}"; do
if [ "$RTT" = 0 ]; then unset LAB_RTT_MS; else export LAB_RTT_MS=$RTT; fi
for N in "${NS[@]}"; do
  $LAB down >/dev/null 2>&1 || true   # every host new: a lab left running may hold an earlier install
  $LAB up "$N" >/dev/null
  head -n "$N" "$STATE/hosts.tsv" | cut -f1 >"$WORK/hosts-$N"
  CTRL=$(head -1 "$STATE/hosts.tsv" | cut -f2)
  {
    printf 'apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: install-bench\nspec:\n'
    printf '  config:\n    loadbalancer: %s\n  hosts:\n' "$CTRL"
    while IFS=$'\t' read -r name addr _ _; do
      role=worker; [ "$name" = h1 ] && role=controller
      printf '    - role: %s\n      hostname: %s\n      ssh:\n        address: %s\n        user: root\n' \
        "$role" "$name" "$addr"
      printf '        keyPath: %s\n        options: {UserKnownHostsFile: %s}\n' "$STATE/id_ed25519" "$STATE/known_hosts"
    done < <(head -n "$N" "$STATE/hosts.tsv")
  } >"$WORK/cluster-$N.yaml"
  {
    while IFS=$'\t' read -r name addr _ _; do
      [ "$name" = h1 ] && printf '[controller]\n%s ansible_host=%s\n[workers]\n' "$name" "$addr" \
        || printf '%s ansible_host=%s\n' "$name" "$addr"
    done < <(head -n "$N" "$STATE/hosts.tsv")
    printf '[controller:vars]\nrole=controller\nservice=k3s-server\nrole_deb=%s\n' "$(ls "$WORK"/debs/k3s-server_*.deb)"
    printf '[workers:vars]\nrole=worker\nservice=k3s-agent\nrole_deb=%s\n' "$(ls "$WORK"/debs/k3s-agent_*.deb)"
    printf '[all:vars]\nansible_user=root\nansible_python_interpreter=/usr/bin/python3\n'
    printf "ansible_ssh_common_args='-F %s'\ncfg=%s\n" "$STATE/ssh_config" "$WORK/cfg-$N"
  } >"$WORK/inventory-$N.ini"

  CG=$(findmnt -rn -t cgroup2 -o TARGET | head -1)/${LAB_PREFIX}lab
  accounted "cs-$N-${RTT}ms" $LAB exec bash "$WORK/inlab.sh" cs "$N" "$STATE" "$BIN" "$WORK" "$PKG" </dev/null >"$WORK/result-$N" 9<"$CG/cpu.stat"
  C=$WORK/cfg-$N
  templ "$C/controller-config.yaml" "$CTRL" h1 >"$C/controller-config.yaml.j2"
  templ "$C/worker-config.yaml" "$(sed -n 2p "$STATE/hosts.tsv" | cut -f2)" h2 >"$C/worker-config.yaml.j2"
  mapfile -t ALL < <(seq 1 "$N")
  if [ "${ONLY:-}" = cs ]; then   # cargoship's run alone, for profiling: no ratio
    $LAB down >/dev/null 2>&1; sed 's/^/  raw: /' "$WORK/result-$N"; python3 "$WORK/roundtrips.py" "$WORK/report-$N.json"
    if [ -f "$WORK/programs" ]; then cat "$WORK/programs"; rm -f "$WORK/programs"; fi
    continue
  fi
  floor_tree "$N" "$CTRL"
  $LAB reset "${ALL[@]}" >/dev/null 2>&1
  accounted "floor-$N-${RTT}ms" $LAB exec bash "$WORK/inlab.sh" floor "$N" "$STATE" "$BIN" "$WORK" "$PKG" </dev/null >>"$WORK/result-$N" 9<"$CG/cpu.stat"
  if [ "${SKIP:-}" != ans ]; then
    $LAB reset "${ALL[@]}" >/dev/null 2>&1
    accounted "ans-$N-${RTT}ms" $LAB exec bash "$WORK/inlab.sh" ans "$N" "$STATE" "$BIN" "$WORK" "$PKG" </dev/null >>"$WORK/result-$N" 9<"$CG/cpu.stat"
  fi
  $LAB down >/dev/null 2>&1

  sed 's/^/  raw: /' "$WORK/result-$N"   # cargoship, floor, then Ansible: wall cpu rss_kib hosts_cpu
  awk -v n="$N" -v cores="$(nproc)" -v rtt="$RTT" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" '
    NR == 1 { w1 = $1; c1 = $2; m1 = $3; h1 = $4 } NR == 2 { wf = $1; cf = $2; mf = $3; hf = $4 }
    NR == 3 { w2 = $1; c2 = $2; m2 = $3; h2 = $4 }
    END {
      printf "k3s from nothing on %d debian/runit hosts (1 controller, %d workers; APT flavour), RTT %s ms; clients and hosts share this machine'"'"'s %d cores (load after: %s)\n", n, n - 1, rtt, cores, load
      printf "  %-44s %8s %11s %11s %10s %6s\n", "", "wall s", "client cpu", "peak RSS", "hosts cpu", "cores"
      printf "  %-44s %8.2f %11.2f %7.1f MiB %10.2f %6.2f\n", "cargoship apply --distro (one run)", w1, c1, m1 / 1024, h1, (c1 + h1) / w1
      printf "  %-44s %8.2f %11.2f %7.1f MiB %10.2f %6.2f\n", "floor: OpenSSH ControlMaster, a script a host", wf, cf, mf / 1024, hf, (cf + hf) / wf
      if (NR >= 3) printf "  %-44s %8.2f %11.2f %7.1f MiB %10.2f %6.2f\n", "ansible-playbook -f " n " (tuned, same work)", w2, c2, m2 / 1024, h2, (c2 + h2) / w2
      printf "  (cores = (client cpu + hosts cpu) / wall: near %d, the run was bound by this machine'"'"'s CPU)\n", cores
      printf "  cargoship / floor: %.2fx wall, %.2fx hosts cpu (target <= 1.15x: %s)\n", w1 / wf, h1 / hf, (w1 / wf <= 1.15 && h1 / hf <= 1.15) ? "met" : "NOT met"
      if (NR >= 3) printf "  Ansible / cargoship time: %.2fx (target >= 5x: %s)\n", w2 / w1, (w2 / w1 >= 5) ? "met" : "NOT met"
    }' "$WORK/result-$N"
  echo "  SSH round trips per host per phase (the cargoship run's JSON report):"
  python3 "$WORK/roundtrips.py" "$WORK/report-$N.json"
  if [ -f "$WORK/programs" ]; then cat "$WORK/programs"; rm -f "$WORK/programs"; fi
done
done
