# Toolchain: AArch64 Linux with Debian's cross compiler, tests run under qemu-user.
#   cmake -S . -B build-cmake/arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   (or -DTESSEL_ARM=ON, which selects this file)
# Needs g++-aarch64-linux-gnu, qemu-user and libasmjit-dev:arm64 (scripts/install-deps.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Debian multiarch: target libraries live in /usr/lib/aarch64-linux-gnu (libasmjit-dev:arm64),
# the target's libc in /usr/aarch64-linux-gnu. Searching /usr with this library architecture
# finds the arm64 libasmjit.a and never the host's /usr/lib/x86_64-linux-gnu copy; the
# headers in /usr/include are shared by both architectures.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# ctest (and add_custom_command with a target) run target programs through qemu.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
