// The CPU device's own kernels (runtime.h >>cpu ops: pooling, global pooling, softmax, LRN) against
// the reference kernels, at every ISA the machine has (CPU:ISA; ref keeps the reference
// kernels), on 1 and 2 threads. Max pooling is compared bit for bit (NaN and signed zeros
// included); windowed averages too (same order of additions, same division); global
// averages within 4 n eps mean|x| of the reference (they sum in lanes).
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

std::vector<Isa> machine_isas() {
    std::vector<Isa> isas;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (isa_available(isa)) isas.push_back(isa);
    return isas;
}

std::vector<float> coarse_floats(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> coarse(-40, 40);   // repeats: ties between taps
    std::vector<float> v((size_t)n);
    for (float& f : v) f = (float)coarse(rng) * 0.125f;
    return v;
}

std::string dims_text(const Shape& s) {
    std::string t;
    for (int64_t d : s) t += std::to_string(d) + ",";
    return t;
}

using test::same_bits;

struct CpuRun {
    std::vector<float> y;
    std::string kernels;
};

// Compiles the OpTest's node on CPU at `isa` with `threads`, infers once (allocating nothing).
CpuRun infer_cpu(OpTest& t, Isa isa, uint32_t threads) {
    CpuRun r;
    std::string name = t.fresh("out");
    REQUIRE(t.model.add_output(StringView(name.data(), name.size()), InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa_name(isa)}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &run);
    if (!run.compiled.output_count()) return r;
    r.kernels = run.kernels;
    const Tensor& out = run.request.output(0);
    r.y.assign(out.data_as<float>(), out.data_as<float>() + out.elements());
    return r;
}

struct PoolCase {
    const char* op;
    Shape x, kernel, strides, pads;
    int64_t ceil_mode, count_include_pad;
};

// Builds the node; false when the reference refuses the attributes (nothing to compare).
bool build_pool(OpTest& t, const PoolCase& pc, const std::vector<float>& x) {
    t.op(pc.op, {t.input(pc.x, x)});
    t.set_ints("kernel_shape", pc.kernel);
    if (!pc.strides.empty()) t.set_ints("strides", pc.strides);
    if (!pc.pads.empty()) t.set_ints("pads", pc.pads);
    if (pc.ceil_mode) t.set_int("ceil_mode", 1);
    if (pc.count_include_pad) t.set_int("count_include_pad", 1);
    return t.prepare() == Status::Ok;
}

// Runs the case through the reference and through CPU at every ISA and 1 and 2 threads; with
// `one_step` (":<op>:window "), CPU's JIT ISAs must run it as one step named so.
// Returns how many cases compared (0 when the reference refused it).
int check_pool(const PoolCase& pc, const std::vector<float>& x, const std::string& one_step = std::string()) {
    OpTest ref;
    if (!build_pool(ref, pc, x)) return 0;
    REQUIRE(ref.run() == Status::Ok);
    const float* want = ref.outputs[0].data_as<float>();
    const size_t n = ref.outputs[0].elements();
    for (Isa isa : machine_isas())
        for (uint32_t threads : {1u, 2u}) {
            OpTest t;
            REQUIRE(build_pool(t, pc, x));
            CpuRun got = infer_cpu(t, isa, threads);
            REQUIRE(got.y.size() == n);
            std::string prefix = isa == Isa::Ref ? "ref:" : "cpu:";
            INFO(std::string(pc.op) << " x " << dims_text(pc.x) << " k " << dims_text(pc.kernel) << " s " << dims_text(pc.strides) << " p " << dims_text(pc.pads) << " ceil " << pc.ceil_mode << " isa " << std::string(isa_name(isa))
                       << " threads " << threads << " kernels " << got.kernels);
            CHECK(got.kernels.rfind(prefix, 0) == 0);
            if (!one_step.empty() && isa != Isa::Ref) {
                CHECK(got.kernels.find(' ') == got.kernels.size() - 1);
                CHECK(got.kernels.size() > one_step.size());
                CHECK(got.kernels.compare(got.kernels.size() - one_step.size(), one_step.size(), one_step) == 0);
            }
            size_t bad = 0;
            for (size_t i = 0; i < n; ++i)
                if (!same_bits(got.y[i], want[i]) && bad++ < 3) MESSAGE("y[" << i << "] = " << got.y[i] << ", want " << want[i]);
            CHECK(bad == 0);
        }
    return 1;
}

}  // namespace

