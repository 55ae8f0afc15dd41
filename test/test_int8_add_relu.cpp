// A Relu between a quantized binary island's op and its QuantizeLinear (a residual block's
// Add or Sum + Relu): folded into the island as a clamp at y's zero point, bit for bit the
// float path's results (FUSION=NO runs the reference kernels) at every ISA of the machine and
// at 1 and 2 threads, on both of the island's loops (dequantized floats and the pair table),
// and the forms that keep the Relu on the float path.
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

struct AddReluCase {
    const char* op = "Add";        // Add, Sum or Sub
    Shape a, b;                    // b may broadcast
    float sa = 0.02f, sb = 0.031f, sy = 0.04f;
    uint8_t za = 100, zb = 7, zy = 128;
    bool relu_shared = false;      // the Relu's output is a model output too: the float path stays
};

using test::every_byte;

void build(OpTest& t, const AddReluCase& c) {
    t.opset = 14;
    auto dq = [&](const Shape& shape, float s, uint8_t z, uint32_t mul, uint32_t add) {
        return t.op("DequantizeLinear", {t.input(shape, every_byte(shape, mul, add)), t.constant(Shape{}, std::vector<float>{s}),
                                         t.constant(Shape{}, std::vector<uint8_t>{z})});
    };
    NodeId a = dq(c.a, c.sa, c.za, 37, 0), b = dq(c.b, c.sb, c.zb, 53, 11);
    NodeId binary = t.op(c.op, {InputRef::by_id(a), InputRef::by_id(b)});
    NodeId relu = t.op("Relu", {InputRef::by_id(binary)});
    t.node = t.op("QuantizeLinear", {InputRef::by_id(relu), t.constant(Shape{}, std::vector<float>{c.sy}),
                                     t.constant(Shape{}, std::vector<uint8_t>{c.zy})});
    if (c.relu_shared) REQUIRE(t.model.add_output("relu", InputRef::by_id(relu, 0)) == Status::Ok);
}

std::vector<unsigned char> run(const AddReluCase& c, const char* isa, uint32_t threads, bool fusion, std::string* kernels) {
    OpTest t;
    build(t, c);
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    const std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"FUSION", fusion ? "YES" : "NO"},
                            {"ISA", isa ? isa : "ref"}};
    test::CompiledRun r;
    test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, isa ? 4 : 3), &r);
    *kernels = r.kernels;
    if (!r.compiled.output_count()) return {};
    const Tensor& out = r.request.output(c.relu_shared ? 1 : 0);
    const unsigned char* p = static_cast<const unsigned char*>(out.data());
    return std::vector<unsigned char>(p, p + out.bytes());
}

void check(const AddReluCase& c) {
    std::string kernels;
    const std::vector<unsigned char> want = run(c, nullptr, 1, false, &kernels);
    CHECK(kernels.find("int8:") == std::string::npos);
    REQUIRE(!want.empty());
    size_t clamped = 0;
    for (unsigned char v : want) clamped += v == c.zy;
    CHECK(clamped > 0);   // the Relu cuts something
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        const std::string what = "int8:" + test::int8_convert_target(isa) + ":" + (std::string(c.op) == "Sum" ? "Add" : c.op);
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            const std::vector<unsigned char> got = run(c, isa_name(isa), threads, true, &kernels);
            INFO(kernels);
            CHECK((kernels.find(what) != std::string::npos) == !c.relu_shared);
            CHECK((kernels.find("Relu") == std::string::npos && kernels.find("QuantizeLinear") == std::string::npos) ==
                  !c.relu_shared);
            REQUIRE(got.size() == want.size());
            size_t bad = 0;
            for (size_t i = 0; i < got.size(); ++i)
                if (got[i] != want[i] && bad++ < 5) MESSAGE("y[" << i << "] = " << (int)got[i] << ", want " << (int)want[i]);
            CHECK(bad == 0);
        }
    }
}
}  // namespace

