/* hetero.h - Tessel: arena, graph (DAG), partitioners, graph text format, DOT output.

   Tessel is a set of drop-in C++17 headers that run neural-network graphs on edge boards.
   This header holds the graph that every stage shares and the HETERO partitioners that
   split it between devices.

   Do this
   -------
       #define TESSEL_IMPLEMENTATION      // in exactly one .cpp file
       #include "hetero.h"

   Every other file includes the header without the define. Including it twice, or from
   several translation units, compiles and links.

       tessel::Arena arena;                            // heap blocks (or Arena(buffer, bytes))
       tessel::Graph graph(&arena);
       if (tessel::read_text(tessel::StringView("1 A\n2 B 1\n"), &graph) != tessel::Status::Ok)
           puts(graph.last_error());
       tessel::Partition partition;
       tessel::PartitionOptions options;               // algorithm, device order, limits
       tessel::partition(graph, options, &arena, &partition);

   Contents
   --------
   Each part starts at a marker line; search for it, e.g. "// >>rollback floods".
   Declarations:
       >>status                       Status, TESSEL_TRY, kErrorMessageBytes, kNotFound
       >>small types                  StringView, Span, WriteFn
       >>arena                        Arena: the bump allocator everything lives in
       >>graph types                  node ids, tensors, attributes, inputs, edges, nodes
       >>graph                        Graph: building, finalize(), queries
       >>partition types              Partition, PartitionOptions, PartitionTuning, partition()
       >>text format                  read_text, write_text, write_dot
   Implementation (TESSEL_IMPLEMENTATION):
       >>implementation helpers       assert, hashing, message formatting
       >>status implementation        status names
       >>arena implementation         blocks and the fixed buffer
       >>graph implementation         add_node, finalize (names, ports, order, cycles)
       >>text format implementation   the text reader and writer
       >>partition shared helpers     ArenaVector, NodeMap, Builder (commits subgraphs)
       >>rollback                     the seed algorithm, its global condition, why acyclic
       >>rollback state               RollbackContext's data, one struct per part
       >>rollback context             RollbackContext: setup and allocation
       >>rollback floods              the incremental checker: least merge indices
       >>rollback element bitsets     per-node bitsets of other devices' nodes (claims R, K)
       >>rollback naive checker       the V^2 closure (test oracle)
       >>rollback growth              growing one candidate, merge and rollback
       >>rollback contraction         a committed subgraph becomes one node of Q
       >>rollback candidate cache     candidates per root, invalidated after commits
       >>rollback helper thread       speculative growths on a second thread
       >>rollback rounds              run_device: listing roots, committing the largest
       >>levels                       longest-path clustering, why acyclic
       >>waves                        device-ordered topological waves
       >>min-size post-pass           merging small subgraphs into neighbours
       >>partition names              algorithm and reason names
       >>partition finish             execution order, boundary tensors, cross edges
       >>partition entry              partition(): checks, dispatch, result
       >>check_partition              the verifier
       >>affinities and placements    assign_affinities, write_placements
       >>dot implementation           write_dot

   Config macros (define before including, the same in every translation unit)
   ---------------------------------------------------------------------------
       TESSEL_ASSERT(x)            the library's own invariants (default: print and abort).
                                   Bad input never reaches an assert: it returns a Status.
       TESSEL_MALLOC(n)/TESSEL_FREE(p)  all heap use (default malloc/free). A test may count or
                                   fail allocations through them.
       TESSEL_MALLOC_IS_MALLOC     set by default; define it with your own TESSEL_MALLOC when that
                                   calls malloc: freed pages go back to the system (malloc_trim)
                                   and, on Linux, large weights ask for huge pages (Arena).

   Errors
   ------
   Fallible calls return `tessel::Status` ([[nodiscard]]); the object they act on keeps a
   readable message in `last_error()` (a fixed buffer, never allocated). No exceptions, no RTTI.

   Memory
   ------
   Graphs and partitions live in an `Arena`: a bump allocator over blocks from TESSEL_MALLOC,
   or over a caller's fixed buffer (firmware), in which case it never mallocs and exhaustion
   returns Status::OutOfMemory. Nothing is freed one by one: `reset()` or the arena's
   destructor frees everything at once. Bytes per node: docs/performance.md.

   Threading
   ---------
   A Graph is built by one thread. After `finalize()` every const query may be called from
   any number of threads. An Arena is not thread safe. partition() runs on the caller's
   thread, plus one helper thread of its own for the whole call when
   PartitionOptions::threads > 1 (rollback only); the result does not depend on it.

   Partitioners
   ------------
   partition() splits a finalized graph into per-device subgraphs whose graph is acyclic:
   `rollback` (the HETERO seed algorithm, with committed subgraphs counted as contracted
   nodes in its global condition, so two subgraphs can never feed each other, and nodes of
   other devices blocked from the start instead of when the growth first touches them; large
   growths check the condition against per-node bitsets of the other devices' nodes),
   `levels` (the clustering note's longest path) and `waves` (device-ordered topological
   waves). Every algorithm keeps keep-apart edges across subgraphs; check_partition()
   verifies any result; each node gets a printable reason. Proofs of acyclicity are in the
   implementation's comments (search for "Why the result is acyclic").

   Limits and threat model
   -----------------------
   Node ids are 32-bit (at most 2^32-2 nodes; partition() at most 2^31-1), ports 16-bit,
   tensor rank at most 8, at most 64 devices. The text reader and finalize() accept any
   bytes: malformed input returns ParseError, DuplicateName, DanglingInput, PortOutOfRange or
   Cycle with a message naming the line or the nodes, never a crash. Graph data is never
   walked recursively, so deep graphs cannot overflow the stack. `rollback` is superlinear
   on dense random DAGs (figures in docs/performance.md); `levels` and `waves` are linear.
*/
#ifndef TESSEL_HETERO_H
#define TESSEL_HETERO_H

#define TESSEL_VERSION_MAJOR 0
#define TESSEL_VERSION_MINOR 1
#define TESSEL_VERSION_PATCH 0

#include <cstddef>
#include <cstdint>
#include <cstring>

#ifndef TESSEL_ASSERT
#define TESSEL_ASSERT(x) ((x) ? (void)0 : ::tessel::detail::assert_failed(#x, __FILE__, __LINE__))
#endif
#if defined(TESSEL_MALLOC) != defined(TESSEL_FREE)
#error "define both TESSEL_MALLOC and TESSEL_FREE, or neither"
#endif
#ifndef TESSEL_MALLOC
#include <cstdlib>
#define TESSEL_MALLOC(n) std::malloc(n)
#define TESSEL_FREE(p) std::free(p)
#define TESSEL_MALLOC_IS_MALLOC 1   // the runtime may hand freed pages back to the system (malloc_trim)
#endif

namespace tessel {
namespace detail {
void assert_failed(const char* expression, const char* file, int line);   // TESSEL_ASSERT
// Advice only: the whole 2 MiB pages inside [memory, memory + bytes) as huge pages, on Linux
// with malloc's memory; nothing elsewhere. For large data written once and read for long.
void advise_huge_pages(void* memory, size_t bytes);
// The alignment at which a block is huge pages from its start: 2 MiB where the advice is given.
#if defined(TESSEL_MALLOC_IS_MALLOC) && defined(__linux__)
constexpr size_t kHugePageAlignment = size_t(2) << 20;
#else
constexpr size_t kHugePageAlignment = 64;
#endif
}  // namespace detail

// >>status
// One status type for the whole library. New values are only ever appended.
enum class [[nodiscard]] Status : int {
    Ok = 0,
    InvalidArgument,   // a parameter is out of its documented range
    OutOfMemory,       // an arena or TESSEL_MALLOC ran out
    ParseError,        // text or binary input is malformed
    DuplicateName,     // two nodes share a name
    DanglingInput,     // an input names a node that does not exist
    PortOutOfRange,    // an input reads an output port its producer does not have
    Cycle,             // the graph is not a DAG
    NotFinalized,      // the graph must be finalized first
    InvalidPartition,  // check_partition() found a fault
    LimitExceeded,     // a documented limit was passed
    NotFound,          // a name or key does not exist
    Unsupported,       // valid input that this build cannot handle
    IoError,           // a file could not be read or written, or a device queue failed
};
const char* status_name(Status status);

// Declares a status as deliberately unused (for example an error that is reported elsewhere).
inline void ignore_status(Status) {}

// Returns any status other than Ok from the calling function (asmjit's ASMJIT_PROPAGATE).
#define TESSEL_TRY(expression)                                                 \
    do {                                                                       \
        ::tessel::Status tessel_try_status_ = (expression);                    \
        if (tessel_try_status_ != ::tessel::Status::Ok) return tessel_try_status_; \
    } while (0)

// printf-style argument checking for the library's message formatters (GCC and Clang).
#if defined(__GNUC__)
#define TESSEL_PRINTF_FORMAT(format_index, first_argument) __attribute__((format(printf, format_index, first_argument)))
#else
#define TESSEL_PRINTF_FORMAT(format_index, first_argument)
#endif

// The size of every last_error() buffer: a message longer than this is cut, never allocated.
constexpr size_t kErrorMessageBytes = 256;
// What an index lookup (find_input, find_output, ...) returns for a name that is not there.
constexpr uint32_t kNotFound = 0xffffffffu;

// >>small types
struct StringView {
    const char* data = nullptr;
    size_t size = 0;
    constexpr StringView() = default;
    constexpr StringView(const char* d, size_t n) : data(d), size(n) {}
    // Inline, so a literal's length folds at compile time: op names are compared per node.
    StringView(const char* zero_terminated)  // NOLINT: implicit on purpose
        : data(zero_terminated), size(zero_terminated ? std::strlen(zero_terminated) : 0) {}
    bool empty() const { return size == 0; }
    char operator[](size_t i) const { return data[i]; }
    const char* begin() const { return data; }
    const char* end() const { return data + size; }
};
inline bool operator==(StringView a, StringView b) {
    return a.size == b.size && (a.size == 0 || a.data == b.data || std::memcmp(a.data, b.data, a.size) == 0);
}
inline bool operator!=(StringView a, StringView b) { return !(a == b); }
// a == StringView(name) without measuring name first: lookups walk tables of op names.
inline bool equals_name(StringView a, const char* name) {
    for (size_t i = 0; i < a.size; ++i)
        if (name[i] == '\0' || name[i] != a.data[i]) return false;
    return name[a.size] == '\0';
}

template <class T>
struct Span {
    T* data = nullptr;
    size_t size = 0;
    constexpr Span() = default;
    constexpr Span(T* d, size_t n) : data(d), size(n) {}
    template <size_t N>
    constexpr Span(T (&array)[N]) : data(array), size(N) {}  // NOLINT: implicit on purpose
    T& operator[](size_t i) const { return data[i]; }
    T* begin() const { return data; }
    T* end() const { return data + size; }
    bool empty() const { return size == 0; }
};

// Output sink for writers: called with consecutive pieces of the output.
using WriteFn = void (*)(void* user, const char* data, size_t size);

// >>arena
class Arena {
public:
    // Grows in blocks from TESSEL_MALLOC; a request of 2 MiB or more gets a block of its own,
    // whose whole 2 MiB pages are asked for as huge pages on Linux with malloc.
    Arena();
    explicit Arena(size_t block_bytes);       // same, with a chosen minimum block size
    // For large data written once and read for long (packed weights): on Linux with malloc,
    // once it holds 1 MiB, blocks of 8 MiB whose whole 2 MiB pages are asked for as huge pages
    // (a page fault each 2 MiB, not each 4 KiB; untouched pages cost nothing, so a small arena
    // never takes a huge page); elsewhere the same as Arena().
    struct HugePages {};
    explicit Arena(HugePages);
    Arena(void* buffer, size_t bytes);        // fixed buffer: never mallocs
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    // nullptr when exhausted (or when bytes overflows); align must be a power of two.
    // Inline while the current block has room: graphs and plans allocate per node and edge.
    void* allocate(size_t bytes, size_t align = alignof(std::max_align_t)) {
        if (base_ && bytes && align && (align & (align - 1)) == 0) {
            uintptr_t base = reinterpret_cast<uintptr_t>(base_);
            size_t begin = ((base + offset_ + (align - 1)) & ~(uintptr_t)(align - 1)) - base;
            if (begin <= capacity_ && bytes <= capacity_ - begin) {
                used_ += begin + bytes - offset_;
                offset_ = begin + bytes;
                return base_ + begin;
            }
        }
        return allocate_block(bytes, align);
    }
    template <class T>
    T* allocate_array(size_t count) {
        if (count > SIZE_MAX / sizeof(T)) return nullptr;
        return static_cast<T*>(allocate(count * sizeof(T), alignof(T)));
    }
    // Copies a string and zero-terminates it; empty StringView on exhaustion of a non-empty copy.
    StringView copy_string(StringView s);

    size_t used() const;       // bytes handed out (including alignment padding)
    size_t reserved() const;   // bytes held from the system or the fixed buffer's size
    void reset();              // frees everything; a fixed buffer is reused from its start

private:
    struct Block;
    void* allocate_block(size_t bytes, size_t align);   // the rest of allocate(): checks, new blocks
    Block* head_ = nullptr;        // current block (heap mode); blocks are chained
    unsigned char* base_ = nullptr;   // the current block's data or the fixed buffer
    size_t capacity_ = 0;             // its usable bytes
    unsigned char* fixed_ = nullptr;
    size_t fixed_size_ = 0;
    size_t offset_ = 0;            // in the current block or the fixed buffer
    size_t used_ = 0;
    size_t reserved_ = 0;
    size_t block_bytes_ = 64 * 1024;
    bool huge_pages_ = false;
};

// >>graph types
using NodeId = uint32_t;
constexpr NodeId kNoNode = 0xffffffffu;
using DeviceId = uint16_t;
constexpr DeviceId kNoDevice = 0xffffu;
constexpr int kMaxRank = 8;

// New types are appended: the numbers are stored in compiled-model blobs.
enum class ElementType : uint8_t {
    Undefined = 0, Float32, Float16, Int64, Int32, Int8, UInt8, Bool,
    Float64, Int16, UInt16, UInt32, UInt64, BFloat16
};
constexpr ElementType kLastElementType = ElementType::BFloat16;
inline bool element_type_valid(ElementType type) {
    return type != ElementType::Undefined && (uint32_t)type <= (uint32_t)kLastElementType;
}
const char* element_type_name(ElementType type);
size_t element_size(ElementType type);

struct TensorDesc {
    ElementType type = ElementType::Undefined;
    uint8_t rank = 0;
    int64_t dims[kMaxRank] = {};  // a negative dim is unknown (symbolic)
};

// A constant tensor referenced by an attribute or an initializer; data is not owned.
struct ConstTensor {
    TensorDesc desc;
    const void* data = nullptr;
    size_t bytes = 0;
};

enum class AttributeKind : uint8_t { Int, Float, String, Ints, Floats, Tensor, Graph, Strings };
struct Attribute {
    StringView name;
    AttributeKind kind = AttributeKind::Int;
    int64_t i = 0;
    float f = 0;
    StringView s;    // Strings: every string followed by a '\0', i of them
    Span<const int64_t> ints;
    Span<const float> floats;
    const ConstTensor* tensor = nullptr;
    const void* body = nullptr;       // Graph: a subgraph body (runtime.h: a Model its model owns)
    const Attribute* next = nullptr;  // the node's next attribute
};

// An input when building: the producer by id, or by name (resolved by finalize(), so names
// may refer to nodes added later). keep_apart: this node must never share a subgraph with
// the producer (it needs the input's value at compile time, as Reshape needs its shape).
struct InputRef {
    NodeId producer = kNoNode;
    StringView producer_name;
    uint32_t port = 0;
    bool keep_apart = false;
    static InputRef by_id(NodeId id, uint32_t port = 0, bool keep_apart = false) {
        InputRef r; r.producer = id; r.port = port; r.keep_apart = keep_apart; return r;
    }
    static InputRef by_name(StringView name, uint32_t port = 0, bool keep_apart = false) {
        InputRef r; r.producer_name = name; r.port = port; r.keep_apart = keep_apart; return r;
    }
};

// An input edge after finalize().
struct Edge {
    NodeId producer;
    uint16_t port;
    uint8_t keep_apart;
    uint8_t reserved;
};

struct NodeSpec {
    StringView name;
    StringView op;
    StringView affinity;           // empty: none yet (see assign_affinities)
    Span<const InputRef> inputs;
    uint32_t num_outputs = 1;
};

struct Node {
    StringView name;
    StringView op;
    DeviceId affinity = kNoDevice;
    uint16_t num_outputs = 1;
    uint32_t num_inputs = 0;
    Edge* inputs = nullptr;                  // num_inputs entries
    StringView* input_names = nullptr;       // only for inputs given by name, until finalize
    TensorDesc* outputs = nullptr;           // num_outputs entries
    const Attribute* attributes = nullptr;   // linked list, in insertion order
};

// >>graph
// A directed acyclic graph of nodes in an arena. Build with add_node(), then finalize().
class Graph {
public:
    explicit Graph(Arena* arena);
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    Status add_node(const NodeSpec& spec, NodeId* id = nullptr);
    Status add_attribute(NodeId node, const Attribute& attribute);  // copies name, lists, strings
    // Appends the attributes of `list` without copying what they hold: their names, strings,
    // lists and tensors are read in place, so they must outlive this graph and not change.
    Status share_attributes(NodeId node, const Attribute* list);
    Status set_output_desc(NodeId node, uint32_t port, const TensorDesc& desc);
    Status set_affinity(NodeId node, StringView device);            // empty clears it
    // Makes this empty graph a finalized copy of finalized `other` that reads other's names,
    // edges, attribute contents and successor, predecessor, order and name tables in place
    // (other must outlive it unchanged): only the nodes, their output descs (copied) and
    // their attribute links are its own, and it has no affinities. A plan at new shapes
    // copies its model this way. InvalidArgument: this graph has nodes or other is not finalized.
    Status copy_shared(const Graph& other);

    // Resolves names, checks ports, builds successor/predecessor arrays and a topological
    // order. Errors: DuplicateName, DanglingInput, PortOutOfRange, Cycle, OutOfMemory.
    Status finalize();
    bool finalized() const { return finalized_; }

    uint32_t node_count() const { return node_count_; }
    const Node& node(NodeId id) const {
        TESSEL_ASSERT(id < node_count_);
        return blocks_[id >> kBlockShift][id & ((1u << kBlockShift) - 1)];
    }
    NodeId find(StringView name) const;                    // kNoNode if absent (after finalize)
    const Attribute* find_attribute(NodeId node, StringView name) const;

    // Valid after finalize(). Inputs of a node are its Edge array; successors are unique
    // consumer ids in ascending order (a consumer reading twice is listed once).
    Span<const NodeId> successors(NodeId id) const;
    Span<const NodeId> predecessors(NodeId id) const;      // unique producers, ascending
    // The id order when every input comes from a smaller id (ONNX files, most text graphs),
    // else Kahn's order, first in first out from the sources in id order.
    Span<const NodeId> topological_order() const;
    uint32_t edge_count() const { return edge_count_; }
    bool has_keep_apart() const { return keep_apart_count_ != 0; }  // any input edge marked keep-apart

    // Devices named by affinities, in order of first appearance.
    uint32_t device_count() const { return device_count_; }
    StringView device_name(DeviceId id) const;
    DeviceId find_device(StringView name) const;           // kNoDevice if absent
    Status intern_device(StringView name, DeviceId* id);

    Arena* arena() const { return arena_; }
    const char* last_error() const { return error_; }
    Status fail(Status status, const char* format, ...) const
        TESSEL_PRINTF_FORMAT(3, 4);

private:
    Node* node_mutable(NodeId id);
    void append_attributes(NodeId id, const Attribute* list);   // after the node's last attribute
    Status grow_blocks();

    static constexpr uint32_t kBlockShift = 6;  // blocks of 64 nodes: small graphs fit small buffers
    Arena* arena_;
    Node** blocks_ = nullptr;
    uint32_t block_capacity_ = 0;
    uint32_t node_count_ = 0;
    uint32_t edge_count_ = 0;
    uint32_t keep_apart_count_ = 0;
    bool finalized_ = false;
    bool has_named_inputs_ = false;
    // after finalize
    uint32_t* succ_offsets_ = nullptr;
    NodeId* succ_ = nullptr;
    uint32_t* pred_offsets_ = nullptr;
    NodeId* pred_ = nullptr;
    NodeId* topo_ = nullptr;
    NodeId* name_table_ = nullptr;   // open addressing, kNoNode = empty
    uint32_t name_table_mask_ = 0;
    static constexpr uint32_t kMaxDevices = 64;
    StringView devices_[kMaxDevices];
    static constexpr uint32_t kOpTableSize = 256;  // interned op names, so nodes share them
    StringView ops_[kOpTableSize];
    uint32_t device_count_ = 0;
    mutable char error_[kErrorMessageBytes] = {};
};

// >>partition types
enum class PartitionAlgorithm : uint8_t { Rollback, Levels, Waves };
const char* algorithm_name(PartitionAlgorithm algorithm);
Status parse_algorithm(StringView name, PartitionAlgorithm* algorithm);

// Why a node sits where it does. `other` names the node the reason refers to.
enum class PlacementReason : uint8_t {
    Root,             // it started its subgraph
    Grown,            // it joined a neighbour's subgraph of the same device
    CycleThrough,     // it could not join a neighbour's subgraph: a path through `other` would loop back
    KeepApart,        // it could not join a neighbour's subgraph: keep-apart constraint with `other`
    DeviceBoundary,   // it starts a new subgraph after a device change at `other` (levels, waves)
    Merged,           // the min-size post-pass moved it into `other`'s subgraph
};
const char* reason_name(PlacementReason reason);
struct Placement {
    PlacementReason reason = PlacementReason::Root;
    NodeId other = kNoNode;
};

struct Subgraph {
    DeviceId device = kNoDevice;
    Span<const NodeId> nodes;  // ascending node id
};

// A tensor that crosses subgraphs: the runtime transfers it from `from` to `to`.
struct BoundaryTensor {
    NodeId producer;
    uint32_t port;
    NodeId consumer;
    uint32_t from_subgraph;
    uint32_t to_subgraph;
};

struct Partition {
    PartitionAlgorithm algorithm = PartitionAlgorithm::Rollback;
    Span<const Subgraph> subgraphs;          // commit order
    Span<const uint32_t> subgraph_of;        // per node
    Span<const Placement> placements;        // per node
    Span<const BoundaryTensor> boundaries;   // unique (producer, port, to_subgraph)
    Span<const uint32_t> execution_order;    // subgraph indices in an order that respects every boundary
    uint32_t cross_edges = 0;                // input edges whose ends lie in different subgraphs
    uint32_t helper_growths = 0;             // rollback, threads > 1: candidates its helper thread grew
    uint32_t bitset_growths = 0;             // rollback: growths checked with element bitsets (both threads)
    uint32_t bitset_fallbacks = 0;           // of those, growths that left the bitsets' windows and went on with floods
    const char* last_error() const { return error; }
    char error[kErrorMessageBytes] = {};
};

// When rollback checks merges with element bitsets (per node, the nodes of other devices it
// reaches and that reach it) instead of floods. The partition is the same in every mode.
enum class BitsetCheck : uint8_t {
    AfterThreshold,  // once a growth of the device merged PartitionTuning::bitset_threshold nodes
    Always,          // from the device's first growth
    Never,           // floods only
};

// Test oracles and tuning knobs of rollback: for tests and benches; defaults are right for users.
struct PartitionTuning {
    // The seed's checker: the full V^2 bitset closure (the test oracle); refused with
    // LimitExceeded above max_closure_bytes.
    bool naive_closure = false;
    size_t max_closure_bytes = 64u << 20;
    // Element bitsets need the scalable checker, no trace and no keep-apart edges; they cost
    // 160 bytes per node more in the arena. The threshold is tuned with bench/partition.
    BitsetCheck bitset_check = BitsetCheck::AfterThreshold;
    uint32_t bitset_threshold = 256;
};

struct PartitionOptions {
    PartitionAlgorithm algorithm = PartitionAlgorithm::Rollback;
    // Device priority order, by name; empty: order of first appearance in the graph. Every
    // node's affinity must be listed.
    Span<const StringView> devices;
    // Post-pass: subgraphs with fewer nodes move into a neighbouring subgraph of a device
    // that the node's `supported` mask allows (bit d for device id d), when the partition
    // stays valid. 0 disables it.
    uint32_t min_subgraph_size = 0;
    const uint64_t* supported = nullptr;  // per node; nullptr: only the node's own device
    // Rollback only: trace each step in the seed's words.
    WriteFn trace = nullptr;
    void* trace_user = nullptr;
    // Rollback only, scalable checker, no trace: 2 or more starts one helper thread that
    // grows the candidates most likely needed next while the caller's thread grows the
    // current one (it spins while it waits, so give it a core of its own). The partition is
    // the same as with 1, the default (no thread); the arena holds the helper's growth state.
    uint32_t threads = 1;
    PartitionTuning tuning;
};

// Splits a finalized graph into per-device subgraphs whose graph is acyclic, keeping every
// keep-apart edge across subgraphs. Result memory comes from `arena`; scratch memory too,
// and is reclaimed only with the arena (use a scratch arena and copy if that matters).
// Errors: NotFinalized, InvalidArgument (node without an affinity, device not in the
// order), LimitExceeded (naive closure too large), OutOfMemory.
Status partition(const Graph& graph, const PartitionOptions& options, Arena* arena, Partition* result);

// Verifies any partition: every node placed once, one device per subgraph and equal to its
// nodes' affinity (unless moved by the post-pass with a supported mask), keep-apart edges
// across subgraphs, graph of subgraphs acyclic, boundaries complete. InvalidPartition with a
// message in result->error otherwise. Scratch comes from TESSEL_MALLOC.
Status check_partition(const Graph& graph, Partition* partition, const uint64_t* supported = nullptr);

// Sets each node without an affinity to the first device of `devices` (priority order) that
// supports it: bit d of supported[node] for the graph's device id d. The names are interned
// first, in list order, so on a graph without affinities bit i is devices[i]. User-set
// affinities win. InvalidArgument (message in the graph) if no listed device supports a node.
Status assign_affinities(Graph* graph, Span<const StringView> devices, const uint64_t* supported);

// Prints one line per node: `<name> <device> subgraph=<k> <reason> [<other>]`.
void write_placements(const Graph& graph, const Partition& partition, WriteFn write, void* user);

// >>text format
// One node a line: `<name> <affinity> [inputs...]`. An input is `name`, `name:port`, and a
// leading `!` marks the keep-apart constraint. Affinity `-` means none. `#` starts a comment.
// Optional `op=TYPE` after the affinity sets the op type (default "Node"), and `outputs=N`
// the number of outputs. The graph is finalized on success.
Status read_text(StringView text, Graph* graph);
// Writes nodes in id order in the same format; read_text(write_text(g)) rebuilds g.
// InvalidArgument (message in graph's last_error) if a name cannot be written as a token:
// empty, with white space, '#' or '=', or starting with '!'.
Status write_text(const Graph& graph, WriteFn write, void* user);

// DOT output; nodes are coloured by affinity, and grouped in clusters by subgraph when a
// partition is given.
void write_dot(const Graph& graph, const Partition* partition, WriteFn write, void* user);

}  // namespace tessel
#endif  // TESSEL_HETERO_H

