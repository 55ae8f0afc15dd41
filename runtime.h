/* runtime.h - Tessel: tensors, device plugin API, CPU and TEMPLATE devices, HETERO, compiled
   models, memory planner, infer requests, ONNX reader and writer, profiling.

   Do this
   -------
       #define TESSEL_IMPLEMENTATION      // in exactly one .cpp file
       #include "runtime.h"

       tessel::Model model;                               // a graph plus its inputs and outputs
       if (model.read_onnx_file("model.onnx") != tessel::Status::Ok) puts(model.last_error());
       tessel::Core core;                                 // CPU and TEMPLATE are built in
       tessel::CompiledModel compiled;
       tessel::ConfigEntry config[] = {{"TEMPLATE:SUPPORTED_OPS", "Conv,Relu"}};
       if (core.compile_model(model, "HETERO:TEMPLATE,CPU", config, &compiled) != tessel::Status::Ok)
           puts(core.last_error());
       tessel::InferRequest request;                      // one per thread; several may run at once
       compiled.create_request(&request);
       float* x = request.input(0).data_as<float>();      // or set_input(0, a view of your memory)
       request.infer();                                   // allocates nothing
       const tessel::Tensor& y = request.output(0);

   Models are built in code too (Model::add_input / add_constant / add_node / add_output, then
   finalize()) and written as ONNX with write_onnx().

   Contents (search for `// >>name`)
   ---------------------------------
   >>tensor                           Tensor: owning or a view
   >>model                            Model: a graph with inputs and outputs; building one in code
   >>op kernels                       the op contract: PrepareContext, RunContext, OpKernel
   >>limits                           Limits: nodes, rank, elements, arena, file and folded bytes
   >>device                           the device plugin API: Device, DeviceProgram, ProgramStep
   >>prepared model                   PreparedModel: what every device compiles
   >>core                             Core: compile_model, reshape, import_model, query_model
   >>compiled model                   CompiledModel: requests, export, placement
   >>gpu                              gpu_build_check: an OpenCL C program built on the GPU device
   >>infer request                    InferRequest: inputs, outputs, infer, start_async
   >>tensor files                     TensorProto files; write_onnx
   >>templates                        create<T>, destroy<T>
   >>implementation                   (TESSEL_IMPLEMENTATION from here on)
   >>tensor implementation            Tensor, element values
   >>model implementation             Model building and interface checks
   >>op kernel contexts               attribute access, fail, parallel_for
   >>threads                          the request's thread pool
   >>prepare                          static shapes, constant folding, Conv+BatchNormalization
   >>builtin devices                  config parsing shared by CPU and TEMPLATE
   >>reference program                a program of reference kernel steps
   >>template device                  TEMPLATE: reference kernels, SUPPORTED_OPS
   >>cpu device                       CPU: fused elementwise islands (snippets.h)
   >>opencl loader                    libOpenCL.so.1 by dlopen: OpenClApi, error names
   >>gpu device                       GPU: OpenCL islands printed from the body IR, availability, metrics
   >>compiled model implementation    CompiledModel::Impl, write_summary
   >>dynamic shapes                   free input dims: a plan per input-shape signature, cached
   >>memory plan                      value lifetimes and offsets in one arena per request
   >>hetero transfers                 subgraph boundaries, transfers, execution order
   >>core implementation              device registry
   >>compile                          device strings, config, compile_model, reshape, query_model
   >>infer request implementation     create_request, binding, infer, async
   >>blob format                      blob layout, writer and reader
   >>blob export                      CompiledModel::export_model
   >>blob import                      Core::import_model
   >>ops                              reference kernels: broadcasting and shared helpers
   >>elementwise ops                  the snippet ops (unary, binary, Where)
   >>nn ops                           helpers shared by the nn kernels
   >>blocked gemm                     the portable GEMM under Conv, ConvTranspose, MatMul, Gemm;
                                      CpuGemmState (the CPU device's steps on snippets.h's Gemm)
   >>windows                          kernel, stride, dilation, pads for Conv and pools
   >>conv                             Conv (im2col + GEMM); run_cpu_conv on the JIT GEMM
   >>conv transpose                   ConvTranspose (GEMM + col2im); run_cpu_conv_transpose
   >>matmul                           MatMul; run_cpu_matmul on the JIT GEMM
   >>gemm                             Gemm; run_cpu_gemm; cpu_gemm_step picks the CPU's kernel
   >>batch normalization              BatchNormalization
   >>instance normalization           InstanceNormalization
   >>layer normalization              LayerNormalization
   >>pooling                          MaxPool, AveragePool
   >>global pooling                   GlobalAveragePool, GlobalMaxPool
   >>softmax                          Softmax, LogSoftmax
   >>opencl kernels                   the GPU's node kernels as OpenCL C: Conv, Gemm, pools, Softmax
   >>reductions                       ReduceMean/Sum/Max/Min/Prod/L2
   >>argmax                           ArgMax, ArgMin
   >>resize                           Resize
   >>tensor ops                       shape, data movement, integer and logical ops: helpers
   >>strided copy                     the copy under Transpose, Slice, Expand, ...
   >>shape ops                        Reshape, Flatten, Squeeze, Unsqueeze
   >>data movement                    Transpose, Slice, Expand, DepthToSpace, SpaceToDepth
   >>concat and split                 Concat, Split
   >>gather                           Gather
   >>cast                             Cast, BitCast, half/bfloat16 and scalar conversions
   >>pad                              Pad
   >>constants and ranges             Shape, Constant, ConstantOfShape, Tile, Range
   >>integer and logical ops          Where, comparisons, logical, integer, Max/Min/Sum/Mean
   >>trigonometric and other unary ops  Sin..Atanh, ThresholdedRelu, Shrink, Swish, IsInf, IsNaN
   >>more reductions                  ReduceSumSquare/L1/LogSum/LogSumExp
   >>bitwise ops                      BitwiseAnd/Or/Xor/Not, BitShift
   >>float32 compute                  float16/bfloat16/double through float32-only kernels
   >>size and like ops                Size, CastLike, EyeLike
   >>matrix and scan ops              Trilu, Hardmax, CumSum
   >>math kernel table                kMathKernels: the ops of the sections above
   >>gather and scatter               GatherElements, GatherND, ScatterElements, ScatterND
   >>one hot and reverse sequence     OneHot, ReverseSequence
   >>top-k                            TopK
   >>more normalizations              LpNormalization, MeanVarianceNormalization, RMS, Group
   >>loss ops                         NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
   >>control flow                     If, Loop, Scan: bodies compiled into programs the node runs
   >>attention                        Attention (scaled dot-product, GQA, masks, KV cache)
   >>rotary embedding, swiglu and tensor scatter  RotaryEmbedding, SwiGLU, TensorScatter
   >>linear attention and causal conv  LinearAttention, CausalConvWithState; kAttentionKernels
   >>recurrent layers                 RNN, GRU, LSTM
   >>signal ops                       DFT, STFT, Hann/Hamming/BlackmanWindow, MelWeightMatrix
   >>grid sample and affine grid      GridSample, AffineGrid
   >>col2im and deform conv           Col2Im, DeformConv
   >>roi align                        RoiAlign
   >>center crop pad, max unpool and upsample  CenterCropPad, MaxUnpool, Upsample
   >>lp pool and lrn                  LpPool, LRN (kSpatialKernels: the sections from grid sample)
   >>quantization ops                 QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, integer MatMul/Conv
   >>compress                         Compress (constant condition)
   >>more math ops                    Celu, CumProd, Det, Einsum
   >>tfidf vectorizer                 TfIdfVectorizer (integer n-grams); kQuantKernels
   >>op versions                      ONNX op versions from opset 18 on (and legacy ones): kept or refused
   >>op kernel table                  builtin_op_kernels, find_builtin_kernel
   >>onnx reader                      what is read and how it maps to a Model
   >>protobuf wire format             fields, varints, packed lists
   >>onnx tensors                     TensorProto: types, shape, data
   >>onnx external data               external data inside the model's folder
   >>onnx names and nodes             name tables, NodeProto, ValueInfoProto
   >>onnx graph                       GraphProto to Model
   >>onnx model and files             ModelProto, files, TensorProto files
   >>onnx writer                      write_onnx, write_tensor_proto

   Pipeline
   --------
   compile_model: the common transformations (static shapes from the inputs or InputShape;
   every node whose inputs are known at compile time, and Shape/Size, evaluated once and
   folded into a Constant; a BatchNormalization after a Conv with constant parameters folded
   into the Conv's weights; nodes that only fed folded ones dropped) give a PreparedModel with
   the original node names. Each device of the list answers query_model; every node goes to
   the first device that supports it (a user affinity wins); hetero.h partitions the graph
   (HETERO_ALGORITHM rollback|levels|waves, HETERO_MIN_SUBGRAPH); each subgraph is compiled
   by its device; a value computed in one subgraph and read in another is copied into the
   reader's own buffer (a transfer) before the reader runs. The static memory plan gives every
   value an offset in one arena per request (lifetimes over the execution order, in place
   where a kernel allows it). An input dim left free (symbolic, no InputShape) is planned at 1
   by compile_model, and again per input-shape signature at a request's first infer with it
   (set_input with a tensor of the new shape), copying the first plan's partition; the plans
   are cached (SHAPE_CACHE_SIZE). CPU fuses each elementwise island into one snippets.h kernel
   (the interpreter under TESSEL_NO_JIT); TEMPLATE runs the reference kernels only, the ops
   of its SUPPORTED_OPS. What each stage costs, measured: docs/performance.md.

   Devices, config keys and metrics
   --------------------------------
   CPU: NUM_THREADS (1..64; kernels split their outer loop, and a fused island's kernel that
   walks at least 8 MiB runs in parts of at least 4 MiB), PERF_COUNT (YES/NO), FUSION
   (YES/NO), ISA (auto|ref|sse41|avx2|avx512|neon). TEMPLATE: SUPPORTED_OPS (comma list or
   *), PERF_COUNT. Metrics: AVAILABLE_DEVICES, FULL_DEVICE_NAME, SUPPORTED_METRICS,
   SUPPORTED_CONFIG_KEYS, OPTIMIZATION_CAPABILITIES.
   GPU (an OpenCL device: libOpenCL.so.1 opened with dlopen at first use, so nothing links
   against OpenCL; TESSEL_OPENCL_LIBRARY names another loader; TESSEL_NO_OPENCL, or no
   CL/cl.h at build time, leaves it out): PLATFORM and DEVICE (auto or an index), PERF_COUNT;
   metrics AVAILABLE (YES, or NO: the reason), PLATFORM_NAME, OPENCL_VERSION, DRIVER_VERSION,
   COMPUTE_UNITS, GLOBAL_MEMORY, HOST_UNIFIED_MEMORY. The Core always lists it; without a
   driver it is unavailable (compiling on "GPU" is Unsupported with the reason) and a HETERO
   list goes on without it. It runs the elementwise islands (printed from the body IR as
   OpenCL C, bit for bit the interpreter's), Conv, Gemm, MaxPool, AveragePool, the global
   pools, Softmax and LogSoftmax; a HETERO list's next device takes the rest (each kernel
   runs on buffers over the request's memory, zero-copy where the device shares it).
   compile_model also takes SHAPE_CACHE_SIZE (1..1024, default 8): the plans of other input-shape signatures a model
   with free input dims keeps, the least recently used evicted. A config key given to compile_model lasts
   for that compile: "DEVICE:KEY" sets one device, "KEY" every listed device. Unknown devices
   and keys are NotFound. A user device implements Device (see docs/plugin-guide.md)
   and is registered with Core::register_device; add_extension adds a custom op kernel.

   Op list (ONNX default domain, opsets 7..28 (also 1-6 for ops whose meaning did not change;
   their legacy broadcast attributes are accepted only in the NumPy-compatible form; each op
   runs at its ONNX version for the model's opset, a version whose semantics are not
   implemented is Unsupported: >>op versions), float32 first; every element type for the
   data-movement and typed ops; float16, bfloat16 and double through the float32 kernels
   elsewhere (>>float32 compute)): the elementwise snippet ops (Add Sub Mul Div Max Min Pow Sqrt
   Reciprocal Abs Neg Exp Log Tanh Sigmoid Relu Clip Elu Selu Erf Gelu HardSigmoid HardSwish
   LeakyRelu PRelu Softplus Softsign Mish Floor Ceil Round Sign Where), comparisons and logical
   ops, Mod, Sum, Mean, Conv, ConvTranspose, MatMul, Gemm, BatchNormalization,
   InstanceNormalization, LayerNormalization, MaxPool, AveragePool, GlobalAveragePool,
   GlobalMaxPool, Softmax, LogSoftmax, Reduce{Mean,Sum,Max,Min,Prod,L2}, ArgMax, ArgMin,
   Resize, Reshape, Flatten, Transpose, Concat, Split, Slice, Gather, Squeeze, Unsqueeze, Pad,
   Cast, Shape, Size, Constant, ConstantOfShape, Expand, Tile, Range, Identity, Dropout,
   DepthToSpace, SpaceToDepth; Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh
   Atanh ThresholdedRelu Shrink Swish, IsInf and IsNaN (also float16),
   Reduce{SumSquare,L1,LogSum,LogSumExp}, Hardmax, CumSum (also int32/int64), Trilu, EyeLike
   and CastLike (every type), BitCast, BitwiseAnd/Or/Xor/Not (every integer width), BitShift
   (unsigned); GatherElements, GatherND, ScatterElements (Scatter before opset 11), ScatterND,
   OneHot, ReverseSequence, TopK, LpNormalization, MeanVarianceNormalization,
   RMSNormalization (opset 23), GroupNormalization (opset 18), NegativeLogLikelihoodLoss,
   SoftmaxCrossEntropyLoss; GridSample (opset 16), AffineGrid (20), Col2Im (18), DeformConv (19),
   RoiAlign (10), CenterCropPad (18, every type), MaxUnpool (9), Upsample (7 and 9), LpPool,
   LRN; QuantizeLinear and DequantizeLinear (int8/uint8; per tensor, per axis, blocked),
   DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, Compress (a
   constant condition), Celu, CumProd, Det, Einsum, TfIdfVectorizer (integer n-grams); If,
   Loop and Scan with subgraph bodies that read outer values (>>control flow); Attention,
   RotaryEmbedding, SwiGLU, TensorScatter, LinearAttention, CausalConvWithState; RNN, GRU,
   LSTM; DFT, STFT, HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix; BatchNormalization
   and Dropout also in training mode (Dropout at ratio 0). builtin_op_kernels() lists them.

   Config macros: as in hetero.h and snippets.h (TESSEL_ASSERT, TESSEL_MALLOC/FREE,
   TESSEL_NO_JIT), plus TESSEL_USE_MICROPROFILE: each subgraph and step is a microprofile
   zone (group "tessel"); the application flips frames and dumps the timeline.

   Errors
   ------
   Every fallible call returns tessel::Status; Core, CompiledModel, InferRequest, Device and
   Model keep a message in last_error() naming the node, tensor, key or byte offset. Bad
   models: ParseError (malformed bytes), DanglingInput, Cycle, Unsupported (an op, element
   type or opset outside the list, a data-dependent shape), InvalidArgument (bad attributes
   or shapes), LimitExceeded. Blobs: ParseError (truncated, corrupted: FNV-1a checksum,
   foreign), Unsupported (newer format version, an ISA this CPU lacks), NotFound (device).

   Memory
   ------
   A Model and a CompiledModel keep their graph and folded constants in arenas; weights read
   from a file stay in the file's buffer (read_onnx_file keeps it). A compiled model reads the
   Model it was compiled from (weights, attributes): keep the Model alive as long as the
   CompiledModel (an imported one owns its copy). create_request allocates the request's
   arena (CompiledModel::arena_bytes), scratch and worker threads; infer() allocates nothing,
   except, with free input dims, at the first infer with a signature: its plan (once per
   compiled model) and larger request buffers (never shrunk), so a stream of known shapes
   allocates nothing.
   All heap goes through TESSEL_MALLOC except std::thread's and asmjit's own.

   Threading
   ---------
   Core::compile_model, import_model and query_model may be called from several threads (they
   serialize on the Core, since a compile changes device config for its duration). A
   CompiledModel is read-only after compile: any number of InferRequests on it may run at once,
   one thread per request (with free input dims, its plan cache is behind a mutex that a new
   signature's plan holds while it compiles; an infer whose input shapes did not change
   does not take it). start_async() runs infer() on the request's own worker thread.

   Limits and threat model
   -----------------------
   On any model file, compiled blob or graph, Tessel returns an error or a correct result: no
   crash, no read or write outside a buffer, memory bounded by Limits (Core::limits(): nodes,
   rank, elements per tensor, activation + scratch bytes per request, file size, folded bytes,
   Loop iterations; If/Loop/Scan bodies nest at most kMaxBodyDepth deep). A
   kernel that finds bad data at run time (a Gather index out of range) returns
   InvalidArgument. External data must lie inside the model's folder.
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

// Element i (row-major, dense) of any element type as a double; 0 for Undefined. For
// comparing outputs in tools and tests.
double element_value(const Tensor& tensor, uint64_t i);

// >>model
// A model is a Graph with its interface. Graph inputs are `Parameter` nodes (one output,
// desc from add_input; negative dims are symbolic), weights are `Constant` nodes (attribute
// "value" holds the tensor), graph outputs are `Result` nodes (one input, no output). An
// optional input left out in the middle of a node's inputs reads the `Absent` node (one
// output of type Undefined). Node names and interface names share one namespace.
struct Limits;

// How deep If/Loop/Scan bodies may nest (a body's body is depth 2): Model::add_body refuses
// the next level with LimitExceeded, so the reader and the compiler recurse a bounded number of times.
constexpr uint32_t kMaxBodyDepth = 16;

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
    Status set_strings(NodeId node, StringView name, Span<const StringView> values);   // none may hold a '\0'
    Status finalize();                          // graph.finalize() plus interface checks

    // Subgraph bodies (If, Loop, Scan attributes): a body is a Model of its own that this
    // model owns (same opset). Its last `outer_inputs` inputs are values of the enclosing
    // graph: the node holding the body reads them as its last inputs, in the same order.
    // add_body: LimitExceeded past kMaxBodyDepth levels; a body's arena is on the heap (also
    // under a fixed-buffer model). set_graph adds a Graph attribute.
    Status add_body(Model** body);
    Status set_graph(NodeId node, StringView name, const Model* body);
    uint32_t outer_inputs = 0;
    uint32_t body_depth() const { return depth_; }   // 0 for a top-level model

    uint32_t input_count() const { return input_count_; }
    uint32_t output_count() const { return output_count_; }
    const ModelPort& input(uint32_t i) const { return inputs_[i]; }
    const ModelPort& output(uint32_t i) const { return outputs_[i]; }
    uint32_t find_input(StringView name) const;    // index, or kNotFound
    uint32_t find_output(StringView name) const;
    const char* last_error() const { return graph.last_error(); }
    // The name of an input's symbolic dim (ONNX dim_param), empty when it has none.
    StringView dim_name(uint32_t input, uint32_t axis) const;
    Status set_dim_name(uint32_t input, uint32_t axis, StringView name);   // NotFound: no such input or axis

    // ONNX (see >>onnx reader). `folder` resolves external data; empty: external data refused.
    Status read_onnx(const void* bytes, size_t size, StringView folder = StringView());
    Status read_onnx_file(const char* path);
    // The same with other limits than the defaults (file size, nodes, rank, elements).
    Status read_onnx(const void* bytes, size_t size, StringView folder, const Limits& limits);
    Status read_onnx_file(const char* path, const Limits& limits);
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
    Model** bodies_ = nullptr;
    uint32_t body_count_ = 0, body_capacity_ = 0, depth_ = 0;
    StringView* dim_names_ = nullptr;   // kMaxRank per input, for the first dim_name_inputs_ inputs
    uint32_t dim_name_inputs_ = 0;
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

namespace detail {
constexpr uint64_t kDefaultMaxTensorElements = 1ull << 28;   // Limits::max_tensor_elements' default
}

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
    uint64_t max_elements = detail::kDefaultMaxTensorElements;   // the compile's Limits::max_tensor_elements: bounds what prepare allocates
    uint64_t max_loop_iterations = 1ull << 24;   // the compile's Limits::max_loop_iterations (Loop's trip count)
    // Set by prepare:
    const void* state = nullptr;            // handed to run()
    size_t scratch_bytes = 0;               // per-request scratch run() needs (all threads)
    bool in_place = false;                  // output 0 may share input 0's buffer (same bytes)
    char error[kErrorMessageBytes] = {};

    Status fail(Status status, const char* format, ...)
        TESSEL_PRINTF_FORMAT(3, 4);
    const Node& node_ref() const { return graph->node(node); }
    const Attribute* attribute(StringView name) const { return graph->find_attribute(node, name); }
    int64_t attribute_int(StringView name, int64_t fallback) const;
    float attribute_float(StringView name, float fallback) const;
    StringView attribute_string(StringView name, StringView fallback) const;
    Span<const int64_t> attribute_ints(StringView name) const;  // empty if absent
    Span<const float> attribute_floats(StringView name) const;
    bool has_input(uint32_t i) const { return i < num_inputs && inputs[i].type != ElementType::Undefined; }
};

namespace detail { class ThreadPool; struct BodyProfile; }

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
    char* error = nullptr;                  // fail() writes here (kErrorMessageBytes)
    detail::BodyProfile* body_profile = nullptr;   // PERF_COUNT: where If/Loop/Scan body steps record

    // Splits [0, count) into at most `threads` contiguous ranges run at once; returns when all
    // are done. fn must not fail (check inputs first).
    void parallel_for(uint64_t count, void (*fn)(void* user, uint64_t begin, uint64_t end), void* user) const;
    Status fail(Status status, const char* format, ...) const
        TESSEL_PRINTF_FORMAT(3, 4);
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
    uint64_t max_tensor_elements = detail::kDefaultMaxTensorElements;   // per tensor (1 GiB of float32)
    uint64_t max_arena_bytes = 1ull << 31;          // activations + kernel scratch of one request
    uint64_t max_file_bytes = 1ull << 31;           // model files and blobs
    uint64_t max_folded_bytes = 64ull << 20;        // one constant-folded tensor
    uint64_t max_loop_iterations = 1ull << 24;      // a Loop's trip count (given or run)
};

// >>device
// The longest config value a built-in device keeps, terminator included (a whole op list fits).
constexpr size_t kConfigValueBytes = 4096;

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
    char* error = nullptr;                 // kErrorMessageBytes
    detail::BodyProfile* body_profile = nullptr;   // PERF_COUNT: where body steps record
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
    // The availability check: whether the backend started (driver found, memory mapped...).
    // Core::register_device refuses a device that answers anything but Ok, with its message.
    virtual Status check_available() { return Status::Ok; }
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
    // Adds or replaces an op kernel (a custom op). Devices without extensions return
    // Unsupported. find_extension lets the runtime prepare (infer shapes of) such nodes.
    virtual Status add_extension(const OpKernel& kernel) = 0;
    virtual const OpKernel* find_extension(StringView op) const {
        (void)op;
        return nullptr;
    }
    const char* last_error() const { return error_; }

protected:
    Status fail(Status status, const char* format, ...)
        TESSEL_PRINTF_FORMAT(3, 4);
    char error_[kErrorMessageBytes] = {};
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
    PreparedModel(void* buffer, size_t bytes) : model(buffer, bytes) {}   // a fixed arena (If/Loop/Scan bodies)
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
    // Runs step.node's prepared kernel on the step's values (context.values) with at most
    // `max_threads` of the request's threads: what a device calls for the nodes it leaves to
    // the runtime's reference kernels.
    // `run` and `state`, when given, replace the prepared kernel's (a device's own kernel).
    Status run_kernel(const ProgramStep& step, const StepContext& context, uint32_t max_threads = 1, RunFn run = nullptr,
                      const void* state = nullptr) const;
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

// An input frozen to a value at compile time: it becomes a Constant (copied), is folded into
// whatever it feeds, and is no longer an input of the compiled model. For shape tensors given
// as inputs (Reshape's shape, Resize's sizes, ...), which would otherwise make a shape
// data-dependent.
struct InputValue {
    StringView name;
    const Tensor* tensor = nullptr;
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

namespace detail {
constexpr uint32_t kMaxBodyProfileEntries = 256;   // body nodes profiled per inference; more are not listed

// The entries of the nodes inside If/Loop/Scan bodies, after the steps' own: one per body node
// (its name), its time summed over the iterations of one inference.
struct BodyProfile {
    ProfileEntry* entries = nullptr;
    uint32_t count = 0, capacity = 0;
    StringView device;        // of the step running the body
    uint32_t subgraph = 0;
    void record(StringView node, const char* kernel, uint64_t ns) {
        for (uint32_t i = 0; i < count; ++i)
            if (entries[i].node.data == node.data && entries[i].subgraph == subgraph) { entries[i].ns += ns; return; }
        if (count == capacity) return;
        ProfileEntry& p = entries[count++];
        p.node = node;
        p.device = device;
        p.kernel = kernel;
        p.subgraph = subgraph;
        p.ns = ns;
    }
};
}  // namespace detail

class CompiledModel;
namespace detail { struct CompileJob; }

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
    // Input dims left free (negative, not fixed by `shapes`) stay free: the model is planned
    // with them at 1 (so it must take 1 there; otherwise give shapes) and again per
    // input-shape signature at a request's first infer with it (>>dynamic shapes). The Core
    // must then outlive the CompiledModel, as the Model must.
    Status compile_model(const Model& model, StringView device, Span<const ConfigEntry> config, CompiledModel* out,
                         Span<const InputShape> shapes = Span<const InputShape>(),
                         Span<const InputValue> values = Span<const InputValue>());
    // Plans `compiled` again for new input shapes, with the device list and config it was
    // compiled with (the cost of a compile: docs/performance.md). `model` must be the model it was
    // compiled from. A request of the old plan must be created again. NotFinalized if
    // `compiled` holds nothing; the errors of compile_model otherwise.
    Status reshape(const Model& model, Span<const InputShape> shapes, CompiledModel* compiled);
    // Reads a blob written by CompiledModel::export_model. ParseError on a truncated,
    // corrupted (checksum) or foreign blob, Unsupported on a newer format version, NotFound
    // when a device it names is not registered.
    Status import_model(const void* blob, size_t size, CompiledModel* out);
    // Which device takes each node of `model` for a HETERO device string (after preparing):
    // devices[n] receives the device index in `device`'s list, kNoDevice for folded nodes.
    Status query_model(const Model& model, StringView device, uint16_t* devices);

    const char* last_error() const { return error_; }

    struct Impl;

private:
    friend struct detail::CompileJob;
    Status fail(Status status, const char* format, ...)
        TESSEL_PRINTF_FORMAT(3, 4);
    Status compile_job(void* job, const Model& model, Span<const InputShape> shapes, Span<const InputValue> values,
                       PartitionAlgorithm algorithm, uint32_t min_subgraph, void* compiled);
    Status import_job(void* job, const void* payload, size_t size, void* compiled, Arena* scratch);
    Impl* impl_ = nullptr;
    Limits limits_;
    char error_[kErrorMessageBytes] = {};
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
    // With free input dims (has_free_dims()), input_desc has -1 in them, and output_desc and
    // the sizes below are those of the plan at every free dim = 1; a request's output(i)
    // has the shapes of its last inference.
    const TensorDesc& input_desc(uint32_t i) const;
    const TensorDesc& output_desc(uint32_t i) const;
    Span<const PlacementSummary> placement() const;
    const PreparedModel* prepared() const;
    const Partition* partition() const;
    size_t arena_bytes() const;            // activations of one request
    size_t scratch_bytes() const;          // kernels' scratch of one request
    size_t unplanned_bytes() const;        // what they would take without reuse
    uint32_t step_count() const;
    void write_summary(WriteFn write, void* user) const;  // placement, kernels, memory
    bool compiled() const { return impl_ != nullptr; }
    // Compiled with symbolic input dims left free: planned again per input-shape signature.
    bool has_free_dims() const;
    uint32_t cached_shape_plans() const;   // plans of other signatures kept (at most SHAPE_CACHE_SIZE)
    const char* last_error() const { return error_; }

    struct Impl;

private:
    friend class Core;   // compile_model, reshape and import_model fill impl_
    Impl* impl_ = nullptr;
    mutable char error_[kErrorMessageBytes] = {};
};

// >>gpu
// Builds OpenCL C `source` on `core`'s GPU device (to check a kernel by hand, and for the
// tests): Ok, Unsupported with the driver's build log in `log` when it does not build (or
// with the reason when the GPU is not available).
Status gpu_build_check(Core& core, StringView source, char* log, size_t log_size);

// >>infer request
class InferRequest {
public:
    InferRequest();
    ~InferRequest();
    InferRequest(const InferRequest&) = delete;
    InferRequest& operator=(const InferRequest&) = delete;

    // The request's own input buffers (fill them), or the user's tensor when one was set.
    // A bad index (or a request never created) gives an empty tensor (no data, rank 0).
    Tensor& input(uint32_t i);
    const Tensor& output(uint32_t i) const;
    // Binds user memory (a view; no copy now). The shape and type must match the compiled
    // model's; in a free dim (input_desc -1) any size, planned at infer() (a shape the model
    // cannot take: that plan's error, e.g. InvalidArgument or LimitExceeded; a request then
    // keeps its last plan). InvalidArgument otherwise, NotFound for an unknown name.
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

private:
    friend class CompiledModel;   // create_request makes impl_
    Impl* impl_ = nullptr;
    mutable char error_[kErrorMessageBytes] = {};
};

// >>tensor files
// ONNX TensorProto files (input_0.pb, output_0.pb). read: ParseError on malformed bytes,
// Unsupported for element types outside the list; write: IoError.
Status read_tensor_proto(const void* bytes, size_t size, Tensor* tensor, char* name = nullptr, size_t name_size = 0);
Status read_tensor_file(const char* path, Tensor* tensor);
Status write_tensor_proto(const Tensor& tensor, StringView name, WriteFn write, void* user);

// Writes a finalized model as an ONNX ModelProto (IR version 8, the model's opset):
// Parameters as graph inputs, Constants as initializers (raw_data), Results as graph outputs,
// every attribute kind. A tensor is named after its node (`node:port` for ports after the
// first), and a value a Result reads after that Result. InvalidArgument for an unfinalized
// model or an Absent node in the middle of a node's inputs that ONNX cannot name.
Status write_onnx(const Model& model, WriteFn write, void* user);

}  // namespace tessel

// >>templates
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

// >>implementation
// Everything below is compiled once, in the file that defines TESSEL_IMPLEMENTATION.
#if defined(TESSEL_IMPLEMENTATION) && !defined(TESSEL_RUNTIME_IMPLEMENTED)
#define TESSEL_RUNTIME_IMPLEMENTED

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <type_traits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
// The GPU device (>>opencl loader): compiled in when the Khronos headers are there.
#if !defined(TESSEL_NO_OPENCL) && defined(__has_include)
#if __has_include(<CL/cl.h>) && __has_include(<dlfcn.h>)
#define TESSEL_HAS_OPENCL 1
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <dlfcn.h>
#endif
#endif
#ifdef TESSEL_USE_MICROPROFILE
#include <microprofile.h>
#endif

namespace tessel {
namespace detail {
constexpr uint32_t kMaxDevices = 64;      // a Core's devices, and the devices of one device string
constexpr uint32_t kMaxNodePorts = 64;    // inputs, and outputs, of one node
constexpr uint32_t kMaxThreads = 64;      // CPU's NUM_THREADS
constexpr uint32_t kMaxDeviceKeys = 8;    // config keys a compile records per device
}  // namespace detail

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
    if (!element_type_valid(type)) return Status::InvalidArgument;
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
    TESSEL_TRY(detail::make_desc(type, shape, &d, &bytes));
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
    TESSEL_TRY(detail::make_desc(type, shape, &d, &bytes));
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

double element_value(const Tensor& t, uint64_t i) {
    switch (t.type()) {
        case ElementType::Float32: return t.data_as<float>()[i];
        case ElementType::Int64: return (double)t.data_as<int64_t>()[i];
        case ElementType::Int32: return t.data_as<int32_t>()[i];
        case ElementType::Int8: return t.data_as<int8_t>()[i];
        case ElementType::UInt8: case ElementType::Bool: return t.data_as<uint8_t>()[i];
        case ElementType::Float64: return t.data_as<double>()[i];
        case ElementType::Int16: return t.data_as<int16_t>()[i];
        case ElementType::UInt16: return t.data_as<uint16_t>()[i];
        case ElementType::UInt32: return t.data_as<uint32_t>()[i];
        case ElementType::UInt64: return (double)t.data_as<uint64_t>()[i];
        case ElementType::BFloat16: {
            uint32_t bits = (uint32_t)t.data_as<uint16_t>()[i] << 16;
            float f;
            std::memcpy(&f, &bits, 4);
            return f;
        }
        case ElementType::Float16: {
            uint16_t h = t.data_as<uint16_t>()[i];
            int e = (h >> 10) & 31, m = h & 1023;
            double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(m + 1024, e - 25);
            return h & 0x8000 ? -v : v;
        }
        default: return 0;
    }
}

uint64_t Tensor::elements() const {   // an empty Tensor (type Undefined) holds nothing
    uint64_t n = 0;
    return desc_.type != ElementType::Undefined && desc_elements(desc_, &n) ? n : 0;
}

size_t Tensor::bytes() const { return (size_t)(elements() * element_size(desc_.type)); }

bool Tensor::dense() const {
    for (uint32_t i = 0; i < desc_.rank; ++i)
        if (desc_.dims[i] == 0) return true;   // no elements: no gaps, whatever the strides say
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
    for (uint32_t i = 0; i < body_count_; ++i) destroy(bodies_[i]);
    if (file_) TESSEL_FREE(file_);
}

Status Model::add_body(Model** body) {
    *body = nullptr;
    if (depth_ + 1 > kMaxBodyDepth)
        return graph.fail(Status::LimitExceeded, "subgraph bodies nest deeper than %u levels", kMaxBodyDepth);
    if (body_count_ == body_capacity_) {
        uint32_t grown = body_capacity_ ? body_capacity_ * 2 : 4;
        Model** fresh = arena.allocate_array<Model*>(grown);
        if (!fresh) return graph.fail(Status::OutOfMemory, "out of memory adding a body");
        for (uint32_t i = 0; i < body_count_; ++i) fresh[i] = bodies_[i];
        bodies_ = fresh;
        body_capacity_ = grown;
    }
    Model* m = create<Model>();
    if (!m) return graph.fail(Status::OutOfMemory, "out of memory adding a body");
    m->depth_ = depth_ + 1;
    m->opset = opset;
    bodies_[body_count_++] = m;
    *body = m;
    return Status::Ok;
}

Status Model::set_graph(NodeId node, StringView name, const Model* body) {
    if (!body) return graph.fail(Status::InvalidArgument, "set_graph: no body");
    Attribute a;
    a.name = name;
    a.kind = AttributeKind::Graph;
    a.body = body;
    return graph.add_attribute(node, a);
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
Status Model::set_strings(NodeId node, StringView name, Span<const StringView> values) {
    size_t bytes = 0;
    for (StringView v : values) {
        for (size_t k = 0; k < v.size; ++k)
            if (v.data[k] == 0) return graph.fail(Status::InvalidArgument, "set_strings: a string holds a '\\0'");
        bytes += v.size + 1;
    }
    char* joined = static_cast<char*>(arena.allocate(bytes + 1, 1));
    if (!joined) return graph.fail(Status::OutOfMemory, "out of memory adding an attribute");
    size_t at = 0;
    for (StringView v : values) {
        if (v.size) std::memcpy(joined + at, v.data, v.size);
        at += v.size;
        joined[at++] = 0;
    }
    Attribute a;
    a.name = name;
    a.kind = AttributeKind::Strings;
    a.s = StringView(joined, bytes);
    a.i = (int64_t)values.size;
    return graph.add_attribute(node, a);
}

Status Model::finalize() {
    TESSEL_TRY(graph.finalize());
    for (uint32_t i = 0; i < graph.node_count(); ++i) {
        const Node& n = graph.node(i);
        if (n.op == StringView("Result") && n.num_inputs != 1)
            return graph.fail(Status::InvalidArgument, "output '%.*s' must read exactly one value", (int)n.name.size, n.name.data);
    }
    return Status::Ok;
}

StringView Model::dim_name(uint32_t input, uint32_t axis) const {
    if (input >= dim_name_inputs_ || axis >= kMaxRank) return StringView();
    return dim_names_[(size_t)input * kMaxRank + axis];
}

Status Model::set_dim_name(uint32_t input, uint32_t axis, StringView name) {
    if (input >= input_count_ || axis >= kMaxRank) return Status::NotFound;
    if (input >= dim_name_inputs_) {   // grown in the arena: names are few and set once
        uint32_t grown = input_count_ > 2 * dim_name_inputs_ ? input_count_ : 2 * dim_name_inputs_;
        StringView* fresh = arena.allocate_array<StringView>((size_t)grown * kMaxRank);
        if (!fresh) return Status::OutOfMemory;
        for (size_t k = 0; k < (size_t)grown * kMaxRank; ++k)
            fresh[k] = k < (size_t)dim_name_inputs_ * kMaxRank ? dim_names_[k] : StringView();
        dim_names_ = fresh;
        dim_name_inputs_ = grown;
    }
    StringView copy = arena.copy_string(name);
    if (!copy.data && name.size) return Status::OutOfMemory;
    dim_names_[(size_t)input * kMaxRank + axis] = copy;
    return Status::Ok;
}

uint32_t Model::find_input(StringView name) const {
    for (uint32_t i = 0; i < input_count_; ++i) if (inputs_[i].name == name) return i;
    return kNotFound;
}
uint32_t Model::find_output(StringView name) const {
    for (uint32_t i = 0; i < output_count_; ++i) if (outputs_[i].name == name) return i;
    return kNotFound;
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
    int k = std::snprintf(error, kErrorMessageBytes, "%.*s '%.*s': ", (int)n.op.size, n.op.data, (int)n.name.size, n.name.data);
    if (k < 0 || k >= (int)kErrorMessageBytes) k = 0;
    va_list args;
    va_start(args, format);
    std::vsnprintf(error + k, kErrorMessageBytes - (size_t)k, format, args);
    va_end(args);
    return status;
}

// >>threads
namespace detail {
// A fixed pool: threads - 1 workers started once; run() hands each a contiguous range and
// the caller takes the first one. No allocation per run().
class ThreadPool {
public:
    ThreadPool() = default;
    ~ThreadPool() { stop(); }
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    Status start(uint32_t threads) {
        stop();
        if (threads <= 1) { threads_ = 1; return Status::Ok; }
        workers_ = static_cast<std::thread*>(TESSEL_MALLOC(sizeof(std::thread) * (threads - 1)));
        if (!workers_) return Status::OutOfMemory;
        quit_ = false;
        for (uint32_t i = 0; i + 1 < threads; ++i) new (&workers_[i]) std::thread(&ThreadPool::work, this, i + 1);
        threads_ = threads;
        return Status::Ok;
    }
    void stop() {
        if (!workers_) return;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            quit_ = true;
            ++generation_;
        }
        wake_.notify_all();
        for (uint32_t i = 0; i + 1 < threads_; ++i) {
            workers_[i].join();
            workers_[i].~thread();
        }
        TESSEL_FREE(workers_);
        workers_ = nullptr;
        threads_ = 1;
    }
    uint32_t threads() const { return threads_; }

    void run(uint64_t count, void (*fn)(void*, uint64_t, uint64_t), void* user) {
        if (threads_ <= 1 || count < 2) { if (count) fn(user, 0, count); return; }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            fn_ = fn;
            user_ = user;
            count_ = count;
            pending_ = threads_ - 1;
            ++generation_;
        }
        wake_.notify_all();
        uint64_t end = count / threads_ + (count % threads_ ? 1 : 0);
        fn(user, 0, end < count ? end : count);
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_ == 0; });
    }

private:
    void work(uint32_t index) {
        uint64_t seen = 0;
        for (;;) {
            void (*fn)(void*, uint64_t, uint64_t);
            void* user;
            uint64_t count;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return generation_ != seen; });
                seen = generation_;
                if (quit_) return;
                fn = fn_;
                user = user_;
                count = count_;
            }
            uint64_t chunk = count / threads_ + (count % threads_ ? 1 : 0);
            uint64_t begin = chunk * index, end = begin + chunk < count ? begin + chunk : count;
            if (begin < end) fn(user, begin, end);
            {
                std::lock_guard<std::mutex> lock(mutex_);
                if (--pending_ == 0) done_.notify_one();
            }
        }
    }
    std::thread* workers_ = nullptr;
    uint32_t threads_ = 1;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    uint64_t generation_ = 0;
    bool quit_ = false;
    void (*fn_)(void*, uint64_t, uint64_t) = nullptr;
    void* user_ = nullptr;
    uint64_t count_ = 0;
    uint32_t pending_ = 0;
};

// parallel_for over a lambda: parallel_for(context, n, [&](uint64_t begin, uint64_t end) {...}).
template <class Fn>
void parallel_for(const RunContext& c, uint64_t count, Fn fn) {
    c.parallel_for(count, [](void* user, uint64_t b, uint64_t e) { (*static_cast<Fn*>(user))(b, e); }, &fn);
}

// snprintf through va_list: long names are cut, never an overflow (and no truncation warnings).
inline void print(char* out, size_t size, const char* format, ...)
    TESSEL_PRINTF_FORMAT(3, 4);
inline void print(char* out, size_t size, const char* format, ...) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(out, size, format, args);
    va_end(args);
}
inline void copy_text(char* out, size_t size, const char* text) { std::snprintf(out, size, "%s", text); }
inline bool is_free_op(StringView op) {   // interface nodes every device holds without running them
    return op == StringView("Parameter") || op == StringView("Constant") || op == StringView("Result") ||
           op == StringView("Absent");
}
}  // namespace detail

void RunContext::parallel_for(uint64_t count, void (*fn)(void*, uint64_t, uint64_t), void* user) const {
    if (pool && threads > 1) pool->run(count, fn, user);
    else if (count) fn(user, 0, count);
}

Status Device::fail(Status status, const char* format, ...) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error_, sizeof error_, format, args);
    va_end(args);
    return status;
}

Status Core::fail(Status status, const char* format, ...) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error_, sizeof error_, format, args);
    va_end(args);
    return status;
}

// >>prepare
namespace detail { inline Status check_op_version(const Node& node, uint32_t opset, char* error); }   // >>op versions
namespace detail { inline Status prepare_node_kernel(const OpKernel** kernel, PrepareContext& c); }   // >>float32 compute

// The common transformations: static shapes from the inputs (or InputShape overrides), every
// node whose inputs are all known at compile time evaluated once (Shape needs only the desc),
// nodes that only fed folded ones dropped. Produces a new Model with the same node names.
struct detail_prepare {
    using KernelLookup = const OpKernel* (*)(void* user, StringView op);

    static Status fail(char* error, Status status, const char* format, ...)
        TESSEL_PRINTF_FORMAT(3, 4)
    {
        va_list args;
        va_start(args, format);
        std::vsnprintf(error, kErrorMessageBytes, format, args);
        va_end(args);
        return status;
    }

    static Status run(const Model& source, Span<const InputShape> shapes, const Limits& limits, KernelLookup lookup,
                      void* lookup_user, uint32_t threads, PreparedModel* out, char* error,
                      Span<const InputValue> frozen = Span<const InputValue>(), bool fold_batchnorms = true,
                      const TensorDesc* input_descs = nullptr) {   // per model input: its desc (bodies)
        const Graph& g = source.graph;
        if (!g.finalized()) return fail(error, Status::NotFinalized, "the model is not finalized");
        uint32_t n = g.node_count();
        if (n > limits.max_nodes) return fail(error, Status::LimitExceeded, "the model has %u nodes (limit %llu)", n,
                                              (unsigned long long)limits.max_nodes);
        for (const InputShape& s : shapes)
            if (source.find_input(s.name) == kNotFound)
                return fail(error, Status::NotFound, "--shape names '%.*s', which is not a model input", (int)s.name.size, s.name.data);
        for (const InputValue& f : frozen)
            if (source.find_input(f.name) == kNotFound || !f.tensor || !f.tensor->dense())
                return fail(error, Status::NotFound, "a frozen value names '%.*s', which is not a model input (or is not dense)",
                            (int)f.name.size, f.name.data);
        Arena scratch;
        Arena& arena = out->model.arena;  // folded values and kernel state live with the prepared model
        // per source node: first value index, descs, values, kernel data
        uint32_t* base = scratch.allocate_array<uint32_t>(n + 1);
        if (!base) return fail(error, Status::OutOfMemory, "out of memory preparing the model");
        uint32_t values = 0;
        for (uint32_t i = 0; i < n; ++i) { base[i] = values; values += g.node(i).num_outputs; }
        base[n] = values;
        TensorDesc* desc = scratch.allocate_array<TensorDesc>(values + 1);
        const void** data = scratch.allocate_array<const void*>(values + 1);
        uint8_t* folded = scratch.allocate_array<uint8_t>(n + 1);
        uint8_t* needed = scratch.allocate_array<uint8_t>(n + 1);
        if (!desc || !data || !folded || !needed)
            return fail(error, Status::OutOfMemory, "out of memory preparing the model");
        for (uint32_t v = 0; v < values; ++v) { desc[v] = TensorDesc(); data[v] = nullptr; }
        TensorDesc in_desc[detail::kMaxNodePorts];
        const void* in_value[detail::kMaxNodePorts];
        for (NodeId id : g.topological_order()) {
            const Node& node = g.node(id);
            folded[id] = 0;
            needed[id] = 0;
            const InputValue* value = nullptr;
            for (const InputValue& f : frozen) if (node.op == StringView("Parameter") && f.name == node.name) value = &f;
            if (value) {   // a frozen input: a constant from now on
                TESSEL_TRY(check_desc(value->tensor->desc(), limits, node, error));
                void* copy = arena.allocate(value->tensor->bytes() ? value->tensor->bytes() : 1, 64);
                if (!copy) return fail(error, Status::OutOfMemory, "out of memory freezing '%.*s'", (int)node.name.size, node.name.data);
                std::memcpy(copy, value->tensor->data(), value->tensor->bytes());
                desc[base[id]] = value->tensor->desc();
                data[base[id]] = copy;
                folded[id] = 1;
                continue;
            }
            if (node.op == StringView("Parameter")) {
                TensorDesc d = node.outputs ? node.outputs[0] : TensorDesc();
                uint32_t k = source.find_input(node.name);
                if (input_descs && k != kNotFound) d = input_descs[k];
                for (const InputShape& s : shapes) {
                    if (!(s.name == node.name)) continue;
                    if (s.dims.size > kMaxRank) return fail(error, Status::LimitExceeded, "--shape of '%.*s' has rank %zu", (int)node.name.size, node.name.data, s.dims.size);
                    if (d.rank && d.rank != s.dims.size)
                        return fail(error, Status::InvalidArgument, "input '%.*s' has rank %u, --shape gives %zu dims",
                                    (int)node.name.size, node.name.data, d.rank, s.dims.size);
                    d.rank = (uint8_t)s.dims.size;
                    for (size_t j = 0; j < s.dims.size; ++j) {
                        if (d.dims[j] >= 0 && node.outputs && node.outputs[0].rank && d.dims[j] != s.dims[j])
                            return fail(error, Status::InvalidArgument, "input '%.*s' dim %zu is %lld, --shape gives %lld",
                                        (int)node.name.size, node.name.data, j, (long long)d.dims[j], (long long)s.dims[j]);
                        d.dims[j] = s.dims[j];
                    }
                }
                (void)k;
                if (d.type == ElementType::Undefined)
                    return fail(error, Status::Unsupported, "input '%.*s' has no element type", (int)node.name.size, node.name.data);
                for (uint32_t j = 0; j < d.rank; ++j)
                    if (d.dims[j] < 0)
                        return fail(error, Status::InvalidArgument, "input '%.*s' has a symbolic dim %u: give its shape (--shape %.*s=...)",
                                    (int)node.name.size, node.name.data, j, (int)node.name.size, node.name.data);
                TESSEL_TRY(check_desc(d, limits, node, error));
                desc[base[id]] = d;
                continue;
            }
            if (node.op == StringView("Absent") || node.op == StringView("Result")) continue;
            if (node.op == StringView("Constant") && node.num_inputs == 0) {
                const Attribute* a = g.find_attribute(id, "value");
                if (a && a->kind == AttributeKind::Tensor && a->tensor) {  // weights: used in place
                    TESSEL_TRY(check_desc(a->tensor->desc, limits, node, error));
                    uint64_t count = 0;
                    desc_elements(a->tensor->desc, &count);
                    if (a->tensor->bytes != count * element_size(a->tensor->desc.type) || (!a->tensor->data && count))
                        return fail(error, Status::InvalidArgument, "constant '%.*s' holds %zu bytes for %llu elements",
                                    (int)node.name.size, node.name.data, a->tensor->bytes, (unsigned long long)count);
                    desc[base[id]] = a->tensor->desc;
                    data[base[id]] = a->tensor->data ? a->tensor->data : static_cast<const void*>(&kEmpty);
                    folded[id] = 1;
                    continue;
                }
            }
            if (node.num_inputs > detail::kMaxNodePorts) return fail(error, Status::LimitExceeded, "node '%.*s' has %u inputs (at most %u)", (int)node.name.size, node.name.data, node.num_inputs, detail::kMaxNodePorts);
            bool all_known = true;
            for (uint32_t i = 0; i < node.num_inputs; ++i) {
                const Edge& e = node.inputs[i];
                const Node& producer = g.node(e.producer);
                if (producer.op == StringView("Result"))
                    return fail(error, Status::InvalidArgument, "node '%.*s' reads output node '%.*s'", (int)node.name.size, node.name.data, (int)producer.name.size, producer.name.data);
                in_desc[i] = desc[base[e.producer] + e.port];
                in_value[i] = data[base[e.producer] + e.port];
                if (producer.op == StringView("Absent")) { in_desc[i] = TensorDesc(); in_value[i] = nullptr; continue; }
                if (!in_value[i]) all_known = false;
            }
            if (node.op == StringView("Shape") || node.op == StringView("Size")) {  // needs only the desc
                TESSEL_TRY(fold_shape(g, id, in_desc, node.num_inputs, &arena, &desc[base[id]], &data[base[id]], error));
                folded[id] = 1;
                continue;
            }
            if (source.opset < 7) {   // the legacy broadcast of opsets 1-6: only the NumPy-compatible form
                const Attribute* b = g.find_attribute(id, "broadcast");
                const Attribute* axis = g.find_attribute(id, "axis");
                if (b && b->kind == AttributeKind::Int && b->i != 0 && axis && axis->kind == AttributeKind::Int &&
                    node.num_inputs == 2 && axis->i != (int64_t)in_desc[0].rank - (int64_t)in_desc[1].rank &&
                    !(axis->i < 0 && axis->i == -(int64_t)in_desc[1].rank))
                    return fail(error, Status::Unsupported, "node '%.*s': opset %u broadcast along axis %lld (only trailing alignment)",
                                (int)node.name.size, node.name.data, source.opset, (long long)axis->i);
                if (node.op == StringView("PRelu") && node.num_inputs == 2) {   // PRelu-6: a slope of one, or X's shape
                    uint64_t slope = 0;
                    bool same = in_desc[0].rank == in_desc[1].rank;
                    for (uint32_t k = 0; same && k < in_desc[0].rank; ++k) same = in_desc[0].dims[k] == in_desc[1].dims[k];
                    if (!(desc_elements(in_desc[1], &slope) && slope == 1) && !same)
                        return fail(error, Status::Unsupported, "node '%.*s': opset %u PRelu slope aligned at the channels",
                                    (int)node.name.size, node.name.data, source.opset);
                }
                const Attribute* spatial = g.find_attribute(id, "spatial");
                if (spatial && spatial->kind == AttributeKind::Int && spatial->i == 0)
                    return fail(error, Status::Unsupported, "node '%.*s': BatchNormalization with spatial=0 (opset %u)",
                                (int)node.name.size, node.name.data, source.opset);
            }
            const OpKernel* k = lookup(lookup_user, node.op);
            if (!k) return fail(error, Status::Unsupported, "node '%.*s': op '%.*s' is not supported by any device",
                                (int)node.name.size, node.name.data, (int)node.op.size, node.op.data);
            if (k == find_builtin_kernel(node.op)) TESSEL_TRY(detail::check_op_version(node, source.opset, error));   // not an extension
            PrepareContext c;
            c.graph = &g;
            c.node = id;
            c.opset = source.opset;
            c.num_inputs = node.num_inputs;
            c.inputs = in_desc;
            c.values = in_value;
            c.num_outputs = node.num_outputs;
            c.outputs = &desc[base[id]];
            c.arena = &arena;
            c.threads = threads;
            c.max_elements = limits.max_tensor_elements;
            c.max_loop_iterations = limits.max_loop_iterations;
            Status s = detail::prepare_node_kernel(&k, c);
            if (s != Status::Ok) {
                std::snprintf(error, kErrorMessageBytes, "%s", c.error[0] ? c.error : "prepare failed");
                return s;
            }
            for (uint32_t p = 0; p < node.num_outputs; ++p) {
                TESSEL_TRY(check_desc(desc[base[id] + p], limits, node, error));
            }
            if (all_known && !is_random(node.op)) {
                s = fold(g, id, k, c, in_desc, in_value, &desc[base[id]], &data[base[id]], limits, &arena, error);
                if (s == Status::Ok) folded[id] = 1;
                else if (s != Status::LimitExceeded) return s;  // too large to fold: runs each inference
            }
        }
        // Conv + BatchNormalization pairs to fold (the Conv reads x only; the BN reads the Conv).
        Span<const NodeId> order = g.topological_order();
        NodeId* batchnorm_of = scratch.allocate_array<NodeId>(n + 1);
        uint8_t* absorbed = scratch.allocate_array<uint8_t>(n + 1);
        if (!batchnorm_of || !absorbed) return fail(error, Status::OutOfMemory, "out of memory preparing the model");
        for (NodeId id = 0; id < n; ++id) { batchnorm_of[id] = kNoNode; absorbed[id] = 0; }
        for (NodeId id = 0; fold_batchnorms && id < n; ++id) {
            NodeId bn = foldable_batchnorm(g, id, base, desc, data, folded);
            if (bn != kNoNode && !absorbed[bn]) { batchnorm_of[id] = bn; absorbed[bn] = 1; }
        }
        // Which nodes the outputs need; folded nodes become Constants, the rest is dropped.
        for (size_t k = order.size; k-- > 0;) {
            NodeId id = order[k];
            const Node& node = g.node(id);
            if (node.op == StringView("Result")) needed[id] = 1;
            if (!needed[id] || folded[id]) continue;
            uint32_t reads = absorbed[id] || batchnorm_of[id] != kNoNode ? 1 : node.num_inputs;
            for (uint32_t i = 0; i < reads; ++i) needed[node.inputs[i].producer] = 1;
        }
        // Build the prepared model: Parameters in interface order, then the rest in
        // topological order, then Results in interface order.
        Model& m = out->model;
        m.opset = source.opset;
        NodeId* new_id = scratch.allocate_array<NodeId>(values + 1);   // per source value: node in m
        if (!new_id) return fail(error, Status::OutOfMemory, "out of memory preparing the model");
        for (uint32_t v = 0; v < values; ++v) new_id[v] = kNoNode;
        for (uint32_t i = 0; i < source.input_count(); ++i) {
            NodeId id = source.input(i).node;
            if (folded[id]) continue;   // frozen
            Status s = m.add_input(g.node(id).name, desc[base[id]], &new_id[base[id]]);
            if (s != Status::Ok) return copy_error(m, s, error);
        }
        InputRef refs[detail::kMaxNodePorts];
        char name[300];
        uint32_t removed = 0;
        for (NodeId id : order) {
            const Node& node = g.node(id);
            if ((node.op == StringView("Parameter") && !folded[id]) || node.op == StringView("Result") || absorbed[id]) continue;
            if (!needed[id]) {   // dead, or read only by folded nodes (weights are not counted)
                if (!(node.op == StringView("Constant") && node.num_inputs == 0) && node.op != StringView("Absent")) ++removed;
                continue;
            }
            if (node.op == StringView("Absent")) {
                InputRef r = m.absent();
                new_id[base[id]] = r.producer;
                continue;
            }
            if (folded[id]) {
                if (!(node.op == StringView("Constant") && node.num_inputs == 0) && node.op != StringView("Parameter")) ++removed;
                for (uint32_t p = 0; p < node.num_outputs; ++p) {
                    if (p == 0) std::snprintf(name, sizeof name, "%.*s", (int)node.name.size, node.name.data);
                    else std::snprintf(name, sizeof name, "%.*s#%u", (int)node.name.size, node.name.data, p);
                    const void* d = data[base[id] + p];
                    Status s = m.add_constant(StringView(name), desc[base[id] + p], d == &kEmpty ? nullptr : d,
                                              &new_id[base[id] + p], false);
                    if (s != Status::Ok) return copy_error(m, s, error);
                }
                continue;
            }
            for (uint32_t i = 0; i < node.num_inputs; ++i) {  // folded producers are one-output Constants now
                const Edge& e = node.inputs[i];
                bool single = folded[e.producer] || g.node(e.producer).op == StringView("Absent");
                refs[i] = InputRef::by_id(new_id[base[e.producer] + (single ? e.port : 0)], single ? 0 : e.port,
                                          e.keep_apart != 0);
            }
            uint32_t input_count = node.num_inputs;
            NodeId batchnorm = batchnorm_of[id];
            if (batchnorm != kNoNode) {   // new weights and bias, as Constants
                float *w = nullptr, *b = nullptr;
                Status st = fold_batchnorm(g, id, batchnorm, base, desc, data, &arena, &w, &b);
                if (st != Status::Ok) return fail(error, st, "out of memory folding a BatchNormalization");
                uint32_t wv = base[node.inputs[1].producer] + node.inputs[1].port;
                TensorDesc bias_desc;
                bias_desc.type = ElementType::Float32;
                bias_desc.rank = 1;
                bias_desc.dims[0] = desc[wv].dims[0];
                NodeId wn, bn_id;
                std::snprintf(name, sizeof name, "%.*s.folded_weight", (int)node.name.size, node.name.data);
                st = m.add_constant(StringView(name), desc[wv], w, &wn, false);
                std::snprintf(name, sizeof name, "%.*s.folded_bias", (int)node.name.size, node.name.data);
                if (st == Status::Ok) st = m.add_constant(StringView(name), bias_desc, b, &bn_id, false);
                if (st != Status::Ok) return copy_error(m, st, error);
                refs[1] = InputRef::by_id(wn);
                refs[2] = InputRef::by_id(bn_id);
                input_count = 3;
                ++removed;
            }
            NodeId nid = kNoNode;
            Status s = m.add_node(node.op, node.name, Span<const InputRef>(refs, input_count), node.num_outputs, &nid);
            if (s != Status::Ok) return copy_error(m, s, error);
            for (const Attribute* a = node.attributes; a; a = a->next) {
                s = m.graph.add_attribute(nid, *a);
                if (s != Status::Ok) return copy_error(m, s, error);
            }
            if (node.affinity != kNoDevice) {
                s = m.graph.set_affinity(nid, g.device_name(node.affinity));
                if (s != Status::Ok) return copy_error(m, s, error);
            }
            for (uint32_t p = 0; p < node.num_outputs; ++p) {
                new_id[base[id] + p] = nid;
                s = m.graph.set_output_desc(nid, p, desc[base[id] + p]);
                if (s != Status::Ok) return copy_error(m, s, error);
            }
            if (batchnorm != kNoNode) new_id[base[batchnorm]] = nid;   // the BatchNormalization's readers read the Conv
        }
        for (uint32_t i = 0; i < source.output_count(); ++i) {
            const Node& r = g.node(source.output(i).node);
            const Edge& e = r.inputs[0];
            const Node& producer = g.node(e.producer);
            InputRef ref = InputRef::by_id(new_id[base[e.producer] + e.port], folded[e.producer] ? 0 : e.port);
            if (producer.op == StringView("Parameter")) ref = InputRef::by_id(new_id[base[e.producer]], 0);
            if (producer.op == StringView("Absent"))
                return fail(error, Status::InvalidArgument, "output '%.*s' reads no value", (int)r.name.size, r.name.data);
            Status s = m.add_output(source.output(i).name, ref);
            if (s != Status::Ok) return copy_error(m, s, error);
        }
        Status s = m.finalize();
        if (s != Status::Ok) return copy_error(m, s, error);
        // Per node of m: kernel data, and the value table.
        const Graph& pg = m.graph;
        uint32_t pn = pg.node_count();
        out->value_base_ = arena.allocate_array<uint32_t>(pn + 1);
        out->kernels_ = arena.allocate_array<const OpKernel*>(pn + 1);
        out->states_ = arena.allocate_array<const void*>(pn + 1);
        out->scratch_ = arena.allocate_array<size_t>(pn + 1);
        out->in_place_ = arena.allocate_array<uint8_t>(pn + 1);
        if (!out->value_base_ || !out->kernels_ || !out->states_ || !out->scratch_ || !out->in_place_)
            return fail(error, Status::OutOfMemory, "out of memory preparing the model");
        uint32_t pv = 0;
        for (uint32_t i = 0; i < pn; ++i) {
            out->value_base_[i] = pv;
            pv += pg.node(i).num_outputs;
            out->kernels_[i] = nullptr; out->states_[i] = nullptr; out->scratch_[i] = 0; out->in_place_[i] = 0;
        }
        out->value_base_[pn] = pv;
        out->value_count_ = pv;
        out->descs_ = arena.allocate_array<TensorDesc>(pv + 1);
        out->constants_ = arena.allocate_array<const void*>(pv + 1);
        if (!out->descs_ || !out->constants_) return fail(error, Status::OutOfMemory, "out of memory preparing the model");
        for (uint32_t i = 0; i < pn; ++i) {
            const Node& node = pg.node(i);
            for (uint32_t p = 0; p < node.num_outputs; ++p) {
                out->descs_[out->value_base_[i] + p] = node.outputs ? node.outputs[p] : TensorDesc();
                out->constants_[out->value_base_[i] + p] = nullptr;
            }
            if (node.op == StringView("Constant")) {
                const Attribute* a = pg.find_attribute(i, "value");
                out->constants_[out->value_base_[i]] = a && a->tensor && a->tensor->data ? a->tensor->data : &kEmpty;
            }
        }
        // Kernels prepared again on the prepared graph itself: its nodes may differ from the
        // source's (folded inputs, a Conv that absorbed its BatchNormalization).
        for (NodeId i : pg.topological_order()) {
            const Node& node = pg.node(i);
            if (detail::is_free_op(node.op)) continue;
            for (uint32_t k = 0; k < node.num_inputs; ++k) {
                uint32_t value = out->value_base_[node.inputs[k].producer] + node.inputs[k].port;
                in_desc[k] = out->descs_[value];
                in_value[k] = out->constants_[value];
                if (pg.node(node.inputs[k].producer).op == StringView("Absent")) { in_desc[k] = TensorDesc(); in_value[k] = nullptr; }
            }
            const OpKernel* k = lookup(lookup_user, node.op);
            TensorDesc check[detail::kMaxNodePorts];
            PrepareContext c;
            c.graph = &pg;
            c.node = i;
            c.opset = source.opset;
            c.num_inputs = node.num_inputs;
            c.inputs = in_desc;
            c.values = in_value;
            c.num_outputs = node.num_outputs;
            c.outputs = check;
            c.arena = &arena;
            c.threads = threads;
            c.max_elements = limits.max_tensor_elements;
            c.max_loop_iterations = limits.max_loop_iterations;
            Status st = k ? detail::prepare_node_kernel(&k, c) : Status::Unsupported;
            if (st != Status::Ok) {
                std::snprintf(error, kErrorMessageBytes, "%s", c.error[0] ? c.error : "prepare failed");
                return st;
            }
            for (uint32_t p = 0; p < node.num_outputs; ++p)   // the same shapes as the first pass
                TESSEL_ASSERT(check[p].rank == out->descs_[out->value_base_[i] + p].rank);
            out->kernels_[i] = k;
            out->states_[i] = c.state;
            out->scratch_[i] = c.scratch_bytes;
            out->in_place_[i] = c.in_place ? 1 : 0;
        }
        out->folded_ = removed;
        return Status::Ok;
    }

    // Conv followed by an inference BatchNormalization whose parameters are constants (and
    // the Conv read by nothing else): the BatchNormalization goes into the Conv's weights,
    // W'[o] = W[o] a[o], B'[o] = (B[o] - mean[o]) a[o] + bias[o], a = scale / sqrt(var + eps).
    // Returns the BatchNormalization node, or kNoNode.
    static NodeId foldable_batchnorm(const Graph& g, NodeId conv, const uint32_t* base, const TensorDesc* desc,
                                     const void* const* data, const uint8_t* folded) {
        const Node& c = g.node(conv);
        if (!(c.op == StringView("Conv")) || c.num_inputs < 2 || c.num_outputs != 1 || folded[conv]) return kNoNode;
        Span<const NodeId> succ = g.successors(conv);
        if (succ.size != 1) return kNoNode;
        NodeId bn = succ[0];
        const Node& b = g.node(bn);
        if (!(b.op == StringView("BatchNormalization")) || b.num_inputs != 5 || b.num_outputs != 1 || folded[bn]) return kNoNode;
        if (b.inputs[0].producer != conv) return kNoNode;
        for (uint32_t i = 1; i < 5; ++i)
            if (b.inputs[i].producer == conv) return kNoNode;
        const Attribute* training = g.find_attribute(bn, "training_mode");
        if (training && training->kind == AttributeKind::Int && training->i) return kNoNode;
        uint32_t w = base[c.inputs[1].producer] + c.inputs[1].port;
        if (!data[w] || desc[w].type != ElementType::Float32 || desc[w].rank < 3) return kNoNode;
        int64_t channels = desc[w].dims[0];
        if (c.num_inputs > 2) {
            uint32_t bias = base[c.inputs[2].producer] + c.inputs[2].port;
            if (g.node(c.inputs[2].producer).op != StringView("Absent") &&
                (!data[bias] || desc[bias].type != ElementType::Float32 || desc[bias].rank != 1 || desc[bias].dims[0] != channels))
                return kNoNode;
        }
        for (uint32_t i = 1; i < 5; ++i) {
            uint32_t v = base[b.inputs[i].producer] + b.inputs[i].port;
            if (!data[v] || desc[v].type != ElementType::Float32 || desc[v].rank != 1 || desc[v].dims[0] != channels) return kNoNode;
        }
        return bn;
    }

    static Status fold_batchnorm(const Graph& g, NodeId conv, NodeId bn, const uint32_t* base, const TensorDesc* desc,
                                 const void* const* data, Arena* arena, float** weights, float** bias) {
        const Node& c = g.node(conv);
        const Node& b = g.node(bn);
        uint32_t w = base[c.inputs[1].producer] + c.inputs[1].port;
        uint64_t count = 0;
        desc_elements(desc[w], &count);
        int64_t channels = desc[w].dims[0];
        uint64_t per = channels ? count / (uint64_t)channels : 0;
        const float* old_w = static_cast<const float*>(data[w]);
        const float* old_b = nullptr;
        if (c.num_inputs > 2 && g.node(c.inputs[2].producer).op != StringView("Absent"))
            old_b = static_cast<const float*>(data[base[c.inputs[2].producer] + c.inputs[2].port]);
        const float* p[4];
        for (uint32_t i = 0; i < 4; ++i) p[i] = static_cast<const float*>(data[base[b.inputs[i + 1].producer] + b.inputs[i + 1].port]);
        const Attribute* e = g.find_attribute(bn, "epsilon");
        double epsilon = e && e->kind == AttributeKind::Float ? e->f : 1e-5;
        *weights = static_cast<float*>(arena->allocate(count * sizeof(float) + 1, 64));
        *bias = static_cast<float*>(arena->allocate((size_t)channels * sizeof(float) + 1, 64));
        if (!*weights || !*bias) return Status::OutOfMemory;
        for (int64_t o = 0; o < channels; ++o) {
            double a = (double)p[0][o] / std::sqrt((double)p[3][o] + epsilon);
            for (uint64_t k = 0; k < per; ++k) (*weights)[(uint64_t)o * per + k] = (float)(old_w[(uint64_t)o * per + k] * a);
            (*bias)[o] = (float)(((old_b ? old_b[o] : 0.0) - p[2][o]) * a + p[1][o]);
        }
        return Status::Ok;
    }

    static Status copy_error(const Model& m, Status s, char* error) {
        std::snprintf(error, kErrorMessageBytes, "%s", m.last_error());
        return s;
    }

    static Status check_desc(const TensorDesc& d, const Limits& limits, const Node& node, char* error) {
        if (d.rank > limits.max_rank)
            return fail(error, Status::LimitExceeded, "node '%.*s': rank %u (limit %u)", (int)node.name.size, node.name.data, d.rank, limits.max_rank);
        uint64_t count = 0;
        if (!desc_elements(d, &count)) {
            bool negative = false;   // else the product overflows: a limit, as in the reader and Tensor::allocate
            for (uint32_t i = 0; i < d.rank; ++i) negative = negative || d.dims[i] < 0;
            return fail(error, negative ? Status::InvalidArgument : Status::LimitExceeded, "node '%.*s': an output has %s",
                        (int)node.name.size, node.name.data, negative ? "a negative dim" : "dims whose product overflows 64 bits");
        }
        if (count > limits.max_tensor_elements)
            return fail(error, Status::LimitExceeded, "node '%.*s': a tensor of %llu elements (limit %llu)", (int)node.name.size,
                        node.name.data, (unsigned long long)count, (unsigned long long)limits.max_tensor_elements);
        uint64_t nonzero = 1;   // kernels compute strides from these: an empty tensor may not hide a huge dim
        for (uint32_t i = 0; i < d.rank; ++i) {
            if (d.dims[i] == 0) continue;
            if ((uint64_t)d.dims[i] > limits.max_tensor_elements / nonzero)
                return fail(error, Status::LimitExceeded, "node '%.*s': an empty tensor whose other dims exceed the element limit (%llu)",
                            (int)node.name.size, node.name.data, (unsigned long long)limits.max_tensor_elements);
            nonzero *= (uint64_t)d.dims[i];
        }
        return Status::Ok;
    }

    static bool is_random(StringView op) {
        return op == StringView("RandomNormal") || op == StringView("RandomUniform") ||
               op == StringView("RandomNormalLike") || op == StringView("RandomUniformLike") || op == StringView("Multinomial");
    }

    // Shape (opset 15 start/end) and Size from the input's desc.
    static Status fold_shape(const Graph& g, NodeId id, const TensorDesc* in, uint32_t count, Arena* arena, TensorDesc* out,
                             const void** value, char* error) {
        const Node& node = g.node(id);
        if (count != 1 || in[0].type == ElementType::Undefined)
            return fail(error, Status::InvalidArgument, "node '%.*s' expects one input", (int)node.name.size, node.name.data);
        int64_t rank = in[0].rank;
        TensorDesc d;
        d.type = ElementType::Int64;
        int64_t* v = arena->allocate_array<int64_t>(kMaxRank + 1);
        if (!v) return fail(error, Status::OutOfMemory, "out of memory");
        if (node.op == StringView("Size")) {
            uint64_t n = 0;
            desc_elements(in[0], &n);
            v[0] = (int64_t)n;
            d.rank = 0;
        } else {
            const Attribute* a = g.find_attribute(id, "start");
            const Attribute* b = g.find_attribute(id, "end");
            int64_t start = a && a->kind == AttributeKind::Int ? a->i : 0;
            int64_t end = b && b->kind == AttributeKind::Int ? b->i : rank;
            if (start < 0) start += rank;
            if (end < 0) end += rank;
            start = start < 0 ? 0 : start > rank ? rank : start;
            end = end < 0 ? 0 : end > rank ? rank : end;
            int64_t k = 0;
            for (int64_t i = start; i < end; ++i) v[k++] = in[0].dims[i];
            d.rank = 1;
            d.dims[0] = k;
        }
        *out = d;
        *value = v;
        return Status::Ok;
    }

    // Evaluates a node once at compile time into the arena. LimitExceeded: too large to fold.
    static Status fold(const Graph& g, NodeId id, const OpKernel* k, const PrepareContext& c, const TensorDesc* in,
                       const void* const* in_value, TensorDesc* out, const void** value, const Limits& limits, Arena* arena,
                       char* error) {
        const Node& node = g.node(id);
        TensorView inputs[detail::kMaxNodePorts], outputs[detail::kMaxNodePorts];
        uint64_t total = 0;
        for (uint32_t p = 0; p < node.num_outputs; ++p) {
            uint64_t count = 0;
            desc_elements(out[p], &count);
            total += count * element_size(out[p].type);
        }
        if (total > limits.max_folded_bytes || node.num_outputs > detail::kMaxNodePorts) return Status::LimitExceeded;
        for (uint32_t i = 0; i < node.num_inputs; ++i) { inputs[i].desc = in[i]; inputs[i].data = const_cast<void*>(in_value[i]); }
        void* outs[detail::kMaxNodePorts];
        for (uint32_t p = 0; p < node.num_outputs; ++p) {
            uint64_t count = 0;
            desc_elements(out[p], &count);
            size_t bytes = (size_t)(count * element_size(out[p].type));
            outs[p] = arena->allocate(bytes ? bytes : 1, 64);
            if (!outs[p]) return fail(error, Status::OutOfMemory, "out of memory folding '%.*s'", (int)node.name.size, node.name.data);
            outputs[p].desc = out[p];
            outputs[p].data = outs[p];
        }
        void* scratch = nullptr;
        if (c.scratch_bytes) {
            scratch = arena->allocate(c.scratch_bytes, 64);
            if (!scratch) return fail(error, Status::OutOfMemory, "out of memory folding '%.*s'", (int)node.name.size, node.name.data);
        }
        char message[kErrorMessageBytes] = {};
        RunContext r;
        r.graph = &g;
        r.node = id;
        r.state = c.state;
        r.num_inputs = node.num_inputs;
        r.inputs = inputs;
        r.num_outputs = node.num_outputs;
        r.outputs = outputs;
        r.scratch = scratch;
        r.error = message;
        Status s = k->run(r);
        if (s != Status::Ok) {
            std::snprintf(error, kErrorMessageBytes, "%s", message[0] ? message : "folding failed");
            return s;
        }
        for (uint32_t p = 0; p < node.num_outputs; ++p) value[p] = outs[p];
        return Status::Ok;
    }

    static const int64_t kEmpty;
};
const int64_t detail_prepare::kEmpty = 0;

// >>builtin devices
namespace detail {

struct ConfigKey {
    const char* key;
    const char* default_value;
};

inline bool parse_yes_no(StringView v, bool* out) {
    if (v == StringView("YES") || v == StringView("yes") || v == StringView("1") || v == StringView("true")) { *out = true; return true; }
    if (v == StringView("NO") || v == StringView("no") || v == StringView("0") || v == StringView("false")) { *out = false; return true; }
    return false;
}

inline bool parse_count(StringView v, uint32_t low, uint32_t high, uint32_t* out) {
    if (v.size == 0 || v.size > 9) return false;
    uint32_t x = 0;
    for (char ch : v) {
        if (ch < '0' || ch > '9') return false;
        x = x * 10 + (uint32_t)(ch - '0');
    }
    if (x < low || x > high) return false;
    *out = x;
    return true;
}

// Whether `op` is in a comma-separated list ("*" or empty list: every op).
inline bool list_contains(StringView list, StringView op) {
    if (list == StringView("*")) return true;
    size_t start = 0;
    for (size_t i = 0; i <= list.size; ++i) {
        if (i == list.size || list[i] == ',') {
            size_t b = start, e = i;
            while (b < e && list[b] == ' ') ++b;
            while (e > b && list[e - 1] == ' ') --e;
            if (StringView(list.data + b, e - b) == op) return true;
            start = i + 1;
        }
    }
    return false;
}

}  // namespace detail

Status PreparedModel::run_kernel(const ProgramStep& step, const StepContext& context, uint32_t max_threads, RunFn run,
                                 const void* state) const {
    // Only the views this step uses are built (a whole array of default-constructed ones costs
    // more than a tiny kernel); a node has at most kMaxNodePorts inputs and outputs (checked on read).
    union Views {
        TensorView v[detail::kMaxNodePorts];
        Views() {}
    } in, out;
    if (step.reads.size > detail::kMaxNodePorts || step.writes.size > detail::kMaxNodePorts) return Status::LimitExceeded;
    for (uint32_t k = 0; k < step.reads.size; ++k) {
        in.v[k].desc = value_desc(step.reads[k]);
        in.v[k].data = context.values[step.reads[k]];
    }
    for (uint32_t k = 0; k < step.writes.size; ++k) {
        out.v[k].desc = value_desc(step.writes[k]);
        out.v[k].data = context.values[step.writes[k]];
    }
    RunContext r;
    r.graph = &model.graph;
    r.node = step.node;
    r.state = run ? state : kernel_state(step.node);
    r.num_inputs = (uint32_t)step.reads.size;
    r.inputs = in.v;
    r.num_outputs = (uint32_t)step.writes.size;
    r.outputs = out.v;
    r.scratch = context.scratch;
    r.threads = max_threads < context.threads ? max_threads : context.threads;
    r.pool = context.pool;
    r.error = context.error;
    r.body_profile = context.body_profile;
    return run ? run(r) : kernel(step.node)->run(r);
}

namespace detail {

// >>reference program
// A program of reference kernels (and, on CPU, fused islands).
class ReferenceProgram : public DeviceProgram {
public:
    struct Unit {
        const OpKernel* kernel = nullptr;   // reference step
        Snippet* snippet = nullptr;         // fused island step
        SnippetBody* body = nullptr;        // the snippet's body (arena lists, object on the heap)
        RunFn run = nullptr;                // CPU: its own kernel for the node (JIT GEMM), with
        const void* state = nullptr;        // this state, instead of the prepared one
    };
    Arena arena;
    const PreparedModel* model = nullptr;
    ProgramStep* steps_ = nullptr;
    Unit* units = nullptr;
    uint32_t count = 0;
    uint32_t threads = 1;
    char payload[64] = {};
    size_t payload_size = 0;
    KernelCache cache;

    ~ReferenceProgram() override {
        for (uint32_t i = 0; i < count; ++i) {
            destroy(units[i].snippet);
            destroy(units[i].body);
        }
    }
    Span<const ProgramStep> steps() const override { return Span<const ProgramStep>(steps_, count); }
    Status export_payload(WriteFn write, void* user) const override {
        write(user, payload, payload_size);
        return Status::Ok;
    }
    // A fused island runs in parts of at least this many bytes walked: below that, waking the
    // pool costs more than a second thread saves. bench/runtime.cpp's fused-island table tunes it.
    static constexpr uint64_t kPartBytes = 4u << 20;
    struct SnippetRun {
        const Snippet* snippet;
        Span<const float* const> in;
        Span<float* const> out;
        uint32_t parts;
        Status status[kMaxThreads];   // per part
    };
    Status run_step(uint32_t i, const StepContext& context) const override {
        const ProgramStep& step = steps_[i];
        const Unit& unit = units[i];
        if (unit.snippet) {
            const float* in[kSnippetMaxArgs];
            float* out[kSnippetMaxArgs];
            for (uint32_t k = 0; k < step.reads.size; ++k) in[k] = static_cast<const float*>(context.values[step.reads[k]]);
            for (uint32_t k = 0; k < step.writes.size; ++k) out[k] = static_cast<float*>(context.values[step.writes[k]]);
            SnippetRun job;   // status[] is not cleared: each part writes its own entry
            job.snippet = unit.snippet;
            job.in = Span<const float* const>(in, step.reads.size);
            job.out = Span<float* const>(out, step.writes.size);
            job.parts = 1;
            // A large island's kernel runs in parts on the request's threads; the interpreter
            // (Ref) runs whole, as its scratch is one per request.
            if (context.pool && unit.snippet->isa() != Isa::Ref && unit.snippet->stats().bytes_fused >= kPartBytes * 2)
                job.parts = (uint32_t)std::min<uint64_t>({threads, context.threads, unit.snippet->stats().bytes_fused / kPartBytes});
            if (job.parts > 1) {
                context.pool->run(job.parts, [](void* user, uint64_t begin, uint64_t end) {
                    SnippetRun& j = *static_cast<SnippetRun*>(user);
                    for (uint64_t k = begin; k < end; ++k) j.status[k] = j.snippet->run(j.in, j.out, nullptr, (uint32_t)k, j.parts);
                }, &job);
            } else {
                job.status[0] = unit.snippet->run(job.in, job.out, static_cast<float*>(context.scratch));
            }
            for (uint32_t k = 0; k < job.parts; ++k)
                if (job.status[k] != Status::Ok) {
                    if (context.error) std::snprintf(context.error, kErrorMessageBytes, "%s", unit.snippet->last_error());
                    return job.status[k];
                }
            return Status::Ok;
        }
        return model->run_kernel(step, context, threads, unit.run, unit.state);
    }
};

class BuiltinDevice : public Device {
public:
    BuiltinDevice(const char* name, const char* full_name, const ConfigKey* keys, uint32_t key_count)
        : name_(name), full_name_(full_name), keys_(keys), key_count_(key_count) {
        for (uint32_t i = 0; i < key_count && i < kMaxKeys; ++i) copy_text(values_[i], sizeof values_[i], keys[i].default_value);
    }
    StringView name() const override { return name_; }

    Status get_metric(StringView key, StringView* value) override {
        if (key == StringView("AVAILABLE_DEVICES")) return give("0", value);
        if (key == StringView("FULL_DEVICE_NAME")) return give(full_name_, value);
        if (key == StringView("SUPPORTED_METRICS"))
            return give("AVAILABLE_DEVICES FULL_DEVICE_NAME SUPPORTED_METRICS SUPPORTED_CONFIG_KEYS OPTIMIZATION_CAPABILITIES", value);
        if (key == StringView("SUPPORTED_CONFIG_KEYS")) {
            size_t k = 0;
            metric_[0] = 0;
            for (uint32_t i = 0; i < key_count_; ++i)
                k += (size_t)std::snprintf(metric_ + k, sizeof metric_ - k, "%s%s", i ? " " : "", keys_[i].key);
            *value = StringView(metric_, k < sizeof metric_ ? k : sizeof metric_ - 1);
            return Status::Ok;
        }
        if (key == StringView("OPTIMIZATION_CAPABILITIES")) return give(capabilities(), value);
        return fail(Status::NotFound, "device %s has no metric '%.*s'", name_, (int)key.size, key.data);
    }

    Status set_config(StringView key, StringView value) override {
        uint32_t i = find_key(key);
        if (i == key_count_) return fail(Status::NotFound, "device %s has no config key '%.*s'", name_, (int)key.size, key.data);
        if (value.size >= sizeof values_[i])
            return fail(Status::InvalidArgument, "%s: value of %s is too long", name_, keys_[i].key);
        TESSEL_TRY(check_config(key, value));
        std::memcpy(values_[i], value.data, value.size);
        values_[i][value.size] = 0;
        return Status::Ok;
    }

    Status get_config(StringView key, StringView* value) override {
        uint32_t i = find_key(key);
        if (i == key_count_) return fail(Status::NotFound, "device %s has no config key '%.*s'", name_, (int)key.size, key.data);
        *value = StringView(values_[i]);
        return Status::Ok;
    }

    Status add_extension(const OpKernel& kernel) override {
        if (!kernel.op || !kernel.prepare || !kernel.run) return fail(Status::InvalidArgument, "extension without op, prepare or run");
        for (uint32_t i = 0; i < extension_count_; ++i)
            if (StringView(extensions_[i].op) == StringView(kernel.op)) { extensions_[i] = kernel; return Status::Ok; }
        if (extension_count_ == kMaxExtensions) return fail(Status::LimitExceeded, "at most %u extensions", kMaxExtensions);
        extensions_[extension_count_++] = kernel;
        return Status::Ok;
    }

    const OpKernel* find_extension(StringView op) const override {
        for (uint32_t i = 0; i < extension_count_; ++i) if (StringView(extensions_[i].op) == op) return &extensions_[i];
        return nullptr;
    }
    const OpKernel* kernel_for(StringView op) const {
        const OpKernel* k = find_extension(op);
        return k ? k : find_builtin_kernel(op);
    }

    Status query_model(const PreparedModel& model, uint8_t* supported) override {
        const Graph& g = model.model.graph;
        for (uint32_t i = 0; i < g.node_count(); ++i) {
            StringView op = g.node(i).op;
            supported[i] = is_free_op(op) || (kernel_for(op) && op_allowed(op)) ? 1 : 0;
        }
        return Status::Ok;
    }

    Status import_subgraph(const PreparedModel& model, Span<const NodeId> nodes, const void* payload, size_t size,
                           DeviceProgram** program) override {
        TESSEL_TRY(check_payload(payload, size));
        return compile_subgraph(model, nodes, program);
    }

protected:
    virtual Status check_config(StringView key, StringView value) = 0;
    virtual bool op_allowed(StringView op) const = 0;
    virtual const char* capabilities() const = 0;
    virtual Status check_payload(const void* payload, size_t size) = 0;
    StringView config(const char* key) const { return StringView(values_[find_key(key)]); }

    uint32_t find_key(StringView key) const {
        uint32_t i = 0;
        while (i < key_count_ && !(StringView(keys_[i].key) == key)) ++i;
        return i;
    }
    Status give(const char* text, StringView* value) {
        copy_text(metric_, sizeof metric_, text);
        *value = StringView(metric_);
        return Status::Ok;
    }

    // Reference steps for `nodes` in order (ascending ids are topological in a prepared model).
    Status add_reference_step(ReferenceProgram* p, const PreparedModel& model, NodeId id, uint32_t* reads, uint32_t* writes) {
        const Graph& g = model.model.graph;
        const Node& node = g.node(id);
        // Run with the kernel that prepared the node: its state belongs to it.
        const OpKernel* k = model.kernel(id);
        if (!k || !kernel_for(node.op) || !op_allowed(node.op))
            return fail(Status::Unsupported, "%s cannot run node '%.*s' (op %.*s)", name_, (int)node.name.size, node.name.data,
                        (int)node.op.size, node.op.data);
        ProgramStep& step = p->steps_[p->count];
        ReferenceProgram::Unit& unit = p->units[p->count++];
        for (uint32_t i = 0; i < node.num_inputs; ++i) reads[i] = model.value_id(node.inputs[i].producer, node.inputs[i].port);
        for (uint32_t i = 0; i < node.num_outputs; ++i) writes[i] = model.value_id(id, i);
        step.node = id;
        step.reads = Span<const uint32_t>(reads, node.num_inputs);
        step.writes = Span<const uint32_t>(writes, node.num_outputs);
        step.in_place = model.kernel_in_place(id);
        step.scratch_bytes = model.kernel_scratch(id);
        char name[96];
        std::snprintf(name, sizeof name, "ref:%.*s", (int)node.op.size, node.op.data);
        step.kernel = p->arena.copy_string(StringView(name)).data;
        if (!step.kernel) return fail(Status::OutOfMemory, "out of memory");
        unit.kernel = k;
        return Status::Ok;
    }

    static constexpr uint32_t kMaxKeys = 8;
    static constexpr uint32_t kMaxExtensions = 64;
    const char* name_;
    const char* full_name_;
    const ConfigKey* keys_;
    uint32_t key_count_;
    char values_[kMaxKeys][kConfigValueBytes] = {};
    char metric_[1024] = {};
    OpKernel extensions_[kMaxExtensions];
    uint32_t extension_count_ = 0;
};

// >>template device
// TEMPLATE: reference kernels only; SUPPORTED_OPS limits what it takes (default every op).
// It is the device the HETERO tests split graphs with, and the file a plugin author copies.
const ConfigKey kTemplateKeys[] = {{"SUPPORTED_OPS", "*"}, {"PERF_COUNT", "NO"}};

class TemplateDevice : public BuiltinDevice {
public:
    TemplateDevice() : BuiltinDevice("TEMPLATE", "Tessel template device (reference kernels)", kTemplateKeys, 2) {}

    Status compile_subgraph(const PreparedModel& model, Span<const NodeId> nodes, DeviceProgram** program) override {
        *program = nullptr;
        ReferenceProgram* p = create<ReferenceProgram>();
        if (!p) return fail(Status::OutOfMemory, "out of memory");
        Status s = build(p, model, nodes);
        if (s != Status::Ok) { destroy(p); return s; }
        *program = p;
        return Status::Ok;
    }

protected:
    Status build(ReferenceProgram* p, const PreparedModel& model, Span<const NodeId> nodes) {
        const Graph& g = model.model.graph;
        p->model = &model;
        p->steps_ = p->arena.allocate_array<ProgramStep>(nodes.size + 1);
        p->units = p->arena.allocate_array<ReferenceProgram::Unit>(nodes.size + 1);
        if (!p->steps_ || !p->units) return fail(Status::OutOfMemory, "out of memory");
        for (size_t i = 0; i <= nodes.size; ++i) { new (&p->steps_[i]) ProgramStep(); new (&p->units[i]) ReferenceProgram::Unit(); }
        for (NodeId id : nodes) {
            const Node& node = g.node(id);
            if (is_free_op(node.op)) continue;
            uint32_t* reads = p->arena.allocate_array<uint32_t>(node.num_inputs + 1);
            uint32_t* writes = p->arena.allocate_array<uint32_t>(node.num_outputs + 1);
            if (!reads || !writes) return fail(Status::OutOfMemory, "out of memory");
            TESSEL_TRY(add_reference_step(p, model, id, reads, writes));
        }
        std::memcpy(p->payload, "TMPL", 4);
        p->payload_size = 4;
        return Status::Ok;
    }
    Status check_config(StringView key, StringView value) override {
        bool yes;
        if (key == StringView("PERF_COUNT") && !parse_yes_no(value, &yes))
            return fail(Status::InvalidArgument, "TEMPLATE: PERF_COUNT must be YES or NO");
        if (key == StringView("SUPPORTED_OPS") && !(value == StringView("*"))) {  // names must be ops
            size_t start = 0;
            for (size_t i = 0; i <= value.size; ++i) {
                if (i < value.size && value[i] != ',') continue;
                StringView op(value.data + start, i - start);
                start = i + 1;
                if (op.empty()) continue;
                if (!find_builtin_kernel(op) && !find_extension(op))
                    return fail(Status::InvalidArgument, "TEMPLATE: SUPPORTED_OPS names '%.*s', which is not an op", (int)op.size, op.data);
            }
        }
        return Status::Ok;
    }
    bool op_allowed(StringView op) const override { return list_contains(config("SUPPORTED_OPS"), op); }
    const char* capabilities() const override { return "FP32 INT64 BOOL"; }
    Status check_payload(const void* payload, size_t size) override {
        if (size != 4 || std::memcmp(payload, "TMPL", 4) != 0) return fail(Status::ParseError, "TEMPLATE: bad payload");
        return Status::Ok;
    }
};

// >>cpu device
// CPU: reference kernels, with every elementwise island fused into one snippets.h kernel, and
// MatMul, Gemm, Conv (not depthwise) and ConvTranspose on snippets.h's JIT GEMM where the target has its tiles
// (AVX2, AVX-512, NEON; cpu_gemm_step), constant weights packed at compile time.
const ConfigKey kCpuKeys[] = {{"NUM_THREADS", "1"}, {"PERF_COUNT", "NO"}, {"FUSION", "YES"}, {"ISA", "auto"}};

class CpuDevice : public BuiltinDevice {
public:
    CpuDevice() : BuiltinDevice("CPU", cpu_name(), kCpuKeys, 4) {}
    static const char* cpu_name() {
#if defined(__aarch64__)
        return "Tessel CPU (AArch64, reference kernels + NEON snippets)";
#elif defined(__x86_64__)
        return "Tessel CPU (x86-64, reference kernels + SSE4.1/AVX2/AVX-512 snippets)";
#else
        return "Tessel CPU (reference kernels)";
#endif
    }

    Status compile_subgraph(const PreparedModel& model, Span<const NodeId> nodes, DeviceProgram** program) override {
        *program = nullptr;
        ReferenceProgram* p = create<ReferenceProgram>();
        if (!p) return fail(Status::OutOfMemory, "out of memory");
        Status s = build_cpu(p, model, nodes);
        if (s != Status::Ok) { destroy(p); return s; }
        *program = p;
        return Status::Ok;
    }
    uint32_t threads() const {
        uint32_t t = 1;
        parse_count(config("NUM_THREADS"), 1, kMaxThreads, &t);
        return t;
    }

protected:
    Status check_config(StringView key, StringView value) override {
        uint32_t n;
        bool yes;
        Isa isa;
        if (key == StringView("NUM_THREADS") && !parse_count(value, 1, kMaxThreads, &n))
            return fail(Status::InvalidArgument, "CPU: NUM_THREADS must be 1..64");
        if ((key == StringView("PERF_COUNT") || key == StringView("FUSION")) && !parse_yes_no(value, &yes))
            return fail(Status::InvalidArgument, "CPU: %.*s must be YES or NO", (int)key.size, key.data);
        if (key == StringView("ISA") && !(value == StringView("auto"))) {
            if (parse_isa(value, &isa) != Status::Ok)
                return fail(Status::InvalidArgument, "CPU: ISA must be auto, ref, sse41, avx2, avx512 or neon");
            if (!isa_available(isa)) return fail(Status::Unsupported, "CPU: ISA %.*s is not available here", (int)value.size, value.data);
        }
        return Status::Ok;
    }
    bool op_allowed(StringView) const override { return true; }
    const char* capabilities() const override { return "FP32 INT64 BOOL FUSED_ELEMENTWISE"; }
    Status check_payload(const void* payload, size_t size) override {
        if (size != 6 || std::memcmp(payload, "CPU1", 4) != 0) return fail(Status::ParseError, "CPU: bad payload");
        Isa isa = (Isa)static_cast<const uint8_t*>(payload)[4];
        if ((uint8_t)isa >= (uint8_t)Isa::Auto) return fail(Status::ParseError, "CPU: bad payload");
        if (!isa_available(isa)) return fail(Status::Unsupported, "CPU: the blob was compiled for %s, which this CPU lacks", isa_name(isa));
        return Status::Ok;
    }

    Status build_cpu(ReferenceProgram* p, const PreparedModel& model, Span<const NodeId> nodes);
};

// MatMul, Gemm and Conv on the JIT GEMM when `isa` has its tiles (defined beside those ops):
// replaces the last step's kernel, or leaves the reference one for shapes it does not take.
inline Status cpu_gemm_step(ReferenceProgram* p, const PreparedModel& model, NodeId id, Isa isa);

// The CPU program: a private graph of the subgraph (external inputs become Parameters, and
// each one-element float Constant a private Constant per reader, so it can join the reader's
// island as a scalar, exactly as the TEMPLATE kernel treats it), tokenized into islands; the
// islands and the remaining nodes run in a topological order of the condensed graph.
inline Status CpuDevice::build_cpu(ReferenceProgram* p, const PreparedModel& model, Span<const NodeId> nodes) {
    const Graph& g = model.model.graph;
    p->model = &model;
    p->threads = threads();
    bool fusion = true;
    parse_yes_no(config("FUSION"), &fusion);
    Isa isa = Isa::Auto;
    if (!(config("ISA") == StringView("auto"))) ignore_status(parse_isa(config("ISA"), &isa));
    Isa target = isa == Isa::Auto ? default_isa() : isa;
    std::memcpy(p->payload, "CPU1", 4);
    p->payload[4] = (char)target;
    p->payload[5] = fusion ? 1 : 0;
    p->payload_size = 6;
    p->steps_ = p->arena.allocate_array<ProgramStep>(nodes.size + 1);
    p->units = p->arena.allocate_array<ReferenceProgram::Unit>(nodes.size + 1);
    if (!p->steps_ || !p->units) return fail(Status::OutOfMemory, "out of memory");
    for (size_t i = 0; i <= nodes.size; ++i) { new (&p->steps_[i]) ProgramStep(); new (&p->units[i]) ReferenceProgram::Unit(); }

    Arena scratch;
    Graph local(&p->arena);           // node i of `local` stands for origin[i]
    uint32_t capacity = (uint32_t)nodes.size * 8 + 16;
    NodeId* origin = scratch.allocate_array<NodeId>(capacity);
    uint32_t* origin_port = scratch.allocate_array<uint32_t>(capacity);
    // Members' local ids (no per-graph array: a model split into many subgraphs must not pay
    // one per subgraph); 0 marks a member not added yet, kNoNode a node outside.
    NodeId* member_nodes = scratch.allocate_array<NodeId>(nodes.size + 1);
    if (!origin || !origin_port || !member_nodes) return fail(Status::OutOfMemory, "out of memory");
    uint32_t member_count = 0;
    for (NodeId id : nodes) if (!is_free_op(g.node(id).op)) member_nodes[member_count++] = id;
    NodeMap<NodeId> local_ids;
    if (!local_ids.init(&scratch, member_nodes, member_count, 0)) return fail(Status::OutOfMemory, "out of memory");
    auto local_of = [&](NodeId id) { const NodeId* l = local_ids.find(id); return l ? *l : kNoNode; };
    uint32_t members = 0;
    struct External { NodeId producer; uint32_t port; NodeId local; };
    External* externals = scratch.allocate_array<External>(capacity);
    uint32_t external_count = 0;
    InputRef refs[kMaxNodePorts];
    char name[64];
    Status s = Status::Ok;
    for (NodeId id : nodes) {
        const Node& node = g.node(id);
        if (is_free_op(node.op)) continue;
        if (local.node_count() + node.num_inputs + 1 >= capacity) return fail(Status::LimitExceeded, "CPU: subgraph too large");
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            NodeId producer = node.inputs[i].producer;
            uint32_t port = node.inputs[i].port;
            if (local_of(producer) != kNoNode) { refs[i] = InputRef::by_id(local_of(producer), port); continue; }
            const Node& pn = g.node(producer);
            uint64_t count = 0;
            desc_elements(model.value_desc(model.value_id(producer, port)), &count);
            bool scalar = pn.op == StringView("Constant") && count == 1 &&
                          model.value_desc(model.value_id(producer, port)).type == ElementType::Float32;
            NodeId lid = kNoNode;
            for (uint32_t k = 0; k < external_count && !scalar; ++k)
                if (externals[k].producer == producer && externals[k].port == port) lid = externals[k].local;
            if (lid == kNoNode) {
                std::snprintf(name, sizeof name, "x%u", local.node_count());
                NodeSpec spec;
                spec.name = StringView(name);
                spec.op = scalar ? StringView("Constant") : StringView("Parameter");
                s = local.add_node(spec, &lid);
                if (s == Status::Ok) s = local.set_output_desc(lid, 0, model.value_desc(model.value_id(producer, port)));
                if (s == Status::Ok && scalar) s = local.add_attribute(lid, *g.find_attribute(producer, "value"));
                if (s != Status::Ok) return fail(s, "CPU: %s", local.last_error());
                origin[lid] = producer;
                origin_port[lid] = port;
                if (!scalar) externals[external_count++] = External{producer, port, lid};
            }
            refs[i] = InputRef::by_id(lid, 0);
        }
        NodeSpec spec;
        std::snprintf(name, sizeof name, "n%u", local.node_count());
        spec.name = StringView(name);
        spec.op = node.op;
        spec.inputs = Span<const InputRef>(refs, node.num_inputs);
        spec.num_outputs = node.num_outputs;
        NodeId lid = kNoNode;
        s = local.add_node(spec, &lid);
        for (const Attribute* a = node.attributes; a && s == Status::Ok; a = a->next) s = local.add_attribute(lid, *a);
        for (uint32_t q = 0; q < node.num_outputs && s == Status::Ok; ++q) s = local.set_output_desc(lid, q, model.value_desc(model.value_id(id, q)));
        if (s != Status::Ok) return fail(s, "CPU: %s", local.last_error());
        origin[lid] = id;
        origin_port[lid] = 0;
        *local_ids.find(id) = lid;
        ++members;
    }
    // A member read outside the subgraph (another subgraph, or a model output) gets a local
    // sink, so an island always writes it out.
    for (NodeId id : nodes) {
        if (local_of(id) == kNoNode || is_free_op(g.node(id).op)) continue;
        bool outside = false;
        for (NodeId succ : g.successors(id)) if (local_of(succ) == kNoNode || is_free_op(g.node(succ).op)) outside = true;
        if (!outside) continue;
        if (local.node_count() + 1 >= capacity) return fail(Status::LimitExceeded, "CPU: subgraph too large");
        InputRef in = InputRef::by_id(local_of(id), 0);
        NodeSpec spec;
        std::snprintf(name, sizeof name, "s%u", local.node_count());
        spec.name = StringView(name);
        spec.op = "Result";
        spec.inputs = Span<const InputRef>(&in, 1);
        spec.num_outputs = 0;
        NodeId sink;
        s = local.add_node(spec, &sink);
        if (s != Status::Ok) return fail(s, "CPU: %s", local.last_error());
        origin[sink] = id;
        origin_port[sink] = 0;
    }
    s = local.finalize();
    if (s != Status::Ok) return fail(s, "CPU: %s", local.last_error());
    uint32_t ln = local.node_count();
    Tokenization tokens;
    uint32_t* island = scratch.allocate_array<uint32_t>(ln + 1);
    if (!island) return fail(Status::OutOfMemory, "out of memory");
    for (uint32_t i = 0; i < ln; ++i) island[i] = kNoIsland;
    uint32_t island_count = 0;
    if (fusion) {
        s = tokenize(local, TokenizeOptions(), &scratch, &tokens);
        if (s != Status::Ok) return fail(s, "CPU: tokenize failed");
        for (uint32_t i = 0; i < ln; ++i) {
            const Node& ln_node = local.node(i);
            // Parameters and lone scalars never make a kernel of their own.
            island[i] = ln_node.op == StringView("Parameter") ? kNoIsland : tokens.island_of[i];
        }
        island_count = tokens.island_count;
    }
    // An island made only of Constants, or whose result would be a Constant, runs unfused.
    uint32_t* island_units = scratch.allocate_array<uint32_t>(island_count + 1);
    uint8_t* usable = scratch.allocate_array<uint8_t>(island_count + 1);
    if (!island_units || !usable) return fail(Status::OutOfMemory, "out of memory");
    for (uint32_t k = 0; k < island_count; ++k) usable[k] = 0;
    for (uint32_t i = 0; i < ln; ++i)
        if (island[i] != kNoIsland && local.node(i).op != StringView("Constant")) usable[island[i]] = 1;
    for (uint32_t i = 0; i < ln; ++i)
        if (island[i] != kNoIsland && local.node(i).op == StringView("Constant")) {
            bool read_outside = false;
            for (NodeId succ : local.successors(i)) if (island[succ] != island[i]) read_outside = true;
            if (read_outside) usable[island[i]] = 0;
        }
    for (uint32_t i = 0; i < ln; ++i)
        if (island[i] != kNoIsland && !usable[island[i]]) island[i] = kNoIsland;
    // Units: islands (0..island_count-1) and single members (island_count + local id); Kahn
    // over the condensed graph, smallest local id first so the order is deterministic.
    uint32_t unit_count = island_count + ln;
    uint32_t* indegree = scratch.allocate_array<uint32_t>(unit_count + 1);
    uint32_t* ready = scratch.allocate_array<uint32_t>(unit_count + 1);
    if (!indegree || !ready) return fail(Status::OutOfMemory, "out of memory");
    auto unit_of = [&](NodeId v) { return island[v] != kNoIsland ? island[v] : island_count + v; };
    for (uint32_t u = 0; u < unit_count; ++u) indegree[u] = 0;
    for (uint32_t v = 0; v < ln; ++v)
        for (uint32_t i = 0; i < local.node(v).num_inputs; ++i) {
            NodeId w = local.node(v).inputs[i].producer;
            if (unit_of(w) != unit_of(v)) ++indegree[unit_of(v)];
        }
    // members listed per unit for the successor walk
    uint32_t* first = scratch.allocate_array<uint32_t>(unit_count + 1);
    uint32_t* next = scratch.allocate_array<uint32_t>(ln + 1);
    if (!first || !next) return fail(Status::OutOfMemory, "out of memory");
    for (uint32_t u = 0; u < unit_count; ++u) first[u] = kNoNode;
    for (uint32_t v = ln; v-- > 0;) { next[v] = first[unit_of(v)]; first[unit_of(v)] = v; }
    uint32_t ready_count = 0;
    for (uint32_t u = 0; u < unit_count; ++u) if (indegree[u] == 0 && first[u] != kNoNode) ready[ready_count++] = u;
    uint32_t head = 0;
    SnippetOptions options;
    options.isa = target;
    options.cache = &p->cache;
    // build_island_body takes a Tokenization: the usable islands only, their nodes listed once.
    Tokenization view;
    view.island_of = Span<const uint32_t>(island, ln);
    view.island_count = island_count;
    s = list_island_nodes(local, &scratch, &view);
    if (s != Status::Ok) return fail(s, "CPU: cannot list the islands' nodes");
    while (head < ready_count) {
        uint32_t u = ready[head++];
        if (u >= island_count) {   // a single node
            NodeId v = u - island_count;
            const Node& lnode = local.node(v);
            if (lnode.op != StringView("Parameter") && lnode.op != StringView("Constant") && lnode.op != StringView("Result")) {
                NodeId id = origin[v];
                const Node& node = g.node(id);
                uint32_t* reads = p->arena.allocate_array<uint32_t>(node.num_inputs + 1);
                uint32_t* writes = p->arena.allocate_array<uint32_t>(node.num_outputs + 1);
                if (!reads || !writes) return fail(Status::OutOfMemory, "out of memory");
                TESSEL_TRY(add_reference_step(p, model, id, reads, writes));
                if (model.kernel(id) == find_builtin_kernel(node.op)) {
                    s = cpu_gemm_step(p, model, id, target);
                    if (s != Status::Ok)
                        return fail(s, "CPU: node '%.*s': out of memory for its packed weights", (int)node.name.size, node.name.data);
                }
            }
        } else {                   // a fused island
            SnippetBody* body = create<SnippetBody>(&p->arena);
            if (!body) return fail(Status::OutOfMemory, "out of memory");
            NodeId in_nodes[kSnippetMaxArgs], out_nodes[kSnippetMaxArgs];
            uint32_t in_ports[kSnippetMaxArgs], in_count = 0, out_count = 0;
            s = build_island_body(local, view, u, body, in_nodes, &in_count, out_nodes, &out_count, in_ports);
            if (s != Status::Ok) { destroy(body); return fail(s, "CPU: island %u: cannot build its body", u); }
            Snippet* snippet = create<Snippet>();
            if (!snippet) { destroy(body); return fail(Status::OutOfMemory, "out of memory"); }
            s = snippet->compile(*body, options);
            if (s != Status::Ok) {
                ignore_status(fail(s, "CPU: island %u: %s", u, snippet->last_error()));
                destroy(snippet);
                destroy(body);
                return s;
            }
            uint32_t* reads = p->arena.allocate_array<uint32_t>(in_count + 1);
            uint32_t* writes = p->arena.allocate_array<uint32_t>(out_count + 1);
            if (!reads || !writes) { destroy(snippet); destroy(body); return fail(Status::OutOfMemory, "out of memory"); }
            for (uint32_t k = 0; k < in_count; ++k) reads[k] = model.value_id(origin[in_nodes[k]], origin_port[in_nodes[k]] + in_ports[k]);
            for (uint32_t k = 0; k < out_count; ++k) writes[k] = model.value_id(origin[out_nodes[k]], 0);
            ProgramStep& step = p->steps_[p->count];
            ReferenceProgram::Unit& unit = p->units[p->count++];
            step.node = origin[out_nodes[out_count - 1]];
            step.reads = Span<const uint32_t>(reads, in_count);
            step.writes = Span<const uint32_t>(writes, out_count);
            step.scratch_bytes = snippet->scratch_bytes();
            uint32_t fused = 0;
            for (uint32_t v = first[u]; v != kNoNode; v = next[v]) if (local.node(v).op != StringView("Constant")) ++fused;
            std::snprintf(name, sizeof name, "snippet:%s:%u", isa_name(snippet->isa()), fused);
            step.kernel = p->arena.copy_string(StringView(name)).data;
            unit.snippet = snippet;
            unit.body = body;
        }
        for (uint32_t v = first[u]; v != kNoNode; v = next[v])
            for (NodeId w : local.successors(v)) {
                uint32_t su = unit_of(w);
                if (su == u) continue;
                uint32_t edges = 0;   // count the edges from this unit's members into w
                for (uint32_t i = 0; i < local.node(w).num_inputs; ++i) if (local.node(w).inputs[i].producer == v) ++edges;
                indegree[su] -= edges;
                if (indegree[su] == 0) ready[ready_count++] = su;
            }
    }
    (void)members;
    return Status::Ok;
}

// >>opencl loader
// libOpenCL.so.1 (the ICD loader) opened with dlopen at run time: nothing links against
// OpenCL, and a machine without a driver only loses the GPU device. The entry points are
// loaded once per library path and never unloaded (programs keep calling them).
#ifdef TESSEL_HAS_OPENCL
#define TESSEL_OPENCL_FUNCTIONS(X)                                                                          \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext)        \
    X(clRetainContext) X(clReleaseContext) X(clCreateCommandQueue) X(clReleaseCommandQueue)                  \
    X(clCreateProgramWithSource) X(clCreateProgramWithBinary) X(clBuildProgram) X(clGetProgramBuildInfo)     \
    X(clGetProgramInfo) X(clReleaseProgram) X(clCreateKernel) X(clReleaseKernel) X(clSetKernelArg)           \
    X(clCreateBuffer) X(clReleaseMemObject) X(clRetainMemObject) X(clEnqueueNDRangeKernel) X(clEnqueueMapBuffer)                  \
    X(clEnqueueUnmapMemObject) X(clFinish) X(clGetEventProfilingInfo) X(clReleaseEvent) X(clWaitForEvents)

struct OpenClApi {
#define TESSEL_OPENCL_POINTER(name) decltype(&::name) name = nullptr;
    TESSEL_OPENCL_FUNCTIONS(TESSEL_OPENCL_POINTER)
#undef TESSEL_OPENCL_POINTER
    char path[256] = {};
    bool loaded = false;
    char error[256] = {};
};

// The API of `library` (loaded at the first call), or nullptr with the reason in `error`.
inline const OpenClApi* opencl_api(const char* library, char* error, size_t error_size) {
    static OpenClApi apis[4];
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    OpenClApi* api = nullptr;
    for (OpenClApi& a : apis)
        if (!std::strcmp(a.path, library) || !a.path[0]) { api = &a; break; }
    if (!api) { std::snprintf(error, error_size, "too many OpenCL libraries"); return nullptr; }
    if (!api->path[0]) {
        std::snprintf(api->path, sizeof api->path, "%s", library);
        void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char* why = dlerror();
            std::snprintf(api->error, sizeof api->error, "cannot load %s (%s): no OpenCL ICD loader installed", library, why ? why : "dlopen failed");
        } else {
            bool complete = true;
#define TESSEL_OPENCL_LOAD(name)                                                                                \
    api->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));                                       \
    if (!api->name && complete) {                                                                                \
        complete = false;                                                                                        \
        std::snprintf(api->error, sizeof api->error, "%s has no %s", library, #name);                            \
    }
            TESSEL_OPENCL_FUNCTIONS(TESSEL_OPENCL_LOAD)
#undef TESSEL_OPENCL_LOAD
            api->loaded = complete;
        }
    }
    if (!api->loaded) { std::snprintf(error, error_size, "%s", api->error); return nullptr; }
    return api;
}

inline const char* opencl_error_name(cl_int e) {
    switch (e) {
        case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
        case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
        case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
        case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
        case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
        case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
        case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
        case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
        case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
        case CL_INVALID_CONTEXT: return "CL_INVALID_CONTEXT";
        case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
        case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
        case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
        case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
        case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
        case CL_INVALID_HOST_PTR: return "CL_INVALID_HOST_PTR";
        case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
        case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
        default: return "OpenCL error";
    }
}
#endif  // TESSEL_HAS_OPENCL

// >>gpu device
// GPU: an OpenCL device (a GPU when the platform has one, else its first device: PoCL's CPU
// device on a machine without a GPU). Always listed by the Core; without a driver it answers
// check_available with the reason, and HETERO leaves it out of the device list. The driver is
// opened at the first question (metric, availability, compile), not when the Core is made.
// What it claims: the elementwise snippet ops, fused into islands exactly as the CPU fuses
// them, each island one OpenCL C kernel printed from its body (print_opencl_kernel), and the
// node kernels of >>opencl kernels (Conv, Gemm, pools, Softmax); all the kernels of a
// subgraph are one program, built once at compile time. Layout ops and the rest go to the
// next device of a HETERO list.
// Config: PLATFORM and DEVICE (auto or an index), PERF_COUNT. Metrics beside the common ones:
// AVAILABLE (YES, or NO: the reason), PLATFORM_NAME, OPENCL_VERSION, DRIVER_VERSION,
// COMPUTE_UNITS, GLOBAL_MEMORY (bytes), HOST_UNIFIED_MEMORY (YES/NO).
const ConfigKey kGpuKeys[] = {{"PLATFORM", "auto"}, {"DEVICE", "auto"}, {"PERF_COUNT", "NO"}};

inline bool gpu_node_op(StringView op);   // >>opencl kernels
inline Status gpu_node_kernel(const PreparedModel& model, NodeId id, const char* name, OpenClSource* out, uint64_t* work, uint64_t* grid);

inline bool gpu_claims(const PreparedModel& model, NodeId id) {
    const Graph& g = model.model.graph;
    const Node& node = g.node(id);
    SnippetOp op;
    bool node_kernel = gpu_node_op(node.op);
    if (!node_kernel && snippet_op_from_name(node.op, &op) != Status::Ok) return false;
    // The node kernels read the prepared state of the built-in kernel (not an extension's).
    if (node_kernel && (model.kernel(id) != find_builtin_kernel(node.op) || !model.kernel_state(id))) return false;
    if (node.num_outputs != 1 || model.value_desc(model.value_id(id, 0)).type != ElementType::Float32) return false;
    for (uint32_t i = 0; i < node.num_inputs; ++i) {
        if (node_kernel && g.node(node.inputs[i].producer).op == StringView("Absent")) continue;
        if (model.value_desc(model.value_id(node.inputs[i].producer, node.inputs[i].port)).type != ElementType::Float32) return false;
    }
    return true;
}

#ifdef TESSEL_HAS_OPENCL
// The CPU device's island builder, reached through a subclass: the GPU fuses what the CPU
// fuses, then prints each island's body as OpenCL C instead of JIT-compiling it.
struct IslandBuilder : CpuDevice {
    IslandBuilder() {
        ignore_status(set_config("ISA", "ref"));   // the interpreter: no JIT work for bodies the GPU prints
    }
    using CpuDevice::build_cpu;
};

class GpuProgram : public DeviceProgram {
public:
    const OpenClApi* api = nullptr;
    cl_context context = nullptr;
    cl_device_id device = nullptr;
    cl_command_queue queue = nullptr;
    cl_program program = nullptr;
    ReferenceProgram* islands = nullptr;   // steps, reads and writes, bodies
    cl_kernel* kernels = nullptr;          // per step
    uint64_t* work = nullptr;              // global work size per step
    uint64_t* grid = nullptr;              // 3 per step: a 3-D global size, or 0 for 1-D of work[step]
    Arena arena;
    OpenClSource source;
    mutable std::mutex mutex;              // kernel arguments are per kernel object
    static constexpr size_t kGroupRow = 16;
    static constexpr uint64_t kHostStep = ~0ull;   // work[] of a step its reference kernel runs

    ~GpuProgram() override {
        if (api) {
            for (uint32_t i = 0; kernels && islands && i < islands->count; ++i) if (kernels[i]) api->clReleaseKernel(kernels[i]);
            if (program) api->clReleaseProgram(program);
            if (queue) api->clReleaseCommandQueue(queue);
            if (context) api->clReleaseContext(context);
        }
        destroy(islands);
    }
    Span<const ProgramStep> steps() const override { return islands->steps(); }
    Status export_payload(WriteFn write, void* user) const override {
        write(user, "GPU1", 4);
        return Status::Ok;
    }
    Status run_step(uint32_t i, const StepContext& context_) const override {
        const ProgramStep& step = islands->steps_[i];
        if (work[i] == 0) return Status::Ok;   // an empty tensor: nothing to compute
        if (work[i] == kHostStep) return islands->run_step(i, context_);
        std::lock_guard<std::mutex> lock(mutex);
        cl_mem buffers[2 * kSnippetMaxArgs] = {};
        uint32_t count = 0;
        cl_int e = CL_SUCCESS;
        const char* what = "clCreateBuffer";
        // Buffers over the request's own memory: zero-copy where the device shares memory
        // with the CPU, copied by the driver at the map below otherwise.
        for (uint32_t k = 0; k < step.reads.size + step.writes.size && e == CL_SUCCESS; ++k) {
            bool write = k >= step.reads.size;
            uint32_t value = write ? step.writes[k - step.reads.size] : step.reads[k];
            uint64_t elements = 0;
            desc_elements(islands->model->value_desc(value), &elements);
            // An output in place of an input (Softmax) is the input's buffer: one object per memory.
            uint32_t same = k;
            for (uint32_t j = 0; j < step.reads.size && write; ++j)
                if (context_.values[step.reads[j]] == context_.values[value]) same = j;
            if (same != k) {
                buffers[k] = buffers[same];
                api->clRetainMemObject(buffers[k]);
            } else {
                bool read_write = write;
                for (uint32_t j = 0; j < step.writes.size && !write; ++j)
                    if (context_.values[step.writes[j]] == context_.values[value]) read_write = true;
                buffers[k] = api->clCreateBuffer(context, (read_write ? CL_MEM_READ_WRITE : CL_MEM_READ_ONLY) | CL_MEM_USE_HOST_PTR,
                                                 (size_t)(elements ? elements : 1) * 4, context_.values[value], &e);
            }
            if (e == CL_SUCCESS) ++count;
            if (e == CL_SUCCESS) e = api->clSetKernelArg(kernels[i], k, sizeof(cl_mem), &buffers[k]);
        }
        if (e == CL_SUCCESS) {
            what = "clEnqueueNDRangeKernel";
            size_t global[3] = {(size_t)work[i], 1, 1};
            cl_uint dims = 1;
            size_t local[3] = {kGroupRow, 1, 1};   // a row of positions per work-group (the kernel skips the excess)
            if (grid[3 * i]) {
                dims = 3;
                for (int d = 0; d < 3; ++d) global[d] = (size_t)grid[3 * i + d];
                global[0] = (global[0] + kGroupRow - 1) / kGroupRow * kGroupRow;
            }
            e = api->clEnqueueNDRangeKernel(queue, kernels[i], dims, nullptr, global, dims == 3 ? local : nullptr, 0, nullptr, nullptr);
        }
        // Mapping each output brings its bytes to the host memory (a no-op when shared).
        for (uint32_t k = (uint32_t)step.reads.size; k < count && e == CL_SUCCESS; ++k) {
            what = "clEnqueueMapBuffer";
            uint64_t elements = 0;
            desc_elements(islands->model->value_desc(step.writes[k - step.reads.size]), &elements);
            void* mapped = api->clEnqueueMapBuffer(queue, buffers[k], CL_TRUE, CL_MAP_READ, 0, (size_t)(elements ? elements : 1) * 4,
                                                   0, nullptr, nullptr, &e);
            if (e == CL_SUCCESS) e = api->clEnqueueUnmapMemObject(queue, buffers[k], mapped, 0, nullptr, nullptr);
        }
        if (e == CL_SUCCESS) { what = "clFinish"; e = api->clFinish(queue); }
        for (uint32_t k = 0; k < count; ++k) api->clReleaseMemObject(buffers[k]);
        if (e != CL_SUCCESS) {
            if (context_.error) std::snprintf(context_.error, kErrorMessageBytes, "GPU: %s failed: %s (%d)", what, opencl_error_name(e), (int)e);
            return Status::IoError;
        }
        return Status::Ok;
    }
};
#endif  // TESSEL_HAS_OPENCL

class GpuDevice : public BuiltinDevice {
public:
    // `library`: the OpenCL ICD loader to open; by default TESSEL_OPENCL_LIBRARY from the
    // environment when the device is made, else libOpenCL.so.1 (tests name a missing one).
    explicit GpuDevice(const char* library = nullptr) : BuiltinDevice("GPU", "OpenCL device", kGpuKeys, 3) {
        if (!library || !library[0]) library = std::getenv("TESSEL_OPENCL_LIBRARY");
        copy_text(library_, sizeof library_, library && library[0] ? library : "libOpenCL.so.1");
    }
    ~GpuDevice() override { release(); }

    Status check_available() override {
        open();
        if (!available_) return fail(Status::Unsupported, "%s", reason_);
        return Status::Ok;
    }

    Status get_metric(StringView key, StringView* value) override {
        if (key == StringView("SUPPORTED_METRICS"))
            return give("AVAILABLE_DEVICES FULL_DEVICE_NAME SUPPORTED_METRICS SUPPORTED_CONFIG_KEYS OPTIMIZATION_CAPABILITIES "
                        "AVAILABLE PLATFORM_NAME OPENCL_VERSION DRIVER_VERSION COMPUTE_UNITS GLOBAL_MEMORY HOST_UNIFIED_MEMORY",
                        value);
        if (key == StringView("SUPPORTED_CONFIG_KEYS") || key == StringView("OPTIMIZATION_CAPABILITIES"))
            return BuiltinDevice::get_metric(key, value);
        open();
        char text[512];
        if (key == StringView("AVAILABLE")) {
            std::snprintf(text, sizeof text, available_ ? "YES" : "NO: %s", reason_);
            return give(text, value);
        }
        if (key == StringView("FULL_DEVICE_NAME")) {
            if (!available_) std::snprintf(text, sizeof text, "OpenCL device (unavailable: %s)", reason_);
            else std::snprintf(text, sizeof text, "%s (%s)", device_name_, platform_name_);
            return give(text, value);
        }
        if (key == StringView("AVAILABLE_DEVICES")) {
            size_t k = 0;
            text[0] = 0;
            for (uint32_t i = 0; available_ && i < device_count_ && k < sizeof text - 8; ++i)
                k += (size_t)std::snprintf(text + k, sizeof text - k, "%s%u", i ? " " : "", i);
            return give(text, value);
        }
        if (!available_ &&
            (key == StringView("PLATFORM_NAME") || key == StringView("OPENCL_VERSION") || key == StringView("DRIVER_VERSION") ||
             key == StringView("COMPUTE_UNITS") || key == StringView("GLOBAL_MEMORY") || key == StringView("HOST_UNIFIED_MEMORY")))
            return fail(Status::Unsupported, "GPU: %s", reason_);
        if (key == StringView("PLATFORM_NAME")) return give(platform_name_, value);
        if (key == StringView("OPENCL_VERSION")) return give(opencl_version_, value);
        if (key == StringView("DRIVER_VERSION")) return give(driver_version_, value);
        if (key == StringView("COMPUTE_UNITS")) { std::snprintf(text, sizeof text, "%u", compute_units_); return give(text, value); }
        if (key == StringView("GLOBAL_MEMORY")) {
            std::snprintf(text, sizeof text, "%llu", (unsigned long long)global_memory_);
            return give(text, value);
        }
        if (key == StringView("HOST_UNIFIED_MEMORY")) return give(unified_ ? "YES" : "NO", value);
        return BuiltinDevice::get_metric(key, value);
    }

    Status set_config(StringView key, StringView value) override {
        StringView old;
        bool choice = key == StringView("PLATFORM") || key == StringView("DEVICE");
        if (choice && get_config(key, &old) == Status::Ok && old == value) return Status::Ok;
        TESSEL_TRY(BuiltinDevice::set_config(key, value));
        if (choice) release();   // opened again with the new choice at the next question
        return Status::Ok;
    }

    Status query_model(const PreparedModel& model, uint8_t* supported) override {
        const Graph& g = model.model.graph;
        open();
        for (uint32_t i = 0; i < g.node_count(); ++i)
            supported[i] = is_free_op(g.node(i).op) || (available_ && gpu_claims(model, i)) ? 1 : 0;
        return Status::Ok;
    }

    Status compile_subgraph(const PreparedModel& model, Span<const NodeId> nodes, DeviceProgram** program) override;
    Status build_check(StringView source, char* log, size_t log_size);

protected:
    Status check_config(StringView key, StringView value) override {
        bool yes;
        uint32_t index;
        if (key == StringView("PERF_COUNT") && !parse_yes_no(value, &yes)) return fail(Status::InvalidArgument, "GPU: PERF_COUNT must be YES or NO");
        if ((key == StringView("PLATFORM") || key == StringView("DEVICE")) && !(value == StringView("auto")) &&
            !parse_count(value, 0, 255, &index))
            return fail(Status::InvalidArgument, "GPU: %.*s must be auto or an index from 0 to 255", (int)key.size, key.data);
        return Status::Ok;
    }
    bool op_allowed(StringView) const override { return true; }
    const char* capabilities() const override { return "FP32 FUSED_ELEMENTWISE CONV GEMM POOLING SOFTMAX"; }
    Status check_payload(const void* payload, size_t size) override {
        if (size != 4 || std::memcmp(payload, "GPU1", 4) != 0) return fail(Status::ParseError, "GPU: bad payload");
        return Status::Ok;
    }

private:
    void open();
    void release();
#ifdef TESSEL_HAS_OPENCL
    Status compile_program(GpuProgram* p, const PreparedModel& model, Span<const NodeId> nodes);
#endif
    char library_[256] = {};
    bool opened_ = false, available_ = false, unified_ = false;
    char reason_[256] = {};
    char device_name_[128] = {}, platform_name_[128] = {}, opencl_version_[128] = {}, driver_version_[128] = {};
    uint32_t compute_units_ = 0, device_count_ = 0;
    uint64_t global_memory_ = 0;
#ifdef TESSEL_HAS_OPENCL
    const OpenClApi* api_ = nullptr;
    cl_platform_id platform_ = nullptr;
    cl_device_id device_ = nullptr;
    cl_context context_ = nullptr;
#endif
};

#ifdef TESSEL_HAS_OPENCL
inline void GpuDevice::release() {
    if (api_ && context_) api_->clReleaseContext(context_);
    context_ = nullptr;
    opened_ = available_ = false;
}

inline void GpuDevice::open() {
    if (opened_) return;
    opened_ = true;
    available_ = false;
    api_ = opencl_api(library_, reason_, sizeof reason_);
    if (!api_) return;
    cl_platform_id platforms[16];
    cl_uint platform_count = 0;
    cl_int e = api_->clGetPlatformIDs(16, platforms, &platform_count);
    if (e != CL_SUCCESS || platform_count == 0) {
        std::snprintf(reason_, sizeof reason_, "no OpenCL platform: the ICD loader found no driver (%s)",
                      e != CL_SUCCESS ? opencl_error_name(e) : "none listed");
        return;
    }
    if (platform_count > 16) platform_count = 16;
    uint32_t want_platform = 0, want_device = 0;
    bool auto_platform = !parse_count(config("PLATFORM"), 0, 255, &want_platform);
    bool auto_device = !parse_count(config("DEVICE"), 0, 255, &want_device);
    if (!auto_platform && want_platform >= platform_count) {
        std::snprintf(reason_, sizeof reason_, "PLATFORM %u: the driver lists %u platform(s)", want_platform, platform_count);
        return;
    }
    // auto: the first platform with a GPU, else the first with any device.
    cl_device_id devices[16];
    cl_uint device_count = 0;
    int chosen = -1;
    for (int pass = 0; pass < 2 && chosen < 0; ++pass)
        for (cl_uint p = 0; p < platform_count && chosen < 0; ++p) {
            if (!auto_platform && p != want_platform) continue;
            cl_uint n = 0;
            if (api_->clGetDeviceIDs(platforms[p], pass == 0 ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_ALL, 0, nullptr, &n) == CL_SUCCESS && n > 0)
                chosen = (int)p;
        }
    if (chosen < 0) { std::snprintf(reason_, sizeof reason_, "the OpenCL platform has no device"); return; }
    platform_ = platforms[chosen];
    e = api_->clGetDeviceIDs(platform_, CL_DEVICE_TYPE_ALL, 16, devices, &device_count);
    if (e != CL_SUCCESS || device_count == 0) { std::snprintf(reason_, sizeof reason_, "clGetDeviceIDs: %s", opencl_error_name(e)); return; }
    if (device_count > 16) device_count = 16;
    device_count_ = device_count;
    uint32_t index = 0;
    if (!auto_device) {
        if (want_device >= device_count) {
            std::snprintf(reason_, sizeof reason_, "DEVICE %u: the platform lists %u device(s)", want_device, device_count);
            return;
        }
        index = want_device;
    } else {
        for (uint32_t i = 0; i < device_count; ++i) {
            cl_device_type type = 0;
            if (api_->clGetDeviceInfo(devices[i], CL_DEVICE_TYPE, sizeof type, &type, nullptr) == CL_SUCCESS && (type & CL_DEVICE_TYPE_GPU)) { index = i; break; }
        }
    }
    device_ = devices[index];
    api_->clGetPlatformInfo(platform_, CL_PLATFORM_NAME, sizeof platform_name_ - 1, platform_name_, nullptr);
    api_->clGetDeviceInfo(device_, CL_DEVICE_NAME, sizeof device_name_ - 1, device_name_, nullptr);
    api_->clGetDeviceInfo(device_, CL_DEVICE_VERSION, sizeof opencl_version_ - 1, opencl_version_, nullptr);
    api_->clGetDeviceInfo(device_, CL_DRIVER_VERSION, sizeof driver_version_ - 1, driver_version_, nullptr);
    cl_uint units = 0;
    cl_ulong memory = 0;
    cl_bool unified = CL_FALSE;
    api_->clGetDeviceInfo(device_, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, nullptr);
    api_->clGetDeviceInfo(device_, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof memory, &memory, nullptr);
    api_->clGetDeviceInfo(device_, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, nullptr);
    compute_units_ = units;
    global_memory_ = memory;
    unified_ = unified == CL_TRUE;
    context_ = api_->clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &e);
    if (!context_ || e != CL_SUCCESS) {
        context_ = nullptr;
        std::snprintf(reason_, sizeof reason_, "clCreateContext on %s: %s", device_name_, opencl_error_name(e));
        return;
    }
    available_ = true;
    reason_[0] = 0;
}

inline Status GpuDevice::compile_subgraph(const PreparedModel& model, Span<const NodeId> nodes, DeviceProgram** program) {
    *program = nullptr;
    open();
    if (!available_) return fail(Status::Unsupported, "GPU is not available: %s", reason_);
    const Graph& g = model.model.graph;
    for (NodeId id : nodes)
        if (!is_free_op(g.node(id).op) && !gpu_claims(model, id))
            return fail(Status::Unsupported, "GPU cannot run node '%.*s' (op %.*s)", (int)g.node(id).name.size, g.node(id).name.data,
                        (int)g.node(id).op.size, g.node(id).op.data);
    GpuProgram* p = create<GpuProgram>();
    if (!p) return fail(Status::OutOfMemory, "out of memory");
    Status s = compile_program(p, model, nodes);
    if (s != Status::Ok) { destroy(p); return s; }
    *program = p;
    return Status::Ok;
}
#else
inline void GpuDevice::release() {}
inline void GpuDevice::open() {
    opened_ = true;
    std::snprintf(reason_, sizeof reason_, "this build has no OpenCL (TESSEL_NO_OPENCL, or no CL/cl.h when it was compiled)");
}
inline Status GpuDevice::compile_subgraph(const PreparedModel&, Span<const NodeId>, DeviceProgram** program) {
    *program = nullptr;
    return fail(Status::Unsupported, "GPU is not available: %s", reason_);
}
inline Status GpuDevice::build_check(StringView, char* log, size_t log_size) {
    open();
    std::snprintf(log, log_size, "GPU is not available: %s", reason_);
    return Status::Unsupported;
}
#endif  // TESSEL_HAS_OPENCL

#ifdef TESSEL_HAS_OPENCL
// Builds `source` for `device`: Unsupported with the driver's build log when it does not build.
inline Status opencl_build(const OpenClApi* api, cl_context context, cl_device_id device, const char* source, size_t size,
                           cl_program* out, char* error, size_t error_size) {
    *out = nullptr;
    cl_int e = CL_SUCCESS;
    cl_program program = api->clCreateProgramWithSource(context, 1, &source, &size, &e);
    if (!program || e != CL_SUCCESS) {
        std::snprintf(error, error_size, "clCreateProgramWithSource: %s", opencl_error_name(e));
        return Status::Unsupported;
    }
    // Correctly rounded division and sqrt where the device offers them: the body's results
    // then equal the interpreter's.
    cl_device_fp_config fp = 0;
    api->clGetDeviceInfo(device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, nullptr);
    const char* options = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? "-cl-fp32-correctly-rounded-divide-sqrt" : "";
    e = api->clBuildProgram(program, 1, &device, options, nullptr, nullptr);
    if (e != CL_SUCCESS) {
        int k = std::snprintf(error, error_size, "the OpenCL program did not build (%s): ", opencl_error_name(e));
        // The driver gives the whole log or nothing: read it whole, keep what fits.
        size_t log_size = 0;
        api->clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size);
        char* whole = log_size ? static_cast<char*>(TESSEL_MALLOC(log_size + 1)) : nullptr;
        if (whole && api->clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, log_size, whole, nullptr) == CL_SUCCESS) {
            whole[log_size] = 0;
            if (k > 0 && (size_t)k < error_size) std::snprintf(error + k, error_size - (size_t)k, "%s", whole);
        }
        TESSEL_FREE(whole);
        api->clReleaseProgram(program);
        return Status::Unsupported;
    }
    *out = program;
    return Status::Ok;
}

inline Status GpuDevice::build_check(StringView source, char* log, size_t log_size) {
    open();
    if (!available_) { std::snprintf(log, log_size, "GPU is not available: %s", reason_); return Status::Unsupported; }
    cl_program program = nullptr;
    TESSEL_TRY(opencl_build(api_, context_, device_, source.data, source.size, &program, log, log_size));
    api_->clReleaseProgram(program);
    if (log_size) log[0] = 0;
    return Status::Ok;
}

inline Status GpuDevice::compile_program(GpuProgram* p, const PreparedModel& model, Span<const NodeId> nodes) {
    const Graph& g = model.model.graph;
    IslandBuilder* builder = create<IslandBuilder>();
    p->islands = create<ReferenceProgram>();
    if (!builder || !p->islands) { destroy(builder); return fail(Status::OutOfMemory, "out of memory"); }
    Status s = builder->build_cpu(p->islands, model, nodes);
    if (s != Status::Ok) ignore_status(fail(s, "GPU: %s", builder->last_error()));
    destroy(builder);
    TESSEL_TRY(s);
    ReferenceProgram& r = *p->islands;
    p->kernels = p->arena.allocate_array<cl_kernel>(r.count + 1);
    p->work = p->arena.allocate_array<uint64_t>(r.count + 1);
    p->grid = p->arena.allocate_array<uint64_t>(3 * r.count + 3);
    if (!p->kernels || !p->work || !p->grid) return fail(Status::OutOfMemory, "out of memory");
    for (uint32_t i = 0; i <= r.count; ++i) { p->kernels[i] = nullptr; p->work[i] = 0; }
    for (uint32_t i = 0; i < 3 * r.count + 3; ++i) p->grid[i] = 0;
    print_opencl_prelude(&p->source);
    char name[64];
    for (uint32_t i = 0; i < r.count; ++i) {
        const Node& node = g.node(r.steps_[i].node);
        std::snprintf(name, sizeof name, "step%u", i);
        if (!r.units[i].body && !gpu_node_op(node.op)) {
            // An elementwise node the island builder left unfused (Max with one input, a Neg
            // of a constant): its reference kernel runs on the host memory the buffers wrap.
            std::snprintf(name, sizeof name, "host:%s", r.steps_[i].kernel);
            r.steps_[i].kernel = r.arena.copy_string(StringView(name)).data;
            if (!r.steps_[i].kernel) return fail(Status::OutOfMemory, "out of memory");
            p->work[i] = GpuProgram::kHostStep;
            continue;
        }
        if (!r.units[i].body) {   // a node kernel: the step must be the node alone, as the island builder left it
            if (r.units[i].run || r.units[i].snippet || r.steps_[i].writes.size != 1)
                return fail(Status::Unsupported, "GPU: node '%.*s' (op %.*s) is neither an elementwise island nor a GPU kernel",
                            (int)node.name.size, node.name.data, (int)node.op.size, node.op.data);
            s = gpu_node_kernel(model, r.steps_[i].node, name, &p->source, &p->work[i], &p->grid[3 * i]);
            if (s != Status::Ok)
                return fail(s, "GPU: node '%.*s' (op %.*s): no OpenCL kernel for it", (int)node.name.size, node.name.data, (int)node.op.size,
                            node.op.data);
            // Optional inputs left out are not kernel arguments.
            uint32_t* reads = r.arena.allocate_array<uint32_t>(r.steps_[i].reads.size + 1);
            if (!reads) return fail(Status::OutOfMemory, "out of memory");
            uint32_t kept = 0;
            for (uint32_t k = 0; k < node.num_inputs && k < r.steps_[i].reads.size; ++k)
                if (!(g.node(node.inputs[k].producer).op == StringView("Absent"))) reads[kept++] = r.steps_[i].reads[k];
            r.steps_[i].reads = Span<const uint32_t>(reads, kept);
            std::snprintf(name, sizeof name, "opencl:%.*s", (int)node.op.size, node.op.data);
            r.steps_[i].kernel = r.arena.copy_string(StringView(name)).data;
            r.steps_[i].scratch_bytes = 0;
            if (!r.steps_[i].kernel) return fail(Status::OutOfMemory, "out of memory");
            continue;
        }
        s = print_opencl_kernel(*r.units[i].body, name, &p->source, &p->work[i]);
        if (s != Status::Ok) return fail(s, "GPU: node '%.*s': cannot print its island as OpenCL C", (int)node.name.size, node.name.data);
        // "snippet:ref:N" becomes "opencl:N": N nodes fused into one kernel.
        const char* fused = std::strrchr(r.steps_[i].kernel, ':');
        std::snprintf(name, sizeof name, "opencl:%s", fused ? fused + 1 : "1");
        r.steps_[i].kernel = r.arena.copy_string(StringView(name)).data;
        r.steps_[i].scratch_bytes = 0;
        if (!r.steps_[i].kernel) return fail(Status::OutOfMemory, "out of memory");
    }
    if (p->source.failed()) return fail(Status::OutOfMemory, "out of memory printing the OpenCL program");
    p->api = api_;
    p->device = device_;
    p->context = context_;
    api_->clRetainContext(context_);
    bool profile = false;
    parse_yes_no(config("PERF_COUNT"), &profile);
    cl_int e = CL_SUCCESS;
    p->queue = api_->clCreateCommandQueue(context_, device_, profile ? CL_QUEUE_PROFILING_ENABLE : 0, &e);
    if (!p->queue || e != CL_SUCCESS) { p->queue = nullptr; return fail(Status::IoError, "GPU: clCreateCommandQueue: %s", opencl_error_name(e)); }
    if (r.count == 0) return Status::Ok;
    char log[kErrorMessageBytes];
    s = opencl_build(api_, context_, device_, p->source.text(), p->source.size(), &p->program, log, sizeof log);
    if (s != Status::Ok) return fail(s, "GPU: %s", log);
    for (uint32_t i = 0; i < r.count; ++i) {
        if (p->work[i] == GpuProgram::kHostStep) continue;
        std::snprintf(name, sizeof name, "step%u", i);
        p->kernels[i] = api_->clCreateKernel(p->program, name, &e);
        if (!p->kernels[i] || e != CL_SUCCESS) { p->kernels[i] = nullptr; return fail(Status::IoError, "GPU: clCreateKernel %s: %s", name, opencl_error_name(e)); }
    }
    return Status::Ok;
}
#endif  // TESSEL_HAS_OPENCL

}  // namespace detail

// >>compiled model implementation
namespace detail {
struct ExecStep {
    uint32_t subgraph;
    uint32_t index;      // program step, or transfer number
    bool transfer;
};
struct Transfer {
    uint32_t value;      // the producer's value id
    uint32_t slot;       // the consumer subgraph's copy (a slot id >= value_count)
    uint32_t to;         // consumer subgraph
    NodeId producer;
};
constexpr size_t kDeviceStringBytes = 256;   // "HETERO:A,B,..." as compiled
constexpr uint32_t kMaxSavedConfig = 256;     // config entries one compile saves and restores
struct SavedConfig {     // one device's config at compile time (export) or before it (restore)
    Device* device;
    char key[64];
    StringView value;    // a zero-terminated copy in the compile's arena
};
}  // namespace detail
namespace detail { struct DynamicShapes; }

struct CompiledModel::Impl {
    PreparedModel prepared;
    Arena arena;                         // everything below that is not a program
    Partition partition;                 // HETERO only (reasons, trace); subgraph_of below is the truth
    uint32_t subgraph_count = 0;
    uint32_t* subgraph_of = nullptr;     // per prepared node
    Device** subgraph_device = nullptr;
    DeviceProgram** programs = nullptr;
    Device* devices[detail::kMaxDevices] = {};
    uint32_t device_count = 0;
    char device_string[detail::kDeviceStringBytes] = {};
    detail::SavedConfig* config = nullptr;  // every key of every listed device, at compile time
    uint32_t config_count = 0;
    detail::ExecStep* exec = nullptr;
    uint32_t exec_count = 0;
    detail::Transfer* transfers = nullptr;   // sorted by (to, value)
    uint32_t transfer_count = 0;
    uint32_t* transfer_first = nullptr;      // per subgraph: its transfers are [first[s], first[s+1])
    uint32_t slot_count = 0;             // values + transfer copies
    int64_t* offset = nullptr;           // per slot: arena offset, -1 when not in the arena
    size_t* slot_bytes = nullptr;
    size_t arena_bytes = 0, unplanned_bytes = 0, scratch_bytes = 0;
    uint32_t threads = 1;
    bool perf = false;
    PlacementSummary summary[detail::kMaxDevices];
    uint32_t summary_count = 0;
    uint32_t step_count = 0;             // kernel steps (transfers excluded)
    NodeId* fallback = nullptr;          // nodes the first listed device did not take, in id order
    uint32_t fallback_count = 0;
    uint64_t* zones = nullptr;           // TESSEL_USE_MICROPROFILE: a token per exec step, then per subgraph
    void* blob = nullptr;                // import: constants point into this copy
    Model* source = nullptr;             // import: the model read from the blob
    detail::DynamicShapes* dynamic = nullptr;   // symbolic input dims: this is the plan at free dims 1

    ~Impl();
};

// >>dynamic shapes
// A model compiled with symbolic input dims is planned at every free dim = 1 (the
// CompiledModel's own plan: it checks the model and gives the partition the others copy), and
// again per input-shape signature at a request's first infer with it. Those plans live in a
// bounded cache (SHAPE_CACHE_SIZE, least recently used evicted; never one a request holds).
namespace detail {
constexpr uint32_t kDefaultShapeCache = 8;
constexpr uint32_t kMaxShapeCache = 1024;
constexpr uint32_t kMaxSymbolicInputs = 64;   // inputs of a model with symbolic dims

struct Specialization {
    CompiledModel::Impl* plan = nullptr;
    uint64_t last_used = 0;
    uint32_t users = 0;    // requests attached to it
};

struct DynamicShapes {
    Core* core = nullptr;
    const Model* source = nullptr;       // the model compiled from (owned_source after import)
    Model* owned_source = nullptr;
    Arena arena;
    TensorDesc* inputs = nullptr;        // per input of the compiled model; free dims negative
    uint32_t input_count = 0;
    ConfigEntry* config = nullptr;       // the listed devices' config at compile time, as "DEVICE:KEY"
    uint32_t config_count = 0;
    PartitionAlgorithm algorithm = PartitionAlgorithm::Rollback;
    uint32_t min_subgraph = 0;
    InputValue* values = nullptr;        // InputValue copies (owned tensors)
    uint32_t value_count = 0;
    Specialization* cache = nullptr;
    uint32_t capacity = kDefaultShapeCache, count = 0;
    uint64_t tick = 0;
    std::mutex mutex;                    // the cache; held while a specialization compiles

    ~DynamicShapes() {
        for (uint32_t i = 0; i < count; ++i) destroy(cache[i].plan);
        for (uint32_t i = 0; i < value_count; ++i) const_cast<Tensor*>(values[i].tensor)->~Tensor();
        destroy(owned_source);
    }
};
}  // namespace detail

inline CompiledModel::Impl::~Impl() {
    destroy(dynamic);
    for (uint32_t s = 0; s < subgraph_count; ++s) if (programs) destroy(programs[s]);
    programs = nullptr;
    destroy(source);
    if (blob) TESSEL_FREE(blob);
}

CompiledModel::CompiledModel() = default;
CompiledModel::~CompiledModel() { destroy(impl_); }
uint32_t CompiledModel::input_count() const { return impl_ ? impl_->prepared.model.input_count() : 0; }
uint32_t CompiledModel::output_count() const { return impl_ ? impl_->prepared.model.output_count() : 0; }
const ModelPort& CompiledModel::input(uint32_t i) const { return impl_->prepared.model.input(i); }
const ModelPort& CompiledModel::output(uint32_t i) const { return impl_->prepared.model.output(i); }
const TensorDesc& CompiledModel::input_desc(uint32_t i) const {
    if (impl_->dynamic) return impl_->dynamic->inputs[i];
    return impl_->prepared.value_desc(impl_->prepared.value_id(input(i).node, 0));
}
const TensorDesc& CompiledModel::output_desc(uint32_t i) const {
    const Edge& e = impl_->prepared.model.graph.node(output(i).node).inputs[0];
    return impl_->prepared.value_desc(impl_->prepared.value_id(e.producer, e.port));
}
Span<const PlacementSummary> CompiledModel::placement() const {
    return impl_ ? Span<const PlacementSummary>(impl_->summary, impl_->summary_count) : Span<const PlacementSummary>();
}
const PreparedModel* CompiledModel::prepared() const { return impl_ ? &impl_->prepared : nullptr; }
const Partition* CompiledModel::partition() const { return impl_ ? &impl_->partition : nullptr; }
size_t CompiledModel::arena_bytes() const { return impl_ ? impl_->arena_bytes : 0; }
size_t CompiledModel::unplanned_bytes() const { return impl_ ? impl_->unplanned_bytes : 0; }
size_t CompiledModel::scratch_bytes() const { return impl_ ? impl_->scratch_bytes : 0; }
uint32_t CompiledModel::step_count() const { return impl_ ? impl_->step_count : 0; }
bool CompiledModel::has_free_dims() const { return impl_ && impl_->dynamic; }
uint32_t CompiledModel::cached_shape_plans() const {
    if (!impl_ || !impl_->dynamic) return 0;
    std::lock_guard<std::mutex> lock(impl_->dynamic->mutex);
    return impl_->dynamic->count;
}

void CompiledModel::write_summary(WriteFn write, void* user) const {
    if (!impl_) return;
    char line[256];
    for (uint32_t i = 0; i < impl_->summary_count; ++i) {
        const PlacementSummary& p = impl_->summary[i];
        int k = std::snprintf(line, sizeof line, "device %.*s: %u nodes in %u subgraphs, %u kernels, %u fell back from a higher-priority device\n",
                              (int)p.device.size, p.device.data, p.nodes, p.subgraphs, p.kernels, p.fallback_nodes);
        write(user, line, (size_t)k);
    }
    for (uint32_t i = 0; i < impl_->fallback_count && i < 16; ++i) {   // why nodes fell back
        const Graph& g = impl_->prepared.model.graph;
        const Node& n = g.node(impl_->fallback[i]);
        StringView to = impl_->subgraph_device[impl_->subgraph_of[impl_->fallback[i]]]->name();
        StringView first = impl_->devices[0]->name();
        detail::print(line, sizeof line, "fallback: '%.*s' (%.*s) runs on %.*s: %.*s does not support it\n", (int)n.name.size,
                      n.name.data, (int)n.op.size, n.op.data, (int)to.size, to.data, (int)first.size, first.data);
        write(user, line, std::strlen(line));
    }
    if (impl_->fallback_count > 16) {
        detail::print(line, sizeof line, "fallback: %u more nodes\n", impl_->fallback_count - 16);
        write(user, line, std::strlen(line));
    }
    int k = std::snprintf(line, sizeof line, "memory: %zu bytes of activations per request (%zu without reuse), %zu scratch; %u nodes folded or removed\n",
                          impl_->arena_bytes, impl_->unplanned_bytes, impl_->scratch_bytes, impl_->prepared.folded_count());
    write(user, line, (size_t)k);
    for (uint32_t e = 0; e < impl_->exec_count; ++e) {
        const detail::ExecStep& x = impl_->exec[e];
        if (x.transfer) continue;
        const ProgramStep& step = impl_->programs[x.subgraph]->steps()[x.index];
        if (std::strncmp(step.kernel, "snippet:", 8) != 0) continue;
        const Node& n = impl_->prepared.model.graph.node(step.node);
        k = std::snprintf(line, sizeof line, "fused kernel %s ending at '%.*s' (subgraph %u)\n", step.kernel, (int)n.name.size,
                          n.name.data, x.subgraph);
        write(user, line, (size_t)k);
    }
}

namespace detail {
// The slot subgraph s reads value v from: its transfer's copy, or the value itself.
inline uint32_t reader_slot(const CompiledModel::Impl* m, uint32_t s, uint32_t v) {
    uint32_t lo = m->transfer_first[s], hi = m->transfer_first[s + 1];
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (m->transfers[mid].value < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->transfer_first[s + 1] && m->transfers[lo].value == v ? m->transfers[lo].slot : v;
}

// >>memory plan
// Static memory plan: each value a buffer live from its producing step to its last reader
// (graph outputs and inputs to the end); an in-place step's output shares its input's buffer
// when that input dies there. Buffers are placed largest first at the lowest offset that no
// buffer live at the same time overlaps.
inline Status plan_memory(CompiledModel::Impl* m) {
    const PreparedModel& pm = m->prepared;
    const Graph& g = pm.model.graph;
    Arena scratch;
    uint32_t slots = m->slot_count;
    uint32_t* first = scratch.allocate_array<uint32_t>(slots + 1);
    uint32_t* last = scratch.allocate_array<uint32_t>(slots + 1);
    uint32_t* buffer = scratch.allocate_array<uint32_t>(slots + 1);   // slot -> buffer (a slot id)
    uint8_t* pinned = scratch.allocate_array<uint8_t>(slots + 1);     // lives to the end
    m->offset = m->arena.allocate_array<int64_t>(slots + 1);
    m->slot_bytes = m->arena.allocate_array<size_t>(slots + 1);
    if (!first || !last || !buffer || !pinned || !m->offset || !m->slot_bytes) return Status::OutOfMemory;
    const uint32_t kNever = 0xffffffffu;
    for (uint32_t s = 0; s < slots; ++s) {
        first[s] = kNever; last[s] = 0; buffer[s] = s; pinned[s] = 0; m->offset[s] = -1;
        const TensorDesc& d = pm.value_desc(s < pm.value_count() ? s : m->transfers[s - pm.value_count()].value);
        uint64_t n = 0;
        desc_elements(d, &n);
        m->slot_bytes[s] = d.type == ElementType::Undefined ? 0 : (size_t)(n * element_size(d.type));
    }
    uint32_t end = m->exec_count + 1;
    for (uint32_t i = 0; i < m->prepared.model.input_count(); ++i) {  // inputs: own slot, whole run
        uint32_t v = pm.value_id(m->prepared.model.input(i).node, 0);
        first[v] = 0; last[v] = end; pinned[v] = 1;
    }
    for (uint32_t e = 0; e < m->exec_count; ++e) {
        const ExecStep& x = m->exec[e];
        uint32_t t = e + 1;
        if (x.transfer) {
            const Transfer& tr = m->transfers[x.index];
            if (first[tr.slot] == kNever) first[tr.slot] = t;
            if (last[tr.value] < t) last[tr.value] = t;
            continue;
        }
        const ProgramStep& step = m->programs[x.subgraph]->steps()[x.index];
        for (uint32_t r : step.reads) {
            uint32_t slot = reader_slot(m, x.subgraph, r);
            if (last[slot] < t) last[slot] = t;
        }
        for (uint32_t w : step.writes) {
            if (first[w] == kNever) first[w] = t;
            if (last[w] < t) last[w] = t;
        }
        size_t need = step.scratch_bytes;
        if (need > m->scratch_bytes) m->scratch_bytes = need;
    }
    for (uint32_t i = 0; i < m->prepared.model.output_count(); ++i) {
        const Edge& e = g.node(m->prepared.model.output(i).node).inputs[0];
        uint32_t v = pm.value_id(e.producer, e.port);
        last[v] = end;
        pinned[v] = 1;
    }
    // Constants and the Absent value never take arena space.
    for (uint32_t v = 0; v < pm.value_count(); ++v)
        if (pm.constant(v) || pm.value_desc(v).type == ElementType::Undefined) first[v] = kNever;
    // In place: the output takes the input's buffer when the input dies at this step.
    for (uint32_t e = 0; e < m->exec_count; ++e) {
        const ExecStep& x = m->exec[e];
        if (x.transfer) continue;
        const ProgramStep& step = m->programs[x.subgraph]->steps()[x.index];
        if (!step.in_place || step.reads.size == 0 || step.writes.size == 0) continue;
        uint32_t in = reader_slot(m, x.subgraph, step.reads[0]), out = step.writes[0];
        uint32_t b = buffer[in];
        if (first[in] == kNever || pinned[in] || last[in] != e + 1 || m->slot_bytes[in] != m->slot_bytes[out]) continue;
        bool read_twice = false;   // the kernel reads its input elsewhere too
        for (size_t k = 1; k < step.reads.size; ++k) if (step.reads[k] == step.reads[0]) read_twice = true;
        if (read_twice) continue;
        buffer[out] = b;
        if (last[b] < last[out]) last[b] = last[out];
        if (pinned[out]) pinned[b] = 1;
    }
    // Buffers: slots that are their own buffer and live.
    uint32_t* order = scratch.allocate_array<uint32_t>(slots + 1);
    if (!order) return Status::OutOfMemory;
    uint32_t count = 0;
    m->unplanned_bytes = 0;
    for (uint32_t s = 0; s < slots; ++s) {
        if (first[s] == kNever) continue;
        m->unplanned_bytes += align_up(m->slot_bytes[s], 64);
        if (buffer[s] == s) order[count++] = s;
    }
    std::sort(order, order + count, [&](uint32_t a, uint32_t b) {
        return m->slot_bytes[a] != m->slot_bytes[b] ? m->slot_bytes[a] > m->slot_bytes[b] : a < b;
    });
    // Each buffer goes to the lowest offset where it overlaps no placed buffer whose lifetime
    // meets its own. Placed buffers are kept by the time block of their first step, with the
    // latest last step of each block, so a buffer reads only the blocks that can hold a
    // lifetime meeting its own; the meeting ones, by offset, leave the lowest gap.
    constexpr uint32_t kTimeBlock = 64;
    const uint32_t blocks = end / kTimeBlock + 1;
    int64_t* placed = scratch.allocate_array<int64_t>(count + 1);
    uint32_t* block_head = scratch.allocate_array<uint32_t>(blocks);   // placed index, kNever ends
    uint32_t* block_last = scratch.allocate_array<uint32_t>(blocks);   // latest last step in it
    uint32_t* next_placed = scratch.allocate_array<uint32_t>(count + 1);
    uint32_t* meeting = scratch.allocate_array<uint32_t>(count + 1);
    if (!placed || !block_head || !block_last || !next_placed || !meeting) return Status::OutOfMemory;
    for (uint32_t k = 0; k < blocks; ++k) { block_head[k] = kNever; block_last[k] = 0; }
    auto extent = [&](uint32_t slot) { return (int64_t)align_up(m->slot_bytes[slot] ? m->slot_bytes[slot] : 1, 64); };
    size_t total = 0;
    for (uint32_t i = 0; i < count; ++i) {
        const uint32_t b = order[i];
        const int64_t bytes = extent(b);
        uint32_t met = 0;
        for (uint32_t k = 0; k <= last[b] / kTimeBlock && k < blocks; ++k) {
            if (block_head[k] == kNever || block_last[k] < first[b]) continue;
            for (uint32_t j = block_head[k]; j != kNever; j = next_placed[j]) {
                const uint32_t o = order[j];
                if (!(last[o] < first[b] || last[b] < first[o])) meeting[met++] = j;
            }
        }
        std::sort(meeting, meeting + met, [&](uint32_t x, uint32_t y) { return placed[x] < placed[y]; });
        int64_t at = 0;
        for (uint32_t k = 0; k < met; ++k) {
            const int64_t ob = placed[meeting[k]], oe = ob + extent(order[meeting[k]]);
            if (ob >= at + bytes) break;   // the gap below it fits
            if (oe > at) at = oe;
        }
        placed[i] = at;
        m->offset[b] = at;
        if ((size_t)at + (size_t)bytes > total) total = (size_t)at + (size_t)bytes;
        const uint32_t k = first[b] / kTimeBlock;
        next_placed[i] = block_head[k];
        block_head[k] = i;
        if (last[b] > block_last[k]) block_last[k] = last[b];
    }
    for (uint32_t s = 0; s < slots; ++s)
        if (first[s] != kNever && buffer[s] != s) m->offset[s] = m->offset[buffer[s]];
    m->arena_bytes = total;
    return Status::Ok;
}

// >>hetero transfers
// Boundaries, transfers and the execution order from a subgraph per node: Kahn over the
// graph of subgraphs (InvalidPartition if it has a cycle). A value computed by an op node in
// one subgraph and read in another is copied into the reader's own buffer first; Parameters
// and Constants are host memory every device reads directly.
inline Status build_schedule(CompiledModel::Impl* m, char* error) {
    const PreparedModel& pm = m->prepared;
    const Graph& g = pm.model.graph;
    uint32_t n = g.node_count(), sc = m->subgraph_count;
    Arena scratch;
    uint32_t* indegree = scratch.allocate_array<uint32_t>(sc + 1);
    uint32_t* order = scratch.allocate_array<uint32_t>(sc + 1);
    // Edges between subgraphs as (from << 32 | to), sorted and deduplicated below: the
    // graph of subgraphs in O(edges), where a subgraph-by-subgraph matrix grew with sc^2.
    uint64_t* edges = scratch.allocate_array<uint64_t>(g.edge_count() + 1);
    uint32_t* edge_first = scratch.allocate_array<uint32_t>(sc + 1);
    m->transfers = m->arena.allocate_array<Transfer>(g.edge_count() + 1);
    if (!indegree || !order || !edges || !edge_first || !m->transfers) return Status::OutOfMemory;
    uint32_t edge_count = 0;
    m->transfer_count = 0;
    for (NodeId v = 0; v < n; ++v) {
        const Node& node = g.node(v);
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            NodeId p = node.inputs[i].producer;
            uint32_t from = m->subgraph_of[p], to = m->subgraph_of[v];
            if (from == to || is_free_op(g.node(p).op)) continue;
            edges[edge_count++] = (uint64_t)from << 32 | to;
            m->transfers[m->transfer_count++] = Transfer{pm.value_id(p, node.inputs[i].port), 0, to, p};
        }
    }
    // One transfer per (reader subgraph, value), sorted so a subgraph's are contiguous.
    std::sort(m->transfers, m->transfers + m->transfer_count, [](const Transfer& a, const Transfer& b) {
        return a.to != b.to ? a.to < b.to : a.value < b.value;
    });
    uint32_t unique = 0;
    for (uint32_t k = 0; k < m->transfer_count; ++k)
        if (unique == 0 || m->transfers[unique - 1].to != m->transfers[k].to || m->transfers[unique - 1].value != m->transfers[k].value)
            m->transfers[unique++] = m->transfers[k];
    m->transfer_count = unique;
    m->transfer_first = m->arena.allocate_array<uint32_t>(sc + 2);
    if (!m->transfer_first) return Status::OutOfMemory;
    for (uint32_t s = 0; s <= sc; ++s) m->transfer_first[s] = 0;
    for (uint32_t k = 0; k < m->transfer_count; ++k) {
        m->transfers[k].slot = pm.value_count() + k;
        ++m->transfer_first[m->transfers[k].to + 1];
    }
    for (uint32_t s = 0; s < sc; ++s) m->transfer_first[s + 1] += m->transfer_first[s];
    // Kahn, first in first out, each subgraph's successors in ascending order.
    std::sort(edges, edges + edge_count);
    edge_count = (uint32_t)(std::unique(edges, edges + edge_count) - edges);
    for (uint32_t s = 0; s <= sc; ++s) edge_first[s] = 0;
    for (uint32_t t = 0; t < sc; ++t) indegree[t] = 0;
    for (uint32_t k = 0; k < edge_count; ++k) {
        ++edge_first[(edges[k] >> 32) + 1];
        ++indegree[(uint32_t)edges[k]];
    }
    for (uint32_t s = 0; s < sc; ++s) edge_first[s + 1] += edge_first[s];
    uint32_t head = 0, tail = 0;
    for (uint32_t s = 0; s < sc; ++s) if (!indegree[s]) order[tail++] = s;
    while (head < tail) {
        uint32_t s = order[head++];
        for (uint32_t k = edge_first[s]; k < edge_first[s + 1]; ++k)
            if (--indegree[(uint32_t)edges[k]] == 0) order[tail++] = (uint32_t)edges[k];
    }
    if (tail != sc) {
        std::snprintf(error, kErrorMessageBytes, "the subgraphs feed each other in a cycle");
        return Status::InvalidPartition;
    }
    m->slot_count = pm.value_count() + m->transfer_count;
    uint32_t steps = 0;
    for (uint32_t s = 0; s < sc; ++s) steps += (uint32_t)m->programs[s]->steps().size;
    m->exec = m->arena.allocate_array<ExecStep>(steps + m->transfer_count + 1);
    if (!m->exec) return Status::OutOfMemory;
    m->exec_count = 0;
    m->step_count = steps;
    for (uint32_t k = 0; k < sc; ++k) {
        uint32_t s = order[k];
        for (uint32_t t = m->transfer_first[s]; t < m->transfer_first[s + 1]; ++t) m->exec[m->exec_count++] = ExecStep{s, t, true};
        for (uint32_t i = 0; i < m->programs[s]->steps().size; ++i) m->exec[m->exec_count++] = ExecStep{s, i, false};
    }
    return Status::Ok;
}
}  // namespace detail

// >>core implementation
struct Core::Impl {
    detail::CpuDevice cpu;
    detail::TemplateDevice template_device;
    detail::GpuDevice gpu;        // listed even when unavailable; opens its driver at first use
    Device* devices[detail::kMaxDevices] = {};
    uint32_t count = 0;
    std::mutex compile_mutex;   // compiles change device config for their duration
};

Core::Core() {
    impl_ = create<Impl>();
    if (!impl_) return;   // every call then fails with OutOfMemory
    impl_->devices[impl_->count++] = &impl_->cpu;
    impl_->devices[impl_->count++] = &impl_->template_device;
    impl_->devices[impl_->count++] = &impl_->gpu;
}
Core::~Core() { destroy(impl_); }

Status Core::register_device(Device* device) {
    if (!impl_) return fail(Status::OutOfMemory, "out of memory");
    if (!device) return fail(Status::InvalidArgument, "register_device: null device");
    StringView name = device->name();
    if (name.empty() || name.size > 63) return fail(Status::InvalidArgument, "register_device: a device name has 1 to 63 characters");
    for (char ch : name)
        if (ch == ',' || ch == ':' || ch == ' ') return fail(Status::InvalidArgument, "register_device: ',', ':' and ' ' cannot be in a device name");
    if (this->device(name)) return fail(Status::DuplicateName, "a device named %.*s is registered already", (int)name.size, name.data);
    Status available = device->check_available();
    if (available != Status::Ok)
        return fail(available, "device %.*s is not available: %s", (int)name.size, name.data,
                    device->last_error()[0] ? device->last_error() : status_name(available));
    if (impl_->count == detail::kMaxDevices) return fail(Status::LimitExceeded, "at most %u devices", detail::kMaxDevices);
    impl_->devices[impl_->count++] = device;
    return Status::Ok;
}

Device* Core::device(StringView name) const {
    if (!impl_) return nullptr;
    for (uint32_t i = 0; i < impl_->count; ++i) if (impl_->devices[i]->name() == name) return impl_->devices[i];
    return nullptr;
}
uint32_t Core::device_count() const { return impl_ ? impl_->count : 0; }

Status gpu_build_check(Core& core, StringView source, char* log, size_t log_size) {
    if (log_size) log[0] = 0;
    Device* gpu = core.device("GPU");   // always the built-in one: register_device refuses a second GPU
    if (!gpu) return Status::OutOfMemory;
    return static_cast<detail::GpuDevice*>(gpu)->build_check(source, log, log_size);
}
Device* Core::device_at(uint32_t i) const { return impl_ && i < impl_->count ? impl_->devices[i] : nullptr; }

// >>compile
namespace detail {
struct CompileJob {   // what compile_model and import_model share
    Core* core;
    // Core::fail on the compiling Core (CompileJob is Core's friend).
    Status fail(Status status, const char* format, ...) TESSEL_PRINTF_FORMAT(3, 4) {
        char message[kErrorMessageBytes];
        va_list args;
        va_start(args, format);
        std::vsnprintf(message, sizeof message, format, args);
        va_end(args);
        return core->fail(status, "%s", message);
    }
    Device* list[kMaxDevices];
    uint32_t count = 0;
    bool hetero = false;
    bool skipped_unavailable = false;       // HETERO left out a device without its driver
    detail::SavedConfig* saved = nullptr;   // restored at the end
    uint32_t saved_count = 0;
    // compile_model of a model with free input dims: the plan at every free dim = 1, plus
    // what later plans need (DynamicShapes).
    static Status compile_symbolic(CompileJob& job, const Model& model, Span<const InputShape> shapes,
                                   Span<const InputValue> values, PartitionAlgorithm algorithm, uint32_t min_subgraph,
                                   CompiledModel::Impl* m);
    uint32_t shape_cache = kDefaultShapeCache;   // SHAPE_CACHE_SIZE
    // A plan of the same model at other input shapes: when the prepared graphs match node for
    // node, its partition is copied instead of computed again.
    const CompiledModel::Impl* partition_like = nullptr;
    bool dynamic_blob = false;              // import: the blob carries the symbolic model
    // Compiles the plan of a symbolic model at one input-shape signature.
    static Status specialize(DynamicShapes& dynamic, const CompiledModel::Impl& first, Span<const InputShape> shapes,
                             CompiledModel::Impl** out, char* error);
};

inline const OpKernel* lookup_kernel(void* user, StringView op) {
    CompileJob* job = static_cast<CompileJob*>(user);
    for (uint32_t i = 0; i < job->count; ++i)
        if (const OpKernel* k = job->list[i]->find_extension(op)) return k;
    return find_builtin_kernel(op);
}

// "CPU" or "HETERO:A,B": the device list in priority order.
inline Status parse_device_string(StringView text, CompileJob* job) {
    StringView list = text;
    if (text.size >= 7 && std::memcmp(text.data, "HETERO:", 7) == 0) {
        job->hetero = true;
        list = StringView(text.data + 7, text.size - 7);
    }
    size_t start = 0;
    for (size_t i = 0; i <= list.size; ++i) {
        if (i < list.size && list[i] != ',') continue;
        StringView name(list.data + start, i - start);
        start = i + 1;
        Device* d = job->core->device(name);
        if (!d) return job->fail(Status::NotFound, "unknown device '%.*s' in '%.*s'", (int)name.size, name.data, (int)text.size, text.data);
        // A listed device whose driver is missing: HETERO goes on with the others.
        if (job->hetero && d->check_available() != Status::Ok) { job->skipped_unavailable = true; continue; }
        if (!job->hetero && d->check_available() != Status::Ok)
            return job->fail(Status::Unsupported, "device %.*s is not available: %s", (int)name.size, name.data, d->last_error());
        for (uint32_t k = 0; k < job->count; ++k)
            if (job->list[k] == d) return job->fail(Status::InvalidArgument, "device %.*s is listed twice", (int)name.size, name.data);
        if (job->count == kMaxDevices) return job->fail(Status::LimitExceeded, "at most %u devices", kMaxDevices);
        job->list[job->count++] = d;
    }
    if (job->count == 0 && job->skipped_unavailable)
        return job->fail(Status::Unsupported, "no device of '%.*s' is available", (int)text.size, text.data);
    if (job->count == 0) return job->fail(Status::InvalidArgument, "no device in '%.*s'", (int)text.size, text.data);
    if (!job->hetero && job->count != 1)
        return job->fail(Status::InvalidArgument, "'%.*s': several devices need HETERO:", (int)text.size, text.data);
    return Status::Ok;
}

inline Status save_and_set(CompileJob* job, Arena* arena, Device* d, StringView key, StringView value) {
    StringView old;
    Status s = d->get_config(key, &old);
    if (s != Status::Ok) return job->fail(s, "%s", d->last_error());
    if (!job->saved) job->saved = arena->allocate_array<SavedConfig>(kMaxSavedConfig);
    if (!job->saved) return job->fail(Status::OutOfMemory, "out of memory saving the device config");
    if (job->saved_count == kMaxSavedConfig) return job->fail(Status::LimitExceeded, "too many config entries");
    SavedConfig& c = job->saved[job->saved_count];
    if (key.size >= sizeof c.key) return job->fail(Status::InvalidArgument, "config key too long");
    std::snprintf(c.key, sizeof c.key, "%.*s", (int)key.size, key.data);
    c.value = arena->copy_string(old);
    if (!c.value.data) return job->fail(Status::OutOfMemory, "out of memory saving the device config");
    c.device = d;
    s = d->set_config(key, value);
    if (s != Status::Ok) return job->fail(s, "%s", d->last_error());
    ++job->saved_count;
    return Status::Ok;
}

inline void restore(CompileJob* job) {
    for (uint32_t i = job->saved_count; i-- > 0;) {
        SavedConfig& c = job->saved[i];
        ignore_status(c.device->set_config(StringView(c.key), c.value));
    }
    job->saved_count = 0;
}

// Applies compile-time config: "DEVICE:KEY" to one device, "KEY" to every listed device (HETERO
// keys to the compile itself). NotFound for an unknown device or key.
inline Status apply_config(CompileJob* job, Arena* arena, Span<const ConfigEntry> config, PartitionAlgorithm* algorithm,
                           uint32_t* min_subgraph) {
    for (const ConfigEntry& e : config) {
        StringView key = e.key;
        size_t colon = 0;
        while (colon < key.size && key[colon] != ':') ++colon;
        if (colon < key.size) {
            StringView dev(key.data, colon), k(key.data + colon + 1, key.size - colon - 1);
            Device* d = job->core->device(dev);
            if (!d) return job->fail(Status::NotFound, "config: unknown device '%.*s'", (int)dev.size, dev.data);
            TESSEL_TRY(save_and_set(job, arena, d, k, e.value));
            continue;
        }
        if (key == StringView("HETERO_ALGORITHM")) {
            if (parse_algorithm(e.value, algorithm) != Status::Ok)
                return job->fail(Status::InvalidArgument, "HETERO_ALGORITHM must be rollback, levels or waves");
            continue;
        }
        if (key == StringView("HETERO_MIN_SUBGRAPH")) {
            if (!parse_count(e.value, 0, 1000000, min_subgraph))
                return job->fail(Status::InvalidArgument, "HETERO_MIN_SUBGRAPH must be a count");
            continue;
        }
        if (key == StringView("SHAPE_CACHE_SIZE")) {
            if (!parse_count(e.value, 1, kMaxShapeCache, &job->shape_cache))
                return job->fail(Status::InvalidArgument, "SHAPE_CACHE_SIZE must be a count from 1 to %u", kMaxShapeCache);
            continue;
        }
        for (uint32_t i = 0; i < job->count; ++i) {
            TESSEL_TRY(save_and_set(job, arena, job->list[i], key, e.value));
        }
    }
    return Status::Ok;
}

// Records every config key of the listed devices (for export and for perf/threads).
inline Status snapshot_config(CompileJob* job, CompiledModel::Impl* m) {
    m->config = m->arena.allocate_array<SavedConfig>(kMaxDevices * kMaxDeviceKeys);
    if (!m->config) return Status::OutOfMemory;
    for (uint32_t i = 0; i < job->count; ++i) {
        Device* d = job->list[i];
        StringView keys;
        if (d->get_metric("SUPPORTED_CONFIG_KEYS", &keys) != Status::Ok) continue;
        char copy[1024];
        std::snprintf(copy, sizeof copy, "%.*s", (int)keys.size, keys.data);
        for (char* k = std::strtok(copy, " "); k; k = std::strtok(nullptr, " ")) {
            StringView value;
            if (d->get_config(StringView(k), &value) != Status::Ok || m->config_count == kMaxDevices * kMaxDeviceKeys) continue;
            SavedConfig& c = m->config[m->config_count++];
            c.device = d;
            std::snprintf(c.key, sizeof c.key, "%s", k);
            c.value = m->arena.copy_string(value);
            if (!c.value.data) return Status::OutOfMemory;
            if (StringView(k) == StringView("PERF_COUNT") && (value == StringView("YES") || value == StringView("yes") || value == StringView("1") || value == StringView("true"))) m->perf = true;
            uint32_t t = 1;
            if (StringView(k) == StringView("NUM_THREADS") && parse_count(value, 1, 64, &t) && t > m->threads) m->threads = t;
        }
    }
    return Status::Ok;
}

inline uint32_t prepare_threads(CompileJob* job) {
    uint32_t threads = 1;
    for (uint32_t i = 0; i < job->count; ++i) {
        StringView v;
        uint32_t t = 1;
        if (job->list[i]->get_config("NUM_THREADS", &v) == Status::Ok && parse_count(v, 1, 64, &t) && t > threads) threads = t;
    }
    return threads;
}

// Compiles every subgraph on its device, then the schedule and the memory plan.
inline Status finish_compile(CompileJob* job, CompiledModel::Impl* m, const void* const* payloads,
                             const size_t* payload_sizes, Span<const NodeId>* members) {
    const Graph& g = m->prepared.model.graph;
    m->programs = m->arena.allocate_array<DeviceProgram*>(m->subgraph_count + 1);
    if (!m->programs) return job->fail(Status::OutOfMemory, "out of memory");
    for (uint32_t s = 0; s < m->subgraph_count; ++s) m->programs[s] = nullptr;
    for (uint32_t s = 0; s < m->subgraph_count; ++s) {
        Device* d = m->subgraph_device[s];
        Status st = payloads ? d->import_subgraph(m->prepared, members[s], payloads[s], payload_sizes[s], &m->programs[s])
                             : d->compile_subgraph(m->prepared, members[s], &m->programs[s]);
        if (st != Status::Ok) return job->fail(st, "%.*s: %s", (int)d->name().size, d->name().data, d->last_error());
        if (!m->programs[s]) return job->fail(Status::InvalidArgument, "%.*s returned no program", (int)d->name().size, d->name().data);
    }
    char error[kErrorMessageBytes] = {};
    Status st = build_schedule(m, error);
    if (st != Status::Ok) return job->fail(st, "%s", error[0] ? error : "out of memory scheduling the subgraphs");
    st = plan_memory(m);
    if (st != Status::Ok) return job->fail(st, "out of memory planning the activations");
    if (m->arena_bytes + m->scratch_bytes > job->core->limits().max_arena_bytes)   // what a request allocates
        return job->fail(Status::LimitExceeded, "a request needs %zu bytes of activations and scratch (limit %llu)",
                          m->arena_bytes + m->scratch_bytes, (unsigned long long)job->core->limits().max_arena_bytes);
#ifdef TESSEL_USE_MICROPROFILE
    // One microprofile zone per step (group "tessel", named by kernel and node) and per subgraph.
    m->zones = m->arena.allocate_array<uint64_t>(m->exec_count + m->subgraph_count + 1);
    if (!m->zones) return job->fail(Status::OutOfMemory, "out of memory");
    for (uint32_t e = 0; e < m->exec_count; ++e) {
        const ExecStep& x = m->exec[e];
        char name[64];
        if (x.transfer) print(name, sizeof name, "transfer into subgraph %u", x.subgraph);
        else {
            const ProgramStep& step = m->programs[x.subgraph]->steps()[x.index];
            const Node& n = g.node(step.node);
            print(name, sizeof name, "%s %.*s", step.kernel, (int)n.name.size, n.name.data);
        }
        m->zones[e] = MicroProfileGetToken("tessel", name, 0x3366cc, MicroProfileTokenTypeCpu, 0);
    }
    for (uint32_t s = 0; s < m->subgraph_count; ++s) {
        char name[64];
        print(name, sizeof name, "subgraph %u %.*s", s, (int)m->subgraph_device[s]->name().size, m->subgraph_device[s]->name().data);
        m->zones[m->exec_count + s] = MicroProfileGetToken("tessel", name, 0xcc6633, MicroProfileTokenTypeCpu, 0);
    }
#endif
    // Summary per device, in list order.
    for (uint32_t i = 0; i < job->count; ++i) {
        PlacementSummary& p = m->summary[m->summary_count++];
        p.device = job->list[i]->name();
        for (uint32_t s = 0; s < m->subgraph_count; ++s) {
            if (m->subgraph_device[s] != job->list[i]) continue;
            ++p.subgraphs;
            p.kernels += (uint32_t)m->programs[s]->steps().size;
            for (NodeId v : members[s]) if (!is_free_op(g.node(v).op)) ++p.nodes;
        }
    }
    return Status::Ok;
}
}  // namespace detail

namespace detail {
inline bool has_free_dims(const Model& model, Span<const InputShape> shapes, Span<const InputValue> values);
inline TensorDesc compiled_input_desc(const Model& model, uint32_t i, Span<const InputShape> shapes);
}

Status Core::compile_model(const Model& model, StringView device_string, Span<const ConfigEntry> config, CompiledModel* out,
                           Span<const InputShape> shapes, Span<const InputValue> values) {
    if (!impl_) return fail(Status::OutOfMemory, "out of memory");
    if (!out) return fail(Status::InvalidArgument, "compile_model: null output");
    destroy(out->impl_);
    out->impl_ = nullptr;
    std::lock_guard<std::mutex> lock(impl_->compile_mutex);
    CompiledModel::Impl* m = create<CompiledModel::Impl>();
    if (!m) return fail(Status::OutOfMemory, "out of memory");
    detail::CompileJob job;
    job.core = this;
    Arena scratch;
    PartitionAlgorithm algorithm = PartitionAlgorithm::Rollback;
    uint32_t min_subgraph = 0;
    Status s = detail::parse_device_string(device_string, &job);
    if (s == Status::Ok) s = detail::apply_config(&job, &scratch, config, &algorithm, &min_subgraph);
    if (s == Status::Ok && !model.graph.finalized()) s = fail(Status::NotFinalized, "the model is not finalized");
    if (s == Status::Ok && model.output_count() == 0) s = fail(Status::InvalidArgument, "the model has no outputs");
    if (s == Status::Ok) {
        std::snprintf(m->device_string, sizeof m->device_string, "%.*s", (int)device_string.size, device_string.data);
        if (detail::has_free_dims(model, shapes, values))
            s = detail::CompileJob::compile_symbolic(job, model, shapes, values, algorithm, min_subgraph, m);
        else
            s = compile_job(&job, model, shapes, values, algorithm, min_subgraph, m);
    }
    detail::restore(&job);
    if (s != Status::Ok) { destroy(m); return s; }
    out->impl_ = m;
    return Status::Ok;
}

Status Core::reshape(const Model& model, Span<const InputShape> shapes, CompiledModel* compiled) {
    if (!compiled || !compiled->impl_) return fail(Status::NotFinalized, "reshape: nothing compiled");
    const CompiledModel::Impl& old = *compiled->impl_;
    // The config every listed device had at compile time, as "DEVICE:KEY" entries.
    char device[detail::kDeviceStringBytes];
    detail::print(device, sizeof device, "%s", old.device_string);
    uint32_t count = old.config_count;
    char (*keys)[128] = static_cast<char (*)[128]>(TESSEL_MALLOC(sizeof(char[128]) * (count + 1)));
    ConfigEntry* config = static_cast<ConfigEntry*>(TESSEL_MALLOC(sizeof(ConfigEntry) * (count + 1)));
    // The values are copied too: compiling into `compiled` may free the old model's arena.
    size_t value_bytes = 1;
    for (uint32_t i = 0; i < count; ++i) value_bytes += old.config[i].value.size;
    char* values = static_cast<char*>(TESSEL_MALLOC(value_bytes));
    if (!keys || !config || !values) {
        TESSEL_FREE(keys); TESSEL_FREE(config); TESSEL_FREE(values);
        return fail(Status::OutOfMemory, "out of memory");
    }
    size_t at = 0;
    for (uint32_t i = 0; i < count; ++i) {
        StringView name = old.config[i].device->name();
        detail::print(keys[i], 128, "%.*s:%s", (int)name.size, name.data, old.config[i].key);
        StringView value = old.config[i].value;
        if (value.size) std::memcpy(values + at, value.data, value.size);
        config[i] = ConfigEntry{StringView(keys[i]), StringView(values + at, value.size)};
        at += value.size;
    }
    Status s = compile_model(model, StringView(device), Span<const ConfigEntry>(config, count), compiled, shapes);
    TESSEL_FREE(keys);
    TESSEL_FREE(config);
    TESSEL_FREE(values);
    return s;
}

Status Core::query_model(const Model& model, StringView device_string, uint16_t* devices) {
    if (!impl_) return fail(Status::OutOfMemory, "out of memory");
    if (!devices && model.graph.node_count()) return fail(Status::InvalidArgument, "query_model: null result");
    std::lock_guard<std::mutex> lock(impl_->compile_mutex);
    detail::CompileJob job;
    job.core = this;
    TESSEL_TRY(detail::parse_device_string(device_string, &job));
    PreparedModel prepared;
    char error[kErrorMessageBytes] = {};
    // Free input dims at 1, as compile_model plans them first.
    Arena shape_arena;
    InputShape* shapes = shape_arena.allocate_array<InputShape>(model.input_count() + 1);
    int64_t* dims = shape_arena.allocate_array<int64_t>((size_t)model.input_count() * kMaxRank + 1);
    if (!shapes || !dims) return fail(Status::OutOfMemory, "out of memory");
    uint32_t shape_count = 0;
    for (uint32_t i = 0; i < model.input_count() && model.graph.finalized(); ++i) {
        TensorDesc d = detail::compiled_input_desc(model, i, Span<const InputShape>());
        bool free = false;
        for (uint32_t j = 0; j < d.rank; ++j) { free = free || d.dims[j] < 0; dims[(size_t)i * kMaxRank + j] = d.dims[j] < 0 ? 1 : d.dims[j]; }
        if (free) shapes[shape_count++] = InputShape{model.input(i).name, Span<const int64_t>(dims + (size_t)i * kMaxRank, d.rank)};
    }
    Status s = detail_prepare::run(model, Span<const InputShape>(shapes, shape_count), limits_, detail::lookup_kernel, &job, 1,
                                   &prepared, error);
    if (s != Status::Ok) return fail(s, "%s", error);
    const Graph& pg = prepared.model.graph;
    Arena scratch;
    uint8_t* supported = scratch.allocate_array<uint8_t>((size_t)pg.node_count() * job.count + 1);
    if (!supported) return fail(Status::OutOfMemory, "out of memory");
    for (uint32_t d = 0; d < job.count; ++d) {
        s = job.list[d]->query_model(prepared, supported + (size_t)d * pg.node_count());
        if (s != Status::Ok) return fail(s, "%s", job.list[d]->last_error());
    }
    for (NodeId v = 0; v < model.graph.node_count(); ++v) {
        devices[v] = kNoDevice;
        NodeId p = pg.find(model.graph.node(v).name);
        if (p == kNoNode || pg.node(p).op == StringView("Constant")) continue;   // folded
        for (uint32_t d = 0; d < job.count && devices[v] == kNoDevice; ++d)
            if (supported[(size_t)d * pg.node_count() + p]) devices[v] = (uint16_t)d;
    }
    return Status::Ok;
}

namespace detail {
// Affinity of interface nodes: a Result goes with its producer, a Parameter or Constant with
// its first consumer (so it never makes a subgraph of its own).
inline DeviceId free_node_device(const Graph& g, NodeId v, const DeviceId* chosen) {
    const Node& node = g.node(v);
    if (node.op == StringView("Result")) return chosen[node.inputs[0].producer];
    for (NodeId succ : g.successors(v)) if (chosen[succ] != kNoDevice) return chosen[succ];
    return kNoDevice;
}

// An input's desc as compiled: the model's, with InputShape applied (negative dims: free).
inline TensorDesc compiled_input_desc(const Model& model, uint32_t i, Span<const InputShape> shapes) {
    const Node& node = model.graph.node(model.input(i).node);
    TensorDesc d = node.outputs ? node.outputs[0] : TensorDesc();
    for (const InputShape& s : shapes) {
        if (!(s.name == node.name) || s.dims.size > kMaxRank || (d.rank && d.rank != s.dims.size)) continue;
        d.rank = (uint8_t)s.dims.size;
        for (size_t j = 0; j < s.dims.size; ++j) if (d.dims[j] < 0) d.dims[j] = s.dims[j];
    }
    return d;
}

inline bool is_frozen(StringView name, Span<const InputValue> values) {
    for (const InputValue& v : values) if (v.name == name) return true;
    return false;
}

// Whether an input keeps a free dim after InputShape and InputValue: then the model compiles
// as a symbolic one.
inline bool has_free_dims(const Model& model, Span<const InputShape> shapes, Span<const InputValue> values) {
    if (model.body_depth() != 0) return false;
    for (uint32_t i = 0; i < model.input_count(); ++i) {
        if (is_frozen(model.input(i).name, values)) continue;
        TensorDesc d = compiled_input_desc(model, i, shapes);
        for (uint32_t j = 0; j < d.rank; ++j) if (d.dims[j] < 0) return true;
    }
    return false;
}

// Copies `like`'s partition when m's prepared graph is the same graph (names, ops, edges) and
// every node's device there supports it here: a specialization then skips the partitioner.
inline bool copy_partition(CompiledModel::Impl* m, const CompiledModel::Impl& like, const CompileJob& job,
                           const uint8_t* supported, Span<const NodeId>** members) {
    const Graph& g = m->prepared.model.graph;
    const Graph& h = like.prepared.model.graph;
    uint32_t n = g.node_count();
    if (n != h.node_count() || like.device_count != job.count) return false;
    for (uint32_t d = 0; d < job.count; ++d) if (like.devices[d] != job.list[d]) return false;
    for (NodeId v = 0; v < n; ++v) {
        const Node& a = g.node(v);
        const Node& b = h.node(v);
        if (!(a.name == b.name) || !(a.op == b.op) || a.num_inputs != b.num_inputs || a.num_outputs != b.num_outputs) return false;
        for (uint32_t i = 0; i < a.num_inputs; ++i)
            if (a.inputs[i].producer != b.inputs[i].producer || a.inputs[i].port != b.inputs[i].port) return false;
        if (is_free_op(a.op)) continue;
        const Device* device = like.subgraph_device[like.subgraph_of[v]];
        uint32_t d = 0;
        while (d < job.count && job.list[d] != device) ++d;
        if (d == job.count || !supported[(size_t)d * n + v]) return false;
    }
    uint32_t count = like.subgraph_count;
    m->subgraph_count = count;
    m->subgraph_device = m->arena.allocate_array<Device*>(count + 1);
    *members = m->arena.allocate_array<Span<const NodeId>>(count + 1);
    uint32_t* sizes = m->arena.allocate_array<uint32_t>(count + 1);
    NodeId* nodes = m->arena.allocate_array<NodeId>(n + 1);
    if (!m->subgraph_device || !*members || !sizes || !nodes) return false;
    for (uint32_t k = 0; k < count; ++k) { m->subgraph_device[k] = like.subgraph_device[k]; sizes[k] = 0; }
    for (NodeId v = 0; v < n; ++v) { m->subgraph_of[v] = like.subgraph_of[v]; ++sizes[like.subgraph_of[v]]; }
    uint32_t at = 0;
    for (uint32_t k = 0; k < count; ++k) { (*members)[k] = Span<const NodeId>(nodes + at, 0); at += sizes[k]; }
    for (NodeId v = 0; v < n; ++v) {   // ascending ids per subgraph, as compile_subgraph wants
        Span<const NodeId>& span = (*members)[like.subgraph_of[v]];
        const_cast<NodeId*>(span.data)[span.size++] = v;
    }
    return true;
}
}  // namespace detail

Status Core::compile_job(void* job_pointer, const Model& model, Span<const InputShape> shapes, Span<const InputValue> values,
                         PartitionAlgorithm algorithm, uint32_t min_subgraph, void* impl) {
    detail::CompileJob& job = *static_cast<detail::CompileJob*>(job_pointer);
    CompiledModel::Impl* m = static_cast<CompiledModel::Impl*>(impl);
    char error[kErrorMessageBytes] = {};
    Status s = detail_prepare::run(model, shapes, limits_, detail::lookup_kernel, &job, detail::prepare_threads(&job),
                                   &m->prepared, error, values);
    if (s != Status::Ok) return fail(s, "%s", error);
    Graph& g = m->prepared.model.graph;
    uint32_t n = g.node_count();
    // Query every device; assign affinities (user affinities win); partition.
    uint8_t* supported = m->arena.allocate_array<uint8_t>((size_t)n * job.count + 1);
    DeviceId* chosen = m->arena.allocate_array<DeviceId>(n + 1);
    m->subgraph_of = m->arena.allocate_array<uint32_t>(n + 1);
    if (!supported || !chosen || !m->subgraph_of) return fail(Status::OutOfMemory, "out of memory");
    for (uint32_t d = 0; d < job.count; ++d) {
        s = job.list[d]->query_model(m->prepared, supported + (size_t)d * n);
        if (s != Status::Ok) return fail(s, "%.*s: %s", (int)job.list[d]->name().size, job.list[d]->name().data, job.list[d]->last_error());
    }
    uint32_t fallback[64] = {};
    for (NodeId v = 0; v < n; ++v) {
        const Node& node = g.node(v);
        chosen[v] = kNoDevice;
        if (detail::is_free_op(node.op)) continue;
        if (node.affinity != kNoDevice) {   // user affinity
            StringView want = g.device_name(node.affinity);
            for (uint32_t d = 0; d < job.count; ++d) if (job.list[d]->name() == want) chosen[v] = (DeviceId)d;
            if (chosen[v] == kNoDevice)
                return fail(Status::InvalidArgument, "node '%.*s' has affinity %.*s, which is not in '%s'", (int)node.name.size,
                            node.name.data, (int)want.size, want.data, m->device_string);
            if (!supported[(size_t)chosen[v] * n + v])
                return fail(Status::Unsupported, "node '%.*s' (op %.*s) has affinity %.*s, which does not support it",
                            (int)node.name.size, node.name.data, (int)node.op.size, node.op.data, (int)want.size, want.data);
            continue;
        }
        for (uint32_t d = 0; d < job.count && chosen[v] == kNoDevice; ++d)
            if (supported[(size_t)d * n + v]) chosen[v] = (DeviceId)d;
        if (chosen[v] == kNoDevice)
            return fail(Status::Unsupported, "node '%.*s' (op %.*s) is supported by no device of '%s'", (int)node.name.size,
                        node.name.data, (int)node.op.size, node.op.data, m->device_string);
        if (chosen[v] > 0) ++fallback[chosen[v]];
    }
    m->fallback = m->arena.allocate_array<NodeId>(n + 1);
    if (!m->fallback) return fail(Status::OutOfMemory, "out of memory");
    for (NodeId v = 0; v < n; ++v)
        if (!detail::is_free_op(g.node(v).op) && chosen[v] != kNoDevice && chosen[v] > 0 && g.node(v).affinity == kNoDevice)
            m->fallback[m->fallback_count++] = v;
    Span<const NodeId> order = g.topological_order();
    for (size_t k = order.size; k-- > 0;) {   // consumers first, so Parameters see them
        NodeId v = order[k];
        if (detail::is_free_op(g.node(v).op) && g.node(v).op != StringView("Result")) chosen[v] = detail::free_node_device(g, v, chosen);
    }
    for (NodeId v : order)
        if (g.node(v).op == StringView("Result")) chosen[v] = detail::free_node_device(g, v, chosen);
    for (NodeId v = 0; v < n; ++v) if (chosen[v] == kNoDevice) chosen[v] = 0;
    m->device_count = job.count;
    for (uint32_t d = 0; d < job.count; ++d) m->devices[d] = job.list[d];
    Span<const NodeId>* members = nullptr;
    if (job.count > 1 && job.partition_like && detail::copy_partition(m, *job.partition_like, job, supported, &members)) {
        // the partition of the same graph at other input shapes
    } else if (job.count == 1) {
        m->subgraph_count = 1;
        for (NodeId v = 0; v < n; ++v) m->subgraph_of[v] = 0;
        m->subgraph_device = m->arena.allocate_array<Device*>(1);
        NodeId* all = m->arena.allocate_array<NodeId>(n + 1);
        members = m->arena.allocate_array<Span<const NodeId>>(1);
        if (!m->subgraph_device || !all || !members) return fail(Status::OutOfMemory, "out of memory");
        for (NodeId v = 0; v < n; ++v) all[v] = v;
        m->subgraph_device[0] = job.list[0];
        members[0] = Span<const NodeId>(all, n);
    } else {
        // Graph device ids in list order, so bit d of a supported mask is list[d].
        StringView names[64];
        for (uint32_t d = 0; d < job.count; ++d) {
            DeviceId id;
            s = g.intern_device(job.list[d]->name(), &id);
            if (s != Status::Ok) return fail(s, "%s", g.last_error());
            names[d] = job.list[d]->name();
        }
        uint64_t* masks = m->arena.allocate_array<uint64_t>(n + 1);
        if (!masks) return fail(Status::OutOfMemory, "out of memory");
        for (NodeId v = 0; v < n; ++v) {   // the post-pass may move a node to any device that runs it
            bool user = g.node(v).affinity != kNoDevice && !detail::is_free_op(g.node(v).op);
            s = g.set_affinity(v, names[chosen[v]]);
            if (s != Status::Ok) return fail(s, "%s", g.last_error());
            masks[v] = 1ull << g.find_device(names[chosen[v]]);
            for (uint32_t d = 0; d < job.count && !user; ++d)
                if (supported[(size_t)d * n + v]) masks[v] |= 1ull << g.find_device(names[d]);
        }
        PartitionOptions options;
        options.algorithm = algorithm;
        options.devices = Span<const StringView>(names, job.count);
        options.min_subgraph_size = min_subgraph;
        options.supported = masks;
        s = tessel::partition(g, options, &m->arena, &m->partition);
        if (s != Status::Ok) return fail(s, "partition: %s", m->partition.last_error());
        m->subgraph_count = (uint32_t)m->partition.subgraphs.size;
        m->subgraph_device = m->arena.allocate_array<Device*>(m->subgraph_count + 1);
        members = m->arena.allocate_array<Span<const NodeId>>(m->subgraph_count + 1);
        if (!m->subgraph_device || !members) return fail(Status::OutOfMemory, "out of memory");
        for (uint32_t k = 0; k < m->subgraph_count; ++k) {
            StringView dn = g.device_name(m->partition.subgraphs[k].device);
            for (uint32_t d = 0; d < job.count; ++d) if (job.list[d]->name() == dn) m->subgraph_device[k] = job.list[d];
            members[k] = m->partition.subgraphs[k].nodes;
        }
        for (NodeId v = 0; v < n; ++v) m->subgraph_of[v] = m->partition.subgraph_of[v];
    }
    s = detail::snapshot_config(&job, m);
    if (s != Status::Ok) return fail(s, "out of memory");
    TESSEL_TRY(detail::finish_compile(&job, m, nullptr, nullptr, members));
    for (uint32_t d = 0; d < job.count; ++d) m->summary[d].fallback_nodes = fallback[d];
    return Status::Ok;
}

namespace detail {
// What every later plan of a symbolic model needs: the inputs' free dims, the config as
// "DEVICE:KEY" entries, copies of the InputValue tensors, the cache.
inline Status finish_symbolic(CompileJob& job, const Model& model, Span<const InputShape> shapes, Span<const InputValue> values,
                              CompiledModel::Impl* m) {
    DynamicShapes* d = m->dynamic;
    const Model& pm = m->prepared.model;
    d->input_count = pm.input_count();
    d->inputs = d->arena.allocate_array<TensorDesc>(d->input_count + 1);
    d->config = d->arena.allocate_array<ConfigEntry>(m->config_count + 1);
    d->values = d->arena.allocate_array<InputValue>(values.size + 1);
    d->cache = d->arena.allocate_array<Specialization>(d->capacity);
    if (!d->inputs || !d->config || !d->values || !d->cache) return job.fail(Status::OutOfMemory, "out of memory");
    for (uint32_t i = 0; i < d->input_count; ++i) {
        uint32_t k = model.find_input(pm.input(i).name);
        d->inputs[i] = k == kNotFound ? m->prepared.value_desc(m->prepared.value_id(pm.input(i).node, 0)) : compiled_input_desc(model, k, shapes);
    }
    for (uint32_t i = 0; i < m->config_count; ++i) {
        StringView device = m->config[i].device->name();
        char key[160];
        print(key, sizeof key, "%.*s:%s", (int)device.size, device.data, m->config[i].key);
        d->config[i] = ConfigEntry{d->arena.copy_string(StringView(key)), m->config[i].value};
        if (!d->config[i].key.data) return job.fail(Status::OutOfMemory, "out of memory");
    }
    d->config_count = m->config_count;
    for (const InputValue& v : values) {
        Tensor* copy = d->arena.allocate_array<Tensor>(1);
        if (!copy) return job.fail(Status::OutOfMemory, "out of memory");
        new (copy) Tensor();
        InputValue& kept = d->values[d->value_count++];
        kept.tensor = copy;
        kept.name = d->arena.copy_string(v.name);
        if (!v.tensor || !kept.name.data || copy->allocate(v.tensor->type(), v.tensor->shape()) != Status::Ok)
            return job.fail(Status::OutOfMemory, "out of memory copying input value '%.*s'", (int)v.name.size, v.name.data);
        if (v.tensor->bytes()) std::memcpy(copy->data(), v.tensor->data(), v.tensor->bytes());
    }
    return Status::Ok;
}

Status CompileJob::compile_symbolic(CompileJob& job, const Model& model, Span<const InputShape> shapes,
                                    Span<const InputValue> values, PartitionAlgorithm algorithm, uint32_t min_subgraph,
                                    CompiledModel::Impl* m) {
    Arena scratch;
    uint32_t inputs = model.input_count();
    // The caller's shapes first, so prepare checks them against the model as for a fixed compile.
    InputShape* first = scratch.allocate_array<InputShape>(shapes.size + inputs + 1);
    int64_t* dims = scratch.allocate_array<int64_t>((size_t)inputs * kMaxRank + 1);
    if (!first || !dims) return job.fail(Status::OutOfMemory, "out of memory");
    uint32_t count = 0;
    for (const InputShape& given : shapes) first[count++] = given;
    for (uint32_t i = 0; i < inputs; ++i) {
        if (is_frozen(model.input(i).name, values)) continue;
        TensorDesc d = compiled_input_desc(model, i, shapes);
        int64_t* at = dims + (size_t)i * kMaxRank;
        for (uint32_t j = 0; j < d.rank; ++j) at[j] = d.dims[j] < 0 ? 1 : d.dims[j];
        first[count++] = InputShape{model.input(i).name, Span<const int64_t>(at, d.rank)};
    }
    Status s = job.core->compile_job(&job, model, Span<const InputShape>(first, count), values, algorithm, min_subgraph, m);
    if (s != Status::Ok) {
        char message[kErrorMessageBytes];
        print(message, sizeof message, "%s", job.core->error_);
        return job.fail(s, "with its free input dims at 1: %s (give shapes that fix them)", message);
    }
    DynamicShapes* d = create<DynamicShapes>();
    if (!d) return job.fail(Status::OutOfMemory, "out of memory");
    m->dynamic = d;
    d->core = job.core;
    d->source = &model;
    d->algorithm = algorithm;
    d->min_subgraph = min_subgraph;
    d->capacity = job.shape_cache;
    return finish_symbolic(job, model, shapes, values, m);
}
}  // namespace detail

namespace detail {
Status CompileJob::specialize(DynamicShapes& d, const CompiledModel::Impl& first, Span<const InputShape> shapes,
                              CompiledModel::Impl** out, char* error) {
    Core* core = d.core;
    if (!core->impl_) return Status::OutOfMemory;
    std::lock_guard<std::mutex> lock(core->impl_->compile_mutex);
    CompiledModel::Impl* m = create<CompiledModel::Impl>();
    if (!m) { print(error, kErrorMessageBytes, "out of memory"); return Status::OutOfMemory; }
    CompileJob job;
    job.core = core;
    job.partition_like = &first;
    Arena scratch;
    PartitionAlgorithm algorithm = d.algorithm;
    uint32_t min_subgraph = d.min_subgraph;
    std::snprintf(m->device_string, sizeof m->device_string, "%s", first.device_string);
    Status s = parse_device_string(StringView(first.device_string), &job);
    if (s == Status::Ok) s = apply_config(&job, &scratch, Span<const ConfigEntry>(d.config, d.config_count), &algorithm, &min_subgraph);
    if (s == Status::Ok)
        s = core->compile_job(&job, *d.source, shapes, Span<const InputValue>(d.values, d.value_count), algorithm, min_subgraph, m);
    restore(&job);
    if (s != Status::Ok) {
        print(error, kErrorMessageBytes, "%s", core->error_);
        destroy(m);
        return s;
    }
    *out = m;
    return Status::Ok;
}
}  // namespace detail

// >>infer request implementation
namespace detail {
constexpr uint32_t kNoSubgraph = 0xffffffffu;   // before the first step of an inference
}

struct InferRequest::Impl {
    const CompiledModel::Impl* m = nullptr;       // the plan it runs
    const CompiledModel::Impl* owner = nullptr;   // the compiled model's own plan
    detail::Specialization* held = nullptr;       // m's cache entry (symbolic models; nullptr: owner)
    size_t arena_capacity = 0, scratch_capacity = 0;   // buffers grow to the largest plan seen
    uint32_t slot_capacity = 0, value_capacity = 0, profile_capacity = 0;
    uint8_t* user_input = nullptr;   // per input: set_input bound user memory
    void* arena_raw = nullptr;
    unsigned char* arena = nullptr;
    void* scratch_raw = nullptr;
    void* scratch = nullptr;
    void** base = nullptr;           // per slot: where it lives
    void** values = nullptr;         // per value id, as the running subgraph reads it (its
                                     // transfers' copies patched in while it runs)
    Tensor* inputs = nullptr;
    Tensor* outputs = nullptr;
    Tensor* bound_outputs = nullptr; // user tensors outputs are copied into (type Undefined: none)
    uint32_t input_count = 0, output_count = 0;   // of the arrays above: ~Impl must not read m, gone first maybe
    ProfileEntry* profile = nullptr;
    uint32_t profile_count = 0;
    detail::ThreadPool pool;
    char error[kErrorMessageBytes] = {};
    // start_async / wait
    std::thread worker;
    std::mutex mutex;
    std::condition_variable wake, done;
    bool started = false, job = false, busy = false, quit = false;
    Status async_status = Status::Ok;

    ~Impl() {
        if (started) {
            {
                std::lock_guard<std::mutex> lock(mutex);
                quit = true;
            }
            wake.notify_all();
            worker.join();
        }
        release();
        TESSEL_FREE(user_input);
        for (uint32_t i = 0; inputs && i < input_count; ++i) inputs[i].~Tensor();
        for (uint32_t i = 0; outputs && i < output_count; ++i) { outputs[i].~Tensor(); bound_outputs[i].~Tensor(); }
        TESSEL_FREE(inputs);
        TESSEL_FREE(outputs);
        TESSEL_FREE(bound_outputs);
        TESSEL_FREE(arena_raw);
        TESSEL_FREE(scratch_raw);
        TESSEL_FREE(base);
        TESSEL_FREE(values);
        TESSEL_FREE(profile);
    }
    uint32_t value_count() const { return m->prepared.value_count(); }
    void bind(uint32_t value, void* pointer) {   // never during a run (one thread per request)
        base[value] = pointer;
        values[value] = pointer;
    }
    void patch(uint32_t s, bool enter) {   // a subgraph reads its transfers' copies
        for (uint32_t t = m->transfer_first[s]; t < m->transfer_first[s + 1]; ++t)
            values[m->transfers[t].value] = base[enter ? m->transfers[t].slot : m->transfers[t].value];
    }
    Status run();
    Status attach(const CompiledModel::Impl* plan, char* message);
    Status follow_input_shapes(char* message);
    void release() {
        if (!held) return;
        std::lock_guard<std::mutex> lock(owner->dynamic->mutex);
        --held->users;
        held = nullptr;
    }
};

InferRequest::InferRequest() = default;
InferRequest::~InferRequest() { destroy(impl_); }

namespace detail {
inline void* aligned_block(size_t bytes, void** raw) {
    *raw = TESSEL_MALLOC(bytes + 64);
    if (!*raw) return nullptr;
    return reinterpret_cast<void*>(((uintptr_t)*raw + 63) & ~(uintptr_t)63);
}
template <class T>
T* malloc_array(size_t n) {
    if (n > SIZE_MAX / sizeof(T) - 1) return nullptr;
    return static_cast<T*>(TESSEL_MALLOC(sizeof(T) * (n ? n : 1)));
}
}  // namespace detail

namespace detail {
// Grows a buffer of a request to `bytes` (never shrinks: a request that alternates between
// plans allocates only until it has seen the largest).
inline bool grow_block(void** raw, void** aligned, size_t* capacity, size_t bytes) {
    if (*aligned && bytes <= *capacity) return true;
    void* fresh_raw = nullptr;
    void* fresh = aligned_block(bytes, &fresh_raw);
    if (!fresh) return false;
    std::memset(fresh, 0, bytes);
    TESSEL_FREE(*raw);
    *raw = fresh_raw;
    *aligned = fresh;
    *capacity = bytes;
    return true;
}
template <class T>
bool grow_array(T** array, uint32_t* capacity, uint32_t count) {
    if (*array && count <= *capacity) return true;
    T* fresh = malloc_array<T>((size_t)count + 1);
    if (!fresh) return false;
    TESSEL_FREE(*array);
    *array = fresh;
    *capacity = count;
    return true;
}
}  // namespace detail

// Points the request at a plan: buffers grown if it needs more, every slot's address, the
// inputs (user memory stays bound) and outputs as views with the plan's shapes.
Status InferRequest::Impl::attach(const CompiledModel::Impl* plan, char* message) {
    void* arena_void = arena;
    bool ok = detail::grow_block(&arena_raw, &arena_void, &arena_capacity, plan->arena_bytes) &&
              detail::grow_block(&scratch_raw, &scratch, &scratch_capacity, plan->scratch_bytes) &&
              detail::grow_array(&base, &slot_capacity, plan->slot_count) &&
              detail::grow_array(&values, &value_capacity, plan->prepared.value_count()) &&
              detail::grow_array(&profile, &profile_capacity, plan->exec_count + detail::kMaxBodyProfileEntries);
    arena = static_cast<unsigned char*>(arena_void);
    if (!ok) {
        detail::print(message, kErrorMessageBytes, "out of memory for a request's buffers (%zu bytes of activations)", plan->arena_bytes);
        return Status::OutOfMemory;
    }
    m = plan;
    const PreparedModel& pp = plan->prepared;
    const Model& pm = pp.model;
    uint32_t count = pp.value_count();
    for (uint32_t s = 0; s < plan->slot_count; ++s) {
        const void* c = s < count ? pp.constant(s) : nullptr;
        base[s] = plan->offset[s] >= 0 ? arena + plan->offset[s] : const_cast<void*>(c);
    }
    for (uint32_t v = 0; v < count; ++v) values[v] = base[v];
    profile_count = 0;
    for (uint32_t i = 0; i < pm.input_count(); ++i) {
        uint32_t value = pp.value_id(pm.input(i).node, 0);
        if (user_input[i]) { bind(value, inputs[i].data()); continue; }
        const TensorDesc& d = pp.value_desc(value);
        ignore_status(inputs[i].view(d.type, Span<const int64_t>(d.dims, d.rank), base[value]));
    }
    for (uint32_t i = 0; i < pm.output_count(); ++i) {
        const Edge& e = pm.graph.node(pm.output(i).node).inputs[0];
        uint32_t value = pp.value_id(e.producer, e.port);
        const TensorDesc& d = pp.value_desc(value);
        ignore_status(outputs[i].view(d.type, Span<const int64_t>(d.dims, d.rank), base[value]));
    }
    return Status::Ok;
}

Status CompiledModel::create_request(InferRequest* request) const {
    if (!impl_) return Status::NotFinalized;
    if (!request) return Status::InvalidArgument;
    destroy(request->impl_);
    request->impl_ = nullptr;
    InferRequest::Impl* r = create<InferRequest::Impl>();
    if (!r) { std::snprintf(error_, sizeof error_, "out of memory creating a request"); return Status::OutOfMemory; }
    r->m = impl_;
    r->owner = impl_;
    const Model& pm = impl_->prepared.model;
    r->inputs = detail::malloc_array<Tensor>(pm.input_count());
    r->outputs = detail::malloc_array<Tensor>(pm.output_count());
    r->bound_outputs = detail::malloc_array<Tensor>(pm.output_count());
    r->user_input = detail::malloc_array<uint8_t>(pm.input_count());
    bool ok = r->inputs && r->outputs && r->bound_outputs && r->user_input;
    if (ok) {
        for (uint32_t i = 0; i < pm.input_count(); ++i) { new (&r->inputs[i]) Tensor(); r->user_input[i] = 0; }
        for (uint32_t i = 0; i < pm.output_count(); ++i) { new (&r->outputs[i]) Tensor(); new (&r->bound_outputs[i]) Tensor(); }
        r->input_count = pm.input_count();
        r->output_count = pm.output_count();
    } else {
        if (r->inputs) { TESSEL_FREE(r->inputs); r->inputs = nullptr; }
        if (r->outputs) { TESSEL_FREE(r->outputs); r->outputs = nullptr; }
        if (r->bound_outputs) { TESSEL_FREE(r->bound_outputs); r->bound_outputs = nullptr; }
        destroy(r);
        std::snprintf(error_, sizeof error_, "out of memory creating a request");
        return Status::OutOfMemory;
    }
    Status s = r->attach(impl_, error_);
    if (s != Status::Ok) { destroy(r); return s; }
    if (r->pool.start(impl_->threads) != Status::Ok) {
        destroy(r);
        std::snprintf(error_, sizeof error_, "out of memory starting threads");
        return Status::OutOfMemory;
    }
    request->impl_ = r;
    return Status::Ok;
}

namespace detail {
inline Tensor& no_tensor() {   // what input()/output() give for a bad index: empty, no data
    static thread_local Tensor empty;
    empty.reset();
    return empty;
}
}  // namespace detail

Tensor& InferRequest::input(uint32_t i) {
    if (!impl_ || i >= impl_->m->prepared.model.input_count()) return detail::no_tensor();
    return impl_->inputs[i];
}
const Tensor& InferRequest::output(uint32_t i) const {
    if (!impl_ || i >= impl_->m->prepared.model.output_count()) return detail::no_tensor();
    return impl_->outputs[i];
}

uint32_t InferRequest::find_input(StringView name) const { return impl_ ? impl_->m->prepared.model.find_input(name) : kNotFound; }
uint32_t InferRequest::find_output(StringView name) const { return impl_ ? impl_->m->prepared.model.find_output(name) : kNotFound; }

namespace detail {
inline bool same_desc(const TensorDesc& a, const TensorDesc& b) {
    if (a.type != b.type || a.rank != b.rank) return false;
    for (uint32_t i = 0; i < a.rank; ++i) if (a.dims[i] != b.dims[i]) return false;
    return true;
}
// A symbolic input takes any size in its free (negative) dims, the rest as compiled.
inline bool fits_desc(const TensorDesc& want, const TensorDesc& given) {
    if (want.type != given.type || want.rank != given.rank) return false;
    for (uint32_t i = 0; i < want.rank; ++i) if (want.dims[i] >= 0 && want.dims[i] != given.dims[i]) return false;
    return true;
}
inline void describe(const TensorDesc& d, char* out, size_t size) {
    size_t k = (size_t)std::snprintf(out, size, "%s[", element_type_name(d.type));
    for (uint32_t i = 0; i < d.rank && k < size; ++i) k += (size_t)std::snprintf(out + k, size - k, "%s%lld", i ? "," : "", (long long)d.dims[i]);
    if (k < size) std::snprintf(out + k, size - k, "]");
}
}  // namespace detail

Status InferRequest::set_input(uint32_t i, const Tensor& tensor) {
    if (!impl_) return Status::NotFinalized;
    const Model& pm = impl_->m->prepared.model;
    if (i >= pm.input_count()) {
        std::snprintf(error_, sizeof error_, "no input %u (the model has %u)", i, pm.input_count());
        return Status::NotFound;
    }
    const detail::DynamicShapes* dynamic = impl_->owner->dynamic;
    const TensorDesc& want = dynamic ? dynamic->inputs[i] : impl_->m->prepared.value_desc(impl_->m->prepared.value_id(pm.input(i).node, 0));
    if (!(dynamic ? detail::fits_desc(want, tensor.desc()) : detail::same_desc(want, tensor.desc())) || !tensor.dense() ||
        (!tensor.data() && tensor.elements())) {
        char a[128], b[128];
        detail::describe(want, a, sizeof a);
        detail::describe(tensor.desc(), b, sizeof b);
        detail::print(error_, sizeof error_, "input '%.*s' is %s%s; the tensor given is %s%s", (int)pm.input(i).name.size,
                      pm.input(i).name.data, a, dynamic ? " (-1: any size)" : "", b, tensor.dense() ? "" : " and not dense");
        return Status::InvalidArgument;
    }
    ignore_status(impl_->inputs[i].view(tensor.type(), tensor.shape(), tensor.data()));
    impl_->user_input[i] = 1;
    uint32_t value = impl_->m->prepared.value_id(pm.input(i).node, 0);
    if (detail::same_desc(impl_->m->prepared.value_desc(value), tensor.desc())) impl_->bind(value, tensor.data());
    return Status::Ok;   // a new shape: infer() moves to the plan of the new signature
}

Status InferRequest::set_input(StringView name, const Tensor& tensor) {
    uint32_t i = find_input(name);
    if (i == kNotFound) {
        std::snprintf(error_, sizeof error_, "no input named '%.*s'", (int)name.size, name.data);
        return Status::NotFound;
    }
    return set_input(i, tensor);
}

Status InferRequest::set_output(uint32_t i, const Tensor& tensor) {
    if (!impl_) return Status::NotFinalized;
    const Model& pm = impl_->m->prepared.model;
    if (i >= pm.output_count()) {
        std::snprintf(error_, sizeof error_, "no output %u (the model has %u)", i, pm.output_count());
        return Status::NotFound;
    }
    const TensorDesc& want = impl_->outputs[i].desc();
    // With free input dims the output's shape is checked at each infer, for the shapes then.
    bool fits = impl_->owner->dynamic ? want.type == tensor.type() && want.rank == tensor.rank() : detail::same_desc(want, tensor.desc());
    if (!fits || !tensor.dense() || (!tensor.data() && tensor.elements())) {
        char a[128], b[128];
        detail::describe(want, a, sizeof a);
        detail::describe(tensor.desc(), b, sizeof b);
        detail::print(error_, sizeof error_, "output '%.*s' is %s; the tensor given is %s", (int)pm.output(i).name.size,
                      pm.output(i).name.data, a, b);
        return Status::InvalidArgument;
    }
    ignore_status(impl_->bound_outputs[i].view(tensor.type(), tensor.shape(), tensor.data()));
    return Status::Ok;
}

Status InferRequest::set_output(StringView name, const Tensor& tensor) {
    uint32_t i = find_output(name);
    if (i == kNotFound) {
        std::snprintf(error_, sizeof error_, "no output named '%.*s'", (int)name.size, name.data);
        return Status::NotFound;
    }
    return set_output(i, tensor);
}

Status InferRequest::Impl::run() {
    const CompiledModel::Impl& cm = *m;
    error[0] = 0;
    profile_count = 0;
    detail::BodyProfile body_profile;   // recorded past the steps' entries, moved after them at the end
    body_profile.entries = profile + cm.exec_count + 1;
    body_profile.capacity = detail::kMaxBodyProfileEntries;
    uint32_t current = detail::kNoSubgraph;   // the subgraph whose transfers are patched in
#ifdef TESSEL_USE_MICROPROFILE
    uint32_t open_subgraph = detail::kNoSubgraph;
#endif
    for (uint32_t e = 0; e < cm.exec_count; ++e) {
        const detail::ExecStep& x = cm.exec[e];
        if (x.subgraph != current) {
            if (current != detail::kNoSubgraph) patch(current, false);
            patch(x.subgraph, true);
            current = x.subgraph;
        }
#ifdef TESSEL_USE_MICROPROFILE
        if (x.subgraph != open_subgraph) {
            if (open_subgraph != detail::kNoSubgraph) MicroProfileLeave();
            MicroProfileEnter(cm.zones[cm.exec_count + x.subgraph]);
            open_subgraph = x.subgraph;
        }
        MicroProfileEnter(cm.zones[e]);
#endif
        uint64_t start = cm.perf ? detail::now_ns() : 0;
        Status s = Status::Ok;
        if (x.transfer) {
            const detail::Transfer& t = cm.transfers[x.index];
            std::memcpy(base[t.slot], base[t.value], cm.slot_bytes[t.slot]);
        } else {
            StepContext c;
            c.values = values;
            c.scratch = scratch;
            c.threads = pool.threads();
            c.pool = &pool;
            c.error = error;
            if (cm.perf) {
                body_profile.device = cm.subgraph_device[x.subgraph]->name();
                body_profile.subgraph = x.subgraph;
                c.body_profile = &body_profile;
            }
            s = cm.programs[x.subgraph]->run_step(x.index, c);
        }
        if (cm.perf) {
            ProfileEntry& p = profile[profile_count++];
            p.subgraph = x.subgraph;
            p.device = cm.subgraph_device[x.subgraph]->name();
            p.ns = detail::now_ns() - start;
            if (x.transfer) {
                p.node = cm.prepared.model.graph.node(cm.transfers[x.index].producer).name;
                p.kernel = "transfer";
            } else {
                const ProgramStep& step = cm.programs[x.subgraph]->steps()[x.index];
                p.node = cm.prepared.model.graph.node(step.node).name;
                p.kernel = step.kernel;
            }
        }
#ifdef TESSEL_USE_MICROPROFILE
        MicroProfileLeave();
        if (s != Status::Ok || e + 1 == cm.exec_count) MicroProfileLeave();   // the subgraph zone
#endif
        if (s != Status::Ok) {
            patch(current, false);
            if (!error[0]) std::snprintf(error, sizeof error, "a kernel failed");
            return s;
        }
    }
    if (current != detail::kNoSubgraph) patch(current, false);
    if (body_profile.count) {
        std::memmove(profile + profile_count, body_profile.entries, body_profile.count * sizeof(ProfileEntry));
        profile_count += body_profile.count;
    }
    for (uint32_t i = 0; i < cm.prepared.model.output_count(); ++i) {
        if (!bound_outputs[i].data() || bound_outputs[i].data() == outputs[i].data()) continue;
        if (!detail::same_desc(bound_outputs[i].desc(), outputs[i].desc())) {   // the input shapes changed since set_output
            char a[128], b[128];
            detail::describe(outputs[i].desc(), a, sizeof a);
            detail::describe(bound_outputs[i].desc(), b, sizeof b);
            const StringView name = cm.prepared.model.output(i).name;
            detail::print(error, sizeof error, "output '%.*s' is %s at these input shapes; the tensor bound with set_output is %s",
                          (int)name.size, name.data, a, b);
            return Status::InvalidArgument;
        }
        std::memcpy(bound_outputs[i].data(), outputs[i].data(), outputs[i].bytes());
    }
    return Status::Ok;
}

// The per-infer shape check of a symbolic model: the plan of the inputs' signature, from the
// cache, or compiled there (the least recently used plan no request holds makes room).
Status InferRequest::Impl::follow_input_shapes(char* message) {
    const PreparedModel& pp = m->prepared;
    const Model& pm = pp.model;
    bool same = true;
    for (uint32_t i = 0; i < pm.input_count() && same; ++i)
        same = !user_input[i] || detail::same_desc(pp.value_desc(pp.value_id(pm.input(i).node, 0)), inputs[i].desc());
    if (same) return Status::Ok;
    detail::DynamicShapes& d = *owner->dynamic;
    auto matches = [this](const CompiledModel::Impl* plan) {
        const PreparedModel& p = plan->prepared;
        for (uint32_t i = 0; i < p.model.input_count(); ++i)
            if (!detail::same_desc(p.value_desc(p.value_id(p.model.input(i).node, 0)), inputs[i].desc())) return false;
        return true;
    };
    std::lock_guard<std::mutex> lock(d.mutex);
    detail::Specialization* entry = nullptr;
    const CompiledModel::Impl* plan = matches(owner) ? owner : nullptr;
    for (uint32_t k = 0; k < d.count && !plan; ++k)
        if (matches(d.cache[k].plan)) { entry = &d.cache[k]; plan = entry->plan; }
    if (plan) {
        TESSEL_TRY(attach(plan, message));
        if (held) --held->users;
        held = entry;
        if (entry) { entry->last_used = ++d.tick; ++entry->users; }
        return Status::Ok;
    }
    // Room for a new plan: a free entry, or the least recently used one no other request
    // holds (this request's own is fine: it moves to the new plan).
    detail::Specialization* room = d.count < d.capacity ? &d.cache[d.count] : nullptr;
    if (!room)
        for (uint32_t k = 0; k < d.count; ++k) {
            detail::Specialization* e = &d.cache[k];
            bool free = e->users == 0 || (e == held && e->users == 1);
            if (free && (!room || e->last_used < room->last_used)) room = e;
        }
    if (!room) {
        detail::print(message, kErrorMessageBytes, "every one of the %u cached input-shape plans is held by a request (raise SHAPE_CACHE_SIZE)", d.capacity);
        return Status::LimitExceeded;
    }
    if (pm.input_count() > detail::kMaxSymbolicInputs) {
        detail::print(message, kErrorMessageBytes, "a model with symbolic dims has at most %u inputs", detail::kMaxSymbolicInputs);
        return Status::LimitExceeded;
    }
    InputShape shapes[detail::kMaxSymbolicInputs];
    for (uint32_t i = 0; i < pm.input_count(); ++i) shapes[i] = InputShape{pm.input(i).name, inputs[i].shape()};
    CompiledModel::Impl* fresh = nullptr;
    char error[kErrorMessageBytes];
    Status s = detail::CompileJob::specialize(d, *owner, Span<const InputShape>(shapes, pm.input_count()), &fresh, error);
    if (s == Status::Ok) {
        s = attach(fresh, error);
        if (s != Status::Ok) destroy(fresh);
    }
    if (s != Status::Ok) {
        char given[512];
        size_t at = 0;
        for (uint32_t i = 0; i < pm.input_count() && at < sizeof given; ++i) {
            char one[128];
            detail::describe(inputs[i].desc(), one, sizeof one);
            at += (size_t)std::snprintf(given + at, sizeof given - at, "%s%.*s=%s", i ? " " : "", (int)pm.input(i).name.size,
                                        pm.input(i).name.data, one);
        }
        detail::print(message, kErrorMessageBytes, "the model cannot take the input shapes %s: %s", given, error);
        return s;
    }
    if (room == &d.cache[d.count]) ++d.count;
    else destroy(room->plan);
    if (held && held != room) --held->users;
    *room = detail::Specialization{fresh, ++d.tick, 1};
    held = room;
    return Status::Ok;
}

Status InferRequest::infer() {
    if (!impl_) return Status::NotFinalized;
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        if (impl_->busy) {
            std::snprintf(error_, sizeof error_, "infer: the request is running (start_async); wait() first");
            return Status::InvalidArgument;
        }
    }
    if (impl_->owner->dynamic) {
        Status shaped = impl_->follow_input_shapes(error_);
        if (shaped != Status::Ok) return shaped;
    }
    Status s = impl_->run();
    if (s != Status::Ok) std::snprintf(error_, sizeof error_, "%s", impl_->error);
    return s;
}

Status InferRequest::start_async() {
    if (!impl_) return Status::NotFinalized;
    Impl* r = impl_;
    std::unique_lock<std::mutex> lock(r->mutex);
    if (r->busy) {
        std::snprintf(error_, sizeof error_, "start_async: the request is running; wait() first");
        return Status::InvalidArgument;
    }
    if (r->owner->dynamic) TESSEL_TRY(r->follow_input_shapes(error_));
    if (!r->started) {   // the worker is created once, on the first start_async
        r->worker = std::thread([r] {
            std::unique_lock<std::mutex> guard(r->mutex);
            for (;;) {
                r->wake.wait(guard, [r] { return r->job || r->quit; });
                if (r->quit) return;
                r->job = false;
                guard.unlock();
                Status s = r->run();
                guard.lock();
                r->async_status = s;
                r->busy = false;
                r->done.notify_all();
            }
        });
        r->started = true;
    }
    r->busy = true;
    r->job = true;
    lock.unlock();
    r->wake.notify_all();
    return Status::Ok;
}

Status InferRequest::wait() {
    if (!impl_) return Status::NotFinalized;
    std::unique_lock<std::mutex> lock(impl_->mutex);
    impl_->done.wait(lock, [this] { return !impl_->busy; });
    Status s = impl_->async_status;
    impl_->async_status = Status::Ok;
    if (s != Status::Ok) std::snprintf(error_, sizeof error_, "%s", impl_->error);
    return s;
}

Span<const ProfileEntry> InferRequest::profiling_info() const {
    return impl_ ? Span<const ProfileEntry>(impl_->profile, impl_->profile_count) : Span<const ProfileEntry>();
}

// >>blob format
// Blob: "TESSELCM", u32 format version, u32 zero, u64 payload bytes, u64 FNV-1a of the
// payload; then the payload: device string, every config key of the listed devices, the
// prepared model (nodes, attributes, constants 64-byte aligned), the partition (device and
// node ids per subgraph) and each subgraph's device payload. Little-endian. An element type is
// its ElementType number; types are only appended, so version 1 still reads every older blob
// and an older reader refuses a blob holding a newer type (a bad desc). A model compiled with
// free input dims is version 2: after the payloads, the model it was compiled from, each
// input's desc (free dims -1), the partition algorithm, HETERO_MIN_SUBGRAPH and
// SHAPE_CACHE_SIZE, so the import plans other input shapes as the compile did.
namespace detail {
constexpr uint32_t kBlobVersion = 1;
constexpr uint32_t kBlobVersionSymbolic = 2;
constexpr size_t kBlobHeader = 32;

struct BlobWriter {
    WriteFn write = nullptr;   // nullptr: only count and hash
    void* user = nullptr;
    uint64_t position = 0;
    uint64_t hash = kHashSeed;
    void bytes(const void* data, size_t size) {
        hash = hash_bytes(data, size, hash);
        if (write && size) write(user, static_cast<const char*>(data), size);
        position += size;
    }
    void u8(uint8_t v) { bytes(&v, 1); }
    void u32(uint32_t v) { unsigned char b[4]; for (int i = 0; i < 4; ++i) b[i] = (unsigned char)(v >> (8 * i)); bytes(b, 4); }
    void u64(uint64_t v) { unsigned char b[8]; for (int i = 0; i < 8; ++i) b[i] = (unsigned char)(v >> (8 * i)); bytes(b, 8); }
    void str(StringView s) { u32((uint32_t)s.size); bytes(s.data, s.size); }
    void align(size_t a) { static const char zeros[64] = {}; while (position % a) bytes(zeros, (size_t)(a - position % a) < 64 ? (size_t)(a - position % a) : 64); }
    void desc(const TensorDesc& d) { u8((uint8_t)d.type); u8(d.rank); for (uint32_t i = 0; i < d.rank; ++i) u64((uint64_t)d.dims[i]); }
};

struct BlobReader {
    const unsigned char* data;
    size_t size;
    size_t position = 0;
    bool ok = true;
    bool need(size_t n) { if (!ok || n > size - position) ok = false; return ok; }
    uint8_t u8() { if (!need(1)) return 0; return data[position++]; }
    uint32_t u32() { if (!need(4)) return 0; uint32_t v = 0; for (int i = 0; i < 4; ++i) v |= (uint32_t)data[position + i] << (8 * i); position += 4; return v; }
    uint64_t u64() { if (!need(8)) return 0; uint64_t v = 0; for (int i = 0; i < 8; ++i) v |= (uint64_t)data[position + i] << (8 * i); position += 8; return v; }
    StringView str() { uint32_t n = u32(); if (!need(n)) return StringView(); StringView s((const char*)data + position, n); position += n; return s; }
    const void* bytes(size_t n) { if (!need(n)) return nullptr; const void* p = data + position; position += n; return p; }
    void align(size_t a) { size_t pad = (a - position % a) % a; if (need(pad)) position += pad; }
    bool desc(TensorDesc* d) {
        d->type = (ElementType)u8();
        d->rank = u8();
        if ((uint8_t)d->type > (uint8_t)kLastElementType || d->rank > kMaxRank) {
            *d = TensorDesc();   // callers may still read the desc: never a rank past dims
            ok = false;
            return false;
        }
        for (uint32_t i = 0; i < d->rank; ++i) d->dims[i] = (int64_t)u64();
        return ok;
    }
};

// Nodes go in the prepared model's layout (read_model needs it): Parameters in interface
// order, the rest in topological order, Results in interface order. A prepared model is in
// that order already; an If/Loop/Scan body (written with its node) need not be.
inline void write_model(BlobWriter& w, const Model& m) {
    const Graph& g = m.graph;
    uint32_t count_nodes = g.node_count();
    Arena scratch;
    NodeId* order = scratch.allocate_array<NodeId>(count_nodes + 1);
    NodeId* position = scratch.allocate_array<NodeId>(count_nodes + 1);
    uint32_t placed = 0;
    if (order && position) {
        for (uint32_t i = 0; i < m.input_count(); ++i) order[placed++] = m.input(i).node;
        for (NodeId v : g.topological_order())
            if (g.node(v).op != StringView("Parameter") && g.node(v).op != StringView("Result") && placed < count_nodes) order[placed++] = v;
        for (uint32_t i = 0; i < m.output_count() && placed < count_nodes; ++i) order[placed++] = m.output(i).node;
    }
    if (placed != count_nodes) {   // out of memory: id order
        order = nullptr;
        position = nullptr;
    } else {
        for (uint32_t k = 0; k < count_nodes; ++k) position[order[k]] = k;
    }
    w.u32(m.opset);
    w.u32(g.node_count());
    for (NodeId k = 0; k < g.node_count(); ++k) {
        NodeId v = order ? order[k] : k;
        const Node& n = g.node(v);
        w.str(n.name);
        w.str(n.op);
        w.u32(n.num_inputs);
        for (uint32_t i = 0; i < n.num_inputs; ++i) {
            w.u32(position ? position[n.inputs[i].producer] : n.inputs[i].producer);
            w.u32(n.inputs[i].port);
            w.u8(n.inputs[i].keep_apart);
        }
        w.u32(n.num_outputs);
        for (uint32_t p = 0; p < n.num_outputs; ++p) w.desc(n.outputs ? n.outputs[p] : TensorDesc());
        uint32_t count = 0;
        for (const Attribute* a = n.attributes; a; a = a->next) ++count;
        w.u32(count);
        for (const Attribute* a = n.attributes; a; a = a->next) {
            w.str(a->name);
            w.u8((uint8_t)a->kind);
            switch (a->kind) {
                case AttributeKind::Int: w.u64((uint64_t)a->i); break;
                case AttributeKind::Float: { uint32_t b; std::memcpy(&b, &a->f, 4); w.u32(b); break; }
                case AttributeKind::String: w.str(a->s); break;
                case AttributeKind::Strings: w.u64((uint64_t)a->i); w.str(a->s); break;
                case AttributeKind::Ints: w.u32((uint32_t)a->ints.size); for (int64_t x : a->ints) w.u64((uint64_t)x); break;
                case AttributeKind::Floats:
                    w.u32((uint32_t)a->floats.size);
                    for (float x : a->floats) { uint32_t b; std::memcpy(&b, &x, 4); w.u32(b); }
                    break;
                case AttributeKind::Tensor:
                    w.desc(a->tensor->desc);
                    w.u64(a->tensor->bytes);
                    w.align(64);
                    w.bytes(a->tensor->data, a->tensor->bytes);
                    break;
                case AttributeKind::Graph: {   // the body, whole (bodies nest at most kMaxBodyDepth deep)
                    const Model* body = static_cast<const Model*>(a->body);
                    w.u32(body->outer_inputs);
                    write_model(w, *body);
                    break;
                }
            }
        }
    }
    w.u32(m.output_count());
    for (uint32_t i = 0; i < m.output_count(); ++i) { w.str(m.output(i).name); w.u32(position ? position[m.output(i).node] : m.output(i).node); }
}

inline Status read_model(BlobReader& r, Model* m, char* error) {
    m->opset = r.u32();
    uint32_t count = r.u32();
    if (!r.ok || count > r.size) { print(error, kErrorMessageBytes, "blob: bad node count"); return Status::ParseError; }
    InputRef refs[kMaxNodePorts];
    for (NodeId v = 0; v < count && r.ok; ++v) {
        StringView name = r.str(), op = r.str();
        uint32_t inputs = r.u32();
        if (!r.ok || inputs > kMaxNodePorts) break;
        for (uint32_t i = 0; i < inputs; ++i) {
            uint32_t producer = r.u32(), port = r.u32();
            uint8_t keep = r.u8();
            if (producer >= v) r.ok = false;   // ids are topological in a prepared model
            refs[i] = InputRef::by_id(producer, port, keep != 0);
        }
        uint32_t outputs = r.u32();
        if (!r.ok || outputs > 64) { r.ok = false; break; }
        TensorDesc descs[64];
        for (uint32_t p = 0; p < outputs; ++p) r.desc(&descs[p]);
        if (!r.ok) break;
        NodeId id = kNoNode;
        Status s;
        bool is_constant = op == StringView("Constant") && inputs == 0 && outputs == 1;
        if (op == StringView("Parameter") && inputs == 0 && outputs == 1) s = m->add_input(name, descs[0], &id);
        else if (op == StringView("Result") && inputs == 1 && outputs == 0) s = m->add_output(name, refs[0]), id = v;
        else if (op == StringView("Absent") && inputs == 0) { InputRef a = m->absent(); id = a.producer; s = id == v ? Status::Ok : Status::ParseError; }
        else if (is_constant) s = Status::Ok;   // added with its value below
        else s = m->add_node(op, name, Span<const InputRef>(refs, inputs), outputs, &id);
        if (s != Status::Ok) { print(error, kErrorMessageBytes, "blob: node %u: %s", v, m->last_error()); return s == Status::OutOfMemory ? s : Status::ParseError; }
        uint32_t attributes = r.u32();
        for (uint32_t k = 0; k < attributes && r.ok; ++k) {
            Attribute a;
            a.name = r.str();
            a.kind = (AttributeKind)r.u8();
            switch (a.kind) {
                case AttributeKind::Int: a.i = (int64_t)r.u64(); break;
                case AttributeKind::Float: { uint32_t b = r.u32(); std::memcpy(&a.f, &b, 4); break; }
                case AttributeKind::String: a.s = r.str(); break;
                case AttributeKind::Strings: a.i = (int64_t)r.u64(); a.s = r.str(); break;
                case AttributeKind::Ints: {
                    uint32_t n = r.u32();
                    if (!r.need((size_t)n * 8)) break;
                    int64_t* x = m->arena.allocate_array<int64_t>(n + 1);
                    if (!x) return Status::OutOfMemory;
                    for (uint32_t i = 0; i < n; ++i) x[i] = (int64_t)r.u64();
                    a.ints = Span<const int64_t>(x, n);
                    break;
                }
                case AttributeKind::Floats: {
                    uint32_t n = r.u32();
                    if (!r.need((size_t)n * 4)) break;
                    float* x = m->arena.allocate_array<float>(n + 1);
                    if (!x) return Status::OutOfMemory;
                    for (uint32_t i = 0; i < n; ++i) { uint32_t b = r.u32(); std::memcpy(&x[i], &b, 4); }
                    a.floats = Span<const float>(x, n);
                    break;
                }
                case AttributeKind::Tensor: {
                    ConstTensor* t = m->arena.allocate_array<ConstTensor>(1);
                    if (!t) return Status::OutOfMemory;
                    r.desc(&t->desc);
                    t->bytes = (size_t)r.u64();
                    r.align(64);
                    t->data = r.bytes(t->bytes);
                    uint64_t n = 0;
                    if (!desc_elements(t->desc, &n) || n * element_size(t->desc.type) != t->bytes) r.ok = false;
                    a.tensor = t;
                    break;
                }
                case AttributeKind::Graph: {
                    Model* body = nullptr;
                    Status bs = m->add_body(&body);
                    if (bs != Status::Ok) { print(error, kErrorMessageBytes, "blob: node %u: %s", v, m->last_error()); return bs == Status::OutOfMemory ? bs : Status::ParseError; }
                    body->outer_inputs = r.u32();
                    bs = read_model(r, body, error);
                    if (bs != Status::Ok) return bs;
                    if (body->outer_inputs > body->input_count()) r.ok = false;
                    a.body = body;
                    break;
                }
                default: r.ok = false;
            }
            if (!r.ok) break;
            if (is_constant && a.kind == AttributeKind::Tensor && a.name == StringView("value")) {
                s = m->add_constant(name, a.tensor->desc, a.tensor->data, &id, false);
                if (s != Status::Ok) { print(error, kErrorMessageBytes, "blob: node %u: %s", v, m->last_error()); return Status::ParseError; }
                continue;
            }
            if (id == kNoNode || id != v) { r.ok = false; break; }
            TESSEL_TRY(m->graph.add_attribute(id, a));
        }
        if (!r.ok || id != v) { r.ok = false; break; }
        for (uint32_t p = 0; p < outputs; ++p) {
            s = m->graph.set_output_desc(id, p, descs[p]);
            if (s != Status::Ok) { r.ok = false; break; }
        }
    }
    uint32_t outputs = r.u32();
    for (uint32_t i = 0; i < outputs && r.ok; ++i) {
        StringView name = r.str();
        uint32_t node = r.u32();
        if (!r.ok || node >= m->graph.node_count() || m->find_output(name) != i) r.ok = false;
    }
    if (!r.ok) { print(error, kErrorMessageBytes, "blob: the model section is malformed"); return Status::ParseError; }
    Status s = m->finalize();
    if (s != Status::Ok) { print(error, kErrorMessageBytes, "blob: %s", m->last_error()); return Status::ParseError; }
    return Status::Ok;
}

// What a symbolic blob cannot hold yet: InputValue copies; a model read back needs its node
// ids in topological order and (here) no subgraph bodies.
inline Status check_symbolic_export(const DynamicShapes& d, char* error) {
    const Graph& source = d.source->graph;
    if (d.value_count) {
        print(error, kErrorMessageBytes, "export_model: a model with free input dims and InputValue inputs cannot be exported yet");
        return Status::Unsupported;
    }
    for (NodeId v = 0; v < source.node_count(); ++v) {
        const Node& n = source.node(v);
        for (const Attribute* a = n.attributes; a; a = a->next)
            if (a->kind == AttributeKind::Graph) {
                print(error, kErrorMessageBytes, "export_model: node '%.*s' has a subgraph body (blobs do not hold bodies yet)",
                      (int)n.name.size, n.name.data);
                return Status::Unsupported;
            }
        for (uint32_t i = 0; i < n.num_inputs; ++i)
            if (n.inputs[i].producer >= v) {
                print(error, kErrorMessageBytes, "export_model: the model's node ids are not in topological order ('%.*s')",
                      (int)n.name.size, n.name.data);
                return Status::Unsupported;
            }
    }
    return Status::Ok;
}

inline Status write_blob(const CompiledModel::Impl& m, BlobWriter& w) {
    w.str(StringView(m.device_string));
    w.u32(m.config_count);
    for (uint32_t i = 0; i < m.config_count; ++i) {
        w.str(m.config[i].device->name());
        w.str(StringView(m.config[i].key));
        w.str(m.config[i].value);
    }
    write_model(w, m.prepared.model);
    w.u32(m.subgraph_count);
    for (uint32_t s = 0; s < m.subgraph_count; ++s) {
        w.str(m.subgraph_device[s]->name());
        uint32_t count = 0;
        for (NodeId v = 0; v < m.prepared.model.graph.node_count(); ++v) if (m.subgraph_of[v] == s) ++count;
        w.u32(count);
        for (NodeId v = 0; v < m.prepared.model.graph.node_count(); ++v) if (m.subgraph_of[v] == s) w.u32(v);
    }
    struct Sink { BlobWriter* w; };
    for (uint32_t s = 0; s < m.subgraph_count; ++s) {   // each payload: its size, then its bytes
        BlobWriter counter;
        TESSEL_TRY(m.programs[s]->export_payload([](void* u, const char*, size_t n) { static_cast<BlobWriter*>(u)->position += n; }, &counter));
        w.u64(counter.position);
        Sink sink{&w};
        TESSEL_TRY(m.programs[s]->export_payload([](void* u, const char* d, size_t n) { static_cast<Sink*>(u)->w->bytes(d, n); }, &sink));
    }
    if (const DynamicShapes* d = m.dynamic) {
        write_model(w, *d->source);
        w.u32(d->input_count);
        for (uint32_t i = 0; i < d->input_count; ++i) w.desc(d->inputs[i]);
        w.u8((uint8_t)d->algorithm);
        w.u32(d->min_subgraph);
        w.u32(d->capacity);
    }
    return Status::Ok;
}
}  // namespace detail

// >>blob export
Status CompiledModel::export_model(WriteFn write, void* user) const {
    if (!impl_) return Status::NotFinalized;
    if (!write) return Status::InvalidArgument;
    detail::BlobWriter counter;   // pass 1: size and checksum
    TESSEL_TRY(detail::write_blob(*impl_, counter));
    uint32_t version = detail::kBlobVersion;
    if (impl_->dynamic) {
        version = detail::kBlobVersionSymbolic;
        TESSEL_TRY(detail::check_symbolic_export(*impl_->dynamic, error_));
    }
    unsigned char header[detail::kBlobHeader] = {'T', 'E', 'S', 'S', 'E', 'L', 'C', 'M'};
    for (int i = 0; i < 4; ++i) header[8 + i] = (unsigned char)(version >> (8 * i));
    for (int i = 0; i < 8; ++i) header[16 + i] = (unsigned char)(counter.position >> (8 * i));
    for (int i = 0; i < 8; ++i) header[24 + i] = (unsigned char)(counter.hash >> (8 * i));
    write(user, reinterpret_cast<const char*>(header), sizeof header);
    detail::BlobWriter writer;
    writer.write = write;
    writer.user = user;
    return detail::write_blob(*impl_, writer);
}

// >>blob import
Status Core::import_model(const void* blob, size_t size, CompiledModel* out) {
    if (!impl_) return fail(Status::OutOfMemory, "out of memory");
    if (!out || (!blob && size)) return fail(Status::InvalidArgument, "import_model: null argument");
    destroy(out->impl_);
    out->impl_ = nullptr;
    const unsigned char* b = static_cast<const unsigned char*>(blob);
    if (size < detail::kBlobHeader) return fail(Status::ParseError, "blob: truncated (%zu bytes, the header alone has 32)", size);
    if (std::memcmp(b, "TESSELCM", 8) != 0) return fail(Status::ParseError, "blob: not a Tessel compiled model");
    detail::BlobReader header{b, detail::kBlobHeader};
    header.position = 8;
    uint32_t version = header.u32();
    uint32_t reserved = header.u32();
    uint64_t payload = header.u64(), checksum = header.u64();
    if (version != detail::kBlobVersion && version != detail::kBlobVersionSymbolic)
        return fail(Status::Unsupported, "blob: format version %u (this build reads %u and %u)", version, detail::kBlobVersion,
                    detail::kBlobVersionSymbolic);
    if (reserved != 0) return fail(Status::ParseError, "blob: malformed header");
    if (payload != size - detail::kBlobHeader)
        return fail(Status::ParseError, "blob: %s (%zu payload bytes, the header says %llu)",
                    payload > size - detail::kBlobHeader ? "truncated" : "trailing bytes", size - detail::kBlobHeader,
                    (unsigned long long)payload);
    if (size > limits_.max_file_bytes)
        return fail(Status::LimitExceeded, "blob: %zu bytes (limit %llu)", size, (unsigned long long)limits_.max_file_bytes);
    if (detail::hash_bytes(b + detail::kBlobHeader, (size_t)payload) != checksum)
        return fail(Status::ParseError, "blob: checksum mismatch (the blob is corrupted)");
    std::lock_guard<std::mutex> lock(impl_->compile_mutex);
    CompiledModel::Impl* m = create<CompiledModel::Impl>();
    if (!m) return fail(Status::OutOfMemory, "out of memory");
    void* raw = nullptr;
    void* copy = detail::aligned_block((size_t)payload, &raw);   // constants point into it
    if (!copy) { destroy(m); return fail(Status::OutOfMemory, "out of memory"); }
    m->blob = raw;
    std::memcpy(copy, b + detail::kBlobHeader, (size_t)payload);
    detail::CompileJob job;
    job.core = this;
    job.dynamic_blob = version == detail::kBlobVersionSymbolic;
    Arena scratch;
    Status s = import_job(&job, copy, (size_t)payload, m, &scratch);
    detail::restore(&job);
    if (s != Status::Ok) { destroy(m); return s; }
    out->impl_ = m;
    return Status::Ok;
}

Status Core::import_job(void* job_pointer, const void* payload, size_t size, void* impl, Arena* scratch) {
    detail::CompileJob& job = *static_cast<detail::CompileJob*>(job_pointer);
    CompiledModel::Impl* m = static_cast<CompiledModel::Impl*>(impl);
    detail::BlobReader r{static_cast<const unsigned char*>(payload), size};
    StringView device_string = r.str();
    if (!r.ok) return fail(Status::ParseError, "blob: malformed device list");
    TESSEL_TRY(detail::parse_device_string(device_string, &job));
    detail::print(m->device_string, sizeof m->device_string, "%.*s", (int)device_string.size, device_string.data);
    uint32_t config_count = r.u32();
    for (uint32_t i = 0; i < config_count && r.ok; ++i) {
        StringView device = r.str(), key = r.str(), value = r.str();
        if (!r.ok) break;
        Device* d = this->device(device);
        if (!d) return fail(Status::NotFound, "blob: device %.*s is not registered", (int)device.size, device.data);
        TESSEL_TRY(detail::save_and_set(&job, scratch, d, key, value));
    }
    if (!r.ok) return fail(Status::ParseError, "blob: malformed config");
    m->source = create<Model>();
    if (!m->source) return fail(Status::OutOfMemory, "out of memory");
    char error[kErrorMessageBytes] = {};
    Status s = detail::read_model(r, m->source, error);
    if (s != Status::Ok) return fail(s, "%s", error);
    s = detail_prepare::run(*m->source, Span<const InputShape>(), limits_, detail::lookup_kernel, &job,
                            detail::prepare_threads(&job), &m->prepared, error);
    if (s != Status::Ok) return fail(s, "blob: %s", error);
    const Graph& g = m->prepared.model.graph;
    const Graph& src = m->source->graph;
    uint32_t n = g.node_count();
    uint32_t subgraph_count = r.u32();   // checked before ~Impl may loop over it
    if (!r.ok || subgraph_count == 0 || subgraph_count > n) return fail(Status::ParseError, "blob: bad subgraph count");
    m->subgraph_count = subgraph_count;
    m->subgraph_of = m->arena.allocate_array<uint32_t>(n + 1);
    m->subgraph_device = m->arena.allocate_array<Device*>(m->subgraph_count + 1);
    Span<const NodeId>* members = m->arena.allocate_array<Span<const NodeId>>(m->subgraph_count + 1);
    if (!m->subgraph_of || !m->subgraph_device || !members) return fail(Status::OutOfMemory, "out of memory");
    for (NodeId v = 0; v < n; ++v) m->subgraph_of[v] = detail::kUnplaced;
    for (uint32_t k = 0; k < m->subgraph_count; ++k) {
        StringView device = r.str();
        uint32_t count = r.u32();
        if (!r.ok || count > n) return fail(Status::ParseError, "blob: malformed partition");
        m->subgraph_device[k] = nullptr;
        for (uint32_t d = 0; d < job.count; ++d) if (job.list[d]->name() == device) m->subgraph_device[k] = job.list[d];
        Device* missing = m->subgraph_device[k] ? nullptr : this->device(device);
        if (missing && missing->check_available() != Status::Ok)   // listed, but its driver is not here (HETERO left it out)
            return fail(Status::Unsupported, "blob: subgraph %u runs on device %.*s, which is not available: %s", k, (int)device.size,
                        device.data, missing->last_error());
        if (!m->subgraph_device[k]) return fail(Status::ParseError, "blob: subgraph %u names device %.*s, not in the list", k, (int)device.size, device.data);
        NodeId* nodes = m->arena.allocate_array<NodeId>(count + 1);
        if (!nodes) return fail(Status::OutOfMemory, "out of memory");
        for (uint32_t i = 0; i < count; ++i) {
            uint32_t old = r.u32();
            if (!r.ok || old >= src.node_count()) return fail(Status::ParseError, "blob: malformed partition");
            NodeId v = g.find(src.node(old).name);
            if (v == kNoNode || m->subgraph_of[v] != detail::kUnplaced) return fail(Status::ParseError, "blob: the partition places node %u twice or not at all", old);
            m->subgraph_of[v] = k;
            nodes[i] = v;
        }
        std::sort(nodes, nodes + count);
        members[k] = Span<const NodeId>(nodes, count);
    }
    for (NodeId v = 0; v < n; ++v)
        if (m->subgraph_of[v] == detail::kUnplaced) return fail(Status::ParseError, "blob: the partition leaves node '%.*s' out", (int)g.node(v).name.size, g.node(v).name.data);
    const void** payloads = m->arena.allocate_array<const void*>(m->subgraph_count + 1);
    size_t* sizes = m->arena.allocate_array<size_t>(m->subgraph_count + 1);
    if (!payloads || !sizes) return fail(Status::OutOfMemory, "out of memory");
    for (uint32_t k = 0; k < m->subgraph_count; ++k) {
        uint64_t bytes = r.u64();
        if (!r.ok || bytes > size) return fail(Status::ParseError, "blob: malformed device payload");
        sizes[k] = (size_t)bytes;
        payloads[k] = r.bytes((size_t)bytes);
        if (!r.ok) return fail(Status::ParseError, "blob: malformed device payload");
    }
    detail::DynamicShapes* dynamic = nullptr;
    if (job.dynamic_blob) {   // the symbolic model and how it was compiled
        dynamic = create<detail::DynamicShapes>();
        if (!dynamic) return fail(Status::OutOfMemory, "out of memory");
        m->dynamic = dynamic;
        dynamic->core = this;
        dynamic->owned_source = create<Model>();
        if (!dynamic->owned_source) return fail(Status::OutOfMemory, "out of memory");
        dynamic->source = dynamic->owned_source;
        s = detail::read_model(r, dynamic->owned_source, error);
        if (s != Status::Ok) return fail(s, "%s (the symbolic model)", error);
        uint32_t inputs = r.u32();
        if (!r.ok || inputs != m->prepared.model.input_count()) return fail(Status::ParseError, "blob: malformed symbolic inputs");
        dynamic->inputs = dynamic->arena.allocate_array<TensorDesc>(inputs + 1);
        if (!dynamic->inputs) return fail(Status::OutOfMemory, "out of memory");
        for (uint32_t i = 0; i < inputs; ++i) r.desc(&dynamic->inputs[i]);
        uint8_t algorithm = r.u8();
        dynamic->min_subgraph = r.u32();
        dynamic->capacity = r.u32();
        if (!r.ok || algorithm > (uint8_t)PartitionAlgorithm::Waves || dynamic->capacity == 0 || dynamic->capacity > detail::kMaxShapeCache)
            return fail(Status::ParseError, "blob: malformed symbolic inputs");
        dynamic->algorithm = (PartitionAlgorithm)algorithm;
    }
    if (r.position != size) return fail(Status::ParseError, "blob: %zu bytes after the last section", size - r.position);
    m->device_count = job.count;
    for (uint32_t d = 0; d < job.count; ++d) m->devices[d] = job.list[d];
    s = detail::snapshot_config(&job, m);
    if (s != Status::Ok) return fail(s, "out of memory");
    TESSEL_TRY(detail::finish_compile(&job, m, payloads, sizes, members));
    if (!dynamic) return Status::Ok;
    TensorDesc* saved = dynamic->inputs;   // finish_symbolic derives them from the model; the blob's win
    TESSEL_TRY(detail::finish_symbolic(job, *dynamic->source, Span<const InputShape>(), Span<const InputValue>(), m));
    const Model& pm = m->prepared.model;
    for (uint32_t i = 0; i < dynamic->input_count; ++i) {
        const TensorDesc& plan = m->prepared.value_desc(m->prepared.value_id(pm.input(i).node, 0));
        if (!detail::fits_desc(saved[i], plan)) return fail(Status::ParseError, "blob: symbolic input %u does not fit the plan", i);
        dynamic->inputs[i] = saved[i];
    }
    return Status::Ok;
}

// >>ops
// The reference kernels: shared helpers (broadcasting, the elementwise ops), then the nn ops
// and the tensor ops, one section per op family; the kernel table last.
namespace detail {

// The NumPy broadcast (right-aligned) of two descs: rank and dims; the type is a's. out may be
// a or b. false if they do not broadcast. Every op that broadcasts goes through it.
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

// ONNX's unidirectional broadcast: whether `from` broadcasts to `to` with `to` as the result.
inline bool broadcasts_to(const TensorDesc& from, const TensorDesc& to) {
    TensorDesc joined;
    if (from.rank > to.rank || !broadcast_pair(to, from, &joined)) return false;
    for (int i = 0; i < to.rank; ++i) if (joined.dims[i] != to.dims[i]) return false;
    return true;
}

// The broadcast of several descs (type Undefined). false if they do not broadcast.
inline bool broadcast_descs(const TensorDesc* const* descs, uint32_t count, TensorDesc* out) {
    TensorDesc r;
    for (uint32_t k = 0; k < count; ++k)
        if (!broadcast_pair(r, *descs[k], &r)) return false;
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

// >>elementwise ops
// Elementwise float operations (the snippet ops): the same scalar semantics as the
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
    const TensorDesc* descs[3] = {nullptr, nullptr, nullptr};
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
    if (condition) {
        for_each_broadcast(out, descs, arity, [&](uint64_t e, const int64_t* o) {
            float a[3];
            for (uint32_t i = 0; i < arity; ++i) a[i] = in[i][o[i]];
            a[0] = condition[o[0]] ? 1.0f : 0.0f;
            y[e] = snippet_evaluate(st.op, a, st.alpha, st.beta, st.fused);
        });
        return Status::Ok;
    }
    // Row by row (the last dim), the op dispatched once per row.
    int64_t strides[3][kMaxRank] = {};
    for (uint32_t k = 0; k < arity; ++k) broadcast_strides(*descs[k], out, strides[k]);
    uint64_t total = 0;
    if (!desc_elements(out, &total) || total == 0) return Status::Ok;
    int last = out.rank - 1;
    int64_t n = last >= 0 ? out.dims[last] : 1;
    int64_t index[kMaxRank] = {};
    int64_t offset[3] = {0, 0, 0};
    int64_t inner[3] = {0, 0, 0};
    for (uint32_t k = 0; k < arity; ++k) inner[k] = last >= 0 ? strides[k][last] : 0;
    for (uint64_t row = 0; row * (uint64_t)n < total; ++row) {
        const float* args[3] = {in[0] + offset[0], arity > 1 ? in[1] + offset[1] : nullptr, arity > 2 ? in[2] + offset[2] : nullptr};
        snippet_evaluate_row(st.op, args, inner, y + row * (uint64_t)n, (size_t)n, st.alpha, st.beta, st.fused);
        for (int i = last - 1; i >= 0; --i) {   // next row: odometer over the outer dims
            ++index[i];
            for (uint32_t k = 0; k < arity; ++k) offset[k] += strides[k][i];
            if (index[i] < out.dims[i]) break;
            for (uint32_t k = 0; k < arity; ++k) offset[k] -= strides[k][i] * out.dims[i];
            index[i] = 0;
        }
    }
    return Status::Ok;
}

inline Status prepare_identity(PrepareContext& c) {
    if (c.num_inputs < 1 || !c.has_input(0)) return c.fail(Status::InvalidArgument, "expects one input");
    if (c.node_ref().op == StringView("Dropout") && c.has_input(2)) {
        if (!c.values[2]) return c.fail(Status::Unsupported, "data-dependent shape: input 2 (training_mode)");
        if (c.inputs[2].type != ElementType::Bool) return c.fail(Status::InvalidArgument, "training_mode must be bool");
        // Training mode drops nothing at ratio 0 (output = input, mask all true); other ratios
        // draw random masks, which no two runtimes reproduce alike: refused.
        bool training = *static_cast<const uint8_t*>(c.values[2]) != 0;
        bool zero_ratio = c.has_input(1) && c.values[1] && c.inputs[1].type == ElementType::Float32 &&
                          *static_cast<const float*>(c.values[1]) == 0.0f;
        if (training && !zero_ratio)
            return c.fail(Status::Unsupported, "training mode with a ratio other than a constant 0 (random masks)");
    }
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

// >>nn ops
// Conv, MatMul, Gemm, normalization, pooling, softmax, reductions, Resize; first their shared
// helpers.
namespace detail {

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
    c.parallel_for(slots, body, &job);
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

// >>blocked gemm
// Blocked GEMM: C[m x n] (+)= A[m x k] B[k x n]. A is read through (row, column) strides, so
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

// The CPU device's GEMM steps (cpu_gemm_step): snippets.h's Gemm of the program's target, the
// reference kernel's state for shapes and attributes, and the constant operand packed once
// into the program's arena (one matrix per group or batch matrix, packed_floats apart).
struct CpuGemmState {
    Gemm gemm;
    const void* op = nullptr;
    const float* packed = nullptr;
    size_t packed_floats = 0;
    size_t slot_floats = 0;     // scratch of one thread slot (a multiple of 16: 64-byte aligned)
    uint32_t slots = 1, parts = 1;
    int64_t block = 0;          // Conv: output positions per work unit
};

inline size_t round16(size_t floats) { return (floats + 15) & ~(size_t)15; }

// Node `id`'s input `i` when it is a float Constant (known at compile time), else nullptr.
inline const float* cpu_constant_input(const PreparedModel& model, NodeId id, uint32_t i) {
    const Node& node = model.model.graph.node(id);
    if (i >= node.num_inputs) return nullptr;
    uint32_t value = model.value_id(node.inputs[i].producer, node.inputs[i].port);
    if (model.value_desc(value).type != ElementType::Float32) return nullptr;
    return static_cast<const float*>(model.constant(value));
}

// A CpuGemmState in the program's arena, its Gemm ready; nullptr when the target has no JIT tiles.
inline CpuGemmState* cpu_gemm_state(ReferenceProgram* p, const PreparedModel& model, NodeId id, Isa isa) {
    Gemm gemm;
    if (gemm.init(isa) != Status::Ok || !gemm.jit()) return nullptr;
    CpuGemmState* cs = p->arena.allocate_array<CpuGemmState>(1);
    if (!cs) return nullptr;
    new (cs) CpuGemmState();
    cs->gemm = gemm;
    cs->op = model.kernel_state(id);
    cs->slots = p->threads ? p->threads : 1;
    return cs;
}

// Floats of arena memory for packed matrices (64-byte aligned); nullptr when out of memory.
inline float* cpu_packed_memory(ReferenceProgram* p, size_t floats) {
    return static_cast<float*>(p->arena.allocate(floats * sizeof(float) + 64, 64));
}

// The program's last step runs `run` on `cs`, with its slots' scratch, named gemm:ISA:OP.
inline Status cpu_gemm_use(ReferenceProgram* p, RunFn run, CpuGemmState* cs, StringView op) {
    ProgramStep& step = p->steps_[p->count - 1];
    ReferenceProgram::Unit& unit = p->units[p->count - 1];
    char name[96];
    std::snprintf(name, sizeof name, "gemm:%s:%.*s", isa_name(cs->gemm.isa()), (int)op.size, op.data);
    step.kernel = p->arena.copy_string(StringView(name)).data;
    if (!step.kernel) return Status::OutOfMemory;
    step.scratch_bytes = (size_t)cs->slots * cs->slot_floats * sizeof(float);
    unit.run = run;
    unit.state = cs;
    return Status::Ok;
}

// >>windows
// Window geometry of Conv, ConvTranspose and the pools: always 3 spatial dims, real ones
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

// >>conv
// Conv: per (image, group, block of output positions) an im2col block in the slot's
// scratch, then the blocked GEMM (weights [Mg x Cg*K] times columns [Cg*K x block]). A 1x1
// stride-1 unpadded conv reads its input as the column matrix directly. Depthwise convs (one
// input channel and fewer than 4 maps per group: too few GEMM rows) run a direct loop instead.
struct ConvState {
    Window w;
    int64_t batch, channels, maps, groups, group_channels, group_maps, depth, block;
    uint32_t slots;   // scratch slices prepared (threads at compile time)
    bool direct, depthwise;
};

// Conv's and ConvTranspose's first checks: float X, W (and B), both N x C x spatial; group.
inline Status check_conv_inputs(PrepareContext& c, int64_t* groups) {
    TESSEL_TRY(nn_count(c, 2, 3, 1));
    for (uint32_t i = 0; i < 3; ++i) TESSEL_TRY(nn_float(c, i, i == 2));
    const TensorDesc &x = c.inputs[0], &wd = c.inputs[1];
    if (x.rank < 3 || wd.rank != x.rank)
        return c.fail(Status::InvalidArgument, "X (rank %d) and W (rank %d) must be N x C x spatial", x.rank, wd.rank);
    *groups = c.attribute_int("group", 1);
    if (*groups < 1) return c.fail(Status::InvalidArgument, "group must be positive, is %lld", (long long)*groups);
    return Status::Ok;
}

// The shapes of a Conv of x by weights wd (also the integer Convs'): channels, kernel_shape,
// the window; st and y's dims (y's type is the caller's).
inline Status plan_conv(PrepareContext& c, const TensorDesc& x, const TensorDesc& wd, int64_t groups, ConvState* st,
                        TensorDesc* y_out) {
    int64_t maps = wd.dims[0];
    if (x.dims[1] != wd.dims[1] * groups || maps % groups != 0)
        return c.fail(Status::InvalidArgument, "channels %lld, W %lld x %lld and group %lld do not match",
                      (long long)x.dims[1], (long long)maps, (long long)wd.dims[1], (long long)groups);
    Span<const int64_t> ks = c.attribute_ints("kernel_shape");
    for (size_t i = 0; i < ks.size; ++i)
        if (ks.size != (size_t)x.rank - 2 || ks[i] != wd.dims[2 + i])
            return c.fail(Status::InvalidArgument, "kernel_shape does not match W");
    TESSEL_TRY(parse_window(c, x, wd.dims + 2, false, false, &st->w));
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
    TensorDesc& y = *y_out;
    y = x;
    y.dims[1] = maps;
    for (int i = 0; i < w.spatial; ++i) y.dims[2 + i] = w.out[3 - w.spatial + i];
    return Status::Ok;
}

inline Status prepare_conv(PrepareContext& c) {
    int64_t groups = 1;
    TESSEL_TRY(check_conv_inputs(c, &groups));
    const TensorDesc &x = c.inputs[0], &wd = c.inputs[1];
    if (c.has_input(2) && (c.inputs[2].rank != 1 || c.inputs[2].dims[0] != wd.dims[0]))
        return c.fail(Status::InvalidArgument, "bias must have %lld elements", (long long)wd.dims[0]);
    ConvState* st = nn_state<ConvState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(plan_conv(c, x, wd, groups, st, &c.outputs[0]));
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

// The im2col block of columns [p0, p0 + count) written straight in Gemm's packed-B layout
// (kc blocks of nr-column panels, zero padded), so the GEMM does not copy it again: each row
// is made in `row` (count floats), then dealt out to the panels.
inline void im2col_packed(const Window& w, int64_t channels, const float* x, int64_t p0, int64_t count,
                          const GemmBlocking& blocking, float* row, float* packed) {
    const int64_t nr = blocking.nr, np = (count + nr - 1) / nr * nr, depth = channels * w.kernel_size();
    const int64_t full = count / nr * nr;
    int64_t r = 0;
    for (int64_t ci = 0; ci < channels; ++ci)
        for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0)
            for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1)
                for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2, ++r) {
                    Window one = w;   // one input channel and one tap: im2col makes exactly this row
                    one.kernel[0] = one.kernel[1] = one.kernel[2] = 1;
                    one.pad_begin[0] -= k0 * w.dilation[0];
                    one.pad_begin[1] -= k1 * w.dilation[1];
                    one.pad_begin[2] -= k2 * w.dilation[2];
                    im2col(one, 1, x + ci * w.in_size(), p0, count, row);
                    const int64_t pc = r / blocking.kc * blocking.kc, kc = depth - pc < blocking.kc ? depth - pc : blocking.kc;
                    float* dst = packed + pc * np + (r - pc) * nr;
                    int64_t j = 0;
                    for (; j < full; j += nr, dst += nr * kc) std::memcpy(dst, row + j, (size_t)nr * sizeof(float));
                    if (j < count) {
                        std::memcpy(dst, row + j, (size_t)(count - j) * sizeof(float));
                        std::memset(dst + (count - j), 0, (size_t)(nr - (count - j)) * sizeof(float));
                    }
                }
}

// Conv on the CPU device's JIT GEMM: per (image, group, block of positions) the weights
// (packed at compile time when constant) times the input plane (1x1, stride 1, unpadded) or
// an im2col block sized to stay in L2 (made packed); the bias is written first and added by
// beta = 1.
inline Status run_cpu_conv(const RunContext& c) {
    const CpuGemmState& cs = *static_cast<const CpuGemmState*>(c.state);
    const ConvState& st = *static_cast<const ConvState*>(cs.op);
    const float* x = c.inputs[0].as<float>();
    const float* weights = c.inputs[1].as<float>();
    const float* bias = c.num_inputs > 2 ? c.inputs[2].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    const int64_t in_plane = st.w.in_size(), positions = st.w.out_size();
    if (positions == 0) return Status::Ok;
    const int64_t blocks = (positions + cs.block - 1) / cs.block;
    const GemmBlocking& blocking = cs.gemm.blocking();
    const size_t col_floats = st.direct ? 0 : round16(cs.gemm.packed_b_floats(st.depth, cs.block));
    const size_t row_floats = st.direct ? 0 : round16((size_t)cs.block);
    const uint32_t parts = cs.parts;
    nn_parallel(c, (uint64_t)(st.batch * st.groups * blocks) * parts, [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* col = static_cast<float*>(c.scratch) + slot * cs.slot_floats;
        float* row = col + col_floats;
        float* scratch = row + row_floats;
        for (uint64_t work = begin; work < end; ++work) {
            const uint64_t unit = work / parts;
            int64_t blk = (int64_t)unit % blocks, g = (int64_t)unit / blocks % st.groups;
            int64_t n = (int64_t)unit / blocks / st.groups;
            int64_t p0 = blk * cs.block, count = positions - p0 < cs.block ? positions - p0 : cs.block;
            const float* xg = x + (n * st.channels + g * st.group_channels) * in_plane;
            GemmOperand a, b;
            if (cs.packed) {
                a.data = cs.packed + (size_t)g * cs.packed_floats;
                a.packed = true;
            } else {
                a.data = weights + g * st.group_maps * st.depth;
                a.row = st.depth;
            }
            if (st.direct) {
                b.data = xg + p0;
                b.row = in_plane;
            } else {
                im2col_packed(st.w, st.group_channels, xg, p0, count, blocking, row, col);
                b.data = col;
                b.packed = true;
            }
            float* yg = y + (n * st.maps + g * st.group_maps) * positions + p0;
            if (bias) {   // this part's tiles only: the others may be running already
                int64_t m0, m1, n0, n1;
                cs.gemm.part_range(st.group_maps, count, a.packed, b.packed, (uint32_t)(work % parts), parts, &m0, &m1, &n0, &n1);
                for (int64_t m = m0; m < m1; ++m)
                    std::fill(yg + m * positions + n0, yg + m * positions + n1, bias[g * st.group_maps + m]);
            }
            cs.gemm.run(st.group_maps, count, st.depth, 1.0f, a, b, bias ? 1.0f : 0.0f, yg, positions, scratch,
                        (uint32_t)(work % parts), parts);
        }
    }, cs.slots);
    return Status::Ok;
}

inline Status cpu_conv_step(ReferenceProgram* p, const PreparedModel& model, NodeId id, Isa isa) {
    const ConvState* st = static_cast<const ConvState*>(model.kernel_state(id));
    if (!st || st->depthwise || st->w.out_size() == 0 || st->depth == 0 || st->group_maps == 0) return Status::Ok;
    CpuGemmState* cs = cpu_gemm_state(p, model, id, isa);
    if (!cs) return Status::Ok;
    const Gemm& gemm = cs->gemm;
    if (const float* w = cpu_constant_input(model, id, 1)) {
        cs->packed_floats = round16(gemm.packed_a_floats(st->group_maps, st->depth));
        float* packed = cpu_packed_memory(p, (size_t)st->groups * cs->packed_floats);
        if (!packed) return Status::OutOfMemory;
        for (int64_t g = 0; g < st->groups; ++g)
            gemm.pack_a(st->group_maps, st->depth, w + g * st->group_maps * st->depth, st->depth, 1,
                        packed + (size_t)g * cs->packed_floats);
        cs->packed = packed;
    }
    // Positions per unit: a packed block of B (im2col: all of K; 1x1: one kc block) of half of
    // L2, at least 4 tiles wide (it bounds each slot's scratch too); fewer when the units
    // would not give every thread one.
    const int64_t positions = st->w.out_size(), nr = gemm.blocking().nr;
    const int64_t rows = st->direct && st->depth > gemm.blocking().kc ? gemm.blocking().kc : st->depth;
    int64_t block = (int64_t)(cpu_cache_sizes().l2 / 2 / (uint64_t)(rows * 4)) / nr * nr;
    if (block < 4 * nr) block = 4 * nr;
    const int64_t images = st->batch * st->groups;
    if (images * ((positions + block - 1) / block) < (int64_t)cs->slots) {
        int64_t want = ((int64_t)cs->slots + images - 1) / images;
        block = ((positions + want - 1) / want + nr - 1) / nr * nr;
    }
    if (block > positions) block = positions;
    cs->block = block;
    // Still fewer units than threads (one image, few positions): each unit's GEMM in parts.
    if (images * ((positions + block - 1) / block) < (int64_t)cs->slots) cs->parts = cs->slots;
    cs->slot_floats = (st->direct ? 0 : round16(gemm.packed_b_floats(st->depth, block)) + round16((size_t)block)) +
                      round16(gemm.scratch_floats(st->group_maps, block, st->depth, cs->packed != nullptr, !st->direct));
    return cpu_gemm_use(p, run_cpu_conv, cs, "Conv");
}

// >>conv transpose
// ConvTranspose: per (image, group), blocks of input positions go through the GEMM
// W^T [Mg*K x Cg] times X [Cg x block] into the slot's scratch, then scatter-add (col2im).
struct ConvTransposeState {
    Window w;   // in: X's spatial dims, out: Y's
    int64_t batch, channels, maps, groups, group_channels, group_maps, rows, block;
    uint32_t slots;
};

inline Status prepare_conv_transpose(PrepareContext& c) {
    int64_t groups = 1;
    TESSEL_TRY(check_conv_inputs(c, &groups));
    const TensorDesc &x = c.inputs[0], &wd = c.inputs[1];
    if (x.dims[1] != wd.dims[0] || wd.dims[0] % groups != 0)
        return c.fail(Status::InvalidArgument, "channels %lld, W %lld and group %lld do not match", (long long)x.dims[1],
                      (long long)wd.dims[0], (long long)groups);
    int64_t maps = wd.dims[1] * groups;
    if (c.has_input(2) && (c.inputs[2].rank != 1 || c.inputs[2].dims[0] != maps))
        return c.fail(Status::InvalidArgument, "bias must have %lld elements", (long long)maps);
    ConvTransposeState* st = nn_state<ConvTransposeState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(parse_window(c, x, wd.dims + 2, false, true, &st->w));
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

// Adds the GEMM's rows (map, tap) x input positions [p0, p0 + count) into the output planes yg.
inline void col2im_add(const ConvTransposeState& st, int64_t p0, int64_t count, const float* col, float* yg) {
    const Window& w = st.w;
    const int64_t out_plane = w.out_size(), kernel = w.kernel_size();
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

inline Status run_conv_transpose(const RunContext& c) {
    const ConvTransposeState& st = *static_cast<const ConvTransposeState*>(c.state);
    const Window& w = st.w;
    const float* x = c.inputs[0].as<float>();
    const float* weights = c.inputs[1].as<float>();
    const float* bias = c.num_inputs > 2 ? c.inputs[2].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    int64_t in_plane = w.in_size(), out_plane = w.out_size();
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
                col2im_add(st, p0, count, col, yg);
            }
        }
    }, st.slots);
    return Status::Ok;
}

// ConvTranspose on the CPU device's JIT GEMM: the reference's loop, with W^T packed at
// compile time when constant.
inline Status run_cpu_conv_transpose(const RunContext& c) {
    const CpuGemmState& cs = *static_cast<const CpuGemmState*>(c.state);
    const ConvTransposeState& st = *static_cast<const ConvTransposeState*>(cs.op);
    const Window& w = st.w;
    const float* x = c.inputs[0].as<float>();
    const float* weights = c.inputs[1].as<float>();
    const float* bias = c.num_inputs > 2 ? c.inputs[2].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    const int64_t in_plane = w.in_size(), out_plane = w.out_size();
    const size_t col_floats = round16((size_t)(st.rows * st.block));
    nn_parallel(c, (uint64_t)(st.batch * st.groups), [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* col = static_cast<float*>(c.scratch) + slot * cs.slot_floats;
        float* scratch = col + col_floats;
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t g = (int64_t)unit % st.groups, n = (int64_t)unit / st.groups;
            const float* xg = x + (n * st.channels + g * st.group_channels) * in_plane;
            float* yg = y + (n * st.maps + g * st.group_maps) * out_plane;
            for (int64_t m = 0; m < st.group_maps; ++m)
                std::fill(yg + m * out_plane, yg + (m + 1) * out_plane, bias ? bias[g * st.group_maps + m] : 0.0f);
            GemmOperand a, b;
            if (cs.packed) {
                a.data = cs.packed + (size_t)g * cs.packed_floats;
                a.packed = true;
            } else {   // W is [C, Mg*K] per group: its transpose is read with strides (1, Mg*K)
                a.data = weights + g * st.group_channels * st.rows;
                a.row = 1;
                a.col = st.rows;
            }
            b.row = in_plane;
            for (int64_t p0 = 0; p0 < in_plane; p0 += st.block) {
                int64_t count = in_plane - p0 < st.block ? in_plane - p0 : st.block;
                b.data = xg + p0;
                cs.gemm.run(st.rows, count, st.group_channels, 1.0f, a, b, 0.0f, col, count, scratch);
                col2im_add(st, p0, count, col, yg);
            }
        }
    }, cs.slots);
    return Status::Ok;
}

inline Status cpu_conv_transpose_step(ReferenceProgram* p, const PreparedModel& model, NodeId id, Isa isa) {
    const ConvTransposeState* st = static_cast<const ConvTransposeState*>(model.kernel_state(id));
    if (!st || st->rows == 0 || st->group_channels == 0 || st->w.in_size() == 0 || st->w.out_size() == 0) return Status::Ok;
    CpuGemmState* cs = cpu_gemm_state(p, model, id, isa);
    if (!cs) return Status::Ok;
    const Gemm& gemm = cs->gemm;
    if (const float* w = cpu_constant_input(model, id, 1)) {
        cs->packed_floats = round16(gemm.packed_a_floats(st->rows, st->group_channels));
        float* packed = cpu_packed_memory(p, (size_t)st->groups * cs->packed_floats);
        if (!packed) return Status::OutOfMemory;
        for (int64_t g = 0; g < st->groups; ++g)
            gemm.pack_a(st->rows, st->group_channels, w + g * st->group_channels * st->rows, 1, st->rows,
                        packed + (size_t)g * cs->packed_floats);
        cs->packed = packed;
    }
    if ((int64_t)cs->slots > st->batch * st->groups) cs->slots = (uint32_t)(st->batch * st->groups);
    cs->slot_floats = round16((size_t)(st->rows * st->block)) +
                      round16(gemm.scratch_floats(st->rows, st->block, st->group_channels, cs->packed != nullptr, false));
    return cpu_gemm_use(p, run_cpu_conv_transpose, cs, "ConvTranspose");
}

// >>matmul
// MatMul: NumPy matmul (1-D operands promoted and their unit dim dropped, batch dims
// broadcast). Work units are (batch, block of 16 rows).
struct MatMulState {
    int64_t m, n, k, batch;
    int batch_rank;
    int64_t batch_dims[kMaxRank], a_stride[kMaxRank], b_stride[kMaxRank];  // per batch dim, in elements
};

// The shapes of a NumPy matmul of descs a and b (also the integer MatMuls'): st and y's dims
// (y's type is the caller's).
inline Status plan_matmul(PrepareContext& c, TensorDesc a, TensorDesc b, MatMulState* st, TensorDesc* y_out) {
    if (a.rank < 1 || b.rank < 1) return c.fail(Status::InvalidArgument, "operands must have rank 1 or more");
    bool a_vector = a.rank == 1, b_vector = b.rank == 1;
    if (a_vector) { a.rank = 2; a.dims[1] = a.dims[0]; a.dims[0] = 1; }
    if (b_vector) { b.rank = 2; b.dims[1] = 1; }
    st->m = a.dims[a.rank - 2];
    st->k = a.dims[a.rank - 1];
    st->n = b.dims[b.rank - 1];
    if (b.dims[b.rank - 2] != st->k)
        return c.fail(Status::InvalidArgument, "inner dims differ: %lld and %lld", (long long)st->k,
                      (long long)b.dims[b.rank - 2]);
    TensorDesc ab = a, bb = b, out;
    ab.rank -= 2;
    bb.rank -= 2;
    if (!broadcast_pair(ab, bb, &out)) return c.fail(Status::InvalidArgument, "batch dims do not broadcast");
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
    TensorDesc& y = *y_out;
    y = out;
    if (!a_vector) y.dims[y.rank++] = st->m;
    if (!b_vector) y.dims[y.rank++] = st->n;
    return Status::Ok;
}

inline Status prepare_matmul(PrepareContext& c) {
    TESSEL_TRY(nn_count(c, 2, 2, 1));
    for (uint32_t i = 0; i < 2; ++i) TESSEL_TRY(nn_float(c, i));
    MatMulState* st = nn_state<MatMulState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(plan_matmul(c, c.inputs[0], c.inputs[1], st, &c.outputs[0]));
    c.outputs[0].type = ElementType::Float32;
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

// MatMul on the CPU device's JIT GEMM: per batch matrix (and part of it when there are fewer
// batch matrices than threads), B packed at compile time when constant.
inline Status run_cpu_matmul(const RunContext& c) {
    const CpuGemmState& cs = *static_cast<const CpuGemmState*>(c.state);
    const MatMulState& st = *static_cast<const MatMulState*>(cs.op);
    const float* a = c.inputs[0].as<float>();
    const float* b = c.inputs[1].as<float>();
    float* y = c.outputs[0].as<float>();
    const uint32_t parts = cs.parts;
    nn_parallel(c, (uint64_t)st.batch * parts, [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* scratch = static_cast<float*>(c.scratch) + slot * cs.slot_floats;
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t index = (int64_t)(unit / parts), batch = index;
            int64_t a_offset = 0, b_offset = 0;
            for (int i = st.batch_rank - 1; i >= 0; --i) {  // batch index to operand offsets
                int64_t digit = index % st.batch_dims[i];
                index /= st.batch_dims[i];
                a_offset += digit * st.a_stride[i];
                b_offset += digit * st.b_stride[i];
            }
            GemmOperand oa, ob;
            oa.data = a + a_offset;
            oa.row = st.k;
            if (cs.packed) {
                ob.data = cs.packed + (size_t)(b_offset / (st.k * st.n)) * cs.packed_floats;
                ob.packed = true;
            } else {
                ob.data = b + b_offset;
                ob.row = st.n;
            }
            cs.gemm.run(st.m, st.n, st.k, 1.0f, oa, ob, 0.0f, y + batch * st.m * st.n, st.n, scratch, (uint32_t)(unit % parts),
                        parts);
        }
    }, cs.slots);
    return Status::Ok;
}

// Parts of one product for `threads`: none below ~64K multiply-adds (waking the pool costs more).
inline uint32_t cpu_gemm_parts(int64_t m, int64_t n, int64_t k, int64_t products, uint32_t threads) {
    if (products >= (int64_t)threads || m * n * k < (1 << 16)) return 1;
    return threads;
}

inline Status cpu_matmul_step(ReferenceProgram* p, const PreparedModel& model, NodeId id, Isa isa) {
    const MatMulState* st = static_cast<const MatMulState*>(model.kernel_state(id));
    // n = 1 stays on the reference's dot products (a GEMM tile would use one lane of a vector)
    if (!st || st->m == 0 || st->n <= 1 || st->k == 0 || st->batch == 0) return Status::Ok;
    // A few rows times a B known only at run time: packing B would cost more than the product
    // (the reference streams it once)
    const float* b = cpu_constant_input(model, id, 1);
    if (!b && st->m < 8) return Status::Ok;
    CpuGemmState* cs = cpu_gemm_state(p, model, id, isa);
    if (!cs) return Status::Ok;
    const Gemm& gemm = cs->gemm;
    if (b) {
        const Node& node = model.model.graph.node(id);
        uint64_t elements = 0;
        desc_elements(model.value_desc(model.value_id(node.inputs[1].producer, node.inputs[1].port)), &elements);
        const int64_t matrices = (int64_t)elements / (st->k * st->n);
        cs->packed_floats = round16(gemm.packed_b_floats(st->k, st->n));
        float* packed = cpu_packed_memory(p, (size_t)matrices * cs->packed_floats);
        if (!packed) return Status::OutOfMemory;
        for (int64_t i = 0; i < matrices; ++i)
            gemm.pack_b(st->k, st->n, b + i * st->k * st->n, st->n, 1, packed + (size_t)i * cs->packed_floats);
        cs->packed = packed;
    }
    cs->parts = cpu_gemm_parts(st->m, st->n, st->k, st->batch, cs->slots);
    if ((int64_t)cs->slots > st->batch * cs->parts) cs->slots = (uint32_t)(st->batch * cs->parts);   // scratch for the slots that run
    cs->slot_floats = round16(gemm.scratch_floats(st->m, st->n, st->k, false, cs->packed != nullptr));
    return cpu_gemm_use(p, run_cpu_matmul, cs, "MatMul");
}

// >>gemm
// Gemm: Y = alpha A' B' + beta C. A transposed is read through strides; B transposed is
// packed into scratch first (the GEMM vectorizes along B's rows), except for fewer than 8 rows
// of A: then dot products over B's rows (blocks of 64 columns per work unit).
struct GemmState {
    int64_t m, n, k;
    float alpha, beta;
    bool trans_a, trans_b, has_c, dot;
    int64_t c_row, c_col;   // C's strides broadcast to [m, n]
};

inline Status prepare_gemm(PrepareContext& c) {
    TESSEL_TRY(nn_count(c, 2, 3, 1));
    for (uint32_t i = 0; i < 3; ++i) TESSEL_TRY(nn_float(c, i, i == 2));
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
        if (!broadcasts_to(cd, y))
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

// Gemm on the CPU device's JIT GEMM: Y = C broadcast first, then alpha A' B' + beta Y in
// parts; B' packed at compile time when constant (transposed or not).
inline Status run_cpu_gemm(const RunContext& c) {
    const CpuGemmState& cs = *static_cast<const CpuGemmState*>(c.state);
    const GemmState& st = *static_cast<const GemmState*>(cs.op);
    const float* a = c.inputs[0].as<float>();
    const float* b = c.inputs[1].as<float>();
    const float* bias = st.has_c ? c.inputs[2].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    if (bias)
        for (int64_t i = 0; i < st.m; ++i)
            for (int64_t j = 0; j < st.n; ++j) y[i * st.n + j] = bias[i * st.c_row + j * st.c_col];
    GemmOperand oa, ob;
    oa.data = a;
    oa.row = st.trans_a ? 1 : st.k;
    oa.col = st.trans_a ? st.m : 1;
    if (cs.packed) {
        ob.data = cs.packed;
        ob.packed = true;
    } else {
        ob.data = b;
        ob.row = st.trans_b ? 1 : st.n;
        ob.col = st.trans_b ? st.k : 1;
    }
    const float beta = bias ? st.beta : 0.0f;
    nn_parallel(c, cs.parts, [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* scratch = static_cast<float*>(c.scratch) + slot * cs.slot_floats;
        for (uint64_t part = begin; part < end; ++part)
            cs.gemm.run(st.m, st.n, st.k, st.alpha, oa, ob, beta, y, st.n, scratch, (uint32_t)part, cs.parts);
    }, cs.slots);
    return Status::Ok;
}

inline Status cpu_gemm_op_step(ReferenceProgram* p, const PreparedModel& model, NodeId id, Isa isa) {
    const GemmState* st = static_cast<const GemmState*>(model.kernel_state(id));
    // beta 0 with a C: the reference's beta * C keeps C's NaNs, which a GEMM that does not read C would not
    if (!st || st->m == 0 || st->n == 0 || (st->has_c && st->beta == 0.0f)) return Status::Ok;
    // the reference's dot products stream a run-time B once (a fully connected layer at batch 1)
    const float* b = cpu_constant_input(model, id, 1);
    if (!b && st->dot) return Status::Ok;
    CpuGemmState* cs = cpu_gemm_state(p, model, id, isa);
    if (!cs) return Status::Ok;
    const Gemm& gemm = cs->gemm;
    if (b) {
        cs->packed_floats = round16(gemm.packed_b_floats(st->k, st->n));
        float* packed = cpu_packed_memory(p, cs->packed_floats);
        if (!packed) return Status::OutOfMemory;
        gemm.pack_b(st->k, st->n, b, st->trans_b ? 1 : st->n, st->trans_b ? st->k : 1, packed);
        cs->packed = packed;
    }
    cs->parts = cpu_gemm_parts(st->m, st->n, st->k, 1, cs->slots);
    cs->slots = cs->parts;
    cs->slot_floats = round16(gemm.scratch_floats(st->m, st->n, st->k, false, cs->packed != nullptr));
    return cpu_gemm_use(p, run_cpu_gemm, cs, "Gemm");
}

inline Status cpu_gemm_step(ReferenceProgram* p, const PreparedModel& model, NodeId id, Isa isa) {
    StringView op = model.model.graph.node(id).op;
    if (op == StringView("Conv")) return cpu_conv_step(p, model, id, isa);
    if (op == StringView("ConvTranspose")) return cpu_conv_transpose_step(p, model, id, isa);
    if (op == StringView("MatMul")) return cpu_matmul_step(p, model, id, isa);
    if (op == StringView("Gemm")) return cpu_gemm_op_step(p, model, id, isa);
    return Status::Ok;
}

}  // namespace detail

namespace detail {

// >>batch normalization
// BatchNormalization: y = (x - mean) / sqrt(var + eps) * scale + B per channel.
struct NormState {
    float epsilon;
    int64_t outer, channels, inner;   // BatchNorm/InstanceNorm: N, C, spatial; LayerNorm: rows, -, row size
    bool training = false;            // BatchNorm training mode: the batch's statistics
    float momentum = 0.9f;
};

// BatchNormalization and InstanceNormalization: X of rank >= min_rank, inputs 1.. one value
// per channel (dim 1), output in place over X.
inline Status prepare_channel_norm(PrepareContext& c, uint32_t inputs, uint32_t min_rank, const char* rank_message,
                                   NormState** state = nullptr) {
    const TensorDesc& x = c.inputs[0];
    if (x.rank < min_rank) return c.fail(Status::InvalidArgument, "%s", rank_message);
    for (uint32_t i = 1; i < inputs; ++i)
        if (c.inputs[i].rank != 1 || c.inputs[i].dims[0] != x.dims[1])
            return c.fail(Status::InvalidArgument, "input %u must have %lld elements", i, (long long)x.dims[1]);
    NormState* st = nn_state<NormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = NormState{c.attribute_float("epsilon", 1e-5f), x.dims[0], x.dims[1], nn_product(x, 2, x.rank)};
    if (state) *state = st;
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}

// Training mode (opset 14+): normalizes with the batch's mean and population variance per
// channel; outputs 1 and 2 are the running statistics, input * momentum + batch * (1 - momentum).
inline Status prepare_batch_norm(PrepareContext& c) {
    TESSEL_TRY(nn_count(c, 5, 5, 5));
    for (uint32_t i = 0; i < 5; ++i) TESSEL_TRY(nn_float(c, i));
    bool training = c.opset >= 14 && c.attribute_int("training_mode", 0) != 0;
    if (c.opset < 14 && c.num_outputs > 1)
        return c.fail(Status::Unsupported, "training outputs before opset 14 (mean, var, saved_mean, saved_var)");
    if (c.opset >= 14 && c.num_outputs > 1 && !training)
        return c.fail(Status::InvalidArgument, "running_mean and running_var outputs need training_mode = 1");
    if (c.num_outputs > 3) return c.fail(Status::InvalidArgument, "at most 3 outputs");
    if (c.opset < 9 && c.attribute_int("spatial", 1) != 1) return c.fail(Status::Unsupported, "spatial=0");
    NormState* st = nullptr;
    TESSEL_TRY(prepare_channel_norm(c, 5, 2, "X must be N x C x ...", &st));
    st->training = training;
    st->momentum = c.attribute_float("momentum", 0.9f);
    for (uint32_t i = 1; i < c.num_outputs; ++i) c.outputs[i] = c.inputs[3];
    return Status::Ok;
}

// The batch's mean and population variance of channel ch (two passes, in double).
inline void channel_moments(const NormState& st, const float* x, int64_t ch, double* mean, double* var) {
    double sum = 0, squares = 0;
    int64_t count = st.outer * st.inner;
    for (int64_t n = 0; n < st.outer; ++n) {
        const float* xp = x + (n * st.channels + ch) * st.inner;
        for (int64_t i = 0; i < st.inner; ++i) sum += xp[i];
    }
    *mean = count ? sum / (double)count : 0.0;
    for (int64_t n = 0; n < st.outer; ++n) {
        const float* xp = x + (n * st.channels + ch) * st.inner;
        for (int64_t i = 0; i < st.inner; ++i) squares += (xp[i] - *mean) * (xp[i] - *mean);
    }
    *var = count ? squares / (double)count : 0.0;
}

inline Status run_batch_norm_training(const RunContext& c) {
    const NormState& st = *static_cast<const NormState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const float *scale = c.inputs[1].as<float>(), *shift = c.inputs[2].as<float>();
    const float *mean = c.inputs[3].as<float>(), *var = c.inputs[4].as<float>();
    float* y = c.outputs[0].as<float>();
    float* running_mean = c.num_outputs > 1 && c.outputs[1].data ? c.outputs[1].as<float>() : nullptr;
    float* running_var = c.num_outputs > 2 && c.outputs[2].data ? c.outputs[2].as<float>() : nullptr;
    nn_parallel(c, (uint64_t)st.channels, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (int64_t ch = (int64_t)begin; ch < (int64_t)end; ++ch) {
            double batch_mean, batch_var;
            channel_moments(st, x, ch, &batch_mean, &batch_var);
            if (running_mean) running_mean[ch] = (float)(mean[ch] * st.momentum + batch_mean * (1.0 - st.momentum));
            if (running_var) running_var[ch] = (float)(var[ch] * st.momentum + batch_var * (1.0 - st.momentum));
            float a = (float)(scale[ch] / std::sqrt(batch_var + st.epsilon)), b = (float)(shift[ch] - batch_mean * a);
            for (int64_t n = 0; n < st.outer; ++n) {
                const float* xp = x + (n * st.channels + ch) * st.inner;
                float* yp = y + (n * st.channels + ch) * st.inner;
                for (int64_t i = 0; i < st.inner; ++i) yp[i] = xp[i] * a + b;
            }
        }
    });
    return Status::Ok;
}

inline Status run_batch_norm(const RunContext& c) {
    const NormState& st = *static_cast<const NormState*>(c.state);
    if (st.training) return run_batch_norm_training(c);
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

// >>instance normalization
// InstanceNormalization: per (n, c) plane normalized, then scale and B per channel.
inline Status prepare_instance_norm(PrepareContext& c) {
    TESSEL_TRY(nn_count(c, 3, 3, 1));
    for (uint32_t i = 0; i < 3; ++i) TESSEL_TRY(nn_float(c, i));
    return prepare_channel_norm(c, 3, 3, "X must be N x C x spatial");
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

// >>layer normalization
// LayerNormalization: rows are the dims from `axis` on; Scale and B broadcast to a row
// (expanded once per run into scratch). Optional outputs Mean and InvStdDev keep X's rank
// with 1s from `axis` on.
struct LayerNormState {
    NormState norm;
    TensorDesc row;   // the normalized shape
};

inline Status prepare_layer_norm(PrepareContext& c) {
    TESSEL_TRY(nn_count(c, 2, 3, 3));
    for (uint32_t i = 0; i < 3; ++i) TESSEL_TRY(nn_float(c, i, i == 2));
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
        if (!broadcasts_to(c.inputs[i], st->row))
            return c.fail(Status::InvalidArgument, "input %u does not broadcast to the normalized shape", i);
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

// >>pooling
// MaxPool and AveragePool over 1-3 spatial dims; per (n, c) plane a direct loop over each
// window's in-bounds taps. MaxPool's optional Indices output is the flat index into X.
struct PoolState {
    Window w;
    int64_t planes;
    bool max, count_include_pad, column_major;   // column_major: Indices with storage_order=1
};

inline Status prepare_pool(PrepareContext& c, bool max) {
    TESSEL_TRY(nn_count(c, 1, 1, max ? 2 : 1));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 3) return c.fail(Status::InvalidArgument, "X must be N x C x spatial");
    Span<const int64_t> kernel = c.attribute_ints("kernel_shape");
    if (kernel.size != (size_t)x.rank - 2)
        return c.fail(Status::InvalidArgument, "kernel_shape must have %d values", x.rank - 2);
    int64_t ceil_mode = c.attribute_int("ceil_mode", 0);
    if (ceil_mode != 0 && ceil_mode != 1) return c.fail(Status::InvalidArgument, "ceil_mode must be 0 or 1");
    PoolState* st = nn_state<PoolState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(parse_window(c, x, kernel.data, ceil_mode != 0, false, &st->w));
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

// >>global pooling
// GlobalAveragePool, GlobalMaxPool: one value per (n, c) plane.
inline Status prepare_global_pool(PrepareContext& c) {
    TESSEL_TRY(nn_count(c, 1, 1, 1));
    TESSEL_TRY(nn_float(c, 0));
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

// >>softmax
// Softmax, LogSoftmax: over `count` elements `inner` apart. Before opset 13 the input is
// coerced to 2-D at axis (everything from axis on is one row); from 13 it is one axis.
struct SoftmaxState {
    int64_t outer, count, inner;
    bool log;
};

inline Status prepare_softmax(PrepareContext& c, bool log) {
    TESSEL_TRY(nn_count(c, 1, 1, 1));
    TESSEL_TRY(nn_float(c, 0));
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

// >>opencl kernels
// The GPU's kernels for single nodes, printed as OpenCL C with the node's geometry (from its
// prepared state) as constants: Conv (direct, any group, 1-3 spatial dims), Gemm, MaxPool and
// AveragePool, GlobalAveragePool and GlobalMaxPool, Softmax and LogSoftmax. One work-item per
// output element (per line for Softmax); sums in float with fma, so results differ from the
// CPU's blocked GEMM by rounding only (the conformance tolerances).
inline bool gpu_node_op(StringView op) {
    return op == StringView("Conv") || op == StringView("Gemm") || op == StringView("MaxPool") || op == StringView("AveragePool") ||
           op == StringView("GlobalAveragePool") || op == StringView("GlobalMaxPool") || op == StringView("Softmax") ||
           op == StringView("LogSoftmax");
}

inline Status gpu_node_kernel(const PreparedModel& model, NodeId id, const char* name, OpenClSource* out, uint64_t* work, uint64_t* grid) {
    grid[0] = grid[1] = grid[2] = 0;   // 0: one dimension of *work items
    const Node& node = model.model.graph.node(id);
    const void* state = model.kernel_state(id);
    if (!state || model.kernel(id) != find_builtin_kernel(node.op)) return Status::Unsupported;
    auto ll = [](int64_t v) { return (long long)v; };
    if (node.op == StringView("Conv")) {
        const ConvState& st = *static_cast<const ConvState*>(state);
        const Window& w = st.w;
        bool bias = node.num_inputs > 2 && node.inputs[2].producer != kNoNode &&
                    !(model.model.graph.node(node.inputs[2].producer).op == StringView("Absent"));
        // Work-items: output position (dim 0, so neighbours share the map and its weights),
        // output map, image. int offsets: a tensor has fewer than 2^31 elements (Limits).
        grid[0] = (uint64_t)w.out_size();
        grid[1] = (uint64_t)st.maps;
        grid[2] = (uint64_t)st.batch;
        *work = grid[0] * grid[1] * grid[2];
        out->append("__kernel void %s(__global const float* x, __global const float* w, %s__global float* y) {\n", name,
                    bias ? "__global const float* b, " : "");
        out->append("    int o = get_global_id(0), m = get_global_id(1), n = get_global_id(2);\n    if (o >= %d) return;\n", (int)w.out_size());
        out->append("    int o0 = o / %d, o1 = o / %d %% %d, o2 = o %% %d;\n", (int)(w.out[1] * w.out[2]), (int)w.out[2], (int)w.out[1], (int)w.out[2]);
        out->append("    int i0 = o0 * %d - %d, i1 = o1 * %d - %d, i2 = o2 * %d - %d;\n", (int)w.stride[0], (int)w.pad_begin[0],
                    (int)w.stride[1], (int)w.pad_begin[1], (int)w.stride[2], (int)w.pad_begin[2]);
        out->append("    float acc = 0.0f;\n");
        out->append("    __global const float* xp = x + (n * %d + m / %d * %d) * %d;\n", (int)st.channels, (int)st.group_maps, (int)st.group_channels,
                    (int)w.in_size());
        out->append("    __global const float* wp = w + m * %d;\n", (int)(st.group_channels * w.kernel_size()));
        if (w.kernel_size() == 1) {   // 1x1: one tap per channel
            out->append("    int at = (i0 * %d + i1) * %d + i2;\n", (int)w.in[1], (int)w.in[2]);
            out->append("    bool inside = i0 >= 0 && i0 < %d && i1 >= 0 && i1 < %d && i2 >= 0 && i2 < %d;\n", (int)w.in[0], (int)w.in[1], (int)w.in[2]);
            out->append("    if (inside) for (int c = 0; c < %d; ++c) acc = fma(xp[c * %d + at], wp[c], acc);\n", (int)st.group_channels, (int)w.in_size());
        } else {
            out->append("    for (int c = 0; c < %d; ++c, xp += %d, wp += %d) {\n", (int)st.group_channels, (int)w.in_size(), (int)w.kernel_size());
            out->append("        for (int k0 = 0; k0 < %d; ++k0) {\n            int a0 = i0 + k0 * %d;\n            if (a0 < 0 || a0 >= %d) continue;\n",
                        (int)w.kernel[0], (int)w.dilation[0], (int)w.in[0]);
            out->append("            for (int k1 = 0; k1 < %d; ++k1) {\n                int a1 = i1 + k1 * %d;\n                if (a1 < 0 || a1 >= %d) continue;\n",
                        (int)w.kernel[1], (int)w.dilation[1], (int)w.in[1]);
            out->append("                for (int k2 = 0; k2 < %d; ++k2) {\n                    int a2 = i2 + k2 * %d;\n"
                        "                    if (a2 < 0 || a2 >= %d) continue;\n",
                        (int)w.kernel[2], (int)w.dilation[2], (int)w.in[2]);
            out->append("                    acc = fma(xp[(a0 * %d + a1) * %d + a2], wp[(k0 * %d + k1) * %d + k2], acc);\n", (int)w.in[1], (int)w.in[2],
                        (int)w.kernel[1], (int)w.kernel[2]);
            out->append("                }\n            }\n        }\n    }\n");
        }
        out->append("    y[(n * %d + m) * %d + o] = acc%s;\n}\n", (int)st.maps, (int)w.out_size(), bias ? " + b[m]" : "");
        return Status::Ok;
    }
    if (node.op == StringView("Gemm")) {
        const GemmState& st = *static_cast<const GemmState*>(state);
        *work = (uint64_t)(st.m * st.n);
        out->append("__kernel void %s(__global const float* a, __global const float* b, %s__global float* y) {\n", name,
                    st.has_c ? "__global const float* c, " : "");
        out->append("    long g = get_global_id(0);\n    if (g >= %lldl) return;\n    long i = g / %lldl, j = g %% %lldl;\n    float acc = 0.0f;\n",
                    ll((int64_t)*work), ll(st.n), ll(st.n));
        char a_at[64], b_at[64];
        if (st.trans_a) std::snprintf(a_at, sizeof a_at, "k * %lldl + i", ll(st.m));
        else std::snprintf(a_at, sizeof a_at, "i * %lldl + k", ll(st.k));
        if (st.trans_b) std::snprintf(b_at, sizeof b_at, "j * %lldl + k", ll(st.k));
        else std::snprintf(b_at, sizeof b_at, "k * %lldl + j", ll(st.n));
        out->append("    for (long k = 0; k < %lldl; ++k) acc = fma(a[%s], b[%s], acc);\n", ll(st.k), a_at, b_at);
        out->append("    float v = (float)%.17g * acc;\n", (double)st.alpha);
        if (st.has_c) out->append("    v += (float)%.17g * c[i * %lldl + j * %lldl];\n", (double)st.beta, ll(st.c_row), ll(st.c_col));
        out->append("    y[g] = v;\n}\n");
        return Status::Ok;
    }
    if (node.op == StringView("MaxPool") || node.op == StringView("AveragePool")) {
        const PoolState& st = *static_cast<const PoolState*>(state);
        const Window& w = st.w;
        if (node.num_outputs != 1) return Status::Unsupported;
        *work = (uint64_t)(st.planes * w.out_size());
        out->append("__kernel void %s(__global const float* x, __global float* y) {\n", name);
        out->append("    long g = get_global_id(0);\n    if (g >= %lldl) return;\n", ll((int64_t)*work));
        out->append("    long o = g %% %lldl;\n    __global const float* xp = x + g / %lldl * %lldl;\n", ll(w.out_size()), ll(w.out_size()), ll(w.in_size()));
        out->append("    long at[3] = {o / %lldl, o / %lldl %% %lldl, o %% %lldl};\n", ll(w.out[1] * w.out[2]), ll(w.out[2]), ll(w.out[1]), ll(w.out[2]));
        out->append("    const long in[3] = {%lldl, %lldl, %lldl}, taps[3] = {%lldl, %lldl, %lldl}, stride[3] = {%lldl, %lldl, %lldl};\n",
                    ll(w.in[0]), ll(w.in[1]), ll(w.in[2]), ll(w.kernel[0]), ll(w.kernel[1]), ll(w.kernel[2]), ll(w.stride[0]), ll(w.stride[1]),
                    ll(w.stride[2]));
        out->append("    const long dilation[3] = {%lldl, %lldl, %lldl}, pad_begin[3] = {%lldl, %lldl, %lldl}, pad_end[3] = {%lldl, %lldl, %lldl};\n",
                    ll(w.dilation[0]), ll(w.dilation[1]), ll(w.dilation[2]), ll(w.pad_begin[0]), ll(w.pad_begin[1]), ll(w.pad_begin[2]),
                    ll(w.pad_end[0]), ll(w.pad_end[1]), ll(w.pad_end[2]));
        // The reference's walk: valid taps per dim, the padded count for count_include_pad.
        out->append("    long start[3], first[3], last[3], padded = 1;\n"
                    "    for (int d = 0; d < 3; ++d) {\n"
                    "        start[d] = at[d] * stride[d] - pad_begin[d];\n"
                    "        long f = 0, l = taps[d], inside = 0;\n"
                    "        while (f < l && start[d] + f * dilation[d] < 0) ++f;\n"
                    "        while (l > f && start[d] + (l - 1) * dilation[d] >= in[d]) --l;\n"
                    "        for (long k = 0; k < taps[d]; ++k) inside += start[d] + k * dilation[d] < in[d] + pad_end[d];\n"
                    "        first[d] = f; last[d] = l; padded *= inside;\n"
                    "    }\n"
                    "    float best = -INFINITY, sum = 0.0f;\n    long count = 0;\n"
                    "    for (long k0 = first[0]; k0 < last[0]; ++k0)\n"
                    "        for (long k1 = first[1]; k1 < last[1]; ++k1) {\n"
                    "            long row = ((start[0] + k0 * dilation[0]) * in[1] + start[1] + k1 * dilation[1]) * in[2];\n"
                    "            for (long k2 = first[2]; k2 < last[2]; ++k2) {\n"
                    "                float v = xp[row + start[2] + k2 * dilation[2]];\n"
                    "                if (v > best || count == 0) best = v;\n"
                    "                sum += v;\n                ++count;\n"
                    "            }\n        }\n");
        if (st.max) out->append("    y[g] = best;\n}\n");
        else out->append("    long divisor = %s;\n    y[g] = divisor ? sum / (float)divisor : 0.0f;\n}\n", st.count_include_pad ? "padded" : "count");
        return Status::Ok;
    }
    if (node.op == StringView("GlobalAveragePool") || node.op == StringView("GlobalMaxPool")) {
        const NormState& st = *static_cast<const NormState*>(state);
        bool max = node.op == StringView("GlobalMaxPool");
        *work = (uint64_t)st.outer;
        out->append("__kernel void %s(__global const float* x, __global float* y) {\n", name);
        out->append("    long g = get_global_id(0);\n    if (g >= %lldl) return;\n    __global const float* xp = x + g * %lldl;\n", ll(st.outer), ll(st.inner));
        out->append("    float acc = %s;\n    for (long i = 0; i < %lldl; ++i) acc = %s;\n", max ? "-INFINITY" : "0.0f", ll(st.inner),
                    max ? "xp[i] > acc ? xp[i] : acc" : "acc + xp[i]");
        if (max) out->append("    y[g] = acc;\n}\n");
        else out->append("    y[g] = acc / (float)%lld;\n}\n", ll(st.inner));
        return Status::Ok;
    }
    if (node.op == StringView("Softmax") || node.op == StringView("LogSoftmax")) {
        const SoftmaxState& st = *static_cast<const SoftmaxState*>(state);
        *work = (uint64_t)(st.outer * st.inner);
        // In place (y may be x): each work-item reads its line before it writes it.
        out->append("__kernel void %s(__global const float* x, __global float* y) {\n", name);
        out->append("    long line = get_global_id(0);\n    if (line >= %lldl) return;\n", ll((int64_t)*work));
        out->append("    long base = line / %lldl * %lldl + line %% %lldl;\n", ll(st.inner), ll(st.count * st.inner), ll(st.inner));
        out->append("    float top = -INFINITY, sum = 0.0f;\n"
                    "    for (long i = 0; i < %lldl; ++i) top = x[base + i * %lldl] > top ? x[base + i * %lldl] : top;\n"
                    "    for (long i = 0; i < %lldl; ++i) sum += exp(x[base + i * %lldl] - top);\n",
                    ll(st.count), ll(st.inner), ll(st.inner), ll(st.count), ll(st.inner));
        if (st.log)
            out->append("    float shift = log(sum);\n    for (long i = 0; i < %lldl; ++i) y[base + i * %lldl] = x[base + i * %lldl] - top - shift;\n}\n",
                        ll(st.count), ll(st.inner), ll(st.inner));
        else
            out->append("    float scale = 1.0f / sum;\n    for (long i = 0; i < %lldl; ++i) y[base + i * %lldl] = exp(x[base + i * %lldl] - top) * scale;\n}\n",
                        ll(st.count), ll(st.inner), ll(st.inner));
        return Status::Ok;
    }
    return Status::Unsupported;
}

}  // namespace detail

namespace detail {

// >>reductions
// ReduceMean/Sum/Max/Min/Prod/L2: the output (kept dims as 1) is initialized with the
// identity, then X is walked once in row-major order, each element folded into the output
// element it broadcasts from (stride 0 along reduced dims).
enum class ReduceKind : uint8_t { Mean, Sum, Max, Min, Prod, L2, SumSquare, L1, LogSum, LogSumExp };   // from SumSquare: >>more reductions

struct ReduceState {
    ReduceKind kind;
    TensorDesc kept;     // output shape with reduced dims as 1
    int64_t count;       // elements folded into each output
    bool copy;           // noop_with_empty_axes and no axes: Identity
};

inline Status prepare_reduce(PrepareContext& c, ReduceKind kind) {
    // ReduceSum's axes became an input in opset 13 (the others in 18), with noop_with_empty_axes
    bool axes_input = c.opset >= (kind == ReduceKind::Sum ? 13u : 18u);
    TESSEL_TRY(nn_count(c, 1, axes_input ? 2 : 1, 1));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    const int64_t* axes = nullptr;
    int64_t axis_count = 0;
    if (axes_input) {
        TESSEL_TRY(nn_int64_values(c, 1, &axes, &axis_count));
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
    st->copy = axes_input && axis_count == 0 && c.attribute_int("noop_with_empty_axes", 0) != 0;
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

// >>argmax
// ArgMax, ArgMin: int64 index along axis (first or, with select_last_index, last extremum).
struct ArgState {
    int64_t outer, count, inner;
    bool max, last;
};

inline Status prepare_arg(PrepareContext& c, bool max) {
    TESSEL_TRY(nn_count(c, 1, 1, 1));
    TESSEL_TRY(nn_float(c, 0));
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

// >>resize
// Resize: nearest (any rank), linear or cubic (the last two dims of a 2-D or 4-D input; the
// filters antialiased when downscaling with Resize-18's antialias). Output sizes come from
// compile-time scales or sizes (and roi for tf_crop_and_resize); per-axis source tables
// (index, and for linear the neighbour and weight, or the filter's taps; which outputs
// extrapolate) are built once in prepare.
struct ResizeState {
    bool linear;
    bool filter;                  // cubic, or linear with Resize-18's antialias: taps[d] weights per output
    int rank;
    int64_t in[kMaxRank], out[kMaxRank];
    int64_t* index[kMaxRank];     // nearest: source index; linear: lower neighbour; filter: first tap (may be outside)
    int64_t* upper[kMaxRank];     // linear only
    float* weight[kMaxRank];      // linear: weight of the upper neighbour; filter: taps[d] per output
    int64_t taps[kMaxRank];
    uint8_t* outside[kMaxRank];   // tf_crop_and_resize: the output coordinate lies outside the input (else nullptr)
    float extrapolation;          // the value written there
};

inline Status prepare_resize(PrepareContext& c) {
    if (c.opset < 10) return c.fail(Status::Unsupported, "Resize needs opset 10 or later");
    TESSEL_TRY(nn_count(c, 2, 4, 1));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    int rank = x.rank;
    uint32_t scales_at = c.opset == 10 ? 1 : 2, sizes_at = 3;
    // scales (float) or sizes (int64): exactly one, known at compile time
    bool has_scales = c.has_input(scales_at) && nn_product(c.inputs[scales_at], 0, c.inputs[scales_at].rank) > 0;
    bool has_sizes = c.opset > 10 && c.has_input(sizes_at) && nn_product(c.inputs[sizes_at], 0, c.inputs[sizes_at].rank) > 0;
    if (has_scales == has_sizes) return c.fail(Status::InvalidArgument, "needs exactly one of scales and sizes");
    uint32_t source = has_scales ? scales_at : sizes_at;
    // Resize-18: scales and sizes may cover a subset of the axes; the others keep their size
    int axes[kMaxRank], axis_count = rank;
    bool resized[kMaxRank] = {};
    Span<const int64_t> axes_attribute = c.opset >= 18 ? c.attribute_ints("axes") : Span<const int64_t>();
    if (!axes_attribute.empty()) {
        if (axes_attribute.size > (size_t)rank) return c.fail(Status::InvalidArgument, "%zu axes for rank %d", axes_attribute.size, rank);
        axis_count = (int)axes_attribute.size;
        for (int i = 0; i < axis_count; ++i) {
            if (!nn_axis(axes_attribute[i], rank, &axes[i]))
                return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)axes_attribute[i], rank);
            if (resized[axes[i]]) return c.fail(Status::InvalidArgument, "axis %d is repeated", axes[i]);
            resized[axes[i]] = true;
        }
    } else {
        for (int i = 0; i < rank; ++i) { axes[i] = i; resized[i] = true; }
    }
    const TensorDesc& sd = c.inputs[source];
    if (sd.type != (has_scales ? ElementType::Float32 : ElementType::Int64) || sd.rank != 1 || sd.dims[0] != axis_count)
        return c.fail(Status::InvalidArgument, "%s must be a 1-D %s tensor of %d values", has_scales ? "scales" : "sizes",
                      has_scales ? "float32" : "int64", axis_count);
    if (!c.values || !c.values[source]) return c.fail(Status::Unsupported, "data-dependent shape: %s is not a constant",
                                                      has_scales ? "scales" : "sizes");
    StringView mode = c.attribute_string("mode", "nearest");
    bool linear = mode == StringView("linear"), cubic = mode == StringView("cubic") && c.opset >= 11;
    if (!linear && !cubic && mode != StringView("nearest"))
        return c.fail(Status::Unsupported, "mode '%.*s'", (int)mode.size, mode.data);
    // Resize-10 is Upsample: asymmetric coordinates, nearest rounds down
    StringView transform = c.opset == 10 ? StringView("asymmetric")
                                         : c.attribute_string("coordinate_transformation_mode", "half_pixel");
    StringView rounding = c.opset == 10 ? StringView("floor") : c.attribute_string("nearest_mode", "round_prefer_floor");
    enum { HalfPixel, HalfPixelSymmetric, PytorchHalfPixel, AlignCorners, Asymmetric, CropAndResize } how;
    if (transform == StringView("half_pixel")) how = HalfPixel;
    else if (transform == StringView("half_pixel_symmetric") && c.opset >= 19) how = HalfPixelSymmetric;   // Resize-19
    else if (transform == StringView("pytorch_half_pixel")) how = PytorchHalfPixel;
    else if (transform == StringView("align_corners")) how = AlignCorners;
    else if (transform == StringView("asymmetric")) how = Asymmetric;
    else if (transform == StringView("tf_crop_and_resize") && c.opset >= 11) how = CropAndResize;
    else return c.fail(Status::Unsupported, "coordinate_transformation_mode '%.*s'", (int)transform.size, transform.data);
    enum { PreferFloor, PreferCeil, Floor, Ceil } round;
    if (rounding == StringView("round_prefer_floor")) round = PreferFloor;
    else if (rounding == StringView("round_prefer_ceil")) round = PreferCeil;
    else if (rounding == StringView("floor")) round = Floor;
    else if (rounding == StringView("ceil")) round = Ceil;
    else return c.fail(Status::InvalidArgument, "nearest_mode '%.*s' unknown", (int)rounding.size, rounding.data);
    ResizeState* st = nn_state<ResizeState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->linear = linear || cubic;
    // tf_crop_and_resize: the region [start, end] of each (listed) axis, normalized, from the
    // constant roi; outputs mapped outside the input take extrapolation_value
    double roi_start[kMaxRank], roi_end[kMaxRank];
    for (int d = 0; d < rank; ++d) { roi_start[d] = 0; roi_end[d] = 1; st->outside[d] = nullptr; }
    st->extrapolation = c.attribute_float("extrapolation_value", 0.0f);
    if (how == CropAndResize) {
        const TensorDesc& rd = c.inputs[1];
        if (!c.has_input(1) || rd.rank != 1 || rd.dims[0] != 2 * axis_count)
            return c.fail(Status::InvalidArgument, "roi must be a 1-D tensor of %d values", 2 * axis_count);
        if (rd.type != ElementType::Float32) return c.fail(Status::Unsupported, "roi is %s (float32 expected)", element_type_name(rd.type));
        if (!c.values || !c.values[1]) return c.fail(Status::Unsupported, "data-dependent shape: roi is not a constant");
        const float* roi = static_cast<const float*>(c.values[1]);
        for (int i = 0; i < axis_count; ++i) {
            roi_start[axes[i]] = roi[i];
            roi_end[axes[i]] = roi[i + axis_count];
        }
    }
    st->rank = rank;
    double scales[kMaxRank];
    for (int d = 0; d < rank; ++d) {
        st->in[d] = st->out[d] = x.dims[d];
        scales[d] = 1.0;
    }
    for (int i = 0; i < axis_count; ++i) {
        int d = axes[i];
        if (has_scales) {
            scales[d] = static_cast<const float*>(c.values[source])[i];
            if (!(scales[d] > 0.0)) return c.fail(Status::InvalidArgument, "scales must be positive");
            if (!((double)x.dims[d] * scales[d] < 4294967296.0)) return c.fail(Status::LimitExceeded, "output dim above 2^32");
            st->out[d] = (int64_t)std::floor((double)x.dims[d] * scales[d]);
        } else {
            st->out[d] = static_cast<const int64_t*>(c.values[source])[i];
            if (st->out[d] < 0) return c.fail(Status::InvalidArgument, "sizes must not be negative");
            if (st->out[d] >= 4294967296ll) return c.fail(Status::LimitExceeded, "output dim above 2^32");
            scales[d] = x.dims[d] ? (double)st->out[d] / (double)x.dims[d] : 1.0;
        }
        if (st->out[d] > 0 && st->in[d] == 0) return c.fail(Status::InvalidArgument, "cannot resize an empty dim");
    }
    // Resize-18's keep_aspect_ratio_policy: one scale for every resized axis (the smallest or
    // the largest of sizes / input), output dims rounded half up.
    StringView policy = c.opset >= 18 && has_sizes ? c.attribute_string("keep_aspect_ratio_policy", "stretch") : StringView("stretch");
    bool not_larger = policy == StringView("not_larger"), not_smaller = policy == StringView("not_smaller");
    if (!not_larger && !not_smaller && policy != StringView("stretch"))
        return c.fail(Status::InvalidArgument, "keep_aspect_ratio_policy '%.*s' unknown", (int)policy.size, policy.data);
    if (not_larger || not_smaller) {
        double scale = scales[axes[0]];
        for (int i = 0; i < axis_count; ++i) {
            int d = axes[i];
            if (st->in[d] == 0) return c.fail(Status::InvalidArgument, "keep_aspect_ratio_policy on an empty dim");
            scale = not_larger ? std::min(scale, scales[d]) : std::max(scale, scales[d]);
        }
        for (int i = 0; i < axis_count; ++i) {
            int d = axes[i];
            double size = std::floor(scale * (double)st->in[d] + 0.5);
            if (!(size < 4294967296.0)) return c.fail(Status::LimitExceeded, "output dim above 2^32");
            scales[d] = scale;
            st->out[d] = (int64_t)size;
        }
    }
    // antialias (Resize-18) stretches the linear and cubic filters by 1 / scale when downscaling;
    // nearest ignores it. exclude_outside drops the taps outside the input and renormalizes.
    bool antialias = c.opset >= 18 && (linear || cubic) && c.attribute_int("antialias", 0) != 0;
    bool exclude_outside = cubic && c.attribute_int("exclude_outside", 0) != 0;
    double a = c.attribute_float("cubic_coeff_a", -0.75f);
    st->filter = antialias || cubic;
    if (linear || cubic) {  // over the last two dims only
        if (rank != 2 && rank != 4) return c.fail(Status::Unsupported, "%.*s mode for a rank %d input", (int)mode.size, mode.data, rank);
        if (rank == 4 && (st->out[0] != st->in[0] || st->out[1] != st->in[1]))
            return c.fail(Status::Unsupported, "%.*s mode resizing N or C", (int)mode.size, mode.data);
    }
    uint64_t elements = 1;   // the output's, checked before its tables are allocated
    for (int d = 0; d < rank; ++d) {
        uint64_t n = (uint64_t)st->out[d];
        if (n > c.max_elements || (n && elements > c.max_elements / n))
            return c.fail(Status::LimitExceeded, "the output has more than %llu elements", (unsigned long long)c.max_elements);
        elements *= n;
    }
    for (int d = 0; d < rank; ++d) {
        int64_t n = st->out[d];
        // The filter's taps: the spec's 2 - 2 start from start = floor(-radius / scale) + 1 when
        // antialiased (at most 4 in + 4: a downscaled output has at least one element), else
        // 4 for cubic from start -1.
        double filter_scale = antialias && scales[d] < 1.0 ? scales[d] : 1.0;   // positive when n > 0
        double radius = cubic ? 2.0 : 1.0;
        int64_t start = st->filter && n > 0 ? (int64_t)std::floor(-radius / filter_scale) + 1 : 0;
        st->taps[d] = st->filter ? 2 - 2 * start : 1;
        if (st->taps[d] > 4 * st->in[d] + 4 && n > 0) return c.fail(Status::LimitExceeded, "a filter of %lld taps", (long long)st->taps[d]);
        st->index[d] = c.arena->allocate_array<int64_t>((size_t)n + 1);
        st->upper[d] = c.arena->allocate_array<int64_t>((size_t)n + 1);
        st->weight[d] = c.arena->allocate_array<float>((size_t)(n * st->taps[d]) + 1);
        if (how == CropAndResize) st->outside[d] = c.arena->allocate_array<uint8_t>((size_t)n + 1);
        if (!st->index[d] || !st->upper[d] || !st->weight[d] || (how == CropAndResize && !st->outside[d]))
            return c.fail(Status::OutOfMemory, "out of memory");
        for (int64_t o = 0; o < n; ++o) {
            // The output coordinate in input coordinates. The spec's resized length is in * scale
            // before flooring (align_corners and pytorch_half_pixel see the fraction).
            double scale = scales[d], length = (double)st->in[d] * scale, at;
            switch (how) {
                case HalfPixel: at = ((double)o + 0.5) / scale - 0.5; break;
                case HalfPixelSymmetric: {   // the output's centre on the input's when the size was floored
                    double center = (double)st->in[d] / 2, adjustment = (double)n / length;
                    at = center * (1 - adjustment) + ((double)o + 0.5) / scale - 0.5;
                    break;
                }
                case PytorchHalfPixel: at = length > 1 ? ((double)o + 0.5) / scale - 0.5 : 0.0; break;
                case AlignCorners: at = length == 1 ? 0.0 : (double)o * (double)(st->in[d] - 1) / (length - 1); break;
                case CropAndResize: {
                    double span = (double)(st->in[d] - 1);
                    at = length == 1 ? 0.5 * (roi_start[d] + roi_end[d]) * span
                                     : roi_start[d] * span + (double)o * (roi_end[d] - roi_start[d]) * span / (length - 1);
                    st->outside[d][o] = at < 0 || at > span;
                    break;
                }
                default: at = (double)o / scale; break;
            }
            int64_t last = st->in[d] - 1;
            if (st->filter) {
                // The spec's taps: base + j for j in [start, start + taps), weighted by the triangle
                // or Keys' cubic (coefficient a) at (j - ratio) * scale, normalized when
                // antialiased or excluding the outside; an integer coordinate counts as ratio 1.
                double base = std::floor(at), ratio = at - base;
                if (ratio == 0) { ratio = 1; base -= 1; }
                float* w = st->weight[d] + o * st->taps[d];
                double sum = 0;
                for (int64_t j = 0; j < st->taps[d]; ++j) {
                    double x = std::fabs((double)(start + j) - ratio) * filter_scale, v;
                    if (!cubic) v = 1 - x > 0 ? 1 - x : 0;
                    else if (x <= 1) v = ((a + 2) * x - (a + 3)) * x * x + 1;
                    else if (x < 2) v = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
                    else v = 0;
                    int64_t i = (int64_t)base + start + j;
                    if (exclude_outside && (i < 0 || i > last)) v = 0;
                    w[j] = (float)v;
                    sum += v;
                }
                if (antialias || exclude_outside)
                    for (int64_t j = 0; j < st->taps[d]; ++j) w[j] = sum != 0 ? (float)(w[j] / sum) : 0.0f;
                st->index[d][o] = (int64_t)base + start;
            } else if (linear) {
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
    if (st.filter) {  // planes of [H, W]: every tap pair, indices clamped to the edges
        int h = rank - 2, w = rank - 1;
        int64_t planes = rank == 4 ? st.in[0] * st.in[1] : 1;
        int64_t in_plane = st.in[h] * st.in[w], out_plane = st.out[h] * st.out[w];
        int64_t th = st.taps[h], tw = st.taps[w];
        nn_parallel(c, (uint64_t)planes, [&](uint64_t, uint64_t begin, uint64_t end) {
            for (uint64_t p = begin; p < end; ++p) {
                const float* xp = x + (int64_t)p * in_plane;
                float* yp = y + (int64_t)p * out_plane;
                for (int64_t i = 0; i < st.out[h]; ++i)
                    for (int64_t j = 0; j < st.out[w]; ++j) {
                        if (st.outside[h] && (st.outside[h][i] || st.outside[w][j])) {
                            yp[i * st.out[w] + j] = st.extrapolation;
                            continue;
                        }
                        double acc = 0;
                        for (int64_t a = 0; a < th; ++a) {
                            float wa = st.weight[h][i * th + a];
                            if (wa == 0) continue;
                            int64_t row = st.index[h][i] + a;
                            row = row < 0 ? 0 : row >= st.in[h] ? st.in[h] - 1 : row;
                            double line = 0;
                            for (int64_t b = 0; b < tw; ++b) {
                                int64_t col = st.index[w][j] + b;
                                col = col < 0 ? 0 : col >= st.in[w] ? st.in[w] - 1 : col;
                                line += (double)st.weight[w][j * tw + b] * xp[row * st.in[w] + col];
                            }
                            acc += wa * line;
                        }
                        yp[i * st.out[w] + j] = (float)acc;
                    }
            }
        });
        return Status::Ok;
    }
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
                        if (st.outside[h] && (st.outside[h][i] || st.outside[w][j])) yp[i * st.out[w] + j] = st.extrapolation;
                    }
                }
            }
        });
        return Status::Ok;
    }
    // nearest: walk the output row-major, keeping the input offset of each prefix of dims
    uint64_t total = c.outputs[0].elements();
    if (total == 0) return Status::Ok;
    int64_t in_stride[kMaxRank], at[kMaxRank] = {}, offset[kMaxRank + 1] = {}, outside[kMaxRank + 1] = {};
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) { in_stride[d] = stride; stride *= st.in[d]; }
    auto set_prefix = [&](int k) {
        offset[k + 1] = offset[k] + st.index[k][at[k]] * in_stride[k];
        outside[k + 1] = outside[k] + (st.outside[k] ? st.outside[k][at[k]] : 0);
    };
    for (int d = 0; d < rank; ++d) set_prefix(d);
    for (uint64_t e = 0; e < total; ++e) {
        y[e] = outside[rank] ? st.extrapolation : x[offset[rank]];
        int d = rank - 1;
        while (d >= 0 && ++at[d] == st.out[d]) at[d--] = 0;
        if (d < 0) break;
        for (int k = d; k < rank; ++k) set_prefix(k);
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

// >>tensor ops
namespace detail {

// Tensor kernels: shapes, data movement, integer and logical arithmetic, Cast. Sizes that come
// from data (Reshape's shape, Tile's repeats, Pad's pads, ...) are computed with saturating
// arithmetic and refused past kTensorOpMaxElements (LimitExceeded); run() never allocates and
// refuses data it cannot use (a Gather index out of range, an integer division by zero) with
// InvalidArgument. Float32 Add/Sub/Mul/Div/Neg/Abs (and two-input Max/Min, float Where) keep
// running the elementwise kernel above, so fused and unfused float results stay identical.
constexpr uint64_t kTensorOpMaxElements = kDefaultMaxTensorElements;
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
constexpr uint32_t kAnyInputCount = 0xffffffffu;   // check_tensor_inputs' `most` for variadic ops

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
        if ((uint32_t)d.type > (uint32_t)kLastElementType)
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

// >>strided copy
// Strided copy: walks the output in row-major order over `dims` (a view that may have
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

// >>shape ops
// Reshape, Flatten, Squeeze, Unsqueeze: the same bytes under a new shape (in place).
inline Status prepare_reshape(PrepareContext& c) {
    bool attribute_shape = c.opset < 5;
    TESSEL_TRY(check_tensor_inputs(c, attribute_shape ? 1 : 2, attribute_shape ? 1 : 2, attribute_shape ? 1 : 2));
    IntValues shape;
    bool present = true;
    if (attribute_shape) {
        shape = int_attribute(c, "shape", &present);
        if (!present) return c.fail(Status::InvalidArgument, "attribute 'shape' is missing");
    } else {
        TESSEL_TRY(int_input(c, 1, &shape));
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
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
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
    TESSEL_TRY(check_tensor_inputs(c, 1, axes_input ? 2 : 1, 1));
    const TensorDesc& x = c.inputs[0];
    IntValues axes;
    bool present = false;
    TESSEL_TRY(axes_values(c, "axes", 1, 13, &axes, &present));
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
    TESSEL_TRY(check_tensor_inputs(c, axes_input ? 2 : 1, axes_input ? 2 : 1, axes_input ? 2 : 1));
    const TensorDesc& x = c.inputs[0];
    IntValues axes;
    bool present = false;
    TESSEL_TRY(axes_values(c, "axes", 1, 13, &axes, &present));
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

// >>data movement
// Transpose, Slice, Expand, DepthToSpace, SpaceToDepth: strided copies.
inline Status prepare_transpose(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
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
    TESSEL_TRY(check_tensor_inputs(c, attributes ? 1 : 3, attributes ? 1 : 5, attributes ? 1 : 3));
    const TensorDesc& x = c.inputs[0];
    IntValues starts, ends, axes, steps;
    bool has_axes = false, has_steps = false, present = true;
    if (attributes) {
        starts = int_attribute(c, "starts", &present);
        if (present) ends = int_attribute(c, "ends", &present);
        if (!present) return c.fail(Status::InvalidArgument, "attributes 'starts' and 'ends' are required");
        axes = int_attribute(c, "axes", &has_axes);
    } else {
        TESSEL_TRY(int_input(c, 1, &starts));
        TESSEL_TRY(int_input(c, 2, &ends));
        has_axes = c.has_input(3);
        if (has_axes) TESSEL_TRY(int_input(c, 3, &axes));
        has_steps = c.has_input(4);
        if (has_steps) TESSEL_TRY(int_input(c, 4, &steps));
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
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    const TensorDesc& x = c.inputs[0];
    IntValues shape;
    TESSEL_TRY(int_input(c, 1, &shape));
    if (shape.count > (uint64_t)kMaxRank)
        return c.fail(Status::LimitExceeded, "shape has %llu dimensions", (unsigned long long)shape.count);
    TensorDesc target;
    target.type = x.type;
    target.rank = (uint8_t)shape.count;
    for (int i = 0; i < target.rank; ++i) {
        target.dims[i] = shape[(uint64_t)i];
        if (target.dims[i] < 0) return c.fail(Status::InvalidArgument, "shape[%d] = %lld", i, (long long)target.dims[i]);
    }
    TensorDesc y;
    if (!broadcast_pair(x, target, &y)) {
        int rank = x.rank > target.rank ? x.rank : target.rank, i = 0;   // name the first pair that fails
        auto dim = [rank](const TensorDesc& d, int at) { return at - (rank - d.rank) >= 0 ? d.dims[at - (rank - d.rank)] : 1; };
        while (dim(x, i) == dim(target, i) || dim(x, i) == 1 || dim(target, i) == 1) ++i;
        return c.fail(Status::InvalidArgument, "dimension %lld does not broadcast to %lld", (long long)dim(x, i),
                      (long long)dim(target, i));
    }
    c.outputs[0] = y;
    TESSEL_TRY(check_output_desc(c, 0));
    StridedCopy copy;
    copy.rank = y.rank;
    copy.element_bytes = (uint32_t)element_size(x.type);
    for (int i = 0; i < y.rank; ++i) copy.dims[i] = y.dims[i];
    broadcast_strides(x, y, copy.strides);
    return set_strided_state(c, copy);
}

// DepthToSpace (DCR, CRD) and SpaceToDepth as a six-dimensional transposed view.
inline Status prepare_depth_space(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
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
    TESSEL_TRY(check_output_desc(c, 0));
    return set_strided_state(c, copy);
}

// >>concat and split
struct AxisState {
    int64_t axis = 0;
    uint32_t count = 0;
    const int64_t* sizes = nullptr;   // Split: per output
};

// Concat's and Gather's end of prepare: output 0 is y (within the limits), the state the axis.
inline Status set_axis_output(PrepareContext& c, const TensorDesc& y, int64_t axis) {
    c.outputs[0] = y;
    TESSEL_TRY(check_output_desc(c, 0));
    AxisState* state = new_state<AxisState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    state->axis = axis;
    c.state = state;
    return Status::Ok;
}

inline Status prepare_concat(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, kAnyInputCount, c.num_inputs));
    const TensorDesc& x = c.inputs[0];
    const Attribute* a = c.attribute("axis");
    bool has_axis = a && a->kind == AttributeKind::Int;
    if (!has_axis && c.opset >= 4) return c.fail(Status::InvalidArgument, "attribute 'axis' is missing");
    int64_t axis, axis_attribute = has_axis ? a->i : 1;   // Concat-1: axis 1 by default
    if (!normalize_axis(axis_attribute, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)axis_attribute, x.rank);
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
    return set_axis_output(c, y, axis);
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
    TESSEL_TRY(check_tensor_inputs(c, 1, split_input ? 2 : 1, 1, 0));
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
    TESSEL_TRY(axes_values(c, "split", 1, 13, &split, &present));
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

// >>gather
inline int64_t load_index(const void* data, ElementType type, uint64_t i) {
    return type == ElementType::Int64 ? static_cast<const int64_t*>(data)[i] : static_cast<const int32_t*>(data)[i];
}

inline Status prepare_gather(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
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
    return set_axis_output(c, y, axis);
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

// >>cast
// Cast and BitCast; scalar conversions shared with Pad, ConstantOfShape and EyeLike; the
// element-type visitors of the typed kernels
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

// float to bfloat16: round to nearest even, NaN stays a (quiet) NaN
inline uint16_t float_to_bfloat16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);   // an overflow carries into infinity, as it should
    return (uint16_t)(x >> 16);
}

inline float bfloat16_to_float(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

// double to float rounding toward zero with the lowest bit set when inexact ("round to odd"):
// rounding that float to a format of at most 22 mantissa bits gives the correctly rounded
// double, where rounding through the nearest float could round twice.
inline float double_to_float_odd(double d) {
    float f = (float)d;
    if (d != d || (double)f == d || std::isinf(d)) return f;
    if (std::fabs((double)f) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    uint32_t x;
    std::memcpy(&x, &f, 4);
    x |= 1u;
    std::memcpy(&f, &x, 4);
    return f;
}

// A scalar between types: a double, or an integer's 64 bits (signed or unsigned).
struct ScalarValue {
    bool floating = false;
    bool is_unsigned = false;   // i holds a uint64_t's bits
    double f = 0;
    int64_t i = 0;
    double as_double() const { return floating ? f : is_unsigned ? (double)(uint64_t)i : (double)i; }
};

inline ScalarValue load_scalar(ElementType type, const void* data, uint64_t k) {
    ScalarValue v;
    v.floating = type == ElementType::Float32 || type == ElementType::Float16 || type == ElementType::BFloat16 ||
                 type == ElementType::Float64;
    v.is_unsigned = type == ElementType::UInt64;
    switch (type) {
        case ElementType::Float32: v.f = static_cast<const float*>(data)[k]; break;
        case ElementType::Float16: v.f = half_to_float(static_cast<const uint16_t*>(data)[k]); break;
        case ElementType::BFloat16: v.f = bfloat16_to_float(static_cast<const uint16_t*>(data)[k]); break;
        case ElementType::Float64: v.f = static_cast<const double*>(data)[k]; break;
        case ElementType::Int64: v.i = static_cast<const int64_t*>(data)[k]; break;
        case ElementType::Int32: v.i = static_cast<const int32_t*>(data)[k]; break;
        case ElementType::Int16: v.i = static_cast<const int16_t*>(data)[k]; break;
        case ElementType::Int8: v.i = static_cast<const int8_t*>(data)[k]; break;
        case ElementType::UInt64: v.i = (int64_t)static_cast<const uint64_t*>(data)[k]; break;
        case ElementType::UInt32: v.i = static_cast<const uint32_t*>(data)[k]; break;
        case ElementType::UInt16: v.i = static_cast<const uint16_t*>(data)[k]; break;
        case ElementType::UInt8: v.i = static_cast<const uint8_t*>(data)[k]; break;
        case ElementType::Bool: v.i = static_cast<const uint8_t*>(data)[k] != 0; break;
        case ElementType::Undefined: break;
    }
    return v;
}

// Float to integer truncates toward zero and saturates (NaN gives 0): ONNX leaves out-of-range
// casts undefined, and a C++ cast out of range would be undefined behaviour.
inline int64_t float_to_integer(double f, int64_t lo, int64_t hi) {
    if (f != f) return 0;
    if (f <= (double)lo) return lo;
    if (f >= (double)hi) return hi;   // (double)INT64_MAX is 2^63: out of range too
    return (int64_t)f;
}

inline uint64_t float_to_uint64(double f) {
    if (f != f || f <= 0) return 0;
    if (f >= 18446744073709551616.0) return UINT64_MAX;
    return (uint64_t)f;
}

inline void store_scalar(ElementType type, void* data, uint64_t k, const ScalarValue& v) {
    // integer to integer keeps the low bits (two's complement wrap), as the C++ conversion does
    uint64_t bits = (uint64_t)v.i;
    switch (type) {
        case ElementType::Float32:
            static_cast<float*>(data)[k] = v.floating ? (float)v.f : v.is_unsigned ? (float)bits : (float)v.i;
            break;
        case ElementType::Float64: static_cast<double*>(data)[k] = v.as_double(); break;
        case ElementType::Float16:
            static_cast<uint16_t*>(data)[k] = float_to_half(v.floating ? double_to_float_odd(v.f) : v.is_unsigned ? (float)bits : (float)v.i);
            break;
        case ElementType::BFloat16:
            static_cast<uint16_t*>(data)[k] = float_to_bfloat16(double_to_float_odd(v.as_double()));
            break;
        case ElementType::Int64:
            static_cast<int64_t*>(data)[k] = v.floating ? float_to_integer(v.f, INT64_MIN, INT64_MAX) : v.i;
            break;
        case ElementType::Int32:
            static_cast<int32_t*>(data)[k] = v.floating ? (int32_t)float_to_integer(v.f, INT32_MIN, INT32_MAX) : (int32_t)(uint32_t)bits;
            break;
        case ElementType::Int16:
            static_cast<int16_t*>(data)[k] = v.floating ? (int16_t)float_to_integer(v.f, INT16_MIN, INT16_MAX) : (int16_t)(uint16_t)bits;
            break;
        case ElementType::Int8:
            static_cast<int8_t*>(data)[k] = v.floating ? (int8_t)float_to_integer(v.f, -128, 127) : (int8_t)(uint8_t)bits;
            break;
        case ElementType::UInt64: static_cast<uint64_t*>(data)[k] = v.floating ? float_to_uint64(v.f) : bits; break;
        case ElementType::UInt32:
            static_cast<uint32_t*>(data)[k] = v.floating ? (uint32_t)float_to_integer(v.f, 0, UINT32_MAX) : (uint32_t)bits;
            break;
        case ElementType::UInt16:
            static_cast<uint16_t*>(data)[k] = v.floating ? (uint16_t)float_to_integer(v.f, 0, UINT16_MAX) : (uint16_t)bits;
            break;
        case ElementType::UInt8:
            static_cast<uint8_t*>(data)[k] = v.floating ? (uint8_t)float_to_integer(v.f, 0, 255) : (uint8_t)bits;
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
        case 4: return ElementType::UInt16;
        case 5: return ElementType::Int16;
        case 6: return ElementType::Int32;
        case 7: return ElementType::Int64;
        case 9: return ElementType::Bool;
        case 10: return ElementType::Float16;
        case 11: return ElementType::Float64;
        case 12: return ElementType::UInt32;
        case 13: return ElementType::UInt64;
        case 16: return ElementType::BFloat16;
        default: return ElementType::Undefined;
    }
}

inline bool is_integer_type(ElementType t) {
    return t == ElementType::Int8 || t == ElementType::Int16 || t == ElementType::Int32 || t == ElementType::Int64 ||
           t == ElementType::UInt8 || t == ElementType::UInt16 || t == ElementType::UInt32 || t == ElementType::UInt64;
}

// Calls f(T()) with the C++ type of an integer element type; false for any other type.
template <class F>
bool visit_integer_type(ElementType type, F&& f) {
    switch (type) {
        case ElementType::Int8: f(int8_t()); return true;
        case ElementType::Int16: f(int16_t()); return true;
        case ElementType::Int32: f(int32_t()); return true;
        case ElementType::Int64: f(int64_t()); return true;
        case ElementType::UInt8: f(uint8_t()); return true;
        case ElementType::UInt16: f(uint16_t()); return true;
        case ElementType::UInt32: f(uint32_t()); return true;
        case ElementType::UInt64: f(uint64_t()); return true;
        default: return false;
    }
}

// The same for the integer types, float32 and double (bool: as uint8_t when `with_bool`).
template <class F>
bool visit_numeric_type(ElementType type, F&& f, bool with_bool = false) {
    if (type == ElementType::Float32) { f(float()); return true; }
    if (type == ElementType::Float64) { f(double()); return true; }
    if (with_bool && type == ElementType::Bool) { f(uint8_t()); return true; }
    return visit_integer_type(type, f);
}

inline Status prepare_cast(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
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

// BitCast (opset 26): the same bytes as another type of the same width.
inline Status prepare_bit_cast(PrepareContext& c) {
    if (c.opset < 26) return c.fail(Status::Unsupported, "needs opset 26 or later (the model imports %u)", c.opset);
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    const Attribute* a = c.attribute("to");
    if (!a || a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'to' is missing");
    ElementType to = onnx_element_type(a->i);
    if (to == ElementType::Undefined) return c.fail(Status::Unsupported, "bit cast to ONNX data type %lld", (long long)a->i);
    if (element_size(to) != element_size(c.inputs[0].type))
        return c.fail(Status::InvalidArgument, "%s and %s differ in width", element_type_name(c.inputs[0].type),
                      element_type_name(to));
    c.outputs[0] = c.inputs[0];
    c.outputs[0].type = to;
    c.in_place = true;
    return Status::Ok;
}

// >>pad
enum class PadMode : uint8_t { Constant, Reflect, Edge, Wrap };
struct PadState {
    PadMode mode = PadMode::Constant;
    int64_t begin[kMaxRank] = {};
    unsigned char value[8] = {};     // constant in the data's type (when no input 2)
};

inline Status prepare_pad(PrepareContext& c) {
    bool inputs = c.opset >= 11;
    TESSEL_TRY(check_tensor_inputs(c, inputs ? 2 : 1, inputs ? 4 : 1, inputs ? 2 : 1));
    const TensorDesc& x = c.inputs[0];
    PadState* state = new_state<PadState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    StringView mode = c.attribute_string("mode", "constant");
    if (mode == StringView("reflect")) state->mode = PadMode::Reflect;
    else if (mode == StringView("edge")) state->mode = PadMode::Edge;
    else if (mode == StringView("wrap") && c.opset >= 19) state->mode = PadMode::Wrap;   // Pad-19
    else if (mode != StringView("constant"))
        return c.fail(Status::InvalidArgument, "mode '%.*s'", (int)mode.size, mode.data);
    IntValues pads, axes;
    bool present = true, has_axes = false;
    if (!inputs) {
        const char* name = c.opset < 2 ? "paddings" : "pads";   // Pad-1 names it 'paddings'
        pads = int_attribute(c, name, &present);
        if (!present) return c.fail(Status::InvalidArgument, "attribute '%s' is missing", name);
        ScalarValue v;
        v.floating = true;
        v.f = c.attribute_float("value", 0.0f);
        store_scalar(x.type, state->value, 0, v);
    } else {
        TESSEL_TRY(int_input(c, 1, &pads));
        if (c.has_input(2)) {
            uint64_t n = 0;
            (void)desc_elements(c.inputs[2], &n);
            if (c.inputs[2].type != x.type || n != 1)
                return c.fail(Status::InvalidArgument, "constant_value must be one %s", element_type_name(x.type));
        }
        has_axes = c.has_input(3);
        if (has_axes) TESSEL_TRY(int_input(c, 3, &axes));
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
        if ((state->mode == PadMode::Edge || state->mode == PadMode::Wrap) && d == 0 && (b > 0 || e > 0))
            return c.fail(Status::InvalidArgument, "edge or wrap pads on an empty dimension");
        // Wrapping a cropped axis: numpy (the spec's reference) rejects it, and whether the period
        // is the cropped or the original length is not written down.
        if (state->mode == PadMode::Wrap && (b < 0 || e < 0) && (b > 0 || e > 0))
            return c.fail(Status::Unsupported, "mode 'wrap' with negative pads %lld/%lld", (long long)b, (long long)e);
        state->begin[a] = b;
        y.dims[a] = d + b + e;
    }
    c.outputs[0] = y;
    TESSEL_TRY(check_output_desc(c, 0));
    c.state = state;
    return Status::Ok;
}

// Source index along one dimension, -1 for the constant.
inline int64_t pad_source(int64_t s, int64_t d, PadMode mode) {
    if (s >= 0 && s < d) return s;
    if (mode == PadMode::Constant) return -1;
    if (mode == PadMode::Edge) return s < 0 ? 0 : d - 1;
    if (mode == PadMode::Wrap) return (s % d + d) % d;
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

// >>constants and ranges
// Shape, Constant, ConstantOfShape, Tile, Range
struct ShapeState {
    int64_t start = 0;
};

inline Status prepare_shape(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
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
    TESSEL_TRY(check_tensor_inputs(c, 0, 0, 0));
    ConstantState* state = new_state<ConstantState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    TensorDesc y;
    uint32_t found = 0;
    for (const Attribute* a = c.node_ref().attributes; a; a = a->next) {
        if (a->name == StringView("value") && a->kind == AttributeKind::Tensor && a->tensor) {
            y = a->tensor->desc;
            uint64_t n = 0;
            if (y.rank > kMaxRank || !element_type_valid(y.type) ||
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
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    IntValues shape;
    TESSEL_TRY(int_input(c, 0, &shape));
    if (shape.count > (uint64_t)kMaxRank)
        return c.fail(Status::LimitExceeded, "shape has %llu dimensions", (unsigned long long)shape.count);
    FillState* state = new_state<FillState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    TensorDesc y;
    y.type = ElementType::Float32;
    if (const Attribute* a = c.attribute("value")) {
        uint64_t n = 0;
        if (a->kind != AttributeKind::Tensor || !a->tensor || !desc_elements(a->tensor->desc, &n) || n != 1 ||
            !element_type_valid(a->tensor->desc.type) ||
            a->tensor->bytes < element_size(a->tensor->desc.type) || !a->tensor->data)
            return c.fail(Status::InvalidArgument, "attribute 'value' must be a one-element tensor");
        y.type = a->tensor->desc.type;
        std::memcpy(state->value, a->tensor->data, element_size(y.type));
    }
    y.rank = (uint8_t)shape.count;
    for (int i = 0; i < y.rank; ++i) y.dims[i] = shape[(uint64_t)i];
    c.outputs[0] = y;
    TESSEL_TRY(check_output_desc(c, 0));
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
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    const TensorDesc& x = c.inputs[0];
    IntValues repeats;
    TESSEL_TRY(int_input(c, 1, &repeats));
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
    TESSEL_TRY(check_tensor_inputs(c, 3, 3, 3));
    ElementType type = c.inputs[0].type;
    for (uint32_t i = 0; i < 3; ++i) {
        uint64_t n = 0;
        (void)desc_elements(c.inputs[i], &n);
        if (c.inputs[i].type != type)
            return c.fail(Status::InvalidArgument, "input %u is %s, input 0 %s", i, element_type_name(c.inputs[i].type),
                          element_type_name(type));
        if (n != 1) return c.fail(Status::InvalidArgument, "input %u must be a scalar", i);
    }
    if (type != ElementType::Float32 && type != ElementType::Float64 && type != ElementType::Int64 &&
        type != ElementType::Int32 && type != ElementType::Int16)   // float16, bfloat16: through float32
        return c.fail(Status::Unsupported, "inputs are %s", element_type_name(type));
    for (uint32_t i = 0; i < 3; ++i)
        if (!tensor_value(c, i)) return c.fail(Status::Unsupported, "data-dependent shape: input %u", i);
    uint64_t count = 0;
    if (type == ElementType::Float32 || type == ElementType::Float64) {
        double start = load_scalar(type, c.values[0], 0).f, limit = load_scalar(type, c.values[1], 0).f,
               delta = load_scalar(type, c.values[2], 0).f;
        if (delta == 0 || start != start || limit != limit || delta != delta)
            return c.fail(Status::InvalidArgument, "start %g, limit %g, delta %g", (double)start, (double)limit, (double)delta);
        double n = std::ceil(type == ElementType::Float32 ? (double)((float)limit - (float)start) / delta : (limit - start) / delta);
        if (n != n || n > (double)kTensorOpMaxElements)
            return c.fail(Status::LimitExceeded, "range of %g elements", n);
        count = n > 0 ? (uint64_t)n : 0;
    } else {
        int64_t start = load_scalar(type, c.values[0], 0).i, limit = load_scalar(type, c.values[1], 0).i,
                delta = load_scalar(type, c.values[2], 0).i;
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
    visit_numeric_type(c.outputs[0].desc.type, [&](auto type) {
        using T = decltype(type);
        fill_range(c.outputs[0].as<T>(), n, *c.inputs[0].as<const T>(), *c.inputs[2].as<const T>());
    });
    return Status::Ok;
}

// >>integer and logical ops
// Where, comparisons, logical ops, integer arithmetic, variadic Max/Min/Sum/Mean.
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
    TESSEL_TRY(kernel->prepare(c));
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
    uint32_t most = variadic ? kAnyInputCount : least;
    TESSEL_TRY(check_tensor_inputs(c, least, most, c.num_inputs));
    uint32_t first = op == TensorOp::Where ? 1 : 0;
    ElementType type = c.inputs[first].type;
    for (uint32_t i = first + 1; i < c.num_inputs; ++i)
        if (c.inputs[i].type != type)
            return c.fail(Status::InvalidArgument, "input %u is %s, input %u %s", i, element_type_name(c.inputs[i].type),
                          first, element_type_name(type));
    // float32 arithmetic is the elementwise kernel's; double and every integer width run here;
    // float16 and bfloat16 are refused and computed through float32 (prepare_float32_compute)
    bool is_float = type == ElementType::Float32 || type == ElementType::Float64, is_int = is_integer_type(type);
    bool float32 = type == ElementType::Float32;
    TypedState st;
    st.op = op;
    st.type = type;
    bool supported = false;
    switch (op) {
        case TensorOp::Add: case TensorOp::Sub: case TensorOp::Mul: case TensorOp::Div: case TensorOp::Neg:
        case TensorOp::Abs:
            if (float32) return delegate_elementwise(c, op);
            supported = is_float || is_int;
            break;
        case TensorOp::Max: case TensorOp::Min:
            if (float32 && c.num_inputs == 2) return delegate_elementwise(c, op);
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
            supported = is_float || is_int || type == ElementType::Bool;
            break;
        case TensorOp::Less: case TensorOp::Greater: case TensorOp::LessOrEqual: case TensorOp::GreaterOrEqual:
            supported = is_float || is_int;
            break;
        case TensorOp::Not: case TensorOp::And: case TensorOp::Or: case TensorOp::Xor:
            supported = type == ElementType::Bool;
            break;
        case TensorOp::Where:
            if (c.inputs[0].type == ElementType::Float32) {   // float condition: the elementwise Select
                if (float32) return delegate_elementwise(c, op);
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
    TESSEL_TRY(check_output_desc(c, 0));
    return set_typed_state(c, st);
}

// Integer arithmetic wraps (computed in the unsigned twin, where overflow is defined). Div
// truncates toward zero; Mod takes the divisor's sign (fmod = 0) or the dividend's (fmod = 1).
template <class T>
T integer_binary(TensorOp op, T a, T b, bool fmod, bool* bad) {
    using U = typename std::make_unsigned<T>::type;
    switch (op) {
        case TensorOp::Add: case TensorOp::Sum: return (T)(U)((U)a + (U)b);
        case TensorOp::Sub: return (T)(U)((U)a - (U)b);
        case TensorOp::Mul: {   // uint8/uint16 would promote to int, where the product can overflow
            using W = typename std::conditional<(sizeof(U) < sizeof(unsigned)), unsigned, U>::type;
            return (T)(U)((W)(U)a * (W)(U)b);
        }
        case TensorOp::Div:
            if (b == 0) { *bad = true; return 0; }
            if (std::is_signed<T>::value && b == (T)-1) return (T)(U)((U)0 - (U)a);   // INT_MIN / -1 wraps
            return (T)(a / b);
        case TensorOp::Mod: {
            if (b == 0) { *bad = true; return 0; }
            if (std::is_signed<T>::value && b == (T)-1) return 0;
            T r = (T)(a % b);
            if (std::is_signed<T>::value && !fmod && r != 0 && ((r < (T)0) != (b < (T)0))) r = (T)(r + b);
            return r;
        }
        case TensorOp::Max: return a > b ? a : b;
        case TensorOp::Min: return a < b ? a : b;
        default: return 0;
    }
}

// float32 keeps the snippet semantics of Max and Min; double propagates NaN as they do.
template <class T>
T floating_binary(TensorOp op, T a, T b) {
    switch (op) {
        case TensorOp::Add: case TensorOp::Sum: case TensorOp::Mean: return a + b;
        case TensorOp::Sub: return a - b;
        case TensorOp::Mul: return a * b;
        case TensorOp::Div: return a / b;
        case TensorOp::Mod: return std::fmod(a, b);
        case TensorOp::Max: case TensorOp::Min:
            if (std::is_same<T, float>::value) {
                float args[3] = {(float)a, (float)b, 0};   // snippet_evaluate reads up to 3
                return (T)snippet_evaluate(op == TensorOp::Max ? SnippetOp::Max : SnippetOp::Min, args, 0, 0, false);
            }
            if (a != a || b != b) return a != a ? a : b;
            return op == TensorOp::Max ? (a > b ? a : b) : (a < b ? a : b);
        default: return a + b;
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

template <class T>
Status run_integer(const RunContext& c, const TypedState& st) {
    using U = typename std::make_unsigned<T>::type;
    uint64_t n = c.outputs[0].elements();
    T* y = c.outputs[0].as<T>();
    if (st.op == TensorOp::Neg || st.op == TensorOp::Abs) {
        const T* x = c.inputs[0].as<const T>();
        for (uint64_t k = 0; k < n; ++k) {
            bool negate = st.op == TensorOp::Neg || (std::is_signed<T>::value && x[k] < (T)0);
            y[k] = negate ? (T)(U)((U)0 - (U)x[k]) : x[k];
        }
        return Status::Ok;
    }
    if (c.num_inputs == 2 && (st.op == TensorOp::Div || st.op == TensorOp::Mod)) {   // check divisors first
        uint64_t m = c.inputs[1].elements();
        for (uint64_t k = 0; k < m; ++k)
            if (c.inputs[1].as<const T>()[k] == 0) return c.fail(Status::InvalidArgument, "integer division by zero");
    }
    bool bad = false;
    run_fold<T>(c, [&](T a, T b) { return integer_binary<T>(st.op, a, b, st.fmod, &bad); });
    if (bad) return c.fail(Status::InvalidArgument, "integer division by zero");
    return Status::Ok;
}

template <class T>
Status run_floating(const RunContext& c, const TypedState& st) {
    TensorOp op = st.op;
    uint64_t n = c.outputs[0].elements();
    T* y = c.outputs[0].as<T>();
    if (op == TensorOp::Neg || op == TensorOp::Abs) {
        const T* x = c.inputs[0].as<const T>();
        for (uint64_t k = 0; k < n; ++k) y[k] = op == TensorOp::Neg ? -x[k] : std::fabs(x[k]);
        return Status::Ok;
    }
    run_fold<T>(c, [op](T a, T b) { return floating_binary<T>(op, a, b); });
    if (op == TensorOp::Mean)
        for (uint64_t k = 0; k < n; ++k) y[k] /= (T)c.num_inputs;
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
            visit_numeric_type(st.type, [&](auto type) { run_compare<decltype(type)>(c, st.op); }, true);
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
    if (st.type == ElementType::Float32) return run_floating<float>(c, st);
    if (st.type == ElementType::Float64) return run_floating<double>(c, st);
    Status status = Status::Ok;
    visit_integer_type(st.type, [&](auto type) { status = run_integer<decltype(type)>(c, st); });
    return status;
}

// Pow (ONNX Pow-15): base float32, double or an integer, exponent any of those; the result has
// the base's type. As the reference (np.power, then cast to the base type): an integer base
// with an integer exponent multiplies exactly (wrapping), otherwise the double pow is cast
// (truncated toward zero for an integer base). float32 ** float32 is the elementwise kernel's.
// Clip on integers and double: inputs min and max (optional, scalars) of x's type.
struct PowClipState {
    RunFn elementwise = nullptr;         // set: the float32 elementwise kernel runs with inner_state
    const void* inner_state = nullptr;
    ElementType base = ElementType::Undefined, exponent = ElementType::Undefined;
};

inline Status prepare_pow_clip(PrepareContext& c) {
    bool pow = c.node_ref().op == StringView("Pow");
    if (c.num_inputs < 1) return c.fail(Status::InvalidArgument, "input 0 is missing");
    ElementType base = c.inputs[0].type, exponent = pow && c.num_inputs > 1 ? c.inputs[1].type : base;
    bool numeric = base == ElementType::Float32 || base == ElementType::Float64 || is_integer_type(base);
    if (base == ElementType::Float32 && (exponent == ElementType::Float32 || !pow)) {   // the float path as before
        const OpKernel* kernel = nullptr;
        for (const OpKernel& k : kBuiltinKernels)
            if (StringView(k.op) == c.node_ref().op) kernel = &k;
        if (!kernel) return c.fail(Status::Unsupported, "no float32 kernel");
        TESSEL_TRY(kernel->prepare(c));
        PowClipState* st = new_state<PowClipState>(c);
        if (!st) return c.fail(Status::OutOfMemory, "out of memory");
        st->elementwise = kernel->run;
        st->inner_state = c.state;
        c.state = st;
        return Status::Ok;
    }
    if (!numeric || !(exponent == ElementType::Float32 || exponent == ElementType::Float64 || is_integer_type(exponent)))
        return c.fail(Status::Unsupported, "inputs are %s and %s", element_type_name(base), element_type_name(exponent));
    TensorDesc shape = c.inputs[0];
    if (pow) {
        TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
        if (!broadcast_pair(c.inputs[0], c.inputs[1], &shape))
            return c.fail(Status::InvalidArgument, "input shapes do not broadcast");
    } else {
        TESSEL_TRY(check_tensor_inputs(c, 1, 3, 1));
        if (c.attribute("min") || c.attribute("max"))
            return c.fail(Status::Unsupported, "Clip-6 attributes min and max on %s (float32 only)", element_type_name(base));
        for (uint32_t i = 1; i < c.num_inputs; ++i) {
            uint64_t n = 0;
            if (!c.has_input(i)) continue;
            if (c.inputs[i].type != base)
                return c.fail(Status::InvalidArgument, "input %u is %s, input 0 %s", i, element_type_name(c.inputs[i].type),
                              element_type_name(base));
            if (!desc_elements(c.inputs[i], &n) || n != 1) return c.fail(Status::InvalidArgument, "input %u must be a scalar", i);
        }
    }
    c.outputs[0] = shape;
    c.outputs[0].type = base;
    TESSEL_TRY(check_output_desc(c, 0));
    PowClipState* st = new_state<PowClipState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->base = base;
    st->exponent = pow ? exponent : ElementType::Undefined;
    c.state = st;
    return Status::Ok;
}

template <class T>
T integer_power(T base, int64_t e) {
    if (e < 0) {   // numpy refuses; 1/base truncated toward zero
        if (base == (T)1) return 1;
        if (std::is_signed<T>::value && base == (T)-1) return (e & 1) ? base : (T)1;
        return 0;
    }
    uint64_t r = 1, b = (uint64_t)base;   // modulo 2^64, whose low bits are T's wrapped result
    for (uint64_t k = (uint64_t)e; k; k >>= 1) {
        if (k & 1) r *= b;
        b *= b;
    }
    return (T)(typename std::make_unsigned<T>::type)r;
}

template <class T>
void run_pow_typed(const RunContext& c, ElementType exponent_type) {
    const TensorDesc* descs[2] = {&c.inputs[0].desc, &c.inputs[1].desc};
    const T* x = c.inputs[0].as<const T>();
    const void* e = c.inputs[1].data;
    T* y = c.outputs[0].as<T>();
    for_each_broadcast(c.outputs[0].desc, descs, 2, [&](uint64_t k, const int64_t* o) {
        ScalarValue v = load_scalar(exponent_type, e, (uint64_t)o[1]);
        if constexpr (std::is_integral<T>::value) {
            if (!v.floating) {
                int64_t p = v.is_unsigned && v.i < 0 ? INT64_MAX : v.i;   // a uint64 past 2^63: as large
                y[k] = integer_power<T>(x[o[0]], p);
                return;
            }
        }
        ScalarValue r;
        r.floating = true;
        r.f = std::pow((double)x[o[0]], v.as_double());
        store_scalar(c.outputs[0].desc.type, y, k, r);
    });
}

template <class T>
void run_clip_typed(const RunContext& c) {
    const T* x = c.inputs[0].as<const T>();
    T* y = c.outputs[0].as<T>();
    bool has_lo = c.num_inputs > 1 && c.inputs[1].data, has_hi = c.num_inputs > 2 && c.inputs[2].data;
    T lo = has_lo ? *c.inputs[1].as<const T>() : T(), hi = has_hi ? *c.inputs[2].as<const T>() : T();
    uint64_t n = c.outputs[0].elements();
    for (uint64_t k = 0; k < n; ++k) {
        T v = x[k];
        if (has_lo && v < lo) v = lo;
        if (has_hi && v > hi) v = hi;   // min > max gives max, as np.clip
        y[k] = v;
    }
}

inline Status run_pow_clip(const RunContext& c) {
    const PowClipState& st = *static_cast<const PowClipState*>(c.state);
    if (st.elementwise) {
        RunContext inner = c;
        inner.state = st.inner_state;
        return st.elementwise(inner);
    }
    if (st.exponent == ElementType::Undefined)
        visit_numeric_type(st.base, [&](auto type) { run_clip_typed<decltype(type)>(c); });
    else
        visit_numeric_type(st.base, [&](auto type) { run_pow_typed<decltype(type)>(c, st.exponent); });
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
    {"BitCast", prepare_bit_cast, run_copy},
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
    {"Pow", prepare_pow_clip, run_pow_clip},
    {"Clip", prepare_pow_clip, run_pow_clip},
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail

// >>trigonometric and other unary ops
// Sin ... Atanh, ThresholdedRelu, Shrink, Swish, IsInf, IsNaN: elementwise kernels outside the
// snippet set (never fused), computed in float32 with libm as onnxruntime does.
namespace detail {

enum class MathOp : uint8_t {
    Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, ThresholdedRelu, Shrink, Swish, IsInf, IsNaN
};

struct UnaryMathState {
    MathOp op;
    float alpha, beta;        // ThresholdedRelu and Swish alpha; Shrink lambd and bias
    bool positive, negative;  // IsInf detect_positive, detect_negative
};

inline bool math_op_from_name(StringView name, MathOp* op) {
    static const char* const kNames[] = {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
                                         "Atanh", "ThresholdedRelu", "Shrink", "Swish", "IsInf", "IsNaN"};
    for (uint32_t i = 0; i < sizeof kNames / sizeof kNames[0]; ++i)
        if (name == StringView(kNames[i])) { *op = (MathOp)i; return true; }
    return false;
}

// An optional attribute of one kind: absent gives the fallback, another kind is a bad node
// (attribute_float would silently take the fallback).
inline Status float_attribute(PrepareContext& c, const char* name, float fallback, float* out) {
    const Attribute* a = c.attribute(name);
    *out = fallback;
    if (!a) return Status::Ok;
    if (a->kind != AttributeKind::Float) return c.fail(Status::InvalidArgument, "attribute '%s' must be a float", name);
    *out = a->f;
    return Status::Ok;
}
inline Status int_attribute_value(PrepareContext& c, const char* name, int64_t fallback, int64_t* out) {
    const Attribute* a = c.attribute(name);
    *out = fallback;
    if (!a) return Status::Ok;
    if (a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute '%s' must be an int", name);
    *out = a->i;
    return Status::Ok;
}

inline Status prepare_unary_math(PrepareContext& c) {
    MathOp op;
    if (!math_op_from_name(c.node_ref().op, &op)) return c.fail(Status::Unsupported, "not a unary math operation");
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    ElementType type = c.inputs[0].type;
    bool predicate = op == MathOp::IsInf || op == MathOp::IsNaN;
    // IsInf and IsNaN only look at the value, so float16 costs nothing
    if (type != ElementType::Float32 && !(predicate && type == ElementType::Float16))
        return c.fail(Status::Unsupported, "input 0 is %s (float32 expected)", element_type_name(type));
    UnaryMathState st{op, 0.0f, 0.0f, false, false};
    switch (op) {
        case MathOp::ThresholdedRelu: case MathOp::Swish: TESSEL_TRY(float_attribute(c, "alpha", 1.0f, &st.alpha)); break;
        case MathOp::Shrink:
            TESSEL_TRY(float_attribute(c, "lambd", 0.5f, &st.alpha));
            TESSEL_TRY(float_attribute(c, "bias", 0.0f, &st.beta));
            break;
        case MathOp::IsInf: {
            int64_t positive = 1, negative = 1;
            TESSEL_TRY(int_attribute_value(c, "detect_positive", 1, &positive));
            TESSEL_TRY(int_attribute_value(c, "detect_negative", 1, &negative));
            if ((positive != 0 && positive != 1) || (negative != 0 && negative != 1))
                return c.fail(Status::InvalidArgument, "detect_positive and detect_negative must be 0 or 1");
            st.positive = positive != 0;
            st.negative = negative != 0;
            break;
        }
        default: break;
    }
    UnaryMathState* state = new_state<UnaryMathState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    *state = st;
    c.state = state;
    c.outputs[0] = c.inputs[0];
    if (predicate) c.outputs[0].type = ElementType::Bool;
    c.in_place = !predicate;
    return Status::Ok;
}

template <class F>
void map_floats(const RunContext& c, F f) {
    uint64_t n = c.outputs[0].elements();
    const float* x = c.inputs[0].as<const float>();
    float* y = c.outputs[0].as<float>();
    for (uint64_t k = 0; k < n; ++k) y[k] = f(x[k]);
}

inline Status run_unary_math(const RunContext& c) {
    const UnaryMathState& st = *static_cast<const UnaryMathState*>(c.state);
    float alpha = st.alpha, beta = st.beta;
    switch (st.op) {
        case MathOp::Sin: map_floats(c, [](float v) { return std::sin(v); }); break;
        case MathOp::Cos: map_floats(c, [](float v) { return std::cos(v); }); break;
        case MathOp::Tan: map_floats(c, [](float v) { return std::tan(v); }); break;
        case MathOp::Asin: map_floats(c, [](float v) { return std::asin(v); }); break;
        case MathOp::Acos: map_floats(c, [](float v) { return std::acos(v); }); break;
        case MathOp::Atan: map_floats(c, [](float v) { return std::atan(v); }); break;
        case MathOp::Sinh: map_floats(c, [](float v) { return std::sinh(v); }); break;
        case MathOp::Cosh: map_floats(c, [](float v) { return std::cosh(v); }); break;
        case MathOp::Asinh: map_floats(c, [](float v) { return std::asinh(v); }); break;
        case MathOp::Acosh: map_floats(c, [](float v) { return std::acosh(v); }); break;
        case MathOp::Atanh: map_floats(c, [](float v) { return std::atanh(v); }); break;
        case MathOp::ThresholdedRelu: map_floats(c, [alpha](float v) { return v > alpha ? v : 0.0f; }); break;
        case MathOp::Shrink:
            map_floats(c, [alpha, beta](float v) { return v < -alpha ? v + beta : v > alpha ? v - beta : 0.0f; });
            break;
        case MathOp::Swish: map_floats(c, [alpha](float v) { return v / (1.0f + std::exp(-alpha * v)); }); break;
        case MathOp::IsInf: case MathOp::IsNaN: {
            uint64_t n = c.outputs[0].elements();
            bool half = c.inputs[0].desc.type == ElementType::Float16;
            uint8_t* y = c.outputs[0].as<uint8_t>();
            for (uint64_t k = 0; k < n; ++k) {
                float v = half ? half_to_float(c.inputs[0].as<const uint16_t>()[k]) : c.inputs[0].as<const float>()[k];
                bool r = st.op == MathOp::IsNaN ? v != v : (v == INFINITY && st.positive) || (v == -INFINITY && st.negative);
                y[k] = r ? 1 : 0;
            }
            break;
        }
    }
    return Status::Ok;
}

}  // namespace detail

// >>more reductions
// ReduceSumSquare, ReduceL1, ReduceLogSum, ReduceLogSumExp on the reductions' prepare (axes,
// keepdims, noop_with_empty_axes); LogSumExp subtracts each output's max first so large
// inputs do not overflow exp (the max lives in scratch).
namespace detail {

inline Status prepare_reduce_more(PrepareContext& c, ReduceKind kind) {
    TESSEL_TRY(prepare_reduce(c, kind));
    TESSEL_TRY(check_output_desc(c, 0));
    if (kind == ReduceKind::LogSumExp)
        c.scratch_bytes = (size_t)dims_product(c.outputs[0], 0, c.outputs[0].rank) * sizeof(float);
    return Status::Ok;
}
inline Status prepare_reduce_sum_square(PrepareContext& c) { return prepare_reduce_more(c, ReduceKind::SumSquare); }
inline Status prepare_reduce_l1(PrepareContext& c) { return prepare_reduce_more(c, ReduceKind::L1); }
inline Status prepare_reduce_log_sum(PrepareContext& c) { return prepare_reduce_more(c, ReduceKind::LogSum); }
inline Status prepare_reduce_log_sum_exp(PrepareContext& c) { return prepare_reduce_more(c, ReduceKind::LogSumExp); }

inline Status run_reduce_more(const RunContext& c) {
    const ReduceState& st = *static_cast<const ReduceState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    uint64_t outputs = c.outputs[0].elements();
    if (st.copy) {
        if (y != x && outputs) std::memmove(y, x, (size_t)outputs * sizeof(float));   // an empty tensor may have no data
        return Status::Ok;
    }
    const TensorDesc* kept = &st.kept;
    for (uint64_t i = 0; i < outputs; ++i) y[i] = 0.0f;
    switch (st.kind) {
        case ReduceKind::SumSquare:
            for_each_broadcast(c.inputs[0].desc, &kept, 1, [&](uint64_t e, const int64_t* o) { y[o[0]] += x[e] * x[e]; });
            break;
        case ReduceKind::L1:
            for_each_broadcast(c.inputs[0].desc, &kept, 1, [&](uint64_t e, const int64_t* o) { y[o[0]] += std::fabs(x[e]); });
            break;
        case ReduceKind::LogSum:
            for_each_broadcast(c.inputs[0].desc, &kept, 1, [&](uint64_t e, const int64_t* o) { y[o[0]] += x[e]; });
            for (uint64_t i = 0; i < outputs; ++i) y[i] = std::log(y[i]);   // an empty set gives -inf
            break;
        default: {   // LogSumExp
            float* m = static_cast<float*>(c.scratch);
            for (uint64_t i = 0; i < outputs; ++i) m[i] = -INFINITY;
            for_each_broadcast(c.inputs[0].desc, &kept, 1, [&](uint64_t e, const int64_t* o) {
                float v = x[e];
                if (v > m[o[0]] || v != v) m[o[0]] = v;
            });
            for_each_broadcast(c.inputs[0].desc, &kept, 1, [&](uint64_t e, const int64_t* o) {
                if (std::isfinite(m[o[0]])) y[o[0]] += std::exp(x[e] - m[o[0]]);
            });
            // a non-finite max is the result: +inf, NaN, or -inf for all -inf or an empty set
            for (uint64_t i = 0; i < outputs; ++i) y[i] = std::isfinite(m[i]) ? std::log(y[i]) + m[i] : m[i];
            break;
        }
    }
    return Status::Ok;
}

}  // namespace detail

// >>bitwise ops
// BitwiseAnd/Or/Xor/Not on every integer width, broadcasting as the other binary ops;
// BitShift on the unsigned types (as ONNX allows), a shift by the width or more giving 0.
namespace detail {

enum class BitOp : uint8_t { And, Or, Xor, Not, ShiftLeft, ShiftRight };

struct BitState {
    BitOp op;
    ElementType type;
};

inline Status prepare_bitwise(PrepareContext& c) {
    StringView name = c.node_ref().op;
    bool shift = name == StringView("BitShift"), unary = name == StringView("BitwiseNot");
    BitOp op = name == StringView("BitwiseAnd") ? BitOp::And : name == StringView("BitwiseOr") ? BitOp::Or
               : name == StringView("BitwiseXor") ? BitOp::Xor : unary ? BitOp::Not : BitOp::ShiftLeft;
    uint32_t arity = unary ? 1 : 2;
    TESSEL_TRY(check_tensor_inputs(c, arity, arity, arity));
    ElementType type = c.inputs[0].type;
    if (!unary && c.inputs[1].type != type)
        return c.fail(Status::InvalidArgument, "input 1 is %s, input 0 %s", element_type_name(c.inputs[1].type),
                      element_type_name(type));
    if (shift) {
        StringView direction = c.attribute_string("direction", "");
        if (direction == StringView("RIGHT")) op = BitOp::ShiftRight;
        else if (direction != StringView("LEFT"))
            return c.fail(Status::InvalidArgument, "attribute 'direction' must be LEFT or RIGHT");
        if (type != ElementType::UInt8 && type != ElementType::UInt16 && type != ElementType::UInt32 &&
            type != ElementType::UInt64)
            return c.fail(Status::InvalidArgument, "inputs are %s (BitShift takes unsigned integers)", element_type_name(type));
    } else if (!is_integer_type(type)) {
        return c.fail(Status::InvalidArgument, "inputs are %s (integers expected)", element_type_name(type));
    }
    TensorDesc shape = c.inputs[0];
    if (!unary && !broadcast_pair(shape, c.inputs[1], &shape))
        return c.fail(Status::InvalidArgument, "input shapes do not broadcast");
    c.outputs[0] = shape;
    TESSEL_TRY(check_output_desc(c, 0));
    BitState* state = new_state<BitState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    *state = BitState{op, type};
    c.state = state;
    return Status::Ok;
}

template <class T>
Status run_bitwise_typed(const RunContext& c, BitOp op) {
    using U = typename std::make_unsigned<T>::type;
    if (op == BitOp::Not) {
        uint64_t n = c.outputs[0].elements();
        const T* x = c.inputs[0].as<const T>();
        T* y = c.outputs[0].as<T>();
        for (uint64_t k = 0; k < n; ++k) y[k] = (T)(U)~(U)x[k];
        return Status::Ok;
    }
    run_fold<T>(c, [op](T a, T b) -> T {
        U x = (U)a, s = (U)b;
        switch (op) {
            case BitOp::And: return (T)(U)(x & s);
            case BitOp::Or: return (T)(U)(x | s);
            case BitOp::Xor: return (T)(U)(x ^ s);
            case BitOp::ShiftLeft: return s >= sizeof(U) * 8 ? (T)0 : (T)(U)(x << s);
            default: return s >= sizeof(U) * 8 ? (T)0 : (T)(U)(x >> s);
        }
    });
    return Status::Ok;
}

inline Status run_bitwise(const RunContext& c) {
    const BitState& st = *static_cast<const BitState*>(c.state);
    Status status = Status::Ok;
    visit_integer_type(st.type, [&](auto type) { status = run_bitwise_typed<decltype(type)>(c, st.op); });
    return status;
}

}  // namespace detail

// >>float32 compute
// float16, bfloat16 and double inputs to a float32-only kernel: when a built-in kernel's
// prepare refuses a node (Unsupported) that has such inputs, the node is prepared again with
// those inputs as float32 and runs wrapped: its inputs are converted to float32 in scratch,
// the float32 kernel runs, its float32 outputs are converted back to the type of the node's
// first such input. So every float32-only kernel (Conv, MatMul, pooling, Softmax, the Reduce
// ops, the unary math ops, CumSum, ...) computes double in float32; the ops with their own
// double code (Cast, the typed ops of >>integer and logical ops, the data-movement ops) never
// come here. The ops that only select values (MaxPool, GlobalMaxPool, ReduceMax, ReduceMin)
// also take bool, int8, uint8, int16 and uint16 this way, which float32 holds exactly.
// Constant inputs are converted once at prepare; run allocates nothing.
namespace detail {

inline bool float32_computed(ElementType t) {
    return t == ElementType::Float16 || t == ElementType::BFloat16 || t == ElementType::Float64;
}

inline bool float32_computed(ElementType t, StringView op) {
    bool exact = t == ElementType::Bool || t == ElementType::Int8 || t == ElementType::UInt8 ||
                 t == ElementType::Int16 || t == ElementType::UInt16;
    bool selects = op == StringView("MaxPool") || op == StringView("GlobalMaxPool") || op == StringView("ReduceMax") ||
                   op == StringView("ReduceMin");
    return float32_computed(t) || (exact && selects);
}

inline void convert_to_float32(ElementType type, const void* src, float* dst, uint64_t n) {
    for (uint64_t k = 0; k < n; ++k) {
        if (type == ElementType::Float16) dst[k] = half_to_float(static_cast<const uint16_t*>(src)[k]);
        else if (type == ElementType::BFloat16) dst[k] = bfloat16_to_float(static_cast<const uint16_t*>(src)[k]);
        else if (type == ElementType::Float64) dst[k] = (float)static_cast<const double*>(src)[k];
        else dst[k] = (float)load_scalar(type, src, k).as_double();
    }
}

inline void convert_from_float32(ElementType type, const float* src, void* dst, uint64_t n) {
    for (uint64_t k = 0; k < n; ++k) {
        if (type == ElementType::Float16) {
            static_cast<uint16_t*>(dst)[k] = float_to_half(src[k]);
        } else if (type == ElementType::BFloat16) {
            static_cast<uint16_t*>(dst)[k] = float_to_bfloat16(src[k]);
        } else if (type == ElementType::Float64) {
            static_cast<double*>(dst)[k] = src[k];
        } else {
            ScalarValue v;
            v.floating = true;
            v.f = src[k];
            store_scalar(type, dst, k, v);
        }
    }
}

struct Float32ComputeState {
    const OpKernel* inner = nullptr;
    const void* inner_state = nullptr;
    ElementType input_type[kMaxNodePorts] = {};    // converted inputs: their type (else Undefined)
    ElementType output_type[kMaxNodePorts] = {};   // converted outputs: the type to write
    size_t input_offset[kMaxNodePorts] = {};       // in scratch
    size_t output_offset[kMaxNodePorts] = {};
    size_t inner_scratch = 0;                      // offset of the inner kernel's scratch
};

inline Status prepare_float32_compute(const OpKernel* inner, PrepareContext& c) {
    if (c.num_inputs > kMaxNodePorts || c.num_outputs > kMaxNodePorts)
        return c.fail(Status::Unsupported, "too many ports to compute in float32");
    Float32ComputeState* st = new_state<Float32ComputeState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TensorDesc in[kMaxNodePorts];
    const void* values[kMaxNodePorts] = {};
    ElementType compute = ElementType::Undefined;
    size_t scratch = 0;
    auto take = [&scratch](uint64_t elements) {
        size_t at = scratch;
        scratch += ((size_t)elements * sizeof(float) + 63) & ~(size_t)63;
        return at;
    };
    for (uint32_t i = 0; i < c.num_inputs; ++i) {
        in[i] = c.inputs[i];
        values[i] = c.values ? c.values[i] : nullptr;
        if (!float32_computed(in[i].type, c.node_ref().op)) continue;
        uint64_t n = 0;
        if (!desc_elements(in[i], &n) || n > c.max_elements)
            return c.fail(Status::Unsupported, "input %u has an unknown or too large shape", i);
        if (compute == ElementType::Undefined) compute = in[i].type;
        st->input_type[i] = in[i].type;
        st->input_offset[i] = take(n);
        if (values[i]) {
            float* converted = c.arena->allocate_array<float>(n ? (size_t)n : 1);
            if (!converted) return c.fail(Status::OutOfMemory, "out of memory");
            convert_to_float32(in[i].type, values[i], converted, n);
            values[i] = converted;
        }
        in[i].type = ElementType::Float32;
    }
    PrepareContext inner_context = c;
    inner_context.inputs = in;
    inner_context.values = values;
    inner_context.state = nullptr;
    inner_context.scratch_bytes = 0;
    inner_context.in_place = false;
    inner_context.error[0] = 0;
    Status s = inner->prepare(inner_context);
    if (s != Status::Ok) {
        std::memcpy(c.error, inner_context.error, sizeof c.error);
        return s;
    }
    for (uint32_t p = 0; p < c.num_outputs; ++p) {
        if (c.outputs[p].type != ElementType::Float32) continue;
        uint64_t n = 0;
        if (!desc_elements(c.outputs[p], &n)) return c.fail(Status::LimitExceeded, "output %u is too large", p);
        st->output_type[p] = compute;
        st->output_offset[p] = take(n);
        c.outputs[p].type = compute;
    }
    st->inner = inner;
    st->inner_state = inner_context.state;
    st->inner_scratch = scratch;
    c.state = st;
    c.scratch_bytes = scratch + inner_context.scratch_bytes;
    c.in_place = false;
    return Status::Ok;
}

inline Status run_float32_compute(const RunContext& c) {
    const Float32ComputeState& st = *static_cast<const Float32ComputeState*>(c.state);
    unsigned char* scratch = static_cast<unsigned char*>(c.scratch);
    TensorView in[kMaxNodePorts], out[kMaxNodePorts];
    for (uint32_t i = 0; i < c.num_inputs; ++i) {
        in[i] = c.inputs[i];
        if (st.input_type[i] == ElementType::Undefined) continue;
        float* converted = reinterpret_cast<float*>(scratch + st.input_offset[i]);
        convert_to_float32(st.input_type[i], c.inputs[i].data, converted, c.inputs[i].elements());
        in[i].desc.type = ElementType::Float32;
        in[i].data = converted;
    }
    for (uint32_t p = 0; p < c.num_outputs; ++p) {
        out[p] = c.outputs[p];
        if (st.output_type[p] == ElementType::Undefined) continue;
        out[p].desc.type = ElementType::Float32;
        out[p].data = scratch + st.output_offset[p];
    }
    RunContext inner = c;
    inner.state = st.inner_state;
    inner.inputs = in;
    inner.outputs = out;
    inner.scratch = scratch + st.inner_scratch;
    TESSEL_TRY(st.inner->run(inner));
    for (uint32_t p = 0; p < c.num_outputs; ++p)
        if (st.output_type[p] != ElementType::Undefined)
            convert_from_float32(st.output_type[p], out[p].as<const float>(), c.outputs[p].data, c.outputs[p].elements());
    return Status::Ok;
}

// Only prepare_node_kernel makes this kernel; its prepare refuses being called directly.
inline Status prepare_float32_compute_directly(PrepareContext& c) {
    return c.fail(Status::Unsupported, "the float32 compute wrapper is prepared through prepare_node_kernel");
}

const OpKernel kFloat32Compute = {"(float32 compute)", prepare_float32_compute_directly, run_float32_compute};

// Prepares a node with *kernel; a built-in kernel that refuses float16/bfloat16/double inputs
// is retried through the float32 wrapper (and *kernel becomes it).
inline Status prepare_node_kernel(const OpKernel** kernel, PrepareContext& c) {
    Status s = (*kernel)->prepare(c);
    if (s != Status::Unsupported || *kernel != find_builtin_kernel(c.node_ref().op)) return s;
    bool wanted = false;
    for (uint32_t i = 0; i < c.num_inputs; ++i) wanted = wanted || float32_computed(c.inputs[i].type, c.node_ref().op);
    if (!wanted) return s;
    c.state = nullptr;
    c.scratch_bytes = 0;
    c.in_place = false;
    c.error[0] = 0;
    Status wrapped = prepare_float32_compute(*kernel, c);   // its refusal, if any, is the one that matters
    if (wrapped == Status::Ok) *kernel = &kFloat32Compute;
    if (wrapped == Status::Unsupported) {   // say which inputs were float32 in that refusal
        size_t used = std::strlen(c.error);
        ElementType type = ElementType::Undefined;
        for (uint32_t i = 0; i < c.num_inputs && type == ElementType::Undefined; ++i)
            if (float32_computed(c.inputs[i].type, c.node_ref().op)) type = c.inputs[i].type;
        std::snprintf(c.error + used, sizeof c.error - used, " (with the %s inputs as float32)", element_type_name(type));
    }
    return wrapped;
}

}  // namespace detail

// >>size and like ops
// Size (compile_model folds it; the kernel serves a model run unprepared by folding, and puts
// it in the op list), CastLike (Cast to the second input's type, its data unused) and EyeLike
// (ones on diagonal k of a 2-D tensor shaped like the input, of the dtype attribute or the
// input's type).
namespace detail {

inline Status prepare_size(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    c.outputs[0] = TensorDesc();
    c.outputs[0].type = ElementType::Int64;
    c.outputs[0].rank = 0;
    return Status::Ok;
}

inline Status run_size(const RunContext& c) {
    *c.outputs[0].as<int64_t>() = (int64_t)c.inputs[0].elements();
    return Status::Ok;
}

inline Status prepare_cast_like(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    c.outputs[0] = c.inputs[0];
    c.outputs[0].type = c.inputs[1].type;
    c.in_place = c.inputs[1].type == c.inputs[0].type;
    return Status::Ok;
}

struct EyeLikeState {
    int64_t k;
};

inline Status prepare_eye_like(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    if (c.inputs[0].rank != 2) return c.fail(Status::InvalidArgument, "input 0 has rank %d (2 expected)", c.inputs[0].rank);
    ElementType type = c.inputs[0].type;
    const Attribute* dtype = c.attribute("dtype");
    if (dtype) {
        if (dtype->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'dtype' must be an int");
        type = onnx_element_type(dtype->i);
        if (type == ElementType::Undefined)
            return c.fail(Status::Unsupported, "dtype is ONNX data type %lld", (long long)dtype->i);
    }
    EyeLikeState* st = new_state<EyeLikeState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(int_attribute_value(c, "k", 0, &st->k));
    c.state = st;
    c.outputs[0] = c.inputs[0];
    c.outputs[0].type = type;
    return Status::Ok;
}

inline Status run_eye_like(const RunContext& c) {
    const EyeLikeState& st = *static_cast<const EyeLikeState*>(c.state);
    const TensorView& y = c.outputs[0];
    int64_t rows = y.desc.dims[0], cols = y.desc.dims[1];
    if (!y.elements()) return Status::Ok;   // an empty tensor may have no data
    std::memset(y.data, 0, (size_t)(y.elements() * element_size(y.desc.type)));
    ScalarValue one;
    one.i = 1;
    for (int64_t i = 0; i < rows; ++i) {
        // column i + k, formed only where it cannot overflow (k may be near the int64 limits)
        if (st.k >= 0 ? cols - i > st.k : i + st.k >= 0 && i + st.k < cols)
            store_scalar(y.desc.type, y.data, (uint64_t)(i * cols + i + st.k), one);
    }
    return Status::Ok;
}

}  // namespace detail

// >>matrix and scan ops
// Trilu (upper or lower triangle of the last two dims from diagonal k; k read at run time),
// Hardmax (1 at the first maximum along axis; before opset 13 over the input flattened to 2-D
// at axis), CumSum (float32, int32, int64 along an axis input; exclusive, reverse).
namespace detail {

struct TriluState {
    bool upper;
    int64_t rows, cols;   // of one matrix
};

// A one-element int32/int64 input (Trilu's k, CumSum's axis); false if it is not one.
inline bool scalar_int_desc(const TensorDesc& d) {
    uint64_t n = 0;
    return (d.type == ElementType::Int64 || d.type == ElementType::Int32) && d.rank <= 1 && desc_elements(d, &n) && n == 1;
}
inline int64_t scalar_int_value(ElementType type, const void* data) {
    return type == ElementType::Int64 ? *static_cast<const int64_t*>(data) : *static_cast<const int32_t*>(data);
}

inline Status prepare_trilu(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 2, 1));
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 2) return c.fail(Status::InvalidArgument, "input 0 has rank %d (at least 2 expected)", x.rank);
    if (c.has_input(1) && (c.inputs[1].type != ElementType::Int64 || !scalar_int_desc(c.inputs[1])))
        return c.fail(Status::InvalidArgument, "input 1 (k) must be one int64");
    int64_t upper = 1;
    TESSEL_TRY(int_attribute_value(c, "upper", 1, &upper));
    TriluState* st = new_state<TriluState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = TriluState{upper != 0, x.dims[x.rank - 2], x.dims[x.rank - 1]};
    c.state = st;
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}

inline Status run_trilu(const RunContext& c) {
    const TriluState& st = *static_cast<const TriluState*>(c.state);
    int64_t k = c.num_inputs > 1 && c.inputs[1].data ? *c.inputs[1].as<const int64_t>() : 0;
    size_t bytes = element_size(c.outputs[0].desc.type);
    uint64_t n = c.outputs[0].elements();
    const unsigned char* x = c.inputs[0].as<const unsigned char>();
    unsigned char* y = c.outputs[0].as<unsigned char>();
    if (y != x && n) std::memmove(y, x, (size_t)n * bytes);
    uint64_t per_matrix = (uint64_t)(st.rows * st.cols);
    if (per_matrix == 0) return Status::Ok;
    for (uint64_t base = 0; base < n; base += per_matrix)
        for (int64_t i = 0; i < st.rows; ++i)
            for (int64_t j = 0; j < st.cols; ++j) {
                // j - i is within +-2^62 (dims are bounded), so comparing it with any k is exact
                bool keep = st.upper ? j - i >= k : j - i <= k;
                if (!keep) std::memset(y + (base + (uint64_t)(i * st.cols + j)) * bytes, 0, bytes);
            }
    return Status::Ok;
}

struct ScanState {   // a 3-D view of the input: outer x count x inner
    int64_t outer, count, inner;
    bool exclusive, reverse;   // CumSum, CumProd
    bool axis_known;           // CumSum, CumProd: the axis was a constant at prepare (else read at run)
    bool product;              // CumProd
};

inline Status prepare_hardmax(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    const TensorDesc& x = c.inputs[0];
    if (x.type != ElementType::Float32)
        return c.fail(Status::Unsupported, "input 0 is %s (float32 expected)", element_type_name(x.type));
    bool per_axis = c.opset >= 13;
    int64_t axis = 0;
    TESSEL_TRY(int_attribute_value(c, "axis", per_axis ? -1 : 1, &axis));
    int64_t a = 0;
    // before opset 13 the axis splits a 2-D view, so rank itself is a valid axis
    if (x.rank < 1 || !normalize_axis(axis, per_axis ? x.rank : x.rank + 1, &a))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)axis, x.rank);
    ScanState* st = new_state<ScanState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->outer = (int64_t)dims_product(x, 0, (int)a);
    st->count = per_axis ? x.dims[a] : (int64_t)dims_product(x, (int)a, x.rank);
    st->inner = per_axis ? (int64_t)dims_product(x, (int)a + 1, x.rank) : 1;
    c.state = st;
    c.outputs[0] = x;
    return Status::Ok;
}

inline Status run_hardmax(const RunContext& c) {
    const ScanState& st = *static_cast<const ScanState*>(c.state);
    const float* x = c.inputs[0].as<const float>();
    float* y = c.outputs[0].as<float>();
    for (int64_t o = 0; o < st.outer; ++o)
        for (int64_t i = 0; i < st.inner; ++i) {
            const float* xl = x + o * st.count * st.inner + i;
            float* yl = y + o * st.count * st.inner + i;
            int64_t best = 0;
            for (int64_t k = 1; k < st.count; ++k)
                if (xl[k * st.inner] > xl[best * st.inner]) best = k;
            for (int64_t k = 0; k < st.count; ++k) yl[k * st.inner] = k == best ? 1.0f : 0.0f;
        }
    return Status::Ok;
}

inline void cumsum_view(const TensorDesc& x, int axis, ScanState* st) {
    st->outer = (int64_t)dims_product(x, 0, axis);
    st->count = x.dims[axis];
    st->inner = (int64_t)dims_product(x, axis + 1, x.rank);
}

// CumSum, or CumProd (product): one kernel.
inline Status prepare_cumulative(PrepareContext& c, bool product) {
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    const TensorDesc& x = c.inputs[0];
    if (x.type != ElementType::Float32 && x.type != ElementType::Int32 && x.type != ElementType::Int64)
        return c.fail(Status::Unsupported, "input 0 is %s (float32, int32 or int64 expected)", element_type_name(x.type));
    if (x.rank < 1) return c.fail(Status::InvalidArgument, "input 0 is a scalar (rank 1 or more expected)");
    if (!scalar_int_desc(c.inputs[1])) return c.fail(Status::InvalidArgument, "input 1 (axis) must be one int32 or int64");
    int64_t exclusive = 0, reverse = 0;
    TESSEL_TRY(int_attribute_value(c, "exclusive", 0, &exclusive));
    TESSEL_TRY(int_attribute_value(c, "reverse", 0, &reverse));
    ScanState* st = new_state<ScanState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->exclusive = exclusive != 0;
    st->reverse = reverse != 0;
    st->product = product;
    if (const void* v = tensor_value(c, 1)) {   // a constant axis is checked now, else at run
        int64_t axis = scalar_int_value(c.inputs[1].type, v), a = 0;
        if (!normalize_axis(axis, x.rank, &a))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)axis, x.rank);
        cumsum_view(x, (int)a, st);
        st->axis_known = true;
    }
    c.state = st;
    c.outputs[0] = x;
    return Status::Ok;
}

inline Status prepare_cumsum(PrepareContext& c) { return prepare_cumulative(c, false); }

template <class T, class U>   // U: the type the sum or product wraps in (unsigned for integers)
void cumsum_typed(const ScanState& st, const T* x, T* y) {
    for (int64_t o = 0; o < st.outer; ++o)
        for (int64_t i = 0; i < st.inner; ++i) {
            const T* xl = x + o * st.count * st.inner + i;
            T* yl = y + o * st.count * st.inner + i;
            U sum = st.product ? 1 : 0;
            for (int64_t s = 0; s < st.count; ++s) {
                int64_t k = st.reverse ? st.count - 1 - s : s;
                T v = xl[k * st.inner];   // read before the write: y may be x
                if (st.exclusive) yl[k * st.inner] = (T)sum;
                sum = st.product ? (U)(sum * (U)v) : (U)(sum + (U)v);
                if (!st.exclusive) yl[k * st.inner] = (T)sum;
            }
        }
}

inline Status run_cumsum(const RunContext& c) {
    ScanState st = *static_cast<const ScanState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    if (!st.axis_known) {
        int64_t axis = scalar_int_value(c.inputs[1].desc.type, c.inputs[1].data), a = 0;
        if (!normalize_axis(axis, x.rank, &a))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)axis, x.rank);
        cumsum_view(x, (int)a, &st);
    }
    switch (x.type) {
        case ElementType::Int64: cumsum_typed<int64_t, uint64_t>(st, c.inputs[0].as<const int64_t>(), c.outputs[0].as<int64_t>()); break;
        case ElementType::Int32: cumsum_typed<int32_t, uint32_t>(st, c.inputs[0].as<const int32_t>(), c.outputs[0].as<int32_t>()); break;
        default: cumsum_typed<float, float>(st, c.inputs[0].as<const float>(), c.outputs[0].as<float>()); break;
    }
    return Status::Ok;
}

}  // namespace detail

// >>math kernel table
namespace detail {
// The ops of the sections from >>trigonometric and other unary ops on (KernelTable adds them).
const OpKernel kMathKernels[] = {
    {"Sin", prepare_unary_math, run_unary_math},
    {"Cos", prepare_unary_math, run_unary_math},
    {"Tan", prepare_unary_math, run_unary_math},
    {"Asin", prepare_unary_math, run_unary_math},
    {"Acos", prepare_unary_math, run_unary_math},
    {"Atan", prepare_unary_math, run_unary_math},
    {"Sinh", prepare_unary_math, run_unary_math},
    {"Cosh", prepare_unary_math, run_unary_math},
    {"Asinh", prepare_unary_math, run_unary_math},
    {"Acosh", prepare_unary_math, run_unary_math},
    {"Atanh", prepare_unary_math, run_unary_math},
    {"ThresholdedRelu", prepare_unary_math, run_unary_math},
    {"Shrink", prepare_unary_math, run_unary_math},
    {"Swish", prepare_unary_math, run_unary_math},
    {"IsInf", prepare_unary_math, run_unary_math},
    {"IsNaN", prepare_unary_math, run_unary_math},
    {"ReduceSumSquare", prepare_reduce_sum_square, run_reduce_more},
    {"ReduceL1", prepare_reduce_l1, run_reduce_more},
    {"ReduceLogSum", prepare_reduce_log_sum, run_reduce_more},
    {"ReduceLogSumExp", prepare_reduce_log_sum_exp, run_reduce_more},
    {"BitwiseAnd", prepare_bitwise, run_bitwise},
    {"BitwiseOr", prepare_bitwise, run_bitwise},
    {"BitwiseXor", prepare_bitwise, run_bitwise},
    {"BitwiseNot", prepare_bitwise, run_bitwise},
    {"BitShift", prepare_bitwise, run_bitwise},
    {"Size", prepare_size, run_size},
    {"CastLike", prepare_cast_like, run_cast},
    {"EyeLike", prepare_eye_like, run_eye_like},
    {"Trilu", prepare_trilu, run_trilu},
    {"Hardmax", prepare_hardmax, run_hardmax},
    {"CumSum", prepare_cumsum, run_cumsum},
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail

// >>gather and scatter
// GatherElements, GatherND, ScatterElements (and Scatter, its name before opset 11),
// ScatterND. Data of any element type moves as bytes; a Scatter reduction computes in
// float32, int64 or int32. Indices are int64 or int32 (negative counts from the end); all of
// them are checked before anything is written, and one out of range is InvalidArgument (at
// prepare when the indices are constants, as for Gather).
namespace detail {

// Ops newer than the model's opset are not the model's ops.
inline Status require_opset(PrepareContext& c, uint32_t since) {
    if (c.opset < since) return c.fail(Status::Unsupported, "needs opset %u or later (the model imports %u)", since, c.opset);
    return Status::Ok;
}

inline Status index_type(PrepareContext& c, uint32_t i) {
    ElementType t = c.inputs[i].type;
    if (t != ElementType::Int64 && t != ElementType::Int32)
        return c.fail(Status::Unsupported, "input %u is %s (int64 or int32 expected)", i, element_type_name(t));
    return Status::Ok;
}

// Index e of `count` bounds by bounds[e % m] (m 1: one bound for all). False with the first
// bad index and its bound.
inline bool indices_in_range(const void* data, ElementType type, uint64_t count, const int64_t* bounds, uint64_t m,
                             int64_t* bad, int64_t* bound) {
    for (uint64_t e = 0; e < count; ++e) {
        int64_t k = load_index(data, type, e), d = bounds[m > 1 ? e % m : 0];
        if (k < -d || k >= d) {
            *bad = k;
            *bound = d;
            return false;
        }
    }
    return true;
}

// Input `i`'s indices checked at prepare when they are a constant.
inline Status check_known_indices(PrepareContext& c, uint32_t i, const int64_t* bounds, uint64_t m) {
    const void* known = tensor_value(c, i);
    uint64_t n = 0;
    int64_t bad = 0, bound = 0;
    if (known && desc_elements(c.inputs[i], &n) && !indices_in_range(known, c.inputs[i].type, n, bounds, m, &bad, &bound))
        return c.fail(Status::InvalidArgument, "index %lld out of range for dimension %lld", (long long)bad, (long long)bound);
    return Status::Ok;
}

inline Status check_run_indices(const RunContext& c, const TensorView& indices, const int64_t* bounds, uint64_t m) {
    int64_t bad = 0, bound = 0;
    if (!indices_in_range(indices.data, indices.desc.type, indices.elements(), bounds, m, &bad, &bound))
        return c.fail(Status::InvalidArgument, "index %lld out of range for dimension %lld", (long long)bad, (long long)bound);
    return Status::Ok;
}

inline int64_t wrap_index(int64_t k, int64_t bound) { return k < 0 ? k + bound : k; }

// GatherElements and ScatterElements: indices of data's rank, no larger than data off the axis.
inline Status check_elements_indices(PrepareContext& c, const TensorDesc& data, const TensorDesc& indices, int64_t* axis) {
    int64_t raw = c.attribute_int("axis", 0);
    if (data.rank < 1 || !normalize_axis(raw, data.rank, axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)raw, data.rank);
    if (indices.rank != data.rank)
        return c.fail(Status::InvalidArgument, "indices have rank %u, data %u", indices.rank, data.rank);
    for (int d = 0; d < data.rank; ++d)
        if (d != *axis && indices.dims[d] > data.dims[d])
            return c.fail(Status::InvalidArgument, "indices dimension %d = %lld exceeds data's %lld", d,
                          (long long)indices.dims[d], (long long)data.dims[d]);
    return check_known_indices(c, 1, &data.dims[*axis], 1);
}

// Walks the positions of `indices` in row-major order: fn(e, base) with base the data offset
// of that position without the axis term.
template <class Fn>
void for_each_along_axis(const TensorDesc& indices, const int64_t* data_strides, int64_t axis, Fn fn) {
    uint64_t n = 0;
    if (!desc_elements(indices, &n) || !n) return;
    int64_t at[kMaxRank] = {}, base = 0;
    for (uint64_t e = 0; e < n; ++e) {
        fn(e, base);
        for (int d = indices.rank - 1; d >= 0; --d) {
            ++at[d];
            if (d != axis) base += data_strides[d];
            if (at[d] < indices.dims[d]) break;
            if (d != axis) base -= data_strides[d] * indices.dims[d];
            at[d] = 0;
        }
    }
}

inline Status prepare_gather_elements(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 11));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    TESSEL_TRY(index_type(c, 1));
    int64_t axis = 0;
    TESSEL_TRY(check_elements_indices(c, c.inputs[0], c.inputs[1], &axis));
    TensorDesc y = c.inputs[1];
    y.type = c.inputs[0].type;
    return set_axis_output(c, y, axis);
}

inline Status run_gather_elements(const RunContext& c) {
    const AxisState& st = *static_cast<const AxisState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    const TensorView& indices = c.inputs[1];
    int64_t bound = x.dims[st.axis];
    TESSEL_TRY(check_run_indices(c, indices, &bound, 1));
    int64_t strides[kMaxRank];
    dense_strides(x, strides);
    size_t size = element_size(x.type);
    const unsigned char* src = c.inputs[0].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    int64_t step = strides[st.axis];
    for_each_along_axis(indices.desc, strides, st.axis, [&](uint64_t e, int64_t base) {
        int64_t k = wrap_index(load_index(indices.data, indices.desc.type, e), bound);
        std::memcpy(dst + e * size, src + (size_t)(base + k * step) * size, size);
    });
    return Status::Ok;
}

// GatherND and ScatterND address data by k-tuples: the offset of tuple `t` (indices elements
// t*k ..) in a block of data whose dimensions from `first` are dims.
inline int64_t tuple_offset(const TensorView& indices, uint64_t t, int64_t k, const int64_t* dims, const int64_t* strides) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j)
        offset += wrap_index(load_index(indices.data, indices.desc.type, t * (uint64_t)k + (uint64_t)j), dims[j]) * strides[j];
    return offset;
}

struct GatherNdState {
    int64_t batch_dims = 0;
};

inline Status prepare_gather_nd(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 11));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    TESSEL_TRY(index_type(c, 1));
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& indices = c.inputs[1];
    int64_t b = c.attribute_int("batch_dims", 0);
    if (x.rank < 1 || indices.rank < 1)
        return c.fail(Status::InvalidArgument, "data (rank %u) and indices (rank %u) need rank 1 or more", x.rank, indices.rank);
    if (b < 0 || b >= x.rank || b >= indices.rank)
        return c.fail(Status::InvalidArgument, "batch_dims %lld out of range for ranks %u and %u", (long long)b, x.rank,
                      indices.rank);
    for (int d = 0; d < b; ++d)
        if (indices.dims[d] != x.dims[d])
            return c.fail(Status::InvalidArgument, "batch dimension %d is %lld in indices, %lld in data", d,
                          (long long)indices.dims[d], (long long)x.dims[d]);
    int64_t m = indices.dims[indices.rank - 1];
    if (m < 1 || m > x.rank - b)
        return c.fail(Status::InvalidArgument, "indices' last dimension %lld out of range 1..%lld", (long long)m,
                      (long long)(x.rank - b));
    if (indices.rank - 1 + x.rank - b - m > kMaxRank)
        return c.fail(Status::LimitExceeded, "output rank %lld (at most %d)", (long long)(indices.rank - 1 + x.rank - b - m),
                      kMaxRank);
    TESSEL_TRY(check_known_indices(c, 1, &x.dims[b], (uint64_t)m));
    TensorDesc& y = c.outputs[0];
    y = TensorDesc();
    y.type = x.type;
    for (int d = 0; d + 1 < indices.rank; ++d) y.dims[y.rank++] = indices.dims[d];
    for (int64_t d = b + m; d < x.rank; ++d) y.dims[y.rank++] = x.dims[d];
    TESSEL_TRY(check_output_desc(c, 0));
    GatherNdState* st = new_state<GatherNdState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->batch_dims = b;
    c.state = st;
    return Status::Ok;
}

inline Status run_gather_nd(const RunContext& c) {
    const GatherNdState& st = *static_cast<const GatherNdState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    const TensorView& indices = c.inputs[1];
    int b = (int)st.batch_dims, q = indices.desc.rank;
    int64_t m = indices.desc.dims[q - 1];
    TESSEL_TRY(check_run_indices(c, indices, &x.dims[b], (uint64_t)m));
    int64_t strides[kMaxRank];
    dense_strides(x, strides);
    uint64_t batches = dims_product(indices.desc, 0, b), tuples = dims_product(indices.desc, b, q - 1);
    size_t size = element_size(x.type), slice = (size_t)dims_product(x, b + (int)m, x.rank) * size;
    int64_t batch_stride = b ? strides[b - 1] : 0;
    const unsigned char* src = c.inputs[0].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    if (!slice) return Status::Ok;
    for (uint64_t i = 0; i < batches; ++i)
        for (uint64_t t = 0; t < tuples; ++t) {
            uint64_t e = i * tuples + t;
            int64_t offset = (int64_t)i * batch_stride + tuple_offset(indices, e, m, &x.dims[b], &strides[b]);
            std::memcpy(dst + e * slice, src + (size_t)offset * size, slice);
        }
    return Status::Ok;
}

// Scatter reductions: none (the last update wins), add, mul (opset 16), max, min (opset 18).
enum class ScatterReduction : uint8_t { None, Add, Mul, Max, Min };

struct ScatterState {
    int64_t axis = 0;
    ScatterReduction reduction = ScatterReduction::None;
};

// Inputs data, indices, updates of data's type; the output is data's desc, in place.
inline Status prepare_scatter(PrepareContext& c, ScatterState** state) {
    TESSEL_TRY(check_tensor_inputs(c, 3, 3, 3));
    TESSEL_TRY(index_type(c, 1));
    const TensorDesc& x = c.inputs[0];
    if (c.inputs[2].type != x.type)
        return c.fail(Status::InvalidArgument, "updates are %s, data %s", element_type_name(c.inputs[2].type),
                      element_type_name(x.type));
    ScatterState* st = new_state<ScatterState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    StringView r = c.attribute_string("reduction", "none");
    if (r == StringView("add") || r == StringView("mul")) {
        TESSEL_TRY(require_opset(c, 16));
        st->reduction = r == StringView("add") ? ScatterReduction::Add : ScatterReduction::Mul;
    } else if (r == StringView("max") || r == StringView("min")) {
        TESSEL_TRY(require_opset(c, 18));
        st->reduction = r == StringView("max") ? ScatterReduction::Max : ScatterReduction::Min;
    } else if (r != StringView("none")) {
        return c.fail(Status::InvalidArgument, "unknown reduction '%.*s'", (int)r.size, r.data);
    }
    if (st->reduction != ScatterReduction::None && x.type != ElementType::Float32 && x.type != ElementType::Int64 &&
        x.type != ElementType::Int32)
        return c.fail(Status::Unsupported, "reduction '%.*s' on %s", (int)r.size, r.data, element_type_name(x.type));
    c.state = st;
    *state = st;
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}

inline bool same_dims(const TensorDesc& a, const TensorDesc& b) {
    if (a.rank != b.rank) return false;
    for (int d = 0; d < a.rank; ++d) if (a.dims[d] != b.dims[d]) return false;
    return true;
}

template <class T>
void scatter_reduce(T* dst, const T* src, size_t count, ScatterReduction r) {
    for (size_t i = 0; i < count; ++i) {
        T& a = dst[i];
        T v = src[i];
        switch (r) {
            case ScatterReduction::Add: a += v; break;
            case ScatterReduction::Mul: a *= v; break;
            case ScatterReduction::Max: a = a != a ? a : (v != v || v > a) ? v : a; break;   // NaN propagates
            case ScatterReduction::Min: a = a != a ? a : (v != v || v < a) ? v : a; break;
            default: a = v; break;
        }
    }
}

// Applies `count` updates at src to dst.
inline void scatter_apply(unsigned char* dst, const unsigned char* src, size_t count, ElementType type, ScatterReduction r) {
    if (r == ScatterReduction::None) std::memcpy(dst, src, count * element_size(type));
    else if (type == ElementType::Float32) scatter_reduce(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src), count, r);
    else if (type == ElementType::Int64) scatter_reduce(reinterpret_cast<int64_t*>(dst), reinterpret_cast<const int64_t*>(src), count, r);
    else scatter_reduce(reinterpret_cast<int32_t*>(dst), reinterpret_cast<const int32_t*>(src), count, r);
}

inline Status prepare_scatter_elements(PrepareContext& c) {
    bool legacy = c.node_ref().op == StringView("Scatter");
    if (legacy && c.opset >= 11) return c.fail(Status::Unsupported, "deprecated from opset 11 (ScatterElements replaces it)");
    TESSEL_TRY(require_opset(c, legacy ? 9 : 11));
    ScatterState* st = nullptr;
    TESSEL_TRY(prepare_scatter(c, &st));
    if (!same_dims(c.inputs[2], c.inputs[1])) return c.fail(Status::InvalidArgument, "updates and indices differ in shape");
    return check_elements_indices(c, c.inputs[0], c.inputs[1], &st->axis);
}

inline Status run_scatter_elements(const RunContext& c) {
    const ScatterState& st = *static_cast<const ScatterState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    const TensorView& indices = c.inputs[1];
    int64_t bound = x.dims[st.axis];
    TESSEL_TRY(check_run_indices(c, indices, &bound, 1));
    TESSEL_TRY(run_copy(c));
    int64_t strides[kMaxRank];
    dense_strides(x, strides);
    size_t size = element_size(x.type);
    const unsigned char* updates = c.inputs[2].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    int64_t step = strides[st.axis];
    for_each_along_axis(indices.desc, strides, st.axis, [&](uint64_t e, int64_t base) {
        int64_t k = wrap_index(load_index(indices.data, indices.desc.type, e), bound);
        scatter_apply(dst + (size_t)(base + k * step) * size, updates + e * size, 1, x.type, st.reduction);
    });
    return Status::Ok;
}

inline Status prepare_scatter_nd(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 11));
    ScatterState* st = nullptr;
    TESSEL_TRY(prepare_scatter(c, &st));
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& indices = c.inputs[1];
    if (x.rank < 1 || indices.rank < 1)
        return c.fail(Status::InvalidArgument, "data (rank %u) and indices (rank %u) need rank 1 or more", x.rank, indices.rank);
    int64_t k = indices.dims[indices.rank - 1];
    if (k > x.rank) return c.fail(Status::InvalidArgument, "indices' last dimension %lld exceeds data's rank %u", (long long)k, x.rank);
    TensorDesc want;
    want.type = x.type;
    for (int d = 0; d + 1 < indices.rank; ++d) want.dims[want.rank++] = indices.dims[d];
    for (int64_t d = k; d < x.rank && want.rank < kMaxRank; ++d) want.dims[want.rank++] = x.dims[d];
    if (indices.rank - 1 + x.rank - k > kMaxRank || !same_dims(c.inputs[2], want))
        return c.fail(Status::InvalidArgument, "updates must have shape indices.shape[:-1] + data.shape[%lld:]", (long long)k);
    return check_known_indices(c, 1, x.dims, (uint64_t)k);
}

inline Status run_scatter_nd(const RunContext& c) {
    const ScatterState& st = *static_cast<const ScatterState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    const TensorView& indices = c.inputs[1];
    int64_t k = indices.desc.dims[indices.desc.rank - 1];
    if (k) TESSEL_TRY(check_run_indices(c, indices, x.dims, (uint64_t)k));
    TESSEL_TRY(run_copy(c));
    int64_t strides[kMaxRank];
    dense_strides(x, strides);
    uint64_t tuples = dims_product(indices.desc, 0, indices.desc.rank - 1);
    size_t size = element_size(x.type), count = (size_t)dims_product(x, (int)k, x.rank);
    const unsigned char* updates = c.inputs[2].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    if (!count) return Status::Ok;
    for (uint64_t t = 0; t < tuples; ++t) {
        int64_t offset = tuple_offset(indices, t, k, x.dims, strides);
        scatter_apply(dst + (size_t)offset * size, updates + t * count * size, count, x.type, st.reduction);
    }
    return Status::Ok;
}

}  // namespace detail

// >>one hot and reverse sequence
// OneHot: indices of any number type (floats truncated toward zero, as ONNX casts them to
// int64), depth a constant, values [off, on] of any type. An index outside [-depth, depth)
// (outside [0, depth) before opset 11) gives a row of off values, as ONNX specifies.
// ReverseSequence: the first sequence_lens[b] steps of each batch reversed, the rest copied.
namespace detail {

inline bool number_type(ElementType t) {
    return t == ElementType::Float32 || t == ElementType::Int64 || t == ElementType::Int32 || t == ElementType::Int8 ||
           t == ElementType::UInt8;
}

// Element i of a number_type tensor as int64; false for a float that is NaN or out of range.
inline bool load_int64(const void* data, ElementType type, uint64_t i, int64_t* out) {
    switch (type) {
        case ElementType::Float32: {
            float f = static_cast<const float*>(data)[i];
            if (!(f >= -9.2233720e18f && f < 9.2233720e18f)) return false;   // [-2^63, 2^63); NaN fails too
            *out = (int64_t)f;
            return true;
        }
        case ElementType::Int64: *out = static_cast<const int64_t*>(data)[i]; return true;
        case ElementType::Int32: *out = static_cast<const int32_t*>(data)[i]; return true;
        case ElementType::Int8: *out = static_cast<const int8_t*>(data)[i]; return true;
        default: *out = static_cast<const uint8_t*>(data)[i]; return true;
    }
}

struct OneHotState {
    int64_t depth = 0, axis = 0;
    bool wrap_negative = true;
};

inline Status prepare_one_hot(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 9));
    TESSEL_TRY(check_tensor_inputs(c, 3, 3, 3));
    for (uint32_t i = 0; i < 2; ++i)
        if (!number_type(c.inputs[i].type))
            return c.fail(Status::Unsupported, "input %u is %s (a number type expected)", i, element_type_name(c.inputs[i].type));
    const TensorDesc& indices = c.inputs[0];
    const TensorDesc& depth = c.inputs[1];
    const TensorDesc& values = c.inputs[2];
    if (depth.rank > 1 || (depth.rank == 1 && depth.dims[0] != 1))
        return c.fail(Status::InvalidArgument, "depth must hold one value");
    if (values.rank != 1 || values.dims[0] != 2)
        return c.fail(Status::InvalidArgument, "values must be [off_value, on_value]");
    int64_t axis = 0, raw = c.attribute_int("axis", -1);
    if (!normalize_axis(raw, indices.rank + 1, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)raw, indices.rank + 1);
    if (indices.rank + 1 > kMaxRank) return c.fail(Status::LimitExceeded, "output rank %u (at most %d)", indices.rank + 1, kMaxRank);
    const void* known = tensor_value(c, 1);
    if (!known) return c.fail(Status::Unsupported, "data-dependent shape: input 1 (depth) is not a constant");
    int64_t d = 0;
    if (!load_int64(known, depth.type, 0, &d)) return c.fail(Status::InvalidArgument, "depth is not a number of classes");
    if (d < 0) return c.fail(Status::InvalidArgument, "depth %lld is negative", (long long)d);
    OneHotState* st = new_state<OneHotState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = OneHotState{d, axis, c.opset >= 11};
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = TensorDesc();
    y.type = values.type;
    for (int i = 0; i <= indices.rank; ++i)
        y.dims[y.rank++] = i < axis ? indices.dims[i] : i == axis ? d : indices.dims[i - 1];
    return check_output_desc(c, 0);
}

inline Status run_one_hot(const RunContext& c) {
    const OneHotState& st = *static_cast<const OneHotState*>(c.state);
    const TensorView& indices = c.inputs[0];
    size_t size = element_size(c.inputs[2].desc.type);
    const unsigned char* off = c.inputs[2].as<const unsigned char>();
    const unsigned char* on = off + size;
    unsigned char* y = c.outputs[0].as<unsigned char>();
    uint64_t total = c.outputs[0].elements();
    for (uint64_t e = 0; e < total; ++e) std::memcpy(y + e * size, off, size);
    uint64_t inner = dims_product(indices.desc, (int)st.axis, indices.desc.rank), n = indices.elements();
    for (uint64_t e = 0; e < n; ++e) {
        int64_t k = 0;
        if (!load_int64(indices.data, indices.desc.type, e, &k)) continue;
        if (k < 0 && st.wrap_negative) k += st.depth;
        if (k < 0 || k >= st.depth) continue;
        uint64_t outer = e / inner, i = e % inner;
        std::memcpy(y + ((outer * (uint64_t)st.depth + (uint64_t)k) * inner + i) * size, on, size);
    }
    return Status::Ok;
}

struct ReverseSequenceState {
    int64_t batch_axis = 1;
};

inline Status prepare_reverse_sequence(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 10));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    TESSEL_TRY(index_type(c, 1));
    const TensorDesc& x = c.inputs[0];
    int64_t batch_axis = c.attribute_int("batch_axis", 1), time_axis = c.attribute_int("time_axis", 0);
    if (x.rank < 2) return c.fail(Status::InvalidArgument, "input has rank %u (2 or more expected)", x.rank);
    if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) || batch_axis == time_axis)
        return c.fail(Status::InvalidArgument, "batch_axis %lld and time_axis %lld must be 0 and 1", (long long)batch_axis,
                      (long long)time_axis);
    const TensorDesc& lens = c.inputs[1];
    if (lens.rank != 1 || lens.dims[0] != x.dims[batch_axis])
        return c.fail(Status::InvalidArgument, "sequence_lens must be 1-D with the batch size %lld", (long long)x.dims[batch_axis]);
    if (const void* known = tensor_value(c, 1))
        for (int64_t b = 0; b < lens.dims[0]; ++b) {
            int64_t n = load_index(known, lens.type, (uint64_t)b);
            if (n < 0 || n > x.dims[1 - batch_axis])
                return c.fail(Status::InvalidArgument, "sequence length %lld out of range 0..%lld", (long long)n,
                              (long long)x.dims[1 - batch_axis]);
        }
    ReverseSequenceState* st = new_state<ReverseSequenceState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->batch_axis = batch_axis;
    c.state = st;
    c.outputs[0] = x;
    return Status::Ok;
}

inline Status run_reverse_sequence(const RunContext& c) {
    const ReverseSequenceState& st = *static_cast<const ReverseSequenceState*>(c.state);
    const TensorDesc& x = c.inputs[0].desc;
    const TensorView& lens = c.inputs[1];
    int64_t batches = x.dims[st.batch_axis], steps = x.dims[1 - st.batch_axis];
    for (int64_t b = 0; b < batches; ++b) {   // all first: no partial output
        int64_t n = load_index(lens.data, lens.desc.type, (uint64_t)b);
        if (n < 0 || n > steps)
            return c.fail(Status::InvalidArgument, "sequence length %lld out of range 0..%lld", (long long)n, (long long)steps);
    }
    size_t row = (size_t)dims_product(x, 2, x.rank) * element_size(x.type);
    const unsigned char* src = c.inputs[0].as<const unsigned char>();
    unsigned char* dst = c.outputs[0].as<unsigned char>();
    if (!row) return Status::Ok;
    for (int64_t b = 0; b < batches; ++b) {
        int64_t n = load_index(lens.data, lens.desc.type, (uint64_t)b);
        for (int64_t t = 0; t < steps; ++t) {
            int64_t from = t < n ? n - 1 - t : t;
            int64_t to_row = st.batch_axis ? t * batches + b : b * steps + t;
            int64_t from_row = st.batch_axis ? from * batches + b : b * steps + from;
            std::memcpy(dst + (size_t)to_row * row, src + (size_t)from_row * row, row);
        }
    }
    return Status::Ok;
}

}  // namespace detail

// >>top-k
// TopK: the k largest (or smallest) along axis, sorted, ties to the lower index as ONNX
// specifies; NaN counts as the largest value. k is an attribute before opset 10 and a
// constant input from it. Each line is merge sorted (stable) in per-thread scratch.
namespace detail {

struct TopKState {
    int64_t outer = 0, count = 0, inner = 0, k = 0;
    uint64_t slots = 1;
    bool largest = true;
};

inline Status prepare_top_k(PrepareContext& c) {
    bool k_input = c.opset >= 10;
    TESSEL_TRY(check_tensor_inputs(c, k_input ? 2 : 1, k_input ? 2 : 1, k_input ? 2 : 1, 2));
    const TensorDesc& x = c.inputs[0];
    if (!visit_numeric_type(x.type, [](auto) {}))   // float16 and bfloat16 go through float32
        return c.fail(Status::Unsupported, "input 0 is %s (float32, double or an integer expected)", element_type_name(x.type));
    int64_t axis = 0, raw = c.attribute_int("axis", -1);
    if (x.rank < 1 || !normalize_axis(raw, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)raw, x.rank);
    int64_t k = 0;
    if (k_input) {
        IntValues v;
        TESSEL_TRY(int_input(c, 1, &v));
        if (v.count != 1) return c.fail(Status::InvalidArgument, "K must hold one value, holds %llu", (unsigned long long)v.count);
        k = v[0];
    } else {
        const Attribute* a = c.attribute("k");
        if (!a || a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'k' is missing");
        k = a->i;
    }
    if (k < 0 || k > x.dims[axis])
        return c.fail(Status::InvalidArgument, "k %lld out of range 0..%lld", (long long)k, (long long)x.dims[axis]);
    TopKState* st = new_state<TopKState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->outer = (int64_t)dims_product(x, 0, (int)axis);
    st->count = x.dims[axis];
    st->inner = (int64_t)dims_product(x, (int)axis + 1, x.rank);
    st->k = k;
    st->largest = c.opset < 11 || c.attribute_int("largest", 1) != 0;
    st->slots = c.threads ? c.threads : 1;
    c.state = st;
    for (uint32_t i = 0; i < 2; ++i) {
        c.outputs[i] = x;
        c.outputs[i].dims[axis] = k;
    }
    c.outputs[1].type = ElementType::Int64;
    c.scratch_bytes = (size_t)st->slots * (size_t)st->count * 2 * sizeof(int64_t);
    return Status::Ok;
}

// Whether element a goes before element b (NaN is the largest; equal ones keep their order).
template <class T>
bool top_k_before(T a, T b, bool largest) {
    if (largest) return a > b || (a != a && b == b);
    return a < b || (b != b && a == a);
}

template <class T>
void run_top_k_typed(const RunContext& c, const TopKState& st) {
    const T* x = c.inputs[0].as<const T>();
    T* values = c.outputs[0].as<T>();
    int64_t* indices = c.outputs[1].as<int64_t>();
    int64_t* scratch = static_cast<int64_t*>(c.scratch);
    nn_parallel(c, (uint64_t)(st.outer * st.inner), [&](uint64_t slot, uint64_t begin, uint64_t end) {
        int64_t* order = scratch + slot * 2 * (uint64_t)st.count;
        int64_t* other = order + st.count;
        for (uint64_t line = begin; line < end; ++line) {
            int64_t o = (int64_t)line / st.inner, i = (int64_t)line % st.inner;
            const T* xl = x + o * st.count * st.inner + i;
            for (int64_t j = 0; j < st.count; ++j) order[j] = j;
            int64_t* from = order;
            int64_t* to = other;
            for (int64_t width = 1; width < st.count; width *= 2) {   // bottom-up merge sort, stable
                for (int64_t lo = 0; lo < st.count; lo += 2 * width) {
                    int64_t mid = lo + width < st.count ? lo + width : st.count;
                    int64_t hi = lo + 2 * width < st.count ? lo + 2 * width : st.count;
                    int64_t a = lo, b = mid, w = lo;
                    while (a < mid && b < hi)
                        to[w++] = top_k_before(xl[from[b] * st.inner], xl[from[a] * st.inner], st.largest) ? from[b++] : from[a++];
                    while (a < mid) to[w++] = from[a++];
                    while (b < hi) to[w++] = from[b++];
                }
                int64_t* t = from;
                from = to;
                to = t;
            }
            int64_t base = o * st.k * st.inner + i;
            for (int64_t j = 0; j < st.k; ++j) {
                values[base + j * st.inner] = xl[from[j] * st.inner];
                indices[base + j * st.inner] = from[j];
            }
        }
    }, st.slots);
}

inline Status run_top_k(const RunContext& c) {
    const TopKState& st = *static_cast<const TopKState*>(c.state);
    visit_numeric_type(c.inputs[0].desc.type, [&](auto type) { run_top_k_typed<decltype(type)>(c, st); });
    return Status::Ok;
}

}  // namespace detail

// >>more normalizations
// LpNormalization (p 1 or 2 along axis; a zero norm gives zeros), MeanVarianceNormalization
// ((x - mean) / (std + 1e-9) over `axes`, as ONNX's function body), RMSNormalization (opset
// 23) and GroupNormalization (scale and bias per group in opsets 18-20, per channel from 21).
// Moments are taken in double, in two passes; stash_type may ask for float or double.
namespace detail {

inline Status check_stash_type(PrepareContext& c) {
    int64_t stash = c.attribute_int("stash_type", 1);
    if (stash != 1 && stash != 11)   // float or double: what the double accumulation gives
        return c.fail(Status::Unsupported, "stash_type %lld (float or double only)", (long long)stash);
    return Status::Ok;
}

struct LpNormState {
    int64_t outer = 0, count = 0, inner = 0, p = 2;
};

inline Status prepare_lp_norm(PrepareContext& c) {
    TESSEL_TRY(nn_count(c, 1, 1, 1));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    int axis = 0;
    int64_t raw = c.attribute_int("axis", -1), p = c.attribute_int("p", 2);
    if (x.rank < 1 || !nn_axis(raw, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)raw, x.rank);
    if (p != 1 && p != 2) return c.fail(Status::InvalidArgument, "p %lld (1 or 2 expected)", (long long)p);
    LpNormState* st = nn_state<LpNormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = LpNormState{nn_product(x, 0, axis), x.dims[axis], nn_product(x, axis + 1, x.rank), p};
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}

inline Status run_lp_norm(const RunContext& c) {
    const LpNormState& st = *static_cast<const LpNormState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    nn_parallel(c, (uint64_t)(st.outer * st.inner), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t line = begin; line < end; ++line) {
            int64_t base = (int64_t)line / st.inner * st.count * st.inner + (int64_t)line % st.inner;
            double sum = 0;
            for (int64_t i = 0; i < st.count; ++i) {
                double v = x[base + i * st.inner];
                sum += st.p == 1 ? std::fabs(v) : v * v;
            }
            double norm = st.p == 1 ? sum : std::sqrt(sum);
            float scale = norm > 0 ? (float)(1.0 / norm) : 0.0f;
            if (norm != norm) scale = NAN;
            for (int64_t i = 0; i < st.count; ++i) y[base + i * st.inner] = x[base + i * st.inner] * scale;
        }
    });
    return Status::Ok;
}

struct MvnState {
    TensorDesc kept;   // X's shape with the normalized axes as 1
    int64_t groups = 0, count = 0;
};

inline Status prepare_mvn(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 9));
    TESSEL_TRY(nn_count(c, 1, 1, 1));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    static const int64_t kDefaultAxes[] = {0, 2, 3};
    Span<const int64_t> axes = c.attribute("axes") ? c.attribute_ints("axes") : Span<const int64_t>(kDefaultAxes, 3);
    MvnState* st = nn_state<MvnState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->kept = x;
    bool reduced[kMaxRank] = {};
    for (size_t i = 0; i < axes.size; ++i) {
        int axis = 0;
        if (!nn_axis(axes[i], x.rank, &axis))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)axes[i], x.rank);
        if (reduced[axis]) return c.fail(Status::InvalidArgument, "axis %d is repeated", axis);
        reduced[axis] = true;
        st->kept.dims[axis] = 1;
    }
    st->groups = nn_product(st->kept, 0, x.rank);
    st->count = st->groups ? nn_product(x, 0, x.rank) / st->groups : 0;
    c.outputs[0] = x;
    c.in_place = true;
    c.scratch_bytes = (size_t)st->groups * 2 * sizeof(double);
    return Status::Ok;
}

inline Status run_mvn(const RunContext& c) {
    const MvnState& st = *static_cast<const MvnState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    double* mean = static_cast<double*>(c.scratch);
    double* scale = mean + st.groups;
    const TensorDesc* kept = &st.kept;
    const TensorDesc& xd = c.inputs[0].desc;
    for (int64_t g = 0; g < st.groups; ++g) mean[g] = scale[g] = 0;
    for_each_broadcast(xd, &kept, 1, [&](uint64_t e, const int64_t* o) { mean[o[0]] += x[e]; });
    for (int64_t g = 0; g < st.groups; ++g) mean[g] /= (double)st.count;
    for_each_broadcast(xd, &kept, 1, [&](uint64_t e, const int64_t* o) {
        double d = x[e] - mean[o[0]];
        scale[o[0]] += d * d;
    });
    for (int64_t g = 0; g < st.groups; ++g) scale[g] = 1.0 / (std::sqrt(scale[g] / (double)st.count) + 1e-9);
    for_each_broadcast(xd, &kept, 1, [&](uint64_t e, const int64_t* o) {
        y[e] = (float)((x[e] - mean[o[0]]) * scale[o[0]]);
    });
    return Status::Ok;
}

struct RmsNormState {
    TensorDesc row;   // the normalized shape
    int64_t rows = 0, inner = 0;
    float epsilon = 1e-5f;
};

inline Status prepare_rms_norm(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 23));
    TESSEL_TRY(nn_count(c, 2, 2, 1));
    for (uint32_t i = 0; i < 2; ++i) TESSEL_TRY(nn_float(c, i));
    TESSEL_TRY(check_stash_type(c));
    const TensorDesc& x = c.inputs[0];
    int axis = 0;
    int64_t raw = c.attribute_int("axis", -1);
    if (x.rank < 1 || !nn_axis(raw, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)raw, x.rank);
    RmsNormState* st = nn_state<RmsNormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->row = x;
    st->row.rank = (uint8_t)(x.rank - axis);
    for (int i = axis; i < x.rank; ++i) st->row.dims[i - axis] = x.dims[i];
    if (!broadcasts_to(c.inputs[1], st->row))
        return c.fail(Status::InvalidArgument, "scale does not broadcast to the normalized shape");
    st->rows = nn_product(x, 0, axis);
    st->inner = nn_product(x, axis, x.rank);
    st->epsilon = c.attribute_float("epsilon", 1e-5f);
    c.outputs[0] = x;
    c.scratch_bytes = (size_t)st->inner * sizeof(float);
    c.in_place = true;
    return Status::Ok;
}

inline Status run_rms_norm(const RunContext& c) {
    const RmsNormState& st = *static_cast<const RmsNormState*>(c.state);
    float* scale = static_cast<float*>(c.scratch);
    const float* w = c.inputs[1].as<float>();
    const TensorDesc* in = &c.inputs[1].desc;
    for_each_broadcast(st.row, &in, 1, [&](uint64_t e, const int64_t* o) { scale[e] = w[o[0]]; });
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    nn_parallel(c, (uint64_t)st.rows, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t r = begin; r < end; ++r) {
            const float* xr = x + (int64_t)r * st.inner;
            float* yr = y + (int64_t)r * st.inner;
            double squares = 0;
            for (int64_t j = 0; j < st.inner; ++j) squares += (double)xr[j] * xr[j];
            float inv = (float)(1.0 / std::sqrt(squares / (double)st.inner + (double)st.epsilon));
            for (int64_t j = 0; j < st.inner; ++j) yr[j] = xr[j] * inv * scale[j];
        }
    });
    return Status::Ok;
}

struct GroupNormState {
    int64_t batch = 0, groups = 0, channels_per_group = 0, spatial = 0;
    float epsilon = 1e-5f;
    bool per_channel = true;   // scale and bias per channel (opset 21), else per group
};

inline Status prepare_group_norm(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 18));
    TESSEL_TRY(nn_count(c, 3, 3, 1));
    for (uint32_t i = 0; i < 3; ++i) TESSEL_TRY(nn_float(c, i));
    if (c.opset >= 21) TESSEL_TRY(check_stash_type(c));
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 2) return c.fail(Status::InvalidArgument, "X must be N x C x ...");
    const Attribute* a = c.attribute("num_groups");
    if (!a || a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'num_groups' is missing");
    int64_t groups = a->i, channels = x.dims[1];
    if (groups < 1 || channels % groups != 0)
        return c.fail(Status::InvalidArgument, "num_groups %lld does not divide %lld channels", (long long)groups,
                      (long long)channels);
    bool per_channel = c.opset >= 21;
    int64_t want = per_channel ? channels : groups;
    for (uint32_t i = 1; i < 3; ++i)
        if (c.inputs[i].rank != 1 || c.inputs[i].dims[0] != want)
            return c.fail(Status::InvalidArgument, "input %u must have %lld elements (one per %s at opset %u)", i,
                          (long long)want, per_channel ? "channel" : "group", c.opset);
    GroupNormState* st = nn_state<GroupNormState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = GroupNormState{x.dims[0], groups, channels / groups, nn_product(x, 2, x.rank), c.attribute_float("epsilon", 1e-5f),
                         per_channel};
    c.outputs[0] = x;
    c.in_place = true;
    return Status::Ok;
}

inline Status run_group_norm(const RunContext& c) {
    const GroupNormState& st = *static_cast<const GroupNormState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const float *scale = c.inputs[1].as<float>(), *bias = c.inputs[2].as<float>();
    float* y = c.outputs[0].as<float>();
    int64_t size = st.channels_per_group * st.spatial;
    nn_parallel(c, (uint64_t)(st.batch * st.groups), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t block = begin; block < end; ++block) {
            int64_t g = (int64_t)block % st.groups;
            const float* xb = x + (int64_t)block * size;
            float* yb = y + (int64_t)block * size;
            float mean, inv_std;
            row_moments(xb, size, st.epsilon, &mean, &inv_std);
            for (int64_t k = 0; k < st.channels_per_group; ++k) {
                int64_t p = st.per_channel ? g * st.channels_per_group + k : g;
                // (x - mean) first: x * a + (bias - mean * a) cancels badly when |mean| >> std,
                // and differently where the compiler fuses the multiply-add (AArch64).
                float a = scale[p] * inv_std, b = bias[p];
                for (int64_t s = 0; s < st.spatial; ++s) yb[k * st.spatial + s] = (xb[k * st.spatial + s] - mean) * a + b;
            }
        }
    });
    return Status::Ok;
}

}  // namespace detail

// >>loss ops
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12): scores [N, C, d1..dk],
// target [N, d1..dk] (int64 or int32), optional weight [C]. A target equal to ignore_index
// counts with weight 0; reduction none gives the loss per target, sum their sum, mean the
// sum over the kept targets' weights (ONNX's definition). SoftmaxCrossEntropyLoss takes the
// NLL of log_softmax over C (its optional second output). A target outside [0, C) that is not
// ignored is InvalidArgument.
namespace detail {

enum class LossReduction : uint8_t { None, Sum, Mean };

struct LossState {
    int64_t batch = 0, classes = 0, inner = 0;   // N, C, d1 * ... * dk
    int64_t ignore_index = 0;
    bool has_ignore = false, softmax = false;
    LossReduction reduction = LossReduction::Mean;
};

inline bool loss_target_ok(int64_t t, int64_t classes, const LossState& st) {
    return (st.has_ignore && t == st.ignore_index) || (t >= 0 && t < classes);
}

inline Status prepare_loss(PrepareContext& c, bool softmax) {
    TESSEL_TRY(require_opset(c, 12));
    TESSEL_TRY(check_tensor_inputs(c, 2, 3, 2, 0));
    if (c.num_outputs > (softmax ? 2u : 1u))
        return c.fail(Status::InvalidArgument, "expects 1 to %u outputs, has %u", softmax ? 2u : 1u, c.num_outputs);
    TESSEL_TRY(nn_float(c, 0));
    TESSEL_TRY(nn_float(c, 2, true));
    TESSEL_TRY(index_type(c, 1));
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& target = c.inputs[1];
    if (x.rank < 2) return c.fail(Status::InvalidArgument, "scores must be N x C x ... (rank %u)", x.rank);
    bool match = target.rank + 1 == x.rank;
    for (int d = 0; match && d < target.rank; ++d) match = target.dims[d] == x.dims[d == 0 ? 0 : d + 1];
    if (!match) return c.fail(Status::InvalidArgument, "target must have the scores' shape without dimension 1 (C)");
    if (c.has_input(2) && (c.inputs[2].rank != 1 || c.inputs[2].dims[0] != x.dims[1]))
        return c.fail(Status::InvalidArgument, "weight must have %lld elements (one per class)", (long long)x.dims[1]);
    LossState* st = new_state<LossState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    StringView r = c.attribute_string("reduction", "mean");
    if (r == StringView("none")) st->reduction = LossReduction::None;
    else if (r == StringView("sum")) st->reduction = LossReduction::Sum;
    else if (r != StringView("mean")) return c.fail(Status::InvalidArgument, "unknown reduction '%.*s'", (int)r.size, r.data);
    const Attribute* ignore = c.attribute("ignore_index");
    st->has_ignore = ignore && ignore->kind == AttributeKind::Int;
    st->ignore_index = st->has_ignore ? ignore->i : 0;
    st->batch = x.dims[0];
    st->classes = x.dims[1];
    st->inner = nn_product(x, 2, x.rank);
    st->softmax = softmax;
    if (const void* known = tensor_value(c, 1)) {
        uint64_t n = 0;
        (void)desc_elements(target, &n);
        for (uint64_t i = 0; i < n; ++i) {
            int64_t t = load_index(known, target.type, i);
            if (!loss_target_ok(t, st->classes, *st))
                return c.fail(Status::InvalidArgument, "target %lld out of range for %lld classes", (long long)t,
                              (long long)st->classes);
        }
    }
    c.state = st;
    c.outputs[0] = TensorDesc();
    c.outputs[0].type = ElementType::Float32;
    if (st->reduction == LossReduction::None) {
        c.outputs[0] = target;
        c.outputs[0].type = ElementType::Float32;
    }
    if (c.num_outputs > 1) c.outputs[1] = x;
    return Status::Ok;
}
inline Status prepare_nll_loss(PrepareContext& c) { return prepare_loss(c, false); }
inline Status prepare_softmax_cross_entropy(PrepareContext& c) { return prepare_loss(c, true); }

inline Status run_loss(const RunContext& c) {
    const LossState& st = *static_cast<const LossState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const TensorView& target = c.inputs[1];
    const float* weight = c.num_inputs > 2 && c.inputs[2].data ? c.inputs[2].as<float>() : nullptr;
    uint64_t n = target.elements();
    for (uint64_t i = 0; i < n; ++i) {   // all first: no partial output
        int64_t t = load_index(target.data, target.desc.type, i);
        if (!loss_target_ok(t, st.classes, st))
            return c.fail(Status::InvalidArgument, "target %lld out of range for %lld classes", (long long)t,
                          (long long)st.classes);
    }
    float* log_prob = st.softmax && c.num_outputs > 1 ? c.outputs[1].as<float>() : nullptr;
    float* loss = c.outputs[0].as<float>();
    double total = 0, weights = 0;
    for (int64_t b = 0; b < st.batch; ++b)
        for (int64_t d = 0; d < st.inner; ++d) {
            const float* xl = x + b * st.classes * st.inner + d;   // class c at xl[c * inner]
            double shift = 0;   // log_softmax(x)[c] = x[c] - shift
            if (st.softmax && st.classes) {
                float top = xl[0];
                for (int64_t k = 1; k < st.classes; ++k) top = xl[k * st.inner] > top ? xl[k * st.inner] : top;
                double sum = 0;
                for (int64_t k = 0; k < st.classes; ++k) sum += std::exp((double)xl[k * st.inner] - top);
                shift = top + std::log(sum);
                if (log_prob)
                    for (int64_t k = 0; k < st.classes; ++k)
                        log_prob[b * st.classes * st.inner + d + k * st.inner] = (float)(xl[k * st.inner] - shift);
            }
            uint64_t at = (uint64_t)(b * st.inner + d);
            int64_t t = load_index(target.data, target.desc.type, at);
            double w = 0, value = 0;
            if (!(st.has_ignore && t == st.ignore_index)) {
                w = weight ? weight[t] : 1.0;
                value = -((double)xl[t * st.inner] - shift) * w;
            }
            if (st.reduction == LossReduction::None) loss[at] = (float)value;
            total += value;
            weights += w;
        }
    if (st.reduction == LossReduction::Sum) loss[0] = (float)total;
    if (st.reduction == LossReduction::Mean) loss[0] = (float)(total / weights);
    return Status::Ok;
}

}  // namespace detail

namespace detail {
// The kernels of the sections above (gather and scatter through loss ops).
const OpKernel kIndexKernels[] = {
    {"GatherElements", prepare_gather_elements, run_gather_elements},
    {"GatherND", prepare_gather_nd, run_gather_nd},
    {"ScatterElements", prepare_scatter_elements, run_scatter_elements},
    {"Scatter", prepare_scatter_elements, run_scatter_elements},
    {"ScatterND", prepare_scatter_nd, run_scatter_nd},
    {"OneHot", prepare_one_hot, run_one_hot},
    {"ReverseSequence", prepare_reverse_sequence, run_reverse_sequence},
    {"TopK", prepare_top_k, run_top_k},
    {"LpNormalization", prepare_lp_norm, run_lp_norm},
    {"MeanVarianceNormalization", prepare_mvn, run_mvn},
    {"RMSNormalization", prepare_rms_norm, run_rms_norm},
    {"GroupNormalization", prepare_group_norm, run_group_norm},
    {"NegativeLogLikelihoodLoss", prepare_nll_loss, run_loss},
    {"SoftmaxCrossEntropyLoss", prepare_softmax_cross_entropy, run_loss},
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail

// >>control flow
// If, Loop and Scan. A body (an AttributeKind::Graph attribute: a Model its model owns, whose
// last outer_inputs inputs are the node's last inputs) is compiled by the node's prepare into
// a BodyProgram: the body prepared for the node's input descs (the common transformations;
// inputs known at compile time frozen, so they fold), its reference steps in topological order,
// and a plan that gives every value its own offset in the body's memory. That memory is part
// of the node's scratch: infer() allocates nothing, and the node runs with its body on the
// device that runs the node (HETERO keeps it one unit). The body's PreparedModel lives in a
// fixed buffer of the compiled model's arena (sized by a first prepare into a heap arena), so
// nothing needs destroying. Sequence-typed values are refused by the reader (types).
namespace detail {

constexpr uint32_t kMaxBodyInputs = kMaxNodePorts + 2;     // Loop's body: iteration, condition, the node's inputs
constexpr int64_t kMaxUnrolledIterations = 256;            // a Loop compiled per iteration (shapes that follow it)
constexpr int64_t kBodyFixedValue = INT64_MIN;             // a constant or an absent value

struct BodyProgram {
    const PreparedModel* prepared = nullptr;
    Span<const ProgramStep> steps;
    uint32_t value_count = 0;
    const int64_t* where = nullptr;   // per value: offset in memory, kBodyFixedValue, or -1 - body input index
    const uint32_t* outputs = nullptr;   // per body output: its value
    uint32_t output_count = 0;
    size_t table_bytes = 0;           // a pointer per value
    size_t memory_bytes = 0;          // the values
    size_t scratch_bytes = 0;         // the largest step's scratch
    size_t bytes() const { return table_bytes + memory_bytes + scratch_bytes; }
    const TensorDesc& output_desc(uint32_t i) const { return prepared->value_desc(outputs[i]); }
    // The output's value when it is a compile-time constant (nullptr otherwise).
    const void* output_constant(uint32_t i) const { return where[outputs[i]] == kBodyFixedValue ? prepared->constant(outputs[i]) : nullptr; }
};

inline size_t align_64(size_t n) { return (n + 63) & ~(size_t)63; }

inline size_t desc_bytes(const TensorDesc& d) {
    uint64_t n = 0;
    desc_elements(d, &n);
    return (size_t)(n * element_size(d.type));
}

inline const OpKernel* body_kernel(void*, StringView op) { return find_builtin_kernel(op); }

// The body attribute `name` of the node: a graph, else InvalidArgument.
inline Status body_attribute(PrepareContext& c, const char* name, const Model** body) {
    const Attribute* a = c.attribute(name);
    if (!a) return c.fail(Status::InvalidArgument, "attribute '%s' (a graph) is missing", name);
    if (a->kind != AttributeKind::Graph || !a->body) return c.fail(Status::InvalidArgument, "attribute '%s' must be a graph", name);
    *body = static_cast<const Model*>(a->body);
    if ((*body)->input_count() > kMaxBodyInputs)
        return c.fail(Status::LimitExceeded, "body '%s' has %u inputs (at most %u)", name, (*body)->input_count(), kMaxBodyInputs);
    return Status::Ok;
}

// Prepares `body` for its inputs' descs (and values, when known) and plans it.
inline Status compile_body(PrepareContext& c, const Model* body, const char* what, const TensorDesc* descs,
                           const void* const* values, BodyProgram* out) {
    uint32_t n = body->input_count();
    if (n > kMaxBodyInputs) return c.fail(Status::LimitExceeded, "body '%s' has %u inputs (at most %u)", what, n, kMaxBodyInputs);
    Tensor views[kMaxBodyInputs];
    InputValue frozen[kMaxBodyInputs];
    uint32_t frozen_count = 0;
    for (uint32_t i = 0; i < n; ++i) {
        if (!values || !values[i] || descs[i].type == ElementType::Undefined) continue;
        if (views[i].view(descs[i].type, Span<const int64_t>(descs[i].dims, descs[i].rank), const_cast<void*>(values[i])) != Status::Ok)
            continue;
        frozen[frozen_count++] = InputValue{body->input(i).name, &views[i]};
    }
    Limits limits;
    limits.max_tensor_elements = c.max_elements;
    limits.max_loop_iterations = c.max_loop_iterations;
    char error[kErrorMessageBytes] = {};
    size_t bytes = 0;
    {
        PreparedModel probe;   // the first prepare measures the arena the body needs
        Status s = detail_prepare::run(*body, Span<const InputShape>(), limits, body_kernel, nullptr, 1, &probe, error,
                                       Span<const InputValue>(frozen, frozen_count), true, descs);
        if (s != Status::Ok) return c.fail(s, "body '%s': %s", what, error);
        bytes = probe.model.arena.used() * 2 + (64u << 10);
    }
    void* buffer = c.arena->allocate(bytes, 64);
    void* holder = c.arena->allocate(sizeof(PreparedModel), alignof(PreparedModel));
    if (!buffer || !holder) return c.fail(Status::OutOfMemory, "out of memory compiling body '%s'", what);
    PreparedModel* p = new (holder) PreparedModel(buffer, bytes);
    Status s = detail_prepare::run(*body, Span<const InputShape>(), limits, body_kernel, nullptr, 1, p, error,
                                   Span<const InputValue>(frozen, frozen_count), true, descs);
    if (s != Status::Ok) return c.fail(s, "body '%s': %s", what, error);
    const Graph& g = p->model.graph;
    uint32_t values_count = p->value_count();
    int64_t* where = c.arena->allocate_array<int64_t>(values_count + 1);
    ProgramStep* steps = c.arena->allocate_array<ProgramStep>(g.node_count() + 1);
    uint32_t* outputs = c.arena->allocate_array<uint32_t>(p->model.output_count() + 1);
    if (!where || !steps || !outputs) return c.fail(Status::OutOfMemory, "out of memory compiling body '%s'", what);
    size_t memory = 0, scratch = 0;
    for (NodeId id = 0; id < g.node_count(); ++id) {
        const Node& node = g.node(id);
        for (uint32_t port = 0; port < node.num_outputs; ++port) {
            uint32_t v = p->value_id(id, port);
            if (node.op == StringView("Parameter")) {
                uint32_t k = body->find_input(node.name);
                where[v] = k == kNotFound ? kBodyFixedValue : -1 - (int64_t)k;
            } else if (is_free_op(node.op)) {
                where[v] = kBodyFixedValue;
            } else {
                where[v] = (int64_t)memory;
                memory += align_64(desc_bytes(p->value_desc(v)));
            }
        }
    }
    uint32_t step_count = 0;
    for (NodeId id : g.topological_order()) {
        const Node& node = g.node(id);
        if (is_free_op(node.op)) continue;
        uint32_t* reads = c.arena->allocate_array<uint32_t>(node.num_inputs + 1);
        uint32_t* writes = c.arena->allocate_array<uint32_t>(node.num_outputs + 1);
        if (!reads || !writes) return c.fail(Status::OutOfMemory, "out of memory compiling body '%s'", what);
        for (uint32_t k = 0; k < node.num_inputs; ++k) reads[k] = p->value_id(node.inputs[k].producer, node.inputs[k].port);
        for (uint32_t k = 0; k < node.num_outputs; ++k) writes[k] = p->value_id(id, k);
        ProgramStep& step = steps[step_count++];
        step = ProgramStep();
        step.node = id;
        step.kernel = "ref";
        step.reads = Span<const uint32_t>(reads, node.num_inputs);
        step.writes = Span<const uint32_t>(writes, node.num_outputs);
        step.scratch_bytes = p->kernel_scratch(id);
        if (step.scratch_bytes > scratch) scratch = step.scratch_bytes;
    }
    for (uint32_t i = 0; i < p->model.output_count(); ++i) {
        const Edge& e = g.node(p->model.output(i).node).inputs[0];
        outputs[i] = p->value_id(e.producer, e.port);
    }
    out->prepared = p;
    out->steps = Span<const ProgramStep>(steps, step_count);
    out->value_count = values_count;
    out->where = where;
    out->outputs = outputs;
    out->output_count = p->model.output_count();
    out->table_bytes = align_64((size_t)values_count * sizeof(void*) + 1);
    out->memory_bytes = memory;
    out->scratch_bytes = align_64(scratch);
    return Status::Ok;
}

// Runs a body once: `memory` is its bytes() of the node's scratch, inputs[i] body input i's
// data. Returns the value table (outputs: values[b.outputs[i]]).
inline Status run_body(const BodyProgram& b, void* memory, const void* const* inputs, const RunContext& r, void*** values_out) {
    void** values = static_cast<void**>(memory);
    unsigned char* base = static_cast<unsigned char*>(memory) + b.table_bytes;
    for (uint32_t v = 0; v < b.value_count; ++v) {
        int64_t w = b.where[v];
        if (w == kBodyFixedValue) values[v] = const_cast<void*>(b.prepared->constant(v));
        else if (w < 0) values[v] = const_cast<void*>(inputs[-1 - w]);
        else values[v] = base + w;
    }
    StepContext context;
    context.values = values;
    context.scratch = base + b.memory_bytes;
    context.threads = 1;
    context.error = r.error;
    context.body_profile = r.body_profile;
    for (const ProgramStep& step : b.steps) {
        uint64_t start = r.body_profile ? now_ns() : 0;
        Status s = b.prepared->run_kernel(step, context, 1);
        if (r.body_profile) r.body_profile->record(b.prepared->model.graph.node(step.node).name, step.kernel, now_ns() - start);
        if (s != Status::Ok) {
            if (r.error && !r.error[0]) (void)r.fail(s, "a body step failed");
            return s;
        }
    }
    *values_out = values;
    return Status::Ok;
}

inline void copy_bytes(void* to, const void* from, size_t bytes) {
    if (bytes && to != from && from) std::memmove(to, from, bytes);
}

// If: one compiled branch when the condition is known at compile time (the branch the node
// folds to), else both, the condition picking one at run time.
struct IfState {
    BodyProgram branch[2];
    int known = -1;   // 0 then, 1 else
};

inline Status if_prepare(PrepareContext& c) {
    static const char* const kNames[2] = {"then_branch", "else_branch"};
    const Model* body[2] = {nullptr, nullptr};
    for (int k = 0; k < 2; ++k) TESSEL_TRY(body_attribute(c, kNames[k], &body[k]));
    uint32_t outer = body[0]->outer_inputs;
    if (body[1]->outer_inputs != outer || c.num_inputs != 1 + outer || body[0]->input_count() != outer ||
        body[1]->input_count() != outer)
        return c.fail(Status::InvalidArgument, "has %u inputs; the branches take %u and %u inputs of which %u and %u are outer reads "
                      "(a branch has no inputs of its own)", c.num_inputs, body[0]->input_count(), body[1]->input_count(),
                      body[0]->outer_inputs, body[1]->outer_inputs);
    for (int k = 0; k < 2; ++k)
        if (body[k]->output_count() != c.num_outputs)
            return c.fail(Status::InvalidArgument, "%s has %u outputs, the node %u", kNames[k], body[k]->output_count(), c.num_outputs);
    uint64_t n = 0;
    if (c.inputs[0].type != ElementType::Bool || !desc_elements(c.inputs[0], &n) || n != 1)
        return c.fail(Status::InvalidArgument, "the condition must be one bool");
    IfState* state = new_state<IfState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    const void* cond = c.values ? c.values[0] : nullptr;
    if (cond) state->known = *static_cast<const uint8_t*>(cond) ? 0 : 1;
    int first = -1;
    size_t scratch = 0;
    for (int k = 0; k < 2; ++k) {
        if (state->known >= 0 && k != state->known) continue;
        TESSEL_TRY(compile_body(c, body[k], kNames[k], c.inputs + 1, c.values ? c.values + 1 : nullptr, &state->branch[k]));
        if (state->branch[k].bytes() > scratch) scratch = state->branch[k].bytes();
        if (first < 0) {
            first = k;
            for (uint32_t i = 0; i < c.num_outputs; ++i) c.outputs[i] = state->branch[k].output_desc(i);
            continue;
        }
        for (uint32_t i = 0; i < c.num_outputs; ++i) {
            if (same_desc(c.outputs[i], state->branch[k].output_desc(i))) continue;
            char a[96], b[96];
            describe(c.outputs[i], a, sizeof a);
            describe(state->branch[k].output_desc(i), b, sizeof b);
            return c.fail(Status::Unsupported, "output %u is %s from then_branch and %s from else_branch: a data-dependent shape", i, a, b);
        }
    }
    c.state = state;
    c.scratch_bytes = scratch;
    return Status::Ok;
}

inline Status if_run(const RunContext& r) {
    const IfState& state = *static_cast<const IfState*>(r.state);
    int k = state.known >= 0 ? state.known : (*r.inputs[0].as<const uint8_t>() ? 0 : 1);
    const BodyProgram& b = state.branch[k];
    const void* inputs[kMaxBodyInputs];
    for (uint32_t i = 1; i < r.num_inputs && i - 1 < kMaxBodyInputs; ++i) inputs[i - 1] = r.inputs[i].data;
    void** values = nullptr;
    TESSEL_TRY(run_body(b, r.scratch, inputs, r, &values));
    for (uint32_t i = 0; i < r.num_outputs; ++i) copy_bytes(r.outputs[i].data, values[b.outputs[i]], desc_bytes(r.outputs[i].desc));
    return Status::Ok;
}

// Loop: inputs M (trip count), cond, N carried values, then the outer reads; the body takes
// (iteration, cond, carried..., outer reads...) and gives (cond, carried..., K scan values).
// The body always runs with cond true (the loop stops before a false one), so cond is frozen
// to true in the body. Carried values keep their shapes; scan outputs need the number of
// iterations at compile time. A body whose shapes follow the iteration number (a Slice at
// it) is compiled once per iteration when the trip count is known and small.
struct LoopState {
    BodyProgram* bodies = nullptr;   // one, or one per iteration
    uint32_t body_count = 0;
    uint32_t carried = 0, scans = 0, outer = 0;
    bool has_trip = false, has_cond = false;
    int64_t iterations = -1;         // known at compile time (needed for scan outputs)
    uint64_t max_iterations = 0;
    size_t body_bytes = 0;           // the largest body's
    size_t* carried_bytes = nullptr; // per carried value
    size_t* scan_bytes = nullptr;    // per scan output, one iteration's
    size_t state_bytes = 0;          // one set of carried values
};

inline Status loop_prepare(PrepareContext& c) {
    const Model* body = nullptr;
    TESSEL_TRY(body_attribute(c, "body", &body));
    uint32_t outer = body->outer_inputs;
    if (c.num_inputs < outer) return c.fail(Status::InvalidArgument, "has %u inputs, its body reads %u outer values", c.num_inputs, outer);
    uint32_t formal = c.num_inputs - outer;
    uint32_t carried = formal > 2 ? formal - 2 : 0;
    if (body->input_count() != 2 + carried + outer)
        return c.fail(Status::InvalidArgument, "the body takes %u inputs, the node gives %u carried values (the body needs 2 + %u + %u outer)",
                      body->input_count() - outer, carried, carried, outer);
    if (body->output_count() < 1 + carried || c.num_outputs != body->output_count() - 1)
        return c.fail(Status::InvalidArgument, "the body has %u outputs, the node %u (the body gives cond, %u carried values, then the scan outputs)",
                      body->output_count(), c.num_outputs, carried);
    uint32_t scans = body->output_count() - 1 - carried;
    bool has_trip = formal > 0 && c.has_input(0), has_cond = formal > 1 && c.has_input(1);
    uint64_t n = 0;
    if (has_trip && (c.inputs[0].type != ElementType::Int64 || !desc_elements(c.inputs[0], &n) || n != 1))
        return c.fail(Status::InvalidArgument, "the trip count M must be one int64");
    if (has_cond && (c.inputs[1].type != ElementType::Bool || !desc_elements(c.inputs[1], &n) || n != 1))
        return c.fail(Status::InvalidArgument, "the condition must be one bool");
    const void* trip = has_trip && c.values ? c.values[0] : nullptr;
    const void* cond = has_cond && c.values ? c.values[1] : nullptr;
    int64_t trip_count = -1;
    if (trip) {
        std::memcpy(&trip_count, trip, 8);
        if (trip_count < 0) return c.fail(Status::InvalidArgument, "the trip count %lld is negative", (long long)trip_count);
        if ((uint64_t)trip_count > c.max_loop_iterations)
            return c.fail(Status::LimitExceeded, "the trip count %lld is above the limit (%llu)", (long long)trip_count,
                          (unsigned long long)c.max_loop_iterations);
    }
    LoopState* state = new_state<LoopState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    state->carried = carried;
    state->scans = scans;
    state->outer = outer;
    state->has_trip = has_trip;
    state->has_cond = has_cond;
    state->max_iterations = c.max_loop_iterations;
    // Body inputs: iteration (int64), cond (bool, frozen to true), carried, outer reads.
    TensorDesc descs[kMaxBodyInputs];
    const void* values[kMaxBodyInputs] = {};
    static const uint8_t kTrue = 1;
    descs[0] = TensorDesc();
    descs[0].type = ElementType::Int64;
    descs[1] = TensorDesc();
    descs[1].type = ElementType::Bool;
    values[1] = &kTrue;
    for (uint32_t i = 0; i < carried; ++i) {
        descs[2 + i] = c.inputs[2 + i];
        if (descs[2 + i].type == ElementType::Undefined) return c.fail(Status::InvalidArgument, "carried value %u is absent", i);
    }
    for (uint32_t i = 0; i < outer; ++i) {
        descs[2 + carried + i] = c.inputs[formal + i];
        values[2 + carried + i] = c.values ? c.values[formal + i] : nullptr;
    }
    state->bodies = c.arena->allocate_array<BodyProgram>(1);
    if (!state->bodies) return c.fail(Status::OutOfMemory, "out of memory");
    new (state->bodies) BodyProgram();
    state->body_count = 1;
    Status s = compile_body(c, body, "body", descs, values, &state->bodies[0]);
    if (s == Status::Unsupported && trip_count > 0 && trip_count <= kMaxUnrolledIterations) {
        // Shapes that follow the iteration number: a body per iteration, the number frozen.
        state->bodies = c.arena->allocate_array<BodyProgram>((size_t)trip_count);
        if (!state->bodies) return c.fail(Status::OutOfMemory, "out of memory");
        state->body_count = (uint32_t)trip_count;
        int64_t* numbers = c.arena->allocate_array<int64_t>((size_t)trip_count);
        if (!numbers) return c.fail(Status::OutOfMemory, "out of memory");
        for (int64_t i = 0; i < trip_count; ++i) {
            new (&state->bodies[i]) BodyProgram();
            numbers[i] = i;
            values[0] = &numbers[i];
            c.error[0] = 0;
            TESSEL_TRY(compile_body(c, body, "body", descs, values, &state->bodies[i]));
        }
        s = Status::Ok;
    }
    TESSEL_TRY(s);
    // Carried values keep their shapes; scan values are the same each iteration.
    for (uint32_t b = 0; b < state->body_count; ++b) {
        const BodyProgram& p = state->bodies[b];
        uint64_t one = 0;
        if (p.output_desc(0).type != ElementType::Bool || !desc_elements(p.output_desc(0), &one) || one != 1)
            return c.fail(Status::InvalidArgument, "the body's first output (the condition) must be one bool");
        for (uint32_t i = 0; i < carried; ++i)
            if (!same_desc(p.output_desc(1 + i), descs[2 + i])) {
                char a[96], d[96];
                describe(descs[2 + i], a, sizeof a);
                describe(p.output_desc(1 + i), d, sizeof d);
                return c.fail(Status::Unsupported, "loop-carried value %u changes from %s to %s (a shape that changes across iterations)", i, a, d);
            }
        for (uint32_t k = 0; k < scans; ++k)
            if (!same_desc(p.output_desc(1 + carried + k), state->bodies[0].output_desc(1 + carried + k)))
                return c.fail(Status::Unsupported, "scan output %u changes shape across iterations", k);
        if (p.bytes() > state->body_bytes) state->body_bytes = p.bytes();
    }
    // How many iterations run, when known: the trip count, unless the condition can stop it.
    const void* cond_out = state->bodies[0].output_constant(0);
    bool body_continues = cond_out && *static_cast<const uint8_t*>(cond_out);
    for (uint32_t b = 1; b < state->body_count && body_continues; ++b) {
        const void* o = state->bodies[b].output_constant(0);
        body_continues = o && *static_cast<const uint8_t*>(o);
    }
    bool starts = !has_cond || (cond && *static_cast<const uint8_t*>(cond));
    if (has_cond && cond && !starts) state->iterations = 0;
    else if (trip && starts && (!has_cond || body_continues)) state->iterations = trip_count;
    if (scans && state->iterations < 0)
        return c.fail(Status::Unsupported, "scan outputs whose length is the number of iterations, not known at compile time "
                      "(a data-dependent shape: give the trip count, and a condition that cannot stop the loop)");
    state->carried_bytes = c.arena->allocate_array<size_t>(carried + 1);
    state->scan_bytes = c.arena->allocate_array<size_t>(scans + 1);
    if (!state->carried_bytes || !state->scan_bytes) return c.fail(Status::OutOfMemory, "out of memory");
    for (uint32_t i = 0; i < carried; ++i) {
        c.outputs[i] = descs[2 + i];
        state->carried_bytes[i] = desc_bytes(descs[2 + i]);
        state->state_bytes += align_64(state->carried_bytes[i]);
    }
    for (uint32_t k = 0; k < scans; ++k) {
        TensorDesc d = state->bodies[0].output_desc(1 + carried + k);
        if (d.rank + 1u > kMaxRank) return c.fail(Status::LimitExceeded, "scan output %u has rank %u (at most %u)", k, d.rank + 1u, kMaxRank);
        state->scan_bytes[k] = desc_bytes(d);
        TensorDesc o;
        o.type = d.type;
        o.rank = (uint8_t)(d.rank + 1);
        o.dims[0] = state->iterations;
        for (uint32_t j = 0; j < d.rank; ++j) o.dims[j + 1] = d.dims[j];
        c.outputs[carried + k] = o;
    }
    c.state = state;
    c.scratch_bytes = state->body_bytes + 128 + 2 * state->state_bytes;
    return Status::Ok;
}

inline Status loop_run(const RunContext& r) {
    const LoopState& state = *static_cast<const LoopState*>(r.state);
    int64_t trip = -1;
    if (state.has_trip) {
        std::memcpy(&trip, r.inputs[0].data, 8);
        if (trip < 0) return r.fail(Status::InvalidArgument, "the trip count %lld is negative", (long long)trip);
        if ((uint64_t)trip > state.max_iterations)
            return r.fail(Status::LimitExceeded, "the trip count %lld is above the limit (%llu)", (long long)trip,
                          (unsigned long long)state.max_iterations);
    }
    bool cond = !state.has_cond || *r.inputs[1].as<const uint8_t>();
    unsigned char* scratch = static_cast<unsigned char*>(r.scratch);
    unsigned char* numbers = scratch + state.body_bytes;   // the iteration (int64) and cond (bool)
    unsigned char* sets[2] = {numbers + 128, numbers + 128 + state.state_bytes};
    const void* inputs[kMaxBodyInputs];
    inputs[0] = numbers;
    numbers[64] = 1;
    inputs[1] = numbers + 64;
    uint32_t formal = r.num_inputs - state.outer;
    for (uint32_t i = 0; i < state.outer; ++i) inputs[2 + state.carried + i] = r.inputs[formal + i].data;
    size_t offset = 0;
    for (uint32_t i = 0; i < state.carried; ++i) {
        copy_bytes(sets[0] + offset, r.inputs[2 + i].data, state.carried_bytes[i]);
        offset += align_64(state.carried_bytes[i]);
    }
    int current = 0;
    int64_t i = 0;
    for (; cond && (trip < 0 || i < trip); ++i) {
        if (!state.has_trip && (uint64_t)i >= state.max_iterations)
            return r.fail(Status::LimitExceeded, "the loop ran %lld iterations (the limit)", (long long)i);
        if (state.iterations >= 0 && i >= state.iterations) break;
        std::memcpy(numbers, &i, 8);
        offset = 0;
        for (uint32_t k = 0; k < state.carried; ++k) {
            inputs[2 + k] = sets[current] + offset;
            offset += align_64(state.carried_bytes[k]);
        }
        const BodyProgram& b = state.bodies[state.body_count > 1 ? (uint32_t)i : 0];
        void** values = nullptr;
        TESSEL_TRY(run_body(b, scratch, inputs, r, &values));
        if (state.has_cond) cond = *static_cast<const uint8_t*>(values[b.outputs[0]]) != 0;
        offset = 0;
        for (uint32_t k = 0; k < state.carried; ++k) {
            copy_bytes(sets[1 - current] + offset, values[b.outputs[1 + k]], state.carried_bytes[k]);
            offset += align_64(state.carried_bytes[k]);
        }
        for (uint32_t k = 0; k < state.scans; ++k)
            copy_bytes(r.outputs[state.carried + k].as<unsigned char>() + (size_t)i * state.scan_bytes[k],
                       values[b.outputs[1 + state.carried + k]], state.scan_bytes[k]);
        current = 1 - current;
    }
    if (state.iterations >= 0 && i != state.iterations)
        return r.fail(Status::InvalidArgument, "ran %lld iterations, the scan outputs were planned for %lld", (long long)i,
                      (long long)state.iterations);
    offset = 0;
    for (uint32_t k = 0; k < state.carried; ++k) {
        copy_bytes(r.outputs[k].data, sets[current] + offset, state.carried_bytes[k]);
        offset += align_64(state.carried_bytes[k]);
    }
    return Status::Ok;
}

// Scan: inputs N states, M scan inputs (num_scan_inputs), then the outer reads; the body takes
// (states..., one slice of each scan input...) and gives (states..., K scan values). Each scan
// input is sliced along its axis (in reverse for direction 1) into a dense buffer of the
// scratch; each scan value is written at its iteration's place along its axis. Scan-8 puts
// sequence_lens first and a batch axis 0 on every input and output (scan axis 1): the same
// scan runs once per batch entry; sequence_lens must be the full length (shorter sequences
// are refused at run time).
struct ScanBodyState {
    BodyProgram body;
    uint32_t first = 0;               // the first state input (1 in Scan-8: sequence_lens)
    uint32_t states = 0, inputs = 0, outputs = 0, outer = 0;
    int64_t length = 0, batch = 1;
    bool has_lengths = false;
    size_t state_bytes = 0;           // one set of states
    size_t* value_bytes = nullptr;    // per state (one batch entry)
    struct Axis {
        uint64_t outer, inner;        // elements before the axis, bytes after it
        bool reverse;
        size_t batch_bytes;           // per batch entry (Scan-8)
    };
    Axis* in_axes = nullptr;          // per scan input
    Axis* out_axes = nullptr;         // per scan output
    size_t* slice_bytes = nullptr;    // per scan input
    size_t slices_bytes = 0;
};

inline Status scan_prepare(PrepareContext& c) {
    const Model* body = nullptr;
    TESSEL_TRY(body_attribute(c, "body", &body));
    const Attribute* m = c.attribute("num_scan_inputs");
    if (!m || m->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'num_scan_inputs' (an int) is missing");
    bool batched = c.opset < 9;
    uint32_t first = batched ? 1 : 0;
    uint32_t outer = body->outer_inputs;
    if (c.num_inputs < outer + first) return c.fail(Status::InvalidArgument, "has %u inputs, its body reads %u outer values", c.num_inputs, outer);
    uint32_t formal = c.num_inputs - outer;
    if (m->i < 1 || m->i > (int64_t)(formal - first))
        return c.fail(Status::InvalidArgument, "num_scan_inputs is %lld, the node has %u inputs", (long long)m->i, formal);
    uint32_t inputs = (uint32_t)m->i, states = formal - first - inputs;
    if (body->input_count() != states + inputs + outer)
        return c.fail(Status::InvalidArgument, "the body takes %u inputs, the node gives %u", body->input_count() - outer, states + inputs);
    if (body->output_count() < states || c.num_outputs != body->output_count())
        return c.fail(Status::InvalidArgument, "the body has %u outputs, the node %u (and %u states)", body->output_count(), c.num_outputs, states);
    uint32_t outputs = body->output_count() - states;
    Span<const int64_t> in_axes = c.attribute_ints("scan_input_axes"), out_axes = c.attribute_ints("scan_output_axes");
    Span<const int64_t> in_dirs = c.attribute_ints(batched ? "directions" : "scan_input_directions");
    Span<const int64_t> out_dirs = c.attribute_ints("scan_output_directions");
    if (batched && (in_axes.size || out_axes.size || out_dirs.size))
        return c.fail(Status::InvalidArgument, "Scan-8 has no scan axes or output directions");
    if ((in_axes.size && in_axes.size != inputs) || (in_dirs.size && in_dirs.size != inputs) ||
        (out_axes.size && out_axes.size != outputs) || (out_dirs.size && out_dirs.size != outputs))
        return c.fail(Status::InvalidArgument, "scan axes and directions need one entry per scan input (%u) and output (%u)", inputs, outputs);
    ScanBodyState* state = new_state<ScanBodyState>(c);
    if (!state) return c.fail(Status::OutOfMemory, "out of memory");
    state->first = first;
    state->states = states;
    state->inputs = inputs;
    state->outputs = outputs;
    state->outer = outer;
    state->has_lengths = batched && c.has_input(0);
    state->in_axes = c.arena->allocate_array<ScanBodyState::Axis>(inputs + 1);
    state->out_axes = c.arena->allocate_array<ScanBodyState::Axis>(outputs + 1);
    state->slice_bytes = c.arena->allocate_array<size_t>(inputs + 1);
    state->value_bytes = c.arena->allocate_array<size_t>(states + 1);
    if (!state->in_axes || !state->out_axes || !state->slice_bytes || !state->value_bytes) return c.fail(Status::OutOfMemory, "out of memory");
    // Scan-8: every input has the batch axis 0; the body sees one entry.
    int64_t batch = -1;
    auto entry = [&](const TensorDesc& d, uint32_t index, TensorDesc* out) -> Status {
        *out = d;
        if (!batched) return Status::Ok;
        if (d.rank < 1 || (batch >= 0 && d.dims[0] != batch))
            return c.fail(Status::InvalidArgument, "input %u has no batch axis of %lld entries", index, (long long)batch);
        batch = d.dims[0];
        out->rank = (uint8_t)(d.rank - 1);
        for (uint32_t k = 0; k + 1 < d.rank; ++k) out->dims[k] = d.dims[k + 1];
        return Status::Ok;
    };
    if (state->has_lengths && (c.inputs[0].type != ElementType::Int64 || c.inputs[0].rank != 1))
        return c.fail(Status::InvalidArgument, "sequence_lens must be int64 [batch]");
    TensorDesc descs[kMaxBodyInputs];
    const void* values[kMaxBodyInputs] = {};
    for (uint32_t i = 0; i < states; ++i) {
        if (c.inputs[first + i].type == ElementType::Undefined) return c.fail(Status::InvalidArgument, "state %u is absent", i);
        TESSEL_TRY(entry(c.inputs[first + i], first + i, &descs[i]));
        state->value_bytes[i] = desc_bytes(descs[i]);
        state->state_bytes += align_64(state->value_bytes[i]);
    }
    int64_t length = -1;
    for (uint32_t j = 0; j < inputs; ++j) {
        TensorDesc d;
        TESSEL_TRY(entry(c.inputs[first + states + j], first + states + j, &d));
        int64_t axis = 0;
        if (d.type == ElementType::Undefined || d.rank < 1 || !normalize_axis(in_axes.size ? in_axes[j] : 0, d.rank, &axis))
            return c.fail(Status::InvalidArgument, "scan input %u (rank %u) has no axis %lld", j, d.rank, (long long)(in_axes.size ? in_axes[j] : 0));
        if (length >= 0 && d.dims[axis] != length)
            return c.fail(Status::InvalidArgument, "scan input %u has %lld entries along its axis, scan input 0 has %lld", j,
                          (long long)d.dims[axis], (long long)length);
        length = d.dims[axis];
        TensorDesc slice;
        slice.type = d.type;
        slice.rank = (uint8_t)(d.rank - 1);
        for (int64_t k = 0, o = 0; k < d.rank; ++k) if (k != axis) slice.dims[o++] = d.dims[k];
        descs[states + j] = slice;
        uint64_t before = dims_product(d, 0, (int)axis);
        state->in_axes[j] = ScanBodyState::Axis{before, desc_bytes(slice) / (before ? before : 1), in_dirs.size && in_dirs[j] != 0, desc_bytes(d)};
        state->slice_bytes[j] = desc_bytes(slice);
        state->slices_bytes += align_64(state->slice_bytes[j]);
    }
    state->length = length;
    state->batch = batched ? (batch < 0 ? 0 : batch) : 1;
    for (uint32_t i = 0; i < outer; ++i) {
        descs[states + inputs + i] = c.inputs[formal + i];
        values[states + inputs + i] = c.values ? c.values[formal + i] : nullptr;
    }
    TESSEL_TRY(compile_body(c, body, "body", descs, values, &state->body));
    for (uint32_t i = 0; i < states; ++i) {
        if (!same_desc(state->body.output_desc(i), descs[i])) {
            char a[96], d[96];
            describe(descs[i], a, sizeof a);
            describe(state->body.output_desc(i), d, sizeof d);
            return c.fail(Status::Unsupported, "state %u changes from %s to %s (a shape that changes across iterations)", i, a, d);
        }
        c.outputs[i] = c.inputs[first + i];
    }
    for (uint32_t k = 0; k < outputs; ++k) {
        TensorDesc d = state->body.output_desc(states + k);
        uint32_t extra = batched ? 2 : 1;
        if (d.rank + extra > kMaxRank) return c.fail(Status::LimitExceeded, "scan output %u has rank %u (at most %u)", k, d.rank + extra, kMaxRank);
        int64_t axis = 0;
        if (!normalize_axis(out_axes.size ? out_axes[k] : 0, d.rank + 1, &axis))
            return c.fail(Status::InvalidArgument, "scan output %u (rank %u) has no axis %lld", k, d.rank + 1u, (long long)(out_axes.size ? out_axes[k] : 0));
        TensorDesc o;
        o.type = d.type;
        o.rank = (uint8_t)(d.rank + extra);
        uint32_t at = batched ? 1 : 0;
        if (batched) o.dims[0] = state->batch;
        for (int64_t j = 0, from = 0; j < d.rank + 1; ++j) o.dims[at + j] = j == axis ? length : d.dims[from++];
        c.outputs[states + k] = o;
        uint64_t before = dims_product(d, 0, (int)axis);
        state->out_axes[k] = ScanBodyState::Axis{before, desc_bytes(d) / (before ? before : 1), out_dirs.size && out_dirs[k] != 0,
                                                 desc_bytes(d) * (size_t)(length < 0 ? 0 : length)};
    }
    c.state = state;
    c.scratch_bytes = state->body.bytes() + 2 * state->state_bytes + state->slices_bytes;
    return Status::Ok;
}

inline Status scan_run(const RunContext& r) {
    const ScanBodyState& state = *static_cast<const ScanBodyState*>(r.state);
    unsigned char* scratch = static_cast<unsigned char*>(r.scratch);
    unsigned char* sets[2] = {scratch + state.body.bytes(), scratch + state.body.bytes() + state.state_bytes};
    unsigned char* slices = sets[1] + state.state_bytes;
    const void* inputs[kMaxBodyInputs];
    uint32_t first = state.first, formal = state.first + state.states + state.inputs;
    uint64_t length = (uint64_t)state.length;
    if (state.has_lengths)
        for (int64_t b = 0; b < state.batch; ++b)
            if (r.inputs[0].as<const int64_t>()[b] != state.length)
                return r.fail(Status::Unsupported, "sequence_lens[%lld] is %lld: only full sequences (%lld) are supported", (long long)b,
                              (long long)r.inputs[0].as<const int64_t>()[b], (long long)state.length);
    for (uint32_t i = 0; i < state.outer; ++i) inputs[state.states + state.inputs + i] = r.inputs[formal + i].data;
    size_t offset = 0;
    for (uint32_t j = 0; j < state.inputs; ++j) {
        inputs[state.states + j] = slices + offset;
        offset += align_64(state.slice_bytes[j]);
    }
    for (int64_t b = 0; b < state.batch; ++b) {
        offset = 0;
        for (uint32_t i = 0; i < state.states; ++i) {
            copy_bytes(sets[0] + offset, r.inputs[first + i].as<const unsigned char>() + (size_t)b * state.value_bytes[i], state.value_bytes[i]);
            offset += align_64(state.value_bytes[i]);
        }
        int current = 0;
        for (uint64_t t = 0; t < length; ++t) {
            offset = 0;
            for (uint32_t i = 0; i < state.states; ++i) {
                inputs[i] = sets[current] + offset;
                offset += align_64(state.value_bytes[i]);
            }
            for (uint32_t j = 0; j < state.inputs; ++j) {   // slice t along the axis
                const ScanBodyState::Axis& a = state.in_axes[j];
                uint64_t at = a.reverse ? length - 1 - t : t;
                const unsigned char* from = r.inputs[first + state.states + j].as<const unsigned char>() + (size_t)b * a.batch_bytes;
                unsigned char* to = static_cast<unsigned char*>(const_cast<void*>(inputs[state.states + j]));
                for (uint64_t o = 0; o < a.outer; ++o) copy_bytes(to + o * a.inner, from + (o * length + at) * a.inner, (size_t)a.inner);
            }
            void** values = nullptr;
            TESSEL_TRY(run_body(state.body, scratch, inputs, r, &values));
            offset = 0;
            for (uint32_t i = 0; i < state.states; ++i) {
                copy_bytes(sets[1 - current] + offset, values[state.body.outputs[i]], state.value_bytes[i]);
                offset += align_64(state.value_bytes[i]);
            }
            for (uint32_t k = 0; k < state.outputs; ++k) {   // the value at t along the axis
                const ScanBodyState::Axis& a = state.out_axes[k];
                uint64_t at = a.reverse ? length - 1 - t : t;
                const unsigned char* from = static_cast<const unsigned char*>(values[state.body.outputs[state.states + k]]);
                unsigned char* to = r.outputs[state.states + k].as<unsigned char>() + (size_t)b * a.batch_bytes;
                for (uint64_t o = 0; o < a.outer; ++o) copy_bytes(to + (o * length + at) * a.inner, from + o * a.inner, (size_t)a.inner);
            }
            current = 1 - current;
        }
        offset = 0;
        for (uint32_t i = 0; i < state.states; ++i) {
            copy_bytes(r.outputs[i].as<unsigned char>() + (size_t)b * state.value_bytes[i], sets[current] + offset, state.value_bytes[i]);
            offset += align_64(state.value_bytes[i]);
        }
    }
    return Status::Ok;
}

const OpKernel kControlFlowKernels[] = {
    {"If", if_prepare, if_run},
    {"Loop", loop_prepare, loop_run},
    {"Scan", scan_prepare, scan_run},
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail

// >>attention
// Attention (opsets 23-25): Y = softmax(scale * Q K^T + bias) V per query head; each K/V head
// serves q_num_heads / kv_num_heads query heads (GQA), 3-D inputs pack the heads in the last
// dimension, past_key/past_value are prepended to K/V. The bias adds attn_mask (bool: false
// is -inf; float: added; a last dimension shorter than the keys is padded with -inf), the
// causal frontier key <= query + offset (offset: the past length, or nonpad_kv_seqlen[b] -
// q_len), the nonpad_kv_seqlen padding and (opset 25) the sliding window. A row whose bias is
// all -inf gives zeros, as ONNX specifies. Query rows go 4 at a time (the query heads of one
// K/V head together: a GQA decode step fills a block) so that every key row loaded serves 4
// of them; the scores live in per-thread scratch; weights x V is the blocked GEMM. Keys past
// a causal frontier are skipped (a NaN or inf in their K/V rows or mask values does not reach
// Y, where NumPy's 0 * inf would).
namespace detail {

constexpr int64_t kAttentionRows = 4;

struct AttentionState {
    int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, past_len = 0, total = 0;
    int64_t head = 0, v_head = 0;
    // element strides (batch, head, position) of Q, K, V and Y: 4-D or heads packed in 3-D
    int64_t q_strides[3] = {}, k_strides[3] = {}, v_strides[3] = {}, y_strides[3] = {};
    int64_t mask_strides[3] = {};   // batch, head, query; 0 where the mask broadcasts
    int64_t mask_keys = 0;          // the mask's last dimension; keys past it are masked
    bool has_mask = false, mask_bool = false, causal = false;
    float scale = 1, softcap = 0;
    int64_t qk_mode = 0, left_window = -1, right_window = -1;
    uint64_t slots = 1;
};

// (batch, head, position) strides of a 4-D (batch, heads, positions, size) tensor or a 3-D
// (batch, positions, heads * size) one.
inline void attention_strides(const TensorDesc& d, int64_t heads, int64_t* s) {
    if (d.rank == 4) {
        s[0] = d.dims[1] * d.dims[2] * d.dims[3];
        s[1] = d.dims[2] * d.dims[3];
        s[2] = d.dims[3];
    } else {
        s[0] = d.dims[1] * d.dims[2];
        s[1] = d.dims[2] / heads;
        s[2] = d.dims[2];
    }
}

inline Status prepare_attention_mask(PrepareContext& c, AttentionState* st) {
    const TensorDesc& m = c.inputs[3];
    if (m.type != ElementType::Float32 && m.type != ElementType::Bool)
        return c.fail(Status::Unsupported, "attn_mask is %s (float32 or bool expected)", element_type_name(m.type));
    if (m.rank < 1 || m.rank > 4) return c.fail(Status::InvalidArgument, "attn_mask has rank %u (1 to 4 expected)", m.rank);
    st->mask_keys = m.dims[m.rank - 1];
    if (st->mask_keys > st->total)
        return c.fail(Status::InvalidArgument, "attn_mask has %lld keys, more than the %lld of past and K", (long long)st->mask_keys,
                      (long long)st->total);
    const int64_t target[3] = {st->batch, st->q_heads, st->q_len};
    int64_t stride = st->mask_keys;
    for (int t = 2; t >= 0; --t) {
        int j = t - (4 - m.rank);
        st->mask_strides[t] = 0;
        if (j < 0) continue;
        if (m.dims[j] != 1 && m.dims[j] != target[t])
            return c.fail(Status::InvalidArgument, "attn_mask dimension %d (%lld) does not broadcast to %lld", j, (long long)m.dims[j],
                          (long long)target[t]);
        if (m.dims[j] != 1) st->mask_strides[t] = stride;
        stride *= m.dims[j];
    }
    st->has_mask = true;
    st->mask_bool = m.type == ElementType::Bool;
    return Status::Ok;
}

inline Status prepare_attention(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 23));
    TESSEL_TRY(check_tensor_inputs(c, 3, c.opset >= 24 ? 7 : 6, 3, 0));
    if (c.num_outputs > 4) return c.fail(Status::InvalidArgument, "expects 1 to 4 outputs, has %u", c.num_outputs);
    for (uint32_t i : {0u, 1u, 2u, 4u, 5u}) TESSEL_TRY(nn_float(c, i, i >= 4));
    const TensorDesc &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
    if ((q.rank != 3 && q.rank != 4) || k.rank != q.rank || v.rank != q.rank)
        return c.fail(Status::InvalidArgument, "Q, K and V must all be 3-D or all 4-D (ranks %u, %u, %u)", q.rank, k.rank, v.rank);
    AttentionState* st = nn_state<AttentionState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    const Attribute* qa = c.attribute("q_num_heads");
    const Attribute* ka = c.attribute("kv_num_heads");
    if ((qa && qa->kind != AttributeKind::Int) || (ka && ka->kind != AttributeKind::Int))
        return c.fail(Status::InvalidArgument, "q_num_heads and kv_num_heads must be ints");
    int64_t k_head = 0, v_len = 0;
    st->batch = q.dims[0];
    if (q.rank == 3) {
        if (!qa || !ka) return c.fail(Status::InvalidArgument, "3-D Q, K and V need attributes q_num_heads and kv_num_heads");
        st->q_heads = qa->i;
        st->kv_heads = ka->i;
        if (st->q_heads < 1 || st->kv_heads < 1)
            return c.fail(Status::InvalidArgument, "q_num_heads %lld and kv_num_heads %lld must be positive", (long long)st->q_heads,
                          (long long)st->kv_heads);
        if (q.dims[2] % st->q_heads || k.dims[2] % st->kv_heads || v.dims[2] % st->kv_heads)
            return c.fail(Status::InvalidArgument, "hidden sizes %lld, %lld, %lld are not multiples of the head counts %lld, %lld",
                          (long long)q.dims[2], (long long)k.dims[2], (long long)v.dims[2], (long long)st->q_heads,
                          (long long)st->kv_heads);
        st->head = q.dims[2] / st->q_heads;
        k_head = k.dims[2] / st->kv_heads;
        st->v_head = v.dims[2] / st->kv_heads;
        st->q_len = q.dims[1];
        st->kv_len = k.dims[1];
        v_len = v.dims[1];
    } else {
        if ((qa || ka) && c.opset >= 25)
            return c.fail(Status::InvalidArgument, "q_num_heads and kv_num_heads are for 3-D inputs only (opset 25)");
        st->q_heads = q.dims[1];
        st->kv_heads = k.dims[1];
        if ((qa && qa->i != st->q_heads) || (ka && ka->i != st->kv_heads) || v.dims[1] != st->kv_heads)
            return c.fail(Status::InvalidArgument, "head counts disagree: Q has %lld, K %lld, V %lld", (long long)st->q_heads,
                          (long long)st->kv_heads, (long long)v.dims[1]);
        st->head = q.dims[3];
        k_head = k.dims[3];
        st->v_head = v.dims[3];
        st->q_len = q.dims[2];
        st->kv_len = k.dims[2];
        v_len = v.dims[2];
    }
    if (k.dims[0] != st->batch || v.dims[0] != st->batch)
        return c.fail(Status::InvalidArgument, "batch sizes differ: Q %lld, K %lld, V %lld", (long long)st->batch, (long long)k.dims[0],
                      (long long)v.dims[0]);
    if (k_head != st->head)
        return c.fail(Status::InvalidArgument, "K's head size %lld differs from Q's %lld", (long long)k_head, (long long)st->head);
    if (st->head < 1) return c.fail(Status::InvalidArgument, "head size is 0");
    if (v_len != st->kv_len)
        return c.fail(Status::InvalidArgument, "K has %lld positions, V %lld", (long long)st->kv_len, (long long)v_len);
    if (st->kv_heads < 1 || st->q_heads % st->kv_heads)
        return c.fail(Status::InvalidArgument, "%lld query heads are not a multiple of %lld key/value heads", (long long)st->q_heads,
                      (long long)st->kv_heads);
    if (c.has_input(4) != c.has_input(5)) return c.fail(Status::InvalidArgument, "past_key and past_value must come together");
    if (c.has_input(4)) {
        const TensorDesc &pk = c.inputs[4], &pv = c.inputs[5];
        if (pk.rank != 4 || pv.rank != 4 || pk.dims[0] != st->batch || pk.dims[1] != st->kv_heads || pk.dims[3] != st->head ||
            pv.dims[0] != st->batch || pv.dims[1] != st->kv_heads || pv.dims[2] != pk.dims[2] || pv.dims[3] != st->v_head)
            return c.fail(Status::InvalidArgument,
                          "past_key and past_value must be (%lld, %lld, past, %lld) and (%lld, %lld, past, %lld)",
                          (long long)st->batch, (long long)st->kv_heads, (long long)st->head, (long long)st->batch,
                          (long long)st->kv_heads, (long long)st->v_head);
        st->past_len = pk.dims[2];
    }
    st->total = st->past_len + st->kv_len;
    if (c.has_input(6)) {
        const TensorDesc& n = c.inputs[6];
        if (n.type != ElementType::Int64)
            return c.fail(Status::Unsupported, "nonpad_kv_seqlen is %s (int64 expected)", element_type_name(n.type));
        if (n.rank != 1 || n.dims[0] != st->batch)
            return c.fail(Status::InvalidArgument, "nonpad_kv_seqlen must be 1-D with %lld values", (long long)st->batch);
        if (c.has_input(4)) return c.fail(Status::InvalidArgument, "nonpad_kv_seqlen cannot be combined with past_key and past_value");
        if (const void* known = tensor_value(c, 6))
            for (int64_t b = 0; b < st->batch; ++b) {
                int64_t len = static_cast<const int64_t*>(known)[b];
                if (len < 0 || len > st->total)
                    return c.fail(Status::InvalidArgument, "nonpad_kv_seqlen %lld out of range 0..%lld", (long long)len,
                                  (long long)st->total);
            }
    }
    if (c.has_input(3)) TESSEL_TRY(prepare_attention_mask(c, st));
    int64_t causal = c.attribute_int("is_causal", 0);
    if (causal != 0 && causal != 1) return c.fail(Status::InvalidArgument, "is_causal %lld (0 or 1 expected)", (long long)causal);
    st->causal = causal == 1;
    const Attribute* scale = c.attribute("scale");
    st->scale = scale && scale->kind == AttributeKind::Float ? scale->f : (float)(1.0 / std::sqrt((double)st->head));
    st->softcap = c.attribute_float("softcap", 0.0f);
    if (!(st->softcap >= 0)) return c.fail(Status::InvalidArgument, "softcap %g must be >= 0", (double)st->softcap);
    st->qk_mode = c.attribute_int("qk_matmul_output_mode", 0);
    if (st->qk_mode < 0 || st->qk_mode > 3)
        return c.fail(Status::InvalidArgument, "qk_matmul_output_mode %lld (0 to 3 expected)", (long long)st->qk_mode);
    // The softmax runs in float32 whatever precision is asked: at least the precision of each choice but float16/bfloat16.
    const Attribute* precision = c.attribute("softmax_precision");
    if (precision) {
        int64_t p = precision->kind == AttributeKind::Int ? precision->i : -1;
        if (p != 1 && p != 10 && p != 11 && p != 16)
            return c.fail(Status::InvalidArgument, "softmax_precision %lld (1, 10, 11 or 16 expected)", (long long)p);
    }
    if (c.opset >= 25) {
        st->left_window = c.attribute_int("left_window_size", -1);
        st->right_window = c.attribute_int("right_window_size", -1);
        if (st->left_window < -1 || st->right_window < -1)
            return c.fail(Status::InvalidArgument, "left_window_size %lld and right_window_size %lld must be -1 or more",
                          (long long)st->left_window, (long long)st->right_window);
    }
    attention_strides(q, st->q_heads, st->q_strides);
    attention_strides(k, st->kv_heads, st->k_strides);
    attention_strides(v, st->kv_heads, st->v_strides);
    TensorDesc y = q;
    if (q.rank == 4) y.dims[3] = st->v_head;
    else y.dims[2] = st->q_heads * st->v_head;
    attention_strides(y, st->q_heads, st->y_strides);
    c.outputs[0] = y;
    const int64_t shapes[3][4] = {{st->batch, st->kv_heads, st->total, st->head},      // present_key
                                  {st->batch, st->kv_heads, st->total, st->v_head},    // present_value
                                  {st->batch, st->q_heads, st->q_len, st->total}};     // qk_matmul_output
    for (uint32_t o = 1; o < c.num_outputs; ++o) {
        TensorDesc d;
        d.type = ElementType::Float32;
        d.rank = 4;
        for (int i = 0; i < 4; ++i) d.dims[i] = shapes[o - 1][i];
        c.outputs[o] = d;
    }
    for (uint32_t o = 0; o < c.num_outputs; ++o) TESSEL_TRY(check_output_desc(c, o));
    st->slots = c.threads ? c.threads : 1;
    c.scratch_bytes = (size_t)st->slots * (size_t)(kAttentionRows * st->total) * sizeof(float);
    return Status::Ok;
}

// The data one run reads and writes.
struct AttentionData {
    const float *q, *k, *v, *past_key, *past_value, *mask;
    const uint8_t* mask_bool;
    const int64_t* nonpad;
    float *y, *qk;
};

// out[r] = q[r] . k for 4 query rows; 8 independent lanes per row, named apart so that the
// compiler keeps them in vector registers.
inline void attention_dots(const float* const* q, const float* k, int64_t n, float* out) {
    constexpr int kLanes = 8;
    float a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
    const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3];
    int64_t d = 0;
    for (; d + kLanes <= n; d += kLanes)
        for (int l = 0; l < kLanes; ++l) {
            float kd = k[d + l];
            a0[l] += q0[d + l] * kd;
            a1[l] += q1[d + l] * kd;
            a2[l] += q2[d + l] * kd;
            a3[l] += q3[d + l] * kd;
        }
    float* acc[kAttentionRows] = {a0, a1, a2, a3};
    for (int r = 0; r < kAttentionRows; ++r) {
        float sum = 0;
        for (int l = 0; l < kLanes; ++l) sum += acc[r][l];
        for (int64_t e = d; e < n; ++e) sum += q[r][e] * k[e];
        out[r] = sum;
    }
}

inline float attention_dot(const float* q, const float* k, int64_t n) {
    constexpr int kLanes = 8;
    float acc[kLanes] = {};
    int64_t d = 0;
    for (; d + kLanes <= n; d += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += q[d + l] * k[d + l];
    float sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += acc[l];
    for (; d < n; ++d) sum += q[d] * k[d];
    return sum;
}

// y = sum over keys j of w[j] * (row j of past, then of now): past rows `past_stride` apart,
// the rest `now_stride` apart; 16 columns at a time in fixed-size sums that vectorize.
inline void attention_weighted_sum(const float* w, int64_t past_keys, const float* past, int64_t past_stride, int64_t keys,
                                   const float* now, int64_t now_stride, int64_t size, float* y) {
    constexpr int64_t kColumns = 16;
    for (int64_t c0 = 0; c0 < size; c0 += kColumns) {
        float acc[kColumns] = {};
        int64_t width = size - c0 < kColumns ? size - c0 : kColumns;
        for (int64_t j = 0; j < keys; ++j) {
            const float* row = (j < past_keys ? past + j * past_stride : now + (j - past_keys) * now_stride) + c0;
            float p = w[j];
            if (width == kColumns) for (int64_t l = 0; l < kColumns; ++l) acc[l] += p * row[l];
            else for (int64_t l = 0; l < width; ++l) acc[l] += p * row[l];
        }
        for (int64_t l = 0; l < width; ++l) y[c0 + l] = acc[l];
    }
}

// The additive bias of query i and key j of batch b, query head h (-inf: not attended).
inline float attention_bias(const AttentionState& st, const AttentionData& a, int64_t b, int64_t h, int64_t i, int64_t j,
                            int64_t offset) {
    float bias = 0;
    if (st.has_mask) {
        if (j < st.mask_keys) {
            int64_t at = b * st.mask_strides[0] + h * st.mask_strides[1] + i * st.mask_strides[2] + j;
            bias = a.mask_bool ? (a.mask_bool[at] ? 0.0f : -INFINITY) : a.mask[at];
        } else {
            bias = -INFINITY;
        }
    }
    int64_t ahead = j - (i + offset);   // > 0: a key after the query's position
    if (st.causal && ahead > 0) bias += -INFINITY;
    if ((st.left_window >= 0 && -ahead > st.left_window) || (st.right_window >= 0 && ahead > st.right_window)) bias += -INFINITY;
    if (a.nonpad && j >= a.nonpad[b]) bias += -INFINITY;
    return bias;
}

// Softmax of one row of scores in place; zeros when no key is allowed or the largest is -inf.
inline void attention_softmax(float* s, int64_t n, bool allowed) {
    float top = -INFINITY;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
        if (s[j] != s[j]) nan = true;
        else if (s[j] > top) top = s[j];
    }
    if (!allowed || (!nan && top == -INFINITY)) {
        for (int64_t j = 0; j < n; ++j) s[j] = 0;
        return;
    }
    if (nan) {   // as NumPy: the NaN maximum poisons the row
        for (int64_t j = 0; j < n; ++j) s[j] = NAN;
        return;
    }
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - top);
        sum += s[j];
    }
    for (int64_t j = 0; j < n; ++j) s[j] /= sum;
}

// A block of up to 4 query rows of batch b that share K/V head kv: row `first + r` is query
// i = row % q_len of head kv * group + row / q_len, so a GQA decode step fills the block with
// the group's heads. Under is_causal (and no qk output) the keys after the block's last
// frontier are skipped: their weight is 0.
inline void attention_rows(const AttentionState& st, const AttentionData& a, int64_t b, int64_t kv, int64_t first, int64_t rows,
                           float* scores) {
    const int64_t total = st.total, past = st.past_len, group = st.q_heads / st.kv_heads;
    const int64_t offset = past ? past : a.nonpad ? a.nonpad[b] - st.q_len : 0;
    int64_t head[kAttentionRows], query[kAttentionRows];
    const float* q[kAttentionRows];
    for (int64_t r = 0; r < kAttentionRows; ++r) {   // rows past the end repeat the first: computed, never used
        int64_t row = first + (r < rows ? r : 0);
        head[r] = kv * group + row / st.q_len;
        query[r] = row % st.q_len;
        q[r] = a.q + b * st.q_strides[0] + head[r] * st.q_strides[1] + query[r] * st.q_strides[2];
    }
    int64_t keys = total;   // keys [keys, total) are masked for every row of the block
    if (st.causal && !a.qk) {
        int64_t last = 0;
        for (int64_t r = 0; r < rows; ++r) last = query[r] > last ? query[r] : last;
        int64_t frontier = last + offset + 1;
        keys = frontier < 0 ? 0 : frontier < total ? frontier : total;
    }
    const float* past_key = a.past_key ? a.past_key + (b * st.kv_heads + kv) * past * st.head : nullptr;
    const float* key = a.k + b * st.k_strides[0] + kv * st.k_strides[1];
    for (int64_t j = 0; j < keys; ++j) {
        const float* kj = j < past ? past_key + j * st.head : key + (j - past) * st.k_strides[2];
        float dots[kAttentionRows];
        if (rows == 1) dots[0] = attention_dot(q[0], kj, st.head);   // a decode step without GQA
        else attention_dots(q, kj, st.head, dots);
        for (int64_t r = 0; r < rows; ++r) scores[r * total + j] = dots[r] * st.scale;
    }
    for (int64_t r = 0; r < rows; ++r) {
        int64_t h = head[r], i = query[r];
        float* s = scores + r * total;
        float* qk = a.qk ? a.qk + ((b * st.q_heads + h) * st.q_len + i) * total : nullptr;
        if (qk && st.qk_mode == 0) std::memcpy(qk, s, (size_t)total * sizeof(float));
        if (st.softcap > 0)
            for (int64_t j = 0; j < keys; ++j) s[j] = st.softcap * std::tanh(s[j] / st.softcap);
        if (qk && st.qk_mode == 1) std::memcpy(qk, s, (size_t)total * sizeof(float));
        bool allowed = false;
        for (int64_t j = 0; j < keys; ++j) {
            float bias = attention_bias(st, a, b, h, i, j, offset);
            allowed = allowed || bias != -INFINITY;
            s[j] += bias;
        }
        if (qk && st.qk_mode == 2) std::memcpy(qk, s, (size_t)total * sizeof(float));
        attention_softmax(s, keys, allowed);
        if (qk && st.qk_mode == 3) std::memcpy(qk, s, (size_t)total * sizeof(float));
    }
    // Y rows = weights x [past_value; V]: the blocked GEMM over runs of rows evenly spaced in Y
    // (one query per head: the block; else each head's consecutive queries), the past part
    // first (it clears Y); a single row by 16-lane sums.
    int64_t past_keys = keys < past ? keys : past;
    const float* past_value = a.past_value ? a.past_value + (b * st.kv_heads + kv) * past * st.v_head : nullptr;
    const float* value = a.v + b * st.v_strides[0] + kv * st.v_strides[1];
    for (int64_t r0 = 0, r1 = 0; r0 < rows; r0 = r1) {
        r1 = st.q_len == 1 ? rows : r0 + 1;
        while (r1 < rows && head[r1] == head[r0]) ++r1;
        float* y = a.y + b * st.y_strides[0] + head[r0] * st.y_strides[1] + query[r0] * st.y_strides[2];
        const float* w = scores + r0 * total;
        if (r1 - r0 == 1) {
            attention_weighted_sum(w, past_keys, past_value, st.v_head, keys, value, st.v_strides[2], st.v_head, y);
            continue;
        }
        int64_t ldy = st.q_len == 1 ? st.y_strides[1] : st.y_strides[2];
        gemm(r1 - r0, st.v_head, past_keys, w, total, 1, past_value, st.v_head, y, ldy, false);
        gemm(r1 - r0, st.v_head, keys - past_keys, w + past_keys, total, 1, value, st.v_strides[2], y, ldy, true);
    }
}

// present = past followed by the new positions, (batch, kv heads, total, size).
inline void attention_present(const AttentionState& st, const float* past, const float* now, const int64_t* now_strides,
                              int64_t size, float* present) {
    for (int64_t b = 0; b < st.batch; ++b)
        for (int64_t h = 0; h < st.kv_heads; ++h) {
            float* out = present + (b * st.kv_heads + h) * st.total * size;
            if (past) std::memcpy(out, past + (b * st.kv_heads + h) * st.past_len * size, (size_t)(st.past_len * size) * sizeof(float));
            for (int64_t j = 0; j < st.kv_len; ++j)
                std::memcpy(out + (st.past_len + j) * size, now + b * now_strides[0] + h * now_strides[1] + j * now_strides[2],
                            (size_t)size * sizeof(float));
        }
}

inline Status run_attention(const RunContext& c) {
    const AttentionState& st = *static_cast<const AttentionState*>(c.state);
    auto input = [&](uint32_t i) { return i < c.num_inputs ? c.inputs[i].data : nullptr; };
    AttentionData a;
    a.q = c.inputs[0].as<const float>();
    a.k = c.inputs[1].as<const float>();
    a.v = c.inputs[2].as<const float>();
    a.mask = st.has_mask && !st.mask_bool ? static_cast<const float*>(input(3)) : nullptr;
    a.mask_bool = st.has_mask && st.mask_bool ? static_cast<const uint8_t*>(input(3)) : nullptr;
    a.past_key = static_cast<const float*>(input(4));
    a.past_value = static_cast<const float*>(input(5));
    a.nonpad = static_cast<const int64_t*>(input(6));
    a.y = c.outputs[0].as<float>();
    a.qk = c.num_outputs > 3 ? c.outputs[3].as<float>() : nullptr;
    if (a.nonpad)
        for (int64_t b = 0; b < st.batch; ++b)
            if (a.nonpad[b] < 0 || a.nonpad[b] > st.total)
                return c.fail(Status::InvalidArgument, "nonpad_kv_seqlen %lld out of range 0..%lld", (long long)a.nonpad[b],
                              (long long)st.total);
    if (c.num_outputs > 1) attention_present(st, a.past_key, a.k, st.k_strides, st.head, c.outputs[1].as<float>());
    if (c.num_outputs > 2) attention_present(st, a.past_value, a.v, st.v_strides, st.v_head, c.outputs[2].as<float>());
    int64_t group_rows = st.q_heads / st.kv_heads * st.q_len;   // the query rows sharing one K/V head
    int64_t blocks = (group_rows + kAttentionRows - 1) / kAttentionRows;
    float* scratch = static_cast<float*>(c.scratch);
    nn_parallel(c, (uint64_t)(st.batch * st.kv_heads * blocks), [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* scores = scratch + slot * (uint64_t)(kAttentionRows * st.total);
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t first = (int64_t)(unit % (uint64_t)blocks) * kAttentionRows, bkv = (int64_t)(unit / (uint64_t)blocks);
            int64_t rows = group_rows - first < kAttentionRows ? group_rows - first : kAttentionRows;
            attention_rows(st, a, bkv / st.kv_heads, bkv % st.kv_heads, first, rows, scores);
        }
    }, st.slots);
    return Status::Ok;
}

}  // namespace detail

// >>rotary embedding, swiglu and tensor scatter
// RotaryEmbedding (opset 23): each head's first rotary_embedding_dim values rotate in pairs
// (halves, or neighbours when interleaved) by the cos/sin of the token's position; the caches
// are (positions, dim/2) read through position_ids, or (batch, sequence, dim/2) without them.
// SwiGLU (opset 28): A * sigmoid(alpha * A) * B, same shapes. TensorScatter (opset 24): the
// KV-cache write, update copied into past_cache along `axis` at write_indices[batch]
// (circular: modulo the cache length); any element type moves as bytes.
namespace detail {

struct RotaryState {
    int64_t batch = 0, heads = 0, seq = 0, head = 0, half = 0;
    int64_t strides[3] = {};   // batch, head, position of X (the head's values are contiguous)
    int64_t positions = 0;     // the caches' first dimension with position_ids; 0 without
    bool interleaved = false;
};

inline Status prepare_rotary_embedding(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 23));
    TESSEL_TRY(check_tensor_inputs(c, 3, 4, 3, 1));
    for (uint32_t i = 0; i < 3; ++i) TESSEL_TRY(nn_float(c, i));
    const TensorDesc& x = c.inputs[0];
    RotaryState* st = nn_state<RotaryState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    if (x.rank == 4) {
        *st = RotaryState{x.dims[0], x.dims[1], x.dims[2], x.dims[3], 0, {}, 0, false};
    } else if (x.rank == 3) {
        const Attribute* heads = c.attribute("num_heads");
        if (!heads || heads->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "a 3-D input needs attribute num_heads");
        if (heads->i < 1 || x.dims[2] % heads->i)
            return c.fail(Status::InvalidArgument, "num_heads %lld does not divide the hidden size %lld", (long long)heads->i,
                          (long long)x.dims[2]);
        *st = RotaryState{x.dims[0], heads->i, x.dims[1], x.dims[2] / heads->i, 0, {}, 0, false};
    } else {
        return c.fail(Status::InvalidArgument, "input must be 3-D or 4-D (rank %u)", x.rank);
    }
    attention_strides(x, st->heads, st->strides);
    int64_t dim = c.attribute_int("rotary_embedding_dim", 0);
    if (dim == 0) dim = st->head;
    if (dim < 0 || dim > st->head || dim % 2)
        return c.fail(Status::InvalidArgument, "rotary_embedding_dim %lld must be even and at most the head size %lld", (long long)dim,
                      (long long)st->head);
    st->half = dim / 2;
    int64_t interleaved = c.attribute_int("interleaved", 0);
    if (interleaved != 0 && interleaved != 1)
        return c.fail(Status::InvalidArgument, "interleaved %lld (0 or 1 expected)", (long long)interleaved);
    st->interleaved = interleaved == 1;
    const TensorDesc &cos = c.inputs[1], &sin = c.inputs[2];
    bool same = cos.rank == sin.rank;
    for (int i = 0; same && i < cos.rank; ++i) same = cos.dims[i] == sin.dims[i];
    if (!same) return c.fail(Status::InvalidArgument, "cos_cache and sin_cache shapes differ");
    if (c.has_input(3)) {
        const TensorDesc& ids = c.inputs[3];
        if (ids.type != ElementType::Int64)
            return c.fail(Status::Unsupported, "position_ids is %s (int64 expected)", element_type_name(ids.type));
        if (ids.rank != 2 || ids.dims[0] != st->batch || ids.dims[1] != st->seq)
            return c.fail(Status::InvalidArgument, "position_ids must be (%lld, %lld)", (long long)st->batch, (long long)st->seq);
        if (cos.rank != 2 || cos.dims[1] != st->half)
            return c.fail(Status::InvalidArgument, "with position_ids the caches must be (positions, %lld)", (long long)st->half);
        st->positions = cos.dims[0];
        uint64_t n = 0;
        const void* known = tensor_value(c, 3);
        if (known && desc_elements(ids, &n))
            for (uint64_t e = 0; e < n; ++e) {
                int64_t p = static_cast<const int64_t*>(known)[e];
                if (p < 0 || p >= st->positions)
                    return c.fail(Status::InvalidArgument, "position id %lld out of range 0..%lld", (long long)p,
                                  (long long)st->positions - 1);
            }
    } else if (cos.rank != 3 || cos.dims[0] != st->batch || cos.dims[1] != st->seq || cos.dims[2] != st->half) {
        return c.fail(Status::InvalidArgument, "without position_ids the caches must be (%lld, %lld, %lld)", (long long)st->batch,
                      (long long)st->seq, (long long)st->half);
    }
    c.outputs[0] = x;
    c.in_place = true;   // each pair is read before it is written
    return Status::Ok;
}

inline Status run_rotary_embedding(const RunContext& c) {
    const RotaryState& st = *static_cast<const RotaryState*>(c.state);
    const float* x = c.inputs[0].as<const float>();
    const float *cos = c.inputs[1].as<const float>(), *sin = c.inputs[2].as<const float>();
    const int64_t* ids = c.num_inputs > 3 && c.inputs[3].data ? c.inputs[3].as<const int64_t>() : nullptr;
    float* y = c.outputs[0].as<float>();
    if (ids)
        for (int64_t e = 0; e < st.batch * st.seq; ++e)
            if (ids[e] < 0 || ids[e] >= st.positions)
                return c.fail(Status::InvalidArgument, "position id %lld out of range 0..%lld", (long long)ids[e],
                              (long long)st.positions - 1);
    nn_parallel(c, (uint64_t)(st.batch * st.seq), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t token = begin; token < end; ++token) {
            int64_t b = (int64_t)token / st.seq, s = (int64_t)token % st.seq;
            int64_t row = (ids ? ids[token] : (int64_t)token) * st.half;
            for (int64_t h = 0; h < st.heads; ++h) {
                int64_t at = b * st.strides[0] + h * st.strides[1] + s * st.strides[2];
                const float* xh = x + at;
                float* yh = y + at;
                for (int64_t k = 0; k < st.half; ++k) {
                    int64_t i1 = st.interleaved ? 2 * k : k, i2 = st.interleaved ? 2 * k + 1 : k + st.half;
                    float x1 = xh[i1], x2 = xh[i2], co = cos[row + k], si = sin[row + k];
                    yh[i1] = co * x1 - si * x2;
                    yh[i2] = si * x1 + co * x2;
                }
                if (yh != xh)
                    for (int64_t d = 2 * st.half; d < st.head; ++d) yh[d] = xh[d];
            }
        }
    });
    return Status::Ok;
}

struct SwiGluState {
    float alpha = 1;
};

inline Status prepare_swiglu(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 28));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2, 1));
    for (uint32_t i = 0; i < 2; ++i) TESSEL_TRY(nn_float(c, i));
    const TensorDesc &a = c.inputs[0], &b = c.inputs[1];
    bool same = a.rank == b.rank;
    for (int i = 0; same && i < a.rank; ++i) same = a.dims[i] == b.dims[i];
    if (!same) return c.fail(Status::InvalidArgument, "A and B must have the same shape (SwiGLU does not broadcast)");
    SwiGluState* st = nn_state<SwiGluState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->alpha = c.attribute_float("alpha", 1.0f);
    c.outputs[0] = a;
    c.in_place = true;
    return Status::Ok;
}

inline Status run_swiglu(const RunContext& c) {
    float alpha = static_cast<const SwiGluState*>(c.state)->alpha;
    const float *a = c.inputs[0].as<const float>(), *b = c.inputs[1].as<const float>();
    float* y = c.outputs[0].as<float>();
    uint64_t n = c.outputs[0].elements();
    for (uint64_t e = 0; e < n; ++e) y[e] = a[e] / (1.0f + std::exp(-alpha * a[e])) * b[e];
    return Status::Ok;
}

struct TensorScatterState {
    int64_t outer = 0, batch_group = 1, length = 0, update_length = 0, inner = 0, batch = 0;
    size_t element = 1;
    bool circular = false;
};

inline Status prepare_tensor_scatter(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 24));
    TESSEL_TRY(check_tensor_inputs(c, 2, 3, 2, 1));
    const TensorDesc &cache = c.inputs[0], &update = c.inputs[1];
    if (update.type != cache.type)
        return c.fail(Status::InvalidArgument, "update is %s, past_cache %s", element_type_name(update.type), element_type_name(cache.type));
    if (cache.rank < 2 || update.rank != cache.rank)
        return c.fail(Status::InvalidArgument, "past_cache (rank %u) and update (rank %u) must have the same rank, 2 or more",
                      cache.rank, update.rank);
    int64_t raw = c.attribute_int("axis", -2), axis = 0;
    if (!normalize_axis(raw, cache.rank, &axis) || axis == 0)
        return c.fail(Status::InvalidArgument, "axis %lld out of range (1 to %u, the batch axis excluded)", (long long)raw,
                      cache.rank - 1);
    for (int i = 0; i < cache.rank; ++i)
        if (i == axis ? update.dims[i] > cache.dims[i] : update.dims[i] != cache.dims[i])
            return c.fail(Status::InvalidArgument, "update dimension %d (%lld) does not fit past_cache's (%lld)", i,
                          (long long)update.dims[i], (long long)cache.dims[i]);
    StringView mode = c.attribute_string("mode", "linear");
    if (mode != StringView("linear") && mode != StringView("circular"))
        return c.fail(Status::InvalidArgument, "unknown mode '%.*s' (linear or circular)", (int)mode.size, mode.data);
    if (c.has_input(2)) {
        const TensorDesc& w = c.inputs[2];
        if (w.type != ElementType::Int64)
            return c.fail(Status::Unsupported, "write_indices is %s (int64 expected)", element_type_name(w.type));
        if (w.rank != 1 || w.dims[0] != cache.dims[0])
            return c.fail(Status::InvalidArgument, "write_indices must be 1-D with %lld values", (long long)cache.dims[0]);
    }
    TensorScatterState* st = nn_state<TensorScatterState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->outer = (int64_t)dims_product(cache, 0, (int)axis);
    st->batch_group = (int64_t)dims_product(cache, 1, (int)axis);
    st->batch = cache.dims[0];
    st->length = cache.dims[axis];
    st->update_length = update.dims[axis];
    st->inner = (int64_t)dims_product(cache, (int)axis + 1, cache.rank);
    st->element = element_size(cache.type);
    st->circular = mode == StringView("circular");
    c.outputs[0] = cache;
    c.in_place = true;
    return Status::Ok;
}

inline Status run_tensor_scatter(const RunContext& c) {
    const TensorScatterState& st = *static_cast<const TensorScatterState*>(c.state);
    const int64_t* write = c.num_inputs > 2 && c.inputs[2].data ? c.inputs[2].as<const int64_t>() : nullptr;
    if (write && !st.circular)
        for (int64_t b = 0; b < st.batch; ++b)
            if (write[b] < 0 || write[b] > st.length - st.update_length)
                return c.fail(Status::InvalidArgument, "write index %lld out of range 0..%lld (linear mode)", (long long)write[b],
                              (long long)(st.length - st.update_length));
    const TensorView &cache = c.inputs[0], &update = c.inputs[1], &out = c.outputs[0];
    size_t bytes = (size_t)out.elements() * st.element, row = (size_t)st.inner * st.element;
    if (out.data != cache.data && bytes) std::memmove(out.data, cache.data, bytes);
    const unsigned char* from = static_cast<const unsigned char*>(update.data);
    unsigned char* to = static_cast<unsigned char*>(out.data);
    for (int64_t o = 0; o < st.outer; ++o) {
        int64_t start = write ? write[o / st.batch_group] : 0;
        // circular: the start reduced first, so start + s cannot overflow (st.length > 0 here)
        if (st.circular) start = ((start % st.length) + st.length) % st.length;
        for (int64_t s = 0; s < st.update_length; ++s) {
            int64_t at = start + s;
            if (st.circular && at >= st.length) at -= st.length;   // update_length <= length
            std::memcpy(to + (size_t)(o * st.length + at) * row, from + (size_t)(o * st.update_length + s) * row, row);
        }
    }
    return Status::Ok;
}

}  // namespace detail

// >>linear attention and causal conv
// LinearAttention (opset 27): per K/V head a (d_k x d_v) state runs over the tokens:
// linear S += k v^T; gated S = exp(g) S + k v^T; delta S += beta k (v - S^T k); gated_delta
// both; each query head of the group reads o = scale * q^T S. Inputs are 3-D, heads packed
// last; the state is float32 in per-thread scratch. CausalConvWithState (opset 27): depthwise
// 1-D convolution over [past_state (zeros if absent), input] with optional bias and SiLU;
// present_state is the last k - 1 positions of that sequence.
namespace detail {

enum class LinearRule : uint8_t { Linear, Gated, Delta, GatedDelta };

struct LinearAttentionState {
    int64_t batch = 0, tokens = 0, q_heads = 0, kv_heads = 0, key = 0, value = 0;
    int64_t decay_width = 0, beta_width = 0;   // per token: kv_heads or kv_heads * key; kv_heads or 1
    bool gated = false, delta = false;
    float scale = 1;
    uint64_t slots = 1;
};

inline Status prepare_linear_attention(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 27));
    TESSEL_TRY(check_tensor_inputs(c, 3, 6, 3, 0));
    if (c.num_outputs > 2) return c.fail(Status::InvalidArgument, "expects 1 or 2 outputs, has %u", c.num_outputs);
    for (uint32_t i = 0; i < 6; ++i) TESSEL_TRY(nn_float(c, i, i >= 3));
    LinearAttentionState* st = nn_state<LinearAttentionState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    StringView rule = c.attribute_string("update_rule", "gated_delta");
    if (rule == StringView("linear")) {
    } else if (rule == StringView("gated")) st->gated = true;
    else if (rule == StringView("delta")) st->delta = true;
    else if (rule == StringView("gated_delta")) st->gated = st->delta = true;
    else return c.fail(Status::InvalidArgument, "unknown update_rule '%.*s'", (int)rule.size, rule.data);
    const Attribute* qa = c.attribute("q_num_heads");
    const Attribute* ka = c.attribute("kv_num_heads");
    if (!qa || !ka || qa->kind != AttributeKind::Int || ka->kind != AttributeKind::Int)
        return c.fail(Status::InvalidArgument, "attributes q_num_heads and kv_num_heads are required");
    if (qa->i < 1 || ka->i < 1 || qa->i % ka->i)
        return c.fail(Status::InvalidArgument, "q_num_heads %lld must be a positive multiple of kv_num_heads %lld", (long long)qa->i,
                      (long long)ka->i);
    const TensorDesc &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
    if (q.rank != 3 || k.rank != 3 || v.rank != 3)
        return c.fail(Status::InvalidArgument, "query, key and value must be 3-D (ranks %u, %u, %u)", q.rank, k.rank, v.rank);
    st->batch = q.dims[0];
    st->tokens = q.dims[1];
    st->q_heads = qa->i;
    st->kv_heads = ka->i;
    if (k.dims[0] != st->batch || v.dims[0] != st->batch || k.dims[1] != st->tokens || v.dims[1] != st->tokens)
        return c.fail(Status::InvalidArgument, "query, key and value must share batch and sequence dimensions");
    if (q.dims[2] % st->q_heads || v.dims[2] % st->kv_heads)
        return c.fail(Status::InvalidArgument, "hidden sizes %lld and %lld are not multiples of the head counts %lld, %lld",
                      (long long)q.dims[2], (long long)v.dims[2], (long long)st->q_heads, (long long)st->kv_heads);
    st->key = q.dims[2] / st->q_heads;
    st->value = v.dims[2] / st->kv_heads;
    if (k.dims[2] != st->kv_heads * st->key)
        return c.fail(Status::InvalidArgument, "key's last dimension %lld must be kv_num_heads * %lld", (long long)k.dims[2],
                      (long long)st->key);
    if (c.has_input(3)) {
        const TensorDesc& s = c.inputs[3];
        if (s.rank != 4 || s.dims[0] != st->batch || s.dims[1] != st->kv_heads || s.dims[2] != st->key || s.dims[3] != st->value)
            return c.fail(Status::InvalidArgument, "past_state must be (%lld, %lld, %lld, %lld)", (long long)st->batch,
                          (long long)st->kv_heads, (long long)st->key, (long long)st->value);
    }
    if (c.has_input(4) != st->gated)
        return c.fail(Status::InvalidArgument, "update_rule '%.*s' %s the decay input", (int)rule.size, rule.data,
                      st->gated ? "needs" : "forbids");
    if (c.has_input(5) != st->delta)
        return c.fail(Status::InvalidArgument, "update_rule '%.*s' %s the beta input", (int)rule.size, rule.data,
                      st->delta ? "needs" : "forbids");
    auto per_token = [&](uint32_t i, int64_t a, int64_t b, int64_t* width) {
        const TensorDesc& d = c.inputs[i];
        int64_t last = d.rank == 3 ? d.dims[2] : -1;
        if (d.rank != 3 || d.dims[0] != st->batch || d.dims[1] != st->tokens || (last != a && last != b))
            return c.fail(Status::InvalidArgument, "%s must be (%lld, %lld, %lld or %lld)", i == 4 ? "decay" : "beta",
                          (long long)st->batch, (long long)st->tokens, (long long)a, (long long)b);
        *width = last;
        return Status::Ok;
    };
    if (st->gated) TESSEL_TRY(per_token(4, st->kv_heads, st->kv_heads * st->key, &st->decay_width));
    if (st->delta) TESSEL_TRY(per_token(5, st->kv_heads, 1, &st->beta_width));
    float scale = c.attribute_float("scale", 0.0f);
    st->scale = scale != 0 ? scale : (float)(1.0 / std::sqrt((double)(st->key ? st->key : 1)));
    c.outputs[0] = q;
    c.outputs[0].dims[2] = st->q_heads * st->value;
    if (c.num_outputs > 1) {
        TensorDesc s;
        s.type = ElementType::Float32;
        s.rank = 4;
        s.dims[0] = st->batch;
        s.dims[1] = st->kv_heads;
        s.dims[2] = st->key;
        s.dims[3] = st->value;
        c.outputs[1] = s;
    }
    for (uint32_t o = 0; o < c.num_outputs; ++o) TESSEL_TRY(check_output_desc(c, o));
    st->slots = c.threads ? c.threads : 1;
    c.scratch_bytes = (size_t)st->slots * (size_t)(st->key * st->value + st->value) * sizeof(float);
    return Status::Ok;
}

// One (batch, K/V head) pair over all tokens; state is key x value floats, delta value floats.
inline void linear_attention_head(const RunContext& c, const LinearAttentionState& st, int64_t b, int64_t kv, float* state,
                                   float* delta) {
    const int64_t dk = st.key, dv = st.value, group = st.q_heads / st.kv_heads;
    const float *q = c.inputs[0].as<const float>(), *k = c.inputs[1].as<const float>(), *v = c.inputs[2].as<const float>();
    const float* past = c.num_inputs > 3 ? static_cast<const float*>(c.inputs[3].data) : nullptr;
    const float* decay = st.gated ? c.inputs[4].as<const float>() : nullptr;
    const float* beta = st.delta ? c.inputs[5].as<const float>() : nullptr;
    float* out = c.outputs[0].as<float>();
    if (past) std::memcpy(state, past + (b * st.kv_heads + kv) * dk * dv, (size_t)(dk * dv) * sizeof(float));
    else for (int64_t e = 0; e < dk * dv; ++e) state[e] = 0;
    for (int64_t t = 0; t < st.tokens; ++t) {
        int64_t token = b * st.tokens + t;
        const float* kt = k + (token * st.kv_heads + kv) * dk;
        const float* vt = v + (token * st.kv_heads + kv) * dv;
        if (decay) {
            const float* g = decay + token * st.decay_width;
            for (int64_t d = 0; d < dk; ++d) {
                float f = std::exp(st.decay_width == st.kv_heads ? g[kv] : g[kv * dk + d]);
                for (int64_t m = 0; m < dv; ++m) state[d * dv + m] *= f;
            }
        }
        const float* write = vt;
        if (beta) {   // delta = beta * (v - S^T k)
            float rate = beta[token * st.beta_width + (st.beta_width == 1 ? 0 : kv)];
            for (int64_t m = 0; m < dv; ++m) delta[m] = 0;
            for (int64_t d = 0; d < dk; ++d)
                for (int64_t m = 0; m < dv; ++m) delta[m] += state[d * dv + m] * kt[d];
            for (int64_t m = 0; m < dv; ++m) delta[m] = rate * (vt[m] - delta[m]);
            write = delta;
        }
        for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) state[d * dv + m] += kt[d] * write[m];
        for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
            const float* qt = q + (token * st.q_heads + h) * dk;
            float* ot = out + (token * st.q_heads + h) * dv;
            for (int64_t m = 0; m < dv; ++m) ot[m] = 0;
            for (int64_t d = 0; d < dk; ++d)
                for (int64_t m = 0; m < dv; ++m) ot[m] += qt[d] * state[d * dv + m];
            for (int64_t m = 0; m < dv; ++m) ot[m] *= st.scale;
        }
    }
    if (c.num_outputs > 1)
        std::memcpy(c.outputs[1].as<float>() + (b * st.kv_heads + kv) * dk * dv, state, (size_t)(dk * dv) * sizeof(float));
}

inline Status run_linear_attention(const RunContext& c) {
    const LinearAttentionState& st = *static_cast<const LinearAttentionState*>(c.state);
    float* scratch = static_cast<float*>(c.scratch);
    nn_parallel(c, (uint64_t)(st.batch * st.kv_heads), [&](uint64_t slot, uint64_t begin, uint64_t end) {
        float* state = scratch + slot * (uint64_t)(st.key * st.value + st.value);
        for (uint64_t unit = begin; unit < end; ++unit)
            linear_attention_head(c, st, (int64_t)unit / st.kv_heads, (int64_t)unit % st.kv_heads, state, state + st.key * st.value);
    }, st.slots);
    return Status::Ok;
}

struct CausalConvState {
    int64_t batch = 0, channels = 0, length = 0, kernel = 0;
    bool silu = false;
};

inline Status prepare_causal_conv(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 27));
    TESSEL_TRY(check_tensor_inputs(c, 2, 4, 2, 0));
    if (c.num_outputs > 2) return c.fail(Status::InvalidArgument, "expects 1 or 2 outputs, has %u", c.num_outputs);
    for (uint32_t i = 0; i < 4; ++i) TESSEL_TRY(nn_float(c, i, i >= 2));
    const TensorDesc &x = c.inputs[0], &w = c.inputs[1];
    if (x.rank != 3) return c.fail(Status::InvalidArgument, "input must be (batch, channels, length), rank %u", x.rank);
    CausalConvState* st = nn_state<CausalConvState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    *st = CausalConvState{x.dims[0], x.dims[1], x.dims[2], w.rank == 3 ? w.dims[2] : 0, false};
    if (w.rank != 3 || w.dims[0] != st->channels || w.dims[1] != 1 || st->kernel < 1)
        return c.fail(Status::InvalidArgument, "weight must be (%lld, 1, k) with k >= 1", (long long)st->channels);
    if (c.has_input(2) && (c.inputs[2].rank != 1 || c.inputs[2].dims[0] != st->channels))
        return c.fail(Status::InvalidArgument, "bias must have %lld values", (long long)st->channels);
    if (c.has_input(3)) {
        const TensorDesc& s = c.inputs[3];
        if (s.rank != 3 || s.dims[0] != st->batch || s.dims[1] != st->channels || s.dims[2] != st->kernel - 1)
            return c.fail(Status::InvalidArgument, "past_state must be (%lld, %lld, %lld)", (long long)st->batch,
                          (long long)st->channels, (long long)st->kernel - 1);
    }
    StringView activation = c.attribute_string("activation", "none");
    if (activation == StringView("silu") || activation == StringView("swish")) st->silu = true;
    else if (activation != StringView("none"))
        return c.fail(Status::InvalidArgument, "unknown activation '%.*s' (none, silu or swish)", (int)activation.size, activation.data);
    c.outputs[0] = x;
    if (c.num_outputs > 1) {
        c.outputs[1] = x;
        c.outputs[1].dims[2] = st->kernel - 1;
    }
    return Status::Ok;
}

inline Status run_causal_conv(const RunContext& c) {
    const CausalConvState& st = *static_cast<const CausalConvState*>(c.state);
    const float *x = c.inputs[0].as<const float>(), *w = c.inputs[1].as<const float>();
    const float* bias = c.num_inputs > 2 ? static_cast<const float*>(c.inputs[2].data) : nullptr;
    const float* past = c.num_inputs > 3 ? static_cast<const float*>(c.inputs[3].data) : nullptr;
    float* y = c.outputs[0].as<float>();
    float* present = c.num_outputs > 1 ? c.outputs[1].as<float>() : nullptr;
    const int64_t keep = st.kernel - 1, length = st.length;
    nn_parallel(c, (uint64_t)(st.batch * st.channels), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t line = begin; line < end; ++line) {
            int64_t ch = (int64_t)line % st.channels;
            const float* xl = x + line * length;
            const float* pl = past ? past + line * keep : nullptr;
            const float* wl = w + ch * st.kernel;
            // position p of [past, x]: p < keep from the past (zeros without one), the rest from x
            auto at = [&](int64_t p) { return p >= keep ? xl[p - keep] : pl ? pl[p] : 0.0f; };
            float* yl = y + line * length;
            for (int64_t t = 0; t < length; ++t) {
                float sum = bias ? bias[ch] : 0.0f;
                for (int64_t j = 0; j < st.kernel; ++j) sum += wl[j] * at(t + j);
                yl[t] = st.silu ? sum / (1.0f + std::exp(-sum)) : sum;
            }
            if (present)
                for (int64_t p = 0; p < keep; ++p) present[line * keep + p] = at(length + p);
        }
    });
    return Status::Ok;
}

}  // namespace detail

namespace detail {
// The kernels of the sections above (attention through causal conv).
const OpKernel kAttentionKernels[] = {
    {"Attention", prepare_attention, run_attention},
    {"RotaryEmbedding", prepare_rotary_embedding, run_rotary_embedding},
    {"SwiGLU", prepare_swiglu, run_swiglu},
    {"TensorScatter", prepare_tensor_scatter, run_tensor_scatter},
    {"LinearAttention", prepare_linear_attention, run_linear_attention},
    {"CausalConvWithState", prepare_causal_conv, run_causal_conv},
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail

// >>recurrent layers
// RNN, GRU and LSTM (opsets 7, 14, 22). X [seq, batch, input] (layout 1, opset 14 on: [batch,
// seq, input]), W [dirs, G*hidden, input], R [dirs, G*hidden, hidden], B [dirs, 2*G*hidden],
// sequence_lens [batch], initial_h and LSTM's initial_c [dirs, batch, hidden] (layout 1:
// [batch, dirs, hidden]), LSTM's peepholes P [dirs, 3*hidden]; every input but X, W, R is
// optional, and so is every output. Per direction, the input projection X W^T + Wb + Rb of
// every step is one GEMM over seq*batch rows, and each step adds H R^T for the whole batch in
// one GEMM before the gates. A batch entry past its sequence length keeps its state and gets
// zeros in Y (onnxruntime's reading); in reverse, each entry starts at its own last step.
namespace detail {

enum class RecurrentKind : uint8_t { Rnn, Gru, Lstm };
enum class RecurrentActivation : uint8_t {
    Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus
};

struct RecurrentFunction {
    RecurrentActivation kind = RecurrentActivation::Tanh;
    float alpha = 0, beta = 0;
};

struct RecurrentState {
    RecurrentKind kind = RecurrentKind::Rnn;
    int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gates = 1;
    bool batch_first = false, reverse = false, has_clip = false, input_forget = false, linear_before_reset = false;
    float clip = 0;
    RecurrentFunction functions[2][3];   // per direction: f, g (GRU, LSTM), h (LSTM)
};

inline float recurrent_activation(const RecurrentFunction& fn, float x) {
    switch (fn.kind) {
    case RecurrentActivation::Relu: return x > 0 ? x : 0.0f;
    case RecurrentActivation::Tanh: return std::tanh(x);
    case RecurrentActivation::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case RecurrentActivation::Affine: return fn.alpha * x + fn.beta;
    case RecurrentActivation::LeakyRelu: return x >= 0 ? x : fn.alpha * x;
    case RecurrentActivation::ThresholdedRelu: return x > fn.alpha ? x : 0.0f;
    case RecurrentActivation::ScaledTanh: return fn.alpha * std::tanh(fn.beta * x);
    case RecurrentActivation::HardSigmoid: {
        float y = fn.alpha * x + fn.beta;
        return y < 0 ? 0.0f : y > 1 ? 1.0f : y;
    }
    case RecurrentActivation::Elu: return x >= 0 ? x : fn.alpha * (std::exp(x) - 1.0f);
    case RecurrentActivation::Softsign: return x / (1.0f + std::fabs(x));
    case RecurrentActivation::Softplus: return x > 20.0f ? x : std::log1p(std::exp(x));
    }
    return x;
}

// fn(clip(x)) over n values in place; the switch stays outside the loop for the common cases.
inline void recurrent_apply(const RecurrentFunction& fn, bool has_clip, float clip, float* x, int64_t n) {
    if (has_clip)
        for (int64_t j = 0; j < n; ++j) x[j] = x[j] < -clip ? -clip : x[j] > clip ? clip : x[j];
    if (fn.kind == RecurrentActivation::Sigmoid)
        for (int64_t j = 0; j < n; ++j) x[j] = 1.0f / (1.0f + std::exp(-x[j]));
    else if (fn.kind == RecurrentActivation::Tanh)
        for (int64_t j = 0; j < n; ++j) x[j] = std::tanh(x[j]);
    else
        for (int64_t j = 0; j < n; ++j) x[j] = recurrent_activation(fn, x[j]);
}

struct RecurrentActivationName {
    const char* name;
    RecurrentActivation kind;
    bool alpha, beta;        // whether it reads activation_alpha / activation_beta
    float alpha0, beta0;     // their defaults (onnxruntime's)
};
constexpr RecurrentActivationName kRecurrentActivations[] = {
    {"Relu", RecurrentActivation::Relu, false, false, 0, 0},
    {"Tanh", RecurrentActivation::Tanh, false, false, 0, 0},
    {"Sigmoid", RecurrentActivation::Sigmoid, false, false, 0, 0},
    {"Affine", RecurrentActivation::Affine, true, true, 1.0f, 0.0f},
    {"LeakyRelu", RecurrentActivation::LeakyRelu, true, false, 0.01f, 0},
    {"ThresholdedRelu", RecurrentActivation::ThresholdedRelu, true, false, 1.0f, 0},
    {"ScaledTanh", RecurrentActivation::ScaledTanh, true, true, 1.0f, 1.0f},
    {"HardSigmoid", RecurrentActivation::HardSigmoid, true, true, 0.2f, 0.5f},
    {"Elu", RecurrentActivation::Elu, true, false, 1.0f, 0},
    {"Softsign", RecurrentActivation::Softsign, false, false, 0, 0},
    {"Softplus", RecurrentActivation::Softplus, false, false, 0, 0},
};

inline bool same_name_ignoring_case(StringView a, const char* b) {
    size_t n = std::strlen(b);
    if (a.size != n) return false;
    for (size_t i = 0; i < n; ++i) {
        char x = a.data[i], y = b[i];
        if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
        if (x != y) return false;
    }
    return true;
}

// The functions of each direction: the defaults, or `activations` (one set for every
// direction, or one per direction) with activation_alpha/beta consumed in order by the
// functions that read them.
inline Status parse_recurrent_activations(PrepareContext& c, RecurrentState* st) {
    static const RecurrentActivation defaults[3][3] = {
        {RecurrentActivation::Tanh},
        {RecurrentActivation::Sigmoid, RecurrentActivation::Tanh},
        {RecurrentActivation::Sigmoid, RecurrentActivation::Tanh, RecurrentActivation::Tanh}};
    int per_direction = st->kind == RecurrentKind::Rnn ? 1 : st->kind == RecurrentKind::Gru ? 2 : 3;
    for (int d = 0; d < 2; ++d)
        for (int k = 0; k < per_direction; ++k) st->functions[d][k].kind = defaults[per_direction - 1][k];
    const Attribute* a = c.attribute("activations");
    if (!a) return Status::Ok;
    if (a->kind != AttributeKind::Strings) return c.fail(Status::InvalidArgument, "attribute 'activations' must be a list of strings");
    Span<const float> alphas = c.attribute_floats("activation_alpha"), betas = c.attribute_floats("activation_beta");
    size_t next_alpha = 0, next_beta = 0;
    StringView list = a->s;
    int count = 0;
    RecurrentFunction parsed[6];
    for (size_t begin = 0; begin < list.size;) {   // each name ends with a '\0'
        size_t end = begin;
        while (end < list.size && list.data[end]) ++end;
        StringView name(list.data + begin, end - begin);
        const RecurrentActivationName* known = nullptr;
        for (const RecurrentActivationName& k : kRecurrentActivations)
            if (same_name_ignoring_case(name, k.name)) known = &k;
        if (!known) return c.fail(Status::Unsupported, "activation '%.*s' is not supported", (int)name.size, name.data);
        if (count == 6) return c.fail(Status::InvalidArgument, "more than 6 activations");
        RecurrentFunction& fn = parsed[count++];
        fn.kind = known->kind;
        fn.alpha = known->alpha && next_alpha < alphas.size ? alphas.data[next_alpha++] : known->alpha0;
        fn.beta = known->beta && next_beta < betas.size ? betas.data[next_beta++] : known->beta0;
        begin = end + 1;
    }
    if (count != per_direction && count != per_direction * st->dirs)
        return c.fail(Status::InvalidArgument, "%d activations (%d per direction expected)", count, per_direction);
    for (int d = 0; d < st->dirs; ++d)
        for (int k = 0; k < per_direction; ++k) st->functions[d][k] = parsed[count == per_direction ? k : d * per_direction + k];
    return Status::Ok;
}

// Whether input i is present with exactly these dims.
inline Status recurrent_shape(PrepareContext& c, uint32_t i, const char* name, int rank, int64_t d0, int64_t d1 = 0,
                              int64_t d2 = 0) {
    const TensorDesc& d = c.inputs[i];
    const int64_t want[3] = {d0, d1, d2};
    bool ok = d.rank == rank;
    for (int k = 0; ok && k < rank; ++k) ok = d.dims[k] == want[k];
    if (ok) return Status::Ok;
    char got[96] = "";
    int n = 0;
    for (int j = 0; j < d.rank && n < (int)sizeof got - 24; ++j)
        n += std::snprintf(got + n, sizeof got - (size_t)n, j ? ", %lld" : "%lld", (long long)d.dims[j]);
    if (rank == 1) return c.fail(Status::InvalidArgument, "%s must be [%lld], is [%s]", name, (long long)d0, got);
    if (rank == 2)
        return c.fail(Status::InvalidArgument, "%s must be [%lld, %lld], is [%s]", name, (long long)d0, (long long)d1, got);
    return c.fail(Status::InvalidArgument, "%s must be [%lld, %lld, %lld], is [%s]", name, (long long)d0, (long long)d1,
                  (long long)d2, got);
}

inline Status prepare_recurrent(PrepareContext& c, RecurrentKind kind) {
    TESSEL_TRY(require_opset(c, 7));
    bool lstm = kind == RecurrentKind::Lstm;
    TESSEL_TRY(check_tensor_inputs(c, 3, lstm ? 8 : 6, 3, 0));
    uint32_t max_outputs = lstm ? 3 : 2;
    if (c.num_outputs > max_outputs) return c.fail(Status::InvalidArgument, "has %u outputs (at most %u)", c.num_outputs, max_outputs);
    for (uint32_t i = 0; i < c.num_inputs; ++i)
        if (i != 4) TESSEL_TRY(nn_float(c, i, i >= 3));
    RecurrentState* st = new_state<RecurrentState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->kind = kind;
    st->gates = kind == RecurrentKind::Rnn ? 1 : kind == RecurrentKind::Gru ? 3 : 4;
    StringView direction = c.attribute_string("direction", "forward");
    if (direction == StringView("bidirectional")) st->dirs = 2;
    else if (direction == StringView("reverse")) st->reverse = true;
    else if (direction != StringView("forward"))
        return c.fail(Status::InvalidArgument, "unknown direction '%.*s'", (int)direction.size, direction.data);
    int64_t layout = c.opset >= 14 ? c.attribute_int("layout", 0) : 0;
    if (layout != 0 && layout != 1) return c.fail(Status::InvalidArgument, "layout %lld (0 or 1 expected)", (long long)layout);
    st->batch_first = layout == 1;
    const TensorDesc& x = c.inputs[0];
    if (x.rank != 3) return c.fail(Status::InvalidArgument, "X must have rank 3, has %u", x.rank);
    st->seq = x.dims[st->batch_first ? 1 : 0];
    st->batch = x.dims[st->batch_first ? 0 : 1];
    st->input = x.dims[2];
    const TensorDesc& r = c.inputs[2];
    if (r.rank != 3) return c.fail(Status::InvalidArgument, "R must have rank 3, has %u", r.rank);
    st->hidden = r.dims[2];
    int64_t hidden = c.attribute_int("hidden_size", st->hidden);
    if (hidden != st->hidden)
        return c.fail(Status::InvalidArgument, "hidden_size %lld does not match R's last dimension %lld", (long long)hidden,
                      (long long)st->hidden);
    int64_t gh = st->gates * st->hidden, dirs = st->dirs, batch = st->batch, h = st->hidden;
    TESSEL_TRY(recurrent_shape(c, 1, "W", 3, dirs, gh, st->input));
    TESSEL_TRY(recurrent_shape(c, 2, "R", 3, dirs, gh, h));
    if (c.has_input(3)) TESSEL_TRY(recurrent_shape(c, 3, "B", 2, dirs, 2 * gh));
    if (c.has_input(4)) {
        TESSEL_TRY(index_type(c, 4));
        TESSEL_TRY(recurrent_shape(c, 4, "sequence_lens", 1, batch));
    }
    if (st->batch_first) {
        if (c.has_input(5)) TESSEL_TRY(recurrent_shape(c, 5, "initial_h", 3, batch, dirs, h));
        if (c.has_input(6)) TESSEL_TRY(recurrent_shape(c, 6, "initial_c", 3, batch, dirs, h));
    } else {
        if (c.has_input(5)) TESSEL_TRY(recurrent_shape(c, 5, "initial_h", 3, dirs, batch, h));
        if (c.has_input(6)) TESSEL_TRY(recurrent_shape(c, 6, "initial_c", 3, dirs, batch, h));
    }
    if (c.has_input(7)) TESSEL_TRY(recurrent_shape(c, 7, "P", 2, dirs, 3 * h));
    if (const Attribute* clip = c.attribute("clip")) {
        if (clip->kind != AttributeKind::Float || !(clip->f > 0))
            return c.fail(Status::InvalidArgument, "clip must be a positive float");
        st->has_clip = true;
        st->clip = clip->f;
    }
    if (lstm) st->input_forget = c.attribute_int("input_forget", 0) != 0;
    if (kind == RecurrentKind::Gru) st->linear_before_reset = c.attribute_int("linear_before_reset", 0) != 0;
    TESSEL_TRY(parse_recurrent_activations(c, st));
    // scratch: W^T, R^T, the input projection of every step, one step's gates, h, c and a temporary
    const uint64_t parts[] = {mul_saturated((uint64_t)st->input, (uint64_t)gh), mul_saturated((uint64_t)h, (uint64_t)gh),
                              mul_saturated(mul_saturated((uint64_t)st->seq, (uint64_t)batch), (uint64_t)gh),
                              mul_saturated((uint64_t)batch, (uint64_t)gh), mul_saturated(3, mul_saturated((uint64_t)batch, (uint64_t)h)),
                              64};
    uint64_t floats = 0;
    for (uint64_t part : parts) floats = floats + part > kSaturated ? kSaturated : floats + part;   // each part <= 2^62
    if (floats > c.max_elements)
        return c.fail(Status::LimitExceeded, "needs %llu floats of scratch", (unsigned long long)floats);
    c.scratch_bytes = (size_t)floats * sizeof(float);
    TensorDesc y;
    y.type = ElementType::Float32;
    y.rank = 4;
    int64_t y_dims[2][4] = {{st->seq, dirs, batch, h}, {batch, st->seq, dirs, h}};
    for (int k = 0; k < 4; ++k) y.dims[k] = y_dims[layout][k];
    TensorDesc last;
    last.type = ElementType::Float32;
    last.rank = 3;
    int64_t last_dims[2][3] = {{dirs, batch, h}, {batch, dirs, h}};
    for (int k = 0; k < 3; ++k) last.dims[k] = last_dims[layout][k];
    for (uint32_t o = 0; o < c.num_outputs; ++o) {
        c.outputs[o] = o == 0 ? y : last;
        TESSEL_TRY(check_output_desc(c, o));
    }
    c.state = st;
    return Status::Ok;
}
inline Status prepare_rnn(PrepareContext& c) { return prepare_recurrent(c, RecurrentKind::Rnn); }
inline Status prepare_gru(PrepareContext& c) { return prepare_recurrent(c, RecurrentKind::Gru); }
inline Status prepare_lstm(PrepareContext& c) { return prepare_recurrent(c, RecurrentKind::Lstm); }

inline Status run_recurrent(const RunContext& c) {
    const RecurrentState& st = *static_cast<const RecurrentState*>(c.state);
    auto input = [&](uint32_t i) -> const TensorView* {
        return i < c.num_inputs && c.inputs[i].data && c.inputs[i].desc.type != ElementType::Undefined ? &c.inputs[i] : nullptr;
    };
    const int64_t seq = st.seq, batch = st.batch, hidden = st.hidden, dirs = st.dirs, in = st.input;
    const int64_t gh = st.gates * hidden;
    const TensorView* lens = input(4);
    for (int64_t b = 0; lens && b < batch; ++b) {   // all first: no partial output
        int64_t len = load_index(lens->data, lens->desc.type, (uint64_t)b);
        if (len < 0 || len > seq)
            return c.fail(Status::InvalidArgument, "sequence_lens[%lld] = %lld out of range 0..%lld", (long long)b,
                          (long long)len, (long long)seq);
    }
    const float* x = c.inputs[0].as<const float>();
    const TensorView *bias = input(3), *initial_h = input(5), *initial_c = input(6), *peep = input(7);
    float* y = c.num_outputs > 0 ? c.outputs[0].as<float>() : nullptr;
    float* y_h = c.num_outputs > 1 ? c.outputs[1].as<float>() : nullptr;
    float* y_c = c.num_outputs > 2 ? c.outputs[2].as<float>() : nullptr;
    float* wt = static_cast<float*>(c.scratch);
    float* rt = wt + in * gh;
    float* xw = rt + hidden * gh;
    float* gates = xw + seq * batch * gh;
    float* h = gates + batch * gh;
    float* cell = h + batch * hidden;
    float* tmp = cell + batch * hidden;
    bool gru = st.kind == RecurrentKind::Gru;
    // Element offsets: a step's X row, Y entry and a direction's state entry, per layout.
    auto x_row = [&](int64_t t, int64_t b) { return st.batch_first ? b * seq + t : t * batch + b; };
    auto y_at = [&](int64_t t, int64_t d, int64_t b) {
        return (st.batch_first ? (b * seq + t) * dirs + d : (t * dirs + d) * batch + b) * hidden;
    };
    auto state_at = [&](int64_t d, int64_t b) { return (st.batch_first ? b * dirs + d : d * batch + b) * hidden; };
    for (int64_t d = 0; d < dirs; ++d) {
        bool reverse = st.reverse || d == 1;
        const RecurrentFunction* fn = st.functions[d];
        const float* w = c.inputs[1].as<const float>() + d * gh * in;
        const float* r = c.inputs[2].as<const float>() + d * gh * hidden;
        for (int64_t n = 0; n < gh; ++n) {
            for (int64_t k = 0; k < in; ++k) wt[k * gh + n] = w[n * in + k];
            for (int64_t k = 0; k < hidden; ++k) rt[k * gh + n] = r[n * hidden + k];
        }
        gemm(seq * batch, gh, in, x, in, 1, wt, gh, xw, gh, false);
        // Wb + Rb join the projection, except GRU's Rbh with linear_before_reset (it is
        // scaled by r).
        const float* wb = bias ? bias->as<const float>() + d * 2 * gh : nullptr;
        const float* rb = wb ? wb + gh : nullptr;
        int64_t rb_end = gru && st.linear_before_reset ? 2 * hidden : gh;
        if (wb)
            for (int64_t row = 0; row < seq * batch; ++row) {
                float* p = xw + row * gh;
                for (int64_t n = 0; n < gh; ++n) p[n] += wb[n];
                for (int64_t n = 0; n < rb_end; ++n) p[n] += rb[n];
            }
        for (int64_t b = 0; b < batch; ++b) {
            if (initial_h) std::memcpy(h + b * hidden, initial_h->as<const float>() + state_at(d, b), (size_t)hidden * sizeof(float));
            else std::memset(h + b * hidden, 0, (size_t)hidden * sizeof(float));
            if (initial_c) std::memcpy(cell + b * hidden, initial_c->as<const float>() + state_at(d, b), (size_t)hidden * sizeof(float));
            else std::memset(cell + b * hidden, 0, (size_t)hidden * sizeof(float));
        }
        const float* p_i = peep ? peep->as<const float>() + d * 3 * hidden : nullptr;
        const float* p_o = p_i ? p_i + hidden : nullptr;
        const float* p_f = p_i ? p_i + 2 * hidden : nullptr;
        auto length = [&](int64_t b) { return lens ? load_index(lens->data, lens->desc.type, (uint64_t)b) : seq; };
        if (y)   // steps past an entry's length stay zero
            for (int64_t b = 0; b < batch; ++b)
                for (int64_t t = length(b); t < seq; ++t) std::memset(y + y_at(t, d, b), 0, (size_t)hidden * sizeof(float));
        for (int64_t s = 0; s < seq; ++s) {
            for (int64_t b = 0; b < batch; ++b) {
                int64_t len = length(b);
                if (s < len) std::memcpy(gates + b * gh, xw + x_row(reverse ? len - 1 - s : s, b) * gh, (size_t)gh * sizeof(float));
                else std::memset(gates + b * gh, 0, (size_t)gh * sizeof(float));
            }
            // H R^T for every gate but GRU's h, which needs r first
            gemm(batch, gru ? 2 * hidden : gh, hidden, h, hidden, 1, rt, gh, gates, gh, true);
            if (gru) {
                for (int64_t b = 0; b < batch; ++b) {
                    float* g = gates + b * gh;
                    recurrent_apply(fn[0], st.has_clip, st.clip, g, 2 * hidden);   // z, r
                    if (!st.linear_before_reset)
                        for (int64_t j = 0; j < hidden; ++j) tmp[b * hidden + j] = g[hidden + j] * h[b * hidden + j];
                }
                if (st.linear_before_reset) {
                    gemm(batch, hidden, hidden, h, hidden, 1, rt + 2 * hidden, gh, tmp, hidden, false);
                    for (int64_t b = 0; b < batch; ++b) {
                        float* g = gates + b * gh;
                        for (int64_t j = 0; j < hidden; ++j)
                            g[2 * hidden + j] += g[hidden + j] * (tmp[b * hidden + j] + (rb ? rb[2 * hidden + j] : 0.0f));
                    }
                } else {
                    gemm(batch, hidden, hidden, tmp, hidden, 1, rt + 2 * hidden, gh, gates + 2 * hidden, gh, true);
                }
            }
            for (int64_t b = 0; b < batch; ++b) {
                int64_t len = length(b);
                if (s >= len) continue;
                int64_t t = reverse ? len - 1 - s : s;
                float* g = gates + b * gh;
                float* hb = h + b * hidden;
                if (st.kind == RecurrentKind::Rnn) {
                    recurrent_apply(fn[0], st.has_clip, st.clip, g, hidden);
                    std::memcpy(hb, g, (size_t)hidden * sizeof(float));
                } else if (gru) {
                    float* hh = g + 2 * hidden;
                    recurrent_apply(fn[1], st.has_clip, st.clip, hh, hidden);
                    for (int64_t j = 0; j < hidden; ++j) hb[j] = (1.0f - g[j]) * hh[j] + g[j] * hb[j];
                } else {
                    float *gi = g, *go = g + hidden, *gf = g + 2 * hidden, *gc = g + 3 * hidden;
                    float* cb = cell + b * hidden;
                    if (p_i)
                        for (int64_t j = 0; j < hidden; ++j) {
                            gi[j] += p_i[j] * cb[j];
                            gf[j] += p_f[j] * cb[j];
                        }
                    recurrent_apply(fn[0], st.has_clip, st.clip, gi, hidden);
                    if (st.input_forget) for (int64_t j = 0; j < hidden; ++j) gf[j] = 1.0f - gi[j];
                    else recurrent_apply(fn[0], st.has_clip, st.clip, gf, hidden);
                    recurrent_apply(fn[1], st.has_clip, st.clip, gc, hidden);
                    for (int64_t j = 0; j < hidden; ++j) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
                    if (p_o) for (int64_t j = 0; j < hidden; ++j) go[j] += p_o[j] * cb[j];
                    recurrent_apply(fn[0], st.has_clip, st.clip, go, hidden);
                    for (int64_t j = 0; j < hidden; ++j) hb[j] = go[j] * recurrent_activation(fn[2], cb[j]);
                }
                if (y) std::memcpy(y + y_at(t, d, b), hb, (size_t)hidden * sizeof(float));
            }
        }
        for (int64_t b = 0; b < batch; ++b) {
            if (y_h) std::memcpy(y_h + state_at(d, b), h + b * hidden, (size_t)hidden * sizeof(float));
            if (y_c) std::memcpy(y_c + state_at(d, b), cell + b * hidden, (size_t)hidden * sizeof(float));
        }
    }
    return Status::Ok;
}

const OpKernel kRecurrentKernels[] = {
    {"RNN", prepare_rnn, run_recurrent},
    {"GRU", prepare_gru, run_recurrent},
    {"LSTM", prepare_lstm, run_recurrent},
    {nullptr, nullptr, nullptr},   // end marker
};

}  // namespace detail

// >>signal ops
// DFT (opset 17: axis attribute; 20: axis input), STFT, HannWindow, HammingWindow,
// BlackmanWindow and MelWeightMatrix (opset 17), float32. A signal's last dimension is 1
// (real) or 2 (real, imaginary). DFT lines are truncated or zero-padded to dft_length and
// transformed in double with a twiddle table made at prepare (so dft_length is at most
// kMaxDftLength): a radix-2 FFT for a power of two, direct summation otherwise. onesided with
// inverse is the real inverse (IRFFT: a one-sided spectrum in, dft_length real values out),
// as in ONNX's reference. Lengths and sizes that give shapes must be constants.
namespace detail {

constexpr int64_t kMaxDftLength = 1 << 20;

// cos and sin of 2 pi m / n for m in [0, n), kept in the arena.
inline Status make_twiddles(PrepareContext& c, int64_t n, const double** table) {
    if (n < 1 || n > kMaxDftLength)
        return c.fail(n < 1 ? Status::InvalidArgument : Status::LimitExceeded, "dft length %lld out of range 1..%lld",
                      (long long)n, (long long)kMaxDftLength);
    double* t = c.arena->allocate_array<double>((size_t)(2 * n));
    if (!t) return c.fail(Status::OutOfMemory, "out of memory");
    const double kTwoPi = 6.283185307179586476925286766559;
    for (int64_t m = 0; m < n; ++m) {
        t[2 * m] = std::cos(kTwoPi * (double)m / (double)n);
        t[2 * m + 1] = std::sin(kTwoPi * (double)m / (double)n);
    }
    *table = t;
    return Status::Ok;
}

// out[k] = sum_n line[n] e^(-+2 pi i k n / N) for k in [0, count): line and out hold complex
// values as (re, im) pairs; inverse takes the + sign (no 1/N).
inline void dft_sum(const double* line, int64_t n, const double* twiddles, bool inverse, int64_t count, double* out) {
    double sign = inverse ? 1.0 : -1.0;
    for (int64_t k = 0; k < count; ++k) {
        double re = 0, im = 0;
        int64_t m = 0;   // k * j mod n
        for (int64_t j = 0; j < n; ++j) {
            double cs = twiddles[2 * m], sn = sign * twiddles[2 * m + 1];
            re += line[2 * j] * cs - line[2 * j + 1] * sn;
            im += line[2 * j] * sn + line[2 * j + 1] * cs;
            m += k % n;
            if (m >= n) m -= n;
        }
        out[2 * k] = re;
        out[2 * k + 1] = im;
    }
}

// The same for a power-of-two n, in place in line (out unused): an iterative radix-2 FFT.
inline void fft_radix2(double* line, int64_t n, const double* twiddles, bool inverse) {
    for (int64_t i = 1, j = 0; i < n; ++i) {   // bit-reversed order
        int64_t bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) {
            double re = line[2 * i], im = line[2 * i + 1];
            line[2 * i] = line[2 * j];
            line[2 * i + 1] = line[2 * j + 1];
            line[2 * j] = re;
            line[2 * j + 1] = im;
        }
    }
    double sign = inverse ? 1.0 : -1.0;
    for (int64_t len = 2; len <= n; len <<= 1) {
        int64_t half = len / 2, step = n / len;
        for (int64_t i = 0; i < n; i += len)
            for (int64_t j = 0; j < half; ++j) {
                double cs = twiddles[2 * j * step], sn = sign * twiddles[2 * j * step + 1];
                double* a = line + 2 * (i + j);
                double* b = line + 2 * (i + j + half);
                double re = b[0] * cs - b[1] * sn, im = b[0] * sn + b[1] * cs;
                b[0] = a[0] - re;
                b[1] = a[1] - im;
                a[0] += re;
                a[1] += im;
            }
    }
}

// The first `count` bins of line's transform in out (line is overwritten).
inline void dft_line(double* line, int64_t n, const double* twiddles, bool inverse, int64_t count, double* out) {
    if ((n & (n - 1)) == 0) {
        fft_radix2(line, n, twiddles, inverse);
        std::memcpy(out, line, (size_t)(2 * count) * sizeof(double));
    } else {
        dft_sum(line, n, twiddles, inverse, count, out);
    }
}

// A scalar (rank 0 or one element) int64/int32 input known at prepare.
inline Status scalar_int_input(PrepareContext& c, uint32_t i, const char* name, int64_t* value) {
    IntValues v;
    TESSEL_TRY(int_input(c, i, &v));
    if (v.count != 1) return c.fail(Status::InvalidArgument, "%s must hold one value, holds %llu", name, (unsigned long long)v.count);
    *value = v[0];
    return Status::Ok;
}

struct DftState {
    int64_t outer = 0, length = 0, inner = 0, in_parts = 1;   // input: [outer, length, inner, in_parts]
    int64_t n = 0, count = 0, out_parts = 2;                  // dft_length; output [outer, count, inner, out_parts]
    bool inverse = false, real_inverse = false;
    const double* twiddles = nullptr;
};

inline Status prepare_dft(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 17));
    bool axis_input = c.opset >= 20;
    TESSEL_TRY(check_tensor_inputs(c, 1, axis_input ? 3 : 2, 1));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 2 || (x.dims[x.rank - 1] != 1 && x.dims[x.rank - 1] != 2))
        return c.fail(Status::InvalidArgument, "input must be [..., 1] (real) or [..., 2] (complex)");
    int64_t axis = axis_input ? -2 : c.attribute_int("axis", 1);
    if (axis_input && c.has_input(2)) TESSEL_TRY(scalar_int_input(c, 2, "axis", &axis));
    int64_t rank = x.rank;
    if (axis < -rank || axis == -1 || axis >= rank - 1)
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %lld (not the last)", (long long)axis,
                      (long long)rank);
    if (axis < 0) axis += rank;
    DftState* st = new_state<DftState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->inverse = c.attribute_int("inverse", 0) != 0;
    bool onesided = c.attribute_int("onesided", 0) != 0;
    st->real_inverse = st->inverse && onesided;
    st->outer = (int64_t)dims_product(x, 0, (int)axis);
    st->length = x.dims[axis];
    st->inner = (int64_t)dims_product(x, (int)axis + 1, x.rank - 1);
    st->in_parts = x.dims[x.rank - 1];
    st->n = st->real_inverse ? 2 * (st->length - 1) : st->length;
    if (c.has_input(1)) TESSEL_TRY(scalar_int_input(c, 1, "dft_length", &st->n));
    TESSEL_TRY(make_twiddles(c, st->n, &st->twiddles));
    st->count = onesided && !st->inverse ? st->n / 2 + 1 : st->n;
    st->out_parts = st->real_inverse ? 1 : 2;
    c.outputs[0] = x;
    c.outputs[0].dims[axis] = st->count;
    c.outputs[0].dims[x.rank - 1] = st->out_parts;
    TESSEL_TRY(check_output_desc(c, 0));
    c.scratch_bytes = (size_t)(4 * st->n) * sizeof(double);
    c.state = st;
    return Status::Ok;
}

inline Status run_dft(const RunContext& c) {
    const DftState& st = *static_cast<const DftState*>(c.state);
    const float* x = c.inputs[0].as<const float>();
    float* y = c.outputs[0].as<float>();
    double* line = static_cast<double*>(c.scratch);
    double* out = line + 2 * st.n;
    int64_t half = st.n / 2;
    for (int64_t o = 0; o < st.outer; ++o)
        for (int64_t i = 0; i < st.inner; ++i) {
            auto at = [&](int64_t j, int part) -> double {   // input value j of this line (0 past its end)
                if (j >= st.length || part >= st.in_parts) return 0.0;
                return x[((o * st.length + j) * st.inner + i) * st.in_parts + part];
            };
            if (st.real_inverse) {   // the Hermitian spectrum of the one-sided input
                for (int64_t k = 0; k <= half; ++k) {
                    line[2 * k] = at(k, 0);
                    line[2 * k + 1] = at(k, 1);
                }
                for (int64_t k = half + 1; k < st.n; ++k) {
                    line[2 * k] = line[2 * (st.n - k)];
                    line[2 * k + 1] = -line[2 * (st.n - k) + 1];
                }
            } else {
                for (int64_t j = 0; j < st.n; ++j) {
                    line[2 * j] = at(j, 0);
                    line[2 * j + 1] = at(j, 1);
                }
            }
            dft_line(line, st.n, st.twiddles, st.inverse, st.count, out);
            double scale = st.inverse ? 1.0 / (double)st.n : 1.0;
            for (int64_t k = 0; k < st.count; ++k) {
                float* yk = y + ((o * st.count + k) * st.inner + i) * st.out_parts;
                yk[0] = (float)(out[2 * k] * scale);
                if (st.out_parts == 2) yk[1] = (float)(out[2 * k + 1] * scale);
            }
        }
    return Status::Ok;
}

struct StftState {
    int64_t batch = 0, length = 0, parts = 1, step = 1, frame = 0, frames = 0, bins = 0;
    const double* twiddles = nullptr;
};

inline Status prepare_stft(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 17));
    TESSEL_TRY(check_tensor_inputs(c, 2, 4, 2));
    TESSEL_TRY(nn_float(c, 0));
    TESSEL_TRY(nn_float(c, 2, true));
    const TensorDesc& x = c.inputs[0];
    if (x.rank != 3 || (x.dims[2] != 1 && x.dims[2] != 2))
        return c.fail(Status::InvalidArgument, "signal must be [batch, length, 1] or [batch, length, 2]");
    StftState* st = new_state<StftState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->batch = x.dims[0];
    st->length = x.dims[1];
    st->parts = x.dims[2];
    TESSEL_TRY(scalar_int_input(c, 1, "frame_step", &st->step));
    if (st->step < 1) return c.fail(Status::InvalidArgument, "frame_step %lld (at least 1)", (long long)st->step);
    if (c.has_input(2) && c.inputs[2].rank != 1) return c.fail(Status::InvalidArgument, "window must be 1-D");
    st->frame = c.has_input(2) ? c.inputs[2].dims[0] : st->length;
    if (c.has_input(3)) {
        int64_t frame = 0;
        TESSEL_TRY(scalar_int_input(c, 3, "frame_length", &frame));
        if (c.has_input(2) && frame != st->frame)
            return c.fail(Status::InvalidArgument, "frame_length %lld differs from the window's length %lld",
                          (long long)frame, (long long)st->frame);
        st->frame = frame;
    }
    if (st->frame < 1 || st->frame > st->length)
        return c.fail(Status::InvalidArgument, "frame length %lld out of range 1..%lld", (long long)st->frame,
                      (long long)st->length);
    TESSEL_TRY(make_twiddles(c, st->frame, &st->twiddles));
    st->frames = 1 + (st->length - st->frame) / st->step;
    st->bins = c.attribute_int("onesided", 1) != 0 ? st->frame / 2 + 1 : st->frame;
    TensorDesc& y = c.outputs[0];
    y = TensorDesc();
    y.type = ElementType::Float32;
    y.rank = 4;
    y.dims[0] = st->batch;
    y.dims[1] = st->frames;
    y.dims[2] = st->bins;
    y.dims[3] = 2;
    TESSEL_TRY(check_output_desc(c, 0));
    c.scratch_bytes = (size_t)(4 * st->frame) * sizeof(double);
    c.state = st;
    return Status::Ok;
}

inline Status run_stft(const RunContext& c) {
    const StftState& st = *static_cast<const StftState*>(c.state);
    const float* x = c.inputs[0].as<const float>();
    const float* window = c.num_inputs > 2 && c.inputs[2].data ? c.inputs[2].as<const float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    double* line = static_cast<double*>(c.scratch);
    double* out = line + 2 * st.frame;
    for (int64_t b = 0; b < st.batch; ++b)
        for (int64_t f = 0; f < st.frames; ++f) {
            const float* xf = x + (b * st.length + f * st.step) * st.parts;
            for (int64_t j = 0; j < st.frame; ++j) {
                double w = window ? window[j] : 1.0;
                line[2 * j] = xf[j * st.parts] * w;
                line[2 * j + 1] = st.parts == 2 ? xf[j * st.parts + 1] * w : 0.0;
            }
            dft_line(line, st.frame, st.twiddles, false, st.bins, out);
            float* yf = y + (b * st.frames + f) * st.bins * 2;
            for (int64_t k = 0; k < 2 * st.bins; ++k) yf[k] = (float)out[k];
        }
    return Status::Ok;
}

// output_datatype: float only (the other float types are refused as types).
inline Status check_float_datatype(PrepareContext& c) {
    int64_t type = c.attribute_int("output_datatype", 1);
    if (type != 1) return c.fail(Status::Unsupported, "output_datatype %lld (1, float, only)", (long long)type);
    return Status::Ok;
}

enum class WindowKind : uint8_t { Hann, Hamming, Blackman };
struct WindowState {
    WindowKind kind = WindowKind::Hann;
    bool periodic = true;
};

inline Status prepare_window(PrepareContext& c, WindowKind kind) {
    TESSEL_TRY(require_opset(c, 17));
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    TESSEL_TRY(check_float_datatype(c));
    int64_t size = 0;
    TESSEL_TRY(scalar_int_input(c, 0, "size", &size));
    if (size < 0) return c.fail(Status::InvalidArgument, "size %lld is negative", (long long)size);
    WindowState* st = new_state<WindowState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->kind = kind;
    st->periodic = c.attribute_int("periodic", 1) != 0;
    c.outputs[0] = TensorDesc();
    c.outputs[0].type = ElementType::Float32;
    c.outputs[0].rank = 1;
    c.outputs[0].dims[0] = size;
    TESSEL_TRY(check_output_desc(c, 0));
    c.state = st;
    return Status::Ok;
}
inline Status prepare_hann_window(PrepareContext& c) { return prepare_window(c, WindowKind::Hann); }
inline Status prepare_hamming_window(PrepareContext& c) { return prepare_window(c, WindowKind::Hamming); }
inline Status prepare_blackman_window(PrepareContext& c) { return prepare_window(c, WindowKind::Blackman); }

// w[n] over N = size (periodic) or size - 1 (symmetric); a symmetric window of size 1 is [1].
inline Status run_window(const RunContext& c) {
    const WindowState& st = *static_cast<const WindowState*>(c.state);
    float* y = c.outputs[0].as<float>();
    int64_t size = c.outputs[0].desc.dims[0];
    double n1 = (double)(st.periodic ? size : size - 1);
    const double kTwoPi = 6.283185307179586476925286766559;
    for (int64_t n = 0; n < size; ++n) {
        if (n1 <= 0) {
            y[n] = 1.0f;
            continue;
        }
        double t = kTwoPi * (double)n / n1, w = 1.0;
        switch (st.kind) {
        case WindowKind::Hann: w = 0.5 - 0.5 * std::cos(t); break;
        case WindowKind::Hamming: w = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(t); break;
        case WindowKind::Blackman: w = 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t); break;
        }
        y[n] = (float)w;
    }
    return Status::Ok;
}

// MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins] triangular filters between mel-spaced
// points, computed as ONNX's reference (which floors each point to a spectrogram bin).
// num_mel_bins and dft_length give the shape (constants); sample_rate and the edges are read at
// run time, and points outside the spectrogram are InvalidArgument.
struct MelState {
    int64_t mel_bins = 0, dft_length = 0;
};

inline Status prepare_mel_weight_matrix(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 17));
    TESSEL_TRY(check_tensor_inputs(c, 5, 5, 5));
    TESSEL_TRY(check_float_datatype(c));
    MelState* st = new_state<MelState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(scalar_int_input(c, 0, "num_mel_bins", &st->mel_bins));
    TESSEL_TRY(scalar_int_input(c, 1, "dft_length", &st->dft_length));
    if (st->mel_bins < 1) return c.fail(Status::InvalidArgument, "num_mel_bins %lld (at least 1)", (long long)st->mel_bins);
    if (st->dft_length < 1) return c.fail(Status::InvalidArgument, "dft_length %lld (at least 1)", (long long)st->dft_length);
    TESSEL_TRY(index_type(c, 2));
    for (uint32_t i = 2; i < 5; ++i) {
        uint64_t n = 0;
        if (!desc_elements(c.inputs[i], &n) || n != 1) return c.fail(Status::InvalidArgument, "input %u must hold one value", i);
    }
    TESSEL_TRY(nn_float(c, 3));
    TESSEL_TRY(nn_float(c, 4));
    c.outputs[0] = TensorDesc();
    c.outputs[0].type = ElementType::Float32;
    c.outputs[0].rank = 2;
    c.outputs[0].dims[0] = st->dft_length / 2 + 1;
    c.outputs[0].dims[1] = st->mel_bins;
    TESSEL_TRY(check_output_desc(c, 0));
    if (st->mel_bins > kMaxDftLength) return c.fail(Status::LimitExceeded, "num_mel_bins %lld", (long long)st->mel_bins);
    c.scratch_bytes = (size_t)(st->mel_bins + 2) * sizeof(int64_t);
    c.state = st;
    return Status::Ok;
}

inline Status run_mel_weight_matrix(const RunContext& c) {
    const MelState& st = *static_cast<const MelState*>(c.state);
    int64_t rate = load_index(c.inputs[2].data, c.inputs[2].desc.type, 0);
    double lower = c.inputs[3].as<const float>()[0], upper = c.inputs[4].as<const float>()[0];
    if (rate < 1) return c.fail(Status::InvalidArgument, "sample_rate %lld (at least 1)", (long long)rate);
    int64_t spectrum = st.dft_length / 2 + 1;
    int64_t* points = static_cast<int64_t*>(c.scratch);
    double low_mel = 2595.0 * std::log10(1.0 + lower / 700.0), high_mel = 2595.0 * std::log10(1.0 + upper / 700.0);
    double step = (high_mel - low_mel) / (double)(st.mel_bins + 2);
    for (int64_t i = 0; i < st.mel_bins + 2; ++i) {
        double hz = 700.0 * (std::pow(10.0, ((double)i * step + low_mel) / 2595.0) - 1.0);
        double bin = std::floor((double)(st.dft_length + 1) * hz / (double)rate);
        // the last point bounds a range (exclusive), the others are written
        if (!(bin >= 0 && bin <= (double)(i == st.mel_bins + 1 ? spectrum : spectrum - 1)))
            return c.fail(Status::InvalidArgument, "mel point %lld falls on bin %g, outside the %lld spectrogram bins",
                          (long long)i, bin, (long long)spectrum);
        points[i] = (int64_t)bin;
    }
    float* y = c.outputs[0].as<float>();
    std::memset(y, 0, (size_t)(spectrum * st.mel_bins) * sizeof(float));
    for (int64_t m = 0; m < st.mel_bins; ++m) {
        int64_t left = points[m], center = points[m + 1], right = points[m + 2];
        if (center == left) y[center * st.mel_bins + m] = 1.0f;
        else
            for (int64_t j = left; j <= center; ++j) y[j * st.mel_bins + m] = (float)(j - left) / (float)(center - left);
        for (int64_t j = center; j < right; ++j) y[j * st.mel_bins + m] = (float)(right - j) / (float)(right - center);
    }
    return Status::Ok;
}

const OpKernel kSignalKernels[] = {
    {"DFT", prepare_dft, run_dft},
    {"STFT", prepare_stft, run_stft},
    {"HannWindow", prepare_hann_window, run_window},
    {"HammingWindow", prepare_hamming_window, run_window},
    {"BlackmanWindow", prepare_blackman_window, run_window},
    {"MelWeightMatrix", prepare_mel_weight_matrix, run_mel_weight_matrix},
    {nullptr, nullptr, nullptr},   // end marker
};

}  // namespace detail

// >>grid sample and affine grid
// GridSample as ONNX's reference (PyTorch's grid_sampler): grid coordinates in [-1, 1], x
// first (the last spatial dim), denormalized with align_corners; a coordinate outside the
// borders is clamped (border) or reflected (reflection), then each tap is resolved again
// (zeros: a tap outside counts 0). Opset 16: 4-D only, modes bilinear/nearest/bicubic; from
// 20: 1 to 3 spatial dims, modes linear/nearest/cubic. AffineGrid (opset 20): theta applied
// to the base grid of a 2-D or 3-D size.
namespace detail {

enum class GridMode : uint8_t { Nearest, Linear, Cubic };
enum class GridPadding : uint8_t { Zeros, Border, Reflection };

struct GridSampleState {
    int spatial = 0;
    int64_t batch = 0, channels = 0, points = 0, in_plane = 0;   // points: output positions per image
    int64_t in[3] = {};
    GridMode mode = GridMode::Linear;
    GridPadding padding = GridPadding::Zeros;
    bool align_corners = false;
};

// Reflects x into [low, high] by the nearer border until it is inside (ONNX's _gs_reflect).
inline double grid_reflect(double x, double low, double high) {
    double range = high - low;
    if (!(range > 0)) return low;
    if (x < low || x > high) {
        bool below = x < low;
        double dx = below ? low - x : x - high;
        double r = std::fmod(dx, range);
        bool even = std::fmod(std::floor(dx / range), 2.0) == 0;
        x = below == even ? low + r : high - r;
    }
    return x;
}

// x rounded to the nearest integer, ties to even, whatever the FPU's rounding mode (std::rint
// reads the environment): GridSample's nearest (as PyTorch) and the quantization ops.
inline double round_half_even(double v) {
    double f = std::floor(v), d = v - f;
    if (d != 0.5) return d < 0.5 ? f : f + 1;
    return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

// Keys' cubic weights (a = -0.75) of the taps at -1, 0, 1, 2 for a fraction t in [0, 1).
inline void cubic_weights(double t, double* w) {
    const double a = -0.75;
    double x0 = t + 1, x1 = t, x2 = 1 - t, x3 = 2 - t;
    w[0] = ((a * x0 - 5 * a) * x0 + 8 * a) * x0 - 4 * a;
    w[1] = ((a + 2) * x1 - (a + 3)) * x1 * x1 + 1;
    w[2] = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1;
    w[3] = ((a * x3 - 5 * a) * x3 + 8 * a) * x3 - 4 * a;
}

// The source index of tap i along a dim of `size` (ONNX's _pixel_at_array); -1: a zero.
inline int64_t grid_tap(int64_t i, int64_t size, GridPadding padding, double low, double high) {
    if (padding == GridPadding::Zeros) return i >= 0 && i < size ? i : -1;
    if (padding == GridPadding::Reflection) i = (int64_t)grid_reflect((double)i, low, high);   // truncated, as int()
    return i < 0 ? 0 : i >= size ? size - 1 : i;
}

// Every present input's dims other than zeros within the element limit, so that products of
// a few dims (N * C * points, group * channels) stay far from int64 overflow.
inline Status check_spatial_inputs(PrepareContext& c) {
    for (uint32_t i = 0; i < c.num_inputs; ++i) {
        if (!c.has_input(i)) continue;
        uint64_t n = 1;
        for (int k = 0; k < c.inputs[i].rank; ++k) n = mul_saturated(n, c.inputs[i].dims[k] ? (uint64_t)c.inputs[i].dims[k] : 1);
        if (n > kTensorOpMaxElements) return c.fail(Status::LimitExceeded, "input %u's dims multiply past %llu", i, (unsigned long long)kTensorOpMaxElements);
    }
    return Status::Ok;
}

// check_output_desc, and also the dims other than zeros within the element limit: an empty
// output must still be describable (desc_elements) when its other dims are computed.
inline Status check_spatial_output(PrepareContext& c) {
    TESSEL_TRY(check_output_desc(c, 0));
    const TensorDesc& d = c.outputs[0];
    uint64_t n = 1;
    for (int i = 0; i < d.rank; ++i) n = mul_saturated(n, d.dims[i] ? (uint64_t)d.dims[i] : 1);
    if (n > kTensorOpMaxElements)
        return c.fail(Status::LimitExceeded, "the output's dims multiply past %llu", (unsigned long long)kTensorOpMaxElements);
    return Status::Ok;
}

inline Status prepare_grid_sample(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 16));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    TESSEL_TRY(nn_float(c, 1));
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& grid = c.inputs[1];
    int spatial = (int)x.rank - 2;
    if (c.opset < 20 && x.rank != 4) return c.fail(Status::InvalidArgument, "X must be 4-D before opset 20 (rank %u)", x.rank);
    if (spatial < 1) return c.fail(Status::InvalidArgument, "X must be N x C x spatial (rank %u)", x.rank);
    if (spatial > 3) return c.fail(Status::Unsupported, "%d spatial dims (1 to 3 supported)", spatial);
    if (grid.rank != x.rank || grid.dims[0] != x.dims[0] || grid.dims[grid.rank - 1] != spatial)
        return c.fail(Status::InvalidArgument, "grid must be N x spatial out x %d with N %lld", spatial, (long long)x.dims[0]);
    GridSampleState* st = new_state<GridSampleState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    bool v16 = c.opset < 20;   // GridSample-16 names the modes bilinear and bicubic
    StringView mode = c.attribute_string("mode", v16 ? "bilinear" : "linear");
    if (mode == StringView("nearest")) st->mode = GridMode::Nearest;
    else if (mode == StringView(v16 ? "bilinear" : "linear")) st->mode = GridMode::Linear;
    else if (mode == StringView(v16 ? "bicubic" : "cubic")) st->mode = GridMode::Cubic;
    else return c.fail(Status::InvalidArgument, "mode '%.*s' unknown at opset %u", (int)mode.size, mode.data, c.opset);
    StringView padding = c.attribute_string("padding_mode", "zeros");
    if (padding == StringView("zeros")) st->padding = GridPadding::Zeros;
    else if (padding == StringView("border")) st->padding = GridPadding::Border;
    else if (padding == StringView("reflection")) st->padding = GridPadding::Reflection;
    else return c.fail(Status::InvalidArgument, "padding_mode '%.*s' unknown", (int)padding.size, padding.data);
    int64_t align = c.attribute_int("align_corners", 0);
    if (align != 0 && align != 1) return c.fail(Status::InvalidArgument, "align_corners must be 0 or 1");
    st->align_corners = align != 0;
    st->spatial = spatial;
    st->batch = x.dims[0];
    st->channels = x.dims[1];
    st->points = (int64_t)dims_product(grid, 1, grid.rank - 1);
    st->in_plane = (int64_t)dims_product(x, 2, x.rank);
    for (int d = 0; d < spatial; ++d) st->in[d] = x.dims[2 + d];
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = x;
    for (int d = 0; d < spatial; ++d) y.dims[2 + d] = grid.dims[1 + d];
    TESSEL_TRY(check_spatial_output(c));
    if (st->in_plane == 0 && st->batch * st->channels * st->points > 0)
        return c.fail(Status::InvalidArgument, "X has an empty spatial dim but the output is not empty");
    return Status::Ok;
}

inline Status run_grid_sample(const RunContext& c) {
    const GridSampleState& st = *static_cast<const GridSampleState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const float* grid = c.inputs[1].as<float>();
    float* y = c.outputs[0].as<float>();
    int r = st.spatial;
    int taps = st.mode == GridMode::Nearest ? 1 : st.mode == GridMode::Linear ? 2 : 4;
    int64_t stride[3] = {1, 1, 1};
    for (int d = r - 2; d >= 0; --d) stride[d] = stride[d + 1] * st.in[d + 1];
    nn_parallel(c, (uint64_t)(st.batch * st.points), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t at = begin; at < end; ++at) {
            int64_t n = (int64_t)at / st.points, p = (int64_t)at % st.points;
            const float* g = grid + at * (uint64_t)r;
            int64_t index[3][4] = {};
            double weight[3][4] = {};
            for (int d = 0; d < r; ++d) {
                // denormalized in float32, as the reference
                float size = (float)st.in[d], gd = g[r - 1 - d];
                double v = st.align_corners ? (gd + 1) / 2.0f * (size - 1) : ((gd + 1) * size - 1) / 2.0f;
                double low = st.align_corners ? 0 : -0.5, high = st.align_corners ? size - 1 : size - 0.5;
                if (st.mode == GridMode::Nearest) v = round_half_even(v);
                if (v < low || v > high) {
                    if (st.padding == GridPadding::Border) v = v < 0 ? 0 : v > size - 1 ? size - 1 : v;
                    else if (st.padding == GridPadding::Reflection) v = grid_reflect(v, low, high);
                }
                // far outside (or NaN): every tap is outside, -8 stands for them all
                double base = std::floor(v);
                if (!(base >= -8 && base <= size + 8)) base = -8;
                if (st.mode == GridMode::Nearest) {
                    index[d][0] = grid_tap((int64_t)base, st.in[d], st.padding, low, high);   // v is whole here
                    weight[d][0] = 1;
                    continue;
                }
                double t = v - base;
                int64_t first = (int64_t)base - (taps == 4 ? 1 : 0);
                if (taps == 2) { weight[d][0] = 1 - t; weight[d][1] = t; }
                else cubic_weights(t, weight[d]);
                for (int k = 0; k < taps; ++k) index[d][k] = grid_tap(first + k, st.in[d], st.padding, low, high);
            }
            // every combination of the taps: at most 4^3
            int64_t offset[64];
            double w[64];
            int count = 0, tap[3] = {0, 0, 0};
            for (;;) {
                int64_t o = 0;
                double wt = 1;
                bool inside = true;
                for (int d = 0; d < r; ++d) {
                    int64_t i = index[d][tap[d]];
                    inside = inside && i >= 0;
                    o += i * stride[d];
                    wt *= weight[d][tap[d]];
                }
                if (inside) { offset[count] = o; w[count] = wt; ++count; }
                int d = r - 1;
                while (d >= 0 && ++tap[d] == taps) tap[d--] = 0;
                if (d < 0) break;
            }
            for (int64_t ch = 0; ch < st.channels; ++ch) {
                const float* plane = x + (n * st.channels + ch) * st.in_plane;
                double acc = 0;
                for (int k = 0; k < count; ++k) acc += w[k] * plane[offset[k]];
                y[(n * st.channels + ch) * st.points + p] = (float)acc;
            }
        }
    });
    return Status::Ok;
}

struct AffineGridState {
    int spatial = 0;                 // 2 or 3
    int64_t batch = 0, size[3] = {1, 1, 1};   // D (1 in 2-D), H, W
    bool align_corners = false;
};

inline Status prepare_affine_grid(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 20));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& theta = c.inputs[0];
    IntValues size;
    TESSEL_TRY(int_input(c, 1, &size));
    if (size.count != 4 && size.count != 5)
        return c.fail(Status::InvalidArgument, "size must hold 4 (N, C, H, W) or 5 (N, C, D, H, W) values, holds %llu",
                      (unsigned long long)size.count);
    int spatial = (int)size.count - 2;
    if (theta.rank != 3 || theta.dims[1] != spatial || theta.dims[2] != spatial + 1)
        return c.fail(Status::InvalidArgument, "theta must be N x %d x %d", spatial, spatial + 1);
    if (size[0] != theta.dims[0])
        return c.fail(Status::InvalidArgument, "size N %lld differs from theta's %lld", (long long)size[0], (long long)theta.dims[0]);
    int64_t align = c.attribute_int("align_corners", 0);
    if (align != 0 && align != 1) return c.fail(Status::InvalidArgument, "align_corners must be 0 or 1");
    AffineGridState* st = new_state<AffineGridState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->spatial = spatial;
    st->batch = theta.dims[0];
    st->align_corners = align != 0;
    TensorDesc& y = c.outputs[0];
    y = TensorDesc();
    y.type = ElementType::Float32;
    y.rank = (uint8_t)(spatial + 2);
    y.dims[0] = st->batch;
    for (int d = 0; d < spatial; ++d) {
        int64_t v = size[2 + d];
        if (v < 0) return c.fail(Status::InvalidArgument, "size %lld is negative", (long long)v);
        if ((uint64_t)v > kTensorOpMaxElements) return c.fail(Status::LimitExceeded, "size %lld is too large", (long long)v);
        st->size[3 - spatial + d] = v;
        y.dims[1 + d] = v;
    }
    y.dims[spatial + 1] = spatial;
    TESSEL_TRY(check_spatial_output(c));
    c.state = st;
    return Status::Ok;
}

inline Status run_affine_grid(const RunContext& c) {
    const AffineGridState& st = *static_cast<const AffineGridState*>(c.state);
    const float* theta = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    int r = st.spatial;
    auto base = [&](int64_t i, int64_t size) {   // the i-th of `size` points spanning [-1, 1]
        if (st.align_corners) return size > 1 ? -1.0 + 2.0 * (double)i / (double)(size - 1) : -1.0;
        return -1.0 + (2.0 * (double)i + 1.0) / (double)size;
    };
    for (int64_t n = 0; n < st.batch; ++n) {
        const float* t = theta + n * r * (r + 1);
        for (int64_t k = 0; k < st.size[0]; ++k)
            for (int64_t i = 0; i < st.size[1]; ++i)
                for (int64_t j = 0; j < st.size[2]; ++j) {
                    double point[4] = {base(j, st.size[2]), base(i, st.size[1]), base(k, st.size[0]), 1.0};   // x, y, z
                    if (r == 2) point[2] = 1.0;   // 2-D: x, y, 1
                    for (int row = 0; row < r; ++row) {
                        double v = 0;
                        for (int col = 0; col <= r; ++col) v += (double)t[row * (r + 1) + col] * point[col];
                        *y++ = (float)v;
                    }
                }
    }
    return Status::Ok;
}

}  // namespace detail

// >>col2im and deform conv
// Col2Im (opset 18): columns [N, C * prod(block), L] summed back into [N, C, image...], L
// being the count of block positions over the padded image (any spatial rank). DeformConv
// (opset 19): a Conv (1 to 3 spatial dims, groups) whose every tap reads X at its position
// plus a learned offset, bilinearly (zero outside X), times the optional mask.
namespace detail {

// Strides, dilations (only when `dilations`) and pads of `spatial` dims, bounded by kMaxWindow.
struct SpatialAttributes {
    int64_t stride[kMaxRank], dilation[kMaxRank], pad_begin[kMaxRank], pad_end[kMaxRank];
};

inline Status spatial_attributes(PrepareContext& c, int spatial, bool dilations, SpatialAttributes* a) {
    Span<const int64_t> strides = c.attribute_ints("strides"), pads = c.attribute_ints("pads"),
                        dilation = dilations ? c.attribute_ints("dilations") : Span<const int64_t>();
    if ((!strides.empty() && strides.size != (size_t)spatial) || (!dilation.empty() && dilation.size != (size_t)spatial) ||
        (!pads.empty() && pads.size != (size_t)(2 * spatial)))
        return c.fail(Status::InvalidArgument, "strides, dilations or pads do not match %d spatial dims", spatial);
    for (int d = 0; d < spatial; ++d) {
        a->stride[d] = strides.empty() ? 1 : strides[d];
        a->dilation[d] = dilation.empty() ? 1 : dilation[d];
        a->pad_begin[d] = pads.empty() ? 0 : pads[d];
        a->pad_end[d] = pads.empty() ? 0 : pads[spatial + d];
        if (a->stride[d] < 1 || a->dilation[d] < 1 || a->stride[d] > kMaxWindow || a->dilation[d] > kMaxWindow)
            return c.fail(Status::InvalidArgument, "strides and dilations must be in 1..2^24");
        if (a->pad_begin[d] < 0 || a->pad_end[d] < 0 || a->pad_begin[d] > kMaxWindow || a->pad_end[d] > kMaxWindow)
            return c.fail(Status::InvalidArgument, "pads must be in 0..2^24");
    }
    return Status::Ok;
}

struct Col2ImState {
    int spatial = 0;
    int64_t planes = 0, kernel = 0, columns = 0, image_size = 0;   // N * C; prod(block); L; prod(image)
    int64_t image[kMaxRank] = {}, block[kMaxRank] = {}, blocks[kMaxRank] = {};
    SpatialAttributes a;
};

inline Status prepare_col2im(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 18));
    TESSEL_TRY(check_tensor_inputs(c, 3, 3, 3));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    if (x.rank != 3) return c.fail(Status::InvalidArgument, "input must be N x (C * prod(block_shape)) x L (rank %u)", x.rank);
    IntValues image, block;
    TESSEL_TRY(int_input(c, 1, &image));
    TESSEL_TRY(int_input(c, 2, &block));
    int spatial = (int)image.count;
    if (spatial < 1 || spatial > kMaxRank - 2 || block.count != image.count)
        return c.fail(Status::InvalidArgument, "image_shape and block_shape must hold the same count of values, 1 to %d",
                      kMaxRank - 2);
    Col2ImState* st = new_state<Col2ImState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(spatial_attributes(c, spatial, true, &st->a));
    st->spatial = spatial;
    st->kernel = st->columns = st->image_size = 1;
    for (int d = 0; d < spatial; ++d) {
        st->image[d] = image[d];
        st->block[d] = block[d];
        if (st->image[d] < 1 || st->block[d] < 1 || st->image[d] > kMaxWindow || st->block[d] > kMaxWindow)
            return c.fail(Status::InvalidArgument, "image_shape and block_shape values must be in 1..2^24");
        int64_t extent = st->a.dilation[d] * (st->block[d] - 1) + 1;
        int64_t span = st->image[d] + st->a.pad_begin[d] + st->a.pad_end[d] - extent;
        if (span < 0) return c.fail(Status::InvalidArgument, "the block is larger than the padded image along dim %d", d);
        st->blocks[d] = span / st->a.stride[d] + 1;
        st->kernel = (int64_t)mul_saturated((uint64_t)st->kernel, (uint64_t)st->block[d]);
        st->columns = (int64_t)mul_saturated((uint64_t)st->columns, (uint64_t)st->blocks[d]);
    }
    if (x.dims[1] % st->kernel != 0)
        return c.fail(Status::InvalidArgument, "input dim 1 (%lld) is not a multiple of prod(block_shape) %lld",
                      (long long)x.dims[1], (long long)st->kernel);
    if (x.dims[2] != st->columns)
        return c.fail(Status::InvalidArgument, "input dim 2 (%lld) must be the count of blocks %lld", (long long)x.dims[2],
                      (long long)st->columns);
    TensorDesc& y = c.outputs[0];
    y = TensorDesc();
    y.type = ElementType::Float32;
    y.rank = (uint8_t)(spatial + 2);
    y.dims[0] = x.dims[0];
    y.dims[1] = x.dims[1] / st->kernel;
    for (int d = 0; d < spatial; ++d) y.dims[2 + d] = st->image[d];
    TESSEL_TRY(check_spatial_output(c));
    st->planes = y.dims[0] * y.dims[1];
    st->image_size = (int64_t)dims_product(y, 2, y.rank);
    c.state = st;
    return Status::Ok;
}

inline Status run_col2im(const RunContext& c) {
    const Col2ImState& st = *static_cast<const Col2ImState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    int r = st.spatial;
    nn_parallel(c, (uint64_t)st.planes, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t plane = begin; plane < end; ++plane) {
            float* image = y + (int64_t)plane * st.image_size;
            for (int64_t i = 0; i < st.image_size; ++i) image[i] = 0.0f;
            const float* columns = x + (int64_t)plane * st.kernel * st.columns;
            for (int64_t k = 0; k < st.kernel; ++k)
                for (int64_t l = 0; l < st.columns; ++l) {
                    int64_t at = 0, stride = 1, kr = k, lr = l;
                    bool inside = true;
                    for (int d = r - 1; d >= 0; --d) {   // innermost dim first
                        int64_t kd = kr % st.block[d], ld = lr % st.blocks[d];
                        kr /= st.block[d];
                        lr /= st.blocks[d];
                        int64_t i = ld * st.a.stride[d] - st.a.pad_begin[d] + kd * st.a.dilation[d];
                        inside = inside && i >= 0 && i < st.image[d];
                        at += i * stride;
                        stride *= st.image[d];
                    }
                    if (inside) image[at] += columns[k * st.columns + l];
                }
        }
    });
    return Status::Ok;
}

struct DeformConvState {
    Window w;
    int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1, offset_groups = 1;
};

inline Status prepare_deform_conv(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 19));
    TESSEL_TRY(check_tensor_inputs(c, 3, 5, 3));
    TESSEL_TRY(check_spatial_inputs(c));
    for (uint32_t i = 0; i < 5; ++i) TESSEL_TRY(nn_float(c, i, i >= 3));
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& weight = c.inputs[1];
    const TensorDesc& offset = c.inputs[2];
    if (x.rank < 3) return c.fail(Status::InvalidArgument, "X must be N x C x spatial (rank %u)", x.rank);
    int spatial = (int)x.rank - 2;
    if (weight.rank != x.rank) return c.fail(Status::InvalidArgument, "W must have X's rank %u", x.rank);
    Span<const int64_t> kernel_shape = c.attribute_ints("kernel_shape");
    for (size_t d = 0; d < kernel_shape.size; ++d)
        if (kernel_shape.size != (size_t)spatial || kernel_shape[d] != weight.dims[2 + d])
            return c.fail(Status::InvalidArgument, "kernel_shape must be W's spatial dims");
    int64_t groups = c.attribute_int("group", 1), offset_groups = c.attribute_int("offset_group", 1);
    int64_t channels = x.dims[1], maps = weight.dims[0];
    if (groups < 1 || offset_groups < 1 || groups > kMaxWindow || offset_groups > kMaxWindow)
        return c.fail(Status::InvalidArgument, "group and offset_group must be in 1..2^24");
    if (channels % groups != 0 || weight.dims[1] != channels / groups || maps % groups != 0)
        return c.fail(Status::InvalidArgument, "W must be M x C/group x kernel with M a multiple of group %lld", (long long)groups);
    if (channels % offset_groups != 0)
        return c.fail(Status::InvalidArgument, "C %lld is not a multiple of offset_group %lld", (long long)channels,
                      (long long)offset_groups);
    DeformConvState* st = new_state<DeformConvState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(parse_window(c, x, weight.dims + 2, false, false, &st->w));
    const Window& w = st->w;
    int64_t taps = w.kernel_size();
    auto matches_output = [&](const TensorDesc& d, int64_t dim1) {
        if (d.rank != x.rank || d.dims[0] != x.dims[0] || d.dims[1] != dim1) return false;
        for (int k = 0; k < spatial; ++k) if (d.dims[2 + k] != w.out[3 - spatial + k]) return false;
        return true;
    };
    if (!matches_output(offset, offset_groups * taps * spatial))
        return c.fail(Status::InvalidArgument, "offset must be N x %lld x output spatial dims",
                      (long long)(offset_groups * taps * spatial));
    if (c.has_input(3) && (c.inputs[3].rank != 1 || c.inputs[3].dims[0] != maps))
        return c.fail(Status::InvalidArgument, "B must hold %lld values", (long long)maps);
    if (c.has_input(4) && !matches_output(c.inputs[4], offset_groups * taps))
        return c.fail(Status::InvalidArgument, "mask must be N x %lld x output spatial dims", (long long)(offset_groups * taps));
    st->batch = x.dims[0];
    st->in_channels = channels;
    st->out_channels = maps;
    st->groups = groups;
    st->offset_groups = offset_groups;
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = x;
    y.dims[1] = maps;
    for (int k = 0; k < spatial; ++k) y.dims[2 + k] = w.out[3 - spatial + k];
    return check_spatial_output(c);
}

// X's plane at pos (3 dims, the leading ones of size 1), multilinear with zeros outside.
inline double sample_linear_zeros(const float* plane, const int64_t* in, const double* pos) {
    int64_t index[3][2];
    double weight[3][2];
    for (int d = 0; d < 3; ++d) {
        if (!(pos[d] > -1 && pos[d] < (double)in[d])) return 0;   // every corner outside (NaN too)
        double base = std::floor(pos[d]), t = pos[d] - base;
        index[d][0] = (int64_t)base;
        index[d][1] = (int64_t)base + 1;
        weight[d][0] = 1 - t;
        weight[d][1] = t;
    }
    double acc = 0;
    for (int a = 0; a < 2; ++a) {
        if (index[0][a] < 0 || index[0][a] >= in[0]) continue;
        for (int b = 0; b < 2; ++b) {
            if (index[1][b] < 0 || index[1][b] >= in[1]) continue;
            for (int e = 0; e < 2; ++e) {
                if (index[2][e] < 0 || index[2][e] >= in[2]) continue;
                acc += weight[0][a] * weight[1][b] * weight[2][e] * plane[(index[0][a] * in[1] + index[1][b]) * in[2] + index[2][e]];
            }
        }
    }
    return acc;
}

inline Status run_deform_conv(const RunContext& c) {
    const DeformConvState& st = *static_cast<const DeformConvState*>(c.state);
    const Window& w = st.w;
    const float* x = c.inputs[0].as<float>();
    const float* weight = c.inputs[1].as<float>();
    const float* offset = c.inputs[2].as<float>();
    const float* bias = c.num_inputs > 3 && c.inputs[3].data ? c.inputs[3].as<float>() : nullptr;
    const float* mask = c.num_inputs > 4 && c.inputs[4].data ? c.inputs[4].as<float>() : nullptr;
    float* y = c.outputs[0].as<float>();
    int spatial = w.spatial;
    int64_t points = w.out_size(), taps = w.kernel_size(), in_plane = w.in_size();
    int64_t group_in = st.in_channels / st.groups, group_out = st.out_channels / st.groups;
    int64_t offset_group_in = st.in_channels / st.offset_groups;
    nn_parallel(c, (uint64_t)(st.batch * points), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t at = begin; at < end; ++at) {
            int64_t n = (int64_t)at / points, p = (int64_t)at % points;
            int64_t out_at[3] = {p / w.out[2] / w.out[1], p / w.out[2] % w.out[1], p % w.out[2]};
            float* yp = y + n * st.out_channels * points + p;   // map m at yp[m * points]
            for (int64_t m = 0; m < st.out_channels; ++m) yp[m * points] = bias ? bias[m] : 0.0f;
            for (int64_t ci = 0; ci < st.in_channels; ++ci) {
                int64_t og = ci / offset_group_in, g = ci / group_in;
                const float* plane = x + (n * st.in_channels + ci) * in_plane;
                for (int64_t k = 0; k < taps; ++k) {
                    int64_t tap_at[3] = {k / w.kernel[2] / w.kernel[1], k / w.kernel[2] % w.kernel[1], k % w.kernel[2]};
                    double pos[3];
                    for (int d = 0; d < 3; ++d) {
                        pos[d] = (double)(out_at[d] * w.stride[d] - w.pad_begin[d] + tap_at[d] * w.dilation[d]);
                        int j = d - (3 - spatial);   // the offset's coordinate (real dims only)
                        if (j >= 0) pos[d] += offset[((n * st.offset_groups + og) * taps + k) * spatial * points + j * points + p];
                    }
                    double v = sample_linear_zeros(plane, w.in, pos);
                    if (mask) v *= mask[(n * st.offset_groups + og) * taps * points + k * points + p];
                    for (int64_t m = g * group_out; m < (g + 1) * group_out; ++m)
                        yp[m * points] += (float)(weight[(m * group_in + ci % group_in) * taps + k] * v);
                }
            }
        }
    });
    return Status::Ok;
}

}  // namespace detail

// >>roi align
// RoiAlign: per region of interest and channel an output_height x output_width grid of bins,
// each the average (or max) of sampling_ratio^2 bilinear samples (ceil(roi size / bins) when
// sampling_ratio is 0), as ONNX's reference (max: of the four weighted corners, as
// onnxruntime). RoiAlign-10 maps coordinates as output_half_pixel, RoiAlign-16 reads
// coordinate_transformation_mode (default half_pixel). A batch index out of range, or a
// region whose sampling grid is past 2^16 per side, is InvalidArgument.
namespace detail {

struct RoiAlignState {
    int64_t batch = 0, channels = 0, height = 0, width = 0, rois = 0, out_h = 1, out_w = 1, sampling_ratio = 0;
    double spatial_scale = 1;
    bool max = false, half_pixel = false;
};

constexpr double kRoiMaxGrid = 65536;

inline Status prepare_roi_align(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 10));
    TESSEL_TRY(check_tensor_inputs(c, 3, 3, 3));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    TESSEL_TRY(nn_float(c, 1));
    TESSEL_TRY(index_type(c, 2));
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& rois = c.inputs[1];
    const TensorDesc& batch_indices = c.inputs[2];
    if (x.rank != 4) return c.fail(Status::InvalidArgument, "X must be N x C x H x W (rank %u)", x.rank);
    if (rois.rank != 2 || rois.dims[1] != 4) return c.fail(Status::InvalidArgument, "rois must be num_rois x 4");
    if (batch_indices.rank != 1 || batch_indices.dims[0] != rois.dims[0])
        return c.fail(Status::InvalidArgument, "batch_indices must hold one index per roi (%lld)", (long long)rois.dims[0]);
    RoiAlignState* st = new_state<RoiAlignState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    StringView mode = c.attribute_string("mode", "avg");
    if (mode != StringView("avg") && mode != StringView("max"))
        return c.fail(Status::InvalidArgument, "mode '%.*s' unknown", (int)mode.size, mode.data);
    st->max = mode == StringView("max");
    StringView transform = c.opset >= 16 ? c.attribute_string("coordinate_transformation_mode", "half_pixel")
                                         : StringView("output_half_pixel");
    if (transform != StringView("half_pixel") && transform != StringView("output_half_pixel"))
        return c.fail(Status::InvalidArgument, "coordinate_transformation_mode '%.*s' unknown", (int)transform.size,
                      transform.data);
    st->half_pixel = transform == StringView("half_pixel");
    st->out_h = c.attribute_int("output_height", 1);
    st->out_w = c.attribute_int("output_width", 1);
    st->sampling_ratio = c.attribute_int("sampling_ratio", 0);
    st->spatial_scale = c.attribute_float("spatial_scale", 1.0f);
    if (st->out_h < 1 || st->out_w < 1 || st->out_h > kMaxWindow || st->out_w > kMaxWindow)
        return c.fail(Status::InvalidArgument, "output_height and output_width must be in 1..2^24");
    if (st->sampling_ratio < 0 || st->sampling_ratio > (int64_t)kRoiMaxGrid)
        return c.fail(Status::InvalidArgument, "sampling_ratio must be in 0..65536");
    st->batch = x.dims[0];
    st->channels = x.dims[1];
    st->height = x.dims[2];
    st->width = x.dims[3];
    st->rois = rois.dims[0];
    if (st->rois > 0 && st->channels > 0 && st->height * st->width == 0)
        return c.fail(Status::InvalidArgument, "X has an empty spatial dim");
    if (const void* known = tensor_value(c, 2))
        for (int64_t i = 0; i < st->rois; ++i) {
            int64_t b = load_index(known, batch_indices.type, (uint64_t)i);
            if (b < 0 || b >= st->batch)
                return c.fail(Status::InvalidArgument, "batch index %lld out of range for batch %lld", (long long)b,
                              (long long)st->batch);
        }
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = x;
    y.dims[0] = st->rois;
    y.dims[2] = st->out_h;
    y.dims[3] = st->out_w;
    return check_spatial_output(c);
}

// One roi's geometry: start, bin size and samples per bin, per axis (0: y, 1: x).
struct RoiGeometry {
    double start[2], bin[2];
    int64_t grid[2];
};

inline bool roi_geometry(const RoiAlignState& st, const float* roi, RoiGeometry* g) {
    double shift = st.half_pixel ? 0.5 : 0.0;
    int64_t bins[2] = {st.out_h, st.out_w};
    for (int a = 0; a < 2; ++a) {
        double start = roi[1 - a] * st.spatial_scale - shift, end = roi[3 - a] * st.spatial_scale - shift;
        double size = end - start;
        if (!st.half_pixel && !(size >= 1)) size = size != size ? size : 1.0;
        g->start[a] = start;
        g->bin[a] = size / (double)bins[a];
        double grid = st.sampling_ratio > 0 ? (double)st.sampling_ratio : std::ceil(size / (double)bins[a]);
        if (!(std::fabs(grid) <= kRoiMaxGrid)) return false;   // NaN too
        g->grid[a] = (int64_t)grid;
    }
    return true;
}

inline Status run_roi_align(const RunContext& c) {
    const RoiAlignState& st = *static_cast<const RoiAlignState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const float* rois = c.inputs[1].as<float>();
    const TensorView& indices = c.inputs[2];
    float* y = c.outputs[0].as<float>();
    for (int64_t r = 0; r < st.rois; ++r) {   // all first: no partial output
        int64_t b = load_index(indices.data, indices.desc.type, (uint64_t)r);
        if (b < 0 || b >= st.batch)
            return c.fail(Status::InvalidArgument, "batch index %lld out of range for batch %lld", (long long)b, (long long)st.batch);
        RoiGeometry g{};
        if (!roi_geometry(st, rois + r * 4, &g))
            return c.fail(Status::InvalidArgument, "roi %lld needs a sampling grid past 65536 per bin side", (long long)r);
    }
    int64_t bins = st.out_h * st.out_w, plane = st.height * st.width;
    nn_parallel(c, (uint64_t)(st.rois * st.channels), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t line = begin; line < end; ++line) {
            int64_t r = (int64_t)line / st.channels, ch = (int64_t)line % st.channels;
            RoiGeometry g{};
            (void)roi_geometry(st, rois + r * 4, &g);
            int64_t b = load_index(indices.data, indices.desc.type, (uint64_t)r);
            const float* xp = x + (b * st.channels + ch) * plane;
            float* yp = y + line * (uint64_t)bins;
            int64_t count = g.grid[0] * g.grid[1] > 1 ? g.grid[0] * g.grid[1] : 1;
            for (int64_t ph = 0; ph < st.out_h; ++ph)
                for (int64_t pw = 0; pw < st.out_w; ++pw) {
                    double acc = 0;
                    bool first = true;
                    for (int64_t iy = 0; iy < g.grid[0]; ++iy) {
                        double sy = g.start[0] + (double)ph * g.bin[0] + ((double)iy + 0.5) * g.bin[0] / (double)g.grid[0];
                        for (int64_t ix = 0; ix < g.grid[1]; ++ix) {
                            double sx = g.start[1] + (double)pw * g.bin[1] + ((double)ix + 0.5) * g.bin[1] / (double)g.grid[1];
                            double v[4] = {0, 0, 0, 0};   // the weighted corners
                            if (sy >= -1.0 && sy <= (double)st.height && sx >= -1.0 && sx <= (double)st.width) {
                                double yy = sy > 0 ? sy : 0, xx = sx > 0 ? sx : 0;
                                int64_t y0 = (int64_t)yy, x0 = (int64_t)xx, y1, x1;
                                if (y0 >= st.height - 1) { y0 = y1 = st.height - 1; yy = (double)y0; } else y1 = y0 + 1;
                                if (x0 >= st.width - 1) { x0 = x1 = st.width - 1; xx = (double)x0; } else x1 = x0 + 1;
                                double ly = yy - (double)y0, lx = xx - (double)x0;
                                v[0] = (1 - ly) * (1 - lx) * xp[y0 * st.width + x0];
                                v[1] = (1 - ly) * lx * xp[y0 * st.width + x1];
                                v[2] = ly * (1 - lx) * xp[y1 * st.width + x0];
                                v[3] = ly * lx * xp[y1 * st.width + x1];
                            }
                            if (st.max) {
                                double top = std::max(std::max(v[0], v[1]), std::max(v[2], v[3]));
                                acc = first || top > acc ? top : acc;
                                first = false;
                            } else {
                                acc += v[0] + v[1] + v[2] + v[3];
                            }
                        }
                    }
                    yp[ph * st.out_w + pw] = (float)(st.max ? acc : acc / (double)count);
                }
        }
    });
    return Status::Ok;
}

}  // namespace detail

// >>center crop pad, max unpool and upsample
// CenterCropPad (opset 18): each listed axis cropped or zero padded to its size around the
// centre (the odd element goes to the end), any element type. MaxUnpool (opset 9): X's values
// written at their flat indices into zeros of the shape MaxPool came from ((in - 1) * stride
// - pads + kernel), placed at the start of output_shape when given (ONNX's reference); an
// index out of range is InvalidArgument. Upsample (opsets 7 and 9, scales an attribute, then
// an input) is Resize-10 (asymmetric, nearest rounding down) on the Resize kernel.
namespace detail {

struct CenterCropPadState {
    int rank = 0;
    size_t element = 0;
    int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, shift[kMaxRank] = {};   // source = output index + shift
};

inline Status prepare_center_crop_pad(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 18));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    TESSEL_TRY(check_spatial_inputs(c));
    const TensorDesc& x = c.inputs[0];
    IntValues shape;
    TESSEL_TRY(int_input(c, 1, &shape));
    int axes[kMaxRank], count = x.rank;
    bool listed[kMaxRank] = {};
    Span<const int64_t> axes_attribute = c.attribute_ints("axes");
    if (!axes_attribute.empty()) {
        if (axes_attribute.size > (size_t)x.rank) return c.fail(Status::InvalidArgument, "%zu axes for rank %u", axes_attribute.size, x.rank);
        count = (int)axes_attribute.size;
        for (int i = 0; i < count; ++i) {
            if (!nn_axis(axes_attribute[i], x.rank, &axes[i]))
                return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %u", (long long)axes_attribute[i], x.rank);
            if (listed[axes[i]]) return c.fail(Status::InvalidArgument, "axis %d is repeated", axes[i]);
            listed[axes[i]] = true;
        }
    } else {
        for (int i = 0; i < count; ++i) axes[i] = i;
    }
    if (shape.count != (uint64_t)count)
        return c.fail(Status::InvalidArgument, "shape must hold %d values (one per axis), holds %llu", count,
                      (unsigned long long)shape.count);
    CenterCropPadState* st = new_state<CenterCropPadState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->rank = x.rank;
    st->element = element_size(x.type);
    for (int d = 0; d < x.rank; ++d) st->in[d] = st->out[d] = x.dims[d];
    for (int i = 0; i < count; ++i) {
        int d = axes[i];
        int64_t size = shape[i];
        if (size < 0) return c.fail(Status::InvalidArgument, "shape %lld is negative", (long long)size);
        if ((uint64_t)size > kTensorOpMaxElements) return c.fail(Status::LimitExceeded, "shape %lld is too large", (long long)size);
        st->out[d] = size;
        st->shift[d] = size <= x.dims[d] ? (x.dims[d] - size) / 2 : -((size - x.dims[d]) / 2);
    }
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = x;
    for (int d = 0; d < x.rank; ++d) y.dims[d] = st->out[d];
    return check_spatial_output(c);
}

inline Status run_center_crop_pad(const RunContext& c) {
    const CenterCropPadState& st = *static_cast<const CenterCropPadState*>(c.state);
    const unsigned char* x = static_cast<const unsigned char*>(c.inputs[0].data);
    unsigned char* y = static_cast<unsigned char*>(c.outputs[0].data);
    uint64_t total = c.outputs[0].elements();
    if (total == 0) return Status::Ok;
    int last = st.rank - 1;
    int64_t row = last >= 0 ? st.out[last] : 1, in_row = last >= 0 ? st.in[last] : 1;
    int64_t shift = last >= 0 ? st.shift[last] : 0;
    // the output row's columns that have a source: [lo, hi)
    int64_t lo = shift < 0 ? -shift : 0, hi = in_row - shift < row ? in_row - shift : row;
    if (hi < lo) hi = lo;
    int64_t index[kMaxRank] = {};
    for (uint64_t first = 0; first < total; first += (uint64_t)row) {
        unsigned char* out = y + first * st.element;
        int64_t source = 0;   // the source row's first element
        bool inside = true;
        for (int d = 0; d < last; ++d) {
            int64_t i = index[d] + st.shift[d];
            inside = inside && i >= 0 && i < st.in[d];
            source = source * st.in[d] + i;
        }
        if (!inside || hi == lo) {
            std::memset(out, 0, (size_t)row * st.element);
        } else {
            std::memset(out, 0, (size_t)lo * st.element);
            std::memcpy(out + (size_t)lo * st.element, x + (size_t)(source * in_row + lo + shift) * st.element,
                        (size_t)(hi - lo) * st.element);
            std::memset(out + (size_t)hi * st.element, 0, (size_t)(row - hi) * st.element);
        }
        for (int d = last - 1; d >= 0 && ++index[d] == st.out[d]; --d) index[d] = 0;
    }
    return Status::Ok;
}

struct MaxUnpoolState {
    int rank = 0;
    int64_t inferred[kMaxRank] = {}, out[kMaxRank] = {};
    int64_t inferred_total = 0;
};

inline Status prepare_max_unpool(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 9));
    TESSEL_TRY(check_tensor_inputs(c, 2, 3, 2));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    const TensorDesc& indices = c.inputs[1];
    if (indices.type != ElementType::Int64)
        return c.fail(Status::Unsupported, "input 1 is %s (int64 expected)", element_type_name(indices.type));
    if (x.rank < 3) return c.fail(Status::InvalidArgument, "X must be N x C x spatial (rank %u)", x.rank);
    bool same = indices.rank == x.rank;
    for (int d = 0; same && d < x.rank; ++d) same = indices.dims[d] == x.dims[d];
    if (!same) return c.fail(Status::InvalidArgument, "I must have X's shape");
    int spatial = (int)x.rank - 2;
    Span<const int64_t> kernel = c.attribute_ints("kernel_shape");
    if (kernel.size != (size_t)spatial) return c.fail(Status::InvalidArgument, "kernel_shape must have %d values", spatial);
    MaxUnpoolState* st = new_state<MaxUnpoolState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    SpatialAttributes a;
    TESSEL_TRY(spatial_attributes(c, spatial, false, &a));
    st->rank = x.rank;
    st->inferred[0] = st->out[0] = x.dims[0];
    st->inferred[1] = st->out[1] = x.dims[1];
    for (int d = 0; d < spatial; ++d) {
        if (kernel[d] < 1 || kernel[d] > kMaxWindow || x.dims[2 + d] > kMaxWindow)
            return c.fail(Status::InvalidArgument, "kernel_shape must be in 1..2^24 (and X's dims at most 2^24)");
        int64_t size = (x.dims[2 + d] - 1) * a.stride[d] - (a.pad_begin[d] + a.pad_end[d]) + kernel[d];
        if (size < 0) return c.fail(Status::InvalidArgument, "the unpooled dim %d would be %lld", d, (long long)size);
        st->inferred[2 + d] = st->out[2 + d] = size;
    }
    if (c.has_input(2)) {
        IntValues shape;
        TESSEL_TRY(int_input(c, 2, &shape));
        if (shape.count != (uint64_t)x.rank) return c.fail(Status::InvalidArgument, "output_shape must hold %u values", x.rank);
        for (int d = 0; d < x.rank; ++d) {
            bool fits = d < 2 ? shape[d] == st->inferred[d] : shape[d] >= st->inferred[d];
            if (!fits)
                return c.fail(Status::InvalidArgument, "output_shape dim %d (%lld) cannot hold the unpooled %lld", d,
                              (long long)shape[d], (long long)st->inferred[d]);
            if ((uint64_t)shape[d] > kTensorOpMaxElements)
                return c.fail(Status::LimitExceeded, "output_shape dim %d (%lld) is too large", d, (long long)shape[d]);
            st->out[d] = shape[d];
        }
    }
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = x;
    for (int d = 0; d < x.rank; ++d) y.dims[d] = st->out[d];
    TESSEL_TRY(check_spatial_output(c));
    TensorDesc inferred = y;
    for (int d = 0; d < x.rank; ++d) inferred.dims[d] = st->inferred[d];
    st->inferred_total = (int64_t)dims_product(inferred, 0, inferred.rank);
    return Status::Ok;
}

inline Status run_max_unpool(const RunContext& c) {
    const MaxUnpoolState& st = *static_cast<const MaxUnpoolState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    const int64_t* indices = c.inputs[1].as<int64_t>();
    float* y = c.outputs[0].as<float>();
    uint64_t n = c.inputs[0].elements();
    for (uint64_t e = 0; e < n; ++e)   // all first: no partial output
        if (indices[e] < 0 || indices[e] >= st.inferred_total)
            return c.fail(Status::InvalidArgument, "index %lld out of range for %lld elements", (long long)indices[e],
                          (long long)st.inferred_total);
    uint64_t total = c.outputs[0].elements();
    for (uint64_t e = 0; e < total; ++e) y[e] = 0.0f;
    for (uint64_t e = 0; e < n; ++e) {
        int64_t rest = indices[e], at = 0, stride = 1;
        for (int d = st.rank - 1; d >= 0; --d) {   // the inferred shape's index, placed in the output's
            at += rest % st.inferred[d] * stride;
            rest /= st.inferred[d];
            stride *= st.out[d];
        }
        y[at] = x[e];
    }
    return Status::Ok;
}

// Upsample-7 (scales attribute) and -9 (scales input) through Resize-10's prepare: the same
// inputs, the scales attribute handed over as a constant input.
inline Status prepare_upsample(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 7));
    bool attribute = c.opset < 9;
    TESSEL_TRY(check_tensor_inputs(c, attribute ? 1 : 2, attribute ? 1 : 2, attribute ? 1 : 2));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    TensorDesc inputs[2] = {c.inputs[0], TensorDesc()};
    const void* values[2] = {tensor_value(c, 0), nullptr};
    if (attribute) {
        Span<const float> scales = c.attribute_floats("scales");
        if (scales.size != c.inputs[0].rank)
            return c.fail(Status::InvalidArgument, "scales must hold %u values (one per dim)", c.inputs[0].rank);
        inputs[1].type = ElementType::Float32;
        inputs[1].rank = 1;
        inputs[1].dims[0] = (int64_t)scales.size;
        values[1] = scales.data;
    } else {
        inputs[1] = c.inputs[1];
        values[1] = tensor_value(c, 1);
    }
    PrepareContext resize = c;
    resize.opset = 10;
    resize.num_inputs = 2;
    resize.inputs = inputs;
    resize.values = values;
    Status s = prepare_resize(resize);
    std::memcpy(c.error, resize.error, sizeof c.error);
    c.state = resize.state;
    c.scratch_bytes = resize.scratch_bytes;
    return s;
}

}  // namespace detail

// >>lp pool and lrn
// LpPool: (sum over each window's taps inside X of |x|^p) ^ (1 / p), the padding counting 0
// (as ONNX's test generator); p is a float in LpPool-1, an int from 2; ceil_mode and
// dilations are read from opset 18. LRN: x / (bias + alpha / size * the sum of x^2 over the
// `size` channels around c) ^ beta, for N x C x any dims.
namespace detail {

struct LpPoolState {
    Window w;
    int64_t planes = 0;
    double p = 2;
};

inline Status prepare_lp_pool(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 3) return c.fail(Status::InvalidArgument, "X must be N x C x spatial (rank %u)", x.rank);
    Span<const int64_t> kernel = c.attribute_ints("kernel_shape");
    if (kernel.size != (size_t)x.rank - 2) return c.fail(Status::InvalidArgument, "kernel_shape must have %d values", x.rank - 2);
    LpPoolState* st = new_state<LpPoolState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->p = c.opset < 2 ? (double)c.attribute_float("p", 2.0f) : (double)c.attribute_int("p", 2);
    if (!(st->p > 0 && st->p <= 1e6)) return c.fail(Status::InvalidArgument, "p must be positive");
    int64_t ceil_mode = c.opset >= 18 ? c.attribute_int("ceil_mode", 0) : 0;
    if (ceil_mode != 0 && ceil_mode != 1) return c.fail(Status::InvalidArgument, "ceil_mode must be 0 or 1");
    if (c.opset < 18 && !c.attribute_ints("dilations").empty())
        return c.fail(Status::InvalidArgument, "dilations needs opset 18 (the model imports %u)", c.opset);
    TESSEL_TRY(parse_window(c, x, kernel.data, ceil_mode != 0, false, &st->w));
    st->planes = x.dims[0] * x.dims[1];
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = x;
    for (int d = 0; d < st->w.spatial; ++d) y.dims[2 + d] = st->w.out[3 - st->w.spatial + d];
    return check_output_desc(c, 0);
}

inline Status run_lp_pool(const RunContext& c) {
    const LpPoolState& st = *static_cast<const LpPoolState*>(c.state);
    const Window& w = st.w;
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    int64_t in_plane = w.in_size(), out_plane = w.out_size();
    nn_parallel(c, (uint64_t)st.planes, [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t plane = begin; plane < end; ++plane) {
            const float* xp = x + (int64_t)plane * in_plane;
            for (int64_t o = 0; o < out_plane; ++o) {
                int64_t out_at[3] = {o / w.out[2] / w.out[1], o / w.out[2] % w.out[1], o % w.out[2]};
                int64_t start[3];
                for (int d = 0; d < 3; ++d) start[d] = out_at[d] * w.stride[d] - w.pad_begin[d];
                double sum = 0;
                for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
                    int64_t i0 = start[0] + k0 * w.dilation[0];
                    if (i0 < 0 || i0 >= w.in[0]) continue;
                    for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
                        int64_t i1 = start[1] + k1 * w.dilation[1];
                        if (i1 < 0 || i1 >= w.in[1]) continue;
                        for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
                            int64_t i2 = start[2] + k2 * w.dilation[2];
                            if (i2 < 0 || i2 >= w.in[2]) continue;
                            double v = std::fabs((double)xp[(i0 * w.in[1] + i1) * w.in[2] + i2]);
                            sum += st.p == 1 ? v : st.p == 2 ? v * v : std::pow(v, st.p);
                        }
                    }
                }
                y[(int64_t)plane * out_plane + o] = (float)(st.p == 1 ? sum : st.p == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / st.p));
            }
        }
    });
    return Status::Ok;
}

struct LrnState {
    int64_t batch = 0, channels = 0, inner = 0, size = 1;
    double alpha = 0, beta = 0, bias = 0;
};

inline Status prepare_lrn(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    TESSEL_TRY(check_spatial_inputs(c));
    TESSEL_TRY(nn_float(c, 0));
    const TensorDesc& x = c.inputs[0];
    if (x.rank < 2) return c.fail(Status::InvalidArgument, "X must be N x C x ... (rank %u)", x.rank);
    const Attribute* size = c.attribute("size");
    if (!size || size->kind != AttributeKind::Int || size->i < 1 || size->i > kMaxWindow)
        return c.fail(Status::InvalidArgument, "attribute 'size' must be an int in 1..2^24");
    LrnState* st = new_state<LrnState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->batch = x.dims[0];
    st->channels = x.dims[1];
    st->inner = (int64_t)dims_product(x, 2, x.rank);
    st->size = size->i;
    float alpha, beta, bias;
    TESSEL_TRY(float_attribute(c, "alpha", 1e-4f, &alpha));
    TESSEL_TRY(float_attribute(c, "beta", 0.75f, &beta));
    TESSEL_TRY(float_attribute(c, "bias", 1.0f, &bias));
    st->alpha = alpha;
    st->beta = beta;
    st->bias = bias;
    c.state = st;
    c.outputs[0] = x;
    return Status::Ok;
}

inline Status run_lrn(const RunContext& c) {
    const LrnState& st = *static_cast<const LrnState*>(c.state);
    const float* x = c.inputs[0].as<float>();
    float* y = c.outputs[0].as<float>();
    int64_t before = (st.size - 1) / 2, after = st.size / 2;   // floor and ceil of (size - 1) / 2
    nn_parallel(c, (uint64_t)(st.batch * st.channels), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t line = begin; line < end; ++line) {
            int64_t n = (int64_t)line / st.channels, ch = (int64_t)line % st.channels;
            int64_t first = ch - before > 0 ? ch - before : 0, last = ch + after < st.channels - 1 ? ch + after : st.channels - 1;
            const float* xn = x + n * st.channels * st.inner;
            for (int64_t i = 0; i < st.inner; ++i) {
                double sum = 0;
                for (int64_t k = first; k <= last; ++k) sum += (double)xn[k * st.inner + i] * xn[k * st.inner + i];
                double v = xn[ch * st.inner + i];
                y[(int64_t)line * st.inner + i] = (float)(v / std::pow(st.bias + st.alpha / (double)st.size * sum, st.beta));
            }
        }
    });
    return Status::Ok;
}

}  // namespace detail

namespace detail {
// The kernels of the sections above (grid sample through lp pool and lrn).
const OpKernel kSpatialKernels[] = {
    {"GridSample", prepare_grid_sample, run_grid_sample},
    {"AffineGrid", prepare_affine_grid, run_affine_grid},
    {"Col2Im", prepare_col2im, run_col2im},
    {"DeformConv", prepare_deform_conv, run_deform_conv},
    {"RoiAlign", prepare_roi_align, run_roi_align},
    {"CenterCropPad", prepare_center_crop_pad, run_center_crop_pad},
    {"MaxUnpool", prepare_max_unpool, run_max_unpool},
    {"Upsample", prepare_upsample, run_resize},
    {"LpPool", prepare_lp_pool, run_lp_pool},
    {"LRN", prepare_lrn, run_lrn},
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail

// >>quantization ops
// QuantizeLinear and DequantizeLinear (per tensor; per axis from opset 13; blocked from 21),
// DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv. Quantized
// values are int8 or uint8 (DequantizeLinear also reads int32); float8, int4 and int2 are
// refused as types. Rounding is to nearest, ties to even, then saturation to the type's range.
// Integer products accumulate in int32 (wrapping, which ONNX allows); QLinear* requantize with
// a multiplier computed in the scales' type and applied in double, as ONNX's reference does,
// so results match it bit for bit. MatMul and Conv shapes come from plan_matmul / plan_conv.
namespace detail {

// The range of a quantized type. int16 and uint16 join with their ElementTypes (and a case in
// quant_type_switch); the kernels are templates over T.
template <class T> struct QuantRange;
template <> struct QuantRange<int8_t> { static constexpr double lo = -128, hi = 127; };
template <> struct QuantRange<uint8_t> { static constexpr double lo = 0, hi = 255; };
template <> struct QuantRange<int32_t> { static constexpr double lo = -2147483648.0, hi = 2147483647.0; };

// Calls f(T()) with the C++ type of quantized element type t; false for any other type.
// int32 only where the op reads it (DequantizeLinear's x).
template <class F>
bool quant_type_switch(ElementType t, bool int32, F&& f) {
    switch (t) {
        case ElementType::Int8: f(int8_t()); return true;
        case ElementType::UInt8: f(uint8_t()); return true;
        case ElementType::Int32: if (!int32) return false; f(int32_t()); return true;
        default: return false;
    }
}

inline bool quant_type(ElementType t, bool int32) {
    return quant_type_switch(t, int32, [](auto) {});
}

// round(v) + zero_point saturated to T (a NaN counts as 0). The zero point is added after the
// rounding: ties go to the even quotient, as ONNX's reference computes.
template <class T>
T quantize_value(double v, double zero_point) {
    double r = (v == v ? round_half_even(v) : 0.0) + zero_point;
    return (T)(r < QuantRange<T>::lo ? QuantRange<T>::lo : r > QuantRange<T>::hi ? QuantRange<T>::hi : r);
}

inline float load_real(ElementType t, const void* data, uint64_t i) {   // float32 or float16
    return t == ElementType::Float16 ? half_to_float(static_cast<const uint16_t*>(data)[i]) : static_cast<const float*>(data)[i];
}
inline float round_to_half(float v) { return half_to_float(float_to_half(v)); }

inline Status quant_real_input(PrepareContext& c, uint32_t i, const char* what) {
    ElementType t = c.inputs[i].type;
    if (t != ElementType::Float32 && t != ElementType::Float16)
        return c.fail(Status::Unsupported, "%s is %s (float32 or float16 expected)", what, element_type_name(t));
    return Status::Ok;
}

// How a scale (or zero point) maps onto x viewed as outer x count x inner around the axis:
// the parameter of element (o, d, i) is at o * outer_stride + d / block * axis_stride +
// i * inner_stride (all strides 0: one parameter for the whole tensor).
struct QuantLayout {
    int64_t outer = 1, count = 0, inner = 1, block = 1;
    int64_t outer_stride = 0, axis_stride = 0, inner_stride = 0;
};

inline bool single_element(const TensorDesc& d) {
    uint64_t n = 0;
    return desc_elements(d, &n) && n == 1;
}

// The granularity given by the scale's shape: one element, 1-D along axis (opset 13), or
// blocked (opset 21, block_size > 0: x's shape with ceil(D / block_size) on the axis).
inline Status quant_layout(PrepareContext& c, const TensorDesc& x, const TensorDesc& scale, QuantLayout* q) {
    uint64_t total = 0;
    (void)desc_elements(x, &total);
    int64_t block = c.opset >= 21 ? c.attribute_int("block_size", 0) : 0;
    if (block < 0) return c.fail(Status::InvalidArgument, "block_size %lld is negative", (long long)block);
    if (single_element(scale) && block == 0) {
        *q = QuantLayout{1, (int64_t)total, 1, 1, 0, 0, 0};
        return Status::Ok;
    }
    if (block == 0 && c.opset < 13)
        return c.fail(Status::InvalidArgument, "the scale must be a scalar before opset 13 (per-axis quantization)");
    int64_t raw = c.attribute_int("axis", 1), axis = 0;
    if (!normalize_axis(raw, x.rank, &axis))
        return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)raw, x.rank);
    q->outer = (int64_t)dims_product(x, 0, (int)axis);
    q->count = x.dims[axis];
    q->inner = (int64_t)dims_product(x, (int)axis + 1, x.rank);
    if (block == 0) {
        if (scale.rank != 1 || scale.dims[0] != x.dims[axis])
            return c.fail(Status::InvalidArgument, "a per-axis scale must be 1-D with %lld elements (x's axis %lld)",
                          (long long)x.dims[axis], (long long)axis);
        q->axis_stride = 1;
        return Status::Ok;
    }
    bool same = scale.rank == x.rank;
    for (int d = 0; same && d < x.rank; ++d)
        same = scale.dims[d] == (d == axis ? x.dims[d] / block + (x.dims[d] % block != 0) : x.dims[d]);   // ceil, no overflow
    if (!same)
        return c.fail(Status::InvalidArgument,
                      "a blocked scale must have x's shape with ceil(%lld / block_size %lld) on axis %lld",
                      (long long)x.dims[axis], (long long)block, (long long)axis);
    q->block = block;
    q->axis_stride = q->inner;
    q->outer_stride = scale.dims[axis] * q->inner;
    q->inner_stride = 1;
    return Status::Ok;
}

// The zero point has the scale's shape (one element for one element).
inline Status check_zero_point(PrepareContext& c, uint32_t scale, uint32_t zero_point) {
    const TensorDesc &s = c.inputs[scale], &z = c.inputs[zero_point];
    bool one = single_element(s) && single_element(z), same = one || s.rank == z.rank;
    for (int d = 0; same && !one && d < s.rank; ++d) same = s.dims[d] == z.dims[d];
    if (!same) return c.fail(Status::InvalidArgument, "input %u (zero point) must have the shape of input %u (scale)", zero_point, scale);
    return Status::Ok;
}

enum class QuantDivision : uint8_t { Float, Half, Double };

struct QuantizeState {
    QuantLayout layout;
    QuantDivision division = QuantDivision::Float;
};

inline Status prepare_quantize_linear(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 2, 3, 2));
    const TensorDesc &x = c.inputs[0], &scale = c.inputs[1];
    ElementType xt = x.type;
    if (xt != ElementType::Float32 && xt != ElementType::Float16 && xt != ElementType::Int32)
        return c.fail(Status::Unsupported, "x is %s (float32, float16 or int32 expected)", element_type_name(xt));
    TESSEL_TRY(quant_real_input(c, 1, "y_scale"));
    // The output type: y_zero_point's, else output_dtype (opset 21), else uint8.
    ElementType out = ElementType::UInt8;
    int64_t code = c.opset >= 21 ? c.attribute_int("output_dtype", 0) : 0;
    if (code != 0) {
        out = onnx_element_type(code);
        if (!quant_type(out, false))
            return c.fail(Status::Unsupported, "output_dtype %lld (int8 or uint8 supported; float8, int4, int2 are not)",
                          (long long)code);
    }
    if (c.has_input(2)) {
        ElementType zt = c.inputs[2].type;
        if (!quant_type(zt, false))
            return c.fail(Status::Unsupported, "y_zero_point is %s (int8 or uint8 supported)", element_type_name(zt));
        if (code != 0 && zt != out)
            return c.fail(Status::InvalidArgument, "output_dtype %lld differs from y_zero_point's type %s", (long long)code,
                          element_type_name(zt));
        out = zt;
        TESSEL_TRY(check_zero_point(c, 1, 2));
    }
    QuantizeState* st = new_state<QuantizeState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(quant_layout(c, x, scale, &st->layout));
    // The division's precision: the precision attribute (opset 23), else what NumPy gives
    // for x / y_scale in ONNX's reference (float16 / float16 in float16, int32 in double).
    int64_t precision = c.opset >= 23 ? c.attribute_int("precision", 0) : 0;
    if (precision == 10 || (precision == 0 && xt == ElementType::Float16 && scale.type == ElementType::Float16))
        st->division = QuantDivision::Half;
    else if (precision == 11 || (precision == 0 && xt == ElementType::Int32))
        st->division = QuantDivision::Double;
    else if (precision != 0 && precision != 1)
        return c.fail(Status::Unsupported, "precision %lld (float, float16 or double supported)", (long long)precision);
    c.state = st;
    c.outputs[0] = x;
    c.outputs[0].type = out;
    return Status::Ok;
}

template <class T>
void quantize_typed(const RunContext& c, const QuantizeState& st) {
    const QuantLayout& q = st.layout;
    const TensorView &x = c.inputs[0], &scale = c.inputs[1];
    const T* zero = c.num_inputs > 2 && c.inputs[2].data ? c.inputs[2].as<const T>() : nullptr;
    T* y = c.outputs[0].as<T>();
    uint64_t e = 0;
    for (int64_t o = 0; o < q.outer; ++o)
        for (int64_t d = 0; d < q.count; ++d)
            for (int64_t i = 0; i < q.inner; ++i, ++e) {
                uint64_t p = (uint64_t)(o * q.outer_stride + d / q.block * q.axis_stride + i * q.inner_stride);
                float s = load_real(scale.desc.type, scale.data, p);
                bool integer = x.desc.type == ElementType::Int32;
                double xd = integer ? (double)x.as<const int32_t>()[e] : (double)load_real(x.desc.type, x.data, e);
                double v = st.division == QuantDivision::Double ? xd / s
                           : st.division == QuantDivision::Half ? round_to_half(round_to_half((float)xd) / round_to_half(s))
                                                                : (float)xd / s;
                y[e] = quantize_value<T>(v, zero ? (double)zero[p] : 0.0);
            }
}

inline Status run_quantize_linear(const RunContext& c) {
    const QuantizeState& st = *static_cast<const QuantizeState*>(c.state);
    quant_type_switch(c.outputs[0].desc.type, false, [&](auto tag) { quantize_typed<decltype(tag)>(c, st); });
    return Status::Ok;
}

inline Status prepare_dequantize_linear(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 2, 3, 2));
    const TensorDesc &x = c.inputs[0], &scale = c.inputs[1];
    if (!quant_type(x.type, true))
        return c.fail(Status::Unsupported, "x is %s (int8, uint8 or int32 supported; float8, int4, int2 are not)",
                      element_type_name(x.type));
    TESSEL_TRY(quant_real_input(c, 1, "x_scale"));
    if (c.has_input(2)) {
        if (c.inputs[2].type != x.type)
            return c.fail(Status::InvalidArgument, "x_zero_point is %s, x is %s", element_type_name(c.inputs[2].type),
                          element_type_name(x.type));
        TESSEL_TRY(check_zero_point(c, 1, 2));
    }
    ElementType out = scale.type;
    int64_t code = c.opset >= 23 ? c.attribute_int("output_dtype", 0) : 0;
    if (code != 0) {
        out = onnx_element_type(code);
        if (out != ElementType::Float32 && out != ElementType::Float16)
            return c.fail(Status::Unsupported, "output_dtype %lld (float or float16 supported)", (long long)code);
    }
    QuantLayout* st = new_state<QuantLayout>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(quant_layout(c, x, scale, st));
    c.state = st;
    c.outputs[0] = x;
    c.outputs[0].type = out;
    return Status::Ok;
}

// (x - zero point) * scale: x - zero point in float32 (in double for int32 x, after x's
// rounding to float32), the product rounded to float32, then to float16 for a float16 output.
template <class T>
void dequantize_typed(const RunContext& c, const QuantLayout& q) {
    const T* x = c.inputs[0].as<const T>();
    const TensorView& scale = c.inputs[1];
    const T* zero = c.num_inputs > 2 && c.inputs[2].data ? c.inputs[2].as<const T>() : nullptr;
    bool half = c.outputs[0].desc.type == ElementType::Float16;
    uint64_t e = 0;
    for (int64_t o = 0; o < q.outer; ++o)
        for (int64_t d = 0; d < q.count; ++d)
            for (int64_t i = 0; i < q.inner; ++i, ++e) {
                uint64_t p = (uint64_t)(o * q.outer_stride + d / q.block * q.axis_stride + i * q.inner_stride);
                double dx = (double)(float)x[e] - (zero ? (double)zero[p] : 0.0);
                float v = (float)(dx * (double)load_real(scale.desc.type, scale.data, p));
                if (half) c.outputs[0].as<uint16_t>()[e] = float_to_half(v);
                else c.outputs[0].as<float>()[e] = v;
            }
}

inline Status run_dequantize_linear(const RunContext& c) {
    const QuantLayout& q = *static_cast<const QuantLayout*>(c.state);
    quant_type_switch(c.inputs[0].desc.type, true, [&](auto tag) { dequantize_typed<decltype(tag)>(c, q); });
    return Status::Ok;
}

// DynamicQuantizeLinear: uint8 with scale (max(0, max x) - min(0, min x)) / 255 and the zero
// point that maps min(0, min x) to 0, in float32 as ONNX's reference computes.
inline Status prepare_dynamic_quantize_linear(PrepareContext& c) {
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1, 3));
    if (c.inputs[0].type != ElementType::Float32)
        return c.fail(Status::Unsupported, "x is %s (float32 expected)", element_type_name(c.inputs[0].type));
    c.outputs[0] = c.inputs[0];
    c.outputs[0].type = ElementType::UInt8;
    c.outputs[1] = TensorDesc();
    c.outputs[1].type = ElementType::Float32;
    c.outputs[2] = TensorDesc();
    c.outputs[2].type = ElementType::UInt8;
    return Status::Ok;
}

inline Status run_dynamic_quantize_linear(const RunContext& c) {
    const float* x = c.inputs[0].as<const float>();
    uint64_t n = c.inputs[0].elements();
    float lo = 0, hi = 0;   // the range always holds 0
    for (uint64_t e = 0; e < n; ++e) {
        lo = x[e] < lo ? x[e] : lo;
        hi = x[e] > hi ? x[e] : hi;
    }
    float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    float initial = 0.0f - lo / scale;
    float zero = (float)round_half_even(initial < 0 ? 0 : initial > 255 ? 255 : initial);
    uint8_t* y = c.outputs[0].as<uint8_t>();
    for (uint64_t e = 0; e < n; ++e) y[e] = quantize_value<uint8_t>(x[e] / scale, zero);
    *c.outputs[1].as<float>() = scale;
    *c.outputs[2].as<uint8_t>() = (uint8_t)zero;
    return Status::Ok;
}

// ---- integer matmuls ----
// Zero points and scales are per tensor (one element), per row of A (and of the output), per
// column of B: 1-D with M (N) elements, or N-D broadcasting to [batch..., M, 1] ([..., 1, N]).
// Each is read through element strides over the full output [batch..., M, N].
struct QMatMulState {
    MatMulState mm;
    TensorDesc full;                          // [batch..., M, N] (vectors promoted)
    int64_t param_strides[8][kMaxRank];       // per input: its strides over `full` (params only)
    bool qlinear;
};

// Input i's strides over st->full; per_row: an A-side parameter (its last dim 1), else B-side.
inline Status qmatmul_param(PrepareContext& c, uint32_t i, bool per_row, QMatMulState* st) {
    const TensorDesc& full = st->full;
    int64_t* strides = st->param_strides[i];
    for (int d = 0; d < kMaxRank; ++d) strides[d] = 0;
    if (!c.has_input(i) || single_element(c.inputs[i])) return Status::Ok;
    TensorDesc p = c.inputs[i], target = full;
    target.dims[full.rank - (per_row ? 1 : 2)] = 1;
    if (p.rank == 1) {   // a vector: one value per row (M) or per column (N)
        p.rank = 2;
        if (per_row) p.dims[1] = 1;
        else { p.dims[1] = p.dims[0]; p.dims[0] = 1; }
    }
    if (!broadcasts_to(p, target))
        return c.fail(Status::InvalidArgument, "input %u must hold one value or one per %s (%lld)", i,
                      per_row ? "row" : "column", (long long)(per_row ? st->mm.m : st->mm.n));
    broadcast_strides(p, full, strides);
    return Status::Ok;
}

inline Status prepare_qmatmul(PrepareContext& c, bool qlinear) {
    // MatMulInteger: A, B, a_zero_point, b_zero_point. QLinearMatMul: a, a_scale,
    // a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
    uint32_t a = 0, b = qlinear ? 3 : 1, za = 2, zb = qlinear ? 5 : 3;
    TESSEL_TRY(qlinear ? check_tensor_inputs(c, 8, 8, 7) : check_tensor_inputs(c, 2, 4, 2));
    for (uint32_t i : {a, b})
        if (!quant_type(c.inputs[i].type, false))
            return c.fail(Status::Unsupported, "input %u is %s (int8 or uint8 supported)", i, element_type_name(c.inputs[i].type));
    for (uint32_t z : {za, zb})
        if (c.has_input(z) && c.inputs[z].type != c.inputs[z == za ? a : b].type)
            return c.fail(Status::InvalidArgument, "input %u (zero point) is %s, its operand is %s", z,
                          element_type_name(c.inputs[z].type), element_type_name(c.inputs[z == za ? a : b].type));
    ElementType out = ElementType::Int32;
    if (qlinear) {
        TESSEL_TRY(quant_real_input(c, 1, "a_scale"));
        TESSEL_TRY(quant_real_input(c, 4, "b_scale"));
        TESSEL_TRY(quant_real_input(c, 6, "y_scale"));
        if (c.inputs[1].type != c.inputs[4].type || c.inputs[1].type != c.inputs[6].type)
            return c.fail(Status::InvalidArgument, "the scales' types differ");
        out = c.has_input(7) ? c.inputs[7].type : c.inputs[0].type;
        if (!quant_type(out, false))
            return c.fail(Status::Unsupported, "y_zero_point is %s (int8 or uint8 supported)", element_type_name(out));
    }
    QMatMulState* st = new_state<QMatMulState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->qlinear = qlinear;
    TESSEL_TRY(plan_matmul(c, c.inputs[a], c.inputs[b], &st->mm, &c.outputs[0]));
    c.outputs[0].type = out;
    st->full.rank = (uint8_t)(st->mm.batch_rank + 2);
    for (int d = 0; d < st->mm.batch_rank; ++d) st->full.dims[d] = st->mm.batch_dims[d];
    st->full.dims[st->mm.batch_rank] = st->mm.m;
    st->full.dims[st->mm.batch_rank + 1] = st->mm.n;
    TESSEL_TRY(qmatmul_param(c, za, true, st));
    TESSEL_TRY(qmatmul_param(c, zb, false, st));
    if (qlinear) {
        TESSEL_TRY(qmatmul_param(c, 1, true, st));
        TESSEL_TRY(qmatmul_param(c, 4, false, st));
        TESSEL_TRY(qmatmul_param(c, 6, true, st));
        TESSEL_TRY(qmatmul_param(c, 7, true, st));
    }
    c.state = st;
    return Status::Ok;
}
inline Status prepare_matmul_integer(PrepareContext& c) { return prepare_qmatmul(c, false); }
inline Status prepare_qlinear_matmul(PrepareContext& c) { return prepare_qmatmul(c, true); }

// The requantization multiplier a_scale * b_scale / y_scale in the scales' type (float16:
// each step rounded to float16, as NumPy computes it).
inline float requant_multiplier(float a, float b, float y, bool half) {
    if (!half) return a * b / y;
    return round_to_half(round_to_half(a * b) / y);
}

inline int64_t load_quant(ElementType t, const void* data, uint64_t i) {   // int8 or uint8
    return t == ElementType::Int8 ? static_cast<const int8_t*>(data)[i] : static_cast<const uint8_t*>(data)[i];
}

template <class T>
void store_requantized(const RunContext& c, uint64_t e, uint32_t sum, float multiplier, double zero) {
    c.outputs[0].as<T>()[e] = quantize_value<T>((double)(int32_t)sum * multiplier, zero);
}

inline Status run_qmatmul(const RunContext& c) {
    const QMatMulState& st = *static_cast<const QMatMulState*>(c.state);
    const MatMulState& mm = st.mm;
    uint32_t ia = 0, ib = st.qlinear ? 3 : 1, za = 2, zb = st.qlinear ? 5 : 3;
    const TensorView &a = c.inputs[ia], &b = c.inputs[ib];
    auto present = [&](uint32_t i) { return i < c.num_inputs && c.inputs[i].data != nullptr; };
    int r = st.full.rank;
    nn_parallel(c, (uint64_t)(mm.batch * mm.m), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t index = (int64_t)unit / mm.m, row = (int64_t)unit % mm.m;
            int64_t a_offset = 0, b_offset = 0, param[8] = {};
            for (int d = mm.batch_rank - 1; d >= 0; --d) {   // batch index to operand and parameter offsets
                int64_t digit = index % mm.batch_dims[d];
                index /= mm.batch_dims[d];
                a_offset += digit * mm.a_stride[d];
                b_offset += digit * mm.b_stride[d];
                for (int i = 0; i < 8; ++i) param[i] += digit * st.param_strides[i][d];
            }
            for (int i = 0; i < 8; ++i) param[i] += row * st.param_strides[i][r - 2];
            int64_t zero_a = present(za) ? load_quant(c.inputs[za].desc.type, c.inputs[za].data, (uint64_t)param[za]) : 0;
            for (int64_t col = 0; col < mm.n; ++col) {
                auto at = [&](uint32_t i) { return (uint64_t)(param[i] + col * st.param_strides[i][r - 1]); };
                int64_t zero_b = present(zb) ? load_quant(c.inputs[zb].desc.type, c.inputs[zb].data, at(zb)) : 0;
                uint32_t sum = 0;   // int32 arithmetic that wraps instead of overflowing
                for (int64_t k = 0; k < mm.k; ++k) {
                    int64_t av = load_quant(a.desc.type, a.data, (uint64_t)(a_offset + row * mm.k + k)) - zero_a;
                    int64_t bv = load_quant(b.desc.type, b.data, (uint64_t)(b_offset + k * mm.n + col)) - zero_b;
                    sum += (uint32_t)(av * bv);
                }
                uint64_t e = (uint64_t)(unit * mm.n + col);
                if (!st.qlinear) {
                    c.outputs[0].as<int32_t>()[e] = (int32_t)sum;
                    continue;
                }
                ElementType scales = c.inputs[1].desc.type;
                float m = requant_multiplier(load_real(scales, c.inputs[1].data, at(1)), load_real(scales, c.inputs[4].data, at(4)),
                                             load_real(scales, c.inputs[6].data, at(6)), scales == ElementType::Float16);
                double zero_y = present(7) ? (double)load_quant(c.inputs[7].desc.type, c.inputs[7].data, at(7)) : 0.0;
                if (c.outputs[0].desc.type == ElementType::Int8) store_requantized<int8_t>(c, e, sum, m, zero_y);
                else store_requantized<uint8_t>(c, e, sum, m, zero_y);
            }
        }
    });
    return Status::Ok;
}

// ---- integer convs ----
// A direct loop per output element (a reference kernel): taps in the padding count 0 (x minus
// its zero point is padded). x's zero point and scale are per tensor; w's per tensor or per
// output map; QLinearConv's bias is int32, added to the accumulator.
struct QConvState {
    ConvState conv;
    bool qlinear;
};

inline Status prepare_qconv(PrepareContext& c, bool qlinear) {
    // ConvInteger: x, w, x_zero_point, w_zero_point. QLinearConv: x, x_scale, x_zero_point,
    // w, w_scale, w_zero_point, y_scale, y_zero_point, B.
    uint32_t ix = 0, iw = qlinear ? 3 : 1, zx = 2, zw = qlinear ? 5 : 3;
    TESSEL_TRY(qlinear ? check_tensor_inputs(c, 8, 9, 7) : check_tensor_inputs(c, 2, 4, 2));
    const TensorDesc &x = c.inputs[ix], &wd = c.inputs[iw];
    for (uint32_t i : {ix, iw})
        if (!quant_type(c.inputs[i].type, false))
            return c.fail(Status::Unsupported, "input %u is %s (int8 or uint8 supported)", i, element_type_name(c.inputs[i].type));
    if (x.rank < 3 || wd.rank != x.rank)
        return c.fail(Status::InvalidArgument, "x (rank %d) and w (rank %d) must be N x C x spatial", x.rank, wd.rank);
    int64_t maps = wd.dims[0];
    auto per_map = [&](uint32_t i) {   // one value, or one per output map
        return !c.has_input(i) || single_element(c.inputs[i]) || (c.inputs[i].rank == 1 && c.inputs[i].dims[0] == maps);
    };
    for (uint32_t z : {zx, zw}) {
        if (!c.has_input(z)) continue;
        if (c.inputs[z].type != c.inputs[z == zx ? ix : iw].type)
            return c.fail(Status::InvalidArgument, "input %u (zero point) is %s, its operand is %s", z,
                          element_type_name(c.inputs[z].type), element_type_name(c.inputs[z == zx ? ix : iw].type));
        if (z == zx ? !single_element(c.inputs[z]) : !per_map(z))
            return c.fail(Status::InvalidArgument, "input %u (zero point) must hold one value%s", z,
                          z == zx ? "" : " or one per output map");
    }
    ElementType out = ElementType::Int32;
    if (qlinear) {
        TESSEL_TRY(quant_real_input(c, 1, "x_scale"));
        TESSEL_TRY(quant_real_input(c, 4, "w_scale"));
        TESSEL_TRY(quant_real_input(c, 6, "y_scale"));
        if (c.inputs[1].type != c.inputs[4].type || c.inputs[1].type != c.inputs[6].type)
            return c.fail(Status::InvalidArgument, "the scales' types differ");
        if (!single_element(c.inputs[1]) || !single_element(c.inputs[6]) || !per_map(4))
            return c.fail(Status::InvalidArgument, "x_scale and y_scale must hold one value, w_scale one or one per output map");
        out = c.has_input(7) ? c.inputs[7].type : x.type;
        if (!quant_type(out, false))
            return c.fail(Status::Unsupported, "y_zero_point is %s (int8 or uint8 supported)", element_type_name(out));
        if (c.has_input(7) && !single_element(c.inputs[7]))
            return c.fail(Status::InvalidArgument, "y_zero_point must hold one value");
        if (c.has_input(8) && (c.inputs[8].type != ElementType::Int32 || c.inputs[8].rank != 1 || c.inputs[8].dims[0] != maps))
            return c.fail(Status::InvalidArgument, "B must be int32 with %lld elements", (long long)maps);
    }
    int64_t groups = c.attribute_int("group", 1);
    if (groups < 1) return c.fail(Status::InvalidArgument, "group must be positive, is %lld", (long long)groups);
    QConvState* st = new_state<QConvState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->qlinear = qlinear;
    TESSEL_TRY(plan_conv(c, x, wd, groups, &st->conv, &c.outputs[0]));
    c.outputs[0].type = out;
    c.state = st;
    return Status::Ok;
}
inline Status prepare_conv_integer(PrepareContext& c) { return prepare_qconv(c, false); }
inline Status prepare_qlinear_conv(PrepareContext& c) { return prepare_qconv(c, true); }

inline Status run_qconv(const RunContext& c) {
    const QConvState& qs = *static_cast<const QConvState*>(c.state);
    const ConvState& st = qs.conv;
    const Window& w = st.w;
    uint32_t ix = 0, iw = qs.qlinear ? 3 : 1, zx = 2, zw = qs.qlinear ? 5 : 3;
    const TensorView &x = c.inputs[ix], &wt = c.inputs[iw];
    auto present = [&](uint32_t i) { return i < c.num_inputs && c.inputs[i].data != nullptr; };
    auto per_map = [&](uint32_t i, int64_t m) { return c.inputs[i].elements() == 1 ? 0 : (uint64_t)m; };
    int64_t zero_x = present(zx) ? load_quant(c.inputs[zx].desc.type, c.inputs[zx].data, 0) : 0;
    int64_t in_plane = w.in_size(), positions = w.out_size(), kernel = w.kernel_size();
    nn_parallel(c, (uint64_t)(st.batch * st.maps), [&](uint64_t, uint64_t begin, uint64_t end) {
        for (uint64_t unit = begin; unit < end; ++unit) {
            int64_t m = (int64_t)unit % st.maps, n = (int64_t)unit / st.maps, g = m / st.group_maps;
            int64_t zero_w = present(zw) ? load_quant(c.inputs[zw].desc.type, c.inputs[zw].data, per_map(zw, m)) : 0;
            int64_t x_base = (n * st.channels + g * st.group_channels) * in_plane, w_base = m * st.depth;
            float mult = 0;
            double zero_y = 0;
            uint32_t bias = 0;
            if (qs.qlinear) {
                ElementType scales = c.inputs[1].desc.type;
                mult = requant_multiplier(load_real(scales, c.inputs[1].data, 0), load_real(scales, c.inputs[4].data, per_map(4, m)),
                                          load_real(scales, c.inputs[6].data, 0), scales == ElementType::Float16);
                zero_y = present(7) ? (double)load_quant(c.inputs[7].desc.type, c.inputs[7].data, 0) : 0.0;
                bias = present(8) ? (uint32_t)c.inputs[8].as<const int32_t>()[m] : 0;
            }
            for (int64_t p = 0; p < positions; ++p) {
                int64_t o2 = p % w.out[2], o1 = p / w.out[2] % w.out[1], o0 = p / w.out[2] / w.out[1];
                uint32_t sum = bias;   // int32 arithmetic that wraps instead of overflowing
                for (int64_t ci = 0; ci < st.group_channels; ++ci)
                    for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
                        int64_t i0 = o0 * w.stride[0] - w.pad_begin[0] + k0 * w.dilation[0];
                        if (i0 < 0 || i0 >= w.in[0]) continue;
                        for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
                            int64_t i1 = o1 * w.stride[1] - w.pad_begin[1] + k1 * w.dilation[1];
                            if (i1 < 0 || i1 >= w.in[1]) continue;
                            for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
                                int64_t i2 = o2 * w.stride[2] - w.pad_begin[2] + k2 * w.dilation[2];
                                if (i2 < 0 || i2 >= w.in[2]) continue;
                                int64_t xv = load_quant(x.desc.type, x.data,
                                                        (uint64_t)(x_base + ci * in_plane + (i0 * w.in[1] + i1) * w.in[2] + i2));
                                int64_t wv = load_quant(wt.desc.type, wt.data,
                                                        (uint64_t)(w_base + ci * kernel + (k0 * w.kernel[1] + k1) * w.kernel[2] + k2));
                                sum += (uint32_t)((xv - zero_x) * (wv - zero_w));
                            }
                        }
                    }
                uint64_t e = unit * (uint64_t)positions + (uint64_t)p;
                if (!qs.qlinear) c.outputs[0].as<int32_t>()[e] = (int32_t)sum;
                else if (c.outputs[0].desc.type == ElementType::Int8) store_requantized<int8_t>(c, e, sum, mult, zero_y);
                else store_requantized<uint8_t>(c, e, sum, mult, zero_y);
            }
        }
    });
    return Status::Ok;
}

}  // namespace detail

// >>compress
// Compress: the slices along axis, or the elements of the flattened input, where a constant
// condition is true (a runtime condition would give a data-dependent shape: Unsupported).
namespace detail {

struct CompressState {
    int64_t outer = 1, count = 0, inner = 1;   // the input around the axis (flattened: 1 x n x 1)
    int64_t kept = 0;
    const int64_t* selected = nullptr;         // the kept positions along the axis
};

inline Status prepare_compress(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 9));
    TESSEL_TRY(check_tensor_inputs(c, 2, 2, 2));
    const TensorDesc &x = c.inputs[0], &cond = c.inputs[1];
    if (cond.type != ElementType::Bool || cond.rank != 1)
        return c.fail(Status::InvalidArgument, "condition must be a 1-D bool tensor");
    const uint8_t* flags = static_cast<const uint8_t*>(tensor_value(c, 1));
    if (!flags && cond.dims[0] > 0)
        return c.fail(Status::Unsupported, "data-dependent shape: the condition is not a constant");
    CompressState* st = new_state<CompressState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    const Attribute* a = c.attribute("axis");
    int64_t axis = -1;
    if (a) {
        if (a->kind != AttributeKind::Int) return c.fail(Status::InvalidArgument, "attribute 'axis' must be an int");
        // negative axes count from the end from opset 11
        if (!normalize_axis(a->i, x.rank, &axis) || (a->i < 0 && c.opset < 11))
            return c.fail(Status::InvalidArgument, "axis %lld out of range for rank %d", (long long)a->i, x.rank);
        st->outer = (int64_t)dims_product(x, 0, (int)axis);
        st->count = x.dims[axis];
        st->inner = (int64_t)dims_product(x, (int)axis + 1, x.rank);
    } else {
        st->count = (int64_t)dims_product(x, 0, x.rank);
    }
    // A shorter condition keeps only its length; a longer one may not select past the end.
    int64_t n = cond.dims[0];
    for (int64_t i = 0; i < n; ++i) {
        if (flags[i] && i >= st->count)
            return c.fail(Status::InvalidArgument, "the condition selects position %lld of %lld", (long long)i,
                          (long long)st->count);
        st->kept += flags[i] != 0;
    }
    int64_t* selected = c.arena->allocate_array<int64_t>((size_t)(st->kept ? st->kept : 1));
    if (!selected) return c.fail(Status::OutOfMemory, "out of memory");
    for (int64_t i = 0, k = 0; i < n; ++i)
        if (flags[i]) selected[k++] = i;
    st->selected = selected;
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = x;
    if (axis < 0) {
        y.rank = 1;
        y.dims[0] = st->kept;
    } else {
        y.dims[axis] = st->kept;
    }
    return Status::Ok;
}

inline Status run_compress(const RunContext& c) {
    const CompressState& st = *static_cast<const CompressState*>(c.state);
    size_t slice = (size_t)st.inner * element_size(c.inputs[0].desc.type);
    const unsigned char* x = c.inputs[0].as<const unsigned char>();
    unsigned char* y = c.outputs[0].as<unsigned char>();
    for (int64_t o = 0; o < st.outer; ++o)
        for (int64_t k = 0; k < st.kept; ++k)
            std::memcpy(y + (size_t)(o * st.kept + k) * slice, x + (size_t)(o * st.count + st.selected[k]) * slice, slice);
    return Status::Ok;
}

}  // namespace detail

// >>more math ops
// Celu (float32; float16 through float32 from opset 28), CumProd (opset 26: CumSum's kernel,
// multiplying), Det (float32, LU with partial pivoting in double), Einsum (opset 12: any
// equation, one loop over every label; float32, int32, int64).
namespace detail {

inline Status prepare_celu(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 12));
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    ElementType t = c.inputs[0].type;
    if (t != ElementType::Float32 && t != ElementType::Float16)
        return c.fail(Status::Unsupported, "input 0 is %s (float32 or float16 expected)", element_type_name(t));
    if (t == ElementType::Float16 && c.opset < 28)
        return c.fail(Status::Unsupported, "float16 input needs opset 28 (the model imports %u)", c.opset);
    float* alpha = new_state<float>(c);
    if (!alpha) return c.fail(Status::OutOfMemory, "out of memory");
    TESSEL_TRY(float_attribute(c, "alpha", 1.0f, alpha));
    if (*alpha == 0) return c.fail(Status::InvalidArgument, "alpha must not be 0");   // x / alpha
    c.state = alpha;
    c.outputs[0] = c.inputs[0];
    c.in_place = true;
    return Status::Ok;
}

// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), a NaN kept.
inline Status run_celu(const RunContext& c) {
    float alpha = *static_cast<const float*>(c.state);
    bool half = c.inputs[0].desc.type == ElementType::Float16;
    uint64_t n = c.inputs[0].elements();
    for (uint64_t e = 0; e < n; ++e) {
        float x = load_real(c.inputs[0].desc.type, c.inputs[0].data, e);
        float negative = alpha * (std::exp(x / alpha) - 1.0f);
        float y = (x > 0 ? x : 0.0f) + (negative < 0 ? negative : 0.0f);
        if (x != x || negative != negative) y = NAN;
        if (half) c.outputs[0].as<uint16_t>()[e] = float_to_half(y);
        else c.outputs[0].as<float>()[e] = y;
    }
    return Status::Ok;
}

inline Status prepare_cumprod(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 26));
    return prepare_cumulative(c, true);
}

struct DetState {
    int64_t count = 0, size = 0;   // matrices, rows of each
};

constexpr int64_t kMaxDetSize = 2048;   // an M x M double scratch matrix: at most 32 MiB

inline Status prepare_det(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 11));
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    const TensorDesc& x = c.inputs[0];
    if (x.type != ElementType::Float32)
        return c.fail(Status::Unsupported, "input 0 is %s (float32 expected)", element_type_name(x.type));
    if (x.rank < 2 || x.dims[x.rank - 1] != x.dims[x.rank - 2])
        return c.fail(Status::InvalidArgument, "input 0 must be [*, M, M]");
    if (x.dims[x.rank - 1] > kMaxDetSize)
        return c.fail(Status::LimitExceeded, "matrices of %lld x %lld (at most %lld)", (long long)x.dims[x.rank - 1],
                      (long long)x.dims[x.rank - 1], (long long)kMaxDetSize);
    DetState* st = new_state<DetState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->count = (int64_t)dims_product(x, 0, x.rank - 2);
    st->size = x.dims[x.rank - 1];
    c.state = st;
    c.outputs[0] = x;
    c.outputs[0].rank = (uint8_t)(x.rank - 2);
    c.scratch_bytes = (size_t)(st->size * st->size) * sizeof(double);
    return Status::Ok;
}

inline Status run_det(const RunContext& c) {
    const DetState& st = *static_cast<const DetState*>(c.state);
    const float* x = c.inputs[0].as<const float>();
    float* y = c.outputs[0].as<float>();
    double* a = static_cast<double*>(c.scratch);
    int64_t n = st.size;
    for (int64_t m = 0; m < st.count; ++m) {
        for (int64_t i = 0; i < n * n; ++i) a[i] = x[m * n * n + i];
        double det = 1;
        for (int64_t col = 0; col < n; ++col) {
            int64_t pivot = col;
            for (int64_t r = col + 1; r < n; ++r)
                if (std::fabs(a[r * n + col]) > std::fabs(a[pivot * n + col])) pivot = r;
            if (a[pivot * n + col] == 0) { det = 0; break; }
            if (pivot != col) {
                for (int64_t k = 0; k < n; ++k) std::swap(a[col * n + k], a[pivot * n + k]);
                det = -det;
            }
            det *= a[col * n + col];
            for (int64_t r = col + 1; r < n; ++r) {
                double f = a[r * n + col] / a[col * n + col];
                for (int64_t k = col; k < n; ++k) a[r * n + k] -= f * a[col * n + k];
            }
        }
        y[m] = (float)det;
    }
    return Status::Ok;
}

// Einsum: the equation's letters (and the dims "..." stands for) are labels; the output is
// the explicit "->" list or, without one, "..." then the letters used once in ASCII order.
// Every other label is summed. A label repeated within one input takes its diagonal (the
// input's strides for it add up); "..." dims broadcast (size 1 against any size).
constexpr int kEinsumLetters = 52, kEinsumLabels = kEinsumLetters + kMaxRank;
constexpr uint64_t kEinsumMaxSteps = 1ull << 32;   // products a reference loop may take (seconds)
constexpr uint32_t kEinsumMaxInputs = 32;

struct EinsumState {
    int labels = 0, out_labels = 0;            // the output's labels are 0 .. out_labels - 1
    int64_t sizes[kEinsumLabels] = {};
    uint32_t inputs = 0;
    int64_t (*strides)[kEinsumLabels] = nullptr;   // per input, per label (0: not its label)
};

inline int einsum_letter(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -1;
}

inline Status prepare_einsum(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 12));
    TESSEL_TRY(check_tensor_inputs(c, 1, kEinsumMaxInputs, kEinsumMaxInputs));
    ElementType t = c.inputs[0].type;
    if (t != ElementType::Float32 && t != ElementType::Int32 && t != ElementType::Int64)
        return c.fail(Status::Unsupported, "input 0 is %s (float32, int32 or int64 expected)", element_type_name(t));
    for (uint32_t i = 1; i < c.num_inputs; ++i)
        if (c.inputs[i].type != t)
            return c.fail(Status::InvalidArgument, "input %u is %s, input 0 is %s", i, element_type_name(c.inputs[i].type),
                          element_type_name(t));
    StringView eq = c.attribute_string("equation", "");
    char text[256];   // the equation without spaces
    size_t len = 0;
    for (char ch : eq)
        if (ch != ' ') {
            if (len + 1 >= sizeof text) return c.fail(Status::InvalidArgument, "equation longer than 255 characters");
            text[len++] = ch;
        }
    text[len] = 0;
    const char* arrow = std::strstr(text, "->");
    size_t lhs_end = arrow ? (size_t)(arrow - text) : len;
    EinsumState* st = new_state<EinsumState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    st->inputs = c.num_inputs;
    st->strides = reinterpret_cast<int64_t(*)[kEinsumLabels]>(c.arena->allocate_array<int64_t>((size_t)c.num_inputs * kEinsumLabels));
    if (!st->strides) return c.fail(Status::OutOfMemory, "out of memory");
    // Pass 1: each term's letters and "..." against its input's dims.
    int64_t letter_size[kEinsumLetters];
    int letter_uses[kEinsumLetters] = {};
    for (int64_t& s : letter_size) s = -1;
    int ellipsis = 0;                   // dims of the broadcast "..."
    int64_t ellipsis_dims[kMaxRank];    // right-aligned; -1: no input has the dim
    for (int64_t& d : ellipsis_dims) d = -1;
    bool any_ellipsis = false;
    size_t pos = 0;
    for (uint32_t i = 0; i < c.num_inputs; ++i) {
        const TensorDesc& d = c.inputs[i];
        size_t end = pos;
        while (end < lhs_end && text[end] != ',') ++end;
        if (end == lhs_end && i + 1 < c.num_inputs)
            return c.fail(Status::InvalidArgument, "the equation has fewer terms than the %u inputs", c.num_inputs);
        int letters = 0, at = -1;
        for (size_t k = pos; k < end; ++k) {
            if (text[k] == '.') {
                if (at >= 0 || k + 2 >= end || text[k + 1] != '.' || text[k + 2] != '.')
                    return c.fail(Status::InvalidArgument, "term %u: a malformed or repeated '...'", i);
                at = letters;
                k += 2;
                continue;
            }
            if (einsum_letter(text[k]) < 0) return c.fail(Status::InvalidArgument, "term %u: '%c' is not a letter", i, text[k]);
            ++letters;
        }
        int extra = d.rank - letters;   // the dims "..." stands for
        if (extra < 0 || (at < 0 && extra != 0))
            return c.fail(Status::InvalidArgument, "term %u has %d letters for input %u of rank %d", i, letters, i, d.rank);
        if (at >= 0) any_ellipsis = true;
        for (int e = 0; e < extra; ++e) {   // right-aligned against the other inputs' "..."
            int64_t size = d.dims[at + e];
            int64_t& have = ellipsis_dims[kMaxRank - extra + e];
            if (have < 0 || have == 1) have = size;
            else if (size != 1 && size != have) return c.fail(Status::InvalidArgument, "input %u: '...' dims do not broadcast", i);
        }
        ellipsis = extra > ellipsis ? extra : ellipsis;
        int dim = 0;
        for (size_t k = pos; k < end; ++k) {
            if (text[k] == '.') { k += 2; dim += extra; continue; }
            int l = einsum_letter(text[k]);
            if (letter_size[l] >= 0 && letter_size[l] != d.dims[dim])
                return c.fail(Status::InvalidArgument, "label '%c' has sizes %lld and %lld", text[k], (long long)letter_size[l],
                              (long long)d.dims[dim]);
            letter_size[l] = d.dims[dim];
            ++letter_uses[l];
            ++dim;
        }
        pos = end + 1;
    }
    if (pos < lhs_end) return c.fail(Status::InvalidArgument, "the equation has more terms than the %u inputs", c.num_inputs);
    // Labels: the output's in order, then the summed ones.
    int label_of_letter[kEinsumLetters];
    for (int& l : label_of_letter) l = -1;
    int ellipsis_label = -1;   // the first of the "..." labels
    int labels = 0;
    TensorDesc& y = c.outputs[0];
    y = TensorDesc();
    y.type = t;
    auto add_ellipsis = [&](bool output) {
        ellipsis_label = labels;
        for (int e = 0; e < ellipsis; ++e) {
            int64_t size = ellipsis_dims[kMaxRank - ellipsis + e];
            st->sizes[labels++] = size < 0 ? 1 : size;
            if (output) y.dims[y.rank++] = size < 0 ? 1 : size;
        }
    };
    auto add_letter = [&](int l) {
        label_of_letter[l] = labels;
        st->sizes[labels++] = letter_size[l];
        y.dims[y.rank++] = letter_size[l];
    };
    if (arrow) {
        for (size_t k = lhs_end + 2; k < len; ++k) {
            if (text[k] == '.') {
                if (ellipsis_label >= 0 || k + 2 >= len || text[k + 1] != '.' || text[k + 2] != '.')
                    return c.fail(Status::InvalidArgument, "output: a malformed or repeated '...'");
                if (y.rank + ellipsis > kMaxRank) return c.fail(Status::InvalidArgument, "output rank above %d", kMaxRank);
                add_ellipsis(true);
                k += 2;
                continue;
            }
            int l = einsum_letter(text[k]);
            if (l < 0) return c.fail(Status::InvalidArgument, "output: '%c' is not a letter", text[k]);
            if (letter_size[l] < 0) return c.fail(Status::InvalidArgument, "output label '%c' is in no input", text[k]);
            if (label_of_letter[l] >= 0) return c.fail(Status::InvalidArgument, "output label '%c' is repeated", text[k]);
            if (y.rank >= kMaxRank) return c.fail(Status::InvalidArgument, "output rank above %d", kMaxRank);
            add_letter(l);
        }
    } else {
        if (any_ellipsis) add_ellipsis(true);
        for (int ch = 'A'; ch <= 'z'; ++ch) {   // ASCII order: upper case first
            int l = einsum_letter((char)ch);
            if (l < 0 || letter_uses[l] != 1) continue;
            if (y.rank >= kMaxRank) return c.fail(Status::InvalidArgument, "output rank above %d", kMaxRank);
            add_letter(l);
        }
    }
    st->out_labels = labels;
    if (ellipsis_label < 0) add_ellipsis(false);   // "..." dims left out of the output are summed
    for (int l = 0; l < kEinsumLetters; ++l)
        if (letter_size[l] >= 0 && label_of_letter[l] < 0) {
            label_of_letter[l] = labels;
            st->sizes[labels++] = letter_size[l];
        }
    st->labels = labels;
    // Pass 2: each input's strides per label.
    pos = 0;
    for (uint32_t i = 0; i < c.num_inputs; ++i) {
        const TensorDesc& d = c.inputs[i];
        int64_t strides[kMaxRank];
        dense_strides(d, strides);
        int64_t* s = st->strides[i];
        for (int l = 0; l < kEinsumLabels; ++l) s[l] = 0;
        size_t end = pos;
        while (end < lhs_end && text[end] != ',') ++end;
        int letters = 0;
        for (size_t k = pos; k < end; ++k) letters += text[k] != '.';
        int extra = d.rank - letters, dim = 0;
        for (size_t k = pos; k < end; ++k) {
            if (text[k] == '.') {
                for (int e = 0; e < extra; ++e, ++dim)   // a size-1 dim broadcasts: stride 0
                    if (d.dims[dim] != 1) s[ellipsis_label + ellipsis - extra + e] += strides[dim];
                k += 2;
                continue;
            }
            s[label_of_letter[einsum_letter(text[k])]] += strides[dim++];
        }
        pos = end + 1;
    }
    uint64_t steps = 1;
    for (int l = 0; l < labels; ++l) steps = mul_saturated(steps, (uint64_t)st->sizes[l]);
    if (steps > kEinsumMaxSteps)
        return c.fail(Status::LimitExceeded, "%llu products (at most %llu)", (unsigned long long)steps,
                      (unsigned long long)kEinsumMaxSteps);
    c.state = st;
    return check_output_desc(c, 0);
}

// One odometer over every label, the output's labels outermost: each output element is the
// sum of `inner` consecutive products.
template <class T, class Acc>
void einsum_typed(const RunContext& c, const EinsumState& st) {
    T* y = c.outputs[0].as<T>();
    uint64_t outputs = 1, inner = 1;
    for (int l = 0; l < st.out_labels; ++l) outputs *= (uint64_t)st.sizes[l];
    for (int l = st.out_labels; l < st.labels; ++l) inner *= (uint64_t)st.sizes[l];
    if (inner == 0) {   // an empty summed label: every sum is 0
        for (uint64_t e = 0; e < outputs; ++e) y[e] = 0;
        return;
    }
    int64_t index[kEinsumLabels] = {};
    int64_t offset[kEinsumMaxInputs] = {};
    Acc sum = 0;
    uint64_t e = 0, s = 0;
    for (uint64_t step = 0; step < outputs * inner; ++step) {
        Acc product = 1;
        for (uint32_t i = 0; i < st.inputs; ++i) product = (Acc)(product * (Acc)c.inputs[i].as<const T>()[offset[i]]);
        sum = (Acc)(sum + product);
        if (++s == inner) {
            y[e++] = (T)sum;
            sum = 0;
            s = 0;
        }
        for (int l = st.labels - 1; l >= 0; --l) {
            for (uint32_t i = 0; i < st.inputs; ++i) offset[i] += st.strides[i][l];
            if (++index[l] < st.sizes[l]) break;
            for (uint32_t i = 0; i < st.inputs; ++i) offset[i] -= st.strides[i][l] * st.sizes[l];
            index[l] = 0;
        }
    }
}

inline Status run_einsum(const RunContext& c) {
    const EinsumState& st = *static_cast<const EinsumState*>(c.state);
    switch (c.outputs[0].desc.type) {
        case ElementType::Int64: einsum_typed<int64_t, uint64_t>(c, st); break;
        case ElementType::Int32: einsum_typed<int32_t, uint32_t>(c, st); break;
        default: einsum_typed<float, double>(c, st); break;
    }
    return Status::Ok;
}

}  // namespace detail

// >>tfidf vectorizer
// TfIdfVectorizer (integer n-grams only; pool_strings is Unsupported): the pool's n-grams of
// lengths min_gram_length..max_gram_length are counted in each row of X ([C] or [B, C]), with
// gaps of up to max_skip_count items between their items (unigrams once), into output column
// ngram_indexes[n-gram]; mode TF keeps the counts, IDF gives weights (or 1) where a count is
// positive, TFIDF counts times weights. A repeated pool n-gram counts for its last occurrence.
namespace detail {

struct TfIdfGram {
    int64_t size, pool, column;   // length, first item in the pool, output column
};

struct TfIdfState {
    const TfIdfGram* grams = nullptr;
    int64_t count = 0, columns = 0, rows = 1, row_items = 0;
    int64_t min_length = 1, max_length = 1, max_skip = 0;
    const int64_t* pool = nullptr;
    const float* weights = nullptr;   // nullptr: none
    enum Mode : uint8_t { Tf, Idf, TfIdf } mode = Tf;
};

inline Status prepare_tfidf(PrepareContext& c) {
    TESSEL_TRY(require_opset(c, 9));
    TESSEL_TRY(check_tensor_inputs(c, 1, 1, 1));
    const TensorDesc& x = c.inputs[0];
    if (x.type != ElementType::Int32 && x.type != ElementType::Int64)
        return c.fail(Status::Unsupported, "X is %s (int32 or int64 supported; strings are not)", element_type_name(x.type));
    if (x.rank > 2) return c.fail(Status::InvalidArgument, "X must be [C] or [B, C] (rank %d)", x.rank);
    if (c.attribute("pool_strings")) return c.fail(Status::Unsupported, "pool_strings (string n-grams) is not supported");
    TfIdfState* st = new_state<TfIdfState>(c);
    if (!st) return c.fail(Status::OutOfMemory, "out of memory");
    StringView mode = c.attribute_string("mode", "");
    if (mode == StringView("TF")) st->mode = TfIdfState::Tf;
    else if (mode == StringView("IDF")) st->mode = TfIdfState::Idf;
    else if (mode == StringView("TFIDF")) st->mode = TfIdfState::TfIdf;
    else return c.fail(Status::InvalidArgument, "mode '%.*s' (TF, IDF or TFIDF expected)", (int)mode.size, mode.data);
    st->min_length = c.attribute_int("min_gram_length", 0);
    st->max_length = c.attribute_int("max_gram_length", 0);
    st->max_skip = c.attribute_int("max_skip_count", 0);
    if (st->min_length < 1 || st->max_length < st->min_length || st->max_skip < 0 || st->max_length > 1 << 16 ||
        st->max_skip > 1 << 16)
        return c.fail(Status::InvalidArgument, "min_gram_length %lld, max_gram_length %lld, max_skip_count %lld",
                      (long long)st->min_length, (long long)st->max_length, (long long)st->max_skip);
    Span<const int64_t> counts = c.attribute_ints("ngram_counts"), indexes = c.attribute_ints("ngram_indexes"),
                        pool = c.attribute_ints("pool_int64s");
    Span<const float> weights = c.attribute_floats("weights");
    if (indexes.empty()) return c.fail(Status::InvalidArgument, "ngram_indexes is missing");
    for (int64_t v : indexes) {
        if (v < 0 || v >= (int64_t)kTensorOpMaxElements) return c.fail(Status::InvalidArgument, "ngram_indexes holds %lld", (long long)v);
        st->columns = v + 1 > st->columns ? v + 1 : st->columns;
    }
    if (!weights.empty() && (int64_t)weights.size < st->columns)
        return c.fail(Status::InvalidArgument, "weights has %zu values for %lld columns", weights.size, (long long)st->columns);
    TfIdfGram* grams = c.arena->allocate_array<TfIdfGram>(pool.size ? pool.size : 1);
    if (!grams) return c.fail(Status::OutOfMemory, "out of memory");
    int64_t id = 0;   // n-grams of every length count, loaded or not
    for (size_t i = 0; i < counts.size; ++i) {
        int64_t begin = counts[i], end = i + 1 < counts.size ? counts[i + 1] : (int64_t)pool.size, size = (int64_t)i + 1;
        if (begin < 0 || end < begin || end > (int64_t)pool.size)
            return c.fail(Status::InvalidArgument, "ngram_counts[%zu] = %lld is out of order or past the pool", i, (long long)begin);
        if ((end - begin) % size != 0)
            return c.fail(Status::InvalidArgument, "the pool's %lld-grams hold %lld items", (long long)size, (long long)(end - begin));
        for (int64_t g = begin; g < end; g += size, ++id) {
            if (id >= (int64_t)indexes.size)
                return c.fail(Status::InvalidArgument, "ngram_indexes has %zu values for more n-grams", indexes.size);
            if (size >= st->min_length && size <= st->max_length) grams[st->count++] = TfIdfGram{size, g, indexes[id]};
        }
    }
    st->grams = grams;
    st->pool = pool.data;
    st->weights = weights.empty() ? nullptr : weights.data;
    st->rows = x.rank == 2 ? x.dims[0] : 1;
    st->row_items = x.rank == 0 ? 1 : x.dims[x.rank - 1];
    c.state = st;
    TensorDesc& y = c.outputs[0];
    y = TensorDesc();
    y.type = ElementType::Float32;
    if (x.rank == 2) y.dims[y.rank++] = x.dims[0];
    y.dims[y.rank++] = st->columns;
    return check_output_desc(c, 0);
}

inline Status run_tfidf(const RunContext& c) {
    const TfIdfState& st = *static_cast<const TfIdfState*>(c.state);
    const TensorView& x = c.inputs[0];
    float* y = c.outputs[0].as<float>();
    uint64_t total = c.outputs[0].elements();
    for (uint64_t e = 0; e < total; ++e) y[e] = 0;
    for (int64_t r = 0; r < st.rows; ++r) {
        float* counts = y + r * st.columns;
        auto item = [&](int64_t k) { return load_index(x.data, x.desc.type, (uint64_t)(r * st.row_items + k)); };
        int64_t first = st.min_length;   // the shortest length counted at this skip
        for (int64_t skip = 1; skip <= st.max_skip + 1; ++skip) {
            for (int64_t start = 0; start + skip * (first - 1) < st.row_items; ++start)
                for (int64_t n = first; n <= st.max_length && start + (n - 1) * skip < st.row_items; ++n)
                    for (int64_t g = st.count - 1; g >= 0; --g) {   // the last matching pool n-gram
                        const TfIdfGram& gram = st.grams[g];
                        if (gram.size != n) continue;
                        int64_t k = 0;
                        while (k < n && st.pool[gram.pool + k] == item(start + k * skip)) ++k;
                        if (k < n) continue;
                        counts[gram.column] += 1;
                        break;
                    }
            if (first == 1) {   // unigrams do not depend on the skip: counted once
                first = 2;
                if (first > st.max_length) break;
            }
        }
    }
    for (int64_t r = 0; r < st.rows; ++r)
        for (int64_t k = 0; k < st.columns; ++k) {
            float& v = y[r * st.columns + k];
            float w = st.weights ? st.weights[k] : 1.0f;
            if (st.mode == TfIdfState::Idf) v = v > 0 ? w : 0.0f;
            else if (st.mode == TfIdfState::TfIdf) v *= w;
        }
    return Status::Ok;
}

}  // namespace detail

namespace detail {
// The kernels of the sections from >>quantization ops to >>tfidf vectorizer.
const OpKernel kQuantKernels[] = {
    {"QuantizeLinear", prepare_quantize_linear, run_quantize_linear},
    {"DequantizeLinear", prepare_dequantize_linear, run_dequantize_linear},
    {"DynamicQuantizeLinear", prepare_dynamic_quantize_linear, run_dynamic_quantize_linear},
    {"MatMulInteger", prepare_matmul_integer, run_qmatmul},
    {"QLinearMatMul", prepare_qlinear_matmul, run_qmatmul},
    {"ConvInteger", prepare_conv_integer, run_qconv},
    {"QLinearConv", prepare_qlinear_conv, run_qconv},
    {"Compress", prepare_compress, run_compress},
    {"Celu", prepare_celu, run_celu},
    {"CumProd", prepare_cumprod, run_cumsum},
    {"Det", prepare_det, run_det},
    {"Einsum", prepare_einsum, run_einsum},
    {"TfIdfVectorizer", prepare_tfidf, run_tfidf},
    {nullptr, nullptr, nullptr},   // end marker
};
}  // namespace detail

// >>op versions
namespace detail {
// The ONNX versions (since_version, onnx/defs/operator_sets.h) of the op list's ops where a
// model's opset changes what the runtime must do: a model of opset N runs each op at its
// newest version <= N. Rows from opset 18 on cover every version of every listed op; below,
// only the versions a kernel reads differently (and the one after a refused version). Types:
// the version only adds element types (bfloat16, float8, int4, ...), which the kernels refuse
// as types. Kernel: the kernel implements the change (it reads c.opset). Refused: compile
// stops with Unsupported before the kernel runs. An op added to the list adds its rows here.
enum class OpVersionSupport : uint8_t { Types, Kernel, Refused };

struct OpVersion {
    const char* op;
    uint16_t version;
    OpVersionSupport support;
    const char* change;   // what the version changed
};

constexpr OpVersionSupport kTypes = OpVersionSupport::Types, kByKernel = OpVersionSupport::Kernel,
                           kRefused = OpVersionSupport::Refused;
constexpr const char* kBfloat16 = "bfloat16";
constexpr const char* kNarrowTypes19 = "float8 types";
constexpr const char* kNarrowTypes21 = "int4, uint4";
constexpr const char* kNarrowTypes23 = "float4e2m1";
constexpr const char* kNarrowTypes24 = "float8e8m0";
constexpr const char* kNarrowTypes25 = "int2, uint2";

const OpVersion kOpVersions[] = {
    // opsets 1-17: what the kernels read the old way, or refuse
    {"BatchNormalization", 9, kByKernel, "attribute 'spatial' removed"},
    {"BatchNormalization", 14, kByKernel, "training_mode; running_mean and running_var outputs"},
    {"Cast", 1, kRefused, "'to' as a type name string"},
    {"Cast", 6, kByKernel, "'to' as a TensorProto data type"},
    {"Concat", 1, kByKernel, "axis optional, default 1"},
    {"Concat", 4, kByKernel, "axis required"},
    {"Pad", 1, kByKernel, "pads in attribute 'paddings'"},
    {"Pad", 2, kByKernel, "pads in attribute 'pads'"},
    {"Pad", 11, kByKernel, "pads and constant_value as inputs"},
    {"Tile", 1, kRefused, "tiles and axis inputs"},
    {"Tile", 6, kByKernel, "repeats input"},
    // control flow: every version (bodies, >>control flow)
    {"If", 1, kByKernel, "new op"},
    {"If", 11, kByKernel, "branches may give different shapes"},
    {"If", 13, kTypes, "sequence outputs"},
    {"If", 16, kTypes, "optional outputs"},
    {"If", 19, kTypes, kNarrowTypes19},
    {"If", 21, kTypes, kNarrowTypes21},
    {"If", 23, kTypes, kNarrowTypes23},
    {"If", 24, kTypes, kNarrowTypes24},
    {"If", 25, kTypes, kNarrowTypes25},
    {"Loop", 1, kByKernel, "new op"},
    {"Loop", 11, kByKernel, "M and cond optional, scan outputs"},
    {"Loop", 13, kTypes, "sequence values"},
    {"Loop", 16, kTypes, "optional values"},
    {"Loop", 19, kTypes, kNarrowTypes19},
    {"Loop", 21, kTypes, kNarrowTypes21},
    {"Loop", 23, kTypes, kNarrowTypes23},
    {"Loop", 24, kTypes, kNarrowTypes24},
    {"Loop", 25, kTypes, kNarrowTypes25},
    {"Scan", 8, kByKernel, "new op: sequence_lens, a batch axis"},
    {"Scan", 9, kByKernel, "scan axes and directions, no batch axis"},
    {"Scan", 11, kByKernel, "negative axes"},
    {"Scan", 16, kTypes, kBfloat16},
    {"Scan", 19, kTypes, kNarrowTypes19},
    {"Scan", 21, kTypes, kNarrowTypes21},
    {"Scan", 23, kTypes, kNarrowTypes23},
    {"Scan", 24, kTypes, kNarrowTypes24},
    {"Scan", 25, kTypes, kNarrowTypes25},
    // opsets 1-17: every version of the recurrent and signal ops
    {"GRU", 1, kRefused, "output_sequence attribute"},
    {"GRU", 3, kRefused, "output_sequence attribute"},
    {"GRU", 7, kByKernel, "no output_sequence (the form the kernel runs)"},
    {"GRU", 14, kByKernel, "layout"},
    {"LSTM", 1, kRefused, "output_sequence attribute"},
    {"LSTM", 7, kByKernel, "no output_sequence (the form the kernel runs)"},
    {"LSTM", 14, kByKernel, "layout"},
    {"RNN", 1, kRefused, "output_sequence attribute"},
    {"RNN", 7, kByKernel, "no output_sequence (the form the kernel runs)"},
    {"RNN", 14, kByKernel, "layout"},
    {"BlackmanWindow", 17, kByKernel, "new op"},
    {"DFT", 17, kByKernel, "new op (axis attribute)"},
    {"HammingWindow", 17, kByKernel, "new op"},
    {"HannWindow", 17, kByKernel, "new op"},
    {"MelWeightMatrix", 17, kByKernel, "new op"},
    {"STFT", 17, kByKernel, "new op"},
    // opsets 9-17: the ops of >>quantization ops to >>tfidf vectorizer
    {"Compress", 9, kByKernel, "new op"},
    {"Compress", 11, kByKernel, "negative axis"},
    {"ConvInteger", 10, kByKernel, "new op"},
    {"DequantizeLinear", 10, kByKernel, "new op (per tensor)"},
    {"DequantizeLinear", 13, kByKernel, "per-axis scale and zero point, axis"},
    {"DynamicQuantizeLinear", 11, kByKernel, "new op"},
    {"Einsum", 12, kByKernel, "new op"},
    {"MatMulInteger", 10, kByKernel, "new op"},
    {"QLinearConv", 10, kByKernel, "new op"},
    {"QLinearMatMul", 10, kByKernel, "new op"},
    {"QuantizeLinear", 10, kByKernel, "new op (per tensor)"},
    {"QuantizeLinear", 13, kByKernel, "per-axis scale and zero point, axis"},
    {"TfIdfVectorizer", 9, kByKernel, "new op"},
    {"Det", 11, kByKernel, "new op"},
    {"Celu", 12, kByKernel, "new op"},
    // opset 18
    {"BitwiseAnd", 18, kByKernel, "new op"},
    {"BitwiseNot", 18, kByKernel, "new op"},
    {"BitwiseOr", 18, kByKernel, "new op"},
    {"BitwiseXor", 18, kByKernel, "new op"},
    {"GroupNormalization", 18, kByKernel, "new op"},
    {"Mish", 18, kByKernel, "new op"},
    {"Pad", 18, kByKernel, "axes input"},
    {"ReduceL1", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceL2", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceLogSum", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceLogSumExp", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceMax", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceMean", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceMin", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceProd", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"ReduceSumSquare", 18, kByKernel, "axes input, noop_with_empty_axes"},
    {"Resize", 18, kByKernel, "axes, keep_aspect_ratio_policy, antialias"},
    {"ScatterElements", 18, kByKernel, "reduction max, min"},
    {"ScatterND", 18, kByKernel, "reduction max, min"},
    {"Split", 18, kByKernel, "num_outputs, the last chunk smaller"},
    // opset 19
    {"AveragePool", 19, kByKernel, "dilations"},
    {"Cast", 19, kTypes, "float8 types, saturate (float8 only)"},
    {"CastLike", 19, kTypes, "float8 types, saturate (float8 only)"},
    {"Constant", 19, kTypes, kNarrowTypes19},
    {"DequantizeLinear", 19, kTypes, "float8 types, float16 scale"},
    {"Equal", 19, kTypes, "string"},
    {"Identity", 19, kTypes, kNarrowTypes19},
    {"Pad", 19, kByKernel, "mode 'wrap'"},
    {"QuantizeLinear", 19, kTypes, "float8 types, saturate (float8 only), float16 scale"},
    {"Reshape", 19, kTypes, kNarrowTypes19},
    {"Resize", 19, kByKernel, "coordinate_transformation_mode 'half_pixel_symmetric'"},
    {"Shape", 19, kTypes, kNarrowTypes19},
    {"Size", 19, kTypes, kNarrowTypes19},
    // opset 20
    {"ConstantOfShape", 20, kTypes, kNarrowTypes19},
    {"Gelu", 20, kByKernel, "new op (approximate 'none' or 'tanh')"},
    {"IsInf", 20, kTypes, kNarrowTypes19},
    {"IsNaN", 20, kTypes, kNarrowTypes19},
    {"ReduceMax", 20, kTypes, "bool"},
    {"ReduceMin", 20, kTypes, "bool"},
    {"DFT", 20, kByKernel, "axis as an input (default -2)"},
    // opset 21
    {"Cast", 21, kTypes, kNarrowTypes21},
    {"CastLike", 21, kTypes, kNarrowTypes21},
    {"Constant", 21, kTypes, kNarrowTypes21},
    {"ConstantOfShape", 21, kTypes, kNarrowTypes21},
    {"DequantizeLinear", 21, kByKernel, "blocked (block_size); int4, uint4, int16, uint16"},
    {"Flatten", 21, kTypes, kNarrowTypes21},
    {"GroupNormalization", 21, kByKernel, "scale and bias per channel, not per group"},
    {"Identity", 21, kTypes, kNarrowTypes21},
    {"Pad", 21, kTypes, kNarrowTypes21},
    {"QLinearMatMul", 21, kTypes, "float8 types, float16 and bfloat16 scales"},
    {"QuantizeLinear", 21, kByKernel, "blocked (block_size), output_dtype; int4, uint4, int16, uint16"},
    {"Reshape", 21, kTypes, kNarrowTypes21},
    {"Shape", 21, kTypes, kNarrowTypes21},
    {"Size", 21, kTypes, kNarrowTypes21},
    {"Squeeze", 21, kTypes, kNarrowTypes21},
    {"Transpose", 21, kTypes, kNarrowTypes21},
    {"Unsqueeze", 21, kTypes, kNarrowTypes21},
    // opset 22
    {"Acos", 22, kTypes, kBfloat16},
    {"Acosh", 22, kTypes, kBfloat16},
    {"Asin", 22, kTypes, kBfloat16},
    {"Asinh", 22, kTypes, kBfloat16},
    {"Atan", 22, kTypes, kBfloat16},
    {"Atanh", 22, kTypes, kBfloat16},
    {"AveragePool", 22, kByKernel, "bfloat16; windows starting in the right padding dropped (as parse_window does)"},
    {"Conv", 22, kTypes, kBfloat16},
    {"ConvTranspose", 22, kTypes, kBfloat16},
    {"Cos", 22, kTypes, kBfloat16},
    {"Cosh", 22, kTypes, kBfloat16},
    {"Det", 22, kTypes, kBfloat16},
    {"Dropout", 22, kTypes, kBfloat16},
    {"Elu", 22, kTypes, kBfloat16},
    {"GRU", 22, kTypes, kBfloat16},
    {"EyeLike", 22, kTypes, kBfloat16},
    {"GlobalAveragePool", 22, kTypes, kBfloat16},
    {"GlobalMaxPool", 22, kTypes, kBfloat16},
    {"HardSigmoid", 22, kTypes, kBfloat16},
    {"HardSwish", 22, kTypes, kBfloat16},
    {"InstanceNormalization", 22, kTypes, kBfloat16},
    {"LpNormalization", 22, kTypes, "bfloat16"},
    {"LSTM", 22, kTypes, kBfloat16},
    {"MaxPool", 22, kByKernel, "bfloat16; windows starting in the right padding dropped (as parse_window does)"},
    {"Mish", 22, kTypes, kBfloat16},
    {"NegativeLogLikelihoodLoss", 22, kTypes, "bfloat16"},
    {"RNN", 22, kTypes, kBfloat16},
    {"Round", 22, kTypes, kBfloat16},
    {"Selu", 22, kTypes, kBfloat16},
    {"Sin", 22, kTypes, kBfloat16},
    {"Sinh", 22, kTypes, kBfloat16},
    {"Softplus", 22, kTypes, kBfloat16},
    {"Softsign", 22, kTypes, kBfloat16},
    {"Tan", 22, kTypes, kBfloat16},
    {"ThresholdedRelu", 22, kTypes, kBfloat16},
    // opsets 23-25: the shape and data-movement ops gain float4, float8e8m0, int2
    {"Cast", 23, kTypes, kNarrowTypes23},
    {"Cast", 24, kTypes, "float8e8m0, round_mode (float8e8m0 only)"},
    {"Cast", 25, kTypes, kNarrowTypes25},
    {"CastLike", 23, kTypes, kNarrowTypes23},
    {"CastLike", 24, kTypes, "float8e8m0, round_mode (float8e8m0 only)"},
    {"CastLike", 25, kTypes, kNarrowTypes25},
    {"Constant", 23, kTypes, kNarrowTypes23},
    {"Constant", 24, kTypes, kNarrowTypes24},
    {"Constant", 25, kTypes, kNarrowTypes25},
    {"ConstantOfShape", 23, kTypes, kNarrowTypes23},
    {"ConstantOfShape", 24, kTypes, kNarrowTypes24},
    {"ConstantOfShape", 25, kTypes, kNarrowTypes25},
    {"DequantizeLinear", 23, kByKernel, "output_dtype; float4e2m1"},
    {"DequantizeLinear", 24, kTypes, "float8e8m0 scale"},
    {"DequantizeLinear", 25, kTypes, kNarrowTypes25},
    {"Flatten", 23, kTypes, kNarrowTypes23},
    {"Flatten", 24, kTypes, kNarrowTypes24},
    {"Flatten", 25, kTypes, kNarrowTypes25},
    {"Identity", 23, kTypes, kNarrowTypes23},
    {"Identity", 24, kTypes, kNarrowTypes24},
    {"Identity", 25, kTypes, kNarrowTypes25},
    {"Pad", 23, kTypes, kNarrowTypes23},
    {"Pad", 24, kTypes, kNarrowTypes24},
    {"Pad", 25, kTypes, kNarrowTypes25},
    {"QuantizeLinear", 23, kByKernel, "precision; float4e2m1"},
    {"QuantizeLinear", 24, kTypes, "float8e8m0 scale"},
    {"QuantizeLinear", 25, kTypes, kNarrowTypes25},
    {"RMSNormalization", 23, kByKernel, "new op"},
    {"Reshape", 23, kTypes, kNarrowTypes23},
    {"Reshape", 24, kTypes, kNarrowTypes24},
    {"Reshape", 25, kTypes, kNarrowTypes25},
    {"Shape", 23, kTypes, kNarrowTypes23},
    {"Shape", 24, kTypes, kNarrowTypes24},
    {"Shape", 25, kTypes, kNarrowTypes25},
    {"Size", 23, kTypes, kNarrowTypes23},
    {"Size", 24, kTypes, kNarrowTypes24},
    {"Size", 25, kTypes, kNarrowTypes25},
    {"Squeeze", 23, kTypes, kNarrowTypes23},
    {"Squeeze", 24, kTypes, kNarrowTypes24},
    {"Squeeze", 25, kTypes, kNarrowTypes25},
    {"Swish", 24, kByKernel, "new op"},
    {"TopK", 24, kTypes, "bfloat16"},
    {"Transpose", 23, kTypes, kNarrowTypes23},
    {"Transpose", 24, kTypes, kNarrowTypes24},
    {"Transpose", 25, kTypes, kNarrowTypes25},
    {"Unsqueeze", 23, kTypes, kNarrowTypes23},
    {"Unsqueeze", 24, kTypes, kNarrowTypes24},
    {"Unsqueeze", 25, kTypes, kNarrowTypes25},
    // opsets 26-28
    {"Celu", 28, kByKernel, "float16, bfloat16"},
    {"BitCast", 26, kByKernel, "new op"},
    {"CumProd", 26, kByKernel, "new op"},
    {"Range", 27, kTypes, "stash_type (float16 and bfloat16 only)"},
    // attention and its neighbours (>>attention ... >>linear attention and causal conv)
    {"Attention", 23, kByKernel, "new op"},
    {"Attention", 24, kByKernel, "nonpad_kv_seqlen input"},
    {"Attention", 25, kByKernel, "left_window_size, right_window_size; q/kv_num_heads only for 3-D inputs"},
    {"CausalConvWithState", 27, kByKernel, "new op"},
    {"LinearAttention", 27, kByKernel, "new op"},
    {"RotaryEmbedding", 23, kByKernel, "new op"},
    {"SwiGLU", 28, kByKernel, "new op"},
    {"TensorScatter", 24, kByKernel, "new op"},
    // the spatial ops (>>grid sample and affine grid to >>center crop pad, max unpool and upsample)
    {"AffineGrid", 20, kByKernel, "new op"},
    {"CenterCropPad", 18, kByKernel, "new op"},
    {"Col2Im", 18, kByKernel, "new op"},
    {"DeformConv", 19, kByKernel, "new op"},
    {"DeformConv", 22, kTypes, kBfloat16},
    {"GridSample", 16, kByKernel, "new op (4-D; modes bilinear, nearest, bicubic)"},
    {"GridSample", 20, kByKernel, "N-D; modes renamed linear, nearest, cubic"},
    {"GridSample", 22, kTypes, kBfloat16},
    {"MaxUnpool", 9, kByKernel, "new op"},
    {"MaxUnpool", 11, kByKernel, "strides default to 1 (documented)"},
    {"MaxUnpool", 22, kTypes, kBfloat16},
    {"RoiAlign", 10, kByKernel, "new op (output_half_pixel coordinates)"},
    {"RoiAlign", 16, kByKernel, "coordinate_transformation_mode, default half_pixel"},
    {"RoiAlign", 22, kTypes, kBfloat16},
    {"Upsample", 1, kRefused, "height_scale and width_scale attributes (experimental)"},
    {"Upsample", 7, kByKernel, "scales attribute"},
    {"Upsample", 9, kByKernel, "scales input"},
    {"LRN", 1, kByKernel, "new op"},
    {"LRN", 13, kTypes, kBfloat16},
    {"LpPool", 1, kByKernel, "new op (p a float)"},
    {"LpPool", 2, kByKernel, "p an int"},
    {"LpPool", 11, kByKernel, "auto_pad and strides documented (no change)"},
    {"LpPool", 18, kByKernel, "ceil_mode, dilations"},
    {"LpPool", 22, kTypes, kBfloat16},
    {"Upsample", 10, kRefused, "deprecated: Resize replaces it"},
};

// The row a model of `opset` runs `op` at: its newest listed version <= opset; nullptr when
// no row applies (the kernel reads c.opset as it always did).
inline const OpVersion* onnx_op_version(StringView op, uint32_t opset) {
    const OpVersion* best = nullptr;
    for (const OpVersion& v : kOpVersions)
        if (op == StringView(v.op) && v.version <= opset && (!best || v.version > best->version)) best = &v;
    return best;
}

// Unsupported, naming the op, the node and the version, when the node's version is refused.
inline Status check_op_version(const Node& node, uint32_t opset, char* error) {
    const OpVersion* v = onnx_op_version(node.op, opset);
    if (!v || v->support != OpVersionSupport::Refused) return Status::Ok;
    std::snprintf(error, kErrorMessageBytes, "%.*s '%.*s': %.*s-%u (opset %u) is not implemented: %s", (int)node.op.size,
                  node.op.data, (int)node.name.size, node.name.data, (int)node.op.size, node.op.data, (unsigned)v->version,
                  opset, v->change);
    return Status::Unsupported;
}
}  // namespace detail

// >>op kernel table
namespace detail {
// One table of every built-in kernel, assembled once (a later table overrides an earlier
// entry of the same op: the variadic and typed kernels replace the float-only ones).
struct KernelTable {
    static constexpr uint32_t kCapacity = 256;
    OpKernel entries[kCapacity];
    uint32_t count = 0;
    void add(const OpKernel* table, size_t n) {
        for (size_t i = 0; i < n && table[i].op; ++i) {
            uint32_t k = 0;
            while (k < count && StringView(entries[k].op) != StringView(table[i].op)) ++k;
            if (k == count) {
                TESSEL_ASSERT(count < kCapacity);
                ++count;
            }
            entries[k] = table[i];
        }
    }
    KernelTable() {
        add(kBuiltinKernels, sizeof kBuiltinKernels / sizeof kBuiltinKernels[0]);
        add(kNnKernels, sizeof kNnKernels / sizeof kNnKernels[0]);
        add(kTensorKernels, sizeof kTensorKernels / sizeof kTensorKernels[0]);
        add(kMathKernels, sizeof kMathKernels / sizeof kMathKernels[0]);
        add(kIndexKernels, sizeof kIndexKernels / sizeof kIndexKernels[0]);
        add(kControlFlowKernels, sizeof kControlFlowKernels / sizeof kControlFlowKernels[0]);
        add(kAttentionKernels, sizeof kAttentionKernels / sizeof kAttentionKernels[0]);
        add(kRecurrentKernels, sizeof kRecurrentKernels / sizeof kRecurrentKernels[0]);
        add(kSignalKernels, sizeof kSignalKernels / sizeof kSignalKernels[0]);
        add(kSpatialKernels, sizeof kSpatialKernels / sizeof kSpatialKernels[0]);
        add(kQuantKernels, sizeof kQuantKernels / sizeof kQuantKernels[0]);
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

// >>onnx reader
// ONNX models and TensorProto files, read straight from protobuf's wire format (no protobuf
// library). Every length and offset is checked against the end of its message before use, so
// any bytes give a Status and a message, never a read past the buffer. Messages are walked
// several times instead of being copied into intermediate structures: the only heap the
// reader uses besides the model's arena are two name tables and one scratch buffer
// (TESSEL_MALLOC, freed before it returns, also for a fixed-buffer model).
//
// What is read: ModelProto (opset_import, graph), GraphProto (node, initializer, input,
// output, value_info), NodeProto, AttributeProto (FLOAT, INT, STRING, TENSOR, FLOATS, INTS,
// GRAPH: a body, >>onnx graph; STRINGS as AttributeKind::Strings, a string with a zero byte
// Unsupported; the other lists are Unsupported), TensorProto (raw_data, packed or
// unpacked float_data/int32_data/int64_data, external data), ValueInfoProto with tensor types.
// Element types FLOAT, FLOAT16, BFLOAT16, DOUBLE, INT8-64, UINT8-64, BOOL; default-domain opsets 1..28
// (the runtime checks the legacy attributes of opsets below 7).
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

constexpr uint32_t kOnnxMinOpset = 1;   // ops unchanged since opset 1-6 read as they are; legacy attributes are checked by the runtime
constexpr uint32_t kOnnxMaxOpset = 28;   // the newest opset of the ONNX 1.23 node tests
// Sizes of the names messages give: a tensor or value, a node, a node's attribute, "node #N";
// and of a generated node name (<op_type>_<index>).
constexpr size_t kOnnxLabelBytes = 160, kOnnxNodeLabelBytes = 200, kOnnxAttributeLabelBytes = 240;
constexpr size_t kOnnxIndexLabelBytes = 64, kOnnxGeneratedNameBytes = 160;

// The error sink of one read. Offsets in messages count from `base`.
struct OnnxReader {
    const uint8_t* base = nullptr;
    Limits limits;
    char error[kErrorMessageBytes] = {};

    Status fail(Status status, const char* format, ...)
        TESSEL_PRINTF_FORMAT(3, 4)
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

// >>protobuf wire format
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

// One occurrence of a repeated double field (fixed64), packed or not.
inline Status proto_doubles(OnnxReader& r, const ProtoField& f, double* out, size_t* count, const char* what,
                            const char* field) {
    if (f.wire == kWireFixed64) {
        if (out) std::memcpy(out + *count, &f.value, 8);
        ++*count;
        return Status::Ok;
    }
    if (f.wire != kWireLength) return proto_expect(r, f, kWireFixed64, what, field);
    if (f.size % 8)
        return r.fail(Status::ParseError, "%s: packed field '%s' at byte %zu has %zu bytes (not a multiple of 8)", what,
                      field, r.offset(f.at), f.size);
    for (size_t i = 0; i < f.size; i += 8) {
        if (out) {
            uint64_t bits = proto_little_endian(f.data + i, 8);
            std::memcpy(out + *count, &bits, 8);
        }
        ++*count;
    }
    return Status::Ok;
}

// Counts the values of a packed or unpacked repeated field without decoding them.
inline Status proto_count(OnnxReader& r, const ProtoField& f, bool fixed32, size_t* count, const char* what,
                          const char* field) {
    return fixed32 ? proto_floats(r, f, nullptr, count, what, field) : proto_ints(r, f, nullptr, count, what, field);
}

// >>onnx tensors
inline int32_t onnx_type_code(ElementType type) {
    switch (type) {
    case ElementType::Float32: return 1;
    case ElementType::UInt8: return 2;
    case ElementType::Int8: return 3;
    case ElementType::Int32: return 6;
    case ElementType::Int64: return 7;
    case ElementType::Bool: return 9;
    case ElementType::Float16: return 10;
    case ElementType::UInt16: return 4;
    case ElementType::Int16: return 5;
    case ElementType::Float64: return 11;
    case ElementType::UInt32: return 12;
    case ElementType::UInt64: return 13;
    case ElementType::BFloat16: return 16;
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
    char label[kOnnxLabelBytes] = {};   // how messages name the tensor
};

// The TensorProto field holding a type's values when there is no raw_data (its number in
// *number), and how many values it had (in *count, from the counts given; int32_data otherwise).
inline const char* typed_data_field(ElementType type, size_t* count, size_t float_count = 0, size_t int64_count = 0,
                                    size_t double_count = 0, size_t uint64_count = 0, uint32_t* number = nullptr) {
    uint32_t unused = 0;
    if (!number) number = &unused;
    switch (type) {
    case ElementType::Float32: *count = float_count; *number = 4; return "float_data";
    case ElementType::Int64: *count = int64_count; *number = 7; return "int64_data";
    case ElementType::Float64: *count = double_count; *number = 10; return "double_data";
    case ElementType::UInt32: case ElementType::UInt64: *count = uint64_count; *number = 11; return "uint64_data";
    default: *number = 5; return "int32_data";
    }
}

inline Status parse_tensor(OnnxReader& r, const uint8_t* data, size_t size, const char* what, TensorInfo* t) {
    ProtoCursor c(data, size);
    ProtoField f;
    bool more = true;
    int64_t dims[kMaxRank] = {};
    size_t rank = 0;
    int64_t data_type = 0;
    size_t float_count = 0, int32_count = 0, int64_count = 0, double_count = 0, uint64_count = 0, other_count = 0;
    bool segment = false;
    int64_t data_location = 0;
    StringView location;
    StringView offset_text, length_text;
    bool has_location = false, has_offset = false, has_length = false;
    t->body = data;
    t->body_size = size;
    while (true) {
        TESSEL_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        switch (f.number) {
        case 1: {  // dims
            size_t before = rank;
            size_t n = 0;
            TESSEL_TRY(proto_ints(r, f, nullptr, &n, what, "dims"));
            if (rank + n <= (size_t)kMaxRank) {
                size_t k = 0;
                TESSEL_TRY(proto_ints(r, f, dims + before, &k, what, "dims"));
            }
            rank += n;
            break;
        }
        case 2: TESSEL_TRY(proto_expect(r, f, kWireVarint, what, "data_type")); data_type = (int64_t)f.value; break;
        case 3: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "segment")); segment = true; break;
        case 4: TESSEL_TRY(proto_count(r, f, true, &float_count, what, "float_data")); break;
        case 5: TESSEL_TRY(proto_count(r, f, false, &int32_count, what, "int32_data")); break;
        case 6: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "string_data")); ++other_count; break;
        case 7: TESSEL_TRY(proto_count(r, f, false, &int64_count, what, "int64_data")); break;
        case 8: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "name")); t->name = f.string(); break;
        case 9:
            TESSEL_TRY(proto_expect(r, f, kWireLength, what, "raw_data"));
            t->raw = f.data;
            t->raw_size = f.size;
            t->has_raw = true;
            break;
        case 10: TESSEL_TRY(proto_doubles(r, f, nullptr, &double_count, what, "double_data")); break;
        case 11: TESSEL_TRY(proto_count(r, f, false, &uint64_count, what, "uint64_data")); break;
        case 13: {  // external_data: StringStringEntryProto {key = 1, value = 2}
            TESSEL_TRY(proto_expect(r, f, kWireLength, what, "external_data"));
            ProtoCursor entry(f.data, f.size);
            ProtoField e;
            bool more_entry = true;
            StringView key, value;
            while (true) {
                TESSEL_TRY(proto_next(r, entry, &e, &more_entry, what));
                if (!more_entry) break;
                if (e.number == 1 || e.number == 2) {
                    TESSEL_TRY(proto_expect(r, e, kWireLength, what, e.number == 1 ? "external_data.key" : "external_data.value"));
                    (e.number == 1 ? key : value) = e.string();
                }
            }
            if (key == StringView("location")) { location = value; has_location = true; }
            else if (key == StringView("offset")) { offset_text = value; has_offset = true; }
            else if (key == StringView("length")) { length_text = value; has_length = true; }
            break;
        }
        case 14:
            TESSEL_TRY(proto_expect(r, f, kWireVarint, what, "data_location"));
            data_location = (int64_t)f.value;
            break;
        default: break;  // doc_string and fields of later versions
        }
    }
    if (t->name.empty()) std::snprintf(t->label, sizeof t->label, "%s", what);
    else std::snprintf(t->label, sizeof t->label, "%s '%.*s'", what, (int)(t->name.size > 100 ? 100 : t->name.size), t->name.data);
    const char* label = t->label;
    ElementType type = ElementType::Undefined;
    TESSEL_TRY(onnx_type(r, data_type, label, &type));
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
    size_t count = int32_count;
    const char* field = typed_data_field(type, &count, float_count, int64_count, double_count, uint64_count);
    if ((uint64_t)count != elements)
        return r.fail(Status::ParseError, "%s: %s has %zu values, expected %llu", label, field, count,
                      (unsigned long long)elements);
    return Status::Ok;
}

#if !defined(_WIN32)
// >>onnx external data
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
    uint32_t want = 0;
    size_t unused = 0;
    const char* field = typed_data_field(type, &unused, 0, 0, 0, 0, &want);
    ProtoCursor c(t.body, t.body_size);
    ProtoField f;
    bool more = true;
    size_t count = 0;
    while (true) {
        TESSEL_TRY(proto_next(r, c, &f, &more, t.label));
        if (!more) break;
        if (f.number != want) continue;
        if (type == ElementType::Float32) {
            TESSEL_TRY(proto_floats(r, f, static_cast<float*>(out), &count, t.label, "float_data"));
        } else if (type == ElementType::Int64 || type == ElementType::UInt64) {
            TESSEL_TRY(proto_ints(r, f, static_cast<int64_t*>(out), &count, t.label, field));
        } else if (type == ElementType::Float64) {
            TESSEL_TRY(proto_doubles(r, f, static_cast<double*>(out), &count, t.label, field));
        } else {
            // int32_data holds every narrower type, one value per entry (FLOAT16, BFLOAT16: their
            // bits); uint64_data holds UINT32.
            int64_t values[64];
            size_t n = 0;
            TESSEL_TRY(proto_count(r, f, false, &n, t.label, field));
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
                        if (!proto_varint(&p, end, &v)) return r.fail(Status::ParseError, "%s: bad %s", t.label, field);
                        values[k++] = (int64_t)v;
                    }
                }
                for (size_t i = 0; i < k; ++i, ++count) {
                    int32_t v = (int32_t)values[i];
                    switch (type) {
                    case ElementType::Int32: static_cast<int32_t*>(out)[count] = v; break;
                    case ElementType::UInt32: static_cast<uint32_t*>(out)[count] = (uint32_t)values[i]; break;
                    case ElementType::Float16: case ElementType::BFloat16: case ElementType::Int16: case ElementType::UInt16:
                        static_cast<uint16_t*>(out)[count] = (uint16_t)v;
                        break;
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

// >>onnx names and nodes
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
        TESSEL_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        switch (f.number) {
        case 1:
            TESSEL_TRY(proto_expect(r, f, kWireLength, what, "input"));
            ++inputs;
            if (f.size) {
                if (info->inputs + 1 < inputs) info->absent_inputs = true;
                info->inputs = inputs;
            }
            break;
        case 2: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "output")); ++info->outputs; break;
        case 3: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "name")); info->name = f.string(); break;
        case 4: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "op_type")); info->op = f.string(); break;
        case 5: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "attribute")); break;
        case 7: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "domain")); info->domain = f.string(); break;
        default: break;
        }
    }
    return Status::Ok;
}

inline int clip_length(StringView s) { return (int)(s.size > 100 ? 100 : s.size); }

// ValueInfoProto -> name and desc. For graph inputs (strict) a type that is not a supported
// tensor is Unsupported; for outputs and value_info only the bytes are checked.
inline Status parse_value_info(OnnxReader& r, const uint8_t* data, size_t size, const char* what, bool strict,
                               StringView* name, TensorDesc* desc, StringView* dim_names = nullptr) {   // kMaxRank names
    ProtoCursor c(data, size);
    ProtoField f;
    bool more = true;
    const uint8_t* type = nullptr;
    size_t type_size = 0;
    bool has_type = false;
    *name = StringView();
    *desc = TensorDesc();
    while (true) {
        TESSEL_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        if (f.number == 1) { TESSEL_TRY(proto_expect(r, f, kWireLength, what, "name")); *name = f.string(); }
        if (f.number == 2) {
            TESSEL_TRY(proto_expect(r, f, kWireLength, what, "type"));
            type = f.data;
            type_size = f.size;
            has_type = true;
        }
    }
    char label[kOnnxLabelBytes];
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
        TESSEL_TRY(proto_next(r, tc, &f, &more, label));
        if (!more) break;
        if (f.number == 1) {
            TESSEL_TRY(proto_expect(r, f, kWireLength, label, "tensor_type"));
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
        TESSEL_TRY(proto_next(r, sc, &f, &more, label));
        if (!more) break;
        if (f.number == 1) { TESSEL_TRY(proto_expect(r, f, kWireVarint, label, "elem_type")); elem_type = (int64_t)f.value; }
        if (f.number == 2) {
            TESSEL_TRY(proto_expect(r, f, kWireLength, label, "shape"));
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
        TESSEL_TRY(proto_next(r, dc, &f, &more, label));
        if (!more) break;
        if (f.number != 1) continue;
        TESSEL_TRY(proto_expect(r, f, kWireLength, label, "shape.dim"));
        if (rank == r.limits.max_rank)
            return strict ? r.fail(Status::LimitExceeded, "%s has rank above %u", label, r.limits.max_rank) : Status::Ok;
        int64_t dim = -1;   // dim_param or nothing: symbolic
        ProtoCursor d(f.data, f.size);
        ProtoField g;
        bool more_dim = true;
        while (true) {
            TESSEL_TRY(proto_next(r, d, &g, &more_dim, label));
            if (!more_dim) break;
            if (g.number == 1) {
                TESSEL_TRY(proto_expect(r, g, kWireVarint, label, "dim_value"));
                dim = (int64_t)g.value < 0 ? -1 : (int64_t)g.value;
            } else if (g.number == 2) {
                TESSEL_TRY(proto_expect(r, g, kWireLength, label, "dim_param"));
                dim = -1;
                if (dim_names) dim_names[rank] = StringView(reinterpret_cast<const char*>(g.data), g.size);
            }
        }
        desc->dims[rank++] = dim;
    }
    desc->rank = (uint8_t)rank;
    return Status::Ok;
}

// A growable TESSEL_MALLOC array of plain values.
template <class T>
struct OnnxList {
    T* items = nullptr;
    uint32_t count = 0, capacity = 0;
    OnnxList() = default;
    OnnxList(const OnnxList&) = delete;
    OnnxList& operator=(const OnnxList&) = delete;
    ~OnnxList() {
        if (items) TESSEL_FREE(items);
    }
    bool push(const T& value) {
        if (count == capacity) {
            uint32_t grown = capacity ? capacity * 2 : 16;
            T* fresh = static_cast<T*>(TESSEL_MALLOC((size_t)grown * sizeof(T)));
            if (!fresh) return false;
            if (count) std::memcpy(static_cast<void*>(fresh), items, (size_t)count * sizeof(T));
            if (items) TESSEL_FREE(items);
            items = fresh;
            capacity = grown;
        }
        items[count++] = value;
        return true;
    }
};

// Whether an AttributeProto is a graph (typed as read_attribute types it, also in IR version
// 1 files without `type`), and its GraphProto bytes.
inline bool onnx_graph_attribute(const uint8_t* data, size_t size, const uint8_t** graph, size_t* graph_size,
                                 StringView* name = nullptr) {
    OnnxReader quiet;
    quiet.base = data;
    ProtoCursor c(data, size);
    ProtoField f;
    bool more = true;
    int64_t type = 0;
    uint32_t seen = 0;
    *graph = nullptr;
    *graph_size = 0;
    while (true) {
        if (proto_next(quiet, c, &f, &more, "attribute") != Status::Ok || !more) break;
        if (f.number == 20 && f.wire == kWireVarint) type = (int64_t)f.value;
        if (f.number >= 2 && f.number <= 11) seen |= 1u << (f.number - 1);
        if (f.number == 6 && f.wire == kWireLength) { *graph = f.data; *graph_size = f.size; }
        if (f.number == 1 && f.wire == kWireLength && name) *name = f.string();
    }
    if (type == 0)
        for (int k = 1; k <= 10; ++k)
            if (seen & (1u << k)) { type = k; break; }
    return type == 5 && *graph;
}

// >>onnx graph
// Builds a Model from a ModelProto's GraphProto. A graph attribute (If's branches, Loop's and
// Scan's body) is read first, into a body Model the model owns (Model::add_body). Names a body
// reads but does not define are its outer reads: the body gets them as its last inputs, and
// the node holding the body reads them as its last (implicit) inputs, so that every stage sees
// the dependency. A node's bodies share one list of implicit inputs (the union of their outer
// reads, in first-read order), so both branches of an If take the same inputs. At the top
// level a name nothing defines is DanglingInput.
struct OnnxModelReader {
    Model* model;
    OnnxReader& r;
    StringView folder;
    OnnxNameTable tensors;    // tensor name -> producing node and port (kOuterNode: an outer read)
    OnnxNameTable names;      // node names in use
    OnnxScratch scratch;
    bool is_body = false;
    struct PendingBody {
        Model* body;
        uint32_t reads_begin, reads_end;   // its outer reads in body_reads
    };
    OnnxList<PendingBody> bodies;          // in node and attribute order, which read_attribute follows
    uint32_t next_body = 0;
    OnnxList<StringView> body_reads;
    OnnxList<StringView> implicit;         // per node, a range: the union of its bodies' outer reads
    OnnxList<uint32_t> implicit_begin;     // per node index, and one past the last node
    OnnxList<StringView> outer_reads;      // a body's own outer reads, in first-read order
    static constexpr uint32_t kOuterNode = 0xfffffffeu;

    OnnxModelReader(Model* m, OnnxReader& reader, StringView f) : model(m), r(reader), folder(f) {}

    // Prefixes the reader's message with where the body is.
    Status in_body(Status s, const char* label) {
        if (s == Status::Ok) return s;
        char inner[kErrorMessageBytes];
        std::snprintf(inner, sizeof inner, "%s", r.error);
        print(r.error, sizeof r.error, "%s: %s", label, inner);
        return s;
    }

    // Reads the bodies of node #index (its graph attributes), then gives each body the
    // node's implicit inputs (the union of the bodies' outer reads) and finalizes it.
    Status read_node_bodies(const uint8_t* data, size_t size, uint32_t index, StringView shown) {
        uint32_t first = bodies.count;
        if (!implicit_begin.push(implicit.count)) return out_of_memory("bodies");
        ProtoCursor c(data, size);
        ProtoField f;
        bool more = true;
        char label[kOnnxAttributeLabelBytes];
        while (true) {
            TESSEL_TRY(proto_next(r, c, &f, &more, "NodeProto"));
            if (!more) break;
            if (f.number != 5 || f.wire != kWireLength) continue;
            const uint8_t* g = nullptr;
            size_t g_size = 0;
            StringView attribute;
            if (!onnx_graph_attribute(f.data, f.size, &g, &g_size, &attribute)) continue;
            std::snprintf(label, sizeof label, "%.*s body '%.*s'", clip_length(shown), shown.data, clip_length(attribute),
                          attribute.data ? attribute.data : "");
            Model* body = nullptr;
            Status s = model->add_body(&body);
            if (s != Status::Ok) return r.fail(s, "%s", model->graph.last_error());
            OnnxModelReader inner(body, r, folder);
            inner.is_body = true;
            Status read = inner.read_graph(g, g_size);   // the outermost node names where; the innermost message says what
            TESSEL_TRY(is_body ? read : in_body(read, label));
            PendingBody pending{body, body_reads.count, body_reads.count};
            for (uint32_t k = 0; k < inner.outer_reads.count; ++k)
                if (!body_reads.push(inner.outer_reads.items[k])) return out_of_memory("bodies");
            pending.reads_end = body_reads.count;
            if (!bodies.push(pending)) return out_of_memory("bodies");
        }
        uint32_t begin = implicit.count;
        for (uint32_t b = first; b < bodies.count; ++b)
            for (uint32_t k = bodies.items[b].reads_begin; k < bodies.items[b].reads_end; ++k) {
                StringView name = body_reads.items[k];
                bool known = false;
                for (uint32_t j = begin; j < implicit.count && !known; ++j) known = implicit.items[j] == name;
                if (known) continue;
                if (implicit.count - begin >= kMaxNodePorts)
                    return r.fail(Status::LimitExceeded, "%.*s: its bodies read more than %u values of the enclosing graph",
                                  clip_length(shown), shown.data, kMaxNodePorts);
                if (!implicit.push(name)) return out_of_memory("bodies");
            }
        char unused[kOnnxLabelBytes];
        for (uint32_t b = first; b < bodies.count; ++b) {
            Model* body = bodies.items[b].body;
            for (uint32_t j = begin; j < implicit.count; ++j) {
                StringView name = implicit.items[j];
                bool reads = false;
                for (uint32_t k = bodies.items[b].reads_begin; k < bodies.items[b].reads_end && !reads; ++k)
                    reads = body_reads.items[k] == name;
                if (!reads) {   // another body's read: an input this body ignores, named apart from its nodes
                    std::snprintf(unused, sizeof unused, "<outer:%.*s>", clip_length(name), name.data);
                    name = StringView(unused, std::strlen(unused));
                }
                Status s = body->add_input(name, TensorDesc());
                if (s != Status::Ok) return r.fail(s, "%.*s: %s", clip_length(shown), shown.data, body->last_error());
            }
            body->outer_inputs = implicit.count - begin;
            Status s = body->finalize();
            if (s != Status::Ok) return r.fail(s, "%.*s body #%u: %s", clip_length(shown), shown.data, b - first, body->last_error());
        }
        (void)index;
        return Status::Ok;
    }

    Status out_of_memory(const char* what) { return r.fail(Status::OutOfMemory, "out of memory reading %s", what); }

    // Copies graph errors (add_node, add_attribute) into the reader's message.
    Status graph_status(Status s) {
        if (s != Status::Ok) std::snprintf(r.error, sizeof r.error, "%s", model->graph.last_error());
        return s;
    }

    // Decodes a TensorProto into a ConstTensor whose data is in the bytes (raw, aligned) or the arena.
    Status read_const(const uint8_t* data, size_t size, const char* what, TensorInfo* info, const void** out) {
        TESSEL_TRY(parse_tensor(r, data, size, what, info));
        *out = nullptr;
        if (tensor_in_place(*info)) {
            *out = info->raw;
            return Status::Ok;
        }
        if (!info->bytes) return Status::Ok;
        void* memory = model->arena.allocate(info->bytes, 64);
        if (!memory) return out_of_memory(info->label);
        TESSEL_TRY(fill_tensor(r, *info, folder, memory));
        *out = memory;
        return Status::Ok;
    }

    // A FLOATS or INTS attribute: every occurrence of field `number` of the AttributeProto
    // (packed or not), decoded into the scratch buffer, which add_attribute copies from.
    template <class T>
    Status read_list(const uint8_t* data, size_t size, uint32_t number, size_t count, const char* what,
                     const char* label, const char* field,
                     Status (*decode)(OnnxReader&, const ProtoField&, T*, size_t*, const char*, const char*),
                     Span<const T>* out) {
        T* values = static_cast<T*>(scratch.get(count * sizeof(T) + 1));
        if (!values) return out_of_memory(label);
        size_t n = 0;
        ProtoCursor again(data, size);
        ProtoField f;
        bool more = true;
        while (true) {
            TESSEL_TRY(proto_next(r, again, &f, &more, what));
            if (!more) break;
            if (f.number == number) TESSEL_TRY(decode(r, f, values, &n, what, field));
        }
        *out = Span<const T>(values, n);
        return Status::Ok;
    }

    Status read_attribute(NodeId node, StringView node_name, const uint8_t* data, size_t size) {
        char what[kOnnxNodeLabelBytes];
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
            TESSEL_TRY(proto_next(r, c, &f, &more, what));
            if (!more) break;
            switch (f.number) {
            case 1: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "name")); name = f.string(); break;
            case 2: TESSEL_TRY(proto_expect(r, f, kWireFixed32, what, "f")); value = proto_float(f.value); seen |= 1u << 1; break;
            case 3: TESSEL_TRY(proto_expect(r, f, kWireVarint, what, "i")); i = (int64_t)f.value; seen |= 1u << 2; break;
            case 4: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "s")); s = f.string(); seen |= 1u << 3; break;
            case 5:
                TESSEL_TRY(proto_expect(r, f, kWireLength, what, "t"));
                tensor = f.data;
                tensor_size = f.size;
                seen |= 1u << 4;
                break;
            case 6: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "g")); seen |= 1u << 5; break;
            case 7: TESSEL_TRY(proto_count(r, f, true, &float_count, what, "floats")); seen |= 1u << 6; break;
            case 8: TESSEL_TRY(proto_count(r, f, false, &int_count, what, "ints")); seen |= 1u << 7; break;
            case 9: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "strings")); seen |= 1u << 8; break;
            case 10: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "tensors")); seen |= 1u << 9; break;
            case 11: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "graphs")); seen |= 1u << 10; break;
            case 20: TESSEL_TRY(proto_expect(r, f, kWireVarint, what, "type")); type = (int64_t)f.value; break;
            case 21: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "ref_attr_name")); ref = f.string(); break;
            default: break;
            }
        }
        if (name.empty())
            return r.fail(Status::ParseError, "node '%.*s': an attribute at byte %zu has no name", clip_length(node_name),
                          node_name.data, r.offset(data));
        char label[kOnnxAttributeLabelBytes];
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
        case 6:
            a.kind = AttributeKind::Floats;
            TESSEL_TRY(read_list(data, size, 7, float_count, what, label, "floats", proto_floats, &a.floats));
            break;
        case 7:
            a.kind = AttributeKind::Ints;
            TESSEL_TRY(read_list(data, size, 8, int_count, what, label, "ints", proto_ints, &a.ints));
            break;
        case 4: {
            if (!tensor) return r.fail(Status::ParseError, "%s is a TENSOR without a tensor", label);
            TensorInfo info;
            const void* bytes = nullptr;
            TESSEL_TRY(read_const(tensor, tensor_size, label, &info, &bytes));
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
        case 5: {
            const uint8_t* g = nullptr;
            size_t g_size = 0;
            if (!onnx_graph_attribute(data, size, &g, &g_size) || next_body >= bodies.count)
                return r.fail(Status::ParseError, "%s is a GRAPH without a graph", label);
            a.kind = AttributeKind::Graph;
            a.body = bodies.items[next_body++].body;
            break;
        }
        case 8: {   // the strings joined, each followed by a '\0'; add_attribute copies them
            size_t bytes = 0, count = 0;
            for (int pass = 0; pass < 2; ++pass) {
                char* joined = pass ? static_cast<char*>(scratch.get(bytes + 1)) : nullptr;
                if (pass && !joined) return out_of_memory(label);
                size_t at = 0;
                ProtoCursor again(data, size);
                while (true) {
                    TESSEL_TRY(proto_next(r, again, &f, &more, what));
                    if (!more) break;
                    if (f.number != 9) continue;
                    StringView one = f.string();
                    if (!pass) {
                        for (size_t k = 0; k < one.size; ++k)
                            if (one.data[k] == 0) return r.fail(Status::Unsupported, "%s holds a string with a zero byte", label);
                        bytes += one.size + 1;
                        ++count;
                        continue;
                    }
                    if (one.size) std::memcpy(joined + at, one.data, one.size);
                    at += one.size;
                    joined[at++] = 0;
                }
                if (pass) a.s = StringView(joined, bytes);
            }
            a.kind = AttributeKind::Strings;
            a.i = (int64_t)count;
            break;
        }
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
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                switch (f.number) {
                case 1: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "node")); ++node_count; break;
                case 2: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "name")); break;
                case 5: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "initializer")); ++initializer_count; break;
                case 11: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "input")); ++input_count; break;
                case 12: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "output")); ++output_count; break;
                case 13: TESSEL_TRY(proto_expect(r, f, kWireLength, what, "value_info")); break;
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
        uint64_t input_refs = 0;
        bool need_absent = false;
        {
            ProtoCursor c(data, size);
            uint32_t index = 0;
            char node_what[kOnnxIndexLabelBytes];
            while (true) {
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 1) continue;
                std::snprintf(node_what, sizeof node_what, "node #%u", index);
                OnnxNodeInfo info;
                TESSEL_TRY(scan_node(r, f.data, f.size, node_what, &info));
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
                input_refs += info.inputs;
                if (info.inputs > max_inputs) max_inputs = info.inputs;
                need_absent = need_absent || info.absent_inputs;
                ++index;
            }
        }
        // Bodies, before any name is resolved (their outer reads are their nodes' inputs).
        {
            ProtoCursor c(data, size);
            uint32_t index = 0;
            char node_what[kOnnxIndexLabelBytes];
            while (true) {
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 1) continue;
                std::snprintf(node_what, sizeof node_what, "node #%u", index);
                OnnxNodeInfo info;
                TESSEL_TRY(scan_node(r, f.data, f.size, node_what, &info));
                char shown[kOnnxNodeLabelBytes];   // the node's name is given later: its ONNX name or index, and op
                if (info.name.empty()) std::snprintf(shown, sizeof shown, "%s (%.*s)", node_what, clip_length(info.op), info.op.data);
                else std::snprintf(shown, sizeof shown, "node '%.*s' (%.*s)", clip_length(info.name), info.name.data, clip_length(info.op), info.op.data);
                TESSEL_TRY(read_node_bodies(f.data, f.size, index, StringView(shown, std::strlen(shown))));
                ++index;
            }
            if (!implicit_begin.push(implicit.count)) return out_of_memory("bodies");
        }
        // A body's outer reads are names too: each input, implicit input and output may be one.
        uint64_t outer_bound = is_body ? input_refs + implicit.count + output_count : 0;
        if (!tensors.init(tensor_count + outer_bound) || !names.init(total + 1 + outer_bound)) return out_of_memory("the graph's names");
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
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 5) continue;
                char init_what[kOnnxIndexLabelBytes];
                std::snprintf(init_what, sizeof init_what, "initializer #%u", index++);
                TensorInfo info;
                const void* bytes = nullptr;
                TESSEL_TRY(read_const(f.data, f.size, "initializer", &info, &bytes));
                if (info.name.empty()) return r.fail(Status::ParseError, "%s has no name", init_what);
                NodeId id = kNoNode;
                if (!names.insert(info.name, 0, 0))
                    return r.fail(Status::DuplicateName, "initializer '%.*s' is given twice", clip_length(info.name), info.name.data);
                TESSEL_TRY(graph_status(model->add_constant(info.name, info.desc, bytes, &id, false)));
                if (!tensors.insert(info.name, id, 0)) return r.fail(Status::DuplicateName, "initializer '%.*s' is given twice", clip_length(info.name), info.name.data);
            }
        }
        // Graph inputs that are not initializers.
        {
            ProtoCursor c(data, size);
            while (true) {
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 11) continue;
                StringView name;
                TensorDesc desc;
                // An input that names an initializer is its default value: the constant stands.
                TESSEL_TRY(parse_value_info(r, f.data, f.size, "graph input", false, &name, &desc));
                const OnnxNameTable::Entry* e = tensors.find(name);
                if (e && model->graph.node(e->node).op == StringView("Constant")) continue;
                // A body's inputs take their types from the node's inputs when it is compiled.
                StringView dim_names[kMaxRank];
                if (!is_body) TESSEL_TRY(parse_value_info(r, f.data, f.size, "graph input", true, &name, &desc, dim_names));
                if (e || !names.insert(name, 0, 0))
                    return r.fail(Status::DuplicateName, "graph input '%.*s' is given twice", clip_length(name), name.data);
                NodeId id = kNoNode;
                TESSEL_TRY(graph_status(model->add_input(name, desc, &id)));
                for (uint32_t axis = 0; axis < desc.rank; ++axis)
                    if (desc.dims[axis] < 0 && !dim_names[axis].empty())
                        TESSEL_TRY(graph_status(model->set_dim_name(model->input_count() - 1, axis, dim_names[axis])));
                if (!tensors.insert(name, id, 0))
                    return r.fail(Status::DuplicateName, "graph input '%.*s' is given twice", clip_length(name), name.data);
            }
        }
        // Output names are Result nodes: reserve them before naming the ONNX nodes.
        {
            ProtoCursor c(data, size);
            while (true) {
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 12 && f.number != 13) continue;
                StringView name;
                TensorDesc desc;
                TESSEL_TRY(parse_value_info(r, f.data, f.size, f.number == 12 ? "graph output" : "value_info", false, &name, &desc));
                if (f.number != 12 || is_body) continue;   // a body's outputs are positional: named at the end
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
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 1) continue;
                ProtoCursor n(f.data, f.size);
                ProtoField g;
                bool more_node = true;
                uint32_t port = 0;
                while (true) {
                    TESSEL_TRY(proto_next(r, n, &g, &more_node, "NodeProto"));
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
        if (is_body) TESSEL_TRY(find_outer_reads(data, size));
        // Nodes.
        {
            max_inputs += kMaxNodePorts;   // implicit inputs
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
                TESSEL_TRY(proto_next(r, c, &f, &more, what));
                if (!more) break;
                if (f.number != 12) continue;
                StringView name;
                TensorDesc desc;
                TESSEL_TRY(parse_value_info(r, f.data, f.size, "graph output", false, &name, &desc));
                const OnnxNameTable::Entry* e = tensors.find(name);
                if (!e)
                    return r.fail(Status::DanglingInput, "graph output '%.*s' is not produced by any node, input or initializer",
                                  clip_length(name), name.data);
                InputRef source = e->node == kOuterNode ? InputRef::by_name(name) : InputRef::by_id(e->node, e->port);
                if (is_body) {   // positional: a name of its own when the tensor's is taken
                    char generated[kOnnxGeneratedNameBytes];
                    StringView result = name;
                    for (uint32_t k = 1; names.find(result); ++k) {
                        std::snprintf(generated, sizeof generated, "%.*s#out%u", clip_length(name), name.data, k);
                        result = StringView(generated, std::strlen(generated));
                    }
                    TESSEL_TRY(graph_status(model->add_output(result, source)));
                    if (!names.insert(model->graph.node(model->output(model->output_count() - 1).node).name, 0, 0))
                        return r.fail(Status::DuplicateName, "body output '%.*s' is named twice", clip_length(name), name.data);
                    continue;
                }
                TESSEL_TRY(graph_status(model->add_output(name, source)));
            }
        }
        return Status::Ok;
    }

    // A body's names that nothing in it defines: node inputs, its nodes' implicit inputs and
    // its outputs. Each becomes an outer read (reserved as a node name: its input's name).
    Status note_outer(StringView name) {
        if (name.empty() || tensors.find(name)) return Status::Ok;
        if (!tensors.insert(name, kOuterNode, 0) || !names.insert(name, 0, 0) || !outer_reads.push(name))
            return r.fail(Status::DuplicateName, "body name '%.*s' is used twice", clip_length(name), name.data);
        return Status::Ok;
    }

    Status find_outer_reads(const uint8_t* data, size_t size) {
        ProtoCursor c(data, size);
        ProtoField f, g;
        bool more = true;
        uint32_t index = 0;
        while (true) {
            TESSEL_TRY(proto_next(r, c, &f, &more, "GraphProto"));
            if (!more) break;
            if (f.number == 12) {
                StringView name;
                TensorDesc desc;
                TESSEL_TRY(parse_value_info(r, f.data, f.size, "graph output", false, &name, &desc));
                TESSEL_TRY(note_outer(name));
            }
            if (f.number != 1) continue;
            ProtoCursor n(f.data, f.size);
            bool more_node = true;
            while (true) {
                TESSEL_TRY(proto_next(r, n, &g, &more_node, "NodeProto"));
                if (!more_node) break;
                if (g.number == 1) TESSEL_TRY(note_outer(g.string()));
            }
            for (uint32_t j = implicit_begin.items[index]; j < implicit_begin.items[index + 1]; ++j)
                TESSEL_TRY(note_outer(implicit.items[j]));
            ++index;
        }
        return Status::Ok;
    }

    Status add_nodes(const uint8_t* data, size_t size, NodeId base, InputRef* refs) {
        ProtoCursor c(data, size);
        ProtoField f;
        bool more = true;
        uint32_t index = 0;
        char node_what[kOnnxIndexLabelBytes];
        while (true) {
            TESSEL_TRY(proto_next(r, c, &f, &more, "GraphProto"));
            if (!more) break;
            if (f.number != 1) continue;
            std::snprintf(node_what, sizeof node_what, "node #%u", index);
            OnnxNodeInfo info;
            TESSEL_TRY(scan_node(r, f.data, f.size, node_what, &info));
            // The node's name: its own unless taken, else <op_type>_<index> made unique.
            char generated[kOnnxGeneratedNameBytes];
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
                TESSEL_TRY(proto_next(r, n, &g, &more_node, node_what));
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
                refs[k++] = e->node == kOuterNode ? InputRef::by_name(g.string()) : InputRef::by_id(e->node, e->port);
            }
            size_t count = info.inputs;
            for (uint32_t j = implicit_begin.items[index]; j < implicit_begin.items[index + 1]; ++j) {
                StringView read = implicit.items[j];
                const OnnxNameTable::Entry* e = tensors.find(read);
                if (!e)
                    return r.fail(Status::DanglingInput, "node '%.*s' (%.*s): a body reads tensor '%.*s', which no node, input or initializer produces",
                                  clip_length(name), name.data, clip_length(info.op), info.op.data, clip_length(read), read.data);
                refs[count++] = e->node == kOuterNode ? InputRef::by_name(read) : InputRef::by_id(e->node, e->port);
            }
            NodeId id = kNoNode;
            TESSEL_TRY(graph_status(model->add_node(info.op, name, Span<const InputRef>(refs, count),
                                                          (uint32_t)info.outputs, &id)));
            TESSEL_ASSERT(id == base + index);
            if (!names.insert(model->graph.node(id).name, id, 0))
                return r.fail(Status::DuplicateName, "node name '%.*s' is used twice", clip_length(name), name.data);
            ProtoCursor a(f.data, f.size);
            while (true) {
                TESSEL_TRY(proto_next(r, a, &g, &more_node, node_what));
                if (!more_node) break;
                if (g.number == 5) TESSEL_TRY(read_attribute(id, model->graph.node(id).name, g.data, g.size));
            }
            ++index;
        }
        return Status::Ok;
    }
};

// >>onnx model and files
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
        TESSEL_TRY(proto_next(r, c, &f, &more, what));
        if (!more) break;
        switch (f.number) {
        case 1: TESSEL_TRY(proto_expect(r, f, kWireVarint, what, "ir_version")); break;
        case 7:
            TESSEL_TRY(proto_expect(r, f, kWireLength, what, "graph"));
            graph = f.data;
            graph_size = f.size;
            has_graph = true;
            break;
        case 8: {
            TESSEL_TRY(proto_expect(r, f, kWireLength, what, "opset_import"));
            ProtoCursor o(f.data, f.size);
            ProtoField g;
            bool more_opset = true;
            StringView domain;
            int64_t version = 0;
            while (true) {
                TESSEL_TRY(proto_next(r, o, &g, &more_opset, "opset_import"));
                if (!more_opset) break;
                if (g.number == 1) { TESSEL_TRY(proto_expect(r, g, kWireLength, "opset_import", "domain")); domain = g.string(); }
                if (g.number == 2) { TESSEL_TRY(proto_expect(r, g, kWireVarint, "opset_import", "version")); version = (int64_t)g.value; }
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
    model->opset = (uint32_t)opset;   // before the graph: its bodies take the model's opset
    OnnxModelReader reader(model, r, folder);
    TESSEL_TRY(reader.read_graph(graph, graph_size));
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
    TESSEL_TRY(fill_tensor(r, info, folder, result.data()));
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
    return read_onnx(bytes, size, folder, Limits());
}

Status Model::read_onnx(const void* bytes, size_t size, StringView folder, const Limits& limits) {
    detail::OnnxReader r;
    r.limits = limits;
    if (r.limits.max_rank > (uint32_t)kMaxRank) r.limits.max_rank = kMaxRank;   // the dims arrays hold kMaxRank
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

Status Model::read_onnx_file(const char* path) { return read_onnx_file(path, Limits()); }

Status Model::read_onnx_file(const char* path, const Limits& limits) {
    detail::OnnxReader r;
    r.limits = limits;
    if (!path) return graph.fail(Status::InvalidArgument, "read_onnx_file: null path");
    if (file_ || graph.node_count() != 0) return graph.fail(Status::InvalidArgument, "read_onnx_file needs an empty model");
    void* data = nullptr;
    size_t size = 0;
    Status s = detail::read_whole_file(r, path, &data, &size);
    if (s != Status::Ok) return graph.fail(s, "%s", r.error);
    file_ = data;
    return read_onnx(data, size, detail::folder_of(path), limits);
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
    TESSEL_TRY(detail::read_whole_file(r, path, &data, &size));
    Status s = detail::read_tensor_proto_in(r, data, size, detail::folder_of(path), tensor, nullptr, 0);
    TESSEL_FREE(data);
    return s;
}

// >>onnx writer
// TensorProto in raw_data form: dims = 1 (packed), data_type = 2, name = 8, raw_data = 9.
namespace detail {
// Protobuf output that either counts bytes (write == nullptr) or writes them; a nested
// message is counted first, for its length prefix.
struct ProtoOut {
    WriteFn write = nullptr;
    void* user = nullptr;
    uint64_t size = 0;
    void raw(const void* data, size_t n) {
        if (write && n) write(user, static_cast<const char*>(data), n);
        size += n;
    }
    void varint(uint64_t v) {
        uint8_t b[10];
        raw(b, put_varint(b, v));
    }
    void tag(uint32_t field, uint32_t wire) { varint((uint64_t)field << 3 | wire); }
    void field_varint(uint32_t field, uint64_t v) { tag(field, 0); varint(v); }
    void field_bytes(uint32_t field, const void* data, size_t n) { tag(field, 2); varint(n); raw(data, n); }
    void field_string(uint32_t field, StringView s) { field_bytes(field, s.data, s.size); }
    template <class Body>
    void message(uint32_t field, Body body) {
        ProtoOut counter;
        body(counter);
        tag(field, 2);
        varint(counter.size);
        body(*this);
    }
};

inline void onnx_tensor(ProtoOut& o, const TensorDesc& desc, const void* data, size_t bytes, StringView name) {
    if (desc.rank) {
        o.message(1, [&](ProtoOut& d) { for (uint32_t i = 0; i < desc.rank; ++i) d.varint((uint64_t)desc.dims[i]); });
    }
    o.field_varint(2, (uint64_t)onnx_type_code(desc.type));
    if (!name.empty()) o.field_string(8, name);
    o.field_bytes(9, data, bytes);
}

// A free dim is written as its dim_param name (Model::dim_name), else "?".
inline void onnx_value_info(ProtoOut& o, StringView name, const TensorDesc& desc, const Model* model = nullptr, uint32_t input = 0) {
    o.field_string(1, name);
    o.message(2, [&](ProtoOut& type) {                 // TypeProto
        type.message(1, [&](ProtoOut& tensor) {        // TypeProto.Tensor
            tensor.field_varint(1, (uint64_t)onnx_type_code(desc.type));
            tensor.message(2, [&](ProtoOut& shape) {   // TensorShapeProto
                for (uint32_t i = 0; i < desc.rank; ++i)
                    shape.message(1, [&](ProtoOut& dim) {
                        if (desc.dims[i] >= 0) dim.field_varint(1, (uint64_t)desc.dims[i]);
                        else dim.field_string(2, model && !model->dim_name(input, i).empty() ? model->dim_name(input, i) : StringView("?"));
                    });
            });
        });
    });
}

inline void onnx_attribute(ProtoOut& o, const Attribute& a) {
    o.field_string(1, a.name);
    switch (a.kind) {
        case AttributeKind::Float: { o.tag(2, 5); o.raw(&a.f, 4); o.field_varint(20, 1); break; }
        case AttributeKind::Int: o.field_varint(3, (uint64_t)a.i); o.field_varint(20, 2); break;
        case AttributeKind::String: o.field_string(4, a.s); o.field_varint(20, 3); break;
        case AttributeKind::Strings:
            for (size_t at = 0; at < a.s.size;) {
                size_t end = at;
                while (end < a.s.size && a.s.data[end]) ++end;
                o.field_string(9, StringView(a.s.data + at, end - at));
                at = end + 1;
            }
            o.field_varint(20, 8);
            break;
        case AttributeKind::Tensor:
            o.message(5, [&](ProtoOut& t) { onnx_tensor(t, a.tensor->desc, a.tensor->data, a.tensor->bytes, StringView()); });
            o.field_varint(20, 4);
            break;
        case AttributeKind::Floats:
            o.message(7, [&](ProtoOut& f) { f.raw(a.floats.data, a.floats.size * 4); });
            o.field_varint(20, 6);
            break;
        case AttributeKind::Ints:
            o.message(8, [&](ProtoOut& f) { for (int64_t x : a.ints) f.varint((uint64_t)x); });
            o.field_varint(20, 7);
            break;
        case AttributeKind::Graph: break;   // write_onnx refuses bodies first
    }
}
}  // namespace detail

Status write_onnx(const Model& model, WriteFn write, void* user) {
    const Graph& g = model.graph;
    if (!g.finalized() || !write) return Status::InvalidArgument;
    for (NodeId v = 0; v < g.node_count(); ++v)
        for (const Attribute* a = g.node(v).attributes; a; a = a->next)
            if (a->kind == AttributeKind::Graph) return Status::Unsupported;   // bodies are not written yet
    // Tensor names: a value read by a Result takes the Result's name (the first one).
    Arena scratch;
    uint32_t n = g.node_count();
    uint32_t* base = scratch.allocate_array<uint32_t>(n + 1);
    if (!base) return Status::OutOfMemory;
    uint32_t values = 0;
    for (NodeId v = 0; v < n; ++v) { base[v] = values; values += g.node(v).num_outputs; }
    StringView* names = scratch.allocate_array<StringView>(values + 1);
    if (!names) return Status::OutOfMemory;
    char buffer[300];
    for (NodeId v = 0; v < n; ++v)
        for (uint32_t p = 0; p < g.node(v).num_outputs; ++p) {
            if (p == 0) names[base[v]] = g.node(v).name;
            else {
                detail::print(buffer, sizeof buffer, "%.*s:%u", (int)g.node(v).name.size, g.node(v).name.data, p);
                names[base[v] + p] = scratch.copy_string(StringView(buffer));
            }
        }
    uint8_t* renamed = scratch.allocate_array<uint8_t>(values + 1);
    if (!renamed) return Status::OutOfMemory;
    std::memset(renamed, 0, values + 1);
    for (uint32_t i = 0; i < model.output_count(); ++i) {
        const Edge& e = g.node(model.output(i).node).inputs[0];
        uint32_t value = base[e.producer] + e.port;
        if (!renamed[value] && g.node(e.producer).op != StringView("Parameter") && g.node(e.producer).op != StringView("Constant")) {
            names[value] = model.output(i).name;
            renamed[value] = 1;
        }
    }
    for (NodeId v = 0; v < n; ++v) {   // ONNX names absent inputs "" : only trailing ones can be dropped
        const Node& node = g.node(v);
        for (uint32_t i = 0; i < node.num_inputs; ++i)
            if (g.node(node.inputs[i].producer).op == StringView("Absent")) names[base[node.inputs[i].producer]] = StringView("", 0);
    }
    auto graph_body = [&](detail::ProtoOut& out) {
        for (NodeId v = 0; v < n; ++v) {
            const Node& node = g.node(v);
            if (detail::is_free_op(node.op)) continue;
            out.message(1, [&](detail::ProtoOut& o) {
                for (uint32_t i = 0; i < node.num_inputs; ++i) o.field_string(1, names[base[node.inputs[i].producer] + node.inputs[i].port]);
                for (uint32_t p = 0; p < node.num_outputs; ++p) o.field_string(2, names[base[v] + p]);
                o.field_string(3, node.name);
                o.field_string(4, node.op);
                for (const Attribute* a = node.attributes; a; a = a->next) o.message(5, [&](detail::ProtoOut& at) { detail::onnx_attribute(at, *a); });
            });
            // A value read by a second Result: an Identity gives the Result its name.
        }
        for (uint32_t i = 0; i < model.output_count(); ++i) {
            const Edge& e = g.node(model.output(i).node).inputs[0];
            StringView source = names[base[e.producer] + e.port];
            if (source == model.output(i).name) continue;
            out.message(1, [&](detail::ProtoOut& o) {
                o.field_string(1, source);
                o.field_string(2, model.output(i).name);
                o.field_string(3, model.output(i).name);
                o.field_string(4, "Identity");
            });
        }
        out.field_string(2, "tessel");
        for (NodeId v = 0; v < n; ++v) {
            const Node& node = g.node(v);
            if (!(node.op == StringView("Constant") && node.num_inputs == 0)) continue;
            const Attribute* a = g.find_attribute(v, "value");
            if (!a || a->kind != AttributeKind::Tensor || !a->tensor) continue;
            out.message(5, [&](detail::ProtoOut& o) { detail::onnx_tensor(o, a->tensor->desc, a->tensor->data, a->tensor->bytes, node.name); });
        }
        for (uint32_t i = 0; i < model.input_count(); ++i) {
            const Node& node = g.node(model.input(i).node);
            out.message(11, [&](detail::ProtoOut& o) { detail::onnx_value_info(o, node.name, node.outputs ? node.outputs[0] : TensorDesc(), &model, i); });
        }
        for (uint32_t i = 0; i < model.output_count(); ++i) {
            const Edge& e = g.node(model.output(i).node).inputs[0];
            const Node& producer = g.node(e.producer);
            TensorDesc d = producer.outputs ? producer.outputs[e.port] : TensorDesc();
            if (d.type == ElementType::Undefined) d.type = ElementType::Float32;   // unknown before compile
            out.message(12, [&](detail::ProtoOut& o) { detail::onnx_value_info(o, model.output(i).name, d); });
        }
    };
    detail::ProtoOut out;
    out.write = write;
    out.user = user;
    out.field_varint(1, 8);   // ir_version
    out.field_string(2, "tessel");
    out.message(7, graph_body);
    out.message(8, [&](detail::ProtoOut& o) { o.field_string(1, ""); o.field_varint(2, model.opset); });
    return Status::Ok;
}

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

}  // namespace tessel

#endif  // TESSEL_RUNTIME_IMPLEMENTATION
