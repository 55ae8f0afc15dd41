// Reliability: a malformed-model corpus generated here (every model is written by
// test/protobuf_writer.h, never as hand-edited bytes), the Limits at and one past each limit,
// JIT kernels against PROT_NONE guard pages, an allocation fault at every TESSEL_MALLOC of a
// full read + compile + infer, and concurrent requests with a concurrent compile (run under
// ASan/UBSan and TSan by `make test-sanitize`). Each bad input has its exact Status, or runs
// correctly where it is legal.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime.h"
#include "protobuf_writer.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// ---- protobuf writer: test/protobuf_writer.h
using test::attr_int;
using test::attr_ints;
using test::attr_tensor;
using test::GraphSpec;
using test::node;
using test::output;
using test::Pb;
using test::raw_of;
using test::tensor_raw;
using test::value_info;
using namespace test::onnx_type;

Pb floats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    return tensor_raw(name, FLOAT, dims, raw_of(v));
}
Pb ints(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& v) {
    return tensor_raw(name, INT64, dims, raw_of(v));
}

// This file's graphs are named "reliability": the same bytes keep the byte-by-byte tests
// (truncations, flips) walking the same inputs.
std::string model_bytes(const GraphSpec& g) { return test::model_proto(test::graph(g, "reliability")).b; }

// One node reading x (float, dims) plus initializers, writing y.
std::string one_node(const std::string& op, const std::vector<int64_t>& dims, const std::vector<std::string>& inputs,
                     const std::vector<Pb>& initializers = {}, const std::vector<Pb>& attributes = {}, int out_type = FLOAT) {
    GraphSpec g;
    g.nodes = {node(op, inputs, {"y"}, attributes)};
    g.initializers = initializers;
    g.inputs = {value_info("x", FLOAT, dims)};
    g.outputs = {output("y", out_type)};
    return model_bytes(g);
}

// ---- running a model: read, compile, create a request, infer -------------------------------
enum class Stage { Read, Compile, Request, Infer, Done };
const char* stage_name(Stage s) {
    static const char* const names[] = {"read", "compile", "request", "infer", "done"};
    return names[(int)s];
}

using Filler = std::function<void(uint32_t index, Tensor& tensor)>;

void default_fill(uint32_t index, Tensor& t) {
    for (uint64_t k = 0; k < t.elements(); ++k) {
        switch (t.type()) {
        case ElementType::Float32: t.data_as<float>()[k] = (float)((int)((k * 7 + index * 3) % 11) - 5) * 0.5f; break;
        case ElementType::Int64: t.data_as<int64_t>()[k] = (int64_t)(k % 2); break;
        case ElementType::Int32: t.data_as<int32_t>()[k] = (int32_t)(k % 2); break;
        default: static_cast<uint8_t*>(t.data())[k * element_size(t.type())] = (uint8_t)(k & 1); break;
        }
    }
}

struct Outcome {
    Stage stage = Stage::Read;     // where it stopped (Done: everything ran)
    Status status = Status::Ok;    // of that stage
    std::string error;
    std::vector<std::vector<float>> outputs;   // float outputs (others: empty)
    std::vector<std::vector<uint8_t>> raw;     // every output's bytes
    std::string where() const { return std::string(stage_name(stage)) + ": " + status_name(status) + ": " + error; }
};

Outcome run(const std::string& bytes, const char* device = "CPU", const Limits* limits = nullptr,
            const Filler& fill = default_fill, Span<const ConfigEntry> config = Span<const ConfigEntry>(),
            const std::string& folder = "") {
    Outcome o;
    Model model;
    o.status = limits ? model.read_onnx(bytes.data(), bytes.size(), StringView(folder.data(), folder.size()), *limits)
                      : model.read_onnx(bytes.data(), bytes.size(), StringView(folder.data(), folder.size()));
    if (o.status != Status::Ok) { o.error = model.last_error(); return o; }
    Core core;
    if (limits) core.limits() = *limits;
    CompiledModel compiled;
    o.stage = Stage::Compile;
    o.status = core.compile_model(model, device, config, &compiled);
    if (o.status != Status::Ok) { o.error = core.last_error(); return o; }
    InferRequest request;
    o.stage = Stage::Request;
    o.status = compiled.create_request(&request);
    if (o.status != Status::Ok) { o.error = compiled.last_error(); return o; }
    for (uint32_t i = 0; i < compiled.input_count(); ++i) fill(i, request.input(i));
    o.stage = Stage::Infer;
    o.status = request.infer();
    if (o.status != Status::Ok) { o.error = request.last_error(); return o; }
    o.stage = Stage::Done;
    for (uint32_t i = 0; i < compiled.output_count(); ++i) {
        const Tensor& t = request.output(i);
        const uint8_t* p = static_cast<const uint8_t*>(t.data());
        o.raw.emplace_back(p, p + t.bytes());
        if (t.type() == ElementType::Float32) o.outputs.emplace_back(t.data_as<float>(), t.data_as<float>() + t.elements());
        else o.outputs.emplace_back();
    }
    return o;
}

#define CHECK_OUTCOME(outcome, expected_stage, expected_status)                                 \
    do {                                                                                       \
        const Outcome& o_ = (outcome);                                                         \
        INFO(o_.where());                                                                      \
        CHECK(o_.stage == (expected_stage));                                                   \
        CHECK(o_.status == (expected_status));                                                 \
    } while (0)

// The small model of the truncation, flip and allocation-fault tests: x[2,3] + W, Relu, a
// Gather of rows by a constant index list, Concat with x, Sigmoid; two outputs.
std::string small_model() {
    GraphSpec g;
    g.nodes = {node("Add", {"x", "W"}, {"a"}), node("Relu", {"a"}, {"r"}),
               node("Gather", {"r", "idx"}, {"g"}, {attr_int("axis", 0)}),
               node("Concat", {"g", "x"}, {"c"}, {attr_int("axis", 0)}), node("Sigmoid", {"c"}, {"y"}),
               node("Mul", {"x", "x"}, {"z"})};
    g.initializers = {floats("W", {3}, {0.5f, -1.0f, 2.0f}), ints("idx", {3}, {1, 0, -1})};
    g.inputs = {value_info("x", FLOAT, {2, 3})};
    g.outputs = {output("y"), output("z")};
    return model_bytes(g);
}

