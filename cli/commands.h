#pragma once
// `stretto` subcommands. Each command file registers its CLI11 subcommand(s) and a run
// function; main() parses and runs the one selected. Exit codes (DESIGN.md §4): 0 ok,
// 1 internal error, 2 bad input (usage, JSON, plan, impossible schedule) with a diagnostic
// on stderr. Data goes to stdout, logs and progress to stderr.

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "stretto/support/diag.h"

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
/// `gui` (only when built with the GUI: STRETTO_HAVE_GUI).
void add_gui_command(CLI::App& app, Commands& out);
/// `import kineto`, `compare`.
void add_loop_commands(CLI::App& app, CLI::App& import_app, Commands& out);

/// The commands that run LibTorch live in a second binary, `stretto-backend`, next to `stretto`
/// (so that `stretto` itself starts without loading LibTorch, about 0.8 s here); `stretto`
/// forwards them to it (backend_forward.cpp) and lists them in its help with these summaries.
inline constexpr const char* kReplaySummary =
    "Run the plan for real on LibTorch (one process per device) and measure it";
inline constexpr const char* kProfileSummary =
    "Replay plans on this host and measure every distinct compute op and collective into a "
    "profiled cost table";
inline constexpr const char* kValidateSummary =
    "Simulate plans (with a profiled table), replay them, and report predicted vs measured per "
    "step, device and op; several plans also get the ranking's Kendall tau";
inline constexpr const char* kBenchOpsSummary =
    "Time every distinct op of a plan alone on the replay's code, next to the replay's and the "
    "cost model's time for it";
/// This binary's path (/proc/self/exe; "stretto" when unreadable): what a replay's ranks exec.
std::string self_exe();
/// Whether `name` is one of the commands above.
bool is_backend_command(const char* name);
/// Replaces this process with `stretto-backend` from this binary's directory, same arguments;
/// returns (exit code 2, with a message) only if that fails.
int exec_backend(int argc, char** argv);
/// `replay`, `profile`, `validate` as entries of `stretto`'s help only: main() hands them to
/// `stretto-backend` before parsing, which parses their options.
void add_backend_placeholders(CLI::App& app);

/// `replay` (in `stretto-backend`, when the LibTorch backend is built).
void add_replay_command(CLI::App& app, Commands& out);

/// `profile`, `validate` (in `stretto-backend`).
void add_validate_commands(CLI::App& app, Commands& out);

/// `bench-ops` (in `stretto-backend`).
void add_bench_ops_command(CLI::App& app, Commands& out);

/// `describe`.
void add_describe_command(CLI::App& app, Commands& out);  // and `schema`

/// Parses the command line and runs the chosen command; returns its exit code (2 for usage
/// errors, with suggestions for a mistyped command; 1 for internal errors).
int parse_and_run(CLI::App& app, Commands& cmds, int argc, char** argv);
/// Prints diagnostics to stderr; returns 2.
int report(const Diagnostics& ds);

/// An option check that refuses NaN and infinities, which CLI::Range lets through (a NaN
/// compares false both ways): "`option` must be a finite number of `unit`".
CLI::Validator finite_number(const std::string& option, const std::string& unit);
/// Writes `text` to `path`, or stdout when path is "" or "-". Returns false (and prints) on error.
bool write_output(const std::string& path, const std::string& text);
/// True when stdout is a terminal (tables for people, JSON for machines).
bool stdout_is_tty();

}  // namespace stretto::cli
