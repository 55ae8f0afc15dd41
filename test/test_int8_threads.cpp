// Quantized data movement on the CPU device: DequantizeLinear (uint8) -> Reshape, Flatten,
// Squeeze, Unsqueeze, Identity and at most one Transpose or nearest Resize -> QuantizeLinear
// (uint8) as one uint8 step (a channel shuffle, a pyramid's upsampling), bit for bit the float path's results (FUSION=NO runs the reference
// kernels) at every ISA of the machine and at 1 and 2 threads, split over rows and runs of
// bytes; and the forms it leaves to the float path.
#include <doctest/doctest.h>
#include <string>
#include <vector>
#include "op_test.h"
#include "runtime.h"

using namespace tessel;

namespace {
using test::OpTest;
using Shape = std::vector<int64_t>;

struct Move {
    const char* op;
    Shape arg;   // Reshape: the shape; Transpose: perm; Flatten: {axis}; Squeeze, Unsqueeze: axes
    std::vector<float> scales = {};   // Resize
    const char* mode = "nearest";     // Resize
    const char* transform = "half_pixel";
};

struct MoveCase {
    Shape x;
    std::vector<Move> moves;
    float sx = 0.02f, sy = 0.02f;
    uint8_t zx = 128, zy = 128;
    const char* kernel = "Transpose";   // the step's name when taken; nullptr: left to the float path
    bool shared_dequantize = false;     // the DequantizeLinear is a model output too
    bool shared_middle = false;         // the first movement op's result is a model output too
};

struct Result {
    std::vector<unsigned char> y;
    std::string kernels;
};

Result run_moves(const MoveCase& mc, bool fusion, Isa isa, uint32_t threads) {
    OpTest t;
    t.opset = 14;
    std::vector<uint8_t> x((size_t)test::count_of(mc.x));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (uint8_t)((i * 37 + i / 256) % 256);
    NodeId dq = t.op("DequantizeLinear", {t.input(mc.x, x), t.constant(Shape{}, std::vector<float>{mc.sx}),
                                          t.constant(Shape{}, std::vector<uint8_t>{mc.zx})});
    NodeId last = dq, first = kNoNode;
    for (const Move& m : mc.moves) {
        const std::string op = m.op;
        if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze")
            last = t.op(m.op, {InputRef::by_id(last), t.constant(Shape{(int64_t)m.arg.size()}, m.arg)});
        else if (op == "Resize")
            last = t.op(m.op, {InputRef::by_id(last), t.absent(), t.constant(Shape{(int64_t)m.scales.size()}, m.scales)});
        else
            last = t.op(m.op, {InputRef::by_id(last)});
        if (op == "Transpose") t.set_ints("perm", m.arg);
        if (op == "Flatten") t.set_int("axis", m.arg[0]);
        if (op == "Resize") {
            t.set_string("mode", m.mode);
            t.set_string("coordinate_transformation_mode", m.transform);
        }
        if (first == kNoNode) first = last;
    }
    NodeId q = t.op("QuantizeLinear", {InputRef::by_id(last), t.constant(Shape{}, std::vector<float>{mc.sy}),
                                       t.constant(Shape{}, std::vector<uint8_t>{mc.zy})});
    REQUIRE(t.model.add_output("y", InputRef::by_id(q, 0)) == Status::Ok);
    if (mc.shared_dequantize) REQUIRE(t.model.add_output("dq", InputRef::by_id(dq, 0)) == Status::Ok);
    if (mc.shared_middle) REQUIRE(t.model.add_output("middle", InputRef::by_id(first, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    const std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"},
                            {"FUSION", fusion ? "YES" : "NO"}, {"ISA", isa_name(isa)}};
    test::CompiledRun run;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 4), &run);
    Result r;
    r.kernels = run.kernels;
    const Tensor& out = run.request.output(0);
    const unsigned char* p = static_cast<const unsigned char*>(out.data());
    r.y.assign(p, p + out.bytes());
    return r;
}

void check_moves(const MoveCase& mc) {
    Result reference = run_moves(mc, false, Isa::Ref, 1);
    CHECK(reference.kernels.find("int8:") == std::string::npos);
    REQUIRE(!reference.y.empty());
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            const std::string target = isa_name(isa);
            CAPTURE(target);
            CAPTURE(threads);
            Result fast = run_moves(mc, true, isa, threads);
            INFO(fast.kernels);
            if (mc.kernel) {
                CHECK(fast.kernels.find(std::string(":") + mc.kernel + " ") != std::string::npos);
                CHECK(fast.kernels.find("int8:") == 0);
                CHECK(fast.kernels.find(":QuantizeLinear ") == std::string::npos);
                CHECK((fast.kernels.find(":DequantizeLinear ") != std::string::npos) == mc.shared_dequantize);
            } else {
                CHECK(fast.kernels.find(":QuantizeLinear ") != std::string::npos);   // the float path's own step
            }
            REQUIRE(fast.y.size() == reference.y.size());
            size_t bad = 0;
            for (size_t i = 0; i < fast.y.size(); ++i)
                if (fast.y[i] != reference.y[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)fast.y[i] << ", want " << (int)reference.y[i]);
            CHECK(bad == 0);
        }
    }
}

