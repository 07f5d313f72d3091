// Point evaluation, the thread pool, Pareto fronts (sweep.h).
#include "stretto/explore/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <string_view>
#include <thread>
#include <type_traits>

#include "stretto/explore/estimate.h"
#include "stretto/plan/estimate.h"
#include "stretto/support/limits.h"
#include "stretto/sim/metrics_json.h"
#include "stretto/sim/pipeline_metrics.h"

namespace stretto::explore {

using compiler::CompiledPlan;
using plan::Json;

namespace {

double ms(engine::SimTime ns) {
  return static_cast<double>(ns) / 1e6;
}
using Clock = std::chrono::steady_clock;
double since_ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
int64_t cap_bytes(double memory_cap_GiB) {
  return static_cast<int64_t>(memory_cap_GiB * static_cast<double>(1LL << 30));
}

}  // namespace

// simulate's JSON fields (sim::metrics_json), with capacity judged against the sweep's memory
// cap instead of each device's memory.
Json result_json(const CompiledPlan& cp, const sim::Result& r, double memory_cap_GiB) {
  Json j = sim::metrics_json(cp, r, sim::pipeline_metrics(cp, r));
  const int64_t cap = cap_bytes(memory_cap_GiB);
  bool over = false;
  for (auto& d : j["devices"]) {
    const bool o = d["peak_device_bytes"].get<int64_t>() > cap;
    d["over_capacity"] = o;
    over = over || o;
  }
  j["over_capacity"] = over;
  j["memory_cap_GiB"] = memory_cap_GiB;
  return j;
}

namespace {

// What an estimator is made for: the plan less what it takes per point (it prices every
// microbatch size and cuts the layers itself, and the point's resolved values give the
// schedule). Removed by JSON pointer, at keys the schema table names.
Json estimate_key(const Json& doc) {
  Json key = doc;
  for (const char* ptr : {"/schedule", "/name", "/comment", "/model/microbatch_size",
                          "/model/pp_regions"})
    plan::erase_at(key, ptr);
  return key;
}

// The point's estimate, from the cached estimator when the point's model, cluster and cost
// model equal those it was made for (a new one otherwise). Empty when the estimate cannot price
// the point.
std::optional<Estimate> estimate_point(const SweepSpec& spec, const Json& doc,
                                       const plan::Plan& plan, const Resolved& resolved,
                                       EvalCache* cache) {
  EvalCache local;
  EvalCache& c = cache ? *cache : local;
  Json key = estimate_key(doc);
  if (!c.estimator || c.key != key) {
    c.estimator.reset();
    auto e = Estimator::make(plan, spec.base_dir);
    if (!e) return std::nullopt;
    c.estimator = std::move(*e);
    c.key = std::move(key);
  }
  auto est = (*c.estimator)(resolved);
  if (!est) return std::nullopt;
  return *est;
}

// A device with the largest memory peak (the first of them), and whether any device's peak
// exceeds `cap` bytes.
// The device with the largest allocated peak (the sweep's peak_memory_bytes), and the one with
// the largest device total (reserved + CUDA context + NCCL buffers), which capacity is judged on
// (docs/semantics.md "Capacity").
struct Peak {
  const sim::DeviceMetrics* worst = nullptr;
  const sim::DeviceMetrics* fullest = nullptr;
  bool over = false;
};
Peak peak_of(const sim::Result& r, int64_t cap) {
  Peak p;
  p.worst = sim::largest_peak(r);
  for (const auto& d : r.devices)
    if (!p.fullest || d.peak_device() > p.fullest->peak_device()) p.fullest = &d;
  p.over = p.fullest && p.fullest->peak_device() > cap;
  return p;
}

// One JSON object written as text, as nlohmann's dump() writes it: keys in sorted order, no
// spaces, non-finite numbers as null; doubles in their shortest round-trip form (which may
// spell one differently from nlohmann, never with another value).
class ObjectText {
 public:
  void number(std::string_view key, double v) {
    open(key);
    if (!std::isfinite(v)) {
      buf_ += "null";
    } else {
      // std::to_chars: the shortest text that reads back as v (libstdc++'s, compiled once;
      // fmt's header formatting printed one digit when built with clang 14 and fmt 9.1, which
      // sweep_fuzz caught). An integral value in fixed notation gets ".0", as nlohmann writes
      // it, so that it reads back as a floating-point number.
      char text[32];
      const auto [end, ec] = std::to_chars(text, text + sizeof text, v);
      const std::string_view t(text, static_cast<size_t>(end - text));
      buf_ += t;
      if (t.find_first_of(".e") == std::string_view::npos) buf_ += ".0";
    }
    close();
  }
  template <typename Int>
    requires std::is_integral_v<Int>
  void integer(std::string_view key, Int v) {
    open(key);
    const fmt::format_int text(v);
    buf_.append(text.data(), text.size());
    close();
  }
  void boolean(std::string_view key, bool v) {
    open(key);
    buf_ += v ? "true" : "false";
    close();
  }
  void string(std::string_view key, std::string_view v) {
    open(key);
    buf_ += Json(v).dump();  // escaped as nlohmann escapes
    close();
  }
  void strings(std::string_view key, const std::vector<std::string>& v) {
    open(key);
    buf_ += Json(v).dump();
    close();
  }
  /// A nested object: `f` writes its fields through a writer like this one.
  template <typename F>
  void object(std::string_view key, F&& f) {
    if (!child_) child_ = std::make_unique<ObjectText>();  // (kept: its buffers stay allocated)
    child_->clear();
    f(*child_);
    open(key);
    child_->write(buf_);
    close();
  }
  void raw(std::string_view key, std::string_view json) {
    open(key);
    buf_ += json;
    close();
  }
  void clear() {
    buf_.clear();
    fields_.clear();
  }
  /// Appends the object to `out`.
  void write(std::string& out) {
    std::sort(fields_.begin(), fields_.end(),
              [](const Field& a, const Field& b) { return a.key < b.key; });
    out += '{';
    for (size_t i = 0; i < fields_.size(); ++i) {
      if (i) out += ',';
      out += '"';
      out += fields_[i].key;  // (plain identifiers: nothing to escape)
      out += "\":";
      out.append(buf_, fields_[i].begin, fields_[i].end - fields_[i].begin);
    }
    out += '}';
  }

