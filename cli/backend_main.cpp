// `stretto-backend`: the commands that run plans on LibTorch (replay, profile, validate). Users
// call them through `stretto`, which replaces itself with this binary for them (commands.h);
// replay's rank processes are this binary too.
#include <string>

#include "commands.h"

int main(int argc, char** argv) {
  using namespace stretto::cli;
  CLI::App app{"Stretto: simulate and explore distributed training schedules", "stretto"};
  app.set_version_flag("--version", std::string("stretto ") + STRETTO_VERSION);
  app.require_subcommand(1);
  Commands cmds;
  add_replay_command(app, cmds);
  add_validate_commands(app, cmds);
  add_bench_ops_command(app, cmds);
  return parse_and_run(app, cmds, argc, argv);
}
