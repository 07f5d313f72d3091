#include "stretto/support/limits.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace stretto {

namespace {

std::atomic<uint64_t> g_max_input_override{0};

Diagnostic file_diag(const std::string& path, std::string message, std::string hint) {
  Diagnostic d;
  d.message = std::move(message);
  d.hint = std::move(hint);
  d.loc.file = path == "-" ? "<stdin>" : path;
  return d;
}

std::string limit_hint() {
  return fmt::format(
      "the limit is {} ({} bytes); raise it with --max-input-size or the STRETTO_MAX_INPUT_BYTES "
      "environment variable",
      human_bytes(static_cast<double>(max_input_bytes())), max_input_bytes());
}

// Reads at most `limit` + 1 bytes from `fd`; sets `over` when there was more.
bool read_bounded(int fd, uint64_t limit, std::string& out, bool& over, int& err) {
  over = false;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking stdin pipe with no writer yet: wait for it
        usleep(1000);
        continue;
      }
      err = errno;
      return false;
    }
    if (n == 0) return true;
    if (out.size() + static_cast<uint64_t>(n) > limit) {
      over = true;
      return true;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

uint64_t max_input_bytes() {
  if (const uint64_t o = g_max_input_override.load()) return o;
  if (const char* e = std::getenv("STRETTO_MAX_INPUT_BYTES"))
    if (auto v = parse_byte_size(e); v && *v > 0) return *v;
  return kDefaultMaxInputBytes;
}

void set_max_input_bytes(uint64_t bytes) {
  g_max_input_override.store(bytes);
}

Expected<std::string> read_input_file(const std::string& path, std::string_view what) {
  const uint64_t limit = max_input_bytes();
  std::string out;
  bool over = false;
  int err = 0;
  if (path == "-") {
    struct stat st {};
    if (::fstat(STDIN_FILENO, &st) == 0 && S_ISDIR(st.st_mode))
      return fail(file_diag(path, fmt::format("standard input is a directory, not a {}", what),
                            "pipe the file in: stretto simulate - < plan.json"));
    if (!read_bounded(STDIN_FILENO, limit, out, over, err))
      return fail(file_diag(path, fmt::format("cannot read the {} from standard input: {}", what,
                                              std::strerror(err)),
                            {}));
    if (over)
      return fail(
          file_diag(path, fmt::format("the {} on standard input is larger than the limit", what),
                    limit_hint()));
    return out;
  }
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below anyway).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return fail(file_diag(path, fmt::format("cannot read {} '{}': {}", what, path,
                                            std::strerror(errno)),
                          "check the path; relative paths are taken from the current "
                          "directory (a plan's cost table: from the plan's directory)"));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    return fail(file_diag(
        path,
        fmt::format("'{}' is {}, not a regular file; refusing to read it as a {}", path,
                    dir                      ? "a directory"
                    : S_ISCHR(st.st_mode)    ? "a character device"
                    : S_ISBLK(st.st_mode)    ? "a block device"
                    : S_ISFIFO(st.st_mode)   ? "a pipe (FIFO)"
                    : S_ISSOCK(st.st_mode)   ? "a socket"
                                             : "not a regular file",
                    what),
        "name a file; to read a plan from a pipe use '-' (standard input)"));
  }
  if (static_cast<uint64_t>(st.st_size) > limit) {
    ::close(fd);
    return fail(file_diag(path,
                          fmt::format("{} '{}' is {}, larger than the input limit", what, path,
                                      human_bytes(static_cast<double>(st.st_size))),
                          limit_hint()));
  }
  // Back to blocking reads for the regular file.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  out.reserve(static_cast<size_t>(st.st_size));
  const bool ok = read_bounded(fd, limit, out, over, err);
  ::close(fd);
  if (!ok)
    return fail(file_diag(path, fmt::format("cannot read {} '{}': {}", what, path,
                                            std::strerror(err)),
                          {}));
  if (over)  // grew while being read
    return fail(file_diag(path, fmt::format("{} '{}' is larger than the input limit", what, path),
                          limit_hint()));
  return out;
}

