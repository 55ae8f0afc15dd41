/* runtime.h - Tessel: tensors, device plugin API, CPU and TEMPLATE devices, HETERO, compiled
   models, memory planner, infer requests, ONNX reader, profiling.

   Do this
   -------
       #define TESSEL_IMPLEMENTATION      // in exactly one .cpp file
       #include "runtime.h"

       tessel::Model model;                               // a graph plus its inputs and outputs
       model.read_onnx_file("model.onnx");                // or build it: add_input/add_node/...
       tessel::Core core;                                 // CPU and TEMPLATE are built in
       tessel::CompiledModel compiled;
       core.compile_model(model, "HETERO:TEMPLATE,CPU", {}, &compiled);   // check each Status
       tessel::InferRequest request;
       compiled.create_request(&request);
       request.input(0).data_as<float>()[0] = 1.0f;      // or set_input(0, user tensor)
       request.infer();
       const tessel::Tensor& y = request.output(0);

   Config macros: as in hetero.h and snippets.h (TESSEL_ASSERT, TESSEL_MALLOC/FREE,
   TESSEL_NO_JIT), plus TESSEL_USE_MICROPROFILE (each subgraph and kernel a microprofile zone).

   The full manual of this header (errors, memory, threading, limits and threat model) is
   below the declarations' overview in the README; each declaration says its own errors.
*/
#ifndef TESSEL_RUNTIME_H
#define TESSEL_RUNTIME_H
#include "snippets.h"

namespace tessel {

// >>tensor
// A tensor: element type, shape, strides (in elements) and data. Owning (memory from
// TESSEL_MALLOC, 64-byte aligned, zeroed) or a view over memory someone else keeps alive.
class Tensor {
public:
    Tensor() = default;
    ~Tensor();
    Tensor(Tensor&& other) noexcept;
    Tensor& operator=(Tensor&& other) noexcept;
    Tensor(const Tensor&) = delete;
    Tensor& operator=(const Tensor&) = delete;

    // Errors: InvalidArgument (negative dim, Undefined type), LimitExceeded (rank > 8, size
    // overflow), OutOfMemory.
    Status allocate(ElementType type, Span<const int64_t> shape);
    // strides in elements; nullptr means dense row-major. InvalidArgument on a null data
    // pointer for a non-empty tensor.
    Status view(ElementType type, Span<const int64_t> shape, void* data, const int64_t* strides = nullptr);
    void reset();

    ElementType type() const { return desc_.type; }
    uint32_t rank() const { return desc_.rank; }
    int64_t dim(uint32_t i) const { return desc_.dims[i]; }
    int64_t stride(uint32_t i) const { return strides_[i]; }
    const TensorDesc& desc() const { return desc_; }
    Span<const int64_t> shape() const { return Span<const int64_t>(desc_.dims, desc_.rank); }
    void* data() const { return data_; }
    template <class T>
    T* data_as() const { return static_cast<T*>(data_); }
    uint64_t elements() const;
    size_t bytes() const;          // elements * element size
    bool dense() const;            // row-major without gaps
    bool owns() const { return owns_; }

private:
    TensorDesc desc_;
    int64_t strides_[kMaxRank] = {};
    void* data_ = nullptr;
    bool owns_ = false;
};

// Number of elements of a desc (0 if any dim is 0); false on a negative dim or overflow.
bool desc_elements(const TensorDesc& desc, uint64_t* elements);

// >>model
// A model is a Graph with its interface. Graph inputs are `Parameter` nodes (one output,
// desc from add_input; negative dims are symbolic), weights are `Constant` nodes (attribute
// "value" holds the tensor), graph outputs are `Result` nodes (one input, no output). An
// optional input left out in the middle of a node's inputs reads the `Absent` node (one
// output of type Undefined). Node names and interface names share one namespace.
struct ModelPort {
    StringView name;
    NodeId node = kNoNode;
};

class Model {
public:
    Model();                                   // heap arena
    Model(void* buffer, size_t bytes);         // fixed buffer: never mallocs for the graph
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    Arena arena;    // first: the graph lives in it
    Graph graph;
    uint32_t opset = 17;  // the default domain's opset version (ONNX opset_import)

    Status add_input(StringView name, const TensorDesc& desc, NodeId* id = nullptr);
    // Copies the data into the model's arena unless copy is false (then it must outlive the model).
    Status add_constant(StringView name, const TensorDesc& desc, const void* data, NodeId* id = nullptr,
                        bool copy = true);
    Status add_node(StringView op, StringView name, Span<const InputRef> inputs, uint32_t num_outputs = 1,
                    NodeId* id = nullptr);
    Status add_output(StringView name, InputRef source);
    InputRef absent();                          // reference to the shared Absent node (created once)
    // Attribute helpers (copy their data into the arena).
    Status set_int(NodeId node, StringView name, int64_t value);
    Status set_float(NodeId node, StringView name, float value);
    Status set_ints(NodeId node, StringView name, Span<const int64_t> values);
    Status set_floats(NodeId node, StringView name, Span<const float> values);
    Status set_string(NodeId node, StringView name, StringView value);
    Status finalize();                          // graph.finalize() plus interface checks

    uint32_t input_count() const { return input_count_; }
    uint32_t output_count() const { return output_count_; }
    const ModelPort& input(uint32_t i) const { return inputs_[i]; }
    const ModelPort& output(uint32_t i) const { return outputs_[i]; }
    uint32_t find_input(StringView name) const;    // index, or 0xffffffff
    uint32_t find_output(StringView name) const;
    const char* last_error() const { return graph.last_error(); }

    // ONNX (see >>onnx reader). `folder` resolves external data; empty: external data refused.
    Status read_onnx(const void* bytes, size_t size, StringView folder = StringView());
    Status read_onnx_file(const char* path);
    // The file's bytes when read by read_onnx_file (weights point into them).
    const void* file_data() const { return file_; }

    ~Model();

private:
    Status push_port(ModelPort** ports, uint32_t* count, uint32_t* capacity, StringView name, NodeId node);
    ModelPort* inputs_ = nullptr;
    ModelPort* outputs_ = nullptr;
    uint32_t input_count_ = 0, output_count_ = 0, input_capacity_ = 0, output_capacity_ = 0;
    NodeId absent_ = kNoNode;
    void* file_ = nullptr;   // TESSEL_MALLOC'd file buffer (read_onnx_file)
};

// >>op kernels
// The contract of an operation, used by the built-in kernels and by user extensions
// (Device::add_extension). prepare() runs at compile time: it checks the inputs, fills the
// output descs and may keep parsed attributes in `state` (arena memory). run() computes.
struct TensorView {  // dense row-major
    TensorDesc desc;
    void* data = nullptr;
    uint64_t elements() const;
    template <class T>
    T* as() const { return static_cast<T*>(data); }
};

struct PrepareContext {
    const Graph* graph = nullptr;
    NodeId node = kNoNode;
    uint32_t opset = 17;
    uint32_t num_inputs = 0;
    const TensorDesc* inputs = nullptr;     // type Undefined: an absent optional input
    const void* const* values = nullptr;    // per input: its data when known at compile time
    uint32_t num_outputs = 0;
    TensorDesc* outputs = nullptr;          // prepare fills each one (type, rank, dims)
    Arena* arena = nullptr;                 // lives as long as the compiled model
    uint32_t threads = 1;                   // threads run() may use through parallel_for
    // Set by prepare:
    const void* state = nullptr;            // handed to run()
    size_t scratch_bytes = 0;               // per-request scratch run() needs (all threads)
    bool in_place = false;                  // output 0 may share input 0's buffer (same bytes)
    char error[200] = {};

    Status fail(Status status, const char* format, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    const Node& node_ref() const { return graph->node(node); }
    const Attribute* attribute(StringView name) const { return graph->find_attribute(node, name); }
    int64_t attribute_int(StringView name, int64_t fallback) const;
    float attribute_float(StringView name, float fallback) const;
    StringView attribute_string(StringView name, StringView fallback) const;
    Span<const int64_t> attribute_ints(StringView name) const;  // empty if absent
    Span<const float> attribute_floats(StringView name) const;
    bool has_input(uint32_t i) const { return i < num_inputs && inputs[i].type != ElementType::Undefined; }
};

namespace detail { class ThreadPool; }

struct RunContext {
    const Graph* graph = nullptr;
    NodeId node = kNoNode;
    const void* state = nullptr;
    uint32_t num_inputs = 0;
    const TensorView* inputs = nullptr;     // absent optional inputs: data nullptr, type Undefined
    uint32_t num_outputs = 0;
    const TensorView* outputs = nullptr;
    void* scratch = nullptr;                // prepare's scratch_bytes, 64-byte aligned
    uint32_t threads = 1;
    detail::ThreadPool* pool = nullptr;
    char* error = nullptr;                  // fail() writes here (200 bytes)

    // Splits [0, count) into at most `threads` contiguous ranges run at once; returns when all
    // are done. fn must not fail (check inputs first).
    void parallel_for(uint64_t count, void (*fn)(void* user, uint64_t begin, uint64_t end), void* user) const;
    Status fail(Status status, const char* format, ...) const
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
};

using PrepareFn = Status (*)(PrepareContext& context);
using RunFn = Status (*)(const RunContext& context);
struct OpKernel {
    const char* op = nullptr;    // ONNX op type (default domain)
    PrepareFn prepare = nullptr;
    RunFn run = nullptr;
};
// The runtime's op list: every op the built-in devices run.
Span<const OpKernel> builtin_op_kernels();
const OpKernel* find_builtin_kernel(StringView op);

// >>limits
// Documented limits; Core::limits() may lower or raise them. Checked by the readers and the
// compiler: one past a limit is LimitExceeded, the limit itself is accepted.
struct Limits {
    uint64_t max_nodes = 1u << 20;
    uint32_t max_rank = kMaxRank;
    uint64_t max_tensor_elements = 1ull << 28;      // per tensor (1 GiB of float32)
    uint64_t max_arena_bytes = 1ull << 31;          // activations of one request
    uint64_t max_file_bytes = 1ull << 31;           // model files and blobs
    uint64_t max_folded_bytes = 64ull << 20;        // one constant-folded tensor
};

// >>device
struct ConfigEntry {
    StringView key;
    StringView value;
};

class PreparedModel;
class ProgramState;

// One kernel launch of a compiled subgraph: a node's kernel or a fused island. Values are
// the prepared model's value ids (PreparedModel::value_id).
struct ProgramStep {
    NodeId node = kNoNode;                 // the node (an island: its last member)
    const char* kernel = "";               // printable kernel name ("ref:Conv", "jit:avx512", ...)
    Span<const uint32_t> reads;
    Span<const uint32_t> writes;
    bool in_place = false;                 // writes[0] may share reads[0]'s buffer
    size_t scratch_bytes = 0;
};

struct StepContext {
    void* const* values = nullptr;         // pointer per value id (for this subgraph)
    void* scratch = nullptr;
    uint32_t threads = 1;
    detail::ThreadPool* pool = nullptr;
    char* error = nullptr;                 // 200 bytes
};

// A subgraph compiled for one device. Created by Device::compile_subgraph with
// tessel::create<T>() (TESSEL_MALLOC), destroyed by the runtime with tessel::destroy().
class DeviceProgram {
public:
    virtual ~DeviceProgram() = default;
    virtual Span<const ProgramStep> steps() const = 0;
    // Runs one step; must be thread safe (several requests run one program at once).
    virtual Status run_step(uint32_t step, const StepContext& context) const = 0;
    // Bytes that let the device rebuild this program on import (after the prepared model).
    virtual Status export_payload(WriteFn write, void* user) const = 0;
};

// A device (the plugin seed's Plugin). Availability is checked when it is created: a device
// whose backend cannot start is never registered. Config keys and metrics are strings;
// an unknown key is NotFound.
class Device {
public:
    virtual ~Device() = default;
    virtual StringView name() const = 0;
    // AVAILABLE_DEVICES, FULL_DEVICE_NAME, SUPPORTED_METRICS, SUPPORTED_CONFIG_KEYS,
    // OPTIMIZATION_CAPABILITIES and device-specific ones. The value stays valid until the
    // next call on this device.
    virtual Status get_metric(StringView key, StringView* value) = 0;
    virtual Status set_config(StringView key, StringView value) = 0;
    virtual Status get_config(StringView key, StringView* value) = 0;
    // supported[n] = 1 for each node n of the prepared model the device can run.
    virtual Status query_model(const PreparedModel& model, uint8_t* supported) = 0;
    // Compiles the nodes (a subgraph, ascending ids) with the device's current config.
    virtual Status compile_subgraph(const PreparedModel& model, Span<const NodeId> nodes, DeviceProgram** program) = 0;
    virtual Status import_subgraph(const PreparedModel& model, Span<const NodeId> nodes, const void* payload,
                                   size_t size, DeviceProgram** program) = 0;
    // Adds or replaces an op kernel. Devices without extensions return Unsupported.
    virtual Status add_extension(const OpKernel& kernel) = 0;
    const char* last_error() const { return error_; }

protected:
    Status fail(Status status, const char* format, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    char error_[256] = {};
};

// Plugin helpers: objects the runtime frees are made with TESSEL_MALLOC.
template <class T, class... Args>
T* create(Args&&... args);
template <class T>
void destroy(T* object);

// >>prepared model
// The model after the common transformations every device sees: shapes inferred from the
// inputs, constant subgraphs folded into Constant nodes, nodes that only fed folded ones
// removed. Node names are kept, so results map back to the original model by name.
class PreparedModel {
public:
    PreparedModel() = default;
    PreparedModel(const PreparedModel&) = delete;
    PreparedModel& operator=(const PreparedModel&) = delete;

