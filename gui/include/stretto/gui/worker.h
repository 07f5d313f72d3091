#pragma once
// Live re-simulation: a worker thread that compiles and simulates the latest submitted plan
// text through sim::Session. A newer submission supersedes an older one that has not started;
// the UI thread never waits (it polls take() once per frame).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stretto/gui/timeline.h"
#include "stretto/plan/json_source.h"
#include "stretto/sim/granularity.h"
#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/session.h"

namespace stretto::gui {

/// One simulated plan, immutable once published.
struct Snapshot {
  std::string text, file;
  std::shared_ptr<const sim::Session> session;
  sim::Result result;
  sim::PipelineMetrics pipeline;  // sim::pipeline_metrics of result (exposed comm per device)
  Timeline timeline;
  /// The text, parsed: an edit whose JSON equals it outside "costmodel" only re-costs
  /// (plan::same_but_costmodel).
  std::shared_ptr<const plan::JsonSource> source;
  double wall_ms = 0;  // compile + simulate + timeline
  /// parse + (re)compile + cost model; timeline lanes (and, alongside, the pipeline metrics)
  double prepare_ms = 0, lanes_ms = 0;
  bool recompiled = true;  // false: only the cost model changed (Session::set_costmodel)
  bool lanes_retimed = false;  // the previous snapshot's lanes retimed (retime_timeline)
  bool engine_rerun = false;   // the engine re-ran its preparation (sim::Resimulator::reused)
  /// Devices whose reserved-memory replay ran again (sim::Resimulator::replayed_devices; the
  /// others kept their reserved bytes); every device when no Resimulator ran.
  uint32_t replayed_devices = 0;
  /// The allocator replays they took (sim::Resimulator::allocator_replays: devices whose
  /// effects come in the same sequence share one).
  uint32_t allocator_replays = 0;
  /// Of the replayed devices, those sorted again (sim::Resimulator::sorted_devices: devices
  /// whose effects are listed with equal times share one sort).
  uint32_t sorted_devices = 0;
  /// Name the structure of result.program and of timeline: a snapshot whose program was
  /// re-costed from the previous snapshot's (sim::Resimulator::recosted) shares the previous
  /// one's program_lineage, one whose lanes were retimed from the previous lanes its
  /// lanes_lineage; a program built or lanes laid out anew get a new one. Storage with the
  /// lineage of the previous snapshot has its structure (SpareStorage).
  std::shared_ptr<const void> program_lineage, lanes_lineage;
};

/// The session, program and lanes of the snapshots that no one holds any more, kept for the
/// next cost-model edit to make its compiled plan, re-cost and retime into, in place of copies
/// of the previous snapshot's (which the UI may still be showing). A snapshot made by make()
/// gives them (with their lineages) back here when its last holder lets it go, on any thread:
/// once no one holds it, no one can read it (weak_ptr::lock() gives null). It holds the last
/// one given back: about one compiled plan, one program and one timeline.
class SpareStorage {
 public:
  struct Spare {
    /// Its session (for Session::set_costmodel's `retired`: its compiled plan's storage).
    std::shared_ptr<const sim::Session> session;
    engine::Program program;
    std::shared_ptr<const void> program_lineage;  // Snapshot::program_lineage
    Timeline timeline;
    std::shared_ptr<const void> lanes_lineage;  // Snapshot::lanes_lineage
  };
  /// What the snapshot let go last left here (its storage is the caller's now; nothing
  /// stays here).
  Spare take();
  /// A new snapshot that gives its program and lanes back to `spares` when it is destroyed.
  static std::shared_ptr<Snapshot> make(const std::shared_ptr<SpareStorage>& spares);

 private:
  void give_back(Snapshot& s);
  std::mutex mu_;
  Spare spare_;
};

struct Outcome {
  uint64_t generation = 0;
  std::shared_ptr<const Snapshot> snapshot;  // null on failure
  Diagnostics diags;                          // errors (failure) or warnings (success)
  std::vector<std::string> diag_codes;  // diags[i]'s code (sim/warnings.h kWarn*), "" if none
  double wall_ms = 0;
};

class SimWorker {
 public:
  SimWorker();
  ~SimWorker();
  SimWorker(const SimWorker&) = delete;
  SimWorker& operator=(const SimWorker&) = delete;

  /// Queues `text` (named `file` in diagnostics, relative paths from `base_dir`); returns its
  /// generation. Replaces a queued request that has not started.
  uint64_t submit(std::string text, std::string file, std::string base_dir,
                  sim::Granularity granularity = sim::Granularity::kOp);
  /// The newest finished outcome not yet taken (older finished ones are dropped).
  std::optional<Outcome> take();
  /// True while a request is queued or running.
  bool busy() const;
  /// Phase and fraction of the running simulation ("" when idle).
  std::pair<std::string, double> progress() const;
  /// Requests submitted, replaced while queued (never run), and run so far.
  struct Counts {
    uint64_t submitted = 0, superseded = 0, run = 0;
  };
  Counts counts() const;

  /// Runs one request on the calling thread (what the worker does). With `prev` (the last
  /// good snapshot) and a text that differs from it only in "costmodel", the compiled plan is
  /// reused (Session::set_costmodel) instead of recompiled. With `resim` (the worker's own), a
  /// cost-model edit also reuses the engine's preparation of the previous program when `prev`
  /// is the last snapshot `resim` made. With `spares`, its snapshots give their storage back
  /// there when destroyed, and a cost-model edit re-costs (with `resim`) and retimes into what
  /// it holds when that has the structure of `prev`'s program and lanes (Snapshot's
  /// lineages), instead of into copies of them; the outcome is the same.
  static Outcome run(const std::string& text, const std::string& file, const std::string& base_dir,
                     uint64_t generation, const sim::SimOptions& opt = {},
                     const Snapshot* prev = nullptr, sim::Resimulator* resim = nullptr,
                     const std::shared_ptr<SpareStorage>& spares = nullptr);

 private:
  struct Request {
    std::string text, file, base_dir;
    uint64_t generation = 0;
    sim::Granularity granularity = sim::Granularity::kOp;  // SimOptions::granularity
  };
  void loop();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Request> queued_;
  std::optional<Outcome> done_;
  bool running_ = false, stop_ = false;
  uint64_t next_gen_ = 0;
  Counts counts_;
  std::shared_ptr<const Snapshot> last_good_;  // worker thread only
  sim::Resimulator resim_;                      // worker thread only
  std::shared_ptr<SpareStorage> spares_ = std::make_shared<SpareStorage>();
  std::string phase_;
  double fraction_ = 0;
  std::thread thread_;
};

}  // namespace stretto::gui
