#include "commands.h"
namespace stretto::cli {
void add_compile_command(CLI::App&, Commands&) {}
}  // namespace stretto::cli
