// Int8 GEMM throughput: snippets.h's Int8Gemm tiles side by side on conv-shaped products
// (M maps x K = channels x taps, N = 1024 positions): the AMX tile, the AVX-512 VNNI tile, the
// AVX-VNNI or AVX2 tile, as the CPU has them. Per shape, the tile alone (B packed beforehand)
// and with B packed per call (what a conv does per block of positions), in GMAC/s of the
// thread's own CPU time, best of many runs, and each tile's time over the first tile's (the
// best the CPU has). It says which tiles ran; the runtime takes AMX where Int8Gemm::amx_pays.
// Last, where the CPU has them, the pixel tiles (AVX-512 VNNI's 8 positions x 48 maps, AVX-VNNI's
// 6 x 16) on a 3 x 3 conv's copy of 4 channels a pixel over 32 x 32 positions (K a multiple of
// 36), nothing packed per call, as the int8 k x k convs run them.
// Then Int8Gemv (one row: batch-1 fully connected layers) with each of its kernels the CPU has,
// in GB/s of packed weights against memcpy of the same bytes. Then, with AVX2, Int8WinogradF23
// on 3 x 3 convs against the 16-bit and byte-pair tiles' GEMM of the same product.
// Then Int8DepthwiseConv on the planes of shufflenet's and the OCR detector's depthwise convs,
// with each of its kernels the CPU has (AVX-512 VNNI, AVX-VNNI, AVX2's 16-bit one; NEON's sdot):
// per shape the sweep it took (rows or flat), nanoseconds per plane (padded copy and kernel)
// and GMAC/s of taps, over as many planes as those layers have; with AVX-512 VNNI also the
// whole-planes kernel (all the planes in one call, read where they lie: what the CPU device
// runs when there are planes enough for its threads, unless its cost model says the row
// kernels are faster: "rows taken"), its sweep and its speed-up.
//   build/bench/int8 [RUNS]
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "bench_util.h"

#include <time.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace tessel;

