// Session, metrics, memory timeline and critical path (see session.h, result.h).
#include "stretto/sim/session.h"

#include "stretto/costmodel/analytic.h"
#include "stretto/plan/estimate.h"
#include "stretto/support/limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <filesystem>
#include <map>

#include "fork_join.h"
#include "radix_sort.h"
#include "replay_groups.h"
#include "replay_order.h"
#include "sample_counters.h"
#include "stretto/engine/engine.h"
#include "stretto/sim/caching_allocator.h"
#include "stretto/sim/outside_allocator.h"

namespace stretto::sim {

using compiler::compile;
using compiler::CompiledPlan;
using compiler::NodeKind;
using engine::SimTime;
using engine::TaskKind;
using plan::CostModelSpec;
using plan::Pass;
using plan::Plan;
using plan::ResolvedPlan;

std::string_view memory_category_name(size_t i) {
  static constexpr std::string_view kN[kMemCategories] = {
      "params",       "grads",        "optimizer",      "activations",
      "comm_buffers", "grad_buckets", "gathered_params"};
  return i < kMemCategories ? kN[i] : "?";
}

namespace {

// build_program's arrays per collective participant, at least: the participant (4 B), its two
// task links (8 B) and one dependency (4 B); see the reserves in build_program.cpp.
constexpr double kBytesPerParticipant = 16;

Diagnostics check_participants(const CompiledPlan& cp) {
  double parts = 0;
  for (const compiler::Node& n : cp.dag.nodes)
    if (n.kind == NodeKind::kCollective)
      parts += static_cast<double>(cp.dag.device_sets[n.devs].devices.size());
  const double need = parts * kBytesPerParticipant;
  if (need <= plan::kUncheckedBytes) return {};
  const uint64_t budget = plan::memory_budget_bytes();
  if (budget == 0 || need <= static_cast<double>(budget)) return {};
  Diagnostic d;
  d.loc.file = cp.plan.file;
  d.loc.json_pointer = "/schedule";
  d.message = fmt::format(
      "the plan's collectives have {:.3g} participants, which need at least {} to simulate, "
      "more than the {} this process may use",
      parts, human_bytes(need), human_bytes(static_cast<double>(budget)));
  d.hint = "use fewer data-parallel replicas or devices (folding replicas does not shrink a "
           "collective's participants)";
  return {d};
}


// One listing of the op program's memory effects per device, in time order, replayed for what
// `what` asks:
//  - reserved: the bytes PyTorch's CUDA caching allocator reserves on each simulated device
//    over the step (caching_allocator.h): the static memory (parameters, gradients, optimizer
//    state: one block each) at the start, then every memory effect in time order, frees of an
//    instant before its allocations (the engine samples its counters at the end of an
//    instant, so the allocated peak seen here is the engine's), except the frees of a task
//    that took no time, which follow its own allocations; effects of one instant and kind keep
//    the order of their tasks and effects (AllocationReplay says how an effect becomes
//    blocks). Devices not in `want` (folded replicas) get 0 and are not replayed. (A device
//    kind "cpu" has no caching allocator: simulate does not ask.)
//  - counters: what the engine would report for `p` at these timings (each device's counters
//    sampled at the end of each instant; the reference in tests/integration/granularity_test.cpp
//    computes them from a listing of its own), from the same listing; for every device (folded replicas take part in no task: nothing to list).
// Devices are replayed independently, on up to `threads` threads (SimOptions::threads), each
// writing only its own devices' slots of the results: the same results for any count.
//
// Reserved bytes only: a device's reserved bytes depend only on its static memory and on the
// sequence of its effects in replay order. `kept` (a Resimulator's, or null) holds each
// device's listing, its replay order and its reserved bytes from the last run; `reuse` says
// they are those of `previous` and `p` has previous's structure (re-costed: the same tasks,
// participants and effects). Then each device's kept order is checked against the new times:
// when it is still sorted it is the order a sort would give (a sort by (time, kind) that keeps
// the listed order of ties is the sort by (time, kind, listed position)), so the effects come
// in the same sequence and the device keeps its reserved bytes; otherwise it is sorted again,
// and the devices sorted again are replayed, one of each group whose sequences (and static
// memory) are equal, the others taking its bytes (replay_groups.h).
// (Out of line, so that profiles show it.)
}  // namespace

struct ReservedOrder {
  struct Listed {
    uint32_t task, effect;
  };
  struct Device {
    std::vector<Listed> listed;   // its effects, in task and effect order
    std::vector<uint32_t> order;  // indices into `listed`, in replay order
    compiler::StaticMemory statics;
  };
  bool valid = false;
  std::vector<char> want;
  std::vector<Device> devices;
  std::vector<int64_t> reserved;  // by device
  uint32_t replayed = 0;          // devices the last run replayed (sorted again, if kept)
  uint32_t replays = 0;           // replays of the allocator it ran (equal sequences share one)
  uint32_t sorted = 0;            // of the replayed, those sorted (equal listings share one sort)
};

namespace {

// The replay's sort key of an effect of a task: its time, then 0 a free, 1 an allocation, 2 a
// free at the end of a task that took no time.
uint64_t effect_key(const engine::CounterEffect& ce, const engine::TaskTiming& tt) {
  const SimTime at = ce.at_end ? tt.end : tt.start;
  const uint64_t kind = ce.delta > 0 ? 1 : ce.at_end && tt.end == tt.start ? 2 : 0;
  return static_cast<uint64_t>(at) << 2 | kind;
}

bool same_static(const compiler::StaticMemory& a, const compiler::StaticMemory& b) {
  return a.params == b.params && a.grads == b.grads && a.optimizer == b.optimizer;
}

// A kept device's static blocks, then its effects in `dev.order`; its reserved bytes.
int64_t replay_device(AllocationReplay& a, const engine::Program& p,
                      const ReservedOrder::Device& dev) {
  a.clear();
  for (const int64_t b : {dev.statics.params, dev.statics.grads, dev.statics.optimizer})
    if (b > 0) a.allocate_static(b);
  for (const uint32_t i : dev.order) {
    const engine::CounterEffect& ce = p.effects[dev.listed[i].effect];
    if (ce.delta > 0)
      a.allocate(ce.counter, ce.delta);
    else
      a.release(ce.counter, -ce.delta);
  }
  return a.reserved();
}

// A device's sequence in replay order: its static blocks, then each effect's (category, bytes).
uint64_t sequence_hash(const engine::Program& p, const ReservedOrder::Device& dev) {
  uint64_t h = hash_step(0, dev.order.size());
  for (const int64_t b : {dev.statics.params, dev.statics.grads, dev.statics.optimizer})
    h = hash_step(h, static_cast<uint64_t>(b));
  for (const uint32_t i : dev.order) {
    const engine::CounterEffect& ce = p.effects[dev.listed[i].effect];
    h = hash_step(hash_step(h, ce.counter), static_cast<uint64_t>(ce.delta));
  }
  return h;
}

bool same_sequence(const engine::Program& p, const ReservedOrder::Device& a,
                   const ReservedOrder::Device& b) {
  if (a.order.size() != b.order.size() || !same_static(a.statics, b.statics)) return false;
  for (size_t k = 0; k < a.order.size(); ++k) {
    const engine::CounterEffect& x = p.effects[a.listed[a.order[k]].effect];
    const engine::CounterEffect& y = p.effects[b.listed[b.order[k]].effect];
    if (x.counter != y.counter || x.delta != y.delta) return false;
  }
  return true;
}

// A moved device's listing before its sort: its static blocks, then each listed effect's
// sort key (under the new times) and (category, bytes). Two devices with equal listings get
// the same order from sort_by_key (the same keys in the same positions) and so the same
// sequence: data-parallel replicas usually do, and one sort serves them.
ListedEffect listed_effect(const engine::Program& p,
                           const std::vector<engine::TaskTiming>& timing,
                           const ReservedOrder::Listed& l) {
  const engine::CounterEffect& ce = p.effects[l.effect];
  return {effect_key(ce, timing[l.task]), ce.counter, ce.delta};
}

uint64_t listed_hash(const engine::Program& p, const std::vector<engine::TaskTiming>& timing,
                     const ReservedOrder::Device& dev) {
  uint64_t seed = 0;
  for (const int64_t b : {dev.statics.params, dev.statics.grads, dev.statics.optimizer})
    seed = hash_step(seed, static_cast<uint64_t>(b));
  return listing_hash(static_cast<uint32_t>(dev.listed.size()), seed,
                      [&](uint32_t i) { return listed_effect(p, timing, dev.listed[i]); });
}

bool same_listed(const engine::Program& p, const std::vector<engine::TaskTiming>& timing,
                 const ReservedOrder::Device& a, const ReservedOrder::Device& b) {
  return same_static(a.statics, b.statics) &&
         same_listing(
             static_cast<uint32_t>(a.listed.size()),
             [&](uint32_t i) { return listed_effect(p, timing, a.listed[i]); },
             static_cast<uint32_t>(b.listed.size()),
             [&](uint32_t i) { return listed_effect(p, timing, b.listed[i]); });
}

// The kept orders, checked against the new times; the devices that moved are grouped by their
// listing (above: one sort per group of equal listings, the first in device order sorting,
// the others taking its order), sorted again (on up to `threads` threads, `parts` by dispatch
// lengths, then ranges of about equal effects), and replayed, one of each group of equal
// sequences (replay_groups.h: the first in device order, both groupings decided on this
// thread), the others taking its bytes. False when a listed task did not run (the listing
// would differ).
bool replay_kept(ReservedOrder& o, const CompiledPlan& cp, const engine::Program& p,
                 const std::vector<engine::TaskTiming>& timing,
                 const std::vector<uint32_t>& parts, int threads) {
  const size_t num_parts = parts.size() - 1;
  const auto D = static_cast<uint32_t>(o.devices.size());
  std::vector<char> failed(num_parts, 0);
  std::vector<char> moved(D, 0);
  std::vector<uint64_t> hash(D, 0);
  fork_join(num_parts, [&](size_t j) {
    for (uint32_t d = parts[j]; d < parts[j + 1]; ++d) {
      if (!(o.want.empty() || o.want[d])) continue;
      ReservedOrder::Device& dev = o.devices[d];
      bool ran = true;
      const bool sorted = in_key_order(
          dev.order.data(), static_cast<uint32_t>(dev.order.size()), [&](uint32_t i) {
            const ReservedOrder::Listed& l = dev.listed[i];
            ran &= timing[l.task].start >= 0;
            return effect_key(p.effects[l.effect], timing[l.task]);
          });
      const compiler::StaticMemory sm =
          d < cp.static_mem.size() ? cp.static_mem[d] : compiler::StaticMemory{};
      if (sorted && ran && same_static(sm, dev.statics)) continue;
      for (const ReservedOrder::Listed& l : dev.listed) ran &= timing[l.task].start >= 0;
      if (!ran) {
        failed[j] = 1;
        return;
      }
      dev.statics = sm;
      moved[d] = 1;
      hash[d] = listed_hash(p, timing, dev);
    }
  });
  if (std::find(failed.begin(), failed.end(), 1) != failed.end()) return false;
  std::vector<uint32_t> to_replay;
  for (uint32_t d = 0; d < D; ++d)
    if (moved[d]) to_replay.push_back(d);
  const std::vector<uint32_t> sorts_for = first_equal_on_threads(
      to_replay, [&](uint32_t d) { return hash[d]; },
      [&](uint32_t a, uint32_t b) { return same_listed(p, timing, o.devices[a], o.devices[b]); },
      [&](uint32_t d) { return static_cast<uint32_t>(o.devices[d].listed.size()); }, threads);
  // The first of each listing group sorted, in contiguous device ranges of about equal effects
  // (then the hash of its sequence); the others take its order.
  std::vector<uint32_t> sorters;
  std::vector<uint32_t> work(D + size_t{1}, 0);
  for (size_t k = 0, d = 0; d < D; ++d) {
    const bool sorts = k < to_replay.size() && to_replay[k] == d && sorts_for[k++] == d;
    if (sorts) sorters.push_back(static_cast<uint32_t>(d));
    work[d + 1] = work[d] + (sorts ? static_cast<uint32_t>(o.devices[d].listed.size()) + 1 : 0);
  }
  std::vector<uint32_t> ranges = device_ranges(work, static_cast<uint32_t>(std::max(threads, 1)));
  fork_join(ranges.size() - 1, [&](size_t j) {
    std::vector<uint64_t> keys;
    for (uint32_t d = ranges[j]; d < ranges[j + 1]; ++d) {
      if (work[d + 1] == work[d]) continue;
      ReservedOrder::Device& dev = o.devices[d];
      const auto n = static_cast<uint32_t>(dev.listed.size());
      keys.resize(n);
      for (uint32_t i = 0; i < n; ++i)
        keys[i] = effect_key(p.effects[dev.listed[i].effect], timing[dev.listed[i].task]);
      sort_by_key(keys.data(), 0, n, dev.order.data());
      hash[d] = sequence_hash(p, dev);
    }
  });
  for (size_t k = 0; k < to_replay.size(); ++k)
    if (sorts_for[k] != to_replay[k]) o.devices[to_replay[k]].order = o.devices[sorts_for[k]].order;
  // Equal listings give equal sequences, so the replay groups are formed over the sorters.
  const std::vector<uint32_t> first = first_equal(
      sorters, [&](uint32_t d) { return hash[d]; },
      [&](uint32_t a, uint32_t b) { return same_sequence(p, o.devices[a], o.devices[b]); });
  std::vector<uint32_t> replays_for(D, UINT32_MAX);  // by sorter: the device it replays with
  for (size_t k = 0; k < sorters.size(); ++k) replays_for[sorters[k]] = first[k];
  // The firsts replayed, in contiguous device ranges of about equal effects.
  for (uint32_t d = 0; d < D; ++d)
    work[d + 1] = work[d] + (replays_for[d] == d ? static_cast<uint32_t>(o.devices[d].order.size()) + 1 : 0);
  ranges = device_ranges(work, static_cast<uint32_t>(std::max(threads, 1)));
  fork_join(ranges.size() - 1, [&](size_t j) {
    AllocationReplay a;
    for (uint32_t d = ranges[j]; d < ranges[j + 1]; ++d)
      if (work[d + 1] != work[d]) o.reserved[d] = replay_device(a, p, o.devices[d]);
  });
  o.replayed = static_cast<uint32_t>(to_replay.size());
  o.sorted = static_cast<uint32_t>(sorters.size());
  o.replays = 0;
  for (size_t k = 0; k < to_replay.size(); ++k) {
    const uint32_t r = replays_for[sorts_for[k]];
    o.replays += r == to_replay[k];
    o.reserved[to_replay[k]] = o.reserved[r];
  }
  return true;
}

struct ReplayWhat {
  bool reserved = true, counters = false, curves = false;
};
struct MemoryReplay {
  std::vector<int64_t> reserved;                 // by device; empty unless asked
  std::vector<engine::DeviceCounters> counters;  // by device; empty unless asked (or none)
};
[[gnu::noinline]] MemoryReplay replay_memory(const CompiledPlan& cp, const engine::Program& p,
                                             const std::vector<engine::TaskTiming>& timing,
                                             const std::vector<char>& want, ReplayWhat what,
                                             int threads, ReservedOrder* kept, bool reuse) {
  MemoryReplay out;
  const auto D = static_cast<uint32_t>(cp.num_devices);
  if (what.reserved) out.reserved.assign(D, 0);
  // (as the engine: a program without counters has none)
  const bool counters = what.counters && !p.effect_begin.empty() && p.num_counters > 0;
  if (counters) {
    out.counters.resize(D);
    for (engine::DeviceCounters& c : out.counters) c.curve.push_back({0, 0});
  }
  auto wanted = [&](uint32_t d) { return d < D && (want.empty() || want[d]); };
  // The devices listed: the wanted ones, or all when counters are asked for.
  auto listed = [&](uint32_t d) { return counters ? d < D : wanted(d); };
  // A task's effects count when it ran and its node has effects.
  const size_t num_nodes = p.effect_begin.empty() ? 0 : p.effect_begin.size() - 1;
  auto ran_with_effects = [&](uint32_t t) {
    if (t >= p.tasks.size() || t >= timing.size() || timing[t].start < 0) return false;
    const uint32_t n = p.tasks[t].node;
    return n < num_nodes && p.effect_begin[n] != p.effect_begin[n + 1];
  };
  struct Ev {
    uint64_t key;  // time << 2 | kind
    uint32_t effect;
    uint32_t index;  // its position in the listing
  };
  // Threads get contiguous device ranges of about equal dispatch lengths.
  std::vector<uint32_t> work(D + size_t{1}, 0);
  for (uint32_t d = 0; d < D; ++d)
    work[d + 1] = work[d] + (listed(d) && d < p.devices.size()
                                 ? static_cast<uint32_t>(p.devices[d].dispatch.size())
                                 : 0);
  const std::vector<uint32_t> parts =
      device_ranges(work, static_cast<uint32_t>(std::max(threads, 1)));
  // Reserved bytes alone, at op granularity, can be kept (above).
  const bool keep = kept && what.reserved && !counters;
  if (keep && reuse && kept->valid && kept->want == want && kept->devices.size() == D &&
      replay_kept(*kept, cp, p, timing, parts, threads)) {
    out.reserved = kept->reserved;
    return out;
  }
  if (kept) {
    kept->valid = false;
    kept->replayed = kept->replays = kept->sorted = 0;
  }
  if (keep) kept->devices.assign(D, {});
  std::vector<char> skipped(parts.size() - 1, 0);  // a task that did not run (not kept)
  // Effects of 0 bytes change no level, but an instant with only them is still a sample of the
  // counters' curves (as the engine samples it): listed when counters are asked for (as kind 1),
  // skipped by the allocator.
  const bool zeros = counters;
  // One device at a time (so that the listing never holds more than one device's effects):
  // the tasks it takes part in are its dispatch list (the engine checked that the list names
  // each of them once), which build_program writes in task order; every
  // effect as (time, kind) with kind 0 a free, 1 an allocation, 2 a free at the end of a task
  // that took no time, sorted by (time, kind) keeping task and effect order; then replayed.
  // Devices [first, last), each into its own slots of `out` (and nothing else shared is
  // written).
  auto replay = [&](uint32_t first, uint32_t last, char& skipped_here) {
    AllocationReplay a;
    std::vector<uint32_t> tasks;
    std::unique_ptr<Ev[]> evs, other;
    size_t cap = 0;
    const uint32_t one_group = 0;
    for (uint32_t d = first; d < last; ++d) {
      if (!listed(d)) continue;
      tasks.clear();
      size_t n = 0;
      if (d < p.devices.size())
        for (const uint32_t t : p.devices[d].dispatch) {
          skipped_here |= t < timing.size() && timing[t].start < 0;
          if (!ran_with_effects(t)) continue;
          tasks.push_back(t);
          n += p.effect_begin[p.tasks[t].node + 1] - p.effect_begin[p.tasks[t].node];
        }
      STRETTO_ASSERT(std::is_sorted(tasks.begin(), tasks.end()),
                     "replay_memory: a dispatch list out of task order");
      if (n > cap) {
        evs.reset(new Ev[n]);  // written before read
        other.reset(new Ev[n]);
        cap = n;
      }
      size_t k = 0;
      for (const uint32_t t : tasks) {
        const uint32_t node = p.tasks[t].node;
        for (uint32_t e = p.effect_begin[node]; e < p.effect_begin[node + 1]; ++e) {
          const engine::CounterEffect& ce = p.effects[e];
          if (ce.delta == 0 && !zeros) continue;
          const SimTime at = ce.at_end ? timing[t].end : timing[t].start;
          const uint64_t kind = ce.delta >= 0                                   ? 1
                                : ce.at_end && timing[t].end == timing[t].start ? 2
                                                                                : 0;
          if (keep && wanted(d)) kept->devices[d].listed.push_back({t, e});
          evs[k] = {static_cast<uint64_t>(at) << 2 | kind, e, static_cast<uint32_t>(k)};
          ++k;
        }
      }
      radix_sort_grouped(
          evs, other, k, std::span<const uint32_t>(&one_group, 1),
          [](const Ev& ev) { return ev.key; }, [](const Ev&) { return 0u; });
      if (counters) {
        // The engine's rule: an instant's effects, then one sample.
        engine::DeviceCounters& c = out.counters[d];
        std::array<int64_t, engine::kMaxCounters> level{};
        int64_t total = 0;
        for (size_t i = 0; i < k;) {
          const uint64_t now = evs[i].key >> 2;
          for (; i < k && evs[i].key >> 2 == now; ++i) {
            const engine::CounterEffect& ce = p.effects[evs[i].effect];
            level[ce.counter] += ce.delta;
            total += ce.delta;
          }
          sample_counters(c, static_cast<SimTime>(now), total, level, p.num_counters,
                          what.curves);
        }
      }
      if (!what.reserved || !wanted(d)) continue;
      a.clear();
      if (d < cp.static_mem.size()) {
        const compiler::StaticMemory& sm = cp.static_mem[d];
        for (const int64_t b : {sm.params, sm.grads, sm.optimizer})
          if (b > 0) a.allocate_static(b);
      }
      for (size_t i = 0; i < k; ++i) {
        const engine::CounterEffect& ce = p.effects[evs[i].effect];
        if (ce.delta > 0)
          a.allocate(ce.counter, ce.delta);
        else if (ce.delta < 0)
          a.release(ce.counter, -ce.delta);
      }
      out.reserved[d] = a.reserved();
      if (keep) {
        ReservedOrder::Device& dev = kept->devices[d];
        dev.order.resize(k);
        for (size_t i = 0; i < k; ++i) dev.order[i] = evs[i].index;
        dev.statics = d < cp.static_mem.size() ? cp.static_mem[d] : compiler::StaticMemory{};
      }
    }
  };
  fork_join(parts.size() - 1, [&](size_t j) { replay(parts[j], parts[j + 1], skipped[j]); });
  if (keep) {
    kept->want = want;
    kept->reserved = out.reserved;
    for (uint32_t d = 0; d < D; ++d) kept->replayed += wanted(d);
    kept->replays = kept->sorted = kept->replayed;
    kept->valid = std::find(skipped.begin(), skipped.end(), 1) == skipped.end();
  } else if (kept && what.reserved) {
    for (uint32_t d = 0; d < D; ++d) kept->replayed += wanted(d);
    kept->replays = kept->sorted = kept->replayed;
  }
  return out;
}
}  // namespace

namespace {

// A Resimulator's engine, lent to one simulate_impl.
struct KeptEngine {
  engine::Engine* engine = nullptr;
  bool prepared_previous = false;  // it holds the preparation of the previous result's program
  bool rerun = false;              // out: the run re-used that preparation
  bool prepared = false;           // out: it holds the preparation of the new result's program
  ReservedOrder* order = nullptr;  // in and out: the reserved replay's order (replay_memory)
  bool order_previous = false;     // `order` is that of the previous result
  // in: a program of the previous result's structure whose storage a re-costing takes instead
  // of a copy of the previous result's (Resimulator::simulate's `storage`); may be null
  engine::Program* storage = nullptr;
  bool recosted = false;  // out: the program was re-costed (recost_program), not built
};

Expected<Result> simulate_impl(const CompiledPlan& cp, const cost::CostModel& cm,
                               const SimOptions& opt, const Result* previous,
                               KeptEngine* kept = nullptr) {
  auto t0 = std::chrono::steady_clock::now();
  // Refuse before allocating when the estimate exceeds the memory budget (estimate.h).
  if (auto big = plan::check_memory_budget(cp.plan, nullptr, opt.fold_replicas, true);
      !big.empty()) {
    for (Diagnostic& d : big) d.loc.file = cp.plan.file;
    return fail(std::move(big));
  }
  Result r;
  const int D = cp.num_devices;
  // Replica folding: keep the first device of every class.
  std::vector<char> keep;
  std::vector<int> rep_of(D, -1);
  for (const auto& c : cp.classes)
    for (int d : c.devices) rep_of[d] = c.devices[0];
  // Devices that time-share host cores (cost model host_cores) slow each other down by how
  // many of them compute at once, replicas included: such programs are not folded.
  if (opt.fold_replicas && !shares_host_cores(cp, cm.interference())) {
    keep.assign(D, 0);
    for (const auto& c : cp.classes) keep[c.devices[0]] = 1;
    // Exact only if every transfer pair is kept on both sides or on neither.
    for (const auto& n : cp.dag.nodes) {
      if (n.kind != NodeKind::kTransfer) continue;
      const auto& s = cp.dag.device_sets[n.devs].devices;
      const auto& t = cp.dag.device_sets[n.devs2].devices;
      for (size_t i = 0; i < s.size(); ++i)
        if (keep[s[i]] != keep[t[i]]) {
          keep.clear();  // not symmetric: simulate everything
          break;
        }
      if (keep.empty()) break;
    }
  }
  r.folded = !keep.empty();
  // Folded or not, every collective keeps all of its participants (a folded DP all-reduce over
  // 10^6 replicas still lists 10^6): refuse a program whose participant arrays alone exceed
  // the budget, before build_program reserves them.
  if (auto big = check_participants(cp); !big.empty()) return fail(std::move(big));
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point a) {
    return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
  };
  if (opt.progress) opt.progress("building", 0.0);
  r.host_compute = cm.interference().host_compute;
  std::optional<engine::Program> recosted;
  if (previous && previous->folded == r.folded && previous->host_compute == r.host_compute)
    recosted = recost_program(kept && kept->storage ? std::move(*kept->storage) : previous->program,
                              cp, cm, r.folded ? &keep : nullptr);
  const bool same_structure = recosted.has_value();
  if (kept) kept->recosted = same_structure;
  r.program = recosted ? std::move(*recosted) : build_program(cp, cm, r.folded ? &keep : nullptr);
  // Pass granularity: the engine runs the merged program; op timings are rebuilt from it.
  std::optional<PassProgram> passes;
  if (opt.granularity == Granularity::kPass) passes = coarsen_to_passes(cp, r.program);
  const engine::Program& engine_program = passes ? passes->program : r.program;
  r.engine_tasks = engine_program.tasks.size();
  r.phases.build_ms = ms_since(t0);
  engine::RunResult run;
  {
    // Scoped (its scratch state is freed before the metrics are computed) unless a Resimulator
    // keeps it.
    engine::Engine scoped;
    engine::Engine& engine = kept ? *kept->engine : scoped;
    const bool rerun = kept && kept->prepared_previous && same_structure && !passes;
    // One pass validates the program and prepares the run.
    engine::RunOptions ro;
    ro.counter_curves = opt.memory_curves;
    if (opt.progress) {
      ro.progress = [&opt](uint64_t finished, uint64_t total) {
        opt.progress("simulating",
                     total > 0 ? static_cast<double>(finished) / static_cast<double>(total) : 1.0);
      };
    }
    auto errs = rerun ? engine.rerun_checked(engine_program, run, ro)
                      : engine.run_checked(engine_program, run, ro);
    if (kept) {
      kept->rerun = rerun;
      kept->prepared = errs.empty() && !passes;  // (the coarse program does not outlive this)
    }
    if (!errs.empty()) {
      Diagnostic d;
      d.message = "internal error: the engine program is malformed: " + errs.front();
      d.loc.file = cp.plan.file;
      return fail(std::move(d));
    }
    r.phases.prepare_ms = engine.prepare_ms();
    r.phases.run_ms = run.stats.wall_ms - engine.prepare_ms();
  }
  const auto t_metrics = Clock::now();
  if (opt.progress) opt.progress("metrics", 0.0);
  if (run.stalled) {
    Diagnostic d;
    d.message = "the simulation stalled (deadlock at run time); blocked ops:";
    for (size_t i = 0; i < run.stall.blocked_tasks.size() && i < 6; ++i) {
      uint32_t t = run.stall.blocked_tasks[i];
      if (passes) t = passes->members[passes->member_begin[t]];
      d.message += "\n    " + cp.dag.node_name(r.node_of(t), cp.model);
    }
    d.loc.file = cp.plan.file;
    d.hint = "a send/recv or collective is ordered differently on its peers";
    return fail(std::move(d));
  }
  const bool engine_counted_nothing = passes.has_value();
  if (passes) {
    r.timing = expand_timing(*passes, r.program, run.timing);
    passes.reset();
  } else {
    r.timing = std::move(run.timing);
  }
  r.step_time = run.makespan;
  r.events = run.stats.events;