std::vector<std::vector<float>> small_model_expected() {
    float x[2][3];
    for (int k = 0; k < 6; ++k) x[k / 3][k % 3] = (float)((int)((k * 7) % 11) - 5) * 0.5f;
    const float w[3] = {0.5f, -1.0f, 2.0f};
    float r[2][3];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) r[i][j] = std::max(0.0f, x[i][j] + w[j]);
    const int rows[3] = {1, 0, 1};
    std::vector<float> c;
    for (int row : rows) for (int j = 0; j < 3; ++j) c.push_back(r[row][j]);
    for (int i = 0; i < 2; ++i) for (int j = 0; j < 3; ++j) c.push_back(x[i][j]);
    std::vector<float> y, z;
    for (float v : c) y.push_back(1.0f / (1.0f + std::exp(-v)));
    for (int i = 0; i < 2; ++i) for (int j = 0; j < 3; ++j) z.push_back(x[i][j] * x[i][j]);
    return {y, z};
}

bool close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return false;
        for (size_t k = 0; k < a[i].size(); ++k)
            if (!(std::fabs(a[i][k] - b[i][k]) <= 1e-6f + 1e-6f * std::fabs(b[i][k]))) return false;
    }
    return true;
}

}  // namespace

// ============================================================================================
// Malformed-model corpus
// ============================================================================================

TEST_CASE("reliability: the small model runs and gives the expected outputs on CPU and HETERO") {
    Outcome cpu = run(small_model());
    REQUIRE_MESSAGE(cpu.stage == Stage::Done, cpu.where());
    CHECK(close(cpu.outputs, small_model_expected()));
    ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Gather,Sigmoid"}};
    Outcome hetero = run(small_model(), "HETERO:TEMPLATE,CPU", nullptr, default_fill, config);
    REQUIRE_MESSAGE(hetero.stage == Stage::Done, hetero.where());
    CHECK(close(hetero.outputs, small_model_expected()));
}

TEST_CASE("reliability: external data outside the folder, wrong sizes, offset + length overflow") {
    std::string dir = test::make_temp_dir("tessel-reliability-");
    std::string outside = test::make_temp_dir("tessel-reliability-");
    std::vector<float> w = {1, 2, 3};
    test::write_file(dir + "/w.bin", raw_of(w));
    test::write_file(outside + "/secret.bin", raw_of(w));
    REQUIRE(symlink((outside + "/secret.bin").c_str(), (dir + "/link.bin").c_str()) == 0);
    REQUIRE(mkdir((dir + "/sub").c_str(), 0700) == 0);
    REQUIRE(symlink(outside.c_str(), (dir + "/sub/out").c_str()) == 0);   // a folder link out
    auto external = [](const std::string& location, const std::string& offset, const std::string& length,
                       int64_t dim = 3) {
        Pb t;
        t.packed(1, {dim}).u(2, FLOAT).bytes(8, "W");
        auto entry = [&](const std::string& k, const std::string& v) { Pb e; e.bytes(1, k).bytes(2, v); t.msg(13, e); };
        entry("location", location);
        if (!offset.empty()) entry("offset", offset);
        if (!length.empty()) entry("length", length);
        t.u(14, 1);
        return one_node("Add", {3}, {"x", "W"}, {t});
    };
    SUBCASE("inside: runs") {
        Outcome o = run(external("w.bin", "", ""), "CPU", nullptr, default_fill, {}, dir);
        REQUIRE_MESSAGE(o.stage == Stage::Done, o.where());
        CHECK(o.outputs[0][0] == -2.5f + 1.0f);
    }
    SUBCASE("'..' component") {
        CHECK_OUTCOME(run(external("../" + outside.substr(5) + "/secret.bin", "", ""), "CPU", nullptr, default_fill, {}, dir),
                      Stage::Read, Status::InvalidArgument);
        CHECK_OUTCOME(run(external("sub/../w.bin", "", ""), "CPU", nullptr, default_fill, {}, dir), Stage::Read,
                      Status::InvalidArgument);
    }
    SUBCASE("absolute path") {
        CHECK_OUTCOME(run(external(outside + "/secret.bin", "", ""), "CPU", nullptr, default_fill, {}, dir), Stage::Read,
                      Status::InvalidArgument);
    }
    SUBCASE("a file link and a folder link out of the folder") {
        CHECK_OUTCOME(run(external("link.bin", "", ""), "CPU", nullptr, default_fill, {}, dir), Stage::Read,
                      Status::InvalidArgument);
        CHECK_OUTCOME(run(external("sub/out/secret.bin", "", ""), "CPU", nullptr, default_fill, {}, dir), Stage::Read,
                      Status::InvalidArgument);
    }
    SUBCASE("declared size != bytes present") {
        CHECK_OUTCOME(run(external("w.bin", "0", "8"), "CPU", nullptr, default_fill, {}, dir), Stage::Read, Status::ParseError);
        CHECK_OUTCOME(run(external("w.bin", "", "", 4), "CPU", nullptr, default_fill, {}, dir), Stage::Read, Status::ParseError);
        CHECK_OUTCOME(run(external("w.bin", "4", "12"), "CPU", nullptr, default_fill, {}, dir), Stage::Read, Status::ParseError);
        // raw_data of the wrong size, float_data with too few values
        CHECK_OUTCOME(run(one_node("Add", {3}, {"x", "W"}, {tensor_raw("W", FLOAT, {3}, std::string(8, '\0'))})),
                      Stage::Read, Status::ParseError);
        Pb typed;
        typed.packed(1, {3}).u(2, FLOAT).bytes(8, "W").f32(4, 1.0f).f32(4, 2.0f);
        CHECK_OUTCOME(run(one_node("Add", {3}, {"x", "W"}, {typed})), Stage::Read, Status::ParseError);
    }
    SUBCASE("offset + length overflow") {
        CHECK_OUTCOME(run(external("w.bin", "18446744073709551615", "12"), "CPU", nullptr, default_fill, {}, dir),
                      Stage::Read, Status::ParseError);
        CHECK_OUTCOME(run(external("w.bin", "12", "18446744073709551605"), "CPU", nullptr, default_fill, {}, dir),
                      Stage::Read, Status::ParseError);
        CHECK_OUTCOME(run(external("w.bin", "99999999999999999999999", "12"), "CPU", nullptr, default_fill, {}, dir),
                      Stage::Read, Status::ParseError);
    }
    test::remove_tree(dir);
    test::remove_tree(outside);
}

