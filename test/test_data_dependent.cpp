// runtime.h: ops whose output shapes depend on data (NonZero, Unique, NonMaxSuppression, a
// run-time Compress, TopK's k, shapes computed at run time) and the stages after them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "op_test.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;
using test::OpTest;

namespace {

const char* const kDevices[] = {"CPU", "HETERO:TEMPLATE,CPU"};

template <class T>
std::vector<T> values_of(const Tensor& t) {
    std::vector<T> v(t.elements());
    if (!v.empty()) std::memcpy(v.data(), t.data(), t.bytes());
    return v;
}

std::vector<int64_t> shape_of(const Tensor& t) { return std::vector<int64_t>(t.shape().data, t.shape().data + t.rank()); }

template <class T>
Tensor tensor(ElementType type, std::vector<int64_t> shape, std::vector<T> v) {
    Tensor t;
    REQUIRE(t.allocate(type, Span<const int64_t>(shape.data(), shape.size())) == Status::Ok);
    REQUIRE(t.bytes() == v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(t.data(), v.data(), t.bytes());
    return t;
}

// HETERO:TEMPLATE,CPU with TEMPLATE taking the ops that read data-dependent values, so stages
// cross devices too.
std::vector<ConfigEntry> config_for(const char* device) {
    if (StringView(device) == StringView("CPU")) return {};
    return {{"TEMPLATE:SUPPORTED_OPS", "NonZero,Transpose,Unique,Reshape,Add"}};
}

// x[2, 3] through test::build_nonzero_gather: a later stage per count of non-zeros.
void build_gather_nonzero(Model* m) { test::build_nonzero_gather(m, {2, 3}); }

// x[64] with n ones (at the even positions).
Tensor with_nonzeros(int n) {
    std::vector<float> v(64, 0.0f);
    for (int i = 0; i < n; ++i) v[(size_t)i * 2] = 1.0f;
    return tensor<float>(ElementType::Float32, {64}, v);
}

}  // namespace

TEST_CASE("data-dependent: NonZero gives the indices of the non-zero elements, row-major") {
    for (const char* device : kDevices) {
        OpTest t;
        t.op("NonZero", {t.input<float>({2, 3}, {0, 1.5f, 0, -2, 0, 3})});
        REQUIRE(t.infer(device) == Status::Ok);
        CHECK(shape_of(t.outputs[0]) == std::vector<int64_t>{2, 3});
        CHECK(values_of<int64_t>(t.outputs[0]) == std::vector<int64_t>{0, 1, 1, 1, 0, 2});
    }
    SUBCASE("none: a [rank, 0] output") {
        OpTest t;
        t.op("NonZero", {t.input<int32_t>({2, 2}, {0, 0, 0, 0})});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(shape_of(t.outputs[0]) == std::vector<int64_t>{2, 0});
    }
    SUBCASE("bool and int8") {
        OpTest t;
        t.op("NonZero", {t.input<uint8_t>({4}, {1, 0, 0, 1}, ElementType::Bool)});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(values_of<int64_t>(t.outputs[0]) == std::vector<int64_t>{0, 3});
        OpTest u;
        u.op("NonZero", {u.input<int8_t>({3}, {0, -1, 0})});
        REQUIRE(u.infer() == Status::Ok);
        CHECK(values_of<int64_t>(u.outputs[0]) == std::vector<int64_t>{1});
    }
    SUBCASE("a constant input folds at compile time") {
        OpTest t;
        t.op("NonZero", {t.constant<float>({3}, {1, 0, 2})});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(values_of<int64_t>(t.outputs[0]) == std::vector<int64_t>{0, 2});
    }
}

TEST_CASE("data-dependent: Unique, sorted or by first occurrence, flat or along an axis") {
    SUBCASE("sorted, flat, every output") {
        for (const char* device : kDevices) {
            OpTest t;
            t.opset = 11;
            t.op("Unique", {t.input<float>({6}, {2, 1, 1, 3, 4, 3})}, 4);
            REQUIRE(t.infer(device) == Status::Ok);
            CHECK(values_of<float>(t.outputs[0]) == std::vector<float>{1, 2, 3, 4});
            CHECK(values_of<int64_t>(t.outputs[1]) == std::vector<int64_t>{1, 0, 3, 4});
            CHECK(values_of<int64_t>(t.outputs[2]) == std::vector<int64_t>{1, 0, 0, 2, 3, 2});
            CHECK(values_of<int64_t>(t.outputs[3]) == std::vector<int64_t>{2, 1, 2, 1});
        }
    }
    SUBCASE("by first occurrence") {
        OpTest t;
        t.opset = 11;
        t.op("Unique", {t.input<int64_t>({6}, {2, 1, 1, 3, 4, 3})}, 4);
        t.set_int("sorted", 0);
        REQUIRE(t.infer() == Status::Ok);
        CHECK(values_of<int64_t>(t.outputs[0]) == std::vector<int64_t>{2, 1, 3, 4});
        CHECK(values_of<int64_t>(t.outputs[1]) == std::vector<int64_t>{0, 1, 3, 4});
        CHECK(values_of<int64_t>(t.outputs[2]) == std::vector<int64_t>{0, 1, 1, 2, 3, 2});
        CHECK(values_of<int64_t>(t.outputs[3]) == std::vector<int64_t>{1, 2, 2, 1});
    }
    SUBCASE("rows along axis 0, with NaN equal to NaN") {
        OpTest t;
        t.opset = 11;
        float nan = std::nanf("");
        t.op("Unique", {t.input<float>({4, 2}, {1, 0, nan, 2, 1, 0, nan, 2})}, 4);
        t.set_int("axis", 0);
        REQUIRE(t.infer() == Status::Ok);
        CHECK(shape_of(t.outputs[0]) == std::vector<int64_t>{2, 2});
        std::vector<float> y = values_of<float>(t.outputs[0]);
        CHECK(y[0] == 1);
        CHECK(y[1] == 0);
        CHECK(std::isnan(y[2]));
        CHECK(y[3] == 2);
        CHECK(values_of<int64_t>(t.outputs[2]) == std::vector<int64_t>{0, 1, 0, 1});
        CHECK(values_of<int64_t>(t.outputs[3]) == std::vector<int64_t>{2, 2});
    }
    SUBCASE("columns along axis 1") {
        OpTest t;
        t.opset = 11;
        t.op("Unique", {t.input<int32_t>({2, 3}, {5, 1, 5, 6, 2, 6})}, 1);
        t.set_int("axis", 1);
        REQUIRE(t.infer() == Status::Ok);
        CHECK(shape_of(t.outputs[0]) == std::vector<int64_t>{2, 2});
        CHECK(values_of<int32_t>(t.outputs[0]) == std::vector<int32_t>{1, 5, 2, 6});
    }
}

TEST_CASE("data-dependent: NonMaxSuppression keeps boxes by score, suppressing overlaps") {
    // Three boxes of one class: 1 overlaps 0 (IoU 0.81), 2 is apart. Scores 0.9, 0.8, 0.7.
    std::vector<float> boxes = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6};
    std::vector<float> scores = {0.9f, 0.8f, 0.7f};
    for (const char* device : kDevices) {
        OpTest t;
        t.opset = 11;
        t.op("NonMaxSuppression", {t.input<float>({1, 3, 4}, boxes), t.input<float>({1, 1, 3}, scores),
                                   t.input<int64_t>({1}, {3}), t.input<float>({1}, {0.5f}), t.input<float>({1}, {0.0f})});
        REQUIRE(t.infer(device) == Status::Ok);
        CHECK(shape_of(t.outputs[0]) == std::vector<int64_t>{2, 3});
        CHECK(values_of<int64_t>(t.outputs[0]) == std::vector<int64_t>{0, 0, 0, 0, 0, 2});
    }
    SUBCASE("a score threshold and at most one box per class; center-point boxes") {
        OpTest t;
        t.opset = 11;
        std::vector<float> centers = {0.5f, 0.5f, 1, 1, 0.6f, 0.5f, 1, 1, 5.5f, 0.5f, 1, 1};
        t.op("NonMaxSuppression", {t.input<float>({1, 3, 4}, centers), t.input<float>({1, 1, 3}, {0.2f, 0.8f, 0.9f}),
                                   t.input<int64_t>({1}, {1}), t.input<float>({1}, {0.5f}), t.input<float>({1}, {0.5f})});
        t.set_int("center_point_box", 1);
        REQUIRE(t.infer() == Status::Ok);
        CHECK(values_of<int64_t>(t.outputs[0]) == std::vector<int64_t>{0, 0, 2});
    }
    SUBCASE("no max_output_boxes_per_class: nothing selected") {
        OpTest t;
        t.opset = 11;
        t.op("NonMaxSuppression", {t.input<float>({1, 3, 4}, boxes), t.input<float>({1, 1, 3}, scores)});
        REQUIRE(t.infer() == Status::Ok);
        CHECK(shape_of(t.outputs[0]) == std::vector<int64_t>{0, 3});
    }
}

