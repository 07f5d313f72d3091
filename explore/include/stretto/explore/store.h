#pragma once
// The results database of a sweep: one SQLite file in WAL mode (docs/sweeps.md).
//
//   meta(key PRIMARY KEY, value)   spec (canonical JSON with the base plan inlined), spec_hash,
//                                  shard ("I/N"), schema version
//   points(hash PRIMARY KEY, ...)  one row per finished point: its parameters, status
//                                  (ok | over_capacity | invalid), the diagnostic, every metric of
//                                  `simulate --format json` (scalars as columns, the whole object
//                                  with per-device rows in `metrics`), the analytic estimate,
//                                  and the wall time.
//
// Each finished point is committed on its own (WAL, synchronous=NORMAL): a `kill -9` loses at
// most the points that were still running, which the next run does again; a committed point is
// never run twice because the runner skips every hash already present. A database belongs to
// one spec: opening it with another spec is an error.

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stretto/plan/json_source.h"

struct sqlite3;

namespace stretto::explore {

/// One finished point.
struct PointResult {
  std::string hash;
  plan::Json params;
  std::string status;      // "ok", "over_capacity" (simulated, infeasible), "invalid"
  std::string diagnostic;  // invalid: why; over_capacity: which device exceeds what
  double wall_ms = 0;      // compile + simulate, this point
  // Scalar metrics (NaN / 0 for invalid points).
  double step_time_ms = 0, bubble_ratio = 0, exposed_comm_ms = 0, mfu = 0, tokens_per_s = 0;
  double exposed_comm_ms_per_device = 0;  // simulate's: exposed_comm_ms over the devices
  double model_flops = 0, sim_wall_ms = 0, peak_memory_time_ms = 0;
  int64_t events = 0, peak_memory_bytes = 0;
  int devices = 0;
  bool folded = false;
  double memory_cap_GiB = 0;
  double estimate_step_ms = 0;  // analytic estimate (0 when not computed)
  int64_t estimate_memory_bytes = 0;
  // The `simulate --format json` object, as JSON text (empty for invalid points): stored and
  // read back as it is; Json::parse it to read fields.
  std::string metrics;

  bool simulated() const { return status == "ok" || status == "over_capacity"; }
  bool feasible() const { return status == "ok"; }
};

class Store {
 public:
  /// Opens (creating if needed) a database for `spec_canonical`/`spec_hash`. An existing
  /// database made for another spec is refused with a diagnostic.
  static Expected<Store> open(const std::string& path, const plan::Json& spec_canonical,
                              const std::string& spec_hash, const std::string& shard);
  /// Opens an existing database (for merge and reports).
  static Expected<Store> open_existing(const std::string& path);
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  /// Every stored hash; a read that fails (a damaged file) is an error, never a short list.
  Expected<std::set<std::string>> hashes() const;
  /// Commits one point (INSERT OR IGNORE: a hash already present is kept).
  Expected<void> put(const PointResult& r);
  /// Every stored row, by hash; a read that fails is an error, never a short list.
  Expected<std::vector<PointResult>> rows() const;
  std::optional<PointResult> row(const std::string& hash) const;
  size_t count() const;
  plan::Json spec() const;
  std::string spec_hash() const;
  std::string meta(const std::string& key) const;
  /// Takes the database's runner lock (an flock on PATH.lock, released when the process ends,
  /// even by kill -9): two sweeps writing one database would both run the points missing at
  /// their start. Fails with a diagnostic when another process holds it.
  Expected<void> lock_for_run();
  /// Copies every row of `other_path` not already here (same spec required). Returns how many.
  Expected<size_t> merge_from(const std::string& other_path);
  const std::string& path() const { return path_; }

 private:
  Store() = default;
  sqlite3* db_ = nullptr;
  std::string path_;
  int lock_fd_ = -1;
};

}  // namespace stretto::explore