TEST_CASE("reliability: dims whose product overflows") {
    // An initializer (no data needed: the dims are checked first).
    CHECK_OUTCOME(run(one_node("Add", {3}, {"x", "W"}, {tensor_raw("W", FLOAT, {1ll << 32, 1ll << 32, 16}, "")})),
                  Stage::Read, Status::LimitExceeded);
    // A graph input: read (dims are symbolic or not yet known to be too large), refused at compile.
    CHECK_OUTCOME(run(one_node("Relu", {1ll << 32, 1ll << 32, 16}, {"x"})), Stage::Compile, Status::LimitExceeded);
    // A shape computed from data: Reshape to dims whose product overflows.
    CHECK_OUTCOME(run(one_node("Reshape", {3}, {"x", "s"}, {ints("s", {3}, {1ll << 32, 1ll << 32, 16})})), Stage::Compile,
                  Status::InvalidArgument);
    // Regression (fuzz/blob_import, UBSan): an empty tensor with a huge other dim passed the
    // element check (0 elements), and Transpose's strides overflowed int64.
    CHECK_OUTCOME(run(one_node("Transpose", {2, 1ll << 62, 0}, {"x"})), Stage::Compile, Status::LimitExceeded);
    CHECK_OUTCOME(run(one_node("Relu", {0, 1ll << 62, 1ll << 62}, {"x"})), Stage::Compile, Status::LimitExceeded);
    {
        Limits limits;
        limits.max_tensor_elements = 64;
        CHECK_OUTCOME(run(one_node("Transpose", {64, 0}, {"x"}), "CPU", &limits), Stage::Done, Status::Ok);
        CHECK_OUTCOME(run(one_node("Transpose", {65, 0}, {"x"}), "CPU", &limits), Stage::Compile, Status::LimitExceeded);
    }
    // ConstantOfShape whose shape overflows.
    CHECK_OUTCOME(run(one_node("ConstantOfShape", {3}, {"s"}, {ints("s", {3}, {1ll << 32, 1ll << 32, 16})})),
                  Stage::Compile, Status::LimitExceeded);
}

TEST_CASE("reliability: negative and out-of-range axes and indices") {
    SUBCASE("attributes") {
        CHECK_OUTCOME(run(one_node("Concat", {2, 3}, {"x", "x"}, {}, {attr_int("axis", 2)})), Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Concat", {2, 3}, {"x", "x"}, {}, {attr_int("axis", -3)})), Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Gather", {2, 3}, {"x", "i"}, {ints("i", {1}, {0})}, {attr_int("axis", 2)})), Stage::Compile,
                      Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Gather", {2, 3}, {"x", "i"}, {ints("i", {1}, {0})}, {attr_int("axis", INT64_MIN)})),
                      Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Flatten", {2, 3}, {"x"}, {}, {attr_int("axis", 3)})), Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Transpose", {2, 3}, {"x"}, {}, {attr_ints("perm", {0, 2})})), Stage::Compile,
                      Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Transpose", {2, 3}, {"x"}, {}, {attr_ints("perm", {1, 1})})), Stage::Compile,
                      Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Squeeze", {2, 1}, {"x", "a"}, {ints("a", {1}, {-3})})), Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Unsqueeze", {2, 3}, {"x", "a"}, {ints("a", {1}, {3})})), Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Split", {2, 4}, {"x"}, {}, {attr_int("axis", -3)})), Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Slice", {2, 3}, {"x", "s", "e", "a"}, {ints("s", {1}, {0}), ints("e", {1}, {1}), ints("a", {1}, {2})})),
                      Stage::Compile, Status::InvalidArgument);
    }
    SUBCASE("constant indices out of range: compile") {
        CHECK_OUTCOME(run(one_node("Gather", {2, 3}, {"x", "i"}, {ints("i", {2}, {0, 2})})), Stage::Compile, Status::InvalidArgument);
        CHECK_OUTCOME(run(one_node("Gather", {2, 3}, {"x", "i"}, {ints("i", {1}, {-3})})), Stage::Compile, Status::InvalidArgument);
    }
    SUBCASE("indices given at run time: out of range is InvalidArgument from infer; in range (negative too) runs") {
        GraphSpec g;
        g.nodes = {node("Gather", {"x", "i"}, {"y"}, {attr_int("axis", 1)})};
        g.inputs = {value_info("x", FLOAT, {2, 3}), value_info("i", INT64, {2})};
        g.outputs = {output("y")};
        std::string bytes = model_bytes(g);
        for (int64_t bad : std::vector<int64_t>{3, -4, INT64_MAX, INT64_MIN}) {
            Filler fill = [bad](uint32_t index, Tensor& t) {
                if (index == 1) { t.data_as<int64_t>()[0] = 0; t.data_as<int64_t>()[1] = bad; }
                else default_fill(index, t);
            };
            CHECK_OUTCOME(run(bytes, "CPU", nullptr, fill), Stage::Infer, Status::InvalidArgument);
            CHECK_OUTCOME(run(bytes, "TEMPLATE", nullptr, fill), Stage::Infer, Status::InvalidArgument);
        }
        Filler fill = [](uint32_t index, Tensor& t) {
            if (index == 1) { t.data_as<int64_t>()[0] = -1; t.data_as<int64_t>()[1] = 2; }
            else for (int k = 0; k < 6; ++k) t.data_as<float>()[k] = (float)k;
        };
        Outcome o = run(bytes, "CPU", nullptr, fill);
        REQUIRE_MESSAGE(o.stage == Stage::Done, o.where());
        CHECK(o.outputs[0] == std::vector<float>{2, 2, 5, 5});
    }
}

TEST_CASE("reliability: the same tensor as input and output, a node writing a graph input, cycles") {
    {
        GraphSpec g;   // graph output x is the graph input x
        g.inputs = {value_info("x", FLOAT, {3})};
        g.outputs = {output("x")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Read, Status::Unsupported);
    }
    {
        GraphSpec g;   // a node reads and writes x
        g.nodes = {node("Relu", {"x"}, {"x"})};
        g.inputs = {value_info("x", FLOAT, {3})};
        g.outputs = {output("x")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Read, Status::Unsupported);
        g.nodes = {node("Relu", {"x"}, {"x"}), node("Abs", {"x"}, {"y"})};   // x written again, read by Abs
        g.outputs = {output("y")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Read, Status::DuplicateName);
    }
    {
        GraphSpec g;   // a node writes an initializer's name
        g.nodes = {node("Relu", {"x"}, {"W"}), node("Add", {"x", "W"}, {"y"})};
        g.initializers = {floats("W", {3}, {1, 2, 3})};
        g.inputs = {value_info("x", FLOAT, {3})};
        g.outputs = {output("y")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Read, Status::DuplicateName);
    }
    {
        GraphSpec g;   // two nodes write the same tensor
        g.nodes = {node("Relu", {"x"}, {"t"}), node("Neg", {"x"}, {"t"}), node("Abs", {"t"}, {"y"})};
        g.inputs = {value_info("x", FLOAT, {3})};
        g.outputs = {output("y")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Read, Status::DuplicateName);
    }
    {
        GraphSpec g;   // a node reads its own output
        g.nodes = {node("Add", {"x", "t"}, {"t"}), node("Abs", {"t"}, {"y"})};
        g.inputs = {value_info("x", FLOAT, {3})};
        g.outputs = {output("y")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Read, Status::Cycle);
    }
    {
        GraphSpec g;   // a longer cycle, nodes out of order
        g.nodes = {node("Relu", {"c"}, {"a"}), node("Add", {"a", "x"}, {"b"}), node("Neg", {"b"}, {"c"}), node("Abs", {"c"}, {"y"})};
        g.inputs = {value_info("x", FLOAT, {3})};
        g.outputs = {output("y")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Read, Status::Cycle);
    }
}