TEST_CASE("data-dependent: the nodes after NonZero run with the shapes it found, on every device") {
    // SHAPE_CACHE_SIZE 1: each new count evicts the plan before it, the first one too, which the
    // later plans copied and read in place: it must outlive them (the ASan run).
    for (const char* device : kDevices)
    for (const char* cache : {"8", "1"}) {
        CAPTURE(device);
        CAPTURE(cache);
        Model m;
        build_gather_nonzero(&m);
        Core core;
        CompiledModel compiled;
        std::vector<ConfigEntry> config = config_for(device);
        config.push_back({"SHAPE_CACHE_SIZE", cache});
        Status s = core.compile_model(m, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled);
        INFO(core.last_error());
        REQUIRE(s == Status::Ok);
        CHECK(compiled.data_dependent());
        CHECK(compiled.output_count() == 2);
        CHECK(test::to_string(compiled.output(0).name) == "y");
        CHECK(compiled.output_desc(0).type == ElementType::Undefined);   // computed after the cut
        CHECK(compiled.output_desc(1).type == ElementType::Int64);       // its bound: [2, 6]
        CHECK(compiled.output_desc(1).dims[1] == 6);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        CHECK(request.output(0).data() == nullptr);   // before the first infer
        struct Case { std::vector<float> x; std::vector<float> y; };
        std::vector<Case> cases = {{{0, 1, 0, 2, 0, 3}, {2, 4, 6}}, {{1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2}},
                                   {{0, 0, 0, 0, 0, 0}, {}}, {{0, 0, 5, 0, 0, 0}, {10}}, {{0, 1, 0, 2, 0, 3}, {2, 4, 6}}};
        for (const Case& c : cases) {
            Tensor x = tensor<float>(ElementType::Float32, {2, 3}, c.x);
            REQUIRE(request.set_input(0, x) == Status::Ok);
            s = request.infer();
            INFO(std::string(request.last_error()));
            REQUIRE(s == Status::Ok);
            CHECK(values_of<float>(request.output(0)) == c.y);
            CHECK(shape_of(request.output(0)) == std::vector<int64_t>{(int64_t)c.y.size()});
            CHECK(shape_of(request.output(1)) == std::vector<int64_t>{2, (int64_t)c.y.size()});
            CHECK(request.find_output("indices") == 1);
        }
        // counts 3, 6, 0, 1, 3: 6, 0 and 1 copy 3's prepared graph, and 3 again once evicted
        const bool one = cache[0] == '1';
        CHECK(compiled.cached_stage_plans() == (one ? 1u : 4u));
        CHECK(compiled.copied_stage_plans() == (one ? 4u : 3u));
    }
}

