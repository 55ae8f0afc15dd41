// runtime.h >>dynamic shapes, >>cpu device, >>op kernel table: what a new input-shape signature's
// plan skips or looks up faster (a program's own kernel cache made only without the model's,
// weights read by many nodes of one CPU program hashed, the float kernels the typed ones
// delegate to hashed) still gives a plan equal bit for bit to a compile at that shape.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

using test::shape_of;
using test::values_of;

std::vector<float> ramp(size_t n, float scale, float offset) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * (float)((i * 5) % 11) + offset;
    return v;
}

NodeId constant(Model* m, const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    NodeId id = kNoNode;
    REQUIRE(m->add_constant(StringView(name.c_str()), test::make_desc(ElementType::Float32, dims), v.data(), &id) == Status::Ok);
    return id;
}

NodeId node(Model* m, const char* op, const std::string& name, std::initializer_list<NodeId> inputs) {
    std::vector<InputRef> refs;
    for (NodeId p : inputs) refs.push_back(InputRef::by_id(p));
    NodeId id = kNoNode;
    REQUIRE(m->add_node(StringView(op), StringView(name.c_str()), Span<const InputRef>(refs.data(), refs.size()), 1, &id) == Status::Ok);
    return id;
}

// x[N,4,H,W], N, H, W free: `blocks` x (Conv(3x3) -> Add(b) -> Relu -> Mul(s) -> Sigmoid), then
// Sub(Mul(y, s0), Add(y, s0)): one weight read by several nodes of a program, and by every block.
void build_blocks(Model* m, int blocks) {
    NodeId p;
    REQUIRE(m->add_input("x", test::make_desc(ElementType::Float32, {-1, 4, -1, -1}), &p) == Status::Ok);
    NodeId s0 = constant(m, "s0", {1, 4, 1, 1}, ramp(4, 0.1f, 0.6f));
    for (int k = 0; k < blocks; ++k) {
        std::string n = std::to_string(k);
        NodeId w = constant(m, "w" + n, {4, 4, 3, 3}, ramp(4 * 4 * 9, 0.03f, -0.15f));
        NodeId b = constant(m, "b" + n, {1, 4, 1, 1}, ramp(4, 0.01f * (float)k, -0.02f));
        NodeId conv = node(m, "Conv", "conv" + n, {p, w});
        int64_t pads[] = {1, 1, 1, 1};
        REQUIRE(m->set_ints(conv, "pads", pads) == Status::Ok);
        NodeId relu = node(m, "Relu", "relu" + n, {node(m, "Add", "add" + n, {conv, b})});
        p = node(m, "Sigmoid", "sig" + n, {node(m, "Mul", "mul" + n, {relu, s0})});
    }
    NodeId y = node(m, "Sub", "sub", {node(m, "Mul", "tail_mul", {p, s0}), node(m, "Add", "tail_add", {p, s0})});
    REQUIRE(m->add_output("y", InputRef::by_id(y)) == Status::Ok);
    m->opset = 17;
    REQUIRE(m->finalize() == Status::Ok);
}

Tensor image(const std::vector<int64_t>& dims) {
    Tensor t;
    REQUIRE(t.allocate(ElementType::Float32, Span<const int64_t>(dims.data(), dims.size())) == Status::Ok);
    float* v = t.data_as<float>();
    for (uint64_t i = 0; i < t.elements(); ++i) v[i] = 0.02f * (float)((i * 13) % 29) - 0.25f;
    return t;
}

}  // namespace