    Model model;                                      // the transformed copy
    uint32_t value_id(NodeId node, uint32_t port) const { return value_base_[node] + port; }
    uint32_t value_count() const { return value_count_; }
    const TensorDesc& value_desc(uint32_t value) const { return descs_[value]; }
    const void* constant(uint32_t value) const { return constants_[value]; }   // nullptr unless Constant
    const void* kernel_state(NodeId node) const { return states_[node]; }
    size_t kernel_scratch(NodeId node) const { return scratch_[node]; }
    bool kernel_in_place(NodeId node) const { return in_place_[node] != 0; }
    const OpKernel* kernel(NodeId node) const { return kernels_[node]; }
    uint32_t folded_count() const { return folded_; }   // nodes folded or removed
    const char* last_error() const { return model.last_error(); }

private:
    friend struct detail_prepare;
    uint32_t* value_base_ = nullptr;
    uint32_t value_count_ = 0;
    TensorDesc* descs_ = nullptr;
    const void** constants_ = nullptr;
    const void** states_ = nullptr;
    size_t* scratch_ = nullptr;
    uint8_t* in_place_ = nullptr;
    const OpKernel** kernels_ = nullptr;
    uint32_t folded_ = 0;
};

// >>core
struct InputShape {
    StringView name;
    Span<const int64_t> dims;
};

struct PlacementSummary {       // per device, after compile
    StringView device;
    uint32_t nodes = 0;
    uint32_t subgraphs = 0;
    uint32_t kernels = 0;       // steps per inference (a fused island is one)
    uint32_t fallback_nodes = 0;  // nodes a higher-priority device did not support
};

struct ProfileEntry {
    StringView node;
    StringView device;
    const char* kernel = "";
    uint32_t subgraph = 0;
    uint64_t ns = 0;            // of the last inference
};

class CompiledModel;

class Core {
public:
    Core();        // registers CPU and TEMPLATE
    ~Core();
    Core(const Core&) = delete;
    Core& operator=(const Core&) = delete;

    // The device must outlive the Core. DuplicateName if a device has that name.
    Status register_device(Device* device);
    Device* device(StringView name) const;          // nullptr if unknown
    uint32_t device_count() const;
    Device* device_at(uint32_t i) const;
    Limits& limits() { return limits_; }

    // `device` is "CPU", "TEMPLATE", a user device, or "HETERO:A,B,..." (priority order).
    // Config keys: "KEY" goes to the device (for HETERO: HETERO_ALGORITHM=rollback|levels|waves,
    // HETERO_MIN_SUBGRAPH=N, or a key of every listed device), "DEVICE:KEY" to one device.
    // Errors: NotFound (unknown device or key), Unsupported (a node no device runs, a
    // data-dependent shape), InvalidArgument (bad shapes or config values), LimitExceeded,
    // OutOfMemory; the message is in last_error().
    Status compile_model(const Model& model, StringView device, Span<const ConfigEntry> config, CompiledModel* out,
                         Span<const InputShape> shapes = Span<const InputShape>());
    // Reads a blob written by CompiledModel::export_model. ParseError on a truncated,
    // corrupted (checksum) or foreign blob, Unsupported on a newer format version, NotFound
    // when a device it names is not registered.
    Status import_model(const void* blob, size_t size, CompiledModel* out);
    // Which device takes each node of `model` for a HETERO device string (after preparing):
    // devices[n] receives the device index in `device`'s list, 0xffff for folded nodes.
    Status query_model(const Model& model, StringView device, uint16_t* devices);

    const char* last_error() const { return error_; }
    Status fail(Status status, const char* format, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;

private:
    struct Impl;
    Impl* impl_ = nullptr;
    Limits limits_;
    char error_[256] = {};
};

// >>compiled model
class InferRequest;
class CompiledModel {
public:
    CompiledModel();
    ~CompiledModel();
    CompiledModel(const CompiledModel&) = delete;
    CompiledModel& operator=(const CompiledModel&) = delete;

    Status create_request(InferRequest* request) const;
    // Versioned blob: format version, device names, config, prepared model, partition,
    // per-device payloads, checksum.
    Status export_model(WriteFn write, void* user) const;

    uint32_t input_count() const;
    uint32_t output_count() const;
    const ModelPort& input(uint32_t i) const;
    const ModelPort& output(uint32_t i) const;
    const TensorDesc& input_desc(uint32_t i) const;
    const TensorDesc& output_desc(uint32_t i) const;
    Span<const PlacementSummary> placement() const;
    const PreparedModel* prepared() const;
    const Partition* partition() const;
    size_t arena_bytes() const;            // activations of one request
    size_t unplanned_bytes() const;        // what they would take without reuse
    uint32_t step_count() const;
    void write_summary(WriteFn write, void* user) const;  // placement, kernels, memory
    bool compiled() const { return impl_ != nullptr; }
    const char* last_error() const { return error_; }

    struct Impl;
    Impl* impl_ = nullptr;
    mutable char error_[256] = {};
};

// >>infer request
class InferRequest {
public:
    InferRequest();
    ~InferRequest();
    InferRequest(const InferRequest&) = delete;
    InferRequest& operator=(const InferRequest&) = delete;

    // The request's own input buffers (fill them), or the user's tensor when one was set.
    Tensor& input(uint32_t i);
    const Tensor& output(uint32_t i) const;
    // Binds user memory (a view; no copy now). The shape and type must match the compiled
    // model's. InvalidArgument otherwise, NotFound for an unknown name.
    Status set_input(uint32_t i, const Tensor& tensor);
    Status set_input(StringView name, const Tensor& tensor);
    // Outputs are copied into a bound user tensor at the end of each inference.
    Status set_output(uint32_t i, const Tensor& tensor);
    Status set_output(StringView name, const Tensor& tensor);
    uint32_t find_input(StringView name) const;
    uint32_t find_output(StringView name) const;

    // Runs the model. No heap allocation after the request was created.
    Status infer();
    // Runs infer() on the request's worker thread; wait() returns its status.
    Status start_async();
    Status wait();

    // With PERF_COUNT=YES: one entry per step of the last inference.
    Span<const ProfileEntry> profiling_info() const;
    const char* last_error() const { return error_; }