TEST_CASE("int8 add relu: Add and Sum + Relu of two uint8 tensors, small and large (the pair table or the binary kernel)") {
    AddReluCase small;
    small.a = small.b = Shape{1, 16, 9, 11};
    check(small);
    AddReluCase large;
    large.a = large.b = Shape{1, 16, 60, 41};   // 39360 elements: the pair table (AVX2, AVX-512: Int8Convert::binary)
    check(large);
    AddReluCase sum = large;
    sum.op = "Sum";
    sum.zy = 3;   // y's zero point near 0: most of the range above it
    check(sum);
    AddReluCase ties;   // one grid everywhere: halves at every step
    ties.a = ties.b = Shape{2, 3, 50, 70};
    ties.sa = ties.sb = ties.sy = 0.05f;
    ties.za = 90, ties.zb = 200, ties.zy = 17;
    check(ties);
}

TEST_CASE("int8 add relu: the Add's output takes a uint8 operand's buffer where it dies there") {
    // b made in the model (a uint8 Sigmoid table step), read by the Add alone: y takes its
    // buffer; against the same net with b also a model output (never shared), bit for bit.
    const Shape shape = {1, 16, 60, 41};   // the binary kernel (or the pair table) over whole blocks and a tail
    auto run_net = [&](const char* isa, uint32_t threads, bool kept, size_t* arena, std::string* kernels) {
        OpTest t;
        t.opset = 14;
        auto scalar = [&](float v) { return t.constant(Shape{}, std::vector<float>{v}); };
        auto zero = [&](uint8_t z) { return t.constant(Shape{}, std::vector<uint8_t>{z}); };
        NodeId a = t.op("DequantizeLinear", {t.input(shape, every_byte(shape, 37, 0)), scalar(0.02f), zero(100)});
        NodeId x = t.op("DequantizeLinear", {t.input(shape, every_byte(shape, 53, 11)), scalar(0.05f), zero(128)});
        NodeId sig = t.op("Sigmoid", {InputRef::by_id(x)});
        NodeId bq = t.op("QuantizeLinear", {InputRef::by_id(sig), scalar(1.0f / 255), zero(0)});
        NodeId b = t.op("DequantizeLinear", {InputRef::by_id(bq), scalar(1.0f / 255), zero(0)});
        NodeId add = t.op("Add", {InputRef::by_id(a), InputRef::by_id(b)});
        NodeId relu = t.op("Relu", {InputRef::by_id(add)});
        NodeId y = t.op("QuantizeLinear", {InputRef::by_id(relu), scalar(0.03f), zero(20)});
        REQUIRE(t.model.add_output("y", InputRef::by_id(y, 0)) == Status::Ok);
        if (kept) REQUIRE(t.model.add_output("b", InputRef::by_id(bq, 0)) == Status::Ok);
        REQUIRE(t.model.finalize() == Status::Ok);
        const std::string count = std::to_string(threads);
        ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa}};
        test::CompiledRun r;
        test::compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &r);
        *arena = r.compiled.arena_bytes();
        *kernels = r.kernels;
        const Tensor& out = r.request.output(0);
        const unsigned char* p = static_cast<const unsigned char*>(out.data());
        return std::vector<unsigned char>(p, p + out.bytes());
    };
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            CAPTURE(isa_name(isa));
            CAPTURE(threads);
            size_t shared_arena = 0, kept_arena = 0;
            std::string kernels, kept_kernels;
            const std::vector<unsigned char> shared = run_net(isa_name(isa), threads, false, &shared_arena, &kernels);
            const std::vector<unsigned char> kept = run_net(isa_name(isa), threads, true, &kept_arena, &kept_kernels);
            INFO(kernels);
            CHECK(kernels.find(":Add") != std::string::npos);
            CHECK(kernels.find(":Table") != std::string::npos);
            CHECK(shared == kept);
            CHECK(shared_arena + (size_t)count_of(shape) <= kept_arena + 64);
        }
    }
}

TEST_CASE("int8 add relu: Sub + Relu with a broadcast operand; a Relu read elsewhere stays on the float path") {
    AddReluCase sub;
    sub.op = "Sub";
    sub.a = Shape{1, 8, 13, 17};
    sub.b = Shape{1, 8, 1, 1};
    check(sub);
    AddReluCase shared;
    shared.a = shared.b = Shape{1, 4, 9, 11};
    shared.relu_shared = true;
    check(shared);
}
