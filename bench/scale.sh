#!/usr/bin/env bash
# bench/scale.sh - one cargoship process against 50, 200 and 1,000 hosts: exec, apply --dry-run, a writing apply.
#
# Usage: bench/scale.sh [SIZES...]   (default: 50 200 1000)
# Brings up one lab of the largest size (prefix cssc, LAB_NET 10.160: a /16, one bridge per
# 200 hosts; debian/runit hosts, the cheapest), runs every client inside the lab's network
# namespace, and for each size N (the first N hosts) times, once each, cold (a new process,
# no connection reused):
#   exec     cargoship exec --concurrency N -- true           (1 round trip per host)
#   dry run  cargoship apply --dry-run --concurrency N        (phases 1-7, 30-31 probe)
#   write    cargoship apply --confirm --concurrency N --skip-phases 8-25,28-29 --phases DIR,
#            DIR holding one custom phase that writes a file on every host (new content
#            each run, so every host really writes): the plan pass and the run pass
# Prints per row: wall time, failed hosts, client CPU (user+sys) per host and per host per
# round trip, the client's peak RSS per host, the hosts' CPU (the lab's cgroup) and SSH
# round trips per host (exec: 1; apply: probes + writes of both passes, from the JSON
# report); then the targets of issue 24: 0 failed hosts at the largest size, its wall time
# <= 22x the smallest's, client CPU <= 2 ms per host per round trip, peak RSS <= 100 KiB per
# connected host (also given as the growth from the smallest to the largest size, which
# leaves out the fixed ~10 MiB of the Lua state and code). PROFILE=1 adds the client's perf
# profile of exec and the dry run at the largest size; HEAP=1 the Lua heap per host by field,
# phase by phase, of the dry run and the writing apply there. Then the lab goes down.
# The lab's own cost per host (memory, up/down time) is printed first.
# Needs root, a build (make), GNU time. 1,000 runit hosts take ~5 GiB of RAM; the machine's
# cores are shared by the client and every host's sshd: ratios transfer, absolute times do not.
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra SIZES <<<"${*:-50 200 1000}"
export LAB_PREFIX=${LAB_PREFIX:-cssc} LAB_NET=${LAB_NET:-10.160} LAB_INIT=runit LAB_OS=debian
LAB=tests/lab/lab.sh
STATE=/var/lib/cargoship-lab/$LAB_PREFIX
BIN=$PWD/build/bin/cargoship
[ -x "$BIN" ] || { echo "build first: make" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 1; }
MAX=0; for n in "${SIZES[@]}"; do [ "$n" -gt "$MAX" ] && MAX=$n; done
WORK=$(mktemp -d /tmp/cs-scale.XXXXXX)
cleanup() {
  local t0=$EPOCHREALTIME
  $LAB down >/dev/null 2>&1 || true
  echo "lab down: $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}") s" >&2
  rm -rf "$WORK"
}
trap cleanup EXIT

avail() { awk '/^MemAvailable/{print $2}' /proc/meminfo; }
m0=$(avail) t0=$EPOCHREALTIME
/usr/bin/time -o "$WORK/up.time" -f '%U %S' $LAB up "$MAX" 2>"$WORK/up.err" || { cat "$WORK/up.err" >&2; exit 1; }
up_s=$(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}")
m1=$(avail)
CG=$(findmnt -rn -t cgroup2 -o TARGET | head -1)/${LAB_PREFIX}lab
hosts_cpu=$(awk '/^usage_usec/{print $2}' "$CG/cpu.stat")
echo "== lab: $MAX debian/runit hosts ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
awk -v n="$MAX" -v up="$up_s" -v ma="$((m0 - m1))" -v hc="$hosts_cpu" -v lt="$(cat "$WORK/up.time")" 'BEGIN{
  split(lt, t, " ")
  printf "up %s s wall; per host: %.0f KiB of MemAvailable, %.1f ms hosts CPU to boot, %.1f ms lab.sh CPU\n",
    up, ma / n, hc / 1000 / n, (t[1] + t[2]) * 1000 / n }'

# the custom phase: writes /etc/cargoship-scale with this run's stamp (every host writes)
mkdir -p "$WORK/phases"
cat >"$WORK/scale_write.tmpl" <<'LUA'
-- bench/scale.sh's writing phase: one file per host, new content each run (STAMP).
-- luacheck: read globals action
local FILE, TEXT = "/etc/cargoship-scale", "cargoship scale bench STAMP\n"
return {
  id = "scale_write", title = "Write the scale bench's file", after = "acquire_lock",
  reads = { "connection" }, creates = { "scale_file" },
  assess = function(_, host)
    local have, err, code = host:read_file(FILE)
    if not have and code ~= "notfound" then error(err, 0) end
    if have == TEXT then return {} end
    return { action.write { path = FILE, content = TEXT, mode = "0644", say = "write " .. FILE } }
  end,
}
LUA

