// Closing the loop between prediction and measurement:
// `stretto import kineto TRACE... [-o PROFILE.json] [--format table|json]`
// `stretto compare A B [--format table|json] [--top N]`
#include <fmt/format.h>

#include "commands.h"
#include "output.h"
#include "usage.h"
#include "stretto/costmodel/profile_table.h"
#include "stretto/sim/session.h"
#include "stretto/support/limits.h"
#include "stretto/traces/compare.h"
#include "stretto/traces/kineto.h"

namespace stretto::cli {

void add_loop_commands(CLI::App& app, CLI::App& import_app, Commands& out) {
  struct KOpts {
    std::vector<std::string> traces;
    std::string output, format, plan;
    int skip_steps = -1, nodes = 1;
    double link_GBps = 0;
  };
  auto k = std::make_shared<KOpts>();
  auto* ki = import_app.add_subcommand(
      "kineto", "Read PyTorch profiler traces (one per rank, .json or .json.gz) into a profiled "
                "cost table and print what they hold");
  ki->add_option("TRACE", k->traces, "Kineto trace files, one per rank")->required();
  ki->add_option("-o,--output", k->output, "Write the profiled cost-model table to FILE");
  ki->add_option("--format", k->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  ki->add_option("--skip-steps", k->skip_steps,
                 "Leading ProfilerStep#N ranges to drop as warm-up (default: 1 when there are "
                 "two or more)")
      ->check(CLI::Range(0, 1000000));
  ki->add_option("--nodes", k->nodes, "Nodes each collective group spans (default 1)")
      ->check(CLI::Range(1, 1000000));
  ki->add_option("--link-GBps", k->link_GBps,
                 "The fastest link a device has (GB/s per direction): a collective whose bus "
                 "bandwidth exceeds it is refused (default 900, NVLink 5)")
      ->check(CLI::Range(1e-3, 1e7))
      ->check(finite_number("--link-GBps", "GB/s"));
  ki->add_option("--plan", k->plan,
                 "Take --link-GBps from this plan's cluster (the faster of its intra- and "
                 "inter-node links)");
  out.push_back({ki, [k] {
                   if (auto ok = check_output(k->output, k->traces); !ok) return report(ok.error());
                   traces::KinetoImportOptions o;
                   o.skip_steps = k->skip_steps;
                   o.nodes = k->nodes;
                   if (!k->plan.empty()) {
                     auto s = sim::Session::open(k->plan);
                     if (!s) return report(s.error());
                     const plan::ClusterSpec& cl = s->plan().cluster;
                     o.link_GBps = std::max(cl.intra_node.bandwidth_GBps, cl.inter_node.bandwidth_GBps);
                   }
                   if (k->link_GBps > 0) o.link_GBps = k->link_GBps;
                   auto r = traces::import_kineto(k->traces, o);
                   if (!r) return report(r.error());
                   // The table must read back as a valid profile (a bug otherwise).
                   auto check = cost::parse_profile_table(r->table.dump(), "<imported table>");
                   if (!check) {
                     std::fputs(render_all(check.error()).c_str(), stderr);
                     return 1;
                   }
                   if (!k->output.empty() && !write_output(k->output, r->table.dump(2) + "\n"))
                     return 2;
                   const std::string f =
                       k->format.empty() ? (stdout_is_tty() ? "table" : "json") : k->format;
                   std::string text;
                   if (f == "json") {
                     plan::Json j = traces::kineto_summary_json(*r);
                     // the table format prints them with the summary
                     for (const auto& w : r->warnings)
                       std::fprintf(stderr, "warning: %s\n", printable(w, true).c_str());
                     j["profile"] = r->table;
                     if (!k->output.empty()) j["profile_file"] = k->output;
                     text = j.dump(2) + "\n";
                   } else {
                     // names come from the traces: no terminal escapes pass through
                     text = printable(traces::kineto_summary_table(*r), true);
                     if (!k->output.empty())
                       text += fmt::format("\nprofiled table written to {}\n", k->output);
                   }
                   return write_output("", text) ? 0 : 2;
                 }});

  struct COpts {
    std::string a, b, format;
    int top = 10;
  };
  auto c = std::make_shared<COpts>();
  auto* cmp = app.add_subcommand(
      "compare",
      "Compare two runs op by op: plans (simulated), Stretto traces, Kineto traces or "
      "`simulate --format json` results, aligned by logical op (PP, MB, PASS, bucket)");
  cmp->add_option("A", c->a, "Baseline: plan, trace or result")->required();
  cmp->add_option("B", c->b, "The run compared with A")->required();
  cmp->add_option("--format", c->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmp->add_option("--top", c->top, "Ops listed among those that moved most (default 10)")
      ->check(CLI::Range(0, 100000));
  add_limit_options(cmp);
  out.push_back({cmp, [c] {
                   auto a = traces::load_timeline(c->a);
                   auto b = traces::load_timeline(c->b);
                   if (!a || !b) {
                     Diagnostics ds;
                     if (!a) ds = a.error();
                     if (!b) ds.insert(ds.end(), b.error().begin(), b.error().end());
                     return report(ds);
                   }
                   traces::CompareOptions o;
                   o.top = static_cast<size_t>(c->top);
                   const traces::Comparison cmp = traces::compare(*a, *b, o);
                   const std::string f =
                       c->format.empty() ? (stdout_is_tty() ? "table" : "json") : c->format;
                   const std::string text = f == "json" ? traces::comparison_json(cmp).dump(2) + "\n"
                                                        : printable(traces::comparison_table(cmp), true);
                   return write_output("", text) ? 0 : 2;
                 }});
}

}  // namespace stretto::cli
