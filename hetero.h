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

   Config macros (define before including, the same in every translation unit)
   ---------------------------------------------------------------------------
       TESSEL_ASSERT(x)            the library's own invariants (default: print and abort).
                                   Bad input never reaches an assert: it returns a Status.
       TESSEL_MALLOC(n)/TESSEL_FREE(p)  all heap use (default malloc/free). A test may count or
                                   fail allocations through them.

   Errors
   ------
   Fallible calls return `tessel::Status` ([[nodiscard]]); the object they act on keeps a
   readable message in `last_error()` (a fixed buffer, never allocated). No exceptions, no RTTI.

   Memory
   ------
   Graphs and partitions live in an `Arena`: a bump allocator over blocks from TESSEL_MALLOC,
   or over a caller's fixed buffer (firmware), in which case it never mallocs and exhaustion
   returns Status::OutOfMemory. Nothing is freed one by one: `reset()` or the arena's
   destructor frees everything at once. Measured cost: see README (bytes per node).

   Threading
   ---------
   A Graph is built by one thread. After `finalize()` every const query may be called from
   any number of threads. An Arena is not thread safe.

   Limits and threat model
   -----------------------
   Node ids are 32-bit (at most 2^32-2 nodes), ports 16-bit, tensor rank at most 8.
   The text reader and finalize() accept any bytes: malformed input returns ParseError,
   DuplicateName, DanglingInput, PortOutOfRange or Cycle with a message naming the line or
   the nodes, never a crash. Recursion is never used on graph data, so deep graphs cannot
   overflow the stack.
*/
#ifndef TESSEL_HETERO_H
#define TESSEL_HETERO_H

#define TESSEL_VERSION_MAJOR 0
#define TESSEL_VERSION_MINOR 1
#define TESSEL_VERSION_PATCH 0

#include <cstddef>
#include <cstdint>

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
#endif

namespace tessel {

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
    IoError,           // a file could not be read or written
};
const char* status_name(Status status);

// Declares a status as deliberately unused (for example an error that is reported elsewhere).
inline void ignore_status(Status) {}

// >>small types
struct StringView {
    const char* data = nullptr;
    size_t size = 0;
    constexpr StringView() = default;
    constexpr StringView(const char* d, size_t n) : data(d), size(n) {}
    StringView(const char* zero_terminated);  // NOLINT: implicit on purpose
    bool empty() const { return size == 0; }
    char operator[](size_t i) const { return data[i]; }
    const char* begin() const { return data; }
    const char* end() const { return data + size; }
};
bool operator==(StringView a, StringView b);
inline bool operator!=(StringView a, StringView b) { return !(a == b); }

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
    Arena();                                  // grows in blocks from TESSEL_MALLOC
    explicit Arena(size_t block_bytes);       // same, with a chosen minimum block size
    Arena(void* buffer, size_t bytes);        // fixed buffer: never mallocs
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    // nullptr when exhausted (or when bytes overflows); align must be a power of two.
    void* allocate(size_t bytes, size_t align = alignof(std::max_align_t));
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
    Block* head_ = nullptr;        // current block (heap mode); blocks are chained
    unsigned char* fixed_ = nullptr;
    size_t fixed_size_ = 0;
    size_t offset_ = 0;            // in the current block or the fixed buffer
    size_t used_ = 0;
    size_t reserved_ = 0;
    size_t block_bytes_ = 64 * 1024;
};

// >>graph types
using NodeId = uint32_t;
constexpr NodeId kNoNode = 0xffffffffu;
using DeviceId = uint16_t;
constexpr DeviceId kNoDevice = 0xffffu;
constexpr int kMaxRank = 8;

enum class ElementType : uint8_t { Undefined = 0, Float32, Float16, Int64, Int32, Int8, UInt8, Bool };
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

enum class AttributeKind : uint8_t { Int, Float, String, Ints, Floats, Tensor };
struct Attribute {
    StringView name;
    AttributeKind kind = AttributeKind::Int;
    int64_t i = 0;
    float f = 0;
    StringView s;
    Span<const int64_t> ints;
    Span<const float> floats;
    const ConstTensor* tensor = nullptr;
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
    Status set_output_desc(NodeId node, uint32_t port, const TensorDesc& desc);
    Status set_affinity(NodeId node, StringView device);            // empty clears it

