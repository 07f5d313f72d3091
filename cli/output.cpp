#include "output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace stretto::cli {

namespace {

Diagnostic out_diag(const std::string& path, std::string msg, std::string hint) {
  Diagnostic d;
  d.loc.file = path;
  d.message = std::move(msg);
  d.hint = std::move(hint);
  return d;
}

std::vector<std::string>& noted_inputs() {
  static std::vector<std::string> v;
  return v;
}

}  // namespace

void note_input(const std::string& path) {
  noted_inputs().push_back(path);
}

Expected<void> check_output(const std::string& path, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  if (path.empty() || path == "-") return {};
  std::error_code ec;
  std::vector<std::string> all = inputs;
  all.insert(all.end(), noted_inputs().begin(), noted_inputs().end());
  const fs::path canon = fs::weakly_canonical(path, ec);
  for (const std::string& in : all) {
    if (in.empty() || in == "-") continue;
    std::error_code e1, e2;
    const bool same_file = fs::exists(path, e1) && fs::exists(in, e1) && fs::equivalent(path, in, e2);
    std::error_code e3;
    const fs::path in_canon = fs::weakly_canonical(in, e3);
    if (same_file || (!ec && !e3 && canon == in_canon))
      return fail(out_diag(path, fmt::format("refusing to overwrite the input file '{}'", in),
                           "write the output to another file; nothing was run"));
  }
  if (fs::exists(path, ec) && fs::is_directory(path, ec))
    return fail(out_diag(path, fmt::format("cannot write '{}': it is a directory", path),
                         "name a file"));
  return {};
}

Expected<OutputFile> OutputFile::open(const std::string& path,
                                      const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  OutputFile o;
  if (path.empty() || path == "-") {
    o.f_ = stdout;
    o.stdout_ = true;
    o.path_ = "<stdout>";
    return o;
  }
  std::error_code ec;
  if (auto ok = check_output(path, inputs); !ok) return fail(ok.error());
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    // A device or a pipe (/dev/null, /dev/stdout, a FIFO): written in place, never replaced.
    o.f_ = std::fopen(path.c_str(), "wb");
    if (!o.f_)
      return fail(out_diag(path, fmt::format("cannot write '{}': {}", path, std::strerror(errno)),
                           ""));
    o.path_ = path;
    return o;
  }
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + p.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0)
    return fail(out_diag(path, fmt::format("cannot write '{}': {}", path, std::strerror(errno)),
                         "check that the directory exists and is writable"));
  // mkstemp creates 0600; an output file gets the usual permissions (umask applies).
  const mode_t um = ::umask(0);
  ::umask(um);
  ::fchmod(fd, 0666 & ~um);
  o.f_ = ::fdopen(fd, "wb");
  if (!o.f_) {
    ::close(fd);
    ::unlink(tmpl.c_str());
    return fail(out_diag(path, fmt::format("cannot write '{}': {}", path, std::strerror(errno)),
                         ""));
  }
  o.path_ = path;
  o.tmp_ = tmpl;
  return o;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : f_(o.f_),
      path_(std::move(o.path_)),
      tmp_(std::move(o.tmp_)),
      stdout_(o.stdout_),
      failed_(o.failed_),
      err_(o.err_),
      done_(o.done_) {
  o.f_ = nullptr;
  o.done_ = true;
}

OutputFile::~OutputFile() {
  if (done_ || !f_) return;
  if (!stdout_) {
    std::fclose(f_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
}

bool OutputFile::write(std::string_view text) {
  if (failed_ || !f_) return false;
  if (std::fwrite(text.data(), 1, text.size(), f_) != text.size()) {
    failed_ = true;
    err_ = errno;
  }
  return !failed_;
}

bool OutputFile::commit() {
  if (done_ || !f_) return !failed_;
  done_ = true;
  if (std::fflush(f_) != 0 && !failed_) {
    failed_ = true;
    err_ = errno;
  }
  if (std::ferror(f_) && !failed_) {
    failed_ = true;
    err_ = errno ? errno : EIO;
  }
  if (stdout_) {
    if (failed_)
      std::fprintf(stderr, "error: writing to standard output failed: %s\n",
                   std::strerror(err_ ? err_ : EIO));
    return !failed_;
  }
  if (tmp_.empty()) {  // written in place (a device or a pipe)
    if (std::fclose(f_) != 0 && !failed_) {
      failed_ = true;
      err_ = errno;
    }
    f_ = nullptr;
    if (failed_)
      std::fprintf(stderr, "error: cannot write '%s': %s\n", path_.c_str(),
                   std::strerror(err_ ? err_ : EIO));
    return !failed_;
  }
  if (::fsync(::fileno(f_)) != 0 && !failed_ && errno != EINVAL) {
    failed_ = true;
    err_ = errno;
  }
  if (std::fclose(f_) != 0 && !failed_) {
    failed_ = true;
    err_ = errno;
  }
  f_ = nullptr;
  if (!failed_ && std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    failed_ = true;
    err_ = errno;
  }
  if (failed_) {
    ::unlink(tmp_.c_str());
    std::fprintf(stderr, "error: cannot write '%s': %s (nothing was written)\n", path_.c_str(),
                 std::strerror(err_ ? err_ : EIO));
  }
  return !failed_;
}

}  // namespace stretto::cli
