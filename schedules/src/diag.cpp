#include "stretto/schedules/diag.h"

#include <fmt/format.h>

#include <algorithm>

namespace stretto {

std::string SourceLoc::str() const {
  std::string s = file.empty() ? std::string("<input>") : file;
  if (line) s += fmt::format(":{}:{}", line, col);
  if (!json_pointer.empty()) s += fmt::format(" ({})", json_pointer);
  return s;
}

std::string Diagnostic::render() const {
  static constexpr const char* kSev[] = {"error", "warning", "note"};
  // "[directive N]" goes at the end of the first line of a multi-line message.
  const size_t nl = message.find('\n');
  std::string first = message.substr(0, nl);
  std::string out = fmt::format("{}: {}: {}", loc.str(), kSev[static_cast<int>(severity)], first);
  if (directive >= 0) out += fmt::format(" [directive {}]", directive);
  if (nl != std::string::npos) out += message.substr(nl);
  out += '\n';
  if (!source_line.empty() && loc.col > 0) {
    out += "  " + source_line + "\n  ";
    // Keep tabs so the caret lines up with the echoed line.
    for (uint32_t i = 1; i < loc.col && i <= source_line.size(); ++i)
      out += source_line[i - 1] == '\t' ? '\t' : ' ';
    out += "^\n";
  }
  if (!hint.empty()) out += "  hint: " + hint + "\n";
  for (const auto& n : notes) out += fmt::format("  note: {}: {}\n", n.loc.str(), n.message);
  return out;
}

std::string render_all(const Diagnostics& ds) {
  std::string out;
  for (const auto& d : ds) out += d.render();
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Plausible typo: at most a third of the word's letters wrong (and at least one allowed).
  size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : std::string();
}

void assert_fail(const char* cond, const char* why, const char* file, int line) {
  std::fprintf(stderr, "stretto internal error: %s:%d: assertion '%s' failed: %s\n", file, line,
               cond, why);
  std::abort();
}

}  // namespace stretto
