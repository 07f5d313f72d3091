// SQLite results database (store.h).
#include "stretto/explore/store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <vector>
#include <utility>

namespace stretto::explore {

using plan::Json;

namespace {

// 2: exposed_comm_ms_per_device (added to a version-1 database when it is opened).
constexpr int kSchemaVersion = 2;

// A read that stopped before the end (a corrupted page, an I/O error): the rows after it
// would vanish from every report and be run again, so the read fails.
Diagnostic read_error(const std::string& path, sqlite3* db) {
  Diagnostic d;
  d.loc.file = path;
  d.message = fmt::format("cannot read the results database: {}", sqlite3_errmsg(db));
  d.hint = "the file is damaged; restore it, or give another --db to start over";
  return d;
}

Diagnostic db_error(const std::string& path, const std::string& what, sqlite3* db) {
  Diagnostic d;
  d.loc.file = path;
  d.message = fmt::format("{}: {}", what, db ? sqlite3_errmsg(db) : "cannot open");
  return d;
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  sqlite3_stmt* get() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }
  void text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void real(int i, double v) {
    if (std::isfinite(v)) sqlite3_bind_double(s_, i, v);
    else sqlite3_bind_null(s_, i);
  }
  void integer(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  int step() { return sqlite3_step(s_); }
  std::string col_text(int i) const {
    const unsigned char* t = sqlite3_column_text(s_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  double col_real(int i) const { return sqlite3_column_double(s_, i); }
  int64_t col_int(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
};

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS points(
  hash TEXT PRIMARY KEY,
  params TEXT NOT NULL,
  status TEXT NOT NULL,
  diagnostic TEXT NOT NULL DEFAULT '',
  wall_ms REAL,
  step_time_ms REAL, bubble_ratio REAL, exposed_comm_ms REAL, mfu REAL, tokens_per_s REAL,
  model_flops REAL, events INTEGER, sim_wall_ms REAL,
  peak_memory_bytes INTEGER, peak_memory_time_ms REAL, over_capacity INTEGER,
  folded_replicas INTEGER, devices INTEGER, memory_cap_GiB REAL,
  estimate_step_ms REAL, estimate_memory_bytes INTEGER,
  metrics TEXT, exposed_comm_ms_per_device REAL
);
)sql";

const char* kColumns =
    "hash, params, status, diagnostic, wall_ms, step_time_ms, bubble_ratio, exposed_comm_ms, mfu, "
    "tokens_per_s, model_flops, events, sim_wall_ms, peak_memory_bytes, peak_memory_time_ms, "
    "over_capacity, folded_replicas, devices, memory_cap_GiB, estimate_step_ms, "
    "estimate_memory_bytes, metrics, exposed_comm_ms_per_device";

PointResult read_row(const Stmt& s) {
  PointResult r;
  r.hash = s.col_text(0);
  r.params = Json::parse(s.col_text(1), nullptr, false);
  r.status = s.col_text(2);
  r.diagnostic = s.col_text(3);
  r.wall_ms = s.col_real(4);
  r.step_time_ms = s.col_real(5);
  r.bubble_ratio = s.col_real(6);
  r.exposed_comm_ms = s.col_real(7);
  r.mfu = s.col_real(8);
  r.tokens_per_s = s.col_real(9);
  r.model_flops = s.col_real(10);
  r.events = s.col_int(11);
  r.sim_wall_ms = s.col_real(12);
  r.peak_memory_bytes = s.col_int(13);
  r.peak_memory_time_ms = s.col_real(14);
  r.folded = s.col_int(16) != 0;
  r.devices = static_cast<int>(s.col_int(17));
  r.memory_cap_GiB = s.col_real(18);
  r.estimate_step_ms = s.col_real(19);
  r.estimate_memory_bytes = s.col_int(20);
  r.metrics = s.col_text(21);
  r.exposed_comm_ms_per_device = s.col_real(22);
  return r;
}

// What makes `path` no results database, checked before SQLite writes anything to it: a
// device or folder (SQLite would put PATH-journal next to /dev/null), or an SQLite file of
// some other program (opened read-only: its tables are listed, none is added, WAL stays off).
std::optional<Diagnostic> foreign(const std::string& path) {
  Diagnostic d;
  d.loc.file = path;
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return std::nullopt;  // created as a new database
  if (!std::filesystem::is_regular_file(st)) {
    d.message = std::filesystem::is_directory(st) ? "the results database is a directory"
                                                  : "the results database is not a regular file";
    d.hint = "give --db a file path (created if missing)";
    return d;
  }
  if (std::filesystem::file_size(path, ec) == 0) return std::nullopt;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    d.message = fmt::format("cannot open the results database: {}",
                            db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_close(db);
    return d;
  }
  std::vector<std::string> tables;
  int rc = SQLITE_OK;
  {
    Stmt st(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    if (!st) rc = sqlite3_errcode(db);
    while (st && (rc = st.step()) == SQLITE_ROW) tables.push_back(st.col_text(0));
  }
  if (rc != SQLITE_OK && rc != SQLITE_DONE) {
    d.message = fmt::format("not a usable results database: {}", sqlite3_errmsg(db));
    d.hint = "nothing was written to it; give another --db";
    sqlite3_close(db);
    return d;
  }
  sqlite3_close(db);
  const bool ours = tables.empty() || tables == std::vector<std::string>{"meta", "points"};
  if (ours) return std::nullopt;
  d.message = fmt::format("not a sweep results database: its tables are {}",
                          fmt::join(tables.size() > 8 ? std::vector<std::string>(
                                                            tables.begin(), tables.begin() + 8)
                                                      : tables,
                                    ", "));
  d.hint = "nothing was written to it; give another --db";
  return d;
}

// A version-1 database (before exposed_comm_ms_per_device) gets the column, filled from each
// point's stored simulate JSON, so that a resumed or merged sweep has it on every row.
Expected<void> add_missing_columns(sqlite3* db, const std::string& path) {
  if (Stmt probe(db, "SELECT exposed_comm_ms_per_device FROM points LIMIT 0"); probe) return {};
  char* err = nullptr;
  const std::string sql = fmt::format(
      "BEGIN;"
      "ALTER TABLE points ADD COLUMN exposed_comm_ms_per_device REAL;"
      "UPDATE points SET exposed_comm_ms_per_device ="
      "  json_extract(metrics, '$.exposed_comm_ms_per_device')"
      "  WHERE metrics <> '' AND json_valid(metrics);"
      "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema', '{}');"
      "COMMIT;",
      kSchemaVersion);
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    Diagnostic d;
    d.loc.file = path;
    d.message = fmt::format("cannot add exposed_comm_ms_per_device to the results database: {}",
                            err ? err : "?");
    sqlite3_free(err);
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return fail(d);
  }
  return {};
}

Expected<sqlite3*> open_db(const std::string& path, bool create) {
  if (path != ":memory:")
    if (auto d = foreign(path)) return fail(std::move(*d));
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) |
                    SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    Diagnostic d = db_error(path, "cannot open the results database", db);
    d.hint = create ? "" : "give a database a sweep wrote";
    sqlite3_close(db);
    return fail(d);
  }
  sqlite3_busy_timeout(db, 10000);
  char* err = nullptr;
  // WAL: readers never block the writer; a crash loses no committed row.
  if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", nullptr, nullptr,
                   &err) != SQLITE_OK ||
      sqlite3_exec(db, kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    Diagnostic d;
    d.loc.file = path;
    d.message = fmt::format("not a usable results database: {}", err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
    return fail(d);
  }
  if (auto ok = add_missing_columns(db, path); !ok) {
    sqlite3_close(db);
    return fail(std::move(ok).error());
  }
  return db;
}

}  // namespace

Store::Store(Store&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)),
      path_(std::move(o.path_)),
      lock_fd_(std::exchange(o.lock_fd_, -1)) {}
