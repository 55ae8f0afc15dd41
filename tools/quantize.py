#!/usr/bin/python3
"""Writes an int8 QDQ model from a float ONNX model, calibrating activation ranges with Tessel.

    tools/quantize.py MODEL.onnx -o OUT.onnx [--calibration DIR]... [--random N] [--seed S]
                      [--tessel build/tessel] [--per-tensor] [--reduce-range] [--int8-activations] [--keep-temp]
    tools/quantize.py MODEL.onnx -o OUT.onnx --dynamic [--conv] [--uint8-weights] [--per-tensor] [--reduce-range]

What it writes is the QDQ form the usual quantizers write (onnxruntime's quantize_static):
- Conv, MatMul and Gemm with a constant weight get int8 weights, symmetric (zero point 0),
  one scale per output channel (per tensor with --per-tensor or below opset 13), read through a
  DequantizeLinear; over [-127, 127], or [-64, 64] with --reduce-range (onnxruntime's
  reduce_range for CPUs without a byte dot product: Tessel's AVX2 int8 tiles then sum pairs of
  byte products, about 1.2x as fast as the 16-bit ones); a bias becomes int32 at scale input_scale * weight_scale.
- Their activation inputs and their outputs (after a Relu or Clip that is the output's only
  reader) go through QuantizeLinear -> DequantizeLinear, uint8, asymmetric, per tensor, with
  the range [min(0, lo), max(0, hi)] seen over the calibration inputs. --int8-activations
  writes them int8 on the same grid (zero point - 128: onnxruntime's default QInt8); Tessel
  runs either on the same kernels with the same results.
- A nearest Resize of a quantized activation gets its output quantized on its input's grid (as
  onnxruntime's QDQ Resize does): it only picks input values, so nothing is rounded twice, and
  a runtime can resize the uint8 values.
- An AveragePool of a quantized activation, and a Concat of quantized activations, get their
  outputs quantized with calibrated ranges (as onnxruntime's QDQ quantizer does), so the pool
  and the join run between uint8 tensors.
With --dynamic it writes what onnxruntime's quantize_dynamic writes for MatMul instead (no
calibration): each MatMul with a constant 2-D float B becomes DynamicQuantizeLinear (its A, once
per activation) -> MatMulInteger (B int8, symmetric, zero point 0) -> Cast to float -> Mul by
the activation's scale times B's (per column, or one with --per-tensor); Gemm stays float, and
Conv too unless --conv: then each Conv with constant float weights becomes DynamicQuantizeLinear
-> ConvInteger (weights per tensor, as onnxruntime writes them) -> Cast -> Mul -> Add of its bias.
--uint8-weights writes uint8 weights, asymmetric over [min(w, 0), max(w, 0)] with a zero point
(onnxruntime's QUInt8), in place of symmetric int8.
Calibration runs the model with every tensor it needs as an extra graph output through
`tessel run --output-dir`. Inputs: folders of input_K.pb files (--calibration, repeatable), or
N sets of random values in [0, 1) (--random, the default with N = 4; free dims become 1).
Constant weights given as Constant or ConstantOfShape nodes are folded into initializers first,
and a BatchNormalization after a Conv into the Conv's weights and bias.
A model below opset 13 is converted to opset 13 (onnx.version_converter) for per-axis scales;
if that fails, weights are quantized per tensor at the model's opset (at least 10).
Needs Debian's python3-onnx and python3-numpy (scripts/install-deps.sh installs them).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, helper, numpy_helper

QUANTIZED_OPS = ("Conv", "MatMul", "Gemm")
FUSED_ACTIVATIONS = ("Relu", "Clip")


def fail(message):
    print("quantize.py: " + message, file=sys.stderr)
    sys.exit(2)


def opset_of(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 1


def add_initializer(model, value, name):
    tensor = numpy_helper.from_array(value, name)
    model.graph.initializer.append(tensor)
    if model.ir_version < 4:   # IR 3 lists every initializer among the graph inputs
        model.graph.input.append(helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
    return tensor


def fold_constants(model):
    """Constant and ConstantOfShape (of a constant shape) nodes become initializers, so the
    weights they hold can be quantized."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    keep = []
    for node in graph.node:
        value = None
        if node.op_type == "Constant" and len(node.output) == 1:
            for a in node.attribute:
                if a.name == "value":
                    value = numpy_helper.to_array(a.t)
        elif node.op_type == "ConstantOfShape" and len(node.input) == 1 and node.input[0] in inits:
            shape = numpy_helper.to_array(inits[node.input[0]]).astype(np.int64)
            fill = np.zeros(1, dtype=np.float32)
            for a in node.attribute:
                if a.name == "value":
                    fill = numpy_helper.to_array(a.t)
            value = np.full(tuple(shape), fill.reshape(-1)[0], dtype=fill.dtype)
        if value is None:
            keep.append(node)
            continue
        tensor = add_initializer(model, np.ascontiguousarray(value), node.output[0])
        inits[tensor.name] = tensor
    del graph.node[:]
    graph.node.extend(keep)


