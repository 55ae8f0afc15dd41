// The OpenCL shim (test/opencl_shim, libtessel_opencl_shim.so beside the test binary) for the
// GPU tests: its controls, loaded once per process, and a Core whose GPU loads it. It forwards
// to libOpenCL.so.1 when that has a device (not under sanitizers: the driver's own allocations
// would count as leaks) and fakes a device elsewhere.
#pragma once

#include <doctest/doctest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "runtime.h"
#include "test_helpers.h"

namespace test {

struct Shim {
    std::string path;
    int (*forward)(const char*) = nullptr;
    int (*forwarding)() = nullptr;
    void (*fail)(const char*, int, int) = nullptr;
    void (*fail_kernel)(int) = nullptr;
    void (*release)() = nullptr;
    long (*live)() = nullptr;
    long (*calls)(const char*) = nullptr;   // clCreateBuffer, clCreateSubBuffer, clEnqueueRead/WriteBuffer, clEnqueueMapBuffer
    void (*set_unified)(int) = nullptr;     // CL_DEVICE_HOST_UNIFIED_MEMORY as answered: 0, 1, or -1 (the driver's)
    int (*holding)() = nullptr;             // a kernel held by fail_kernel(1) is enqueued
};

inline const Shim& shim() {
    static Shim s;
    static bool loaded = false;
    if (loaded) return s;
    loaded = true;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(n > 0);
    exe[n] = 0;
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/'));
    s.path = dir + "/libtessel_opencl_shim.so";
    void* h = dlopen(s.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    INFO(s.path << ": " << std::string(h ? "" : dlerror()));
    REQUIRE(h != nullptr);
    s.forward = reinterpret_cast<int (*)(const char*)>(dlsym(h, "tessel_opencl_shim_forward"));
    s.forwarding = reinterpret_cast<int (*)()>(dlsym(h, "tessel_opencl_shim_forwarding"));
    s.fail = reinterpret_cast<void (*)(const char*, int, int)>(dlsym(h, "tessel_opencl_shim_fail"));
    s.fail_kernel = reinterpret_cast<void (*)(int)>(dlsym(h, "tessel_opencl_shim_fail_kernel"));
    s.release = reinterpret_cast<void (*)()>(dlsym(h, "tessel_opencl_shim_release"));
    s.live = reinterpret_cast<long (*)()>(dlsym(h, "tessel_opencl_shim_live"));
    s.calls = reinterpret_cast<long (*)(const char*)>(dlsym(h, "tessel_opencl_shim_calls"));
    s.set_unified = reinterpret_cast<void (*)(int)>(dlsym(h, "tessel_opencl_shim_set_unified"));
    s.holding = reinterpret_cast<int (*)()>(dlsym(h, "tessel_opencl_shim_holding"));
    REQUIRE((s.forward && s.forwarding && s.fail && s.fail_kernel && s.release && s.live && s.calls && s.set_unified && s.holding));
    if (!kSanitizer) {
        tessel::Core plain;
        const char* library = std::getenv("TESSEL_OPENCL_LIBRARY");
        if (plain.device("GPU")->check_available() == tessel::Status::Ok && s.forward(library && *library ? library : "libOpenCL.so.1") != 0)
            MESSAGE("the OpenCL driver does not load through the shim");
    }
    MESSAGE(std::string(s.forwarding() ? "the OpenCL shim forwards to the driver" : "the OpenCL shim fakes a device"));
    return s;
}

// A Core whose GPU loads the shim (the env var is read when the device is made).
struct ShimCore {
    tessel::Core* core = nullptr;
    ShimCore() {
        const char* before = std::getenv("TESSEL_OPENCL_LIBRARY");
        std::string saved = before ? before : "";
        setenv("TESSEL_OPENCL_LIBRARY", shim().path.c_str(), 1);
        core = new tessel::Core;
        if (before) setenv("TESSEL_OPENCL_LIBRARY", saved.c_str(), 1);
        else unsetenv("TESSEL_OPENCL_LIBRARY");
    }
    ~ShimCore() { delete core; }
};

// Whether the shim's GPU runs here (not in a build without OpenCL).
inline bool shim_gpu_ready(tessel::Core* core) {
    tessel::Device* gpu = core->device("GPU");
    REQUIRE(gpu != nullptr);
    if (gpu->check_available() == tessel::Status::Ok) return true;
    std::string why = gpu->last_error();
    MESSAGE("GPU unavailable: " << why);
    CHECK(why.find("this build has no OpenCL") != std::string::npos);
    return false;
}

// Runs body(shim, core) with a Core whose GPU loads the shim, once answering that the device
// shares memory with the CPU and once that it does not; returns early where no GPU runs.
template <class Body> void on_shim_gpu_each_memory(Body body) {
    const Shim& s = shim();
    for (int unified : {1, 0}) {
        CAPTURE(unified);
        s.set_unified(unified);
        {
            ShimCore shim_core;
            if (!shim_gpu_ready(shim_core.core)) { s.set_unified(-1); return; }
            body(s, *shim_core.core);
        }
        s.set_unified(-1);
    }
}

}  // namespace test