    struct Impl;
    Impl* impl_ = nullptr;
    mutable char error_[256] = {};
};

// >>tensor files
// ONNX TensorProto files (input_0.pb, output_0.pb). read: ParseError on malformed bytes,
// Unsupported for element types outside the list; write: IoError.
Status read_tensor_proto(const void* bytes, size_t size, Tensor* tensor, char* name = nullptr, size_t name_size = 0);
Status read_tensor_file(const char* path, Tensor* tensor);
Status write_tensor_proto(const Tensor& tensor, StringView name, WriteFn write, void* user);

}  // namespace tessel

// ==========================================================================================
// Templates
// ==========================================================================================
#include <new>
#include <utility>
namespace tessel {
template <class T, class... Args>
T* create(Args&&... args) {
    void* memory = TESSEL_MALLOC(sizeof(T));
    return memory ? new (memory) T(std::forward<Args>(args)...) : nullptr;
}
template <class T>
void destroy(T* object) {
    if (!object) return;
    object->~T();
    TESSEL_FREE(object);
}
}  // namespace tessel
#endif  // TESSEL_RUNTIME_H

// ==========================================================================================
// Implementation
// ==========================================================================================
#if defined(TESSEL_IMPLEMENTATION) && !defined(TESSEL_RUNTIME_IMPLEMENTED)
#define TESSEL_RUNTIME_IMPLEMENTED

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace tessel {

// >>tensor implementation
bool desc_elements(const TensorDesc& desc, uint64_t* elements) {
    uint64_t n = 1;
    bool zero = false;
    for (uint32_t i = 0; i < desc.rank; ++i) {
        int64_t d = desc.dims[i];
        if (d < 0) return false;
        if (d == 0) { zero = true; continue; }
        if (n > UINT64_MAX / (uint64_t)d) return false;
        n *= (uint64_t)d;
    }
    *elements = zero ? 0 : n;
    return true;
}

uint64_t TensorView::elements() const {
    uint64_t n = 0;
    return desc_elements(desc, &n) ? n : 0;
}

Tensor::~Tensor() { reset(); }

Tensor::Tensor(Tensor&& other) noexcept { *this = static_cast<Tensor&&>(other); }

Tensor& Tensor::operator=(Tensor&& other) noexcept {
    if (this == &other) return *this;
    reset();
    desc_ = other.desc_;
    std::memcpy(strides_, other.strides_, sizeof strides_);
    data_ = other.data_;
    owns_ = other.owns_;
    other.data_ = nullptr;
    other.owns_ = false;
    other.desc_ = TensorDesc();
    return *this;
}

void Tensor::reset() {
    if (owns_ && data_) TESSEL_FREE(static_cast<void**>(data_)[-1]);
    data_ = nullptr;
    owns_ = false;
    desc_ = TensorDesc();
}

namespace detail {
inline bool desc_elements_equal(const TensorDesc& a, const TensorDesc& b) {
    uint64_t x = 0, y = 0;
    return desc_elements(a, &x) && desc_elements(b, &y) && x == y;
}

inline Status make_desc(ElementType type, Span<const int64_t> shape, TensorDesc* desc, uint64_t* bytes) {
    if (type == ElementType::Undefined || (uint32_t)type > (uint32_t)ElementType::Bool) return Status::InvalidArgument;
    if (shape.size > (size_t)kMaxRank) return Status::LimitExceeded;
    TensorDesc d;
    d.type = type;
    d.rank = (uint8_t)shape.size;
    for (size_t i = 0; i < shape.size; ++i) {
        if (shape[i] < 0) return Status::InvalidArgument;
        d.dims[i] = shape[i];
    }
    uint64_t n = 0;
    if (!desc_elements(d, &n) || n > UINT64_MAX / 8) return Status::LimitExceeded;
    *desc = d;
    *bytes = n * element_size(type);
    return Status::Ok;
}
}  // namespace detail

Status Tensor::allocate(ElementType type, Span<const int64_t> shape) {
    TensorDesc d;
    uint64_t bytes = 0;
    Status s = detail::make_desc(type, shape, &d, &bytes);
    if (s != Status::Ok) return s;
    if (bytes > (uint64_t)SIZE_MAX - 128) return Status::LimitExceeded;
    void* raw = TESSEL_MALLOC((size_t)bytes + 64 + sizeof(void*));
    if (!raw) return Status::OutOfMemory;
    uintptr_t aligned = ((uintptr_t)raw + sizeof(void*) + 63) & ~(uintptr_t)63;
    reinterpret_cast<void**>(aligned)[-1] = raw;
    std::memset(reinterpret_cast<void*>(aligned), 0, (size_t)bytes);
    reset();
    desc_ = d;
    data_ = reinterpret_cast<void*>(aligned);
    owns_ = true;
    int64_t stride = 1;
    for (int i = (int)d.rank - 1; i >= 0; --i) { strides_[i] = stride; stride *= d.dims[i] ? d.dims[i] : 1; }
    return Status::Ok;
}

Status Tensor::view(ElementType type, Span<const int64_t> shape, void* data, const int64_t* strides) {
    TensorDesc d;
    uint64_t bytes = 0;
    Status s = detail::make_desc(type, shape, &d, &bytes);
    if (s != Status::Ok) return s;
    if (!data && bytes) return Status::InvalidArgument;
    reset();
    desc_ = d;
    data_ = data;
    int64_t stride = 1;
    for (int i = (int)d.rank - 1; i >= 0; --i) {
        strides_[i] = strides ? strides[i] : stride;
        stride *= d.dims[i] ? d.dims[i] : 1;
    }
    return Status::Ok;
}

uint64_t Tensor::elements() const {
    uint64_t n = 0;
    return desc_elements(desc_, &n) ? n : 0;
}

size_t Tensor::bytes() const { return (size_t)(elements() * element_size(desc_.type)); }

bool Tensor::dense() const {
    int64_t stride = 1;
    for (int i = (int)desc_.rank - 1; i >= 0; --i) {
        if (desc_.dims[i] != 1 && strides_[i] != stride) return false;
        stride *= desc_.dims[i];
    }
    return true;
}

// >>model implementation
Model::Model() : graph(&arena) {}
Model::Model(void* buffer, size_t bytes) : arena(buffer, bytes), graph(&arena) {}
Model::~Model() {
    if (file_) TESSEL_FREE(file_);
}

Status Model::push_port(ModelPort** ports, uint32_t* count, uint32_t* capacity, StringView name, NodeId node) {
    if (*count == *capacity) {
        uint32_t grown = *capacity ? *capacity * 2 : 8;
        ModelPort* fresh = arena.allocate_array<ModelPort>(grown);
        if (!fresh) return graph.fail(Status::OutOfMemory, "out of memory adding a model port");
        for (uint32_t i = 0; i < *count; ++i) fresh[i] = (*ports)[i];
        *ports = fresh;
        *capacity = grown;
    }
    (*ports)[(*count)++] = ModelPort{graph.node(node).name, node};
    (void)name;
    return Status::Ok;
}

Status Model::add_input(StringView name, const TensorDesc& desc, NodeId* id) {
    NodeSpec spec;
    spec.name = name;
    spec.op = "Parameter";
    NodeId node = kNoNode;
    Status s = graph.add_node(spec, &node);
    if (s == Status::Ok) s = graph.set_output_desc(node, 0, desc);
    if (s == Status::Ok) s = push_port(&inputs_, &input_count_, &input_capacity_, name, node);
    if (id) *id = node;
    return s;
}

Status Model::add_constant(StringView name, const TensorDesc& desc, const void* data, NodeId* id, bool copy) {
    uint64_t n = 0;
    if (!desc_elements(desc, &n) || desc.type == ElementType::Undefined)
        return graph.fail(Status::InvalidArgument, "constant '%.*s' has a bad shape or type", (int)name.size, name.data);
    size_t bytes = (size_t)(n * element_size(desc.type));
    ConstTensor* tensor = arena.allocate_array<ConstTensor>(1);
    if (!tensor) return graph.fail(Status::OutOfMemory, "out of memory adding a constant");
    tensor->desc = desc;
    tensor->bytes = bytes;
    tensor->data = data;
    if (copy && bytes) {
        void* owned = arena.allocate(bytes, 64);
        if (!owned) return graph.fail(Status::OutOfMemory, "out of memory copying constant '%.*s'", (int)name.size, name.data);
        std::memcpy(owned, data, bytes);
        tensor->data = owned;
    }
    NodeSpec spec;
    spec.name = name;
    spec.op = "Constant";
    NodeId node = kNoNode;
    Status s = graph.add_node(spec, &node);
    if (s == Status::Ok) s = graph.set_output_desc(node, 0, desc);
    if (s == Status::Ok) {
        Attribute a;
        a.name = "value";
        a.kind = AttributeKind::Tensor;
        a.tensor = tensor;
        s = graph.add_attribute(node, a);
    }
    if (id) *id = node;
    return s;
}

Status Model::add_node(StringView op, StringView name, Span<const InputRef> inputs, uint32_t num_outputs, NodeId* id) {
    NodeSpec spec;
    spec.name = name;
    spec.op = op;
    spec.inputs = inputs;
    spec.num_outputs = num_outputs;
    return graph.add_node(spec, id);
}

Status Model::add_output(StringView name, InputRef source) {
    NodeSpec spec;
    spec.name = name;
    spec.op = "Result";
    spec.inputs = Span<const InputRef>(&source, 1);
    spec.num_outputs = 0;
    NodeId node = kNoNode;
    Status s = graph.add_node(spec, &node);
    if (s == Status::Ok) s = push_port(&outputs_, &output_count_, &output_capacity_, name, node);
    return s;
}

InputRef Model::absent() {
    if (absent_ == kNoNode) {
        NodeSpec spec;
        spec.name = "<absent>";
        spec.op = "Absent";
        if (graph.add_node(spec, &absent_) != Status::Ok) absent_ = kNoNode;
    }
    return absent_ == kNoNode ? InputRef::by_name("<absent>") : InputRef::by_id(absent_);
}

Status Model::set_int(NodeId node, StringView name, int64_t value) {
    Attribute a;
    a.name = name;
    a.kind = AttributeKind::Int;
    a.i = value;
    return graph.add_attribute(node, a);
}
Status Model::set_float(NodeId node, StringView name, float value) {
    Attribute a;
    a.name = name;
    a.kind = AttributeKind::Float;
    a.f = value;
    return graph.add_attribute(node, a);
}
Status Model::set_ints(NodeId node, StringView name, Span<const int64_t> values) {
    Attribute a;
    a.name = name;
    a.kind = AttributeKind::Ints;
    a.ints = values;
    return graph.add_attribute(node, a);
}
Status Model::set_floats(NodeId node, StringView name, Span<const float> values) {
    Attribute a;
    a.name = name;
    a.kind = AttributeKind::Floats;
    a.floats = values;
    return graph.add_attribute(node, a);
}
Status Model::set_string(NodeId node, StringView name, StringView value) {
    Attribute a;
    a.name = name;
    a.kind = AttributeKind::String;
    a.s = value;
    return graph.add_attribute(node, a);
}

Status Model::finalize() {
    Status s = graph.finalize();
    if (s != Status::Ok) return s;
    for (uint32_t i = 0; i < graph.node_count(); ++i) {
        const Node& n = graph.node(i);
        if (n.op == StringView("Result") && n.num_inputs != 1)
            return graph.fail(Status::InvalidArgument, "output '%.*s' must read exactly one value", (int)n.name.size, n.name.data);
    }
    return Status::Ok;
}

uint32_t Model::find_input(StringView name) const {
    for (uint32_t i = 0; i < input_count_; ++i) if (inputs_[i].name == name) return i;
    return 0xffffffffu;
}
uint32_t Model::find_output(StringView name) const {
    for (uint32_t i = 0; i < output_count_; ++i) if (outputs_[i].name == name) return i;
    return 0xffffffffu;
}

// >>op kernel contexts
Status PrepareContext::fail(Status status, const char* format, ...) {
    const Node& n = graph->node(node);
    int k = std::snprintf(error, sizeof error, "%.*s '%.*s': ", (int)n.op.size, n.op.data, (int)n.name.size, n.name.data);
    if (k < 0 || k >= (int)sizeof error) k = 0;
    va_list args;
    va_start(args, format);
    std::vsnprintf(error + k, sizeof error - (size_t)k, format, args);
    va_end(args);
    return status;
}

int64_t PrepareContext::attribute_int(StringView name, int64_t fallback) const {
    const Attribute* a = attribute(name);
    return a && a->kind == AttributeKind::Int ? a->i : fallback;
}
float PrepareContext::attribute_float(StringView name, float fallback) const {
    const Attribute* a = attribute(name);
    return a && a->kind == AttributeKind::Float ? a->f : fallback;
}
StringView PrepareContext::attribute_string(StringView name, StringView fallback) const {
    const Attribute* a = attribute(name);
    return a && a->kind == AttributeKind::String ? a->s : fallback;
}
Span<const int64_t> PrepareContext::attribute_ints(StringView name) const {
    const Attribute* a = attribute(name);
    return a && a->kind == AttributeKind::Ints ? a->ints : Span<const int64_t>();
}
Span<const float> PrepareContext::attribute_floats(StringView name) const {
    const Attribute* a = attribute(name);
    return a && a->kind == AttributeKind::Floats ? a->floats : Span<const float>();
}

Status RunContext::fail(Status status, const char* format, ...) const {
    if (!error) return status;
    const Node& n = graph->node(node);
    int k = std::snprintf(error, 200, "%.*s '%.*s': ", (int)n.op.size, n.op.data, (int)n.name.size, n.name.data);
    if (k < 0 || k >= 200) k = 0;
    va_list args;
    va_start(args, format);
    std::vsnprintf(error + k, 200 - (size_t)k, format, args);
    va_end(args);
    return status;
}

// >>ops
// ---- BEGIN OPS REGION (reference kernels: helpers, then one section per op family) ----
namespace detail {

// NumPy broadcast of several descs (right-aligned). false if they do not broadcast.
inline bool broadcast_descs(const TensorDesc* const* descs, uint32_t count, TensorDesc* out) {
    TensorDesc r;
    r.rank = 0;
    for (uint32_t k = 0; k < count; ++k) if (descs[k]->rank > r.rank) r.rank = descs[k]->rank;
    for (int i = 0; i < r.rank; ++i) {
        int64_t d = 1;
        for (uint32_t k = 0; k < count; ++k) {
            int j = descs[k]->rank - r.rank + i;
            int64_t dk = j >= 0 ? descs[k]->dims[j] : 1;
            if (dk == 1) continue;
            if (d != 1 && d != dk) return false;
            d = dk;
        }
        r.dims[i] = d;
    }
    *out = r;
    return true;
}

// Element strides of `in` broadcast to `out`'s shape (0 along broadcast dimensions).
inline void broadcast_strides(const TensorDesc& in, const TensorDesc& out, int64_t* strides) {
    int64_t stride = 1;
    for (int i = out.rank - 1; i >= 0; --i) {
        int j = in.rank - out.rank + i;
        int64_t d = j >= 0 ? in.dims[j] : 1;
        strides[i] = d == 1 ? 0 : stride;
        stride *= d;
    }
}

// Walks every element of `out` in row-major order with up to 3 broadcast inputs:
// fn(output_index, offsets) gets each input's element offset.
template <class Fn>
void for_each_broadcast(const TensorDesc& out, const TensorDesc* const* in, uint32_t count, Fn fn) {
    int64_t strides[3][kMaxRank] = {};
    for (uint32_t k = 0; k < count; ++k) broadcast_strides(*in[k], out, strides[k]);
    uint64_t total = 1;
    for (int i = 0; i < out.rank; ++i) total *= (uint64_t)out.dims[i];
    if (total == 0) return;
    int64_t index[kMaxRank] = {};
    int64_t offsets[3] = {0, 0, 0};
    int last = out.rank - 1;
    for (uint64_t e = 0; e < total;) {
        // innermost run
        int64_t n = last >= 0 ? out.dims[last] : 1;
        int64_t s0 = last >= 0 ? strides[0][last] : 0, s1 = last >= 0 ? strides[1][last] : 0,
                s2 = last >= 0 ? strides[2][last] : 0;
        for (int64_t j = 0; j < n; ++j) {
            int64_t o[3] = {offsets[0] + j * s0, offsets[1] + j * s1, offsets[2] + j * s2};
            fn(e + (uint64_t)j, o);
        }
        e += (uint64_t)n;
        int i = last - 1;
        for (; i >= 0; --i) {
            ++index[i];
            for (uint32_t k = 0; k < count; ++k) offsets[k] += strides[k][i];
            if (index[i] < out.dims[i]) break;
            for (uint32_t k = 0; k < count; ++k) offsets[k] -= strides[k][i] * out.dims[i];
            index[i] = 0;
        }
        if (i < 0) break;
    }
}

// ---- elementwise float operations (the snippet ops): the same scalar semantics as the
// interpreter and every JIT target, so TEMPLATE and CPU (fused) agree bit for bit when the
// FMA mode is the default target's.
struct ElementwiseState {
    SnippetOp op;
    float alpha, beta;
    bool clip_inputs;     // ONNX Clip(x, min, max) with tensor inputs
    bool fused;
};

inline Status prepare_elementwise(PrepareContext& c) {
    SnippetOp op;
    float alpha = 0, beta = 0;
    if (snippet_node_operation(*c.graph, c.node, &op, &alpha, &beta) != Status::Ok)
        return c.fail(Status::Unsupported, "not an elementwise operation");
    uint32_t arity = snippet_op_arity(op);
    bool clip_inputs = op == SnippetOp::Clip && c.num_inputs > 1;
    if (op == SnippetOp::Clip ? (c.num_inputs < 1 || c.num_inputs > 3) : c.num_inputs != arity)
        return c.fail(Status::InvalidArgument, "expects %u inputs, has %u", arity, c.num_inputs);
    const TensorDesc* descs[3];
    uint32_t count = 0;
    for (uint32_t i = 0; i < c.num_inputs; ++i) {
        if (!c.has_input(i)) {
            if (op == SnippetOp::Clip && i > 0) continue;
            return c.fail(Status::InvalidArgument, "input %u is missing", i);
        }
        bool condition = op == SnippetOp::Select && i == 0;
        ElementType want = condition ? ElementType::Bool : ElementType::Float32;
        if (c.inputs[i].type != want && !(condition && c.inputs[i].type == ElementType::Float32))
            return c.fail(Status::Unsupported, "input %u is %s (float32 expected)", i, element_type_name(c.inputs[i].type));
        descs[count++] = &c.inputs[i];
    }
    if (!broadcast_descs(descs, count, &c.outputs[0]))
        return c.fail(Status::InvalidArgument, "input shapes do not broadcast");
    c.outputs[0].type = ElementType::Float32;
    // Pow with an exponent known at compile time and one element is PowerStatic, as lowering
    // makes it in a fused island.
    if (op == SnippetOp::Pow && c.values[1]) {
        uint64_t n = 0;
        if (desc_elements(c.inputs[1], &n) && n == 1) {
            op = SnippetOp::PowerStatic;
            std::memcpy(&alpha, c.values[1], sizeof(float));
        }
    }
    ElementwiseState* state = c.arena->allocate_array<ElementwiseState>(1);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    *state = ElementwiseState{op, alpha, beta, clip_inputs, isa_uses_fma(default_isa())};
    c.state = state;
    c.in_place = c.inputs[0].rank == c.outputs[0].rank && desc_elements_equal(c.inputs[0], c.outputs[0]) &&
                 c.inputs[0].type == ElementType::Float32;
    return Status::Ok;
}

inline Status run_elementwise(const RunContext& c) {
    const ElementwiseState& st = *static_cast<const ElementwiseState*>(c.state);
    const TensorDesc& out = c.outputs[0].desc;
    float* y = c.outputs[0].as<float>();
    if (st.clip_inputs) {  // Max(min, x), then Min(max, x)
        const TensorDesc* descs[3] = {&c.inputs[0].desc, &c.inputs[1].desc, &c.inputs[2 < c.num_inputs ? 2 : 0].desc};
        const float* x = c.inputs[0].as<float>();
        const float* lo = c.num_inputs > 1 ? c.inputs[1].as<float>() : nullptr;
        const float* hi = c.num_inputs > 2 ? c.inputs[2].as<float>() : nullptr;
        if (!lo) descs[1] = descs[0];
        if (!hi) descs[2] = descs[0];
        for_each_broadcast(out, descs, 3, [&](uint64_t e, const int64_t* o) {
            float v = x[o[0]];
            float a[2];
            if (lo) { a[0] = lo[o[1]]; a[1] = v; v = snippet_evaluate(SnippetOp::Max, a, 0, 0, st.fused); }
            if (hi) { a[0] = hi[o[2]]; a[1] = v; v = snippet_evaluate(SnippetOp::Min, a, 0, 0, st.fused); }
            y[e] = v;
        });
        return Status::Ok;
    }
    uint32_t arity = c.num_inputs;
    const TensorDesc* descs[3];
    const float* in[3] = {nullptr, nullptr, nullptr};
    const uint8_t* condition = nullptr;
    for (uint32_t i = 0; i < arity; ++i) {
        descs[i] = &c.inputs[i].desc;
        in[i] = c.inputs[i].as<float>();
    }
    if (st.op == SnippetOp::Select && c.inputs[0].desc.type == ElementType::Bool) condition = c.inputs[0].as<uint8_t>();
    if (st.op == SnippetOp::PowerStatic) arity = 1;
    for_each_broadcast(out, descs, arity, [&](uint64_t e, const int64_t* o) {
        float a[3];
        for (uint32_t i = 0; i < arity; ++i) a[i] = in[i][o[i]];
        if (condition) a[0] = condition[o[0]] ? 1.0f : 0.0f;
        y[e] = snippet_evaluate(st.op, a, st.alpha, st.beta, st.fused);
    });
    return Status::Ok;
}

inline Status prepare_identity(PrepareContext& c) {
    if (c.num_inputs < 1 || !c.has_input(0)) return c.fail(Status::InvalidArgument, "expects one input");
    c.outputs[0] = c.inputs[0];
    for (uint32_t i = 1; i < c.num_outputs; ++i) {  // Dropout's mask: all true in inference
        c.outputs[i] = c.inputs[0];
        c.outputs[i].type = ElementType::Bool;
    }
    c.in_place = true;
    return Status::Ok;
}

inline Status run_identity(const RunContext& c) {
    size_t bytes = (size_t)(c.inputs[0].elements() * element_size(c.inputs[0].desc.type));
    if (c.outputs[0].data != c.inputs[0].data) std::memmove(c.outputs[0].data, c.inputs[0].data, bytes);
    for (uint32_t i = 1; i < c.num_outputs; ++i) std::memset(c.outputs[i].data, 1, (size_t)c.outputs[i].elements());
    return Status::Ok;
}

// The op list. Elementwise float ops are the snippet ops (snippet_op_from_name's spelling).
const OpKernel kBuiltinKernels[] = {
    {"Add", prepare_elementwise, run_elementwise},
    {"Sub", prepare_elementwise, run_elementwise},
    {"Mul", prepare_elementwise, run_elementwise},
    {"Div", prepare_elementwise, run_elementwise},
    {"Max", prepare_elementwise, run_elementwise},
    {"Min", prepare_elementwise, run_elementwise},
    {"Pow", prepare_elementwise, run_elementwise},
    {"Sqrt", prepare_elementwise, run_elementwise},
    {"Reciprocal", prepare_elementwise, run_elementwise},
    {"Abs", prepare_elementwise, run_elementwise},
    {"Neg", prepare_elementwise, run_elementwise},
    {"Exp", prepare_elementwise, run_elementwise},
    {"Log", prepare_elementwise, run_elementwise},
    {"Tanh", prepare_elementwise, run_elementwise},
    {"Sigmoid", prepare_elementwise, run_elementwise},
    {"Relu", prepare_elementwise, run_elementwise},
    {"Clip", prepare_elementwise, run_elementwise},
    {"Elu", prepare_elementwise, run_elementwise},
    {"Selu", prepare_elementwise, run_elementwise},
    {"Erf", prepare_elementwise, run_elementwise},
    {"Gelu", prepare_elementwise, run_elementwise},
    {"HardSigmoid", prepare_elementwise, run_elementwise},
    {"HardSwish", prepare_elementwise, run_elementwise},
    {"LeakyRelu", prepare_elementwise, run_elementwise},
    {"PRelu", prepare_elementwise, run_elementwise},
    {"Softplus", prepare_elementwise, run_elementwise},
    {"Softsign", prepare_elementwise, run_elementwise},
    {"Mish", prepare_elementwise, run_elementwise},
    {"Floor", prepare_elementwise, run_elementwise},
    {"Ceil", prepare_elementwise, run_elementwise},
    {"Round", prepare_elementwise, run_elementwise},
    {"Sign", prepare_elementwise, run_elementwise},
    {"Where", prepare_elementwise, run_elementwise},
    {"Identity", prepare_identity, run_identity},
    {"Dropout", prepare_identity, run_identity},
};

}  // namespace detail

// ---- BEGIN NN OPS REGION (Conv, MatMul, pooling, normalization, softmax, reductions, Resize) ----
namespace detail {
const OpKernel kNnKernels[] = {
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail
// ---- END NN OPS REGION ----

// ---- BEGIN TENSOR OPS REGION (shape, data movement, integer and logical ops, Cast) ----
namespace detail {
const OpKernel kTensorKernels[] = {
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail
// ---- END TENSOR OPS REGION ----

namespace detail {
// One table of every built-in kernel, assembled once (a later table overrides an earlier
// entry of the same op: the variadic and typed kernels replace the float-only ones).
struct KernelTable {
    OpKernel entries[256];
    uint32_t count = 0;
    void add(const OpKernel* table, size_t n) {
        for (size_t i = 0; i < n && table[i].op; ++i) {
            uint32_t k = 0;
            while (k < count && StringView(entries[k].op) != StringView(table[i].op)) ++k;
            if (k == count) {
                TESSEL_ASSERT(count < 256);
                ++count;
            }
            entries[k] = table[i];
        }
    }
    KernelTable() {
        add(kBuiltinKernels, sizeof kBuiltinKernels / sizeof kBuiltinKernels[0]);
        add(kNnKernels, sizeof kNnKernels / sizeof kNnKernels[0]);
        add(kTensorKernels, sizeof kTensorKernels / sizeof kTensorKernels[0]);
    }
};
inline const KernelTable& kernel_table() {
    static const KernelTable table;   // thread-safe initialization (C++11)
    return table;
}
}  // namespace detail

Span<const OpKernel> builtin_op_kernels() {
    return Span<const OpKernel>(detail::kernel_table().entries, detail::kernel_table().count);
}

const OpKernel* find_builtin_kernel(StringView op) {
    for (const OpKernel& k : builtin_op_kernels()) if (op == StringView(k.op)) return &k;
    return nullptr;
}
// ---- END OPS REGION ----

// >>onnx reader
// ---- BEGIN ONNX REGION ----
// ONNX models and TensorProto files, read straight from protobuf's wire format (no protobuf
// library). Every length and offset is checked against the end of its message before use, so
// any bytes give a Status and a message, never a read past the buffer. Messages are walked
// several times instead of being copied into intermediate structures: the only heap the
// reader uses besides the model's arena are two name tables and one scratch buffer
// (TESSEL_MALLOC, freed before it returns, also for a fixed-buffer model).
//
// What is read: ModelProto (opset_import, graph), GraphProto (node, initializer, input,
// output, value_info), NodeProto, AttributeProto (FLOAT, INT, STRING, TENSOR, FLOATS, INTS;
// GRAPH, STRINGS and the other lists are Unsupported), TensorProto (raw_data, packed or
// unpacked float_data/int32_data/int64_data, external data), ValueInfoProto with tensor types.
// Element types FLOAT, UINT8, INT8, INT32, INT64, BOOL, FLOAT16; default-domain opsets 7..17.
// A node in another domain is Unsupported (an imported but unused domain is not).
//
// Mapping: initializers become Constant nodes, graph inputs that are not initializers
// Parameter nodes (symbolic or unknown dims negative; no shape at all reads as rank 0), nodes
// keep their op type (unknown ops are the runtime's to reject), their inputs are resolved by id
// in a pre-pass over every node's outputs (files need not be sorted), empty inputs in the middle
// read the Absent node and trailing ones are dropped, graph outputs become Result nodes. A node
// keeps its ONNX name unless it is empty or taken (by a node or an interface name): then it is
// `<op_type>_<index>`, made unique. An output that is also an input or initializer name is
// Unsupported (interface names share one namespace). The model is finalized (Cycle).
//
// Memory: raw, element-aligned initializer and attribute data stay in the bytes given to
// read_onnx (so they must outlive the model; read_onnx_file keeps the file in the model);
// everything else is decoded once into the arena, 64-byte aligned. Assumes a little-endian host.
//
// Limits and threat model: files above Limits::max_file_bytes (2 GiB), more than max_nodes
// graph entries, rank above 8, tensors above max_tensor_elements or whose dims overflow are
// LimitExceeded; negative dims and raw_data of the wrong size ParseError. External data must be
// a relative path inside the model's folder: absolute paths, `..` components and links
// resolving outside it are InvalidArgument; an offset and length past the file ParseError.
// The check is done on the realpath and that path is opened, but a folder that an attacker
// can write to while the model is read is outside this model. On any error the model is left
// partly built: read into a fresh Model.
}  // namespace tessel

#include <climits>
#include <cstdlib>

namespace tessel {
namespace detail {

#define TESSEL_ONNX_TRY(expression)                  \
    do {                                             \
        Status onnx_status_ = (expression);          \
        if (onnx_status_ != Status::Ok) return onnx_status_; \
    } while (0)

constexpr uint32_t kOnnxMinOpset = 7;
constexpr uint32_t kOnnxMaxOpset = 17;

// The error sink of one read. Offsets in messages count from `base`.
struct OnnxReader {
    const uint8_t* base = nullptr;
    Limits limits;
    char error[256] = {};

    Status fail(Status status, const char* format, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
    {
        va_list args;
        va_start(args, format);
        std::vsnprintf(error, sizeof error, format, args);
        va_end(args);
        return status;
    }
    size_t offset(const uint8_t* p) const { return (size_t)(p - base); }
};

enum : uint32_t { kWireVarint = 0, kWireFixed64 = 1, kWireLength = 2, kWireFixed32 = 5 };

struct ProtoCursor {
    const uint8_t* p;
    const uint8_t* end;
    ProtoCursor(const uint8_t* data, size_t size) : p(data), end(data + size) {}
};

struct ProtoField {
    uint32_t number = 0;
    uint32_t wire = 0;
    uint64_t value = 0;               // varint, fixed64 and fixed32 fields
    const uint8_t* data = nullptr;    // length-delimited fields
    size_t size = 0;
    const uint8_t* at = nullptr;      // the field's tag
    StringView string() const { return StringView(reinterpret_cast<const char*>(data), size); }
};

inline bool proto_varint(const uint8_t** p, const uint8_t* end, uint64_t* value) {
    uint64_t v = 0;
    const uint8_t* q = *p;
    for (int shift = 0; shift < 64; shift += 7) {
        if (q >= end) return false;
        uint8_t b = *q++;
        if (shift == 63 && b > 1) return false;  // an 11th byte or bits past 64
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *value = v;
            return true;
        }
    }
    return false;
}

inline uint64_t proto_little_endian(const uint8_t* p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// Reads the next field of the message under the cursor; *more is false at its end.
inline Status proto_next(OnnxReader& r, ProtoCursor& c, ProtoField* f, bool* more, const char* what) {
    *more = false;
    if (c.p >= c.end) return Status::Ok;
    f->at = c.p;
    f->data = nullptr;
    f->size = 0;
    f->value = 0;
    uint64_t tag = 0;
    if (!proto_varint(&c.p, c.end, &tag))
        return r.fail(Status::ParseError, "%s: truncated field tag at byte %zu", what, r.offset(f->at));
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffffu)
        return r.fail(Status::ParseError, "%s: field number %llu at byte %zu is out of range", what,
                      (unsigned long long)(tag >> 3), r.offset(f->at));
    f->number = (uint32_t)(tag >> 3);
    f->wire = (uint32_t)(tag & 7);
    switch (f->wire) {
    case kWireVarint:
        if (!proto_varint(&c.p, c.end, &f->value))
            return r.fail(Status::ParseError, "%s: field %u at byte %zu has a truncated or overlong varint", what,
                          f->number, r.offset(f->at));
        break;
    case kWireFixed64:
    case kWireFixed32: {
        int bytes = f->wire == kWireFixed64 ? 8 : 4;
        if (c.end - c.p < bytes)
            return r.fail(Status::ParseError, "%s: field %u at byte %zu has a truncated %d-bit value", what, f->number,
                          r.offset(f->at), bytes * 8);
        f->value = proto_little_endian(c.p, bytes);
        c.p += bytes;
        break;
    }
    case kWireLength: {
        uint64_t length = 0;
        if (!proto_varint(&c.p, c.end, &length))
            return r.fail(Status::ParseError, "%s: field %u at byte %zu has a truncated length", what, f->number,
                          r.offset(f->at));
        if (length > (uint64_t)(c.end - c.p))
            return r.fail(Status::ParseError,
                          "%s: field %u at byte %zu has length %llu, past the end of its message (%zu bytes left)",
                          what, f->number, r.offset(f->at), (unsigned long long)length, (size_t)(c.end - c.p));
        f->data = c.p;
        f->size = (size_t)length;
        c.p += length;
        break;
    }
    default:
        return r.fail(Status::ParseError, "%s: field %u at byte %zu has bad wire type %u", what, f->number,
                      r.offset(f->at), f->wire);
    }
    *more = true;
    return Status::Ok;
}

inline Status proto_expect(OnnxReader& r, const ProtoField& f, uint32_t wire, const char* what, const char* field) {
    if (f.wire == wire) return Status::Ok;
    return r.fail(Status::ParseError, "%s: field '%s' (%u) at byte %zu has wire type %u, expected %u", what, field,
                  f.number, r.offset(f.at), f.wire, wire);
}

// One occurrence of a repeated integer field, packed or not. `out` null: count only.
inline Status proto_ints(OnnxReader& r, const ProtoField& f, int64_t* out, size_t* count, const char* what,
                         const char* field) {
    if (f.wire == kWireVarint) {
        if (out) out[*count] = (int64_t)f.value;
        ++*count;
        return Status::Ok;
    }
    if (f.wire != kWireLength) return proto_expect(r, f, kWireVarint, what, field);
    const uint8_t* p = f.data;
    const uint8_t* end = f.data + f.size;
    while (p < end) {
        uint64_t v = 0;
        if (!proto_varint(&p, end, &v))
            return r.fail(Status::ParseError, "%s: packed field '%s' at byte %zu has a truncated varint", what, field,
                          r.offset(f.at));
        if (out) out[*count] = (int64_t)v;
        ++*count;
    }
    return Status::Ok;
}

inline float proto_float(uint64_t bits) {
    uint32_t b = (uint32_t)bits;
    float v;
    std::memcpy(&v, &b, sizeof v);
    return v;
}

// One occurrence of a repeated float field (fixed32), packed or not.
inline Status proto_floats(OnnxReader& r, const ProtoField& f, float* out, size_t* count, const char* what,
                           const char* field) {
    if (f.wire == kWireFixed32) {
        if (out) out[*count] = proto_float(f.value);
        ++*count;
        return Status::Ok;
    }
    if (f.wire != kWireLength) return proto_expect(r, f, kWireFixed32, what, field);
    if (f.size % 4)
        return r.fail(Status::ParseError, "%s: packed field '%s' at byte %zu has %zu bytes (not a multiple of 4)", what,
                      field, r.offset(f.at), f.size);
    for (size_t i = 0; i < f.size; i += 4) {
        if (out) out[*count] = proto_float(proto_little_endian(f.data + i, 4));
        ++*count;
    }
    return Status::Ok;
}

// Counts the values of a packed or unpacked repeated field without decoding them.
inline Status proto_count(OnnxReader& r, const ProtoField& f, bool fixed32, size_t* count, const char* what,
                          const char* field) {
    return fixed32 ? proto_floats(r, f, nullptr, count, what, field) : proto_ints(r, f, nullptr, count, what, field);
}

inline ElementType onnx_element_type(int64_t code) {
    switch (code) {
    case 1: return ElementType::Float32;
    case 2: return ElementType::UInt8;
    case 3: return ElementType::Int8;
    case 6: return ElementType::Int32;
    case 7: return ElementType::Int64;
    case 9: return ElementType::Bool;
    case 10: return ElementType::Float16;
    default: return ElementType::Undefined;
    }
}

inline int32_t onnx_type_code(ElementType type) {
    switch (type) {
    case ElementType::Float32: return 1;
    case ElementType::UInt8: return 2;
    case ElementType::Int8: return 3;
    case ElementType::Int32: return 6;
    case ElementType::Int64: return 7;
    case ElementType::Bool: return 9;
    case ElementType::Float16: return 10;
    default: return 0;
    }
}

inline const char* onnx_type_name(int64_t code) {
    static const char* const names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64",
                                        "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64",
                                        "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                        "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1"};
    return code >= 0 && code < (int64_t)(sizeof names / sizeof names[0]) ? names[code] : "unknown";
}

inline Status onnx_type(OnnxReader& r, int64_t code, const char* label, ElementType* type) {
    *type = onnx_element_type(code);
    if (*type != ElementType::Undefined) return Status::Ok;
    if (code == 0) return r.fail(Status::ParseError, "%s has no element type (UNDEFINED)", label);
    return r.fail(Status::Unsupported, "%s has element type %s (%lld), which Tessel does not support", label,
                  onnx_type_name(code), (long long)code);
}

inline bool parse_decimal(StringView s, uint64_t* value) {
    if (s.empty()) return false;
    uint64_t v = 0;
    for (char ch : s) {
        if (ch < '0' || ch > '9') return false;
        uint64_t digit = (uint64_t)(ch - '0');
        if (v > (UINT64_MAX - digit) / 10) return false;
        v = v * 10 + digit;
    }
    *value = v;
    return true;
}

// A TensorProto after its first pass: shape and type checked, data located but not decoded.
struct TensorInfo {
    StringView name;
    TensorDesc desc;
    uint64_t elements = 0;
    size_t bytes = 0;
    const uint8_t* body = nullptr;   // the message, walked again to decode typed fields
    size_t body_size = 0;
    const uint8_t* raw = nullptr;
    size_t raw_size = 0;
    bool has_raw = false;
    bool external = false;
    StringView location;
    uint64_t offset = 0, length = 0;
    bool has_length = false;
    char label[160] = {};            // how messages name the tensor
};

inline Status parse_tensor(OnnxReader& r, const uint8_t* data, size_t size, const char* what, TensorInfo* t) {
    ProtoCursor c(data, size);
    ProtoField f;
    bool more = true;
    int64_t dims[kMaxRank] = {};
    size_t rank = 0;
    int64_t data_type = 0;
    size_t float_count = 0, int32_count = 0, int64_count = 0, other_count = 0;
    bool segment = false;
    int64_t data_location = 0;
    StringView location;
    StringView offset_text, length_text;
    bool has_location = false, has_offset = false, has_length = false;
    t->body = data;
    t->body_size = size;
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        switch (f.number) {
        case 1: {  // dims
            size_t before = rank;
            size_t n = 0;
            TESSEL_ONNX_TRY(proto_ints(r, f, nullptr, &n, what, "dims"));
            if (rank + n <= (size_t)kMaxRank) {
                size_t k = 0;
                TESSEL_ONNX_TRY(proto_ints(r, f, dims + before, &k, what, "dims"));
            }
            rank += n;
            break;
        }
        case 2: TESSEL_ONNX_TRY(proto_expect(r, f, kWireVarint, what, "data_type")); data_type = (int64_t)f.value; break;
        case 3: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "segment")); segment = true; break;
        case 4: TESSEL_ONNX_TRY(proto_count(r, f, true, &float_count, what, "float_data")); break;
        case 5: TESSEL_ONNX_TRY(proto_count(r, f, false, &int32_count, what, "int32_data")); break;
        case 6: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "string_data")); ++other_count; break;
        case 7: TESSEL_ONNX_TRY(proto_count(r, f, false, &int64_count, what, "int64_data")); break;
        case 8: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "name")); t->name = f.string(); break;
        case 9:
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "raw_data"));
            t->raw = f.data;
            t->raw_size = f.size;
            t->has_raw = true;
            break;
        case 10:
            if (f.wire == kWireLength || f.wire == kWireFixed64) { ++other_count; break; }
            return proto_expect(r, f, kWireFixed64, what, "double_data");
        case 11: TESSEL_ONNX_TRY(proto_count(r, f, false, &other_count, what, "uint64_data")); break;
        case 13: {  // external_data: StringStringEntryProto {key = 1, value = 2}
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "external_data"));
            ProtoCursor entry(f.data, f.size);
            ProtoField e;
            bool more_entry = true;
            StringView key, value;
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, entry, &e, &more_entry, what));
                if (!more_entry) break;
                if (e.number == 1 || e.number == 2) {
                    TESSEL_ONNX_TRY(proto_expect(r, e, kWireLength, what, e.number == 1 ? "external_data.key" : "external_data.value"));
                    (e.number == 1 ? key : value) = e.string();
                }
            }
            if (key == StringView("location")) { location = value; has_location = true; }
            else if (key == StringView("offset")) { offset_text = value; has_offset = true; }
            else if (key == StringView("length")) { length_text = value; has_length = true; }
            break;
        }
        case 14:
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireVarint, what, "data_location"));
            data_location = (int64_t)f.value;
            break;
        default: break;  // doc_string and fields of later versions
        }
    }
    if (t->name.empty()) std::snprintf(t->label, sizeof t->label, "%s", what);
    else std::snprintf(t->label, sizeof t->label, "%s '%.*s'", what, (int)(t->name.size > 100 ? 100 : t->name.size), t->name.data);
    const char* label = t->label;
    ElementType type = ElementType::Undefined;
    TESSEL_ONNX_TRY(onnx_type(r, data_type, label, &type));
    if (rank > (size_t)r.limits.max_rank)
        return r.fail(Status::LimitExceeded, "%s has rank %zu (at most %u)", label, rank, r.limits.max_rank);
    if (segment) return r.fail(Status::Unsupported, "%s is stored in segments", label);
    TensorDesc desc;
    desc.type = type;
    desc.rank = (uint8_t)rank;
    uint64_t elements = 1;
    bool overflow = false;
    for (size_t i = 0; i < rank; ++i) {
        if (dims[i] < 0) return r.fail(Status::ParseError, "%s has negative dim %lld at axis %zu", label, (long long)dims[i], i);
        desc.dims[i] = dims[i];
        if (dims[i] && elements > UINT64_MAX / (uint64_t)dims[i]) overflow = true;
        else elements *= (uint64_t)dims[i];
    }
    bool zero = false;
    for (size_t i = 0; i < rank; ++i) zero = zero || dims[i] == 0;
    if (overflow && !zero) return r.fail(Status::LimitExceeded, "%s: the product of its dims overflows 64 bits", label);
    if (zero) elements = 0;
    if (elements > r.limits.max_tensor_elements)
        return r.fail(Status::LimitExceeded, "%s has %llu elements (at most %llu)", label, (unsigned long long)elements,
                      (unsigned long long)r.limits.max_tensor_elements);
    t->desc = desc;
    t->elements = elements;
    t->bytes = (size_t)(elements * element_size(type));
    if (data_location == 1) {
        if (!has_location || location.empty()) return r.fail(Status::ParseError, "%s: external data without a location", label);
        t->external = true;
        t->location = location;
        if (has_offset && !parse_decimal(offset_text, &t->offset))
            return r.fail(Status::ParseError, "%s: external data offset '%.*s' is not a number", label,
                          (int)(offset_text.size > 40 ? 40 : offset_text.size), offset_text.data);
        if (has_length && !parse_decimal(length_text, &t->length))
            return r.fail(Status::ParseError, "%s: external data length '%.*s' is not a number", label,
                          (int)(length_text.size > 40 ? 40 : length_text.size), length_text.data);
        t->has_length = has_length;
        return Status::Ok;
    }
    if (data_location != 0) return r.fail(Status::ParseError, "%s: data_location %lld is not DEFAULT or EXTERNAL", label, (long long)data_location);
    if (t->has_raw) {
        if (t->raw_size != t->bytes)
            return r.fail(Status::ParseError, "%s: raw_data has %zu bytes, expected %zu (%llu elements of %s)", label,
                          t->raw_size, t->bytes, (unsigned long long)elements, element_type_name(type));
        return Status::Ok;
    }
    size_t count = type == ElementType::Float32 ? float_count : type == ElementType::Int64 ? int64_count : int32_count;
    const char* field = type == ElementType::Float32 ? "float_data" : type == ElementType::Int64 ? "int64_data" : "int32_data";
    if ((uint64_t)count != elements)
        return r.fail(Status::ParseError, "%s: %s has %zu values, expected %llu", label, field, count,
                      (unsigned long long)elements);
    return Status::Ok;
}

