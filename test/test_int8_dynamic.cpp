// Dynamically quantized models (onnxruntime's quantize_dynamic: DynamicQuantizeLinear ->
// MatMulInteger or ConvInteger -> Cast -> Mul) on the CPU device, on the target from TESSEL_ISA, 1 and 2 threads:
// MatMulInteger with a constant B (int8 or uint8, zero point absent, one or one per column; A
// uint8 or int8 with one zero point, given at run time) bit for bit against the exact integer
// sums done here (wrapping int32), across tails of M, K and N, batch dims, and K long enough that
// its sums pass 2^24 (the float GEMM path then sums K in blocks); ConvInteger with a constant w
// (int8 or uint8, zero points absent, one or per map, fitting int8 or not) against a direct loop
// over 1x1, padded, strided, dilated, grouped, 1-D and 3-D windows; DynamicQuantizeLinear's three
// outputs bit for bit against the reference kernel (NaN, infinities, signed zeros, ties, every
// tail of a vector); Cast int32 -> float32 against C++'s conversion.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

// The JIT GEMM runs on the default target (else MatMulInteger stays on the reference).
bool gemm_jit() {
    Gemm g;
    return g.init() == Status::Ok && g.jit();
}

struct MatMulIntegerCase {
    Shape a;                       // [..., M, K]
    int64_t n = 0;
    ElementType a_type = ElementType::UInt8, b_type = ElementType::Int8;
    int b_zero_points = 0;         // 0: absent, 1: one, 2: one per column
    bool a_zero_point = true;
    bool extreme = false;          // A at its largest distance from its zero point, B at its most negative
    bool narrow = false;           // B - zb within [-64, 64] (AVX2's byte-pair tiles)
};

template <class T>
std::vector<T> random_bytes(size_t n, std::mt19937& rng) {
    std::vector<T> v(n);
    for (T& x : v) x = (T)(rng() & 0xFF);
    return v;
}

