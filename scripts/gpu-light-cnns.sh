#!/usr/bin/env bash
# gpu-light-cnns.sh [MODEL...]: each light CNN (../shared/onnx-tests/light) on HETERO:GPU,CPU
# against the CPU's outputs on the same inputs (rtol 1e-3, atol 1e-4), at HETERO_PLACEMENT
# first and cost. Needs build/tessel; prints one line per model and run, exits 1 on a mismatch.
# Without an OpenCL driver HETERO:GPU,CPU runs on the CPU alone and the check still holds.
set -u
cd "$(dirname "$0")/.."
light=../shared/onnx-tests/light
tessel=build/tessel
[ -x "$tessel" ] || { echo "build/tessel is missing: make build/tessel" >&2; exit 2; }
models=("$@")
[ ${#models[@]} -gt 0 ] || models=($(cd "$light" && ls light_*.onnx | sed 's/\.onnx$//'))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for name in "${models[@]}"; do
  mkdir -p "$work/$name"
  if ! "$tessel" run "$light/$name.onnx" --device CPU --output-dir "$work/$name" > "$work/$name.cpu.log" 2>&1; then
    echo "$name: the CPU run failed: $(tail -1 "$work/$name.cpu.log")"; failed=1; continue
  fi
  for placement in first cost; do
    if "$tessel" run "$light/$name.onnx" --device HETERO:GPU,CPU --config HETERO_PLACEMENT=$placement \
         --compare "$work/$name" --rtol 1e-3 --atol 1e-4 > "$work/$name.gpu.log" 2>&1; then
      echo "$name HETERO:GPU,CPU placement=$placement: equal to CPU"
    else
      echo "$name HETERO:GPU,CPU placement=$placement: MISMATCH or failure: $(tail -2 "$work/$name.gpu.log" | tr '\n' ' ')"; failed=1
    fi
  done
done
exit $failed
