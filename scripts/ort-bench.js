#!/usr/bin/env node
// The onnxruntime side of scripts/bench-vs-ort.sh (npm's onnxruntime-node, CPU provider).
//   node ort-bench.js matmul M K N OUT.onnx         a MatMul model: A [M,K] input, B [K,N] constant
//   node ort-bench.js inputs MODEL DIR              writes seeded inputs (DIR/input_K.pb) and
//                                                   onnxruntime's outputs (DIR/output_K.pb)
//   node ort-bench.js time MODEL DIR RUNS THREADS   prints "ort_ms median=... min=..." for RUNS
//                                                   runs on DIR's inputs (after 3 warm-up runs)
//   node ort-bench.js profile MODEL DIR RUNS THREADS  prints "node op median_us" per node from
//                                                   onnxruntime's session profiling
// Tensors are read and written as ONNX TensorProto files, the format `tessel run --inputs` reads.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

// >>protobuf: just the fields of TensorProto and ModelProto this script writes or reads
function varint(n) {
    const out = [];
    let v = BigInt(n);
    if (v < 0n) v += 1n << 64n;
    do {
        let b = Number(v & 0x7fn);
        v >>= 7n;
        if (v) b |= 0x80;
        out.push(b);
    } while (v);
    return Buffer.from(out);
}
const field = (number, wire, body) => Buffer.concat([varint((number << 3) | wire), body]);
const lengthField = (number, bytes) => field(number, 2, Buffer.concat([varint(bytes.length), bytes]));
const intField = (number, value) => field(number, 0, varint(value));
const stringField = (number, s) => lengthField(number, Buffer.from(s, 'utf8'));

const kTypes = {float32: 1, uint8: 2, int8: 3, int32: 6, int64: 7, bool: 9, float64: 11};
const kArrays = {1: Float32Array, 2: Uint8Array, 3: Int8Array, 6: Int32Array, 7: BigInt64Array, 9: Uint8Array, 11: Float64Array};

function tensorProto(name, dims, code, data) {
    const raw = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    return Buffer.concat([...dims.map((d) => intField(1, d)), intField(2, code), stringField(8, name), lengthField(9, raw)]);
}

