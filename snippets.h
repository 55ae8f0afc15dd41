/* snippets.h - Tessel: fusion of elementwise islands into JIT kernels (x86-64, AArch64 NEON).

   Memory-bound elementwise chains (GELU, hard-swish, bias + activation, layer-norm tails) are
   fused into one kernel, so each tensor is walked once instead of once per operation. A fused
   island is a *body*: a little SSA program in scalar notation (parameters, scalar constants,
   operations, results) with NumPy broadcasting up to rank 6. `tokenize()` finds the islands on
   a Graph; `Snippet::compile()` lowers a body and emits code for one target; the reference
   interpreter runs any body exactly and is the oracle of every test.

   Do this
   -------
       #define TESSEL_IMPLEMENTATION      // in exactly one .cpp file
       #include "snippets.h"

       tessel::Arena arena;
       tessel::SnippetBody body(&arena);
       int64_t shape[] = {64, 1024};
       tessel::ValueId x, y;
       body.parameter(shape, &x);                               // check each Status
       body.unary(tessel::SnippetOp::GeluErf, x, &y);
       body.result(y);
       tessel::Snippet snippet;
       snippet.compile(body);                                   // target from CPUID / TESSEL_ISA
       const float* inputs[] = {in};  float* outputs[] = {out};
       snippet.run(inputs, outputs);

   On a Graph (finalized, Float32 output descs set): tokenize(graph, {}, &arena, &islands)
   gives an island id per node; build_island_body(graph, islands, id, &body, ...) makes the
   body of one island (parameters = its external inputs, results = its outputs).

   Lowering, in order (each a named function in the implementation): normalize_domain (6D,
   contiguous dimensions collapsed; the last one is the row a kernel walks), insert_load_store,
   power_static (Pow with a scalar exponent), insert_broadcast_move, fuse_broadcast_load,
   scalars_to_data_section, eliminate_dead_code_and_schedule (loads at first use, stores
   last), allocate_registers (linear scan, whole-interval spills; row-invariant broadcasts
   get registers of their own, loaded once per row) and emit_kernel (per row: an alignment
   peel, vector tiles, a tail; partial tiles use AVX-512 masks, AVX2 vmaskmov or SSE4.1 scalar
   tiles; on AVX-512 the vector tiles are 2 to 4 lanes, lane k on its own bank of 32/lanes
   registers, when the values fit 6 registers unspilled: 4 when a lane needs at most 8
   registers, 3 up to 10 (beyond 4 MiB: 3 up to 8, else 2), and no more than walk a row in
   the fewest iterations (short rows); 3 or 4 lanes run as a software
   pipeline, lane k k/lanes of a tile ahead (emit_pipelined_tiles), 2 in lockstep; the most
   used constants are pinned, loaded once, in the registers no lane uses (x86: a counting
   pass over one tile; NEON: over the whole kernel, caller-saved registers unless it saves
   d8-d15 anyway), and the row invariants then take one shared register each there when
   all fit (else each lane loads its own copy per row); outputs above the last-level cache
   use non-temporal stores, and their rows page lanes: while a row has a 4 KiB page per lane
   left, lane k walks page k of a block (emit_page_blocks), and shorter rows, 16 or more a
   lane, go in row groups: lane k walks rows 16k to 16k+15 of each group, with its own row
   values (emit_row_groups); SnippetOptions::tuning can force lanes, streaming stores and
   page lanes; rows of up to 4 vectors and 35 floats run as straight code, their tiles
   without the loop (emit_short_rows)) through the target's jitter table;
   emit_kernel_a64 for NEON (per row: 4-float tiles with post-incremented ldr/str q, ld1r
   broadcasts, a scalar peel and tail).
   Kernels are cached by a hash of the lowered program and the target (on x86 also the row
   strides, which the kernels take as immediates).

   Targets: Isa::Sse41, Isa::Avx2 (AVX2+FMA), Isa::Avx512 (AVX-512F), chosen by CPUID on
   x86-64; Isa::Neon (AArch64 Advanced SIMD, with FMA) on AArch64; Isa::Ref (interpreter only)
   everywhere. The environment variable TESSEL_ISA=ref|sse41|avx2|avx512|neon overrides the
   default (never above what the CPU has), and SnippetOptions::isa overrides both.
   SnippetOptions::emit_only lowers and assembles for any JIT target on any host (NEON code on
   x86-64 and back, with asmjit's validation) without running it: the host suite checks that
   every op's NEON kernel assembles. arm_features() reports fp16 arithmetic and dot product
   (getauxval(AT_HWCAP)) for kernels that may use them later; the Neon target needs neither.

   Accuracy: every operation is written once, as a template over a vector model; the
   interpreter instantiates it with scalars and the emitters with registers. So the JIT of a
   target is bitwise equal to the interpreter run with that target's FMA mode
   (isa_uses_fma(): Sse41 has no FMA and rounds the product). Only NaN payloads may differ.
   Every primitive is a correctly rounded IEEE operation, so the FMA targets (Ref, Avx2,
   Avx512, Neon) agree bit for bit across x86-64 and AArch64 (golden hashes in the tests);
   this assumes the default floating-point environment (no flush-to-zero in MXCSR or FPCR).
   Exact: Add Sub Mul Div Max Min Sqrt Reciprocal Abs Neg Relu Clip Floor Ceil Round Sign,
   comparisons, Select. Transcendentals are gather-free: Cephes-style polynomials (exp with a
   compensated last step, which Sigmoid and Swish leave out; log), Tanh and Erf as x h(|x|)
   with h piecewise polynomial over 16 intervals whose coefficients each lane takes from a
   16-entry table by a register permute (vpermps, pshufb, tbl/tbx; kLookupTables), the
   GeluErf op as x Phi(x) with Phi(-|x|) =
   exp(-x^2/2) R(|x|), R from such a table and x^2 in two parts, GELU(tanh) as x sigmoid(v)
   with v in two parts; tails that underflow are carried scaled by 2^64 to the last
   multiplication, and targets without FMA use Dekker's exact products where a residual
   cancels. Measured bounds (exp 0.8, log 0.8, tanh 2.8, sigmoid 2.3, erf 1.1, GELU 2.9 and
   3.9 ulp) are published by
   snippet_op_ulp_bound(). The interpreter keeps every product rounded on its own (no FMA
   contraction by the compiler), whatever -march or -ffp-contract it is built with.

   NaN rules (x86 semantics, reproduced by the interpreter and by NEON's compare-and-select
   sequences, not fmax/fmin): Max(a,b) = a > b ? a : b and
   Min(a,b) = a < b ? a : b (a NaN in the first operand yields the second); Relu, Clip and the
   transcendentals propagate NaN; Sign(NaN) = 0; Select treats a NaN condition as true.
   Comparisons give 1.0f or 0.0f.

   Config macros
   -------------
       TESSEL_NO_JIT      no asmjit at all: every Snippet runs the interpreter.
       TESSEL_ASSERT, TESSEL_MALLOC/TESSEL_FREE   as in hetero.h.

   Errors
   ------
   Every fallible call returns tessel::Status; the object keeps a message in last_error().
   Code generation errors stick (the first one wins) and are checked once at the end of
   emission; asmjit's error type never leaves the implementation.

   Memory
   ------
   Bodies and tokenizer results live in an Arena. Compilation uses a scratch Arena (heap from
   TESSEL_MALLOC) freed before compile() returns; the interpreter's column buffer is allocated
   at compile time, so run() never allocates. asmjit's zone starts in a 16 KiB block of the
   scratch arena, which the emitter's passes take in turn (counting, then final); its code
   buffer (malloc in CodeHolder) and executable memory (JitRuntime's mmap) stay outside
   TESSEL_MALLOC: Debian's asmjit snapshot has no allocator hook for them.

   Threading
   ---------
   A compiled Snippet's JIT path may run from several threads at once; its interpreter path
   uses the snippet's column buffer, so one thread at a time (or a scratch per thread). One
   run can be split: run(..., part, parts) does a share of the rows (or of every row's
   columns) and the parts write disjoint elements, so threads may run them at once; the
   runtime does so for large islands. A KernelCache is not thread safe.

   Limits
   ------
   Rank <= 6; parameters + results <= 32 per body (kSnippetMaxArgs): up to 11 pointers live in
   general registers; past 11, the x86 kernel keeps 10 there (NEON 11) and the rest ("cold": those
   read only once per row first, then the last ones) in its frame, loading one into a scratch
   register at each use; bodies up to 65535 instructions. Outputs may alias an input of the same
   shape (in place) but not a broadcast input. x86-64 System V calling convention only (no Windows
   x64); AAPCS64 on AArch64 (a NEON kernel saves d8-d15 only when it uses v8-v15, see
   SnippetStats::saved_vector_registers). A kernel walks the two innermost normalized dimensions
   (rows of the last one); the outer ones (at most 4) are iterated by run(), one kernel call each.
   Vector registers: 6 of 16 (SSE4.1, AVX2) or 22 of 32 (AVX-512, NEON) hold values, the rest are
   the emitters' temporaries; if an operation still runs out of temporaries, compile() retries
   with fewer value registers (more spills). At most 256 distinct constants per kernel. tokenize()
   costs O(V+E) per merge attempt. All input bytes are data: malformed bodies and graphs return a
   Status, never reach an assert.
   Performance
   -----------
   Throughput and compile-time figures, and how to reproduce them with bench/snippets, are in
   docs/performance.md; comments here name the bench that tunes a constant, never figures.

   Contents
   --------
   Each part starts with a marker line `// >>name`; search for it.
       >>targets                      Isa, CPU features
       >>operations                   SnippetOp, ULP bounds, default attributes
       >>body                         SnippetBody, the SSA program of a kernel
       >>kernel cache                 KernelCache
       >>snippet                      SnippetTuning, SnippetOptions, SnippetStats, Snippet
       >>tokenizer                    islands on a Graph, build_island_body()
       >>gemm                         Gemm: packed panels, cache blocks, JIT tiles; cpu_cache_sizes
       >>winograd                     WinogradF43: 3x3 convs' weight, input and output transforms
       >>depthwise conv               DepthwiseConv: one plane, padded phase-split copy, JIT row tiles
       >>max pool                     PoolRows: one output row's interior windows, JIT vector tiles;
                                      PoolPlanes: whole planes, borders by lane masks, rows' taps kept
       >>int8 gemm                    Int8Gemm: u8 x s8 -> s32 panels, requantizing epilogue
       >>int8 gemv                    Int8Gemv: a few rows of X times packed weights (VNNI)
       >>int8 winograd                Int8WinogradF23: exact int8 3x3 convs by Winograd F(2x2, 3x3) on AVX2
       >>int8 depthwise               Int8DepthwiseConv: uint8 planes, 4 taps per dot product (else 2 per vpmaddwd), requantized rows
       >>int8 lookup                  Int8Lookup: y = table[x] on bytes, JIT on AVX-512 VBMI, AVX2 and NEON
       >>int8 max taps                Int8MaxTaps: the uint8 MaxPool's column and row passes, JIT on AVX-512 and AVX2
       >>int8 convert                 Int8Convert: quantize, dequantize, pair tables; JIT on AVX-512 and AVX2
       >>opencl printer               OpenClSource, print_opencl_kernel: a body as OpenCL C
     implementation:
       >>helpers                      float bits, clock, broadcasting of shapes
       >>vector model                 ScalarMath: one lane with the x86 instructions' semantics
       >>approximations               lookup tables of the piecewise polynomials
       >>exp and log                  math_exp, math_log
       >>piecewise polynomials        tanh, sigmoid, erf, exact products (Dekker)
       >>gelu                         GeluErf and GeluTanh, denormal tails
       >>expm1 softplus mish pow      the other composite approximations
       >>eval_op                      every operation, once, over any vector model
       >>targets implementation       CPUID, TESSEL_ISA, cache sizes, AT_HWCAP
       >>operations implementation    names, arities, ULP bounds, attributes
       >>body implementation          SnippetBody's checks
       >>lowering                     Lir, Program, the scratch register budget
       >>lowering passes              insert_load_store to eliminate_dead_code_and_schedule
       >>register allocation          linear scan, whole-interval spills
       >>domain normalization         6D, collapsed dimensions, the row
       >>x64 emitter                  asmjit runtime, JitValue, JitMath's registers and recording
       >>x64 operations               JitMath's instructions: arithmetic, table lookups, FMA
       >>x64 loads and stores         jitter tables, tiles, row invariants
       >>x64 loop blocks              pipelined lanes, page blocks, row groups, peel, short rows
       >>x64 kernel                   in-place twin, emit_kernel
       >>a64 emitter                  JitMathA64
       >>a64 loads and stores         NEON jitter table
       >>a64 kernel                   assemble_a64, emit_kernel_a64
       >>kernel cache implementation
       >>interpreter                  interpret_row, column blocks
       >>snippet implementation       Snippet's lifetime
       >>compile                      lanes, streaming stores, cache key, emission and retries
       >>run                          kernel calls, parts, snippet_evaluate, interpret()
       >>tokenizer implementation     fusible nodes, greedy islands
       >>island bodies                build_island_body
       >>gemm implementation          cache sizes, the x86 and NEON tile emitters, packing, the driver
       >>jit kernel table             JitKernelTable (made kernels by key), assemble_jit_kernel
       >>gemm transposed store        Gemm::store_transposed: the AVX-512 16 x 16 kernel, the portable loop
       >>winograd implementation      the matrices, the AVX-512 transform kernels, the portable loops
       >>depthwise conv implementation  padding, the x86 and NEON row tiles, the x86 whole-planes kernel, the kernel tables, the portable loop
       >>pool rows implementation     the x86 and NEON tiles (strides 1 and 2), the kernel table
       >>pool planes implementation   the AVX-512 plane kernel, its table, the portable loop
       >>gemm dot implementation      the x86 and NEON kernels, the kernel table, the portable loop
       >>int8 gemm implementation     the VNNI tile emitter, the portable tile, packing; the VNNI gemv kernel
       >>int8 winograd implementation  the SSE2 transforms, AVX2's output transform, the portable loops
       >>int8 depthwise implementation  the VNNI and sdot row kernels, their table, padding
       >>int8 lookup implementation   the VBMI and tbl/tbx kernels, the portable loop
       >>int8 max taps implementation  the AVX-512 and AVX2 kernels (strides 1 and 2), the portable loop
       >>int8 convert implementation  the portable loops, the AVX-512 and AVX2 kernels
       >>opencl printer implementation  OpenClMath: eval_op printed as OpenCL C statements
*/
#ifndef TESSEL_SNIPPETS_H
#define TESSEL_SNIPPETS_H
#include "hetero.h"

namespace tessel {

// >>targets
enum class Isa : uint8_t { Ref = 0, Sse41, Avx2, Avx512, Neon, Auto };
const char* isa_name(Isa isa);
Status parse_isa(StringView name, Isa* isa);   // "ref", "sse41", "avx2", "avx512", "neon"
bool isa_available(Isa isa);    // CPU and build support it (Ref always); Neon on every AArch64
Isa best_isa();                 // the best available target by CPUID (Neon on AArch64)
Isa default_isa();              // TESSEL_ISA when set and available, else best_isa(); read once
uint32_t isa_vector_floats(Isa isa);  // floats per vector register (1 for Ref)
bool isa_uses_fma(Isa isa);     // whether the FMA steps of the approximations are fused

// AArch64 ASIMD features from getauxval(AT_HWCAP), for kernels that may use them later (the
// Neon target itself needs only base ASIMD). All false on other architectures.
struct ArmFeatures {
    bool asimd = false;            // HWCAP_ASIMD: Advanced SIMD (mandatory on AArch64 Linux)
    bool fp16_arithmetic = false;  // HWCAP_FPHP and HWCAP_ASIMDHP: half-precision arithmetic
    bool dot_product = false;      // HWCAP_ASIMDDP: SDOT/UDOT
};
ArmFeatures arm_features();

// >>operations
enum class SnippetOp : uint8_t {
    Parameter, Scalar,
    Add, Sub, Mul, Div, Max, Min, Pow, PowerStatic,
    Sqrt, Reciprocal, Abs, Neg, Exp, Log, Tanh, Sigmoid, Relu, Clip, Elu, Selu, Erf,
    GeluErf, GeluTanh, HardSigmoid, HardSwish, LeakyRelu, PRelu, Softplus, Softsign, Swish,
    Mish, Floor, Ceil, Round, Sign,
    Equal, Greater, Less, GreaterOrEqual, LessOrEqual, Select,
    Count
};
const char* snippet_op_name(SnippetOp op);
uint32_t snippet_op_arity(SnippetOp op);   // inputs: 0 for Parameter/Scalar, 1, 2 or 3 (Select)
// Maps a Graph op name (ONNX spelling, plus Gelu/SiLU/Clamp/Where aliases) to an operation.
// NotFound for anything that stays outside snippets.
Status snippet_op_from_name(StringView name, SnippetOp* op);
// Published accuracy bound in ULP against a double-precision reference, over the sweeps of
// test/test_snippets.cpp and bench/snippets.cpp (the GELU sweeps include their denormal
// tails), for
// targets with FMA (fma = isa_uses_fma(isa)) or without; 0 means exact, kNoUlpBound none:
// Pow and PowerStatic (exp(b log a), or repeated products for integer exponents) have an error
// that grows with |b log a|.
// HardSigmoid without FMA rounds alpha*x before adding beta: its error is absolute (<= 2^-24)
// near the lower kink, hence the large ULP figure.
constexpr uint32_t kNoUlpBound = 0xffff;
uint32_t snippet_op_ulp_bound(SnippetOp op, bool fma = true);
// Default attributes: Elu alpha 1; Selu alpha 1.6732632, gamma (beta) 1.0507010; HardSigmoid
// 0.2, 0.5; HardSwish 1/6, 0.5; LeakyRelu 0.01; Swish 1 (x * sigmoid(alpha x)); Clip -inf..inf.
void snippet_op_default_attributes(SnippetOp op, float* alpha, float* beta);

// >>body
using ValueId = uint32_t;
constexpr ValueId kNoValue = 0xffffffffu;
constexpr int kSnippetMaxRank = 6;
constexpr uint32_t kSnippetMaxArgs = 32;   // parameters + results of a body

struct SnippetShape {
    uint8_t rank = 0;
    int64_t dims[kSnippetMaxRank] = {};
};

struct SnippetInstruction {
    SnippetOp op = SnippetOp::Scalar;
    uint8_t arity = 0;
    ValueId args[3] = {kNoValue, kNoValue, kNoValue};
    float alpha = 0, beta = 0;     // attributes; Scalar: alpha is the value
    uint32_t index = 0;            // Parameter: its position
    SnippetShape shape;            // broadcast shape of the value (Scalar: rank 0)
};

// A body in scalar notation. Values are instruction indices; each instruction defines one.
class SnippetBody {
public:
    explicit SnippetBody(Arena* arena);
    SnippetBody(const SnippetBody&) = delete;
    SnippetBody& operator=(const SnippetBody&) = delete;

    // Errors: InvalidArgument (negative dim, unknown value, wrong arity, shapes that do not
    // broadcast, NaN attribute), LimitExceeded (rank > 6, too many instructions), OutOfMemory.
    Status parameter(Span<const int64_t> shape, ValueId* out);
    Status scalar(float value, ValueId* out);
    Status unary(SnippetOp op, ValueId x, ValueId* out);                 // default attributes
    Status unary(SnippetOp op, ValueId x, float alpha, float beta, ValueId* out);
    Status binary(SnippetOp op, ValueId a, ValueId b, ValueId* out);
    Status select(ValueId condition, ValueId a, ValueId b, ValueId* out);
    Status add(SnippetOp op, Span<const ValueId> args, float alpha, float beta, ValueId* out);
    Status result(ValueId value);

    uint32_t size() const { return count_; }
    const SnippetInstruction& instruction(ValueId id) const { return instructions_[id]; }
    uint32_t parameter_count() const { return parameter_count_; }
    uint32_t result_count() const { return result_count_; }
    ValueId result_value(uint32_t i) const { return results_[i]; }
    uint64_t hash() const;
    const char* last_error() const { return error_; }

private:
    Status fail(Status status, const char* message) const;
    Status push(const SnippetInstruction& instruction, ValueId* out);
    Arena* arena_;
    SnippetInstruction* instructions_ = nullptr;
    uint32_t count_ = 0, capacity_ = 0;
    ValueId* results_ = nullptr;
    uint32_t result_count_ = 0, result_capacity_ = 0;
    uint32_t parameter_count_ = 0;
    mutable char error_[kErrorMessageBytes] = {};
};

// >>kernel cache
// Compiled kernels by hash of the lowered program and target. Snippets compiled with a cache
// leave their kernel to it; they must not outlive it.
class KernelCache {
public:
    KernelCache() = default;
    ~KernelCache();
    KernelCache(const KernelCache&) = delete;
    KernelCache& operator=(const KernelCache&) = delete;
    static constexpr uint32_t kCapacity = 128;
    uint32_t size() const { return count_; }
    uint32_t hits() const { return hits_; }
    uint32_t misses() const { return misses_; }

private:
    friend class Snippet;   // compile() looks kernels up and inserts them
    // What the emission decided, so that a cache hit reports the statistics of the kernel it
    // reuses.
    struct Emitted {
        uint32_t code_size = 0, lanes = 1, scratch_registers = 0, pinned_constants = 0, shared_invariants = 0,
                 saved_vector_registers = 0;
        bool row_groups = false;
        void* in_place_kernel = nullptr;   // the same with ordinary stores (SnippetStats::in_place_kernel)
    };
    struct Entry { uint64_t hash; void* key; size_t key_bytes; void* kernel; Emitted emitted; };
    const Entry* find(uint64_t hash, const void* key, size_t key_bytes);
    bool insert(uint64_t hash, const void* key, size_t key_bytes, void* kernel, const Emitted& emitted);
    Entry entries_[kCapacity] = {};
    uint32_t count_ = 0, hits_ = 0, misses_ = 0;
};

// >>snippet
// Switches that force what compile() otherwise decides, for tests and benches; the defaults
// are right. Only reference_fma changes results (it picks the interpreter's FMA mode); the
// others change the code, never its output.
struct SnippetTuning {
    // Non-temporal stores for the first output's vector tiles (x86-64).
    enum class StreamingStores : uint8_t {
        // When the bytes one run walks exceed the last-level cache (last_level_cache_bytes(),
        // capped at 64 MiB) and the body has no transcendental op or will walk its rows in
        // page lanes or row groups (on one stream they slow compute-bound kernels down).
        Auto,
        Never,
        Always,
        // Always, and (as Auto does when it streams) with a twin that stores as usual, which
        // run() takes when an output is one of the inputs (SnippetStats::in_place_kernel).
        AlwaysWithInPlaceTwin,
    };
    // Page lanes (AVX-512 with 2 or more lanes): while a row has one 4 KiB page per lane
    // left, lane k walks page k of the block instead of the vector next to lane k-1, so the
    // loop moves that many streams at once; rows shorter than a block of pages, when there
    // are at least 16 a lane, are walked in row groups instead (lane k walks rows 16k to
    // 16k+15 of a group, SnippetStats::row_groups).
    enum class PageLanes : uint8_t {
        Auto,   // with non-temporal stores
        Never,
        Always,
    };
    StreamingStores streaming_stores = StreamingStores::Auto;
    PageLanes page_lanes = PageLanes::Auto;
    // Vector tiles per loop iteration (AVX-512): 0 picks 2 to 4 when the body's values fit 6
    // registers without spilling (as many lanes as the registers one lane needs, values and
    // temporaries, allow: 4 up to 8, 3 up to 10; when one run walks more than 4 MiB, 3 up to
    // 8 and else 2), else 1, and never more than walk a row in the fewest loop iterations
    // (whole tiles plus one partial tile per vector left over: rows of 16 floats get one);
    // 1 forces one, 2 to 4 cap the number. 3 and 4 lanes run as a software pipeline
    // (SnippetStats::software_pipelined), 2 in lockstep.
    uint8_t lanes = 0;
    uint32_t max_registers = 0;        // vector registers the allocator may use; 0: all it has
    bool reference_fma = true;         // Ref only: fuse FMA steps (false reproduces Sse41 exactly)
    bool fuse_broadcast_loads = true;  // false keeps Load + BroadcastMove pairs
    // Neon: table lookups load a whole table into v12-v15 for one tbl when those are free;
    // false always takes the four-step tbl/tbx path used when they are not.
    bool neon_table_registers = true;
    // x86: the kernel reads each argument's row stride from run()'s table (not compiled in as
    // an immediate; no short rows, row groups or page lanes), so run_segments can write the
    // results as a block of rows of its own (result_row). Other targets always read the table.
    bool row_strides_at_run = false;
};

struct SnippetOptions {
    Isa isa = Isa::Auto;
    KernelCache* cache = nullptr;
    // Lower and assemble for `isa` without making the code executable: works for every JIT
    // target on any host (Neon code on x86-64 and back), to check code generation where it
    // cannot run. compile() then leaves the snippet unrunnable (run() is NotFinalized).
    bool emit_only = false;
    SnippetTuning tuning;
};
// Size of the largest data cache (CPUID leaf 4 or 0x8000001D; 0x80000006 on older AMD), 0
// when unknown (then streaming stores are used above 32 MiB).
uint64_t last_level_cache_bytes();

struct SnippetStats {
    Isa isa = Isa::Ref;
    uint64_t elements = 0;           // of the scheduling domain
    uint64_t bytes_unfused = 0;      // every operation reads its inputs and writes its output
    uint64_t bytes_fused = 0;        // parameters read once, results written once
    double shrinkage = 0;            // bytes_unfused / bytes_fused
    uint32_t instructions = 0;       // lowered instructions
    uint32_t registers_used = 0;     // distinct vector registers holding values
    uint32_t scratch_registers = 0;  // most temporaries live at once inside one operation
    uint32_t pinned_constants = 0;   // constants held in registers for the whole kernel (loaded once, not per use)
    uint32_t shared_invariants = 0;  // row-invariant broadcasts held once for all lanes (else once per lane)
    uint32_t spilled_values = 0;
    uint32_t saved_vector_registers = 0;  // Neon: callee-saved d8-d15 the kernel saves (0 or 8)
    uint32_t code_size = 0;          // bytes of code and data
    uint32_t lanes = 1;              // vector tiles per loop iteration (lanes, AVX-512)
    bool software_pipelined = false; // 3-4 lanes skewed across loop iterations (emit_pipelined_tiles)
    uint32_t cold_arguments = 0;     // argument pointers kept in the kernel's frame (past 11)
    bool streaming_stores = false;   // the first output's vector tiles store non-temporally
    bool page_lanes = false;         // lanes walk different 4 KiB pages (SnippetTuning::page_lanes)
    bool row_groups = false;         // short rows: lanes walk different rows (SnippetTuning::page_lanes)
    bool page_prefetch = false;      // page lanes of a transcendental body prefetch their inputs' next block
    bool short_rows = false;         // rows of up to 4 vectors as straight code, for rows of the compiled length
    bool in_place_kernel = false;    // a second kernel with ordinary stores for runs in place (SnippetTuning::streaming_stores)
    uint64_t compile_ns = 0;
    bool cache_hit = false;
    uint32_t normalized_rank = 0;    // dimensions after collapsing
};
void write_statistics(const SnippetStats& stats, WriteFn write, void* user);

class Snippet {
public:
    Snippet() = default;
    ~Snippet();
    Snippet(const Snippet&) = delete;
    Snippet& operator=(const Snippet&) = delete;

    // The body must outlive the snippet (the interpreter reads it). Errors: InvalidArgument
    // (no result, shapes that do not broadcast to one domain), LimitExceeded (too many
    // arguments), Unsupported (isa not available), OutOfMemory.
    Status compile(const SnippetBody& body, const SnippetOptions& options = SnippetOptions());
    // Pointers to contiguous row-major float tensors of the body's shapes, parameters in order,
    // results in order. InvalidArgument on a count mismatch or a null pointer (unless the
    // domain is empty), NotFinalized before compile().
    Status run(Span<const float* const> inputs, Span<float* const> outputs) const;
    // The same, with the interpreter's scratch supplied by the caller (scratch_bytes() bytes,
    // float aligned; unused by JIT kernels), so several threads may run one Ref snippet.
    Status run(Span<const float* const> inputs, Span<float* const> outputs, float* scratch) const;
    // Part `part` of `parts` of the domain: a slice of every row's columns (cut at multiples
    // of 16 floats) where there are fewer rows than parts, or rows of a multiple of 16 floats
    // with kSplitColumns per part; else whole rows. A conv's output planes are such rows: each
    // thread then takes the pixels its conv thread wrote, and no 64-byte line is split. The
    // parts together do what run() does and write disjoint output elements, so they may run at
    // once on different threads (each with its own scratch on Ref). A body with a broadcast
    // result (an output element written from several rows) runs whole in part 0. Same errors
    // as run(), and InvalidArgument if part >= parts.
    Status run(Span<const float* const> inputs, Span<float* const> outputs, float* scratch, uint32_t part, uint32_t parts) const;
    static constexpr int64_t kSplitColumns = 64;
    size_t scratch_bytes() const { return isa_ == Isa::Ref && body_ ? (size_t)body_->size() * 64 * sizeof(float) : 0; }
    // A fused epilogue's run (runtime.h >>gemm epilogue): the domain seen as rows of `segment`
    // elements (a conv's output maps: N x C rows of H x W; a MatMul's: rows of N), this runs
    // the elements [r segment + column_begin, r segment + column_end) of rows r in
    // [row_begin, row_end), exactly as run() computes them, right after a GEMM wrote them.
    // Needs runs_segments(segment): each such row lies within one kernel row (the normalized
    // last dimension is a multiple of `segment`). InvalidArgument for ranges outside the
    // domain or a segment it cannot take; scratch as in run() (Ref only).
    // result_row > 0: the results go to a block of their own, element (r, c) of the range at
    // outputs[k] + (r - row_begin) * result_row + (c - column_begin) (a conv's input
    // transformed into its thread's scratch: runtime.h >>conv prologue); x86 needs
    // SnippetTuning::row_strides_at_run. InvalidArgument without it or for result_row below
    // the columns.
    bool runs_segments(int64_t segment) const;
    Status run_segments(Span<const float* const> inputs, Span<float* const> outputs, float* scratch, int64_t segment,
                        int64_t row_begin, int64_t row_end, int64_t column_begin, int64_t column_end,
                        int64_t result_row = 0) const;
    // Whether run() takes the in-place twin (SnippetStats::in_place_kernel) for these
    // pointers: there is one and an output is one of the inputs.
    bool takes_in_place_kernel(Span<const float* const> inputs, Span<float* const> outputs) const;

    Isa isa() const { return isa_; }
    const SnippetStats& stats() const { return stats_; }
    const char* last_error() const { return error_; }
    uint32_t normalized_rank() const { return rank_; }
    int64_t normalized_dim(uint32_t i) const { return dims_[i]; }

private:
    Status fail(Status status, const char* message) const;
    void release();
    // One kernel call over `count` rows from kernel row g (of all rows), columns
    // [column_begin, column_end): the walk run() and run_segments() share. results_at (or
    // null): the results' first elements, elsewhere than in the domain's layout.
    void run_rows(Span<const float* const> inputs, Span<float* const> outputs, float* scratch, void* kernel, int64_t g, int64_t count,
                  int64_t column_begin, int64_t column_end, const int64_t* row_strides, const bool* inner_broadcast,
                  float* const* results_at = nullptr) const;
    const SnippetBody* body_ = nullptr;
    Isa isa_ = Isa::Ref;
    bool fused_ = true;
    bool compiled_ = false;
    bool kernel_owned_ = false;
    bool row_strides_at_run_ = false;                // the kernel reads the row strides run() passes
    void* kernel_ = nullptr;
    void* kernel_in_place_ = nullptr;                // ordinary stores, for runs in place (owned with kernel_)
    float* columns_ = nullptr;                       // interpreter scratch
    uint32_t parameters_ = 0, results_ = 0;
    uint32_t rank_ = 0;                              // normalized dims; the last is the row
    int64_t dims_[kSnippetMaxRank] = {};
    int64_t strides_[kSnippetMaxArgs][kSnippetMaxRank] = {};  // elements; 0 = broadcast
    SnippetStats stats_;
    mutable char error_[kErrorMessageBytes] = {};
};

// One operation on one element, with exactly the interpreter's (and so the JIT's) semantics:
// args holds snippet_op_arity(op) values; fused selects the FMA mode (isa_uses_fma). Pow
// whose exponent is a compile-time scalar is PowerStatic with alpha = the exponent.
float snippet_evaluate(SnippetOp op, const float* args, float alpha, float beta, bool fused);
// The same over a row of n elements: argument k of element i is args[k][i * strides[k]]
// (stride 0 broadcasts). The op is dispatched once per row, not per element.
void snippet_evaluate_row(SnippetOp op, const float* const* args, const int64_t* strides, float* out, size_t n,
                          float alpha, float beta, bool fused);

// Runs a body with the interpreter (the oracle). fused selects the FMA mode.
Status interpret(const SnippetBody& body, Span<const float* const> inputs,
                 Span<float* const> outputs, bool fused = true);

// >>tokenizer
constexpr uint32_t kNoIsland = 0xffffffffu;
struct TokenizeOptions {
    uint32_t max_arguments = kSnippetMaxArgs;   // external inputs + outputs of an island, 2..32
    // Nodes of an island, at least 1. Bounds the tokenizer's work per node (each merge is
    // checked against the whole island) and keeps a kernel's loop in the instruction cache
    // (256 Adds are 8 KB of AVX-512 code); fusing more saves almost no memory traffic.
    uint32_t max_island_nodes = 256;
};
struct Tokenization {
    Span<const uint32_t> island_of;   // per node; kNoIsland for nodes outside every island
    uint32_t island_count = 0;
    // The nodes of island k in topological order: island_nodes[island_start[k] ..
    // island_start[k + 1]). tokenize() and list_island_nodes() fill them; when they are empty,
    // build_island_body() finds an island's nodes by walking the whole graph.
    Span<const uint32_t> island_start;
    Span<const NodeId> island_nodes;
};
// A node is fusible when its op maps to a SnippetOp (or is a one-element float Constant),
// it has one Float32 output of known shape (rank <= 6) and its input count fits the op.
bool node_is_fusible(const Graph& graph, NodeId node);
// Greedy islands in topological order: a node joins the islands of its fusible producers
// while the merge keeps the graph of islands acyclic, the island's inputs + outputs stay
// within max_arguments, its output shapes broadcast to one domain and no keep-apart edge
// lies inside, and the island has at most max_island_nodes nodes. Errors: NotFinalized,
// InvalidArgument (max_arguments outside 2..kSnippetMaxArgs, max_island_nodes 0, null pointers),
// OutOfMemory.
Status tokenize(const Graph& graph, const TokenizeOptions& options, Arena* arena, Tokenization* result);
// Fills island_start and island_nodes from island_of and island_count (one pass, in the
// arena), for a Tokenization built or edited by hand. InvalidArgument if island_of does not
// match the graph or names an island >= island_count; OutOfMemory.
Status list_island_nodes(const Graph& graph, Arena* arena, Tokenization* t);

// The operation of a graph node and its attributes (alpha, beta) as an island body gets them
// (defaults from snippet_op_default_attributes). NotFound if the op is not a snippet op.
// Clip's min/max *inputs* (ONNX opset 11+) are Max(min, x) then Min(max, x).
Status snippet_node_operation(const Graph& graph, NodeId node, SnippetOp* op, float* alpha, float* beta);

// The body of one island, ready for Snippet::compile(). Parameters are the island's external
// inputs (unique producer and port, in the order members first read them, members in
// topological order); results are the members read outside the island or by nobody, in
// topological order. Node ids of both go to input_nodes/output_nodes (kSnippetMaxArgs
// entries each). Graph attributes: Clip min/max (or its 2nd/3rd inputs, as Max/Min), Elu,
// LeakyRelu, HardSigmoid alpha/beta, Selu alpha/gamma, Swish alpha, Gelu approximate="tanh";
// a Constant is a scalar from its value_float attribute or one-element float value tensor.
// With the tokenization's node lists the cost is the island's, not the graph's.
// Errors: InvalidArgument (no such island, a Constant without a float value, node lists
// that disagree with island_of or list a node before its producer), LimitExceeded
// (more than kSnippetMaxArgs arguments), OutOfMemory.
// input_ports (optional, kSnippetMaxArgs entries) receives the producer port of each parameter.
Status build_island_body(const Graph& graph, const Tokenization& tokenization, uint32_t island, SnippetBody* body,
                         NodeId* input_nodes, uint32_t* input_count, NodeId* output_nodes, uint32_t* output_count,
                         uint32_t* input_ports = nullptr);

// >>gemm
// C[m x n] = alpha A[m x k] B[k x n] + beta C (beta 0: C is not read), BLIS style: a kc x nc
// block of B packed into panels of nr columns (kept in L3, one panel in L2), an mc x kc block
// of A packed into panels of mr rows (kept in L2), and a micro-kernel that keeps an mr x nr
// tile of C in registers through the K loop of broadcast FMAs. The micro-kernels are JIT code
// for Avx2 (6 x 16), Avx512 (14 x 32) and Neon (8 x 12), one per tile height and width so that
// the edges of M and N run narrower tiles (x86: and a masked last vector; NEON: a full tile
// into a buffer); other targets (Ref, Sse41, builds without JIT) run a portable C++ tile
// (4 x 16) over the same packed layout.
struct GemmBlocking {
    uint32_t mr = 4, nr = 16;              // micro-tile
    int64_t kc = 256, mc = 128, nc = 2048; // cache blocks (mc a multiple of mr, nc of nr)
};
// Data cache sizes in bytes (CPUID leaf 4 or 0x8000001D; sysconf elsewhere), with defaults
// (32 KiB, 512 KiB, 4 MiB) where the CPU does not say.
struct CacheSizes { uint64_t l1d = 0, l2 = 0, l3 = 0; };
CacheSizes cpu_cache_sizes();

// An operand of Gemm::run: a matrix read through (row, column) strides in elements, so a
// transposed operand costs nothing; or a whole matrix packed by Gemm::pack_a / pack_b with
// the same Gemm (then the strides are unused).
// B only: `rows` (k offsets, in floats) reads row p of B at data + rows[p], its columns
// contiguous, so a k x k Conv's zero-padded input is B in place (no im2col copy).
struct GemmOperand {
    const float* data = nullptr;
    int64_t row = 0, col = 1;
    bool packed = false;
    const int64_t* rows = nullptr;
};

// What Gemm::run's last K block does to each final value v of C as its tiles store it: add
// the residual's element (C's layout: residual[i * ldc + j]; R + v when residual_first, else
// v + R: the island's operand order), then, with clamp, v = Min(hi, Max(lo, v)) (the
// snippets' Max and Min: NaN stays NaN). A fused residual Add and Relu or Clip cost no pass.
struct GemmStoreOps {
    const float* residual = nullptr;
    bool residual_first = false;
    bool clamp = false;
    float lo = 0.0f, hi = 0.0f;
};

class Gemm {
public:
    // The micro-kernels of `isa` (Auto: default_isa()), generated once per process and target.
    // Unsupported if the CPU lacks it; OutOfMemory or Unsupported if the assembler fails.
    Status init(Isa isa = Isa::Auto);
    Isa isa() const { return isa_; }
    bool jit() const { return tiles_ != nullptr; }   // false: the portable C++ tile
    const GemmBlocking& blocking() const { return blocking_; }
    // K blocks of at most `kc` (from 8; mc and nc follow, as init sizes them): for a caller whose
    // panels should stay near L1's size. Packed operands depend on it: call it before packing.
    void limit_kc(int64_t kc);
    uint32_t vector_floats() const { return vector_floats_; }   // columns per vector of the tiles (1: portable)
    // True when the tiles read a B given by `rows` in place; else run() packs its panels first.
    // Either way scratch_floats needs b_packed false: where a part has three or more row tiles,
    // each panel's first tile reads B's rows and copies them into a packed panel for the others.
    bool reads_b_rows() const { return row_tiles_ != nullptr; }
    // True when column_tile() runs on JIT tiles (x86); else it runs a portable loop.
    bool reads_a_columns() const { return column_tiles_ != nullptr; }
    // One tile of C, rows x cols (rows <= mr, cols <= nr), ldc floats apart: the sum over
    // p < k of A(i, p) B(p, j), A(i, p) at a[a_cols[p] + i] (a column's rows consecutive: a
    // conv's output pixels of one row, read where the input lies), B one packed panel (nr
    // floats per p; stream: it comes from memory, prefetched ahead). C is overwritten (add
    // false) or added to. fetch_a: A's columns are fetched ahead in software, for an A that the
    // hardware prefetchers bring too late (rows another core just wrote).
    void column_tile(const float* a, const int64_t* a_cols, const float* b_panel, int64_t rows, int64_t cols, int64_t k,
                     bool add, float* c, int64_t ldc, bool stream = false, bool fetch_a = false) const;
    // Column tiles' C (count rows of maps columns, ldc floats apart) transposed into y: y[m *
    // y_stride + i] = C(i, m) + bias[m] (bias: maps floats, or null), then store's residual
    // (store->residual at y's first element, in y's layout) and clamp as run()'s last K block
    // does them. JIT on AVX-512 and AVX2 (16 x 16 and 8 x 8 transposes), a portable loop elsewhere.
    void store_transposed(const float* c, int64_t ldc, int64_t count, int64_t maps, const float* bias, float* y,
                          int64_t y_stride, const GemmStoreOps* store = nullptr) const;
    // A whole matrix packed once (constant weights): kc blocks of panels, zero padded.
    size_t packed_a_floats(int64_t m, int64_t k) const;
    size_t packed_b_floats(int64_t k, int64_t n) const;
    void pack_a(int64_t m, int64_t k, const float* a, int64_t a_row, int64_t a_col, float* packed) const;
    void pack_b(int64_t k, int64_t n, const float* b, int64_t b_row, int64_t b_col, float* packed) const;
    // Scratch floats one part of run() needs for these dims and operands (at any float alignment:
    // run() starts its panels at a 64-byte boundary in it).
    size_t scratch_floats(int64_t m, int64_t n, int64_t k, bool a_packed, bool b_packed) const;
    // Part `part` of `parts` (whole panels of N, or of M when N has too few or only A is
    // packed at run time); parts write disjoint tiles of C, so threads may run them at once,
    // each with its own scratch. Never allocates. row_bias (m floats, or null): C = alpha A B
    // + row_bias[i] instead (beta and C's old values unused), added as the first K block's
    // tiles store, so a Conv's bias costs no pass over C of its own. store (or null): what the
    // last K block's tiles do to each final value before storing it (GemmStoreOps).
    void run(int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a, const GemmOperand& b, float beta,
             float* c, int64_t ldc, float* scratch, uint32_t part = 0, uint32_t parts = 1,
             const float* row_bias = nullptr, const GemmStoreOps* store = nullptr) const;
    // The rows [m0, m1) and columns [n0, n1) of C that part `part` of run() writes (empty: m0 == m1).
    void part_range(int64_t m, int64_t n, bool a_packed, bool b_packed, uint32_t part, uint32_t parts, int64_t* m0,
                    int64_t* m1, int64_t* n0, int64_t* n1) const;

    // What a tile kernel reads besides its operands.
    struct TileParams {
        float alpha, beta;
        int32_t read_c;      // 0: beta is 0 and C is not read; 2: C = alpha acc + row_bias[row]
        uint32_t kmask;      // AVX-512: lanes of the last vector
        int32_t mask[8];     // AVX2: lanes of the last vector (-1 on)
        const float* row_bias;   // read_c 2: the tile's first row's bias
        const int64_t* b_rows;   // row tiles: B's row offsets (floats) for this K block
        const int64_t* a_cols;   // column tiles: A's column offsets (floats) for this K block
        float* pack_to;          // packing row tiles: the panel where the rows read are copied
        int32_t stream;          // nonzero: the packed panels come from memory (A's; column tiles: B's), prefetched ahead
        int32_t clamp;           // nonzero: C = Min(hi, Max(lo, C)) as stored
        float lo, hi;
        int32_t residual;        // 1: v + R, 2: R + v (before the clamp); R at C + residual_bytes
        int64_t residual_bytes;
        int32_t fetch_a;         // column tiles, nonzero: A's columns fetched kGemmColumnsAhead steps ahead
    };
    // void tile(a panel, b panel, c, ldc in bytes, k, params)
    using TileFn = void (*)(const float*, const float*, float*, int64_t, int64_t, const TileParams*);
    // What a store_transposed kernel reads besides its operands.
    struct TransposeParams {
        const float* bias;        // a vector's maps, or null
        int64_t residual_bytes;   // R of y's element at y + residual_bytes
        float lo, hi;
        uint32_t tail_mask;       // AVX-512: the lanes of the last count % 16 rows
        int32_t tail_lanes[8];    // AVX2: those of the last count % 8 rows, -1 on
    };
    // void kernel(C (a vector's columns), ldc bytes, count rows, y, y_stride bytes, params)
    using TransposeFn = void (*)(const float*, int64_t, int64_t, float*, int64_t, const TransposeParams*);

private:
    void pack_a_block(int64_t rows, int64_t depth, const float* a, int64_t a_row, int64_t a_col, float* packed) const;
    void pack_b_block(int64_t depth, int64_t cols, const float* b, int64_t b_row, int64_t b_col, float* packed) const;
    void pack_b_rows_block(int64_t depth, int64_t cols, const float* b, const int64_t* rows, float* packed) const;
    // A tile's `cols` columns (JIT tiles): the last vector's lanes into params' masks; returns the
    // column part of the tile's index, (vectors - 1) * 2 + masked.
    uint32_t tile_columns(int64_t cols, TileParams* params) const;
    void set_blocks(int64_t kc);   // kc, and mc and nc from it and the caches
    Isa isa_ = Isa::Ref;
    GemmBlocking blocking_;
    uint32_t vector_floats_ = 1;
    const TileFn* tiles_ = nullptr;   // [(rows - 1) * 2 * vectors + (vectors - 1) * 2 + masked], may be null
    const TileFn* row_tiles_ = nullptr;   // the same tiles with B read through GemmOperand::rows (x86), may be null
    const TileFn* packing_row_tiles_ = nullptr;   // row tiles that also store what they read as a packed panel
    const TileFn* column_tiles_ = nullptr;   // tiles with A read through TileParams::a_cols (x86), may be null
};

// >>winograd
// Winograd F(4x4, 3x3) (Lavin and Gray) for 3x3 convs of stride 1: a tile of 4x4 output pixels
// is A^T [sum over channels of U . V] A (. elementwise), U = G g G^T the 6x6 transform of a
// channel's 3x3 weights g and V = B^T d B that of the tile's 6x6 input d. The sum's 36 points
// are 36 GEMMs of tiles x channels by channels x maps (Gemm::column_tile): 2.25 multiplies per
// output where the direct conv does 9. The transforms' constants (up to 8) cost precision: on
// uniform inputs the error stays under the direct conv's test bound of 1e-5 sum |w||x|, at
// over 2e-6 of it.
class WinogradF43 {
public:
    static constexpr int64_t kPoints = 36;
    // The transform kernels of `isa`: JIT on Avx512 and Avx2 (then jit()), the portable loops
    // elsewhere.
    Status init(Isa isa = Isa::Auto);
    bool jit() const { return input_ != nullptr; }
    // U of maps x channels 3x3 weights (w[m][c][3][3]) as the column tiles' packed B panels:
    // point p's panel j (maps [j panel, (j + 1) panel), zero past the last map) at u + (p panels
    // + j) channels panel, channel c's `panel` floats consecutive.
    static size_t weights_floats(int64_t maps, int64_t channels, int64_t panel);
    static void transform_weights(int64_t maps, int64_t channels, const float* w, int64_t panel, float* u);
    // V of one row of `tiles` tiles for each of `channels` channels. The input is the padded
    // rows the tiles read (6 of them, row_floats apart, channel_floats between channels), each
    // split into its 4 column phases phase_floats apart: padded column 4 q + r at r phase_floats
    // + q (tile t reads phase columns t and t + 1). V of point p, channel c, tile t at
    // v[p v_point + c v_channel + t].
    void transform_input(const float* rows, int64_t channels, int64_t channel_floats, int64_t row_floats, int64_t phase_floats,
                         int64_t tiles, float* v, int64_t v_point, int64_t v_channel) const;
    // The 4x4 outputs of `tiles` tiles from their sums M: point p, tile t, map j at m[p m_point +
    // t ld + j], maps a multiple of 16 (of 8 on AVX2); output row r of the tiles, pixel x (4 per
    // tile), map j at o[r o_row + x ld + j].
    void transform_output(const float* m, int64_t m_point, int64_t ld, int64_t tiles, int64_t maps, float* o,
                          int64_t o_row) const;

    // What the JIT kernels read besides their operands.
    struct InputParams {
        int64_t channels, channel_bytes, row_bytes, phase_bytes, v_point_bytes, v_channel_bytes;
        uint32_t mask;       // AVX-512: the lanes of the vector's tiles
        int32_t lanes[8];    // AVX2: the same lanes, -1 on
    };
    struct OutputParams {
        int64_t tiles, tile_bytes, m_point_bytes, o_row_bytes, o_pixel_bytes;
    };
    // input(rows at the vector's first tile, V at its first tile, params); output(M at the
    // first tile and a vector of maps, O likewise, params)
    using InputFn = void (*)(const float*, float*, const InputParams*);
    using OutputFn = void (*)(const float*, float*, const OutputParams*);

private:
    InputFn input_ = nullptr;
    InputFn input_tail_ = nullptr;   // a vector of fewer tiles (AVX-512: input_ itself)
    OutputFn output_ = nullptr;
    int64_t lanes_ = 0;              // floats per vector of the kernels
};

// >>depthwise conv
// Depthwise 2-D convolution of one plane (NCHW: one input channel to one output map): y = bias
// + the kernel_h x kernel_w taps of w times x, zero padded. pad() copies the input rows a band
// of output rows reads into scratch, each row split into stride_w phases (column c at phase
// c % stride_w), so every tap of an output vector is one contiguous load and no border needs a
// test; run_rows() then walks the band. The JIT kernels (Avx2, Avx512, Neon) keep the weights
// in registers, vectorize along the output width (a masked or lane-by-lane last vector) and
// take several rows per tile when the plane is narrow; they are generated once per process for
// each target and shape class. Other targets (and shapes past the JIT's limits: 49 taps, 32 on
// NEON) run a portable loop over the same copy.
struct DepthwiseShape {
    int64_t in_h = 1, in_w = 1, out_h = 1, out_w = 1;
    int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
    int64_t pad_top = 0, pad_left = 0;   // bottom and right padding follow from the output dims
};

class DepthwiseConv {
public:
    // InvalidArgument for dims or pads out of [1, 2^24] ([0, 2^24]); Unsupported when the CPU
    // lacks `isa`, for stride_w above 16 or a padded copy above 2^40 floats. A JIT target falls back to the portable loop when its kernel cannot be made.
    // Whatever the padded input does not cover (the bottom and right padding) reads as zero.
    // whole_planes: also make the whole-planes kernel (run_planes) where the target has one.
    Status init(const DepthwiseShape& shape, Isa isa = Isa::Auto, bool whole_planes = false);
    Isa isa() const { return isa_; }
    bool jit() const { return kernel_ != nullptr; }
    const DepthwiseShape& shape() const { return shape_; }
    // Floats of scratch one band of output rows [row0, row1) needs (the whole plane at most).
    size_t scratch_floats(int64_t rows) const;
    // The padded, phase-split copy of the input rows that output rows [row0, row1) read.
    // zeros_ready: scratch holds a copy of the same band already (of any plane): its zeros are
    // in place, only the input's values are copied.
    void pad(const float* x, int64_t row0, int64_t row1, float* scratch, bool zeros_ready = false) const;
    // Output rows [row0, row1) of plane y (out_h x out_w) from pad()'s copy of the same band;
    // weights kernel_h x kernel_w. Writes only those rows: the caller may finish each band
    // (an activation) while it is in cache.
    void run_rows(const float* scratch, const float* weights, float bias, float* y, int64_t row0, int64_t row1) const;
    // One whole plane.
    void run(const float* x, const float* weights, float bias, float* y, float* scratch) const {
        pad(x, 0, shape_.out_h, scratch);
        run_rows(scratch, weights, bias, y, 0, shape_.out_h);
    }
    // Stride_w 1 or 2 on AVX-512 and AVX2 also has a kernel of whole planes (a row's vectors
    // within its accumulators: 30 zmm, 27 at stride 2, 11 ymm), many a call: it reads each plane
    // where it lies (no padded copy; border taps masked), and the out-of-order core overlaps
    // consecutive planes, whose few rows alone would leave the FMAs waiting on their latency.
    // `planes` consecutive planes of x and y, weights planes x taps, bias planes floats or null.
    // Only when whole_planes() (asked for at init).
    bool whole_planes() const { return planes_kernel_ != nullptr; }
    void run_planes(const float* x, const float* weights, const float* bias, float* y, int64_t planes) const;
    // void kernel(padded band, weights, y band, &bias, AVX2 lane mask, rows)
    using KernelFn = void (*)(const float*, const float*, float*, const float*, const int32_t*, int64_t);
    // void kernel(x, weights, y, bias, planes, bias step in bytes)
    using PlanesFn = void (*)(const float*, const float*, float*, const float*, int64_t, int64_t);
    // The padded copy's layout (pad()): padded row r of a band at r * pitch(), phase p of it
    // p * phase() further on (the int8 depthwise writes the copy itself).
    int64_t pitch() const { return pitch_; }
    int64_t phase() const { return phase_; }

private:
    DepthwiseShape shape_;
    Isa isa_ = Isa::Ref;
    int64_t phase_ = 0;   // floats of one phase of a padded row
    int64_t pitch_ = 0;   // floats of one padded row (stride_w phases, 64-byte multiple)
    int32_t mask_[8] = {};
    KernelFn kernel_ = nullptr;
    // Kernels for the border rows whose window overhangs the input: they skip the kernel rows
    // that read padding (kernel_ reads the copy's zero rows instead, right for every row).
    struct RowKernel { int64_t first, last; KernelFn fn; };
    static constexpr int kRowKernels = 8;
    RowKernel row_kernels_[kRowKernels] = {};
    int row_kernel_count_ = 0;
    int64_t full_begin_ = 0, full_end_ = 0;   // output rows that sum every kernel row
    PlanesFn planes_kernel_ = nullptr;
    void row_taps(int64_t row, int64_t* first, int64_t* last) const;
    KernelFn row_kernel(int64_t first, int64_t last) const;
};

// >>pool rows
// MaxPool's and AveragePool's interior outputs of one output row, from the taps
// x[r * row_floats + j * stride_w + k] (r < rows, k < kernel_w) of output j < count, in the
// reference's order (row by row, left to right). Max: the first tap starts the max, then
// acc = v > acc ? v : acc, so NaN and signed zeros come out as the reference's. Average:
// ((0 + t0) + t1) + ... divided by the caller's divisor, the reference's rounding. The JIT
// kernels (Sse41, Avx2, Avx512, Neon) take count, kernel_w, stride_w and row_floats as
// immediates and rows at run time; a last partial vector is redone overlapping the one before
// it (narrower vectors, then single lanes, when the row holds less than a vector), so no load
// leaves the taps' span. They are generated once per process for each target and shape; other
// targets run a portable loop.
struct PoolRowShape {
    int64_t count = 1;        // outputs of the row
    int64_t kernel_w = 1;
    int64_t stride_w = 1;     // 1 or 2 on the JIT
    int64_t row_floats = 1;   // floats from one kernel row to the next
    int64_t average = 0;      // 0: max, 1: average
};

class PoolRows {
public:
    // InvalidArgument for dims out of [1, 2^24] (row_floats [1, 2^40], average 0 or 1);
    // Unsupported when the CPU lacks `isa`. A JIT target falls back to the portable loop when
    // its kernel cannot be made (stride_w above 2, kernel_w above 64, a row's taps spanning
    // 2^30 bytes or more, the table full, TESSEL_NO_JIT).
    Status init(const PoolRowShape& shape, Isa isa = Isa::Auto);
    Isa isa() const { return isa_; }
    bool jit() const { return kernel_ != nullptr; }
    const PoolRowShape& shape() const { return shape_; }
    // rows kernel rows from x (the first tap of output 0) to y[0 .. count); divisor: the
    // average's. rows < 1 writes nothing.
    void run(const float* x, int64_t rows, float* y, float divisor = 1.0f) const;
    using KernelFn = void (*)(const float* x, float* y, int64_t rows, float divisor);

private:
    PoolRowShape shape_;
    Isa isa_ = Isa::Ref;
    KernelFn kernel_ = nullptr;
};

// MaxPool's and AveragePool's whole planes (2-D windows, no dilation) by the reference's rule:
// taps row by row, left to right, padding taps skipped; max: the first real tap starts it, then
// acc = v > acc ? v : acc; average: ((0 + t0) + t1) + ... divided by the window's real taps, or
// its taps inside the pads with count_include_pad. The JIT kernel (Avx512) knows every border
// at generation (the border rows unrolled, those inside the plane one loop body): a vector of 16
// outputs of a row per tap, masked where a lane's tap is padding, so a plane needs no padded
// copy and no border pass, and one call runs many planes (the small maps of the inception nets,
// where per-plane and per-row overheads outweighed the taps). Small windows keep each input
// row's taps in registers down a strip of 16 output columns (rows_in_registers()); others load
// every tap (stride 2: two loads and one vpermt2ps). Other targets, and shapes past
// kPoolPlanesMaxTaps taps a plane, run a portable loop.
struct PoolPlaneShape {
    int64_t height = 1, width = 1, out_h = 1, out_w = 1;
    int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
    int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
    int64_t average = 0;             // 0: max, 1: average
    int64_t count_include_pad = 0;   // average: the divisor counts the taps inside the pads
};

class PoolPlanes {
public:
    // InvalidArgument for dims out of [1, 2^12] (pads [0, 2^12]), flags not 0 or 1, or a window
    // with no tap inside the plane; Unsupported when the CPU lacks `isa`. jit() false: the shape
    // or target has no kernel (the portable loop runs).
    Status init(const PoolPlaneShape& shape, Isa isa = Isa::Auto);
    Isa isa() const { return isa_; }
    bool jit() const { return kernel_ != nullptr; }
    // The JIT kernel keeps each input row's taps in registers while it runs down the rows
    // inside the plane (stride 1 up to 16 columns, stride 2 up to 3; at most 18 taps).
    bool rows_in_registers() const { return rows_in_registers_; }
    const PoolPlaneShape& shape() const { return shape_; }
    // planes planes of height x width at x (consecutive) into out_h x out_w planes at y.
    void run(const float* x, float* y, int64_t planes) const;
    using KernelFn = void (*)(const float* x, float* y, int64_t planes);

private:
    PoolPlaneShape shape_;
    Isa isa_ = Isa::Ref;
    KernelFn kernel_ = nullptr;
    bool rows_in_registers_ = false;
};

// >>gemm dot
// Dot products of one row x (k floats) with a block of rows of B (block(): 8 on AVX-512, else
// 4) or one, k floats apart: out[r] = sum_p x[p] b[r k + p], for Gemm with a few rows of A and B transposed (a fully
// connected layer at a small batch), where B is read once where it lies. The JIT kernels
// (Sse41, Avx2, Avx512, Neon) take k as an immediate and sum in vector lanes, two vectors a
// step per row (FMA but on Sse41), the lanes added at the end; a last partial vector is a
// masked load (AVX-512, AVX2) or single floats, so nothing past the k floats is read. The sum
// order is not the reference's: bound the error relative to sum |x||b|. Other targets run a
// portable loop in the same spirit (8 lanes).
class GemmDot {
public:
    // InvalidArgument for k outside [1, 2^24]; Unsupported when the CPU lacks `isa`.
    Status init(int64_t k, Isa isa = Isa::Auto);
    Isa isa() const { return isa_; }
    bool jit() const { return block_fn_ != nullptr && one_ != nullptr; }
    int64_t k() const { return k_; }
    int block() const { return block_; }   // rows run_block() does
    void run_block(const float* x, const float* b, float* out) const;   // out[0 .. block())
    void run1(const float* x, const float* b, float* out) const;        // out[0]
    using KernelFn = void (*)(const float* x, const float* b, float* out);

private:
    int64_t k_ = 1;
    Isa isa_ = Isa::Ref;
    int block_ = 4;
    KernelFn block_fn_ = nullptr, one_ = nullptr;
};

// >>int8 gemm
// C[m x n] (uint8) = requantize(A[m x k] (int8) B[k x n] (uint8)), exact in int32: A is the
// constant side (weights, packed once; rows are output channels), B the activations (packed per
// call into panels of nr columns). K goes in groups of 4 bytes, the unit of vpdpbusd and sdot:
// an A panel holds, per group, mr rows of 4 int8; a B panel, per group, nr columns of 4 uint8;
// K is padded with zero weights. Requantization, the same on every target: acc + bias[row]
// (int32, wrapping), converted to float32 (round to nearest even), times scale[row] (one
// float32 rounding, no FMA), clamped to [lo, hi] (integers: the output range minus the zero
// point, a Relu or Clip folded in), rounded half to even, plus zero_point. JIT tiles: AVX-512
// VNNI (8 x 48, vpdpbusd: u8 x s8 products summed in int32, no saturation), AMX where the CPU and
// the OS have it (32 x 32: four 16 x 16 int32 tiles of tdpbsud, A s8 x B u8; K padded to 64
// bytes, a tile row; the tiles are stored and requantized as VNNI's), AVX-VNNI (6 x 16,
// the same vpdpbusd on ymm, for AVX2 CPUs that have it) and AVX2 (6 x 8:
// vpmovzxbw and vpmaddwd on 16-bit operands, A packed as int16, since vpmaddubsw saturates
// the sum of two u8 x s8 products, 2 x 255 x 127 > 32767; for weights within [-64, 64] the
// AVX-VNNI tiles with each vpdpbusd by vpmaddubsw pairs, exact there) and NEON with the dot product
// extension (8 x 12, sdot by element: s8 x s8, so B is packed as x - 128 and each A panel
// carries 128 x its rows' sums to add back), NEON without it (4 x 12 on the same panels:
// smull and sadalp); other targets run a portable C++ tile over the same panels (8 x 16). All
// give the same bits.
struct Int8Requant {
    const int32_t* bias = nullptr;   // per row of C (the zero points' corrections folded in)
    const float* scale = nullptr;    // per row
    float lo = 0.0f, hi = 255.0f;    // clamp bounds before the zero point is added
    int32_t zero_point = 0;
};
// The scalar requantization every tile computes (the tests' oracle).
uint8_t int8_requantize(int32_t acc, int32_t bias, float scale, float lo, float hi, int32_t zero_point);
bool int8_vnni_available();       // AVX-512 VNNI on this CPU and build
bool int8_avx_vnni_available();   // AVX-VNNI (the VEX vpdpbusd on ymm) with AVX2
// AMX-INT8 with AVX-512 VNNI, and Linux granted this process the tile data state (asked once).
bool int8_amx_available();

class Int8Gemm {
public:
    // Isa::Avx512 takes the VNNI tile when the CPU has AVX-512 VNNI; Avx2 (and Avx512
    // without it) the AVX-VNNI tile where the CPU has AVX-VNNI, else the AVX2 tile; Neon the
    // sdot tile where the CPU has the dot product, else the smull tile; other targets the
    // portable tile. dot_products false skips the dot-product tiles (VNNI, AVX-VNNI, sdot) for
    // the ones under them (AVX2, smull), so tests reach those on any CPU; matrix_tiles false
    // skips AMX for the VNNI tile. narrow_weights (every weight A will hold lies within [-64, 64],
    // as 7-bit "reduce range" quantizers write): where the AVX2 tile would run, AVX-VNNI's
    // tiles run with vpmaddubsw pairs in place of vpdpbusd (exact for such weights: no pair's
    // sum saturates), also with dot_products false. Unsupported if the CPU lacks `isa`.
    Status init(Isa isa = Isa::Auto, bool dot_products = true, bool matrix_tiles = true, bool narrow_weights = false);
    // Whether every one of `count` weights lies within [-64, 64] (init's narrow_weights).
    static bool narrow(const int8_t* w, size_t count) {
        for (size_t i = 0; i < count; ++i)
            if (w[i] < -64 || w[i] > 64) return false;
        return true;
    }
    bool jit() const { return tiles_ != nullptr; }
    bool byte_pairs() const { return byte_pairs_; }   // the tiles by vpmaddubsw pairs (init's narrow_weights)
    bool widens_bytes() const { return a_bytes_ == 2; }   // AVX2's 16-bit tile: B zero-extended, A as int16
    bool amx() const { return amx_; }
    // Whether AMX beats the VNNI tile on an M x K A (weights) with B packed per call: K is padded
    // to 64-byte tile rows and M to 32, and B's packing, which costs both alike, outweighs the
    // tile's speed below about 64 x 256 (build/bench/int8's "+pack" columns).
    static bool amx_pays(int64_t m, int64_t k) { return m >= 64 && k >= 64 && m * k >= 16384; }
    Isa isa() const { return isa_; }
    uint32_t mr() const { return mr_; }
    uint32_t nr() const { return nr_; }
    static int64_t k_groups(int64_t k) { return (k + 3) / 4; }
    size_t packed_a_bytes(int64_t m, int64_t k) const { return (size_t)((m + mr_ - 1) / mr_) * panel_a_bytes(k); }
    size_t packed_b_bytes(int64_t k, int64_t n) const { return (size_t)((n + nr_ - 1) / nr_ * nr_ * groups(k) * 4); }
    // A[i][p] at a[i * a_row + p]; B[p][j] at b[p * b_row + j] (rows of B contiguous).
    void pack_a(int64_t m, int64_t k, const int8_t* a, int64_t a_row, int8_t* packed) const;
    void pack_b(int64_t k, int64_t n, const uint8_t* b, int64_t b_row, uint8_t* packed) const {
        pack_b_rows(k, n, b, b_row, nullptr, packed);
    }
    // Row p of B at b + row_offset[p] when row_offset is given (rows of an implicit im2col),
    // else at b + p * b_row.
    void pack_b_rows(int64_t k, int64_t n, const uint8_t* b, int64_t b_row, const int64_t* row_offset, uint8_t* packed) const;
    // B given by columns: B[p][j] at b[j * b_col + p] (a row-major activation matrix, transposed).
    void pack_b_columns(int64_t k, int64_t n, const uint8_t* b, int64_t b_col, uint8_t* packed) const;
    // B given by whole groups, as the panels hold them: rows 4g..4g+3 of column j are the 4 bytes
    // at b + group_offset[g] + 4 j (an activation copy with 4 channels a pixel). k a multiple of 4.
    // Each group of a panel is one copy.
    void pack_b_groups(int64_t k, int64_t n, const uint8_t* b, const int64_t* group_offset, uint8_t* packed) const;
    // dst[4 j + q] = rows[q][j] for j < n: four rows of B as n groups of 4 bytes (the implicit
    // convs' copy of 4 channels a pixel). A JIT kernel on AVX-512 VBMI, else SSE2 or NEON loops.
    void interleave4(const uint8_t* const* rows, int64_t n, uint8_t* dst) const;
    using InterleaveFn = void (*)(const uint8_t* const* rows, int64_t n, uint8_t* dst);
    // Whether pack_b_rows packs whole panels on a JIT kernel (AVX-512 VBMI): as fast from rows
    // as pack_b_groups from a copy of 4 channels a pixel, whose interleaving then costs extra.
    bool packs_rows_by_kernel() const { return pack_rows_ != nullptr; }
    // Rows [m0, m1) of C from packed A and B (panels of B for columns [0, n)); row i of C at
    // c + i * ldc. Requant's arrays are indexed by the row of C. Never allocates.
    void run(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* packed_b,
             const Int8Requant& rq, uint8_t* c, int64_t ldc) const;
    // Whether run_groups can be called: the tiles read B's groups in place (VNNI, AVX-VNNI).
    bool reads_b_groups() const { return group_tiles_ != nullptr; }
    // run() with B given as pack_b_groups takes it, unpacked: the tiles load each group of 4 rows
    // of a panel from b + group_offset[g] + 4 j0, so no pass packs B. k a multiple of 4. Each
    // group is read up to 4 (nr - 1) bytes past its column n - 1 (those columns are not stored).
    void run_groups(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* b,
                    const int64_t* group_offset, const Int8Requant& rq, uint8_t* c, int64_t ldc) const;
    // run() without the requantization (MatMulInteger): C(i, j) = the int32 sum + bias[i]
    // (wrapping), row i at c + i * ldc int32. prepare_sums() makes the tiles that store int32,
    // once per process and target, so run_sums never allocates: Unsupported on AMX's panels
    // (init with matrix_tiles false).
    Status prepare_sums();
    void run_sums(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* packed_b,
                  const int32_t* bias, int32_t* c, int64_t ldc) const;

    // The conv's other orientation (AVX-512 VNNI with VBMI, and AVX-VNNI): a tile of up to 8
    // output positions x 48 maps (AVX-VNNI: 6 x 16), each position's 4 bytes of a group
    // broadcast against 3 vectors of 16 maps of W (AVX-VNNI: 2 of 8), so a run of positions needs
    // no padding to the tile's width, no packed B, and no load of B splits a cache line. W [maps
    // x k] packs into panels of 48 maps (the last one narrower), per group 4 bytes a map; maps a
    // multiple of 16, k of 4.
    static constexpr int64_t kPixelRows = 8, kPixelMaps = 48;
    bool runs_pixels() const { return pixel_tiles_ != nullptr; }
    // Whether the pixel tiles beat the group tiles (run_groups) on rows of `width` positions:
    // AVX-512's always; AVX-VNNI's where a row's even tiles hold 5 positions or more (fewer leave
    // too few accumulators to cover vpdpbusd's latency: 7 x 7 maps ran 12-18% slower).
    bool pixels_pay(int64_t width) const;
    // Whether the pixel tiles beat the tiles of run() on a 1x1 conv of `positions` positions: on
    // AVX-512's VNNI tiles (no AMX) where run() would compute a quarter more columns than there
    // are positions (panels of 48, the last one by vectors of 16: 64 for a 7 x 7 map's 49, 7-18%
    // faster so); elsewhere the input copy the pixel tiles need costs more than it saves.
    bool pixels_pay_one_tap(int64_t positions) const;
    static size_t packed_pixels_bytes(int64_t maps, int64_t k) { return (size_t)((maps + 15) / 16 * 16 * k_groups(k) * 4); }
    void pack_pixels(int64_t maps, int64_t k, const int8_t* a, int64_t a_row, int8_t* packed) const;
    // `count` positions of rows `width` wide from column `column` of row 0 on: position (r, c)'s
    // group g at b + group_offset[g] + 4 (r b_pitch + c), its Y at r y_pitch + c of each map.
    struct PixelRun {
        const uint8_t* b;
        const int64_t* group_offset;
        int64_t b_pitch, y_pitch, width, column, count;
    };
    // Y for maps [m0, m1) (multiples of 16) of the `maps` packed, map m's at y + m * ldy. rq's
    // arrays are indexed by the map. Never allocates.
    void run_pixels(int64_t maps, int64_t m0, int64_t m1, int64_t k, const int8_t* packed, const PixelRun& run,
                    const Int8Requant& rq, uint8_t* y, int64_t ldy) const;
    // The pixel tiles storing int32 sums, for a row-major Y (MatMulInteger): Y[i][m] = bias[m] +
    // the sum over the groups g of position i's 4 bytes (at b + group_offset[g] + 4 i) times map
    // m's (pack_pixels, `maps` of any count: the panels' maps past it are zeros and unstored),
    // row i at y + i ldy int32, maps [m0, m1) (m0 a multiple of 16), positions [0, count).
    // prepare_pixel_sums makes the tiles once per process: Unsupported where runs_pixels() is
    // false or the tiles are AVX-VNNI's (run_sums then). Never allocates.
    Status prepare_pixel_sums();
    void run_pixel_sums(int64_t maps, int64_t m0, int64_t m1, int64_t k, const int8_t* packed, const uint8_t* b,
                        const int64_t* group_offset, int64_t count, const int32_t* bias, int32_t* y, int64_t ldy) const;
    // The W panel holding map m: its first map and width. Panels of 48, but the last 64 maps of
    // a remainder of 16 as 32 + 32 (a one-vector tile loads as much as it multiplies); AVX-VNNI's
    // of 16, its tile's width, so that a tile reads its W as one stream.
    void pixel_panel(int64_t maps, int64_t m, int64_t* first, int64_t* width) const;

    struct TileParams {
        const int32_t* bias;
        const float* scale;
        float lo, hi;
        int32_t zero_point;
        uint32_t mask[4];    // per vector of 16 columns: the lanes stored (Int8Gemv: 4 vectors)
        uint32_t rows;       // rows of C stored (the AMX tile; the others have a tile per count)
        const int64_t* b_groups;   // run_groups: group g of the B panel at the tile's B + b_groups[g]
        int64_t w_group_bytes;     // run_pixels: bytes of a group of the W panel
        // The VNNI, AVX-VNNI and AVX2 tiles: this many panels, whole ones when more than one, B's
        // b_panel_bytes apart, C's nr columns apart (Int8Gemm::run_panels: a call per run of
        // panels, not per panel).
        int64_t panels = 1;
        int64_t b_panel_bytes = 0;
    };
    // void tile(A panel, B panel, C, ldc, k groups, params)
    using TileFn = void (*)(const int8_t*, const uint8_t*, uint8_t*, int64_t, int64_t, const TileParams*);
    // B's whole groups of a whole panel: rows 4g..4g+3 at base + offsets[4g + q] (PackRowsFn) or
    // at base + (4g + q) * stride (PackStridedFn).
    using PackRowsFn = void (*)(const uint8_t* base, const int64_t* offsets, int64_t groups, uint8_t* packed);
    using PackStridedFn = void (*)(const uint8_t* base, int64_t stride, int64_t groups, uint8_t* packed);

private:
    Isa isa_ = Isa::Ref;
    uint32_t mr_ = 8, nr_ = 16;
    // K's groups in the panels: AMX pads them to whole tile rows of 16 groups.
    int64_t groups(int64_t k) const { return (k_groups(k) + group_block_ - 1) / group_block_ * group_block_; }
    size_t panel_a_bytes(int64_t k) const { return (size_t)(mr_ * groups(k) * 4 * a_bytes_ + (signed_b_ ? mr_ * 4 : 0)); }
    uint32_t a_bytes_ = 1;            // bytes per element of packed A (AVX2: int16)
    int64_t group_block_ = 1;         // AMX: 16
    bool amx_ = false;                // A panels hold 64-byte rows per 16 groups (a tile's rows)
    void (*amx_begin_)() = nullptr;   // AMX: run() configures the tiles for its calls, then releases them
    void (*amx_end_)() = nullptr;
    // B's whole groups of a whole panel on AVX-512 VBMI (the VNNI and AMX tiles' panels).
    PackRowsFn pack_rows_ = nullptr;
    PackStridedFn pack_strided_ = nullptr;
    InterleaveFn interleave_ = nullptr;   // with pack_rows_
    bool signed_b_ = false;           // B packed as x - 128, A panels end with 128 x row sums (sdot)
    bool byte_pairs_ = false;         // AVX-VNNI's panels on vpmaddubsw pairs
    bool masked_ = false;             // the tiles store partial panels themselves (VNNI)
    const TileFn* tiles_ = nullptr;   // [rows - 1], may be null
    const TileFn* group_tiles_ = nullptr;   // tiles_ reading B's groups in place (run_groups), may be null
    const TileFn* sum_tiles_ = nullptr;     // tiles_ storing int32 sums (run_sums), after prepare_sums
    int64_t pixel_rows_ = kPixelRows, pixel_vectors_ = 3;   // the pixel tiles' positions, and vectors of 16 maps
    const TileFn* pixel_tiles_ = nullptr;   // [vectors - 1][rows - 1]: run_pixels, may be null
    const TileFn* pixel_sum_tiles_ = nullptr;   // the same shapes storing int32 (run_pixel_sums), after prepare_pixel_sums
    bool panel_loops_ = false;        // tiles_ and group_tiles_ take runs of whole panels (TileParams::panels)
    // sums: C holds int32 (run_sums), c its first byte, ldc in int32.
    void run_panels(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* b,
                    const int64_t* group_offset, const Int8Requant& rq, uint8_t* c, int64_t ldc, bool sums = false) const;
};

// >>int8 gemv
// Y[rows x n] (uint8) = requantize(X[rows x k] (uint8) W^T) for a few rows of X (batch-1
// fully connected layers), Int8Gemm's requantization and bits: W [n x k] (int8, a row per
// output column) packed once into panels of 64 columns, per group of 4 K bytes 64 x 4 bytes,
// one vector per 16 columns; each group broadcasts a row's 4 bytes of X and sums 4 vectors of
// W into it with vpdpbusd. Int8Gemm's tile would read a 48-column panel of B for one column
// of X and spend 16 lanes of every instruction on it; here each weight byte is loaded once and
// used by every row. AVX-512 VNNI: 64 columns a call; AVX-VNNI (ymm vpdpbusd) and AVX2 (exact
// vpmaddwd on int16, weights sign-extended in registers) 64 for one row, fewer for more, from the
// same panels. init is Unsupported on other targets (callers keep Int8Gemm).
class Int8Gemv {
public:
    static constexpr int64_t kColumns = 64;   // per panel
    static constexpr int64_t kRows = 4;       // of X the callers hand it (batch-1 layers)
    // dot_products false skips the dot-product kernels (VNNI, AVX-VNNI) for the AVX2 one.
    Status init(Isa isa = Isa::Auto, bool dot_products = true);
    int64_t columns_per_call(int64_t rows) const { return columns_per_call_[rows - 1]; }   // a call of `rows` rows takes
    int64_t rows_per_call() const { return rows_per_call_; }   // 4, or 2 on AVX2
    static size_t packed_bytes(int64_t n, int64_t k) {
        return (size_t)((n + kColumns - 1) / kColumns * kColumns * Int8Gemm::k_groups(k) * 4);
    }
    // W[j][p] at w[j * w_row + p]; panels padded with zero weights.
    static void pack(int64_t n, int64_t k, const int8_t* w, int64_t w_row, int8_t* packed);
    // Columns [panel0 * 64, min(n, panel1 * 64)) of rows [0, rows) of Y (row r at y + r * ldy).
    // x: the rows of X, k_groups(k) * 4 bytes apart (K padded with any bytes: their weights
    // are 0). rq's arrays are indexed by the column of Y and hold whole panels (padded to a
    // multiple of 64). Never allocates.
    void run(int64_t panel0, int64_t panel1, int64_t rows, int64_t n, int64_t k, const int8_t* packed, const uint8_t* x,
             const Int8Requant& rq, uint8_t* y, int64_t ldy) const;

private:
    const Int8Gemm::TileFn* kernels_ = nullptr;   // [rows - 1]
    int64_t columns_per_call_[kRows] = {kColumns, kColumns, kColumns, kColumns}, rows_per_call_ = kRows;
    bool ymm_ = false;   // the ymm kernels store whole calls: a partial one goes through a buffer
};


// >>int8 winograd
// Int8 3x3 convs of stride 1 by Winograd F(2x2, 3x3) (Lavin and Gray) in integers, bit-exact with
// the direct conv: a tile of 2x2 output pixels from 4x4 padded inputs. The weights' transform
// times 4 (G' = 2 G: integer entries) makes int16 U (|U| <= 9 x 128), the inputs' of uint8 int16
// V (|V| <= 4 x 255), the 16 points' sums over channels run on AVX2's 16-bit tile (vpmaddwd:
// two products < 2^31) and the output transform in wrapping int32 gives 4 y mod 2^32, y the
// direct sum: exact while |4 y| < 2^31 (fits()). 2.25 multiplies where the direct conv does 9,
// for AVX2 CPUs without a byte dot product, whose direct int8 tiles run vpmaddwd too (16-bit)
// or at most 1.5x its rate (byte pairs). Requantized as Int8Gemm does (int8_requantize's bits).
class Int8WinogradF23 {
public:
    static constexpr int64_t kPoints = 16;
    static constexpr int64_t kMapRows = 6;     // maps per panel of U (the 16-bit tile's rows)
    static constexpr int64_t kTileColumns = 8;   // tiles per panel of V (its columns)
    // AVX2's tile (also when asked for Avx512), then jit(); elsewhere portable loops (tests).
    // Unsupported if the CPU lacks `isa`.
    Status init(Isa isa = Isa::Auto);
    bool jit() const { return tiles_ != nullptr; }
    // Whether sums over `channels` stay exact: channels x 9 taps x 128 x 255, times 4, < 2^31.
    static bool fits(int64_t channels) { return channels >= 1 && channels * 9 * 128 * 255 * 4 < ((int64_t)1 << 31); }
    static int64_t groups(int64_t channels) { return (channels + 3) / 4; }
    static int64_t padded_tiles(int64_t tiles) { return (tiles + kTileColumns - 1) / kTileColumns * kTileColumns; }
    // U: point p's panel j (maps 6 j .. 6 j + 5) at u + (p panels + j) groups 24, per group of 4
    // channels 6 maps x 4 int16; zero past the maps and channels.
    static size_t weights_bytes(int64_t maps, int64_t channels) {
        return (size_t)(kPoints * ((maps + kMapRows - 1) / kMapRows) * groups(channels) * kMapRows * 4 * 2);
    }
    static void transform_weights(int64_t maps, int64_t channels, const int8_t* w, int16_t* u);   // w[m][c][3][3]
    // V of `tiles` tiles: point p's panel j (tiles 8 j .. 8 j + 7) at v + (p panels + j) groups
    // 32, per group 8 tiles x 4 int16; zero past the tiles and channels.
    static size_t input_bytes(int64_t channels, int64_t tiles) {
        return (size_t)(kPoints * padded_tiles(tiles) * groups(channels) * 4 * 2);
    }
    // The input planes: channel c's h x w bytes at x + c plane; padded row r, column q reads x's
    // row r - pad_top, column q - pad_left, or zero_point outside it. A row of tiles is tiles_x.
    struct Planes {
        const uint8_t* x;
        int64_t channels, plane, h, w, pad_top, pad_left, tiles_x;
        uint8_t zero_point;
    };
    // V of tiles [t0, t0 + tiles) of the plane's tiles in rows of tiles_x: tile t is (t / tiles_x,
    // t % tiles_x) and reads padded rows 2 ty .. 2 ty + 3, columns 2 tx .. 2 tx + 3; it is tile
    // t - t0 of V. Never allocates; scratch holds input_scratch_bytes.
    static size_t input_scratch_bytes(int64_t tiles_x, int64_t tiles);
    void transform_input(const Planes& in, int64_t t0, int64_t tiles, int16_t* v, uint8_t* scratch) const;
    // M of maps [m0, m0 + rows) (m0 a multiple of 6, rows up to 6) for V's `tiles`: point p, map
    // m0 + r, tile t at m[(6 p + r) sums_pitch(tiles) + t].
    static int64_t sums_pitch(int64_t tiles) { return padded_tiles(tiles) + 8; }
    static size_t sums_bytes(int64_t tiles) { return (size_t)(kPoints * kMapRows * sums_pitch(tiles) * 4); }
    void multiply(int64_t maps, int64_t channels, int64_t m0, int64_t rows, int64_t tiles, const int16_t* u, const int16_t* v,
                  int32_t* m) const;
    // Those maps' outputs from M of tiles [t0, t0 + tiles) of an out_h x out_w plane, map m0 + r's
    // at y + (m0 + r) map_stride, requantized with rq's entries m0 + r.
    void transform_output(const int32_t* m, int64_t m0, int64_t rows, int64_t t0, int64_t tiles, int64_t tiles_x,
                          int64_t out_h, int64_t out_w, const Int8Requant& rq, uint8_t* y, int64_t map_stride) const;
    // The three in order: tiles [t0, t0 + tiles) of the out_h x out_w outputs of `maps` maps, map
    // panels [panel0, panel1) of them (6 maps each); v, sums and scratch hold input_bytes,
    // sums_bytes and input_scratch_bytes of `tiles`.
    void convolve_band(const Planes& in, int64_t t0, int64_t tiles, int64_t maps, int64_t panel0, int64_t panel1, const int16_t* u,
                       const Int8Requant& rq, int64_t out_h, int64_t out_w, uint8_t* y, int64_t map_stride, int16_t* v, int32_t* sums,
                       uint8_t* scratch) const;

    // The output transform of 8 tiles a vector (AVX2): detail::make_int8_winograd_output.
    using OutputFn = void (*)(const int32_t* m, int64_t point_bytes, uint8_t* row0, uint8_t* row1, int64_t groups,
                              const Int8Gemm::TileParams* params);

private:
    const Int8Gemm::TileFn* tiles_ = nullptr;   // [rows - 1]: AVX2's 16-bit tile on int16 B, int32 C
    OutputFn output_ = nullptr;
};

// >>int8 depthwise
// Depthwise 2-D convolution of one uint8 plane with int8 weights, requantized as Int8Gemm
// requantizes (int8_requantize), exact in int32. pad() copies the band of input rows that
// output rows read into a uint8 scratch, the padding holding x's zero point (a real zero), so
// the kernel sums w * x over every tap and the bias carries -zero point * sum(w)
// (kernel_bias()). Along a row, 4 consecutive bytes make one dot-product unit: lane i of a
// vector loaded at column 4 i + r + 4 g holds the taps 4 g .. 4 g + 3 of output column 4 i + r
// (stride 1, phases r = 0..3) or of 2 i + r (stride 2, loaded at 4 i + 2 r + 4 g, r = 0..1), so
// one vpdpbusd (AVX-512 VNNI) or sdot (NEON with the dot product: the copy holds x - 128 as
// int8 and the bias adds 128 * sum(w)) sums 4 taps of a vector of outputs; the phases' bytes
// interleave back by shifts. JIT only: Unsupported for other targets and shapes (stride_w
// above 2, dilation_w above 1, kernels of more than 16 groups of 4 taps), where callers keep
// their float or int32 kernels. AVX2 (and AVX-512 without VNNI) runs 32-byte vectors of
// AVX-VNNI's vpdpbusd where the CPU has it; without a byte dot product (vpmaddubsw saturates:
// 2 x 255 x 128 > 32767) its kernel sums pairs of taps exactly with vpmaddwd on the copy's bytes
// zero-extended to int16 (two phases at stride 1, one at 2), or, for weights within [-64, 64],
// runs AVX-VNNI's kernel with each vpdpbusd by vpmaddubsw pairs (exact there). Both store whole vectors, the rows
// going to scratch first as on NEON. Narrow planes with equal strides run flat: the copy's rows are
// about stride * out_w + kernel_w bytes apart and the kernel sweeps the band as one long row
// (the columns past out_w compute values nobody reads), then the rows are copied into y.
class Int8DepthwiseConv {
public:
    // dot_products false skips the dot-product kernels (VNNI, AVX-VNNI, sdot): x86 then takes
    // the 16-bit AVX2 one, NEON none. whole_planes: also make the whole-planes kernel
    // (run_planes) where the target has one. narrow_weights (every weight within [-64, 64]):
    // where the 16-bit AVX2 kernel would run, the 32-byte one by vpmaddubsw pairs (byte_pairs()).
    Status init(const DepthwiseShape& shape, Isa isa = Isa::Auto, bool dot_products = true, bool whole_planes = false,
                bool narrow_weights = false);
    bool byte_pairs() const { return byte_pairs_; }
    Isa isa() const { return isa_; }
    const DepthwiseShape& shape() const { return shape_; }
    bool flat() const { return flat_; }
    // Bytes of scratch one band of output rows [row0, row1) needs: the padded copy, and (flat, or
    // NEON: no masked stores) the band's output rows before they are copied into y.
    size_t scratch_bytes(int64_t rows) const;
    // The padded copy of the input rows that output rows [row0, row1) read. borders_ready:
    // scratch holds the copy of the same band with the same zero point already (of any plane):
    // only the input's bytes are copied.
    void pad(const uint8_t* x, uint8_t zero_point, int64_t row0, int64_t row1, uint8_t* scratch, bool borders_ready = false) const;
    // Weights kernel_h x kernel_w as the kernel reads them (groups of 4 taps, zero filled; AVX2:
    // each group, or pair of taps as int16, 8 times).
    size_t packed_weights_bytes() const { return (size_t)(shape_.kernel_h * (wide_units_ ? wide_units_ * 32 : groups_ * 4)); }
    void pack_weights(const int8_t* w, int8_t* packed) const;
    // The bias the kernel starts from: bias - zero_point * weight_sum (+ 128 * weight_sum on
    // NEON), wrapping as the int32 accumulators do.
    int32_t kernel_bias(int32_t bias, int32_t zero_point, int64_t weight_sum) const;
    // Output rows [row0, row1) of plane y (out_h x out_w) from pad()'s copy of the same band.
    void run_rows(uint8_t* scratch, const int8_t* packed_weights, int32_t kernel_bias, float scale, const Int8Requant& rq,
                  uint8_t* y, int64_t row0, int64_t row1) const;

    struct Params {
        const uint8_t* x;        // the first row's first padded input row
        int64_t x_row_step;      // bytes between output rows' first input rows (stride_h rows)
        int64_t tap_row_step;    // bytes between a kernel's rows (dilation_h rows)
        uint8_t* y;
        int64_t y_row_step;
        int64_t rows;
        int64_t iterations;      // blocks of a row; the last stores through tail_masks
        const int8_t* weights;
        int32_t bias;
        float scale, lo, hi;
        int32_t zero_point;
        uint64_t tail_masks[4];  // per vector of the last block: the bytes stored (x86)
    };
    using KernelFn = void (*)(const Params*);

    // AVX-512 VNNI also has a kernel of whole planes, many a call: it reads each plane where it
    // lies (no padded copy, no copy of the output): a tap's load is masked to the input's bytes,
    // the padding's lanes keeping x's zero point. A small plane of stride 1 whose rows are as
    // wide as the input's runs flat (out_h x out_w outputs as one row, each vector's lanes masked
    // where their taps wrap into the next row); others row by row, the rows that read no padding
    // row one loop body. `planes` consecutive planes of x and y; weights (packed_weights_bytes()
    // each), kernel_bias and scale per plane. The same bytes as run_rows.
    bool whole_planes() const { return planes_kernel_ != nullptr; }
    // How the whole-planes kernel sweeps a plane: "flat", "rows" (all unrolled) or "rows+loop".
    const char* planes_sweep() const { return planes_sweep_; }
    // Whether the whole-planes kernel is the faster of the two by a cost model (cycles: a
    // vector's dot products and requantization, a call and the copies per plane of the row
    // kernels): rows much narrower than a vector (5 outputs of 32 at stride 2) or wide ones
    // whose last vector is mostly empty (80 of 128) sweep fewer vectors flat on the copy.
    bool planes_pay() const { return planes_pay_; }
    void run_planes(const uint8_t* x, uint8_t x_zero_point, const int8_t* packed_weights, const int32_t* kernel_bias,
                    const float* scale, const Int8Requant& rq, uint8_t* y, int64_t planes) const;
    struct PlanesParams {
        const uint8_t* x;
        uint8_t* y;
        const int8_t* weights;
        const int32_t* bias;
        const float* scale;
        int64_t planes, x_plane_step, y_plane_step, weight_step;
        float lo, hi;
        int32_t zero_point;
        uint32_t x_fill;         // x's zero point in each byte
    };
    using PlanesFn = void (*)(const PlanesParams*);

private:
    DepthwiseShape shape_;
    Isa isa_ = Isa::Ref;
    KernelFn kernel_ = nullptr;
    PlanesFn planes_kernel_ = nullptr;
    const char* planes_sweep_ = "";
    bool planes_pay_ = false;
    int64_t groups_ = 1;         // groups of 4 taps per kernel row
    // AVX2: per kernel row, the groups of 4 taps (AVX-VNNI) or pairs of taps (int16) its packed
    // weights hold, each as 8 copies of its 4 bytes; 0 elsewhere
    int64_t wide_units_ = 0;
    int64_t vector_bytes_ = 16, block_outputs_ = 16, iterations_ = 1;
    int64_t pitch_ = 0;          // bytes of a padded row
    int64_t out_pitch_ = 0;      // bytes of an output row in scratch (0: stored straight into y)
    bool signed_x_ = false;      // the copy holds x ^ 0x80 (sdot)
    bool flat_ = false;          // the band as one row of pitch_ * rows bytes (output rows pitch_ apart)
    bool byte_pairs_ = false;    // the AVX2 kernel by vpmaddubsw pairs
    int64_t copy_bytes(int64_t rows) const;   // the padded copy of a band and the bytes its last block reads past it
    // flat: outputs a band of rows sweeps, up to its last output (not the last row's spare columns)
    int64_t flat_length(int64_t rows) const { return (rows - 1) * pitch_ + shape_.out_w; }
};

// >>int8 lookup
// y[j] = table[x[j]] over n bytes: the 256-entry tables of the int8 steps (a one-input op or a
// change of grid on uint8 values). JIT: AVX-512 VBMI (the table in four zmm registers: one
// vpermi2b per half of the table, the index's high bit picks the half; the tail through a byte
// mask), AVX2 (16 vpshufb of 16-byte rows, 32 bytes a step, the tail in C++; also AVX-512
// without VBMI) and NEON (tbl/tbx over four 64-byte quarters, 16 bytes a step, the tail in C++).
// Other targets run the portable loop. Any target gives the table's bytes, so results never differ.
class Int8Lookup {
public:
    // Unsupported when the CPU lacks `isa`; targets without a kernel keep the portable loop.
    Status init(Isa isa = Isa::Auto);
    Isa isa() const { return isa_; }
    bool jit() const { return kernel_ != nullptr; }
    // Bytes a few microseconds of lookups take, a unit worth handing to another thread: 64 KiB on
    // AVX-512 VBMI's kernel (tens of bytes a nanosecond), 16 KiB on the others (AVX2's 16
    // vpshufb a vector: about 7 bytes a nanosecond).
    uint64_t unit_bytes() const { return kernel_ && block_ == 1 ? 65536 : 16384; }
    // x and y may be the same array (not otherwise overlapping). n < 1 writes nothing.
    void run(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) const;
    static void run_portable(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n);   // any target
    using KernelFn = void (*)(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n);

private:
    Isa isa_ = Isa::Ref;
    KernelFn kernel_ = nullptr;
    int64_t block_ = 1;   // bytes the kernel takes a step (it does whole blocks only when above 1)
};

// >>int8 max taps
// The uint8 MaxPool's passes over planes: for planes p < planes, rows r < rows and outputs
// j < n, y[p y_plane + r y_row + j] = max over k < taps of x[p x_plane + r x_row + j stride +
// k step], stride 1 or 2 (a window's rows down its columns, then its taps along each row). JIT: AVX-512 BW (with BMI2),
// 64 outputs a step, the last through byte masks, so nothing past the taps is read and nothing
// past the outputs written; stride 2 picks the even bytes by VBMI's vpermt2b. AVX2 (and AVX-512
// without those): 32 outputs a step, a row's last ones by a step again ending at its end. Other
// targets and strides run the portable loop; every target gives the same bytes.
struct Int8MaxTapsArgs {
    const uint8_t* x = nullptr;
    uint8_t* y = nullptr;
    int64_t n = 0, taps = 1, step = 0, stride = 1, rows = 1, x_row = 0, y_row = 0;
    int64_t planes = 1, x_plane = 0, y_plane = 0;
};

class Int8MaxTaps {
public:
    // Unsupported when the CPU lacks `isa`; targets without a kernel keep the portable loop.
    Status init(Isa isa = Isa::Auto);
    Isa isa() const { return isa_; }
    bool jit(int64_t stride) const { return (stride == 1 ? stride1_ : stride == 2 ? stride2_ : nullptr) != nullptr; }
    // Nothing for n, taps, rows or planes below 1. x and y must not overlap.
    void run(const Int8MaxTapsArgs& args) const;
    static void run_portable(const Int8MaxTapsArgs& args);
    using KernelFn = void (*)(const Int8MaxTapsArgs* args);

private:
    Isa isa_ = Isa::Ref;
    KernelFn stride1_ = nullptr, stride2_ = nullptr;
};

// >>int8 convert
// The int8 steps' conversions between bytes and floats, each the same float32 operations in
// the same order on every target, so every target gives the portable loops' bits:
// - quantize: y = clamp(round_half_even(x / scale), lo - zero_point, hi - zero_point) +
//   zero_point, NaN as 0 (QuantizeLinear; the division, not a reciprocal, for its bits);
// - dequantize: y = (float)(x - zero_point) * scale, one rounding (DequantizeLinear);
// - pair: y[j] = table[a[j] << 8 | b[j]], a 256 x 256 table of a binary op's results;
// - binary: y = quantize(dequantize(a) op dequantize(b)), uint8, op Add, Sub or Mul: the two
//   above with the op between, fused (no gathers: they are slow on some CPUs, AMD's among them;
//   scales that could make a NaN take the portable loop);
// - lookup: y[j] = table[x[j]], 256 floats (a DequantizeLinear and the float ops after it).
// JIT: AVX-512 (16 elements a vector, vpmovdb down-conversion, a gather for the pair table, the
// float table by byte planes with VBMI, else AVX2's loop) and AVX2 (8 a vector, the float
// table by scalar loads); whole vectors only, the tail and other targets in portable loops.
class Int8Convert {
public:
    // Bytes readable past a pair table's 65536 (the gather reads 4 bytes an element).
    static constexpr size_t kPairTablePadding = 4;
    // Unsupported when the CPU lacks `isa`; targets without kernels keep the portable loops.
    Status init(Isa isa = Isa::Auto);
    Isa isa() const { return isa_; }
    bool jit() const { return quantize_ != nullptr; }
    // lo and hi: the quantized type's range (0 and 255, or -128 and 127), lo <= zero_point <= hi.
    void quantize(const float* x, uint8_t* y, int64_t n, float scale, int32_t zero_point, int32_t lo, int32_t hi) const;
    void quantize(const float* x, int8_t* y, int64_t n, float scale, int32_t zero_point, int32_t lo, int32_t hi) const;
    void dequantize(const uint8_t* x, float* y, int64_t n, float scale, int32_t zero_point) const;
    void dequantize(const int8_t* x, float* y, int64_t n, float scale, int32_t zero_point) const;
    void pair(const uint8_t* table, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n) const;
    void lookup(const float* table, const uint8_t* x, float* y, int64_t n) const;
    // lo and hi: y's range, as quantize's (a Relu: lo at y's zero point).
    struct Binary {
        SnippetOp op = SnippetOp::Add;   // Add, Sub or Mul
        float a_scale = 1.0f, b_scale = 1.0f, y_scale = 1.0f;
        int32_t a_zero_point = 0, b_zero_point = 0, y_zero_point = 0, lo = 0, hi = 255;
    };
    void binary(const Binary& op, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n) const;

    struct Params { float scale, lo, hi; int32_t zero_point; };   // lo, hi: the float clamp (quantize)
    // The binary kernels' arguments: lo, hi the float clamp, as Params'.
    struct BinaryParams { float a_scale; int32_t a_zero_point; float b_scale; int32_t b_zero_point; float y_scale, lo, hi; int32_t y_zero_point; };
    using QuantizeFn = void (*)(const float* x, void* y, int64_t n, const Params* params);
    using DequantizeFn = void (*)(const void* x, float* y, int64_t n, const Params* params);
    using PairFn = void (*)(const uint8_t* table, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n);
    using LookupFn = void (*)(const float* table, const uint8_t* x, float* y, int64_t n);
    using BinaryFn = void (*)(const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n, const BinaryParams* params);

private:
    Isa isa_ = Isa::Ref;
    QuantizeFn quantize_ = nullptr, quantize_signed_ = nullptr;
    DequantizeFn dequantize_ = nullptr, dequantize_signed_ = nullptr;
    PairFn pair_ = nullptr;
    LookupFn lookup_ = nullptr;
    BinaryFn binary_[3] = {};   // Add, Sub, Mul
    int64_t block_ = 1;   // elements of one kernel step: the kernels take whole blocks
    int64_t lookup_block_ = 1;   // the lookup kernel's (1: it takes any count)
};

// >>opencl printer
// A body printed as an OpenCL C kernel: the third target beside x64 and a64. The same
// eval_op templates run over a vector model that prints one statement per primitive, so the
// kernel computes what the interpreter computes (FMA mode, NaN rules, lookup tables),
// provided the driver rounds division and sqrt correctly (build option
// -cl-fp32-correctly-rounded-divide-sqrt) and does not contract products (the prelude's
// FP_CONTRACT OFF). One work-item per element of the body's domain (the broadcast of its
// values' shapes); kernel arguments are the parameters in order, then the results.
class OpenClSource {
public:
    OpenClSource() = default;
    ~OpenClSource();
    OpenClSource(const OpenClSource&) = delete;
    OpenClSource& operator=(const OpenClSource&) = delete;
    void append(const char* format, ...) TESSEL_PRINTF_FORMAT(2, 3);
    const char* text() const { return text_ ? text_ : ""; }
    size_t size() const { return size_; }
    bool failed() const { return failed_; }   // out of memory at some append (sticky)
    void clear() { size_ = 0; if (text_) text_[0] = 0; }

private:
    char* text_ = nullptr;
    size_t size_ = 0, capacity_ = 0;
    bool failed_ = false;
};
// What every program with island kernels starts with: the pragma and the lookup tables.
void print_opencl_prelude(OpenClSource* out);
// Appends `__kernel void kernel_name(...)` computing `body`. The domain's element count goes
// in *elements (the global work size). InvalidArgument for a body without results,
// OutOfMemory when the text cannot grow.
Status print_opencl_kernel(const SnippetBody& body, const char* kernel_name, OpenClSource* out, uint64_t* elements);
// Appends `void function_name(ulong g, float acc, p..., r...)`: the same body for domain
// element g, as the epilogue of a node kernel whose result `acc` is parameter `fused` (left
// out of the parameters). Its domain must have *elements elements, each parameter `fused`'s
// one. InvalidArgument otherwise, or for a body without results.
Status print_opencl_epilogue(const SnippetBody& body, uint32_t fused, const char* function_name, OpenClSource* out, uint64_t* elements);
constexpr uint32_t kNoFusedParameter = ~0u;

}  // namespace tessel
#endif  // TESSEL_SNIPPETS_H

// ==========================================================================================
// Implementation
// ==========================================================================================
#if defined(TESSEL_IMPLEMENTATION) && !defined(TESSEL_SNIPPETS_IMPLEMENTED)
#define TESSEL_SNIPPETS_IMPLEMENTED

#include <cstddef>   // offsetof: the JIT tiles read TileParams fields
#include <initializer_list>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#ifndef TESSEL_NO_JIT
#include <asmjit/x86.h>
#include <asmjit/arm/a64assembler.h>   // Debian's asmjit snapshot has no asmjit/a64.h
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(__linux__)
#include <unistd.h>   // sysconf: cache sizes where there is no CPUID
#include <sys/syscall.h>   // arch_prctl: the AMX tile state
#endif
#if defined(__SSE2__)
#include <emmintrin.h>   // Int8Gemm's packing, Gemm's A panels (x86-64's baseline)
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace tessel {
namespace detail {

// >>helpers
inline uint32_t float_bits(float x) { uint32_t b; std::memcpy(&b, &x, 4); return b; }
inline float bits_float(uint32_t b) { float x; std::memcpy(&x, &b, 4); return x; }
inline uint64_t now_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

// Right-aligned NumPy broadcast of two shapes; false if they do not broadcast.
inline bool broadcast_shapes(const SnippetShape& a, const SnippetShape& b, SnippetShape* out) {
    SnippetShape r;
    r.rank = a.rank > b.rank ? a.rank : b.rank;
    for (int i = 0; i < r.rank; ++i) {
        int ia = a.rank - r.rank + i, ib = b.rank - r.rank + i;
        int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        r.dims[i] = da == 1 ? db : da;
    }
    *out = r;
    return true;
}
inline uint64_t shape_elements(const SnippetShape& s) {
    uint64_t n = 1;
    for (int i = 0; i < s.rank; ++i) n *= (uint64_t)s.dims[i];
    return n;
}

// >>vector model
// The primitives every approximation is written with. ScalarMath models one lane with the
// exact x86 semantics of the instruction each primitive emits (min/max operand order,
// cvtps2dq's integer indefinite, compare predicates), so interpreter and JIT agree bitwise.
enum CmpPredicate : uint8_t { kCmpEq = 0, kCmpLt = 1, kCmpLe = 2, kCmpUnord = 3, kCmpNeq = 4, kCmpNlt = 5, kCmpNle = 6, kCmpOrd = 7 };
enum RoundMode : uint8_t { kRoundNearest = 0, kRoundFloor = 1, kRoundCeil = 2, kRoundTrunc = 3 };

// Keeps a product rounded on its own. Without it the compiler may contract a*b+c into an FMA
// (GCC does so by default in C++ on AArch64, and on x86 when -march has FMA), and the
// interpreter would no longer match the non-FMA target bit for bit.
inline float rounded(float x) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__("" : "+x"(x));
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__("" : "+w"(x));
#else
    volatile float v = x;
    x = v;
#endif
    return x;
}

struct ScalarMath {
    using V = float;
    bool fused = true;
    V c(float v) { return v; }
    V cb(uint32_t b) { return bits_float(b); }
    V add(V a, V b) { return a + b; }
    V sub(V a, V b) { return a - b; }
    V mul(V a, V b) { return rounded(a * b); }
    V div(V a, V b) { return a / b; }
    V min(V a, V b) { return a < b ? a : b; }
    V max(V a, V b) { return a > b ? a : b; }
    V sqrt(V a) { return std::sqrt(a); }
    V fma(V a, V b, V c) {
        if (fused) return std::fma(a, b, c);
        V p = rounded(a * b);  // the non-FMA targets multiply, then add
        return p + c;
    }
    V fnma(V a, V b, V c) {  // c - a*b
        if (fused) return std::fma(-a, b, c);
        V p = rounded(a * b);
        return c - p;
    }
    V and_(V a, V b) { return cb(float_bits(a) & float_bits(b)); }
    V or_(V a, V b) { return cb(float_bits(a) | float_bits(b)); }
    V xor_(V a, V b) { return cb(float_bits(a) ^ float_bits(b)); }
    V andnot(V a, V b) { return cb(~float_bits(a) & float_bits(b)); }
    V cmp(V a, V b, int predicate) {
        bool unordered = a != a || b != b, r = false;
        switch (predicate) {
            case kCmpEq: r = !unordered && a == b; break;
            case kCmpLt: r = !unordered && a < b; break;
            case kCmpLe: r = !unordered && a <= b; break;
            case kCmpUnord: r = unordered; break;
            case kCmpNeq: r = unordered || a != b; break;
            case kCmpNlt: r = unordered || !(a < b); break;
            case kCmpNle: r = unordered || !(a <= b); break;
            default: r = !unordered; break;
        }
        return cb(r ? 0xffffffffu : 0u);
    }
    V blend(V mask, V a, V b) { return float_bits(mask) ? a : b; }
    V round(V a, int mode) {
        switch (mode) {
            case kRoundNearest: return std::nearbyint(a);
            case kRoundFloor: return std::floor(a);
            case kRoundCeil: return std::ceil(a);
            default: return std::trunc(a);
        }
    }
    V cvt_i(V a) {  // cvtps2dq: round to nearest even, NaN and overflow give INT32_MIN
        if (!(a >= -2147483648.0f && a < 2147483648.0f)) return cb(0x80000000u);
        return cb((uint32_t)(int32_t)std::nearbyint(a));
    }
    V cvt_f(V a) { return (float)(int32_t)float_bits(a); }
    void drop(V&) {}
    bool fused_fma() const { return fused; }
    V add_i(V a, V b) { return cb(float_bits(a) + float_bits(b)); }
    V sub_i(V a, V b) { return cb(float_bits(a) - float_bits(b)); }
    V shl_i(V a, int n) { return cb(float_bits(a) << n); }
    V shr_i(V a, int n) { return cb(float_bits(a) >> n); }
    V sra_i(V a, int n) {
        int32_t v = (int32_t)float_bits(a);
        return cb((uint32_t)(v < 0 ? ~(~v >> n) : v >> n));
    }
    V copy_sign(V r, V x) { return cb(float_bits(r) | (float_bits(x) & 0x80000000u)); }      // r >= +0: |r| with x's sign
    bool has_scalef() const { return false; }   // math_exp's two-step scaling gives the same bits
    V scalef(V a, V) { return a; }
    // Table lookups (see kLookupTables): the entry the low 4 bits of k's integer bits select.
    V lookup_index(V k) { return k; }
    V lookup(V index, uint32_t table);
};

// >>approximations
// Per-interval coefficients of the piecewise approximations, 16 entries a table (one vector
// register on AVX-512), fitted by least squares on Chebyshev nodes in long double with each
// coefficient rounded to float in turn and the later ones refitted around it.
enum LookupTable : uint32_t {
    kErfC0, kErfC1, kErfC2, kErfC3, kErfC4, kErfC5,
    kTanhC0, kTanhC1, kTanhC2, kTanhC3, kTanhC4, kTanhC5,
    kGeluC0, kGeluC1, kGeluC2, kGeluC3, kGeluC4, kGeluC5,
    kLookupTableCount
};
alignas(64) inline constexpr float kLookupTables[kLookupTableCount][16] = {
    // erf(t)/t on [k/4, (k+1)/4) = c0 + c1 u + ... + c5 u^5, u = t - (k/4 + 1/8)
    {0x1.1f5e1ap+0f, 0x1.13e08cp+0f, 0x1.fe8f16p-1f, 0x1.cacbc2p-1f, 0x1.9450bcp-1f, 0x1.611066p-1f, 0x1.3448f8p-1f, 0x1.0ee122p-1f, 0x1.e09a7ap-2f, 0x1.aed2p-2f, 0x1.8603ep-2f, 0x1.642828p-2f, 0x1.47ad4p-2f, 0x1.2f6828p-2f, 0x1.1a7b9p-2f, 0x1.08421p-2f},
    {-0x1.7d900ap-4f, -0x1.09ac3cp-2f, -0x1.7edef6p-2f, -0x1.b29324p-2f, -0x1.ad1536p-2f, -0x1.82ad18p-2f, -0x1.48b7c4p-2f, -0x1.0e9e18p-2f, -0x1.b87062p-3f, -0x1.675758p-3f, -0x1.284244p-3f, -0x1.ef1beep-4f, -0x1.a35764p-4f, -0x1.6793eep-4f, -0x1.37b3d6p-4f, -0x1.10c83cp-4f},
    {-0x1.766a4ap-2f, -0x1.27697ap-2f, -0x1.5275ecp-3f, -0x1.45809cp-5f, 0x1.bbe34ap-5f, 0x1.ab146p-4f, 0x1.df8d38p-4f, 0x1.b7e6e8p-4f, 0x1.6bfbbcp-4f, 0x1.1e34bep-4f, 0x1.ba0254p-5f, 0x1.56101p-5f, 0x1.0bd8a6p-5f, 0x1.a9f122p-6f, 0x1.57f2eep-6f, 0x1.198fe6p-6f},
    {0x1.c5a4e6p-5f, 0x1.24d586p-3f, 0x1.671bdep-3f, 0x1.367c2p-3f, 0x1.8a309p-4f, 0x1.3fc19p-5f, -0x1.68b228p-10f, -0x1.5d26eep-6f, -0x1.ae680ep-6f, -0x1.8357bp-6f, -0x1.3234b2p-6f, -0x1.cacb8ap-7f, -0x1.52a604p-7f, -0x1.f6fc4p-8f, -0x1.7b4684p-8f, -0x1.2289dp-8f},
    {0x1.b1e1e4p-4f, 0x1.feb3e8p-5f, 0x1.fb5a82p-10f, -0x1.6a5f26p-5f, -0x1.eba63p-5f, -0x1.9d39dp-5f, -0x1.eaccf8p-6f, -0x1.6b8d9cp-7f, -0x1.c73d0ep-14f, 0x1.14b4e4p-8f, 0x1.56d2a8p-8f, 0x1.0d5bb2p-8f, 0x1.9bb89p-9f, 0x1.2b39fep-9f, 0x1.81bc2cp-10f, 0x1.3748acp-10f},
    {-0x1.3e014ep-6f, -0x1.7a8f5ep-5f, -0x1.7d0fc4p-5f, -0x1.a476a4p-6f, -0x1.1160c2p-10f, 0x1.d86e18p-7f, 0x1.16d936p-6f, 0x1.88bcdep-7f, 0x1.809ad4p-8f, 0x1.e195cap-10f, -0x1.05894ap-11f, -0x1.ac5304p-11f, -0x1.adc0e4p-11f, -0x1.5733f4p-11f, -0x1.5d81f6p-12f, -0x1.65766ap-12f},
    // tanh(t)/t = c0 + c1 u + ... + c5 u^5, u = t - (1.125 start - 1) (see math_tanh); entry
    // 4 j + i holds t's interval i of [1, 3) in halves (j = 0), of [3, 7) in units (j = 1),
    // [7, 9) (entry 8) and [9, 9.1] (9, repeated in 10 and 11), [0, 1) in quarters (j = 3).
    // Least squares weighted by 10 Lawson steps toward the minimax error: tools/fit_tables.cpp
    // fits these rows again, and `make test` checks that they are its fit.
    {0x1.5b74fcp-1f, 0x1.0bd158p-1f, 0x1.a7c2ecp-2f, 0x1.5aa49ap-2f, 0x1.2409dp-2f, 0x1.bab9c8p-3f, 0x1.642aacp-3f, 0x1.29e3e8p-3f, 0x1.fffffcp-4f, 0x1.9dd8fep-4f, 0x1.9dd8fep-4f, 0x1.9dd8fep-4f, 0x1.fd5992p-1f, 0x1.e5938cp-1f, 0x1.bc22bap-1f, 0x1.8b6966p-1f},
    {-0x1.46372ap-2f, -0x1.dcc52ap-3f, -0x1.4785p-3f, -0x1.c87234p-4f, -0x1.497f3ep-4f, -0x1.7e37c4p-5f, -0x1.ef6bb8p-6f, -0x1.5aa026p-6f, -0x1.ffff82p-7f, 0x1.45e342p-8f, 0x1.45e342p-8f, 0x1.45e342p-8f, -0x1.511b56p-4f, -0x1.e82af2p-3f, -0x1.4c5166p-2f, -0x1.5ef5ap-2f},
    {0x1.086f78p-4f, 0x1.3568ap-4f, 0x1.b44382p-5f, 0x1.17c484p-5f, 0x1.678c72p-6f, 0x1.47d6c8p-7f, 0x1.5832d6p-8f, 0x1.935056p-9f, 0x1.ffe9fcp-10f, 0x1.9b0488p-6f, 0x1.9b0488p-6f, 0x1.9b0488p-6f, -0x1.48b906p-2f, -0x1.c45a4p-3f, -0x1.63e296p-4f, 0x1.c304dep-7f},
    {0x1.1ee29cp-5f, -0x1.4d6a7cp-7f, -0x1.b61c1ap-7f, -0x1.2bb338p-7f, -0x1.6dc718p-8f, -0x1.13fddap-9f, -0x1.dc3bc2p-11f, -0x1.d40aa4p-12f, -0x1.ffd712p-13f, 0x1.485cf4p-6f, 0x1.485cf4p-6f, 0x1.485cf4p-6f, 0x1.08915ep-4f, 0x1.3fb538p-3f, 0x1.2dc0b6p-3f, 0x1.69b974p-4f},
    {-0x1.37dc8ep-5f, -0x1.bc9dc6p-8f, 0x1.9bfa6ap-10f, 0x1.f119ecp-10f, 0x1.49e3a2p-10f, 0x1.c359fep-12f, 0x1.3f88bep-13f, 0x1.0ca32ap-14f, 0x1.05cc38p-15f, 0x1.13191p-7f, 0x1.13191p-7f, 0x1.13191p-7f, 0x1.eaa8e8p-4f, 0x1.1d7a32p-5f, -0x1.52f9p-5f, -0x1.dd9588p-5f},
    {0x1.deadbp-7f, 0x1.d68ffp-8f, 0x1.940768p-10f, -0x1.5eac6ep-14f, -0x1.c9ce04p-13f, -0x1.851b2p-14f, -0x1.1d05f2p-15f, -0x1.92cc2ep-17f, -0x1.051fb6p-18f, 0x1.6df40ap-10f, 0x1.6df40ap-10f, 0x1.6df40ap-10f, -0x1.34549cp-5f, -0x1.142d5ep-4f, -0x1.53411p-5f, -0x1.88d5dap-8f},
    // R(t) = Phi(-t) exp(t^2/2) below t = 7, t R(t) / 7 from there, = c0 + c1 u + ... + c5 u^5
    // on the quarter binades of t + 1 up to t = 14.5, u as for tanh (see math_gelu_erf);
    // tools/fit_tables.cpp fits these rows too.
    {0x1.d898dep-3f, 0x1.71fea4p-3f, 0x1.2d938ap-3f, 0x1.faad2ep-4f, 0x1.b396fcp-4f, 0x1.52b26p-4f, 0x1.1445a6p-4f, 0x1.d1e318p-5f, 0x1.cbe63ap-5f, 0x1.ce8dcap-5f, 0x1.cff1aep-5f, 0x1.d0c26ap-5f, 0x1.d0af2cp-2f, 0x1.7ca4c6p-2f, 0x1.3ee88ep-2f, 0x1.105092p-2f},
    {-0x1.c4932p-4f, -0x1.24d644p-4f, -0x1.9328f4p-5f, -0x1.236924p-5f, -0x1.b6038ap-6f, -0x1.0e6156p-6f, -0x1.6c06c2p-7f, -0x1.04a566p-7f, 0x1.ab9944p-13f, 0x1.a4422ap-14f, 0x1.d79b2cp-15f, 0x1.21ee1p-15f, -0x1.5e6e6ep-2f, -0x1.fbc2c8p-3f, -0x1.7a88ecp-3f, -0x1.216c8ap-3f},
    {0x1.7b77aep-5f, 0x1.a2736ap-6f, 0x1.f19e1ap-7f, 0x1.3aae48p-7f, 0x1.a29664p-8f, 0x1.a12036p-9f, 0x1.d41812p-10f, 0x1.1e6502p-10f, -0x1.2f043p-15f, -0x1.da622ap-17f, -0x1.ba2064p-18f, -0x1.d2c854p-19f, 0x1.a4e03p-3f, 0x1.157ed2p-3f, 0x1.798e1p-4f, 0x1.0837b2p-4f},
    {-0x1.1f3494p-6f, -0x1.131efep-7f, -0x1.1f2cc2p-8f, -0x1.419832p-9f, -0x1.7e7d74p-10f, -0x1.377bdp-11f, -0x1.261ae2p-12f, -0x1.36a90ap-13f, 0x1.78b364p-18f, 0x1.d8e54cp-20f, 0x1.6d05cp-21f, 0x1.2c286ap-22f, -0x1.b029eep-4f, -0x1.075f1ep-4f, -0x1.4ba93cp-5f, -0x1.b0b3fap-6f},
    {0x1.936a74p-8f, 0x1.51dde6p-9f, 0x1.345e7cp-10f, 0x1.35f054p-11f, 0x1.5547c8p-12f, 0x1.c5ce78p-14f, 0x1.67bbap-15f, 0x1.332aeap-16f, -0x1.bb1cp-21f, -0x1.d2e406p-23f, -0x1.faf702p-25f, -0x1.40de3cp-25f, 0x1.8bd5d8p-5f, 0x1.c68f3ap-6f, 0x1.0cfaecp-6f, 0x1.248b88p-7f},
    {-0x1.04d4cap-9f, -0x1.be4202p-11f, -0x1.936a1ap-12f, -0x1.688478p-13f, -0x1.200b66p-14f, -0x1.756cbcp-16f, -0x1.05707ep-17f, -0x1.f35d1ap-19f, 0x1.ed5f52p-24f, 0x1.4286a8p-26f, 0x1.6cbc7cp-27f, 0x1.1b7236p-32f, -0x1.47bd2ep-6f, -0x1.382d68p-7f, -0x1.4eb774p-8f, -0x1.5eaaa6p-8f},
};
inline float ScalarMath::lookup(float index, uint32_t table) { return kLookupTables[table][float_bits(index) & 15]; }

// Written statement by statement with explicit drop()s: in the JIT every live handle holds a
// scratch register, so lifetimes are kept short (peak ~9 registers, see kScratchRegisters).
constexpr uint32_t kSignBit = 0x80000000u;

template <class M, class V>
V math_abs(M& m, const V& x) { return m.and_(x, m.cb(~kSignBit)); }   // one instruction, constant in memory

// >>exp and log
// exp: Cody-Waite reduction by ln2 (Cephes split), degree-6 polynomial, 1 + r added last with
// its error carried, 2^n applied in two halves so that results down to the denormal range
// round once. `scale` returns exp(x) 2^scale instead (only for x <= 0 and scale <= 64), so a
// caller can keep a tiny result normal until its own last multiplication.
// `nonpositive`: the caller's x is <= 0 (or NaN), so the upper clamp is left out.
// `compensated` false: 1 + (r + r^2 P(r)) with r's low part dropped, 6 operations fewer.
template <class M, class V>
V math_exp(M& m, V x, int scale = 0, bool nonpositive = false, bool compensated = true) {
    // Below the clamp the (scaled) result rounds to zero anyway; operand order keeps NaN.
    V t = m.max(m.c(-104.0f - (float)scale * 0.693147181f), x);
    m.drop(x);
    if (!nonpositive) t = m.min(m.c(89.0f), t);
    V fn = m.mul(t, m.c(1.44269504088896341f));
    fn = m.round(fn, kRoundNearest);
    V r1 = m.fnma(fn, m.c(0.693359375f), static_cast<V&&>(t));   // exact: fn has at most 8 bits
    V r = m.fnma(fn, m.c(-2.12194440e-4f), r1);
    V lo;
    if (compensated) {
        lo = m.sub(r1, r);                              // the part of r1 - fn*C2 that r lost
        m.drop(r1);
        lo = m.fnma(fn, m.c(-2.12194440e-4f), static_cast<V&&>(lo));
    } else {
        m.drop(r1);
    }
    V p = m.fma(m.c(1.9875691500e-4f), r, m.c(1.3981999507e-3f));
    p = m.fma(static_cast<V&&>(p), r, m.c(8.3334519073e-3f));
    p = m.fma(static_cast<V&&>(p), r, m.c(4.1665795894e-2f));
    p = m.fma(static_cast<V&&>(p), r, m.c(1.6666665459e-1f));
    p = m.fma(static_cast<V&&>(p), r, m.c(5.0000001201e-1f));
    V r2 = m.mul(r, r);
    if (!compensated) {   // 1 + (r + r^2 P(r)): 6 operations fewer (math_sigmoid)
        p = m.fma(static_cast<V&&>(p), r2, r);
        m.drop(r2);
        m.drop(r);
        p = m.add(m.c(1.0f), p);
    } else {
        p = m.mul(p, r2);                               // e^r = 1 + r + r^2 P(r)
        m.drop(r2);
        V s1 = m.add(m.c(1.0f), r);                     // 1 + r and its error (Fast2Sum)
        V e1 = m.sub(m.c(1.0f), s1);
        e1 = m.add(e1, r);
        m.drop(r);
        p = m.add(p, e1);
        m.drop(e1);
        p = m.add(p, lo);
        m.drop(lo);
        p = m.add(s1, p);                               // the one rounding that matters
        m.drop(s1);
    }
    // p 2^(n + scale) with one rounding. AVX-512's vscalefps does it in one instruction; the
    // other targets multiply by 2^(n>>1), exactly, then by the rest, which rounds once: the
    // same correctly rounded result.
    if (m.has_scalef()) {
        if (scale) fn = m.add(static_cast<V&&>(fn), m.c((float)scale));   // exact
        return m.scalef(static_cast<V&&>(p), static_cast<V&&>(fn));
    }
    V n = m.cvt_i(fn);
    m.drop(fn);
    V n1 = m.sra_i(n, 1);
    n = m.sub_i(n, n1);
    V s = m.add_i(n1, m.cb(127));
    m.drop(n1);
    s = m.shl_i(s, 23);
    p = m.mul(p, s);
    s = m.add_i(n, m.cb((uint32_t)(127 + scale)));  // scale: callers whose result is <= 1
    m.drop(n);
    s = m.shl_i(s, 23);
    return m.mul(p, s);
}

// log: Cephes logf (mantissa in [sqrt(1/2), sqrt(2)), degree-8 polynomial), denormals scaled
// by 2^23 first, special cases blended at the end.
template <class M, class V>
V math_log(M& m, V x) {
    V small = m.cmp(x, m.c(1.17549435e-38f), kCmpLt);
    V xs = m.mul(x, m.c(8388608.0f));
    xs = m.blend(small, xs, x);
    V e = m.shr_i(xs, 23);
    e = m.sub_i(e, m.cb(126));
    V mant = m.and_(xs, m.cb(0x007fffffu));
    m.drop(xs);
    mant = m.or_(mant, m.cb(0x3f000000u));
    V lt = m.cmp(mant, m.c(0.707106781186547524f), kCmpLt);
    V fe = m.cvt_f(e);
    m.drop(e);
    V t = m.and_(lt, m.c(1.0f));
    fe = m.sub(fe, t);
    t = m.and_(small, m.c(23.0f));
    m.drop(small);
    fe = m.sub(fe, t);
    m.drop(t);
    V f = m.and_(lt, mant);
    m.drop(lt);
    f = m.add(mant, f);
    m.drop(mant);
    f = m.sub(f, m.c(1.0f));
    V z = m.mul(f, f);
    V y = m.fma(m.c(7.0376836292e-2f), f, m.c(-1.1514610310e-1f));
    y = m.fma(static_cast<V&&>(y), f, m.c(1.1676998740e-1f));
    y = m.fma(static_cast<V&&>(y), f, m.c(-1.2420140846e-1f));
    y = m.fma(static_cast<V&&>(y), f, m.c(1.4249322787e-1f));
    y = m.fma(static_cast<V&&>(y), f, m.c(-1.6668057665e-1f));
    y = m.fma(static_cast<V&&>(y), f, m.c(2.0000714765e-1f));
    y = m.fma(static_cast<V&&>(y), f, m.c(-2.4999993993e-1f));
    y = m.fma(static_cast<V&&>(y), f, m.c(3.3333331174e-1f));
    y = m.mul(y, f);
    y = m.mul(y, z);
    y = m.fma(fe, m.c(-2.12194440e-4f), static_cast<V&&>(y));
    y = m.fnma(z, m.c(0.5f), static_cast<V&&>(y));
    m.drop(z);
    V r = m.add(f, y);
    m.drop(f);
    m.drop(y);
    r = m.fma(fe, m.c(0.693359375f), static_cast<V&&>(r));
    m.drop(fe);
    V mask = m.cmp(x, m.c(0.0f), kCmpEq);
    r = m.blend(mask, m.cb(0xff800000u), r);                 // log(+-0) = -inf
    mask = m.cmp(m.c(0.0f), x, kCmpNle);
    r = m.blend(mask, m.cb(0x7fc00000u), r);                 // x < 0 or NaN
    mask = m.cmp(x, m.cb(0x7f800000u), kCmpEq);
    return m.blend(mask, x, r);                              // log(inf) = inf
}

// >>piecewise polynomials
// x h(|x|) for an odd function f with h(t) = f(t)/t, which is even, smooth and away from 0:
// h is a piecewise polynomial over 16 intervals, of `degree` in u = t - (a point of the
// interval), with coefficients that each lane takes from kLookupTables[c0_table + j] by its
// interval k (register permutes, no gather), so there is no branch to blend and f keeps its
// relative accuracy near 0. The last step, t c0 + (t u) q(u), rounds once on its large term.
// Horner, not Estrin: Estrin's extra live values would cost the GELU(tanh) pattern two of its
// four lanes on AVX-512 (tuned with bench/snippets). Takes t, u and k.
// c_0 + c_1 u + ... + c_degree u^degree by Horner, c_j = kLookupTables[table + j] at k.
template <class M, class V>
V lookup_horner(M& m, const V& u, const V& k, uint32_t table, uint32_t degree) {
    V c = m.lookup(k, table + degree);
    V q = m.lookup(k, table + degree - 1);
    q = m.fma(static_cast<V&&>(c), u, static_cast<V&&>(q));
    for (uint32_t j = degree - 1; j-- > 0;) {
        c = m.lookup(k, table + j);
        q = m.fma(static_cast<V&&>(q), u, static_cast<V&&>(c));
    }
    return q;
}

template <class M, class V>
V odd_piecewise_polynomial(M& m, const V& x, V t, V u, V k, uint32_t c0_table, uint32_t degree) {
    V q = lookup_horner(m, u, k, c0_table + 1, degree - 1);
    V tu = m.mul(t, u);
    m.drop(u);
    V p = m.mul(static_cast<V&&>(tu), static_cast<V&&>(q));
    V c = m.lookup(k, c0_table);
    m.drop(k);
    V r = m.fma(static_cast<V&&>(t), static_cast<V&&>(c), static_cast<V&&>(p));
    return m.copy_sign(static_cast<V&&>(r), x);        // r >= +0 or NaN
}

// odd_piecewise_polynomial over 16 intervals of width 2 `half` from 0 (the last stretched to
// `t_max`, past which f rounds to +-1 or stays there), u = t - (the centre). Index and u are
// exact: adding 1.5 2^23 times the grid step (2 `half`) to v = t - `half` rounds v to the
// grid, and the sum's low mantissa bits are the interval; `last_centre` is the last
// interval's grid point, to which v's rounding is held when t_max reaches past that interval.
template <class M, class V>
V odd_piecewise(M& m, const V& x, float t_max, float half, float last_centre, uint32_t c0_table, uint32_t degree) {
    const float magic = 12582912.0f * 2.0f * half;     // 1.5 2^23, in units of the grid
    V t = math_abs(m, x);
    t = m.min(m.c(t_max), t);                          // operand order keeps NaN
    V v = m.sub(t, m.c(half));
    V s = t_max - half < last_centre + half ? v            // no stretched last interval
                                            : m.min(m.c(last_centre + half * 0.96875f), v);
    s = m.add(static_cast<V&&>(s), m.c(magic));
    V k = m.lookup_index(s);
    V w = m.sub(s, m.c(magic));
    m.drop(s);
    V u = m.sub(v, w);
    m.drop(v);
    m.drop(w);
    return odd_piecewise_polynomial(m, x, static_cast<V&&>(t), static_cast<V&&>(u), static_cast<V&&>(k), c0_table, degree);
}

// The interval index k of t >= 0 among the quarter binades of s = t + 1 (the exponent's low
// 2 bits and the top 2 mantissa bits of s: bits 21-24, of which the permutes read the low 4),
// and u = t - c with c = 1.125 start - 1, start = s with the other mantissa bits cleared: c
// is exact, a point of t's interval, and u is exact for t >= c/2 (every interval but the
// first, where t's rounding in u costs nothing when the function is flat there). s's own
// rounding can move t into the next interval by one ulp of s, which the fits cover.
template <class M, class V>
void quarter_binade(M& m, const V& t, V* k, V* u) {
    V s = m.add(t, m.c(1.0f));
    *k = m.lookup_index(m.shr_i(s, 21));
    V start = m.and_(s, m.cb(0xffe00000u));
    m.drop(s);
    V c = m.fma(static_cast<V&&>(start), m.c(1.125f), m.c(-1.0f));
    *u = m.sub(t, c);
    m.drop(c);
}

// tanh: odd_piecewise_polynomial of degree 5 over the quarter binades of t + 1, with t
// clamped to 9.1 (tanh rounds to 1 from 9.011 on): t in [0, 1) in steps of 1/4, [1, 3) of 1/2,
// [3, 7) of 1, then [7, 9) and [9, 9.1]. Narrow intervals near 0, where tanh's poles at
// +-i pi/2 are nearest, let degree 5 hold 2.8 ulp (a uniform grid of halves needs degree 6:
// one permute and one FMA more, on the GELU(tanh) pattern's critical path). h is flat on the
// first interval. 2.8 ulp with FMA and without.
template <class M, class V>
V math_tanh(M& m, const V& x) {
    V t = math_abs(m, x);
    t = m.min(m.c(9.1f), t);                           // operand order keeps NaN
    V k, u;
    quarter_binade(m, t, &k, &u);
    return odd_piecewise_polynomial(m, x, static_cast<V&&>(t), static_cast<V&&>(u), static_cast<V&&>(k), kTanhC0, 5);
}

// sigmoid from exp(-|x|) so neither side overflows: 1/(1+e) or e/(1+e). exp without its
// compensation (6 operations fewer): e's extra error reaches the result only for x < 0, and
// the division rounds after it; the sweeps stay within the bounds (Sigmoid 3, Swish 4 ulp).
template <class M, class V>
V math_sigmoid(M& m, V x) {
    V t = m.or_(x, m.cb(kSignBit));                   // -|x|
    V e = math_exp(m, static_cast<V&&>(t), 0, true, false);   // (errors below)
    V d = m.add(m.c(1.0f), e);
    V mask = m.cmp(x, m.c(0.0f), kCmpLt);
    m.drop(x);
    V num = m.blend(mask, e, m.c(1.0f));
    m.drop(mask);
    m.drop(e);
    return m.div(num, d);
}

// erf: odd_piecewise over [0, 4) in intervals a quarter wide, degree 5, t clamped to 3.99
// (erf rounds to 1 from 3.92 on). 1.1 ulp with FMA, 2.1 without. Per vector on AVX-512: 6
// permutes, 7 FMA-pipe operations and 7 others, about half the work of a two-branch scheme
// (N. Juffa's erff).
template <class M, class V>
V math_erf(M& m, const V& x) { return odd_piecewise(m, x, 3.99f, 0.125f, 3.75f, kErfC0, 5); }

// The rounding error of p = round(a*b) for constant b, exactly: one fma on FMA targets,
// Dekker's split product otherwise (b split at compile time).
template <class M, class V>
V product_error(M& m, const V& a, float b, const V& p) {
    if (m.fused_fma()) {
        V np = m.xor_(p, m.cb(kSignBit));
        return m.fma(a, m.c(b), np);
    }
    float bc = rounded(b * 4097.0f);  // Veltkamp split of the constant, never contracted
    float bh = bc - rounded(bc - b), bl = b - bh;
    V ah = m.mul(a, m.c(4097.0f));
    V t = m.sub(ah, a);
    ah = m.sub(ah, t);
    V al = m.sub(a, ah);
    V err = m.mul(ah, m.c(bh));
    err = m.sub(err, p);
    t = m.mul(ah, m.c(bl));
    err = m.add(err, t);
    t = m.mul(al, m.c(bh));
    err = m.add(err, t);
    t = m.mul(al, m.c(bl));
    return m.add(err, t);
}
// Same for a*a.
template <class M, class V>
V square_error(M& m, const V& a, const V& p) {
    if (m.fused_fma()) {
        V np = m.xor_(p, m.cb(kSignBit));
        return m.fma(a, a, np);
    }
    V ah = m.mul(a, m.c(4097.0f));
    V t = m.sub(ah, a);
    ah = m.sub(ah, t);
    V al = m.sub(a, ah);
    V err = m.mul(ah, ah);
    err = m.sub(err, p);
    t = m.mul(ah, al);
    t = m.add(t, t);
    err = m.add(err, t);
    t = m.mul(al, al);
    return m.add(err, t);
}

template <class M, class V>
V two_product_error(M& m, const V& a, const V& b, const V& p);

// a*b + c with the product exact: an FMA, or Dekker's product on targets without one. Used
// for a last rounding.
template <class M, class V>
V fma_exact(M& m, const V& a, const V& b, const V& c) {
    if (m.fused_fma()) return m.fma(a, b, c);
    V p = m.mul(a, b);
    V err = two_product_error(m, a, b, p);
    err = m.add(err, c);
    return m.add(p, err);
}

// >>gelu
// Tails that go below FLT_MIN are carried scaled by 2^kTailScale and scaled back by the last
// multiplication, which then rounds once into the denormal range.
constexpr int kTailScale = 64;

// Why the lanes: with the table lookups the GELU and Swish patterns come near the FP pipes'
// throughput on AVX-512, but one tile's critical path is long, so a lane alone is latency-bound;
// independent lanes fill the pipes (emit_kernel; tuned with bench/snippets).
//
// GELU(erf) = x Phi(x). With t = |x| and P = Phi(-t) = exp(-t^2/2) R(t): x P for x < 0, and
// x (1 - P) for x >= 0, where P <= 1/2 so nothing cancels. R is smooth and flat, like
// 1/(t sqrt(2 pi)) far out, where t R(t) is flatter still: the table (kGeluC0, lookup_horner
// over the quarter binades of t + 1, t clamped to 14.5) holds R(t) below t = 7 and t R(t) / 7
// from there, which x P takes as max(x, -7) times it. For x >= 0 that makes P from t = 7 on
// t/7 too large, where 1 - P rounds to 1 anyway (from t = 5.6 on). t^2 is carried in two
// parts, as exp(-t^2/2) amplifies its rounding by up to t^2/2 ~ 105, and exp is scaled by
// 2^64 so the negative tail keeps its bits until the last multiplication rounds once into the
// denormal range. The clamps make x P round to -0 below x = -14.36, -inf included.
template <class M, class V>
V math_gelu_erf(M& m, const V& x) {
    V t = math_abs(m, x);
    t = m.min(m.c(14.5f), t);                          // operand order keeps NaN
    V k, u;
    quarter_binade(m, t, &k, &u);
    V r = lookup_horner(m, u, k, kGeluC0, 5);
    m.drop(u);
    m.drop(k);
    V h = m.mul(t, m.c(-0.5f));
    V s = m.mul(t, h);
    V sl = two_product_error(m, t, h, s);              // -t^2/2 = s + sl
    m.drop(t);
    m.drop(h);
    V e = math_exp(m, static_cast<V&&>(s), kTailScale, true);   // exp(-t^2/2) 2^64 = e (1 + sl)
    // x >= 0: x (1 - P). P matters there only while t^2/2 < 17 (from t = 5.6, 1 - P rounds to
    // 1), so sl's correction, below 2^-20 of P, is left out.
    V pos = m.mul(r, e);
    pos = m.fnma(pos, m.c(0x1p-64f), m.c(1.0f));
    pos = m.mul(x, pos);
    // x < 0: x P with max(x, -7) r = hr + hl exactly, folded in before the one rounding.
    V y = m.max(m.c(-7.0f), x);                        // operand order keeps NaN
    V hr = m.mul(y, r);
    V hl = two_product_error(m, y, r, hr);
    m.drop(y);
    m.drop(r);
    V q = m.mul(hr, e);
    q = m.mul(q, sl);
    m.drop(sl);
    q = m.fma(hl, e, static_cast<V&&>(q));
    m.drop(hl);
    V neg = fma_exact(m, hr, e, q);
    m.drop(hr);
    m.drop(e);
    m.drop(q);
    neg = m.mul(neg, m.c(0x1p-64f));                   // exact, or the one rounding into the denormal range
    V positive = m.cmp(m.c(0.0f), x, kCmpLt);
    return m.blend(positive, pos, neg);
}

// The rounding error of p = round(a*b), both variable: fma, or Dekker's product.
template <class M, class V>
V two_product_error(M& m, const V& a, const V& b, const V& p) {
    if (m.fused_fma()) {
        V np = m.xor_(p, m.cb(kSignBit));
        return m.fma(a, b, np);
    }
    V ah = m.mul(a, m.c(4097.0f));
    V t = m.sub(ah, a);
    ah = m.sub(ah, t);
    V al = m.sub(a, ah);
    V bh = m.mul(b, m.c(4097.0f));
    t = m.sub(bh, b);
    bh = m.sub(bh, t);
    V bl = m.sub(b, bh);
    V err = m.mul(ah, bh);
    err = m.sub(err, p);
    t = m.mul(ah, bl);
    err = m.add(err, t);
    t = m.mul(al, bh);
    err = m.add(err, t);
    t = m.mul(al, bl);
    return m.add(err, t);
}

// GELU(tanh) = x/2 (1 + tanh(u)) = x * sigmoid(v), v = 2u = c1 x + c2 x^3. v is carried in
// two parts and the sigmoid corrected by s(1-s) v_lo: for negative x the sigmoid amplifies
// the error of v by |v|, which a single float would not survive.
template <class M, class V>
V math_gelu_tanh(M& m, const V& x) {
    const float c1h = 1.59576916694641113281f, c1l = -4.534068032135963e-8f;     // 2 sqrt(2/pi)
    const float c2h = 0.07135481387376785278f, c2l = 2.3988323966106506e-9f;        // c1 * 0.044715
    V p1 = m.mul(x, m.c(c1h));
    V lo = product_error(m, x, c1h, p1);
    lo = m.fma(x, m.c(c1l), static_cast<V&&>(lo));
    V x2 = m.mul(x, x);
    V x2l = square_error(m, x, x2);
    V x3 = m.mul(x2, x);
    V e3 = two_product_error(m, x2, x, x3);
    m.drop(x2);
    e3 = m.fma(x2l, x, static_cast<V&&>(e3));                  // x^3 = x3 + e3
    m.drop(x2l);
    V p2 = m.mul(x3, m.c(c2h));
    V e2 = product_error(m, x3, c2h, p2);
    V t = m.mul(x3, m.c(c2l));
    m.drop(x3);
    e2 = m.add(e2, t);
    e2 = m.fma(e3, m.c(c2h), static_cast<V&&>(e2));
    m.drop(e3);
    lo = m.add(lo, e2);
    m.drop(e2);
    V v = m.add(p1, p2);                     // two-sum of the leading parts
    V bb = m.sub(v, p1);
    t = m.sub(v, bb);
    t = m.sub(p1, t);
    m.drop(p1);
    V u = m.sub(p2, bb);
    m.drop(p2);
    m.drop(bb);
    t = m.add(t, u);
    m.drop(u);
    lo = m.add(lo, t);
    t = math_abs(m, v);
    V keep = m.cmp(t, m.c(128.0f), kCmpLt);  // saturated (or overflowed) v needs no correction
    m.drop(t);
    lo = m.and_(keep, lo);
    m.drop(keep);
    // sigmoid(v) as in math_sigmoid, but for v < 0 carried as e/(1+e) 2^64 (see kTailScale).
    t = math_abs(m, v);
    t = m.or_(t, m.cb(kSignBit));
    V e = math_exp(m, static_cast<V&&>(t), kTailScale);
    V d = m.mul(e, m.c(0x1p-64f));
    d = m.add(m.c(1.0f), d);
    V negative = m.cmp(v, m.c(0.0f), kCmpLt);
    m.drop(v);
    V s = m.blend(negative, e, m.c(1.0f));
    m.drop(e);
    s = m.div(s, d);
    m.drop(d);
    V scale = m.blend(negative, m.c(0x1p-64f), m.c(1.0f));
    m.drop(negative);
    t = m.mul(s, scale);                     // the unscaled sigmoid, for 1 - s
    t = m.sub(m.c(1.0f), t);
    t = m.mul(t, lo);                        // s (1 + (1 - s) lo): the low part of v
    m.drop(lo);
    s = m.fma(s, t, s);
    m.drop(t);
    s = m.mul(x, s);
    return m.mul(s, scale);
}

// >>expm1 softplus mish pow
// expm1 = exp(x)-1, with Kahan's (u-1)*x/log(u) for |x| < 0.5 against cancellation.
template <class M, class V>
V math_expm1(M& m, const V& x) {
    V u = math_exp(m, x);
    V d = m.sub(u, m.c(1.0f));
    V l = math_log(m, u);
    V precise = m.mul(d, x);
    precise = m.div(precise, l);
    m.drop(l);
    V mask = m.cmp(u, m.c(1.0f), kCmpEq);
    m.drop(u);
    precise = m.blend(mask, x, precise);
    V ax = math_abs(m, x);
    mask = m.cmp(ax, m.c(0.5f), kCmpLt);
    m.drop(ax);
    return m.blend(mask, precise, d);
}

// softplus = max(x,0) + log1p(exp(-|x|)), log1p by Goldberg's log(u)*e/(u-1).
template <class M, class V>
V math_softplus(M& m, const V& x) {
    V t = math_abs(m, x);
    t = m.or_(t, m.cb(kSignBit));
    V e = math_exp(m, static_cast<V&&>(t));
    V u = m.add(m.c(1.0f), e);
    V d = m.sub(u, m.c(1.0f));
    V l = math_log(m, static_cast<V&&>(u));
    V q = m.div(e, d);
    l = m.mul(l, q);
    m.drop(q);
    V mask = m.cmp(d, m.c(0.0f), kCmpEq);
    m.drop(d);
    l = m.blend(mask, e, l);
    m.drop(mask);
    m.drop(e);
    V mx = m.max(m.c(0.0f), x);
    return m.add(mx, l);
}

// mish = x tanh(softplus(x)) = x n/(n+2), n = e(e+2), e = exp(min(x, 20)).
template <class M, class V>
V math_mish(M& m, const V& x) {
    V t = m.min(m.c(20.0f), x);
    V e = math_exp(m, static_cast<V&&>(t));
    V n = m.add(e, m.c(2.0f));
    n = m.mul(e, n);
    m.drop(e);
    V d = m.add(n, m.c(2.0f));
    n = m.div(n, d);
    m.drop(d);
    return m.mul(x, n);
}

template <class M, class V>
V math_pow(M& m, const V& a, const V& b) {
    V l = math_abs(m, a);
    l = math_log(m, static_cast<V&&>(l));
    l = m.mul(b, l);
    V r = math_exp(m, static_cast<V&&>(l));
    V t = m.round(b, kRoundTrunc);
    V is_int = m.cmp(t, b, kCmpEq);
    V half = m.mul(b, m.c(0.5f));
    t = m.round(half, kRoundTrunc);
    V odd = m.cmp(t, half, kCmpEq);
    m.drop(t);
    m.drop(half);
    odd = m.andnot(odd, is_int);
    V s = m.and_(a, m.cb(kSignBit));
    s = m.and_(odd, s);
    m.drop(odd);
    r = m.xor_(r, s);                                    // (-a)^odd < 0
    m.drop(s);
    V neg = m.cmp(a, m.c(0.0f), kCmpLt);
    neg = m.andnot(is_int, neg);
    m.drop(is_int);
    r = m.blend(neg, m.cb(0x7fc00000u), r);              // (-a)^fraction = NaN
    m.drop(neg);
    V zero = m.cmp(b, m.c(0.0f), kCmpEq);
    return m.blend(zero, m.c(1.0f), r);                  // x^0 = 1
}

template <class M, class V>
V math_power_static(M& m, const V& x, float p) {
    if (p == 0.0f) return m.c(1.0f);
    if (p == 0.5f) return m.sqrt(x);
    if (p == -0.5f) {
        V s = m.sqrt(x);
        return m.div(m.c(1.0f), s);
    }
    float ap = p < 0 ? -p : p;
    if (ap <= 64.0f && ap == (float)(int)ap) {
        int n = (int)ap;
        V result = x;  // square and multiply, highest bit first
        int top = 0;
        while ((n >> (top + 1)) != 0) ++top;
        for (int bit = top - 1; bit >= 0; --bit) {
            result = m.mul(result, result);
            if ((n >> bit) & 1) result = m.mul(result, x);
        }
        if (p < 0) result = m.div(m.c(1.0f), result);
        return result;
    }
    return math_pow(m, x, m.c(p));
}

// >>eval_op
template <class M, class V>
V one_if(M& m, const V& mask) { return m.and_(mask, m.c(1.0f)); }

// One operation, the single definition shared by the interpreter and every emitter.
template <class M, class V>
V eval_op(M& m, SnippetOp op, const V* a, float alpha, float beta) {
    switch (op) {
        case SnippetOp::Add: return m.add(a[0], a[1]);
        case SnippetOp::Sub: return m.sub(a[0], a[1]);
        case SnippetOp::Mul: return m.mul(a[0], a[1]);
        case SnippetOp::Div: return m.div(a[0], a[1]);
        case SnippetOp::Max: return m.max(a[0], a[1]);
        case SnippetOp::Min: return m.min(a[0], a[1]);
        case SnippetOp::Pow: return math_pow(m, a[0], a[1]);
        case SnippetOp::PowerStatic: return math_power_static(m, a[0], alpha);
        case SnippetOp::Sqrt: return m.sqrt(a[0]);
        case SnippetOp::Reciprocal: return m.div(m.c(1.0f), a[0]);
        case SnippetOp::Abs: return math_abs(m, a[0]);
        case SnippetOp::Neg: return m.xor_(a[0], m.cb(kSignBit));
        case SnippetOp::Exp: return math_exp(m, a[0]);
        case SnippetOp::Log: return math_log(m, a[0]);
        case SnippetOp::Tanh: return math_tanh(m, a[0]);
        case SnippetOp::Sigmoid: return math_sigmoid(m, a[0]);
        case SnippetOp::Relu: return m.max(m.c(0.0f), a[0]);
        case SnippetOp::Clip: return m.min(m.c(beta), m.max(m.c(alpha), a[0]));
        case SnippetOp::Elu: case SnippetOp::Selu: {
            V neg = math_expm1(m, a[0]);
            neg = m.mul(neg, m.c(alpha));
            V mask = m.cmp(a[0], m.c(0.0f), kCmpNle);
            V r = m.blend(mask, a[0], neg);
            if (op == SnippetOp::Elu) return r;
            m.drop(mask);
            m.drop(neg);
            return m.mul(r, m.c(beta));
        }
        case SnippetOp::Erf: return math_erf(m, a[0]);
        case SnippetOp::GeluErf: return math_gelu_erf(m, a[0]);
        case SnippetOp::GeluTanh: return math_gelu_tanh(m, a[0]);
        case SnippetOp::HardSigmoid:
            return m.max(m.c(0.0f), m.min(m.c(1.0f), m.fma(a[0], m.c(alpha), m.c(beta))));
        case SnippetOp::HardSwish: {  // x * clamp(x+3, 0, 6) * (1/6): no cancellation near -3, and
            V t = m.add(a[0], m.c(3.0f));   // no division (the divider bounded Conv epilogues)
            t = m.max(m.c(0.0f), t);
            t = m.min(m.c(6.0f), t);
            t = m.mul(a[0], t);
            return m.mul(t, m.c(1.0f / 6.0f));
        }
        case SnippetOp::LeakyRelu:
            return m.blend(m.cmp(a[0], m.c(0.0f), kCmpLt), m.mul(a[0], m.c(alpha)), a[0]);
        case SnippetOp::PRelu:
            return m.blend(m.cmp(a[0], m.c(0.0f), kCmpLt), m.mul(a[0], a[1]), a[0]);
        case SnippetOp::Softplus: return math_softplus(m, a[0]);
        case SnippetOp::Softsign: return m.div(a[0], m.add(m.c(1.0f), math_abs(m, a[0])));
        case SnippetOp::Swish: return m.mul(a[0], math_sigmoid(m, m.mul(a[0], m.c(alpha))));
        case SnippetOp::Mish: return math_mish(m, a[0]);
        case SnippetOp::Floor: return m.round(a[0], kRoundFloor);
        case SnippetOp::Ceil: return m.round(a[0], kRoundCeil);
        case SnippetOp::Round: return m.round(a[0], kRoundNearest);
        case SnippetOp::Sign:
            return m.sub(one_if(m, m.cmp(m.c(0.0f), a[0], kCmpLt)), one_if(m, m.cmp(a[0], m.c(0.0f), kCmpLt)));
        case SnippetOp::Equal: return one_if(m, m.cmp(a[0], a[1], kCmpEq));
        case SnippetOp::Greater: return one_if(m, m.cmp(a[1], a[0], kCmpLt));
        case SnippetOp::Less: return one_if(m, m.cmp(a[0], a[1], kCmpLt));
        case SnippetOp::GreaterOrEqual: return one_if(m, m.cmp(a[1], a[0], kCmpLe));
        case SnippetOp::LessOrEqual: return one_if(m, m.cmp(a[0], a[1], kCmpLe));
        case SnippetOp::Select: return m.blend(m.cmp(a[0], m.c(0.0f), kCmpNeq), a[1], a[2]);
        case SnippetOp::Parameter: case SnippetOp::Scalar: case SnippetOp::Count: break;
    }
    TESSEL_ASSERT(false && "eval_op: not a computing operation");
    return a[0];
}

}  // namespace detail

// >>targets implementation
const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Ref: return "ref";
        case Isa::Sse41: return "sse41";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Neon: return "neon";
        case Isa::Auto: return "auto";
    }
    return "unknown";
}

Status parse_isa(StringView name, Isa* isa) {
    const Isa all[] = {Isa::Ref, Isa::Sse41, Isa::Avx2, Isa::Avx512, Isa::Neon};
    for (Isa i : all)
        if (name == StringView(isa_name(i))) { *isa = i; return Status::Ok; }
    return Status::NotFound;
}

bool isa_available(Isa isa) {
    if (isa == Isa::Ref) return true;
#if !defined(TESSEL_NO_JIT) && defined(__aarch64__)
    return isa == Isa::Neon;   // ASIMD is part of every AArch64 Linux target
#elif defined(TESSEL_NO_JIT) || !(defined(__x86_64__) || defined(_M_X64))
    (void)isa;
    return false;
#else
    __builtin_cpu_init();
    switch (isa) {
        case Isa::Sse41: return __builtin_cpu_supports("sse4.1");
        case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        case Isa::Avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        default: return false;
    }
#endif
}

Isa best_isa() {
    if (isa_available(Isa::Neon)) return Isa::Neon;
    if (isa_available(Isa::Avx512)) return Isa::Avx512;
    if (isa_available(Isa::Avx2)) return Isa::Avx2;
    if (isa_available(Isa::Sse41)) return Isa::Sse41;
    return Isa::Ref;
}

Isa default_isa() {
    // Read once per process: kernels ask per node, and getenv walks the environment.
    static const Isa chosen = [] {
        const char* env = std::getenv("TESSEL_ISA");
        Isa isa;
        if (env && parse_isa(StringView(env), &isa) == Status::Ok && isa_available(isa)) return isa;
        return best_isa();
    }();
    return chosen;
}

uint32_t isa_vector_floats(Isa isa) {
    switch (isa) {
        case Isa::Sse41: return 4;
        case Isa::Avx2: return 8;
        case Isa::Avx512: return 16;
        case Isa::Neon: return 4;
        default: return 1;
    }
}

bool isa_uses_fma(Isa isa) { return isa != Isa::Sse41; }

uint64_t last_level_cache_bytes() {
    static uint64_t cached = ~0ull;
    if (cached != ~0ull) return cached;
    uint64_t best = 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0u), "c"(0u));
    unsigned max_leaf = eax;
    __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0x80000000u), "c"(0u));
    unsigned max_extended = eax;
    // Deterministic cache parameters: Intel leaf 4, AMD leaf 0x8000001D (same layout).
    unsigned leaves[2] = {max_leaf >= 4 ? 4u : 0u, max_extended >= 0x8000001Du ? 0x8000001Du : 0u};
    for (unsigned leaf : leaves) {
        if (!leaf) continue;
        for (unsigned sub = 0; sub < 16; ++sub) {
            __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(leaf), "c"(sub));
            unsigned type = eax & 31;
            if (type == 0) break;
            if (type == 2) continue;  // instruction cache
            uint64_t bytes = (uint64_t)((ebx >> 22) + 1) * (((ebx >> 12) & 1023) + 1) * ((ebx & 4095) + 1) * ((uint64_t)ecx + 1);
            if (bytes > best) best = bytes;
        }
    }
    if (best == 0 && max_extended >= 0x80000006u) {
        __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0x80000006u), "c"(0u));
        best = (uint64_t)(edx >> 18) * 512 * 1024;
    }
#endif
    cached = best;
    return best;
}

namespace detail {
// CPUID's vendor string is "GenuineIntel" (read once: CPUID traps in a virtual machine).
inline bool intel_cpu() {
    static const bool intel = [] {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0u), "c"(0u));
        return ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu;   // "Genu" "ineI" "ntel"
#else
        return false;
#endif
    }();
    return intel;
}
}  // namespace detail

ArmFeatures arm_features() {
    ArmFeatures f;
#if defined(__aarch64__) && defined(__linux__)
    unsigned long hwcap = getauxval(AT_HWCAP);
    f.asimd = (hwcap & (1ul << 1)) != 0;                                            // HWCAP_ASIMD
    f.fp16_arithmetic = (hwcap & (1ul << 9)) != 0 && (hwcap & (1ul << 10)) != 0;   // FPHP, ASIMDHP
    f.dot_product = (hwcap & (1ul << 20)) != 0;                                     // ASIMDDP
#endif
    return f;
}

// >>operations implementation
namespace detail {
struct OpInfo { const char* name; uint8_t arity; uint16_t ulp_fma, ulp_no_fma; };
// ULP bounds: the measured maxima of the accuracy sweeps in test/test_snippets.cpp, rounded
// up, with FMA (Ref, Avx2, Avx512) and without (Sse41). 0 means exact.
inline const OpInfo& op_info(SnippetOp op) {
    static const OpInfo table[] = {
        {"Parameter", 0, 0, 0}, {"Scalar", 0, 0, 0},
        {"Add", 2, 0, 0}, {"Sub", 2, 0, 0}, {"Mul", 2, 0, 0}, {"Div", 2, 0, 0}, {"Max", 2, 0, 0},
        {"Min", 2, 0, 0}, {"Pow", 2, kNoUlpBound, kNoUlpBound}, {"PowerStatic", 1, kNoUlpBound, kNoUlpBound},
        {"Sqrt", 1, 0, 0}, {"Reciprocal", 1, 0, 0}, {"Abs", 1, 0, 0}, {"Neg", 1, 0, 0},
        {"Exp", 1, 1, 1}, {"Log", 1, 1, 1}, {"Tanh", 1, 3, 3}, {"Sigmoid", 1, 3, 3}, {"Relu", 1, 0, 0},
        {"Clip", 1, 0, 0}, {"Elu", 1, 3, 3}, {"Selu", 1, 4, 4}, {"Erf", 1, 2, 3},
        {"GeluErf", 1, 4, 4}, {"GeluTanh", 1, 4, 4}, {"HardSigmoid", 1, 1, 16384}, {"HardSwish", 1, 3, 3},
        {"LeakyRelu", 1, 0, 0}, {"PRelu", 2, 0, 0}, {"Softplus", 1, 3, 3}, {"Softsign", 1, 2, 2},
        {"Swish", 1, 4, 4}, {"Mish", 1, 5, 5}, {"Floor", 1, 0, 0}, {"Ceil", 1, 0, 0}, {"Round", 1, 0, 0},
        {"Sign", 1, 0, 0}, {"Equal", 2, 0, 0}, {"Greater", 2, 0, 0}, {"Less", 2, 0, 0},
        {"GreaterOrEqual", 2, 0, 0}, {"LessOrEqual", 2, 0, 0}, {"Select", 3, 0, 0},
    };
    static_assert(sizeof table / sizeof table[0] == (size_t)SnippetOp::Count, "op table");
    return table[(int)op];
}
}  // namespace detail

const char* snippet_op_name(SnippetOp op) {
    return (int)op < (int)SnippetOp::Count ? detail::op_info(op).name : "Unknown";
}
uint32_t snippet_op_arity(SnippetOp op) {
    return (int)op < (int)SnippetOp::Count ? detail::op_info(op).arity : 0;
}
uint32_t snippet_op_ulp_bound(SnippetOp op, bool fma) {
    if ((int)op >= (int)SnippetOp::Count) return 0;
    return fma ? detail::op_info(op).ulp_fma : detail::op_info(op).ulp_no_fma;
}

namespace detail {
// The names snippet_op_from_name takes, hashed once: tokenize and island building ask per node.
struct SnippetOpNames {
    static constexpr uint32_t kSlots = 256;
    const char* names[kSlots] = {};
    SnippetOp ops[kSlots] = {};
    static uint32_t hash(StringView name) {
        uint32_t h = 2166136261u;
        for (size_t i = 0; i < name.size; ++i) h = (h ^ (unsigned char)name.data[i]) * 16777619u;
        return h;
    }
    void add(const char* name, SnippetOp op) {
        uint32_t k = hash(StringView(name)) & (kSlots - 1);
        while (names[k] && !equals_name(StringView(name), names[k])) k = (k + 1) & (kSlots - 1);
        if (names[k]) return;   // the first spelling wins, as the lists are searched in order
        names[k] = name;
        ops[k] = op;
    }
    bool find(StringView name, SnippetOp* op) const {
        for (uint32_t k = hash(name) & (kSlots - 1); names[k]; k = (k + 1) & (kSlots - 1))
            if (equals_name(name, names[k])) { *op = ops[k]; return true; }
        return false;
    }
};
}  // namespace detail

Status snippet_op_from_name(StringView name, SnippetOp* op) {
    struct Alias { const char* name; SnippetOp op; };
    static const Alias aliases[] = {
        {"Gelu", SnippetOp::GeluErf}, {"GeluTanh", SnippetOp::GeluTanh},
        {"SiLU", SnippetOp::Swish}, {"Silu", SnippetOp::Swish}, {"Clamp", SnippetOp::Clip},
        {"Where", SnippetOp::Select}, {"Multiply", SnippetOp::Mul}, {"Subtract", SnippetOp::Sub},
        {"Divide", SnippetOp::Div}, {"Maximum", SnippetOp::Max}, {"Minimum", SnippetOp::Min},
        {"Power", SnippetOp::Pow}, {"Sum", SnippetOp::Add},   // ONNX Sum of two inputs (node_is_fusible checks the count)
    };
    static const detail::SnippetOpNames table = [] {   // thread-safe initialization (C++11)
        detail::SnippetOpNames t;
        for (const Alias& a : aliases) t.add(a.name, a.op);
        for (int i = (int)SnippetOp::Add; i < (int)SnippetOp::Count; ++i)
            if ((SnippetOp)i != SnippetOp::PowerStatic) t.add(detail::op_info((SnippetOp)i).name, (SnippetOp)i);   // a lowering result, not a graph op
        return t;
    }();
    return table.find(name, op) ? Status::Ok : Status::NotFound;
}

void snippet_op_default_attributes(SnippetOp op, float* alpha, float* beta) {
    *alpha = 0; *beta = 0;
    switch (op) {
        case SnippetOp::Elu: *alpha = 1.0f; break;
        case SnippetOp::Selu: *alpha = 1.67326319217681884765625f; *beta = 1.05070102214813232421875f; break;
        case SnippetOp::HardSigmoid: *alpha = 0.2f; *beta = 0.5f; break;
        case SnippetOp::HardSwish: *alpha = 1.0f / 6.0f; *beta = 0.5f; break;
        case SnippetOp::LeakyRelu: *alpha = 0.01f; break;
        case SnippetOp::Swish: *alpha = 1.0f; break;
        case SnippetOp::Clip: *alpha = -INFINITY; *beta = INFINITY; break;
        case SnippetOp::PowerStatic: *alpha = 1.0f; break;
        default: break;
    }
}

// >>body implementation
SnippetBody::SnippetBody(Arena* arena) : arena_(arena) {}

Status SnippetBody::fail(Status status, const char* message) const {
    std::snprintf(error_, sizeof error_, "%s", message);
    return status;
}

Status SnippetBody::push(const SnippetInstruction& instruction, ValueId* out) {
    if (count_ >= 65535) return fail(Status::LimitExceeded, "body: more than 65535 instructions");
    if (count_ == capacity_) {
        uint32_t capacity = capacity_ ? capacity_ * 2 : 16;
        SnippetInstruction* grown = arena_->allocate_array<SnippetInstruction>(capacity);
        if (!grown) return fail(Status::OutOfMemory, "body: arena exhausted");
        for (uint32_t i = 0; i < count_; ++i) grown[i] = instructions_[i];
        instructions_ = grown;
        capacity_ = capacity;
    }
    instructions_[count_] = instruction;
    if (out) *out = count_;
    ++count_;
    return Status::Ok;
}

Status SnippetBody::parameter(Span<const int64_t> shape, ValueId* out) {
    if (shape.size > (size_t)kSnippetMaxRank) return fail(Status::LimitExceeded, "parameter: rank above 6");
    SnippetInstruction in;
    in.op = SnippetOp::Parameter;
    in.index = parameter_count_;
    in.shape.rank = (uint8_t)shape.size;
    for (size_t i = 0; i < shape.size; ++i) {
        if (shape[i] < 0) return fail(Status::InvalidArgument, "parameter: negative dimension");
        in.shape.dims[i] = shape[i];
    }
    Status s = push(in, out);
    if (s == Status::Ok) ++parameter_count_;
    return s;
}

Status SnippetBody::scalar(float value, ValueId* out) {
    SnippetInstruction in;
    in.op = SnippetOp::Scalar;
    in.alpha = value;
    return push(in, out);
}

Status SnippetBody::unary(SnippetOp op, ValueId x, ValueId* out) {
    float alpha, beta;
    snippet_op_default_attributes(op, &alpha, &beta);
    return add(op, Span<const ValueId>(&x, 1), alpha, beta, out);
}
Status SnippetBody::unary(SnippetOp op, ValueId x, float alpha, float beta, ValueId* out) {
    return add(op, Span<const ValueId>(&x, 1), alpha, beta, out);
}
Status SnippetBody::binary(SnippetOp op, ValueId a, ValueId b, ValueId* out) {
    ValueId args[] = {a, b};
    return add(op, args, 0, 0, out);
}
Status SnippetBody::select(ValueId condition, ValueId a, ValueId b, ValueId* out) {
    ValueId args[] = {condition, a, b};
    return add(SnippetOp::Select, args, 0, 0, out);
}

Status SnippetBody::add(SnippetOp op, Span<const ValueId> args, float alpha, float beta, ValueId* out) {
    if ((int)op <= (int)SnippetOp::Scalar || (int)op >= (int)SnippetOp::Count)
        return fail(Status::InvalidArgument, "add: not a computing operation (use parameter/scalar)");
    if (args.size != snippet_op_arity(op)) return fail(Status::InvalidArgument, "add: wrong number of inputs");
    if (alpha != alpha || beta != beta) return fail(Status::InvalidArgument, "add: NaN attribute");
    SnippetInstruction in;
    in.op = op;
    in.arity = (uint8_t)args.size;
    in.alpha = alpha;
    in.beta = beta;
    for (size_t i = 0; i < args.size; ++i) {
        if (args[i] >= count_) return fail(Status::InvalidArgument, "add: unknown input value");
        in.args[i] = args[i];
        if (!detail::broadcast_shapes(in.shape, instructions_[args[i]].shape, &in.shape))
            return fail(Status::InvalidArgument, "add: input shapes do not broadcast");
    }
    return push(in, out);
}

Status SnippetBody::result(ValueId value) {
    if (value >= count_) return fail(Status::InvalidArgument, "result: unknown value");
    if (result_count_ == result_capacity_) {
        uint32_t capacity = result_capacity_ ? result_capacity_ * 2 : 4;
        ValueId* grown = arena_->allocate_array<ValueId>(capacity);
        if (!grown) return fail(Status::OutOfMemory, "body: arena exhausted");
        for (uint32_t i = 0; i < result_count_; ++i) grown[i] = results_[i];
        results_ = grown;
        result_capacity_ = capacity;
    }
    results_[result_count_++] = value;
    return Status::Ok;
}

uint64_t SnippetBody::hash() const {
    uint64_t h = detail::kHashSeed;
    for (uint32_t i = 0; i < count_; ++i) {
        const SnippetInstruction& in = instructions_[i];
        h = detail::hash_bytes(&in.op, 1, h);
        h = detail::hash_bytes(in.args, sizeof in.args, h);
        h = detail::hash_bytes(&in.alpha, 4, h);
        h = detail::hash_bytes(&in.beta, 4, h);
        h = detail::hash_bytes(&in.shape.rank, 1, h);
        h = detail::hash_bytes(in.shape.dims, sizeof in.shape.dims, h);
    }
    return detail::hash_bytes(results_, result_count_ * sizeof(ValueId), h);
}

// >>lowering
namespace detail {

enum class LirKind : uint8_t { Load, BroadcastMove, BroadcastLoad, Constant, Compute, Store, StoreScalar };

// Ops with a polynomial approximation behind them (exp, log, tables): the bodies with one are
// compute-bound, which decides their stores (compile()) and the page blocks' prefetches
// (emit_next_block_prefetches). Pow, as a body op or lowered to PowerStatic.
inline bool transcendental_op(SnippetOp op) {
    switch (op) {
        case SnippetOp::Exp: case SnippetOp::Log: case SnippetOp::Tanh: case SnippetOp::Sigmoid:
        case SnippetOp::Erf: case SnippetOp::GeluErf: case SnippetOp::GeluTanh: case SnippetOp::Softplus:
        case SnippetOp::Swish: case SnippetOp::Mish: case SnippetOp::Elu: case SnippetOp::Selu:
        case SnippetOp::Pow: case SnippetOp::PowerStatic: return true;
        default: return false;
    }
}

inline bool x86_isa(Isa isa) { return isa == Isa::Sse41 || isa == Isa::Avx2 || isa == Isa::Avx512; }

// One lowered instruction; it defines value `its index` unless it is a store.
struct Lir {
    LirKind kind = LirKind::Compute;
    SnippetOp op = SnippetOp::Add;
    uint8_t arity = 0;
    uint32_t index = 0;            // Load/Store: argument index; Constant: data-section slot
    uint32_t args[3] = {0, 0, 0};
    float alpha = 0, beta = 0;     // Constant: alpha is the value
    int16_t reg = -1;              // vector register of the value
    int32_t slot = -1;             // spill slot of the value
    bool hoisted = false;          // BroadcastLoad kept in its register for a whole row
    bool lane0 = false;            // Load of a row-broadcast parameter: one float, for a BroadcastMove
    uint32_t last_use = 0;
};
static_assert(sizeof(Lir) >= 40, "cache key layout");

struct Program {
    Lir* code = nullptr;
    uint32_t count = 0;
    uint32_t constants[256];       // data-section slots: float bits, or a lookup table's id
    uint8_t constant_kinds[256] = {};  // 0: a float in every lane; 1 + k: part k of a lookup table
    uint32_t constant_count = 0;
    bool neon_table_registers = true;  // SnippetTuning::neon_table_registers
    uint32_t spill_slots = 0;
    uint32_t registers_used = 0;
    uint32_t spilled = 0;
};

// Vector registers kept out of allocation for the emitters' temporaries (the deepest
// approximation, expm1 inside Elu, peaks at 9 live temporaries).
constexpr uint32_t kScratchRegisters = 10;

inline bool defines_value(LirKind k) { return k != LirKind::Store && k != LirKind::StoreScalar; }
inline bool needs_register(LirKind k) { return defines_value(k) && k != LirKind::Constant; }

// >>lowering passes
// Rebuilds a program through a filter: `keep` decides, `remap` renumbers arguments.
struct Rebuild {
    Lir* out;
    uint32_t count = 0;
    uint32_t* remap;
};

// Parameter -> Load, Scalar -> Constant (value in alpha), Result -> Store / StoreScalar.
inline Status insert_load_store(const SnippetBody& body, const bool* result_inner_broadcast, Arena* arena, Program* p) {
    uint32_t n = body.size() + body.result_count();
    p->code = arena->allocate_array<Lir>(n * 2 + 1);  // room for broadcast moves
    if (!p->code) return Status::OutOfMemory;
    for (uint32_t i = 0; i < body.size(); ++i) {
        const SnippetInstruction& in = body.instruction(i);
        Lir l;
        l.op = in.op;
        l.arity = in.arity;
        l.alpha = in.alpha;
        l.beta = in.beta;
        for (int a = 0; a < 3; ++a) l.args[a] = in.args[a];
        if (in.op == SnippetOp::Parameter) { l.kind = LirKind::Load; l.index = in.index; }
        else if (in.op == SnippetOp::Scalar) l.kind = LirKind::Constant;
        else l.kind = LirKind::Compute;
        p->code[p->count++] = l;
    }
    for (uint32_t r = 0; r < body.result_count(); ++r) {
        Lir l;
        l.kind = result_inner_broadcast[r] ? LirKind::StoreScalar : LirKind::Store;
        l.arity = 1;
        l.args[0] = body.result_value(r);
        l.index = body.parameter_count() + r;
        p->code[p->count++] = l;
    }
    return Status::Ok;
}

// Pow whose exponent is a scalar constant becomes PowerStatic (the exponent in alpha).
inline void power_static(Program* p) {
    for (uint32_t i = 0; i < p->count; ++i) {
        Lir& l = p->code[i];
        if (l.kind == LirKind::Compute && l.op == SnippetOp::Pow && p->code[l.args[1]].kind == LirKind::Constant) {
            l.op = SnippetOp::PowerStatic;
            l.alpha = p->code[l.args[1]].alpha;
            l.arity = 1;
        }
    }
}

// Generic renumbering copy used by the passes that insert or remove instructions.
inline void renumber(Program* p, Lir* out, uint32_t count, uint32_t* remap) {
    for (uint32_t i = 0; i < count; ++i)
        for (int a = 0; a < out[i].arity; ++a) out[i].args[a] = remap[out[i].args[a]];
    p->code = out;
    p->count = count;
}

// A parameter that is broadcast along the row gets an explicit BroadcastMove after its Load.
inline Status insert_broadcast_move(Program* p, const bool* inner_broadcast, Arena* arena) {
    Lir* out = arena->allocate_array<Lir>(p->count * 2 + 1);
    uint32_t* remap = arena->allocate_array<uint32_t>(p->count + 1);
    if (!out || !remap) return Status::OutOfMemory;
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->count; ++i) {
        out[n] = p->code[i];
        remap[i] = n++;
        if (p->code[i].kind == LirKind::Load && inner_broadcast[p->code[i].index]) {
            out[n - 1].lane0 = true;
            Lir move;
            move.kind = LirKind::BroadcastMove;
            move.arity = 1;
            move.args[0] = i;     // renumbered below like every argument
            out[n] = move;
            remap[i] = n++;       // users now read the broadcast value
        }
    }
    // The move itself must read the load, not itself: fix after renumbering.
    renumber(p, out, n, remap);
    for (uint32_t i = 0; i < n; ++i)
        if (out[i].kind == LirKind::BroadcastMove) out[i].args[0] = i - 1;
    return Status::Ok;
}

// Load immediately followed by its BroadcastMove becomes one BroadcastLoad.
inline Status fuse_broadcast_load(Program* p, Arena* arena) {
    Lir* out = arena->allocate_array<Lir>(p->count + 1);
    uint32_t* remap = arena->allocate_array<uint32_t>(p->count + 1);
    if (!out || !remap) return Status::OutOfMemory;
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->count; ++i) {
        const Lir& l = p->code[i];
        if (l.kind == LirKind::Load && i + 1 < p->count && p->code[i + 1].kind == LirKind::BroadcastMove &&
            p->code[i + 1].args[0] == i) {
            out[n] = l;
            out[n].kind = LirKind::BroadcastLoad;
            out[n].lane0 = false;
            remap[i] = remap[i + 1] = n++;
            ++i;
            continue;
        }
        out[n] = l;
        remap[i] = n++;
    }
    renumber(p, out, n, remap);
    return Status::Ok;
}

// The data-section slot of a float (parts 0), or the first of the `parts` consecutive slots
// that hold lookup table `bits` (a 64-byte x86 slot holds a whole table, a 16-byte NEON slot
// a quarter). Deduplicated; false when the 256 slots are used up.
inline bool data_slot(uint32_t* constants, uint8_t* kinds, uint32_t* count, uint32_t bits, uint32_t parts, uint32_t* slot) {
    const uint8_t kind = parts ? 1 : 0;
    for (uint32_t i = 0; i < *count; ++i)
        if (constants[i] == bits && kinds[i] == kind) { *slot = i; return true; }
    const uint32_t n = parts ? parts : 1;
    if (*count + n > 256) return false;
    *slot = *count;
    for (uint32_t k = 0; k < n; ++k, ++*count) {
        constants[*count] = bits;
        kinds[*count] = (uint8_t)(parts ? 1 + k : 0);
    }
    return true;
}

// The constant slot with the most uses counted (ties: the lowest), -1 when none is left:
// the next one to pin in a register.
inline int most_used_constant(const uint16_t* uses) {
    int best = -1;
    for (int k = 0; k < 256; ++k)
        if (uses[k] && (best < 0 || uses[k] > uses[best])) best = k;
    return best;
}

// Scalars get a slot in the data section (deduplicated by bits).
inline Status scalars_to_data_section(Program* p) {
    for (uint32_t i = 0; i < p->count; ++i) {
        Lir& l = p->code[i];
        if (l.kind != LirKind::Constant) continue;
        if (!data_slot(p->constants, p->constant_kinds, &p->constant_count, float_bits(l.alpha), 0, &l.index))
            return Status::LimitExceeded;
    }
    return Status::Ok;
}

// Drops instructions no store depends on; then puts each Load right before its first use and
// keeps stores last, which shortens live ranges and keeps in-place runs correct (every load of
// a tile happens before any store of it).
inline Status eliminate_dead_code_and_schedule(Program* p, Arena* arena) {
    uint32_t n = p->count;
    bool* live = arena->allocate_array<bool>(n + 1);
    bool* placed = arena->allocate_array<bool>(n + 1);
    Lir* out = arena->allocate_array<Lir>(n + 1);
    uint32_t* remap = arena->allocate_array<uint32_t>(n + 1);
    if (!live || !placed || !out || !remap) return Status::OutOfMemory;
    for (uint32_t i = 0; i < n; ++i) { live[i] = !defines_value(p->code[i].kind); placed[i] = false; }
    for (uint32_t i = n; i-- > 0;)
        if (live[i])
            for (int a = 0; a < p->code[i].arity; ++a) live[p->code[i].args[a]] = true;
    uint32_t m = 0;
    auto place = [&](uint32_t i) { out[m] = p->code[i]; remap[i] = m++; placed[i] = true; };
    bool stored = false;
    for (uint32_t i = 0; i < n; ++i) {
        const Lir& l = p->code[i];
        if (!live[i] || placed[i]) continue;
        if (l.kind == LirKind::Load || l.kind == LirKind::BroadcastLoad || l.kind == LirKind::Constant) continue;
        if (!stored && (l.kind == LirKind::Store || l.kind == LirKind::StoreScalar)) {
            // An output may overwrite an input in place, and a result may be a parameter
            // itself: every load a store reads happens before the first store writes.
            stored = true;
            for (uint32_t j = i; j < n; ++j) {
                const Lir& store = p->code[j];
                if (!live[j] || (store.kind != LirKind::Store && store.kind != LirKind::StoreScalar)) continue;
                for (int a = 0; a < store.arity; ++a) {
                    uint32_t src = store.args[a];
                    LirKind k = p->code[src].kind;
                    if (!placed[src] && (k == LirKind::Load || k == LirKind::BroadcastLoad)) place(src);
                }
            }
        }
        for (int a = 0; a < l.arity; ++a) {
            uint32_t src = l.args[a];
            LirKind k = p->code[src].kind;
            if (!placed[src] && (k == LirKind::Load || k == LirKind::BroadcastLoad || k == LirKind::Constant)) place(src);
        }
        place(i);
    }
    renumber(p, out, m, remap);
    return Status::Ok;
}

// >>register allocation
// Linear scan over the SSA intervals [definition, last use]. When no register is free the
// interval that ends last is spilled for its whole life (Poletto & Sarkar).
inline Status allocate_registers(Program* p, uint32_t registers, Arena* arena) {
    uint32_t n = p->count;
    for (uint32_t i = 0; i < n; ++i) p->code[i].last_use = i;
    for (uint32_t i = 0; i < n; ++i)
        for (int a = 0; a < p->code[i].arity; ++a) p->code[p->code[i].args[a]].last_use = i;
    int32_t* holder = arena->allocate_array<int32_t>(registers + 1);  // value in each register
    if (!holder) return Status::OutOfMemory;
    for (uint32_t r = 0; r < registers; ++r) holder[r] = -1;
    bool used[64] = {};
    // Row-invariant broadcasts are loaded once per row into registers of their own (the top
    // ones) when they take at most half of the budget; the scan shares the rest.
    uint32_t broadcasts = 0;
    for (uint32_t i = 0; i < n; ++i) broadcasts += p->code[i].kind == LirKind::BroadcastLoad;
    if (broadcasts && broadcasts * 2 <= registers) {
        for (uint32_t i = 0; i < n; ++i) {
            Lir& l = p->code[i];
            if (l.kind != LirKind::BroadcastLoad) continue;
            l.hoisted = true;
            l.reg = (int16_t)--registers;
            used[registers] = true;
        }
    }
    for (uint32_t i = 0; i < n; ++i) {
        Lir& l = p->code[i];
        if (!needs_register(l.kind) || l.hoisted) continue;
        int free_reg = -1;
        for (uint32_t r = 0; r < registers; ++r) {
            int32_t v = holder[r];
            if (v < 0 || p->code[v].last_use <= i || p->code[v].reg != (int16_t)r) { free_reg = (int)r; break; }
        }
        if (free_reg < 0) {
            uint32_t victim_reg = 0;
            for (uint32_t r = 1; r < registers; ++r)
                if (p->code[holder[r]].last_use > p->code[holder[victim_reg]].last_use) victim_reg = r;
            Lir& victim = p->code[holder[victim_reg]];
            if (victim.last_use > l.last_use) {
                victim.reg = -1;
                victim.slot = (int32_t)p->spill_slots++;
                free_reg = (int)victim_reg;
            } else {
                l.slot = (int32_t)p->spill_slots++;
            }
            ++p->spilled;
        }
        if (free_reg >= 0) {
            l.reg = (int16_t)free_reg;
            holder[free_reg] = (int32_t)i;
            used[free_reg] = true;
        }
    }
    for (uint32_t r = 0; r < 64; ++r) p->registers_used += used[r];
    return Status::Ok;
}

// >>domain normalization
// Domain normalization: right-align every shape to 6D, drop unit domain dimensions, merge
// neighbours on which every tensor is either full or broadcast alike. The last merged
// dimension is the row the kernel walks.
struct Domain {
    uint32_t rank = 0;
    int64_t dims[kSnippetMaxRank] = {};
    int64_t strides[kSnippetMaxArgs][kSnippetMaxRank] = {};
    uint64_t elements = 0;
};

inline bool normalize_domain(const SnippetShape* shapes, uint32_t tensors, const SnippetShape& domain_shape, Domain* d) {
    int64_t dom[6], dims[kSnippetMaxArgs][6], stride[kSnippetMaxArgs][6];
    for (int i = 0; i < 6; ++i) {
        int k = domain_shape.rank - 6 + i;
        dom[i] = k >= 0 ? domain_shape.dims[k] : 1;
    }
    for (uint32_t t = 0; t < tensors; ++t) {
        for (int i = 0; i < 6; ++i) {
            int k = shapes[t].rank - 6 + i;
            dims[t][i] = k >= 0 ? shapes[t].dims[k] : 1;
            if (dims[t][i] != dom[i] && dims[t][i] != 1) return false;
        }
        int64_t s = 1;
        for (int i = 5; i >= 0; --i) { stride[t][i] = s; s *= dims[t][i]; }
    }
    d->elements = 1;
    for (int i = 0; i < 6; ++i) d->elements *= (uint64_t)dom[i];
    d->rank = 0;
    int last = -1;
    for (int i = 0; i < 6; ++i) {
        if (dom[i] == 1) continue;
        bool merge = last >= 0;
        for (uint32_t t = 0; t < tensors && merge; ++t)
            merge = (dims[t][last] == dom[last]) == (dims[t][i] == dom[i]);
        if (merge) {
            d->dims[d->rank - 1] *= dom[i];
        } else {
            d->dims[d->rank++] = dom[i];
        }
        for (uint32_t t = 0; t < tensors; ++t)
            d->strides[t][d->rank - 1] = dims[t][i] == dom[i] ? stride[t][i] : 0;
        last = i;
    }
    if (d->rank == 0) {  // a one-element domain
        d->rank = 1;
        d->dims[0] = 1;
        for (uint32_t t = 0; t < tensors; ++t) d->strides[t][0] = 1;
    }
    return true;
}

}  // namespace detail

// >>x64 emitter
#ifndef TESSEL_NO_JIT
namespace detail {

struct ErrorRecorder : public asmjit::ErrorHandler {
    asmjit::Error first = asmjit::kErrorOk;
    void handleError(asmjit::Error err, const char*, asmjit::BaseEmitter*) override {
        if (first == asmjit::kErrorOk) first = err;
    }
};

inline asmjit::JitRuntime& jit_runtime() {
    static asmjit::JitRuntime runtime;
    return runtime;
}

// emit(a, labels) into fresh code on jit_runtime(), `count` labels made for it to bind; then
// entries[i] is the address of labels[i]. Unsupported when an instruction failed to encode,
// OutOfMemory when the runtime could not take the code. The kernel tables' one assembly.
// `expected_bytes` of code are reserved first (a growing buffer is copied at each doubling).
template <typename Assembler, typename Emit>
inline Status assemble_jit_entries(uint32_t count, void** entries, Emit&& emit, size_t expected_bytes = 0) {
    asmjit::CodeHolder code;
    ErrorRecorder recorder;
    code.init(jit_runtime().environment());
    code.setErrorHandler(&recorder);
    if (expected_bytes && code.reserveBuffer(&code.textSection()->buffer(), expected_bytes) != asmjit::kErrorOk) return Status::OutOfMemory;
    Assembler a(&code);
    asmjit::Label labels[256];
    if (count > 256) return Status::LimitExceeded;
    for (uint32_t i = 0; i < count; ++i) labels[i] = a.newLabel();
    emit(a, labels);
    if (recorder.first != asmjit::kErrorOk) return Status::Unsupported;
    void* base = nullptr;
    if (jit_runtime().add(&base, &code) != asmjit::kErrorOk) return Status::OutOfMemory;
    for (uint32_t i = 0; i < count; ++i) entries[i] = static_cast<char*>(base) + code.labelOffsetFromBase(labels[i]);
    return Status::Ok;
}

// A value during emission: a vector register or a data-section constant. Registers taken from
// the scratch pool are reference counted and return to it when the last handle dies. One
// template for every target's vector model (Math has refs[]).
template <class Math>
struct JitValue {
    Math* m = nullptr;
    int reg = -1;
    int constant = -1;
    JitValue() = default;
    JitValue(Math* math, int r, int c) : m(math), reg(r), constant(c) { retain(); }
    JitValue(const JitValue& o) : m(o.m), reg(o.reg), constant(o.constant) { retain(); }
    JitValue(JitValue&& o) noexcept : m(o.m), reg(o.reg), constant(o.constant) { o.m = nullptr; o.reg = -1; }
    JitValue& operator=(const JitValue& o) {
        if (this != &o) { JitValue copy(o); release(); m = copy.m; reg = copy.reg; constant = copy.constant; copy.m = nullptr; copy.reg = -1; }
        return *this;
    }
    JitValue& operator=(JitValue&& o) noexcept {
        if (this != &o) { release(); m = o.m; reg = o.reg; constant = o.constant; o.m = nullptr; o.reg = -1; }
        return *this;
    }
    ~JitValue() { release(); }
    void retain() { if (m && reg >= 0) ++m->refs[reg]; }
    void release() {
        if (m && reg >= 0) --m->refs[reg];
        m = nullptr;
        reg = -1;
    }
};

struct JitMath;
using JV = JitValue<JitMath>;

namespace x86 = asmjit::x86;
using InstId = asmjit::InstId;

struct JitMath {
    x86::Assembler* a = nullptr;
    Isa isa = Isa::Avx2;
    uint32_t vec_bytes = 32;
    asmjit::Label data;
    uint32_t* constants = nullptr;   // Program's data section, grown by the emitters
    uint8_t* constant_kinds = nullptr;
    uint32_t* constant_count = nullptr;
    int refs[32] = {};
    bool pool[32] = {};              // may hand out as a temporary
    bool failed = false;             // out of constants or of scratch registers
    // Lanes: tiles emitted in lockstep (each instruction once per lane, back to back; 3 or 4
    // lanes then skewed by emit_pipelined_tiles), so the long dependency chains of the
    // approximations overlap. Lane k uses vector register r + k*bank, mask register k2 + k,
    // rows k vectors further and spill slot s*lanes + k.
    uint32_t lanes = 1;
    uint32_t first_lane = 0;         // ins() emits lanes first_lane .. first_lane + lanes - 1
    uint32_t bank = 32;
    uint32_t lane_stride = 0;        // bytes from one lane's row elements to the next's; 0: a vector (page blocks: a page)
    // Row groups (emit_row_groups): lane k's operands of an argument lie k * row_lane_bytes[its
    // pointer register] further, its row elements and its row values alike.
    bool row_groups = false;
    int32_t row_lane_bytes[16] = {};
    // Where each non-temporal store starts in the text section, for the in-place twin
    // (patched_twin); a count past the array means there were too many to list.
    static constexpr uint32_t kMaxStreamingStores = 256;
    uint32_t streaming_store_offsets[kMaxStreamingStores];
    uint32_t streaming_store_count = 0;
    // Constants pinned in vector registers for the whole kernel (loaded once, before the first
    // row), shared by every lane; the others stay memory operands. The approximations are
    // compute-bound, and a memory operand per constant use makes the loads their bottleneck
    // (cores issue fewer vector loads than FP operations per cycle).
    int16_t const_reg[256];
    uint32_t pinned = 0;             // bit r: register r is shared by the lanes (a pinned constant or row invariant)
    uint16_t* const_uses = nullptr;  // counting pass: memory-operand uses per constant slot
    int max_reg = -1;                // highest register alloc() handed out
    JitMath() { for (int16_t& r : const_reg) r = -1; }

    // Operand `o` of lane `lane`; `next_tile` bytes move a row element to a later tile.
    asmjit::Operand in_lane(const asmjit::Operand& o, uint32_t lane, int32_t next_tile = 0) const {
        if (lane == 0 && next_tile == 0) return o;
        if (o.isReg()) {
            const asmjit::BaseReg& r = o.as<asmjit::BaseReg>();
            if (r.isVec()) {
                if (pinned >> r.id() & 1) return o;                  // shared by the lanes
                x86::Vec v = o.as<x86::Vec>();
                v.setId(v.id() + lane * bank);
                return v;
            }
            if (r.group() == asmjit::RegGroup::kX86_K) return x86::KReg(r.id() + lane);
            return o;
        }
        if (o.isMem()) {
            x86::Mem mem = o.as<x86::Mem>();
            if (mem.hasBaseLabel()) return o;                        // data-section constant
            if (row_groups && mem.hasBaseReg() && mem.baseId() != x86::Gp::kIdSp) {
                mem.addOffset((int64_t)lane * row_lane_bytes[mem.baseId() & 15] + (mem.hasIndex() ? next_tile : 0));
                return mem;                                          // lane k's row elements or row values
            }
            if (mem.hasIndex()) mem.addOffset((int64_t)lane * (lane_stride ? lane_stride : vec_bytes) + next_tile);   // a row element
            else if (mem.hasBaseReg() && mem.baseId() == x86::Gp::kIdSp) mem.addOffset((int64_t)lane * 64);  // spill slot
            return mem;                                              // a broadcast element
        }
        return o;
    }
    // Emits `id` once per lane; mask_reg >= 0 masks with k(mask_reg + lane), zeroing or merging.
    void ins(InstId id, const asmjit::Operand& o0, const asmjit::Operand& o1 = asmjit::Operand(),
             const asmjit::Operand& o2 = asmjit::Operand(), const asmjit::Operand& o3 = asmjit::Operand(),
             int mask_reg = -1, bool zeroing = false) {
        const bool retargetable =
            mask_reg < 0 && isa != Isa::Sse41 && o0.isReg() && o0.as<asmjit::BaseReg>().isVec() && writes_only_first(id);
        const Group group{id, {o0, o1, o2, o3}, mask_reg, zeroing};
        if (recording) {
            if (!recorded.push(group)) { failed = true; return; }
            last = Emitted{recorded.size - 1, recorded.size, id, {o0, o1, o2, o3}, retargetable};
            return;
        }
        const size_t start = a->offset();
        for (uint32_t lane = first_lane; lane < first_lane + lanes; ++lane) replay(group, lane, 0);
        last = Emitted{start, a->offset(), id, {o0, o1, o2, o3}, retargetable};
    }
    // Recording: ins() groups kept in order instead of assembled, for a vector tile that
    // emit_pipelined_tiles() replays with its lanes skewed (each lane's groups in their order).
    struct Group {
        InstId id;
        asmjit::Operand o[4];
        int mask_reg;
        bool zeroing;
    };
    bool recording = false;
    ArenaVector<Group> recorded;   // arena set by emit_kernel
    // One recorded group for one lane, its row elements `next_tile` bytes further.
    void replay(const Group& g, uint32_t lane, int32_t next_tile) {
        if (g.id == x86::Inst::kIdVmovntps || g.id == x86::Inst::kIdMovntps) {
            if (streaming_store_count < kMaxStreamingStores) streaming_store_offsets[streaming_store_count] = (uint32_t)a->offset();
            if (streaming_store_count <= kMaxStreamingStores) ++streaming_store_count;
        }
        if (g.mask_reg >= 0) {
            if (g.zeroing) a->k(x86::KReg((uint32_t)g.mask_reg + lane)).z();
            else a->k(x86::KReg((uint32_t)g.mask_reg + lane));
        }
        a->emit(g.id, in_lane(g.o[0], lane, next_tile), in_lane(g.o[1], lane, next_tile), in_lane(g.o[2], lane, next_tile),
                in_lane(g.o[3], lane, next_tile));
    }
    // The last ins() group, kept so that define() can give it the value's register as its
    // destination instead of copying the result there (copies would be a large share of an
    // approximation's loop). Only VEX/EVEX instructions whose destination is not also a source.
    struct Emitted {
        size_t start = 0, end = ~size_t(0);
        InstId id = 0;
        asmjit::Operand o[4];
        bool retargetable = false;
    } last;
    static bool writes_only_first(InstId id) {
        switch (id) {
            case x86::Inst::kIdVaddps: case x86::Inst::kIdVsubps: case x86::Inst::kIdVmulps: case x86::Inst::kIdVdivps:
            case x86::Inst::kIdVminps: case x86::Inst::kIdVmaxps: case x86::Inst::kIdVandps: case x86::Inst::kIdVorps:
            case x86::Inst::kIdVxorps: case x86::Inst::kIdVandnps: case x86::Inst::kIdVpandd: case x86::Inst::kIdVpord:
            case x86::Inst::kIdVpxord: case x86::Inst::kIdVpandnd: case x86::Inst::kIdVpaddd: case x86::Inst::kIdVpsubd:
            case x86::Inst::kIdVpmulld: case x86::Inst::kIdVpermps: case x86::Inst::kIdVsqrtps: case x86::Inst::kIdVcvtps2dq:
            case x86::Inst::kIdVcvtdq2ps: case x86::Inst::kIdVroundps: case x86::Inst::kIdVrndscaleps:
            case x86::Inst::kIdVpslld: case x86::Inst::kIdVpsrld: case x86::Inst::kIdVpsrad: case x86::Inst::kIdVmovups:
            case x86::Inst::kIdVmovaps: case x86::Inst::kIdVblendvps: case x86::Inst::kIdVbroadcastss: case x86::Inst::kIdVscalefps:
                return true;
            default:
                return false;
        }
    }
    // define()'s copy of a result into its value's register d. When the result is a scratch
    // register the last ins() group wrote, nothing was emitted since, and the group's
    // destination is write-only, the group is assembled again over itself with d as its
    // destination. Same encoding length (only ModRM.reg and the prefix's register bits
    // change), so label links into it stay valid.
    void move_result(int d, const JV& v) {
        if (v.reg >= 0 && v.reg != d && pool[v.reg] && refs[v.reg] <= 2 && last.retargetable &&
            last.end == (recording ? recorded.size : a->offset()) && last.o[0].as<asmjit::BaseReg>().id() == (uint32_t)v.reg) {
            if (recording) {   // the group is not assembled yet: give it d
                invalidate(d);
                recorded[last.start].o[0] = vr(d);
                last.o[0] = vr(d);
                return;
            }
            const size_t end = last.end;
            const Emitted group = last;
            a->setOffset(group.start);
            invalidate(d);
            ins(group.id, vr(d), group.o[1], group.o[2], group.o[3]);
            if (a->offset() != end) failed = true;   // cannot happen: see above
            return;
        }
        move(d, v);
    }

    x86::Vec vr(int r) const {
        if (isa == Isa::Avx512) return x86::zmm((uint32_t)r);
        if (isa == Isa::Avx2) return x86::ymm((uint32_t)r);
        return x86::xmm((uint32_t)r);
    }
    x86::Mem cm(int slot) const { return x86::ptr(data, slot * 64, vec_bytes); }
    asmjit::Operand op(const JV& v) const {
        if (v.reg >= 0) return vr(v.reg);
        if (const_uses) ++const_uses[v.constant];
        return cm(v.constant);
    }
    // A data-section constant as a value: its pinned register (never in the scratch pool, so
    // no operation writes it) or a memory operand.
    JV constant_value(int slot) { return JV(this, const_reg[slot], slot); }
    int constant_slot(uint32_t bits, uint32_t parts = 0) {
        uint32_t slot = 0;
        if (!data_slot(constants, constant_kinds, constant_count, bits, parts, &slot)) failed = true;
        return (int)slot;
    }
    uint32_t peak = 0;               // most scratch registers in use at once
    // AVX-512: the vector register whose mask k2 holds (k2 = its nonzero lanes), so a blend
    // right after its compare needs no vptestmd. Forgotten when that register is rewritten.
    int k2_source = -1;
    void invalidate(int r) { if (r == k2_source) k2_source = -1; }
    int alloc() {
        for (int r = 0; r < 32; ++r)
            if (pool[r] && refs[r] == 0) {
                invalidate(r);
                uint32_t busy = 1;
                for (int q = 0; q < 32; ++q) busy += pool[q] && refs[q] > 0;
                if (busy > peak) peak = busy;
                if (r > max_reg) max_reg = r;
                return r;
            }
        failed = true;
        return 31;
    }
    JV fresh() { return JV(this, alloc(), -1); }
    void drop(JV& v) { v.release(); }
    bool fused_fma() const { return isa != Isa::Sse41; }
    JV c(float v) { return constant_value(constant_slot(float_bits(v))); }
    JV cb(uint32_t b) { return constant_value(constant_slot(b)); }

    void move(int d, const JV& v) {
        if (v.reg == d) return;
        invalidate(d);
        ins(isa == Isa::Sse41 ? x86::Inst::kIdMovaps : x86::Inst::kIdVmovaps, vr(d), op(v));
    }
    JV in_reg(const JV& v) {
        if (v.reg >= 0) return v;
        JV d = fresh();
        move(d.reg, v);
        return d;
    }
    // >>x64 operations
    // d = a OP b, for SSE's destructive and VEX/EVEX three-operand forms.
    JV bin(InstId sse, InstId vex, InstId evex, const JV& x, const JV& y, bool commutative) {
        JV d = fresh();
        if (isa == Isa::Sse41) {
            move(d.reg, x);
            ins(sse, vr(d.reg), op(y));
        } else {
            InstId id = isa == Isa::Avx512 ? evex : vex;
            if (x.reg >= 0) ins(id, vr(d.reg), vr(x.reg), op(y));
            else if (commutative && y.reg >= 0) ins(id, vr(d.reg), vr(y.reg), op(x));
            else { move(d.reg, x); ins(id, vr(d.reg), vr(d.reg), op(y)); }
        }
        return d;
    }
    JV add(const JV& x, const JV& y) { return bin(x86::Inst::kIdAddps, x86::Inst::kIdVaddps, x86::Inst::kIdVaddps, x, y, true); }
    JV sub(const JV& x, const JV& y) { return bin(x86::Inst::kIdSubps, x86::Inst::kIdVsubps, x86::Inst::kIdVsubps, x, y, false); }
    JV mul(const JV& x, const JV& y) { return bin(x86::Inst::kIdMulps, x86::Inst::kIdVmulps, x86::Inst::kIdVmulps, x, y, true); }
    JV div(const JV& x, const JV& y) { return bin(x86::Inst::kIdDivps, x86::Inst::kIdVdivps, x86::Inst::kIdVdivps, x, y, false); }
    JV min(const JV& x, const JV& y) { return bin(x86::Inst::kIdMinps, x86::Inst::kIdVminps, x86::Inst::kIdVminps, x, y, false); }
    JV max(const JV& x, const JV& y) { return bin(x86::Inst::kIdMaxps, x86::Inst::kIdVmaxps, x86::Inst::kIdVmaxps, x, y, false); }
    JV and_(const JV& x, const JV& y) { return bin(x86::Inst::kIdAndps, x86::Inst::kIdVandps, x86::Inst::kIdVpandd, x, y, true); }
    JV or_(const JV& x, const JV& y) { return bin(x86::Inst::kIdOrps, x86::Inst::kIdVorps, x86::Inst::kIdVpord, x, y, true); }
    JV xor_(const JV& x, const JV& y) { return bin(x86::Inst::kIdXorps, x86::Inst::kIdVxorps, x86::Inst::kIdVpxord, x, y, true); }
    JV andnot(const JV& x, const JV& y) { return bin(x86::Inst::kIdAndnps, x86::Inst::kIdVandnps, x86::Inst::kIdVpandnd, x, y, false); }
    JV add_i(const JV& x, const JV& y) { return bin(x86::Inst::kIdPaddd, x86::Inst::kIdVpaddd, x86::Inst::kIdVpaddd, x, y, true); }
    JV sub_i(const JV& x, const JV& y) { return bin(x86::Inst::kIdPsubd, x86::Inst::kIdVpsubd, x86::Inst::kIdVpsubd, x, y, false); }
    JV mul_i(const JV& x, const JV& y) { return bin(x86::Inst::kIdPmulld, x86::Inst::kIdVpmulld, x86::Inst::kIdVpmulld, x, y, true); }
    // |r| with the sign of x, for r >= +0: one vpternlogd on AVX-512 (x's sign bit, r's other bits).
    JV copy_sign(JV r, const JV& x) {
        if (isa != Isa::Avx512) {
            JV sign = and_(x, cb(0x80000000u));
            return or_(r, sign);
        }
        JV xr = in_reg(x);
        JV d = r;
        if (!stealable(r)) { d = fresh(); move(d.reg, r); }
        invalidate(d.reg);
        ins(x86::Inst::kIdVpternlogd, vr(d.reg), vr(xr.reg), op(cb(0x80000000u)), asmjit::Imm(0xd8));
        return d;
    }
    bool has_scalef() const { return isa == Isa::Avx512; }
    JV scalef(const JV& x, const JV& n) {   // x 2^floor(n), rounded once (AVX-512 only)
        return bin(x86::Inst::kIdVscalefps, x86::Inst::kIdVscalefps, x86::Inst::kIdVscalefps, x, n, false);
    }

    // Table lookups. lookup_index turns k (interval in the low 4 bits) into what the target's
    // permutes read, once for all of a function's tables: AVX-512 vpermps reads the low 4 bits
    // of k; AVX2 vpermps the low 3 and a blend the half, bit 3 moved to the sign; SSE4.1 pshufb
    // byte indices 4k + {0,1,2,3}.
    JV lookup_index(const JV& k) {
        if (isa == Isa::Avx512) return in_reg(k);
        if (isa == Isa::Avx2) {
            JV half = shl_i(k, 28);
            return or_(half, k);
        }
        JV b = and_(k, cb(15));
        b = shl_i(b, 2);
        b = mul_i(b, cb(0x01010101u));
        return add_i(b, cb(0x03020100u));
    }
    JV lookup(const JV& index, uint32_t table) {
        const int slot = constant_slot(table, 1);     // 64 bytes: the whole table
        JV ir = in_reg(index);
        JV d = fresh();
        if (isa == Isa::Avx512) {
            ins(x86::Inst::kIdVpermps, vr(d.reg), vr(ir.reg), op(constant_value(slot)));
        } else if (isa == Isa::Avx2) {
            JV high = fresh();
            ins(x86::Inst::kIdVpermps, vr(d.reg), vr(ir.reg), x86::ptr(data, slot * 64, 32));
            ins(x86::Inst::kIdVpermps, vr(high.reg), vr(ir.reg), x86::ptr(data, slot * 64 + 32, 32));
            ins(x86::Inst::kIdVblendvps, vr(d.reg), vr(d.reg), vr(high.reg), vr(ir.reg));
        } else {
            // Quarter j answers the lanes whose byte indices lie in [16j, 16j + 16): pshufb
            // zeroes a byte whose control has bit 7 set, and (b - 16j) +us 0x70 has it clear
            // exactly there, its low nibble (b mod 16) picking the byte.
            JV control = fresh(), part = fresh();
            for (int j = 0; j < 4; ++j) {
                ins(x86::Inst::kIdMovdqa, vr(control.reg), vr(ir.reg));
                if (j) ins(x86::Inst::kIdPsubb, vr(control.reg), op(cb(0x10101010u * (uint32_t)j)));
                ins(x86::Inst::kIdPaddusb, vr(control.reg), op(cb(0x70707070u)));
                const int target = j ? part.reg : d.reg;
                ins(x86::Inst::kIdMovaps, vr(target), x86::ptr(data, slot * 64 + 16 * j, 16));
                ins(x86::Inst::kIdPshufb, vr(target), vr(control.reg));
                if (j) ins(x86::Inst::kIdPor, vr(d.reg), vr(part.reg));
            }
        }
        return d;
    }

    JV unary(InstId sse, InstId vex, const JV& x) {
        JV d = fresh();
        ins(isa == Isa::Sse41 ? sse : vex, vr(d.reg), op(x));
        return d;
    }
    JV sqrt(const JV& x) { return unary(x86::Inst::kIdSqrtps, x86::Inst::kIdVsqrtps, x); }
    JV cvt_i(const JV& x) { return unary(x86::Inst::kIdCvtps2dq, x86::Inst::kIdVcvtps2dq, x); }
    JV cvt_f(const JV& x) { return unary(x86::Inst::kIdCvtdq2ps, x86::Inst::kIdVcvtdq2ps, x); }
    JV round(const JV& x, int mode) {
        JV d = fresh();
        asmjit::Imm imm(mode | 8);  // 8: no precision exception
        if (isa == Isa::Sse41) ins(x86::Inst::kIdRoundps, vr(d.reg), op(x), imm);
        else if (isa == Isa::Avx2) ins(x86::Inst::kIdVroundps, vr(d.reg), op(x), imm);
        else ins(x86::Inst::kIdVrndscaleps, vr(d.reg), op(x), imm);
        return d;
    }
    JV shift(InstId sse, InstId vex, const JV& x, int n) {
        JV d = fresh();
        if (isa == Isa::Sse41) { move(d.reg, x); ins(sse, vr(d.reg), asmjit::Imm(n)); }
        else { JV s = in_reg(x); ins(vex, vr(d.reg), vr(s.reg), asmjit::Imm(n)); }
        return d;
    }
    JV shl_i(const JV& x, int n) { return shift(x86::Inst::kIdPslld, x86::Inst::kIdVpslld, x, n); }
    JV shr_i(const JV& x, int n) { return shift(x86::Inst::kIdPsrld, x86::Inst::kIdVpsrld, x, n); }
    JV sra_i(const JV& x, int n) { return shift(x86::Inst::kIdPsrad, x86::Inst::kIdVpsrad, x, n); }

    // A temporary that only this handle holds: an operation given it by value (moved in) may
    // write its result there instead of into a fresh register (saves the copy).
    bool stealable(const JV& v) const { return v.m && v.reg >= 0 && pool[v.reg] && refs[v.reg] == 1; }
    // x*y + z, fused on FMA targets; SSE rounds the product first like ScalarMath(fused=false).
    // Operands come by value so that moved-in temporaries can take the result (213, 132 or
    // 231 form); every form computes the same correctly rounded x*y + z.
    JV fma_impl(JV x, JV y, JV z, bool negate) {
        if (isa == Isa::Sse41) {
            JV p = mul(x, y);
            return negate ? sub(z, p) : add(p, z);
        }
        InstId f213 = negate ? x86::Inst::kIdVfnmadd213ps : x86::Inst::kIdVfmadd213ps;
        if (stealable(z)) {                       // z = x*y + z
            invalidate(z.reg);
            JV xr = in_reg(x.reg >= 0 ? x : y);
            const JV& other = x.reg >= 0 ? y : x;
            ins(negate ? x86::Inst::kIdVfnmadd231ps : x86::Inst::kIdVfmadd231ps, vr(z.reg), vr(xr.reg), op(other));
            return z;
        }
        if (!stealable(x) && stealable(y)) { JV t = static_cast<JV&&>(x); x = static_cast<JV&&>(y); y = static_cast<JV&&>(t); }
        if (stealable(x)) {                       // x = x*y + z
            invalidate(x.reg);
            if (y.reg >= 0) ins(f213, vr(x.reg), vr(y.reg), op(z));
            else if (z.reg >= 0) ins(negate ? x86::Inst::kIdVfnmadd132ps : x86::Inst::kIdVfmadd132ps, vr(x.reg), vr(z.reg), op(y));
            else { JV yr = in_reg(y); ins(f213, vr(x.reg), vr(yr.reg), op(z)); }
            return x;
        }
        const JV* r = &y;
        const JV* o = &x;
        if (y.reg < 0) { r = &x; o = &y; }
        JV mr = in_reg(*r);
        JV d = fresh();
        move(d.reg, *o);
        ins(f213, vr(d.reg), vr(mr.reg), op(z));
        return d;
    }
    JV fma(JV x, JV y, JV z) { return fma_impl(static_cast<JV&&>(x), static_cast<JV&&>(y), static_cast<JV&&>(z), false); }
    JV fnma(JV x, JV y, JV z) { return fma_impl(static_cast<JV&&>(x), static_cast<JV&&>(y), static_cast<JV&&>(z), true); }

    JV cmp(const JV& x, const JV& y, int predicate) {
        if (isa != Isa::Avx512)
            return bin3(x86::Inst::kIdCmpps, x86::Inst::kIdVcmpps, x, y, predicate);
        JV xr = in_reg(x);
        JV d = fresh();
        ins(x86::Inst::kIdVcmpps, x86::k2, vr(xr.reg), op(y), asmjit::Imm(predicate));
        ins(x86::Inst::kIdVmovaps, vr(d.reg), op(cb(0xffffffffu)), asmjit::Operand(), asmjit::Operand(), 2, true);
        k2_source = d.reg;
        return d;
    }
    JV bin3(InstId sse, InstId vex, const JV& x, const JV& y, int imm) {
        JV d = fresh();
        if (isa == Isa::Sse41) { move(d.reg, x); ins(sse, vr(d.reg), op(y), asmjit::Imm(imm)); }
        else { JV xr = in_reg(x); ins(vex, vr(d.reg), vr(xr.reg), op(y), asmjit::Imm(imm)); }
        return d;
    }
    // mask ? x : y
    JV blend(const JV& mask, const JV& x, const JV& y) {
        if (isa == Isa::Sse41) {
            JV t = and_(mask, x);
            JV u = andnot(mask, y);
            return or_(t, u);
        }
        JV mr = in_reg(mask);
        JV yr = in_reg(y);
        JV d = fresh();
        if (isa == Isa::Avx2) {
            ins(x86::Inst::kIdVblendvps, vr(d.reg), vr(yr.reg), op(x), vr(mr.reg));
        } else {
            if (mr.reg != k2_source) ins(x86::Inst::kIdVptestmd, x86::k2, vr(mr.reg), vr(mr.reg));
            k2_source = mr.reg;
            ins(x86::Inst::kIdVblendmps, vr(d.reg), vr(yr.reg), op(x), asmjit::Operand(), 2, false);
        }
        return d;
    }
};

// >>x64 loads and stores
// The per-target jitter table: how each lowered kind becomes code. Compute kinds share one
// jitter (eval_op over JitMath); memory kinds depend on the target and the tile.
enum class Tile : uint8_t { Vector, Masked, Scalar };
struct EmitContext;
using Jitter = void (*)(EmitContext& e, uint32_t i, Tile tile);
struct JitterTable { Jitter kinds[7]; };

// What the emit contexts of every target share: the program, the split of the vector
// registers, and which allocatable register holds a live value, from which each step's
// scratch pool follows.
template <class Math>
struct EmitContextBase {
    Math m;
    const Program* p = nullptr;
    uint32_t vector_registers;        // allocatable: [0, allocatable); the rest is scratch
    uint32_t allocatable;
    int32_t holder_until[32] = {};    // per register: last use of the value it holds
    EmitContextBase(uint32_t vectors, uint32_t allocatable_registers)
        : vector_registers(vectors), allocatable(allocatable_registers) {}
    // Scratch pool at instruction i: reserved registers plus allocatable ones whose value is
    // dead; operands stay out because their last use is i.
    void open_pool(uint32_t i) {
        for (uint32_t r = 0; r < 32; ++r) {
            m.pool[r] = r >= allocatable && r < vector_registers;
            if (r < allocatable) m.pool[r] = holder_until[r] < (int32_t)i;
            if (m.pinned >> r & 1) m.pool[r] = false;   // a pinned constant or shared row invariant: never a temporary
        }
    }
    void defined(uint32_t i) {
        const Lir& l = p->code[i];
        if (l.reg >= 0) holder_until[l.reg] = (int32_t)l.last_use;
    }
};

// A kernel keeps up to 11 argument pointers in general registers. Past 11, x86 keeps 10 (r15
// loads the others, "cold", from the frame) and NEON 11 (x0 loads them); see pick_cold_arguments.
inline uint32_t cold_argument_count(Isa isa, uint32_t argument_count) {
    const uint32_t kept = isa == Isa::Neon ? 11 : 10;
    return argument_count > 11 ? argument_count - kept : 0;
}

struct EmitContext : EmitContextBase<JitMath> {
    EmitContext() : EmitContextBase(16, 8) {}
    x86::Gp args[kSnippetMaxArgs];
    int32_t cold_disp[kSnippetMaxArgs];   // a cold argument's pointer: [rsp + disp]; -1 in args[]
    const JitterTable* table = nullptr;
    int32_t streaming_arg = -1;       // output stored with non-temporal stores (vector tiles)
    bool streaming_store(uint32_t arg) const { return (int32_t)arg == streaming_arg; }

    // An argument's pointer in a register: its own, or r15 loaded from the frame (emitted
    // here, so call it right before the instruction that uses it).
    x86::Gp base(uint32_t arg) {
        if (cold_disp[arg] < 0) return args[arg];
        m.a->mov(x86::r15, x86::qword_ptr(x86::rsp, cold_disp[arg]));
        return x86::r15;
    }
    x86::Mem row(uint32_t arg, uint32_t bytes) { return x86::ptr(base(arg), x86::rax, 0, 0, bytes); }
    x86::Mem element0(uint32_t arg) { return x86::ptr(base(arg), 0, 4); }
    x86::Mem slot(int32_t s) const { return x86::ptr(x86::rsp, s * 64 * (int32_t)m.lanes, m.vec_bytes); }

    // The value of instruction v as a JV (spilled values are reloaded into a temporary).
    JV value(uint32_t v) {
        const Lir& l = p->code[v];
        if (l.kind == LirKind::Constant) return m.constant_value((int)l.index);
        if (l.reg >= 0) return JV(&m, l.reg, -1);
        JV t = m.fresh();
        m.ins(m.isa == Isa::Sse41 ? x86::Inst::kIdMovups : x86::Inst::kIdVmovups, m.vr(t.reg), slot(l.slot));
        return t;
    }
    void define(uint32_t i, const JV& v) {
        const Lir& l = p->code[i];
        JV r = m.in_reg(v);
        if (l.reg >= 0) m.move_result(l.reg, r);
        else m.ins(m.isa == Isa::Sse41 ? x86::Inst::kIdMovups : x86::Inst::kIdVmovups, slot(l.slot), m.vr(r.reg));
    }
};

// Memory jitters, one per target and kind. SSE4.1: the tail is a scalar tile (movss);
// AVX2: the tail masks with vmaskmovps (mask rows at [rdi + rcx*4]); AVX-512: with k1.
// Partial tiles have one lane (row groups: one lane at a time); vector tiles may have several
// (JitMath::ins).
namespace Inst = x86::Inst;
inline x86::Xmm xmm_of(int r) { return x86::xmm((uint32_t)r); }
inline void jit_load_sse41(EmitContext& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JV d = e.m.fresh();
    if (l.lane0) e.m.ins(Inst::kIdMovss, xmm_of(d.reg), e.element0(l.index));
    else if (tile == Tile::Scalar) e.m.ins(Inst::kIdMovss, xmm_of(d.reg), e.row(l.index, 4));
    else e.m.ins(Inst::kIdMovups, xmm_of(d.reg), e.row(l.index, 16));
    e.define(i, d);
}
inline void jit_load_avx2(EmitContext& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JV d = e.m.fresh();
    if (l.lane0) {
        e.m.ins(Inst::kIdVmovss, xmm_of(d.reg), e.element0(l.index));
    } else if (tile == Tile::Masked) {
        JV mask = e.m.fresh();
        e.m.a->vmovups(x86::ymm((uint32_t)mask.reg), x86::ptr(x86::rdi, x86::rcx, 2, 0, 32));
        e.m.a->vmaskmovps(x86::ymm((uint32_t)d.reg), x86::ymm((uint32_t)mask.reg), e.row(l.index, 32));
    } else {
        e.m.ins(Inst::kIdVmovups, x86::ymm((uint32_t)d.reg), e.row(l.index, 32));
    }
    e.define(i, d);
}
inline void jit_load_avx512(EmitContext& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JV d = e.m.fresh();
    if (l.lane0) {
        e.m.ins(Inst::kIdVmovss, xmm_of(d.reg), e.element0(l.index));
    } else if (tile == Tile::Masked) {
        const x86::Mem row = e.row(l.index, 64);   // first: a cold pointer's load must not take the mask
        e.m.ins(Inst::kIdVmovups, x86::zmm((uint32_t)d.reg), row, asmjit::Operand(), asmjit::Operand(), 1, true);   // k1
    } else {
        e.m.ins(Inst::kIdVmovups, x86::zmm((uint32_t)d.reg), e.row(l.index, 64));
    }
    e.define(i, d);
}

inline void jit_broadcast_load_sse41(EmitContext& e, uint32_t i, Tile) {
    JV d = e.m.fresh();
    e.m.ins(Inst::kIdMovss, xmm_of(d.reg), e.element0(e.p->code[i].index));
    e.m.ins(Inst::kIdShufps, xmm_of(d.reg), xmm_of(d.reg), asmjit::Imm(0));
    e.define(i, d);
}
inline void jit_broadcast_load_avx(EmitContext& e, uint32_t i, Tile) {  // AVX2 and AVX-512
    JV d = e.m.fresh();
    e.m.ins(Inst::kIdVbroadcastss, e.m.vr(d.reg), e.element0(e.p->code[i].index));
    e.define(i, d);
}

// BroadcastMove only survives lowering when fuse_broadcast_load could not fuse it.
inline void jit_broadcast_move_sse41(EmitContext& e, uint32_t i, Tile) {
    JV s = e.m.in_reg(e.value(e.p->code[i].args[0]));
    JV d = e.m.fresh();
    e.m.ins(Inst::kIdMovaps, xmm_of(d.reg), xmm_of(s.reg));
    e.m.ins(Inst::kIdShufps, xmm_of(d.reg), xmm_of(d.reg), asmjit::Imm(0));
    e.define(i, d);
}
inline void jit_broadcast_move_avx(EmitContext& e, uint32_t i, Tile) {
    JV s = e.m.in_reg(e.value(e.p->code[i].args[0]));
    JV d = e.m.fresh();
    e.m.ins(Inst::kIdVbroadcastss, e.m.vr(d.reg), xmm_of(s.reg));
    e.define(i, d);
}

template <class Context>
inline void jit_constant(Context&, uint32_t, Tile) {}  // lives in the data section

template <class Context>
inline void jit_compute(Context& e, uint32_t i, Tile) {  // every target: eval_op over its JitMath
    const Lir& l = e.p->code[i];
    JitValue<decltype(e.m)> args[3];
    for (int a = 0; a < l.arity; ++a) args[a] = e.value(l.args[a]);
    auto r = eval_op(e.m, l.op, args, l.alpha, l.beta);
    e.define(i, r);
}

inline void jit_store_sse41(EmitContext& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JV v = e.m.in_reg(e.value(l.args[0]));
    if (tile == Tile::Scalar) e.m.ins(Inst::kIdMovss, e.row(l.index, 4), xmm_of(v.reg));
    else e.m.ins(e.streaming_store(l.index) ? Inst::kIdMovntps : Inst::kIdMovups, e.row(l.index, 16), xmm_of(v.reg));
}
inline void jit_store_avx2(EmitContext& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JV v = e.m.in_reg(e.value(l.args[0]));
    if (tile == Tile::Masked) {
        JV mask = e.m.fresh();
        e.m.a->vmovups(x86::ymm((uint32_t)mask.reg), x86::ptr(x86::rdi, x86::rcx, 2, 0, 32));
        e.m.a->vmaskmovps(e.row(l.index, 32), x86::ymm((uint32_t)mask.reg), x86::ymm((uint32_t)v.reg));
    } else {
        e.m.ins(e.streaming_store(l.index) ? Inst::kIdVmovntps : Inst::kIdVmovups, e.row(l.index, 32), x86::ymm((uint32_t)v.reg));
    }
}
inline void jit_store_avx512(EmitContext& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JV v = e.m.in_reg(e.value(l.args[0]));
    if (tile == Tile::Masked) {
        const x86::Mem row = e.row(l.index, 64);   // first: a cold pointer's load must not take the mask
        e.m.ins(Inst::kIdVmovups, row, x86::zmm((uint32_t)v.reg), asmjit::Operand(), asmjit::Operand(), 1, false);   // k1
    } else {
        e.m.ins(e.streaming_store(l.index) ? Inst::kIdVmovntps : Inst::kIdVmovups, e.row(l.index, 64), x86::zmm((uint32_t)v.reg));
    }
}

// A result broadcast along the row: every lane holds the same value; write lane 0 once.
inline void jit_store_scalar_sse41(EmitContext& e, uint32_t i, Tile) {
    JV v = e.m.in_reg(e.value(e.p->code[i].args[0]));
    e.m.a->movss(e.element0(e.p->code[i].index), x86::xmm((uint32_t)v.reg));
}
inline void jit_store_scalar_avx(EmitContext& e, uint32_t i, Tile) {
    JV v = e.m.in_reg(e.value(e.p->code[i].args[0]));
    e.m.a->vmovss(e.element0(e.p->code[i].index), x86::xmm((uint32_t)v.reg));
}

inline const JitterTable* jitter_table(Isa isa) {
    // Indexed by LirKind: Load, BroadcastMove, BroadcastLoad, Constant, Compute, Store, StoreScalar.
    static const JitterTable sse41 = {{jit_load_sse41, jit_broadcast_move_sse41, jit_broadcast_load_sse41,
                                       jit_constant<EmitContext>, jit_compute<EmitContext>, jit_store_sse41, jit_store_scalar_sse41}};
    static const JitterTable avx2 = {{jit_load_avx2, jit_broadcast_move_avx, jit_broadcast_load_avx,
                                      jit_constant<EmitContext>, jit_compute<EmitContext>, jit_store_avx2, jit_store_scalar_avx}};
    static const JitterTable avx512 = {{jit_load_avx512, jit_broadcast_move_avx, jit_broadcast_load_avx,
                                        jit_constant<EmitContext>, jit_compute<EmitContext>, jit_store_avx512, jit_store_scalar_avx}};
    return isa == Isa::Sse41 ? &sse41 : isa == Isa::Avx2 ? &avx2 : &avx512;
}

template <class Context>
inline void emit_tile(Context& e, Tile tile) {
    e.m.k2_source = -1;                          // a tile starts at a label
    for (int r = 0; r < 32; ++r) e.holder_until[r] = -1;
    for (uint32_t i = 0; i < e.p->count; ++i)  // loaded at the start of the row, busy all tile
        if (e.p->code[i].hoisted) e.holder_until[e.p->code[i].reg] = INT32_MAX;
    for (uint32_t i = 0; i < e.p->count; ++i) {
        if (e.p->code[i].hoisted) continue;
        e.open_pool(i);
        e.table->kinds[(int)e.p->code[i].kind](e, i, tile);
        e.defined(i);
    }
}

// The hoisted broadcasts of a row, emitted before its first tile.
template <class Context>
inline void emit_row_invariants(Context& e) {
    for (int r = 0; r < 32; ++r) e.holder_until[r] = -1;
    for (uint32_t i = 0; i < e.p->count; ++i) {
        if (!e.p->code[i].hoisted) continue;
        e.open_pool(i);
        e.table->kinds[(int)LirKind::BroadcastLoad](e, i, Tile::Vector);
        e.holder_until[e.p->code[i].reg] = INT32_MAX;
    }
}

// >>x64 loop blocks
// Argument pointers past what a kernel's general registers hold are "cold": kept in its frame
// and loaded at each use. Cold go first the arguments only the row invariants read (once per
// row), then the last ones. Returns how many.
inline uint32_t pick_cold_arguments(const Program* p, uint32_t argument_count, Isa isa, bool* cold) {
    for (uint32_t a = 0; a < kSnippetMaxArgs; ++a) cold[a] = false;
    const uint32_t count = cold_argument_count(isa, argument_count);
    bool per_tile[kSnippetMaxArgs] = {};
    for (uint32_t i = 0; i < p->count; ++i) {
        const Lir& l = p->code[i];
        const bool memory = l.kind == LirKind::Load || l.kind == LirKind::BroadcastLoad || l.kind == LirKind::Store ||
                            l.kind == LirKind::StoreScalar;
        if (memory && !l.hoisted) per_tile[l.index] = true;
    }
    uint32_t need = count;
    for (int pass = 0; pass < 2; ++pass)
        for (uint32_t a = argument_count; a-- > 0 && need;)
            if (!cold[a] && (pass == 1 || !per_tile[a])) { cold[a] = true; --need; }
    return count;
}

// x86: up to 11 pointers in r8-r11, rdx, rbx, rbp, r12-r15; with more, r15 is the scratch
// register of the cold ones, whose slots start at [rsp + cold_base].
inline void assign_arguments_x86(EmitContext& e, const bool* cold, int32_t cold_base) {
    const x86::Gp gp[11] = {x86::r8, x86::r9, x86::r10, x86::r11, x86::rdx, x86::rbx, x86::rbp, x86::r12, x86::r13, x86::r14, x86::r15};
    uint32_t next = 0, cold_count = 0;
    for (uint32_t a = 0; a < kSnippetMaxArgs; ++a) {
        e.cold_disp[a] = cold[a] ? cold_base + 8 * (int32_t)cold_count++ : -1;
        e.args[a] = cold[a] ? x86::r15 : gp[next < 10 ? next++ : 10];
    }
}

// Page blocks of a compute-bound body (one with a transcendental op) prefetch their next
// block: with each tile, every lane asks for the line of each input one block (lanes pages)
// ahead. The hardware prefetchers stop at each 4 KiB page, so without it every block starts
// on lanes cold pages, and a loop busy with its FP chains keeps too few misses in flight to
// hide them. Memory-bound bodies gain nothing and go without; the distance (one block) and
// the hint (prefetcht0) are tuned with bench/snippets. Cold pointers get none.
inline bool prefetches_next_block(const Program* p) {
    for (uint32_t i = 0; i < p->count; ++i)
        if (p->code[i].kind == LirKind::Compute && transcendental_op(p->code[i].op)) return true;
    return false;
}
inline void emit_next_block_prefetches(EmitContext& e, uint32_t lanes) {
    if (!prefetches_next_block(e.p)) return;
    x86::Assembler& a = *e.m.a;
    bool done[kSnippetMaxArgs] = {};
    for (uint32_t i = 0; i < e.p->count; ++i) {
        const Lir& l = e.p->code[i];
        if (l.kind != LirKind::Load || l.hoisted || l.lane0 || e.cold_disp[l.index] >= 0 || done[l.index]) continue;
        done[l.index] = true;
        for (uint32_t k = 0; k < lanes; ++k)
            a.prefetcht0(x86::ptr(e.args[l.index], x86::rax, 0, (int32_t)((lanes + k) * 4096)));
    }
}

// Whether emit_kernel skews the lanes (below): 3 or 4 lanes, and a tile that emits only
// through ins().
inline bool software_pipelined(const Program* p, uint32_t lanes, uint32_t cold_count) {
    if (lanes < 3 || cold_count) return false;
    for (uint32_t i = 0; i < p->count; ++i)
        if (p->code[i].kind == LirKind::StoreScalar) return false;   // written by a->vmovss
    return true;
}

// Vector tiles of 3 or 4 lanes as a software pipeline: lane k runs k/lanes of a tile ahead of
// lane 0, so each loop iteration finishes this tile's later steps in some lanes while it starts
// the next tile's first steps in others. Each lane's instructions keep their order (same
// results); only the order they reach the scheduler changes, which hides more of the long
// approximation chains than lanes in lockstep. 2 lanes gain nothing from the skew and stay in
// lockstep (tuned with bench/snippets).
// Emitted at `loop` with a whole tile left: a prologue starts the skewed lanes on the tile at
// rax, the loop runs while a next tile exists, the epilogue finishes the last one, then back
// to `loop`. The tile is recorded first (JitMath::recording), so it may only emit through
// ins(): no cold argument and no scalar store (software_pipelined() says when); false if it
// did anyway or the recording ran out of memory (then e.m.failed is set, and emit_kernel
// assembles again with 2 lanes in lockstep). The code of the vector tiles doubles, and
// compiling takes longer.
// With page_tiles (page blocks and row groups, below), the lanes walk pages or rows: the next
// tile is one vector further, ecx counts the tiles (page_tiles of them, or kTilesInEcx: as
// many as ecx holds, at least 1), and the function returns after the last tile.
constexpr uint32_t kTilesInEcx = ~0u;
inline bool emit_pipelined_tiles(EmitContext& e, uint32_t w, uint32_t lanes, asmjit::Label loop, uint32_t page_tiles = 0) {
    x86::Assembler& a = *e.m.a;
    const size_t before = a.offset();
    e.m.recorded.size = 0;
    e.m.last = JitMath::Emitted{};
    e.m.recording = true;
    e.m.lanes = lanes;
    emit_tile(e, Tile::Vector);
    e.m.lanes = 1;
    e.m.recording = false;
    e.m.last = JitMath::Emitted{};
    if (a.offset() != before) e.m.failed = true;
    if (e.m.failed) return false;
    const uint32_t n = e.m.recorded.size;
    const int32_t tile_bytes = (int32_t)(page_tiles ? w * 4 : w * lanes * 4);
    uint32_t skew[4] = {};
    for (uint32_t k = 0; k < lanes; ++k) skew[k] = k * n / lanes;
    auto emit_steps = [&](bool started, bool next) {   // the groups of each lane, in lockstep by step
        for (uint32_t s = 0; s < n; ++s)
            for (uint32_t k = 0; k < lanes; ++k) {
                const uint32_t j = s + skew[k];
                if (!started) {                  // prologue: the skewed lanes' first steps
                    if (s < skew[k]) e.m.replay(e.m.recorded[s], k, 0);
                } else if (j < n) {
                    e.m.replay(e.m.recorded[j], k, 0);
                } else if (next) {
                    e.m.replay(e.m.recorded[j - n], k, tile_bytes);
                }
            }
    };
    asmjit::Label steady = a.newLabel(), last = a.newLabel();
    emit_steps(false, false);
    if (page_tiles) {
        if (page_tiles == kTilesInEcx) {
            a.dec(x86::ecx);
            a.jz(last);
        } else {
            a.mov(x86::ecx, page_tiles - 1);
        }
        a.bind(steady);
        emit_steps(true, true);
        if (page_tiles != kTilesInEcx) emit_next_block_prefetches(e, lanes);
        a.add(x86::rax, tile_bytes);
        a.dec(x86::ecx);
        a.jnz(steady);
        a.bind(last);
        emit_steps(true, false);
        a.add(x86::rax, tile_bytes);
        return true;
    }
    a.bind(steady);
    a.cmp(x86::rsi, 2 * w * lanes);
    a.jb(last);
    emit_steps(true, true);
    a.add(x86::rax, tile_bytes);
    a.sub(x86::rsi, w * lanes);
    a.jmp(steady);
    a.bind(last);
    emit_steps(true, false);
    a.add(x86::rax, tile_bytes);
    a.sub(x86::rsi, w * lanes);
    a.jmp(loop);
    return true;
}

// Page blocks (SnippetTuning::page_lanes): while the row has a 4 KiB page per lane left,
// lane k walks page k of the block, tile t taking vector t of each page, so the loop moves
// `lanes` streams 4 KiB apart instead of one: several streams keep more misses in flight
// than one, when they take turns by vector (whole pages in turn do not gain; bench/snippets).
// Emitted at `loop`: after a block rax has passed all its pages, then back to `loop`.
// ecx counts the tiles (vector tiles never use it).
inline void emit_page_blocks(EmitContext& e, uint32_t w, uint32_t lanes, asmjit::Label loop, bool pipelined) {
    x86::Assembler& a = *e.m.a;
    constexpr uint32_t kPageBytes = 4096;
    const uint32_t page_floats = kPageBytes / 4, tiles = kPageBytes / (w * 4);
    asmjit::Label skip = a.newLabel();
    a.cmp(x86::rsi, page_floats * lanes);
    a.jb(skip);
    e.m.lane_stride = kPageBytes;
    if (!(pipelined && emit_pipelined_tiles(e, w, lanes, loop, tiles))) {   // (a failed recording sets e.m.failed)
        asmjit::Label tile = a.newLabel();
        a.mov(x86::ecx, tiles);
        a.bind(tile);
        e.m.lanes = lanes;
        emit_tile(e, Tile::Vector);
        e.m.lanes = 1;
        emit_next_block_prefetches(e, lanes);
        a.add(x86::rax, w * 4);
        a.dec(x86::ecx);
        a.jnz(tile);
    }
    e.m.lane_stride = 0;
    a.add(x86::rax, (lanes - 1) * kPageBytes);
    a.sub(x86::rsi, page_floats * lanes);
    a.jmp(loop);
    a.bind(skip);
}

// The rows a kernel is compiled for: n floats a row, rows a call, each argument's row stride
// in bytes (what run() passes). Row groups (below) need them.
struct RowShape {
    int64_t n = 0, rows = 0;
    const int64_t* strides = nullptr;
};

// Row groups (SnippetTuning::page_lanes, for rows shorter than a block of pages): lane k
// walks rows k*kRowGroup to k*kRowGroup + kRowGroup - 1 of a group of lanes * kRowGroup rows,
// all lanes at the same column, each with its own row values, so the loop moves `lanes`
// streams; lanes rows apart move more than lanes on neighbouring rows (bench/snippets). 16
// rows of any stride keep every lane's output on the vector alignment lane 0 peels to
// (16 * 4 bytes).
constexpr uint32_t kRowGroup = 16;
inline bool row_groups_apply(const Program* p, const RowShape* shape, Isa isa, uint32_t lanes, uint32_t cold_count,
                             uint32_t argument_count) {
    if (!shape || isa != Isa::Avx512 || lanes < 2 || cold_count) return false;   // cold pointers share r15
    if (shape->rows < (int64_t)(lanes * kRowGroup) || shape->n < 16 || shape->n >= (int64_t)lanes * 1024) return false;
    for (uint32_t i = 0; i < p->count; ++i)
        if (p->code[i].kind == LirKind::StoreScalar) return false;   // written once, by lane 0
    for (uint32_t a = 0; a < argument_count; ++a) {                  // the last lane's offset is a displacement
        const int64_t gap = (int64_t)(lanes - 1) * kRowGroup * shape->strides[a];
        if (gap > INT32_MAX / 2 || gap < INT32_MIN / 2) return false;
    }
    return true;
}

// Whether every row stride fits an instruction's immediate.
inline bool strides_fit_immediates(const RowShape* shape, uint32_t argument_count) {
    if (!shape) return false;
    for (uint32_t a = 0; a < argument_count; ++a)
        if (shape->strides[a] > INT32_MAX || shape->strides[a] < INT32_MIN) return false;
    return true;
}

// Next row: every pointer moves by its row stride (0 for a tensor broadcast over rows): by
// the compiled shape's strides as immediates (the cache key holds them) when they fit, else
// from the table run() passes. The immediates save a load per pointer and row, which counts
// on short rows (bench/snippets' short rows).
inline void emit_next_row(EmitContext& e, uint32_t argument_count, const RowShape* shape, const x86::Mem& saved_strides) {
    x86::Assembler& a = *e.m.a;
    if (strides_fit_immediates(shape, argument_count)) {
        for (uint32_t i = 0; i < argument_count; ++i) {
            const int32_t stride = (int32_t)shape->strides[i];
            if (!stride) continue;
            if (e.cold_disp[i] < 0) a.add(e.args[i], stride);
            else a.add(x86::qword_ptr(x86::rsp, e.cold_disp[i]), stride);
        }
        return;
    }
    a.mov(x86::rdi, saved_strides);
    for (uint32_t i = 0; i < argument_count; ++i) {
        if (e.cold_disp[i] < 0) {
            a.add(e.args[i], x86::qword_ptr(x86::rdi, (int32_t)(i * 8)));
        } else {
            a.mov(x86::r15, x86::qword_ptr(x86::rdi, (int32_t)(i * 8)));
            a.add(x86::qword_ptr(x86::rsp, e.cold_disp[i]), x86::r15);
        }
    }
}

// Alignment peel: a partial first tile up to the first output's vector boundary, so the
// stores of the main loop never split cache lines (inputs follow when they share the
// alignment, as buffers of a memory plan do). Short rows peel only where split accesses
// cost more than the extra partial tile (and the whole tiles it breaks up), which depends
// on the core: from 36 floats on Intel cores with vectors of 8 or 16, else from 80 (tuned
// with bench/snippets' short rows). Always with non-temporal stores. rsi holds the row's
// floats; jumps to `partial` with rcx floats, or on to `loop`.
inline void emit_alignment_peel(EmitContext& e, int32_t aligned_arg, bool streaming, uint32_t w, asmjit::Label loop,
                                asmjit::Label partial) {
    x86::Assembler& a = *e.m.a;
    if (aligned_arg < 0 || w == 1) return;
    if (!streaming) {
        const uint32_t minimum_floats = w >= 8 && intel_cpu() ? 36 : 80;
        a.cmp(x86::rsi, minimum_floats);
        a.jb(loop);
    }
    a.mov(x86::rcx, e.base((uint32_t)aligned_arg));
    a.neg(x86::rcx);
    a.and_(x86::rcx, w * 4 - 1);
    a.shr(x86::rcx, 2);               // floats to the boundary (0 when aligned)
    a.jz(loop);
    a.cmp(x86::rcx, x86::rsi);
    a.cmova(x86::rcx, x86::rsi);      // at most the row
    a.jmp(partial);
}

// Short rows: rows of at most kShortRowVectors vectors and kShortRowFloats floats (which no
// core peels: the peel starts at 36 floats at the earliest), with ordinary stores (so
// neither page lanes nor row groups), walked as straight code: the row's whole tiles and
// its partial one, without the loop's counting and branches, the partial tile's mask set
// once per call (the cache key holds the row length). The kernel takes this path when a
// call's rows have the compiled length (run() in column parts passes shorter ones, which
// take the loop). Tuned with bench/snippets' short rows.
constexpr uint32_t kShortRowVectors = 4, kShortRowFloats = 35;
inline bool short_rows_apply(const RowShape* shape, Isa isa, bool streaming, bool page_lanes) {
    if (!shape || streaming || page_lanes || !x86_isa(isa)) return false;
    const uint32_t w = isa_vector_floats(isa);
    return shape->n >= 1 && shape->n <= (int64_t)(kShortRowVectors * w) && shape->n <= (int64_t)kShortRowFloats;
}

// The short rows' code (above), before the row label: rows of another length go on to
// `general`, the loop; after the last row, on to `finish`.
inline void emit_short_rows(EmitContext& e, const RowShape& shape, uint32_t lanes, bool share_invariants, uint32_t argument_count,
                            const x86::Mem& saved_rows, const x86::Mem& saved_strides, asmjit::Label general, asmjit::Label finish,
                            asmjit::Label mask_table) {
    x86::Assembler& a = *e.m.a;
    const Isa isa = e.m.isa;
    const uint32_t w = isa_vector_floats(isa), n = (uint32_t)shape.n, tail = n % w;
    asmjit::Label row = a.newLabel();
    a.cmp(x86::rsi, n);
    a.jne(general);
    a.mov(x86::rsi, saved_rows);          // rows left
    if (tail && isa == Isa::Avx512) {
        a.mov(x86::edi, (1u << tail) - 1);
        a.kmovw(x86::k1, x86::edi);       // only the partial tile reads k1
    }
    a.bind(row);
    e.m.lanes = share_invariants ? 1 : lanes;
    emit_row_invariants(e);
    a.xor_(x86::eax, x86::eax);
    for (uint32_t left = n; left >= w;) {  // whole tiles, `lanes` vectors at once while they fill
        const uint32_t vectors = left >= w * lanes ? lanes : 1;
        e.m.lanes = vectors;
        emit_tile(e, Tile::Vector);
        left -= w * vectors;
        if (left) a.add(x86::rax, w * vectors * 4);
    }
    e.m.lanes = 1;
    if (tail && isa == Isa::Avx512) {
        emit_tile(e, Tile::Masked);
    } else if (tail && isa == Isa::Avx2) {
        a.mov(x86::ecx, 8 - tail);        // the mask starts at entry 8 - k of {-1 x8, 0 x8}
        a.lea(x86::rdi, x86::ptr(mask_table));
        emit_tile(e, Tile::Masked);
    } else {
        for (uint32_t k = 0; k < tail; ++k) {
            emit_tile(e, Tile::Scalar);
            if (k + 1 < tail) a.add(x86::rax, 4);
        }
    }
    emit_next_row(e, argument_count, &shape, saved_strides);
    a.dec(x86::rsi);
    a.jnz(row);
    a.jmp(finish);
}

// The row groups' code, entered at the row label while `lanes * kRowGroup` rows are left:
// kRowGroup rows with every lane's row values, vector tiles of one vector a lane (pipelined
// as in emit_pipelined_tiles, or in lockstep), then the row's partial tiles lane by lane
// (lane k's mask in k(1 + k), clear of its compare mask k(2 + k)); then the pointers skip the
// other lanes' rows, and back to `row` or on to `finish`. AVX-512 only.
inline void emit_row_groups(EmitContext& e, const RowShape& shape, uint32_t lanes, uint32_t argument_count, int32_t aligned_arg,
                            bool streaming, bool pipelined, const x86::Mem& saved_n, const x86::Mem& saved_rows,
                            const x86::Mem& saved_strides, const x86::Mem& saved_group, asmjit::Label row, asmjit::Label finish) {
    x86::Assembler& a = *e.m.a;
    constexpr uint32_t w = 16;
    for (uint32_t i = 0; i < argument_count; ++i)
        e.m.row_lane_bytes[e.args[i].id() & 15] = (int32_t)(kRowGroup * shape.strides[i]);
    asmjit::Label group_row = a.newLabel(), loop = a.newLabel(), rest = a.newLabel(), partial = a.newLabel(),
                  done = a.newLabel();
    e.m.row_groups = true;
    a.mov(saved_group, kRowGroup);
    a.bind(group_row);
    e.m.lanes = lanes;
    emit_row_invariants(e);
    e.m.lanes = 1;
    a.mov(x86::rsi, saved_n);
    a.xor_(x86::eax, x86::eax);
    emit_alignment_peel(e, aligned_arg, streaming, w, loop, partial);
    a.bind(loop);
    a.cmp(x86::rsi, w);
    a.jb(rest);
    if (pipelined) {                      // ecx: the whole tiles (lockstep tiles loop back here instead)
        a.mov(x86::rcx, x86::rsi);
        a.shr(x86::rcx, 4);
    }
    if (pipelined && emit_pipelined_tiles(e, w, lanes, loop, kTilesInEcx)) {   // (a failed recording sets e.m.failed)
        a.and_(x86::rsi, w - 1);
    } else {
        e.m.lanes = lanes;
        emit_tile(e, Tile::Vector);
        e.m.lanes = 1;
        a.add(x86::rax, w * 4);
        a.sub(x86::rsi, w);
        a.jmp(loop);
    }
    a.bind(rest);
    a.test(x86::rsi, x86::rsi);
    a.jz(done);
    a.mov(x86::ecx, w);
    a.cmp(x86::rsi, x86::rcx);
    a.cmovb(x86::rcx, x86::rsi);
    a.bind(partial);
    a.mov(x86::edi, 1);
    a.shl(x86::edi, x86::cl);
    a.dec(x86::edi);
    for (uint32_t k = 0; k < lanes; ++k) {
        a.kmovw(x86::KReg(1 + k), x86::edi);
        e.m.first_lane = k;
        emit_tile(e, Tile::Masked);
    }
    e.m.first_lane = 0;
    a.lea(x86::rax, x86::ptr(x86::rax, x86::rcx, 2));
    a.sub(x86::rsi, x86::rcx);
    a.jmp(loop);
    a.bind(done);
    emit_next_row(e, argument_count, &shape, saved_strides);
    a.dec(saved_group);
    a.jnz(group_row);
    for (uint32_t i = 0; i < argument_count; ++i) {   // past the other lanes' rows
        const int64_t gap = (int64_t)(lanes - 1) * kRowGroup * shape.strides[i];
        if (gap) a.add(e.args[i], (int32_t)gap);
    }
    e.m.row_groups = false;
    a.sub(saved_rows, lanes * kRowGroup);
    a.jnz(row);
    a.jmp(finish);
}

// >>x64 kernel
// The in-place twin of a streaming kernel: a copy whose non-temporal stores are ordinary
// aligned ones. movntps and movaps (store) differ in one opcode byte (0F 2B, 0F 29) behind
// the same REX, VEX or EVEX prefix, so the copy keeps every length and offset; its data
// section moves with it, and the kernels use no absolute address, so their RIP-relative
// operands stay right; a second emission would double the compile time. nullptr
// when out of memory or when a listed store is not a movntps (a bug: run() then takes the
// streaming kernel in place too).
inline void* patched_twin(const void* kernel, size_t size, size_t text_offset, const uint32_t* offsets, uint32_t count) {
    void* rx = nullptr;
    void* rw = nullptr;
    if (jit_runtime().allocator()->alloc(&rx, &rw, size) != asmjit::kErrorOk) return nullptr;
    bool patched = true;
    {
        asmjit::VirtMem::ProtectJitReadWriteScope writable(rx, size);
        std::memcpy(rw, kernel, size);
        for (uint32_t i = 0; i < count && patched; ++i) {
            const size_t at = text_offset + offsets[i];
            if (at + 5 > size) { patched = false; break; }                       // no store is that short
            unsigned char* b = static_cast<unsigned char*>(rw) + at;
            const bool vex = b[0] == 0x62 || b[0] == 0xc5 || b[0] == 0xc4;        // EVEX, VEX (2 or 3 bytes)
            const size_t opcode = b[0] == 0x62 ? 4 : b[0] == 0xc5 ? 2 : b[0] == 0xc4 ? 3 : (b[0] & 0xf0) == 0x40 ? 2 : 1;
            patched = (vex || b[opcode - 1] == 0x0f) && b[opcode] == 0x2b;
            if (patched) b[opcode] = 0x29;
        }
    }
    if (patched) return rx;
    jit_runtime().release(rx);
    return nullptr;
}

// Kernel: void kernel(float* const* args, size_t n, size_t rows, const int64_t* row_strides).
// For each of `rows` rows (rows >= 1): loads the row-invariant broadcasts, walks n floats
// (n >= 1) as a partial tile up to the first output's vector alignment, vector tiles of
// `lanes` vectors each (lanes in lockstep, see JitMath::ins), then partial tiles for the rest
// (masked on AVX-512/AVX2, scalar loops on SSE4.1; one block of code serves the peel and the
// tail), then advances every argument pointer by its row stride in bytes. With `streaming`,
// the vector tiles store the first output (the aligned one) with non-temporal stores, and
// `twin`, when given, receives the in-place twin (patched_twin; nullptr if none). The data
// section follows the code.
inline Status emit_kernel(Program* p, Isa isa, uint32_t allocatable, uint32_t lanes, bool streaming,
                          uint32_t argument_count, bool emit_only, void** kernel, uint32_t* code_size,
                          uint32_t* scratch_peak, char* error, size_t error_size, void* zone = nullptr, size_t zone_bytes = 0,
                          bool pin_constants = true, uint32_t max_lanes = 0, uint32_t* lanes_out = nullptr,
                          Arena* arena = nullptr, bool beyond_caches = false, uint32_t* pinned_out = nullptr,
                          uint32_t* shared_out = nullptr, bool page_lanes = false, const RowShape* row_shape = nullptr,
                          bool* row_groups_out = nullptr, void** twin = nullptr) {
    using namespace asmjit;
    // Counting pass: one vector tile assembled aside gives the registers a lane needs and the
    // memory-operand uses of each constant; the most used constants then get the vector
    // registers no lane touches (on AVX-512 with two lanes: [need, 16) and [16 + need, 32)).
    int16_t pin_slot[32];
    uint32_t pin_count = 0, lane_registers = (isa == Isa::Avx512 ? 32 : 16) / lanes;
    bool share_invariants = false;
    bool cold[kSnippetMaxArgs];
    const uint32_t cold_count = pick_cold_arguments(p, argument_count, isa, cold);
    if (pin_constants) {
        // The counting pass's zone uses the same scratch block as the final pass's (below):
        // the two never live at once, and a malloc'd block of its own cost a page fault
        // on the first compiles of a process.
        Support::Temporary counting_zone(zone, zone_bytes);
        CodeHolder counting(zone ? &counting_zone : nullptr);
        counting.init(Environment(Arch::kX64));
        ErrorRecorder counting_recorder;
        counting.setErrorHandler(&counting_recorder);
        x86::Assembler ca(&counting);
        EmitContext c;
        c.p = p;
        c.table = jitter_table(isa);
        c.vector_registers = lane_registers;
        c.allocatable = allocatable;
        c.m.a = &ca;
        c.m.isa = isa;
        c.m.vec_bytes = isa_vector_floats(isa) * 4;
        c.m.bank = lane_registers;
        c.m.data = ca.newLabel();
        c.m.constants = p->constants;
        c.m.constant_kinds = p->constant_kinds;
        c.m.constant_count = &p->constant_count;
        uint16_t uses[256] = {};
        c.m.const_uses = uses;
        assign_arguments_x86(c, cold, 0);
        c.m.lanes = 1;
        emit_tile(c, Tile::Vector);
        int top = c.m.max_reg;                            // scratch, and the values' registers
        for (uint32_t i = 0; i < p->count; ++i)
            if (p->code[i].reg > top) top = p->code[i].reg;
        uint32_t need = (uint32_t)(top + 1);
        // More lanes when a lane needs few registers: the approximations are latency-bound,
        // and each lane is one more independent chain in the FP scheduler's window, which
        // matters more than pinned constants. Beyond the caches, a third lane only when it
        // leaves 8 registers for pinned constants; not that rule for row groups, whose lanes
        // each hold their own row values and gain from a third lane anyway (bench/snippets).
        if (!c.m.failed && lanes == 2 && max_lanes > 2) {
            uint32_t more = max_lanes;
            auto grouped = [&](uint32_t l) { return page_lanes && row_groups_apply(p, row_shape, isa, l, cold_count, argument_count); };
            while (more > 2 && (need > 32 / more || (beyond_caches && need * more + 8 > 32 && !grouped(more)))) --more;
            if (more > 2) {
                lanes = more;
                lane_registers = 32 / lanes;
            }
        }
        if (!c.m.failed && need < lane_registers) {
            uint32_t free_registers = (isa == Isa::Avx512 ? 32 : 16) - need * lanes;
            while (pin_count < free_registers) {
                const int best = most_used_constant(uses);
                if (best < 0) break;
                pin_slot[pin_count++] = (int16_t)best;
                uses[best] = 0;
            }
            // With lanes, each lane would load its own copy of every row invariant at each row;
            // one shared copy each, in registers no lane uses, saves lanes - 1 loads per row.
            uint32_t hoisted = 0;
            for (uint32_t i = 0; i < p->count; ++i) hoisted += p->code[i].hoisted;
            // (Not with row groups: there each lane has its own rows.)
            share_invariants = lanes > 1 && hoisted && hoisted <= free_registers - pin_count &&
                               !(page_lanes && row_groups_apply(p, row_shape, isa, lanes, cold_count, argument_count));
            if (pin_count || share_invariants) lane_registers = need;
        }
    }
    // asmjit's zone (labels, sections, fixups) starts in `zone`, a block of the caller's
    // scratch arena (TESSEL_MALLOC); only what outgrows it, and the code buffer, use malloc.
    Support::Temporary temporary(zone, zone_bytes);
    CodeHolder code(zone ? &temporary : nullptr);
    ErrorRecorder recorder;
    code.init(emit_only ? Environment(Arch::kX64) : jit_runtime().environment());
    code.setErrorHandler(&recorder);
    x86::Assembler a(&code);
    if (emit_only) a.addDiagnosticOptions(DiagnosticOptions::kValidateAssembler);

    EmitContext e;
    e.p = p;
    e.table = jitter_table(isa);
    e.vector_registers = lane_registers;
    e.allocatable = allocatable < lane_registers ? allocatable : lane_registers;  // pool stays off pinned ones
    e.m.a = &a;
    e.m.isa = isa;
    e.m.vec_bytes = isa_vector_floats(isa) * 4;
    e.m.bank = (isa == Isa::Avx512 ? 32 : 16) / lanes;
    e.m.data = a.newLabel();
    e.m.constants = p->constants;
    e.m.constant_kinds = p->constant_kinds;
    e.m.constant_count = &p->constant_count;
    const x86::Gp saved[] = {x86::rbx, x86::rbp, x86::r12, x86::r13, x86::r14, x86::r15};
    for (const x86::Gp& r : saved) a.push(r);
    // Frame: spill slots (one per lane), then n, rows, the row-stride table (the argument
    // registers are needed for tensor pointers) and the rows left in a row group, then the
    // cold arguments' pointers.
    uint32_t spill_bytes = p->spill_slots * 64 * lanes, frame = spill_bytes + 32 + (cold_count * 8 + 15) / 16 * 16;
    assign_arguments_x86(e, cold, (int32_t)spill_bytes + 32);
    a.sub(x86::rsp, frame);
    x86::Mem saved_n = x86::qword_ptr(x86::rsp, (int32_t)spill_bytes);
    x86::Mem saved_rows = x86::qword_ptr(x86::rsp, (int32_t)spill_bytes + 8);
    x86::Mem saved_strides = x86::qword_ptr(x86::rsp, (int32_t)spill_bytes + 16);
    a.mov(saved_n, x86::rsi);
    a.mov(saved_rows, x86::rdx);
    a.mov(saved_strides, x86::rcx);
    for (uint32_t i = 0; i < argument_count; ++i) {
        if (e.cold_disp[i] < 0) {
            a.mov(e.args[i], x86::ptr(x86::rdi, (int32_t)(i * 8)));
        } else {
            a.mov(x86::r15, x86::ptr(x86::rdi, (int32_t)(i * 8)));
            a.mov(x86::qword_ptr(x86::rsp, e.cold_disp[i]), x86::r15);
        }
    }
    uint32_t r = 0;   // pinned constants, then shared row invariants: in the registers no lane uses
    for (uint32_t k = 0; k < pin_count; ++k, ++r) {
        while (r / e.m.bank < lanes && r % e.m.bank < lane_registers) ++r;
        e.m.const_reg[pin_slot[k]] = (int16_t)r;
        e.m.pinned |= 1u << r;
        a.emit(isa == Isa::Sse41 ? x86::Inst::kIdMovaps : x86::Inst::kIdVmovaps, e.m.vr((int)r), e.m.cm(pin_slot[k]));
    }
    uint32_t shared_index[32], shared_count = 0;   // the program's own registers come back below
    int16_t shared_reg[32];
    for (uint32_t i = 0; share_invariants && i < p->count; ++i) {
        if (!p->code[i].hoisted) continue;
        while (r / e.m.bank < lanes && r % e.m.bank < lane_registers) ++r;
        shared_index[shared_count] = i;
        shared_reg[shared_count++] = p->code[i].reg;
        p->code[i].reg = (int16_t)r;   // lane 0's id; in_lane keeps a pinned register for every lane
        e.m.pinned |= 1u << r++;
    }
    if (shared_out) *shared_out = shared_count;
    uint32_t w = isa_vector_floats(isa);
    Label row = a.newLabel(), loop = a.newLabel(), rest = a.newLabel(), partial = a.newLabel(), done = a.newLabel(),
          mask_table = a.newLabel(), groups = a.newLabel(), finish = a.newLabel();
    const bool row_groups = page_lanes && row_groups_apply(p, row_shape, isa, lanes, cold_count, argument_count);
    if (row_groups_out) *row_groups_out = row_groups;
    if (short_rows_apply(row_shape, isa, streaming, page_lanes))
        emit_short_rows(e, *row_shape, lanes, share_invariants, argument_count, saved_rows, saved_strides, row, finish, mask_table);
    a.bind(row);
    if (row_groups) {
        a.cmp(saved_rows, lanes * kRowGroup);
        a.jae(groups);
    }
    e.m.lanes = share_invariants ? 1 : lanes;   // the shared copy, or every lane's own
    emit_row_invariants(e);
    e.m.lanes = 1;
    a.mov(x86::rsi, saved_n);
    a.xor_(x86::eax, x86::eax);
    int32_t aligned_arg = -1;
    for (uint32_t i = 0; i < p->count && aligned_arg < 0; ++i)
        if (p->code[i].kind == LirKind::Store) aligned_arg = (int32_t)p->code[i].index;
    e.streaming_arg = streaming ? aligned_arg : -1;
    emit_alignment_peel(e, aligned_arg, streaming, w, loop, partial);
    a.bind(loop);                         // whole tiles of `lanes` vectors
    e.m.recorded.arena = arena;
    if (page_lanes && isa == Isa::Avx512 && lanes >= 2)
        emit_page_blocks(e, w, lanes, loop, arena && software_pipelined(p, lanes, cold_count));
    a.cmp(x86::rsi, w * lanes);
    a.jb(rest);
    if (!(arena && software_pipelined(p, lanes, cold_count) && emit_pipelined_tiles(e, w, lanes, loop))) {
        e.m.lanes = lanes;                // lanes in lockstep
        emit_tile(e, Tile::Vector);
        e.m.lanes = 1;
        a.add(x86::rax, w * lanes * 4);
        a.sub(x86::rsi, w * lanes);
        a.jmp(loop);
    }
    a.bind(rest);                         // fewer than `lanes` vectors left
    a.test(x86::rsi, x86::rsi);
    a.jz(done);
    a.mov(x86::ecx, w);
    a.cmp(x86::rsi, x86::rcx);
    a.cmovb(x86::rcx, x86::rsi);
    a.bind(partial);                      // rcx floats, 1 <= rcx <= w, then back to the loop
    if (isa == Isa::Avx512) {
        a.mov(x86::edi, 1);
        a.shl(x86::edi, x86::cl);
        a.dec(x86::edi);
        a.kmovw(x86::k1, x86::edi);
        emit_tile(e, Tile::Masked);
        a.lea(x86::rax, x86::ptr(x86::rax, x86::rcx, 2));
    } else if (isa == Isa::Avx2) {
        a.neg(x86::rcx);
        a.add(x86::rcx, 8);               // the mask starts at entry 8 - k of {-1 x8, 0 x8}
        a.lea(x86::rdi, x86::ptr(mask_table));
        emit_tile(e, Tile::Masked);
        a.neg(x86::rcx);
        a.add(x86::rcx, 8);               // k again
        a.lea(x86::rax, x86::ptr(x86::rax, x86::rcx, 2));
    } else {
        Label scalar = a.newLabel();
        a.mov(x86::rdi, x86::rcx);
        a.bind(scalar);
        emit_tile(e, Tile::Scalar);
        a.add(x86::rax, 4);
        a.dec(x86::rdi);
        a.jnz(scalar);                    // rax advanced by the scalar tiles
    }
    a.sub(x86::rsi, x86::rcx);
    a.jmp(loop);
    a.bind(done);
    emit_next_row(e, argument_count, row_shape, saved_strides);
    a.dec(saved_rows);
    a.jnz(row);
    if (row_groups) {
        a.jmp(finish);
        a.bind(groups);
        emit_row_groups(e, *row_shape, lanes, argument_count, aligned_arg, streaming,
                        arena && software_pipelined(p, lanes, cold_count), saved_n, saved_rows, saved_strides,
                        x86::qword_ptr(x86::rsp, (int32_t)spill_bytes + 24), row, finish);
    }
    a.bind(finish);
    if (e.streaming_arg >= 0) a.sfence();  // non-temporal stores are weakly ordered
    a.add(x86::rsp, frame);
    for (int i = 5; i >= 0; --i) a.pop(saved[i]);
    if (isa != Isa::Sse41) a.vzeroupper();
    a.ret();
    a.align(AlignMode::kData, 64);
    a.bind(mask_table);
    int32_t mask_values[16];
    for (int i = 0; i < 16; ++i) mask_values[i] = i < 8 ? -1 : 0;
    a.embed(mask_values, sizeof mask_values);
    a.bind(e.m.data);
    for (uint32_t i = 0; i < p->constant_count; ++i) {
        if (p->constant_kinds[i]) a.embed(kLookupTables[p->constants[i]], 64);
        else a.embedUInt32(p->constants[i], 16);
    }
    // The shared registers were this assembly's: the program keeps its own allocation (the
    // retry below assembles it again without them).
    for (uint32_t k = 0; k < shared_count; ++k) p->code[shared_index[k]].reg = shared_reg[k];
    *scratch_peak = e.m.peak;
    if (lanes_out) *lanes_out = lanes;
    if (pinned_out) *pinned_out = pin_count;
    if (e.m.failed && (pin_count || shared_count || max_lanes > 2))   // too few temporaries left: without pinning or sharing, two lanes
        return emit_kernel(p, isa, allocatable, lanes > 2 ? 2 : lanes, streaming, argument_count, emit_only, kernel,
                           code_size, scratch_peak, error, error_size, nullptr, 0, false, 0, lanes_out, nullptr, false,
                           pinned_out, shared_out, page_lanes, row_shape, row_groups_out, twin);   // `zone` is this call's
    if (e.m.failed) {
        std::snprintf(error, error_size, "emit: out of scratch registers or constants");
        return Status::LimitExceeded;
    }
    if (recorder.first != kErrorOk) {
        std::snprintf(error, error_size, "emit: %s", DebugUtils::errorAsString(recorder.first));
        return recorder.first == kErrorOutOfMemory ? Status::OutOfMemory : Status::Unsupported;
    }
    *code_size = (uint32_t)code.codeSize();
    if (emit_only) return Status::Ok;
    Error err = jit_runtime().add(kernel, &code);
    if (err != kErrorOk) {
        std::snprintf(error, error_size, "emit: %s", DebugUtils::errorAsString(err));
        return err == kErrorOutOfMemory ? Status::OutOfMemory : Status::Unsupported;
    }
    if (twin)
        *twin = e.m.streaming_store_count <= JitMath::kMaxStreamingStores
                    ? patched_twin(*kernel, code.codeSize(), (size_t)code.textSection()->offset(), e.m.streaming_store_offsets,
                                   e.m.streaming_store_count)
                    : nullptr;
    return Status::Ok;
}

// >>a64 emitter
// The NEON target (AArch64 Advanced SIMD, 4 floats per register). It shares lowering, register
// allocation and the operation templates with x86; only the vector model, the memory jitters
// and the kernel frame below are its own. Everything here assembles on any host (asmjit's a64
// assembler is in every build of it), so code generation is tested on x86-64 too.
namespace a64 = asmjit::a64;

// The vector model over NEON. The primitives reproduce ScalarMath's x86 semantics: Min/Max are
// a compare and a bit select (fmin/fmax would propagate NaN differently), compares of the
// negated predicates invert an ordered compare, blend is a bit select. cvt_i is fcvtns, which
// saturates (NaN gives 0 where cvtps2dq gives INT32_MIN): its only user, exp, clamps its
// argument first, and a NaN argument makes the result NaN either way.
// Allocator register numbers map to v0-v7, v16-v31, then v8-v15 (whose low halves are
// callee-saved in AAPCS64), so most kernels never touch v8-v15 and need not save d8-d15.
struct JitMathA64 {
    int k2_source = -1;              // x86 only (the shared emit_tile resets it)
    using V = JitValue<JitMathA64>;
    a64::Assembler* a = nullptr;
    uint32_t* constants = nullptr;   // Program's data section, grown by the emitters
    uint8_t* constant_kinds = nullptr;
    uint32_t* constant_count = nullptr;
    int refs[32] = {};
    bool pool[32] = {};              // may hand out as a temporary
    bool failed = false;             // out of constants or of scratch registers
    uint32_t peak = 0;               // most scratch registers in use at once
    uint32_t touched = 0;            // allocator registers the code uses (bit per number)
    bool table_registers = true;     // Program::neon_table_registers
    // Constants pinned in registers for the whole kernel, loaded once before the first row:
    // a slot's register, or -1 for a constant loaded where it is used. A pinned register is
    // never in the scratch pool, so no operation writes it. const_uses counts the loads of
    // each constant in the counting pass (emit_kernel_a64).
    int16_t const_reg[256];
    uint32_t pinned = 0;             // bit r: allocator register r holds a pinned constant
    uint16_t* const_uses = nullptr;
    JitMathA64() { for (int16_t& r : const_reg) r = -1; }

    static uint32_t physical(int r) { return r < 8 ? (uint32_t)r : r < 24 ? (uint32_t)r + 8 : (uint32_t)r - 16; }
    a64::Vec v4(int r) { touched |= 1u << r; return a64::v(physical(r)).s4(); }
    a64::Vec v16(int r) { touched |= 1u << r; return a64::v(physical(r)).b16(); }
    a64::Vec q(int r) { touched |= 1u << r; return a64::v(physical(r)); }
    a64::Vec s(int r) { touched |= 1u << r; return a64::s(physical(r)); }
    a64::Gp data_base() const { return a64::x16; }

    int constant_slot(uint32_t bits, uint32_t parts = 0) {
        uint32_t slot = 0;
        if (!data_slot(constants, constant_kinds, constant_count, bits, parts, &slot)) failed = true;
        return (int)slot;
    }
    int alloc() {
        for (int r = 0; r < 32; ++r)
            if (pool[r] && refs[r] == 0) {
                uint32_t busy = 1;
                for (int q2 = 0; q2 < 32; ++q2) busy += pool[q2] && refs[q2] > 0;
                if (busy > peak) peak = busy;
                return r;
            }
        failed = true;
        return 31;
    }
    V fresh() { return V(this, alloc(), -1); }
    void drop(V& v) { v.release(); }
    bool fused_fma() const { return true; }
    V constant_value(int slot) { return V(this, const_reg[slot], slot); }
    V c(float v) { return constant_value(constant_slot(float_bits(v))); }
    V cb(uint32_t b) { return constant_value(constant_slot(b)); }

    // NEON has no memory operands: a constant not pinned is loaded (16 bytes, one slot) where
    // it is used.
    void move(int d, const V& v) {
        if (v.reg == d) return;
        if (v.reg >= 0) {
            a->mov(v16(d), v16(v.reg));
        } else {
            if (const_uses) ++const_uses[v.constant];
            a->ldr(q(d), a64::ptr(data_base(), v.constant * 16));
        }
    }
    V in_reg(const V& v) {
        if (v.reg >= 0) return v;
        V d = fresh();
        move(d.reg, v);
        return d;
    }
    V bin(asmjit::InstId id, const V& x, const V& y, bool bitwise = false) {
        V xr = in_reg(x), yr = in_reg(y);
        V d = fresh();
        if (bitwise) a->emit(id, v16(d.reg), v16(xr.reg), v16(yr.reg));
        else a->emit(id, v4(d.reg), v4(xr.reg), v4(yr.reg));
        return d;
    }
    V add(const V& x, const V& y) { return bin(a64::Inst::kIdFadd_v, x, y); }
    V sub(const V& x, const V& y) { return bin(a64::Inst::kIdFsub_v, x, y); }
    V mul(const V& x, const V& y) { return bin(a64::Inst::kIdFmul_v, x, y); }
    V div(const V& x, const V& y) { return bin(a64::Inst::kIdFdiv_v, x, y); }
    V and_(const V& x, const V& y) { return bin(a64::Inst::kIdAnd_v, x, y, true); }
    V or_(const V& x, const V& y) { return bin(a64::Inst::kIdOrr_v, x, y, true); }
    V xor_(const V& x, const V& y) { return bin(a64::Inst::kIdEor_v, x, y, true); }
    V andnot(const V& x, const V& y) { return bin(a64::Inst::kIdBic_v, y, x, true); }   // ~x & y
    V add_i(const V& x, const V& y) { return bin(a64::Inst::kIdAdd_v, x, y); }
    V sub_i(const V& x, const V& y) { return bin(a64::Inst::kIdSub_v, x, y); }
    V mul_i(const V& x, const V& y) { return bin(a64::Inst::kIdMul_v, x, y); }
    bool has_scalef() const { return false; }
    V scalef(const V& x, const V&) { return x; }
    V copy_sign(const V& r, const V& x) {
        V sign = and_(x, cb(0x80000000u));
        return or_(r, sign);
    }
    // Table lookups: byte indices 4k + {0,1,2,3} into the table's four 16-byte slots; when
    // v12-v15 are busy, one tbl and three tbx (a byte index out of 0..15 leaves tbx's
    // destination byte as it was).
    V lookup_index(const V& k) {
        V b = and_(k, cb(15));
        b = shl_i(b, 2);
        b = mul_i(b, cb(0x01010101u));
        return add_i(b, cb(0x03020100u));
    }
    V lookup(const V& index, uint32_t table) {
        const int slot = constant_slot(table, 4);
        V ir = in_reg(index);
        // Mostly: the whole table into v12-v15 (allocator registers 28-31, scratch, whose use
        // makes the kernel save d8-d15) by one ld1, and one tbl over the four. x0 is free
        // inside a tile.
        bool table_registers_free = table_registers;
        for (int r = 28; r < 32; ++r) table_registers_free = table_registers_free && pool[r] && refs[r] == 0;
        if (table_registers_free) {
            V d = fresh();
            if (d.reg < 28) {
                a->add(a64::x0, data_base(), slot * 16);
                a->ld1(v16(28), v16(29), v16(30), v16(31), a64::ptr(a64::x0));
                a->tbl(v16(d.reg), v16(28), v16(29), v16(30), v16(31), v16(ir.reg));
                return d;
            }
        }
        V d = fresh(), part = fresh(), control = fresh(), sixteen = in_reg(cb(0x10101010u));
        a->ldr(q(d.reg), a64::ptr(data_base(), slot * 16));
        a->tbl(v16(d.reg), v16(d.reg), v16(ir.reg));
        for (int j = 1; j < 4; ++j) {
            a->sub(v16(control.reg), v16(j == 1 ? ir.reg : control.reg), v16(sixteen.reg));
            a->ldr(q(part.reg), a64::ptr(data_base(), (slot + j) * 16));
            a->tbx(v16(d.reg), v16(part.reg), v16(control.reg));
        }
        return d;
    }
    // x < y ? x : y and x > y ? x : y, as minps/maxps (the second operand on NaN or equality).
    V min(const V& x, const V& y) {
        V xr = in_reg(x), yr = in_reg(y);
        V d = fresh();
        a->fcmgt(v4(d.reg), v4(yr.reg), v4(xr.reg));
        a->bsl(v16(d.reg), v16(xr.reg), v16(yr.reg));
        return d;
    }
    V max(const V& x, const V& y) {
        V xr = in_reg(x), yr = in_reg(y);
        V d = fresh();
        a->fcmgt(v4(d.reg), v4(xr.reg), v4(yr.reg));
        a->bsl(v16(d.reg), v16(xr.reg), v16(yr.reg));
        return d;
    }
    V unary(asmjit::InstId id, const V& x) {
        V xr = in_reg(x);
        V d = fresh();
        a->emit(id, v4(d.reg), v4(xr.reg));
        return d;
    }
    V sqrt(const V& x) { return unary(a64::Inst::kIdFsqrt_v, x); }
    V cvt_i(const V& x) { return unary(a64::Inst::kIdFcvtns_v, x); }
    V cvt_f(const V& x) { return unary(a64::Inst::kIdScvtf_v, x); }
    V round(const V& x, int mode) {
        asmjit::InstId id = mode == kRoundNearest ? a64::Inst::kIdFrintn_v : mode == kRoundFloor ? a64::Inst::kIdFrintm_v
                          : mode == kRoundCeil ? a64::Inst::kIdFrintp_v : a64::Inst::kIdFrintz_v;
        return unary(id, x);
    }
    V shift(asmjit::InstId id, const V& x, int n) {
        V xr = in_reg(x);
        V d = fresh();
        a->emit(id, v4(d.reg), v4(xr.reg), asmjit::Imm(n));
        return d;
    }
    V shl_i(const V& x, int n) { return shift(a64::Inst::kIdShl_v, x, n); }
    V shr_i(const V& x, int n) { return shift(a64::Inst::kIdUshr_v, x, n); }
    V sra_i(const V& x, int n) { return shift(a64::Inst::kIdSshr_v, x, n); }
    // z + x*y and z - x*y with one rounding (fmla, fmls accumulate into the destination).
    // Operands by value: a moved-in temporary z (only this handle holds it) accumulates the
    // result in place instead of being copied.
    V fma_impl(V x, V y, V z, bool negate) {
        V xr = in_reg(x), yr = in_reg(y);
        V d;
        if (z.m && z.reg >= 0 && pool[z.reg] && refs[z.reg] == 1) d = static_cast<V&&>(z);
        else { d = fresh(); move(d.reg, z); }
        if (negate) a->fmls(v4(d.reg), v4(xr.reg), v4(yr.reg));
        else a->fmla(v4(d.reg), v4(xr.reg), v4(yr.reg));
        return d;
    }
    V fma(V x, V y, V z) { return fma_impl(static_cast<V&&>(x), static_cast<V&&>(y), static_cast<V&&>(z), false); }
    V fnma(V x, V y, V z) { return fma_impl(static_cast<V&&>(x), static_cast<V&&>(y), static_cast<V&&>(z), true); }
    // cmpps predicates: the ordered ones are fcmeq/fcmgt/fcmge (false on NaN), the negated
    // ones their complement (true on NaN).
    V cmp(const V& x, const V& y, int predicate) {
        V xr = in_reg(x), yr = in_reg(y);
        V d = fresh();
        switch (predicate) {
            case kCmpEq: case kCmpNeq: a->fcmeq(v4(d.reg), v4(xr.reg), v4(yr.reg)); break;
            case kCmpLt: case kCmpNlt: a->fcmgt(v4(d.reg), v4(yr.reg), v4(xr.reg)); break;
            case kCmpLe: case kCmpNle: a->fcmge(v4(d.reg), v4(yr.reg), v4(xr.reg)); break;
            default: {  // Unord, Ord: both operands equal themselves
                a->fcmeq(v4(d.reg), v4(xr.reg), v4(xr.reg));
                V t = fresh();
                a->fcmeq(v4(t.reg), v4(yr.reg), v4(yr.reg));
                a->and_(v16(d.reg), v16(d.reg), v16(t.reg));
                break;
            }
        }
        if (predicate == kCmpNeq || predicate == kCmpNlt || predicate == kCmpNle || predicate == kCmpUnord)
            a->mvn(v16(d.reg), v16(d.reg));
        return d;
    }
    // mask ? x : y
    V blend(const V& mask, const V& x, const V& y) {
        V xr = in_reg(x), yr = in_reg(y);
        V d = fresh();
        move(d.reg, mask);
        a->bsl(v16(d.reg), v16(xr.reg), v16(yr.reg));
        return d;
    }
};

// >>a64 loads and stores
struct EmitContextA64;
struct JitterTableA64 { void (*kinds[7])(EmitContextA64& e, uint32_t i, Tile tile); };

// Kernel registers: x4-x7, x9-x15 hold the argument pointers (post-incremented by the tiles
// that walk them), x1 n, x2 rows left, x3 the row-stride table, x8 floats left in the row,
// x16 the data section, x17 the peel count, x0 a temporary. All caller-saved: nothing to save but d8-d15.
// Past 11 arguments the others are cold: their pointers sit at [sp + cold_disp], and a tile
// loads one into x0, walks it and stores it back. The spill slots follow them.
struct EmitContextA64 : EmitContextBase<JitMathA64> {
    EmitContextA64() : EmitContextBase(32, 22) {}
    a64::Gp args[kSnippetMaxArgs];
    int32_t cold_disp[kSnippetMaxArgs];   // -1: in args[]
    int32_t slot_base = 0;                // bytes of cold pointers below the spill slots
    const JitterTableA64* table = nullptr;

    a64::Mem slot(int32_t s) const { return a64::ptr(a64::sp, slot_base + s * 16); }
    // An argument's pointer in a register (x0 loaded from the frame for a cold one), and its
    // store back after a post-increment.
    a64::Gp base(uint32_t arg) {
        if (cold_disp[arg] < 0) return args[arg];
        m.a->ldr(a64::x0, a64::ptr(a64::sp, cold_disp[arg]));
        return a64::x0;
    }
    void walked(uint32_t arg) {
        if (cold_disp[arg] >= 0) m.a->str(a64::x0, a64::ptr(a64::sp, cold_disp[arg]));
    }
    JitMathA64::V value(uint32_t v) {
        const Lir& l = p->code[v];
        if (l.kind == LirKind::Constant) return m.constant_value((int)l.index);
        if (l.reg >= 0) return JitMathA64::V(&m, l.reg, -1);
        JitMathA64::V t = m.fresh();
        m.a->ldr(m.q(t.reg), slot(l.slot));
        return t;
    }
    void define(uint32_t i, const JitMathA64::V& v) {
        const Lir& l = p->code[i];
        JitMathA64::V r = m.in_reg(v);
        if (l.reg >= 0) m.move(l.reg, r);
        else m.a->str(m.q(r.reg), slot(l.slot));
    }
};

// Memory jitters: a vector tile reads and writes 16 bytes with post-increment, a scalar tile
// (the tail) 4 bytes; broadcasts read element 0 in place (ld1r, or ldr s + dup when unfused).
inline void jit_load_neon(EmitContextA64& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JitMathA64::V d = e.m.fresh();
    const a64::Gp b = e.base(l.index);
    if (l.lane0) e.m.a->ldr(e.m.s(d.reg), a64::ptr(b));
    else if (tile == Tile::Scalar) e.m.a->ldr(e.m.s(d.reg), a64::ptr_post(b, 4));
    else e.m.a->ldr(e.m.q(d.reg), a64::ptr_post(b, 16));
    if (!l.lane0) e.walked(l.index);
    e.define(i, d);
}
inline void jit_broadcast_load_neon(EmitContextA64& e, uint32_t i, Tile) {
    JitMathA64::V d = e.m.fresh();
    e.m.a->ld1r(e.m.v4(d.reg), a64::ptr(e.base(e.p->code[i].index)));
    e.define(i, d);
}
inline void jit_broadcast_move_neon(EmitContextA64& e, uint32_t i, Tile) {
    JitMathA64::V s = e.m.in_reg(e.value(e.p->code[i].args[0]));
    JitMathA64::V d = e.m.fresh();
    e.m.touched |= 1u << s.reg;
    e.m.a->dup(e.m.v4(d.reg), a64::v(JitMathA64::physical(s.reg)).s(0));
    e.define(i, d);
}
inline void jit_store_neon(EmitContextA64& e, uint32_t i, Tile tile) {
    const Lir& l = e.p->code[i];
    JitMathA64::V v = e.m.in_reg(e.value(l.args[0]));
    const a64::Gp b = e.base(l.index);
    if (tile == Tile::Scalar) e.m.a->str(e.m.s(v.reg), a64::ptr_post(b, 4));
    else e.m.a->str(e.m.q(v.reg), a64::ptr_post(b, 16));
    e.walked(l.index);
}
inline void jit_store_scalar_neon(EmitContextA64& e, uint32_t i, Tile) {
    JitMathA64::V v = e.m.in_reg(e.value(e.p->code[i].args[0]));
    e.m.a->str(e.m.s(v.reg), a64::ptr(e.base(e.p->code[i].index)));
}

inline const JitterTableA64* jitter_table_a64() {
    static const JitterTableA64 neon = {{jit_load_neon, jit_broadcast_move_neon, jit_broadcast_load_neon,
                                         jit_constant<EmitContextA64>, jit_compute<EmitContextA64>, jit_store_neon,
                                         jit_store_scalar_neon}};
    return &neon;
}

// >>a64 kernel
// One assembly of the kernel (same contract as emit_kernel): per row the hoisted broadcasts,
// vector tiles of 4 floats, then a scalar tail; pointers that walk the row moved n*4 bytes
// by their post-increments, so the row step adds stride - n*4 to them (stride to the others).
inline Status assemble_a64(asmjit::CodeHolder* code, asmjit::ErrorHandler* handler, Program* p, uint32_t allocatable,
                           uint32_t argument_count, bool save_high, bool validate, uint32_t* touched,
                           uint32_t* scratch_peak, const int16_t* const_reg = nullptr, uint16_t* const_uses = nullptr) {
    using namespace asmjit;
    code->init(Environment(Arch::kAArch64));
    code->setErrorHandler(handler);
    a64::Assembler a(code);
    if (validate) a.addDiagnosticOptions(DiagnosticOptions::kValidateAssembler);
    bool cold[kSnippetMaxArgs];
    const uint32_t cold_count = pick_cold_arguments(p, argument_count, Isa::Neon, cold);
    const uint32_t cold_bytes = (cold_count * 8 + 15) / 16 * 16;
    if (cold_bytes + (uint64_t)p->spill_slots * 16 > 65520) return Status::LimitExceeded;   // str q offsets reach 65520
    EmitContextA64 e;
    e.p = p;
    e.table = jitter_table_a64();
    e.allocatable = allocatable;
    e.m.a = &a;
    e.m.constants = p->constants;
    e.m.constant_kinds = p->constant_kinds;
    e.m.constant_count = &p->constant_count;
    e.m.table_registers = p->neon_table_registers;
    e.m.const_uses = const_uses;
    if (const_reg)
        for (uint32_t k = 0; k < 256; ++k)
            if (const_reg[k] >= 0) { e.m.const_reg[k] = const_reg[k]; e.m.pinned |= 1u << const_reg[k]; }
    const uint32_t gp[11] = {4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15};
    e.slot_base = (int32_t)cold_bytes;
    for (uint32_t i = 0, next = 0, k = 0; i < kSnippetMaxArgs; ++i) {
        e.cold_disp[i] = cold[i] ? (int32_t)(8 * k++) : -1;
        e.args[i] = a64::x(cold[i] ? 0 : gp[next < 10 ? next++ : 10]);
    }
    bool walked[kSnippetMaxArgs] = {};
    for (uint32_t i = 0; i < p->count; ++i) {
        const Lir& l = p->code[i];
        if ((l.kind == LirKind::Load && !l.lane0) || l.kind == LirKind::Store) walked[l.index] = true;
    }
    if (save_high) {
        a.stp(a64::d8, a64::d9, a64::ptr_pre(a64::sp, -64));
        a.stp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
        a.stp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
        a.stp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
    }
    uint32_t frame = cold_bytes + p->spill_slots * 16;
    for (uint32_t left = frame; left;) {
        uint32_t step = left < 4080 ? left : 4080;
        a.sub(a64::sp, a64::sp, step);
        left -= step;
    }
    for (uint32_t i = 0; i < argument_count; ++i) {
        if (e.cold_disp[i] < 0) {
            a.ldr(e.args[i], a64::ptr(a64::x0, (int32_t)(i * 8)));
        } else {
            a.ldr(a64::x8, a64::ptr(a64::x0, (int32_t)(i * 8)));
            a.str(a64::x8, a64::ptr(a64::sp, e.cold_disp[i]));
        }
    }
    Label data = a.newLabel(), row = a.newLabel(), loop = a.newLabel(), tail = a.newLabel(), scalar = a.newLabel(),
          done = a.newLabel();
    a.adr(e.m.data_base(), data);
    for (uint32_t k = 0; k < 256; ++k)   // pinned constants: every slot used is below constant_count
        if (e.m.const_reg[k] >= 0) a.ldr(e.m.q(e.m.const_reg[k]), a64::ptr(e.m.data_base(), (int32_t)(k * 16)));
    a.bind(row);
    emit_row_invariants(e);
    a.mov(a64::x8, a64::x1);
    // Alignment peel, as on x86: scalar tiles up to the first output's 16-byte boundary, so
    // the vector stores of the row do not straddle cache lines.
    int32_t aligned_arg = -1;
    for (uint32_t i = 0; i < p->count && aligned_arg < 0; ++i)
        if (p->code[i].kind == LirKind::Store) aligned_arg = (int32_t)p->code[i].index;
    if (aligned_arg >= 0) {
        Label peel = a.newLabel(), within = a.newLabel(), peeled = a.newLabel();
        if (e.cold_disp[aligned_arg] < 0) {
            a.and_(a64::x17, e.args[aligned_arg], 15);
        } else {
            a.ldr(a64::x17, a64::ptr(a64::sp, e.cold_disp[aligned_arg]));
            a.and_(a64::x17, a64::x17, 15);
        }
        a.cbz(a64::x17, peeled);
        a.mov(a64::x0, 16);
        a.sub(a64::x17, a64::x0, a64::x17);
        a.lsr(a64::x17, a64::x17, 2);        // floats to the boundary
        a.cbz(a64::x17, peeled);             // a pointer that is not even float-aligned
        a.cmp(a64::x17, a64::x8);
        a.b_ls(within);
        a.mov(a64::x17, a64::x8);            // at most the row
        a.bind(within);
        a.sub(a64::x8, a64::x8, a64::x17);
        a.bind(peel);
        emit_tile(e, Tile::Scalar);
        a.subs(a64::x17, a64::x17, 1);
        a.b_ne(peel);
        a.bind(peeled);
    }
    a.cmp(a64::x8, 4);
    a.b_lo(tail);
    a.bind(loop);
    emit_tile(e, Tile::Vector);
    a.sub(a64::x8, a64::x8, 4);
    a.cmp(a64::x8, 4);
    a.b_hs(loop);
    a.bind(tail);
    a.cbz(a64::x8, done);
    a.bind(scalar);
    emit_tile(e, Tile::Scalar);
    a.subs(a64::x8, a64::x8, 1);
    a.b_ne(scalar);
    a.bind(done);
    a.lsl(a64::x17, a64::x1, 2);
    for (uint32_t i = 0; i < argument_count; ++i) {
        a.ldr(a64::x0, a64::ptr(a64::x3, (int32_t)(i * 8)));
        const a64::Gp pointer = e.cold_disp[i] < 0 ? e.args[i] : a64::Gp(a64::x8);   // x8 is free between rows
        if (e.cold_disp[i] >= 0) a.ldr(pointer, a64::ptr(a64::sp, e.cold_disp[i]));
        a.add(pointer, pointer, a64::x0);
        if (walked[i]) a.sub(pointer, pointer, a64::x17);
        if (e.cold_disp[i] >= 0) a.str(pointer, a64::ptr(a64::sp, e.cold_disp[i]));
    }
    a.subs(a64::x2, a64::x2, 1);
    a.b_ne(row);
    for (uint32_t left = frame; left;) {
        uint32_t step = left < 4080 ? left : 4080;
        a.add(a64::sp, a64::sp, step);
        left -= step;
    }
    if (save_high) {
        a.ldp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
        a.ldp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
        a.ldp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
        a.ldp(a64::d8, a64::d9, a64::ptr_post(a64::sp, 64));
    }
    a.ret(a64::x30);
    a.align(AlignMode::kData, 16);
    a.bind(data);
    for (uint32_t i = 0; i < p->constant_count; ++i) {
        if (p->constant_kinds[i]) a.embed(&kLookupTables[p->constants[i]][4 * (p->constant_kinds[i] - 1)], 16);
        else a.embedUInt32(p->constants[i], 4);
    }
    *touched = e.m.touched;
    *scratch_peak = e.m.peak;
    return e.m.failed ? Status::LimitExceeded : Status::Ok;
}

inline Status emit_kernel_a64(Program* p, uint32_t allocatable, uint32_t argument_count, bool emit_only, void** kernel,
                              uint32_t* code_size, uint32_t* scratch_peak, uint32_t* saved_registers, char* error,
                              size_t error_size, uint32_t* pinned_out = nullptr, void* zone = nullptr, size_t zone_bytes = 0) {
    using namespace asmjit;
    uint32_t touched = 0;
    const uint32_t constants_before = p->constant_count;
    // Counting pass: the kernel without pinned constants counts each constant's loads; the
    // most used then get the registers that pass left untouched, loaded once before the
    // first row instead of once per use. Every pass creates the same constants in the same
    // order, so the slots agree.
    int16_t const_reg[256];
    for (int16_t& r : const_reg) r = -1;
    uint32_t pinned = 0;
    {
        uint16_t uses[256] = {};
        ErrorRecorder counting_recorder;
        Support::Temporary counting_zone(zone, zone_bytes);  // as on x86: passes take turns in it
        CodeHolder counting(zone ? &counting_zone : nullptr);
        uint32_t counting_peak = 0;
        Status counted = assemble_a64(&counting, &counting_recorder, p, allocatable, argument_count, false, false, &touched,
                                      &counting_peak, nullptr, uses);
        p->constant_count = constants_before;
        // v8-v15 (allocator registers 24-31) only when the kernel saves d8-d15 anyway.
        const int last = touched & 0xff000000u ? 32 : 24;
        for (int r = 0; r < last && counted == Status::Ok && counting_recorder.first == kErrorOk; ++r) {
            if (touched >> r & 1) continue;
            const int best = most_used_constant(uses);
            if (best < 0) break;
            const_reg[best] = (int16_t)r;
            pinned |= 1u << r;
            uses[best] = 0;
        }
    }
    // Pass one learns whether v8-v15 are used; if so pass two assembles with d8-d15 saved.
    // With pinned constants the scratch pool is smaller: if it runs out, again without.
    ErrorRecorder first_recorder, recorder;
    Support::Temporary first_zone(zone, zone_bytes);  // the counting pass is over
    CodeHolder first(zone ? &first_zone : nullptr), second;
    CodeHolder* code;
    ErrorRecorder* used;
    Status s;
    for (;;) {
        code = &first;
        used = &first_recorder;
        s = assemble_a64(&first, &first_recorder, p, allocatable, argument_count, false, emit_only, &touched,
                         scratch_peak, const_reg);
        *saved_registers = 0;
        if (s == Status::Ok && first_recorder.first == kErrorOk && (touched & 0xff000000u)) {
            *saved_registers = 8;
            p->constant_count = constants_before;   // the same constants again, in the same order
            code = &second;
            used = &recorder;
            s = assemble_a64(&second, &recorder, p, allocatable, argument_count, true, emit_only, &touched, scratch_peak,
                             const_reg);
        }
        if (s != Status::LimitExceeded || !pinned) break;
        for (int16_t& r : const_reg) r = -1;
        pinned = 0;
        p->constant_count = constants_before;
        first.reset();
        second.reset();
        first_recorder.first = recorder.first = kErrorOk;
    }
    if (pinned_out) *pinned_out = (uint32_t)__builtin_popcount(pinned);
    if (s == Status::LimitExceeded) {
        std::snprintf(error, error_size, "emit: out of scratch registers, constants or spill slots");
        return s;
    }
    if (used->first != kErrorOk) {
        std::snprintf(error, error_size, "emit (neon): %s", DebugUtils::errorAsString(used->first));
        return used->first == kErrorOutOfMemory ? Status::OutOfMemory : Status::Unsupported;
    }
    *code_size = (uint32_t)code->codeSize();
    if (emit_only) return Status::Ok;
    Error err = jit_runtime().add(kernel, code);
    if (err != kErrorOk) {
        std::snprintf(error, error_size, "emit (neon): %s", DebugUtils::errorAsString(err));
        return err == kErrorOutOfMemory ? Status::OutOfMemory : Status::Unsupported;
    }
    return Status::Ok;
}

inline void release_kernel(void* kernel) {
    if (kernel) ignore_status(jit_runtime().release(kernel) == asmjit::kErrorOk ? Status::Ok : Status::Unsupported);
}

}  // namespace detail
#endif  // TESSEL_NO_JIT

// >>kernel cache implementation
KernelCache::~KernelCache() {
    for (uint32_t i = 0; i < count_; ++i) {
#ifndef TESSEL_NO_JIT
        detail::release_kernel(entries_[i].kernel);
        if (entries_[i].emitted.in_place_kernel) detail::release_kernel(entries_[i].emitted.in_place_kernel);
#endif
        TESSEL_FREE(entries_[i].key);
    }
}

namespace detail {
// The kernel cache's key hash, 8 bytes a step: a lowered program's key is kilobytes, hashed at
// every compile(), and byte-wise FNV-1a was most of what a cache hit cost.
inline uint64_t hash_key_words(const void* data, size_t size) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    uint64_t h = kHashSeed ^ size;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
}  // namespace detail

const KernelCache::Entry* KernelCache::find(uint64_t hash, const void* key, size_t key_bytes) {
    for (uint32_t i = 0; i < count_; ++i) {
        const Entry& e = entries_[i];
        if (e.hash == hash && e.key_bytes == key_bytes && std::memcmp(e.key, key, key_bytes) == 0) { ++hits_; return &e; }
    }
    ++misses_;
    return nullptr;
}

bool KernelCache::insert(uint64_t hash, const void* key, size_t key_bytes, void* kernel, const Emitted& emitted) {
    if (count_ == kCapacity) return false;
    void* copy = TESSEL_MALLOC(key_bytes ? key_bytes : 1);
    if (!copy) return false;
    std::memcpy(copy, key, key_bytes);
    entries_[count_++] = Entry{hash, copy, key_bytes, kernel, emitted};
    return true;
}

// >>interpreter
namespace detail {
constexpr uint32_t kColumn = 64;  // elements per interpreter block

// Runs one row of n elements: column by column over blocks of kColumn elements.
inline void interpret_row(const SnippetBody& body, bool fused, float* columns, const float* const* in,
                          float* const* out, const bool* inner_broadcast, int64_t n) {
    ScalarMath m;
    m.fused = fused;
    uint32_t params = body.parameter_count();
    for (int64_t base = 0; base < n; base += kColumn) {
        uint32_t len = (uint32_t)(n - base < kColumn ? n - base : kColumn);
        for (uint32_t i = 0; i < body.size(); ++i) {
            const SnippetInstruction& ins = body.instruction(i);
            float* col = columns + (size_t)i * kColumn;
            if (ins.op == SnippetOp::Parameter) {
                const float* src = in[ins.index];
                for (uint32_t j = 0; j < len; ++j) col[j] = inner_broadcast[ins.index] ? src[0] : src[base + j];
            } else if (ins.op == SnippetOp::Scalar) {
                for (uint32_t j = 0; j < len; ++j) col[j] = ins.alpha;
            } else {
                const float* a0 = columns + (size_t)ins.args[0] * kColumn;
                const float* a1 = ins.arity > 1 ? columns + (size_t)ins.args[1] * kColumn : a0;
                const float* a2 = ins.arity > 2 ? columns + (size_t)ins.args[2] * kColumn : a0;
                // Pow with a scalar exponent is PowerStatic by definition (as lowering makes it).
                SnippetOp op = ins.op;
                float alpha = ins.alpha;
                if (op == SnippetOp::Pow && body.instruction(ins.args[1]).op == SnippetOp::Scalar) {
                    op = SnippetOp::PowerStatic;
                    alpha = body.instruction(ins.args[1]).alpha;
                }
                for (uint32_t j = 0; j < len; ++j) {
                    float args[3] = {a0[j], a1[j], a2[j]};
                    col[j] = eval_op(m, op, args, alpha, ins.beta);
                }
            }
        }
        for (uint32_t r = 0; r < body.result_count(); ++r) {
            const float* col = columns + (size_t)body.result_value(r) * kColumn;
            if (inner_broadcast[params + r]) out[r][0] = col[0];
            else for (uint32_t j = 0; j < len; ++j) out[r][base + j] = col[j];
        }
    }
}
}  // namespace detail

// >>snippet implementation
Snippet::~Snippet() { release(); }

void Snippet::release() {
#ifndef TESSEL_NO_JIT
    if (kernel_owned_) detail::release_kernel(kernel_);
    if (kernel_owned_ && kernel_in_place_) detail::release_kernel(kernel_in_place_);
#endif
    kernel_ = nullptr;
    kernel_in_place_ = nullptr;
    kernel_owned_ = false;
    if (columns_) TESSEL_FREE(columns_);
    columns_ = nullptr;
    compiled_ = false;
}

Status Snippet::fail(Status status, const char* message) const {
    std::snprintf(error_, sizeof error_, "%s", message);
    return status;
}

// >>compile
Status Snippet::compile(const SnippetBody& body, const SnippetOptions& options) {
    uint64_t start = detail::now_ns();
    release();
    stats_ = SnippetStats();
    const SnippetTuning& tuning = options.tuning;
    Isa isa = options.isa == Isa::Auto ? default_isa() : options.isa;
    if ((int)isa > (int)Isa::Auto) return fail(Status::InvalidArgument, "compile: unknown isa");
    bool emit_only = options.emit_only && isa != Isa::Ref;
#ifdef TESSEL_NO_JIT
    emit_only = false;
#endif
    if (!isa_available(isa) && !emit_only) return fail(Status::Unsupported, "compile: isa not available on this CPU or build");
    if (body.result_count() == 0) return fail(Status::InvalidArgument, "compile: body has no result");
    uint32_t params = body.parameter_count(), results = body.result_count();
    if (params + results > kSnippetMaxArgs) return fail(Status::LimitExceeded, "compile: more than 32 parameters + results");

    // Shapes: parameters then results; the domain is the broadcast of the results.
    SnippetShape shapes[kSnippetMaxArgs];
    for (uint32_t i = 0; i < body.size(); ++i)
        if (body.instruction(i).op == SnippetOp::Parameter) shapes[body.instruction(i).index] = body.instruction(i).shape;
    SnippetShape domain;
    for (uint32_t r = 0; r < results; ++r) {
        shapes[params + r] = body.instruction(body.result_value(r)).shape;
        if (!detail::broadcast_shapes(domain, shapes[params + r], &domain))
            return fail(Status::InvalidArgument, "compile: results do not broadcast to one domain");
    }
    detail::Domain d;
    if (!detail::normalize_domain(shapes, params + results, domain, &d))
        return fail(Status::InvalidArgument, "compile: a parameter does not broadcast to the output domain");
    rank_ = d.rank;
    for (uint32_t i = 0; i < d.rank; ++i) dims_[i] = d.dims[i];
    for (uint32_t t = 0; t < params + results; ++t)
        for (uint32_t i = 0; i < d.rank; ++i) strides_[t][i] = d.strides[t][i];
    bool inner_broadcast[kSnippetMaxArgs];
    for (uint32_t t = 0; t < params + results; ++t) inner_broadcast[t] = d.strides[t][d.rank - 1] == 0 && d.dims[d.rank - 1] > 1;

    // Statistics of memory walked.
    stats_.elements = d.elements;
    for (uint32_t i = 0; i < body.size(); ++i) {
        const SnippetInstruction& in = body.instruction(i);
        if (in.op == SnippetOp::Parameter || in.op == SnippetOp::Scalar) continue;
        uint64_t bytes = detail::shape_elements(in.shape) * 4;
        for (int a = 0; a < in.arity; ++a)
            if (body.instruction(in.args[a]).op != SnippetOp::Scalar)
                bytes += detail::shape_elements(body.instruction(in.args[a]).shape) * 4;
        stats_.bytes_unfused += bytes;
    }
    for (uint32_t t = 0; t < params + results; ++t) stats_.bytes_fused += detail::shape_elements(shapes[t]) * 4;
    stats_.shrinkage = stats_.bytes_fused ? (double)stats_.bytes_unfused / (double)stats_.bytes_fused : 0;
    stats_.normalized_rank = d.rank;

    body_ = &body;
    parameters_ = params;
    results_ = results;
    isa_ = isa;
    stats_.isa = isa;
    fused_ = isa == Isa::Ref ? tuning.reference_fma : isa_uses_fma(isa);
    row_strides_at_run_ = tuning.row_strides_at_run || !detail::x86_isa(isa);
    if (isa == Isa::Ref) {
        columns_ = static_cast<float*>(TESSEL_MALLOC((size_t)body.size() * detail::kColumn * sizeof(float) + 1));
        if (!columns_) return fail(Status::OutOfMemory, "compile: no memory for the interpreter columns");
        stats_.compile_ns = detail::now_ns() - start;
        compiled_ = true;
        return Status::Ok;
    }
#ifdef TESSEL_NO_JIT
    (void)inner_broadcast;
    (void)options;
    return fail(Status::Unsupported, "compile: built with TESSEL_NO_JIT");
#else
    using StreamingStores = SnippetTuning::StreamingStores;
    using PageLanes = SnippetTuning::PageLanes;
    Arena scratch;
    detail::Program program;
    program.neon_table_registers = tuning.neon_table_registers;
    Status s = detail::insert_load_store(body, inner_broadcast + params, &scratch, &program);
    if (s == Status::Ok) { detail::power_static(&program); s = detail::insert_broadcast_move(&program, inner_broadcast, &scratch); }
    if (s == Status::Ok && tuning.fuse_broadcast_loads) s = detail::fuse_broadcast_load(&program, &scratch);
    if (s == Status::Ok) s = detail::scalars_to_data_section(&program);
    if (s == Status::Ok) s = detail::eliminate_dead_code_and_schedule(&program, &scratch);
    uint32_t total = isa == Isa::Avx512 || isa == Isa::Neon ? 32 : 16, reserved = detail::kScratchRegisters;
    uint32_t allocatable = total - reserved;
    if (tuning.max_registers && tuning.max_registers < allocatable) allocatable = tuning.max_registers;
    if (s != Status::Ok) return fail(s, "compile: lowering failed (out of memory or more than 256 constants)");
    // Two tiles in lockstep on AVX-512 (each lane gets a bank of 16 registers) hide the
    // latency of the long approximation chains; taken when the values fit a bank unspilled.
    // Unless the caller chose, at most the lanes that walk a row in the fewest loop
    // iterations: whole tiles plus one masked partial tile per vector left over (ties: more
    // lanes). Short rows otherwise run mostly in partial tiles.
    const uint64_t row_vectors = d.dims[d.rank - 1] / isa_vector_floats(isa);
    auto row_iterations = [row_vectors](uint64_t l) { return row_vectors / l + row_vectors % l; };
    uint32_t row_lanes = 4;
    if (!tuning.lanes) {
        row_lanes = 1;
        for (uint32_t l = 2; l <= 4 && l <= row_vectors; ++l)
            if (row_iterations(l) <= row_iterations(row_lanes)) row_lanes = l;
    }
    uint32_t lanes = 1;
    if (isa == Isa::Avx512 && tuning.lanes != 1 && row_lanes >= 2) {
        uint32_t half = 16 - reserved < allocatable ? 16 - reserved : allocatable;
        bool fits = tuning.lanes >= 2 || half == allocatable;
        if (!fits) {
            for (uint32_t i = 0; i < program.count; ++i) { program.code[i].reg = -1; program.code[i].slot = -1; program.code[i].hoisted = false; }
            program.spill_slots = program.registers_used = program.spilled = 0;
            s = detail::allocate_registers(&program, half, &scratch);
            if (s != Status::Ok) return fail(s, "compile: register allocation out of memory");
            fits = program.spilled == 0;
        }
        if (fits) { lanes = 2; allocatable = half; }
    }
    // Streaming above the last-level cache, capped at 64 MiB: virtual machines may report the
    // whole socket's L3, far more than one core reaches. CPUID traps in a VM, so small bodies
    // never ask. For compute-bound bodies (a transcendental op) only with page lanes (AVX-512,
    // 2 or more lanes, rows of 3072 floats or more, so that the blocks of pages cover most of a
    // row, or rows for row groups): on one stream non-temporal stores slow them down, in page
    // lanes they speed them up (bench/snippets with SnippetTuning set).
    bool transcendental = false;
    for (uint32_t i = 0; i < body.size(); ++i) transcendental = transcendental || detail::transcendental_op(body.instruction(i).op);
    int64_t row_strides[kSnippetMaxArgs] = {};          // bytes, as run() passes them
    for (uint32_t t = 0; t < params + results; ++t) row_strides[t] = d.rank >= 2 ? d.strides[t][d.rank - 2] * 4 : 0;
    detail::RowShape row_shape;
    row_shape.n = d.dims[d.rank - 1];
    row_shape.rows = d.rank >= 2 ? d.dims[d.rank - 2] : 1;
    row_shape.strides = row_strides;
    // Page blocks for most of each row (3 lanes from 3072 floats, 2 from 2048), or row
    // groups for 3 lanes (then also for 2).
    const bool may_page = isa == Isa::Avx512 && lanes >= 2 && tuning.page_lanes != PageLanes::Never &&
                          (row_shape.n >= 3072 || detail::row_groups_apply(&program, &row_shape, isa, 3,
                                                                          detail::cold_argument_count(isa, params + results),
                                                                          params + results));
    bool streaming = tuning.streaming_stores == StreamingStores::Always ||
                     tuning.streaming_stores == StreamingStores::AlwaysWithInPlaceTwin;
    if (tuning.streaming_stores == StreamingStores::Auto && stats_.bytes_fused > (4ull << 20) && (!transcendental || may_page)) {
        uint64_t threshold = last_level_cache_bytes();
        if (threshold == 0 || threshold > (64ull << 20)) threshold = threshold ? 64ull << 20 : 32ull << 20;
        streaming = stats_.bytes_fused > threshold;
    }
    if (isa == Isa::Neon) streaming = false;
    // 4 lanes only while the data stays in the caches, where 4 pipelined lanes are the
    // fastest; beyond them 4 lanes fall behind, and 3 in a software pipeline
    // (emit_pipelined_tiles) beat 2 in lockstep when a lane needs at most 8 registers (see
    // emit_kernel for larger bodies). Tuned with bench/snippets.
    const bool beyond_caches = stats_.bytes_fused > (4ull << 20);
    const uint32_t max_lanes = beyond_caches ? 3u : 4u;
    const uint32_t lane_cap = tuning.lanes ? (tuning.lanes > 4 ? 4u : tuning.lanes) : std::min(max_lanes, row_lanes);
    stats_.lanes = lanes;
    stats_.streaming_stores = streaming;
    const bool page_lanes =
        isa == Isa::Avx512 && !tuning.row_strides_at_run &&
        (tuning.page_lanes == PageLanes::Auto ? streaming : tuning.page_lanes == PageLanes::Always);
    const detail::RowShape* compiled_rows = tuning.row_strides_at_run ? nullptr : &row_shape;   // null: strides from the table
    // In place, ordinary stores beat non-temporal ones: the loads have brought the output's
    // lines into the cache (bench/snippets' in-place runs). Whether a run is in place is known
    // only then, so a streaming kernel whose output may be one of its inputs (a parameter of
    // the output's shape) comes with a twin: its copy with ordinary stores (patched_twin).
    bool in_place_variant = false;
    for (uint32_t t = 0; t < params && streaming && tuning.streaming_stores != StreamingStores::Always && !emit_only; ++t)
        for (uint32_t r = params; r < params + results; ++r) {
            bool same_shape = true;
            for (uint32_t i = 0; i < d.rank; ++i) same_shape = same_shape && d.strides[t][i] == d.strides[r][i];
            in_place_variant = in_place_variant || same_shape;
        }
    if (isa != Isa::Ref) stats_.cold_arguments = detail::cold_argument_count(isa, params + results);
    // Allocate, look up the cache, emit. If an operation runs out of scratch registers (many
    // values live across a deep approximation), retry with fewer allocatable registers: the
    // ones given up become scratch, and more values spill.
    uint32_t code_size = 0;
    uint64_t hash = 0;
    constexpr size_t kZoneBytes = 16384;
    void* zone = scratch.allocate(kZoneBytes, 64);   // asmjit's first zone block (nullptr: its own)
    unsigned char* final_key = nullptr;
    size_t final_key_bytes = 0;
    for (;;) {
        for (uint32_t i = 0; i < program.count; ++i) {
            program.code[i].reg = -1;
            program.code[i].slot = -1;
            program.code[i].hoisted = false;
        }
        program.spill_slots = program.registers_used = program.spilled = 0;
        s = detail::allocate_registers(&program, allocatable, &scratch);
        if (s != Status::Ok) return fail(s, "compile: register allocation out of memory");
        stats_.instructions = program.count;
        stats_.registers_used = program.registers_used;
        stats_.spilled_values = program.spilled;

        // Cache key: target, lanes and stores chosen so far, the cap on the lanes emit_kernel
        // may add (SnippetTuning::lanes, or 3 beyond the caches and 4 within: a kernel
        // compiled for a small shape is not reused for a large one), register budget,
        // argument count, lowered program; on x86 the row strides too (the pointers move by
        // them as immediates, emit_next_row, and row groups take them as displacements), with
        // page lanes whether the rows would go in row groups for each lane count (which also
        // depends on n and the rows), and for short rows (emit_short_rows) the row length.
        const bool short_rows = detail::short_rows_apply(compiled_rows, isa, streaming, page_lanes);
        stats_.short_rows = short_rows;
        const size_t strides_bytes = detail::x86_isa(isa) && compiled_rows ? (params + results + short_rows) * sizeof(int64_t) : 0;   // (page lanes: AVX-512)
        size_t key_bytes = 16 + (size_t)program.count * sizeof(detail::Lir) + program.constant_count * 4 + strides_bytes;
        unsigned char* key = static_cast<unsigned char*>(scratch.allocate(key_bytes, 8));
        if (!key) return fail(Status::OutOfMemory, "compile: no memory for the cache key");
        std::memset(key, 0, key_bytes);
        uint32_t grouped = 0;
        for (uint32_t l = 2; l <= 4 && page_lanes; ++l)
            grouped |= (uint32_t)detail::row_groups_apply(&program, &row_shape, isa, l, stats_.cold_arguments, params + results) << (l - 2);
        uint32_t header[4] = {(uint32_t)isa | lanes << 8 | (uint32_t)streaming << 16 | (uint32_t)tuning.neon_table_registers << 17 |
                                  lane_cap << 18 | (uint32_t)page_lanes << 24 | (uint32_t)in_place_variant << 25 | grouped << 26 |
                                  (uint32_t)!compiled_rows << 29,
                              allocatable, params + results,
                              program.constant_count};
        std::memcpy(key, header, 16);
        for (uint32_t i = 0; i < program.count; ++i) {  // field by field: Lir has padding
            const detail::Lir& l = program.code[i];
            unsigned char* k = key + 16 + (size_t)i * sizeof(detail::Lir);
            k[0] = (unsigned char)l.kind;
            k[1] = (unsigned char)l.op;
            k[2] = l.arity;
            k[3] = (unsigned char)(l.hoisted | (l.lane0 << 1));
            std::memcpy(k + 4, &l.index, 4);
            std::memcpy(k + 8, l.args, 12);
            std::memcpy(k + 20, &l.alpha, 4);
            std::memcpy(k + 24, &l.beta, 4);
            std::memcpy(k + 28, &l.reg, 2);
            std::memcpy(k + 32, &l.slot, 4);
            std::memcpy(k + 36, &l.last_use, 4);
        }
        std::memcpy(key + 16 + (size_t)program.count * sizeof(detail::Lir), program.constants, program.constant_count * 4);
        if (strides_bytes) std::memcpy(key + key_bytes - strides_bytes, row_strides, (params + results) * sizeof(int64_t));
        if (short_rows) std::memcpy(key + key_bytes - sizeof(int64_t), &row_shape.n, sizeof(int64_t));
        hash = detail::hash_key_words(key, key_bytes);
        if (options.cache && !emit_only) {
            const KernelCache::Entry* hit = options.cache->find(hash, key, key_bytes);
            if (hit) {
                kernel_ = hit->kernel;
                stats_.code_size = hit->emitted.code_size;
                stats_.lanes = hit->emitted.lanes;
                stats_.scratch_registers = hit->emitted.scratch_registers;
                stats_.pinned_constants = hit->emitted.pinned_constants;
                stats_.shared_invariants = hit->emitted.shared_invariants;
                stats_.saved_vector_registers = hit->emitted.saved_vector_registers;
                stats_.software_pipelined = detail::software_pipelined(&program, hit->emitted.lanes, stats_.cold_arguments);
                stats_.page_lanes = page_lanes && hit->emitted.lanes >= 2;
                stats_.page_prefetch = stats_.page_lanes && detail::prefetches_next_block(&program);
                stats_.row_groups = hit->emitted.row_groups;
                kernel_in_place_ = hit->emitted.in_place_kernel;
                stats_.in_place_kernel = kernel_in_place_ != nullptr;
                stats_.cache_hit = true;
                stats_.compile_ns = detail::now_ns() - start;
                compiled_ = true;
                return Status::Ok;
            }
        }
        uint32_t scratch_peak = 0;
        uint32_t saved_registers = 0;
        uint32_t emitted_lanes = lanes;
        uint32_t pinned = 0, shared = 0;
        bool row_groups = false;
        s = isa == Isa::Neon ? detail::emit_kernel_a64(&program, allocatable, params + results, emit_only, &kernel_,
                                                       &code_size, &scratch_peak, &saved_registers, error_, sizeof error_, &pinned,
                                                       zone, zone ? kZoneBytes : 0)
                             : detail::emit_kernel(&program, isa, allocatable, lanes, streaming, params + results, emit_only, &kernel_,
                                                   &code_size, &scratch_peak, error_, sizeof error_, zone, zone ? kZoneBytes : 0,
                                                   true, lane_cap,
                                                   &emitted_lanes, &scratch, tuning.lanes == 0 && beyond_caches, &pinned,
                                                   &shared, page_lanes, compiled_rows, &row_groups,
                                                   in_place_variant ? &kernel_in_place_ : nullptr);
        stats_.scratch_registers = scratch_peak;
        stats_.pinned_constants = pinned;
        stats_.shared_invariants = shared;
        stats_.saved_vector_registers = saved_registers;
        if (s == Status::LimitExceeded && allocatable > 1) {
            allocatable = allocatable > 3 ? allocatable - 2 : 1;
            continue;
        }
        if (s != Status::Ok) { kernel_ = nullptr; return s; }
        stats_.lanes = emitted_lanes;
        stats_.software_pipelined = detail::software_pipelined(&program, emitted_lanes, stats_.cold_arguments);
        stats_.page_lanes = page_lanes && emitted_lanes >= 2;
        stats_.page_prefetch = stats_.page_lanes && detail::prefetches_next_block(&program);
        stats_.row_groups = row_groups;
        final_key = key;
        final_key_bytes = key_bytes;
        break;
    }
    stats_.code_size = code_size;
    if (emit_only) {  // assembled and checked, never executable: run() stays NotFinalized
        kernel_ = nullptr;
        stats_.compile_ns = detail::now_ns() - start;
        return Status::Ok;
    }
    stats_.in_place_kernel = kernel_in_place_ != nullptr;   // the kernel's patched copy (detail::patched_twin)
    KernelCache::Emitted emitted;
    emitted.in_place_kernel = kernel_in_place_;
    emitted.code_size = code_size;
    emitted.lanes = stats_.lanes;
    emitted.scratch_registers = stats_.scratch_registers;
    emitted.pinned_constants = stats_.pinned_constants;
    emitted.shared_invariants = stats_.shared_invariants;
    emitted.saved_vector_registers = stats_.saved_vector_registers;
    emitted.row_groups = stats_.row_groups;
    kernel_owned_ = !(options.cache && options.cache->insert(hash, final_key, final_key_bytes, kernel_, emitted));
    stats_.compile_ns = detail::now_ns() - start;
    compiled_ = true;
    return Status::Ok;
#endif
}

// >>run
Status Snippet::run(Span<const float* const> inputs, Span<float* const> outputs) const {
    return run(inputs, outputs, columns_);
}

bool Snippet::takes_in_place_kernel(Span<const float* const> inputs, Span<float* const> outputs) const {
    for (size_t r = 0; r < outputs.size && kernel_in_place_; ++r)
        for (size_t i = 0; i < inputs.size; ++i)
            if (outputs[r] == inputs[i]) return true;
    return false;
}

Status Snippet::run(Span<const float* const> inputs, Span<float* const> outputs, float* scratch) const {
    return run(inputs, outputs, scratch, 0, 1);
}

Status Snippet::run(Span<const float* const> inputs, Span<float* const> outputs, float* scratch, uint32_t part, uint32_t parts) const {
    if (!compiled_) return fail(Status::NotFinalized, "run: not compiled");
    if (isa_ == Isa::Ref && !scratch) return fail(Status::InvalidArgument, "run: no interpreter scratch");
    if (inputs.size != parameters_ || outputs.size != results_)
        return fail(Status::InvalidArgument, "run: wrong number of inputs or outputs");
    if (part >= parts) return fail(Status::InvalidArgument, "run: part out of range");
    if (stats_.elements == 0) return Status::Ok;
    for (size_t i = 0; i < inputs.size; ++i) if (!inputs[i]) return fail(Status::InvalidArgument, "run: null input");
    for (size_t i = 0; i < outputs.size; ++i) if (!outputs[i]) return fail(Status::InvalidArgument, "run: null output");
    uint32_t args = parameters_ + results_;
    // The kernel walks rows of the last dimension, `rows` at a time (the second last); the
    // dimensions before are iterated here. Row g of all total_rows is (outer index, row).
    const int64_t n = dims_[rank_ - 1];
    const uint32_t outer = rank_ >= 2 ? rank_ - 2 : 0;
    const int64_t rows = rank_ >= 2 ? dims_[rank_ - 2] : 1;
    int64_t row_strides[kSnippetMaxArgs];
    for (uint32_t t = 0; t < args; ++t) row_strides[t] = rank_ >= 2 ? strides_[t][rank_ - 2] * (int64_t)sizeof(float) : 0;
    float* ptrs[kSnippetMaxArgs];
    void* kernel = takes_in_place_kernel(inputs, outputs) ? kernel_in_place_ : kernel_;
    if (isa_ != Isa::Ref && parts == 1 && outer == 0) {
        // The common case in one kernel call from the tensors' own pointers: no index
        // arithmetic, which would be a large share of a small call (`run() on 16 floats` in
        // bench/snippets).
        for (uint32_t t = 0; t < args; ++t) ptrs[t] = const_cast<float*>(t < parameters_ ? inputs[t] : outputs[t - parameters_]);
        reinterpret_cast<void (*)(float* const*, size_t, size_t, const int64_t*)>(kernel)(ptrs, (size_t)n, (size_t)rows, row_strides);
        return Status::Ok;
    }
    bool inner_broadcast[kSnippetMaxArgs];
    for (uint32_t t = 0; t < args; ++t) inner_broadcast[t] = strides_[t][rank_ - 1] == 0 && dims_[rank_ - 1] > 1;
    int64_t total_rows = rows;
    for (uint32_t i = 0; i < outer; ++i) total_rows *= dims_[i];
    // This part's share: rows [row_begin, row_end), columns [column_begin, column_end).
    auto share = [parts](int64_t total, uint32_t k) {   // balanced, without overflow
        const int64_t q = total / parts, rest = total % parts;
        return q * k + (k < rest ? (int64_t)k : rest);
    };
    int64_t row_begin = 0, row_end = total_rows, column_begin = 0, column_end = n;
    if (parts > 1) {
        bool broadcast_result = false;
        for (uint32_t t = parameters_; t < args; ++t)
            for (uint32_t d = 0; d < rank_; ++d) broadcast_result = broadcast_result || (strides_[t][d] == 0 && dims_[d] > 1);
        if (broadcast_result) {
            if (part) return Status::Ok;
        } else if (total_rows >= parts && (n % 16 != 0 || n < kSplitColumns * (int64_t)parts)) {
            row_begin = share(total_rows, part);
            row_end = share(total_rows, part + 1);
        } else {
            column_begin = share(n, part) & ~(int64_t)15;
            column_end = part + 1 == parts ? n : share(n, part + 1) & ~(int64_t)15;
        }
    }
    for (int64_t g = row_begin; g < row_end && column_begin < column_end;) {
        const int64_t count = std::min(rows - g % rows, row_end - g);
        run_rows(inputs, outputs, scratch, kernel, g, count, column_begin, column_end, row_strides, inner_broadcast);
        g += count;
    }
    return Status::Ok;
}

void Snippet::run_rows(Span<const float* const> inputs, Span<float* const> outputs, float* scratch, void* kernel, int64_t g, int64_t count,
                       int64_t column_begin, int64_t column_end, const int64_t* row_strides, const bool* inner_broadcast,
                       float* const* results_at) const {
    const uint32_t args = parameters_ + results_;
    const uint32_t outer = rank_ >= 2 ? rank_ - 2 : 0;
    const int64_t rows = rank_ >= 2 ? dims_[rank_ - 2] : 1;
    float* ptrs[kSnippetMaxArgs];
    for (uint32_t t = 0; t < args; ++t) {
        int64_t offset = column_begin * strides_[t][rank_ - 1];
        if (rank_ >= 2) offset += g % rows * strides_[t][rank_ - 2];
        int64_t o = g / rows;                      // the outer index, last dimension fastest
        for (uint32_t i = outer; i-- > 0;) {
            offset += o % dims_[i] * strides_[t][i];
            o /= dims_[i];
        }
        ptrs[t] = t < parameters_ ? const_cast<float*>(inputs[t] + offset)
                  : results_at  ? results_at[t - parameters_]
                                : outputs[t - parameters_] + offset;
    }
    if (isa_ == Isa::Ref) {
        for (int64_t r = 0; r < count; ++r) {
            const float* in_ptrs[kSnippetMaxArgs];
            float* row_out[kSnippetMaxArgs];
            for (uint32_t t = 0; t < args; ++t) in_ptrs[t] = ptrs[t] + r * (row_strides[t] / (int64_t)sizeof(float));
            for (uint32_t t = 0; t < results_; ++t) row_out[t] = const_cast<float*>(in_ptrs[parameters_ + t]);
            detail::interpret_row(*body_, fused_, scratch, in_ptrs, row_out, inner_broadcast, column_end - column_begin);
        }
    } else {
        reinterpret_cast<void (*)(float* const*, size_t, size_t, const int64_t*)>(kernel)(
            ptrs, (size_t)(column_end - column_begin), (size_t)count, row_strides);
    }
}

bool Snippet::runs_segments(int64_t segment) const {
    return compiled_ && rank_ >= 1 && segment > 0 && dims_[rank_ - 1] % segment == 0;
}

Status Snippet::run_segments(Span<const float* const> inputs, Span<float* const> outputs, float* scratch, int64_t segment,
                             int64_t row_begin, int64_t row_end, int64_t column_begin, int64_t column_end,
                             int64_t result_row) const {
    if (!compiled_) return fail(Status::NotFinalized, "run_segments: not compiled");
    if (isa_ == Isa::Ref && !scratch) return fail(Status::InvalidArgument, "run_segments: no interpreter scratch");
    if (inputs.size != parameters_ || outputs.size != results_)
        return fail(Status::InvalidArgument, "run_segments: wrong number of inputs or outputs");
    if (!runs_segments(segment) || row_begin < 0 || column_begin < 0 || column_end > segment ||
        (uint64_t)row_end * (uint64_t)segment > stats_.elements)
        return fail(Status::InvalidArgument, "run_segments: segment or range outside the domain");
    if (result_row < 0 || (result_row > 0 && (result_row < column_end - column_begin || !row_strides_at_run_)))
        return fail(Status::InvalidArgument, "run_segments: result rows overlap, or the kernel has its row strides compiled in");
    if (row_begin >= row_end || column_begin >= column_end) return Status::Ok;
    const uint32_t args = parameters_ + results_;
    const int64_t n = dims_[rank_ - 1], per_row = n / segment;   // segments per kernel row
    const int64_t rows = rank_ >= 2 ? dims_[rank_ - 2] : 1;
    int64_t row_strides[kSnippetMaxArgs];
    bool inner_broadcast[kSnippetMaxArgs];
    for (uint32_t t = 0; t < args; ++t) {
        row_strides[t] = rank_ >= 2 ? strides_[t][rank_ - 2] * (int64_t)sizeof(float) : 0;
        if (result_row && t >= parameters_) row_strides[t] = result_row * (int64_t)sizeof(float);
        inner_broadcast[t] = strides_[t][rank_ - 1] == 0 && n > 1;
    }
    void* kernel = !result_row && takes_in_place_kernel(inputs, outputs) ? kernel_in_place_ : kernel_;
    float* results_at[kSnippetMaxArgs];
    // Whole segments lie side by side in a kernel row: a run of them is one range of columns.
    const bool whole = column_begin == 0 && column_end == segment && !result_row && per_row > 1;
    for (int64_t r = row_begin; r < row_end;) {
        // Segment r is in kernel row g, from column `column` on; when a kernel row is one
        // segment, the segments up to the end of its block of `rows` go in one call.
        const int64_t g = r / per_row, column = r % per_row * segment + column_begin;
        const int64_t count = per_row == 1 ? std::min(rows - g % rows, row_end - r) : 1;
        const int64_t segments = whole ? std::min(per_row - r % per_row, row_end - r) : 1;
        for (uint32_t t = 0; t < results_ && result_row; ++t) results_at[t] = outputs[t] + (r - row_begin) * result_row;
        run_rows(inputs, outputs, scratch, kernel, g, count, column, column + (column_end - column_begin) * segments, row_strides,
                 inner_broadcast, result_row ? results_at : nullptr);
        r += whole ? segments : count;
    }
    return Status::Ok;
}

float snippet_evaluate(SnippetOp op, const float* args, float alpha, float beta, bool fused) {
    if (op == SnippetOp::Parameter || op == SnippetOp::Scalar || op >= SnippetOp::Count) return NAN;
    detail::ScalarMath m;
    m.fused = fused;
    float a[3] = {args[0], 0, 0};
    uint32_t arity = snippet_op_arity(op);
    for (uint32_t i = 1; i < arity && i < 3; ++i) a[i] = args[i];
    return detail::eval_op(m, op, a, alpha, beta);
}

namespace detail {
template <SnippetOp Op>
void evaluate_row(const float* const* args, const int64_t* strides, float* out, size_t n, float alpha, float beta, bool fused) {
    ScalarMath m;
    m.fused = fused;
    constexpr uint32_t arity = Op == SnippetOp::Select ? 3 : Op <= SnippetOp::Pow ? 2
                               : (Op >= SnippetOp::Equal && Op <= SnippetOp::LessOrEqual) || Op == SnippetOp::PRelu ? 2 : 1;
    for (size_t i = 0; i < n; ++i) {
        float a[3] = {0, 0, 0};
        for (uint32_t k = 0; k < arity; ++k) a[k] = args[k][(int64_t)i * strides[k]];
        // the one-instruction ops inline (eval_op's own lines; the int8 tables' rows are these)
        if constexpr (Op == SnippetOp::Add) out[i] = m.add(a[0], a[1]);
        else if constexpr (Op == SnippetOp::Sub) out[i] = m.sub(a[0], a[1]);
        else if constexpr (Op == SnippetOp::Mul) out[i] = m.mul(a[0], a[1]);
        else if constexpr (Op == SnippetOp::Div) out[i] = m.div(a[0], a[1]);
        else if constexpr (Op == SnippetOp::Relu) out[i] = m.max(m.c(0.0f), a[0]);
        else out[i] = eval_op(m, Op, a, alpha, beta);   // Op is a constant: the switch folds away
    }
}
}  // namespace detail

void snippet_evaluate_row(SnippetOp op, const float* const* args, const int64_t* strides, float* out, size_t n,
                          float alpha, float beta, bool fused) {
    switch (op) {
#define TESSEL_ROW(name) \
    case SnippetOp::name: detail::evaluate_row<SnippetOp::name>(args, strides, out, n, alpha, beta, fused); return;
        TESSEL_ROW(Add) TESSEL_ROW(Sub) TESSEL_ROW(Mul) TESSEL_ROW(Div) TESSEL_ROW(Max) TESSEL_ROW(Min) TESSEL_ROW(Pow)
        TESSEL_ROW(PowerStatic) TESSEL_ROW(Sqrt) TESSEL_ROW(Reciprocal) TESSEL_ROW(Abs) TESSEL_ROW(Neg) TESSEL_ROW(Exp)
        TESSEL_ROW(Log) TESSEL_ROW(Tanh) TESSEL_ROW(Sigmoid) TESSEL_ROW(Relu) TESSEL_ROW(Clip) TESSEL_ROW(Elu)
        TESSEL_ROW(Selu) TESSEL_ROW(Erf) TESSEL_ROW(GeluErf) TESSEL_ROW(GeluTanh) TESSEL_ROW(HardSigmoid)
        TESSEL_ROW(HardSwish) TESSEL_ROW(LeakyRelu) TESSEL_ROW(PRelu) TESSEL_ROW(Softplus) TESSEL_ROW(Softsign)
        TESSEL_ROW(Swish) TESSEL_ROW(Mish) TESSEL_ROW(Floor) TESSEL_ROW(Ceil) TESSEL_ROW(Round) TESSEL_ROW(Sign)
        TESSEL_ROW(Equal) TESSEL_ROW(Greater) TESSEL_ROW(Less) TESSEL_ROW(GreaterOrEqual) TESSEL_ROW(LessOrEqual)
        TESSEL_ROW(Select)
#undef TESSEL_ROW
        default:
            for (size_t i = 0; i < n; ++i) out[i] = NAN;
    }
}

Status interpret(const SnippetBody& body, Span<const float* const> inputs, Span<float* const> outputs, bool fused) {
    Snippet snippet;
    SnippetOptions options;
    options.isa = Isa::Ref;
    options.tuning.reference_fma = fused;
    TESSEL_TRY(snippet.compile(body, options));
    return snippet.run(inputs, outputs);
}

void write_statistics(const SnippetStats& s, WriteFn write, void* user) {
    detail::write_format(write, user,
                         "isa=%s elements=%llu bytes_unfused=%llu bytes_fused=%llu shrinkage=%.2f "
                         "instructions=%u registers=%u scratch=%u spilled=%u code_size=%u compile_us=%.1f cache_hit=%d rank=%u\n",
                         isa_name(s.isa), (unsigned long long)s.elements, (unsigned long long)s.bytes_unfused,
                         (unsigned long long)s.bytes_fused, s.shrinkage, s.instructions, s.registers_used,
                         s.scratch_registers, s.spilled_values, s.code_size, (double)s.compile_ns / 1000.0, s.cache_hit ? 1 : 0,
                         s.normalized_rank);
}

// >>tokenizer implementation
namespace detail {
// A Constant node's float: value_float, or a one-element Float32 value tensor.
inline bool constant_value(const Graph& graph, NodeId id, float* value) {
    const Attribute* a = graph.find_attribute(id, "value_float");
    if (a && a->kind == AttributeKind::Float) { *value = a->f; return true; }
    a = graph.find_attribute(id, "value");
    if (a && a->kind == AttributeKind::Tensor && a->tensor && a->tensor->desc.type == ElementType::Float32 &&
        a->tensor->data && a->tensor->bytes == sizeof(float)) {
        std::memcpy(value, a->tensor->data, sizeof(float));
        return true;
    }
    if (a && a->kind == AttributeKind::Float) { *value = a->f; return true; }
    return false;
}

inline float float_attribute(const Graph& graph, NodeId id, const char* name, float fallback) {
    const Attribute* a = graph.find_attribute(id, name);
    if (a && a->kind == AttributeKind::Float) return a->f;
    if (a && a->kind == AttributeKind::Int) return (float)a->i;
    return fallback;
}

inline bool node_shape(const Graph& graph, NodeId id, SnippetShape* shape) {
    const Node& n = graph.node(id);
    if (n.num_outputs != 1 || !n.outputs) return false;
    const TensorDesc& d = n.outputs[0];
    if (d.type != ElementType::Float32 || d.rank > kSnippetMaxRank) return false;
    shape->rank = d.rank;
    for (int i = 0; i < d.rank; ++i) {
        if (d.dims[i] < 0) return false;
        shape->dims[i] = d.dims[i];
    }
    return true;
}
}  // namespace detail

Status snippet_node_operation(const Graph& graph, NodeId v, SnippetOp* op_out, float* alpha_out, float* beta_out) {
    SnippetOp op;
    if (snippet_op_from_name(graph.node(v).op, &op) != Status::Ok) return Status::NotFound;
    float alpha, beta;
    snippet_op_default_attributes(op, &alpha, &beta);
    switch (op) {
        case SnippetOp::Clip:
            alpha = detail::float_attribute(graph, v, "min", alpha);
            beta = detail::float_attribute(graph, v, "max", beta);
            break;
        case SnippetOp::Elu: case SnippetOp::LeakyRelu: case SnippetOp::Swish:
            alpha = detail::float_attribute(graph, v, "alpha", alpha);
            break;
        case SnippetOp::HardSigmoid:
            alpha = detail::float_attribute(graph, v, "alpha", alpha);
            beta = detail::float_attribute(graph, v, "beta", beta);
            break;
        case SnippetOp::Selu:
            alpha = detail::float_attribute(graph, v, "alpha", alpha);
            beta = detail::float_attribute(graph, v, "gamma", beta);
            break;
        case SnippetOp::GeluErf: {
            const Attribute* a = graph.find_attribute(v, "approximate");
            if (a && a->kind == AttributeKind::String && a->s == StringView("tanh")) op = SnippetOp::GeluTanh;
            break;
        }
        default: break;
    }
    *op_out = op;
    *alpha_out = alpha;
    *beta_out = beta;
    return Status::Ok;
}

bool node_is_fusible(const Graph& graph, NodeId id) {
    SnippetShape shape;
    if (!detail::node_shape(graph, id, &shape)) return false;
    const Node& n = graph.node(id);
    if (n.op == StringView("Constant")) {
        float value;
        return n.num_inputs == 0 && detail::shape_elements(shape) == 1 && detail::constant_value(graph, id, &value);
    }
    SnippetOp op;
    if (snippet_op_from_name(n.op, &op) != Status::Ok) return false;
    uint32_t arity = snippet_op_arity(op);
    for (uint32_t i = 0; i < n.num_inputs; ++i) {  // a Bool condition or an int tensor stays outside
        const Node& producer = graph.node(n.inputs[i].producer);
        if (!producer.outputs || n.inputs[i].port >= producer.num_outputs ||
            producer.outputs[n.inputs[i].port].type != ElementType::Float32)
            return false;
    }
    if (op == SnippetOp::Clip) return n.num_inputs >= 1 && n.num_inputs <= 3;  // ONNX min/max inputs
    return n.num_inputs == arity;
}

// The seed's rule 3 ("the operation is not a predecessor of a topology output") is not
// applied, on purpose. In OpenVINO it keeps the names of output tensors on the original
// nodes; it is not needed for correctness or schedulability. Here an island member whose
// value leaves the island (read outside it, or by nobody: a graph output) is a result of
// the body, stored to its own tensor, and build_island_body reports its node id in
// output_nodes, so every graph output stays addressable by its node. Applying the rule
// would keep every chain that ends in a graph output unfused (a model ending in GELU would
// walk its tensors five times instead of once) and gain nothing.
Status tokenize(const Graph& graph, const TokenizeOptions& options, Arena* arena, Tokenization* result) {
    if (!graph.finalized()) return Status::NotFinalized;
    if (!arena || !result || options.max_arguments < 2 || options.max_arguments > kSnippetMaxArgs ||
        options.max_island_nodes == 0)
        return Status::InvalidArgument;
    uint32_t n = graph.node_count();
    uint32_t* island = arena->allocate_array<uint32_t>(n + 1);
    if (!island) return Status::OutOfMemory;
    Arena scratch;
    uint32_t* position = scratch.allocate_array<uint32_t>(n + 1);
    uint8_t* in_set = scratch.allocate_array<uint8_t>(n + 1);   // 1: candidate member, 2: visited
    NodeId* stack = scratch.allocate_array<NodeId>(n + 1);
    NodeId* members = scratch.allocate_array<NodeId>(n + 1);
    uint32_t* island_size = scratch.allocate_array<uint32_t>(n + 1);
    uint32_t* island_head = scratch.allocate_array<uint32_t>(n + 1);  // members linked per island
    uint32_t* next_member = scratch.allocate_array<uint32_t>(n + 1);
    NodeId* visited = scratch.allocate_array<NodeId>(n + 1);
    // External inputs already counted by the running valid(): producer stamped, and the port.
    uint32_t* input_stamp = scratch.allocate_array<uint32_t>(n + 1);
    uint32_t* input_port = scratch.allocate_array<uint32_t>(n + 1);
    uint32_t stamp = 0;
    if (!position || !in_set || !stack || !members || !island_size || !island_head || !next_member || !visited ||
        !input_stamp || !input_port)
        return Status::OutOfMemory;
    Span<const NodeId> order = graph.topological_order();
    for (uint32_t i = 0; i < n; ++i) { position[order[i]] = i; island[i] = kNoIsland; in_set[i] = 0; input_stamp[i] = 0; }
    uint32_t islands = 0;

    // Whether the set `members` (marked in_set=1) is a valid island.
    auto valid = [&](uint32_t count, NodeId newest) -> bool {
        // Keep-apart edges inside, argument budget, output domain.
        uint32_t inputs = 0, outputs = 0;
        SnippetShape domain;
        bool domain_ok = true;
        if (++stamp == 0) {   // wrapped: no producer may carry a stale stamp
            for (uint32_t i = 0; i < n; ++i) input_stamp[i] = 0;
            stamp = 1;
        }
        for (uint32_t k = 0; k < count; ++k) {
            NodeId v = members[k];
            const Node& node = graph.node(v);
            for (uint32_t e = 0; e < node.num_inputs; ++e) {
                const Edge& edge = node.inputs[e];
                if (in_set[edge.producer] == 1) {
                    if (edge.keep_apart) return false;
                    continue;
                }
                // Count each external (producer, port) once: a stamp per producer answers at
                // once; only another port of a producer already seen scans the edges before.
                bool seen = input_stamp[edge.producer] == stamp && input_port[edge.producer] == edge.port;
                if (input_stamp[edge.producer] != stamp) {
                    input_stamp[edge.producer] = stamp;
                    input_port[edge.producer] = edge.port;
                }
                for (uint32_t k2 = 0; k2 < k && !seen && input_port[edge.producer] != edge.port; ++k2) {
                    const Node& other = graph.node(members[k2]);
                    for (uint32_t e2 = 0; e2 < other.num_inputs; ++e2)
                        if (other.inputs[e2].producer == edge.producer && other.inputs[e2].port == edge.port) { seen = true; break; }
                }
                for (uint32_t e2 = 0; e2 < e && !seen; ++e2)
                    if (node.inputs[e2].producer == edge.producer && node.inputs[e2].port == edge.port) seen = true;
                if (!seen && ++inputs + outputs > options.max_arguments) return false;
            }
            Span<const NodeId> succ = graph.successors(v);
            bool output = succ.size == 0;
            for (NodeId s : succ) if (in_set[s] != 1) output = true;
            if (output) {
                ++outputs;
                SnippetShape shape;
                if (!detail::node_shape(graph, v, &shape) || !detail::broadcast_shapes(domain, shape, &domain)) domain_ok = false;
            }
        }
        if (!domain_ok || inputs + outputs > options.max_arguments) return false;
        // No cycle: no path leaves the set and comes back, in the graph where every other
        // island is contracted to one vertex (reaching one member reaches them all). Such a
        // path only runs through nodes placed before the newest member in topological order.
        uint32_t limit = position[newest], top = 0, seen_count = 0;
        auto visit = [&](NodeId s) {
            if (in_set[s] != 0 || position[s] >= limit) return;
            in_set[s] = 2;
            stack[top++] = s;
            visited[seen_count++] = s;
            if (island[s] == kNoIsland) return;
            for (uint32_t m = island_head[island[s]]; m != kNoIsland; m = next_member[m])
                if (in_set[m] == 0) { in_set[m] = 2; stack[top++] = m; visited[seen_count++] = m; }
        };
        for (uint32_t k = 0; k < count; ++k)
            for (NodeId s : graph.successors(members[k])) visit(s);
        bool cycle = false;
        while (top && !cycle) {
            NodeId v = stack[--top];
            for (NodeId s : graph.successors(v)) {
                if (in_set[s] == 1) { cycle = true; break; }
                visit(s);
            }
        }
        for (uint32_t k = 0; k < seen_count; ++k) in_set[visited[k]] = 0;
        return !cycle;
    };

    for (uint32_t oi = 0; oi < n; ++oi) {
        NodeId v = order[oi];
        if (!node_is_fusible(graph, v)) continue;
        uint32_t count = 0;
        members[count++] = v;
        in_set[v] = 1;
        // Try each neighbouring island (through a fusible producer), keeping those that fit.
        const Node& node = graph.node(v);
        for (uint32_t e = 0; e < node.num_inputs; ++e) {
            NodeId producer = node.inputs[e].producer;
            uint32_t candidate = island[producer];
            if (candidate == kNoIsland || in_set[producer] == 1 || node.inputs[e].keep_apart ||
                count + island_size[candidate] > options.max_island_nodes)
                continue;
            uint32_t before = count;
            for (uint32_t m = island_head[candidate]; m != kNoIsland; m = next_member[m]) { members[count++] = m; in_set[m] = 1; }
            if (!valid(count, v)) {
                for (uint32_t k = before; k < count; ++k) in_set[members[k]] = 0;
                count = before;
            }
        }
        if (!valid(count, v)) {  // the node alone always fits unless its own budget is too big
            for (uint32_t k = 0; k < count; ++k) in_set[members[k]] = 0;
            continue;
        }
        // Commit: the merged island takes a new id; absorbed islands become empty.
        uint32_t id = islands++;
        island_head[id] = kNoIsland;
        island_size[id] = count;
        for (uint32_t k = 0; k < count; ++k) {
            NodeId m = members[k];
            island[m] = id;
            next_member[m] = island_head[id];
            island_head[id] = m;
            in_set[m] = 0;
        }
    }
    // Renumber islands densely in order of first appearance by node id.
    uint32_t* dense = scratch.allocate_array<uint32_t>(islands + 1);
    if (!dense) return Status::OutOfMemory;
    for (uint32_t i = 0; i < islands; ++i) dense[i] = kNoIsland;
    uint32_t next = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (island[i] != kNoIsland) {
            if (dense[island[i]] == kNoIsland) dense[island[i]] = next++;
            island[i] = dense[island[i]];
        }
    result->island_of = Span<const uint32_t>(island, n);
    result->island_count = next;
    return list_island_nodes(graph, arena, result);
}

Status list_island_nodes(const Graph& graph, Arena* arena, Tokenization* t) {
    if (!graph.finalized()) return Status::NotFinalized;
    const uint32_t n = graph.node_count();
    if (!arena || !t || t->island_of.size != n) return Status::InvalidArgument;
    uint32_t* start = arena->allocate_array<uint32_t>((size_t)t->island_count + 1);
    NodeId* nodes = arena->allocate_array<NodeId>((size_t)n + 1);
    if (!start || !nodes) return Status::OutOfMemory;
    for (uint32_t k = 0; k <= t->island_count; ++k) start[k] = 0;
    for (uint32_t v = 0; v < n; ++v) {
        uint32_t k = t->island_of[v];
        if (k == kNoIsland) continue;
        if (k >= t->island_count) return Status::InvalidArgument;
        ++start[k + 1];
    }
    for (uint32_t k = 0; k < t->island_count; ++k) start[k + 1] += start[k];
    uint32_t* fill = arena->allocate_array<uint32_t>((size_t)t->island_count + 1);
    if (!fill) return Status::OutOfMemory;
    for (uint32_t k = 0; k < t->island_count; ++k) fill[k] = start[k];
    for (NodeId v : graph.topological_order())
        if (t->island_of[v] != kNoIsland) nodes[fill[t->island_of[v]]++] = v;
    t->island_start = Span<const uint32_t>(start, (size_t)t->island_count + 1);
    t->island_nodes = Span<const NodeId>(nodes, start[t->island_count]);
    return Status::Ok;
}

// >>island bodies
Status build_island_body(const Graph& graph, const Tokenization& t, uint32_t island, SnippetBody* body,
                         NodeId* input_nodes, uint32_t* input_count, NodeId* output_nodes, uint32_t* output_count,
                         uint32_t* input_ports) {
    if (!graph.finalized()) return Status::NotFinalized;
    if (!body || island >= t.island_count || t.island_of.size != graph.node_count()) return Status::InvalidArgument;
    // Small blocks: a 64 KB block per island is taken from and given back to the system at
    // each call when it sits at the top of the heap.
    Arena scratch(2048);
    // The island's nodes in topological order: from the lists, or by walking the graph.
    Span<const NodeId> members;
    if (t.island_start.size == (size_t)t.island_count + 1) {
        const uint32_t begin = t.island_start[island], end = t.island_start[island + 1];
        if (begin > end || end > t.island_nodes.size) return Status::InvalidArgument;
        members = Span<const NodeId>(t.island_nodes.data + begin, end - begin);
    } else {
        uint32_t count = 0;
        for (NodeId v : graph.topological_order()) count += t.island_of[v] == island;
        NodeId* found = scratch.allocate_array<NodeId>((size_t)count + 1);
        if (!found) return Status::OutOfMemory;
        count = 0;
        for (NodeId v : graph.topological_order()) if (t.island_of[v] == island) found[count++] = v;
        members = Span<const NodeId>(found, count);
    }
    // Each member's body value (no per-graph array: a model has many islands).
    for (NodeId v : members)
        if (v >= graph.node_count() || t.island_of[v] != island) return Status::InvalidArgument;
    detail::NodeMap<ValueId> values;
    if (!values.init(&scratch, members.data, (uint32_t)members.size, kNoValue)) return Status::OutOfMemory;
    auto value_of = [&](NodeId v) { return values.find(v); };
    struct External { NodeId producer; uint32_t port; ValueId value; };
    External externals[kSnippetMaxArgs];
    uint32_t inputs = 0, outputs = 0;
    // Parameters first (a body's parameters come before their uses), in first-read order.
    for (NodeId v : members) {
        const Node& node = graph.node(v);
        for (uint32_t e = 0; e < node.num_inputs; ++e) {
            const Edge& edge = node.inputs[e];
            if (t.island_of[edge.producer] == island) continue;
            bool seen = false;
            for (uint32_t k = 0; k < inputs && !seen; ++k) seen = externals[k].producer == edge.producer && externals[k].port == edge.port;
            if (seen) continue;
            if (inputs == kSnippetMaxArgs) return Status::LimitExceeded;
            const Node& producer = graph.node(edge.producer);
            if (edge.port >= producer.num_outputs || !producer.outputs) return Status::InvalidArgument;
            const TensorDesc& d = producer.outputs[edge.port];
            if (d.rank > kSnippetMaxRank) return Status::LimitExceeded;
            ValueId value;
            TESSEL_TRY(body->parameter(Span<const int64_t>(d.dims, d.rank), &value));
            input_nodes[inputs] = edge.producer;
            if (input_ports) input_ports[inputs] = edge.port;
            externals[inputs++] = External{edge.producer, edge.port, value};
        }
    }
    for (NodeId v : members) {
        const Node& node = graph.node(v);
        ValueId* own = value_of(v);   // v's value in the body, defined below
        ValueId args[3];
        for (uint32_t e = 0; e < node.num_inputs && e < 3; ++e) {
            const Edge& edge = node.inputs[e];
            if (t.island_of[edge.producer] == island) {
                const ValueId* produced = value_of(edge.producer);
                if (!produced || *produced == kNoValue) return Status::InvalidArgument;  // not listed, or listed later
                args[e] = *produced;
                continue;
            }
            for (uint32_t k = 0; k < inputs; ++k)
                if (externals[k].producer == edge.producer && externals[k].port == edge.port) args[e] = externals[k].value;
        }
        if (node.op == StringView("Constant")) {
            float value;
            if (!detail::constant_value(graph, v, &value)) return Status::InvalidArgument;
            TESSEL_TRY(body->scalar(value, own));
        } else {
            SnippetOp op;
            float alpha, beta;
            if (snippet_node_operation(graph, v, &op, &alpha, &beta) != Status::Ok) return Status::InvalidArgument;
            if (op == SnippetOp::Clip && node.num_inputs > 1) {  // ONNX Clip(x, min, max): tensors
                ValueId x = args[0];
                if (node.num_inputs > 1) TESSEL_TRY(body->binary(SnippetOp::Max, args[1], x, &x));   // NaN in x stays
                if (node.num_inputs > 2) TESSEL_TRY(body->binary(SnippetOp::Min, args[2], x, &x));
                *own = x;
            } else {
                TESSEL_TRY(body->add(op, Span<const ValueId>(args, snippet_op_arity(op)), alpha, beta, own));
            }
        }
        bool output = graph.successors(v).size == 0;
        for (NodeId succ : graph.successors(v)) if (t.island_of[succ] != island) output = true;
        if (output) {
            if (inputs + outputs == kSnippetMaxArgs) return Status::LimitExceeded;
            TESSEL_TRY(body->result(*own));
            output_nodes[outputs++] = v;
        }
    }
    *input_count = inputs;
    *output_count = outputs;
    return Status::Ok;
}


// >>gemm implementation
CacheSizes cpu_cache_sizes() {
    static const CacheSizes sizes = [] {
        CacheSizes s;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0u), "c"(0u));
        unsigned max_leaf = eax;
        __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0x80000000u), "c"(0u));
        unsigned max_extended = eax;
        // Intel's leaf 4 first: AMD answers it with zeros and describes its caches in 0x8000001D.
        unsigned leaves[2] = {max_leaf >= 4 ? 4u : 0u, max_extended >= 0x8000001Du ? 0x8000001Du : 0u};
        for (unsigned leaf : leaves) {
            if (!leaf || s.l1d) continue;
            for (unsigned sub = 0; sub < 16; ++sub) {
                __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(leaf), "c"(sub));
                unsigned type = eax & 31, level = (eax >> 5) & 7;
                if (type == 0) break;
                if (type == 2) continue;   // instruction cache
                uint64_t bytes = (uint64_t)((ebx >> 22) + 1) * (((ebx >> 12) & 1023) + 1) * ((ebx & 4095) + 1) * ((uint64_t)ecx + 1);
                if (level == 1) s.l1d = bytes;
                else if (level == 2) s.l2 = bytes;
                else if (level == 3) s.l3 = bytes;
            }
        }
        // AMD's older leaves, where a hypervisor leaves 0x8000001D empty: L1d and L2 in KB,
        // L3 in 512 KB units.
        if (!s.l1d && max_extended >= 0x80000006u) {
            __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0x80000005u), "c"(0u));
            s.l1d = (uint64_t)(ecx >> 24) << 10;
            __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0x80000006u), "c"(0u));
            s.l2 = (uint64_t)(ecx >> 16) << 10;
            s.l3 = (uint64_t)(edx >> 18) << 19;
        }
#elif defined(_SC_LEVEL1_DCACHE_SIZE)
        long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
        s.l1d = l1 > 0 ? (uint64_t)l1 : 0;
        s.l2 = l2 > 0 ? (uint64_t)l2 : 0;
        s.l3 = l3 > 0 ? (uint64_t)l3 : 0;
#endif
        if (!s.l1d) s.l1d = 32u << 10;
        if (!s.l2) s.l2 = 512u << 10;
        if (!s.l3) s.l3 = 4u << 20;
        return s;
    }();
    return sizes;
}

namespace detail {
constexpr int kGemmPortableRows = 4, kGemmPortableCols = 16;

// Gemm::run's store operations on value v of C element c: the residual, then the snippets'
// Max(lo, v) and Min(hi, v).
inline float gemm_store_ops(const Gemm::TileParams& params, float v, const float* c) {
    if (params.residual) {
        const float r = *reinterpret_cast<const float*>(reinterpret_cast<const char*>(c) + params.residual_bytes);
        v = params.residual == 2 ? r + v : v + r;
    }
    if (!params.clamp) return v;
    v = params.lo > v ? params.lo : v;
    return params.hi < v ? params.hi : v;
}

// What a tile stores for accumulator `acc` at C element `c` (row i of the tile): alpha acc,
// plus the row bias or beta C, then the store operations.
inline float gemm_tile_value(const Gemm::TileParams& params, float acc, const float* c, int64_t i) {
    return gemm_store_ops(params, params.read_c == 2 ? params.alpha * acc + params.row_bias[i]
                                  : params.read_c   ? params.alpha * acc + params.beta * *c
                                                    : params.alpha * acc, c);
}

// The portable tile: what the JIT tiles compute, for targets without them.
inline void gemm_portable_tile(const float* a, const float* b, float* c, int64_t ldc, int64_t k, int64_t rows,
                               int64_t cols, const Gemm::TileParams& params) {
    float acc[kGemmPortableRows][kGemmPortableCols] = {};
    for (int64_t p = 0; p < k; ++p, a += kGemmPortableRows, b += kGemmPortableCols)
        for (int i = 0; i < kGemmPortableRows; ++i)
            for (int j = 0; j < kGemmPortableCols; ++j) acc[i][j] += a[i] * b[j];
    for (int64_t i = 0; i < rows; ++i, c += ldc)
        for (int64_t j = 0; j < cols; ++j) c[j] = gemm_tile_value(params, acc[i][j], c + j, i);
}

#ifndef TESSEL_NO_JIT
#if defined(__x86_64__) || defined(_M_X64)
// K steps ahead that by_rows tiles fetch B's rows: past an L2 hit's latency at a tile's pace;
// and that column tiles fetch A's columns when asked (TileParams::fetch_a): past a line
// another core holds.
constexpr uint32_t kGemmRowsAhead = 8, kGemmColumnsAhead = 16;

// One x86 tile: rows x vectors accumulators (ymm/zmm 0..), B's vectors in the registers above
// them, A's element of a row broadcast once into a register for the row's FMAs (an embedded
// {1to16} operand loads it per FMA: the bound on CPUs with two FMA and two vector load ports,
// as Zen 5). Arguments
// (System V): rdi A panel (mr floats per k), rsi B panel (nr floats per k), rdx C, rcx ldc
// bytes, r8 k, r9 TileParams. The K loop runs 4 steps per iteration, then single steps.
// by_rows: rsi is B's first column and row p is at rsi + 4 b_rows[p] (r10 walks b_rows); the
// last vector of a masked tile is a masked load, so no column past the tile's is read.
// by_cols: rdi is A's first row and column p is at rdi + 4 a_cols[p] (r10 walks a_cols).
// The store part is the same for every kind of tile of one shape: emitted once, at the first
// tile whose *shared_store is unbound (bound there), and jumped to by the others.
inline void emit_gemm_tile_x86(asmjit::x86::Assembler& a, Isa isa, uint32_t mr, uint32_t nr, uint32_t rows,
                               uint32_t vectors, bool masked, bool by_rows, bool packing, bool by_cols, asmjit::Label* shared_store) {
    namespace x86 = asmjit::x86;
    const bool wide = isa == Isa::Avx512;
    const uint32_t vb = wide ? 64 : 32, top = wide ? 28 : 12;   // registers at and above `top`: B, broadcast, store temporaries
    auto v = [&](uint32_t id) -> x86::Vec { return wide ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id)); };
    auto acc = [&](uint32_t i, uint32_t j) { return v(i * vectors + j); };
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < vectors; ++j) a.vxorps(acc(i, j), acc(i, j), acc(i, j));
    if (by_rows) {
        a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, b_rows)));
        if (packing) a.mov(x86::r11, x86::qword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, pack_to)));
        if (masked) {
            if (wide) a.kmovw(x86::k1, x86::word_ptr(x86::r9, 12));
            else a.vmovdqu(v(top + 3), x86::ptr(x86::r9, 16));
        }
    }
    if (by_cols) a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, a_cols)));
    {   // C's lines fetched for writing while the K loop runs: where C is a conv's fresh output (in no
        // cache), a short K loop (a 3-channel stem's 27) would otherwise wait for them at the stores.
        // A masked row leaves out the line of its last vector's end: past its columns lie another part's.
        const uint32_t bytes = vectors * vb;
        a.mov(x86::rax, x86::rdx);
        for (uint32_t i = 0; i < rows; ++i) {
            for (uint32_t off = 0; off < bytes; off += 64) a.prefetchw(x86::ptr(x86::rax, (int32_t)off));
            if (!masked) a.prefetchw(x86::ptr(x86::rax, (int32_t)(bytes - 4)));
            if (i + 1 < rows) a.add(x86::rax, x86::rcx);
        }
    }
    auto step = [&](int32_t u) {
        if (by_rows) {
            a.mov(x86::rax, x86::qword_ptr(x86::r10, u * 8));
            for (uint32_t j = 0; j < vectors; ++j) {
                x86::Mem bj = x86::ptr(x86::rsi, x86::rax, 2, (int32_t)(j * vb));
                if (!masked || j + 1 < vectors) a.vmovups(v(top + j), bj);
                else if (wide) a.k(x86::k1).z().vmovups(v(top + j), bj);
                else a.vmaskmovps(v(top + j), v(top + 3), bj);
                // The packed panel's row u: masked lanes were loaded as zeros, as packing pads.
                if (packing) a.vmovups(x86::ptr(x86::r11, (int32_t)(u * nr * 4 + j * vb)), v(top + j));
            }
            // The next panel's part of this row, into L2 for its first tile: B's rows are too
            // many streams for the hardware prefetchers.
            if (packing)
                for (uint32_t j = 0; j < vectors; ++j) a.prefetcht1(x86::ptr(x86::rsi, x86::rax, 2, (int32_t)(nr * 4 + j * vb)));
        } else {
            for (uint32_t j = 0; j < vectors; ++j) a.vmovups(v(top + j), x86::ptr(x86::rsi, (int32_t)(u * nr * 4 + j * vb)));
        }
        if (by_cols) a.mov(x86::rax, x86::qword_ptr(x86::r10, u * 8));
        for (uint32_t i = 0; i < rows; ++i) {
            x86::Mem ai = by_cols ? x86::ptr(x86::rdi, x86::rax, 2, (int32_t)(i * 4)) : x86::ptr(x86::rdi, (int32_t)((u * mr + i) * 4));
            if (wide) {
                const x86::Vec row = v(top + 2 + i % 2);
                a.vbroadcastss(row, ai);
                for (uint32_t j = 0; j < vectors; ++j) a.vfmadd231ps(acc(i, j), v(top + j), row);
            } else {
                a.vbroadcastss(v(top + 2), ai);
                for (uint32_t j = 0; j < vectors; ++j) a.vfmadd231ps(acc(i, j), v(top + j), v(top + 2));
            }
        }
    };
    asmjit::Label quad = a.newLabel(), single = a.newLabel(), single_loop = a.newLabel(), store = a.newLabel();
    a.cmp(x86::r8, 4);
    a.jb(single);
    a.bind(quad);
    // The lines of the operand read by offsets (r10 walks them; base: its first element) `ahead`
    // K steps on into L1, `bytes` per step; none past the offsets' k entries are read.
    auto fetch_ahead = [&](const x86::Gp& base, uint32_t ahead, uint32_t bytes, asmjit::Label skip) {
        a.cmp(x86::r8, (int32_t)(ahead + 4));
        a.jb(skip);
        for (int32_t u = 0; u < 4; ++u) {
            a.mov(x86::rax, x86::qword_ptr(x86::r10, (int32_t)((u + ahead) * 8)));
            for (uint32_t off = 0; off < bytes; off += 64) a.prefetcht0(x86::ptr(base, x86::rax, 2, (int32_t)off));
            a.prefetcht0(x86::ptr(base, x86::rax, 2, (int32_t)(bytes - 4)));   // the last line when not aligned
        }
        a.bind(skip);
    };
    if (by_rows) fetch_ahead(x86::rsi, kGemmRowsAhead, vectors * vb, a.newLabel());   // rows a plane apart defeat the hardware prefetchers
    if (by_cols) {   // when asked (TileParams::fetch_a)
        asmjit::Label skip = a.newLabel();
        a.cmp(x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, fetch_a)), 0);
        a.je(skip);
        fetch_ahead(x86::rdi, kGemmColumnsAhead, rows * 4, skip);
    }
    for (int32_t u = 0; u < 4; ++u) step(u);
    {   // A packed before run() (a conv's weights, megabytes read once per inference; a column tile's B)
        // streams from memory: ask for it 4 KB ahead, four steps' lines per four steps. A packed
        // by run() is in L2.
        asmjit::Label near = a.newLabel();
        a.cmp(x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, stream)), 0);
        a.je(near);
        if (by_cols) for (uint32_t line = 0; line < 4 * nr * 4; line += 64) a.prefetcht1(x86::ptr(x86::rsi, (int32_t)(4096 + line)));
        else for (uint32_t line = 0; line < 4 * mr * 4; line += 64) a.prefetcht1(x86::ptr(x86::rdi, (int32_t)(4096 + line)));
        a.bind(near);
    }
    if (by_cols) a.add(x86::r10, 32);
    else a.add(x86::rdi, (int32_t)(4 * mr * 4));
    if (by_rows) a.add(x86::r10, 32);
    else a.add(x86::rsi, (int32_t)(4 * nr * 4));
    if (packing) a.add(x86::r11, (int32_t)(4 * nr * 4));
    a.sub(x86::r8, 4);
    a.cmp(x86::r8, 4);
    a.jae(quad);
    a.bind(single);
    a.test(x86::r8, x86::r8);
    a.jz(store);
    a.bind(single_loop);
    step(0);
    if (by_cols) a.add(x86::r10, 8);
    else a.add(x86::rdi, (int32_t)(mr * 4));
    if (by_rows) a.add(x86::r10, 8);
    else a.add(x86::rsi, (int32_t)(nr * 4));
    if (packing) a.add(x86::r11, (int32_t)(nr * 4));
    a.sub(x86::r8, 1);
    a.jnz(single_loop);
    a.bind(store);
    if (shared_store->isValid()) {
        a.jmp(*shared_store);
        return;
    }
    *shared_store = a.newLabel();
    a.bind(*shared_store);
    // C = alpha acc (+ beta C): alpha and beta in the B registers, C's elements through a temporary.
    x86::Vec alpha = v(top), beta = v(top + 1), tmp = v(top + 2), mask = v(top + 3);
    a.vbroadcastss(alpha, x86::dword_ptr(x86::r9, 0));
    a.vbroadcastss(beta, x86::dword_ptr(x86::r9, 4));
    if (masked) {
        if (wide) a.kmovw(x86::k1, x86::word_ptr(x86::r9, 12));
        else a.vmovdqu(mask, x86::ptr(x86::r9, 16));
    }
    auto load_c = [&](x86::Vec dst, const x86::Mem& m, bool partial) {
        if (!partial) a.vmovups(dst, m);
        else if (wide) a.k(x86::k1).z().vmovups(dst, m);
        else a.vmaskmovps(dst, mask, m);
    };
    auto store_c = [&](const x86::Mem& m, x86::Vec src, bool partial) {
        if (!partial) a.vmovups(m, src);
        else if (wide) a.k(x86::k1).vmovups(m, src);
        else a.vmaskmovps(m, mask, src);
    };
    // The values in the accumulators (pass 0: C read, beta; 1: C overwritten; 2: row bias
    // added), then the residual, the clamp and one store per accumulator.
    asmjit::Label overwrite = a.newLabel(), biased = a.newLabel(), residual = a.newLabel(), clamp = a.newLabel();
    asmjit::Label stores = a.newLabel();
    a.cmp(x86::dword_ptr(x86::r9, 8), 0);
    a.je(overwrite);
    a.cmp(x86::dword_ptr(x86::r9, 8), 2);
    a.je(biased);
    for (int pass = 0; pass < 3; ++pass) {
        if (pass == 1) a.bind(overwrite);
        if (pass == 2) {
            a.bind(biased);
            a.mov(x86::rax, x86::qword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, row_bias)));
        }
        if (pass == 0) a.push(x86::rdx);
        for (uint32_t i = 0; i < rows; ++i) {
            if (pass == 2) a.vbroadcastss(tmp, x86::dword_ptr(x86::rax, (int32_t)(i * 4)));
            for (uint32_t j = 0; j < vectors; ++j) {
                a.vmulps(acc(i, j), acc(i, j), alpha);
                if (pass == 0) {
                    load_c(tmp, x86::ptr(x86::rdx, (int32_t)(j * vb)), masked && j + 1 == vectors);
                    a.vfmadd231ps(acc(i, j), tmp, beta);
                } else if (pass == 2) {
                    a.vaddps(acc(i, j), acc(i, j), tmp);
                }
            }
            if (pass == 0 && i + 1 < rows) a.add(x86::rdx, x86::rcx);
        }
        if (pass == 0) a.pop(x86::rdx);
        if (pass < 2) a.jmp(residual);
    }
    a.bind(residual);
    {   // R + v or v + R, the island's order (the NaN an addition of two NaNs returns)
        asmjit::Label second = a.newLabel();
        a.cmp(x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, residual)), 0);
        a.je(clamp);
        a.mov(x86::rax, x86::qword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, residual_bytes)));
        a.cmp(x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, residual)), 2);
        for (int first = 1; first >= 0; --first) {
            if (first) a.jne(second);
            else a.bind(second);
            a.push(x86::rdx);
            for (uint32_t i = 0; i < rows; ++i) {
                for (uint32_t j = 0; j < vectors; ++j) {
                    load_c(tmp, x86::ptr(x86::rdx, x86::rax, 0, (int32_t)(j * vb)), masked && j + 1 == vectors);
                    if (first) a.vaddps(acc(i, j), tmp, acc(i, j));
                    else a.vaddps(acc(i, j), acc(i, j), tmp);
                }
                if (i + 1 < rows) a.add(x86::rdx, x86::rcx);
            }
            a.pop(x86::rdx);
            if (first) a.jmp(clamp);
        }
    }
    a.bind(clamp);
    a.cmp(x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, clamp)), 0);
    a.je(stores);
    {   // MAXPS and MINPS return their second operand unless the first wins: Max(lo, v), Min(hi, v)
        const x86::Vec lo = alpha, hi = beta;
        a.vbroadcastss(lo, x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, lo)));
        a.vbroadcastss(hi, x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TileParams, hi)));
        for (uint32_t i = 0; i < rows; ++i)
            for (uint32_t j = 0; j < vectors; ++j) {
                a.vmaxps(acc(i, j), lo, acc(i, j));
                a.vminps(acc(i, j), hi, acc(i, j));
            }
    }
    a.bind(stores);
    for (uint32_t i = 0; i < rows; ++i) {
        for (uint32_t j = 0; j < vectors; ++j) store_c(x86::ptr(x86::rdx, (int32_t)(j * vb)), acc(i, j), masked && j + 1 == vectors);
        if (i + 1 < rows) a.add(x86::rdx, x86::rcx);
    }
    a.vzeroupper();
    a.ret();
}

// Every tile of a target in one code buffer, generated once per process (thread-safe static):
// the tiles over packed B panels, then the same tiles reading B by rows (from fn + mr 2 vectors
// on: Gemm::row_tiles_), then row tiles that also pack (Gemm::packing_row_tiles_), then tiles
// reading A by columns (Gemm::column_tiles_).
constexpr int kGemmTileKinds = 4;
struct GemmTileTable {
    Gemm::TileFn fn[kGemmTileKinds * 16 * 2 * 2] = {};
    Status status = Status::Unsupported;
};

inline GemmTileTable make_gemm_tiles(Isa isa, uint32_t mr, uint32_t nr) {
    using namespace asmjit;
    GemmTileTable t;
    const uint32_t vectors = nr / isa_vector_floats(isa);
    void* entries[kGemmTileKinds * 16 * 2 * 2];
    t.status = assemble_jit_entries<x86::Assembler>(kGemmTileKinds * mr * 2 * vectors, entries, [&](x86::Assembler& a, const Label* labels) {
        Label stores[16 * 2 * 2];   // per rows, vectors and mask: the kinds' shared store part
        for (int kind = 0; kind < kGemmTileKinds; ++kind)   // packed B, B by rows, B by rows and packing, A by columns
            for (uint32_t rows = 1; rows <= mr; ++rows)
                for (uint32_t vec = 1; vec <= vectors; ++vec)
                    for (int masked = 0; masked < 2; ++masked) {
                        const uint32_t index = (uint32_t)kind * mr * 2 * vectors + (rows - 1) * 2 * vectors + (vec - 1) * 2 + (uint32_t)masked;
                        a.align(AlignMode::kCode, 32);
                        a.bind(labels[index]);
                        emit_gemm_tile_x86(a, isa, mr, nr, rows, vec, masked != 0, kind == 1 || kind == 2, kind == 2, kind == 3,
                                           &stores[index - (uint32_t)kind * mr * 2 * vectors]);
                    }
    }, (size_t)kGemmTileKinds * mr * 2 * vectors * mr * vectors * 48);   // about 48 bytes per tile and accumulator
    if (t.status != Status::Ok) return t;
    for (uint32_t i = 0; i < kGemmTileKinds * mr * 2 * vectors; ++i) t.fn[i] = reinterpret_cast<Gemm::TileFn>(entries[i]);
    return t;
}
#endif
#if defined(__aarch64__)
// One NEON tile: rows x vectors accumulators in v8..v31 (d8-d15 saved), A's 8 floats in v0-v1
// taken by element (fmla by element needs no broadcast), B's vectors in v2-v4. Arguments
// (AAPCS64): x0 A panel, x1 B panel, x2 C, x3 ldc bytes, x4 k, x5 TileParams. No masked
// tiles: Gemm::run finishes a partial last vector from a full tile in a buffer.
inline void emit_gemm_tile_a64(asmjit::a64::Assembler& a, uint32_t mr, uint32_t nr, uint32_t rows, uint32_t vectors) {
    namespace a64 = asmjit::a64;
    auto acc = [&](uint32_t i, uint32_t j) { return a64::v(8 + i * vectors + j); };
    a.stp(a64::d8, a64::d9, a64::ptr_pre(a64::sp, -64));
    a.stp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
    a.stp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
    a.stp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < vectors; ++j) a.eor(acc(i, j).b16(), acc(i, j).b16(), acc(i, j).b16());
    asmjit::Label loop = a.newLabel(), store = a.newLabel(), overwrite = a.newLabel(), biased = a.newLabel();
    asmjit::Label residual = a.newLabel(), clamp = a.newLabel(), stores = a.newLabel();
    a.cbz(a64::x4, store);
    a.bind(loop);
    a.ldp(a64::q0, a64::q1, a64::ptr_post(a64::x0, (int32_t)(mr * 4)));
    for (uint32_t j = 0; j < vectors; ++j) a.ldr(a64::v(2 + j), a64::ptr(a64::x1, (int32_t)(j * 16)));
    a.add(a64::x1, a64::x1, (uint32_t)(nr * 4));
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < vectors; ++j)
            a.fmla(acc(i, j).s4(), a64::v(2 + j).s4(), a64::v(i < 4 ? 0 : 1).s(i & 3));
    a.subs(a64::x4, a64::x4, 1);
    a.b_ne(loop);
    a.bind(store);
    // The values in the accumulators (pass 0: C read, beta; 1: C overwritten; 2: row bias
    // added), then the residual, the clamp and one store per accumulator.
    a.ld1r(a64::v(5).s4(), a64::ptr(a64::x5));
    a.add(a64::x6, a64::x5, 4);
    a.ld1r(a64::v(6).s4(), a64::ptr(a64::x6));
    a.ldr(a64::w7, a64::ptr(a64::x5, 8));
    a.cbz(a64::w7, overwrite);
    a.cmp(a64::w7, 2);
    a.b_eq(biased);
    for (int pass = 0; pass < 3; ++pass) {
        if (pass == 1) a.bind(overwrite);
        if (pass == 2) {
            a.bind(biased);
            a.ldr(a64::x9, a64::ptr(a64::x5, (int32_t)offsetof(Gemm::TileParams, row_bias)));
        }
        a.mov(a64::x8, a64::x2);
        for (uint32_t i = 0; i < rows; ++i) {
            if (pass == 2) {
                a.ld1r(a64::v(7).s4(), a64::ptr(a64::x9));
                a.add(a64::x9, a64::x9, 4);
            }
            for (uint32_t j = 0; j < vectors; ++j) {
                a.fmul(acc(i, j).s4(), acc(i, j).s4(), a64::v(5).s4());
                if (pass == 0) {
                    a.ldr(a64::q7, a64::ptr(a64::x8, (int32_t)(j * 16)));
                    a.fmla(acc(i, j).s4(), a64::v(7).s4(), a64::v(6).s4());
                } else if (pass == 2) {
                    a.fadd(acc(i, j).s4(), acc(i, j).s4(), a64::v(7).s4());
                }
            }
            if (i + 1 < rows) a.add(a64::x8, a64::x8, a64::x3);
        }
        if (pass < 2) a.b(residual);
    }
    a.bind(residual);
    a.ldr(a64::w7, a64::ptr(a64::x5, (int32_t)offsetof(Gemm::TileParams, residual)));
    a.cbz(a64::w7, clamp);
    a.ldr(a64::x9, a64::ptr(a64::x5, (int32_t)offsetof(Gemm::TileParams, residual_bytes)));
    a.add(a64::x8, a64::x2, a64::x9);   // R's rows
    {   // R + v or v + R, the island's order (the NaN an addition of two NaNs returns)
        asmjit::Label second = a.newLabel();
        a.cmp(a64::w7, 2);
        a.b_ne(second);
        for (int first = 1; first >= 0; --first) {
            if (!first) {
                a.bind(second);
                a.add(a64::x8, a64::x2, a64::x9);
            }
            for (uint32_t i = 0; i < rows; ++i) {
                for (uint32_t j = 0; j < vectors; ++j) {
                    a.ldr(a64::q7, a64::ptr(a64::x8, (int32_t)(j * 16)));
                    if (first) a.fadd(acc(i, j).s4(), a64::v(7).s4(), acc(i, j).s4());
                    else a.fadd(acc(i, j).s4(), acc(i, j).s4(), a64::v(7).s4());
                }
                if (i + 1 < rows) a.add(a64::x8, a64::x8, a64::x3);
            }
            if (first) a.b(clamp);
        }
    }
    a.bind(clamp);
    a.ldr(a64::w7, a64::ptr(a64::x5, (int32_t)offsetof(Gemm::TileParams, clamp)));
    a.cbz(a64::w7, stores);
    a.add(a64::x6, a64::x5, (uint32_t)offsetof(Gemm::TileParams, lo));
    a.ld1r(a64::v(0).s4(), a64::ptr(a64::x6));
    a.add(a64::x6, a64::x5, (uint32_t)offsetof(Gemm::TileParams, hi));
    a.ld1r(a64::v(1).s4(), a64::ptr(a64::x6));
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < vectors; ++j) {   // compare and select: fmax/fmin order signed zeros
            a.fcmgt(a64::v(7).s4(), a64::v(0).s4(), acc(i, j).s4());   // lo > v: lo
            a.bit(acc(i, j).b16(), a64::v(0).b16(), a64::v(7).b16());
            a.fcmgt(a64::v(7).s4(), acc(i, j).s4(), a64::v(1).s4());   // hi < v: hi
            a.bit(acc(i, j).b16(), a64::v(1).b16(), a64::v(7).b16());
        }
    a.bind(stores);
    a.mov(a64::x8, a64::x2);
    for (uint32_t i = 0; i < rows; ++i) {
        for (uint32_t j = 0; j < vectors; ++j) a.str(a64::v(8 + i * vectors + j), a64::ptr(a64::x8, (int32_t)(j * 16)));
        if (i + 1 < rows) a.add(a64::x8, a64::x8, a64::x3);
    }
    a.ldp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
    a.ldp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
    a.ldp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
    a.ldp(a64::d8, a64::d9, a64::ptr_post(a64::sp, 64));
    a.ret(a64::x30);
}

struct GemmTileTable {
    Gemm::TileFn fn[16 * 2 * 3] = {};
    Status status = Status::Unsupported;
};

inline GemmTileTable make_gemm_tiles_a64(uint32_t mr, uint32_t nr) {
    using namespace asmjit;
    GemmTileTable t;
    const uint32_t vectors = nr / 4;
    void* entries[16 * 3];   // per rows and vectors
    t.status = assemble_jit_entries<a64::Assembler>(mr * vectors, entries, [&](a64::Assembler& a, const Label* labels) {
        for (uint32_t rows = 1; rows <= mr; ++rows)
            for (uint32_t vec = 1; vec <= vectors; ++vec) {
                a.align(AlignMode::kCode, 16);
                a.bind(labels[(rows - 1) * vectors + vec - 1]);
                emit_gemm_tile_a64(a, mr, nr, rows, vec);
            }
    });
    if (t.status != Status::Ok) return t;
    for (uint32_t rows = 1; rows <= mr; ++rows)
        for (uint32_t vec = 1; vec <= vectors; ++vec)   // the masked slot (index + 1) stays empty
            t.fn[(rows - 1) * 2 * vectors + (vec - 1) * 2] = reinterpret_cast<Gemm::TileFn>(entries[(rows - 1) * vectors + vec - 1]);
    return t;
}
#endif
#endif
}  // namespace detail

Status Gemm::init(Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    isa_ = isa;
    tiles_ = nullptr;
    row_tiles_ = nullptr;
    packing_row_tiles_ = nullptr;
    column_tiles_ = nullptr;
    vector_floats_ = 1;
    blocking_.mr = detail::kGemmPortableRows;
    blocking_.nr = detail::kGemmPortableCols;
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
    if (isa == Isa::Avx2 || isa == Isa::Avx512) {
        // 6 x 16 fills AVX2's 16 registers (12 accumulators, 2 of B, a broadcast); 14 x 32
        // fills AVX-512's 32 (28 accumulators, 2 of B; A from embedded broadcasts).
        const bool wide = isa == Isa::Avx512;
        blocking_.mr = wide ? 14 : 6;
        blocking_.nr = wide ? 32 : 16;
        const detail::GemmTileTable* table;   // each target's tiles made on its first use only
        if (wide) {
            static const detail::GemmTileTable avx512 = detail::make_gemm_tiles(Isa::Avx512, 14, 32);
            table = &avx512;
        } else {
            static const detail::GemmTileTable avx2 = detail::make_gemm_tiles(Isa::Avx2, 6, 16);
            table = &avx2;
        }
        if (table->status != Status::Ok) return table->status;
        tiles_ = table->fn;
        row_tiles_ = table->fn + blocking_.mr * 2 * (blocking_.nr / isa_vector_floats(isa));
        packing_row_tiles_ = row_tiles_ + blocking_.mr * 2 * (blocking_.nr / isa_vector_floats(isa));
        column_tiles_ = packing_row_tiles_ + blocking_.mr * 2 * (blocking_.nr / isa_vector_floats(isa));
        vector_floats_ = isa_vector_floats(isa);
    }
#elif !defined(TESSEL_NO_JIT) && defined(__aarch64__)
    if (isa == Isa::Neon) {
        // 8 x 12: 24 accumulators, 2 registers of A, 3 of B, 3 for the store
        blocking_.mr = 8;
        blocking_.nr = 12;
        static const detail::GemmTileTable neon = detail::make_gemm_tiles_a64(8, 12);
        if (neon.status != Status::Ok) return neon.status;
        tiles_ = neon.fn;
        vector_floats_ = 4;
    }
#endif
    // kc: a kc x nr panel of B an eighth of L2, up to 1024 deep. A deep K block matters more
    // than keeping that panel in L1 (L2 feeds a panel's two or three vectors per step easily):
    // every K block loads and stores all of C again, which at M = N = 1024 no longer fits L2
    // and evicts A's block.
    const int64_t kc = (int64_t)(cpu_cache_sizes().l2 / 8 / (uint64_t)(blocking_.nr * 4)) / 8 * 8;
    set_blocks(kc < 64 ? 64 : kc > 1024 ? 1024 : kc);
    return Status::Ok;
}

void Gemm::limit_kc(int64_t kc) {
    if (kc < blocking_.kc) set_blocks(kc < 8 ? 8 : kc);
}

// mc: the mc x kc block of A half of L2; nc: the kc x nc block of B a quarter of L3, at most
// 4096 columns (it is every thread's scratch).
void Gemm::set_blocks(int64_t kc) {
    const CacheSizes caches = cpu_cache_sizes();
    const int64_t mr = blocking_.mr, nr = blocking_.nr;
    int64_t mc = (int64_t)(caches.l2 / 2 / (uint64_t)(kc * 4)) / mr * mr;
    mc = mc < mr ? mr : mc > 1024 / mr * mr ? 1024 / mr * mr : mc;
    int64_t nc = (int64_t)(caches.l3 / 4 / (uint64_t)(kc * 4)) / nr * nr;
    nc = nc < nr ? nr : nc > 4096 ? 4096 / nr * nr : nc;
    blocking_.kc = kc;
    blocking_.mc = mc;
    blocking_.nc = nc;
}

size_t Gemm::packed_a_floats(int64_t m, int64_t k) const {
    int64_t mr = blocking_.mr;
    return (size_t)((m + mr - 1) / mr * mr * k);
}

size_t Gemm::packed_b_floats(int64_t k, int64_t n) const {
    int64_t nr = blocking_.nr;
    return (size_t)(k * ((n + nr - 1) / nr * nr));
}

size_t Gemm::scratch_floats(int64_t m, int64_t n, int64_t k, bool a_packed, bool b_packed) const {
    const int64_t mr = blocking_.mr, nr = blocking_.nr;
    int64_t kc = k < blocking_.kc ? k : blocking_.kc;
    int64_t mp = (m + mr - 1) / mr * mr, np = (n + nr - 1) / nr * nr;
    int64_t mc = mp < blocking_.mc ? mp : blocking_.mc, nc = np < blocking_.nc ? np : blocking_.nc;
    return (size_t)((a_packed ? 0 : mc * kc) + (b_packed ? 0 : kc * nc)) + 16;
}

// Panels of mr rows: for each k, mr consecutive floats (rows past `rows` are zero).
void Gemm::pack_a_block(int64_t rows, int64_t depth, const float* a, int64_t a_row, int64_t a_col, float* packed) const {
    const int64_t mr = blocking_.mr;
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
        const int64_t h = rows - r0 < mr ? rows - r0 : mr;
        if (a_row == 1) {   // columns of A contiguous (a transposed A)
            for (int64_t p = 0; p < depth; ++p, packed += mr) {
                const float* src = a + r0 + p * a_col;
                for (int64_t r = 0; r < h; ++r) packed[r] = src[r];
                for (int64_t r = h; r < mr; ++r) packed[r] = 0.0f;
            }
        }
#if defined(__SSE2__)
        else if (a_col == 1 && h == mr) {
            // Rows 4 at a time, 4 steps of k transposed in registers: the panel is written in
            // whole vectors (element by element it cost 4 times the copy of B's panels).
            int64_t p = 0;
            for (; p + 4 <= depth; p += 4) {
                float* dst = packed + p * mr;
                const float* src = a + r0 * a_row + p;
                int64_t r = 0;
                for (; r + 4 <= mr; r += 4, src += 4 * a_row) {
                    __m128 x0 = _mm_loadu_ps(src), x1 = _mm_loadu_ps(src + a_row), x2 = _mm_loadu_ps(src + 2 * a_row),
                           x3 = _mm_loadu_ps(src + 3 * a_row);
                    _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
                    _mm_storeu_ps(dst + r, x0);
                    _mm_storeu_ps(dst + mr + r, x1);
                    _mm_storeu_ps(dst + 2 * mr + r, x2);
                    _mm_storeu_ps(dst + 3 * mr + r, x3);
                }
                for (; r + 2 <= mr; r += 2, src += 2 * a_row) {
                    const __m128 x0 = _mm_loadu_ps(src), x1 = _mm_loadu_ps(src + a_row);
                    const __m128 lo = _mm_unpacklo_ps(x0, x1), hi = _mm_unpackhi_ps(x0, x1);
                    _mm_storel_pi(reinterpret_cast<__m64*>(dst + r), lo);
                    _mm_storeh_pi(reinterpret_cast<__m64*>(dst + mr + r), lo);
                    _mm_storel_pi(reinterpret_cast<__m64*>(dst + 2 * mr + r), hi);
                    _mm_storeh_pi(reinterpret_cast<__m64*>(dst + 3 * mr + r), hi);
                }
                for (; r < mr; ++r, src += a_row)
                    for (int64_t q = 0; q < 4; ++q) dst[q * mr + r] = src[q];
            }
            for (; p < depth; ++p)
                for (int64_t r = 0; r < mr; ++r) packed[p * mr + r] = a[(r0 + r) * a_row + p];
            packed += depth * mr;
        }
#endif
        else {
            // 8 steps of k at a time: the panel is written in small pieces that stay in L1, not
            // revisited mr times over its whole depth (larger than L1 when kc is deep).
            for (int64_t p0 = 0; p0 < depth; p0 += 8) {
                const int64_t steps = depth - p0 < 8 ? depth - p0 : 8;
                float* dst = packed + p0 * mr;
                for (int64_t r = 0; r < mr; ++r) {
                    const float* src = a + (r0 + r) * a_row + p0 * a_col;
                    if (r < h) for (int64_t q = 0; q < steps; ++q) dst[q * mr + r] = src[q * a_col];
                    else for (int64_t q = 0; q < steps; ++q) dst[q * mr + r] = 0.0f;
                }
            }
            packed += depth * mr;
        }
    }
}

namespace detail {
// depth rows of NR floats, b_row apart, into one panel: a copy of a size known here is a few
// inline vector moves, where a run-time nr made each row a library call.
template <int64_t NR>
inline void pack_panel_rows(const float* b, int64_t b_row, int64_t depth, float* packed) {
    for (int64_t p = 0; p < depth; ++p, packed += NR) std::memcpy(packed, b + p * b_row, NR * sizeof(float));
}
}  // namespace detail

// Panels of nr columns: for each k, nr consecutive floats (columns past `cols` are zero).
void Gemm::pack_b_block(int64_t depth, int64_t cols, const float* b, int64_t b_row, int64_t b_col, float* packed) const {
    const int64_t nr = blocking_.nr;
    for (int64_t j0 = 0; j0 < cols; j0 += nr) {
        const int64_t w = cols - j0 < nr ? cols - j0 : nr;
        if (b_col == 1 && w == nr && (nr == 32 || nr == 16 || nr == 12)) {
            if (nr == 32) detail::pack_panel_rows<32>(b + j0, b_row, depth, packed);
            else if (nr == 16) detail::pack_panel_rows<16>(b + j0, b_row, depth, packed);
            else detail::pack_panel_rows<12>(b + j0, b_row, depth, packed);
            packed += depth * nr;
        } else if (b_col == 1) {
            for (int64_t p = 0; p < depth; ++p, packed += nr) {
                const float* src = b + p * b_row + j0;
                if (w == nr) std::memcpy(packed, src, (size_t)nr * sizeof(float));
                else {
                    for (int64_t j = 0; j < w; ++j) packed[j] = src[j];
                    for (int64_t j = w; j < nr; ++j) packed[j] = 0.0f;
                }
            }
        } else {
            for (int64_t j = 0; j < nr; ++j) {
                const float* src = b + (j0 + j) * b_col;
                if (j < w) for (int64_t p = 0; p < depth; ++p) packed[p * nr + j] = src[p * b_row];
                else for (int64_t p = 0; p < depth; ++p) packed[p * nr + j] = 0.0f;
            }
            packed += depth * nr;
        }
    }
}

// The same panels from a B given by row offsets (GemmOperand::rows).
void Gemm::pack_b_rows_block(int64_t depth, int64_t cols, const float* b, const int64_t* rows, float* packed) const {
    const int64_t nr = blocking_.nr;
    for (int64_t j0 = 0; j0 < cols; j0 += nr) {
        const int64_t w = cols - j0 < nr ? cols - j0 : nr;
        for (int64_t p = 0; p < depth; ++p, packed += nr) {
            std::memcpy(packed, b + rows[p] + j0, (size_t)w * sizeof(float));
            if (w < nr) std::memset(packed + w, 0, (size_t)(nr - w) * sizeof(float));
        }
    }
}

// Block pc (kc deep) of a packed matrix starts at pc * padded rows (columns); its panels follow.
void Gemm::pack_a(int64_t m, int64_t k, const float* a, int64_t a_row, int64_t a_col, float* packed) const {
    const int64_t mp = (m + blocking_.mr - 1) / blocking_.mr * blocking_.mr;
    for (int64_t pc = 0; pc < k; pc += blocking_.kc) {
        int64_t kc = k - pc < blocking_.kc ? k - pc : blocking_.kc;
        pack_a_block(m, kc, a + pc * a_col, a_row, a_col, packed + pc * mp);
    }
}

void Gemm::pack_b(int64_t k, int64_t n, const float* b, int64_t b_row, int64_t b_col, float* packed) const {
    const int64_t np = (n + blocking_.nr - 1) / blocking_.nr * blocking_.nr;
    for (int64_t pc = 0; pc < k; pc += blocking_.kc) {
        int64_t kc = k - pc < blocking_.kc ? k - pc : blocking_.kc;
        pack_b_block(kc, n, b + pc * b_row, b_row, b_col, packed + pc * np);
    }
}

void Gemm::part_range(int64_t m, int64_t n, bool a_packed, bool b_packed, uint32_t part, uint32_t parts, int64_t* m0,
                      int64_t* m1, int64_t* n0, int64_t* n1) const {
    const int64_t mr = blocking_.mr, nr = blocking_.nr;
    const int64_t mpanels = (m + mr - 1) / mr, npanels = (n + nr - 1) / nr;
    *m0 = 0, *m1 = m, *n0 = 0, *n1 = n;
    if (parts <= 1) return;
    // Split the operand packed at run time (each part packs only its share), unless splitting
    // the other dimension balances the parts clearly better: the slowest part's share of the
    // rows (columns) it computes, whole panels, against an even share (7 x 7 convs have N =
    // 49, two panels of 32 and 17 columns, where M splits evenly).
    auto balance = [parts](int64_t extent, int64_t panels, int64_t panel) {
        const int64_t most = (panels + parts - 1) / parts * panel;
        return (double)extent / (double)parts / (double)(most < extent ? most : extent);
    };
    const double balance_m = balance(m, mpanels, mr), balance_n = balance(n, npanels, nr);
    bool split_m = b_packed && !a_packed ? mpanels >= (int64_t)parts || mpanels > npanels
                                         : npanels < (int64_t)parts && mpanels > npanels;
    if (split_m && balance_n > balance_m * 1.15) split_m = false;
    else if (!split_m && balance_m > balance_n * 1.15) split_m = true;
    int64_t total = split_m ? mpanels : npanels;
    int64_t p0 = (int64_t)part * total / parts, p1 = (int64_t)(part + 1) * total / parts;
    if (p0 >= p1) { *m1 = *m0; return; }
    if (split_m) { *m0 = p0 * mr; *m1 = p1 * mr < m ? p1 * mr : m; }
    else { *n0 = p0 * nr; *n1 = p1 * nr < n ? p1 * nr : n; }
}

void Gemm::run(int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a, const GemmOperand& b, float beta,
               float* c, int64_t ldc, float* scratch, uint32_t part, uint32_t parts, const float* row_bias,
               const GemmStoreOps* store) const {
    if (m <= 0 || n <= 0) return;
    const int64_t mr = blocking_.mr, nr = blocking_.nr;
    const int64_t mpanels = (m + mr - 1) / mr, npanels = (n + nr - 1) / nr;
    int64_t m0, m1, n0, n1;
    part_range(m, n, a.packed, b.packed || b.rows, part, parts, &m0, &m1, &n0, &n1);
    if (m0 >= m1 || n0 >= n1) return;
    // B by rows: the row tiles read it where it lies; with three or more row tiles per panel
    // the first packs what it reads for the others (one pass over B's scattered rows, and no
    // packing pass of its own; for two, its stores cost more than a second read).
    const bool rows_in_place = b.rows && row_tiles_ && m1 - m0 <= 2 * mr;
    const bool pack_as_read = b.rows && packing_row_tiles_ && !rows_in_place;
    const TileFn* tiles = rows_in_place ? row_tiles_ : tiles_;
    const bool b_ready = b.packed || rows_in_place;
    TileParams params;
    params.alpha = alpha;
    params.row_bias = nullptr;
    params.b_rows = nullptr;
    params.pack_to = nullptr;
    params.stream = a.packed;
    params.fetch_a = 0;
    // The store operations, on the last K block's tiles only.
    int32_t clamp = 0, residual = 0;
    params.lo = params.hi = 0.0f;
    params.residual_bytes = 0;
    if (store) {
        clamp = store->clamp;
        params.lo = store->lo;
        params.hi = store->hi;
        if (store->residual) {
            residual = store->residual_first ? 2 : 1;
            params.residual_bytes = (int64_t)((intptr_t)store->residual - (intptr_t)c);
        }
    }
    if (k <= 0) {   // C = beta C (the row bias), and 0 when beta is 0 (C not read)
        params.clamp = clamp;
        params.residual = residual;
        for (int64_t i = m0; i < m1; ++i)
            for (int64_t j = n0; j < n1; ++j)
                c[i * ldc + j] = detail::gemm_store_ops(params, row_bias ? row_bias[i] : beta == 0.0f ? 0.0f : beta * c[i * ldc + j],
                                                        c + i * ldc + j);
        return;
    }
    const int64_t mp = mpanels * mr, np = npanels * nr;
    const int64_t range_np = (n1 - n0 + nr - 1) / nr * nr;
    // The panels at a 64-byte boundary (scratch_floats' 16 spare floats): a vector load of a panel
    // then never splits a cache line, whatever the caller's scratch alignment.
    float* bbuf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~(uintptr_t)63);
    float* abuf = bbuf + (b_ready ? 0 : (k < blocking_.kc ? k : blocking_.kc) * (range_np < blocking_.nc ? range_np : blocking_.nc));
    const uint32_t vf = vector_floats_;
    for (int64_t jc = n0; jc < n1; jc += blocking_.nc) {
        const int64_t nc = n1 - jc < blocking_.nc ? n1 - jc : blocking_.nc;
        for (int64_t pc = 0; pc < k; pc += blocking_.kc) {
            const int64_t kc = k - pc < blocking_.kc ? k - pc : blocking_.kc;
            // Later K blocks add to what the first wrote.
            params.beta = pc == 0 ? (row_bias ? 0.0f : beta) : 1.0f;
            params.read_c = pc == 0 && row_bias ? 2 : params.beta != 0.0f;
            params.clamp = pc + kc >= k ? clamp : 0;
            params.residual = pc + kc >= k ? residual : 0;
            const float* bp = bbuf;
            int64_t panel_step = kc;   // floats from one B panel to the next
            if (b.packed) bp = b.data + pc * np + jc * kc;
            else if (rows_in_place) bp = b.data + jc, params.b_rows = b.rows + pc, panel_step = 1;
            else if (pack_as_read) params.b_rows = b.rows + pc;
            else if (b.rows) pack_b_rows_block(kc, nc, b.data + jc, b.rows + pc, bbuf);
            else pack_b_block(kc, nc, b.data + pc * b.row + jc * b.col, b.row, b.col, bbuf);
            for (int64_t ic = m0; ic < m1; ic += blocking_.mc) {
                const int64_t mc = m1 - ic < blocking_.mc ? m1 - ic : blocking_.mc;
                const float* ap = abuf;
                if (a.packed) ap = a.data + pc * mp + ic * kc;
                else pack_a_block(mc, kc, a.data + ic * a.row + pc * a.col, a.row, a.col, abuf);
                auto run_tile = [&](int64_t jr, int64_t ir) {
                    const int64_t cols = nc - jr < nr ? nc - jr : nr, rows = mc - ir < mr ? mc - ir : mr;
                    const uint32_t index_cols = tiles_ ? tile_columns(cols, &params) : 0;
                    float* ct = c + (ic + ir) * ldc + jc + jr;
                    if (params.read_c == 2) params.row_bias = row_bias + ic + ir;
                    TileFn tile = tiles ? tiles[(rows - 1) * 2 * (nr / vf) + index_cols] : nullptr;
                    if (pack_as_read && ic == m0 && ir == 0) {   // reads panel jr's rows and packs them
                        params.pack_to = bbuf + jr * kc;
                        packing_row_tiles_[(rows - 1) * 2 * (nr / vf) + index_cols](ap, b.data + jc + jr, ct, ldc * 4, kc, &params);
                    } else if (tile) {
                        tile(ap + ir * kc, bp + jr * panel_step, ct, ldc * 4, kc, &params);
                    } else if (tiles_) {   // no masked tile (NEON): the full tile in a buffer, then the columns
                        float buffer[16 * 32];
                        TileParams plain = params;
                        plain.alpha = 1.0f;
                        plain.read_c = 0;
                        plain.clamp = 0;
                        plain.residual = 0;
                        tiles_[(rows - 1) * 2 * (nr / vf) + (index_cols & ~1u)](ap + ir * kc, bp + jr * kc, buffer, nr * 4, kc, &plain);
                        for (int64_t i = 0; i < rows; ++i)
                            for (int64_t j = 0; j < cols; ++j)
                                ct[i * ldc + j] = detail::gemm_tile_value(params, buffer[i * nr + j], ct + i * ldc + j, i);
                    } else {
                        detail::gemm_portable_tile(ap + ir * kc, bp + jr * kc, ct, ldc, kc, rows, cols, params);
                    }
                };
                // Both packed (a conv's weights times its im2col block), or B packed as the first
                // band reads its rows (a 1x1 conv's input block): row bands outer, so a band's A
                // panel serves every panel from the near caches and each band writes its rows of
                // C in order, a few store streams where panels outer keep one per row of C open
                // (a 1x1 conv over 56^2 to 256 maps: 256). Else panels outer: one B panel in L1
                // for all row tiles.
                if ((a.packed && b.packed) || pack_as_read) {
                    for (int64_t ir = 0; ir < mc; ir += mr)
                        for (int64_t jr = 0; jr < nc; jr += nr) run_tile(jr, ir);
                } else {
                    for (int64_t jr = 0; jr < nc; jr += nr)
                        for (int64_t ir = 0; ir < mc; ir += mr) run_tile(jr, ir);
                }
            }
        }
    }
}

uint32_t Gemm::tile_columns(int64_t cols, TileParams* params) const {
    const uint32_t vf = vector_floats_, vectors = (uint32_t)((cols + vf - 1) / vf), rest = (uint32_t)(cols - (vectors - 1) * vf);
    params->kmask = (1u << rest) - 1u;
    for (uint32_t l = 0; l < 8; ++l) params->mask[l] = l < rest ? -1 : 0;
    return (vectors - 1) * 2 + (rest != vf ? 1 : 0);
}

void Gemm::column_tile(const float* a, const int64_t* a_cols, const float* b_panel, int64_t rows, int64_t cols, int64_t k,
                       bool add, float* c, int64_t ldc, bool stream, bool fetch_a) const {
    if (!column_tiles_) {
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
                float sum = 0.0f;
                for (int64_t p = 0; p < k; ++p) sum += a[a_cols[p] + i] * b_panel[p * blocking_.nr + j];
                c[i * ldc + j] = add ? c[i * ldc + j] + sum : sum;
            }
        return;
    }
    TileParams params;
    params.alpha = 1.0f;
    params.beta = add ? 1.0f : 0.0f;
    params.read_c = add ? 1 : 0;
    params.row_bias = nullptr;
    params.b_rows = nullptr;
    params.a_cols = a_cols;
    params.pack_to = nullptr;
    params.stream = stream;
    params.fetch_a = fetch_a;
    params.clamp = 0;
    params.lo = params.hi = 0.0f;
    params.residual = 0;
    params.residual_bytes = 0;
    const uint32_t index = (uint32_t)(rows - 1) * 2 * (blocking_.nr / vector_floats_) + tile_columns(cols, &params);
    column_tiles_[index](a, b_panel, c, ldc * 4, k, &params);
}

// >>jit kernel table
namespace detail {
// The kernels made so far by key (a target and shape class), for the life of the process like
// the GEMM tiles; past the capacity N, find_or_make returns nullptr and the caller runs its
// portable loop. Key has operator==; a spinlock, as kernels are made once per shape at init.
template <typename Key, typename Fn, uint32_t N>
class JitKernelTable {
public:
    // make(): the new kernel or nullptr (not stored, so a later call tries again).
    template <typename Make>
    Fn find_or_make(const Key& key, Make&& make) {
        while (lock_.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
        Fn fn = nullptr;
        for (uint32_t i = 0; i < count_ && !fn; ++i)
            if (entries_[i].key == key) fn = entries_[i].fn;
        if (!fn && count_ < N) {
            fn = make();
            if (fn) entries_[count_++] = Entry{key, fn};
        }
        lock_.clear(std::memory_order_release);
        return fn;
    }

private:
    struct Entry { Key key; Fn fn; };
    std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
    Entry entries_[N];
    uint32_t count_ = 0;
};

#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64) || defined(__aarch64__))
#if defined(__aarch64__)
using JitAssembler = asmjit::a64::Assembler;
#else
using JitAssembler = asmjit::x86::Assembler;
#endif
// emit(a) into a fresh function of type Fn on jit_runtime(); nullptr when an instruction
// failed to encode or the runtime could not take the code.
template <typename Fn, typename Emit>
inline Fn assemble_jit_kernel(Emit&& emit) {
    void* fn = nullptr;
    const Status s = assemble_jit_entries<JitAssembler>(1, &fn, [&](JitAssembler& a, const asmjit::Label* labels) {
        a.bind(labels[0]);
        emit(a);
    });
    return s == Status::Ok ? reinterpret_cast<Fn>(fn) : nullptr;
}
#endif
}  // namespace detail

// >>gemm transposed store
namespace detail {
// What a transpose kernel does besides the transpose, fixed at generation: its vectors (wide:
// AVX-512's, else AVX2's), the bias, the residual (0 none, 1 v + R, 2 R + v: the island's
// operand order) and the clamp.
struct GemmTransposeKey {
    bool wide;
    bool bias;
    int residual;
    bool clamp;
    bool operator==(const GemmTransposeKey& o) const {
        return wide == o.wide && bias == o.bias && residual == o.residual && clamp == o.clamp;
    }
};
using GemmTransposeTable = JitKernelTable<GemmTransposeKey, Gemm::TransposeFn, 16>;

inline GemmTransposeTable& gemm_transpose_kernels() {
    static GemmTransposeTable table;
    return table;
}

#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
// L columns of C (L maps: 16 on AVX-512, 8 on AVX2) into y's L rows, L rows of C (pixels) at a
// time: rows into vectors 0..L-1 (the bias added, lanes being maps), stages of pairwise shuffles
// (unpck ps, unpck pd, then two of vshuff32x4 on AVX-512, one of vperm2f128 on AVX2), after
// which register m holds map m's L pixels; then the residual, the clamp and one store per map,
// masked (AVX-512 k1, AVX2 vmaskmovps) for the last count % L rows. The stages rename registers
// instead of moving them: a pair's low half goes to a free register, the high half overwrites
// its second input, and its first input becomes the free one. Arguments (System V): rdi C, rsi
// ldc bytes, rdx count, rcx y, r8 y_stride bytes, r9 TransposeParams.
inline void emit_gemm_transpose_x86(asmjit::x86::Assembler& a, const GemmTransposeKey& key) {
    namespace x86 = asmjit::x86;
    const bool wide = key.wide;
    const uint32_t lanes = wide ? 16 : 8, shift = wide ? 4 : 3;
    auto v = [&](uint32_t id) -> x86::Vec { return wide ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id)); };
    const x86::Vec bias = v(lanes), lo = v(lanes + 1), hi = v(lanes + 2), r = v(lanes + 3), mask = v(lanes + 5);
    if (key.bias) {
        a.mov(x86::rax, x86::qword_ptr(x86::r9, (int32_t)offsetof(Gemm::TransposeParams, bias)));
        a.vmovups(bias, x86::ptr(x86::rax));
    }
    if (key.residual) a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Gemm::TransposeParams, residual_bytes)));
    if (key.clamp) {
        a.vbroadcastss(lo, x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TransposeParams, lo)));
        a.vbroadcastss(hi, x86::dword_ptr(x86::r9, (int32_t)offsetof(Gemm::TransposeParams, hi)));
    }
    auto body = [&](bool full) {
        asmjit::Label loaded = a.newLabel();
        a.mov(x86::rax, x86::rdi);
        if (!full)   // rows past count stay zero (their lanes are not stored)
            for (uint32_t i = 1; i < lanes; ++i) a.vxorps(v(i), v(i), v(i));
        for (uint32_t i = 0; i < lanes; ++i) {
            if (!full && i > 0) {
                a.cmp(x86::rdx, (int32_t)i);
                a.jbe(loaded);
            }
            a.vmovups(v(i), x86::ptr(x86::rax));
            if (i + 1 < lanes) a.add(x86::rax, x86::rsi);
        }
        a.bind(loaded);
        if (key.bias)   // C + bias: C's NaN first, as the portable loop
            for (uint32_t i = 0; i < lanes; ++i) a.vaddps(v(i), v(i), bias);
        uint32_t cur[16], free_reg = lanes + 4;
        for (uint32_t i = 0; i < lanes; ++i) cur[i] = i;
        // One stage: pairs (cur[sa], cur[sb]) -> (next[dlo], next[dhi]).
        struct Pair { uint32_t sa, sb, dlo, dhi; };
        auto stage = [&](const Pair* pairs, auto&& emit_lo, auto&& emit_hi) {
            uint32_t next[16];
            for (uint32_t p = 0; p < lanes / 2; ++p) {
                const Pair& q = pairs[p];
                const uint32_t ra = cur[q.sa], rb = cur[q.sb];
                emit_lo(v(free_reg), v(ra), v(rb));
                emit_hi(v(rb), v(ra), v(rb));
                next[q.dlo] = free_reg;
                next[q.dhi] = rb;
                free_reg = ra;
            }
            for (uint32_t i = 0; i < lanes; ++i) cur[i] = next[i];
        };
        Pair pairs[8];
        for (uint32_t p = 0; p < lanes / 2; ++p) pairs[p] = Pair{2 * p, 2 * p + 1, 2 * p, 2 * p + 1};
        stage(pairs, [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vunpcklps(d, x, y); },
              [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vunpckhps(d, x, y); });
        for (uint32_t q = 0; q < lanes / 4; ++q) {
            pairs[2 * q] = Pair{4 * q, 4 * q + 2, 4 * q, 4 * q + 1};
            pairs[2 * q + 1] = Pair{4 * q + 1, 4 * q + 3, 4 * q + 2, 4 * q + 3};
        }
        stage(pairs, [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vunpcklpd(d, x, y); },
              [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vunpckhpd(d, x, y); });
        if (wide) {
            for (uint32_t g = 0; g < 2; ++g)
                for (uint32_t i = 0; i < 4; ++i) pairs[4 * g + i] = Pair{8 * g + i, 8 * g + i + 4, 8 * g + i, 8 * g + i + 4};
            stage(pairs, [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vshuff32x4(d, x, y, 0x88); },
                  [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vshuff32x4(d, x, y, 0xDD); });
            for (uint32_t i = 0; i < 8; ++i) pairs[i] = Pair{i, i + 8, i, i + 8};
            stage(pairs, [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vshuff32x4(d, x, y, 0x88); },
                  [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vshuff32x4(d, x, y, 0xDD); });
        } else {   // the 128-bit halves: pixels 0-3 of map i with pixels 4-7, and of map i + 4
            for (uint32_t i = 0; i < 4; ++i) pairs[i] = Pair{i, i + 4, i, i + 4};
            stage(pairs, [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vperm2f128(d, x, y, 0x20); },
                  [&](x86::Vec d, x86::Vec x, x86::Vec y) { a.vperm2f128(d, x, y, 0x31); });
        }
        a.mov(x86::r11, x86::rcx);
        for (uint32_t m = 0; m < lanes; ++m) {
            const x86::Vec value = v(cur[m]);
            if (key.residual) {
                if (full) a.vmovups(r, x86::ptr(x86::r11, x86::r10));
                else if (wide) a.k(x86::k1).z().vmovups(r, x86::ptr(x86::r11, x86::r10));
                else a.vmaskmovps(r, mask, x86::ptr(x86::r11, x86::r10));
                if (key.residual == 2) a.vaddps(value, r, value);
                else a.vaddps(value, value, r);
            }
            if (key.clamp) {   // MAXPS and MINPS return their second operand unless the first wins: NaN stays
                a.vmaxps(value, lo, value);
                a.vminps(value, hi, value);
            }
            if (full) a.vmovups(x86::ptr(x86::r11), value);
            else if (wide) a.k(x86::k1).vmovups(x86::ptr(x86::r11), value);
            else a.vmaskmovps(x86::ptr(x86::r11), mask, value);
            if (m + 1 < lanes) a.add(x86::r11, x86::r8);
        }
    };
    asmjit::Label full_loop = a.newLabel(), tail = a.newLabel(), done = a.newLabel();
    a.bind(full_loop);
    a.cmp(x86::rdx, (int32_t)lanes);
    a.jb(tail);
    body(true);
    a.mov(x86::rax, x86::rsi);
    a.shl(x86::rax, shift);
    a.add(x86::rdi, x86::rax);
    a.add(x86::rcx, (int32_t)(lanes * 4));
    a.sub(x86::rdx, (int32_t)lanes);
    a.jmp(full_loop);
    a.bind(tail);
    a.test(x86::rdx, x86::rdx);
    a.jz(done);
    if (wide) a.kmovw(x86::k1, x86::word_ptr(x86::r9, (int32_t)offsetof(Gemm::TransposeParams, tail_mask)));
    else a.vmovdqu(mask, x86::ptr(x86::r9, (int32_t)offsetof(Gemm::TransposeParams, tail_lanes)));
    body(false);
    a.bind(done);
    a.vzeroupper();
    a.ret();
}
#define TESSEL_GEMM_TRANSPOSE_JIT 1
#endif
}  // namespace detail

void Gemm::store_transposed(const float* c, int64_t ldc, int64_t count, int64_t maps, const float* bias, float* y,
                            int64_t y_stride, const GemmStoreOps* store) const {
    const float* residual = store ? store->residual : nullptr;
    const bool clamp = store && store->clamp;
    int64_t m0 = 0;
#ifdef TESSEL_GEMM_TRANSPOSE_JIT
    const int64_t lanes = isa_ == Isa::Avx512 ? 16 : isa_ == Isa::Avx2 ? 8 : 0;
    if (lanes && maps >= lanes && count > 0) {
        const detail::GemmTransposeKey key{lanes == 16, bias != nullptr, residual ? (store->residual_first ? 2 : 1) : 0, clamp};
        const TransposeFn fn = detail::gemm_transpose_kernels().find_or_make(key, [&] {
            return detail::assemble_jit_kernel<TransposeFn>([&](detail::JitAssembler& a) { detail::emit_gemm_transpose_x86(a, key); });
        });
        if (fn) {
            TransposeParams params;
            params.residual_bytes = residual ? (int64_t)((const char*)residual - (const char*)y) : 0;
            params.lo = clamp ? store->lo : 0.0f;
            params.hi = clamp ? store->hi : 0.0f;
            params.tail_mask = (1u << (count % lanes)) - 1u;
            for (int64_t l = 0; l < 8; ++l) params.tail_lanes[l] = l < count % lanes ? -1 : 0;
            for (; m0 + lanes <= maps; m0 += lanes) {
                params.bias = bias ? bias + m0 : nullptr;
                fn(c + m0, ldc * 4, count, y + m0 * y_stride, y_stride * 4, &params);
            }
        }
    }
#endif
    for (int64_t m = m0; m < maps; ++m)   // the portable loop: the kernel's arithmetic, in its order
        for (int64_t i = 0; i < count; ++i) {
            float v = c[i * ldc + m];
            if (bias) v = v + bias[m];
            if (residual) {
                const float r = residual[m * y_stride + i];
                v = store->residual_first ? r + v : v + r;
            }
            if (clamp) {
                v = store->lo > v ? store->lo : v;
                v = store->hi < v ? store->hi : v;
            }
            y[m * y_stride + i] = v;
        }
}

// >>winograd implementation
namespace detail {
// Lavin and Gray's F(4x4, 3x3): the input's B^T, the weights' G, the output's A^T.
constexpr float kWinogradBT[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                     {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
constexpr double kWinogradG[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                     {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
constexpr float kWinogradAT[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};

// out = sum_j row[j] in[j], in the JIT kernels' order: the first +1 term, then the others by
// j (every row of B^T and A^T has a +1 term).
inline float winograd_combine(const float* row, const float* in) {
    int first = 0;
    while (row[first] != 1.0f) ++first;
    float out = in[first];
    for (int j = 0; j < 6; ++j)
        if (j != first && row[j] != 0.0f) out = row[j] == 1.0f ? out + in[j] : row[j] == -1.0f ? out - in[j] : std::fma(in[j], row[j], out);
    return out;
}

#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
// out = sum_j row[j] in[j] on vector registers, as winograd_combine: +-1 by adds and
// subtracts, other constants by FMAs against consts[|c|] (2, 4, 5 or 8 in registers).
inline void emit_winograd_combine(asmjit::x86::Assembler& a, const float* row, const asmjit::x86::Vec* in, const asmjit::x86::Vec& out,
                                  const asmjit::x86::Vec* consts) {
    int first = 0;
    while (row[first] != 1.0f) ++first;
    a.vmovaps(out, in[first]);
    for (int j = 0; j < 6; ++j) {
        if (j == first || row[j] == 0.0f) continue;
        const float c = row[j];
        if (c == 1.0f) a.vaddps(out, out, in[j]);
        else if (c == -1.0f) a.vsubps(out, out, in[j]);
        else if (c > 0) a.vfmadd231ps(out, in[j], consts[(int)c]);
        else a.vfnmadd231ps(out, in[j], consts[(int)-c]);
    }
}

// A transform kernel's vectors: zmm on AVX-512, ymm on AVX2 (16 registers: the 6 inputs, 6
// outputs, a lane mask and 3 constants).
struct WinogradVectors {
    bool wide;
    asmjit::x86::Vec operator()(uint32_t id) const {
        return wide ? asmjit::x86::Vec(asmjit::x86::zmm(id)) : asmjit::x86::Vec(asmjit::x86::ymm(id));
    }
    int32_t bytes() const { return wide ? 64 : 32; }
};

// Frame: rbp, rbx saved, rsp aligned to 64 below 36 vectors of temporaries; the 3 constants
// `values` (the transform's: 2, 4 and 5 or 8) in the top registers, consts[c] for each c.
inline void emit_winograd_prologue(asmjit::x86::Assembler& a, const WinogradVectors& v, const float (&values)[3], asmjit::x86::Vec* consts) {
    namespace x86 = asmjit::x86;
    a.push(x86::rbp);
    a.push(x86::rbx);
    a.mov(x86::rbp, x86::rsp);
    a.sub(x86::rsp, 36 * v.bytes());
    a.and_(x86::rsp, -64);
    const uint32_t top = v.wide ? 31 : 15;
    for (int i = 0; i < 3; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &values[i], 4);
        const uint32_t id = top - (uint32_t)i;
        a.mov(x86::eax, bits);
        a.vmovd(x86::xmm(id), x86::eax);
        a.vbroadcastss(v(id), x86::xmm(id));
        consts[(int)values[i]] = v(id);
    }
}

inline void emit_winograd_epilogue(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    a.mov(x86::rsp, x86::rbp);
    a.pop(x86::rbx);
    a.pop(x86::rbp);
    a.vzeroupper();
    a.ret();
}

// V of a vector of tiles (lanes; on AVX-512 k1 the tiles there are, on AVX2 with `masked`
// ymm12 from InputParams::lanes, else all 8) for each channel: pass 1 per column phase l loads
// the 6 rows' phase l (l of 4 and 5: phases 0 and 1 one tile on) and stores B^T d's column l to
// the temporaries, pass 2 per row i transforms them into points 6 i .. 6 i + 5 of V.
// Arguments (System V): rdi rows, rsi V, rdx InputParams.
inline void emit_winograd_input(asmjit::x86::Assembler& a, Isa isa, bool masked) {
    namespace x86 = asmjit::x86;
    using P = WinogradF43::InputParams;
    const WinogradVectors v{isa == Isa::Avx512};
    x86::Vec consts[9];
    emit_winograd_prologue(a, v, {2, 4, 5}, consts);
    const x86::Vec mask = v(12);
    if (v.wide) a.kmovw(x86::k1, x86::word_ptr(x86::rdx, (int32_t)offsetof(P, mask)));
    else if (masked) a.vmovdqu(mask, x86::ptr(x86::rdx, (int32_t)offsetof(P, lanes)));
    auto load = [&](const x86::Vec& dst, const x86::Mem& src) {
        if (v.wide) a.k(x86::k1).z().vmovups(dst, src);
        else if (masked) a.vmaskmovps(dst, mask, src);
        else a.vmovups(dst, src);
    };
    auto store = [&](const x86::Mem& dst, const x86::Vec& src) {
        if (v.wide) a.k(x86::k1).vmovups(dst, src);
        else if (masked) a.vmaskmovps(dst, mask, src);
        else a.vmovups(dst, src);
    };
    a.mov(x86::r8, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, channels)));
    a.mov(x86::r9, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, row_bytes)));
    a.mov(x86::r10, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, phase_bytes)));
    a.mov(x86::r11, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, v_point_bytes)));
    x86::Vec in[6], out[6];
    for (uint32_t i = 0; i < 6; ++i) {
        in[i] = v(i);
        out[i] = v(6 + i);
    }
    asmjit::Label channel = a.newLabel();
    a.bind(channel);
    for (int l = 0; l < 6; ++l) {
        // rcx: row 0 at phase l % 4, l / 4 tiles on; rax: row 3
        if (l % 4 == 0) a.lea(x86::rcx, x86::ptr(x86::rdi, l / 4 * 4));
        else if (l % 4 == 1) a.lea(x86::rcx, x86::ptr(x86::rdi, x86::r10, 0, l / 4 * 4));
        else if (l % 4 == 2) a.lea(x86::rcx, x86::ptr(x86::rdi, x86::r10, 1));
        else {
            a.lea(x86::rcx, x86::ptr(x86::r10, x86::r10, 1));
            a.add(x86::rcx, x86::rdi);
        }
        a.lea(x86::rax, x86::ptr(x86::r9, x86::r9, 1));
        a.add(x86::rax, x86::rcx);
        const x86::Mem rows[6] = {x86::ptr(x86::rcx), x86::ptr(x86::rcx, x86::r9), x86::ptr(x86::rcx, x86::r9, 1),
                                  x86::ptr(x86::rax), x86::ptr(x86::rax, x86::r9), x86::ptr(x86::rax, x86::r9, 1)};
        for (int j = 0; j < 6; ++j) load(in[j], rows[j]);
        for (int i = 0; i < 6; ++i) {
            emit_winograd_combine(a, kWinogradBT[i], in, out[i], consts);
            a.vmovaps(x86::ptr(x86::rsp, (i * 6 + l) * v.bytes()), out[i]);
        }
    }
    a.mov(x86::rax, x86::rsi);
    for (int i = 0; i < 6; ++i) {
        for (int l = 0; l < 6; ++l) a.vmovaps(in[l], x86::ptr(x86::rsp, (i * 6 + l) * v.bytes()));
        for (int k = 0; k < 6; ++k) {
            emit_winograd_combine(a, kWinogradBT[k], in, out[k], consts);
            store(x86::ptr(x86::rax), out[k]);
            if (i * 6 + k + 1 < 36) a.add(x86::rax, x86::r11);
        }
    }
    a.add(x86::rdi, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, channel_bytes)));
    a.add(x86::rsi, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, v_channel_bytes)));
    a.dec(x86::r8);
    a.jnz(channel);
    emit_winograd_epilogue(a);
}

// The 4x4 outputs of each tile for a vector of maps (16 on AVX-512, 8 on AVX2): pass 1 per
// column k loads M's points 6 i + k and stores A^T M's column k to the temporaries, pass 2 per
// row r transforms them into output row r's 4 pixels. Arguments (System V): rdi M, rsi O, rdx
// OutputParams.
inline void emit_winograd_output(asmjit::x86::Assembler& a, Isa isa) {
    namespace x86 = asmjit::x86;
    using P = WinogradF43::OutputParams;
    const WinogradVectors v{isa == Isa::Avx512};
    x86::Vec consts[9];
    emit_winograd_prologue(a, v, {2, 4, 8}, consts);
    a.mov(x86::rbx, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, tiles)));
    a.mov(x86::r8, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, m_point_bytes)));
    a.lea(x86::r9, x86::ptr(x86::r8, x86::r8, 1));
    a.add(x86::r9, x86::r9);   // 6 points: M's rows of points
    a.mov(x86::r10, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, o_pixel_bytes)));
    a.lea(x86::r11, x86::ptr(x86::r10, x86::r10, 1));
    x86::Vec in[6], out[4];
    for (uint32_t i = 0; i < 6; ++i) in[i] = v(i);
    for (uint32_t i = 0; i < 4; ++i) out[i] = v(6 + i);
    asmjit::Label tile = a.newLabel();
    a.bind(tile);
    a.mov(x86::rax, x86::rdi);
    for (int k = 0; k < 6; ++k) {
        a.lea(x86::rcx, x86::ptr(x86::r9, x86::r9, 1));
        a.add(x86::rcx, x86::rax);
        const x86::Mem points[6] = {x86::ptr(x86::rax), x86::ptr(x86::rax, x86::r9), x86::ptr(x86::rax, x86::r9, 1),
                                    x86::ptr(x86::rcx), x86::ptr(x86::rcx, x86::r9), x86::ptr(x86::rcx, x86::r9, 1)};
        for (int i = 0; i < 6; ++i) a.vmovups(in[i], points[i]);
        for (int r = 0; r < 4; ++r) {
            emit_winograd_combine(a, kWinogradAT[r], in, out[r], consts);
            a.vmovaps(x86::ptr(x86::rsp, (r * 6 + k) * v.bytes()), out[r]);
        }
        if (k < 5) a.add(x86::rax, x86::r8);
    }
    a.mov(x86::rcx, x86::rsi);
    for (int r = 0; r < 4; ++r) {
        for (int k = 0; k < 6; ++k) a.vmovaps(in[k], x86::ptr(x86::rsp, (r * 6 + k) * v.bytes()));
        for (int x = 0; x < 4; ++x) emit_winograd_combine(a, kWinogradAT[x], in, out[x], consts);
        a.vmovups(x86::ptr(x86::rcx), out[0]);
        a.vmovups(x86::ptr(x86::rcx, x86::r10), out[1]);
        a.vmovups(x86::ptr(x86::rcx, x86::r10, 1), out[2]);
        a.vmovups(x86::ptr(x86::rcx, x86::r11), out[3]);
        if (r < 3) a.add(x86::rcx, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, o_row_bytes)));
    }
    a.add(x86::rdi, x86::qword_ptr(x86::rdx, (int32_t)offsetof(P, tile_bytes)));
    a.lea(x86::rsi, x86::ptr(x86::rsi, x86::r10, 2));
    a.dec(x86::rbx);
    a.jnz(tile);
    emit_winograd_epilogue(a);
}
#define TESSEL_WINOGRAD_JIT 1
#endif
}  // namespace detail

Status WinogradF43::init(Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    input_ = nullptr;
    input_tail_ = nullptr;
    output_ = nullptr;
    lanes_ = 0;
#ifdef TESSEL_WINOGRAD_JIT
    struct Kernels { InputFn input, input_tail; OutputFn output; };
    auto make = [](Isa target) {
        Kernels k;
        k.input = detail::assemble_jit_kernel<InputFn>([&](detail::JitAssembler& a) { detail::emit_winograd_input(a, target, false); });
        k.input_tail = target == Isa::Avx512 ? k.input : detail::assemble_jit_kernel<InputFn>([&](detail::JitAssembler& a) {
            detail::emit_winograd_input(a, target, true);
        });
        k.output = detail::assemble_jit_kernel<OutputFn>([&](detail::JitAssembler& a) { detail::emit_winograd_output(a, target); });
        return k;
    };
    const Kernels* kernels = nullptr;
    if (isa == Isa::Avx512) {
        static const Kernels avx512 = make(Isa::Avx512);
        kernels = &avx512;
    } else if (isa == Isa::Avx2) {
        static const Kernels avx2 = make(Isa::Avx2);
        kernels = &avx2;
    }
    if (kernels) {
        if (!kernels->input || !kernels->input_tail || !kernels->output) return Status::Unsupported;
        input_ = kernels->input;
        input_tail_ = kernels->input_tail;
        output_ = kernels->output;
        lanes_ = isa_vector_floats(isa);
    }
#endif
    return Status::Ok;
}

size_t WinogradF43::weights_floats(int64_t maps, int64_t channels, int64_t panel) {
    return (size_t)(kPoints * (maps + panel - 1) / panel * channels * panel);
}

void WinogradF43::transform_weights(int64_t maps, int64_t channels, const float* w, int64_t panel, float* u) {
    const int64_t panels = (maps + panel - 1) / panel;
    std::memset(u, 0, weights_floats(maps, channels, panel) * sizeof(float));
    for (int64_t m = 0; m < maps; ++m)
        for (int64_t c = 0; c < channels; ++c) {
            const float* g = w + (m * channels + c) * 9;
            double gt[6][3];   // G g, then (G g) G^T point by point
            for (int i = 0; i < 6; ++i)
                for (int j = 0; j < 3; ++j)
                    gt[i][j] = detail::kWinogradG[i][0] * g[j] + detail::kWinogradG[i][1] * g[3 + j] + detail::kWinogradG[i][2] * g[6 + j];
            for (int i = 0; i < 6; ++i)
                for (int k = 0; k < 6; ++k) {
                    const double v = gt[i][0] * detail::kWinogradG[k][0] + gt[i][1] * detail::kWinogradG[k][1] +
                                     gt[i][2] * detail::kWinogradG[k][2];
                    u[((i * 6 + k) * panels + m / panel) * channels * panel + c * panel + m % panel] = (float)v;
                }
        }
}

void WinogradF43::transform_input(const float* rows, int64_t channels, int64_t channel_floats, int64_t row_floats, int64_t phase_floats,
                                  int64_t tiles, float* v, int64_t v_point, int64_t v_channel) const {
    if (channels <= 0 || tiles <= 0) return;
    if (input_) {
        InputParams params{channels, channel_floats * 4, row_floats * 4, phase_floats * 4, v_point * 4, v_channel * 4, 0xFFFFu, {}};
        for (int64_t t = 0; t < tiles; t += lanes_) {
            if (tiles - t >= lanes_) {
                params.mask = 0xFFFFu;
                input_(rows + t, v + t, &params);
                continue;
            }
            params.mask = (1u << (tiles - t)) - 1u;
            for (int64_t l = 0; l < 8; ++l) params.lanes[l] = l < tiles - t ? -1 : 0;
            input_tail_(rows + t, v + t, &params);
        }
        return;
    }
    for (int64_t c = 0; c < channels; ++c)
        for (int64_t t = 0; t < tiles; ++t) {
            float d[6][6], bd[6][6];   // d[j][l]: padded row j, column 4 t + l
            for (int j = 0; j < 6; ++j)
                for (int l = 0; l < 6; ++l) d[j][l] = rows[c * channel_floats + j * row_floats + l % 4 * phase_floats + t + l / 4];
            for (int l = 0; l < 6; ++l) {
                const float column[6] = {d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l]};
                for (int i = 0; i < 6; ++i) bd[i][l] = detail::winograd_combine(detail::kWinogradBT[i], column);
            }
            for (int i = 0; i < 6; ++i)
                for (int k = 0; k < 6; ++k) v[(i * 6 + k) * v_point + c * v_channel + t] = detail::winograd_combine(detail::kWinogradBT[k], bd[i]);
        }
}

void WinogradF43::transform_output(const float* m, int64_t m_point, int64_t ld, int64_t tiles, int64_t maps, float* o,
                                   int64_t o_row) const {
    if (tiles <= 0) return;
    if (output_) {
        const OutputParams params{tiles, ld * 4, m_point * 4, o_row * 4, ld * 4};
        for (int64_t j = 0; j < maps; j += lanes_) output_(m + j, o + j, &params);
        return;
    }
    for (int64_t t = 0; t < tiles; ++t)
        for (int64_t j = 0; j < maps; ++j) {
            float am[4][6];   // A^T M: row r, column k
            for (int k = 0; k < 6; ++k) {
                float column[6];
                for (int i = 0; i < 6; ++i) column[i] = m[(i * 6 + k) * m_point + t * ld + j];
                for (int r = 0; r < 4; ++r) am[r][k] = detail::winograd_combine(detail::kWinogradAT[r], column);
            }
            for (int r = 0; r < 4; ++r)
                for (int x = 0; x < 4; ++x) o[r * o_row + (4 * t + x) * ld + j] = detail::winograd_combine(detail::kWinogradAT[x], am[r]);
        }
}

// >>depthwise conv implementation
namespace detail {
constexpr int64_t kDepthwiseBlock = 16;     // output columns a phase row holds past out_w rounded up to
constexpr int64_t kDepthwiseJitTaps = 49;   // larger kernels run the portable loop (code size)
constexpr int64_t kDepthwiseMaxStride = 16;  // phases of a padded row

// Padded rows that output rows [row0, row1) read.
inline int64_t depthwise_band_rows(const DepthwiseShape& s, int64_t row0, int64_t row1) {
    return row1 <= row0 ? 0 : (row1 - 1 - row0) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
}

// Where tap column kw of output column 0 lies in a padded row: phase * phase floats + index.
inline int64_t depthwise_tap_column(const DepthwiseShape& s, int64_t phase, int64_t kw) {
    const int64_t c = kw * s.dilation_w;
    return c % s.stride_w * phase + c / s.stride_w;
}

#ifndef TESSEL_NO_JIT
#if defined(__x86_64__) || defined(_M_X64)
// The whole-plane kernel of one shape: accumulators 0.., the weights broadcast into the
// registers above them (or, when they do not fit, one at a time into a temporary), x read as
// FMA memory operands at immediate offsets. Arguments (System V): rdi padded band, rsi
// weights, rdx y band, rcx &bias, r8 AVX2 lane mask, r9 rows. Planes of at most `tile`
// vectors a row run floor(tile / vectors) rows per tile; wider ones tile-wide blocks per row.
// Only kernel rows [first, last) are summed (the others read padding for the rows it runs).
inline void emit_depthwise_x86(asmjit::x86::Assembler& a, Isa isa, const DepthwiseShape& s, int64_t phase,
                               int64_t pitch, int64_t first, int64_t last) {
    namespace x86 = asmjit::x86;
    const bool wide = isa == Isa::Avx512;
    const uint32_t vf = wide ? 16 : 8, vb = vf * 4, regs = wide ? 32 : 16, reserved = wide ? 0 : 1;
    const uint32_t taps = (uint32_t)((last - first) * s.kernel_w);
    uint32_t tile = 8;
    bool in_registers = true;
    if (tile + taps + reserved > regs) {
        if (4 + taps + reserved <= regs) tile = regs - reserved - taps;
        else in_registers = false;   // accumulators 0-7, temporary 8
    }
    auto v = [&](uint32_t id) -> x86::Vec { return wide ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id)); };
    const x86::Vec mask = v(regs - 1);
    const int64_t full = s.out_w / vf, tail = s.out_w % vf, vectors = full + (tail ? 1 : 0);
    const int32_t row_bytes = (int32_t)(s.stride_h * pitch * 4), out_row_bytes = (int32_t)(s.out_w * 4);
    struct Item { int32_t row, col; bool masked; };
    // One tile: acc_i = bias + sum of taps, stored to y; items at (row, byte column) of the bases.
    auto emit_tile = [&](const Item* items, uint32_t count, x86::Gp x, x86::Gp y) {
        bool any_masked = false;
        for (uint32_t i = 0; i < count; ++i) {
            a.vbroadcastss(v(i), x86::dword_ptr(x86::rcx));
            any_masked = any_masked || items[i].masked;
        }
        for (int64_t kh = first; kh < last; ++kh)
            for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const uint32_t t = (uint32_t)((kh - first) * s.kernel_w + kw);
                x86::Vec w = in_registers ? v(tile + t) : v(8);
                if (!in_registers) a.vbroadcastss(w, x86::dword_ptr(x86::rsi, (int32_t)((first * s.kernel_w + t) * 4)));
                const int64_t tap = (kh * s.dilation_h * pitch + depthwise_tap_column(s, phase, kw)) * 4;
                for (uint32_t i = 0; i < count; ++i)
                    a.vfmadd231ps(v(i), w, x86::ptr(x, (int32_t)(tap + (int64_t)items[i].row * row_bytes + items[i].col)));
            }
        if (any_masked && !wide) a.vmovdqu(mask, x86::ptr(x86::r8));
        for (uint32_t i = 0; i < count; ++i) {
            x86::Mem out = x86::ptr(y, items[i].row * out_row_bytes + items[i].col);
            if (!items[i].masked) a.vmovups(out, v(i));
            else if (wide) a.k(x86::k1).vmovups(out, v(i));
            else a.vmaskmovps(out, mask, v(i));
        }
    };
    if (wide && tail) {
        a.mov(x86::eax, (uint32_t)((1u << tail) - 1u));
        a.kmovw(x86::k1, x86::eax);
    }
    if (in_registers)
        for (uint32_t t = 0; t < taps; ++t)
            a.vbroadcastss(v(tile + t), x86::dword_ptr(x86::rsi, (int32_t)((first * s.kernel_w + t) * 4)));
    Item items[32];
    asmjit::Label rest = a.newLabel(), row_loop = a.newLabel(), done = a.newLabel();
    const int64_t group = vectors <= tile ? tile / vectors : 1;
    if (group > 1) {   // narrow planes: `group` whole rows per tile
        asmjit::Label group_loop = a.newLabel();
        uint32_t count = 0;
        for (int64_t r = 0; r < group; ++r)
            for (int64_t j = 0; j < vectors; ++j) items[count++] = Item{(int32_t)r, (int32_t)(j * vb), tail && j == full};
        a.bind(group_loop);
        a.cmp(x86::r9, (int32_t)group);
        a.jb(rest);
        emit_tile(items, count, x86::rdi, x86::rdx);
        a.add(x86::rdi, (int32_t)(group * row_bytes));
        a.add(x86::rdx, (int32_t)(group * out_row_bytes));
        a.sub(x86::r9, (int32_t)group);
        a.jmp(group_loop);
        // 2 .. group - 1 rows left: one tile of them all (a row at a time would chain every
        // tap through one accumulator)
        a.bind(rest);
        for (int64_t g = group - 1; g >= 2; --g) {
            asmjit::Label fewer = a.newLabel();
            a.cmp(x86::r9, (int32_t)g);
            a.jb(fewer);
            emit_tile(items, (uint32_t)(g * vectors), x86::rdi, x86::rdx);
            a.add(x86::rdi, (int32_t)(g * row_bytes));
            a.add(x86::rdx, (int32_t)(g * out_row_bytes));
            a.sub(x86::r9, (int32_t)g);
            a.jmp(done);
            a.bind(fewer);
        }
        rest = a.newLabel();
    }
    a.bind(rest);
    a.test(x86::r9, x86::r9);
    a.jz(done);
    a.bind(row_loop);
    a.mov(x86::rax, x86::rdi);
    a.mov(x86::r10, x86::rdx);
    const int64_t blocks = full / tile, left = full % tile;
    if (blocks > 0) {
        asmjit::Label block_loop = a.newLabel();
        for (uint32_t j = 0; j < tile; ++j) items[j] = Item{0, (int32_t)(j * vb), false};
        a.mov(x86::r11, blocks);
        a.bind(block_loop);
        emit_tile(items, tile, x86::rax, x86::r10);
        a.add(x86::rax, (int32_t)(tile * vb));
        a.add(x86::r10, (int32_t)(tile * vb));
        a.sub(x86::r11, 1);
        a.jnz(block_loop);
    }
    uint32_t count = 0;
    for (int64_t j = 0; j < left; ++j) items[count++] = Item{0, (int32_t)(j * vb), false};
    if (tail) items[count++] = Item{0, (int32_t)(left * vb), true};
    if (count) emit_tile(items, count, x86::rax, x86::r10);
    a.add(x86::rdi, row_bytes);
    a.add(x86::rdx, out_row_bytes);
    a.sub(x86::r9, 1);
    a.jnz(row_loop);
    a.bind(done);
    a.vzeroupper();
    a.ret();
}

inline DepthwiseConv::KernelFn make_depthwise_kernel(Isa isa, const DepthwiseShape& s, int64_t phase, int64_t pitch,
                                                     int64_t first, int64_t last) {
    return assemble_jit_kernel<DepthwiseConv::KernelFn>([&](JitAssembler& a) { emit_depthwise_x86(a, isa, s, phase, pitch, first, last); });
}

// The whole-planes kernel, stride_w 1: the lanes of output vector j (of `lanes`) that tap column
// kw reads inside the input row (and that are output columns).
inline uint32_t depthwise_plane_lanes(const DepthwiseShape& s, int64_t lanes, int64_t j, int64_t kw) {
    uint32_t on = 0;
    for (int64_t l = 0; l < lanes; ++l) {
        const int64_t column = j * lanes + l, at = column + kw * s.dilation_w - s.pad_left;
        if (column < s.out_w && at >= 0 && at < s.in_w) on |= 1u << l;
    }
    return on;
}

// Stride_w 2: output vector j's tap column kw reads the even lanes of 2 x `lanes` input columns;
// the lanes of half h inside the input row.
inline uint32_t depthwise_plane_half_lanes(const DepthwiseShape& s, int64_t lanes, int64_t j, int64_t kw, int64_t h) {
    uint32_t on = 0;
    for (int64_t l = 0; l < lanes; ++l) {
        const int64_t at = (2 * j + h) * lanes + l + kw * s.dilation_w - s.pad_left;
        if (at >= 0 && at < s.in_w) on |= 1u << l;
    }
    return on;
}

// The partial lane masks the kernel needs, in this order: the last output vector's, then the tap
// columns' (or their halves'); false when there are more than `most`.
inline bool depthwise_plane_masks(const DepthwiseShape& s, int64_t lanes, uint32_t* masks, uint32_t most, uint32_t* count) {
    const int64_t vectors = (s.out_w + lanes - 1) / lanes;
    const uint32_t full = (1u << lanes) - 1u;
    *count = 0;
    auto add = [&](uint32_t m) {
        if (m == 0 || m == full) return true;
        for (uint32_t i = 0; i < *count; ++i)
            if (masks[i] == m) return true;
        if (*count == most) return false;
        masks[(*count)++] = m;
        return true;
    };
    if (!add(s.out_w % lanes ? (1u << (s.out_w % lanes)) - 1u : full)) return false;
    for (int64_t j = 0; j < vectors; ++j)
        for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
            if (s.stride_w == 1 && !add(depthwise_plane_lanes(s, lanes, j, kw))) return false;
            if (s.stride_w == 2 && (!add(depthwise_plane_half_lanes(s, lanes, j, kw, 0)) || !add(depthwise_plane_half_lanes(s, lanes, j, kw, 1))))
                return false;
        }
    return true;
}

constexpr int64_t kDepthwisePlaneFmas = 1536;   // FMAs a kernel unrolls at most (code size)
constexpr uint32_t kDepthwisePlaneMasks = 32;   // AVX2's table of lane masks (AVX-512: k1-k7)

// How the whole-planes kernel walks a plane: groups of `rows` output rows (the last may be
// shorter); groups [loop_begin, loop_end) read no padding row and run as one loop body, the
// others are unrolled each.
struct DepthwisePlanesPlan {
    int64_t vectors, rows, groups, loop_begin, loop_end;
    int64_t unrolled_fmas;   // of the unrolled groups and the loop body: what the code holds
};

inline DepthwisePlanesPlan depthwise_planes_plan(const DepthwiseShape& s, int64_t lanes, uint32_t accumulators) {
    DepthwisePlanesPlan p;
    p.vectors = (s.out_w + lanes - 1) / lanes;
    const int64_t most = p.vectors <= (int64_t)accumulators ? (int64_t)accumulators / p.vectors : 1;
    p.groups = (s.out_h + most - 1) / most;
    p.rows = (s.out_h + p.groups - 1) / p.groups;
    p.groups = (s.out_h + p.rows - 1) / p.rows;
    auto inside = [&](int64_t g) {   // every row of group g reads only input rows, and the group is whole
        const int64_t r0 = g * p.rows, r1 = r0 + p.rows;
        return r1 <= s.out_h && r0 * s.stride_h - s.pad_top >= 0 &&
               (r1 - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h - s.pad_top < s.in_h;
    };
    p.loop_begin = p.loop_end = 0;
    for (int64_t g = 0; g < p.groups; ++g)
        if (inside(g)) {
            if (p.loop_end != g) p.loop_begin = g;
            p.loop_end = g + 1;
        }
    if (p.loop_end - p.loop_begin < 2) p.loop_begin = p.loop_end = 0;
    const int64_t unrolled = p.groups - (p.loop_end - p.loop_begin) + (p.loop_end > p.loop_begin ? 1 : 0);
    p.unrolled_fmas = unrolled * p.rows * p.vectors * s.kernel_h * s.kernel_w * s.stride_w;
    return p;
}

// Whole planes, AVX-512 or AVX2, stride_w 1 or 2: per plane the output rows in groups of up to
// 30 accumulators (AVX-512; 27 at stride 2; AVX2 11: vectors of a row x rows, groups as even as
// they go), each group starting at the bias and summing its taps in kernel order, the weight
// broadcast once per tap. Taps whose input row is outside the plane are skipped. Stride 1: x
// an FMA memory operand where it lies, border columns masked (AVX-512 merge masking: their
// lanes add nothing, read nothing; AVX2 vmaskmovps: they read zeros). Stride 2: x's 2 x lanes
// columns loaded in halves (zero masked outside the row), their even lanes taken by vpermt2ps
// (AVX-512) or vshufps and vpermpd (AVX2). AVX2's masks are a table after the code, loaded as
// needed. The groups that read no padding row (depthwise_planes_plan) are one loop body, rax and
// r10 at their first input and output rows; the others are unrolled. Arguments (System V): rdi
// x, rsi weights, rdx y, rcx bias, r8 planes (1 or more), r9 bias step in bytes.
inline void emit_depthwise_planes_x86(asmjit::x86::Assembler& a, Isa isa, const DepthwiseShape& s) {
    namespace x86 = asmjit::x86;
    const bool wide = isa == Isa::Avx512, strided = s.stride_w == 2;
    const int64_t lanes = wide ? 16 : 8;
    const uint32_t full = (1u << lanes) - 1u;
    uint32_t masks[kDepthwisePlaneMasks], mask_count = 0;
    depthwise_plane_masks(s, lanes, masks, wide ? 7 : kDepthwisePlaneMasks, &mask_count);
    auto mask_index = [&](uint32_t m) {
        uint32_t i = 0;
        while (i + 1 < mask_count && masks[i] != m) ++i;
        return i;
    };
    auto v = [&](uint32_t id) -> x86::Vec { return wide ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id)); };
    const x86::Vec weight = v(wide ? 31 : 15), bias = v(wide ? 30 : 14), low = v(wide ? 28 : 13), high = v(wide ? 27 : 11);
    const x86::Vec evens = v(29), mask = v(12);   // AVX-512's permutation, AVX2's mask
    asmjit::Label plane_loop = a.newLabel(), table = a.newLabel();
    if (wide)
        for (uint32_t i = 0; i < mask_count; ++i) {
            a.mov(x86::eax, masks[i]);
            a.kmovw(x86::k(i + 1), x86::eax);
        }
    int64_t loaded_mask = -1;   // AVX2: the table row in `mask` (reloaded at each plane)
    auto load_mask = [&](uint32_t m) {
        const uint32_t i = mask_index(m);
        if ((int64_t)i != loaded_mask) a.vmovdqa(mask, x86::ptr(table, (int32_t)(i * 32)));
        loaded_mask = i;
    };
    const DepthwisePlanesPlan plan = depthwise_planes_plan(s, lanes, wide ? (strided ? 27 : 30) : 11);
    const int64_t vectors = plan.vectors, in_plane = s.in_h * s.in_w, out_plane = s.out_h * s.out_w;
    // Output rows [r0, r1): x addressed from `x` (input row x_row there), y from `y` (output row y_row).
    auto emit_group = [&](int64_t r0, int64_t r1, const x86::Gp& x, int64_t x_row, const x86::Gp& y, int64_t y_row) {
        const uint32_t count = (uint32_t)((r1 - r0) * vectors);
        for (uint32_t i = 0; i < count; ++i) a.vmovaps(v(i), bias);
        for (int64_t kh = 0; kh < s.kernel_h; ++kh)
            for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                bool loaded = false;
                for (int64_t r = r0; r < r1; ++r) {
                    const int64_t in_row = r * s.stride_h + kh * s.dilation_h - s.pad_top;
                    if (in_row < 0 || in_row >= s.in_h) continue;
                    for (int64_t j = 0; j < vectors; ++j) {
                        const uint32_t on = strided ? 0 : depthwise_plane_lanes(s, lanes, j, kw);
                        const uint32_t halves[2] = {strided ? depthwise_plane_half_lanes(s, lanes, j, kw, 0) : 0,
                                                    strided ? depthwise_plane_half_lanes(s, lanes, j, kw, 1) : 0};
                        if (!on && !halves[0] && !halves[1]) continue;
                        if (!loaded) a.vbroadcastss(weight, x86::dword_ptr(x86::rsi, (int32_t)((kh * s.kernel_w + kw) * 4)));
                        loaded = true;
                        const x86::Vec acc = v((uint32_t)((r - r0) * vectors + j));
                        const int64_t column = j * s.stride_w * lanes + kw * s.dilation_w - s.pad_left;
                        if (!strided) {
                            const x86::Mem at = x86::ptr(x, (int32_t)(((in_row - x_row) * s.in_w + column) * 4));
                            if (on == full) {
                                a.vfmadd231ps(acc, weight, at);
                            } else if (wide) {
                                a.k(x86::k(mask_index(on) + 1)).vfmadd231ps(acc, weight, at);
                            } else {
                                load_mask(on);
                                a.vmaskmovps(low, mask, at);
                                a.vfmadd231ps(acc, weight, low);
                            }
                            continue;
                        }
                        const x86::Vec half[2] = {low, high};
                        for (int h = 0; h < 2; ++h) {
                            const x86::Mem part = x86::ptr(x, (int32_t)(((in_row - x_row) * s.in_w + column + lanes * h) * 4));
                            if (halves[h] == full) {
                                a.vmovups(half[h], part);
                            } else if (!halves[h]) {
                                a.vxorps(half[h], half[h], half[h]);
                            } else if (wide) {
                                a.k(x86::k(mask_index(halves[h]) + 1)).z().vmovups(half[h], part);
                            } else {
                                load_mask(halves[h]);
                                a.vmaskmovps(half[h], mask, part);
                            }
                        }
                        if (wide) {
                            a.vpermt2ps(low, evens, high);
                        } else {   // [l0 l2 h0 h2 | l4 l6 h4 h6], then the 64-bit pairs in order
                            a.vshufps(low, low, high, 0x88);
                            a.vpermpd(low, low, 0xD8);
                        }
                        a.vfmadd231ps(acc, weight, low);
                    }
                }
            }
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t j = 0; j < vectors; ++j) {
                const x86::Mem out = x86::ptr(y, (int32_t)(((r - y_row) * s.out_w + j * lanes) * 4));
                const x86::Vec acc = v((uint32_t)((r - r0) * vectors + j));
                if (j * lanes + lanes <= s.out_w) {
                    a.vmovups(out, acc);
                } else if (wide) {
                    a.k(x86::k(mask_index((1u << (s.out_w % lanes)) - 1u) + 1)).vmovups(out, acc);
                } else {
                    load_mask((1u << (s.out_w % lanes)) - 1u);
                    a.vmaskmovps(out, mask, acc);
                }
            }
    };
    if (wide && strided) a.vmovups(evens, x86::ptr(table));
    a.bind(plane_loop);
    loaded_mask = -1;
    a.vbroadcastss(bias, x86::dword_ptr(x86::rcx));
    for (int64_t g = 0; g < plan.groups;) {
        const int64_t r0 = g * plan.rows, r1 = r0 + plan.rows < s.out_h ? r0 + plan.rows : s.out_h;
        if (g != plan.loop_begin || plan.loop_end == plan.loop_begin) {
            emit_group(r0, r1, x86::rdi, 0, x86::rdx, 0);
            ++g;
            continue;
        }
        // groups reading no padding row: one body, rax and r10 at the group's first input and output rows
        const int64_t x_row = r0 * s.stride_h - s.pad_top;
        asmjit::Label group_loop = a.newLabel();
        a.lea(x86::rax, x86::ptr(x86::rdi, (int32_t)(x_row * s.in_w * 4)));
        a.lea(x86::r10, x86::ptr(x86::rdx, (int32_t)(r0 * s.out_w * 4)));
        a.mov(x86::r11, plan.loop_end - plan.loop_begin);
        a.bind(group_loop);
        loaded_mask = -1;
        emit_group(r0, r1, x86::rax, x_row, x86::r10, r0);
        a.add(x86::rax, (int32_t)(plan.rows * s.stride_h * s.in_w * 4));
        a.add(x86::r10, (int32_t)(plan.rows * s.out_w * 4));
        a.sub(x86::r11, 1);
        a.jnz(group_loop);
        loaded_mask = -1;
        g = plan.loop_end;
    }
    a.add(x86::rdi, (int32_t)(in_plane * 4));
    a.add(x86::rdx, (int32_t)(out_plane * 4));
    a.add(x86::rsi, (int32_t)(s.kernel_h * s.kernel_w * 4));
    a.add(x86::rcx, x86::r9);
    a.sub(x86::r8, 1);
    a.jnz(plane_loop);
    a.vzeroupper();
    a.ret();
    a.align(asmjit::AlignMode::kData, 64);
    a.bind(table);
    if (wide) {
        for (uint32_t l = 0; l < 16; ++l) a.embedUInt32(2 * l);
    } else {
        for (uint32_t i = 0; i < mask_count; ++i)
            for (int64_t l = 0; l < lanes; ++l) a.embedUInt32(masks[i] >> l & 1u ? 0xFFFFFFFFu : 0u);
    }
}

// Whether the whole-planes kernel takes the shape on `isa` (AVX-512 or AVX2): stride_w 1 or 2,
// a row in the accumulators, the masks it needs at hand, at most kDepthwisePlaneFmas unrolled
// FMAs (counted twice at stride 2, four instructions each), offsets far inside 32 bits.
inline bool depthwise_planes_fit(Isa isa, const DepthwiseShape& s) {
    if (isa != Isa::Avx512 && isa != Isa::Avx2) return false;
    const int64_t lanes = isa == Isa::Avx512 ? 16 : 8;
    const uint32_t accumulators = isa == Isa::Avx512 ? (s.stride_w == 2 ? 27 : 30) : 11;
    uint32_t masks[kDepthwisePlaneMasks], count = 0;
    const DepthwisePlanesPlan plan = depthwise_planes_plan(s, lanes, accumulators);
    return (s.stride_w == 1 || s.stride_w == 2) && plan.vectors <= (int64_t)accumulators && s.in_h * s.in_w <= ((int64_t)1 << 24) &&
           plan.unrolled_fmas <= kDepthwisePlaneFmas && depthwise_plane_masks(s, lanes, masks, isa == Isa::Avx512 ? 7 : kDepthwisePlaneMasks, &count);
}
#define TESSEL_DEPTHWISE_PLANES_JIT 1
#define TESSEL_DEPTHWISE_JIT 1
#endif
#if defined(__aarch64__)
// The NEON kernel of one shape, laid out as the x86 one: accumulators v16-v23, the weights by
// element in v0-v7 (at most 32 taps), x loaded into v24-v27 at tap base + tile offset (the
// tile offsets are multiples of 16: pitches are 64-byte multiples). No masked store: a
// partial last vector is stored lane by lane. Arguments (AAPCS64): x0 padded band, x1
// weights, x2 y band, x3 &bias, x5 rows. Only kernel rows [first, last) are summed.
inline void emit_depthwise_a64(asmjit::a64::Assembler& a, const DepthwiseShape& s, int64_t phase, int64_t pitch,
                               int64_t first, int64_t last) {
    namespace a64 = asmjit::a64;
    const uint32_t vb = 16, tile = 8, taps = (uint32_t)((last - first) * s.kernel_w);
    const int64_t full = s.out_w / 4, tail = s.out_w % 4, vectors = full + (tail ? 1 : 0);
    const int64_t row_bytes = s.stride_h * pitch * 4, out_row_bytes = s.out_w * 4;
    auto acc = [&](uint32_t i) { return a64::v(16 + i); };
    // dst = base + offset (x13 holds large offsets)
    auto address = [&](const a64::Gp& dst, const a64::Gp& base, int64_t offset) {
        if (offset < 4096) {
            a.add(dst, base, (uint32_t)offset);
        } else {
            a.mov(a64::x13, (uint64_t)offset);
            a.add(dst, base, a64::x13);
        }
    };
    struct Item { int64_t row, col; bool partial; };
    auto emit_tile = [&](const Item* items, uint32_t count, const a64::Gp& x, const a64::Gp& y) {
        for (uint32_t i = 0; i < count; ++i) a.mov(acc(i).b16(), a64::v(28).b16());
        uint32_t load = 0;
        for (int64_t kh = first; kh < last; ++kh)
            for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const uint32_t t = (uint32_t)((kh - first) * s.kernel_w + kw);
                address(a64::x11, x, (kh * s.dilation_h * pitch + depthwise_tap_column(s, phase, kw)) * 4);
                for (uint32_t i = 0; i < count; ++i) {
                    const int64_t offset = items[i].row * row_bytes + items[i].col;
                    a64::Vec xv = a64::v(24 + (load++ & 3));
                    if (offset <= 65520) {
                        a.ldr(xv.q(), a64::ptr(a64::x11, (int32_t)offset));
                    } else {
                        address(a64::x12, a64::x11, offset);
                        a.ldr(xv.q(), a64::ptr(a64::x12));
                    }
                    a.fmla(acc(i).s4(), xv.s4(), a64::v(t / 4).s(t % 4));
                }
            }
        for (uint32_t i = 0; i < count; ++i) {
            const int64_t offset = items[i].row * out_row_bytes + items[i].col;
            address(a64::x12, y, offset);
            if (!items[i].partial) {
                a.str(acc(i).q(), a64::ptr(a64::x12));
                continue;
            }
            for (int64_t l = 0; l < tail; ++l) {
                if (l == 0) {
                    a.str(a64::s(16 + i), a64::ptr(a64::x12));
                } else {
                    a.dup(a64::s(29), acc(i).s((uint32_t)l));
                    a.str(a64::s(29), a64::ptr(a64::x12, (int32_t)(4 * l)));
                }
            }
        }
    };
    for (uint32_t t = 0; t < taps; ++t) {   // exactly the taps' floats: the weights may end a page
        a.ldr(a64::s(29), a64::ptr(a64::x1, (int32_t)((first * s.kernel_w + t) * 4)));
        a.mov(a64::v(t / 4).s(t % 4), a64::v(29).s(0));
    }
    a.ld1r(a64::v(28).s4(), a64::ptr(a64::x3));
    Item items[8];
    asmjit::Label rest = a.newLabel(), row_loop = a.newLabel(), done = a.newLabel();
    const int64_t group = vectors <= tile ? tile / vectors : 1;
    if (group > 1) {
        asmjit::Label group_loop = a.newLabel();
        uint32_t count = 0;
        for (int64_t r = 0; r < group; ++r)
            for (int64_t j = 0; j < vectors; ++j) items[count++] = Item{r, j * vb, tail && j == full};
        a.bind(group_loop);
        a.cmp(a64::x5, (uint32_t)group);
        a.b_lo(rest);
        emit_tile(items, count, a64::x0, a64::x2);
        address(a64::x0, a64::x0, group * row_bytes);
        address(a64::x2, a64::x2, group * out_row_bytes);
        a.sub(a64::x5, a64::x5, (uint32_t)group);
        a.b(group_loop);
        // 2 .. group - 1 rows left: one tile of them all (as on x86)
        a.bind(rest);
        for (int64_t g = group - 1; g >= 2; --g) {
            asmjit::Label fewer = a.newLabel();
            a.cmp(a64::x5, (uint32_t)g);
            a.b_lo(fewer);
            emit_tile(items, (uint32_t)(g * vectors), a64::x0, a64::x2);
            a.b(done);
            a.bind(fewer);
        }
        rest = a.newLabel();
    }
    a.bind(rest);
    a.cbz(a64::x5, done);
    a.bind(row_loop);
    a.mov(a64::x9, a64::x0);
    a.mov(a64::x10, a64::x2);
    const int64_t blocks = full / tile, left = full % tile;
    if (blocks > 0) {
        asmjit::Label block_loop = a.newLabel();
        for (uint32_t j = 0; j < tile; ++j) items[j] = Item{0, j * vb, false};
        a.mov(a64::x14, (uint64_t)blocks);
        a.bind(block_loop);
        emit_tile(items, tile, a64::x9, a64::x10);
        a.add(a64::x9, a64::x9, tile * vb);
        a.add(a64::x10, a64::x10, tile * vb);
        a.subs(a64::x14, a64::x14, 1);
        a.b_ne(block_loop);
    }
    uint32_t count = 0;
    for (int64_t j = 0; j < left; ++j) items[count++] = Item{0, j * vb, false};
    if (tail) items[count++] = Item{0, left * vb, true};
    if (count) emit_tile(items, count, a64::x9, a64::x10);
    address(a64::x0, a64::x0, row_bytes);
    address(a64::x2, a64::x2, out_row_bytes);
    a.subs(a64::x5, a64::x5, 1);
    a.b_ne(row_loop);
    a.bind(done);
    a.ret(a64::x30);
}

inline DepthwiseConv::KernelFn make_depthwise_kernel(Isa, const DepthwiseShape& s, int64_t phase, int64_t pitch,
                                                     int64_t first, int64_t last) {
    return assemble_jit_kernel<DepthwiseConv::KernelFn>([&](JitAssembler& a) { emit_depthwise_a64(a, s, phase, pitch, first, last); });
}
#define TESSEL_DEPTHWISE_JIT 1
#endif
#endif

// Kernels made so far, by target, shape class (output width, kernel, strides, dilations) and
// kernel rows summed, for the life of the process like the GEMM tiles; past the capacity, new
// classes run the portable loop (border rows: the whole-kernel one).
struct DepthwiseKernelKey {
    Isa isa;
    DepthwiseShape shape;   // the input dims, pads and output rows zero: the kernel does not take them
    int64_t first, last;
    bool operator==(const DepthwiseKernelKey& o) const {
        return isa == o.isa && first == o.first && last == o.last && std::memcmp(&shape, &o.shape, sizeof shape) == 0;
    }
};
using DepthwiseKernelTable = JitKernelTable<DepthwiseKernelKey, DepthwiseConv::KernelFn, 1024>;

inline DepthwiseKernelTable& depthwise_kernels() {
    static DepthwiseKernelTable table;
    return table;
}

// The whole-planes kernels, by the whole shape (the kernel takes every dim as an immediate).
struct DepthwisePlanesKey {
    Isa isa;
    DepthwiseShape shape;
    bool operator==(const DepthwisePlanesKey& o) const { return isa == o.isa && std::memcmp(&shape, &o.shape, sizeof shape) == 0; }
};
using DepthwisePlanesTable = JitKernelTable<DepthwisePlanesKey, DepthwiseConv::PlanesFn, 1024>;

inline DepthwisePlanesTable& depthwise_planes_kernels() {
    static DepthwisePlanesTable table;
    return table;
}

// The portable loop: 16 columns at a time in four 4-float vectors (GCC vector extensions),
// the taps in the reference's order; the last columns one at a time.
inline void depthwise_portable_rows(const DepthwiseShape& s, int64_t phase, int64_t pitch, const float* scratch,
                                    const float* weights, float bias, float* y, int64_t row0, int64_t row1) {
    for (int64_t r = row0; r < row1; ++r) {
        const float* base = scratch + (r - row0) * s.stride_h * pitch;
        float* out = y + r * s.out_w;
        int64_t ow = 0;
#if defined(__GNUC__)
        typedef float Vec4 __attribute__((vector_size(16)));
        for (; ow + 16 <= s.out_w; ow += 16) {
            Vec4 acc[4];
            for (int j = 0; j < 4; ++j) acc[j] = Vec4{bias, bias, bias, bias};
            for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
                const float* row = base + kh * s.dilation_h * pitch + ow;
                for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                    const float* src = row + depthwise_tap_column(s, phase, kw);
                    const float wv = weights[kh * s.kernel_w + kw];
                    for (int j = 0; j < 4; ++j) {
                        Vec4 xv;
                        std::memcpy(&xv, src + 4 * j, sizeof xv);
                        acc[j] += wv * xv;
                    }
                }
            }
            std::memcpy(out + ow, acc, sizeof acc);
        }
#endif
        for (; ow < s.out_w; ++ow) {
            float acc = bias;
            for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
                const float* row = base + kh * s.dilation_h * pitch + ow;
                for (int64_t kw = 0; kw < s.kernel_w; ++kw)
                    acc += weights[kh * s.kernel_w + kw] * row[depthwise_tap_column(s, phase, kw)];
            }
            out[ow] = acc;
        }
    }
}
}  // namespace detail

Status DepthwiseConv::init(const DepthwiseShape& s, Isa isa, bool whole_planes) {
    (void)whole_planes;   // x86 only
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    const int64_t limit = (int64_t)1 << 24;
    const int64_t dims[] = {s.in_h, s.in_w, s.out_h, s.out_w, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w,
                            s.dilation_h, s.dilation_w};
    for (int64_t d : dims)
        if (d < 1 || d > limit) return Status::InvalidArgument;
    if (s.pad_top < 0 || s.pad_left < 0 || s.pad_top > limit || s.pad_left > limit) return Status::InvalidArgument;
    // The copy keeps stride_w phases of every row: bounded, so that its size stays sane.
    const double phase = (double)s.out_w + detail::kDepthwiseBlock + (double)(s.kernel_w - 1) * (double)s.dilation_w / (double)s.stride_w;
    const double rows = (double)(s.out_h - 1) * (double)s.stride_h + (double)(s.kernel_h - 1) * (double)s.dilation_h + 1;
    if (s.stride_w > detail::kDepthwiseMaxStride || rows * phase * (double)s.stride_w > (double)((int64_t)1 << 40))
        return Status::Unsupported;
    shape_ = s;
    isa_ = isa;
    kernel_ = nullptr;
    planes_kernel_ = nullptr;
    row_kernel_count_ = 0;
    // rows whose window lies inside the input top to bottom
    full_begin_ = (s.pad_top + s.stride_h - 1) / s.stride_h;
    const int64_t below = s.in_h - 1 - (s.kernel_h - 1) * s.dilation_h + s.pad_top;   // last row's top input row, + pad_top
    full_end_ = below < 0 ? 0 : below / s.stride_h + 1;
    if (full_end_ > s.out_h) full_end_ = s.out_h;
    if (full_begin_ > full_end_) full_begin_ = full_end_;
    phase_ = (s.out_w + detail::kDepthwiseBlock - 1) / detail::kDepthwiseBlock * detail::kDepthwiseBlock +
             (s.kernel_w - 1) * s.dilation_w / s.stride_w;
    pitch_ = (s.stride_w * phase_ + 15) / 16 * 16;
    const int64_t tail = s.out_w % 8;
    for (int64_t l = 0; l < 8; ++l) mask_[l] = l < tail ? -1 : 0;
#ifdef TESSEL_DEPTHWISE_JIT
    // The JIT takes byte offsets within a band of the whole plane as 32-bit immediates.
    const int64_t band_bytes = detail::depthwise_band_rows(s, 0, s.out_h) * pitch_ * 4;
    const int64_t jit_taps = isa == Isa::Neon ? 32 : detail::kDepthwiseJitTaps;   // NEON: the weights in v0-v7
    if ((isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon) && s.kernel_h * s.kernel_w <= jit_taps &&
        band_bytes < ((int64_t)1 << 30)) {
        // what the kernel takes as immediates: the input dims, pads and rows stay out of the key
        DepthwiseShape key = s;
        key.in_h = key.in_w = key.out_h = key.pad_top = key.pad_left = 0;
        auto find_or_make = [&](int64_t first, int64_t last) -> KernelFn {
            return detail::depthwise_kernels().find_or_make(detail::DepthwiseKernelKey{isa, key, first, last}, [&] {
                return detail::make_depthwise_kernel(isa, s, phase_, pitch_, first, last);
            });
        };
        kernel_ = find_or_make(0, s.kernel_h);
        // The border rows at either end (a few: the rows past them read padding only or the
        // whole kernel), each distinct range of kernel rows once. Rows of one vector keep the
        // whole kernel: several rows a call (a tile) save more than the skipped taps.
        const int64_t lanes = isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 4;
        const int64_t ends = s.out_w > lanes ? 2 * s.kernel_h * s.dilation_h : 0, top_end = ends < s.out_h ? ends : s.out_h;
        const int64_t bottom = s.out_h - ends > top_end ? s.out_h - ends : top_end;
        for (int64_t i = 0; kernel_ && i < top_end + (s.out_h - bottom); ++i) {
            const int64_t row = i < top_end ? i : bottom + (i - top_end);
            int64_t first = 0, last = 0;
            row_taps(row, &first, &last);
            if (first == 0 && last == s.kernel_h) continue;
            bool known = false;
            for (int k = 0; k < row_kernel_count_; ++k) known = known || (row_kernels_[k].first == first && row_kernels_[k].last == last);
            if (known || row_kernel_count_ == kRowKernels) continue;
            if (KernelFn fn = find_or_make(first, last)) row_kernels_[row_kernel_count_++] = RowKernel{first, last, fn};
        }
    }
#endif
#ifdef TESSEL_DEPTHWISE_PLANES_JIT
    // Rows of 8 or fewer: AVX2's vectors on AVX-512 too (a zmm would leave half its lanes idle)
    const Isa planes_isa = isa == Isa::Avx512 && s.out_w <= 8 ? Isa::Avx2 : isa;
    if (whole_planes && detail::depthwise_planes_fit(planes_isa, s))
        planes_kernel_ = detail::depthwise_planes_kernels().find_or_make(detail::DepthwisePlanesKey{planes_isa, s}, [&] {
            return detail::assemble_jit_kernel<PlanesFn>([&](detail::JitAssembler& a) { detail::emit_depthwise_planes_x86(a, planes_isa, s); });
        });
#endif
    return Status::Ok;
}

// The kernel rows whose input row lies inside the input for output row `row`: [first, last)
// (first == last when every tap reads padding).
void DepthwiseConv::row_taps(int64_t row, int64_t* first, int64_t* last) const {
    const DepthwiseShape& s = shape_;
    const int64_t top = row * s.stride_h - s.pad_top;   // input row of kernel row 0
    int64_t f = top >= 0 ? 0 : (-top + s.dilation_h - 1) / s.dilation_h;
    int64_t l = s.in_h - top <= 0 ? 0 : (s.in_h - top + s.dilation_h - 1) / s.dilation_h;
    if (f > s.kernel_h) f = s.kernel_h;
    if (l > s.kernel_h) l = s.kernel_h;
    if (l < f) l = f;
    *first = f;
    *last = l;
}

DepthwiseConv::KernelFn DepthwiseConv::row_kernel(int64_t first, int64_t last) const {
    if (first == 0 && last == shape_.kernel_h) return kernel_;
    for (int k = 0; k < row_kernel_count_; ++k)
        if (row_kernels_[k].first == first && row_kernels_[k].last == last) return row_kernels_[k].fn;
    return kernel_;
}

size_t DepthwiseConv::scratch_floats(int64_t rows) const {
    if (rows > shape_.out_h) rows = shape_.out_h;
    return (size_t)(detail::depthwise_band_rows(shape_, 0, rows) * pitch_) + 16;
}

namespace detail {
// d[i] = src[i * step] for i in [0, n): contiguous runs in 4-float pieces, stride 2 split by
// shuffles (GCC and clang vector extensions), other strides one at a time.
inline void depthwise_copy(float* d, const float* src, int64_t n, int64_t step) {
    int64_t i = 0;
#if defined(__GNUC__)
    typedef float Vec4 __attribute__((vector_size(16)));
#if !defined(__clang__)
    typedef int Int4 __attribute__((vector_size(16)));
#endif
    if (step == 1) {
        for (; i + 4 <= n; i += 4) {
            Vec4 v;
            std::memcpy(&v, src + i, sizeof v);
            std::memcpy(d + i, &v, sizeof v);
        }
    } else if (step == 2) {
        for (; i + 4 <= n && 2 * i + 8 <= 2 * n - 1; i += 4) {   // reads src[2i .. 2i+7]: within 2n - 1
            Vec4 a, b;
            std::memcpy(&a, src + 2 * i, sizeof a);
            std::memcpy(&b, src + 2 * i + 4, sizeof b);
#if defined(__clang__)
            Vec4 even = __builtin_shufflevector(a, b, 0, 2, 4, 6);
#else
            Vec4 even = __builtin_shuffle(a, b, Int4{0, 2, 4, 6});
#endif
            std::memcpy(d + i, &even, sizeof even);
        }
    }
#endif
    for (; i < n; ++i) d[i] = src[i * step];
}

// even[k] = src[2k] for k < n_even, odd[k] = src[2k + 1] for k < n_odd (n_odd <= n_even <= n_odd + 1
// when the phases are not cut short): one load of 8 floats feeds both.
inline void depthwise_deinterleave(float* even, int64_t n_even, float* odd, int64_t n_odd, const float* src) {
    int64_t k = 0;
#if defined(__GNUC__)
    typedef float Vec4 __attribute__((vector_size(16)));
#if !defined(__clang__)
    typedef int Int4 __attribute__((vector_size(16)));
#endif
    for (; k + 4 <= n_even && k + 4 <= n_odd; k += 4) {   // reads src[2k .. 2k+7]: src[2 n_odd - 1] at most
        Vec4 lo, hi;
        std::memcpy(&lo, src + 2 * k, sizeof lo);
        std::memcpy(&hi, src + 2 * k + 4, sizeof hi);
#if defined(__clang__)
        Vec4 e = __builtin_shufflevector(lo, hi, 0, 2, 4, 6), o = __builtin_shufflevector(lo, hi, 1, 3, 5, 7);
#else
        Vec4 e = __builtin_shuffle(lo, hi, Int4{0, 2, 4, 6}), o = __builtin_shuffle(lo, hi, Int4{1, 3, 5, 7});
#endif
        std::memcpy(even + k, &e, sizeof e);
        std::memcpy(odd + k, &o, sizeof o);
    }
#endif
    for (int64_t i = k; i < n_even; ++i) even[i] = src[2 * i];
    for (int64_t i = k; i < n_odd; ++i) odd[i] = src[2 * i + 1];
}
}  // namespace detail

// Rows past the input are zero rows; a row of the input is, per phase, zeros up to lo, the
// input's columns in [lo, hi) and zeros from hi. With zeros_ready only [lo, hi) is written.
void DepthwiseConv::pad(const float* x, int64_t row0, int64_t row1, float* scratch, bool zeros_ready) const {
    const DepthwiseShape& s = shape_;
    const int64_t first = row0 * s.stride_h, rows = detail::depthwise_band_rows(s, row0, row1);
    // Phase p's index i holds input column i * stride_w + p - pad_left: inside the row for i in
    // [lo, hi). The same for every row, so computed once (init bounds stride_w).
    int64_t start[detail::kDepthwiseMaxStride], lo[detail::kDepthwiseMaxStride], hi[detail::kDepthwiseMaxStride];
    for (int64_t p = 0; p < s.stride_w; ++p) {
        start[p] = p - s.pad_left;
        lo[p] = start[p] >= 0 ? 0 : (-start[p] + s.stride_w - 1) / s.stride_w;
        hi[p] = s.in_w - 1 - start[p] < 0 ? 0 : (s.in_w - 1 - start[p]) / s.stride_w + 1;
        if (hi[p] > phase_) hi[p] = phase_;
        if (lo[p] > hi[p]) lo[p] = hi[p];
    }
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t in_row = first + r - s.pad_top;
        float* dst = scratch + r * pitch_;
        if (in_row < 0 || in_row >= s.in_h) {
            if (!zeros_ready) std::memset(dst, 0, (size_t)pitch_ * sizeof(float));
            continue;
        }
        const float* src = x + in_row * s.in_w;
        for (int64_t p = 0; p < s.stride_w; ++p) {
            float* d = dst + p * phase_;
            if (!zeros_ready) {
                std::memset(d, 0, (size_t)lo[p] * sizeof(float));
                std::memset(d + hi[p], 0, (size_t)(phase_ - hi[p]) * sizeof(float));
            }
            if (s.stride_w != 2) detail::depthwise_copy(d + lo[p], src + lo[p] * s.stride_w + start[p], hi[p] - lo[p], s.stride_w);
        }
        if (s.stride_w == 2) {   // both phases in one pass: phase a holds the even columns from 0
            const int64_t a = s.pad_left % 2, b = 1 - a;
            detail::depthwise_deinterleave(dst + a * phase_ + lo[a], hi[a] - lo[a], dst + b * phase_ + lo[b], hi[b] - lo[b], src);
        }
    }
}

void DepthwiseConv::run_rows(const float* scratch, const float* weights, float bias, float* y, int64_t row0,
                             int64_t row1) const {
    if (row1 <= row0) return;
    if (kernel_ && row_kernel_count_ == 0) {
        kernel_(scratch, weights, y + row0 * shape_.out_w, &bias, mask_, row1 - row0);
        return;
    }
    if (kernel_) {
        // the rows inside [full_begin_, full_end_) in one call, each border row on its kernel
        for (int64_t row = row0; row < row1;) {
            KernelFn fn = kernel_;
            int64_t end = row + 1;
            if (row >= full_begin_ && row < full_end_) {
                end = row1 < full_end_ ? row1 : full_end_;
            } else {
                int64_t first, last;
                row_taps(row, &first, &last);
                fn = row_kernel(first, last);
            }
            fn(scratch + (row - row0) * shape_.stride_h * pitch_, weights, y + row * shape_.out_w, &bias, mask_, end - row);
            row = end;
        }
        return;
    }
    detail::depthwise_portable_rows(shape_, phase_, pitch_, scratch, weights, bias, y, row0, row1);
}

void DepthwiseConv::run_planes(const float* x, const float* weights, const float* bias, float* y, int64_t planes) const {
    static const float zero = 0.0f;
    if (planes > 0) planes_kernel_(x, weights, y, bias ? bias : &zero, planes, bias ? 4 : 0);
}


// >>pool rows implementation
namespace detail {
constexpr uint32_t kPoolRowsTile = 4;   // vectors a tile keeps in flight (each its own chain of maxima)

// One vector of a tile: outputs [j, j + width) from the tile's base pointers.
struct PoolRowsItem { int64_t j; uint32_t width; };

// The vectors of a row: `tiles` loop iterations of kPoolRowsTile full vectors, then `rest` from
// where the loop leaves the pointers: the full vectors left and, for a partial last one, a full
// vector ending at count (overlapping). A row shorter than a vector takes the widest narrower
// width that fits, the same way, down to single lanes.
struct PoolRowsPlan {
    int64_t tiles = 0;
    uint32_t vector = 1;
    PoolRowsItem rest[kPoolRowsTile] = {};
    uint32_t rest_count = 0;
};

inline PoolRowsPlan pool_rows_plan(Isa isa, int64_t count) {
    static const uint32_t avx512[] = {16, 8, 4, 1}, avx2[] = {8, 4, 1}, four[] = {4, 1};
    const uint32_t* widths = isa == Isa::Avx512 ? avx512 : isa == Isa::Avx2 ? avx2 : four;
    PoolRowsPlan p;
    p.vector = widths[0];
    const int64_t vf = widths[0];
    if (count >= vf) {
        const int64_t full = count / vf;
        p.tiles = full / kPoolRowsTile;
        const int64_t base = p.tiles * kPoolRowsTile * vf;
        for (int64_t v = p.tiles * kPoolRowsTile; v < full; ++v) p.rest[p.rest_count++] = PoolRowsItem{v * vf - base, (uint32_t)vf};
        if (count % vf) p.rest[p.rest_count++] = PoolRowsItem{count - vf - base, (uint32_t)vf};
        return p;
    }
    int i = 1;
    while (widths[i] > count) ++i;   // the widths end with 1
    const uint32_t w = widths[i];
    for (int64_t i = 0; i < count / w; ++i) p.rest[p.rest_count++] = PoolRowsItem{i * w, w};
    if (count % w) p.rest[p.rest_count++] = PoolRowsItem{count - w, w};
    return p;
}

#ifndef TESSEL_NO_JIT
#if defined(__x86_64__) || defined(_M_X64)
// Arguments (System V): rdi x, rsi y, rdx rows. Per tile: accumulators 0-3, taps into 4-7
// (SSE4.1's second stride-2 load into 8-11), AVX-512's stride-2 lane order in zmm12. A
// stride-2 tap is two loads deinterleaved by one shufps; tap 0's second load starts a float
// early (its odd lanes are the even taps), so no load reads past the last tap. shufps leaves
// the 128-bit lanes' halves interleaved across a ymm or zmm: one vpermpd per vector restores
// the order before the store.
inline void emit_pool_rows_x86(asmjit::x86::Assembler& a, Isa isa, const PoolRowShape& s) {
    namespace x86 = asmjit::x86;
    const bool vex = isa != Isa::Sse41;
    const PoolRowsPlan plan = pool_rows_plan(isa, s.count);
    auto reg = [](uint32_t id, uint32_t width) -> x86::Vec {
        return width == 16 ? x86::Vec(x86::zmm(id)) : width == 8 ? x86::Vec(x86::ymm(id)) : x86::Vec(x86::xmm(id));
    };
    const bool lane_order = isa == Isa::Avx512 && s.stride_w == 2 && s.count >= 16;
    asmjit::Label order_data = a.newLabel();
    const bool average = s.average != 0;
    const x86::Vec divisor = isa == Isa::Avx512 ? x86::Vec(x86::zmm(13)) : isa == Isa::Avx2 ? x86::Vec(x86::ymm(13)) : x86::Vec(x86::xmm(13));
    if (average && vex) a.vbroadcastss(divisor, x86::xmm0);
    if (average && !vex) {
        a.movaps(x86::xmm13, x86::xmm0);
        a.shufps(x86::xmm13, x86::xmm13, 0);
    }
    if (lane_order) a.vmovups(x86::zmm(12), x86::ptr(order_data));
    auto xmm = [](const x86::Vec& v) { return x86::xmm(v.id()); };   // the SSE and scalar forms take Xmm
    auto at = [](const x86::Gp& base, int64_t floats) { return x86::ptr(base, (int32_t)(floats * 4)); };
    // tap k of item `it` into t (b: SSE4.1's second register)
    auto load_tap = [&](const x86::Gp& row, const PoolRowsItem& it, int64_t k, const x86::Vec& t, const x86::Vec& b) {
        if (it.width == 1) {
            x86::Mem m = x86::dword_ptr(row, (int32_t)((it.j * s.stride_w + k) * 4));
            if (vex) a.vmovss(xmm(t), m);
            else a.movss(xmm(t), m);
            return;
        }
        if (s.stride_w == 1) {
            if (vex) a.vmovups(t, at(row, it.j + k));
            else a.movups(xmm(t), at(row, it.j + k));
            return;
        }
        const int64_t first = k == 0 ? 2 * it.j : 2 * it.j + k - 1;
        const int64_t second = k == 0 ? 2 * it.j + it.width - 1 : first + it.width;
        const uint32_t pick = k == 0 ? 0xD8u : 0xDDu;   // even lanes of the first then odd of the second, or odd of both
        if (vex) {
            a.vmovups(t, at(row, first));
            a.vshufps(t, t, at(row, second), pick);
        } else {
            a.movups(xmm(t), at(row, first));
            a.movups(xmm(b), at(row, second));
            a.shufps(xmm(t), xmm(b), pick);
        }
    };
    // max: acc = t > acc ? t : acc (MAXPS returns its second operand unless the first is
    // greater); average: acc + t
    auto max_into = [&](const x86::Vec& acc, const x86::Vec& t, uint32_t width) {
        if (average) {
            if (vex && width == 1) a.vaddss(xmm(acc), xmm(acc), xmm(t));
            else if (vex) a.vaddps(acc, acc, t);
            else if (width == 1) a.addss(xmm(acc), xmm(t));
            else a.addps(xmm(acc), xmm(t));
            return;
        }
        if (vex) {
            if (width == 1) a.vmaxss(xmm(acc), xmm(t), xmm(acc));
            else a.vmaxps(acc, t, acc);
        } else {
            if (width == 1) a.maxss(xmm(t), xmm(acc));
            else a.maxps(xmm(t), xmm(acc));
            a.movaps(xmm(acc), xmm(t));
        }
    };
    auto emit_tile = [&](const PoolRowsItem* items, uint32_t n) {
        a.mov(x86::rax, x86::rdi);
        for (uint32_t i = 0; i < n && average; ++i) {   // 0 + t0: a -0 tap sums to +0 as in the reference
            if (vex) a.vxorps(xmm(reg(i, 4)), xmm(reg(i, 4)), xmm(reg(i, 4)));
            else a.xorps(xmm(reg(i, 4)), xmm(reg(i, 4)));
        }
        for (int64_t k = 0; k < s.kernel_w; ++k)
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t w = items[i].width;
                if (k == 0 && !average) {
                    load_tap(x86::rax, items[i], 0, reg(i, w), reg(8 + i, w));
                } else {
                    load_tap(x86::rax, items[i], k, reg(4 + i, w), reg(8 + i, w));
                    max_into(reg(i, w), reg(4 + i, w), w);
                }
            }
        asmjit::Label row_loop = a.newLabel(), rows_done = a.newLabel();
        a.mov(x86::rcx, x86::rdx);
        a.sub(x86::rcx, 1);
        a.jz(rows_done);
        a.bind(row_loop);
        a.add(x86::rax, x86::r9);
        for (int64_t k = 0; k < s.kernel_w; ++k)
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t w = items[i].width;
                load_tap(x86::rax, items[i], k, reg(4 + i, w), reg(8 + i, w));
                max_into(reg(i, w), reg(4 + i, w), w);
            }
        a.sub(x86::rcx, 1);
        a.jnz(row_loop);
        a.bind(rows_done);
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t w = items[i].width;
            const x86::Vec acc = reg(i, w);
            if (s.stride_w == 2 && w == 8) a.vpermpd(acc, acc, 0xD8);
            if (s.stride_w == 2 && w == 16) a.vpermpd(acc, x86::zmm(12), acc);
            if (average) {
                if (vex && w == 1) a.vdivss(xmm(acc), xmm(acc), xmm(divisor));
                else if (vex) a.vdivps(acc, acc, reg(13, w));
                else if (w == 1) a.divss(xmm(acc), xmm(divisor));
                else a.divps(xmm(acc), xmm(divisor));
            }
            if (w == 1) {
                if (vex) a.vmovss(x86::dword_ptr(x86::rsi, (int32_t)(items[i].j * 4)), xmm(acc));
                else a.movss(x86::dword_ptr(x86::rsi, (int32_t)(items[i].j * 4)), xmm(acc));
            } else if (vex) {
                a.vmovups(at(x86::rsi, items[i].j), acc);
            } else {
                a.movups(at(x86::rsi, items[i].j), xmm(acc));
            }
        }
    };
    a.mov(x86::r9, (uint64_t)(s.row_floats * 4));
    if (plan.tiles > 0) {
        PoolRowsItem items[kPoolRowsTile];
        for (uint32_t i = 0; i < kPoolRowsTile; ++i) items[i] = PoolRowsItem{(int64_t)i * plan.vector, plan.vector};
        asmjit::Label tile_loop = a.newLabel();
        a.mov(x86::r8, (uint64_t)plan.tiles);
        a.bind(tile_loop);
        emit_tile(items, kPoolRowsTile);
        a.add(x86::rdi, (int32_t)(kPoolRowsTile * plan.vector * s.stride_w * 4));
        a.add(x86::rsi, (int32_t)(kPoolRowsTile * plan.vector * 4));
        a.sub(x86::r8, 1);
        a.jnz(tile_loop);
    }
    if (plan.rest_count) emit_tile(plan.rest, plan.rest_count);
    if (vex) a.vzeroupper();
    a.ret();
    if (lane_order) {   // qword q of the result is qword order[q] of shufps' (pairs of outputs)
        const uint64_t order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
        a.align(asmjit::AlignMode::kData, 64);
        a.bind(order_data);
        a.embed(order, sizeof order);
    }
}

inline PoolRows::KernelFn make_pool_rows_kernel(Isa isa, const PoolRowShape& s) {
    return assemble_jit_kernel<PoolRows::KernelFn>([&](JitAssembler& a) { emit_pool_rows_x86(a, isa, s); });
}
#define TESSEL_POOL_ROWS_JIT 1
#endif
#if defined(__aarch64__)
// Arguments (AAPCS64): x0 x, x1 y, x2 rows. Accumulators v0-v3, taps v4-v7, stride-2 second
// loads v16-v19, compare masks v20-v23 (v8-v15 stay untouched: nothing to save). A stride-2
// tap is two loads and uzp2 (odd lanes of both); tap 0 loads its second vector a float early
// and rotates it by one lane (ext) for uzp1, so no load reads past the last tap. The maximum
// is fcmgt + bit, the reference's rule (fmax would take a NaN).
inline void emit_pool_rows_a64(asmjit::a64::Assembler& a, const PoolRowShape& s) {
    namespace a64 = asmjit::a64;
    const PoolRowsPlan plan = pool_rows_plan(Isa::Neon, s.count);
    const bool average = s.average != 0;
    if (average) a.dup(a64::v(24).s4(), a64::v(0).s(0));   // the divisor (s0), before v0 is an accumulator
    // base + bytes as an ldur/stur operand (x11 holds addresses beyond its 9-bit offset)
    auto mem = [&](const a64::Gp& base, int64_t bytes) -> a64::Mem {
        if (bytes >= -256 && bytes <= 255) return a64::ptr(base, (int32_t)bytes);
        if (bytes < 0) {
            a.mov(a64::x11, (uint64_t)-bytes);
            a.sub(a64::x11, base, a64::x11);
        } else {
            a.mov(a64::x11, (uint64_t)bytes);
            a.add(a64::x11, base, a64::x11);
        }
        return a64::ptr(a64::x11);
    };
    auto load_tap = [&](const a64::Gp& row, const PoolRowsItem& it, int64_t k, uint32_t t, uint32_t b) {
        if (it.width == 1) {
            a.ldur(a64::s(t), mem(row, (it.j * s.stride_w + k) * 4));
            return;
        }
        if (s.stride_w == 1) {
            a.ldur(a64::v(t).q(), mem(row, (it.j + k) * 4));
            return;
        }
        if (k == 0) {
            a.ldur(a64::v(t).q(), mem(row, 2 * it.j * 4));
            a.ldur(a64::v(b).q(), mem(row, (2 * it.j + 3) * 4));
            a.ext(a64::v(b).b16(), a64::v(b).b16(), a64::v(b).b16(), 4);
            a.uzp1(a64::v(t).s4(), a64::v(t).s4(), a64::v(b).s4());
        } else {
            a.ldur(a64::v(t).q(), mem(row, (2 * it.j + k - 1) * 4));
            a.ldur(a64::v(b).q(), mem(row, (2 * it.j + k + 3) * 4));
            a.uzp2(a64::v(t).s4(), a64::v(t).s4(), a64::v(b).s4());
        }
    };
    auto max_into = [&](uint32_t acc, uint32_t t, uint32_t m, uint32_t width) {
        if (average) {
            if (width == 1) a.fadd(a64::s(acc), a64::s(acc), a64::s(t));
            else a.fadd(a64::v(acc).s4(), a64::v(acc).s4(), a64::v(t).s4());
            return;
        }
        if (width == 1) a.fcmgt(a64::s(m), a64::s(t), a64::s(acc));
        else a.fcmgt(a64::v(m).s4(), a64::v(t).s4(), a64::v(acc).s4());
        a.bit(a64::v(acc).b16(), a64::v(t).b16(), a64::v(m).b16());
    };
    auto emit_tile = [&](const PoolRowsItem* items, uint32_t n) {
        a.mov(a64::x9, a64::x0);
        for (uint32_t i = 0; i < n && average; ++i) a.movi(a64::v(i).s4(), 0);   // 0 + t0, as the reference
        for (int64_t k = 0; k < s.kernel_w; ++k)
            for (uint32_t i = 0; i < n; ++i) {
                if (k == 0 && !average) {
                    load_tap(a64::x9, items[i], 0, i, 16 + i);
                } else {
                    load_tap(a64::x9, items[i], k, 4 + i, 16 + i);
                    max_into(i, 4 + i, 20 + i, items[i].width);
                }
            }
        asmjit::Label row_loop = a.newLabel(), rows_done = a.newLabel();
        a.subs(a64::x10, a64::x2, 1);
        a.b_eq(rows_done);
        a.bind(row_loop);
        a.add(a64::x9, a64::x9, a64::x12);
        for (int64_t k = 0; k < s.kernel_w; ++k)
            for (uint32_t i = 0; i < n; ++i) {
                load_tap(a64::x9, items[i], k, 4 + i, 16 + i);
                max_into(i, 4 + i, 20 + i, items[i].width);
            }
        a.subs(a64::x10, a64::x10, 1);
        a.b_ne(row_loop);
        a.bind(rows_done);
        for (uint32_t i = 0; i < n; ++i) {
            if (average && items[i].width == 1) a.fdiv(a64::s(i), a64::s(i), a64::s(24));
            if (average && items[i].width != 1) a.fdiv(a64::v(i).s4(), a64::v(i).s4(), a64::v(24).s4());
            if (items[i].width == 1) a.stur(a64::s(i), mem(a64::x1, items[i].j * 4));
            else a.stur(a64::v(i).q(), mem(a64::x1, items[i].j * 4));
        }
    };
    a.mov(a64::x12, (uint64_t)(s.row_floats * 4));
    if (plan.tiles > 0) {
        PoolRowsItem items[kPoolRowsTile];
        for (uint32_t i = 0; i < kPoolRowsTile; ++i) items[i] = PoolRowsItem{(int64_t)i * plan.vector, plan.vector};
        asmjit::Label tile_loop = a.newLabel();
        a.mov(a64::x13, (uint64_t)plan.tiles);
        a.bind(tile_loop);
        emit_tile(items, kPoolRowsTile);
        a.add(a64::x0, a64::x0, (uint32_t)(kPoolRowsTile * plan.vector * s.stride_w * 4));
        a.add(a64::x1, a64::x1, (uint32_t)(kPoolRowsTile * plan.vector * 4));
        a.subs(a64::x13, a64::x13, 1);
        a.b_ne(tile_loop);
    }
    if (plan.rest_count) emit_tile(plan.rest, plan.rest_count);
    a.ret(a64::x30);
}

inline PoolRows::KernelFn make_pool_rows_kernel(Isa, const PoolRowShape& s) {
    return assemble_jit_kernel<PoolRows::KernelFn>([&](JitAssembler& a) { emit_pool_rows_a64(a, s); });
}
#define TESSEL_POOL_ROWS_JIT 1
#endif
#endif

// Kernels made so far, by target and shape; past the capacity, new shapes run the portable loop.
struct PoolRowsKernelKey {
    Isa isa;
    PoolRowShape shape;
    bool operator==(const PoolRowsKernelKey& o) const { return isa == o.isa && std::memcmp(&shape, &o.shape, sizeof shape) == 0; }
};
using PoolRowsKernelTable = JitKernelTable<PoolRowsKernelKey, PoolRows::KernelFn, 4096>;

inline PoolRowsKernelTable& pool_rows_kernels() {
    static PoolRowsKernelTable table;
    return table;
}
}  // namespace detail

Status PoolRows::init(const PoolRowShape& s, Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    const int64_t limit = (int64_t)1 << 24;
    if (s.count < 1 || s.count > limit || s.kernel_w < 1 || s.kernel_w > limit || s.stride_w < 1 || s.stride_w > limit ||
        s.row_floats < 1 || s.row_floats > ((int64_t)1 << 40) || (s.average != 0 && s.average != 1))
        return Status::InvalidArgument;
    shape_ = s;
    isa_ = isa;
    kernel_ = nullptr;
#ifdef TESSEL_POOL_ROWS_JIT
    // x86 takes the taps' byte offsets as 32-bit displacements; the kernel is unrolled over kernel_w
    const bool jit_isa = isa == Isa::Sse41 || isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon;
    if (jit_isa && (s.stride_w == 1 || s.stride_w == 2) && s.kernel_w <= 64 && (s.count * s.stride_w + s.kernel_w) * 4 < ((int64_t)1 << 30)) {
        kernel_ = detail::pool_rows_kernels().find_or_make(detail::PoolRowsKernelKey{isa, s},
                                                           [&] { return detail::make_pool_rows_kernel(isa, s); });
    }
#endif
    return Status::Ok;
}

void PoolRows::run(const float* x, int64_t rows, float* y, float divisor) const {
    if (rows < 1) return;   // the JIT's row loop counts down to zero: 0 would wrap
    if (kernel_) {
        kernel_(x, y, rows, divisor);
        return;
    }
    const PoolRowShape& s = shape_;
    for (int64_t j = 0; j < s.count; ++j) {
        const float* p = x + j * s.stride_w;
        float acc = s.average ? 0.0f : p[0];
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t k = 0; k < s.kernel_w; ++k) {
                const float v = p[r * s.row_floats + k];
                acc = s.average ? acc + v : v > acc ? v : acc;
            }
        y[j] = s.average ? acc / divisor : acc;
    }
}

// >>pool planes implementation
namespace detail {
// Output vectors x taps a kernel emits (its border rows and one loop body): a bound on its
// code, which runs once per plane and must stay in the op cache.
constexpr int64_t kPoolPlanesMaxTaps = 2048;

// The real taps of a window starting at `start` (kernel taps along a dim of `in`, pad_end
// after it): [first, last), and the taps inside the pads (count_include_pad's count).
inline void pool_window_taps(int64_t start, int64_t kernel, int64_t in, int64_t pad_end, int64_t* first, int64_t* last,
                             int64_t* padded) {
    *first = start < 0 ? -start : 0;
    *last = std::min(kernel, in - start);
    *padded = std::max<int64_t>(0, std::min(kernel, in + pad_end - start));
}

// The output rows [*begin, *end) whose windows lie inside the plane's rows (none: begin == end),
// when there are at least 3 of them (a JIT kernel loops over them).
inline void pool_planes_middle_rows(const PoolPlaneShape& s, int64_t* begin, int64_t* end) {
    *begin = std::min(s.out_h, (s.pad_top + s.stride_h - 1) / s.stride_h);
    *end = s.height >= s.kernel_h ? std::min(s.out_h, (s.height - s.kernel_h + s.pad_top) / s.stride_h + 1) : 0;
    if (*end - *begin < 3) *end = *begin;
}

inline int64_t pool_plane_divisor(const PoolPlaneShape& s, int64_t oh, int64_t ow) {
    int64_t f0, l0, p0, f1, l1, p1;
    pool_window_taps(oh * s.stride_h - s.pad_top, s.kernel_h, s.height, s.pad_bottom, &f0, &l0, &p0);
    pool_window_taps(ow * s.stride_w - s.pad_left, s.kernel_w, s.width, s.pad_right, &f1, &l1, &p1);
    return s.count_include_pad ? p0 * p1 : (l0 - f0) * (l1 - f1);
}

// Whether a kernel keeps each input row's taps in registers (PoolPlanes::rows_in_registers):
// the rows inside the plane loop down one strip of 16 output columns at a time, each input row
// loaded once per strip (stride 1: two loads, the taps by valignd; stride 2: the even and odd
// columns by vpermi2ps, a third tap by valignd) and reused by the next output rows' windows,
// instead of loading every tap of every window (one or two loads a tap, most across lines).
inline bool pool_planes_cached_rows(const PoolPlaneShape& s) {
    int64_t middle0 = 0, middle1 = 0;
    pool_planes_middle_rows(s, &middle0, &middle1);
    return middle1 > middle0 && s.kernel_h * s.kernel_w <= 18 && (s.stride_w == 1 ? s.kernel_w <= 16 : s.kernel_w <= 3);
}

#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
// Arguments (System V): rdi x, rsi y, rdx planes. Per output row and vector of 16 outputs: the
// accumulator zmm0 (renamed per vector by the CPU: each starts with a write of the whole
// register), taps in zmm1 (stride 2: zmm1 and zmm2, permuted by zmm31's even indices), or, in
// the rows of a cached strip, tap (kh, kw) of its input rows in zmm(4 + kh * kernel_w + kw). A
// tap's lanes that are padding are masked out of its load and its operation; a max's first real
// tap per lane is a masked move. Lane masks live in k1-k7, reloaded only when another is needed.
inline void emit_pool_planes_x86(asmjit::x86::Assembler& a, const PoolPlaneShape& s) {
    namespace x86 = asmjit::x86;
    const bool average = s.average != 0, cached = pool_planes_cached_rows(s);
    const int64_t vectors = (s.out_w + 15) / 16;
    asmjit::Label loop = a.newLabel(), done = a.newLabel(), data = a.newLabel();
    uint32_t held[8] = {};         // k1-k7: the mask each holds (0: none)
    uint32_t next_k = 1;
    auto kreg = [&](uint32_t mask) -> x86::KReg {
        for (uint32_t k = 1; k < 8; ++k)
            if (held[k] == mask) return x86::k(k);
        const uint32_t k = next_k;
        next_k = next_k == 7 ? 1 : next_k + 1;
        held[k] = mask;
        a.mov(x86::eax, mask);
        a.kmovw(x86::k(k), x86::eax);
        return x86::k(k);
    };
    auto forget_masks = [&] { for (uint32_t k = 1; k < 8; ++k) held[k] = 0; };
    const x86::Vec acc = x86::zmm(0), tap = x86::zmm(1), second = x86::zmm(2), third = x86::zmm(3);
    const x86::Vec even = x86::zmm(31), odd = x86::zmm(30);
    auto slot = [&](int64_t kh, int64_t kw) { return x86::zmm((uint32_t)(4 + kh * s.kernel_w + kw)); };
    if (s.stride_w == 2) {
        a.vmovups(even, x86::ptr(data));
        a.vmovups(odd, x86::ptr(data, 64));
    }
    a.test(x86::rdx, x86::rdx);
    a.jz(done);
    a.bind(loop);
    // 16 floats of input row x_row + rel_row (at xb) from column col into `to`: the lanes of
    // `wanted` inside the row, zero elsewhere.
    auto load_columns = [&](const x86::Vec& to, const x86::Gp& xb, int64_t rel_row, int64_t col, uint32_t wanted) {
        uint32_t mask = 0;
        for (int64_t j = 0; j < 16; ++j)
            if (col + j >= 0 && col + j < s.width && (wanted >> j & 1)) mask |= 1u << j;
        const x86::Mem at = x86::ptr(xb, (int32_t)((rel_row * s.width + col) * 4));
        if (!mask) a.vxorps(to, to, to);
        else if (mask == 0xFFFFu) a.vmovups(to, at);
        else a.k(kreg(mask)).z().vmovups(to, at);
    };
    // Vector v's outputs: their count (16 but in a row's last vector) and their lanes.
    auto vector_lanes = [&](int64_t v) { return std::min<int64_t>(16, s.out_w - v * 16); };
    auto all_lanes = [&](int64_t v) { return vector_lanes(v) == 16 ? 0xFFFFu : (1u << vector_lanes(v)) - 1u; };
    // The lanes of vector v whose tap kw of a row inside the plane is a real column.
    auto real_lanes = [&](int64_t v, int64_t kw) {
        const int64_t c0 = v * 16, lanes = vector_lanes(v);
        uint32_t real = 0;
        for (int64_t l = 0; l < lanes; ++l) {
            const int64_t col = (c0 + l) * s.stride_w + kw - s.pad_left;
            if (col >= 0 && col < s.width) real |= 1u << l;
        }
        return real;
    };
    // One tap of vector v into the accumulator, in the reference's order.
    auto apply = [&](const x86::Vec& t, int64_t v, uint32_t real, uint32_t* seen, bool* started) {
        const uint32_t all = all_lanes(v);
        if (average) {   // acc + t on the real lanes: 0 + t0 first, as the reference
            if (real == all) a.vaddps(acc, acc, t);
            else a.k(kreg(real)).vaddps(acc, acc, t);
        } else if (!*started) {
            a.vmovaps(acc, t);
        } else {
            const uint32_t first = real & ~*seen, later = real & *seen;
            if (first) a.k(kreg(first)).vmovaps(acc, t);
            if (later == all) a.vmaxps(acc, t, acc);
            else if (later) a.k(kreg(later)).vmaxps(acc, t, acc);
        }
        *started = true;
        *seen |= real;
    };
    // Divided (average) and stored: output row oh's vector v at yb (output row y_row at yb).
    auto finish = [&](int64_t oh, int64_t v, const x86::Gp& yb, int64_t y_row, int64_t divisor_row) {
        const int64_t c0 = v * 16;
        const uint32_t all = all_lanes(v);
        if (average) a.vdivps(acc, acc, x86::ptr(data, (int32_t)(128 + (divisor_row * vectors + v) * 64)));
        const x86::Mem out = x86::ptr(yb, (int32_t)(((oh - y_row) * s.out_w + c0) * 4));
        if (all == 0xFFFFu) a.vmovups(out, acc);
        else a.k(kreg(all)).vmovups(out, acc);
    };
    // Output row oh's vector v, every tap loaded, from xb (input row x_row at xb).
    auto emit_vector = [&](int64_t oh, int64_t v, const x86::Gp& xb, int64_t x_row, const x86::Gp& yb, int64_t y_row,
                           int64_t divisor_row) {
        const int64_t c0 = v * 16, lanes = vector_lanes(v);
        uint32_t seen = 0;
        bool started = false;
        if (average) a.vxorps(acc, acc, acc);
        for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
            const int64_t row = oh * s.stride_h + kh - s.pad_top;
            if (row < 0 || row >= s.height) continue;
            for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const uint32_t real = real_lanes(v, kw);
                if (!real) continue;
                const int64_t col0 = c0 * s.stride_w + kw - s.pad_left;   // lane l reads column col0 + l * stride_w
                if (s.stride_w == 1) {
                    load_columns(tap, xb, row - x_row, col0, real);
                } else {   // the 32 columns from col0: even lanes are the taps
                    uint32_t pairs = 0;
                    for (int64_t l = 0; l < lanes; ++l) pairs |= 3u << (2 * l);
                    load_columns(tap, xb, row - x_row, col0, pairs & 0xFFFFu);
                    load_columns(second, xb, row - x_row, col0 + 16, pairs >> 16);
                    a.vpermt2ps(tap, even, second);
                }
                apply(tap, v, real, &seen, &started);
            }
        }
        finish(oh, v, yb, y_row, divisor_row);
    };
    // Input row rel_row (at xb + rel_row rows) as kernel row kh's taps of strip v in its slots.
    auto load_row_taps = [&](int64_t v, int64_t kh, const x86::Gp& xb, int64_t rel_row) {
        const int64_t start = v * 16 * s.stride_w - s.pad_left;   // lane 0's column at kw 0
        if (s.stride_w == 1) {
            load_columns(slot(kh, 0), xb, rel_row, start, 0xFFFFu);
            if (s.kernel_w == 1) return;
            load_columns(second, xb, rel_row, start + 16, 0xFFFFu);
            for (int64_t kw = 1; kw < s.kernel_w; ++kw) a.valignd(slot(kh, kw), second, slot(kh, 0), kw);
            return;
        }
        load_columns(tap, xb, rel_row, start, 0xFFFFu);
        load_columns(second, xb, rel_row, start + 16, 0xFFFFu);
        a.vmovaps(slot(kh, 0), even);
        a.vpermi2ps(slot(kh, 0), tap, second);
        if (s.kernel_w > 1) {
            a.vmovaps(slot(kh, 1), odd);
            a.vpermi2ps(slot(kh, 1), tap, second);
        }
        if (s.kernel_w > 2) {   // columns start + 2, + 4, ..., + 32: the even ones moved down a lane
            load_columns(third, xb, rel_row, start + 32, 1u);
            a.valignd(slot(kh, 2), third, slot(kh, 0), 1);
        }
    };
    // The rows whose windows lie inside the plane's rows run one body in a loop (r8 their input
    // row, r9 their output row, r10 the count): the same taps, masks and divisors each.
    int64_t middle0 = 0, middle1 = 0;
    pool_planes_middle_rows(s, &middle0, &middle1);
    const int64_t middle_x_row = middle0 * s.stride_h - s.pad_top;   // the first middle row's first input row
    auto emit_middle_loop = [&](auto&& before, auto&& body) {
        asmjit::Label rows = a.newLabel();
        a.lea(x86::r8, x86::ptr(x86::rdi, (int32_t)(middle_x_row * s.width * 4)));
        a.lea(x86::r9, x86::ptr(x86::rsi, (int32_t)(middle0 * s.out_w * 4)));
        a.mov(x86::r10, (uint64_t)(middle1 - middle0));
        before();
        a.bind(rows);
        forget_masks();   // entered from before the loop and from its end
        body();
        a.add(x86::r8, (int32_t)(s.stride_h * s.width * 4));
        a.add(x86::r9, (int32_t)(s.out_w * 4));
        a.sub(x86::r10, 1);
        a.jnz(rows);
    };
    if (cached) {   // strip by strip; each strip's middle rows keep their input rows' taps
        const int64_t fresh = std::min(s.stride_h, s.kernel_h);   // input rows new to each output row
        for (int64_t v = 0; v < vectors; ++v)
            for (int64_t oh = 0; oh < s.out_h; ++oh) {
                if (oh != middle0) {
                    emit_vector(oh, v, x86::rdi, 0, x86::rsi, 0, oh);
                    continue;
                }
                emit_middle_loop(
                    [&] {
                        for (int64_t kh = 0; kh < s.kernel_h - fresh; ++kh) load_row_taps(v, kh, x86::r8, kh);
                    },
                    [&] {
                        for (int64_t kh = s.kernel_h - fresh; kh < s.kernel_h; ++kh) load_row_taps(v, kh, x86::r8, kh);
                        uint32_t seen = 0;
                        bool started = false;
                        if (average) a.vxorps(acc, acc, acc);
                        for (int64_t kh = 0; kh < s.kernel_h; ++kh)
                            for (int64_t kw = 0; kw < s.kernel_w; ++kw)
                                if (const uint32_t real = real_lanes(v, kw)) apply(slot(kh, kw), v, real, &seen, &started);
                        finish(middle0, v, x86::r9, middle0, middle0);
                        for (int64_t kh = 0; kh + s.stride_h < s.kernel_h; ++kh)   // the next row's first kernel rows
                            for (int64_t kw = 0; kw < s.kernel_w; ++kw) a.vmovaps(slot(kh, kw), slot(kh + s.stride_h, kw));
                    });
                oh = middle1 - 1;
            }
    } else {
        for (int64_t oh = 0; oh < s.out_h; ++oh) {
            if (oh == middle0 && middle1 > middle0) {
                emit_middle_loop([] {}, [&] {
                    for (int64_t v = 0; v < vectors; ++v) emit_vector(middle0, v, x86::r8, middle_x_row, x86::r9, middle0, middle0);
                });
                oh = middle1 - 1;
                continue;
            }
            for (int64_t v = 0; v < vectors; ++v) emit_vector(oh, v, x86::rdi, 0, x86::rsi, 0, oh);
        }
    }
    a.add(x86::rdi, (int32_t)(s.height * s.width * 4));
    a.add(x86::rsi, (int32_t)(s.out_h * s.out_w * 4));
    a.sub(x86::rdx, 1);
    a.jnz(loop);
    a.bind(done);
    a.vzeroupper();
    a.ret();
    a.align(asmjit::AlignMode::kData, 64);
    a.bind(data);
    int32_t lanes_even[16], lanes_odd[16];
    for (int32_t l = 0; l < 16; ++l) {
        lanes_even[l] = 2 * l;
        lanes_odd[l] = 2 * l + 1;
    }
    a.embed(lanes_even, sizeof lanes_even);
    a.embed(lanes_odd, sizeof lanes_odd);
    for (int64_t oh = 0; oh < s.out_h && average; ++oh)   // the divisors of (row, vector), 1 past the row's end
        for (int64_t v = 0; v < vectors; ++v) {
            float lanes[16];
            for (int64_t l = 0; l < 16; ++l) lanes[l] = v * 16 + l < s.out_w ? (float)pool_plane_divisor(s, oh, v * 16 + l) : 1.0f;
            a.embed(lanes, sizeof lanes);
        }
}

inline PoolPlanes::KernelFn make_pool_planes_kernel(const PoolPlaneShape& s) {
    return assemble_jit_kernel<PoolPlanes::KernelFn>([&](JitAssembler& a) { emit_pool_planes_x86(a, s); });
}
#define TESSEL_POOL_PLANES_JIT 1
#endif

struct PoolPlanesKernelKey {
    PoolPlaneShape shape;
    bool operator==(const PoolPlanesKernelKey& o) const { return std::memcmp(&shape, &o.shape, sizeof shape) == 0; }
};
// A model has a few pool shapes; the test suites make hundreds.
using PoolPlanesKernelTable = JitKernelTable<PoolPlanesKernelKey, PoolPlanes::KernelFn, 1024>;

inline PoolPlanesKernelTable& pool_planes_kernels() {
    static PoolPlanesKernelTable table;
    return table;
}
}  // namespace detail

Status PoolPlanes::init(const PoolPlaneShape& s, Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    const int64_t limit = (int64_t)1 << 12;
    for (int64_t d : {s.height, s.width, s.out_h, s.out_w, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w})
        if (d < 1 || d > limit) return Status::InvalidArgument;
    for (int64_t d : {s.pad_top, s.pad_left, s.pad_bottom, s.pad_right})
        if (d < 0 || d > limit) return Status::InvalidArgument;
    if ((s.average != 0 && s.average != 1) || (s.count_include_pad != 0 && s.count_include_pad != 1)) return Status::InvalidArgument;
    for (int64_t oh = 0; oh < s.out_h; ++oh)
        for (int64_t ow = 0; ow < s.out_w; ++ow) {   // every window has a real tap
            int64_t f0, l0, p0, f1, l1, p1;
            detail::pool_window_taps(oh * s.stride_h - s.pad_top, s.kernel_h, s.height, s.pad_bottom, &f0, &l0, &p0);
            detail::pool_window_taps(ow * s.stride_w - s.pad_left, s.kernel_w, s.width, s.pad_right, &f1, &l1, &p1);
            if (f0 >= l0 || f1 >= l1) return Status::InvalidArgument;
        }
    shape_ = s;
    isa_ = isa;
    kernel_ = nullptr;
    rows_in_registers_ = false;
#ifdef TESSEL_POOL_PLANES_JIT
    int64_t middle0 = 0, middle1 = 0;   // the rows of one loop count once
    detail::pool_planes_middle_rows(s, &middle0, &middle1);
    const int64_t taps = (s.out_h - (middle1 - middle0) + 1) * ((s.out_w + 15) / 16) * s.kernel_h * s.kernel_w;
    // 32-bit displacements: a plane and the 32 floats a stride-2 tap loads past its start
    if (isa == Isa::Avx512 && (s.stride_w == 1 || s.stride_w == 2) && taps <= detail::kPoolPlanesMaxTaps &&
        (s.height * s.width + s.out_w * s.stride_w + 64) * 4 < ((int64_t)1 << 30))
        kernel_ = detail::pool_planes_kernels().find_or_make(detail::PoolPlanesKernelKey{s}, [&] { return detail::make_pool_planes_kernel(s); });
    rows_in_registers_ = kernel_ && detail::pool_planes_cached_rows(s);
#endif
    return Status::Ok;
}

void PoolPlanes::run(const float* x, float* y, int64_t planes) const {
    if (planes < 1) return;
    if (kernel_) {
        kernel_(x, y, planes);
        return;
    }
    const PoolPlaneShape& s = shape_;
    for (int64_t plane = 0; plane < planes; ++plane) {
        const float* xp = x + plane * s.height * s.width;
        float* yp = y + plane * s.out_h * s.out_w;
        for (int64_t oh = 0; oh < s.out_h; ++oh)
            for (int64_t ow = 0; ow < s.out_w; ++ow) {
                float acc = 0.0f;
                bool started = false;
                for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
                    const int64_t row = oh * s.stride_h + kh - s.pad_top;
                    if (row < 0 || row >= s.height) continue;
                    for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                        const int64_t col = ow * s.stride_w + kw - s.pad_left;
                        if (col < 0 || col >= s.width) continue;
                        const float v = xp[row * s.width + col];
                        acc = s.average ? acc + v : !started || v > acc ? v : acc;
                        started = true;
                    }
                }
                yp[oh * s.out_w + ow] = s.average ? acc / (float)detail::pool_plane_divisor(s, oh, ow) : acc;
            }
    }
}

// >>gemm dot implementation
namespace detail {
#ifndef TESSEL_NO_JIT
#if defined(__x86_64__) || defined(_M_X64)
// Arguments (System V): rdi x, rsi b, rdx out. Accumulators 2r + u (row r, vector u), x in 8
// and 9 (AVX-512: 16 and 17), B's masked loads in the next, AVX2's lane mask in 15; rax and r8
// walk x and B.
inline void emit_gemm_dot_x86(asmjit::x86::Assembler& a, Isa isa, int64_t k, int rows) {
    namespace x86 = asmjit::x86;
    const bool wide = isa == Isa::Avx512, avx2 = isa == Isa::Avx2, vex = isa != Isa::Sse41;
    const int64_t vf = wide ? 16 : avx2 ? 8 : 4;
    auto v = [&](uint32_t id) -> x86::Vec {
        return wide ? x86::Vec(x86::zmm(id)) : avx2 ? x86::Vec(x86::ymm(id)) : x86::Vec(x86::xmm(id));
    };
    const int64_t row_bytes = k * 4;
    const uint32_t xr = wide ? 16 : 8, tr = xr + 2;   // x's registers, then B's masked loads
    const uint32_t accs = (uint32_t)rows * 2;
    asmjit::Label mask_table = a.newLabel();
    for (uint32_t i = 0; i < accs; ++i) {
        if (vex) a.vxorps(x86::xmm(i), x86::xmm(i), x86::xmm(i));
        else a.xorps(x86::xmm(i), x86::xmm(i));
    }
    a.mov(x86::rax, x86::rdi);
    a.mov(x86::r8, x86::rsi);
    auto row = [&](int r, int64_t byte) { return x86::ptr(x86::r8, (int32_t)(r * row_bytes + byte)); };
    // `vectors` vectors from rax and r8; masked: one vector of the lanes the mask keeps
    auto step = [&](int vectors, bool masked) {
        for (int u = 0; u < vectors; ++u) {
            x86::Mem xm = x86::ptr(x86::rax, (int32_t)(u * vf * 4));
            if (masked && wide) a.k(x86::k1).z().vmovups(v(xr + u), xm);
            else if (masked) a.vmaskmovps(v(xr + u), v(15), xm);
            else if (vex) a.vmovups(v(xr + u), xm);
            else a.movups(x86::xmm(xr + u), xm);
        }
        for (int r = 0; r < rows; ++r)
            for (int u = 0; u < vectors; ++u) {
                const x86::Vec acc = v(2 * r + u), xv = v(xr + u);
                x86::Mem bm = row(r, u * vf * 4);
                if (masked && wide) {
                    a.k(x86::k1).z().vmovups(v(tr), bm);
                    a.vfmadd231ps(acc, xv, v(tr));
                } else if (masked) {
                    a.vmaskmovps(v(tr), v(15), bm);
                    a.vfmadd231ps(acc, xv, v(tr));
                } else if (vex) {
                    a.vfmadd231ps(acc, xv, bm);
                } else {
                    a.movups(x86::xmm(tr), bm);
                    a.mulps(x86::xmm(tr), x86::xmm(xr + u));
                    a.addps(x86::xmm(2 * r + u), x86::xmm(tr));
                }
            }
    };
    const int64_t pairs = k / (2 * vf), tail = k % vf;
    if (pairs > 0) {
        asmjit::Label loop = a.newLabel();
        a.mov(x86::rcx, (uint64_t)pairs);
        a.bind(loop);
        step(2, false);
        a.add(x86::rax, (int32_t)(2 * vf * 4));
        a.add(x86::r8, (int32_t)(2 * vf * 4));
        a.sub(x86::rcx, 1);
        a.jnz(loop);
    }
    if (k % (2 * vf) >= vf) {
        step(1, false);
        a.add(x86::rax, (int32_t)(vf * 4));
        a.add(x86::r8, (int32_t)(vf * 4));
    }
    if (tail && wide) {
        a.mov(x86::r9d, (uint32_t)((1u << tail) - 1u));
        a.kmovw(x86::k1, x86::r9d);
        step(1, true);
    } else if (tail && avx2) {
        a.vmovups(v(15), x86::ptr(mask_table, (int32_t)((8 - tail) * 4)));
        step(1, true);
    } else {
        for (int64_t e = 0; e < tail; ++e)   // SSE4.1: single floats into lane 0
            for (int r = 0; r < rows; ++r) {
                a.movss(x86::xmm(tr), row(r, e * 4));
                a.mulss(x86::xmm(tr), x86::dword_ptr(x86::rax, (int32_t)(e * 4)));
                a.addss(x86::xmm(2 * r), x86::xmm(tr));
            }
    }
    for (int r = 0; r < rows; ++r) {   // the lanes of row r into one float
        const uint32_t acc = 2 * r, t = acc + 1;   // the second accumulator, once added, is the temporary
        if (vex) {
            a.vaddps(v(acc), v(acc), v(acc + 1));
            if (wide) {
                a.vextractf64x4(x86::ymm(t), x86::zmm(acc), 1);
                a.vaddps(x86::ymm(acc), x86::ymm(acc), x86::ymm(t));
            }
            a.vextractf128(x86::xmm(t), x86::ymm(acc), 1);
            a.vaddps(x86::xmm(acc), x86::xmm(acc), x86::xmm(t));
            a.vmovhlps(x86::xmm(t), x86::xmm(acc), x86::xmm(acc));
            a.vaddps(x86::xmm(acc), x86::xmm(acc), x86::xmm(t));
            a.vmovshdup(x86::xmm(t), x86::xmm(acc));
            a.vaddss(x86::xmm(acc), x86::xmm(acc), x86::xmm(t));
            a.vmovss(x86::dword_ptr(x86::rdx, r * 4), x86::xmm(acc));
        } else {
            a.addps(x86::xmm(acc), x86::xmm(acc + 1));
            a.movhlps(x86::xmm(t), x86::xmm(acc));
            a.addps(x86::xmm(acc), x86::xmm(t));
            a.movshdup(x86::xmm(t), x86::xmm(acc));
            a.addss(x86::xmm(acc), x86::xmm(t));
            a.movss(x86::dword_ptr(x86::rdx, r * 4), x86::xmm(acc));
        }
    }
    if (vex) a.vzeroupper();
    a.ret();
    if (avx2) {
        a.align(asmjit::AlignMode::kData, 64);
        a.bind(mask_table);
        int32_t mask_values[16];
        for (int i = 0; i < 16; ++i) mask_values[i] = i < 8 ? -1 : 0;
        a.embed(mask_values, sizeof mask_values);
    }
}

inline GemmDot::KernelFn make_gemm_dot_kernel(Isa isa, int64_t k, int rows) {
    return assemble_jit_kernel<GemmDot::KernelFn>([&](JitAssembler& a) { emit_gemm_dot_x86(a, isa, k, rows); });
}
#define TESSEL_GEMM_DOT_JIT 1
#endif
#if defined(__aarch64__)
// Arguments (AAPCS64): x0 x, x1 b, x2 out. Accumulators v(2r + u), x in v16-v17, B in
// v18-v25; x8 walks x, x9-x12 the rows of B. The last k % 4 floats go one at a time after the
// lanes are summed (a scalar write clears the rest of its vector register).
inline void emit_gemm_dot_a64(asmjit::a64::Assembler& a, int64_t k, int rows) {
    namespace a64 = asmjit::a64;
    const uint32_t accs = (uint32_t)rows * 2;
    for (uint32_t i = 0; i < accs; ++i) a.movi(a64::v(i).s4(), 0);
    a.mov(a64::x8, a64::x0);
    for (int r = 0; r < rows; ++r) {
        if (r == 0) {
            a.mov(a64::x9, a64::x1);
        } else {
            a.mov(a64::x13, (uint64_t)(k * 4));
            a.add(a64::GpX(9 + r), a64::GpX(8 + r), a64::x13);
        }
    }
    auto step = [&](int vectors) {
        for (int u = 0; u < vectors; ++u) a.ldr(a64::v(16 + u).q(), a64::ptr(a64::x8, u * 16));
        for (int r = 0; r < rows; ++r)
            for (int u = 0; u < vectors; ++u) {
                a.ldr(a64::v(18 + 2 * r + u).q(), a64::ptr(a64::GpX(9 + r), u * 16));
                a.fmla(a64::v(2 * r + u).s4(), a64::v(16 + u).s4(), a64::v(18 + 2 * r + u).s4());
            }
        const uint32_t bytes = (uint32_t)vectors * 16;
        a.add(a64::x8, a64::x8, bytes);
        for (int r = 0; r < rows; ++r) a.add(a64::GpX(9 + r), a64::GpX(9 + r), bytes);
    };
    const int64_t pairs = k / 8, tail = k % 4;
    if (pairs > 0) {
        asmjit::Label loop = a.newLabel();
        a.mov(a64::x14, (uint64_t)pairs);
        a.bind(loop);
        step(2);
        a.subs(a64::x14, a64::x14, 1);
        a.b_ne(loop);
    }
    if (k % 8 >= 4) step(1);
    for (int r = 0; r < rows; ++r) {
        const uint32_t acc = 2 * r;
        a.fadd(a64::v(acc).s4(), a64::v(acc).s4(), a64::v(acc + 1).s4());
        a.faddp(a64::v(acc).s4(), a64::v(acc).s4(), a64::v(acc).s4());
        a.faddp(a64::s(acc), a64::v(acc).s2());
        for (int64_t e = 0; e < tail; ++e) {
            a.ldr(a64::s(16), a64::ptr(a64::x8, (int32_t)(e * 4)));
            a.ldr(a64::s(18), a64::ptr(a64::GpX(9 + r), (int32_t)(e * 4)));
            a.fmadd(a64::s(acc), a64::s(16), a64::s(18), a64::s(acc));
        }
        a.str(a64::s(acc), a64::ptr(a64::x2, r * 4));
    }
    a.ret(a64::x30);
}

inline GemmDot::KernelFn make_gemm_dot_kernel(Isa, int64_t k, int rows) {
    return assemble_jit_kernel<GemmDot::KernelFn>([&](JitAssembler& a) { emit_gemm_dot_a64(a, k, rows); });
}
#define TESSEL_GEMM_DOT_JIT 1
#endif
#endif

// Kernels made so far, by target, k and rows, for the life of the process; past the
// capacity, new sizes run the portable loop.
struct GemmDotKernelKey {
    Isa isa;
    int64_t k;
    int rows;
    bool operator==(const GemmDotKernelKey& o) const { return isa == o.isa && k == o.k && rows == o.rows; }
};
using GemmDotKernelTable = JitKernelTable<GemmDotKernelKey, GemmDot::KernelFn, 1024>;

inline GemmDotKernelTable& gemm_dot_kernels() {
    static GemmDotKernelTable table;
    return table;
}

// The portable loop: 8 lane sums added pairwise, then the tail.
inline float gemm_dot_portable(const float* x, const float* b, int64_t k) {
    float lanes[8] = {};
    int64_t p = 0;
    for (; p + 8 <= k; p += 8)
        for (int l = 0; l < 8; ++l) lanes[l] += x[p + l] * b[p + l];
    float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (; p < k; ++p) sum += x[p] * b[p];
    return sum;
}
}  // namespace detail

Status GemmDot::init(int64_t k, Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    if (k < 1 || k > ((int64_t)1 << 24)) return Status::InvalidArgument;
    k_ = k;
    isa_ = isa;
    block_fn_ = one_ = nullptr;
    block_ = isa == Isa::Avx512 ? 8 : 4;   // 16 accumulators where 32 registers hold them
#ifdef TESSEL_GEMM_DOT_JIT
    if (isa == Isa::Sse41 || isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Neon) {
        auto find_or_make = [&](int rows) -> KernelFn {
            return detail::gemm_dot_kernels().find_or_make(detail::GemmDotKernelKey{isa, k, rows},
                                                           [&] { return detail::make_gemm_dot_kernel(isa, k, rows); });
        };
        block_fn_ = find_or_make(block_);
        one_ = block_fn_ ? find_or_make(1) : nullptr;
        if (!one_) block_fn_ = nullptr;
    }
#endif
    return Status::Ok;
}

void GemmDot::run_block(const float* x, const float* b, float* out) const {
    if (block_fn_) {
        block_fn_(x, b, out);
        return;
    }
    for (int r = 0; r < block_; ++r) out[r] = detail::gemm_dot_portable(x, b + r * k_, k_);
}

void GemmDot::run1(const float* x, const float* b, float* out) const {
    if (one_) one_(x, b, out);
    else out[0] = detail::gemm_dot_portable(x, b, k_);
}

// >>int8 gemm implementation
namespace detail {
// A 4 x 4 block of 4-byte words transposed: dst row c (dst_pitch bytes apart) gets src column c
// (src rows src_pitch bytes apart). Shuffles only, so any bits pass unchanged. xor_mask is
// applied to every word (NEON's B panels: bytes as x - 128).
inline void transpose_words4(const uint8_t* src, int64_t src_pitch, uint8_t* dst, int64_t dst_pitch, uint32_t xor_mask = 0) {
#if defined(__SSE2__)
    auto load = [&](int r) { return _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * src_pitch))); };
    __m128 r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    const __m128i flip = _mm_set1_epi32((int)xor_mask);
    const __m128 rows[4] = {r0, r1, r2, r3};
    for (int c = 0; c < 4; ++c)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c * dst_pitch), _mm_xor_si128(_mm_castps_si128(rows[c]), flip));
#elif defined(__ARM_NEON)
    const uint32x4_t r0 = vld1q_u32(reinterpret_cast<const uint32_t*>(src)), r1 = vld1q_u32(reinterpret_cast<const uint32_t*>(src + src_pitch));
    const uint32x4_t r2 = vld1q_u32(reinterpret_cast<const uint32_t*>(src + 2 * src_pitch));
    const uint32x4_t r3 = vld1q_u32(reinterpret_cast<const uint32_t*>(src + 3 * src_pitch));
    const uint32x4x2_t t0 = vtrnq_u32(r0, r1), t1 = vtrnq_u32(r2, r3);
    const uint32x4_t flip = vdupq_n_u32(xor_mask);
    vst1q_u32(reinterpret_cast<uint32_t*>(dst), veorq_u32(vcombine_u32(vget_low_u32(t0.val[0]), vget_low_u32(t1.val[0])), flip));
    vst1q_u32(reinterpret_cast<uint32_t*>(dst + dst_pitch), veorq_u32(vcombine_u32(vget_low_u32(t0.val[1]), vget_low_u32(t1.val[1])), flip));
    vst1q_u32(reinterpret_cast<uint32_t*>(dst + 2 * dst_pitch), veorq_u32(vcombine_u32(vget_high_u32(t0.val[0]), vget_high_u32(t1.val[0])), flip));
    vst1q_u32(reinterpret_cast<uint32_t*>(dst + 3 * dst_pitch), veorq_u32(vcombine_u32(vget_high_u32(t0.val[1]), vget_high_u32(t1.val[1])), flip));
#else
    for (int c = 0; c < 4; ++c)
        for (int r = 0; r < 4; ++r) {
            uint32_t v;
            std::memcpy(&v, src + r * src_pitch + 4 * c, 4);
            v ^= xor_mask;
            std::memcpy(dst + c * dst_pitch + 4 * r, &v, 4);
        }
#endif
}
}  // namespace detail

uint8_t int8_requantize(int32_t acc, int32_t bias, float scale, float lo, float hi, int32_t zero_point) {
    const int32_t sum = (int32_t)((uint32_t)acc + (uint32_t)bias);   // wraps, as the tiles' vpaddd
    float v = (float)sum * scale;
    v = v > lo ? v : lo;   // lo and hi are integers: clamping before rounding is the same as after
    v = v < hi ? v : hi;
    // Round half to even in the default rounding mode: |v| < 2^22 after the clamp, so v + 1.5 * 2^23
    // lies where float32 steps are 1.
    const float magic = 12582912.0f;
    const float r = (v + magic) - magic;
    return (uint8_t)((int32_t)r + zero_point);
}

bool int8_vnni_available() {
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
    __builtin_cpu_init();
    return isa_available(Isa::Avx512) && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
    return false;
#endif
}

bool int8_avx_vnni_available() {
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
    // CPUID leaf 7 subleaf 1, EAX bit 4 (g++ 12's __builtin_cpu_supports does not know it)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0u), "c"(0u));
    if (eax < 7) return false;
    __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7u), "c"(1u));
    return isa_available(Isa::Avx2) && (eax >> 4 & 1u);
#else
    return false;
#endif
}

bool int8_amx_available() {
#if !defined(TESSEL_NO_JIT) && defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
    static const bool available = [] {
        if (!int8_vnni_available()) return false;
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7u), "c"(0u));
        if (!(edx >> 24 & 1u) || !(edx >> 25 & 1u)) return false;   // AMX-TILE, AMX-INT8
        // Linux enables the 8 KB tile data state per process on request (ARCH_REQ_XCOMP_PERM,
        // XFEATURE_XTILEDATA); without it the first tile instruction faults.
        return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    }();
    return available;
#else
    return false;
#endif
}

namespace detail {
constexpr uint32_t kInt8PortableRows = 8, kInt8PortableCols = 16;
constexpr uint32_t kInt8AmxRows = 32, kInt8AmxCols = 32, kInt8AmxGroups = 16;   // the AMX tile's C and K block

// sums (ldc in int32): C gets acc + bias (wrapping), not requantized (Int8Gemm::run_sums).
inline void int8_portable_tile(const int8_t* a, const uint8_t* b, uint8_t* c, int64_t ldc, int64_t groups, int64_t rows,
                               int64_t cols, const Int8Gemm::TileParams& params, int32_t* sums = nullptr) {
    int32_t acc[kInt8PortableRows][kInt8PortableCols] = {};
    for (int64_t g = 0; g < groups; ++g, a += 4 * kInt8PortableRows, b += 4 * kInt8PortableCols)
        for (uint32_t i = 0; i < kInt8PortableRows; ++i)
            for (uint32_t j = 0; j < kInt8PortableCols; ++j) {
                int32_t s = 0;
                for (uint32_t q = 0; q < 4; ++q) s += (int32_t)a[i * 4 + q] * (int32_t)b[j * 4 + q];
                acc[i][j] = (int32_t)((uint32_t)acc[i][j] + (uint32_t)s);
            }
    if (sums) {
        for (int64_t i = 0; i < rows; ++i, sums += ldc)
            for (int64_t j = 0; j < cols; ++j) sums[j] = (int32_t)((uint32_t)acc[i][j] + (uint32_t)params.bias[i]);
        return;
    }
    for (int64_t i = 0; i < rows; ++i, c += ldc)
        for (int64_t j = 0; j < cols; ++j)
            c[j] = int8_requantize(acc[i][j], params.bias[i], params.scale[i], params.lo, params.hi, params.zero_point);
}

#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
// The VNNI tile: rows x 3 accumulators (zmm0..23), B's three vectors in zmm24-26, A's 4 bytes
// of a row broadcast once into zmm27-30 for its three vpdpbusd (a {1to16} operand would load
// them three times: 27 loads a group, the bound on CPUs that run two vpdpbusd a cycle, as
// Zen 5 does). Arguments (System V): rdi A panel, rsi B
// panel, rdx C, rcx ldc, r8 k groups, r9 TileParams. Stores go through the masks k1-k3
// (vpmovusdb: the clamped values are already in [0, 255]).
constexpr uint32_t kInt8VnniRows = 8, kInt8VnniVectors = 3;
// Requantizes accumulator v into uint8 at dst through mask: + bias (unless none), to float, * scale, clamped
// to [zmm29, zmm30], rounded by MXCSR's default (to nearest, ties to even), + zero point zmm31.
// The tile and the gemv kernel both end with it, so their bytes match.
inline void emit_vnni_requantize_dwords(asmjit::x86::Assembler& a, const asmjit::x86::Zmm& v, const asmjit::x86::Zmm& bias,
                                        const asmjit::x86::Zmm& scale) {
    namespace x86 = asmjit::x86;
    if (bias.isValid()) a.vpaddd(v, v, bias);   // none: the accumulator started at the bias
    a.vcvtdq2ps(v, v);
    a.vmulps(v, v, scale);
    a.vmaxps(v, v, x86::zmm29);
    a.vminps(v, v, x86::zmm30);
    a.vcvtps2dq(v, v);
    a.vpaddd(v, v, x86::zmm31);
}
inline void emit_vnni_requantize(asmjit::x86::Assembler& a, const asmjit::x86::Zmm& v, const asmjit::x86::Zmm& bias,
                                 const asmjit::x86::Zmm& scale, const asmjit::x86::KReg& mask, const asmjit::x86::Mem& dst) {
    emit_vnni_requantize_dwords(a, v, bias, scale);
    a.k(mask).vpmovusdb(dst, v);
}
// The K loop of the int8 kernels over r8 groups: step(0) .. step(steps - 1) and `advance` (past
// `steps` groups) while `steps` are left, then the last r8 groups (under `steps`) unrolled as
// step(0) .. step(r8 - 1). Leaves r8 at those.
template <class Step, class Advance>
void emit_int8_group_loop(asmjit::x86::Assembler& a, const Step& step, const Advance& advance, int32_t steps = 2) {
    namespace x86 = asmjit::x86;
    asmjit::Label loop = a.newLabel(), tail = a.newLabel(), done = a.newLabel();
    a.cmp(x86::r8, steps);
    a.jb(tail);
    a.bind(loop);
    for (int32_t u = 0; u < steps; ++u) step(u);
    advance();
    a.sub(x86::r8, steps);
    a.cmp(x86::r8, steps);
    a.jae(loop);
    a.bind(tail);
    for (int32_t left = steps - 1; left > 0; --left) {
        asmjit::Label other = a.newLabel();
        a.cmp(x86::r8, left);
        a.jne(other);
        for (int32_t u = 0; u < left; ++u) step(u);
        a.jmp(done);
        a.bind(other);
    }
    a.bind(done);
}
// The requantization's bias and scale pointers (rax, r10) and lo, hi, zero point (zmm29-31) from
// the TileParams at r9.
inline void emit_vnni_requant_params(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    a.mov(x86::rax, x86::qword_ptr(x86::r9, 0));
    a.mov(x86::r10, x86::qword_ptr(x86::r9, 8));
    a.vbroadcastss(x86::zmm29, x86::dword_ptr(x86::r9, 16));
    a.vbroadcastss(x86::zmm30, x86::dword_ptr(x86::r9, 20));
    a.vpbroadcastd(x86::zmm31, x86::dword_ptr(x86::r9, 24));
}

// The int8 tiles' loop over TileParams::panels panels: the arguments A, k groups, B and C kept
// in r12-r15 (callee-saved) and set again for each panel; the panel count in r11. The tile's
// body follows emit_int8_panels_enter and precedes emit_int8_panels_leave, which steps B by
// TileParams::b_panel_bytes and C by c_step bytes.
inline asmjit::Label emit_int8_panels_enter(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    for (const x86::Gp& r : {x86::r12, x86::r13, x86::r14, x86::r15}) a.push(r);
    a.mov(x86::r12, x86::rdi);
    a.mov(x86::r13, x86::r8);
    a.mov(x86::r14, x86::rsi);
    a.mov(x86::r15, x86::rdx);
    a.mov(x86::r11, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, panels)));
    asmjit::Label next_panel = a.newLabel();
    a.bind(next_panel);
    a.mov(x86::rdi, x86::r12);
    a.mov(x86::r8, x86::r13);
    a.mov(x86::rsi, x86::r14);
    a.mov(x86::rdx, x86::r15);
    return next_panel;
}
inline void emit_int8_panels_leave(asmjit::x86::Assembler& a, const asmjit::Label& next_panel, int32_t c_step) {
    namespace x86 = asmjit::x86;
    a.add(x86::r14, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, b_panel_bytes)));
    a.add(x86::r15, c_step);
    a.sub(x86::r11, 1);
    a.jnz(next_panel);
    for (const x86::Gp& r : {x86::r15, x86::r14, x86::r13, x86::r12}) a.pop(r);
}

// A tile of fewer vectors (1 or 2: the last panel of a narrow B) reads the first vectors of
// each group of the same 48-column panel. by_groups (Int8Gemm::run_groups): group u of the
// panel is at rsi + b_groups[u] (r10 walks b_groups), not packed.
// sums (Int8Gemm::run_sums): C gets the int32 sums (bias included), rcx bytes a row, through the masks.
inline void emit_int8_tile_vnni_any(asmjit::x86::Assembler& a, uint32_t rows, uint32_t vectors, bool by_groups, bool sums = false) {
    namespace x86 = asmjit::x86;
    const uint32_t mr = kInt8VnniRows, nr = kInt8VnniVectors * 16;
    auto acc = [&](uint32_t i, uint32_t j) { return x86::zmm(i * vectors + j); };
    const asmjit::Label next_panel = emit_int8_panels_enter(a);   // TileParams::panels panels
    a.mov(x86::rax, x86::qword_ptr(x86::r9, 0));   // the accumulators start at the row's bias
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < vectors; ++j) a.vpbroadcastd(acc(i, j), x86::dword_ptr(x86::rax, (int32_t)(i * 4)));
    if (by_groups) a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, b_groups)));
    auto step = [&](int32_t u) {
        if (by_groups) a.mov(x86::rax, x86::qword_ptr(x86::r10, u * 8));
        for (uint32_t j = 0; j < vectors; ++j)
            a.vmovdqu32(x86::zmm(24 + j), by_groups ? x86::ptr(x86::rsi, x86::rax, 0, (int32_t)(j * 64))
                                                    : x86::ptr(x86::rsi, (int32_t)((u * nr + j * 16) * 4)));
        for (uint32_t i = 0; i < rows; ++i) {
            const x86::Zmm row = x86::zmm(27 + i % 4);
            a.vpbroadcastd(row, x86::dword_ptr(x86::rdi, (int32_t)((u * mr + i) * 4)));
            for (uint32_t j = 0; j < vectors; ++j) a.vpdpbusd(acc(i, j), x86::zmm(24 + j), row);
        }
    };
    emit_int8_group_loop(a, step, [&] {
        a.add(x86::rdi, (int32_t)(2 * mr * 4));
        if (by_groups) a.add(x86::r10, 16);
        else a.add(x86::rsi, (int32_t)(2 * nr * 4));
    });
    a.kmovw(x86::k1, x86::word_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, mask)));
    a.kmovw(x86::k2, x86::word_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, mask) + 4));
    a.kmovw(x86::k3, x86::word_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, mask) + 8));
    const x86::KReg masks[3] = {x86::k1, x86::k2, x86::k3};
    if (sums) {
        for (uint32_t i = 0; i < rows; ++i) {
            for (uint32_t j = 0; j < vectors; ++j) a.k(masks[j]).vmovdqu32(x86::zmmword_ptr(x86::rdx, (int32_t)(j * 64)), acc(i, j));
            if (i + 1 < rows) a.add(x86::rdx, x86::rcx);
        }
        emit_int8_panels_leave(a, next_panel, (int32_t)(nr * 4));
        a.vzeroupper();
        a.ret();
        return;
    }
    // Requantize: bias and scale of the row in zmm27-28, lo hi zero point in zmm29-31.
    emit_vnni_requant_params(a);
    for (uint32_t i = 0; i < rows; ++i) {
        a.vbroadcastss(x86::zmm28, x86::dword_ptr(x86::r10, (int32_t)(i * 4)));
        for (uint32_t j = 0; j < vectors; ++j)
            emit_vnni_requantize(a, acc(i, j), x86::Zmm(), x86::zmm28, masks[j], x86::xmmword_ptr(x86::rdx, (int32_t)(j * 16)));
        if (i + 1 < rows) a.add(x86::rdx, x86::rcx);
    }
    emit_int8_panels_leave(a, next_panel, (int32_t)nr);
    a.vzeroupper();
    a.ret();
}
inline void emit_int8_tile_vnni(asmjit::x86::Assembler& a, uint32_t rows, uint32_t vectors) { emit_int8_tile_vnni_any(a, rows, vectors, false); }
inline void emit_int8_tile_vnni_sums(asmjit::x86::Assembler& a, uint32_t rows, uint32_t vectors) { emit_int8_tile_vnni_any(a, rows, vectors, false, true); }
inline void emit_int8_tile_vnni_groups(asmjit::x86::Assembler& a, uint32_t rows, uint32_t vectors) {
    emit_int8_tile_vnni_any(a, rows, vectors, true);
}

// The pixel tiles' K loop: per group, W's vectors in zmm24-26 (rdi, TileParams::w_group_bytes a
// group) and position i's 4 bytes broadcast from rsi + b_groups[g] + 4 i (zmm27-30), summed by
// vpdpbusd into accumulator zmm(i vectors + j).
inline void emit_int8_pixel_groups(asmjit::x86::Assembler& a, uint32_t rows, uint32_t vectors) {
    namespace x86 = asmjit::x86;
    auto acc = [&](uint32_t i, uint32_t j) { return x86::zmm(i * vectors + j); };
    a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, b_groups)));
    a.mov(x86::r11, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, w_group_bytes)));
    auto step = [&](int32_t u) {   // group u of the pair: W at rdi + u r11
        a.mov(x86::rax, x86::qword_ptr(x86::r10, u * 8));
        for (uint32_t j = 0; j < vectors; ++j)
            a.vmovdqu32(x86::zmm(24 + j), u ? x86::ptr(x86::rdi, x86::r11, 0, (int32_t)(j * 64)) : x86::ptr(x86::rdi, (int32_t)(j * 64)));
        for (uint32_t i = 0; i < rows; ++i) {
            const x86::Zmm pixel = x86::zmm(27 + i % 4);
            a.vpbroadcastd(pixel, x86::dword_ptr(x86::rsi, x86::rax, 0, (int32_t)(i * 4)));
            for (uint32_t j = 0; j < vectors; ++j) a.vpdpbusd(acc(i, j), pixel, x86::zmm(24 + j));
        }
    };
    emit_int8_group_loop(a, step, [&] {
        a.lea(x86::rdi, x86::ptr(x86::rdi, x86::r11, 1));
        a.add(x86::r10, 16);
    });
}

// The pixel tile (Int8Gemm::run_pixels): rows x vectors accumulators (zmm0..23) as the VNNI
// tile's, a row being an output position and a vector 16 maps: per group, W's vectors in
// zmm24-26 and position i's 4 bytes broadcast from rsi + b_groups[u] + 4 i (zmm27-30). Arguments:
// rdi W panel, rsi position 0's pixel, rdx Y at (first map, position 0), rcx Y's map stride, r8
// k groups, r9 TileParams (bias and scale per map, mask[0]: the rows stored, w_group_bytes).
// Stores: each row's vectors narrowed to bytes (vpmovusdb), 4 rows a zmm, and vpermt2b puts 8
// maps' 8 positions in a zmm's qwords, each stored through a mask of the rows (k1-k4).
inline void emit_int8_tile_pixels(asmjit::x86::Assembler& a, uint32_t rows, uint32_t vectors) {
    namespace x86 = asmjit::x86;
    auto acc = [&](uint32_t i, uint32_t j) { return x86::zmm(i * vectors + j); };
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < vectors; ++j) a.vpxord(acc(i, j), acc(i, j), acc(i, j));
    asmjit::Label index = a.newLabel();
    emit_int8_pixel_groups(a, rows, vectors);
    emit_vnni_requant_params(a);
    a.mov(x86::r11d, x86::dword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, mask)));
    const x86::KReg masks[4] = {x86::k1, x86::k2, x86::k3, x86::k4};   // qword q's bytes of the rows
    for (uint32_t q = 0; q < 4; ++q) {
        a.kmovq(masks[q], x86::r11);
        if (q < 3) a.shl(x86::r11, 8);
    }
    a.vmovdqu8(x86::zmm24, x86::ptr(index));
    a.vmovdqu8(x86::zmm25, x86::ptr(index, 64));
    a.mov(x86::r11, x86::rdx);   // map m's row of Y
    for (uint32_t j = 0; j < vectors; ++j) {
        a.vmovdqu32(x86::zmm27, x86::zmmword_ptr(x86::rax, (int32_t)(j * 64)));
        a.vmovups(x86::zmm28, x86::zmmword_ptr(x86::r10, (int32_t)(j * 64)));
        for (uint32_t i = 0; i < rows; ++i) {
            emit_vnni_requantize_dwords(a, acc(i, j), x86::zmm27, x86::zmm28);
            a.vpmovusdb(acc(i, j).xmm(), acc(i, j));
        }
        // rows 0-3 in the lanes of row 0's register, 4-7 in row 4's (rows past `rows`: not stored)
        const x86::Zmm low = acc(0, j), high = rows > 4 ? acc(4, j) : acc(0, j);
        for (uint32_t i = 1; i < rows; ++i)
            if (i != 4) a.vinserti32x4(i < 4 ? low : high, i < 4 ? low : high, acc(i, j).xmm(), i % 4);
        a.vmovdqa64(x86::zmm26, low);
        a.vpermt2b(x86::zmm26, x86::zmm24, high);   // maps 0-7 of the vector
        a.vpermt2b(low, x86::zmm25, high);          // maps 8-15
        for (const x86::Zmm& v : {x86::zmm26, low}) {
            if (rows == Int8Gemm::kPixelRows) {   // whole qwords: plain stores (masked ones cost more)
                for (uint32_t lane = 0; lane < 4; ++lane) {
                    if (lane) a.vextracti32x4(x86::xmm27, v, lane);
                    const x86::Xmm src = lane ? x86::xmm27 : v.xmm();
                    a.vmovq(x86::qword_ptr(x86::r11), src);
                    a.add(x86::r11, x86::rcx);
                    a.vmovhps(x86::qword_ptr(x86::r11), src);
                    a.add(x86::r11, x86::rcx);
                }
                continue;
            }
            for (uint32_t half = 0; half < 2; ++half) {
                for (uint32_t q = 0; q < 4; ++q) {
                    a.k(masks[q]).vmovdqu8(x86::ptr(x86::r11, -(int32_t)(8 * q)), v);
                    a.add(x86::r11, x86::rcx);
                }
                if (half == 0) a.valignq(v, v, v, 4);
            }
        }
    }
    a.vzeroupper();
    a.ret();
    uint8_t order[128];   // byte 8 q + i: map q (q + 8) of row i
    for (uint32_t half = 0; half < 2; ++half)
        for (uint32_t q = 0; q < 8; ++q)
            for (uint32_t i = 0; i < 8; ++i) order[64 * half + 8 * q + i] = (uint8_t)((i < 4 ? 16 * i : 64 + 16 * (i - 4)) + q + 8 * half);
    a.align(asmjit::AlignMode::kData, 64);
    a.bind(index);
    a.embed(order, sizeof order);
}

// The pixel tile storing int32 sums (Int8Gemm::run_pixel_sums): the pixel tile's products, the
// accumulators starting at the maps' bias (TileParams::bias, 16 a vector), row i (position i)
// stored at rdx + i rcx, vector j's lanes through mask[j] (k1-k3: maps past the end unstored).
inline void emit_int8_tile_pixel_sums(asmjit::x86::Assembler& a, uint32_t rows, uint32_t vectors) {
    namespace x86 = asmjit::x86;
    auto acc = [&](uint32_t i, uint32_t j) { return x86::zmm(i * vectors + j); };
    const x86::KReg masks[3] = {x86::k1, x86::k2, x86::k3};
    a.mov(x86::rax, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, bias)));
    for (uint32_t j = 0; j < vectors; ++j) {
        a.kmovw(masks[j], x86::word_ptr(x86::r9, (int32_t)(offsetof(Int8Gemm::TileParams, mask) + 4 * j)));
        a.k(masks[j]).z().vmovdqu32(acc(0, j), x86::zmmword_ptr(x86::rax, (int32_t)(j * 64)));   // reads no bias past the maps
        for (uint32_t i = 1; i < rows; ++i) a.vmovdqa32(acc(i, j), acc(0, j));
    }
    emit_int8_pixel_groups(a, rows, vectors);
    for (uint32_t i = 0; i < rows; ++i) {
        for (uint32_t j = 0; j < vectors; ++j) a.k(masks[j]).vmovdqu32(x86::zmmword_ptr(x86::rdx, (int32_t)(j * 64)), acc(i, j));
        if (i + 1 < rows) a.add(x86::rdx, x86::rcx);
    }
    a.vzeroupper();
    a.ret();
}

// run_pixels indexes the pixel tiles as a table of the VNNI tile's shape (make_int8_tiles).
static_assert(Int8Gemm::kPixelRows == kInt8VnniRows && Int8Gemm::kPixelMaps == kInt8VnniVectors * 16,
              "the pixel tiles are 8 positions x 3 vectors");

struct Int8TileTable {
    Int8Gemm::TileFn fn[kInt8VnniRows * kInt8VnniVectors] = {};   // [vectors - 1][rows - 1]
    void (*begin)() = nullptr;   // AMX: configures the tiles (ldtilecfg) for fn[0]
    void (*end)() = nullptr;     // AMX: releases them
    Status status = Status::Unsupported;
};

// The AMX tile: C rows 0-15 x columns 0-15, 0-15 x 16-31, 16-31 x 0-15, 16-31 x 16-31 in
// tmm0-3, A's two 16-row tiles in tmm4-5, B's two 16-column tiles in tmm6-7, per 16 groups of
// K (A: 32 rows of 64 bytes; B: 16 groups of 32 columns x 4 bytes, 128 bytes a row). The C
// tiles go to a 32 x 32 int32 block on the stack, and `rows` of it are requantized as the VNNI
// tile does (emit_vnni_requantize), through masks k1-k2. Arguments as the VNNI tile's; r8 (k
// groups) is a multiple of 16. The caller configures the tiles before (begin, ldtilecfg: a
// microcoded instruction worth several tiles of a short K) and releases them after (end).
inline Int8TileTable make_int8_tile_amx() {
    using namespace asmjit;
    Int8TileTable t;
    void* entries[3];   // begin, end, the tile
    t.status = assemble_jit_entries<x86::Assembler>(3, entries, [&](x86::Assembler& a, const Label* labels) {
        const Label begin = labels[0], end = labels[1], tile = labels[2];
        Label config = a.newLabel(), loop = a.newLabel(), done = a.newLabel(), row = a.newLabel();
        a.bind(begin);
        a.ldtilecfg(x86::ptr(config));
        a.ret();
        a.align(AlignMode::kCode, 16);
        a.bind(end);
        a.tilerelease();
        a.ret();
        a.align(AlignMode::kCode, 32);
        a.bind(tile);
        for (uint32_t c = 0; c < 4; ++c) a.tilezero(x86::tmm(c));
        a.mov(x86::r10, 64);    // A's row stride
        a.mov(x86::r11, 128);   // B's and the C block's row stride
        a.test(x86::r8, x86::r8);
        a.jz(done);
        a.bind(loop);
        a.tileloadd(x86::tmm4, x86::ptr(x86::rdi, x86::r10));
        a.tileloadd(x86::tmm6, x86::ptr(x86::rsi, x86::r11));
        a.tileloadd(x86::tmm5, x86::ptr(x86::rdi, x86::r10, 0, 1024));
        a.tdpbsud(x86::tmm0, x86::tmm4, x86::tmm6);
        a.tileloadd(x86::tmm7, x86::ptr(x86::rsi, x86::r11, 0, 64));
        a.tdpbsud(x86::tmm2, x86::tmm5, x86::tmm6);
        a.tdpbsud(x86::tmm1, x86::tmm4, x86::tmm7);
        a.tdpbsud(x86::tmm3, x86::tmm5, x86::tmm7);
        a.add(x86::rdi, (int32_t)(kInt8AmxRows * 64));
        a.add(x86::rsi, (int32_t)(kInt8AmxGroups * kInt8AmxCols * 4));
        a.sub(x86::r8, (int32_t)kInt8AmxGroups);
        a.jnz(loop);
        a.bind(done);
        a.mov(x86::r8, x86::rsp);   // restored before ret
        a.sub(x86::rsp, (int32_t)(kInt8AmxRows * kInt8AmxCols * 4));
        a.and_(x86::rsp, -64);
        a.tilestored(x86::ptr(x86::rsp, x86::r11), x86::tmm0);
        a.tilestored(x86::ptr(x86::rsp, x86::r11, 0, 64), x86::tmm1);
        a.tilestored(x86::ptr(x86::rsp, x86::r11, 0, 16 * 128), x86::tmm2);
        a.tilestored(x86::ptr(x86::rsp, x86::r11, 0, 16 * 128 + 64), x86::tmm3);
        a.mov(x86::rax, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, bias)));
        a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, scale)));
        a.vbroadcastss(x86::zmm29, x86::dword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, lo)));
        a.vbroadcastss(x86::zmm30, x86::dword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, hi)));
        a.vpbroadcastd(x86::zmm31, x86::dword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, zero_point)));
        a.kmovw(x86::k1, x86::word_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, mask)));
        a.kmovw(x86::k2, x86::word_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, mask) + 4));
        a.mov(x86::r11d, x86::dword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, rows)));
        a.mov(x86::rdi, x86::rsp);
        a.bind(row);
        a.vmovdqa32(x86::zmm0, x86::zmmword_ptr(x86::rdi, 0));
        a.vmovdqa32(x86::zmm1, x86::zmmword_ptr(x86::rdi, 64));
        a.vpbroadcastd(x86::zmm27, x86::dword_ptr(x86::rax));
        a.vbroadcastss(x86::zmm28, x86::dword_ptr(x86::r10));
        emit_vnni_requantize(a, x86::zmm0, x86::zmm27, x86::zmm28, x86::k1, x86::xmmword_ptr(x86::rdx, 0));
        emit_vnni_requantize(a, x86::zmm1, x86::zmm27, x86::zmm28, x86::k2, x86::xmmword_ptr(x86::rdx, 16));
        a.add(x86::rdi, 128);
        a.add(x86::rax, 4);
        a.add(x86::r10, 4);
        a.add(x86::rdx, x86::rcx);
        a.sub(x86::r11d, 1);
        a.jnz(row);
        a.mov(x86::rsp, x86::r8);
        a.vzeroupper();
        a.ret();
        // palette 1; tiles 0-7 all 16 rows of 64 bytes
        uint8_t tile_config[64] = {};
        tile_config[0] = 1;
        for (uint32_t c = 0; c < 8; ++c) {
            tile_config[16 + 2 * c] = 64;
            tile_config[48 + c] = 16;
        }
        a.align(AlignMode::kData, 64);
        a.bind(config);
        a.embed(tile_config, sizeof tile_config);
    });
    if (t.status != Status::Ok) return t;
    t.begin = reinterpret_cast<void (*)()>(entries[0]);
    t.end = reinterpret_cast<void (*)()>(entries[1]);
    t.fn[0] = reinterpret_cast<Int8Gemm::TileFn>(entries[2]);
    return t;
}

// One tile per row count 1..max_rows and vector count 1..max_vectors in one code buffer, `emit`
// writing each.
inline Int8TileTable make_int8_tiles(uint32_t max_rows, uint32_t max_vectors, void (*emit)(asmjit::x86::Assembler&, uint32_t, uint32_t)) {
    using namespace asmjit;
    Int8TileTable t;
    void* entries[kInt8VnniRows * kInt8VnniVectors];
    t.status = assemble_jit_entries<x86::Assembler>(max_rows * max_vectors, entries, [&](x86::Assembler& a, const Label* labels) {
        for (uint32_t vectors = 1; vectors <= max_vectors; ++vectors)
            for (uint32_t rows = 1; rows <= max_rows; ++rows) {
                a.align(AlignMode::kCode, 32);
                a.bind(labels[(vectors - 1) * max_rows + rows - 1]);
                emit(a, rows, vectors);
            }
    });
    if (t.status != Status::Ok) return t;
    for (uint32_t r = 0; r < max_rows * max_vectors; ++r) t.fn[r] = reinterpret_cast<Int8Gemm::TileFn>(entries[r]);
    return t;
}
// The AVX2 tiles: rows x 2 accumulators (ymm0..11), B's two vectors in ymm12-13, a row of A
// broadcast in ymm14, requantized alike; whole panels only.
// - AVX2 (vnni false): each accumulator holds 4 columns x 2 partial sums; B's 4 + 4 columns
//   zero-extended to int16, A's 4 int16 of a row; vpmaddwd sums pairs exactly (|x w| < 2^15,
//   two of them < 2^31). The partial sums meet in vphaddd; 8 bytes per row stored.
// - AVX-VNNI (vnni true): 8 columns per accumulator, A's 4 bytes of a row (the VEX vpdpbusd
//   has no {1to8} operand); 16 bytes per row stored. by_groups (Int8Gemm::run_groups): group u
//   of the panel at rsi + b_groups[u] (r10 walks b_groups), not packed.
constexpr uint32_t kInt8Avx2Rows = 6;
// The least output byte, lo (a float integer at params + lo) + the zero point (an int32 at
// params + zero_point), into the 32-bit register least.
inline void emit_int8_least_byte(asmjit::x86::Assembler& a, const asmjit::x86::Gp& least, const asmjit::x86::Gp& params,
                                 int32_t lo, int32_t zero_point) {
    a.vcvttss2si(least.r32(), asmjit::x86::dword_ptr(params, lo));
    a.add(least.r32(), asmjit::x86::dword_ptr(params, zero_point));
}
// The ymm tiles' requantization, int8_requantize's results with fewer operations: the float
// clamp below is left to the saturating packs that follow (cvtps2dq turns a value under -2^31
// into -2^31, still under), and y's zero point is added to int16 lanes (vpaddsw) after the
// first pack, the least output by vpmaxub after the last. The clamp above stays: cvtps2dq
// turns a value past 2^31 into -2^31 as well. v holds the bias-added accumulator.
inline void emit_int8_requant_ymm(asmjit::x86::Assembler& a, const asmjit::x86::Ymm& v, const asmjit::Operand& scale,
                                  const asmjit::x86::Ymm& hi) {
    a.vcvtdq2ps(v, v);
    if (scale.isMem()) a.vmulps(v, v, scale.as<asmjit::x86::Mem>());
    else a.vmulps(v, v, scale.as<asmjit::x86::Ymm>());
    a.vminps(v, v, hi);
    a.vcvtps2dq(v, v);   // MXCSR's default rounding: to nearest, ties to even
}
// Its constants from the TileParams at r9: hi (float), the zero point in int16 lanes and the
// least output byte (lo + zero point) in byte lanes. Uses eax.
inline void emit_int8_requant_ymm_params(asmjit::x86::Assembler& a, const asmjit::x86::Ymm& hi, const asmjit::x86::Ymm& zero_point,
                                         const asmjit::x86::Ymm& least) {
    namespace x86 = asmjit::x86;
    a.vbroadcastss(hi, x86::dword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, hi)));
    a.vpbroadcastw(zero_point, x86::word_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, zero_point)));
    emit_int8_least_byte(a, x86::eax, x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, lo),
                         (int32_t)offsetof(Int8Gemm::TileParams, zero_point));
    a.vmovd(least.xmm(), x86::eax);
    a.vpbroadcastb(least, least.xmm());
}
// vpdpbusd's sum without AVX-VNNI, for weights within [-64, 64]: vpmaddubsw sums each pair of
// u8 x s8 products in int16 (exact there: 2 x 255 x 64 < 2^15), vpmaddwd against the int16 ones
// at `ones` adds the pairs in int32: 32 products per two multiplies, where the 16-bit tile's
// vpmaddwd takes 16 per one and widens B first (the tiles 1.3-1.5x as fast: bench/int8).
inline void emit_int8_dot_by_pairs(asmjit::x86::Assembler& a, const asmjit::x86::Ymm& acc, const asmjit::x86::Ymm& u8,
                                   const asmjit::x86::Ymm& s8, const asmjit::x86::Ymm& tmp, const asmjit::Label& ones) {
    a.vpmaddubsw(tmp, u8, s8);
    a.vpmaddwd(tmp, tmp, asmjit::x86::ptr(ones));
    a.vpaddd(acc, acc, tmp);
}
// The 32 bytes of int16 ones emit_int8_dot_by_pairs reads, after a kernel's code.
inline void emit_int8_pair_ones(asmjit::x86::Assembler& a, const asmjit::Label& ones) {
    a.align(asmjit::AlignMode::kData, 32);
    a.bind(ones);
    for (int i = 0; i < 8; ++i) a.embedUInt32(0x00010001u);
}
// pairs: the AVX-VNNI tile's panels and code with each vpdpbusd by emit_int8_dot_by_pairs (AVX2
// CPUs without AVX-VNNI, weights within [-64, 64]). words (AVX2's): B's panels hold int16 (8
// columns x 4 a group, 64 bytes) and C the int32 sums, 8 a row, rcx bytes apart
// (Int8WinogradF23's products; no requantization). sums (Int8Gemm::run_sums): C the int32 sums
// plus the row's bias, the panel's 16 (AVX2: 8) a row, rcx bytes apart.
inline void emit_int8_tile_ymm(asmjit::x86::Assembler& a, uint32_t rows, bool vnni, bool by_groups = false, bool pairs = false,
                               bool words = false, bool sums = false) {
    namespace x86 = asmjit::x86;
    const uint32_t mr = kInt8Avx2Rows;
    const asmjit::Label ones = a.newLabel();
    auto acc = [&](uint32_t i, uint32_t h) { return x86::ymm(i * 2 + h); };
    // TileParams::panels panels of B into C's next 16 (AVX2: 8) columns each.
    const asmjit::Label next_panel = emit_int8_panels_enter(a);
    // AVX-VNNI's accumulators start at the row's bias (a load, not an add after the K loop);
    // AVX2's pairs of partial sums meet in vphaddd, so its bias is added after that.
    if (vnni) a.mov(x86::rax, x86::qword_ptr(x86::r9, 0));
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t h = 0; h < 2; ++h) {
            if (vnni) a.vpbroadcastd(acc(i, h), x86::dword_ptr(x86::rax, (int32_t)(i * 4)));
            else a.vpxor(acc(i, h), acc(i, h), acc(i, h));
        }
    if (by_groups) a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, b_groups)));
    // K group u of a step.
    auto group = [&](int32_t u) {
        if (vnni && by_groups) {
            a.mov(x86::rax, x86::qword_ptr(x86::r10, u * 8));
            a.vmovdqu(x86::ymm12, x86::ymmword_ptr(x86::rsi, x86::rax, 0, 0));
            a.vmovdqu(x86::ymm13, x86::ymmword_ptr(x86::rsi, x86::rax, 0, 32));
        } else if (vnni || words) {
            a.vmovdqu(x86::ymm12, x86::ymmword_ptr(x86::rsi, u * 64));
            a.vmovdqu(x86::ymm13, x86::ymmword_ptr(x86::rsi, u * 64 + 32));
        } else {
            a.vpmovzxbw(x86::ymm12, x86::xmmword_ptr(x86::rsi, u * 32));
            a.vpmovzxbw(x86::ymm13, x86::xmmword_ptr(x86::rsi, u * 32 + 16));
        }
        for (uint32_t i = 0; i < rows; ++i) {
            if (vnni) {
                a.vpbroadcastd(x86::ymm14, x86::dword_ptr(x86::rdi, (int32_t)(u * mr * 4 + i * 4)));
                if (pairs) {
                    emit_int8_dot_by_pairs(a, acc(i, 0), x86::ymm12, x86::ymm14, x86::ymm15, ones);
                    emit_int8_dot_by_pairs(a, acc(i, 1), x86::ymm13, x86::ymm14, x86::ymm15, ones);
                    continue;
                }
                a.vex().vpdpbusd(acc(i, 0), x86::ymm12, x86::ymm14);
                a.vex().vpdpbusd(acc(i, 1), x86::ymm13, x86::ymm14);
                continue;
            }
            a.vpbroadcastq(x86::ymm14, x86::qword_ptr(x86::rdi, (int32_t)(u * mr * 8 + i * 8)));
            a.vpmaddwd(x86::ymm15, x86::ymm12, x86::ymm14);
            a.vpaddd(acc(i, 0), acc(i, 0), x86::ymm15);
            a.vpmaddwd(x86::ymm15, x86::ymm13, x86::ymm14);
            a.vpaddd(acc(i, 1), acc(i, 1), x86::ymm15);
        }
    };
    // Four groups a step: the pointer and count updates, once a group, took the vector ports'
    // slots from the multiply-adds.
    emit_int8_group_loop(a, group, [&] {
        a.add(x86::rdi, (int32_t)(4 * mr * (vnni ? 4 : 8)));
        if (by_groups) a.add(x86::r10, 32);
        else a.add(x86::rsi, 4 * (vnni || words ? 64 : 32));
    }, 4);
    if (words || sums) {
        if (sums && !vnni) a.mov(x86::rax, x86::qword_ptr(x86::r9, 0));
        for (uint32_t i = 0; i < rows; ++i) {
            if (vnni) {   // the accumulators started at the bias
                a.vmovdqu(x86::ymmword_ptr(x86::rdx), acc(i, 0));
                a.vmovdqu(x86::ymmword_ptr(x86::rdx, 32), acc(i, 1));
            } else {
                a.vphaddd(acc(i, 0), acc(i, 0), acc(i, 1));   // columns 0 1 4 5 | 2 3 6 7
                a.vpermq(acc(i, 0), acc(i, 0), 0xD8);
                if (sums) {
                    a.vpbroadcastd(x86::ymm12, x86::dword_ptr(x86::rax, (int32_t)(i * 4)));
                    a.vpaddd(acc(i, 0), acc(i, 0), x86::ymm12);
                }
                a.vmovdqu(x86::ymmword_ptr(x86::rdx), acc(i, 0));
            }
            if (i + 1 < rows) a.add(x86::rdx, x86::rcx);
        }
        emit_int8_panels_leave(a, next_panel, vnni ? 64 : 32);
        a.vzeroupper();
        a.ret();
        if (pairs) emit_int8_pair_ones(a, ones);
        return;
    }
    emit_int8_requant_ymm_params(a, x86::ymm13, x86::ymm14, x86::ymm15);
    a.mov(x86::rax, x86::qword_ptr(x86::r9, 0));
    a.mov(x86::r10, x86::qword_ptr(x86::r9, 8));
    for (uint32_t i = 0; i < rows; ++i) {
        const x86::Ymm v0 = acc(i, 0), v1 = acc(i, 1);
        const uint32_t vectors = vnni ? 2 : 1;
        if (!vnni) {
            a.vphaddd(v0, v0, v1);      // columns 0 1 4 5 | 2 3 6 7
            a.vpermq(v0, v0, 0xD8);     // columns 0 .. 7
            a.vpbroadcastd(x86::ymm12, x86::dword_ptr(x86::rax, (int32_t)(i * 4)));
            a.vpaddd(v0, v0, x86::ymm12);
        }
        a.vbroadcastss(x86::ymm12, x86::dword_ptr(x86::r10, (int32_t)(i * 4)));
        for (uint32_t h = 0; h < vectors; ++h) emit_int8_requant_ymm(a, acc(i, h), x86::ymm12, x86::ymm13);
        if (vnni) {
            a.vpackssdw(v0, v0, v1);    // columns 0-3 8-11 | 4-7 12-15 as int16
            a.vpaddsw(v0, v0, x86::ymm14);
            a.vpermq(v0, v0, 0xD8);     // columns 0 .. 15
            a.vextracti128(v1.xmm(), v0, 1);
            a.vpackuswb(v0.xmm(), v0.xmm(), v1.xmm());
            a.vpmaxub(v0.xmm(), v0.xmm(), x86::xmm15);
            a.vmovdqu(x86::xmmword_ptr(x86::rdx), v0.xmm());
        } else {
            a.vextracti128(v1.xmm(), v0, 1);
            a.vpackssdw(v0.xmm(), v0.xmm(), v1.xmm());
            a.vpaddsw(v0.xmm(), v0.xmm(), x86::xmm14);
            a.vpackuswb(v0.xmm(), v0.xmm(), v0.xmm());
            a.vpmaxub(v0.xmm(), v0.xmm(), x86::xmm15);
            a.vmovq(x86::qword_ptr(x86::rdx), v0.xmm());
        }
        if (i + 1 < rows) a.add(x86::rdx, x86::rcx);
    }
    emit_int8_panels_leave(a, next_panel, vnni ? 16 : 8);
    a.vzeroupper();
    a.ret();
    if (pairs) emit_int8_pair_ones(a, ones);
}
// The AVX-VNNI pixel tile (Int8Gemm::run_pixels): the AVX-512 pixel tile's orientation on ymm,
// rows (output positions, up to 6) x 2 vectors (16 maps) of accumulators in ymm0-11, W's
// vectors in ymm12-13, position i's 4 bytes broadcast in ymm15. Its loads of B are those
// broadcasts, so no tap's offset splits a cache line, as the group tiles' 32-byte loads of B at
// a tap's offset do. Arguments as the AVX-512 pixel tile's, W's panels 16 maps wide (64 bytes a
// group; w_group_bytes unread); four groups a step. Stores: a vector's positions x 8
// maps narrowed to bytes (vpackssdw, vpackuswb) and transposed by vpshufb, per map a dword of
// positions 0-3 and a word of 4-5, their first `rows` bytes stored at the map's row of Y.
constexpr uint32_t kInt8PixelRowsYmm = 6;
inline void emit_int8_tile_pixels_ymm_body(asmjit::x86::Assembler& a, uint32_t rows, bool pairs) {
    namespace x86 = asmjit::x86;
    const uint32_t vectors = 2;
    const asmjit::Label ones = a.newLabel();
    auto acc = [&](uint32_t i, uint32_t j) { return x86::ymm(i * vectors + j); };
    a.mov(x86::rax, x86::qword_ptr(x86::r9, 0));   // the accumulators start at the maps' bias
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < vectors; ++j) a.vmovdqu(acc(i, j), x86::ymmword_ptr(x86::rax, (int32_t)(j * 32)));
    asmjit::Label index = a.newLabel();
    a.mov(x86::r10, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, b_groups)));
    auto step = [&](int32_t u) {   // group u of the step
        a.mov(x86::rax, x86::qword_ptr(x86::r10, u * 8));
        for (uint32_t j = 0; j < vectors; ++j) a.vmovdqu(x86::ymm(12 + j), x86::ymmword_ptr(x86::rdi, (int32_t)(u * 64 + j * 32)));
        for (uint32_t i = 0; i < rows; ++i) {
            a.vpbroadcastd(x86::ymm15, x86::dword_ptr(x86::rsi, x86::rax, 0, (int32_t)(i * 4)));
            for (uint32_t j = 0; j < vectors; ++j) {
                if (pairs) emit_int8_dot_by_pairs(a, acc(i, j), x86::ymm15, x86::ymm(12 + j), x86::ymm14, ones);
                else a.vex().vpdpbusd(acc(i, j), x86::ymm15, x86::ymm(12 + j));
            }
        }
    };
    emit_int8_group_loop(a, step, [&] {
        a.add(x86::rdi, 4 * 64);
        a.add(x86::r10, 32);
    }, 4);
    // scale per map as a memory operand; hi, the zero point and the least byte in ymm15, ymm13, ymm14
    a.mov(x86::r10, x86::qword_ptr(x86::r9, 8));
    emit_int8_requant_ymm_params(a, x86::ymm15, x86::ymm13, x86::ymm14);
    a.mov(x86::r11, x86::rdx);   // map m's row of Y
    const uint32_t first = rows < 4 ? rows : 4, second = rows - first;   // bytes of the dword and of the word
    for (uint32_t j = 0; j < vectors; ++j) {
        for (uint32_t i = 0; i < rows; ++i)
            emit_int8_requant_ymm(a, acc(i, j), x86::ymmword_ptr(x86::r10, (int32_t)(j * 32)), x86::ymm15);
        // Per 128-bit lane (maps 0-3, then 4-7) bytes 4 p + m of positions p = 0-3, transposed to
        // 4 m + p; positions 4-5 likewise to 2 m + p - 4. A register past `rows` (acc(1, j) when
        // rows is 1, acc(5, j) when 5) is free and takes the high lane.
        auto narrow = [&](uint32_t r0, uint32_t count, int32_t order) {
            auto row = [&](uint32_t i) { return acc(r0 + (i < count ? i : 0), j); };
            if (count >= 3) {
                a.vpackssdw(acc(r0 + 2, j), row(2), row(3));
                a.vpaddsw(acc(r0 + 2, j), acc(r0 + 2, j), x86::ymm13);
            }
            a.vpackssdw(acc(r0, j), row(0), row(1));
            a.vpaddsw(acc(r0, j), acc(r0, j), x86::ymm13);
            a.vpackuswb(acc(r0, j), acc(r0, j), count >= 3 ? acc(r0 + 2, j) : acc(r0, j));
            a.vpmaxub(acc(r0, j), acc(r0, j), x86::ymm14);
            a.vpshufb(acc(r0, j), acc(r0, j), x86::ymmword_ptr(index, order));
            a.vextracti128(acc(r0 + 1, j).xmm(), acc(r0, j), 1);
        };
        narrow(0, first, 0);
        if (second) narrow(4, second, 32);
        for (uint32_t m = 0; m < 8; ++m) {
            const x86::Xmm low = m < 4 ? acc(0, j).xmm() : acc(1, j).xmm();
            if (first == 4) {   // a qword holds two maps' dwords
                if (m % 2 == 0) {
                    if (m % 4 == 0) a.vmovq(x86::r8, low);
                    else a.vpextrq(x86::r8, low, 1);
                } else {
                    a.shr(x86::r8, 32);
                }
                a.mov(x86::dword_ptr(x86::r11), x86::r8d);
            } else {
                if (m % 4 == 0) a.vmovd(x86::r8d, low);
                else a.vpextrd(x86::r8d, low, m % 4);
                if (first == 1) {
                    a.mov(x86::byte_ptr(x86::r11), x86::r8b);
                } else {
                    a.mov(x86::word_ptr(x86::r11), x86::r8w);
                    if (first == 3) {
                        a.shr(x86::r8d, 16);
                        a.mov(x86::byte_ptr(x86::r11, 2), x86::r8b);
                    }
                }
            }
            if (second) {   // a qword holds four maps' words
                if (m % 4 == 0) a.vmovq(x86::rdi, m < 4 ? acc(4, j).xmm() : acc(5, j).xmm());
                else a.shr(x86::rdi, 16);
                if (second == 2) a.mov(x86::word_ptr(x86::r11, 4), x86::di);
                else a.mov(x86::byte_ptr(x86::r11, 4), x86::dil);
            }
            a.add(x86::r11, x86::rcx);
        }
    }
    a.vzeroupper();
    a.ret();
    // byte 4 m + p of a lane: position p's byte of map m, at 4 p + m; then byte 2 m + q: that
    // of position 4 + q, at 4 q + m
    uint8_t order[64] = {};
    for (uint32_t half = 0; half < 2; ++half)
        for (uint32_t m = 0; m < 4; ++m) {
            for (uint32_t p = 0; p < 4; ++p) order[16 * half + 4 * m + p] = (uint8_t)(4 * p + m);
            for (uint32_t q = 0; q < 2; ++q) order[32 + 16 * half + 2 * m + q] = (uint8_t)(4 * q + m);
        }
    a.align(asmjit::AlignMode::kData, 32);
    a.bind(index);
    a.embed(order, sizeof order);
    if (pairs) emit_int8_pair_ones(a, ones);
}
inline void emit_int8_tile_pixels_ymm(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_pixels_ymm_body(a, rows, false); }
inline void emit_int8_tile_pixels_pairs(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_pixels_ymm_body(a, rows, true); }
inline void emit_int8_tile_avx2(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, false); }
inline void emit_int8_tile_avx_vnni(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, true); }
inline void emit_int8_tile_avx_vnni_groups(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, true, true); }
inline void emit_int8_tile_pairs(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, true, false, true); }
inline void emit_int8_tile_pairs_groups(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, true, true, true); }
inline void emit_int8_tile_words(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, false, false, false, true); }
inline void emit_int8_tile_avx2_sums(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, false, false, false, false, true); }
inline void emit_int8_tile_avx_vnni_sums(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, true, false, false, false, true); }
inline void emit_int8_tile_pairs_sums(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_tile_ymm(a, rows, true, false, true, false, true); }
// AVX-VNNI's tiles (Int8Gemm::run, run_groups, run_pixels), or their versions by vpmaddubsw
// pairs; each set made on first use.
struct Int8YmmTiles {
    Int8TileTable panels, groups, pixels;
};
inline const Int8YmmTiles& int8_ymm_tiles(bool pairs) {
    if (pairs) {
        static const Int8YmmTiles by_pairs{make_int8_tiles(kInt8Avx2Rows, 1, emit_int8_tile_pairs),
                                           make_int8_tiles(kInt8Avx2Rows, 1, emit_int8_tile_pairs_groups),
                                           make_int8_tiles(kInt8PixelRowsYmm, 1, emit_int8_tile_pixels_pairs)};
        return by_pairs;
    }
    static const Int8YmmTiles avx_vnni{make_int8_tiles(kInt8Avx2Rows, 1, emit_int8_tile_avx_vnni),
                                       make_int8_tiles(kInt8Avx2Rows, 1, emit_int8_tile_avx_vnni_groups),
                                       make_int8_tiles(kInt8PixelRowsYmm, 1, emit_int8_tile_pixels_ymm)};
    return avx_vnni;
}

static_assert(kInt8Avx2Rows <= kInt8VnniRows, "Int8TileTable holds the VNNI tile's rows");

// The gemv kernels' rows of X, r8 groups x 4 bytes apart: row r at rsi + r * r10, row 3 at
// rax + 2 r10 (rax = rsi + r10), so that the K loop advances two pointers.
inline void emit_int8_gemv_rows(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    a.mov(x86::r10, x86::r8);
    a.shl(x86::r10, 2);
    a.lea(x86::rax, x86::ptr(x86::rsi, x86::r10));
}
inline asmjit::x86::Mem int8_gemv_row(uint32_t r, int32_t offset) {
    namespace x86 = asmjit::x86;
    return r == 0 ? x86::dword_ptr(x86::rsi, offset)
         : r == 3 ? x86::dword_ptr(x86::rax, x86::r10, 1, offset)
                  : x86::dword_ptr(x86::rsi, x86::r10, r - 1, offset);
}

// The gemv kernel (Int8Gemv): rows x 4 accumulators (zmm0..15), a row's 4 bytes of X
// broadcast in zmm16-19, the panel's 4 vectors of W per group as vpdpbusd's memory operand.
// Arguments as the tile's: rdi W panel, rsi X (rows r8 * 4 bytes apart), rdx Y, rcx its row
// stride, r8 k groups, r9 TileParams (bias and scale of the panel's 64 columns, masks k1-k4).
// The requantization is the tile's (emit_vnni_requantize).
inline void emit_int8_gemv_vnni(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) {
    namespace x86 = asmjit::x86;
    constexpr uint32_t vectors = 4, panel = 64 * 4;   // bytes of W per group
    auto acc = [&](uint32_t r, uint32_t j) { return x86::zmm(r * vectors + j); };
    for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t j = 0; j < vectors; ++j) a.vpxord(acc(r, j), acc(r, j), acc(r, j));
    emit_int8_gemv_rows(a);
    auto step = [&](int32_t u) {
        for (uint32_t r = 0; r < rows; ++r) a.vpbroadcastd(x86::zmm(16 + r), int8_gemv_row(r, u * 4));
        for (uint32_t j = 0; j < vectors; ++j)
            for (uint32_t r = 0; r < rows; ++r)
                a.vpdpbusd(acc(r, j), x86::zmm(16 + r), x86::zmmword_ptr(x86::rdi, (int32_t)(u * panel + j * 64)));
    };
    emit_int8_group_loop(a, step, [&] {
        a.add(x86::rdi, (int32_t)(2 * panel));
        a.add(x86::rsi, 8);
        a.add(x86::rax, 8);
    });
    // bias and scale of the columns in zmm20-23 and zmm24-27, lo hi zero point in zmm29-31
    emit_vnni_requant_params(a);
    for (uint32_t j = 0; j < vectors; ++j) {
        a.vmovdqu32(x86::zmm(20 + j), x86::zmmword_ptr(x86::rax, (int32_t)(j * 64)));
        a.vmovups(x86::zmm(24 + j), x86::zmmword_ptr(x86::r10, (int32_t)(j * 64)));
    }
    const x86::KReg masks[vectors] = {x86::k1, x86::k2, x86::k3, x86::k4};
    for (uint32_t j = 0; j < vectors; ++j) a.kmovw(masks[j], x86::word_ptr(x86::r9, (int32_t)(28 + 4 * j)));
    for (uint32_t r = 0; r < rows; ++r) {
        for (uint32_t j = 0; j < vectors; ++j)
            emit_vnni_requantize(a, acc(r, j), x86::zmm(20 + j), x86::zmm(24 + j), masks[j], x86::xmmword_ptr(x86::rdx, (int32_t)(j * 16)));
        if (r + 1 < rows) a.add(x86::rdx, x86::rcx);
    }
    a.vzeroupper();
    a.ret();
}

static_assert(Int8Gemv::kRows <= kInt8VnniRows, "Int8TileTable holds the gemv kernel's rows");

// The ymm gemv kernels (Int8Gemv on AVX2 and AVX-VNNI): rows x vectors accumulators of 8
// columns (int8_gemv_ymm_vectors: all 64 columns of a panel for one row, so each of its groups'
// 4 cache lines is read in one pass; fewer for more rows), the call's bytes of each group at rdi
// (groups a panel, 256 bytes, apart); arguments as emit_int8_gemv_vnni's, bias and scale of the
// call's columns at r9.
// - AVX-VNNI: a row's 4 bytes of X broadcast after the accumulators, W as vpdpbusd's operand.
// - AVX2: X's even and odd bytes zero-extended to int16, W's sign-extended (ymm12-13), two
//   vpmaddwd of 2 exact products each (|x w| < 2^15).
constexpr uint32_t int8_gemv_ymm_vectors(uint32_t rows, bool vnni) {
    return rows == 1 ? 8 : vnni ? (rows == 4 ? 2 : 4) : 4;   // registers: see the kernel
}
inline void emit_int8_gemv_ymm(asmjit::x86::Assembler& a, uint32_t rows, bool vnni) {
    namespace x86 = asmjit::x86;
    constexpr int32_t panel = 64 * 4;
    const uint32_t vectors = int8_gemv_ymm_vectors(rows, vnni);
    auto acc = [&](uint32_t r, uint32_t h) { return x86::ymm(r * vectors + h); };
    const uint32_t xs = rows * vectors;   // X's registers: ymm(xs + r) (AVX-VNNI), ymm(xs + 2 r) and ymm(xs + 2 r + 1)
    for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t h = 0; h < vectors; ++h) a.vpxor(acc(r, h), acc(r, h), acc(r, h));
    if (!vnni) {   // ymm15: 0x00FF in every int16
        a.mov(x86::r11d, 0x00FF00FF);
        a.vmovd(x86::xmm15, x86::r11d);
        a.vpbroadcastd(x86::ymm15, x86::xmm15);
    }
    emit_int8_gemv_rows(a);
    auto step = [&](int32_t u) {
        if (vnni) {
            for (uint32_t r = 0; r < rows; ++r) a.vpbroadcastd(x86::ymm(xs + r), int8_gemv_row(r, u * 4));
            for (uint32_t h = 0; h < vectors; ++h)
                for (uint32_t r = 0; r < rows; ++r)
                    a.vex().vpdpbusd(acc(r, h), x86::ymm(xs + r), x86::ymmword_ptr(x86::rdi, u * panel + (int32_t)h * 32));
            return;
        }
        for (uint32_t r = 0; r < rows; ++r) {
            const x86::Ymm even = x86::ymm(xs + 2 * r), odd = x86::ymm(xs + 2 * r + 1);
            a.vpbroadcastd(even, int8_gemv_row(r, u * 4));
            a.vpsrlw(odd, even, 8);
            a.vpand(even, even, x86::ymm15);
        }
        for (uint32_t h = 0; h < vectors; ++h) {
            a.vmovdqu(x86::ymm12, x86::ymmword_ptr(x86::rdi, u * panel + (int32_t)h * 32));
            a.vpsraw(x86::ymm13, x86::ymm12, 8);
            a.vpsllw(x86::ymm12, x86::ymm12, 8);
            a.vpsraw(x86::ymm12, x86::ymm12, 8);
            for (uint32_t r = 0; r < rows; ++r) {
                a.vpmaddwd(x86::ymm14, x86::ymm12, x86::ymm(xs + 2 * r));
                a.vpaddd(acc(r, h), acc(r, h), x86::ymm14);
                a.vpmaddwd(x86::ymm14, x86::ymm13, x86::ymm(xs + 2 * r + 1));
                a.vpaddd(acc(r, h), acc(r, h), x86::ymm14);
            }
        }
    };
    emit_int8_group_loop(a, step, [&] {
        a.add(x86::rdi, 2 * panel);
        a.add(x86::rsi, 8);
        a.add(x86::rax, 8);
    });
    // the tile's requantization (emit_int8_tile_ymm), bias and scale per column
    a.mov(x86::rax, x86::qword_ptr(x86::r9, 0));
    a.mov(x86::r10, x86::qword_ptr(x86::r9, 8));
    a.vbroadcastss(x86::ymm13, x86::dword_ptr(x86::r9, 16));
    a.vbroadcastss(x86::ymm14, x86::dword_ptr(x86::r9, 20));
    a.vpbroadcastd(x86::ymm15, x86::dword_ptr(x86::r9, 24));
    for (uint32_t r = 0; r < rows; ++r) {
        for (uint32_t h = 0; h < vectors; ++h) {
            const x86::Ymm v = acc(r, h);
            a.vpaddd(v, v, x86::ymmword_ptr(x86::rax, (int32_t)h * 32));
            a.vcvtdq2ps(v, v);
            a.vmulps(v, v, x86::ymmword_ptr(x86::r10, (int32_t)h * 32));
            a.vmaxps(v, v, x86::ymm13);
            a.vminps(v, v, x86::ymm14);
            a.vcvtps2dq(v, v);   // MXCSR's default rounding: to nearest, ties to even
            a.vpaddd(v, v, x86::ymm15);
        }
        for (uint32_t h = 0; h < vectors; h += 2) {   // 16 columns a store
            const x86::Ymm v0 = acc(r, h), v1 = acc(r, h + 1);
            a.vpackssdw(v0, v0, v1);    // columns 0-3 8-11 | 4-7 12-15 as int16
            a.vpermq(v0, v0, 0xD8);     // columns 0 .. 15
            a.vextracti128(x86::xmm12, v0, 1);
            a.vpackuswb(v0.xmm(), v0.xmm(), x86::xmm12);
            a.vmovdqu(x86::xmmword_ptr(x86::rdx, (int32_t)h * 8), v0.xmm());
        }
        if (r + 1 < rows) a.add(x86::rdx, x86::rcx);
    }
    a.vzeroupper();
    a.ret();
}
inline void emit_int8_gemv_avx2(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_gemv_ymm(a, rows, false); }
inline void emit_int8_gemv_avx_vnni(asmjit::x86::Assembler& a, uint32_t rows, uint32_t) { emit_int8_gemv_ymm(a, rows, true); }

#endif
#if !defined(TESSEL_NO_JIT) && defined(__aarch64__)
// The NEON tiles' end: rows x 3 int32 sums of 4 columns in v8 + 3 i + j, x0 at the panel's
// 128 x row sums (B was packed as x - 128), requantized and stored (12 bytes a row), d8-d15
// restored. Arguments as the tiles': x2 C, x3 ldc, x5 TileParams.
inline void emit_int8_tile_store_neon(asmjit::a64::Assembler& a, uint32_t rows, bool sums = false) {
    namespace a64 = asmjit::a64;
    auto acc = [&](uint32_t i, uint32_t j) { return a64::v(8 + i * 3 + j); };
    a.ldr(a64::x6, a64::ptr(a64::x5, 0));     // bias
    if (!sums) {   // sums (Int8Gemm::run_sums): + bias + 128 x the row's sum, 12 int32 a row
        a.ldr(a64::x7, a64::ptr(a64::x5, 8));     // scale
        a.add(a64::x9, a64::x5, 16);
        a.ld1r(a64::v(0).s4(), a64::ptr(a64::x9));   // lo
        a.add(a64::x9, a64::x5, 20);
        a.ld1r(a64::v(1).s4(), a64::ptr(a64::x9));   // hi
        a.add(a64::x9, a64::x5, 24);
        a.ld1r(a64::v(2).s4(), a64::ptr(a64::x9));   // zero point
    }
    a.mov(a64::x8, a64::x2);
    for (uint32_t i = 0; i < rows; ++i) {
        a.add(a64::x9, a64::x6, (uint32_t)(i * 4));
        a.ld1r(a64::v(3).s4(), a64::ptr(a64::x9));
        a.add(a64::x9, a64::x0, (uint32_t)(i * 4));
        a.ld1r(a64::v(4).s4(), a64::ptr(a64::x9));
        a.add(a64::v(3).s4(), a64::v(3).s4(), a64::v(4).s4());
        if (sums) {
            for (uint32_t j = 0; j < 3; ++j) {
                a.add(acc(i, j).s4(), acc(i, j).s4(), a64::v(3).s4());
                a.str(acc(i, j).q(), a64::ptr(a64::x8, (int32_t)(j * 16)));
            }
            if (i + 1 < rows) a.add(a64::x8, a64::x8, a64::x3);
            continue;
        }
        a.add(a64::x9, a64::x7, (uint32_t)(i * 4));
        a.ld1r(a64::v(5).s4(), a64::ptr(a64::x9));
        for (uint32_t j = 0; j < 3; ++j) {
            a64::Vec v = acc(i, j);
            a.add(v.s4(), v.s4(), a64::v(3).s4());
            a.scvtf(v.s4(), v.s4());
            a.fmul(v.s4(), v.s4(), a64::v(5).s4());
            a.fmax(v.s4(), v.s4(), a64::v(0).s4());   // no NaN here: fmax is the clamp
            a.fmin(v.s4(), v.s4(), a64::v(1).s4());
            a.fcvtns(v.s4(), v.s4());                 // to nearest, ties to even
            a.add(v.s4(), v.s4(), a64::v(2).s4());
        }
        a.sqxtn(a64::v(6).h4(), acc(i, 0).s4());
        a.sqxtn2(a64::v(6).h8(), acc(i, 1).s4());
        a.sqxtn(a64::v(7).h4(), acc(i, 2).s4());
        a.sqxtun(a64::v(6).b8(), a64::v(6).h8());
        a.sqxtun2(a64::v(6).b16(), a64::v(7).h8());
        a.str(a64::d6, a64::ptr(a64::x8));
        a.umov(a64::w10, a64::v(6).s(2));
        a.str(a64::w10, a64::ptr(a64::x8, 8));
        if (i + 1 < rows) a.add(a64::x8, a64::x8, a64::x3);
    }
    a.ldp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
    a.ldp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
    a.ldp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
    a.ldp(a64::d8, a64::d9, a64::ptr_post(a64::sp, 64));
    a.ret(a64::x30);
}

inline void emit_int8_tile_save_neon(asmjit::a64::Assembler& a) {
    namespace a64 = asmjit::a64;
    a.stp(a64::d8, a64::d9, a64::ptr_pre(a64::sp, -64));
    a.stp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
    a.stp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
    a.stp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
}

// The sdot tile: rows x 3 accumulators in v8..v31 (d8-d15 saved), A's 8 rows of 4 bytes in
// v0-v1 taken by element, B's three vectors of 4 columns in v2-v4. Arguments (AAPCS64): x0 A
// panel, x1 B panel, x2 C, x3 ldc, x4 k groups, x5 TileParams. After the K loop x0 points at
// the panel's 128 x row sums. 12 bytes per row stored (whole panels only).
inline void emit_int8_tile_sdot_body(asmjit::a64::Assembler& a, uint32_t rows, bool sums) {
    namespace a64 = asmjit::a64;
    auto acc = [&](uint32_t i, uint32_t j) { return a64::v(8 + i * 3 + j); };
    emit_int8_tile_save_neon(a);
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < 3; ++j) a.eor(acc(i, j).b16(), acc(i, j).b16(), acc(i, j).b16());
    asmjit::Label loop = a.newLabel(), store = a.newLabel();
    a.cbz(a64::x4, store);
    a.bind(loop);
    a.ldp(a64::q0, a64::q1, a64::ptr_post(a64::x0, 32));
    a.ldr(a64::q2, a64::ptr(a64::x1, 0));
    a.ldr(a64::q3, a64::ptr(a64::x1, 16));
    a.ldr(a64::q4, a64::ptr(a64::x1, 32));
    a.add(a64::x1, a64::x1, 48);
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < 3; ++j) a.sdot(acc(i, j).s4(), a64::v(2 + j).b16(), a64::v(i < 4 ? 0 : 1).b4(i & 3));
    a.subs(a64::x4, a64::x4, 1);
    a.b_ne(loop);
    a.bind(store);
    emit_int8_tile_store_neon(a, rows, sums);
}
inline void emit_int8_tile_sdot(asmjit::a64::Assembler& a, uint32_t rows) { emit_int8_tile_sdot_body(a, rows, false); }
inline void emit_int8_tile_sdot_sums(asmjit::a64::Assembler& a, uint32_t rows) { emit_int8_tile_sdot_body(a, rows, true); }

// NEON without the dot product: the same panels (B as x - 128) at 4 rows. Per group, row i's 4
// bytes replicated (dup) times each B vector of 4 columns x 4 bytes: smull / smull2 give the
// 16-bit products of 2 columns each (|a b| <= 128 x 128: exact), sadalp adds their pairs into
// int32, two accumulators per 4 columns in v8..v31 (column c's two half sums side by side);
// addp folds them into the store's v8 + 3 i + j (in increasing order no sum is overwritten
// before it is read).
constexpr uint32_t kInt8NeonMullRows = 4;
inline void emit_int8_tile_neon_mull_body(asmjit::a64::Assembler& a, uint32_t rows, bool sums) {
    namespace a64 = asmjit::a64;
    auto half = [&](uint32_t i, uint32_t j, uint32_t h) { return a64::v(8 + 2 * (i * 3 + j) + h); };
    emit_int8_tile_save_neon(a);
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < 3; ++j)
            for (uint32_t h = 0; h < 2; ++h) a.eor(half(i, j, h).b16(), half(i, j, h).b16(), half(i, j, h).b16());
    asmjit::Label loop = a.newLabel(), store = a.newLabel();
    a.cbz(a64::x4, store);
    a.bind(loop);
    a.ldr(a64::q0, a64::ptr_post(a64::x0, (int32_t)(4 * kInt8NeonMullRows)));
    a.ldr(a64::q2, a64::ptr(a64::x1, 0));
    a.ldr(a64::q3, a64::ptr(a64::x1, 16));
    a.ldr(a64::q4, a64::ptr(a64::x1, 32));
    a.add(a64::x1, a64::x1, 48);
    for (uint32_t i = 0; i < rows; ++i) {
        a.dup(a64::v(1).s4(), a64::v(0).s(i));
        for (uint32_t j = 0; j < 3; ++j) {
            a.smull(a64::v(5).h8(), a64::v(2 + j).b8(), a64::v(1).b8());
            a.smull2(a64::v(6).h8(), a64::v(2 + j).b16(), a64::v(1).b16());
            a.sadalp(half(i, j, 0).s4(), a64::v(5).h8());
            a.sadalp(half(i, j, 1).s4(), a64::v(6).h8());
        }
    }
    a.subs(a64::x4, a64::x4, 1);
    a.b_ne(loop);
    a.bind(store);
    for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t j = 0; j < 3; ++j) a.addp(a64::v(8 + i * 3 + j).s4(), half(i, j, 0).s4(), half(i, j, 1).s4());
    emit_int8_tile_store_neon(a, rows, sums);
}
inline void emit_int8_tile_neon_mull(asmjit::a64::Assembler& a, uint32_t rows) { emit_int8_tile_neon_mull_body(a, rows, false); }
inline void emit_int8_tile_neon_mull_sums(asmjit::a64::Assembler& a, uint32_t rows) { emit_int8_tile_neon_mull_body(a, rows, true); }

struct Int8TileTable {
    Int8Gemm::TileFn fn[8] = {};
    Status status = Status::Unsupported;
};

// The NEON tiles of 1 to `rows` rows.
inline Int8TileTable make_int8_tiles_neon(uint32_t rows, void (*emit)(asmjit::a64::Assembler&, uint32_t)) {
    using namespace asmjit;
    Int8TileTable t;
    void* entries[8];
    t.status = assemble_jit_entries<a64::Assembler>(rows, entries, [&](a64::Assembler& a, const Label* labels) {
        for (uint32_t r = 1; r <= rows; ++r) {
            a.align(AlignMode::kCode, 16);
            a.bind(labels[r - 1]);
            emit(a, r);
        }
    });
    if (t.status != Status::Ok) return t;
    for (uint32_t r = 0; r < rows; ++r) t.fn[r] = reinterpret_cast<Int8Gemm::TileFn>(entries[r]);
    return t;
}
#endif
}  // namespace detail

namespace detail {
inline bool int8_vbmi_available();
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
// Int8Gemm's B packing on AVX-512 VBMI, for panels of nr columns (a multiple of 16): per group
// and 16 columns, the four rows' 16 bytes in one zmm (a load and three inserts), then vpermb
// puts column j's 4 bytes together (output byte 4 j + q from row q's byte j). Arguments: rdi
// base, rsi offsets (strided: the row stride), rdx groups (at least 1), rcx packed.
struct Int8PackKernels {
    Int8Gemm::PackRowsFn rows = nullptr;
    Int8Gemm::PackStridedFn strided = nullptr;
};
// The vpermb index that gathers 16 columns of four rows (row q's 16 bytes at byte 16 q of the
// zmm) into column j's 4 bytes at 4 j: bound at `index`, 64-byte aligned.
inline void emit_int8_interleave_index(asmjit::x86::Assembler& a, const asmjit::Label& index) {
    uint8_t permute[64];
    for (uint32_t j = 0; j < 16; ++j)
        for (uint32_t q = 0; q < 4; ++q) permute[4 * j + q] = (uint8_t)(16 * q + j);
    a.align(asmjit::AlignMode::kData, 64);
    a.bind(index);
    a.embed(permute, sizeof permute);
}
inline Int8PackKernels make_int8_pack_kernels(uint32_t nr) {
    using namespace asmjit;
    Int8PackKernels t;
    void* entries[2];   // rows, strided
    const Status s = assemble_jit_entries<x86::Assembler>(2, entries, [&](x86::Assembler& a, const Label* labels) {
        Label index = a.newLabel();
        const x86::Gp row[4] = {x86::r8, x86::r9, x86::r10, x86::r11};
        for (int strided = 0; strided < 2; ++strided) {
            Label loop = a.newLabel();
            a.align(AlignMode::kCode, 32);
            a.bind(labels[strided]);
            a.vmovdqu64(x86::zmm31, x86::ptr(index));
            if (strided) a.lea(x86::rax, x86::ptr(x86::rsi, x86::rsi, 1));   // 3 strides
            a.bind(loop);
            if (strided) {
                a.mov(row[0], x86::rdi);
                a.lea(row[1], x86::ptr(x86::rdi, x86::rsi));
                a.lea(row[2], x86::ptr(x86::rdi, x86::rsi, 1));
                a.lea(row[3], x86::ptr(x86::rdi, x86::rax));
            } else {
                for (uint32_t q = 0; q < 4; ++q) {
                    a.mov(row[q], x86::qword_ptr(x86::rsi, (int32_t)(8 * q)));
                    a.add(row[q], x86::rdi);
                }
            }
            for (uint32_t c = 0; c < nr / 16; ++c) {
                const x86::Zmm v = x86::zmm(c);
                a.vmovdqu(v.xmm(), x86::xmmword_ptr(row[0], (int32_t)(16 * c)));
                for (uint32_t q = 1; q < 4; ++q) a.vinserti32x4(v, v, x86::xmmword_ptr(row[q], (int32_t)(16 * c)), q);
                a.vpermb(v, x86::zmm31, v);
                a.vmovdqu64(x86::zmmword_ptr(x86::rcx, (int32_t)(64 * c)), v);
            }
            if (strided) a.lea(x86::rdi, x86::ptr(x86::rdi, x86::rsi, 2));   // 4 strides on
            else a.add(x86::rsi, 32);
            a.add(x86::rcx, (int32_t)(4 * nr));
            a.sub(x86::rdx, 1);
            a.jnz(loop);
            a.vzeroupper();
            a.ret();
        }
        emit_int8_interleave_index(a, index);
    });
    if (s != Status::Ok) return t;
    t.rows = reinterpret_cast<Int8Gemm::PackRowsFn>(entries[0]);
    t.strided = reinterpret_cast<Int8Gemm::PackStridedFn>(entries[1]);
    return t;
}

// Int8Gemm::interleave4 on AVX-512 VBMI: per 16 columns the four rows' bytes in one zmm and
// vpermb, as the pack kernels; the last 1-15 columns through masked loads and a masked store,
// so nothing outside the rows and the n units is touched. Arguments: rdi rows (4 pointers),
// rsi n (at least 1), rdx dst.
inline Int8Gemm::InterleaveFn make_int8_interleave_kernel() {
    using namespace asmjit;
    void* entry = nullptr;
    const Status s = assemble_jit_entries<x86::Assembler>(1, &entry, [&](x86::Assembler& a, const Label* labels) {
        Label index = a.newLabel(), loop = a.newLabel(), tail = a.newLabel(), done = a.newLabel();
        const x86::Gp row[4] = {x86::r8, x86::r9, x86::r10, x86::r11};
        a.bind(labels[0]);
        a.vmovdqu64(x86::zmm31, x86::ptr(index));
        for (uint32_t q = 0; q < 4; ++q) a.mov(row[q], x86::qword_ptr(x86::rdi, (int32_t)(8 * q)));
        a.xor_(x86::eax, x86::eax);   // the column
        auto sixteen = [&](bool masked) {
            if (!masked) {
                a.vmovdqu(x86::xmm0, x86::ptr(row[0], x86::rax));
                for (uint32_t q = 1; q < 4; ++q) a.vinserti32x4(x86::zmm0, x86::zmm0, x86::ptr(row[q], x86::rax), q);
            } else {
                for (uint32_t q = 0; q < 4; ++q) a.k(x86::k1).z().vmovdqu8(x86::xmm(q), x86::ptr(row[q], x86::rax));
                for (uint32_t q = 1; q < 4; ++q) a.vinserti32x4(x86::zmm0, x86::zmm0, x86::xmm(q), q);
            }
            a.vpermb(x86::zmm0, x86::zmm31, x86::zmm0);
        };
        a.bind(loop);
        a.lea(x86::rcx, x86::ptr(x86::rax, 16));
        a.cmp(x86::rcx, x86::rsi);
        a.ja(tail);
        sixteen(false);
        a.vmovdqu64(x86::ptr(x86::rdx, x86::rax, 2), x86::zmm0);
        a.mov(x86::rax, x86::rcx);
        a.jmp(loop);
        a.bind(tail);
        a.mov(x86::rcx, x86::rsi);
        a.sub(x86::rcx, x86::rax);   // 0 to 15 columns left
        a.jz(done);
        a.mov(x86::edi, 1);
        a.shl(x86::edi, x86::cl);
        a.sub(x86::edi, 1);
        a.kmovd(x86::k1, x86::edi);   // the columns' bytes of a row
        a.shl(x86::ecx, 2);
        a.mov(x86::edi, 1);
        a.shl(x86::rdi, x86::cl);
        a.sub(x86::rdi, 1);
        a.kmovq(x86::k2, x86::rdi);   // their 4 bytes each of dst
        sixteen(true);
        a.k(x86::k2).vmovdqu8(x86::ptr(x86::rdx, x86::rax, 2), x86::zmm0);
        a.bind(done);
        a.vzeroupper();
        a.ret();
        emit_int8_interleave_index(a, index);
    });
    return s == Status::Ok ? reinterpret_cast<Int8Gemm::InterleaveFn>(entry) : nullptr;
}
#endif
}  // namespace detail

Status Int8Gemm::init(Isa isa, bool dot_products, bool matrix_tiles, bool narrow_weights) {
    (void)dot_products;   // builds without JIT have no dot-product tiles
    (void)matrix_tiles;
    (void)narrow_weights;
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    isa_ = isa;
    tiles_ = nullptr;
    group_tiles_ = nullptr;
    sum_tiles_ = nullptr;
    pixel_tiles_ = nullptr;
    pixel_sum_tiles_ = nullptr;
    pixel_rows_ = kPixelRows;
    pixel_vectors_ = 3;
    mr_ = detail::kInt8PortableRows;
    nr_ = detail::kInt8PortableCols;
    a_bytes_ = 1;
    masked_ = false;
    signed_b_ = false;
    amx_ = false;
    group_block_ = 1;
    pack_rows_ = nullptr;
    interleave_ = nullptr;
    panel_loops_ = false;
    pack_strided_ = nullptr;
    byte_pairs_ = false;
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
    if (isa == Isa::Avx512 && dot_products && matrix_tiles && int8_amx_available()) {
        static const detail::Int8TileTable amx = detail::make_int8_tile_amx();
        if (amx.status != Status::Ok) return amx.status;
        tiles_ = amx.fn;
        amx_begin_ = amx.begin;
        amx_end_ = amx.end;
        mr_ = detail::kInt8AmxRows;
        nr_ = detail::kInt8AmxCols;
        group_block_ = detail::kInt8AmxGroups;
        masked_ = true;
        amx_ = true;
    } else if (isa == Isa::Avx512 && dot_products && int8_vnni_available()) {
        static const detail::Int8TileTable vnni = detail::make_int8_tiles(detail::kInt8VnniRows, detail::kInt8VnniVectors,
                                                                                   detail::emit_int8_tile_vnni);
        if (vnni.status != Status::Ok) return vnni.status;
        static const detail::Int8TileTable vnni_groups = detail::make_int8_tiles(detail::kInt8VnniRows, detail::kInt8VnniVectors,
                                                                                 detail::emit_int8_tile_vnni_groups);
        if (vnni_groups.status != Status::Ok) return vnni_groups.status;
        tiles_ = vnni.fn;
        group_tiles_ = vnni_groups.fn;
        if (detail::int8_vbmi_available()) {
            static const detail::Int8TileTable pixels = detail::make_int8_tiles(detail::kInt8VnniRows, detail::kInt8VnniVectors,
                                                                                detail::emit_int8_tile_pixels);
            if (pixels.status != Status::Ok) return pixels.status;
            pixel_tiles_ = pixels.fn;
        }
        mr_ = detail::kInt8VnniRows;
        nr_ = detail::kInt8VnniVectors * 16;
        masked_ = true;
        panel_loops_ = true;
    } else if ((isa == Isa::Avx2 || isa == Isa::Avx512) && ((dot_products && int8_avx_vnni_available()) || narrow_weights)) {
        // AVX-VNNI's tiles; without AVX-VNNI (narrow weights) by vpmaddubsw pairs
        const bool pairs = !(dot_products && int8_avx_vnni_available());
        const detail::Int8YmmTiles& ymm = detail::int8_ymm_tiles(pairs);
        for (const detail::Int8TileTable* table : {&ymm.panels, &ymm.groups, &ymm.pixels})
            if (table->status != Status::Ok) return table->status;
        tiles_ = ymm.panels.fn;
        group_tiles_ = ymm.groups.fn;
        pixel_tiles_ = ymm.pixels.fn;
        pixel_rows_ = detail::kInt8PixelRowsYmm;
        pixel_vectors_ = 1;   // of 16 maps, in two ymm
        mr_ = detail::kInt8Avx2Rows;
        nr_ = 16;
        panel_loops_ = true;
        byte_pairs_ = pairs;
    } else if (isa == Isa::Avx2 || isa == Isa::Avx512) {   // AVX-512 without VNNI: the AVX2 tile
        static const detail::Int8TileTable avx2 = detail::make_int8_tiles(detail::kInt8Avx2Rows, 1, detail::emit_int8_tile_avx2);
        if (avx2.status != Status::Ok) return avx2.status;
        tiles_ = avx2.fn;
        mr_ = detail::kInt8Avx2Rows;
        nr_ = 8;
        a_bytes_ = 2;
        panel_loops_ = true;
    }
    if (tiles_ && isa == Isa::Avx512 && (nr_ == 32 || nr_ == 48) && detail::int8_vbmi_available()) {   // AMX's and VNNI's panels
        static const detail::Int8PackKernels pack32 = detail::make_int8_pack_kernels(32);
        static const detail::Int8PackKernels pack48 = detail::make_int8_pack_kernels(48);
        const detail::Int8PackKernels& pack = nr_ == 32 ? pack32 : pack48;
        pack_rows_ = pack.rows;
        pack_strided_ = pack.strided;
        static const InterleaveFn interleave = detail::make_int8_interleave_kernel();
        interleave_ = interleave;
    }
#elif !defined(TESSEL_NO_JIT) && defined(__aarch64__)
    if (isa == Isa::Neon && dot_products && arm_features().dot_product) {
        static const detail::Int8TileTable sdot = detail::make_int8_tiles_neon(8, detail::emit_int8_tile_sdot);
        if (sdot.status != Status::Ok) return sdot.status;
        tiles_ = sdot.fn;
        mr_ = 8;
        nr_ = 12;
        signed_b_ = true;
    } else if (isa == Isa::Neon) {   // Cortex-A53/A72 class cores: no sdot
        static const detail::Int8TileTable mull = detail::make_int8_tiles_neon(detail::kInt8NeonMullRows, detail::emit_int8_tile_neon_mull);
        if (mull.status != Status::Ok) return mull.status;
        tiles_ = mull.fn;
        mr_ = detail::kInt8NeonMullRows;
        nr_ = 12;
        signed_b_ = true;
    }
#endif
    return Status::Ok;
}

void Int8Gemm::pack_a(int64_t m, int64_t k, const int8_t* a, int64_t a_row, int8_t* packed) const {
    const int64_t groups = this->groups(k);
    if (amx_) {   // per 16 groups, mr rows of 64 bytes
        const int64_t row_bytes = group_block_ * 4;
        for (int64_t r0 = 0; r0 < m; r0 += mr_)
            for (int64_t p0 = 0; p0 < groups * 4; p0 += row_bytes)
                for (int64_t r = 0; r < mr_; ++r, packed += row_bytes)
                    for (int64_t q = 0; q < row_bytes; ++q)
                        packed[q] = r0 + r < m && p0 + q < k ? a[(r0 + r) * a_row + p0 + q] : 0;
        return;
    }
    for (int64_t r0 = 0; r0 < m; r0 += mr_) {
        if (signed_b_) {   // after the panel: 128 sum_p A[r][p], what x - 128 took away
            int8_t* sums = packed + mr_ * groups * 4;
            for (int64_t r = 0; r < mr_; ++r) {
                int32_t sum = 0;
                for (int64_t p = 0; r0 + r < m && p < k; ++p) sum += a[(r0 + r) * a_row + p];
                const int32_t correction = sum * 128;
                std::memcpy(sums + 4 * r, &correction, 4);
            }
        }
        for (int64_t g = 0; g < groups; ++g)
            for (int64_t r = 0; r < mr_; ++r, packed += 4 * a_bytes_)
                for (int64_t q = 0; q < 4; ++q) {
                    const int64_t p = g * 4 + q;
                    const int8_t v = r0 + r < m && p < k ? a[(r0 + r) * a_row + p] : 0;
                    if (a_bytes_ == 2) {   // int16, little endian
                        const int16_t wide = v;
                        std::memcpy(packed + 2 * q, &wide, 2);
                    } else {
                        packed[q] = v;
                    }
                }
        if (signed_b_) packed += mr_ * 4;
    }
}

namespace detail {
#if defined(__SSE2__)
// Columns [at, at + 16) (int8_interleave8: [at, at + 8)) of four rows, each byte ^ flip, as
// 16-byte units of 4 columns (4 bytes a column): put(u, unit) for units u in order.
template <class Put>
void int8_interleave16(const uint8_t* const* rows, int64_t at, __m128i vflip, Put&& put) {
    auto load = [&](int q) { return _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[q] + at)), vflip); };
    const __m128i r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
    const __m128i a0 = _mm_unpacklo_epi8(r0, r1), a1 = _mm_unpackhi_epi8(r0, r1);
    const __m128i b0 = _mm_unpacklo_epi8(r2, r3), b1 = _mm_unpackhi_epi8(r2, r3);
    put(0, _mm_unpacklo_epi16(a0, b0));
    put(1, _mm_unpackhi_epi16(a0, b0));
    put(2, _mm_unpacklo_epi16(a1, b1));
    put(3, _mm_unpackhi_epi16(a1, b1));
}
template <class Put>
void int8_interleave8(const uint8_t* const* rows, int64_t at, __m128i vflip, Put&& put) {
    auto load = [&](int q) { return _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[q] + at)), vflip); };
    const __m128i a = _mm_unpacklo_epi8(load(0), load(1)), b = _mm_unpacklo_epi8(load(2), load(3));
    put(0, _mm_unpacklo_epi16(a, b));
    put(1, _mm_unpackhi_epi16(a, b));
}
#endif

// dst[4 j + q] = rows[q][j] ^ flip for j < n: four rows of bytes as n units of 4 (B's groups).
inline void int8_interleave4(const uint8_t* const* rows, int64_t n, uint8_t flip, uint8_t* dst) {
    int64_t j = 0;
#if defined(__SSE2__)
    const __m128i vflip = _mm_set1_epi8((char)flip);
    auto sixteen = [&](int64_t at) {   // 16 columns of 4 rows: two rounds of unpacks
        int8_interleave16(rows, at, vflip, [&](int u, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + at * 4) + u, v); });
    };
    auto eight = [&](int64_t at) {   // 8 columns: 8-byte loads, one round of unpacks
        int8_interleave8(rows, at, vflip, [&](int u, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + at * 4) + u, v); });
    };
    for (; j + 16 <= n; j += 16) sixteen(j);
    if (j < n && n >= 16) {   // the tail: the last 16 columns again (the same bytes where they overlap)
        sixteen(n - 16);
        j = n;
    }
    if (j < n && n >= 8) {
        eight(0);
        eight(n - 8);
        j = n;
    }
#elif defined(__ARM_NEON)
    const uint8x16_t vflip = vdupq_n_u8(flip);
    for (; j + 16 <= n; j += 16) {   // vst4 interleaves four rows of 16 columns into 16 groups of 4 bytes
        uint8x16x4_t v;
        for (int q = 0; q < 4; ++q) v.val[q] = veorq_u8(vld1q_u8(rows[q] + j), vflip);
        vst4q_u8(dst + j * 4, v);
    }
#endif
    for (; j < n; ++j)
        for (int q = 0; q < 4; ++q) dst[j * 4 + q] = (uint8_t)(rows[q][j] ^ flip);
}

// One group of `panels` whole panels of nr columns: int8_interleave4 of columns [p nr, (p + 1) nr)
// into dst + p panel_bytes. One call a group and not a panel: at nr 8 (AVX2's tile) a call a
// panel spent more on the call than on its 32 bytes.
inline void int8_interleave4_panels(const uint8_t* const* rows, int64_t panels, int64_t nr, uint8_t flip, uint8_t* dst,
                                    size_t panel_bytes) {
#if defined(__SSE2__)
    if (nr % 8 == 0) {   // 16 columns a step, each 4 columns' 16 bytes to its panel
        const __m128i vflip = _mm_set1_epi8((char)flip);
        const int64_t columns = panels * nr;
        uint8_t* panel = dst;
        int64_t at = 0;   // bytes into the panel's group
        auto put = [&](int, __m128i v) {   // the next 4 columns
            _mm_storeu_si128(reinterpret_cast<__m128i*>(panel + at), v);
            at += 16;
            if (at == 4 * nr) at = 0, panel += panel_bytes;
        };
        int64_t j = 0;
        for (; j + 16 <= columns; j += 16) int8_interleave16(rows, j, vflip, put);
        if (j < columns) int8_interleave8(rows, j, vflip, put);   // 8 columns left (columns a multiple of 8)
        return;
    }
#endif
    for (int64_t p = 0; p < panels; ++p) {
        const uint8_t* at[4] = {rows[0] + p * nr, rows[1] + p * nr, rows[2] + p * nr, rows[3] + p * nr};
        int8_interleave4(at, nr, flip, dst + (size_t)p * panel_bytes);
    }
}
}  // namespace detail

void Int8Gemm::interleave4(const uint8_t* const* rows, int64_t n, uint8_t* dst) const {
    if (n < 1) return;
    if (interleave_) interleave_(rows, n, dst);
    else detail::int8_interleave4(rows, n, 0, dst);
}

void Int8Gemm::pack_b_groups(int64_t k, int64_t n, const uint8_t* b, const int64_t* group_offset, uint8_t* packed) const {
    const int64_t groups = this->groups(k), given = k / 4;
    for (int64_t j0 = 0; j0 < n; j0 += nr_) {
        const int64_t w = n - j0 < nr_ ? n - j0 : nr_;
        for (int64_t g = 0; g < groups; ++g, packed += 4 * nr_) {
            if (g >= given) {   // AMX's whole groups past K
                std::memset(packed, 0, (size_t)(4 * nr_));
                continue;
            }
            const uint8_t* src = b + group_offset[g] + 4 * j0;
            if (signed_b_)
                for (int64_t j = 0; j < 4 * w; ++j) packed[j] = (uint8_t)(src[j] ^ 0x80);
            else if (w == nr_)   // a whole panel's group (a multiple of 16 bytes): inlined 16-byte copies
                for (int64_t j = 0; j < 4 * nr_; j += 16) std::memcpy(packed + j, src + j, 16);
            else
                std::memcpy(packed, src, (size_t)(4 * w));
            if (w < nr_) std::memset(packed + 4 * w, 0, (size_t)(4 * (nr_ - w)));   // the padding columns, 0 as packed
        }
    }
}

void Int8Gemm::pack_b_rows(int64_t k, int64_t n, const uint8_t* b, int64_t b_row, const int64_t* row_offset,
                           uint8_t* packed) const {
    const int64_t groups = this->groups(k);
    const uint8_t flip = signed_b_ ? 0x80 : 0;
    // A partial panel's rows and K's missing rows read from zero-padded copies (pad: B's
    // padding, 0, flipped back by the xor), so every group takes the whole-panel loop.
    constexpr int64_t kMaxNr = 64;
    alignas(16) uint8_t pad[4][kMaxNr];
    // Without the pack kernels, the whole groups of the whole panels a group at a time.
    const int64_t whole_panels = pack_rows_ || k < 4 ? 0 : n / nr_;
    const size_t panel_bytes = (size_t)(groups * 4 * nr_);
    for (int64_t g = 0; whole_panels && g < k / 4; ++g) {
        const uint8_t* rows[4];
        for (int64_t q = 0; q < 4; ++q) rows[q] = b + (row_offset ? row_offset[4 * g + q] : (4 * g + q) * b_row);
        detail::int8_interleave4_panels(rows, whole_panels, nr_, flip, packed + g * 4 * nr_, panel_bytes);
    }
    for (int64_t j0 = 0; j0 < n; j0 += nr_) {
        const int64_t w = n - j0 < nr_ ? n - j0 : nr_;
        int64_t g = 0;
        if (j0 / nr_ < whole_panels) {   // its whole groups packed above
            g = k / 4;
            packed += g * 4 * nr_;
        } else if (w == nr_ && k >= 4 && pack_rows_) {   // the whole groups of a whole panel
            if (row_offset) pack_rows_(b + j0, row_offset, k / 4, packed);
            else pack_strided_(b + j0, b_row, k / 4, packed);
            g = k / 4;
            packed += g * 4 * nr_;
        }
        for (; g < groups; ++g, packed += 4 * nr_) {
            if (g * 4 >= k) {   // AMX's whole groups past K: zeros, as the padded rows below give
                std::memset(packed, 0, (size_t)(4 * nr_));
                continue;
            }
            const uint8_t* rows[4];
            for (int64_t q = 0, p = g * 4; q < 4; ++q, ++p) {
                const uint8_t* row = p < k ? b + (row_offset ? row_offset[p] : p * b_row) + j0 : nullptr;
                if (w == nr_ && row) {
                    rows[q] = row;
                    continue;
                }
                std::memset(pad[q], flip, (size_t)nr_);
                if (row) std::memcpy(pad[q], row, (size_t)w);
                rows[q] = pad[q];
            }
            detail::int8_interleave4(rows, nr_, flip, packed);
        }
    }
}

void Int8Gemm::pack_b_columns(int64_t k, int64_t n, const uint8_t* b, int64_t b_col, uint8_t* packed) const {
    const int64_t groups = this->groups(k), whole = k / 4, used = k_groups(k);
    const uint32_t flip = signed_b_ ? 0x80808080u : 0u;
    for (int64_t j0 = 0; j0 < n; j0 += nr_) {
        const int64_t w = n - j0 < nr_ ? n - j0 : nr_;
        // whole groups of 4 whole columns: blocks of 4 x 4 words transposed
        const int64_t quads = nr_ % 4 == 0 ? w / 4 : 0, quad_groups = whole / 4 * 4;
        for (int64_t g = 0; g < quad_groups; g += 4)
            for (int64_t q = 0; q < quads; ++q)
                detail::transpose_words4(b + (j0 + 4 * q) * b_col + g * 4, b_col, packed + g * 4 * nr_ + 16 * q, 4 * nr_, flip);
        for (int64_t g = 0; g < groups; ++g, packed += 4 * nr_)
            for (int64_t j = g < quad_groups ? 4 * quads : 0; j < nr_; ++j) {
                uint32_t v = 0;   // four consecutive bytes of a column: one word
                if (j < w && g < whole) std::memcpy(&v, b + (j0 + j) * b_col + g * 4, 4);
                else if (j < w && g < used) std::memcpy(&v, b + (j0 + j) * b_col + g * 4, (size_t)(k - g * 4));
                v = j < w && g < used ? v ^ (g < whole ? flip : flip >> (8 * (4 - (k - g * 4)))) : 0;
                std::memcpy(packed + 4 * j, &v, 4);
            }
    }
}

void Int8Gemm::run(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* packed_b,
                   const Int8Requant& rq, uint8_t* c, int64_t ldc) const {
    run_panels(m0, m1, n, k, packed_a, packed_b, nullptr, rq, c, ldc);
}

void Int8Gemm::run_groups(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* b,
                          const int64_t* group_offset, const Int8Requant& rq, uint8_t* c, int64_t ldc) const {
    run_panels(m0, m1, n, k, packed_a, b, group_offset, rq, c, ldc);
}

void Int8Gemm::run_sums(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* packed_b,
                        const int32_t* bias, int32_t* c, int64_t ldc) const {
    Int8Requant rq;
    rq.bias = bias;
    run_panels(m0, m1, n, k, packed_a, packed_b, nullptr, rq, reinterpret_cast<uint8_t*>(c), ldc, true);
}

Status Int8Gemm::prepare_sums() {
    sum_tiles_ = nullptr;
    if (amx_) return Status::Unsupported;
    if (!tiles_) return Status::Ok;   // the portable tile
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
    const detail::Int8TileTable* table = nullptr;
    if (masked_) {
        static const detail::Int8TileTable vnni = detail::make_int8_tiles(detail::kInt8VnniRows, detail::kInt8VnniVectors,
                                                                          detail::emit_int8_tile_vnni_sums);
        table = &vnni;
    } else if (a_bytes_ == 2) {
        static const detail::Int8TileTable avx2 = detail::make_int8_tiles(detail::kInt8Avx2Rows, 1, detail::emit_int8_tile_avx2_sums);
        table = &avx2;
    } else if (byte_pairs_) {
        static const detail::Int8TileTable pairs = detail::make_int8_tiles(detail::kInt8Avx2Rows, 1, detail::emit_int8_tile_pairs_sums);
        table = &pairs;
    } else {
        static const detail::Int8TileTable avx_vnni = detail::make_int8_tiles(detail::kInt8Avx2Rows, 1, detail::emit_int8_tile_avx_vnni_sums);
        table = &avx_vnni;
    }
    if (table->status != Status::Ok) return table->status;
    sum_tiles_ = table->fn;
#elif !defined(TESSEL_NO_JIT) && defined(__aarch64__)
    if (mr_ == 8) {
        static const detail::Int8TileTable sdot = detail::make_int8_tiles_neon(8, detail::emit_int8_tile_sdot_sums);
        if (sdot.status != Status::Ok) return sdot.status;
        sum_tiles_ = sdot.fn;
    } else {
        static const detail::Int8TileTable mull = detail::make_int8_tiles_neon(detail::kInt8NeonMullRows, detail::emit_int8_tile_neon_mull_sums);
        if (mull.status != Status::Ok) return mull.status;
        sum_tiles_ = mull.fn;
    }
#endif
    return Status::Ok;
}

// group_offset null: b holds packed panels; else B's groups in place (group_tiles_).
void Int8Gemm::run_panels(int64_t m0, int64_t m1, int64_t n, int64_t k, const int8_t* packed_a, const uint8_t* b,
                          const int64_t* group_offset, const Int8Requant& rq, uint8_t* c, int64_t ldc, bool sums) const {
    if (m0 >= m1 || n <= 0) return;
    const int64_t groups = this->groups(k);
    const TileFn* tiles = sums ? sum_tiles_ : group_offset ? group_tiles_ : tiles_;
    const int64_t cb = sums ? 4 : 1;   // bytes of an element of C
    auto scale_at = [&](int64_t row) { return sums ? nullptr : rq.scale + row; };   // run_sums has no scales
    TileParams params;
    params.b_groups = group_offset;
    params.lo = rq.lo;
    params.hi = rq.hi;
    params.zero_point = rq.zero_point;
    // Panels of B outer: each panel meets every A panel. Where A and B would spill L2 but B fits
    // in half of it (a conv's block against 512 x 4608 weights), rows outer instead: A is read
    // once, its panel from L1, and B again from L2 for each A panel.
    const int64_t first_row = m0 / mr_ * mr_, row_tiles = (m1 - first_row + mr_ - 1) / mr_;
    const uint64_t a_bytes = (uint64_t)row_tiles * panel_a_bytes(k), b_bytes = (uint64_t)(n * groups * 4), l2 = cpu_cache_sizes().l2;
    const bool rows_outer = a_bytes + b_bytes > l2 && b_bytes <= l2 / 2;
    // Panel j0's masks of the stored columns, its B and its tiles' offset in the table (the VNNI
    // tiles of ceil(cols / 16) vectors: a narrow panel skips the empty ones).
    int64_t cols = 0, narrow = 0;
    const uint8_t* bp = nullptr;
    auto panel = [&](int64_t j0) {
        cols = n - j0 < nr_ ? n - j0 : nr_;
        for (uint32_t v = 0; v < 3; ++v) {
            const int64_t lanes = cols - (int64_t)v * 16;
            params.mask[v] = lanes >= 16 ? 0xFFFFu : lanes <= 0 ? 0u : (1u << lanes) - 1u;
        }
        narrow = masked_ ? (cols + 15) / 16 * mr_ - mr_ : 0;
        bp = group_offset ? b + j0 * 4 : b + j0 * groups * 4;
    };
    // A panel i0 / mr against the current panel; rows before m0 (a part starting inside a
    // panel) are not stored.
    auto run_tile = [&](int64_t i0, int64_t j0) {
        const int64_t first = i0 < m0 ? m0 : i0, last = i0 + mr_ < m1 ? i0 + mr_ : m1;
        params.bias = rq.bias + first;
        params.scale = scale_at(first);
        const int8_t* ap = packed_a + (size_t)(i0 / mr_) * panel_a_bytes(k);
        uint8_t* ct = c + (first * ldc + j0) * cb;
        // the AMX tile stores params.rows rows; the others have a tile per row count
        auto tile = [&](int64_t rows) { return tiles[amx_ ? 0 : narrow + rows - 1]; };
        // a part boundary inside a panel, or a partial one: the whole panel into a buffer, 64
        // bytes a row (sums: 256, a VNNI panel's 48 int32), then its rows and columns copied out
        alignas(64) uint8_t buffer[detail::kInt8AmxRows * 64];
        const int64_t pitch = sums ? 256 : 64;
        static_assert(8 * 256 <= sizeof buffer, "a panel of the sums tiles (8 rows at most) fits");
        if (first == i0 && tiles && (masked_ || cols == nr_)) {
            params.rows = (uint32_t)(last - first);
            tile(last - first)(ap, bp, ct, ldc * cb, groups, &params);
            return;
        }
        TileParams whole = params;
        whole.bias = rq.bias + i0;
        whole.scale = scale_at(i0);
        whole.rows = (uint32_t)(last - i0);
        if (tiles) tile(last - i0)(ap, bp, buffer, pitch, groups, &whole);
        else detail::int8_portable_tile(ap, bp, buffer, pitch / cb, groups, last - i0, cols, whole, sums ? reinterpret_cast<int32_t*>(buffer) : nullptr);
        for (int64_t i = first; i < last; ++i) std::memcpy(c + (i * ldc + j0) * cb, buffer + (i - i0) * pitch, (size_t)(cols * cb));
    };
    if (panel_loops_) {
        // The tiles take a run of whole panels a call (TileParams::panels), the B a run reads at
        // most 16 KiB so that it stays in L1 for every A panel (groups x 4 x nr bytes a panel,
        // packed or in place; panels in place start nr x 4 bytes apart); the partial panel goes
        // as above.
        const int64_t whole = n / nr_, read_bytes = groups * 4 * nr_, b_panel_bytes = group_offset ? nr_ * 4 : read_bytes;
        const int64_t run = std::max<int64_t>(1, 16384 / read_bytes);
        auto run_whole = [&](int64_t i0, int64_t p0) {
            const int64_t count = std::min(run, whole - p0);
            if (i0 < m0) {   // a part starting inside the A panel: its panels one at a time
                for (int64_t p = p0; p < p0 + count; ++p) panel(p * nr_), run_tile(i0, p * nr_);
                return;
            }
            panel(p0 * nr_);
            TileParams many = params;
            const int64_t last = i0 + mr_ < m1 ? i0 + mr_ : m1;
            many.bias = rq.bias + i0;
            many.scale = scale_at(i0);
            many.panels = count;
            many.b_panel_bytes = b_panel_bytes;
            tiles[narrow + last - i0 - 1](packed_a + (size_t)(i0 / mr_) * panel_a_bytes(k), bp, c + (i0 * ldc + p0 * nr_) * cb, ldc * cb,
                                          groups, &many);
        };
        // The partial panel right after an A panel's last run, while that A panel is in L1: a
        // pass of its own read all of A again (from memory where A passes L2).
        const bool partial = whole * nr_ < n;
        auto rest = [&](int64_t i0) { panel(whole * nr_), run_tile(i0, whole * nr_); };
        if (rows_outer || whole == 0) {
            for (int64_t i0 = first_row; i0 < m1; i0 += mr_) {
                for (int64_t p0 = 0; p0 < whole; p0 += run) run_whole(i0, p0);
                if (partial) rest(i0);
            }
        } else {
            for (int64_t p0 = 0; p0 < whole; p0 += run)
                for (int64_t i0 = first_row; i0 < m1; i0 += mr_) {
                    run_whole(i0, p0);
                    if (partial && p0 + run >= whole) rest(i0);
                }
        }
        return;
    }
    if (amx_) amx_begin_();
    if (rows_outer) {
        for (int64_t i0 = first_row; i0 < m1; i0 += mr_)
            for (int64_t j0 = 0; j0 < n; j0 += nr_) panel(j0), run_tile(i0, j0);
    } else {
        for (int64_t j0 = 0; j0 < n; j0 += nr_) {
            panel(j0);
            for (int64_t i0 = first_row; i0 < m1; i0 += mr_) run_tile(i0, j0);
        }
    }
    if (amx_) amx_end_();
}

void Int8Gemm::pixel_panel(int64_t maps, int64_t m, int64_t* first, int64_t* width) const {
    if (pixel_vectors_ == 1) {
        *first = m / 16 * 16;
        *width = 16;
        return;
    }
    const int64_t padded = (maps + 15) / 16 * 16, split = padded % kPixelMaps == 16 && padded > kPixelMaps ? padded - 64 : padded;
    *first = m < split ? m / kPixelMaps * kPixelMaps : split + (m - split) / 32 * 32;
    *width = m < split ? std::min<int64_t>(kPixelMaps, split - *first) : 32;
}

bool Int8Gemm::pixels_pay(int64_t width) const {
    if (!pixel_tiles_ || width < 1) return false;
    if (pixel_rows_ == kPixelRows) return true;
    const int64_t tiles = (width + pixel_rows_ - 1) / pixel_rows_;
    return (width + tiles - 1) / tiles >= 5;
}

bool Int8Gemm::pixels_pay_one_tap(int64_t positions) const {
    if (!pixel_tiles_ || isa_ != Isa::Avx512 || amx_ || !masked_ || positions < 1) return false;
    const int64_t columns = positions / nr_ * nr_ + (positions % nr_ + 15) / 16 * 16;   // run_panels' tiles
    return columns * 4 >= positions * 5;
}

void Int8Gemm::pack_pixels(int64_t maps, int64_t k, const int8_t* a, int64_t a_row, int8_t* packed) const {
    const int64_t groups = k_groups(k);
    std::memset(packed, 0, packed_pixels_bytes(maps, k));
    for (int64_t m = 0; m < maps; ++m) {   // per group of its panel, the panel's width x 4 bytes
        int64_t p0 = 0, width = 0;
        pixel_panel(maps, m, &p0, &width);
        int8_t* dst = packed + p0 * groups * 4 + (m - p0) * 4;
        for (int64_t p = 0; p < k; ++p) dst[p / 4 * width * 4 + p % 4] = a[m * a_row + p];
    }
}

void Int8Gemm::run_pixels(int64_t maps, int64_t m0, int64_t m1, int64_t k, const int8_t* packed, const PixelRun& run,
                          const Int8Requant& rq, uint8_t* y, int64_t ldy) const {
    const int64_t groups = k_groups(k);
    TileParams params;
    params.b_groups = run.group_offset;
    params.lo = rq.lo;
    params.hi = rq.hi;
    params.zero_point = rq.zero_point;
    // Runs of panels whose W fits in a quarter of L2, each over the tiles of positions: a tile's
    // positions stay in L1 over the run's maps, and W comes from L2.
    const int64_t run_maps = std::max<int64_t>(kPixelMaps, (int64_t)(cpu_cache_sizes().l2 / 4) / (groups * 4) / kPixelMaps * kPixelMaps);
    for (int64_t r0 = m0; r0 < m1;) {
        const int64_t r1 = std::min(m1, r0 / kPixelMaps * kPixelMaps + run_maps);
        for (int64_t j = 0, row = 0, column = run.column; j < run.count;) {   // tiles within a row
            // the row's positions left in even tiles (14 as 5 + 5 + 4, not 6 + 6 + 2: a tile of
            // few positions has too few accumulators to cover vpdpbusd's latency)
            const int64_t left = std::min(run.count - j, run.width - column), tiles = (left + pixel_rows_ - 1) / pixel_rows_;
            const int64_t rows = (left + tiles - 1) / tiles;
            params.mask[0] = (1u << rows) - 1u;
            for (int64_t m = r0; m < r1;) {
                int64_t p0 = 0, width = 0;
                pixel_panel(maps, m, &p0, &width);
                // maps to the panel's or the part's end, by up to the tile's vectors
                const int64_t maps_left = std::min(p0 + width - m, r1 - m);
                const int64_t vectors = std::min<int64_t>(maps_left / 16, pixel_vectors_);
                params.bias = rq.bias + m;
                params.scale = rq.scale + m;
                params.w_group_bytes = width * 4;
                pixel_tiles_[(vectors - 1) * pixel_rows_ + rows - 1](packed + p0 * groups * 4 + (m - p0) * 4,
                                                                     run.b + 4 * (row * run.b_pitch + column),
                                                                     y + m * ldy + row * run.y_pitch + column, ldy, groups, &params);
                m += vectors * 16;
            }
            j += rows;
            column += rows;
            if (column == run.width) column = 0, ++row;
        }
        r0 = r1;
    }
}

Status Int8Gemm::prepare_pixel_sums() {
    pixel_sum_tiles_ = nullptr;
    if (!pixel_tiles_ || pixel_vectors_ != 3) return Status::Unsupported;   // AVX-512's pixel tiles only
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
    static const detail::Int8TileTable sums = detail::make_int8_tiles(detail::kInt8VnniRows, detail::kInt8VnniVectors,
                                                                      detail::emit_int8_tile_pixel_sums);
    if (sums.status != Status::Ok) return sums.status;
    pixel_sum_tiles_ = sums.fn;
    return Status::Ok;
#else
    return Status::Unsupported;
#endif
}

void Int8Gemm::run_pixel_sums(int64_t maps, int64_t m0, int64_t m1, int64_t k, const int8_t* packed, const uint8_t* b,
                              const int64_t* group_offset, int64_t count, const int32_t* bias, int32_t* y, int64_t ldy) const {
    const int64_t groups = k_groups(k);
    TileParams params;
    params.b_groups = group_offset;
    // As run_pixels: runs of panels whose W fits in a quarter of L2, each over the tiles of positions.
    const int64_t run_maps = std::max<int64_t>(kPixelMaps, (int64_t)(cpu_cache_sizes().l2 / 4) / (groups * 4) / kPixelMaps * kPixelMaps);
    for (int64_t r0 = m0; r0 < m1;) {
        const int64_t r1 = std::min(m1, r0 / kPixelMaps * kPixelMaps + run_maps);
        for (int64_t i = 0; i < count;) {
            // the positions left in even tiles (too few a tile leave vpdpbusd's latency uncovered)
            const int64_t tiles = (count - i + pixel_rows_ - 1) / pixel_rows_, rows = (count - i + tiles - 1) / tiles;
            for (int64_t m = r0; m < r1;) {
                int64_t p0 = 0, width = 0;
                pixel_panel(maps, m, &p0, &width);
                const int64_t maps_left = std::min(p0 + width - m, r1 - m);
                const int64_t vectors = std::min<int64_t>((maps_left + 15) / 16, pixel_vectors_);
                for (int64_t j = 0; j < 3; ++j) {
                    const int64_t lanes = std::max<int64_t>(0, std::min<int64_t>(16, maps_left - 16 * j));
                    params.mask[j] = lanes >= 16 ? 0xFFFFu : (1u << lanes) - 1u;
                }
                params.bias = bias + m;
                params.w_group_bytes = width * 4;
                pixel_sum_tiles_[(vectors - 1) * pixel_rows_ + rows - 1](packed + p0 * groups * 4 + (m - p0) * 4, b + 4 * i,
                                                                         reinterpret_cast<uint8_t*>(y + i * ldy + m), ldy * 4, groups,
                                                                         &params);
                m += vectors * 16;
            }
            i += rows;
        }
        r0 = r1;
    }
}

Status Int8Gemv::init(Isa isa, bool dot_products) {
    if (isa == Isa::Auto) isa = default_isa();
    kernels_ = nullptr;
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
    const detail::Int8TileTable* table = nullptr;
    bool ymm = true, vnni = true;
    if (isa == Isa::Avx512 && dot_products && int8_vnni_available()) {
        static const detail::Int8TileTable zmm = detail::make_int8_tiles((uint32_t)kRows, 1, detail::emit_int8_gemv_vnni);
        table = &zmm;
        ymm = false;
    } else if ((isa == Isa::Avx2 || isa == Isa::Avx512) && dot_products && int8_avx_vnni_available()) {
        static const detail::Int8TileTable avx_vnni = detail::make_int8_tiles((uint32_t)kRows, 1, detail::emit_int8_gemv_avx_vnni);
        table = &avx_vnni;
    } else if (isa == Isa::Avx2 || isa == Isa::Avx512) {
        static const detail::Int8TileTable avx2 = detail::make_int8_tiles(2, 1, detail::emit_int8_gemv_avx2);
        table = &avx2;
        vnni = false;
    }
    if (table) {
        if (table->status != Status::Ok) return table->status;
        kernels_ = table->fn;
        ymm_ = ymm;
        rows_per_call_ = vnni ? kRows : 2;
        for (uint32_t r = 1; r <= (uint32_t)kRows; ++r)
            columns_per_call_[r - 1] = ymm ? 8 * detail::int8_gemv_ymm_vectors(r, vnni) : kColumns;
        return Status::Ok;
    }
#endif
    (void)isa;
    (void)dot_products;
    return Status::Unsupported;
}

void Int8Gemv::pack(int64_t n, int64_t k, const int8_t* w, int64_t w_row, int8_t* packed) {
    const int64_t groups = Int8Gemm::k_groups(k), whole = k / 4, panel = kColumns * groups * 4;
    std::memset(packed, 0, packed_bytes(n, k));
    for (int64_t j = 0; j < n; ++j) {   // column j: 4 bytes per group, 64 x 4 bytes apart
        int8_t* dst = packed + j / kColumns * panel + j % kColumns * 4;
        const int8_t* src = w + j * w_row;
        for (int64_t g = 0; g < whole; ++g) std::memcpy(dst + g * kColumns * 4, src + g * 4, 4);
        if (whole < groups) std::memcpy(dst + whole * kColumns * 4, src + whole * 4, (size_t)(k - whole * 4));
    }
}

void Int8Gemv::run(int64_t panel0, int64_t panel1, int64_t rows, int64_t n, int64_t k, const int8_t* packed, const uint8_t* x,
                   const Int8Requant& rq, uint8_t* y, int64_t ldy) const {
    const int64_t groups = Int8Gemm::k_groups(k);
    Int8Gemm::TileParams params;
    params.lo = rq.lo;
    params.hi = rq.hi;
    params.zero_point = rq.zero_point;
    uint8_t tail[kRows * kColumns];   // a ymm call's rows when fewer of its columns are Y's
    for (int64_t panel = panel0; panel < panel1 && panel * kColumns < n; ++panel)
        for (int64_t r0 = 0; r0 < rows; r0 += rows_per_call_) {
            const int64_t r = rows - r0 < rows_per_call_ ? rows - r0 : rows_per_call_, width = columns_per_call_[r - 1];
            for (int64_t j0 = panel * kColumns; j0 < (panel + 1) * kColumns && j0 < n; j0 += width) {
                const int64_t cols = n - j0 < width ? n - j0 : width;
                for (uint32_t v = 0; v < 4; ++v) {   // the zmm kernel's store masks
                    const int64_t lanes = cols - (int64_t)v * 16;
                    params.mask[v] = lanes >= 16 ? 0xFFFFu : lanes <= 0 ? 0u : (1u << lanes) - 1u;
                }
                params.bias = rq.bias + j0;
                params.scale = rq.scale + j0;
                const int8_t* wp = packed + (size_t)(panel * kColumns * groups * 4 + (j0 - panel * kColumns) * 4);
                if (!ymm_ || cols == width) {
                    kernels_[r - 1](wp, x + r0 * groups * 4, y + r0 * ldy + j0, ldy, groups, &params);
                    continue;
                }
                kernels_[r - 1](wp, x + r0 * groups * 4, tail, kColumns, groups, &params);
                for (int64_t i = 0; i < r; ++i) std::memcpy(y + (r0 + i) * ldy + j0, tail + i * kColumns, (size_t)cols);
            }
        }
}


// >>int8 winograd implementation
namespace detail {
// Bytes of a padded input row in Int8WinogradF23's scratch: 2 columns a tile, the 2 the last
// tile reads past them, and the last chunk's 16-byte loads past its whole 8 tiles.
inline int64_t int8_winograd_row_bytes(int64_t tiles_x) { return (2 * Int8WinogradF23::padded_tiles(tiles_x) + 16 + 15) / 16 * 16; }

// The 16 points of one channel's 8 tiles from 4 padded rows, each at the tiles' first column
// (tile t reads columns 2 t .. 2 t + 3): point 4 i + j (i from the rows, j from the columns) at
// out + (4 i + j) pitch. By columns, each row's [d0 - d2, d1 + d2, d2 - d1, d1 - d3] from its
// even and odd bytes; then by rows, the same of the four results.
inline void int8_winograd_input_chunk(const uint8_t* const rows[4], int16_t* out, int64_t pitch) {
#if defined(__SSE2__)
    const __m128i low = _mm_set1_epi16(0x00FF);
    __m128i h[4][4];
    for (int k = 0; k < 4; ++k) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k]));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + 2));
        const __m128i e = _mm_and_si128(a, low), o = _mm_srli_epi16(a, 8), e1 = _mm_and_si128(b, low), o1 = _mm_srli_epi16(b, 8);
        h[k][0] = _mm_sub_epi16(e, e1);
        h[k][1] = _mm_add_epi16(o, e1);
        h[k][2] = _mm_sub_epi16(e1, o);
        h[k][3] = _mm_sub_epi16(o, o1);
    }
    for (int j = 0; j < 4; ++j) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j * pitch), _mm_sub_epi16(h[0][j], h[2][j]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (4 + j) * pitch), _mm_add_epi16(h[1][j], h[2][j]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (8 + j) * pitch), _mm_sub_epi16(h[2][j], h[1][j]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (12 + j) * pitch), _mm_sub_epi16(h[1][j], h[3][j]));
    }
#else
    for (int64_t t = 0; t < Int8WinogradF23::kTileColumns; ++t) {
        int16_t h[4][4];
        for (int k = 0; k < 4; ++k) {
            const uint8_t* d = rows[k] + 2 * t;
            h[k][0] = (int16_t)(d[0] - d[2]);
            h[k][1] = (int16_t)(d[1] + d[2]);
            h[k][2] = (int16_t)(d[2] - d[1]);
            h[k][3] = (int16_t)(d[1] - d[3]);
        }
        for (int j = 0; j < 4; ++j) {
            out[j * pitch + t] = (int16_t)(h[0][j] - h[2][j]);
            out[(4 + j) * pitch + t] = (int16_t)(h[1][j] + h[2][j]);
            out[(8 + j) * pitch + t] = (int16_t)(h[2][j] - h[1][j]);
            out[(12 + j) * pitch + t] = (int16_t)(h[1][j] - h[3][j]);
        }
    }
#endif
}

// 8 tiles of 4 channels (a, b, c, d: 8 int16 each) as the 16-bit tile's B group: per tile the
// 4 channels' int16, 64 bytes at v.
inline void int8_winograd_interleave(const int16_t* a, const int16_t* b, const int16_t* c, const int16_t* d, int16_t* v) {
#if defined(__SSE2__)
    auto load = [](const int16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
    const __m128i ab_lo = _mm_unpacklo_epi16(load(a), load(b)), ab_hi = _mm_unpackhi_epi16(load(a), load(b));
    const __m128i cd_lo = _mm_unpacklo_epi16(load(c), load(d)), cd_hi = _mm_unpackhi_epi16(load(c), load(d));
    __m128i* out = reinterpret_cast<__m128i*>(v);
    _mm_storeu_si128(out, _mm_unpacklo_epi32(ab_lo, cd_lo));
    _mm_storeu_si128(out + 1, _mm_unpackhi_epi32(ab_lo, cd_lo));
    _mm_storeu_si128(out + 2, _mm_unpacklo_epi32(ab_hi, cd_hi));
    _mm_storeu_si128(out + 3, _mm_unpackhi_epi32(ab_hi, cd_hi));
#else
    for (int t = 0; t < 8; ++t) {
        v[4 * t] = a[t];
        v[4 * t + 1] = b[t];
        v[4 * t + 2] = c[t];
        v[4 * t + 3] = d[t];
    }
#endif
}

// Y = A^T M A of 4 tiles (lanes) and its requantization: M's point p of the tiles at
// m + 6 p pitch (int32), their 2x2 outputs as bytes: the first n (up to 8) of row 0's (tile t's
// pixels at 2 t, 2 t + 1) at row0, of row 1's at row1 unless null. The sums are 4 y (G' = 2 G),
// shifted back before the bias.
inline void int8_winograd_output4(const int32_t* m, int64_t pitch, int32_t bias, float scale, const Int8Requant& rq, size_t n,
                                  uint8_t* row0, uint8_t* row1) {
#if defined(__SSE2__)
    __m128i p[16];
    for (int i = 0; i < 16; ++i) p[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(m + 6 * i * pitch));
    __m128i s[2][4];
    for (int j = 0; j < 4; ++j) {
        s[0][j] = _mm_add_epi32(_mm_add_epi32(p[j], p[4 + j]), p[8 + j]);
        s[1][j] = _mm_sub_epi32(_mm_sub_epi32(p[4 + j], p[8 + j]), p[12 + j]);
    }
    const __m128i bias_v = _mm_set1_epi32(bias), zero_point = _mm_set1_epi32(rq.zero_point);
    const __m128 scale_v = _mm_set1_ps(scale), lo = _mm_set1_ps(rq.lo), hi = _mm_set1_ps(rq.hi);
    auto requantize = [&](__m128i acc) {
        acc = _mm_add_epi32(_mm_srai_epi32(acc, 2), bias_v);
        __m128 f = _mm_mul_ps(_mm_cvtepi32_ps(acc), scale_v);
        f = _mm_min_ps(_mm_max_ps(f, lo), hi);
        return _mm_add_epi32(_mm_cvtps_epi32(f), zero_point);   // MXCSR's rounding: to nearest, ties to even
    };
    for (int a = 0; a < 2; ++a) {
        const __m128i y0 = requantize(_mm_add_epi32(_mm_add_epi32(s[a][0], s[a][1]), s[a][2]));
        const __m128i y1 = requantize(_mm_sub_epi32(_mm_sub_epi32(s[a][1], s[a][2]), s[a][3]));
        const __m128i words = _mm_packs_epi32(_mm_unpacklo_epi32(y0, y1), _mm_unpackhi_epi32(y0, y1));
        uint8_t* row = a == 0 ? row0 : row1;
        if (!row) break;
        if (n == 8) {
            _mm_storel_epi64(reinterpret_cast<__m128i*>(row), _mm_packus_epi16(words, words));
            continue;
        }
        alignas(16) uint8_t bytes[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(bytes), _mm_packus_epi16(words, words));
        std::memcpy(row, bytes, n);
    }
#else
    for (int t = 0; t < 4; ++t) {
        uint32_t p[16];
        for (int i = 0; i < 16; ++i) p[i] = (uint32_t)m[6 * i * pitch + t];
        for (int a = 0; a < 2; ++a) {
            uint32_t s[4];
            for (int j = 0; j < 4; ++j) s[j] = a == 0 ? p[j] + p[4 + j] + p[8 + j] : p[4 + j] - p[8 + j] - p[12 + j];
            const uint32_t y[2] = {s[0] + s[1] + s[2], s[1] - s[2] - s[3]};
            uint8_t* row = a == 0 ? row0 : row1;
            for (int64_t b = 0; b < 2; ++b)
                if (row && (size_t)(2 * t + b) < n)
                    row[2 * t + b] = int8_requantize((int32_t)y[b] >> 2, bias, scale, rq.lo, rq.hi, rq.zero_point);
        }
    }
#endif
}

#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
// int8_winograd_output4 on AVX2 for 8 tiles a vector (lanes), one map:
// void(m, point_bytes, row0, row1, groups, params): M's point p of `groups` x 8 tiles at
// m + p point_bytes, their requantized row-0 pixels (tile t's at 2 t, 2 t + 1) at row0, row-1's
// at row1, 16 bytes a group each; params' bias and scale point at the map's. Points 4 i + j at
// base i (rdi, rax, r11, rbx) + j point_bytes (0, rsi, 2 rsi, r10 = 3 rsi).
inline Status make_int8_winograd_output(Int8WinogradF23::OutputFn* fn) {
    namespace x86 = asmjit::x86;
    void* entry = nullptr;
    const Status status = assemble_jit_entries<x86::Assembler>(1, &entry, [&](x86::Assembler& a, const asmjit::Label* labels) {
        const x86::Gp base[4] = {x86::rdi, x86::rax, x86::r11, x86::rbx};
        const x86::Ymm bias = x86::ymm8, scale = x86::ymm9, hi = x86::ymm10, zero_point = x86::ymm11, least = x86::ymm12;
        const x86::Ymm t = x86::ymm13, u = x86::ymm14;
        auto point = [&](int i, int j) {
            return j == 0 ? x86::ymmword_ptr(base[i]) : j == 3 ? x86::ymmword_ptr(base[i], x86::r10) : x86::ymmword_ptr(base[i], x86::rsi, j - 1);
        };
        a.bind(labels[0]);
        a.push(x86::rbx);
        emit_int8_requant_ymm_params(a, hi, zero_point, least);
        a.mov(x86::rax, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, bias)));
        a.vpbroadcastd(bias, x86::dword_ptr(x86::rax));
        a.mov(x86::rax, x86::qword_ptr(x86::r9, (int32_t)offsetof(Int8Gemm::TileParams, scale)));
        a.vbroadcastss(scale, x86::dword_ptr(x86::rax));
        a.lea(x86::r10, x86::ptr(x86::rsi, x86::rsi, 1));
        a.lea(x86::rax, x86::ptr(x86::rdi, x86::rsi, 2));
        a.lea(x86::r11, x86::ptr(x86::rax, x86::rsi, 2));
        a.lea(x86::rbx, x86::ptr(x86::r11, x86::rsi, 2));
        const asmjit::Label loop = a.newLabel();
        a.bind(loop);
        // by rows: s0j = p[j] + p[4 + j] + p[8 + j] (ymm0-3), s1j = p[4 + j] - p[8 + j] - p[12 + j] (ymm4-7)
        for (int j = 0; j < 4; ++j) {
            const x86::Ymm s0 = x86::ymm(j), s1 = x86::ymm(4 + j);
            a.vmovdqu(t, point(1, j));
            a.vmovdqu(u, point(2, j));
            a.vpaddd(s0, t, point(0, j));
            a.vpaddd(s0, s0, u);
            a.vpsubd(s1, t, u);
            a.vpsubd(s1, s1, point(3, j));
        }
        // by columns: y0 = s0 + s1 + s2 into s0's register, y1 = s1 - s2 - s3 into s3's; then
        // requantized as int8_requantize(y >> 2, ...)
        for (int r = 0; r < 2; ++r) {
            const x86::Ymm s[4] = {x86::ymm(4 * r), x86::ymm(4 * r + 1), x86::ymm(4 * r + 2), x86::ymm(4 * r + 3)};
            a.vpsubd(t, s[1], s[2]);
            a.vpaddd(s[0], s[0], s[1]);
            a.vpaddd(s[0], s[0], s[2]);
            a.vpsubd(s[3], t, s[3]);
            for (const x86::Ymm& y : {s[0], s[3]}) {
                a.vpsrad(y, y, 2);
                a.vpaddd(y, y, bias);
                emit_int8_requant_ymm(a, y, scale, hi);
            }
            // tile t's two pixels side by side: per 128-bit lane tiles 4 h .. 4 h + 3 as int16
            a.vpunpckldq(t, s[0], s[3]);
            a.vpunpckhdq(u, s[0], s[3]);
            a.vpackssdw(s[0], t, u);
            a.vpaddsw(s[0], s[0], zero_point);
        }
        // per lane row 0's 8 bytes then row 1's; the quadwords ordered row 0's 16, row 1's 16
        a.vpackuswb(x86::ymm0, x86::ymm0, x86::ymm4);
        a.vpmaxub(x86::ymm0, x86::ymm0, least);
        a.vpermq(x86::ymm0, x86::ymm0, 0xD8);
        a.vmovdqu(x86::xmmword_ptr(x86::rdx), x86::xmm0);
        a.vextracti128(x86::xmmword_ptr(x86::rcx), x86::ymm0, 1);
        for (const x86::Gp& b : base) a.add(b, 32);
        a.add(x86::rdx, 16);
        a.add(x86::rcx, 16);
        a.sub(x86::r8, 1);
        a.jnz(loop);
        a.pop(x86::rbx);
        a.vzeroupper();
        a.ret();
    });
    if (status == Status::Ok) *fn = reinterpret_cast<Int8WinogradF23::OutputFn>(entry);
    return status;
}
#endif
}   // namespace detail

Status Int8WinogradF23::init(Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    tiles_ = nullptr;
    output_ = nullptr;
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
    if (isa == Isa::Avx2 || isa == Isa::Avx512) {
        static const detail::Int8TileTable words = detail::make_int8_tiles(detail::kInt8Avx2Rows, 1, detail::emit_int8_tile_words);
        if (words.status != Status::Ok) return words.status;
        static OutputFn output = nullptr;
        static const Status output_status = detail::make_int8_winograd_output(&output);
        if (output_status != Status::Ok) return output_status;
        tiles_ = words.fn;
        output_ = output;
    }
#endif
    return Status::Ok;
}

void Int8WinogradF23::transform_weights(int64_t maps, int64_t channels, const int8_t* w, int16_t* u) {
    static const int kG[4][3] = {{2, 0, 0}, {1, 1, 1}, {1, -1, 1}, {0, 0, 2}};   // 2 G
    const int64_t groups = Int8WinogradF23::groups(channels), panels = (maps + kMapRows - 1) / kMapRows;
    std::memset(u, 0, weights_bytes(maps, channels));
    for (int64_t m = 0; m < maps; ++m)
        for (int64_t c = 0; c < channels; ++c) {
            const int8_t* g = w + (m * channels + c) * 9;
            int t[4][3];
            for (int i = 0; i < 4; ++i)
                for (int l = 0; l < 3; ++l) t[i][l] = kG[i][0] * g[l] + kG[i][1] * g[3 + l] + kG[i][2] * g[6 + l];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    u[(((i * 4 + j) * panels + m / kMapRows) * groups + c / 4) * kMapRows * 4 + m % kMapRows * 4 + c % 4] =
                        (int16_t)(t[i][0] * kG[j][0] + t[i][1] * kG[j][1] + t[i][2] * kG[j][2]);
        }
}

size_t Int8WinogradF23::input_scratch_bytes(int64_t tiles_x, int64_t tiles) {
    return (size_t)(4 * detail::int8_winograd_row_bytes(tiles_x) + 4 * kPoints * sums_pitch(tiles) * 2);
}

void Int8WinogradF23::transform_input(const Planes& in, int64_t t0, int64_t tiles, int16_t* v, uint8_t* scratch) const {
    const int64_t tx = in.tiles_x, row_bytes = detail::int8_winograd_row_bytes(tx);
    const int64_t padded = padded_tiles(tiles), pitch = sums_pitch(tiles), panels = padded / kTileColumns;
    const int64_t groups = Int8WinogradF23::groups(in.channels), t1 = t0 + tiles;
    uint8_t* padded_rows = scratch;
    // [4 channels][16 points][pitch]: a row's last chunk runs up to 7 tiles past it, into the
    // next row's (written after) or the slack past the last
    int16_t* points = reinterpret_cast<int16_t*>(scratch + 4 * row_bytes);
    for (int64_t g = 0; g < groups; ++g) {
        for (int64_t q = 0; q < 4; ++q) {
            int16_t* out = points + q * kPoints * pitch;
            const int64_t c = 4 * g + q;
            if (c >= in.channels) {
                std::memset(out, 0, (size_t)(kPoints * pitch * 2));
                continue;
            }
            const uint8_t* plane = in.x + c * in.plane;
            for (int64_t ty = t0 / tx; ty * tx < t1; ++ty) {   // the rows of tiles the range meets
                const int64_t first = std::max(t0 - ty * tx, (int64_t)0), last = std::min(t1 - ty * tx, tx);
                const uint8_t* row_at[4];
                for (int64_t k = 0; k < 4; ++k) {
                    uint8_t* d = padded_rows + k * row_bytes;
                    const int64_t ir = 2 * ty + k - in.pad_top;
                    row_at[k] = d;
                    if (ir < 0 || ir >= in.h) {
                        std::memset(d, in.zero_point, (size_t)row_bytes);
                        continue;
                    }
                    std::memset(d, in.zero_point, (size_t)in.pad_left);
                    std::memcpy(d + in.pad_left, plane + ir * in.w, (size_t)in.w);
                    std::memset(d + in.pad_left + in.w, in.zero_point, (size_t)(row_bytes - in.pad_left - in.w));
                }
                for (int64_t x0 = first; x0 < last; x0 += kTileColumns) {
                    const uint8_t* at[4] = {row_at[0] + 2 * x0, row_at[1] + 2 * x0, row_at[2] + 2 * x0, row_at[3] + 2 * x0};
                    detail::int8_winograd_input_chunk(at, out + ty * tx + x0 - t0, pitch);
                }
            }
            for (int64_t p = 0; p < kPoints; ++p) std::memset(out + p * pitch + tiles, 0, (size_t)((padded - tiles) * 2));
        }
        for (int64_t p = 0; p < kPoints; ++p)
            for (int64_t j = 0; j < panels; ++j) {
                const int64_t at = p * pitch + j * kTileColumns, step = kPoints * pitch;
                detail::int8_winograd_interleave(points + at, points + step + at, points + 2 * step + at, points + 3 * step + at,
                                                 v + ((p * panels + j) * groups + g) * kTileColumns * 4);
            }
    }
}

void Int8WinogradF23::multiply(int64_t maps, int64_t channels, int64_t m0, int64_t rows, int64_t tiles, const int16_t* u,
                               const int16_t* v, int32_t* m) const {
    if (tiles <= 0 || rows <= 0) return;   // the tiles' panel loop runs at least once
    const int64_t groups = Int8WinogradF23::groups(channels), map_panels = (maps + kMapRows - 1) / kMapRows;
    const int64_t panels = padded_tiles(tiles) / kTileColumns, pitch = sums_pitch(tiles);
    Int8Gemm::TileParams params{};
    params.panels = panels;
    params.b_panel_bytes = groups * kTileColumns * 4 * 2;
    for (int64_t p = 0; p < kPoints; ++p) {
        const int16_t* a = u + (p * map_panels + m0 / kMapRows) * groups * kMapRows * 4;
        const int16_t* b = v + p * panels * groups * kTileColumns * 4;
        int32_t* c = m + kMapRows * p * pitch;
        if (tiles_) {
            tiles_[rows - 1](reinterpret_cast<const int8_t*>(a), reinterpret_cast<const uint8_t*>(b), reinterpret_cast<uint8_t*>(c),
                             pitch * 4, groups, &params);
            continue;
        }
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t t = 0; t < panels * kTileColumns; ++t) {
                uint32_t sum = 0;   // wraps, as vpaddd
                const int16_t* bt = b + (t / kTileColumns) * groups * kTileColumns * 4 + t % kTileColumns * 4;
                for (int64_t g = 0; g < groups; ++g)
                    for (int64_t q = 0; q < 4; ++q)
                        sum += (uint32_t)((int32_t)a[g * kMapRows * 4 + r * 4 + q] * bt[g * kTileColumns * 4 + q]);
                c[r * pitch + t] = (int32_t)sum;
            }
    }
}

void Int8WinogradF23::transform_output(const int32_t* m, int64_t m0, int64_t rows, int64_t t0, int64_t tiles, int64_t tiles_x,
                                       int64_t out_h, int64_t out_w, const Int8Requant& rq, uint8_t* y, int64_t map_stride) const {
    const int64_t pitch = sums_pitch(tiles), t1 = t0 + tiles;
    if (output_) {   // in chunks of tiles, their rows of pixels staged, then copied out by rows of tiles
        constexpr int64_t kChunk = 256;
        alignas(32) uint8_t stage[2][2 * kChunk];
        Int8Gemm::TileParams params{};
        params.lo = rq.lo;
        params.hi = rq.hi;
        params.zero_point = rq.zero_point;
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t map = m0 + r;
            uint8_t* plane = y + map * map_stride;
            params.bias = rq.bias + map;
            params.scale = rq.scale + map;
            for (int64_t c0 = t0; c0 < t1; c0 += kChunk) {
                const int64_t c1 = std::min(c0 + kChunk, t1);
                output_(m + r * pitch + (c0 - t0), kMapRows * pitch * 4, stage[0], stage[1], (c1 - c0 + 7) / 8, &params);
                for (int64_t ty = c0 / tiles_x; ty * tiles_x < c1; ++ty) {
                    const int64_t first = std::max(c0 - ty * tiles_x, (int64_t)0), last = std::min(c1 - ty * tiles_x, tiles_x);
                    const size_t n = (size_t)std::min(2 * (last - first), out_w - 2 * first), at = (size_t)(2 * (ty * tiles_x + first - c0));
                    uint8_t* row0 = plane + 2 * ty * out_w + 2 * first;
                    std::memcpy(row0, stage[0] + at, n);
                    if (2 * ty + 1 < out_h) std::memcpy(row0 + out_w, stage[1] + at, n);
                }
            }
        }
        return;
    }
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t map = m0 + r;
        uint8_t* plane = y + map * map_stride;
        for (int64_t ty = t0 / tiles_x; ty * tiles_x < t1; ++ty) {   // the rows of tiles the range meets, 4 tiles at a time
            const int64_t last = std::min(t1 - ty * tiles_x, tiles_x);
            uint8_t* row0 = plane + 2 * ty * out_w;
            uint8_t* row1 = 2 * ty + 1 < out_h ? row0 + out_w : nullptr;
            for (int64_t tx = std::max(t0 - ty * tiles_x, (int64_t)0); tx < last; tx += 4) {
                const size_t n = (size_t)std::min(2 * std::min<int64_t>(4, last - tx), out_w - 2 * tx);
                detail::int8_winograd_output4(m + r * pitch + (ty * tiles_x + tx - t0), pitch, rq.bias[map], rq.scale[map], rq, n,
                                              row0 + 2 * tx, row1 ? row1 + 2 * tx : nullptr);
            }
        }
    }
}

void Int8WinogradF23::convolve_band(const Planes& in, int64_t t0, int64_t tiles, int64_t maps, int64_t panel0, int64_t panel1,
                                    const int16_t* u, const Int8Requant& rq, int64_t out_h, int64_t out_w, uint8_t* y,
                                    int64_t map_stride, int16_t* v, int32_t* sums, uint8_t* scratch) const {
    transform_input(in, t0, tiles, v, scratch);
    for (int64_t panel = panel0; panel < panel1; ++panel) {
        const int64_t m0 = panel * kMapRows, rows = std::min(kMapRows, maps - m0);
        multiply(maps, in.channels, m0, rows, tiles, u, v, sums);
        transform_output(sums, m0, rows, t0, tiles, in.tiles_x, out_h, out_w, rq, y, map_stride);
    }
}

// >>int8 depthwise implementation
namespace detail {
constexpr int64_t kInt8DepthwiseWeightRegs = 16;   // kernel_h x groups of 4 taps, held in registers

struct Int8DepthwiseKey {
    Isa isa;
    int64_t kernel_h, groups, stride, vector_bytes, unroll;
    bool pairs = false;   // AVX2's 32-byte kernel by vpmaddubsw pairs (no AVX-VNNI; weights within [-64, 64])
    bool operator==(const Int8DepthwiseKey& o) const {
        return isa == o.isa && kernel_h == o.kernel_h && groups == o.groups && stride == o.stride &&
               vector_bytes == o.vector_bytes && unroll == o.unroll && pairs == o.pairs;
    }
};

constexpr int64_t kInt8DepthwisePlaneDots = 768;   // dot products a whole-planes kernel holds at most (code size)
constexpr int64_t kInt8DepthwiseFlatDots = 384;    // flat: the whole plane unrolled

// How the whole-planes kernel walks a plane: flat (stride 1, rows as wide as the input's: the
// plane's outputs as one row of blocks of 64) or row by row in blocks of `outputs` (64 at
// stride 1, 32 at 2); rows [loop_begin, loop_end) read no padding row and run as one loop body
// (when there are 2 or more), the others are unrolled.
struct Int8DepthwisePlanesPlan {
    bool flat = false;
    int64_t outputs = 64, blocks = 1, loop_begin = 0, loop_end = 0;
    int64_t dots = 0;   // dot products the code holds
};

inline Int8DepthwisePlanesPlan int8_depthwise_planes_plan(const DepthwiseShape& s) {
    Int8DepthwisePlanesPlan p;
    const int64_t phases = s.stride_w == 1 ? 4 : 2, taps = s.kernel_h * ((s.kernel_w + 3) / 4) * phases;
    p.outputs = s.stride_w == 1 ? 64 : 32;
    p.blocks = (s.out_w + p.outputs - 1) / p.outputs;
    const int64_t first = (s.pad_top + s.stride_h - 1) / s.stride_h;   // the first row reading no top padding
    const int64_t bottom = s.in_h - 1 + s.pad_top - (s.kernel_h - 1) * s.dilation_h;
    const int64_t end = bottom < 0 ? 0 : std::min(s.out_h, bottom / s.stride_h + 1);
    if (end - first >= 2) p.loop_begin = first, p.loop_end = end;
    const int64_t lines = s.out_h - (p.loop_end - p.loop_begin) + (p.loop_end > p.loop_begin ? 1 : 0);
    p.dots = lines * p.blocks * taps;
    if (s.stride_h == 1 && s.stride_w == 1 && s.out_w == s.in_w) {
        const int64_t flat_blocks = (s.out_h * s.out_w + 63) / 64;
        if (flat_blocks * taps <= kInt8DepthwiseFlatDots && flat_blocks <= s.out_h * p.blocks) {
            p.flat = true;
            p.blocks = flat_blocks;
            p.loop_begin = p.loop_end = 0;
            p.dots = flat_blocks * taps;
        }
    }
    return p;
}

// The byte mask of a whole-planes load of 64 bytes (byte j: lane j / 4's tap 4 g + j % 4). Row
// by row, from column col0 of an input row: the bytes inside the row.
inline uint64_t int8_planes_row_mask(const DepthwiseShape& s, int64_t col0) {
    uint64_t m = 0;
    for (int64_t j = 0; j < 64; ++j)
        if (col0 + j >= 0 && col0 + j < s.in_w) m |= 1ull << j;
    return m;
}

// Flat, block b's load for kernel row kh, group g of taps, phase r: a tap's byte where its input
// lies inside the plane (its row and column), other bytes (taps past kernel_w, outputs past the
// plane, whose values nobody reads) where they lie inside the plane's memory.
inline uint64_t int8_planes_flat_mask(const DepthwiseShape& s, int64_t b, int64_t kh, int64_t g, int64_t r) {
    const int64_t outputs = s.out_h * s.out_w, plane = s.in_h * s.in_w;
    const int64_t shift = (kh * s.dilation_h - s.pad_top) * s.in_w + r + 4 * g - s.pad_left;
    uint64_t m = 0;
    for (int64_t j = 0; j < 64; ++j) {
        const int64_t q = 64 * b + j / 4 * 4 + r, tap = 4 * g + j % 4, at = 64 * b + j + shift;
        bool inside = at >= 0 && at < plane;
        if (q < outputs && tap < s.kernel_w) {
            const int64_t ih = q / s.out_w + kh * s.dilation_h - s.pad_top, iw = q % s.out_w + tap - s.pad_left;
            inside = ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w;
        }
        if (inside) m |= 1ull << j;
    }
    return m;
}

#ifndef TESSEL_NO_JIT
#if defined(__x86_64__) || defined(_M_X64)
// Requantizes the `phases` accumulators acc(r) of one vector in place (scale, the clamp to lo
// and hi, rounding to nearest even, the zero point: in the 4 registers from `scale` on) and
// stores their bytes through `mask` (output phases i + r is byte r of lane i; stride 2 the
// lanes' low halves, through `half`, a register of half the width).
template <class Acc>
inline void emit_int8_vnni_requantize_store(asmjit::x86::Assembler& a, Acc acc, uint32_t phases, const asmjit::x86::Vec& scale,
                                            const asmjit::x86::Vec& half, const asmjit::x86::Mem& dst, const asmjit::x86::KReg& mask) {
    namespace x86 = asmjit::x86;
    x86::Vec l = scale, h = scale, z = scale;   // lo, hi, zero point
    l.setId(scale.id() + 1);
    h.setId(scale.id() + 2);
    z.setId(scale.id() + 3);
    for (uint32_t r = 0; r < phases; ++r) {
        x86::Vec v = acc(r);
        a.vcvtdq2ps(v, v);
        a.vmulps(v, v, scale);
        a.vmaxps(v, v, l);   // lo and hi are integers: clamping before rounding is the same as after
        a.vminps(v, v, h);
        a.vcvtps2dq(v, v);   // MXCSR's default rounding: to nearest, ties to even
        a.vpaddd(v, v, z);   // in [0, 255]
        if (r) a.vpslld(v, v, (uint32_t)(8 * r));
    }
    if (phases == 4) {   // output 4 i + r is byte r of lane i
        a.vpternlogd(acc(0), acc(1), acc(2), 0xFE);
        a.vpord(acc(0), acc(0), acc(3));
        a.k(mask).vmovdqu8(dst, acc(0));
    } else {             // output 2 i + r is byte r of lane i: the lanes' low halves
        a.vpord(acc(0), acc(0), acc(1));
        a.vpmovdw(half, acc(0));
        a.k(mask).vmovdqu8(dst, half);
    }
}

// The VNNI row kernel: weights in vector registers 0.., accumulators (unroll x phases) from
// 16 on (EVEX encodings), loads in 24-25, bias scale lo hi zero point in 26-30; a block of
// `unroll` vectors of vector_bytes per iteration, stores through k1-k4 (full-block masks, the
// tail's at the last block). Argument (System V): rdi Params.
inline void emit_int8_depthwise_vnni(asmjit::x86::Assembler& a, const Int8DepthwiseKey& k) {
    namespace x86 = asmjit::x86;
    using P = Int8DepthwiseConv::Params;
    const uint32_t phases = k.stride == 1 ? 4 : 2, vb = (uint32_t)k.vector_bytes, unroll = (uint32_t)k.unroll;
    const uint32_t outputs = k.stride == 1 ? vb : vb / 2;   // per vector
    auto vec = [&](uint32_t id) -> x86::Vec {
        return vb == 64 ? x86::Vec(x86::zmm(id)) : vb == 32 ? x86::Vec(x86::ymm(id)) : x86::Vec(x86::xmm(id));
    };
    auto half = [&](uint32_t id) -> x86::Vec { return vb == 64 ? x86::Vec(x86::ymm(id)) : x86::Vec(x86::xmm(id)); };
    auto acc = [&](uint32_t u, uint32_t r) { return vec(16 + u * phases + r); };
    const x86::KReg masks[4] = {x86::k1, x86::k2, x86::k3, x86::k4};
    auto load_masks = [&](int32_t offset) {
        for (uint32_t u = 0; u < unroll; ++u) a.kmovq(masks[u], x86::qword_ptr(x86::rdi, offset + (int32_t)(u * 8)));
    };
    a.mov(x86::rcx, x86::qword_ptr(x86::rdi, offsetof(P, weights)));
    for (uint32_t q = 0; q < (uint32_t)(k.kernel_h * k.groups); ++q) a.vpbroadcastd(vec(q), x86::dword_ptr(x86::rcx, (int32_t)(q * 4)));
    a.vpbroadcastd(vec(26), x86::dword_ptr(x86::rdi, offsetof(P, bias)));
    a.vbroadcastss(vec(27), x86::dword_ptr(x86::rdi, offsetof(P, scale)));
    a.vbroadcastss(vec(28), x86::dword_ptr(x86::rdi, offsetof(P, lo)));
    a.vbroadcastss(vec(29), x86::dword_ptr(x86::rdi, offsetof(P, hi)));
    a.vpbroadcastd(vec(30), x86::dword_ptr(x86::rdi, offsetof(P, zero_point)));
    a.mov(x86::r11, x86::qword_ptr(x86::rdi, offsetof(P, tap_row_step)));
    a.mov(x86::rax, x86::qword_ptr(x86::rdi, offsetof(P, x)));
    a.mov(x86::rdx, x86::qword_ptr(x86::rdi, offsetof(P, y)));
    a.mov(x86::r10, x86::qword_ptr(x86::rdi, offsetof(P, rows)));
    asmjit::Label row = a.newLabel(), block = a.newLabel(), full = a.newLabel();
    a.bind(row);
    // full blocks: every byte of the vectors' outputs
    for (uint32_t u = 0; u < unroll; ++u) {
        a.mov(x86::rcx, outputs == 64 ? ~0ull : (1ull << outputs) - 1);
        a.kmovq(masks[u], x86::rcx);
    }
    a.mov(x86::rsi, x86::rax);
    a.mov(x86::r9, x86::rdx);
    a.mov(x86::rcx, x86::qword_ptr(x86::rdi, offsetof(P, iterations)));
    a.bind(block);
    a.cmp(x86::rcx, 1);
    a.jne(full);
    load_masks(offsetof(P, tail_masks));
    a.bind(full);
    for (uint32_t u = 0; u < unroll; ++u)
        for (uint32_t r = 0; r < phases; ++r) a.vmovdqa32(acc(u, r), vec(26));
    a.mov(x86::r8, x86::rsi);
    uint32_t t = 0;
    for (int64_t kh = 0; kh < k.kernel_h; ++kh) {
        for (uint32_t g = 0; g < (uint32_t)k.groups; ++g)
            for (uint32_t u = 0; u < unroll; ++u)
                for (uint32_t r = 0; r < phases; ++r, t ^= 1) {
                    a.vmovdqu8(vec(24 + t), x86::ptr(x86::r8, (int32_t)(u * vb + r * k.stride + 4 * g)));
                    a.vpdpbusd(acc(u, r), vec(24 + t), vec((uint32_t)kh * (uint32_t)k.groups + g));
                }
        if (kh + 1 < k.kernel_h) a.add(x86::r8, x86::r11);
    }
    for (uint32_t u = 0; u < unroll; ++u)
        emit_int8_vnni_requantize_store(a, [&](uint32_t r) { return acc(u, r); }, phases, vec(27), half(24),
                                        x86::ptr(x86::r9, (int32_t)(u * outputs)), masks[u]);
    a.add(x86::rsi, (int32_t)(unroll * vb));
    a.add(x86::r9, (int32_t)(unroll * outputs));
    a.sub(x86::rcx, 1);
    a.jnz(block);
    a.add(x86::rax, x86::qword_ptr(x86::rdi, offsetof(P, x_row_step)));
    a.add(x86::rdx, x86::qword_ptr(x86::rdi, offsetof(P, y_row_step)));
    a.sub(x86::r10, 1);
    a.jnz(row);
    a.vzeroupper();
    a.ret();
}

// The AVX2 row kernels, on 256-bit vectors of 32 bytes (AVX-VNNI: vpdpbusd, the VNNI kernel's
// lanes and phases) or of 16 bytes zero-extended to int16 (k.groups: pairs of taps): lane i of
// the one loaded from column u 16 + r + 2 g (stride 1; stride 2: u 16 + 2 g) holds taps 2 g,
// 2 g + 1 of output u 16 + 2 i + r (u 8 + i), which vpmaddwd multiplies by the pair's weights
// and sums in int32. The weights as 8 copies of each group's or pair's 4 bytes; accumulators
// (unroll x phases) in ymm0-7, loads in ymm8-9, bias scale lo hi zero point in ymm10-14; every
// store whole. k.pairs: the 32-byte kernel with each vpdpbusd as emit_int8_dot_by_pairs's three
// instructions, its int16 ones in ymm15. Argument (System V): rdi Params; rbx counts a row's blocks.
inline void emit_int8_depthwise_avx2(asmjit::x86::Assembler& a, const Int8DepthwiseKey& k) {
    namespace x86 = asmjit::x86;
    using P = Int8DepthwiseConv::Params;
    const bool dot = k.vector_bytes == 32;
    const uint32_t vb = (uint32_t)k.vector_bytes, unroll = (uint32_t)k.unroll, units = (uint32_t)k.groups;
    const uint32_t phases = dot ? (k.stride == 1 ? 4 : 2) : (k.stride == 1 ? 2 : 1);
    const uint32_t outputs = k.stride == 1 ? vb : vb / 2;   // per vector
    auto acc = [&](uint32_t u, uint32_t r) { return x86::ymm(u * phases + r); };
    a.push(x86::rbx);
    a.mov(x86::rcx, x86::qword_ptr(x86::rdi, offsetof(P, weights)));
    a.vpbroadcastd(x86::ymm10, x86::dword_ptr(x86::rdi, offsetof(P, bias)));
    a.vbroadcastss(x86::ymm11, x86::dword_ptr(x86::rdi, offsetof(P, scale)));
    a.vbroadcastss(x86::ymm12, x86::dword_ptr(x86::rdi, offsetof(P, lo)));
    a.vbroadcastss(x86::ymm13, x86::dword_ptr(x86::rdi, offsetof(P, hi)));
    a.vpbroadcastd(x86::ymm14, x86::dword_ptr(x86::rdi, offsetof(P, zero_point)));
    if (k.pairs) {   // 1 in every int16
        a.vpcmpeqw(x86::ymm15, x86::ymm15, x86::ymm15);
        a.vpsrlw(x86::ymm15, x86::ymm15, 15);
    }
    a.mov(x86::r11, x86::qword_ptr(x86::rdi, offsetof(P, tap_row_step)));
    a.mov(x86::rax, x86::qword_ptr(x86::rdi, offsetof(P, x)));
    a.mov(x86::rdx, x86::qword_ptr(x86::rdi, offsetof(P, y)));
    a.mov(x86::r10, x86::qword_ptr(x86::rdi, offsetof(P, rows)));
    asmjit::Label row = a.newLabel(), block = a.newLabel();
    a.bind(row);
    a.mov(x86::rsi, x86::rax);
    a.mov(x86::r9, x86::rdx);
    a.mov(x86::rbx, x86::qword_ptr(x86::rdi, offsetof(P, iterations)));
    a.bind(block);
    for (uint32_t u = 0; u < unroll; ++u)
        for (uint32_t r = 0; r < phases; ++r) a.vmovdqa(acc(u, r), x86::ymm10);
    a.mov(x86::r8, x86::rsi);
    uint32_t t = 0;
    for (int64_t kh = 0; kh < k.kernel_h; ++kh) {
        for (uint32_t g = 0; g < units; ++g)
            for (uint32_t u = 0; u < unroll; ++u)
                for (uint32_t r = 0; r < phases; ++r, t ^= 1) {
                    const x86::Ymm v = x86::ymm(8 + t);
                    const x86::Mem w = x86::ymmword_ptr(x86::rcx, (int32_t)(((uint32_t)kh * units + g) * 32));
                    if (dot) {
                        a.vmovdqu(v, x86::ymmword_ptr(x86::r8, (int32_t)(u * vb + r * (uint32_t)k.stride + 4 * g)));
                        if (k.pairs) {
                            a.vpmaddubsw(v, v, w);
                            a.vpmaddwd(v, v, x86::ymm15);
                            a.vpaddd(acc(u, r), acc(u, r), v);
                        } else {
                            a.vex().vpdpbusd(acc(u, r), v, w);
                        }
                        continue;
                    }
                    a.vpmovzxbw(v, x86::xmmword_ptr(x86::r8, (int32_t)(u * vb + r + 2 * g)));
                    a.vpmaddwd(v, v, w);
                    a.vpaddd(acc(u, r), acc(u, r), v);
                }
        if (kh + 1 < k.kernel_h) a.add(x86::r8, x86::r11);
    }
    for (uint32_t u = 0; u < unroll; ++u) {
        for (uint32_t r = 0; r < phases; ++r) {
            const x86::Ymm v = acc(u, r);
            a.vcvtdq2ps(v, v);
            a.vmulps(v, v, x86::ymm11);
            a.vmaxps(v, v, x86::ymm12);   // lo and hi are integers: clamping before rounding is the same as after
            a.vminps(v, v, x86::ymm13);
            a.vcvtps2dq(v, v);            // MXCSR's default rounding: to nearest, ties to even
            a.vpaddd(v, v, x86::ymm14);   // in [0, 255]
        }
        const x86::Ymm v = acc(u, 0);
        for (uint32_t r = 1; r < phases; ++r) {   // output phases i + r is byte r of lane i
            a.vpslld(acc(u, r), acc(u, r), 8 * r);
            a.vpor(v, v, acc(u, r));
        }
        if (phases == 4) {
            a.vmovdqu(x86::ymmword_ptr(x86::r9, (int32_t)(u * outputs)), v);
            continue;
        }
        a.vpackusdw(v, v, v);   // the lanes' low halves, per 128-bit lane
        a.vpermq(v, v, 0x08);   // lanes 0-3 then 4-7
        if (phases == 2) {
            a.vmovdqu(x86::xmmword_ptr(x86::r9, (int32_t)(u * outputs)), v.xmm());
        } else {
            a.vpackuswb(v.xmm(), v.xmm(), v.xmm());
            a.vmovq(x86::qword_ptr(x86::r9, (int32_t)(u * outputs)), v.xmm());
        }
    }
    a.add(x86::rsi, (int32_t)(unroll * vb));
    a.add(x86::r9, (int32_t)(unroll * outputs));
    a.sub(x86::rbx, 1);
    a.jnz(block);
    a.add(x86::rax, x86::qword_ptr(x86::rdi, offsetof(P, x_row_step)));
    a.add(x86::rdx, x86::qword_ptr(x86::rdi, offsetof(P, y_row_step)));
    a.sub(x86::r10, 1);
    a.jnz(row);
    a.pop(x86::rbx);
    a.vzeroupper();
    a.ret();
}

inline Int8DepthwiseConv::KernelFn make_int8_depthwise_kernel(const Int8DepthwiseKey& k) {
    return assemble_jit_kernel<Int8DepthwiseConv::KernelFn>([&](JitAssembler& a) {
        if (k.isa == Isa::Avx2) emit_int8_depthwise_avx2(a, k);
        else emit_int8_depthwise_vnni(a, k);
    });
}

// The whole-planes kernel (AVX-512 VNNI; int8_depthwise_planes_plan): per plane the weights in
// zmm0.. (kernel_h x groups of 4 taps), bias and scale in zmm26-27; lo hi zero point in 28-30
// and x's zero point bytes in zmm31 for every plane. A vector of outputs: accumulators zmm16-19
// (the row kernel's phases) from the bias, then per kernel row, group and phase a load into
// zmm24/25 that keeps x's zero point where its mask is off (merge masking; fault-suppressed),
// or zmm31 itself for a tap wholly in the padding. Masks are immediates, k1-k6 holding the last
// six loaded, k7 the store's. Arguments (System V): rdi PlanesParams; rsi and rdx the plane's
// x and y, r8 r9 r11 its weights bias scale, rbx the planes left; the row loop: rax r10 its
// first input and output rows, r12 the rows left.
inline void emit_int8_depthwise_planes(asmjit::x86::Assembler& a, const DepthwiseShape& s) {
    namespace x86 = asmjit::x86;
    using P = Int8DepthwiseConv::PlanesParams;
    const Int8DepthwisePlanesPlan plan = int8_depthwise_planes_plan(s);
    const int64_t groups = (s.kernel_w + 3) / 4, phases = s.stride_w == 1 ? 4 : 2;
    const x86::Zmm fill = x86::zmm31, bias = x86::zmm26;
    uint64_t held[7] = {};
    bool known[7] = {};
    uint32_t victim = 0;
    auto forget = [&]() {
        for (bool& k : known) k = false;
    };
    auto mask_reg = [&](uint64_t m, bool store) {
        uint32_t i = 6;
        if (!store) {
            for (i = 0; i < 6 && !(known[i] && held[i] == m); ++i) {}
            if (i == 6) i = victim, victim = (victim + 1) % 6;
        }
        if (!known[i] || held[i] != m) {
            a.mov(x86::rcx, m);
            a.kmovq(x86::k(i + 1), x86::rcx);
            held[i] = m;
            known[i] = true;
        }
        return x86::k(i + 1);
    };
    uint32_t turn = 0;
    // One vector of outputs: source(kh, g, r, &mem) gives a load's mask (0: the tap is padding).
    auto vector = [&](auto&& source, const x86::Mem& out, int64_t count) {
        for (int64_t r = 0; r < phases; ++r) a.vmovdqa32(x86::zmm(16 + (uint32_t)r), bias);
        for (int64_t kh = 0; kh < s.kernel_h; ++kh)
            for (int64_t g = 0; g < groups; ++g)
                for (int64_t r = 0; r < phases; ++r) {
                    const x86::Zmm acc = x86::zmm(16 + (uint32_t)r), w = x86::zmm((uint32_t)(kh * groups + g));
                    x86::Mem mem;
                    const uint64_t m = source(kh, g, r, &mem);
                    if (m == 0) {
                        a.vpdpbusd(acc, fill, w);
                        continue;
                    }
                    const x86::Zmm v = x86::zmm(24 + turn);
                    turn ^= 1;
                    if (m == ~0ull) {
                        a.vmovdqu8(v, mem);
                    } else {
                        a.vmovdqa64(v, fill);
                        a.k(mask_reg(m, false)).vmovdqu8(v, mem);
                    }
                    a.vpdpbusd(acc, v, w);
                }
        emit_int8_vnni_requantize_store(a, [](uint32_t r) { return x86::zmm(16 + r); }, (uint32_t)phases, x86::zmm27,
                                        x86::ymm24, out, mask_reg(count >= 64 ? ~0ull : (1ull << count) - 1, true));
    };
    auto disp = [](int64_t d) { return (int32_t)d; };   // init keeps planes below 2^30 bytes
    // Output row oh (looped: any row of the loop, from rax and r10) of a row-by-row plan.
    auto row = [&](int64_t oh, bool looped) {
        for (int64_t b = 0; b < plan.blocks; ++b) {
            const int64_t count = std::min(plan.outputs, s.out_w - b * plan.outputs);
            const x86::Mem out = looped ? x86::ptr(x86::r10, disp(b * plan.outputs)) : x86::ptr(x86::rdx, disp(oh * s.out_w + b * plan.outputs));
            vector([&](int64_t kh, int64_t g, int64_t r, x86::Mem* mem) -> uint64_t {
                const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
                if (!looped && (ih < 0 || ih >= s.in_h)) return 0;
                const int64_t col0 = 64 * b + r * s.stride_w + 4 * g - s.pad_left;
                *mem = looped ? x86::ptr(x86::rax, disp(kh * s.dilation_h * s.in_w + col0)) : x86::ptr(x86::rsi, disp(ih * s.in_w + col0));
                return int8_planes_row_mask(s, col0);
            }, out, count);
        }
    };
    asmjit::Label plane = a.newLabel(), loop = a.newLabel();
    a.push(x86::rbx);
    a.push(x86::r12);
    a.mov(x86::rsi, x86::qword_ptr(x86::rdi, offsetof(P, x)));
    a.mov(x86::rdx, x86::qword_ptr(x86::rdi, offsetof(P, y)));
    a.mov(x86::r8, x86::qword_ptr(x86::rdi, offsetof(P, weights)));
    a.mov(x86::r9, x86::qword_ptr(x86::rdi, offsetof(P, bias)));
    a.mov(x86::r11, x86::qword_ptr(x86::rdi, offsetof(P, scale)));
    a.mov(x86::rbx, x86::qword_ptr(x86::rdi, offsetof(P, planes)));
    a.vbroadcastss(x86::zmm28, x86::dword_ptr(x86::rdi, offsetof(P, lo)));
    a.vbroadcastss(x86::zmm29, x86::dword_ptr(x86::rdi, offsetof(P, hi)));
    a.vpbroadcastd(x86::zmm30, x86::dword_ptr(x86::rdi, offsetof(P, zero_point)));
    a.vpbroadcastd(fill, x86::dword_ptr(x86::rdi, offsetof(P, x_fill)));
    a.bind(plane);
    forget();
    for (int64_t q = 0; q < s.kernel_h * groups; ++q) a.vpbroadcastd(x86::zmm((uint32_t)q), x86::dword_ptr(x86::r8, (int32_t)(q * 4)));
    a.vpbroadcastd(bias, x86::dword_ptr(x86::r9));
    a.vbroadcastss(x86::zmm27, x86::dword_ptr(x86::r11));
    if (plan.flat) {
        const int64_t outputs = s.out_h * s.out_w;
        for (int64_t b = 0; b < plan.blocks; ++b)
            vector([&](int64_t kh, int64_t g, int64_t r, x86::Mem* mem) -> uint64_t {
                *mem = x86::ptr(x86::rsi, disp(64 * b + (kh * s.dilation_h - s.pad_top) * s.in_w + r + 4 * g - s.pad_left));
                return int8_planes_flat_mask(s, b, kh, g, r);
            }, x86::ptr(x86::rdx, disp(64 * b)), std::min<int64_t>(64, outputs - 64 * b));
    } else {
        for (int64_t oh = 0; oh < plan.loop_begin; ++oh) row(oh, false);
        if (plan.loop_end > plan.loop_begin) {
            a.lea(x86::rax, x86::ptr(x86::rsi, disp((plan.loop_begin * s.stride_h - s.pad_top) * s.in_w)));
            a.lea(x86::r10, x86::ptr(x86::rdx, disp(plan.loop_begin * s.out_w)));
            a.mov(x86::r12, plan.loop_end - plan.loop_begin);
            forget();
            a.bind(loop);
            row(0, true);
            a.add(x86::rax, disp(s.stride_h * s.in_w));
            a.add(x86::r10, disp(s.out_w));
            a.sub(x86::r12, 1);
            a.jnz(loop);
        }
        for (int64_t oh = plan.loop_end > plan.loop_begin ? plan.loop_end : plan.loop_begin; oh < s.out_h; ++oh) row(oh, false);
    }
    a.add(x86::rsi, x86::qword_ptr(x86::rdi, offsetof(P, x_plane_step)));
    a.add(x86::rdx, x86::qword_ptr(x86::rdi, offsetof(P, y_plane_step)));
    a.add(x86::r8, x86::qword_ptr(x86::rdi, offsetof(P, weight_step)));
    a.add(x86::r9, 4);
    a.add(x86::r11, 4);
    a.sub(x86::rbx, 1);
    a.jnz(plane);
    a.vzeroupper();
    a.pop(x86::r12);
    a.pop(x86::rbx);
    a.ret();
}
#define TESSEL_INT8_DEPTHWISE_PLANES_JIT 1
#define TESSEL_INT8_DEPTHWISE_JIT 1
#elif defined(__aarch64__)
// The sdot row kernel: weights in v0-v15 (d8-d15 saved), accumulators in v16-v23, loads in
// v24-v25, bias scale lo hi zero point in v26-v30; 16-byte vectors, every store whole (the
// rows go to scratch first). Argument (AAPCS64): x0 Params.
inline void emit_int8_depthwise_sdot(asmjit::a64::Assembler& a, const Int8DepthwiseKey& k) {
    namespace a64 = asmjit::a64;
    using P = Int8DepthwiseConv::Params;
    const uint32_t phases = k.stride == 1 ? 4 : 2, unroll = (uint32_t)k.unroll, outputs = k.stride == 1 ? 16 : 8;
    auto acc = [&](uint32_t u, uint32_t r) { return a64::v(16 + u * phases + r); };
    auto field = [&](const a64::Vec& v, size_t offset) {   // one 32-bit field of Params in every lane
        a.add(a64::x10, a64::x0, (uint32_t)offset);
        a.ld1r(v.s4(), a64::ptr(a64::x10));
    };
    a.stp(a64::d8, a64::d9, a64::ptr_pre(a64::sp, -64));
    a.stp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
    a.stp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
    a.stp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
    a.ldr(a64::x8, a64::ptr(a64::x0, offsetof(P, weights)));
    for (uint32_t q = 0; q < (uint32_t)(k.kernel_h * k.groups); ++q) {
        a.add(a64::x10, a64::x8, q * 4);
        a.ld1r(a64::v(q).s4(), a64::ptr(a64::x10));
    }
    field(a64::v(26), offsetof(P, bias));
    field(a64::v(27), offsetof(P, scale));
    field(a64::v(28), offsetof(P, lo));
    field(a64::v(29), offsetof(P, hi));
    field(a64::v(30), offsetof(P, zero_point));
    a.ldr(a64::x9, a64::ptr(a64::x0, offsetof(P, tap_row_step)));
    a.ldr(a64::x11, a64::ptr(a64::x0, offsetof(P, x_row_step)));
    a.ldr(a64::x12, a64::ptr(a64::x0, offsetof(P, y_row_step)));
    a.ldr(a64::x1, a64::ptr(a64::x0, offsetof(P, x)));
    a.ldr(a64::x2, a64::ptr(a64::x0, offsetof(P, y)));
    a.ldr(a64::x3, a64::ptr(a64::x0, offsetof(P, rows)));
    asmjit::Label row = a.newLabel(), block = a.newLabel();
    a.bind(row);
    a.mov(a64::x4, a64::x1);
    a.mov(a64::x5, a64::x2);
    a.ldr(a64::x6, a64::ptr(a64::x0, offsetof(P, iterations)));
    a.bind(block);
    for (uint32_t u = 0; u < unroll; ++u)
        for (uint32_t r = 0; r < phases; ++r) a.mov(acc(u, r).b16(), a64::v(26).b16());
    a.mov(a64::x7, a64::x4);
    uint32_t t = 0;
    for (int64_t kh = 0; kh < k.kernel_h; ++kh) {
        for (uint32_t g = 0; g < (uint32_t)k.groups; ++g)
            for (uint32_t u = 0; u < unroll; ++u)
                for (uint32_t r = 0; r < phases; ++r, t ^= 1) {
                    a.ldur(a64::v(24 + t), a64::ptr(a64::x7, (int32_t)(u * 16 + r * k.stride + 4 * g)));
                    a.sdot(acc(u, r).s4(), a64::v(24 + t).b16(), a64::v((uint32_t)kh * (uint32_t)k.groups + g).b16());
                }
        if (kh + 1 < k.kernel_h) a.add(a64::x7, a64::x7, a64::x9);
    }
    for (uint32_t u = 0; u < unroll; ++u) {
        for (uint32_t r = 0; r < phases; ++r) {
            a64::Vec v = acc(u, r);
            a.scvtf(v.s4(), v.s4());
            a.fmul(v.s4(), v.s4(), a64::v(27).s4());
            a.fmax(v.s4(), v.s4(), a64::v(28).s4());   // no NaN here: fmax is the clamp
            a.fmin(v.s4(), v.s4(), a64::v(29).s4());
            a.fcvtns(v.s4(), v.s4());                   // to nearest, ties to even
            a.add(v.s4(), v.s4(), a64::v(30).s4());     // in [0, 255]
            if (r) a.sli(acc(u, 0).s4(), v.s4(), 8 * r);
        }
        if (phases == 4) {
            a.str(acc(u, 0), a64::ptr(a64::x5, (int32_t)(u * outputs)));
        } else {
            a.xtn(acc(u, 0).h4(), acc(u, 0).s4());
            a.str(a64::d(16 + u * phases), a64::ptr(a64::x5, (int32_t)(u * outputs)));
        }
    }
    a.add(a64::x4, a64::x4, unroll * 16);
    a.add(a64::x5, a64::x5, unroll * outputs);
    a.subs(a64::x6, a64::x6, 1);
    a.b_ne(block);
    a.add(a64::x1, a64::x1, a64::x11);
    a.add(a64::x2, a64::x2, a64::x12);
    a.subs(a64::x3, a64::x3, 1);
    a.b_ne(row);
    a.ldp(a64::d10, a64::d11, a64::ptr(a64::sp, 16));
    a.ldp(a64::d12, a64::d13, a64::ptr(a64::sp, 32));
    a.ldp(a64::d14, a64::d15, a64::ptr(a64::sp, 48));
    a.ldp(a64::d8, a64::d9, a64::ptr_post(a64::sp, 64));
    a.ret(a64::x30);
}

inline Int8DepthwiseConv::KernelFn make_int8_depthwise_kernel(const Int8DepthwiseKey& k) {
    return assemble_jit_kernel<Int8DepthwiseConv::KernelFn>([&](JitAssembler& a) { emit_int8_depthwise_sdot(a, k); });
}
#define TESSEL_INT8_DEPTHWISE_JIT 1
#endif
#endif

// Kernels made so far, by key, for the life of the process (a handful of shape classes).
using Int8DepthwiseKernelTable = JitKernelTable<Int8DepthwiseKey, Int8DepthwiseConv::KernelFn, 256>;

inline Int8DepthwiseKernelTable& int8_depthwise_kernels() {
    static Int8DepthwiseKernelTable table;
    return table;
}

// The whole-planes kernels, keyed as the float ones (DepthwisePlanesKey; AVX-512 only).
using Int8DepthwisePlanesTable = JitKernelTable<DepthwisePlanesKey, Int8DepthwiseConv::PlanesFn, 1024>;

inline Int8DepthwisePlanesTable& int8_depthwise_planes_kernels() {
    static Int8DepthwisePlanesTable table;
    return table;
}

// dst[i] = src[i] ^ flip for n bytes (no overlap). Rows of up to 128 bytes (or any with a flip)
// 16 at a time, the last 16 overlapping, shorter ones as two overlapping words: no library call
// or byte loop per narrow row.
inline void copy_narrow(uint8_t* dst, const uint8_t* src, int64_t n, uint8_t flip) {
    if (!flip && n > 128) {
        std::memcpy(dst, src, (size_t)n);
    } else if (n >= 16) {
#if defined(__SSE2__)
        const __m128i flips = _mm_set1_epi8((char)flip);
        for (int64_t i = 0;; i += 16) {
            if (i > n - 16) i = n - 16;
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                             _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)), flips));
            if (i == n - 16) break;
        }
#elif defined(__ARM_NEON)
        const uint8x16_t flips = vdupq_n_u8(flip);
        for (int64_t i = 0;; i += 16) {
            if (i > n - 16) i = n - 16;
            vst1q_u8(dst + i, veorq_u8(vld1q_u8(src + i), flips));
            if (i == n - 16) break;
        }
#else
        for (int64_t i = 0; i < n; ++i) dst[i] = src[i] ^ flip;
#endif
    } else if (n >= 4) {
        auto words = [&](auto word, int64_t size) {
            using Word = decltype(word);
            const Word flips = (Word)(flip * (Word)0x0101010101010101ull);
            Word a, b;
            std::memcpy(&a, src, (size_t)size);
            std::memcpy(&b, src + n - size, (size_t)size);
            a ^= flips, b ^= flips;
            std::memcpy(dst, &a, (size_t)size);
            std::memcpy(dst + n - size, &b, (size_t)size);
        };
        if (n >= 8) words(uint64_t(), 8);
        else words(uint32_t(), 4);
    } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = src[i] ^ flip;
    }
}

// copy_narrow over `rows` rows (src_pitch and dst_pitch bytes apart), the size class picked
// once: a small plane's rows cost a loop step each, not a call.
inline void copy_narrow_rows(uint8_t* dst, int64_t dst_pitch, const uint8_t* src, int64_t src_pitch, int64_t rows, int64_t n,
                             uint8_t flip) {
#if defined(__SSE2__)
    if (n >= 16 && n <= 128) {   // 16-byte moves, the last ending at the row's end
        const __m128i flips = _mm_set1_epi8((char)flip);
        for (int64_t r = 0; r < rows; ++r, dst += dst_pitch, src += src_pitch)
            for (int64_t i = 0;; i += 16) {
                if (i > n - 16) i = n - 16;
                _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                                 _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)), flips));
                if (i == n - 16) break;
            }
        return;
    }
#endif
    if (n >= 8 && n < 16) {   // two 8-byte words a row
        const uint64_t flips = flip * 0x0101010101010101ull;
        for (int64_t r = 0; r < rows; ++r, dst += dst_pitch, src += src_pitch) {
            uint64_t a, b;
            std::memcpy(&a, src, 8);
            std::memcpy(&b, src + n - 8, 8);
            a ^= flips, b ^= flips;
            std::memcpy(dst, &a, 8);
            std::memcpy(dst + n - 8, &b, 8);
        }
        return;
    }
    for (int64_t r = 0; r < rows; ++r, dst += dst_pitch, src += src_pitch) copy_narrow(dst, src, n, flip);
}
}  // namespace detail

Status Int8DepthwiseConv::init(const DepthwiseShape& s, Isa isa, bool dot_products, bool whole_planes, bool narrow_weights) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    byte_pairs_ = false;
    planes_kernel_ = nullptr;
    planes_sweep_ = "";
    planes_pay_ = false;
    const int64_t limit = (int64_t)1 << 24;
    const int64_t dims[] = {s.in_h, s.in_w, s.out_h, s.out_w, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w,
                            s.dilation_h, s.dilation_w};
    for (int64_t d : dims)
        if (d < 1 || d > limit) return Status::InvalidArgument;
    if (s.pad_top < 0 || s.pad_left < 0 || s.pad_top > limit || s.pad_left > limit) return Status::InvalidArgument;
    kernel_ = nullptr;
    const int64_t groups = (s.kernel_w + 3) / 4;
    if (s.stride_w > 2 || s.dilation_w != 1 || s.kernel_h * groups > detail::kInt8DepthwiseWeightRegs) return Status::Unsupported;
#ifdef TESSEL_INT8_DEPTHWISE_JIT
    const bool x86 = isa == Isa::Avx512 && dot_products && int8_vnni_available();
    const bool avx2 = !x86 && (isa == Isa::Avx2 || isa == Isa::Avx512);   // AVX-512 without VNNI: the AVX2 kernel
    // 4 taps a 32-bit lane: AVX-VNNI's vpdpbusd, or without it its sum by vpmaddubsw pairs for
    // weights within [-64, 64]; else the 16-bit kernel's 2 taps
    const bool pairs = avx2 && !(dot_products && int8_avx_vnni_available()) && narrow_weights;
    const bool avx_vnni = (avx2 && dot_products && int8_avx_vnni_available()) || pairs;
    if (!x86 && !avx2 && !(isa == Isa::Neon && dot_products && arm_features().dot_product)) return Status::Unsupported;
    if (avx2) isa = Isa::Avx2;
    // The vector width and vectors per block that compute the fewest columns past out_w; 16-byte
    // vectors cost twice per byte (512- and 256-bit VNNI sum as much per cycle), each block a little.
    // Flat (equal strides): the plane's out_h rows of flat_pitch columns as one row, output q
    // reading the copy from stride * q on (so output rows are flat_pitch apart too, the columns
    // past out_w unread), then a copy of each output row (priced at 16-byte steps).
    const int64_t phases = avx2 && !avx_vnni ? (s.stride_w == 1 ? 2 : 1) : s.stride_w == 1 ? 4 : 2;
    const bool can_flat = s.stride_h == s.stride_w;
    const int64_t flat_pitch = std::max(s.stride_w * (s.out_w - 1) + s.kernel_w, s.pad_left + s.in_w);
    int64_t best_cost = -1, best_v = 16, best_u = 1;
    bool flat = false;
    for (bool f : {false, true}) {
        if (f && (!can_flat || (double)s.out_h * (double)flat_pitch > (double)limit)) continue;
        const int64_t length = f ? (s.out_h - 1) * flat_pitch + s.out_w : s.out_w, lines = f ? 1 : s.out_h;
        for (int64_t v : {64, 32, 16}) {
            if (avx2 ? v != (avx_vnni ? 32 : 16) : !x86 && v != 16) continue;
            for (int64_t u : {4, 2, 1}) {
                if (u * phases > 8 || u * phases < 4) continue;
                const int64_t outputs = u * (s.stride_w == 1 ? v : v / 2);
                const int64_t blocks = (length + outputs - 1) / outputs;
                const int64_t cost = lines * blocks * (u * (v < 32 ? 32 : v) + 16) + (f ? s.out_h * (8 + s.out_w / 8) : 0);
                if (best_cost < 0 || cost < best_cost) best_cost = cost, best_v = v, best_u = u, flat = f;
            }
        }
    }
    const int64_t block_outputs = best_u * (s.stride_w == 1 ? best_v : best_v / 2);
    const int64_t iterations = flat ? 0 : (s.out_w + block_outputs - 1) / block_outputs;   // flat: per band
    int64_t pitch = flat_pitch;
    if (!flat) {
        pitch = std::max(iterations * best_u * best_v + 4 * groups + 4, s.pad_left + s.in_w);
        pitch = (pitch + 63) / 64 * 64;
    }
    const double rows = (double)(s.out_h - 1) * (double)s.stride_h + (double)(s.kernel_h - 1) * (double)s.dilation_h + 1;
    if (rows * (double)pitch > (double)((int64_t)1 << 40)) return Status::Unsupported;
    const int64_t wide_units = !avx2 ? 0 : avx_vnni ? groups : (s.kernel_w + 1) / 2;
    const detail::Int8DepthwiseKey key{isa, s.kernel_h, avx2 ? wide_units : groups, s.stride_w, best_v, best_u, pairs};
    KernelFn fn = detail::int8_depthwise_kernels().find_or_make(key, [&] { return detail::make_int8_depthwise_kernel(key); });
    if (!fn) return Status::Unsupported;
    shape_ = s;
    isa_ = isa;
    kernel_ = fn;
    groups_ = groups;
    wide_units_ = wide_units;
    vector_bytes_ = best_v;
    block_outputs_ = block_outputs;
    iterations_ = iterations;
    pitch_ = pitch;
    out_pitch_ = flat ? pitch : x86 ? 0 : (iterations * block_outputs + 15) / 16 * 16;
    signed_x_ = !x86 && !avx2;
    flat_ = flat;
    byte_pairs_ = pairs;
#ifdef TESSEL_INT8_DEPTHWISE_PLANES_JIT
    // every displacement of the kernel's loads and stores within 2^31
    const int64_t span = (s.pad_top + (s.kernel_h - 1) * s.dilation_h + 1) * s.in_w;
    const detail::Int8DepthwisePlanesPlan plan = detail::int8_depthwise_planes_plan(s);
    if (whole_planes && x86 && plan.dots <= detail::kInt8DepthwisePlaneDots && s.in_h * s.in_w <= ((int64_t)1 << 30) &&
        s.out_h * s.out_w <= ((int64_t)1 << 30) && span <= ((int64_t)1 << 30)) {
        planes_kernel_ = detail::int8_depthwise_planes_kernels().find_or_make(detail::DepthwisePlanesKey{Isa::Avx512, s}, [&] {
            return detail::assemble_jit_kernel<PlanesFn>([&](detail::JitAssembler& a) { detail::emit_int8_depthwise_planes(a, s); });
        });
        if (planes_kernel_) planes_sweep_ = plan.flat ? "flat" : plan.loop_end > plan.loop_begin ? "rows+loop" : "rows";
        // the row kernels' vectors in 64-byte units (their phases and dot products the same)
        const int64_t vector_cycles = s.kernel_h * groups * phases + 4 * phases;
        const int64_t row_blocks = flat ? (flat_length(s.out_h) + block_outputs - 1) / block_outputs : s.out_h * iterations;
        const int64_t row_cost = row_blocks * best_u * std::max<int64_t>(best_v, 32) / 64 * vector_cycles + 80 +
                                 (copy_bytes(s.out_h) + s.out_h * s.out_w) / 32;
        const int64_t planes_cost = (plan.flat ? plan.blocks : s.out_h * plan.blocks) * vector_cycles + 16;
        planes_pay_ = planes_kernel_ && planes_cost <= row_cost;
    }
#endif
    (void)whole_planes;
    return Status::Ok;
#else
    (void)groups;
    (void)dot_products;
    (void)whole_planes;
    (void)narrow_weights;
    return Status::Unsupported;
#endif
}

void Int8DepthwiseConv::run_planes(const uint8_t* x, uint8_t x_zero_point, const int8_t* packed_weights, const int32_t* kernel_bias,
                                   const float* scale, const Int8Requant& rq, uint8_t* y, int64_t planes) const {
    if (planes <= 0 || !planes_kernel_) return;
    PlanesParams p;
    p.x = x;
    p.y = y;
    p.weights = packed_weights;
    p.bias = kernel_bias;
    p.scale = scale;
    p.planes = planes;
    p.x_plane_step = shape_.in_h * shape_.in_w;
    p.y_plane_step = shape_.out_h * shape_.out_w;
    p.weight_step = (int64_t)packed_weights_bytes();
    p.lo = rq.lo;
    p.hi = rq.hi;
    p.zero_point = rq.zero_point;
    p.x_fill = x_zero_point * 0x01010101u;
    planes_kernel_(&p);
}

int64_t Int8DepthwiseConv::copy_bytes(int64_t rows) const {
    // flat: the last block's loads run up to stride blocks, a row less one (stride 2: the copy
    // ends at the last output row's first input row) and 4 * groups + 3 bytes past the band's
    // rows; the output rows after it start on a cache line
    const int64_t bytes = detail::depthwise_band_rows(shape_, 0, rows) * pitch_, stride = shape_.stride_w;
    return flat_ ? (bytes + stride * block_outputs_ + (stride - 1) * pitch_ + 4 * groups_ + 4 + 63) / 64 * 64 : bytes;
}

size_t Int8DepthwiseConv::scratch_bytes(int64_t rows) const {
    const int64_t out = flat_ ? (flat_length(rows) + block_outputs_ - 1) / block_outputs_ * block_outputs_ : rows * out_pitch_;
    return (size_t)(copy_bytes(rows) + out + 64);
}

void Int8DepthwiseConv::pad(const uint8_t* x, uint8_t zero_point, int64_t row0, int64_t row1, uint8_t* scratch,
                            bool borders_ready) const {
    const DepthwiseShape& s = shape_;
    const uint8_t flip = signed_x_ ? 0x80 : 0, fill = zero_point ^ flip;
    const int64_t first = row0 * s.stride_h - s.pad_top, rows = detail::depthwise_band_rows(s, row0, row1);
    if (!borders_ready) std::memset(scratch, fill, (size_t)copy_bytes(row1 - row0));
    // the band's rows inside the input: [r0, r1)
    const int64_t r0 = first < 0 ? -first : 0, r1 = std::min(rows, s.in_h - first);
    if (r1 > r0)
        detail::copy_narrow_rows(scratch + r0 * pitch_ + s.pad_left, pitch_, x + (first + r0) * s.in_w, s.in_w, r1 - r0, s.in_w, flip);
}

void Int8DepthwiseConv::pack_weights(const int8_t* w, int8_t* packed) const {
    if (wide_units_) {   // per group of 4 taps (vector_bytes_ 32) or pair of taps as int16, 8 copies
        const int64_t taps = vector_bytes_ == 32 ? 4 : 2;
        for (int64_t kh = 0; kh < shape_.kernel_h; ++kh)
            for (int64_t g = 0; g < wide_units_; ++g)
                for (int lane = 0; lane < 8; ++lane)
                    for (int64_t t = taps * g; t < taps * (g + 1); ++t) {
                        const int8_t v = t < shape_.kernel_w ? w[kh * shape_.kernel_w + t] : 0;
                        if (taps == 4) {
                            *packed++ = v;
                        } else {
                            const int16_t wide = v;
                            std::memcpy(packed, &wide, 2);
                            packed += 2;
                        }
                    }
        return;
    }
    for (int64_t kh = 0; kh < shape_.kernel_h; ++kh)
        for (int64_t t = 0; t < groups_ * 4; ++t) *packed++ = t < shape_.kernel_w ? w[kh * shape_.kernel_w + t] : 0;
}

int32_t Int8DepthwiseConv::kernel_bias(int32_t bias, int32_t zero_point, int64_t weight_sum) const {
    const int64_t offset = signed_x_ ? 128 - zero_point : -zero_point;
    return (int32_t)((uint32_t)bias + (uint32_t)(offset * weight_sum));
}

void Int8DepthwiseConv::run_rows(uint8_t* scratch, const int8_t* packed_weights, int32_t kernel_bias, float scale,
                                 const Int8Requant& rq, uint8_t* y, int64_t row0, int64_t row1) const {
    if (row1 <= row0 || !kernel_) return;
    const DepthwiseShape& s = shape_;
    Params p;
    p.x = scratch;
    p.x_row_step = s.stride_h * pitch_;
    p.tap_row_step = s.dilation_h * pitch_;
    uint8_t* out = scratch + copy_bytes(row1 - row0);
    p.y = out_pitch_ ? out : y + row0 * s.out_w;
    p.y_row_step = out_pitch_ ? out_pitch_ : s.out_w;
    p.rows = flat_ ? 1 : row1 - row0;
    p.iterations = flat_ ? (flat_length(row1 - row0) + block_outputs_ - 1) / block_outputs_ : iterations_;
    p.weights = packed_weights;
    p.bias = kernel_bias;
    p.scale = scale;
    p.lo = rq.lo;
    p.hi = rq.hi;
    p.zero_point = rq.zero_point;
    const int64_t outputs = s.stride_w == 1 ? vector_bytes_ : vector_bytes_ / 2;   // per vector
    for (int64_t u = 0; u < 4; ++u) {   // flat: every block whole (scratch_bytes holds them)
        int64_t lanes = flat_ ? outputs : s.out_w - (iterations_ - 1) * block_outputs_ - u * outputs;
        if (lanes > outputs) lanes = outputs;
        p.tail_masks[u] = lanes >= 64 ? ~0ull : lanes <= 0 ? 0ull : (1ull << lanes) - 1;
    }
    kernel_(&p);
    if (out_pitch_)
        detail::copy_narrow_rows(y + row0 * s.out_w, s.out_w, out, out_pitch_, row1 - row0, s.out_w, 0);
}

// >>int8 lookup implementation
namespace detail {
inline void int8_lookup_portable(const uint8_t* t, const uint8_t* x, uint8_t* y, int64_t n) {
    int64_t e = 0;
    for (; e + 8 <= n; e += 8) {   // 8 bytes per load and store
        uint64_t v;
        std::memcpy(&v, x + e, 8);
        const uint64_t r = (uint64_t)t[v & 255] | (uint64_t)t[(v >> 8) & 255] << 8 | (uint64_t)t[(v >> 16) & 255] << 16 |
                           (uint64_t)t[(v >> 24) & 255] << 24 | (uint64_t)t[(v >> 32) & 255] << 32 |
                           (uint64_t)t[(v >> 40) & 255] << 40 | (uint64_t)t[(v >> 48) & 255] << 48 | (uint64_t)t[v >> 56] << 56;
        std::memcpy(y + e, &r, 8);
    }
    for (; e < n; ++e) y[e] = t[x[e]];
}

#ifndef TESSEL_NO_JIT
#if defined(__x86_64__) || defined(_M_X64)
inline bool int8_vbmi_available() {
    __builtin_cpu_init();
    return isa_available(Isa::Avx512) && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
}

// The VBMI lookups' loop over rcx bytes of x (rsi), y (rdx) y_bytes a byte of x: 64 bytes a
// step, loaded into `in`, then step() and store(masked); the last partial step's loads and
// stores through k2 (store(true)). Ends with ret.
template <class Step, class Store>
inline void emit_int8_vbmi_loop(asmjit::x86::Assembler& a, const asmjit::x86::Zmm& in, int32_t y_bytes, Step&& step, Store&& store) {
    namespace x86 = asmjit::x86;
    asmjit::Label loop = a.newLabel(), tail = a.newLabel(), done = a.newLabel();
    a.cmp(x86::rcx, 64);
    a.jb(tail);
    a.bind(loop);
    a.vmovdqu8(in, x86::ptr(x86::rsi));
    step();
    store(false);
    a.add(x86::rsi, 64);
    a.add(x86::rdx, 64 * y_bytes);
    a.sub(x86::rcx, 64);
    a.cmp(x86::rcx, 64);
    a.jae(loop);
    a.bind(tail);
    a.test(x86::rcx, x86::rcx);
    a.jz(done);
    a.mov(x86::eax, 1);
    a.shl(x86::rax, x86::cl);   // rcx < 64
    a.sub(x86::rax, 1);
    a.kmovq(x86::k2, x86::rax);
    a.k(x86::k2).z().vmovdqu8(in, x86::ptr(x86::rsi));
    step();
    store(true);
    a.bind(done);
    a.vzeroupper();
    a.ret();
}

// rdi table, rsi x, rdx y, rcx n (System V). zmm0-3 the table.
inline void emit_int8_lookup_vbmi(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    for (uint32_t i = 0; i < 4; ++i) a.vmovdqu8(x86::zmm(i), x86::ptr(x86::rdi, (int32_t)(64 * i)));
    emit_int8_vbmi_loop(a, x86::zmm4, 1, [&]() {   // zmm4: indices -> zmm5: table bytes
        a.vmovdqa64(x86::zmm5, x86::zmm4);
        a.vpermi2b(x86::zmm5, x86::zmm0, x86::zmm1);   // bytes 0..127 by the index's low 7 bits
        a.vpmovb2m(x86::k1, x86::zmm4);
        a.vpermi2b(x86::zmm4, x86::zmm2, x86::zmm3);   // bytes 128..255
        a.k(x86::k1).vmovdqu8(x86::zmm5, x86::zmm4);
    }, [&](bool masked) {
        if (masked) a.k(x86::k2).vmovdqu8(x86::ptr(x86::rdx), x86::zmm5);
        else a.vmovdqu8(x86::ptr(x86::rdx), x86::zmm5);
    });
}

// rdi table, rsi x, rdx y, rcx n (a positive multiple of 32; System V). AVX2's vpshufb looks up
// 16 bytes by an index's low 4 bits, or gives 0 when its bit 7 is set. Each half of the table
// is 8 rows of 16: the index (its half's bytes as int8, the other half's negative) minus 16 i
// with signed saturation is non-negative only for rows i <= its row, so the XOR of row i ^ row
// i - 1 looked up over i = 0..7 leaves its row's byte. The rows so XORed wait on the stack.
inline void emit_int8_byte_lookup_avx2(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    a.mov(x86::r8, x86::rsp);
    a.sub(x86::rsp, 512);
    a.and_(x86::rsp, -32);
    for (int32_t i = 0; i < 16; ++i) {
        a.vbroadcasti128(x86::ymm0, x86::xmmword_ptr(x86::rdi, 16 * i));
        if (i % 8) {
            a.vbroadcasti128(x86::ymm1, x86::xmmword_ptr(x86::rdi, 16 * (i - 1)));
            a.vpxor(x86::ymm0, x86::ymm0, x86::ymm1);
        }
        a.vmovdqa(x86::ymmword_ptr(x86::rsp, 32 * i), x86::ymm0);
    }
    a.mov(x86::eax, 0x10101010);
    a.vmovd(x86::xmm14, x86::eax);
    a.vpbroadcastd(x86::ymm14, x86::xmm14);
    a.mov(x86::eax, 0x80808080);
    a.vmovd(x86::xmm15, x86::eax);
    a.vpbroadcastd(x86::ymm15, x86::xmm15);
    asmjit::Label loop = a.newLabel();
    a.bind(loop);
    a.vmovdqu(x86::ymm0, x86::ymmword_ptr(x86::rsi));   // the low half's index
    a.vpxor(x86::ymm1, x86::ymm0, x86::ymm15);          // the high half's
    for (int32_t i = 0; i < 16; ++i) {
        const x86::Ymm index = i < 8 ? x86::ymm0 : x86::ymm1;
        if (i % 8) a.vpsubsb(index, index, x86::ymm14);
        a.vmovdqa(x86::ymm3, x86::ymmword_ptr(x86::rsp, 32 * i));
        if (i == 0) {
            a.vpshufb(x86::ymm2, x86::ymm3, index);
        } else {
            a.vpshufb(x86::ymm3, x86::ymm3, index);
            a.vpxor(x86::ymm2, x86::ymm2, x86::ymm3);
        }
    }
    a.vmovdqu(x86::ymmword_ptr(x86::rdx), x86::ymm2);
    a.add(x86::rsi, 32);
    a.add(x86::rdx, 32);
    a.sub(x86::rcx, 32);
    a.jnz(loop);
    a.mov(x86::rsp, x86::r8);
    a.vzeroupper();
    a.ret();
}
#define TESSEL_INT8_LOOKUP_JIT 1
#elif defined(__aarch64__)
// x0 table, x1 x, x2 y, x3 n (a positive multiple of 16; AAPCS64). The table in v16-v31 (no
// callee-saved registers): tbl looks up the first quarter, then tbx each next one on the index
// minus 64 (out-of-range lanes keep their byte).
inline void emit_int8_lookup_tbl(asmjit::a64::Assembler& a) {
    namespace a64 = asmjit::a64;
    for (uint32_t i = 0; i < 16; ++i) a.ldr(a64::v(16 + i), a64::ptr(a64::x0, (int32_t)(16 * i)));
    a.movi(a64::v(4).b16(), 64);
    asmjit::Label loop = a.newLabel();
    a.bind(loop);
    a.ldr(a64::v(0), a64::ptr(a64::x1));
    a.tbl(a64::v(1).b16(), a64::v(16).b16(), a64::v(17).b16(), a64::v(18).b16(), a64::v(19).b16(), a64::v(0).b16());
    for (uint32_t quarter = 1; quarter < 4; ++quarter) {
        const uint32_t r = 16 + 4 * quarter;
        a.sub(a64::v(0).b16(), a64::v(0).b16(), a64::v(4).b16());
        a.tbx(a64::v(1).b16(), a64::v(r).b16(), a64::v(r + 1).b16(), a64::v(r + 2).b16(), a64::v(r + 3).b16(), a64::v(0).b16());
    }
    a.str(a64::v(1), a64::ptr(a64::x2));
    a.add(a64::x1, a64::x1, 16);
    a.add(a64::x2, a64::x2, 16);
    a.subs(a64::x3, a64::x3, 16);
    a.b_ne(loop);
    a.ret(a64::x30);
}
#define TESSEL_INT8_LOOKUP_JIT 1
#endif
#endif

#ifdef TESSEL_INT8_LOOKUP_JIT
// The one kernel per target, made on first use (nullptr if it could not be).
inline Int8Lookup::KernelFn int8_lookup_kernel() {
    static const Int8Lookup::KernelFn fn = assemble_jit_kernel<Int8Lookup::KernelFn>([](JitAssembler& a) {
#if defined(__aarch64__)
        emit_int8_lookup_tbl(a);
#else
        emit_int8_lookup_vbmi(a);
#endif
    });
    return fn;
}
#if !defined(__aarch64__)
inline Int8Lookup::KernelFn int8_lookup_avx2_kernel() {
    static const Int8Lookup::KernelFn fn =
        assemble_jit_kernel<Int8Lookup::KernelFn>([](JitAssembler& a) { emit_int8_byte_lookup_avx2(a); });
    return fn;
}
#endif
#endif
}  // namespace detail

Status Int8Lookup::init(Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    isa_ = isa;
    kernel_ = nullptr;
    block_ = 1;
#ifdef TESSEL_INT8_LOOKUP_JIT
#if defined(__aarch64__)
    if (isa == Isa::Neon) kernel_ = detail::int8_lookup_kernel(), block_ = 16;
#else
    if (isa == Isa::Avx512 && detail::int8_vbmi_available()) kernel_ = detail::int8_lookup_kernel();
    else if (isa == Isa::Avx2 || isa == Isa::Avx512) kernel_ = detail::int8_lookup_avx2_kernel(), block_ = 32;
#endif
#endif
    return Status::Ok;
}

void Int8Lookup::run(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) const {
    if (n < 1) return;
    int64_t done = 0;
    if (kernel_) {
        done = block_ > 1 ? n / block_ * block_ : n;
        if (done > 0) kernel_(table, x, y, done);
    }
    if (done < n) detail::int8_lookup_portable(table, x + done, y + done, n - done);
}

void Int8Lookup::run_portable(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
    if (n > 0) detail::int8_lookup_portable(table, x, y, n);
}

// >>int8 max taps implementation
namespace detail {
#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
// rdi: the Int8MaxTapsArgs (System V). Per plane (r12 x, r13 y, r14 planes left: saved and
// restored), row (r8 x, r9 y, r10 rows left) and step of 64
// outputs (rsi x, rdx y, rcx outputs left): each tap (rax, r11 taps left) loaded, or at stride 2
// its 128 bytes and their even bytes taken by vpermt2b (zmm31: 0, 2, ..., 126); the maximum
// from 0, uint8's least value. Whole steps load and store plainly (but a stride-2 tap's byte
// 127, k4); the last partial step through masks: k1 its outputs, k2 and k3 its taps' bytes.
// The kernels' plane and row loops around row(row_done), which takes the row's outputs from
// rsi into rdx (rcx of them) and ends at row_done; r12-r14 saved and restored.
template <class Row>
void emit_int8_max_taps_loops(asmjit::x86::Assembler& a, Row&& row) {
    namespace x86 = asmjit::x86;
    auto arg = [&](size_t offset) { return x86::qword_ptr(x86::rdi, (int32_t)offset); };
    asmjit::Label planes = a.newLabel(), rows = a.newLabel(), row_done = a.newLabel();
    a.push(x86::r12);
    a.push(x86::r13);
    a.push(x86::r14);
    a.mov(x86::r12, arg(offsetof(Int8MaxTapsArgs, x)));
    a.mov(x86::r13, arg(offsetof(Int8MaxTapsArgs, y)));
    a.mov(x86::r14, arg(offsetof(Int8MaxTapsArgs, planes)));
    a.bind(planes);
    a.mov(x86::r8, x86::r12);
    a.mov(x86::r9, x86::r13);
    a.mov(x86::r10, arg(offsetof(Int8MaxTapsArgs, rows)));
    a.bind(rows);
    a.mov(x86::rsi, x86::r8);
    a.mov(x86::rdx, x86::r9);
    a.mov(x86::rcx, arg(offsetof(Int8MaxTapsArgs, n)));
    row(row_done);
    a.bind(row_done);
    a.add(x86::r8, arg(offsetof(Int8MaxTapsArgs, x_row)));
    a.add(x86::r9, arg(offsetof(Int8MaxTapsArgs, y_row)));
    a.sub(x86::r10, 1);
    a.jnz(rows);
    a.add(x86::r12, arg(offsetof(Int8MaxTapsArgs, x_plane)));
    a.add(x86::r13, arg(offsetof(Int8MaxTapsArgs, y_plane)));
    a.sub(x86::r14, 1);
    a.jnz(planes);
    a.pop(x86::r14);
    a.pop(x86::r13);
    a.pop(x86::r12);
    a.vzeroupper();
    a.ret();
}

inline void emit_int8_max_taps(asmjit::x86::Assembler& a, int64_t stride) {
    namespace x86 = asmjit::x86;
    auto arg = [&](size_t offset) { return x86::qword_ptr(x86::rdi, (int32_t)offset); };
    asmjit::Label vectors = a.newLabel(), last = a.newLabel(), even = a.newLabel(), rest = a.newLabel();
    if (stride == 2) {
        a.vmovdqu8(x86::zmm31, x86::ptr(even));
        a.mov(x86::rax, (uint64_t)0x7FFFFFFFFFFFFFFFull);
        a.kmovq(x86::k4, x86::rax);
    }
    auto vector = [&](bool masked) {   // the taps of 64 outputs (masked: rcx of them) into zmm0, stored
        asmjit::Label taps = a.newLabel();
        a.vpxord(x86::zmm0, x86::zmm0, x86::zmm0);
        a.mov(x86::rax, x86::rsi);
        a.mov(x86::r11, arg(offsetof(Int8MaxTapsArgs, taps)));
        a.bind(taps);
        if (stride == 1) {
            if (masked) a.k(x86::k1).z().vmovdqu8(x86::zmm1, x86::ptr(x86::rax));
            else a.vmovdqu8(x86::zmm1, x86::ptr(x86::rax));
        } else {
            if (masked) a.k(x86::k2).z().vmovdqu8(x86::zmm1, x86::ptr(x86::rax));
            else a.vmovdqu8(x86::zmm1, x86::ptr(x86::rax));
            a.k(masked ? x86::k3 : x86::k4).z().vmovdqu8(x86::zmm2, x86::ptr(x86::rax, 64));
            a.vpermt2b(x86::zmm1, x86::zmm31, x86::zmm2);
        }
        a.vpmaxub(x86::zmm0, x86::zmm0, x86::zmm1);
        a.add(x86::rax, arg(offsetof(Int8MaxTapsArgs, step)));
        a.sub(x86::r11, 1);
        a.jnz(taps);
        if (masked) a.k(x86::k1).vmovdqu8(x86::ptr(x86::rdx), x86::zmm0);
        else a.vmovdqu8(x86::ptr(x86::rdx), x86::zmm0);
    };
    emit_int8_max_taps_loops(a, [&](asmjit::Label row_done) {
        a.bind(vectors);
        a.cmp(x86::rcx, 64);
        a.jb(last);
        vector(false);
        a.add(x86::rsi, 64 * stride);
        a.add(x86::rdx, 64);
        a.sub(x86::rcx, 64);
        a.jmp(vectors);
        a.bind(last);
        a.test(x86::rcx, x86::rcx);
        a.jz(row_done);
        a.mov(x86::rax, -1);
        a.bzhi(x86::rax, x86::rax, x86::rcx);   // the last outputs' lanes
        a.kmovq(x86::k1, x86::rax);
        if (stride == 2) {   // the bytes 0 .. 2 m - 2 of m < 64 outputs: k2 the first 64, k3 the rest
            a.lea(x86::r11, x86::ptr(x86::rcx, x86::rcx, 0, -1));
            a.mov(x86::rax, -1);
            a.bzhi(x86::rax, x86::rax, x86::r11);   // an index of 64 or more keeps every bit
            a.kmovq(x86::k2, x86::rax);
            a.sub(x86::r11, 64);
            a.mov(x86::rax, -1);
            a.bzhi(x86::rax, x86::rax, x86::r11);
            a.test(x86::r11, x86::r11);
            a.jns(rest);
            a.xor_(x86::eax, x86::eax);             // none past the first 64
            a.bind(rest);
            a.kmovq(x86::k3, x86::rax);
        }
        vector(true);
    });
    if (stride == 2) {
        a.align(asmjit::AlignMode::kData, 64);
        a.bind(even);
        uint8_t lanes[64];
        for (int l = 0; l < 64; ++l) lanes[l] = (uint8_t)(2 * l);
        a.embed(lanes, sizeof lanes);
    }
}

// The AVX2 kernel: as the AVX-512 one, 32 outputs a step (16, 8 or 1 when a row has fewer), a
// row's last partial step done again as a whole one ending at its last output (the same bytes
// rewritten), so no load reads past the taps. At stride 2 a step's taps load from 2 j and
// 2 j + 31 (2 j + 15, 2 j + 7): the first load's even bytes and the second's odd ones, placed by
// vpshufb into alternate qwords (ymm14-15, xmm12-13) and joined by vpor, vpermq 0xD8 in order.
inline void emit_int8_max_taps_ymm(asmjit::x86::Assembler& a, int64_t stride) {
    namespace x86 = asmjit::x86;
    auto arg = [&](size_t offset) { return x86::qword_ptr(x86::rdi, (int32_t)offset); };
    asmjit::Label masks = a.newLabel();
    asmjit::Label widths[4] = {a.newLabel(), a.newLabel(), a.newLabel(), a.newLabel()};   // 32, 16, 8, 1
    if (stride == 2) {
        a.vmovdqu(x86::ymm14, x86::ptr(masks));
        a.vmovdqu(x86::ymm15, x86::ptr(masks, 32));
        a.vmovdqu(x86::xmm12, x86::ptr(masks, 64));
        a.vmovdqu(x86::xmm13, x86::ptr(masks, 80));
    }
    auto load = [&](const x86::Vec& v, int64_t width, int32_t offset) {
        if (width == 32) a.vmovdqu(v.as<x86::Ymm>(), x86::ptr(x86::rax, offset));
        else if (width == 16) a.vmovdqu(v.as<x86::Xmm>(), x86::ptr(x86::rax, offset));
        else if (width == 8) a.vmovq(v.as<x86::Xmm>(), x86::ptr(x86::rax, offset));
        else a.vpinsrb(v.as<x86::Xmm>(), v.as<x86::Xmm>(), x86::byte_ptr(x86::rax, offset), 0);
    };
    auto step = [&](int64_t width) {   // the taps of `width` outputs from rsi into rdx
        const bool y = width == 32;
        const x86::Vec m = y ? x86::Vec(x86::ymm0) : x86::Vec(x86::xmm0), v1 = y ? x86::Vec(x86::ymm1) : x86::Vec(x86::xmm1),
                       v2 = y ? x86::Vec(x86::ymm2) : x86::Vec(x86::xmm2);
        asmjit::Label taps = a.newLabel();
        a.vpxor(m, m, m);
        a.mov(x86::rax, x86::rsi);
        a.mov(x86::r11, arg(offsetof(Int8MaxTapsArgs, taps)));
        a.bind(taps);
        load(v1, width, 0);
        if (stride == 2 && width > 1) {
            load(v2, width, (int32_t)(width - 1));
            a.vpshufb(v1, v1, width == 32 ? x86::Vec(x86::ymm14) : width == 16 ? x86::Vec(x86::xmm14) : x86::Vec(x86::xmm12));
            a.vpshufb(v2, v2, width == 32 ? x86::Vec(x86::ymm15) : width == 16 ? x86::Vec(x86::xmm15) : x86::Vec(x86::xmm13));
            a.vpor(v1, v1, v2);
        }
        a.vpmaxub(m, m, v1);
        a.add(x86::rax, arg(offsetof(Int8MaxTapsArgs, step)));
        a.sub(x86::r11, 1);
        a.jnz(taps);
        if (width == 32) {
            if (stride == 2) a.vpermq(x86::ymm0, x86::ymm0, 0xD8);
            a.vmovdqu(x86::ptr(x86::rdx), x86::ymm0);
        } else if (width == 16) {
            a.vmovdqu(x86::ptr(x86::rdx), x86::xmm0);
        } else if (width == 8) {
            a.vmovq(x86::ptr(x86::rdx), x86::xmm0);
        } else {
            a.vpextrb(x86::byte_ptr(x86::rdx), x86::xmm0, 0);
        }
    };
    emit_int8_max_taps_loops(a, [&](asmjit::Label row_done) {
        a.cmp(x86::rcx, 32);
        a.jae(widths[0]);
        a.cmp(x86::rcx, 16);
        a.jae(widths[1]);
        a.cmp(x86::rcx, 8);
        a.jae(widths[2]);
        a.jmp(widths[3]);
        for (int w = 0; w < 4; ++w) {
            const int64_t width = w == 3 ? 1 : 32 >> w;
            asmjit::Label loop = a.newLabel(), tail = a.newLabel();
            a.bind(widths[w]);
            a.bind(loop);
            a.cmp(x86::rcx, width);
            a.jb(tail);
            step(width);
            a.add(x86::rsi, width * stride);
            a.add(x86::rdx, width);
            a.sub(x86::rcx, width);
            a.jmp(loop);
            a.bind(tail);
            if (width > 1) {   // rcx outputs left (fewer than width, at least width before them): the row's last width again
                a.test(x86::rcx, x86::rcx);
                a.jz(row_done);
                a.mov(x86::rax, width);
                a.sub(x86::rax, x86::rcx);
                a.sub(x86::rdx, x86::rax);
                if (stride == 2) a.add(x86::rax, x86::rax);
                a.sub(x86::rsi, x86::rax);
                step(width);
            }
            if (w < 3) a.jmp(row_done);   // the last width falls through to it
        }
    });
    if (stride == 2) {   // per 16 bytes: the even bytes to the low qword; the odd ones to the high; the same for 8 bytes
        uint8_t table[96];
        for (int l = 0; l < 16; ++l) {
            table[l] = table[16 + l] = (uint8_t)(l < 8 ? 2 * l : 0x80);
            table[32 + l] = table[48 + l] = (uint8_t)(l < 8 ? 0x80 : 2 * (l - 8) + 1);
            table[64 + l] = (uint8_t)(l < 4 ? 2 * l : 0x80);
            table[80 + l] = (uint8_t)(l >= 4 && l < 8 ? 2 * (l - 4) + 1 : 0x80);
        }
        a.align(asmjit::AlignMode::kData, 32);
        a.bind(masks);
        a.embed(table, sizeof table);
    }
}

inline bool int8_max_taps_available(int64_t stride) {
    __builtin_cpu_init();
    return isa_available(Isa::Avx512) && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("bmi2") &&
           (stride == 1 || __builtin_cpu_supports("avx512vbmi"));
}

// The one kernel per stride and width (zmm: AVX-512, else AVX2), made on first use (nullptr if it could not be).
inline Int8MaxTaps::KernelFn int8_max_taps_kernel(int64_t stride, bool zmm) {
    static const Int8MaxTaps::KernelFn one = assemble_jit_kernel<Int8MaxTaps::KernelFn>([](JitAssembler& a) { emit_int8_max_taps(a, 1); });
    static const Int8MaxTaps::KernelFn two = assemble_jit_kernel<Int8MaxTaps::KernelFn>([](JitAssembler& a) { emit_int8_max_taps(a, 2); });
    static const Int8MaxTaps::KernelFn one_ymm = assemble_jit_kernel<Int8MaxTaps::KernelFn>([](JitAssembler& a) { emit_int8_max_taps_ymm(a, 1); });
    static const Int8MaxTaps::KernelFn two_ymm = assemble_jit_kernel<Int8MaxTaps::KernelFn>([](JitAssembler& a) { emit_int8_max_taps_ymm(a, 2); });
    return zmm ? (stride == 1 ? one : two) : (stride == 1 ? one_ymm : two_ymm);
}
#define TESSEL_INT8_MAX_TAPS_JIT 1
#endif
}  // namespace detail

Status Int8MaxTaps::init(Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    isa_ = isa;
    stride1_ = stride2_ = nullptr;
#ifdef TESSEL_INT8_MAX_TAPS_JIT
    for (int64_t stride : {1, 2}) {
        KernelFn& kernel = stride == 1 ? stride1_ : stride2_;
        if (isa == Isa::Avx512 && detail::int8_max_taps_available(stride)) kernel = detail::int8_max_taps_kernel(stride, true);
        else if (isa == Isa::Avx2 || isa == Isa::Avx512) kernel = detail::int8_max_taps_kernel(stride, false);
    }
#endif
    return Status::Ok;
}

void Int8MaxTaps::run(const Int8MaxTapsArgs& args) const {
    if (args.n < 1 || args.taps < 1 || args.rows < 1 || args.planes < 1) return;
    const KernelFn kernel = args.stride == 1 ? stride1_ : args.stride == 2 ? stride2_ : nullptr;
    if (kernel) kernel(&args);
    else run_portable(args);
}

void Int8MaxTaps::run_portable(const Int8MaxTapsArgs& args) {
    for (int64_t p = 0; p < args.planes; ++p)
        for (int64_t r = 0; r < args.rows; ++r)
            for (int64_t j = 0; j < args.n; ++j) {
                const uint8_t* x = args.x + p * args.x_plane + r * args.x_row + j * args.stride;
                uint8_t m = 0;
                for (int64_t k = 0; k < args.taps; ++k) m = x[k * args.step] > m ? x[k * args.step] : m;
                args.y[p * args.y_plane + r * args.y_row + j] = m;
            }
}

// >>int8 convert implementation
namespace detail {
// The portable loops (x86-64's baseline SSE2 and NEON where they pay), elements [begin, end).
template <class T>
void int8_quantize_range(const float* x, T* y, uint64_t begin, uint64_t end, float scale, int32_t zero_point, int32_t lo, int32_t hi) {
    const float flo = (float)(lo - zero_point), fhi = (float)(hi - zero_point), magic = 12582912.0f;
    uint64_t e = begin;
#if defined(__SSE2__)
    // 16 at a time, the scalar loop's operations in the same order (x86-64's baseline SSE2).
    const __m128 vs = _mm_set1_ps(scale), vlo = _mm_set1_ps(flo), vhi = _mm_set1_ps(fhi), vm = _mm_set1_ps(magic);
    const __m128i vz = _mm_set1_epi32(zero_point), bias = _mm_set1_epi8(std::is_signed<T>::value ? (char)0x80 : 0);
    auto one = [&](uint64_t k) {
        __m128 v = _mm_div_ps(_mm_loadu_ps(x + k), vs);
        v = _mm_and_ps(v, _mm_cmpord_ps(v, v));   // NaN -> 0
        v = _mm_min_ps(_mm_max_ps(v, vlo), vhi);
        v = _mm_sub_ps(_mm_add_ps(v, vm), vm);
        __m128i q = _mm_add_epi32(_mm_cvttps_epi32(v), vz);
        // int8: shifted to uint8 for the unsigned pack, back by the xor below
        return std::is_signed<T>::value ? _mm_add_epi32(q, _mm_set1_epi32(128)) : q;
    };
    for (; e + 16 <= end; e += 16) {
        __m128i a = _mm_packs_epi32(one(e), one(e + 4)), b = _mm_packs_epi32(one(e + 8), one(e + 12));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + e), _mm_xor_si128(_mm_packus_epi16(a, b), bias));
    }
#elif defined(__ARM_NEON)
    const float32x4_t vs = vdupq_n_f32(scale), vlo = vdupq_n_f32(flo), vhi = vdupq_n_f32(fhi), vm = vdupq_n_f32(magic);
    const int32x4_t vz = vdupq_n_s32(zero_point);
    auto one = [&](uint64_t k) {
        float32x4_t v = vdivq_f32(vld1q_f32(x + k), vs);
        v = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), vceqq_f32(v, v)));   // NaN -> 0
        v = vminq_f32(vmaxq_f32(v, vlo), vhi);
        v = vsubq_f32(vaddq_f32(v, vm), vm);
        return vaddq_s32(vcvtq_s32_f32(v), vz);
    };
    for (; e + 8 <= end; e += 8) {
        int16x8_t h = vcombine_s16(vmovn_s32(one(e)), vmovn_s32(one(e + 4)));   // in range: narrowing is exact
        if (std::is_signed<T>::value) vst1_s8(reinterpret_cast<int8_t*>(y + e), vmovn_s16(h));
        else vst1_u8(reinterpret_cast<uint8_t*>(y + e), vmovn_u16(vreinterpretq_u16_s16(h)));
    }
#endif
    for (; e < end; ++e) {
        float v = x[e] / scale;
        v = v == v ? v : 0.0f;
        v = v > flo ? v : flo;
        v = v < fhi ? v : fhi;
        // ties to even: after the clamp |v| <= 255, so v + 1.5 * 2^23 has unit steps
        float r = (v + magic) - magic;
        y[e] = (T)((int32_t)r + zero_point);
    }
}

template <class T>
void int8_dequantize_range(const T* x, float* y, uint64_t begin, uint64_t end, float scale, int32_t zero_point) {
    uint64_t e = begin;
#if defined(__SSE2__)
    const __m128 vs = _mm_set1_ps(scale);
    const __m128i vz = _mm_set1_epi32(zero_point), zero = _mm_setzero_si128();
    for (; e + 16 <= end; e += 16) {
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + e));
        __m128i lo16, hi16;
        if (std::is_signed<T>::value) {   // sign extension: unpack with itself, shift right arithmetic
            lo16 = _mm_srai_epi16(_mm_unpacklo_epi8(b, b), 8);
            hi16 = _mm_srai_epi16(_mm_unpackhi_epi8(b, b), 8);
        } else {
            lo16 = _mm_unpacklo_epi8(b, zero);
            hi16 = _mm_unpackhi_epi8(b, zero);
        }
        __m128i w[4] = {_mm_srai_epi32(_mm_unpacklo_epi16(lo16, lo16), 16), _mm_srai_epi32(_mm_unpackhi_epi16(lo16, lo16), 16),
                        _mm_srai_epi32(_mm_unpacklo_epi16(hi16, hi16), 16), _mm_srai_epi32(_mm_unpackhi_epi16(hi16, hi16), 16)};
        for (int k = 0; k < 4; ++k)
            _mm_storeu_ps(y + e + 4 * k, _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(w[k], vz)), vs));
    }
#endif
    for (; e < end; ++e) y[e] = (float)((int32_t)x[e] - zero_point) * scale;
}

// y[j] = t[a[j] << 8 | b[j]]: a pair table's bytes.
inline void int8_pair_portable(const uint8_t* t, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n) {
    int64_t e = 0;
    for (; e + 4 <= n; e += 4) {
        y[e] = t[a[e] << 8 | b[e]];
        y[e + 1] = t[a[e + 1] << 8 | b[e + 1]];
        y[e + 2] = t[a[e + 2] << 8 | b[e + 2]];
        y[e + 3] = t[a[e + 3] << 8 | b[e + 3]];
    }
    for (; e < n; ++e) y[e] = t[a[e] << 8 | b[e]];
}

inline void int8_float_lookup_portable(const float* t, const uint8_t* x, float* y, int64_t n) {
    for (int64_t e = 0; e < n; ++e) y[e] = t[x[e]];
}

inline void int8_binary_portable(const Int8Convert::Binary& op, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n) {
    constexpr int64_t kChunk = 64;
    float fa[kChunk], fb[kChunk];
    for (int64_t e = 0; e < n; e += kChunk) {
        const int64_t m = n - e < kChunk ? n - e : kChunk;
        int8_dequantize_range(a + e, fa, 0, (uint64_t)m, op.a_scale, op.a_zero_point);
        int8_dequantize_range(b + e, fb, 0, (uint64_t)m, op.b_scale, op.b_zero_point);
        for (int64_t j = 0; j < m; ++j)
            fa[j] = op.op == SnippetOp::Add ? fa[j] + fb[j] : op.op == SnippetOp::Sub ? fa[j] - fb[j] : fa[j] * fb[j];
        int8_quantize_range(fa, y + e, 0, (uint64_t)m, op.y_scale, op.y_zero_point, op.lo, op.hi);
    }
}

#if !defined(TESSEL_NO_JIT) && (defined(__x86_64__) || defined(_M_X64))
#define TESSEL_INT8_CONVERT_JIT 1
constexpr uint32_t kQuantizeMagic = 0x4B400000u;   // 1.5 * 2^23: v + magic - magic rounds ties to even

// The AVX-512 kernels' loop over n elements (in `count`, a multiple of 16): one(r) does vector
// r of a step, four a step while 64 are left, then one at a time; pointer s advances bytes[s]
// an element.
template <class One>
inline void emit_int8_convert_loop_avx512(asmjit::x86::Assembler& a, const asmjit::x86::Gp& count, std::initializer_list<asmjit::x86::Gp> pointers,
                                   std::initializer_list<int32_t> bytes, One&& one) {
    asmjit::Label four = a.newLabel(), single = a.newLabel(), done = a.newLabel();
    auto advance = [&](int32_t elements) {
        const int32_t* b = bytes.begin();
        for (const asmjit::x86::Gp& p : pointers) a.add(p, elements * *b++);
        a.sub(count, elements);
    };
    a.cmp(count, 64);
    a.jb(single);
    a.bind(four);
    for (uint32_t r = 0; r < 4; ++r) one(r);
    advance(64);
    a.cmp(count, 64);
    a.jae(four);
    a.bind(single);
    a.test(count, count);
    a.jz(done);
    one(0);
    advance(16);
    a.jmp(single);
    a.bind(done);
    a.vzeroupper();
    a.ret();
}

// v's floats quantized into int32 lanes in the portable loop's order: / scale (zmm16), NaN
// lanes 0 (through mask k), clamped to [zmm17, zmm18], rounded by the magic number (zmm20),
// truncated, + zero point (zmm19).
inline void emit_int8_quantize_value_avx512(asmjit::x86::Assembler& a, const asmjit::x86::Zmm& v, const asmjit::x86::KReg& k) {
    namespace x86 = asmjit::x86;
    a.vdivps(v, v, x86::zmm16);
    a.vcmpps(k, v, v, 7);   // ordered: NaN lanes -> 0
    a.k(k).z().vmovaps(v, v);
    a.vmaxps(v, v, x86::zmm17);
    a.vminps(v, v, x86::zmm18);
    a.vaddps(v, v, x86::zmm20);
    a.vsubps(v, v, x86::zmm20);
    a.vcvttps2dq(v, v);
    a.vpaddd(v, v, x86::zmm19);
}

// emit_int8_quantize_value_avx512's constants: scale, lo, hi and zero point at params + at
// (Params' layout; BinaryParams has it at y_scale), and the magic number.
static_assert(offsetof(Int8Convert::Params, zero_point) == 12 &&
                  offsetof(Int8Convert::BinaryParams, y_zero_point) == offsetof(Int8Convert::BinaryParams, y_scale) + 12,
              "the quantize constants' layout");
inline void emit_int8_quantize_constants_avx512(asmjit::x86::Assembler& a, const asmjit::x86::Gp& params, int32_t at) {
    namespace x86 = asmjit::x86;
    a.vbroadcastss(x86::zmm16, x86::dword_ptr(params, at));
    a.vbroadcastss(x86::zmm17, x86::dword_ptr(params, at + 4));
    a.vbroadcastss(x86::zmm18, x86::dword_ptr(params, at + 8));
    a.vpbroadcastd(x86::zmm19, x86::dword_ptr(params, at + 12));
    a.mov(x86::eax, kQuantizeMagic);
    a.vpbroadcastd(x86::zmm20, x86::eax);
}

// Quantize: rdi x, rsi y, rdx n (a multiple of 16), rcx Params (System V). Four vectors a step
// while 64 are left, then one; each in the portable loop's order.
inline void emit_int8_quantize_avx512(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    emit_int8_quantize_constants_avx512(a, x86::rcx, 0);
    auto one = [&](uint32_t r) {
        const x86::Zmm v = x86::zmm(r);
        a.vmovups(v, x86::zmmword_ptr(x86::rdi, (int32_t)(64 * r)));
        emit_int8_quantize_value_avx512(a, v, x86::k(1 + r));
        a.vpmovdb(x86::xmmword_ptr(x86::rsi, (int32_t)(16 * r)), v);   // in range: truncation is exact
    };
    emit_int8_convert_loop_avx512(a, x86::rdx, {x86::rdi, x86::rsi}, {4, 1}, one);
}

// One vector of (x - zero point) * scale into v from the bytes at src (the AVX-512 and AVX2
// dequantize and binary kernels); emit_int8_dequantize_vector also stores it at dst.
inline void emit_int8_dequantize_value(asmjit::x86::Assembler& a, const asmjit::x86::Vec& v, const asmjit::x86::Mem& src,
                                       const asmjit::x86::Vec& zero_point, const asmjit::x86::Vec& scale, bool is_signed) {
    if (is_signed) a.vpmovsxbd(v, src);
    else a.vpmovzxbd(v, src);
    a.vpsubd(v, v, zero_point);
    a.vcvtdq2ps(v, v);
    a.vmulps(v, v, scale);
}
inline void emit_int8_dequantize_vector(asmjit::x86::Assembler& a, const asmjit::x86::Vec& v, const asmjit::x86::Mem& src,
                                        const asmjit::x86::Mem& dst, const asmjit::x86::Vec& zero_point,
                                        const asmjit::x86::Vec& scale, bool is_signed) {
    emit_int8_dequantize_value(a, v, src, zero_point, scale, is_signed);
    a.vmovups(dst, v);
}

// The op between two dequantized vectors: v = v op w.
inline void emit_int8_binary_op(asmjit::x86::Assembler& a, SnippetOp op, const asmjit::x86::Vec& v, const asmjit::x86::Vec& w) {
    if (op == SnippetOp::Add) a.vaddps(v, v, w);
    else if (op == SnippetOp::Sub) a.vsubps(v, v, w);
    else a.vmulps(v, v, w);
}

// Binary: rdi a, rsi b, rdx y, rcx n (a multiple of 16), r8 BinaryParams; a's and b's constants
// in zmm21-24, y's scale, hi and zero point in zmm16, 18 and 19, the least byte (lo + zero
// point) in zmm17. No NaN reaches the quantization (Int8Convert::binary), so it is the quantize
// kernel's with fewer operations: no NaN test, cvtps2dq's rounding (to nearest even, as the
// magic number's) and the clamp below in integers, where cvtps2dq's -2^31 for values past the
// int32 range stays below it (the float clamp above keeps those values from the top).
inline void emit_int8_binary_avx512(asmjit::x86::Assembler& a, SnippetOp op) {
    namespace x86 = asmjit::x86;
    a.vbroadcastss(x86::zmm21, x86::dword_ptr(x86::r8, 0));
    a.vpbroadcastd(x86::zmm22, x86::dword_ptr(x86::r8, 4));
    a.vbroadcastss(x86::zmm23, x86::dword_ptr(x86::r8, 8));
    a.vpbroadcastd(x86::zmm24, x86::dword_ptr(x86::r8, 12));
    const int32_t y = (int32_t)offsetof(Int8Convert::BinaryParams, y_scale);
    a.vbroadcastss(x86::zmm16, x86::dword_ptr(x86::r8, y));
    a.vbroadcastss(x86::zmm18, x86::dword_ptr(x86::r8, y + 8));
    a.vpbroadcastd(x86::zmm19, x86::dword_ptr(x86::r8, y + 12));
    emit_int8_least_byte(a, x86::eax, x86::r8, y + 4, y + 12);
    a.vpbroadcastd(x86::zmm17, x86::eax);
    auto one = [&](uint32_t r) {
        const x86::Zmm v = x86::zmm(r), w = x86::zmm(4 + r);
        emit_int8_dequantize_value(a, v, x86::xmmword_ptr(x86::rdi, (int32_t)(16 * r)), x86::zmm22, x86::zmm21, false);
        emit_int8_dequantize_value(a, w, x86::xmmword_ptr(x86::rsi, (int32_t)(16 * r)), x86::zmm24, x86::zmm23, false);
        emit_int8_binary_op(a, op, v, w);
        a.vdivps(v, v, x86::zmm16);
        a.vminps(v, v, x86::zmm18);
        a.vcvtps2dq(v, v);
        a.vpaddd(v, v, x86::zmm19);
        a.vpmaxsd(v, v, x86::zmm17);
        a.vpmovdb(x86::xmmword_ptr(x86::rdx, (int32_t)(16 * r)), v);   // in [lo, hi] + zero point: exact
    };
    emit_int8_convert_loop_avx512(a, x86::rcx, {x86::rdi, x86::rsi, x86::rdx}, {1, 1, 1}, one);
}

// Dequantize: rdi x, rsi y, rdx n (a multiple of 16), rcx Params.
inline void emit_int8_dequantize_avx512(asmjit::x86::Assembler& a, bool is_signed) {
    namespace x86 = asmjit::x86;
    a.vbroadcastss(x86::zmm16, x86::dword_ptr(x86::rcx, 0));
    a.vpbroadcastd(x86::zmm19, x86::dword_ptr(x86::rcx, 12));
    auto one = [&](uint32_t r) {
        emit_int8_dequantize_vector(a, x86::zmm(r), x86::xmmword_ptr(x86::rdi, (int32_t)(16 * r)),
                                    x86::zmmword_ptr(x86::rsi, (int32_t)(64 * r)), x86::zmm19, x86::zmm16, is_signed);
    };
    emit_int8_convert_loop_avx512(a, x86::rdx, {x86::rdi, x86::rsi}, {1, 4}, one);
}

// Pair table: rdi table, rsi a, rdx b, rcx y, r8 n (a multiple of 16). The index a << 8 | b
// in dwords, vpgatherdd of 4 bytes at it, the low byte kept.
inline void emit_int8_pair_avx512(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    auto one = [&](uint32_t r) {
        const x86::Zmm index = x86::zmm(r), low = x86::zmm(4 + r), value = x86::zmm(8 + r);
        const x86::KReg k = x86::k(1 + r);
        a.vpmovzxbd(index, x86::xmmword_ptr(x86::rsi, (int32_t)(16 * r)));
        a.vpmovzxbd(low, x86::xmmword_ptr(x86::rdx, (int32_t)(16 * r)));
        a.vpslld(index, index, 8);
        a.vpord(index, index, low);
        a.kxnorw(k, k, k);
        a.vpxord(value, value, value);
        a.k(k).vpgatherdd(value, x86::ptr(x86::rdi, index));
        a.vpmovdb(x86::xmmword_ptr(x86::rcx, (int32_t)(16 * r)), value);
    };
    emit_int8_convert_loop_avx512(a, x86::r8, {x86::rsi, x86::rdx, x86::rcx}, {1, 1, 1}, one);
}

// Float table (AVX-512 VBMI): rdi table, rsi x, rdx y, rcx n (any). The 256 floats become four
// planes of their bytes (zmm16-31, plane p's quarter q in zmm 16 + 4p + q), each looked up as
// Int8Lookup looks up bytes, and two rounds of unpacks join the planes' bytes into floats. The
// unpacks stay within 128-bit lanes, so x is first permuted to leave the floats in order.
// Several times the gathers' rate; 64 elements a step, the last partial one through masks.
inline void emit_int8_float_lookup_vbmi(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    asmjit::Label plane_bytes = a.newLabel(), order = a.newLabel();
    for (int32_t q = 0; q < 4; ++q) {
        for (int32_t i = 0; i < 4; ++i) a.vmovups(x86::zmm(i), x86::ptr(x86::rdi, 256 * q + 64 * i));
        for (int32_t p = 0; p < 4; ++p) {
            a.vmovdqu8(x86::zmm4, x86::ptr(plane_bytes, 64 * p));
            a.vmovdqa64(x86::zmm5, x86::zmm4);
            a.vpermi2b(x86::zmm4, x86::zmm0, x86::zmm1);   // byte p of floats 64q .. 64q + 31, in bytes 0..31
            a.vpermi2b(x86::zmm5, x86::zmm2, x86::zmm3);   // of floats 64q + 32 .. 64q + 63
            a.vshufi64x2(x86::zmm(16 + 4 * p + q), x86::zmm4, x86::zmm5, 0x44);
        }
    }
    a.vmovdqu8(x86::zmm8, x86::ptr(order));
    emit_int8_vbmi_loop(a, x86::zmm9, 4, [&]() {   // zmm9: 64 bytes of x -> zmm0-3: their 64 floats
        a.vpermb(x86::zmm9, x86::zmm8, x86::zmm9);
        a.vpmovb2m(x86::k1, x86::zmm9);
        for (uint32_t p = 0; p < 4; ++p) {
            a.vmovdqa64(x86::zmm(p), x86::zmm9);
            a.vpermi2b(x86::zmm(p), x86::zmm(16 + 4 * p), x86::zmm(17 + 4 * p));
            a.vmovdqa64(x86::zmm(4 + p), x86::zmm9);
            a.vpermi2b(x86::zmm(4 + p), x86::zmm(18 + 4 * p), x86::zmm(19 + 4 * p));
            a.k(x86::k1).vmovdqu8(x86::zmm(p), x86::zmm(4 + p));   // the index's bit 7: the table's upper half
        }
        a.vpunpcklbw(x86::zmm4, x86::zmm0, x86::zmm1);
        a.vpunpckhbw(x86::zmm5, x86::zmm0, x86::zmm1);
        a.vpunpcklbw(x86::zmm6, x86::zmm2, x86::zmm3);
        a.vpunpckhbw(x86::zmm7, x86::zmm2, x86::zmm3);
        a.vpunpcklwd(x86::zmm0, x86::zmm4, x86::zmm6);
        a.vpunpckhwd(x86::zmm1, x86::zmm4, x86::zmm6);
        a.vpunpcklwd(x86::zmm2, x86::zmm5, x86::zmm7);
        a.vpunpckhwd(x86::zmm3, x86::zmm5, x86::zmm7);
    }, [&](bool masked) {
        for (int32_t r = 0; r < 4; ++r) {   // vector r holds elements 16r .. 16r + 15
            if (!masked) {
                a.vmovups(x86::ptr(x86::rdx, 64 * r), x86::zmm(r));
                continue;
            }
            a.kshiftrq(x86::k3, x86::k2, (uint32_t)(16 * r));
            a.k(x86::k3).vmovups(x86::ptr(x86::rdx, 64 * r), x86::zmm(r));
        }
    });
    a.align(asmjit::AlignMode::kData, 64);
    a.bind(plane_bytes);   // plane p: bytes 4j + p of two registers' 32 floats
    for (uint32_t p = 0; p < 4; ++p)
        for (uint32_t j = 0; j < 64; ++j) a.embedUInt8((uint8_t)(4 * (j % 32) + p));
    a.bind(order);   // position 16L + 4r + i takes element 16r + 4L + i (a vector r, lane L after the unpacks)
    for (uint32_t l = 0; l < 4; ++l)
        for (uint32_t r = 0; r < 4; ++r)
            for (uint32_t i = 0; i < 4; ++i) a.embedUInt8((uint8_t)(16 * r + 4 * l + i));
}

// AVX2: 32 elements a step (n a multiple of 32). Four vectors of int32 become 32 bytes by two
// in-lane packs and a vpermd that puts the dwords back in order (the packs interleave lanes).
inline void emit_int8_pack_avx2(asmjit::x86::Assembler& a, const asmjit::Label& order, bool is_signed) {
    namespace x86 = asmjit::x86;
    a.vpackssdw(x86::ymm0, x86::ymm0, x86::ymm1);
    a.vpackssdw(x86::ymm2, x86::ymm2, x86::ymm3);
    if (is_signed) a.vpacksswb(x86::ymm0, x86::ymm0, x86::ymm2);
    else a.vpackuswb(x86::ymm0, x86::ymm0, x86::ymm2);
    a.vmovdqu(x86::ymm1, x86::ymmword_ptr(order));
    a.vpermd(x86::ymm0, x86::ymm1, x86::ymm0);
}

inline void emit_int8_pack_order(asmjit::x86::Assembler& a, const asmjit::Label& order) {
    a.align(asmjit::AlignMode::kData, 32);
    a.bind(order);
    for (uint32_t i : {0u, 4u, 1u, 5u, 2u, 6u, 3u, 7u}) a.embedUInt32(i);
}

// The AVX2 kernels' loop over n elements (in `count`, a multiple of 32): step() does 32,
// pointer s advances bytes[s] an element.
template <class Step>
inline void emit_int8_convert_loop_avx2(asmjit::x86::Assembler& a, const asmjit::x86::Gp& count,
                                        std::initializer_list<asmjit::x86::Gp> pointers, std::initializer_list<int32_t> bytes, Step&& step) {
    asmjit::Label loop = a.newLabel(), done = a.newLabel();
    a.test(count, count);
    a.jz(done);
    a.bind(loop);
    step();
    const int32_t* b = bytes.begin();
    for (const asmjit::x86::Gp& p : pointers) a.add(p, 32 * *b++);
    a.sub(count, 32);
    a.jnz(loop);
    a.bind(done);
    a.vzeroupper();
    a.ret();
}

// The AVX2 kernels' emit_int8_quantize_value_avx512: scale ymm12, clamp [ymm13, ymm14], magic
// ymm11, zero point ymm15; `ordered` a temporary.
inline void emit_int8_quantize_value_avx2(asmjit::x86::Assembler& a, const asmjit::x86::Ymm& v, const asmjit::x86::Ymm& ordered) {
    namespace x86 = asmjit::x86;
    a.vdivps(v, v, x86::ymm12);
    a.vcmpps(ordered, v, v, 7);   // NaN lanes -> 0
    a.vandps(v, v, ordered);
    a.vmaxps(v, v, x86::ymm13);
    a.vminps(v, v, x86::ymm14);
    a.vaddps(v, v, x86::ymm11);
    a.vsubps(v, v, x86::ymm11);
    a.vcvttps2dq(v, v);
    a.vpaddd(v, v, x86::ymm15);
}

// emit_int8_quantize_value_avx2's constants, as emit_int8_quantize_constants_avx512's.
inline void emit_int8_quantize_constants_avx2(asmjit::x86::Assembler& a, const asmjit::x86::Gp& params, int32_t at) {
    namespace x86 = asmjit::x86;
    a.vbroadcastss(x86::ymm12, x86::dword_ptr(params, at));
    a.vbroadcastss(x86::ymm13, x86::dword_ptr(params, at + 4));
    a.vbroadcastss(x86::ymm14, x86::dword_ptr(params, at + 8));
    a.vpbroadcastd(x86::ymm15, x86::dword_ptr(params, at + 12));
    a.mov(x86::eax, kQuantizeMagic);
    a.vmovd(x86::xmm11, x86::eax);
    a.vpbroadcastd(x86::ymm11, x86::xmm11);
}

inline void emit_int8_quantize_avx2(asmjit::x86::Assembler& a, bool is_signed) {
    namespace x86 = asmjit::x86;
    emit_int8_quantize_constants_avx2(a, x86::rcx, 0);
    asmjit::Label order = a.newLabel();
    emit_int8_convert_loop_avx2(a, x86::rdx, {x86::rdi, x86::rsi}, {4, 1}, [&]() {
        for (uint32_t r = 0; r < 4; ++r) {
            a.vmovups(x86::ymm(r), x86::ymmword_ptr(x86::rdi, (int32_t)(32 * r)));
            emit_int8_quantize_value_avx2(a, x86::ymm(r), x86::ymm(4 + r));
        }
        emit_int8_pack_avx2(a, order, is_signed);
        a.vmovdqu(x86::ymmword_ptr(x86::rsi), x86::ymm0);
    });
    emit_int8_pack_order(a, order);
}

inline void emit_int8_dequantize_avx2(asmjit::x86::Assembler& a, bool is_signed) {
    namespace x86 = asmjit::x86;
    a.vbroadcastss(x86::ymm12, x86::dword_ptr(x86::rcx, 0));
    a.vpbroadcastd(x86::ymm15, x86::dword_ptr(x86::rcx, 12));
    emit_int8_convert_loop_avx2(a, x86::rdx, {x86::rdi, x86::rsi}, {1, 4}, [&]() {
        for (uint32_t r = 0; r < 4; ++r)
            emit_int8_dequantize_vector(a, x86::ymm(r), x86::qword_ptr(x86::rdi, (int32_t)(8 * r)),
                                        x86::ymmword_ptr(x86::rsi, (int32_t)(32 * r)), x86::ymm15, x86::ymm12, is_signed);
    });
}

// Scalar loads, 8 indices from one qword: 1.4x vgatherdps's rate on Zen 5 (ocr_cls's six
// tables), whose gathers issue their loads slowly, as do Intel's under the GDS microcode fix.
inline void emit_int8_lookup_avx2(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    emit_int8_convert_loop_avx2(a, x86::rcx, {x86::rsi, x86::rdx}, {1, 4}, [&]() {
        for (uint32_t r = 0; r < 4; ++r) {
            const x86::Gp bytes = r % 2 ? x86::r9 : x86::r8, index = r % 2 ? x86::r11 : x86::rax;
            a.mov(bytes, x86::qword_ptr(x86::rsi, (int32_t)(8 * r)));
            for (uint32_t k = 0; k < 8; ++k) {
                a.movzx(index.r32(), bytes.r8());
                if (k < 7) a.shr(bytes, 8);
                a.mov(index.r32(), x86::dword_ptr(x86::rdi, index, 2));
                a.mov(x86::dword_ptr(x86::rdx, (int32_t)(4 * (8 * r + k))), index.r32());
            }
        }
    });
}

inline void emit_int8_pair_avx2(asmjit::x86::Assembler& a) {
    namespace x86 = asmjit::x86;
    asmjit::Label order = a.newLabel();
    a.mov(x86::eax, 255);
    a.vmovd(x86::xmm15, x86::eax);
    a.vpbroadcastd(x86::ymm15, x86::xmm15);
    emit_int8_convert_loop_avx2(a, x86::r8, {x86::rsi, x86::rdx, x86::rcx}, {1, 1, 1}, [&]() {
        for (uint32_t r = 0; r < 4; ++r) {
            const x86::Ymm value = x86::ymm(r), index = x86::ymm(4 + r), low = x86::ymm(8 + r), mask = x86::ymm(12 + (r & 1) * 2);
            a.vpmovzxbd(index, x86::qword_ptr(x86::rsi, (int32_t)(8 * r)));
            a.vpmovzxbd(low, x86::qword_ptr(x86::rdx, (int32_t)(8 * r)));
            a.vpslld(index, index, 8);
            a.vpor(index, index, low);
            a.vpcmpeqd(mask, mask, mask);
            a.vpxor(value, value, value);
            a.vpgatherdd(value, x86::ptr(x86::rdi, index), mask);
            a.vpand(value, value, x86::ymm15);   // the low byte of the 4 read
        }
        emit_int8_pack_avx2(a, order, false);
        a.vmovdqu(x86::ymmword_ptr(x86::rcx), x86::ymm0);
    });
    emit_int8_pack_order(a, order);
}

// Binary: as the AVX-512 kernel, 32 elements a step; a's and b's constants in ymm6-9, y's scale
// and hi in ymm12 and ymm14, its zero point in int16 lanes in ymm15 (added after the first
// pack, saturating), the least byte in ymm13, the packs' dword order in ymm11.
inline void emit_int8_binary_avx2(asmjit::x86::Assembler& a, SnippetOp op) {
    namespace x86 = asmjit::x86;
    a.vbroadcastss(x86::ymm6, x86::dword_ptr(x86::r8, 0));
    a.vpbroadcastd(x86::ymm7, x86::dword_ptr(x86::r8, 4));
    a.vbroadcastss(x86::ymm8, x86::dword_ptr(x86::r8, 8));
    a.vpbroadcastd(x86::ymm9, x86::dword_ptr(x86::r8, 12));
    const int32_t y = (int32_t)offsetof(Int8Convert::BinaryParams, y_scale);
    a.vbroadcastss(x86::ymm12, x86::dword_ptr(x86::r8, y));
    a.vbroadcastss(x86::ymm14, x86::dword_ptr(x86::r8, y + 8));
    a.vpbroadcastw(x86::ymm15, x86::word_ptr(x86::r8, y + 12));
    emit_int8_least_byte(a, x86::eax, x86::r8, y + 4, y + 12);
    a.vmovd(x86::xmm13, x86::eax);
    a.vpbroadcastb(x86::ymm13, x86::xmm13);
    asmjit::Label order = a.newLabel();
    a.vmovdqu(x86::ymm11, x86::ymmword_ptr(order));
    emit_int8_convert_loop_avx2(a, x86::rcx, {x86::rdi, x86::rsi, x86::rdx}, {1, 1, 1}, [&]() {
        for (uint32_t r = 0; r < 4; ++r) {
            const x86::Ymm v = x86::ymm(r);
            emit_int8_dequantize_value(a, v, x86::qword_ptr(x86::rdi, (int32_t)(8 * r)), x86::ymm7, x86::ymm6, false);
            emit_int8_dequantize_value(a, x86::ymm4, x86::qword_ptr(x86::rsi, (int32_t)(8 * r)), x86::ymm9, x86::ymm8, false);
            emit_int8_binary_op(a, op, v, x86::ymm4);
            a.vdivps(v, v, x86::ymm12);
            a.vminps(v, v, x86::ymm14);
            a.vcvtps2dq(v, v);
        }
        a.vpackssdw(x86::ymm0, x86::ymm0, x86::ymm1);
        a.vpaddsw(x86::ymm0, x86::ymm0, x86::ymm15);
        a.vpackssdw(x86::ymm2, x86::ymm2, x86::ymm3);
        a.vpaddsw(x86::ymm2, x86::ymm2, x86::ymm15);
        a.vpackuswb(x86::ymm0, x86::ymm0, x86::ymm2);
        a.vpmaxub(x86::ymm0, x86::ymm0, x86::ymm13);
        a.vpermd(x86::ymm0, x86::ymm11, x86::ymm0);
        a.vmovdqu(x86::ymmword_ptr(x86::rdx), x86::ymm0);
    });
    emit_int8_pack_order(a, order);
}
#endif
}  // namespace detail

namespace detail {
inline int int8_binary_index(SnippetOp op) { return op == SnippetOp::Add ? 0 : op == SnippetOp::Sub ? 1 : 2; }
#ifdef TESSEL_INT8_CONVERT_JIT
// The kernels of one target, made on first use (nullptr where one could not be).
struct Int8ConvertKernels {
    Int8Convert::QuantizeFn quantize = nullptr, quantize_signed = nullptr;
    Int8Convert::DequantizeFn dequantize = nullptr, dequantize_signed = nullptr;
    Int8Convert::PairFn pair = nullptr;
    Int8Convert::LookupFn lookup = nullptr;
    int64_t lookup_block = 1;   // elements the lookup kernel takes a step (whole steps only when above 1)
    Int8Convert::BinaryFn binary[3] = {};   // Add, Sub, Mul
};

inline const Int8ConvertKernels* int8_convert_kernels(Isa isa) {
    auto make = [](bool avx512) {
        Int8ConvertKernels k;
        using x86a = asmjit::x86::Assembler;
        if (avx512) {
            k.quantize = k.quantize_signed = assemble_jit_kernel<Int8Convert::QuantizeFn>([](x86a& a) { emit_int8_quantize_avx512(a); });
            k.dequantize = assemble_jit_kernel<Int8Convert::DequantizeFn>([](x86a& a) { emit_int8_dequantize_avx512(a, false); });
            k.dequantize_signed = assemble_jit_kernel<Int8Convert::DequantizeFn>([](x86a& a) { emit_int8_dequantize_avx512(a, true); });
            k.pair = assemble_jit_kernel<Int8Convert::PairFn>([](x86a& a) { emit_int8_pair_avx512(a); });
            if (int8_vbmi_available()) {
                k.lookup = assemble_jit_kernel<Int8Convert::LookupFn>([](x86a& a) { emit_int8_float_lookup_vbmi(a); });
            } else {
                k.lookup = assemble_jit_kernel<Int8Convert::LookupFn>([](x86a& a) { emit_int8_lookup_avx2(a); });
                k.lookup_block = 32;
            }
            for (SnippetOp op : {SnippetOp::Add, SnippetOp::Sub, SnippetOp::Mul})
                k.binary[int8_binary_index(op)] = assemble_jit_kernel<Int8Convert::BinaryFn>([op](x86a& a) { emit_int8_binary_avx512(a, op); });
        } else {
            k.quantize = assemble_jit_kernel<Int8Convert::QuantizeFn>([](x86a& a) { emit_int8_quantize_avx2(a, false); });
            k.quantize_signed = assemble_jit_kernel<Int8Convert::QuantizeFn>([](x86a& a) { emit_int8_quantize_avx2(a, true); });
            k.dequantize = assemble_jit_kernel<Int8Convert::DequantizeFn>([](x86a& a) { emit_int8_dequantize_avx2(a, false); });
            k.dequantize_signed = assemble_jit_kernel<Int8Convert::DequantizeFn>([](x86a& a) { emit_int8_dequantize_avx2(a, true); });
            k.pair = assemble_jit_kernel<Int8Convert::PairFn>([](x86a& a) { emit_int8_pair_avx2(a); });
            k.lookup = assemble_jit_kernel<Int8Convert::LookupFn>([](x86a& a) { emit_int8_lookup_avx2(a); });
            k.lookup_block = 32;
            for (SnippetOp op : {SnippetOp::Add, SnippetOp::Sub, SnippetOp::Mul})
                k.binary[int8_binary_index(op)] = assemble_jit_kernel<Int8Convert::BinaryFn>([op](x86a& a) { emit_int8_binary_avx2(a, op); });
        }
        if (!k.quantize || !k.quantize_signed || !k.dequantize || !k.dequantize_signed || !k.pair || !k.lookup || !k.binary[0] ||
            !k.binary[1] || !k.binary[2])
            k = Int8ConvertKernels();
        return k;
    };
    static const Int8ConvertKernels avx512 = make(true), avx2 = make(false);
    return isa == Isa::Avx512 ? &avx512 : isa == Isa::Avx2 ? &avx2 : nullptr;
}
#endif
}  // namespace detail

Status Int8Convert::init(Isa isa) {
    if (isa == Isa::Auto) isa = default_isa();
    if (!isa_available(isa)) return Status::Unsupported;
    isa_ = isa;
    quantize_ = quantize_signed_ = nullptr;
    dequantize_ = dequantize_signed_ = nullptr;
    pair_ = nullptr;
    lookup_ = nullptr;
    lookup_block_ = 1;
    for (BinaryFn& f : binary_) f = nullptr;
    block_ = 1;
#ifdef TESSEL_INT8_CONVERT_JIT
    const detail::Int8ConvertKernels* k = detail::int8_convert_kernels(isa);
    if (k && k->quantize) {
        quantize_ = k->quantize, quantize_signed_ = k->quantize_signed;
        dequantize_ = k->dequantize, dequantize_signed_ = k->dequantize_signed;
        pair_ = k->pair;
        lookup_ = k->lookup;
        lookup_block_ = k->lookup_block;
        for (int i = 0; i < 3; ++i) binary_[i] = k->binary[i];
        block_ = isa == Isa::Avx512 ? 16 : 32;
    }
#endif
    return Status::Ok;
}

namespace detail {
// The kernel over the whole blocks of [0, n), the portable loop over the rest.
template <class T>
void int8_convert_quantize(Int8Convert::QuantizeFn kernel, int64_t block, const float* x, T* y, int64_t n, float scale,
                           int32_t zero_point, int32_t lo, int32_t hi) {
    if (n < 1) return;
    const int64_t done = kernel ? n / block * block : 0;
    if (done > 0) {
        const Int8Convert::Params params{scale, (float)(lo - zero_point), (float)(hi - zero_point), zero_point};
        kernel(x, y, done, &params);
    }
    if (done < n) int8_quantize_range(x, y, (uint64_t)done, (uint64_t)n, scale, zero_point, lo, hi);
}

template <class T>
void int8_convert_dequantize(Int8Convert::DequantizeFn kernel, int64_t block, const T* x, float* y, int64_t n, float scale,
                             int32_t zero_point) {
    if (n < 1) return;
    const int64_t done = kernel ? n / block * block : 0;
    if (done > 0) {
        const Int8Convert::Params params{scale, 0.0f, 0.0f, zero_point};
        kernel(x, y, done, &params);
    }
    if (done < n) int8_dequantize_range(x, y, (uint64_t)done, (uint64_t)n, scale, zero_point);
}
}  // namespace detail

void Int8Convert::quantize(const float* x, uint8_t* y, int64_t n, float scale, int32_t zero_point, int32_t lo, int32_t hi) const {
    detail::int8_convert_quantize(quantize_, block_, x, y, n, scale, zero_point, lo, hi);
}

void Int8Convert::quantize(const float* x, int8_t* y, int64_t n, float scale, int32_t zero_point, int32_t lo, int32_t hi) const {
    detail::int8_convert_quantize(quantize_signed_, block_, x, y, n, scale, zero_point, lo, hi);
}

void Int8Convert::dequantize(const uint8_t* x, float* y, int64_t n, float scale, int32_t zero_point) const {
    detail::int8_convert_dequantize(dequantize_, block_, x, y, n, scale, zero_point);
}

void Int8Convert::dequantize(const int8_t* x, float* y, int64_t n, float scale, int32_t zero_point) const {
    detail::int8_convert_dequantize(dequantize_signed_, block_, x, y, n, scale, zero_point);
}

void Int8Convert::pair(const uint8_t* table, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n) const {
    if (n < 1) return;
    const int64_t done = pair_ ? n / block_ * block_ : 0;
    if (done > 0) pair_(table, a, b, y, done);
    if (done < n) detail::int8_pair_portable(table, a + done, b + done, y + done, n - done);
}

void Int8Convert::lookup(const float* table, const uint8_t* x, float* y, int64_t n) const {
    if (n < 1) return;
    const int64_t done = lookup_ ? n / lookup_block_ * lookup_block_ : 0;
    if (done > 0) lookup_(table, x, y, done);
    if (done < n) detail::int8_float_lookup_portable(table, x + done, y + done, n - done);
}

void Int8Convert::binary(const Binary& op, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n) const {
    if (n < 1) return;
    // The kernels assume no NaN: a's and b's floats finite (so no inf - inf or inf x 0) and
    // y's scale finite and not 0 (an overflowed inf / inf, 0 / 0). Other scales take the
    // portable loop.
    const bool no_nan = std::isfinite(255.0f * op.a_scale) && std::isfinite(255.0f * op.b_scale) && op.y_scale != 0.0f &&
                        std::isfinite(op.y_scale);
    const BinaryFn kernel = no_nan ? binary_[detail::int8_binary_index(op.op)] : nullptr;
    const int64_t done = kernel ? n / block_ * block_ : 0;
    if (done > 0) {
        const BinaryParams params{op.a_scale, op.a_zero_point, op.b_scale, op.b_zero_point, op.y_scale,
                                  (float)(op.lo - op.y_zero_point), (float)(op.hi - op.y_zero_point), op.y_zero_point};
        kernel(a, b, y, done, &params);
    }
    if (done < n) detail::int8_binary_portable(op, a + done, b + done, y + done, n - done);
}

// >>opencl printer implementation
OpenClSource::~OpenClSource() { TESSEL_FREE(text_); }

void OpenClSource::append(const char* format, ...) {
    if (failed_) return;
    for (;;) {
        va_list args;
        va_start(args, format);
        size_t room = capacity_ - size_;
        int n = capacity_ ? std::vsnprintf(text_ + size_, room, format, args) : 0;
        va_end(args);
        if (n < 0) { failed_ = true; return; }
        if (capacity_ && (size_t)n < room) { size_ += (size_t)n; return; }
        size_t grown = capacity_ * 2 + (size_t)n + 4096;
        char* bigger = static_cast<char*>(TESSEL_MALLOC(grown));
        if (!bigger) { failed_ = true; return; }
        if (text_) std::memcpy(bigger, text_, size_ + 1);
        else bigger[0] = 0;
        TESSEL_FREE(text_);
        text_ = bigger;
        capacity_ = grown;
    }
}

namespace detail {

// A value of the printed kernel: the float variable `v<id>` (bit patterns travel as floats,
// as_uint/as_float reinterpret them, like the x86 registers the ScalarMath model mirrors).
struct OpenClValue {
    uint32_t id = 0;
};

// ScalarMath's primitives, each printed as one OpenCL C statement with the same semantics.
struct OpenClMath {
    using V = OpenClValue;
    OpenClSource* out;
    uint32_t next = 0;
    V fresh() { return V{next++}; }
    template <class... A>
    V def(const char* format, A... args) {
        V v = fresh();
        out->append("    float v%u = ", v.id);
        out->append(format, args...);
        out->append(";\n");
        return v;
    }
    V c(float v) { return cb(float_bits(v)); }
    V cb(uint32_t b) { return def("as_float(0x%08xu)", b); }
    V add(V a, V b) { return def("v%u + v%u", a.id, b.id); }
    V sub(V a, V b) { return def("v%u - v%u", a.id, b.id); }
    V mul(V a, V b) { return def("v%u * v%u", a.id, b.id); }
    V div(V a, V b) { return def("v%u / v%u", a.id, b.id); }
    V min(V a, V b) { return def("v%u < v%u ? v%u : v%u", a.id, b.id, a.id, b.id); }   // x86 minps: b when unordered
    V max(V a, V b) { return def("v%u > v%u ? v%u : v%u", a.id, b.id, a.id, b.id); }
    V sqrt(V a) { return def("sqrt(v%u)", a.id); }
    V fma(V a, V b, V c) { return def("fma(v%u, v%u, v%u)", a.id, b.id, c.id); }
    V fnma(V a, V b, V c) { return def("fma(-v%u, v%u, v%u)", a.id, b.id, c.id); }
    V bits(const char* op, V a, V b) { return def("as_float(as_uint(v%u) %s as_uint(v%u))", a.id, op, b.id); }
    V and_(V a, V b) { return bits("&", a, b); }
    V or_(V a, V b) { return bits("|", a, b); }
    V xor_(V a, V b) { return bits("^", a, b); }
    V andnot(V a, V b) { return def("as_float(~as_uint(v%u) & as_uint(v%u))", a.id, b.id); }
    V cmp(V a, V b, int predicate) {
        // C's comparisons are false on NaN except !=, as the ordered/unordered predicates need.
        static const char* const kForms[] = {"v%u == v%u", "v%u < v%u", "v%u <= v%u", "isnan(v%u) || isnan(v%u)",
                                             "v%u != v%u", "!(v%u < v%u)", "!(v%u <= v%u)", "!isnan(v%u) && !isnan(v%u)"};
        char format[96];
        std::snprintf(format, sizeof format, "as_float((%s) ? 0xffffffffu : 0u)", kForms[predicate & 7]);
        return def(format, a.id, b.id);
    }
    V blend(V mask, V a, V b) { return def("as_uint(v%u) ? v%u : v%u", mask.id, a.id, b.id); }
    V round(V a, int mode) {
        static const char* const kNames[] = {"rint", "floor", "ceil", "trunc"};
        return def("%s(v%u)", kNames[mode & 3], a.id);
    }
    V cvt_i(V a) {   // cvtps2dq: nearest even, NaN and overflow give INT32_MIN
        return def("(v%u >= -2147483648.0f && v%u < 2147483648.0f) ? as_float((uint)convert_int_rte(v%u)) : as_float(0x80000000u)",
                   a.id, a.id, a.id);
    }
    V cvt_f(V a) { return def("convert_float_rte(as_int(v%u))", a.id); }
    void drop(V&) {}
    bool fused_fma() const { return true; }
    V add_i(V a, V b) { return bits("+", a, b); }
    V sub_i(V a, V b) { return bits("-", a, b); }
    V shl_i(V a, int n) { return def("as_float(as_uint(v%u) << %d)", a.id, n); }
    V shr_i(V a, int n) { return def("as_float(as_uint(v%u) >> %d)", a.id, n); }
    V sra_i(V a, int n) { return def("as_float((uint)(as_int(v%u) >> %d))", a.id, n); }
    V copy_sign(V r, V x) { return def("as_float(as_uint(v%u) | (as_uint(v%u) & 0x80000000u))", r.id, x.id); }
    bool has_scalef() const { return false; }
    V scalef(V a, V) { return a; }
    V lookup_index(V k) { return k; }
    V lookup(V index, uint32_t table) { return def("tessel_tables[%u][as_uint(v%u) & 15u]", table, index.id); }
};

// The element offset of a value of `shape` (right-aligned against the domain) at the
// work-item's coordinates c0..c5; broadcast dims contribute nothing.
inline void print_offset(OpenClSource* out, const SnippetShape& shape, const SnippetShape& domain) {
    uint64_t stride = 1;
    bool any = false;
    for (int i = shape.rank - 1; i >= 0; --i) {
        int d = domain.rank - shape.rank + i;
        if (shape.dims[i] != 1) {
            out->append("%s(ulong)c%d * %lluul", any ? " + " : "", d, (unsigned long long)stride);
            any = true;
        }
        stride *= (uint64_t)shape.dims[i];
    }
    if (!any) out->append("0");
}

}  // namespace detail

void print_opencl_prelude(OpenClSource* out) {
    out->append("#pragma OPENCL FP_CONTRACT OFF\n__constant float tessel_tables[%u][16] = {\n", (unsigned)detail::kLookupTableCount);
    for (uint32_t t = 0; t < detail::kLookupTableCount; ++t) {
        out->append("  {");
        for (uint32_t k = 0; k < 16; ++k) out->append("%s%af", k ? ", " : "", (double)detail::kLookupTables[t][k]);
        out->append("},\n");
    }
    out->append("};\n");
}

namespace detail {
inline bool opencl_domain(const SnippetBody& body, SnippetShape* domain) {
    for (uint32_t v = 0; v < body.size(); ++v)
        if (!broadcast_shapes(*domain, body.instruction(v).shape, domain)) return false;
    return true;
}
// The body for domain element g: coordinates c0.. from g, each parameter loaded from p<i>
// (parameter `fused`: the value `acc`), each result stored to r<i>.
inline Status print_opencl_statements(const SnippetBody& body, const SnippetShape& domain, uint32_t fused, OpenClSource* out) {
    for (int d = domain.rank - 1; d >= 0; --d) {
        out->append("    ulong c%d = g %% %lluul;\n", d, (unsigned long long)domain.dims[d]);
        if (d > 0) out->append("    g /= %lluul;\n", (unsigned long long)domain.dims[d]);
    }
    OpenClMath m{out};
    // Value v of the body is variable vars[v] of the kernel.
    uint32_t var_storage[1024];
    uint32_t* vars = body.size() <= 1024 ? var_storage : static_cast<uint32_t*>(TESSEL_MALLOC(sizeof(uint32_t) * body.size()));
    if (!vars) return Status::OutOfMemory;
    for (uint32_t v = 0; v < body.size(); ++v) {
        const SnippetInstruction& ins = body.instruction(v);
        if (ins.op == SnippetOp::Parameter) {
            OpenClValue x = m.fresh();
            if (ins.index == fused) {
                out->append("    float v%u = acc;\n", x.id);
            } else {
                out->append("    float v%u = p%u[", x.id, ins.index);
                print_offset(out, ins.shape, domain);
                out->append("];\n");
            }
            vars[v] = x.id;
        } else if (ins.op == SnippetOp::Scalar) {
            vars[v] = m.c(ins.alpha).id;
        } else {
            OpenClValue a[3];
            for (uint32_t k = 0; k < ins.arity; ++k) a[k].id = vars[ins.args[k]];
            vars[v] = eval_op(m, ins.op, a, ins.alpha, ins.beta).id;
        }
    }
    for (uint32_t i = 0; i < body.result_count(); ++i) {
        const SnippetShape& shape = body.instruction(body.result_value(i)).shape;
        // A result smaller than the domain is written by the work-items at coordinate 0 of
        // its broadcast dims only.
        out->append("    if (1");
        for (int d = 0; d < domain.rank; ++d) {
            int k = d - (domain.rank - shape.rank);
            if (domain.dims[d] != 1 && (k < 0 || shape.dims[k] == 1)) out->append(" && c%d == 0", d);
        }
        out->append(") r%u[", i);
        print_offset(out, shape, domain);
        out->append("] = v%u;\n", vars[body.result_value(i)]);
    }
    out->append("}\n");
    if (vars != var_storage) TESSEL_FREE(vars);
    return out->failed() ? Status::OutOfMemory : Status::Ok;
}
}  // namespace detail

Status print_opencl_kernel(const SnippetBody& body, const char* kernel_name, OpenClSource* out, uint64_t* elements) {
    SnippetShape domain;
    if (body.result_count() == 0 || !detail::opencl_domain(body, &domain)) return Status::InvalidArgument;
    *elements = detail::shape_elements(domain);
    out->append("__kernel void %s(", kernel_name);
    for (uint32_t i = 0; i < body.parameter_count(); ++i) out->append("__global const float* restrict p%u, ", i);
    for (uint32_t i = 0; i < body.result_count(); ++i) out->append("__global float* r%u%s", i, i + 1 < body.result_count() ? ", " : "");
    out->append(") {\n    ulong g = get_global_id(0);\n    if (g >= %lluul) return;\n", (unsigned long long)*elements);
    return detail::print_opencl_statements(body, domain, kNoFusedParameter, out);
}

Status print_opencl_epilogue(const SnippetBody& body, uint32_t fused, const char* function_name, OpenClSource* out, uint64_t* elements) {
    SnippetShape domain;
    if (body.result_count() == 0 || fused >= body.parameter_count() || !detail::opencl_domain(body, &domain) ||
        detail::shape_elements(domain) != *elements)
        return Status::InvalidArgument;
    for (uint32_t v = 0; v < body.size(); ++v) {
        const SnippetInstruction& ins = body.instruction(v);
        if (ins.op == SnippetOp::Parameter && ins.index == fused && detail::shape_elements(ins.shape) != *elements) return Status::InvalidArgument;
    }
    out->append("void %s(ulong g, float acc", function_name);
    for (uint32_t i = 0; i < body.parameter_count(); ++i)
        if (i != fused) out->append(", __global const float* restrict p%u", i);
    for (uint32_t i = 0; i < body.result_count(); ++i) out->append(", __global float* r%u", i);
    out->append(") {\n");
    return detail::print_opencl_statements(body, domain, fused, out);
}

}  // namespace tessel
#endif  // TESSEL_SNIPPETS_IMPLEMENTATION