def fold_batch_norms(model):
    """Conv -> BatchNormalization (inference, constant parameters, the Conv's only reader)
    becomes one Conv with scaled weights and a bias, as quantizers do before quantizing: the
    int8 weights then carry the normalization and no float layer sits between Conv and Relu."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    readers = readers_of(graph)
    outputs = {o.name for o in graph.output}
    removed = set()
    for conv in graph.node:
        if conv.op_type != "Conv" or len(conv.input) < 2 or conv.input[1] not in inits or conv.output[0] in outputs:
            continue
        next_nodes = readers.get(conv.output[0], [])
        if len(next_nodes) != 1 or next_nodes[0].op_type != "BatchNormalization":
            continue
        bn = next_nodes[0]
        if len(bn.output) != 1 or any(a.name == "training_mode" and a.i for a in bn.attribute) or \
                not all(name in inits for name in bn.input[1:5]) or len(bn.input) < 5:
            continue
        gamma, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in bn.input[1:5])
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        weight = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
        bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] \
            else np.zeros(weight.shape[0])
        factor = gamma / np.sqrt(var + eps)
        weight = weight * factor.reshape([-1] + [1] * (weight.ndim - 1))
        bias = (bias - mean) * factor + beta
        base = (conv.name or conv.output[0]).replace("/", "_")
        add_initializer(model, weight.astype(np.float32), base + "_folded_weight")
        add_initializer(model, bias.astype(np.float32), base + "_folded_bias")
        x = conv.input[0]
        del conv.input[:]
        conv.input.extend([x, base + "_folded_weight", base + "_folded_bias"])
        conv.output[0] = bn.output[0]
        removed.add(id(bn))
    kept = [n for n in graph.node if id(n) not in removed]
    del graph.node[:]
    graph.node.extend(kept)


def readers_of(graph):
    readers = {}
    for node in graph.node:
        for name in node.input:
            if name:
                readers.setdefault(name, []).append(node)
    return readers


def weight_axis(node, weight):
    """The axis of the weight that indexes output channels, and whether the node takes it."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return weight.ndim - 1   # MatMul: B is [..., K, N]


