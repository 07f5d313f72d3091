#include "stretto/traces/chrome_trace.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "stretto/engine/engine.h"

namespace stretto::traces {

namespace {

std::string json_escape(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\')
      o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20)
      o += fmt::format("\\u{:04x}", c);
    else
      o += c;
  }
  return o;
}

std::string us(sim::SimTime ns) {
  // Microseconds with exact nanosecond digits (no floating-point rounding).
  const char* sign = ns < 0 ? "-" : "";
  int64_t a = ns < 0 ? -ns : ns;
  return fmt::format("{}{}.{:03d}", sign, a / 1000, a % 1000);
}

std::string mb_pp(const Tags& t) {
  std::string s;
  if (t.mb() != kAbsent) s += fmt::format(" mb{}", t.mb());
  if (t.pp() != kAbsent) s += fmt::format(" PP{}", t.pp());
  return s;
}

}  // namespace

std::string slice_name(const CompiledPlan& cp, uint32_t node) {
  const Node& n = cp.dag.nodes[node];
  switch (n.kind) {
    case NodeKind::kCompute:
      if (n.recompute) return fmt::format("F{} (recompute)", mb_pp(n.tags));
      if (n.op < cp.model.ops.size() && cp.model.ops[n.op].kind == OpKind::kOptimizer)
        return "optimizer step";
      return fmt::format("{}{}", pass_name(n.tags.pass), mb_pp(n.tags));
    case NodeKind::kTransfer: {
      const char* what = n.purpose == CommPurpose::kGradient ? "grad" : "act";
      std::string s = fmt::format("send {}", what);
      if (n.tags.mb() != kAbsent) s += fmt::format(" mb{}", n.tags.mb());
      return s + fmt::format(" PP{}\u2192PP{}", n.tags.pp(), cp.dag.consumer_tags_of(n).pp());
    }
    case NodeKind::kCollective: {
      std::string s = fmt::format("{} {}", comm_kind_name(n.comm), comm_purpose_name(n.purpose));
      if (n.tags.pass != Pass::kNone) s += fmt::format(" {}", pass_name(n.tags.pass));
      s += mb_pp(n.tags);
      if (n.tags.ep() != kAbsent) s += fmt::format(" EP{}", n.tags.ep());
      if (n.recompute) s += " (recompute)";
      return s;
    }
    case NodeKind::kBarrier:
      return "order barrier";
  }
  return "?";
}

