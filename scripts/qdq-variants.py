#!/usr/bin/python3
"""qdq-variants.py MODEL.onnx OUT.onnx --int8-ends | --int8-movement: the forms of a QDQ model with
int8 activations (tools/quantize.py --int8-activations) that converters and onnxruntime's optimizer
leave, for the benches. --int8-ends: the QuantizeLinear of the model input goes (the input is its
int8 value, as a converted TFLite model's) and the last QuantizeLinear's int8 value is an output
too. --int8-movement: DequantizeLinear -> MaxPool/Reshape/Flatten/Transpose -> QuantizeLinear on
one grid becomes the op on the int8 values (as onnxruntime's QDQ optimizer leaves it)."""
import argparse

import onnx
from onnx import TensorProto, helper, numpy_helper

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("out")
form = parser.add_mutually_exclusive_group(required=True)
form.add_argument("--int8-ends", action="store_true")
form.add_argument("--int8-movement", action="store_true")
args = parser.parse_args()
model = onnx.load(args.model)
graph = model.graph
changed = 0
if args.int8_ends:
    inputs = {i.name: i for i in graph.input}
    for node in list(graph.node):
        if node.op_type == "QuantizeLinear" and node.input[0] in inputs:
            old = inputs[node.input[0]]
            dims = [d.dim_value for d in old.type.tensor_type.shape.dim]
            graph.input.remove(old)
            graph.input.append(helper.make_tensor_value_info(node.output[0], TensorProto.INT8, dims))
            graph.node.remove(node)
            changed += 1
            break
    last = [n for n in graph.node if n.op_type == "QuantizeLinear"][-1]
    graph.output.append(helper.make_tensor_value_info(last.output[0], TensorProto.INT8, None))
else:
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    readers, made = {}, {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
        for name in node.output:
            made[name] = node
    def same(a, b):
        return a in constants and b in constants and constants[a].dtype == constants[b].dtype and (constants[a] == constants[b]).all()
    for node in list(graph.node):
        if node.op_type not in ("MaxPool", "Reshape", "Flatten", "Transpose"):
            continue
        dq, qs = made.get(node.input[0]), readers.get(node.output[0], [])
        if dq is None or dq.op_type != "DequantizeLinear" or len(qs) != 1 or qs[0].op_type != "QuantizeLinear":
            continue
        q = qs[0]
        if len(readers.get(dq.output[0], [])) != 1 or not all(same(a, b) for a, b in zip(dq.input[1:], q.input[1:])):
            continue
        node.input[0], node.output[0] = dq.input[0], q.output[0]
        graph.node.remove(dq)
        graph.node.remove(q)
        changed += 1
onnx.save(model, args.out)
print(f"qdq-variants.py: {changed} change(s) -> {args.out}")
