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

// Tensor kernels: shapes, data movement, integer and logical arithmetic, Cast. Sizes that come
// from data (Reshape's shape, Tile's repeats, Pad's pads, ...) are computed with saturating
// arithmetic and refused past kTensorOpMaxElements (LimitExceeded); run() never allocates and
// refuses data it cannot use (a Gather index out of range, an integer division by zero) with
// InvalidArgument. Float32 Add/Sub/Mul/Div/Neg/Abs (and two-input Max/Min, float Where) keep
// running the elementwise kernel above, so fused and unfused float results stay identical.
constexpr uint64_t kTensorOpMaxElements = 1ull << 28;   // Limits::max_tensor_elements' default
constexpr uint64_t kSaturated = 1ull << 62;

inline uint64_t mul_saturated(uint64_t a, uint64_t b) {
    if (a == 0 || b == 0) return 0;
    if (a > kSaturated / b) return kSaturated;
    return a * b;
}

inline bool normalize_axis(int64_t axis, int64_t rank, int64_t* out) {
    if (axis < -rank || axis >= rank) return false;
    *out = axis < 0 ? axis + rank : axis;
    return true;
}

inline const void* tensor_value(const PrepareContext& c, uint32_t i) {
    return c.values && i < c.num_inputs ? c.values[i] : nullptr;
}

inline void dense_strides(const TensorDesc& d, int64_t* strides) {
    int64_t s = 1;
    for (int i = d.rank - 1; i >= 0; --i) { strides[i] = s; s *= d.dims[i] ? d.dims[i] : 1; }
}

inline uint64_t dims_product(const TensorDesc& d, int begin, int end) {
    uint64_t n = 1;
    for (int i = begin; i < end; ++i) n = mul_saturated(n, (uint64_t)d.dims[i]);
    return n;
}

template <class T>
T* new_state(PrepareContext& c) {
    void* memory = c.arena->allocate(sizeof(T), alignof(T));
    return memory ? new (memory) T() : nullptr;
}

// Input count in [least, most], inputs [0, required) present, every present input of a
// known shape within the limits; exactly `outputs` outputs (0: any number from 1).
inline Status check_tensor_inputs(PrepareContext& c, uint32_t least, uint32_t most, uint32_t required,
                                  uint32_t outputs = 1) {
    if (c.num_inputs < least || c.num_inputs > most)
        return c.fail(Status::InvalidArgument, "expects %u to %u inputs, has %u", least, most, c.num_inputs);
    if (outputs ? c.num_outputs != outputs : c.num_outputs < 1)
        return c.fail(Status::InvalidArgument, "has %u outputs", c.num_outputs);
    for (uint32_t i = 0; i < c.num_inputs; ++i) {
        if (!c.has_input(i)) {
            if (i < required) return c.fail(Status::InvalidArgument, "input %u is missing", i);
            continue;
        }
        const TensorDesc& d = c.inputs[i];
        if (d.rank > kMaxRank) return c.fail(Status::LimitExceeded, "input %u has rank %u", i, d.rank);
        if ((uint32_t)d.type > (uint32_t)ElementType::Bool)
            return c.fail(Status::Unsupported, "input %u has an unknown element type", i);
        uint64_t n = 0;
        for (int k = 0; k < d.rank; ++k)
            if (d.dims[k] < 0) return c.fail(Status::InvalidArgument, "input %u has an unknown dimension %d", i, k);
        if (!desc_elements(d, &n)) return c.fail(Status::LimitExceeded, "input %u is too large", i);
    }
    return Status::Ok;
}

// Output dims must be >= 0 and the element count within the limit.
inline Status check_output_desc(PrepareContext& c, uint32_t index) {
    const TensorDesc& d = c.outputs[index];
    uint64_t n = 1;
    bool zero = false;
    for (int i = 0; i < d.rank; ++i) {
        if (d.dims[i] < 0)
            return c.fail(Status::InvalidArgument, "output %u would have dimension %d = %lld", index, i,
                          (long long)d.dims[i]);
        if (d.dims[i] == 0) zero = true;
        n = mul_saturated(n, d.dims[i] ? (uint64_t)d.dims[i] : 1);
    }
    if (!zero && n > kTensorOpMaxElements)
        return c.fail(Status::LimitExceeded, "output %u would have %llu elements (at most %llu)", index,
                      (unsigned long long)n, (unsigned long long)kTensorOpMaxElements);
    return Status::Ok;
}

// An int64 or int32 tensor whose values prepare needs (a shape, axes, pads, ...).
struct IntValues {
    const void* data = nullptr;
    ElementType type = ElementType::Int64;
    uint64_t count = 0;
    int64_t operator[](uint64_t i) const {
        return type == ElementType::Int64 ? static_cast<const int64_t*>(data)[i] : static_cast<const int32_t*>(data)[i];
    }
};

inline Status int_input(PrepareContext& c, uint32_t i, IntValues* v) {
    if (c.inputs[i].type != ElementType::Int64 && c.inputs[i].type != ElementType::Int32)
        return c.fail(Status::Unsupported, "input %u is %s (int64 expected)", i, element_type_name(c.inputs[i].type));
    if (c.inputs[i].rank > 1) return c.fail(Status::InvalidArgument, "input %u must be 1-D", i);
    v->data = tensor_value(c, i);
    v->type = c.inputs[i].type;
    v->count = c.inputs[i].rank ? (uint64_t)c.inputs[i].dims[0] : 1;
    if (!v->data && v->count) return c.fail(Status::Unsupported, "data-dependent shape: input %u", i);   // empty: known
    return Status::Ok;
}

inline IntValues int_attribute(const PrepareContext& c, StringView name, bool* present) {
    const Attribute* a = c.attribute(name);
    IntValues v;
    *present = a && a->kind == AttributeKind::Ints;
    if (*present) { v.data = a->ints.data; v.count = a->ints.size; }
    return v;
}

// Axes from an attribute (before `input_opset`) or from input `input` (from it on).
inline Status axes_values(PrepareContext& c, const char* name, uint32_t input, uint32_t input_opset, IntValues* v,
                          bool* present) {
    if (c.opset < input_opset) {
        *v = int_attribute(c, name, present);
        return Status::Ok;
    }
    *present = c.has_input(input);
    return *present ? int_input(c, input, v) : Status::Ok;
}

inline Status run_copy(const RunContext& c) {   // same bytes, new shape
    size_t bytes = (size_t)(c.outputs[0].elements() * element_size(c.outputs[0].desc.type));
    if (c.outputs[0].data != c.inputs[0].data && bytes) std::memmove(c.outputs[0].data, c.inputs[0].data, bytes);
    return Status::Ok;
}

// ---- strided copy: walks the output in row-major order over `dims` (a view that may have
// more dimensions than the output, as DepthToSpace's six) and reads the input element at
// base + sum(index[d] * strides[d]) (0 broadcasts, negative walks backwards).
struct StridedCopy {
    uint32_t rank = 0;
    int64_t dims[kMaxRank] = {};
    int64_t strides[kMaxRank] = {};
    int64_t base = 0;
    uint32_t element_bytes = 0;
};

template <size_t B>
void copy_run(unsigned char* dst, const unsigned char* src, int64_t n, int64_t stride) {
    for (int64_t j = 0; j < n; ++j) std::memcpy(dst + j * (int64_t)B, src + j * stride * (int64_t)B, B);
}

inline void copy_elements(unsigned char* dst, const unsigned char* src, int64_t n, int64_t stride, uint32_t bytes) {
    if (n <= 0) return;
    if (stride == 1) { std::memcpy(dst, src, (size_t)n * bytes); return; }
    switch (bytes) {
        case 1: copy_run<1>(dst, src, n, stride); break;
        case 2: copy_run<2>(dst, src, n, stride); break;
        case 4: copy_run<4>(dst, src, n, stride); break;
        default: copy_run<8>(dst, src, n, stride); break;
    }
}

inline void run_strided(const StridedCopy& s, const void* in, void* out) {
    uint64_t total = 1;
    for (uint32_t i = 0; i < s.rank; ++i) total *= (uint64_t)s.dims[i];
    if (total == 0) return;
    const unsigned char* src = static_cast<const unsigned char*>(in);
    unsigned char* dst = static_cast<unsigned char*>(out);
    int last = (int)s.rank - 1;
    int64_t n = last >= 0 ? s.dims[last] : 1, stride = last >= 0 ? s.strides[last] : 0;
    int64_t index[kMaxRank] = {};
    int64_t offset = s.base;
    uint64_t rows = total / (uint64_t)n;
    for (uint64_t r = 0; r < rows; ++r) {
        copy_elements(dst, src + offset * (int64_t)s.element_bytes, n, stride, s.element_bytes);
        dst += n * (int64_t)s.element_bytes;
        for (int i = last - 1; i >= 0; --i) {
            ++index[i];
            offset += s.strides[i];
            if (index[i] < s.dims[i]) break;
            offset -= s.strides[i] * s.dims[i];
            index[i] = 0;
        }
    }
}