def plan(model):
    """The nodes to quantize with their weight input index, and the activation tensors to
    calibrate: each node's activation inputs and its output point."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    readers = readers_of(graph)
    graph_outputs = {o.name for o in graph.output}
    nodes, activations = [], []
    for node in graph.node:
        if node.op_type not in QUANTIZED_OPS:
            continue
        weight_index = 1
        if node.op_type == "MatMul" and node.input[0] in inits and node.input[1] not in inits:
            continue   # a constant A: left in float (rare; the quantized kernels take B constant)
        if len(node.input) < 2 or node.input[weight_index] not in inits:
            continue
        weight = numpy_helper.to_array(inits[node.input[weight_index]])
        if weight.dtype != np.float32 or weight.ndim < 2:
            continue
        if node.op_type == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute):
            continue
        nodes.append(node)
        if node.input[0] not in activations:
            activations.append(node.input[0])
        out = node.output[0]
        next_nodes = readers.get(out, [])
        if len(next_nodes) == 1 and next_nodes[0].op_type in FUSED_ACTIVATIONS and out not in graph_outputs:
            out = next_nodes[0].output[0]
        if out not in activations:
            activations.append(out)
    return nodes, activations


def more_quantized(model, activations):
    """The outputs quantized because their inputs are, in graph order (so chains follow): a
    nearest Resize's on its input's grid, as (output, input) pairs, and an AveragePool's or an
    all-quantized Concat's, to calibrate."""
    graph_outputs = {o.name for o in model.graph.output}
    quantized, pairs, calibrated = set(activations), [], []
    for node in model.graph.node:
        if not node.input or not node.output or node.output[0] in graph_outputs:
            continue
        out = node.output[0]
        if node.op_type == "Resize" and node.input[0] in quantized:
            if next((a.s.decode() for a in node.attribute if a.name == "mode"), "nearest") == "nearest":
                pairs.append((out, node.input[0]))   # also when a Conv reads it: the input's grid
                quantized.add(out)
        elif out not in quantized and ((node.op_type == "AveragePool" and node.input[0] in quantized) or
                                       (node.op_type == "Concat" and all(name in quantized for name in node.input))):
            calibrated.append(out)
            quantized.add(out)
    return pairs, calibrated


def random_inputs(model, count, seed, folder):
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    sets = []
    for k in range(count):
        d = os.path.join(folder, "random_%d" % k)
        os.makedirs(d)
        index = 0
        for value in model.graph.input:
            if value.name in inits:
                continue
            t = value.type.tensor_type
            if t.elem_type != TensorProto.FLOAT:
                fail("--random makes float inputs only; input '%s' is not float: give --calibration" % value.name)
            shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in t.shape.dim]
            data = rng.random(shape, dtype=np.float32)
            with open(os.path.join(d, "input_%d.pb" % index), "wb") as f:
                f.write(numpy_helper.from_array(data, value.name).SerializeToString())
            index += 1
        sets.append(d)
    return sets


def calibrate(model, activations, sets, tessel, folder):
    """min and max of each activation over every calibration set, from Tessel's outputs."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = [o.name for o in probe.graph.output]
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in inits]
    for name in activations:
        if name not in existing and name not in graph_inputs:
            probe.graph.output.append(helper.make_empty_tensor_value_info(name))
            probe.graph.output[-1].type.tensor_type.elem_type = TensorProto.FLOAT
    names = [o.name for o in probe.graph.output]
    path = os.path.join(folder, "probe.onnx")
    onnx.save(probe, path)
    lo = {n: np.inf for n in activations}
    hi = {n: -np.inf for n in activations}
    for k, inputs in enumerate(sets):
        out = os.path.join(folder, "out_%d" % k)
        os.makedirs(out)
        run = subprocess.run([tessel, "run", path, "--inputs", inputs, "--output-dir", out],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            fail("tessel run failed on the calibration model:\n" + run.stderr)
        files = [os.path.join(out, "output_%d.pb" % i) for i in range(len(names))]
        files += [os.path.join(inputs, "input_%d.pb" % i) for i in range(len(graph_inputs))]
        for name, file in zip(names + graph_inputs, files):
            if name not in lo:
                continue
            with open(file, "rb") as f:
                value = numpy_helper.to_array(TensorProto.FromString(f.read()))
            if value.size:
                lo[name] = min(lo[name], float(value.min()))
                hi[name] = max(hi[name], float(value.max()))
    return {n: (lo[n], hi[n]) for n in activations if np.isfinite(lo[n]) and np.isfinite(hi[n])}


def activation_params(lo, hi):
    """uint8 asymmetric: the range always holds 0, so a zero pads exactly."""
    lo, hi = min(0.0, lo), max(0.0, hi)
    scale = (hi - lo) / 255.0
    if scale == 0.0 or not np.isfinite(scale):
        scale = 1.0
    zero_point = int(np.clip(np.round(-lo / scale), 0, 255))
    return np.float32(scale), np.uint8(zero_point)


def weight_params(weight, axis, per_channel, peak_q=127):
    """int8 symmetric over [-peak_q, peak_q] (no -128)."""
    if per_channel:
        reduce_axes = tuple(a for a in range(weight.ndim) if a != axis)
        peak = np.max(np.abs(weight), axis=reduce_axes)
    else:
        peak = np.array(np.max(np.abs(weight)))
    scale = np.asarray(peak / float(peak_q), dtype=np.float32)
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    shape = [1] * weight.ndim
    if per_channel:
        shape[axis] = -1
    q = np.clip(np.round(weight / scale.reshape(shape)), -peak_q, peak_q).astype(np.int8)
    return q, scale


def replace_nodes(graph, nodes, new_inits):
    """The graph's nodes become `nodes`, its initializers the ones they read plus new_inits (the
    dropped ones leave the graph's inputs too)."""
    del graph.node[:]
    graph.node.extend(nodes)
    used = set()
    for node in graph.node:
        used.update(node.input)
    kept = [t for t in graph.initializer if t.name in used]
    dropped = {t.name for t in graph.initializer if t.name not in used}
    inputs = [i for i in graph.input if i.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)