 private:
  struct Field {
    std::string_view key;
    size_t begin, end;
  };
  void open(std::string_view key) { fields_.push_back({key, buf_.size(), 0}); }
  void close() { fields_.back().end = buf_.size(); }
  std::string buf_;
  std::vector<Field> fields_;
  std::unique_ptr<ObjectText> child_;
};

}  // namespace

std::string result_json_text(const CompiledPlan& cp, const sim::Result& r,
                             double memory_cap_GiB) {
  return result_json_text(cp, r, sim::pipeline_metrics(cp, r), memory_cap_GiB);
}

std::string result_json_text(const CompiledPlan& cp, const sim::Result& r,
                             const sim::PipelineMetrics& pm, double memory_cap_GiB) {
  // sim::metrics_json's fields (the same field list), with result_json's capacity judgement.
  const int64_t cap = cap_bytes(memory_cap_GiB);
  const Peak peak = peak_of(r, cap);
  ObjectText top;
  sim::step_fields(top, cp, r, pm, peak.over);
  top.number("memory_cap_GiB", memory_cap_GiB);
  std::string devs = "[";
  devs.reserve(512 * r.devices.size());
  ObjectText e;  // (reused: its buffers stay allocated)
  // A device whose fields but its id equal the previous one's (replicas, folded or not) reuses
  // its text around the id: the previous device's text is devs[prev_begin, prev_end), its id
  // at [prev_id, prev_id_end).
  size_t prev_begin = 0, prev_end = 0, prev_id = 0, prev_id_end = 0;
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const sim::DeviceMetrics& d = r.devices[i];
    if (i) devs += ',';
    if (i > 0 && sim::same_fields_but_id(r.devices[i - 1], pm.devices[i - 1], d, pm.devices[i])) {
      const size_t begin = devs.size();
      devs.append(devs, prev_begin, prev_id - prev_begin);
      const size_t id_at = devs.size();
      const fmt::format_int id(d.id);
      devs.append(id.data(), id.size());
      const size_t id_end = devs.size();
      devs.append(devs, prev_id_end, prev_end - prev_id_end);
      prev_begin = begin;
      prev_id = id_at;
      prev_id_end = id_end;
      prev_end = devs.size();
      continue;
    }
    e.clear();
    sim::device_fields(e, d, pm.devices[i], d.peak_device() > cap);
    prev_begin = devs.size();
    e.write(devs);
    prev_end = devs.size();
    prev_id = devs.find("\"id\":", prev_begin) + 5;
    prev_id_end = devs.find_first_of(",}", prev_id);
  }
  devs += ']';
  top.raw("devices", devs);
  std::string out;
  top.write(out);
  return out;
}

