#!/usr/bin/env bash
# test-cli.sh "TESSEL_COMMAND": checks the command line's output and exit codes.
# The argument may hold a runner, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu build-arm/tessel".
set -u
tessel=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0; failed=0
check() {  # check NAME EXPECTED_STATUS EXPECTED_STDOUT_FILE -- ARGS...
  local name=$1 want_status=$2 want=$3; shift 4
  $tessel "$@" >"$dir/out" 2>"$dir/err"
  local status=$?
  sed -i 's/time_us=[0-9]*/time_us=T/' "$dir/out"
  if [ "$status" -eq "$want_status" ] && { [ -z "$want" ] || diff -u "$want" "$dir/out"; }; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: $name (status $status, want $want_status)"; cat "$dir/err"
  fi
}
printf '1 A\n2 A 1\n3 A 2\n4 B 2\n5 A 3 4\n6 A 5\n7 A 6\n' > "$dir/seed.txt"
printf 'A: 3 5 6 7\nA: 1 2\nB: 4\n# subgraphs=3 cross_edges=3 algo=rollback time_us=T\n' > "$dir/seed.want"
check "seed example, rollback" 0 "$dir/seed.want" -- partition "$dir/seed.txt"
printf 'A: 1 2 3\nB: 4\nA: 5 6 7\n# subgraphs=3 cross_edges=3 algo=levels time_us=T\n' > "$dir/levels.want"
check "seed example, levels" 0 "$dir/levels.want" -- partition "$dir/seed.txt" --algo levels
printf 'B: 4\nA: 3 5 6 7\nA: 1 2\n# subgraphs=3 cross_edges=3 algo=rollback time_us=T\n' > "$dir/order.want"
check "device order" 0 "$dir/order.want" -- partition "$dir/seed.txt" --devices B,A
check "threads" 0 "$dir/seed.want" -- partition "$dir/seed.txt" --threads 2
check "zero threads" 2 "" -- partition "$dir/seed.txt" --threads 0
grep -qx "tessel: bad --threads '0' (1 to 64)" "$dir/err" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: threads message"; cat "$dir/err"; }
check "threads not a number" 2 "" -- partition "$dir/seed.txt" --threads two
printf 'x A\ny B\na A x\nd B y\nb B a y\nc A x d\n' > "$dir/deadlock.txt"
printf 'A: x a c\nB: y d\nB: b\n# subgraphs=3 cross_edges=3 algo=rollback time_us=T\n' > "$dir/deadlock.want"
check "issue example never deadlocks" 0 "$dir/deadlock.want" -- partition "$dir/deadlock.txt"
check "dot output" 0 "" -- partition "$dir/seed.txt" --dot "$dir/seed.dot"
if grep -q 'subgraph cluster_0' "$dir/seed.dot" 2>/dev/null; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: dot file"; fi
check "trace" 0 "" -- partition "$dir/seed.txt" --trace
if grep -q 'rollback 5: self-reference through 4' "$dir/out"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: trace text"; fi
printf 'a A\nb\n' > "$dir/bad.txt"
check "malformed graph" 2 "" -- partition "$dir/bad.txt"
grep -qx "tessel: line 2: expected '<name> <affinity> \[inputs...\]'" "$dir/err" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: malformed message"; cat "$dir/err"; }
check "missing file" 2 "" -- partition "$dir/none.txt"
check "unknown algorithm" 2 "" -- partition "$dir/seed.txt" --algo best
check "device not listed" 2 "" -- partition "$dir/seed.txt" --devices A
check "no arguments" 2 "" --
check "unknown command" 2 "" -- frobnicate
check "demo" 0 "" -- demo
# Models: ONNX test data (libonnx-testdata), compiled blobs, bad files and options.
data=/usr/share/libonnx-testdata/data/node
relu=$data/test_relu
check "run and compare" 0 "" -- run "$relu/model.onnx" --inputs "$relu/test_data_set_0" --compare "$relu/test_data_set_0"
grep -q "^output 0: ok" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: compare line"; cat "$dir/out"; }
check "compare mismatch exits 1" 1 "" -- run "$relu/model.onnx" --inputs "$relu/test_data_set_0" --compare "$data/test_sigmoid/test_data_set_0"
grep -q "^output 0: MISMATCH" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: mismatch line"; }
check "hetero with a device key" 0 "" -- run "$data/test_add_bcast/model.onnx" --device HETERO:TEMPLATE,CPU --config TEMPLATE:SUPPORTED_OPS=Add --inputs "$data/test_add_bcast/test_data_set_0" --compare "$data/test_add_bcast/test_data_set_0"
grep -q "^device TEMPLATE: 1 nodes" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: placement summary"; cat "$dir/out"; }
check "compile to a blob" 0 "" -- compile "$relu/model.onnx" --device CPU -o "$dir/relu.tcm"
check "run a compiled blob" 0 "" -- run "$dir/relu.tcm" --inputs "$relu/test_data_set_0" --compare "$relu/test_data_set_0"
check "a blob's config overridden at run" 0 "" -- run "$dir/relu.tcm" --threads 2 --perf-counts
grep -q "^Relu_0 .*CPU" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: perf counts of a blob"; cat "$dir/out"; }
check "a blob with a bad ISA" 2 "" -- run "$dir/relu.tcm" --isa nonsense
head -c 100 "$dir/relu.tcm" > "$dir/cut.tcm"
check "truncated blob" 2 "" -- run "$dir/cut.tcm"
grep -q "blob: truncated" "$dir/err" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: truncated blob message"; cat "$dir/err"; }
head -c 40 "$relu/model.onnx" > "$dir/cut.onnx"
check "truncated model" 2 "" -- run "$dir/cut.onnx"
check "missing model" 2 "" -- run "$dir/none.onnx"
check "unknown device" 2 "" -- run "$relu/model.onnx" --device NPU
grep -qx "tessel: $relu/model.onnx: unknown device 'NPU' in 'NPU'" "$dir/err" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: unknown device message"; cat "$dir/err"; }
check "unknown config device" 2 "" -- run "$relu/model.onnx" --config NPU:KEY=1
check "unknown config key" 2 "" -- run "$relu/model.onnx" --config CPU:NO_SUCH_KEY=1
grep -q "device CPU has no config key 'NO_SUCH_KEY'" "$dir/err" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: unknown key message"; cat "$dir/err"; }
check "bad config syntax" 2 "" -- run "$relu/model.onnx" --config NOEQUALS
check "bad shape" 2 "" -- run "$relu/model.onnx" --shape x=1,-2
check "bench" 0 "" -- run "$relu/model.onnx" --bench 3
grep -q "^latency_ms median=" "$dir/out" && grep -q "^reference_ms median=.*speedup=" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: bench lines"; cat "$dir/out"; }
check "bench without the reference" 0 "" -- run "$relu/model.onnx" --bench 3 --no-reference
grep -q "^latency_ms median=" "$dir/out" && ! grep -q "^reference_ms" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: bench --no-reference lines"; cat "$dir/out"; }
check "bench with perf counts" 0 "" -- run "$relu/model.onnx" --bench 3 --no-reference --perf-counts
[ "$(grep -c '^node  *device' "$dir/out")" = 1 ] && grep -q "^time CPU " "$dir/out" && grep -q "^latency_ms median=" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: bench perf counts once, the bench's medians"; cat "$dir/out"; }
check "perf counts and partition dump" 0 "" -- run "$data/test_add_bcast/model.onnx" --device HETERO:TEMPLATE,CPU --config TEMPLATE:SUPPORTED_OPS=Add --perf-counts --dump-partition "$dir/p.dot"
grep -q "ref:Add" "$dir/out" && grep -q "digraph" "$dir/p.dot" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: perf counts or dot"; cat "$dir/out"; }
check "info" 0 "" -- info "$relu/model.onnx" --device HETERO:TEMPLATE,CPU
grep -q "^node 'Relu_0' Relu -> TEMPLATE" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: info placement"; cat "$dir/out"; }
check "devices" 0 "" -- devices
grep -q "^TEMPLATE" "$dir/out" && grep -q "SUPPORTED_CONFIG_KEYS: NUM_THREADS PERF_COUNT FUSION ISA WINOGRAD" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: devices"; cat "$dir/out"; }
# The GPU is listed with its driver's name or as unavailable; with no OpenCL driver (an empty
# vendor folder) it is unavailable and HETERO:GPU,CPU runs everything on CPU.
grep -q "^GPU" "$dir/out" && grep -Eq "^  AVAILABLE: (YES|NO: .+)$" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: GPU listed"; cat "$dir/out"; }
mkdir -p "$dir/no-vendors"
OCL_ICD_VENDORS="$dir/no-vendors" check "devices without an OpenCL driver" 0 "" -- devices
grep -q "^  FULL_DEVICE_NAME: OpenCL device (unavailable: " "$dir/out" && grep -q "^  AVAILABLE: NO: " "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: GPU unavailable"; cat "$dir/out"; }
OCL_ICD_VENDORS="$dir/no-vendors" check "HETERO:GPU,CPU without an OpenCL driver" 0 "" -- run "$relu/model.onnx" --device HETERO:GPU,CPU --inputs "$relu/test_data_set_0" --compare "$relu/test_data_set_0"
check "HETERO:GPU,CPU perf counts" 0 "" -- run "$relu/model.onnx" --device HETERO:GPU,CPU --inputs "$relu/test_data_set_0" --compare "$relu/test_data_set_0" --perf-counts
grep -Eq " (GPU +opencl:1|CPU +snippet)" "$dir/out" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: HETERO:GPU,CPU perf counts"; cat "$dir/out"; }
# Free input dims: Relu on x[batch,3,height,width] (ONNX bytes: ir 8, opset 17, dim_param names).
printf '\x08\x08\x42\x04\x0a\x00\x10\x11\x3a\x6b\x0a\x0c\x0a\x01\x78\x12\x01\x79\x22\x04\x52\x65\x6c\x75\x12\x01\x67\x5a\x2b\x0a\x01\x78\x12\x26\x0a\x24\x08\x01\x12\x20\x0a\x07\x12\x05\x62\x61\x74\x63\x68\x0a\x02\x08\x03\x0a\x08\x12\x06\x68\x65\x69\x67\x68\x74\x0a\x07\x12\x05\x77\x69\x64\x74\x68\x62\x2b\x0a\x01\x79\x12\x26\x0a\x24\x08\x01\x12\x20\x0a\x07\x12\x05\x62\x61\x74\x63\x68\x0a\x02\x08\x03\x0a\x08\x12\x06\x68\x65\x69\x67\x68\x74\x0a\x07\x12\x05\x77\x69\x64\x74\x68' > "$dir/free.onnx"
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAILED: $1"; cat "$dir/out" "$dir/err"; }
check "info, free dims" 0 "" -- info "$dir/free.onnx"
grep -qx "input 0 'x' f32\[batch,3,height,width\]" "$dir/out" && ok || bad "info shows free dims by name"
check "run, free dims at 1" 0 "" -- run "$dir/free.onnx"
grep -qx "free input dims set to 1 (--shape NAME=D1,D2,.. sets them): x f32\[batch,3,height,width\]" "$dir/out" &&
  grep -qx "output 0 'y' f32\[1,3,1,1\]" "$dir/out" && ok || bad "run sets free dims to 1 and says so"
