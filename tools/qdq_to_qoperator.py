#!/usr/bin/python3
"""Rewrites a QDQ model (tools/quantize.py's form) into the QOperator form onnxruntime's
quantize_static writes with QuantFormat.QOperator, so tests and benches have QLinearConv and
QLinearMatMul models of the same nets:

    tools/qdq_to_qoperator.py IN.onnx OUT.onnx

DequantizeLinear(x) -> Conv(DequantizeLinear(w int8), DequantizeLinear(b int32)) [-> Relu] ->
QuantizeLinear(y) becomes QLinearConv(x, ..., w, ..., y's scale and zero point, b); MatMul with
a constant int8 weight becomes QLinearMatMul. A Relu is dropped only where y's zero point is
0 (the clamp at 0 is then the quantization's own); other patterns stay as they are. Nodes left
without readers are removed."""
import sys

import onnx
from onnx import helper, numpy_helper

model = onnx.load(sys.argv[1])
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
    if op is None or op.op_type not in ("Conv", "MatMul") or not only_reader(op.output[0], relu or q):
        continue
    dx, dw = producer.get(op.input[0]), producer.get(op.input[1])
    if dx is None or dw is None or dx.op_type != "DequantizeLinear" or dw.op_type != "DequantizeLinear":
        continue
    if dw.input[0] not in inits or len(dx.input) < 3 or len(dw.input) < 3:
        continue
    inputs = [dx.input[0], dx.input[1], dx.input[2], dw.input[0], dw.input[1], dw.input[2], q.input[1], q.input[2]]
    if op.op_type == "Conv":
        if len(op.input) > 2 and op.input[2]:
            db = producer.get(op.input[2])
            if db is None or db.op_type != "DequantizeLinear" or db.input[0] not in inits:
                continue
            inputs.append(db.input[0])
        node = helper.make_node("QLinearConv", inputs, [q.output[0]], name=op.name + "_qlinear")
        node.attribute.extend(op.attribute)
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
onnx.save(model, sys.argv[2])
print("%d QLinearConv, %d QLinearMatMul" % (sum(n.op_type == "QLinearConv" for n in nodes),
                                             sum(n.op_type == "QLinearMatMul" for n in nodes)))
