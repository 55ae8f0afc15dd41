#!/usr/bin/env bash
# check-readme.sh MARKDOWN OUTDIR: builds every ```cpp block of a Markdown file.
#
# Each ```cpp fenced block must be a complete program (a main, and #define
# TESSEL_IMPLEMENTATION before the first Tessel include). Block N (counted from 1 in file
# order) is written to OUTDIR/readme_block_N.cpp and built into OUTDIR/readme_block_N with
#   ${CXX:-g++} -std=c++17 -fno-exceptions -fno-rtti -Wall -Wextra -Werror -I. -O0 ... -lasmjit -lpthread
# from the repository root (so blocks include "hetero.h", "snippets.h", "runtime.h").
#
# Which blocks it runs: every block whose text does not mention `argv` takes no arguments and
# reads no files, so it is also run (from OUTDIR, at most two minutes) and must exit 0. Blocks that mention argv
# (the quick start, which loads an ONNX file named on its command line) are built only.
#
# Prints one line per block ("block N (line L): built", "... built and ran") and exits
# non-zero at the first block that does not build or run, after printing the compiler's or
# the program's output. Exits 2 on bad usage or a file with no ```cpp block.
#
#   scripts/check-readme.sh README.md build/readme
#   scripts/check-readme.sh docs/plugin-guide.md build/readme-plugin
set -uo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 MARKDOWN OUTDIR" >&2
    exit 2
fi
markdown=$1
outdir=$2
if [ ! -f "$markdown" ]; then
    echo "check-readme: no file '$markdown'" >&2
    exit 2
fi
mkdir -p "$outdir" || exit 2
markdown=$(cd "$(dirname "$markdown")" && pwd)/$(basename "$markdown")
outdir=$(cd "$outdir" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2

rm -f "$outdir"/readme_block_*
# Split: block N goes to readme_block_N.cpp; its opening fence's line number to .line.
awk -v out="$outdir" '
    /^```cpp[[:space:]]*$/ && !inside { inside = 1; n++; file = out "/readme_block_" n ".cpp";
                                        printf "" > file; print NR > (out "/readme_block_" n ".line"); next }
    /^```[[:space:]]*$/ && inside      { inside = 0; close(file); next }
    inside                            { print >> file }
    END { if (inside) { print "check-readme: unterminated ```cpp block" > "/dev/stderr"; exit 1 } }
' "$markdown" || exit 2

blocks=$(ls "$outdir"/readme_block_*.cpp 2>/dev/null | wc -l)
if [ "$blocks" -eq 0 ]; then
    echo "check-readme: no \`\`\`cpp block in $markdown" >&2
    exit 2
fi

cxx=${CXX:-g++}
for ((n = 1; n <= blocks; ++n)); do
    source=$outdir/readme_block_$n.cpp
    binary=$outdir/readme_block_$n
    line=$(cat "$outdir/readme_block_$n.line")
    if ! log=$($cxx -std=c++17 -fno-exceptions -fno-rtti -Wall -Wextra -Werror -I. -O0 \
                  "$source" -o "$binary" -lasmjit -lpthread 2>&1); then
        echo "block $n (line $line): does not build ($source)"
        echo "$log"
        exit 1
    fi
    if grep -q 'argv' "$source"; then
        echo "block $n (line $line): built"
        continue
    fi
    log=$(cd "$outdir" && timeout 120 "$binary" 2>&1)   # status 124: it ran over two minutes
    status=$?
    if [ $status -ne 0 ]; then
        echo "block $n (line $line): built, but running it exited with status $status ($binary)"
        echo "$log"
        exit 1
    fi
    echo "block $n (line $line): built and ran"
done
echo "check-readme: $(basename "$markdown"): all $blocks cpp block(s) build"
