#include "stretto/plan/estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <unordered_set>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "stretto/plan/json_source.h"
#include "stretto/support/limits.h"
#include "stretto/support/plural.h"

namespace stretto::plan {

namespace {

// Largest single quantity (bytes, elements) the model expansion may produce: 2^53, so that it
// also stays exact in a double. No real tensor is within orders of magnitude of 8 PiB.
constexpr double kMaxQuantity = 9007199254740992.0;  // 2^53
// Largest sum the simulation forms (memory over layers and microbatches, time over tasks).
constexpr double kMaxSum = 4611686018427387904.0;  // 2^62

// Measured costs. Compile: README.md "Performance" (bench_compile: 271 MiB for 673,665 DAG
// nodes and 2.50 M edges, ~420 B per node, MoE-heavy) and a synthetic PP2 plan with 100,000
// microbatches (266 MB peak RSS for 1.0 M nodes, 1.2 M edges: ~266 B per node); 300 B is
// between the two. Full simulation: 2.19 GiB for 18.9 M tasks, 23.2 M deps, 20.0 M events
// (README's reference row) -> ~125 B per task; memory curves (--trace): +0.44 GiB at 18.9 M
// tasks -> ~25 B per task.
constexpr double kBytesPerNode = 300;
constexpr double kBytesPerTask = 125;
constexpr double kBytesPerTaskCurves = 25;
// Per declared device, used or not: metrics (DeviceMetrics), topology, per-device program
// headers and the per-device entries of the result (table rows, JSON objects). Measured: a
// synthetic plan using 2 of 10^7 declared devices grew past 20 GB (over 2 KB per device) before
// its JSON result was written; 4 KB per device keeps that refused.
constexpr double kBytesPerDevice = 4096;
// Per device the plan uses, on top: its links, streams, program, engine state and metrics.
// Measured: a sweep point of examples/gpt_pp4_dp2_1f1b.json at tp 1, pp 1 peaked at 416 MB
// with dp 65,536 and 1,676 MB with dp 262,144 (replicas folded): 6.4 KiB per used device, of
// which kBytesPerDevice is counted above. dp 1,048,576 was estimated at 4 GiB and ran out of
// memory at 6 GB.
constexpr double kBytesPerUsedDevice = 2560;

Diagnostic at(const JsonSource* src, const std::string& ptr, std::string msg, std::string hint) {
  if (src) return src->error_at(ptr, std::move(msg), std::move(hint));
  Diagnostic d;
  d.message = std::move(msg);
  d.hint = std::move(hint);
  d.loc.json_pointer = ptr;
  return d;
}

std::string num(double v) {
  if (v < 1e6) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

int64_t plan_microbatches(const Plan& plan) {
  int64_t m = 1;
  if (plan.builder) m = std::max<int64_t>(m, plan.builder->microbatches);
  for (const Directive& d : plan.schedule)
    if (d.op == DirectiveOp::kSplit) m = std::max<int64_t>(m, d.num_microbatches);
  return m;
}

}  // namespace

Diagnostics check_plan_sizes(const Plan& plan, const JsonSource* src) {
  Diagnostics out;
  const ModelSpec& m = plan.model;
  const std::string P = m.pointer;
  const double mbs = static_cast<double>(plan_microbatches(plan));
  const double layers = std::max(1, m.layers);
  auto over = [&](double v, double limit, const std::string& field, const std::string& what,
                  const std::string& hint) {
    if (v <= limit) return false;
    out.push_back(at(src, P + "/" + field,
                     fmt::format("{} is {} bytes, beyond what Stretto can count ({} bytes)", what,
                                 num(v), num(limit)),
                     hint));
    return true;
  };
  if (m.family == ModelSpec::Family::kTransformer) {
    const double dt = dtype_bytes(m.dtype);
    const double tokens = static_cast<double>(m.seq_len) * static_cast<double>(m.microbatch_size);
    const double h = static_cast<double>(m.hidden);
    const double ffn = static_cast<double>(m.ffn_hidden);
    const double vocab = static_cast<double>(m.vocab);
    const std::string hint =
        "each value is within its range, but together they describe tensors no machine holds; "
        "check seq_len, microbatch_size, hidden, ffn_hidden and vocab";
    bool bad = over(tokens * h * dt, kMaxQuantity, "hidden",
                    fmt::format("one layer's activation (seq_len {} x microbatch_size {} x hidden "
                                "{} x {} B)",
                                m.seq_len, m.microbatch_size, m.hidden, dt),
                    hint);
    bad |= over(tokens * ffn * dt, kMaxQuantity, "ffn_hidden",
                fmt::format("one MLP activation (seq_len {} x microbatch_size {} x ffn_hidden {} "
                            "x {} B)",
                            m.seq_len, m.microbatch_size, m.ffn_hidden, dt),
                hint);
    bad |= over(tokens * vocab * 4, kMaxQuantity, "vocab",
                fmt::format("the logits of one microbatch (seq_len {} x microbatch_size {} x "
                            "vocab {} x 4 B)",
                            m.seq_len, m.microbatch_size, m.vocab),
                hint);
    bad |= over(h * std::max(vocab, 3 * ffn) * dt, kMaxQuantity, "hidden",
                fmt::format("one weight matrix (hidden {} x {} {} x {} B)", m.hidden,
                            vocab >= 3 * ffn ? "vocab" : "3 x ffn_hidden",
                            vocab >= 3 * ffn ? m.vocab : m.ffn_hidden, dt),
                hint);
    // Attention works on heads x head_dim wide queries (= hidden unless head_dim is given).
    const double ad = static_cast<double>(m.heads) * static_cast<double>(m.attention_head_dim());
    if (m.head_dim > 0)  // (otherwise a·d = hidden, checked above)
      bad |= over(tokens * ad * dt, kMaxQuantity, "head_dim",
                  fmt::format("one attention output (seq_len {} x microbatch_size {} x heads {} "
                              "x head_dim {} x {} B)",
                              m.seq_len, m.microbatch_size, m.heads, m.head_dim, dt),
                  hint);
    // Attention FLOPs grow with seq_len^2: keep them finite and the time sums in range.
    bad |= over(tokens * static_cast<double>(m.seq_len) * std::max(h, ad) * 4, 1e30, "seq_len",
                "the attention FLOPs of one layer", hint);
    if (m.moe) {
      const double e = m.moe->experts, ef = static_cast<double>(m.moe->expert_ffn_hidden);
      bad |= over(e * h * ef * 3 * dt, kMaxQuantity, "moe/expert_ffn_hidden",
                  fmt::format("one layer's expert weights (experts {} x hidden {} x 3 x "
                              "expert_ffn_hidden {} x {} B)",
                              m.moe->experts, m.hidden, m.moe->expert_ffn_hidden, dt),
                  hint);
      bad |= over(tokens * m.moe->top_k * ef * dt, kMaxQuantity, "moe/top_k",
                  "one layer's routed expert activations", hint);
    }
    if (!bad) {
      // Sums: activations of every layer for every microbatch, weights with optimizer state.
      const double per_layer = tokens * (h * 16 + ffn * 4) * dt + tokens * vocab * 4 / layers;
      over(per_layer * layers * mbs, kMaxSum, "layers",
           fmt::format("the activations of {} layers x {} microbatches", m.layers, num(mbs)),
           "fewer microbatches or smaller sizes");
      over(h * (12 * h + 3 * ffn) * layers * 16, kMaxSum, "layers",
           "the parameters, gradients and optimizer state", "check layers, hidden, ffn_hidden");
    }
  } else {
    over(static_cast<double>(m.activation_bytes) * layers * mbs, kMaxSum, "activation_bytes",
         fmt::format("activation_bytes {} x {} layers x {} microbatches", m.activation_bytes,
                     m.layers, num(mbs)),
         "smaller activation_bytes or fewer microbatches");
    over(static_cast<double>(m.param_bytes) * layers * 8, kMaxSum, "param_bytes",
         "the parameters, gradients and optimizer state (param_bytes x layers x 8)",
         "smaller param_bytes");
    over(m.flops * 3 * layers * mbs, 1e30, "flops",
         "the FLOPs of the step (flops x 3 x layers x microbatches)", "smaller flops");
  }
  const CostModelSpec& c = plan.costmodel;
  if (c.kind == CostModelSpec::Kind::kFixed) {
    // (A value times its unit may not fit in int64 nanoseconds: it converts to a negative.)
    const bool negative =
        std::min({c.f_ns, c.b_ns, c.bi_ns, c.bw_ns, c.comm_ns}) < 0;
    const double longest = static_cast<double>(std::max(
        {c.f_ns, c.b_ns, c.bi_ns, c.bw_ns, c.comm_ns}));
    const double total = negative ? 1e300 : longest * 4 * layers * mbs;
    if (total > kMaxSum)
      out.push_back(at(src, c.pointer,
                       negative ? std::string("a fixed cost in its unit does not fit in 64-bit "
                                              "nanoseconds (more than 292 years)")
                                : fmt::format("the fixed costs add up to {} ns over {} layers x "
                                              "{} microbatches, beyond the simulator's clock "
                                              "(2^62 ns)",
                                              num(total), m.layers, num(mbs)),
                       "check the fixed costs' \"unit\" (ns, us, ms, s)"));
  }
  const double devices =
      static_cast<double>(plan.cluster.nodes) * static_cast<double>(plan.cluster.devices_per_node);
  if (devices > 2147483647.0)
    out.push_back(at(src, "/cluster/nodes",
                     fmt::format("the cluster has {} x {} = {} devices; at most 2^31 - 1",
                                 plan.cluster.nodes, plan.cluster.devices_per_node, num(devices)),
                     "declare only the nodes the plan uses"));
  return out;
}

ResourceEstimate estimate_resources(const Plan& plan, bool fold_replicas, bool simulate) {
  ResourceEstimate e;
  e.devices_declared =
      static_cast<int64_t>(plan.cluster.nodes) * static_cast<int64_t>(plan.cluster.devices_per_node);
  e.microbatches = plan_microbatches(plan);
  std::unordered_set<int> used;
  int64_t dp = 1, tp = 1, stages = 0;
  auto scan = [&](const std::vector<Directive>& ds) {
    for (const Directive& d : ds) {
      for (int x : d.devices) used.insert(x);
      for (const auto& g : d.device_groups) {
        for (int x : g) used.insert(x);
        tp = std::max<int64_t>(tp, static_cast<int64_t>(g.size()));
      }
      if (d.op == DirectiveOp::kReplicate)
        dp = std::max<int64_t>(dp, static_cast<int64_t>(d.devices.size()));
      if (d.op == DirectiveOp::kPlace) ++stages;
    }
  };
  scan(plan.schedule);
  if (plan.builder) {
    scan(plan.builder->base);
    if (const auto& l = plan.builder->layout) {
      for (int64_t d = 0; d < int64_t{l->tp} * l->pp * l->dp; ++d) used.insert(static_cast<int>(d));
      dp = std::max<int64_t>(dp, l->dp);
      tp = std::max<int64_t>(tp, l->tp);
      stages = std::max<int64_t>(stages, l->pp);
    } else if (plan.builder->base.empty()) {
      for (int r = 0; r < plan.builder->ranks; ++r) used.insert(r);
      stages = std::max<int64_t>(stages, plan.builder->ranks);
    }
  }
  e.devices_used = std::max<int64_t>(1, static_cast<int64_t>(used.size()));
  e.replication = fold_replicas ? 1 : std::max<int64_t>(1, dp * tp);
  const ModelSpec& m = plan.model;
  // DAG nodes: every op of every layer, forward and backward, per microbatch (2.05 nodes per
  // op: the passes and the order barriers), TP collectives (9 per layer and microbatch), plus
  // a transfer per stage boundary and pass. Measured: examples/gpt_pp4_dp2_1f1b.json 17.3
  // nodes per layer and microbatch, the Llama PP4 x DP4 example 17.7, the TP8 Megatron
  // example 25.2, the MoE example 21.8, a synthetic PP2 plan 2.5.
  double ops_per_layer = m.family == ModelSpec::Family::kSynthetic ? 1 : 8;
  if (m.moe) ops_per_layer += 3;
  const double layers = std::max(1, m.layers);
  const double mb = static_cast<double>(e.microbatches);
  e.dag_nodes = layers * (ops_per_layer * 2.05 + (tp > 1 ? 9 : 0)) * mb +
                static_cast<double>(stages) * 2 * mb;
  e.compile_bytes = e.dag_nodes * kBytesPerNode;
  if (simulate) {
    e.tasks = e.dag_nodes * static_cast<double>(e.replication) * 1.1;
    e.simulate_bytes = e.tasks * (kBytesPerTask + kBytesPerTaskCurves);
  }
  e.simulate_bytes += static_cast<double>(e.devices_declared) * kBytesPerDevice +
                      static_cast<double>(e.devices_used) * kBytesPerUsedDevice;
  return e;
}

uint64_t available_memory_bytes() {
  uint64_t avail = 0;
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (f >> key >> kb >> unit)
      if (key == "MemAvailable:") {
        avail = kb * 1024;
        break;
      }
  }
  // A cgroup limit (containers) may be lower than the machine's.
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream f(path);
    std::string v;
    if (!(f >> v) || v == "max") continue;
    uint64_t lim = 0;
    try {
      lim = std::stoull(v);
    } catch (...) {
      continue;
    }
    uint64_t usage = 0;
    std::ifstream u(std::string(path).find("memory.max") != std::string::npos
                        ? "/sys/fs/cgroup/memory.current"
                        : "/sys/fs/cgroup/memory/memory.usage_in_bytes");
    u >> usage;
    if (lim > usage && lim < (uint64_t{1} << 60)) {
      const uint64_t room = lim - usage;
      avail = avail ? std::min(avail, room) : room;
    }
  }
  // An address-space limit (ulimit -v) caps what this process can allocate, whatever is free.
  if (rlimit rl{}; getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    uint64_t pages = 0;
    std::ifstream statm("/proc/self/statm");
    statm >> pages;
    const uint64_t used = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t room = rl.rlim_cur > used ? rl.rlim_cur - used : 1;
    avail = avail ? std::min(avail, room) : room;
  }
  return avail;
}

