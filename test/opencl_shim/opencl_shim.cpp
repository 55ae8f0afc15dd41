// An OpenCL library for the GPU device's failure tests, loaded through TESSEL_OPENCL_LIBRARY.
// It forwards to a real ICD loader (tessel_opencl_shim_forward) or, where there is none or
// under sanitizers, fakes a device whose kernels do nothing. Either way the test can make the
// next call of an entry point fail, a kernel end with an error status, or the queue stop until
// released (a lost device), and counts the live OpenCL objects to find leaks.
// Built by the Makefile as libtessel_opencl_shim.so beside the tests.
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <dlfcn.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#define SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

#define SHIM_FUNCTIONS(X)                                                                                              \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext)                   \
    X(clRetainContext) X(clReleaseContext) X(clCreateCommandQueue) X(clReleaseCommandQueue)                             \
    X(clCreateProgramWithSource) X(clCreateProgramWithBinary) X(clBuildProgram) X(clGetProgramBuildInfo)                \
    X(clGetProgramInfo) X(clReleaseProgram) X(clCreateKernel) X(clReleaseKernel) X(clSetKernelArg) X(clCreateBuffer)    \
    X(clReleaseMemObject) X(clRetainMemObject) X(clEnqueueNDRangeKernel) X(clEnqueueMapBuffer)                          \
    X(clEnqueueUnmapMemObject) X(clFinish) X(clGetEventProfilingInfo) X(clReleaseEvent) X(clWaitForEvents) X(clFlush)   \
    X(clGetEventInfo) X(clSetEventCallback) X(clRetainEvent) X(clCreateUserEvent) X(clSetUserEventStatus) \
    X(clGetCommandQueueInfo) X(clCreateSubBuffer) X(clEnqueueReadBuffer) X(clEnqueueWriteBuffer)

struct Real {
#define SHIM_POINTER(name) decltype(&::name) name = nullptr;
    SHIM_FUNCTIONS(SHIM_POINTER)
#undef SHIM_POINTER
};

std::mutex mutex;
std::condition_variable released;
Real real_api;
const Real* real = nullptr;      // null: the fake device
std::atomic<long> live{0};       // objects created or retained minus released

// One injected fault: the call after `skip` more calls of `function` returns `error`.
struct Fault {
    char function[64] = {};
    cl_int error = CL_SUCCESS;
    int skip = 0;
};
Fault faults[4];
// The next kernel ends with this status (negative), or stops the queue (kHang).
constexpr cl_int kHang = 1;
cl_int kernel_fault = CL_SUCCESS;

bool take_fault(const char* function, cl_int* error) {
    std::lock_guard<std::mutex> lock(mutex);
    for (Fault& fault : faults) {
        if (!fault.function[0] || std::strcmp(fault.function, function)) continue;
        if (fault.skip-- > 0) return false;
        *error = fault.error;
        fault.function[0] = 0;
        return true;
    }
    return false;
}

