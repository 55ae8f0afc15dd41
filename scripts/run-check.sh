#!/usr/bin/env bash
# run-check.sh NAME COMMAND...: runs one suite or check with its output in build/results/NAME.log,
# then prints that log in one piece (suites run side by side under make -j, so their outputs
# must not interleave) after a header with the command and its time. A command that is not a
# doctest binary gets a summary line in the log (one check, passed or failed). Exit status is
# the command's.
set -u
name=$1; shift
mkdir -p build/results
log=build/results/$name.log
start=$(date +%s)
"$@" > "$log" 2>&1
status=$?
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
