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

// ---- shared helpers of the nn kernels

// Runs f(slot, begin, end) over [0, units) split into at most `threads` slots (and at most
// max_slots: the scratch prepare sized); a slot owns scratch slice `slot`, so the split is
// done here (by slot) and not by the pool.
template <class F>
void nn_parallel(const RunContext& c, uint64_t units, F&& f, uint64_t max_slots = ~0ull) {
    uint64_t slots = c.threads ? c.threads : 1;
    if (slots > max_slots) slots = max_slots;
    if (slots > units) slots = units;
    if (!slots) return;
    struct Job { F* f; uint64_t units, slots; } job{&f, units, slots};
    void (*body)(void*, uint64_t, uint64_t) = [](void* user, uint64_t begin, uint64_t end) {
        const Job& j = *static_cast<const Job*>(user);
        for (uint64_t s = begin; s < end; ++s) (*j.f)(s, s * j.units / j.slots, (s + 1) * j.units / j.slots);
    };
    // Switch to c.parallel_for(slots, body, &job) once RunContext::parallel_for is defined.
    body(&job, 0, slots);
}

template <class T>
T* nn_state(PrepareContext& c) {
    T* s = c.arena->allocate_array<T>(1);
    if (s) *s = T();
    c.state = s;
    return s;
}

inline int64_t nn_product(const TensorDesc& d, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; ++i) n *= d.dims[i];
    return n;
}

inline Status nn_count(PrepareContext& c, uint32_t min_in, uint32_t max_in, uint32_t max_out) {
    if (c.num_inputs < min_in || c.num_inputs > max_in)
        return c.fail(Status::InvalidArgument, "expects %u to %u inputs, has %u", min_in, max_in, c.num_inputs);
    if (c.num_outputs < 1 || c.num_outputs > max_out)
        return c.fail(Status::InvalidArgument, "expects 1 to %u outputs, has %u", max_out, c.num_outputs);
    return Status::Ok;
}

// A float32 input with known dims. An absent optional input is Ok.
inline Status nn_float(PrepareContext& c, uint32_t i, bool optional = false) {
    if (!c.has_input(i))
        return optional ? Status::Ok : c.fail(Status::InvalidArgument, "input %u is missing", i);
    if (c.inputs[i].type != ElementType::Float32)
        return c.fail(Status::Unsupported, "input %u is %s (float32 expected)", i, element_type_name(c.inputs[i].type));
    for (int d = 0; d < c.inputs[i].rank; ++d)
        if (c.inputs[i].dims[d] < 0) return c.fail(Status::Unsupported, "input %u has an unknown dimension", i);
    return Status::Ok;
}

// NumPy broadcast of two shapes, right-aligned. The nn ops keep their own copy: another caller
// of the shared broadcast_descs changes how GCC inlines it into prepare_elementwise, whose
// partly filled descs[] array then trips -Wmaybe-uninitialized at -O2.
inline bool nn_broadcast(const TensorDesc& a, const TensorDesc& b, TensorDesc* out) {
    TensorDesc r = a.rank >= b.rank ? a : b;
    for (int i = 0; i < r.rank; ++i) {
        int ja = a.rank - r.rank + i, jb = b.rank - r.rank + i;
        int64_t da = ja >= 0 ? a.dims[ja] : 1, db = jb >= 0 ? b.dims[jb] : 1;
        if (da != db && da != 1 && db != 1) return false;
        r.dims[i] = da == 1 ? db : da;
    }
    *out = r;
    return true;
}

inline bool nn_axis(int64_t axis, int rank, int* out) {
    if (axis < -rank || axis >= rank) return false;
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

// A 1-D int64 input known at compile time (axes); count 0 when absent or empty.
inline Status nn_int64_values(PrepareContext& c, uint32_t i, const int64_t** data, int64_t* count) {
    *data = nullptr;
    *count = 0;
    if (!c.has_input(i)) return Status::Ok;
    if (c.inputs[i].type != ElementType::Int64 || c.inputs[i].rank != 1)
        return c.fail(Status::InvalidArgument, "input %u must be a 1-D int64 tensor", i);
    *count = c.inputs[i].dims[0];
    if (*count == 0) return Status::Ok;
    if (!c.values || !c.values[i]) return c.fail(Status::Unsupported, "data-dependent shape: input %u is not a constant", i);
    *data = static_cast<const int64_t*>(c.values[i]);
    return Status::Ok;
}

// ---- blocked GEMM: C[m x n] (+)= A[m x k] B[k x n]. A is read through (row, column) strides, so
// a transposed A costs nothing: the micro-kernel broadcasts 4 scalars of A per step and
// vectorizes along 16 contiguous columns of B and C (kept in registers across the k block).
// A 128 x 256 panel of B (128 KiB) stays in L2 while every row block of A passes over it.
constexpr int64_t kGemmRows = 4, kGemmCols = 16, kGemmDepth = 128, kGemmWidth = 256;

inline void gemm_tile(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t a_row, int64_t a_col,
                      const float* b, int64_t ldb, float* c, int64_t ldc, bool add) {
    float acc[kGemmRows][kGemmCols] = {};
    if (rows == kGemmRows && cols == kGemmCols) {  // the hot path: fixed trip counts vectorize
        for (int64_t p = 0; p < depth; ++p) {
            const float* br = b + p * ldb;
            float a0 = a[p * a_col], a1 = a[a_row + p * a_col], a2 = a[2 * a_row + p * a_col], a3 = a[3 * a_row + p * a_col];
            for (int j = 0; j < kGemmCols; ++j) {
                acc[0][j] += a0 * br[j];
                acc[1][j] += a1 * br[j];
                acc[2][j] += a2 * br[j];
                acc[3][j] += a3 * br[j];
            }
        }
    } else {
        for (int64_t p = 0; p < depth; ++p) {
            const float* br = b + p * ldb;
            for (int64_t r = 0; r < rows; ++r) {
                float ar = a[r * a_row + p * a_col];
                for (int64_t j = 0; j < cols; ++j) acc[r][j] += ar * br[j];
            }
        }
    }
    for (int64_t r = 0; r < rows; ++r) {
        float* cr = c + r * ldc;
        if (add) for (int64_t j = 0; j < cols; ++j) cr[j] += acc[r][j];
        else for (int64_t j = 0; j < cols; ++j) cr[j] = acc[r][j];
    }
}

// accumulate false: C is overwritten (no need to clear it first).
inline void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    if (k == 0 && !accumulate)
        for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, (size_t)n * sizeof(float));
    for (int64_t k0 = 0; k0 < k; k0 += kGemmDepth) {
        int64_t depth = k - k0 < kGemmDepth ? k - k0 : kGemmDepth;
        bool add = accumulate || k0 > 0;
        for (int64_t j1 = 0; j1 < n; j1 += kGemmWidth) {
            int64_t j1_end = n - j1 < kGemmWidth ? n : j1 + kGemmWidth;
            for (int64_t i0 = 0; i0 < m; i0 += kGemmRows) {
                int64_t rows = m - i0 < kGemmRows ? m - i0 : kGemmRows;
                for (int64_t j0 = j1; j0 < j1_end; j0 += kGemmCols) {
                    int64_t cols = j1_end - j0 < kGemmCols ? j1_end - j0 : kGemmCols;
                    gemm_tile(rows, cols, depth, a + i0 * a_row + k0 * a_col, a_row, a_col, b + k0 * ldb + j0, ldb,
                              c + i0 * ldc + j0, ldc, add);
                }
            }
        }
    }
}

// C[m x n] = A[m x k] Bt[n x k]^T by dot products along contiguous rows. For a few rows of A
// (a fully connected layer at batch 1, a matrix-vector product) this streams B once instead of
// packing it. Eight independent partial sums let the compiler vectorize without reassociating.
inline void gemm_dot(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* bt, int64_t ldbt,
                     float* c, int64_t ldc) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const float *x = a + i * lda, *y = bt + j * ldbt;
            float part[8] = {};
            int64_t body = k / 8 * 8;
            for (int64_t p = 0; p < body; p += 8)
                for (int l = 0; l < 8; ++l) part[l] += x[p + l] * y[p + l];
            float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
            for (int64_t p = body; p < k; ++p) sum += x[p] * y[p];
            c[i * ldc + j] = sum;
        }
}

// ---- window geometry of Conv, ConvTranspose and the pools: always 3 spatial dims, real ones
// last (a 2-D op has a leading dim of size 1), so one loop nest serves 1-D, 2-D and 3-D.
constexpr int64_t kMaxWindow = 1 << 24;

struct Window {
    int spatial = 0;                       // real spatial dims (1..3)
    int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
    int64_t in_size() const { return in[0] * in[1] * in[2]; }
    int64_t out_size() const { return out[0] * out[1] * out[2]; }
    int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
};