TEST_CASE("cpu ops: MaxPool and AveragePool equal the reference bit for bit across shapes, pads, strides, tails") {
    int compared = 0;
    uint32_t seed = 1;
    const std::vector<Shape> kernels = {{1, 1}, {2, 2}, {3, 3}, {1, 3}, {3, 2}, {5, 5}};
    for (const char* op : {"MaxPool", "AveragePool"})
        for (const Shape& k : kernels)
            for (int64_t stride : {1, 2, 3})
                for (int pad_kind = 0; pad_kind < 3; ++pad_kind)
                    for (int64_t ceil_mode : {0, 1}) {
                        Shape pads = pad_kind == 0 ? Shape{} : pad_kind == 1 ? Shape{k[0] / 2, k[1] / 2, k[0] / 2, k[1] / 2}
                                                                             : Shape{0, k[1] - 1, k[0] - 1, 0};
                        // widths 1 .. 2 * 4 + 1 and one long row; heights small
                        for (int64_t width : {1, 2, 3, 4, 5, 7, 8, 9, 13, 35}) {
                            int64_t height = 1 + (width + stride) % 6;
                            Shape x = {1 + (width % 2), 2, height, width};
                            PoolCase pc{op, x, k, {stride, stride}, pads, ceil_mode, (int64_t)(seed % 2)};
                            compared += check_pool(pc, coarse_floats(x[0] * x[1] * height * width, seed++));
                        }
                    }
    CHECK(compared > 500);
}

TEST_CASE("cpu ops: pools of the light models' shapes, asymmetric strides, 1-D") {
    std::vector<PoolCase> cases = {
        {"MaxPool", {1, 3, 111, 111}, {3, 3}, {2, 2}, {}, 0, 0},
        {"MaxPool", {1, 4, 112, 112}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 0},
        {"MaxPool", {1, 2, 27, 27}, {3, 3}, {2, 2}, {}, 1, 0},
        {"AveragePool", {1, 3, 28, 28}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 0},
        {"AveragePool", {2, 3, 28, 28}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, 1},
        {"AveragePool", {1, 3, 14, 14}, {2, 2}, {2, 2}, {}, 1, 0},
        {"AveragePool", {1, 2, 9, 40}, {2, 2}, {2, 1}, {}, 0, 0},
        {"MaxPool", {1, 2, 9, 40}, {2, 3}, {1, 2}, {0, 1, 1, 1}, 1, 0},
        {"MaxPool", {2, 3, 50}, {3}, {2}, {1, 1}, 0, 0},
        {"AveragePool", {2, 3, 50}, {4}, {3}, {1, 2}, 1, 1},
    };
    uint32_t seed = 100;
    for (const PoolCase& pc : cases) {
        int64_t n = 1;
        for (int64_t d : pc.x) n *= d;
        CHECK(check_pool(pc, coarse_floats(n, seed++)) == 1);
    }
}