#define SHIM_FAULT(name, ...)                                      \
    do {                                                           \
        cl_int shim_error_;                                        \
        if (take_fault(#name, &shim_error_)) return __VA_ARGS__;   \
    } while (0)

// ---- the fake device ----
struct FakeEvent;
struct FakeObject {
    virtual ~FakeObject() { if (parent && --parent->refs == 0) delete parent; }
    std::atomic<int> refs{1};
    void* host = nullptr;          // a buffer's memory
    size_t size = 0;
    std::vector<char> own;         // a buffer's memory when made without a host pointer
    FakeObject* parent = nullptr;  // a sub-buffer's buffer (held)
};
struct FakeEvent : FakeObject {
    cl_int status = CL_COMPLETE;
    std::vector<std::pair<void(CL_CALLBACK*)(cl_event, cl_int, void*), void*>> callbacks;
};
// Events of a stopped queue, ended in order by tessel_opencl_shim_release.
std::vector<FakeEvent*> pending;
bool stopped = false;
int fake_platform, fake_device;

template <class T> T handle(FakeObject* o) { return reinterpret_cast<T>(o); }
template <class T> FakeObject* object(T h) { return reinterpret_cast<FakeObject*>(h); }

void fake_release(FakeObject* o) {
    if (o && --o->refs == 0) delete o;
}

// A new event of the fake queue: ended now, or held while the queue is stopped.
void fake_event(cl_int status, cl_event* out) {
    FakeEvent* e = new FakeEvent;
    {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopped) {
            e->status = CL_SUBMITTED;
            e->refs++;   // the queue's reference
            pending.push_back(e);
        } else {
            e->status = status;
        }
    }
    if (!out) { fake_release(e); return; }
    *out = handle<cl_event>(e);
    ++live;
}

cl_int copy_info(const void* value, size_t size, size_t param_size, void* param, size_t* size_ret) {
    if (size_ret) *size_ret = size;
    if (param) {
        if (param_size < size) return CL_INVALID_VALUE;
        std::memcpy(param, value, size);
    }
    return CL_SUCCESS;
}

void count_new(cl_int* error, bool made) {
    if (made && (!error || *error == CL_SUCCESS)) ++live;
}

// Calls per entry point for the tests (the ones that make or move memory).
const char* const kCounted[] = {"clCreateBuffer", "clCreateSubBuffer", "clEnqueueReadBuffer", "clEnqueueWriteBuffer",
                                "clEnqueueMapBuffer"};
std::atomic<long> calls[sizeof kCounted / sizeof kCounted[0]];
void count_call(const char* function) {
    for (size_t i = 0; i < sizeof kCounted / sizeof kCounted[0]; ++i)
        if (!std::strcmp(kCounted[i], function)) ++calls[i];
}
// -1: the driver's answer; 0 or 1: CL_DEVICE_HOST_UNIFIED_MEMORY as the test sets it.
std::atomic<int> unified_override{-1};

}  // namespace

// ---- control, for the tests ----
// Forwards to `library` (a real ICD loader): 0, or -1 when it does not load. Before any other call.
SHIM_EXPORT int tessel_opencl_shim_forward(const char* library) {
    void* h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
#define SHIM_LOAD(name) real_api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name)); if (!real_api.name) return -1;
    SHIM_FUNCTIONS(SHIM_LOAD)
#undef SHIM_LOAD
    real = &real_api;
    return 0;
}
SHIM_EXPORT int tessel_opencl_shim_forwarding() { return real != nullptr; }
// The call of `function` after `skip` more calls returns `error` (once); up to 4 at a time.
SHIM_EXPORT void tessel_opencl_shim_fail(const char* function, int error, int skip) {
    std::lock_guard<std::mutex> lock(mutex);
    for (Fault& fault : faults) {
        if (fault.function[0]) continue;
        std::snprintf(fault.function, sizeof fault.function, "%s", function);
        fault.error = error;
        fault.skip = skip;
        return;
    }
}
// The next kernel ends with `status` (negative), or with 1 stops the queue until released.
SHIM_EXPORT void tessel_opencl_shim_fail_kernel(int status) {
    std::lock_guard<std::mutex> lock(mutex);
    kernel_fault = status;
}
SHIM_EXPORT long tessel_opencl_shim_live() { return live.load(); }
// Calls of `function` so far (one of kCounted; -1 for another).
SHIM_EXPORT long tessel_opencl_shim_calls(const char* function) {
    for (size_t i = 0; i < sizeof kCounted / sizeof kCounted[0]; ++i)
        if (!std::strcmp(kCounted[i], function)) return calls[i].load();
    return -1;
}
// Makes the device answer CL_DEVICE_HOST_UNIFIED_MEMORY with `unified` (0 or 1), or the
// driver's answer again (-1): a device without shared memory on a machine that has one.
SHIM_EXPORT void tessel_opencl_shim_set_unified(int unified) { unified_override = unified; }

namespace {
// Forward mode: the user event that holds a stopped queue's kernel.
cl_event held = nullptr;
// Forward mode: the user event that failed the last failed kernel, released at the next
// failure: PoCL may still be signalling the kernel from it after clSetUserEventStatus returns.
cl_event failed_gate = nullptr;
}  // namespace

