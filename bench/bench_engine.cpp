// Engine throughput (DESIGN.md §7): events/s of the discrete-event engine against the ceiling of
// a bare heap push/pop loop measured in the same process.
//
//  BM_HeapHold/<pending>        std::priority_queue hold model (pop min, push t + Exp): ceiling
//  BM_EngineQueueHold/<pending> the same loop on the engine's own event queue (a radix heap)
//  BM_Pipeline1F1B              1,024 devices (64 DP replicas x 16-stage 1F1B, 1,280
//                               microbatches, activation sends over NVLink/IB links): ~10 M events
//  BM_Pipeline64Devices         the same shape on 64 devices, 64 microbatches, re-run by a kept
//                               Engine (GUI re-simulation)
//  BM_Validate1F1B              validate() alone on the 1,024-device program
//  BM_SharedLinks/<flows>       resource-heavy: <flows> concurrent transfers on shared NIC links,
//                               every start/end re-solves max-min over the coupled component
// Counters: events_per_s (events handled / wall time of Engine::run, program setup included),
// tasks, events, stale (superseded completions popped), requeued (completions popped early and
// pushed again), maxq (peak queue length).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <queue>
#include <random>
#include <vector>

#include "event_queue.h"
#include "stretto/engine/engine.h"

namespace {

using stretto::engine::Engine;
using stretto::engine::Participant;
using stretto::engine::Program;
using stretto::engine::RunResult;
using stretto::engine::SimTime;
using stretto::engine::Task;
using stretto::engine::TaskKind;
using stretto::engine::detail::Event;

// ---- (a) the ceiling: a bare heap hold model ----

std::vector<SimTime> exp_increments(size_t n) {
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> exp(1.0 / 1000.0);  // mean 1 µs
  std::vector<SimTime> v(n);
  for (auto& x : v) x = 1 + static_cast<SimTime>(exp(rng));
  return v;
}

struct EventAfter {
  bool operator()(const Event& a, const Event& b) const {
    return a.time > b.time || (a.time == b.time && a.key > b.key);
  }
};

void BM_HeapHold(benchmark::State& state) {
  const size_t pending = static_cast<size_t>(state.range(0));
  const auto inc = exp_increments(1 << 20);
  std::vector<Event> storage;
  storage.reserve(pending + 1);
  std::priority_queue<Event, std::vector<Event>, EventAfter> q(EventAfter{}, std::move(storage));
  uint64_t seq = 0;
  for (size_t i = 0; i < pending; ++i) q.push(Event{inc[i], (seq++) << 2, uint32_t(i), 0});
  size_t k = 0;
  for (auto _ : state) {
    const Event e = q.top();
    q.pop();
    q.push(Event{e.time + inc[k], (seq++) << 2, e.id, e.version});
    k = (k + 1) & ((1 << 20) - 1);
  }
  benchmark::DoNotOptimize(q.top());
  state.counters["events_per_s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_HeapHold)->Arg(1024)->Arg(16384)->Arg(262144);

void BM_EngineQueueHold(benchmark::State& state) {
  const size_t pending = static_cast<size_t>(state.range(0));
  const auto inc = exp_increments(1 << 20);
  stretto::engine::detail::RadixEventQueue q;
  q.reserve(pending + 1);
  uint64_t seq = 0;
  for (size_t i = 0; i < pending; ++i) q.push(Event{inc[i], (seq++) << 2, uint32_t(i), 0});
  size_t k = 0;
  for (auto _ : state) {
    if (!q.has_now()) q.advance();
    const Event e = q.pop_now();
    q.push(Event{e.time + inc[k], (seq++) << 2, e.id, e.version});
    k = (k + 1) & ((1 << 20) - 1);
  }
  benchmark::DoNotOptimize(q.size());
  state.counters["events_per_s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineQueueHold)->Arg(1024)->Arg(16384)->Arg(262144);

// ---- a lean Program writer for large synthetic programs ----

class Writer {
 public:
  explicit Writer(Program& p) : p_(p) {}
  uint32_t task(TaskKind kind, int64_t work, std::initializer_list<Participant> parts,
                std::initializer_list<uint32_t> deps, const uint32_t* links = nullptr,
                uint32_t num_links = 0, int64_t latency = 0, double cap = 0,
                bool mem_bound = false) {
    Task t;
    t.kind = kind;
    t.work = work;
    t.mem_bound = mem_bound;
    t.part_begin = static_cast<uint32_t>(p_.participants.size());
    t.part_count = static_cast<uint32_t>(parts.size());
    p_.participants.insert(p_.participants.end(), parts.begin(), parts.end());
    t.dep_begin = static_cast<uint32_t>(p_.deps.size());
    for (uint32_t d : deps) {
      if (d != UINT32_MAX) p_.deps.push_back(d);
    }
    if (kind == TaskKind::kComm) {
      t.comm = static_cast<uint32_t>(p_.comms.size());
      p_.comms.push_back({latency, cap, static_cast<uint32_t>(p_.task_links.size()), num_links});
      p_.task_links.insert(p_.task_links.end(), links, links + num_links);
    }
    t.node = static_cast<uint32_t>(p_.tasks.size());
    p_.tasks.push_back(t);
    return t.node;
  }

 private:
  Program& p_;
};

// 1F1B on `stages` ranks per replica, `replicas` data-parallel replicas (device = r*stages+s,
// 8 devices per node). F and B are 2 kernels each; activations/gradients go as comm tasks over
// the sender's tx and the receiver's rx link (plus both nodes' NICs across nodes); at the end each
// stage all-reduces its gradients across replicas (one collective flow over the members' NICs).
Program make_1f1b(uint32_t stages, uint32_t replicas, uint32_t micro) {
  Program p;
  p.stream_names = {"compute", "fwd_send", "fwd_recv", "bwd_send", "bwd_recv", "dp"};
  const uint32_t nd = stages * replicas;
  const uint32_t per_node = 8;
  p.devices.resize(nd);
  for (auto& d : p.devices) {
    d.dispatch_ns = 2000;
    d.comm_sm_share = 0.1;
    d.comm_hbm_share = 0.15;
  }
  const uint32_t nn = (nd + per_node - 1) / per_node;
  for (uint32_t d = 0; d < nd; ++d) p.links.push_back({450.0, "tx"});
  for (uint32_t d = 0; d < nd; ++d) p.links.push_back({450.0, "rx"});
  for (uint32_t n = 0; n < nn; ++n) p.links.push_back({50.0, "nic_out"});
  for (uint32_t n = 0; n < nn; ++n) p.links.push_back({50.0, "nic_in"});
  auto tx = [&](uint32_t d) { return d; };
  auto rx = [&](uint32_t d) { return nd + d; };
  auto nic_out = [&](uint32_t d) { return 2 * nd + d / per_node; };
  auto nic_in = [&](uint32_t d) { return 2 * nd + nn + d / per_node; };

  const size_t est_tasks = size_t(replicas) * (4 * micro * stages + 2 * micro * stages + stages);
  p.tasks.reserve(est_tasks);
  p.participants.reserve(est_tasks * 2);
  p.deps.reserve(est_tasks * 2);
  p.task_links.reserve(est_tasks * 2);
  Writer w(p);

  const int64_t kF = 120'000, kB = 240'000;  // ns per kernel (2 per pass)
  const int64_t act_bytes = 16 << 20;
  std::vector<uint32_t> f_out(size_t(stages) * micro), b_out = f_out, sf = f_out, sb = f_out,
                                                       last_b(stages);
  std::vector<uint32_t> last(size_t(replicas) * stages);  // last B kernel of (replica, stage)
  for (uint32_t r = 0; r < replicas; ++r) {
    const uint32_t base = r * stages;
    // 1F1B order per stage: (is_backward, microbatch)
    std::vector<std::vector<std::pair<bool, uint32_t>>> order(stages);
    for (uint32_t s = 0; s < stages; ++s) {
      const uint32_t warm = std::min(stages - s - 1, micro);
      uint32_t nf = 0, nb = 0;
      for (; nf < warm; ++nf) order[s].push_back({false, nf});
      while (nb < micro) {
        if (nf < micro) order[s].push_back({false, nf++});
        order[s].push_back({true, nb++});
      }
    }
    std::vector<size_t> pos(stages, 0);
    std::vector<uint8_t> fdone(size_t(stages) * micro, 0), bdone = fdone;
    auto at = [&](uint32_t s, uint32_t i) { return size_t(s) * micro + i; };
    // Create tasks in a topological order (sweep), then the dispatch lists in program order.
    bool progress = true;
    while (progress) {
      progress = false;
      for (uint32_t s = 0; s < stages; ++s) {
        const uint32_t dev = base + s;
        while (pos[s] < order[s].size()) {
          const auto [bwd, i] = order[s][pos[s]];
          if (!bwd) {
            if (s > 0 && !fdone[at(s - 1, i)]) break;
            const uint32_t in = s > 0 ? sf[at(s - 1, i)] : UINT32_MAX;
            const uint32_t k1 = w.task(TaskKind::kCompute, kF, {{dev, 0}}, {in});
            const uint32_t k2 = w.task(TaskKind::kCompute, kF, {{dev, 0}}, {k1}, nullptr, 0, 0, 0,
                                       /*mem_bound=*/true);
            f_out[at(s, i)] = k2;
            if (s + 1 < stages) {
              const uint32_t to = dev + 1;
              uint32_t links[4] = {tx(dev), rx(to), 0, 0};
              uint32_t nl = 2;
              if (dev / per_node != to / per_node) {
                links[nl++] = nic_out(dev);
                links[nl++] = nic_in(to);
              }
              sf[at(s, i)] =
                  w.task(TaskKind::kComm, act_bytes, {{dev, 1}, {to, 2}}, {k2}, links, nl, 5000, 0);
            }
            fdone[at(s, i)] = 1;
          } else {
            if (s + 1 < stages && !bdone[at(s + 1, i)]) break;
            if (!fdone[at(s, i)]) break;
            const uint32_t in = s + 1 < stages ? sb[at(s + 1, i)] : UINT32_MAX;
            const uint32_t k1 = w.task(TaskKind::kCompute, kB, {{dev, 0}}, {f_out[at(s, i)], in});
            const uint32_t k2 = w.task(TaskKind::kCompute, kB, {{dev, 0}}, {k1});
            b_out[at(s, i)] = k2;
            last_b[s] = k2;
            if (s > 0) {
              const uint32_t to = dev - 1;
              uint32_t links[4] = {tx(dev), rx(to), 0, 0};
              uint32_t nl = 2;
              if (dev / per_node != to / per_node) {
                links[nl++] = nic_out(dev);
                links[nl++] = nic_in(to);
              }
              sb[at(s, i)] =
                  w.task(TaskKind::kComm, act_bytes, {{dev, 3}, {to, 4}}, {k2}, links, nl, 5000, 0);
            }
            bdone[at(s, i)] = 1;
          }
          ++pos[s];
          progress = true;
        }
      }
    }
    // Dispatch lists in each device's program order (recv, kernels, send).
    for (uint32_t s = 0; s < stages; ++s) {
      auto& disp = p.devices[base + s].dispatch;
      disp.reserve(order[s].size() * 4 + 1);
      for (const auto& [bwd, i] : order[s]) {
        if (!bwd) {
          if (s > 0) disp.push_back(sf[at(s - 1, i)]);
          disp.push_back(f_out[at(s, i)] - 1);
          disp.push_back(f_out[at(s, i)]);
          if (s + 1 < stages) disp.push_back(sf[at(s, i)]);
        } else {
          if (s + 1 < stages) disp.push_back(sb[at(s + 1, i)]);
          disp.push_back(b_out[at(s, i)] - 1);
          disp.push_back(b_out[at(s, i)]);
          if (s > 0) disp.push_back(sb[at(s, i)]);
        }
      }
    }
    for (uint32_t s = 0; s < stages; ++s) last[size_t(r) * stages + s] = last_b[s];
  }
  {
    // Gradient all-reduce per stage across replicas: one collective on the dp stream.
    std::vector<uint32_t> links;
    std::vector<Participant> parts;
    std::vector<uint32_t> deps;
    for (uint32_t s = 0; s < stages; ++s) {
      links.clear();
      parts.clear();
      deps.clear();
      for (uint32_t q = 0; q < replicas; ++q) {
        const uint32_t dev = q * stages + s;
        parts.push_back({dev, 5});
        deps.push_back(last[size_t(q) * stages + s]);
        links.push_back(nic_out(dev));
        links.push_back(nic_in(dev));
      }
      std::sort(links.begin(), links.end());
      links.erase(std::unique(links.begin(), links.end()), links.end());
      Task t;
      t.kind = TaskKind::kComm;
      t.work = 256 << 20;
      t.part_begin = static_cast<uint32_t>(p.participants.size());
      t.part_count = static_cast<uint32_t>(parts.size());
      p.participants.insert(p.participants.end(), parts.begin(), parts.end());
      t.dep_begin = static_cast<uint32_t>(p.deps.size());
      p.deps.insert(p.deps.end(), deps.begin(), deps.end());
      t.comm = static_cast<uint32_t>(p.comms.size());
      p.comms.push_back({20000, 0, static_cast<uint32_t>(p.task_links.size()),
                         static_cast<uint32_t>(links.size())});
      p.task_links.insert(p.task_links.end(), links.begin(), links.end());
      const auto id = static_cast<uint32_t>(p.tasks.size());
      t.node = id;
      p.tasks.push_back(t);
      for (uint32_t q = 0; q < replicas; ++q) p.devices[q * stages + s].dispatch.push_back(id);
    }
  }
  return p;
}

// Runs `p` once per benchmark iteration on `e` (buffers reused) and reports the counters.
// events_per_s is a rate over the benchmark's CPU time of the loop (Engine::run only), like the
// heap loops' counters, so that the ratio is not skewed by other processes on a shared machine.
// wall_events_per_s uses RunResult::stats::wall_ms (elapsed time, setup included) instead.
void run_and_report(benchmark::State& state, Engine& e, const Program& p) {
  RunResult r;
  double wall_ms_sum = 0;
  uint64_t events_sum = 0;
  for (auto _ : state) {
    e.run(p, r);
    wall_ms_sum += r.stats.wall_ms;
    events_sum += r.stats.events;
  }
  const size_t tasks = p.tasks.size();
  state.counters["events_per_s"] =
      benchmark::Counter(double(events_sum), benchmark::Counter::kIsRate);
  state.counters["wall_events_per_s"] = double(events_sum) / (wall_ms_sum / 1e3);
  state.counters["events"] = double(r.stats.events);
  state.counters["tasks"] = double(tasks);
  state.counters["stale"] = double(e.stale_events());
  state.counters["requeued"] = double(e.requeued_events());
  state.counters["maxq"] = double(e.max_queue());
  state.counters["prepare_ms"] = e.prepare_ms();
  const auto& mm = e.maxmin_stats();
  if (mm.solves > 0) {
    state.counters["mm_flows_per_solve"] = double(mm.flows_solved) / double(mm.solves);
    state.counters["mm_changed_per_solve"] = double(mm.flows_changed) / double(mm.solves);
  }
  state.counters["makespan_ms"] = double(r.makespan) / 1e6;
  if (r.stalled) state.SkipWithError("program stalled");
}

const Program& pipeline_program() {
  static const Program p = make_1f1b(16, 64, 1280);
  return p;
}

void BM_Pipeline1F1B(benchmark::State& state) {
  const Program& p = pipeline_program();
  Engine engine;
  run_and_report(state, engine, p);
}
BENCHMARK(BM_Pipeline1F1B)->Unit(benchmark::kMillisecond)->Iterations(2);

// Re-simulation of a 64-device plan (4 replicas x 16 stages, 64 microbatches) by a kept Engine,
// as after a GUI edit (DESIGN.md §7 target: <= 100 ms).
void BM_Pipeline64Devices(benchmark::State& state) {
  const Program p = make_1f1b(16, 4, 64);
  Engine engine;
  engine.run(p);  // warm: buffers sized
  run_and_report(state, engine, p);
}
BENCHMARK(BM_Pipeline64Devices)->Unit(benchmark::kMillisecond);

// validate() alone on the same program: the O(size) setup that run() also pays (run() shares
// it: one prepare pass both validates and builds the engine's structures).
void BM_Validate1F1B(benchmark::State& state) {
  const Program& p = pipeline_program();
  for (auto _ : state) benchmark::DoNotOptimize(stretto::engine::validate(p));
  state.counters["tasks"] = double(p.tasks.size());
}
BENCHMARK(BM_Validate1F1B)->Unit(benchmark::kMillisecond)->Iterations(2);

// ---- (c) resource-heavy: many concurrent flows on shared links ----
// `flows` comm streams (8 per device, 8 devices per node) issue 51,200 transfers in all to random
// peers (sender-side tasks, sizes 64 KiB..4 MiB, 2 us latency) over [tx, rx] plus both NICs when
// the peer is on another node, and every device runs a 50 us kernel after each round (comm
// interference). The NICs are shared, so the active flows form one coupled max-min component
// whose size is the concurrency: every flow start/end re-solves all of it.
Program make_shared_links(uint32_t flows) {
  Program p;
  const uint32_t per_dev = 8, nd = flows / per_dev, per_node = 8;
  const uint32_t nn = (nd + per_node - 1) / per_node;
  for (uint32_t s = 0; s < per_dev; ++s) p.stream_names.push_back("comm" + std::to_string(s));
  p.stream_names.push_back("compute");
  p.devices.resize(nd);
  for (auto& d : p.devices) d.comm_sm_share = 0.1;
  for (uint32_t d = 0; d < nd; ++d) p.links.push_back({200.0, "tx"});
  for (uint32_t d = 0; d < nd; ++d) p.links.push_back({200.0, "rx"});
  for (uint32_t n = 0; n < nn; ++n) p.links.push_back({50.0, "nic_out"});
  for (uint32_t n = 0; n < nn; ++n) p.links.push_back({50.0, "nic_in"});
  std::mt19937 rng(3);
  Writer w(p);
  const uint32_t rounds = 51200 / flows;  // ~51 k transfers whatever the concurrency
  for (uint32_t k = 0; k < rounds; ++k) {
    for (uint32_t d = 0; d < nd; ++d) {
      for (uint16_t s = 0; s < per_dev; ++s) {
        const uint32_t peer = (d + 1 + rng() % (nd - 1)) % nd;
        uint32_t links[4] = {d, nd + peer, 0, 0};
        uint32_t nl = 2;
        if (d / per_node != peer / per_node) {
          links[nl++] = 2 * nd + d / per_node;
          links[nl++] = 2 * nd + nn + peer / per_node;
        }
        const int64_t bytes = int64_t(64 << 10) << (rng() % 7);
        const uint32_t t = w.task(TaskKind::kComm, bytes, {{d, s}}, {}, links, nl, 2000, 0);
        p.devices[d].dispatch.push_back(t);
      }
      const uint32_t c = w.task(TaskKind::kCompute, 50'000, {{d, uint16_t(per_dev)}}, {});
      p.devices[d].dispatch.push_back(c);
    }
  }
  return p;
}

void BM_SharedLinks(benchmark::State& state) {
  const Program p = make_shared_links(static_cast<uint32_t>(state.range(0)));
  Engine engine;
  run_and_report(state, engine, p);
}
BENCHMARK(BM_SharedLinks)
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