    // Resolves names, checks ports, builds successor/predecessor arrays and a topological
    // order. Errors: DuplicateName, DanglingInput, PortOutOfRange, Cycle, OutOfMemory.
    Status finalize();
    bool finalized() const { return finalized_; }

    uint32_t node_count() const { return node_count_; }
    const Node& node(NodeId id) const;
    NodeId find(StringView name) const;                    // kNoNode if absent (after finalize)
    const Attribute* find_attribute(NodeId node, StringView name) const;

    // Valid after finalize(). Inputs of a node are its Edge array; successors are unique
    // consumer ids in ascending order (a consumer reading twice is listed once).
    Span<const NodeId> successors(NodeId id) const;
    Span<const NodeId> predecessors(NodeId id) const;      // unique producers, ascending
    Span<const NodeId> topological_order() const;
    uint32_t edge_count() const { return edge_count_; }

    // Devices named by affinities, in order of first appearance.
    uint32_t device_count() const { return device_count_; }
    StringView device_name(DeviceId id) const;
    DeviceId find_device(StringView name) const;           // kNoDevice if absent
    Status intern_device(StringView name, DeviceId* id);

    Arena* arena() const { return arena_; }
    const char* last_error() const { return error_; }
    Status fail(Status status, const char* format, ...) const
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;

private:
    Node* node_mutable(NodeId id);
    Status grow_blocks();

    static constexpr uint32_t kBlockShift = 12;  // nodes are stored in blocks of 4096
    Arena* arena_;
    Node** blocks_ = nullptr;
    uint32_t block_capacity_ = 0;
    uint32_t node_count_ = 0;
    uint32_t edge_count_ = 0;
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
    mutable char error_[256] = {};
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
    Span<const Subgraph> subgraphs;          // commit order, which is also an execution order
    Span<const uint32_t> subgraph_of;        // per node
    Span<const Placement> placements;        // per node
    Span<const BoundaryTensor> boundaries;   // unique (producer, port, to_subgraph)
    uint32_t cross_edges = 0;                // input edges whose ends lie in different subgraphs
    const char* last_error() const { return error; }
    char error[256] = {};
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
    // Rollback only: trace each step in the seed's words; naive_closure uses the full V^2
    // bitset closure (the test oracle; refused above max_closure_bytes).
    WriteFn trace = nullptr;
    void* trace_user = nullptr;
    bool naive_closure = false;
    size_t max_closure_bytes = 64u << 20;
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

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace tessel {
namespace detail {

void assert_failed(const char* expression, const char* file, int line) {
    std::fprintf(stderr, "tessel: internal error: %s (%s:%d)\n", expression, file, line);
    std::abort();
}

inline size_t align_up(size_t value, size_t align) { return (value + align - 1) & ~(align - 1); }

inline uint64_t hash_bytes(const char* data, size_t size) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < size; ++i) h = (h ^ (unsigned char)data[i]) * 1099511628211ull;
    return h;
}

// Appends formatted text to a fixed buffer; the caller's Status says whether it failed.
inline void format_message(char* buffer, size_t size, const char* format, va_list args) {
    std::vsnprintf(buffer, size, format, args);
}

// printf through a WriteFn.
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
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

StringView::StringView(const char* zero_terminated)
    : data(zero_terminated), size(zero_terminated ? std::strlen(zero_terminated) : 0) {}

bool operator==(StringView a, StringView b) {
    return a.size == b.size && (a.size == 0 || std::memcmp(a.data, b.data, a.size) == 0);
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
    }
    return "unknown";
}

