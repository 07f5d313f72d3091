#pragma once
// Test helper: builds engine Programs by hand. Every task is appended to the dispatch list of
// each participant device in creation order unless the test rewrites `p.devices[d].dispatch`.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "stretto/engine/program.h"

namespace stretto::engine::testing {

class ProgramBuilder {
 public:
  ProgramBuilder(uint32_t devices, std::vector<std::string> streams) {
    p.stream_names = std::move(streams);
    p.devices.resize(devices);
  }

  uint32_t link(double capacity, std::string name = "") {
    p.links.push_back(
        Link{capacity, name.empty() ? "link" + std::to_string(p.links.size()) : std::move(name)});
    return static_cast<uint32_t>(p.links.size() - 1);
  }

  uint32_t compute(uint32_t device, uint16_t stream, int64_t work, std::vector<uint32_t> deps = {},
                   bool mem_bound = false) {
    Task t;
    t.kind = TaskKind::kCompute;
    t.work = work;
    t.mem_bound = mem_bound;
    return add(t, {Participant{device, stream}}, {}, deps);
  }

  uint32_t comm(std::vector<Participant> parts, int64_t bytes, int64_t latency_ns, double rate_cap,
                std::vector<uint32_t> links = {}, std::vector<uint32_t> deps = {}) {
    Task t;
    t.kind = TaskKind::kComm;
    t.work = bytes;
    t.comm = static_cast<uint32_t>(p.comms.size());
    p.comms.push_back({latency_ns, rate_cap, static_cast<uint32_t>(p.task_links.size()),
                       static_cast<uint32_t>(links.size())});
    return add(t, parts, links, deps);
  }

  uint32_t barrier(std::vector<uint32_t> deps = {}) {
    Task t;
    t.kind = TaskKind::kBarrier;
    return add(t, {}, {}, deps);
  }

  Program p;

 private:
  uint32_t add(Task t, const std::vector<Participant>& parts, const std::vector<uint32_t>& links,
               const std::vector<uint32_t>& deps) {
    const auto id = static_cast<uint32_t>(p.tasks.size());
    t.node = id;
    t.part_begin = static_cast<uint32_t>(p.participants.size());
    t.part_count = static_cast<uint32_t>(parts.size());
    for (const Participant& pa : parts) {
      p.participants.push_back(pa);
      auto& disp = p.devices[pa.device].dispatch;
      if (disp.empty() || disp.back() != id) disp.push_back(id);
    }
    p.task_links.insert(p.task_links.end(), links.begin(), links.end());
    t.dep_begin = static_cast<uint32_t>(p.deps.size());
    p.deps.insert(p.deps.end(), deps.begin(), deps.end());
    p.tasks.push_back(t);
    return id;
  }
};

}  // namespace stretto::engine::testing