void check_matmul_integer(const MatMulIntegerCase& cc, uint32_t threads) {
    std::mt19937 rng(7u + (uint32_t)cc.n);
    const int64_t k = cc.a.back(), n = cc.n;
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < cc.a.size(); ++d) rows *= cc.a[d];
    const bool a_signed = cc.a_type == ElementType::Int8, b_signed = cc.b_type == ElementType::Int8;
    std::vector<uint8_t> a = random_bytes<uint8_t>((size_t)(rows * k), rng), b = random_bytes<uint8_t>((size_t)(k * n), rng);
    std::vector<uint8_t> zb = random_bytes<uint8_t>(cc.b_zero_points == 2 ? (size_t)n : 1, rng);
    uint8_t za = (uint8_t)(rng() & 0xFF);
    if (cc.extreme) {   // A - za = 255 (or -255 for int8: -128 - 127), B - zb = -128 or -255
        za = a_signed ? (uint8_t)127 : 0;
        for (uint8_t& x : a) x = a_signed ? (uint8_t)0x80 : 255;
        for (uint8_t& x : b) x = b_signed ? (uint8_t)0x80 : 0;
        for (uint8_t& z : zb) z = b_signed ? 0 : 255;
    }
    if (cc.narrow)
        for (uint8_t& x : b) x = (uint8_t)(int8_t)((int)(x % 129) - 64);
    auto value = [](uint8_t byte, bool is_signed) { return is_signed ? (int32_t)(int8_t)byte : (int32_t)byte; };
    // the path the CPU should take: Int8Gemm's tiles where every B - zb fits int8, else the float GEMM
    bool fits = true;
    for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) {
            const int32_t zbv = cc.b_zero_points ? value(zb[cc.b_zero_points == 2 ? (size_t)j : 0], b_signed) : 0;
            const int32_t w = value(b[(size_t)(p * n + j)], b_signed) - zbv;
            fits = fits && w >= -128 && w <= 127;
        }
    OpTest t;
    t.opset = 13;
    std::vector<InputRef> in = {t.input<uint8_t>(cc.a, a, cc.a_type), t.constant<uint8_t>(Shape{k, n}, b, cc.b_type)};
    in.push_back(cc.a_zero_point ? t.input<uint8_t>(Shape{}, std::vector<uint8_t>{za}, cc.a_type) : t.absent());
    if (cc.b_zero_points) in.push_back(t.constant<uint8_t>(cc.b_zero_points == 2 ? Shape{n} : Shape{}, zb, cc.b_type));
    t.op("MatMulInteger", in);
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, true);
    INFO(run.kernels);
    CAPTURE(fits);
    const bool int8 = fits && default_isa() != Isa::Ref, gemm = !int8 && gemm_jit();
    CHECK((run.kernels.find("int8:") != std::string::npos) == int8);
    CHECK((run.kernels.find("gemm:") != std::string::npos) == gemm);
    CHECK(run.kernels.find(":MatMulInteger") != std::string::npos);
    if (int8) {   // Y's rows straight from the pixel tiles where the CPU has AVX-512's (VNNI and VBMI)
        Int8Gemm pixels;
        const bool want = pixels.init(default_isa(), true, false) == Status::Ok && pixels.runs_pixels() &&
                          pixels.prepare_pixel_sums() == Status::Ok;
        CHECK((run.kernels.find(":MatMulInteger+pixels") != std::string::npos) == want);
    }
    REQUIRE(run.bytes.size() == (size_t)(rows * n) * 4);
    std::vector<int32_t> y((size_t)(rows * n));
    std::memcpy(y.data(), run.bytes.data(), run.bytes.size());
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) {
            uint32_t sum = 0;   // wraps, as int32 arithmetic does in the spec's reference
            const int32_t zbv = cc.b_zero_points ? value(zb[cc.b_zero_points == 2 ? (size_t)j : 0], b_signed) : 0;
            const int32_t zav = cc.a_zero_point ? value(za, a_signed) : 0;
            for (int64_t p = 0; p < k; ++p)
                sum += (uint32_t)((value(a[(size_t)(i * k + p)], a_signed) - zav) * (value(b[(size_t)(p * n + j)], b_signed) - zbv));
            if (y[(size_t)(i * n + j)] != (int32_t)sum && bad++ < 5)
                MESSAGE("y[" << i << "][" << j << "] = " << y[(size_t)(i * n + j)] << ", want " << (int32_t)sum);
        }
    CHECK(bad == 0);
}

struct ConvIntegerCase {
    Shape x, w;                    // N x C x spatial; maps x C / group x kernel
    std::vector<int64_t> strides, pads, dilations;
    int64_t group = 1;
    ElementType x_type = ElementType::UInt8, w_type = ElementType::Int8;
    int w_zero_points = 0;         // 0: absent, 1: one, 2: one per map
    bool x_zero_point = true;
    bool extreme = false;          // x at 255 and w - zw at -128 or -255 (the pairs' int16 limits)
    uint8_t w_zero = 0;            // the zero points' value (per map: this plus the map)
    bool depthwise = false;        // on the float depthwise kernels (else Int8Gemm's tiles)
    int implicit = -1;             // 1: on the implicit path (no im2col), 0: not, -1: either
};