// ==========================================================================================
// Implementation
// ==========================================================================================
#if defined(TESSEL_IMPLEMENTATION) && !defined(TESSEL_HETERO_IMPLEMENTED)
#define TESSEL_HETERO_IMPLEMENTED

#include <algorithm>  // std::sort, std::binary_search: no allocation
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>
#if defined(TESSEL_MALLOC_IS_MALLOC) && defined(__linux__)
#include <sys/mman.h>   // madvise: huge pages for large arenas (Arena::HugePages)
#endif

// >>implementation helpers
namespace tessel {
namespace detail {

void assert_failed(const char* expression, const char* file, int line) {
    std::fprintf(stderr, "tessel: internal error: %s (%s:%d)\n", expression, file, line);
    std::abort();
}

inline size_t align_up(size_t value, size_t align) { return (value + align - 1) & ~(align - 1); }

// FNV-1a; `h` continues an earlier hash (snippets.h hashes a program field by field).
constexpr uint64_t kHashSeed = 1469598103934665603ull;  // FNV-1a's offset basis
inline uint64_t hash_bytes(const void* data, size_t size, uint64_t h = kHashSeed) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// Appends formatted text to a fixed buffer; the caller's Status says whether it failed.
inline void format_message(char* buffer, size_t size, const char* format, va_list args) {
    std::vsnprintf(buffer, size, format, args);
}

// printf through a WriteFn.
TESSEL_PRINTF_FORMAT(3, 4)
inline void write_format(WriteFn write, void* user, const char* format, ...) {
    char buffer[512];
    va_list args;
    va_start(args, format);
    int n = std::vsnprintf(buffer, sizeof buffer, format, args);
    va_end(args);
    if (n > 0) write(user, buffer, (size_t)n < sizeof buffer ? (size_t)n : sizeof buffer - 1);
}
inline void write_view(WriteFn write, void* user, StringView s) { write(user, s.data, s.size); }

}  // namespace detail

// >>status implementation
const char* status_name(Status status) {
    switch (status) {
        case Status::Ok: return "Ok";
        case Status::InvalidArgument: return "InvalidArgument";
        case Status::OutOfMemory: return "OutOfMemory";
        case Status::ParseError: return "ParseError";
        case Status::DuplicateName: return "DuplicateName";
        case Status::DanglingInput: return "DanglingInput";
        case Status::PortOutOfRange: return "PortOutOfRange";
        case Status::Cycle: return "Cycle";
        case Status::NotFinalized: return "NotFinalized";
        case Status::InvalidPartition: return "InvalidPartition";
        case Status::LimitExceeded: return "LimitExceeded";
        case Status::NotFound: return "NotFound";
        case Status::Unsupported: return "Unsupported";
        case Status::IoError: return "IoError";
    }
    return "UnknownStatus";
}

const char* element_type_name(ElementType type) {
    switch (type) {
        case ElementType::Undefined: return "undefined";
        case ElementType::Float32: return "f32";
        case ElementType::Float16: return "f16";
        case ElementType::Int64: return "i64";
        case ElementType::Int32: return "i32";
        case ElementType::Int8: return "i8";
        case ElementType::UInt8: return "u8";
        case ElementType::Bool: return "bool";
        case ElementType::Float64: return "f64";
        case ElementType::Int16: return "i16";
        case ElementType::UInt16: return "u16";
        case ElementType::UInt32: return "u32";
        case ElementType::UInt64: return "u64";
        case ElementType::BFloat16: return "bf16";
    }
    return "unknown";
}

size_t element_size(ElementType type) {
    switch (type) {
        case ElementType::Float32: case ElementType::Int32: case ElementType::UInt32: return 4;
        case ElementType::Float16: case ElementType::BFloat16: case ElementType::Int16: case ElementType::UInt16: return 2;
        case ElementType::Int64: case ElementType::UInt64: case ElementType::Float64: return 8;
        case ElementType::Int8: case ElementType::UInt8: case ElementType::Bool: return 1;
        case ElementType::Undefined: return 0;
    }
    return 0;
}

// >>arena implementation
struct Arena::Block {
    Block* previous;
    size_t size;  // usable bytes after the header
    unsigned char* data() { return reinterpret_cast<unsigned char*>(this) + sizeof(Block); }
};

Arena::Arena() {}
Arena::Arena(size_t block_bytes) : block_bytes_(block_bytes < 256 ? 256 : block_bytes) {}
#if defined(TESSEL_MALLOC_IS_MALLOC) && defined(__linux__) && defined(MADV_HUGEPAGE)
Arena::Arena(HugePages) : huge_pages_(true) {}
#else
Arena::Arena(HugePages) {}
#endif

namespace detail {
void advise_huge_pages(void* memory, size_t bytes) {
#if defined(TESSEL_MALLOC_IS_MALLOC) && defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr uintptr_t kHuge = uintptr_t(2) << 20;
    const uintptr_t begin = align_up(reinterpret_cast<uintptr_t>(memory), kHuge);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(memory) + bytes) & ~(kHuge - 1);
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
    (void)memory, (void)bytes;
#endif
}
}  // namespace detail
Arena::Arena(void* buffer, size_t bytes)
    : base_(static_cast<unsigned char*>(buffer)), capacity_(buffer ? bytes : 0), fixed_(static_cast<unsigned char*>(buffer)),
      fixed_size_(buffer ? bytes : 0), reserved_(fixed_size_) {}

Arena::~Arena() { reset(); }

void* Arena::allocate_block(size_t bytes, size_t align) {
    if (align == 0 || (align & (align - 1)) != 0) return nullptr;
    if (bytes == 0) bytes = 1;  // distinct, valid pointers for empty arrays
    if (fixed_) {
        uintptr_t base = reinterpret_cast<uintptr_t>(fixed_);
        uintptr_t start = detail::align_up(base + offset_, align);
        if (start < base + offset_) return nullptr;
        size_t begin = start - base;
        if (begin > fixed_size_ || bytes > fixed_size_ - begin) return nullptr;
        used_ += begin + bytes - offset_;
        offset_ = begin + bytes;
        return fixed_ + begin;
    }
    if (head_) {
        uintptr_t base = reinterpret_cast<uintptr_t>(head_->data());
        uintptr_t start = detail::align_up(base + offset_, align);
        size_t begin = start - base;
        if (begin <= head_->size && bytes <= head_->size - begin) {
            used_ += begin + bytes - offset_;
            offset_ = begin + bytes;
            return head_->data() + begin;
        }
    }
    // New block: large requests get a block of their own size, so waste stays bounded.
    size_t header = detail::align_up(sizeof(Block), alignof(std::max_align_t));
    if (bytes > SIZE_MAX - header - align) return nullptr;
    size_t need = bytes + align;
    const bool pooled_huge = huge_pages_ && reserved_ >= (size_t(1) << 20);
    const size_t block_bytes = pooled_huge ? size_t(8) << 20 : block_bytes_;
    size_t size = need > block_bytes ? need : block_bytes;
    void* memory = TESSEL_MALLOC(header + size);
    if (!memory) return nullptr;
    // A block of one request of 2 MiB or more (a folded weight) is filled by it: huge pages too.
    if (pooled_huge || need >= (size_t(2) << 20)) detail::advise_huge_pages(memory, header + size);
    Block* block = static_cast<Block*>(memory);
    block->previous = head_;
    block->size = size + header - sizeof(Block);
    head_ = block;
    base_ = block->data();
    capacity_ = block->size;
    reserved_ += header + size;
    offset_ = 0;
    return allocate_block(bytes, align);
}

StringView Arena::copy_string(StringView s) {
    char* copy = static_cast<char*>(allocate(s.size + 1, 1));
    if (!copy) return StringView();
    if (s.size) std::memcpy(copy, s.data, s.size);
    copy[s.size] = 0;
    return StringView(copy, s.size);
}

size_t Arena::used() const { return used_; }
size_t Arena::reserved() const { return reserved_; }

void Arena::reset() {
    while (head_) {
        Block* previous = head_->previous;
        TESSEL_FREE(head_);
        head_ = previous;
    }
    base_ = fixed_;
    capacity_ = fixed_size_;
    offset_ = 0;
    used_ = 0;
    reserved_ = fixed_size_;
}

// >>graph implementation
Graph::Graph(Arena* arena) : arena_(arena) { TESSEL_ASSERT(arena != nullptr); }

Status Graph::fail(Status status, const char* format, ...) const {
    va_list args;
    va_start(args, format);
    detail::format_message(error_, sizeof error_, format, args);
    va_end(args);
    return status;
}

Node* Graph::node_mutable(NodeId id) {
    TESSEL_ASSERT(id < node_count_);
    return &blocks_[id >> kBlockShift][id & ((1u << kBlockShift) - 1)];
}

Status Graph::grow_blocks() {
    uint32_t capacity = block_capacity_ ? block_capacity_ * 2 : 16;
    Node** blocks = arena_->allocate_array<Node*>(capacity);
    if (!blocks) return fail(Status::OutOfMemory, "out of memory growing the node table");
    for (uint32_t i = 0; i < block_capacity_; ++i) blocks[i] = blocks_[i];
    for (uint32_t i = block_capacity_; i < capacity; ++i) blocks[i] = nullptr;
    blocks_ = blocks;
    block_capacity_ = capacity;
    return Status::Ok;
}

Status Graph::intern_device(StringView name, DeviceId* id) {
    *id = kNoDevice;
    if (name.empty()) return Status::Ok;
    DeviceId found = find_device(name);
    if (found != kNoDevice) { *id = found; return Status::Ok; }
    if (device_count_ == kMaxDevices)
        return fail(Status::LimitExceeded, "more than %u devices named by affinities", kMaxDevices);
    StringView copy = arena_->copy_string(name);
    if (copy.data == nullptr) return fail(Status::OutOfMemory, "out of memory copying a device name");
    devices_[device_count_] = copy;
    *id = (DeviceId)device_count_++;
    return Status::Ok;
}

DeviceId Graph::find_device(StringView name) const {
    for (uint32_t i = 0; i < device_count_; ++i)
        if (devices_[i] == name) return (DeviceId)i;
    return kNoDevice;
}

StringView Graph::device_name(DeviceId id) const {
    return id < device_count_ ? devices_[id] : StringView();
}

Status Graph::add_node(const NodeSpec& spec, NodeId* id) {
    if (id) *id = kNoNode;
    if (spec.name.empty()) return fail(Status::InvalidArgument, "node #%u has an empty name", node_count_);
    if (spec.num_outputs > UINT16_MAX)
        return fail(Status::LimitExceeded, "node '%.*s' has %u outputs (at most 65535)",
                    (int)spec.name.size, spec.name.data, spec.num_outputs);
    if (node_count_ == kNoNode - 1) return fail(Status::LimitExceeded, "too many nodes");
    if (spec.inputs.size > UINT32_MAX) return fail(Status::LimitExceeded, "too many inputs");
    for (size_t i = 0; i < spec.inputs.size; ++i)
        if (spec.inputs[i].port > UINT16_MAX)
            return fail(Status::PortOutOfRange, "node '%.*s' input %zu reads port %u (at most 65535)",
                        (int)spec.name.size, spec.name.data, i, spec.inputs[i].port);
    uint32_t block = node_count_ >> kBlockShift;
    if (block >= block_capacity_) {
        TESSEL_TRY(grow_blocks());
    }
    if (!blocks_[block]) {
        blocks_[block] = arena_->allocate_array<Node>(1u << kBlockShift);
        if (!blocks_[block]) return fail(Status::OutOfMemory, "out of memory adding a node");
    }
    Node node;
    node.name = arena_->copy_string(spec.name);
    if (!node.name.data) return fail(Status::OutOfMemory, "out of memory adding a node");
    StringView op = spec.op.empty() ? StringView("Node") : spec.op;
    uint32_t slot = (uint32_t)detail::hash_bytes(op.data, op.size) & (kOpTableSize - 1);
    for (uint32_t probe = 0; probe < 8; ++probe, slot = (slot + 1) & (kOpTableSize - 1)) {
        if (ops_[slot].data == nullptr) {
            ops_[slot] = arena_->copy_string(op);
            if (!ops_[slot].data) return fail(Status::OutOfMemory, "out of memory adding a node");
        }
        if (ops_[slot] == op) { node.op = ops_[slot]; break; }
    }
    if (!node.op.data) {  // table crowded: a private copy is still correct
        node.op = arena_->copy_string(op);
        if (!node.op.data) return fail(Status::OutOfMemory, "out of memory adding a node");
    }
    TESSEL_TRY(intern_device(spec.affinity, &node.affinity));
    node.num_outputs = (uint16_t)spec.num_outputs;
    node.num_inputs = (uint32_t)spec.inputs.size;
    node.inputs = arena_->allocate_array<Edge>(spec.inputs.size);
    if (!node.inputs) return fail(Status::OutOfMemory, "out of memory adding a node");
    bool any_named = false;
    for (size_t i = 0; i < spec.inputs.size; ++i) {
        const InputRef& in = spec.inputs[i];
        node.inputs[i] = Edge{in.producer, (uint16_t)in.port, (uint8_t)(in.keep_apart ? 1 : 0), 0};
        keep_apart_count_ += in.keep_apart ? 1 : 0;
        if (in.producer == kNoNode) any_named = true;
    }
    if (any_named) {
        node.input_names = arena_->allocate_array<StringView>(spec.inputs.size);
        if (!node.input_names) return fail(Status::OutOfMemory, "out of memory adding a node");
        for (size_t i = 0; i < spec.inputs.size; ++i) {
            node.input_names[i] = StringView();
            if (spec.inputs[i].producer != kNoNode) continue;
            node.input_names[i] = arena_->copy_string(spec.inputs[i].producer_name);
            if (!node.input_names[i].data) return fail(Status::OutOfMemory, "out of memory adding a node");
        }
        has_named_inputs_ = true;
    }
    blocks_[block][node_count_ & ((1u << kBlockShift) - 1)] = node;
    if (id) *id = node_count_;
    ++node_count_;
    edge_count_ += (uint32_t)spec.inputs.size;
    finalized_ = false;
    return Status::Ok;
}

Status Graph::add_attribute(NodeId id, const Attribute& attribute) {
    if (id >= node_count_) return fail(Status::InvalidArgument, "add_attribute: no node #%u", id);
    Attribute* copy = arena_->allocate_array<Attribute>(1);
    if (!copy) return fail(Status::OutOfMemory, "out of memory adding an attribute");
    *copy = attribute;
    copy->next = nullptr;
    copy->name = arena_->copy_string(attribute.name);
    copy->s = arena_->copy_string(attribute.s);
    int64_t* ints = arena_->allocate_array<int64_t>(attribute.ints.size);
    float* floats = arena_->allocate_array<float>(attribute.floats.size);
    if (!copy->name.data || !copy->s.data || !ints || !floats)
        return fail(Status::OutOfMemory, "out of memory adding an attribute");
    for (size_t i = 0; i < attribute.ints.size; ++i) ints[i] = attribute.ints[i];
    for (size_t i = 0; i < attribute.floats.size; ++i) floats[i] = attribute.floats[i];
    copy->ints = Span<const int64_t>(ints, attribute.ints.size);
    copy->floats = Span<const float>(floats, attribute.floats.size);
    append_attributes(id, copy);
    return Status::Ok;
}

Status Graph::share_attributes(NodeId id, const Attribute* list) {
    if (id >= node_count_) return fail(Status::InvalidArgument, "share_attributes: no node #%u", id);
    uint32_t count = 0;
    for (const Attribute* a = list; a; a = a->next) ++count;
    if (!count) return Status::Ok;
    Attribute* copies = arena_->allocate_array<Attribute>(count);
    if (!copies) return fail(Status::OutOfMemory, "out of memory adding attributes");
    uint32_t k = 0;
    for (const Attribute* a = list; a; a = a->next, ++k) {
        copies[k] = *a;
        copies[k].next = k + 1 < count ? &copies[k + 1] : nullptr;
    }
    append_attributes(id, copies);
    return Status::Ok;
}

Status Graph::copy_shared(const Graph& other) {
    if (node_count_ || !other.finalized_) return fail(Status::InvalidArgument, "copy_shared: needs an empty graph and a finalized one");
    const uint32_t n = other.node_count_, blocks = (n + (1u << kBlockShift) - 1) >> kBlockShift;
    size_t descs = 0, attributes = 0;
    for (NodeId id = 0; id < n; ++id) {
        const Node& node = other.node(id);
        if (node.outputs) descs += node.num_outputs;
        for (const Attribute* a = node.attributes; a; a = a->next) ++attributes;
    }
    Node** table = arena_->allocate_array<Node*>(blocks + 1);
    Node* nodes = arena_->allocate_array<Node>(((size_t)blocks << kBlockShift) + 1);   // whole blocks: add_node may append
    TensorDesc* desc = arena_->allocate_array<TensorDesc>(descs + 1);
    Attribute* links = arena_->allocate_array<Attribute>(attributes + 1);
    if (!table || !nodes || !desc || !links) return fail(Status::OutOfMemory, "out of memory copying a graph");
    for (uint32_t b = 0; b < blocks; ++b) table[b] = nodes + ((size_t)b << kBlockShift);
    for (NodeId id = 0; id < n; ++id) {   // the one array's blocks of 64 are node()'s blocks
        const Node& from = other.node(id);
        Node& to = nodes[id];
        to = from;
        to.affinity = kNoDevice;
        to.input_names = nullptr;
        if (from.outputs) {
            for (uint32_t p = 0; p < from.num_outputs; ++p) desc[p] = from.outputs[p];
            to.outputs = desc;
            desc += from.num_outputs;
        }
        Attribute* first = links;
        for (const Attribute* a = from.attributes; a; a = a->next, ++links) {
            *links = *a;
            links->next = a->next ? links + 1 : nullptr;
        }
        to.attributes = from.attributes ? first : nullptr;
    }
    blocks_ = table;
    block_capacity_ = blocks;
    node_count_ = n;
    edge_count_ = other.edge_count_;
    keep_apart_count_ = other.keep_apart_count_;
    has_named_inputs_ = false;
    succ_offsets_ = other.succ_offsets_;
    succ_ = other.succ_;
    pred_offsets_ = other.pred_offsets_;
    pred_ = other.pred_;
    topo_ = other.topo_;
    name_table_ = other.name_table_;
    name_table_mask_ = other.name_table_mask_;
    for (uint32_t k = 0; k < kOpTableSize; ++k) ops_[k] = other.ops_[k];
    device_count_ = 0;
    finalized_ = true;
    return Status::Ok;
}

void Graph::append_attributes(NodeId id, const Attribute* list) {
    const Attribute** tail = &node_mutable(id)->attributes;
    while (*tail) tail = const_cast<const Attribute**>(&(*tail)->next);
    *tail = list;
}

const Attribute* Graph::find_attribute(NodeId id, StringView name) const {
    if (id >= node_count_) return nullptr;
    for (const Attribute* a = node(id).attributes; a; a = a->next)
        if (a->name == name) return a;
    return nullptr;
}

Status Graph::set_output_desc(NodeId id, uint32_t port, const TensorDesc& desc) {
    if (id >= node_count_) return fail(Status::InvalidArgument, "set_output_desc: no node #%u", id);
    Node* node = node_mutable(id);
    if (port >= node->num_outputs)
        return fail(Status::PortOutOfRange, "node '%.*s' has no output port %u",
                    (int)node->name.size, node->name.data, port);
    if (desc.rank > kMaxRank)
        return fail(Status::LimitExceeded, "node '%.*s' output %u has rank %u (at most %d)",
                    (int)node->name.size, node->name.data, port, desc.rank, kMaxRank);
    if (!node->outputs) {  // allocated on first use: most graphs never describe most outputs
        node->outputs = arena_->allocate_array<TensorDesc>(node->num_outputs);
        if (!node->outputs) return fail(Status::OutOfMemory, "out of memory describing an output");
        for (uint32_t i = 0; i < node->num_outputs; ++i) node->outputs[i] = TensorDesc();
    }
    node->outputs[port] = desc;
    return Status::Ok;
}

Status Graph::set_affinity(NodeId id, StringView device) {
    if (id >= node_count_) return fail(Status::InvalidArgument, "set_affinity: no node #%u", id);
    DeviceId device_id;
    TESSEL_TRY(intern_device(device, &device_id));
    node_mutable(id)->affinity = device_id;
    return Status::Ok;
}

NodeId Graph::find(StringView name) const {
    if (!name_table_) return kNoNode;
    uint32_t slot = (uint32_t)detail::hash_bytes(name.data, name.size) & name_table_mask_;
    while (name_table_[slot] != kNoNode) {
        if (node(name_table_[slot]).name == name) return name_table_[slot];
        slot = (slot + 1) & name_table_mask_;
    }
    return kNoNode;
}

Span<const NodeId> Graph::successors(NodeId id) const {
    TESSEL_ASSERT(finalized_ && id < node_count_);
    return Span<const NodeId>(succ_ + succ_offsets_[id], succ_offsets_[id + 1] - succ_offsets_[id]);
}

Span<const NodeId> Graph::predecessors(NodeId id) const {
    TESSEL_ASSERT(finalized_ && id < node_count_);
    return Span<const NodeId>(pred_ + pred_offsets_[id], pred_offsets_[id + 1] - pred_offsets_[id]);
}

Span<const NodeId> Graph::topological_order() const {
    TESSEL_ASSERT(finalized_);
    return Span<const NodeId>(topo_, node_count_);
}

