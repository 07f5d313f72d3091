// `stretto profile PLAN... [--device cpu|cuda] [-o PROFILE.json] [--iterations N]`
// `stretto validate PLAN... [--profile P] [--iterations N] [--format table|json] [--trace FILE]`
// Both replay the plans on this host with the LibTorch backend (replay.h); see validate.h.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "commands.h"
#include "stretto/backend/validate.h"
#include "stretto/sim/session.h"

namespace stretto::cli {

namespace {

struct RunOpts {
  int iterations = 5, warmup = 1, threads = 1;
  double timeout_s = 120;
  std::string device = "cpu";
};

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "stretto";
  buf[n] = '\0';
  return buf;
}

// Replays one compiled plan (one process per device) and returns the merged measurement.
Expected<backend::ReplayResult> replay(const std::string& plan, const CompiledPlan& cp,
                                       const RunOpts& o) {
  backend::ReplayOptions ro;
  ro.iterations = o.iterations;
  ro.warmup = o.warmup;
  ro.threads = o.threads;
  ro.timeout_ms = static_cast<int64_t>(o.timeout_s * 1000);
  ro.device = o.device == "cuda" ? backend::DeviceKind::kCuda : backend::DeviceKind::kCpu;
  if (auto d = backend::check_supported(cp, ro); !d.empty()) return fail(std::move(d));
  backend::LaunchOptions lo;
  lo.exe = self_exe();
  lo.quiet = true;
  lo.args = {"replay",      plan,     "--iterations", std::to_string(o.iterations),
             "--warmup",    std::to_string(o.warmup), "--timeout", fmt::format("{}", o.timeout_s),
             "--device",    o.device, "--threads",    std::to_string(o.threads)};
  return backend::launch_local(cp, ro, lo);
}

void progress(const std::string& line) {
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "%-78s\r", line.c_str());
}
void progress_done() {
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "%78s\r", "");
}

void add_run_options(CLI::App* cmd, RunOpts& o) {
  cmd->add_option("--iterations", o.iterations, "Measured steps per plan (default 5)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", o.warmup, "Steps run first and not measured (default 1)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--device", o.device, "cpu (Gloo processes) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--threads", o.threads, "Intra-op threads per rank (default 1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--timeout", o.timeout_s, "Seconds a rank waits for a peer (default 120)")
      ->check(CLI::Range(1.0, 86400.0));
}

}  // namespace