bool chrome_trace_stream(const CompiledPlan& cp, const sim::Result& r,
                         const ChromeTraceOptions& opt,
                         const std::function<bool(std::string_view)>& write) {
  const sim::Program& p = r.program;
  const auto& dag = cp.dag;
  constexpr size_t kChunk = 64 * 1024;
  std::string out;
  out.reserve(kChunk + 4096);
  bool ok = true;
  auto flush = [&](bool force) {
    if (ok && (force || out.size() >= kChunk)) {
      ok = write(out);
      out.clear();
    }
  };
  auto wanted = [&](uint32_t d) {
    return opt.devices.empty() || (d < opt.devices.size() && opt.devices[d]);
  };
  auto in_window = [&](sim::SimTime b, sim::SimTime e) {
    return e >= opt.begin_ns && (opt.end_ns < 0 || b < opt.end_ns);
  };
  out += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"stretto\",";
  out += fmt::format("\"plan\":\"{}\",\"step_time_ns\":{}}},\n\"traceEvents\":[\n",
                     json_escape(cp.plan.file), r.step_time);
  bool first = true;
  auto emit = [&](const std::string& ev) {
    if (!first) out += ",\n";
    first = false;
    out += ev;
    flush(false);
  };
  // metadata: processes and threads actually used
  std::set<std::pair<uint32_t, uint16_t>> lanes;
  for (const auto& pa : p.participants)
    if (wanted(pa.device)) lanes.insert({pa.device, pa.stream});
  std::set<uint32_t> devices;
  for (auto [d, s] : lanes) devices.insert(d);
  const int dpn = std::max(1, cp.plan.cluster.devices_per_node);
  for (uint32_t d : devices) {
    emit(
        fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":"
                    "\"device {} \u00b7 node {}\"}}}}",
                    d, d, d / dpn));
    emit(
        fmt::format("{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"args\":{{\"sort_"
                    "index\":{}}}}}",
                    d, d));
  }
  for (auto [d, s] : lanes) {
    emit(
        fmt::format("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{"
                    "\"name\":\"{}\"}}}}",
                    d, s, json_escape(p.stream_names[s])));
    emit(
        fmt::format("{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{},\"tid\":{},\"args\":{"
                    "{\"sort_index\":{}}}}}",
                    d, s, s));
  }
  // slices
  std::vector<std::string> names(dag.nodes.size());
  uint64_t flow_id = 0;
  for (uint32_t t = 0; t < p.tasks.size() && ok; ++t) {
    const sim::Task& tk = p.tasks[t];
    if (tk.kind == sim::TaskKind::kBarrier) continue;
    const auto& tm = r.timing[t];
    if (!in_window(tm.start, tm.end)) continue;
    bool any = false;
    for (uint32_t k = 0; k < tk.part_count && !any; ++k)
      any = wanted(p.participants[tk.part_begin + k].device);
    if (!any) continue;
    uint32_t n = tk.node;
    const Node& nd = dag.nodes[n];
    if (names[n].empty()) names[n] = json_escape(slice_name(cp, n));
    std::string args = fmt::format("\"tags\":\"{}\",\"directive\":{},\"slowdown\":{:.4f}",
                                   nd.tags.str(), nd.directive, sim::slowdown(p, t, tm));
    if (nd.op != kNone)
      args += fmt::format(",\"op\":\"{}\"", json_escape(cp.model.ops[nd.op].name));
    if (tk.kind == sim::TaskKind::kCompute) {
      args += fmt::format(",\"work_ns\":{}", tk.work);
      if (nd.tp > 1) args += fmt::format(",\"tp\":{}", nd.tp);
    } else {
      args += fmt::format(",\"bytes\":{},\"wire_bytes\":{},\"latency_ns\":{}", nd.bytes, tk.work,
                          p.comms[tk.comm].latency_ns);
    }
    const char* cat = tk.kind == sim::TaskKind::kCompute ? "compute" : "comm";
    for (uint32_t k = 0; k < tk.part_count; ++k) {
      const auto& pa = p.participants[tk.part_begin + k];
      if (!wanted(pa.device)) continue;
      emit(fmt::format(
          "{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{}"
          ",\"args\":{{{}}}}}",
          names[n], cat, pa.device, pa.stream, us(tm.start), us(tm.end - tm.start), args));
    }
    if (opt.flows && nd.kind == NodeKind::kTransfer && tk.part_count == 2 &&
        wanted(p.participants[tk.part_begin].device) &&
        wanted(p.participants[tk.part_begin + 1].device)) {
      const auto& a = p.participants[tk.part_begin];
      const auto& b = p.participants[tk.part_begin + 1];
      ++flow_id;
      emit(
          fmt::format("{{\"ph\":\"s\",\"id\":{},\"name\":\"{}\",\"cat\":\"flow\",\"pid\":{},"
                      "\"tid\":{},\"ts\":{}}}",
                      flow_id, names[n], a.device, a.stream, us(tm.start)));
      emit(
          fmt::format("{{\"ph\":\"f\",\"bp\":\"e\",\"id\":{},\"name\":\"{}\",\"cat\":\"flow\","
                      "\"pid\":{},\"tid\":{},\"ts\":{}}}",
                      flow_id, names[n], b.device, b.stream, us(tm.start)));
    }
  }
  // memory counters
  if (opt.memory_counters)
    for (const auto& dm : r.devices) {
      if (!devices.count(static_cast<uint32_t>(dm.id))) continue;
      for (const auto& s : dm.memory) {
        if (!in_window(s.t, s.t)) continue;
        emit(
            fmt::format("{{\"ph\":\"C\",\"name\":\"allocated "
                        "memory\",\"pid\":{},\"ts\":{},\"args\":{{\"bytes\":{}}}}}",
                        dm.id, us(s.t), s.total));
      }
    }
  out += "\n]}\n";
  flush(true);
  return ok;
}

bool write_chrome_trace(std::FILE* f, const CompiledPlan& cp, const sim::Result& r,
                        const ChromeTraceOptions& opt) {
  return chrome_trace_stream(cp, r, opt, [f](std::string_view chunk) {
    return std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size();
  });
}

std::string chrome_trace(const CompiledPlan& cp, const sim::Result& r,
                         const ChromeTraceOptions& opt) {
  std::string all;
  chrome_trace_stream(cp, r, opt, [&all](std::string_view chunk) {
    all.append(chunk);
    return true;
  });
  return all;
}

}  // namespace stretto::traces