Status Graph::finalize() {
    const uint32_t n = node_count_;
    finalized_ = false;
    // 1. Names: a hash table at most half full, which also finds duplicates.
    uint32_t table_size = 16;
    while (table_size < 2ull * n) table_size *= 2;
    name_table_ = arena_->allocate_array<NodeId>(table_size);
    if (!name_table_) return fail(Status::OutOfMemory, "out of memory finalizing the graph");
    name_table_mask_ = table_size - 1;
    for (uint32_t i = 0; i < table_size; ++i) name_table_[i] = kNoNode;
    for (NodeId id = 0; id < n; ++id) {
        StringView name = node(id).name;
        uint32_t slot = (uint32_t)detail::hash_bytes(name.data, name.size) & name_table_mask_;
        while (name_table_[slot] != kNoNode) {
            if (node(name_table_[slot]).name == name) {
                NodeId first = name_table_[slot];
                name_table_ = nullptr;
                return fail(Status::DuplicateName, "node name '%.*s' is used twice (nodes #%u and #%u)",
                            (int)name.size, name.data, first, id);
            }
            slot = (slot + 1) & name_table_mask_;
        }
        name_table_[slot] = id;
    }
    // 2. Inputs: resolve names, check ids and ports.
    for (NodeId id = 0; id < n; ++id) {
        Node* node = node_mutable(id);
        for (uint32_t i = 0; i < node->num_inputs; ++i) {
            Edge& edge = node->inputs[i];
            if (node->input_names && node->input_names[i].data) {
                NodeId producer = find(node->input_names[i]);
                if (producer == kNoNode)
                    return fail(Status::DanglingInput, "node '%.*s' input %u names '%.*s', which is not a node",
                                (int)node->name.size, node->name.data, i,
                                (int)node->input_names[i].size, node->input_names[i].data);
                edge.producer = producer;
            }
            if (edge.producer >= n)
                return fail(Status::DanglingInput, "node '%.*s' input %u refers to node #%u, but the graph has %u nodes",
                            (int)node->name.size, node->name.data, i, edge.producer, n);
            if (edge.producer == id)
                return fail(Status::Cycle, "cycle: node '%.*s' reads its own output",
                            (int)node->name.size, node->name.data);
            const Node& producer = this->node(edge.producer);
            if (edge.port >= producer.num_outputs)
                return fail(Status::PortOutOfRange, "node '%.*s' input %u reads port %u of '%.*s', which has %u output(s)",
                            (int)node->name.size, node->name.data, i, edge.port,
                            (int)producer.name.size, producer.name.data, producer.num_outputs);
        }
        node->input_names = nullptr;  // resolved for good
    }
    has_named_inputs_ = false;
    // 3. Predecessors (unique, ascending) and successors, as compressed rows.
    pred_offsets_ = arena_->allocate_array<uint32_t>((size_t)n + 1);
    succ_offsets_ = arena_->allocate_array<uint32_t>((size_t)n + 1);
    pred_ = arena_->allocate_array<NodeId>(edge_count_);
    succ_ = arena_->allocate_array<NodeId>(edge_count_);
    topo_ = arena_->allocate_array<NodeId>(n);
    uint32_t* pending = arena_->allocate_array<uint32_t>(n);  // in-degree left, for Kahn
    if (!pred_offsets_ || !succ_offsets_ || !pred_ || !succ_ || !topo_ || !pending)
        return fail(Status::OutOfMemory, "out of memory finalizing the graph");
    uint32_t count = 0;
    for (NodeId id = 0; id < n; ++id) {
        pred_offsets_[id] = count;
        const Node& node = this->node(id);
        uint32_t begin = count;
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            NodeId p = node.inputs[i].producer;
            uint32_t j = count;  // insertion sort: a node has few inputs
            bool duplicate = false;
            for (uint32_t k = begin; k < count; ++k) if (pred_[k] == p) { duplicate = true; break; }
            if (duplicate) continue;
            while (j > begin && pred_[j - 1] > p) { pred_[j] = pred_[j - 1]; --j; }
            pred_[j] = p;
            ++count;
        }
    }
    pred_offsets_[n] = count;
    for (NodeId id = 0; id <= n; ++id) succ_offsets_[id] = 0;
    for (uint32_t k = 0; k < count; ++k) ++succ_offsets_[pred_[k] + 1];
    for (NodeId id = 0; id < n; ++id) succ_offsets_[id + 1] += succ_offsets_[id];
    for (NodeId id = 0; id < n; ++id) pending[id] = succ_offsets_[id];  // fill cursor
    for (NodeId id = 0; id < n; ++id)  // consumers visited in ascending order: rows come sorted
        for (uint32_t k = pred_offsets_[id]; k < pred_offsets_[id + 1]; ++k) succ_[pending[pred_[k]]++] = id;
    // 4. Topological order: the id order when every input comes from a smaller id (ONNX
    // files are sorted so, and most text graphs), which keeps later passes walking the node
    // table straight through; else Kahn's, FIFO seeded in id order (deterministic).
    bool ids_sorted = true;
    for (NodeId id = 0; id < n && ids_sorted; ++id)  // rows are ascending: the last is the largest
        ids_sorted = pred_offsets_[id + 1] == pred_offsets_[id] || pred_[pred_offsets_[id + 1] - 1] < id;
    uint32_t head = 0, tail = 0;
    if (ids_sorted) {
        for (NodeId id = 0; id < n; ++id) topo_[id] = id;
        head = tail = n;
    } else {
        for (NodeId id = 0; id < n; ++id) {
            pending[id] = pred_offsets_[id + 1] - pred_offsets_[id];
            if (pending[id] == 0) topo_[tail++] = id;
        }
    }
    while (head < tail) {
        NodeId id = topo_[head++];
        for (uint32_t k = succ_offsets_[id]; k < succ_offsets_[id + 1]; ++k)
            if (--pending[succ_[k]] == 0) topo_[tail++] = succ_[k];
    }
    if (tail < n) {
        // Every node left over has a left-over predecessor: walk them backwards until one
        // repeats, which closes a cycle, and name its nodes.
        NodeId start = kNoNode;
        for (NodeId id = 0; id < n && start == kNoNode; ++id) if (pending[id] != 0) start = id;
        const uint32_t kOnWalk = 0x80000000u;
        NodeId at = start;
        while (!(pending[at] & kOnWalk)) {
            pending[at] |= kOnWalk;
            NodeId next = kNoNode;
            for (uint32_t k = pred_offsets_[at]; k < pred_offsets_[at + 1]; ++k)
                if (pending[pred_[k]] != 0) { next = pred_[k]; break; }
            TESSEL_ASSERT(next != kNoNode);
            topo_[at] = next;  // topo_ is scratch now: remember the walk
            at = next;
        }
        char names[200];
        size_t used = 0;
        NodeId cursor = at;
        do {  // the walk went backwards along edges: print it forwards
            const Node& node = this->node(cursor);
            int w = std::snprintf(names + used, sizeof names - used, "%s'%.*s'", used ? " <- " : "",
                                  (int)node.name.size, node.name.data);
            if (w < 0 || (size_t)w >= sizeof names - used) { used = sizeof names - 1; break; }
            used += (size_t)w;
            cursor = topo_[cursor];
        } while (cursor != at);
        return fail(Status::Cycle, "cycle through nodes %s", names);
    }
    finalized_ = true;
    return Status::Ok;
}

// >>text format implementation
namespace detail {

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// A name can be written as a token when it is not empty, has no white space, '#' or '=',
// and does not start with '!'.
inline bool is_token_name(StringView name) {
    if (name.empty() || name[0] == '!') return false;
    for (char c : name)
        if (is_space(c) || c == '\n' || c == '#' || c == '=' || c == 0) return false;
    return true;
}

inline bool parse_uint(StringView s, uint32_t max, uint32_t* value) {
    if (s.empty() || s.size > 10) return false;
    uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (uint64_t)(c - '0');
    }
    if (v > max) return false;
    *value = (uint32_t)v;
    return true;
}

}  // namespace detail

Status read_text(StringView text, Graph* graph) {
    // Inputs of one line are collected in a small fixed buffer and then in the arena when a
    // line has more; the line's tokens point into `text`, which add_node copies.
    const size_t kInline = 16;
    InputRef inline_inputs[kInline];
    size_t line_number = 0;
    size_t position = 0;
    while (position < text.size) {
        size_t end = position;
        while (end < text.size && text[end] != '\n') ++end;
        ++line_number;
        StringView line(text.data + position, end - position);
        position = end + 1;
        for (size_t i = 0; i < line.size; ++i)
            if (line[i] == '#') { line.size = i; break; }
        // Split into tokens.
        size_t token_count = 0;
        for (size_t i = 0; i < line.size;) {
            while (i < line.size && detail::is_space(line[i])) ++i;
            if (i == line.size) break;
            ++token_count;
            while (i < line.size && !detail::is_space(line[i])) ++i;
        }
        if (token_count == 0) continue;
        if (token_count < 2)
            return graph->fail(Status::ParseError, "line %zu: expected '<name> <affinity> [inputs...]'", line_number);
        InputRef* inputs = inline_inputs;
        if (token_count - 2 > kInline) {
            inputs = graph->arena()->allocate_array<InputRef>(token_count - 2);
            if (!inputs) return graph->fail(Status::OutOfMemory, "line %zu: out of memory", line_number);
        }
        NodeSpec spec;
        size_t input_count = 0;
        size_t index = 0;
        for (size_t i = 0; i < line.size;) {
            while (i < line.size && detail::is_space(line[i])) ++i;
            if (i == line.size) break;
            size_t start = i;
            while (i < line.size && !detail::is_space(line[i])) ++i;
            StringView token(line.data + start, i - start);
            if (index == 0) {
                if (!detail::is_token_name(token))
                    return graph->fail(Status::ParseError, "line %zu: '%.*s' is not a node name", line_number,
                                       (int)token.size, token.data);
                spec.name = token;
            } else if (index == 1) {
                if (!(token == StringView("-"))) spec.affinity = token;
            } else if (token.size > 3 && std::memcmp(token.data, "op=", 3) == 0) {
                spec.op = StringView(token.data + 3, token.size - 3);
            } else if (token.size > 8 && std::memcmp(token.data, "outputs=", 8) == 0) {
                uint32_t outputs;
                if (!detail::parse_uint(StringView(token.data + 8, token.size - 8), UINT16_MAX, &outputs) || outputs == 0)
                    return graph->fail(Status::ParseError, "line %zu: bad output count '%.*s' (1 to 65535)",
                                       line_number, (int)token.size, token.data);
                spec.num_outputs = outputs;
            } else {
                InputRef in;
                if (token[0] == '!') { in.keep_apart = true; token = StringView(token.data + 1, token.size - 1); }
                size_t colon = token.size;
                while (colon > 0 && token[colon - 1] != ':') --colon;
                if (colon > 0) {  // `name:port` when everything after the last ':' is a number
                    uint32_t port;
                    StringView digits(token.data + colon, token.size - colon);
                    bool all_digits = !digits.empty();
                    for (char c : digits) all_digits = all_digits && c >= '0' && c <= '9';
                    if (all_digits) {
                        if (!detail::parse_uint(digits, UINT16_MAX, &port))
                            return graph->fail(Status::ParseError, "line %zu: port in '%.*s' is out of range (0 to 65535)",
                                               line_number, (int)token.size, token.data);
                        in.port = port;
                        token.size = colon - 1;
                    }
                }
                if (!detail::is_token_name(token))
                    return graph->fail(Status::ParseError, "line %zu: '%.*s' is not an input name", line_number,
                                       (int)token.size, token.data);
                in.producer_name = token;
                inputs[input_count++] = in;
            }
            ++index;
        }
        spec.inputs = Span<const InputRef>(inputs, input_count);
        Status status = graph->add_node(spec);
        if (status != Status::Ok) {
            char message[kErrorMessageBytes];
            std::memcpy(message, graph->last_error(), sizeof message);
            message[sizeof message - 16] = 0;  // room for the line prefix
            return graph->fail(status, "line %zu: %s", line_number, message);
        }
    }
    return graph->finalize();
}

Status write_text(const Graph& graph, WriteFn write, void* user) {
    for (NodeId id = 0; id < graph.node_count(); ++id) {
        const Node& node = graph.node(id);
        if (!detail::is_token_name(node.name) || !detail::is_token_name(node.op))
            return graph.fail(Status::InvalidArgument, "node #%u: name '%.*s' or op '%.*s' cannot be written as a token",
                              id, (int)node.name.size, node.name.data, (int)node.op.size, node.op.data);
    }
    for (DeviceId d = 0; d < graph.device_count(); ++d) {
        StringView device = graph.device_name(d);
        if (!detail::is_token_name(device) || device == StringView("-"))
            return graph.fail(Status::InvalidArgument, "device name '%.*s' cannot be written as a token",
                              (int)device.size, device.data);
    }
    for (NodeId id = 0; id < graph.node_count(); ++id) {
        const Node& node = graph.node(id);
        detail::write_view(write, user, node.name);
        write(user, " ", 1);
        if (node.affinity == kNoDevice) write(user, "-", 1);
        else detail::write_view(write, user, graph.device_name(node.affinity));
        if (!(node.op == StringView("Node"))) {
            write(user, " op=", 4);
            detail::write_view(write, user, node.op);
        }
        if (node.num_outputs != 1) detail::write_format(write, user, " outputs=%u", node.num_outputs);
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            const Edge& edge = node.inputs[i];
            write(user, edge.keep_apart ? " !" : " ", edge.keep_apart ? 2 : 1);
            StringView producer_name;
            if (node.input_names && node.input_names[i].data) producer_name = node.input_names[i];  // not finalized
            else if (edge.producer < graph.node_count()) producer_name = graph.node(edge.producer).name;
            else return graph.fail(Status::DanglingInput, "node '%.*s' input %u refers to node #%u",
                                   (int)node.name.size, node.name.data, i, edge.producer);
            detail::write_view(write, user, producer_name);
            bool has_colon = false;  // then the port is always written, so the name reads back whole
            for (char c : producer_name) has_colon = has_colon || c == ':';
            if (edge.port != 0 || has_colon) detail::write_format(write, user, ":%u", edge.port);
        }
        write(user, "\n", 1);
    }
    return Status::Ok;
}