  // ---- per-device metrics: busy, comm and exposed comm are the engine's occupancy; the
  // memory curve is its counters (dynamic categories) on top of the static memory ----
  const auto& dag = cp.dag;
  const double capacity = cp.plan.cluster.device.memory_GiB * 1024.0 * 1024.0 * 1024.0;
  r.devices.resize(D);
  double busy_sum = 0;
  const bool cpu = cp.plan.cluster.device.kind == "cpu";
  // Reserved memory (not on a CPU device) and, at pass granularity (the engine ran the merged
  // program, which has no counters), the op program's counters, from one listing.
  std::vector<int64_t> reserved(static_cast<size_t>(D), 0);
  if (kept) {
    kept->order->valid = kept->order->valid && !cpu;
    kept->order->replayed = kept->order->replays = kept->order->sorted = 0;
  }
  if (!cpu || engine_counted_nothing) {
    ReplayWhat what;
    what.reserved = !cpu;
    what.counters = engine_counted_nothing;
    what.curves = opt.memory_curves;
    MemoryReplay mem = replay_memory(cp, r.program, r.timing,
                                     r.folded ? keep : std::vector<char>{}, what, opt.threads,
                                     kept ? kept->order : nullptr,
                                     kept && kept->order_previous && same_structure);
    if (!cpu) reserved = std::move(mem.reserved);
    if (engine_counted_nothing) run.counters = std::move(mem.counters);
  }
  const std::vector<OutsideAllocator> outside = outside_allocator(cp);
  engine::DeviceCounters no_counters;  // for a program without counters: static memory only
  no_counters.curve.push_back({0, 0});
  for (int d = 0; d < D; ++d) {
    DeviceMetrics& m = r.devices[d];
    m.id = d;
    if (r.folded && !keep[d]) continue;  // filled from the representative below
    m.busy = run.occupancy[d].busy;
    m.comm = run.occupancy[d].comm;
    m.exposed_comm = run.occupancy[d].exposed_comm;
    std::array<int64_t, kMemCategories> base{};
    if (static_cast<size_t>(d) < cp.static_mem.size()) {
      base[0] = cp.static_mem[d].params;
      base[1] = cp.static_mem[d].grads;
      base[2] = cp.static_mem[d].optimizer;
    }
    const int64_t base_total = base[0] + base[1] + base[2];
    engine::DeviceCounters& c = run.counters.empty() ? no_counters : run.counters[d];
    if (run.counters.empty())
      m.memory = c.curve;  // the shared fallback: copied, not moved
    else
      m.memory = std::move(c.curve);
    for (MemorySample& s : m.memory) s.total += base_total;
    m.peak_memory = base_total + c.peak;
    m.peak_time = c.peak_time;
    m.breakdown = base;
    for (size_t k = 0; k < static_cast<size_t>(compiler::MemCategory::kCount); ++k)
      m.breakdown[3 + k] = c.at_peak[k];
    m.peak_reserved = cpu ? m.peak_memory : reserved[static_cast<size_t>(d)];
    assert(m.peak_reserved >= m.peak_memory);
  }
  for (int d = 0; d < D; ++d) {
    DeviceMetrics& m = r.devices[d];
    if (r.folded && !keep[d] && rep_of[d] >= 0) {
      // Everything but the memory curve, which can be large: folded devices share it.
      DeviceMetrics& rep = r.devices[rep_of[d]];
      std::vector<MemorySample> curve = std::move(rep.memory);
      m = rep;
      rep.memory = std::move(curve);
      m.id = d;
      m.folded = true;
      m.representative = rep_of[d];
    }
    m.cuda_context = outside[static_cast<size_t>(d)].cuda_context;
    m.nccl_buffers = outside[static_cast<size_t>(d)].nccl;
    // The device runs out of memory when the allocator cannot get a segment: reserved bytes
    // plus what is held outside the allocator (docs/semantics.md "Capacity").
    m.over_capacity = static_cast<double>(m.peak_device()) > capacity;
    m.bubble = r.step_time - m.busy;
    m.bubble_ratio = r.step_time > 0 ? static_cast<double>(m.bubble) / r.step_time : 0;
    r.exposed_comm += m.exposed_comm;
    busy_sum += static_cast<double>(m.busy);
  }
  r.bubble_ratio =
      (r.step_time > 0 && D > 0)
          ? 1.0 - busy_sum / (static_cast<double>(D) * static_cast<double>(r.step_time))
          : 0;
  // ---- model FLOPs: each op once per data-parallel replica; recomputed forwards are not
  // model FLOPs (MFU as in Korthikanti et al. 2022), the optimizer step has none ----
  double flops = 0;
  for (const auto& n : dag.nodes) {
    if (n.kind != NodeKind::kCompute || n.recompute || n.tags.pass == Pass::kNone) continue;
    const compiler::ModelOp& op = cp.model.ops[n.op];
    double f = n.tags.pass == Pass::kF    ? op.fwd_flops
               : n.tags.pass == Pass::kB  ? op.bi_flops + op.bw_flops
               : n.tags.pass == Pass::kBI ? op.bi_flops
                                          : op.bw_flops;
    // (MoE: a balanced router's FLOPs; imbalance and capacity padding cost time, not FLOPs)
    flops += f * op.model_flops_share *
             static_cast<double>(dag.device_sets[n.devs].devices.size() / n.tp);
  }
  r.model_flops = flops;
  // Against the peak of the dtype the GEMMs run in (an fp8 plan's tensor cores peak at twice
  // the bf16 rate), as the cost model prices them.
  const double peak = cp.plan.cluster.device.peak_tflops * 1e12 * cost::dtype_peak_factor(cp.model.dtype);
  r.mfu = r.step_time > 0 ? flops / (r.step_time * 1e-9 * D * peak) : 0;
  // tokens: every microbatch of every data-parallel replica of the first op
  int64_t replicas = 0;
  for (const auto& n : dag.nodes)
    if (n.kind == NodeKind::kCompute && n.op == 0 && n.tags.pass == Pass::kF) {
      replicas = static_cast<int64_t>(dag.device_sets[n.devs].devices.size() / n.tp);
      break;
    }
  r.tokens_per_s = r.step_time > 0 ? static_cast<double>(cp.model.tokens_per_microbatch) *
                                         cp.num_microbatches * replicas / (r.step_time * 1e-9)
                                   : 0;
  r.phases.metrics_ms = ms_since(t_metrics);
  r.sim_wall_ms = ms_since(t0);
  return r;
}

}  // namespace

