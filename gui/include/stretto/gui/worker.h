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
  /// is the last snapshot `resim` made.
  static Outcome run(const std::string& text, const std::string& file,
                     const std::string& base_dir, uint64_t generation,
                     const sim::SimOptions& opt = {}, const Snapshot* prev = nullptr,
                     sim::Resimulator* resim = nullptr);

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
  std::string phase_;
  double fraction_ = 0;
  std::thread thread_;
};

}  // namespace stretto::gui
