// jemalloc's options for the stretto binary and the benchmarks (linked with stretto_allocator
// only when jemalloc is: see the top-level CMakeLists.txt).
//
// Freed pages stay with the process until it exits instead of decaying back to the kernel.
// A compile and simulation frees and reallocates most of its memory from one phase (and one
// sweep point) to the next; with jemalloc's default decay the 1,024-device reference plan took
// 238 k page faults per 3 runs (1.06-1.08 s a run, bench_simulate CompileSimulateFolded), with
// decay off 96 k (0.77-0.87 s). The cost is that the process keeps its peak heap until it exits.
// MALLOC_CONF in the environment overrides this (e.g. MALLOC_CONF=dirty_decay_ms:10000).
extern "C" {
// NOLINTNEXTLINE: jemalloc reads this global by name
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
}
