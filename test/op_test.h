// OpTest: one node of a tiny Model, prepared and run through its built-in kernel the way a
// device does, or compiled and inferred through a Core; shared by the op suites
// (test_tensor_ops.cpp, test_ops_math.cpp, test_ops_index.cpp).
#pragma once
#include <doctest/doctest.h>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>
#include "alloc_counter.h"
#include "runtime.h"
#include "test_helpers.h"

namespace test {
using namespace tessel;

template <class T> ElementType type_of();
template <> inline ElementType type_of<float>() { return ElementType::Float32; }
template <> inline ElementType type_of<uint16_t>() { return ElementType::Float16; }
template <> inline ElementType type_of<int64_t>() { return ElementType::Int64; }
template <> inline ElementType type_of<int32_t>() { return ElementType::Int32; }
template <> inline ElementType type_of<int8_t>() { return ElementType::Int8; }
template <> inline ElementType type_of<uint8_t>() { return ElementType::UInt8; }   // Bool: pass the type
template <> inline ElementType type_of<double>() { return ElementType::Float64; }
template <> inline ElementType type_of<int16_t>() { return ElementType::Int16; }   // UInt16, BFloat16: pass the type
template <> inline ElementType type_of<uint32_t>() { return ElementType::UInt32; }
template <> inline ElementType type_of<uint64_t>() { return ElementType::UInt64; }

using Shape = std::vector<int64_t>;

struct OpTest {
    Model model;
    uint32_t opset = 17;
    NodeId node = kNoNode;
    std::map<NodeId, std::vector<unsigned char>> data;   // runtime inputs' bytes
    std::vector<NodeId> runtime_inputs;
    std::vector<TensorDesc> input_descs;
    std::vector<const void*> values;
    std::vector<TensorDesc> output_descs;
    std::vector<Tensor> outputs;
    Arena arena;
    PrepareContext prepared;
    const OpKernel* kernel = nullptr;
    char run_error[kErrorMessageBytes] = {};
    std::string infer_error;
    int counter = 0;

    std::string fresh(const char* prefix) { return prefix + std::to_string(counter++); }

    // A graph input: its value is known only at run time.
    template <class T>
    InputRef input(const Shape& shape, const std::vector<T>& v, ElementType type = type_of<T>()) {
        NodeId id = kNoNode;
        std::string name = fresh("in");
        REQUIRE(model.add_input(StringView(name.data(), name.size()), make_desc(type, shape), &id) == Status::Ok);
        std::vector<unsigned char> bytes(v.size() * sizeof(T));
        if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
        data[id] = bytes;
        runtime_inputs.push_back(id);
        return InputRef::by_id(id);
    }
    // A Constant node: its value is known at compile time (c.values).
    template <class T>
    InputRef constant(const Shape& shape, const std::vector<T>& v, ElementType type = type_of<T>()) {
        NodeId id = kNoNode;
        std::string name = fresh("const");
        REQUIRE(model.add_constant(StringView(name.data(), name.size()), make_desc(type, shape), v.data(), &id) == Status::Ok);
        return InputRef::by_id(id);
    }
    InputRef absent() { return model.absent(); }
    NodeId op(const char* type, const std::vector<InputRef>& inputs, uint32_t num_outputs = 1) {
        std::string name = fresh("node");
        REQUIRE(model.add_node(type, StringView(name.data(), name.size()),
                               Span<const InputRef>(inputs.data(), inputs.size()), num_outputs, &node) == Status::Ok);
        return node;
    }
    void set_int(const char* name, int64_t v) { REQUIRE(model.set_int(node, name, v) == Status::Ok); }
    void set_ints(const char* name, const std::vector<int64_t>& v) {
        REQUIRE(model.set_ints(node, name, Span<const int64_t>(v.data(), v.size())) == Status::Ok);
    }
    void set_float(const char* name, float v) { REQUIRE(model.set_float(node, name, v) == Status::Ok); }
    void set_string(const char* name, const char* v) { REQUIRE(model.set_string(node, name, v) == Status::Ok); }

    const void* producer_data(const Edge& e) {
        const Node& p = model.graph.node(e.producer);
        if (p.op == StringView("Constant")) {
            const Attribute* a = model.graph.find_attribute(e.producer, "value");
            return a && a->tensor ? a->tensor->data : nullptr;
        }
        auto it = data.find(e.producer);
        return it == data.end() ? nullptr : it->second.data();
    }

