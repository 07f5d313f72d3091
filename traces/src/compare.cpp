// Timelines and their comparison (compare.h).

#include "stretto/traces/compare.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>

#include "stretto/sim/session.h"
#include "stretto/support/limits.h"
#include "stretto/traces/chrome_trace.h"
#include "stretto/traces/kineto.h"
#include "stretto/traces/kineto_step.h"
#include "stretto/traces/op_label.h"
#include "stretto/traces/trace_reader.h"

namespace stretto::traces {

using plan::Json;
using plan::kAbsent;

namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

// The purpose of a communication, from its name: part of its key.
std::string purpose_of(std::string_view name) {
  const std::string n = lower(name);
  static const std::array<std::string_view, 9> kP = {
      "grad-reduce", "param-gather", "param-sync", "tensor-parallel", "dispatch",
      "combine",     "activation",   "gradient",   "grad"};
  for (auto p : kP)
    if (n.find(p) != std::string::npos) return std::string(p == "gradient" ? "grad" : p);
  if (n.find(" act") != std::string::npos) return "act";
  return "";
}

// Key and class of a slice: compute from its tags (or name), comm from its name.
// `participant`: 0 = sender of a transfer, 1 = receiver, -1 = unknown / not a transfer.
std::pair<std::string, std::string> key_of(std::string_view name, std::string_view tags,
                                           bool comm, int participant) {
  if (!comm) {
    OpLabel l = parse_op_label(tags.empty() ? name : tags);
    if (l.tags.pass == plan::Pass::kNone && !tags.empty()) l = parse_op_label(name);
    l.comm.clear();
    l.pp_to = kAbsent;
    std::string k = l.key();
    if (k.empty()) k = std::string(name);
    return {k, l.op_class().empty() ? "other" : l.op_class()};
  }
  OpLabel l = parse_op_label(name);
  if (l.tags.mb() == kAbsent && !tags.empty()) {
    OpLabel t = parse_op_label(tags);
    l.tags.set(plan::TagKey::kMB, t.tags.mb());
  }
  std::string cls = l.comm.empty() ? "comm" : l.comm;
  if (cls == "send" || cls == "recv" || cls == "send_recv") {
    if (participant == 0) cls = "send";
    if (participant == 1) cls = "recv";
    l.comm = "p2p";
  }
  std::string k = l.key();
  if (l.tags.pass != plan::Pass::kNone) k += fmt::format(" {}", plan::pass_name(l.tags.pass));
  const std::string p = purpose_of(name);
  if (!p.empty()) k += " " + p;
  return {k, cls};
}

int64_t union_len(Intervals v) {
  std::sort(v.begin(), v.end());
  int64_t total = 0, cs = 0, ce = -1;
  bool open = false;
  for (auto [s, e] : v) {
    if (!open || s > ce) {
      if (open) total += ce - cs;
      cs = s, ce = e, open = true;
    } else {
      ce = std::max(ce, e);
    }
  }
  if (open) total += ce - cs;
  return total;
}

// |a \ b| for unions of intervals.
int64_t minus_len(const Intervals& a, const Intervals& b) {
  Intervals both = a;
  both.insert(both.end(), b.begin(), b.end());
  return union_len(both) - union_len(b);
}

// Collects raw slices, then merges them into ops.
struct Builder {
  struct Piece {
    std::string key, cls;
    int device;
    int64_t start, end;
    bool comm;
  };
  std::vector<Piece> pieces;
  std::map<int, int64_t> peak;

  void add(std::string key, std::string cls, int device, int64_t start, int64_t end, bool comm) {
    pieces.push_back({std::move(key), std::move(cls), device, start, std::max(start, end), comm});
  }

  /// `step`: the step's duration when the trace says it (0: the last op's end).
  Timeline build(int64_t origin, int64_t step = 0) {
    Timeline t;
    t.step = step;
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return std::tie(a.device, a.start, a.end, a.key) < std::tie(b.device, b.start, b.end, b.key);
    });
    int ndev = 0;
    for (const auto& p : pieces) ndev = std::max(ndev, p.device + 1);
    for (auto& [d, b] : peak) ndev = std::max(ndev, d + 1);
    std::vector<Intervals> compute(static_cast<size_t>(ndev)), comm(static_cast<size_t>(ndev));
    std::map<std::pair<int, std::string>, size_t> merged;  // compute (device, key) -> op
    std::map<std::pair<int, std::string>, int> seen;       // comm (device, key) -> count
    for (const auto& p : pieces) {
      const int64_t s = p.start - origin, e = p.end - origin;
      (p.comm ? comm : compute)[static_cast<size_t>(p.device)].push_back({s, e});
      if (!p.comm) {
        auto [it, fresh] = merged.emplace(std::pair{p.device, p.key}, t.ops.size());
        if (!fresh) {
          TimelineOp& o = t.ops[it->second];
          o.start = std::min(o.start, s);
          o.end = std::max(o.end, e);
          o.busy += e - s;
          continue;
        }
        t.ops.push_back({p.key, p.cls, p.device, s, e, e - s, false});
      } else {
        const int n = ++seen[{p.device, p.key}];
        std::string key = n > 1 ? fmt::format("{} #{}", p.key, n) : p.key;
        t.ops.push_back({std::move(key), p.cls, p.device, s, e, e - s, true});
      }
    }
    t.has_ops = !t.ops.empty();
    finish_timeline(t, std::move(compute), std::move(comm));
    for (auto& d : t.devices)
      if (auto it = peak.find(d.id); it != peak.end()) d.peak_memory = it->second;
    return t;
  }
};

