// QOperator models and QDQ Gemm on the int8 kernels: QLinearConv (1x1, k x k, strided, dilated,
// padded, grouped, depthwise, 1-D; w scales per tensor and per map; with and without bias) and
// QLinearMatMul (batches, tails of K and N, b scales per tensor and per column) bit for bit
// against the integer arithmetic done here (int8_requantize at s_x * s_w / s_y in float32), and
// within one step of the reference kernels (FUSION=NO: they apply the multiplier in double);
// DequantizeLinear -> Gemm (transB, C per column or one value) -> Relu -> QuantizeLinear the
// same way against the float path. What the int8 kernels do not take keeps the reference's bits.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

using test::count_of;

struct Run {
    std::vector<uint8_t> y;
    std::string kernels;
};

// The last node's output as y, compiled on CPU (FUSION as given) and inferred once.
Run run_model(OpTest& t, bool fusion, uint32_t threads) {
    test::CpuRun run = test::run_last_node_on_cpu(t, threads, fusion);
    return {std::vector<uint8_t>(run.bytes.begin(), run.bytes.end()), run.kernels};
}

// got == want everywhere; the reference path within one step of want.
// amx: whether the step should run the AMX tile (kernel "+amx").
void check_results(const Run& fast, const Run& reference, const std::vector<uint8_t>& want, const char* kernel, bool amx) {
    INFO(fast.kernels);
    CHECK(fast.kernels.find(std::string("int8:")) != std::string::npos);
    CHECK(fast.kernels.find(std::string(":") + kernel) != std::string::npos);
    CHECK((fast.kernels.find(std::string(":") + kernel + "+amx") != std::string::npos) == amx);
    CHECK(reference.kernels.find("int8:") == std::string::npos);
    REQUIRE(fast.y.size() == want.size());
    REQUIRE(reference.y.size() == want.size());
    int64_t bad = 0, far = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (fast.y[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)fast.y[i] << ", want " << (int)want[i]);
        far += std::abs((int)reference.y[i] - (int)want[i]) > 1;
    }
    CHECK(bad == 0);
    CHECK(far == 0);
}

// ---- QLinearConv ----
struct QConv {
    Shape x, w;
    int64_t group = 1;
    Shape strides, dilations, pads;
    bool per_map = true, bias = true, w_zero_point = true;   // w_zero_point false: one per map
};

struct QConvData {
    std::vector<uint8_t> x;
    std::vector<int8_t> q;
    std::vector<float> sw;
    std::vector<int32_t> bias;
    float sx = 0.02f, sy = 0.05f;
    uint8_t zx = 37, zy = 101;
};

Run run_qlinear_conv(const QConv& cc, const QConvData& d, bool fusion, uint32_t threads, ElementType w_type = ElementType::Int8,
                     int8_t w_zero = 0) {
    OpTest t;
    t.opset = 13;
    const int64_t maps = cc.w[0];
    std::vector<InputRef> in = {t.input(cc.x, d.x), t.constant(Shape{}, std::vector<float>{d.sx}),
                                t.constant(Shape{}, std::vector<uint8_t>{d.zx})};
    if (w_type == ElementType::Int8) {
        in.push_back(t.constant(cc.w, d.q));
    } else {   // the same bits as uint8 (a model the int8 kernels leave to the reference)
        std::vector<uint8_t> u(d.q.size());
        std::memcpy(u.data(), d.q.data(), u.size());
        in.push_back(t.constant(cc.w, u));
    }
    in.push_back(cc.per_map ? t.constant(Shape{maps}, d.sw) : t.constant(Shape{}, std::vector<float>{d.sw[0]}));
    if (w_type == ElementType::Int8)
        in.push_back(cc.w_zero_point ? t.constant(Shape{}, std::vector<int8_t>{w_zero}) : t.constant(Shape{maps}, std::vector<int8_t>((size_t)maps, w_zero)));
    else in.push_back(t.constant(Shape{}, std::vector<uint8_t>{(uint8_t)w_zero}));
    in.push_back(t.constant(Shape{}, std::vector<float>{d.sy}));
    in.push_back(t.constant(Shape{}, std::vector<uint8_t>{d.zy}));
    if (cc.bias) in.push_back(t.constant(Shape{maps}, d.bias));
    t.op("QLinearConv", in);
    if (cc.group != 1) t.set_int("group", cc.group);
    if (!cc.strides.empty()) t.set_ints("strides", cc.strides);
    if (!cc.dilations.empty()) t.set_ints("dilations", cc.dilations);
    if (!cc.pads.empty()) t.set_ints("pads", cc.pads);
    return run_model(t, fusion, threads);
}