namespace {
uint64_t g_max_memory = 0;
}

void set_max_memory_bytes(uint64_t bytes) {
  g_max_memory = bytes;
}

uint64_t memory_budget_bytes() {
  if (g_max_memory) return g_max_memory;
  if (const char* e = std::getenv("STRETTO_MAX_MEMORY"))
    if (auto v = parse_byte_size(e); v && *v > 0) return *v;
  return available_memory_bytes();
}

Diagnostics check_memory_budget(const Plan& plan, const JsonSource* src, bool fold_replicas,
                                bool simulate) {
  const ResourceEstimate e = estimate_resources(plan, fold_replicas, simulate);
  const bool set = g_max_memory != 0 || std::getenv("STRETTO_MAX_MEMORY");
  if (!set && e.total_bytes() <= kUncheckedBytes) return {};
  const uint64_t budget = memory_budget_bytes();
  if (budget == 0) return {};
  if (e.total_bytes() <= static_cast<double>(budget)) return {};
  std::string msg = fmt::format(
      "this plan needs ~{} to {} ({}, {} DAG nodes{}), more than the {} {}",
      human_bytes(e.total_bytes()), simulate ? "compile and simulate" : "compile",
      count_noun(e.devices_used, "device", "devices"), num(e.dag_nodes),
      simulate ? fmt::format(", {} engine tasks", num(e.tasks)) : std::string(),
      human_bytes(static_cast<double>(budget)),
      set ? "allowed by --max-memory" : "this machine has available");
  std::string hint;
  std::string ptr = "/schedule";
  const double device_bytes = static_cast<double>(e.devices_declared) * kBytesPerDevice +
                              static_cast<double>(e.devices_used) * kBytesPerUsedDevice;
  if (device_bytes > e.total_bytes() / 2 && e.devices_used < e.devices_declared) {
    ptr = "/cluster";
    hint = fmt::format(
        "the cluster declares {} devices but the plan uses {}; declare only those (nodes, "
        "devices_per_node)",
        num(static_cast<double>(e.devices_declared)), e.devices_used);
  } else if (device_bytes > e.total_bytes() / 2) {
    ptr = "/cluster";
    hint = fmt::format(
        "most of it is per device: {} devices at ~{:.1f} KiB each; use fewer devices (a smaller "
        "dp, tp or pp), or raise --max-memory",
        e.devices_used, (kBytesPerDevice + kBytesPerUsedDevice) / 1024);
  } else if (simulate && !fold_replicas && e.replication > 1) {
    // (`simulate` has the option; gui and compare take the plan as written)
    hint = fmt::format(
        "fold the replicas (`stretto simulate --fold-replicas` simulates one of each group of {} "
        "identical replicas), use fewer microbatches, or raise --max-memory",
        e.replication);
  } else {
    hint = fmt::format("use fewer microbatches ({} now) or fewer layers, or raise --max-memory",
                       num(static_cast<double>(e.microbatches)));
  }
  Diagnostics out;
  out.push_back(at(src, ptr, std::move(msg), std::move(hint)));
  return out;
}

