// Int8 QDQ Convs on the implicit path (no im2col: the padded copy of the planes, split into
// stride x stride phase planes when strided, read row by row into the packed panels) against
// the integer oracle, bit for bit, at every ISA of the machine and at 1 and 2 threads:
// stride 2 and 3, unequal strides and pads, widths whose phase rows take the 32-byte loads
// and tails, channel counts off the K group of 4, map counts off the tile's rows, groups,
// and the forms that stay on im2col (dilated strided taps, a kernel narrower than its stride,
// a K under 64), whose stride-2 rows take vector loads of 32 and 16 bytes, tails, and the
// scalar loop where a load would pass the group's planes; and the splits for 2 threads when
// whole blocks load them unevenly: blocks evened out, or one block and the maps in parts;
// images and groups of several blocks, whose copies grow by the rows each block adds.
#include <doctest/doctest.h>
#include <cmath>
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

struct QConv {
    Shape x, w;                                  // NCHW, M x C/group x kh x kw
    int64_t sh = 2, sw = 2;                      // strides
    std::vector<int64_t> pads = {1, 1, 1, 1};    // top, left, bottom, right
    int64_t dh = 1, dw = 1;                      // dilations
    int64_t group = 1;
    bool pixels = false;                         // takes Int8Gemm::run_pixels where the CPU has it (1x1: on AVX-512)
};

void check(const QConv& cc, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t n_img = cc.x[0], channels = cc.x[1], h = cc.x[2], wd = cc.x[3], maps = cc.w[0], gc = cc.w[1];
    const int64_t kh = cc.w[2], kw = cc.w[3], gm = maps / cc.group;
    const int64_t oh = (h + cc.pads[0] + cc.pads[2] - (kh - 1) * cc.dh - 1) / cc.sh + 1;
    const int64_t ow = (wd + cc.pads[1] + cc.pads[3] - (kw - 1) * cc.dw - 1) / cc.sw + 1, per_map = gc * kh * kw;
    std::vector<uint8_t> x((size_t)count_of(cc.x));
    for (uint8_t& v : x) v = (uint8_t)(rng() % 256);
    const float sx = 0.02f, sy = 0.05f;
    const uint8_t zx = 37, zy = 101;
    std::vector<int8_t> q((size_t)count_of(cc.w));
    std::vector<float> w(q.size()), sw((size_t)maps);
    for (int64_t m = 0; m < maps; ++m) {
        sw[(size_t)m] = std::ldexp(1.0f + (float)(rng() % 100) / 100.0f, -9);
        for (int64_t k = 0; k < per_map; ++k) q[(size_t)(m * per_map + k)] = (int8_t)((int)(rng() % 255) - 127);
        q[(size_t)(m * per_map)] = 127;   // the quantizer's grid: 127 reached
        for (int64_t k = 0; k < per_map; ++k) w[(size_t)(m * per_map + k)] = (float)q[(size_t)(m * per_map + k)] * sw[(size_t)m];
    }
    std::vector<uint8_t> want((size_t)(n_img * maps * oh * ow));
    for (int64_t n = 0; n < n_img; ++n)
        for (int64_t m = 0; m < maps; ++m)
            for (int64_t o1 = 0; o1 < oh; ++o1)
                for (int64_t o2 = 0; o2 < ow; ++o2) {
                    int32_t acc = 0;
                    for (int64_t c = 0; c < gc; ++c)
                        for (int64_t k1 = 0; k1 < kh; ++k1)
                            for (int64_t k2 = 0; k2 < kw; ++k2) {
                                const int64_t i1 = o1 * cc.sh - cc.pads[0] + k1 * cc.dh, i2 = o2 * cc.sw - cc.pads[1] + k2 * cc.dw;
                                if (i1 < 0 || i1 >= h || i2 < 0 || i2 >= wd) continue;
                                const int64_t ci = m / gm * gc + c;
                                acc += ((int32_t)x[(size_t)(((n * channels + ci) * h + i1) * wd + i2)] - zx) *
                                       q[(size_t)(((m * gc + c) * kh + k1) * kw + k2)];
                            }
                    want[(size_t)(((n * maps + m) * oh + o1) * ow + o2)] =
                        int8_requantize(acc, 0, sx * sw[(size_t)m] / sy, -(float)zy, 255.0f - zy, zy);
                }
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            OpTest t;
            t.opset = 13;
            NodeId dq = t.op("DequantizeLinear", {t.input(cc.x, x), t.constant(Shape{}, std::vector<float>{sx}),
                                                  t.constant(Shape{}, std::vector<uint8_t>{zx})});
            t.op("Conv", {InputRef::by_id(dq), t.constant(cc.w, w)});
            t.set_ints("strides", {cc.sh, cc.sw});
            t.set_ints("pads", {cc.pads[0], cc.pads[1], cc.pads[2], cc.pads[3]});
            t.set_ints("dilations", {cc.dh, cc.dw});
            if (cc.group != 1) t.set_int("group", cc.group);
            NodeId conv = t.node;
            t.node = t.op("QuantizeLinear", {InputRef::by_id(conv), t.constant(Shape{}, std::vector<float>{sy}),
                                             t.constant(Shape{}, std::vector<uint8_t>{zy})});
            REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
            REQUIRE(t.model.finalize() == Status::Ok);
            const std::string count = std::to_string(threads);
            ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa_name(isa)}};
            test::CompiledRun r;
            test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &r);
            INFO(r.kernels);
            CHECK(r.kernels.find("int8:") != std::string::npos);
            Int8Gemm gemm;
            if (cc.pixels && (kh * kw > 1 || isa == Isa::Avx512) && gemm.init(isa) == Status::Ok && gemm.pixels_pay(ow))
                CHECK(r.kernels.find(std::string("int8:") + isa_name(isa) + ":Conv+pixels") != std::string::npos);
            const Tensor& out = r.request.output(0);
            REQUIRE(out.bytes() == want.size());
            const uint8_t* got = static_cast<const uint8_t*>(out.data());
            size_t bad = 0;
            for (size_t i = 0; i < want.size(); ++i)
                if (got[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)got[i] << ", want " << (int)want[i]);
            CHECK(bad == 0);
        }
    }
}
}  // namespace