QConvData qconv_data(const QConv& cc, uint32_t seed) {
    std::mt19937 rng(seed);
    QConvData d;
    const int64_t maps = cc.w[0];
    d.x.resize((size_t)count_of(cc.x));
    for (uint8_t& v : d.x) v = (uint8_t)(rng() % 256);
    d.q.resize((size_t)count_of(cc.w));
    for (int8_t& v : d.q) v = (int8_t)((int)(rng() % 256) - 128);   // -128 too: QOperator weights need not be symmetric
    d.sw.resize((size_t)maps);
    d.bias.resize((size_t)maps);
    for (int64_t m = 0; m < maps; ++m) {
        d.sw[(size_t)m] = cc.per_map ? std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -9) : std::ldexp(1.3f, -9);
        d.bias[(size_t)m] = cc.bias ? (int32_t)(rng() % 40001) - 20000 : 0;
    }
    return d;
}

// The integer oracle: int8_requantize(sum (x - zx) q + bias) at s_x * s_w / s_y in float32.
std::vector<uint8_t> qconv_oracle(const QConv& cc, const QConvData& d) {
    const int sp = (int)cc.x.size() - 2;
    const int64_t batch = cc.x[0], channels = cc.x[1], maps = cc.w[0], cg = cc.w[1], mg = maps / cc.group;
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, dl[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, out[3] = {1, 1, 1};
    for (int i = 0; i < sp; ++i) {
        int j = 3 - sp + i;
        in[j] = cc.x[2 + i];
        k[j] = cc.w[2 + i];
        if (!cc.strides.empty()) s[j] = cc.strides[i];
        if (!cc.dilations.empty()) dl[j] = cc.dilations[i];
        int64_t pe = 0;
        if (!cc.pads.empty()) { pb[j] = cc.pads[i]; pe = cc.pads[sp + i]; }
        out[j] = (in[j] + pb[j] + pe - ((k[j] - 1) * dl[j] + 1)) / s[j] + 1;
    }
    const int64_t positions = out[0] * out[1] * out[2];
    std::vector<uint8_t> want((size_t)(batch * maps * positions));
    for (int64_t n = 0; n < batch; ++n)
        for (int64_t m = 0; m < maps; ++m) {
            const float scale = d.sx * d.sw[cc.per_map ? (size_t)m : 0] / d.sy;
            for (int64_t o = 0; o < positions; ++o) {
                int64_t o0 = o / (out[1] * out[2]), o1 = o / out[2] % out[1], o2 = o % out[2], g = m / mg;
                int32_t acc = 0;
                for (int64_t c = 0; c < cg; ++c)
                    for (int64_t k0 = 0; k0 < k[0]; ++k0)
                        for (int64_t k1 = 0; k1 < k[1]; ++k1)
                            for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                                int64_t i0 = o0 * s[0] - pb[0] + k0 * dl[0], i1 = o1 * s[1] - pb[1] + k1 * dl[1], i2 = o2 * s[2] - pb[2] + k2 * dl[2];
                                if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                                int32_t xv = d.x[(size_t)((((n * channels + g * cg + c) * in[0] + i0) * in[1] + i1) * in[2] + i2)];
                                acc += (xv - d.zx) * d.q[(size_t)((((m * cg + c) * k[0] + k0) * k[1] + k1) * k[2] + k2)];
                            }
                want[(size_t)((n * maps + m) * positions + o)] =
                    int8_requantize(acc, d.bias[(size_t)m], scale, -(float)d.zy, 255.0f - d.zy, d.zy);
            }
        }
    return want;
}
}  // namespace