Move resize(std::vector<float> scales, const char* mode = "nearest", const char* transform = "half_pixel") {
    return Move{"Resize", {}, scales, mode, transform};
}

// ShuffleNet's channel shuffle of `channels` planes of h x w in `groups`.
std::vector<Move> shuffle(int64_t groups, int64_t channels, int64_t h, int64_t w) {
    return {{"Reshape", {1, groups, channels / groups, h, w}}, {"Transpose", {0, 2, 1, 3, 4}}, {"Reshape", {1, channels, h, w}}};
}
}  // namespace

TEST_CASE("int8 threads: a channel shuffle between grids that agree is a uint8 copy of planes, small and split over threads") {
    check_moves(MoveCase{{1, 12, 7, 7}, shuffle(3, 12, 7, 7)});                 // 588 bytes: one thread
    check_moves(MoveCase{{1, 240, 28, 28}, shuffle(3, 240, 28, 28)});           // 188160 bytes: split over both threads
    check_moves(MoveCase{{1, 60, 13, 9}, shuffle(4, 60, 13, 9), 0.05f, 0.05f, 0, 0});
}

TEST_CASE("int8 threads: a channel shuffle to another grid looks the moved bytes up (ties, clamps at both ends)") {
    check_moves(MoveCase{{1, 24, 14, 14}, shuffle(3, 24, 14, 14), 0.02f, 0.04f, 128, 100});
    check_moves(MoveCase{{1, 240, 28, 29}, shuffle(8, 240, 28, 29), 0.031f, 0.01f, 3, 250});   // rows with vector tails
}

TEST_CASE("int8 threads: transposes whose innermost walk is strided (NCHW to NHWC and back), Identity and Flatten around them") {
    check_moves(MoveCase{{2, 16, 9, 11}, {{"Transpose", {0, 2, 3, 1}}}, 0.02f, 0.03f, 10, 20});
    check_moves(MoveCase{{1, 64, 33, 40}, {{"Identity", {}}, {"Transpose", {0, 3, 1, 2}}, {"Flatten", {2}}}});
    check_moves(MoveCase{{1, 1, 1, 1}, {{"Transpose", {3, 2, 1, 0}}}, 0.02f, 0.5f, 128, 7});   // every dim merges away
}

