// The timeline search off the UI thread (search.h).
#include "stretto/gui/search.h"

#include <algorithm>

namespace stretto::gui {

namespace {
constexpr uint32_t kCancelEvery = 4096;  // nodes or tasks between looks at `cancel`
}  // namespace

std::optional<SearchMatches> match_search(const std::shared_ptr<const Snapshot>& snap,
                                          const std::string& query, SearchIndex& index,
                                          const std::atomic<bool>& cancel,
                                          std::atomic<bool>* indexing) {
  const auto& cp = snap->session->compiled();
  const auto& r = snap->result;
  const uint32_t nodes = static_cast<uint32_t>(cp.dag.nodes.size());
  if (index.snap.lock() != snap || index.node_text.size() != nodes) {
    if (indexing) indexing->store(true, std::memory_order_relaxed);
    index.snap.reset();
    index.node_text.assign(nodes, std::string());
    for (uint32_t n = 0; n < nodes; ++n) {
      if (n % kCancelEvery == 0 && cancel.load(std::memory_order_relaxed)) return std::nullopt;
      index.node_text[n] = search_text(cp, n);
    }
    index.snap = snap;
    if (indexing) indexing->store(false, std::memory_order_relaxed);
  }
  const auto words = search_words(query);
  std::vector<char> node_match(nodes);
  for (uint32_t n = 0; n < nodes; ++n) {
    if (n % kCancelEvery == 0 && cancel.load(std::memory_order_relaxed)) return std::nullopt;
    node_match[n] = search_match(index.node_text[n], words);
  }
  auto matches = [&](uint32_t task) {
    const uint32_t n = r.node_of(task);
    return n < node_match.size() && node_match[n];
  };
  SearchMatches m;
  m.query = query;
  m.snap = snap;
  const Timeline& T = snap->timeline;
  m.lane_prefix.assign(T.lanes.size(), {});
  for (size_t li = 0; li < T.lanes.size(); ++li) {
    if (cancel.load(std::memory_order_relaxed)) return std::nullopt;
    const auto& ops = T.lanes[li].ops;
    auto& p = m.lane_prefix[li];
    p.resize(ops.size() + 1);
    p[0] = 0;
    for (size_t i = 0; i < ops.size(); ++i) p[i + 1] = p[i] + (matches(ops[i].task) ? 1 : 0);
  }
  for (uint32_t t = 0; t < T.where.size(); ++t)
    if (T.where[t].first != UINT32_MAX && matches(t)) m.tasks.push_back(t);
  std::stable_sort(m.tasks.begin(), m.tasks.end(),
                   [&](uint32_t a, uint32_t b) { return r.timing[a].start < r.timing[b].start; });
  return m;
}

SearchWorker::~SearchWorker() {
  stop();
}

void SearchWorker::stop() {
  if (job_) job_->cancel.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void SearchWorker::start(std::shared_ptr<const Snapshot> snap, std::string query) {
  stop();
  auto job = std::make_shared<Job>();
  job->snap = std::move(snap);
  job->query = std::move(query);
  job_ = job;
  thread_ = std::thread([this, job] {
    job->out = match_search(job->snap, job->query, index_, job->cancel, &job->indexing);
    job->done.store(true, std::memory_order_release);
  });
}

std::optional<SearchMatches> SearchWorker::take() {
  if (!job_ || !job_->done.load(std::memory_order_acquire)) return std::nullopt;
  if (thread_.joinable()) thread_.join();  // it has finished: returns at once
  std::optional<SearchMatches> out = std::move(job_->out);
  job_.reset();
  return out;
}

bool SearchWorker::busy() const {
  return job_ != nullptr;
}

bool SearchWorker::indexing() const {
  return job_ && job_->indexing.load(std::memory_order_relaxed);
}

void SearchWorker::wait_idle() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace stretto::gui
