// Options for jemalloc, the corolla executable's allocator (cmake/dependencies.cmake), read once at start-up.
//
// thp:always asks for transparent huge pages on the heap's extents. The kernel here hands them out only on request
// ("madvise" mode), and a swarm simulation touches gigabytes of small actor state and messages at random: with
// 4 KiB pages most of its memory accesses missed the TLB. The 1,000-server hour ran 6-13% faster with them
// (docs/PERFORMANCE.md, "Simulator"). metadata_thp does the same for jemalloc's own bookkeeping.
// A MALLOC_CONF environment variable still overrides these.
extern "C" {
// NOLINTNEXTLINE: jemalloc looks this symbol up by name.
const char* malloc_conf = "thp:always,metadata_thp:always";
}