    // A tensor attribute (ConstantOfShape's value); the bytes live in this OpTest.
    ConstTensor tensor_attribute;
    unsigned char tensor_bytes[64] = {};
    template <class T>
    void set_tensor(const char* name, const Shape& shape, const std::vector<T>& v, ElementType type = type_of<T>()) {
        REQUIRE(v.size() * sizeof(T) <= sizeof tensor_bytes);
        if (!v.empty()) std::memcpy(tensor_bytes, v.data(), v.size() * sizeof(T));
        tensor_attribute.desc = make_desc(type, shape);
        tensor_attribute.data = tensor_bytes;
        tensor_attribute.bytes = v.size() * sizeof(T);
        Attribute a;
        a.name = name;
        a.kind = AttributeKind::Tensor;
        a.tensor = &tensor_attribute;
        REQUIRE(model.graph.add_attribute(node, a) == Status::Ok);
    }

    Status prepare() {
        REQUIRE(model.finalize() == Status::Ok);
        const Node& n = model.graph.node(node);
        kernel = find_builtin_kernel(n.op);
        REQUIRE(kernel != nullptr);
        input_descs.assign(n.num_inputs, TensorDesc());
        values.assign(n.num_inputs, nullptr);
        for (uint32_t i = 0; i < n.num_inputs; ++i) {
            const Node& p = model.graph.node(n.inputs[i].producer);
            if (p.outputs && p.op != StringView("Absent")) input_descs[i] = p.outputs[n.inputs[i].port];
            if (p.op == StringView("Constant")) values[i] = producer_data(n.inputs[i]);
        }
        output_descs.assign(n.num_outputs, TensorDesc());
        prepared = PrepareContext();
        prepared.graph = &model.graph;
        prepared.node = node;
        prepared.opset = opset;
        prepared.num_inputs = n.num_inputs;
        prepared.inputs = input_descs.data();
        prepared.values = values.data();
        prepared.num_outputs = n.num_outputs;
        prepared.outputs = output_descs.data();
        prepared.arena = &arena;
        return kernel->prepare(prepared);
    }

    Status run() {
        const Node& n = model.graph.node(node);
        std::vector<TensorView> in(n.num_inputs), out(n.num_outputs);
        for (uint32_t i = 0; i < n.num_inputs; ++i) {
            in[i].desc = input_descs[i];
            in[i].data = const_cast<void*>(producer_data(n.inputs[i]));
        }
        outputs.clear();
        outputs.resize(n.num_outputs);
        for (uint32_t i = 0; i < n.num_outputs; ++i) {
            const TensorDesc& d = output_descs[i];
            REQUIRE(outputs[i].allocate(d.type, Span<const int64_t>(const_cast<int64_t*>(d.dims), d.rank)) == Status::Ok);
            std::memset(outputs[i].data(), 0xa5, outputs[i].bytes());   // stale bytes must be overwritten
            out[i].desc = d;
            out[i].data = outputs[i].data();
        }
        std::vector<unsigned char> scratch(prepared.scratch_bytes + 64);
        RunContext c;
        c.graph = &model.graph;
        c.node = node;
        c.state = prepared.state;
        c.num_inputs = n.num_inputs;
        c.inputs = in.data();
        c.num_outputs = n.num_outputs;
        c.outputs = out.data();
        c.scratch = scratch.data() + (64 - (uintptr_t)scratch.data() % 64) % 64;
        c.error = run_error;
        return kernel->run(c);
    }

    // prepare + run, both expected to succeed (REQUIRE does not stop a test in this build,
    // so a failed prepare skips run).
    void go() {
        Status s = prepare();
        INFO(prepared.error);
        REQUIRE(s == Status::Ok);
        if (s != Status::Ok) return;
        s = run();
        INFO(run_error);
        REQUIRE(s == Status::Ok);
    }

    // prepare fails with `status` and a message naming the node.
    void fails(Status status) {
        Status s = prepare();
        INFO(prepared.error);
        CHECK(s == status);
        const Node& n = model.graph.node(node);
        std::string prefix = test::to_string(n.op) + " '" + test::to_string(n.name) + "': ";
        CHECK(error().rfind(prefix, 0) == 0);
    }
    // prepare succeeds, run fails with InvalidArgument naming the node and `what`.
    void run_fails(const char* what) {
        Status s = prepare();
        INFO(prepared.error);
        REQUIRE(s == Status::Ok);
        if (s != Status::Ok) return;
        CHECK(run() == Status::InvalidArgument);
        const Node& n = model.graph.node(node);
        std::string prefix = test::to_string(n.op) + " '" + test::to_string(n.name) + "': ";
        CHECK(std::string(run_error).rfind(prefix, 0) == 0);
        CHECK(std::string(run_error).find(what) != std::string::npos);
    }

