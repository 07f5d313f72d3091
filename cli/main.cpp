// The `stretto` binary: a thin layer over the library (DESIGN.md §4).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>

#include "commands.h"

namespace stretto::cli {

int report(const Diagnostics& ds) {
  std::fputs(render_all(ds).c_str(), stderr);
  return 2;
}

bool write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return true;
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "error: cannot write '%s'\n", path.c_str());
    return false;
  }
  f << text;
  return static_cast<bool>(f);
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
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (auto& c : cmds)
      if (c.app->parsed()) return c.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}