// The window that is the whole plane (the nets' last pool) runs 4 planes a vector: every count
// of planes past the last 4 (and enough for 2 threads to split), 1-D and 2-D, NaN first, last
// and between, both zeros, averages of values whose sum rounds differently in another order;
// CPU names the kernel ":window".
TEST_CASE("cpu ops: pools whose window is the whole plane, every tail of planes, NaN and signed zeros") {
    uint32_t seed = 700;
    int compared = 0;
    const std::vector<Shape> planes = {{7, 7}, {1, 1}, {3, 5}, {2, 9}, {13}};
    for (const char* op : {"MaxPool", "AveragePool"})
        for (const Shape& plane : planes)
            for (int64_t channels : {1, 2, 3, 4, 5, 7, 8, 9, 1030}) {
                Shape x = {channels == 1030 ? 2 : 1, channels};
                int64_t n = x[0] * channels;
                for (int64_t d : plane) x.push_back(d), n *= d;
                // the max: ties; the average: magnitudes 2^-8 to 2^8, so the order of the sum shows
                std::vector<float> v = coarse_floats(n, seed++);
                if (op[0] == 'A') {
                    std::mt19937 rng(seed++);
                    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
                    std::uniform_int_distribution<int> exponent(-8, 8);
                    for (float& f : v) f = std::ldexp(value(rng), exponent(rng));
                }
                for (int64_t i = 0; i < n; i += 11) v[(size_t)i] = NAN;
                for (int64_t i = 3; i < n; i += 7) v[(size_t)i] = -0.0f;
                for (int64_t i = 5; i < n; i += 13) v[(size_t)i] = 0.0f;
                compared += check_pool({op, x, plane, {}, {}, 0, 0}, v, std::string(":") + op + ":window ");   // cpu:<baseline ISA>:<op>:window
            }
    CHECK(compared == 90);
}

TEST_CASE("cpu ops: MaxPool keeps the reference's NaN and signed-zero rule") {
    // NaN first in a window stays; NaN later is passed over; -0 before +0 stays -0.
    Shape x = {1, 1, 6, 19};
    std::vector<float> v = coarse_floats(6 * 19, 7);
    for (size_t i = 0; i < v.size(); i += 5) v[i] = NAN;
    for (size_t i = 2; i < v.size(); i += 7) v[i] = -0.0f;
    for (size_t i = 3; i < v.size(); i += 7) v[i] = 0.0f;
    for (size_t i = 0; i < v.size(); ++i) if (v[i] > 0) v[i] = -v[i];   // zeros are the maxima
    for (int64_t stride : {1, 2, 3}) {
        CHECK(check_pool({"MaxPool", x, {3, 3}, {stride, stride}, {1, 1, 1, 1}, 0, 0}, v) == 1);
        CHECK(check_pool({"AveragePool", x, {2, 3}, {stride, stride}, {}, 1, 0}, v) == 1);
    }
}

TEST_CASE("cpu ops: MaxPool with Indices and dilated pools stay on the reference") {
    OpTest t;
    std::vector<float> x = coarse_floats(2 * 8 * 8, 3);
    t.op("MaxPool", {t.input({1, 2, 8, 8}, x)});
    t.set_ints("kernel_shape", {3, 3});
    t.set_ints("dilations", {2, 2});
    REQUIRE(t.prepare() == Status::Ok);
    for (Isa isa : machine_isas()) {
        OpTest u;
        u.op("MaxPool", {u.input({1, 2, 8, 8}, x)});
        u.set_ints("kernel_shape", {3, 3});
        u.set_ints("dilations", {2, 2});
        CHECK(infer_cpu(u, isa, 1).kernels.rfind("ref:MaxPool", 0) == 0);
    }
}

namespace {
// Global pools: GlobalMaxPool bit for bit, GlobalAveragePool within 4 n eps mean|x|.
void check_global(const char* op, const Shape& x, const std::vector<float>& v) {
    OpTest ref;
    ref.op(op, {ref.input(x, v)});
    ref.go();
    const float* want = ref.outputs[0].data_as<float>();
    int64_t plane = 1;
    for (size_t d = 2; d < x.size(); ++d) plane *= x[d];
    const bool max = std::string(op) == "GlobalMaxPool";
    for (Isa isa : machine_isas())
        for (uint32_t threads : {1u, 2u}) {
            OpTest t;
            t.op(op, {t.input(x, v)});
            CpuRun got = infer_cpu(t, isa, threads);
            INFO(std::string(op) << " plane " << plane << " isa " << std::string(isa_name(isa)) << " threads " << threads << " kernels " << got.kernels);
            CHECK(got.kernels.rfind(isa == Isa::Ref ? "ref:" : "cpu:", 0) == 0);
            REQUIRE(got.y.size() == ref.outputs[0].elements());
            for (size_t i = 0; i < got.y.size(); ++i) {
                if (max) { CHECK(same_bits(got.y[i], want[i])); continue; }
                double magnitude = 0;
                for (int64_t k = 0; k < plane; ++k) magnitude += std::fabs((double)v[i * plane + k]);
                double bound = 4.0 * (double)plane * 1.2e-7 * magnitude / (double)plane + 1e-30;
                if (std::isnan(want[i])) CHECK(std::isnan(got.y[i]));
                else CHECK(std::fabs((double)got.y[i] - want[i]) <= bound);
            }
        }
}
}  // namespace

