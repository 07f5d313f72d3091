#include "warnings.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "stretto/sim/warnings.h"

namespace stretto::cli {

int print_warnings(const compiler::CompiledPlan& cp, const sim::Result& r, bool folded) {
  const sim::Warnings ws = sim::result_warnings(cp, r, folded);
  for (const sim::Warning& w : ws)
    std::fprintf(stderr, "warning: %s\n  hint: %s\n", w.diag.message.c_str(),
                 w.diag.hint.c_str());
  return static_cast<int>(ws.size());
}

int terminal_width() {
  if (const char* c = std::getenv("COLUMNS"))
    if (int v = std::atoi(c); v >= 40) return v;
  struct winsize w {};
  for (int fd : {STDOUT_FILENO, STDERR_FILENO})
    if (::ioctl(fd, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40) return w.ws_col;
  return 100;
}

}  // namespace stretto::cli