// Reads strides, dilations, pads and auto_pad for a window over x's spatial dims (from dim 2).
// transpose: ConvTranspose (pads kept as given, output dims computed by the caller).
inline Status parse_window(PrepareContext& c, const TensorDesc& x, const int64_t* kernel, bool ceil_mode,
                           bool transpose, Window* w) {
    int n = x.rank - 2;
    if (n < 1 || n > 3) return c.fail(Status::Unsupported, "%d spatial dims (1 to 3 supported)", n);
    Span<const int64_t> strides = c.attribute_ints("strides"), dilations = c.attribute_ints("dilations"),
                        pads = c.attribute_ints("pads");
    if ((!strides.empty() && strides.size != (size_t)n) || (!dilations.empty() && dilations.size != (size_t)n) ||
        (!pads.empty() && pads.size != (size_t)(2 * n)))
        return c.fail(Status::InvalidArgument, "strides, dilations or pads do not match %d spatial dims", n);
    StringView auto_pad = c.attribute_string("auto_pad", "NOTSET");
    bool same_upper = auto_pad == StringView("SAME_UPPER"), same_lower = auto_pad == StringView("SAME_LOWER");
    bool valid = auto_pad == StringView("VALID");
    if (!same_upper && !same_lower && !valid && auto_pad != StringView("NOTSET"))
        return c.fail(Status::InvalidArgument, "auto_pad '%.*s' unknown", (int)auto_pad.size, auto_pad.data);
    w->spatial = n;
    for (int i = 0; i < 3; ++i) {
        int j = i - (3 - n);  // index among the real spatial dims, negative for padding dims
        w->in[i] = j < 0 ? 1 : x.dims[2 + j];
        w->kernel[i] = j < 0 ? 1 : kernel[j];
        w->stride[i] = j < 0 || strides.empty() ? 1 : strides[j];
        w->dilation[i] = j < 0 || dilations.empty() ? 1 : dilations[j];
        w->pad_begin[i] = j < 0 || pads.empty() ? 0 : pads[j];
        w->pad_end[i] = j < 0 || pads.empty() ? 0 : pads[n + j];
        if (w->kernel[i] < 1 || w->stride[i] < 1 || w->dilation[i] < 1)
            return c.fail(Status::InvalidArgument, "kernel, strides and dilations must be positive");
        if (w->pad_begin[i] < 0 || w->pad_end[i] < 0) return c.fail(Status::InvalidArgument, "pads must not be negative");
        // bounded so that no window arithmetic below can overflow
        if (w->kernel[i] > kMaxWindow || w->stride[i] > kMaxWindow || w->dilation[i] > kMaxWindow ||
            w->pad_begin[i] > kMaxWindow || w->pad_end[i] > kMaxWindow || w->in[i] > kMaxWindow)
            return c.fail(Status::InvalidArgument, "kernel, strides, dilations, pads or dims above 2^24");
        w->out[i] = w->in[i];   // ConvTranspose computes the real dims itself
        if (transpose) continue;
        int64_t extent = (w->kernel[i] - 1) * w->dilation[i] + 1;
        if (valid) {
            w->pad_begin[i] = w->pad_end[i] = 0;
        } else if (same_upper || same_lower) {
            int64_t out = (w->in[i] + w->stride[i] - 1) / w->stride[i];
            int64_t total = (out - 1) * w->stride[i] + extent - w->in[i];
            if (total < 0) total = 0;
            w->pad_begin[i] = same_upper ? total / 2 : total - total / 2;
            w->pad_end[i] = total - w->pad_begin[i];
        }
        int64_t span = w->in[i] + w->pad_begin[i] + w->pad_end[i] - extent;
        if (span < 0) return c.fail(Status::InvalidArgument, "the window is larger than the padded input");
        w->out[i] = (ceil_mode ? span + w->stride[i] - 1 : span) / w->stride[i] + 1;
        // ceil_mode: the last window must start inside the input or its left padding
        if (ceil_mode && (w->out[i] - 1) * w->stride[i] >= w->in[i] + w->pad_begin[i]) --w->out[i];
    }
    return Status::Ok;
}

}  // namespace detail

namespace detail {

// ---- Conv: per (image, group, block of output positions) an im2col block in the slot's
// scratch, then the blocked GEMM (weights [Mg x Cg*K] times columns [Cg*K x block]). A 1x1
// stride-1 unpadded conv reads its input as the column matrix directly. Depthwise convs (one
// input channel and fewer than 4 maps per group: too few GEMM rows) run a direct loop instead.
struct ConvState {
    Window w;
    int64_t batch, channels, maps, groups, group_channels, group_maps, depth, block;
    uint32_t slots;   // scratch slices prepared (threads at compile time)
    bool direct, depthwise;
};

inline Status prepare_conv(PrepareContext& c) {
    Status s = nn_count(c, 2, 3, 1);
    for (uint32_t i = 0; i < 3 && s == Status::Ok; ++i) s = nn_float(c, i, i == 2);
    if (s != Status::Ok) return s;
    const TensorDesc &x = c.inputs[0], &wd = c.inputs[1];
    if (x.rank < 3 || wd.rank != x.rank)
        return c.fail(Status::InvalidArgument, "X (rank %d) and W (rank %d) must be N x C x spatial", x.rank, wd.rank);
    int64_t groups = c.attribute_int("group", 1);
    if (groups < 1) return c.fail(Status::InvalidArgument, "group must be positive, is %lld", (long long)groups);
    int64_t maps = wd.dims[0];
    if (x.dims[1] != wd.dims[1] * groups || maps % groups != 0)
        return c.fail(Status::InvalidArgument, "channels %lld, W %lld x %lld and group %lld do not match",
                      (long long)x.dims[1], (long long)maps, (long long)wd.dims[1], (long long)groups);
    Span<const int64_t> ks = c.attribute_ints("kernel_shape");
    for (size_t i = 0; i < ks.size; ++i)
        if (ks.size != (size_t)x.rank - 2 || ks[i] != wd.dims[2 + i])
            return c.fail(Status::InvalidArgument, "kernel_shape does not match W");
    if (c.has_input(2) && (c.inputs[2].rank != 1 || c.inputs[2].dims[0] != maps))
        return c.fail(Status::InvalidArgument, "bias must have %lld elements", (long long)maps);
    ConvState* st = nn_state<ConvState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    s = parse_window(c, x, wd.dims + 2, false, false, &st->w);
    if (s != Status::Ok) return s;
    const Window& w = st->w;
    st->batch = x.dims[0];
    st->channels = x.dims[1];
    st->maps = maps;
    st->groups = groups;
    st->group_channels = wd.dims[1];
    st->group_maps = maps / groups;
    st->depth = st->group_channels * w.kernel_size();
    int64_t positions = w.out_size();
    st->block = positions <= 384 ? positions : 256;
    st->direct = w.kernel_size() == 1;
    for (int i = 0; i < 3; ++i)
        st->direct = st->direct && w.stride[i] == 1 && w.pad_begin[i] == 0 && w.pad_end[i] == 0;
    TensorDesc& y = c.outputs[0];
    y = x;
    y.dims[1] = maps;
    for (int i = 0; i < w.spatial; ++i) y.dims[2 + i] = w.out[3 - w.spatial + i];
    st->depthwise = st->group_channels == 1 && st->group_maps < 4 && !st->direct;
    st->slots = c.threads ? c.threads : 1;
    if (!st->direct && !st->depthwise)
        c.scratch_bytes = (size_t)st->slots * (size_t)((st->depth * st->block + 15) & ~15) * sizeof(float);
    return Status::Ok;
}

// Columns [p0, p0 + count) of the im2col matrix of one group's input planes x.
inline void im2col(const Window& w, int64_t channels, const float* x, int64_t p0, int64_t count, float* col) {
    int64_t plane = w.in_size();
    float* dst = col;
    for (int64_t ci = 0; ci < channels; ++ci)
        for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0)
            for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1)
                for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
                    const float* xc = x + ci * plane;
                    for (int64_t q = 0; q < count;) {  // one run per output row (fixed o0, o1)
                        int64_t p = p0 + q, o2 = p % w.out[2], o1 = p / w.out[2] % w.out[1], o0 = p / w.out[2] / w.out[1];
                        int64_t run = w.out[2] - o2 < count - q ? w.out[2] - o2 : count - q;
                        int64_t i0 = o0 * w.stride[0] - w.pad_begin[0] + k0 * w.dilation[0];
                        int64_t i1 = o1 * w.stride[1] - w.pad_begin[1] + k1 * w.dilation[1];
                        if (i0 < 0 || i0 >= w.in[0] || i1 < 0 || i1 >= w.in[1]) {
                            std::memset(dst + q, 0, (size_t)run * sizeof(float));
                        } else {
                            const float* row = xc + (i0 * w.in[1] + i1) * w.in[2];
                            int64_t i2 = o2 * w.stride[2] - w.pad_begin[2] + k2 * w.dilation[2];
                            for (int64_t t = 0; t < run; ++t, i2 += w.stride[2])
                                dst[q + t] = i2 >= 0 && i2 < w.in[2] ? row[i2] : 0.0f;
                        }
                        q += run;
                    }
                    dst += count;
                }
}