#if !defined(_WIN32)
// Reads a tensor's external data: only a relative path inside `folder`, no `..`, and no link
// that resolves outside it.
inline Status read_external(OnnxReader& r, const TensorInfo& t, StringView folder, void* out) {
    const char* label = t.label;
    int location_size = (int)(t.location.size > 120 ? 120 : t.location.size);
    const char* location = t.location.data;
    if (folder.empty())
        return r.fail(Status::InvalidArgument, "%s: external data '%.*s' needs the model's folder", label,
                      location_size, location);
    StringView l = t.location;
    bool absolute = l[0] == '/' || l[0] == '\\' || (l.size > 1 && l[1] == ':');
    if (absolute)
        return r.fail(Status::InvalidArgument, "%s: external data path '%.*s' is absolute", label, location_size, location);
    size_t start = 0;
    for (size_t i = 0; i <= l.size; ++i) {
        if (i < l.size && l[i] == 0)
            return r.fail(Status::InvalidArgument, "%s: external data path '%.*s' holds a zero byte", label,
                          location_size, location);
        if (i == l.size || l[i] == '/' || l[i] == '\\') {
            if (i - start == 2 && l[start] == '.' && l[start + 1] == '.')
                return r.fail(Status::InvalidArgument, "%s: external data path '%.*s' has a '..' component", label,
                              location_size, location);
            start = i + 1;
        }
    }
    char joined[PATH_MAX];
    char folder_real[PATH_MAX];
    char file_real[PATH_MAX];
    if (folder.size + l.size + 2 > sizeof joined)
        return r.fail(Status::InvalidArgument, "%s: external data path '%.*s' is too long", label, location_size, location);
    std::memcpy(joined, folder.data, folder.size);
    joined[folder.size] = 0;
    if (!realpath(joined, folder_real))
        return r.fail(Status::IoError, "%s: cannot resolve the model's folder '%s'", label, joined);
    joined[folder.size] = '/';
    std::memcpy(joined + folder.size + 1, l.data, l.size);
    joined[folder.size + 1 + l.size] = 0;
    if (!realpath(joined, file_real))
        return r.fail(Status::IoError, "%s: cannot open external data file '%.*s'", label, location_size, location);
    size_t prefix = std::strlen(folder_real);
    bool inside = std::strncmp(file_real, folder_real, prefix) == 0 &&
                  (file_real[prefix] == '/' || (prefix == 1 && folder_real[0] == '/'));
    if (!inside)
        return r.fail(Status::InvalidArgument, "%s: external data path '%.*s' resolves outside the model's folder", label,
                      location_size, location);
    FILE* file = std::fopen(file_real, "rb");
    if (!file) return r.fail(Status::IoError, "%s: cannot open external data file '%.*s'", label, location_size, location);
    long file_size = -1;
    if (std::fseek(file, 0, SEEK_END) == 0) file_size = std::ftell(file);
    if (file_size < 0) {
        std::fclose(file);
        return r.fail(Status::IoError, "%s: cannot size external data file '%.*s'", label, location_size, location);
    }
    uint64_t length = t.has_length ? t.length : ((uint64_t)file_size > t.offset ? (uint64_t)file_size - t.offset : 0);
    if (t.offset > UINT64_MAX - length || t.offset + length > (uint64_t)file_size) {
        std::fclose(file);
        return r.fail(Status::ParseError, "%s: external data offset %llu + length %llu is past the end of '%.*s' (%ld bytes)",
                      label, (unsigned long long)t.offset, (unsigned long long)length, location_size, location, file_size);
    }
    if (length != (uint64_t)t.bytes) {
        std::fclose(file);
        return r.fail(Status::ParseError, "%s: external data has %llu bytes, expected %zu", label,
                      (unsigned long long)length, t.bytes);
    }
    bool ok = std::fseek(file, (long)t.offset, SEEK_SET) == 0 && std::fread(out, 1, t.bytes, file) == t.bytes;
    std::fclose(file);
    if (!ok) return r.fail(Status::IoError, "%s: cannot read external data file '%.*s'", label, location_size, location);
    return Status::Ok;
}
#else
inline Status read_external(OnnxReader& r, const TensorInfo& t, StringView, void*) {
    return r.fail(Status::Unsupported, "%s: external data is not supported on this platform", t.label);
}
#endif