std::optional<int64_t> as_int(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  return std::nullopt;
}

// First decompressed bytes of a file, to sniff its kind.
std::string head_of(const std::string& path, size_t n) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return {};
  std::string s(n, '\0');
  int got = gzread(f, s.data(), static_cast<unsigned>(n));
  gzclose(f);
  s.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return s;
}

// A Chrome trace written by Stretto (`simulate --trace`, `replay --trace`).
Expected<Timeline> load_stretto_trace(const std::string& path) {
  std::vector<TimelineSlice> slices;
  std::map<int, int64_t> peak;
  std::map<int32_t, std::set<int>> devices_of_pp;  // from compute slices
  auto h = read_trace(path, [&](const RawEvent& e) -> std::optional<EventError> {
    const Json& ev = *e.json;
    if (e.ph == "C" && e.name == "allocated memory") {
      auto pid = ev.find("pid");
      auto args = ev.find("args");
      if (pid != ev.end() && args != ev.end() && args->is_object()) {
        auto bytes = args->find("bytes");
        auto d = as_int(*pid);
        if (d && bytes != args->end())
          if (auto v = as_int(*bytes))
            peak[static_cast<int>(*d)] = std::max(peak[static_cast<int>(*d)], *v);
      }
      return std::nullopt;
    }
    if (e.ph != "X") return std::nullopt;
    if (e.cat == "pass") return std::nullopt;  // a region pass's enclosing slice, not an op
    if (!e.has_ts || !e.has_dur) return EventError{"dur", "a slice needs numeric 'ts' and 'dur'", ""};
    auto pid = ev.find("pid");
    std::optional<int64_t> dev = pid == ev.end() ? std::nullopt : as_int(*pid);
    if (!dev) return EventError{"pid", "a slice needs an integer 'pid' (the device)", ""};
    TimelineSlice s;
    if (auto a = ev.find("args"); a != ev.end() && a->is_object())
      if (auto t = a->find("tags"); t != a->end() && t->is_string()) s.tags = t->get<std::string>();
    s.name = std::string(e.name);
    s.device = static_cast<int>(*dev);
    s.start = e.ts_ns;
    s.end = e.ts_ns + e.dur_ns;
    s.comm = e.cat == "comm";
    if (!s.comm) {
      const OpLabel l = parse_op_label(s.tags.empty() ? s.name : s.tags);
      if (l.tags.pp() != kAbsent) devices_of_pp[l.tags.pp()].insert(s.device);
    }
    slices.push_back(std::move(s));
    return std::nullopt;
  });
  if (!h) return fail(std::move(h.error()));
  // a transfer's slice is on its sender when the device runs the source PP's compute
  for (auto& s : slices) {
    if (!s.comm) continue;
    const OpLabel l = parse_op_label(s.name);
    if (l.comm != "send" && l.comm != "recv") continue;
    auto it = devices_of_pp.find(l.tags.pp());
    if (it != devices_of_pp.end()) s.participant = it->second.count(s.device) ? 0 : 1;
  }
  Timeline t = timeline_from_slices(slices, 0, path, "stretto trace");
  for (auto& d : t.devices)
    if (auto it = peak.find(d.id); it != peak.end()) d.peak_memory = it->second;
  if (auto od = h->metadata.find("otherData"); od != h->metadata.end() && od->is_object()) {
    if (auto st = od->find("step_time_ns"); st != od->end())
      if (auto v = as_int(*st)) t.step = *v;
    if (auto g = od->find("generator"); g != od->end() && g->is_string() && *g != "stretto")
      t.kind = g->get<std::string>() + " trace";
  }
  return t;
}