// Ends what the stopped queue holds, in order; later commands run at once again.
// Whether a kernel is held now (tessel_opencl_shim_fail_kernel(1) and that kernel enqueued).
SHIM_EXPORT int tessel_opencl_shim_holding() {
    std::lock_guard<std::mutex> lock(mutex);
    return real ? held != nullptr : stopped;
}
SHIM_EXPORT void tessel_opencl_shim_release() {
    if (real) {
        cl_event e = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex);
            e = held;
            held = nullptr;
        }
        if (e) {
            real->clSetUserEventStatus(e, CL_COMPLETE);
            real->clReleaseEvent(e);
        }
        return;
    }
    std::vector<FakeEvent*> ended;
    {
        std::lock_guard<std::mutex> lock(mutex);
        stopped = false;
        ended.swap(pending);
    }
    for (FakeEvent* e : ended) {
        decltype(e->callbacks) callbacks;
        {
            std::lock_guard<std::mutex> lock(mutex);
            e->status = CL_COMPLETE;
            callbacks.swap(e->callbacks);
        }
        for (auto& c : callbacks) c.first(handle<cl_event>(e), CL_COMPLETE, c.second);
        fake_release(e);
    }
    released.notify_all();
}

// ---- the OpenCL entry points ----
SHIM_EXPORT cl_int clGetPlatformIDs(cl_uint n, cl_platform_id* platforms, cl_uint* count) {
    SHIM_FAULT(clGetPlatformIDs, shim_error_);
    if (real) return real->clGetPlatformIDs(n, platforms, count);
    if (count) *count = 1;
    if (platforms && n) platforms[0] = reinterpret_cast<cl_platform_id>(&fake_platform);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clGetPlatformInfo(cl_platform_id p, cl_platform_info what, size_t size, void* value, size_t* size_ret) {
    if (real) return real->clGetPlatformInfo(p, what, size, value, size_ret);
    const char* name = "Tessel fake OpenCL";
    return copy_info(name, std::strlen(name) + 1, size, value, size_ret);
}

SHIM_EXPORT cl_int clGetDeviceIDs(cl_platform_id p, cl_device_type type, cl_uint n, cl_device_id* devices, cl_uint* count) {
    if (real) return real->clGetDeviceIDs(p, type, n, devices, count);
    if (count) *count = 1;
    if (devices && n) devices[0] = reinterpret_cast<cl_device_id>(&fake_device);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clGetDeviceInfo(cl_device_id d, cl_device_info what, size_t size, void* value, size_t* size_ret) {
    if (what == CL_DEVICE_HOST_UNIFIED_MEMORY && unified_override >= 0) {
        cl_bool b = unified_override ? CL_TRUE : CL_FALSE;
        return copy_info(&b, sizeof b, size, value, size_ret);
    }
    if (real) return real->clGetDeviceInfo(d, what, size, value, size_ret);
    const char* text = nullptr;
    switch (what) {
        case CL_DEVICE_NAME: text = "fake device"; break;
        case CL_DEVICE_VERSION: text = "OpenCL 1.2 fake"; break;
        case CL_DRIVER_VERSION: text = "1.0"; break;
        default: break;
    }
    if (text) return copy_info(text, std::strlen(text) + 1, size, value, size_ret);
    if (what == CL_DEVICE_TYPE) { cl_device_type t = CL_DEVICE_TYPE_GPU; return copy_info(&t, sizeof t, size, value, size_ret); }
    if (what == CL_DEVICE_HOST_UNIFIED_MEMORY) { cl_bool b = CL_TRUE; return copy_info(&b, sizeof b, size, value, size_ret); }
    if (what == CL_DEVICE_GLOBAL_MEM_SIZE || what == CL_DEVICE_SINGLE_FP_CONFIG) {
        cl_ulong v = what == CL_DEVICE_GLOBAL_MEM_SIZE ? (1ull << 30) : 0;
        return copy_info(&v, sizeof v, size, value, size_ret);
    }
    cl_uint one = 1;   // compute units, clock, vector width, alignment
    return copy_info(&one, sizeof one, size, value, size_ret);
}

SHIM_EXPORT cl_context clCreateContext(const cl_context_properties* props, cl_uint n, const cl_device_id* devices,
                                       void(CL_CALLBACK* notify)(const char*, const void*, size_t, void*), void* user, cl_int* error) {
    cl_context c = real ? real->clCreateContext(props, n, devices, notify, user, error) : handle<cl_context>(new FakeObject);
    if (!real && error) *error = CL_SUCCESS;
    count_new(error, c != nullptr);
    return c;
}

SHIM_EXPORT cl_int clRetainContext(cl_context c) {
    ++live;
    if (real) return real->clRetainContext(c);
    object(c)->refs++;
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clReleaseContext(cl_context c) {
    --live;
    if (real) return real->clReleaseContext(c);
    fake_release(object(c));
    return CL_SUCCESS;
}

SHIM_EXPORT cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d, cl_command_queue_properties props, cl_int* error) {
    cl_command_queue q = real ? real->clCreateCommandQueue(c, d, props, error) : handle<cl_command_queue>(new FakeObject);
    if (!real && error) *error = CL_SUCCESS;
    count_new(error, q != nullptr);
    return q;
}

SHIM_EXPORT cl_int clReleaseCommandQueue(cl_command_queue q) {
    --live;
    if (real) return real->clReleaseCommandQueue(q);
    fake_release(object(q));
    return CL_SUCCESS;
}

SHIM_EXPORT cl_program clCreateProgramWithSource(cl_context c, cl_uint n, const char** sources, const size_t* sizes, cl_int* error) {
    cl_program p = real ? real->clCreateProgramWithSource(c, n, sources, sizes, error) : handle<cl_program>(new FakeObject);
    if (!real && error) *error = CL_SUCCESS;
    count_new(error, p != nullptr);
    return p;
}

SHIM_EXPORT cl_program clCreateProgramWithBinary(cl_context c, cl_uint n, const cl_device_id* devices, const size_t* sizes,
                                                 const unsigned char** binaries, cl_int* status, cl_int* error) {
    if (real) {
        cl_program p = real->clCreateProgramWithBinary(c, n, devices, sizes, binaries, status, error);
        count_new(error, p != nullptr);
        return p;
    }
    if (error) *error = CL_INVALID_BINARY;
    return nullptr;
}

SHIM_EXPORT cl_int clBuildProgram(cl_program p, cl_uint n, const cl_device_id* devices, const char* options,
                                  void(CL_CALLBACK* notify)(cl_program, void*), void* user) {
    if (real) return real->clBuildProgram(p, n, devices, options, notify, user);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clGetProgramBuildInfo(cl_program p, cl_device_id d, cl_program_build_info what, size_t size, void* value, size_t* size_ret) {
    if (real) return real->clGetProgramBuildInfo(p, d, what, size, value, size_ret);
    return copy_info("", 1, size, value, size_ret);
}

SHIM_EXPORT cl_int clGetProgramInfo(cl_program p, cl_program_info what, size_t size, void* value, size_t* size_ret) {
    if (real) return real->clGetProgramInfo(p, what, size, value, size_ret);
    size_t none = 0;
    return copy_info(&none, sizeof none, size, value, size_ret);
}

SHIM_EXPORT cl_int clReleaseProgram(cl_program p) {
    --live;
    if (real) return real->clReleaseProgram(p);
    fake_release(object(p));
    return CL_SUCCESS;
}

SHIM_EXPORT cl_kernel clCreateKernel(cl_program p, const char* name, cl_int* error) {
    cl_kernel k = real ? real->clCreateKernel(p, name, error) : handle<cl_kernel>(new FakeObject);
    if (!real && error) *error = CL_SUCCESS;
    count_new(error, k != nullptr);
    return k;
}

SHIM_EXPORT cl_int clReleaseKernel(cl_kernel k) {
    --live;
    if (real) return real->clReleaseKernel(k);
    fake_release(object(k));
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clSetKernelArg(cl_kernel k, cl_uint index, size_t size, const void* value) {
    SHIM_FAULT(clSetKernelArg, shim_error_);
    if (real) return real->clSetKernelArg(k, index, size, value);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_mem clCreateBuffer(cl_context c, cl_mem_flags flags, size_t size, void* host, cl_int* error) {
    cl_int injected;
    count_call("clCreateBuffer");
    if (take_fault("clCreateBuffer", &injected)) {
        if (error) *error = injected;
        return nullptr;
    }
    if (real) {
        cl_mem m = real->clCreateBuffer(c, flags, size, host, error);
        count_new(error, m != nullptr);
        return m;
    }
    FakeObject* m = new FakeObject;
    if (!(flags & CL_MEM_USE_HOST_PTR)) {
        m->own.assign(size, 0);
        if (host && (flags & CL_MEM_COPY_HOST_PTR)) std::memcpy(m->own.data(), host, size);
        host = m->own.data();
    }
    m->host = host;
    m->size = size;
    if (error) *error = CL_SUCCESS;
    ++live;
    return handle<cl_mem>(m);
}

SHIM_EXPORT cl_mem clCreateSubBuffer(cl_mem parent, cl_mem_flags flags, cl_buffer_create_type type, const void* info, cl_int* error) {
    cl_int injected;
    count_call("clCreateSubBuffer");
    if (take_fault("clCreateSubBuffer", &injected)) {
        if (error) *error = injected;
        return nullptr;
    }
    if (real) {
        cl_mem m = real->clCreateSubBuffer(parent, flags, type, info, error);
        count_new(error, m != nullptr);
        return m;
    }
    const cl_buffer_region* region = static_cast<const cl_buffer_region*>(info);
    FakeObject* whole = object(parent);
    if (region->origin + region->size > whole->size) {
        if (error) *error = CL_INVALID_VALUE;
        return nullptr;
    }
    FakeObject* m = new FakeObject;
    m->host = static_cast<char*>(whole->host) + region->origin;
    m->size = region->size;
    m->parent = whole;
    whole->refs++;
    if (error) *error = CL_SUCCESS;
    ++live;
    return handle<cl_mem>(m);
}

SHIM_EXPORT cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size, void* host,
                                       cl_uint wait_count, const cl_event* wait, cl_event* event) {
    count_call("clEnqueueReadBuffer");
    SHIM_FAULT(clEnqueueReadBuffer, shim_error_);
    if (real) {
        cl_int e = real->clEnqueueReadBuffer(q, m, blocking, offset, size, host, wait_count, wait, event);
        if (e == CL_SUCCESS && event) ++live;
        return e;
    }
    std::memmove(host, static_cast<char*>(object(m)->host) + offset, size);
    fake_event(CL_COMPLETE, event);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, size_t offset, size_t size, const void* host,
                                        cl_uint wait_count, const cl_event* wait, cl_event* event) {
    count_call("clEnqueueWriteBuffer");
    SHIM_FAULT(clEnqueueWriteBuffer, shim_error_);
    if (real) {
        cl_int e = real->clEnqueueWriteBuffer(q, m, blocking, offset, size, host, wait_count, wait, event);
        if (e == CL_SUCCESS && event) ++live;
        return e;
    }
    std::memmove(static_cast<char*>(object(m)->host) + offset, host, size);
    fake_event(CL_COMPLETE, event);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clRetainMemObject(cl_mem m) {
    ++live;
    if (real) return real->clRetainMemObject(m);
    object(m)->refs++;
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clReleaseMemObject(cl_mem m) {
    --live;
    if (real) return real->clReleaseMemObject(m);
    fake_release(object(m));
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t* offset, const size_t* global,
                                          const size_t* local, cl_uint wait_count, const cl_event* wait, cl_event* event) {
    SHIM_FAULT(clEnqueueNDRangeKernel, shim_error_);
    cl_int outcome;
    {
        std::lock_guard<std::mutex> lock(mutex);
        outcome = kernel_fault;
        kernel_fault = CL_SUCCESS;
        if (outcome == kHang && !real) stopped = true;
    }
    if (!real) {
        fake_event(outcome < 0 ? outcome : CL_COMPLETE, event);
        return CL_SUCCESS;
    }
    if (outcome == CL_SUCCESS) {
        cl_int e = real->clEnqueueNDRangeKernel(q, k, dims, offset, global, local, wait_count, wait, event);
        if (e == CL_SUCCESS && event) ++live;
        return e;
    }
    // A user event holds the kernel: set to an error it fails the kernel, left alone it stops
    // the queue until tessel_opencl_shim_release.
    cl_context context = nullptr;
    cl_int e = CL_SUCCESS;
    cl_event gate = nullptr;
    if (real->clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof context, &context, nullptr) != CL_SUCCESS) return CL_OUT_OF_RESOURCES;
    gate = real->clCreateUserEvent(context, &e);
    if (e != CL_SUCCESS) return e;
    e = real->clEnqueueNDRangeKernel(q, k, dims, offset, global, local, 1, &gate, event);
    if (e == CL_SUCCESS && event) ++live;
    if (outcome == kHang) {
        std::lock_guard<std::mutex> lock(mutex);
        held = gate;
    } else {
        real->clSetUserEventStatus(gate, outcome);
        cl_event previous = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex);
            previous = failed_gate;
            failed_gate = gate;
        }
        if (previous) real->clReleaseEvent(previous);
    }
    return e;
}

SHIM_EXPORT void* clEnqueueMapBuffer(cl_command_queue q, cl_mem m, cl_bool blocking, cl_map_flags flags, size_t offset, size_t size,
                                     cl_uint wait_count, const cl_event* wait, cl_event* event, cl_int* error) {
    cl_int injected;
    count_call("clEnqueueMapBuffer");
    if (take_fault("clEnqueueMapBuffer", &injected)) {
        if (error) *error = injected;
        return nullptr;
    }
    if (real) {
        void* p = real->clEnqueueMapBuffer(q, m, blocking, flags, offset, size, wait_count, wait, event, error);
        if (event && (!error || *error == CL_SUCCESS)) ++live;
        return p;
    }
    fake_event(CL_COMPLETE, event);
    if (error) *error = CL_SUCCESS;
    return static_cast<char*>(object(m)->host) + offset;
}

SHIM_EXPORT cl_int clEnqueueUnmapMemObject(cl_command_queue q, cl_mem m, void* mapped, cl_uint wait_count, const cl_event* wait, cl_event* event) {
    SHIM_FAULT(clEnqueueUnmapMemObject, shim_error_);
    if (real) {
        cl_int e = real->clEnqueueUnmapMemObject(q, m, mapped, wait_count, wait, event);
        if (e == CL_SUCCESS && event) ++live;
        return e;
    }
    fake_event(CL_COMPLETE, event);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clFlush(cl_command_queue q) {
    SHIM_FAULT(clFlush, shim_error_);
    if (real) return real->clFlush(q);
    return CL_SUCCESS;
}

// The fake's blocking waits block like a driver's: until the stopped queue is released.
SHIM_EXPORT cl_int clFinish(cl_command_queue q) {
    SHIM_FAULT(clFinish, shim_error_);
    if (real) return real->clFinish(q);
    std::unique_lock<std::mutex> lock(mutex);
    released.wait(lock, [] { return !stopped; });
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clWaitForEvents(cl_uint n, const cl_event* events) {
    SHIM_FAULT(clWaitForEvents, shim_error_);
    if (real) return real->clWaitForEvents(n, events);
    std::unique_lock<std::mutex> lock(mutex);
    released.wait(lock, [] { return !stopped; });
    for (cl_uint i = 0; i < n; ++i)
        if (static_cast<FakeEvent*>(object(events[i]))->status < 0) return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clGetEventInfo(cl_event e, cl_event_info what, size_t size, void* value, size_t* size_ret) {
    SHIM_FAULT(clGetEventInfo, shim_error_);
    if (real) return real->clGetEventInfo(e, what, size, value, size_ret);
    if (what != CL_EVENT_COMMAND_EXECUTION_STATUS) return CL_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(mutex);
    cl_int status = static_cast<FakeEvent*>(object(e))->status;
    return copy_info(&status, sizeof status, size, value, size_ret);
}

SHIM_EXPORT cl_int clGetEventProfilingInfo(cl_event e, cl_profiling_info what, size_t size, void* value, size_t* size_ret) {
    if (real) return real->clGetEventProfilingInfo(e, what, size, value, size_ret);
    return CL_PROFILING_INFO_NOT_AVAILABLE;
}

SHIM_EXPORT cl_int clSetEventCallback(cl_event e, cl_int type, void(CL_CALLBACK* notify)(cl_event, cl_int, void*), void* user) {
    SHIM_FAULT(clSetEventCallback, shim_error_);
    if (real) return real->clSetEventCallback(e, type, notify, user);
    FakeEvent* f = static_cast<FakeEvent*>(object(e));
    cl_int status;
    {
        std::lock_guard<std::mutex> lock(mutex);
        status = f->status;
        if (status > CL_COMPLETE) {
            f->callbacks.emplace_back(notify, user);
            return CL_SUCCESS;
        }
    }
    notify(e, status, user);
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clRetainEvent(cl_event e) {
    ++live;
    if (real) return real->clRetainEvent(e);
    object(e)->refs++;
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int clReleaseEvent(cl_event e) {
    --live;
    if (real) return real->clReleaseEvent(e);
    fake_release(object(e));
    return CL_SUCCESS;
}
