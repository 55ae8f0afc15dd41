// Unit-stride Max and AveragePool on small planes (runtime.h >>small pool planes: the padded
// plane as one PoolRows row) against the reference bit for bit, NaN and signed zeros included,
// at every ISA the machine has and 1 and 2 threads: kernels 1-5 and asymmetric, planes from 1x3
// to past two vectors a row, no pads (the row on the input itself), symmetric, asymmetric and
// maximal pads, count_include_pad, 1-D; a NaN first real tap of every border window; the
// row shape the step makes, between guard pages (without pads it reads the input plane).
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

struct SmallPool {
    Shape x, kernel, pads;
    const char* op = "MaxPool";
    int64_t count_include_pad = 0;
};

void build(OpTest& t, const SmallPool& p, const std::vector<float>& x) {
    t.op(p.op, {t.input(p.x, x)});
    if (p.count_include_pad) t.set_int("count_include_pad", 1);
    t.set_ints("kernel_shape", p.kernel);
    t.set_ints("strides", Shape(p.kernel.size(), 1));
    if (!p.pads.empty()) t.set_ints("pads", p.pads);
}

// Ties, NaNs and both zeros (the zeros the largest values, so the tap order decides).
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

// Outputs that differ from the reference's bits at every ISA, 1 and 2 threads; *planes counts
// the runs on a plane kernel (the small-plane step, or on AVX-512 whole planes), *small those
// on the small-plane step alone.
int64_t check(const SmallPool& p, const std::vector<float>& x, int64_t* planes, int64_t* small = nullptr) {
    return test::cpu_bits_differ_each_isa([&](OpTest& t) { build(t, p, x); }, [&](Isa isa, const test::CompiledRun& run) {
        const std::string plane = std::string("cpu:") + isa_name(isa) + ":" + p.op + ":plane";
        if (isa == Isa::Ref) CHECK(run.kernels.rfind(std::string("ref:") + p.op, 0) == 0);
        *planes += run.kernels.rfind(plane, 0) == 0;
        if (small) *small += run.kernels.rfind(plane + " ", 0) == 0;
    });
}

int64_t jit_isas() {
    int64_t n = 0;
    for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) n += isa_available(isa);
    return n;
}
}  // namespace

TEST_CASE("small pool planes: Max and AveragePool, kernels 1-5, planes 1x3 to 19x35, no, symmetric, asymmetric and maximal pads") {
    uint32_t seed = 7000;
    int64_t planes = 0, runs = 0;
    // few shapes: each is a row kernel in the process's table (4096 kernels, shared by the suite)
    const Shape kernels[] = {{1, 1}, {2, 2}, {3, 3}, {5, 5}, {2, 3}, {1, 4}};
    for (const Shape& k : kernels)
        for (int64_t h : {1, 7, 19})
            for (int64_t w : {3, 14, 35})
                for (int pads = 0; pads < 4; ++pads) {
                    Shape pad;   // no pads, (k-1)/2 each side, asymmetric, the most each side allows
                    if (pads == 1) pad = {(k[0] - 1) / 2, (k[1] - 1) / 2, k[0] / 2, k[1] / 2};
                    if (pads == 2) pad = {0, k[1] - 1, k[0] - 1, 0};
                    if (pads == 3) pad = {k[0] - 1, k[1] - 1, k[0] - 1, k[1] - 1};
                    if (h + (pad.empty() ? 0 : pad[0] + pad[2]) < k[0] || w + (pad.empty() ? 0 : pad[1] + pad[3]) < k[1]) continue;
                    CAPTURE(k[0]);
                    CAPTURE(k[1]);
                    CAPTURE(h);
                    CAPTURE(w);
                    CAPTURE(pads);
                    const Shape x = {1, 3, h, w};
                    const std::vector<float> v = values(3 * h * w, seed++);
                    CHECK(check({x, k, pad, "MaxPool"}, v, &planes) == 0);
                    CHECK(check({x, k, pad, "AveragePool", 0}, v, &planes) == 0);
                    CHECK(check({x, k, pad, "AveragePool", 1}, v, &planes) == 0);
                    runs += 3 * 2 * jit_isas();
                }
    CHECK(planes == runs);   // every case fits the small-plane kernel at every JIT target
}

