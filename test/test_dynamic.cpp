// runtime.h: models compiled with symbolic input dims, planned again per input-shape signature.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

TensorDesc float_desc(std::initializer_list<int64_t> dims) { return test::make_desc(ElementType::Float32, dims); }

// x[N,3,H,W] -> Conv(4, 3x3, pad 1) -> Add(bias) -> Relu -> Sigmoid -> y[N,4,H,W];
// GlobalAveragePool(y) -> Flatten -> z[N,4] (Flatten's shape comes from the folded dims).
void build_vision(Model* m) {
    NodeId x, w, b, conv, add, relu, sig, pool, flat;
    REQUIRE(m->add_input("x", float_desc({-1, 3, -1, -1}), &x) == Status::Ok);
    std::vector<float> weights(4 * 3 * 3 * 3);
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.05f * (float)((i * 7) % 13) - 0.3f;
    float bias[4] = {0.1f, -0.2f, 0.3f, 0.0f};
    REQUIRE(m->add_constant("w", float_desc({4, 3, 3, 3}), weights.data(), &w) == Status::Ok);
    REQUIRE(m->add_constant("b", float_desc({1, 4, 1, 1}), bias, &b) == Status::Ok);
    InputRef cin[] = {InputRef::by_id(x), InputRef::by_id(w)};
    REQUIRE(m->add_node("Conv", "conv", cin, 1, &conv) == Status::Ok);
    int64_t pads[] = {1, 1, 1, 1};
    REQUIRE(m->set_ints(conv, "pads", pads) == Status::Ok);
    InputRef ain[] = {InputRef::by_id(conv), InputRef::by_id(b)};
    REQUIRE(m->add_node("Add", "add", ain, 1, &add) == Status::Ok);
    InputRef rin[] = {InputRef::by_id(add)};
    REQUIRE(m->add_node("Relu", "relu", rin, 1, &relu) == Status::Ok);
    InputRef sin[] = {InputRef::by_id(relu)};
    REQUIRE(m->add_node("Sigmoid", "sig", sin, 1, &sig) == Status::Ok);
    InputRef pin[] = {InputRef::by_id(sig)};
    REQUIRE(m->add_node("GlobalAveragePool", "pool", pin, 1, &pool) == Status::Ok);
    InputRef fin[] = {InputRef::by_id(pool)};
    REQUIRE(m->add_node("Flatten", "flat", fin, 1, &flat) == Status::Ok);
    REQUIRE(m->add_output("y", InputRef::by_id(sig)) == Status::Ok);
    REQUIRE(m->add_output("z", InputRef::by_id(flat)) == Status::Ok);
    REQUIRE(m->finalize() == Status::Ok);
}

struct Shape4 { int64_t n, c, h, w; };
const Shape4 kShapes[] = {{1, 3, 48, 192}, {3, 3, 48, 320}, {8, 3, 48, 192}, {1, 3, 48, 320}, {3, 3, 48, 192}, {8, 3, 48, 320}};

void append_to_string(void* user, const char* data, size_t size) { static_cast<std::string*>(user)->append(data, size); }

}  // namespace

TEST_CASE("dynamic: compiled once with a symbolic batch and image size, runs every shape as a per-shape compile does") {
    Model m;
    build_vision(&m);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        INFO(std::string(device));
        std::vector<ConfigEntry> config;
        if (std::strncmp(device, "HETERO", 6) == 0) config.push_back({"TEMPLATE:SUPPORTED_OPS", "Conv,Add"});
        Core core;
        CompiledModel compiled;
        Status s = core.compile_model(m, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled);
        INFO(std::string(core.last_error()));
        REQUIRE(s == Status::Ok);
        REQUIRE(compiled.has_free_dims());
        CHECK(compiled.input_desc(0).dims[0] == -1);
        CHECK(compiled.input_desc(0).dims[1] == 3);
        CHECK(compiled.input_desc(0).dims[3] == -1);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        uint32_t seed = 1;
        for (const Shape4& shape : kShapes) {
            Tensor x = test::random_tensor({shape.n, shape.c, shape.h, shape.w}, seed++);
            REQUIRE(request.set_input(0, x) == Status::Ok);
            Status r = request.infer();
            INFO(std::string(request.last_error()));
            REQUIRE(r == Status::Ok);
            CHECK(request.output(0).dim(0) == shape.n);
            CHECK(request.output(0).dim(2) == shape.h);
            CHECK(request.output(0).dim(3) == shape.w);
            CHECK(request.output(1).dim(0) == shape.n);
            CHECK(request.output(1).dim(1) == 4);
            CHECK(test::outputs_of(request, 2) == test::fixed_shape_outputs(m, device, x, config));
        }
        CHECK(compiled.cached_shape_plans() == 6);
    }
}

