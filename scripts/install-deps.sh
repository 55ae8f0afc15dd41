#!/usr/bin/env bash
# Installs Tessel's dependencies from Debian's packages, only what is missing.
# Idempotent and quiet when everything is present. Needs root (or sudo) on Debian 12.
#   scripts/install-deps.sh          host + cross (AArch64) dependencies
#   scripts/install-deps.sh --check  exit 1 if something is missing, install nothing
set -eu

host_packages="libasmjit-dev doctest-dev libmicroprofile-dev g++-aarch64-linux-gnu qemu-user libonnx-testdata clang libclang-rt-14-dev python3-onnx python3-numpy
               opencl-headers ocl-icd-libopencl1 pocl-opencl-icd"
arm_packages="libasmjit-dev:arm64"

missing=""
for p in $host_packages $arm_packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "${1:-}" = "--check" ]; then echo "missing:$missing"; exit 1; fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing$missing" >&2
case "$missing" in
  *":arm64"*)
    dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64 ;;
esac
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