// >>partition shared helpers
namespace detail {

constexpr uint32_t kUnplaced = 0xffffffffu;

// A growable array in an arena. Growth copies into a new block and leaves the old one to
// the arena: with doubling, the waste is at most the final size.
template <class T>
struct ArenaVector {
    Arena* arena = nullptr;
    T* data = nullptr;
    uint32_t size = 0;
    uint32_t capacity = 0;
    bool push(const T& value) {
        if (size == capacity) {
            uint32_t grown = capacity ? capacity * 2 : 16;
            T* bigger = arena->allocate_array<T>(grown);
            if (!bigger) return false;
            for (uint32_t i = 0; i < size; ++i) bigger[i] = data[i];
            data = bigger;
            capacity = grown;
        }
        data[size++] = value;
        return true;
    }
    T& operator[](uint32_t i) { return data[i]; }
};

template <class T>
T* fill_array(Arena* arena, size_t count, T value) {
    T* array = arena->allocate_array<T>(count);
    if (array)
        for (size_t i = 0; i < count; ++i) array[i] = value;
    return array;
}

// A value per node for the few nodes of a subgraph or an island: (node, value) pairs sorted
// by node and found by binary search, where an array over the whole graph would cost the
// graph's size for every subgraph.
template <class V>
struct NodeMap {
    struct Entry { NodeId node; V value; };
    Entry* entries = nullptr;
    uint32_t count = 0;
    // The nodes (distinct), each with `initial`; false when out of memory.
    bool init(Arena* arena, const NodeId* nodes, uint32_t n, V initial) {
        entries = arena->allocate_array<Entry>((size_t)n + 1);
        if (!entries) return false;
        for (uint32_t i = 0; i < n; ++i) entries[i] = Entry{nodes[i], initial};
        count = n;
        std::sort(entries, entries + n, [](const Entry& a, const Entry& b) { return a.node < b.node; });
        return true;
    }
    V* find(NodeId node) const {  // nullptr for a node not in the map
        Entry* e = std::lower_bound(entries, entries + count, node, [](const Entry& a, NodeId b) { return a.node < b; });
        return e != entries + count && e->node == node ? &e->value : nullptr;
    }
};

// True when `a` and `b` are joined by an input edge marked keep-apart (either direction).
inline bool keep_apart_edge(const Graph& graph, NodeId a, NodeId b) {
    const Node& na = graph.node(a);
    for (uint32_t i = 0; i < na.num_inputs; ++i)
        if (na.inputs[i].producer == b && na.inputs[i].keep_apart) return true;
    const Node& nb = graph.node(b);
    for (uint32_t i = 0; i < nb.num_inputs; ++i)
        if (nb.inputs[i].producer == a && nb.inputs[i].keep_apart) return true;
    return false;
}

// The partition under construction, shared by all algorithms: subgraphs are committed one
// at a time as sorted node lists.
struct Builder {
    const Graph& graph;
    Arena* arena;
    uint32_t* subgraph_of;
    Placement* placements;
    ArenaVector<Subgraph> subgraphs;
    Builder(const Graph& g, Arena* a) : graph(g), arena(a), subgraph_of(nullptr), placements(nullptr) {
        subgraphs.arena = a;
    }
    bool init() {
        subgraph_of = fill_array<uint32_t>(arena, graph.node_count(), kUnplaced);
        placements = fill_array<Placement>(arena, graph.node_count(), Placement());
        return subgraph_of && placements;
    }
    // nodes: any order, no duplicates; copied and sorted.
    bool commit(DeviceId device, const NodeId* nodes, uint32_t count) {
        NodeId* copy = arena->allocate_array<NodeId>(count);
        if (!copy) return false;
        for (uint32_t i = 0; i < count; ++i) copy[i] = nodes[i];
        sort(copy, count);
        Subgraph subgraph;
        subgraph.device = device;
        subgraph.nodes = Span<const NodeId>(copy, count);
        for (uint32_t i = 0; i < count; ++i) subgraph_of[copy[i]] = subgraphs.size;
        return subgraphs.push(subgraph);
    }
    // For algorithms that place every node before reading any list (waves): the device and
    // the subgraph of each node now, all node lists at the end by one counting pass.
    bool assign(DeviceId device, const NodeId* nodes, uint32_t count) {
        for (uint32_t i = 0; i < count; ++i) subgraph_of[nodes[i]] = subgraphs.size;
        Subgraph subgraph;
        subgraph.device = device;
        subgraph.nodes = Span<const NodeId>(nullptr, count);
        return subgraphs.push(subgraph);
    }
    bool build_lists() {
        NodeId* all = arena->allocate_array<NodeId>(graph.node_count());
        uint32_t* fill = arena->allocate_array<uint32_t>(subgraphs.size);
        if (!all || !fill) return false;
        uint32_t offset = 0;
        for (uint32_t k = 0; k < subgraphs.size; ++k) { fill[k] = offset; offset += (uint32_t)subgraphs[k].nodes.size; }
        for (NodeId v = 0; v < graph.node_count(); ++v) all[fill[subgraph_of[v]]++] = v;
        offset = 0;
        for (uint32_t k = 0; k < subgraphs.size; ++k) {
            subgraphs[k].nodes = Span<const NodeId>(all + offset, subgraphs[k].nodes.size);
            offset += (uint32_t)subgraphs[k].nodes.size;
        }
        return true;
    }
    static void sort(NodeId* a, uint32_t n) {  // often sorted already (levels)
        for (uint32_t i = 1; i < n; ++i)
            if (a[i - 1] > a[i]) { std::sort(a, a + n); return; }
    }
};

// >>rollback
//
// The seed algorithm, per device in priority order: every remaining node of the device not
// covered by an earlier candidate of this round is a root; a candidate grows depth-first
// from it, merging the neighbours of its device (successors, then predecessors, in id
// order); after each merge or rejection the global condition is checked and, while it
// fails, the last merged node is rolled back (moved to the rejected list). The largest
// candidate of the round is committed (ties: the earliest root), and rounds repeat until
// the device has no node left.
//
// Global condition. Let Q be the graph in which every committed subgraph is contracted to
// one node, and B the blocked nodes: every node of another device, this candidate's
// rejected nodes and every committed node. The candidate S fails when some path of Q leaves
// S, passes a node of B and returns to S. The seed's version only looks at rejected nodes
// in G. That misses cycles through committed subgraphs (issue example: A{x,a,c} and B{y,d,b}
// feed each other). And the seed learns of a node of another device only when the growth
// touches it ("possible self-references ... not known yet"), so S may grow around such a
// node and lose, at that touch, everything merged since it first did; Tessel knows those
// nodes from the start (none can ever join S), so the merge that would surround one fails
// alone. The seed's example gives the seed's result either way; on large graphs it takes
// fewer merges.
//
// Why the result is acyclic. Invariant: Q is a DAG. It holds at the start (Q = G). When
// growth ends, every neighbour of S is in S or in B, so any path of Q that leaves S and
// returns passes a node of B first: the condition forbids exactly such paths, so
// contracting S keeps Q acyclic. At the end every node is committed (a root alone always
// passes: Q is a DAG), so Q is the graph of subgraphs, and it is acyclic. Keep-apart
// neighbours are rejected, never merged, so those pairs always end in different subgraphs.
//
// Checking. The naive checker holds the transitive closure of Q as V x V bitsets (the seed's
// method, with closure rows unioned on each commit) and evaluates the condition from
// scratch. The scalable checker keeps a topological order of Q (`rank`), restored around
// each committed subgraph, and for every node the least merge index of an S node it is
// reached from, and of one it reaches (see >>rollback floods). A merge only
// lowers these values, so it visits only the nodes whose value drops; a rollback runs the
// seed's loop in one pass from them (rollback_until_valid) and clears exactly the values it
// invalidates. A path from S back to S stays between S's lowest and highest rank, so nodes
// outside are parked until S reaches them. Candidates are cached per root and kept until a
// commit could change them (invalidate_after_commit).
// Both checkers give the same partition (the property tests compare them).

// >>rollback state
// RollbackContext's data, in parts a reader can take one at a time; each part's code is the
// section of the same name inside RollbackContext, which inherits the parts so that the
// algorithm reads their members by name.
struct RollbackContext;

// The candidate being grown, stamped so nothing is cleared per candidate. The helper thread
// has its own.
struct RollbackGrowth {
    uint32_t growth = 0;
    uint32_t* in_s = nullptr;      // == growth: in the candidate
    uint32_t* rejected = nullptr;  // == growth: on the rejected list
    NodeId* s_list = nullptr;      // candidate nodes in merge order
    uint32_t s_count = 0;
    struct Frame { NodeId node; uint32_t next; };
    Frame* stack = nullptr;
    uint32_t stack_size = 0;
    Placement* why_rejected = nullptr;  // per node, for the committed candidate's reasons
    NodeId* rejected_list = nullptr;
    uint32_t rejected_count = 0;
    DeviceId growth_device = 0;  // the candidate's device: every node of another is blocked
};

// Naive checker: reach[x] = nodes reachable from x in Q (bitset rows of `words` words).
struct RollbackNaiveClosure {
    uint64_t* reach = nullptr;
    size_t words = 0;
    uint64_t* row_scratch = nullptr;
    uint64_t* s_bits = nullptr;
};

// Q, the graph with every committed subgraph contracted to one node (scalable checker):
// its topological order, and each committed subgraph's external successors and
// predecessors and its member of lowest rank, which stands for the subgraph (work items of
// contract() carry it with kSubgraphBit set). `plain`, `jumped` and `work` serve
// contract() and the candidate cache.
struct RollbackQuotient {
    uint32_t* rank = nullptr;
    NodeId* order = nullptr;
    static constexpr NodeId kSubgraphBit = 0x80000000u;
    ArenaVector<NodeId> external;
    uint32_t* external_offset = nullptr;
    uint32_t* external_count = nullptr;
    uint32_t* external_seen = nullptr;
    ArenaVector<NodeId> external_pred;
    uint32_t* external_pred_offset = nullptr;
    uint32_t* external_pred_count = nullptr;
    uint32_t* external_pred_seen = nullptr;
    NodeId* representative = nullptr;
    uint32_t epoch = 0;
    uint32_t* plain = nullptr;
    uint32_t* jumped = nullptr;    // per committed subgraph: == epoch when expanded
    NodeId* work = nullptr;
    uint32_t work_size = 0;
    uint32_t work_capacity = 0;
};

// The incremental checker (floods): least merge indices, kept as S grows (see ">>rollback
// floods"). Direction 0 (up) follows Q's edges forward, direction 1 (down) backward.
struct RollbackFloods {
    static constexpr uint32_t kUnreached = 0xffffffffu;
    struct Direction {
        uint32_t* value = nullptr;     // least merge index, kUnreached if none
        uint32_t* expanded = nullptr;  // the value its neighbours were last given, kUnreached if never
        // Every node with a value, in the order it got its first: a value >= k was first
        // set after s_k merged, so a rollback to P_k reads only the trail since then.
        NodeId* trail = nullptr;
        uint32_t trail_size = 0;
        uint32_t* trail_mark = nullptr;  // per merge index: trail_size when it merged
        // Nodes to expand: cold ones from stack[0] up, hot ones (reached in the other
        // direction too) from stack[n-1] down; a node is in one at most (in_stack).
        NodeId* stack = nullptr;
        uint32_t stack_size = 0;
        uint32_t hot_size = 0;
        uint8_t* in_stack = nullptr;
        // Nodes parked outside the rank range, one bit per rank (beyond the range: above it
        // going up, below it going down); parked_lo..parked_hi bounds this growth's bits.
        uint64_t* parked = nullptr;
        uint32_t parked_lo = kUnreached, parked_hi = 0;
    };
    Direction reach_of[2];
    // A committed subgraph reached from S: the member the path entered by (the witness's
    // name; only up paths name one).
    NodeId* up_entry = nullptr;
    uint32_t max_rank = 0, min_rank = 0;  // of S
    uint32_t* prefix_max_rank = nullptr;  // per merge index: over s_0..s_i
    uint32_t* prefix_min_rank = nullptr;
    uint32_t* s_index = nullptr;  // merge index of an S node
    NodeId* bad = nullptr;        // blocked nodes reached from S that reach S
    uint32_t bad_count = 0;
    uint32_t* bad_mark = nullptr;
    uint32_t bad_epoch = 0;
};

// Element bitsets (see ">>rollback element bitsets"), built by the caller's thread for one
// device and rebuilt only at commits, when no growth runs; the helper reads the same ones.
struct RollbackElementBitsets {
    struct ElementBits {
        static constexpr uint32_t kWords = 8, kBits = 64 * kWords;
        DeviceId device = kNoDevice;
        bool built = false;     // for `device`, current
        bool given_up = false;  // the device's later growths use floods
        uint32_t count = 0;               // elements
        uint32_t* index = nullptr;        // per node: its element index (elements only)
        NodeId* node = nullptr;           // per element
        uint32_t* rank_of = nullptr;      // per element
        uint32_t* before = nullptr;       // per rank r <= n: elements of rank < r
        int32_t* up_word = nullptr;       // per node: the first word of its up window
        int32_t* down_word = nullptr;     // per node: the first word of its down window
        uint32_t* up_end = nullptr;       // per node: its up window holds every element above it of rank < up_end
        uint32_t* down_begin = nullptr;   // per node: its down window holds every element below it of rank >= down_begin
        uint64_t* up = nullptr;           // per node, kWords words: the elements it reaches
        uint64_t* down = nullptr;         // per node, kWords words: the elements that reach it
    };
    ElementBits own_bits;
    ElementBits* bits = &own_bits;  // the helper's points to the caller's thread's
    // This growth's, when by_bits: the unions of S's windows (offset by kWords words, so a
    // window may start below 0), the words they touched, and the narrowest span of S's
    // windows.
    bool by_bits = false;
    uint64_t* up_union = nullptr;
    uint64_t* down_union = nullptr;
    static constexpr uint32_t kNoRankBound = 0xffffffffu;  // a window bound past every rank
    static constexpr int32_t kEmptyUnionLow = 0x7fffffff;   // union_lo before any window is added
    int32_t union_lo = 0, union_hi = 0;
    uint32_t window_end = 0, window_begin = 0;
    uint32_t bits_growths = 0, bits_fallbacks = 0;
    uint64_t bits_merges = 0;       // merges tried with the bitsets
    uint64_t merges_at_commit = 0;  // both threads', at the last rebuild
};

// Candidates per root: their nodes and their rejected nodes of the same device (with the
// reason), in two pools that are compacted in place when full. The scalable checker keeps
// them across rounds until a commit may change them (invalidate_after_commit); the naive
// one drops them every round.
struct RollbackCandidateCache {
    // lo..hi spans the ranks of the entry's uncommitted nodes, candidate and rejected.
    struct Cached { uint32_t offset, count, rejected_offset, rejected_count, lo, hi; bool valid, in_roots; };
    // A rejected node of the device and why: a cycle through `other` or keep-apart with it
    // (the only two reasons of a same-device rejection), in 8 bytes: node ids fit 31 bits.
    struct Rejection {
        uint32_t node_and_keep_apart;
        NodeId other;
        static constexpr uint32_t kKeepApartBit = 0x80000000u;
        Rejection() = default;
        Rejection(NodeId node, Placement why)
            : node_and_keep_apart(node | (why.reason == PlacementReason::KeepApart ? kKeepApartBit : 0u)), other(why.other) {
            TESSEL_ASSERT(why.reason == PlacementReason::KeepApart || why.reason == PlacementReason::CycleThrough);
        }
        NodeId node() const { return node_and_keep_apart & ~kKeepApartBit; }
        Placement why() const {
            return Placement{node_and_keep_apart & kKeepApartBit ? PlacementReason::KeepApart : PlacementReason::CycleThrough, other};
        }
    };
    Cached* cache = nullptr;
    NodeId* pool = nullptr;
    Rejection* rejection_pool = nullptr;
    uint32_t pool_size = 0, pool_capacity = 0;
    uint32_t rejection_size = 0, rejection_capacity = 0;
    ArenaVector<NodeId> cached_roots;  // roots that may have a valid entry (unique)
    // Valid entries of the scalable checker by window, so a commit reads only the entries
    // whose windows can meet its own: lists per block of ranks where the window starts, and
    // the widest window so far (a window meeting lo..hi starts at lo - widest or later).
    static constexpr uint32_t kWindowBlockShift = 8;
    NodeId* window_head = nullptr;  // per block
    NodeId* window_next = nullptr;  // per root
    NodeId* window_previous = nullptr;
    uint32_t widest_window = 0;
    ArenaVector<NodeId> overlapping;  // scratch of invalidate_after_commit
    ArenaVector<NodeId> stale;        // roots whose entries the last commit invalidated
    // Invalidation marks, stamped per commit: reaches the commit / reached from it in Q.
    uint32_t commit_stamp = 0;
    uint32_t* reaches_commit = nullptr;
    uint32_t* reached_from_commit = nullptr;
    uint32_t* subgraph_reaches_commit = nullptr;
    uint32_t* subgraph_reached_from_commit = nullptr;
};

// Speculation (options.threads > 1, scalable checker, no trace): while the caller's thread
// grows a root, a second context grows, on a helper thread, the root most likely needed
// next. A growth only reads the committed state (graph, subgraph_of, ranks, contracted
// subgraphs), which changes only at a commit, and the helper is always waited for before
// one; what it grows is stored in the cache like any candidate, so the partition is the
// same with or without it.
// The round's state (the listing, the cache, the pools, the arena) belongs to whoever holds
// `round_lock`: the caller's thread, except while it grows a root. Then the helper may take
// the lock between its own growths to store what it grew and pick its next root itself, so
// it is not idle until the other growth ends; and when the caller's thread needs the root
// the helper is growing, it grows the guess after that one instead of waiting
// (take_helper_root). The two threads hand over by spinning: a growth is short, and waking
// a sleeping thread through the kernel takes about as long.
struct RollbackHelperThread {
    RollbackContext* helper = nullptr;
    std::thread helper_thread;
    enum HelperPhase : uint32_t { kHelperIdle, kHelperGrowing, kHelperGrown };  // grown: not stored yet
    std::atomic<uint32_t> helper_phase{kHelperIdle};
    std::atomic<bool> round_lock{true};  // held by the caller's thread from the helper's start
    std::atomic<bool> helper_quit{false};
    NodeId helper_root = kNoNode;  // its root while growing or grown (under round_lock)
    DeviceId helper_device = 0;
    bool helper_out_of_memory = false;  // a store of the helper's failed (under round_lock)
    bool may_speculate = false;      // the helper starts at the first growth worth sharing
    uint32_t helper_growths = 0;     // growths it finished
    // What the helper reads to pick a root (under round_lock): run_device's listing, and the
    // root the caller's thread grows.
    struct RoundView {
        NodeId root = kNoNode;
        uint32_t position = 0, dirty_count = 0, roots = 0;
        const uint32_t* dirty = nullptr;
        const uint8_t* is_dirty = nullptr;
        const NodeId* remaining = nullptr;
        const uint32_t* cover_before = nullptr;
        const uint32_t* listed_as = nullptr;
    } view;
    uint32_t last_growth_size = 0;   // nodes the last growth merged or rejected
    // The helper starts after the first growth of kSpeculateAfter nodes, on graphs of
    // kSpeculateFromNodes nodes or more: with only smaller growths (chains of small
    // subgraphs) or smaller graphs, starting a thread costs more than it saves. Once started
    // it takes every guess, small or not. Both tuned with bench/partition.
    static constexpr uint32_t kSpeculateAfter = 256;
    static constexpr uint32_t kSpeculateFromNodes = 32768;
};

struct RollbackContext : RollbackGrowth, RollbackNaiveClosure, RollbackQuotient, RollbackFloods,
                         RollbackElementBitsets, RollbackCandidateCache, RollbackHelperThread {
    // >>rollback context
    // The parts above, the graph, the options, and their setup.
    const Graph& graph;
    Arena* arena;
    Builder& builder;
    const PartitionOptions& options;
    uint32_t n;
    bool naive;

    DeviceId* affinity = nullptr;  // per node: the graph's, dense for the growth's neighbour scans
    bool out_of_memory = false;
    bool any_keep_apart = false;  // else the per-merge keep-apart scan is skipped

    RollbackContext(const Graph& g, Arena* a, Builder& b, const PartitionOptions& o)
        : graph(g), arena(a), builder(b), options(o), n(g.node_count()), naive(o.tuning.naive_closure) {}
    ~RollbackContext() {
        if (!helper) return;
        helper_quit.store(true, std::memory_order_release);
        helper_thread.join();
        helper->~RollbackContext();  // its memory is the arena's
    }

    RollbackContext(const RollbackContext&) = delete;
    RollbackContext& operator=(const RollbackContext&) = delete;

    bool committed(NodeId x) const { return builder.subgraph_of[x] != kUnplaced; }
    bool blocked(NodeId x) const { return rejected[x] == growth || affinity[x] != growth_device || committed(x); }

    // Its arguments are evaluated even when tracing is off, so the growth's call sites test
    // options.trace first: name() reads the node, a cache miss per merge.
    void trace(const char* format, ...)
        TESSEL_PRINTF_FORMAT(2, 3)
    {
        if (!options.trace) return;
        char buffer[512];
        va_list args;
        va_start(args, format);
        int length = std::vsnprintf(buffer, sizeof buffer, format, args);
        va_end(args);
        if (length > 0) options.trace(options.trace_user, buffer, (size_t)length < sizeof buffer ? (size_t)length : sizeof buffer - 1);
    }
    const char* name(NodeId x) const { return graph.node(x).name.data; }  // zero-terminated copies
    void trace_set(const char* label, const NodeId* nodes, uint32_t count) {
        if (!options.trace) return;
        NodeId* sorted = arena->allocate_array<NodeId>(count);
        if (!sorted) return;
        for (uint32_t i = 0; i < count; ++i) sorted[i] = nodes[i];
        Builder::sort(sorted, count);
        trace("%s[", label);
        for (uint32_t i = 0; i < count; ++i) trace(i ? ",%s" : "%s", name(sorted[i]));
        trace("]");
    }

    // What grow() writes: the candidate, its rejected nodes and (scalable checker) the
    // reach values. The helper has its own; everything else it reads from the main context.
    Status allocate_growth_state() {
        in_s = fill_array<uint32_t>(arena, n, 0);
        rejected = fill_array<uint32_t>(arena, n, 0);
        s_list = arena->allocate_array<NodeId>(n);
        stack = arena->allocate_array<Frame>(n);
        why_rejected = fill_array<Placement>(arena, n, Placement());
        rejected_list = arena->allocate_array<NodeId>(n);
        if (!in_s || !rejected || !s_list || !stack || !why_rejected || !rejected_list) return Status::OutOfMemory;
        if (naive) return Status::Ok;
        for (Direction& d : reach_of) {
            d.value = fill_array<uint32_t>(arena, n, kUnreached);
            d.expanded = fill_array<uint32_t>(arena, n, kUnreached);
            d.trail = arena->allocate_array<NodeId>(n);
            d.trail_mark = arena->allocate_array<uint32_t>(n);
            d.stack = arena->allocate_array<NodeId>(n);
            d.in_stack = fill_array<uint8_t>(arena, n, 0);
            d.parked = fill_array<uint64_t>(arena, n / 64 + 1, 0);
            if (!d.value || !d.expanded || !d.trail || !d.trail_mark || !d.stack || !d.in_stack || !d.parked)
                return Status::OutOfMemory;
        }
        up_entry = arena->allocate_array<NodeId>(n);
        if (!up_entry) return Status::OutOfMemory;
        prefix_max_rank = arena->allocate_array<uint32_t>(n);
        prefix_min_rank = arena->allocate_array<uint32_t>(n);
        s_index = arena->allocate_array<uint32_t>(n);
        bad = arena->allocate_array<NodeId>(n);
        bad_mark = fill_array<uint32_t>(arena, n, 0);
        if (!prefix_max_rank || !prefix_min_rank || !s_index || !bad || !bad_mark) return Status::OutOfMemory;
        const size_t union_words = (size_t)n / 64 + 2 + 2 * ElementBits::kWords;  // elements <= n, and the offsets
        up_union = fill_array<uint64_t>(arena, union_words, 0);
        down_union = fill_array<uint64_t>(arena, union_words, 0);
        if (!up_union || !down_union) return Status::OutOfMemory;
        return Status::Ok;
    }

    Status init() {
        any_keep_apart = graph.has_keep_apart();
        affinity = arena->allocate_array<DeviceId>(n);
        if (!affinity) return Status::OutOfMemory;
        for (NodeId x = 0; x < n; ++x) affinity[x] = graph.node(x).affinity;
        TESSEL_TRY(allocate_growth_state());
        cached_roots.arena = arena;
        cache = arena->allocate_array<Cached>(n);
        if (!cache || !grow_pools(n + 64, n + 64)) return Status::OutOfMemory;
        for (uint32_t i = 0; i < n; ++i) cache[i].valid = cache[i].in_roots = false;
        if (naive) {
            words = ((size_t)n + 63) / 64;
            if (words && (size_t)n > options.tuning.max_closure_bytes / 8 / words) return Status::LimitExceeded;
            reach = fill_array<uint64_t>(arena, words * n, 0);
            row_scratch = arena->allocate_array<uint64_t>(words);
            s_bits = fill_array<uint64_t>(arena, words, 0);
            if (!reach || !row_scratch || !s_bits) return Status::OutOfMemory;
            Span<const NodeId> topo = graph.topological_order();
            for (uint32_t i = n; i-- > 0;) {
                NodeId x = topo[i];
                uint64_t* row = reach + (size_t)x * words;
                for (NodeId y : graph.successors(x)) {
                    const uint64_t* other = reach + (size_t)y * words;
                    for (size_t w = 0; w < words; ++w) row[w] |= other[w];
                    row[y / 64] |= 1ull << (y % 64);
                }
            }
            return Status::Ok;
        }
        rank = arena->allocate_array<uint32_t>(n);
        order = arena->allocate_array<NodeId>(n);
        reaches_commit = fill_array<uint32_t>(arena, n, 0);
        reached_from_commit = fill_array<uint32_t>(arena, n, 0);
        subgraph_reaches_commit = fill_array<uint32_t>(arena, n, 0);
        subgraph_reached_from_commit = fill_array<uint32_t>(arena, n, 0);
        if (!reaches_commit || !reached_from_commit || !subgraph_reaches_commit ||
            !subgraph_reached_from_commit)
            return Status::OutOfMemory;
        plain = fill_array<uint32_t>(arena, n, 0);
        jumped = fill_array<uint32_t>(arena, n, 0);  // at most n subgraphs
        work_capacity = 2 * n + 16;  // contract(): each node once, and a scratch copy of a window
        work = arena->allocate_array<NodeId>(work_capacity);
        if (!plain || !jumped || !work) return Status::OutOfMemory;
        external.arena = arena;
        external_pred.arena = arena;
        external_offset = arena->allocate_array<uint32_t>(n);
        external_count = arena->allocate_array<uint32_t>(n);
        external_seen = fill_array<uint32_t>(arena, n, 0);
        external_pred_offset = arena->allocate_array<uint32_t>(n);
        external_pred_count = arena->allocate_array<uint32_t>(n);
        external_pred_seen = fill_array<uint32_t>(arena, n, 0);
        representative = arena->allocate_array<NodeId>(n);
        window_head = fill_array<NodeId>(arena, ((size_t)n >> kWindowBlockShift) + 1, kNoNode);
        window_next = arena->allocate_array<NodeId>(n);
        window_previous = arena->allocate_array<NodeId>(n);
        if (!window_head || !window_next || !window_previous) return Status::OutOfMemory;
        overlapping.arena = arena;
        stale.arena = arena;
        if (!external_offset || !external_count || !external_seen || !external_pred_offset || !external_pred_count ||
            !external_pred_seen || !representative)
            return Status::OutOfMemory;
        Span<const NodeId> topo = graph.topological_order();
        for (uint32_t i = 0; i < n; ++i) { order[i] = topo[i]; rank[topo[i]] = i; }
        may_speculate = options.threads > 1 && !options.trace && n >= kSpeculateFromNodes;
        return Status::Ok;
    }

    // >>rollback floods
    // The scalable (incremental) checker.
    //
    // With S in merge order s_0..s_{m-1}, up(y) is the least i with a path s_i -> y of
    // length >= 1 in Q, down(y) the least j with a path y -> s_j. S fails the condition iff
    // some blocked node has both (a path from S through it back to S), and the prefix P_k
    // iff some blocked node b has max(up(b), down(b)) < k. Both values are kept as S grows:
    // a merge only lowers values, so only nodes whose value drops are visited again, and a
    // rollback to P_k clears exactly the values >= k (all first set after s_k merged, so
    // they are on the trail since then). A path from S back to S stays inside S's rank
    // range [min_rank, max_rank] (ranks rise along Q's edges), so a node outside it is
    // parked, not expanded, until S's range reaches it: values are exact inside the range,
    // which is all the condition reads. A committed subgraph is one node of Q, held by its
    // representative.
    // down is kept only on nodes S reaches (up set): the condition reads it nowhere else,
    // and a path from such a node to S passes only nodes S reaches. So a node passes its
    // down value only to the predecessors S reaches, and a node takes the down values of
    // its successors each time it expands up (after S first reaches it). A node S no longer
    // reaches after a rollback may keep a down value; it is exact (values below k stay
    // exact: Q does not change within a growth). This skips the down values of the many
    // nodes S does not reach; keeping up only on nodes that reach S instead was slower
    // (chosen with bench/partition).
    NodeId canonical(NodeId y) const {
        uint32_t sub = builder.subgraph_of[y];
        return sub == kUnplaced ? y : representative[sub];
    }
    uint32_t source_value(int d, NodeId c) const {  // what c passes on: its own index if in S
        uint32_t value = reach_of[d].value[c];
        if (in_s[c] == growth && s_index[c] < value) value = s_index[c];
        return value;
    }
    bool parked(int d, NodeId c) const { return d == 0 ? rank[c] > max_rank : rank[c] < min_rank; }
    void schedule(int d, NodeId c) {  // expand soon, or park outside the range
        Direction& r = reach_of[d];
        if (parked(d, c)) {
            const uint32_t at = rank[c];
            r.parked[at / 64] |= 1ull << (at % 64);
            if (at < r.parked_lo) r.parked_lo = at;
            if (at > r.parked_hi) r.parked_hi = at;
        } else if (!r.in_stack[c]) {
            r.in_stack[c] = 1;
            if (reach_of[d ^ 1].value[c] != kUnreached) r.stack[n - 1 - r.hot_size++] = c;
            else r.stack[r.stack_size++] = c;
        }
    }
    void add_bad(NodeId c) {
        if (bad_mark[c] == bad_epoch) return;
        bad_mark[c] = bad_epoch;
        bad[bad_count++] = c;
    }
    void lower(int d, NodeId c, uint32_t value, NodeId entry = kNoNode) {  // entry: up only (up_entry)
        Direction& r = reach_of[d];
        uint32_t old = r.value[c];
        if (value >= old) return;
        if (old == kUnreached) r.trail[r.trail_size++] = c;
        r.value[c] = value;
        if (d == 0) up_entry[c] = entry;
        if (blocked(c) && reach_of[d ^ 1].value[c] != kUnreached) add_bad(c);
        if (source_value(d, c) < r.expanded[c]) schedule(d, c);
    }
    void expand(int d, NodeId c) {
        uint32_t value = source_value(d, c);
        reach_of[d].expanded[c] = value;
        uint32_t sub = builder.subgraph_of[c];
        if (d == 0) {
            uint32_t pulled = kUnreached;
            auto visit = [&](NodeId y) {
                const NodeId k = canonical(y);
                lower(0, k, value, y);
                const uint32_t down = source_value(1, k);
                if (down < pulled) pulled = down;
            };
            if (sub == kUnplaced)
                for (NodeId y : graph.successors(c)) visit(y);
            else
                for (uint32_t i = 0; i < external_count[sub]; ++i) visit(external[external_offset[sub] + i]);
            if (pulled != kUnreached) lower(1, c, pulled);
        } else {
            auto visit = [&](NodeId y) {
                const NodeId k = canonical(y);
                if (reach_of[0].value[k] != kUnreached) lower(1, k, value);
            };
            if (sub == kUnplaced)
                for (NodeId y : graph.predecessors(c)) visit(y);
            else
                for (uint32_t i = 0; i < external_pred_count[sub]; ++i) visit(external_pred[external_pred_offset[sub] + i]);
        }
    }
    void expand_next(int d) {  // a hot node first, if its value dropped since it was expanded
        Direction& r = reach_of[d];
        const NodeId c = r.hot_size ? r.stack[n - r.hot_size--] : r.stack[--r.stack_size];
        r.in_stack[c] = 0;
        if (source_value(d, c) < r.expanded[c]) expand(d, c);
    }
    void settle(int d) {
        while (has_work(d)) expand_next(d);
    }
    bool has_work(int d) const { return reach_of[d].stack_size || reach_of[d].hot_size; }
    bool has_hot_work() const { return reach_of[0].hot_size || reach_of[1].hot_size; }
    void expand_hot_until_bad() {  // both directions in turn, one expansion each
        while (!bad_count && has_hot_work())
            for (int d = 0; d < 2 && !bad_count; ++d)
                if (reach_of[d].hot_size) expand_next(d);
    }
    // The range grew past `previous`, its old bound in direction d: the parked nodes now
    // inside it are expanded, nearest to the old bound first.
    void unpark(int d, uint32_t previous) {
        Direction& r = reach_of[d];
        uint32_t lo = d == 0 ? previous + 1 : min_rank, hi = d == 0 ? max_rank : previous - 1;
        if (lo < r.parked_lo) lo = r.parked_lo;
        if (hi > r.parked_hi) hi = r.parked_hi;
        if (lo > hi) return;
        for (uint32_t i = 0, word_count = hi / 64 - lo / 64 + 1; i < word_count; ++i) {
            const uint32_t w = d == 0 ? lo / 64 + i : hi / 64 - i;
            uint64_t bits = r.parked[w];
            if (w == lo / 64) bits &= ~0ull << (lo % 64);
            if (w == hi / 64) bits &= ~0ull >> (63 - hi % 64);
            r.parked[w] &= ~bits;
            while (bits) {
                const uint32_t bit = d == 0 ? (uint32_t)__builtin_ctzll(bits) : 63 - (uint32_t)__builtin_clzll(bits);
                bits &= ~(1ull << bit);
                const NodeId c = order[w * 64 + bit];
                if (source_value(d, c) < r.expanded[c]) schedule(d, c);
            }
        }
    }
    // Clears what the previous growth left (its values, parked nodes, bad list).
    void reset_reach(uint32_t previous_count) {
        for (int d = 0; d < 2; ++d) {
            Direction& r = reach_of[d];
            for (uint32_t i = 0; i < r.trail_size; ++i) r.value[r.trail[i]] = r.expanded[r.trail[i]] = kUnreached;
            r.trail_size = 0;
            for (uint32_t i = 0; i < previous_count; ++i) r.expanded[s_list[i]] = kUnreached;  // a source that nothing reached
            if (r.parked_lo <= r.parked_hi)
                for (uint32_t w = r.parked_lo / 64; w <= r.parked_hi / 64; ++w) r.parked[w] = 0;
            r.parked_lo = kUnreached;
            r.parked_hi = 0;
        }
        if (++bad_epoch == 0) {
            for (uint32_t i = 0; i < n; ++i) bad_mark[i] = 0;
            bad_epoch = 1;
        }
        bad_count = 0;
    }
    NodeId first_bad() const { return bad_count ? bad[0] : kNoNode; }
    NodeId witness_name(NodeId c) const { return committed(c) ? up_entry[c] : c; }
    void push_work(NodeId x) {
        TESSEL_ASSERT(work_size < work_capacity);
        work[work_size++] = x;
    }
    void new_epoch() {
        if (++epoch == 0) {  // wrapped: clear the stamps once
            for (uint32_t i = 0; i < n; ++i) plain[i] = jumped[i] = 0;
            epoch = 1;
        }
    }

    // After a merge or a rejection values only drop, so they are updated in place.
    NodeId check_after_merge(NodeId v) {
        if (naive) return naive_violation();
        // A violation is a blocked node b with a path S -> b -> v or v -> b -> S. In the
        // first, every node on b -> v is reached from S, and none reaches S (else b would
        // reach S: P_{m-1} had failed). So v's own index, spreading down from v, meets b
        // through hot nodes alone (reached in the other direction before v merged): they
        // are expanded first, as most failing merges fail there.
        // (In the second, the nodes on v -> b were not reached from S, so they hold no down
        // value yet: the up spread finds b as they take them from their successors.) Both
        // directions advance in turn, one expansion each.
        // That search runs before the range grows to v's rank: beyond the old range values
        // are not exact (parked nodes were not expanded), so it may miss a violation, but
        // any it finds is real (a value means a path). Then the wider range (values below
        // v's index, which create no violation: a blocked node that reaches P_{m-1} lies
        // inside its range, where its values were exact), then the rest up to the first
        // violation: the rollback needs no more (every blocked node v makes bad has
        // max(up, down) = v's index). This order expands far fewer nodes on failing
        // merges (chosen with bench/partition).
        for (int d = 0; d < 2; ++d)
            if (source_value(d, v) < reach_of[d].expanded[v]) schedule(d, v);
        expand_hot_until_bad();
        if (bad_count) return first_bad();
        if (rank[v] > max_rank) { const uint32_t previous = max_rank; max_rank = rank[v]; unpark(0, previous); settle(0); }
        if (rank[v] < min_rank) { const uint32_t previous = min_rank; min_rank = rank[v]; unpark(1, previous); settle(1); }
        expand_hot_until_bad();
        while (!bad_count && (has_work(0) || has_work(1)))
            for (int d = 0; d < 2 && !bad_count; ++d)
                if (has_work(d)) expand_next(d);
        return first_bad();
    }
    NodeId check_after_reject(NodeId r) {
        if (naive) return naive_violation();
        if (reach_of[0].value[r] != kUnreached && reach_of[1].value[r] != kUnreached) add_bad(r);
        return first_bad();
    }

    // The same rollback loop in one pass (scalable checker): rolling back to the prefix P_k
    // blocks s_k..s_{m-1}, and P_k fails iff some blocked node b (these included) has
    // max(up(b), down(b)) < k. The blocked nodes with both values are the `bad` list, so the
    // least such maximum over them and over the removed suffix tells where the seed's loop
    // stops, and which node each step names. Then the values >= k are cleared.
    void rollback_until_valid() {
        const uint32_t m = s_count;
        uint32_t blocked_threshold = kUnreached;  // least max(up, down) over blocked nodes
        NodeId blocked_witness = kNoNode;
        for (uint32_t i = 0; i < bad_count; ++i) {
            NodeId b = bad[i];
            uint32_t t = reach_of[0].value[b] > reach_of[1].value[b] ? reach_of[0].value[b] : reach_of[1].value[b];
            if (t < blocked_threshold) { blocked_threshold = t; blocked_witness = witness_name(b); }
        }
        // Walk the seed's loop: remove s_{k}, k = m-1, m-2, ... while P_{k+1} fails.
        uint32_t suffix_threshold = kUnreached;  // least max(up, down) over s_l, l > k
        NodeId suffix_witness = kNoNode;
        NodeId witness = blocked_witness;  // why P_m fails
        uint32_t k = m;
        for (;;) {
            TESSEL_ASSERT(k > 1);  // a root alone always passes: Q is a DAG
            NodeId v = s_list[--k];
            in_s[v] = 0;
            rejected[v] = growth;
            rejected_list[rejected_count++] = v;
            why_rejected[v] = Placement{PlacementReason::CycleThrough, witness};
            if (options.trace) trace("  rollback %s: self-reference through %s\n", name(v), name(witness));
            uint32_t up_v = reach_of[0].value[v], down_v = reach_of[1].value[v];
            uint32_t t = up_v > down_v ? up_v : down_v;
            if (t < suffix_threshold) { suffix_threshold = t; suffix_witness = v; }
            if (blocked_threshold < k) witness = blocked_witness;
            else if (suffix_threshold < k) witness = suffix_witness;
            else break;  // P_k passes
        }
        s_count = k;
        for (int d = 0; d < 2; ++d) {
            Direction& r = reach_of[d];
            while (r.stack_size) r.in_stack[r.stack[--r.stack_size]] = 0;  // left by a merge that failed early: index m-1 only
            while (r.hot_size) r.in_stack[r.stack[n - r.hot_size--]] = 0;
            uint32_t kept = r.trail_mark[k];  // the trail since s_k merged keeps its values < k
            for (uint32_t i = kept; i < r.trail_size; ++i) {
                NodeId y = r.trail[i];
                if (r.value[y] < k) { r.trail[kept++] = y; continue; }
                r.value[y] = kUnreached;
                if (in_s[y] != growth) r.expanded[y] = kUnreached;  // an S node passed on its own index
            }
            r.trail_size = kept;
            for (uint32_t i = k; i < m; ++i)  // removed sources that nothing else reached
                if (r.value[s_list[i]] == kUnreached) r.expanded[s_list[i]] = kUnreached;
        }
        for (uint32_t i = 0; i < bad_count; ++i)  // every witness lost a value
            TESSEL_ASSERT(reach_of[0].value[bad[i]] == kUnreached || reach_of[1].value[bad[i]] == kUnreached);
        if (++bad_epoch == 0) {
            for (uint32_t i = 0; i < n; ++i) bad_mark[i] = 0;
            bad_epoch = 1;
        }
        bad_count = 0;
        max_rank = prefix_max_rank[k - 1];
        min_rank = prefix_min_rank[k - 1];
    }

    // >>rollback element bitsets
    //
    // Elements are Q's nodes of other devices: their uncommitted nodes and their committed
    // subgraphs, fixed while one device grows. Each node y holds two windows of kBits bits
    // over the elements in rank order: `up`, from the first element above y, marks the
    // elements y reaches; `down`, up to the last element below y, the ones that reach y.
    // S keeps the union of its nodes' up windows and of their down windows. Merging v
    // fails iff an element is in v's up window and S's down union (v -> e -> S) or in v's
    // down window and S's up union (S -> e -> v): a few words per merge, no flood, and a
    // failing merge changes nothing.
    // Why elements suffice, though the floods also block rejected nodes and the device's
    // committed subgraphs (no keep-apart edges, so a rollback removes only the node that
    // just failed, and S only grows):
    // - R: a node r rejected against S_r (S when r was tried) has a path r -> b -> S_r or
    //   S_r -> b -> r through b, an element or a committed subgraph. Its witness b' gives
    //   one such path; if b' was rejected earlier, against S' (a subset of S_r), by
    //   induction b' -> b -> S' or S' -> b -> b', and the mixed orientations (r -> b' with
    //   S' -> b -> b', or the mirror) would make S_r fail through b.
    // - K: if an uncommitted node x of the device reaches a committed subgraph C of the
    //   device, then x -> e -> C for an element e (and the mirror when C reaches x). By
    //   induction over commits: let p be the Q node before C on the path. An element: done.
    //   An older subgraph: induction. Otherwise p holds a node u of the device that was
    //   uncommitted and next to C when C grew (u is p itself, or a member of a subgraph
    //   committed after C), so C's growth rejected it: by R, u -> b -> C (C -> b -> u with
    //   u -> C would have made C fail) with b an element or an older subgraph, and x
    //   reaches b through p.
    // So a path S -> w -> S through a rejected node or a committed subgraph w gives one
    // through an element, and the check is exact, with any element on it as the witness.
    // It holds only inside the windows: a path v -> e -> s keeps e's rank between v's and
    // s's, so when every rank of S + v is below each window's up_end and at or above its
    // down_begin, every such e is in the windows that should hold it; otherwise the floods
    // take over the rest of the growth. A commit of the device contracts its subgraph, which
    // reorders the ranks in its window lo..hi: the elements there are indexed again (they
    // keep their index range) and the windows meeting that range are computed again.
    bool bits_wanted() const { return !naive && !options.trace && !any_keep_apart; }
    // Whether the device's growths switch to the bitsets, given its largest growth so far.
    bool bitset_check_due(uint32_t largest_growth) const {
        switch (options.tuning.bitset_check) {
            case BitsetCheck::Always: return true;
            case BitsetCheck::Never: return false;
            case BitsetCheck::AfterThreshold: break;
        }
        return largest_growth >= options.tuning.bitset_threshold;
    }
    bool is_element(NodeId q) const { return affinity[q] != bits->device; }  // q: a node of Q (canonical)
    // Allocates the bitsets (once per partition) and computes them for `device`; false
    // without memory (the floods stay).
    bool build_bits(DeviceId device) {
        ElementBits& b = *bits;
        if (!b.index) {
            const uint32_t kWords = ElementBits::kWords;
            b.index = arena->allocate_array<uint32_t>(n);
            b.node = arena->allocate_array<NodeId>(n);
            b.rank_of = arena->allocate_array<uint32_t>(n);
            b.before = arena->allocate_array<uint32_t>((size_t)n + 1);
            b.up_word = arena->allocate_array<int32_t>(n);
            b.down_word = arena->allocate_array<int32_t>(n);
            b.up_end = arena->allocate_array<uint32_t>(n);
            b.down_begin = arena->allocate_array<uint32_t>(n);
            b.up = static_cast<uint64_t*>(arena->allocate((size_t)n * kWords * 8, 64));  // a row per cache line
            b.down = static_cast<uint64_t*>(arena->allocate((size_t)n * kWords * 8, 64));
            if (!b.index || !b.node || !b.rank_of || !b.before || !b.up_word || !b.down_word || !b.up_end ||
                !b.down_begin || !b.up || !b.down) {
                b.index = nullptr;
                return false;
            }
        }
        b.device = device;
        b.before[0] = 0;
        index_elements(0, n - 1);
        b.count = b.before[n];
        merges_at_commit = bits_merges + (helper ? helper->bits_merges : 0);
        compute_windows(0, n - 1);
        compute_up_rows(0, n - 1);
        compute_down_rows(0, n - 1);
        b.built = true;
        return true;
    }
    // After a commit of the device whose contraction reordered ranks lo..hi. The bitsets
    // are given up for the rest of the device instead when the growths since the last
    // commit checked fewer merges than 1/kRowsPerBitsetMerge of the rows to compute: a row
    // costs far less than a merge saves with the bitsets, but the growths only get smaller.
    // The ratio is tuned with bench/partition.
    static constexpr uint64_t kRowsPerBitsetMerge = 16;
    void rebuild_bits(uint32_t lo, uint32_t hi) {
        ElementBits& b = *bits;
        const uint32_t first = b.before[lo], end = b.before[hi + 1];
        // The windows that meet the index range first..end (up windows below it also pick up
        // what the contraction lets them reach beyond it; up_word and down_word only grow
        // with the rank).
        uint32_t a = lo, z = hi;
        while (a > 0 && (int64_t)b.up_word[order[a - 1]] * 64 + ElementBits::kBits > (int64_t)first) --a;
        while (z + 1 < n && (int64_t)b.down_word[order[z + 1]] * 64 < (int64_t)end) ++z;
        const uint64_t rows = (uint64_t)(hi - a + 1) + (z - lo + 1);
        const uint64_t merges = bits_merges + (helper ? helper->bits_merges : 0);
        if ((merges - merges_at_commit) * kRowsPerBitsetMerge < rows) {
            b.given_up = true;
            return;
        }
        merges_at_commit = merges;
        index_elements(lo, hi);
        TESSEL_ASSERT(b.before[hi + 1] == end);
        compute_windows(a, z);
        compute_up_rows(a, hi);  // above hi nothing changed: a row depends on what lies above
        compute_down_rows(lo, z);
    }
    bool q_node(NodeId x) const { return !committed(x) || representative[builder.subgraph_of[x]] == x; }
    // Element indices in rank order over ranks lo..hi (before[lo] already right).
    void index_elements(uint32_t lo, uint32_t hi) {
        ElementBits& b = *bits;
        uint32_t k = b.before[lo];
        for (uint32_t r = lo; r <= hi; ++r) {
            b.before[r] = k;
            const NodeId x = order[r];
            if (q_node(x) && is_element(x)) {
                b.index[x] = k;
                b.node[k] = x;
                b.rank_of[k] = r;
                ++k;
            }
        }
        b.before[hi + 1] = k;
    }
    // Windows of the nodes of ranks lo..hi.
    void compute_windows(uint32_t lo, uint32_t hi) {
        ElementBits& b = *bits;
        constexpr uint32_t kWords = ElementBits::kWords, kBits = ElementBits::kBits;
        for (uint32_t r = lo; r <= hi; ++r) {
            const NodeId y = order[r];
            b.up_word[y] = (int32_t)(b.before[r + 1] / 64);
            const uint32_t out = (uint32_t)b.up_word[y] * 64 + kBits;  // the first element past the window
            b.up_end[y] = out < b.count ? b.rank_of[out] : kNoRankBound;
            b.down_word[y] = (int32_t)((b.before[r] + 63) / 64) - (int32_t)kWords;
            const int32_t in = b.down_word[y] * 64;  // the window's first element
            b.down_begin[y] = in <= 0 ? 0 : b.rank_of[in - 1] + 1;
        }
    }
    // Up rows of ranks lo..hi, from the top: a row reads its successors'.
    void compute_up_rows(uint32_t lo, uint32_t hi) {
        ElementBits& b = *bits;
        constexpr uint32_t kWords = ElementBits::kWords, kBits = ElementBits::kBits;
        for (uint32_t r = hi + 1; r-- > lo;) {
            const NodeId y = order[r];
            if (!q_node(y)) continue;
            uint64_t* row = b.up + (size_t)y * kWords;
            for (uint32_t w = 0; w < kWords; ++w) row[w] = 0;
            auto take = [&](NodeId z) {
                const NodeId k = canonical(z);
                if (is_element(k)) {
                    const uint32_t bit = b.index[k] - (uint32_t)b.up_word[y] * 64;  // k lies above y
                    if (bit < kBits) row[bit / 64] |= 1ull << (bit % 64);
                }
                const uint32_t shift = (uint32_t)(b.up_word[k] - b.up_word[y]);
                const uint64_t* from = b.up + (size_t)k * kWords;
                for (uint32_t w = 0; w + shift < kWords; ++w) row[w + shift] |= from[w];
            };
            const uint32_t sub = builder.subgraph_of[y];
            if (sub == kUnplaced)
                for (NodeId z : graph.successors(y)) take(z);
            else
                for (uint32_t i = 0; i < external_count[sub]; ++i) take(external[external_offset[sub] + i]);
        }
    }
    // Down rows of ranks lo..hi, from the bottom.
    void compute_down_rows(uint32_t lo, uint32_t hi) {
        ElementBits& b = *bits;
        constexpr uint32_t kWords = ElementBits::kWords;
        for (uint32_t r = lo; r <= hi; ++r) {
            const NodeId y = order[r];
            if (!q_node(y)) continue;
            uint64_t* row = b.down + (size_t)y * kWords;
            for (uint32_t w = 0; w < kWords; ++w) row[w] = 0;
            auto take = [&](NodeId p) {
                const NodeId k = canonical(p);
                if (is_element(k)) {
                    const int32_t bit = (int32_t)b.index[k] - b.down_word[y] * 64;  // k lies below y
                    if (bit >= 0) row[bit / 64] |= 1ull << (bit % 64);
                }
                const uint32_t shift = (uint32_t)(b.down_word[y] - b.down_word[k]);
                const uint64_t* from = b.down + (size_t)k * kWords;
                for (uint32_t w = 0; w + shift < kWords; ++w) row[w] |= from[w + shift];
            };
            const uint32_t sub = builder.subgraph_of[y];
            if (sub == kUnplaced)
                for (NodeId p : graph.predecessors(y)) take(p);
            else
                for (uint32_t i = 0; i < external_pred_count[sub]; ++i) take(external_pred[external_pred_offset[sub] + i]);
        }
    }
    void start_bits_growth() {
        for (int32_t w = union_lo; w < union_hi; ++w) up_union[w] = down_union[w] = 0;
        union_lo = kEmptyUnionLow;
        union_hi = 0;
        window_end = kNoRankBound;
        window_begin = 0;
        min_rank = kNoRankBound;
        max_rank = 0;
    }
    void add_windows(NodeId v) {
        const ElementBits& b = *bits;
        constexpr uint32_t kWords = ElementBits::kWords;
        const int32_t up_at = b.up_word[v] + (int32_t)kWords, down_at = b.down_word[v] + (int32_t)kWords;
        const uint64_t* up_v = b.up + (size_t)v * kWords;
        const uint64_t* down_v = b.down + (size_t)v * kWords;
        for (uint32_t w = 0; w < kWords; ++w) {
            up_union[up_at + w] |= up_v[w];
            down_union[down_at + w] |= down_v[w];
        }
        if (down_at < union_lo) union_lo = down_at;  // down windows start below up windows
        if (up_at + (int32_t)kWords > union_hi) union_hi = up_at + (int32_t)kWords;
        const uint32_t r = rank[v];
        if (r < min_rank) min_rank = r;
        if (r > max_rank) max_rank = r;
        if (b.up_end[v] < window_end) window_end = b.up_end[v];
        if (b.down_begin[v] > window_begin) window_begin = b.down_begin[v];
    }
    // Whether every rank of S + v lies inside every window of S + v: then bits_violation is
    // exact for v.
    bool inside_windows(NodeId v) const {
        const uint32_t r = rank[v];
        const uint32_t top = r > max_rank ? r : max_rank, bottom = r < min_rank ? r : min_rank;
        return top < window_end && top < bits->up_end[v] && bottom >= window_begin && bottom >= bits->down_begin[v];
    }
    // S (grown with the bitsets so far) leaves their windows: the floods' state is built by
    // merging S's nodes again in order (each passes; the rejected nodes stay blocked), and
    // the walk goes on with the floods. That saves the rejected merges and the walk so far.
    void switch_to_floods() {
        by_bits = false;
        ++bits_fallbacks;
        const uint32_t count = s_count;
        s_count = 0;
        for (uint32_t i = 0; i < count; ++i) {
            const NodeId x = s_list[i];
            add_to_s(x);
            if (i == 0) max_rank = min_rank = rank[x];
            const NodeId none = check_after_merge(x);
            TESSEL_ASSERT(none == kNoNode);
            (void)none;
        }
    }
    // The element through which merging v would close a path back into S, kNoNode if none
    // (v inside the windows).
    NodeId bits_violation(NodeId v) {
        const ElementBits& b = *bits;
        constexpr uint32_t kWords = ElementBits::kWords;
        const uint64_t* up_v = b.up + (size_t)v * kWords;
        const uint64_t* down_v = b.down + (size_t)v * kWords;
        const uint64_t* s_down = down_union + b.up_word[v] + kWords;  // over v's up window
        const uint64_t* s_up = up_union + b.down_word[v] + kWords;    // over v's down window
        uint64_t any = 0;
        for (uint32_t w = 0; w < kWords; ++w) any |= (up_v[w] & s_down[w]) | (down_v[w] & s_up[w]);
        if (!any) return kNoNode;
        for (uint32_t w = 0; w < kWords; ++w)
            if (uint64_t hit = up_v[w] & s_down[w]) return b.node[(uint32_t)(b.up_word[v] + (int32_t)w) * 64 + (uint32_t)__builtin_ctzll(hit)];
        for (uint32_t w = 0; w < kWords; ++w)
            if (uint64_t hit = down_v[w] & s_up[w]) return b.node[(uint32_t)(b.down_word[v] + (int32_t)w) * 64 + (uint32_t)__builtin_ctzll(hit)];
        return kNoNode;
    }

    // >>rollback naive checker
    // The condition evaluated from the closure (the test oracle).
    NodeId naive_violation() {
        for (size_t w = 0; w < words; ++w) row_scratch[w] = 0;
        for (uint32_t i = 0; i < s_count; ++i) {
            const uint64_t* row = reach + (size_t)s_list[i] * words;
            for (size_t w = 0; w < words; ++w) row_scratch[w] |= row[w];
        }
        for (size_t w = 0; w < words; ++w) {
            uint64_t bits = row_scratch[w];
            while (bits) {
                NodeId b = (NodeId)(w * 64 + (size_t)__builtin_ctzll(bits));
                bits &= bits - 1;
                if (!blocked(b)) continue;
                const uint64_t* row = reach + (size_t)b * words;
                for (size_t k = 0; k < words; ++k)
                    if (row[k] & s_bits[k]) return b;
            }
        }
        return kNoNode;
    }

    // The seed's rollback, one node at a time (naive checker): the last merged node leaves
    // S for the rejected list, and the condition is evaluated again.
    NodeId rollback_last(NodeId via) {
        TESSEL_ASSERT(s_count > 1);  // a root alone always passes: Q is a DAG
        NodeId v = s_list[--s_count];
        in_s[v] = 0;
        rejected[v] = growth;
        rejected_list[rejected_count++] = v;
        s_bits[v / 64] &= ~(1ull << (v % 64));
        why_rejected[v] = Placement{PlacementReason::CycleThrough, via};
        if (options.trace) trace("  rollback %s: self-reference through %s\n", name(v), name(via));
        return naive_violation();
    }

    // >>rollback growth
    // One candidate, merged depth-first from its root.
    void add_to_s(NodeId v) {
        in_s[v] = growth;
        if (by_bits) {
            add_windows(v);
        } else if (!naive) {
            for (Direction& r : reach_of) r.trail_mark[s_count] = r.trail_size;
            s_index[v] = s_count;
            uint32_t r = rank[v];
            prefix_max_rank[s_count] = s_count && prefix_max_rank[s_count - 1] > r ? prefix_max_rank[s_count - 1] : r;
            prefix_min_rank[s_count] = s_count && prefix_min_rank[s_count - 1] < r ? prefix_min_rank[s_count - 1] : r;
        }
        s_list[s_count++] = v;
        if (naive) s_bits[v / 64] |= 1ull << (v % 64);
    }

    void reject(NodeId r, Placement why) {
        rejected[r] = growth;
        rejected_list[rejected_count++] = r;
        why_rejected[r] = why;
    }

    NodeId keep_apart_partner_in_s(NodeId v) const {
        const Node& node = graph.node(v);
        for (uint32_t i = 0; i < node.num_inputs; ++i)
            if (node.inputs[i].keep_apart && in_s[node.inputs[i].producer] == growth) return node.inputs[i].producer;
        for (NodeId c : graph.successors(v))
            if (in_s[c] == growth && keep_apart_edge(graph, v, c)) return c;
        return kNoNode;
    }

    // The trace's "failed to merge" lines for x's neighbours of other devices, once each per
    // growth (`rejected` marks them; they are blocked anyway, so nothing else changes).
    void trace_other_devices(NodeId x, DeviceId device) {
        Span<const NodeId> succ = graph.successors(x), pred = graph.predecessors(x);
        for (uint32_t k = 0; k < succ.size + pred.size; ++k) {
            NodeId y = k < succ.size ? succ[k] : pred[k - succ.size];
            if (affinity[y] == device || rejected[y] == growth || committed(y)) continue;
            rejected[y] = growth;
            trace("  failed to merge %s: other device\n", name(y));
        }
    }
    // Grows the candidate of `root`; the result is s_list[0..s_count). With the element
    // bitsets when they are built for the device, until a check would leave their windows:
    // then the floods take over (switch_to_floods).
    void grow(NodeId root, DeviceId device) {
        by_bits = bits->built && bits->device == device && !bits->given_up;
        if (by_bits) ++bits_growths;
        growth_device = device;
        if (++growth == 0) {
            for (uint32_t i = 0; i < n; ++i) in_s[i] = rejected[i] = 0;
            growth = 1;
        }
        if (naive)  // the previous candidate's bits
            for (uint32_t i = 0; i < s_count; ++i) s_bits[s_list[i] / 64] &= ~(1ull << (s_list[i] % 64));
        else
            reset_reach(s_count);
        s_count = 0;
        rejected_count = 0;
        stack_size = 0;
        if (by_bits) start_bits_growth();
        add_to_s(root);
        if (!naive && !by_bits) {
            max_rank = min_rank = rank[root];
            NodeId none = check_after_merge(root);  // a root alone always passes
            TESSEL_ASSERT(none == kNoNode);
            (void)none;
        }
        if (options.trace) trace("  select root %s\n", name(root));
        stack[stack_size++] = Frame{root, 0};
        while (stack_size) {
            Frame& frame = stack[stack_size - 1];
            if (in_s[frame.node] != growth) { --stack_size; continue; }  // rolled back
            // Nodes of other devices are blocked from the start (see the global condition in
            // >>rollback), so only the device's own neighbours are walked; a trace first names the
            // others in the seed's words, as the seed's walk would reject them here.
            Span<const NodeId> succ = graph.successors(frame.node);
            Span<const NodeId> pred = graph.predecessors(frame.node);
            const uint32_t degree = (uint32_t)(succ.size + pred.size);
            if (frame.next == 0 && options.trace) trace_other_devices(frame.node, device);
            NodeId next = kNoNode;  // the next neighbour to try, skipping the others here
            while (frame.next < degree) {
                const NodeId y = frame.next < succ.size ? succ[frame.next] : pred[frame.next - succ.size];
                ++frame.next;
                if (affinity[y] == device && in_s[y] != growth && rejected[y] != growth && !committed(y)) { next = y; break; }
            }
            if (next == kNoNode) { --stack_size; continue; }
            NodeId violation_via;
            NodeId partner = any_keep_apart ? keep_apart_partner_in_s(next) : kNoNode;
            if (partner != kNoNode) {
                reject(next, Placement{PlacementReason::KeepApart, partner});
                violation_via = check_after_reject(next);
                if (options.trace) trace("  failed to merge %s: keep apart from %s%s\n", name(next), name(partner),
                                         violation_via == kNoNode ? "" : ", self-reference found");
            } else if (by_bits && inside_windows(next)) {  // no keep-apart, no trace: a failing merge never enters S
                ++bits_merges;
                violation_via = bits_violation(next);
                if (violation_via == kNoNode) {
                    add_to_s(next);
                    stack[stack_size++] = Frame{next, 0};
                } else {
                    reject(next, Placement{PlacementReason::CycleThrough, violation_via});
                    violation_via = kNoNode;
                }
            } else {
                if (by_bits) switch_to_floods();
                add_to_s(next);
                if (options.trace) trace("  merge %s\n", name(next));
                violation_via = check_after_merge(next);
                if (violation_via == kNoNode) stack[stack_size++] = Frame{next, 0};
            }
            if (naive)
                while (violation_via != kNoNode) violation_via = rollback_last(violation_via);
            else if (violation_via != kNoNode)
                rollback_until_valid();
        }
        trace_set("  end: ", s_list, s_count);
        trace("\n");
    }

    // >>rollback contraction
    // Contracts a committed subgraph in Q: ranks inside its window are reordered so that
    // nodes reachable from it follow it and the rest precede it (valid: the condition
    // guarantees no path leaves it and returns). Returns the window.
    void contract(uint32_t subgraph_index, uint32_t* lo_out, uint32_t* hi_out) {
        Span<const NodeId> nodes = builder.subgraphs[subgraph_index].nodes;
        if (naive) {
            // U = C and everything C reaches; every row that meets C gains U.
            for (size_t w = 0; w < words; ++w) row_scratch[w] = 0;
            for (NodeId c : nodes) {
                const uint64_t* row = reach + (size_t)c * words;
                for (size_t w = 0; w < words; ++w) row_scratch[w] |= row[w];
                row_scratch[c / 64] |= 1ull << (c % 64);
            }
            for (NodeId x = 0; x < n; ++x) {
                uint64_t* row = reach + (size_t)x * words;
                bool meets = builder.subgraph_of[x] == subgraph_index;
                for (NodeId c : nodes) if (row[c / 64] & (1ull << (c % 64))) { meets = true; break; }
                if (meets) for (size_t w = 0; w < words; ++w) row[w] |= row_scratch[w];
            }
            return;
        }
        // The subgraph's external successors, deduplicated: Q's edges out of its node.
        uint32_t ext_begin = external.size;
        for (NodeId c : nodes)
            for (NodeId y : graph.successors(c)) {
                if (builder.subgraph_of[y] == subgraph_index || external_seen[y] == subgraph_index + 1) continue;
                external_seen[y] = subgraph_index + 1;
                if (!external.push(y)) { out_of_memory = true; return; }
            }
        external_offset[subgraph_index] = ext_begin;
        external_count[subgraph_index] = external.size - ext_begin;
        uint32_t pred_begin = external_pred.size;
        for (NodeId c : nodes)
            for (NodeId y : graph.predecessors(c)) {
                if (builder.subgraph_of[y] == subgraph_index || external_pred_seen[y] == subgraph_index + 1) continue;
                external_pred_seen[y] = subgraph_index + 1;
                if (!external_pred.push(y)) { out_of_memory = true; return; }
            }
        external_pred_offset[subgraph_index] = pred_begin;
        external_pred_count[subgraph_index] = external_pred.size - pred_begin;
        uint32_t lo = n, hi = 0;
        for (NodeId c : nodes) { if (rank[c] < lo) lo = rank[c]; if (rank[c] > hi) hi = rank[c]; }
        *lo_out = lo;
        *hi_out = hi;
        new_epoch();
        // Mark everything in (lo, hi) reachable from C in Q: nodes by `plain`, earlier
        // subgraphs (contiguous, so wholly inside or outside the window) by `jumped`.
        work_size = 0;
        jumped[subgraph_index] = epoch;
        auto reach_node = [&](NodeId y) {
            uint32_t sub = builder.subgraph_of[y];
            if (sub == kUnplaced) {
                if (plain[y] == epoch || rank[y] > hi) return;
                plain[y] = epoch;
                push_work(y);
            } else {
                if (jumped[sub] == epoch || rank[representative[sub]] > hi) return;
                jumped[sub] = epoch;
                push_work(representative[sub] | kSubgraphBit);
            }
        };
        for (uint32_t i = 0; i < external_count[subgraph_index]; ++i) reach_node(external[external_offset[subgraph_index] + i]);
        while (work_size) {
            NodeId x = work[--work_size];
            if (x & kSubgraphBit) {
                uint32_t sub = builder.subgraph_of[x & ~kSubgraphBit];
                for (uint32_t i = 0; i < external_count[sub]; ++i) reach_node(external[external_offset[sub] + i]);
            } else {
                for (NodeId y : graph.successors(x)) reach_node(y);
            }
        }
        // Stable three-way split of order[lo..hi]: unreached, C, reached.
        auto reached = [&](NodeId x) {
            uint32_t sub = builder.subgraph_of[x];
            return sub == kUnplaced ? plain[x] == epoch : sub != subgraph_index && jumped[sub] == epoch;
        };
        uint32_t count = hi - lo + 1;
        NodeId* scratch = work;  // free again, and longer than n
        uint32_t k = 0;
        for (uint32_t i = lo; i <= hi; ++i) if (builder.subgraph_of[order[i]] != subgraph_index && !reached(order[i])) scratch[k++] = order[i];
        uint32_t first_of_c = k;
        for (uint32_t i = lo; i <= hi; ++i) if (builder.subgraph_of[order[i]] == subgraph_index) scratch[k++] = order[i];
        for (uint32_t i = lo; i <= hi; ++i) if (reached(order[i])) scratch[k++] = order[i];
        representative[subgraph_index] = scratch[first_of_c];
        TESSEL_ASSERT(k == count);
        for (uint32_t i = 0; i < count; ++i) { order[lo + i] = scratch[i]; rank[scratch[i]] = lo + i; }
        work_size = 0;
    }

    // >>rollback candidate cache
    bool grow_pools(uint32_t nodes, uint32_t rejections) {  // only the ones that grow
        if (nodes != pool_capacity || !pool) {
            pool = arena->allocate_array<NodeId>(nodes);
            pool_capacity = nodes;
        }
        if (rejections != rejection_capacity || !rejection_pool) {
            rejection_pool = arena->allocate_array<Rejection>(rejections);
            rejection_capacity = rejections;
        }
        return pool && rejection_pool;
    }
    // Packs the valid entries to the front of the pools, in place (entries sit in store
    // order, so each moves down), or into bigger pools when they would stay over 3/4 full.
    bool compact(uint32_t extra_nodes, uint32_t extra_rejections) {
        uint32_t live_nodes = 0, live_rejections = 0, kept = 0;
        for (uint32_t i = 0; i < cached_roots.size; ++i) {
            NodeId r = cached_roots[i];
            if (!cache[r].valid) { cache[r].in_roots = false; continue; }
            cached_roots[kept++] = r;
            live_nodes += cache[r].count;
            live_rejections += cache[r].rejected_count;
        }
        cached_roots.size = kept;
        std::sort(cached_roots.data, cached_roots.data + kept, [this](NodeId a, NodeId b) { return cache[a].offset < cache[b].offset; });
        NodeId* old_nodes = pool;
        Rejection* old_rejections = rejection_pool;
        const uint64_t need_nodes = (uint64_t)live_nodes + extra_nodes, need_rejections = (uint64_t)live_rejections + extra_rejections;
        if (4 * need_nodes > 3 * (uint64_t)pool_capacity || 4 * need_rejections > 3 * (uint64_t)rejection_capacity) {
            uint64_t nodes = pool_capacity, rejections = rejection_capacity;
            while (4 * need_nodes > 3 * nodes) nodes *= 2;
            while (4 * need_rejections > 3 * rejections) rejections *= 2;
            if (nodes > UINT32_MAX || rejections > UINT32_MAX) return false;
            if (!grow_pools((uint32_t)nodes, (uint32_t)rejections)) return false;
        }
        pool_size = rejection_size = 0;
        for (uint32_t i = 0; i < cached_roots.size; ++i) {
            Cached& entry = cache[cached_roots[i]];
            for (uint32_t k = 0; k < entry.count; ++k) pool[pool_size + k] = old_nodes[entry.offset + k];
            for (uint32_t k = 0; k < entry.rejected_count; ++k)
                rejection_pool[rejection_size + k] = old_rejections[entry.rejected_offset + k];
            entry.offset = pool_size;
            entry.rejected_offset = rejection_size;
            pool_size += entry.count;
            rejection_size += entry.rejected_count;
        }
        return true;
    }
    // Stores the candidate that `grown` (this context or the helper) grew from `root`.
    bool store_candidate(NodeId root, DeviceId device, const RollbackContext& grown) {
        const NodeId* s_list = grown.s_list;
        const uint32_t s_count = grown.s_count;
        const NodeId* rejected_list = grown.rejected_list;
        const uint32_t rejected_count = grown.rejected_count;
        const Placement* why_rejected = grown.why_rejected;
        uint32_t rejections = 0;
        for (uint32_t k = 0; k < rejected_count; ++k) rejections += affinity[rejected_list[k]] == device;
        if (pool_size + s_count > pool_capacity || rejection_size + rejections > rejection_capacity)
            if (!compact(s_count, rejections)) return false;
        Cached& entry = cache[root];
        if (!entry.in_roots) {
            if (!cached_roots.push(root)) return false;
            entry.in_roots = true;
        }
        entry.offset = pool_size;
        entry.count = s_count;
        entry.rejected_offset = rejection_size;
        entry.rejected_count = rejections;
        entry.valid = true;
        for (uint32_t i = 0; i < s_count; ++i) pool[pool_size++] = s_list[i];
        for (uint32_t k = 0; k < rejected_count; ++k) {
            NodeId x = rejected_list[k];
            if (affinity[x] == device) rejection_pool[rejection_size++] = Rejection{x, why_rejected[x]};
        }
        if (!naive) {
            update_window(entry);
            index_window(root);
        }
        return true;
    }
    void index_window(NodeId root) {
        const Cached& entry = cache[root];
        if (entry.hi >= entry.lo && entry.hi - entry.lo > widest_window) widest_window = entry.hi - entry.lo;
        NodeId& head = window_head[entry.lo >> kWindowBlockShift];
        window_previous[root] = kNoNode;
        window_next[root] = head;
        if (head != kNoNode) window_previous[head] = root;
        head = root;
    }
    void unindex_window(NodeId root) {
        const NodeId p = window_previous[root], q = window_next[root];
        if (p != kNoNode) window_next[p] = q; else window_head[cache[root].lo >> kWindowBlockShift] = q;
        if (q != kNoNode) window_previous[q] = p;
    }
    // A valid entry leaves the cache (scalable checker: and its window index).
    void drop_entry(NodeId root) {
        if (!naive && cache[root].valid) unindex_window(root);
        cache[root].valid = false;
    }
    // An entry's nodes T: the candidate, then its rejected nodes of the device.
    uint32_t entry_size(const Cached& entry) const { return entry.count + entry.rejected_count; }
    NodeId entry_node(const Cached& entry, uint32_t i) const {
        return i < entry.count ? pool[entry.offset + i] : rejection_pool[entry.rejected_offset + i - entry.count].node();
    }
    void update_window(Cached& entry) const {
        uint32_t lo = n, hi = 0;
        for (uint32_t i = 0; i < entry_size(entry); ++i) {
            NodeId x = entry_node(entry, i);
            if (committed(x)) continue;
            if (rank[x] < lo) lo = rank[x];
            if (rank[x] > hi) hi = rank[x];
        }
        entry.lo = lo;
        entry.hi = hi;
    }

    // After committing subgraph C (its rank window lo..hi, already contracted), drops the
    // cached candidates that could grow differently now. Let T be an entry's nodes: the
    // candidate and its rejected nodes of the device, which hold every node ever merged
    // (every S of the growth) and every neighbour of the device it looked at and did not
    // skip as committed. The growth reads the rest of the graph only through two questions:
    // is a neighbour committed, and does some path of Q leave an S, pass a blocked node and
    // return to S (the condition). The commit changes the first only for nodes of C, which
    // are of the device, so only if C meets T. It adds blocked nodes (C: nodes of other
    // devices are blocked all along) and paths (through C's contracted node) to the second,
    // and any such new path runs from T into C and from C into T. So a candidate with no T
    // node in C, and no T node that reaches C or none that C reaches, grows to the same node
    // set and is kept. (The witnesses it stored were valid in the old Q and stay valid:
    // paths only grow.) Ranks rise along Q's paths, so a candidate whose window misses
    // lo..hi is unaffected, and the walks stay inside the affected candidates' windows.
    bool invalidate_after_commit(uint32_t subgraph_index, uint32_t lo, uint32_t hi) {
        stale.size = 0;
        overlapping.size = 0;
        uint32_t low = n, high = 0;
        const uint32_t first_block = (lo > widest_window ? lo - widest_window : 0) >> kWindowBlockShift;
        for (uint32_t b = first_block; b <= hi >> kWindowBlockShift; ++b)
            for (NodeId r = window_head[b]; r != kNoNode; r = window_next[r]) {
                const Cached& c = cache[r];
                if (c.hi < lo || hi < c.lo) continue;
                if (!overlapping.push(r)) return false;
                if (c.lo < low) low = c.lo;
                if (c.hi > high) high = c.hi;
            }
        if (low > high) return true;
        // The windows were computed before the contraction, which moved nodes inside lo..hi.
        if (lo < low) low = lo;
        if (hi > high) high = hi;
        if (++commit_stamp == 0) {
            for (uint32_t i = 0; i < n; ++i)
                reaches_commit[i] = reached_from_commit[i] = subgraph_reaches_commit[i] = subgraph_reached_from_commit[i] = 0;
            commit_stamp = 1;
        }
        const uint32_t stamp = commit_stamp;
        // Forward from C, ranks up to `high`.
        work_size = 0;
        subgraph_reached_from_commit[subgraph_index] = stamp;
        subgraph_reaches_commit[subgraph_index] = stamp;
        auto forward = [&](NodeId y) {
            uint32_t sub = builder.subgraph_of[y];
            if (sub == kUnplaced) {
                if (reached_from_commit[y] == stamp || rank[y] > high) return;
                reached_from_commit[y] = stamp;
                push_work(y);
            } else {
                if (subgraph_reached_from_commit[sub] == stamp || rank[representative[sub]] > high) return;
                subgraph_reached_from_commit[sub] = stamp;
                push_work(representative[sub] | kSubgraphBit);
            }
        };
        for (uint32_t i = 0; i < external_count[subgraph_index]; ++i) forward(external[external_offset[subgraph_index] + i]);
        while (work_size) {
            NodeId x = work[--work_size];
            if (x & kSubgraphBit) {
                uint32_t sub = builder.subgraph_of[x & ~kSubgraphBit];
                for (uint32_t i = 0; i < external_count[sub]; ++i) forward(external[external_offset[sub] + i]);
            } else {
                for (NodeId y : graph.successors(x)) forward(y);
            }
        }
        // Backward into C, ranks down to `low` (a subgraph's members are contiguous ranks,
        // the representative the lowest).
        auto backward = [&](NodeId y) {
            uint32_t sub = builder.subgraph_of[y];
            if (sub == kUnplaced) {
                if (reaches_commit[y] == stamp || rank[y] < low) return;
                reaches_commit[y] = stamp;
                push_work(y);
            } else {
                if (subgraph_reaches_commit[sub] == stamp || rank[representative[sub]] < low) return;
                subgraph_reaches_commit[sub] = stamp;
                push_work(representative[sub] | kSubgraphBit);
            }
        };
        for (NodeId member : builder.subgraphs[subgraph_index].nodes)
            for (NodeId p : graph.predecessors(member)) backward(p);
        while (work_size) {
            NodeId x = work[--work_size];
            if (x & kSubgraphBit) {
                uint32_t sub = builder.subgraph_of[x & ~kSubgraphBit];
                for (NodeId member : builder.subgraphs[sub].nodes)
                    for (NodeId p : graph.predecessors(member)) backward(p);
            } else {
                for (NodeId p : graph.predecessors(x)) backward(p);
            }
        }
        for (uint32_t i = 0; i < overlapping.size; ++i) {
            const NodeId root = overlapping[i];
            Cached& c = cache[root];
            bool hit = false, reaches = false, reached = false;
            for (uint32_t k = 0; k < entry_size(c) && !hit; ++k) {
                NodeId x = entry_node(c, k);
                uint32_t sub = builder.subgraph_of[x];
                if (sub == subgraph_index) hit = true;
                if (sub != kUnplaced) continue;
                reaches = reaches || reaches_commit[x] == stamp;
                reached = reached || reached_from_commit[x] == stamp;
                hit = reaches && reached;
            }
            unindex_window(root);
            if (hit) {
                c.valid = false;
                if (!stale.push(root)) return false;
            } else {
                update_window(c);
                index_window(root);
            }
        }
        return true;
    }
    void drop_cache() {
        for (uint32_t i = 0; i < cached_roots.size; ++i) cache[cached_roots[i]].valid = cache[cached_roots[i]].in_roots = false;
        cached_roots.size = 0;
        pool_size = rejection_size = 0;
    }

    // Reasons of a committed candidate: its nodes are root or grown, unless an earlier
    // commit pushed them out (then that reason stays); its rejected nodes of the device
    // remember why, for when they are committed elsewhere.
    void commit_reasons(const Cached& entry, NodeId root, Placement* pending) {
        const NodeId* nodes = pool + entry.offset;
        for (uint32_t i = 0; i < entry.count; ++i) {
            NodeId x = nodes[i];
            Placement p = pending[x];
            if (p.other == kNoNode)
                p = Placement{x == root ? PlacementReason::Root : PlacementReason::Grown, x == root ? kNoNode : root};
            builder.placements[x] = p;
        }
        const Rejection* rejections = rejection_pool + entry.rejected_offset;
        for (uint32_t i = 0; i < entry.rejected_count; ++i)
            if (pending[rejections[i].node()].other == kNoNode) pending[rejections[i].node()] = rejections[i].why();
    }

    // >>rollback helper thread
    // Spins while `busy` holds, then yields the core between checks.
    template <class Busy>
    static void spin_while(Busy busy) {
        constexpr uint32_t kSpinsBeforeYield = 4096;
        for (uint32_t spins = 0; busy(); ++spins)
            if (spins > kSpinsBeforeYield) std::this_thread::yield();
    }
    // The helper's context: its own growth state, the main one's view of the committed
    // state. Without memory for it, there is no speculation.
    void start_helper() {
        void* memory = arena->allocate(sizeof(RollbackContext), alignof(RollbackContext));
        if (!memory) return;
        RollbackContext* h = new (memory) RollbackContext(graph, arena, builder, options);
        if (h->allocate_growth_state() != Status::Ok) { h->~RollbackContext(); return; }
        h->any_keep_apart = any_keep_apart;
        h->bits = bits;
        h->affinity = affinity;
        h->rank = rank;
        h->order = order;
        h->representative = representative;
        h->external_offset = external_offset;
        h->external_count = external_count;
        h->external_pred_offset = external_pred_offset;
        h->external_pred_count = external_pred_count;
        helper = h;
        helper_thread = std::thread([this] { run_helper(); });
    }
    void run_helper() {
        for (;;) {
            spin_while([this] {
                return helper_phase.load(std::memory_order_acquire) != kHelperGrowing &&
                       !helper_quit.load(std::memory_order_acquire);
            });
            if (helper_phase.load(std::memory_order_acquire) != kHelperGrowing) return;  // quit
            helper->grow(helper_root, helper_device);
            // While this thread grows, store and go on; otherwise it stores the growth.
            while (try_lock_round()) {
                NodeId next = kNoNode;
                if (store_helper_growth()) next = guess_next_root();
                else helper_out_of_memory = true;
                if (next == kNoNode) {
                    helper_phase.store(kHelperIdle, std::memory_order_release);
                    unlock_round();
                    break;
                }
                helper_root = next;
                unlock_round();
                helper->grow(next, helper_device);
            }
            if (helper_phase.load(std::memory_order_relaxed) == kHelperGrowing)
                helper_phase.store(kHelperGrown, std::memory_order_release);
        }
    }
    bool try_lock_round() {
        bool expected = false;
        return round_lock.compare_exchange_strong(expected, true, std::memory_order_acquire);
    }
    void unlock_round() { round_lock.store(false, std::memory_order_release); }
    void lock_round() { spin_while([this] { return !try_lock_round(); }); }
    // Grows view.root here; the helper may use the round's state meanwhile.
    void grow_sharing_round(DeviceId device) {
        if (!helper) { grow(view.root, device); return; }
        unlock_round();
        grow(view.root, device);
        lock_round();
    }
    bool helper_growing() const { return helper_phase.load(std::memory_order_acquire) == kHelperGrowing; }
    void launch_helper(NodeId root, DeviceId device) {
        helper->external = external;  // the lists grow at commits, never during a growth
        helper->external_pred = external_pred;
        helper_root = root;
        helper_device = device;
        helper_phase.store(kHelperGrowing, std::memory_order_release);
    }
    // The helper's finished growth into the cache (it is valid: nothing was committed since
    // it started), with the round's lock held.
    bool store_helper_growth() {
        ++helper_growths;
        const NodeId root = helper_root;
        helper_root = kNoNode;
        if (committed(root) || cache[root].valid) return true;
        return store_candidate(root, helper_device, *helper);
    }
    // Stores the helper's growth if it has finished one.
    bool store_grown_helper() {
        if (helper_phase.load(std::memory_order_acquire) == kHelperGrown) {
            helper_phase.store(kHelperIdle, std::memory_order_relaxed);
            if (!store_helper_growth()) return false;
        }
        return !helper_out_of_memory;
    }
    // Waits for the helper's growth, if any, and stores it.
    bool finish_helper() {
        if (!helper) return true;
        spin_while([this] { return helper_growing(); });
        return store_grown_helper();
    }
    // This thread needs root r, at `position`. While the helper grows it, this thread grows
    // the guess after it (or waits, if there is none); then it stores what the helper grew.
    bool take_helper_root(NodeId r, uint32_t position, uint32_t dirty_count, DeviceId device) {
        while (helper_root == r && helper_growing()) {
            aim_view(r, position, dirty_count);  // r is left out of the guess: the helper grows it
            const NodeId next = guess_next_root();
            if (next == kNoNode) {
                spin_while([this, r] { return helper_root == r && helper_growing(); });
                break;
            }
            view.root = next;
            grow_sharing_round(device);
            if (helper_out_of_memory || !store_candidate(next, device, *this)) return false;
        }
        return store_grown_helper();
    }

    void aim_view(NodeId root, uint32_t position, uint32_t dirty_count) {
        view.root = root;
        view.position = position;
        view.dirty_count = dirty_count;
    }
    // The root the round will most likely grow after view.root (at view.position): the first
    // dirty root after it that nothing listed covers and that has no candidate. A guess
    // only: a wrong one is a wasted growth on the other core, or a cached candidate used
    // later. kNoNode if there is none.
    NodeId guess_next_root() const {
        const RoundView& v = view;
        auto growable = [&](uint32_t p) {
            const NodeId g = v.remaining[p];
            return g != v.root && !committed(g) && v.cover_before[g] == 0 && !v.listed_as[g] && !cache[g].valid;
        };
        constexpr uint32_t kScan = 4096;  // either way: a round's dirty heap can hold every root
        uint32_t best = kNoNode;
        if (v.dirty_count <= kScan) {
            for (uint32_t k = 0; k < v.dirty_count; ++k)
                if (v.dirty[k] < best && growable(v.dirty[k])) best = v.dirty[k];
        } else {
            for (uint32_t p = v.position + 1; p < v.roots && p <= v.position + kScan && best == kNoNode; ++p)
                if (v.is_dirty[p] && growable(p)) best = p;
        }
        return best == kNoNode ? kNoNode : v.remaining[best];
    }
    // Gives the helper, if idle (its finished growth stored first), the guess after
    // view.root, which this thread is about to grow.
    bool speculate(DeviceId device) {
        if (!helper) {
            start_helper();
            if (!helper) { may_speculate = false; return true; }  // no memory for it: alone
        }
        if (helper_growing()) return true;
        if (!finish_helper()) return false;
        const NodeId next = guess_next_root();
        if (next != kNoNode) launch_helper(next, device);
        return true;
    }

    // >>rollback rounds
    // A round lists roots in ascending order: a remaining root is listed when no listed
    // candidate of an earlier root contains it (then it is covered). The listing is kept
    // across rounds and only repaired where it changes: cover_before[x] counts the listed
    // candidates of earlier roots that contain x, and a root whose count crosses zero, that
    // is committed, or whose candidate went stale is "dirty" and decided again, in root
    // order, so every earlier root is final when a root is decided. That gives the listing
    // a full rescan would give (a stale candidate is regrown only when its root is listed
    // again, as the scan would), without walking the covered roots again each round.
    Status run_device(DeviceId device, Placement* pending) {
        // Remaining nodes of the device, ascending: a root's position orders the scan.
        ArenaVector<NodeId> remaining;
        remaining.arena = arena;
        for (NodeId x = 0; x < n; ++x)
            if (graph.node(x).affinity == device && !committed(x) && !remaining.push(x)) return Status::OutOfMemory;
        const uint32_t roots = remaining.size;
        uint32_t* position = arena->allocate_array<uint32_t>(n);
        uint32_t* cover_before = fill_array<uint32_t>(arena, n, 0);
        uint32_t* listed_as = fill_array<uint32_t>(arena, n, 0);  // the listing's number while listed, else 0
        uint32_t* dirty = arena->allocate_array<uint32_t>(roots);   // min-heap of positions
        uint8_t* is_dirty = fill_array<uint8_t>(arena, roots, 0);
        if (!position || !cover_before || !listed_as || (roots && (!dirty || !is_dirty))) return Status::OutOfMemory;
        for (uint32_t i = 0; i < roots; ++i) position[remaining[i]] = i;
        uint32_t dirty_count = 0, listings = 0, listed_count = 0, left = roots;
        uint32_t largest_growth = 0;  // of this device, on this thread
        bits->built = bits->given_up = false;
        view = RoundView{kNoNode, 0, 0, roots, dirty, is_dirty, remaining.data, cover_before, listed_as};
        // Listed candidates by size, ties to the earliest root; entries of roots unlisted
        // since are skipped when they reach the top.
        struct Listed { uint32_t count, position, listing; };
        auto smaller = [](const Listed& a, const Listed& b) {
            return a.count != b.count ? a.count < b.count : a.position > b.position;
        };
        ArenaVector<Listed> largest;
        largest.arena = arena;
        auto current = [&](const Listed& e) { return listed_as[remaining[e.position]] == e.listing; };
        auto later = [](uint32_t a, uint32_t b) { return a > b; };  // the heap's top: the earliest root
        auto mark_dirty = [&](NodeId x) {
            uint32_t i = position[x];
            if (is_dirty[i]) return;
            is_dirty[i] = 1;
            dirty[dirty_count++] = i;
            std::push_heap(dirty, dirty + dirty_count, later);
        };
        // The candidate's nodes after its root gain or lose one cover.
        auto cover = [&](NodeId r, bool listed) {
            const uint32_t from = position[r];
            const NodeId* nodes = pool + cache[r].offset;
            for (uint32_t k = 0; k < cache[r].count; ++k) {
                NodeId x = nodes[k];
                if (position[x] <= from) continue;
                uint32_t before = listed ? cover_before[x]++ : cover_before[x]--;
                if (before == (listed ? 0u : 1u)) mark_dirty(x);
            }
        };
        auto unlist = [&](NodeId r) {  // while its pool entry is intact: before any growth
            cover(r, false);
            listed_as[r] = 0;
            --listed_count;
        };
        for (uint32_t round = 1; left > 0; ++round) {
            if (options.trace) {
                trace("%s: round %u, possible roots [", graph.device_name(device).data, round);
                bool first = true;
                for (uint32_t i = 0; i < roots; ++i)
                    if (!committed(remaining[i])) { trace(first ? "%s" : ",%s", name(remaining[i])); first = false; }
                trace("]\n");
            }
            if (round == 1 || naive) {  // the naive checker rescans every round, as the seed does
                if (naive) {
                    for (uint32_t i = 0; i < roots; ++i)
                        if (listed_as[remaining[i]]) unlist(remaining[i]);
                    drop_cache();
                }
                for (uint32_t i = 0; i < roots; ++i)
                    if (!committed(remaining[i])) mark_dirty(remaining[i]);
            }
            // Decide the dirty roots in order.
            while (dirty_count) {
                std::pop_heap(dirty, dirty + dirty_count, later);
                const uint32_t i = dirty[--dirty_count];
                is_dirty[i] = 0;
                const NodeId r = remaining[i];
                const bool wanted = !committed(r) && cover_before[r] == 0;
                if (listed_as[r] && !wanted) {
                    unlist(r);
                } else if (!listed_as[r] && wanted) {
                    if (!bits->built && !bits->given_up && bits_wanted() && bitset_check_due(largest_growth)) {
                        if (!finish_helper()) return Status::OutOfMemory;  // it reads the bitsets
                        if (!build_bits(device)) bits->given_up = true;
                    }
                    if (helper && !take_helper_root(r, i, dirty_count, device)) return Status::OutOfMemory;
                    if (!cache[r].valid) {
                        aim_view(r, i, dirty_count);
                        if (may_speculate && (helper || last_growth_size >= kSpeculateAfter) && !speculate(device))
                            return Status::OutOfMemory;
                        grow_sharing_round(device);
                        if (helper_out_of_memory) return Status::OutOfMemory;
                        last_growth_size = s_count + rejected_count;
                        if (s_count > largest_growth) largest_growth = s_count;
                        if (!store_candidate(r, device, *this)) return Status::OutOfMemory;
                    } else {
                        trace("  reuse the candidate of root %s\n", name(r));
                    }
                    listed_as[r] = ++listings;
                    ++listed_count;
                    cover(r, true);
                    if (largest.size > 2 * listed_count + 64) {  // drop the stale entries
                        uint32_t kept = 0;
                        for (uint32_t k = 0; k < largest.size; ++k)
                            if (current(largest[k])) largest[kept++] = largest[k];
                        largest.size = kept;
                        std::make_heap(largest.data, largest.data + kept, smaller);
                    }
                    if (!largest.push(Listed{cache[r].count, i, listed_as[r]})) return Status::OutOfMemory;
                    std::push_heap(largest.data, largest.data + largest.size, smaller);
                }
            }
            while (largest.size && !current(largest[0])) {
                std::pop_heap(largest.data, largest.data + largest.size, smaller);
                --largest.size;
            }
            TESSEL_ASSERT(largest.size);  // a remaining node is a root or covered by a listed candidate
            if (!finish_helper()) return Status::OutOfMemory;  // nothing may grow during a commit
            const NodeId best = remaining[largest[0].position];
            const Cached entry = cache[best];
            const NodeId* nodes = pool + entry.offset;
            trace_set("  commit ", nodes, entry.count);
            trace("\n");
            commit_reasons(entry, best, pending);
            if (!builder.commit(device, nodes, entry.count)) return Status::OutOfMemory;
            left -= entry.count;
            uint32_t lo = 0, hi = 0;
            contract(builder.subgraphs.size - 1, &lo, &hi);
            if (out_of_memory) return Status::OutOfMemory;
            if (bits->built && !bits->given_up) rebuild_bits(lo, hi);
            drop_entry(best);
            if (naive) continue;
            // Candidates the commit may change are stale (the committed one too): their roots
            // leave the listing now, while their nodes are still in the pool (the next
            // compaction reclaims it), and are decided again in this round's order.
            unlist(best);
            if (!invalidate_after_commit(builder.subgraphs.size - 1, lo, hi)) return Status::OutOfMemory;
            for (uint32_t i = 0; i < stale.size; ++i) {
                const NodeId r = stale[i];
                if (listed_as[r]) unlist(r);
                if (!committed(r)) mark_dirty(r);
            }
        }
        return Status::Ok;
    }
};

}  // namespace detail