    // The node's outputs as graph outputs, compiled for `device` and inferred with the inputs'
    // bytes (NUM_THREADS `threads` on CPU); infer() must allocate nothing. Returns infer()'s
    // status (infer_error its message).
    Limits limits;   // the Core's for infer() (e.g. max_folded_bytes 0: constants computed at run time)
    Status infer(const char* device = "CPU", const char* threads = "1") {
        const Node& n = model.graph.node(node);
        for (uint32_t p = 0; p < n.num_outputs; ++p) {
            std::string name = fresh("out");
            REQUIRE(model.add_output(StringView(name.data(), name.size()), InputRef::by_id(node, p)) == Status::Ok);
        }
        REQUIRE(model.finalize() == Status::Ok);
        model.opset = opset;
        Core core;
        core.limits() = limits;
        CompiledModel compiled;
        ConfigEntry config[] = {{"NUM_THREADS", threads}};
        bool cpu = StringView(device) == StringView("CPU");
        Status s = core.compile_model(model, device, Span<const ConfigEntry>(config, cpu ? 1 : 0), &compiled);
        INFO(core.last_error());
        REQUIRE(s == Status::Ok);
        if (s != Status::Ok) return s;
        InferRequest request;
        REQUIRE(compiled.create_request(&request) == Status::Ok);
        for (size_t i = 0; i < runtime_inputs.size(); ++i) {
            const std::vector<unsigned char>& bytes = data[runtime_inputs[i]];
            REQUIRE(request.input((uint32_t)i).bytes() == bytes.size());
            if (!bytes.empty()) std::memcpy(request.input((uint32_t)i).data(), bytes.data(), bytes.size());
        }
        uint64_t before = tessel_test::allocation_count();
        s = request.infer();
        CHECK(tessel_test::allocation_count() == before);
        infer_error = request.last_error();
        outputs.clear();
        outputs.resize(n.num_outputs);
        for (uint32_t p = 0; s == Status::Ok && p < n.num_outputs; ++p) {
            const Tensor& t = request.output(p);
            REQUIRE(outputs[p].allocate(t.type(), t.shape()) == Status::Ok);
            std::memcpy(outputs[p].data(), t.data(), t.bytes());
        }
        return s;
    }

    // The random-malformed-node tests' check: prepare refuses with a message naming the node,
    // or describes outputs that can be allocated (at most 2^24 elements), at most 64 MiB of
    // scratch and a run that returns Ok or a Status with a message. Counts what got how far.
    void prepare_and_run_any(uint32_t* prepared_count, uint32_t* ran_count) {
        if (prepare() != Status::Ok) {
            CHECK(error().find("'node") != std::string::npos);
            return;
        }
        ++*prepared_count;
        uint64_t total = 0;
        for (const TensorDesc& d : output_descs) {
            uint64_t n = 0;
            REQUIRE(desc_elements(d, &n));
            REQUIRE(d.type != ElementType::Undefined);
            total += n;
        }
        REQUIRE(total <= (1u << 24));
        REQUIRE(prepared.scratch_bytes <= (1u << 26));
        if (run() == Status::Ok) ++*ran_count;
        else CHECK(std::string(run_error).size() > 0);
    }

