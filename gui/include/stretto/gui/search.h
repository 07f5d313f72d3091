#pragma once
// The timeline search, off the UI thread. The name index of a result (search_text of every DAG
// node: about 0.5 s at 1.2 M ops) and the matching of a query against it run on a thread of
// their own; the UI polls take() once per frame and says "indexing..." meanwhile.
//
// Threads: a job's inputs (an immutable Snapshot and the query) are fixed before its thread
// starts, and its output is read by the UI thread only after the job says it is done
// (release/acquire). A newer request cancels the running job (checked every few thousand
// nodes) and joins it before starting the next, so at most one job runs and the index (kept
// for the snapshot it was built from) passes from one job to the next, never shared by two
// threads at once.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stretto/gui/worker.h"

namespace stretto::gui {

/// What a query matches in one result.
struct SearchMatches {
  std::string query;
  std::weak_ptr<const Snapshot> snap;
  std::vector<uint32_t> tasks;                     // matching drawn ops, by start time
  std::vector<std::vector<uint32_t>> lane_prefix;  // per lane: matching ops among [0, i)
};

/// The lower-cased name of every DAG node of one result (search_text).
struct SearchIndex {
  std::weak_ptr<const Snapshot> snap;
  std::vector<std::string> node_text;
};

/// Matches `query` in `snap`, first (re)building `index` when it is not that result's.
/// `indexing` is set while the index is built. Returns nullopt once `cancel` is set.
std::optional<SearchMatches> match_search(const std::shared_ptr<const Snapshot>& snap,
                                          const std::string& query, SearchIndex& index,
                                          const std::atomic<bool>& cancel,
                                          std::atomic<bool>* indexing = nullptr);

class SearchWorker {
 public:
  SearchWorker() = default;
  ~SearchWorker();
  SearchWorker(const SearchWorker&) = delete;
  SearchWorker& operator=(const SearchWorker&) = delete;

  /// Starts matching `query` in `snap`, cancelling the job that runs.
  void start(std::shared_ptr<const Snapshot> snap, std::string query);
  /// The finished job's matches, once.
  std::optional<SearchMatches> take();
  /// A job runs (or finished and was not taken).
  bool busy() const;
  /// The running job is building the name index of a new result.
  bool indexing() const;
  /// Blocks until the job is done (scripts and tests; the UI never calls it).
  void wait_idle();

 private:
  struct Job {
    std::shared_ptr<const Snapshot> snap;
    std::string query;
    std::atomic<bool> cancel{false}, done{false}, indexing{false};
    std::optional<SearchMatches> out;  // written before `done`
  };
  void stop();
  std::shared_ptr<Job> job_;
  SearchIndex index_;  // the running job's thread's while it runs; between jobs, nobody's
  std::thread thread_;
};

}  // namespace stretto::gui
