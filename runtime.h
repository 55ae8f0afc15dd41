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
// ---- END ONNX REGION ----

}  // namespace tessel

#endif  // TESSEL_RUNTIME_IMPLEMENTATION
