#!/usr/bin/env bash
# bench-int8.sh FLOAT.onnx:INT8.onnx... : Tessel int8 (a QDQ model from tools/quantize.py)
# against Tessel float32 on the float model, and both against onnxruntime (scripts/ort-bench.js,
# build/ort, installed on first use), at one and two threads (THREADS="1 2"), on the same
# inputs. Each figure is the best of ROUNDS (default 3) interleaved rounds of RUNS runs (default
# 20) of each side's fastest run ("min"), which a busy machine disturbs least. ORT_ISA=avx2 runs
# onnxruntime's kernels for CPUs without AVX-512 (scripts/ort-env.sh), to pair with TESSEL_ISA=avx2.
# Without arguments: the nine light CNNs (../shared/onnx-tests/light), quantized into build/int8
# by tools/quantize.py where build/int8/NAME_int8.onnx is missing; a model that does not
# quantize is left out with quantize.py's message.
# | model | threads | Tessel float ms | Tessel int8 ms | int8 / float | onnxruntime int8 ms | Tessel int8 / onnxruntime int8 | onnxruntime float ms |
set -eu
cd "$(dirname "$0")/.."
. scripts/ort-env.sh
runs=${RUNS:-20}
rounds=${ROUNDS:-3}
tessel=${TESSEL:-build/tessel}
work=build/bench-int8
mkdir -p "$work"
if [ $# -eq 0 ]; then
  mkdir -p build/int8
  for float in ../shared/onnx-tests/light/light_*.onnx; do
    int8=build/int8/$(basename "$float" .onnx)_int8.onnx
    [ -f "$int8" ] || tools/quantize.py "$float" -o "$int8" --tessel "$tessel" >&2 || { echo "bench-int8.sh: $float left out" >&2; continue; }
    set -- "$@" "$float:$int8"
  done
fi
best() { printf "%s\n%s\n" "$1" "$2" | grep . | sort -g | head -1; }
make -s build/bench/cores >/dev/null
build/bench/cores   # two-thread rows depend on it (scripts/bench-vs-ort.sh): before the table and after it
echo
echo "| model | threads | Tessel float ms | Tessel int8 ms | int8 / float | onnxruntime int8 ms | Tessel int8 / onnxruntime int8 | onnxruntime float ms |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for pair in "$@"; do
  float=${pair%%:*} int8=${pair##*:} name=$(basename "${pair##*:}" .onnx)
  data="$work/data_$name"
  [ -d "$data" ] || node scripts/ort-bench.js inputs "$int8" "$data" 2>/dev/null
  for threads in ${THREADS:-1 2}; do
    tf="" ti="" oi="" of=""
    for round in $(seq "$rounds"); do
      tf=$(best "$tf" "$($tessel run "$float" --inputs "$data" --bench "$runs" --no-reference --threads "$threads" 2>&1 | sed -nE 's/^latency_ms .*min=([0-9.]+).*/\1/p')")
      ti=$(best "$ti" "$($tessel run "$int8" --inputs "$data" --bench "$runs" --no-reference --threads "$threads" 2>&1 | sed -nE 's/^latency_ms .*min=([0-9.]+).*/\1/p')")
      oi=$(best "$oi" "$(node scripts/ort-bench.js time "$int8" "$data" "$runs" "$threads" 2>&1 | sed -nE 's/^ort_ms .*min=([0-9.]+).*/\1/p')")
      of=$(best "$of" "$(node scripts/ort-bench.js time "$float" "$data" "$runs" "$threads" 2>&1 | sed -nE 's/^ort_ms .*min=([0-9.]+).*/\1/p')")
    done
    awk -v n="$name" -v t="$threads" -v tf="$tf" -v ti="$ti" -v oi="$oi" -v of="$of" \
      'BEGIN { printf "| %s | %d | %.2f | %.2f | %.2fx | %.2f | %.2fx | %.2f |\n", n, t, tf, ti, ti / tf, oi, ti / oi, of }'
  done
done
echo
build/bench/cores
