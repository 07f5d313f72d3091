// libFuzzer target: arbitrary bytes -> measured cost table reader (parse_profile_table), then
// a few lookups through a profiled cost model built on the table it accepts. Bad input must
// give diagnostics, never a crash, a hang or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "stretto/costmodel/profile_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto t = stretto::cost::parse_profile_table(text, "fuzz_table.json");
  if (!t) {
    if (t.error().empty()) __builtin_trap();
    (void)stretto::render_all(t.error());
    return 0;
  }
  // Interpolation and extrapolation paths: sizes below, between and above the measured ones.
  uint64_t seed = 0x9e3779b9;
  if (size >= sizeof seed) std::memcpy(&seed, data, sizeof seed);
  for (int k = 0; k < 8; ++k) {
    const int64_t v = static_cast<int64_t>((seed >> (k * 8)) & 0xff) << (k * 4);
    stretto::cost::ComputeQuery q;
    q.kind = static_cast<decltype(q.kind)>(k % 4);
    q.gemm = {v + 1, 4096, 4096, 1};
    q.bytes = v * 1024 + 1;
    (void)t->kernel_ns(q);
    stretto::cost::CommQuery c;
    c.kind = static_cast<decltype(c.kind)>(1 + k % 5);
    c.bytes = v * 4096 + 1;
    c.group_size = 2 << (k % 3);
    (void)t->comm_ns(c);
  }
  return 0;
}