// PyTorch profiler traces, one per rank.
Expected<Timeline> load_kineto(const std::vector<std::string>& files, const std::string& source) {
  struct Slice {
    std::string name;
    int64_t start, end;
    bool comm;
    bool gpu;
  };
  struct RankData {
    int rank = -1;
    std::vector<StepSpan> host_steps;         // ProfilerStep#N ranges on the host
    std::map<int64_t, int64_t> launch_by_corr;  // runtime call's start by correlation
    std::vector<std::pair<int64_t, GpuOpSpan>> gpu_ops;  // (correlation, start as launch, end)
    std::vector<StepSpan> steps;              // kineto_step.h
    std::vector<Slice> slices;
    int64_t peak = -1;
  };
  std::vector<RankData> ranks;
  Diagnostics ds;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    RankData rd;
    auto h = read_trace(files[fi], [&](const RawEvent& e) -> std::optional<EventError> {
      const Json& ev = *e.json;
      if ((e.ph == "i" || e.ph == "I") && e.name == "[memory]") {
        if (auto a = ev.find("args"); a != ev.end() && a->is_object())
          if (auto t = a->find("Total Allocated"); t != a->end())
            if (auto v = as_int(*t)) rd.peak = std::max(rd.peak, *v);
        return std::nullopt;
      }
      if (e.ph != "X") return std::nullopt;
      const std::string cat = lower(e.cat);
      if (!e.has_ts || !e.has_dur) {
        if (cat == "user_annotation" || cat == "gpu_user_annotation" || cat == "kernel")
          return EventError{e.has_ts ? "dur" : "ts",
                            fmt::format("slice '{}' has no numeric '{}'", e.name,
                                        e.has_ts ? "dur" : "ts"),
                            ""};
        return std::nullopt;
      }
      if (e.name.rfind("ProfilerStep#", 0) == 0 && cat != "gpu_user_annotation") {
        rd.host_steps.push_back(
            {profiler_step_number(e.name).value_or(static_cast<int64_t>(rd.host_steps.size())),
             e.ts_ns, e.ts_ns + e.dur_ns});
        return std::nullopt;
      }
      static const Json kEmpty = Json::object();
      auto ai = ev.find("args");
      const Json& args = ai != ev.end() && ai->is_object() ? *ai : kEmpty;
      std::optional<int64_t> corr;
      if (auto c = args.find("correlation"); c != args.end()) corr = as_int(*c);
      if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "runtime") {
        if (corr) rd.launch_by_corr.emplace(*corr, e.ts_ns);
        return std::nullopt;
      }
      if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset")
        rd.gpu_ops.push_back({corr.value_or(-1), {e.ts_ns, e.ts_ns + e.dur_ns}});
      if (cat == "kernel") {
        if (auto p = args.find("piper_dag_node"); p != args.end() && p->is_string()) {
          rd.slices.push_back({p->get<std::string>(), e.ts_ns, e.ts_ns + e.dur_ns, false, true});
        } else if (auto c = args.find("Collective name"); c != args.end() && c->is_string()) {
          std::string kind = collective_kind(c->get<std::string>());
          rd.slices.push_back({kind.empty() ? "comm" : kind, e.ts_ns, e.ts_ns + e.dur_ns, true, true});
        }
        return std::nullopt;
      }
      if (cat == "user_annotation" || cat == "gpu_user_annotation") {
        OpLabel l = parse_op_label(e.name);
        if (!l.logical) return std::nullopt;
        rd.slices.push_back({std::string(e.name), e.ts_ns, e.ts_ns + e.dur_ns, !l.comm.empty(),
                             cat == "gpu_user_annotation"});
      }
      return std::nullopt;
    });
    if (!h) {
      ds.insert(ds.end(), h.error().begin(), h.error().end());
      continue;
    }
    if (auto di = h->metadata.find("distributedInfo"); di != h->metadata.end() && di->is_object())
      if (auto r = di->find("rank"); r != di->end())
        if (auto v = as_int(*r)) rd.rank = static_cast<int>(*v);
    if (rd.rank < 0) rd.rank = static_cast<int>(fi);
    // The steps (kineto_step.h), as `import kineto` has them.
    std::vector<GpuOpSpan> gpu;
    gpu.reserve(rd.gpu_ops.size());
    for (const auto& [c, op] : rd.gpu_ops) {
      auto l = rd.launch_by_corr.find(c);
      gpu.push_back({l != rd.launch_by_corr.end() ? l->second : op.launch, op.end});
    }
    rd.steps = rank_steps(std::move(rd.host_steps), gpu);
    rd.launch_by_corr.clear();
    rd.gpu_ops.clear();
    ranks.push_back(std::move(rd));
  }
  if (!ds.empty()) return fail(std::move(ds));
  // One step: the median step over the steps every rank used (kineto_step.h).
  std::vector<std::vector<StepSpan>> per_rank;
  for (const auto& r : ranks) per_rank.push_back(r.steps);
  const std::optional<StepSpan> step = median_step(join_ranks(per_rank));
  Builder b;
  int64_t origin = step ? step->start : INT64_MAX;
  for (const auto& r : ranks) {
    const bool any_gpu =
        std::any_of(r.slices.begin(), r.slices.end(), [](const Slice& s) { return s.gpu; });
    // Collectives the host ran itself (Gloo on a GPU trace) have no GPU slice: the host's
    // labelled range is the collective.
    const bool gpu_comm = std::any_of(r.slices.begin(), r.slices.end(),
                                      [](const Slice& s) { return s.gpu && s.comm; });
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (step)
      for (const StepSpan& s : r.steps)
        if (s.number == step->number) lo = s.start, hi = s.end;
    for (const auto& s : r.slices) {
      if (any_gpu && !s.gpu && !(s.comm && !gpu_comm)) continue;  // the device's timeline
      // GPU work launched in the step may run past the host's range: kept by start
      if (s.start < lo || s.start >= hi) continue;
      if (!step) origin = std::min(origin, s.start);
      auto [key, cls] = key_of(s.name, "", s.comm, -1);
      b.add(std::move(key), std::move(cls), r.rank, s.start, s.end, s.comm);
    }
    if (r.peak >= 0) b.peak[r.rank] = r.peak;
  }
  if (origin == INT64_MAX) origin = 0;
  Timeline t = b.build(origin, step ? step->duration() : 0);
  t.source = source;
  t.kind = "kineto trace";
  t.note = step ? fmt::format("ProfilerStep#{} (the median step) of {} rank(s)", step->number,
                              ranks.size())
                : fmt::format("whole trace of {} rank(s) (no ProfilerStep#)", ranks.size());
  return t;
}