TEST_CASE("int8 qoperator: QLinearConv on the int8 kernels, bit for bit the integer oracle, within one step of the reference") {
    const std::vector<QConv> cases = {
        {{1, 16, 9, 11}, {24, 16, 1, 1}, 1, {}, {}, {}, true, true, true},                  // 1x1 straight on NCHW
        {{2, 5, 7, 19}, {13, 5, 1, 1}, 1, {}, {}, {}, false, false, false},                 // tails, one w scale, no bias, zero points per map
        {{1, 3, 6, 6}, {2, 3, 1, 1}, 1, {2, 2}, {}, {}, true, true, true},                  // strided 1x1
        {{1, 8, 13, 17}, {16, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, true, true, true},         // 3x3 padded (stride-1 copy)
        {{2, 3, 7, 6}, {4, 3, 3, 2}, 1, {2, 1}, {1, 2}, {1, 0, 2, 1}, false, true, true},   // strided, dilated, asymmetric pads
        {{1, 8, 10, 10}, {16, 2, 3, 3}, 4, {}, {}, {1, 1, 1, 1}, true, true, true},         // 4 groups
        {{1, 32, 21, 23}, {19, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, true, true, true},       // depth 288
        {{2, 3, 17}, {5, 3, 4}, 1, {3}, {2}, {2, 1}, true, true, true},                     // 1-D
        {{1, 8, 12, 37}, {8, 1, 3, 3}, 8, {}, {}, {1, 1, 1, 1}, true, true, true},          // depthwise
        {{1, 6, 9, 9}, {6, 1, 3, 3}, 6, {2, 2}, {2, 2}, {2, 2, 2, 2}, false, true, true},   // depthwise, strided, dilated
        {{2, 4, 7, 20}, {8, 1, 5, 5}, 4, {1, 2}, {}, {2, 2, 1, 2}, true, false, true},      // depthwise, 2 maps per channel
        {{1, 24, 19, 21}, {96, 24, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, true, true, true},       // AMX where the CPU has it
    };
    uint32_t seed = 3400;
    for (const QConv& cc : cases) {
        CAPTURE(seed);
        QConvData d = qconv_data(cc, seed);
        std::vector<uint8_t> want = qconv_oracle(cc, d);
        Run reference = run_qlinear_conv(cc, d, false, 1);
        const bool depthwise = cc.group == cc.x[1] && cc.w[1] == 1;
        const bool amx = int8_amx_available() && default_isa() == Isa::Avx512 && !depthwise &&
                         Int8Gemm::amx_pays(cc.w[0] / cc.group, count_of(cc.w) / cc.w[0]);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            check_results(run_qlinear_conv(cc, d, true, threads), reference, want, "QLinearConv", amx);
        }
        seed += 11;
    }
}

TEST_CASE("int8 qoperator: QLinearConv the int8 kernels do not take keeps the reference's results") {
    const QConv cc = {{1, 4, 6, 6}, {5, 4, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, true, true, true};
    QConvData d = qconv_data(cc, 77);
    Run reference = run_qlinear_conv(cc, d, false, 1, ElementType::UInt8, 3);
    Run other_type = run_qlinear_conv(cc, d, true, 1, ElementType::UInt8, 3);   // uint8 weights
    CHECK(other_type.kernels.find("int8:") == std::string::npos);
    CHECK(other_type.y == reference.y);
    Run zero_ref = run_qlinear_conv(cc, d, false, 1, ElementType::Int8, 2);
    Run zero = run_qlinear_conv(cc, d, true, 1, ElementType::Int8, 2);          // w zero point 2
    CHECK(zero.kernels.find("int8:") == std::string::npos);
    CHECK(zero.y == zero_ref.y);
}

// ---- QLinearMatMul ----
namespace {
struct QMat {
    Shape a;
    int64_t n;
    bool per_column;
};

Run run_qlinear_matmul(const QMat& mc, const std::vector<uint8_t>& a, const std::vector<int8_t>& b, const std::vector<float>& sb,
                       float sa, uint8_t za, float sy, uint8_t zy, bool fusion, uint32_t threads) {
    OpTest t;
    t.opset = 13;
    const int64_t k = mc.a.back();
    t.op("QLinearMatMul", {t.input(mc.a, a), t.constant(Shape{}, std::vector<float>{sa}), t.constant(Shape{}, std::vector<uint8_t>{za}),
                           t.constant(Shape{k, mc.n}, b),
                           mc.per_column ? t.constant(Shape{mc.n}, sb) : t.constant(Shape{}, std::vector<float>{sb[0]}),
                           mc.per_column ? t.constant(Shape{mc.n}, std::vector<int8_t>((size_t)mc.n, 0))
                                         : t.constant(Shape{}, std::vector<int8_t>{0}),
                           t.constant(Shape{}, std::vector<float>{sy}), t.constant(Shape{}, std::vector<uint8_t>{zy})});
    return run_model(t, fusion, threads);
}
}  // namespace

TEST_CASE("int8 qoperator: QLinearMatMul on the int8 kernels: batches, tails of K and N, scales per tensor and per column") {
    const std::vector<QMat> cases = {{{2, 5, 37}, 19, true}, {{1, 70, 64}, 48, false}, {{3, 19}, 7, true}, {{1, 200, 130}, 100, true},
                                     {{2, 3, 4, 1}, 33, false}, {{1, 1, 203}, 129, true}, {{1, 80, 256}, 96, true}};   // the last on AMX
    uint32_t seed = 3500;
    for (const QMat& mc : cases) {
        CAPTURE(seed);
        std::mt19937 rng(seed++);
        const int64_t k = mc.a.back(), n = mc.n, rows = count_of(mc.a) / k;
        std::vector<uint8_t> a((size_t)count_of(mc.a));
        for (uint8_t& v : a) v = (uint8_t)(rng() % 256);
        std::vector<int8_t> b((size_t)(k * n));
        for (int8_t& v : b) v = (int8_t)((int)(rng() % 256) - 128);
        std::vector<float> sb((size_t)n);
        for (float& v : sb) v = mc.per_column ? std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -8) : std::ldexp(1.7f, -8);
        const float sa = 0.03f, sy = 0.2f;
        const uint8_t za = 90, zy = 60;
        std::vector<uint8_t> want((size_t)(rows * n));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < n; ++j) {
                int32_t acc = 0;
                for (int64_t p = 0; p < k; ++p) acc += ((int32_t)a[(size_t)(r * k + p)] - za) * b[(size_t)(p * n + j)];
                want[(size_t)(r * n + j)] = int8_requantize(acc, 0, sa * sb[(size_t)j] / sy, -(float)zy, 255.0f - zy, zy);
            }
        Run reference = run_qlinear_matmul(mc, a, b, sb, sa, za, sy, zy, false, 1);
        Int8Gemv probe;
        const bool gemv = rows <= Int8Gemv::kRows && probe.init() == Status::Ok;
        const bool amx = int8_amx_available() && default_isa() == Isa::Avx512 && !gemv && Int8Gemm::amx_pays(n, k);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            check_results(run_qlinear_matmul(mc, a, b, sb, sa, za, sy, zy, true, threads), reference, want, "QLinearMatMul", amx);
        }
    }
}