// True when the tensor's bytes can stay where they are (raw and aligned to the element).
inline bool tensor_in_place(const TensorInfo& t) {
    return !t.external && t.has_raw && t.bytes > 0 &&
           (uintptr_t)t.raw % (uintptr_t)element_size(t.desc.type) == 0;
}

// Writes the tensor's t.bytes bytes of data to `out`.
inline Status fill_tensor(OnnxReader& r, const TensorInfo& t, StringView folder, void* out) {
    if (t.bytes == 0) return Status::Ok;
    if (t.external) return read_external(r, t, folder, out);
    if (t.has_raw) {
        std::memcpy(out, t.raw, t.bytes);
        return Status::Ok;
    }
    ElementType type = t.desc.type;
    uint32_t want = type == ElementType::Float32 ? 4u : type == ElementType::Int64 ? 7u : 5u;
    ProtoCursor c(t.body, t.body_size);
    ProtoField f;
    bool more = true;
    size_t count = 0;
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, t.label));
        if (!more) break;
        if (f.number != want) continue;
        if (type == ElementType::Float32) {
            TESSEL_ONNX_TRY(proto_floats(r, f, static_cast<float*>(out), &count, t.label, "float_data"));
        } else if (type == ElementType::Int64) {
            TESSEL_ONNX_TRY(proto_ints(r, f, static_cast<int64_t*>(out), &count, t.label, "int64_data"));
        } else {
            // int32_data holds every narrower type, one value per entry (FLOAT16: its bits).
            int64_t values[64];
            size_t n = 0;
            TESSEL_ONNX_TRY(proto_count(r, f, false, &n, t.label, "int32_data"));
            // Decode in chunks through a small buffer.
            const uint8_t* p = f.data;
            const uint8_t* end = f.data + f.size;
            for (size_t done = 0; done < n;) {
                size_t k = 0;
                if (f.wire == kWireVarint) {
                    values[k++] = (int64_t)f.value;
                } else {
                    while (k < 64 && p < end) {
                        uint64_t v = 0;
                        if (!proto_varint(&p, end, &v)) return r.fail(Status::ParseError, "%s: bad int32_data", t.label);
                        values[k++] = (int64_t)v;
                    }
                }
                for (size_t i = 0; i < k; ++i, ++count) {
                    int32_t v = (int32_t)values[i];
                    switch (type) {
                    case ElementType::Int32: static_cast<int32_t*>(out)[count] = v; break;
                    case ElementType::Float16: static_cast<uint16_t*>(out)[count] = (uint16_t)v; break;
                    case ElementType::Bool: static_cast<uint8_t*>(out)[count] = v != 0; break;
                    default: static_cast<uint8_t*>(out)[count] = (uint8_t)v; break;
                    }
                }
                done += k;
            }
        }
    }
    TESSEL_ASSERT(count == t.elements);
    return Status::Ok;
}

