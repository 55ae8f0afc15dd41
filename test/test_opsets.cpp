// runtime.h's op versions: for each op whose meaning depends on the model's opset, one case
// per version behaviour and one per refused version or attribute, each a one-node Model of
// that opset compiled for CPU (so the >>op versions check runs as in a real compile) and
// checked against exact values and the exact Status.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

using Shape = std::vector<int64_t>;
using test::make_desc;

struct Result {
    Status status = Status::Ok;
    std::string error;
    std::vector<TensorDesc> descs;             // per output
    std::vector<std::vector<float>> values;    // per float32 output
};

// One node of `op` at `opset`: float inputs are model inputs (fed at run time), int64 and
// float constants are initializers, absent() an empty optional input.
class OpModel {
public:
    explicit OpModel(uint32_t opset) { model_.opset = opset; }

    OpModel& input(const Shape& dims, const std::vector<float>& values) {
        std::string name = "x" + std::to_string(refs_.size());
        NodeId id = kNoNode;
        REQUIRE(model_.add_input(name.c_str(), make_desc(ElementType::Float32, dims), &id) == Status::Ok);
        refs_.push_back(InputRef::by_id(id));
        feeds_.push_back(values);
        return *this;
    }
    OpModel& ints(const Shape& dims, const std::vector<int64_t>& values) {
        return constant(make_desc(ElementType::Int64, dims), values.data());
    }
    OpModel& floats(const Shape& dims, const std::vector<float>& values) {
        return constant(make_desc(ElementType::Float32, dims), values.data());
    }
    OpModel& absent() {
        refs_.push_back(model_.absent());
        return *this;
    }

    // Adds the node (attributes set by `attributes`), compiles for CPU and runs it.
    Result run(const char* op, const std::function<void(Model&, NodeId)>& attributes = nullptr, uint32_t outputs = 1) {
        NodeId node = kNoNode;
        REQUIRE(model_.add_node(op, "node", Span<const InputRef>(refs_.data(), refs_.size()), outputs, &node) == Status::Ok);
        if (attributes) attributes(model_, node);
        for (uint32_t o = 0; o < outputs; ++o)
            REQUIRE(model_.add_output(("y" + std::to_string(o)).c_str(), InputRef::by_id(node, o)) == Status::Ok);
        REQUIRE(model_.finalize() == Status::Ok);
        Result r;
        Core core;
        CompiledModel compiled;
        r.status = core.compile_model(model_, "CPU", {}, &compiled);
        if (r.status != Status::Ok) {
            r.error = core.last_error();
            return r;
        }
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        for (uint32_t i = 0; i < compiled.input_count(); ++i) {
            uint32_t k = model_.find_input(compiled.input(i).name);
            REQUIRE(k < feeds_.size());
            std::memcpy(request.input(i).data_as<float>(), feeds_[k].data(), feeds_[k].size() * sizeof(float));
        }
        r.status = request.infer();
        if (r.status != Status::Ok) {
            r.error = request.last_error();
            return r;
        }
        for (uint32_t o = 0; o < compiled.output_count(); ++o) {
            const Tensor& y = request.output(o);
            r.descs.push_back(make_desc(y.type(), Shape(y.shape().data, y.shape().data + y.shape().size)));
            std::vector<float> v;
            if (y.type() == ElementType::Float32)
                for (uint64_t e = 0; e < y.elements(); ++e) v.push_back(y.data_as<float>()[e]);
            r.values.push_back(v);
        }
        return r;
    }

private:
    OpModel& constant(const TensorDesc& desc, const void* data) {
        std::string name = "c" + std::to_string(refs_.size());
        NodeId id = kNoNode;
        REQUIRE(model_.add_constant(name.c_str(), desc, data, &id) == Status::Ok);
        refs_.push_back(InputRef::by_id(id));
        return *this;
    }

    Model model_;
    std::vector<InputRef> refs_;
    std::vector<std::vector<float>> feeds_;   // per input ref (constants: unused)
};

Shape dims_of(const TensorDesc& d) { return Shape(d.dims, d.dims + d.rank); }

void check_values(const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

const std::vector<float> kX23 = {1, 2, 3, 4, 5, 6};   // [2, 3]

}  // namespace

