// The machine's two-thread condition, printed around two-thread tables (bench-vs-ort.sh, bench-int8.sh):
// whether two threads run the FMA loop side by side at full speed, and what a cache line costs
// to write when the other core has read it (bench_util.h, cross_core_line_costs).
//   build/bench/cores
#define TESSEL_IMPLEMENTATION
#include "runtime.h"
#include "bench_util.h"

#include <cstdio>

int main() {
    const tessel::Isa isa = tessel::default_isa();
    const double one = bench::fma_peak(isa), two = bench::fma_peak_together(isa, 2);
    const bench::LineCosts lines = bench::cross_core_line_costs();
    std::printf("cores: two threads at once %.2fx one's FMA rate (%s); writing a line the other core read %.1f ns, "
                "a line this core owns %.1f ns (%.1fx)\n",
                one > 0 ? two / one : 0.0, tessel::isa_name(isa), lines.shared_ns, lines.own_ns,
                lines.own_ns > 0 ? lines.shared_ns / lines.own_ns : 0.0);
    return 0;
}
