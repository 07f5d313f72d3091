// `stretto` hands replay, profile and validate to `stretto-backend` (commands.h): the binary
// that links LibTorch, whose loading alone takes longer than most simulations.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <string>

#include "commands.h"

namespace stretto::cli {

bool is_backend_command(const char* name) {
  return std::strcmp(name, "replay") == 0 || std::strcmp(name, "profile") == 0 ||
         std::strcmp(name, "validate") == 0;
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

void add_backend_placeholders(CLI::App& app, Commands& out, int argc, char** argv) {
  for (auto [name, summary] : {std::pair{"replay", kReplaySummary},
                               std::pair{"profile", kProfileSummary},
                               std::pair{"validate", kValidateSummary}}) {
    CLI::App* cmd = app.add_subcommand(name, summary);
    cmd->allow_extras();
    cmd->prefix_command();
    out.push_back({cmd, [argc, argv] { return exec_backend(argc, argv); }});
  }
}

}  // namespace stretto::cli
