#!/usr/bin/env bash
# bench/fanout.sh - cargoship exec vs OpenSSH fan-out on lab hosts; SFTP upload vs OpenSSH sftp.
#
# Usage: bench/fanout.sh [N]   (default 50 hosts; also measures memory at 200 hosts, BIG_HOSTS)
# Both session kinds side by side: `cargoship exec` over ssh: blocks (libssh2) and over
# openSSH: blocks (the system's ssh, one ControlMaster per host), and for each a first
# command (connect included) and a second one over the same sessions/masters.
# Brings up its own lab (prefix csbn, 10.249.0.0/24, or LAB_PREFIX/LAB_NET; runit hosts: cheapest to start), runs
# every client inside the lab's network namespace, prints medians of RUNS runs and the
# ratios the targets are stated in, then tears the lab down. Needs root and a build
# (make). All clients and all sshds share this machine's cores: ratios transfer, absolute
# times do not.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50}
RUNS=${RUNS:-5}
BIG=${BIG_HOSTS:-200}
export LAB_PREFIX=${LAB_PREFIX:-csbn} LAB_NET=${LAB_NET:-10.249.0} LAB_INIT=runit LAB_OS=debian
LAB=tests/lab/lab.sh
STATE=/var/lib/cargoship-lab/$LAB_PREFIX
BIN=$PWD/build/bin/cargoship
[ -x "$BIN" ] || { echo "build first: make" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 1; }
trap '$LAB down >/dev/null 2>&1 || true; rm -f "$STATE"/big.bin "$STATE"/cluster-*.yaml "$STATE"/cs-sessions.lua "$STATE"/hosts-* "$STATE"/bench-inlab.sh; rmdir "$STATE" 2>/dev/null || true' EXIT

$LAB up "$BIG" >/dev/null
# a cluster file with only the first N hosts, for the wall-time comparison
awk -v n="$N" '/^    - role:/{c++} c<=n' "$STATE/cluster.yaml" > "$STATE/cluster-$N.yaml"
seq -f 'h%g' 1 "$N" > "$STATE/hosts-$N"
dd if=/dev/urandom of="$STATE/big.bin" bs=1M count=256 status=none

# the client side runs from a file: ssh would read a script fed on stdin as its own input
cat > "$STATE/bench-inlab.sh" <<'INLAB'
set -euo pipefail
N=$1 RUNS=$2 BIG=$3 STATE=$4 BIN=$5
CFG=$STATE/ssh_config
med() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# one timed run: prints "wall user+sys maxrss_kib"; fails loudly if the command fails
timed() {
  /usr/bin/time -o /tmp/cs-bench.time -f '%e %U %S %M' "$@" >/dev/null 2>/tmp/cs-bench.err \
    || { echo "failed: $* (see /tmp/cs-bench.err)" >&2; return 1; }
  awk '{printf "%s %.3f %s\n", $1, $2+$3, $4}' /tmp/cs-bench.time
}
cs_exec() { timed "$BIN" exec "$STATE/cluster-$N.yaml" --known-hosts "$STATE/known_hosts" --concurrency "$N" -- uname -a; }
ossh() { timed xargs -a "$STATE/hosts-$N" -P "$N" -I{} ssh -n -F "$CFG" "$@" {} uname -a; }

# correctness first: every host answers
"$BIN" exec "$STATE/cluster-$N.yaml" --known-hosts "$STATE/known_hosts" -- uname -a >/tmp/cs-fanout.out
[ "$(grep -c ' | Linux ' /tmp/cs-fanout.out)" = "$N" ] || { echo "cargoship exec did not reach all $N hosts" >&2; exit 1; }

declare -A W C M F S
LUAENV='package.path="'"$PWD"'/lua/?.lua;'"$PWD"'/lua/?/init.lua;"..package.path; package.cpath="'"$PWD"'/build/lib/?.so;"..package.cpath'
for i in $(seq "$RUNS"); do
  read -r w c m < <(cs_exec);                                   W[cs]+="$w "; C[cs]+="$c "; M[cs]+="$m "
  read -r w c m < <(ossh);                                      W[os]+="$w "; C[os]+="$c "
  read -r w c m < <(ossh -o KexAlgorithms=curve25519-sha256);   W[oc]+="$w "; C[oc]+="$c "