TEST_CASE("int8 threads: reshapes only (Squeeze, Unsqueeze, Flatten) are a copy or one lookup, split into runs of bytes") {
    check_moves(MoveCase{{1, 3, 1, 5}, {{"Squeeze", {0, 2}}, {"Unsqueeze", {1}}}, 0.02f, 0.02f, 128, 128, "Reshape"});
    check_moves(MoveCase{{1, 50, 33, 31}, {{"Flatten", {1}}, {"Reshape", {50, 1023}}}, 0.02f, 0.02f, 128, 128, "Reshape"});
    // 135300 bytes: runs split over both threads, the last one short
    check_moves(MoveCase{{1, 50, 66, 41}, {{"Flatten", {1}}, {"Reshape", {50, 2706}}}, 0.02f, 0.02f, 128, 128, "Reshape"});
    check_moves(MoveCase{{1, 50, 66, 41}, {{"Unsqueeze", {0}}, {"Squeeze", {0}}}, 0.02f, 0.07f, 128, 90, "Reshape"});
}

TEST_CASE("int8 threads: a DequantizeLinear read elsewhere too stays; two Transposes or a shared middle value stay on the float path") {
    MoveCase shared{{1, 24, 14, 14}, shuffle(3, 24, 14, 14), 0.02f, 0.04f, 128, 100};
    shared.shared_dequantize = true;
    check_moves(shared);
    check_moves(MoveCase{{1, 24, 14, 14}, {{"Transpose", {0, 2, 3, 1}}, {"Transpose", {0, 3, 1, 2}}}, 0.02f, 0.02f, 128, 128, nullptr});
    MoveCase middle{{1, 24, 14, 14}, shuffle(3, 24, 14, 14)};
    middle.kernel = nullptr;
    middle.shared_middle = true;
    check_moves(middle);
}

TEST_CASE("int8 threads: a nearest Resize between quantized tensors gathers bytes (a detection head's 2x upsampling, other scales)") {
    check_moves(MoveCase{{1, 24, 5, 5}, {resize({1, 1, 2, 2})}, 0.02f, 0.02f, 128, 128, "Resize"});           // one thread
    check_moves(MoveCase{{1, 96, 20, 20}, {resize({1, 1, 2, 2})}, 0.02f, 0.02f, 128, 128, "Resize"});         // planes over both threads
    check_moves(MoveCase{{1, 96, 20, 20}, {resize({1, 1, 2, 2})}, 0.031f, 0.01f, 3, 250, "Resize"});           // to another grid
    check_moves(MoveCase{{2, 5, 9, 13}, {resize({1, 1, 1.7f, 0.6f}, "nearest", "asymmetric")}, 0.02f, 0.03f, 10, 20, "Resize"});
    check_moves(MoveCase{{1, 8, 6, 7}, {{"Reshape", {2, 4, 6, 7}}, resize({1, 1, 3, 2}), {"Flatten", {1}}}, 0.02f, 0.02f, 128, 128, "Resize"});
    check_moves(MoveCase{{1, 3, 4, 4}, {resize({1, 1, 0.5f, 0.5f})}, 0.02f, 0.05f, 128, 60, "Resize"});      // downscaling
    // 2x rows of 16 and 33 bytes: whole and overlapping 16-byte interleaves
    check_moves(MoveCase{{1, 3, 7, 16}, {resize({1, 1, 2, 2})}, 0.02f, 0.02f, 128, 128, "Resize"});
    check_moves(MoveCase{{1, 2, 3, 33}, {resize({1, 1, 1, 2}, "nearest", "asymmetric")}, 0.02f, 0.04f, 128, 90, "Resize"});
}

TEST_CASE("int8 threads: a linear Resize, one over the channels, or a Resize with a Transpose stay on the float path") {
    check_moves(MoveCase{{1, 4, 6, 6}, {resize({1, 1, 2, 2}, "linear")}, 0.02f, 0.02f, 128, 128, nullptr});
    check_moves(MoveCase{{1, 4, 6, 6}, {resize({1, 2, 1, 1})}, 0.02f, 0.02f, 128, 128, nullptr});
    check_moves(MoveCase{{1, 4, 6, 6}, {{"Transpose", {0, 1, 3, 2}}, resize({1, 1, 2, 2})}, 0.02f, 0.02f, 128, 128, nullptr});
}
