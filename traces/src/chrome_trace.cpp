#include "stretto/traces/chrome_trace.h"

#include <fmt/format.h>

#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>

#include "stretto/engine/engine.h"

namespace stretto::traces {

using compiler::CompiledPlan;
using compiler::Node;
using compiler::NodeKind;
using plan::kAbsent;
using plan::Pass;
using plan::pass_name;

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

std::string us(engine::SimTime ns) {
  // Microseconds with exact nanosecond digits (no floating-point rounding).
  const char* sign = ns < 0 ? "-" : "";
  int64_t a = ns < 0 ? -ns : ns;
  return fmt::format("{}{}.{:03d}", sign, a / 1000, a % 1000);
}

std::string mb_pp(const plan::Tags& t) {
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
      if (n.op < cp.model.ops.size() && cp.model.ops[n.op].kind == compiler::OpKind::kOptimizer)
        return "optimizer step";
      return fmt::format("{}{}", pass_name(n.tags.pass), mb_pp(n.tags));
    case NodeKind::kTransfer: {
      const char* what = n.purpose == compiler::CommPurpose::kGradient ? "grad" : "act";
      std::string s = fmt::format("send {}", what);
      if (n.tags.mb() != kAbsent) s += fmt::format(" mb{}", n.tags.mb());
      return s + fmt::format(" PP{}\u2192PP{}", n.tags.pp(), cp.dag.consumer_tags_of(n).pp());
    }
    case NodeKind::kCollective: {
      std::string s = fmt::format("{} {}", compiler::comm_kind_name(n.comm),
                                  compiler::comm_purpose_name(n.purpose));
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

namespace {

// One enclosing slice per (device, stream, stage, microbatch, pass) of compute ops: its span
// and how many ops it holds; `task_region[t]` is the region of compute task t (or -1).
struct Region {
  uint32_t device = 0;
  uint16_t stream = 0;
  plan::Tags tags;
  bool recompute = false;
  engine::SimTime start = 0, end = 0;
  uint32_t ops = 0;
  bool nests = true;  // no other region of its lane overlaps it
};

struct Regions {
  std::vector<Region> list;
  std::vector<int32_t> task_region;
};

Regions region_passes(const CompiledPlan& cp, const sim::Result& r) {
  Regions g;
  const engine::Program& p = r.program;
  g.task_region.assign(p.tasks.size(), -1);
  std::map<std::tuple<uint32_t, uint16_t, int32_t, int32_t, Pass, bool>, int32_t> index;
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const engine::Task& tk = p.tasks[t];
    if (tk.kind != engine::TaskKind::kCompute || tk.part_count == 0) continue;
    const Node& n = cp.dag.nodes[tk.node];
    if (n.kind != NodeKind::kCompute || n.tags.pass == Pass::kNone) continue;
    if (n.op < cp.model.ops.size() && cp.model.ops[n.op].kind == compiler::OpKind::kOptimizer)
      continue;
    const auto& pa = p.participants[tk.part_begin];
    const auto key = std::make_tuple(pa.device, pa.stream, n.tags.pp(), n.tags.mb(), n.tags.pass,
                                     static_cast<bool>(n.recompute));
    auto [it, fresh] = index.try_emplace(key, static_cast<int32_t>(g.list.size()));
    const auto& tm = r.timing[t];
    if (fresh) {
      Region rg;
      rg.device = pa.device;
      rg.stream = pa.stream;
      rg.tags = n.tags;
      rg.recompute = n.recompute;
      rg.start = tm.start;
      rg.end = tm.end;
      g.list.push_back(rg);
    }
    Region& rg = g.list[static_cast<size_t>(it->second)];
    rg.start = std::min(rg.start, tm.start);
    rg.end = std::max(rg.end, tm.end);
    ++rg.ops;
    g.task_region[t] = it->second;
  }
  // A region nests only if no other region of its lane overlaps it.
  std::vector<size_t> order(g.list.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Region &x = g.list[a], &y = g.list[b];
    return std::tie(x.device, x.stream, x.start, x.end) < std::tie(y.device, y.stream, y.start, y.end);
  });
  for (size_t k = 0; k < order.size();) {
    size_t e = k;
    while (e < order.size() && g.list[order[e]].device == g.list[order[k]].device &&
           g.list[order[e]].stream == g.list[order[k]].stream)
      ++e;
    engine::SimTime max_end = INT64_MIN;
    for (size_t i = k; i < e; ++i) {
      Region& rg = g.list[order[i]];
      if (max_end > rg.start) rg.nests = false;
      if (i + 1 < e && g.list[order[i + 1]].start < rg.end) rg.nests = false;
      max_end = std::max(max_end, rg.end);
    }
    k = e;
  }
  return g;
}

std::string region_name(const Region& rg) {
  return fmt::format("{}{}", rg.recompute ? "F (recompute)" : std::string(pass_name(rg.tags.pass)),
                     mb_pp(rg.tags));
}

// Per-event sizes used by the estimate: the mean sizes of each kind of event, with its
// separator, in the traces of gpt_pp4_dp2_1f1b, piper_qwen3_moe_pp2_dp2_ep2 and
// layout_llama7b_pp4_dp4_interleaved (202-207, 249-259, 129-137, 95-109, 89-91, 76-78 bytes).
constexpr uint64_t kComputeBytes = 205, kCommBytes = 255, kRegionBytes = 135, kFlowBytes = 103,
                   kCounterBytes = 90, kMetaBytes = 77;

}  // namespace

ChromeTraceSize estimate_chrome_trace(const CompiledPlan& cp, const sim::Result& r,
                                      const ChromeTraceOptions& opt) {
  ChromeTraceSize z;
  const engine::Program& p = r.program;
  auto wanted = [&](uint32_t d) {
    return opt.devices.empty() || (d < opt.devices.size() && opt.devices[d]);
  };
  auto in_window = [&](engine::SimTime b, engine::SimTime e) {
    return e >= opt.begin_ns && (opt.end_ns < 0 || b < opt.end_ns);
  };
  std::set<std::pair<uint32_t, uint16_t>> lanes;
  std::set<uint32_t> devices;
  for (const auto& pa : p.participants)
    if (wanted(pa.device)) lanes.insert({pa.device, pa.stream}), devices.insert(pa.device);
  z.metadata = 2 * (lanes.size() + devices.size());
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const engine::Task& tk = p.tasks[t];
    if (tk.kind == engine::TaskKind::kBarrier || !in_window(r.timing[t].start, r.timing[t].end))
      continue;
    uint32_t n = 0;
    for (uint32_t k = 0; k < tk.part_count; ++k) n += wanted(p.participants[tk.part_begin + k].device);
    z.slices += n;
    z.approx_bytes += n * (tk.kind == engine::TaskKind::kCompute ? kComputeBytes : kCommBytes);
    if (opt.flows && cp.dag.nodes[tk.node].kind == NodeKind::kTransfer && tk.part_count == 2 && n == 2)
      z.flows += 2;
  }
  if (opt.region_slices) {
    const Regions g = region_passes(cp, r);
    for (const Region& rg : g.list)
      if (rg.nests && wanted(rg.device) && in_window(rg.start, rg.end))
        ++z.slices, z.approx_bytes += kRegionBytes;
  }
  if (opt.memory_counters)
    for (const auto& dm : r.devices)
      if (devices.count(static_cast<uint32_t>(dm.id)))
        for (const auto& s : dm.memory) z.counters += in_window(s.t, s.t);
  z.approx_bytes += z.flows * kFlowBytes + z.counters * kCounterBytes + z.metadata * kMetaBytes;
  return z;
}