inline Status run_strided_copy(const RunContext& c) {
    run_strided(*static_cast<const StridedCopy*>(c.state), c.inputs[0].data, c.outputs[0].data);
    return Status::Ok;
}

inline Status set_strided_state(PrepareContext& c, const StridedCopy& s) {
    StridedCopy* state = new_state<StridedCopy>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    *state = s;
    c.state = state;
    return Status::Ok;
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze: the same bytes under a new shape (in place).
inline Status prepare_reshape(PrepareContext& c) {
    bool attribute_shape = c.opset < 5;
    Status s = check_tensor_inputs(c, attribute_shape ? 1 : 2, attribute_shape ? 1 : 2, attribute_shape ? 1 : 2);
    if (s != Status::Ok) return s;
    IntValues shape;
    bool present = true;
    if (attribute_shape) {
        shape = int_attribute(c, "shape", &present);
        if (!present) return c.fail(Status::InvalidArgument, "attribute 'shape' is missing");
    } else if ((s = int_input(c, 1, &shape)) != Status::Ok) {
        return s;
    }
    if (shape.count > (uint64_t)kMaxRank)
        return c.fail(Status::LimitExceeded, "shape has %llu dimensions", (unsigned long long)shape.count);
    const TensorDesc& x = c.inputs[0];
    bool allow_zero = c.opset >= 14 && c.attribute_int("allowzero", 0) != 0;
    uint64_t in_elements = 0;
    (void)desc_elements(x, &in_elements);
    TensorDesc y;
    y.type = x.type;
    y.rank = (uint8_t)shape.count;
    int infer = -1;
    uint64_t known = 1;
    for (uint32_t i = 0; i < y.rank; ++i) {
        int64_t d = shape[i];
        if (d == 0 && !allow_zero) {
            if (i >= x.rank)
                return c.fail(Status::InvalidArgument, "shape[%u] = 0 copies a dimension the input does not have", i);
            d = x.dims[i];
        }
        if (d == -1) {
            if (infer >= 0) return c.fail(Status::InvalidArgument, "shape has more than one -1");
            infer = (int)i;
            continue;
        }
        if (d < -1) return c.fail(Status::InvalidArgument, "shape[%u] = %lld", i, (long long)d);
        y.dims[i] = d;
        known = mul_saturated(known, (uint64_t)d);
    }
    if (infer >= 0) {
        if (known == 0 || known >= kSaturated || in_elements % known != 0)
            return c.fail(Status::InvalidArgument, "cannot infer the -1 dimension of %llu elements",
                          (unsigned long long)in_elements);
        y.dims[infer] = (int64_t)(in_elements / known);
    } else if (known != in_elements) {
        return c.fail(Status::InvalidArgument, "shape has %llu elements, the input %llu", (unsigned long long)known,
                      (unsigned long long)in_elements);
    }
    c.outputs[0] = y;
    c.in_place = true;
    return check_output_desc(c, 0);
}

inline Status prepare_flatten(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 1, 1, 1);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    int64_t axis = c.attribute_int("axis", 1);
    if (axis < -(int64_t)x.rank || axis > (int64_t)x.rank)
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)axis, x.rank);
    if (axis < 0) axis += x.rank;
    TensorDesc y;
    y.type = x.type;
    y.rank = 2;
    y.dims[0] = (int64_t)dims_product(x, 0, (int)axis);
    y.dims[1] = (int64_t)dims_product(x, (int)axis, x.rank);
    c.outputs[0] = y;
    c.in_place = true;
    return check_output_desc(c, 0);
}

inline Status prepare_squeeze(PrepareContext& c) {
    bool axes_input = c.opset >= 13;
    Status s = check_tensor_inputs(c, 1, axes_input ? 2 : 1, 1);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    IntValues axes;
    bool present = false;
    if ((s = axes_values(c, "axes", 1, 13, &axes, &present)) != Status::Ok) return s;
    bool remove[kMaxRank] = {};
    if (present) {
        if (axes.count > x.rank) return c.fail(Status::InvalidArgument, "more axes than dimensions");
        for (uint64_t i = 0; i < axes.count; ++i) {
            int64_t a;
            if (!normalize_axis(axes[i], x.rank, &a))
                return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)axes[i], x.rank);
            if (remove[a]) return c.fail(Status::InvalidArgument, "axis %lld repeated", (long long)axes[i]);
            if (x.dims[a] != 1)
                return c.fail(Status::InvalidArgument, "cannot squeeze dimension %lld of size %lld", (long long)a,
                              (long long)x.dims[a]);
            remove[a] = true;
        }
    } else {
        for (int i = 0; i < x.rank; ++i) remove[i] = x.dims[i] == 1;
    }
    TensorDesc y;
    y.type = x.type;
    for (int i = 0; i < x.rank; ++i) if (!remove[i]) y.dims[y.rank++] = x.dims[i];
    c.outputs[0] = y;
    c.in_place = true;
    return Status::Ok;
}

inline Status prepare_unsqueeze(PrepareContext& c) {
    bool axes_input = c.opset >= 13;
    Status s = check_tensor_inputs(c, axes_input ? 2 : 1, axes_input ? 2 : 1, axes_input ? 2 : 1);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    IntValues axes;
    bool present = false;
    if ((s = axes_values(c, "axes", 1, 13, &axes, &present)) != Status::Ok) return s;
    if (!present) return c.fail(Status::InvalidArgument, "attribute 'axes' is missing");
    if (axes.count + x.rank > (uint64_t)kMaxRank)
        return c.fail(Status::LimitExceeded, "output rank %llu (at most %d)", (unsigned long long)(axes.count + x.rank),
                      kMaxRank);
    int64_t rank = (int64_t)(axes.count + x.rank);
    bool inserted[kMaxRank] = {};
    for (uint64_t i = 0; i < axes.count; ++i) {
        int64_t a;
        if (!normalize_axis(axes[i], rank, &a))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %lld", (long long)axes[i], (long long)rank);
        if (inserted[a]) return c.fail(Status::InvalidArgument, "axis %lld repeated", (long long)axes[i]);
        inserted[a] = true;
    }
    TensorDesc y;
    y.type = x.type;
    y.rank = (uint8_t)rank;
    for (int i = 0, k = 0; i < rank; ++i) y.dims[i] = inserted[i] ? 1 : x.dims[k++];
    c.outputs[0] = y;
    c.in_place = true;
    return Status::Ok;
}

// ---- Transpose, Slice, Expand, DepthToSpace, SpaceToDepth: strided copies.
inline Status prepare_transpose(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 1, 1, 1);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    int64_t perm[kMaxRank];
    const Attribute* a = c.attribute("perm");
    if (a && a->kind == AttributeKind::Ints) {
        if (a->ints.size != x.rank)
            return c.fail(Status::InvalidArgument, "perm has %zu entries for rank %u", a->ints.size, x.rank);
        bool seen[kMaxRank] = {};
        for (int i = 0; i < x.rank; ++i) {
            int64_t p = a->ints[i];
            if (p < 0 || p >= x.rank || seen[p])
                return c.fail(Status::InvalidArgument, "perm is not a permutation (entry %d = %lld)", i, (long long)p);
            seen[p] = true;
            perm[i] = p;
        }
    } else {
        for (int i = 0; i < x.rank; ++i) perm[i] = x.rank - 1 - i;
    }
    int64_t in_strides[kMaxRank];
    dense_strides(x, in_strides);
    StridedCopy copy;
    copy.rank = x.rank;
    copy.element_bytes = (uint32_t)element_size(x.type);
    TensorDesc y;
    y.type = x.type;
    y.rank = x.rank;
    for (int i = 0; i < x.rank; ++i) {
        y.dims[i] = x.dims[perm[i]];
        copy.dims[i] = y.dims[i];
        copy.strides[i] = in_strides[perm[i]];
    }
    c.outputs[0] = y;
    return set_strided_state(c, copy);
}