TEST_CASE("cpu ops: GlobalAveragePool and GlobalMaxPool across plane sizes, NaN, signed zeros") {
    uint32_t seed = 50;
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"})
        for (int64_t plane : {1, 3, 4, 15, 16, 17, 33, 49, 196}) {
            Shape x = {2, 3, 1, plane};
            std::vector<float> v = coarse_floats(6 * plane, seed++);
            check_global(op, x, v);
            v[(size_t)plane / 2] = NAN;                        // NaN: max passes over it, the mean is NaN
            for (int64_t k = 0; k < plane; ++k) v[(size_t)(plane + k)] = k % 3 ? -1.0f : (k % 2 ? 0.0f : -0.0f);
            check_global(op, x, v);
        }
    check_global("GlobalAveragePool", {1, 4, 7, 7, 2}, coarse_floats(4 * 98, 9));
}

namespace {
// Softmax / LogSoftmax: within 5e-7 |want| (+ 1e-6 for LogSoftmax's absolute values) of the
// reference; NaN where it has NaN. after_neg: of Neg(x), a value the op may overwrite (its
// output in place of its input).
void check_softmax(const char* op, const Shape& x, int64_t axis, uint32_t opset, const std::vector<float>& v,
                   bool after_neg = false) {
    std::vector<float> negated = v;
    for (float& e : negated) e = -e;
    auto build = [&](OpTest& t, bool neg) {
        t.opset = opset;
        t.model.opset = opset;
        InputRef in = t.input(x, v);
        if (neg) in = InputRef::by_id(t.op("Neg", {in}), 0);
        t.op(op, {in});
        t.set_int("axis", axis);
    };
    OpTest ref;   // one node: the reference of the op on x (after_neg: on -x)
    ref.opset = opset;
    ref.model.opset = opset;
    ref.op(op, {ref.input(x, after_neg ? negated : v)});
    ref.set_int("axis", axis);
    ref.go();
    const float* want = ref.outputs[0].data_as<float>();
    const bool log = std::string(op) == "LogSoftmax";
    for (Isa isa : machine_isas())
        for (uint32_t threads : {1u, 2u}) {
            OpTest t;
            build(t, after_neg);
            CpuRun got = infer_cpu(t, isa, threads);
            INFO(std::string(op) << " x " << dims_text(x) << " axis " << axis << " isa " << std::string(isa_name(isa)) << " kernels " << got.kernels);
            bool last = axis == -1 || axis == (int64_t)x.size() - 1 || opset < 13;
            if (!after_neg) CHECK(got.kernels.rfind(isa != Isa::Ref && last ? "cpu:" : "ref:", 0) == 0);
#ifndef TESSEL_NO_JIT
            // Softmax's exponentials on the target's JIT snippet (LogSoftmax keeps F4 math)
            if (isa != Isa::Ref && last && !log)
                CHECK(got.kernels.find("cpu:" + std::string(isa_name(isa)) + ":" + op + " ") != std::string::npos);
#endif
            REQUIRE(got.y.size() == ref.outputs[0].elements());
            size_t bad = 0;
            for (size_t i = 0; i < got.y.size(); ++i) {
                double w = want[i], bound = 5e-7 * std::fabs(w) + (log ? 1e-6 : 1e-37);
                bool ok = std::isnan(w) ? std::isnan(got.y[i]) : got.y[i] == w || std::fabs(got.y[i] - w) <= bound;
                if (!ok && bad++ < 3) MESSAGE("y[" << i << "] = " << got.y[i] << ", want " << w);
            }
            CHECK(bad == 0);
        }
}
}  // namespace

