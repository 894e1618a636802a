#!/bin/sh
# run.sh - runs one fuzz target for the test suite: BIN TARGET SEEDS WORKDIR RUNS SECONDS.
# New inputs go to WORKDIR/corpus/TARGET (the seeds in the repo are only read); a finding is saved
# as WORKDIR/findings/TARGET-crash-* (or -timeout-, -leak-, -oom-) and fails the test, as does a
# run that stops at the SECONDS guard before RUNS inputs. Prints "execs: N".
# -detect_leaks=0: the Lua state lives across inputs, so libFuzzer's per-input leak check would
# stop at every input that grows it; LeakSanitizer still checks the whole run at exit, after the
# harness has closed the state, so a leak of the runtime still fails the run. A known leak of a
# library a target goes through is suppressed by lsan-TARGET.supp, saying why.
set -eu
bin=$1 target=$2 seeds=$3 work=$4 runs=$5 seconds=$6
mkdir -p "$work/corpus/$target" "$work/findings"
log=$work/$target.log
start=$(date +%s)
rc=0
supp=$(dirname "$0")/lsan-$target.supp
[ -f "$supp" ] && export LSAN_OPTIONS="suppressions=$supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
CS_FUZZ_TARGET=$target "$bin" -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -detect_leaks=0 \
  -print_final_stats=1 -artifact_prefix="$work/findings/$target-" "$work/corpus/$target" "$seeds" >"$log" 2>&1 || rc=$?
secs=$(( $(date +%s) - start ))
execs=$(LC_ALL=C sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -n 1)
corpus=$(find "$work/corpus/$target" -type f | wc -l)
rm -f "$work/$target.execs"
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$log"
  echo "fuzz $target: FAILED (exit $rc) after ${execs:-?} execs in ${secs}s: the input is in $work/findings/"
  echo "reproduce: CS_FUZZ_TARGET=$target $bin $work/findings/$target-<file>"
  exit 1
fi
# also kept in WORKDIR/TARGET.execs: `make test` prints them after ctest (which shows no passing output)
echo "fuzz $target: execs: ${execs:-0} in ${secs}s, $cov, corpus $corpus new inputs (+ $(find "$seeds" -type f | wc -l) seeds)" \
  | tee "$work/$target.execs"
if [ "${execs:-0}" -lt "$runs" ]; then
  echo "fuzz $target: only ${execs:-0} of $runs execs before the ${seconds}s guard (a slow input, or a loaded machine)"
  exit 1
fi
