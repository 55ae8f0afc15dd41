#!/usr/bin/env python3
"""ort-without-avx512.py SRC_NODE_MODULES DST_NODE_MODULES

Copies onnxruntime-node (SRC, as scripts/ort-env.sh installs it) to DST and patches the copy's
libonnxruntime so that onnxruntime runs the kernels it runs on a CPU without AVX-512: onnxruntime
(MLAS and its CPU info) takes AVX-512 only when XCR0 says the OS keeps the zmm and mask state, so
each `xgetbv` (which reads XCR0, ecx = 0) becomes `lea eax, [rcx + 7]`: eax = 7, x87, SSE and AVX
state only. CPUID bits stay, so AVX2, FMA and AVX-VNNI remain where the CPU has them. onnxruntime
has no switch of its own for this; this copy is for benchmarks only (scripts/bench-vs-ort.sh and
bench-int8.sh with ORT_ISA=avx2), never for `make test`.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

XGETBV = bytes([0x0F, 0x01, 0xD0])
LEA_EAX_RCX_7 = bytes([0x8D, 0x41, 0x07])


def sections(lib):
    """(vma, size, file offset) of each section objdump -h lists."""
    out = subprocess.run(["objdump", "-h", lib], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0].isdigit():
            rows.append((int(f[3], 16), int(f[2], 16), int(f[5], 16)))
    return rows


def xgetbv_offsets(lib):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], check=True, capture_output=True, text=True).stdout
    vmas = [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):\s+xgetbv\s*$", out, re.M)]
    offsets = []
    for vma in vmas:
        for start, size, off in sections(lib):
            if start <= vma < start + size:
                offsets.append(vma - start + off)
                break
        else:
            sys.exit(f"ort-without-avx512.py: xgetbv at {vma:#x} lies in no section of {lib}")
    return offsets


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    if not shutil.which("objdump"):
        sys.exit("ort-without-avx512.py: needs objdump (Debian's binutils) to find the xgetbv instructions")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    libs = [p for p in glob.glob(os.path.join(dst, "onnxruntime-node/bin/*/linux/x64/libonnxruntime.so*"), recursive=True)
            if not os.path.islink(p)]
    if not libs:
        sys.exit(f"ort-without-avx512.py: no libonnxruntime.so under {dst}/onnxruntime-node/bin")
    for lib in libs:
        offsets = xgetbv_offsets(lib)
        if not offsets:
            sys.exit(f"ort-without-avx512.py: {lib} has no xgetbv: nothing to patch, refusing to call it AVX2")
        with open(lib, "r+b") as f:
            for off in offsets:
                f.seek(off)
                if f.read(3) != XGETBV:
                    sys.exit(f"ort-without-avx512.py: {lib} at {off:#x} is not xgetbv")
                f.seek(off)
                f.write(LEA_EAX_RCX_7)
        print(f"ort-without-avx512.py: {lib}: {len(offsets)} xgetbv patched to report no AVX-512 state")


if __name__ == "__main__":
    main()