Expected<Result> simulate(const CompiledPlan& cp, const cost::CostModel& cm,
                          const SimOptions& opt) {
  return simulate_impl(cp, cm, opt, nullptr);
}

Expected<Result> simulate(const CompiledPlan& cp, const cost::CostModel& cm,
                          const SimOptions& opt, const Result& previous) {
  return simulate_impl(cp, cm, opt, &previous);
}

Expected<Result> Resimulator::simulate(const CompiledPlan& cp, const cost::CostModel& cm,
                                       const SimOptions& opt, const Result* previous,
                                       engine::Program* storage) {
  KeptEngine kept;
  kept.engine = &engine_;
  kept.storage = previous ? storage : nullptr;
  const bool own = previous && last_ && previous->resimulation == last_;
  kept.prepared_previous = own && engine_prepared_ && engine_.prepared();
  kept.order = order_.get();
  kept.order_previous = own;
  Expected<Result> r = simulate_impl(cp, cm, opt, previous, &kept);
  reused_ = kept.rerun;
  recosted_ = r && kept.recosted;
  engine_prepared_ = kept.prepared;
  replayed_ = r ? order_->replayed : 0;
  replays_ = r ? order_->replays : 0;
  sorted_ = r ? order_->sorted : 0;
  last_ = r ? std::make_shared<const int>(0) : nullptr;
  if (r) r->resimulation = last_;
  return r;
}