// One output map of a depthwise conv: tap by tap, each output row gets weight * a strided run
// of one input row (contiguous for stride 1, so the inner loop vectorizes).
inline void depthwise_map(const Window& w, const float* x, const float* weights, float* y) {
    for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0)
        for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
                float wv = weights[(k0 * w.kernel[1] + k1) * w.kernel[2] + k2];
                int64_t base = k2 * w.dilation[2] - w.pad_begin[2], s = w.stride[2];
                // the o2 whose input column o2 * s + base lies in [0, in[2])
                int64_t lo = base >= 0 ? 0 : (-base + s - 1) / s;
                int64_t hi = w.in[2] - 1 - base < 0 ? 0 : (w.in[2] - 1 - base) / s + 1;
                if (hi > w.out[2]) hi = w.out[2];
                for (int64_t o0 = 0; o0 < w.out[0]; ++o0) {
                    int64_t i0 = o0 * w.stride[0] - w.pad_begin[0] + k0 * w.dilation[0];
                    if (i0 < 0 || i0 >= w.in[0]) continue;
                    for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
                        int64_t i1 = o1 * w.stride[1] - w.pad_begin[1] + k1 * w.dilation[1];
                        if (i1 < 0 || i1 >= w.in[1]) continue;
                        const float* row = x + (i0 * w.in[1] + i1) * w.in[2] + base;
                        float* out = y + (o0 * w.out[1] + o1) * w.out[2];
                        if (s == 1) for (int64_t o2 = lo; o2 < hi; ++o2) out[o2] += wv * row[o2];
                        else for (int64_t o2 = lo; o2 < hi; ++o2) out[o2] += wv * row[o2 * s];
                    }
                }
            }
}

inline Status run_conv(const RunContext& c) {
    const ConvState& st = *static_cast<const ConvState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const float* weights = c.inputs[1].as<float>();
    const float* bias = c.num_inputs > 2 ? c.inputs[2].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    int64_t in_plane = st.w.in_size(), positions = st.w.out_size();
    if (positions == 0) return Status::Ok;
    if (st.depthwise) {
        int64_t kernel = st.w.kernel_size();
        nn_parallel(c, (uint64_t)(st.batch * st.maps), [&](uint64_t, uint64_t begin, uint64_t end) {
            for (uint64_t unit = begin; unit < end; ++unit) {
                int64_t m = (int64_t)unit % st.maps, n = (int64_t)unit / st.maps;
                float* ym = y + (int64_t)unit * positions;
                for (int64_t j = 0; j < positions; ++j) ym[j] = bias ? bias[m] : 0.0f;
                depthwise_map(st.w, x + (n * st.channels + m / st.group_maps) * in_plane, weights + m * kernel, ym);
            }
        });
        return Status::Ok;
    }
    int64_t blocks = (positions + st.block - 1) / st.block;
    size_t slot_floats = (size_t)((st.depth * st.block + 15) & ~15);
    nn_parallel(c, (uint64_t)(st.batch * st.groups * blocks), [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* col = static_cast<float*>(c.scratch) + slot * slot_floats;
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t blk = (int64_t)unit % blocks, g = (int64_t)unit / blocks % st.groups;
            int64_t n = (int64_t)unit / blocks / st.groups;
            int64_t p0 = blk * st.block, count = positions - p0 < st.block ? positions - p0 : st.block;
            const float* xg = x + (n * st.channels + g * st.group_channels) * in_plane;
            const float* b = xg + p0;
            int64_t ldb = positions;
            if (!st.direct) {
                im2col(st.w, st.group_channels, xg, p0, count, col);
                b = col;
                ldb = count;
            }
            float* yg = y + (n * st.maps + g * st.group_maps) * positions + p0;
            gemm(st.group_maps, count, st.depth, weights + g * st.group_maps * st.depth, st.depth, 1, b, ldb, yg,
                 positions, false);
            if (bias)
                for (int64_t m = 0; m < st.group_maps; ++m) {
                    float bm = bias[g * st.group_maps + m];
                    for (int64_t j = 0; j < count; ++j) yg[m * positions + j] += bm;
                }
        }
    }, st.slots);
    return Status::Ok;
}

// ---- ConvTranspose: per (image, group), blocks of input positions go through the GEMM
// W^T [Mg*K x Cg] times X [Cg x block] into the slot's scratch, then scatter-add (col2im).
struct ConvTransposeState {
    Window w;   // in: X's spatial dims, out: Y's
    int64_t batch, channels, maps, groups, group_channels, group_maps, rows, block;
    uint32_t slots;
};

inline Status prepare_conv_transpose(PrepareContext& c) {
    Status s = nn_count(c, 2, 3, 1);
    for (uint32_t i = 0; i < 3 && s == Status::Ok; ++i) s = nn_float(c, i, i == 2);
    if (s != Status::Ok) return s;
    const TensorDesc &x = c.inputs[0], &wd = c.inputs[1];
    if (x.rank < 3 || wd.rank != x.rank)
        return c.fail(Status::InvalidArgument, "X (rank %d) and W (rank %d) must be N x C x spatial", x.rank, wd.rank);
    int64_t groups = c.attribute_int("group", 1);
    if (groups < 1) return c.fail(Status::InvalidArgument, "group must be positive, is %lld", (long long)groups);
    if (x.dims[1] != wd.dims[0] || wd.dims[0] % groups != 0)
        return c.fail(Status::InvalidArgument, "channels %lld, W %lld and group %lld do not match", (long long)x.dims[1],
                      (long long)wd.dims[0], (long long)groups);
    int64_t maps = wd.dims[1] * groups;
    if (c.has_input(2) && (c.inputs[2].rank != 1 || c.inputs[2].dims[0] != maps))
        return c.fail(Status::InvalidArgument, "bias must have %lld elements", (long long)maps);
    ConvTransposeState* st = nn_state<ConvTransposeState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    s = parse_window(c, x, wd.dims + 2, false, true, &st->w);
    if (s != Status::Ok) return s;
    Window& w = st->w;
    int n = w.spatial;
    Span<const int64_t> output_padding = c.attribute_ints("output_padding");
    Span<const int64_t> output_shape = c.attribute_ints("output_shape");
    if (!output_padding.empty() && output_padding.size != (size_t)n)
        return c.fail(Status::InvalidArgument, "output_padding does not match %d spatial dims", n);
    if (!output_shape.empty() && output_shape.size != (size_t)n && output_shape.size != (size_t)n + 2)
        return c.fail(Status::InvalidArgument, "output_shape does not match %d spatial dims", n);
    StringView auto_pad = c.attribute_string("auto_pad", "NOTSET");
    bool same = auto_pad == StringView("SAME_UPPER") || auto_pad == StringView("SAME_LOWER");
    for (int i = 3 - n; i < 3; ++i) {
        int j = i - (3 - n);
        int64_t extra = output_padding.empty() ? 0 : output_padding[j];
        if (extra < 0 || (extra >= w.stride[i] && extra >= w.dilation[i]))
            return c.fail(Status::InvalidArgument, "output_padding must be below the stride or dilation");
        int64_t full = w.stride[i] * (w.in[i] - 1) + extra + (w.kernel[i] - 1) * w.dilation[i] + 1;
        int64_t target = -1;
        if (!output_shape.empty()) target = output_shape[output_shape.size - (size_t)n + (size_t)j];
        else if (same) target = w.in[i] * w.stride[i];
        if (!output_shape.empty() && (target < 0 || target > kMaxWindow))
            return c.fail(Status::InvalidArgument, "output_shape must be in [0, 2^24]");
        if (auto_pad == StringView("VALID")) w.pad_begin[i] = w.pad_end[i] = 0;
        if (target >= 0) {
            // The spec's split of the total padding, with Python's floor division: a larger
            // output_shape gives a negative pad, i.e. extra positions only the bias reaches.
            int64_t total = full - target, half = total >= 0 ? total / 2 : -((1 - total) / 2);
            bool upper = auto_pad == StringView("SAME_UPPER");
            w.pad_begin[i] = upper ? half : total - half;
            w.pad_end[i] = total - w.pad_begin[i];
        }
        w.out[i] = full - w.pad_begin[i] - w.pad_end[i];
        if (w.out[i] < 0) return c.fail(Status::InvalidArgument, "pads are larger than the output");
    }
    st->batch = x.dims[0];
    st->channels = x.dims[1];
    st->maps = maps;
    st->groups = groups;
    st->group_channels = x.dims[1] / groups;
    st->group_maps = wd.dims[1];
    st->rows = st->group_maps * w.kernel_size();
    int64_t positions = w.in_size();
    st->block = positions <= 256 ? positions : 256;
    TensorDesc& y = c.outputs[0];
    y = x;
    y.dims[1] = maps;
    for (int i = 0; i < n; ++i) y.dims[2 + i] = w.out[3 - n + i];
    st->slots = c.threads ? c.threads : 1;
    c.scratch_bytes = (size_t)st->slots * (size_t)((st->rows * st->block + 15) & ~15) * sizeof(float);
    return Status::Ok;
}

