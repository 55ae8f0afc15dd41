/* snippets.h - Tessel: fusion of elementwise islands into JIT kernels.

   Not built yet: this header only reserves the module's place (it includes hetero.h, as the
   design says). The body IR, tokenizer, lowering and emitters arrive with their issue.
*/
#ifndef TESSEL_SNIPPETS_H
#define TESSEL_SNIPPETS_H
#include "hetero.h"
#endif  // TESSEL_SNIPPETS_H