// The exact ConvInteger output (wrapping int32), a direct loop over the window.
std::vector<int32_t> conv_integer_oracle(const ConvIntegerCase& cc, const std::vector<uint8_t>& x, const std::vector<uint8_t>& w,
                                         uint8_t zx, const std::vector<uint8_t>& zw, const Shape& y_shape) {
    const int spatial = (int)cc.x.size() - 2;
    const bool xs = cc.x_type == ElementType::Int8, ws = cc.w_type == ElementType::Int8;
    auto value = [](uint8_t b, bool s) { return s ? (int32_t)(int8_t)b : (int32_t)b; };
    int64_t in_plane = 1, out_plane = 1, taps = 1;
    for (int d = 0; d < spatial; ++d) in_plane *= cc.x[2 + d], out_plane *= y_shape[2 + d], taps *= cc.w[2 + d];
    const int64_t maps = cc.w[0], gc = cc.w[1], group_maps = maps / cc.group;
    std::vector<int32_t> y((size_t)(cc.x[0] * maps * out_plane));
    for (int64_t n = 0; n < cc.x[0]; ++n)
        for (int64_t m = 0; m < maps; ++m)
            for (int64_t p = 0; p < out_plane; ++p) {
                const int32_t zwv = cc.w_zero_points ? value(zw[cc.w_zero_points == 2 ? (size_t)m : 0], ws) : 0;
                const int32_t zxv = cc.x_zero_point ? value(zx, xs) : 0;
                uint32_t sum = 0;
                for (int64_t ci = 0; ci < gc; ++ci)
                    for (int64_t t = 0; t < taps; ++t) {
                        int64_t o = p, tt = t, at = 0;
                        bool inside = true;
                        for (int d = spatial - 1; d >= 0; --d) {   // the tap's input position, dimension by dimension
                            const int64_t od = o % y_shape[2 + d], kd = tt % cc.w[2 + d];
                            o /= y_shape[2 + d], tt /= cc.w[2 + d];
                            const int64_t stride = cc.strides.empty() ? 1 : cc.strides[(size_t)d];
                            const int64_t dil = cc.dilations.empty() ? 1 : cc.dilations[(size_t)d];
                            const int64_t pad = cc.pads.empty() ? 0 : cc.pads[(size_t)d];
                            const int64_t i = od * stride - pad + kd * dil;
                            inside = inside && i >= 0 && i < cc.x[2 + d];
                            int64_t scale = 1;
                            for (int e = d + 1; e < spatial; ++e) scale *= cc.x[2 + e];
                            at += i * scale;
                        }
                        if (!inside) continue;   // x - zx padded with zeros
                        const int64_t c = m / group_maps * gc + ci;
                        const int32_t xv = value(x[(size_t)((n * cc.x[1] + c) * in_plane + at)], xs) - zxv;
                        const int32_t wv = value(w[(size_t)((m * gc + ci) * taps + t)], ws) - zwv;
                        sum += (uint32_t)(xv * wv);
                    }
                y[(size_t)((n * maps + m) * out_plane + p)] = (int32_t)sum;
            }
    return y;
}

void check_conv_integer(const ConvIntegerCase& cc, uint32_t threads) {
    std::mt19937 rng(5u + (uint32_t)cc.w[0] * 7u + (uint32_t)cc.x.back());
    int64_t xn = 1, wn = 1;
    for (int64_t d : cc.x) xn *= d;
    for (int64_t d : cc.w) wn *= d;
    const int64_t maps = cc.w[0];
    std::vector<uint8_t> x = random_bytes<uint8_t>((size_t)xn, rng), w = random_bytes<uint8_t>((size_t)wn, rng);
    std::vector<uint8_t> zw(cc.w_zero_points == 2 ? (size_t)maps : 1);
    for (size_t m = 0; m < zw.size(); ++m) zw[m] = (uint8_t)(cc.w_zero + m);
    uint8_t zx = (uint8_t)(rng() & 0xFF);
    const bool ws = cc.w_type == ElementType::Int8;
    if (cc.extreme) {
        zx = 0;
        for (uint8_t& v : x) v = 255;
        for (uint8_t& v : w) v = ws ? (uint8_t)0x80 : 0;
        for (uint8_t& z : zw) z = ws ? 0 : 255;
    }
    OpTest t;
    t.opset = 13;
    std::vector<InputRef> in = {t.input<uint8_t>(cc.x, x, cc.x_type), t.constant<uint8_t>(cc.w, w, cc.w_type)};
    in.push_back(cc.x_zero_point ? t.input<uint8_t>(Shape{}, std::vector<uint8_t>{zx}, cc.x_type) : t.absent());
    if (cc.w_zero_points) in.push_back(t.constant<uint8_t>(cc.w_zero_points == 2 ? Shape{maps} : Shape{}, zw, cc.w_type));
    t.op("ConvInteger", in);
    if (cc.group != 1) t.set_int("group", cc.group);
    if (!cc.strides.empty()) t.set_ints("strides", cc.strides);
    if (!cc.dilations.empty()) t.set_ints("dilations", cc.dilations);
    if (!cc.pads.empty()) {
        std::vector<int64_t> pads = cc.pads;   // the same before and after
        pads.insert(pads.end(), cc.pads.begin(), cc.pads.end());
        t.set_ints("pads", pads);
    }
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, true);
    INFO(run.kernels);
    // uint8 x on every target but ref takes Int8Gemm's tiles; an int8 x stays on the reference
    const bool int8 = cc.x_type == ElementType::UInt8 && default_isa() != Isa::Ref;
    CHECK((run.kernels.find("int8:") != std::string::npos) == int8);
    CHECK(run.kernels.find(":ConvInteger") != std::string::npos);
    if (int8) CHECK((run.kernels.find(":ConvInteger+depthwise") != std::string::npos) == cc.depthwise);
    if (int8 && cc.implicit >= 0) CHECK((run.kernels.find(":ConvInteger+implicit") != std::string::npos) == (cc.implicit == 1));
    Shape y_shape = {cc.x[0], maps};
    for (size_t d = 2; d < cc.x.size(); ++d) {
        const int64_t stride = cc.strides.empty() ? 1 : cc.strides[d - 2], dil = cc.dilations.empty() ? 1 : cc.dilations[d - 2];
        const int64_t pad = cc.pads.empty() ? 0 : cc.pads[d - 2];
        y_shape.push_back((cc.x[d] + 2 * pad - dil * (cc.w[d] - 1) - 1) / stride + 1);
    }
    const std::vector<int32_t> want = conv_integer_oracle(cc, x, w, zx, zw, y_shape);
    REQUIRE(run.bytes.size() == want.size() * 4);
    std::vector<int32_t> y(want.size());
    std::memcpy(y.data(), run.bytes.data(), run.bytes.size());
    int64_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i)
        if (y[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << y[i] << ", want " << want[i]);
    CHECK(bad == 0);
}