// Open-addressing table of names (keys are not copied: they point into the model's bytes or
// the arena, both alive while the reader runs).
struct OnnxNameTable {
    struct Entry {
        StringView name;
        uint32_t node;
        uint32_t port;
    };
    Entry* entries = nullptr;
    uint64_t mask = 0;
    OnnxNameTable() = default;
    OnnxNameTable(const OnnxNameTable&) = delete;
    OnnxNameTable& operator=(const OnnxNameTable&) = delete;
    ~OnnxNameTable() {
        if (entries) TESSEL_FREE(entries);
    }
    bool init(uint64_t count) {
        uint64_t size = 16;
        while (size < 2 * count + 1) size *= 2;
        if (size > SIZE_MAX / sizeof(Entry)) return false;
        entries = static_cast<Entry*>(TESSEL_MALLOC((size_t)size * sizeof(Entry)));
        if (!entries) return false;
        for (uint64_t i = 0; i < size; ++i) new (&entries[i]) Entry{StringView(), 0, 0};
        mask = size - 1;
        return true;
    }
    Entry* slot(StringView name) const {
        uint64_t i = hash_bytes(name.data, name.size) & mask;
        while (entries[i].name.data && !(entries[i].name == name)) i = (i + 1) & mask;
        return &entries[i];
    }
    const Entry* find(StringView name) const {
        const Entry* e = slot(name);
        return e->name.data ? e : nullptr;
    }
    // false if the name is present already
    bool insert(StringView name, uint32_t node, uint32_t port) {
        Entry* e = slot(name);
        if (e->name.data) return false;
        *e = Entry{name, node, port};
        return true;
    }
};

// A growable TESSEL_MALLOC buffer for per-node temporaries.
struct OnnxScratch {
    void* data = nullptr;
    size_t size = 0;
    OnnxScratch() = default;
    OnnxScratch(const OnnxScratch&) = delete;
    OnnxScratch& operator=(const OnnxScratch&) = delete;
    ~OnnxScratch() {
        if (data) TESSEL_FREE(data);
    }
    void* get(size_t bytes) {
        if (bytes <= size && data) return data;
        if (data) TESSEL_FREE(data);
        size = bytes < 256 ? 256 : bytes;
        data = TESSEL_MALLOC(size);
        if (!data) size = 0;
        return data;
    }
};

// What the first pass learns about a NodeProto.
struct OnnxNodeInfo {
    StringView name, op, domain;
    size_t inputs = 0;        // trailing empty names dropped
    size_t outputs = 0;
    bool absent_inputs = false;
};

inline Status scan_node(OnnxReader& r, const uint8_t* data, size_t size, const char* what, OnnxNodeInfo* info) {
    ProtoCursor c(data, size);
    ProtoField f;
    bool more = true;
    size_t inputs = 0;
    *info = OnnxNodeInfo();
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        switch (f.number) {
        case 1:
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "input"));
            ++inputs;
            if (f.size) {
                if (info->inputs + 1 < inputs) info->absent_inputs = true;
                info->inputs = inputs;
            }
            break;
        case 2: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "output")); ++info->outputs; break;
        case 3: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "name")); info->name = f.string(); break;
        case 4: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "op_type")); info->op = f.string(); break;
        case 5: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "attribute")); break;
        case 7: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "domain")); info->domain = f.string(); break;
        default: break;
        }
    }
    return Status::Ok;
}

inline int clip_length(StringView s) { return (int)(s.size > 100 ? 100 : s.size); }

// ValueInfoProto -> name and desc. For graph inputs (strict) a type that is not a supported
// tensor is Unsupported; for outputs and value_info only the bytes are checked.
inline Status parse_value_info(OnnxReader& r, const uint8_t* data, size_t size, const char* what, bool strict,
                               StringView* name, TensorDesc* desc) {
    ProtoCursor c(data, size);
    ProtoField f;
    bool more = true;
    const uint8_t* type = nullptr;
    size_t type_size = 0;
    bool has_type = false;
    *name = StringView();
    *desc = TensorDesc();
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        if (f.number == 1) { TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "name")); *name = f.string(); }
        if (f.number == 2) {
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "type"));
            type = f.data;
            type_size = f.size;
            has_type = true;
        }
    }
    char label[160];
    std::snprintf(label, sizeof label, "%s '%.*s'", what, clip_length(*name), name->data ? name->data : "");
    if (name->empty()) return r.fail(Status::ParseError, "%s has no name", what);
    if (!has_type) return strict ? r.fail(Status::ParseError, "%s has no type", label) : Status::Ok;
    // TypeProto: tensor_type = 1 (others: sequence 4, map 5, sparse 8, optional 9, opaque 7).
    ProtoCursor tc(type, type_size);
    const uint8_t* tensor = nullptr;
    size_t tensor_size = 0;
    bool is_tensor = false;
    uint32_t other = 0;
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, tc, &f, &more, label));
        if (!more) break;
        if (f.number == 1) {
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, label, "tensor_type"));
            tensor = f.data;
            tensor_size = f.size;
            is_tensor = true;
        } else if (f.number != 6) {  // 6: denotation
            other = f.number;
        }
    }
    if (!is_tensor) {
        if (!strict) return Status::Ok;
        const char* kind = other == 4 ? "a sequence" : other == 5 ? "a map" : other == 8 ? "a sparse tensor"
                         : other == 9 ? "an optional" : "not a tensor";
        return r.fail(Status::Unsupported, "%s is %s (only tensors are supported)", label, kind);
    }
    ProtoCursor sc(tensor, tensor_size);
    int64_t elem_type = 0;
    const uint8_t* shape = nullptr;
    size_t shape_size = 0;
    bool has_shape = false;
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, sc, &f, &more, label));
        if (!more) break;
        if (f.number == 1) { TESSEL_ONNX_TRY(proto_expect(r, f, kWireVarint, label, "elem_type")); elem_type = (int64_t)f.value; }
        if (f.number == 2) {
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, label, "shape"));
            shape = f.data;
            shape_size = f.size;
            has_shape = true;
        }
    }
    ElementType element = ElementType::Undefined;
    Status s = onnx_type(r, elem_type, label, &element);
    if (s != Status::Ok) return strict ? s : Status::Ok;
    desc->type = element;
    if (!has_shape) return Status::Ok;   // unknown rank: read as rank 0; compile_model's shapes give it
    ProtoCursor dc(shape, shape_size);
    uint32_t rank = 0;
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, dc, &f, &more, label));
        if (!more) break;
        if (f.number != 1) continue;
        TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, label, "shape.dim"));
        if (rank == r.limits.max_rank)
            return strict ? r.fail(Status::LimitExceeded, "%s has rank above %u", label, r.limits.max_rank) : Status::Ok;
        int64_t dim = -1;   // dim_param or nothing: symbolic
        ProtoCursor d(f.data, f.size);
        ProtoField g;
        bool more_dim = true;
        while (true) {
            TESSEL_ONNX_TRY(proto_next(r, d, &g, &more_dim, label));
            if (!more_dim) break;
            if (g.number == 1) {
                TESSEL_ONNX_TRY(proto_expect(r, g, kWireVarint, label, "dim_value"));
                dim = (int64_t)g.value < 0 ? -1 : (int64_t)g.value;
            } else if (g.number == 2) {
                TESSEL_ONNX_TRY(proto_expect(r, g, kWireLength, label, "dim_param"));
                dim = -1;
            }
        }
        desc->dims[rank++] = dim;
    }
    desc->rank = (uint8_t)rank;
    return Status::Ok;
}

// Builds a Model from a ModelProto's GraphProto.
struct OnnxModelReader {
    Model* model;
    OnnxReader& r;
    StringView folder;
    OnnxNameTable tensors;    // tensor name -> producing node and port
    OnnxNameTable names;      // node names in use
    OnnxScratch scratch;

    OnnxModelReader(Model* m, OnnxReader& reader, StringView f) : model(m), r(reader), folder(f) {}

    Status out_of_memory(const char* what) { return r.fail(Status::OutOfMemory, "out of memory reading %s", what); }

    // Copies graph errors (add_node, add_attribute) into the reader's message.
    Status graph_status(Status s) {
        if (s != Status::Ok) std::snprintf(r.error, sizeof r.error, "%s", model->graph.last_error());
        return s;
    }

    // Decodes a TensorProto into a ConstTensor whose data is in the bytes (raw, aligned) or the arena.
    Status read_const(const uint8_t* data, size_t size, const char* what, TensorInfo* info, const void** out) {
        TESSEL_ONNX_TRY(parse_tensor(r, data, size, what, info));
        *out = nullptr;
        if (tensor_in_place(*info)) {
            *out = info->raw;
            return Status::Ok;
        }
        if (!info->bytes) return Status::Ok;
        void* memory = model->arena.allocate(info->bytes, 64);
        if (!memory) return out_of_memory(info->label);
        TESSEL_ONNX_TRY(fill_tensor(r, *info, folder, memory));
        *out = memory;
        return Status::Ok;
    }

