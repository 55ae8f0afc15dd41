/* runtime.h - Tessel: device plugin runtime, ONNX reader, compiled models, infer requests.

   Not built yet: this header only reserves the module's place (it includes snippets.h, as
   the design says). The runtime arrives with its issue.
*/
#ifndef TESSEL_RUNTIME_H
#define TESSEL_RUNTIME_H
#include "snippets.h"
#endif  // TESSEL_RUNTIME_H