// A `simulate --format json` result: its fields are checked where they stand (a device id
// that is a string, a time that is not a number), located by line:column and JSON pointer.
Expected<Timeline> timeline_from_summary(const plan::JsonSource& src) {
  const Json& j = src.root();
  Timeline t;
  t.source = src.file();
  t.kind = "result";
  Diagnostics ds;
  // Milliseconds in [0, 1e12] (as a profiled table's bound), as integer nanoseconds.
  auto ms_field = [&](const Json& obj, const char* key, const std::string& ptr) -> int64_t {
    auto it = obj.find(key);
    if (it == obj.end()) return 0;
    if (!it->is_number() || !(it->get<double>() >= 0) || it->get<double>() > 1e12) {
      ds.push_back(src.error_at(ptr + "/" + key,
                                fmt::format("'{}' must be a number of milliseconds from 0 to 1e12, "
                                            "found {}",
                                            key, it->dump().substr(0, 40)),
                                "compare reads `stretto simulate --format json` output"));
      return 0;
    }
    return static_cast<int64_t>(std::llround(it->get<double>() * 1e6));
  };
  t.step = ms_field(j, "step_time_ms", "");
  const Json& devs = j["devices"];
  if (!devs.is_array())
    ds.push_back(src.error_at("/devices", "'devices' must be a list of device objects"));
  for (size_t i = 0; devs.is_array() && i < devs.size() && ds.size() < kMaxDiagnostics; ++i) {
    const Json& e = devs[i];
    const std::string ptr = fmt::format("/devices/{}", i);
    if (!e.is_object()) {
      ds.push_back(src.error_at(ptr, "a device must be an object"));
      continue;
    }
    TimelineDevice td;
    auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX) {
      ds.push_back(src.error_at(ptr + (id == e.end() ? "" : "/id"),
                                id == e.end() ? std::string("a device has no 'id'")
                                              : fmt::format("'id' must be a whole number from 0 "
                                                            "to 2^31 - 1, found {}",
                                                            id->dump().substr(0, 40))));
      continue;
    }
    td.id = static_cast<int>(id->get<int64_t>());
    td.busy = ms_field(e, "busy_ms", ptr);
    td.bubble = ms_field(e, "bubble_ms", ptr);
    td.exposed_comm = ms_field(e, "exposed_comm_ms", ptr);
    td.peak_memory = -1;
    if (auto pm = e.find("peak_memory_bytes"); pm != e.end()) {
      if (!pm->is_number_integer() || pm->get<int64_t>() < 0)
        ds.push_back(src.error_at(ptr + "/peak_memory_bytes",
                                  fmt::format("'peak_memory_bytes' must be a whole number >= 0, "
                                              "found {}",
                                              pm->dump().substr(0, 40))));
      else
        td.peak_memory = pm->get<int64_t>();
    }
    t.devices.push_back(td);
  }
  if (!ds.empty()) return fail(cap_diagnostics(std::move(ds)));
  return t;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t median_i(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

}  // namespace

