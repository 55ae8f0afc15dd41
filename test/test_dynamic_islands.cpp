// Plans at new input shapes share the CPU program's islands (>>plan reuse: islands) when the
// shapes keep the same dims equal, 0 or 1. A plan must still equal a compile at its shape:
// the same steps and kernels (PERF_COUNT's list) and the same outputs, bit for bit, also when
// the new shape changes which nodes fuse.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// a[A], b[B], d[2,1]: c = Relu(d); p = a + c ([2,A]); q = b + c ([2,B]). With A == B (or one
// of them 1) p and q broadcast to one domain and {c, p, q} is one island; with A != B, neither
// 1, they do not, and p and q fuse apart.
void build_model(Model* m) {
    NodeId a, b, d, c, p, q;
    REQUIRE(m->add_input("a", test::make_desc(ElementType::Float32, {-1}), &a) == Status::Ok);
    REQUIRE(m->add_input("b", test::make_desc(ElementType::Float32, {-1}), &b) == Status::Ok);
    REQUIRE(m->add_input("d", test::make_desc(ElementType::Float32, {2, 1}), &d) == Status::Ok);
    InputRef din[] = {InputRef::by_id(d)};
    REQUIRE(m->add_node("Relu", "c", din, 1, &c) == Status::Ok);
    InputRef pin[] = {InputRef::by_id(a), InputRef::by_id(c)};
    REQUIRE(m->add_node("Add", "p", pin, 1, &p) == Status::Ok);
    InputRef qin[] = {InputRef::by_id(b), InputRef::by_id(c)};
    REQUIRE(m->add_node("Add", "q", qin, 1, &q) == Status::Ok);
    REQUIRE(m->add_output("p_out", InputRef::by_id(p)) == Status::Ok);
    REQUIRE(m->add_output("q_out", InputRef::by_id(q)) == Status::Ok);
    REQUIRE(m->finalize() == Status::Ok);
}

Tensor filled(std::vector<int64_t> dims, float start) {
    Tensor t;
    REQUIRE(t.allocate(ElementType::Float32, Span<const int64_t>(dims.data(), dims.size())) == Status::Ok);
    for (uint64_t k = 0; k < t.elements(); ++k) t.data_as<float>()[k] = start + 0.25f * (float)k - 1.0f;
    return t;
}

struct Result {
    std::vector<std::pair<std::string, std::string>> steps;   // (node, kernel) per profiled step
    std::vector<std::vector<float>> outputs;
};

Result run(InferRequest& request, uint32_t outputs, const Tensor& a, const Tensor& b, const Tensor& d) {
    REQUIRE(request.set_input(0, a) == Status::Ok);
    REQUIRE(request.set_input(1, b) == Status::Ok);
    REQUIRE(request.set_input(2, d) == Status::Ok);
    Status s = request.infer();
    INFO(std::string(request.last_error()));
    REQUIRE(s == Status::Ok);
    Result r;
    for (const ProfileEntry& e : request.profiling_info()) r.steps.emplace_back(test::to_string(e.node), std::string(e.kernel));
    for (uint32_t i = 0; i < outputs; ++i) {
        const Tensor& t = request.output(i);
        r.outputs.emplace_back(t.data_as<float>(), t.data_as<float>() + t.elements());
    }
    return r;
}

}  // namespace

TEST_CASE("dynamic islands: a plan sharing islands equals a compile at its shape, also where the shape changes what fuses") {
    Model m;
    build_model(&m);
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}, {"SHAPE_CACHE_SIZE", "2"}};
    Core core;
    CompiledModel dynamic;
    REQUIRE(core.compile_model(m, "CPU", config, &dynamic) == Status::Ok);
    REQUIRE(dynamic.has_free_dims());
    InferRequest request;
    REQUIRE(dynamic.create_request(&request) == Status::Ok);
    Tensor d = filled({2, 1}, 1.5f);
    // (A, B): equal, then apart (the islands split), then apart the other way round and equal
    // again at new sizes (the same dims equal as before: the shared islands are taken).
    const int64_t sizes[][2] = {{3, 3}, {3, 4}, {5, 3}, {7, 7}, {1, 6}, {4, 3}, {3, 3}};
    size_t fused_apart = 0, fused_together = 0;
    for (const auto& size : sizes) {
        CAPTURE(size[0]);
        CAPTURE(size[1]);
        Tensor a = filled({size[0]}, 0.0f), b = filled({size[1]}, 3.0f);
        Result got = run(request, 2, a, b, d);
        CompiledModel fixed;
        InputShape shapes[] = {{"a", a.shape()}, {"b", b.shape()}};
        REQUIRE(core.compile_model(m, "CPU", config, &fixed, shapes) == Status::Ok);
        REQUIRE(!fixed.has_free_dims());
        InferRequest fixed_request;
        REQUIRE(fixed.create_request(&fixed_request) == Status::Ok);
        Result want = run(fixed_request, 2, a, b, d);
        CHECK(got.steps == want.steps);
        REQUIRE(got.outputs.size() == 2);
        for (int k = 0; k < 2; ++k) {
            REQUIRE(got.outputs[k].size() == want.outputs[k].size());
            CHECK(std::memcmp(got.outputs[k].data(), want.outputs[k].data(), got.outputs[k].size() * sizeof(float)) == 0);
        }
        // p[i, j] = a[j] + relu(d[i]); d is positive
        CHECK(got.outputs[0][(size_t)size[0]] == a.data_as<float>()[0] + d.data_as<float>()[1]);
        (want.steps.size() == 1 ? fused_together : fused_apart) += 1;
    }
    CHECK(fused_together >= 3);   // (3,3), (7,7), (1,6), (3,3): one kernel
    CHECK(fused_apart >= 2);      // (3,4), (5,3), (4,3): p and q apart
}

TEST_CASE("dynamic islands: a plan at a new shape keeps the user's affinities") {
    Model m;
    build_model(&m);
    // q on TEMPLATE by the user's affinity, where HETERO:CPU,TEMPLATE would give it to CPU.
    REQUIRE(m.graph.set_affinity(m.graph.find("q"), "TEMPLATE") == Status::Ok);
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}, {"SHAPE_CACHE_SIZE", "2"}};
    Core core;
    CompiledModel dynamic;
    REQUIRE(core.compile_model(m, "HETERO:CPU,TEMPLATE", config, &dynamic) == Status::Ok);
    InferRequest request;
    REQUIRE(dynamic.create_request(&request) == Status::Ok);
    Tensor d = filled({2, 1}, 1.5f);
    for (int64_t size : {3, 5, 7}) {
        CAPTURE(size);
        Tensor a = filled({size}, 0.0f), b = filled({size + 1}, 3.0f);
        Result got = run(request, 2, a, b, d);
        std::string q_device, p_device;
        for (const ProfileEntry& e : request.profiling_info()) {
            if (test::to_string(e.node) == "q") q_device = test::to_string(e.device);
            if (test::to_string(e.node) == "p") p_device = test::to_string(e.device);
        }
        CHECK(q_device == "TEMPLATE");
        CHECK(p_device == "CPU");
        REQUIRE(got.outputs.size() == 2);
        REQUIRE(got.outputs[1].size() == (size_t)(2 * (size + 1)));
        // q[i, j] = b[j] + relu(d[i])
        CHECK(got.outputs[1][(size_t)(size + 1)] == b.data_as<float>()[0] + d.data_as<float>()[1]);
    }
    CHECK(dynamic.cached_shape_plans() == 2);
}
