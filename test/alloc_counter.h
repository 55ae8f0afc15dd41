// Force-included into every test object (Makefile TEST_DEFINES): the library's heap goes
// through these, so tests can count allocations and make the Nth one fail.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tessel_test {
void* counted_malloc(size_t bytes);
void counted_free(void* pointer);
uint64_t allocation_count();          // TESSEL_MALLOC calls so far (all threads)
// The next `n`th TESSEL_MALLOC call (1 = the next one) and every one after it returns nullptr,
// until fail_allocations(0).
void fail_allocations(uint64_t n);
}  // namespace tessel_test

#define TESSEL_MALLOC(n) ::tessel_test::counted_malloc(n)
#define TESSEL_FREE(p) ::tessel_test::counted_free(p)
#define TESSEL_MALLOC_IS_MALLOC 1   // they call malloc and free: the library's malloc-only paths run
