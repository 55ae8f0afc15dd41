// Builds a MobileNet-v3-style block in code, saves it as ONNX, reads it back and runs it on
// HETERO:TEMPLATE,CPU (TEMPLATE takes the convolutions, CPU the rest, fused):
//   x[1,16,56,56] -> Conv1x1 16->64 + BatchNorm + Clip(0,6)
//                 -> depthwise Conv3x3 + BatchNorm + HardSwish
//                 -> Conv1x1 64->16 + BatchNorm -> Add(x)
//                 -> GlobalAveragePool -> Flatten -> Gemm 16->10 -> Softmax
//   mobilenet_block [FILE.onnx]      (saves the ONNX file when a path is given)
// `make demo` runs it, then `tessel run` on the file it writes.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"

#include <cstdio>
#include <vector>

using namespace tessel;

namespace {
uint32_t g_seed = 12345;
float next_random() {   // deterministic weights in [-0.5, 0.5)
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) / 16777216.0f - 0.5f;
}

TensorDesc desc(std::initializer_list<int64_t> dims) {
    TensorDesc d;
    d.type = ElementType::Float32;
    d.rank = (uint8_t)dims.size();
    int i = 0;
    for (int64_t x : dims) d.dims[i++] = x;
    return d;
}

#define CHECK_OK(expression)                                                        \
    do {                                                                            \
        if ((expression) != Status::Ok) {                                           \
            std::fprintf(stderr, "mobilenet_block: %s\n", model.last_error());      \
            return 1;                                                               \
        }                                                                           \
    } while (0)

// A constant of random values (scaled) named `name`.
Status weights(Model& model, const char* name, TensorDesc d, float scale, float offset, NodeId* id) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < d.rank; ++i) n *= (uint64_t)d.dims[i];
    std::vector<float> w(n);
    for (float& x : w) x = next_random() * scale + offset;
    return model.add_constant(name, d, w.data(), id);
}

// Conv + BatchNormalization; returns the BN node.
Status conv_bn(Model& model, const char* name, NodeId input, int64_t in_channels, int64_t out_channels, int64_t kernel,
               int64_t group, NodeId* out) {
    char n[64];
    NodeId w, b, scale, bias, mean, var, conv;
    std::snprintf(n, sizeof n, "%s.weight", name);
    Status s = weights(model, n, desc({out_channels, in_channels / group, kernel, kernel}), 0.6f, 0.0f, &w);
    std::snprintf(n, sizeof n, "%s.bias", name);
    if (s == Status::Ok) s = weights(model, n, desc({out_channels}), 0.1f, 0.0f, &b);
    InputRef in[] = {InputRef::by_id(input), InputRef::by_id(w), InputRef::by_id(b)};
    if (s == Status::Ok) s = model.add_node("Conv", name, in, 1, &conv);
    int64_t pads[] = {kernel / 2, kernel / 2, kernel / 2, kernel / 2};
    int64_t kernel_shape[] = {kernel, kernel};
    if (s == Status::Ok) s = model.set_ints(conv, "pads", pads);
    if (s == Status::Ok) s = model.set_ints(conv, "kernel_shape", kernel_shape);
    if (s == Status::Ok) s = model.set_int(conv, "group", group);
    std::snprintf(n, sizeof n, "%s.bn_scale", name);
    if (s == Status::Ok) s = weights(model, n, desc({out_channels}), 0.2f, 1.0f, &scale);
    std::snprintf(n, sizeof n, "%s.bn_bias", name);
    if (s == Status::Ok) s = weights(model, n, desc({out_channels}), 0.2f, 0.0f, &bias);
    std::snprintf(n, sizeof n, "%s.bn_mean", name);
    if (s == Status::Ok) s = weights(model, n, desc({out_channels}), 0.2f, 0.0f, &mean);
    std::snprintf(n, sizeof n, "%s.bn_var", name);
    if (s == Status::Ok) s = weights(model, n, desc({out_channels}), 0.2f, 1.0f, &var);
    InputRef bn_in[] = {InputRef::by_id(conv), InputRef::by_id(scale), InputRef::by_id(bias), InputRef::by_id(mean),
                        InputRef::by_id(var)};
    std::snprintf(n, sizeof n, "%s.bn", name);
    if (s == Status::Ok) s = model.add_node("BatchNormalization", n, bn_in, 1, out);
    return s;
}