TEST_CASE("dynamic specialize: a plan split into many programs equals a compile at each shape, bit for bit") {
    Model m;
    build_blocks(&m, 6);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        INFO(std::string(device));
        Core core;
        // TEMPLATE takes the Convs: a program per block on each device.
        ConfigEntry config[] = {{"SHAPE_CACHE_SIZE", "1"}, {"TEMPLATE:SUPPORTED_OPS", "Conv"}};
        Span<const ConfigEntry> entries(config, device[0] == 'H' ? 2 : 1);
        CompiledModel dynamic;
        Status s = core.compile_model(m, device, entries, &dynamic);
        INFO(std::string(core.last_error()));
        REQUIRE(s == Status::Ok);
        InferRequest request;
        REQUIRE(dynamic.create_request(&request) == Status::Ok);
        // A one-entry cache: every change of shape plans again.
        for (int pass = 0; pass < 2; ++pass)
            for (std::vector<int64_t> dims : {std::vector<int64_t>{1, 4, 5, 7}, std::vector<int64_t>{2, 4, 3, 9}, std::vector<int64_t>{1, 4, 8, 8}})
                test::check_plan_equals_fixed_compile(core, m, device, entries, request, image(dims));
        CHECK(dynamic.cached_shape_plans() == 1);
    }
}

TEST_CASE("dynamic specialize: the typed kernels' float32 path (Add, Sum, Pow, Clip) on every device") {
    // Add and Sum are typed kernels over the float elementwise one, Pow and Clip too: prepare
    // finds the float entry by name.
    Model m;
    NodeId x;
    REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {-1, 6}), &x) == Status::Ok);
    NodeId two = constant(&m, "two", {}, {2.0f});
    NodeId add = node(&m, "Add", "add", {x, x});
    NodeId sum = node(&m, "Sum", "sum", {x, add, x});
    NodeId pow = node(&m, "Pow", "pow", {x, two});
    NodeId lo = constant(&m, "lo", {}, {-0.1f}), hi = constant(&m, "hi", {}, {0.2f});
    NodeId clip = node(&m, "Clip", "clip", {x, lo, hi});
    REQUIRE(m.add_output("sum_out", InputRef::by_id(sum)) == Status::Ok);
    REQUIRE(m.add_output("pow_out", InputRef::by_id(pow)) == Status::Ok);
    REQUIRE(m.add_output("clip_out", InputRef::by_id(clip)) == Status::Ok);
    m.opset = 17;
    Status finalized = m.finalize();
    INFO(std::string(m.last_error()));
    REQUIRE(finalized == Status::Ok);
    for (const char* device : {"TEMPLATE", "CPU"}) {
        INFO(std::string(device));
        Core core;
        CompiledModel compiled;
        Status s = core.compile_model(m, device, {}, &compiled);
        INFO(std::string(core.last_error()));
        REQUIRE(s == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        for (int64_t rows : {1, 3}) {
            std::vector<int64_t> dims = {rows, 6};
            Tensor input;
            REQUIRE(input.allocate(ElementType::Float32, Span<const int64_t>(dims.data(), 2)) == Status::Ok);
            float* v = input.data_as<float>();
            for (int64_t i = 0; i < rows * 6; ++i) v[i] = 0.125f * (float)(i % 7) - 0.375f;   // exact in binary
            REQUIRE(request.set_input(0, input) == Status::Ok);
            s = request.infer();
            INFO(std::string(request.last_error()));
            REQUIRE(s == Status::Ok);
            std::vector<float> sums = values_of(request.output(0)), pows = values_of(request.output(1)), clips = values_of(request.output(2));
            REQUIRE(sums.size() == (size_t)(rows * 6));
            for (int64_t i = 0; i < rows * 6; ++i) {
                CHECK(sums[i] == 4.0f * v[i]);   // multiples of 1/8: every sum exact
                CHECK(pows[i] == doctest::Approx(v[i] * v[i]).epsilon(1e-6));
                CHECK(clips[i] == std::fmin(std::fmax(v[i], -0.1f), 0.2f));
            }
        }
    }
}