inline Status prepare_slice(PrepareContext& c) {
    bool attributes = c.opset < 10;
    Status s = check_tensor_inputs(c, attributes ? 1 : 3, attributes ? 1 : 5, attributes ? 1 : 3);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    IntValues starts, ends, axes, steps;
    bool has_axes = false, has_steps = false, present = true;
    if (attributes) {
        starts = int_attribute(c, "starts", &present);
        if (present) ends = int_attribute(c, "ends", &present);
        if (!present) return c.fail(Status::InvalidArgument, "attributes 'starts' and 'ends' are required");
        axes = int_attribute(c, "axes", &has_axes);
    } else {
        if ((s = int_input(c, 1, &starts)) != Status::Ok) return s;
        if ((s = int_input(c, 2, &ends)) != Status::Ok) return s;
        if ((has_axes = c.has_input(3)) && (s = int_input(c, 3, &axes)) != Status::Ok) return s;
        if ((has_steps = c.has_input(4)) && (s = int_input(c, 4, &steps)) != Status::Ok) return s;
    }
    uint64_t count = starts.count;
    if (ends.count != count || (has_axes && axes.count != count) || (has_steps && steps.count != count))
        return c.fail(Status::InvalidArgument, "starts, ends, axes and steps differ in length");
    if (count > x.rank) return c.fail(Status::InvalidArgument, "more slice axes than dimensions");
    int64_t in_strides[kMaxRank];
    dense_strides(x, in_strides);
    StridedCopy copy;
    copy.rank = x.rank;
    copy.element_bytes = (uint32_t)element_size(x.type);
    TensorDesc y = x;
    for (int i = 0; i < x.rank; ++i) copy.dims[i] = x.dims[i], copy.strides[i] = in_strides[i];
    bool seen[kMaxRank] = {};
    for (uint64_t i = 0; i < count; ++i) {
        int64_t a = has_axes ? axes[i] : (int64_t)i;
        if (!normalize_axis(a, x.rank, &a))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)(has_axes ? axes[i] : (int64_t)i), x.rank);
        if (seen[a]) return c.fail(Status::InvalidArgument, "axis %lld repeated", (long long)a);
        seen[a] = true;
        int64_t step = has_steps ? steps[i] : 1;
        if (step == 0) return c.fail(Status::InvalidArgument, "step 0 on axis %lld", (long long)a);
        int64_t d = x.dims[a], start = starts[i], end = ends[i], n = 0;
        if (start < 0) start += d;
        if (end < 0) end += d;
        if (d == 0) {
            start = 0;
        } else if (step > 0) {
            start = start < 0 ? 0 : start > d ? d : start;
            end = end < 0 ? 0 : end > d ? d : end;
            if (end > start) n = (int64_t)((uint64_t)(end - start - 1) / (uint64_t)step) + 1;
        } else {
            start = start < 0 ? 0 : start > d - 1 ? d - 1 : start;
            end = end < -1 ? -1 : end > d - 1 ? d - 1 : end;
            if (start > end) n = (int64_t)((uint64_t)(start - end - 1) / ((uint64_t)0 - (uint64_t)step)) + 1;
        }
        y.dims[a] = n;
        copy.dims[a] = n;
        copy.base += n ? start * in_strides[a] : 0;
        copy.strides[a] = n > 1 ? step * in_strides[a] : 0;
    }
    c.outputs[0] = y;
    return set_strided_state(c, copy);
}

inline Status prepare_expand(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 2, 2, 2);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    IntValues shape;
    if ((s = int_input(c, 1, &shape)) != Status::Ok) return s;
    if (shape.count > (uint64_t)kMaxRank)
        return c.fail(Status::LimitExceeded, "shape has %llu dimensions", (unsigned long long)shape.count);
    TensorDesc y;
    y.type = x.type;
    y.rank = (uint8_t)(shape.count > x.rank ? shape.count : x.rank);
    for (int i = 0; i < y.rank; ++i) {
        int jx = i - (y.rank - x.rank), js = i - (y.rank - (int)shape.count);
        int64_t a = jx >= 0 ? x.dims[jx] : 1, b = js >= 0 ? shape[(uint64_t)js] : 1;
        if (b < 0) return c.fail(Status::InvalidArgument, "shape[%d] = %lld", js, (long long)b);
        if (a != b && a != 1 && b != 1)
            return c.fail(Status::InvalidArgument, "dimension %lld does not broadcast to %lld", (long long)a, (long long)b);
        y.dims[i] = b == 1 ? a : b;
    }
    c.outputs[0] = y;
    if ((s = check_output_desc(c, 0)) != Status::Ok) return s;
    StridedCopy copy;
    copy.rank = y.rank;
    copy.element_bytes = (uint32_t)element_size(x.type);
    for (int i = 0; i < y.rank; ++i) copy.dims[i] = y.dims[i];
    broadcast_strides(x, y, copy.strides);
    return set_strided_state(c, copy);
}

// DepthToSpace (DCR, CRD) and SpaceToDepth as a six-dimensional transposed view.
inline Status prepare_depth_space(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 1, 1, 1);
    if (s != Status::Ok) return s;
    bool to_space = c.node_ref().op == StringView("DepthToSpace");
    const TensorDesc& x = c.inputs[0];
    if (x.rank != 4) return c.fail(Status::InvalidArgument, "input rank %u (4 expected)", x.rank);
    const Attribute* a = c.attribute("blocksize");
    if (!a || a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'blocksize' is missing");
    int64_t b = a->i;
    if (b <= 0 || b > (1 << 16)) return c.fail(Status::InvalidArgument, "blocksize %lld", (long long)b);
    int64_t n = x.dims[0], ch = x.dims[1], h = x.dims[2], w = x.dims[3];
    StridedCopy copy;
    copy.rank = 6;
    copy.element_bytes = (uint32_t)element_size(x.type);
    TensorDesc y;
    y.type = x.type;
    y.rank = 4;
    y.dims[0] = n;
    if (to_space) {
        StringView mode = c.attribute_string("mode", "DCR");
        bool crd = mode == StringView("CRD");
        if (!crd && mode != StringView("DCR"))
            return c.fail(Status::InvalidArgument, "mode '%.*s' (DCR or CRD)", (int)mode.size, mode.data);
        if (ch % (b * b) != 0)
            return c.fail(Status::InvalidArgument, "channels %lld not divisible by blocksize^2 = %lld", (long long)ch,
                          (long long)(b * b));
        int64_t co = ch / (b * b);
        y.dims[1] = co;
        y.dims[2] = (int64_t)mul_saturated((uint64_t)h, (uint64_t)b);
        y.dims[3] = (int64_t)mul_saturated((uint64_t)w, (uint64_t)b);
        // walk [N, C', H, b1, W, b2]
        int64_t s_b1 = crd ? b * h * w : b * co * h * w, s_b2 = crd ? h * w : co * h * w, s_c = crd ? b * b * h * w : h * w;
        int64_t dims[6] = {n, co, h, b, w, b}, strides[6] = {ch * h * w, s_c, w, s_b1, 1, s_b2};
        for (int i = 0; i < 6; ++i) copy.dims[i] = dims[i], copy.strides[i] = strides[i];
    } else {
        if (h % b != 0 || w % b != 0)
            return c.fail(Status::InvalidArgument, "height %lld and width %lld not divisible by blocksize %lld",
                          (long long)h, (long long)w, (long long)b);
        y.dims[1] = (int64_t)mul_saturated((uint64_t)ch, (uint64_t)(b * b));
        y.dims[2] = h / b;
        y.dims[3] = w / b;
        // walk [N, b1, b2, C, H', W'] over the input viewed as [N, C, H', b1, W', b2]
        int64_t dims[6] = {n, b, b, ch, h / b, w / b}, strides[6] = {ch * h * w, w, 1, h * w, b * w, b};
        for (int i = 0; i < 6; ++i) copy.dims[i] = dims[i], copy.strides[i] = strides[i];
    }
    c.outputs[0] = y;
    if ((s = check_output_desc(c, 0)) != Status::Ok) return s;
    return set_strided_state(c, copy);
}

// ---- Concat, Split
struct AxisState {
    int64_t axis = 0;
    uint32_t count = 0;
    const int64_t* sizes = nullptr;   // Split: per output
};

inline Status prepare_concat(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 1, 0xffffffffu, c.num_inputs);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    const Attribute* a = c.attribute("axis");
    if (!a || a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'axis' is missing");
    int64_t axis;
    if (!normalize_axis(a->i, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)a->i, x.rank);
    TensorDesc y = x;
    uint64_t total = 0;
    for (uint32_t k = 0; k < c.num_inputs; ++k) {
        const TensorDesc& d = c.inputs[k];
        if (d.type != x.type)
            return c.fail(Status::InvalidArgument, "input %u is %s, input 0 %s", k, element_type_name(d.type),
                          element_type_name(x.type));
        if (d.rank != x.rank) return c.fail(Status::InvalidArgument, "input %u has rank %u, input 0 %u", k, d.rank, x.rank);
        for (int i = 0; i < x.rank; ++i)
            if (i != axis && d.dims[i] != x.dims[i])
                return c.fail(Status::InvalidArgument, "input %u has dimension %d = %lld, input 0 %lld", k, i,
                              (long long)d.dims[i], (long long)x.dims[i]);
        total += (uint64_t)d.dims[axis];
        if (total > kSaturated) total = kSaturated;
    }
    y.dims[axis] = (int64_t)total;
    c.outputs[0] = y;
    if ((s = check_output_desc(c, 0)) != Status::Ok) return s;
    AxisState* state = new_state<AxisState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    state->axis = axis;
    c.state = state;
    return Status::Ok;
}

inline Status run_concat(const RunContext& c) {
    const AxisState& st = *static_cast<const AxisState*>(c.state);
    const TensorDesc& y = c.outputs[0].desc;
    size_t bytes = element_size(y.type);
    uint64_t outer = dims_product(y, 0, (int)st.axis);
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    for (uint64_t o = 0; o < outer; ++o) {
        for (uint32_t k = 0; k < c.num_inputs; ++k) {
            const TensorDesc& d = c.inputs[k].desc;
            size_t run = (size_t)dims_product(d, (int)st.axis, d.rank) * bytes;
            if (run) std::memcpy(dst, c.inputs[k].as<const unsigned char>() + o * run, run);
            dst += run;
        }
    }
    return Status::Ok;
}