namespace {
double thread_cpu_seconds() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct Tile {
    std::string name;
    Int8Gemm gemm;
};

// The kernel Int8DepthwiseConv takes at (isa, dot_products, narrow weights), or nullptr when it has none.
const char* depthwise_kernel(Isa isa, bool dot, bool narrow) {
    Int8DepthwiseConv probe;
    DepthwiseShape first;
    first.in_h = first.in_w = first.out_h = first.out_w = 8;
    first.kernel_h = first.kernel_w = 3;
    first.pad_top = first.pad_left = 1;
    if (probe.init(first, isa, dot, false, narrow) != Status::Ok) return nullptr;
    if (probe.isa() == Isa::Avx512) return "AVX-512 VNNI";
    if (probe.byte_pairs()) return "AVX2 byte pairs, weights within [-64, 64]";
    if (probe.isa() == Isa::Avx2) return dot && int8_avx_vnni_available() ? "AVX-VNNI" : "AVX2 16-bit";
    return isa_name(probe.isa());
}

// Int8WinogradF23 on 3 x 3 convs of stride 1 (ResNet's, VGG's, SqueezeNet's), one image, one
// thread, in the CPU device's bands: the whole conv (transforms and products) in ms and in
// GMAC/s of the direct conv's multiply-adds, against the AVX2 16-bit and byte-pair tiles'
// GEMM of the same product (B packed beforehand: no im2col, so an upper bound for direct).
void winograd(int runs) {
    Int8WinogradF23 k;
    Int8Gemm sixteen, pairs;
    if (!isa_available(Isa::Avx2) || k.init(Isa::Avx2) != Status::Ok || !k.jit() || sixteen.init(Isa::Avx2, false, false) != Status::Ok ||
        pairs.init(Isa::Avx2, false, false, true) != Status::Ok)
        return;
    std::printf("\nint8 Winograd F(2x2, 3x3) (AVX2's 16-bit tile), 3x3 convs, pads 1, one thread, best of %d\n", runs);
    std::printf("%5s %5s %5s %9s %9s %9s %9s %9s %9s\n", "C", "M", "HxW", "ms", "GMAC/s", "16-bit", "pairs", "x16-bit", "xpairs");
    const int64_t shapes[][3] = {{64, 64, 56}, {128, 128, 28}, {256, 256, 14}, {512, 512, 7}, {256, 256, 56}, {512, 512, 28},
                                 {512, 512, 14}, {16, 64, 55}, {32, 128, 27}, {64, 256, 13}};
    for (const auto& shape : shapes) {
        const int64_t C = shape[0], M = shape[1], side = shape[2], plane = side * side, tiles_x = (side + 1) / 2;
        const int64_t tiles = tiles_x * tiles_x, band = detail::int8_winograd_band_panels(C) * Int8WinogradF23::kTileColumns;
        std::vector<uint8_t> x((size_t)(C * plane)), y((size_t)(M * plane));
        std::vector<int8_t> w((size_t)(M * C * 9));
        for (size_t i = 0; i < x.size(); ++i) x[i] = (uint8_t)(i * 13 % 256);
        for (size_t i = 0; i < w.size(); ++i) w[i] = (int8_t)((int)(i * 7 % 129) - 64);
        std::vector<int16_t> u(Int8WinogradF23::weights_bytes(M, C) / 2), v(Int8WinogradF23::input_bytes(C, band) / 2);
        std::vector<int32_t> sums(Int8WinogradF23::sums_bytes(band) / 4), bias((size_t)M, 3);
        std::vector<uint8_t> scratch(Int8WinogradF23::input_scratch_bytes(tiles_x, band));
        std::vector<float> scale((size_t)M, 1e-5f);
        Int8Requant rq;
        rq.bias = bias.data();
        rq.scale = scale.data();
        Int8WinogradF23::transform_weights(M, C, w.data(), u.data());
        const Int8WinogradF23::Planes planes{x.data(), C, plane, side, side, 1, 1, tiles_x, 128};
        double best = 1e30;
        for (int r = 0; r < runs; ++r) {
            const double s = thread_cpu_seconds();
            for (int64_t t0 = 0; t0 < tiles; t0 += band)
                k.convolve_band(planes, t0, std::min(band, tiles - t0), M, 0, (M + Int8WinogradF23::kMapRows - 1) / Int8WinogradF23::kMapRows,
                                u.data(), rq, side, side, y.data(), plane, v.data(), sums.data(), scratch.data());
            best = std::min(best, thread_cpu_seconds() - s);
        }
        // the direct conv's product: M x 9 C by 9 C x H W, B packed once
        const int64_t depth = 9 * C;
        double direct[2] = {1e30, 1e30};
        const Int8Gemm* gemms[2] = {&sixteen, &pairs};
        std::vector<uint8_t> b((size_t)(depth * plane));
        for (size_t i = 0; i < b.size(); ++i) b[i] = (uint8_t)(i * 13 % 256);
        for (int g = 0; g < 2; ++g) {
            std::vector<int8_t> pa(gemms[g]->packed_a_bytes(M, depth));
            std::vector<uint8_t> pb(gemms[g]->packed_b_bytes(depth, plane));
            gemms[g]->pack_a(M, depth, w.data(), depth, pa.data());
            gemms[g]->pack_b(depth, plane, b.data(), plane, pb.data());
            for (int r = 0; r < runs; ++r) {
                const double s = thread_cpu_seconds();
                gemms[g]->run(0, M, plane, depth, pa.data(), pb.data(), rq, y.data(), plane);
                direct[g] = std::min(direct[g], thread_cpu_seconds() - s);
            }
        }
        const double macs = (double)M * (double)depth * (double)plane;
        std::printf("%5lld %5lld %2lldx%-2lld %9.2f %9.0f %9.0f %9.0f %8.2fx %8.2fx\n", (long long)C, (long long)M, (long long)side,
                    (long long)side, best * 1e3, macs / best * 1e-9, macs / direct[0] * 1e-9, macs / direct[1] * 1e-9, direct[0] / best,
                    direct[1] / best);
    }
}

// Int8Gemv on batch-1 fully connected layers (one row of X): GB/s of packed weights read, each
// kernel the CPU has, against memcpy of the same bytes timed alongside (read and written once).
void gemv(int runs) {
    struct Kernel { const char* name; Isa isa; bool dot; };
    const Kernel kernels[] = {{"vnni", Isa::Avx512, true}, {"avx-vnni", Isa::Avx2, true}, {"avx2", Isa::Avx2, false}};
    std::vector<std::pair<const char*, Int8Gemv>> ready;
    for (const Kernel& k : kernels) {
        if (!isa_available(k.isa) || (k.isa == Isa::Avx512 && !int8_vnni_available()) || (k.dot && k.isa == Isa::Avx2 && !int8_avx_vnni_available()))
            continue;
        Int8Gemv g;
        if (g.init(k.isa, k.dot) == Status::Ok) ready.emplace_back(k.name, g);
    }
    if (ready.empty()) {
        std::printf("\nno int8 gemv kernel on this CPU\n");
        return;
    }
    std::printf("\nint8 gemv, one row (batch-1 fully connected), GB/s of packed weights (wall time), best of %d\n%6s %6s %8s %9s",
                runs, "N", "K", "MB", "memcpy");
    for (const auto& r : ready) std::printf(" %9s %9s", r.first, "/memcpy");
    std::printf("\n");
    const int64_t shapes[][2] = {{4096, 25088}, {4096, 9216}, {4096, 4096}, {1000, 4096}, {256, 1024}};
    for (const auto& shape : shapes) {
        const int64_t n = shape[0], k = shape[1], columns = (n + 63) / 64 * 64;
        std::vector<int8_t> w((size_t)(n * k)), packed(Int8Gemv::packed_bytes(n, k)), copy(packed.size());
        for (size_t i = 0; i < w.size(); ++i) w[i] = (int8_t)(i * 7 % 255 - 127);
        Int8Gemv::pack(n, k, w.data(), k, packed.data());
        std::vector<uint8_t> x((size_t)Int8Gemm::k_groups(k) * 4, 3), y((size_t)n);
        std::vector<int32_t> bias((size_t)columns, 1);
        std::vector<float> scale((size_t)columns, 1e-4f);
        Int8Requant rq;
        rq.bias = bias.data();
        rq.scale = scale.data();
        rq.lo = 0.0f;
        rq.hi = 255.0f;
        const double bytes = (double)packed.size();
        std::vector<double> best(ready.size() + 1, 1e30);
        for (int r = 0; r < runs; ++r) {   // alternating, so that each sees the machine as the others do
            auto t0 = std::chrono::steady_clock::now();
            std::memcpy(copy.data(), packed.data(), packed.size());
            best[0] = std::min(best[0], bench::seconds_since(t0));
            for (size_t i = 0; i < ready.size(); ++i) {
                t0 = std::chrono::steady_clock::now();
                ready[i].second.run(0, columns / 64, 1, n, k, packed.data(), x.data(), rq, y.data(), n);
                best[i + 1] = std::min(best[i + 1], bench::seconds_since(t0));
            }
        }
        std::printf("%6lld %6lld %8.1f %9.1f", (long long)n, (long long)k, bytes / 1048576.0, bytes / best[0] * 1e-9);
        for (size_t i = 0; i < ready.size(); ++i) std::printf(" %9.1f %8.2fx", bytes / best[i + 1] * 1e-9, best[0] / best[i + 1]);
        std::printf("\n");
    }
}

void depthwise(int runs, Isa isa, bool dot, bool narrow) {
    struct Plane { int64_t size, kernel, stride, planes; };
    const Plane planes[] = {{56, 3, 2, 112}, {28, 3, 1, 136}, {28, 3, 2, 136}, {14, 3, 1, 272}, {14, 3, 2, 272}, {7, 3, 1, 544},
                            {80, 3, 1, 16},  {40, 3, 1, 72},  {40, 5, 2, 72},  {20, 5, 1, 120}, {10, 3, 1, 480}, {10, 5, 2, 672},
                            {5, 5, 1, 960}};
    const bool whole = isa == Isa::Avx512 && dot && int8_vnni_available();
    std::printf("\nint8 depthwise (%s), best of %d\n%-16s %6s %6s %10s %8s", depthwise_kernel(isa, dot, narrow), runs, "plane", "planes",
                "sweep", "ns/plane", "GMAC/s");
    if (whole) std::printf(" %10s %10s %8s %9s", "planes", "ns/plane", "GMAC/s", "speed-up");
    std::printf("\n");
    for (const Plane& pl : planes) {
        DepthwiseShape s;
        s.in_h = s.in_w = pl.size;
        s.kernel_h = s.kernel_w = pl.kernel;
        s.stride_h = s.stride_w = pl.stride;
        s.pad_top = s.pad_left = pl.kernel / 2;
        s.out_h = s.out_w = (pl.size + 2 * (pl.kernel / 2) - pl.kernel) / pl.stride + 1;
        Int8DepthwiseConv conv;
        if (conv.init(s, isa, dot, whole, narrow) != Status::Ok) continue;
        std::vector<uint8_t> x((size_t)(pl.planes * pl.size * pl.size)), y((size_t)(pl.planes * s.out_h * s.out_w));
        for (size_t i = 0; i < x.size(); ++i) x[i] = (uint8_t)(i * 7);
        std::vector<int8_t> w((size_t)(pl.kernel * pl.kernel), 3), packed(conv.packed_weights_bytes());
        conv.pack_weights(w.data(), packed.data());
        std::vector<uint8_t> scratch(conv.scratch_bytes(s.out_h));
        Int8Requant rq;
        rq.lo = -128;
        rq.hi = 127;
        rq.zero_point = 128;
        double best = 1e30;
        for (int r = 0; r < runs; ++r) {
            const double start = thread_cpu_seconds();
            for (int64_t p = 0; p < pl.planes; ++p) {
                conv.pad(x.data() + p * pl.size * pl.size, 3, 0, s.out_h, scratch.data(), p > 0);
                conv.run_rows(scratch.data(), packed.data(), 0, 1e-2f, rq, y.data() + p * s.out_h * s.out_w, 0, s.out_h);
            }
            best = std::min(best, thread_cpu_seconds() - start);
        }
        char name[32];
        std::snprintf(name, sizeof name, "%lldx%lld %lldx%lld/%lld", (long long)pl.size, (long long)pl.size, (long long)pl.kernel,
                      (long long)pl.kernel, (long long)pl.stride);
        const double macs = (double)pl.planes * (double)(s.out_h * s.out_w * pl.kernel * pl.kernel);
        std::printf("%-16s %6lld %6s %10.1f %8.1f", name, (long long)pl.planes, conv.flat() ? "flat" : "rows",
                    best * 1e9 / (double)pl.planes, macs / best * 1e-9);
        if (conv.whole_planes()) {
            std::vector<int32_t> bias((size_t)pl.planes, 0);
            std::vector<float> scale((size_t)pl.planes, 1e-2f);
            std::vector<int8_t> all((size_t)pl.planes * packed.size());
            for (int64_t p = 0; p < pl.planes; ++p) std::memcpy(all.data() + p * (int64_t)packed.size(), packed.data(), packed.size());
            double planes_best = 1e30;
            for (int r = 0; r < runs; ++r) {
                const double start = thread_cpu_seconds();
                conv.run_planes(x.data(), 3, all.data(), bias.data(), scale.data(), rq, y.data(), pl.planes);
                planes_best = std::min(planes_best, thread_cpu_seconds() - start);
            }
            std::printf(" %10s %10.1f %8.1f %8.2fx%s", conv.planes_sweep(), planes_best * 1e9 / (double)pl.planes,
                        macs / planes_best * 1e-9, best / planes_best, conv.planes_pay() ? "" : " (rows taken)");
        }
        std::printf("\n");
    }
}
}  // namespace