TEST_CASE("cpu ops: Softmax and LogSoftmax on rows of every tail, wide ranges, NaN, other axes") {
    uint32_t seed = 200;
    for (const char* op : {"Softmax", "LogSoftmax"}) {
        for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 100, 1000}) {
            std::vector<float> v = coarse_floats(3 * n, seed++);
            for (size_t i = 0; i < v.size(); i += 3) v[i] *= 20.0f;   // exponents far apart: tiny terms
            check_softmax(op, {3, n}, -1, 13, v);
        }
        check_softmax(op, {150, 33}, -1, 13, coarse_floats(150 * 33, seed++));   // chunks of 64 rows, split by threads
        check_softmax(op, {2, 6625}, -1, 13, coarse_floats(2 * 6625, seed++));   // a chunk a row
        check_softmax(op, {150, 33}, -1, 13, coarse_floats(150 * 33, seed++), true);   // in place
        std::vector<float> v = coarse_floats(2 * 3 * 37, seed++);
        check_softmax(op, {2, 3, 37}, 1, 11, v);    // opset 11: rows from axis 1 on, coerced to 2-D
        check_softmax(op, {2, 3, 37}, 1, 13, v);    // a middle axis: the reference
        v[5] = NAN;                                 // the first row is NaN throughout
        v[40] = -INFINITY;
        v[80] = INFINITY;                           // inf - inf: NaN as the reference
        check_softmax(op, {2, 3, 37}, -1, 13, v);
    }
}

namespace {
// LRN: the CPU kernel (a snippet of the window's planes, F4 lanes past 16 of them) sums squares
// in float and raises by exp(-beta ln t), whose argument's rounding grows with beta |ln t|:
// within 1e-5 relative of the reference's double pow up to beta 2.5 and t 1e6. Forms outside
// its domain keep the reference.
void check_lrn(const Shape& x, int64_t size, float alpha, float beta, float bias, const std::vector<float>& v, bool fast) {
    auto build = [&](OpTest& t) {
        t.op("LRN", {t.input(x, v)});
        t.set_int("size", size);
        t.set_float("alpha", alpha);
        t.set_float("beta", beta);
        t.set_float("bias", bias);
    };
    OpTest ref;
    build(ref);
    ref.go();
    const float* want = ref.outputs[0].data_as<float>();
    for (Isa isa : machine_isas())
        for (uint32_t threads : {1u, 2u}) {
            OpTest t;
            build(t);
            CpuRun got = infer_cpu(t, isa, threads);
            INFO("LRN x " << dims_text(x) << " size " << size << " beta " << beta << " bias " << bias << " isa "
                          << std::string(isa_name(isa)) << " kernels " << got.kernels);
            CHECK(got.kernels.rfind(isa != Isa::Ref && fast ? "cpu:" : "ref:", 0) == 0);
            REQUIRE(got.y.size() == ref.outputs[0].elements());
            size_t bad = 0;
            for (size_t i = 0; i < got.y.size(); ++i) {
                double w = want[i];
                bool ok = std::isnan(w) ? std::isnan(got.y[i]) : std::fabs(got.y[i] - w) <= 1e-5 * std::fabs(w) + 1e-37;
                if (!ok && bad++ < 3) MESSAGE("y[" << i << "] = " << got.y[i] << ", want " << w);
            }
            CHECK(bad == 0);
        }
}
}  // namespace