inline Status prepare_split(PrepareContext& c) {
    bool split_input = c.opset >= 13;
    Status s = check_tensor_inputs(c, 1, split_input ? 2 : 1, 1, 0);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    int64_t axis;
    int64_t axis_attribute = c.attribute_int("axis", 0);
    if (!normalize_axis(axis_attribute, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)axis_attribute, x.rank);
    int64_t d = x.dims[axis];
    uint32_t n = c.num_outputs;
    int64_t* sizes = c.arena->allocate_array<int64_t>(n);
    AxisState* state = new_state<AxisState>(c);
    if (!sizes || !state) return c.fail(Status::OutOfMemory, "out of memory");
    IntValues split;
    bool present = false;
    if ((s = axes_values(c, "split", 1, 13, &split, &present)) != Status::Ok) return s;
    const Attribute* num_outputs = c.attribute("num_outputs");
    if (present) {
        if (split.count != n)
            return c.fail(Status::InvalidArgument, "split has %llu sizes for %u outputs", (unsigned long long)split.count, n);
        uint64_t sum = 0;
        for (uint32_t i = 0; i < n; ++i) {
            sizes[i] = split[i];
            if (sizes[i] < 0) return c.fail(Status::InvalidArgument, "split[%u] = %lld", i, (long long)sizes[i]);
            sum += (uint64_t)sizes[i];
            if (sum > kSaturated) sum = kSaturated;
        }
        if (sum != (uint64_t)d)
            return c.fail(Status::InvalidArgument, "split sizes add up to %llu, dimension is %lld", (unsigned long long)sum,
                          (long long)d);
    } else if (num_outputs && num_outputs->kind == AttributeKind::Int) {   // opset 18: last chunk smaller
        if (num_outputs->i != (int64_t)n)
            return c.fail(Status::InvalidArgument, "num_outputs %lld, node has %u outputs", (long long)num_outputs->i, n);
        int64_t chunk = (d + (int64_t)n - 1) / (int64_t)n;
        if (d - chunk * (int64_t)(n - 1) < 0)
            return c.fail(Status::InvalidArgument, "dimension %lld does not split into %u chunks", (long long)d, n);
        for (uint32_t i = 0; i < n; ++i) sizes[i] = i + 1 < n ? chunk : d - chunk * (int64_t)(n - 1);
    } else {
        if (d % (int64_t)n != 0)
            return c.fail(Status::InvalidArgument, "dimension %lld does not split evenly into %u outputs", (long long)d, n);
        for (uint32_t i = 0; i < n; ++i) sizes[i] = d / (int64_t)n;
    }
    for (uint32_t i = 0; i < n; ++i) {
        c.outputs[i] = x;
        c.outputs[i].dims[axis] = sizes[i];
    }
    state->axis = axis;
    state->count = n;
    state->sizes = sizes;
    c.state = state;
    return Status::Ok;
}

inline Status run_split(const RunContext& c) {
    const AxisState& st = *static_cast<const AxisState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    size_t inner = (size_t)dims_product(x, (int)st.axis + 1, x.rank) * element_size(x.type);
    uint64_t outer = dims_product(x, 0, (int)st.axis);
    const unsigned char* src = c.inputs[0].as<const unsigned char>();
    for (uint64_t o = 0; o < outer; ++o) {
        for (uint32_t k = 0; k < st.count; ++k) {
            size_t run = (size_t)st.sizes[k] * inner;
            if (run) std::memcpy(c.outputs[k].as<unsigned char>() + o * run, src, run);
            src += run;
        }
    }
    return Status::Ok;
}

// ---- Gather
inline int64_t load_index(const void* data, ElementType type, uint64_t i) {
    return type == ElementType::Int64 ? static_cast<const int64_t*>(data)[i] : static_cast<const int32_t*>(data)[i];
}

inline Status prepare_gather(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 2, 2, 2);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& indices = c.inputs[1];
    if (indices.type != ElementType::Int64 && indices.type != ElementType::Int32)
        return c.fail(Status::Unsupported, "indices are %s (int64 or int32 expected)", element_type_name(indices.type));
    int64_t axis;
    int64_t axis_attribute = c.attribute_int("axis", 0);
    if (!normalize_axis(axis_attribute, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)axis_attribute, x.rank);
    if (x.rank - 1 + indices.rank > kMaxRank)
        return c.fail(Status::LimitExceeded, "output rank %d (at most %d)", x.rank - 1 + indices.rank, kMaxRank);
    if (const void* known = tensor_value(c, 1)) {
        uint64_t n = 0;
        (void)desc_elements(indices, &n);
        int64_t d = x.dims[axis];
        for (uint64_t i = 0; i < n; ++i) {
            int64_t k = load_index(known, indices.type, i);
            if (k < -d || k >= d)
                return c.fail(Status::InvalidArgument, "index %lld out of range for dimension %lld", (long long)k, (long long)d);
        }
    }
    TensorDesc y;
    y.type = x.type;
    for (int i = 0; i < axis; ++i) y.dims[y.rank++] = x.dims[i];
    for (int i = 0; i < indices.rank; ++i) y.dims[y.rank++] = indices.dims[i];
    for (int i = (int)axis + 1; i < x.rank; ++i) y.dims[y.rank++] = x.dims[i];
    c.outputs[0] = y;
    if ((s = check_output_desc(c, 0)) != Status::Ok) return s;
    AxisState* state = new_state<AxisState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    state->axis = axis;
    c.state = state;
    return Status::Ok;
}

inline Status run_gather(const RunContext& c) {
    const AxisState& st = *static_cast<const AxisState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    const TensorView& indices = c.inputs[1];
    uint64_t n = indices.elements();
    int64_t d = x.dims[st.axis];
    for (uint64_t i = 0; i < n; ++i) {   // check all first: no partial output on bad data
        int64_t k = load_index(indices.data, indices.desc.type, i);
        if (k < -d || k >= d)
            return c.fail(Status::InvalidArgument, "index %lld out of range for dimension %lld", (long long)k, (long long)d);
    }
    size_t inner = (size_t)dims_product(x, (int)st.axis + 1, x.rank) * element_size(x.type);
    uint64_t outer = dims_product(x, 0, (int)st.axis);
    const unsigned char* src = c.inputs[0].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    if (!inner) return Status::Ok;
    for (uint64_t o = 0; o < outer; ++o) {
        for (uint64_t i = 0; i < n; ++i) {
            int64_t k = load_index(indices.data, indices.desc.type, i);
            if (k < 0) k += d;
            std::memcpy(dst, src + ((uint64_t)o * (uint64_t)d + (uint64_t)k) * inner, inner);
            dst += inner;
        }
    }
    return Status::Ok;
}

// ---- Cast (and scalar conversions shared with Pad and ConstantOfShape)
inline uint16_t float_to_half(float f) {   // round to nearest even
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   // >= 65520 rounds to infinity
    if (a < 0x38800000u) {                                     // half subnormal or zero
        if (a <= 0x33000000u) return (uint16_t)sign;            // <= 2^-25 ties to 0
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t r = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (r & 1))) ++r;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u, m = r >> 13, rest = r & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (m & 1))) ++m;   // a carry moves into the exponent
    return (uint16_t)(sign | m);
}

inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0) {
        if (m == 0) {
            bits = sign;
        } else {
            e = 113;
            while (!(m & 0x400u)) { m <<= 1; --e; }
            bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);
    } else {
        bits = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

struct ScalarValue {
    bool floating = false;
    float f = 0;
    int64_t i = 0;
};

inline ScalarValue load_scalar(ElementType type, const void* data, uint64_t k) {
    ScalarValue v;
    switch (type) {
        case ElementType::Float32: v.floating = true; v.f = static_cast<const float*>(data)[k]; break;
        case ElementType::Float16: v.floating = true; v.f = half_to_float(static_cast<const uint16_t*>(data)[k]); break;
        case ElementType::Int64: v.i = static_cast<const int64_t*>(data)[k]; break;
        case ElementType::Int32: v.i = static_cast<const int32_t*>(data)[k]; break;
        case ElementType::Int8: v.i = static_cast<const int8_t*>(data)[k]; break;
        case ElementType::UInt8: v.i = static_cast<const uint8_t*>(data)[k]; break;
        case ElementType::Bool: v.i = static_cast<const uint8_t*>(data)[k] != 0; break;
        case ElementType::Undefined: break;
    }
    return v;
}

// Float to integer truncates toward zero and saturates (NaN gives 0): ONNX leaves out-of-range
// casts undefined, and a C++ cast out of range would be undefined behaviour.
inline int64_t float_to_integer(float f, int64_t lo, int64_t hi) {
    if (f != f) return 0;
    if (f <= (float)lo) return lo;
    if (f >= (float)hi) return hi;
    return (int64_t)f;
}

inline void store_scalar(ElementType type, void* data, uint64_t k, const ScalarValue& v) {
    // integer to narrower integer wraps (two's complement), as the C++ conversion does
    switch (type) {
        case ElementType::Float32: static_cast<float*>(data)[k] = v.floating ? v.f : (float)v.i; break;
        case ElementType::Float16:
            static_cast<uint16_t*>(data)[k] = float_to_half(v.floating ? v.f : (float)v.i);
            break;
        case ElementType::Int64:
            static_cast<int64_t*>(data)[k] = v.floating ? float_to_integer(v.f, INT64_MIN, INT64_MAX) : v.i;
            break;
        case ElementType::Int32:
            static_cast<int32_t*>(data)[k] =
                (int32_t)(v.floating ? float_to_integer(v.f, INT32_MIN, INT32_MAX) : (int64_t)(int32_t)(uint32_t)(uint64_t)v.i);
            break;
        case ElementType::Int8:
            static_cast<int8_t*>(data)[k] =
                (int8_t)(v.floating ? float_to_integer(v.f, -128, 127) : (int64_t)(int8_t)(uint8_t)(uint64_t)v.i);
            break;
        case ElementType::UInt8:
            static_cast<uint8_t*>(data)[k] = (uint8_t)(v.floating ? float_to_integer(v.f, 0, 255) : (int64_t)(uint8_t)(uint64_t)v.i);
            break;
        case ElementType::Bool: static_cast<uint8_t*>(data)[k] = (v.floating ? v.f != 0 : v.i != 0) ? 1 : 0; break;
        case ElementType::Undefined: break;
    }
}

// ONNX TensorProto.DataType to ElementType (Undefined: not one Tessel has).
inline ElementType onnx_element_type(int64_t t) {
    switch (t) {
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

inline Status prepare_cast(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 1, 1, 1);
    if (s != Status::Ok) return s;
    const Attribute* a = c.attribute("to");
    if (!a || a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'to' is missing");
    ElementType to = onnx_element_type(a->i);
    if (to == ElementType::Undefined) return c.fail(Status::Unsupported, "cast to ONNX data type %lld", (long long)a->i);
    c.outputs[0] = c.inputs[0];
    c.outputs[0].type = to;
    c.in_place = to == c.inputs[0].type;
    return Status::Ok;
}

inline Status run_cast(const RunContext& c) {
    ElementType from = c.inputs[0].desc.type, to = c.outputs[0].desc.type;
    if (from == to) return run_copy(c);
    uint64_t n = c.outputs[0].elements();
    for (uint64_t k = 0; k < n; ++k) store_scalar(to, c.outputs[0].data, k, load_scalar(from, c.inputs[0].data, k));
    return Status::Ok;
}

// ---- Pad
enum class PadMode : uint8_t { Constant, Reflect, Edge };
struct PadState {
    PadMode mode = PadMode::Constant;
    int64_t begin[kMaxRank] = {};
    unsigned char value[8] = {};     // constant in the data's type (when no input 2)
};

inline Status prepare_pad(PrepareContext& c) {
    bool inputs = c.opset >= 11;
    Status s = check_tensor_inputs(c, inputs ? 2 : 1, inputs ? 4 : 1, inputs ? 2 : 1);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    PadState* state = new_state<PadState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    StringView mode = c.attribute_string("mode", "constant");
    if (mode == StringView("reflect")) state->mode = PadMode::Reflect;
    else if (mode == StringView("edge")) state->mode = PadMode::Edge;
    else if (mode == StringView("wrap")) return c.fail(Status::Unsupported, "mode 'wrap'");
    else if (mode != StringView("constant"))
        return c.fail(Status::InvalidArgument, "mode '%.*s'", (int)mode.size, mode.data);
    IntValues pads, axes;
    bool present = true, has_axes = false;
    if (!inputs) {
        pads = int_attribute(c, "pads", &present);
        if (!present) return c.fail(Status::InvalidArgument, "attribute 'pads' is missing");
        ScalarValue v;
        v.floating = true;
        v.f = c.attribute_float("value", 0.0f);
        store_scalar(x.type, state->value, 0, v);
    } else {
        if ((s = int_input(c, 1, &pads)) != Status::Ok) return s;
        if (c.has_input(2)) {
            uint64_t n = 0;
            (void)desc_elements(c.inputs[2], &n);
            if (c.inputs[2].type != x.type || n != 1)
                return c.fail(Status::InvalidArgument, "constant_value must be one %s", element_type_name(x.type));
        }
        if ((has_axes = c.has_input(3)) && (s = int_input(c, 3, &axes)) != Status::Ok) return s;
    }
    uint64_t padded = has_axes ? axes.count : x.rank;
    if (pads.count != 2 * padded)
        return c.fail(Status::InvalidArgument, "%llu pads for %llu axes", (unsigned long long)pads.count, (unsigned long long)padded);
    TensorDesc y = x;
    bool seen[kMaxRank] = {};
    for (uint64_t i = 0; i < padded; ++i) {
        int64_t a = (int64_t)i;
        if (has_axes && !normalize_axis(axes[i], x.rank, &a))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)axes[i], x.rank);
        if (seen[a]) return c.fail(Status::InvalidArgument, "axis %lld repeated", (long long)a);
        seen[a] = true;
        int64_t b = pads[i], e = pads[i + padded], d = x.dims[a];
        if (b > (int64_t)kTensorOpMaxElements || e > (int64_t)kTensorOpMaxElements)
            return c.fail(Status::LimitExceeded, "pad %lld/%lld on axis %lld", (long long)b, (long long)e, (long long)a);
        if (b < -d || e < -d || d + b + e < 0)
            return c.fail(Status::InvalidArgument, "pads %lld/%lld remove more than dimension %lld", (long long)b,
                          (long long)e, (long long)d);
        if (state->mode == PadMode::Reflect && (b > d - 1 || e > d - 1) && (b > 0 || e > 0))
            return c.fail(Status::InvalidArgument, "reflect pads %lld/%lld must be below dimension %lld", (long long)b,
                          (long long)e, (long long)d);
        if (state->mode == PadMode::Edge && d == 0 && (b > 0 || e > 0))
            return c.fail(Status::InvalidArgument, "edge pads on an empty dimension");
        state->begin[a] = b;
        y.dims[a] = d + b + e;
    }
    c.outputs[0] = y;
    if ((s = check_output_desc(c, 0)) != Status::Ok) return s;
    c.state = state;
    return Status::Ok;
}

// Source index along one dimension, -1 for the constant.
inline int64_t pad_source(int64_t s, int64_t d, PadMode mode) {
    if (s >= 0 && s < d) return s;
    if (mode == PadMode::Constant) return -1;
    if (mode == PadMode::Edge) return s < 0 ? 0 : d - 1;
    return s < 0 ? -s : 2 * (d - 1) - s;
}

inline Status run_pad(const RunContext& c) {
    const PadState& st = *static_cast<const PadState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    const TensorDesc& y = c.outputs[0].desc;
    uint32_t bytes = (uint32_t)element_size(x.type);
    const unsigned char* value = st.value;
    if (c.num_inputs > 2 && c.inputs[2].data && c.inputs[2].desc.type == x.type) value = c.inputs[2].as<const unsigned char>();
    uint64_t total = c.outputs[0].elements();
    if (total == 0) return Status::Ok;
    const unsigned char* src = c.inputs[0].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    if (x.rank == 0) { std::memcpy(dst, src, bytes); return Status::Ok; }
    int64_t in_strides[kMaxRank];
    dense_strides(x, in_strides);
    int last = x.rank - 1;
    int64_t n = y.dims[last], d = x.dims[last];
    int64_t index[kMaxRank] = {};
    for (uint64_t row = 0, rows = total / (uint64_t)n; row < rows; ++row) {
        int64_t offset = 0;
        bool constant = false;
        for (int i = 0; i < last && !constant; ++i) {
            int64_t k = pad_source(index[i] - st.begin[i], x.dims[i], st.mode);
            if (k < 0) constant = true;
            offset += k * in_strides[i];
        }
        for (int64_t j = 0; j < n; ++j, dst += bytes) {
            int64_t k = constant ? -1 : pad_source(j - st.begin[last], d, st.mode);
            std::memcpy(dst, k < 0 ? value : src + (offset + k) * bytes, bytes);
        }
        for (int i = last - 1; i >= 0; --i) {
            if (++index[i] < y.dims[i]) break;
            index[i] = 0;
        }
    }
    return Status::Ok;
}

// ---- Shape, Constant, ConstantOfShape, Tile, Range
struct ShapeState {
    int64_t start = 0;
};

inline Status prepare_shape(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 1, 1, 1);
    if (s != Status::Ok) return s;
    int64_t rank = c.inputs[0].rank, start = 0, end = rank;
    if (c.opset >= 15) {
        start = c.attribute_int("start", 0);
        end = c.attribute_int("end", rank);
    }
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = start < 0 ? 0 : start > rank ? rank : start;
    end = end < 0 ? 0 : end > rank ? rank : end;
    ShapeState* state = new_state<ShapeState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    state->start = start;
    c.state = state;
    TensorDesc y;
    y.type = ElementType::Int64;
    y.rank = 1;
    y.dims[0] = end > start ? end - start : 0;
    c.outputs[0] = y;
    return Status::Ok;
}