TEST_CASE("data-dependent: shape inputs given at run time (Reshape, TopK's k, Range) need no InputValue") {
    SUBCASE("Reshape with its shape as a model input") {
        Model m;
        NodeId x, shape, r;
        REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {2, 6}), &x) == Status::Ok);
        REQUIRE(m.add_input("shape", test::make_desc(ElementType::Int64, {2}), &shape) == Status::Ok);
        InputRef in[] = {InputRef::by_id(x), InputRef::by_id(shape)};
        REQUIRE(m.add_node("Reshape", "r", in, 1, &r) == Status::Ok);
        REQUIRE(m.add_output("y", InputRef::by_id(r)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        for (const char* device : kDevices) {
            Core core;
            CompiledModel compiled;
            std::vector<ConfigEntry> config = config_for(device);
            REQUIRE(core.compile_model(m, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled) == Status::Ok);
            InferRequest request;
            REQUIRE(compiled.create_request(&request) == Status::Ok);
            std::vector<float> data(12);
            for (int i = 0; i < 12; ++i) data[i] = (float)i;
            Tensor xt = tensor<float>(ElementType::Float32, {2, 6}, data);
            REQUIRE(request.set_input(0, xt) == Status::Ok);
            for (std::vector<int64_t> want : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{12, 1}, std::vector<int64_t>{-1, 2}}) {
                Tensor st = tensor<int64_t>(ElementType::Int64, {2}, want);
                REQUIRE(request.set_input(1, st) == Status::Ok);
                REQUIRE(request.infer() == Status::Ok);
                if (want[0] < 0) want[0] = 6;
                CHECK(shape_of(request.output(0)) == want);
                CHECK(values_of<float>(request.output(0)) == data);
            }
            Tensor bad = tensor<int64_t>(ElementType::Int64, {2}, {5, 5});
            REQUIRE(request.set_input(1, bad) == Status::Ok);
            CHECK(request.infer() == Status::InvalidArgument);
            CHECK(std::string(request.last_error()).find("Reshape 'r'") != std::string::npos);
        }
    }
    SUBCASE("TopK with k a model input") {
        OpTest t;
        t.opset = 11;
        t.op("TopK", {t.input<float>({5}, {3, 1, 4, 1, 5}), t.input<int64_t>({1}, {2})}, 2);
        // the first infer compiles the later stage: OpTest's no-allocation check is for the plan's
        // second infer, so run it through a request by hand
        for (uint32_t p = 0; p < 2; ++p) {
            std::string name = "out" + std::to_string(p);
            REQUIRE(t.model.add_output(StringView(name.data(), name.size()), InputRef::by_id(t.node, p)) == Status::Ok);
        }
        t.model.opset = 11;
        REQUIRE(t.model.finalize() == Status::Ok);
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(t.model, "CPU", Span<const ConfigEntry>(), &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        Tensor x = tensor<float>(ElementType::Float32, {5}, {3, 1, 4, 1, 5});
        REQUIRE(request.set_input(0, x) == Status::Ok);
        for (int64_t k : {2, 4, 0, 2}) {
            Tensor kt = tensor<int64_t>(ElementType::Int64, {1}, {k});
            REQUIRE(request.set_input(1, kt) == Status::Ok);
            REQUIRE(request.infer() == Status::Ok);
            std::vector<float> all = {5, 4, 3, 1};
            CHECK(values_of<float>(request.output(0)) == std::vector<float>(all.begin(), all.begin() + k));
        }
        Tensor kt = tensor<int64_t>(ElementType::Int64, {1}, {6});
        REQUIRE(request.set_input(1, kt) == Status::Ok);
        CHECK(request.infer() == Status::InvalidArgument);   // k past the axis
    }
}