TEST_CASE("reliability: zero divisors and bad groups in attributes") {
    CHECK_OUTCOME(run(one_node("DepthToSpace", {1, 4, 2, 2}, {"x"}, {}, {attr_int("blocksize", 0)})), Stage::Compile,
                  Status::InvalidArgument);
    CHECK_OUTCOME(run(one_node("SpaceToDepth", {1, 4, 2, 2}, {"x"}, {}, {attr_int("blocksize", 0)})), Stage::Compile,
                  Status::InvalidArgument);
    CHECK_OUTCOME(run(one_node("SpaceToDepth", {1, 4, 2, 2}, {"x"}, {}, {attr_int("blocksize", -2)})), Stage::Compile,
                  Status::InvalidArgument);
    CHECK_OUTCOME(run(one_node("Slice", {2, 3}, {"x", "s", "e", "a", "p"},
                               {ints("s", {1}, {0}), ints("e", {1}, {2}), ints("a", {1}, {1}), ints("p", {1}, {0})})),
                  Stage::Compile, Status::InvalidArgument);
    {
        GraphSpec g;   // Range with delta 0 (all constant: refused when folded)
        g.nodes = {node("Range", {"s", "l", "d"}, {"y"})};
        g.initializers = {tensor_raw("s", FLOAT, {}, raw_of(std::vector<float>{0})), tensor_raw("l", FLOAT, {}, raw_of(std::vector<float>{4})),
                          tensor_raw("d", FLOAT, {}, raw_of(std::vector<float>{0}))};
        g.outputs = {output("y")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Compile, Status::InvalidArgument);
    }
    {
        GraphSpec g;   // integer division and modulo by a zero given at run time
        g.nodes = {node("Div", {"a", "b"}, {"y"}), node("Mod", {"a", "b"}, {"z"})};
        g.inputs = {value_info("a", INT64, {3}), value_info("b", INT64, {3})};
        g.outputs = {output("y", INT64), output("z", INT64)};
        Filler zero = [](uint32_t index, Tensor& t) {
            for (int k = 0; k < 3; ++k) t.data_as<int64_t>()[k] = index == 0 ? 7 : (k == 2 ? 0 : 2);
        };
        CHECK_OUTCOME(run(model_bytes(g), "CPU", nullptr, zero), Stage::Infer, Status::InvalidArgument);
        Filler overflow = [](uint32_t index, Tensor& t) {   // INT64_MIN / -1 wraps, no trap
            for (int k = 0; k < 3; ++k) t.data_as<int64_t>()[k] = index == 0 ? INT64_MIN : -1;
        };
        Outcome o = run(model_bytes(g), "CPU", nullptr, overflow);
        REQUIRE_MESSAGE(o.stage == Stage::Done, o.where());
        int64_t y0, z0;
        std::memcpy(&y0, o.raw[0].data(), 8);
        std::memcpy(&z0, o.raw[1].data(), 8);
        CHECK(y0 == INT64_MIN);
        CHECK(z0 == 0);
    }
    const bool have_conv = find_builtin_kernel("Conv") != nullptr;
    Pb w = floats("w", {4, 2, 3, 3}, std::vector<float>(72, 0.5f));
    auto conv = [&](const std::vector<Pb>& attributes, int64_t channels = 4) {
        return one_node("Conv", {1, channels, 6, 6}, {"x", "w"}, {w}, attributes);
    };
    // Without the NN kernels Conv is Unsupported (compile); with them each case is InvalidArgument.
    Status expected = have_conv ? Status::InvalidArgument : Status::Unsupported;
    CHECK_OUTCOME(run(conv({attr_ints("strides", {0, 1}), attr_int("group", 2)})), Stage::Compile, expected);
    CHECK_OUTCOME(run(conv({attr_ints("dilations", {1, 0}), attr_int("group", 2)})), Stage::Compile, expected);
    CHECK_OUTCOME(run(conv({attr_int("group", 0)})), Stage::Compile, expected);
    CHECK_OUTCOME(run(conv({attr_int("group", -2)})), Stage::Compile, expected);
    CHECK_OUTCOME(run(conv({attr_int("group", 3)}, 6)), Stage::Compile, expected);    // 3 does not divide 4 outputs
    CHECK_OUTCOME(run(conv({attr_int("group", 2)}, 5)), Stage::Compile, expected);    // 5 channels, group 2
    CHECK_OUTCOME(run(one_node("MaxPool", {1, 1, 4, 4}, {"x"}, {}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {0, 2})})),
                  Stage::Compile, find_builtin_kernel("MaxPool") ? Status::InvalidArgument : Status::Unsupported);
    CHECK_OUTCOME(run(one_node("AveragePool", {1, 1, 4, 4}, {"x"}, {}, {attr_ints("kernel_shape", {0, 2})})),
                  Stage::Compile, find_builtin_kernel("AveragePool") ? Status::InvalidArgument : Status::Unsupported);
    if (have_conv) {
        Outcome o = run(conv({attr_int("group", 2)}));   // the legal one runs
        CHECK_MESSAGE(o.stage == Stage::Done, o.where());
    }
}

