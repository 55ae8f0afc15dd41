#!/usr/bin/env bash
# bench-models.sh [RUNS]: `tessel run --bench` single-thread latency on the larger models of the
# conformance data and on the MobileNet-style block, against the reference path (CPU with
# FUSION=NO) measured in the same run. Prints a Markdown table.
set -eu
runs=${1:-50}
cd "$(dirname "$0")/.."
make -s build/tessel build/examples/mobilenet_block >/dev/null
build/examples/mobilenet_block build/mobilenet_block.onnx >/dev/null
data=/usr/share/libonnx-testdata/data
models=(
  "MobileNet-style block (1x16x56x56)|build/mobilenet_block.onnx|"
  "pytorch-operator/test_operator_conv|$data/pytorch-operator/test_operator_conv/model.onnx|$data/pytorch-operator/test_operator_conv/test_data_set_0"
  "pytorch-converted/test_MaxPool2d_stride_padding_dilation|$data/pytorch-converted/test_MaxPool2d_stride_padding_dilation/model.onnx|$data/pytorch-converted/test_MaxPool2d_stride_padding_dilation/test_data_set_0"
  "node/test_maxpool_3d_default|$data/node/test_maxpool_3d_default/model.onnx|$data/node/test_maxpool_3d_default/test_data_set_0"
  "node/test_averagepool_3d_default|$data/node/test_averagepool_3d_default/model.onnx|$data/node/test_averagepool_3d_default/test_data_set_0"
  "pytorch-converted/test_Conv3d_groups|$data/pytorch-converted/test_Conv3d_groups/model.onnx|$data/pytorch-converted/test_Conv3d_groups/test_data_set_0"
  "node/test_layer_normalization_4d_axis0_expanded|$data/node/test_layer_normalization_4d_axis0_expanded/model.onnx|$data/node/test_layer_normalization_4d_axis0_expanded/test_data_set_0"
)
echo "| model | fused ms (median) | reference ms (median) | speedup |"
echo "|---|---:|---:|---:|"
for entry in "${models[@]}"; do
  IFS='|' read -r name model inputs <<< "$entry"
  args=(run "$model" --bench "$runs")
  [ -n "$inputs" ] && args+=(--inputs "$inputs")
  out=$(build/tessel "${args[@]}" 2>&1) || { echo "| $name | failed | | |"; continue; }
  fused=$(sed -nE 's/^latency_ms median=([0-9.]+).*/\1/p' <<< "$out")
  ref=$(sed -nE 's/^reference_ms median=([0-9.]+).*/\1/p' <<< "$out")
  speed=$(sed -nE 's/.*speedup=([0-9.]+x).*/\1/p' <<< "$out")
  echo "| $name | $fused | $ref | $speed |"
done