inline Status run_conv_transpose(const RunContext& c) {
    const ConvTransposeState& st = *static_cast<const ConvTransposeState*>(c.state);
    const Window& w = st.w;
    const float* x = c.inputs[0].as<float>();
    const float* weights = c.inputs[1].as<float>();
    const float* bias = c.num_inputs > 2 ? c.inputs[2].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    int64_t in_plane = w.in_size(), out_plane = w.out_size(), kernel = w.kernel_size();
    size_t slot_floats = (size_t)((st.rows * st.block + 15) & ~15);
    nn_parallel(c, (uint64_t)(st.batch * st.groups), [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* col = static_cast<float*>(c.scratch) + slot * slot_floats;
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t g = (int64_t)unit % st.groups, n = (int64_t)unit / st.groups;
            const float* xg = x + (n * st.channels + g * st.group_channels) * in_plane;
            float* yg = y + (n * st.maps + g * st.group_maps) * out_plane;
            for (int64_t m = 0; m < st.group_maps; ++m)
                for (int64_t j = 0; j < out_plane; ++j) yg[m * out_plane + j] = bias ? bias[g * st.group_maps + m] : 0.0f;
            for (int64_t p0 = 0; p0 < in_plane; p0 += st.block) {
                int64_t count = in_plane - p0 < st.block ? in_plane - p0 : st.block;
                // W is [C, Mg*K] per group: its transpose is read with strides (1, Mg*K)
                gemm(st.rows, count, st.group_channels, weights + g * st.group_channels * st.rows, 1, st.rows, xg + p0,
                     in_plane, col, count, false);
                for (int64_t r = 0; r < st.rows; ++r) {
                    int64_t k2 = r % w.kernel[2], k1 = r / w.kernel[2] % w.kernel[1];
                    int64_t k0 = r / w.kernel[2] / w.kernel[1] % w.kernel[0], m = r / kernel;
                    float* ym = yg + m * out_plane;
                    const float* src = col + r * count;
                    for (int64_t q = 0; q < count; ++q) {
                        int64_t p = p0 + q, i2 = p % w.in[2], i1 = p / w.in[2] % w.in[1], i0 = p / w.in[2] / w.in[1];
                        int64_t o0 = i0 * w.stride[0] - w.pad_begin[0] + k0 * w.dilation[0];
                        int64_t o1 = i1 * w.stride[1] - w.pad_begin[1] + k1 * w.dilation[1];
                        int64_t o2 = i2 * w.stride[2] - w.pad_begin[2] + k2 * w.dilation[2];
                        if (o0 >= 0 && o0 < w.out[0] && o1 >= 0 && o1 < w.out[1] && o2 >= 0 && o2 < w.out[2])
                            ym[(o0 * w.out[1] + o1) * w.out[2] + o2] += src[q];
                    }
                }
            }
        }
    }, st.slots);
    return Status::Ok;
}

// ---- MatMul: NumPy matmul (1-D operands promoted and their unit dim dropped, batch dims
// broadcast). Work units are (batch, block of 16 rows).
struct MatMulState {
    int64_t m, n, k, batch;
    int batch_rank;
    int64_t batch_dims[kMaxRank], a_stride[kMaxRank], b_stride[kMaxRank];  // per batch dim, in elements
};

inline Status prepare_matmul(PrepareContext& c) {
    Status s = nn_count(c, 2, 2, 1);
    for (uint32_t i = 0; i < 2 && s == Status::Ok; ++i) s = nn_float(c, i);
    if (s != Status::Ok) return s;
    TensorDesc a = c.inputs[0], b = c.inputs[1];
    if (a.rank < 1 || b.rank < 1) return c.fail(Status::InvalidArgument, "operands must have rank 1 or more");
    bool a_vector = a.rank == 1, b_vector = b.rank == 1;
    if (a_vector) { a.rank = 2; a.dims[1] = a.dims[0]; a.dims[0] = 1; }
    if (b_vector) { b.rank = 2; b.dims[1] = 1; }
    MatMulState* st = nn_state<MatMulState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->m = a.dims[a.rank - 2];
    st->k = a.dims[a.rank - 1];
    st->n = b.dims[b.rank - 1];
    if (b.dims[b.rank - 2] != st->k)
        return c.fail(Status::InvalidArgument, "inner dims differ: %lld and %lld", (long long)st->k,
                      (long long)b.dims[b.rank - 2]);
    TensorDesc ab = a, bb = b, out;
    ab.rank -= 2;
    bb.rank -= 2;
    if (!nn_broadcast(ab, bb, &out)) return c.fail(Status::InvalidArgument, "batch dims do not broadcast");
    st->batch_rank = out.rank;
    st->batch = 1;
    broadcast_strides(ab, out, st->a_stride);
    broadcast_strides(bb, out, st->b_stride);
    for (int i = 0; i < out.rank; ++i) {
        st->batch_dims[i] = out.dims[i];
        st->batch *= out.dims[i];
        st->a_stride[i] *= st->m * st->k;
        st->b_stride[i] *= st->k * st->n;
    }
    TensorDesc& y = c.outputs[0];
    y = out;
    y.type = ElementType::Float32;
    if (!a_vector) y.dims[y.rank++] = st->m;
    if (!b_vector) y.dims[y.rank++] = st->n;
    return Status::Ok;
}

inline Status run_matmul(const RunContext& c) {
    const MatMulState& st = *static_cast<const MatMulState*>(c.state);
    const float* a = c.inputs[0].as<float>();
    const float* b = c.inputs[1].as<float>();
    float* y = c.outputs[0].as<float>();
    int64_t row_blocks = (st.m + 15) / 16;
    nn_parallel(c, (uint64_t)(st.batch * row_blocks), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t index = (int64_t)unit / row_blocks, r0 = (int64_t)unit % row_blocks * 16;
            int64_t a_offset = 0, b_offset = 0;
            for (int i = st.batch_rank - 1; i >= 0; --i) {  // batch index to operand offsets
                int64_t digit = index % st.batch_dims[i];
                index /= st.batch_dims[i];
                a_offset += digit * st.a_stride[i];
                b_offset += digit * st.b_stride[i];
            }
            int64_t batch = (int64_t)unit / row_blocks;
            int64_t rows = st.m - r0 < 16 ? st.m - r0 : 16;
            if (st.n == 1)  // matrix times vector: B is one contiguous row of k
                gemm_dot(rows, 1, st.k, a + a_offset + r0 * st.k, st.k, b + b_offset, st.k, y + batch * st.m + r0, 1);
            else
                gemm(rows, st.n, st.k, a + a_offset + r0 * st.k, st.k, 1, b + b_offset, st.n,
                     y + (batch * st.m + r0) * st.n, st.n, false);
        }
    });
    return Status::Ok;
}

// ---- Gemm: Y = alpha A' B' + beta C. A transposed is read through strides; B transposed is
// packed into scratch first (the GEMM vectorizes along B's rows), except for fewer than 8 rows
// of A: then dot products over B's rows (blocks of 64 columns per work unit).
struct GemmState {
    int64_t m, n, k;
    float alpha, beta;
    bool trans_a, trans_b, has_c, dot;
    int64_t c_row, c_col;   // C's strides broadcast to [m, n]
};

inline Status prepare_gemm(PrepareContext& c) {
    Status s = nn_count(c, 2, 3, 1);
    for (uint32_t i = 0; i < 3 && s == Status::Ok; ++i) s = nn_float(c, i, i == 2);
    if (s != Status::Ok) return s;
    const TensorDesc &a = c.inputs[0], &b = c.inputs[1];
    if (a.rank != 2 || b.rank != 2) return c.fail(Status::InvalidArgument, "A and B must be 2-D");
    if (!c.has_input(2) && c.opset < 11) return c.fail(Status::InvalidArgument, "C is required before opset 11");
    GemmState* st = nn_state<GemmState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->trans_a = c.attribute_int("transA", 0) != 0;
    st->trans_b = c.attribute_int("transB", 0) != 0;
    st->alpha = c.attribute_float("alpha", 1.0f);
    st->beta = c.attribute_float("beta", 1.0f);
    st->m = a.dims[st->trans_a ? 1 : 0];
    st->k = a.dims[st->trans_a ? 0 : 1];
    st->n = b.dims[st->trans_b ? 0 : 1];
    if (b.dims[st->trans_b ? 1 : 0] != st->k) return c.fail(Status::InvalidArgument, "inner dims of A and B differ");
    TensorDesc& y = c.outputs[0];
    y = a;
    y.dims[0] = st->m;
    y.dims[1] = st->n;
    st->has_c = c.has_input(2);
    if (st->has_c) {  // unidirectional broadcast of C to [m, n]
        const TensorDesc& cd = c.inputs[2];
        TensorDesc joined;
        if (cd.rank > 2 || !nn_broadcast(cd, y, &joined) || joined.dims[0] != st->m || joined.dims[1] != st->n)
            return c.fail(Status::InvalidArgument, "C does not broadcast to %lld x %lld", (long long)st->m, (long long)st->n);
        int64_t strides[kMaxRank];
        broadcast_strides(cd, y, strides);
        st->c_row = strides[0];
        st->c_col = strides[1];
    }
    st->dot = st->trans_b && !st->trans_a && st->m < 8;
    if (st->trans_b && !st->dot) c.scratch_bytes = (size_t)(st->k * st->n) * sizeof(float);
    return Status::Ok;
}

