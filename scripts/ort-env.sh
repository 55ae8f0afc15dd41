# ort-env.sh, sourced by the bench scripts from the repository's root: installs onnxruntime-node
# (npm, CPU provider) into build/ort on first use and points NODE_PATH at it. ORT_ISA=avx2 points
# it at build/ort-avx2 instead, a copy that runs onnxruntime's kernels for CPUs without AVX-512
# (scripts/ort-without-avx512.py), for comparisons at TESSEL_ISA=avx2. `make test` never needs it.
if [ ! -d build/ort/node_modules/onnxruntime-node ]; then
  mkdir -p build/ort
  # --ignore-scripts: the package's install script only fetches GPU providers, from outside npm
  npm install --prefix build/ort --no-audit --no-fund --ignore-scripts onnxruntime-node >/dev/null
fi
case "${ORT_ISA:-}" in
  "") ort_dir=build/ort ;;
  avx2)
    ort_dir=build/ort-avx2
    if [ ! build/ort-avx2/patched -nt build/ort/node_modules/onnxruntime-node/package.json ]; then
      scripts/ort-without-avx512.py build/ort/node_modules build/ort-avx2/node_modules >&2
      touch build/ort-avx2/patched
    fi ;;
  *) echo "ORT_ISA=$ORT_ISA: only avx2 (or unset: onnxruntime's own choice)" >&2; exit 2 ;;
esac
export NODE_PATH=$PWD/$ort_dir/node_modules
