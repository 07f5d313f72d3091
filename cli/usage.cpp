#include "usage.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "stretto/support/diag.h"
#include "stretto/plan/estimate.h"
#include "stretto/support/limits.h"

namespace stretto::cli {

namespace {

struct Example {
  const char* command;  // subcommand name ("" = the app itself)
  const char* text;
};

constexpr Example kExamples[] = {
    {"",
     "Examples:\n"
     "  stretto simulate examples/gpt_pp4_dp2_1f1b.json            # step time, bubbles, memory\n"
     "  stretto simulate plan.json --timeline                      # the step drawn in the terminal\n"
     "  stretto simulate plan.json --trace out.json                # open in ui.perfetto.dev\n"
     "  stretto build-schedule --schedule interleaved-1f1b --ranks 4 --microbatches 8 --show\n"
     "  stretto compile plan.json                                  # validate, count the DAG\n"
     "  cat plan.json | stretto simulate -                         # plan from standard input\n"
     "Docs: README.md, docs/plan-format.md, docs/semantics.md"},
    {"simulate",
     "Examples:\n"
     "  stretto simulate examples/gpt_pp4_dp2_1f1b.json\n"
     "  stretto simulate plan.json --format json > result.json\n"
     "  stretto simulate plan.json --critical-path --fold-replicas\n"
     "  stretto simulate plan.json --trace out.json --trace-devices 0-7,64 --trace-window 0:50\n"
     "  stretto simulate plan.json --max-memory 8G     # refuse plans estimated above 8 GiB"},
    {"compile",
     "Examples:\n"
     "  stretto compile plan.json\n"
     "  stretto compile plan.json --dot dag.dot && dot -Tsvg dag.dot > dag.svg"},
    {"build-schedule",
     "Examples:\n"
     "  stretto build-schedule --schedule 1f1b --ranks 4 --microbatches 8 --show\n"
     "  stretto build-schedule --schedule interleaved-1f1b --ranks 4 --stages-per-rank 2 \\\n"
     "      --microbatches 8 --base base.json -o schedule.json"},
};

std::vector<std::string> names_of(const CLI::App& app) {
  std::vector<std::string> v;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    v.push_back(s->get_name());
  return v;
}

}  // namespace

void add_usage_examples(CLI::App& app) {
  for (const Example& e : kExamples) {
    if (!*e.command) {
      app.footer(e.text);
      continue;
    }
    for (CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == e.command) s->footer(e.text);
  }
}

int unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return -1;
  const std::string word = argv[1];
  const std::vector<std::string> top = names_of(app);
  for (const std::string& n : top)
    if (n == word) {
      // A group (import/export): check its own subcommand.
      if (argc < 3 || argv[2][0] == '-') return -1;
      for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
        if (s->get_name() == n) {
          // (only a pure group: `sweep SPEC` has a subcommand, merge, but takes a spec too)
          if (s->get_require_subcommand_min() == 0) return -1;
          const std::vector<std::string> inner = names_of(*s);
          if (inner.empty()) return -1;
          for (const std::string& m : inner)
            if (m == argv[2]) return -1;
          const std::string near = nearest(argv[2], inner);
          std::string list;
          for (const std::string& m : inner) list += (list.empty() ? "" : ", ") + m;
          std::fprintf(stderr, "error: unknown command '%s %s'%s\n  hint: %s %s takes: %s\n",
                       n.c_str(), argv[2],
                       near.empty() ? "" : fmt::format("; did you mean '{} {}'?", n, near).c_str(),
                       "stretto", n.c_str(), list.c_str());
          return 2;
        }
      return -1;
    }
  const std::string near = nearest(word, top);
  std::string list;
  for (const std::string& n : top) list += (list.empty() ? "" : ", ") + n;
  std::fprintf(stderr, "error: unknown command '%s'%s\n  hint: commands are %s (stretto --help)\n",
               word.c_str(),
               near.empty() ? "" : fmt::format("; did you mean '{}'?", near).c_str(),
               list.c_str());
  return 2;
}

void add_limit_options(CLI::App* cmd) {
  cmd->add_option_function<std::string>(
         "--max-memory",
         [](const std::string& v) {
           auto b = parse_byte_size(v);
           if (!b || *b == 0) throw CLI::ValidationError("--max-memory", "expected e.g. 8G, 512M");
           plan::set_max_memory_bytes(*b);
         },
         "Refuse plans whose compile + simulation is estimated above SIZE (e.g. 8G; default: "
         "the memory available on this machine)")
      ->type_name("SIZE");
  cmd->add_option_function<std::string>(
         "--max-input-size",
         [](const std::string& v) {
           auto b = parse_byte_size(v);
           if (!b || *b == 0)
             throw CLI::ValidationError("--max-input-size", "expected e.g. 64M, 1G");
           set_max_input_bytes(*b);
         },
         "Largest plan, cost table or CSV read (default 256M)")
      ->type_name("SIZE");
}

std::string out_of_memory_message(const CLI::App* cmd) {
  auto has = [&](const char* name) { return cmd && cmd->get_option_no_throw(name) != nullptr; };
  return fmt::format(
      "error: out of memory: this plan needs more memory than the machine could give "
      "(available now: {})\n"
      "  hint: use {}fewer microbatches or devices{}\n",
      human_bytes(static_cast<double>(plan::available_memory_bytes())),
      has("--fold-replicas") ? "--fold-replicas, " : "",
      has("--max-memory") ? ", or set --max-memory to have large plans refused up front with an "
                            "estimate"
                          : "");
}

}  // namespace stretto::cli