TEST_CASE("reliability: data-driven huge allocations are LimitExceeded at compile") {
    CHECK_OUTCOME(run(one_node("ConstantOfShape", {3}, {"s"}, {ints("s", {2}, {1ll << 20, 1ll << 20})})), Stage::Compile,
                  Status::LimitExceeded);
    CHECK_OUTCOME(run(one_node("Expand", {3}, {"x", "s"}, {ints("s", {3}, {1ll << 20, 1ll << 20, 3})})), Stage::Compile,
                  Status::LimitExceeded);
    CHECK_OUTCOME(run(one_node("Tile", {3}, {"x", "r"}, {ints("r", {1}, {1ll << 40})})), Stage::Compile, Status::LimitExceeded);
    CHECK_OUTCOME(run(one_node("Tile", {3}, {"x", "r"}, {ints("r", {1}, {INT64_MAX})})), Stage::Compile, Status::LimitExceeded);
    CHECK_OUTCOME(run(one_node("Pad", {3}, {"x", "p"}, {ints("p", {2}, {0, 1ll << 40})})), Stage::Compile, Status::LimitExceeded);
    {
        GraphSpec g;   // Range over 1e12 values
        g.nodes = {node("Range", {"s", "l", "d"}, {"y"})};
        g.initializers = {tensor_raw("s", FLOAT, {}, raw_of(std::vector<float>{0})),
                          tensor_raw("l", FLOAT, {}, raw_of(std::vector<float>{1e12f})),
                          tensor_raw("d", FLOAT, {}, raw_of(std::vector<float>{1}))};
        g.outputs = {output("y")};
        CHECK_OUTCOME(run(model_bytes(g)), Stage::Compile, Status::LimitExceeded);
    }
    // Regression: Resize's prepare built its per-axis tables (20 bytes per output index) before
    // the output's element count was checked: 1e9 scales took the machine's memory.
    const bool have_resize = find_builtin_kernel("Resize") != nullptr;
    Status resize_status = have_resize ? Status::LimitExceeded : Status::Unsupported;
    CHECK_OUTCOME(run(one_node("Resize", {1, 1, 2, 2}, {"x", "", "", "sizes"}, {ints("sizes", {4}, {1, 1, 1ll << 20, 1ll << 20})})),
                  Stage::Compile, resize_status);
    CHECK_OUTCOME(run(one_node("Resize", {1, 1, 2, 2}, {"x", "", "scales"},
                               {floats("scales", {4}, {1.0f, 1.0f, 1e9f, 1e9f})})),
                  Stage::Compile, resize_status);
    if (have_resize) {   // the compile's own limit bounds the tables too
        Limits small;
        small.max_tensor_elements = 1u << 16;
        CHECK_OUTCOME(run(one_node("Resize", {1, 1, 2, 2}, {"x", "", "", "sizes"}, {ints("sizes", {4}, {1, 1, 1, 1 << 17})}), "CPU",
                          &small),
                      Stage::Compile, Status::LimitExceeded);
        CHECK_OUTCOME(run(one_node("Resize", {1, 1, 2, 2}, {"x", "", "", "sizes"}, {ints("sizes", {4}, {1, 1, 1, 1 << 16})}), "CPU",
                          &small),
                      Stage::Done, Status::Ok);
    }
    // Below the element limit but above the activation limit.
    Limits limits;
    limits.max_arena_bytes = 1u << 20;
    CHECK_OUTCOME(run(one_node("Expand", {3}, {"x", "s"}, {ints("s", {2}, {1 << 17, 3})}), "CPU", &limits), Stage::Compile,
                  Status::LimitExceeded);
}

TEST_CASE("reliability: a model truncated at every offset through read, compile and infer") {
    std::string bytes = small_model();
    const std::vector<std::vector<float>> expected = small_model_expected();
    int ok = 0;
    for (size_t n = 0; n <= bytes.size(); ++n) {
        Outcome o = run(bytes.substr(0, n));
        INFO("truncated at " << n << ": " << o.where());
        if (o.stage == Stage::Done) {
            ++ok;
            // A cut at a field boundary can drop whole trailing fields; what runs must be right
            // for the outputs it still has.
            for (size_t k = 0; k < o.outputs.size() && k < expected.size(); ++k)
                if (o.outputs[k].size() == expected[k].size()) CHECK(close({o.outputs[k]}, {expected[k]}));
        } else {
            CHECK(o.status != Status::Ok);
            CHECK(!o.error.empty());
        }
    }
    CHECK(run(bytes).stage == Stage::Done);
    CHECK(ok >= 1);
}

TEST_CASE("reliability: every byte of a model flipped, one at a time, through read, compile and infer") {
    std::string bytes = small_model();
    int done = 0, refused = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        for (uint8_t mask : {(uint8_t)0xff, (uint8_t)0x01, (uint8_t)0x80}) {
            std::string flipped = bytes;
            flipped[i] = (char)(flipped[i] ^ mask);
            Outcome o = run(flipped);
            INFO("byte " << i << " ^ " << (int)mask << ": " << o.where());
            if (o.stage == Stage::Done) ++done;
            else {
                ++refused;
                CHECK(o.status != Status::Ok);
                CHECK(!o.error.empty());
            }
        }
    }
    CHECK(refused > 0);
    CHECK(done > 0);   // flipped float bits of W, say, give a valid model
}

// ============================================================================================
// Limits: the limit itself is accepted, one past it is LimitExceeded
// ============================================================================================

