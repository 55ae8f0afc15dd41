// The `tessel` command line. Placeholder main until the subcommands land.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include <cstdio>
int main() { std::puts("tessel"); return 0; }
