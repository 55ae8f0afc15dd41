// The GPU's layout, normalization and reduction kernels (>>opencl layout and normalization
// kernels): each op at its shape classes runs wholly on the GPU and equals the CPU within a
// few float roundings (NaN where the CPU has NaN); a copy under a new shape over its own bytes
// (in place) and into another buffer; HETERO:GPU,CPU around a node the GPU leaves; the bad
// inputs each with its Status; a request's device mirror released with the request.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu_shim.h"
#include "runtime.h"
#include "test_helpers.h"

using namespace tessel;

namespace {

// A model built in code: random float inputs (kept for the run), float and int64 constants,
// nodes whose first output is a model output unless told otherwise.
struct Net {
    Model model;
    std::vector<std::vector<float>> inputs;
    std::vector<std::vector<float>> floats;
    std::vector<std::vector<int64_t>> ints;
    std::mt19937 rng{35};
    int count = 0;

    explicit Net(uint32_t opset = 17) { model.opset = opset; }
    std::string next(const char* prefix) { return prefix + std::to_string(count++); }
    InputRef input(std::vector<int64_t> dims, float low = -2.0f, float high = 2.0f) {
        size_t n = 1;
        for (int64_t d : dims) n *= (size_t)d;
        std::uniform_real_distribution<float> dist(low, high);
        inputs.emplace_back(n);
        for (float& v : inputs.back()) v = dist(rng);
        NodeId id;
        std::string name = next("x");
        REQUIRE(model.add_input(StringView(name.data(), name.size()), test::make_desc(ElementType::Float32, dims), &id) == Status::Ok);
        return InputRef::by_id(id);
    }
    InputRef constant(std::vector<int64_t> dims, std::vector<float> values) {
        floats.push_back(std::move(values));
        NodeId id;
        std::string name = next("c");
        REQUIRE(model.add_constant(StringView(name.data(), name.size()), test::make_desc(ElementType::Float32, dims), floats.back().data(), &id) ==
                Status::Ok);
        return InputRef::by_id(id);
    }
    InputRef positive(std::vector<int64_t> dims) {
        size_t n = 1;
        for (int64_t d : dims) n *= (size_t)d;
        std::vector<float> v(n);
        std::uniform_real_distribution<float> dist(0.25f, 2.0f);
        for (float& x : v) x = dist(rng);
        return constant(dims, v);
    }
    InputRef int64s(std::vector<int64_t> values) {
        ints.push_back(std::move(values));
        NodeId id;
        std::string name = next("i");
        REQUIRE(model.add_constant(StringView(name.data(), name.size()), test::make_desc(ElementType::Int64, {(int64_t)ints.back().size()}),
                                   ints.back().data(), &id) == Status::Ok);
        return InputRef::by_id(id);
    }
    NodeId node(const char* op, std::vector<InputRef> in, bool output = true, uint32_t outputs = 1) {
        std::string name = next("n") + op;
        NodeId id;
        REQUIRE(model.add_node(op, StringView(name.data(), name.size()), Span<const InputRef>(in.data(), in.size()), outputs, &id) == Status::Ok);
        if (output) {
            std::string out = "out_" + name;
            REQUIRE(model.add_output(StringView(out.data(), out.size()), InputRef::by_id(id)) == Status::Ok);
        }
        return id;
    }
    void set_ints(NodeId id, const char* key, std::vector<int64_t> v) {
        REQUIRE(model.set_ints(id, key, Span<const int64_t>(v.data(), v.size())) == Status::Ok);
    }
};

using test::gpu_tested_here;

// max_folded_bytes: lowered, so a ConstantOfShape stays a node (as a large weight made at run time).
std::vector<std::vector<float>> run(const Model& model, const char* device, const std::vector<std::vector<float>>& inputs,
                                    std::vector<std::string>* kernels, std::string* placement = nullptr, uint64_t max_folded_bytes = 1ull << 30) {
    Core core;
    core.limits().max_folded_bytes = max_folded_bytes;
    CompiledModel compiled;
    ConfigEntry config[] = {{"PERF_COUNT", "YES"}};
    Status s = core.compile_model(model, device, Span<const ConfigEntry>(config, 1), &compiled);
    INFO(std::string(core.last_error()));
    REQUIRE(s == Status::Ok);
    if (s != Status::Ok) return {};
    if (placement)
        for (const PlacementSummary& p : compiled.placement()) *placement += test::to_string(p.device) + ":" + std::to_string(p.nodes) + " ";
    return test::infer_floats(compiled, inputs, kernels);
}

// Runs the net on `device` and on the CPU: equal within a few roundings, every `ops` kernel
// among the GPU's.
void check_gpu(Net& net, std::vector<std::string> ops, const char* device = "GPU", uint64_t max_folded_bytes = 1ull << 30) {
    if (!net.model.graph.finalized()) REQUIRE(net.model.finalize() == Status::Ok);
    std::vector<std::string> kernels, unused;
    std::vector<std::vector<float>> gpu = run(net.model, device, net.inputs, &kernels, nullptr, max_folded_bytes);
    std::vector<std::vector<float>> cpu = run(net.model, "CPU", net.inputs, &unused, nullptr, max_folded_bytes);
    std::string got;
    for (const std::string& k : kernels) got += k + " ";
    for (const std::string& op : ops) {
        INFO("GPU kernels: " << got);
        CHECK(got.find("opencl:" + op + " ") != std::string::npos);
    }
    REQUIRE(gpu.size() == cpu.size());
    for (size_t o = 0; o < cpu.size(); ++o) {
        REQUIRE(gpu[o].size() == cpu[o].size());
        for (size_t i = 0; i < cpu[o].size(); ++i) {
            INFO("output " << test::to_string(net.model.output((uint32_t)o).name) << " element " << i << ": GPU " << gpu[o][i] << ", CPU " << cpu[o][i]);
            if (std::isnan(cpu[o][i])) CHECK(std::isnan(gpu[o][i]));
            else if (std::isinf(cpu[o][i])) CHECK(gpu[o][i] == cpu[o][i]);
            else CHECK(std::fabs(gpu[o][i] - cpu[o][i]) <= 1e-6f + 1e-5f * std::fabs(cpu[o][i]));
        }
    }
}

Status compile_on(const Net& net, const char* device, std::string* error) {
    Core core;
    CompiledModel compiled;
    Status s = core.compile_model(net.model, device, {}, &compiled);
    *error = core.last_error();
    return s;
}

}  // namespace

