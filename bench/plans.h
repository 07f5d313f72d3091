#pragma once
// Large plans for the benchmarks (generated, so the repo does not carry megabytes of JSON).
#include <nlohmann/json.hpp>
#include <string>

namespace stretto::bench {

using nlohmann::json;

/// The MoE transformer all benchmarks use: `layers` layers cut into `regions` PP regions.
inline json moe_model(int layers, int regions) {
  return {
      {"family", "transformer"},
      {"layers", layers},
      {"hidden", 4096},
      {"heads", 32},
      {"kv_heads", 8},
      {"ffn_hidden", 14336},
      {"vocab", 128000},
      {"seq_len", 4096},
      {"microbatch_size", 1},
      {"pp_regions", regions},
      {"moe", {{"experts", 64}, {"top_k", 6}, {"expert_ffn_hidden", 2048}, {"shared_experts", 1}}}};
}

/// A MoE transformer with `pp * layers_per_stage` layers on pp x dp devices: stage s on the
/// contiguous devices [s*dp, (s+1)*dp), replicated over them (ZeRO-1 when zero1), experts
/// sharded over the same dp devices (EP = DP), `mbs` microbatches, explicit 1F1B orders.
inline json moe_plan(int pp, int dp, int layers_per_stage, int mbs, bool zero1,
                     bool orders = true) {
  json model = moe_model(pp * layers_per_stage, pp);
  json sched = json::array();
  for (int s = 0; s < pp; ++s) {
    json devs = json::array();
    for (int k = 0; k < dp; ++k) devs.push_back(s * dp + k);
    sched.push_back(
        {{"op", "place"}, {"filter", {{"PP", s}}}, {"devices", devs}, {"stream", "pp"}});
    json rep = {
        {"op", "replicate"}, {"filter", {{"PP", s}}}, {"devices", devs}, {"reduce_stream", "dp"}};
    if (zero1) rep["shard_optimizer"] = true;
    sched.push_back(rep);
    sched.push_back({{"op", "shard"},
                     {"filter", {{"PP", s}, {"EP", "*"}}},
                     {"devices", devs},
                     {"stream", "ep"}});
  }
  sched.push_back({{"op", "split"}, {"filter", json::object()}, {"num_microbatches", mbs}});
  if (orders)
    for (int r = 0; r < pp; ++r) {
      json groups = json::array();
      auto f = [&](int mb, const char* p) { return json{{{"PP", r}, {"MB", mb}, {"PASS", p}}}; };
      int w = std::min(pp - 1 - r, mbs), nf = 0, nb = 0;
      for (; nf < w; ++nf) groups.push_back(f(nf, "F"));
      while (nf < mbs) {
        groups.push_back(f(nf++, "F"));
        groups.push_back(f(nb++, "B"));
      }
      while (nb < mbs) groups.push_back(f(nb++, "B"));
      sched.push_back({{"op", "order"}, {"filters", groups}});
    }
  int nodes = (pp * dp + 7) / 8;
  return {{"model", model},
          {"cluster", {{"preset", "h100-sxm"}, {"nodes", nodes}, {"devices_per_node", 8}}},
          {"costmodel", {{"kind", "analytic"}}},
          {"schedule", sched}};
}

/// The simulator's reference configuration (DESIGN.md §7): pp ranks x dp replicas, DualPipeV
/// with 2 stages per rank in a V (stage s on rank s < pp ? s : 2pp-1-s), `layers_per_stage`
/// MoE layers per stage (2 in the reference configuration), experts sharded over each stage's
/// dp devices, ZeRO-1, `mbs` microbatches.
inline json reference_plan(int pp, int dp, int mbs, int layers_per_stage = 2) {
  const int stages = 2 * pp;
  json model = moe_model(stages * layers_per_stage, stages);
  json base = json::array();
  for (int s = 0; s < stages; ++s) {
    int r = s < pp ? s : stages - 1 - s;
    json devs = json::array();
    for (int k = 0; k < dp; ++k) devs.push_back(r * dp + k);
    base.push_back({{"op", "place"}, {"filter", {{"PP", s}}}, {"devices", devs}, {"stream", "pp"}});
    base.push_back({{"op", "replicate"},
                    {"filter", {{"PP", s}}},
                    {"devices", devs},
                    {"reduce_stream", "dp"},
                    {"shard_optimizer", true}});
    base.push_back({{"op", "shard"},
                    {"filter", {{"PP", s}, {"EP", "*"}}},
                    {"devices", devs},
                    {"stream", "ep"}});
  }
  return {
      {"model", model},
      {"cluster", {{"preset", "h100-sxm"}, {"nodes", (pp * dp + 7) / 8}, {"devices_per_node", 8}}},
      {"costmodel", {{"kind", "analytic"}}},
      {"schedule",
       {{"builder", "dualpipev"},
        {"ranks", pp},
        {"stages_per_rank", 2},
        {"microbatches", mbs},
        {"base", base}}}};
}

}  // namespace stretto::bench