    Shape shape(uint32_t i = 0) const {
        if (i >= output_descs.size()) return Shape();
        return Shape(output_descs[i].dims, output_descs[i].dims + output_descs[i].rank);
    }
    ElementType type(uint32_t i = 0) const { return output_descs[i].type; }
    template <class T>
    std::vector<T> out(uint32_t i = 0) const {
        if (i >= outputs.size() || !outputs[i].data()) return std::vector<T>();
        const T* p = outputs[i].data_as<T>();
        return std::vector<T>(p, p + outputs[i].elements());
    }
    std::string error() const { return prepared.error; }
};

// A compiled model and one inference of it (the Core outlives what it compiled).
struct CompiledRun {
    Core core;
    CompiledModel compiled;
    InferRequest request;
    std::string kernels;   // the steps' kernel names, each followed by a space (PERF_COUNT=YES)
    uint32_t steps = 0;
    // Every output of the request: its bytes and element type.
    void read_outputs(std::vector<std::vector<unsigned char>>* bytes, std::vector<ElementType>* types) const {
        for (uint32_t i = 0; i < compiled.output_count(); ++i) {
            const Tensor& y = request.output(i);
            const unsigned char* p = static_cast<const unsigned char*>(y.data());
            bytes->emplace_back(p, p + y.bytes());
            types->push_back(y.desc().type);
        }
    }
};

// Compiles t's finalized model on `device` with `config`, copies t's run-time inputs into a
// request and infers once, checking that infer() allocates nothing; REQUIREs each step.
inline void compile_and_infer(OpTest& t, const char* device, Span<const ConfigEntry> config, CompiledRun* run) {
    Status s = run->core.compile_model(t.model, device, config, &run->compiled);
    INFO(std::string(run->core.last_error()));
    REQUIRE(s == Status::Ok);
    if (s != Status::Ok) return;
    REQUIRE(run->compiled.create_request(&run->request) == Status::Ok);
    for (size_t i = 0; i < t.runtime_inputs.size(); ++i) {
        const std::vector<unsigned char>& bytes = t.data[t.runtime_inputs[i]];
        REQUIRE(run->request.input((uint32_t)i).bytes() == bytes.size());
        if (!bytes.empty()) std::memcpy(run->request.input((uint32_t)i).data(), bytes.data(), bytes.size());
    }
    uint64_t before = tessel_test::allocation_count();
    s = run->request.infer();
    CHECK(tessel_test::allocation_count() == before);
    INFO(std::string(run->request.last_error()));
    REQUIRE(s == Status::Ok);
    for (const ProfileEntry& e : run->request.profiling_info()) {
        run->kernels += std::string(e.kernel) + " ";
        ++run->steps;
    }
}

// Outputs of the one-node model build(t) makes that differ from the reference's bits (NaNs of
// any payload equal), compiled on the CPU device at every ISA of the machine and at 1 and 2
// threads with PERF_COUNT=YES; on_run(isa, run) checks each run's kernels first.
template <class Build, class OnRun>
int64_t cpu_bits_differ_each_isa(Build build, OnRun on_run) {
    OpTest ref;
    build(ref);
    REQUIRE(ref.prepare() == Status::Ok);
    REQUIRE(ref.run() == Status::Ok);
    const float* want = ref.outputs[0].data_as<float>();
    const size_t count = ref.outputs[0].elements();
    int64_t bad = 0;
    for (Isa isa : {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_available(isa)) continue;
        for (uint32_t threads : {1u, 2u}) {
            OpTest t;
            build(t);
            REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
            REQUIRE(t.model.finalize() == Status::Ok);
            const std::string threads_text = std::to_string(threads);
            ConfigEntry config[] = {{"NUM_THREADS", StringView(threads_text.c_str())}, {"PERF_COUNT", "YES"}, {"ISA", isa_name(isa)}};
            CompiledRun run;
            compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, 3), &run);
            const std::string target = isa_name(isa);
            CAPTURE(target);
            CAPTURE(threads);
            INFO(run.kernels);
            on_run(isa, run);
            const Tensor& out = run.request.output(0);
            REQUIRE(out.elements() == count);
            const float* got = out.data_as<float>();
            for (size_t i = 0; i < count; ++i)
                if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && !(got[i] != got[i] && want[i] != want[i]))
                    if (bad++ < 3) MESSAGE("y[" << i << "] = " << got[i] << ", want " << want[i]);
        }
    }
    return bad;
}

// The target an int8 step on Int8Convert (QuantizeLinear, DequantizeLinear, the binary
// islands) is named after at `isa`: its kernels' target, or ref for the portable loops.
inline std::string int8_convert_target(Isa isa = Isa::Auto) {
    Int8Convert convert;
    return convert.init(isa) == Status::Ok && convert.jit() ? isa_name(convert.isa()) : "ref";
}
// The same for a step on Int8Lookup (the uint8 tables: Table, and the pools, Concats and
// channel shuffles that change grids).
inline std::string int8_lookup_target(Isa isa = Isa::Auto) {
    Int8Lookup lookup;
    return lookup.init(isa) == Status::Ok && lookup.jit() ? isa_name(lookup.isa()) : "ref";
}

