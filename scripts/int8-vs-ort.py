#!/usr/bin/python3
"""int8-vs-ort.py MODEL.onnx WORKDIR [--tessel build/tessel]: runs an int8 model (QDQ, or QOperator
from tools/qdq_to_qoperator.py) in Tessel and in onnxruntime (scripts/ort-bench.js, NODE_PATH set
as bench-vs-ort.sh sets it) with every QuantizeLinear and QLinear* output (com.microsoft's too)
made a graph output, and prints how many quantized elements differ by 0, 1 and more than 1 step
(uint8/int8 units), and the model outputs' largest difference."""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("work")
parser.add_argument("--tessel", default="build/tessel")
args = parser.parse_args()
os.makedirs(args.work, exist_ok=True)
model = onnx.load(args.model)
graph = model.graph
outputs = [o.name for o in graph.output]
names = {o.name for o in graph.output}
quantized = []
for node in graph.node:
    if (node.op_type == "QuantizeLinear" or node.op_type.startswith("QLinear")) and node.output[0] not in names:
        graph.output.append(onnx.helper.make_empty_tensor_value_info(node.output[0]))
        quantized.append(node.output[0])
path = os.path.join(args.work, "model.onnx")
onnx.save(model, path)
data = os.path.join(args.work, "data")
here = os.path.dirname(os.path.abspath(__file__))
subprocess.run(["node", os.path.join(here, "ort-bench.js"), "inputs", path, data], check=True, stderr=subprocess.DEVNULL)
out = os.path.join(args.work, "tessel")
os.makedirs(out, exist_ok=True)
subprocess.run([args.tessel, "run", path, "--inputs", data, "--output-dir", out], check=True, stdout=subprocess.DEVNULL)
def load(folder, k):
    t = onnx.TensorProto()
    with open(os.path.join(folder, "output_%d.pb" % k), "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)
same = one = more = 0
for k, name in enumerate(outputs + quantized):
    a, b = load(data, k), load(out, k)
    if a.shape != b.shape:
        print("%s: shapes %s and %s" % (name, a.shape, b.shape))
        sys.exit(1)
    if k < len(outputs):
        print("output %s: max |tessel - onnxruntime| %.3g (largest |value| %.3g)" % (name, np.max(np.abs(a.astype(np.float64) - b)), np.max(np.abs(a))))
        continue
    d = np.abs(a.astype(np.int32) - b.astype(np.int32))
    same += int(np.sum(d == 0))
    one += int(np.sum(d == 1))
    more += int(np.sum(d > 1))
total = same + one + more
print("quantized elements: %d; equal %.4f%%, one step %.4f%%, more %.4f%% -> within one step %.4f%%" %
      (total, 100.0 * same / total, 100.0 * one / total, 100.0 * more / total, 100.0 * (same + one) / total))