def rewrite(model, nodes, ranges, per_channel, peak_q=127, int8_activations=False):
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    new_inits, new_nodes = [], []
    dq_of = {}   # activation name -> its DequantizeLinear output
    scale_of = {}
    for name, (lo, hi) in ranges.items():
        scale, zero_point = activation_params(lo, hi)
        base = name.replace("/", "_")
        new_inits.append(numpy_helper.from_array(np.array(scale, dtype=np.float32), base + "_scale"))
        if int8_activations:
            new_inits.append(numpy_helper.from_array(np.array(int(zero_point) - 128, dtype=np.int8), base + "_zero_point"))
        else:
            new_inits.append(numpy_helper.from_array(np.array(zero_point, dtype=np.uint8), base + "_zero_point"))
        new_nodes.append((name, helper.make_node("QuantizeLinear", [name, base + "_scale", base + "_zero_point"],
                                                 [base + "_quantized"], name=base + "_QuantizeLinear")))
        new_nodes.append((name, helper.make_node("DequantizeLinear", [base + "_quantized", base + "_scale", base + "_zero_point"],
                                                 [base + "_dequantized"], name=base + "_DequantizeLinear")))
        dq_of[name] = base + "_dequantized"
        scale_of[name] = float(scale)
    # every reader of a quantized activation reads its dequantized value (the QDQ form)
    qdq_nodes = {id(n) for _, n in new_nodes}
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in dq_of and id(node) not in qdq_nodes:
                node.input[i] = dq_of[name]
    weight_nodes = []
    for node in nodes:
        weight_name = node.input[1]
        weight = numpy_helper.to_array(inits[weight_name])
        axis = weight_axis(node, weight)
        q, scale = weight_params(weight, axis, per_channel, peak_q)
        base = node.name.replace("/", "_") if node.name else weight_name.replace("/", "_")
        qname = base + "_weight_quantized"
        new_inits.append(numpy_helper.from_array(q, qname))
        new_inits.append(numpy_helper.from_array(scale, qname + "_scale"))
        new_inits.append(numpy_helper.from_array(np.zeros(scale.shape, dtype=np.int8), qname + "_zero_point"))
        attrs = {"axis": axis} if per_channel else {}
        weight_nodes.append(helper.make_node("DequantizeLinear", [qname, qname + "_scale", qname + "_zero_point"],
                                             [qname + "_dequantized"], name=qname + "_DequantizeLinear", **attrs))
        node.input[1] = qname + "_dequantized"
        # bias: int32 at input_scale * weight_scale, when the input is quantized and the bias per channel
        activation = next((a for a, dq in dq_of.items() if dq == node.input[0]), None)
        if len(node.input) > 2 and node.input[2] in inits and activation is not None:
            bias = numpy_helper.to_array(inits[node.input[2]])
            channels = weight.shape[axis]
            if bias.dtype == np.float32 and bias.ndim == 1 and bias.shape[0] == channels:
                bias_scale = (scale_of[activation] * scale).astype(np.float32)
                if bias_scale.ndim == 0:
                    bias_scale = np.full(channels, bias_scale, dtype=np.float32)
                qb = np.clip(np.round(bias / bias_scale), -2**31, 2**31 - 1).astype(np.int32)
                bname = base + "_bias_quantized"
                new_inits.append(numpy_helper.from_array(qb, bname))
                new_inits.append(numpy_helper.from_array(bias_scale, bname + "_scale"))
                new_inits.append(numpy_helper.from_array(np.zeros(channels, dtype=np.int32), bname + "_zero_point"))
                weight_nodes.append(helper.make_node("DequantizeLinear", [bname, bname + "_scale", bname + "_zero_point"],
                                                     [bname + "_dequantized"], name=bname + "_DequantizeLinear", axis=0))
                node.input[2] = bname + "_dequantized"
    # the Q/DQ pair of an activation right after its producer keeps the nodes in topological order
    ordered = list(weight_nodes)
    graph_inputs = {i.name for i in graph.input}
    pending = {}
    for name, n in new_nodes:
        pending.setdefault(name, []).append(n)
    for name in list(pending):
        if name in graph_inputs:
            ordered.extend(pending.pop(name))
    for node in graph.node:
        ordered.append(node)
        for out in node.output:
            ordered.extend(pending.pop(out, []))
    replace_nodes(graph, ordered, new_inits)


