// `stretto` hands replay, profile and validate to `stretto-backend` (commands.h): the binary
// that links LibTorch, whose loading alone takes longer than most simulations.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "commands.h"

namespace stretto::cli {

namespace {
constexpr std::pair<const char*, const char*> kBackendCommands[] = {
    {"replay", kReplaySummary}, {"profile", kProfileSummary}, {"validate", kValidateSummary},
    {"bench-ops", kBenchOpsSummary}};
}  // namespace

bool is_backend_command(const char* name) {
  for (const auto& [cmd, summary] : kBackendCommands)
    if (std::strcmp(name, cmd) == 0) return true;
  return false;
}

int exec_backend(int argc, char** argv) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string path = "stretto-backend";
  if (n > 0) {
    buf[n] = '\0';
    path = (std::filesystem::path(buf).parent_path() / "stretto-backend").string();
  }
  std::fflush(nullptr);
  argv[0] = path.data();
  ::execv(path.c_str(), argv);
  Diagnostic d;
  d.message = fmt::format("{}: cannot run the LibTorch backend {}: {}",
                          argc > 1 ? argv[1] : "stretto", path, std::strerror(errno));
  d.hint = "build it next to stretto (`cmake --build build`; it needs LibTorch)";
  return report({d});
}

void add_backend_placeholders(CLI::App& app) {
  for (const auto& [name, summary] : kBackendCommands) app.add_subcommand(name, summary);
}

}  // namespace stretto::cli