// t's finalized model compiled on CPU (NUM_THREADS, PERF_COUNT=YES, ISA when not null) and
// inferred once: every output's bytes, in order, and the steps' kernels.
test::CpuRun run_all_outputs(OpTest& t, uint32_t threads, const char* isa) {
    std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa ? isa : ""}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, isa ? 3 : 2), &run);
    test::CpuRun r;
    r.kernels = run.kernels;
    for (uint32_t o = 0; o < run.compiled.output_count(); ++o) {
        const Tensor& out = run.request.output(o);
        const unsigned char* b = static_cast<const unsigned char*>(out.data());
        r.bytes.insert(r.bytes.end(), b, b + out.bytes());
    }
    return r;
}

// DynamicQuantizeLinear's outputs (y, scale, zero point) on the CPU at the default target and at ref.
std::vector<unsigned char> dynamic_quantize(const std::vector<float>& x, uint32_t threads, const char* isa, std::string* kernels) {
    OpTest t;
    t.opset = 11;
    t.op("DynamicQuantizeLinear", {t.input(Shape{(int64_t)x.size()}, x)}, 3);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.add_output("scale", InputRef::by_id(t.node, 1)) == Status::Ok);
    REQUIRE(t.model.add_output("zero", InputRef::by_id(t.node, 2)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    test::CpuRun run = run_all_outputs(t, threads, isa);
    *kernels = run.kernels;
    return run.bytes;
}
// MatMulInteger or ConvInteger (w) -> Cast to float -> Mul, on `isa` (nullptr: the default target);
// y_too: the int32 sums a second output. Y's bytes (and the sums') and the kernels.
test::CpuRun run_cast_chain(bool conv, bool depthwise, bool uint8_weights, bool y_too, uint32_t threads, const char* isa) {
    std::mt19937 rng(21);
    OpTest t;
    t.opset = 13;
    const Shape x_shape = conv ? Shape{1, 8, 9, 10} : Shape{37, 52};
    const Shape w_shape = conv ? (depthwise ? Shape{8, 1, 3, 3} : Shape{12, 8, 3, 3}) : Shape{52, 29};
    int64_t xn = 1, wn = 1;
    for (int64_t d : x_shape) xn *= d;
    for (int64_t d : w_shape) wn *= d;
    std::vector<uint8_t> x = random_bytes<uint8_t>((size_t)xn, rng), w = random_bytes<uint8_t>((size_t)wn, rng);
    const ElementType wt = uint8_weights ? ElementType::UInt8 : ElementType::Int8;
    std::vector<InputRef> in = {t.input<uint8_t>(x_shape, x), t.constant<uint8_t>(w_shape, w, wt),
                                t.input<uint8_t>(Shape{}, std::vector<uint8_t>{(uint8_t)(rng() & 0xFF)}),
                                t.constant<uint8_t>(Shape{}, std::vector<uint8_t>{uint8_weights ? (uint8_t)3 : (uint8_t)0}, wt)};
    const NodeId product = t.op(conv ? "ConvInteger" : "MatMulInteger", in);
    if (conv) t.set_ints("pads", {1, 1, 1, 1});
    if (depthwise) t.set_int("group", 8);
    t.op("Cast", {InputRef::by_id(product, 0)});
    t.set_int("to", 1);   // FLOAT
    t.op("Mul", {InputRef::by_id(t.node, 0), t.constant(Shape{}, std::vector<float>{0.37f})});
    if (y_too) REQUIRE(t.model.add_output("sums", InputRef::by_id(product, 0)) == Status::Ok);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    return run_all_outputs(t, threads, isa);
}
}  // namespace