// ---- DequantizeLinear -> Gemm -> (Relu) -> QuantizeLinear ----
TEST_CASE("int8 qoperator: QDQ Gemm groups: transB, C per column or one value or none, Relu, tails") {
    struct Case { int64_t m, k, n; bool trans_b; int c; bool relu; };   // c: 0 none, 1 per column [n], 2 one value
    const std::vector<Case> cases = {{1, 37, 19, true, 1, false}, {5, 64, 48, false, 1, true}, {3, 19, 7, true, 2, false},
                                     {70, 130, 100, false, 0, true}, {2, 8, 1, true, 1, false}, {1, 301, 130, false, 1, true},
                                     {4, 64, 65, true, 2, false}, {80, 256, 96, false, 1, true}};   // the last on AMX
    uint32_t seed = 3600;
    for (const Case& gc : cases) {
        CAPTURE(seed);
        std::mt19937 rng(seed++);
        const int64_t m = gc.m, k = gc.k, n = gc.n;
        std::vector<uint8_t> x((size_t)(m * k));
        for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
        std::vector<int8_t> q((size_t)(k * n));   // q[p][j]
        std::vector<float> sw((size_t)n);
        for (float& v : sw) v = std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -8);
        for (int8_t& v : q) v = (int8_t)((int)(rng() % 255) - 127);
        for (int64_t j = 0; j < n; ++j) q[(size_t)((rng() % k) * n + j)] = -127;   // each column reaches 127 in magnitude
        const float sx = 0.03f, sy = 0.2f;
        const uint8_t zx = 90, zy = 60;
        std::vector<float> w((size_t)(k * n));   // as the model holds it: [k, n] or [n, k]
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = 0; j < n; ++j)
                w[(size_t)(gc.trans_b ? j * k + p : p * n + j)] = (float)q[(size_t)(p * n + j)] * sw[(size_t)j];
        std::vector<int32_t> qb((size_t)n);
        std::vector<float> c;
        for (int64_t j = 0; j < n; ++j) qb[(size_t)j] = gc.c == 0 ? 0 : (int32_t)(rng() % 4001) - 2000;
        if (gc.c == 2) {   // one value: its integer at each column's scale
            c = {(float)(37.0 * (double)sx * (double)sw[0])};
            for (int64_t j = 0; j < n; ++j) qb[(size_t)j] = (int32_t)std::nearbyint((double)c[0] / ((double)sx * (double)sw[(size_t)j]));
        } else if (gc.c == 1) {
            for (int64_t j = 0; j < n; ++j) c.push_back((float)((double)qb[(size_t)j] * (double)sx * (double)sw[(size_t)j]));
        }
        std::vector<uint8_t> want((size_t)(m * n));
        for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < n; ++j) {
                int32_t acc = 0;
                for (int64_t p = 0; p < k; ++p) acc += ((int32_t)x[(size_t)(r * k + p)] - zx) * q[(size_t)(p * n + j)];
                want[(size_t)(r * n + j)] =
                    int8_requantize(acc, qb[(size_t)j], sx * sw[(size_t)j] / sy, gc.relu ? 0.0f : -(float)zy, 255.0f - zy, zy);
            }
        auto build = [&](bool fusion, uint32_t threads) {
            OpTest t;
            t.opset = 13;
            NodeId dq = t.op("DequantizeLinear", {t.input(Shape{m, k}, x), t.constant(Shape{}, std::vector<float>{sx}),
                                                  t.constant(Shape{}, std::vector<uint8_t>{zx})});
            std::vector<InputRef> in = {InputRef::by_id(dq), t.constant(gc.trans_b ? Shape{n, k} : Shape{k, n}, w)};
            if (gc.c == 1) in.push_back(t.constant(Shape{n}, c));
            if (gc.c == 2) in.push_back(t.constant(Shape{}, c));
            NodeId gemm = t.op("Gemm", in);
            if (gc.trans_b) t.set_int("transB", 1);
            if (gc.relu) gemm = t.op("Relu", {InputRef::by_id(gemm)});
            t.op("QuantizeLinear", {InputRef::by_id(gemm), t.constant(Shape{}, std::vector<float>{sy}),
                                    t.constant(Shape{}, std::vector<uint8_t>{zy})});
            return run_model(t, fusion, threads);
        };
        Run reference = build(false, 1);
        Int8Gemv probe;
        const bool gemv = m <= Int8Gemv::kRows && probe.init() == Status::Ok;
        const bool amx = int8_amx_available() && default_isa() == Isa::Avx512 && !gemv && Int8Gemm::amx_pays(n, k);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            Run fast = build(true, threads);
            CHECK(fast.kernels.find("DequantizeLinear") == std::string::npos);   // the group reads x's uint8
            check_results(fast, reference, want, "Gemm", amx);
        }
    }
}

