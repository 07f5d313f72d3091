// `stretto profile PLAN... [--device cpu|cuda] [-o PROFILE.json] [--iterations N]`
// `stretto validate PLAN... [--profile P] [--iterations N] [--format table|json] [--trace FILE]`
// Both replay the plans on this host with the LibTorch backend (replay.h); see validate.h.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "commands.h"
#include "output.h"
#include "stretto/backend/validate.h"
#include "stretto/sim/session.h"
#include "stretto/sim/warnings.h"

namespace stretto::cli {

using plan::CostModelSpec;
using plan::Json;

namespace {

struct RunOpts {
  int iterations = 5, warmup = 1, threads = 1, rounds = 1;
  double timeout_s = 120;
  std::string device = "cpu";
};

// Replays one compiled plan (one process per device) and returns the merged measurement.
Expected<backend::ReplayResult> replay(const std::string& plan, const compiler::CompiledPlan& cp,
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
  cmd->add_option("--rounds", o.rounds,
                  "Replay every plan this many times, round-robin over the plans (the order reversed "
                  "every other round), and pool the measured steps (default 1): a drift of the "
                  "host's speed then touches every plan alike")
      ->check(CLI::Range(1, 1000));
}

// Every measured step's ops are kept until the rounds are pooled: refuse more steps per plan
// than one replay may measure (--iterations' own limit) before replaying anything.
constexpr int64_t kMaxPooledSteps = 100000;
bool steps_fit(const RunOpts& o, const char* cmd) {
  if (static_cast<int64_t>(o.rounds) * o.iterations <= kMaxPooledSteps) return true;
  std::fprintf(stderr,
               "%s: --rounds %d x --iterations %d is %lld measured steps per plan, more than %lld\n"
               "hint: fewer rounds or fewer iterations per round\n",
               cmd, o.rounds, o.iterations, static_cast<long long>(o.rounds) * o.iterations,
               static_cast<long long>(kMaxPooledSteps));
  return false;
}

// ", round 2/4" in progress lines when there are several rounds.
std::string round_note(const RunOpts& o, int round) {
  return o.rounds > 1 ? fmt::format(", round {}/{}", round + 1, o.rounds) : std::string();
}

// The order of round `r` (0-based) over `n` plans: forward, then backward, ... (ABBA), so a
// steady drift of the host's speed during the rounds averages out over every plan.
std::vector<size_t> round_order(size_t n, int r) {
  std::vector<size_t> o(n);
  for (size_t i = 0; i < n; ++i) o[i] = r % 2 == 0 ? i : n - 1 - i;
  return o;
}

// Opens every plan; a plan that does not open is reported in `failed` and left as nullopt.
std::vector<std::optional<sim::Session>> open_all(const std::vector<std::string>& plans,
                                                  Diagnostics& failed) {
  std::vector<std::optional<sim::Session>> out;
  for (const auto& plan : plans) {
    auto s = sim::Session::open(plan);
    if (!s) {
      failed.insert(failed.end(), s.error().begin(), s.error().end());
      out.emplace_back();
    } else {
      out.emplace_back(std::move(*s));
    }
  }
  return out;
}

}  // namespace

void add_validate_commands(CLI::App& app, Commands& out) {
  struct POpts {
    std::vector<std::string> plans;
    std::string output, format;
    RunOpts run;
    bool force = false;
  };
  auto p = std::make_shared<POpts>();
  auto* prof = app.add_subcommand("profile", kProfileSummary);
  prof->add_option("PLAN", p->plans, "Plan files (JSON); their measurements are pooled")->required();
  prof->add_option("-o,--output", p->output, "Write the profiled table to FILE");
  prof->add_option("--format", p->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  add_run_options(prof, p->run);
  prof->add_flag("--force", p->force,
                 "File replays with more processes than this host's cores too (their op times "
                 "then include waiting for a core), and write a table even if nothing was filed");
  out.push_back({prof, [p] {
                   if (!steps_fit(p->run, "profile")) return 2;
                   if (auto ok = check_output(p->output, p->plans); !ok) return report(ok.error());
                   backend::ProfileSamples samples;
                   if (p->run.device == "cpu")
                     samples.set_host_cores(static_cast<int>(std::thread::hardware_concurrency()));
                   samples.set_file_oversubscribed(p->force);
                   size_t filed = 0;
                   Diagnostics failed;  // plans that fail are reported and skipped (exit 2)
                   auto sessions = open_all(p->plans, failed);
                   std::set<size_t> oversubscribed;  // replayed, not filed (ProfileSamples::add)
                   for (int round = 0; round < p->run.rounds; ++round)
                     for (size_t i : round_order(p->plans.size(), round)) {
                       auto& s = sessions[i];
                       if (!s) continue;
                       const std::string& plan = p->plans[i];
                       progress(fmt::format("profile {}/{}{}: replaying {} ({} processes) ...", i + 1,
                                            p->plans.size(), round_note(p->run, round), plan,
                                            s->compiled().num_devices));
                       auto r = replay(plan, s->compiled(), p->run);
                       progress_done();
                       if (!r) {
                         failed.insert(failed.end(), r.error().begin(), r.error().end());
                         s.reset();  // not replayed again
                         continue;
                       }
                       const size_t skipped_before = samples.skipped();
                       filed += samples.add(s->compiled(), *r);
                       if (samples.skipped() > skipped_before) oversubscribed.insert(i);
                     }
                   const size_t plans_done = static_cast<size_t>(
                       std::count_if(sessions.begin(), sessions.end(), [](const auto& s) { return s.has_value(); }));
                   if (plans_done == 0) return report(failed);
                   if (filed == 0 && !p->force) {
                     // A table with no entry would make every later simulation fall back to the
                     // analytic model without a word: refuse it.
                     if (!failed.empty()) std::fputs(render_all(failed).c_str(), stderr);
                     if (!oversubscribed.empty())
                       std::fprintf(stderr,
                                    "profile: measured nothing: %zu plan(s) need more processes "
                                    "than this host's %u cores, so their ops took turns on the "
                                    "cores and none was filed; no table written\n"
                                    "hint: profile plans with at most %u processes per host (fewer "
                                    "devices, or several hosts), or pass --force to file them "
                                    "anyway (their times then include waiting for a core)\n",
                                    oversubscribed.size(), std::thread::hardware_concurrency(),
                                    std::thread::hardware_concurrency());
                     else
                       std::fprintf(stderr,
                                    "profile: measured nothing: the replays recorded no op the "
                                    "table can file; no table written\n"
                                    "hint: pass --force to write the empty table anyway\n");
                     return 2;
                   }
                   const Json table = samples.table(p->run.device);
                   if (!p->output.empty() && !write_output(p->output, table.dump(2) + "\n")) return 2;
                   const std::string f =
                       p->format.empty() ? (stdout_is_tty() ? "table" : "json") : p->format;
                   std::string text;
                   if (f == "json") {
                     Json j = samples.stats();
                     j["profile"] = table;
                     j["op_instances"] = filed;
                     j["rounds"] = p->run.rounds;
                     j["plans_not_filed_oversubscribed"] = p->force ? 0 : oversubscribed.size();
                     j["plans_filed_oversubscribed"] = p->force ? oversubscribed.size() : 0;
                     text = j.dump(2) + "\n";
                   } else {
                     text = fmt::format("{} plan(s), {} measured op instances{}, {} kernel and {} "
                                        "collective series\n\n",
                                        p->plans.size(), filed,
                                        p->run.rounds > 1 ? fmt::format(" ({} rounds)", p->run.rounds) : "",
                                        samples.kernel_series(), samples.comm_series());
                     if (!oversubscribed.empty())
                       text += fmt::format(
                           "{} plan(s) {}: more processes than this host's {} cores (their "
                           "ops took turns on the cores)\n\n",
                           oversubscribed.size(), p->force ? "filed (--force)" : "not filed",
                           std::thread::hardware_concurrency());
                     text += samples.stats_table();
                     if (!p->output.empty())
                       text += fmt::format("\nprofiled table written to {}\n", p->output);
                   }
                   if (!write_output("", text)) return 2;
                   if (!failed.empty()) {
                     std::fputs(render_all(failed).c_str(), stderr);
                     std::fprintf(stderr, "profile: %zu of %zu plan(s) could not be replayed\n",
                                  p->plans.size() - plans_done, p->plans.size());
                     return 2;
                   }
                   return 0;
                 }});

  struct VOpts {
    std::vector<std::string> plans, profile_from;
    std::string profile, format, trace, save_profile;
    int top = 10;
    RunOpts run;
  };
  auto v = std::make_shared<VOpts>();
  auto* val = app.add_subcommand("validate", kValidateSummary);
  val->add_option("PLAN", v->plans, "Plan files (JSON)")->required();
  auto* prof_opt = val->add_option(
      "--profile", v->profile,
      "Profiled cost table (from `stretto profile` or `import kineto`) to simulate with");
  val->add_option("--profile-from", v->profile_from,
                  "Profile these plans in the same session, interleaved with the validated plans "
                  "round by round, and simulate with the table they give (`stretto profile` "
                  "inline: measurement and validation see the same host)")
      ->excludes(prof_opt);
  val->add_option("--save-profile", v->save_profile,
                  "With --profile-from: write the table measured from those plans to FILE");
  val->add_option("--format", v->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  val->add_option("--trace", v->trace,
                  "Write a Chrome trace with predicted and measured timelines one above the other");
  val->add_option("--top", v->top, "Ops listed among those that differ most (default 10)")
      ->check(CLI::Range(0, 100000));
  add_run_options(val, v->run);
  out.push_back({val, [v] {
                   if (!steps_fit(v->run, "validate")) return 2;
                   {
                     // Neither output may replace a plan, the table read or the other output.
                     std::vector<std::string> inputs = v->plans;
                     inputs.insert(inputs.end(), v->profile_from.begin(), v->profile_from.end());
                     inputs.push_back(v->profile);
                     std::vector<std::string> with_trace = inputs;
                     with_trace.push_back(v->trace);
                     if (auto ok = check_output(v->save_profile, with_trace); !ok)
                       return report(ok.error());
                     if (auto ok = check_output(v->trace, inputs); !ok) return report(ok.error());
                   }
                   if (!v->save_profile.empty() && v->profile_from.empty()) {
                     std::fprintf(stderr, "validate: --save-profile needs --profile-from\n");
                     return 2;
                   }
                   // A plan that fails (bad file, replay failure) is reported and skipped; the
                   // others are still validated and ranked; the exit code is then 2.
                   Diagnostics failed;
                   auto sessions = open_all(v->plans, failed);
                   auto calib = open_all(v->profile_from, failed);
                   const size_t nv = v->plans.size(), np = v->profile_from.size();
                   std::vector<std::vector<backend::ReplayResult>> measured(nv);
                   backend::ProfileSamples samples;
                   if (v->run.device == "cpu")
                     samples.set_host_cores(static_cast<int>(std::thread::hardware_concurrency()));
                   size_t profiled = 0;
                   // each round: the --profile-from plans, then the validated ones (reversed in
                   // odd rounds, round_order)
                   for (int round = 0; round < v->run.rounds; ++round)
                     for (size_t k : round_order(np + nv, round)) {
                       const bool is_profile = k < np;
                       const size_t i = is_profile ? k : k - np;
                       auto& s = is_profile ? calib[i] : sessions[i];
                       if (!s) continue;
                       const std::string& plan = is_profile ? v->profile_from[i] : v->plans[i];
                       progress(fmt::format("{} {}/{}{}: replaying {} ({} processes) ...",
                                            is_profile ? "profile" : "validate", i + 1,
                                            is_profile ? np : nv, round_note(v->run, round), plan,
                                            s->compiled().num_devices));
                       auto meas = replay(plan, s->compiled(), v->run);
                       progress_done();
                       if (!meas) {
                         failed.insert(failed.end(), meas.error().begin(), meas.error().end());
                         s.reset();  // not replayed again, not validated
                         if (!is_profile) measured[i].clear();
                         continue;
                       }
                       if (is_profile) {
                         profiled += samples.add(s->compiled(), *meas);
                       } else {
                         measured[i].push_back(std::move(*meas));
                       }
                     }
                   std::string table_path = v->profile;
                   // the measured table when not kept (--save-profile): removed on every return
                   struct TempFile {
                     std::string path;
                     ~TempFile() {
                       std::error_code ec;
                       if (!path.empty()) std::filesystem::remove(path, ec);
                     }
                   } temp;
                   if (!v->profile_from.empty()) {
                     if (profiled == 0) {
                       if (!failed.empty()) std::fputs(render_all(failed).c_str(), stderr);
                       std::fprintf(stderr, "validate: the --profile-from plans gave no measurement\n");
                       return 2;
                     }
                     const std::string text = samples.table(v->run.device).dump(2) + "\n";
                     if (!v->save_profile.empty()) {
                       if (!write_output(v->save_profile, text)) return 2;
                       table_path = v->save_profile;
                     } else {
                       temp.path = (std::filesystem::temp_directory_path() /
                                    fmt::format("stretto-validate-{}.profile.json", ::getpid()))
                                       .string();
                       if (!write_output(temp.path, text)) return 2;
                       table_path = temp.path;
                     }
                   }
                   std::vector<backend::PlanValidation> results;
                   for (size_t i = 0; i < nv; ++i) {
                     auto& s = sessions[i];
                     if (!s || measured[i].empty()) continue;
                     if (!table_path.empty()) {
                       CostModelSpec spec = s->plan().costmodel;
                       if (spec.kind == CostModelSpec::Kind::kFixed) spec.options = Json::object();
                       spec.kind = CostModelSpec::Kind::kProfiled;
                       spec.profile = std::filesystem::absolute(table_path).string();
                       if (auto e = s->set_costmodel(spec); !e) return report(e.error());
                     }
                     auto pred = s->simulate();
                     if (!pred) return report(pred.error());
                     traces::CompareOptions co;
                     co.top = static_cast<size_t>(v->top);
                     results.push_back(backend::validate_plan(
                         s->compiled(), *pred, backend::pool_results(std::move(measured[i])), co));
                     results.back().coverage = sim::profiled_coverage(s->compiled());
                     if (const auto& c = results.back().coverage)
                       if (const auto w = sim::coverage_warning(*c))
                         std::fprintf(stderr, "warning: %s: %s\n  hint: %s\n",
                                      v->plans[i].c_str(), w->diag.message.c_str(),
                                      w->diag.hint.c_str());
                     // validate replays with the default kernels (--kernels fused)
                     if (table_path.empty()) {
                       results.back().kernel_style = backend::kernel_style_check(
                           s->compiled(), v->run.device == "cuda", backend::Kernels::kFused);
                       if (const auto& k = results.back().kernel_style; k && !k->matches)
                         std::fprintf(stderr, "warning: %s: %s\n  hint: %s\n", v->plans[i].c_str(),
                                      k->message.c_str(), k->hint.c_str());
                     }
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
                   if (!write_output("", text)) return 2;
                   if (!failed.empty()) {
                     std::fputs(render_all(failed).c_str(), stderr);
                     std::fprintf(stderr, "validate: %zu of %zu plan(s) could not be validated\n",
                                  nv - results.size(), nv);
                     return 2;
                   }
                   return 0;
                 }});
}

}  // namespace stretto::cli