PointResult evaluate_point(const SweepSpec& spec, const Point& p, EvalCache* cache) {
  const auto t0 = Clock::now();
  PointResult out;
  out.hash = p.hash;
  out.params = p.params;
  auto invalid = [&](Diagnostics ds) {
    for (auto& d : ds)
      if (d.loc.file.empty()) d.loc.file = fmt::format("point {}", p.hash);
    out.status = "invalid";
    out.diagnostic = render_all(ds);
    while (!out.diagnostic.empty() && out.diagnostic.back() == '\n') out.diagnostic.pop_back();
    out.wall_ms = since_ms(t0);
    return out;
  };
  try {
    // The base resolved once with the point's edits: the estimate uses these values, the
    // simulation the plan parsed from the document they wrote.
    const Resolved* base_values = nullptr;
    if (cache && !spec.hash.empty()) {
      if (cache->spec_hash != spec.hash) {
        cache->spec_hash = spec.hash;
        cache->base_values.reset();
        if (auto d = base_defaults(spec.base)) cache->base_values = std::move(*d);
      }
      if (cache->base_values) base_values = &*cache->base_values;
    }
    auto point = resolve_point(spec.base, p.params, base_values);
    if (!point) return invalid(point.error());
    const Json* doc = &point->doc;
    plan::JsonSource src = plan::JsonSource::from_json(*doc, fmt::format("point {}", p.hash));
    auto plan = plan::parse_plan(src);
    if (!plan) return invalid(plan.error());
    const double cap = spec.memory_cap_GiB > 0 ? spec.memory_cap_GiB
                                               : plan->cluster.device.memory_GiB;
    out.memory_cap_GiB = cap;
    if (auto est = estimate_point(spec, *doc, *plan, point->resolved, cache)) {
      out.estimate_step_ms = est->step_ms;
      out.estimate_memory_bytes = est->peak_memory_bytes;
    }
    compiler::CompileOptions copt;
    copt.class_programs = false;  // only simulated
    auto session = sim::Session::from_plan(std::move(*plan), spec.base_dir, copt);
    if (!session) return invalid(session.error());
    sim::SimOptions so;
    so.fold_replicas = true;
    so.memory_curves = false;
    so.granularity = spec.granularity;
    auto r = session->simulate(so);
    if (!r) return invalid(r.error());
    const sim::PipelineMetrics pm = sim::pipeline_metrics(session->compiled(), *r);
    out.metrics = result_json_text(session->compiled(), *r, pm, cap);
    out.step_time_ms = ms(r->step_time);
    out.bubble_ratio = r->bubble_ratio;
    out.exposed_comm_ms = ms(r->exposed_comm);
    out.exposed_comm_ms_per_device = pm.exposed_comm_ms_per_device;
    out.mfu = r->mfu;
    out.tokens_per_s = r->tokens_per_s;
    out.model_flops = r->model_flops;
    out.events = static_cast<int64_t>(r->events);
    out.sim_wall_ms = r->sim_wall_ms;
    const Peak peak = peak_of(*r, cap_bytes(cap));
    out.peak_memory_bytes = peak.worst ? peak.worst->peak_memory : 0;
    out.peak_memory_time_ms = peak.worst ? ms(peak.worst->peak_time) : 0.0;
    out.devices = static_cast<int>(r->devices.size());
    out.folded = r->folded;
    if (peak.over) {
      out.status = "over_capacity";
      const sim::DeviceMetrics& d = *peak.fullest;
      out.diagnostic = fmt::format(
          "infeasible: device {} peaks at {:.2f} GiB with the allocator's cache, the CUDA context "
          "and NCCL's buffers ({:.2f} GiB allocated), over the {:.2f} GiB cap",
          d.id, static_cast<double>(d.peak_device()) / (1 << 30),
          static_cast<double>(d.peak_memory) / (1 << 30), cap);
    } else {
      out.status = "ok";
    }
  } catch (const std::bad_alloc&) {
    // Not an internal error: the point is larger than the memory this process could get (the
    // estimates before compile and simulation passed it, as they are estimates).
    Diagnostic d;
    d.message = fmt::format(
        "out of memory: the point needs more memory than this process could get (available "
        "now: {})",
        human_bytes(static_cast<double>(plan::available_memory_bytes())));
    d.hint = "fewer devices or microbatches, or fewer sweep jobs (-j) at once";
    return invalid({d});
  } catch (const std::exception& e) {
    Diagnostic d;
    d.message = fmt::format("internal error while evaluating the point: {}", e.what());
    return invalid({d});
  }
  out.wall_ms = since_ms(t0);
  return out;
}