TEST_CASE("data-dependent: Compress with a run-time condition") {
    OpTest t;
    t.opset = 11;
    t.op("Compress", {t.input<float>({2, 3}, {1, 2, 3, 4, 5, 6}), t.input<uint8_t>({3}, {1, 0, 1}, ElementType::Bool)});
    t.set_int("axis", 1);
    REQUIRE(t.infer() == Status::Ok);
    CHECK(shape_of(t.outputs[0]) == std::vector<int64_t>{2, 2});
    CHECK(values_of<float>(t.outputs[0]) == std::vector<float>{1, 3, 4, 6});
    SUBCASE("a condition selecting past the end is InvalidArgument at run time") {
        OpTest u;
        u.opset = 11;
        u.op("Compress", {u.input<float>({2}, {1, 2}), u.input<uint8_t>({3}, {0, 0, 1}, ElementType::Bool)});
        CHECK(u.infer() == Status::InvalidArgument);
        CHECK(u.infer_error.find("selects position 2 of 2") != std::string::npos);
    }
}

TEST_CASE("data-dependent: a request alternating between two signatures allocates nothing after its first two infers") {
    Model m;
    build_gather_nonzero(&m);
    for (const char* device : kDevices) {
        Core core;
        CompiledModel compiled;
        std::vector<ConfigEntry> config = config_for(device);
        REQUIRE(core.compile_model(m, device, Span<const ConfigEntry>(config.data(), config.size()), &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        Tensor a = tensor<float>(ElementType::Float32, {2, 3}, {0, 1, 0, 2, 0, 3});
        Tensor b = tensor<float>(ElementType::Float32, {2, 3}, {1, 1, 1, 1, 1, 0});
        Tensor a2 = tensor<float>(ElementType::Float32, {2, 3}, {7, 0, 8, 0, 9, 0});   // a's count, other values
        REQUIRE(request.set_input(0, a) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        REQUIRE(request.set_input(0, b) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        uint64_t before = tessel_test::allocation_count();
        for (int i = 0; i < 6; ++i) {
            REQUIRE(request.set_input(0, i % 3 == 0 ? a : i % 3 == 1 ? b : a2) == Status::Ok);
            REQUIRE(request.infer() == Status::Ok);
        }
        CHECK(tessel_test::allocation_count() == before);
        CHECK(values_of<float>(request.output(0)) == std::vector<float>{14, 16, 18});
    }
}

TEST_CASE("data-dependent: a later stage past Limits is LimitExceeded; the request keeps working") {
    // x[64] -> NonZero [1, n] -> Cast -> c; Transpose(c) [n, 1] x c = [n, n]: past n = 16 the
    // later stage's tensor exceeds the element limit (256).
    Model m;
    NodeId x, nz, cast, tr, mm;
    REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {64}), &x) == Status::Ok);
    InputRef in[] = {InputRef::by_id(x)};
    REQUIRE(m.add_node("NonZero", "nz", in, 1, &nz) == Status::Ok);
    InputRef cin[] = {InputRef::by_id(nz)};
    REQUIRE(m.add_node("Cast", "cast", cin, 1, &cast) == Status::Ok);
    REQUIRE(m.set_int(cast, "to", 1) == Status::Ok);
    InputRef tin[] = {InputRef::by_id(cast)};
    REQUIRE(m.add_node("Transpose", "tr", tin, 1, &tr) == Status::Ok);
    InputRef min[] = {InputRef::by_id(tr), InputRef::by_id(cast)};
    REQUIRE(m.add_node("MatMul", "outer", min, 1, &mm) == Status::Ok);
    REQUIRE(m.add_output("y", InputRef::by_id(mm)) == Status::Ok);
    REQUIRE(m.finalize() == Status::Ok);
    for (const char* device : kDevices) {
        Core core;
        core.limits().max_tensor_elements = 256;
        CompiledModel compiled;
        REQUIRE(core.compile_model(m, device, Span<const ConfigEntry>(), &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        Tensor small = with_nonzeros(4), large = with_nonzeros(20), limit = with_nonzeros(16);
        REQUIRE(request.set_input(0, small) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        CHECK(shape_of(request.output(0)) == std::vector<int64_t>{4, 4});
        CHECK(values_of<float>(request.output(0))[5] == 4.0f);   // index 2 x index 2
        REQUIRE(request.set_input(0, large) == Status::Ok);
        CHECK(request.infer() == Status::LimitExceeded);
        INFO(std::string(request.last_error()));
        CHECK(std::string(request.last_error()).find("node 'outer': a tensor of 400 elements (limit 256)") != std::string::npos);
        CHECK(compiled.cached_stage_plans() == 1);   // the refused plan is not kept
        REQUIRE(request.set_input(0, limit) == Status::Ok);   // the limit itself is accepted
        REQUIRE(request.infer() == Status::Ok);
        CHECK(shape_of(request.output(0)) == std::vector<int64_t>{16, 16});
        REQUIRE(request.set_input(0, small) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        CHECK(shape_of(request.output(0)) == std::vector<int64_t>{4, 4});
    }
    SUBCASE("the stages of a request together past max_arena_bytes") {
        Core core;
        CompiledModel compiled;
        // The first stage takes 64 x 4 + 64 x 8 bytes, the second at n = 24 about 2.8 KB: each
        // fits alone, not together.
        core.limits().max_arena_bytes = 3200;
        REQUIRE(core.compile_model(m, "CPU", Span<const ConfigEntry>(), &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        Tensor small = with_nonzeros(4), large = with_nonzeros(24);
        REQUIRE(request.set_input(0, small) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        REQUIRE(request.set_input(0, large) == Status::Ok);
        CHECK(request.infer() == Status::LimitExceeded);
        INFO(std::string(request.last_error()));
        CHECK(std::string(request.last_error()).find("the stages of a request need") != std::string::npos);
        REQUIRE(request.set_input(0, small) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
    }
}

namespace {
// A device that runs every op through the reference kernels but cannot report the dims a
// kernel found at run time (its steps pass no StepContext::actual): it refuses nodes with
// bounded outputs in query_model, as the plugin guide says.
class StaticShapeDevice : public Device {
public:
    struct Program : DeviceProgram {
        Arena arena;
        const PreparedModel* model = nullptr;
        ProgramStep* table = nullptr;
        uint32_t count = 0;
        Span<const ProgramStep> steps() const override { return Span<const ProgramStep>(table, count); }
        Status run_step(uint32_t i, const StepContext& context) const override {
            StepContext own = context;
            own.actual = nullptr;
            return model->run_kernel(table[i], own);
        }
        Status export_payload(WriteFn, void*) const override { return Status::Unsupported; }
    };
    StringView name() const override { return "STATIC"; }
    Status get_metric(StringView key, StringView* value) override {
        if (key == StringView("SUPPORTED_CONFIG_KEYS")) { *value = ""; return Status::Ok; }
        return fail(Status::NotFound, "no metric");
    }
    Status set_config(StringView, StringView) override { return fail(Status::NotFound, "no config"); }
    Status get_config(StringView, StringView*) override { return fail(Status::NotFound, "no config"); }
    Status query_model(const PreparedModel& prepared, uint8_t* supported) override {
        const Graph& g = prepared.model.graph;
        for (NodeId n = 0; n < g.node_count(); ++n) {
            StringView op = g.node(n).op;
            bool bookkeeping = op == StringView("Parameter") || op == StringView("Constant") || op == StringView("Result") ||
                               op == StringView("Absent");
            supported[n] = !bookkeeping && !prepared.bounded_outputs(n);
        }
        return Status::Ok;
    }
    Status compile_subgraph(const PreparedModel& prepared, Span<const NodeId> nodes, DeviceProgram** out) override {
        Program* p = create<Program>();
        p->model = &prepared;
        p->table = p->arena.allocate_array<ProgramStep>(nodes.size + 1);
        for (NodeId n : nodes) {
            const Node& node = prepared.model.graph.node(n);
            StringView op = node.op;
            if (op == StringView("Parameter") || op == StringView("Constant") || op == StringView("Result") || op == StringView("Absent"))
                continue;
            uint32_t* io = p->arena.allocate_array<uint32_t>(node.num_inputs + node.num_outputs + 1);
            for (uint32_t i = 0; i < node.num_inputs; ++i) io[i] = prepared.value_id(node.inputs[i].producer, node.inputs[i].port);
            for (uint32_t o = 0; o < node.num_outputs; ++o) io[node.num_inputs + o] = prepared.value_id(n, o);
            ProgramStep& step = *new (&p->table[p->count++]) ProgramStep();
            step.node = n;
            step.kernel = "static";
            step.reads = Span<const uint32_t>(io, node.num_inputs);
            step.writes = Span<const uint32_t>(io + node.num_inputs, node.num_outputs);
            step.scratch_bytes = prepared.kernel_scratch(n);
        }
        *out = p;
        return Status::Ok;
    }
    Status import_subgraph(const PreparedModel&, Span<const NodeId>, const void*, size_t, DeviceProgram**) override {
        return fail(Status::Unsupported, "no import");
    }
    Status add_extension(const OpKernel&) override { return fail(Status::Unsupported, "no extensions"); }
};
}  // namespace

TEST_CASE("data-dependent: HETERO places bounded nodes on a device that reports run-time dims") {
    StaticShapeDevice device;
    Core core;
    REQUIRE(core.register_device(&device) == Status::Ok);
    Model m;
    build_gather_nonzero(&m);
    CompiledModel compiled;
    Status s = core.compile_model(m, "HETERO:STATIC,CPU", Span<const ConfigEntry>(), &compiled);
    INFO(core.last_error());
    REQUIRE(s == Status::Ok);
    // The first stage: NonZero on CPU (STATIC refused it); nothing else there.
    Span<const PlacementSummary> placement = compiled.placement();
    REQUIRE(placement.size == 2);
    CHECK(placement[0].nodes == 0);
    CHECK(placement[1].nodes == 1);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    Tensor x = tensor<float>(ElementType::Float32, {2, 3}, {0, 1, 0, 2, 0, 3});
    REQUIRE(request.set_input(0, x) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    CHECK(values_of<float>(request.output(0)) == std::vector<float>{2, 4, 6});
    CHECK(values_of<int64_t>(request.output(1)) == std::vector<int64_t>{0, 1, 1, 1, 0, 2});
}

TEST_CASE("data-dependent: the clustering note's graph1 as an ONNX model; B0 reads A0's value as a shape") {
    // A0 = Abs(s); A1 = Cast(A0); A2 = Pow(A1, A0); X0 = ReduceSum(A2) (not on TEMPLATE, the
    // accelerator); A3 = Neg(X0); A4 = Add(x, X0); B0 = Reshape(A4, A0): B0 needs A0's value,
    // computed at run time, so B0 goes to a later stage, specialized once A0 is known.
    Model built;
    NodeId s, x, a0, a1, a2, x0, a3, a4, b0;
    REQUIRE(built.add_input("s", test::make_desc(ElementType::Int64, {2}), &s) == Status::Ok);
    REQUIRE(built.add_input("x", test::make_desc(ElementType::Float32, {6}), &x) == Status::Ok);
    InputRef r0[] = {InputRef::by_id(s)};
    REQUIRE(built.add_node("Abs", "A0", r0, 1, &a0) == Status::Ok);
    InputRef r1[] = {InputRef::by_id(a0)};
    REQUIRE(built.add_node("Cast", "A1", r1, 1, &a1) == Status::Ok);
    REQUIRE(built.set_int(a1, "to", 1) == Status::Ok);
    InputRef r2[] = {InputRef::by_id(a1), InputRef::by_id(a0)};
    REQUIRE(built.add_node("Pow", "A2", r2, 1, &a2) == Status::Ok);
    InputRef rx[] = {InputRef::by_id(a2)};
    REQUIRE(built.add_node("ReduceSum", "X0", rx, 1, &x0) == Status::Ok);
    REQUIRE(built.set_int(x0, "keepdims", 0) == Status::Ok);
    InputRef r3[] = {InputRef::by_id(x0)};
    REQUIRE(built.add_node("Neg", "A3", r3, 1, &a3) == Status::Ok);
    InputRef r4[] = {InputRef::by_id(x), InputRef::by_id(x0)};
    REQUIRE(built.add_node("Add", "A4", r4, 1, &a4) == Status::Ok);
    InputRef rb[] = {InputRef::by_id(a4), InputRef::by_id(a0)};
    REQUIRE(built.add_node("Reshape", "B0", rb, 1, &b0) == Status::Ok);
    REQUIRE(built.add_output("a3", InputRef::by_id(a3)) == Status::Ok);
    REQUIRE(built.add_output("b0", InputRef::by_id(b0)) == Status::Ok);
    built.opset = 17;
    REQUIRE(built.finalize() == Status::Ok);
    std::string bytes;
    REQUIRE(write_onnx(built, test::append_to_string, &bytes) == Status::Ok);
    Model m;
    REQUIRE(m.read_onnx(bytes.data(), bytes.size()) == Status::Ok);
    Core core;
    CompiledModel compiled;
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Abs,Cast,Pow,Neg,Add,Reshape"}};
    Status status = core.compile_model(m, "HETERO:TEMPLATE,CPU", config, &compiled);
    INFO(core.last_error());
    REQUIRE(status == Status::Ok);
    CHECK(compiled.data_dependent());
    const Graph& first = compiled.prepared()->model.graph;   // the first stage: A0..A4 and X0, not B0
    CHECK(first.find("A0") != kNoNode);
    CHECK(first.find("X0") != kNoNode);
    CHECK(first.find("B0") == kNoNode);
    const Partition* p = compiled.partition();
    REQUIRE(p != nullptr);
    CHECK(p->subgraphs.size >= 2);   // X0 apart from the accelerator's nodes
    // B0 reads A0's value as its shape: that input carries the keep-apart flag, its data input not.
    const Model* later = compiled.later_stage();
    REQUIRE(later != nullptr);
    NodeId b0_later = later->graph.find("B0");
    REQUIRE(b0_later != kNoNode);
    const Node& reshape = later->graph.node(b0_later);
    REQUIRE(reshape.num_inputs == 2);
    CHECK(reshape.inputs[1].keep_apart == 1);
    CHECK(reshape.inputs[0].keep_apart == 0);
    CHECK(later->graph.has_keep_apart());
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    Tensor xt = tensor<float>(ElementType::Float32, {6}, {0, 1, 2, 3, 4, 5});
    REQUIRE(request.set_input(1, xt) == Status::Ok);
    for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 3}, std::vector<int64_t>{-3, 2}, std::vector<int64_t>{6, 1}}) {
        Tensor st = tensor<int64_t>(ElementType::Int64, {2}, shape);
        REQUIRE(request.set_input(0, st) == Status::Ok);
        REQUIRE(request.infer() == Status::Ok);
        int64_t a = std::abs(shape[0]), b = std::abs(shape[1]);
        float sum = (float)(std::pow((double)a, (double)a) + std::pow((double)b, (double)b));
        CHECK(values_of<float>(request.output(0)) == std::vector<float>{-sum});
        CHECK(shape_of(request.output(1)) == std::vector<int64_t>{a, b});
        std::vector<float> y = values_of<float>(request.output(1));
        REQUIRE(y.size() == 6);
        for (int i = 0; i < 6; ++i) CHECK(y[i] == (float)i + sum);
    }
}

TEST_CASE("data-dependent: bad inputs, each with its exact status") {
    SUBCASE("NonMaxSuppression: boxes not [batches, boxes, 4]") {
        OpTest t;
        t.opset = 11;
        t.op("NonMaxSuppression", {t.input<float>({1, 3, 3}, std::vector<float>(9)), t.input<float>({1, 1, 3}, {1, 1, 1})});
        t.fails(Status::InvalidArgument);
    }
    SUBCASE("NonMaxSuppression: scores whose boxes differ") {
        OpTest t;
        t.opset = 11;
        t.op("NonMaxSuppression", {t.input<float>({1, 3, 4}, std::vector<float>(12)), t.input<float>({1, 1, 2}, {1, 1})});
        t.fails(Status::InvalidArgument);
    }
    SUBCASE("NonMaxSuppression: center_point_box 2") {
        OpTest t;
        t.opset = 11;
        t.op("NonMaxSuppression", {t.input<float>({1, 3, 4}, std::vector<float>(12)), t.input<float>({1, 1, 3}, {1, 1, 1})});
        t.set_int("center_point_box", 2);
        t.fails(Status::InvalidArgument);
    }
    SUBCASE("NonMaxSuppression: int32 boxes") {
        OpTest t;
        t.opset = 11;
        t.op("NonMaxSuppression", {t.input<int32_t>({1, 3, 4}, std::vector<int32_t>(12)), t.input<float>({1, 1, 3}, {1, 1, 1})});
        t.fails(Status::Unsupported);
    }
    SUBCASE("NonMaxSuppression: a max_output_boxes_per_class of two values") {
        OpTest t;
        t.opset = 11;
        t.op("NonMaxSuppression", {t.input<float>({1, 3, 4}, std::vector<float>(12)), t.input<float>({1, 1, 3}, {1, 1, 1}),
                                   t.input<int64_t>({2}, {1, 1})});
        t.fails(Status::InvalidArgument);
    }
    SUBCASE("Unique: axis out of range") {
        OpTest t;
        t.opset = 11;
        t.op("Unique", {t.input<float>({2, 2}, {1, 2, 3, 4})});
        t.set_int("axis", 2);
        t.fails(Status::InvalidArgument);
    }
    SUBCASE("Unique: five outputs") {
        OpTest t;
        t.opset = 11;
        t.op("Unique", {t.input<float>({2}, {1, 2})}, 5);
        t.fails(Status::InvalidArgument);
    }
    SUBCASE("Unique: before opset 11") {
        OpTest t;
        t.opset = 10;
        t.op("Unique", {t.input<float>({2}, {1, 2})});
        t.fails(Status::Unsupported);
    }
    SUBCASE("NonZero: a string-free unknown type (float16 goes through float32)") {
        OpTest t;
        t.op("NonZero", {t.input<float>({2}, {1, 0}), t.input<float>({2}, {1, 0})});
        t.fails(Status::InvalidArgument);   // two inputs
    }
    SUBCASE("NonZero: indices past the element limit") {
        Model m;
        NodeId x, nz;
        REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {64, 64}), &x) == Status::Ok);
        InputRef in[] = {InputRef::by_id(x)};
        REQUIRE(m.add_node("NonZero", "nz", in, 1, &nz) == Status::Ok);
        REQUIRE(m.add_output("y", InputRef::by_id(nz)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        Core core;
        core.limits().max_tensor_elements = 4096;   // x fits; 2 x 4096 indices do not
        CompiledModel compiled;
        CHECK(core.compile_model(m, "CPU", Span<const ConfigEntry>(), &compiled) == Status::LimitExceeded);
        CHECK(std::string(core.last_error()).find("NonZero 'nz'") != std::string::npos);
    }
    SUBCASE("NonZero inside an If body: the If waits for its small inputs") {
        Model m;
        NodeId cond, x, node;
        REQUIRE(m.add_input("cond", test::make_desc(ElementType::Bool, {}), &cond) == Status::Ok);
        REQUIRE(m.add_input("x", test::make_desc(ElementType::Float32, {3}), &x) == Status::Ok);
        Model* then_body = nullptr;
        Model* else_body = nullptr;
        REQUIRE(m.add_body(&then_body) == Status::Ok);
        REQUIRE(m.add_body(&else_body) == Status::Ok);
        for (Model* body : {then_body, else_body}) {
            NodeId outer, nz, tr;
            REQUIRE(body->add_input("x", test::make_desc(ElementType::Float32, {3}), &outer) == Status::Ok);
            body->outer_inputs = 1;
            InputRef in[] = {InputRef::by_id(outer)};
            REQUIRE(body->add_node("NonZero", "nz", in, 1, &nz) == Status::Ok);
            InputRef tin[] = {InputRef::by_id(nz)};
            REQUIRE(body->add_node("Transpose", "tr", tin, 1, &tr) == Status::Ok);
            REQUIRE(body->add_output("y", InputRef::by_id(tr)) == Status::Ok);
            REQUIRE(body->finalize() == Status::Ok);
        }
        InputRef in[] = {InputRef::by_id(cond), InputRef::by_id(x)};
        REQUIRE(m.add_node("If", "if", in, 1, &node) == Status::Ok);
        REQUIRE(m.set_graph(node, "then_branch", then_body) == Status::Ok);
        REQUIRE(m.set_graph(node, "else_branch", else_body) == Status::Ok);
        REQUIRE(m.add_output("y", InputRef::by_id(node)) == Status::Ok);
        REQUIRE(m.finalize() == Status::Ok);
        // The If waits for cond and x (small: by value in a later stage), where its branch folds.
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(m, "CPU", Span<const ConfigEntry>(), &compiled) == Status::Ok);
        CHECK(compiled.data_dependent());
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        request.input(0).data_as<uint8_t>()[0] = 1;
        float x_values[] = {0, 2, 3};
        std::memcpy(request.input(1).data(), x_values, sizeof x_values);
        REQUIRE(request.infer() == Status::Ok);
        CHECK(shape_of(request.output(0)) == std::vector<int64_t>{2, 1});
        CHECK(values_of<int64_t>(request.output(0)) == std::vector<int64_t>{1, 2});
        // The later stage holds the If and its bodies, which blobs do not hold.
        std::string blob;
        CHECK(compiled.export_model(test::append_to_string, &blob) == Status::Unsupported);
        CHECK(std::string(compiled.last_error()).find("'if' of the later stage has a subgraph body") != std::string::npos);
    }
}

TEST_CASE("data-dependent: PERF_COUNT lists the later stages' steps after the first stage's") {
    Model m;
    build_gather_nonzero(&m);
    Core core;
    CompiledModel compiled;
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}};
    REQUIRE(core.compile_model(m, "CPU", config, &compiled) == Status::Ok);
    InferRequest request;
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    Tensor x = tensor<float>(ElementType::Float32, {2, 3}, {0, 1, 0, 2, 0, 3});
    REQUIRE(request.set_input(0, x) == Status::Ok);
    REQUIRE(request.infer() == Status::Ok);
    std::vector<std::string> nodes;
    for (const ProfileEntry& e : request.profiling_info()) nodes.push_back(test::to_string(e.node));
    REQUIRE(!nodes.empty());
    CHECK(nodes.front() == "nz");
    CHECK(std::find(nodes.begin(), nodes.end(), "gather") != nodes.end());
}