TEST_CASE("int8 dynamic: a Cast to float after MatMulInteger or ConvInteger folds into its step, the same bits") {
    struct Case { bool conv, depthwise, uint8_weights; };
    // the int8 tiles, the float GEMM (uint8 weights past int8's reach), ConvInteger's tiles with
    // and without the per-map offsets, the depthwise kernels
    for (Case cc : {Case{false, false, false}, Case{false, false, true}, Case{true, false, false}, Case{true, false, true},
                    Case{true, true, false}})
        for (bool y_too : {false, true})
            for (uint32_t threads : {1u, 2u}) {
                CAPTURE(cc.conv);
                CAPTURE(cc.depthwise);
                CAPTURE(cc.uint8_weights);
                CAPTURE(y_too);
                CAPTURE(threads);
                const test::CpuRun fast = run_cast_chain(cc.conv, cc.depthwise, cc.uint8_weights, y_too, threads, nullptr);
                const test::CpuRun ref = run_cast_chain(cc.conv, cc.depthwise, cc.uint8_weights, y_too, threads, "ref");
                INFO(fast.kernels);
                // folded where the sums have no other reader and the product runs on Tessel's kernels
                const bool kernels = fast.kernels.find("int8:") != std::string::npos || fast.kernels.find("gemm:") != std::string::npos;
                CHECK(kernels == (default_isa() != Isa::Ref && (cc.conv || !cc.uint8_weights || gemm_jit())));   // the float GEMM's JIT
                CHECK((fast.kernels.find("+Cast") != std::string::npos) == (kernels && !y_too));
                CHECK(ref.kernels.find("+Cast") == std::string::npos);
                REQUIRE(fast.bytes.size() == ref.bytes.size());
                CHECK(fast.bytes == ref.bytes);
            }
}

