#!/usr/bin/env bash
# bench-vs-ort.sh [RUNS] [ROUNDS]: Tessel CPU latency against onnxruntime (npm's
# onnxruntime-node, CPU provider, installed into build/ort on first use; `make test` never needs
# it) on the same models and inputs, at one and two threads. Each side runs RUNS timed runs per
# round, alternating for ROUNDS rounds; the table keeps each side's best median. The "check"
# column compares Tessel's outputs with onnxruntime's on those inputs (rtol 1e-3, atol 1e-4).
# MODELS="a.onnx b.onnx" replaces the default list (MatMul 256-1024, the MobileNet-style block,
# the OCR classifier, detector and recognizer of bench/ocr_models.cpp, the nine CNNs of
# ../shared/onnx-tests/light). TESSEL=BINARY times another build of `tessel` (an A/B of two
# commits). ORT_ISA=avx2 runs onnxruntime's kernels for CPUs without AVX-512 (scripts/ort-env.sh),
# to pair with TESSEL_ISA=avx2. build/bench/cores prints, before and after the table, what the
# host's two cores cost each other (two-thread rows move with it).
set -eu
runs=${1:-20}
rounds=${2:-3}
cd "$(dirname "$0")/.."
tessel=${TESSEL:-build/tessel}
. scripts/ort-env.sh
ort_bench() { node scripts/ort-bench.js "$@"; }
make -s build/tessel build/examples/mobilenet_block build/bench/ocr_models build/bench/cores >/dev/null
work=build/bench-vs-ort
mkdir -p "$work"

if [ -z "${MODELS:-}" ]; then
  MODELS=""
  for n in 256 512 1024; do
    ort_bench matmul $n $n $n "$work/matmul_$n.onnx"
    MODELS+=" $work/matmul_$n.onnx"
  done
  build/examples/mobilenet_block "$work/mobilenet_block.onnx" >/dev/null
  build/bench/ocr_models "$work" >/dev/null
  MODELS+=" $work/mobilenet_block.onnx $work/ocr_cls.onnx $work/ocr_det.onnx $work/ocr_rec.onnx"
  for m in ../shared/onnx-tests/light/*.onnx; do [ -e "$m" ] && MODELS+=" $m"; done
fi

median() { sed -nE "s/^$1 median=([0-9.]+).*/\1/p"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || (b != "" && b + 0 < a + 0)) print b; else print a }'; }

echo "Tessel $($tessel version 2>/dev/null | head -1); onnxruntime-node $(node -e 'console.log(require("onnxruntime-node/package.json").version)') (${ORT_ISA:-its own ISA choice}); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); runs $runs, rounds $rounds"
build/bench/cores   # the two-thread rows depend on it: before the table and after it
echo
echo "| model | threads | Tessel ISA | Tessel ms | onnxruntime ms | Tessel / onnxruntime | check |"
echo "|---|---:|---|---:|---:|---:|---|"
for model in $MODELS; do
  name=$(basename "$model" .onnx)
  data="$work/data_$name"
  if ! ort_bench inputs "$model" "$data" 2>"$work/err"; then
    echo "| $name | | | | onnxruntime failed: $(head -c 120 "$work/err") | | |"
    continue
  fi
  check=$($tessel run "$model" --inputs "$data" --compare "$data" --rtol 1e-3 --atol 1e-4 2>&1 | grep -c MISMATCH || true)
  [ "$check" = 0 ] && check=ok || check="MISMATCH"
  for threads in 1 2; do
    tessel_best="" ort_best="" isa=""
    for ((r = 0; r < rounds; ++r)); do
      out=$($tessel run "$model" --inputs "$data" --bench "$runs" --no-reference --threads "$threads" 2>&1 || true)
      t=$(median latency_ms <<< "$out")
      isa=$(sed -nE 's/^latency_ms .*isa=([a-z0-9]+).*/\1/p' <<< "$out")
      o=$(ort_bench time "$model" "$data" "$runs" "$threads" 2>&1 | median ort_ms || true)
      tessel_best=$(best "$tessel_best" "$t")
      ort_best=$(best "$ort_best" "$o")
    done
    ratio=$(awk -v a="$tessel_best" -v b="$ort_best" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b }')
    echo "| $name | $threads | ${isa:-} | ${tessel_best:-failed} | ${ort_best:-failed} | $ratio | $check |"
  done
done
echo
build/bench/cores
