// runtime.h >>plan reuse, >>dynamic shapes, >>stages: plans of one model at other shapes share
// the shape-free data (folded BatchNormalization weights, packed weight panels) and still equal
// a compile at each shape; staged models export and import.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

using test::shape_of;
using test::values_of;

std::vector<float> ramp(size_t n, float scale, float offset) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * (float)((i * 7) % 13) + offset;
    return v;
}

NodeId constant(Model* m, const char* name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    NodeId id = kNoNode;
    REQUIRE(m->add_constant(name, test::make_desc(ElementType::Float32, dims), v.data(), &id) == Status::Ok);
    return id;
}

// x[N,4,H,W] -> Conv(3x3) + BatchNormalization -> Relu -> ConvTranspose(2x2, stride 2) ->
// GlobalAveragePool -> Flatten -> Gemm (B transposed) -> MatMul: every op whose CPU step packs
// a constant weight, with N, H and W free.
void build_packed_model(Model* m) {
    NodeId x, conv, bn, relu, deconv, pool, flat, gemm, matmul;
    REQUIRE(m->add_input("x", test::make_desc(ElementType::Float32, {-1, 4, -1, -1}), &x) == Status::Ok);
    NodeId w = constant(m, "w", {8, 4, 3, 3}, ramp(8 * 4 * 9, 0.05f, -0.3f));
    InputRef cin[] = {InputRef::by_id(x), InputRef::by_id(w)};
    REQUIRE(m->add_node("Conv", "conv", cin, 1, &conv) == Status::Ok);
    int64_t pads[] = {1, 1, 1, 1};
    REQUIRE(m->set_ints(conv, "pads", pads) == Status::Ok);
    NodeId scale = constant(m, "scale", {8}, ramp(8, 0.1f, 0.5f)), bias = constant(m, "bias", {8}, ramp(8, 0.02f, -0.1f));
    NodeId mean = constant(m, "mean", {8}, ramp(8, 0.03f, 0.0f)), var = constant(m, "var", {8}, ramp(8, 0.1f, 0.2f));
    InputRef bin[] = {InputRef::by_id(conv), InputRef::by_id(scale), InputRef::by_id(bias), InputRef::by_id(mean), InputRef::by_id(var)};
    REQUIRE(m->add_node("BatchNormalization", "bn", bin, 1, &bn) == Status::Ok);
    InputRef rin[] = {InputRef::by_id(bn)};
    REQUIRE(m->add_node("Relu", "relu", rin, 1, &relu) == Status::Ok);
    NodeId dw = constant(m, "dw", {8, 6, 2, 2}, ramp(8 * 6 * 4, 0.04f, -0.2f));
    InputRef din[] = {InputRef::by_id(relu), InputRef::by_id(dw)};
    REQUIRE(m->add_node("ConvTranspose", "deconv", din, 1, &deconv) == Status::Ok);
    int64_t strides[] = {2, 2};
    REQUIRE(m->set_ints(deconv, "strides", strides) == Status::Ok);
    InputRef pin[] = {InputRef::by_id(deconv)};
    REQUIRE(m->add_node("GlobalAveragePool", "pool", pin, 1, &pool) == Status::Ok);
    InputRef fin[] = {InputRef::by_id(pool)};
    REQUIRE(m->add_node("Flatten", "flat", fin, 1, &flat) == Status::Ok);
    NodeId gb = constant(m, "gb", {24, 6}, ramp(24 * 6, 0.07f, -0.4f));
    InputRef gin[] = {InputRef::by_id(flat), InputRef::by_id(gb)};
    REQUIRE(m->add_node("Gemm", "gemm", gin, 1, &gemm) == Status::Ok);
    REQUIRE(m->set_int(gemm, "transB", 1) == Status::Ok);
    NodeId mb = constant(m, "mb", {24, 16}, ramp(24 * 16, 0.03f, -0.2f));
    InputRef min[] = {InputRef::by_id(gemm), InputRef::by_id(mb)};
    REQUIRE(m->add_node("MatMul", "matmul", min, 1, &matmul) == Status::Ok);
    REQUIRE(m->add_output("y", InputRef::by_id(matmul)) == Status::Ok);
    REQUIRE(m->add_output("feature", InputRef::by_id(relu)) == Status::Ok);
    m->opset = 17;
    REQUIRE(m->finalize() == Status::Ok);
}

