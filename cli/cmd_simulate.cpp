// `stretto simulate PLAN [--trace FILE] [--format table|json] [--critical-path] [--fold-replicas]`
// `stretto export chrome PLAN [-o FILE]`
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "commands.h"
#include "stretto/sim/session.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto::cli {

namespace {

double ms(sim::SimTime ns) {
  return static_cast<double>(ns) / 1e6;
}
std::string gib(int64_t b) {
  return fmt::format("{:.2f}", static_cast<double>(b) / (1 << 30));
}

Json result_json(const CompiledPlan& cp, const sim::Result& r,
                 const std::vector<sim::CriticalStep>* path) {
  Json j;
  j["plan"] = cp.plan.file;
  j["step_time_ms"] = ms(r.step_time);
  j["bubble_ratio"] = r.bubble_ratio;
  j["exposed_comm_ms"] = ms(r.exposed_comm);
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
  Json devs = Json::array();
  for (const auto& d : r.devices) {
    Json e;
    e["id"] = d.id;
    e["busy_ms"] = ms(d.busy);
    e["bubble_ms"] = ms(d.bubble);
    e["bubble_ratio"] = d.bubble_ratio;
    e["exposed_comm_ms"] = ms(d.exposed_comm);
    e["comm_ms"] = ms(d.comm);
    e["peak_memory_bytes"] = d.peak_memory;
    e["peak_memory_time_ms"] = ms(d.peak_time);
    Json b = Json::object();
    for (size_t k = 0; k < sim::kMemCategories; ++k)
      b[std::string(sim::memory_category_name(k))] = d.breakdown[k];
    e["memory_breakdown"] = b;
    e["over_capacity"] = d.over_capacity;
    devs.push_back(std::move(e));
  }
  j["devices"] = std::move(devs);
  if (path) {
    Json cpj = Json::array();
    for (const auto& s : *path)
      cpj.push_back({{"op", s.what},
                     {"device", s.device},
                     {"start_ms", ms(s.start)},
                     {"end_ms", ms(s.end)},
                     {"waited_for", s.waited_for}});
    j["critical_path"] = std::move(cpj);
    const sim::CriticalPathBreakdown b = sim::breakdown(*path);
    j["critical_path_breakdown_ms"] = {
        {"compute", ms(b.compute)}, {"communication", ms(b.comm)}, {"waiting", ms(b.wait)}};
  }
  return j;
}

std::string result_table(const CompiledPlan& cp, const sim::Result& r, bool color) {
  std::string o;
  const char* bold = color ? "\033[1m" : "";
  const char* red = color ? "\033[1;31m" : "";
  const char* off = color ? "\033[0m" : "";
  o += fmt::format("plan           {}\n", cp.plan.file);
  o += fmt::format("{}step time      {:.3f} ms{}\n", bold, ms(r.step_time), off);
  o += fmt::format("bubble ratio   {:.2f} %   (idle compute over devices x step time)\n",
                   100 * r.bubble_ratio);
  o += fmt::format("exposed comm   {:.3f} ms summed over devices ({:.3f} ms per device)\n",
                   ms(r.exposed_comm), ms(r.exposed_comm) / std::max<size_t>(1, r.devices.size()));
  o += fmt::format(
      "MFU            {:.1f} %   ({:.3g} model FLOPs, peak {:.0f} TFLOP/s x {} devices)\n",
      100 * r.mfu, r.model_flops, cp.plan.cluster.device.peak_tflops, r.devices.size());
  o += fmt::format("throughput     {:.0f} tokens/s\n", r.tokens_per_s);
  o += fmt::format(
      "simulated      {} events in {:.1f} ms (build {:.1f}, prepare {:.1f}, run {:.1f}, metrics "
      "{:.1f}){}\n\n",
      r.events, r.sim_wall_ms, r.phases.build_ms, r.phases.prepare_ms, r.phases.run_ms,
      r.phases.metrics_ms, r.folded ? " (identical replicas folded)" : "");
  if (const auto missing = unmodelled_effects(cp); !missing.empty()) {
    o.pop_back();  // the effects close the header block
    for (size_t i = 0; i < missing.size(); ++i)
      o += fmt::format("{}{}\n", i ? "               " : "not modelled   ", missing[i]);
    o += "\n";
  }
  // worst device: largest bubble, then largest peak memory
  size_t worst = 0, worst_mem = 0;
  for (size_t i = 0; i < r.devices.size(); ++i) {
    if (r.devices[i].bubble > r.devices[worst].bubble) worst = i;
    if (r.devices[i].peak_memory > r.devices[worst_mem].peak_memory) worst_mem = i;
  }
  o += fmt::format("{:>9}  {:>10}  {:>10}  {:>7}  {:>10}  {:>9}  {:>7} {:>7} {:>7} {:>7} {:>7}\n",
                   "device", "busy ms", "bubble ms", "bubble", "exp.comm", "peak GiB", "params",
                   "grads", "optim", "activ", "other");
  for (size_t i = 0; i < r.devices.size();) {
    const auto& d = r.devices[i];
    size_t j = i + 1;
    auto same = [&](const sim::DeviceMetrics& e) {
      return e.busy == d.busy && e.exposed_comm == d.exposed_comm &&
             e.peak_memory == d.peak_memory && e.breakdown == d.breakdown;
    };
    while (j < r.devices.size() && same(r.devices[j]) && j != worst && j != worst_mem) ++j;
    if (i == worst || i == worst_mem) j = i + 1;
    std::string id =
        j - i > 1 ? fmt::format("{}-{}", d.id, r.devices[j - 1].id) : std::to_string(d.id);
    int64_t other = d.breakdown[4] + d.breakdown[5] + d.breakdown[6];
    std::string mark;
    if (i == worst) mark += " \u25c0 largest bubble";
    if (i == worst_mem) mark += " \u25c0 peak memory";
    if (d.over_capacity)
      mark += fmt::format(" \u26a0 exceeds {:.0f} GiB", cp.plan.cluster.device.memory_GiB);
    const char* c = (i == worst || d.over_capacity) ? red : "";
    o += fmt::format(
        "{}{:>9}  {:>10.3f}  {:>10.3f}  {:>6.1f}%  {:>10.3f}  {:>9}  {:>7} {:>7} {:>7} {:>7} "
        "{:>7}{}{}\n",
        c, id, ms(d.busy), ms(d.bubble), 100 * d.bubble_ratio, ms(d.exposed_comm),
        gib(d.peak_memory), gib(d.breakdown[0]), gib(d.breakdown[1]), gib(d.breakdown[2]),
        gib(d.breakdown[3]), gib(other), mark, *c ? off : "");
    i = j;
  }
  return o;
}

std::string critical_table(const std::vector<sim::CriticalStep>& path) {
  // Consecutive steps of one region pass on one device are folded into one line.
  std::string o = "\ncritical path (what determines the step time):\n";
  const sim::CriticalPathBreakdown b = sim::breakdown(path);
  const double total = static_cast<double>(std::max<sim::SimTime>(1, b.compute + b.comm + b.wait));
  o += fmt::format(
      "  {:.3f} ms = compute {:.3f} ms ({:.0f}%) + communication {:.3f} ms ({:.0f}%) + waiting "
      "{:.3f} ms ({:.0f}%, host dispatch and rendezvous)\n",
      (b.compute + b.comm + b.wait) / 1e6, b.compute / 1e6, 100 * b.compute / total, b.comm / 1e6,
      100 * b.comm / total, b.wait / 1e6, 100 * b.wait / total);
  o += fmt::format("  {:>10}  {:>10}  {:>6}  {}\n", "start ms", "end ms", "device",
                   "op / why it started then");
  for (size_t i = 0; i < path.size();) {
    size_t j = i + 1;
    // Region pass key: the tags without LAYER, plus the device.
    auto key = [](const sim::CriticalStep& s) {
      std::string t = s.what.substr(0, s.what.find(" ("));
      std::string k;
      size_t pos = 0;
      while (pos < t.size()) {
        size_t e = t.find(' ', pos);
        std::string tok = t.substr(pos, e == std::string::npos ? std::string::npos : e - pos);
        if (tok.rfind("LAYER", 0) != 0) k += tok + " ";
        if (e == std::string::npos) break;
        pos = e + 1;
      }
      return k + std::to_string(s.device);
    };
    while (j < path.size() && key(path[j]) == key(path[i]) &&
           path[j].waited_for.rfind("waited for its", 0) == 0)
      ++j;
    o += fmt::format("  {:>10.3f}  {:>10.3f}  {:>6}  {}{}\n", path[i].start / 1e6,
                     path[j - 1].end / 1e6, path[i].device, path[i].what,
                     j - i > 1 ? fmt::format("  (+{} more ops)", j - i - 1) : "");
    o += fmt::format("  {:>10}  {:>10}  {:>6}    {}\n", "", "", "", path[i].waited_for);
    i = j;
  }
  return o;
}

}  // namespace