inline Status run_shape(const RunContext& c) {
    const ShapeState& st = *static_cast<const ShapeState*>(c.state);
    for (int64_t i = 0; i < c.outputs[0].desc.dims[0]; ++i) c.outputs[0].as<int64_t>()[i] = c.inputs[0].desc.dims[st.start + i];
    return Status::Ok;
}

struct ConstantState {
    const void* data = nullptr;
    size_t bytes = 0;
};

inline Status prepare_constant(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 0, 0, 0);
    if (s != Status::Ok) return s;
    ConstantState* state = new_state<ConstantState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    TensorDesc y;
    uint32_t found = 0;
    for (const Attribute* a = c.node_ref().attributes; a; a = a->next) {
        if (a->name == StringView("value") && a->kind == AttributeKind::Tensor && a->tensor) {
            y = a->tensor->desc;
            uint64_t n = 0;
            if (y.rank > kMaxRank || y.type == ElementType::Undefined || (uint32_t)y.type > (uint32_t)ElementType::Bool ||
                !desc_elements(y, &n) || n > kSaturated || n * element_size(y.type) > a->tensor->bytes ||
                (n && !a->tensor->data))
                return c.fail(Status::InvalidArgument, "attribute 'value' is a malformed tensor");
            state->data = a->tensor->data;
            state->bytes = (size_t)(n * element_size(y.type));
        } else if (a->name == StringView("value_float") && a->kind == AttributeKind::Float) {
            y = TensorDesc();
            y.type = ElementType::Float32;
            state->data = &a->f;
            state->bytes = sizeof(float);
        } else if (a->name == StringView("value_floats") && a->kind == AttributeKind::Floats) {
            y = TensorDesc();
            y.type = ElementType::Float32;
            y.rank = 1;
            y.dims[0] = (int64_t)a->floats.size;
            state->data = a->floats.data;
            state->bytes = a->floats.size * sizeof(float);
        } else if (a->name == StringView("value_int") && a->kind == AttributeKind::Int) {
            y = TensorDesc();
            y.type = ElementType::Int64;
            state->data = &a->i;
            state->bytes = sizeof(int64_t);
        } else if (a->name == StringView("value_ints") && a->kind == AttributeKind::Ints) {
            y = TensorDesc();
            y.type = ElementType::Int64;
            y.rank = 1;
            y.dims[0] = (int64_t)a->ints.size;
            state->data = a->ints.data;
            state->bytes = a->ints.size * sizeof(int64_t);
        } else if (a->name == StringView("value_string") || a->name == StringView("value_strings") ||
                   a->name == StringView("sparse_value")) {
            return c.fail(Status::Unsupported, "attribute '%.*s'", (int)a->name.size, a->name.data);
        } else {
            continue;
        }
        ++found;
    }
    if (found != 1) return c.fail(Status::InvalidArgument, "needs exactly one value attribute, has %u", found);
    c.outputs[0] = y;
    c.state = state;
    return check_output_desc(c, 0);
}

inline Status run_constant(const RunContext& c) {
    const ConstantState& st = *static_cast<const ConstantState*>(c.state);
    if (st.bytes) std::memcpy(c.outputs[0].data, st.data, st.bytes);
    return Status::Ok;
}

struct FillState {
    unsigned char value[8] = {};
};

inline Status prepare_constant_of_shape(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 1, 1, 1);
    if (s != Status::Ok) return s;
    IntValues shape;
    if ((s = int_input(c, 0, &shape)) != Status::Ok) return s;
    if (shape.count > (uint64_t)kMaxRank)
        return c.fail(Status::LimitExceeded, "shape has %llu dimensions", (unsigned long long)shape.count);
    FillState* state = new_state<FillState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    TensorDesc y;
    y.type = ElementType::Float32;
    if (const Attribute* a = c.attribute("value")) {
        uint64_t n = 0;
        if (a->kind != AttributeKind::Tensor || !a->tensor || !desc_elements(a->tensor->desc, &n) || n != 1 ||
            a->tensor->desc.type == ElementType::Undefined || (uint32_t)a->tensor->desc.type > (uint32_t)ElementType::Bool ||
            a->tensor->bytes < element_size(a->tensor->desc.type) || !a->tensor->data)
            return c.fail(Status::InvalidArgument, "attribute 'value' must be a one-element tensor");
        y.type = a->tensor->desc.type;
        std::memcpy(state->value, a->tensor->data, element_size(y.type));
    }
    y.rank = (uint8_t)shape.count;
    for (int i = 0; i < y.rank; ++i) y.dims[i] = shape[(uint64_t)i];
    c.outputs[0] = y;
    if ((s = check_output_desc(c, 0)) != Status::Ok) return s;
    c.state = state;
    return Status::Ok;
}

inline Status run_constant_of_shape(const RunContext& c) {
    const FillState& st = *static_cast<const FillState*>(c.state);
    size_t bytes = element_size(c.outputs[0].desc.type);
    uint64_t n = c.outputs[0].elements();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    for (uint64_t k = 0; k < n; ++k) std::memcpy(dst + k * bytes, st.value, bytes);
    return Status::Ok;
}

inline Status prepare_tile(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 2, 2, 2);
    if (s != Status::Ok) return s;
    const TensorDesc& x = c.inputs[0];
    IntValues repeats;
    if ((s = int_input(c, 1, &repeats)) != Status::Ok) return s;
    if (repeats.count != x.rank)
        return c.fail(Status::InvalidArgument, "%llu repeats for rank %u", (unsigned long long)repeats.count, x.rank);
    TensorDesc y = x;
    for (int i = 0; i < x.rank; ++i) {
        int64_t r = repeats[(uint64_t)i];
        if (r < 0) return c.fail(Status::InvalidArgument, "repeats[%d] = %lld", i, (long long)r);
        y.dims[i] = (int64_t)mul_saturated((uint64_t)x.dims[i], (uint64_t)r);
    }
    c.outputs[0] = y;
    return check_output_desc(c, 0);
}

inline Status run_tile(const RunContext& c) {
    const TensorDesc& x = c.inputs[0].desc;
    const TensorDesc& y = c.outputs[0].desc;
    uint32_t bytes = (uint32_t)element_size(x.type);
    uint64_t total = c.outputs[0].elements();
    if (total == 0) return Status::Ok;
    const unsigned char* src = c.inputs[0].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    if (x.rank == 0) { std::memcpy(dst, src, bytes); return Status::Ok; }
    int64_t in_strides[kMaxRank];
    dense_strides(x, in_strides);
    int last = x.rank - 1;
    size_t run = (size_t)x.dims[last] * bytes;
    int64_t repeat = y.dims[last] / x.dims[last];
    int64_t index[kMaxRank] = {};
    for (uint64_t row = 0, rows = total / (uint64_t)y.dims[last]; row < rows; ++row) {
        int64_t offset = 0;
        for (int i = 0; i < last; ++i) offset += (index[i] % x.dims[i]) * in_strides[i];
        for (int64_t r = 0; r < repeat; ++r, dst += run) std::memcpy(dst, src + offset * bytes, run);
        for (int i = last - 1; i >= 0; --i) {
            if (++index[i] < y.dims[i]) break;
            index[i] = 0;
        }
    }
    return Status::Ok;
}

inline Status prepare_range(PrepareContext& c) {
    Status s = check_tensor_inputs(c, 3, 3, 3);
    if (s != Status::Ok) return s;
    ElementType type = c.inputs[0].type;
    for (uint32_t i = 0; i < 3; ++i) {
        uint64_t n = 0;
        (void)desc_elements(c.inputs[i], &n);
        if (c.inputs[i].type != type)
            return c.fail(Status::InvalidArgument, "input %u is %s, input 0 %s", i, element_type_name(c.inputs[i].type),
                          element_type_name(type));
        if (n != 1) return c.fail(Status::InvalidArgument, "input %u must be a scalar", i);
    }
    if (type != ElementType::Float32 && type != ElementType::Int64 && type != ElementType::Int32)
        return c.fail(Status::Unsupported, "inputs are %s", element_type_name(type));
    for (uint32_t i = 0; i < 3; ++i)
        if (!tensor_value(c, i)) return c.fail(Status::Unsupported, "data-dependent shape: input %u", i);
    uint64_t count = 0;
    if (type == ElementType::Float32) {
        float start = *static_cast<const float*>(c.values[0]), limit = *static_cast<const float*>(c.values[1]),
              delta = *static_cast<const float*>(c.values[2]);
        if (delta == 0 || start != start || limit != limit || delta != delta)
            return c.fail(Status::InvalidArgument, "start %g, limit %g, delta %g", (double)start, (double)limit, (double)delta);
        double n = std::ceil((double)(limit - start) / (double)delta);
        if (n != n || n > (double)kTensorOpMaxElements)
            return c.fail(Status::LimitExceeded, "range of %g elements", n);
        count = n > 0 ? (uint64_t)n : 0;
    } else {
        int64_t start = load_index(c.values[0], type, 0), limit = load_index(c.values[1], type, 0),
                delta = load_index(c.values[2], type, 0);
        if (delta == 0) return c.fail(Status::InvalidArgument, "delta 0");
        uint64_t diff = 0, step = 0;
        if (delta > 0 && limit > start) diff = (uint64_t)limit - (uint64_t)start, step = (uint64_t)delta;
        if (delta < 0 && limit < start) diff = (uint64_t)start - (uint64_t)limit, step = (uint64_t)0 - (uint64_t)delta;
        count = diff ? (diff - 1) / step + 1 : 0;
    }
    if (count > kTensorOpMaxElements)
        return c.fail(Status::LimitExceeded, "range of %llu elements", (unsigned long long)count);
    TensorDesc y;
    y.type = type;
    y.rank = 1;
    y.dims[0] = (int64_t)count;
    c.outputs[0] = y;
    return Status::Ok;
}