inline Status run_gemm(const RunContext& c) {
    const GemmState& st = *static_cast<const GemmState*>(c.state);
    const float* a = c.inputs[0].as<float>();
    const float* b = c.inputs[1].as<float>();
    const float* bias = st.has_c ? c.inputs[2].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    auto finish = [&](int64_t i0, int64_t rows, int64_t j0, int64_t cols) {  // alpha, then beta C
        for (int64_t i = i0; i < i0 + rows; ++i)
            for (int64_t j = j0; j < j0 + cols; ++j) {
                float v = st.alpha * y[i * st.n + j];
                if (bias) v += st.beta * bias[i * st.c_row + j * st.c_col];
                y[i * st.n + j] = v;
            }
    };
    if (st.dot) {
        nn_parallel(c, (uint64_t)((st.n + 63) / 64), [&](uint64_t, uint64_t begin, uint64_t end) {
            for (int64_t j0 = (int64_t)begin * 64; j0 < (int64_t)end * 64 && j0 < st.n; j0 += 64) {
                int64_t cols = st.n - j0 < 64 ? st.n - j0 : 64;
                gemm_dot(st.m, cols, st.k, a, st.k, b + j0 * st.k, st.k, y + j0, st.n);
                finish(0, st.m, j0, cols);
            }
        });
        return Status::Ok;
    }
    if (st.trans_b) {  // B is [n, k]: pack to [k, n]
        float* packed = static_cast<float*>(c.scratch);
        for (int64_t j = 0; j < st.n; ++j)
            for (int64_t p = 0; p < st.k; ++p) packed[p * st.n + j] = b[j * st.k + p];
        b = packed;
    }
    int64_t a_row = st.trans_a ? 1 : st.k, a_col = st.trans_a ? st.m : 1;
    int64_t row_blocks = (st.m + 15) / 16;
    nn_parallel(c, (uint64_t)row_blocks, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (int64_t r0 = (int64_t)begin * 16; r0 < (int64_t)end * 16 && r0 < st.m; r0 += 16) {
            int64_t rows = st.m - r0 < 16 ? st.m - r0 : 16;
            float* yr = y + r0 * st.n;
            gemm(rows, st.n, st.k, a + r0 * a_row, a_row, a_col, b, st.n, yr, st.n, false);
            finish(r0, rows, 0, st.n);
        }
    });
    return Status::Ok;
}

}  // namespace detail

namespace detail {

// ---- BatchNormalization (inference): y = (x - mean) / sqrt(var + eps) * scale + B per channel.
struct NormState {
    float epsilon;
    int64_t outer, channels, inner;   // BatchNorm/InstanceNorm: N, C, spatial; LayerNorm: rows, -, row size
};

inline Status prepare_batch_norm(PrepareContext& c) {
    Status s = nn_count(c, 5, 5, 5);
    for (uint32_t i = 0; i < 5 && s == Status::Ok; ++i) s = nn_float(c, i);
    if (s != Status::Ok) return s;
    if (c.num_outputs > 1 || c.attribute_int("training_mode", 0) != 0)
        return c.fail(Status::Unsupported, "training mode (running statistics outputs)");
    if (c.opset < 9 && c.attribute_int("spatial", 1) != 1) return c.fail(Status::Unsupported, "spatial=0");
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 2) return c.fail(Status::InvalidArgument, "X must be N x C x ...");
    for (uint32_t i = 1; i < 5; ++i)
        if (c.inputs[i].rank != 1 || c.inputs[i].dims[0] != x.dims[1])
            return c.fail(Status::InvalidArgument, "input %u must have %lld elements", i, (long long)x.dims[1]);
    NormState* st = nn_state<NormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = NormState{c.attribute_float("epsilon", 1e-5f), x.dims[0], x.dims[1], nn_product(x, 2, x.rank)};
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}

inline Status run_batch_norm(const RunContext& c) {
    const NormState& st = *static_cast<const NormState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const float *scale = c.inputs[1].as<float>(), *shift = c.inputs[2].as<float>();
    const float *mean = c.inputs[3].as<float>(), *var = c.inputs[4].as<float>();
    float* y = c.outputs[0].as<float>();
    nn_parallel(c, (uint64_t)(st.outer * st.channels), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t plane = begin; plane < end; ++plane) {
            int64_t ch = (int64_t)plane % st.channels;
            float a = scale[ch] / std::sqrt(var[ch] + st.epsilon), b = shift[ch] - mean[ch] * a;
            const float* xp = x + (int64_t)plane * st.inner;
            float* yp = y + (int64_t)plane * st.inner;
            for (int64_t i = 0; i < st.inner; ++i) yp[i] = xp[i] * a + b;
        }
    });
    return Status::Ok;
}

// Mean and 1/sqrt(variance + eps) of n floats (two passes: no cancellation from E[x^2]-E[x]^2).
inline void row_moments(const float* x, int64_t n, float epsilon, float* mean, float* inv_std) {
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    double m = n ? sum / (double)n : 0.0;
    for (int64_t i = 0; i < n; ++i) squares += (x[i] - m) * (x[i] - m);
    *mean = (float)m;
    *inv_std = (float)(1.0 / std::sqrt((n ? squares / (double)n : 0.0) + (double)epsilon));
}

// ---- InstanceNormalization: per (n, c) plane normalized, then scale and B per channel.
inline Status prepare_instance_norm(PrepareContext& c) {
    Status s = nn_count(c, 3, 3, 1);
    for (uint32_t i = 0; i < 3 && s == Status::Ok; ++i) s = nn_float(c, i);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 3) return c.fail(Status::InvalidArgument, "X must be N x C x spatial");
    for (uint32_t i = 1; i < 3; ++i)
        if (c.inputs[i].rank != 1 || c.inputs[i].dims[0] != x.dims[1])
            return c.fail(Status::InvalidArgument, "input %u must have %lld elements", i, (long long)x.dims[1]);
    NormState* st = nn_state<NormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = NormState{c.attribute_float("epsilon", 1e-5f), x.dims[0], x.dims[1], nn_product(x, 2, x.rank)};
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}

inline Status run_instance_norm(const RunContext& c) {
    const NormState& st = *static_cast<const NormState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const float *scale = c.inputs[1].as<float>(), *shift = c.inputs[2].as<float>();
    float* y = c.outputs[0].as<float>();
    nn_parallel(c, (uint64_t)(st.outer * st.channels), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t plane = begin; plane < end; ++plane) {
            int64_t ch = (int64_t)plane % st.channels;
            const float* xp = x + (int64_t)plane * st.inner;
            float* yp = y + (int64_t)plane * st.inner;
            float mean, inv_std;
            row_moments(xp, st.inner, st.epsilon, &mean, &inv_std);
            float a = scale[ch] * inv_std, b = shift[ch] - mean * a;
            for (int64_t i = 0; i < st.inner; ++i) yp[i] = xp[i] * a + b;
        }
    });
    return Status::Ok;
}

// ---- LayerNormalization: rows are the dims from `axis` on; Scale and B broadcast to a row
// (expanded once per run into scratch). Optional outputs Mean and InvStdDev keep X's rank
// with 1s from `axis` on.
struct LayerNormState {
    NormState norm;
    TensorDesc row;   // the normalized shape
};

inline Status prepare_layer_norm(PrepareContext& c) {
    Status s = nn_count(c, 2, 3, 3);
    for (uint32_t i = 0; i < 3 && s == Status::Ok; ++i) s = nn_float(c, i, i == 2);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    int axis = 0;
    if (!nn_axis(c.attribute_int("axis", -1), x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)c.attribute_int("axis", -1),
                      x.rank);
    LayerNormState* st = nn_state<LayerNormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->norm = NormState{c.attribute_float("epsilon", 1e-5f), nn_product(x, 0, axis), 1, nn_product(x, axis, x.rank)};
    st->row = x;
    st->row.rank = (uint8_t)(x.rank - axis);
    for (int i = axis; i < x.rank; ++i) st->row.dims[i - axis] = x.dims[i];
    for (uint32_t i = 1; i < 3; ++i) {  // unidirectional broadcast to the row
        if (!c.has_input(i)) continue;
        const TensorDesc& p = c.inputs[i];
        bool ok = p.rank <= st->row.rank;
        for (int d = 0; ok && d < p.rank; ++d) {
            int64_t want = st->row.dims[st->row.rank - p.rank + d];
            ok = p.dims[d] == want || p.dims[d] == 1;
        }
        if (!ok) return c.fail(Status::InvalidArgument, "input %u does not broadcast to the normalized shape", i);
    }
    c.outputs[0] = x;
    for (uint32_t i = 1; i < c.num_outputs; ++i) {
        c.outputs[i] = x;
        for (int d = axis; d < x.rank; ++d) c.outputs[i].dims[d] = 1;
    }
    c.scratch_bytes = (size_t)(2 * st->norm.inner) * sizeof(float);
    c.in_place = true;
    return Status::Ok;
}

inline Status run_layer_norm(const RunContext& c) {
    const LayerNormState& st = *static_cast<const LayerNormState*>(c.state);
    const NormState& nm = st.norm;
    float* scale = static_cast<float*>(c.scratch);
    float* shift = scale + nm.inner;
    for (uint32_t i = 1; i < 3; ++i) {
        float* dst = i == 1 ? scale : shift;
        if (i >= c.num_inputs || !c.inputs[i].data) {
            for (int64_t j = 0; j < nm.inner; ++j) dst[j] = 0.0f;
            continue;
        }
        const float* src = c.inputs[i].as<float>();
        const TensorDesc* in = &c.inputs[i].desc;
        for_each_broadcast(st.row, &in, 1, [&](uint64_t e, const int64_t* o) { dst[e] = src[o[0]]; });
    }
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    float* mean_out = c.num_outputs > 1 ? c.outputs[1].as<float>() : nullptr;
    float* inv_out = c.num_outputs > 2 ? c.outputs[2].as<float>() : nullptr;
    nn_parallel(c, (uint64_t)nm.outer, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t r = begin; r < end; ++r) {
            const float* xr = x + (int64_t)r * nm.inner;
            float* yr = y + (int64_t)r * nm.inner;
            float mean, inv_std;
            row_moments(xr, nm.inner, nm.epsilon, &mean, &inv_std);
            if (mean_out) mean_out[r] = mean;
            if (inv_out) inv_out[r] = inv_std;
            for (int64_t j = 0; j < nm.inner; ++j) yr[j] = (xr[j] - mean) * inv_std * scale[j] + shift[j];
        }
    });
    return Status::Ok;
}