done
m() { tr ' ' '\n' <<<"$1" | grep . | med; }
cw=$(m "${W[cs]}"); ow=$(m "${W[os]}"); ocw=$(m "${W[oc]}")
cc=$(m "${C[cs]}"); oc=$(m "${C[os]}"); occ=$(m "${C[oc]}")
echo "== fan-out: uname -a on $N hosts, median of $RUNS runs"
printf '%-44s %8.3f s   client CPU %7.2f ms/host\n' "cargoship exec" "$cw" "$(awk -v c="$cc" -v n="$N" 'BEGIN{print c*1000/n}')"
printf '%-44s %8.3f s   client CPU %7.2f ms/host\n' "OpenSSH ssh, xargs -P $N (defaults)" "$ow" "$(awk -v c="$oc" -v n="$N" 'BEGIN{print c*1000/n}')"
printf '%-44s %8.3f s   client CPU %7.2f ms/host\n' "OpenSSH ssh, KexAlgorithms=curve25519-sha256" "$ocw" "$(awk -v c="$occ" -v n="$N" 'BEGIN{print c*1000/n}')"
printf 'ratio cargoship/OpenSSH defaults:   %.2fx  (target <= 0.35x)\n' "$(awk -v a="$cw" -v b="$ow" 'BEGIN{print a/b}')"
printf 'ratio cargoship/OpenSSH curve25519: %.2fx  (target <= 0.85x)\n' "$(awk -v a="$cw" -v b="$ocw" 'BEGIN{print a/b}')"
printf 'cargoship client CPU per host:      %.2f ms (target <= 3 ms)\n' "$(awk -v c="$cc" -v n="$N" 'BEGIN{print c*1000/n}')"