Resimulator::Resimulator() : order_(std::make_unique<ReservedOrder>()) {}
Resimulator::~Resimulator() = default;

CriticalPathBreakdown breakdown(const std::vector<CriticalStep>& path) {
  CriticalPathBreakdown b;
  SimTime prev_end = 0;
  for (const CriticalStep& s : path) {
    b.wait += std::max<SimTime>(0, s.start - prev_end);
    (s.kind == TaskKind::kComm ? b.comm : b.compute) += s.end - s.start;
    prev_end = std::max(prev_end, s.end);
  }
  return b;
}

std::vector<CriticalStep> critical_path(const CompiledPlan& cp, const Result& r) {
  const engine::Program& p = r.program;
  const size_t T = p.tasks.size();
  std::vector<CriticalStep> out;
  if (T == 0) return out;
  // Stream predecessor of each task on each of its (device, stream) lanes, from dispatch order.
  std::map<std::pair<uint32_t, uint16_t>, uint32_t> last_on_lane;
  std::vector<std::vector<uint32_t>> lane_pred(T);
  for (uint32_t d = 0; d < p.devices.size(); ++d)
    for (uint32_t t : p.devices[d].dispatch) {
      const engine::Task& tk = p.tasks[t];
      for (uint32_t k = 0; k < tk.part_count; ++k) {
        const auto& pa = p.participants[tk.part_begin + k];
        if (pa.device != d) continue;
        auto key = std::make_pair(pa.device, pa.stream);
        if (auto it = last_on_lane.find(key); it != last_on_lane.end())
          lane_pred[t].push_back(it->second);
        last_on_lane[key] = t;
      }
    }
  uint32_t cur = 0;
  for (uint32_t t = 1; t < T; ++t)
    if (r.timing[t].end > r.timing[cur].end) cur = t;
  auto name = [&](uint32_t t) { return cp.dag.node_name(r.node_of(t), cp.model); };
  std::vector<char> seen(T, 0);
  while (!seen[cur]) {
    seen[cur] = 1;
    const SimTime start = r.timing[cur].start;
    // The binding constraint: the predecessor that ended last. Inputs (dependencies, and stream
    // predecessors that are DAG predecessors too: the program leaves out dependencies that a
    // stream's FIFO implies) come first, ties to the lowest task id; then a stream predecessor
    // that is no input, only if it ended strictly later.
    int64_t best_end = -1;
    uint32_t best = UINT32_MAX;
    std::string why;
    PathWait wait = PathWait::kDispatch;
    auto feeds = [&](uint32_t pred_task) {
      const uint32_t n = r.node_of(cur), pn = r.node_of(pred_task);
      for (uint32_t k = cp.dag.pred_begin[n]; k < cp.dag.pred_begin[n + 1]; ++k)
        if (cp.dag.edges[cp.dag.pred[k]].from == pn) return true;
      return false;
    };
    // An input: an order directive's edge (through a barrier, or a temporal DAG edge), data
    // over a link (a transfer or collective) or a compute op's output.
    auto input_kind = [&](uint32_t d) {
      if (p.tasks[d].kind == TaskKind::kBarrier) return PathWait::kOrder;
      const uint32_t n = r.node_of(cur), pn = r.node_of(d);
      for (uint32_t k = cp.dag.pred_begin[n]; k < cp.dag.pred_begin[n + 1]; ++k) {
        const compiler::Edge& e = cp.dag.edges[cp.dag.pred[k]];
        if (e.from == pn && e.kind == compiler::EdgeKind::kTemporal) return PathWait::kOrder;
      }
      return p.tasks[d].kind == TaskKind::kComm ? PathWait::kLink : PathWait::kData;
    };
    auto consider_input = [&](uint32_t d) {
      const int64_t e = r.timing[d].end;
      if (e > best_end || (e == best_end && d < best))
        best_end = e, best = d, why = "waited for its input", wait = input_kind(d);
    };
    for (uint32_t d : p.deps_of(cur)) consider_input(d);
    uint32_t lane_only = UINT32_MAX;  // the latest stream predecessor that is no input
    for (uint32_t d : lane_pred[cur]) {
      if (feeds(d))
        consider_input(d);
      else if (lane_only == UINT32_MAX || r.timing[d].end > r.timing[lane_only].end)
        lane_only = d;
    }
    if (lane_only != UINT32_MAX && r.timing[lane_only].end > best_end)
      best_end = r.timing[lane_only].end, best = lane_only, why = "waited for its stream",
      wait = PathWait::kStream;
    CriticalStep s;
    s.task = cur;
    s.what = name(cur);
    s.kind = p.tasks[cur].kind;
    s.device = r.device_of(cur);
    s.start = start;
    s.end = r.timing[cur].end;
    if (best == UINT32_MAX || best_end <= 0) {
      s.waited_for = start > 0 ? "host dispatch" : "nothing (step start)";
      s.wait = start > 0 ? PathWait::kDispatch : PathWait::kStart;
      out.push_back(std::move(s));
      break;
    }
    if (best_end < start)
      why += fmt::format(", then {} ns more (dispatch or a rendezvous peer)", start - best_end);
    s.waited_for = why;
    s.wait = wait;
    out.push_back(std::move(s));
    cur = best;
  }
  std::reverse(out.begin(), out.end());
  // A barrier has no device of its own: it joins ops of one device, so show the device of
  // the step before it (or after it, at the start of the path).
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].device < 0) {
      if (i > 0 && out[i - 1].device >= 0)
        out[i].device = out[i - 1].device;
      else if (i + 1 < out.size())
        out[i].device = out[i + 1].device;
    }
  return out;
}