namespace detail {

template <class T, class Less>
void sort_by(T* a, uint32_t n, Less less) { std::sort(a, a + n, less); }  // introsort: no allocation

// >>levels
//
// The clustering note's idea: an edge weighs 1 when its ends must be apart (keep-apart) or
// differ in affinity, else 0; level(v) = the longest weighted path to v. Clusters are the
// connected groups of weight-0 edges whose ends share a level.
// Why the result is acyclic: for an edge u -> v, level(v) >= level(u) + w. Between two
// clusters, either w = 1 and the level rises, or w = 0 and level(v) > level(u) (equal levels
// joined by a weight-0 edge would be one cluster). So levels strictly rise along every
// edge between clusters, and no cycle of clusters can exist. Keep-apart ends differ in level.
Status partition_levels(const Graph& graph, Builder& builder) {
    const uint32_t n = graph.node_count();
    Arena* arena = builder.arena;
    uint32_t* level = fill_array<uint32_t>(arena, n, 0);
    NodeId* parent = arena->allocate_array<NodeId>(n);  // union-find over weight-0 same-level edges
    NodeId* raised_by = fill_array<NodeId>(arena, n, kNoNode);
    uint8_t* raised_keep_apart = fill_array<uint8_t>(arena, n, 0);
    DeviceId* device = arena->allocate_array<DeviceId>(n);  // dense copy: producers are read at random
    if (!level || !parent || !raised_by || !raised_keep_apart || !device) return Status::OutOfMemory;
    for (NodeId id = 0; id < n; ++id) { device[id] = graph.node(id).affinity; parent[id] = id; }
    auto find = [parent](NodeId x) {
        while (parent[x] != x) { parent[x] = parent[parent[x]]; x = parent[x]; }
        return x;
    };
    // One pass in topological order: a node's level is final once its inputs are read, so
    // its weight-0 same-level edges are joined right away (while the node is in cache).
    for (NodeId id : graph.topological_order()) {
        const Node& node = graph.node(id);
        bool any_apart = false;
        // The highest level[u] + w, raised by a weight-1 edge when one ties; selects, not
        // branches (the comparisons are random on real graphs).
        uint32_t best = 0;
        NodeId by = kNoNode;
        bool by_apart = false;
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            NodeId u = node.inputs[i].producer;
            bool apart = node.inputs[i].keep_apart != 0;
            any_apart = any_apart || apart;
            uint32_t w = (uint32_t)(apart | (device[u] != node.affinity));
            uint32_t candidate = level[u] + w;
            bool take = candidate > best || (candidate == best && w && by == kNoNode);
            best = take ? candidate : best;
            by = take ? (w ? u : kNoNode) : by;
            by_apart = take ? apart : by_apart;
        }
        level[id] = best;
        raised_by[id] = by;
        raised_keep_apart[id] = by_apart;
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            NodeId u = node.inputs[i].producer;
            if (level[u] != level[id] || device[u] != node.affinity) continue;
            bool apart = false;  // any keep-apart edge from u, not only this one
            for (uint32_t j = 0; any_apart && j < node.num_inputs; ++j)
                apart = apart || (node.inputs[j].producer == u && node.inputs[j].keep_apart);
            if (apart) continue;
            NodeId a = find(u), b = find(id);
            if (a != b) { if (a < b) parent[b] = a; else parent[a] = b; }  // the smallest id leads
        }
    }
    // Clusters in order of (level, leader id): an execution order too.
    NodeId* leaders = arena->allocate_array<NodeId>(n);
    uint32_t* members = fill_array<uint32_t>(arena, n, 0);
    if (!leaders || !members) return Status::OutOfMemory;
    uint32_t leader_count = 0;
    for (NodeId id = 0; id < n; ++id) {
        NodeId root = find(id);
        if (root == id) leaders[leader_count++] = id;
        ++members[root];
    }
    sort_by(leaders, leader_count, [level](NodeId a, NodeId b) {
        return level[a] != level[b] ? level[a] < level[b] : a < b;
    });
    // Node lists per cluster by counting sort on the leader.
    uint32_t* offset = arena->allocate_array<uint32_t>(n);
    NodeId* grouped = arena->allocate_array<NodeId>(n);
    if (!offset || !grouped) return Status::OutOfMemory;
    uint32_t total = 0;
    for (uint32_t k = 0; k < leader_count; ++k) { offset[leaders[k]] = total; total += members[leaders[k]]; }
    for (NodeId id = 0; id < n; ++id) grouped[offset[find(id)]++] = id;
    total = 0;
    for (uint32_t k = 0; k < leader_count; ++k) {
        NodeId leader = leaders[k];
        uint32_t count = members[leader];
        for (uint32_t i = 0; i < count; ++i) {
            NodeId x = grouped[total + i];
            if (raised_by[x] != kNoNode)
                builder.placements[x] = Placement{raised_keep_apart[x] ? PlacementReason::KeepApart : PlacementReason::DeviceBoundary, raised_by[x]};
            else
                builder.placements[x] = Placement{x == leader ? PlacementReason::Root : PlacementReason::Grown, x == leader ? kNoNode : leader};
        }
        if (!builder.commit(graph.node(leader).affinity, grouped + total, count)) return Status::OutOfMemory;
        total += count;
    }
    return Status::Ok;
}