TEST_CASE("int8 conv stride: strided QDQ Convs through phase planes, every ISA, the integer oracle's bits") {
    std::vector<QConv> cases;
    auto add = [&](Shape x, Shape w) {
        QConv c;
        c.x = x;
        c.w = w;
        cases.push_back(c);
        return &cases.back();
    };
    add({1, 8, 65, 67}, {8, 8, 3, 3});                      // phase rows of 34: 32-byte loads and tails
    add({1, 9, 23, 56}, {5, 9, 3, 3});                      // 28 wide, maps off the tile's rows, K off 4
    add({1, 64, 14, 14}, {20, 64, 3, 3});                   // a ResNet stage's last stride-2 3x3: out 7 x 7
    add({2, 17, 17, 33}, {6, 17, 2, 2})->pads = {0, 0, 0, 0};   // no padding, the last image's last rows
    add({1, 3, 41, 31}, {4, 3, 7, 7})->pads = {3, 3, 3, 3};   // a stem's 7x7
    add({1, 8, 20, 19}, {7, 8, 3, 3})->pads = {0, 1, 1, 0};   // unequal pads
    QConv* c = add({1, 8, 19, 40}, {9, 8, 3, 3});          // stride 1 down, 2 across
    c->sh = 1;
    c = add({1, 8, 40, 19}, {9, 8, 3, 3});                 // 2 down, 1 across
    c->sw = 1;
    c = add({1, 7, 25, 26}, {6, 7, 5, 3});                 // stride 3
    c->sh = c->sw = 3;
    c->pads = {2, 1, 2, 1};
    add({1, 16, 15, 17}, {12, 8, 3, 3})->group = 2;         // groups
    add({1, 3, 23, 28}, {6, 3, 3, 3});                      // K of 27: stays on im2col
    add({1, 4, 65, 67}, {8, 4, 3, 3});                      // im2col rows of 34: 16 + 16 + 2
    add({1, 3, 23, 56}, {5, 3, 3, 3});                      // im2col rows of 28: 16 + 8 + 4
    add({2, 5, 17, 33}, {6, 5, 2, 2})->pads = {0, 0, 0, 0};   // im2col rows of 16; the last image's last rows
    add({1, 1, 41, 31}, {4, 1, 7, 7})->pads = {3, 3, 3, 3};   // a one-channel 7x7 stem (K 49) on im2col
    c = add({1, 4, 12, 13}, {5, 4, 3, 3});                 // stride 1, dilated: the unstrided copy
    c->sh = c->sw = 1;
    c->dh = c->dw = 2;
    c->pads = {2, 2, 2, 2};
    c = add({1, 4, 17, 18}, {5, 4, 3, 3});                 // stride 2, dilated: stays on im2col
    c->dh = c->dw = 2;
    c->pads = {2, 2, 2, 2};
    c = add({1, 4, 17, 18}, {5, 4, 3, 1});                 // kernel 1 across stride 2: im2col
    c->pads = {1, 0, 1, 0};
    // K of 4608: B's panel in half of a 2 MB L2 takes 4 tiles of the 5 (implicit) a thread
    // would share unevenly, so at 2 threads one block and the maps in two parts; as many columns
    // on the direct 1x1 path; two images, whole images a thread
    c = add({1, 512, 14, 14}, {32, 512, 3, 3});
    c->sh = c->sw = 1;
    c = add({1, 4608, 15, 16}, {32, 4608, 1, 1});
    c->sh = c->sw = 1;
    c->pads = {0, 0, 0, 0};
    c = add({2, 512, 14, 14}, {32, 512, 3, 3});
    c->sh = c->sw = 1;
    // K of 2304 a group: blocks of 192 positions on a 1 MB L2 (3 an image and group), 432 on a
    // 2 MB one (2), each copying only the rows past its predecessor's in the same image and group
    c = add({2, 512, 20, 21}, {16, 256, 3, 3});
    c->sh = c->sw = 1;
    c->group = 2;
    // a 224 x 224 stem (K of 27): on a 2 MB L2, blocks of 606 and 444 tiles, evened out into two of 525
    c = add({1, 3, 224, 224}, {8, 3, 3, 3});
    c->sh = c->sw = 1;
    uint32_t seed = 3400;
    for (size_t i = 0; i < cases.size(); ++i) {
        CAPTURE(i);
        check(cases[i], seed);
        seed += 13;
    }
}