Store& Store::operator=(Store&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close(db_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    db_ = std::exchange(o.db_, nullptr);
    path_ = std::move(o.path_);
    lock_fd_ = std::exchange(o.lock_fd_, -1);
  }
  return *this;
}
Store::~Store() {
  if (db_) sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

Expected<void> Store::lock_for_run() {
  if (lock_fd_ >= 0 || path_ == ":memory:") return {};
  // One lock per file, however it is named (a symbolic link, a relative path).
  std::error_code ec;
  const auto canon = std::filesystem::weakly_canonical(path_, ec);
  const std::string lock = (ec ? path_ : canon.string()) + ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  Diagnostic d;
  d.loc.file = path_;
  if (fd < 0) {
    d.message = fmt::format("cannot create the lock file {}", lock);
    return fail(d);
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    d.message = "another sweep is running on this database";
    d.hint = "wait for it, or give this run another --db (or --shard)";
    return fail(d);
  }
  lock_fd_ = fd;
  return {};
}

Expected<Store> Store::open(const std::string& path, const Json& spec_canonical,
                            const std::string& spec_hash, const std::string& shard) {
  auto db = open_db(path, true);
  if (!db) return fail(std::move(db).error());
  Store s;
  s.db_ = *db;
  s.path_ = path;
  const std::string have = s.meta("spec_hash");
  if (!have.empty() && have != spec_hash) {
    Diagnostic d;
    d.loc.file = path;
    d.message = fmt::format(
        "this database holds results of another spec (spec hash {}, this spec is {})", have,
        spec_hash);
    d.hint = "give another --db, or delete the file to start over";
    return fail(d);
  }
  const std::string have_shard = s.meta("shard");
  if (!have.empty() && have_shard != shard) {
    Diagnostic d;
    d.loc.file = path;
    d.message = fmt::format("this database holds shard {} of the sweep, not {}", have_shard,
                            shard);
    d.hint = "each shard writes its own database; join them with `stretto sweep merge`";
    return fail(d);
  }
  if (have.empty()) {
    Stmt st(s.db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
    for (const auto& [k, v] :
         std::vector<std::pair<std::string, std::string>>{{"spec", spec_canonical.dump()},
                                                          {"spec_hash", spec_hash},
                                                          {"shard", shard},
                                                          {"schema", std::to_string(kSchemaVersion)}}) {
      sqlite3_reset(st.get());
      st.text(1, k);
      st.text(2, v);
      if (st.step() != SQLITE_DONE) return fail(db_error(path, "cannot write", s.db_));
    }
  }
  return s;
}

Expected<Store> Store::open_existing(const std::string& path) {
  auto db = open_db(path, false);
  if (!db) return fail(std::move(db).error());
  Store s;
  s.db_ = *db;
  s.path_ = path;
  if (s.meta("spec_hash").empty()) {
    Diagnostic d;
    d.loc.file = path;
    d.message = "not a sweep results database (no spec in it)";
    return fail(d);
  }
  return s;
}

std::string Store::meta(const std::string& key) const {
  Stmt st(db_, "SELECT value FROM meta WHERE key = ?");
  st.text(1, key);
  return st.step() == SQLITE_ROW ? st.col_text(0) : std::string();
}
Json Store::spec() const {
  return Json::parse(meta("spec"), nullptr, false);
}
std::string Store::spec_hash() const {
  return meta("spec_hash");
}

Expected<std::set<std::string>> Store::hashes() const {
  std::set<std::string> out;
  Stmt st(db_, "SELECT hash FROM points");
  int rc = st ? SQLITE_ROW : SQLITE_ERROR;
  while (st && (rc = st.step()) == SQLITE_ROW) out.insert(st.col_text(0));
  if (rc != SQLITE_DONE) return fail(read_error(path_, db_));
  return out;
}

size_t Store::count() const {
  Stmt st(db_, "SELECT COUNT(*) FROM points");
  return st.step() == SQLITE_ROW ? static_cast<size_t>(st.col_int(0)) : 0;
}

Expected<void> Store::put(const PointResult& r) {
  Stmt st(db_, fmt::format("INSERT OR IGNORE INTO points({}) VALUES "
                           "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           kColumns)
                   .c_str());
  if (!st) return fail(db_error(path_, "cannot prepare insert", db_));
  st.text(1, r.hash);
  st.text(2, r.params.dump());
  st.text(3, r.status);
  st.text(4, r.diagnostic);
  st.real(5, r.wall_ms);
  st.real(6, r.step_time_ms);
  st.real(7, r.bubble_ratio);
  st.real(8, r.exposed_comm_ms);
  st.real(9, r.mfu);
  st.real(10, r.tokens_per_s);
  st.real(11, r.model_flops);
  st.integer(12, r.events);
  st.real(13, r.sim_wall_ms);
  st.integer(14, r.peak_memory_bytes);
  st.real(15, r.peak_memory_time_ms);
  st.integer(16, r.status == "over_capacity" ? 1 : 0);
  st.integer(17, r.folded ? 1 : 0);
  st.integer(18, r.devices);
  st.real(19, r.memory_cap_GiB);
  st.real(20, r.estimate_step_ms);
  st.integer(21, r.estimate_memory_bytes);
  st.text(22, r.metrics);
  st.real(23, r.exposed_comm_ms_per_device);
  if (st.step() != SQLITE_DONE) return fail(db_error(path_, "cannot store a point", db_));
  return {};
}

Expected<std::vector<PointResult>> Store::rows() const {
  std::vector<PointResult> out;
  Stmt st(db_, fmt::format("SELECT {} FROM points ORDER BY hash", kColumns).c_str());
  int rc = st ? SQLITE_ROW : SQLITE_ERROR;
  while (st && (rc = st.step()) == SQLITE_ROW) out.push_back(read_row(st));
  if (rc != SQLITE_DONE) return fail(read_error(path_, db_));
  return out;
}

std::optional<PointResult> Store::row(const std::string& hash) const {
  Stmt st(db_, fmt::format("SELECT {} FROM points WHERE hash = ?", kColumns).c_str());
  st.text(1, hash);
  if (st.step() != SQLITE_ROW) return std::nullopt;
  return read_row(st);
}

Expected<size_t> Store::merge_from(const std::string& other_path) {
  auto other = open_existing(other_path);
  if (!other) return fail(std::move(other).error());
  if (other->spec_hash() != spec_hash()) {
    Diagnostic d;
    d.loc.file = other_path;
    d.message = fmt::format("holds results of another spec (spec hash {}, expected {})",
                            other->spec_hash(), spec_hash());
    d.hint = "merge only the shards of one sweep";
    return fail(d);
  }
  const size_t before = count();
  char* err = nullptr;
  sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr);
  auto theirs = other->rows();
  if (!theirs) return fail(std::move(theirs).error());
  for (const PointResult& r : *theirs) {
    auto ok = put(r);
    if (!ok) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return fail(std::move(ok).error());
    }
  }
  if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, &err) != SQLITE_OK) {
    Diagnostic d = db_error(path_, "cannot commit the merge", db_);
    sqlite3_free(err);
    return fail(d);
  }
  return count() - before;
}

}  // namespace stretto::explore