TEST_CASE("int8 dynamic: MatMulInteger with a constant B equals the exact integer sums") {
    std::vector<MatMulIntegerCase> cases;
    for (Shape a : {Shape{1, 1}, Shape{3, 5}, Shape{17, 64}, Shape{33, 100}, Shape{64, 257}, Shape{200, 70}, Shape{2, 3, 9, 31}, Shape{40}})
        for (int64_t n : {1, 7, 16, 50}) {
            MatMulIntegerCase c;
            c.a = a;
            c.n = n;
            cases.push_back(c);
        }
    for (ElementType at : {ElementType::UInt8, ElementType::Int8})
        for (ElementType bt : {ElementType::Int8, ElementType::UInt8})
            for (int zb : {0, 1, 2})
                for (bool za : {false, true}) {
                    MatMulIntegerCase c;
                    c.a = Shape{19, 70};
                    c.n = 45;
                    c.a_type = at, c.b_type = bt, c.b_zero_points = zb, c.a_zero_point = za;
                    cases.push_back(c);
                }
    {   // several blocks of rows (each block's packed A in half of L2); several chunks of Y's columns (their sums in L2)
        MatMulIntegerCase c;
        c.a = Shape{1000, 2000};
        c.n = 9;
        cases.push_back(c);
        c.a = Shape{200, 70};
        c.n = 2000;
        cases.push_back(c);
    }
    for (Shape a : {Shape{6, 40}, Shape{50, 33}}) {
        MatMulIntegerCase c;
        c.a = a;
        c.n = 21;
        c.narrow = true;
        cases.push_back(c);
    }
    // sums past 2^24: 1100 x 255 x 128 and 600 x 255 x 255 (several blocks of K on the float GEMM)
    for (ElementType bt : {ElementType::Int8, ElementType::UInt8}) {
        MatMulIntegerCase c;
        c.a = Shape{5, bt == ElementType::Int8 ? 1100 : 600};
        c.n = 37;
        c.b_type = bt;
        c.b_zero_points = 1;
        c.extreme = true;
        cases.push_back(c);
        c.a_type = ElementType::Int8;
        cases.push_back(c);
    }
    for (const MatMulIntegerCase& c : cases)
        for (uint32_t threads : {1u, 2u}) {
            std::string dims;
            for (int64_t d : c.a) dims += std::to_string(d) + ",";
            CAPTURE(dims);
            CAPTURE(c.n);
            CAPTURE((int)c.a_type);
            CAPTURE((int)c.b_type);
            CAPTURE(c.b_zero_points);
            CAPTURE(c.a_zero_point);
            CAPTURE(c.extreme);
            CAPTURE(threads);
            check_matmul_integer(c, threads);
        }
}

TEST_CASE("int8 dynamic: MatMulInteger with a zero point per row of A stays on the reference") {
    std::mt19937 rng(3);
    OpTest t;
    t.opset = 13;
    const std::vector<uint8_t> a = random_bytes<uint8_t>(4 * 6, rng), zb{0};
    const std::vector<int8_t> b(6 * 5, 3);
    t.op("MatMulInteger", {t.input(Shape{4, 6}, a), t.constant(Shape{6, 5}, b), t.input(Shape{4}, random_bytes<uint8_t>(4, rng))});
    test::CpuRun run = test::run_last_node_on_cpu(t, 1, true);
    CHECK(run.kernels.find("ref:MatMulInteger") != std::string::npos);
    CHECK(run.kernels.find("int8:") == std::string::npos);
    CHECK(run.kernels.find("gemm:") == std::string::npos);
    REQUIRE(run.bytes.size() == 4 * 5 * 4);
}