TEST_CASE("reliability: Limits at the limit and one past it") {
    // x[4,8] -> Relu -> Expand to [2,4,8] -> y
    GraphSpec g;
    g.nodes = {node("Relu", {"x"}, {"r"}), node("Expand", {"r", "s"}, {"y"})};
    g.initializers = {ints("s", {3}, {2, 4, 8})};
    g.inputs = {value_info("x", FLOAT, {4, 8})};
    g.outputs = {output("y")};
    const std::string bytes = model_bytes(g);
    Model model;
    REQUIRE(model.read_onnx(bytes.data(), bytes.size()) == Status::Ok);
    const uint64_t nodes = model.graph.node_count();   // Parameter, Constant, Relu, Expand, Result
    REQUIRE(nodes == 5);

    auto compile = [&](const Limits& limits, std::string* error = nullptr) {
        Core core;
        core.limits() = limits;
        CompiledModel compiled;
        Status s = core.compile_model(model, "CPU", {}, &compiled);
        if (error) *error = core.last_error();
        return s;
    };
    auto read = [&](const std::string& b, const Limits& limits) {
        Model m;
        return m.read_onnx(b.data(), b.size(), StringView(), limits);
    };
    SUBCASE("max_nodes") {
        Limits at;
        at.max_nodes = nodes;
        CHECK(compile(at) == Status::Ok);
        CHECK(read(bytes, at) == Status::Ok);
        Limits past = at;
        past.max_nodes = nodes - 1;
        CHECK(compile(past) == Status::LimitExceeded);
        CHECK(read(bytes, past) == Status::LimitExceeded);
    }
    SUBCASE("max_rank") {
        Limits at;
        at.max_rank = 3;   // y has rank 3
        CHECK(compile(at) == Status::Ok);
        CHECK(read(bytes, at) == Status::Ok);
        Limits past;
        past.max_rank = 2;
        CHECK(compile(past) == Status::LimitExceeded);
        // The reader sees rank 2 at most (x and s): a rank-3 input is refused by the reader.
        GraphSpec g3 = g;
        g3.inputs = {value_info("x", FLOAT, {1, 4, 8})};
        CHECK(read(model_bytes(g3), past) == Status::LimitExceeded);
        CHECK(read(model_bytes(g3), at) == Status::Ok);
    }
    SUBCASE("max_tensor_elements") {
        Limits at;
        at.max_tensor_elements = 64;   // y
        CHECK(compile(at) == Status::Ok);
        Limits past;
        past.max_tensor_elements = 63;
        std::string error;
        CHECK(compile(past, &error) == Status::LimitExceeded);
        CHECK(error.find("64") != std::string::npos);
        // The reader: an initializer of 3 elements.
        Limits three;
        three.max_tensor_elements = 3;
        CHECK(read(bytes, three) == Status::Ok);
        three.max_tensor_elements = 2;
        CHECK(read(bytes, three) == Status::LimitExceeded);
    }
    SUBCASE("max_arena_bytes") {
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(model, "CPU", {}, &compiled) == Status::Ok);
        const size_t need = compiled.arena_bytes() + compiled.scratch_bytes();   // what a request allocates
        REQUIRE(need > 0);
        Limits at;
        at.max_arena_bytes = need;
        CHECK(compile(at) == Status::Ok);
        Limits past;
        past.max_arena_bytes = need - 1;
        CHECK(compile(past) == Status::LimitExceeded);
    }
    SUBCASE("max_file_bytes: models and blobs") {
        Limits at;
        at.max_file_bytes = bytes.size();
        CHECK(read(bytes, at) == Status::Ok);
        Limits past;
        past.max_file_bytes = bytes.size() - 1;
        CHECK(read(bytes, past) == Status::LimitExceeded);
        // read_onnx_file with limits
        std::string dir = test::make_temp_dir("tessel-reliability-");
        test::write_file(dir + "/m.onnx", bytes);
        {
            Model m;
            CHECK(m.read_onnx_file((dir + "/m.onnx").c_str(), at) == Status::Ok);
            Model n;
            CHECK(n.read_onnx_file((dir + "/m.onnx").c_str(), past) == Status::LimitExceeded);
        }
        test::remove_tree(dir);
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(model, "CPU", {}, &compiled) == Status::Ok);
        std::string blob;
        REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
        Core importer;
        importer.limits().max_file_bytes = blob.size();
        CompiledModel imported;
        CHECK(importer.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
        importer.limits().max_file_bytes = blob.size() - 1;
        CHECK(importer.import_model(blob.data(), blob.size(), &imported) == Status::LimitExceeded);
    }
    SUBCASE("max_folded_bytes: a constant above it is computed at run time, same result") {
        GraphSpec c;   // ConstantOfShape [4,8] of 1.5, plus x
        Pb value = floats("", {1}, {1.5f});
        c.nodes = {node("ConstantOfShape", {"s"}, {"k"}, {attr_tensor("value", value)}), node("Add", {"x", "k"}, {"y"})};
        c.initializers = {ints("s", {2}, {4, 8})};
        c.inputs = {value_info("x", FLOAT, {4, 8})};
        c.outputs = {output("y")};
        std::string cb = model_bytes(c);
        Limits at;
        at.max_folded_bytes = 4 * 32;
        Limits past;
        past.max_folded_bytes = 4 * 32 - 1;
        Outcome a = run(cb, "CPU", &at), p = run(cb, "CPU", &past);
        REQUIRE_MESSAGE(a.stage == Stage::Done, a.where());
        REQUIRE_MESSAGE(p.stage == Stage::Done, p.where());
        CHECK(a.raw == p.raw);
        Model m;
        REQUIRE(m.read_onnx(cb.data(), cb.size()) == Status::Ok);
        Core core_at, core_past;
        core_at.limits() = at;
        core_past.limits() = past;
        CompiledModel folded, unfolded;
        REQUIRE(core_at.compile_model(m, "CPU", {}, &folded) == Status::Ok);
        REQUIRE(core_past.compile_model(m, "CPU", {}, &unfolded) == Status::Ok);
        CHECK(folded.prepared()->folded_count() > unfolded.prepared()->folded_count());
    }
}

// ============================================================================================
// JIT kernels against guard pages
// ============================================================================================

namespace {

using test::GuardedBuffer;

using test::same_bits;

}  // namespace

TEST_CASE("reliability: JIT kernels read and write nothing past their tensors (guard pages, every tail, every target)") {
    std::vector<Isa> targets;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (isa_available(isa)) targets.push_back(isa);
    int runs = 0;
    for (Isa isa : targets) {
        const int64_t w = (int64_t)isa_vector_floats(isa);
        for (int64_t n = 0; n <= 2 * w + 1; ++n) {
            for (int64_t rows : {1, 3}) {
                for (int body_kind = 0; body_kind < 3; ++body_kind) {
                    for (bool at_end : {true, false}) {
                        INFO("isa " << isa_name(isa) << " rows " << rows << " tail " << n << " body " << body_kind
                                    << (at_end ? " ending at" : " starting after") << " a guard page");
                        Arena arena;
                        SnippetBody body(&arena);
                        int64_t shape[] = {rows, n};
                        int64_t row_shape[] = {n};
                        ValueId x, y, t, u;
                        REQUIRE(body.parameter(shape, &x) == Status::Ok);
                        uint32_t params = 1, results = 1;
                        if (body_kind == 0) {   // unary, one result
                            REQUIRE(body.unary(SnippetOp::Exp, x, &t) == Status::Ok);
                            REQUIRE(body.result(t) == Status::Ok);
                        } else if (body_kind == 1) {   // binary with a broadcast row, one result
                            REQUIRE(body.parameter(row_shape, &y) == Status::Ok);
                            REQUIRE(body.binary(SnippetOp::Add, x, y, &t) == Status::Ok);
                            REQUIRE(body.unary(SnippetOp::Tanh, t, &u) == Status::Ok);
                            REQUIRE(body.result(u) == Status::Ok);
                            params = 2;
                        } else {   // two inputs of one shape, two results
                            REQUIRE(body.parameter(shape, &y) == Status::Ok);
                            REQUIRE(body.binary(SnippetOp::Mul, x, y, &t) == Status::Ok);
                            REQUIRE(body.unary(SnippetOp::Sigmoid, y, &u) == Status::Ok);
                            REQUIRE(body.result(t) == Status::Ok);
                            REQUIRE(body.result(u) == Status::Ok);
                            params = 2;
                            results = 2;
                        }
                        SnippetOptions options;
                        options.isa = isa;
                        Snippet snippet;
                        REQUIRE_MESSAGE(snippet.compile(body, options) == Status::Ok, snippet.last_error());
                        const size_t count = (size_t)(rows * n);
                        std::vector<std::unique_ptr<GuardedBuffer>> in, out;
                        std::vector<const float*> in_ptr;
                        std::vector<float*> out_ptr;
                        std::vector<std::vector<float>> expected(results, std::vector<float>(count));
                        std::vector<float*> expected_ptr;
                        for (uint32_t p = 0; p < params; ++p) {
                            size_t c = (body_kind == 1 && p == 1) ? (size_t)n : count;
                            in.emplace_back(new GuardedBuffer(c, at_end));
                            for (size_t k = 0; k < c; ++k) in.back()->data[k] = 0.25f * (float)((int)(k % 9) - 4) + 0.1f * (float)p;
                            in_ptr.push_back(in.back()->data);
                        }
                        for (uint32_t r = 0; r < results; ++r) {
                            out.emplace_back(new GuardedBuffer(count, at_end));
                            for (size_t k = 0; k < count; ++k) out.back()->data[k] = -7.0f;
                            out_ptr.push_back(out.back()->data);
                            expected_ptr.push_back(expected[r].data());
                        }
                        REQUIRE(snippet.run(Span<const float* const>(in_ptr.data(), in_ptr.size()),
                                            Span<float* const>(out_ptr.data(), out_ptr.size())) == Status::Ok);
                        REQUIRE(interpret(body, Span<const float* const>(in_ptr.data(), in_ptr.size()),
                                          Span<float* const>(expected_ptr.data(), expected_ptr.size()), isa_uses_fma(isa)) == Status::Ok);
                        bool equal = true;
                        for (uint32_t r = 0; r < results; ++r)
                            for (size_t k = 0; k < count; ++k) equal = equal && same_bits(out_ptr[r][k], expected[r][k]);
                        CHECK(equal);
                        ++runs;
                    }
                }
            }
        }
    }
    CHECK(runs > 0);
    MESSAGE("guard-page runs: " << runs << " on " << targets.size() << " targets");
}

