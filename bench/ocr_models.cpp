// Three OCR-style conv nets built in code, the kind of model an edge board runs for text:
//   ocr_cls  MobileNetV3-small text-direction classifier, 1x3x48x192 (HardSwish, SE blocks)
//   ocr_det  DB text detector, 1x3x160x160 (MobileNetV3 backbone, FPN with Resize, ConvTranspose head)
//   ocr_rec  SVTR-style recognizer, 1x3x48x320 (depthwise-separable backbone, two transformer
//            blocks over the 40 columns, 6625 classes)
// Weights are seeded random values. `ocr_models DIR` writes DIR/ocr_{cls,det,rec}.onnx
// (scripts/bench-vs-ort.sh times them against onnxruntime); `--check` also runs each on CPU and
// on TEMPLATE (the reference kernels) with the same input and fails when they differ.
//   build/bench/ocr_models DIR [--check]
// The library's implementation is tools/impl.cpp, linked with this file.
#include "runtime.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tessel;

namespace {
// Builds a model node by node; the first failing call is kept and every later one does nothing.
struct Builder {
    Model model;
    Status status = Status::Ok;
    uint32_t seed = 2024;
    int counter = 0;

    float next_random() {   // [-0.5, 0.5)
        seed = seed * 1664525u + 1013904223u;
        return (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    std::string name(const char* prefix) { return prefix + std::to_string(counter++); }
    static TensorDesc desc(const std::vector<int64_t>& dims) {
        TensorDesc d;
        d.type = ElementType::Float32;
        d.rank = (uint8_t)dims.size();
        for (size_t i = 0; i < dims.size(); ++i) d.dims[i] = dims[i];
        return d;
    }
    NodeId input(const char* input_name, const std::vector<int64_t>& dims) {
        NodeId id = kNoNode;
        if (status == Status::Ok) status = model.add_input(input_name, desc(dims), &id);
        return id;
    }
    // Uniform in [offset - scale / 2, offset + scale / 2).
    NodeId random(const std::vector<int64_t>& dims, float scale, float offset = 0.0f) {
        uint64_t n = 1;
        for (int64_t d : dims) n *= (uint64_t)d;
        std::vector<float> w(n);
        for (float& x : w) x = next_random() * scale + offset;
        return constant(dims, w);
    }
    NodeId constant(const std::vector<int64_t>& dims, const std::vector<float>& values) {
        NodeId id = kNoNode;
        std::string n = name("w");
        if (status == Status::Ok) status = model.add_constant(StringView(n.c_str()), desc(dims), values.data(), &id);
        return id;
    }
    NodeId shape(const std::vector<int64_t>& values) {
        NodeId id = kNoNode;
        TensorDesc d = desc({(int64_t)values.size()});
        d.type = ElementType::Int64;
        std::string n = name("shape");
        if (status == Status::Ok) status = model.add_constant(StringView(n.c_str()), d, values.data(), &id);
        return id;
    }
    NodeId op(const char* type, std::vector<NodeId> inputs) {
        NodeId id = kNoNode;
        std::vector<InputRef> refs;
        for (NodeId i : inputs) refs.push_back(i == kNoNode ? model.absent() : InputRef::by_id(i));
        std::string n = name(type);
        if (status == Status::Ok)
            status = model.add_node(type, StringView(n.c_str()), Span<const InputRef>(refs.data(), refs.size()), 1, &id);
        return id;
    }
    void ints(NodeId node, const char* attribute, const std::vector<int64_t>& values) {
        if (status == Status::Ok) status = model.set_ints(node, attribute, Span<const int64_t>(values.data(), values.size()));
    }
    void integer(NodeId node, const char* attribute, int64_t value) {
        if (status == Status::Ok) status = model.set_int(node, attribute, value);
    }
    void output(const char* output_name, NodeId source) {
        if (status == Status::Ok) status = model.add_output(output_name, InputRef::by_id(source));
    }

    // >>layers
    NodeId conv(NodeId x, int64_t in, int64_t out, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t group,
                bool bias = true) {
        float bound = 2.0f * std::sqrt(3.0f / (float)(in / group * kh * kw));   // unit-variance outputs
        NodeId w = random({out, in / group, kh, kw}, bound);
        NodeId c = bias ? op("Conv", {x, w, random({out}, 0.2f)}) : op("Conv", {x, w});
        ints(c, "kernel_shape", {kh, kw});
        ints(c, "strides", {sh, sw});
        ints(c, "pads", {kh / 2, kw / 2, kh / 2, kw / 2});
        integer(c, "group", group);
        return c;
    }
    NodeId batch_norm(NodeId x, int64_t channels) {
        return op("BatchNormalization", {x, random({channels}, 0.4f, 1.0f), random({channels}, 0.2f),
                                         random({channels}, 0.2f), random({channels}, 0.4f, 1.0f)});
    }
    NodeId activation(NodeId x, const char* kind) {
        if (!std::strcmp(kind, "none")) return x;
        if (!std::strcmp(kind, "swish")) return op("Mul", {x, op("Sigmoid", {x})});
        return op(kind, {x});
    }
    NodeId conv_bn(NodeId x, int64_t in, int64_t out, int64_t k, int64_t sh, int64_t sw, int64_t group, const char* act) {
        return activation(batch_norm(conv(x, in, out, k, k, sh, sw, group, false), out), act);
    }
    // Squeeze-and-excitation: x * HardSigmoid(W2 Relu(W1 mean(x))).
    NodeId squeeze_excite(NodeId x, int64_t channels) {
        NodeId pooled = op("GlobalAveragePool", {x});
        NodeId reduced = op("Relu", {conv(pooled, channels, channels / 4, 1, 1, 1, 1, 1)});
        return op("Mul", {x, op("HardSigmoid", {conv(reduced, channels / 4, channels, 1, 1, 1, 1, 1)})});
    }
    // MobileNetV3 inverted residual: expand 1x1, depthwise k x k, SE, project 1x1, residual.
    NodeId mobile_block(NodeId x, int64_t in, int64_t k, int64_t expand, int64_t out, bool se, const char* act,
                        int64_t sh, int64_t sw) {
        NodeId y = expand != in ? conv_bn(x, in, expand, 1, 1, 1, 1, act) : x;
        y = conv_bn(y, expand, expand, k, sh, sw, expand, act);
        if (se) y = squeeze_excite(y, expand);
        y = conv_bn(y, expand, out, 1, 1, 1, 1, "none");
        return in == out && sh == 1 && sw == 1 ? op("Add", {y, x}) : y;
    }
    NodeId upsample(NodeId x, float factor) {
        NodeId r = op("Resize", {x, kNoNode, constant({4}, {1.0f, 1.0f, factor, factor})});
        if (status == Status::Ok) status = model.set_string(r, "mode", "nearest");
        return r;
    }
    NodeId linear(NodeId x, int64_t in, int64_t out) {
        return op("Add", {op("MatMul", {x, random({in, out}, 2.0f * std::sqrt(3.0f / (float)in))}), random({out}, 0.2f)});
    }
    NodeId layer_norm(NodeId x, int64_t channels) {
        return op("LayerNormalization", {x, random({channels}, 0.4f, 1.0f), random({channels}, 0.2f)});
    }
    NodeId transpose(NodeId x, const std::vector<int64_t>& perm) {
        NodeId t = op("Transpose", {x});
        ints(t, "perm", perm);
        return t;
    }
    // Pre-norm transformer block over x [1, T, D]: multi-head self-attention, then an MLP.
    NodeId transformer_block(NodeId x, int64_t dim, int64_t heads) {
        int64_t head_dim = dim / heads;
        NodeId n = layer_norm(x, dim);
        NodeId split = shape({0, 0, heads, head_dim});
        NodeId q = transpose(op("Reshape", {linear(n, dim, dim), split}), {0, 2, 1, 3});   // [1, H, T, dh]
        NodeId k = transpose(op("Reshape", {linear(n, dim, dim), split}), {0, 2, 3, 1});   // [1, H, dh, T]
        NodeId v = transpose(op("Reshape", {linear(n, dim, dim), split}), {0, 2, 1, 3});
        NodeId scores = op("Mul", {op("MatMul", {q, k}), constant({}, {1.0f / std::sqrt((float)head_dim)})});
        NodeId probs = op("Softmax", {scores});
        integer(probs, "axis", -1);
        NodeId mixed = op("Reshape", {transpose(op("MatMul", {probs, v}), {0, 2, 1, 3}), shape({0, 0, dim})});
        x = op("Add", {x, linear(mixed, dim, dim)});
        NodeId hidden = activation(linear(layer_norm(x, dim), dim, 2 * dim), "swish");
        return op("Add", {x, linear(hidden, 2 * dim, dim)});
    }
};

// >>models
Status classifier(Builder& b) {
    NodeId x = b.input("image", {1, 3, 48, 192});
    x = b.conv_bn(x, 3, 16, 3, 2, 2, 1, "HardSwish");   // 24 x 96
    struct Block { int64_t k, expand, out; bool se; const char* act; int64_t sh, sw; };
    const Block blocks[] = {{3, 16, 16, true, "Relu", 2, 1},     {3, 72, 24, false, "Relu", 2, 1},
                            {3, 88, 24, false, "Relu", 1, 1},    {5, 96, 40, true, "HardSwish", 2, 1},
                            {5, 240, 40, true, "HardSwish", 1, 1}, {5, 120, 48, true, "HardSwish", 1, 1},
                            {5, 288, 96, true, "HardSwish", 2, 1}, {5, 576, 96, true, "HardSwish", 1, 1}};
    int64_t channels = 16;
    for (const Block& k : blocks) {
        x = b.mobile_block(x, channels, k.k, k.expand, k.out, k.se, k.act, k.sh, k.sw);
        channels = k.out;
    }
    x = b.conv_bn(x, channels, 576, 1, 1, 1, 1, "HardSwish");
    NodeId flat = b.op("Flatten", {b.op("GlobalAveragePool", {x})});
    NodeId logits = b.op("Gemm", {flat, b.random({2, 576}, 0.1f), b.random({2}, 0.1f)});
    b.integer(logits, "transB", 1);
    b.output("probabilities", b.op("Softmax", {logits}));
    return b.status;
}

Status detector(Builder& b) {
    NodeId x = b.input("image", {1, 3, 160, 160});
    x = b.conv_bn(x, 3, 16, 3, 2, 2, 1, "HardSwish");   // 80
    x = b.mobile_block(x, 16, 3, 16, 16, false, "Relu", 1, 1);
    x = b.mobile_block(x, 16, 3, 64, 24, false, "Relu", 2, 2);   // 40: C2
    NodeId c2 = b.mobile_block(x, 24, 3, 72, 24, false, "Relu", 1, 1);
    x = b.mobile_block(c2, 24, 5, 72, 40, true, "Relu", 2, 2);   // 20: C3
    NodeId c3 = b.mobile_block(x, 40, 5, 120, 40, true, "Relu", 1, 1);
    x = b.mobile_block(c3, 40, 3, 240, 80, false, "HardSwish", 2, 2);   // 10: C4
    x = b.mobile_block(x, 80, 3, 200, 80, false, "HardSwish", 1, 1);
    NodeId c4 = b.mobile_block(x, 80, 3, 480, 112, true, "HardSwish", 1, 1);
    x = b.mobile_block(c4, 112, 5, 672, 160, true, "HardSwish", 2, 2);   // 5: C5
    NodeId c5 = b.mobile_block(x, 160, 5, 960, 160, true, "HardSwish", 1, 1);
    // DB's FPN: lateral 1x1 to 96 channels, top-down sums, 3x3 to 24, all up to 1/4, concat.
    const int64_t inner = 96, out = 24;
    NodeId p5 = b.conv(c5, 160, inner, 1, 1, 1, 1, 1, false);
    NodeId p4 = b.op("Add", {b.conv(c4, 112, inner, 1, 1, 1, 1, 1, false), b.upsample(p5, 2)});
    NodeId p3 = b.op("Add", {b.conv(c3, 40, inner, 1, 1, 1, 1, 1, false), b.upsample(p4, 2)});
    NodeId p2 = b.op("Add", {b.conv(c2, 24, inner, 1, 1, 1, 1, 1, false), b.upsample(p3, 2)});
    NodeId f5 = b.upsample(b.conv(p5, inner, out, 3, 3, 1, 1, 1, false), 8);
    NodeId f4 = b.upsample(b.conv(p4, inner, out, 3, 3, 1, 1, 1, false), 4);
    NodeId f3 = b.upsample(b.conv(p3, inner, out, 3, 3, 1, 1, 1, false), 2);
    NodeId f2 = b.conv(p2, inner, out, 3, 3, 1, 1, 1, false);
    NodeId fused = b.op("Concat", {f5, f4, f3, f2});
    b.integer(fused, "axis", 1);
    // DB head: 3x3 conv, two 2x2 stride-2 ConvTransposes back to full size, Sigmoid.
    NodeId h = b.conv_bn(fused, 4 * out, out, 3, 1, 1, 1, "Relu");
    NodeId up = b.op("ConvTranspose", {h, b.random({out, out, 2, 2}, 0.5f), b.random({out}, 0.1f)});
    b.ints(up, "strides", {2, 2});
    h = b.activation(b.batch_norm(up, out), "Relu");
    NodeId map = b.op("ConvTranspose", {h, b.random({out, 1, 2, 2}, 0.5f), b.random({1}, 0.1f)});
    b.ints(map, "strides", {2, 2});
    b.output("probability_map", b.op("Sigmoid", {map}));
    return b.status;
}

Status recognizer(Builder& b) {
    NodeId x = b.input("image", {1, 3, 48, 320});
    x = b.conv_bn(x, 3, 32, 3, 2, 2, 1, "HardSwish");   // 24 x 160
    // depthwise-separable blocks: {kernel, out channels, stride h, stride w}
    struct Block { int64_t k, out, sh, sw; };
    const Block blocks[] = {{3, 64, 1, 1},  {3, 128, 2, 2}, {3, 128, 1, 1}, {3, 256, 2, 1}, {3, 256, 1, 1},
                            {3, 512, 2, 2}, {5, 512, 1, 1}, {5, 512, 1, 1}, {5, 512, 1, 1}};   // to 3 x 40
    int64_t channels = 32;
    for (const Block& k : blocks) {
        x = b.conv_bn(x, channels, channels, k.k, k.sh, k.sw, channels, "HardSwish");
        x = b.conv_bn(x, channels, k.out, 1, 1, 1, 1, "HardSwish");
        channels = k.out;
    }
    NodeId pooled = b.op("AveragePool", {x});
    b.ints(pooled, "kernel_shape", {3, 1});
    b.ints(pooled, "strides", {3, 1});   // 1 x 40
    const int64_t dim = 120, heads = 8, classes = 6625;
    NodeId neck = b.conv_bn(pooled, channels, dim, 1, 1, 1, 1, "swish");
    NodeId sequence = b.transpose(b.op("Reshape", {neck, b.shape({0, 0, -1})}), {0, 2, 1});   // [1, 40, 120]
    for (int i = 0; i < 2; ++i) sequence = b.transformer_block(sequence, dim, heads);
    NodeId logits = b.linear(b.layer_norm(sequence, dim), dim, classes);
    NodeId probs = b.op("Softmax", {logits});
    b.integer(probs, "axis", -1);
    b.output("probabilities", probs);
    return b.status;
}

// Runs `model` on `device` with a seeded input; false (with a message) on any failure.
bool run(const Model& model, const char* device, std::vector<float>* out) {
    Core core;
    CompiledModel compiled;
    InferRequest request;
    if (core.compile_model(model, device, {}, &compiled) != Status::Ok || compiled.create_request(&request) != Status::Ok) {
        std::fprintf(stderr, "ocr_models: %s: %s\n", device, core.last_error());
        return false;
    }
    uint32_t seed = 99;
    float* input = request.input(0).data_as<float>();
    for (uint64_t i = 0; i < request.input(0).elements(); ++i) {
        seed = seed * 1664525u + 1013904223u;
        input[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
    if (request.infer() != Status::Ok) {
        std::fprintf(stderr, "ocr_models: %s: %s\n", device, request.last_error());
        return false;
    }
    const Tensor& y = request.output(0);
    out->assign(y.data_as<float>(), y.data_as<float>() + y.elements());
    return true;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || (argc == 3 && std::strcmp(argv[2], "--check")) || argc > 3) {
        std::fprintf(stderr, "usage: ocr_models DIR [--check]\n");
        return 2;
    }
    bool check = argc == 3;
    struct Entry { const char* name; Status (*build)(Builder&); };
    const Entry entries[] = {{"ocr_cls", classifier}, {"ocr_det", detector}, {"ocr_rec", recognizer}};
    int failures = 0;
    for (const Entry& e : entries) {
        Builder b;
        b.model.opset = 17;
        if (e.build(b) != Status::Ok || b.model.finalize() != Status::Ok) {
            std::fprintf(stderr, "ocr_models: %s: %s\n", e.name, b.model.last_error());
            return 1;
        }
        std::string path = std::string(argv[1]) + "/" + e.name + ".onnx";
        std::FILE* file = std::fopen(path.c_str(), "wb");
        Status s = file ? write_onnx(b.model, [](void* user, const char* data, size_t size) {
            std::fwrite(data, 1, size, static_cast<std::FILE*>(user));
        }, file) : Status::InvalidArgument;
        if (!file || std::fclose(file) != 0 || s != Status::Ok) {
            std::fprintf(stderr, "ocr_models: cannot write %s\n", path.c_str());
            return 1;
        }
        std::printf("wrote %s (%u nodes)\n", path.c_str(), b.model.graph.node_count());
        if (!check) continue;
        // CPU (fused, JIT) against TEMPLATE (reference kernels): same model, same input.
        std::vector<float> cpu, reference;
        if (!run(b.model, "CPU", &cpu) || !run(b.model, "TEMPLATE", &reference) || cpu.size() != reference.size()) {
            ++failures;
            continue;
        }
        double worst = 0;
        size_t bad = 0;
        for (size_t i = 0; i < cpu.size(); ++i) {
            double err = std::fabs((double)cpu[i] - reference[i]);
            if (!(err <= 1e-4 + 1e-3 * std::fabs((double)reference[i]))) ++bad;
            if (!(err <= worst)) worst = err;
        }
        std::printf("%s: CPU against TEMPLATE over %zu outputs: max abs error %.3g, %zu outside 1e-4 + 1e-3 |want|\n", e.name,
                    cpu.size(), worst, bad);
        if (bad) ++failures;
    }
    return failures ? 1 : 0;
}
