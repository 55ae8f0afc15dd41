#!/usr/bin/env bash
# int8-memory.sh MODEL.onnx... : what a compiled model holds in memory. Per model: its ONNX
# file, its blob (`tessel compile`), the process's peak RSS over read, compile and 3 runs
# (/usr/bin/time), and its RSS once compiled, while it runs (VmRSS one second after `tessel run`
# reports the compile). TESSEL picks the binary (default build/tessel).
# | model | ONNX MB | blob MB | peak RSS MB | RSS running MB |
set -eu
cd "$(dirname "$0")/.."
tessel=${TESSEL:-build/tessel}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "| model | ONNX MB | blob MB | peak RSS MB | RSS running MB |"
echo "|---|---:|---:|---:|---:|"
for model in "$@"; do
  "$tessel" compile "$model" -o "$work/m.blob" > /dev/null
  peak=$(/usr/bin/time -f %M "$tessel" run "$model" --bench 3 --no-reference 2>&1 > /dev/null | tail -1)
  stdbuf -oL "$tessel" run "$model" --bench 1000000 --no-reference > "$work/run.log" 2>&1 &
  pid=$!
  until grep -q "read and compiled" "$work/run.log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "int8-memory.sh: $model did not compile" >&2; cat "$work/run.log" >&2; exit 1; }
    sleep 0.2
  done
  sleep 1
  running=$(awk '/VmRSS/ { print $2 }' "/proc/$pid/status")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  echo "| $(basename "$model" .onnx) | $(mb "$(stat -c %s "$model")") | $(mb "$(stat -c %s "$work/m.blob")") | $(mb $((peak * 1024))) | $(mb $((running * 1024))) |"
done
