// The counting TESSEL_MALLOC/TESSEL_FREE of the test build (see alloc_counter.h).
#include <atomic>
#include <cstdlib>

namespace tessel_test {
namespace {
std::atomic<uint64_t> g_count{0};
std::atomic<uint64_t> g_fail_at{0};   // absolute call number that fails first; 0: never
}  // namespace

void* counted_malloc(size_t bytes) {
    uint64_t n = ++g_count;
    uint64_t fail_at = g_fail_at.load();
    if (fail_at && n >= fail_at) return nullptr;
    return std::malloc(bytes);
}
void counted_free(void* pointer) { std::free(pointer); }
uint64_t allocation_count() { return g_count.load(); }
void fail_allocations(uint64_t n) { g_fail_at = n ? g_count.load() + n : 0; }
}  // namespace tessel_test