Tensor image(const std::vector<int64_t>& dims) {
    Tensor t;
    REQUIRE(t.allocate(ElementType::Float32, Span<const int64_t>(dims.data(), dims.size())) == Status::Ok);
    float* p = t.data_as<float>();
    for (uint64_t i = 0; i < t.elements(); ++i) p[i] = 0.01f * (float)((i * 11) % 37) - 0.15f;
    return t;
}

// x[64] (or x[N]) through test::build_nonzero_gather: a later stage per count of non-zeros.
void build_nonzero_model(Model* m, bool free_length) { test::build_nonzero_gather(m, {free_length ? -1 : 64}); }

Tensor with_nonzeros(int length, int n) {
    Tensor t;
    int64_t dims[] = {length};
    REQUIRE(t.allocate(ElementType::Float32, Span<const int64_t>(dims, 1)) == Status::Ok);
    float* p = t.data_as<float>();
    for (int i = 0; i < length; ++i) p[i] = i % 2 == 0 && i / 2 < n ? 1.0f + (float)i : 0.0f;
    return t;
}

std::vector<float> expected_nonzero(const Tensor& x) {
    std::vector<float> y;
    for (float v : values_of(x)) if (v != 0.0f) y.push_back(2.0f * v);
    return y;
}

}  // namespace

TEST_CASE("dynamic plans: plans at other shapes share packed weights and equal a compile at each shape") {
    Model m;
    build_packed_model(&m);
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        INFO(std::string(device));
        Core core;
        ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "GlobalAveragePool,Flatten"}};
        Span<const ConfigEntry> entries(config, device[0] == 'H' ? 1 : 0);
        CompiledModel dynamic;
        Status s = core.compile_model(m, device, entries, &dynamic);
        INFO(std::string(core.last_error()));
        REQUIRE(s == Status::Ok);
        InferRequest request;
        REQUIRE(dynamic.create_request(&request) == Status::Ok);
        // Twice through the shapes: the second pass runs the cached plans.
        for (int pass = 0; pass < 2; ++pass)
            for (std::vector<int64_t> dims : {std::vector<int64_t>{1, 4, 5, 7}, std::vector<int64_t>{2, 4, 6, 3}, std::vector<int64_t>{3, 4, 9, 11}})
                test::check_plan_equals_fixed_compile(core, m, device, entries, request, image(dims));
        CHECK(dynamic.cached_shape_plans() == 3);
    }
}

TEST_CASE("dynamic plans: a plan at a new shape after the model that packed its weights is gone keeps working") {
    // Plans evicted from a one-entry cache: the shared data outlives each of them.
    Model m;
    build_packed_model(&m);
    Core core;
    ConfigEntry config[] = {{"SHAPE_CACHE_SIZE", "1"}};
    CompiledModel dynamic;
    REQUIRE(core.compile_model(m, "CPU", config, &dynamic) == Status::Ok);
    InferRequest request;
    REQUIRE(dynamic.create_request(&request) == Status::Ok);
    std::vector<float> first;
    for (int round = 0; round < 3; ++round)
        for (int64_t width : {5, 8}) {
            std::vector<int64_t> dims = {1, 4, 6, width};
            Tensor x = image(dims);
            REQUIRE(request.set_input(0, x) == Status::Ok);
            REQUIRE(request.infer() == Status::Ok);
            if (width == 5 && round == 0) first = values_of(request.output(0));
            if (width == 5) CHECK(values_of(request.output(0)) == first);
        }
    CHECK(dynamic.cached_shape_plans() == 1);
}

