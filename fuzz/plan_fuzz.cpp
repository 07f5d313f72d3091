// libFuzzer target: arbitrary bytes -> JSON -> plan -> compile. Bad input must give
// diagnostics, never a crash, hang or sanitizer report. Plans whose expansion would be very
// large (legitimately slow, not a bug) are skipped so the fuzzer explores breadth.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stretto/schedules/compiler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 16) return 0;
  auto src = stretto::JsonSource::parse(std::string(reinterpret_cast<const char*>(data), size),
                                        "fuzz.json");
  if (!src) {
    (void)stretto::render_all(src.error());
    return 0;
  }
  auto plan = stretto::parse_plan(*src);
  if (!plan) {
    (void)stretto::render_all(plan.error());
    return 0;
  }
  int64_t mbs = 1;
  for (const auto& d : plan->schedule)
    if (d.op == stretto::DirectiveOp::kSplit) mbs = d.num_microbatches;
  const int64_t devices = plan->cluster.num_devices();
  if (plan->model.layers * mbs > 4096 || devices > 4096 || plan->builder) return 0;
  for (const auto& d : plan->schedule)
    for (const auto& g : d.device_groups)
      if (g.size() > 64) return 0;
  auto cp = stretto::compile(*plan, &*src);
  if (!cp) (void)stretto::render_all(cp.error());
  return 0;
}
