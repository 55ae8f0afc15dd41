// Counters of how far fuzz inputs get, printed at exit when FUZZ_STATS is set: a harness
// whose inputs never reach inference is fuzzing only the reader.
#pragma once
#include <cstdio>
#include <cstdlib>

struct FuzzStats {
    unsigned long long inputs = 0, read = 0, compiled = 0, inferred = 0;
    ~FuzzStats() {
        if (std::getenv("FUZZ_STATS"))
            std::fprintf(stderr, "stats: %llu inputs, %llu read, %llu compiled, %llu inferred\n", inputs, read, compiled, inferred);
    }
};