TEST_CASE("dynamic plans: a staged model exports and imports; the import plans its later stage per count") {
    for (bool free_length : {false, true}) {
        INFO("free length " << free_length);
        for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
            INFO(std::string(device));
            Model m;
            build_nonzero_model(&m, free_length);
            Core core;
            ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "NonZero,Mul"}, {"SHAPE_CACHE_SIZE", "4"}};
            Span<const ConfigEntry> entries(device[0] == 'H' ? config : config + 1, device[0] == 'H' ? 2 : 1);
            CompiledModel compiled;
            Status s = core.compile_model(m, device, entries, &compiled);
            INFO(std::string(core.last_error()));
            REQUIRE(s == Status::Ok);
            REQUIRE(compiled.data_dependent());
            CHECK(compiled.has_free_dims() == free_length);
            std::string blob;
            s = compiled.export_model(test::append_to_string, &blob);
            INFO(std::string(compiled.last_error()));
            REQUIRE(s == Status::Ok);
            CHECK(blob[8] == 3);   // format version 3: a later stage follows
            Core other;
            CompiledModel imported;
            s = other.import_model(blob.data(), blob.size(), &imported);
            INFO(std::string(other.last_error()));
            REQUIRE(s == Status::Ok);
            CHECK(imported.data_dependent());
            CHECK(imported.has_free_dims() == free_length);
            REQUIRE(imported.output_count() == 2);
            CHECK(test::to_string(imported.output(0).name) == "y");
            CHECK(imported.output_desc(1).type == compiled.output_desc(1).type);
            InferRequest request;
            REQUIRE(imported.create_request(&request) == Status::Ok);
            for (int pass = 0; pass < 2; ++pass)
                for (int n : {3, 0, 17, 3}) {
                    int length = free_length && n == 17 ? 40 : 64;
                    Tensor x = with_nonzeros(length, n);
                    REQUIRE(request.set_input(0, x) == Status::Ok);
                    s = request.infer();
                    INFO(std::string(request.last_error()));
                    REQUIRE(s == Status::Ok);
                    CHECK(shape_of(request.output(0)) == std::vector<int64_t>{n});
                    CHECK(values_of(request.output(0)) == expected_nonzero(x));
                    CHECK(shape_of(request.output(1)) == std::vector<int64_t>{1, n});
                }
            if (!free_length) CHECK(imported.cached_stage_plans() >= 1);   // else each input-shape plan has its own stages
            // Alternating two counts allocates nothing once both are planned.
            Tensor a = with_nonzeros(64, 5), b = with_nonzeros(64, 9);
            for (int i = 0; i < 2; ++i) {
                REQUIRE(request.set_input(0, i ? b : a) == Status::Ok);
                REQUIRE(request.infer() == Status::Ok);
            }
            uint64_t before = tessel_test::allocation_count();
            for (int i = 0; i < 4; ++i) {
                REQUIRE(request.set_input(0, i % 2 ? b : a) == Status::Ok);
                REQUIRE(request.infer() == Status::Ok);
            }
            CHECK(tessel_test::allocation_count() == before);
        }
    }
}

TEST_CASE("dynamic plans: a truncated staged blob is a ParseError, not a crash") {
    Model m;
    build_nonzero_model(&m, false);
    Core core;
    CompiledModel compiled;
    REQUIRE(core.compile_model(m, "CPU", Span<const ConfigEntry>(), &compiled) == Status::Ok);
    std::string blob;
    REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
    // Drop the last byte of the later stage and fix the header's size and checksum, so the
    // reader itself meets the short section.
    std::string cut = blob.substr(0, blob.size() - 1);
    uint64_t payload = cut.size() - 32, hash = 1469598103934665603ull;   // the blob's FNV-1a
    for (size_t i = 32; i < cut.size(); ++i) hash = (hash ^ (unsigned char)cut[i]) * 1099511628211ull;
    for (int i = 0; i < 8; ++i) cut[16 + i] = (char)(payload >> (8 * i));
    for (int i = 0; i < 8; ++i) cut[24 + i] = (char)(hash >> (8 * i));
    CompiledModel imported;
    CHECK(core.import_model(cut.data(), cut.size(), &imported) == Status::ParseError);
}
