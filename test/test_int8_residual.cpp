// A quantized binary island whose operand is an int8 conv's output (ResNet's residual Add):
// the conv's step does the island on each block it stores ("+Add" in its kernel name) and the
// island's step goes. Bit for bit the results of the same model with the conv's output also a
// model output, which keeps the two steps apart; for the conv's output as either operand, Add,
// Sub, Mul and Sum + Relu, 1x1 convs of stride 1 and 2 (on 7 x 7 outputs the pixel tiles where
// the CPU has them) and 3x3 convs (the implicit GEMM: the pixel tiles for maps a multiple of 16,
// else the group tiles), one and two images, 1 and 2 threads, on the island's binary kernel and
// its pair table; not where the other operand is made after the conv (two convs: the later one
// takes the island) or the conv's output has another reader.
#include <doctest/doctest.h>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;
using test::count_of;

using test::every_byte;

struct ResidualCase {
    const char* op = "Add";   // Add, Sub, Mul or Sum
    bool relu = false;
    uint32_t conv_side = 0;   // the conv's output as the island's operand 0 or 1
    Shape x = {1, 16, 14, 12};
    int64_t maps = 24, stride = 1, kernel = 1;   // a 3x3 kernel is padded by 1
    bool two_convs = false;   // the other operand another conv of x, made after this one
};

Shape output_shape(const ResidualCase& c) {
    const int64_t pad = c.kernel / 2;
    return {c.x[0], c.maps, (c.x[2] + 2 * pad - c.kernel) / c.stride + 1, (c.x[3] + 2 * pad - c.kernel) / c.stride + 1};
}

struct Built {
    NodeId conv_q[2] = {kNoNode, kNoNode};   // the conv groups' QuantizeLinears
};

// DequantizeLinear(x) -> 1x1 Conv (int8 weights per map, a bias) -> QuantizeLinear -> DequantizeLinear,
// the other operand DequantizeLinear(r) (or a second such conv of x), the island, QuantizeLinear.
Built build(OpTest& t, const ResidualCase& c) {
    t.opset = 14;
    const Shape out = output_shape(c);
    auto scalar = [&](float v) { return t.constant(Shape{}, std::vector<float>{v}); };
    auto zero = [&](uint8_t v) { return t.constant(Shape{}, std::vector<uint8_t>{v}); };
    const InputRef x = t.input(c.x, every_byte(c.x, 37, 5));
    auto conv = [&](uint32_t seed, NodeId* q) {
        NodeId dx = t.op("DequantizeLinear", {x, scalar(0.02f), zero(9)});
        std::vector<int8_t> w((size_t)(c.maps * c.x[1] * c.kernel * c.kernel));
        for (size_t i = 0; i < w.size(); ++i) w[i] = (int8_t)((int)((i * 29 + seed) % 255) - 127);
        std::vector<float> sw((size_t)c.maps), bias((size_t)c.maps);
        for (int64_t m = 0; m < c.maps; ++m) sw[(size_t)m] = 0.001f + 0.0001f * (float)((m * 7 + seed) % 13), bias[(size_t)m] = 0.05f * (float)(m % 5) - 0.1f;
        NodeId dw = t.op("DequantizeLinear", {t.constant(Shape{c.maps, c.x[1], c.kernel, c.kernel}, w), t.constant(Shape{c.maps}, sw),
                                              t.constant(Shape{c.maps}, std::vector<int8_t>((size_t)c.maps, 0))});
        t.set_int("axis", 0);
        NodeId cv = t.op("Conv", {InputRef::by_id(dx), InputRef::by_id(dw), t.constant(Shape{c.maps}, bias)});
        t.set_ints("strides", {c.stride, c.stride});
        if (c.kernel == 3) t.set_ints("pads", {1, 1, 1, 1});
        *q = t.op("QuantizeLinear", {InputRef::by_id(cv), scalar(0.03f + 0.01f * (float)seed), zero((uint8_t)(120 + seed))});
        return t.op("DequantizeLinear", {InputRef::by_id(*q), scalar(0.03f + 0.01f * (float)seed), zero((uint8_t)(120 + seed))});
    };
    Built b;
    NodeId mine = conv(1, &b.conv_q[0]), other = kNoNode;
    if (c.two_convs) {
        other = conv(2, &b.conv_q[1]);
    } else {
        other = t.op("DequantizeLinear", {t.input(out, every_byte(out, 53, 11)), scalar(0.025f), zero(100)});
    }
    const NodeId a = c.conv_side == 0 ? mine : other, bb = c.conv_side == 0 ? other : mine;
    NodeId island = t.op(c.op, {InputRef::by_id(a), InputRef::by_id(bb)});
    if (c.relu) island = t.op("Relu", {InputRef::by_id(island)});
    t.node = t.op("QuantizeLinear", {InputRef::by_id(island), scalar(std::string(c.op) == "Mul" ? 0.2f : 0.05f), zero(128)});
    return b;
}