// >>waves
//
// Device-ordered topological waves: the current device absorbs every ready node it owns,
// including nodes that become ready meanwhile; then the next device with ready nodes (in
// priority order) takes over. A node whose keep-apart producer is in the open wave waits
// for the next one. Acyclic by construction: a wave reads only from earlier waves and
// itself, so the commit order is an execution order. O(V + E).
Status partition_waves(const Graph& graph, Builder& builder, const DeviceId* priority, uint32_t device_count) {
    const uint32_t n = graph.node_count();
    Arena* arena = builder.arena;
    uint32_t* pending = arena->allocate_array<uint32_t>(n);
    NodeId* ready = arena->allocate_array<NodeId>((size_t)n * device_count);  // a FIFO per device slot
    uint32_t* head = fill_array<uint32_t>(arena, device_count, 0);
    uint32_t* tail = fill_array<uint32_t>(arena, device_count, 0);
    uint32_t* slot_of = fill_array<uint32_t>(arena, 64, 0);
    NodeId* wave = arena->allocate_array<NodeId>(n);
    NodeId* deferred = arena->allocate_array<NodeId>(n);
    uint32_t* in_wave = fill_array<uint32_t>(arena, n, 0);
    NodeId* last_from = fill_array<NodeId>(arena, n, kNoNode);  // the producer that made a node ready
    uint8_t* slot = arena->allocate_array<uint8_t>(n);        // device slot per node, dense
    uint8_t* has_apart = arena->allocate_array<uint8_t>(n);   // node has a keep-apart input
    if (!pending || !ready || !head || !tail || !slot_of || !wave || !deferred || !in_wave || !last_from || !slot || !has_apart)
        return Status::OutOfMemory;
    for (uint32_t s = 0; s < device_count; ++s) slot_of[priority[s]] = s;
    const bool any_apart = graph.has_keep_apart();
    for (NodeId id = 0; id < n; ++id) {
        const Node& node = graph.node(id);
        slot[id] = (uint8_t)slot_of[node.affinity];
        has_apart[id] = 0;
        for (uint32_t i = 0; any_apart && i < node.num_inputs; ++i) has_apart[id] |= node.inputs[i].keep_apart;
    }
    auto push_ready = [&](NodeId x) {
        uint32_t s = slot[x];
        ready[(size_t)s * n + tail[s]++] = x;
    };
    for (NodeId id = 0; id < n; ++id) {
        pending[id] = (uint32_t)graph.predecessors(id).size;
        if (pending[id] == 0) push_ready(id);
    }
    uint32_t placed = 0, wave_number = 0, current = 0;
    bool have_current = false;
    while (placed < n) {
        // Next device: first in priority order with ready nodes, another than the last if possible.
        uint32_t next = device_count;
        for (uint32_t s = 0; s < device_count; ++s)
            if (head[s] < tail[s] && !(have_current && s == current)) { next = s; break; }
        if (next == device_count) next = current;
        TESSEL_ASSERT(head[next] < tail[next]);  // a DAG always has a ready node
        current = next;
        have_current = true;
        ++wave_number;
        uint32_t wave_size = 0, deferred_count = 0;
        while (head[current] < tail[current]) {
            NodeId x = ready[(size_t)current * n + head[current]++];
            bool apart = false;
            if (has_apart[x]) {
                const Node& node = graph.node(x);
                for (uint32_t i = 0; i < node.num_inputs; ++i)
                    if (node.inputs[i].keep_apart && in_wave[node.inputs[i].producer] == wave_number) apart = true;
            }
            if (apart) { deferred[deferred_count++] = x; continue; }
            in_wave[x] = wave_number;
            wave[wave_size++] = x;
            for (NodeId y : graph.successors(x)) {  // push_ready(y) once pending, without a branch
                last_from[y] = x;
                uint32_t s = slot[y];
                ready[(size_t)s * n + tail[s]] = y;  // overwritten later unless y is ready now
                tail[s] += --pending[y] == 0;
            }
        }
        head[current] = tail[current] = 0;  // drained: the deferred nodes start it again
        for (uint32_t i = 0; i < deferred_count; ++i) ready[(size_t)current * n + tail[current]++] = deferred[i];
        if (wave_size == 0) continue;  // only deferred nodes: they open the next wave
        for (uint32_t i = 0; i < wave_size; ++i) {
            NodeId x = wave[i];
            NodeId from = last_from[x];
            if (from != kNoNode && in_wave[from] != wave_number)
                builder.placements[x] = Placement{keep_apart_edge(graph, from, x) ? PlacementReason::KeepApart : PlacementReason::DeviceBoundary, from};
            else
                builder.placements[x] = Placement{i == 0 ? PlacementReason::Root : PlacementReason::Grown, i == 0 ? kNoNode : wave[0]};
        }
        if (!builder.assign(priority[current], wave, wave_size)) return Status::OutOfMemory;
        placed += wave_size;
    }
    return builder.build_lists() ? Status::Ok : Status::OutOfMemory;
}