bool in_shard(const std::string& hash, int index, int count) {
  if (count <= 1) return true;
  uint64_t h = std::strtoull(hash.c_str(), nullptr, 16);
  return static_cast<int>(h % static_cast<uint64_t>(count)) == index;
}

Expected<Progress> run_sweep(const SweepSpec& spec, const Grid& grid, Store& store,
                             const SweepOptions& opt) {
  const auto t0 = Clock::now();
  Progress pr;
  if (auto locked = store.lock_for_run(); !locked) return fail(std::move(locked).error());
  auto stored = store.hashes();
  if (!stored) return fail(std::move(stored).error());
  const std::set<std::string>& have = *stored;
  std::vector<const Point*> todo;
  for (const auto& p : grid.points) {
    if (!in_shard(p.hash, opt.shard_index, opt.shard_count)) continue;
    ++pr.total;
    if (have.count(p.hash)) {
      ++pr.resumed;
      continue;
    }
    todo.push_back(&p);
  }
  // Count the statuses of what the store already has for this shard.
  if (pr.resumed > 0) {
    auto rows = store.rows();
    if (!rows) return fail(std::move(rows).error());
    for (const auto& r : *rows) {
      if (!in_shard(r.hash, opt.shard_index, opt.shard_count)) continue;
      if (r.status == "ok") ++pr.ok;
      else if (r.status == "over_capacity") ++pr.over_capacity;
      else ++pr.invalid;
    }
  }
  pr.done = pr.resumed;
  if (opt.limit > 0 && todo.size() > opt.limit) todo.resize(opt.limit);

  std::mutex mu;
  std::condition_variable cv;
  std::deque<PointResult> finished;
  std::atomic<size_t> next{0};
  const int jobs = std::max(1, std::min<int>(opt.jobs, static_cast<int>(todo.size())));
  std::vector<std::thread> pool;
  std::atomic<int> running{jobs};
  for (int w = 0; w < jobs; ++w)
    pool.emplace_back([&] {
      EvalCache cache;
      for (;;) {
        if (opt.stop && opt.stop->load()) break;
        const size_t i = next.fetch_add(1);
        if (i >= todo.size()) break;
        PointResult r = evaluate_point(spec, *todo[i], &cache);
        std::lock_guard lk(mu);
        finished.push_back(std::move(r));
        cv.notify_one();
      }
      std::lock_guard lk(mu);
      --running;
      cv.notify_one();
    });
  // This thread owns the database connection: it commits each result as it arrives.
  Diagnostics db_error;
  size_t fresh = 0;
  auto last_report = Clock::now() - std::chrono::seconds(1);
  for (;;) {
    std::deque<PointResult> batch;
    bool all_done = false;
    {
      std::unique_lock lk(mu);
      cv.wait_for(lk, std::chrono::milliseconds(200),
                  [&] { return !finished.empty() || running.load() == 0; });
      batch.swap(finished);
      all_done = running.load() == 0 && batch.empty();
    }
    for (const auto& r : batch) {
      if (db_error.empty()) {
        auto ok = store.put(r);
        if (!ok) {
          db_error = ok.error();
          if (opt.stop) opt.stop->store(true);
          next.store(todo.size());
        }
      }
      ++pr.done;
      ++fresh;
      if (r.status == "ok") ++pr.ok;
      else if (r.status == "over_capacity") ++pr.over_capacity;
      else ++pr.invalid;
    }
    pr.elapsed_s = since_ms(t0) / 1e3;
    pr.rate = pr.elapsed_s > 0 ? static_cast<double>(fresh) / pr.elapsed_s : 0;
    pr.eta_s = pr.rate > 0 ? static_cast<double>(pr.total - pr.done) / pr.rate : 0;
    if (all_done) break;
    if (opt.progress && Clock::now() - last_report >= std::chrono::milliseconds(200)) {
      opt.progress(pr);
      last_report = Clock::now();
    }
  }
  for (auto& t : pool) t.join();
  if (opt.progress) opt.progress(pr);
  if (!db_error.empty()) return fail(std::move(db_error));
  return pr;
}