// ---------------------------------------------------------------- Session

ResolvedPlan resolve_plan(const CompiledPlan& cp) {
  ResolvedPlan r = cp.resolved;
  const CostModelSpec& cm = cp.plan.costmodel;
  const char* kind = cm.kind == CostModelSpec::Kind::kFixed      ? "fixed"
                     : cm.kind == CostModelSpec::Kind::kProfiled ? "profiled"
                                                                 : "analytic";
  // "analytic" is the default kind: the source says whether the plan writes it.
  const bool written = cm.options.contains("kind") || cm.kind != CostModelSpec::Kind::kAnalytic;
  r.fields.push_back({"costmodel", cm.pointer + "/kind", kind,
                      written ? plan::ValueSource::kPlan : plan::ValueSource::kDefault});
  for (plan::ResolvedField& f : cost::resolved_options(cm, cp.plan.cluster))
    r.fields.push_back(std::move(f));
  return r;
}

ResolvedPlan Session::resolved() const { return resolve_plan(*cp_); }

Expected<Session> Session::open(const std::string& path) {
  auto src = plan::JsonSource::load(path);
  if (!src) return fail(src.error());
  auto plan = plan::parse_plan(*src);
  if (!plan) return fail(plan.error());
  auto cp = compile(*plan, &*src);
  if (!cp) return fail(cp.error());
  Session s;
  s.base_dir_ = std::filesystem::path(path).parent_path().string();
  auto cm = cost::make_cost_model(cp->plan.costmodel, cp->plan.cluster, s.base_dir_, &*src);
  if (!cm) return fail(cm.error());
  s.set_compiled(std::move(*cp));
  s.cm_ = std::shared_ptr<const cost::CostModel>(std::move(*cm));
  return s;
}