void finish_timeline(Timeline& t, std::vector<Intervals> compute, std::vector<Intervals> comm) {
  std::sort(t.ops.begin(), t.ops.end(), [](const TimelineOp& a, const TimelineOp& b) {
    return std::tie(a.device, a.start, a.end, a.key) < std::tie(b.device, b.start, b.end, b.key);
  });
  int64_t end = 0;
  for (const auto& o : t.ops) end = std::max(end, o.end);
  if (t.step == 0) t.step = end;
  const size_t n = std::max(compute.size(), comm.size());
  compute.resize(n);
  comm.resize(n);
  t.devices.clear();
  for (size_t d = 0; d < n; ++d) {
    TimelineDevice td;
    td.id = static_cast<int>(d);
    td.busy = union_len(compute[d]);
    td.bubble = t.step - td.busy;
    td.exposed_comm = minus_len(comm[d], compute[d]);
    t.devices.push_back(td);
  }
  // critical path: from the op ending last, repeatedly the op (same device preferred) that
  // ended last at or before the current op's start (the latest-finishing predecessor chain).
  t.critical_path.clear();
  if (t.ops.empty()) return;
  size_t cur = 0;
  for (size_t i = 0; i < t.ops.size(); ++i)
    if (t.ops[i].end > t.ops[cur].end) cur = i;
  std::vector<size_t> by_end(t.ops.size());
  for (size_t i = 0; i < by_end.size(); ++i) by_end[i] = i;
  std::sort(by_end.begin(), by_end.end(), [&](size_t a, size_t b) {
    return std::tie(t.ops[a].end, a) < std::tie(t.ops[b].end, b);
  });
  std::vector<char> used(t.ops.size(), 0);
  while (true) {
    t.critical_path.push_back(cur);
    used[cur] = 1;
    const int64_t s = t.ops[cur].start;
    auto it = std::upper_bound(by_end.begin(), by_end.end(), s,
                               [&](int64_t v, size_t i) { return v < t.ops[i].end; });
    std::optional<size_t> best;
    int64_t best_end = INT64_MIN;
    for (int k = 0; it != by_end.begin() && k < 64; ++k) {
      --it;
      const TimelineOp& o = t.ops[*it];
      if (used[*it]) continue;
      if (best && o.end < best_end) break;
      const bool same = o.device == t.ops[cur].device;
      if (!best || o.end > best_end || (o.end == best_end && same)) best = *it, best_end = o.end;
    }
    if (!best) break;
    cur = *best;
  }
  std::reverse(t.critical_path.begin(), t.critical_path.end());
}

Timeline timeline_from_result(const compiler::CompiledPlan& cp, const sim::Result& r,
                              const std::string& source) {
  Builder b;
  const engine::Program& p = r.program;
  for (uint32_t ti = 0; ti < p.tasks.size(); ++ti) {
    const engine::Task& tk = p.tasks[ti];
    if (tk.kind == engine::TaskKind::kBarrier) continue;
    const auto& tm = r.timing[ti];
    if (tm.start < 0) continue;
    const compiler::Node& nd = cp.dag.nodes[tk.node];
    const std::string name = slice_name(cp, tk.node);
    const bool comm = tk.kind != engine::TaskKind::kCompute;
    for (uint32_t k = 0; k < tk.part_count; ++k) {
      const auto& pa = p.participants[tk.part_begin + k];
      const int participant = nd.kind == compiler::NodeKind::kTransfer
                                  ? static_cast<int>(std::min<uint32_t>(k, 1))
                                  : -1;
      auto [key, cls] = key_of(name, nd.tags.str(), comm, participant);
      b.add(std::move(key), std::move(cls), static_cast<int>(pa.device), tm.start, tm.end, comm);
    }
  }
  Timeline t = b.build(0);
  t.source = source;
  t.kind = "plan";
  t.step = r.step_time;
  // the simulator's own metrics (exact, and folded replicas included)
  t.devices.clear();
  for (const auto& d : r.devices)
    t.devices.push_back({d.id, d.busy, d.bubble, d.exposed_comm, d.peak_memory});
  return t;
}

Timeline timeline_from_slices(const std::vector<TimelineSlice>& slices, int64_t origin,
                              std::string source, std::string kind) {
  Builder b;
  for (const auto& s : slices) {
    auto [key, cls] = key_of(s.name, s.tags, s.comm, s.participant);
    b.add(std::move(key), std::move(cls), s.device, s.start, s.end, s.comm);
  }
  Timeline t = b.build(origin);
  t.source = std::move(source);
  t.kind = std::move(kind);
  return t;
}

Expected<Timeline> load_timeline(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string n = e.path().filename().string();
      auto ends = [&](std::string_view suf) {
        return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
      };
      if (e.is_regular_file() && (ends(".json") || ends(".json.gz"))) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      Diagnostic d;
      d.message = "no trace files (*.json, *.json.gz) in directory";
      d.loc = {path, 0, 0, ""};
      return fail(std::move(d));
    }
    return load_kineto(files, path);
  }
  const std::string head = head_of(path, 1 << 16);
  if (head.empty()) {
    Diagnostic d;
    d.message = fs::exists(path, ec) ? "empty or unreadable file" : "no such file";
    d.loc = {path, 0, 0, ""};
    return fail(std::move(d));
  }
  const size_t first = head.find_first_not_of(" \t\r\n");
  const bool trace = head.find("\"traceEvents\"") != std::string::npos ||
                     (first != std::string::npos && head[first] == '[');
  if (trace) {
    if (head.find("\"generator\":\"stretto") != std::string::npos ||
        head.find("\"generator\": \"stretto") != std::string::npos)
      return load_stretto_trace(path);
    return load_kineto({path}, path);
  }
  // a plan or a result: small JSON documents
  auto src = plan::JsonSource::load(path);
  if (!src) return fail(std::move(src.error()));
  const Json& j = src->root();
  if (j.is_object() && j.contains("step_time_ms") && j.contains("devices"))
    return timeline_from_summary(*src);
  if (plan::is_plan_document(j)) {
    auto s = sim::Session::open(path);
    if (!s) return fail(std::move(s.error()));
    auto r = s->simulate();
    if (!r) return fail(std::move(r.error()));
    return timeline_from_result(s->compiled(), *r, path);
  }
  Diagnostic d;
  d.message = "not a plan, a trace or a simulate result";
  d.hint = "compare takes plans (JSON with 'schedule'), Chrome/Kineto traces, directories of "
           "per-rank traces, or `stretto simulate --format json` output";
  d.loc = {path, 1, 1, ""};
  return fail(std::move(d));
}