// ---- DequantizeLinear -> one-input float ops -> QuantizeLinear as a table ----
TEST_CASE("int8 qoperator: DequantizeLinear -> HardSwish, Sigmoid, HardSigmoid + Relu, Tanh -> QuantizeLinear as a table, the reference's bits") {
    struct Case { std::vector<const char*> ops; float sx; uint8_t zx; float sy; uint8_t zy; bool dq_shared; };
    const std::vector<Case> cases = {{{"HardSwish"}, 0.05f, 128, 0.03f, 20, false},   {{"Sigmoid"}, 0.1f, 100, 1.0f / 255.0f, 0, false},
                                     {{"HardSigmoid", "Relu"}, 0.04f, 7, 0.004f, 3, false}, {{"Tanh"}, 0.02f, 200, 0.008f, 128, true},
                                     {{"HardSwish"}, 0.0137f, 0, 0.0111f, 250, false}};
    const Shape shape = {1, 8, 101, 97};   // several parts (of 16384 bytes, or 65536 on the JIT) at 2 threads
    std::vector<uint8_t> x((size_t)count_of(shape));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (uint8_t)((i * 37 + i / 256) % 256);   // every value
    for (const Case& tc : cases) {
        CAPTURE(tc.ops[0]);
        auto build = [&](bool fusion, uint32_t threads) {
            OpTest t;
            t.opset = 14;
            NodeId dq = t.op("DequantizeLinear", {t.input(shape, x), t.constant(Shape{}, std::vector<float>{tc.sx}),
                                                  t.constant(Shape{}, std::vector<uint8_t>{tc.zx})});
            NodeId last = dq;
            for (const char* op : tc.ops) last = t.op(op, {InputRef::by_id(last)});
            NodeId q = t.op("QuantizeLinear", {InputRef::by_id(last), t.constant(Shape{}, std::vector<float>{tc.sy}),
                                               t.constant(Shape{}, std::vector<uint8_t>{tc.zy})});
            if (tc.dq_shared) {   // the DequantizeLinear read elsewhere too: it stays
                REQUIRE(t.model.add_output("dq", InputRef::by_id(dq, 0)) == Status::Ok);
                t.node = q;
            }
            return run_model(t, fusion, threads);
        };
        Run reference = build(false, 1);
        CHECK(reference.kernels.find("int8:") == std::string::npos);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            Run fast = build(true, threads);
            INFO(fast.kernels);
            CHECK(test::has_int8_step(fast.kernels, "Table"));
            CHECK((fast.kernels.find("DequantizeLinear") == std::string::npos) == !tc.dq_shared);
            CHECK(fast.y == reference.y);
        }
    }
}

