#!/usr/bin/env bash
# test-cli.sh "TESSEL_COMMAND": checks the command line's output and exit codes.
# The argument may hold a runner, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu build-arm/tessel".
set -u
tessel=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0; failed=0
check() {  # check NAME EXPECTED_STATUS EXPECTED_STDOUT_FILE -- ARGS...
  local name=$1 want_status=$2 want=$3; shift 4
  $tessel "$@" >"$dir/out" 2>"$dir/err"
  local status=$?
  sed -i 's/time_us=[0-9]*/time_us=T/' "$dir/out"
  if [ "$status" -eq "$want_status" ] && { [ -z "$want" ] || diff -u "$want" "$dir/out"; }; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: $name (status $status, want $want_status)"; cat "$dir/err"
  fi
}
printf '1 A\n2 A 1\n3 A 2\n4 B 2\n5 A 3 4\n6 A 5\n7 A 6\n' > "$dir/seed.txt"
printf 'A: 3 5 6 7\nA: 1 2\nB: 4\n# subgraphs=3 cross_edges=3 algo=rollback time_us=T\n' > "$dir/seed.want"
check "seed example, rollback" 0 "$dir/seed.want" -- partition "$dir/seed.txt"
printf 'A: 1 2 3\nB: 4\nA: 5 6 7\n# subgraphs=3 cross_edges=3 algo=levels time_us=T\n' > "$dir/levels.want"
check "seed example, levels" 0 "$dir/levels.want" -- partition "$dir/seed.txt" --algo levels
printf 'B: 4\nA: 3 5 6 7\nA: 1 2\n# subgraphs=3 cross_edges=3 algo=rollback time_us=T\n' > "$dir/order.want"
check "device order" 0 "$dir/order.want" -- partition "$dir/seed.txt" --devices B,A
printf 'x A\ny B\na A x\nd B y\nb B a y\nc A x d\n' > "$dir/deadlock.txt"
printf 'A: x a c\nB: y d\nB: b\n# subgraphs=3 cross_edges=3 algo=rollback time_us=T\n' > "$dir/deadlock.want"
check "issue example never deadlocks" 0 "$dir/deadlock.want" -- partition "$dir/deadlock.txt"
check "dot output" 0 "" -- partition "$dir/seed.txt" --dot "$dir/seed.dot"
if grep -q 'subgraph cluster_0' "$dir/seed.dot" 2>/dev/null; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: dot file"; fi
check "trace" 0 "" -- partition "$dir/seed.txt" --trace
if grep -q 'rollback 5: self-reference through 4' "$dir/out"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: trace text"; fi
printf 'a A\nb\n' > "$dir/bad.txt"
check "malformed graph" 2 "" -- partition "$dir/bad.txt"
grep -qx "tessel: line 2: expected '<name> <affinity> \[inputs...\]'" "$dir/err" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: malformed message"; cat "$dir/err"; }
check "missing file" 2 "" -- partition "$dir/none.txt"
check "unknown algorithm" 2 "" -- partition "$dir/seed.txt" --algo best
check "device not listed" 2 "" -- partition "$dir/seed.txt" --devices A
check "no arguments" 2 "" --
check "unknown command" 2 "" -- frobnicate
check "demo" 0 "" -- demo
echo "[cli] test cases: $((passed + failed)) | $passed passed | $failed failed |"
[ "$failed" -eq 0 ]