template <class T>
void fill_range(T* y, uint64_t n, T start, T delta) {
    T v = start;
    for (uint64_t k = 0; k < n; ++k) {
        y[k] = v;
        if (k + 1 < n) v = (T)(v + delta);   // as the ONNX function: accumulate
    }
}

inline Status run_range(const RunContext& c) {
    uint64_t n = c.outputs[0].elements();
    switch (c.outputs[0].desc.type) {
        case ElementType::Float32:
            fill_range(c.outputs[0].as<float>(), n, *c.inputs[0].as<const float>(), *c.inputs[2].as<const float>());
            break;
        case ElementType::Int64:
            fill_range(c.outputs[0].as<int64_t>(), n, *c.inputs[0].as<const int64_t>(), *c.inputs[2].as<const int64_t>());
            break;
        default:
            fill_range(c.outputs[0].as<int32_t>(), n, *c.inputs[0].as<const int32_t>(), *c.inputs[2].as<const int32_t>());
            break;
    }
    return Status::Ok;
}

// ---- Where, comparisons, logical ops, integer arithmetic, variadic Max/Min/Sum/Mean.
enum class TensorOp : uint8_t {
    Add, Sub, Mul, Div, Mod, Neg, Abs, Max, Min, Sum, Mean,
    Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not, And, Or, Xor, Where
};

struct TypedState {
    RunFn elementwise = nullptr;         // set: the float32 elementwise kernel runs with inner_state
    const void* inner_state = nullptr;
    TensorOp op = TensorOp::Add;
    ElementType type = ElementType::Undefined;   // of the inputs (Where: of the branches)
    bool fmod = false;
};

inline bool tensor_op_from_name(StringView name, TensorOp* op) {
    static const char* const kNames[] = {"Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Sum", "Mean",
                                         "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And",
                                         "Or", "Xor", "Where"};
    for (uint32_t i = 0; i < sizeof kNames / sizeof kNames[0]; ++i)
        if (name == StringView(kNames[i])) { *op = (TensorOp)i; return true; }
    return false;
}

// NumPy broadcast of two descs (out may be a). Not broadcast_descs: a second caller of it
// makes GCC stop inlining it into prepare_elementwise and warn there at -O2.
inline bool broadcast_pair(const TensorDesc& a, const TensorDesc& b, TensorDesc* out) {
    TensorDesc r;
    r.rank = a.rank > b.rank ? a.rank : b.rank;
    for (int i = 0; i < r.rank; ++i) {
        int ja = i - (r.rank - a.rank), jb = i - (r.rank - b.rank);
        int64_t da = ja >= 0 ? a.dims[ja] : 1, db = jb >= 0 ? b.dims[jb] : 1;
        if (da != db && da != 1 && db != 1) return false;
        r.dims[i] = da == 1 ? db : da;
    }
    r.type = a.type;
    *out = r;
    return true;
}

inline Status set_typed_state(PrepareContext& c, const TypedState& st) {
    TypedState* state = new_state<TypedState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    *state = st;
    c.state = state;
    return Status::Ok;
}

// The float32 path of a replaced entry: the elementwise kernel of kBuiltinKernels, unchanged
// (found by name, so the float path is whatever that table runs for the op).
inline Status delegate_elementwise(PrepareContext& c, TensorOp op) {
    const OpKernel* kernel = nullptr;
    for (const OpKernel& k : kBuiltinKernels)
        if (StringView(k.op) == c.node_ref().op) kernel = &k;
    if (!kernel) return c.fail(Status::Unsupported, "no float32 kernel");
    Status s = kernel->prepare(c);
    if (s != Status::Ok) return s;
    TypedState st;
    st.elementwise = kernel->run;
    st.inner_state = c.state;
    st.op = op;
    st.type = ElementType::Float32;
    return set_typed_state(c, st);
}

inline Status prepare_typed(PrepareContext& c) {
    TensorOp op;
    if (!tensor_op_from_name(c.node_ref().op, &op)) return c.fail(Status::Unsupported, "not a typed tensor operation");
    bool unary = op == TensorOp::Neg || op == TensorOp::Abs || op == TensorOp::Not;
    bool variadic = op == TensorOp::Max || op == TensorOp::Min || op == TensorOp::Sum || op == TensorOp::Mean;
    uint32_t least = unary ? 1 : op == TensorOp::Where ? 3 : variadic ? 1 : 2;
    uint32_t most = variadic ? 0xffffffffu : least;
    Status s = check_tensor_inputs(c, least, most, c.num_inputs);
    if (s != Status::Ok) return s;
    uint32_t first = op == TensorOp::Where ? 1 : 0;
    ElementType type = c.inputs[first].type;
    for (uint32_t i = first + 1; i < c.num_inputs; ++i)
        if (c.inputs[i].type != type)
            return c.fail(Status::InvalidArgument, "input %u is %s, input %u %s", i, element_type_name(c.inputs[i].type),
                          first, element_type_name(type));
    bool is_float = type == ElementType::Float32, is_int = type == ElementType::Int64 || type == ElementType::Int32;
    TypedState st;
    st.op = op;
    st.type = type;
    bool supported = false;
    switch (op) {
        case TensorOp::Add: case TensorOp::Sub: case TensorOp::Mul: case TensorOp::Div: case TensorOp::Neg:
        case TensorOp::Abs:
            if (is_float) return delegate_elementwise(c, op);
            supported = is_int;
            break;
        case TensorOp::Max: case TensorOp::Min:
            if (is_float && c.num_inputs == 2) return delegate_elementwise(c, op);
            supported = is_float || is_int;
            break;
        case TensorOp::Sum: supported = is_float || is_int; break;
        case TensorOp::Mean: supported = is_float; break;
        case TensorOp::Mod:
            st.fmod = c.attribute_int("fmod", 0) != 0;
            if (is_float && !st.fmod) return c.fail(Status::InvalidArgument, "float Mod needs fmod = 1");
            supported = is_float || is_int;
            break;
        case TensorOp::Equal:
            supported = type != ElementType::Float16;
            break;
        case TensorOp::Less: case TensorOp::Greater: case TensorOp::LessOrEqual: case TensorOp::GreaterOrEqual:
            supported = type != ElementType::Float16 && type != ElementType::Bool;
            break;
        case TensorOp::Not: case TensorOp::And: case TensorOp::Or: case TensorOp::Xor:
            supported = type == ElementType::Bool;
            break;
        case TensorOp::Where:
            if (c.inputs[0].type == ElementType::Float32) {   // float condition: the elementwise Select
                if (is_float) return delegate_elementwise(c, op);
                return c.fail(Status::Unsupported, "a float32 condition with %s branches", element_type_name(type));
            }
            if (c.inputs[0].type != ElementType::Bool)
                return c.fail(Status::Unsupported, "condition is %s (bool expected)", element_type_name(c.inputs[0].type));
            supported = true;
            break;
    }
    if (!supported) return c.fail(Status::Unsupported, "inputs are %s", element_type_name(type));
    // every input takes part in the broadcast
    TensorDesc shape = c.inputs[0];
    for (uint32_t i = 1; i < c.num_inputs; ++i)
        if (!broadcast_pair(shape, c.inputs[i], &shape))
            return c.fail(Status::InvalidArgument, "input shapes do not broadcast");
    bool boolean = op >= TensorOp::Equal && op <= TensorOp::Xor;
    shape.type = boolean ? ElementType::Bool : type;
    c.outputs[0] = shape;
    if ((s = check_output_desc(c, 0)) != Status::Ok) return s;
    return set_typed_state(c, st);
}

template <class T, class U>   // U: T's unsigned twin, so overflow wraps instead of being undefined
T integer_binary(TensorOp op, T a, T b, bool fmod, bool* bad) {
    switch (op) {
        case TensorOp::Add: return (T)(U)((U)a + (U)b);
        case TensorOp::Sub: return (T)(U)((U)a - (U)b);
        case TensorOp::Mul: return (T)(U)((U)a * (U)b);
        case TensorOp::Div:   // truncates toward zero (as onnxruntime)
            if (b == 0) { *bad = true; return 0; }
            return b == -1 ? (T)(U)((U)0 - (U)a) : (T)(a / b);
        case TensorOp::Mod: {
            if (b == 0) { *bad = true; return 0; }
            if (b == -1) return 0;
            T r = (T)(a % b);
            if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);   // sign of the divisor
            return r;
        }
        case TensorOp::Max: case TensorOp::Sum: return op == TensorOp::Max ? (a > b ? a : b) : (T)(U)((U)a + (U)b);
        case TensorOp::Min: return a < b ? a : b;
        default: return 0;
    }
}