void add_simulate_commands(CLI::App& app, CLI::App& export_app, Commands& out) {
  struct Opts {
    std::string plan, trace, format, output;
    bool critical = false, fold = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("simulate", "Simulate one training step of a plan");
  cmd->add_option("PLAN", o->plan, "Plan file (JSON)")->required();
  cmd->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace to FILE");
  cmd->add_option("--format", o->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_flag("--critical-path", o->critical,
                "Report the chain of ops and waits that sets the step time");
  cmd->add_flag("--fold-replicas", o->fold,
                "Simulate one of each group of identical data-parallel replicas");
  out.push_back(
      {cmd, [o] {
         const bool tty_err = isatty(STDERR_FILENO) != 0;
         if (tty_err) std::fprintf(stderr, "compiling %s ...\r", o->plan.c_str());
         auto s = sim::Session::open(o->plan);
         if (!s) return report(s.error());
         sim::SimOptions so;
         so.fold_replicas = o->fold;
         if (tty_err) {
           // one status line, rewritten in place when the phase or the whole percent changes
           so.progress = [plan = o->plan, last = std::string()](std::string_view phase,
                                                                double fraction) mutable {
             std::string line = phase == "simulating" ? fmt::format("simulating {} ... {:3.0f}%",
                                                                    plan, 100.0 * fraction)
                                                      : fmt::format("{} {} ...", phase, plan);
             if (line == last) return;
             std::fprintf(stderr, "%-*s\r", 70, line.c_str());
             last = std::move(line);
           };
         }
         so.memory_curves = !o->trace.empty();  // only a trace shows them
         auto r = s->simulate(so);
         if (tty_err) std::fprintf(stderr, "%*s\r", 70, "");
         if (!r) return report(r.error());
         std::vector<sim::CriticalStep> path;
         if (o->critical) path = sim::critical_path(s->compiled(), *r);
         if (!o->trace.empty() && !write_output(o->trace, traces::chrome_trace(s->compiled(), *r)))
           return 2;
         const std::string f = o->format.empty() ? (stdout_is_tty() ? "table" : "json") : o->format;
         std::string text;
         if (f == "json") {
           text = result_json(s->compiled(), *r, o->critical ? &path : nullptr).dump(2) + "\n";
         } else {
           text = result_table(s->compiled(), *r, stdout_is_tty());
           if (o->critical) text += critical_table(path);
           if (!o->trace.empty())
             text += fmt::format("\ntrace written to {} (open it in https://ui.perfetto.dev)\n",
                                 o->trace);
         }
         return write_output("", text) ? 0 : 1;
       }});
  auto* ex =
      export_app.add_subcommand("chrome", "Simulate and write only the Chrome/Perfetto trace");
  ex->add_option("PLAN", o->plan, "Plan file (JSON)")->required();
  ex->add_option("-o,--output", o->output, "Output file (default: stdout)");
  out.push_back({ex, [o] {
                   auto s = sim::Session::open(o->plan);
                   if (!s) return report(s.error());
                   auto r = s->simulate();
                   if (!r) return report(r.error());
                   return write_output(o->output, traces::chrome_trace(s->compiled(), *r)) ? 0 : 2;
                 }});
}

}  // namespace stretto::cli