// t's last node's output 0 as the model's output "y", compiled on CPU (NUM_THREADS,
// PERF_COUNT=YES, FUSION as given, ISA when not null) and inferred once, allocating nothing:
// y's bytes and the steps' kernels.
struct CpuRun {
    std::vector<unsigned char> bytes;
    std::string kernels;
};
inline CpuRun run_last_node_on_cpu(OpTest& t, uint32_t threads, bool fusion, const char* isa = nullptr) {
    REQUIRE(t.model.add_output("y", InputRef::by_id(t.node, 0)) == Status::Ok);
    REQUIRE(t.model.finalize() == Status::Ok);
    std::string count = std::to_string(threads);
    ConfigEntry config[] = {{"NUM_THREADS", StringView(count.c_str())}, {"PERF_COUNT", "YES"}, {"FUSION", fusion ? "YES" : "NO"},
                            {"ISA", isa ? isa : ""}};
    CompiledRun run;
    compile_and_infer(t, "CPU", Span<const ConfigEntry>(config, isa ? 4 : 3), &run);
    CpuRun r;
    r.kernels = run.kernels;
    if (!run.compiled.output_count()) return r;
    const Tensor& out = run.request.output(0);
    const unsigned char* p = static_cast<const unsigned char*>(out.data());
    r.bytes.assign(p, p + out.bytes());
    return r;
}

// Random pieces shared by the random-malformed-node tests: one list of every element type, one
// of index-like extremes, and input bytes mixing raw randomness with small and extreme values.
const ElementType kEveryType[] = {ElementType::Float32, ElementType::Float16, ElementType::Int64,  ElementType::Int32,
                                  ElementType::Int8,    ElementType::UInt8,   ElementType::Bool,   ElementType::Float64,
                                  ElementType::Int16,   ElementType::UInt16,  ElementType::UInt32, ElementType::UInt64,
                                  ElementType::BFloat16};

struct MalformedPicker {
    std::mt19937 rng;
    explicit MalformedPicker(uint32_t seed) : rng(seed) {}
    uint32_t pick(uint32_t n) { return (uint32_t)(rng() % n); }
    ElementType any_type() { return kEveryType[pick(sizeof kEveryType / sizeof kEveryType[0])]; }
    int64_t special() {
        static const int64_t values[] = {INT64_MIN, INT32_MIN, -9, -3, -2, -1, 0, 1, 2, 3, 4, 9, 10, 17, 64, INT32_MAX, INT64_MAX};
        return values[pick(sizeof values / sizeof values[0])];
    }
    // An attribute value: mostly small, sometimes extreme.
    int64_t small_or_special(uint32_t small = 5) { return pick(4) == 0 ? special() : (int64_t)pick(small) - 1; }
    Shape any_shape(uint32_t max_rank = 4, uint32_t max_dim = 3) {
        Shape shape(pick(max_rank + 1));
        for (int64_t& d : shape) d = pick(max_dim + 1);
        return shape;
    }
    // `elements` values of `type`: raw bytes, or (often) small or extreme integers and small floats.
    std::vector<unsigned char> values(ElementType type, size_t elements) {
        std::vector<unsigned char> bytes(elements * element_size(type));
        for (unsigned char& b : bytes) b = (unsigned char)rng();
        if ((type == ElementType::Int64 || type == ElementType::Int32) && pick(4))
            for (size_t k = 0; k < elements; ++k) {
                int64_t v = pick(6) == 0 ? special() : (int64_t)pick(6) - 1;
                if (type == ElementType::Int64) std::memcpy(&bytes[k * 8], &v, 8);
                else { int32_t w = (int32_t)v; std::memcpy(&bytes[k * 4], &w, 4); }
            }
        if (type == ElementType::Float32 && pick(2))
            for (size_t k = 0; k < elements; ++k) {
                float v = (float)pick(7) - 3.0f;
                std::memcpy(&bytes[k * 4], &v, 4);
            }
        if (type == ElementType::Bool) for (unsigned char& b : bytes) b &= 1;
        return bytes;
    }
    // A constant or a run-time input, at random, of random values.
    InputRef input(OpTest& t, const Shape& shape, ElementType type) {
        size_t elements = 1;
        for (int64_t d : shape) elements *= (size_t)d;
        std::vector<unsigned char> bytes = values(type, elements);
        return pick(2) ? t.constant<unsigned char>(shape, bytes, type) : t.input<unsigned char>(shape, bytes, type);
    }
};

}  // namespace test
