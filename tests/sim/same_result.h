#pragma once
// Field-by-field comparison of engine programs and simulation Results (tests/sim).
#include <gtest/gtest.h>

#include "stretto/sim/session.h"

namespace stretto::sim {

inline void expect_same_program(const engine::Program& a, const engine::Program& b) {
  EXPECT_EQ(a.stream_names, b.stream_names);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  size_t bad = 0;
  for (size_t t = 0; t < a.tasks.size() && bad < 5; ++t) {
    const engine::Task &x = a.tasks[t], &y = b.tasks[t];
    const bool same = x.kind == y.kind && x.mem_bound == y.mem_bound &&
                      x.overlapped == y.overlapped && x.node == y.node && x.work == y.work &&
                      x.part_begin == y.part_begin && x.part_count == y.part_count &&
                      x.dep_begin == y.dep_begin && x.comm == y.comm;
    if (!same) ++bad;
    EXPECT_TRUE(same) << "task " << t << ": work " << x.work << " vs " << y.work;
  }
  ASSERT_EQ(a.comms.size(), b.comms.size());
  for (size_t c = 0; c < a.comms.size(); ++c) {
    EXPECT_EQ(a.comms[c].latency_ns, b.comms[c].latency_ns) << "comm " << c;
    EXPECT_EQ(a.comms[c].rate_cap, b.comms[c].rate_cap) << "comm " << c;
    EXPECT_EQ(a.comms[c].link_begin, b.comms[c].link_begin) << "comm " << c;
    ASSERT_EQ(a.comms[c].link_count, b.comms[c].link_count) << "comm " << c;
  }
  ASSERT_EQ(a.participants.size(), b.participants.size());
  for (size_t k = 0; k < a.participants.size(); ++k) {
    EXPECT_EQ(a.participants[k].device, b.participants[k].device);
    EXPECT_EQ(a.participants[k].stream, b.participants[k].stream);
  }
  EXPECT_EQ(a.deps, b.deps);
  EXPECT_EQ(a.task_links, b.task_links);
  ASSERT_EQ(a.links.size(), b.links.size());
  for (size_t l = 0; l < a.links.size(); ++l) {
    EXPECT_EQ(a.links[l].capacity, b.links[l].capacity);
    EXPECT_EQ(a.links[l].name, b.links[l].name);
  }
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t d = 0; d < a.devices.size(); ++d) {
    EXPECT_EQ(a.devices[d].dispatch, b.devices[d].dispatch) << "device " << d;
    EXPECT_EQ(a.devices[d].dispatch_ns, b.devices[d].dispatch_ns) << "device " << d;
    EXPECT_EQ(a.devices[d].comm_sm_share, b.devices[d].comm_sm_share) << "device " << d;
    EXPECT_EQ(a.devices[d].comm_hbm_share, b.devices[d].comm_hbm_share) << "device " << d;
    EXPECT_EQ(a.devices[d].host, b.devices[d].host) << "device " << d;
  }
  EXPECT_EQ(a.host_cores, b.host_cores);
  EXPECT_EQ(a.host_share_efficiency, b.host_share_efficiency);
  EXPECT_EQ(a.num_counters, b.num_counters);
  EXPECT_EQ(a.effect_begin, b.effect_begin);
  ASSERT_EQ(a.effects.size(), b.effects.size());
  for (size_t e = 0; e < a.effects.size(); ++e) {
    EXPECT_EQ(a.effects[e].counter, b.effects[e].counter);
    EXPECT_EQ(a.effects[e].at_end, b.effects[e].at_end);
    EXPECT_EQ(a.effects[e].delta, b.effects[e].delta);
  }
}

// Every field but the wall-clock phases.
inline void expect_same_result(const Result& a, const Result& b) {
  EXPECT_EQ(a.step_time, b.step_time);
  EXPECT_EQ(a.bubble_ratio, b.bubble_ratio);
  EXPECT_EQ(a.exposed_comm, b.exposed_comm);
  EXPECT_EQ(a.mfu, b.mfu);
  EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.model_flops, b.model_flops);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.engine_tasks, b.engine_tasks);
  EXPECT_EQ(a.folded, b.folded);
  EXPECT_EQ(a.host_compute, b.host_compute);
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t d = 0; d < a.devices.size(); ++d) {
    const DeviceMetrics &x = a.devices[d], &y = b.devices[d];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.busy, y.busy) << "device " << d;
    EXPECT_EQ(x.bubble, y.bubble) << "device " << d;
    EXPECT_EQ(x.exposed_comm, y.exposed_comm) << "device " << d;
    EXPECT_EQ(x.comm, y.comm) << "device " << d;
    EXPECT_EQ(x.bubble_ratio, y.bubble_ratio) << "device " << d;
    EXPECT_EQ(x.peak_memory, y.peak_memory) << "device " << d;
    EXPECT_EQ(x.peak_time, y.peak_time) << "device " << d;
    EXPECT_EQ(x.peak_reserved, y.peak_reserved) << "device " << d;
    EXPECT_EQ(x.cuda_context, y.cuda_context) << "device " << d;
    EXPECT_EQ(x.nccl_buffers, y.nccl_buffers) << "device " << d;
    EXPECT_EQ(x.breakdown, y.breakdown) << "device " << d;
    ASSERT_EQ(x.memory.size(), y.memory.size()) << "device " << d;
    for (size_t k = 0; k < x.memory.size(); ++k) {
      EXPECT_EQ(x.memory[k].t, y.memory[k].t);
      EXPECT_EQ(x.memory[k].total, y.memory[k].total);
    }
    EXPECT_EQ(x.folded, y.folded);
    EXPECT_EQ(x.representative, y.representative);
    EXPECT_EQ(x.over_capacity, y.over_capacity);
  }
  expect_same_program(a.program, b.program);
  ASSERT_EQ(a.timing.size(), b.timing.size());
  size_t bad = 0;
  for (size_t t = 0; t < a.timing.size() && bad < 5; ++t)
    if (a.timing[t].start != b.timing[t].start || a.timing[t].end != b.timing[t].end) {
      ++bad;
      ADD_FAILURE() << "task " << t << ": [" << a.timing[t].start << ", " << a.timing[t].end
                    << ") vs [" << b.timing[t].start << ", " << b.timing[t].end << ")";
    }
}

}  // namespace stretto::sim
