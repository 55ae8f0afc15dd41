// snippets.h's Int8Lookup (y = table[x] on bytes: the VBMI, AVX2 and tbl/tbx kernels, the
// portable loop) against table[x] element by element on every ISA of the machine: lengths around
// the kernels' blocks (16, 32, 64), unaligned starts, every byte value, in place; nothing written
// past n.
#include <doctest/doctest.h>
#include <random>
#include <vector>
#include "runtime.h"

using namespace tessel;

TEST_CASE("int8 lookup: table[x] on every ISA of the machine, lengths around the blocks, unaligned, in place") {
    std::mt19937 rng(3400);
    uint8_t table[256];
    for (uint8_t& v : table) v = (uint8_t)(rng() % 256);
    std::vector<int64_t> lengths;
    for (int64_t n = 0; n <= 200; ++n) lengths.push_back(n);
    for (int64_t n : {255, 256, 257, 1023, 1024, 1025, 4096 + 47}) lengths.push_back(n);
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        CAPTURE(isa_name(isa));
        Int8Lookup lookup;
        if (!isa_available(isa)) {
            CHECK(lookup.init(isa) == Status::Unsupported);
            continue;
        }
        REQUIRE(lookup.init(isa) == Status::Ok);
        CHECK(lookup.isa() == isa);
        if (isa == Isa::Neon) CHECK(lookup.jit());
#if defined(__x86_64__)
        if (isa == Isa::Avx512) CHECK(lookup.jit() == (__builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw")));
#endif
#if defined(__x86_64__)
        if (isa == Isa::Avx2) CHECK(lookup.jit());
#endif
        if (isa == Isa::Ref || isa == Isa::Sse41) CHECK(!lookup.jit());
        for (int64_t n : lengths)
            for (int64_t start : {0, 1, 7}) {
                CAPTURE(n);
                CAPTURE(start);
                std::vector<uint8_t> x((size_t)(n + start + 80)), y(x.size(), 0xA5);
                for (size_t i = 0; i < x.size(); ++i) x[i] = (uint8_t)((i * 37 + rng()) % 256);
                lookup.run(table, x.data() + start, y.data() + start, n);
                int64_t bad = 0;
                for (int64_t i = 0; i < n; ++i) bad += y[(size_t)(start + i)] != table[x[(size_t)(start + i)]];
                CHECK(bad == 0);
                for (size_t i = 0; i < (size_t)start; ++i) CHECK(y[i] == 0xA5);
                for (size_t i = (size_t)(start + n); i < y.size(); ++i) CHECK(y[i] == 0xA5);
                std::vector<uint8_t> in_place = x;   // y over x
                lookup.run(table, in_place.data() + start, in_place.data() + start, n);
                bad = 0;
                for (int64_t i = 0; i < n; ++i) bad += in_place[(size_t)(start + i)] != table[x[(size_t)(start + i)]];
                CHECK(bad == 0);
            }
        std::vector<uint8_t> every(256), out(256);   // every byte value, at the high and low halves' edges
        for (int v = 0; v < 256; ++v) every[(size_t)v] = (uint8_t)v;
        lookup.run(table, every.data(), out.data(), 256);
        for (int v = 0; v < 256; ++v) CHECK(out[(size_t)v] == table[v]);
    }
}