std::vector<size_t> top_n(const std::vector<PointResult>& rows, size_t n) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].feasible()) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const auto &x = rows[a], &y = rows[b];
    if (x.step_time_ms != y.step_time_ms) return x.step_time_ms < y.step_time_ms;
    if (x.peak_memory_bytes != y.peak_memory_bytes) return x.peak_memory_bytes < y.peak_memory_bytes;
    return x.hash < y.hash;
  });
  if (n > 0 && idx.size() > n) idx.resize(n);
  return idx;
}

Json point_json(const PointResult& r) {
  Json j = {{"hash", r.hash}, {"params", r.params}, {"status", r.status}, {"wall_ms", r.wall_ms}};
  if (!r.diagnostic.empty()) j["diagnostic"] = r.diagnostic;
  if (r.simulated()) {
    j["metrics"] = r.metrics.empty() ? Json() : Json::parse(r.metrics, nullptr, false);
    j["estimate"] = {{"step_time_ms", r.estimate_step_ms},
                     {"peak_memory_bytes", r.estimate_memory_bytes}};
  }
  return j;
}

std::vector<size_t> pareto_front(const std::vector<PointResult>& rows) {
  // Sorted by (time, memory): a point is on the front iff its memory is below every faster
  // point's (ties in time: the smaller memory comes first and dominates the rest).
  std::vector<size_t> front;
  int64_t best_mem = INT64_MAX;
  for (size_t i : top_n(rows, 0)) {
    if (rows[i].peak_memory_bytes < best_mem) {
      front.push_back(i);
      best_mem = rows[i].peak_memory_bytes;
    }
  }
  return front;
}

}  // namespace stretto::explore