inline float float_binary(TensorOp op, float a, float b) {
    float args[2] = {a, b};
    switch (op) {
        case TensorOp::Mod: return std::fmod(a, b);
        case TensorOp::Max: return snippet_evaluate(SnippetOp::Max, args, 0, 0, false);
        case TensorOp::Min: return snippet_evaluate(SnippetOp::Min, args, 0, 0, false);
        default: return a + b;   // Sum, Mean
    }
}

template <class T>
bool compare(TensorOp op, T a, T b) {
    switch (op) {
        case TensorOp::Equal: return a == b;
        case TensorOp::Less: return a < b;
        case TensorOp::Greater: return a > b;
        case TensorOp::LessOrEqual: return a <= b;
        default: return a >= b;
    }
}

template <class T>
void run_compare(const RunContext& c, TensorOp op) {
    const TensorDesc* descs[2] = {&c.inputs[0].desc, &c.inputs[1].desc};
    const T* a = c.inputs[0].as<const T>();
    const T* b = c.inputs[1].as<const T>();
    uint8_t* y = c.outputs[0].as<uint8_t>();
    for_each_broadcast(c.outputs[0].desc, descs, 2, [&](uint64_t e, const int64_t* o) { y[e] = compare(op, a[o[0]], b[o[1]]) ? 1 : 0; });
}

// Variadic and binary ops fold left over the inputs: y = x0, then y = f(y, xk).
template <class T, class F>
void run_fold(const RunContext& c, F f) {
    const TensorDesc& out = c.outputs[0].desc;
    T* y = c.outputs[0].as<T>();
    const TensorDesc* first[1] = {&c.inputs[0].desc};
    const T* x0 = c.inputs[0].as<const T>();
    for_each_broadcast(out, first, 1, [&](uint64_t e, const int64_t* o) { y[e] = x0[o[0]]; });
    for (uint32_t k = 1; k < c.num_inputs; ++k) {
        const TensorDesc* pair[2] = {&out, &c.inputs[k].desc};
        const T* x = c.inputs[k].as<const T>();
        for_each_broadcast(out, pair, 2, [&](uint64_t e, const int64_t* o) { y[e] = f(y[e], x[o[1]]); });
    }
}

template <class T, class U>
Status run_integer(const RunContext& c, const TypedState& st) {
    uint64_t n = c.outputs[0].elements();
    T* y = c.outputs[0].as<T>();
    if (st.op == TensorOp::Neg || st.op == TensorOp::Abs) {
        const T* x = c.inputs[0].as<const T>();
        for (uint64_t k = 0; k < n; ++k)
            y[k] = st.op == TensorOp::Neg || x[k] < 0 ? (T)(U)((U)0 - (U)x[k]) : x[k];
        return Status::Ok;
    }
    if (c.num_inputs == 2 && (st.op == TensorOp::Div || st.op == TensorOp::Mod)) {   // check divisors first
        uint64_t m = c.inputs[1].elements();
        for (uint64_t k = 0; k < m; ++k)
            if (c.inputs[1].as<const T>()[k] == 0) return c.fail(Status::InvalidArgument, "integer division by zero");
    }
    bool bad = false;
    run_fold<T>(c, [&](T a, T b) { return integer_binary<T, U>(st.op, a, b, st.fmod, &bad); });
    if (bad) return c.fail(Status::InvalidArgument, "integer division by zero");
    return Status::Ok;
}

inline Status run_where(const RunContext& c) {
    const TensorDesc* descs[3] = {&c.inputs[0].desc, &c.inputs[1].desc, &c.inputs[2].desc};
    const uint8_t* condition = c.inputs[0].as<const uint8_t>();
    const unsigned char* a = c.inputs[1].as<const unsigned char>();
    const unsigned char* b = c.inputs[2].as<const unsigned char>();
    unsigned char* y = c.outputs[0].as<unsigned char>();
    size_t bytes = element_size(c.outputs[0].desc.type);
    for_each_broadcast(c.outputs[0].desc, descs, 3, [&](uint64_t e, const int64_t* o) {
        std::memcpy(y + e * bytes, condition[o[0]] ? a + o[1] * (int64_t)bytes : b + o[2] * (int64_t)bytes, bytes);
    });
    return Status::Ok;
}

inline Status run_typed(const RunContext& c) {
    const TypedState& st = *static_cast<const TypedState*>(c.state);
    if (st.elementwise) {
        RunContext inner = c;
        inner.state = st.inner_state;
        return st.elementwise(inner);
    }
    switch (st.op) {
        case TensorOp::Where: return run_where(c);
        case TensorOp::Equal: case TensorOp::Less: case TensorOp::Greater: case TensorOp::LessOrEqual:
        case TensorOp::GreaterOrEqual:
            switch (st.type) {
                case ElementType::Float32: run_compare<float>(c, st.op); break;
                case ElementType::Int64: run_compare<int64_t>(c, st.op); break;
                case ElementType::Int32: run_compare<int32_t>(c, st.op); break;
                case ElementType::Int8: run_compare<int8_t>(c, st.op); break;
                default: run_compare<uint8_t>(c, st.op); break;   // UInt8, Bool (0 or 1)
            }
            return Status::Ok;
        case TensorOp::Not: {
            uint64_t n = c.outputs[0].elements();
            for (uint64_t k = 0; k < n; ++k) c.outputs[0].as<uint8_t>()[k] = c.inputs[0].as<const uint8_t>()[k] ? 0 : 1;
            return Status::Ok;
        }
        case TensorOp::And: case TensorOp::Or: case TensorOp::Xor: {
            TensorOp op = st.op;
            run_fold<uint8_t>(c, [op](uint8_t a, uint8_t b) -> uint8_t {
                bool x = a != 0, y = b != 0;
                return (op == TensorOp::And ? x && y : op == TensorOp::Or ? x || y : x != y) ? 1 : 0;
            });
            return Status::Ok;
        }
        default: break;
    }
    if (st.type == ElementType::Int64) return run_integer<int64_t, uint64_t>(c, st);
    if (st.type == ElementType::Int32) return run_integer<int32_t, uint32_t>(c, st);
    TensorOp op = st.op;
    run_fold<float>(c, [op](float a, float b) { return float_binary(op, a, b); });
    if (op == TensorOp::Mean) {
        uint64_t n = c.outputs[0].elements();
        float count = (float)c.num_inputs;
        for (uint64_t k = 0; k < n; ++k) c.outputs[0].as<float>()[k] /= count;
    }
    return Status::Ok;
}

const OpKernel kTensorKernels[] = {
    {"Reshape", prepare_reshape, run_copy},
    {"Flatten", prepare_flatten, run_copy},
    {"Squeeze", prepare_squeeze, run_copy},
    {"Unsqueeze", prepare_unsqueeze, run_copy},
    {"Transpose", prepare_transpose, run_strided_copy},
    {"Slice", prepare_slice, run_strided_copy},
    {"Expand", prepare_expand, run_strided_copy},
    {"DepthToSpace", prepare_depth_space, run_strided_copy},
    {"SpaceToDepth", prepare_depth_space, run_strided_copy},
    {"Concat", prepare_concat, run_concat},
    {"Split", prepare_split, run_split},
    {"Gather", prepare_gather, run_gather},
    {"Pad", prepare_pad, run_pad},
    {"Cast", prepare_cast, run_cast},
    {"Shape", prepare_shape, run_shape},
    {"Constant", prepare_constant, run_constant},
    {"ConstantOfShape", prepare_constant_of_shape, run_constant_of_shape},
    {"Tile", prepare_tile, run_tile},
    {"Range", prepare_range, run_range},
    {"Where", prepare_typed, run_typed},
    {"Equal", prepare_typed, run_typed},
    {"Less", prepare_typed, run_typed},
    {"Greater", prepare_typed, run_typed},
    {"LessOrEqual", prepare_typed, run_typed},
    {"GreaterOrEqual", prepare_typed, run_typed},
    {"Not", prepare_typed, run_typed},
    {"And", prepare_typed, run_typed},
    {"Or", prepare_typed, run_typed},
    {"Xor", prepare_typed, run_typed},
    {"Add", prepare_typed, run_typed},
    {"Sub", prepare_typed, run_typed},
    {"Mul", prepare_typed, run_typed},
    {"Div", prepare_typed, run_typed},
    {"Mod", prepare_typed, run_typed},
    {"Neg", prepare_typed, run_typed},
    {"Abs", prepare_typed, run_typed},
    {"Max", prepare_typed, run_typed},
    {"Min", prepare_typed, run_typed},
    {"Sum", prepare_typed, run_typed},
    {"Mean", prepare_typed, run_typed},
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
