#include "stretto/sim/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>

#include "event_heap.h"
#include "stretto/schedules/diag.h"
#include "stretto/sim/maxmin.h"

namespace stretto::sim {

namespace {

using detail::Event;

// Event kinds (low bits of Event::key).
enum : uint32_t {
  kJobEnd = 0,      // a rate-based job (compute task or comm flow) completes; id = job, versioned
  kFixedEnd = 1,    // a fixed-duration comm task ends; id = task
  kLatencyEnd = 2,  // a comm task with links finished its latency; its bytes start; id = task
  kIssue = 3,       // a ready task waited for its host thread to issue it; id = task
};

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr SimTime kNever = std::numeric_limits<SimTime>::max();
constexpr size_t kMaxErrors = 50;
constexpr size_t kMaxBlocked = 8;
constexpr double kMaxNs = 4.0e18;  // beyond this a duration is "never" (int64 safety)

/// Whole ns needed to do `x` ns of work, rounded up; float noise just above an integer (up to
/// 1e-6 ns + 1e-13 relative) rounds down to it, so exact results stay exact.
SimTime ceil_ns(double x) {
  if (!(x > 0)) return 0;
  if (x >= kMaxNs) return static_cast<SimTime>(kMaxNs);
  const double y = std::ceil(x - (1e-6 + x * 1e-13));
  return y > 0 ? static_cast<SimTime>(y) : 0;
}

class Errors {
 public:
  explicit Errors(std::vector<std::string>* out) : out_(out) {}
  /// `make` builds the message; called only while there is room, so a program with millions of
  /// errors stays cheap to validate.
  template <class MakeMessage>
  void add(MakeMessage&& make) {
    ++count_;
    if (out_ && out_->size() < kMaxErrors) out_->push_back(make());
  }
  size_t count() const { return count_; }
  void finish() {
    if (out_ && count_ > out_->size()) {
      out_->push_back("... and " + std::to_string(count_ - out_->size()) + " more errors");
    }
  }

 private:
  std::vector<std::string>* out_;
  size_t count_ = 0;
};

std::string task_str(size_t t) {
  return "task " + std::to_string(t);
}

}  // namespace

struct Engine::State {
  // ---- the program and its derived, static structure (built by prepare) ----
  const Program* p = nullptr;
  uint32_t num_streams = 0;
  std::vector<SimTime> issue;        // per task: latest issue time over its devices
  std::vector<uint32_t> succ_begin;  // per task + 1: successors CSR
  std::vector<uint32_t> succ;
  std::vector<uint32_t> slot_begin;    // per (device, stream) slot + 1: stream FIFO CSR
  std::vector<uint32_t> stream_tasks;  // tasks of each slot, in dispatch order
  std::vector<double> link_caps;

  // ---- scratch of prepare ----
  std::vector<uint32_t> stamp, stamp2, list_head;            // per task
  std::vector<uint32_t> slot_stamp;                          // per slot
  std::vector<uint32_t> entry_task, entry_slot, entry_next;  // per participant entry
  std::vector<uint32_t> dev_begin, cursor;

  // ---- dynamic state ----
  struct Job {        // a running task whose completion depends on a rate
    double rem = 0;   // work left at t_upd (compute: ns at full capacity; flow: bytes)
    double rate = 0;  // work per ns since t_upd
    SimTime t_upd = 0;
    SimTime t_end = kNever;  // time of the pending, valid completion event
    uint32_t task = kNone;
    uint32_t version = 0;  // bumped on every re-time; stale completion events carry an older one
    uint32_t next = kNone, prev = kNone;  // compute: the device's list of running compute jobs
    uint32_t device = kNone;              // compute only
    uint32_t flow = kNone;                // comm flow only
    bool mem_bound = false;
  };
  struct Device {
    uint32_t comm_active = 0;  // comm tasks in their latency or bytes phase (per participation)
    uint32_t num_compute = 0;
    uint32_t first_job = kNone;
    bool dirty = false;
    double sm_factor = 1, hbm_factor = 1;  // capacity multipliers while comm_active > 0
  };
  std::vector<uint32_t> pending;  // per task: unmet conditions (deps + stream heads)
  std::vector<uint32_t> head;     // per slot: index into stream_tasks of the current head
  std::vector<Job> jobs;
  std::vector<uint32_t> free_jobs;
  std::vector<Device> devs;
  std::vector<uint32_t> dirty_devs;
  std::vector<uint32_t> ready;
  std::vector<uint32_t> flow_job;
  MaxMin mm;
  detail::EventHeap<2> heap;  // binary: measured a bit faster than 4-ary here
  TaskTiming* timing = nullptr;
  SimTime now = 0;
  SimTime makespan = 0;
  uint64_t seq = 0;
  uint64_t events = 0;
  uint64_t stale = 0;
  uint64_t max_queue = 0;
  size_t finished = 0;