function readVarint(buf, at) {
    let v = 0n, shift = 0n;
    for (;;) {
        const b = buf[at.i++];
        v |= BigInt(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
        shift += 7n;
    }
}

function parseTensorProto(buf) {
    const t = {dims: [], code: 0, raw: null};
    const at = {i: 0};
    while (at.i < buf.length) {
        const key = Number(readVarint(buf, at)), number = key >> 3, wire = key & 7;
        if (wire === 0) {
            const v = readVarint(buf, at);
            if (number === 1) t.dims.push(Number(v));
            if (number === 2) t.code = Number(v);
        } else if (wire === 2) {
            const n = Number(readVarint(buf, at));
            const body = buf.subarray(at.i, at.i + n);
            at.i += n;
            if (number === 9) t.raw = body;
            if (number === 1) {   // packed dims
                const inner = {i: 0};
                while (inner.i < body.length) t.dims.push(Number(readVarint(body, inner)));
            }
        } else if (wire === 5) at.i += 4;
        else if (wire === 1) at.i += 8;
        else throw new Error('unsupported wire type ' + wire);
    }
    if (!t.raw) throw new Error('tensor without raw_data');
    const Array = kArrays[t.code];
    if (!Array) throw new Error('unsupported tensor type ' + t.code);
    const copy = Buffer.from(t.raw);
    t.data = new Array(copy.buffer, copy.byteOffset, copy.byteLength / Array.BYTES_PER_ELEMENT);
    return t;
}

// A seeded uniform [-1, 1) generator (the same inputs on every run of the script).
function generator(seed) {
    let s = seed >>> 0;
    return () => {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        return s / 2147483648 - 1;
    };
}

function valueInfo(name, code, dims) {
    const shape = Buffer.concat(dims.map((d) => lengthField(1, intField(1, d))));
    const tensorType = Buffer.concat([intField(1, code), lengthField(2, shape)]);
    return Buffer.concat([stringField(1, name), lengthField(2, lengthField(1, tensorType))]);
}

function writeMatMul(M, K, N, out) {
    const next = generator(7);
    const b = new Float32Array(K * N).map(() => next());
    const node = Buffer.concat([stringField(1, 'A'), stringField(1, 'B'), stringField(2, 'Y'), stringField(4, 'MatMul')]);
    const graph = Buffer.concat([
        lengthField(1, node), stringField(2, `matmul_${M}x${K}x${N}`), lengthField(5, tensorProto('B', [K, N], 1, b)),
        lengthField(11, valueInfo('A', 1, [M, K])), lengthField(12, valueInfo('Y', 1, [M, N])),
    ]);
    const opset = Buffer.concat([stringField(1, ''), intField(2, 17)]);
    fs.writeFileSync(out, Buffer.concat([intField(1, 8), stringField(2, 'tessel-bench'), lengthField(7, graph), lengthField(8, opset)]));
}

// >>inputs and timing
async function session(model, threads, extra = {}) {
    return ort.InferenceSession.create(model, {
        intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all',
        ...extra,
    });
}

function readInputs(s, dir) {
    const feeds = {};
    s.inputNames.forEach((name, k) => {
        const t = parseTensorProto(fs.readFileSync(path.join(dir, `input_${k}.pb`)));
        const type = Object.keys(kTypes).find((key) => kTypes[key] === t.code);
        feeds[name] = new ort.Tensor(type, t.data, t.dims);
    });
    return feeds;
}

async function writeInputs(model, dir) {
    const s = await session(model, 1);
    fs.mkdirSync(dir, {recursive: true});
    const next = generator(1);
    const feeds = {};
    s.inputNames.forEach((name, k) => {
        const meta = s.inputMetadata[k];
        const dims = meta.shape.map((d) => (typeof d === 'number' && d > 0 ? d : 1));   // free dims: 1
        const count = dims.reduce((a, b) => a * b, 1);
        let data;
        if (meta.type === 'float32') data = new Float32Array(count).map(() => next());
        else if (meta.type === 'int64') data = new BigInt64Array(count).map(() => BigInt(Math.floor((next() + 1) * 4)));
        else if (meta.type === 'int8') data = new Int8Array(count).map(() => Math.floor(next() * 128));   // a quantized model's input
        else if (meta.type === 'uint8') data = new Uint8Array(count).map(() => Math.floor((next() + 1) * 128));
        else throw new Error(`input ${name}: type ${meta.type} is not generated`);
        feeds[name] = new ort.Tensor(meta.type, data, dims);
        fs.writeFileSync(path.join(dir, `input_${k}.pb`), tensorProto(name, dims, kTypes[meta.type], data));
    });
    const results = await s.run(feeds);
    s.outputNames.forEach((name, k) => {
        const t = results[name];
        fs.writeFileSync(path.join(dir, `output_${k}.pb`), tensorProto(name, t.dims, kTypes[t.type], t.data));
    });
}

async function time(model, dir, runs, threads) {
    const s = await session(model, threads);
    const feeds = readInputs(s, dir);
    for (let i = 0; i < 3; ++i) await s.run(feeds);
    const ms = [];
    for (let i = 0; i < runs; ++i) {
        const t0 = process.hrtime.bigint();
        await s.run(feeds);
        ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    ms.sort((a, b) => a - b);
    console.log(`ort_ms median=${ms[Math.floor(ms.length / 2)].toFixed(4)} min=${ms[0].toFixed(4)}`);
}

// Per-node kernel times from onnxruntime's profiler (a JSON trace of "Node" events, microseconds);
// fused nodes keep the name of their first node.
async function profile(model, dir, runs, threads) {
    const prefix = path.join(dir, 'ort_profile');
    const s = await session(model, threads, {enableProfiling: true, profileFilePrefix: prefix});
    const feeds = readInputs(s, dir);
    for (let i = 0; i < 3 + runs; ++i) await s.run(feeds);
    await s.endProfiling();   // onnxruntime-node returns nothing: find the trace by its prefix
    const file = fs.readdirSync(dir).filter((f) => f.startsWith('ort_profile') && f.endsWith('.json'))
        .map((f) => path.join(dir, f)).sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs)[0];
    const times = new Map();
    for (const e of JSON.parse(fs.readFileSync(file, 'utf8'))) {
        if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
        const key = e.name.slice(0, -'_kernel_time'.length) + ' ' + (e.args && e.args.op_name);
        if (!times.has(key)) times.set(key, []);
        times.get(key).push(e.dur);
    }
    fs.unlinkSync(file);
    for (const [key, list] of times) {
        const tail = list.slice(-runs).sort((a, b) => a - b);
        console.log(`${key} ${tail[Math.floor(tail.length / 2)]}`);
    }
}

const [command, ...args] = process.argv.slice(2);
(async () => {
    if (command === 'matmul') writeMatMul(+args[0], +args[1], +args[2], args[3]);
    else if (command === 'inputs') await writeInputs(args[0], args[1]);
    else if (command === 'time') await time(args[0], args[1], +args[2], +args[3]);
    else if (command === 'profile') await profile(args[0], args[1], +args[2], +args[3]);
    else throw new Error('usage: ort-bench.js matmul|inputs|time|profile ...');
})().catch((e) => {
    console.error('ort-bench: ' + e.message);
    process.exit(1);
});