int main(int argc, char** argv) {
    const int runs = argc > 1 ? std::atoi(argv[1]) : 15;
    std::vector<Tile> tiles;
    auto add = [&](const char* name, Isa isa, bool dot, bool amx, bool narrow = false) {
        Tile t;
        t.name = name;
        if (isa_available(isa) && t.gemm.init(isa, dot, amx, narrow) == Status::Ok && t.gemm.jit() && t.gemm.amx() == amx)
            tiles.push_back(t);
    };
    add("amx", Isa::Avx512, true, true);
    if (int8_vnni_available()) add("vnni", Isa::Avx512, true, false);
    if (int8_avx_vnni_available()) add("avx-vnni", Isa::Avx2, true, false);
    add("avx2", Isa::Avx2, false, false);
    add("pairs", Isa::Avx2, false, false, true);   // AVX2 without AVX-VNNI, weights within [-64, 64]
    add("neon", Isa::Neon, true, false);
    if (tiles.empty()) {
        std::printf("no int8 JIT tile on this CPU\n");
        return 0;
    }
    std::printf("int8 tiles:");
    for (const Tile& t : tiles) std::printf(" %s (%u x %u)", t.name.c_str(), t.gemm.mr(), t.gemm.nr());
    std::printf("; N = 1024, GMAC/s of thread CPU time, best of %d\n", runs);
    std::printf("%5s %5s", "M", "K");
    for (const Tile& t : tiles) std::printf(" %9s %9s", t.name.c_str(), "+pack");
    for (size_t i = 1; i < tiles.size(); ++i) std::printf(" %9s", (tiles[i].name + "/" + tiles[0].name).c_str());
    std::vector<const Tile*> pixels;   // the pixel tiles (Int8Gemm::run_pixels: AVX-512 VNNI, AVX-VNNI), as convs run them
    for (const Tile& t : tiles)
        if (t.gemm.runs_pixels()) {
            pixels.push_back(&t);
            std::printf(" %9s", (t.name + " px").c_str());
        }
    std::printf("\n");
    const int64_t n = 1024;
    const int64_t shapes[][2] = {{64, 27}, {64, 64}, {64, 576}, {128, 1152}, {256, 256}, {256, 2304}, {512, 4608}, {24, 144}};
    for (const auto& shape : shapes) {
        const int64_t m = shape[0], k = shape[1];
        std::vector<int8_t> a((size_t)(m * k));
        std::vector<uint8_t> b((size_t)(k * n)), c((size_t)(m * n));
        for (size_t i = 0; i < a.size(); ++i) a[i] = (int8_t)((int)(i * 7 % 129) - 64);   // within the pairs tile's range
        for (size_t i = 0; i < b.size(); ++i) b[i] = (uint8_t)(i * 13 % 256);
        std::vector<int32_t> bias((size_t)m, 3);
        std::vector<float> scale((size_t)m, 1e-5f);
        Int8Requant rq;
        rq.bias = bias.data();
        rq.scale = scale.data();
        std::printf("%5lld %5lld", (long long)m, (long long)k);
        std::vector<double> kernel_times;
        for (const Tile& t : tiles) {
            std::vector<int8_t> pa(t.gemm.packed_a_bytes(m, k));
            std::vector<uint8_t> pb(t.gemm.packed_b_bytes(k, n));
            t.gemm.pack_a(m, k, a.data(), k, pa.data());
            t.gemm.pack_b(k, n, b.data(), n, pb.data());
            double alone = 1e30, packed = 1e30;
            for (int r = 0; r < runs; ++r) {
                double s = thread_cpu_seconds();
                t.gemm.run(0, m, n, k, pa.data(), pb.data(), rq, c.data(), n);
                double mid = thread_cpu_seconds();
                t.gemm.pack_b(k, n, b.data(), n, pb.data());
                t.gemm.run(0, m, n, k, pa.data(), pb.data(), rq, c.data(), n);
                double end = thread_cpu_seconds();
                alone = std::min(alone, mid - s);
                packed = std::min(packed, end - mid);
            }
            const double macs = (double)m * (double)n * (double)k;
            std::printf(" %9.0f %9.0f", macs / alone * 1e-9, macs / packed * 1e-9);
            kernel_times.push_back(alone);
        }
        for (size_t i = 1; i < tiles.size(); ++i) std::printf(" %8.2fx", kernel_times[i] / kernel_times[0]);
        for (const Tile* px : pixels) {
            if (k % 36 != 0 || m % 16 != 0) {
                std::printf(" %9s", "-");
                continue;
            }
            // B as a 3 x 3 conv's copy over 32 x 32 positions: 4 channels a pixel, padded planes of
            // 34 x 34, K's group (c4, k1, k2) at 4 ((c4 34 + k1) 34 + k2) for position (0, 0)
            const int64_t side = 32, padded = side + 2;
            std::vector<uint8_t> copy((size_t)(k / 36 * padded * padded * 4 + 64));
            for (size_t i = 0; i < copy.size(); ++i) copy[i] = (uint8_t)(i * 13 % 256);
            std::vector<int8_t> pw(Int8Gemm::packed_pixels_bytes(m, k));
            px->gemm.pack_pixels(m, k, a.data(), k, pw.data());
            std::vector<int64_t> offsets((size_t)(k / 4));
            for (int64_t g = 0; g < k / 4; ++g) offsets[(size_t)g] = 4 * ((g / 9 * padded + g % 9 / 3) * padded + g % 3);
            const Int8Gemm::PixelRun run = {copy.data(), offsets.data(), padded, side, side, 0, side * side};
            double alone = 1e30;
            for (int r = 0; r < runs; ++r) {
                const double s = thread_cpu_seconds();
                px->gemm.run_pixels(m, 0, m, k, pw.data(), run, rq, c.data(), n);
                alone = std::min(alone, thread_cpu_seconds() - s);
            }
            std::printf(" %9.0f", (double)m * (double)n * (double)k / alone * 1e-9);
        }
        std::printf("\n");
    }
    gemv(runs);
    winograd(runs);
    // each kernel once: (auto), AVX2 with, then without the dot product, then by byte pairs
    struct DwKernel { Isa isa; bool dot, narrow; };
    const DwKernel kernels[] = {{default_isa(), true, false}, {Isa::Avx2, true, false}, {Isa::Avx2, false, false}, {Isa::Avx2, false, true}};
    const char* shown[4] = {};
    bool any = false;
    for (uint32_t k = 0; k < 4; ++k) {
        const DwKernel& dk = kernels[k];
        const char* kind = isa_available(dk.isa) ? depthwise_kernel(dk.isa, dk.dot, dk.narrow) : nullptr;
        bool seen = !kind;
        for (uint32_t j = 0; j < k && !seen; ++j) seen = shown[j] && std::strcmp(shown[j], kind) == 0;
        shown[k] = kind;
        any = any || kind;
        if (!seen) depthwise(runs, dk.isa, dk.dot, dk.narrow);
    }
    if (!any) std::printf("\nno int8 depthwise kernel on this CPU\n");
    return 0;
}
