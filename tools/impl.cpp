// The one translation unit with TESSEL_IMPLEMENTATION for the programs the Makefile builds
// from several sources (tools/tessel.cpp, test/conformance/run.cpp, bench/ocr_models.cpp):
// they link this object, so a build compiles the library once for all of them.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