size_t element_size(ElementType type) {
    switch (type) {
        case ElementType::Float32: case ElementType::Int32: return 4;
        case ElementType::Float16: return 2;
        case ElementType::Int64: return 8;
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
Arena::Arena(void* buffer, size_t bytes)
    : fixed_(static_cast<unsigned char*>(buffer)), fixed_size_(buffer ? bytes : 0), reserved_(fixed_size_) {}

Arena::~Arena() { reset(); }

void* Arena::allocate(size_t bytes, size_t align) {
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
    size_t size = need > block_bytes_ ? need : block_bytes_;
    void* memory = TESSEL_MALLOC(header + size);
    if (!memory) return nullptr;
    Block* block = static_cast<Block*>(memory);
    block->previous = head_;
    block->size = size + header - sizeof(Block);
    head_ = block;
    reserved_ += header + size;
    offset_ = 0;
    return allocate(bytes, align);
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

const Node& Graph::node(NodeId id) const {
    TESSEL_ASSERT(id < node_count_);
    return blocks_[id >> kBlockShift][id & ((1u << kBlockShift) - 1)];
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
    if (spec.num_outputs > 0xffffu)
        return fail(Status::LimitExceeded, "node '%.*s' has %u outputs (at most 65535)",
                    (int)spec.name.size, spec.name.data, spec.num_outputs);
    if (node_count_ == kNoNode - 1) return fail(Status::LimitExceeded, "too many nodes");
    if (spec.inputs.size > 0xffffffffu) return fail(Status::LimitExceeded, "too many inputs");
    for (size_t i = 0; i < spec.inputs.size; ++i)
        if (spec.inputs[i].port > 0xffffu)
            return fail(Status::PortOutOfRange, "node '%.*s' input %zu reads port %u (at most 65535)",
                        (int)spec.name.size, spec.name.data, i, spec.inputs[i].port);
    uint32_t block = node_count_ >> kBlockShift;
    if (block >= block_capacity_) {
        Status status = grow_blocks();
        if (status != Status::Ok) return status;
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
    Status status = intern_device(spec.affinity, &node.affinity);
    if (status != Status::Ok) return status;
    node.num_outputs = (uint16_t)spec.num_outputs;
    node.num_inputs = (uint32_t)spec.inputs.size;
    node.inputs = arena_->allocate_array<Edge>(spec.inputs.size);
    if (!node.inputs) return fail(Status::OutOfMemory, "out of memory adding a node");
    bool any_named = false;
    for (size_t i = 0; i < spec.inputs.size; ++i) {
        const InputRef& in = spec.inputs[i];
        node.inputs[i] = Edge{in.producer, (uint16_t)in.port, (uint8_t)(in.keep_apart ? 1 : 0), 0};
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
    Node* node = node_mutable(id);
    const Attribute** tail = &node->attributes;
    while (*tail) tail = const_cast<const Attribute**>(&(*tail)->next);
    *tail = copy;
    return Status::Ok;
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
    Status status = intern_device(device, &device_id);
    if (status != Status::Ok) return status;
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
    // 4. Topological order (Kahn, FIFO seeded in id order: deterministic).
    uint32_t head = 0, tail = 0;
    for (NodeId id = 0; id < n; ++id) {
        pending[id] = pred_offsets_[id + 1] - pred_offsets_[id];
        if (pending[id] == 0) topo_[tail++] = id;
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
                if (!detail::parse_uint(StringView(token.data + 8, token.size - 8), 0xffffu, &outputs) || outputs == 0)
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
                        if (!detail::parse_uint(digits, 0xffffu, &port))
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
            char message[256];
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

// >>dot implementation
void write_dot(const Graph& graph, const Partition* partition, WriteFn write, void* user) {
    static const char* const kPalette[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                                           "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};
    const uint32_t palette_size = sizeof kPalette / sizeof kPalette[0];
    auto write_node = [&](NodeId id, const char* indent) {
        const Node& node = graph.node(id);
        StringView device = node.affinity == kNoDevice ? StringView("-") : graph.device_name(node.affinity);
        const char* colour = node.affinity == kNoDevice ? "#ffffff" : kPalette[node.affinity % palette_size];
        detail::write_format(write, user, "%sn%u [label=\"", indent, id);
        for (char c : node.name) {  // escape for a DOT string
            if (c == '"' || c == '\\') write(user, "\\", 1);
            if (c == '\n') { write(user, "\\n", 2); continue; }
            write(user, &c, 1);
        }
        detail::write_format(write, user, "\\n%.*s\", style=filled, fillcolor=\"%s\"]\n", (int)device.size,
                             device.data, colour);
    };
    detail::write_format(write, user, "digraph tessel {\n  node [shape=box, fontname=\"Helvetica\"];\n");
    if (partition && partition->subgraph_of.size == graph.node_count()) {
        for (uint32_t k = 0; k < partition->subgraphs.size; ++k) {
            const Subgraph& subgraph = partition->subgraphs[k];
            StringView device = graph.device_name(subgraph.device);
            detail::write_format(write, user, "  subgraph cluster_%u {\n    label=\"#%u %.*s\";\n", k, k,
                                 (int)device.size, device.data);
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
