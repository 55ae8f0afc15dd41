// Conv through the CPU device, per shape class of the real models (OCR detector and recognizer,
// ResNet-50, SqueezeNet, VGG; depthwise convs of the OCR nets and of 7^2 maps): Conv + bias
// alone, Conv + bias + Relu and Conv + bias + a residual Add + Relu (fused epilogues where the
// device fuses them), at 1 and 2 threads, in microseconds, GFLOP/s and share of the FMA peak
// measured in the same run (best of many runs: other processes share the cores).
// Only the public API: it builds against older headers too, for before/after figures.
//   build/bench/conv [ISA [NAME]]  (ISA: avx2, avx512, neon; default as TESSEL_ISA; NAME: only the
//                                  shapes whose name contains it)
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tessel;

namespace {
struct Shape { const char* name; int64_t cin, cout, h, w, k, stride, pad, group = 1; };

TensorDesc float_desc(std::initializer_list<int64_t> dims) {
    TensorDesc d;
    d.type = ElementType::Float32;
    for (int64_t v : dims) d.dims[d.rank++] = v;
    return d;
}

// The best time of one inference of Conv (tail 1: + Relu; 2: + a residual input, then Relu) on
// the CPU device.
double conv_seconds(const Shape& s, int tail, uint32_t threads, const char* isa) {
    const int64_t oh = (s.h + 2 * s.pad - s.k) / s.stride + 1, ow = (s.w + 2 * s.pad - s.k) / s.stride + 1;
    Model model;
    NodeId x, w, b, y, r;
    std::vector<float> weights((size_t)(s.cout * s.cin / s.group * s.k * s.k), 0.01f), bias((size_t)s.cout, 0.5f);
    if (model.add_input("x", float_desc({1, s.cin, s.h, s.w}), &x) != Status::Ok ||
        model.add_constant("w", float_desc({s.cout, s.cin / s.group, s.k, s.k}), weights.data(), &w) != Status::Ok ||
        model.add_constant("b", float_desc({s.cout}), bias.data(), &b) != Status::Ok)
        return 0;
    InputRef in[] = {InputRef::by_id(x), InputRef::by_id(w), InputRef::by_id(b)};
    if (model.add_node("Conv", "conv", in, 1, &y) != Status::Ok) return 0;
    const int64_t strides[] = {s.stride, s.stride}, pads[] = {s.pad, s.pad, s.pad, s.pad};
    if (model.set_ints(y, "strides", Span<const int64_t>(strides, 2)) != Status::Ok ||
        model.set_ints(y, "pads", Span<const int64_t>(pads, 4)) != Status::Ok || model.set_int(y, "group", s.group) != Status::Ok)
        return 0;
    if (tail == 2) {
        if (model.add_input("r", float_desc({1, s.cout, oh, ow}), &r) != Status::Ok) return 0;
        InputRef add[] = {InputRef::by_id(y), InputRef::by_id(r)};
        if (model.add_node("Add", "add", add, 1, &y) != Status::Ok) return 0;
    }
    if (tail > 0) {
        InputRef yin[] = {InputRef::by_id(y)};
        if (model.add_node("Relu", "relu", yin, 1, &y) != Status::Ok) return 0;
    }
    if (model.add_output("y", InputRef::by_id(y)) != Status::Ok || model.finalize() != Status::Ok) return 0;
    Core core;
    CompiledModel compiled;
    std::string t = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(t.c_str())}, {"ISA", StringView(isa)}};
    if (core.compile_model(model, "CPU", config, &compiled) != Status::Ok) { std::fprintf(stderr, "%s\n", core.last_error()); return 0; }
    InferRequest request;
    if (compiled.create_request(&request) != Status::Ok) return 0;
    for (uint32_t i = 0; i < (tail == 2 ? 2u : 1u); ++i) {
        float* input = request.input(i).data_as<float>();
        std::fill(input, input + request.input(i).elements(), i ? -0.25f : 0.5f);
    }
    if (request.infer() != Status::Ok) return 0;
    double best = 1e30;
    for (int run = 0; run < 40; ++run) {
        auto start = std::chrono::steady_clock::now();
        (void)request.infer();
        best = std::min(best, bench::seconds_since(start));
    }
    return best;
}
}  // namespace