// The pixel tiles (AVX-512 VNNI with VBMI, AVX-VNNI on rows whose tiles hold 5 positions or
// more; the other ISAs run the same cases on their tiles): rows cut into even tiles of up to 8
// (AVX-VNNI: 6), maps in panels of 48 and the 32 + 32 or 16 left (AVX-VNNI: of 16), a part of
// the maps starting inside a panel (2 threads, one block), strides, groups, images, and odd and
// even counts of K groups. 1x1 convs whose 49 positions would leave the VNNI tiles' columns a
// quarter idle take them on AVX-512 (a copy of whole unpadded planes, and strided).
TEST_CASE("int8 conv stride: the pixel tiles, every row tail and panel of maps, the integer oracle's bits") {
    std::vector<QConv> cases;
    auto add = [&](Shape x, Shape w, int64_t stride) {
        QConv c;
        c.x = x;
        c.w = w;
        c.sh = c.sw = stride;
        c.pixels = true;
        cases.push_back(c);
        return &cases.back();
    };
    add({1, 8, 9, 13}, {16, 8, 3, 3}, 1);                    // rows of 13: 7 + 6 (AVX-VNNI 5 + 4 + 4); one vector of maps
    add({1, 8, 7, 7}, {64, 8, 3, 3}, 1);                     // 64 maps as 32 + 32; tiles of 7
    add({2, 12, 11, 13}, {112, 12, 3, 3}, 1);                // 48 + 32 + 32; K of 27 groups; two images
    add({1, 16, 13, 30}, {80, 16, 3, 3}, 2);                 // stride 2: 48 + 32 maps, rows of 15 (8 + 7, 5 + 5 + 5)
    add({1, 32, 10, 10}, {96, 16, 3, 3}, 1)->group = 2;      // two groups of 48 maps
    add({1, 8, 5, 3}, {32, 8, 3, 3}, 1);                     // rows of 3: a tile a row
    add({1, 8, 9, 12}, {32, 8, 3, 3}, 1)->pads = {0, 0, 0, 0};   // no pads: two dropped columns a row
    add({1, 8, 20, 14}, {48, 8, 3, 3}, 1)->pads = {0, 1, 1, 0};  // unequal pads
    add({1, 64, 6, 6}, {64, 64, 3, 3}, 1);                   // at 2 threads 3 rows each
    add({1, 8, 7, 7}, {64, 8, 3, 3}, 1);                     // 7 rows: at 2 threads the maps in parts of 32
    add({1, 64, 5, 5}, {80, 64, 3, 3}, 1);                   // parts of 32 and 48 maps: the second from inside a panel
    add({1, 512, 3, 18}, {512, 512, 3, 3}, 1);               // rows of 18 (6 + 6 + 6); K of 4608: runs of 48 maps
    add({2, 64, 7, 7}, {64, 64, 1, 1}, 1)->pads = {0, 0, 0, 0};      // 1x1 on 7 x 7: two images, maps in parts at 2 threads
    add({1, 128, 14, 14}, {48, 128, 1, 1}, 2)->pads = {0, 0, 0, 0};  // 1x1 of stride 2 down to 7 x 7
    QConv* c = add({1, 18, 7, 7}, {32, 18, 1, 1}, 1);               // channels off 4: the VNNI tiles
    c->pads = {0, 0, 0, 0};
    c->pixels = false;
    uint32_t seed = 5100;
    for (size_t i = 0; i < cases.size(); ++i) {
        CAPTURE(i);
        check(cases[i], seed);
        seed += 17;
    }
}
