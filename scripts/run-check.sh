#!/usr/bin/env bash
# run-check.sh NAME COMMAND...: runs one suite or check, keeps its output in
# build/results/NAME.log and records a doctest summary line there when the command is not a
# doctest binary (one check, passed or failed). Exit status is the command's.
set -u
name=$1; shift
mkdir -p build/results
log=build/results/$name.log
echo "== $name: $*"
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if ! grep -q 'test cases:' "$log"; then
  if [ "$status" -eq 0 ]; then echo "[check] test cases: 1 | 1 passed | 0 failed |" >> "$log"
  else echo "[check] test cases: 1 | 0 passed | 1 failed |" >> "$log"; fi
fi
exit "$status"
