// libFuzzer target: arbitrary bytes -> torch.distributed.pipelining action CSV importer
// (parse_torch_csv), then, for schedules it accepts, the directive conversion and both CSV
// writers. Bad input must give diagnostics (at most kMaxDiagnostics + 1), never a crash, a
// hang or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stretto/support/limits.h"
#include "stretto/pipelines/torch_csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto s = stretto::pipelines::parse_torch_csv(text, "fuzz.csv");
  if (!s) {
    if (s.error().empty() || s.error().size() > stretto::kMaxDiagnostics + 1) __builtin_trap();
    (void)stretto::render_all(s.error());
    return 0;
  }
  (void)stretto::pipelines::write_torch_csv(*s);
  if (s->stages * s->microbatches <= 4096) {
    auto ds = stretto::pipelines::schedule_to_directives(*s, {});
    if (!ds) (void)stretto::render_all(ds.error());
    auto lowered = stretto::pipelines::write_torch_csv_with_comms(*s);
    if (!lowered) (void)stretto::render_all(lowered.error());
  }
  return 0;
}