TEST_CASE("cpu ops: LRN across channels, every tail of the inner dims, windows at the edges, NaN and inf") {
    uint32_t seed = 300;
    for (int64_t inner : {1, 3, 4, 5, 8, 13, 37, 64}) {
        std::vector<float> v = coarse_floats(2 * 7 * inner, seed++);
        check_lrn({2, 7, inner}, 5, 1e-4f, 0.75f, 1.0f, v, true);
        check_lrn({2, 7, inner}, 2, 0.5f, 0.6f, 2.0f, v, true);   // even size: one more channel after
    }
    std::vector<float> v = coarse_floats(1 * 16 * 6 * 5, seed++);
    for (float& f : v) f *= 40.0f;                                // squares far from 1: t up to 1e6
    check_lrn({1, 16, 6, 5}, 9, 0.9f, 2.5f, 1e-3f, v, true);
    check_lrn({1, 16, 6, 5}, 1, 1e-4f, 0.75f, 1.0f, v, true);
    v[7] = NAN;
    v[30] = INFINITY;                                             // t = inf: 0 for the others, NaN itself
    check_lrn({1, 16, 6, 5}, 3, 1e-4f, 0.75f, 1.0f, v, true);
    check_lrn({1, 16, 6, 5}, 3, 1e-4f, 0.75f, 0.0f, v, false);   // bias 0: t may be 0
    check_lrn({1, 16, 6, 5}, 3, -1e-4f, 0.75f, 1.0f, v, false);  // negative alpha: t may be negative
    check_lrn({1, 16, 6, 5}, 65, 1e-4f, 0.75f, 1.0f, v, false);  // a long window stays in double
    check_lrn({1, 16, 6, 5}, 20, 1e-4f, 0.75f, 1.0f, v, true);   // past the snippet's 16 planes: F4 lanes
}

TEST_CASE("cpu ops: Sum of two float inputs fuses into an island and adds as Add") {
    std::vector<float> a = coarse_floats(2 * 3 * 5, 300), b = coarse_floats(5, 301);
    for (Isa isa : machine_isas()) {
        OpTest t;
        InputRef x = t.input({2, 3, 5}, a), y = t.input({5}, b);
        NodeId sum = t.op("Sum", {x, y});
        t.op("Relu", {InputRef::by_id(sum)});
        CpuRun got = infer_cpu(t, isa, 1);
        INFO("isa " << isa_name(isa) << " kernels " << got.kernels);
        CHECK(got.kernels == std::string("snippet:") + isa_name(isa) + ":2 ");
        REQUIRE(got.y.size() == a.size());
        for (size_t i = 0; i < a.size(); ++i) {
            float s = a[i] + b[i % 5];
            CHECK(same_bits(got.y[i], s > 0 ? s : 0.0f));
        }
    }
    OpTest three;   // three inputs stay on the reference kernel
    std::vector<float> four(a.begin(), a.begin() + 4);
    InputRef x = three.input({4}, four), y = three.input({4}, four), z = three.input({4}, four);
    three.op("Sum", {x, y, z});
    CHECK(infer_cpu(three, Isa::Ref, 1).kernels == "ref:Sum ");
}

namespace {
struct ResizeCase {
    Shape x;
    std::vector<float> scales;
    const char* mode;
    const char* transform;
    const char* nearest_mode;
};

// Nearest bit for bit; linear within 1e-6 (1 + |want|) (AArch64 may contract the blend).
void check_resize(const ResizeCase& rc, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : rc.x) n *= d;
    std::vector<float> v = coarse_floats(n, seed);
    auto build = [&](OpTest& t) {
        t.opset = 13;
        t.model.opset = 13;
        InputRef x = t.input(rc.x, v);
        InputRef scales = t.constant({(int64_t)rc.scales.size()}, rc.scales);
        t.op("Resize", {x, t.absent(), scales});
        t.set_string("mode", rc.mode);
        t.set_string("coordinate_transformation_mode", rc.transform);
        if (rc.nearest_mode) t.set_string("nearest_mode", rc.nearest_mode);
    };
    OpTest ref;
    build(ref);
    ref.go();
    const float* want = ref.outputs[0].data_as<float>();
    const bool linear = std::string(rc.mode) == "linear";
    for (Isa isa : machine_isas())
        for (uint32_t threads : {1u, 2u}) {
            OpTest t;
            build(t);
            CpuRun got = infer_cpu(t, isa, threads);
            INFO(std::string(rc.mode) << " " << rc.transform << " x " << dims_text(rc.x) << " isa " << std::string(isa_name(isa))
                                      << " kernels " << got.kernels);
            CHECK(got.kernels.rfind(isa == Isa::Ref ? "ref:" : "cpu:", 0) == 0);
            REQUIRE(got.y.size() == ref.outputs[0].elements());
            size_t bad = 0;
            for (size_t i = 0; i < got.y.size(); ++i) {
                bool ok = linear ? std::fabs(got.y[i] - want[i]) <= 1e-6 * (1 + std::fabs(want[i])) : same_bits(got.y[i], want[i]);
                if (!ok && bad++ < 3) MESSAGE("y[" << i << "] = " << got.y[i] << ", want " << want[i]);
            }
            CHECK(bad == 0);
        }
}
}  // namespace

