// Max and AveragePool's JIT rows (snippets.h >>pool rows, PoolRows; runtime.h's pool step)
// against the reference bit for bit, NaN and signed zeros included, at every ISA the machine
// has (ref runs the reference kernel, strides past 2 the 4-float rows): the row kernel alone
// for every output count to past two vectors of the widest width and the tile loop's rests,
// column strides 1 and 2, kernels 1, 3 and 6 (average: 1 and 3), 1 and 3 kernel rows, between
// PROT_NONE guard pages; then whole pool nodes with pads, count_include_pad, ceil mode,
// asymmetric kernels and strides, 1-D, 1 and 2 threads.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

struct Pool {
    Shape x, kernel, strides, pads;
    int64_t ceil_mode;
    const char* op = "MaxPool";
    int64_t count_include_pad = 0;
};

void build(OpTest& t, const Pool& p, const std::vector<float>& x) {
    t.op(p.op, {t.input(p.x, x)});
    if (p.count_include_pad) t.set_int("count_include_pad", 1);
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

using test::GuardedBuffer;

using test::same_bits;

// Bit-for-bit differences from the reference at every ISA and 1 and 2 threads (0: all equal).
int64_t check(const Pool& p, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : p.x) n *= d;
    const std::vector<float> x = values(n, seed);
    return test::cpu_bits_differ_each_isa([&](OpTest& t) { build(t, p, x); }, [&](Isa isa, const test::CompiledRun& run) {
        const std::string jit = std::string("cpu:") + isa_name(isa) + ":" + p.op, ref = std::string("ref:") + p.op;
        CHECK(run.kernels.rfind(isa == Isa::Ref ? ref.c_str() : p.strides.back() <= 2 ? jit.c_str() : "cpu:", 0) == 0);
    });
}
}  // namespace

TEST_CASE("pool rows: MaxPool nodes (kernels 1-5) and AveragePool nodes (kernel 3), every interior count to past two vectors, strides 1 and 2") {
    uint32_t seed = 3000;
    for (int64_t stride : {1, 2})
        for (int64_t k : {1, 2, 3, 5})
            for (int64_t outputs = 1; outputs <= 35; outputs += (outputs < 18 ? 1 : 4)) {
                const int64_t width = (outputs - 1) * stride + k;
                CAPTURE(stride);
                CAPTURE(k);
                CAPTURE(width);
                CHECK(check({{1, 2, k + 2, width}, {k, k}, {stride, stride}, {}, 0}, seed++) == 0);
                if (k == 3) CHECK(check({{1, 2, k + 2, width}, {k, k}, {stride, stride}, {}, 0, "AveragePool"}, seed++) == 0);
            }
}

TEST_CASE("pool rows: pool nodes with pads, ceil mode, asymmetric kernels and strides, 1-D, the light models' pools") {
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
    for (const Pool& p : pools) {
        CHECK(check(p, seed++) == 0);
        for (int64_t include : {0, 1}) {
            Pool average = p;
            average.op = "AveragePool";
            average.count_include_pad = include;
            CHECK(check(average, seed++) == 0);
        }
    }
}

TEST_CASE("pool rows: the row kernel, every tail, strides 1 and 2, kernels 1, 3, 6, between guard pages") {
    uint32_t seed = 5000;
    int64_t cases = 0;
    for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string target = isa_name(isa);
        CAPTURE(target);
        for (int64_t average : {0, 1})
            for (int64_t stride : {1, 2})
                for (int64_t k : {1, 3, 6})
                    for (int64_t count = 1; count <= 130; count = count < 33 ? count + 1 : count < 64 ? 64 : count < 67 ? 67 : count < 79 ? 79 : 131)
                        for (int64_t rows : {1, 3}) {
                            if (average && k == 6) continue;
                            CAPTURE(average);
                            CAPTURE(stride);
                            CAPTURE(k);
                            CAPTURE(count);
                            CAPTURE(rows);
                            PoolRowShape shape;
                            shape.count = count;
                            shape.kernel_w = k;
                            shape.stride_w = stride;
                            shape.row_floats = (count - 1) * stride + k + 1;   // a float between rows
                            shape.average = average;
                            const float divisor = average ? (float)(rows * k + 4) : 1.0f;   // not a power of 2: rounds
                            const int64_t span = (rows - 1) * shape.row_floats + (count - 1) * stride + k;   // the taps' floats
                            PoolRows jit, ref;
                            REQUIRE(jit.init(shape, isa) == Status::Ok);
                            REQUIRE(ref.init(shape, Isa::Ref) == Status::Ok);
                            REQUIRE(jit.jit());
                            REQUIRE(!ref.jit());
                            const std::vector<float> x = values(span, seed++);
                            std::vector<float> want((size_t)count);
                            ref.run(x.data(), rows, want.data(), divisor);
                            for (bool end : {true, false}) {
                                GuardedBuffer in((size_t)span, end), out((size_t)count, end);
                                std::memcpy(in.data, x.data(), x.size() * sizeof(float));
                                jit.run(in.data, rows, out.data, divisor);
                                int64_t bad = 0;
                                for (int64_t j = 0; j < count; ++j) bad += !same_bits(out.data[j], want[(size_t)j]);
                                CHECK(bad == 0);
                                ++cases;
                            }
                        }
    }
    MESSAGE(cases << " row kernels checked");
}

TEST_CASE("pool rows: bad row shapes") {
    PoolRowShape shape;
    PoolRows rows;
    shape.count = 0;
    CHECK(rows.init(shape, Isa::Ref) == Status::InvalidArgument);
    shape.count = 4;
    shape.kernel_w = 0;
    CHECK(rows.init(shape, Isa::Ref) == Status::InvalidArgument);
    shape.kernel_w = 3;
    shape.row_floats = 0;
    CHECK(rows.init(shape, Isa::Ref) == Status::InvalidArgument);
    shape.row_floats = 16;
    shape.average = 2;
    CHECK(rows.init(shape, Isa::Ref) == Status::InvalidArgument);
    shape.average = 1;
    shape.row_floats = 16;
    shape.stride_w = 3;   // a JIT target keeps the portable loop
    for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        REQUIRE(rows.init(shape, isa) == Status::Ok);
        CHECK(!rows.jit());
    }
    for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (!isa_available(isa)) CHECK(rows.init(shape, isa) == Status::Unsupported);
}

TEST_CASE("pool rows: no kernel rows (rows 0 and below) writes nothing and reads nothing") {
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string target = isa_name(isa);
        CAPTURE(target);
        for (int64_t average : {0, 1}) {
            CAPTURE(average);
            PoolRowShape shape;
            shape.count = 19;
            shape.kernel_w = 3;
            shape.row_floats = 22;
            shape.average = average;
            PoolRows rows;
            REQUIRE(rows.init(shape, isa) == Status::Ok);
            CHECK(rows.jit() == (isa != Isa::Ref));
            for (int64_t n : {(int64_t)0, (int64_t)-1}) {
                GuardedBuffer in(0, true), out((size_t)shape.count, true);   // in: no float readable
                for (int64_t j = 0; j < shape.count; ++j) out.data[j] = -7.0f;
                rows.run(in.data, n, out.data, 3.0f);
                int64_t changed = 0;
                for (int64_t j = 0; j < shape.count; ++j) changed += out.data[j] != -7.0f;
                CHECK(changed == 0);
            }
        }
    }
}