TEST_CASE("int8 dynamic: ConvInteger with a constant w equals the exact integer sums") {
    std::vector<ConvIntegerCase> cases;
    auto add = [&](Shape x, Shape w, std::vector<int64_t> strides, std::vector<int64_t> pads, std::vector<int64_t> dilations,
                   int64_t group) {
        ConvIntegerCase c;
        c.x = x, c.w = w, c.strides = strides, c.pads = pads, c.dilations = dilations, c.group = group;
        cases.push_back(c);
        return &cases.back();
    };
    add({1, 16, 9, 11}, {24, 16, 1, 1}, {}, {}, {}, 1)->implicit = 0;   // 1x1: x's planes as B
    add({2, 13, 7, 5}, {37, 13, 1, 1}, {}, {}, {}, 1);               // tails of maps, depth and positions
    add({1, 8, 12, 12}, {16, 8, 3, 3}, {}, {1, 1}, {}, 1)->implicit = 1;   // 3x3 padded (x's zero point in the pads)
    add({1, 5, 9, 10}, {7, 5, 3, 3}, {2, 2}, {1, 1}, {}, 1)->implicit = 0;   // strided, K under 64: im2col
    add({1, 20, 13, 11}, {9, 20, 3, 3}, {2, 2}, {1, 1}, {}, 1)->implicit = 1;   // strided, K 180: phase planes
    add({2, 6, 10, 9}, {11, 6, 3, 3}, {}, {2, 1}, {}, 1)->implicit = 1;   // 2 images, pads of 2 and 1
    add({1, 6, 11, 9}, {9, 6, 3, 2}, {1, 2}, {2, 1}, {2, 1}, 1);     // dilated, uneven kernel and strides
    add({2, 12, 6, 6}, {18, 4, 3, 3}, {}, {1, 1}, {}, 3);            // groups
    add({1, 8, 5, 5}, {8, 1, 3, 3}, {}, {1, 1}, {}, 8)->depthwise = true;          // depthwise (the float kernels)
    add({2, 6, 13, 11}, {12, 1, 5, 5}, {2, 2}, {2, 2}, {}, 6)->depthwise = true;   // depthwise, 2 maps a channel, strided
    {   // depthwise whose sums may pass 2^24 (272 taps of 255 x 255): the GEMM
        ConvIntegerCase* c = add({1, 3, 20, 20}, {3, 1, 16, 17}, {}, {1, 1}, {}, 3);
        c->w_type = ElementType::UInt8, c->w_zero_points = 1;
    }
    add({1, 4, 20}, {6, 4, 5}, {2}, {2}, {}, 1);                     // 1-D
    add({1, 3, 4, 5, 6}, {5, 3, 2, 3, 2}, {}, {1, 0, 1}, {}, 1);     // 3-D
    add({1, 64, 30, 30}, {96, 64, 3, 3}, {}, {1, 1}, {}, 1);         // several blocks of positions, maps in parts at 2 threads
    for (ElementType wt : {ElementType::Int8, ElementType::UInt8})
        for (int zw : {0, 1, 2})
            for (bool zx : {false, true}) {
                ConvIntegerCase* c = add({1, 10, 8, 7}, {21, 10, 3, 3}, {}, {1, 1}, {}, 1);
                c->w_type = wt, c->w_zero_points = zw, c->x_zero_point = zx;
                c->w_zero = wt == ElementType::UInt8 ? 128 : 0;   // uint8 w - 128: A is w - zw (fits int8)
            }
    for (uint8_t w_zero : {uint8_t(0), uint8_t(3), uint8_t(100), uint8_t(250)}) {   // w - zw past int8: the per-map offsets
        ConvIntegerCase* c = add({2, 9, 8, 8}, {19, 9, 3, 3}, {2, 1}, {1, 1}, {}, 1);
        c->w_type = ElementType::UInt8, c->w_zero_points = 2, c->w_zero = w_zero, c->implicit = 0;   // the offsets: im2col
        c = add({1, 40, 6, 6}, {33, 40, 1, 1}, {}, {}, {}, 1);
        c->w_type = ElementType::UInt8, c->w_zero_points = 1, c->w_zero = w_zero;
        c = add({1, 12, 7, 9}, {15, 12, 3, 3}, {}, {1, 1}, {}, 1);
        c->w_type = ElementType::Int8, c->w_zero_points = 2, c->w_zero = (uint8_t)(w_zero - 128);   // int8 w - zw past int8 too
        c = add({1, 16, 9, 9}, {16, 1, 3, 3}, {2, 2}, {1, 1}, {}, 16);   // depthwise, |w - zw| up to 255
        c->w_type = ElementType::UInt8, c->w_zero_points = 2, c->w_zero = w_zero, c->depthwise = true;
    }
    {   // 1x1 over 1600 positions, 80 maps: the maps in chunks whose sums stay in L2, with the offsets
        ConvIntegerCase* c = add({1, 8, 40, 40}, {80, 8, 1, 1}, {}, {}, {}, 1);
        c->w_type = ElementType::UInt8, c->w_zero_points = 1, c->w_zero = 9;
    }
    for (ElementType wt : {ElementType::Int8, ElementType::UInt8}) {   // x - zx = 255 against -128 (-255): no pair saturates
        ConvIntegerCase* c = add({1, 32, 6, 6}, {24, 32, 3, 3}, {}, {1, 1}, {}, 1);
        c->w_type = wt, c->w_zero_points = 1, c->extreme = true;
    }
    {   // an int8 x stays on the reference
        ConvIntegerCase* c = add({1, 4, 5, 5}, {3, 4, 3, 3}, {}, {1, 1}, {}, 1);
        c->x_type = ElementType::Int8;
    }
    for (const ConvIntegerCase& c : cases)
        for (uint32_t threads : {1u, 2u}) {
            std::string dims;
            for (int64_t d : c.x) dims += std::to_string(d) + ",";
            dims += " w ";
            for (int64_t d : c.w) dims += std::to_string(d) + ",";
            CAPTURE(dims);
            CAPTURE((int)c.w_type);
            CAPTURE(c.w_zero_points);
            CAPTURE((int)c.w_zero);
            CAPTURE(c.x_zero_point);
            CAPTURE(threads);
            check_conv_integer(c, threads);
        }
}

