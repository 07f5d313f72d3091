// Helpers every `stretto` binary shares (commands.h).
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>

#include "commands.h"
#include "output.h"
#include "usage.h"

namespace stretto::cli {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "stretto";
  buf[n] = '\0';
  return buf;
}

int report(const Diagnostics& ds) {
  std::fputs(render_all(ds).c_str(), stderr);
  return 2;
}

bool write_output(const std::string& path, const std::string& text) {
  // A temporary file renamed on success; a failed write (full disk, closed stdout) is an error.
  auto out = OutputFile::open(path);
  if (!out) {
    report(out.error());
    return false;
  }
  out->write(text);
  return out->commit();
}

bool stdout_is_tty() {
  return isatty(STDOUT_FILENO) != 0;
}

int parse_and_run(CLI::App& app, Commands& cmds, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (int rc = unknown_subcommand(app, argc, argv); rc >= 0) return rc;
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  const CLI::App* running = nullptr;
  try {
    for (auto& c : cmds)
      if (c.app->parsed()) {
        running = c.app;
        return c.run();
      }
  } catch (const std::bad_alloc&) {
    // Not an internal error: the plan needs more memory than this machine could give.
    std::fputs(out_of_memory_message(running).c_str(), stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}

CLI::Validator finite_number(const std::string& option, const std::string& unit) {
  return CLI::Validator(
      [option, unit](const std::string& v) -> std::string {
        double x = 0;
        try {
          x = std::stod(v);
        } catch (...) {
          return {};  // (the option's own parse reports it)
        }
        return std::isfinite(x) ? std::string() : option + " must be a finite number of " + unit;
      },
      "NUMBER");
}

}  // namespace stretto::cli
