# Tessel build. `make` builds build/tessel; `make test` runs every suite (host, AArch64 under
# qemu, examples) and ends with a plain "N passed, N failed" line. Dependencies are installed
# by scripts/install-deps.sh when one is missing.

CXX        ?= g++
ARM_CXX    ?= aarch64-linux-gnu-g++
QEMU       ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
WARNINGS    = -Wall -Wextra -Werror
CXXFLAGS_LIB = -std=c++17 -fno-exceptions -fno-rtti $(WARNINGS) -I. -MMD -MP
TEST_DEFINES = -DDOCTEST_CONFIG_NO_EXCEPTIONS_BUT_WITH_ALL_ASSERTS -include test/alloc_counter.h
# Each header must compile on its own, with and without its implementation part.
HEADER_CHECK = -std=c++17 -fno-exceptions -fno-rtti $(WARNINGS) -I. -fsyntax-only
# No debug info by default: it is a fifth of make test's compile time (OPT='-O2 -g' to debug;
# the sanitizer builds keep theirs).
OPT        ?= -O2
BENCH_OPT  ?= -O3 -march=native
LIBS        = -lasmjit -lpthread
ARM_LIBS    = -L/usr/lib/aarch64-linux-gnu -lasmjit -lpthread

HEADERS     = hetero.h snippets.h runtime.h
TEST_SRC    = $(wildcard test/*.cpp)
EXAMPLE_SRC = $(wildcard examples/*.cpp)
BENCH_SRC   = $(wildcard bench/*.cpp)

HOST_TEST_OBJ = $(TEST_SRC:%.cpp=build/obj/%.o)
ARM_TEST_OBJ  = $(TEST_SRC:%.cpp=build-arm/obj/%.o)
EXAMPLES      = $(EXAMPLE_SRC:examples/%.cpp=build/examples/%)
BENCHES       = $(BENCH_SRC:bench/%.cpp=build/bench/%)

# The ISA levels the host suite runs at (TESSEL_ISA override); filled by snippets.h's issue.
HOST_ISAS  ?= ref sse41 avx2 avx512

.PHONY: all arm demo conformance-doc test test-host test-host-tools test-arm test-arm-auto test-arm-neon test-arm-ref test-arm-no-dot \
        test-arm-tools test-examples test-docs test-docs-readme test-docs-plugin-guide bench examples \
        clean deps
.DEFAULT_GOAL := all

all: build/tessel

# Dependencies: checked quickly on every build, installed only when something is missing.
deps:
	@scripts/install-deps.sh

# The command line, the conformance runner and the OCR model writer link one object of the
# library (tools/impl.cpp, the TESSEL_IMPLEMENTATION unit), compiled once per target: alone,
# each would compile the whole library again (about 50 s each).
TOOL_OBJ     = build/tool-obj
ARM_TOOL_OBJ = build-arm/tool-obj

$(TOOL_OBJ)/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_LIB) $(OPT) -c $< -o $@

$(ARM_TOOL_OBJ)/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(ARM_CXX) $(CXXFLAGS_LIB) $(OPT) -c $< -o $@

build/tessel: $(TOOL_OBJ)/tools/tessel.o $(TOOL_OBJ)/tools/impl.o
	$(CXX) $^ -o $@ $(LIBS)

build-arm/tessel: $(ARM_TOOL_OBJ)/tools/tessel.o $(ARM_TOOL_OBJ)/tools/impl.o
	$(ARM_CXX) $^ -o $@ $(ARM_LIBS)

# The command line with microprofile zones (tessel run --profile FILE.html), the library with them.
build/tessel-profile: tools/tessel.cpp tools/impl.cpp $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_LIB) $(OPT) -DTESSEL_USE_MICROPROFILE $$(pkg-config --cflags microprofile) tools/tessel.cpp tools/impl.cpp -o $@ $(LIBS) $$(pkg-config --libs microprofile)

arm: build-arm/tessel

demo: build/tessel build/examples/mobilenet_block
	build/tessel demo
	build/examples/mobilenet_block build/mobilenet_block.onnx
	build/tessel run build/mobilenet_block.onnx --device HETERO:TEMPLATE,CPU --config TEMPLATE:SUPPORTED_OPS=Conv --perf-counts

build/obj/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_LIB) $(TEST_DEFINES) $(OPT) -c $< -o $@

build-arm/obj/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(ARM_CXX) $(CXXFLAGS_LIB) $(TEST_DEFINES) $(OPT) -c $< -o $@

# The GPU queue tests load this OpenCL library (test/opencl_shim) from beside the test binary.
OPENCL_SHIM     = test/opencl_shim/opencl_shim.cpp
OPENCL_SHIM_FLAGS = -std=c++17 $(WARNINGS) -O2 -g -fPIC -shared

build/libtessel_opencl_shim.so build-asan/libtessel_opencl_shim.so build-tsan/libtessel_opencl_shim.so: $(OPENCL_SHIM) | deps
	@mkdir -p $(@D)
	$(CXX) $(OPENCL_SHIM_FLAGS) $< -o $@ -ldl

build-arm/libtessel_opencl_shim.so: $(OPENCL_SHIM) | deps
	@mkdir -p $(@D)
	$(ARM_CXX) $(OPENCL_SHIM_FLAGS) $< -o $@ -ldl

build/tests: $(HOST_TEST_OBJ) build/libtessel_opencl_shim.so
	$(CXX) $(HOST_TEST_OBJ) -o $@ $(LIBS)

build-arm/tests: $(ARM_TEST_OBJ) build-arm/libtessel_opencl_shim.so
	$(ARM_CXX) $(ARM_TEST_OBJ) -o $@ $(ARM_LIBS)

build/examples/%: examples/%.cpp $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_LIB) $(OPT) $< -o $@ $(LIBS)

build/conformance: $(TOOL_OBJ)/test/conformance/run.o $(TOOL_OBJ)/tools/impl.o
	$(CXX) $^ -o $@ $(LIBS)

build-arm/conformance: $(ARM_TOOL_OBJ)/test/conformance/run.o $(ARM_TOOL_OBJ)/tools/impl.o
	$(ARM_CXX) $^ -o $@ $(ARM_LIBS)

build/bench/%: bench/%.cpp bench/bench_util.h $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_LIB) $(BENCH_OPT) $< -o $@ $(LIBS)

# Not a timing bench: it writes the OCR models (and make test checks them), so it takes the
# tools' object of the library.
build/bench/ocr_models: $(TOOL_OBJ)/bench/ocr_models.o $(TOOL_OBJ)/tools/impl.o
	@mkdir -p $(@D)
	$(CXX) $^ -o $@ $(LIBS)

examples: $(EXAMPLES)

# `make test` runs its builds and suites TEST_JOBS at a time (default: every core); each suite
# prints its log in one piece when it ends, and build/results/ keeps them all.
TEST_JOBS  ?= $(shell nproc 2>/dev/null || echo 2)

test:
	@rm -rf build/results
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) -k test-arm test-host test-examples test-docs; status=$$?; \
	 scripts/summary.sh build/results $$status; exit $$status

# Fits snippets.h's piecewise tables again; --check (in test-host) compares them with the header's.
build/fit_tables: tools/fit_tables.cpp $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_LIB) $(OPT) $< -o $@ -lpthread

# The TESSEL_NO_JIT build links without asmjit at all.
build/nojit-check: test/nojit/check.cpp $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_LIB) $(OPT) $< -o $@ -lpthread

# The host suite once per ISA level (test-host-ref, test-host-avx2, ...), then the tools.
HOST_SUITES = $(HOST_ISAS:%=test-host-%)
test-host: $(HOST_SUITES) test-host-tools

# test/test_partition.cpp checks hetero.h's graph algorithms, which no ISA choice reaches: the
# first host suite and the AArch64 NEON suite run it, the other ISA levels skip it.
ISA_FREE_TESTS = --source-file-exclude='*test_partition.cpp'

test-host-%: build/tests
	@scripts/run-check.sh host-$* env TESSEL_ISA=$* build/tests $(if $(filter $(firstword $(HOST_ISAS)),$*),,$(ISA_FREE_TESTS))

# The ONNX backend node tests run beside Debian's libonnx-testdata: ONNX_TESTS=DIR names a folder
# of test folders (such as a checkout of onnx's onnx/backend/test/data/node; empty: Debian's
# only). docs/conformance.md is the table of the default run, so make test compares it only then.
ONNX_TESTS_DEFAULT = ../shared/onnx-tests/node
ONNX_TESTS       ?= $(wildcard $(ONNX_TESTS_DEFAULT))
ONNX_TESTS_LABEL ?= onnx-1.23
CONFORMANCE_ARGS  = $(if $(ONNX_TESTS),--data $(ONNX_TESTS_LABEL)=$(ONNX_TESTS))
CONFORMANCE_DOC_CHECK = $(if $(and $(ONNX_TESTS),$(filter $(ONNX_TESTS_DEFAULT),$(ONNX_TESTS))),yes)

test-host-tools: build/tessel build/nojit-check build/conformance build/fit_tables build/bench/ocr_models
	@scripts/run-check.sh no-jit build/nojit-check
	@mkdir -p build/ocr-models && scripts/run-check.sh ocr-models build/bench/ocr_models build/ocr-models --check
	@scripts/run-check.sh quantize tools/quantize_test.py build/tessel build/ocr-models/ocr_det.onnx
	@scripts/run-check.sh fit-tables build/fit_tables --check
	@for h in $(HEADERS); do \
	   scripts/run-check.sh header-alone-$$h $(CXX) $(HEADER_CHECK) -x c++ $$h || exit 1; \
	   scripts/run-check.sh header-alone-impl-$$h $(CXX) $(HEADER_CHECK) -DTESSEL_IMPLEMENTATION -x c++ $$h || exit 1; \
	 done
	@scripts/run-check.sh tessel-cli scripts/test-cli.sh build/tessel
	@scripts/run-check.sh conformance build/conformance $(CONFORMANCE_ARGS) --table build/conformance.md
	@$(if $(CONFORMANCE_DOC_CHECK),scripts/run-check.sh conformance-doc diff -u docs/conformance.md build/conformance.md,\
	   echo "conformance-doc: not compared (ONNX_TESTS is not $(ONNX_TESTS_DEFAULT))")

# The AArch64 suites under qemu: NEON forced, the reference path, and the ISA detection alone
# (on AArch64 it can only pick NEON, which that test case checks: the whole suite again at the
# detected ISA would repeat the NEON run); the int8 cases again on a core without the dot
# product (Cortex-A72: the smull tile).
test-arm: test-arm-auto test-arm-neon test-arm-ref test-arm-no-dot test-arm-tools

test-arm-auto: build-arm/tests
	@scripts/run-check.sh arm $(QEMU) build-arm/tests --test-case='snippets: ISA names*'

test-arm-neon: build-arm/tests
	@scripts/run-check.sh arm-neon env TESSEL_ISA=neon $(QEMU) build-arm/tests

test-arm-ref: build-arm/tests
	@scripts/run-check.sh arm-ref env TESSEL_ISA=ref $(QEMU) build-arm/tests $(ISA_FREE_TESTS)

test-arm-no-dot: build-arm/tests
	@scripts/run-check.sh arm-no-dot env TESSEL_ISA=neon $(QEMU) -cpu cortex-a72 build-arm/tests --test-case='int8*'

test-arm-tools: build-arm/tessel build-arm/conformance
	@scripts/run-check.sh tessel-cli-arm scripts/test-cli.sh "$(QEMU) build-arm/tessel"
	@scripts/run-check.sh conformance-arm $(QEMU) build-arm/conformance $(CONFORMANCE_ARGS)

EXAMPLE_CHECKS = $(EXAMPLES:build/examples/%=test-example-%)
test-examples: $(EXAMPLE_CHECKS)

test-example-%: build/examples/%
	@scripts/run-check.sh $* $<

# Every C++ block of the README and the plugin guide is a complete program: built, and run
# when it takes no arguments.
test-docs: test-docs-readme test-docs-plugin-guide

test-docs-readme: | deps
	@scripts/run-check.sh readme-blocks scripts/check-readme.sh README.md build/readme-blocks

test-docs-plugin-guide: | deps
	@scripts/run-check.sh plugin-guide-blocks scripts/check-readme.sh docs/plugin-guide.md build/plugin-guide-blocks

# docs/conformance.md is the conformance runner's table; make test fails when the committed one
# differs from what the build gives (a test that passed before and fails now, or a new op).
conformance-doc: build/conformance
	build/conformance --data $(ONNX_TESTS_LABEL)=$(ONNX_TESTS_DEFAULT) --table docs/conformance.md

bench: $(BENCHES)
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf build build-arm build-cmake

-include $(HOST_TEST_OBJ:.o=.d) $(ARM_TEST_OBJ:.o=.d)
-include $(wildcard $(TOOL_OBJ)/*/*.d $(TOOL_OBJ)/*/*/*.d $(ARM_TOOL_OBJ)/*/*.d $(ARM_TOOL_OBJ)/*/*/*.d)

# Fuzzing (clang, ASan + UBSan): `make fuzz FUZZ_SECONDS=N` runs every harness in fuzz/ for N
# seconds from a seed corpus the project writes itself. Not part of `make test`.
FUZZ_SECONDS ?= 60
FUZZ_FLAGS    = -g -O1 -std=c++17 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZERS       = $(patsubst fuzz/%.cpp,build/fuzz/%,$(wildcard fuzz/*.cpp))

build/fuzz/%: fuzz/%.cpp $(wildcard fuzz/*.h) $(HEADERS) | deps
	@mkdir -p $(@D)
	clang++ $(FUZZ_FLAGS) $< -o $@ -lasmjit -lpthread

.PHONY: fuzz
fuzz: $(FUZZERS) build/tessel
	@scripts/fuzz-seeds.sh build/tessel build/fuzz/corpus-onnx_model build/fuzz/corpus-blob_import
	@mkdir -p build/fuzz/corpus-graph_text
	@printf '1 A\n2 A 1\n3 A 2\n4 B 2\n5 A 3 4\n6 A 5\n7 A 6\n' > build/fuzz/corpus-graph_text/seed
	@printf 'x A\ny B\na A x\nd B y\nb B a y\nc A x d\n' > build/fuzz/corpus-graph_text/deadlock
	@printf 'A0 ACC\nA1 ACC A0\nA2 ACC A1 A0\nX0 CPU A2\nA3 ACC X0\nA4 ACC X0\nB0 ACC !A0 !A4\n' > build/fuzz/corpus-graph_text/note
	@for f in $(FUZZERS); do \
	   name=$$(basename $$f); mkdir -p build/fuzz/corpus-$$name; \
	   echo "== $$name for $(FUZZ_SECONDS) s"; \
	   $$f build/fuzz/corpus-$$name -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 2>&1 | tail -12 || exit 1; \
	 done

# Sanitizers: the host suite built with clang (SAN_CXX) under ASan + UBSan (LSan finds leaks,
# e.g. of the allocation-fault test) and under TSan (TSAN_TESTS narrows it, e.g. to
# '*thread*,*async*,*concurren*'). The two builds and the two runs go side by side, SAN_JOBS
# jobs at a time. Logs go to build/results/sanitize-*.log like scripts/run-check.sh's; the last
# line adds up only these ("N passed, N failed"), so .ci/run can add it to make test's.
SAN_CXX     ?= clang++
SAN_FLAGS    = -std=c++17 -fno-exceptions -fno-rtti $(WARNINGS) -I. -MMD -MP -O1 -g -fno-omit-frame-pointer
ASAN_FLAGS   = -fsanitize=address,undefined -fno-sanitize-recover=undefined
TSAN_FLAGS   = -fsanitize=thread
TSAN_TESTS  ?= *
ASAN_TEST_OBJ = $(TEST_SRC:%.cpp=build-asan/obj/%.o)
TSAN_TEST_OBJ = $(TEST_SRC:%.cpp=build-tsan/obj/%.o)

build-asan/obj/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(SAN_CXX) $(SAN_FLAGS) $(ASAN_FLAGS) $(TEST_DEFINES) -c $< -o $@

build-tsan/obj/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(SAN_CXX) $(SAN_FLAGS) $(TSAN_FLAGS) $(TEST_DEFINES) -c $< -o $@

build-asan/tests: $(ASAN_TEST_OBJ) build-asan/libtessel_opencl_shim.so
	$(SAN_CXX) $(ASAN_FLAGS) $(ASAN_TEST_OBJ) -o $@ $(LIBS)

build-tsan/tests: $(TSAN_TEST_OBJ) build-tsan/libtessel_opencl_shim.so
	$(SAN_CXX) $(TSAN_FLAGS) $(TSAN_TEST_OBJ) -o $@ $(LIBS)

.PHONY: test-sanitize test-sanitize-asan test-sanitize-tsan
SAN_JOBS    ?= $(TEST_JOBS)
test-sanitize: | deps
	@mkdir -p build/results; rm -f build/results/sanitize-*.log
	@$(MAKE) --no-print-directory -j$(SAN_JOBS) -k test-sanitize-asan test-sanitize-tsan; status=$$?; \
	 dir=$$(mktemp -d); cp build/results/sanitize-*.log $$dir/ 2>/dev/null; \
	 scripts/summary.sh $$dir $$status; rm -rf $$dir; exit $$status

test-sanitize-asan: build-asan/tests build-asan/nojit-check
	@scripts/run-check.sh sanitize-asan-ubsan env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 build-asan/tests
	@scripts/run-check.sh sanitize-asan-no-jit build-asan/nojit-check

# The TESSEL_NO_JIT build under clang's warnings too (some, like unused private fields, are clang's alone).
build-asan/nojit-check: test/nojit/check.cpp $(HEADERS) | deps
	@mkdir -p $(@D)
	$(SAN_CXX) $(SAN_FLAGS) $(ASAN_FLAGS) $< -o $@ -lpthread

test-sanitize-tsan: build-tsan/tests
	@scripts/run-check.sh sanitize-tsan env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	   build-tsan/tests '-tc=$(TSAN_TESTS)'

-include $(ASAN_TEST_OBJ:.o=.d) $(TSAN_TEST_OBJ:.o=.d)

.PHONY: clean-sanitize
clean: clean-sanitize
clean-sanitize:
	rm -rf build-asan build-tsan