Expected<Session> Session::from_plan(Plan plan, std::string base_dir,
                                     const compiler::CompileOptions& copt) {
  auto cp = compile(plan, nullptr, copt);
  if (!cp) return fail(cp.error());
  auto cm = cost::make_cost_model(cp->plan.costmodel, cp->plan.cluster, base_dir);
  if (!cm) return fail(cm.error());
  Session s;
  s.base_dir_ = std::move(base_dir);
  s.copt_ = copt;
  s.set_compiled(std::move(*cp));
  s.cm_ = std::shared_ptr<const cost::CostModel>(std::move(*cm));
  return s;
}

Expected<Session> Session::from_text(std::string text, std::string file, std::string base_dir) {
  auto src = plan::JsonSource::parse(std::move(text), std::move(file));
  if (!src) return fail(src.error());
  return from_source(*src, std::move(base_dir));
}

Expected<Session> Session::from_source(const plan::JsonSource& src, std::string base_dir) {
  auto plan = plan::parse_plan(src);
  if (!plan) return fail(plan.error());
  auto cp = compile(*plan, &src);
  if (!cp) return fail(cp.error());
  Session s;
  s.base_dir_ = std::move(base_dir);
  auto cm = cost::make_cost_model(cp->plan.costmodel, cp->plan.cluster, s.base_dir_, &src);
  if (!cm) return fail(cm.error());
  s.set_compiled(std::move(*cp));
  s.cm_ = std::shared_ptr<const cost::CostModel>(std::move(*cm));
  return s;
}

