#include "commands.h"
namespace stretto::cli {
void add_simulate_commands(CLI::App&, CLI::App&, Commands&) {}
}  // namespace stretto::cli
