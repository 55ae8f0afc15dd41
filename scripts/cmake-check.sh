#!/usr/bin/env bash
# cmake-check.sh: checks the CMake build from the repo root (CI runs it after `make test`).
#   1. host: configure + build + ctest in build-cmake/host
#   2. install: `cmake --install` into a temp prefix, then a generated consumer project uses
#      find_package(tessel REQUIRED) + tessel::tessel, builds and runs
#   3. subdirectory: the same consumer through add_subdirectory
#   4. arm (only with CMAKE_CHECK_ARM=1; `make test` already runs AArch64): configure with
#      cmake/aarch64-linux-gnu.cmake in build-cmake/arm, build, ctest under qemu-aarch64
# Quiet: cmake/ctest output goes to build-cmake/cmake-check.log and is printed on failure.
# Ends with `cmake-check: N passed, M failed`; exit status non-zero if any check failed.
# JOBS (default 2) sets the build parallelism.
set -euo pipefail

root=$(pwd)
if [ ! -f "$root/CMakeLists.txt" ] || [ ! -f "$root/hetero.h" ]; then
  echo "cmake-check: run from the tessel repo root" >&2
  exit 2
fi
jobs=${JOBS:-2}
mkdir -p build-cmake
log=$root/build-cmake/cmake-check.log
: > "$log"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessel-cmake-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0

# check NAME FUNCTION: runs FUNCTION with its output in the log; on failure prints that
# check's part of the log.
check() {
  local name=$1 fn=$2 part=$tmp/$1.log status=0
  echo "== cmake-check $name" >> "$log"
  # set -e holds inside the subshell only when its status is not tested (no `||` here).
  set +e
  ( set -euo pipefail; "$fn" ) > "$part" 2>&1
  status=$?
  set -e
  cat "$part" >> "$log"
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    echo "cmake-check: $name ok"
  else
    failed=$((failed + 1))
    echo "cmake-check: $name FAILED (exit $status); its log:"
    sed 's/^/    /' "$part"
  fi
}

check_host() {
  cmake -S "$root" -B "$root/build-cmake/host"
  cmake --build "$root/build-cmake/host" -j "$jobs"
  ctest --test-dir "$root/build-cmake/host" --output-on-failure
}

check_arm() {
  cmake -S "$root" -B "$root/build-cmake/arm" \
    -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake"
  cmake --build "$root/build-cmake/arm" -j "$jobs"
  ctest --test-dir "$root/build-cmake/arm" --output-on-failure
}

# The consumer: the library's "Do this" in one file, a 2-node graph read from text.
write_consumer() {  # DIR MODE(package|subdirectory)
  local dir=$1 mode=$2
  mkdir -p "$dir"
  cat > "$dir/main.cpp" <<'CPP'
#define TESSEL_IMPLEMENTATION
#include "hetero.h"
#include <cstdio>

int main() {
    tessel::Arena arena;
    tessel::Graph graph(&arena);
    if (tessel::read_text(tessel::StringView("a CPU\nb CPU a\n"), &graph) != tessel::Status::Ok) {
        std::printf("read_text: %s\n", graph.last_error());
        return 1;
    }
    if (graph.node_count() != 2 || graph.edge_count() != 1) {
        std::printf("expected 2 nodes and 1 edge, got %u and %u\n", graph.node_count(), graph.edge_count());
        return 1;
    }
    std::printf("consumer: tessel %d.%d.%d, %u nodes\n", TESSEL_VERSION_MAJOR, TESSEL_VERSION_MINOR,
                TESSEL_VERSION_PATCH, graph.node_count());
    return 0;
}
CPP
  {
    echo "cmake_minimum_required(VERSION 3.16)"
    echo "project(tessel_consumer LANGUAGES CXX)"
    if [ "$mode" = package ]; then
      echo "find_package(tessel REQUIRED)"
      echo "get_target_property(inc tessel::tessel INTERFACE_INCLUDE_DIRECTORIES)"
      echo "message(STATUS \"tessel \${tessel_VERSION} from \${tessel_DIR}, include \${inc}\")"
    else
      echo "add_subdirectory(\"$root\" tessel)"
      # A subproject must not build tessel's tests or install rules by default.
      echo "if(TARGET tessel_tests OR TARGET tessel_cli)"
      echo "  message(FATAL_ERROR \"add_subdirectory built tessel's tests\")"
      echo "endif()"
    fi
    echo "add_executable(consumer main.cpp)"
    echo "target_link_libraries(consumer PRIVATE tessel::tessel)"
    # The headers must be warning-free in a user's default build (exceptions and RTTI on).
    echo "target_compile_options(consumer PRIVATE -Wall -Wextra -Werror)"
  } > "$dir/CMakeLists.txt"
}

check_install() {
  local prefix=$tmp/prefix
  cmake --install "$root/build-cmake/host" --prefix "$prefix"
  for h in hetero.h snippets.h runtime.h; do test -f "$prefix/include/$h"; done
  write_consumer "$tmp/consumer-package" package
  # Only the temp prefix may provide tessel: no package registry, no source tree.
  cmake -S "$tmp/consumer-package" -B "$tmp/consumer-package/build" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  cmake --build "$tmp/consumer-package/build" -j "$jobs"
  "$tmp/consumer-package/build/consumer"
}

check_subdirectory() {
  write_consumer "$tmp/consumer-subdirectory" subdirectory
  cmake -S "$tmp/consumer-subdirectory" -B "$tmp/consumer-subdirectory/build"
  cmake --build "$tmp/consumer-subdirectory/build" -j "$jobs"
  "$tmp/consumer-subdirectory/build/consumer"
}

check host check_host
check install-consumer check_install
check subdirectory-consumer check_subdirectory
if [ "${CMAKE_CHECK_ARM:-0}" = 1 ]; then
  check arm check_arm
fi

echo "cmake-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