def uint8_weight_params(weight, axis, per_channel):
    """uint8 asymmetric over [min(w, 0), max(w, 0)] (onnxruntime's QUInt8 weights): q, scale, zero point."""
    reduce_axes = tuple(a for a in range(weight.ndim) if a != axis) if per_channel else None
    lo = np.minimum(np.min(weight, axis=reduce_axes), 0.0)
    hi = np.maximum(np.max(weight, axis=reduce_axes), 0.0)
    scale = np.asarray((hi - lo) / 255.0, dtype=np.float32)
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    zero_point = np.clip(np.round(-lo / scale), 0, 255).astype(np.uint8)
    shape = [1] * weight.ndim
    if per_channel:
        shape[axis] = -1
    q = np.clip(np.round(weight / scale.reshape(shape)) + zero_point.reshape(shape), 0, 255).astype(np.uint8)
    return q, scale, zero_point


def rewrite_dynamic(model, per_channel, peak_q=127, convs=False, uint8_weights=False):
    """MatMuls with a constant 2-D float B (and Convs with constant float weights when convs) as
    quantize_dynamic writes them; returns how many."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    new_inits, ordered, quantized_input = [], [], {}
    count = 0
    taken = set(inits) | {i.name for i in graph.input} | {n.name for n in graph.node}
    for n in graph.node:
        taken.update(n.output)

    def unique(name):
        """name, or name with a number added: no tensor or node of the graph has it."""
        name = name.replace("/", "_")
        k, found = 1, name
        while found in taken:
            k, found = k + 1, "%s_%d" % (name, k)
        taken.add(found)
        return found

    for node in graph.node:
        conv = convs and node.op_type == "Conv"
        if (node.op_type != "MatMul" and not conv) or node.input[1] not in inits or node.input[0] in inits:
            ordered.append(node)
            continue
        weight = numpy_helper.to_array(inits[node.input[1]])
        if weight.dtype != np.float32 or (weight.ndim != 2 and not conv):
            ordered.append(node)
            continue
        x = node.input[0]
        base = unique(node.name or node.output[0])
        if x not in quantized_input:   # one DynamicQuantizeLinear per activation, before its first reader
            quantized_input[x] = tuple(unique(x + suffix) for suffix in ("_quantized", "_scale", "_zero_point"))
            ordered.append(helper.make_node("DynamicQuantizeLinear", [x], list(quantized_input[x]), name=unique(x + "_DynamicQuantizeLinear")))
        xq, xs, xz = quantized_input[x]
        # a Conv's weights per tensor, as onnxruntime's ConvInteger writes them; a MatMul's per column
        per_weight = per_channel and not conv
        if uint8_weights:
            q, scale, zero_point = uint8_weight_params(weight, 1, per_weight)
        else:
            q, scale = weight_params(weight, 1, per_weight, peak_q)
            zero_point = np.array(0, dtype=np.int8)
        op = "ConvInteger" if conv else "MatMulInteger"
        names = {suffix: unique(base + suffix) for suffix in ("_weight_quantized", "_weight_scale", "_weight_zero_point", "_" + op,
                                                              "_sums", "_Cast", "_sums_float", "_scale_Mul", "_scale", "_Mul",
                                                              "_scaled", "_bias", "_bias_Add")}
        new_inits.append(numpy_helper.from_array(q, names["_weight_quantized"]))
        new_inits.append(numpy_helper.from_array(scale, names["_weight_scale"]))
        new_inits.append(numpy_helper.from_array(zero_point, names["_weight_zero_point"]))
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute} if conv else {}
        ordered.append(helper.make_node(op, [xq, names["_weight_quantized"], xz, names["_weight_zero_point"]], [names["_sums"]],
                                        name=names["_" + op], **attrs))
        ordered.append(helper.make_node("Cast", [names["_sums"]], [names["_sums_float"]], name=names["_Cast"], to=TensorProto.FLOAT))
        ordered.append(helper.make_node("Mul", [xs, names["_weight_scale"]], [names["_scale"]], name=names["_scale_Mul"]))
        bias = node.input[2] if conv and len(node.input) > 2 and node.input[2] else None
        scaled = names["_scaled"] if bias else node.output[0]
        ordered.append(helper.make_node("Mul", [names["_sums_float"], names["_scale"]], [scaled], name=names["_Mul"]))
        if bias:   # the float bias added after, along the maps (onnxruntime reshapes it to 1 x C x 1 x ...)
            b = numpy_helper.to_array(inits[bias]).astype(np.float32)
            new_inits.append(numpy_helper.from_array(b.reshape([1, -1] + [1] * (weight.ndim - 2)), names["_bias"]))
            ordered.append(helper.make_node("Add", [scaled, names["_bias"]], [node.output[0]], name=names["_bias_Add"]))
        count += 1
    replace_nodes(graph, ordered, new_inits)
    return count


def main():
    parser = argparse.ArgumentParser(description="int8 QDQ model from a float ONNX model (see the file's docstring)")
    parser.add_argument("model")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--calibration", action="append", default=[], help="a folder of input_K.pb files (repeatable)")
    parser.add_argument("--random", type=int, default=None, help="N sets of random inputs in [0, 1) (default 4 without --calibration)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tessel", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "tessel"))
    parser.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor instead of per output channel")
    parser.add_argument("--reduce-range", action="store_true", help="weights over [-64, 64] (7 bits) instead of [-127, 127]")
    parser.add_argument("--int8-activations", action="store_true", help="int8 activations (zero point - 128) instead of uint8")
    parser.add_argument("--keep-temp", action="store_true")
    parser.add_argument("--dynamic", action="store_true", help="MatMuls as onnxruntime's quantize_dynamic writes them (no calibration)")
    parser.add_argument("--conv", action="store_true", help="with --dynamic: Convs too, as ConvInteger (quantize_dynamic's default op types)")
    parser.add_argument("--uint8-weights", action="store_true", help="with --dynamic: uint8 asymmetric weights (onnxruntime's QUInt8)")
    args = parser.parse_args()
    if args.dynamic and args.int8_activations:
        fail("--int8-activations is for QDQ models: --dynamic's DynamicQuantizeLinear makes uint8")
    if args.dynamic:
        try:
            model = onnx.load(args.model)
        except Exception as e:   # onnx raises several kinds for unreadable files
            fail("cannot read '%s': %s" % (args.model, e))
        fold_constants(model)
        if opset_of(model) < 11:
            try:
                model = onnx.version_converter.convert_version(model, 13)
                model.ir_version = max(model.ir_version, 7)   # initializers need not be inputs
            except Exception as e:   # the converter raises several kinds
                fail("the model's opset %d is below 11 (DynamicQuantizeLinear) and does not convert to 13: %s" % (opset_of(model), e))
        count = rewrite_dynamic(model, not args.per_tensor, 64 if args.reduce_range else 127, args.conv, args.uint8_weights)
        if not count:
            fail("no MatMul with a constant 2-D float B%s: nothing to quantize" % (" and no Conv with constant weights" if args.conv else ""))
        onnx.checker.check_model(model)
        onnx.save(model, args.output)
        weights = ("uint8" if args.uint8_weights else "7-bit int8" if args.reduce_range else "int8") + " weights, MatMul's " + \
            ("per tensor" if args.per_tensor else "per column") + (", Conv's per tensor" if args.conv else "")
        print("quantize.py: %d %s quantized dynamically (%s) -> %s"
              % (count, "MatMuls and Convs" if args.conv else "MatMuls", weights, args.output))
        return
    if not os.access(args.tessel, os.X_OK):
        fail("no Tessel command line at '%s' (make build/tessel, or give --tessel)" % args.tessel)
    try:
        model = onnx.load(args.model)
    except Exception as e:   # onnx raises several kinds for unreadable files
        fail("cannot read '%s': %s" % (args.model, e))
    fold_constants(model)
    fold_batch_norms(model)
    per_channel = not args.per_tensor
    if opset_of(model) < 13:
        try:
            model = onnx.version_converter.convert_version(model, 13)
        except Exception as e:   # the converter raises several kinds
            per_channel = False
            if opset_of(model) < 10:
                fail("the model's opset %d is below 10 (QuantizeLinear) and does not convert to 13: %s" % (opset_of(model), e))
    model.ir_version = max(model.ir_version, 7 if opset_of(model) >= 13 else 5)   # initializers need not be inputs
    nodes, activations = plan(model)
    if not nodes:
        fail("no Conv, MatMul or Gemm with a constant float weight: nothing to quantize")
    folder = tempfile.mkdtemp(prefix="tessel-quantize-")
    try:
        sets = list(args.calibration)
        count = args.random if args.random is not None else (0 if sets else 4)
        sets += random_inputs(model, count, args.seed, folder)
        if not sets:
            fail("no calibration inputs (--calibration DIR or --random N with N > 0)")
        shared, calibrated = more_quantized(model, activations)
        ranges = calibrate(model, activations + calibrated, sets, args.tessel, folder)
        for out, source in shared:
            if source in ranges:
                ranges[out] = ranges[source]
        rewrite(model, nodes, ranges, per_channel, 64 if args.reduce_range else 127, args.int8_activations)
        onnx.checker.check_model(model)
        onnx.save(model, args.output)
    finally:
        if args.keep_temp:
            print("quantize.py: temporary files in " + folder)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print("quantize.py: %d nodes quantized (%s weights), %d %s activations quantized, calibrated on %d input sets -> %s"
          % (len(nodes), ("per-channel" if per_channel else "per-tensor") + (", 7-bit" if args.reduce_range else ""),
             len(ranges), "int8" if args.int8_activations else "uint8", len(sets), args.output))


if __name__ == "__main__":
    main()
