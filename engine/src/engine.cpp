#include "stretto/engine/engine.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <utility>

#include "big_array.h"
#include "event_queue.h"
#include "pod_stack.h"
#include "stretto/support/diag.h"
#include "stretto/engine/maxmin.h"

namespace stretto::engine {

namespace {

using detail::Event;

// Event kinds (low bits of Event::key).
enum : uint32_t {
  kJobEnd = 0,      // a rate-based job (compute task or comm flow) may complete; id = job
  kFixedEnd = 1,    // a fixed-duration comm task ends; id = task
  kLatencyEnd = 2,  // a comm task with links finished its latency; its bytes start; id = task
  kIssue = 3,       // a ready task waited for its host thread to issue it; id = task
};

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr SimTime kNever = std::numeric_limits<SimTime>::max();
constexpr size_t kMaxErrors = 50;
constexpr size_t kMaxBlocked = 8;
constexpr uint32_t kDeviceMask = (1u << 27) - 1;  // device ids share a word with flag bits
constexpr uint32_t kPartMask = (1u << 26) - 1;    // a comm task's participant count, likewise
constexpr uint32_t kSortedBit = 1u << 26;  // comm: participants sorted by device (prepare only)
// The task has counter effects at its end, at its start (set by prepare; which end an effect
// is at is structure, so rerun_checked keeps them). Separate bits: most tasks with effects
// have them at one end only (on the reference plan 80,912 of the 347,359 with effects have
// any at their start), and the other end skips the call.
constexpr uint32_t kEndEffectsBit = 1u << 27;
constexpr uint32_t kStartEffectsBit = 1u << 28;
constexpr uint32_t kEffectsBits = kEndEffectsBit | kStartEffectsBit;
constexpr uint32_t kFlagBit = 1u << 31;  // compute: Task::mem_bound; comm: Task::overlapped
constexpr double kMaxNs = 4.0e18;          // beyond this a duration is "never" (int64 safety)
constexpr size_t kAhead = 16;  // prefetch distance for the random accesses of prepare

/// Whole ns needed to do `x` ns of work, rounded up; float noise just above an integer (up to
/// 1e-6 ns + 1e-13 relative) rounds down to it, so exact results stay exact.
SimTime ceil_ns(double x) {
  if (!(x > 0)) return 0;
  if (x >= kMaxNs) return static_cast<SimTime>(kMaxNs);
  const double y = x - (1e-6 + x * 1e-13);
  if (!(y > 0)) return 0;
  // std::ceil(y) in integers (y < 2^63; from 2^52 up every double is an integer, so i == y)
  const auto i = static_cast<SimTime>(y);
  return i + (static_cast<double>(i) < y ? 1 : 0);
}

/// Duration of a comm task that does not become a max-min flow (no links, or no bytes).
SimTime fixed_duration(const CommSpec& c, int64_t work) {
  SimTime d = c.latency_ns;
  if (c.link_count == 0 && work > 0 && c.rate_cap > 0) {
    d += ceil_ns(static_cast<double>(work) / c.rate_cap);
  }
  return d;
}

bool is_flow(const CommSpec& c, int64_t work) {
  return c.link_count > 0 && work > 0;
}

/// A flow's duration alone: its latency, then its bytes at min(rate_cap, its slowest link).
double flow_alone_ns(const Program& p, const CommSpec& c, int64_t work) {
  double rate = c.rate_cap > 0 ? c.rate_cap : std::numeric_limits<double>::infinity();
  for (uint32_t i = 0; i < c.link_count; ++i) {
    rate = std::min(rate, p.links[p.task_links[c.link_begin + i]].capacity);
  }
  return static_cast<double>(c.latency_ns + ceil_ns(static_cast<double>(work) / rate));
}

/// Whether check_task_values finds nothing wrong with the values of a task (its work; a comm
/// task's latency and rate cap, `cs`, null for other kinds); participant counts aside.
bool values_ok(const Task& k, const CommSpec* cs) {
  return k.work >= 0 &&
         (!cs || (cs->latency_ns >= 0 && cs->rate_cap >= 0 && std::isfinite(cs->rate_cap)));
}

class Errors {
 public:
  explicit Errors(std::vector<std::string>* out) : out_(out) {}
  /// `make` builds the message; it is called only while there is room, so a program with
  /// millions of errors stays cheap to validate.
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
std::string device_str(size_t d) {
  return "device " + std::to_string(d);
}

}  // namespace

struct Engine::State {
  // Everything the hot path needs about a task is its 16-byte record (a cache line holds four)
  // and its entry of `times` (below): a compute task's start and end touch nothing else of the
  // program, not even a stream queue, because the record links to the next task of its stream;
  // a comm task's start and end also read its Task (participant range, comm spec).
  struct alignas(16) TaskRec {
    uint32_t pending = 0;     // unmet start conditions: deps + stream heads not reached
    uint32_t succ_begin = 0;  // successors are succ[succ_begin, next record's succ_begin)
    uint32_t next = kNone;    // compute: the next task of its stream; comm: where its
                              // participants' entries of part_next begin
    uint32_t bits = 0;        // compute: device | end effects << 27 | start effects << 28
                              // comm: part_count | sorted << 26 | (effects, as compute)
                              // | kind << 29
                              // | (compute: mem_bound; comm: overlapped) << 31

    uint32_t device() const { return bits & kDeviceMask; }      // compute
    uint32_t part_count() const { return bits & kPartMask; }    // comm
    TaskKind kind() const { return static_cast<TaskKind>((bits >> 29) & 3u); }
    bool mem_bound() const { return (bits >> 31) != 0; }       // compute
    bool overlapped() const { return (bits >> 31) != 0; }      // comm: Task::overlapped
  };
  static_assert(sizeof(TaskRec) == 16);
  struct Job {        // a running task whose completion depends on a rate
    double rem = 0;   // work left at t_upd (compute: ns at full capacity; flow: bytes)
    double rate = 0;  // work per ns since t_upd
    SimTime t_upd = 0;
    SimTime t_end = kNever;     // completion at the current rate
    SimTime t_queued = kNever;  // time of this job's valid event in the queue (<= t_end)
    SimTime start = 0;
    uint32_t task = kNone;
    uint32_t version = 0;  // bumped when an earlier completion is pushed or the job ends
    uint32_t next = kNone, prev = kNone;  // compute: the device's list of running compute jobs
    uint32_t device = kNone;              // compute only
    uint32_t flow = kNone;                // comm flow only
    uint32_t node = kNone;                // Task::node when it has counter effects
    bool mem_bound = false;
  };
  struct Device {
    uint32_t comm_active = 0;  // comm tasks in their latency or bytes phase (per participation)
    uint32_t comm_slowing = 0;  // of those, the ones not `overlapped` (they slow compute)
    uint32_t num_compute = 0;
    uint32_t first_job = kNone;
    bool dirty = false;
    double sm_factor = 1, hbm_factor = 1;  // capacity multipliers while comm_slowing > 0
    uint32_t host = kNone;                 // DeviceProgram::host
    SimTime t_acc = 0;                     // occupancy accounted up to here
    DeviceOccupancy occ;
  };
  struct Host {              // cores shared by the processes of several devices (program.h)
    double cores = 0;
    double efficiency = 1;   // Program::host_share_efficiency
    uint32_t active = 0;     // its devices with a compute task running
    uint32_t dev_begin = 0;  // its devices are host_devs[dev_begin, next host's dev_begin)
  };

  // ---- the program and its derived, static structure (built by prepare) ----
  const Program* p = nullptr;
  unsigned slot_shift = 0;
  // (BigArray: not value-initialised, prepare writes each entry once; see big_array.h)
  detail::BigArray<TaskRec> recs;     // per task, plus a sentinel for succ_begin
  // Per task, what a run reads of it before it starts and then its result: until the task
  // starts, `start` holds its issue time (the latest over its devices) and `end` a copy of
  // Task::work; when it ends, its timing. Moved into RunResult::timing at the end of the run,
  // so the timing takes no memory beside the records (on the reference plan 23 M tasks x 16 B).
  std::vector<TaskTiming> times;
  detail::BigArray<uint32_t> succ;    // successor lists
  // Per comm task's participant entry (the task's record's `next` onward, in the order of its
  // participants): the next task of that entry's stream. Compute tasks keep theirs in the record.
  detail::BigArray<uint32_t> part_next;
  // The first task of each (device, stream) FIFO that has one, by slot (device << slot_shift |
  // stream), ascending: a run starts from these; most slots of a program with many per-peer
  // streams are empty, so they are listed rather than indexed.
  struct Head {
    uint32_t slot, task;
  };
  std::vector<Head> heads;
  std::vector<uint32_t> free_tasks;  // tasks with no deps and no participants
  std::vector<double> link_caps;
  // The sizes of the program whose structure the above holds (rerun_checked compares them);
  // `prepared` is false until a prepare finds no errors.
  struct Shape {
    size_t tasks = 0, deps = 0, parts = 0, comms = 0, task_links = 0, links = 0, devices = 0,
           streams = 0, dispatch = 0, host_cores = 0, effect_begin = 0, effects = 0;
    uint32_t num_counters = 0;
    bool operator==(const Shape&) const = default;
  };
  static Shape shape_of(const Program& prog);
  Shape shape;
  bool prepared = false;