TEST_CASE("dynamic specialize: a graph that holds at any shape is copied with its kernels' descs; one with a folded Shape is prepared again") {
    Model blocks;
    build_blocks(&blocks, 3);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        INFO(std::string(device));
        Core core;
        ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Conv"}};
        Span<const ConfigEntry> entries(config, device[0] == 'H' ? 1 : 0);
        CompiledModel dynamic;
        REQUIRE(core.compile_model(blocks, device, entries, &dynamic) == Status::Ok);
        InferRequest request;
        REQUIRE(dynamic.create_request(&request) == Status::Ok);
        test::check_plan_equals_fixed_compile(core, blocks, device, entries, request, image({2, 4, 5, 6}));
        test::check_plan_equals_fixed_compile(core, blocks, device, entries, request, image({1, 4, 9, 3}));
        CHECK(dynamic.copied_shape_plans() == 2);
    }
    // y = Reshape(x, Concat(Shape(x)[0:1], [-1])) + 1: the first plan folds x's shape at N = W = 1.
    Model flatten;
    NodeId x;
    REQUIRE(flatten.add_input("x", test::make_desc(ElementType::Float32, {-1, 4, -1}), &x) == Status::Ok);
    NodeId shape = node(&flatten, "Shape", "shape", {x});
    REQUIRE(flatten.set_int(shape, "end", 1) == Status::Ok);
    NodeId rest;
    int64_t minus_one = -1;
    REQUIRE(flatten.add_constant("rest", test::make_desc(ElementType::Int64, {1}), &minus_one, &rest) == Status::Ok);
    NodeId target = node(&flatten, "Concat", "target", {shape, rest});
    REQUIRE(flatten.set_int(target, "axis", 0) == Status::Ok);
    NodeId y = node(&flatten, "Add", "add", {node(&flatten, "Reshape", "reshape", {x, target}), constant(&flatten, "one", {1}, {1.0f})});
    REQUIRE(flatten.add_output("y", InputRef::by_id(y)) == Status::Ok);
    flatten.opset = 17;
    REQUIRE(flatten.finalize() == Status::Ok);
    Core core;
    CompiledModel dynamic;
    REQUIRE(core.compile_model(flatten, "CPU", {}, &dynamic) == Status::Ok);
    InferRequest request;
    REQUIRE(dynamic.create_request(&request) == Status::Ok);
    for (std::vector<int64_t> dims : {std::vector<int64_t>{3, 4, 5}, std::vector<int64_t>{2, 4, 7}}) {
        test::check_plan_equals_fixed_compile(core, flatten, "CPU", {}, request, image(dims));
        CHECK(shape_of(request.output(0)) == std::vector<int64_t>{dims[0], 4 * dims[2]});
    }
    CHECK(dynamic.cached_shape_plans() == 2);
    CHECK(dynamic.copied_shape_plans() == 0);
}

TEST_CASE("dynamic specialize: a shape the copied graph cannot take fails as a compile at that shape does") {
    // x[N, W] + c[3]: W must be 1 or 3.
    Model m;
    NodeId x;
    REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {-1, -1}), &x) == Status::Ok);
    NodeId sum = node(&m, "Add", "add", {x, constant(&m, "c", {3}, {1.0f, 2.0f, 3.0f})});
    REQUIRE(m.add_output("y", InputRef::by_id(node(&m, "Relu", "relu", {sum}))) == Status::Ok);
    m.opset = 17;
    REQUIRE(m.finalize() == Status::Ok);
    Core core;
    CompiledModel dynamic;
    REQUIRE(core.compile_model(m, "CPU", {}, &dynamic) == Status::Ok);
    InferRequest request;
    REQUIRE(dynamic.create_request(&request) == Status::Ok);
    test::check_plan_equals_fixed_compile(core, m, "CPU", {}, request, image({2, 3}));
    CHECK(dynamic.copied_shape_plans() == 1);
    std::vector<int64_t> dims = {2, 4};
    InputShape shape[] = {{"x", Span<const int64_t>(dims.data(), 2)}};
    CompiledModel fixed;
    const Status fixed_status = core.compile_model(m, "CPU", {}, &fixed, shape);
    CHECK(fixed_status == Status::InvalidArgument);
    const std::string fixed_error = core.last_error();
    Tensor wide = image(dims);
    REQUIRE(request.set_input(0, wide) == Status::Ok);
    CHECK(request.infer() == fixed_status);
    INFO(std::string(request.last_error() + std::string(" / ") + fixed_error));
    CHECK(std::string(request.last_error()).find(fixed_error) != std::string::npos);
    // the request still runs at a shape the model takes
    test::check_plan_equals_fixed_compile(core, m, "CPU", {}, request, image({5, 1}));
    CHECK(dynamic.copied_shape_plans() == 2);
}
