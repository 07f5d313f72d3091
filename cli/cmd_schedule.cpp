// placeholder: owned by the schedule-builders work (issue 3)
#include "commands.h"
namespace stretto::cli {
void add_schedule_commands(CLI::App&, CLI::App&, CLI::App&, Commands&) {}
}  // namespace stretto::cli