Diagnostics cap_diagnostics(Diagnostics ds, size_t cap) {
  if (ds.size() <= cap) return ds;
  const size_t more = ds.size() - cap;
  size_t errors = 0;
  for (size_t i = cap; i < ds.size(); ++i) errors += ds[i].severity == Severity::kError;
  SourceLoc where = ds[cap].loc;
  where.line = where.col = 0;
  where.json_pointer.clear();
  ds.resize(cap);
  ds.shrink_to_fit();
  Diagnostic d;
  d.severity = Severity::kNote;
  d.loc = std::move(where);
  d.message = fmt::format("... and {} more {} (not shown)", fmt::group_digits(more),
                          errors == more ? (more == 1 ? "error" : "errors")
                                         : (more == 1 ? "diagnostic" : "diagnostics"));
  d.hint = "fix the first ones and run again";
  ds.push_back(std::move(d));
  return ds;
}

std::string printable(std::string_view s, bool keep_layout) {
  auto control = [&](size_t i) -> size_t {  // bytes of a control character at i, else 0
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20) return keep_layout && (c == '\n' || c == '\t') ? 0 : 1;
    if (c == 0x7f) return 1;
    if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9f)
      return 2;
    return 0;
  };
  size_t i = 0;
  while (i < s.size() && control(i) == 0) ++i;
  if (i == s.size()) return std::string(s);
  std::string out(s.substr(0, i));
  while (i < s.size()) {
    const size_t n = control(i);
    if (n == 0) {
      out += s[i++];
      continue;
    }
    for (size_t k = 0; k < n; ++k)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i + k]));
    i += n;
  }
  return out;
}

std::string window_line(std::string_view line, uint32_t& col) {
  if (line.size() <= kMaxEchoedLine) return std::string(line);
  const size_t half = kMaxEchoedLine / 2;
  const size_t c = col > 0 ? std::min<size_t>(col - 1, line.size()) : 0;
  size_t start = c > half ? c - half : 0;
  if (start + kMaxEchoedLine > line.size())
    start = line.size() > kMaxEchoedLine ? line.size() - kMaxEchoedLine : 0;
  // Don't cut a UTF-8 sequence: move to the start of a character.
  while (start > 0 && start < line.size() &&
         (static_cast<unsigned char>(line[start]) & 0xC0) == 0x80)
    --start;
  size_t len = std::min(kMaxEchoedLine, line.size() - start);
  while (start + len < line.size() && len > 0 &&
         (static_cast<unsigned char>(line[start + len]) & 0xC0) == 0x80)
    --len;
  std::string out;
  if (start > 0) out += "...";
  out.append(line.substr(start, len));
  if (start + len < line.size()) out += "...";
  if (col > 0) col = static_cast<uint32_t>(c - start + 1 + (start > 0 ? 3 : 0));
  return out;
}

bool looks_like_json(std::string_view text) {
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{' || c == '[';
  }
  return false;
}

std::optional<size_t> find_excess_nesting(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_byte_size(std::string_view s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const std::string str(s);
  errno = 0;
  const double v = std::strtod(str.c_str(), &end);
  if (end == str.c_str() || errno != 0 || !(v >= 0)) return std::nullopt;
  std::string_view suf(end);
  double mult = 1;
  if (!suf.empty()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(suf[0])));
    if (u == 'K')
      mult = 1024.0;
    else if (u == 'M')
      mult = 1024.0 * 1024;
    else if (u == 'G')
      mult = 1024.0 * 1024 * 1024;
    else if (u == 'T')
      mult = 1024.0 * 1024 * 1024 * 1024;
    else if (u != 'B')
      return std::nullopt;
    suf.remove_prefix(1);
    if (!suf.empty() && (suf == "B" || suf == "iB" || suf == "b")) suf = {};
    if (!suf.empty()) return std::nullopt;
  }
  const double bytes = v * mult;
  if (bytes >= 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.0f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.0f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace stretto
