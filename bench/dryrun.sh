#!/usr/bin/env bash
# bench/dryrun.sh - `apply --dry-run` vs cargoship exec, OpenSSH fan-out of the same probes, Ansible's setup.
#
# Usage: bench/dryrun.sh [N [RTT_MS]]   (default 50 hosts, no added latency; RUNS=3 timed runs
#        of each, medians). RTT_MS gives every lab host that round-trip time (LAB_RTT_MS: the
#        lab's user-space delay relay, tests/lab/README.md); the target at 100 ms is dry run
#        <= 1.5x exec.
# Brings up its own lab (prefix csdb, 10.246.0.0/24, debian/runit hosts: cheapest to start),
# runs every client inside the lab's network namespace, prints medians, the ratios the
# targets are stated in and the SSH round trips per host per phase, then tears the lab down.
# Each row also shows the client's CPU and what all lab hosts burnt meanwhile (the lab's
# cgroup): on a lab whose hosts share this machine's cores, that says whether a run waited
# (network, barriers, concurrency caps) or was bound by CPU.
# Needs root and a build (make). Installs Debian's ansible if it is missing (big: only this
# bench needs it, not CI). Clients and sshds share this machine's cores: ratios transfer,
# absolute times do not.
#
# What is compared, each cold (a fresh process, no SSH connection reused between runs):
#   dry run    cargoship apply --dry-run over the N hosts, --concurrency N (as wide as the
#              peers' fan-out); also once more with apply's default concurrency, for reference
#   exec       cargoship exec --concurrency N -- uname -a: one command per host
#   OpenSSH    the very probe scripts the dry run sends, captured from a dry run (a Lua shim
#              wraps Host:probe, through which every read goes, and writes each command to a
#              file per host and round trip). Per host, one ssh per round trip of the dry run,
#              in the dry run's order (os-release/uname/init, then ip addr/route/date/
#              hostname/firewall, then the engine version probes, then the lock read): as many
#              ssh connections per host as the dry run has round trips per host. Hosts run
#              in parallel with xargs -P N, each host's ssh commands one after another.
#              "per phase" runs one xargs -P N per round trip instead: a barrier after each,
#              as the dry run has between phases.
#   Ansible    ansible all -m setup -f N with the lab's inventory.ini and Ansible's default
#              ssh args; a fresh ControlPath dir per run, so ControlPersist reuses nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50}
RTT_MS=${2:-}
RUNS=${RUNS:-3}
if [ -n "$RTT_MS" ]; then export LAB_RTT_MS=$RTT_MS; else unset LAB_RTT_MS; fi
export LAB_PREFIX=${LAB_PREFIX:-csdb} LAB_NET=${LAB_NET:-10.246.0} LAB_INIT=runit LAB_OS=debian
LAB=tests/lab/lab.sh
STATE=/var/lib/cargoship-lab/$LAB_PREFIX
BIN=$PWD/build/bin/cargoship
[ -x "$BIN" ] || { echo "build first: make" >&2; exit 1; }
if ! command -v ansible >/dev/null; then
  echo "installing Debian's ansible (bench only) ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q ansible >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ansible >/dev/null; }
fi
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 1; }
# the bench's own files in the lab's state dir go with the lab
cleanup() {
  rm -rf "$STATE"/{cluster-"$N".yaml,hosts-"$N",capture.lua,roundtrips.lua,bench-inlab.sh,ossh-host.sh,cmds} \
    "$STATE"/{dryrun.json,probes-per-host}
  $LAB down >/dev/null 2>&1 || true
}
trap cleanup EXIT

$LAB up "$N" >/dev/null
# a cluster file of the N hosts; host keys checked against the lab's known_hosts
{
  printf 'apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: bench\nspec:\n'
  printf '  config:\n    loadbalancer: h1.lab.internal\n  hosts:\n'
  while IFS=$'\t' read -r name addr _ _; do
    role=worker; [ "$name" = h1 ] && role=controller
    printf '    - role: %s\n      hostname: %s\n      ssh:\n        address: %s\n        user: root\n' "$role" "$name" "$addr"
    printf '        keyPath: %s/id_ed25519\n        options:\n          UserKnownHostsFile: %s/known_hosts\n' "$STATE" "$STATE"
  done < <(head -n "$N" "$STATE/hosts.tsv")
} > "$STATE/cluster-$N.yaml"
head -n "$N" "$STATE/hosts.tsv" | cut -f1 > "$STATE/hosts-$N"