  bool prepare(const Program& prog, std::vector<std::string>* errors);
  void simulate(RunResult& out);

  // event loop pieces
  void push(SimTime t, uint32_t kind, uint32_t id, uint32_t version) {
    heap.push(Event{t, (seq++ << detail::kKindBits) | kind, id, version});
    if (heap.size() > max_queue) max_queue = heap.size();
  }
  void arrive(uint32_t t) {
    if (--pending[t] == 0) ready.push_back(t);
  }
  void mark_dirty(uint32_t d) {
    if (!devs[d].dirty) {
      devs[d].dirty = true;
      dirty_devs.push_back(d);
    }
  }
  uint32_t alloc_job();
  void free_job(uint32_t j);
  void drain_ready();
  void start_task(uint32_t t);
  void start_flow(uint32_t t);
  void end_task(uint32_t t, bool release_comm);
  void finish_job(uint32_t j);
  void acquire_comm(const Task& k);
  void release_comm(const Task& k);
  void flush();
  void retime(uint32_t j, double rate);
  double alone_ns(const Task& k) const;
};

// ------------------------------------------------------------------------------------------
// prepare: validation and derived structure in one O(size) pass
// ------------------------------------------------------------------------------------------

bool Engine::State::prepare(const Program& prog, std::vector<std::string>* errors) {
  p = &prog;
  Errors err(errors);
  const size_t n = prog.tasks.size();
  const size_t nd = prog.devices.size();
  const size_t ns = prog.stream_names.size();
  const size_t nl = prog.links.size();
  num_streams = static_cast<uint32_t>(ns);

  if (n >= kNone || nd >= kNone || prog.participants.size() >= kNone || prog.deps.size() >= kNone ||
      nd * ns >= kNone) {
    err.add([&] { return std::string("program too large for 32-bit ids"); });
    err.finish();
    return false;
  }

  // ---- phase 1: devices, links, tasks in isolation ----
  for (size_t d = 0; d < nd; ++d) {
    const DeviceProgram& dp = prog.devices[d];
    auto who = [d] { return "device " + std::to_string(d); };  // only built on error
    if (dp.dispatch_ns < 0) err.add([&] { return std::string(who() + ": negative dispatch_ns"); });
    if (!(dp.comm_sm_share >= 0 && dp.comm_sm_share <= 1)) {
      err.add([&] { return std::string(who() + ": comm_sm_share outside [0, 1]"); });
    }
    if (!(dp.comm_hbm_share >= 0 && dp.comm_hbm_share <= 1)) {
      err.add([&] { return std::string(who() + ": comm_hbm_share outside [0, 1]"); });
    }
  }
  for (size_t l = 0; l < nl; ++l) {
    const double c = prog.links[l].capacity;
    if (!(c > 0) || !std::isfinite(c)) {
      err.add([&] {
        return std::string("link " + std::to_string(l) + " (" + prog.links[l].name +
                           "): capacity must be positive and finite");
      });
    }
  }
  slot_stamp.assign(nd * ns, 0);
  size_t num_entries = 0;
  for (size_t t = 0; t < n; ++t) {
    const Task& k = prog.tasks[t];
    auto who = [t] { return task_str(t); };  // only built on error
    if (k.kind != TaskKind::kCompute && k.kind != TaskKind::kComm && k.kind != TaskKind::kBarrier) {
      err.add([&] { return std::string(who() + ": unknown kind"); });
      continue;
    }
    auto bad_range = [](uint64_t begin, uint64_t count, size_t size) {
      return begin + count > size;
    };
    if (bad_range(k.part_begin, k.part_count, prog.participants.size())) {
      err.add([&] { return std::string(who() + ": participant range out of bounds"); });
      continue;
    }
    if (bad_range(k.dep_begin, k.dep_count, prog.deps.size())) {
      err.add([&] { return std::string(who() + ": dependency range out of bounds"); });
      continue;
    }
    if (bad_range(k.link_begin, k.link_count, prog.task_links.size())) {
      err.add([&] { return std::string(who() + ": link range out of bounds"); });
      continue;
    }
    for (uint32_t i = 0; i < k.dep_count; ++i) {
      const uint32_t d = prog.deps[k.dep_begin + i];
      if (d >= t) {
        err.add([&] {
          return std::string(who() + " depends on task " + std::to_string(d) +
                             ", which is not listed before it");
        });
      }
    }
    for (uint32_t i = 0; i < k.link_count; ++i) {
      const uint32_t l = prog.task_links[k.link_begin + i];
      if (l >= nl)
        err.add([&] { return std::string(who() + ": unknown link " + std::to_string(l)); });
    }
    for (uint32_t i = 0; i < k.part_count; ++i) {
      const Participant& pa = prog.participants[k.part_begin + i];
      if (pa.device >= nd) {
        err.add(
            [&] { return std::string(who() + ": unknown device " + std::to_string(pa.device)); });
        continue;
      }
      if (pa.stream >= ns) {
        err.add(
            [&] { return std::string(who() + ": unknown stream " + std::to_string(pa.stream)); });
        continue;
      }
      const size_t slot = size_t{pa.device} * ns + pa.stream;
      if (slot_stamp[slot] == t + 1) {
        err.add([&] {
          return std::string(who() + ": device " + std::to_string(pa.device) + " stream " +
                             std::to_string(pa.stream) + " listed twice");
        });
      }
      slot_stamp[slot] = static_cast<uint32_t>(t + 1);
    }
    num_entries += k.part_count;
    if (k.work < 0) err.add([&] { return std::string(who() + ": negative work"); });
    switch (k.kind) {
      case TaskKind::kCompute:
        if (k.part_count != 1)
          err.add([&] {
            return std::string(who() + ": a compute task needs exactly one participant");
          });
        if (k.link_count != 0)
          err.add([&] { return std::string(who() + ": a compute task cannot use links"); });
        break;
      case TaskKind::kComm:
        if (k.latency_ns < 0) err.add([&] { return std::string(who() + ": negative latency"); });
        if (!(k.rate_cap >= 0) || !std::isfinite(k.rate_cap)) {
          err.add([&] { return std::string(who() + ": rate_cap must be finite and >= 0"); });
        }
        break;
      case TaskKind::kBarrier:
        if (k.part_count != 0 || k.link_count != 0) {
          err.add(
              [&] { return std::string(who() + ": a barrier has no participants and no links"); });
        }
        break;
    }
  }
  if (err.count() > 0) {
    err.finish();
    return false;
  }

  // ---- phase 2: dispatch lists <-> participants; stream FIFOs; issue times ----
  // Participant entries bucketed by device (counting sort), then each device's dispatch list
  // orders its entries into the stream FIFOs.
  dev_begin.assign(nd + 1, 0);
  slot_begin.assign(nd * ns + 1, 0);
  for (size_t t = 0; t < n; ++t) {
    const Task& k = prog.tasks[t];
    for (uint32_t i = 0; i < k.part_count; ++i) {
      const Participant& pa = prog.participants[k.part_begin + i];
      ++dev_begin[pa.device + 1];
      ++slot_begin[size_t{pa.device} * ns + pa.stream + 1];
    }
  }
  for (size_t d = 0; d < nd; ++d) dev_begin[d + 1] += dev_begin[d];
  for (size_t s = 0; s < nd * ns; ++s) slot_begin[s + 1] += slot_begin[s];
  entry_task.resize(num_entries);
  entry_slot.resize(num_entries);
  entry_next.resize(num_entries);
  cursor.assign(dev_begin.begin(), dev_begin.end() - 1);
  for (size_t t = 0; t < n; ++t) {
    const Task& k = prog.tasks[t];
    for (uint32_t i = 0; i < k.part_count; ++i) {
      const Participant& pa = prog.participants[k.part_begin + i];
      const uint32_t e = cursor[pa.device]++;
      entry_task[e] = static_cast<uint32_t>(t);
      entry_slot[e] = pa.device * static_cast<uint32_t>(ns) + pa.stream;
    }
  }
  stream_tasks.resize(num_entries);
  cursor.assign(slot_begin.begin(), slot_begin.end() - 1);
  issue.assign(n, 0);
  stamp.assign(n, 0);
  stamp2.assign(n, 0);
  list_head.resize(n);
  for (size_t d = 0; d < nd; ++d) {
    const DeviceProgram& dp = prog.devices[d];
    const uint32_t mark = static_cast<uint32_t>(d + 1);
    auto who = [d] { return "device " + std::to_string(d); };  // only built on error
    for (uint32_t t : dp.dispatch) {
      if (t >= n) {
        err.add([&] {
          return std::string(who() + ": dispatch list names unknown task " + std::to_string(t));
        });
        continue;
      }
      if (stamp[t] == mark) {
        err.add(
            [&] { return std::string(who() + ": dispatch list names " + task_str(t) + " twice"); });
        continue;
      }
      stamp[t] = mark;
      list_head[t] = kNone;
    }
    for (uint32_t e = dev_begin[d]; e < dev_begin[d + 1]; ++e) {
      const uint32_t t = entry_task[e];
      if (stamp[t] != mark) {
        err.add([&] {
          return std::string(task_str(t) + " runs on " + who() +
                             " but is missing from its dispatch list");
        });
        continue;
      }
      entry_next[e] = list_head[t];
      list_head[t] = e;
    }
    for (size_t k = 0; k < dp.dispatch.size(); ++k) {
      const uint32_t t = dp.dispatch[k];
      if (t >= n || stamp2[t] == mark) continue;
      stamp2[t] = mark;
      uint32_t e = list_head[t];
      if (e == kNone) {
        err.add([&] {
          return std::string(who() + ": dispatch list names " + task_str(t) +
                             ", which has no participant on it");
        });
        continue;
      }
      issue[t] = std::max(issue[t], static_cast<SimTime>(k + 1) * dp.dispatch_ns);
      for (; e != kNone; e = entry_next[e]) stream_tasks[cursor[entry_slot[e]]++] = t;
    }
  }
  err.finish();
  if (err.count() > 0) return false;

  // ---- phase 3: successors, initial counters ----
  succ_begin.assign(n + 1, 0);
  size_t num_succ = 0;
  for (size_t t = 0; t < n; ++t) {
    const Task& k = prog.tasks[t];
    for (uint32_t i = 0; i < k.dep_count; ++i) ++succ_begin[prog.deps[k.dep_begin + i] + 1];
    num_succ += k.dep_count;
  }
  for (size_t t = 0; t < n; ++t) succ_begin[t + 1] += succ_begin[t];
  succ.resize(num_succ);
  cursor.assign(succ_begin.begin(), succ_begin.end() - 1);
  for (size_t t = 0; t < n; ++t) {
    const Task& k = prog.tasks[t];
    for (uint32_t i = 0; i < k.dep_count; ++i) {
      succ[cursor[prog.deps[k.dep_begin + i]]++] = static_cast<uint32_t>(t);
    }
  }
  link_caps.resize(nl);
  for (size_t l = 0; l < nl; ++l) link_caps[l] = prog.links[l].capacity;
  return true;
}

std::vector<std::string> validate(const Program& program) {
  std::vector<std::string> errors;
  Engine::State scratch;
  scratch.prepare(program, &errors);
  return errors;
}

// ------------------------------------------------------------------------------------------
// simulation
// ------------------------------------------------------------------------------------------

uint32_t Engine::State::alloc_job() {
  if (!free_jobs.empty()) {
    const uint32_t j = free_jobs.back();
    free_jobs.pop_back();
    return j;
  }
  jobs.emplace_back();
  return static_cast<uint32_t>(jobs.size() - 1);
}

void Engine::State::free_job(uint32_t j) {
  ++jobs[j].version;  // no event of the previous occupant can match again
  jobs[j].task = kNone;
  free_jobs.push_back(j);
}

void Engine::State::acquire_comm(const Task& k) {
  for (uint32_t i = 0; i < k.part_count; ++i) {
    const uint32_t d = p->participants[k.part_begin + i].device;
    if (devs[d].comm_active++ == 0 && devs[d].num_compute > 0) mark_dirty(d);
  }
}

void Engine::State::release_comm(const Task& k) {
  for (uint32_t i = 0; i < k.part_count; ++i) {
    const uint32_t d = p->participants[k.part_begin + i].device;
    STRETTO_ASSERT(devs[d].comm_active > 0, "comm count underflow");
    if (--devs[d].comm_active == 0 && devs[d].num_compute > 0) mark_dirty(d);
  }
}

void Engine::State::drain_ready() {
  // start_task may complete zero-duration tasks inline, which appends to `ready`.
  for (size_t i = 0; i < ready.size(); ++i) {
    const uint32_t t = ready[i];
    if (issue[t] > now) {
      push(issue[t], kIssue, t, 0);
    } else {
      start_task(t);
    }
  }
  ready.clear();
}

void Engine::State::start_task(uint32_t t) {
  const Task& k = p->tasks[t];
  timing[t].start = now;
  switch (k.kind) {
    case TaskKind::kBarrier:
      ++events;
      end_task(t, false);
      return;
    case TaskKind::kCompute: {
      if (k.work == 0) {
        ++events;
        end_task(t, false);
        return;
      }
      const uint32_t d = p->participants[k.part_begin].device;
      const uint32_t j = alloc_job();
      Job& job = jobs[j];
      job.rem = static_cast<double>(k.work);
      job.rate = 0;  // the flush at the end of this instant sets the rate and the completion
      job.t_upd = now;
      job.t_end = kNever;
      job.task = t;
      job.device = d;
      job.flow = kNone;
      job.mem_bound = k.mem_bound;
      Device& dev = devs[d];
      job.prev = kNone;
      job.next = dev.first_job;
      if (dev.first_job != kNone) jobs[dev.first_job].prev = j;
      dev.first_job = j;
      ++dev.num_compute;
      mark_dirty(d);
      return;
    }
    case TaskKind::kComm: {
      const bool flow = k.link_count > 0 && k.work > 0;
      SimTime dur = k.latency_ns;
      if (!flow && k.work > 0 && k.rate_cap > 0) {
        dur += ceil_ns(static_cast<double>(k.work) / k.rate_cap);
      }
      if (!flow && dur == 0) {
        ++events;
        end_task(t, false);
        return;
      }
      acquire_comm(k);
      if (!flow) {
        push(now + dur, kFixedEnd, t, 0);
      } else if (k.latency_ns > 0) {
        push(now + k.latency_ns, kLatencyEnd, t, 0);
      } else {
        start_flow(t);
      }
      return;
    }
  }
}

void Engine::State::start_flow(uint32_t t) {
  const Task& k = p->tasks[t];
  const uint32_t j = alloc_job();
  Job& job = jobs[j];
  job.rem = static_cast<double>(k.work);
  job.rate = 0;
  job.t_upd = now;
  job.t_end = kNever;
  job.task = t;
  job.device = kNone;
  job.mem_bound = false;
  job.prev = job.next = kNone;
  const std::span<const uint32_t> links(p->task_links.data() + k.link_begin, k.link_count);
  const MaxMin::FlowId f = mm.add_flow(links, k.rate_cap);
  if (f >= flow_job.size()) flow_job.resize(size_t{f} + 1, kNone);
  flow_job[f] = j;
  job.flow = f;
}

double Engine::State::alone_ns(const Task& k) const {
  switch (k.kind) {
    case TaskKind::kCompute:
      return static_cast<double>(k.work);
    case TaskKind::kComm: {
      SimTime d = k.latency_ns;
      if (k.work > 0) {
        double rate = k.rate_cap > 0 ? k.rate_cap : std::numeric_limits<double>::infinity();
        for (uint32_t i = 0; i < k.link_count; ++i) {
          rate = std::min(rate, link_caps[p->task_links[k.link_begin + i]]);
        }
        if (std::isfinite(rate)) d += ceil_ns(static_cast<double>(k.work) / rate);
      }
      return static_cast<double>(d);
    }
    case TaskKind::kBarrier:
      break;
  }
  return 0;
}

void Engine::State::end_task(uint32_t t, bool release) {
  const Task& k = p->tasks[t];
  TaskTiming& tm = timing[t];
  tm.end = now;
  if (now > makespan) makespan = now;
  ++finished;
  if (tm.end > tm.start) {
    const double alone = alone_ns(k);
    if (alone > 0) tm.slowdown = static_cast<float>(static_cast<double>(tm.end - tm.start) / alone);
  }
  if (release) release_comm(k);
  for (uint32_t i = 0; i < k.part_count; ++i) {
    const Participant& pa = p->participants[k.part_begin + i];
    const uint32_t slot = pa.device * num_streams + pa.stream;
    const uint32_t h = ++head[slot];
    if (h < slot_begin[slot + 1]) arrive(stream_tasks[h]);
  }
  for (uint32_t i = succ_begin[t]; i < succ_begin[t + 1]; ++i) arrive(succ[i]);
}

void Engine::State::finish_job(uint32_t j) {
  Job& job = jobs[j];
  const uint32_t t = job.task;
  if (job.flow == kNone) {
    Device& dev = devs[job.device];
    if (job.prev != kNone) {
      jobs[job.prev].next = job.next;
    } else {
      dev.first_job = job.next;
    }
    if (job.next != kNone) jobs[job.next].prev = job.prev;
    if (--dev.num_compute > 0) mark_dirty(job.device);
    free_job(j);
    end_task(t, false);
  } else {
    mm.remove_flow(job.flow);
    flow_job[job.flow] = kNone;
    free_job(j);
    end_task(t, true);
  }
}

void Engine::State::retime(uint32_t j, double rate) {
  Job& job = jobs[j];
  if (job.rate == rate) return;
  if (job.rate > 0) {
    job.rem -= job.rate * static_cast<double>(now - job.t_upd);
    if (job.rem < 0) job.rem = 0;
  }
  job.t_upd = now;
  job.rate = rate;
  const SimTime end = rate > 0 ? now + ceil_ns(job.rem / rate) : kNever;
  if (end == job.t_end) return;  // the pending completion event is still exact
  job.t_end = end;
  ++job.version;
  if (end != kNever) push(end, kJobEnd, j, job.version);
}

// Applies all rate changes of the current instant: device capacity shares, then max-min flows.
void Engine::State::flush() {
  for (uint32_t d : dirty_devs) {
    Device& dev = devs[d];
    dev.dirty = false;
    if (dev.num_compute == 0) continue;
    const double n = static_cast<double>(dev.num_compute);
    const bool comm = dev.comm_active > 0;
    const double r_sm = (comm ? dev.sm_factor : 1.0) / n;
    const double r_hbm = (comm ? dev.hbm_factor : 1.0) / n;
    for (uint32_t j = dev.first_job; j != kNone; j = jobs[j].next) {
      retime(j, jobs[j].mem_bound ? r_hbm : r_sm);
    }
  }
  dirty_devs.clear();
  if (mm.dirty()) {
    for (MaxMin::FlowId f : mm.solve()) retime(flow_job[f], mm.rate(f));
  }
}

void Engine::State::simulate(RunResult& out) {
  const Program& prog = *p;
  const size_t n = prog.tasks.size();
  const size_t nd = prog.devices.size();
  out.timing.assign(n, TaskTiming{});
  out.makespan = 0;
  out.stalled = false;
  out.stall.blocked_tasks.clear();
  timing = out.timing.data();

  pending.resize(n);
  for (size_t t = 0; t < n; ++t) {
    pending[t] = prog.tasks[t].dep_count + prog.tasks[t].part_count;
  }
  const size_t num_slots = slot_begin.size() - 1;
  head.assign(slot_begin.begin(), slot_begin.end() - 1);
  for (size_t s = 0; s < num_slots; ++s) {
    if (slot_begin[s] < slot_begin[s + 1]) --pending[stream_tasks[slot_begin[s]]];
  }
  devs.assign(nd, Device{});
  for (size_t d = 0; d < nd; ++d) {
    devs[d].sm_factor = 1.0 - prog.devices[d].comm_sm_share;
    devs[d].hbm_factor = 1.0 - prog.devices[d].comm_hbm_share;
  }
  dirty_devs.clear();
  dirty_devs.reserve(nd);
  jobs.clear();
  free_jobs.clear();
  jobs.reserve(num_slots + 64);
  flow_job.clear();
  mm.reset(link_caps);
  heap.clear();
  heap.reserve(num_slots + 64);
  ready.clear();
  ready.reserve(n);
  now = 0;
  makespan = 0;
  seq = 0;
  events = 0;
  stale = 0;
  max_queue = 0;
  finished = 0;

  for (size_t t = 0; t < n; ++t) {
    if (pending[t] == 0) ready.push_back(static_cast<uint32_t>(t));
  }
  drain_ready();

  for (;;) {
    if (!heap.empty() && heap.top().time == now) {
      const Event e = heap.pop();
      switch (static_cast<uint32_t>(e.key & ((1u << detail::kKindBits) - 1))) {
        case kJobEnd:
          if (jobs[e.id].version != e.version) {
            ++stale;
            continue;
          }
          ++events;
          finish_job(e.id);
          break;
        case kFixedEnd:
          ++events;
          end_task(e.id, true);
          break;
        case kLatencyEnd:
          ++events;
          start_flow(e.id);
          break;
        case kIssue:
          ++events;
          start_task(e.id);
          break;
      }
      drain_ready();
      continue;
    }
    if (!dirty_devs.empty() || mm.dirty()) {
      flush();
      continue;
    }
    if (heap.empty()) break;
    STRETTO_ASSERT(heap.top().time > now, "event in the past");
    now = heap.top().time;
  }

  out.makespan = makespan;
  out.stats.events = events;
  if (finished < n) {
    out.stalled = true;
    auto& blocked = out.stall.blocked_tasks;
    for (size_t s = 0; s < num_slots && blocked.size() < kMaxBlocked; ++s) {
      if (head[s] >= slot_begin[s + 1]) continue;
      const uint32_t t = stream_tasks[head[s]];
      if (timing[t].start >= 0) continue;
      if (std::find(blocked.begin(), blocked.end(), t) == blocked.end()) blocked.push_back(t);
    }
    for (size_t t = 0; t < n && blocked.size() < kMaxBlocked && blocked.empty(); ++t) {
      if (timing[t].end < 0) blocked.push_back(static_cast<uint32_t>(t));
    }
  }
  timing = nullptr;
}

// ------------------------------------------------------------------------------------------
// Engine
// ------------------------------------------------------------------------------------------

Engine::Engine() : state_(std::make_unique<State>()) {}
Engine::~Engine() = default;
Engine::Engine(const Engine&) : state_(std::make_unique<State>()) {}
Engine& Engine::operator=(const Engine& other) {
  if (this != &other) state_ = std::make_unique<State>();
  return *this;
}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

RunResult Engine::run(const Program& program) {
  RunResult out;
  run(program, out);
  return out;
}

void Engine::run(const Program& program, RunResult& out) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!state_) state_ = std::make_unique<State>();
  std::vector<std::string> errors;
  if (!state_->prepare(program, &errors)) {
    STRETTO_ASSERT(errors.empty(), errors.front().c_str());
  }
  state_->simulate(out);
  const auto t1 = std::chrono::steady_clock::now();
  out.stats.wall_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
}

uint64_t Engine::stale_events() const {
  return state_ ? state_->stale : 0;
}
uint64_t Engine::max_queue() const {
  return state_ ? state_->max_queue : 0;
}

}  // namespace stretto::sim