check "run, --shape" 0 "" -- run "$dir/free.onnx" --shape x=2,3,4,5
grep -qx "output 0 'y' f32\[2,3,4,5\]" "$dir/out" && ! grep -q "free input dims" "$dir/out" && ok || bad "run --shape"
check "run, --shape the model cannot take" 2 "" -- run "$dir/free.onnx" --shape x=2,4,4,5
grep -qx "tessel: $dir/free.onnx: input 'x' dim 1 is 3, --shape gives 4" "$dir/err" && ok || bad "bad --shape message"
check "compile, free dims kept" 0 "" -- compile "$dir/free.onnx" -o "$dir/free.blob"
grep -q "^free input dims kept" "$dir/out" && ok || bad "compile keeps free dims"
check "run a symbolic blob at --shape" 0 "" -- run "$dir/free.blob" --shape x=2,3,4,5
grep -qx "output 0 'y' f32\[2,3,4,5\]" "$dir/out" && ok || bad "a symbolic blob plans --shape"
check "run a symbolic blob" 0 "" -- run "$dir/free.blob"
grep -qx "output 0 'y' f32\[1,3,1,1\]" "$dir/out" && ok || bad "a symbolic blob at 1"
check "run a symbolic blob, a shape it cannot take" 2 "" -- run "$dir/free.blob" --shape x=2,4,4,5
grep -qx "tessel: --shape x: input 'x' is f32\[-1,3,-1,-1\] (-1: any size); the tensor given is f32\[2,4,4,5\]" "$dir/err" && ok || bad "symbolic blob, bad shape message"
check "compile, --shape fixes dims" 0 "" -- compile "$dir/free.onnx" --shape x=2,3,4,5 -o "$dir/fixed.blob"
! grep -q "free input dims" "$dir/out" && ok || bad "compile --shape fixes dims"
# A model that cannot take its free dim at 1: Reshape of x[n] to [-1,6].
printf '\x08\x08\x42\x04\x0a\x00\x10\x11\x3a\x5d\x0a\x12\x0a\x01\x78\x0a\x01\x73\x12\x01\x79\x22\x07\x52\x65\x73\x68\x61\x70\x65\x12\x01\x67\x2a\x19\x08\x02\x10\x07\x42\x01\x73\x4a\x10\xff\xff\xff\xff\xff\xff\xff\xff\x06\x00\x00\x00\x00\x00\x00\x00\x5a\x10\x0a\x01\x78\x12\x0b\x0a\x09\x08\x01\x12\x05\x0a\x03\x12\x01\x6e\x62\x17\x0a\x01\x79\x12\x12\x0a\x10\x08\x01\x12\x0c\x0a\x06\x12\x04\x72\x6f\x77\x73\x0a\x02\x08\x06' > "$dir/six.onnx"
check "run, free dims the model cannot take at 1" 2 "" -- run "$dir/six.onnx"
grep -q "with its free input dims at 1: Reshape 'Reshape_0': cannot infer the -1 dimension of 1 elements" "$dir/err" &&
  grep -qx "tessel: give --shape x=D1,D2,.. for f32\[n\]" "$dir/err" && ok || bad "asks for --shape naming the dims"
check "run, --shape where 1 does not fit" 0 "" -- run "$dir/six.onnx" --shape x=12
grep -qx "output 0 'y' f32\[2,6\]" "$dir/out" && ok || bad "--shape x=12"
echo "[cli] test cases: $((passed + failed)) | $passed passed | $failed failed |"
[ "$failed" -eq 0 ]
