#!/usr/bin/env bash
# run-check.sh NAME COMMAND...: runs one suite or check with its output in build/results/NAME.log,
# then prints that log in one piece (suites run side by side under make -j, so their outputs
# must not interleave) after a header with the command and its time. A command that is not a
# doctest binary gets a summary line in the log (one check, passed or failed). Exit status is
# the command's. A check that runs past RUN_CHECK_TIMEOUT seconds (default 1200, four times the
# slowest suite's time) is killed and fails, so a hang (a deadlock, or qemu's) ends CI's run in time.
set -u
name=$1; shift
mkdir -p build/results
log=build/results/$name.log
limit=${RUN_CHECK_TIMEOUT:-1200}
start=$(date +%s)
timeout --kill-after=30 "$limit" "$@" > "$log" 2>&1
status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "run-check: '$name' ran past ${limit} s and was killed (exit $status): a hang?" >> "$log"
  if grep -q 'test cases:' "$log"; then echo "[check] test cases: 1 | 0 passed | 1 failed |" >> "$log"; fi
fi
if ! grep -q 'test cases:' "$log"; then
  if [ "$status" -eq 0 ]; then echo "[check] test cases: 1 | 1 passed | 0 failed |" >> "$log"
  else echo "[check] test cases: 1 | 0 passed | 1 failed |" >> "$log"; fi
fi
seconds=$(( $(date +%s) - start ))
{
  flock 9
  echo "== $name ($seconds s, exit $status): $*"
  cat "$log"
} 9> build/results/.print-lock
exit "$status"