// ---- MaxPool and AveragePool over 1-3 spatial dims; per (n, c) plane a direct loop over each
// window's in-bounds taps. MaxPool's optional Indices output is the flat index into X.
struct PoolState {
    Window w;
    int64_t planes;
    bool max, count_include_pad, column_major;   // column_major: Indices with storage_order=1
};

inline Status prepare_pool(PrepareContext& c, bool max) {
    Status s = nn_count(c, 1, 1, max ? 2 : 1);
    if (s == Status::Ok) s = nn_float(c, 0);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 3) return c.fail(Status::InvalidArgument, "X must be N x C x spatial");
    Span<const int64_t> kernel = c.attribute_ints("kernel_shape");
    if (kernel.size != (size_t)x.rank - 2)
        return c.fail(Status::InvalidArgument, "kernel_shape must have %d values", x.rank - 2);
    int64_t ceil_mode = c.attribute_int("ceil_mode", 0);
    if (ceil_mode != 0 && ceil_mode != 1) return c.fail(Status::InvalidArgument, "ceil_mode must be 0 or 1");
    PoolState* st = nn_state<PoolState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    s = parse_window(c, x, kernel.data, ceil_mode != 0, false, &st->w);
    if (s != Status::Ok) return s;
    for (int i = 0; i < 3; ++i)  // a window entirely in padding would have nothing to pool
        if (st->w.pad_begin[i] >= (st->w.kernel[i] - 1) * st->w.dilation[i] + 1 ||
            st->w.pad_end[i] >= (st->w.kernel[i] - 1) * st->w.dilation[i] + 1)
            return c.fail(Status::InvalidArgument, "pads must be smaller than the window");
    st->planes = x.dims[0] * x.dims[1];
    st->max = max;
    st->count_include_pad = c.attribute_int("count_include_pad", 0) != 0;
    st->column_major = c.attribute_int("storage_order", 0) != 0;
    for (uint32_t i = 0; i < c.num_outputs; ++i) {
        c.outputs[i] = x;
        for (int d = 0; d < st->w.spatial; ++d) c.outputs[i].dims[2 + d] = st->w.out[3 - st->w.spatial + d];
    }
    if (c.num_outputs > 1) c.outputs[1].type = ElementType::Int64;
    return Status::Ok;
}

inline Status prepare_max_pool(PrepareContext& c) { return prepare_pool(c, true); }
inline Status prepare_average_pool(PrepareContext& c) { return prepare_pool(c, false); }

inline Status run_pool(const RunContext& c) {
    const PoolState& st = *static_cast<const PoolState*>(c.state);
    const Window& w = st.w;
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    int64_t* indices = c.num_outputs > 1 ? c.outputs[1].as<int64_t>() : nullptr;
    int64_t in_plane = w.in_size(), out_plane = w.out_size();
    nn_parallel(c, (uint64_t)st.planes, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t plane = begin; plane < end; ++plane) {
            const float* xp = x + (int64_t)plane * in_plane;
            float* yp = y + (int64_t)plane * out_plane;
            for (int64_t o = 0; o < out_plane; ++o) {
                int64_t out_at[3] = {o / w.out[2] / w.out[1], o / w.out[2] % w.out[1], o % w.out[2]};
                int64_t start[3], taps[3][2];  // first and last valid tap per dim; padded count
                int64_t padded = 1;
                for (int d = 0; d < 3; ++d) {
                    start[d] = out_at[d] * w.stride[d] - w.pad_begin[d];
                    int64_t first = 0, last = w.kernel[d], inside_pad = 0;
                    while (first < last && start[d] + first * w.dilation[d] < 0) ++first;
                    while (last > first && start[d] + (last - 1) * w.dilation[d] >= w.in[d]) --last;
                    for (int64_t k = 0; k < w.kernel[d]; ++k)
                        inside_pad += start[d] + k * w.dilation[d] < w.in[d] + w.pad_end[d];
                    taps[d][0] = first;
                    taps[d][1] = last;
                    padded *= inside_pad;
                }
                float best = -INFINITY, sum = 0.0f;
                int64_t best_at = -1, count = 0;
                for (int64_t k0 = taps[0][0]; k0 < taps[0][1]; ++k0)
                    for (int64_t k1 = taps[1][0]; k1 < taps[1][1]; ++k1) {
                        int64_t row = ((start[0] + k0 * w.dilation[0]) * w.in[1] + start[1] + k1 * w.dilation[1]) * w.in[2];
                        for (int64_t k2 = taps[2][0]; k2 < taps[2][1]; ++k2) {
                            int64_t at = row + start[2] + k2 * w.dilation[2];
                            float v = xp[at];
                            if (v > best || best_at < 0) { best = v; best_at = at; }
                            sum += v;
                            ++count;
                        }
                    }
                if (st.max) {
                    yp[o] = best;
                    int64_t at = best_at < 0 ? 0 : best_at;
                    if (st.column_major)  // spatial dims in reverse order
                        at = (at % w.in[2] * w.in[1] + at / w.in[2] % w.in[1]) * w.in[0] + at / w.in[2] / w.in[1];
                    if (indices) indices[(int64_t)plane * out_plane + o] = (int64_t)plane * in_plane + at;
                } else {
                    int64_t divisor = st.count_include_pad ? padded : count;
                    yp[o] = divisor ? sum / (float)divisor : 0.0f;
                }
            }
        }
    });
    return Status::Ok;
}

// ---- GlobalAveragePool, GlobalMaxPool: one value per (n, c) plane.
inline Status prepare_global_pool(PrepareContext& c) {
    Status s = nn_count(c, 1, 1, 1);
    if (s == Status::Ok) s = nn_float(c, 0);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 3) return c.fail(Status::InvalidArgument, "X must be N x C x spatial");
    NormState* st = nn_state<NormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = NormState{0.0f, x.dims[0] * x.dims[1], 1, nn_product(x, 2, x.rank)};
    c.outputs[0] = x;
    for (int d = 2; d < x.rank; ++d) c.outputs[0].dims[d] = 1;
    return Status::Ok;
}

inline Status run_global_pool(const RunContext& c, bool max) {
    const NormState& st = *static_cast<const NormState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    nn_parallel(c, (uint64_t)st.outer, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t plane = begin; plane < end; ++plane) {
            const float* xp = x + (int64_t)plane * st.inner;
            float acc = max ? -INFINITY : 0.0f;
            for (int64_t i = 0; i < st.inner; ++i) acc = max ? (xp[i] > acc ? xp[i] : acc) : acc + xp[i];
            y[plane] = max ? acc : acc / (float)st.inner;
        }
    });
    return Status::Ok;
}
inline Status run_global_average_pool(const RunContext& c) { return run_global_pool(c, false); }
inline Status run_global_max_pool(const RunContext& c) { return run_global_pool(c, true); }

// ---- Softmax, LogSoftmax: over `count` elements `inner` apart. Before opset 13 the input is
// coerced to 2-D at axis (everything from axis on is one row); from 13 it is one axis.
struct SoftmaxState {
    int64_t outer, count, inner;
    bool log;
};

inline Status prepare_softmax(PrepareContext& c, bool log) {
    Status s = nn_count(c, 1, 1, 1);
    if (s == Status::Ok) s = nn_float(c, 0);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    bool per_axis = c.opset >= 13;
    int64_t raw = c.attribute_int("axis", per_axis ? -1 : 1);
    int axis = 0;
    if (x.rank < 1 || !nn_axis(raw, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)raw, x.rank);
    SoftmaxState* st = nn_state<SoftmaxState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    if (per_axis) *st = SoftmaxState{nn_product(x, 0, axis), x.dims[axis], nn_product(x, axis + 1, x.rank), log};
    else *st = SoftmaxState{nn_product(x, 0, axis), nn_product(x, axis, x.rank), 1, log};
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}
inline Status prepare_softmax_only(PrepareContext& c) { return prepare_softmax(c, false); }
inline Status prepare_log_softmax(PrepareContext& c) { return prepare_softmax(c, true); }

