// The `stretto` binary: a thin layer over the library (DESIGN.md §4).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <new>

#include "commands.h"
#include "output.h"
#include "usage.h"

namespace stretto::cli {

int report(const Diagnostics& ds) {
  std::fputs(render_all(ds).c_str(), stderr);
  return 2;
}

bool write_output(const std::string& path, const std::string& text) {
  // A temporary file renamed on success; a failed write (full disk, closed stdout) is an error.
  auto out = OutputFile::open(path);
  if (!out) {
    report(out.error());
    return false;
  }
  out->write(text);
  return out->commit();
}

bool stdout_is_tty() {
  return isatty(STDOUT_FILENO) != 0;
}

}  // namespace stretto::cli

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
  add_describe_command(app, cmds);
  add_usage_examples(app);
#ifdef STRETTO_HAVE_EXPLORE
  add_sweep_commands(app, cmds);
#endif
#ifdef STRETTO_HAVE_GUI
  add_gui_command(app, cmds);
#endif
  add_loop_commands(app, *import_app, cmds);
#ifdef STRETTO_HAVE_BACKEND
  add_replay_command(app, cmds);
#endif
#ifdef STRETTO_HAVE_VALIDATE
  add_validate_commands(app, cmds);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (int rc = unknown_subcommand(app, argc, argv); rc >= 0) return rc;
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (auto& c : cmds)
      if (c.app->parsed()) return c.run();
  } catch (const std::bad_alloc&) {
    // Not an internal error: the plan needs more memory than this machine could give.
    std::fputs(out_of_memory_message().c_str(), stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}
