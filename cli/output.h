#pragma once
// Output files of the CLI (issue 14): opened before any long work, written to a temporary
// file next to the destination and renamed over it only on success (a full disk or a failed
// write leaves the old file, or none, never a truncated one), refusing to overwrite an input.
// Standard output ("" or "-") is checked too: a failed write is an error, not exit 0.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "stretto/support/diag.h"

namespace stretto::cli {

/// Registers a file this command reads: OutputFile::open refuses to write over it.
void note_input(const std::string& path);

/// Checks, before any work, that writing `path` would not replace one of `inputs` or a noted
/// input (the same file, or the same path for one not created yet, such as a database the
/// command is about to create) and is no directory. "" and "-" (standard output) pass.
Expected<void> check_output(const std::string& path, const std::vector<std::string>& inputs = {});

class OutputFile {
 public:
  /// Opens `path` for writing ("" or "-": standard output). `inputs` are files this command
  /// reads; writing over one of them is refused. Errors are diagnostics (exit 2).
  static Expected<OutputFile> open(const std::string& path,
                                   const std::vector<std::string>& inputs = {});
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  ~OutputFile();

  std::FILE* file() const { return f_; }
  const std::string& path() const { return path_; }
  bool is_stdout() const { return stdout_; }
  /// Writes `text`; false on an error (remembered; commit() reports it).
  bool write(std::string_view text);
  /// Flushes, closes and renames the temporary file onto the destination. On failure prints
  /// "error: cannot write 'PATH': reason" to stderr, removes the temporary file, returns false.
  bool commit();

 private:
  OutputFile() = default;
  std::FILE* f_ = nullptr;
  std::string path_, tmp_;
  bool stdout_ = false;
  bool failed_ = false;
  int err_ = 0;
  bool done_ = false;
};

}  // namespace stretto::cli
