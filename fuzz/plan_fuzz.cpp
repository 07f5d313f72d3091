// libFuzzer target: arbitrary bytes -> JSON -> plan -> compile -> simulate (full and folded,
// critical path, Chrome trace). Bad input must give diagnostics, never a crash, hang or
// sanitizer report. Plans whose expansion would be very large (legitimately slow, not a bug)
// are skipped so the fuzzer explores breadth; only small compiled plans are simulated.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stretto/costmodel/cost_model.h"
#include "stretto/compiler/compiler.h"
#include "stretto/sim/session.h"
#include "stretto/traces/chrome_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 16) return 0;
  auto src = stretto::plan::JsonSource::parse(
      std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  if (!src) {
    (void)stretto::render_all(src.error());
    return 0;
  }
  auto plan = stretto::plan::parse_plan(*src);
  if (!plan) {
    (void)stretto::render_all(plan.error());
    return 0;
  }
  int64_t mbs = 1;
  for (const auto& d : plan->schedule)
    if (d.op == stretto::plan::DirectiveOp::kSplit) mbs = d.num_microbatches;
  // A builder call (1f1b, zb-h2, dualpipe, ...) expands to directives in compile: bounded by
  // its microbatches, ranks and stages, and its base directives' groups, like a written plan.
  const std::vector<stretto::plan::Directive>* directives = &plan->schedule;
  if (plan->builder) {
    const auto& b = *plan->builder;
    mbs = std::max(1, b.microbatches);
    if (b.ranks > 64 || b.stages_per_rank > 16 || b.base.size() > 256) return 0;
    directives = &b.base;
  }
  const int64_t devices = plan->cluster.num_devices();
  if (plan->model.layers * mbs > 4096 || devices > 4096) return 0;
  for (const auto& d : *directives)
    for (const auto& g : d.device_groups)
      if (g.size() > 64) return 0;
  auto cp = stretto::compiler::compile(*plan, &*src);
  if (!cp) {
    (void)stretto::render_all(cp.error());
    return 0;
  }
  if (cp->dag.nodes.size() > 20000 || devices > 64) return 0;
  // (no file access: a profiled table named by the plan is not found, which is an error too)
  auto cm = stretto::cost::make_cost_model(cp->plan.costmodel, cp->plan.cluster, "/nonexistent");
  if (!cm) {
    (void)stretto::render_all(cm.error());
    return 0;
  }
  for (const bool fold : {false, true}) {
    stretto::sim::SimOptions opt;
    opt.fold_replicas = fold;
    auto r = stretto::sim::simulate(*cp, **cm, opt);
    if (!r) {
      (void)stretto::render_all(r.error());
      continue;
    }
    if (!fold) {
      (void)stretto::sim::critical_path(*cp, *r);
      (void)stretto::traces::chrome_trace(*cp, *r);
    }
  }
  return 0;
}