void write_file(void* user, const char* data, size_t size) { std::fwrite(data, 1, size, static_cast<std::FILE*>(user)); }
}  // namespace

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : nullptr;
    Model model;
    model.opset = 14;
    NodeId x, expand, relu6, depthwise, hswish, project, add, pool, flat, fc_w, fc_b, fc, softmax, lo, hi;
    CHECK_OK(model.add_input("x", desc({1, 16, 56, 56}), &x));
    CHECK_OK(conv_bn(model, "expand", x, 16, 64, 1, 1, &expand));
    float zero = 0, six = 6;
    CHECK_OK(model.add_constant("zero", desc({}), &zero, &lo));
    CHECK_OK(model.add_constant("six", desc({}), &six, &hi));
    InputRef clip_in[] = {InputRef::by_id(expand), InputRef::by_id(lo), InputRef::by_id(hi)};
    CHECK_OK(model.add_node("Clip", "relu6", clip_in, 1, &relu6));
    CHECK_OK(conv_bn(model, "depthwise", relu6, 64, 64, 3, 64, &depthwise));
    InputRef hs_in[] = {InputRef::by_id(depthwise)};
    CHECK_OK(model.add_node("HardSwish", "hardswish", hs_in, 1, &hswish));
    CHECK_OK(conv_bn(model, "project", hswish, 64, 16, 1, 1, &project));
    InputRef add_in[] = {InputRef::by_id(project), InputRef::by_id(x)};
    CHECK_OK(model.add_node("Add", "residual", add_in, 1, &add));
    InputRef pool_in[] = {InputRef::by_id(add)};
    CHECK_OK(model.add_node("GlobalAveragePool", "pool", pool_in, 1, &pool));
    InputRef flat_in[] = {InputRef::by_id(pool)};
    CHECK_OK(model.add_node("Flatten", "flatten", flat_in, 1, &flat));
    CHECK_OK(weights(model, "fc.weight", desc({10, 16}), 1.0f, 0.0f, &fc_w));
    CHECK_OK(weights(model, "fc.bias", desc({10}), 0.2f, 0.0f, &fc_b));
    InputRef fc_in[] = {InputRef::by_id(flat), InputRef::by_id(fc_w), InputRef::by_id(fc_b)};
    CHECK_OK(model.add_node("Gemm", "fc", fc_in, 1, &fc));
    CHECK_OK(model.set_int(fc, "transB", 1));
    InputRef sm_in[] = {InputRef::by_id(fc)};
    CHECK_OK(model.add_node("Softmax", "softmax", sm_in, 1, &softmax));
    CHECK_OK(model.add_output("probabilities", InputRef::by_id(softmax)));
    CHECK_OK(model.finalize());

    std::vector<char> bytes;   // the ONNX file, in memory
    Status s = write_onnx(model, [](void* user, const char* data, size_t size) {
        static_cast<std::vector<char>*>(user)->insert(static_cast<std::vector<char>*>(user)->end(), data, data + size);
    }, &bytes);
    if (s != Status::Ok) { std::fprintf(stderr, "mobilenet_block: cannot write ONNX\n"); return 1; }
    if (path) {
        std::FILE* file = std::fopen(path, "wb");
        if (!file || std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size() || std::fclose(file) != 0) {
            std::fprintf(stderr, "mobilenet_block: cannot write %s\n", path);
            return 1;
        }
        std::printf("wrote %s (%zu bytes, %u nodes)\n", path, bytes.size(), model.graph.node_count());
    }

    // Read it back and run it on HETERO: TEMPLATE takes the convolutions, CPU the rest.
    Model loaded;
    if (loaded.read_onnx(bytes.data(), bytes.size()) != Status::Ok) {
        std::fprintf(stderr, "mobilenet_block: %s\n", loaded.last_error());
        return 1;
    }
    Core core;
    CompiledModel compiled;
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Conv"}, {"PERF_COUNT", "YES"}};
    if (core.compile_model(loaded, "HETERO:TEMPLATE,CPU", config, &compiled) != Status::Ok) {
        std::fprintf(stderr, "mobilenet_block: %s\n", core.last_error());
        return 1;
    }
    compiled.write_summary(write_file, stdout);
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return 1;
    float* input = request.input(0).data_as<float>();
    for (uint64_t i = 0; i < request.input(0).elements(); ++i) input[i] = next_random();
    if (request.infer() != Status::Ok) { std::fprintf(stderr, "mobilenet_block: %s\n", request.last_error()); return 1; }
    const float* p = request.output(0).data_as<float>();
    float sum = 0;
    std::printf("probabilities:");
    for (int i = 0; i < 10; ++i) { std::printf(" %.4f", p[i]); sum += p[i]; }
    std::printf("\n");
    uint64_t per_device[2] = {0, 0};
    for (const ProfileEntry& e : request.profiling_info()) per_device[e.device == StringView("TEMPLATE") ? 0 : 1] += e.ns;
    std::printf("time: TEMPLATE %.1f us, CPU %.1f us\n", (double)per_device[0] / 1000, (double)per_device[1] / 1000);
    return sum > 0.999f && sum < 1.001f ? 0 : 1;
}