inline Status run_softmax(const RunContext& c) {
    const SoftmaxState& st = *static_cast<const SoftmaxState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    nn_parallel(c, (uint64_t)(st.outer * st.inner), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t line = begin; line < end; ++line) {
            int64_t base = (int64_t)line / st.inner * st.count * st.inner + (int64_t)line % st.inner;
            const float* xl = x + base;
            float* yl = y + base;
            float top = -INFINITY;  // subtract the maximum: exp never overflows
            for (int64_t i = 0; i < st.count; ++i) top = xl[i * st.inner] > top ? xl[i * st.inner] : top;
            double sum = 0;
            for (int64_t i = 0; i < st.count; ++i) {
                float e = std::exp(xl[i * st.inner] - top);
                sum += e;
                if (!st.log) yl[i * st.inner] = e;
                else yl[i * st.inner] = xl[i * st.inner] - top;
            }
            float scale = (float)(1.0 / sum), shift = (float)std::log(sum);
            for (int64_t i = 0; i < st.count; ++i) {
                if (st.log) yl[i * st.inner] -= shift;
                else yl[i * st.inner] *= scale;
            }
        }
    });
    return Status::Ok;
}

}  // namespace detail

namespace detail {

// ---- ReduceMean/Sum/Max/Min/Prod/L2: the output (kept dims as 1) is initialized with the
// identity, then X is walked once in row-major order, each element folded into the output
// element it broadcasts from (stride 0 along reduced dims).
enum class ReduceKind : uint8_t { Mean, Sum, Max, Min, Prod, L2 };

struct ReduceState {
    ReduceKind kind;
    TensorDesc kept;     // output shape with reduced dims as 1
    int64_t count;       // elements folded into each output
    bool copy;           // noop_with_empty_axes and no axes: Identity
};

inline Status prepare_reduce(PrepareContext& c, ReduceKind kind) {
    // ReduceSum's axes became an input in opset 13 (the others in 18)
    bool axes_input = kind == ReduceKind::Sum && c.opset >= 13;
    Status s = nn_count(c, 1, axes_input ? 2 : 1, 1);
    if (s == Status::Ok) s = nn_float(c, 0);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    const int64_t* axes = nullptr;
    int64_t axis_count = 0;
    if (axes_input) {
        s = nn_int64_values(c, 1, &axes, &axis_count);
        if (s != Status::Ok) return s;
    } else {
        Span<const int64_t> list = c.attribute_ints("axes");
        axes = list.data;
        axis_count = (int64_t)list.size;
    }
    ReduceState* st = nn_state<ReduceState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->kind = kind;
    st->kept = x;
    bool reduced[kMaxRank] = {};
    for (int64_t i = 0; i < axis_count; ++i) {
        int axis = 0;
        if (!nn_axis(axes[i], x.rank, &axis))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)axes[i], x.rank);
        if (reduced[axis]) return c.fail(Status::InvalidArgument, "axis %d is repeated", axis);
        reduced[axis] = true;
    }
    st->copy = axis_count == 0 && c.attribute_int("noop_with_empty_axes", 0) != 0;
    bool keep = c.attribute_int("keepdims", 1) != 0;
    TensorDesc& y = c.outputs[0];
    y = x;
    y.rank = 0;
    st->count = 1;
    for (int d = 0; d < x.rank; ++d) {
        bool r = !st->copy && (axis_count == 0 || reduced[d]);
        if (r) {
            st->count *= x.dims[d];
            st->kept.dims[d] = 1;
        }
        if (!r || keep) y.dims[y.rank++] = r ? 1 : x.dims[d];
    }
    return Status::Ok;
}

inline Status prepare_reduce_mean(PrepareContext& c) { return prepare_reduce(c, ReduceKind::Mean); }
inline Status prepare_reduce_sum(PrepareContext& c) { return prepare_reduce(c, ReduceKind::Sum); }
inline Status prepare_reduce_max(PrepareContext& c) { return prepare_reduce(c, ReduceKind::Max); }
inline Status prepare_reduce_min(PrepareContext& c) { return prepare_reduce(c, ReduceKind::Min); }
inline Status prepare_reduce_prod(PrepareContext& c) { return prepare_reduce(c, ReduceKind::Prod); }
inline Status prepare_reduce_l2(PrepareContext& c) { return prepare_reduce(c, ReduceKind::L2); }

inline Status run_reduce(const RunContext& c) {
    const ReduceState& st = *static_cast<const ReduceState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    uint64_t outputs = c.outputs[0].elements();
    if (st.copy) {
        if (y != x) std::memmove(y, x, (size_t)outputs * sizeof(float));
        return Status::Ok;
    }
    float start = st.kind == ReduceKind::Max ? -INFINITY : st.kind == ReduceKind::Min ? INFINITY
                  : st.kind == ReduceKind::Prod ? 1.0f : 0.0f;
    for (uint64_t i = 0; i < outputs; ++i) y[i] = start;
    const TensorDesc* kept = &st.kept;
    ReduceKind kind = st.kind;
    for_each_broadcast(c.inputs[0].desc, &kept, 1, [&](uint64_t e, const int64_t* o) {
        float v = x[e];
        float& acc = y[o[0]];
        switch (kind) {
            case ReduceKind::Max: acc = v > acc || v != v ? v : acc; break;
            case ReduceKind::Min: acc = v < acc || v != v ? v : acc; break;
            case ReduceKind::Prod: acc *= v; break;
            case ReduceKind::L2: acc += v * v; break;
            default: acc += v; break;
        }
    });
    if (kind == ReduceKind::Mean)
        for (uint64_t i = 0; i < outputs; ++i) y[i] /= (float)st.count;
    if (kind == ReduceKind::L2)
        for (uint64_t i = 0; i < outputs; ++i) y[i] = std::sqrt(y[i]);
    return Status::Ok;
}

// ---- ArgMax, ArgMin: int64 index along axis (first or, with select_last_index, last extremum).
struct ArgState {
    int64_t outer, count, inner;
    bool max, last;
};

inline Status prepare_arg(PrepareContext& c, bool max) {
    Status s = nn_count(c, 1, 1, 1);
    if (s == Status::Ok) s = nn_float(c, 0);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    int axis = 0;
    if (x.rank < 1 || !nn_axis(c.attribute_int("axis", 0), x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)c.attribute_int("axis", 0),
                      x.rank);
    if (x.dims[axis] == 0) return c.fail(Status::InvalidArgument, "the reduced axis is empty");
    ArgState* st = nn_state<ArgState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = ArgState{nn_product(x, 0, axis), x.dims[axis], nn_product(x, axis + 1, x.rank), max,
                   c.attribute_int("select_last_index", 0) != 0};
    TensorDesc& y = c.outputs[0];
    y = x;
    y.type = ElementType::Int64;
    if (c.attribute_int("keepdims", 1) != 0) {
        y.dims[axis] = 1;
    } else {
        for (int d = axis; d + 1 < x.rank; ++d) y.dims[d] = x.dims[d + 1];
        --y.rank;
    }
    return Status::Ok;
}
inline Status prepare_arg_max(PrepareContext& c) { return prepare_arg(c, true); }
inline Status prepare_arg_min(PrepareContext& c) { return prepare_arg(c, false); }

inline Status run_arg(const RunContext& c) {
    const ArgState& st = *static_cast<const ArgState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    int64_t* y = c.outputs[0].as<int64_t>();
    for (int64_t o = 0; o < st.outer; ++o)
        for (int64_t i = 0; i < st.inner; ++i) {
            const float* xl = x + o * st.count * st.inner + i;
            int64_t best = 0;
            for (int64_t k = 1; k < st.count; ++k) {
                float v = xl[k * st.inner], b = xl[best * st.inner];
                bool better = st.max ? (st.last ? v >= b : v > b) : (st.last ? v <= b : v < b);
                if (better) best = k;
            }
            y[o * st.inner + i] = best;
        }
    return Status::Ok;
}

// ---- Resize: nearest (any rank) or linear (the last two dims of a 2-D or 4-D input). Output
// sizes come from compile-time scales or sizes; per-axis source tables (index, and for linear
// the neighbour and weight) are built once in prepare.
struct ResizeState {
    bool linear;
    int rank;
    int64_t in[kMaxRank], out[kMaxRank];
    int64_t* index[kMaxRank];     // nearest: source index; linear: lower neighbour
    int64_t* upper[kMaxRank];     // linear only
    float* weight[kMaxRank];      // linear only: weight of the upper neighbour
};

