#!/usr/bin/python3
"""Rewrites a QDQ model (tools/quantize.py's form) into the QOperator form onnxruntime's
quantize_static writes with QuantFormat.QOperator, so tests and benches have QOperator models
of the same nets:

    tools/qdq_to_qoperator.py IN.onnx OUT.onnx [--standard-only]

DequantizeLinear(x) -> Conv(DequantizeLinear(w int8), DequantizeLinear(b int32)) [-> Relu] ->
QuantizeLinear(y) becomes QLinearConv(x, ..., w, ..., y's scale and zero point, b); MatMul with
a constant int8 weight becomes QLinearMatMul. onnxruntime's own ops (domain com.microsoft) take
what it quantizes so too: Gemm (transA 0, beta 1) with such weights and an int32 bias becomes
QGemm, DequantizeLinears -> Add or Mul (or a two-input Sum) [-> Relu] ->
QuantizeLinear becomes QLinearAdd or QLinearMul, DequantizeLinears -> Concat -> QuantizeLinear
QLinearConcat, and DequantizeLinear -> GlobalAveragePool, AveragePool, Sigmoid or LeakyRelu ->
QuantizeLinear QLinearGlobalAveragePool and so on (--standard-only leaves these). A Relu is
dropped only where y's zero point is 0 (the clamp at 0 is then the quantization's own); other
patterns stay as they are. Nodes left without readers are removed."""
import sys

import onnx
from onnx import helper, numpy_helper

args = [a for a in sys.argv[1:] if a != "--standard-only"]
standard_only = len(args) < len(sys.argv) - 1
model = onnx.load(args[0])
g = model.graph
inits = {i.name: i for i in g.initializer}
producer = {o: n for n in g.node for o in n.output}
readers = {}
for n in g.node:
    for i in n.input:
        readers.setdefault(i, []).append(n)
outputs = {o.name for o in g.output}


def only_reader(value, node):
    return value not in outputs and [id(r) for r in readers.get(value, [])] == [id(node)]


def zero_point_is_zero(name):
    return name in inits and not any(numpy_helper.to_array(inits[name]).reshape(-1))


def per_tensor_dequantize(value):
    """The DequantizeLinear making `value` when its scale is one value and its zero point given."""
    d = producer.get(value)
    if d is None or d.op_type != "DequantizeLinear" or len(d.input) < 3 or d.input[1] not in inits:
        return None
    return d if numpy_helper.to_array(inits[d.input[1]]).size == 1 else None


CONTRIB_UNARY = {"GlobalAveragePool": "QLinearGlobalAveragePool", "AveragePool": "QLinearAveragePool",
                 "Sigmoid": "QLinearSigmoid", "LeakyRelu": "QLinearLeakyRelu"}


def contrib_node(op, q):
    """onnxruntime's com.microsoft op for DequantizeLinears -> op -> QuantizeLinear q, or None."""
    ins = [per_tensor_dequantize(i) for i in op.input]
    if not ins or None in ins or len(q.input) < 3:
        return None
    grid = [q.input[1], q.input[2]]
    name = op.name + "_quant"
    if op.op_type in ("Add", "Mul", "Sum") and len(ins) == 2:
        inputs = list(ins[0].input[:3]) + list(ins[1].input[:3]) + grid
        return helper.make_node("QLinearMul" if op.op_type == "Mul" else "QLinearAdd", inputs, [q.output[0]], name=name,
                                domain="com.microsoft")
    if op.op_type == "Concat":
        inputs = grid + [i for d in ins for i in d.input[:3]]
        node = helper.make_node("QLinearConcat", inputs, [q.output[0]], name=name, domain="com.microsoft")
        node.attribute.extend(op.attribute)
        return node
    if op.op_type in CONTRIB_UNARY and len(ins) == 1:
        node = helper.make_node(CONTRIB_UNARY[op.op_type], list(ins[0].input[:3]) + grid, [q.output[0]], name=name,
                                domain="com.microsoft")
        node.attribute.extend(op.attribute)
        if op.op_type.endswith("AveragePool"):
            node.attribute.append(helper.make_attribute("channels_last", 0))
        return node
    return None