void add_validate_commands(CLI::App& app, Commands& out) {
  struct POpts {
    std::vector<std::string> plans;
    std::string output, format;
    RunOpts run;
  };
  auto p = std::make_shared<POpts>();
  auto* prof = app.add_subcommand(
      "profile",
      "Replay plans on this host and measure every distinct compute op and collective into a "
      "profiled cost table");
  prof->add_option("PLAN", p->plans, "Plan files (JSON); their measurements are pooled")->required();
  prof->add_option("-o,--output", p->output, "Write the profiled table to FILE");
  prof->add_option("--format", p->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  add_run_options(prof, p->run);
  out.push_back({prof, [p] {
                   backend::ProfileSamples samples;
                   if (p->run.device == "cpu")
                     samples.set_host_cores(static_cast<int>(std::thread::hardware_concurrency()));
                   size_t filed = 0, done = 0;
                   Diagnostics failed;  // plans that fail are reported and skipped (exit 2)
                   for (size_t i = 0; i < p->plans.size(); ++i) {
                     const std::string& plan = p->plans[i];
                     auto s = sim::Session::open(plan);
                     if (!s) {
                       failed.insert(failed.end(), s.error().begin(), s.error().end());
                       continue;
                     }
                     progress(fmt::format("profile {}/{}: replaying {} ({} processes) ...", i + 1,
                                          p->plans.size(), plan, s->compiled().num_devices));
                     auto r = replay(plan, s->compiled(), p->run);
                     progress_done();
                     if (!r) {
                       failed.insert(failed.end(), r.error().begin(), r.error().end());
                       continue;
                     }
                     auto n = samples.add(s->compiled(), s->cost_model(), *r);
                     if (!n) return report(n.error());
                     filed += *n;
                     ++done;
                   }
                   if (done == 0) return report(failed);
                   const Json table = samples.table(p->run.device);
                   if (!p->output.empty() && !write_output(p->output, table.dump(2) + "\n")) return 2;
                   const std::string f =
                       p->format.empty() ? (stdout_is_tty() ? "table" : "json") : p->format;
                   std::string text;
                   if (f == "json") {
                     Json j = samples.stats();
                     j["profile"] = table;
                     j["op_instances"] = filed;
                     j["plans_not_filed_oversubscribed"] = samples.skipped();
                     text = j.dump(2) + "\n";
                   } else {
                     text = fmt::format("{} plan(s), {} measured op instances, {} kernel and {} "
                                        "collective series\n\n",
                                        p->plans.size(), filed, samples.kernel_series(),
                                        samples.comm_series());
                     if (samples.skipped() > 0)
                       text += fmt::format(
                           "{} plan(s) not filed: more processes than this host's {} cores (their "
                           "ops took turns on the cores)\n\n",
                           samples.skipped(), std::thread::hardware_concurrency());
                     text += samples.stats_table();
                     if (!p->output.empty())
                       text += fmt::format("\nprofiled table written to {}\n", p->output);
                   }
                   if (!write_output("", text)) return 1;
                   if (!failed.empty()) {
                     std::fputs(render_all(failed).c_str(), stderr);
                     std::fprintf(stderr, "profile: %zu of %zu plan(s) could not be replayed\n",
                                  p->plans.size() - done, p->plans.size());
                     return 2;
                   }
                   return 0;
                 }});

  struct VOpts {
    std::vector<std::string> plans;
    std::string profile, format, trace;
    int top = 10;
    RunOpts run;
  };
  auto v = std::make_shared<VOpts>();
  auto* val = app.add_subcommand(
      "validate",
      "Simulate plans (with a profiled table), replay them, and report predicted vs measured "
      "per step, device and op; several plans also get the ranking's Kendall tau");
  val->add_option("PLAN", v->plans, "Plan files (JSON)")->required();
  val->add_option("--profile", v->profile,
                  "Profiled cost table (from `stretto profile` or `import kineto`) to simulate with");
  val->add_option("--format", v->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  val->add_option("--trace", v->trace,
                  "Write a Chrome trace with predicted and measured timelines one above the other");
  val->add_option("--top", v->top, "Ops listed among those that differ most (default 10)")
      ->check(CLI::Range(0, 100000));
  add_run_options(val, v->run);
  out.push_back({val, [v] {
                   std::vector<backend::PlanValidation> results;
                   // A plan that fails (bad file, replay failure) is reported and skipped; the
                   // others are still validated and ranked; the exit code is then 2.
                   Diagnostics failed;
                   for (size_t i = 0; i < v->plans.size(); ++i) {
                     const std::string& plan = v->plans[i];
                     auto s = sim::Session::open(plan);
                     if (!s) {
                       failed.insert(failed.end(), s.error().begin(), s.error().end());
                       continue;
                     }
                     if (!v->profile.empty()) {
                       CostModelSpec spec = s->plan().costmodel;
                       if (spec.kind == CostModelSpec::Kind::kFixed) spec.options = Json::object();
                       spec.kind = CostModelSpec::Kind::kProfiled;
                       spec.profile = std::filesystem::absolute(v->profile).string();
                       if (auto e = s->set_costmodel(spec); !e) return report(e.error());
                     }
                     auto pred = s->simulate();
                     if (!pred) return report(pred.error());
                     progress(fmt::format("validate {}/{}: replaying {} ({} processes) ...", i + 1,
                                          v->plans.size(), plan, s->compiled().num_devices));
                     auto meas = replay(plan, s->compiled(), v->run);
                     progress_done();
                     if (!meas) {
                       failed.insert(failed.end(), meas.error().begin(), meas.error().end());
                       continue;
                     }
                     traces::CompareOptions co;
                     co.top = static_cast<size_t>(v->top);
                     results.push_back(backend::validate_plan(s->compiled(), *pred, *meas, co));
                   }
                   if (!v->trace.empty() &&
                       !write_output(v->trace, backend::validation_trace(results)))
                     return 2;
                   const std::string f =
                       v->format.empty() ? (stdout_is_tty() ? "table" : "json") : v->format;
                   std::string text = f == "json" ? backend::validation_json(results).dump(2) + "\n"
                                                  : backend::validation_table(results);
                   if (f != "json" && !v->trace.empty())
                     text += fmt::format("\ntrace written to {}\n", v->trace);
                   if (!write_output("", text)) return 1;
                   if (!failed.empty()) {
                     std::fputs(render_all(failed).c_str(), stderr);
                     std::fprintf(stderr, "validate: %zu of %zu plan(s) could not be validated\n",
                                  v->plans.size() - results.size(), v->plans.size());
                     return 2;
                   }
                   return 0;
                 }});
}

}  // namespace stretto::cli
