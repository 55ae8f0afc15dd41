#!/usr/bin/env bash
# nodes-vs-ort.sh MODEL [THREADS] [RUNS]: where the time goes, Tessel against onnxruntime, for one
# model: per-op-class totals of each side's per-node medians (`tessel run --perf-counts`,
# onnxruntime's session profiler), then the Conv-like nodes of both in execution order side by side
# (onnxruntime renames fused nodes, so they pair by position, or by name where it kept them: a
# QOperator model's QLinearConvs; Tessel's "+Add" convs include the residual QLinearAdd onnxruntime
# runs apart). onnxruntime comes from
# scripts/ort-env.sh (ORT_ISA=avx2: its kernels for CPUs without AVX-512).
set -eu
model=$1 threads=${2:-1} runs=${3:-20} tessel=${TESSEL:-build/tessel}   # TESSEL: another build, for A/B
cd "$(dirname "$0")/.."
. scripts/ort-env.sh
data=build/bench-vs-ort/data_$(basename "$model" .onnx)
[ -d "$data" ] || node scripts/ort-bench.js inputs "$model" "$data" 2>/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tessel" run "$model" --inputs "$data" --bench "$runs" --no-reference --threads "$threads" --perf-counts 2>&1 |
  awk '/^node +device/ { on = 1; next } /^time CPU/ { on = 0 } on && NF >= 4 { print $1, $3, $NF }' >"$tmp/tessel"
node scripts/ort-bench.js profile "$model" "$data" "$runs" "$threads" 2>/dev/null >"$tmp/ort"
python3 - "$tmp/tessel" "$tmp/ort" <<'PY'
import sys, collections
def read(path, kind):
    rows = []
    for line in open(path):
        name, op, us = line.split()
        if kind == 'tessel':   # kernel names look like gemm:avx512:Conv+epilogue:1 or ref:Concat
            parts = op.split(':')
            op = next((p.split('+')[0] for p in parts if p[:1].isupper()), op)
            if parts[0] in ('snippet',): op = 'Elementwise'
            if op == 'QLinearConv': op = 'Conv'
        else:
            if op in ('Add', 'Mul', 'Relu', 'Sigmoid', 'HardSigmoid', 'Sub', 'Div', 'Clip'): op = 'Elementwise'
            if op in ('FusedConv', 'QLinearConv'): op = 'Conv'
        rows.append((name, op, float(us)))
    return rows
t, o = read(sys.argv[1], 'tessel'), read(sys.argv[2], 'ort')
st, so = collections.Counter(), collections.Counter()
for _, op, us in t: st[op] += us
for _, op, us in o: so[op] += us
print('%-22s %10s %10s %7s' % ('op class', 'tessel_us', 'ort_us', 'ratio'))
for op in sorted(set(st) | set(so), key=lambda k: -max(st[k], so[k])):
    print('%-22s %10.0f %10.0f %7s' % (op, st[op], so[op], '%.2f' % (st[op] / so[op]) if so[op] else '-'))
print('%-22s %10.0f %10.0f %7.2f' % ('total', sum(st.values()), sum(so.values()), sum(st.values()) / max(1, sum(so.values()))))
tc = [r for r in t if r[1] in ('Conv', 'ConvTranspose')]
oc = [r for r in o if r[1] in ('Conv', 'ConvTranspose')]
# where onnxruntime kept the names (a QOperator model's QLinearConvs, less a _token_N suffix), in Tessel's order
import re
by_name = {re.sub(r'_token_\d+$', '', r[0]): r for r in oc}
if tc and all(r[0] in by_name for r in tc):
    oc = [by_name[r[0]] for r in tc]
print('\n%-4s %-28s %9s  %-34s %9s %6s' % ('#', 'tessel conv', 'us', 'onnxruntime conv', 'us', 'ratio'))
for i in range(max(len(tc), len(oc))):
    a = tc[i] if i < len(tc) else ('', '', 0)
    b = oc[i] if i < len(oc) else ('', '', 0)
    print('%-4d %-28s %9.1f  %-34s %9.1f %6s' % (i, a[0], a[2], b[0], b[2], '%.2f' % (a[2] / b[2]) if b[2] else '-'))
PY
