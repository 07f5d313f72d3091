// libFuzzer target: arbitrary bytes -> sweep spec (inline base plan) -> grid (constraints,
// ranges, factorisations, samples) -> the first points' plans (schedule regeneration, builder
// expansion) -> compile (without class programs, as sweeps do), analytic estimate and folded
// simulation of the small ones, whose stored metrics text must read back as result_json's
// object (a mismatch traps: it caught fmt printing one digit of doubles under clang). Bad input
// must give diagnostics, never a crash, a hang or a sanitizer report. Specs whose grid is large
// (legitimately slow to enumerate, not a bug) are skipped so the fuzzer explores breadth.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stretto/explore/estimate.h"
#include "stretto/explore/spec.h"
#include "stretto/explore/sweep.h"
#include "stretto/compiler/compiler.h"
#include "stretto/sim/session.h"

namespace {

// Plans small enough to compile and simulate in a few milliseconds.
bool small_plan(const stretto::plan::Plan& plan) {
  const int64_t devices = plan.cluster.num_devices();
  if (devices > 64 || plan.model.layers > 256) return false;
  int64_t mbs = 1;
  for (const auto& d : plan.schedule) {
    if (d.op == stretto::plan::DirectiveOp::kSplit) mbs = d.num_microbatches;
    for (const auto& g : d.device_groups)
      if (g.size() > 64) return false;
  }
  if (plan.builder) {
    mbs = std::max<int64_t>(mbs, plan.builder->microbatches);
    if (plan.builder->ranks > 64 || plan.builder->stages_per_rank > 8) return false;
  }
  return plan.model.layers * mbs <= 4096;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 16) return 0;
  auto src = stretto::plan::JsonSource::parse(
      std::string(reinterpret_cast<const char*>(data), size), "fuzz_spec.json");
  if (!src) {
    (void)stretto::render_all(src.error());
    return 0;
  }
  // Hermetic: a base named by path would read the file system.
  const auto& root = src->root();
  if (root.is_object() && root.contains("base") && root["base"].is_string()) return 0;
  auto spec = stretto::explore::parse_spec(*src, "/nonexistent");
  if (!spec) {
    if (spec.error().empty()) __builtin_trap();
    (void)stretto::render_all(spec.error());
    return 0;
  }
  size_t combos = 1;
  for (const auto& a : spec->axes)
    if (__builtin_mul_overflow(combos, a.values.size(), &combos)) combos = SIZE_MAX;
  const bool sampled = spec->sample_n.has_value();
  if (combos > 20000 && !(sampled && *spec->sample_n <= 64 && spec->constraints.empty())) return 0;
  auto grid = stretto::explore::enumerate(*spec);
  if (!grid) {
    if (grid.error().empty()) __builtin_trap();
    (void)stretto::render_all(grid.error());
    return 0;
  }
  size_t evaluated = 0;
  for (const auto& p : grid->points) {
    if (++evaluated > 4) break;
    (void)stretto::explore::bindings_of(spec->base, p.params);
    auto doc = stretto::explore::point_plan(spec->base, p.params);
    if (!doc) {
      (void)stretto::render_all(doc.error());
      continue;
    }
    auto psrc = stretto::plan::JsonSource::from_json(*doc, "point.json");
    auto plan = stretto::plan::parse_plan(psrc);
    if (!plan) {
      (void)stretto::render_all(plan.error());
      continue;
    }
    if (!small_plan(*plan)) continue;
    const auto resolved = stretto::explore::resolve(spec->base, p.params);
    if (!resolved) {
      (void)stretto::render_all(resolved.error());
      continue;
    }
    if (auto e = stretto::explore::estimate(*plan, *resolved); !e)
      (void)stretto::render_all(e.error());
    stretto::compiler::CompileOptions copt;
    copt.class_programs = false;
    auto cp = stretto::compiler::compile(*plan, &psrc, copt);
    if (!cp) {
      (void)stretto::render_all(cp.error());
      continue;
    }
    if (cp->dag.nodes.size() > 20000) continue;
    auto cm = stretto::cost::make_cost_model(cp->plan.costmodel, cp->plan.cluster, "/nonexistent");
    if (!cm) {
      (void)stretto::render_all(cm.error());
      continue;
    }
    stretto::sim::SimOptions opt;
    opt.fold_replicas = true;
    opt.memory_curves = false;
    auto r = stretto::sim::simulate(*cp, **cm, opt);
    if (!r) {
      (void)stretto::render_all(r.error());
      continue;
    }
    // (both sides through text: non-finite numbers are null in either)
    const stretto::plan::Json want =
        stretto::plan::Json::parse(stretto::explore::result_json(*cp, *r, 80.0).dump());
    if (stretto::plan::Json::parse(stretto::explore::result_json_text(*cp, *r, 80.0)) != want)
      __builtin_trap();
  }
  return 0;
}