TEST_CASE("small pool planes: 1-D, batches, the inception pools, and planes past the size stay on the row kernel") {
    uint32_t seed = 7500;
    int64_t planes = 0;
    const SmallPool fits[] = {
        {{2, 3, 40}, {3}, {1, 1}},                                  // 1-D
        {{2, 5, 7, 7}, {3, 3}, {1, 1, 1, 1}},                       // inception's 7x7 pools
        {{1, 4, 14, 14}, {3, 3}, {1, 1, 1, 1}, "AveragePool"},      // 14x14
        {{1, 2, 28, 28}, {3, 3}, {1, 1, 1, 1}, "AveragePool"},      // 28x28
    };
    for (const SmallPool& p : fits) {
        int64_t n = 1;
        for (int64_t d : p.x) n *= d;
        const int64_t before = planes;
        CHECK(check(p, values(n, seed++), &planes) == 0);
        CHECK(planes - before == 2 * jit_isas());
    }
    // The nets' last pool (one window, the whole plane) is the whole-window kernel's
    // (test_cpu_ops.cpp), not a small plane.
    const int64_t before_last = planes;
    CHECK(check({{1, 3, 7, 7}, {7, 7}, {}, "AveragePool"}, values(3 * 49, seed++), &planes) == 0);
    CHECK(planes == before_last);
    // 72 x 72 padded: not the small-plane step (the row kernel; on AVX-512 whole planes when
    // PoolPlanes' table has room, which depends on the suites run before).
    const SmallPool large = {{1, 2, 70, 70}, {3, 3}, {1, 1, 1, 1}};
    int64_t small = 0;
    CHECK(check(large, values(2 * 70 * 70, seed++), &planes, &small) == 0);
    CHECK(small == 0);
}

TEST_CASE("small pool planes: a NaN first real tap of each border window is the max, later NaNs are not") {
    int64_t planes = 0;
    for (int64_t pad : {1, 2}) {
        CAPTURE(pad);
        const int64_t h = 6, w = 9;
        for (int64_t at = 0; at < h * w; ++at) {   // one NaN in turn: first tap of some windows, later tap of others
            std::vector<float> v((size_t)(h * w));
            for (int64_t i = 0; i < h * w; ++i) v[(size_t)i] = (float)(i % 7) - 3.0f;
            v[(size_t)at] = NAN;
            CHECK(check({{1, 1, h, w}, {3, 3}, {pad, pad, pad, pad}, "MaxPool"}, v, &planes) == 0);
        }
    }
    CHECK(planes == 2 * 2 * 6 * 9 * jit_isas());
}

TEST_CASE("small pool planes: the plane's row shape reads only the plane, between guard pages") {
    uint32_t seed = 7900;
    for (Isa isa : {Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string target = isa_name(isa);
        CAPTURE(target);
        for (int64_t average : {0, 1})
            for (int64_t k : {1, 3, 5})
                for (int64_t h : {k, k + 6})
                    for (int64_t w : {k, k + 13, k + 30}) {
                        CAPTURE(average);
                        CAPTURE(k);
                        CAPTURE(h);
                        CAPTURE(w);
                        const int64_t out_h = h - k + 1, out_w = w - k + 1;
                        PoolRowShape shape;   // as cpu_pool_small_step makes it
                        shape.count = (out_h - 1) * w + out_w;
                        shape.kernel_w = k;
                        shape.stride_w = 1;
                        shape.row_floats = w;
                        shape.average = average;
                        PoolRows jit, ref;
                        REQUIRE(jit.init(shape, isa) == Status::Ok);
                        REQUIRE(ref.init(shape, Isa::Ref) == Status::Ok);
                        REQUIRE(jit.jit());
                        const std::vector<float> x = values(h * w, seed++);
                        std::vector<float> want((size_t)shape.count);
                        const float divisor = average ? (float)(k * k) : 1.0f;
                        ref.run(x.data(), k, want.data(), divisor);
                        for (bool end : {true, false}) {
                            test::GuardedBuffer in((size_t)(h * w), end), out((size_t)shape.count, end);
                            std::memcpy(in.data, x.data(), x.size() * sizeof(float));
                            jit.run(in.data, k, out.data, divisor);
                            int64_t bad = 0;
                            for (int64_t j = 0; j < shape.count; ++j) bad += !test::same_bits(out.data[j], want[(size_t)j]);
                            CHECK(bad == 0);
                        }
                    }
    }
}
