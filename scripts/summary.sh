#!/usr/bin/env bash
# summary.sh DIR [STATUS]: adds up the doctest summaries of every log in DIR into one plain
# line. A non-zero STATUS with no failed test means a build step failed: counted as a failure.
passed=0; failed=0
for log in "$1"/*.log; do
  [ -f "$log" ] || continue
  while read -r p f; do passed=$((passed + p)); failed=$((failed + f)); done < <(
    sed -nE 's/.*test cases: *[0-9]+ *\| *([0-9]+) passed *\| *([0-9]+) failed.*/\1 \2/p' "$log")
done
if [ "${2:-0}" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "a build step failed (see above)"; failed=1
fi
echo "$passed passed, $failed failed"