TEST_CASE("cpu ops: Resize nearest and linear, up and down, every tail of a row") {
    uint32_t seed = 400;
    for (int64_t width : {1, 2, 3, 4, 5, 9, 17}) {
        check_resize({{1, 2, 3, width}, {1, 1, 2, 2}, "nearest", "asymmetric", "floor"}, seed++);
        check_resize({{2, 3, 4, width}, {1, 1, 2, 2}, "nearest", "half_pixel", "round_prefer_floor"}, seed++);
        check_resize({{1, 2, 5, width}, {1, 1, 0.5f, 1.5f}, "nearest", "half_pixel", "round_prefer_ceil"}, seed++);
        check_resize({{1, 2, 3, width}, {1, 1, 2, 2}, "linear", "half_pixel", nullptr}, seed++);
        check_resize({{2, 2, 4, width}, {1, 1, 2, 2}, "linear", "align_corners", nullptr}, seed++);
        check_resize({{1, 3, 5, width}, {1, 1, 0.5f, 1.75f}, "linear", "pytorch_half_pixel", nullptr}, seed++);
        check_resize({{4, width}, {2, 2}, "linear", "half_pixel", nullptr}, seed++);
        check_resize({{3, 4, width}, {1, 2, 3}, "nearest", "asymmetric", "floor"}, seed++);
    }
    check_resize({{1, 8, 40, 40}, {1, 1, 2, 2}, "nearest", "asymmetric", "floor"}, seed++);
    check_resize({{1, 8, 40, 40}, {1, 1, 2, 2}, "linear", "half_pixel", nullptr}, seed++);
}

TEST_CASE("cpu ops: Transpose merges the dims that stay adjacent (channel shuffle) and copies the same bytes") {
    struct Case { Shape x, perm; bool merges; };
    const std::vector<Case> cases = {
        {{1, 2, 3, 5, 7}, {0, 2, 1, 3, 4}, true},    // channel shuffle
        {{2, 3, 4}, {0, 2, 1}, false},               // no two dims stay adjacent: the reference step
        {{1, 4, 1, 6}, {3, 0, 2, 1}, true},          // size-1 dims dropped
        {{3, 4}, {1, 0}, false},                     // a plain 2-D transpose: the reference step
        {{2, 3, 4, 5}, {0, 1, 2, 3}, true},          // identity: one copy
    };
    uint32_t seed = 500;
    for (const Case& tc : cases) {
        int64_t n = 1;
        for (int64_t d : tc.x) n *= d;
        std::vector<float> v = coarse_floats(n, seed++);
        OpTest ref;
        ref.op("Transpose", {ref.input(tc.x, v)});
        ref.set_ints("perm", tc.perm);
        ref.go();
        for (Isa isa : machine_isas()) {
            OpTest t;
            t.op("Transpose", {t.input(tc.x, v)});
            t.set_ints("perm", tc.perm);
            CpuRun got = infer_cpu(t, isa, 1);
            INFO("x " << dims_text(tc.x) << " perm " << dims_text(tc.perm) << " kernels " << got.kernels);
            CHECK(got.kernels == (isa != Isa::Ref && tc.merges ? "cpu:copy:Transpose " : "ref:Transpose "));
            REQUIRE(got.y.size() == (size_t)n);
            CHECK(std::memcmp(got.y.data(), ref.outputs[0].data(), (size_t)n * sizeof(float)) == 0);
        }
    }
}