    Status read_attribute(NodeId node, StringView node_name, const uint8_t* data, size_t size) {
        char what[200];
        std::snprintf(what, sizeof what, "node '%.*s' attribute", clip_length(node_name), node_name.data);
        ProtoCursor c(data, size);
        ProtoField f;
        bool more = true;
        StringView name, s, ref;
        int64_t type = 0, i = 0;
        float value = 0;
        const uint8_t* tensor = nullptr;
        size_t tensor_size = 0;
        size_t float_count = 0, int_count = 0;
        uint32_t seen = 0;   // bit per AttributeProto type present (for files without `type`)
        while (true) {
            TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
            if (!more) break;
            switch (f.number) {
            case 1: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "name")); name = f.string(); break;
            case 2: TESSEL_ONNX_TRY(proto_expect(r, f, kWireFixed32, what, "f")); value = proto_float(f.value); seen |= 1u << 1; break;
            case 3: TESSEL_ONNX_TRY(proto_expect(r, f, kWireVarint, what, "i")); i = (int64_t)f.value; seen |= 1u << 2; break;
            case 4: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "s")); s = f.string(); seen |= 1u << 3; break;
            case 5:
                TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "t"));
                tensor = f.data;
                tensor_size = f.size;
                seen |= 1u << 4;
                break;
            case 6: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "g")); seen |= 1u << 5; break;
            case 7: TESSEL_ONNX_TRY(proto_count(r, f, true, &float_count, what, "floats")); seen |= 1u << 6; break;
            case 8: TESSEL_ONNX_TRY(proto_count(r, f, false, &int_count, what, "ints")); seen |= 1u << 7; break;
            case 9: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "strings")); seen |= 1u << 8; break;
            case 10: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "tensors")); seen |= 1u << 9; break;
            case 11: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "graphs")); seen |= 1u << 10; break;
            case 20: TESSEL_ONNX_TRY(proto_expect(r, f, kWireVarint, what, "type")); type = (int64_t)f.value; break;
            case 21: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "ref_attr_name")); ref = f.string(); break;
            default: break;
            }
        }
        if (name.empty())
            return r.fail(Status::ParseError, "node '%.*s': an attribute at byte %zu has no name", clip_length(node_name),
                          node_name.data, r.offset(data));
        char label[240];
        std::snprintf(label, sizeof label, "%s '%.*s'", what, clip_length(name), name.data);
        if (!ref.empty()) return r.fail(Status::Unsupported, "%s refers to a function attribute", label);
        if (type == 0) {  // IR version 1 files: the type is the field that is present
            for (int k = 1; k <= 10; ++k)   // the bit numbers are the AttributeType values
                if (seen & (1u << k)) { type = k; break; }
            if (type == 0) return r.fail(Status::ParseError, "%s has no type and no value", label);
        }
        if (model->graph.find_attribute(node, name))
            return r.fail(Status::ParseError, "%s is given twice", label);
        Attribute a;
        a.name = name;
        switch (type) {
        case 1: a.kind = AttributeKind::Float; a.f = value; break;
        case 2: a.kind = AttributeKind::Int; a.i = i; break;
        case 3: a.kind = AttributeKind::String; a.s = s; break;
        case 6: {
            a.kind = AttributeKind::Floats;
            float* values = static_cast<float*>(scratch.get(float_count * sizeof(float) + 1));
            if (!values) return out_of_memory(label);
            size_t n = 0;
            ProtoCursor again(data, size);
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, again, &f, &more, what));
                if (!more) break;
                if (f.number == 7) TESSEL_ONNX_TRY(proto_floats(r, f, values, &n, what, "floats"));
            }
            a.floats = Span<const float>(values, n);
            break;
        }
        case 7: {
            a.kind = AttributeKind::Ints;
            int64_t* values = static_cast<int64_t*>(scratch.get(int_count * sizeof(int64_t) + 1));
            if (!values) return out_of_memory(label);
            size_t n = 0;
            ProtoCursor again(data, size);
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, again, &f, &more, what));
                if (!more) break;
                if (f.number == 8) TESSEL_ONNX_TRY(proto_ints(r, f, values, &n, what, "ints"));
            }
            a.ints = Span<const int64_t>(values, n);
            break;
        }
        case 4: {
            if (!tensor) return r.fail(Status::ParseError, "%s is a TENSOR without a tensor", label);
            TensorInfo info;
            const void* bytes = nullptr;
            TESSEL_ONNX_TRY(read_const(tensor, tensor_size, label, &info, &bytes));
            ConstTensor* t = model->arena.allocate_array<ConstTensor>(1);
            if (!t) return out_of_memory(label);
            new (t) ConstTensor();
            t->desc = info.desc;
            t->data = bytes;
            t->bytes = info.bytes;
            a.kind = AttributeKind::Tensor;
            a.tensor = t;
            break;
        }
        case 5: return r.fail(Status::Unsupported, "%s is a graph (subgraph bodies are not supported)", label);
        case 8: return r.fail(Status::Unsupported, "%s is a list of strings", label);
        case 9: return r.fail(Status::Unsupported, "%s is a list of tensors", label);
        case 10: return r.fail(Status::Unsupported, "%s is a list of graphs", label);
        case 11: case 12: return r.fail(Status::Unsupported, "%s is a sparse tensor", label);
        case 13: case 14: return r.fail(Status::Unsupported, "%s is a type proto", label);
        default: return r.fail(Status::ParseError, "%s has unknown type %lld", label, (long long)type);
        }
        return graph_status(model->graph.add_attribute(node, a));
    }

    Status read_graph(const uint8_t* data, size_t size) {
        const char* what = "GraphProto";
        ProtoField f;
        bool more = true;
        // Pass 1: counts and the wire format of the graph's own fields.
        uint64_t node_count = 0, initializer_count = 0, input_count = 0, output_count = 0;
        {
            ProtoCursor c(data, size);
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                switch (f.number) {
                case 1: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "node")); ++node_count; break;
                case 2: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "name")); break;
                case 5: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "initializer")); ++initializer_count; break;
                case 11: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "input")); ++input_count; break;
                case 12: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "output")); ++output_count; break;
                case 13: TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "value_info")); break;
                case 15: return r.fail(Status::Unsupported, "the graph has sparse initializers");
                default: break;
                }
            }
        }
        uint64_t total = node_count + initializer_count + input_count + output_count;
        if (node_count > r.limits.max_nodes || total > r.limits.max_nodes)
            return r.fail(Status::LimitExceeded, "the graph has %llu nodes and %llu inputs, initializers and outputs (at most %llu in all)",
                          (unsigned long long)node_count, (unsigned long long)(total - node_count),
                          (unsigned long long)r.limits.max_nodes);
        // Pass 2: nodes' inputs and outputs, domains; how many tensor names there are.
        uint64_t tensor_count = initializer_count + input_count;
        size_t max_inputs = 0;
        bool need_absent = false;
        {
            ProtoCursor c(data, size);
            uint32_t index = 0;
            char node_what[64];
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 1) continue;
                std::snprintf(node_what, sizeof node_what, "node #%u", index);
                OnnxNodeInfo info;
                TESSEL_ONNX_TRY(scan_node(r, f.data, f.size, node_what, &info));
                StringView shown = info.name.empty() ? StringView(node_what) : info.name;
                if (info.op.empty()) return r.fail(Status::ParseError, "node '%.*s' has no op_type", clip_length(shown), shown.data);
                if (!info.domain.empty() && info.domain != StringView("ai.onnx"))
                    return r.fail(Status::Unsupported, "node '%.*s' (%.*s) is in domain '%.*s', which Tessel does not support",
                                  clip_length(shown), shown.data, clip_length(info.op), info.op.data,
                                  clip_length(info.domain), info.domain.data);
                if (info.outputs > 0xffffu)
                    return r.fail(Status::LimitExceeded, "node '%.*s' has %zu outputs (at most 65535)", clip_length(shown),
                                  shown.data, info.outputs);
                tensor_count += info.outputs;
                if (info.inputs > max_inputs) max_inputs = info.inputs;
                need_absent = need_absent || info.absent_inputs;
                ++index;
            }
        }
        if (!tensors.init(tensor_count) || !names.init(total + 1)) return out_of_memory("the graph's names");
        if (model->graph.node_count() != 0)
            return r.fail(Status::InvalidArgument, "read_onnx needs an empty model");
        // The shared Absent node first, so ONNX node k gets the id base + k.
        if (need_absent) {
            InputRef absent = model->absent();
            if (absent.producer == kNoNode) return graph_status(Status::OutOfMemory);
            if (!names.insert(model->graph.node(absent.producer).name, absent.producer, 0))
                return r.fail(Status::DuplicateName, "node name '<absent>' is used twice");
        }
        // Initializers.
        {
            ProtoCursor c(data, size);
            uint32_t index = 0;
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 5) continue;
                char init_what[64];
                std::snprintf(init_what, sizeof init_what, "initializer #%u", index++);
                TensorInfo info;
                const void* bytes = nullptr;
                TESSEL_ONNX_TRY(read_const(f.data, f.size, "initializer", &info, &bytes));
                if (info.name.empty()) return r.fail(Status::ParseError, "%s has no name", init_what);
                NodeId id = kNoNode;
                if (!names.insert(info.name, 0, 0))
                    return r.fail(Status::DuplicateName, "initializer '%.*s' is given twice", clip_length(info.name), info.name.data);
                TESSEL_ONNX_TRY(graph_status(model->add_constant(info.name, info.desc, bytes, &id, false)));
                if (!tensors.insert(info.name, id, 0)) return r.fail(Status::DuplicateName, "initializer '%.*s' is given twice", clip_length(info.name), info.name.data);
            }
        }
        // Graph inputs that are not initializers.
        {
            ProtoCursor c(data, size);
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 11) continue;
                StringView name;
                TensorDesc desc;
                // An input that names an initializer is its default value: the constant stands.
                Status s = parse_value_info(r, f.data, f.size, "graph input", false, &name, &desc);
                if (s != Status::Ok) return s;
                const OnnxNameTable::Entry* e = tensors.find(name);
                if (e && model->graph.node(e->node).op == StringView("Constant")) continue;
                TESSEL_ONNX_TRY(parse_value_info(r, f.data, f.size, "graph input", true, &name, &desc));
                if (e || !names.insert(name, 0, 0))
                    return r.fail(Status::DuplicateName, "graph input '%.*s' is given twice", clip_length(name), name.data);
                NodeId id = kNoNode;
                TESSEL_ONNX_TRY(graph_status(model->add_input(name, desc, &id)));
                if (!tensors.insert(name, id, 0))
                    return r.fail(Status::DuplicateName, "graph input '%.*s' is given twice", clip_length(name), name.data);
            }
        }
        // Output names are Result nodes: reserve them before naming the ONNX nodes.
        {
            ProtoCursor c(data, size);
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 12 && f.number != 13) continue;
                StringView name;
                TensorDesc desc;
                TESSEL_ONNX_TRY(parse_value_info(r, f.data, f.size, f.number == 12 ? "graph output" : "value_info", false, &name, &desc));
                if (f.number != 12) continue;
                if (!names.insert(name, 0, 0))
                    return r.fail(Status::Unsupported,
                                  "graph output '%.*s' is also a graph input, an initializer or another output "
                                  "(interface names share one namespace)", clip_length(name), name.data);
            }
        }
        // Node outputs -> (node id, port), before any node is added: nodes may come in any order.
        NodeId base = model->graph.node_count();
        {
            ProtoCursor c(data, size);
            uint32_t index = 0;
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 1) continue;
                ProtoCursor n(f.data, f.size);
                ProtoField g;
                bool more_node = true;
                uint32_t port = 0;
                while (true) {
                    TESSEL_ONNX_TRY(proto_next(r, n, &g, &more_node, "NodeProto"));
                    if (!more_node) break;
                    if (g.number != 2) continue;
                    if (g.size && !tensors.insert(g.string(), base + index, port))
                        return r.fail(Status::DuplicateName, "tensor '%.*s' is produced twice (again by node #%u output %u)",
                                      clip_length(g.string()), (const char*)g.data, index, port);
                    ++port;
                }
                ++index;
            }
        }
        // Nodes.
        {
            InputRef* refs = static_cast<InputRef*>(TESSEL_MALLOC((max_inputs ? max_inputs : 1) * sizeof(InputRef)));
            if (!refs) return out_of_memory("node inputs");
            Status s = add_nodes(data, size, base, refs);
            TESSEL_FREE(refs);
            if (s != Status::Ok) return s;
        }
        // Outputs.
        {
            ProtoCursor c(data, size);
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 12) continue;
                StringView name;
                TensorDesc desc;
                TESSEL_ONNX_TRY(parse_value_info(r, f.data, f.size, "graph output", false, &name, &desc));
                const OnnxNameTable::Entry* e = tensors.find(name);
                if (!e)
                    return r.fail(Status::DanglingInput, "graph output '%.*s' is not produced by any node, input or initializer",
                                  clip_length(name), name.data);
                TESSEL_ONNX_TRY(graph_status(model->add_output(name, InputRef::by_id(e->node, e->port))));
            }
        }
        return Status::Ok;
    }

    Status add_nodes(const uint8_t* data, size_t size, NodeId base, InputRef* refs) {
        ProtoCursor c(data, size);
        ProtoField f;
        bool more = true;
        uint32_t index = 0;
        char node_what[64];
        while (true) {
            TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, "GraphProto"));
            if (!more) break;
            if (f.number != 1) continue;
            std::snprintf(node_what, sizeof node_what, "node #%u", index);
            OnnxNodeInfo info;
            TESSEL_ONNX_TRY(scan_node(r, f.data, f.size, node_what, &info));
            // The node's name: its own unless taken, else <op_type>_<index> made unique.
            char generated[160];
            StringView name = info.name;
            if (name.empty() || names.find(name)) {
                std::snprintf(generated, sizeof generated, "%.*s_%u", clip_length(info.op), info.op.data, index);
                size_t stem = std::strlen(generated);
                for (uint32_t k = 2; names.find(StringView(generated, std::strlen(generated))); ++k)
                    std::snprintf(generated + stem, sizeof generated - stem, "_%u", k);
                name = StringView(generated, std::strlen(generated));
            }
            // Inputs, by id.
            ProtoCursor n(f.data, f.size);
            ProtoField g;
            bool more_node = true;
            size_t k = 0;
            while (k < info.inputs) {
                TESSEL_ONNX_TRY(proto_next(r, n, &g, &more_node, node_what));
                if (!more_node) break;
                if (g.number != 1) continue;
                if (g.size == 0) {
                    refs[k++] = model->absent();
                    continue;
                }
                const OnnxNameTable::Entry* e = tensors.find(g.string());
                if (!e)
                    return r.fail(Status::DanglingInput, "node '%.*s' (%.*s) input %zu reads tensor '%.*s', which no node, input or initializer produces",
                                  clip_length(name), name.data, clip_length(info.op), info.op.data, k, clip_length(g.string()),
                                  (const char*)g.data);
                refs[k++] = InputRef::by_id(e->node, e->port);
            }
            NodeId id = kNoNode;
            TESSEL_ONNX_TRY(graph_status(model->add_node(info.op, name, Span<const InputRef>(refs, info.inputs),
                                                          (uint32_t)info.outputs, &id)));
            TESSEL_ASSERT(id == base + index);
            if (!names.insert(model->graph.node(id).name, id, 0))
                return r.fail(Status::DuplicateName, "node name '%.*s' is used twice", clip_length(name), name.data);
            ProtoCursor a(f.data, f.size);
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, a, &g, &more_node, node_what));
                if (!more_node) break;
                if (g.number == 5) TESSEL_ONNX_TRY(read_attribute(id, model->graph.node(id).name, g.data, g.size));
            }
            ++index;
        }
        return Status::Ok;
    }
};

