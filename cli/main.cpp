// The `stretto` binary: a thin layer over the library (DESIGN.md §4).
#include <string>

#include "commands.h"
#include "usage.h"

int main(int argc, char** argv) {
  using namespace stretto::cli;
  CLI::App app{"Stretto: simulate and explore distributed training schedules", "stretto"};
  app.set_version_flag("--version", std::string("stretto ") + STRETTO_VERSION);
  app.require_subcommand(1);
  CLI::App* import_app = app.add_subcommand("import", "Convert another format into directives");
  CLI::App* export_app = app.add_subcommand("export", "Write a plan in another format");
  import_app->require_subcommand(1);
  export_app->require_subcommand(1);
  Commands cmds;
  add_compile_command(app, cmds);
  add_simulate_commands(app, *export_app, cmds);
  add_schedule_commands(app, *import_app, *export_app, cmds);
#ifdef STRETTO_HAVE_EXPLORE
  add_sweep_commands(app, cmds);
#endif
#ifdef STRETTO_HAVE_GUI
  add_gui_command(app, cmds);
#endif
  add_loop_commands(app, *import_app, cmds);
#ifdef STRETTO_HAVE_BACKEND
  // replay, profile, validate run in stretto-backend (LibTorch), not in this binary.
  if (argc > 1 && is_backend_command(argv[1])) return exec_backend(argc, argv);
  add_backend_placeholders(app);
#endif
  add_describe_command(app, cmds);
  add_usage_examples(app);
  return parse_and_run(app, cmds, argc, argv);
}