inline Status prepare_resize(PrepareContext& c) {
    if (c.opset < 10) return c.fail(Status::Unsupported, "Resize needs opset 10 or later");
    Status s = nn_count(c, 2, 4, 1);
    if (s == Status::Ok) s = nn_float(c, 0);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    int rank = x.rank;
    uint32_t scales_at = c.opset == 10 ? 1 : 2, sizes_at = 3;
    // scales (float) or sizes (int64): exactly one, known at compile time
    bool has_scales = c.has_input(scales_at) && nn_product(c.inputs[scales_at], 0, c.inputs[scales_at].rank) > 0;
    bool has_sizes = c.opset > 10 && c.has_input(sizes_at) && nn_product(c.inputs[sizes_at], 0, c.inputs[sizes_at].rank) > 0;
    if (has_scales == has_sizes) return c.fail(Status::InvalidArgument, "needs exactly one of scales and sizes");
    uint32_t source = has_scales ? scales_at : sizes_at;
    const TensorDesc& sd = c.inputs[source];
    if (sd.type != (has_scales ? ElementType::Float32 : ElementType::Int64) || sd.rank != 1 || sd.dims[0] != rank)
        return c.fail(Status::InvalidArgument, "%s must be a 1-D %s tensor of %d values", has_scales ? "scales" : "sizes",
                      has_scales ? "float32" : "int64", rank);
    if (!c.values || !c.values[source]) return c.fail(Status::Unsupported, "data-dependent shape: %s is not a constant",
                                                      has_scales ? "scales" : "sizes");
    StringView mode = c.attribute_string("mode", "nearest");
    bool linear = mode == StringView("linear");
    if (!linear && mode != StringView("nearest"))
        return c.fail(Status::Unsupported, "mode '%.*s'", (int)mode.size, mode.data);
    // Resize-10 is Upsample: asymmetric coordinates, nearest rounds down
    StringView transform = c.opset == 10 ? StringView("asymmetric")
                                         : c.attribute_string("coordinate_transformation_mode", "half_pixel");
    StringView rounding = c.opset == 10 ? StringView("floor") : c.attribute_string("nearest_mode", "round_prefer_floor");
    enum { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric } how;
    if (transform == StringView("half_pixel")) how = HalfPixel;
    else if (transform == StringView("pytorch_half_pixel")) how = PytorchHalfPixel;
    else if (transform == StringView("align_corners")) how = AlignCorners;
    else if (transform == StringView("asymmetric")) how = Asymmetric;
    else return c.fail(Status::Unsupported, "coordinate_transformation_mode '%.*s'", (int)transform.size, transform.data);
    enum { PreferFloor, PreferCeil, Floor, Ceil } round;
    if (rounding == StringView("round_prefer_floor")) round = PreferFloor;
    else if (rounding == StringView("round_prefer_ceil")) round = PreferCeil;
    else if (rounding == StringView("floor")) round = Floor;
    else if (rounding == StringView("ceil")) round = Ceil;
    else return c.fail(Status::InvalidArgument, "nearest_mode '%.*s' unknown", (int)rounding.size, rounding.data);
    ResizeState* st = nn_state<ResizeState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->linear = linear;
    st->rank = rank;
    double scales[kMaxRank];
    for (int d = 0; d < rank; ++d) {
        st->in[d] = x.dims[d];
        if (has_scales) {
            scales[d] = static_cast<const float*>(c.values[source])[d];
            if (!(scales[d] > 0.0)) return c.fail(Status::InvalidArgument, "scales must be positive");
            if (!((double)x.dims[d] * scales[d] < 4294967296.0)) return c.fail(Status::LimitExceeded, "output dim above 2^32");
            st->out[d] = (int64_t)std::floor((double)x.dims[d] * scales[d]);
        } else {
            st->out[d] = static_cast<const int64_t*>(c.values[source])[d];
            if (st->out[d] < 0) return c.fail(Status::InvalidArgument, "sizes must not be negative");
            if (st->out[d] >= 4294967296ll) return c.fail(Status::LimitExceeded, "output dim above 2^32");
            scales[d] = x.dims[d] ? (double)st->out[d] / (double)x.dims[d] : 1.0;
        }
        if (st->out[d] > 0 && st->in[d] == 0) return c.fail(Status::InvalidArgument, "cannot resize an empty dim");
    }
    if (linear) {  // bilinear over the last two dims only
        if (rank != 2 && rank != 4) return c.fail(Status::Unsupported, "linear mode for a rank %d input", rank);
        if (rank == 4 && (st->out[0] != st->in[0] || st->out[1] != st->in[1]))
            return c.fail(Status::Unsupported, "linear mode resizing N or C");
    }
    for (int d = 0; d < rank; ++d) {
        int64_t n = st->out[d];
        st->index[d] = c.arena->allocate_array<int64_t>((size_t)n + 1);
        st->upper[d] = c.arena->allocate_array<int64_t>((size_t)n + 1);
        st->weight[d] = c.arena->allocate_array<float>((size_t)n + 1);
        if (!st->index[d] || !st->upper[d] || !st->weight[d]) return c.fail(Status::OutOfMemory, "out of memory");
        for (int64_t o = 0; o < n; ++o) {
            // The output coordinate in input coordinates. The spec's resized length is in * scale
            // before flooring (align_corners and pytorch_half_pixel see the fraction).
            double scale = scales[d], length = (double)st->in[d] * scale, at;
            switch (how) {
                case HalfPixel: at = ((double)o + 0.5) / scale - 0.5; break;
                case PytorchHalfPixel: at = length > 1 ? ((double)o + 0.5) / scale - 0.5 : 0.0; break;
                case AlignCorners: at = length == 1 ? 0.0 : (double)o * (double)(st->in[d] - 1) / (length - 1); break;
                default: at = (double)o / scale; break;
            }
            int64_t last = st->in[d] - 1;
            if (linear) {
                double clamped = at < 0 ? 0 : at > (double)last ? (double)last : at;
                int64_t low = (int64_t)std::floor(clamped);
                st->index[d][o] = low;
                st->upper[d][o] = low < last ? low + 1 : last;
                st->weight[d][o] = (float)(clamped - (double)low);
            } else {
                double f = std::floor(at), r;
                switch (round) {
                    case PreferFloor: r = at - f == 0.5 ? f : std::round(at); break;
                    case PreferCeil: r = at - f == 0.5 ? f + 1 : std::round(at); break;
                    case Floor: r = f; break;
                    default: r = std::ceil(at); break;
                }
                int64_t i = r < 0 ? 0 : r > (double)last ? last : (int64_t)r;
                st->index[d][o] = i;
            }
        }
    }
    TensorDesc& y = c.outputs[0];
    y = x;
    for (int d = 0; d < rank; ++d) y.dims[d] = st->out[d];
    return Status::Ok;
}

inline Status run_resize(const RunContext& c) {
    const ResizeState& st = *static_cast<const ResizeState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    int rank = st.rank;
    if (st.linear) {  // planes of [H, W]
        int h = rank - 2, w = rank - 1;
        int64_t planes = rank == 4 ? st.in[0] * st.in[1] : 1;
        int64_t in_plane = st.in[h] * st.in[w], out_plane = st.out[h] * st.out[w];
        nn_parallel(c, (uint64_t)planes, [&](uint64_t, uint64_t begin, uint64_t end) {
            for (uint64_t p = begin; p < end; ++p) {
                const float* xp = x + (int64_t)p * in_plane;
                float* yp = y + (int64_t)p * out_plane;
                for (int64_t i = 0; i < st.out[h]; ++i) {
                    const float* top = xp + st.index[h][i] * st.in[w];
                    const float* bottom = xp + st.upper[h][i] * st.in[w];
                    float wy = st.weight[h][i];
                    for (int64_t j = 0; j < st.out[w]; ++j) {
                        int64_t l = st.index[w][j], r = st.upper[w][j];
                        float wx = st.weight[w][j];
                        float t = top[l] + (top[r] - top[l]) * wx, b = bottom[l] + (bottom[r] - bottom[l]) * wx;
                        yp[i * st.out[w] + j] = t + (b - t) * wy;
                    }
                }
            }
        });
        return Status::Ok;
    }
    // nearest: walk the output row-major, keeping the input offset of each prefix of dims
    uint64_t total = c.outputs[0].elements();
    if (total == 0) return Status::Ok;
    int64_t in_stride[kMaxRank], at[kMaxRank] = {}, offset[kMaxRank + 1] = {};
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) { in_stride[d] = stride; stride *= st.in[d]; }
    for (int d = 0; d < rank; ++d) offset[d + 1] = offset[d] + st.index[d][0] * in_stride[d];
    for (uint64_t e = 0; e < total; ++e) {
        y[e] = x[offset[rank]];
        int d = rank - 1;
        while (d >= 0 && ++at[d] == st.out[d]) at[d--] = 0;
        if (d < 0) break;
        for (int k = d; k < rank; ++k) offset[k + 1] = offset[k] + st.index[k][at[k]] * in_stride[k];
    }
    return Status::Ok;
}

const OpKernel kNnKernels[] = {
    {"Conv", prepare_conv, run_conv},
    {"ConvTranspose", prepare_conv_transpose, run_conv_transpose},
    {"MatMul", prepare_matmul, run_matmul},
    {"Gemm", prepare_gemm, run_gemm},
    {"BatchNormalization", prepare_batch_norm, run_batch_norm},
    {"InstanceNormalization", prepare_instance_norm, run_instance_norm},
    {"LayerNormalization", prepare_layer_norm, run_layer_norm},
    {"MaxPool", prepare_max_pool, run_pool},
    {"AveragePool", prepare_average_pool, run_pool},
    {"GlobalAveragePool", prepare_global_pool, run_global_average_pool},
    {"GlobalMaxPool", prepare_global_pool, run_global_max_pool},
    {"Softmax", prepare_softmax_only, run_softmax},
    {"LogSoftmax", prepare_log_softmax, run_softmax},
    {"ReduceMean", prepare_reduce_mean, run_reduce},
    {"ReduceSum", prepare_reduce_sum, run_reduce},
    {"ReduceMax", prepare_reduce_max, run_reduce},
    {"ReduceMin", prepare_reduce_min, run_reduce},
    {"ReduceProd", prepare_reduce_prod, run_reduce},
    {"ReduceL2", prepare_reduce_l2, run_reduce},
    {"ArgMax", prepare_arg_max, run_arg},
    {"ArgMin", prepare_arg_min, run_arg},
    {"Resize", prepare_resize, run_resize},
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