// >>min-size post-pass
//
// Moves a subgraph smaller than the minimum into a neighbouring subgraph when the target's
// device supports all its nodes, no keep-apart edge joins them, and no path of subgraphs
// leads from one to the other through a third (that path would close a cycle).
inline bool device_allowed(const Graph& graph, const uint64_t* supported, NodeId x, DeviceId device) {
    if (graph.node(x).affinity == device) return true;
    return supported && device < 64 && (supported[x] >> device & 1);
}

struct SubgraphSearch {  // BFS over subgraphs, with successors found through node edges
    const Graph& graph;
    const uint32_t* subgraph_of;
    const NodeId** members;  // per subgraph: node list
    uint32_t* member_count;
    uint32_t* seen;
    uint32_t stamp = 0;
    uint32_t* queue;
    // True if `to` is reachable from `from` through at least one other subgraph.
    bool indirect(uint32_t from, uint32_t to) {
        ++stamp;
        uint32_t head = 0, tail = 0;
        seen[from] = stamp;
        auto push_successors = [&](uint32_t sub) {
            for (uint32_t i = 0; i < member_count[sub]; ++i)
                for (NodeId y : graph.successors(members[sub][i])) {
                    uint32_t t = subgraph_of[y];
                    if (seen[t] == stamp || t == to) continue;
                    seen[t] = stamp;
                    queue[tail++] = t;
                }
        };
        push_successors(from);
        while (head < tail) {
            uint32_t sub = queue[head++];
            for (uint32_t i = 0; i < member_count[sub]; ++i)
                for (NodeId y : graph.successors(members[sub][i]))
                    if (subgraph_of[y] == to) return true;
            push_successors(sub);
        }
        return false;
    }
};

Status merge_small_subgraphs(const Graph& graph, Builder& builder, uint32_t minimum, const uint64_t* supported) {
    const uint32_t count = builder.subgraphs.size;
    Arena* arena = builder.arena;
    // Node lists start as the subgraphs' own (sorted); a merge makes a new sorted list.
    const NodeId** members = arena->allocate_array<const NodeId*>(count);
    uint32_t* member_count = arena->allocate_array<uint32_t>(count);
    DeviceId* device = arena->allocate_array<DeviceId>(count);
    uint32_t* seen = fill_array<uint32_t>(arena, count, 0);
    uint32_t* queue = arena->allocate_array<uint32_t>(count);
    if (!members || !member_count || !device || !seen || !queue) return Status::OutOfMemory;
    for (uint32_t k = 0; k < count; ++k) {
        members[k] = builder.subgraphs[k].nodes.data;
        member_count[k] = (uint32_t)builder.subgraphs[k].nodes.size;
        device[k] = builder.subgraphs[k].device;
    }
    SubgraphSearch search{graph, builder.subgraph_of, members, member_count, seen, 0, queue};
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t x = 0; x < count; ++x) {
            if (member_count[x] == 0 || member_count[x] >= minimum) continue;
            // Neighbouring subgraphs in order of first encounter (inputs first).
            for (uint32_t pass = 0; pass < 2; ++pass) {
                uint32_t target = kUnplaced;
                for (uint32_t i = 0; i < member_count[x] && target == kUnplaced; ++i) {
                    NodeId v = members[x][i];
                    Span<const NodeId> neighbours = pass == 0 ? graph.predecessors(v) : graph.successors(v);
                    for (NodeId u : neighbours) {
                        uint32_t y = builder.subgraph_of[u];
                        if (y == x) continue;
                        bool ok = true;
                        for (uint32_t j = 0; j < member_count[x] && ok; ++j)
                            ok = device_allowed(graph, supported, members[x][j], device[y]);
                        for (uint32_t j = 0; j < member_count[x] && ok; ++j) {
                            NodeId a = members[x][j];
                            for (NodeId b : graph.predecessors(a)) if (builder.subgraph_of[b] == y && keep_apart_edge(graph, a, b)) ok = false;
                            for (NodeId b : graph.successors(a)) if (builder.subgraph_of[b] == y && keep_apart_edge(graph, a, b)) ok = false;
                        }
                        if (ok && (search.indirect(x, y) || search.indirect(y, x))) ok = false;
                        if (ok) { target = y; break; }
                    }
                }
                if (target == kUnplaced) continue;
                NodeId* merged = arena->allocate_array<NodeId>(member_count[x] + member_count[target]);
                if (!merged) return Status::OutOfMemory;
                uint32_t m = 0;
                for (uint32_t i = 0; i < member_count[target]; ++i) merged[m++] = members[target][i];
                for (uint32_t i = 0; i < member_count[x]; ++i) {
                    NodeId v = members[x][i];
                    merged[m++] = v;
                    builder.subgraph_of[v] = target;
                    builder.placements[v] = Placement{PlacementReason::Merged, members[target][0]};
                }
                Builder::sort(merged, m);
                members[target] = merged;
                member_count[target] = m;
                member_count[x] = 0;
                changed = true;
                break;
            }
        }
    }
    // Rebuild the subgraph list without the emptied ones, keeping commit order.
    ArenaVector<Subgraph> rebuilt;
    rebuilt.arena = arena;
    uint32_t* renumber = arena->allocate_array<uint32_t>(count);
    if (!renumber) return Status::OutOfMemory;
    for (uint32_t k = 0; k < count; ++k) {
        renumber[k] = kUnplaced;
        if (member_count[k] == 0) continue;
        Subgraph subgraph;
        subgraph.device = device[k];
        subgraph.nodes = Span<const NodeId>(members[k], member_count[k]);
        renumber[k] = rebuilt.size;
        if (!rebuilt.push(subgraph)) return Status::OutOfMemory;
    }
    for (NodeId v = 0; v < graph.node_count(); ++v) builder.subgraph_of[v] = renumber[builder.subgraph_of[v]];
    builder.subgraphs = rebuilt;
    return Status::Ok;
}

}  // namespace detail