// ============================================================================================
// Allocation faults
// ============================================================================================

TEST_CASE("reliability: the Nth TESSEL_MALLOC fails, for every N through read_onnx_file + compile + infer") {
    std::string dir = test::make_temp_dir("tessel-reliability-");
    const std::string path = dir + "/small.onnx";
    test::write_file(path, small_model());
    const std::vector<std::vector<float>> expected = small_model_expected();
    struct Result {
        Status status = Status::Ok;
        std::string stage, error;
        bool right = false;
    };
    auto pipeline = [&](const char* device) {
        Result r;
        Model model;
        r.stage = "read";
        r.status = model.read_onnx_file(path.c_str());
        if (r.status != Status::Ok) { r.error = model.last_error(); return r; }
        Core core;
        CompiledModel compiled;
        r.stage = "compile";
        ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Gather,Sigmoid"}};
        r.status = core.compile_model(model, device, Span<const ConfigEntry>(config, std::strncmp(device, "HETERO", 6) == 0 ? 1 : 0),
                                      &compiled);
        if (r.status != Status::Ok) { r.error = core.last_error(); return r; }
        std::string blob;
        r.stage = "export";
        r.status = compiled.export_model(test::append_to_string, &blob);
        if (r.status != Status::Ok) { r.error = compiled.last_error(); return r; }
        CompiledModel imported;
        r.stage = "import";
        r.status = core.import_model(blob.data(), blob.size(), &imported);
        if (r.status != Status::Ok) { r.error = core.last_error(); return r; }
        InferRequest request;
        r.stage = "request";
        r.status = imported.create_request(&request);
        if (r.status != Status::Ok) { r.error = imported.last_error(); return r; }
        default_fill(0, request.input(0));
        r.stage = "infer";
        r.status = request.infer();
        if (r.status != Status::Ok) { r.error = request.last_error(); return r; }
        std::vector<std::vector<float>> got;
        for (uint32_t o = 0; o < imported.output_count(); ++o) {
            const Tensor& t = request.output(o);
            got.emplace_back(t.data_as<float>(), t.data_as<float>() + t.elements());
        }
        r.stage = "done";
        r.right = close(got, expected);
        return r;
    };
    for (const char* device : {"CPU", "HETERO:TEMPLATE,CPU"}) {
        uint64_t before = tessel_test::allocation_count();
        Result clean = pipeline(device);
        REQUIRE_MESSAGE(clean.status == Status::Ok, clean.stage << ": " << clean.error);
        REQUIRE(clean.right);
        const uint64_t total = tessel_test::allocation_count() - before;
        REQUIRE(total > 10);
        uint64_t failed = 0;
        for (uint64_t n = 1; n <= total + 1; ++n) {
            tessel_test::fail_allocations(n);
            Result r = pipeline(device);
            tessel_test::fail_allocations(0);
            INFO(std::string(device) << ": allocation " << n << " of " << total << " failed; " << r.stage << ": " << status_name(r.status)
                        << ": " << r.error);
            if (r.status == Status::Ok) {
                CHECK(r.right);
                CHECK(n > total);   // every allocation is needed: one failing must fail the call
            } else {
                ++failed;
                CHECK(r.status == Status::OutOfMemory);
                CHECK(!r.error.empty());
            }
        }
        CHECK(failed == total);
        MESSAGE(std::string(device) << ": " << total << " allocations, each one failed in turn");
    }
    test::remove_tree(dir);
}

// ============================================================================================
// Concurrency (run under TSan by make test-sanitize)
// ============================================================================================

