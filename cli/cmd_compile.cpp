// `stretto compile PLAN [--dot FILE] [--format table|json]`
#include <fmt/format.h>

#include "commands.h"
#include "output.h"
#include "usage.h"
#include "stretto/compiler/compiler.h"

namespace stretto::cli {

void add_compile_command(CLI::App& app, Commands& out) {
  auto* cmd = app.add_subcommand("compile", "Validate a plan and compile it into a training DAG");
  struct Opts {
    std::string plan, dot, format;
    size_t dot_max = 5000;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("PLAN", o->plan, "Plan file (JSON)")->required();
  cmd->add_option("--dot", o->dot, "Write the DAG as Graphviz to FILE");
  cmd->add_option("--dot-max-nodes", o->dot_max, "Largest DAG written with --dot")
      ->capture_default_str();
  cmd->add_option("--format", o->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  add_limit_options(cmd);
  out.push_back({cmd, [o] {
                   note_input(o->plan);
                   auto cp = compiler::compile_file(o->plan);
                   if (!cp) return report(cp.error());
                   auto s = compiler::summarize(*cp);
                   std::string fmt_ =
                       o->format.empty() ? (stdout_is_tty() ? "table" : "json") : o->format;
                   if (!o->dot.empty()) {
                     auto dot = compiler::to_dot(*cp, o->dot_max);
                     if (!dot) return report(dot.error());
                     if (!write_output(o->dot, *dot)) return 2;
                   }
                   std::string text = fmt_ == "json" ? compiler::summary_json(*cp, s).dump(2) + "\n"
                                                     : compiler::summary_table(*cp, s);
                   return write_output("", text) ? 0 : 2;
                 }});
}

}  // namespace stretto::cli
