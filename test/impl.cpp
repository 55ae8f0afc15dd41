// The one translation unit with TESSEL_IMPLEMENTATION. Every other test file includes the
// same headers without it, so a definition that would be emitted twice fails to link.
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "snippets.h"
#include "hetero.h"
// Included twice on purpose: the guards must hold for the implementation part too.
#include "hetero.h"
