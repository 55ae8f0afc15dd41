#!/usr/bin/env bash
# fuzz-seeds.sh TESSEL ONNX_DIR BLOB_DIR: seed corpora for fuzz/onnx_model.cpp and
# fuzz/blob_import.cpp from the project's own data. ONNX_DIR gets the model.onnx of a fixed
# list of libonnx-testdata node tests (ops of the runtime's list, If/Loop/Scan bodies, plus a few it
# does not run yet, so the reader and the refusals are seeded too); BLOB_DIR gets `TESSEL compile` of every one
# of them that compiles, on CPU and on HETERO:TEMPLATE,CPU.
set -u
tessel=$1; onnx_dir=$2; blob_dir=$3
data=/usr/share/libonnx-testdata/data/node
mkdir -p "$onnx_dir" "$blob_dir"
tests="test_add test_add_bcast test_sub test_mul test_div test_relu test_sigmoid test_tanh test_clip
 test_leakyrelu test_hardswish test_prelu_example test_where_example test_gather_0 test_gather_1
 test_gather_negative_indices test_concat_2d_axis_0 test_concat_3d_axis_negative_1
 test_transpose_default test_transpose_all_permutations_1 test_split_equal_parts_1d
 test_flatten_axis1 test_depthtospace_example test_spacetodepth_example test_cast_FLOAT_to_FLOAT16
 test_mod_mixed_sign_int64 test_shape test_size test_identity test_softmax_axis_1 test_matmul_2d
 test_gemm_default_no_bias test_conv_with_strides_padding test_maxpool_2d_pads
 test_averagepool_2d_strides test_slice test_reshape_reordered_all_dims test_expand_dim_changed
 test_tile test_constantofshape_float_ones test_resize_upsample_sizes_nearest
 test_batchnorm_example test_squeeze test_unsqueeze_axis_0 test_reduce_mean_default_axes_keepdims_example
 test_argmax_default_axis_example test_range_float_type_positive_delta test_layer_normalization_2d_axis0
 test_instancenorm_example test_globalaveragepool test_pow test_sqrt test_exp test_erf test_max_example
 test_equal test_not test_and2d test_sum_example test_mean_example test_elu test_selu test_softplus
 test_if test_if_seq test_loop11 test_loop13_seq test_scan9_sum test_scan_sum test_range_float_type_positive_delta_expanded"
copied=0; blobs=0
for t in $tests; do
  model=$data/$t/model.onnx
  [ -f "$model" ] || continue
  cp "$model" "$onnx_dir/$t.onnx"; copied=$((copied + 1))
  if "$tessel" compile "$model" -o "$blob_dir/$t.cpu.blob" >/dev/null 2>&1; then blobs=$((blobs + 1)); else rm -f "$blob_dir/$t.cpu.blob"; fi
  if "$tessel" compile "$model" --device HETERO:TEMPLATE,CPU --config TEMPLATE:SUPPORTED_OPS=Add,Relu,Gather,Concat \
       -o "$blob_dir/$t.hetero.blob" >/dev/null 2>&1; then blobs=$((blobs + 1)); else rm -f "$blob_dir/$t.hetero.blob"; fi
done
# A QDQ Conv with int8 weights (python3-onnx): its blob holds int8 weights and a value made from them.
if /usr/bin/python3 - "$onnx_dir/qdq_conv.onnx" <<'PY' 2>/dev/null; then
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
inits = [numpy_helper.from_array(np.arange(-8, 8, dtype=np.int8).reshape(4, 1, 2, 2), "w"),
         numpy_helper.from_array(np.array([0.1, 0.2, 0.3, 0.4], np.float32), "ws"),
         numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
         helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
         helper.make_node("Conv", ["xf", "wf"], ["c"]), helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"])]
graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4, 3, 3])], inits)
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PY
  copied=$((copied + 1))
  if "$tessel" compile "$onnx_dir/qdq_conv.onnx" -o "$blob_dir/qdq_conv.cpu.blob" >/dev/null 2>&1; then blobs=$((blobs + 1)); fi
fi
# onnxruntime's com.microsoft quantized ops (QOperator form), which the reader turns into QDQ nodes.
if /usr/bin/python3 - "$onnx_dir/qoperator_contrib.onnx" <<'PY' 2>/dev/null; then
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
ms = "com.microsoft"
nodes = [helper.make_node("QLinearAdd", ["a", "s", "z", "b", "s", "z", "s", "z"], ["sum"], domain=ms),
         helper.make_node("QLinearConcat", ["s", "z", "sum", "s", "z", "a", "s", "z"], ["cat"], domain=ms, axis=1),
         helper.make_node("QLinearAveragePool", ["cat", "s", "z", "s", "z"], ["pool"], domain=ms, kernel_shape=[2, 2]),
         helper.make_node("QLinearSigmoid", ["pool", "s", "z", "s"], ["y"], domain=ms)]
u8 = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.UINT8, dims)
graph = helper.make_graph(nodes, "qoperator", [u8("a", [1, 2, 4, 4]), u8("b", [1, 2, 4, 4])], [u8("y", [1, 4, 3, 3])], inits)
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ms, 1)]), sys.argv[1])
PY
  copied=$((copied + 1))
  if "$tessel" compile "$onnx_dir/qoperator_contrib.onnx" -o "$blob_dir/qoperator_contrib.cpu.blob" >/dev/null 2>&1; then blobs=$((blobs + 1)); fi
fi
echo "fuzz seeds: $copied models in $onnx_dir, $blobs blobs in $blob_dir"