Expected<Result> Session::simulate(const SimOptions& opt) const {
  return sim::simulate(*cp_, *cm_, opt);
}

Expected<Result> Session::simulate(const SimOptions& opt, const Result& previous) const {
  return sim::simulate(*cp_, *cm_, opt, previous);
}

void Session::set_compiled(CompiledPlan&& cp) {
  // Made non-const (shared as const): set_costmodel may take it over from a retired session
  // that no one else holds.
  cp_ = std::make_shared<CompiledPlan>(std::move(cp));
  compile_ = std::make_shared<const char>(0);
}

Expected<void> Session::set_costmodel(const CostModelSpec& spec) {
  return set_costmodel(spec, nullptr);
}

Expected<void> Session::set_costmodel(const CostModelSpec& spec,
                                      std::shared_ptr<const Session> retired) {
  // kernel_style eager changes the compiled plan's saved activations (compiler/model.h): a
  // compile of its own.
  if (plan::eager_kernel_style(spec) != plan::eager_kernel_style(cp_->plan.costmodel)) {
    Plan plan = cp_->plan;
    plan.costmodel = spec;
    return set_plan(std::move(plan));
  }
  auto cm = cost::make_cost_model(spec, cp_->plan.cluster, base_dir_);
  if (!cm) return fail(cm.error());
  // `retired`'s compiled plan when it is this one's but for the cost model (the same compile,
  // another object) and no one else holds it: the retired session goes, and no reader can see
  // the plan change. Otherwise a copy of this one's.
  std::shared_ptr<const CompiledPlan> storage;
  if (retired && retired.use_count() == 1 && compile_ && retired->compile_ == compile_ &&
      retired->cp_ != cp_) {
    storage = retired->cp_;
    retired.reset();
  }
  const bool alone = storage && storage.use_count() == 1;
  // (use_count is a relaxed load: the fence orders the last holder's reads, before its
  // release of the count, before the writes below)
  if (alone) std::atomic_thread_fence(std::memory_order_acquire);
  std::shared_ptr<CompiledPlan> cp = alone
                                         ? std::const_pointer_cast<CompiledPlan>(std::move(storage))
                                         : std::make_shared<CompiledPlan>(*cp_);
  cp->plan.costmodel = spec;
  cp_ = std::move(cp);
  cm_ = std::shared_ptr<const cost::CostModel>(std::move(*cm));
  return {};
}

Expected<void> Session::set_plan(Plan plan) {
  auto cp = compile(plan, nullptr, copt_);
  if (!cp) return fail(cp.error());
  auto cm = cost::make_cost_model(cp->plan.costmodel, cp->plan.cluster, base_dir_);
  if (!cm) return fail(cm.error());
  set_compiled(std::move(*cp));
  cm_ = std::shared_ptr<const cost::CostModel>(std::move(*cm));
  return {};
}

Expected<void> Session::set_directive(size_t index, const plan::Directive& d) {
  Plan plan = cp_->plan;
  if (index >= plan.schedule.size()) {
    Diagnostic diag;
    diag.message =
        fmt::format("no directive {} (the schedule has {})", index, plan.schedule.size());
    return fail(std::move(diag));
  }
  plan.schedule[index] = d;
  plan.schedule[index].index = static_cast<int>(index);
  return set_plan(std::move(plan));
}

}  // namespace stretto::sim