double OpDelta::rel_err() const {
  return a_dur > 0 ? static_cast<double>(b_dur - a_dur) / static_cast<double>(a_dur) : 0.0;
}

Comparison compare(Timeline a, Timeline b, const CompareOptions& opt) {
  Comparison c;
  std::map<std::pair<int, std::string>, size_t> in_b;
  for (size_t i = 0; i < b.ops.size(); ++i) in_b[{b.ops[i].device, b.ops[i].key}] = i;
  std::vector<char> b_used(b.ops.size(), 0);
  std::vector<OpDelta> deltas;
  std::map<std::string, std::vector<OpDelta>> by_class;
  for (const auto& o : a.ops) {
    auto it = in_b.find({o.device, o.key});
    if (it == in_b.end()) {
      ++c.only_a_count;
      if (c.only_a.size() < opt.top) c.only_a.push_back(fmt::format("{} @ {}", o.key, o.device));
      continue;
    }
    b_used[it->second] = 1;
    const TimelineOp& ob = b.ops[it->second];
    OpDelta d{o.key, o.cls, o.device, o.start, o.busy, ob.start, ob.busy};
    deltas.push_back(d);
    by_class[o.cls].push_back(d);
  }
  for (size_t i = 0; i < b.ops.size(); ++i)
    if (!b_used[i]) {
      ++c.only_b_count;
      if (c.only_b.size() < opt.top)
        c.only_b.push_back(fmt::format("{} @ {}", b.ops[i].key, b.ops[i].device));
    }
  c.matched = deltas.size();
  for (auto& [cls, v] : by_class) {
    ClassStats s;
    s.cls = cls;
    s.matched = v.size();
    std::vector<int64_t> da, db;
    std::vector<double> errs;
    double worst = -1;
    for (const auto& d : v) {
      da.push_back(d.a_dur);
      db.push_back(d.b_dur);
      const double e = d.rel_err();
      errs.push_back(e);
      if (std::fabs(e) > worst) worst = std::fabs(e), s.worst_err = e, s.worst_key = d.key,
                                s.worst_device = d.device;
    }
    s.a_median = median_i(da);
    s.b_median = median_i(db);
    s.median_err = median_of(errs);
    c.classes.push_back(std::move(s));
  }
  auto moved = [](const OpDelta& d) {
    return std::max(std::llabs(d.b_start - d.a_start),
                    std::llabs((d.b_start + d.b_dur) - (d.a_start + d.a_dur)));
  };
  c.moved = deltas;
  std::stable_sort(c.moved.begin(), c.moved.end(),
                   [&](const OpDelta& x, const OpDelta& y) { return moved(x) > moved(y); });
  if (c.moved.size() > opt.top) c.moved.resize(opt.top);
  c.longer = deltas;
  std::stable_sort(c.longer.begin(), c.longer.end(), [](const OpDelta& x, const OpDelta& y) {
    return std::llabs(x.b_dur - x.a_dur) > std::llabs(y.b_dur - y.a_dur);
  });
  if (c.longer.size() > opt.top) c.longer.resize(opt.top);
  // critical paths
  auto names = [](const Timeline& t) {
    std::vector<std::string> v;
    for (size_t i : t.critical_path)
      v.push_back(fmt::format("{} @ {}", t.ops[i].key, t.ops[i].device));
    return v;
  };
  const auto pa = names(a), pb = names(b);
  const std::set<std::string> sa(pa.begin(), pa.end()), sb(pb.begin(), pb.end());
  for (const auto& x : pa)
    if (!sb.count(x)) c.path_only_a.push_back(x);
  for (const auto& x : pb)
    if (!sa.count(x)) c.path_only_b.push_back(x);
  c.a = std::move(a);
  c.b = std::move(b);
  return c;
}

namespace {

double ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}
double pct(int64_t a, int64_t b) {
  return a != 0 ? 100.0 * static_cast<double>(b - a) / static_cast<double>(a) : 0.0;
}
double bubble_ratio(const Timeline& t) {
  if (t.devices.empty() || t.step <= 0) return 0;
  int64_t s = 0;
  for (const auto& d : t.devices) s += d.bubble;
  return static_cast<double>(s) / (static_cast<double>(t.step) * static_cast<double>(t.devices.size()));
}
int64_t exposed(const Timeline& t) {
  int64_t s = 0;
  for (const auto& d : t.devices) s += d.exposed_comm;
  return s;
}

}  // namespace