int main(int argc, char** argv) {
    Isa isa = default_isa();
    if (argc > 1 && (parse_isa(StringView(argv[1]), &isa) != Status::Ok || !isa_available(isa))) {
        std::fprintf(stderr, "bench/conv: unknown or unavailable ISA %s\n", argv[1]);
        return 2;
    }
    const double peak = bench::fma_peak(isa);
    std::printf("isa=%s fma_peak=%.1f GFLOP/s (one thread)\n", isa_name(isa), peak);
    std::printf("%-24s %7s %8s %7s %6s %9s %13s %8s %7s\n", "conv", "MFLOP", "1t us", "GFLOP/s", "/peak", "+Relu us",
                "+Add+Relu us", "2t us", "2t/1t");
    const Shape shapes[] = {
        {"det 96->24 3x3 40^2", 96, 24, 40, 40, 3, 1, 1},     {"det 3->16 3x3/2 160^2", 3, 16, 160, 160, 3, 2, 1},
        {"det 16->64 1x1 80^2", 16, 64, 80, 80, 1, 1, 0},     {"rec 32->64 1x1 24x160", 32, 64, 24, 160, 1, 1, 0},
        {"squeeze 3->64 3x3/2", 3, 64, 224, 224, 3, 2, 0},    {"squeeze 64->16 1x1 55^2", 64, 16, 55, 55, 1, 1, 0},
        {"squeeze 16->64 1x1 55^2", 16, 64, 55, 55, 1, 1, 0}, {"squeeze 16->64 3x3 55^2", 16, 64, 55, 55, 3, 1, 1},
        {"squeeze 32->128 3x3 27^2", 32, 128, 27, 27, 3, 1, 1}, {"squeeze 64->256 3x3 13^2", 64, 256, 13, 13, 3, 1, 1},
        {"r50 3->64 7x7/2 224^2", 3, 64, 224, 224, 7, 2, 3},  {"r50 64->64 3x3 56^2", 64, 64, 56, 56, 3, 1, 1},
        {"r50 64->64 1x1 56^2", 64, 64, 56, 56, 1, 1, 0},     {"r50 256->64 1x1 56^2", 256, 64, 56, 56, 1, 1, 0},
        {"r50 64->256 1x1 56^2", 64, 256, 56, 56, 1, 1, 0},   {"r50 128->128 3x3 28^2", 128, 128, 28, 28, 3, 1, 1},
        {"r50 256->256 3x3 14^2", 256, 256, 14, 14, 3, 1, 1}, {"r50 512->512 3x3 7^2", 512, 512, 7, 7, 3, 1, 1},
        {"r50 128->128 3x3/2 28^2", 128, 128, 56, 56, 3, 2, 1}, {"r50 256->256 3x3/2 14^2", 256, 256, 28, 28, 3, 2, 1},
        {"r50 512->512 3x3/2 7^2", 512, 512, 14, 14, 3, 2, 1},
        {"r50 256->512 1x1/2 28^2", 256, 512, 56, 56, 1, 2, 0}, {"r50 256->1024 1x1 14^2", 256, 1024, 14, 14, 1, 1, 0},
        {"r50 1024->256 1x1 14^2", 1024, 256, 14, 14, 1, 1, 0}, {"r50 512->2048 1x1 7^2", 512, 2048, 7, 7, 1, 1, 0},
        {"r50 2048->512 1x1 7^2", 2048, 512, 7, 7, 1, 1, 0},
        {"vgg 512->512 3x3 28^2", 512, 512, 28, 28, 3, 1, 1},
        {"det dw 16 3x3 80^2", 16, 16, 80, 80, 3, 1, 1, 16},       {"det dw 64 3x3/2 80^2", 64, 64, 80, 80, 3, 2, 1, 64},
        {"rec dw 128 3x3 12x80", 128, 128, 12, 80, 3, 1, 1, 128}, {"rec dw 256 3x3/2 6x80", 256, 256, 6, 80, 3, 2, 1, 256},
        {"rec dw 512 5x5 3x40", 512, 512, 3, 40, 5, 1, 2, 512},    {"dw 464 3x3 7^2", 464, 464, 7, 7, 3, 1, 1, 464},
    };
    for (const Shape& s : shapes) {
        if (argc > 2 && !std::strstr(s.name, argv[2])) continue;
        const int64_t oh = (s.h + 2 * s.pad - s.k) / s.stride + 1, ow = (s.w + 2 * s.pad - s.k) / s.stride + 1;
        const double flops = 2.0 * (double)s.cout * (double)(s.cin / s.group * s.k * s.k) * (double)(oh * ow);
        const double t1 = conv_seconds(s, 0, 1, isa_name(isa)), tr = conv_seconds(s, 1, 1, isa_name(isa));
        const double ta = conv_seconds(s, 2, 1, isa_name(isa)), t2 = conv_seconds(s, 0, 2, isa_name(isa));
        std::printf("%-24s %7.1f %8.1f %7.1f %6.2f %9.1f %13.1f %8.1f %7.2f\n", s.name, flops * 1e-6, t1 * 1e6,
                    flops / t1 * 1e-9, flops / t1 * 1e-9 / peak, tr * 1e6, ta * 1e6, t2 * 1e6, t1 / t2);
    }
    return 0;
}