// >>partition names
const char* algorithm_name(PartitionAlgorithm algorithm) {
    switch (algorithm) {
        case PartitionAlgorithm::Rollback: return "rollback";
        case PartitionAlgorithm::Levels: return "levels";
        case PartitionAlgorithm::Waves: return "waves";
    }
    return "unknown";
}

Status parse_algorithm(StringView name, PartitionAlgorithm* algorithm) {
    const PartitionAlgorithm all[] = {PartitionAlgorithm::Rollback, PartitionAlgorithm::Levels, PartitionAlgorithm::Waves};
    for (PartitionAlgorithm a : all)
        if (name == StringView(algorithm_name(a))) { *algorithm = a; return Status::Ok; }
    return Status::InvalidArgument;
}

const char* reason_name(PlacementReason reason) {
    switch (reason) {
        case PlacementReason::Root: return "root";
        case PlacementReason::Grown: return "grown";
        case PlacementReason::CycleThrough: return "cycle-through";
        case PlacementReason::KeepApart: return "keep-apart";
        case PlacementReason::DeviceBoundary: return "device-boundary";
        case PlacementReason::Merged: return "merged";
    }
    return "unknown";
}

// >>partition finish
namespace detail {
TESSEL_PRINTF_FORMAT(3, 4)
inline Status partition_fail(Partition* result, Status status, const char* format, ...) {
    va_list args;
    va_start(args, format);
    format_message(result->error, sizeof result->error, format, args);
    va_end(args);
    return status;
}

// Execution order of the subgraphs, boundary tensors and cross-edge count. When the commit
// order is already an execution order (levels and waves commit in topological order, see
// their proofs), it is taken as is; else Kahn's algorithm orders the subgraphs.
Status finish_partition(const Graph& graph, Builder& builder, Partition* result, bool commit_order_runs) {
    Arena* arena = builder.arena;
    const uint32_t n = graph.node_count();
    const uint32_t count = builder.subgraphs.size;
    // Boundaries: each (producer, port, consumer subgraph) once, in the order consumers
    // first need them. Consumers are visited in id order (the node table is read straight
    // through); an open-addressing set of those keys, at most half full, drops repeats.
    // Cross edges are gathered into a batch without a branch (whether an edge crosses is
    // unpredictable on real graphs), then looked up in order.
    ArenaVector<BoundaryTensor> found;
    found.arena = arena;
    uint32_t table_size = 16;
    while (table_size < 2ull * graph.edge_count()) table_size *= 2;
    uint32_t* table = fill_array<uint32_t>(arena, table_size, kUnplaced);  // index into `found`
    if (!table) return Status::OutOfMemory;
    uint32_t cross_edges = 0;
    constexpr uint32_t kBatch = 128;
    BoundaryTensor batch[kBatch];
    uint32_t batch_size = 0;
    auto insert_batch = [&]() {
        cross_edges += batch_size;
        for (uint32_t k = 0; k < batch_size; ++k) {
            const BoundaryTensor& e = batch[k];
            uint64_t key = ((uint64_t)e.producer << 32) ^ ((uint64_t)e.port << 20) ^ e.to_subgraph;
            uint32_t slot = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (table_size - 1);
            bool known = false;
            while (table[slot] != kUnplaced) {
                const BoundaryTensor& b = found[table[slot]];
                if (b.producer == e.producer && b.port == e.port && b.to_subgraph == e.to_subgraph) { known = true; break; }
                slot = (slot + 1) & (table_size - 1);
            }
            if (known) continue;
            table[slot] = found.size;
            if (!found.push(e)) return false;
        }
        batch_size = 0;
        return true;
    };
    for (NodeId c = 0; c < n; ++c) {
        const Node& consumer = graph.node(c);
        const uint32_t to = builder.subgraph_of[c];
        for (uint32_t i = 0; i < consumer.num_inputs; ++i) {
            const NodeId p = consumer.inputs[i].producer;
            const uint32_t from = builder.subgraph_of[p];
            batch[batch_size] = BoundaryTensor{p, consumer.inputs[i].port, c, from, to};
            batch_size += from != to;
            if (batch_size == kBatch && !insert_batch()) return Status::OutOfMemory;
        }
    }
    if (!insert_batch()) return Status::OutOfMemory;
    BoundaryTensor* boundaries = found.data;
    const uint32_t boundary_count = found.size;
    result->subgraphs = Span<const Subgraph>(builder.subgraphs.data, count);
    result->subgraph_of = Span<const uint32_t>(builder.subgraph_of, n);
    result->placements = Span<const Placement>(builder.placements, n);
    result->boundaries = Span<const BoundaryTensor>(boundaries, boundary_count);
    result->cross_edges = cross_edges;
    uint32_t* execution = arena->allocate_array<uint32_t>(count);
    if (!execution) return Status::OutOfMemory;
    result->execution_order = Span<const uint32_t>(execution, count);
    if (commit_order_runs) {
        for (uint32_t k = 0; k < count; ++k) execution[k] = k;
        return Status::Ok;
    }
    // Kahn over subgraphs, smallest commit index first among the ready.
    uint32_t* indegree = fill_array<uint32_t>(arena, count, 0);
    if (!indegree) return Status::OutOfMemory;
    // Edges between subgraphs, deduplicated through the sorted boundaries (producer side
    // may repeat per consumer subgraph; a pair counted twice is harmless for Kahn if it is
    // also decremented twice, so count every boundary).
    uint32_t* out_offset = fill_array<uint32_t>(arena, (size_t)count + 1, 0);
    uint32_t* out = arena->allocate_array<uint32_t>(boundary_count);
    if (!out_offset || !out) return Status::OutOfMemory;
    for (uint32_t i = 0; i < boundary_count; ++i) ++out_offset[boundaries[i].from_subgraph + 1];
    for (uint32_t k = 0; k < count; ++k) out_offset[k + 1] += out_offset[k];
    uint32_t* cursor = arena->allocate_array<uint32_t>((size_t)count + 1);
    if (!cursor) return Status::OutOfMemory;
    for (uint32_t k = 0; k <= count; ++k) cursor[k] = out_offset[k];
    for (uint32_t i = 0; i < boundary_count; ++i) {
        out[cursor[boundaries[i].from_subgraph]++] = boundaries[i].to_subgraph;
        ++indegree[boundaries[i].to_subgraph];
    }
    // Min-heap of ready subgraph indices.
    uint32_t* heap = arena->allocate_array<uint32_t>(count);
    if (!heap) return Status::OutOfMemory;
    uint32_t heap_size = 0, done = 0;
    auto push = [&](uint32_t k) {
        uint32_t i = heap_size++;
        while (i > 0 && heap[(i - 1) / 2] > k) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
        heap[i] = k;
    };
    auto pop = [&]() {
        uint32_t top = heap[0], last = heap[--heap_size], i = 0;
        for (;;) {
            uint32_t c = 2 * i + 1;
            if (c >= heap_size) break;
            if (c + 1 < heap_size && heap[c + 1] < heap[c]) ++c;
            if (heap[c] >= last) break;
            heap[i] = heap[c];
            i = c;
        }
        if (heap_size) heap[i] = last;
        return top;
    };
    for (uint32_t k = 0; k < count; ++k) if (indegree[k] == 0) push(k);
    while (heap_size) {
        uint32_t k = pop();
        execution[done++] = k;
        for (uint32_t e = out_offset[k]; e < out_offset[k + 1]; ++e) if (--indegree[out[e]] == 0) push(out[e]);
    }
    TESSEL_ASSERT(done == count);  // every algorithm's result is acyclic
    return Status::Ok;
}
}  // namespace detail

// >>partition entry
Status partition(const Graph& graph, const PartitionOptions& options, Arena* arena, Partition* result) {
    result->error[0] = 0;
    result->algorithm = options.algorithm;
    result->subgraphs = Span<const Subgraph>();
    result->subgraph_of = Span<const uint32_t>();
    result->placements = Span<const Placement>();
    result->boundaries = Span<const BoundaryTensor>();
    result->execution_order = Span<const uint32_t>();
    result->cross_edges = 0;
    if (!graph.finalized()) return detail::partition_fail(result, Status::NotFinalized, "partition: the graph is not finalized");
    const uint32_t n = graph.node_count();
    // Device priority: the given order, or order of first appearance (device ids).
    DeviceId priority[64];
    uint32_t device_count = 0;
    if (options.devices.size) {
        if (options.devices.size > 64) return detail::partition_fail(result, Status::LimitExceeded, "more than 64 devices");
        for (StringView name : options.devices) {
            DeviceId id = graph.find_device(name);
            for (uint32_t k = 0; k < device_count; ++k)
                if (id != kNoDevice && priority[k] == id)
                    return detail::partition_fail(result, Status::InvalidArgument, "device '%.*s' is listed twice", (int)name.size, name.data);
            if (id == kNoDevice) continue;  // a listed device no node uses
            priority[device_count++] = id;
        }
    } else {
        for (uint32_t d = 0; d < graph.device_count(); ++d) priority[device_count++] = (DeviceId)d;
    }
    bool listed[64] = {};
    for (uint32_t k = 0; k < device_count; ++k) listed[priority[k]] = true;
    for (NodeId id = 0; id < n; ++id) {
        const Node& node = graph.node(id);
        if (node.affinity == kNoDevice)
            return detail::partition_fail(result, Status::InvalidArgument, "node '%s' has no affinity", node.name.data);
        if (!listed[node.affinity])
            return detail::partition_fail(result, Status::InvalidArgument, "node '%s' has affinity '%s', which is not in the device list",
                                          node.name.data, graph.device_name(node.affinity).data);
    }
    if (n >= 0x80000000u)  // rollback tags work items with the top bit
        return detail::partition_fail(result, Status::LimitExceeded, "partition: more than 2^31 - 1 nodes");
    detail::Builder builder(graph, arena);
    if (!builder.init()) return detail::partition_fail(result, Status::OutOfMemory, "out of memory");
    Status status = Status::Ok;
    uint32_t helper_growths = 0, bitset_growths = 0, bitset_fallbacks = 0;
    switch (options.algorithm) {
        case PartitionAlgorithm::Rollback: {
            detail::RollbackContext context(graph, arena, builder, options);
            status = context.init();
            if (status == Status::LimitExceeded)
                return detail::partition_fail(result, status, "naive closure needs %zu bytes, above max_closure_bytes=%zu",
                                              (size_t)n * (((size_t)n + 63) / 64) * 8, options.tuning.max_closure_bytes);
            Placement* pending = detail::fill_array<Placement>(arena, n, Placement());
            if (!pending) status = Status::OutOfMemory;
            for (uint32_t k = 0; k < device_count && status == Status::Ok; ++k) status = context.run_device(priority[k], pending);
            helper_growths = context.helper_growths;
            bitset_growths = context.bits_growths + (context.helper ? context.helper->bits_growths : 0);
            bitset_fallbacks = context.bits_fallbacks + (context.helper ? context.helper->bits_fallbacks : 0);
            break;
        }
        case PartitionAlgorithm::Levels: status = detail::partition_levels(graph, builder); break;
        case PartitionAlgorithm::Waves: status = detail::partition_waves(graph, builder, priority, device_count); break;
    }
    const bool merge_small = options.min_subgraph_size > 1;
    if (status == Status::Ok && merge_small)
        status = detail::merge_small_subgraphs(graph, builder, options.min_subgraph_size, options.supported);
    const bool commit_order_runs = options.algorithm != PartitionAlgorithm::Rollback && !merge_small;
    if (status == Status::Ok) status = detail::finish_partition(graph, builder, result, commit_order_runs);
    if (status != Status::Ok) return detail::partition_fail(result, status, "partition: %s", status_name(status));
    result->helper_growths = helper_growths;
    result->bitset_growths = bitset_growths;
    result->bitset_fallbacks = bitset_fallbacks;
    return Status::Ok;
}

// >>check_partition
Status check_partition(const Graph& graph, Partition* partition, const uint64_t* supported) {
    const uint32_t n = graph.node_count();
    const uint32_t count = (uint32_t)partition->subgraphs.size;
    if (!graph.finalized()) return detail::partition_fail(partition, Status::NotFinalized, "the graph is not finalized");
    if (partition->subgraph_of.size != n)
        return detail::partition_fail(partition, Status::InvalidPartition, "subgraph_of has %zu entries for %u nodes",
                                      partition->subgraph_of.size, n);
    // Scratch: seen-per-node, then subgraph in-degrees and a queue for Kahn.
    size_t bytes = sizeof(uint32_t) * ((size_t)n + 2 * (size_t)count + 2);
    uint32_t* scratch = static_cast<uint32_t*>(TESSEL_MALLOC(bytes));
    if (!scratch) return detail::partition_fail(partition, Status::OutOfMemory, "out of memory checking a partition");
    struct Free { void* p; ~Free() { TESSEL_FREE(p); } } free_scratch{scratch};
    uint32_t* seen = scratch;
    for (uint32_t i = 0; i < n; ++i) seen[i] = detail::kUnplaced;
    for (uint32_t k = 0; k < count; ++k) {
        const Subgraph& subgraph = partition->subgraphs[k];
        if (subgraph.nodes.size == 0) return detail::partition_fail(partition, Status::InvalidPartition, "subgraph %u is empty", k);
        for (NodeId v : subgraph.nodes) {
            if (v >= n) return detail::partition_fail(partition, Status::InvalidPartition, "subgraph %u lists node #%u, which does not exist", k, v);
            const char* name = graph.node(v).name.data;
            if (seen[v] != detail::kUnplaced)
                return detail::partition_fail(partition, Status::InvalidPartition, "node '%s' is in subgraphs %u and %u", name, seen[v], k);
            seen[v] = k;
            if (partition->subgraph_of[v] != k)
                return detail::partition_fail(partition, Status::InvalidPartition, "node '%s' is listed in subgraph %u but subgraph_of says %u",
                                              name, k, partition->subgraph_of[v]);
            if (!detail::device_allowed(graph, supported, v, subgraph.device))
                return detail::partition_fail(partition, Status::InvalidPartition, "node '%s' (affinity %s) is in subgraph %u of device %s",
                                              name, graph.device_name(graph.node(v).affinity).data, k, graph.device_name(subgraph.device).data);
        }
    }
    for (NodeId v = 0; v < n; ++v)
        if (seen[v] == detail::kUnplaced)
            return detail::partition_fail(partition, Status::InvalidPartition, "node '%s' is in no subgraph", graph.node(v).name.data);
    // Boundaries sorted in scratch, then every crossing edge is looked up.
    auto boundary_less = [](const BoundaryTensor& a, const BoundaryTensor& b) {
        if (a.producer != b.producer) return a.producer < b.producer;
        if (a.port != b.port) return a.port < b.port;
        if (a.from_subgraph != b.from_subgraph) return a.from_subgraph < b.from_subgraph;
        return a.to_subgraph < b.to_subgraph;
    };
    const uint32_t boundary_count = (uint32_t)partition->boundaries.size;
    BoundaryTensor* sorted = static_cast<BoundaryTensor*>(TESSEL_MALLOC(sizeof(BoundaryTensor) * (boundary_count + 1)));
    if (!sorted) return detail::partition_fail(partition, Status::OutOfMemory, "out of memory checking a partition");
    struct FreeSorted { void* p; ~FreeSorted() { TESSEL_FREE(p); } } free_sorted{sorted};
    for (uint32_t i = 0; i < boundary_count; ++i) sorted[i] = partition->boundaries[i];
    detail::sort_by(sorted, boundary_count, boundary_less);
    uint32_t cross = 0;
    for (NodeId v = 0; v < n; ++v) {
        const Node& node = graph.node(v);
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            NodeId p = node.inputs[i].producer;
            if (seen[p] == seen[v]) {
                if (node.inputs[i].keep_apart)
                    return detail::partition_fail(partition, Status::InvalidPartition, "keep-apart nodes '%s' and '%s' share subgraph %u",
                                                  graph.node(p).name.data, node.name.data, seen[v]);
                continue;
            }
            ++cross;
            BoundaryTensor key{p, node.inputs[i].port, v, seen[p], seen[v]};
            if (!std::binary_search(sorted, sorted + boundary_count, key, boundary_less))
                return detail::partition_fail(partition, Status::InvalidPartition, "no boundary tensor for '%s' port %u into subgraph %u",
                                              graph.node(p).name.data, node.inputs[i].port, seen[v]);
        }
    }
    if (cross != partition->cross_edges)
        return detail::partition_fail(partition, Status::InvalidPartition, "cross_edges says %u, counted %u", partition->cross_edges, cross);
    // Acyclic graph of subgraphs, and execution_order a topological order of it.
    uint32_t* position = scratch + n;
    if (partition->execution_order.size != count)
        return detail::partition_fail(partition, Status::InvalidPartition, "execution_order has %zu entries for %u subgraphs",
                                      partition->execution_order.size, count);
    for (uint32_t k = 0; k < count; ++k) position[k] = detail::kUnplaced;
    for (uint32_t i = 0; i < count; ++i) {
        uint32_t k = partition->execution_order[i];
        if (k >= count || position[k] != detail::kUnplaced)
            return detail::partition_fail(partition, Status::InvalidPartition, "execution_order is not a permutation");
        position[k] = i;
    }
    for (NodeId v = 0; v < n; ++v)
        for (NodeId p : graph.predecessors(v))
            if (seen[p] != seen[v] && position[seen[p]] > position[seen[v]]) {
                // Either the order is wrong or the subgraphs form a cycle: tell which.
                uint32_t* indegree = scratch + n + count;
                for (uint32_t k = 0; k < count; ++k) indegree[k] = 0;
                // Count subgraph edges with multiplicity (node edges), then Kahn by rescanning.
                for (NodeId x = 0; x < n; ++x)
                    for (NodeId q : graph.predecessors(x)) if (seen[q] != seen[x]) ++indegree[seen[x]];
                uint32_t removed = 0;
                bool progress = true;
                while (progress) {  // quadratic, but only on the error path
                    progress = false;
                    for (uint32_t k = 0; k < count; ++k) {
                        if (indegree[k] != 0) continue;
                        indegree[k] = detail::kUnplaced;
                        ++removed;
                        progress = true;
                        for (NodeId x : partition->subgraphs[k].nodes)
                            for (NodeId y : graph.successors(x)) if (seen[y] != k && indegree[seen[y]] != detail::kUnplaced) --indegree[seen[y]];
                    }
                }
                if (removed < count)
                    return detail::partition_fail(partition, Status::InvalidPartition, "the graph of subgraphs has a cycle (through subgraph %u)",
                                                  seen[v]);
                return detail::partition_fail(partition, Status::InvalidPartition, "execution_order runs subgraph %u before its producer %u",
                                              seen[v], seen[p]);
            }
    return Status::Ok;
}

// >>affinities and placements
Status assign_affinities(Graph* graph, Span<const StringView> devices, const uint64_t* supported) {
    DeviceId ids[64];
    if (devices.size > 64) return graph->fail(Status::LimitExceeded, "more than 64 devices");
    for (size_t i = 0; i < devices.size; ++i) {
        TESSEL_TRY(graph->intern_device(devices[i], &ids[i]));
    }
    for (NodeId v = 0; v < graph->node_count(); ++v) {
        if (graph->node(v).affinity != kNoDevice) continue;
        bool done = false;
        for (size_t i = 0; i < devices.size && !done; ++i)
            if (ids[i] < 64 && supported && (supported[v] >> ids[i] & 1)) {
                TESSEL_TRY(graph->set_affinity(v, devices[i]));
                done = true;
            }
        if (!done) return graph->fail(Status::InvalidArgument, "no listed device supports node '%s'", graph->node(v).name.data);
    }
    return Status::Ok;
}

void write_placements(const Graph& graph, const Partition& partition, WriteFn write, void* user) {
    for (NodeId v = 0; v < graph.node_count() && v < partition.subgraph_of.size; ++v) {
        const Node& node = graph.node(v);
        uint32_t k = partition.subgraph_of[v];
        const Placement& p = partition.placements[v];
        StringView device = graph.device_name(partition.subgraphs[k].device);
        StringView other = p.other != kNoNode ? graph.node(p.other).name : StringView();
        detail::write_format(write, user, "%.*s %.*s subgraph=%u %s%s%.*s\n", (int)node.name.size, node.name.data,
                             (int)device.size, device.data, k, reason_name(p.reason), other.size ? " " : "",
                             (int)other.size, other.data);
    }
}

// >>dot implementation
void write_dot(const Graph& graph, const Partition* partition, WriteFn write, void* user) {
    static const char* const kPalette[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                                           "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};
    const uint32_t palette_size = sizeof kPalette / sizeof kPalette[0];
    auto write_escaped = [&](StringView text) {  // inside a DOT string
        for (char c : text) {
            if (c == '"' || c == '\\') write(user, "\\", 1);
            if (c == '\n') { write(user, "\\n", 2); continue; }
            write(user, &c, 1);
        }
    };
    auto write_node = [&](NodeId id, const char* indent) {
        const Node& node = graph.node(id);
        StringView device = node.affinity == kNoDevice ? StringView("-") : graph.device_name(node.affinity);
        const char* colour = node.affinity == kNoDevice ? "#ffffff" : kPalette[node.affinity % palette_size];
        detail::write_format(write, user, "%sn%u [label=\"", indent, id);
        write_escaped(node.name);
        write(user, "\\n", 2);
        write_escaped(device);
        detail::write_format(write, user, "\", style=filled, fillcolor=\"%s\"]\n", colour);
    };
    detail::write_format(write, user, "digraph tessel {\n  node [shape=box, fontname=\"Helvetica\"];\n");
    if (partition && partition->subgraph_of.size == graph.node_count()) {
        for (uint32_t k = 0; k < partition->subgraphs.size; ++k) {
            const Subgraph& subgraph = partition->subgraphs[k];
            StringView device = graph.device_name(subgraph.device);
            detail::write_format(write, user, "  subgraph cluster_%u {\n    label=\"#%u ", k, k);
            write_escaped(device);
            detail::write_format(write, user, "\";\n");
            for (NodeId id : subgraph.nodes) write_node(id, "    ");
            detail::write_format(write, user, "  }\n");
        }
    } else {
        for (NodeId id = 0; id < graph.node_count(); ++id) write_node(id, "  ");
    }
    for (NodeId id = 0; id < graph.node_count(); ++id) {
        const Node& node = graph.node(id);
        for (uint32_t i = 0; i < node.num_inputs; ++i) {
            if (node.inputs[i].producer >= graph.node_count()) continue;  // not finalized: skip
            detail::write_format(write, user, "  n%u -> n%u%s;\n", node.inputs[i].producer, id,
                                 node.inputs[i].keep_apart ? " [style=dashed]" : "");
        }
    }
    detail::write_format(write, user, "}\n");
}

}  // namespace tessel
#endif  // TESSEL_IMPLEMENTATION
