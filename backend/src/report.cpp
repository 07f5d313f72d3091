// Merging per-rank measurements and writing them out (torch-free): JSON with `simulate`'s
// field names, a table with the prediction next to the measurement, a Chrome trace named like
// the simulator's.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <climits>
#include <cstdlib>

#include "stretto/backend/replay.h"
#include "stretto/support/plural.h"

#include "device_program.h"

namespace stretto::backend {

using compiler::CompiledPlan;
using compiler::NodeKind;
using plan::DType;
using plan::Json;

namespace {

double ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

void set_step_stats(ReplayResult& r) {
  const size_t n = r.step_ns.size();
  r.step_mean_ms = r.step_std_ms = r.step_min_ms = 0;
  if (n == 0) return;
  double sum = 0, sq = 0;
  int64_t mn = r.step_ns[0];
  for (int64_t s : r.step_ns) sum += static_cast<double>(s), mn = std::min(mn, s);
  const double mean = sum / static_cast<double>(n);
  for (int64_t s : r.step_ns) sq += (static_cast<double>(s) - mean) * (static_cast<double>(s) - mean);
  r.step_mean_ms = mean / 1e6;
  r.step_std_ms = n > 1 ? std::sqrt(sq / static_cast<double>(n - 1)) / 1e6 : 0.0;
  r.step_min_ms = static_cast<double>(mn) / 1e6;
}

std::string json_escape(const std::string& s) {
  return Json(s).dump().substr(1, Json(s).dump().size() - 2);
}

}  // namespace

Json kernel_uses_json(const std::vector<KernelUse>& uses) {
  Json a = Json::array();
  for (const KernelUse& u : uses)
    a.push_back({{"family", u.family},
                 {"kernel", u.kernel},
                 {"op", u.op},
                 {"fallback", u.fallback},
                 {"reason", u.reason.empty() ? Json(nullptr) : Json(u.reason)}});
  return a;
}

std::string kernel_uses_table(const std::vector<KernelUse>& uses, const std::string& indent) {
  std::string o;
  for (const KernelUse& u : uses) {
    if (!o.empty()) o += "\n" + indent;
    o += fmt::format("{}: {}", u.family, u.kernel);
    if (u.fallback) o += fmt::format(" (FALLBACK: {})", u.reason);
  }
  return o;
}

std::string kernel_fallback_warning(const std::vector<KernelUse>& uses) {
  std::string list;
  int n = 0;
  for (const KernelUse& u : uses)
    if (u.fallback) {
      list += fmt::format("{}{} runs {} ({})", n ? "; " : "", u.family, u.kernel, u.reason);
      ++n;
    }
  if (n == 0) return "";
  return fmt::format(
      "warning: --kernels fused: {} without a fused kernel on this LibTorch: {}\n"
      "  hint: their replayed times are the fallback's, not what a training job's fused kernel "
      "takes; a newer LibTorch runs the fused kernels (docs/validation.md, \"Replay kernels\")\n",
      count_noun(n, "op family runs", "op families run"), list);
}

Json to_json(const RankResult& r) {
  Json j;
  j["rank"] = r.rank;
  j["step_ns"] = r.step_ns;
  j["loss"] = r.loss;
  j["device"] = r.device;
  j["t0_ns"] = r.t0_ns;
  j["host"] = r.host;
  const DeviceReport& d = r.report;
  j["report"] = {{"id", d.id},
                 {"busy_ns", d.busy_ns},
                 {"bubble_ns", d.bubble_ns},
                 {"exposed_comm_ns", d.exposed_comm_ns},
                 {"comm_ns", d.comm_ns},
                 {"bubble_ratio", d.bubble_ratio},
                 {"peak_memory", d.peak_memory},
                 {"breakdown", d.breakdown},
                 {"optimizer_state_bytes", d.optimizer_state_bytes},
                 {"step_ns", d.step_ns},
                 {"overhead_ns", d.overhead_ns},
                 {"post_ns", d.post_ns},
                 {"unpack_ns", d.unpack_ns},
                 {"ops_per_step", d.ops_per_step},
                 {"overhead_cpu_ns", d.overhead_cpu_ns},
                 {"compute_cpu_ns", d.compute_cpu_ns},
                 {"pack_cpu_ns", d.pack_cpu_ns}};
  // Ops as parallel arrays with a string table (compact: thousands of ops per rank).
  std::map<std::string, int> names;
  std::vector<std::string> table;
  auto id = [&](const std::string& s) {
    auto [it, added] = names.emplace(s, static_cast<int>(table.size()));
    if (added) table.push_back(s);
    return it->second;
  };
  Json ops = Json::array();
  for (const auto& o : r.ops)
    ops.push_back(
        {id(o.stream), id(o.name), o.node, o.iteration, o.start_ns, o.end_ns, o.unpack_ns,
         o.post_ns});
  j["strings"] = table;
  j["ops"] = std::move(ops);
  return j;
}

Expected<RankResult> rank_result_from_json(const Json& j) {
  try {
    RankResult r;
    r.rank = j.at("rank").get<int>();
    r.step_ns = j.at("step_ns").get<std::vector<int64_t>>();
    r.loss = j.at("loss").get<double>();
    r.device = j.at("device").get<std::string>();
    r.t0_ns = j.value("t0_ns", std::vector<int64_t>{});
    r.host = j.value("host", std::string());
    const Json& d = j.at("report");
    r.report.id = d.at("id").get<int>();
    r.report.busy_ns = d.at("busy_ns").get<int64_t>();
    r.report.bubble_ns = d.at("bubble_ns").get<int64_t>();
    r.report.exposed_comm_ns = d.at("exposed_comm_ns").get<int64_t>();
    r.report.comm_ns = d.at("comm_ns").get<int64_t>();
    r.report.bubble_ratio = d.at("bubble_ratio").get<double>();
    r.report.peak_memory = d.at("peak_memory").get<int64_t>();
    r.report.breakdown = d.at("breakdown").get<std::array<int64_t, sim::kMemCategories>>();
    r.report.step_ns = d.at("step_ns").get<int64_t>();
    r.report.optimizer_state_bytes = d.value("optimizer_state_bytes", int64_t{0});
    r.report.overhead_ns = d.value("overhead_ns", int64_t{0});
    r.report.post_ns = d.value("post_ns", int64_t{0});
    r.report.unpack_ns = d.value("unpack_ns", int64_t{0});
    r.report.ops_per_step = d.value("ops_per_step", 0);
    r.report.overhead_cpu_ns = d.value("overhead_cpu_ns", int64_t{0});
    r.report.compute_cpu_ns = d.value("compute_cpu_ns", int64_t{0});
    r.report.pack_cpu_ns = d.value("pack_cpu_ns", int64_t{0});
    const auto table = j.at("strings").get<std::vector<std::string>>();
    for (const auto& o : j.at("ops")) {
      OpRecord rec;
      rec.device = r.rank;
      rec.stream = table.at(o.at(0).get<size_t>());
      rec.name = table.at(o.at(1).get<size_t>());
      rec.node = o.at(2).get<uint32_t>();
      rec.iteration = o.at(3).get<int>();
      rec.start_ns = o.at(4).get<int64_t>();
      rec.end_ns = o.at(5).get<int64_t>();
      rec.unpack_ns = o.size() > 6 ? o.at(6).get<int64_t>() : 0;
      rec.post_ns = o.size() > 7 ? o.at(7).get<int64_t>() : rec.start_ns;
      r.ops.push_back(std::move(rec));
    }
    return r;
  } catch (const std::exception& e) {
    Diagnostic d;
    d.message = fmt::format("malformed rank result: {}", e.what());
    return fail(std::move(d));
  }
}

ReplayResult merge_results(const CompiledPlan& cp, const ReplayOptions& opt,
                           std::vector<RankResult> ranks) {
  ReplayResult r;
  r.plan = cp.plan.file;
  r.world_size = static_cast<int>(ranks.size());
  r.iterations = opt.iterations;
  r.warmup = opt.warmup;
  r.kernels = opt.kernels;
  r.kernel_families = kernel_uses(cp, opt.kernels);
  std::sort(ranks.begin(), ranks.end(),
            [](const RankResult& a, const RankResult& b) { return a.rank < b.rank; });
  size_t n = SIZE_MAX;
  for (const auto& k : ranks) n = std::min(n, k.step_ns.size());
  if (n == SIZE_MAX) n = 0;
  r.step_ns.assign(n, 0);
  // Ranks of one host share its monotonic clock: put them on one timeline per step (the
  // earliest rank's start is 0), so the step is the group's makespan and traces line up.
  bool one_host = !ranks.empty();
  for (const auto& k : ranks)
    one_host = one_host && k.host == ranks[0].host && k.t0_ns.size() >= n;
  std::vector<int64_t> g0(n, INT64_MAX);
  if (one_host)
    for (const auto& k : ranks)
      for (size_t i = 0; i < n; ++i) g0[i] = std::min(g0[i], k.t0_ns[i]);
  auto shift = [&](const RankResult& k, size_t i) { return one_host ? k.t0_ns[i] - g0[i] : 0; };
  for (auto& k : ranks) {
    for (size_t i = 0; i < n; ++i) r.step_ns[i] = std::max(r.step_ns[i], shift(k, i) + k.step_ns[i]);
    for (auto& o : k.ops)
      if (o.iteration >= 0 && static_cast<size_t>(o.iteration) < n) {
        const int64_t s = shift(k, static_cast<size_t>(o.iteration));
        o.start_ns += s;
        o.end_ns += s;
        o.post_ns += s;
      }
  }
  // A transfer or collective starts when its last participant posts it (the simulator's
  // rendezvous): a receive posted early is waiting, not communicating.
  if (one_host) {
    std::map<std::tuple<int, uint32_t, int, int>, int64_t> pair_start;  // (it, node, lo, hi)
    std::map<std::pair<int, uint32_t>, int64_t> coll_start;
    auto peer_of = [](const OpRecord& o) {
      const auto c = o.stream.rfind(':');
      return c == std::string::npos ? -1 : std::atoi(o.stream.c_str() + c + 1);
    };
    auto visit = [&](bool apply) {
      for (auto& k : ranks)
        for (auto& o : k.ops) {
          if (o.node >= cp.dag.nodes.size()) continue;
          const NodeKind kind = cp.dag.nodes[o.node].kind;
          int64_t* slot = nullptr;
          if (kind == NodeKind::kTransfer) {
            const int p = peer_of(o);
            slot = &pair_start[{o.iteration, o.node, std::min(p, o.device), std::max(p, o.device)}];
          } else if (kind == NodeKind::kCollective) {
            slot = &coll_start[{o.iteration, o.node}];
          }
          if (!slot) continue;
          if (!apply)
            *slot = std::max(*slot, o.start_ns);
          else
            o.start_ns = std::min(o.end_ns, std::max(o.start_ns, *slot));
        }
    };
    visit(false);
    visit(true);
    // Communication time and its exposed part again, from the adjusted intervals.
    for (auto& k : ranks) {
      if (k.ops.empty() || n == 0) continue;
      int64_t comm = 0, exposed = 0;
      for (size_t i = 0; i < n; ++i) {
        std::vector<std::pair<int64_t, int64_t>> cu, mu;
        for (const auto& o : k.ops) {
          if (o.iteration != static_cast<int>(i) || o.node >= cp.dag.nodes.size()) continue;
          (cp.dag.nodes[o.node].kind == NodeKind::kCompute ? cu : mu).emplace_back(o.start_ns, o.end_ns);
        }
        cu = detail::merge_intervals(std::move(cu));
        mu = detail::merge_intervals(std::move(mu));
        for (auto [a, b] : mu) {
          comm += b - a;
          int64_t covered = 0;
          for (auto [c, d] : cu) covered += std::max<int64_t>(0, std::min(b, d) - std::max(a, c));
          exposed += b - a - covered;
        }
      }
      k.report.comm_ns = comm / static_cast<int64_t>(n);
      k.report.exposed_comm_ns = exposed / static_cast<int64_t>(n);
    }
  }
  set_step_stats(r);
  const int64_t mean_step = static_cast<int64_t>(r.step_mean_ms * 1e6);
  double bubble_sum = 0;
  for (auto& k : ranks) {
    DeviceReport d = k.report;
    // Bubbles against the group's step (the slowest rank), as the simulator's makespan.
    d.bubble_ns = std::max<int64_t>(0, mean_step - d.busy_ns);
    d.bubble_ratio = mean_step > 0 ? static_cast<double>(d.bubble_ns) / mean_step : 0.0;
    bubble_sum += static_cast<double>(d.bubble_ns);
    r.exposed_comm_ns += d.exposed_comm_ns;
    r.devices.push_back(d);
    if (k.loss != 0) r.loss += k.loss;
    if (r.backend.empty())
      r.backend = k.device.rfind("cuda", 0) == 0 ? "nccl (cuda)" : "gloo (cpu)";
    for (auto& o : k.ops) r.ops.push_back(std::move(o));
  }
  r.bubble_ratio = mean_step > 0 && !ranks.empty()
                       ? bubble_sum / (static_cast<double>(mean_step) * static_cast<double>(ranks.size()))
                       : 0.0;
  const std::string plan_dt =
      cp.model.dtype == DType::kFP32   ? "fp32"
      : cp.model.dtype == DType::kBF16 ? "bf16"
      : cp.model.dtype == DType::kFP16 ? "fp16"
                                       : "fp8";
  const bool cuda = r.backend.rfind("nccl", 0) == 0;
  if (!cuda)
    r.dtype_note = plan_dt == "fp32" ? "fp32" : fmt::format("fp32 (the plan says {}; CPU runs fp32)", plan_dt);
  else
    r.dtype_note = plan_dt == "fp8" ? "fp32 (the plan says fp8; replay has no fp8 kernels)" : plan_dt;
  return r;
}

ReplayResult pool_results(std::vector<ReplayResult> runs) {
  if (runs.empty()) return {};
  if (runs.size() == 1) return std::move(runs.front());
  ReplayResult r;
  const ReplayResult& first = runs.front();
  r.plan = first.plan;
  r.backend = first.backend;
  r.dtype_note = first.dtype_note;
  r.kernels = first.kernels;
  r.kernel_families = first.kernel_families;
  r.world_size = first.world_size;
  r.warmup = first.warmup;
  r.loss = first.loss;
  r.check = first.check;
  // per device id: weighted sums of the per-step means
  struct Acc {
    double w = 0, busy = 0, comm = 0, exposed = 0, step = 0, over = 0, over_cpu = 0, comp_cpu = 0,
           pack = 0, post = 0, unpack = 0;
    int ops = 0;
    DeviceReport peak;
  };
  std::map<int, Acc> acc;
  int offset = 0;
  for (ReplayResult& run : runs) {
    const double w = static_cast<double>(run.step_ns.size());
    r.step_ns.insert(r.step_ns.end(), run.step_ns.begin(), run.step_ns.end());
    for (OpRecord& o : run.ops) {
      if (o.iteration >= 0) o.iteration += offset;
      r.ops.push_back(std::move(o));
    }
    for (const DeviceReport& d : run.devices) {
      Acc& a = acc[d.id];
      a.w += w;
      a.busy += w * static_cast<double>(d.busy_ns);
      a.comm += w * static_cast<double>(d.comm_ns);
      a.exposed += w * static_cast<double>(d.exposed_comm_ns);
      a.step += w * static_cast<double>(d.step_ns);
      a.over += w * static_cast<double>(d.overhead_ns);
      a.over_cpu += w * static_cast<double>(d.overhead_cpu_ns);
      a.comp_cpu += w * static_cast<double>(d.compute_cpu_ns);
      a.pack += w * static_cast<double>(d.pack_cpu_ns);
      a.post += w * static_cast<double>(d.post_ns);
      a.unpack += w * static_cast<double>(d.unpack_ns);
      a.ops = d.ops_per_step;
      if (d.peak_memory >= a.peak.peak_memory) a.peak = d;
    }
    offset += static_cast<int>(run.step_ns.size());
    r.iterations += run.iterations;
    r.wall_ms += run.wall_ms;
  }
  set_step_stats(r);
  const int64_t mean_step = static_cast<int64_t>(r.step_mean_ms * 1e6);
  auto avg = [](double sum, double w) { return w > 0 ? static_cast<int64_t>(std::llround(sum / w)) : 0; };
  double bubble_sum = 0;
  for (const auto& [id, a] : acc) {
    DeviceReport d;
    d.id = id;
    d.busy_ns = avg(a.busy, a.w);
    d.comm_ns = avg(a.comm, a.w);
    d.exposed_comm_ns = avg(a.exposed, a.w);
    d.step_ns = avg(a.step, a.w);
    d.overhead_ns = avg(a.over, a.w);
    d.overhead_cpu_ns = avg(a.over_cpu, a.w);
    d.compute_cpu_ns = avg(a.comp_cpu, a.w);
    d.pack_cpu_ns = avg(a.pack, a.w);
    d.post_ns = avg(a.post, a.w);
    d.unpack_ns = avg(a.unpack, a.w);
    d.ops_per_step = a.ops;
    d.peak_memory = a.peak.peak_memory;
    d.breakdown = a.peak.breakdown;
    d.optimizer_state_bytes = a.peak.optimizer_state_bytes;
    // as merge_results: bubbles against the group's (pooled) step
    d.bubble_ns = std::max<int64_t>(0, mean_step - d.busy_ns);
    d.bubble_ratio = mean_step > 0 ? static_cast<double>(d.bubble_ns) / static_cast<double>(mean_step) : 0.0;
    bubble_sum += static_cast<double>(d.bubble_ns);
    r.exposed_comm_ns += d.exposed_comm_ns;
    r.devices.push_back(d);
  }
  r.bubble_ratio = mean_step > 0 && !r.devices.empty()
                       ? bubble_sum / (static_cast<double>(mean_step) * static_cast<double>(r.devices.size()))
                       : 0.0;
  return r;
}

namespace {

// Per (node, device, stream): mean duration over the measured iterations.
struct OpStat {
  double sum_ns = 0;
  int count = 0;
};

}  // namespace

Json result_json(const CompiledPlan& cp, const ReplayResult& r, const sim::Result* pred) {
  Json j;
  j["plan"] = r.plan;
  j["backend"] = r.backend;
  j["dtype"] = r.dtype_note;
  j["kernels"] = r.kernels == Kernels::kFused ? "fused" : "reference";
  j["kernel_families"] = kernel_uses_json(r.kernel_families);
  j["world_size"] = r.world_size;
  j["iterations"] = r.iterations;
  j["warmup"] = r.warmup;
  j["step_time_ms"] = r.step_mean_ms;
  j["step_time_std_ms"] = r.step_std_ms;
  j["step_time_min_ms"] = r.step_min_ms;
  Json steps = Json::array();
  for (int64_t s : r.step_ns) steps.push_back(ms(s));
  j["step_times_ms"] = steps;
  j["bubble_ratio"] = r.bubble_ratio;
  j["exposed_comm_ms"] = ms(r.exposed_comm_ns);
  // Per device as simulate's (exposed_comm_ms / devices, ms).
  j["exposed_comm_ms_per_device"] =
      r.devices.empty() ? 0.0 : ms(r.exposed_comm_ns) / static_cast<double>(r.devices.size());
  const double tokens = static_cast<double>(cp.model.tokens_per_microbatch) * cp.num_microbatches;
  j["loss"] = r.loss;
  j["wall_ms"] = r.wall_ms;
  (void)tokens;
  Json devs = Json::array();
  for (const auto& d : r.devices) {
    Json e;
    e["id"] = d.id;
    e["busy_ms"] = ms(d.busy_ns);
    e["bubble_ms"] = ms(d.bubble_ns);
    e["bubble_ratio"] = d.bubble_ratio;
    e["exposed_comm_ms"] = ms(d.exposed_comm_ns);
    e["comm_ms"] = ms(d.comm_ns);
    e["peak_memory_bytes"] = d.peak_memory;
    Json b = Json::object();
    for (size_t k = 0; k < sim::kMemCategories; ++k)
      b[std::string(sim::memory_category_name(k))] = d.breakdown[k];
    e["memory_breakdown"] = b;
    e["optimizer_state_bytes"] = d.optimizer_state_bytes;
    e["own_step_ms"] = ms(d.step_ns);
    e["overhead_ms"] = ms(d.overhead_ns);
    e["post_ms"] = ms(d.post_ns);
    e["unpack_ms"] = ms(d.unpack_ns);
    e["ops_per_step"] = d.ops_per_step;
    e["overhead_cpu_ms"] = ms(d.overhead_cpu_ns);
    e["compute_cpu_ms"] = ms(d.compute_cpu_ns);
    e["pack_cpu_ms"] = ms(d.pack_cpu_ns);
    if (pred && static_cast<size_t>(d.id) < pred->devices.size()) {
      const auto& p = pred->devices[d.id];
      e["predicted"] = {{"busy_ms", ms(p.busy)},
                        {"bubble_ms", ms(p.bubble)},
                        {"bubble_ratio", p.bubble_ratio},
                        {"exposed_comm_ms", ms(p.exposed_comm)},
                        {"peak_memory_bytes", p.peak_memory}};
    }
    devs.push_back(std::move(e));
  }
  j["devices"] = std::move(devs);
  // Per op: mean measured duration over the measured iterations, with the prediction's.
  std::map<std::tuple<int, uint32_t, std::string>, OpStat> stats;
  std::map<std::tuple<int, uint32_t, std::string>, std::string> names;
  for (const auto& o : r.ops) {
    auto key = std::make_tuple(o.device, o.node, o.stream);
    auto& s = stats[key];
    s.sum_ns += static_cast<double>(o.end_ns - o.start_ns);
    ++s.count;
    names[key] = o.name;
  }
  std::map<std::pair<int, uint32_t>, int64_t> predicted_ns;
  if (pred)
    for (uint32_t t = 0; t < pred->program.tasks.size(); ++t) {
      const auto& tk = pred->program.tasks[t];
      for (uint32_t k = 0; k < tk.part_count; ++k) {
        const int dev = static_cast<int>(pred->program.participants[tk.part_begin + k].device);
        predicted_ns[{dev, tk.node}] = pred->timing[t].end - pred->timing[t].start;
      }
    }
  Json ops = Json::array();
  for (const auto& [key, s] : stats) {
    Json o = {{"device", std::get<0>(key)},
              {"node", std::get<1>(key)},
              {"stream", std::get<2>(key)},
              {"name", names[key]},
              {"dur_ms", s.sum_ns / s.count / 1e6}};
    if (const uint32_t n = std::get<1>(key);
        n < cp.dag.nodes.size() && cp.dag.nodes[n].op != compiler::kNone)
      o["op"] = cp.model.ops[cp.dag.nodes[n].op].name;
    if (auto it = predicted_ns.find({std::get<0>(key), std::get<1>(key)}); it != predicted_ns.end())
      o["predicted_ms"] = ms(it->second);
    ops.push_back(std::move(o));
  }
  j["ops"] = std::move(ops);
  if (r.check) {
    Json c;
    c["passed"] = r.check->passed;
    c["max_abs_diff"] = r.check->max_abs_diff;
    c["max_rel_diff"] = r.check->max_rel_diff;
    c["max_rel_diff_first_step"] = r.check->max_rel_diff_first_step;
    c["worst_param"] = r.check->worst_param;
    c["tolerance"] = r.check->tolerance;
    c["loss"] = r.check->loss;
    c["reference_loss"] = r.check->reference_loss;
    c["params_compared"] = r.check->params.size();
    c["optimizer"] = r.check->optimizer;
    c["grad_clip"] = r.check->grad_clip;
    c["weights_compared"] = r.check->weights.size();
    c["max_abs_diff_weights"] = r.check->max_abs_diff_weights;
    c["max_rel_diff_weights"] = r.check->max_rel_diff_weights;
    c["worst_weight"] = r.check->worst_weight;
    c["unmatched"] = r.check->unmatched;
    j["check"] = std::move(c);
  }
  if (pred) {
    j["predicted"] = {{"step_time_ms", ms(pred->step_time)},
                      {"bubble_ratio", pred->bubble_ratio},
                      {"exposed_comm_ms", ms(pred->exposed_comm)},
                      {"exposed_comm_ms_per_device",
                       pred->devices.empty() ? 0.0
                                             : ms(pred->exposed_comm) /
                                                   static_cast<double>(pred->devices.size())}};
  }
  return j;
}

std::string result_table(const CompiledPlan& cp, const ReplayResult& r, const sim::Result* pred) {
  std::string o;
  o += fmt::format("plan           {}\n", r.plan);
  o += fmt::format("backend        {}, {} processes, {}\n", r.backend, r.world_size, r.dtype_note);
  o += fmt::format("step time      {:.3f} ms  (std {:.3f}, min {:.3f}; {} after {} warm-up)",
                   r.step_mean_ms, r.step_std_ms, r.step_min_ms,
                   count_noun(static_cast<long long>(r.step_ns.size()), "step", "steps"), r.warmup);
  if (pred) o += fmt::format("   predicted {:.3f} ms", ms(pred->step_time));
  o += "\n";
  o += fmt::format("bubble ratio   {:.2f} %", 100 * r.bubble_ratio);
  if (pred) o += fmt::format("   predicted {:.2f} %", 100 * pred->bubble_ratio);
  o += "\n";
  o += fmt::format("exposed comm   {:.3f} ms summed over devices", ms(r.exposed_comm_ns));
  if (pred) o += fmt::format("   predicted {:.3f} ms", ms(pred->exposed_comm));
  o += "\n";
  if (r.loss != 0) o += fmt::format("loss           {:.6f} (first step, summed over loss ranks)\n", r.loss);
  if (!r.kernel_families.empty())
    o += fmt::format("kernels        --kernels {}, per op family:\n               {}\n",
                     r.kernels == Kernels::kFused ? "fused" : "reference",
                     kernel_uses_table(r.kernel_families, "               "));
  o += "\n";
  o += fmt::format("{:>7}  {:>10}  {:>10}  {:>7}  {:>10}  {:>10}", "device", "busy ms", "bubble ms",
                   "bubble", "exp.comm", "peak MiB");
  if (pred) o += fmt::format("  | {:>10}  {:>10}  {:>10}", "pred busy", "pred bubble", "pred exp.c");
  o += "\n";
  for (const auto& d : r.devices) {
    o += fmt::format("{:>7}  {:>10.3f}  {:>10.3f}  {:>6.1f}%  {:>10.3f}  {:>10.2f}", d.id,
                     ms(d.busy_ns), ms(d.bubble_ns), 100 * d.bubble_ratio, ms(d.exposed_comm_ns),
                     static_cast<double>(d.peak_memory) / (1 << 20));
    if (pred && static_cast<size_t>(d.id) < pred->devices.size()) {
      const auto& p = pred->devices[d.id];
      o += fmt::format("  | {:>10.3f}  {:>10.3f}  {:>10.3f}", ms(p.busy), ms(p.bubble),
                       ms(p.exposed_comm));
    }
    o += "\n";
  }
  if (r.check) {
    const auto& c = *r.check;
    o += fmt::format(
        "\ncheck          {}: {} parameter gradients vs a single-process reference, max abs diff "
        "{:.3g}, max rel diff {:.3g} (tolerance {:.0e}; worst {})\n",
        c.passed ? "PASSED" : "FAILED", c.params.size(), c.max_abs_diff, c.max_rel_diff,
        c.tolerance, c.worst_param);
    o += fmt::format(
        "               {} parameters after the {} step{}, max abs diff {:.3g}, max rel diff "
        "{:.3g} of the update (worst {})\n",
        c.weights.size(), c.optimizer, c.grad_clip ? " (gradients clipped)" : "",
        c.max_abs_diff_weights, c.max_rel_diff_weights, c.worst_weight);
    o += fmt::format("               loss {:.6f}, reference {:.6f}\n", c.loss, c.reference_loss);
    for (const auto& u : c.unmatched) o += fmt::format("               unmatched: {}\n", u);
  }
  (void)cp;
  return o;
}

std::string chrome_trace(const CompiledPlan& cp, const ReplayResult& r, int iteration) {
  if (iteration < 0) iteration = std::max(0, static_cast<int>(r.step_ns.size()) - 1);
  std::string out = "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"stretto replay\",";
  out += fmt::format("\"plan\":\"{}\",\"backend\":\"{}\",\"iteration\":{}}},\n\"traceEvents\":[\n",
                     json_escape(cp.plan.file), json_escape(r.backend), iteration);
  bool first = true;
  auto emit = [&](const std::string& ev) {
    if (!first) out += ",\n";
    first = false;
    out += ev;
  };
  // Thread ids per (device, stream), in first-seen order with compute first.
  std::map<std::pair<int, std::string>, int> tid;
  std::set<int> devices;
  for (const auto& o : r.ops) {
    if (o.iteration != iteration) continue;
    devices.insert(o.device);
    tid.emplace(std::make_pair(o.device, o.stream), 0);
  }
  {
    std::map<int, int> next;
    for (auto& [k, v] : tid) v = k.second == "compute" ? 0 : ++next[k.first];
  }
  const int dpn = std::max(1, cp.plan.cluster.devices_per_node);
  for (int d : devices) {
    emit(fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":"
                     "\"device {} \u00b7 node {} (measured)\"}}}}",
                     d, d, d / dpn));
    emit(fmt::format("{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"args\":{{\"sort_"
                     "index\":{}}}}}",
                     d, d));
  }
  for (const auto& [k, v] : tid)
    emit(fmt::format("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{"
                     "\"name\":\"{}\"}}}}",
                     k.first, v, json_escape(k.second)));
  auto us = [](int64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); };
  for (const auto& o : r.ops) {
    if (o.iteration != iteration) continue;
    const compiler::Node& nd = cp.dag.nodes[o.node];
    std::string args = fmt::format("\"node\":{},\"tags\":\"{}\"", o.node, nd.tags.str());
    if (nd.op != compiler::kNone)
      args += fmt::format(",\"op\":\"{}\"", json_escape(cp.model.ops[nd.op].name));
    emit(fmt::format("{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{},"
                     "\"dur\":{},\"args\":{{{}}}}}",
                     json_escape(o.name), nd.kind == NodeKind::kCompute ? "compute" : "comm",
                     o.device, tid[{o.device, o.stream}], us(std::max<int64_t>(0, o.start_ns)),
                     us(std::max<int64_t>(0, o.end_ns - o.start_ns)), args));
  }
  out += "\n]}\n";
  return out;
}

}  // namespace stretto::backend
