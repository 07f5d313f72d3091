// Allocator settings of the stretto binary and the simulate/explore benchmarks (compiled into
// each target that links stretto_allocator: see the top-level CMakeLists.txt). One place for
// them: the libraries never change process-wide malloc settings.
//
// A compile and simulation frees and reallocates most of its memory from one phase (and one
// sweep point) to the next, so freed pages stay with the process instead of going back to the
// kernel and being faulted in again. The cost: the process keeps its peak heap until it exits.
#include <cstddef>  // (defines __GLIBC__ on glibc systems, tested below)

#if defined(STRETTO_WITH_JEMALLOC)
// jemalloc: dirty and muzzy decay off. With its default decay the 1,024-device reference plan
// took 238 k page faults per 3 runs (1.06-1.08 s a run, bench_simulate CompileSimulateFolded),
// with decay off 96 k (0.77-0.87 s). MALLOC_CONF in the environment overrides this.
extern "C" {
// jemalloc reads this global by name.
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
}
#elif defined(__GLIBC__)
// glibc's malloc (no jemalloc): keep 64 MB of slack at the top of each heap. Without it each
// sweep worker's heap gave its freed top back after a point and faulted it in again for the next
// (bench_explore SweepThroughput/2: 130,370 page faults a run, 19,639 with it).
#include <malloc.h>
namespace {
[[maybe_unused]] const bool kTopPadSet = mallopt(M_TOP_PAD, 64 << 20) == 1;
}  // namespace
#endif