TEST_CASE("gpu ops: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout over their own bytes and into another buffer") {
    if (!gpu_tested_here()) return;
    Net net;
    InputRef x = net.input({2, 3, 4, 5});
    // In place: the Relu's result dies at the Reshape; its copy is skipped, the next Relu reads it.
    NodeId relu = net.node("Relu", {x}, false);
    NodeId reshape = net.node("Reshape", {InputRef::by_id(relu), net.int64s({0, -1, 5})}, false);
    net.node("Neg", {InputRef::by_id(reshape)});
    // Into another buffer: the input is a model input (pinned), and a value read again later.
    net.node("Flatten", {x});
    NodeId sig = net.node("Sigmoid", {x}, false);
    NodeId squeeze_in = net.node("Unsqueeze", {InputRef::by_id(sig), net.int64s({0, -1})});
    net.node("Squeeze", {InputRef::by_id(squeeze_in), net.int64s({0})});
    net.node("Identity", {InputRef::by_id(sig)});
    NodeId dropout = net.node("Dropout", {InputRef::by_id(sig)}, true, 2);   // with its mask (not a model output)
    net.node("Add", {InputRef::by_id(dropout), InputRef::by_id(sig)});
    net.node("Dropout", {InputRef::by_id(sig), net.input({})});   // a ratio given at run time: unused in inference
    check_gpu(net, {"Reshape", "Flatten", "Unsqueeze", "Squeeze", "Identity", "Dropout"});
}