# records every read command the dry run sends: <dir>/<host>.<k>, k = the host's k-th round trip
cat > "$STATE/capture.lua" <<'LUA'
local dir = assert(arg[1])
package.loaded["cargoship.build"] = { version = "bench-capture", root = os.getenv("CS_ROOT") }
local Host = getmetatable(require("cargoship.host").new { config = { name = "x" } }).__index
local probe, seq = Host.probe, {}
function Host.probe(self, cmd, opts)
  -- answered from the prefetch batch (facts/prefetch.lua): nothing went to the host
  if self:recall(cmd, not (opts and opts.sudo == false)) then return probe(self, cmd, opts) end
  seq[self.name] = (seq[self.name] or 0) + 1
  local f = assert(io.open(string.format("%s/%s.%d", dir, self.name, seq[self.name]), "w"))
  f:write(cmd)
  f:close()
  return probe(self, cmd, opts)
end
os.exit(require("cargoship.cli").main(table.move(arg, 2, #arg, 1, {})))
LUA

# round trips per host per phase, from a JSON report; fails unless every host was reached
cat > "$STATE/roundtrips.lua" <<'LUA'
local cjson = require "cjson"
local doc = cjson.decode(io.read("a"))
local n = #doc.hosts
assert(doc.outcome == "pending" or doc.outcome == "ok", "dry run " .. tostring(doc.outcome) .. ": " .. tostring(doc.error))
if arg[1] == "check" then
  for _, p in ipairs(doc.phases) do
    for _, h in ipairs(p.hosts) do assert(h.error == cjson.null, h.host .. ": " .. tostring(h.error)) end
  end
  -- per host: its total probes, for the capture check
  local per = {}
  for _, p in ipairs(doc.phases) do for _, h in ipairs(p.hosts) do per[h.host] = (per[h.host] or 0) + h.probes end end
  for _, name in ipairs(doc.hosts) do print(string.format("%s\t%d", name, per[name] or 0)) end
  return
end
print(string.format("%3s  %-44s %-12s %-22s %s", "#", "phase", "verdict", "round trips/host min-med-max",
  "writes/host"))
local total = 0
for _, p in ipairs(doc.phases) do
  local xs, w = {}, 0
  for _, h in ipairs(p.hosts) do xs[#xs + 1] = h.round_trips; w = math.max(w, h.writes) end
  while #xs < n do xs[#xs + 1] = 0 end -- hosts the phase did not concern spent nothing
  table.sort(xs)
  local note = p.id == "connect" and "  (+1 SSH connection: handshake, auth)" or ""
  print(string.format("%3d  %-44s %-12s %3d - %3d - %3d %12d%s", p.number, p.title, p.verdict,
    xs[1], xs[(#xs + 1) // 2], xs[#xs], w, note))
  total = total + (p.round_trips / n)
end
print(string.format("     total: 1 connection + %.1f exec round trips per host (%d hosts, %.3f s in the report)",
  total, n, doc.elapsed))
local slow = {}
for _, p in ipairs(doc.phases) do slow[#slow + 1] = string.format("%s %.3f", p.id, p.elapsed) end
print("     per-phase elapsed (s): " .. table.concat(slow, ", "))
LUA

# the client side runs from a file: ssh would read a script fed on stdin as its own input
cat > "$STATE/bench-inlab.sh" <<'INLAB'
set -euo pipefail
N=$1 RUNS=$2 STATE=$3 BIN=$4 SRC=$5 RTT_MS=$6
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
CFG=$STATE/ssh_config CLUSTER=$STATE/cluster-$N.yaml HOSTS=$STATE/hosts-$N CMDS=$STATE/cmds
LUAENV='package.path="'"$SRC"'/lua/?.lua;'"$SRC"'/lua/?/init.lua;'"$SRC"'/?.lua;"..package.path;'
LUAENV+=' package.cpath="'"$SRC"'/build/lib/?.so;"..package.cpath'
export CS_ROOT=$SRC
med() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# one run: "wall client_cpu hosts_cpu" in seconds; hosts_cpu is what all lab hosts (sshd, shells,
# probes, python) burnt meanwhile, from the lab's cgroup (fd 9, opened outside the netns).
# Fails loudly unless the exit code is one of "$1" (comma list).
hosts_usec() { awk '/^usage_usec/{print $2}' /dev/fd/9; }
timed() {
  local ok=$1 s e h0 h1 rc=0; shift
  h0=$(hosts_usec); s=$(date +%s.%N)
  /usr/bin/time -o /tmp/${LAB_PREFIX}-bench.time -f 'cpu %U %S' bash -c '"$@"' _ "$@" \
    >/tmp/${LAB_PREFIX}-bench.out 2>/tmp/${LAB_PREFIX}-bench.err || rc=$?
  e=$(date +%s.%N); h1=$(hosts_usec)
  [[ ",$ok," == *",$rc,"* ]] || { echo "failed (exit $rc): $* (see /tmp/${LAB_PREFIX}-bench.err)" >&2; return 1; }
  awk -v a="$s" -v b="$e" -v h="$((h1 - h0))" '/^cpu /{printf "%.3f %.3f %.3f\n", b-a, $2+$3, h/1e6}' \
    /tmp/${LAB_PREFIX}-bench.time
}
dry() { "$BIN" apply "$CLUSTER" --dry-run -q "$@"; }
cs_exec() { "$BIN" exec "$CLUSTER" --concurrency "$N" -q -- uname -a; }
# one host: its captured round trips as separate ssh commands, in order
cat > "$STATE/ossh-host.sh" <<'SH'
h=$1 CMDS=$2 CFG=$3
for f in $(ls "$CMDS/$h".* | sort -V); do ssh -n -F "$CFG" "$h" "$(cat "$f")" >/dev/null || exit 1; done
SH
ossh() { xargs -a "$HOSTS" -P "$N" -I{} bash "$STATE/ossh-host.sh" {} "$CMDS" "$CFG"; }
ossh_phased() {
  local k
  for k in $(seq "$K"); do
    xargs -a "$HOSTS" -P "$N" -I{} sh -c 'ssh -n -F "$1" "$2" "$(cat "$3/$2.$4")" >/dev/null' _ "$CFG" {} "$CMDS" "$k"
  done
}
ansible_setup() {
  local cp; cp=$(mktemp -d)
  ANSIBLE_SSH_CONTROL_PATH_DIR=$cp ANSIBLE_NOCOLOR=1 ansible all -i "$STATE/inventory.ini" -m setup -f "$N" -o
  local rc=$?; rm -rf "$cp"; return $rc
}

# correctness first: the dry run reaches every host; capture its commands; exec answers everywhere
rc=0; dry --concurrency "$N" --output json >"$STATE/dryrun.json" || rc=$?
[ "$rc" = 3 ] || [ "$rc" = 0 ] || { echo "dry run failed (exit $rc)" >&2; exit 1; }
lua5.4 -e "$LUAENV" "$STATE/roundtrips.lua" check <"$STATE/dryrun.json" >"$STATE/probes-per-host"
rm -rf "$CMDS"; mkdir -p "$CMDS"
rc=0; lua5.4 -e "$LUAENV" "$STATE/capture.lua" "$CMDS" apply "$CLUSTER" --dry-run -q --concurrency "$N" >/dev/null || rc=$?
[ "$rc" = 3 ] || [ "$rc" = 0 ] || { echo "capture run failed (exit $rc)" >&2; exit 1; }
while read -r h n; do
  got=$(find "$CMDS" -name "$h.*" | wc -l)
  [ "$got" = "$n" ] || { echo "captured $got commands for $h, the report counts $n round trips" >&2; exit 1; }
done <"$STATE/probes-per-host"
K=$(awk 'NR==1{k=$2} $2!=k{print "hosts differ in round trips" > "/dev/stderr"; exit 1} END{print k}' "$STATE/probes-per-host")
cs_exec >/tmp/${LAB_PREFIX}-exec.out 2>&1
[ "$(grep -c ' | Linux ' /tmp/${LAB_PREFIX}-exec.out)" = "$N" ] || { echo "cargoship exec did not reach all $N hosts" >&2; exit 1; }
ansible all -i "$STATE/inventory.ini" -m ping -f "$N" -o >/tmp/${LAB_PREFIX}-ping.out 2>&1 \
  || { echo "ansible cannot reach the lab, see /tmp/${LAB_PREFIX}-ping.out" >&2; exit 1; }

# the timed clients are functions, run by /usr/bin/time through bash -c
export -f dry cs_exec ossh ossh_phased ansible_setup
export N BIN CLUSTER CFG HOSTS CMDS STATE K
declare -A W C H
for i in $(seq "$RUNS"); do
  for t in dry dry30 exec ossh osshp ans; do
    case $t in
      dry) r=$(timed 0,3 dry --concurrency "$N") ;;
      dry30) r=$(timed 0,3 dry) ;;
      exec) r=$(timed 0 cs_exec) ;;
      ossh) r=$(timed 0 ossh) ;;
      osshp) r=$(timed 0 ossh_phased) ;;
      ans) r=$(timed 0 ansible_setup) ;;
    esac
    read -r w c h <<<"$r"
    W[$t]+="$w " C[$t]+="$c " H[$t]+="$h "
  done
done
m() { tr ' ' '\n' <<<"$1" | grep . | med; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
verdict() { awk -v r="$1" -v t="$2" -v op="$3" 'BEGIN{ok = (op == "<=") ? (r <= t) : (r >= t); print ok ? "met" : "MISSED"}'; }
CORES=$(nproc)
echo "== apply --dry-run on $N hosts vs peers, RTT ${RTT_MS:-0} ms: medians of $RUNS cold runs ($CORES cores shared by client and hosts; load before: $LOAD)"
printf '%-58s %8s %11s %10s %8s\n' "" "wall s" "client cpu" "hosts cpu" "cores"
row() {
  local w c h; w=$(m "${W[$1]}") c=$(m "${C[$1]}") h=$(m "${H[$1]}")
  printf '%-58s %8.3f %11.3f %10.3f %8.2f\n' "$2" "$w" "$c" "$h" "$(awk -v w="$w" -v c="$c" -v h="$h" 'BEGIN{print (c+h)/w}')"
}
row dry "cargoship apply --dry-run --concurrency $N"
row dry30 "cargoship apply --dry-run (default concurrency)"
row exec "cargoship exec --concurrency $N -- uname -a"
row ossh "OpenSSH xargs -P $N, same probes, $K ssh per host in a row"
row osshp "OpenSSH same probes, one xargs -P $N per round trip"
row ans "ansible all -m setup -f $N (cold)"
echo "(cores = (client cpu + hosts cpu) / wall: near $CORES, the run is bound by this machine's CPU, not by waiting)"
dw=$(m "${W[dry]}") d30=$(m "${W[dry30]}") ew=$(m "${W[exec]}") ow=$(m "${W[ossh]}") opw=$(m "${W[osshp]}") aw=$(m "${W[ans]}")
r1=$(ratio "$dw" "$ew"); r2=$(ratio "$aw" "$dw"); r3=$(ratio "$dw" "$ow"); r4=$(ratio "$dw" "$opw"); r5=$(ratio "$d30" "$ew")
printf 'dry run / cargoship exec (one uname -a):     %6.2fx  (target <= 2.5x: %s; at 100 ms RTT <= 1.5x: %s)\n' \
  "$r1" "$(verdict "$r1" 2.5 '<=')" "$(verdict "$r1" 1.5 '<=')"
printf 'ansible setup / dry run:                     %6.2fx  (target >= 10x: %s)\n' "$r2" "$(verdict "$r2" 10 '>=')"
printf 'dry run / OpenSSH same probes:               %6.2fx\n' "$r3"
printf 'dry run / OpenSSH same probes, per phase:    %6.2fx\n' "$r4"
printf 'dry run, default concurrency / exec:         %6.2fx\n' "$r5"
echo "== SSH round trips per host per phase (JSON report of the dry run)"
lua5.4 -e "$LUAENV" "$STATE/roundtrips.lua" <"$STATE/dryrun.json"
INLAB
CG=$(findmnt -rn -t cgroup2 -o TARGET | head -1)/${LAB_PREFIX}lab
$LAB exec bash ${BENCH_TRACE:+-x} "$STATE/bench-inlab.sh" "$N" "$RUNS" "$STATE" "$BIN" "$PWD" "$RTT_MS" </dev/null \
  9<"$CG/cpu.stat"