bool chrome_trace_stream(const CompiledPlan& cp, const sim::Result& r,
                         const ChromeTraceOptions& opt,
                         const std::function<bool(std::string_view)>& write) {
  const engine::Program& p = r.program;
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
  auto in_window = [&](engine::SimTime b, engine::SimTime e) {
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
  // region passes: one enclosing slice each, before the ops it holds (same start: parent first)
  Regions regions;
  if (opt.region_slices) regions = region_passes(cp, r);
  for (const Region& rg : regions.list) {
    if (!rg.nests || !wanted(rg.device) || !in_window(rg.start, rg.end)) continue;
    emit(fmt::format(
        "{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"pass\",\"pid\":{},\"tid\":{},\"ts\":{},"
        "\"dur\":{},\"args\":{{\"tags\":\"{}\",\"ops\":{}}}}}",
        json_escape(region_name(rg)), rg.device, rg.stream, us(rg.start), us(rg.end - rg.start),
        rg.tags.str(), rg.ops));
  }
  // slices
  std::vector<std::string> names(dag.nodes.size());
  uint64_t flow_id = 0;
  for (uint32_t t = 0; t < p.tasks.size() && ok; ++t) {
    const engine::Task& tk = p.tasks[t];
    if (tk.kind == engine::TaskKind::kBarrier) continue;
    const auto& tm = r.timing[t];
    if (!in_window(tm.start, tm.end)) continue;
    bool any = false;
    for (uint32_t k = 0; k < tk.part_count && !any; ++k)
      any = wanted(p.participants[tk.part_begin + k].device);
    if (!any) continue;
    uint32_t n = tk.node;
    const Node& nd = dag.nodes[n];
    if (names[n].empty()) names[n] = json_escape(slice_name(cp, n));
    // Under its region pass's slice, an op is named by its model op (the pass is the parent).
    const int32_t reg = regions.task_region.empty() ? -1 : regions.task_region[t];
    const bool nested = reg >= 0 && regions.list[static_cast<size_t>(reg)].nests &&
                        nd.op != compiler::kNone && nd.op < cp.model.ops.size();
    const std::string op_name =
        nested ? json_escape(cp.model.ops[nd.op].name) + (nd.recompute ? " (recompute)" : "")
               : std::string();
    std::string args = fmt::format("\"tags\":\"{}\",\"directive\":{},\"slowdown\":{:.4f}",
                                   nd.tags.str(), nd.directive, engine::slowdown(p, t, tm));
    if (nd.op != compiler::kNone)
      args += fmt::format(",\"op\":\"{}\"", json_escape(cp.model.ops[nd.op].name));
    if (tk.kind == engine::TaskKind::kCompute) {
      args += fmt::format(",\"work_ns\":{}", tk.work);
      if (nd.tp > 1) args += fmt::format(",\"tp\":{}", nd.tp);
    } else {
      args += fmt::format(",\"bytes\":{},\"wire_bytes\":{},\"latency_ns\":{}", nd.bytes, tk.work,
                          p.comms[tk.comm].latency_ns);
    }
    const char* cat = tk.kind == engine::TaskKind::kCompute ? "compute" : "comm";
    for (uint32_t k = 0; k < tk.part_count; ++k) {
      const auto& pa = p.participants[tk.part_begin + k];
      if (!wanted(pa.device)) continue;
      emit(fmt::format(
          "{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{}"
          ",\"args\":{{{}}}}}",
          nested ? op_name : names[n], cat, pa.device, pa.stream, us(tm.start),
          us(tm.end - tm.start), args));
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
                        const ChromeTraceOptions& opt, bool gzip) {
  if (!gzip)
    return chrome_trace_stream(cp, r, opt, [f](std::string_view chunk) {
      return std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size();
    });
  z_stream zs{};
  // windowBits 15 + 16: a gzip header and trailer (what .gz readers, Perfetto included, expect)
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return false;
  std::vector<unsigned char> buf(256 * 1024);
  bool ok = true;
  auto pump = [&](std::string_view in, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    int rc = Z_OK;
    do {
      zs.next_out = buf.data();
      zs.avail_out = static_cast<uInt>(buf.size());
      rc = deflate(&zs, flush);
      const size_t have = buf.size() - zs.avail_out;
      if (have && std::fwrite(buf.data(), 1, have, f) != have) return false;
    } while (zs.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    return rc != Z_STREAM_ERROR;
  };
  ok = chrome_trace_stream(cp, r, opt, [&](std::string_view chunk) { return pump(chunk, Z_NO_FLUSH); });
  ok = pump({}, Z_FINISH) && ok;
  deflateEnd(&zs);
  return ok;
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