for n in "${SIZES[@]}"; do
  {
    printf 'apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: scale\nspec:\n'
    printf '  config:\n    loadbalancer: h1.lab.internal\n  hosts:\n'
    while IFS=$'\t' read -r name addr _ _; do
      role=worker; [ "$name" = h1 ] && role=controller
      printf '    - role: %s\n      hostname: %s\n      ssh: {address: %s, user: root, keyPath: %s/id_ed25519}\n' \
        "$role" "$name" "$addr" "$STATE"
    done < <(head -n "$n" "$STATE/hosts.tsv")
  } >"$WORK/cluster-$n.yaml"
done

# round trips per host and failed hosts, from apply's JSON report (both passes); the failures'
# causes, grouped (host names and numbers taken out), to stderr: the five most frequent
cat >"$WORK/report.py" <<'PY'
import collections, json, re, sys
d = json.load(open(sys.argv[1]))
n = len(d["hosts"])
failed = set()
why = collections.Counter()
rt = 0
for rep in ([d["plan"]] if d.get("plan") else []) + [d]:
    for p in rep["phases"]:
        for h in p["hosts"]:
            rt += h["probes"] + h["writes"]
            if h["error"] is not None or h.get("not_reached"):
                if h["host"] not in failed:
                    msg = str(h["error"] or "not reached").replace(h["host"], "HOST")
                    why[p.get("id", "?") + ": " + re.sub(r"[0-9]+(\.[0-9]+)?", "N", msg)[:200]] += 1
                failed.add(h["host"])
for msg, k in why.most_common(5):
    print("  %4d x %s" % (k, msg), file=sys.stderr)
print(len(failed) if failed or d["outcome"] in ("ok", "pending") else n, "%.2f" % (rt / n))
PY

cat >"$WORK/inlab.sh" <<'INLAB'
set -euo pipefail
WORK=$1 BIN=$2 STATE=$3; shift 3
hosts_usec() { awk '/^usage_usec/{print $2}' /dev/fd/9; }
# run "$@" timed: prints "wall client_cpu peak_rss_kib hosts_cpu"; stdout to $WORK/out, stderr to $WORK/err
timed() {
  local s e h0 h1 rc=0
  h0=$(hosts_usec); s=$EPOCHREALTIME
  /usr/bin/time -o "$WORK/t" -f '%U %S %M' "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
  e=$EPOCHREALTIME; h1=$(hosts_usec)
  echo "$rc" >"$WORK/rc"
  # the last line: GNU time puts "Command exited with non-zero status N" before it
  tail -1 "$WORK/t" | awk -v a="$s" -v b="$e" -v h="$((h1 - h0))" '{printf "%.3f %.3f %d %.3f\n", b-a, $1+$2, $3, h/1e6}'
}
printf '%-8s %5s %9s %7s %12s %12s %10s %10s %9s\n' "" hosts "wall s" failed "cpu ms/host" "ms/host/rt" "RSS KiB/h" "hosts cpu" "rt/host"
for n in "$@"; do
  C=$WORK/cluster-$n.yaml
  read -r w c m h < <(timed "$BIN" exec "$C" --known-hosts "$STATE/known_hosts" --concurrency "$n" -- true)
  f=$(sed -n 's/^[0-9]* hosts\{0,1\}: [0-9]* ok, \([0-9]*\) failed$/\1/p' "$WORK/err")
  [ -n "$f" ] || { echo "exec on $n hosts: no summary (exit $(cat "$WORK/rc")):" >&2; tail -5 "$WORK/err" >&2; f=$n; }
  echo "exec $n $w $c $m $h $f 1" >>"$WORK/rows"
  sed "s/STAMP/$n-$EPOCHREALTIME/" "$WORK/scale_write.tmpl" >"$WORK/phases/scale_write.lua"
  for kind in dry write; do
    if [ "$kind" = dry ]; then
      read -r w c m h < <(timed "$BIN" apply "$C" --known-hosts "$STATE/known_hosts" --concurrency "$n" --dry-run \
        --output json)
    else
      read -r w c m h < <(timed "$BIN" apply "$C" --known-hosts "$STATE/known_hosts" --concurrency "$n" --confirm \
        --skip-phases 8-25,28-29 --phases "$WORK/phases" --output json)
    fi
    rc=$(cat "$WORK/rc")
    # exit 1 (some hosts failed) still prints the report
    if [ "$rc" -le 3 ] && [ -s "$WORK/out" ]; then
      read -r f rt < <(python3 "$WORK/report.py" "$WORK/out" 2>"$WORK/why")
      [ ! -s "$WORK/why" ] || { echo "$kind on $n hosts: the failures' causes (first five):"; cat "$WORK/why"; } >&2
    else echo "$kind on $n hosts: exit $rc:" >&2; tail -5 "$WORK/err" >&2; f=$n rt=0; fi
    echo "$kind $n $w $c $m $h $f $rt" >>"$WORK/rows"
  done
  awk -v n="$n" '$2 == n {
    rt = ($8 > 0) ? $8 : 1
    printf "%-8s %5d %9.2f %7d %12.2f %12.3f %10.1f %10.2f %9.2f\n", $1, $2, $3, $7, $4*1000/$2, $4*1000/$2/rt, $5/$2, $6, $8 }' \
    "$WORK/rows"
