#pragma once
// `stretto` subcommands. Each command file registers its CLI11 subcommand(s) and a run
// function; main() parses and runs the one selected. Exit codes (DESIGN.md §4): 0 ok,
// 1 internal error, 2 bad input (usage, JSON, plan, impossible schedule) with a diagnostic
// on stderr. Data goes to stdout, logs and progress to stderr.

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "stretto/schedules/diag.h"

namespace stretto::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

/// `compile`.
void add_compile_command(CLI::App& app, Commands& out);
/// `simulate` and `export chrome`.
void add_simulate_commands(CLI::App& app, CLI::App& export_app, Commands& out);
/// `build-schedule`, `import torch-csv`, `export torch-csv`.
void add_schedule_commands(CLI::App& app, CLI::App& import_app, CLI::App& export_app,
                           Commands& out);
/// `sweep`, `sweep merge`, `search` (explore/).
void add_sweep_commands(CLI::App& app, Commands& out);

/// `describe`.
void add_describe_command(CLI::App& app, Commands& out);
/// `gui` (only when built with the GUI: STRETTO_HAVE_GUI).
void add_gui_command(CLI::App& app, Commands& out);
/// `import kineto`, `compare`.
void add_loop_commands(CLI::App& app, CLI::App& import_app, Commands& out);

/// `replay` (when the LibTorch backend is built: STRETTO_HAVE_BACKEND).
void add_replay_command(CLI::App& app, Commands& out);

/// `profile`, `validate` (with the backend: STRETTO_HAVE_VALIDATE).
void add_validate_commands(CLI::App& app, Commands& out);

/// Prints diagnostics to stderr; returns 2.
int report(const Diagnostics& ds);
/// Writes `text` to `path`, or stdout when path is "" or "-". Returns false (and prints) on error.
bool write_output(const std::string& path, const std::string& text);
/// True when stdout is a terminal (tables for people, JSON for machines).
bool stdout_is_tty();

}  // namespace stretto::cli