TEST_CASE("reliability: 4 threads of requests on one compiled model while a second model compiles on the same Core") {
    const std::string a_bytes = small_model();
    GraphSpec g2;   // the second model: an elementwise chain and a Gather
    g2.nodes = {node("Mul", {"x", "x"}, {"m"}), node("Tanh", {"m"}, {"t"}), node("Gather", {"t", "i"}, {"g"}, {attr_int("axis", 1)}),
                node("Add", {"g", "b"}, {"y"})};
    g2.initializers = {ints("i", {2}, {2, 0}), floats("b", {2}, {0.5f, -0.5f})};
    g2.inputs = {value_info("x", FLOAT, {4, 3})};
    g2.outputs = {output("y")};
    const std::string b_bytes = model_bytes(g2);
    Model a, b;
    REQUIRE(a.read_onnx(a_bytes.data(), a_bytes.size()) == Status::Ok);
    REQUIRE(b.read_onnx(b_bytes.data(), b_bytes.size()) == Status::Ok);
    Core core;
    CompiledModel compiled;
    ConfigEntry hetero_config[] = {{"TEMPLATE:SUPPORTED_OPS", "Gather,Concat"}, {"CPU:NUM_THREADS", "2"}};
    REQUIRE(core.compile_model(a, "HETERO:TEMPLATE,CPU", hetero_config, &compiled) == Status::Ok);
    auto fill = [](Tensor& t, uint32_t seed) {
        for (uint64_t k = 0; k < t.elements(); ++k) t.data_as<float>()[k] = (float)((int)((k * 5 + seed * 3) % 13) - 6) * 0.375f;
    };
    auto outputs_of = [](const InferRequest& r, uint32_t count) {
        std::vector<std::vector<uint8_t>> out;
        for (uint32_t o = 0; o < count; ++o) {
            const uint8_t* p = static_cast<const uint8_t*>(r.output(o).data());
            out.emplace_back(p, p + r.output(o).bytes());
        }
        return out;
    };
    std::vector<std::vector<std::vector<uint8_t>>> expected;
    for (uint32_t t = 0; t < 4; ++t) {
        InferRequest r;
        test::create_and_infer(compiled, &r, [&](InferRequest& request) { fill(request.input(0), t); });
        expected.push_back(outputs_of(r, compiled.output_count()));
    }
    std::vector<std::vector<uint8_t>> b_expected;
    {
        Core other;
        CompiledModel cb;
        InferRequest r;
        test::compile_and_infer(other, b, "CPU", &cb, &r, [&](InferRequest& request) { fill(request.input(0), 9); });
        b_expected = outputs_of(r, cb.output_count());
    }
    std::atomic<int> mismatches{0}, failures{0};
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            InferRequest request;
            if (compiled.create_request(&request) != Status::Ok) { ++failures; return; }
            for (int round = 0; round < 20; ++round) {
                fill(request.input(0), t);
                Status s = round % 2 ? (request.start_async() == Status::Ok ? request.wait() : Status::InvalidArgument) : request.infer();
                if (s != Status::Ok) { ++failures; return; }
                if (outputs_of(request, compiled.output_count()) != expected[t]) ++mismatches;
            }
        });
    threads.emplace_back([&] {   // compiles of the second model on the same Core, with config changes
        for (int round = 0; round < 3; ++round) {
            CompiledModel cb;
            ConfigEntry config[] = {{"CPU:NUM_THREADS", round % 2 ? "3" : "1"}, {"CPU:FUSION", round == 1 ? "NO" : "YES"}};
            if (core.compile_model(b, "CPU", config, &cb) != Status::Ok) { ++failures; return; }
            InferRequest r;
            if (cb.create_request(&r) != Status::Ok) { ++failures; return; }
            fill(r.input(0), 9);
            if (r.infer() != Status::Ok) { ++failures; return; }
            std::vector<std::vector<uint8_t>> got = outputs_of(r, cb.output_count());
            // FUSION=NO runs reference kernels: equal within rounding, not bit for bit.
            if (round != 1 && got != b_expected) ++mismatches;
        }
    });
    for (std::thread& th : threads) th.join();
    CHECK(failures.load() == 0);
    CHECK(mismatches.load() == 0);
}

TEST_CASE("reliability: a request destroyed after its compiled model (or after a recompile into it)") {
    // Regression (found by make test-sanitize): ~InferRequest read the compiled model's input
    // and output counts, a use after free when the CompiledModel went first, as with members
    // `InferRequest request; CompiledModel compiled;` (destroyed in reverse order).
    const std::string bytes = small_model();
    Model model;
    REQUIRE(model.read_onnx(bytes.data(), bytes.size()) == Status::Ok);
    Core core;
    struct Holder {
        InferRequest request;
        CompiledModel compiled;
    };
    std::unique_ptr<Holder> holder(new Holder);
    REQUIRE(core.compile_model(model, "CPU", {}, &holder->compiled) == Status::Ok);
    REQUIRE(holder->compiled.create_request(&holder->request) == Status::Ok);
    REQUIRE(holder->request.start_async() == Status::Ok);
    REQUIRE(holder->request.wait() == Status::Ok);
    holder.reset();   // compiled first, then the request (with its worker thread)
    CompiledModel compiled;
    InferRequest request;
    REQUIRE(core.compile_model(model, "CPU", {}, &compiled) == Status::Ok);
    REQUIRE(compiled.create_request(&request) == Status::Ok);
    REQUIRE(core.compile_model(model, "TEMPLATE", {}, &compiled) == Status::Ok);   // frees the first
    InferRequest fresh;
    REQUIRE(compiled.create_request(&fresh) == Status::Ok);
    default_fill(0, fresh.input(0));
    CHECK(fresh.infer() == Status::Ok);
}

namespace {
// small_model() compiled for CPU and exported.
std::string small_model_blob(Core* core) {
    const std::string bytes = small_model();
    Model model;
    REQUIRE(model.read_onnx(bytes.data(), bytes.size()) == Status::Ok);
    CompiledModel compiled;
    REQUIRE(core->compile_model(model, "CPU", {}, &compiled) == Status::Ok);
    std::string blob;
    REQUIRE(compiled.export_model(test::append_to_string, &blob) == Status::Ok);
    return blob;
}
}  // namespace

TEST_CASE("reliability: a blob with a huge subgraph count is ParseError at once") {
    // Regression (fuzz/blob_import, 18 s per input): import stored the unchecked count before
    // refusing it, and ~Impl then looped over 2^32 absent programs.
    Core core;
    const std::string blob = small_model_blob(&core);
    // The partition section: u32 subgraph count 1, then the device name "CPU" (u32 length 3).
    const std::string partition("\x01\0\0\0\x03\0\0\0CPU", 11);
    size_t at = blob.rfind(partition);
    REQUIRE(at != std::string::npos);
    for (uint32_t count : {0xffffffffu, 0x80000000u, 0u}) {
        std::string bad = blob;
        for (int i = 0; i < 4; ++i) bad[at + i] = (char)(count >> (8 * i));
        test::reseal_blob(&bad);
        CompiledModel imported;
        CHECK(core.import_model(bad.data(), bad.size(), &imported) == Status::ParseError);
        CHECK(std::string(core.last_error()) == "blob: bad subgraph count");
    }
    CompiledModel imported;
    CHECK(core.import_model(blob.data(), blob.size(), &imported) == Status::Ok);
}

TEST_CASE("reliability: a blob whose constant has rank above 8 or a bad type is ParseError") {
    // Regression (fuzz/blob_import, UBSan): BlobReader::desc refused the rank but left it in the
    // desc, and read_model then walked dims[] of a constant's tensor past its 8 entries.
    Core core;
    const std::string blob = small_model_blob(&core);
    // W's tensor: type Float32 (1), rank 1, dim 3 (u64), then its byte count 12 (u64).
    const std::string w_desc("\x01\x01\x03\0\0\0\0\0\0\0\x0c\0\0\0\0\0\0\0", 18);
    size_t at = blob.find(w_desc);
    REQUIRE(at != std::string::npos);
    for (int field : {0, 1})
        for (uint8_t value : {(uint8_t)9, (uint8_t)200, (uint8_t)255}) {
            std::string bad = blob;
            bad[at + field] = (char)value;
            test::reseal_blob(&bad);
            CompiledModel imported;
            INFO("byte " << field << " = " << (int)value);
            CHECK(core.import_model(bad.data(), bad.size(), &imported) == Status::ParseError);
        }
}
