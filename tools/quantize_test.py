#!/usr/bin/python3
"""Tests of tools/quantize.py (make test runs it): the rounding of weights and activations, the
structure of the model it writes, the quantized model's outputs against the float model's on
Tessel, and its refusals.

    tools/quantize_test.py build/tessel FLOAT_MODEL.onnx
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize  # noqa: E402

failures = 0


def check(condition, message):
    global failures
    if not condition:
        failures += 1
        print("FAIL: " + message)


def run(args):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_output(tessel, model_path, inputs, folder):
    """Output 0 of `tessel run` on model_path (float64) and its --perf-counts listing, or (None, None)."""
    out = os.path.join(folder, os.path.basename(model_path) + ".out")
    os.makedirs(out, exist_ok=True)
    r = run([tessel, "run", model_path, "--inputs", inputs, "--output-dir", out, "--perf-counts"])
    check(r.returncode == 0, "tessel run %s: %s" % (model_path, r.stderr))
    if r.returncode != 0:
        return None, None
    with open(os.path.join(out, "output_0.pb"), "rb") as f:
        return numpy_helper.to_array(TensorProto.FromString(f.read())).astype(np.float64), r.stdout


def correlation(a, b):
    """Centred, so that an output dominated by a constant (random weights) cannot hide an error."""
    ca, cb = a.ravel() - a.mean(), b.ravel() - b.mean()
    return float(np.dot(ca, cb) / (np.linalg.norm(ca) * np.linalg.norm(cb) + 1e-30))


def test_rounding():
    rng = np.random.default_rng(5)
    weight = rng.normal(size=(8, 3, 3, 3)).astype(np.float32)
    weight[3] = 0   # an all-zero channel keeps a usable scale
    for per_channel in (True, False):
        q, scale = quantize.weight_params(weight, 0, per_channel)
        check(q.dtype == np.int8 and q.min() >= -127, "weights are int8 in [-127, 127]")
        s = scale.reshape(-1, 1, 1, 1) if per_channel else scale
        check(np.all(np.abs(q.astype(np.float32) * s - weight) <= s / 2 * (1 + 1e-6)), "weights within half a step")
        check(np.all(scale > 0), "every scale positive")
    q, scale = quantize.weight_params(weight, 0, True, 64)   # --reduce-range
    check(q.min() >= -64 and q.max() <= 64 and np.abs(q).max() == 64, "7-bit weights in [-64, 64], 64 reached")
    check(np.all(np.abs(q.astype(np.float32) * scale.reshape(-1, 1, 1, 1) - weight) <= scale.reshape(-1, 1, 1, 1) / 2 * (1 + 1e-6)),
          "7-bit weights within half a step")
    scale, zero = quantize.activation_params(-1.0, 3.0)
    check(abs(float(scale) - 4.0 / 255) < 1e-7 and int(zero) == 64, "activation range [-1, 3]: scale 4/255, zero 64")
    scale, zero = quantize.activation_params(0.5, 2.0)
    check(int(zero) == 0 and abs(float(scale) - 2.0 / 255) < 1e-7, "a positive range starts at 0")
    scale, zero = quantize.activation_params(0.0, 0.0)
    check(float(scale) == 1.0, "an all-zero range gets scale 1")


def test_model(tessel, float_model, folder):
    int8_model = os.path.join(folder, "int8.onnx")
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), float_model, "-o", int8_model,
             "--tessel", tessel, "--random", "3"])
    check(r.returncode == 0, "quantize.py on %s: %s" % (float_model, r.stderr))
    if r.returncode != 0:
        return
    model = onnx.load(int8_model)
    onnx.checker.check_model(model)
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    quantized = 0
    for node in model.graph.node:
        if node.op_type not in ("Conv", "MatMul", "Gemm"):
            continue
        w = producer.get(node.input[1])
        if node.op_type != "Conv" and (w is None or w.op_type != "DequantizeLinear"):
            continue   # a MatMul of two activations stays float
        check(w is not None and w.op_type == "DequantizeLinear" and inits[w.input[0]].data_type == TensorProto.INT8,
              "%s reads int8 weights through DequantizeLinear" % node.name)
        x = producer.get(node.input[0])
        check(x is not None and x.op_type == "DequantizeLinear" and inits[x.input[2]].data_type == TensorProto.UINT8,
              "%s reads a uint8 activation through DequantizeLinear" % node.name)
        quantized += 1
    check(quantized > 10, "the model's convolutions are quantized (%d)" % quantized)
    # a nearest Resize of a quantized activation reads it dequantized and is quantized on the same grid
    readers = quantize.readers_of(model.graph)
    resizes = 0
    for node in model.graph.node:
        if node.op_type != "Resize":
            continue
        x = producer.get(node.input[0])
        after = readers.get(node.output[0], [])
        def grid(n):
            return [numpy_helper.to_array(inits[name]).tolist() for name in n.input[1:3]]
        same_grid = len(after) == 1 and after[0].op_type == "QuantizeLinear" and x is not None and \
            x.op_type == "DequantizeLinear" and grid(after[0]) == grid(x)
        check(same_grid, "%s is wrapped in its input's grid" % node.name)
        resizes += 1
    check(resizes > 0 or "ocr_det" not in float_model, "the detector's upsampling Resizes are quantized (%d)" % resizes)
    check(not any(n.op_type == "BatchNormalization" and producer.get(n.input[0]) is not None and
                  producer[n.input[0]].op_type == "Conv" for n in model.graph.node), "batch normalizations folded into convs")
    # same random input through both models
    inputs = os.path.join(folder, "inputs")
    os.makedirs(inputs)
    m = onnx.load(float_model)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(11)
    index = 0
    for value in m.graph.input:
        if value.name in inits:
            continue
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in value.type.tensor_type.shape.dim]
        with open(os.path.join(inputs, "input_%d.pb" % index), "wb") as f:
            f.write(numpy_helper.from_array(rng.random(shape, dtype=np.float32), value.name).SerializeToString())
        index += 1
    a, _ = run_output(tessel, float_model, inputs, folder)
    b, _ = run_output(tessel, int8_model, inputs, folder)
    if a is None or b is None:
        return
    correlation_ab = correlation(a, b)
    spread, span = float(np.max(np.abs(a - b))), float(np.ptp(a))
    print("int8 against float32: correlation %.5f, largest difference %.4f of the output range %.4f"
          % (correlation_ab, spread, span))
    check(correlation_ab > 0.99, "int8 outputs follow the float outputs (correlation %.5f)" % correlation_ab)
    check(spread <= 0.1 * span, "int8 outputs within a tenth of the output range (%.4f of %.4f)" % (spread, span))


def test_reduce_range(tessel, float_model, folder):
    """--reduce-range: every int8 weight within [-64, 64]; the model's outputs the same bits at
    TESSEL_ISA=avx2 (on CPUs without AVX-VNNI the byte-pair kernels; a CPU without AVX2 runs its
    own ISA twice) as at the CPU's own ISA."""
    model_path = os.path.join(folder, "int8r.onnx")
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), float_model, "-o", model_path,
             "--tessel", tessel, "--random", "2", "--reduce-range"])
    check(r.returncode == 0 and "7-bit" in r.stdout, "quantize.py --reduce-range: %s%s" % (r.stdout, r.stderr))
    if r.returncode != 0:
        return
    weights = [numpy_helper.to_array(t) for t in onnx.load(model_path).graph.initializer if t.data_type == TensorProto.INT8]
    check(len(weights) > 10 and all(w.min() >= -64 and w.max() <= 64 for w in weights), "7-bit weights in [-64, 64]")
    outputs = []
    for isa in ("", "avx2"):
        out = os.path.join(folder, "int8r-out-" + (isa or "auto"))
        os.makedirs(out)
        env = dict(os.environ)
        env.pop("TESSEL_ISA", None)
        if isa:
            env["TESSEL_ISA"] = isa
        r = subprocess.run([tessel, "run", model_path, "--output-dir", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
        check(r.returncode == 0, "tessel run %s (TESSEL_ISA=%s): %s" % (model_path, isa, r.stderr))
        if r.returncode != 0:
            return
        with open(os.path.join(out, "output_0.pb"), "rb") as f:
            outputs.append(f.read())
    check(outputs[0] == outputs[1], "7-bit model: the same output at TESSEL_ISA=avx2 as at the CPU's own ISA")


def test_int8_activations(tessel, float_model, folder):
    """--int8-activations: the activations' zero points int8, 128 below the uint8 model's (the same
    calibration); Tessel runs both through as many kernels to the same output bits."""
    paths = {}
    for kind, extra in (("uint8", []), ("int8", ["--int8-activations"])):
        paths[kind] = os.path.join(folder, "activations-%s.onnx" % kind)
        r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), float_model, "-o", paths[kind],
                 "--tessel", tessel, "--random", "2"] + extra)
        check(r.returncode == 0 and ("%s activations" % kind) in r.stdout, "quantize.py %s: %s%s" % (" ".join(extra), r.stdout, r.stderr))
        if r.returncode != 0:
            return
    zero_points = {}
    for kind, path in paths.items():
        model = onnx.load(path)
        onnx.checker.check_model(model)
        zero_points[kind] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
                             if t.name.endswith("_zero_point") and not t.name.endswith("_quantized_zero_point")}
    check(len(zero_points["int8"]) > 10 and zero_points["int8"].keys() == zero_points["uint8"].keys(),
          "the same activations quantized (%d and %d)" % (len(zero_points["int8"]), len(zero_points["uint8"])))
    check(all(z.dtype == np.int8 and int(z) == int(zero_points["uint8"][name]) - 128 for name, z in zero_points["int8"].items()),
          "int8 activation zero points, 128 below the uint8 ones")
    outputs, kernels = [], []
    for kind, path in paths.items():
        out = os.path.join(folder, "activations-out-" + kind)
        os.makedirs(out)
        r = run([tessel, "run", path, "--output-dir", out])
        check(r.returncode == 0, "tessel run %s: %s" % (path, r.stderr))
        if r.returncode != 0:
            return
        kernels.append([line for line in r.stdout.splitlines() if " kernels" in line])
        with open(os.path.join(out, "output_0.pb"), "rb") as f:
            outputs.append(f.read())
    check(kernels[0] == kernels[1] and len(kernels[0]) == 1, "as many kernels for int8 activations as for uint8: %s" % kernels)
    check(outputs[0] == outputs[1], "int8 activations: the uint8 model's output bits")


