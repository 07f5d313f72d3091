// `stretto sweep SPEC` · `stretto sweep merge OUT IN...` · `stretto search PLAN --devices N`
// Thin layers over stretto::explore (docs/sweeps.md).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string_view>
#include <set>
#include <thread>

#include "commands.h"
#include "output.h"
#include "usage.h"
#include "stretto/explore/plot.h"
#include "stretto/explore/search.h"
#include "stretto/explore/sweep.h"
#include "stretto/support/plural.h"

namespace stretto::cli {

using plan::Json;

namespace {

using explore::PointResult;

struct ReportOpts {
  std::string format;  // table | json | csv ("" = table on a terminal, else json)
  bool pareto = false;
  size_t top = 0;
  std::string emit_best;
  std::string plot;  // an SVG chart of every simulated point
  std::string title;  // the chart's title: the spec's name (default: the database's path)
};

std::string gib(int64_t b) {
  return fmt::format("{:.2f}", static_cast<double>(b) / (1 << 30));
}

std::string params_str(const Json& p) {
  std::string s;
  for (const auto& [k, v] : p.items())
    s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

std::string csv_cell(std::string s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string rows_csv(const std::vector<PointResult>& rows, const std::vector<size_t>& idx) {
  std::set<std::string> keys;
  for (size_t i : idx)
    for (const auto& [k, v] : rows[i].params.items()) keys.insert(k);
  std::string o = "hash";
  for (const auto& k : keys) o += "," + csv_cell(k);
  o += ",status,step_time_ms,peak_memory_bytes,bubble_ratio,exposed_comm_ms,"
       "exposed_comm_ms_per_device,mfu,tokens_per_s,"
       "model_flops,events,sim_wall_ms,peak_memory_time_ms,folded_replicas,devices,"
       "memory_cap_GiB,estimate_step_ms,estimate_memory_bytes,wall_ms,diagnostic\n";
  for (size_t i : idx) {
    const auto& r = rows[i];
    o += r.hash;
    for (const auto& k : keys) {
      const Json* v = r.params.contains(k) ? &r.params[k] : nullptr;
      o += "," + (v ? csv_cell(v->is_string() ? v->get<std::string>() : v->dump()) : "");
    }
    o += fmt::format(",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3f},{}\n", r.status,
                     r.step_time_ms, r.peak_memory_bytes, r.bubble_ratio, r.exposed_comm_ms,
                     r.exposed_comm_ms_per_device, r.mfu,
                     r.tokens_per_s, r.model_flops, r.events, r.sim_wall_ms, r.peak_memory_time_ms,
                     r.folded ? 1 : 0, r.devices, r.memory_cap_GiB, r.estimate_step_ms,
                     r.estimate_memory_bytes, r.wall_ms, csv_cell(r.diagnostic));
  }
  return o;
}

std::string rows_table(const std::vector<PointResult>& rows, const std::vector<size_t>& idx) {
  // Exposed communication per device, as simulate's table and JSON give it (ms).
  std::string o = fmt::format("{:<16}  {:>10}  {:>9}  {:>6}  {:>7}  {:>14}  {:<13}  {}\n", "point",
                              "step ms", "peak GiB", "MFU", "bubble", "exposed ms/dev", "status",
                              "parameters");
  for (size_t i : idx) {
    const auto& r = rows[i];
    if (r.simulated())
      o += fmt::format("{:<16}  {:>10.3f}  {:>9}  {:>5.1f}%  {:>6.1f}%  {:>14.3f}  {:<13}  {}\n",
                       r.hash, r.step_time_ms, gib(r.peak_memory_bytes), 100 * r.mfu,
                       100 * r.bubble_ratio, r.exposed_comm_ms_per_device, r.status,
                       params_str(r.params));
    else
      o += fmt::format("{:<16}  {:>10}  {:>9}  {:>6}  {:>7}  {:>14}  {:<13}  {}\n", r.hash, "-",
                       "-", "-", "-", "-", r.status, params_str(r.params));
  }
  return o;
}

// Prints what the options ask for over a store's rows; writes --emit-best.
int report(const explore::Store& store, const ReportOpts& ro) {
  auto read = store.rows();
  if (!read) return cli::report(read.error());
  const std::vector<PointResult>& rows = *read;
  const std::string f = ro.format.empty() ? (stdout_is_tty() ? "table" : "json") : ro.format;
  size_t ok = 0, over = 0, invalid = 0;
  for (const auto& r : rows)
    (r.status == "ok" ? ok : r.status == "over_capacity" ? over : invalid)++;
  std::vector<size_t> idx;
  std::string title;
  if (ro.pareto) {
    idx = explore::pareto_front(rows);
    title = fmt::format("Pareto front, step time vs peak memory ({} of {} feasible points)",
                        idx.size(), ok);
  } else if (ro.top > 0) {
    idx = explore::top_n(rows, ro.top);
    title = fmt::format("fastest {} of {} feasible points", idx.size(), ok);
  } else {
    idx = explore::top_n(rows, 0);
    // Then the infeasible points, fastest first (over capacity, simulated), then the invalid.
    std::vector<size_t> rest;
    for (size_t i = 0; i < rows.size(); ++i)
      if (!rows[i].feasible()) rest.push_back(i);
    std::stable_sort(rest.begin(), rest.end(), [&](size_t a, size_t b) {
      const auto &x = rows[a], &y = rows[b];
      if (x.simulated() != y.simulated()) return x.simulated();
      return x.simulated() && x.step_time_ms < y.step_time_ms;
    });
    idx.insert(idx.end(), rest.begin(), rest.end());
    title = "all points, fastest feasible first";
  }
  // Infeasible points faster than everything feasible: what a bigger device would buy.
  std::vector<size_t> faster_infeasible;
  if (ro.pareto) {
    const double best = idx.empty() ? 1e300 : rows[idx[0]].step_time_ms;
    std::vector<PointResult> over_rows;
    std::vector<size_t> map;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].status == "over_capacity" && rows[i].step_time_ms < best) {
        over_rows.push_back(rows[i]);
        over_rows.back().status = "ok";  // to rank them with the same rule
        map.push_back(i);
      }
    for (size_t k : explore::pareto_front(over_rows)) faster_infeasible.push_back(map[k]);
  }
  std::string text;
  if (f == "json") {
    Json j = {{"database", store.path()},
              {"points", rows.size()},
              {"ok", ok},
              {"over_capacity", over},
              {"invalid", invalid}};
    Json list = Json::array();
    for (size_t i : idx) list.push_back(explore::point_json(rows[i]));
    j[ro.pareto ? "pareto" : ro.top > 0 ? "top" : "results"] = std::move(list);
    if (ro.pareto) {
      Json inf = Json::array();
      for (size_t i : faster_infeasible) inf.push_back(explore::point_json(rows[i]));
      j["infeasible_faster"] = std::move(inf);
    }
    text = j.dump(2) + "\n";
  } else if (f == "csv") {
    text = rows_csv(rows, idx);
  } else {
    text = fmt::format("{} in {}: {} ok, {} over the memory cap (infeasible), {} invalid\n\n",
                       count_noun(static_cast<long long>(rows.size()), "point", "points"),
                       store.path(), ok, over, invalid);
    text += title + ":\n" + rows_table(rows, idx);
    if (!faster_infeasible.empty()) {
      text += "\nfaster but infeasible (peak memory over the cap):\n";
      text += rows_table(rows, faster_infeasible);
    }
    if (invalid > 0 && !ro.pareto && ro.top == 0) {
      text += "\ndiagnostics of invalid points (first 3):\n";
      size_t shown = 0;
      for (const auto& r : rows)
        if (r.status == "invalid" && shown++ < 3) text += r.hash + ": " + r.diagnostic + "\n";
    }
  }
  if (!write_output("", text)) return 2;
  if (!ro.emit_best.empty()) {
    auto best = explore::top_n(rows, 1);
    if (best.empty()) {
      std::fprintf(stderr, "error: no feasible point to emit\n");
      return 2;
    }
    auto plan = explore::point_plan(store.spec()["base"], rows[best[0]].params);
    if (!plan) return cli::report(plan.error());
    if (!write_output(ro.emit_best, plan->dump(2) + "\n")) return 2;
    std::fprintf(stderr, "best plan (%s, %.3f ms) written to %s\n", rows[best[0]].hash.c_str(),
                 rows[best[0]].step_time_ms, ro.emit_best.c_str());
  }
  if (!ro.plot.empty()) {
    explore::PlotSummary ps;
    if (!write_output(ro.plot, explore::sweep_svg(rows, ro.title.empty() ? store.path() : ro.title, &ps))) return 2;
    std::fprintf(stderr, "chart of %zu simulated points (%zu on the Pareto front%s) written to %s\n",
                 ps.feasible + ps.over_capacity, ps.front,
                 ps.color_by.empty() ? "" : (", coloured by " + ps.color_by).c_str(), ro.plot.c_str());
  }
  return 0;
}

void add_report_options(CLI::App* c, ReportOpts& ro) {
  c->add_option("--format", ro.format, "table (default on a terminal), json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}));
  c->add_flag("--pareto", ro.pareto, "Print the Pareto front of step time vs peak memory");
  c->add_option("--top", ro.top, "Print the N fastest feasible points")
      ->check(CLI::Range(0, 1000000000));
  c->add_option("--emit-best", ro.emit_best, "Write the fastest feasible point as a plan file");
  c->add_option("--plot", ro.plot,
                "Write an SVG chart of step time against peak memory (every simulated point, the "
                "Pareto front joined) to FILE");
}

std::string fmt_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

// Ctrl-C (or SIGTERM) during a sweep: the points running finish and are committed, then the
// sweep says what it saved and how to resume. A second Ctrl-C ends it at once.
std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int sig) {
  if (g_interrupted.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  static const char kMsg[] =
      "\ninterrupted: finishing the points that are running (Ctrl-C again to stop at once)\n";
  (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
}

// A shard number: decimal digits only, at most kMaxShards (no sign, no wrap-around).
constexpr int64_t kMaxShards = 1000000;
std::optional<int64_t> shard_number(std::string_view s) {
  if (s.empty() || s.size() > 7 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const int64_t v = std::stoll(std::string(s));
  return v <= kMaxShards ? std::optional<int64_t>(v) : std::nullopt;
}

// "I/N", else SLURM_ARRAY_TASK_ID (minus SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_COUNT.
bool parse_shard(const std::string& s, int& index, int& count) {
  index = 0;
  count = 1;
  if (!s.empty()) {
    const size_t slash = s.find('/');
    const auto i = shard_number(std::string_view(s).substr(0, slash));
    const auto n = slash == std::string::npos ? std::nullopt
                                              : shard_number(std::string_view(s).substr(slash + 1));
    if (!i || !n || *n < 1 || *i >= *n) {
      std::fprintf(stderr,
                   "error: --shard '%s': expected I/N with 0 <= I < N <= %lld\n"
                   "  hint: e.g. --shard 0/4 runs the first of four shards\n",
                   s.c_str(), static_cast<long long>(kMaxShards));
      return false;
    }
    index = static_cast<int>(*i);
    count = static_cast<int>(*n);
    return true;
  }
  const char* id = std::getenv("SLURM_ARRAY_TASK_ID");
  const char* n = std::getenv("SLURM_ARRAY_TASK_COUNT");
  if (id && n) {
    const char* mn = std::getenv("SLURM_ARRAY_TASK_MIN");
    const auto vi = shard_number(id), vn = shard_number(n);
    const auto vmin = mn ? shard_number(mn) : std::optional<int64_t>(0);
    if (!vi || !vn || !vmin) {
      std::fprintf(stderr,
                   "error: SLURM_ARRAY_TASK_ID=%s, SLURM_ARRAY_TASK_COUNT=%s, "
                   "SLURM_ARRAY_TASK_MIN=%s: each must be a whole number from 0 to %lld\n",
                   id, n, mn ? mn : "(unset)", static_cast<long long>(kMaxShards));
      return false;
    }
    index = static_cast<int>(*vi - *vmin);
    count = static_cast<int>(*vn);
    if (count < 1 || index < 0 || index >= count) {
      std::fprintf(stderr,
                   "error: SLURM_ARRAY_TASK_ID=%s, SLURM_ARRAY_TASK_COUNT=%s: not a shard; use a "
                   "contiguous --array=0-(N-1)\n",
                   id, n);
      return false;
    }
  }
  return true;
}

// The base plan's file as the spec names it, resolved from the spec's directory ("" when the
// base plan is inline).
std::string base_plan_path(const explore::SweepSpec& spec, const std::string& spec_file) {
  if (spec.base_path.empty()) return "";
  const std::filesystem::path p(spec.base_path);
  return p.is_absolute() ? p.string()
                         : (std::filesystem::path(spec_file).parent_path() / p).string();
}

}  // namespace

void add_sweep_commands(CLI::App& app, Commands& out) {
  struct Opts {
    std::string spec, db, shard;
    int jobs = 0;
    size_t limit = 0;
    ReportOpts ro;
    std::string merge_out;
    std::vector<std::string> merge_in;
    // search
    std::string plan, emit, search_format;
    std::string search_granularity = "pass";
    int devices = 0;
    double cap = 0, budget = 60;
  };
  auto o = std::make_shared<Opts>();
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  auto* cmd = app.add_subcommand("sweep", "Run a resumable, shardable sweep of what-ifs");
  cmd->add_option("SPEC", o->spec, "Sweep spec (JSON; see docs/sweeps.md)");
  cmd->add_option("--db", o->db, "Results database (default: SPEC's name with .db, per shard)");
  cmd->add_option("-j,--jobs", o->jobs, "Worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--shard", o->shard,
                  "Run shard I of N (I/N); default from SLURM_ARRAY_TASK_ID/COUNT when set");
  cmd->add_option("--limit", o->limit, "Stop after N new points (0: all)");
  add_report_options(cmd, o->ro);
  add_limit_options(cmd);  // (the memory refusals' hints name --max-memory)
  auto* merge = cmd->add_subcommand("merge", "Join shard databases into one");
  merge->add_option("OUT", o->merge_out, "Merged database (created if missing)")->required();
  merge->add_option("IN", o->merge_in, "Shard databases")->required();
  add_report_options(merge, o->ro);
  out.push_back({merge, [o] {
                   std::vector<std::string> inputs = o->merge_in;
                   inputs.push_back(o->merge_out);
                   for (const std::string* out : {&o->ro.emit_best, &o->ro.plot})
                     if (auto ok = check_output(*out, inputs); !ok) return cli::report(ok.error());
                   auto first = explore::Store::open_existing(o->merge_in[0]);
                   if (!first) return cli::report(first.error());
                   // Every input is checked before any is merged: a bad one leaves OUT as it was.
                   for (size_t i = 1; i < o->merge_in.size(); ++i) {
                     auto other = explore::Store::open_existing(o->merge_in[i]);
                     if (!other) return cli::report(other.error());
                     if (other->spec_hash() != first->spec_hash()) {
                       Diagnostic d;
                       d.loc.file = o->merge_in[i];
                       d.message = fmt::format(
                           "holds results of another spec (spec hash {}, {} has {})",
                           other->spec_hash(), o->merge_in[0], first->spec_hash());
                       d.hint = "merge only the shards of one sweep; nothing was merged";
                       return cli::report(Diagnostics{d});
                     }
                   }
                   auto dst = explore::Store::open(o->merge_out, first->spec(),
                                                   first->spec_hash(), "0/1");
                   if (!dst) return cli::report(dst.error());
                   for (const auto& in : o->merge_in) {
                     auto n = dst->merge_from(in);
                     if (!n) return cli::report(n.error());
                     std::fprintf(stderr, "merged %zu new points from %s\n", *n, in.c_str());
                   }
                   return report(*dst, o->ro);
                 }});
  out.push_back(
      {cmd, [o, hw] {
         if (o->spec.empty()) {
           std::fprintf(stderr, "error: sweep needs a SPEC (or: stretto sweep merge OUT IN...)\n");
           return 2;
         }
         int si = 0, sn = 1;
         if (!parse_shard(o->shard, si, sn)) return 2;
         auto spec = explore::load_spec(o->spec);
         if (!spec) return cli::report(spec.error());
         o->ro.title = spec->name.empty() ? o->spec : spec->name;
         const bool tty_err = isatty(STDERR_FILENO) != 0;
         auto grid = explore::enumerate(*spec, [tty_err](size_t done, size_t of) {
           if (tty_err)
             std::fprintf(stderr, "\r\033[Kchecking the grid: %zu of %zu combinations", done, of);
         });
         if (tty_err) std::fputs("\r\033[K", stderr);
         if (!grid) return cli::report(grid.error());
         std::string db = o->db;
         if (db.empty()) {
           db = std::filesystem::path(o->spec).stem().string();
           if (sn > 1) db += fmt::format(".shard{}of{}", si, sn);
           db += ".db";
         }
         // --emit-best and --plot must not replace the spec, its base plan or the database
         // (checked before the database is opened or any point runs).
         for (const std::string* out : {&o->ro.emit_best, &o->ro.plot})
           if (auto ok = check_output(*out, {o->spec, db, base_plan_path(*spec, o->spec)}); !ok)
             return cli::report(ok.error());
         auto store = explore::Store::open(db, spec->canonical, spec->hash,
                                           fmt::format("{}/{}", si, sn));
         if (!store) return cli::report(store.error());
         explore::SweepOptions so;
         so.jobs = o->jobs > 0 ? o->jobs : hw;
         so.shard_index = si;
         so.shard_count = sn;
         so.limit = o->limit;
         so.stop = &g_interrupted;
         std::signal(SIGINT, on_interrupt);
         std::signal(SIGTERM, on_interrupt);
         const bool tty = isatty(STDERR_FILENO) != 0;
         if (tty)
           so.progress = [](const explore::Progress& p) {
             std::fprintf(stderr,
                          "\rsweep %zu/%zu  ok %zu  infeasible %zu  invalid %zu  %.0f points/s  "
                          "ETA %s   ",
                          p.done, p.total, p.ok, p.over_capacity, p.invalid, p.rate,
                          fmt_duration(p.eta_s).c_str());
           };
         auto pr = explore::run_sweep(*spec, *grid, *store, so);
         std::signal(SIGINT, SIG_DFL);
         std::signal(SIGTERM, SIG_DFL);
         if (tty) std::fprintf(stderr, "\n");
         if (!pr) return cli::report(pr.error());
         if (g_interrupted.load()) {
           std::fprintf(stderr,
                        "sweep interrupted: %zu of %zu points of shard %d/%d are saved in %s "
                        "(%zu this run); run the same command again to resume (saved points are "
                        "not run again)\n",
                        pr->done, pr->total, si, sn, db.c_str(), pr->done - pr->resumed);
           return 130;
         }
         std::fprintf(stderr,
                      "sweep: %zu points in shard %d/%d (grid %zu, %zu pruned by constraints); "
                      "%zu resumed, %zu run in %.1f s (%.1f points/s) -> %s\n",
                      pr->total, si, sn, grid->grid_size, grid->pruned, pr->resumed,
                      pr->done - pr->resumed, pr->elapsed_s, pr->rate, db.c_str());
         return report(*store, o->ro);
       }});

  auto* s = app.add_subcommand("search", "Find the fastest plan for a model on N devices");
  s->add_option("PLAN", o->plan, "Base plan: its model, cluster, cost model and global batch")
      ->required();
  s->add_option("--devices", o->devices, "Number of devices")->required()->check(CLI::PositiveNumber);
  s->add_option("--memory-cap", o->cap, "Memory cap per device in GiB (default: the device's)")
      ->check(CLI::Range(0.0, 1e9));
  s->add_option("--budget", o->budget, "Seconds for the simulation phase (default 60)")
      ->check(CLI::Range(0.0, 1e9))
      ->check(finite_number("--budget", "seconds"));
  s->add_option("-j,--jobs", o->jobs, "Worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  s->add_option("--granularity", o->search_granularity,
                "Engine tasks of the search's rounds: pass (default: a region pass's ops are "
                "one task) or op; the finalists are simulated again at op granularity")
      ->check(CLI::IsMember({"op", "pass"}));
  s->add_option("--emit", o->emit, "Write the best plan to FILE");
  add_limit_options(s);
  s->add_option("--format", o->search_format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  out.push_back({s, [o, hw] {
                   if (auto ok = check_output(o->emit, {o->plan}); !ok)
                     return cli::report(ok.error());
                   auto src = plan::JsonSource::load(o->plan);
                   if (!src) return cli::report(src.error());
                   explore::SearchOptions so;
                   so.devices = o->devices;
                   so.memory_cap_GiB = o->cap;
                   so.budget_s = o->budget;
                   so.granularity = *sim::parse_granularity(o->search_granularity);  // (checked)
                   so.jobs = o->jobs > 0 ? o->jobs : hw;
                   const bool tty = isatty(STDERR_FILENO) != 0;
                   if (tty)
                     so.progress = [](const std::string& m) {
                       std::fprintf(stderr, "\r%-70s", m.c_str());
                     };
                   std::string dir = std::filesystem::path(o->plan).parent_path().string();
                   auto r = explore::search(src->root(), dir.empty() ? "." : dir, so);
                   if (tty) std::fprintf(stderr, "\r%-70s\r", "");
                   if (!r) return cli::report(r.error());
                   if (!o->emit.empty() && r->best &&
                       !write_output(o->emit, r->best_plan.dump(2) + "\n"))
                     return 2;
                   const std::string f = o->search_format.empty()
                                             ? (stdout_is_tty() ? "table" : "json")
                                             : o->search_format;
                   const PointResult* base = r->baseline ? &*r->baseline : nullptr;
                   if (f == "json") {
                     Json j = explore::search_json(*r, o->devices);
                     if (!o->emit.empty()) j["emitted"] = o->emit;
                     return write_output("", j.dump(2) + "\n") ? 0 : 2;
                   }
                   std::string t;
                   t += fmt::format(
                       "searched {} plans for {} devices (global batch {} sequences): estimated {} "
                       "in {:.2f} s ({:.0f}/s), {} over the memory cap by estimate, simulated {} "
                       "in {:.1f} s ({} batches after the first; {} invalid, {} over the cap; "
                       "at {} granularity, {} finalists again at op granularity)\n",
                       r->space, o->devices, r->global_batch, r->estimated, r->estimate_s,
                       r->estimates_per_s, r->over_memory, r->simulated, r->simulate_s,
                       r->batches, r->invalid, r->infeasible, sim::granularity_name(r->granularity),
                       r->finalists);
                   if (!r->best) {
                     t += "no simulated candidate fits; raise --memory-cap or --budget\n";
                     write_output("", t);
                     return 2;
                   }
                   const auto& b = *r->best;
                   t += fmt::format("\nbest plan: {}\n", params_str(b.params));
                   t += fmt::format(
                       "  step time {:.3f} ms, peak memory {} GiB (cap {:.1f}), MFU {:.1f} %, "
                       "{:.0f} tokens/s (estimate said {:.3f} ms)\n",
                       b.step_time_ms, gib(b.peak_memory_bytes), b.memory_cap_GiB, 100 * b.mfu,
                       b.tokens_per_s, b.estimate_step_ms);
                   if (base)
                     t += fmt::format(
                         "  vs Megatron-style default ({}): {:.3f} ms -> {:.2f}x faster\n",
                         params_str(base->params), base->step_time_ms,
                         base->step_time_ms / b.step_time_ms);
                   else
                     t += "  no Megatron-style default plan fits on these devices\n";
                   t += "\nwhat it beat (next fastest simulated):\n";
                   std::vector<size_t> idx;
                   for (size_t i = 1; i < r->results.size() && i < 11; ++i) idx.push_back(i);
                   t += rows_table(r->results, idx);
                   t += fmt::format("\nsearch time {:.1f} s{}\n", r->total_s,
                                    o->emit.empty() ? "" : ", best plan written to " + o->emit);
                   return write_output("", t) ? 0 : 2;
                 }});
}

}  // namespace stretto::cli