struct Result {
    std::vector<unsigned char> y;
    std::string kernels;
};

// y, with the conv's quantized output a model output too when `conv_output` (no fusion then).
Result run(const ResidualCase& c, const char* isa, uint32_t threads, bool conv_output) {
    OpTest t;
    Built b = build(t, c);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    for (int k = 0; k < 2 && conv_output; ++k)
        if (b.conv_q[k] != kNoNode) REQUIRE(t.model.add_output(k ? "conv1" : "conv0", InputRef::by_id(b.conv_q[k], 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    const std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa}};
    test::CompiledRun r;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &r);
    Result out;
    out.kernels = r.kernels;
    const Tensor& y = r.request.output(0);
    const unsigned char* p = static_cast<const unsigned char*>(y.data());
    out.y.assign(p, p + y.bytes());
    return out;
}

size_t count_of_text(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

// Fused where the island's kernel runs rows (a JIT binary kernel, or the pair table of a large
// tensor), the same bytes as the steps apart. pixels: the conv takes the pixel tiles where the
// ISA's tiles have them and they pay for its shape (AVX-512's; AVX-VNNI's on k x k convs).
void check(const ResidualCase& c, bool pixels = false) {
    const std::string island = std::string(c.op) == "Sum" ? "Add" : c.op;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            const Result apart = run(c, isa_name(isa), threads, true), fused = run(c, isa_name(isa), threads, false);
            INFO(apart.kernels);
            INFO(fused.kernels);
            CHECK(apart.kernels.find("+" + island) == std::string::npos);
            const bool rows = test::int8_convert_target(isa) != "ref" || count_of(output_shape(c)) >= 32768;
            CHECK(count_of_text(fused.kernels, "+" + island + " ") == (rows ? 1u : 0u));
            Int8Gemm tiles;
            const Shape y = output_shape(c);
            const bool pixel_tiles = pixels && tiles.init(isa) == Status::Ok &&
                                     (c.kernel == 1 ? tiles.pixels_pay_one_tap(y[2] * y[3]) : tiles.pixels_pay(y[3]));
            CHECK(count_of_text(fused.kernels, ":Conv+pixels") == (pixel_tiles ? 1u : 0u));
            if (rows) CHECK(count_of_text(fused.kernels, ":Conv" + std::string(pixel_tiles ? "+pixels" : "") + "+" + island + " ") == 1u);
            CHECK(count_of_text(fused.kernels, ":" + island + " ") == (rows ? 0u : 1u));
            CHECK(fused.y == apart.y);
        }
    }
}

}  // namespace

TEST_CASE("int8 residual: an island on a 1x1 conv's output runs in the conv's step") {
    for (const char* op : {"Add", "Sub", "Mul"})
        for (uint32_t side : {0u, 1u}) {
            ResidualCase c;
            c.op = op;
            c.conv_side = side;
            CAPTURE(op);
            CAPTURE(side);
            check(c);
        }
    ResidualCase sum;   // ResNet's Sum + Relu, two images, strided, a tensor past the pair table's threshold
    sum.op = "Sum", sum.relu = true, sum.x = {2, 16, 56, 60}, sum.stride = 2;
    check(sum);
    ResidualCase large;
    large.x = {1, 8, 40, 40}, large.maps = 24, large.relu = true;
    check(large);
}

TEST_CASE("int8 residual: 1x1 convs on the pixel tiles and 3x3 convs take the island too") {
    for (int64_t stride : {1, 2}) {
        ResidualCase seven;   // 49 positions: the pixel tiles
        seven.x = {2, 16 * stride * stride, 7 * stride, 7 * stride}, seven.maps = 32, seven.stride = stride, seven.relu = true, seven.op = "Sum";
        CAPTURE(stride);
        check(seven, true);
        seven.maps = 24;   // not a multiple of 16: the VNNI tiles
        check(seven);
    }
    for (int64_t maps : {32, 24}) {
        ResidualCase k3;
        k3.x = {1, 16, 9, 11}, k3.kernel = 3, k3.maps = maps, k3.conv_side = 1;
        CAPTURE(maps);
        check(k3, maps == 32);
    }
}

TEST_CASE("int8 residual: two convs: the later one takes the island; a conv output read elsewhere keeps its step") {
    ResidualCase c;
    c.two_convs = true;
    for (uint32_t side : {0u, 1u}) {
        c.conv_side = side;
        CAPTURE(side);
        check(c);
    }
}
