// The fields of `stretto simulate --format json` (see metrics_json.h).
#include "stretto/sim/metrics_json.h"

#include <string>

namespace stretto::sim {

namespace {
double ms(SimTime ns) { return static_cast<double>(ns) / 1e6; }
}  // namespace

nlohmann::json metrics_json(const CompiledPlan& cp, const Result& r, const PipelineMetrics& pm) {
  nlohmann::json j;
  j["plan"] = cp.plan.file;
  j["step_time_ms"] = ms(r.step_time);
  j["bubble_ratio"] = r.bubble_ratio;
  j["pipeline_bubble_ratio"] = pm.pipeline_bubble_ratio;
  j["exposed_comm_ms"] = ms(r.exposed_comm);
  j["exposed_comm_ms_per_device"] = pm.exposed_comm_ms_per_device;
  j["mfu"] = r.mfu;
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_flops"] = r.model_flops;
  j["events"] = r.events;
  j["sim_wall_ms"] = r.sim_wall_ms;
  j["folded_replicas"] = r.folded;
  j["not_modelled"] = unmodelled_effects(cp);
  j["costmodel"] =
      std::string(cp.plan.costmodel.kind == CostModelSpec::Kind::kFixed      ? "fixed"
                  : cp.plan.costmodel.kind == CostModelSpec::Kind::kProfiled ? "profiled"
                                                                             : "analytic");
  nlohmann::json devs = nlohmann::json::array();
  const DeviceMetrics* worst = nullptr;  // the largest peak
  bool over = false;
  for (const auto& d : r.devices) {
    if (!worst || d.peak_memory > worst->peak_memory) worst = &d;
    over = over || d.over_capacity;
    nlohmann::json e;
    e["id"] = d.id;
    e["busy_ms"] = ms(d.busy);
    e["bubble_ms"] = ms(d.bubble);
    e["bubble_ratio"] = d.bubble_ratio;
    {
      const auto& dp = pm.devices[static_cast<size_t>(&d - r.devices.data())];
      e["pipeline_bubble_ms"] = dp.computes ? ms(dp.idle()) : 0.0;
    }
    e["exposed_comm_ms"] = ms(d.exposed_comm);
    e["comm_ms"] = ms(d.comm);
    e["peak_memory_bytes"] = d.peak_memory;
    e["peak_memory_time_ms"] = ms(d.peak_time);
    nlohmann::json b = nlohmann::json::object();
    for (size_t k = 0; k < kMemCategories; ++k)
      b[std::string(memory_category_name(k))] = d.breakdown[k];
    e["memory_breakdown"] = b;
    e["over_capacity"] = d.over_capacity;
    devs.push_back(std::move(e));
  }
  j["devices"] = std::move(devs);
  j["peak_memory_bytes"] = worst ? worst->peak_memory : 0;
  j["peak_memory_time_ms"] = worst ? ms(worst->peak_time) : 0.0;
  j["over_capacity"] = over;
  return j;
}

}  // namespace stretto::sim