  // ---- scratch of prepare ----
  struct BigTask {
    uint32_t task, begin;  // a task with more than kSmallGroup participants: its big_index range
  };
  static constexpr uint32_t kSmallGroup = 16;
  // Per stream, of the device whose dispatch list is being linked: its last task so far, and
  // that task's entry of part_next (a comm task); kNone where it has none yet.
  std::vector<uint32_t> tail_task, tail_part;
  std::vector<uint32_t> dev_stamp;  // per device: the last large task (t + 1) that listed it
  // Bitsets by participant entry: owned by a task (pass 1); a comm task's entry whose dispatch
  // entry is not seen yet (compute tasks track their dispatch in the TaskRec instead). Bits,
  // not owner ids, so that they stay in cache.
  std::vector<uint64_t> part_owned, part_pending;
  static bool test_bit(const std::vector<uint64_t>& b, uint32_t i) {
    return (b[i >> 6] >> (i & 63)) & 1u;
  }
  static void set_bit(std::vector<uint64_t>& b, uint32_t i) {
    b[i >> 6] |= uint64_t{1} << (i & 63);
  }
  static void clear_bit(std::vector<uint64_t>& b, uint32_t i) {
    b[i >> 6] &= ~(uint64_t{1} << (i & 63));
  }
  static constexpr uint32_t kMaxTasks = (1u << 31) - 2;
  static constexpr SimTime kUnissued = -1;
  std::vector<BigTask> big_tasks;
  size_t num_comm_parts = 0;  // comm tasks' participant entries (part_next's size)
  std::vector<std::pair<uint32_t, uint32_t>> big_index;  // (device, participant index)

  // ---- dynamic state ----
  std::vector<Job> jobs;
  detail::IdStack free_jobs;
  std::vector<Device> devs;
  detail::IdStack dirty_devs;
  std::vector<Host> hosts;
  std::vector<uint32_t> host_devs;
  detail::IdStack ready;
  std::vector<uint32_t> flow_job;
  // counters (program.h): levels by device * num_counters; devices changed in this instant
  uint32_t nc = 0;
  std::vector<int64_t> ctr_level;
  std::vector<int64_t> ctr_total;   // per device: the sum of its levels
  std::vector<uint64_t> ctr_stamp;  // per device: the last application that touched it
  uint64_t ctr_epoch = 0;           // (64 bits: never wraps within a run)
  std::vector<char> ctr_dirty;
  detail::IdStack ctr_dirty_devs;
  DeviceCounters* ctr_out = nullptr;
  bool curves = true;
  const RunOptions* options = nullptr;  // during run_checked
  MaxMin mm;
  detail::RadixEventQueue queue;  // measured faster than 2-, 4- and 8-ary heaps here
  TaskTiming* timing = nullptr;  // times.data() during a run
  SimTime now = 0;
  SimTime makespan = 0;
  uint64_t seq = 0;
  uint64_t events = 0;
  uint64_t stale = 0;
  uint64_t requeued = 0;
  uint64_t max_queue = 0;
  size_t finished = 0;
  double prepare_ms = 0;

  bool prepare(const Program& prog, std::vector<std::string>* errors);
  // prepare() for a program with the structure of the prepared one: its values only
  bool rearm(const Program& prog, std::vector<std::string>* errors);
  void simulate(RunResult& out);

  // prepare's steps, in the order it calls them
  struct Sizes {
    size_t tasks = 0, devices = 0, streams = 0, links = 0, parts = 0, slots = 0;
    bool prefetch = false;  // the records outgrow the caches: prefetch the random accesses
  };
  bool check_sizes(const Program& prog, Sizes& z, Errors& err);
  void check_devices_and_links(const Program& prog, Errors& err) const;
  void check_counter_effects(const Program& prog, Errors& err) const;
  void reset_prepare_scratch(const Sizes& z);
  size_t scan_tasks(const Program& prog, const Sizes& z, Errors& err);
  bool check_task_ranges(const Program& prog, uint32_t t, const Task& k, uint32_t dep_end,
                         const Sizes& z, Errors& err,
                         const CommSpec*& cs) const;
  uint32_t count_successors(const Program& prog, uint32_t t, uint32_t begin, uint32_t end,
                            const Sizes& z, Errors& err);
  void scan_participants(const Program& prog, uint32_t t, const Task& k, const Sizes& z,
                         Errors& err);
  void index_collective(const Program& prog, uint32_t t);
  void check_task_values(uint32_t t, const Task& k, const CommSpec* cs, Errors& err) const;
  void link_dispatch_lists(const Program& prog, const Sizes& z, Errors& err);
  void prefetch_dispatch(const Program& prog, uint32_t d, size_t pos) const;
  [[gnu::always_inline]] void link_stream(uint32_t d, uint32_t stream, uint32_t t,
                                         uint32_t entry);
  // (out of line: a stream's first task, rare, keeps link_stream small)
  [[gnu::noinline]] void add_head(uint32_t d, uint32_t stream, uint32_t t) {
    heads.push_back({d << slot_shift | stream, t});
  }
  void dispatch_compute(uint32_t d, uint32_t t, SimTime issue, Errors& err);
  void dispatch_comm(const Program& prog, uint32_t d, uint32_t t, SimTime issue, Errors& err);
  void report_undispatched_comm(const Program& prog, Errors& err) const;
  void successor_offsets(const Sizes& z, Errors& err);
  void fill_successors(const Program& prog, const Sizes& z, size_t num_succ);
  void copy_link_capacities(const Program& prog);

  // rearm's steps
  void rearm_tasks(const Program& prog, Errors& err);
  void rearm_issue_times(const Program& prog);

  // simulate's steps
  void reset_run(RunResult& out);
  void run_events();
  void report_stall(RunResult& out);