TEST_CASE("dynamic: a request alternating between two shapes allocates nothing after its first two infers") {
    Model m;
    build_vision(&m);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        INFO(std::string(device));
        Core core;
        CompiledModel compiled;
        ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Conv"}};
        bool hetero = std::strncmp(device, "HETERO", 6) == 0;
        REQUIRE(core.compile_model(m, device, Span<const ConfigEntry>(config, hetero ? 1 : 0), &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        Tensor a = test::random_tensor({2, 3, 48, 192}, 1), b = test::random_tensor({1, 3, 48, 320}, 2);
        REQUIRE(request.set_input(0, a) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        REQUIRE(request.set_input(0, b) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        std::vector<std::vector<float>> out_b = test::outputs_of(request, 2);
        uint64_t before = tessel_test::allocation_count();
        for (int i = 0; i < 6; ++i) {
            REQUIRE(request.set_input(0, i % 2 ? b : a) == Status::Ok);
            REQUIRE(request.infer() == Status::Ok);
        }
        CHECK(tessel_test::allocation_count() == before);
        CHECK(test::outputs_of(request, 2) == out_b);
        // A second request on the same plans allocates only its own buffers.
        InferRequest other;
        REQUIRE(compiled.create_request(&other) == Status::Ok);
        REQUIRE(other.set_input(0, a) == Status::Ok);
        REQUIRE(other.infer() == Status::Ok);
        CHECK(compiled.cached_shape_plans() == 2);
    }
}

TEST_CASE("dynamic: the plan cache keeps SHAPE_CACHE_SIZE plans, the least recently used evicted, never one in use") {
    Model m;
    build_vision(&m);
    Core core;
    CompiledModel compiled;
    ConfigEntry zero[] = {{"SHAPE_CACHE_SIZE", "0"}};
    CHECK(core.compile_model(m, "CPU", zero, &compiled) == Status::InvalidArgument);
    CHECK(std::string(core.last_error()) == "SHAPE_CACHE_SIZE must be a count from 1 to 1024");
    ConfigEntry two[] = {{"SHAPE_CACHE_SIZE", "2"}};
    REQUIRE(core.compile_model(m, "CPU", two, &compiled) == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    Tensor s1 = test::random_tensor({1, 3, 8, 8}, 1), s2 = test::random_tensor({2, 3, 8, 8}, 2), s3 = test::random_tensor({3, 3, 8, 8}, 3);
    Tensor one = test::random_tensor({1, 3, 1, 1}, 4);   // the compile's own plan: never counted, never evicted
    for (const Tensor* x : {&s1, &s2, &s3, &one, &s1, &s2}) {
        REQUIRE(request.set_input(0, *x) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        CHECK(compiled.cached_shape_plans() <= 2);
        CHECK(test::outputs_of(request, 2) == test::fixed_shape_outputs(m, "CPU", *x));
    }
    // Two requests hold both cached plans: a third signature has no room while they do.
    InferRequest first, second, third;
    REQUIRE(compiled.create_request(&first) == Status::Ok);
    REQUIRE(compiled.create_request(&second) == Status::Ok);
    REQUIRE(compiled.create_request(&third) == Status::Ok);
    REQUIRE(first.set_input(0, s1) == Status::Ok);
    REQUIRE(first.infer() == Status::Ok);
    REQUIRE(second.set_input(0, s2) == Status::Ok);
    REQUIRE(second.infer() == Status::Ok);
    REQUIRE(request.set_input(0, one) == Status::Ok);   // lets go of its plan
    REQUIRE(request.infer() == Status::Ok);
    REQUIRE(third.set_input(0, s3) == Status::Ok);
    CHECK(third.infer() == Status::LimitExceeded);
    CHECK(std::string(third.last_error()) == "every one of the 2 cached input-shape plans is held by a request (raise SHAPE_CACHE_SIZE)");
    REQUIRE(second.set_input(0, one) == Status::Ok);
    REQUIRE(second.infer() == Status::Ok);
    REQUIRE(third.infer() == Status::Ok);
    CHECK(test::outputs_of(third, 2) == test::fixed_shape_outputs(m, "CPU", s3));
    CHECK(test::outputs_of(first, 2) == test::fixed_shape_outputs(m, "CPU", s1));
}

TEST_CASE("dynamic: shapes the model cannot take are refused with the exact status") {
    // x[N,-1] + c[8]: any batch, and a width that broadcasts with 8 (1 or 8).
    Model m;
    NodeId x, c, add;
    REQUIRE(m.add_input("x", float_desc({-1, -1}), &x) == Status::Ok);
    float c8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    REQUIRE(m.add_constant("c", float_desc({8}), c8, &c) == Status::Ok);
    InputRef in[] = {InputRef::by_id(x), InputRef::by_id(c)};
    REQUIRE(m.add_node("Add", "add", in, 1, &add) == Status::Ok);
    REQUIRE(m.add_output("y", InputRef::by_id(add)) == Status::Ok);
    REQUIRE(m.finalize() == Status::Ok);
    Core core;
    CompiledModel compiled;
    REQUIRE(core.compile_model(m, "CPU", {}, &compiled) == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    Tensor rank3 = test::random_tensor({2, 8, 1}, 1);
    CHECK(request.set_input(0, rank3) == Status::InvalidArgument);
    CHECK(std::string(request.last_error()) == "input 'x' is f32[-1,-1] (-1: any size); the tensor given is f32[2,8,1]");
    Tensor ints;
    int64_t two_by_eight[] = {2, 8};
    REQUIRE(ints.allocate(ElementType::Int32, two_by_eight) == Status::Ok);
    CHECK(request.set_input(0, ints) == Status::InvalidArgument);
    Tensor nine = test::random_tensor({2, 9}, 2);
    REQUIRE(request.set_input(0, nine) == Status::Ok);   // the shape is checked by planning it
    CHECK(request.infer() == Status::InvalidArgument);
    CHECK(std::string(request.last_error()) == "the model cannot take the input shapes x=f32[2,9]: Add 'add': input shapes do not broadcast");
    Tensor good = test::random_tensor({5, 8}, 3);
    REQUIRE(request.set_input(0, good) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(request.output(0).dim(0) == 5);
    CHECK(request.output(0).data_as<float>()[7] == good.data_as<float>()[7] + 8);
    // An output bound at one shape is not written at another.
    Tensor y5;
    int64_t five_by_eight[] = {5, 8};
    REQUIRE(y5.allocate(ElementType::Float32, five_by_eight) == Status::Ok);
    REQUIRE(request.set_output(0, y5) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(y5.data_as<float>()[7] == good.data_as<float>()[7] + 8);
    Tensor six = test::random_tensor({6, 8}, 6);
    REQUIRE(request.set_input(0, six) == Status::Ok);
    CHECK(request.infer() == Status::InvalidArgument);
    CHECK(std::string(request.last_error()) == "output 'y' is f32[6,8] at these input shapes; the tensor bound with set_output is f32[5,8]");
    Tensor y6;
    int64_t six_by_eight[] = {6, 8};
    REQUIRE(y6.allocate(ElementType::Float32, six_by_eight) == Status::Ok);
    REQUIRE(request.set_output(0, y6) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(y6.data_as<float>()[47] == six.data_as<float>()[47] + 8);
    REQUIRE(request.set_input(0, good) == Status::Ok);
    REQUIRE(request.set_output(0, y5) == Status::Ok);
    // Past Limits: LimitExceeded, and the request still runs the shapes it ran.
    core.limits().max_arena_bytes = 64 * 1024;
    Tensor big = test::random_tensor({4096, 8}, 4);
    REQUIRE(request.set_input(0, big) == Status::Ok);
    CHECK(request.infer() == Status::LimitExceeded);
    REQUIRE(request.set_input(0, good) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(request.output(0).data_as<float>()[9] == good.data_as<float>()[9] + 2);
    core.limits().max_tensor_elements = 1000;
    Tensor wide = test::random_tensor({200, 8}, 5);
    REQUIRE(request.set_input(0, wide) == Status::Ok);
    CHECK(request.infer() == Status::LimitExceeded);
}

TEST_CASE("dynamic: export and import keep the free dims; the imported model plans new shapes too") {
    Model m;
    build_vision(&m);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        INFO(std::string(device));
        std::vector<ConfigEntry> config = {{"SHAPE_CACHE_SIZE", "3"}};
        if (std::strncmp(device, "HETERO", 6) == 0) config.push_back({"TEMPLATE:SUPPORTED_OPS", "Conv"});
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(m, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled) == Status::Ok);
        std::string blob;
        REQUIRE(compiled.export_model(append_to_string, &blob) == Status::Ok);
        CompiledModel imported;
        Status s = core.import_model(blob.data(), blob.size(), &imported);
        INFO(std::string(core.last_error()));
        REQUIRE(s == Status::Ok);
        CHECK(imported.has_free_dims());
        CHECK(imported.input_desc(0).dims[0] == -1);
        CHECK(imported.input_desc(0).dims[1] == 3);
        std::string again;
        REQUIRE(imported.export_model(append_to_string, &again) == Status::Ok);
        CHECK(again.size() == blob.size());
        InferRequest request;
        REQUIRE(imported.create_request(&request) == Status::Ok);
        for (const Shape4& shape : {kShapes[0], kShapes[1]}) {
            Tensor x = test::random_tensor({shape.n, shape.c, shape.h, shape.w}, 7);
            REQUIRE(request.set_input(0, x) == Status::Ok);
            Status r = request.infer();
            INFO(std::string(request.last_error()));
            REQUIRE(r == Status::Ok);
            CHECK(test::outputs_of(request, 2) == test::fixed_shape_outputs(m, device, x, config));
        }
        // A fixed compile still writes a version 1 blob.
        Tensor x = test::random_tensor({1, 3, 8, 8}, 1);
        InputShape shape[] = {{"x", x.shape()}};
        CompiledModel fixed;
        REQUIRE(core.compile_model(m, device, Span<const ConfigEntry>(config.data(), config.size()), &fixed, shape) == Status::Ok);
        std::string fixed_blob;
        REQUIRE(fixed.export_model(append_to_string, &fixed_blob) == Status::Ok);
        CHECK(fixed_blob[8] == 1);
        CHECK(blob[8] == 2);
    }
}

TEST_CASE("dynamic: InputShape fixes some free dims and leaves the others free") {
    Model m;
    build_vision(&m);
    Core core;
    CompiledModel compiled;
    int64_t dims[] = {2, 3, -1, -1};
    InputShape shape[] = {{"x", Span<const int64_t>(dims, 4)}};
    REQUIRE(core.compile_model(m, "CPU", {}, &compiled, shape) == Status::Ok);
    REQUIRE(compiled.has_free_dims());
    CHECK(compiled.input_desc(0).dims[0] == 2);
    CHECK(compiled.input_desc(0).dims[2] == -1);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    Tensor batch3 = test::random_tensor({3, 3, 8, 8}, 1);
    CHECK(request.set_input(0, batch3) == Status::InvalidArgument);
    Tensor x = test::random_tensor({2, 3, 16, 24}, 2);
    REQUIRE(request.set_input(0, x) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(test::outputs_of(request, 2) == test::fixed_shape_outputs(m, "CPU", x));
}

TEST_CASE("dynamic: requests on four threads, each cycling through shapes, give the per-shape outputs") {
    Model m;
    build_vision(&m);
    Core core;
    CompiledModel compiled;
    ConfigEntry config[] = {{"SHAPE_CACHE_SIZE", "4"}};
    REQUIRE(core.compile_model(m, "CPU", config, &compiled) == Status::Ok);
    std::vector<Tensor> inputs;
    std::vector<std::vector<std::vector<float>>> expected;
    // One more shape than the cache holds: plans are evicted while others run. Three other
    // requests hold at most three plans, so a fourth always has room.
    for (int k = 0; k < 5; ++k) {
        inputs.push_back(test::random_tensor({1 + k % 3, 3, 8, 8 + 4 * k}, 10 + k));
        expected.push_back(test::fixed_shape_outputs(m, "CPU", inputs.back()));
    }
    std::vector<int> mismatches(4, 0), failures(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            InferRequest request;
            if (compiled.create_request(&request) != Status::Ok) { ++failures[t]; return; }
            for (int i = 0; i < 20; ++i) {
                int k = (i * (t + 1)) % 5;
                Status s = request.set_input(0, inputs[k]);
                if (s == Status::Ok) s = i % 2 ? request.infer() : (request.start_async() == Status::Ok ? request.wait() : Status::InvalidArgument);
                if (s != Status::Ok) { ++failures[t]; continue; }
                if (test::outputs_of(request, 2) != expected[k]) ++mismatches[t];
            }
        });
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < 4; ++t) {
        CHECK(failures[t] == 0);
        CHECK(mismatches[t] == 0);
    }
    CHECK(compiled.cached_shape_plans() <= 4);
}
