// snippets.h's Int8Lookup (y = table[x] on bytes: the VBMI, AVX2 and tbl/tbx kernels, the
// portable loop) against table[x] element by element on every ISA of the machine: lengths around
// the kernels' blocks (16, 32, 64), unaligned starts, every byte value, in place; nothing written
// past n.
#include <doctest/doctest.h>
#include <cstring>
#include <random>
#include <vector>
#include "runtime.h"
#include "test_helpers.h"

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

// snippets.h's Int8MaxTaps (the uint8 MaxPool's column and row passes: the AVX-512 and AVX2
// kernels for strides 1 and 2, the portable loop) against the portable loop on every ISA of the
// machine: output counts around the 64- and 32-byte steps and AVX2's 16-, 8- and 1-byte ones, 1 to 5 taps a step apart, 1 and 3 rows of one plane
// and 2 rows of 3 planes, x ending at
// and starting after a PROT_NONE page (so a read past the taps faults), y's bytes past the
// outputs unchanged.
TEST_CASE("int8 max taps: uint8 maxima of strided taps on every ISA of the machine, exact reads, no write past the outputs") {
    std::mt19937 rng(3401);
    std::vector<int64_t> counts;
    for (int64_t n = 1; n <= 140; ++n) counts.push_back(n);
    for (int64_t n : {191, 192, 193, 255, 256, 257}) counts.push_back(n);
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        CAPTURE(isa_name(isa));
        Int8MaxTaps taps;
        if (!isa_available(isa)) {
            CHECK(taps.init(isa) == Status::Unsupported);
            continue;
        }
        REQUIRE(taps.init(isa) == Status::Ok);
        CHECK(taps.isa() == isa);
#if defined(__x86_64__)
        CHECK(taps.jit(1) == (isa == Isa::Avx2 || isa == Isa::Avx512));   // AVX-512's kernels or AVX2's
        CHECK(taps.jit(2) == (isa == Isa::Avx2 || isa == Isa::Avx512));
#else
        CHECK(!taps.jit(1));
#endif
        CHECK(!taps.jit(3));
        int64_t cases = 0, bad = 0;
        for (int64_t stride : {1, 2, 3})
            for (int64_t tap_count : {1, 2, 3, 5})
                for (int64_t rows_planes : {1, 3, 23})   // rows, or rows and planes (tens and units)
                    for (int64_t n : counts)
                        for (bool at_end : {true, false}) {
                            const int64_t step = tap_count == 1 ? 0 : (int64_t)(rng() % 3 == 0 ? 1 : 1 + rng() % 150);
                            const int64_t rows = rows_planes > 9 ? rows_planes / 10 : rows_planes, planes = rows_planes > 9 ? rows_planes % 10 : 1;
                            const int64_t x_row = n * stride + (int64_t)(rng() % 9), y_row = n + (int64_t)(rng() % 5);
                            const int64_t x_plane = (rows - 1) * x_row + (n - 1) * stride + (tap_count - 1) * step + 1 + (int64_t)(rng() % 7);
                            const int64_t y_plane = (rows - 1) * y_row + n + (int64_t)(rng() % 3);
                            const int64_t x_bytes = (planes - 1) * x_plane + (rows - 1) * x_row + (n - 1) * stride + (tap_count - 1) * step + 1;
                            const int64_t y_bytes = (planes - 1) * y_plane + (rows - 1) * y_row + n;
                            test::GuardedBuffer xb((size_t)(x_bytes + 3) / 4, at_end), yb((size_t)(y_bytes + 3) / 4, at_end);
                            uint8_t* x = reinterpret_cast<uint8_t*>(xb.data) + (at_end ? ((x_bytes + 3) / 4 * 4 - x_bytes) : 0);
                            uint8_t* y = reinterpret_cast<uint8_t*>(yb.data) + (at_end ? ((y_bytes + 3) / 4 * 4 - y_bytes) : 0);
                            for (int64_t i = 0; i < x_bytes; ++i) x[i] = (uint8_t)(rng() % 7 == 0 ? (rng() % 2) * 255 : rng() % 256);
                            std::vector<uint8_t> want((size_t)y_bytes, 0xA5);
                            std::memset(y, 0xA5, (size_t)y_bytes);
                            Int8MaxTapsArgs args;
                            args.x = x;
                            args.n = n;
                            args.taps = tap_count;
                            args.step = step;
                            args.stride = stride;
                            args.rows = rows;
                            args.x_row = x_row;
                            args.y_row = y_row;
                            args.planes = planes;
                            args.x_plane = x_plane;
                            args.y_plane = y_plane;
                            args.y = want.data();
                            Int8MaxTaps::run_portable(args);
                            args.y = y;
                            taps.run(args);
                            ++cases;
                            if (std::memcmp(y, want.data(), (size_t)y_bytes) != 0) {
                                if (++bad <= 3) {
                                    CAPTURE(stride);
                                    CAPTURE(tap_count);
                                    CAPTURE(rows);
                                    CAPTURE(planes);
                                    CAPTURE(n);
                                    CAPTURE(step);
                                    CHECK(false);
                                }
                            }
                        }
        CHECK(bad == 0);
        CHECK(cases == 3 * 4 * 3 * (int64_t)counts.size() * 2);
    }
    // the portable loop itself, by hand: maxima of 2 taps 3 apart at stride 2 over 2 rows, and
    // the same over a second plane 14 bytes on (its outputs 7 on)
    const uint8_t x[] = {1, 9, 4, 0, 7, 2, 8, 5, 3, 6, 255, 0, 17, 16, 3, 1, 2, 4, 0, 9, 5, 6, 7, 200, 8, 1, 100};
    uint8_t y[12] = {};
    Int8MaxTapsArgs args;
    args.x = x;
    args.y = y;
    args.n = 2;
    args.taps = 2;
    args.step = 3;
    args.stride = 2;
    args.rows = 2;
    args.x_row = 7;
    args.y_row = 3;
    args.planes = 2;
    args.x_plane = 14;
    args.y_plane = 7;
    Int8MaxTaps::run_portable(args);
    // max(x0, x3), max(x2, x5); max(x7, x10), max(x9, x12); then 14 on: max(x14, x17), max(x16,
    // x19); max(x21, x24), max(x23, x26)
    const uint8_t want[12] = {1, 4, 0, 255, 17, 0, 0, 4, 9, 0, 8, 200};
    CHECK(std::memcmp(y, want, sizeof y) == 0);
}