  // event loop pieces
  void push(SimTime t, uint32_t kind, uint32_t id, uint32_t version) {
    STRETTO_ASSERT(t >= queue.now(), "event in the past");
    queue.push(Event{t, (seq++ << detail::kKindBits) | kind, id, version});
    if (queue.size() > max_queue) max_queue = queue.size();
  }
  [[gnu::always_inline]] void arrive(uint32_t t) {
    if (--recs[t].pending == 0) ready.push_back(t);
  }
  [[gnu::always_inline]] void advance(uint32_t next) {
    if (next != kNone) arrive(next);
  }
  /// Accounts the device's occupancy up to now; called before num_compute or comm_active change.
  void account(Device& dev) const {
    const SimTime dt = now - dev.t_acc;
    if (dt <= 0) return;
    dev.t_acc = now;
    if (dev.num_compute > 0) dev.occ.busy += dt;
    if (dev.comm_active > 0) {
      dev.occ.comm += dt;
      if (dev.num_compute == 0) dev.occ.exposed_comm += dt;
    }
  }
  void mark_dirty(uint32_t d) {
    if (!devs[d].dirty) {
      devs[d].dirty = true;
      dirty_devs.push_back(d);
    }
  }
  /// A device of host h started (+1) or stopped (-1) computing: every computing device of
  /// the host gets a new share of its cores.
  void host_activity(uint32_t h, int delta) {
    Host& host = hosts[h];
    host.active = static_cast<uint32_t>(static_cast<int64_t>(host.active) + delta);
    const uint32_t end = h + 1 < hosts.size() ? hosts[h + 1].dev_begin
                                              : static_cast<uint32_t>(host_devs.size());
    for (uint32_t i = host.dev_begin; i < end; ++i)
      if (devs[host_devs[i]].num_compute > 0) mark_dirty(host_devs[i]);
  }
  uint32_t slot_of(const Participant& pa) const { return pa.device << slot_shift | pa.stream; }
  uint32_t next_on_stream(uint32_t t, uint32_t slot) const {
    const TaskRec& rec = recs[t];
    if (rec.kind() == TaskKind::kCompute) return rec.next;
    const Participant* pa = p->participants.data() + p->tasks[t].part_begin;
    for (uint32_t i = 0; i < rec.part_count(); ++i) {
      if (slot_of(pa[i]) == slot) return part_next[rec.next + i];
    }
    return kNone;
  }
  // (inlined: a call each cost as much as the work, once per job start and end)
  [[gnu::always_inline]] uint32_t alloc_job();
  [[gnu::always_inline]] void free_job(uint32_t j);
  void drain_ready();
  [[gnu::always_inline]] void start_task(uint32_t t);
  void start_flow(uint32_t t);
  // `node` is the task's Task::node when the caller has it at hand, else kNone
  [[gnu::always_inline]] void end_task(uint32_t t, SimTime start, bool release_comm, uint32_t node);
  void finish_job(uint32_t j);
  void acquire_comm(const TaskRec& rec, uint32_t part_begin);
  void apply_effects(uint32_t t, uint32_t node, bool at_end);
  // (inlined at a compute task's start and end, which have one device: no call, most tasks
  // with effects being compute tasks)
  [[gnu::always_inline]] void effects_on_device(uint32_t d, uint32_t node, bool at_end);
  void flush_counters();
  void flush();
  [[gnu::always_inline]] void retime(uint32_t j, double rate);
};

// ------------------------------------------------------------------------------------------
// prepare: validation and derived structure, in named steps (two passes over the tasks, with
// the dispatch lists between them)
// ------------------------------------------------------------------------------------------

bool Engine::State::prepare(const Program& prog, std::vector<std::string>* errors) {
  p = &prog;
  prepared = false;
  Errors err(errors);
  Sizes z;
  if (!check_sizes(prog, z, err)) return false;
  check_devices_and_links(prog, err);
  check_counter_effects(prog, err);
  reset_prepare_scratch(z);
  const size_t num_succ = scan_tasks(prog, z, err);
  if (err.count() > 0) {
    err.finish();
    return false;
  }
  link_dispatch_lists(prog, z, err);
  if (std::any_of(part_pending.begin(), part_pending.end(), [](uint64_t w) { return w != 0; })) {
    report_undispatched_comm(prog, err);
  }
  successor_offsets(z, err);
  if (err.count() > 0) {
    err.finish();
    return false;
  }
  fill_successors(prog, z, num_succ);
  copy_link_capacities(prog);
  shape = shape_of(prog);
  prepared = true;
  return true;
}

Engine::State::Shape Engine::State::shape_of(const Program& prog) {
  Shape s;
  s.tasks = prog.tasks.size();
  s.deps = prog.deps.size();
  s.parts = prog.participants.size();
  s.comms = prog.comms.size();
  s.task_links = prog.task_links.size();
  s.links = prog.links.size();
  s.devices = prog.devices.size();
  s.streams = prog.stream_names.size();
  for (const DeviceProgram& dp : prog.devices) s.dispatch += dp.dispatch.size();
  s.host_cores = prog.host_cores.size();
  s.effect_begin = prog.effect_begin.size();
  s.effects = prog.effects.size();
  s.num_counters = prog.num_counters;
  return s;
}

void Engine::State::copy_link_capacities(const Program& prog) {
  link_caps.resize(prog.links.size());
  for (size_t l = 0; l < prog.links.size(); ++l) link_caps[l] = prog.links[l].capacity;
}

// The program's sizes, and whether its ids fit in 32 bits.
bool Engine::State::check_sizes(const Program& prog, Sizes& z, Errors& err) {
  z.tasks = prog.tasks.size();
  z.devices = prog.devices.size();
  z.streams = prog.stream_names.size();
  z.links = prog.links.size();
  z.parts = prog.participants.size();
  slot_shift = z.streams <= 1 ? 0 : static_cast<unsigned>(std::bit_width(z.streams - 1));
  z.slots = z.devices << slot_shift;
  // (only for programs whose records outgrow the caches: below, prefetching costs more
  // instructions than the misses it hides)
  z.prefetch = z.tasks >= (size_t{1} << 16);
  if (z.tasks >= kMaxTasks || z.devices > kDeviceMask || z.streams > 0xFFFF ||
      z.slots >= kNone || z.parts >= kNone || prog.deps.size() >= kNone) {
    err.add([] { return std::string("program too large for 32-bit ids"); });
    err.finish();
    return false;
  }
  return true;
}

void Engine::State::check_devices_and_links(const Program& prog, Errors& err) const {
  for (size_t d = 0; d < prog.devices.size(); ++d) {
    const DeviceProgram& dp = prog.devices[d];
    if (dp.dispatch_ns < 0) err.add([&] { return device_str(d) + ": negative dispatch_ns"; });
    if (!(dp.comm_sm_share >= 0 && dp.comm_sm_share <= 1)) {
      err.add([&] { return device_str(d) + ": comm_sm_share outside [0, 1]"; });
    }
    if (!(dp.comm_hbm_share >= 0 && dp.comm_hbm_share <= 1)) {
      err.add([&] { return device_str(d) + ": comm_hbm_share outside [0, 1]"; });
    }
    if (dp.host != kNoHost && dp.host >= prog.host_cores.size()) {
      err.add([&] { return device_str(d) + ": unknown host " + std::to_string(dp.host); });
    }
  }
  if (!(prog.host_share_efficiency > 0 && prog.host_share_efficiency <= 1)) {
    err.add([&] { return std::string("host_share_efficiency outside (0, 1]"); });
  }
  for (size_t h = 0; h < prog.host_cores.size(); ++h) {
    const double c = prog.host_cores[h];
    if (!(c > 0) || !std::isfinite(c)) {
      err.add([&] { return "host " + std::to_string(h) + ": cores must be finite and > 0"; });
    }
  }
  for (size_t l = 0; l < prog.links.size(); ++l) {
    const double c = prog.links[l].capacity;
    if (!(c > 0) || !std::isfinite(c)) {
      err.add([&] {
        return "link " + std::to_string(l) + " (" + prog.links[l].name +
               "): capacity must be positive and finite";
      });
    }
  }
}

void Engine::State::check_counter_effects(const Program& prog, Errors& err) const {
  if (prog.num_counters > kMaxCounters) {
    err.add([&] { return "num_counters above " + std::to_string(kMaxCounters); });
  }
  if (prog.effect_begin.empty()) return;
  const auto& eb = prog.effect_begin;
  bool ok = eb.front() == 0 && eb.back() == prog.effects.size();
  for (size_t i = 1; i < eb.size() && ok; ++i) ok = eb[i - 1] <= eb[i];
  if (!ok) {
    err.add([] { return std::string("effect_begin must rise from 0 to the number of effects"); });
  }
  if (prog.num_counters == 0 && !prog.effects.empty()) {
    err.add([] { return std::string("counter effects but num_counters is 0"); });
  }
  for (size_t i = 0; i < prog.effects.size(); ++i) {
    if (prog.effects[i].counter >= prog.num_counters) {
      err.add([&] { return "effect " + std::to_string(i) + ": counter out of range"; });
    }
  }
}

void Engine::State::reset_prepare_scratch(const Sizes& z) {
  recs.resize(z.tasks + 1);  // (not initialised: scan_tasks writes every record before the sentinel)
  recs[z.tasks] = TaskRec{};
  times.clear();  // (scan_tasks appends each task's entry: written once)
  times.reserve(z.tasks);
  dev_stamp.assign(z.devices, 0);
  part_owned.assign((z.parts + 63) / 64, 0);
  part_pending.assign((z.parts + 63) / 64, 0);
  big_tasks.clear();
  big_index.clear();
  free_tasks.clear();
}

// ---- pass 1: tasks in isolation; successor counts (in TaskRec::succ_begin) ----
size_t Engine::State::scan_tasks(const Program& prog, const Sizes& z, Errors& err) {
  size_t num_succ = 0;
  size_t comm_parts = 0;  // part_next entries so far
  const bool counters = prog.num_counters > 0 && !prog.effect_begin.empty();
  const auto num_deps = static_cast<uint32_t>(prog.deps.size());
  for (uint32_t t = 0; t < z.tasks; ++t) {
    // (a copy, and its dependency range read once: the record writes below could alias the
    // program's fields for the compiler, which would read them again after each)
    const Task k = prog.tasks[t];
    const uint32_t dep_end = t + 1 < z.tasks ? prog.tasks[t + 1].dep_begin : num_deps;
    TaskRec& rec = recs[t];
    rec = TaskRec{};
    rec.bits = static_cast<uint32_t>(k.kind) << 29 |
               static_cast<uint32_t>(k.kind == TaskKind::kComm ? k.overlapped : k.mem_bound) << 31;
    times.push_back(TaskTiming{0, k.work});  // (issue time 0 until a dispatch entry sets it)
    rec.pending = k.part_count;
    // (a node beyond the effect table has no effects; a malformed table is reported by
    // check_counter_effects, and the run never starts)
    if (counters && k.node + size_t{1} < prog.effect_begin.size()) {
      const uint32_t eb = prog.effect_begin[k.node], ee = prog.effect_begin[k.node + 1];
      for (uint32_t i = eb; i < ee && i < prog.effects.size(); ++i) {
        rec.bits |= prog.effects[i].at_end ? kEndEffectsBit : kStartEffectsBit;
      }
    }
    const CommSpec* cs = nullptr;
    if (!check_task_ranges(prog, t, k, dep_end, z, err, cs)) continue;
    num_succ += count_successors(prog, t, k.dep_begin, dep_end, z, err);
    for (uint32_t i = 0; cs && i < cs->link_count; ++i) {
      const uint32_t l = prog.task_links[cs->link_begin + i];
      if (l >= z.links) err.add([&] { return task_str(t) + ": unknown link " + std::to_string(l); });
    }
    scan_participants(prog, t, k, z, err);
    if (k.kind == TaskKind::kComm) {
      if (k.part_count > kPartMask) {
        err.add([&] { return task_str(t) + ": too many participants"; });
        continue;
      }
      // (an overflow here needs overlapping participant ranges, an error reported above: the
      // dispatch pass, which reads part_next, does not run then)
      rec.next = static_cast<uint32_t>(comm_parts);
      comm_parts += k.part_count;
      rec.bits |= k.part_count;
    }
    if (k.kind == TaskKind::kComm && k.part_count > kSmallGroup) index_collective(prog, t);
    if (dep_end == k.dep_begin && k.part_count == 0) free_tasks.push_back(t);
    // (the call, which names what is wrong, only when something is)
    const bool count_ok = k.kind == TaskKind::kCompute  ? k.part_count == 1
                          : k.kind == TaskKind::kBarrier ? k.part_count == 0
                                                         : true;
    if (!count_ok || !values_ok(k, cs)) check_task_values(t, k, cs, err);
  }
  big_tasks.push_back({kNone, static_cast<uint32_t>(big_index.size())});  // sentinel
  if (num_succ >= kNone) err.add([] { return std::string("too many dependencies"); });
  num_comm_parts = comm_parts;
  return num_succ;
}

// The task's kind and its ranges into the program's arrays; `cs` is its comm spec, if any.
// False (with an error) when the rest of the task cannot be read.
bool Engine::State::check_task_ranges(const Program& prog, uint32_t t, const Task& k,
                                      uint32_t dep_end, const Sizes& z, Errors& err,
                                      const CommSpec*& cs) const {
  if (k.kind != TaskKind::kCompute && k.kind != TaskKind::kComm && k.kind != TaskKind::kBarrier) {
    err.add([&] { return task_str(t) + ": unknown kind"; });
    return false;
  }
  if (uint64_t{k.part_begin} + k.part_count > z.parts) {
    err.add([&] { return task_str(t) + ": participant range out of bounds"; });
    return false;
  }
  if (k.dep_begin > dep_end || dep_end > prog.deps.size()) {
    err.add([&] {
      return task_str(t) + ": dependency range out of bounds (dep_begin must not decrease)";
    });
    return false;
  }
  if (k.kind == TaskKind::kComm) {
    if (k.comm >= prog.comms.size()) {
      err.add([&] { return task_str(t) + ": comm spec out of bounds"; });
      return false;
    }
    cs = &prog.comms[k.comm];
    if (uint64_t{cs->link_begin} + cs->link_count > prog.task_links.size()) {
      err.add([&] { return task_str(t) + ": link range out of bounds"; });
      return false;
    }
  } else if (k.comm != kNoComm) {
    err.add([&] { return task_str(t) + ": only a comm task has a comm spec (and links)"; });
    return false;
  }
  return true;
}

// The task's dependencies: each must come before it; each counts one successor of its
// predecessor and one start condition of the task. Returns the number of dependencies.
uint32_t Engine::State::count_successors(const Program& prog, uint32_t t, uint32_t begin,
                                         uint32_t end, const Sizes& z, Errors& err) {
  recs[t].pending += end - begin;
  for (uint32_t i = begin; i < end; ++i) {
    if (z.prefetch && i + kAhead < prog.deps.size())
      __builtin_prefetch(&recs[prog.deps[i + kAhead]], 1);
    const uint32_t d = prog.deps[i];
    if (d >= t) {
      err.add([&] {
        return task_str(t) + " depends on task " + std::to_string(d) +
               ", which is not listed before it";
      });
      continue;
    }
    ++recs[d].succ_begin;  // counts, turned into offsets by successor_offsets
  }
  return end - begin;
}

// Each participant entry: owned by this task only, a known device and stream, no (device,
// stream) twice. A compute task's record keeps its device and stream slot.
void Engine::State::scan_participants(const Program& prog, uint32_t t, const Task& k,
                                      const Sizes& z, Errors& err) {
  TaskRec& rec = recs[t];
  for (uint32_t pj = k.part_begin; pj < k.part_begin + k.part_count; ++pj) {
    const Participant& pa = prog.participants[pj];
    if (test_bit(part_owned, pj)) {
      err.add([&] {
        uint32_t owner = 0;  // the earlier task whose range holds pj (error path only)
        while (owner < t && !(prog.tasks[owner].part_begin <= pj &&
                              pj < prog.tasks[owner].part_begin + prog.tasks[owner].part_count))
          ++owner;
        return task_str(t) + ": participant entry " + std::to_string(pj) +
               " is shared with task " + std::to_string(owner);
      });
      continue;
    }
    set_bit(part_owned, pj);
    if (k.kind == TaskKind::kComm) set_bit(part_pending, pj);
    if (pa.device >= z.devices) {
      err.add([&] { return task_str(t) + ": unknown device " + std::to_string(pa.device); });
      continue;
    }
    if (pa.stream >= z.streams) {
      err.add([&] { return task_str(t) + ": unknown stream " + std::to_string(pa.stream); });
      continue;
    }
    const uint32_t slot = slot_of(pa);
    if (k.kind == TaskKind::kCompute) {
      // Until its dispatch entry is seen, a compute task's record holds its stream slot in
      // `next` and kUnissued in `issue`: the dispatch pass then needs nothing but the record.
      rec.bits |= pa.device;
      rec.next = slot;
      times[t].start = kUnissued;
    }
    // (device, stream) twice: a pairwise check for small tasks; for large ones, each device's
    // stamp says whether an earlier entry of the task is on that device, and only then are
    // the earlier entries compared
    bool twice = false;
    bool compare = k.part_count <= kSmallGroup;
    if (!compare) {
      compare = dev_stamp[pa.device] == t + 1;
      dev_stamp[pa.device] = t + 1;
    }
    if (compare) {
      for (uint32_t pq = k.part_begin; pq < pj; ++pq) {
        twice |= slot_of(prog.participants[pq]) == slot;
      }
    }
    if (twice) {
      err.add([&] {
        return task_str(t) + ": device " + std::to_string(pa.device) + " stream " +
               std::to_string(pa.stream) + " listed twice";
      });
      continue;
    }
  }
}

// A large collective: how each member device will find its entries in the dispatch pass.
void Engine::State::index_collective(const Program& prog, uint32_t t) {
  const Task& k = prog.tasks[t];
  if (k.kind != TaskKind::kComm || k.part_count <= kSmallGroup) return;
  bool by_device = true;
  for (uint32_t pj = k.part_begin + 1; by_device && pj < k.part_begin + k.part_count; ++pj) {
    by_device = prog.participants[pj - 1].device <= prog.participants[pj].device;
  }
  if (by_device) {
    // Participants sorted by device (as build_program writes them): each member device finds
    // its entries by binary search in place.
    recs[t].bits |= kSortedBit;
    return;
  }
  // Otherwise a sorted (device, participant) index, so that each member device finds its
  // entries by binary search instead of a scan (no k^2 for k-way collectives).
  big_tasks.push_back({t, static_cast<uint32_t>(big_index.size())});
  for (uint32_t pj = k.part_begin; pj < k.part_begin + k.part_count; ++pj) {
    big_index.push_back({prog.participants[pj].device, pj});
  }
  std::sort(big_index.begin() + big_tasks.back().begin, big_index.end());
}

// Work, latency and rate values, and the participant count each kind needs.
void Engine::State::check_task_values(uint32_t t, const Task& k, const CommSpec* cs,
                                      Errors& err) const {
  if (k.work < 0) err.add([&] { return task_str(t) + ": negative work"; });
  switch (k.kind) {
    case TaskKind::kCompute:
      if (k.part_count != 1) {
        err.add([&] { return task_str(t) + ": a compute task needs exactly one participant"; });
      }
      break;
    case TaskKind::kComm:
      if (cs->latency_ns < 0) err.add([&] { return task_str(t) + ": negative latency"; });
      if (!(cs->rate_cap >= 0) || !std::isfinite(cs->rate_cap)) {
        err.add([&] { return task_str(t) + ": rate_cap must be finite and >= 0"; });
      }
      break;
    case TaskKind::kBarrier:
      if (k.part_count != 0) {
        err.add([&] { return task_str(t) + ": a barrier has no participants"; });
      }
      break;
  }
}

// ---- dispatch lists: match each entry with the task's participants on that device; link
// each (device, stream) FIFO in dispatch order; issue times ----
// A stream is a linked list: its entry of `heads`, then TaskRec::next (compute) or the task's
// entry of part_next for that participant (comm).
void Engine::State::link_dispatch_lists(const Program& prog, const Sizes& z, Errors& err) {
  part_next.assign(num_comm_parts, kNone);
  heads.clear();
  tail_task.assign(z.streams, kNone);
  tail_part.resize(z.streams);
  const uint32_t stream_mask = (1u << slot_shift) - 1;
  for (uint32_t d = 0; d < z.devices; ++d) {
    const size_t first_head = heads.size();
    const DeviceProgram& dp = prog.devices[d];
    for (size_t pos = 0; pos < dp.dispatch.size(); ++pos) {
      if (z.prefetch) prefetch_dispatch(prog, d, pos);
      const uint32_t t = dp.dispatch[pos];
      if (t >= z.tasks) {
        err.add([&] {
          return device_str(d) + ": dispatch list names unknown task " + std::to_string(t);
        });
        continue;
      }
      const SimTime issue = static_cast<SimTime>(pos + 1) * dp.dispatch_ns;
      if (recs[t].kind() == TaskKind::kCompute) {
        dispatch_compute(d, t, issue, err);
      } else {
        dispatch_comm(prog, d, t, issue, err);
      }
    }
    // this device's heads in slot order; its tails cleared for the next device
    const auto first = heads.begin() + static_cast<std::ptrdiff_t>(first_head);
    std::sort(first, heads.end(), [](const Head& a, const Head& b) { return a.slot < b.slot; });
    for (auto h = first; h != heads.end(); ++h) tail_task[h->slot & stream_mask] = kNone;
  }
}

// Staged prefetch: the record and times entry kAhead entries ahead; once the record is in
// cache, a comm task's Task kAhead / 2 ahead; once that is, its first and last participant and
// its part_next entries kAhead / 4 ahead; once those are, the interpolation guess of a large
// sorted one kAhead / 8 ahead (see dispatch_comm).
void Engine::State::prefetch_dispatch(const Program& prog, uint32_t d, size_t pos) const {
  const std::vector<uint32_t>& disp = prog.devices[d].dispatch;
  const size_t n = prog.tasks.size();
  if (pos + kAhead < disp.size() && disp[pos + kAhead] < n) {
    __builtin_prefetch(&recs[disp[pos + kAhead]], 1);
    __builtin_prefetch(&times[disp[pos + kAhead]], 1);
  }
  if (pos + kAhead / 2 < disp.size() && disp[pos + kAhead / 2] < n) {
    const uint32_t t = disp[pos + kAhead / 2];
    if (recs[t].kind() == TaskKind::kComm) __builtin_prefetch(&prog.tasks[t]);
  }
  if (pos + kAhead / 4 < disp.size() && disp[pos + kAhead / 4] < n) {
    const uint32_t t = disp[pos + kAhead / 4];
    const TaskRec& ahead = recs[t];
    if (ahead.kind() == TaskKind::kComm && ahead.part_count() > 0) {
      const uint32_t pb = prog.tasks[t].part_begin;
      __builtin_prefetch(&prog.participants[pb]);
      __builtin_prefetch(&prog.participants[size_t{pb} + ahead.part_count() - 1]);
      __builtin_prefetch(&part_next[ahead.next], 1);
    }
  }
  if (pos + kAhead / 8 < disp.size() && disp[pos + kAhead / 8] < n) {
    const uint32_t t = disp[pos + kAhead / 8];
    const TaskRec& ahead = recs[t];
    if (ahead.kind() == TaskKind::kComm && (ahead.bits & kSortedBit) != 0) {
      const Participant* first = prog.participants.data() + prog.tasks[t].part_begin;
      const uint32_t lo = first->device, hi = first[ahead.part_count() - 1].device;
      if (d > lo && d <= hi) {
        __builtin_prefetch(first + uint64_t{d - lo} * (ahead.part_count() - 1) / (hi - lo));
      }
    }
  }
}

// Appends task t (`entry`: its participant's entry of part_next; kNone for a compute task) to
// the FIFO of device d's `stream` (d: the device whose dispatch list is being linked).
inline void Engine::State::link_stream(uint32_t d, uint32_t stream, uint32_t t,
                                       uint32_t entry) {
  const uint32_t prev = tail_task[stream];
  if (prev == kNone) {
    add_head(d, stream, t);
  } else if (recs[prev].kind() == TaskKind::kCompute) {
    recs[prev].next = t;
  } else {
    part_next[tail_part[stream]] = t;
  }
  tail_task[stream] = t;
  tail_part[stream] = entry;
}

void Engine::State::dispatch_compute(uint32_t d, uint32_t t, SimTime issue, Errors& err) {
  TaskRec& rec = recs[t];
  if (rec.device() != d) {
    err.add([&] {
      return device_str(d) + ": dispatch list names " + task_str(t) +
             ", which has no participant on it";
    });
  } else if (times[t].start != kUnissued) {
    err.add([&] { return device_str(d) + ": dispatch list names " + task_str(t) + " twice"; });
  } else {
    times[t].start = issue;
    const uint32_t slot = rec.next;
    rec.next = kNone;
    link_stream(d, slot & ((1u << slot_shift) - 1), t, kNone);
  }
}

void Engine::State::dispatch_comm(const Program& prog, uint32_t d, uint32_t t, SimTime issue,
                                  Errors& err) {
  const TaskRec& rec = recs[t];
  // (a barrier has no participants: never on a device)
  const uint32_t pb = rec.kind() == TaskKind::kComm ? prog.tasks[t].part_begin : 0;
  const uint32_t pc = rec.kind() == TaskKind::kComm ? rec.part_count() : 0;
  bool on_device = false, fresh = false;
  auto take = [&](uint32_t pj) {
    on_device = true;
    if (!test_bit(part_pending, pj)) return;  // already taken: a duplicate dispatch entry
    clear_bit(part_pending, pj);
    fresh = true;
    link_stream(d, prog.participants[pj].stream, t, rec.next + (pj - pb));
  };
  if (pc <= kSmallGroup) {
    for (uint32_t pj = pb; pj < pb + pc; ++pj) {
      if (prog.participants[pj].device == d) take(pj);
    }
  } else if ((rec.bits & kSortedBit) != 0) {
    // Sorted by device: guess the position by interpolation (exact for evenly spaced groups,
    // the usual case: one cache line instead of a binary search's several), fall back to a
    // binary search; then take the run of entries on d.
    const Participant* first = prog.participants.data() + pb;
    const Participant* last = first + pc;
    const uint32_t lo = first->device, hi = (last - 1)->device;
    const Participant* it = last;
    if (d >= lo && d <= hi) {
      const uint64_t guess = hi > lo ? uint64_t{d - lo} * (pc - 1) / (hi - lo) : 0;  // < pc
      if (first[guess].device == d) {
        it = first + guess;
        while (it > first && (it - 1)->device == d) --it;
      } else {
        it = std::lower_bound(
            first, last, d, [](const Participant& a, uint32_t dev) { return a.device < dev; });
      }
    }
    for (; it != last && it->device == d; ++it) {
      take(static_cast<uint32_t>(it - prog.participants.data()));
    }
  } else {
    const auto bt = std::lower_bound(big_tasks.begin(), big_tasks.end(), t,
                                     [](const BigTask& b, uint32_t id) { return b.task < id; });
    const auto first = big_index.begin() + bt->begin;
    const auto last = big_index.begin() + (bt + 1)->begin;
    for (auto it = std::lower_bound(first, last, std::pair<uint32_t, uint32_t>{d, 0});
         it != last && it->first == d; ++it) {
      take(it->second);
    }
  }
  if (!on_device) {
    err.add([&] {
      return device_str(d) + ": dispatch list names " + task_str(t) +
             ", which has no participant on it";
    });
  } else if (!fresh) {
    err.add([&] { return device_str(d) + ": dispatch list names " + task_str(t) + " twice"; });
  } else {
    times[t].start = std::max(times[t].start, issue);
  }
}

// Error path: names the comm tasks with a participant entry no dispatch list took.
void Engine::State::report_undispatched_comm(const Program& prog, Errors& err) const {
  for (uint32_t t = 0; t < prog.tasks.size(); ++t) {
    const Task& k = prog.tasks[t];
    if (k.kind != TaskKind::kComm) continue;
    for (uint32_t pj = k.part_begin; pj < k.part_begin + k.part_count; ++pj) {
      if (!test_bit(part_pending, pj)) continue;
      err.add([&] {
        return task_str(t) + " runs on " + device_str(prog.participants[pj].device) +
               " but is missing from its dispatch list";
      });
    }
  }
}

// ---- pass 2: successor lists (CSR); compute tasks that no dispatch list named ----
// The counts become the ends of the lists (inclusive prefix sums); fill_successors' backward
// fill then leaves each succ_begin at the start of its list, successors ascending.
void Engine::State::successor_offsets(const Sizes& z, Errors& err) {
  uint32_t sum = 0;
  for (uint32_t t = 0; t < z.tasks; ++t) {
    TaskRec& rec = recs[t];
    sum += rec.succ_begin;
    rec.succ_begin = sum;
    if (rec.kind() == TaskKind::kCompute && times[t].start == kUnissued) {
      err.add([&] {
        return task_str(t) + " runs on " + device_str(rec.device()) +
               " but is missing from its dispatch list";
      });
    }
  }
  recs[z.tasks].succ_begin = sum;
}

void Engine::State::fill_successors(const Program& prog, const Sizes& z, size_t num_succ) {
  succ.resize(num_succ);
  for (uint32_t t = static_cast<uint32_t>(z.tasks); t-- > 0;) {
    const uint32_t begin = prog.tasks[t].dep_begin;
    for (uint32_t i = prog.dep_end(t); i-- > begin;) {
      if (z.prefetch && i >= kAhead) __builtin_prefetch(&recs[prog.deps[i - kAhead]], 1);
      succ[--recs[prog.deps[i]].succ_begin] = t;
    }
  }
}

// ------------------------------------------------------------------------------------------
// rearm: a program with the prepared structure and other values (engine.h, rerun_checked).
// What prepare derived from the structure stays (successor lists, stream links, collective
// order, free tasks); each task's record gets its values and start conditions again.
// ------------------------------------------------------------------------------------------

bool Engine::State::rearm(const Program& prog, std::vector<std::string>* errors) {
  STRETTO_ASSERT(prepared, "rerun_checked: no prepared structure (run_checked first)");
  STRETTO_ASSERT(shape_of(prog) == shape,
                 "rerun_checked: the program's structure is not the prepared one");
  p = &prog;
  Errors err(errors);
  check_devices_and_links(prog, err);
  rearm_tasks(prog, err);
  if (err.count() > 0) {
    err.finish();
    return false;
  }
  rearm_issue_times(prog);
  copy_link_capacities(prog);
  return true;
}

// Work and issue time 0 (the times entries: the last run moved its own out), the flag bit
// (mem_bound or overlapped), the start conditions a run counts down (dependencies and stream
// heads, as scan_tasks counts them) and the values' checks.
void Engine::State::rearm_tasks(const Program& prog, Errors& err) {
  const auto n = static_cast<uint32_t>(prog.tasks.size());
  times.clear();
  times.reserve(n);
  for (uint32_t t = 0; t < n; ++t) {
    const Task& k = prog.tasks[t];
    TaskRec& rec = recs[t];
    times.push_back(TaskTiming{0, k.work});
    rec.pending = k.part_count + (prog.dep_end(t) - k.dep_begin);
    const bool comm = k.kind == TaskKind::kComm;
    rec.bits = (rec.bits & ~kFlagBit) | static_cast<uint32_t>(comm ? k.overlapped : k.mem_bound) << 31;
    // The values' checks of check_task_values (its participant counts are structure), which
    // names what is wrong only when something is.
    const CommSpec* cs = comm ? &prog.comms[k.comm] : nullptr;
    if (!values_ok(k, cs)) check_task_values(t, k, cs, err);
  }
}

// Issue times: entry k of a device's dispatch list at (k + 1) * dispatch_ns, a task's the
// latest over its devices (as link_dispatch_lists sets them).
void Engine::State::rearm_issue_times(const Program& prog) {
  for (const DeviceProgram& dp : prog.devices) {
    if (dp.dispatch_ns == 0) continue;  // every issue time 0, as rearm_tasks left it
    for (size_t pos = 0; pos < dp.dispatch.size(); ++pos) {
      SimTime& issue = times[dp.dispatch[pos]].start;
      issue = std::max(issue, static_cast<SimTime>(pos + 1) * dp.dispatch_ns);
    }
  }
}

std::vector<std::string> validate(const Program& program) {
  std::vector<std::string> errors;
  Engine::State scratch;
  scratch.prepare(program, &errors);
  return errors;
}

float slowdown(const Program& program, uint32_t t, const TaskTiming& timing) {
  const Task& k = program.tasks[t];
  double alone = 0;
  if (k.kind == TaskKind::kCompute) {
    alone = static_cast<double>(k.work);
  } else if (k.kind == TaskKind::kComm) {
    const CommSpec& c = program.comms[k.comm];
    if (is_flow(c, k.work)) alone = flow_alone_ns(program, c, k.work);
  }
  if (!(alone > 0) || timing.start < 0) return 1.0f;
  return static_cast<float>(static_cast<double>(timing.end - timing.start) / alone);
}

// ------------------------------------------------------------------------------------------
// simulation
// ------------------------------------------------------------------------------------------

inline uint32_t Engine::State::alloc_job() {
  if (!free_jobs.empty()) {
    const uint32_t j = free_jobs.back();
    free_jobs.pop_back();
    return j;
  }
  jobs.emplace_back();
  return static_cast<uint32_t>(jobs.size() - 1);
}

inline void Engine::State::free_job(uint32_t j) {
  ++jobs[j].version;  // no event of this occupant can match again
  jobs[j].task = kNone;
  free_jobs.push_back(j);
}

void Engine::State::acquire_comm(const TaskRec& rec, uint32_t part_begin) {
  for (uint32_t pj = part_begin; pj < part_begin + rec.part_count(); ++pj) {
    const uint32_t d = p->participants[pj].device;
    account(devs[d]);
    ++devs[d].comm_active;
    if (!rec.overlapped() && devs[d].comm_slowing++ == 0 && devs[d].num_compute > 0)
      mark_dirty(d);
  }
}

void Engine::State::drain_ready() {
  // start_task may complete zero-duration tasks inline, which appends to `ready`.
  for (size_t i = 0; i < ready.size(); ++i) {
    const uint32_t t = ready[i];
    const SimTime issue = timing[t].start;  // (until t starts)
    if (issue > now) {
      push(issue, kIssue, t, 0);
    } else {
      start_task(t);
    }
  }
  ready.clear();
}

inline void Engine::State::start_task(uint32_t t) {
  const TaskRec& rec = recs[t];
  switch (rec.kind()) {
    case TaskKind::kBarrier:
      ++events;
      end_task(t, now, false, kNone);
      return;
    case TaskKind::kCompute: {
      // The node is read (one more cache line) only for a task with counter effects, and kept
      // in the job for its end.
      const uint32_t node = (rec.bits & kEffectsBits) != 0 ? p->tasks[t].node : kNone;
      if ((rec.bits & kStartEffectsBit) != 0) effects_on_device(rec.device(), node, false);
      const int64_t work = timing[t].end;  // (Task::work, until t ends)
      if (work == 0) {
        ++events;
        end_task(t, now, false, node);
        return;
      }
      const uint32_t d = rec.device();
      const uint32_t j = alloc_job();
      Job& job = jobs[j];
      job.rem = static_cast<double>(work);
      job.rate = 0;  // the flush at the end of this instant sets the rate and the completion
      job.t_upd = now;
      job.t_end = kNever;
      job.t_queued = kNever;
      job.start = now;
      job.task = t;
      job.device = d;
      job.flow = kNone;
      job.node = node;
      job.mem_bound = rec.mem_bound();
      Device& dev = devs[d];
      account(dev);
      job.prev = kNone;
      job.next = dev.first_job;
      if (dev.first_job != kNone) jobs[dev.first_job].prev = j;
      dev.first_job = j;
      if (++dev.num_compute == 1 && dev.host != kNone) host_activity(dev.host, +1);
      mark_dirty(d);
      return;
    }
    case TaskKind::kComm: {
      const Task& k = p->tasks[t];
      if ((rec.bits & kStartEffectsBit) != 0) apply_effects(t, k.node, false);
      const CommSpec& c = p->comms[k.comm];
      const bool flow = is_flow(c, k.work);
      const SimTime dur = flow ? c.latency_ns : fixed_duration(c, k.work);
      if (!flow && dur == 0) {
        ++events;
        end_task(t, now, false, k.node);
        return;
      }
      acquire_comm(rec, k.part_begin);
      if (!flow) {
        push(now + dur, kFixedEnd, t, 0);
      } else if (dur > 0) {
        push(now + dur, kLatencyEnd, t, 0);
      } else {
        start_flow(t);
      }
      return;
    }
  }
}

void Engine::State::start_flow(uint32_t t) {
  const Task& k = p->tasks[t];
  const CommSpec& c = p->comms[k.comm];
  const std::span<const uint32_t> links(p->task_links.data() + c.link_begin, c.link_count);
  const uint32_t j = alloc_job();
  Job& job = jobs[j];
  job.rem = static_cast<double>(k.work);
  job.rate = 0;
  job.t_upd = now;
  job.t_end = kNever;
  job.t_queued = kNever;
  job.start = now - c.latency_ns;
  job.task = t;
  job.device = kNone;
  job.node = k.node;
  job.mem_bound = false;
  job.prev = job.next = kNone;
  const MaxMin::FlowId f = mm.add_flow(links, c.rate_cap);
  if (f >= flow_job.size()) flow_job.resize(size_t{f} + 1, kNone);
  flow_job[f] = j;
  job.flow = f;
}

inline void Engine::State::end_task(uint32_t t, SimTime start, bool release, uint32_t node) {
  timing[t] = TaskTiming{start, now};
  if ((recs[t].bits & kEndEffectsBit) != 0) {
    if (recs[t].kind() == TaskKind::kCompute) {
      effects_on_device(recs[t].device(), node, true);
    } else {
      apply_effects(t, node, true);
    }
  }
  if (now > makespan) makespan = now;
  ++finished;
  const TaskRec& rec = recs[t];
  const TaskKind kind = rec.kind();
  if (kind == TaskKind::kCompute) {
    advance(rec.next);
  } else if (kind == TaskKind::kComm) {
    const uint32_t pb = p->tasks[t].part_begin;
    for (uint32_t i = 0; i < rec.part_count(); ++i) {
      if (release) {
        const uint32_t d = p->participants[pb + i].device;
        Device& dev = devs[d];
        STRETTO_ASSERT(dev.comm_active > 0, "comm count underflow");
        account(dev);
        --dev.comm_active;
        if (!rec.overlapped() && --dev.comm_slowing == 0 && dev.num_compute > 0) mark_dirty(d);
      }
      advance(part_next[rec.next + i]);
    }
  }
  const uint32_t end = recs[t + 1].succ_begin;
  for (uint32_t i = rec.succ_begin; i < end; ++i) arrive(succ[i]);
}

void Engine::State::finish_job(uint32_t j) {
  Job& job = jobs[j];
  const uint32_t t = job.task;
  const SimTime start = job.start;
  if (job.flow == kNone) {
    Device& dev = devs[job.device];
    if (job.prev != kNone) {
      jobs[job.prev].next = job.next;
    } else {
      dev.first_job = job.next;
    }
    if (job.next != kNone) jobs[job.next].prev = job.prev;
    account(dev);
    if (--dev.num_compute > 0) {
      mark_dirty(job.device);
    } else if (dev.host != kNone) {
      host_activity(dev.host, -1);
    }
    const uint32_t node = job.node;
    free_job(j);
    end_task(t, start, false, node);
  } else {
    mm.remove_flow(job.flow);
    flow_job[job.flow] = kNone;
    const uint32_t node = job.node;
    free_job(j);
    end_task(t, start, true, node);
  }
}

// Sets a job's rate from now on. A completion that moves later keeps its queued event, which
// is re-pushed when it pops early (one push instead of a push now and a stale pop later); a
// completion that moves earlier pushes a new event and bumps the version (lazy invalidation).
inline void Engine::State::retime(uint32_t j, double rate) {
  Job& job = jobs[j];
  if (job.rate == rate) return;
  if (job.rate > 0) {
    job.rem -= job.rate * static_cast<double>(now - job.t_upd);
    if (job.rem < 0) job.rem = 0;
  }
  job.t_upd = now;
  job.rate = rate;
  job.t_end = rate > 0 ? now + ceil_ns(job.rem / rate) : kNever;
  if (job.t_end < job.t_queued) {
    ++job.version;
    job.t_queued = job.t_end;
    push(job.t_end, kJobEnd, j, job.version);
  }
}

// The effects of `node` at one of its ends on device d's counters. Precondition: the node has
// effects (its task's kStartEffectsBit or kEndEffectsBit, whichever `at_end` names, is set).
inline void Engine::State::effects_on_device(uint32_t d, uint32_t node, bool at_end) {
  const CounterEffect* const first = p->effects.data() + p->effect_begin[node];
  const CounterEffect* const last = p->effects.data() + p->effect_begin[node + 1];
  int64_t* const level = &ctr_level[size_t{d} * nc];
  int64_t sum = 0;  // (the total's change, added once: it is not an alias of a level)
  for (const CounterEffect* e = first; e != last; ++e) {
    if (e->at_end != at_end) continue;
    level[e->counter] += e->delta;
    sum += e->delta;
  }
  ctr_total[d] += sum;
  if (!ctr_dirty[d]) {
    ctr_dirty[d] = 1;
    ctr_dirty_devs.push_back(d);
  }
}

// A comm task's effects, once on each of its devices (callers test kStartEffectsBit or
// kEndEffectsBit first: most tasks have no effects at a given end, and this call is not inlined).
void Engine::State::apply_effects(uint32_t t, uint32_t node, bool at_end) {
  const TaskRec& rec = recs[t];
  if (node == kNone) node = p->tasks[t].node;
  if (rec.kind() == TaskKind::kCompute) {
    effects_on_device(rec.device(), node, at_end);
    return;
  }
  ++ctr_epoch;  // once per device, however many of its streams take part
  const uint32_t pb = p->tasks[t].part_begin;
  for (uint32_t pj = pb; pj < pb + rec.part_count(); ++pj) {
    const uint32_t d = p->participants[pj].device;
    if (ctr_stamp[d] == ctr_epoch) continue;
    ctr_stamp[d] = ctr_epoch;
    effects_on_device(d, node, at_end);
  }
}

// Samples the counters of the devices changed in the instant that is ending.
void Engine::State::flush_counters() {
  for (uint32_t d : ctr_dirty_devs) {
    ctr_dirty[d] = 0;
    const int64_t* level = &ctr_level[size_t{d} * nc];
    const int64_t total = ctr_total[d];
    DeviceCounters& out = ctr_out[d];
    if (curves) {
      if (out.curve.back().t == now) {
        out.curve.back().total = total;
      } else {
        out.curve.push_back({now, total});
      }
    }
    if (total > out.peak) {
      out.peak = total;
      out.peak_time = now;
      std::copy(level, level + nc, out.at_peak.begin());
    }
  }
  ctr_dirty_devs.clear();
}

// Applies all rate changes of the current instant: device capacity shares, then max-min flows.
void Engine::State::flush() {
  for (uint32_t d : dirty_devs) {
    Device& dev = devs[d];
    dev.dirty = false;
    if (dev.num_compute == 0) continue;
    double n = static_cast<double>(dev.num_compute);
    if (dev.host != kNone) {  // time-shared host cores
      const Host& h = hosts[dev.host];
      if (static_cast<double>(h.active) > h.cores)
        n *= static_cast<double>(h.active) / (h.cores * h.efficiency);
    }
    const bool comm = dev.comm_slowing > 0;
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
  reset_run(out);
  run_events();
  const size_t n = p->tasks.size();
  if (options->progress) options->progress(finished, n);
  out.makespan = makespan;
  out.stats.events = events;
  out.occupancy.resize(devs.size());
  for (size_t d = 0; d < devs.size(); ++d) {
    account(devs[d]);  // nothing runs after the last event; this closes a stalled run's spans
    out.occupancy[d] = devs[d].occ;
  }
  if (finished < n) report_stall(out);
  timing = nullptr;
  // The timing goes out; `times` keeps the result's old buffer, whose capacity the next
  // prepare or rearm reuses.
  out.timing.swap(times);
}

// The run's dynamic state: devices, hosts, jobs, the queue, counters, the result's buffers.
void Engine::State::reset_run(RunResult& out) {
  const Program& prog = *p;
  const size_t n = prog.tasks.size();
  const size_t nd = prog.devices.size();
  // Every task that ends writes its timing over its issue time and work; the tasks that never
  // ran are reset after the loop (stalls only).
  STRETTO_ASSERT(times.size() == n, "a run needs every task's times entry");
  out.makespan = 0;
  out.stalled = false;
  out.stall.blocked_tasks.clear();
  timing = times.data();
  const size_t num_slots = heads.size();  // the FIFOs in use
  devs.assign(nd, Device{});
  hosts.assign(prog.host_cores.size(), Host{});
  host_devs.clear();
  for (size_t d = 0; d < nd; ++d) {
    devs[d].sm_factor = 1.0 - prog.devices[d].comm_sm_share;
    devs[d].hbm_factor = 1.0 - prog.devices[d].comm_hbm_share;
    const uint32_t h = prog.devices[d].host;
    if (h != kNoHost) {
      devs[d].host = h;
      ++hosts[h].dev_begin;  // counts first, offsets below
    }
  }
  if (!hosts.empty()) {
    uint32_t off = 0;
    for (size_t h = 0; h < hosts.size(); ++h) {
      hosts[h].cores = prog.host_cores[h];
      hosts[h].efficiency = prog.host_share_efficiency;
      const uint32_t count = hosts[h].dev_begin;
      hosts[h].dev_begin = off;
      off += count;
    }
    host_devs.resize(off);
    std::vector<uint32_t> fill(hosts.size());
    for (size_t h = 0; h < hosts.size(); ++h) fill[h] = hosts[h].dev_begin;
    for (size_t d = 0; d < nd; ++d)
      if (devs[d].host != kNone) host_devs[fill[devs[d].host]++] = static_cast<uint32_t>(d);
  }
  dirty_devs.clear();
  dirty_devs.reserve(nd);
  jobs.clear();
  free_jobs.clear();
  jobs.reserve(num_slots + 64);
  flow_job.clear();
  mm.reset(link_caps);
  queue.clear();
  queue.reserve(num_slots + 64);
  ready.clear();
  ready.reserve(std::min<size_t>(n, num_slots + 1024));
  nc = prog.effect_begin.empty() ? 0 : prog.num_counters;
  ctr_dirty_devs.clear();
  if (nc > 0) {
    ctr_level.assign(nd * nc, 0);
    ctr_total.assign(nd, 0);
    ctr_stamp.assign(nd, 0);
    ctr_epoch = 0;
    ctr_dirty.assign(nd, 0);
    out.counters.resize(nd);
    for (DeviceCounters& c : out.counters) {
      c.curve.clear();
      c.curve.push_back({0, 0});
      c.peak = 0;
      c.peak_time = 0;
      c.at_peak.fill(0);
    }
    ctr_out = out.counters.data();
  } else {
    out.counters.clear();
    ctr_out = nullptr;
  }
  now = 0;
  makespan = 0;
  seq = 0;
  events = 0;
  stale = 0;
  requeued = 0;
  max_queue = 0;
  finished = 0;

}

// The event loop: the initially ready tasks, then every instant until the queue is empty.
void Engine::State::run_events() {
  const Program& prog = *p;
  const size_t n = prog.tasks.size();
  // Initially ready: tasks with no conditions, and stream heads whose other conditions hold.
  ready.assign(free_tasks.begin(), free_tasks.end());
  for (const Head& h : heads) advance(h.task);
  drain_ready();
  const auto& progress = options->progress;
  const uint64_t progress_every = std::max<uint64_t>(1, options->progress_every);
  uint64_t next_progress = progress_every;
  if (progress) progress(finished, n);

  for (;;) {
    if (queue.has_now()) {
      const Event e = queue.pop_now();
      switch (static_cast<uint32_t>(e.key & ((1u << detail::kKindBits) - 1))) {
        case kJobEnd: {
          Job& job = jobs[e.id];
          if (job.version != e.version) {
            ++stale;
            continue;
          }
          if (now < job.t_end) {  // postponed since pushed: re-queue at the current completion
            ++requeued;
            job.t_queued = job.t_end;
            if (job.t_end != kNever) push(job.t_end, kJobEnd, e.id, job.version);
            continue;
          }
          ++events;
          finish_job(e.id);
          break;
        }
        case kFixedEnd: {
          ++events;
          const Task& k = prog.tasks[e.id];
          end_task(e.id, now - fixed_duration(prog.comms[k.comm], k.work), true, k.node);
          break;
        }
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
    if (!ctr_dirty_devs.empty()) flush_counters();  // the instant is over
    if (events >= next_progress && progress) {
      progress(finished, n);
      next_progress = events + progress_every;
    }
    if (queue.empty()) break;
    now = queue.advance();
  }

}

void Engine::State::report_stall(RunResult& out) {
  const size_t n = p->tasks.size();
  // Every task that starts also ends (rates are positive once the comm tasks, which always
  // end, release the device), so the unfinished tasks are exactly those that never started.
  // With the queue empty, a task whose start conditions all held (pending == 0) has run:
  // it either started at once or had an issue event. So unfinished <=> pending > 0.
  out.stalled = true;
  auto unfinished = [&](uint32_t t) { return recs[t].pending > 0; };
  for (uint32_t t = 0; t < n; ++t) {
    if (unfinished(t)) timing[t] = TaskTiming{};
  }
  auto& blocked = out.stall.blocked_tasks;
  for (size_t s = 0; s < heads.size() && blocked.size() < kMaxBlocked; ++s) {
    uint32_t t = heads[s].task;  // walk the stream to its first unfinished task
    while (t != kNone && !unfinished(t)) t = next_on_stream(t, heads[s].slot);
    if (t == kNone) continue;
    if (std::find(blocked.begin(), blocked.end(), t) == blocked.end()) blocked.push_back(t);
  }
  for (uint32_t t = 0; t < n && blocked.empty(); ++t) {
    if (unfinished(t)) blocked.push_back(t);
  }
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

RunResult Engine::run(const Program& program, const RunOptions& options) {
  RunResult out;
  run(program, out, options);
  return out;
}

void Engine::run(const Program& program, RunResult& out, const RunOptions& options) {
  const std::vector<std::string> errors = run_checked(program, out, options);
  STRETTO_ASSERT(errors.empty(), errors.front().c_str());
}

std::vector<std::string> Engine::run_checked(const Program& program, RunResult& out,
                                             const RunOptions& options) {
  return run_impl(program, out, options, false);
}

std::vector<std::string> Engine::rerun_checked(const Program& program, RunResult& out,
                                               const RunOptions& options) {
  return run_impl(program, out, options, true);
}

bool Engine::prepared() const {
  return state_ && state_->prepared;
}

std::vector<std::string> Engine::run_impl(const Program& program, RunResult& out,
                                          const RunOptions& options, bool rearm) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!state_) state_ = std::make_unique<State>();
  std::vector<std::string> errors;
  if (!(rearm ? state_->rearm(program, &errors) : state_->prepare(program, &errors)))
    return errors;
  const auto t1 = std::chrono::steady_clock::now();
  state_->curves = options.counter_curves;
  state_->options = &options;
  state_->simulate(out);
  state_->options = nullptr;
  const auto t2 = std::chrono::steady_clock::now();
  state_->prepare_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  out.stats.wall_ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
  return errors;
}

uint64_t Engine::stale_events() const {
  return state_ ? state_->stale : 0;
}
uint64_t Engine::requeued_events() const {
  return state_ ? state_->requeued : 0;
}
uint64_t Engine::max_queue() const {
  return state_ ? state_->max_queue : 0;
}

double Engine::prepare_ms() const {
  return state_ ? state_->prepare_ms : 0;
}
const MaxMin::Stats& Engine::maxmin_stats() const {
  static const MaxMin::Stats kEmpty{};
  return state_ ? state_->mm.stats() : kEmpty;
}

}  // namespace stretto::engine
