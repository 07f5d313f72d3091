#pragma once
// Help text with examples, "did you mean" for mistyped subcommands, the resource-limit
// options every command that reads a plan takes, and the out-of-memory message (issue 14).

#include <CLI/CLI.hpp>
#include <string>

namespace stretto::cli {

/// Adds an "Examples:" footer to the app and to each subcommand that has examples.
void add_usage_examples(CLI::App& app);
/// When argv names no subcommand of `app` (or of its import/export groups) but something
/// close to one, prints "unknown command 'simulat'; did you mean 'simulate'?" and returns 2;
/// otherwise -1 (let CLI11 report the error).
int unknown_subcommand(const CLI::App& app, int argc, char** argv);
/// --max-memory SIZE and --max-input-size SIZE (e.g. 8G, 512M).
void add_limit_options(CLI::App* cmd);
/// What to print when an allocation fails.
/// The out-of-memory refusal; its hint names only the options `cmd` has.
std::string out_of_memory_message(const CLI::App* cmd);

}  // namespace stretto::cli