TEST_CASE("gpu ops: Transpose, Slice, Expand, DepthToSpace, SpaceToDepth as strided copies") {
    if (!gpu_tested_here()) return;
    Net net;
    InputRef x = net.input({2, 8, 3, 4});
    NodeId t = net.node("Transpose", {x});
    net.set_ints(t, "perm", {0, 2, 3, 1});
    net.node("Transpose", {x});   // reversed dims
    net.node("Slice", {x, net.int64s({1, -1, 0}), net.int64s({8, -4, 4}), net.int64s({1, 2, 3}), net.int64s({2, -1, 1})});   // steps 2, -1, 1
    net.node("Slice", {x, net.int64s({0}), net.int64s({0}), net.int64s({3})});   // an empty slice
    InputRef row = net.input({1, 8, 1, 4});
    net.node("Expand", {row, net.int64s({3, 1, 1, 2, 1})});
    NodeId dcr = net.node("DepthToSpace", {x});
    REQUIRE(net.model.set_int(dcr, "blocksize", 2) == Status::Ok);
    NodeId crd = net.node("DepthToSpace", {x});
    REQUIRE(net.model.set_int(crd, "blocksize", 2) == Status::Ok);
    REQUIRE(net.model.set_string(crd, "mode", "CRD") == Status::Ok);
    InputRef even = net.input({1, 3, 4, 6});
    NodeId s2d = net.node("SpaceToDepth", {even});
    REQUIRE(net.model.set_int(s2d, "blocksize", 2) == Status::Ok);
    check_gpu(net, {"Transpose", "Slice", "Expand", "DepthToSpace", "SpaceToDepth"});
}