// ModelProto: ir_version = 1, opset_import = 8 (OperatorSetIdProto: domain = 1, version = 2), graph = 7.
inline Status read_model_proto(Model* model, OnnxReader& r, const uint8_t* data, size_t size, StringView folder) {
    const char* what = "ModelProto";
    ProtoCursor c(data, size);
    ProtoField f;
    bool more = true;
    const uint8_t* graph = nullptr;
    size_t graph_size = 0;
    bool has_graph = false;
    int64_t opset = -1;
    while (true) {
        TESSEL_ONNX_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        switch (f.number) {
        case 1: TESSEL_ONNX_TRY(proto_expect(r, f, kWireVarint, what, "ir_version")); break;
        case 7:
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "graph"));
            graph = f.data;
            graph_size = f.size;
            has_graph = true;
            break;
        case 8: {
            TESSEL_ONNX_TRY(proto_expect(r, f, kWireLength, what, "opset_import"));
            ProtoCursor o(f.data, f.size);
            ProtoField g;
            bool more_opset = true;
            StringView domain;
            int64_t version = 0;
            while (true) {
                TESSEL_ONNX_TRY(proto_next(r, o, &g, &more_opset, "opset_import"));
                if (!more_opset) break;
                if (g.number == 1) { TESSEL_ONNX_TRY(proto_expect(r, g, kWireLength, "opset_import", "domain")); domain = g.string(); }
                if (g.number == 2) { TESSEL_ONNX_TRY(proto_expect(r, g, kWireVarint, "opset_import", "version")); version = (int64_t)g.value; }
            }
            if (domain.empty() || domain == StringView("ai.onnx")) opset = version;
            break;
        }
        default: break;
        }
    }
    if (!has_graph) return r.fail(Status::ParseError, "the model has no graph");
    if (opset < 0) return r.fail(Status::Unsupported, "the model imports no opset of the default domain");
    if (opset < (int64_t)kOnnxMinOpset || opset > (int64_t)kOnnxMaxOpset)
        return r.fail(Status::Unsupported, "opset %lld of the default domain is not supported (%u..%u)", (long long)opset,
                      kOnnxMinOpset, kOnnxMaxOpset);
    OnnxModelReader reader(model, r, folder);
    TESSEL_ONNX_TRY(reader.read_graph(graph, graph_size));
    model->opset = (uint32_t)opset;
    return Status::Ok;
}

// Reads a whole file into a TESSEL_MALLOC buffer (at least one byte, so empty files work).
inline Status read_whole_file(OnnxReader& r, const char* path, void** data, size_t* size) {
    *data = nullptr;
    *size = 0;
    FILE* file = std::fopen(path, "rb");
    if (!file) return r.fail(Status::IoError, "cannot open '%s'", path);
    long length = -1;
    if (std::fseek(file, 0, SEEK_END) == 0) length = std::ftell(file);
    if (length < 0 || std::fseek(file, 0, SEEK_SET) != 0) {
        std::fclose(file);
        return r.fail(Status::IoError, "cannot size '%s'", path);
    }
    if ((uint64_t)length > r.limits.max_file_bytes) {
        std::fclose(file);
        return r.fail(Status::LimitExceeded, "'%s' has %ld bytes (at most %llu)", path, length,
                      (unsigned long long)r.limits.max_file_bytes);
    }
    void* buffer = TESSEL_MALLOC((size_t)length + 1);
    if (!buffer) {
        std::fclose(file);
        return r.fail(Status::OutOfMemory, "out of memory reading '%s' (%ld bytes)", path, length);
    }
    size_t got = std::fread(buffer, 1, (size_t)length, file);
    std::fclose(file);
    if (got != (size_t)length) {
        TESSEL_FREE(buffer);
        return r.fail(Status::IoError, "cannot read '%s'", path);
    }
    *data = buffer;
    *size = (size_t)length;
    return Status::Ok;
}

inline StringView folder_of(const char* path) {
    const char* slash = std::strrchr(path, '/');
    if (!slash) return StringView(".");
    if (slash == path) return StringView("/");
    return StringView(path, (size_t)(slash - path));
}

// The backend test data stores sequence, optional and map values in the same kind of .pb file
// as tensors. Bytes that are not a valid TensorProto but have the exact field layout of one of
// those messages are reported as Unsupported values rather than as malformed tensors.
inline const char* onnx_value_kind(const uint8_t* data, size_t size) {
    // Per message: the wire type each field number 1..7 must have (0xff: no such field).
    static const uint8_t kSequence[8] = {0xff, kWireLength, kWireLength, kWireLength, kWireLength, kWireVarint, kWireLength, kWireLength};
    static const uint8_t kOptional[8] = {0xff, kWireLength, kWireVarint, kWireLength, kWireLength, kWireLength, kWireLength, kWireLength};
    static const uint8_t kMap[8] = {0xff, kWireLength, kWireVarint, 0xfe, kWireLength, kWireLength, 0xff, 0xff};
    static const uint8_t* const kLayouts[3] = {kSequence, kOptional, kMap};
    static const char* const kNames[3] = {"a sequence", "an optional", "a map"};
    for (int k = 0; k < 3; ++k) {
        OnnxReader r;
        r.base = data;
        ProtoCursor c(data, size);
        ProtoField f;
        bool more = true, ok = true;
        while (ok) {
            if (proto_next(r, c, &f, &more, "value") != Status::Ok) { ok = false; break; }
            if (!more) break;
            uint8_t want = f.number < 8 ? kLayouts[k][f.number] : 0xff;
            // 0xfe: a repeated integer, packed or not
            ok = want == 0xfe ? (f.wire == kWireVarint || f.wire == kWireLength) : want == f.wire;
        }
        if (ok) return kNames[k];
    }
    return nullptr;
}

inline Status read_tensor_proto_in(OnnxReader& r, const void* bytes, size_t size, StringView folder, Tensor* tensor,
                                   char* name, size_t name_size) {
    if (name && name_size) name[0] = 0;
    if (!tensor || (!bytes && size)) return r.fail(Status::InvalidArgument, "read_tensor_proto: null argument");
    if ((uint64_t)size > r.limits.max_file_bytes)
        return r.fail(Status::LimitExceeded, "the tensor has %zu bytes (at most %llu)", size,
                      (unsigned long long)r.limits.max_file_bytes);
    r.base = static_cast<const uint8_t*>(bytes);
    TensorInfo info;
    Status parsed = parse_tensor(r, static_cast<const uint8_t*>(bytes), size, "tensor", &info);
    if (parsed != Status::Ok && parsed != Status::Unsupported) {
        const char* kind = onnx_value_kind(static_cast<const uint8_t*>(bytes), size);
        if (kind) return r.fail(Status::Unsupported, "the bytes hold %s value (SequenceProto, OptionalProto or MapProto), not a tensor", kind);
    }
    if (parsed != Status::Ok) return parsed;
    Tensor result;
    Status s = result.allocate(info.desc.type, Span<const int64_t>(info.desc.dims, info.desc.rank));
    if (s != Status::Ok) return r.fail(s, "%s: cannot allocate %zu bytes", info.label, info.bytes);
    TESSEL_ONNX_TRY(fill_tensor(r, info, folder, result.data()));
    *tensor = static_cast<Tensor&&>(result);
    if (name && name_size) {
        size_t n = info.name.size < name_size - 1 ? info.name.size : name_size - 1;
        if (n) std::memcpy(name, info.name.data, n);
        name[n] = 0;
    }
    return Status::Ok;
}

inline size_t put_varint(uint8_t* out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

}  // namespace detail

Status Model::read_onnx(const void* bytes, size_t size, StringView folder) {
    detail::OnnxReader r;
    r.base = static_cast<const uint8_t*>(bytes);
    Status s = Status::Ok;
    if (!bytes && size) s = r.fail(Status::InvalidArgument, "read_onnx: null bytes");
    else if ((uint64_t)size > r.limits.max_file_bytes)
        s = r.fail(Status::LimitExceeded, "the model has %zu bytes (at most %llu)", size,
                   (unsigned long long)r.limits.max_file_bytes);
    else if (graph.node_count() != 0) s = r.fail(Status::InvalidArgument, "read_onnx needs an empty model");
    if (s == Status::Ok) s = detail::read_model_proto(this, r, static_cast<const uint8_t*>(bytes), size, folder);
    if (s != Status::Ok) return graph.fail(s, "%s", r.error);
    s = finalize();
    return s;
}

Status Model::read_onnx_file(const char* path) {
    detail::OnnxReader r;
    if (!path) return graph.fail(Status::InvalidArgument, "read_onnx_file: null path");
    if (file_ || graph.node_count() != 0) return graph.fail(Status::InvalidArgument, "read_onnx_file needs an empty model");
    void* data = nullptr;
    size_t size = 0;
    Status s = detail::read_whole_file(r, path, &data, &size);
    if (s != Status::Ok) return graph.fail(s, "%s", r.error);
    file_ = data;
    return read_onnx(data, size, detail::folder_of(path));
}

Status read_tensor_proto(const void* bytes, size_t size, Tensor* tensor, char* name, size_t name_size) {
    detail::OnnxReader r;
    return detail::read_tensor_proto_in(r, bytes, size, StringView(), tensor, name, name_size);
}

Status read_tensor_file(const char* path, Tensor* tensor) {
    detail::OnnxReader r;
    if (!path || !tensor) return Status::InvalidArgument;
    void* data = nullptr;
    size_t size = 0;
    TESSEL_ONNX_TRY(detail::read_whole_file(r, path, &data, &size));
    Status s = detail::read_tensor_proto_in(r, data, size, detail::folder_of(path), tensor, nullptr, 0);
    TESSEL_FREE(data);
    return s;
}

// TensorProto in raw_data form: dims = 1 (packed), data_type = 2, name = 8, raw_data = 9.
Status write_tensor_proto(const Tensor& tensor, StringView name, WriteFn write, void* user) {
    int32_t code = detail::onnx_type_code(tensor.type());
    if (!write || code == 0 || (!tensor.data() && tensor.elements())) return Status::InvalidArgument;
    uint8_t head[256];
    size_t n = 0;
    uint8_t dims[kMaxRank * 10];
    size_t dims_size = 0;
    for (uint32_t i = 0; i < tensor.rank(); ++i) dims_size += detail::put_varint(dims + dims_size, (uint64_t)tensor.dim(i));
    if (tensor.rank()) {
        head[n++] = (1 << 3) | 2;
        n += detail::put_varint(head + n, dims_size);
        std::memcpy(head + n, dims, dims_size);
        n += dims_size;
    }
    head[n++] = (2 << 3) | 0;
    n += detail::put_varint(head + n, (uint64_t)code);
    if (!name.empty()) {
        head[n++] = (8 << 3) | 2;
        n += detail::put_varint(head + n, name.size);
        write(user, reinterpret_cast<const char*>(head), n);
        write(user, name.data, name.size);
        n = 0;
    }
    size_t esize = element_size(tensor.type());
    size_t bytes = tensor.bytes();
    head[n++] = (9 << 3) | 2;
    n += detail::put_varint(head + n, bytes);
    write(user, reinterpret_cast<const char*>(head), n);
    if (!bytes) return Status::Ok;
    if (tensor.dense()) {
        write(user, static_cast<const char*>(tensor.data()), bytes);
        return Status::Ok;
    }
    // A strided view: element by element in row-major order, through a small buffer.
    char buffer[4096];
    size_t used = 0;
    int64_t index[kMaxRank] = {};
    uint64_t total = tensor.elements();
    for (uint64_t e = 0; e < total; ++e) {
        int64_t offset = 0;
        for (uint32_t i = 0; i < tensor.rank(); ++i) offset += index[i] * tensor.stride(i);
        if (used + esize > sizeof buffer) {
            write(user, buffer, used);
            used = 0;
        }
        std::memcpy(buffer + used, static_cast<const char*>(tensor.data()) + offset * (int64_t)esize, esize);
        used += esize;
        for (int i = (int)tensor.rank() - 1; i >= 0; --i) {
            if (++index[i] < tensor.dim((uint32_t)i)) break;
            index[i] = 0;
        }
    }
    if (used) write(user, buffer, used);
    return Status::Ok;
}

#undef TESSEL_ONNX_TRY
// ---- END ONNX REGION ----

}  // namespace tessel

#endif  // TESSEL_RUNTIME_IMPLEMENTATION