TEST_CASE("opsets: Reduce* axes attribute (opset 17) and axes input (opset 18)") {
    {
        Result r = OpModel(17).input({2, 3}, kX23).run("ReduceMean", [](Model& m, NodeId n) {
            int64_t axes[] = {1};
            CHECK(m.set_ints(n, "axes", Span<const int64_t>(axes, 1)) == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);
        CHECK(dims_of(r.descs[0]) == Shape{2, 1});
        check_values(r.values[0], {2, 5});
    }
    {
        Result r = OpModel(17).input({2, 3}, kX23).ints({1}, {1}).run("ReduceMean");
        CHECK(r.status == Status::InvalidArgument);   // no axes input before 18
        CHECK(contains(r.error, "ReduceMean 'node'"));
    }
    {
        Result r = OpModel(18).input({2, 3}, kX23).ints({1}, {1}).run("ReduceMean");
        REQUIRE(r.status == Status::Ok);
        CHECK(dims_of(r.descs[0]) == Shape{2, 1});
        check_values(r.values[0], {2, 5});
    }
    {
        // opset 18 reads no axes attribute: all axes
        Result r = OpModel(18).input({2, 3}, kX23).run("ReduceMean", [](Model& m, NodeId n) {
            int64_t axes[] = {1};
            CHECK(m.set_ints(n, "axes", Span<const int64_t>(axes, 1)) == Status::Ok);
            CHECK(m.set_int(n, "keepdims", 0) == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);
        CHECK(r.descs[0].rank == 0);
        check_values(r.values[0], {3.5f});
    }
    // every kind, axes input -1 at opset 18
    struct Kind { const char* op; std::vector<float> want; };
    for (const Kind& k : {Kind{"ReduceMax", {3, 6}}, Kind{"ReduceMin", {1, 4}}, Kind{"ReduceProd", {6, 120}},
                          Kind{"ReduceL2", {std::sqrt(14.0f), std::sqrt(77.0f)}}, Kind{"ReduceMean", {2, 5}},
                          Kind{"ReduceSum", {6, 15}}}) {
        INFO(k.op);
        Result r = OpModel(18).input({2, 3}, kX23).ints({1}, {-1}).run(k.op, [](Model& m, NodeId n) { CHECK(m.set_int(n, "keepdims", 0) == Status::Ok); });
        REQUIRE(r.status == Status::Ok);
        CHECK(dims_of(r.descs[0]) == Shape{2});
        check_values(r.values[0], k.want);
    }
    {
        Result r = OpModel(18).input({2, 3}, kX23).input({1}, {1}).run("ReduceMax");
        CHECK(r.status == Status::InvalidArgument);   // axes must be int64
    }
}

TEST_CASE("opsets: Reduce* noop_with_empty_axes (opset 18; ReduceSum 13)") {
    for (const char* op : {"ReduceMean", "ReduceMax", "ReduceL2"}) {
        INFO(op);
        {
            Result r = OpModel(18).input({2, 3}, kX23).run(op, [](Model& m, NodeId n) { CHECK(m.set_int(n, "noop_with_empty_axes", 1) == Status::Ok); });
            REQUIRE(r.status == Status::Ok);   // no axes: the input as it is
            CHECK(dims_of(r.descs[0]) == Shape{2, 3});
            check_values(r.values[0], kX23);
        }
        {
            Result r = OpModel(18).input({2, 3}, kX23).ints({0}, {}).run(op, [](Model& m, NodeId n) {
                CHECK(m.set_int(n, "noop_with_empty_axes", 1) == Status::Ok);
            });
            REQUIRE(r.status == Status::Ok);   // empty axes: the same
            CHECK(dims_of(r.descs[0]) == Shape{2, 3});
        }
        {
            Result r = OpModel(18).input({2, 3}, kX23).ints({0}, {}).run(op);
            REQUIRE(r.status == Status::Ok);   // empty axes, noop 0: every axis
            CHECK(dims_of(r.descs[0]) == Shape{1, 1});
        }
        {
            Result r = OpModel(17).input({2, 3}, kX23).run(op, [](Model& m, NodeId n) { CHECK(m.set_int(n, "noop_with_empty_axes", 1) == Status::Ok); });
            REQUIRE(r.status == Status::Ok);   // not an attribute before 18: every axis
            CHECK(dims_of(r.descs[0]) == Shape{1, 1});
        }
    }
    Result r = OpModel(13).input({2, 3}, kX23).run("ReduceSum", [](Model& m, NodeId n) { CHECK(m.set_int(n, "noop_with_empty_axes", 1) == Status::Ok); });
    REQUIRE(r.status == Status::Ok);
    CHECK(dims_of(r.descs[0]) == Shape{2, 3});
}

TEST_CASE("opsets: Split num_outputs (opset 18)") {
    std::vector<float> x = {0, 1, 2, 3, 4, 5, 6};
    {
        Result r = OpModel(18).input({7}, x).run("Split", [](Model& m, NodeId n) { CHECK(m.set_int(n, "num_outputs", 3) == Status::Ok); }, 3);
        REQUIRE(r.status == Status::Ok);   // chunks of ceil(7 / 3), the last smaller
        check_values(r.values[0], {0, 1, 2});
        check_values(r.values[1], {3, 4, 5});
        check_values(r.values[2], {6});
    }
    {
        Result r = OpModel(18).input({7}, x).run("Split", [](Model& m, NodeId n) { CHECK(m.set_int(n, "num_outputs", 2) == Status::Ok); }, 3);
        CHECK(r.status == Status::InvalidArgument);
    }
    {
        Result r = OpModel(17).input({7}, x).run("Split", nullptr, 3);
        CHECK(r.status == Status::InvalidArgument);   // equal parts only
    }
}

TEST_CASE("opsets: Pad axes input (opset 18), wrap (opset 19), paddings (opset 1)") {
    const std::vector<float> data = {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f};   // [3, 2]
    {
        Result r = OpModel(19).input({3, 2}, data).ints({4}, {2, 1, 1, 1}).run("Pad", [](Model& m, NodeId n) {
            CHECK(m.set_string(n, "mode", "wrap") == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);   // the spec's example
        CHECK(dims_of(r.descs[0]) == Shape{6, 4});
        check_values(r.values[0], {3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f,
                                   3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f});
    }
    {
        Result r = OpModel(18).input({3, 2}, data).ints({4}, {2, 1, 1, 1}).run("Pad", [](Model& m, NodeId n) {
            CHECK(m.set_string(n, "mode", "wrap") == Status::Ok);
        });
        CHECK(r.status == Status::InvalidArgument);   // not a mode before 19
        CHECK(contains(r.error, "wrap"));
    }
    {
        Result r = OpModel(19).input({3, 2}, data).ints({4}, {-1, 1, 0, 0}).run("Pad", [](Model& m, NodeId n) {
            CHECK(m.set_string(n, "mode", "wrap") == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);   // axis 0 cropped only, axis 1 wrapped
        CHECK(dims_of(r.descs[0]) == Shape{2, 3});
        check_values(r.values[0], {3.4f, 2.3f, 3.4f, 5.7f, 4.5f, 5.7f});
    }
    {
        Result r = OpModel(19).input({3, 2}, data).ints({4}, {-1, 0, 1, 0}).run("Pad", [](Model& m, NodeId n) {
            CHECK(m.set_string(n, "mode", "wrap") == Status::Ok);
        });
        CHECK(r.status == Status::Unsupported);   // cropping and wrapping one axis
        CHECK(contains(r.error, "Pad 'node'"));
    }
    {
        // axes input: pads for axis 1 only, constant 0
        Result r = OpModel(18).input({3, 2}, data).ints({2}, {1, 0}).absent().ints({1}, {-1}).run("Pad");
        REQUIRE(r.status == Status::Ok);
        CHECK(dims_of(r.descs[0]) == Shape{3, 3});
        check_values(r.values[0], {0, 1.0f, 1.2f, 0, 2.3f, 3.4f, 0, 4.5f, 5.7f});
    }
    {
        Result r = OpModel(1).input({3, 2}, data).run("Pad", [](Model& m, NodeId n) {
            int64_t paddings[] = {0, 1, 0, 0};
            CHECK(m.set_ints(n, "paddings", Span<const int64_t>(paddings, 4)) == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);   // Pad-1's name for pads
        check_values(r.values[0], {0, 1.0f, 1.2f, 0, 2.3f, 3.4f, 0, 4.5f, 5.7f});
    }
    {
        Result r = OpModel(1).input({3, 2}, data).run("Pad", [](Model& m, NodeId n) {
            int64_t pads[] = {0, 1, 0, 0};
            CHECK(m.set_ints(n, "pads", Span<const int64_t>(pads, 4)) == Status::Ok);
        });
        CHECK(r.status == Status::InvalidArgument);
        CHECK(contains(r.error, "paddings"));
    }
}

TEST_CASE("opsets: Resize axes and keep_aspect_ratio_policy (18), antialias (18), half_pixel_symmetric (19)") {
    const std::vector<float> x = {1, 2, 3, 4};   // [1, 1, 2, 2]
    {
        Result r = OpModel(18).input({1, 1, 2, 2}, x).absent().floats({2}, {2, 2}).run("Resize", [](Model& m, NodeId n) {
            int64_t axes[] = {2, 3};
            CHECK(m.set_ints(n, "axes", Span<const int64_t>(axes, 2)) == Status::Ok);
            CHECK(m.set_string(n, "nearest_mode", "floor") == Status::Ok);
            CHECK(m.set_string(n, "coordinate_transformation_mode", "asymmetric") == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);
        CHECK(dims_of(r.descs[0]) == Shape{1, 1, 4, 4});
        check_values(r.values[0], {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
    }
    {
        Result r = OpModel(17).input({1, 1, 2, 2}, x).absent().floats({2}, {2, 2}).run("Resize", [](Model& m, NodeId n) {
            int64_t axes[] = {2, 3};
            CHECK(m.set_ints(n, "axes", Span<const int64_t>(axes, 2)) == Status::Ok);
        });
        CHECK(r.status == Status::InvalidArgument);   // no axes before 18: 4 scales needed
    }
    {
        Result r = OpModel(18).input({1, 1, 2, 2}, x).absent().floats({2}, {2, 2}).run("Resize", [](Model& m, NodeId n) {
            int64_t axes[] = {2, 2};
            CHECK(m.set_ints(n, "axes", Span<const int64_t>(axes, 2)) == Status::Ok);
        });
        CHECK(r.status == Status::InvalidArgument);
    }
    std::vector<float> wide(8, 1.0f);   // [1, 1, 2, 4]
    for (const char* policy : {"not_larger", "not_smaller", "stretch"}) {
        INFO(policy);
        Result r = OpModel(18).input({1, 1, 2, 4}, wide).absent().absent().ints({2}, {4, 4}).run("Resize", [&](Model& m, NodeId n) {
            int64_t axes[] = {2, 3};
            CHECK(m.set_ints(n, "axes", Span<const int64_t>(axes, 2)) == Status::Ok);
            CHECK(m.set_string(n, "keep_aspect_ratio_policy", policy) == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);
        Shape want = std::string(policy) == "not_larger" ? Shape{1, 1, 2, 4} : std::string(policy) == "not_smaller" ? Shape{1, 1, 4, 8}
                                                                                                                  : Shape{1, 1, 4, 4};
        CHECK(dims_of(r.descs[0]) == want);
    }
    {
        Result r = OpModel(18).input({1, 1, 2, 4}, wide).absent().absent().ints({4}, {1, 1, 4, 4}).run("Resize", [](Model& m, NodeId n) {
            CHECK(m.set_string(n, "keep_aspect_ratio_policy", "bigger") == Status::Ok);
        });
        CHECK(r.status == Status::InvalidArgument);
    }
    {
        Result r = OpModel(17).input({1, 1, 2, 4}, wide).absent().absent().ints({4}, {1, 1, 4, 4}).run("Resize", [](Model& m, NodeId n) {
            CHECK(m.set_string(n, "keep_aspect_ratio_policy", "not_larger") == Status::Ok);
        });
        REQUIRE(r.status == Status::Ok);   // not an attribute before 18: stretch
        CHECK(dims_of(r.descs[0]) == Shape{1, 1, 4, 4});
    }
    auto linear = [](int64_t antialias) {
        return [=](Model& m, NodeId n) {
            CHECK(m.set_string(n, "mode", "linear") == Status::Ok);
            CHECK(m.set_int(n, "antialias", antialias) == Status::Ok);
        };
    };
    {
        Result r = OpModel(18).input({1, 1, 2, 2}, x).absent().floats({4}, {1, 1, 0.5f, 0.5f}).run("Resize", linear(1));
        CHECK(r.status == Status::Unsupported);   // the stretched filter is not implemented
        CHECK(contains(r.error, "Resize 'node'"));
        CHECK(contains(r.error, "antialias"));
    }
    {
        Result r = OpModel(18).input({1, 1, 2, 2}, x).absent().floats({4}, {1, 1, 2, 2}).run("Resize", linear(1));
        CHECK(r.status == Status::Ok);   // upscaling: antialias changes nothing
    }
    {
        Result r = OpModel(17).input({1, 1, 2, 2}, x).absent().floats({4}, {1, 1, 0.5f, 0.5f}).run("Resize", linear(1));
        CHECK(r.status == Status::Ok);   // not an attribute before 18
    }
    auto symmetric = [](Model& m, NodeId n) {
        CHECK(m.set_string(n, "mode", "linear") == Status::Ok);
        CHECK(m.set_string(n, "coordinate_transformation_mode", "half_pixel_symmetric") == Status::Ok);
    };
    {
        // width 4 * 0.6 = 2.4 floors to 2: the output's centre moves to the input's
        Result r = OpModel(19).input({1, 1, 1, 4}, x).absent().floats({4}, {1, 1, 1, 0.6f}).run("Resize", symmetric);
        REQUIRE(r.status == Status::Ok);
        CHECK(dims_of(r.descs[0]) == Shape{1, 1, 1, 2});
        check_values(r.values[0], {1.0f + 2.0f / 3.0f, 3.0f + 1.0f / 3.0f});
    }
    {
        Result r = OpModel(18).input({1, 1, 1, 4}, x).absent().floats({4}, {1, 1, 1, 0.6f}).run("Resize", symmetric);
        CHECK(r.status == Status::Unsupported);   // a mode of 19 on
        CHECK(contains(r.error, "half_pixel_symmetric"));
    }
}

TEST_CASE("opsets: AveragePool dilations (opset 19)") {
    Result r = OpModel(19).input({1, 1, 1, 4}, {1, 2, 3, 4}).run("AveragePool", [](Model& m, NodeId n) {
        int64_t kernel[] = {1, 2}, dilations[] = {1, 2};
        CHECK(m.set_ints(n, "kernel_shape", Span<const int64_t>(kernel, 2)) == Status::Ok);
        CHECK(m.set_ints(n, "dilations", Span<const int64_t>(dilations, 2)) == Status::Ok);
    });
    REQUIRE(r.status == Status::Ok);
    CHECK(dims_of(r.descs[0]) == Shape{1, 1, 1, 2});
    check_values(r.values[0], {2, 3});
}

TEST_CASE("opsets: refused legacy versions (Cast-1, Tile-1), Concat-1's default axis") {
    {
        Result r = OpModel(5).input({2, 3}, kX23).ints({2}, {1, 2}).run("Tile");
        CHECK(r.status == Status::Unsupported);
        CHECK(r.error == "Tile 'node': Tile-1 (opset 5) is not implemented: tiles and axis inputs");
    }
    {
        Result r = OpModel(6).input({2, 3}, kX23).ints({2}, {1, 2}).run("Tile");
        REQUIRE(r.status == Status::Ok);
        CHECK(dims_of(r.descs[0]) == Shape{2, 6});
    }
    {
        Result r = OpModel(1).input({2, 3}, kX23).run("Cast", [](Model& m, NodeId n) { CHECK(m.set_string(n, "to", "FLOAT") == Status::Ok); });
        CHECK(r.status == Status::Unsupported);
        CHECK(r.error == "Cast 'node': Cast-1 (opset 1) is not implemented: 'to' as a type name string");
    }
    {
        Result r = OpModel(28).input({2, 3}, kX23).run("Cast", [](Model& m, NodeId n) { CHECK(m.set_int(n, "to", 1) == Status::Ok); });
        REQUIRE(r.status == Status::Ok);   // Cast-25: types only
        check_values(r.values[0], kX23);
    }
    {
        Result r = OpModel(1).input({2, 3}, kX23).input({2, 1}, {7, 8}).run("Concat");
        REQUIRE(r.status == Status::Ok);   // axis 1 by default
        CHECK(dims_of(r.descs[0]) == Shape{2, 4});
        check_values(r.values[0], {1, 2, 3, 7, 4, 5, 6, 8});
    }
    {
        Result r = OpModel(4).input({2, 3}, kX23).input({2, 1}, {7, 8}).run("Concat");
        CHECK(r.status == Status::InvalidArgument);   // required from 4
    }
}