TEST_CASE("gpu ops: Concat along the first, a middle and the last axis, with a constant and an empty input") {
    if (!gpu_tested_here()) return;
    Net net;
    InputRef a = net.input({2, 3, 4}), b = net.input({1, 3, 4}), c = net.input({2, 5, 4}), d = net.input({2, 3, 7});
    NodeId first = net.node("Concat", {a, b, a});
    REQUIRE(net.model.set_int(first, "axis", 0) == Status::Ok);
    NodeId middle = net.node("Concat", {a, c, net.constant({2, 1, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), net.input({2, 0, 4})});
    REQUIRE(net.model.set_int(middle, "axis", 1) == Status::Ok);
    NodeId last = net.node("Concat", {a, d});
    REQUIRE(net.model.set_int(last, "axis", -1) == Status::Ok);
    check_gpu(net, {"Concat"});
}

TEST_CASE("gpu ops: LRN with odd and even sizes, BatchNormalization not folded, InstanceNormalization, LayerNormalization") {
    if (!gpu_tested_here()) return;
    Net net;
    InputRef x = net.input({2, 7, 3, 5});
    NodeId odd = net.node("LRN", {x});
    REQUIRE(net.model.set_int(odd, "size", 3) == Status::Ok);
    NodeId even = net.node("LRN", {x});
    REQUIRE(net.model.set_int(even, "size", 4) == Status::Ok);
    REQUIRE(net.model.set_float(even, "alpha", 0.01f) == Status::Ok);
    REQUIRE(net.model.set_float(even, "beta", 0.5f) == Status::Ok);
    REQUIRE(net.model.set_float(even, "bias", 2.0f) == Status::Ok);
    // Parameters given as inputs: the GPU's BatchNormalization kernel (constant ones become a
    // Mul and an Add at prepare, as the flat one's).
    net.node("BatchNormalization", {x, net.input({7}, 0.5f, 2.0f), net.input({7}, 0.5f, 2.0f), net.input({7}, 0.5f, 2.0f),
                                    net.input({7}, 0.5f, 2.0f)});
    InputRef flat = net.input({6, 4});
    net.node("BatchNormalization", {flat, net.positive({4}), net.positive({4}), net.positive({4}), net.positive({4})});
    net.node("InstanceNormalization", {x, net.positive({7}), net.positive({7})});
    InputRef seq = net.input({3, 2, 9}, 50.0f, 52.0f);   // a large mean: the variance's cancellation
    net.node("InstanceNormalization", {seq, net.positive({2}), net.positive({2})});
    net.node("LayerNormalization", {x, net.positive({5}), net.positive({5})});   // axis -1
    NodeId from1 = net.node("LayerNormalization", {x, net.positive({1, 5})});   // axis 1: scale broadcast to [7, 3, 5], no B
    REQUIRE(net.model.set_int(from1, "axis", 1) == Status::Ok);
    NodeId stats = net.node("LayerNormalization", {seq, net.positive({9})}, true, 3);   // with Mean and InvStdDev
    REQUIRE(net.model.add_output("mean", InputRef::by_id(stats, 1)) == Status::Ok);
    REQUIRE(net.model.add_output("inv_std_dev", InputRef::by_id(stats, 2)) == Status::Ok);
    NodeId wide = net.node("LayerNormalization", {seq, net.positive({2, 9}), net.positive({9})});
    REQUIRE(net.model.set_int(wide, "axis", -2) == Status::Ok);
    REQUIRE(net.model.set_float(wide, "epsilon", 1e-3f) == Status::Ok);
    check_gpu(net, {"LRN", "BatchNormalization", "InstanceNormalization", "LayerNormalization"});
}

TEST_CASE("gpu ops: the Reduce ops with axes as attribute, keepdims, all axes, NaN and infinities") {
    if (!gpu_tested_here()) return;
    Net net(13);   // axes as an attribute (ReduceSum's is an input from 13 on)
    InputRef x = net.input({3, 4, 5}, -3.0f, 3.0f);
    net.inputs.back()[7] = std::numeric_limits<float>::quiet_NaN();   // in row (0, 1) along the last axis
    net.inputs.back()[23] = INFINITY;
    net.inputs.back()[44] = -INFINITY;
    const char* ops[] = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp"};
    for (const char* op : ops) {
        NodeId last = net.node(op, {x});
        net.set_ints(last, "axes", {-1});
        NodeId outer = net.node(op, {x});   // keepdims 0, two axes apart
        net.set_ints(outer, "axes", {0, 2});
        REQUIRE(net.model.set_int(outer, "keepdims", 0) == Status::Ok);
        net.node(op, {x});   // every axis
    }
    InputRef big = net.input({2, 6}, 80.0f, 100.0f);   // exp overflows without the max shift
    NodeId lse = net.node("ReduceLogSumExp", {big});
    net.set_ints(lse, "axes", {1});
    InputRef logs = net.input({4, 3}, 0.5f, 2.0f);
    net.node("ReduceLogSum", {logs});
    NodeId sum = net.node("ReduceSum", {x, net.int64s({1})});
    REQUIRE(net.model.set_int(sum, "keepdims", 0) == Status::Ok);
    check_gpu(net, {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "ReduceL1", "ReduceLogSum",
                    "ReduceLogSumExp", "ReduceSum"});
}

TEST_CASE("gpu ops: Reduce ops with axes as a constant input, noop_with_empty_axes, an empty reduced dim; ConstantOfShape") {
    if (!gpu_tested_here()) return;
    Net net(18);
    InputRef x = net.input({2, 3, 4});
    net.node("ReduceMax", {x, net.int64s({1})});
    NodeId noop = net.node("ReduceMean", {x, net.int64s({})});
    REQUIRE(net.model.set_int(noop, "noop_with_empty_axes", 1) == Status::Ok);
    net.node("ReduceL1", {x, net.int64s({})});   // empty axes without noop: every axis
    InputRef empty = net.input({3, 0, 2});
    net.node("ReduceSum", {empty, net.int64s({1})});    // 0 per output
    net.node("ReduceMin", {empty, net.int64s({1})});    // +inf
    net.node("ReduceMean", {empty, net.int64s({1})});   // 0 / 0
    NodeId fill = net.node("ConstantOfShape", {net.int64s({2, 3})});
    float minus_one_and_a_half = -1.5f;
    ConstTensor value;
    value.desc = test::make_desc(ElementType::Float32, {1});
    value.data = &minus_one_and_a_half;
    value.bytes = 4;
    Attribute a;
    a.name = "value";
    a.kind = AttributeKind::Tensor;
    a.tensor = &value;
    REQUIRE(net.model.graph.add_attribute(fill, a) == Status::Ok);
    net.node("Mul", {InputRef::by_id(fill), net.input({2, 3})});
    check_gpu(net, {"ReduceMax", "ReduceMean", "ReduceL1", "ReduceSum", "ReduceMin", "ConstantOfShape"}, "GPU", 16);
}

TEST_CASE("gpu ops: HETERO:GPU,CPU sends the GPU's rest to the CPU; the bad inputs") {
    if (!gpu_tested_here()) return;
    SUBCASE("BatchNormalization in training mode is not a GPU op: Unsupported on GPU, the CPU's on HETERO") {
        Net net(15);
        InputRef x = net.input({2, 3, 2, 2});
        NodeId bn = net.node("BatchNormalization", {x, net.positive({3}), net.positive({3}), net.positive({3}), net.positive({3})});
        REQUIRE(net.model.set_int(bn, "training_mode", 1) == Status::Ok);
        NodeId c = net.node("Concat", {InputRef::by_id(bn), x});
        REQUIRE(net.model.set_int(c, "axis", 1) == Status::Ok);
        REQUIRE(net.model.finalize() == Status::Ok);
        std::string error;
        CHECK(compile_on(net, "GPU", &error) == Status::Unsupported);
        CHECK(error == "node 'n5BatchNormalization' (op BatchNormalization) is supported by no device of 'GPU'");
        std::vector<std::string> kernels;
        std::string placement;
        run(net.model, "HETERO:GPU,CPU", net.inputs, &kernels, &placement);
        CHECK(placement.find("GPU:1 ") != std::string::npos);
        CHECK(placement.find("CPU:1 ") != std::string::npos);
        check_gpu(net, {"Concat"}, "HETERO:GPU,CPU");
    }
    SUBCASE("a Dropout whose training_mode comes at run time: Unsupported when training (random masks), a copy otherwise") {
        Net net(13);
        InputRef x = net.input({2, 3});
        NodeId training;
        REQUIRE(net.model.add_input("training", test::make_desc(ElementType::Bool, {}), &training) == Status::Ok);
        net.node("Dropout", {x, net.constant({}, {0.5f}), InputRef::by_id(training)});
        REQUIRE(net.model.finalize() == Status::Ok);
        Core core;
        CompiledModel compiled;
        REQUIRE(core.compile_model(net.model, "GPU", {}, &compiled) == Status::Ok);
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        std::memcpy(request.input(0).data(), net.inputs[0].data(), 6 * sizeof(float));
        *request.input(1).data_as<uint8_t>() = 1;
        CHECK(request.infer() == Status::Unsupported);
        CHECK(std::string(request.last_error()).find("training mode with a ratio other than a constant 0") != std::string::npos);
        *request.input(1).data_as<uint8_t>() = 0;
        REQUIRE(request.infer() == Status::Ok);
        CHECK(std::memcmp(request.output(0).data(), net.inputs[0].data(), 6 * sizeof(float)) == 0);
    }
    SUBCASE("a Concat whose inputs differ outside the axis: InvalidArgument naming the node") {
        Net net;
        NodeId c = net.node("Concat", {net.input({2, 3}), net.input({2, 4})});
        REQUIRE(net.model.set_int(c, "axis", 0) == Status::Ok);
        REQUIRE(net.model.finalize() == Status::Ok);
        std::string error;
        CHECK(compile_on(net, "GPU", &error) == Status::InvalidArgument);
        CHECK(error.find("Concat") != std::string::npos);
    }
    SUBCASE("a Transpose whose perm is not a permutation: InvalidArgument") {
        Net net;
        NodeId t = net.node("Transpose", {net.input({2, 3})});
        net.set_ints(t, "perm", {1, 1});
        REQUIRE(net.model.finalize() == Status::Ok);
        std::string error;
        CHECK(compile_on(net, "GPU", &error) == Status::InvalidArgument);
        CHECK(error.find("not a permutation") != std::string::npos);
    }
    SUBCASE("a Reduce axis out of range: InvalidArgument") {
        Net net(13);
        NodeId r = net.node("ReduceMax", {net.input({2, 3})});
        net.set_ints(r, "axes", {2});
        REQUIRE(net.model.finalize() == Status::Ok);
        std::string error;
        CHECK(compile_on(net, "GPU", &error) == Status::InvalidArgument);
        CHECK(error.find("out of range") != std::string::npos);
    }
    SUBCASE("an LRN of size 0: InvalidArgument") {
        Net net;
        NodeId l = net.node("LRN", {net.input({1, 3, 2, 2})});
        REQUIRE(net.model.set_int(l, "size", 0) == Status::Ok);
        REQUIRE(net.model.finalize() == Status::Ok);
        std::string error;
        CHECK(compile_on(net, "GPU", &error) == Status::InvalidArgument);
        CHECK(error.find("'size'") != std::string::npos);
    }
    SUBCASE("a LayerNormalization scale that does not broadcast to the row: InvalidArgument") {
        Net net;
        net.node("LayerNormalization", {net.input({2, 3, 4}), net.positive({3})});
        REQUIRE(net.model.finalize() == Status::Ok);
        std::string error;
        CHECK(compile_on(net, "GPU", &error) == Status::InvalidArgument);
        CHECK(error.find("does not broadcast") != std::string::npos);
    }
}

namespace {
// A Relu -> (Transpose ->) Neg net compiled for the shim's GPU with `config`.
void compile_relu_neg(Core& core, bool transpose, Span<const ConfigEntry> config, CompiledModel* compiled) {
    Net net;
    NodeId relu = net.node("Relu", {net.input({4, 8})}, false);
    NodeId t = transpose ? net.node("Transpose", {InputRef::by_id(relu)}, false) : relu;
    net.node("Neg", {InputRef::by_id(t)});
    REQUIRE(net.model.finalize() == Status::Ok);
    Status status = core.compile_model(net.model, "GPU", config, compiled);
    INFO(std::string(core.last_error()));
    REQUIRE(status == Status::Ok);
}
}  // namespace

TEST_CASE("gpu ops: a request's device mirror goes with the request, not when newer requests push it out") {
    test::on_shim_gpu_each_memory([](const test::Shim& s, Core& core) {
        CompiledModel compiled;
        compile_relu_neg(core, true, {}, &compiled);
        InferRequest first;
        REQUIRE(compiled.create_request(&first) == Status::Ok);
        REQUIRE(first.infer() == Status::Ok);
        const long live = s.live(), buffers = s.calls("clCreateBuffer");
        for (long k = 1; k <= 10; ++k) {   // more requests than the mirrors a program keeps
            {
                InferRequest other;
                REQUIRE(compiled.create_request(&other) == Status::Ok);
                REQUIRE(other.infer() == Status::Ok);
                CHECK(s.calls("clCreateBuffer") == buffers + k);
                CHECK(s.live() > live);
            }
            CHECK(s.live() == live);   // its buffer and sub-buffers went with it
        }
        REQUIRE(first.infer() == Status::Ok);
        CHECK(s.calls("clCreateBuffer") == buffers + 10);   // the first request's mirror is still there
        CHECK(s.live() == live);
    });
}

TEST_CASE("gpu ops: a request that goes while another request's step waits on the queue does not wait for it") {
    test::on_shim_gpu_each_memory([](const test::Shim& s, Core& core) {
        CompiledModel compiled;
        // A deadline past any run of this test: an infer that waited for the queue fails it.
        ConfigEntry config[] = {{"GPU:QUEUE_TIMEOUT_MS", "60000"}};
        compile_relu_neg(core, false, Span<const ConfigEntry>(config, 1), &compiled);
        InferRequest stuck;
        REQUIRE(compiled.create_request(&stuck) == Status::Ok);
        REQUIRE(stuck.infer() == Status::Ok);
        const long live = s.live();
        std::unique_ptr<InferRequest> going(new InferRequest);
        REQUIRE(compiled.create_request(going.get()) == Status::Ok);
        REQUIRE(going->infer() == Status::Ok);
        const long with_going = s.live();
        CHECK(with_going > live);
        s.fail_kernel(1);   // the next kernel waits until released
        Status stuck_status = Status::Unsupported;
        std::thread runner([&] { stuck_status = stuck.infer(); });
        while (!s.holding()) std::this_thread::yield();   // the stuck request's step holds the program
        going.reset();   // its mirror cannot go now: it goes at the program's next step
        s.release();
        runner.join();
        INFO(std::string(stuck.last_error()));
        CHECK(stuck_status == Status::Ok);
        REQUIRE(stuck.infer() == Status::Ok);
        CHECK(s.live() == live);
    });
}
