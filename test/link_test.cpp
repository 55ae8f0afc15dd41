// A second translation unit that includes every header without the implementation define:
// with test/impl.cpp it forms the two-translation-unit link test.
#include "hetero.h"
#include "snippets.h"
#include "runtime.h"
#include "hetero.h"

#include <doctest/doctest.h>

TEST_CASE("link: headers included from two translation units link together") {
    CHECK(tessel::status_name(tessel::Status::Cycle) == tessel::StringView("Cycle"));
    CHECK(TESSEL_VERSION_MAJOR == 0);
}