// ---- DequantizeLinears -> Concat -> MaxPool -> QuantizeLinear on uint8 ----
TEST_CASE("int8 qoperator: a Concat of DequantizeLinears pooled on uint8, the float path's bits (grids, strides, pads, 2 images)") {
    struct Case { Shape a, b; int64_t axis; Shape kernel, strides, pads; float sa, sb, sy; uint8_t za, zb, zy; bool taken; };
    const std::vector<Case> cases = {
        {{1, 3, 13, 14}, {1, 5, 13, 14}, 1, {3, 3}, {2, 2}, {}, 0.02f, 0.05f, 0.05f, 10, 0, 0, true},         // squeezenet's
        {{2, 2, 9, 9}, {2, 4, 9, 9}, 1, {2, 2}, {1, 1}, {1, 1, 0, 0}, 0.1f, 0.1f, 0.1f, 5, 5, 5, true},        // one grid
        {{1, 1, 7, 30}, {1, 2, 7, 30}, 1, {3, 2}, {2, 3}, {1, 0, 1, 1}, 0.03f, 0.011f, 0.02f, 128, 3, 77, true},
        {{1, 2, 6, 6}, {1, 2, 6, 6}, 2, {2, 2}, {2, 2}, {}, 0.02f, 0.05f, 0.05f, 10, 0, 0, false},            // along H: float path
    };
    uint32_t seed = 3700;
    for (const Case& pc : cases) {
        CAPTURE(seed);
        std::mt19937 rng(seed++);
        std::vector<uint8_t> a((size_t)count_of(pc.a)), b((size_t)count_of(pc.b));
        for (uint8_t& v : a) v = (uint8_t)(rng() % 256);
        for (uint8_t& v : b) v = (uint8_t)(rng() % 256);
        auto build = [&](bool fusion, uint32_t threads) {
            OpTest t;
            t.opset = 13;
            NodeId da = t.op("DequantizeLinear", {t.input(pc.a, a), t.constant(Shape{}, std::vector<float>{pc.sa}),
                                                  t.constant(Shape{}, std::vector<uint8_t>{pc.za})});
            NodeId db = t.op("DequantizeLinear", {t.input(pc.b, b), t.constant(Shape{}, std::vector<float>{pc.sb}),
                                                  t.constant(Shape{}, std::vector<uint8_t>{pc.zb})});
            NodeId cat = t.op("Concat", {InputRef::by_id(da), InputRef::by_id(db)});
            t.set_int("axis", pc.axis);
            NodeId pool = t.op("MaxPool", {InputRef::by_id(cat)});
            t.set_ints("kernel_shape", pc.kernel);
            t.set_ints("strides", pc.strides);
            if (!pc.pads.empty()) t.set_ints("pads", pc.pads);
            t.op("QuantizeLinear", {InputRef::by_id(pool), t.constant(Shape{}, std::vector<float>{pc.sy}),
                                    t.constant(Shape{}, std::vector<uint8_t>{pc.zy})});
            return run_model(t, fusion, threads);
        };
        Run reference = build(false, 1);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(threads);
            Run fast = build(true, threads);
            INFO(fast.kernels);
            const bool tables = pc.sa != pc.sy || pc.za != pc.zy || pc.sb != pc.sy || pc.zb != pc.zy;
            CHECK(test::has_int8_step(fast.kernels, "MaxPool", tables) == pc.taken);
            CHECK((fast.kernels.find("Concat") == std::string::npos) == pc.taken);
            CHECK((fast.kernels.find("DequantizeLinear") == std::string::npos) == pc.taken);
            CHECK(fast.y == reference.y);
        }
    }
}
