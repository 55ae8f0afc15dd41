// MaxPool's AVX-512 rows (runtime.h >>cpu ops, cpu_max_pool_row16: 16 outputs a vector,
// column strides 1 and 2, masked loads for the last vector) against the reference kernel bit
// for bit, NaN and signed zeros included, at every ISA the machine has (the other targets run
// the 4-float rows, the ref ISA the reference kernel): every count of interior outputs from 1
// to past two vectors, kernels 1-5, pads, ceil mode, 1 and 2 threads.
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

struct Pool {
    Shape x, kernel, strides, pads;
    int64_t ceil_mode;
};

void build(OpTest& t, const Pool& p, const std::vector<float>& x) {
    t.op("MaxPool", {t.input(p.x, x)});
    t.set_ints("kernel_shape", p.kernel);
    t.set_ints("strides", p.strides);
    if (!p.pads.empty()) t.set_ints("pads", p.pads);
    if (p.ceil_mode) t.set_int("ceil_mode", 1);
}

// Values with ties, NaNs and both zeros (the zeros are the largest values, so their order decides).
std::vector<float> values(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> coarse(-30, 0), pick(0, 12);
    std::vector<float> v((size_t)n);
    for (float& f : v) {
        const int kind = pick(rng);
        f = kind == 0 ? NAN : kind == 1 ? -0.0f : kind == 2 ? 0.0f : (float)coarse(rng) * 0.25f - 0.25f;
    }
    return v;
}

// Bit-for-bit differences from the reference at every ISA and 1 and 2 threads (0: all equal).
int64_t check(const Pool& p, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : p.x) n *= d;
    const std::vector<float> x = values(n, seed);
    OpTest ref;
    build(ref, p, x);
    REQUIRE(ref.prepare() == Status::Ok);
    REQUIRE(ref.run() == Status::Ok);
    const float* want = ref.outputs[0].data_as<float>();
    const size_t count = ref.outputs[0].elements();
    int64_t bad = 0;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            OpTest t;
            build(t, p, x);
            REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
            REQUIRE(t.model.finalize() == Status::Ok);
            const std::string threads_text = std::to_string(threads);
            ConfigEntry config[] = {{"NUM_THREADS", StringView(threads_text.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa_name(isa)}};
            test::CompiledRun run;
            test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &run);
            const std::string target = isa_name(isa);
            CAPTURE(target);
            CAPTURE(threads);
            INFO(run.kernels);
            const bool wide = isa == Isa::Avx512 && p.strides.back() <= 2;
            CHECK(run.kernels.rfind(isa == Isa::Ref ? "ref:MaxPool" : wide ? "cpu:avx512:MaxPool" : "cpu:", 0) == 0);
            const Tensor& out = run.request.output(0);
            REQUIRE(out.elements() == count);
            const float* got = out.data_as<float>();
            for (size_t i = 0; i < count; ++i)
                if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(std::isnan(got[i]) && std::isnan(want[i])))
                    if (bad++ < 3) MESSAGE("y[" << i << "] = " << got[i] << ", want " << want[i]);
        }
    }
    return bad;
}
}  // namespace

TEST_CASE("max pool 16: every interior count to past two vectors, strides 1 and 2, kernels 1-5") {
    uint32_t seed = 3000;
    for (int64_t stride : {1, 2})
        for (int64_t k : {1, 2, 3, 5})
            for (int64_t outputs = 1; outputs <= 35; outputs += (outputs < 18 ? 1 : 4)) {
                const int64_t width = (outputs - 1) * stride + k;
                CAPTURE(stride);
                CAPTURE(k);
                CAPTURE(width);
                CHECK(check({{1, 2, k + 2, width}, {k, k}, {stride, stride}, {}, 0}, seed++) == 0);
            }
}

TEST_CASE("max pool 16: pads, ceil mode, asymmetric kernels and strides, 1-D, the light models' pools") {
    const Pool pools[] = {
        {{1, 3, 109, 109}, {3, 3}, {2, 2}, {}, 0},               // squeezenet's first pool
        {{1, 2, 54, 54}, {3, 3}, {2, 2}, {}, 1},                 // ceil mode
        {{1, 2, 56, 56}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},       // padded
        {{2, 2, 21, 47}, {2, 3}, {3, 2}, {0, 1, 1, 2}, 1},       // asymmetric
        {{1, 3, 13, 40}, {3, 3}, {1, 1}, {1, 1, 1, 1}, 0},       // stride 1, padded
        {{1, 2, 7, 37}, {1, 4}, {1, 2}, {0, 3, 0, 3}, 0},        // one row
        {{2, 3, 70}, {3}, {2}, {1, 1}, 1},                       // 1-D
        {{1, 2, 9, 50}, {3, 3}, {3, 3}, {}, 0},                  // stride 3: the 4-float rows
    };
    uint32_t seed = 4000;
    for (const Pool& p : pools) CHECK(check(p, seed++) == 0);
}