echo "== the openSSH session kind: the same hosts as openSSH: blocks, median of $RUNS runs"
sed 's/^      ssh:/      openSSH:/' "$STATE/cluster-$N.yaml" > "$STATE/cluster-$N-openssh.yaml"
cs_ossh() { timed "$BIN" exec "$STATE/cluster-$N-openssh.yaml" --known-hosts "$STATE/known_hosts" --concurrency "$N" -- uname -a; }
"$BIN" exec "$STATE/cluster-$N-openssh.yaml" --known-hosts "$STATE/known_hosts" -- uname -a >/tmp/cs-fanout.out
[ "$(grep -c ' | Linux ' /tmp/cs-fanout.out)" = "$N" ] || { echo "cargoship exec (openSSH) did not reach all $N hosts" >&2; exit 1; }
# first command (sessions opened) and second command (over the same sessions), in one process
cat > "$STATE/cs-sessions.lua" <<LUA
local loop = require "cargoship.loop"
local pool = require "cargoship.pool"
local kind = arg[1]
local t = require("cargoship.transport").new { known_hosts = "$STATE/known_hosts" }
local hosts = {}
for line in io.lines("$STATE/hosts.tsv") do hosts[#hosts + 1] = line:match("^%S+\t(%S+)") end
hosts = { table.unpack(hosts, 1, $N) }
local ok, err = loop.run(function()
  local conns = {}
  local t0 = loop.now()
  local r = pool.map(hosts, #hosts, function(a)
    local c = assert(t:connect({ kind = kind, address = a, user = "root", key_path = "$STATE/id_ed25519" }, a))
    conns[a] = c
    return assert(c:exec("uname -a"))
  end)
  local t1 = loop.now()
  local r2 = pool.map(hosts, #hosts, function(a) return assert(conns[a]:exec("uname -a")) end)
  local t2 = loop.now()
  for i = 1, #hosts do assert(r[i].ok and r2[i].ok, tostring(r[i].err or r2[i].err)) end
  print(string.format("%.4f %.4f", t1 - t0, t2 - t1))
  t:close_all()
end)
assert(ok, err)
LUA
for i in $(seq "$RUNS"); do
  read -r w c m < <(cs_ossh);                                   W[co]+="$w "; C[co]+="$c "
  read -r f s < <(lua5.4 -e "$LUAENV" "$STATE/cs-sessions.lua" openssh);  F[o]+="$f "; S[o]+="$s "
  read -r f s < <(lua5.4 -e "$LUAENV" "$STATE/cs-sessions.lua" ssh);      F[l]+="$f "; S[l]+="$s "
done
cow=$(m "${W[co]}"); coc=$(m "${C[co]}")
fo=$(m "${F[o]}"); so=$(m "${S[o]}"); fl=$(m "${F[l]}"); sl=$(m "${S[l]}")
printf '%-44s %8.3f s   client CPU %7.2f ms/host\n' "cargoship exec, ssh: (libssh2)" "$cw" "$(awk -v c="$cc" -v n="$N" 'BEGIN{print c*1000/n}')"
printf '%-44s %8.3f s   client CPU %7.2f ms/host (ssh children included)\n' "cargoship exec, openSSH: (masters)" "$cow" "$(awk -v c="$coc" -v n="$N" 'BEGIN{print c*1000/n}')"
printf '%-44s %8.3f s\n' "OpenSSH ssh, xargs -P $N (defaults)" "$ow"
printf 'openSSH kind first command / OpenSSH xargs -P: %.2fx  (target <= 1.3x)\n' "$(awk -v a="$cow" -v b="$ow" 'BEGIN{print a/b}')"
printf '%-12s first command %7.3f s, second over the same sessions %7.3f s: %6.1fx faster\n' \
  "libssh2" "$fl" "$sl" "$(awk -v a="$fl" -v b="$sl" 'BEGIN{print a/b}')"
printf '%-12s first command %7.3f s, second over the same masters  %7.3f s: %6.1fx faster (target >= 5x)\n' \
  "openSSH" "$fo" "$so" "$(awk -v a="$fo" -v b="$so" 'BEGIN{print a/b}')"

echo "== memory: peak RSS of cargoship exec"
H1=$(awk '$1=="h1"{print $2}' "$STATE/hosts.tsv")
read -r _ _ m1 < <(timed "$BIN" exec "$STATE/cluster.yaml" --known-hosts "$STATE/known_hosts" --hosts "$H1" -- uname -a)
read -r _ _ mb < <(timed "$BIN" exec "$STATE/cluster.yaml" --known-hosts "$STATE/known_hosts" --concurrency "$BIG" -- uname -a)
printf '1 host: %d KiB; %d hosts: %d KiB = %.1f KiB/host overall, %.1f KiB/host marginal (target <= 100)\n' \
  "$m1" "$BIG" "$mb" "$(awk -v m="$mb" -v n="$BIG" 'BEGIN{print m/n}')" "$(awk -v a="$mb" -v b="$m1" -v n="$BIG" 'BEGIN{print (a-b)/(n-1)}')"

# every session alive at once (exec above closes each host's session when its command ends)
cat > /tmp/cs-alive.lua <<LUA
local loop = require "cargoship.loop"
local pool = require "cargoship.pool"
local t = require("cargoship.transport").new { known_hosts = "$STATE/known_hosts" }
local hosts = {}
for line in io.lines("$STATE/hosts.tsv") do hosts[#hosts + 1] = line:match("^%S+\t(%S+)") end
local ok, err = loop.run(function()
  local conns = {}
  local r = pool.map(hosts, #hosts, function(a)
    local c = assert(t:connect({ address = a, user = "root", key_path = "$STATE/id_ed25519" }, a))
    conns[#conns + 1] = c
    return assert(c:exec("uname -a"))
  end)
  for i, x in ipairs(r) do assert(x.ok, tostring(x.err)) end
  assert(#conns == #hosts)
  t:close_all()
end)
assert(ok, err)
LUA
LUAENV='package.path="'"$PWD"'/lua/?.lua;'"$PWD"'/lua/?/init.lua;"..package.path; package.cpath="'"$PWD"'/build/lib/?.so;"..package.cpath'
read -r _ _ ma < <(timed lua5.4 -e "$LUAENV" /tmp/cs-alive.lua)
read -r _ _ m0 < <(timed lua5.4 -e "$LUAENV; require 'cargoship.transport'" /dev/null)
printf 'all %d sessions alive at once: %d KiB peak, %.1f KiB/host over the bare runtime (%d KiB)\n' \
  "$BIG" "$ma" "$(awk -v a="$ma" -v b="$m0" -v n="$BIG" 'BEGIN{print (a-b)/n}')" "$m0"

echo "== SFTP upload, 256 MiB to h1 (median of 5; process start and connect included in both)"
rm_remote() { ssh -n -F "$CFG" h1 'rm -f /var/tmp/big.bin /var/tmp/.big.bin.cargoship-*'; }
cat > /tmp/cs-upload.lua <<LUA
local loop = require "cargoship.loop"
local t = require("cargoship.transport").new { known_hosts = "$STATE/known_hosts" }
local ok, err = loop.run(function()
  local c = assert(t:connect({ address = "$H1", user = "root", key_path = "$STATE/id_ed25519" }, "h1"))
  assert(c.session:put("$STATE/big.bin", "/var/tmp/big.bin", { mode = 420 }))
end)
assert(ok, err)
LUA
su=() ; so=()
for i in 1 2 3 4 5; do
  rm_remote; s=$(date +%s.%N)
  lua5.4 -e "$LUAENV" /tmp/cs-upload.lua
  su+=("$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')")
  rm_remote; s=$(date +%s.%N)
  echo "put $STATE/big.bin /var/tmp/big.bin" | sftp -q -F "$CFG" -b - h1 >/dev/null
  so+=("$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')")
done
rm_remote
tu=$(printf '%s\n' "${su[@]}" | med); to=$(printf '%s\n' "${so[@]}" | med)
printf 'cargoship (libssh2 SFTP): %.3f s = %.0f MiB/s\n' "$tu" "$(awk -v t="$tu" 'BEGIN{print 256/t}')"
printf 'OpenSSH sftp:             %.3f s = %.0f MiB/s\n' "$to" "$(awk -v t="$to" 'BEGIN{print 256/t}')"
printf 'throughput ratio cargoship/OpenSSH: %.2fx (target >= 0.9x)\n' "$(awk -v a="$tu" -v b="$to" 'BEGIN{print b/a}')"
INLAB
$LAB exec bash ${BENCH_TRACE:+-x} "$STATE/bench-inlab.sh" "$N" "$RUNS" "$BIG" "$STATE" "$BIN" </dev/null