def test_old_opset(tessel, folder):
    """An IR 3, opset 9 model (initializers listed among the inputs, as the light CNNs are) with
    Conv -> BatchNormalization converts to opset 13 and gets per-channel weights."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w")]
    for name, value in (("gamma", rng.random(4) + 0.5), ("beta", rng.normal(size=4)), ("mean", rng.normal(size=4)),
                        ("var", rng.random(4) + 0.5)):
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    inputs = [x] + [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, [y], inits), opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    path = os.path.join(folder, "opset9.onnx")
    onnx.save(model, path)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q", "--tessel", tessel])
    check(r.returncode == 0 and "per-channel" in r.stdout, "an opset-9 model with a batch normalization quantizes: " + r.stderr)
    if r.returncode != 0:
        return
    q = onnx.load(path + ".q")
    check(quantize.opset_of(q) == 13, "the opset-9 model is written at opset 13")
    check(not any(n.op_type == "BatchNormalization" for n in q.graph.node), "the opset-9 model's batch normalization is folded")
    check(sum(n.op_type == "DequantizeLinear" for n in q.graph.node) >= 3, "the opset-9 model's conv is quantized")


def test_pool_and_join(tessel, folder):
    """ShuffleNet's downsampling unit: Conv -> AveragePool and Conv, Concat, Relu -> Conv. The pool's
    and the Concat's outputs are quantized too (their inputs are), so they run between uint8
    tensors; the run's output follows the float model's."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.normal(size=(8, 3, 3, 3)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.normal(size=(8, 8, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(size=(4, 16, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["a"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Concat", ["p", "b"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(folder, "unit.onnx")
    onnx.save(model, path)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q", "--tessel", tessel])
    check(r.returncode == 0, "the downsampling unit quantizes: " + r.stderr)
    if r.returncode != 0:
        return
    q = onnx.load(path + ".q")
    readers = quantize.readers_of(q.graph)
    for name in ("p", "c"):
        after = readers.get(name, [])
        check(len(after) == 1 and after[0].op_type == "QuantizeLinear", "the %s output is quantized" % name)


def test_qoperator(tessel, folder):
    """tools/qdq_to_qoperator.py on a quantized net with a residual Add, AveragePool, Concat,
    GlobalAveragePool and Gemm: QLinearConv and onnxruntime's com.microsoft QLinearAdd,
    QLinearAveragePool, QLinearConcat, QLinearGlobalAveragePool and QGemm in place of the QDQ
    groups; Tessel reads them as those groups, so both models give the same bytes, on its int8
    steps."""
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array((rng.normal(size=(8, 3, 3, 3)) * 0.4).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.normal(size=(8, 8, 3, 3)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.normal(size=(8, 8, 3, 3)) * 0.2).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.normal(size=(6, 16, 1, 1)) * 0.3).astype(np.float32), "w3"),
             numpy_helper.from_array((rng.normal(size=(5, 6)) * 0.3).astype(np.float32), "wf"),
             numpy_helper.from_array((rng.normal(size=5) * 0.1).astype(np.float32), "bf")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["a"]),
             helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "b"], ["sum"]),
             helper.make_node("Relu", ["sum"], ["s"]),
             helper.make_node("AveragePool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["s", "w2"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Concat", ["p", "c"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
             helper.make_node("Conv", ["g", "w3"], ["h"]),
             helper.make_node("Flatten", ["h"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
             helper.make_node("Sigmoid", ["logits"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(folder, "qop.onnx")
    onnx.save(model, path)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q", "--tessel", tessel,
             "--random", "3"])
    check(r.returncode == 0, "the net quantizes: " + r.stderr)
    if r.returncode != 0:
        return
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "qdq_to_qoperator.py"), path + ".q", path + ".qop"])
    check(r.returncode == 0, "qdq_to_qoperator.py: " + r.stderr)
    if r.returncode != 0:
        return
    qop = onnx.load(path + ".qop")
    ops = sorted((n.domain, n.op_type) for n in qop.graph.node if n.op_type.startswith("QLinear") or n.op_type == "QGemm")
    ms = "com.microsoft"
    check(ops == sorted([("", "QLinearConv")] * 4 + [(ms, "QLinearAdd"), (ms, "QLinearAveragePool"), (ms, "QLinearConcat"),
                                                     (ms, "QLinearGlobalAveragePool"), (ms, "QGemm")]),
          "the QOperator ops: %s" % ops)
    inputs = os.path.join(folder, "qop-inputs")
    os.makedirs(inputs)
    with open(os.path.join(inputs, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(rng.uniform(-1, 1, size=(1, 3, 16, 16)).astype(np.float32), "x").SerializeToString())
    a, _ = run_output(tessel, path + ".q", inputs, folder)
    b, listing = run_output(tessel, path + ".qop", inputs, folder)
    if a is None or b is None:
        return
    check(np.array_equal(a, b), "the QOperator model gives the QDQ model's output (largest difference %g)" % np.max(np.abs(a - b)))
    # the Add in its own step, or in the step of the conv that makes its operand (+Add)
    for steps in ((":Add", "Conv+Add"), (":AveragePool",), (":Concat",), (":Gemm",)):
        check(any(step in listing for step in steps) and "int8:" in listing,
              "Tessel runs the %s on its int8 steps:\n%s" % (steps[0], listing))


def test_dynamic(tessel, folder):
    """--dynamic: a two-layer MLP's MatMuls (the first two reading one activation) become
    DynamicQuantizeLinear (one per activation) -> MatMulInteger (int8 B) -> Cast -> Mul, the Conv
    stays float; Tessel runs MatMulInteger on its int8 tiles and the outputs follow the float
    model's."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array((rng.normal(size=(32, 48)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.normal(size=(32, 48)) * 0.2).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.normal(size=(48, 16)) * 0.2).astype(np.float32), "w3"),
             numpy_helper.from_array(rng.normal(size=(2, 1, 1, 1)).astype(np.float32), "wc")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
             helper.make_node("MatMul", ["x", "w2"], ["h2"], name="fc2"),
             helper.make_node("Add", ["h1", "h2"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w3"], ["m"], name="fc3"),
             helper.make_node("Unsqueeze", ["m", "axes"], ["m4"]),
             helper.make_node("Conv", ["m4", "wc"], ["y"])]
    inits.append(numpy_helper.from_array(np.array([0, 1], dtype=np.int64), "axes"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [20, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 20, 16])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(folder, "mlp.onnx")
    onnx.save(model, path)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q", "--dynamic"])
    check(r.returncode == 0 and "3 MatMuls" in r.stdout, "the MLP quantizes dynamically: " + r.stdout + r.stderr)
    if r.returncode != 0:
        return
    q = onnx.load(path + ".q")
    ops = [n.op_type for n in q.graph.node]
    check(ops.count("DynamicQuantizeLinear") == 2 and ops.count("MatMulInteger") == 3 and ops.count("Cast") == 3 and
          "MatMul" not in ops and "Conv" in ops, "one DynamicQuantizeLinear per activation, three MatMulInteger: %s" % ops)
    q_inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    for node in q.graph.node:
        if node.op_type == "MatMulInteger":
            w = q_inits.get(node.input[1])
            check(w is not None and w.dtype == np.int8 and np.abs(w).max() == 127, "%s: int8 weights up to 127" % node.name)
    inputs = os.path.join(folder, "mlp-inputs")
    os.makedirs(inputs)
    with open(os.path.join(inputs, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(rng.normal(size=(20, 32)).astype(np.float32), "x").SerializeToString())
    a, _ = run_output(tessel, path, inputs, folder)
    b, listing = run_output(tessel, path + ".q", inputs, folder)
    if a is None or b is None:
        return
    check(listing.count(":MatMulInteger") == 3 and " ref:MatMulInteger" not in listing,
          "Tessel runs the three MatMulInteger on its own kernels:\n" + listing)
    check(correlation(a, b) > 0.99, "dynamic int8 outputs follow the float outputs (correlation %.5f)" % correlation(a, b))


def test_dynamic_conv(tessel, folder):
    """--dynamic --conv: a conv net's Convs (a bias, a depthwise one, strides) become
    DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul (-> Add of the bias); with int8 weights
    and with --uint8-weights (zero points past int8's reach) Tessel runs every ConvInteger on its
    own kernels, and the outputs follow the float model's."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((rng.normal(size=(16, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.normal(size=16) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.normal(size=(16, 1, 3, 3)) * 0.3 + 0.2).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.normal(size=(8, 16, 1, 1)) * 0.3).astype(np.float32), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw", pads=[1, 1, 1, 1], group=16),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="pw")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 20])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 10])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    path = os.path.join(folder, "convnet.onnx")
    onnx.save(model, path)
    inputs = os.path.join(folder, "convnet-inputs")
    os.makedirs(inputs)
    with open(os.path.join(inputs, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(rng.uniform(size=(1, 3, 24, 20)).astype(np.float32), "x").SerializeToString())
    for flags in (["--conv"], ["--conv", "--uint8-weights"]):
        out_path = path + ".q" + str(len(flags))
        r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", out_path, "--dynamic"] + flags)
        check(r.returncode == 0 and "3 MatMuls and Convs" in r.stdout, "the conv net quantizes dynamically: " + r.stdout + r.stderr)
        if r.returncode != 0:
            continue
        q = onnx.load(out_path)
        ops = [n.op_type for n in q.graph.node]
        check(ops.count("DynamicQuantizeLinear") == 3 and ops.count("ConvInteger") == 3 and "Conv" not in ops and
              ops.count("Add") == 1, "three ConvInteger, one bias Add: %s" % ops)
        q_inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
        for node in q.graph.node:
            if node.op_type == "ConvInteger":
                w, zw = q_inits.get(node.input[1]), q_inits.get(node.input[3])
                want = np.uint8 if "--uint8-weights" in flags else np.int8
                check(w is not None and w.dtype == want and zw is not None and zw.dtype == want and zw.ndim == 0,
                      "%s: %s weights, one zero point" % (node.name, want.__name__))
        a, _ = run_output(tessel, path, inputs, folder)
        b, listing = run_output(tessel, out_path, inputs, folder)
        if a is None or b is None:
            return
        check(listing.count(":ConvInteger") == 3 and " ref:ConvInteger" not in listing and "ConvInteger+depthwise" in listing,
              "Tessel runs the three ConvInteger on its own kernels:\n" + listing)
        check(correlation(a, b) > 0.99,
              "dynamic int8 conv outputs follow the float outputs (%s: correlation %.5f)" % (flags, correlation(a, b)))


def test_refusals(tessel, folder):
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), os.path.join(folder, "missing.onnx"),
             "-o", os.path.join(folder, "x.onnx"), "--tessel", tessel])
    check(r.returncode == 2 and "cannot read" in r.stderr, "a missing model is refused: " + r.stderr)
    # nothing to quantize
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = os.path.join(folder, "relu.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q", "--tessel", tessel])
    check(r.returncode == 2 and "nothing to quantize" in r.stderr, "a model without Conv/MatMul/Gemm is refused: " + r.stderr)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q", "--dynamic"])
    check(r.returncode == 2 and "nothing to quantize" in r.stderr, "--dynamic without a MatMul is refused: " + r.stderr)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q",
             "--tessel", os.path.join(folder, "no-tessel")])
    check(r.returncode == 2 and "no Tessel command line" in r.stderr, "a missing tessel is refused: " + r.stderr)
    r = run([sys.executable, os.path.join(os.path.dirname(__file__), "quantize.py"), path, "-o", path + ".q", "--dynamic",
             "--int8-activations"])
    check(r.returncode == 2 and "--int8-activations is for QDQ models" in r.stderr, "--dynamic --int8-activations is refused: " + r.stderr)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tessel, float_model = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="tessel-quantize-test-") as folder:
        test_rounding()
        test_model(tessel, float_model, folder)
        test_reduce_range(tessel, float_model, folder)
        test_int8_activations(tessel, float_model, folder)
        test_old_opset(tessel, folder)
        test_pool_and_join(tessel, folder)
        test_qoperator(tessel, folder)
        test_dynamic(tessel, folder)
        test_dynamic_conv(tessel, folder)
        test_refusals(tessel, folder)
    checks = ("rounding, model structure (Resize on its input's grid), int8 against float32, 7-bit weights, int8 activations, opset 9, "
              "pool and join, QOperator models (qdq_to_qoperator.py), dynamic MatMuls and Convs, refusals")
    print("quantize.py: %s: %s" % (checks, "%d failed" % failures if failures else "all passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