Json comparison_json(const Comparison& c) {
  Json j;
  auto side = [](const Timeline& t) {
    return Json{{"source", t.source},
                {"kind", t.kind},
                {"note", t.note},
                {"step_time_ms", ms(t.step)},
                {"bubble_ratio", bubble_ratio(t)},
                {"exposed_comm_ms", ms(exposed(t))},
                {"exposed_comm_ms_per_device",
                 t.devices.empty() ? 0.0
                                   : ms(exposed(t)) / static_cast<double>(t.devices.size())},
                {"ops", t.ops.size()}};
  };
  j["a"] = side(c.a);
  j["b"] = side(c.b);
  j["step_time_delta_ms"] = ms(c.b.step - c.a.step);
  j["step_time_delta_pct"] = pct(c.a.step, c.b.step);
  Json devs = Json::array();
  const size_t n = std::max(c.a.devices.size(), c.b.devices.size());
  for (size_t i = 0; i < n; ++i) {
    Json e;
    auto put = [&](const char* side, const std::vector<TimelineDevice>& v) {
      if (i >= v.size()) return;
      e["id"] = v[i].id;
      e[side] = {{"busy_ms", ms(v[i].busy)},
                 {"bubble_ms", ms(v[i].bubble)},
                 {"exposed_comm_ms", ms(v[i].exposed_comm)},
                 {"peak_memory_bytes", v[i].peak_memory}};
    };
    put("a", c.a.devices);
    put("b", c.b.devices);
    devs.push_back(std::move(e));
  }
  j["devices"] = std::move(devs);
  Json cls = Json::array();
  for (const auto& s : c.classes)
    cls.push_back({{"class", s.cls},
                   {"matched", s.matched},
                   {"a_median_ms", ms(s.a_median)},
                   {"b_median_ms", ms(s.b_median)},
                   {"median_err_pct", 100 * s.median_err},
                   {"worst_err_pct", 100 * s.worst_err},
                   {"worst_op", s.worst_key},
                   {"worst_device", s.worst_device}});
  j["op_classes"] = std::move(cls);
  auto delta_json = [](const std::vector<OpDelta>& v) {
    Json a = Json::array();
    for (const auto& d : v)
      a.push_back({{"op", d.key},
                   {"class", d.cls},
                   {"device", d.device},
                   {"a_start_ms", ms(d.a_start)},
                   {"b_start_ms", ms(d.b_start)},
                   {"a_ms", ms(d.a_dur)},
                   {"b_ms", ms(d.b_dur)},
                   {"err_pct", 100 * d.rel_err()}});
    return a;
  };
  j["matched_ops"] = c.matched;
  j["moved_most"] = delta_json(c.moved);
  j["duration_differs_most"] = delta_json(c.longer);
  j["only_in_a"] = {{"count", c.only_a_count}, {"examples", c.only_a}};
  j["only_in_b"] = {{"count", c.only_b_count}, {"examples", c.only_b}};
  j["critical_path"] = {{"a_length", c.a.critical_path.size()},
                        {"b_length", c.b.critical_path.size()},
                        {"only_on_a", c.path_only_a},
                        {"only_on_b", c.path_only_b}};
  return j;
}

