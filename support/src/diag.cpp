#include "stretto/support/diag.h"

#include "stretto/support/limits.h"

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
  // What a diagnostic quotes from a file (names, lines) is printed with its control characters
  // escaped (limits.h printable): a file cannot drive the terminal through an error message.
  std::string first = printable(std::string_view(message).substr(0, nl));
  std::string out = fmt::format("{}: {}: {}", printable(loc.str()), kSev[static_cast<int>(severity)],
                                first);
  if (directive >= 0) out += fmt::format(" [directive {}]", directive);
  if (nl != std::string::npos) out += printable(std::string_view(message).substr(nl), true);
  out += '\n';
  if (!source_line.empty() && loc.col > 0) {
    uint32_t caret = caret_col ? caret_col : loc.col;
    std::string shown =
        caret_col || source_line.size() <= kMaxEchoedLine ? source_line
                                                          : window_line(source_line, caret);
    if (printable(shown, true).size() != shown.size()) {  // escapes widen what precedes the caret
      const size_t before = std::min<size_t>(caret > 0 ? caret - 1 : 0, shown.size());
      caret = static_cast<uint32_t>(printable(std::string_view(shown).substr(0, before), true).size() + 1);
      shown = printable(shown, true);
    }
    out += "  " + shown + "\n  ";
    // Keep tabs so the caret lines up with the echoed line.
    for (uint32_t i = 1; i < caret && i <= shown.size(); ++i)
      out += shown[i - 1] == '\t' ? '\t' : ' ';
    out += "^\n";
  }
  if (!hint.empty()) out += "  hint: " + printable(hint, true) + "\n";
  for (const auto& n : notes)
    out += fmt::format("  note: {}: {}\n", printable(n.loc.str()), printable(n.message, true));
  return out;
}

std::string render_all(const Diagnostics& ds) {
  std::string out;
  // (cap + 1: all of them, so that cap_diagnostics' own "... and N more" note is shown)
  const size_t shown = ds.size() <= kMaxDiagnostics + 1 ? ds.size() : kMaxDiagnostics;
  for (size_t i = 0; i < shown; ++i) out += ds[i].render();
  if (ds.size() > shown) {
    Diagnostics rest(1);
    rest[0].severity = Severity::kNote;
    rest[0].loc.file = ds[shown].loc.file;
    const size_t more = ds.size() - shown;
    rest[0].message = fmt::format("... and {} more (not shown)", fmt::group_digits(more));
    rest[0].hint = "fix the first ones and run again";
    out += rest[0].render();
  }
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
  // The word cut short where the name goes on after a separator: "h100" for "h100-sxm".
  for (const auto& c : candidates)
    if (!word.empty() && c.size() > word.size() && edit_distance(c.substr(0, word.size()), word) == 0 &&
        (c[word.size()] == '-' || c[word.size()] == '_' || c[word.size()] == '.'))
      return c;
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