replace = {}   # id(QuantizeLinear node) -> new node
dropped = set()
for q in g.node:
    if q.op_type != "QuantizeLinear":
        continue
    op = producer.get(q.input[0])
    relu = None
    if op is not None and op.op_type == "Relu" and only_reader(op.output[0], q):
        if len(q.input) < 3 or not zero_point_is_zero(q.input[2]):
            continue
        relu, op = op, producer.get(op.input[0])
    if op is None or not only_reader(op.output[0], relu or q):
        continue
    if op.op_type not in ("Conv", "MatMul", "Gemm"):
        node = None if standard_only or (relu and op.op_type not in ("Add", "Sum")) else contrib_node(op, q)
        if node is not None:
            replace[id(q)] = node
            dropped.update({id(op)} | ({id(relu)} if relu else set()))
        continue
    dx, dw = producer.get(op.input[0]), producer.get(op.input[1])
    if dx is None or dw is None or dx.op_type != "DequantizeLinear" or dw.op_type != "DequantizeLinear":
        continue
    if dw.input[0] not in inits or len(dx.input) < 3 or len(dw.input) < 3:
        continue
    inputs = [dx.input[0], dx.input[1], dx.input[2], dw.input[0], dw.input[1], dw.input[2], q.input[1], q.input[2]]
    bias = None
    if op.op_type in ("Conv", "Gemm") and len(op.input) > 2 and op.input[2]:
        db = producer.get(op.input[2])
        if db is None or db.op_type != "DequantizeLinear" or db.input[0] not in inits:
            continue
        bias = db.input[0]
    if op.op_type == "Conv":
        node = helper.make_node("QLinearConv", inputs + ([bias] if bias else []), [q.output[0]], name=op.name + "_qlinear")
        node.attribute.extend(op.attribute)
    elif op.op_type == "Gemm":   # onnxruntime's QGemm: C int32 at a_scale * b_scale, no beta
        attributes = {a.name: helper.get_attribute_value(a) for a in op.attribute}
        if standard_only or attributes.get("beta", 1.0) != 1.0 or attributes.get("transA", 0) != 0:
            continue
        node = helper.make_node("QGemm", inputs[:6] + [bias or ""] + inputs[6:], [q.output[0]], name=op.name + "_quant",
                                domain="com.microsoft")
        node.attribute.extend(a for a in op.attribute if a.name != "beta")
    else:
        if len(numpy_helper.to_array(inits[dw.input[0]]).shape) != 2:
            continue
        node = helper.make_node("QLinearMatMul", inputs, [q.output[0]], name=op.name + "_qlinear")
    replace[id(q)] = node
    dropped.update({id(op)} | ({id(relu)} if relu else set()))

nodes = [replace.get(id(n), n) for n in g.node if id(n) not in dropped]
# drop nodes nobody reads any more (the DequantizeLinears of x, w and b)
while True:
    used = {i for n in nodes for i in n.input} | outputs
    keep = [n for n in nodes if any(o in used for o in n.output)]
    if len(keep) == len(nodes):
        break
    nodes = keep
del g.node[:]
g.node.extend(nodes)
used = {i for n in nodes for i in n.input}
kept = [i for i in g.initializer if i.name in used]
del g.initializer[:]
g.initializer.extend(kept)
if any(n.domain == "com.microsoft" for n in nodes) and not any(o.domain == "com.microsoft" for o in model.opset_import):
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
onnx.save(model, args[1])
counts = {}
for n in nodes:
    if n.op_type.startswith("QLinear"):
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
print(", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())) + (", %d QGemm" % sum(n.op_type == "QGemm" for n in nodes)))