done
# PROFILE=1: the client's profile (perf, flat, by library and symbol) of exec and of the dry
# run at the largest size, each run once more under perf record
if [ -n "${PROFILE:-}" ] && command -v perf >/dev/null; then
  n=${*: -1}; C=$WORK/cluster-$n.yaml
  perf record -q -F 499 -o "$WORK/exec.perf" -- "$BIN" exec "$C" --known-hosts "$STATE/known_hosts" \
    --concurrency "$n" -- true >/dev/null 2>&1 || true
  perf record -q -F 499 -o "$WORK/dry.perf" -- "$BIN" apply "$C" --known-hosts "$STATE/known_hosts" \
    --concurrency "$n" --dry-run >/dev/null 2>&1 || true
  for k in exec dry; do
    echo "== client profile, $k on $n hosts (perf, % of samples): by library, then top 20 symbols"
    { perf report -q -i "$WORK/$k.perf" --stdio --sort dso 2>/dev/null | grep -v '^$' | head -8; } || true
    { perf report -q -i "$WORK/$k.perf" --stdio --sort dso,sym 2>/dev/null | grep -v '^$' | head -20; } || true
  done
fi
# HEAP=1: the dry run and the writing apply at the largest size once more, with the Lua heap
# per host by the host's field after every phase (CARGOSHIP_HEAP_PROFILE, pipeline/heap.lua)
if [ -n "${HEAP:-}" ]; then
  n=${*: -1}; C=$WORK/cluster-$n.yaml
  echo "== Lua heap, dry run on $n hosts (after a full collection; per host: what only hosts hold)"
  CARGOSHIP_HEAP_PROFILE=1 "$BIN" apply "$C" --known-hosts "$STATE/known_hosts" --concurrency "$n" --dry-run \
    --output json 2>&1 >/dev/null | grep '^heap after' || true
  echo "== Lua heap, writing apply on $n hosts (plan pass, then run pass)"
  sed "s/STAMP/heap-$EPOCHREALTIME/" "$WORK/scale_write.tmpl" >"$WORK/phases/scale_write.lua"   # new content: a real run
  CARGOSHIP_HEAP_PROFILE=1 "$BIN" apply "$C" --known-hosts "$STATE/known_hosts" --concurrency "$n" --confirm \
    --skip-phases 8-25,28-29 --phases "$WORK/phases" --output json 2>&1 >/dev/null | grep '^heap after' || true
fi
INLAB
: >"$WORK/rows"
HEAP=${HEAP:-} PROFILE=${PROFILE:-} $LAB exec bash "$WORK/inlab.sh" "$WORK" "$BIN" "$STATE" "${SIZES[@]}" 9<"$CG/cpu.stat"

# the targets, from the smallest and the largest size
lo=${SIZES[0]} hi=$MAX
echo "== targets ($lo -> $hi hosts)"
awk -v lo="$lo" -v hi="$hi" '
  { k = $1 " " $2; wall[k] = $3; cpu[k] = $4; rss[k] = $5; failed[k] = $7; rt[k] = ($8 > 0) ? $8 : 1; kinds[$1] = 1 }
  END {
    for (t in kinds) {
      a = t " " lo; b = t " " hi
      ratio = wall[b] / wall[a]
      cpr = cpu[b] * 1000 / hi / rt[b]
      grow = (hi > lo) ? (rss[b] - rss[a]) / (hi - lo) : rss[b] / hi
      printf "%-6s failed at %d: %d (%s)  wall %d/%d: %.1fx (<= 22x: %s)  cpu %.3f ms/host/rt (<= 2: %s)  RSS %.1f KiB/host, growth %.1f KiB/host (<= 100: %s)\n",
        t, hi, failed[b], failed[b] == 0 ? "met" : "MISSED", hi, lo, ratio, ratio <= 22 ? "met" : "MISSED",
        cpr, cpr <= 2 ? "met" : "MISSED", rss[b] / hi, grow, rss[b] / hi <= 100 ? "met" : "MISSED"
    }
  }' "$WORK/rows"