Diagnostics check_schedule_budget(int ranks, int stages_per_rank, int microbatches) {
  const double pairs = static_cast<double>(std::max(1, ranks)) *
                       static_cast<double>(std::max(1, stages_per_rank)) *
                       static_cast<double>(std::max(1, microbatches));
  // The directive list is a plan file: one that no command may read back is refused before it
  // is built (1,000,000 microbatches of 1f1b on 4 ranks peaked at 5.6 GiB to print ~800 MB).
  // Measured: 4 ranks x 10,000 microbatches of 1f1b print 7,991,885 bytes (~200 B per pair).
  constexpr double kTextBytesPerPair = 200;
  const double text = pairs * kTextBytesPerPair;
  if (text > static_cast<double>(max_input_bytes())) {
    Diagnostic d;
    d.loc.file = "--microbatches";
    d.message = fmt::format(
        "{} x {} per rank x {} make a directive list of ~{}, more than a plan file may hold ({}, "
        "--max-input-size)",
        count_noun(ranks, "rank", "ranks"), count_noun(std::max(1, stages_per_rank), "stage", "stages"),
        count_noun(microbatches, "microbatch", "microbatches"), human_bytes(text),
        human_bytes(static_cast<double>(max_input_bytes())));
    d.hint = fmt::format("use at most {} microbatches (a schedule's shape repeats after a few "
                         "times the rank count)",
                         static_cast<int64_t>(static_cast<double>(max_input_bytes()) /
                                              (kTextBytesPerPair * pairs / std::max(1, microbatches))));
    return {d};
  }
  const uint64_t budget = memory_budget_bytes();
  if (budget == 0) return {};
  // Measured: 4 ranks x 1,000,000 microbatches of 1f1b took 5.8 GB peak RSS (~1,450 B per
  // pair: the schedule grid, the order directives and their JSON document and text).
  constexpr double kBytesPerPair = 1500;
  const double need = pairs * kBytesPerPair;
  if (need <= static_cast<double>(budget)) return {};
  Diagnostic d;
  d.loc.file = "build-schedule";
  d.message = fmt::format(
      "{} x {} per rank x {} needs ~{} for the directive list, more than the {} {}",
      count_noun(ranks, "rank", "ranks"), count_noun(std::max(1, stages_per_rank), "stage", "stages"),
      count_noun(microbatches, "microbatch", "microbatches"), human_bytes(need),
      human_bytes(static_cast<double>(budget)),
      g_max_memory ? "allowed by --max-memory" : "available");
  d.hint = "use fewer microbatches (a schedule's shape repeats after a few times the rank count)";
  return {d};
}

}  // namespace stretto::plan