TEST_CASE("int8 dynamic: DynamicQuantizeLinear equals the reference kernel bit for bit") {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> spread(-3.0f, 5.0f);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::vector<float>> inputs;
    for (size_t n : {1u, 3u, 4u, 5u, 17u, 1000u, 70001u}) {
        std::vector<float> x(n);
        for (float& v : x) v = spread(rng);
        inputs.push_back(x);
    }
    inputs.push_back(std::vector<float>(9, 0.0f));                        // no range: scale 1/255
    inputs.push_back({-0.0f, -0.0f, -0.0f, -0.0f, -0.0f});                  // signed zeros
    inputs.push_back({-1.0f, -2.5f, -0.5f, -4.0f, -3.0f, -7.0f});           // all below 0: zero point 255
    inputs.push_back({0.5f, 2.0f, 3.0f, 1.5f, 255.0f, 127.5f, 0.0f, 1.0f});   // all above 0, ties of x / scale
    inputs.push_back({nan, 1.0f, -2.0f, nan, 3.0f, nan, -0.0f, 0.25f, nan});   // NaN skipped by the range, quantized as 0
    inputs.push_back({-5.0f, 7.0f, 1.0f, 1.0f, nan, nan, 1.0f, 1.0f, 2.0f, 0.5f, 1.0f, 1.0f});   // a NaN after a lane's extremes
    inputs.push_back({1.0f, inf, -2.0f, 0.5f, 3.0f});                       // an infinite range
    inputs.push_back({1.0f, -inf, 2.0f, 0.5f, -3.0f, 4.0f});
    inputs.push_back({3.0e38f, -3.0e38f, 1.0f, -1.0f, 0.0f});               // hi - lo overflows
    inputs.push_back({1e-40f, -1e-40f, 2e-41f, 0.0f, -3e-41f});             // subnormals
    for (const std::vector<float>& x : inputs)
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(x.size());
            CAPTURE(threads);
            std::string fast_kernels, ref_kernels;
            const std::vector<unsigned char> fast = dynamic_quantize(x, threads, nullptr, &fast_kernels);
            const std::vector<unsigned char> ref = dynamic_quantize(x, threads, "ref", &ref_kernels);
            INFO(fast_kernels);
            CHECK(ref_kernels.find("ref:DynamicQuantizeLinear") != std::string::npos);
            if (default_isa() != Isa::Ref) CHECK(fast_kernels.find("int8:") != std::string::npos);
            REQUIRE(fast.size() == x.size() + 5);
            REQUIRE(ref.size() == fast.size());
            int64_t bad = 0;
            for (size_t i = 0; i < fast.size(); ++i)
                if (fast[i] != ref[i] && bad++ < 5) MESSAGE("byte " << i << ": " << (int)fast[i] << ", reference " << (int)ref[i]);
            CHECK(bad == 0);
        }
}

TEST_CASE("int8 dynamic: Cast int32 to float32 rounds as C++'s conversion") {
    const std::vector<int32_t> x = {0, 1, -1, 16777216, 16777217, 16777219, -16777217, 2147483647, -2147483647 - 1, 123456789, 7};
    OpTest t;
    t.op("Cast", {t.input(Shape{(int64_t)x.size()}, x)});
    t.set_int("to", 1);   // FLOAT
    test::CpuRun run = test::run_last_node_on_cpu(t, 1, true);
    REQUIRE(run.bytes.size() == x.size() * 4);
    for (size_t i = 0; i < x.size(); ++i) {
        float v;
        std::memcpy(&v, run.bytes.data() + i * 4, 4);
        CHECK(v == (float)x[i]);
    }
}