std::string comparison_table(const Comparison& c) {
  std::string o;
  o += fmt::format("A  {} ({}{})\nB  {} ({}{})\n\n", c.a.source, c.a.kind,
                   c.a.note.empty() ? "" : ", " + c.a.note, c.b.source, c.b.kind,
                   c.b.note.empty() ? "" : ", " + c.b.note);
  o += fmt::format("{:<22} {:>12} {:>12} {:>12} {:>9}\n", "", "A", "B", "B - A", "B vs A");
  o += fmt::format("{:<22} {:>12.3f} {:>12.3f} {:>12.3f} {:>8.1f}%\n", "step time ms", ms(c.a.step),
                   ms(c.b.step), ms(c.b.step - c.a.step), pct(c.a.step, c.b.step));
  o += fmt::format("{:<22} {:>11.2f}% {:>11.2f}% {:>11.2f}pp\n", "bubble ratio",
                   100 * bubble_ratio(c.a), 100 * bubble_ratio(c.b),
                   100 * (bubble_ratio(c.b) - bubble_ratio(c.a)));
  o += fmt::format("{:<22} {:>12.3f} {:>12.3f} {:>12.3f}\n\n", "exposed comm ms (sum)",
                   ms(exposed(c.a)), ms(exposed(c.b)), ms(exposed(c.b) - exposed(c.a)));
  // Memory in GiB (as every other table); consecutive devices whose rows are equal (replicas)
  // are one row, "0-3".
  o += fmt::format("{:>9}  {:>19}  {:>19}  {:>19}  {:>19}\n", "device", "busy ms A / B",
                   "bubble ms A / B", "exp.comm ms A / B", "peak GiB A / B");
  const size_t n = std::max(c.a.devices.size(), c.b.devices.size());
  auto gib = [](int64_t b) { return b < 0 ? std::string("-") : fmt::format("{:.2f}", b / 1073741824.0); };
  std::string prev_row;
  int first_id = 0, last_id = 0;
  auto flush = [&] {
    if (prev_row.empty()) return;
    const std::string ids =
        first_id == last_id ? fmt::format("{}", first_id) : fmt::format("{}-{}", first_id, last_id);
    o += fmt::format("{:>9}{}", ids, prev_row);
  };
  for (size_t i = 0; i < n; ++i) {
    const TimelineDevice none{static_cast<int>(i), 0, 0, 0, -1};
    const auto& x = i < c.a.devices.size() ? c.a.devices[i] : none;
    const auto& y = i < c.b.devices.size() ? c.b.devices[i] : none;
    const std::string row = fmt::format(
        "  {:>9.3f} {:>9.3f}  {:>9.3f} {:>9.3f}  {:>9.3f} {:>9.3f}  {:>9} {:>9}\n", ms(x.busy),
        ms(y.busy), ms(x.bubble), ms(y.bubble), ms(x.exposed_comm), ms(y.exposed_comm),
        gib(x.peak_memory), gib(y.peak_memory));
    if (row == prev_row && x.id == last_id + 1) {
      last_id = x.id;
      continue;
    }
    flush();
    prev_row = row;
    first_id = last_id = x.id;
  }
  flush();
  if (!c.a.has_ops || !c.b.has_ops) {
    o += "\n(no per-op comparison: " +
         std::string(!c.a.has_ops ? "A" : "B") + " has no ops, only summary metrics)\n";
    return o;
  }
  o += fmt::format("\n{} ops matched; {} only in A, {} only in B\n", c.matched, c.only_a_count,
                   c.only_b_count);
  o += fmt::format("\n{:<15} {:>7} {:>11} {:>11} {:>10} {:>10}  {}\n", "op class", "matched",
                   "median A ms", "median B ms", "median err", "worst err", "worst op");
  for (const auto& s : c.classes)
    o += fmt::format("{:<15} {:>7} {:>11.3f} {:>11.3f} {:>9.1f}% {:>9.1f}%  {} @ {}\n", s.cls,
                     s.matched, ms(s.a_median), ms(s.b_median), 100 * s.median_err,
                     100 * s.worst_err, s.worst_key, s.worst_device);
  auto list = [&](const char* title, const std::vector<OpDelta>& v) {
    if (v.empty()) return;
    o += fmt::format("\n{}\n{:>6}  {:>10} {:>10}  {:>9} {:>9} {:>8}  {}\n", title, "device",
                     "start A", "start B", "ms A", "ms B", "err", "op");
    for (const auto& d : v)
      o += fmt::format("{:>6}  {:>10.3f} {:>10.3f}  {:>9.3f} {:>9.3f} {:>7.1f}%  {}\n", d.device,
                       ms(d.a_start), ms(d.b_start), ms(d.a_dur), ms(d.b_dur), 100 * d.rel_err(),
                       d.key);
  };
  list("ops that moved most (start or end, ms):", c.moved);
  list("ops whose duration differs most:", c.longer);
  if (!c.only_a.empty()) o += "\nonly in A: " + fmt::format("{}", fmt::join(c.only_a, ", ")) + "\n";
  if (!c.only_b.empty()) o += "\nonly in B: " + fmt::format("{}", fmt::join(c.only_b, ", ")) + "\n";
  o += fmt::format("\ncritical path: {} ops in A, {} in B\n", c.a.critical_path.size(),
                   c.b.critical_path.size());
  if (c.path_only_a.empty() && c.path_only_b.empty()) {
    o += "  the same ops on both\n";
  } else {
    auto few = [](const std::vector<std::string>& v) {
      std::vector<std::string> w(v.begin(), v.begin() + static_cast<long>(std::min<size_t>(v.size(), 8)));
      return fmt::format("{}{}", fmt::join(w, ", "), v.size() > 8 ? fmt::format(", ... ({} more)", v.size() - 8) : "");
    };
    if (!c.path_only_a.empty()) o += "  only on A's: " + few(c.path_only_a) + "\n";
    if (!c.path_only_b.empty()) o += "  only on B's: " + few(c.path_only_b) + "\n";
  }
  return o;
}

double kendall_tau(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  int64_t conc = 0, disc = 0, tx = 0, ty = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const double dx = x[i] - x[j], dy = y[i] - y[j];
      if (dx == 0 && dy == 0) continue;
      if (dx == 0) {
        ++tx;
      } else if (dy == 0) {
        ++ty;
      } else if ((dx > 0) == (dy > 0)) {
        ++conc;
      } else {
        ++disc;
      }
    }
  const double denom = std::sqrt(static_cast<double>(conc + disc + tx) *
                                 static_cast<double>(conc + disc + ty));
  return denom > 0 ? static_cast<double>(conc - disc) / denom : 0.0;
}

}  // namespace stretto::traces
