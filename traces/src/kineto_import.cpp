// Kineto trace import (kineto.h).

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "stretto/costmodel/profile_table.h"
#include "stretto/traces/kineto.h"
#include "stretto/traces/op_label.h"
#include "stretto/traces/trace_reader.h"

namespace stretto::traces {

using plan::Json;
using plan::Pass;

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

bool starts_with_ci(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != p[i]) return false;
  return true;
}

Spread spread_of(std::vector<int64_t> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.count = v.size();
  s.min = v.front();
  s.max = v.back();
  // median: lower middle for even counts keeps it a measured value
  s.median = v[(v.size() - 1) / 2];
  for (int64_t x : v) s.total += x;
  return s;
}

class Interner {
 public:
  uint32_t id(std::string_view s) {
    auto it = ids_.find(std::string(s));
    if (it != ids_.end()) return it->second;
    const auto i = static_cast<uint32_t>(strs_.size());
    strs_.emplace_back(s);
    ids_.emplace(strs_.back(), i);
    return i;
  }
  const std::string& str(uint32_t i) const { return strs_[i]; }

 private:
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> strs_;
};

struct Coll {
  std::string kind;  // normalised
  std::string name;  // as written
  int64_t in_nelems = -1, out_nelems = -1;
  int group = 0;
  std::string dtype;
  int64_t seq = -1;
  std::string pg;  // "Process Group Name": Seq counts per process group
  bool shard_input = false;  // from a "gloo:all_gather" range: In = one rank's shard
};

struct Range {  // a labelled range or a step
  int64_t start = 0, end = 0;
  uint32_t thread = 0;
  uint32_t name = 0;
};

struct CpuOp {
  int64_t start = 0, end = 0;
  int64_t ext = -1;
  uint32_t thread = 0, name = 0, dims = kNone, types = kNone;
  int32_t coll = -1;
};

enum class GpuWork : uint8_t { kKernel, kMemcpy, kMemset };

struct Kernel {
  int64_t start = 0, dur = 0;
  uint32_t name = 0;
  int64_t corr = -1, ext = -1;
  int32_t coll = -1;
  uint32_t label = kNone;  // args.piper_dag_node
  GpuWork work = GpuWork::kKernel;
};

struct Launch {
  int64_t ts = 0;
  uint32_t thread = 0;
  int64_t ext = -1;
};

// A sorted vector of (key, value) with unique keys (first wins): half the memory of a hash map
// for the millions of launches and CPU ops of a large trace.
template <class V>
struct SortedIndex {
  std::vector<std::pair<int64_t, V>> v;
  void add(int64_t k, V x) { v.emplace_back(k, std::move(x)); }
  void seal() {
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    v.erase(std::unique(v.begin(), v.end(),
                        [](const auto& a, const auto& b) { return a.first == b.first; }),
            v.end());
  }
  const V* find(int64_t k) const {
    auto it = std::lower_bound(v.begin(), v.end(), k,
                               [](const auto& a, int64_t x) { return a.first < x; });
    return it != v.end() && it->first == k ? &it->second : nullptr;
  }
};

// Everything kept from one file until it is joined.
struct FileRecords {
  Interner names;
  std::unordered_map<std::string, uint32_t> threads;
  std::vector<Range> steps, labels;
  std::vector<CpuOp> ops;
  SortedIndex<uint32_t> op_by_ext;
  std::vector<Kernel> kernels;
  SortedIndex<Launch> launches;
  std::vector<Coll> colls;
  std::map<std::string, int64_t> peak_mem;

  uint32_t thread(const Json& ev) {
    auto part = [](const Json* v) {
      if (!v) return std::string("?");
      return v->is_string() ? v->get<std::string>() : v->dump();
    };
    auto p = ev.find("pid");
    auto t = ev.find("tid");
    std::string k = part(p == ev.end() ? nullptr : &*p) + "/" + part(t == ev.end() ? nullptr : &*t);
    auto it = threads.find(k);
    if (it != threads.end()) return it->second;
    const auto id = static_cast<uint32_t>(threads.size());
    threads.emplace(std::move(k), id);
    return id;
  }
};

// Reads an integer that may be written as a number or a numeric string.
std::optional<int64_t> as_int(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    int64_t x = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), x);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return x;
  }
  return std::nullopt;
}

// Parses the collective args of an event; an error names the member at fault.
std::optional<EventError> read_coll(const Json& args, Coll& c) {
  auto name = args.find("Collective name");
  if (!name->is_string())
    return EventError{"args/Collective name", "'Collective name' must be a string", ""};
  c.name = name->get<std::string>();
  c.kind = collective_kind(c.name);
  auto num = [&](const char* key, int64_t& out) -> std::optional<EventError> {
    auto it = args.find(key);
    if (it == args.end()) return std::nullopt;
    auto v = as_int(*it);
    if (!v || *v < 0)
      return EventError{std::string("args/") + key,
                        fmt::format("'{}' must be a non-negative integer (got {})", key,
                                    it->dump()),
                        ""};
    out = *v;
    return std::nullopt;
  };
  if (auto e = num("In msg nelems", c.in_nelems)) return e;
  if (auto e = num("Out msg nelems", c.out_nelems)) return e;
  int64_t g = 0;
  if (auto e = num("Group size", g)) return e;
  c.group = static_cast<int>(g);
  if (auto e = num("Seq", c.seq)) return e;
  if (auto it = args.find("dtype"); it != args.end() && it->is_string()) c.dtype = it->get<std::string>();
  if (auto it = args.find("Process Group Name"); it != args.end() && it->is_string())
    c.pg = it->get<std::string>();
  if (c.group == 0) {
    // "Process Group Ranks": [0, 1, 2] or "[0, 1, 2]" or "[0, 1, ..., 7]" (truncated)
    auto it = args.find("Process Group Ranks");
    if (it != args.end()) {
      if (it->is_array()) {
        c.group = static_cast<int>(it->size());
      } else if (it->is_string()) {
        const std::string& s = it->get_ref<const std::string&>();
        if (s.find("...") == std::string::npos) {
          int n = 0;
          bool in_num = false;
          for (char ch : s) {
            const bool d = ch >= '0' && ch <= '9';
            if (d && !in_num) ++n;
            in_num = d;
          }
          c.group = n;
        }
      }
    }
  }
  return std::nullopt;
}

int64_t coll_bytes(const Coll& c) {
  const int64_t es = dtype_size(c.dtype);
  if (es == 0) return -1;
  int64_t n = -1;
  if (c.kind == "all_gather")
    n = c.out_nelems;
  else if (c.kind == "send_recv")
    n = std::max(c.in_nelems, c.out_nelems);
  else
    n = c.in_nelems >= 0 ? c.in_nelems : c.out_nelems;
  return n < 0 ? -1 : n * es;
}

bool is_gemm(std::string_view op) {
  return op == "aten::mm" || op == "aten::addmm" || op == "aten::matmul" || op == "aten::linear" ||
         op == "aten::bmm" || op == "aten::baddbmm";
}

// What is wrong with an op's `Input Dims` (a list of shapes, each a list of sizes 0..2^40, or
// for a TensorList input a list of such shapes), else nothing.
std::optional<std::string> bad_dims(const Json& dims) {
  if (!dims.is_array()) return "is not a list of shapes";
  auto bad_size = [](const Json& x) {
    return x.is_number() && (!x.is_number_integer() || x.get<int64_t>() < 0 ||
                             x.get<int64_t>() > (int64_t{1} << 40));
  };
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].is_array()) continue;  // a scalar or non-tensor input
    for (const auto& x : dims[i]) {
      if (bad_size(x)) return fmt::format("has size {} in input {}", x.dump().substr(0, 40), i);
      if (x.is_array())  // a tensor of a TensorList
        for (const auto& y : x)
          if (bad_size(y)) return fmt::format("has size {} in input {}", y.dump().substr(0, 40), i);
    }
  }
  return std::nullopt;
}

// Forward GEMM shape (m, n, k, batch) from an op's `Input Dims`.
std::optional<std::tuple<int64_t, int64_t, int64_t, int64_t>> gemm_shape(std::string_view op,
                                                                         const Json& dims) {
  if (!dims.is_array()) return std::nullopt;
  auto shape = [&](size_t i) -> std::vector<int64_t> {
    std::vector<int64_t> s;
    if (i < dims.size() && dims[i].is_array())
      for (const auto& d : dims[i])
        if (d.is_number_integer()) s.push_back(d.get<int64_t>());
    return s;
  };
  auto lead = [](const std::vector<int64_t>& s) {
    int64_t m = 1;
    for (size_t i = 0; i + 1 < s.size(); ++i) m *= s[i];
    return m;
  };
  if (op == "aten::linear") {  // input [..., k], weight [n, k]
    auto x = shape(0), w = shape(1);
    if (x.size() >= 2 && w.size() == 2) return std::tuple{lead(x), w[0], w[1], int64_t{1}};
  } else if (op == "aten::mm" || op == "aten::matmul") {
    auto a = shape(0), b = shape(1);
    if (a.size() >= 2 && b.size() == 2) return std::tuple{lead(a), b[1], b[0], int64_t{1}};
  } else if (op == "aten::addmm") {  // bias, [m,k], [k,n]
    auto a = shape(1), b = shape(2);
    if (a.size() == 2 && b.size() == 2) return std::tuple{a[0], b[1], a[1], int64_t{1}};
  } else if (op == "aten::bmm") {
    auto a = shape(0), b = shape(1);
    if (a.size() == 3 && b.size() == 3) return std::tuple{a[1], b[2], a[2], a[0]};
  } else if (op == "aten::baddbmm") {
    auto a = shape(1), b = shape(2);
    if (a.size() == 3 && b.size() == 3) return std::tuple{a[1], b[2], a[2], a[0]};
  }
  return std::nullopt;
}

std::string table_dtype(std::string_view torch_type) {
  const std::string t = lower(torch_type);
  if (t.find("bfloat16") != std::string::npos) return "bf16";
  if (t.find("half") != std::string::npos || t.find("float16") != std::string::npos) return "fp16";
  if (t.find("float8") != std::string::npos) return "fp8";
  if (t.find("float") != std::string::npos) return "fp32";
  return "";
}

// What timed a collective (KinetoCollective::timing).
enum class Timing : uint8_t { kKernel, kCpuThread, kHost };

const char* timing_name(Timing t) {
  switch (t) {
    case Timing::kKernel:
      return "kernel";
    case Timing::kCpuThread:
      return "cpu_thread";
    case Timing::kHost:
      return "host";
  }
  return "";
}

// Aggregates across files.
struct Totals {
  std::map<std::string, std::vector<int64_t>> kernel_times;  // by kernel name
  // (kind, group, bytes, dtype, timing) -> durations
  std::map<std::tuple<std::string, int, int64_t, std::string, Timing>, std::vector<int64_t>> colls;
  std::map<std::string, std::vector<int64_t>> op_times;  // by label key without MB
  std::map<std::string, std::string> op_table_name;
  // table kernels: (op, pass, dtype, m, n, k, batch) -> durations
  std::map<std::tuple<std::string, std::string, std::string, int64_t, int64_t, int64_t, int64_t>,
           std::vector<int64_t>>
      table_kernels;
  std::map<std::string, size_t> unattributed;
};

class FileImporter {
 public:
  FileImporter(const std::string& path, size_t file_index, const KinetoImportOptions& opt,
               Totals& tot)
      : path_(path), index_(file_index), opt_(opt), tot_(tot) {}

  Expected<KinetoRank> run() {
    auto h = read_trace(path_, [this](const RawEvent& e) { return on_event(e); });
    if (!h) return fail(std::move(h.error()));
    KinetoRank r;
    r.file = path_;
    r.events = h->events;
    r.bytes = h->bytes;
    r.gzip = h->gzip;
    const Json& md = h->metadata;
    if (auto di = md.find("distributedInfo"); di != md.end() && di->is_object()) {
      if (auto v = di->find("rank"); v != di->end()) {
        if (auto x = as_int(*v)) r.rank = static_cast<int>(*x);
      }
      if (auto v = di->find("world_size"); v != di->end()) {
        if (auto x = as_int(*v)) r.world_size = static_cast<int>(*x);
      }
      if (auto v = di->find("backend"); v != di->end() && v->is_string())
        r.backend = v->get<std::string>();
    }
    if (r.rank < 0) {
      r.rank = static_cast<int>(index_);
      r.rank_from_file_order = true;
    }
    if (auto dp = md.find("deviceProperties");
        dp != md.end() && dp->is_array() && !dp->empty() && (*dp)[0].is_object()) {
      if (auto n = (*dp)[0].find("name"); n != (*dp)[0].end() && n->is_string())
        r.device = n->get<std::string>();
    }
    join(r);
    return r;
  }

 private:
  std::optional<EventError> on_event(const RawEvent& e) {
    const Json& ev = *e.json;
    if (e.ph == "i" || e.ph == "I") {
      if (e.name == "[memory]") memory(ev);
      return std::nullopt;
    }
    if (e.ph != "X") return std::nullopt;
    const std::string cat = lower(e.cat);
    const bool step = e.name.rfind("ProfilerStep#", 0) == 0;
    const bool kernel = cat == "kernel";
    const bool mem = cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "memcpy" || cat == "memset";
    const bool launch = cat == "cuda_runtime" || cat == "cuda_driver" || cat == "runtime";
    const bool cpu = cat == "cpu_op" || cat == "operator";
    const bool annot = cat == "user_annotation" || cat == "gpu_user_annotation";
    if (!(step || kernel || mem || launch || cpu || annot)) return std::nullopt;
    if (!e.has_ts) return EventError{"ts", fmt::format("slice '{}' has no numeric 'ts'", e.name), ""};
    if (!e.has_dur)
      return EventError{"dur", fmt::format("slice '{}' has no numeric 'dur'", e.name),
                        "a complete event (\"ph\": \"X\") needs \"dur\" in microseconds"};
    if (e.dur_ns < 0)
      return EventError{"dur", fmt::format("slice '{}' has a negative duration", e.name), ""};
    static const Json kEmpty = Json::object();
    auto ai = ev.find("args");
    const Json& args = ai != ev.end() && ai->is_object() ? *ai : kEmpty;
    auto arg_int = [&](const char* k) -> std::optional<int64_t> {
      auto it = args.find(k);
      return it == args.end() ? std::nullopt : as_int(*it);
    };
    // older Kineto writes "external id" on GPU and runtime records
    const int64_t ext = arg_int("External id").value_or(arg_int("external id").value_or(-1));
    if (step) {
      if (cat != "gpu_user_annotation")
        f_.steps.push_back({e.ts_ns, e.ts_ns + e.dur_ns, f_.thread(ev), f_.names.id(e.name)});
      return std::nullopt;
    }
    // Shapes feed the GEMM table and c10d message sizes: each a list of lists of sizes >= 0
    // (the profiler writes [] for a non-tensor input), refused here where they stand.
    if (auto d = args.find("Input Dims"); d != args.end() && (cpu || annot))
      if (auto bad = bad_dims(*d))
        return EventError{"args/Input Dims",
                          fmt::format("slice '{}': 'Input Dims' {}", e.name, *bad),
                          "each input's shape is a list of sizes from 0 to 2^40"};
    int32_t coll = -1;
    if (args.contains("Collective name")) {
      Coll c;
      if (auto err = read_coll(args, c)) return err;
      coll = static_cast<int32_t>(f_.colls.size());
      f_.colls.push_back(std::move(c));
    } else if ((cpu || annot) && cat != "gpu_user_annotation" &&
               (e.name.rfind("gloo:", 0) == 0 || e.name.rfind("nccl:", 0) == 0)) {
      // c10d's own ranges ("gloo:all_reduce"): the message from the input shapes and types
      Coll c;
      c.name = std::string(e.name.substr(5));
      c.kind = collective_kind(c.name);
      if (auto d = args.find("Input Dims"); d != args.end() && d->is_array() && !d->empty() &&
                                            (*d)[0].is_array()) {
        int64_t n = 1;
        for (const auto& x : (*d)[0]) n *= x.is_number_integer() ? x.get<int64_t>() : 0;
        c.in_nelems = n;
        c.shard_input = c.kind == "all_gather";
      }
      if (auto t = args.find("Input type"); t != args.end() && t->is_array() && !t->empty() &&
                                            (*t)[0].is_string())
        c.dtype = (*t)[0].get<std::string>();
      coll = static_cast<int32_t>(f_.colls.size());
      f_.colls.push_back(std::move(c));
      add_op(e, ev, coll, args, ext);
      return std::nullopt;
    }
    if (kernel || mem) {
      Kernel k;
      k.start = e.ts_ns;
      k.dur = e.dur_ns;
      k.name = f_.names.id(e.name);
      k.corr = arg_int("correlation").value_or(-1);
      k.ext = ext;
      k.coll = coll;
      if (mem) k.work = cat.find("memset") != std::string::npos ? GpuWork::kMemset : GpuWork::kMemcpy;
      if (auto it = args.find("piper_dag_node"); it != args.end() && it->is_string())
        k.label = f_.names.id(it->get_ref<const std::string&>());
      f_.kernels.push_back(k);
    } else if (launch) {
      if (auto c = arg_int("correlation")) f_.launches.add(*c, {e.ts_ns, f_.thread(ev), ext});
    } else if (cpu) {
      add_op(e, ev, coll, args, ext);
    } else if (annot && cat == "user_annotation") {
      const OpLabel l = parse_op_label(e.name);
      if (l.logical)
        f_.labels.push_back({e.ts_ns, e.ts_ns + e.dur_ns, f_.thread(ev), f_.names.id(e.name)});
    }
    return std::nullopt;
  }

  // A CPU op (or c10d range): its interval, thread, name, GEMM shapes and External id.
  void add_op(const RawEvent& e, const Json& ev, int32_t coll, const Json& args, int64_t ext) {
    CpuOp o;
    o.start = e.ts_ns;
    o.end = e.ts_ns + e.dur_ns;
    o.thread = f_.thread(ev);
    o.name = f_.names.id(e.name);
    o.coll = coll;
    o.ext = ext;
    if (is_gemm(e.name)) {
      if (auto d = args.find("Input Dims"); d != args.end()) o.dims = f_.names.id(d->dump());
      if (auto t = args.find("Input type"); t != args.end()) o.types = f_.names.id(t->dump());
    }
    const auto i = static_cast<uint32_t>(f_.ops.size());
    f_.ops.push_back(o);
    if (o.ext >= 0) f_.op_by_ext.add(o.ext, i);
  }

  void memory(const Json& ev) {
    auto a = ev.find("args");
    if (a == ev.end() || !a->is_object()) return;
    auto tot = a->find("Total Allocated");
    if (tot == a->end()) return;
    auto v = as_int(*tot);
    if (!v) return;
    std::string dev = "cpu";
    auto type = a->find("Device Type");
    auto id = a->find("Device Id");
    const int64_t t = type != a->end() ? as_int(*type).value_or(0) : 0;
    const int64_t i = id != a->end() ? as_int(*id).value_or(-1) : -1;
    if (t == 1) dev = fmt::format("cuda:{}", i);
    int64_t& peak = f_.peak_mem[dev];
    peak = std::max(peak, *v);
  }

  // Index of the range enclosing `ts` on `thread` (innermost), among ranges sorted by start.
  static int64_t enclosing(const std::vector<Range>& rs, uint32_t thread, int64_t ts,
                           bool any_thread) {
    auto it = std::upper_bound(rs.begin(), rs.end(), ts,
                               [](int64_t t, const Range& r) { return t < r.start; });
    int scanned = 0;
    while (it != rs.begin() && scanned < 256) {
      --it;
      ++scanned;
      if ((any_thread || it->thread == thread) && it->start <= ts && ts <= it->end)
        return it - rs.begin();
    }
    return -1;
  }

  void join(KinetoRank& r) {
    f_.launches.seal();
    f_.op_by_ext.seal();
    auto by_start = [](const Range& a, const Range& b) {
      return std::tie(a.start, a.end) < std::tie(b.start, b.end);
    };
    std::sort(f_.steps.begin(), f_.steps.end(), by_start);
    std::sort(f_.labels.begin(), f_.labels.end(), by_start);
    r.steps_seen = f_.steps.size();
    const size_t skip = warmup_steps(f_.steps.size(), opt_.skip_steps);
    r.steps_used = f_.steps.size() - skip;
    // A kernel's launch: its runtime call by correlation, else its CPU op by External id.
    auto launch_of = [&](const Kernel& k) -> std::optional<std::pair<int64_t, uint32_t>> {
      if (const Launch* l = f_.launches.find(k.corr)) return std::pair{l->ts, l->thread};
      if (const uint32_t* o = f_.op_by_ext.find(k.ext))
        return std::pair{f_.ops[*o].start, f_.ops[*o].thread};
      return std::nullopt;
    };
    // The steps (kineto_step.h): host ranges extended to the GPU work launched in them.
    {
      std::vector<StepSpan> host;
      for (size_t i = 0; i < f_.steps.size(); ++i)
        host.push_back({profiler_step_number(f_.names.str(f_.steps[i].name))
                            .value_or(static_cast<int64_t>(i)),
                        f_.steps[i].start, f_.steps[i].end});
      std::vector<GpuOpSpan> gpu;
      gpu.reserve(f_.kernels.size());
      for (const Kernel& k : f_.kernels) {
        const auto l = launch_of(k);
        gpu.push_back({l ? l->first : k.start, k.start + k.dur});
      }
      r.used_steps = rank_steps(std::move(host), gpu, opt_.skip_steps);
      std::vector<int64_t> step_ns;
      for (const StepSpan& s : r.used_steps) step_ns.push_back(s.duration());
      r.step = spread_of(step_ns);
    }
    const bool have_steps = !f_.steps.empty();
    auto used_step = [&](int64_t ts) {
      if (!have_steps) return true;
      int64_t s = enclosing(f_.steps, 0, ts, true);
      return s >= static_cast<int64_t>(skip);
    };
    if (!have_steps) ++tot_.unattributed["files without ProfilerStep# ranges (all events used)"];
    // collectives that name no group: the default group (world size)
    for (Coll& c : f_.colls) {
      if (c.group <= 0 && r.world_size > 0) c.group = r.world_size;
      if (c.shard_input && c.group > 0 && c.in_nelems >= 0) {
        c.out_nelems = c.in_nelems * c.group;
        c.shard_input = false;
      }
    }

    time_collectives(used_step);
    // kernels
    // per labelled range: summed kernel time
    std::unordered_map<int64_t, int64_t> label_kernel_ns;
    for (uint32_t ki = 0; ki < f_.kernels.size(); ++ki) {
      const Kernel& k = f_.kernels[ki];
      int64_t when = k.start;
      uint32_t thread = kNone;
      if (const auto l = launch_of(k)) {
        when = l->first;
        thread = l->second;
      } else {
        ++tot_.unattributed["kernels with no launch (correlation) or CPU op (External id)"];
      }
      if (!used_step(when)) {
        ++tot_.unattributed[have_steps && enclosing(f_.steps, 0, when, true) < 0
                                ? "kernels outside every ProfilerStep#"
                                : "kernels in warm-up steps (dropped)"];
        continue;
      }
      if (k.work == GpuWork::kMemcpy) {
        ++r.memcpy;
        r.memcpy_ns += k.dur;
      } else if (k.work == GpuWork::kMemset) {
        ++r.memset;
        r.memset_ns += k.dur;
      } else {
        ++r.kernels;
        r.kernel_ns += k.dur;
        tot_.kernel_times[f_.names.str(k.name)].push_back(k.dur);
      }
      const bool comm = is_comm_kernel(k);
      // logical op
      if (k.label != kNone) {
        add_label_time(f_.names.str(k.label), -1 - static_cast<int64_t>(k.label), k.dur,
                       label_kernel_ns);
      } else if (thread != kNone) {
        int64_t li = enclosing(f_.labels, thread, when, false);
        // autograd runs backward on its own thread: a range of the same process encloses it
        if (li < 0) li = enclosing(f_.labels, thread, when, true);
        if (li >= 0)
          label_kernel_ns[li] += k.dur;
        else if (!comm)
          ++tot_.unattributed["kernels in no labelled op range"];
      }
    }
    for (const CpuOp& o : f_.ops)
      if (used_step(o.start)) ++r.cpu_ops;
    // labelled ranges: GPU traces time them by their kernels, CPU traces by the range itself
    const bool gpu = r.kernels + r.memcpy + r.memset > 0;
    if (r.device.empty()) r.device = gpu ? "gpu" : "cpu";
    // forward GEMM shapes by op identity (label key without PASS and MB)
    std::map<std::string, std::tuple<int64_t, int64_t, int64_t, int64_t, std::string>> fwd_shape;
    struct Inst {
      OpLabel l;
      int64_t ns;
      std::optional<std::tuple<int64_t, int64_t, int64_t, int64_t, std::string>> shape;
    };
    std::vector<Inst> insts;
    for (size_t li = 0; li < f_.labels.size(); ++li) {
      const Range& lr = f_.labels[li];
      if (!used_step(lr.start)) continue;
      ++r.labelled_ops;
      Inst in;
      in.l = parse_op_label(f_.names.str(lr.name));
      if (gpu) {
        auto it = label_kernel_ns.find(static_cast<int64_t>(li));
        if (it == label_kernel_ns.end()) continue;  // no device work (e.g. a CPU-side wrapper)
        in.ns = it->second;
      } else {
        in.ns = lr.end - lr.start;
      }
      // the first GEMM inside the range on its thread
      for (const CpuOp& o : ops_in(lr)) {
        auto g = o.dims == kNone ? std::nullopt
                                 : gemm_shape(f_.names.str(o.name),
                                              Json::parse(f_.names.str(o.dims), nullptr, false));
        if (!g) continue;
        std::string dt;
        if (o.types != kNone) {
          Json t = Json::parse(f_.names.str(o.types), nullptr, false);
          if (t.is_array() && !t.empty() && t[0].is_string()) dt = table_dtype(t[0].get<std::string>());
        }
        auto [m, n, k, b] = *g;
        in.shape = std::tuple{m, n, k, b, dt};
        break;
      }
      if (in.l.op && in.l.tags.pass == Pass::kF && in.shape) {
        // the forward's own shape serves its backward of the same microbatch, and (when the
        // microbatch is not known) any backward of the op
        fwd_shape[identity(in.l) + fmt::format("/mb{}", in.l.tags.mb())] = *in.shape;
        fwd_shape.emplace(identity(in.l), *in.shape);
      }
      insts.push_back(std::move(in));
    }
    // kernels carrying Piper's piper_dag_node: one instance per distinct label
    for (const auto& [key, label] : piper_labels_) {
      Inst in;
      in.l = parse_op_label(label);
      in.ns = label_kernel_ns[key];
      ++r.labelled_ops;
      insts.push_back(std::move(in));
    }
    for (const Inst& in : insts) {
      OpLabel nomb = in.l;
      nomb.tags.set(plan::TagKey::kMB, plan::kAbsent);
      std::string key = nomb.key();
      if (in.l.op) key += " " + std::string(cost::profile_op_name(*in.l.op));
      tot_.op_times[key].push_back(in.ns);
      if (in.l.op) tot_.op_table_name[key] = std::string(cost::profile_op_name(*in.l.op));
      if (!in.l.op) {
        ++tot_.unattributed["labelled ops naming no model op (not in the table)"];
        continue;
      }
      if (in.l.tags.pass == Pass::kNone) {
        ++tot_.unattributed["labelled ops with no pass (not in the table)"];
        continue;
      }
      // a forward is keyed by its own GEMM shape; a backward by its forward's
      auto fs = fwd_shape.find(identity(in.l) + fmt::format("/mb{}", in.l.tags.mb()));
      if (fs == fwd_shape.end()) fs = fwd_shape.find(identity(in.l));
      if (in.l.tags.pass == Pass::kF && in.shape) fs = fwd_shape.end();
      if (in.l.tags.pass == Pass::kF && !in.shape) {
        ++tot_.unattributed["labelled ops with no forward GEMM shape (not in the table)"];
        continue;
      }
      if (in.l.tags.pass != Pass::kF && fs == fwd_shape.end()) {
        ++tot_.unattributed["labelled ops with no forward GEMM shape (not in the table)"];
        continue;
      }
      auto [m, n, k, b, dt] = in.l.tags.pass == Pass::kF ? *in.shape : fs->second;
      tot_.table_kernels[{std::string(cost::profile_op_name(*in.l.op)),
                          std::string(plan::pass_name(in.l.tags.pass)), dt.empty() ? "bf16" : dt, m,
                          n, k, b}]
          .push_back(in.ns);
    }
    r.peak_memory = f_.peak_mem;
  }

  // The collective kind in an NCCL kernel's name ("ncclDevKernel_AllGather_RING_LL" ->
  // "all_gather"), or "".
  static std::string kernel_kind(std::string_view name) {
    for (std::string_view p : {"ncclDevKernel_", "ncclKernel_"}) {
      if (name.rfind(p, 0) != 0) continue;
      std::string_view rest = name.substr(p.size());
      return collective_kind(rest.substr(0, rest.find_first_of("_(")));
    }
    return "";
  }

  bool is_comm_kernel(const Kernel& k) const {
    if (k.work != GpuWork::kKernel) return false;
    const std::string& n = f_.names.str(k.name);
    return k.coll >= 0 || starts_with_ci(n, "nccl") || starts_with_ci(n, "gloo");
  }

  // One collective call: its CPU records (a c10d range nested in record_param_comms is the same
  // call), the op whose args describe it, and the GPU kernels matched to it.
  struct Call {
    int32_t coll = -1;
    int64_t start = 0, end = 0;
    uint32_t thread = kNone;
    bool cpu_backend = false;  // a gloo: range: the CPU backend ran the collective on it
    size_t kernels = 0;
    int64_t kernel_ns = 0;
  };

  // Fills the fields `outer` lacks from `inner` (the same call described twice).
  void merge_coll(Coll& outer, const Coll& inner) {
    if (outer.in_nelems < 0) outer.in_nelems = inner.in_nelems;
    if (outer.out_nelems < 0) outer.out_nelems = inner.out_nelems;
    if (outer.group <= 0) outer.group = inner.group;
    if (outer.dtype.empty()) outer.dtype = inner.dtype;
    if (outer.seq < 0) outer.seq = inner.seq;
    if (outer.pg.empty()) outer.pg = inner.pg;
  }

  // The calls that carry a sequence number, by (kind, Seq).
  using SeqIndex = std::map<std::pair<std::string, int64_t>, std::vector<size_t>>;
  SeqIndex seq_index(const std::vector<Call>& calls) const {
    SeqIndex by_seq;
    for (size_t i = 0; i < calls.size(); ++i) {
      const Coll& o = f_.colls[static_cast<size_t>(calls[i].coll)];
      if (o.seq >= 0 && !calls[i].cpu_backend) by_seq[{o.kind, o.seq}].push_back(i);
    }
    return by_seq;
  }

  // The call without a kernel yet that a kernel carrying collective args `k` names by its
  // sequence number: the same kind and Seq, and the same process group name and group size
  // where both sides give one (Seq counts per process group), or -1.
  int64_t call_by_seq(const SeqIndex& by_seq, const std::vector<Call>& calls, const Coll& k) const {
    if (k.seq < 0) return -1;
    auto it = by_seq.find({k.kind, k.seq});
    if (it == by_seq.end()) return -1;
    for (size_t i : it->second) {
      const Coll& o = f_.colls[static_cast<size_t>(calls[i].coll)];
      if (calls[i].kernels == 0 && (o.pg.empty() || k.pg.empty() || o.pg == k.pg) &&
          (o.group <= 0 || k.group <= 0 || o.group == k.group))
        return static_cast<int64_t>(i);
    }
    return -1;
  }

  // The collective calls of the file's CPU records, and an index from External id to call.
  std::vector<Call> collective_calls(std::unordered_map<int64_t, size_t>& by_ext) {
    std::vector<uint32_t> order;
    for (uint32_t i = 0; i < f_.ops.size(); ++i)
      if (f_.ops[i].coll >= 0) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const CpuOp &x = f_.ops[a], &y = f_.ops[b];
      return std::tuple(x.thread, x.start, -x.end) < std::tuple(y.thread, y.start, -y.end);
    });
    std::vector<Call> calls;
    std::vector<size_t> open;  // calls of the current thread still open, outermost first
    for (uint32_t i : order) {
      const CpuOp& o = f_.ops[i];
      while (!open.empty() && (calls[open.back()].thread != o.thread || calls[open.back()].end < o.start))
        open.pop_back();
      Coll& c = f_.colls[static_cast<size_t>(o.coll)];
      if (!open.empty() && o.end <= calls[open.back()].end) {
        Call& outer = calls[open.back()];
        Coll& oc = f_.colls[static_cast<size_t>(outer.coll)];
        if (oc.kind == c.kind || oc.kind.empty() || c.kind.empty()) {
          merge_coll(oc, c);
          if (o.ext >= 0) by_ext.emplace(o.ext, open.back());
          continue;
        }
      }
      Call call;
      call.coll = o.coll;
      call.start = o.start;
      call.end = o.end;
      call.thread = o.thread;
      call.cpu_backend = f_.names.str(o.name).rfind("gloo:", 0) == 0;
      if (o.ext >= 0) by_ext.emplace(o.ext, calls.size());
      open.push_back(calls.size());
      calls.push_back(call);
    }
    return calls;
  }

  // The call (index) whose CPU record encloses `ts` on `thread`, or -1.
  static int64_t call_at(const std::vector<Call>& calls, uint32_t thread, int64_t ts) {
    int64_t best = -1;
    for (size_t i = 0; i < calls.size(); ++i)
      if (calls[i].thread == thread && calls[i].start <= ts && ts <= calls[i].end &&
          (best < 0 || calls[i].start >= calls[static_cast<size_t>(best)].start))
        best = static_cast<int64_t>(i);
    return best;
  }

  // Times every collective call by its GPU kernels (kineto.h, "collectives") and files it.
  template <class UsedStep>
  void time_collectives(const UsedStep& used_step) {
    std::unordered_map<int64_t, size_t> by_ext;
    std::vector<Call> calls = collective_calls(by_ext);
    const SeqIndex by_seq = seq_index(calls);
    std::vector<uint32_t> unmatched;  // communication kernels left for stream order
    for (uint32_t ki = 0; ki < f_.kernels.size(); ++ki) {
      const Kernel& k = f_.kernels[ki];
      if (!is_comm_kernel(k)) continue;
      const Launch* l = f_.launches.find(k.corr);
      int64_t call = -1;
      for (int64_t ext : {k.ext, l ? l->ext : int64_t{-1}})
        if (auto it = by_ext.find(ext); call < 0 && ext >= 0 && it != by_ext.end())
          call = static_cast<int64_t>(it->second);
      if (call < 0 && l) call = call_at(calls, l->thread, l->ts);
      if (call < 0 && k.coll >= 0)
        call = call_by_seq(by_seq, calls, f_.colls[static_cast<size_t>(k.coll)]);
      if (call < 0 && k.coll >= 0) {  // the kernel carries the args: a call of its own
        Call c;
        c.coll = k.coll;
        c.start = c.end = l ? l->ts : k.start;
        call = static_cast<int64_t>(calls.size());
        calls.push_back(c);
      }
      if (call < 0) {
        unmatched.push_back(ki);
        continue;
      }
      Call& c = calls[static_cast<size_t>(call)];
      if (k.coll >= 0) merge_coll(f_.colls[static_cast<size_t>(c.coll)], f_.colls[static_cast<size_t>(k.coll)]);
      ++c.kernels;
      c.kernel_ns += k.dur;
    }
    // stream order: per kind (from the kernel's name), the n-th unmatched kernel to the n-th
    // unmatched call that began before it
    std::map<std::string, std::vector<size_t>> waiting;  // kind -> calls by start
    for (size_t i = 0; i < calls.size(); ++i)
      if (calls[i].kernels == 0 && !calls[i].cpu_backend)
        waiting[f_.colls[static_cast<size_t>(calls[i].coll)].kind].push_back(i);
    for (auto& [kind, w] : waiting)
      std::sort(w.begin(), w.end(), [&](size_t a, size_t b) { return calls[a].start < calls[b].start; });
    std::sort(unmatched.begin(), unmatched.end(),
              [&](uint32_t a, uint32_t b) { return f_.kernels[a].start < f_.kernels[b].start; });
    std::map<std::string, size_t> next;
    for (uint32_t ki : unmatched) {
      const Kernel& k = f_.kernels[ki];
      const std::string kind = kernel_kind(f_.names.str(k.name));
      auto w = waiting.find(kind);
      size_t& n = next[kind];
      if (w != waiting.end() && n < w->second.size() && calls[w->second[n]].start <= k.start) {
        Call& c = calls[w->second[n++]];
        ++c.kernels;
        c.kernel_ns += k.dur;
      } else if (used_step(k.start)) {
        ++tot_.unattributed["NCCL kernels matched to no collective call"];
      }
    }
    for (const Call& c : calls) {
      if (!used_step(c.start)) continue;
      const Coll& coll = f_.colls[static_cast<size_t>(c.coll)];
      if (c.kernels > 0) {
        add_coll(coll, c.kernel_ns, Timing::kKernel);
      } else if (c.cpu_backend) {
        add_coll(coll, c.end - c.start, Timing::kCpuThread);
      } else {
        add_coll(coll, c.end - c.start, Timing::kHost);
        ++tot_.unattributed["collectives with no GPU kernel (host launch time only; not in the table)"];
      }
    }
  }

  // identity of a model op instance across passes: op, PP, EP, LAYER
  static std::string identity(const OpLabel& l) {
    return fmt::format("{}/{}/{}/{}", l.op ? static_cast<int>(*l.op) : -1, l.tags.pp(), l.tags.ep(),
                       l.tags.layer());
  }

  // GEMM-like CPU ops with shapes inside a range on its thread, by start time.
  std::vector<CpuOp> ops_in(const Range& r) {
    if (gemm_index_.empty() && !gemm_indexed_) {
      gemm_indexed_ = true;
      for (uint32_t i = 0; i < f_.ops.size(); ++i)
        if (f_.ops[i].dims != kNone) gemm_index_.push_back(i);
      std::sort(gemm_index_.begin(), gemm_index_.end(), [&](uint32_t a, uint32_t b) {
        return std::tie(f_.ops[a].thread, f_.ops[a].start) <
               std::tie(f_.ops[b].thread, f_.ops[b].start);
      });
    }
    std::vector<CpuOp> out;
    auto it = std::lower_bound(gemm_index_.begin(), gemm_index_.end(), r,
                               [&](uint32_t i, const Range& x) {
                                 return std::tie(f_.ops[i].thread, f_.ops[i].start) <
                                        std::tie(x.thread, x.start);
                               });
    for (; it != gemm_index_.end(); ++it) {
      const CpuOp& o = f_.ops[*it];
      if (o.thread != r.thread || o.start > r.end) break;
      if (o.end <= r.end) out.push_back(o);
    }
    return out;
  }

  void add_label_time(const std::string& label, int64_t key, int64_t ns,
                      std::unordered_map<int64_t, int64_t>& acc) {
    // piper_dag_node labels on kernels: one instance per distinct label per file
    OpLabel l = parse_op_label(label);
    if (!l.logical) l.logical = true;
    acc[key] += ns;
    piper_labels_[key] = label;
  }

  void add_coll(const Coll& c, int64_t ns, Timing timing) {
    if (c.kind.empty()) {
      ++tot_.unattributed[fmt::format("collectives of unknown kind '{}'", c.name)];
      return;
    }
    const int64_t bytes = coll_bytes(c);
    if (bytes < 0) {
      ++tot_.unattributed[c.dtype.empty() || dtype_size(c.dtype) == 0
                              ? "collectives with a missing or unknown dtype"
                              : "collectives with no message size"];
      return;
    }
    int g = c.group;
    if (g <= 0) {
      ++tot_.unattributed["collectives with no group size (ranks list truncated)"];
      return;
    }
    tot_.colls[{c.kind, g, bytes, lower(c.dtype), timing}].push_back(ns);
  }

  const std::string& path_;
  size_t index_;
  const KinetoImportOptions& opt_;
  Totals& tot_;
  FileRecords f_;
  std::unordered_map<int64_t, std::string> piper_labels_;
  std::vector<uint32_t> gemm_index_;
  bool gemm_indexed_ = false;
};

}  // namespace

int dtype_size(std::string_view t) {
  std::string s = lower(t);
  if (s.rfind("c10::", 0) == 0) s = s.substr(5);
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "float" || s == "float32" || s == "int" || s == "int32" || s == "complexhalf") return 4;
  if (s == "double" || s == "float64" || s == "long" || s == "int64" || s == "complexfloat") return 8;
  if (s == "bfloat16" || s == "half" || s == "float16" || s == "short" || s == "int16") return 2;
  if (s == "byte" || s == "char" || s == "bool" || s == "uint8" || s == "int8" ||
      s.rfind("float8", 0) == 0)
    return 1;
  if (s == "complexdouble") return 16;
  return 0;
}

std::string collective_kind(std::string_view name) {
  std::string s = lower(name);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.find("allreduce") != std::string::npos) return "all_reduce";
  if (s.find("allgather") != std::string::npos) return "all_gather";
  if (s.find("reducescatter") != std::string::npos) return "reduce_scatter";
  if (s.find("alltoall") != std::string::npos) return "all_to_all";
  if (s == "send" || s == "recv" || s == "sendrecv" || s == "recvanysource" || s == "isend" ||
      s == "irecv")
    return "send_recv";
  if (s == "broadcast" || s == "reduce" || s == "gather" || s == "scatter" || s == "barrier")
    return s;
  return "";
}

double busbw_factor(std::string_view kind, int n) {
  if (n <= 1) return 1.0;
  const double f = static_cast<double>(n - 1) / n;
  if (kind == "all_reduce") return 2 * f;
  if (kind == "all_gather" || kind == "reduce_scatter" || kind == "all_to_all") return f;
  return 1.0;
}

Expected<KinetoImport> import_kineto(const std::vector<std::string>& paths,
                                     const KinetoImportOptions& opt) {
  KinetoImport out;
  Totals tot;
  Diagnostics ds;
  for (size_t i = 0; i < paths.size(); ++i) {
    FileImporter fi(paths[i], i, opt, tot);
    auto r = fi.run();
    if (!r) {
      for (auto& d : r.error()) ds.push_back(std::move(d));
      continue;
    }
    out.ranks.push_back(std::move(*r));
  }
  if (!ds.empty()) return fail(std::move(ds));
  // duplicate ranks
  std::map<int, std::string> seen;
  for (const auto& r : out.ranks) {
    auto [it, fresh] = seen.emplace(r.rank, r.file);
    if (!fresh) {
      Diagnostic d;
      d.message = fmt::format("rank {} appears twice: in '{}' and in this file", r.rank, it->second);
      d.hint = "pass one trace per rank";
      d.loc = {r.file, 0, 0, "/distributedInfo/rank"};
      ds.push_back(std::move(d));
    }
  }
  if (!ds.empty()) return fail(std::move(ds));
  std::sort(out.ranks.begin(), out.ranks.end(),
            [](const KinetoRank& a, const KinetoRank& b) { return a.rank < b.rank; });
  {
    std::vector<std::vector<StepSpan>> per_rank;
    for (const auto& r : out.ranks) per_rank.push_back(r.used_steps);
    out.step = median_step(join_ranks(per_rank));
  }

  // kernels by total time
  for (auto& [name, v] : tot.kernel_times) out.top_kernels.emplace_back(name, spread_of(v));
  std::sort(out.top_kernels.begin(), out.top_kernels.end(), [](const auto& a, const auto& b) {
    return a.second.total != b.second.total ? a.second.total > b.second.total : a.first < b.first;
  });
  if (out.top_kernels.size() > 15) out.top_kernels.resize(15);

  Json table;
  table["version"] = 1;
  std::string device = out.ranks.empty() ? "" : out.ranks.front().device;
  table["device"] = device;
  Json kernels = Json::array(), colls = Json::array();
  for (auto& [key, v] : tot.colls) {
    auto& [kind, g, bytes, dtype, timing] = key;
    KinetoCollective c;
    c.kind = kind;
    c.group_size = g;
    c.bytes = bytes;
    c.dtype = dtype;
    c.timing = timing_name(timing);
    c.host_timed = timing != Timing::kKernel;
    c.ns = spread_of(v);
    if (c.ns.median > 0) {
      c.algbw_GBps = static_cast<double>(bytes) / static_cast<double>(c.ns.median);
      c.busbw_GBps = c.algbw_GBps * busbw_factor(kind, g);
    }
    // Physics: no collective moves its bus bytes faster than a device's fastest link.
    if (timing != Timing::kHost && c.busbw_GBps > opt.link_GBps) {
      c.refused = true;
      out.warnings.push_back(fmt::format(
          "{} of {} bytes over {} ranks ({}-timed, {} instances): median {:.3f} ms is {:.0f} GB/s "
          "of bus bandwidth, faster than the {:.0f} GB/s link allows; not filed (a kernel matched "
          "to the wrong call, or a clock error?)",
          kind, bytes, g, c.timing, c.ns.count, static_cast<double>(c.ns.median) / 1e6,
          c.busbw_GBps, opt.link_GBps));
    }
    out.collectives.push_back(c);
  }
  // the table: one entry per (kind, group, bytes) of the collectives timed by their kernels (or
  // by a CPU backend's own thread) and not refused; when several dtypes share a size, the
  // kernel-timed one with most samples wins
  std::map<std::tuple<std::string, int, int64_t>, const KinetoCollective*> best;
  for (const auto& c : out.collectives) {
    if (c.kind != "all_reduce" && c.kind != "all_gather" && c.kind != "reduce_scatter" &&
        c.kind != "all_to_all" && c.kind != "send_recv")
      continue;
    if (c.ns.median <= 0 || c.refused || c.timing == "host") continue;
    auto& b = best[{c.kind, c.group_size, c.bytes}];
    if (!b || (b->host_timed && !c.host_timed) ||
        (b->host_timed == c.host_timed && c.ns.count > b->ns.count))
      b = &c;
  }
  for (const auto& [key, c] : best) {
    colls.push_back({{"kind", c->kind},
                     {"group_size", c->group_size},
                     {"nodes", std::min(opt.nodes, c->group_size)},
                     {"bytes", c->bytes},
                     {"ns", c->ns.median}});
  }
  for (auto& [key, v] : tot.table_kernels) {
    auto& [op, pass, dt, m, n, k, b] = key;
    Spread s = spread_of(v);
    if (s.median <= 0) continue;
    Json e = {{"op", op}, {"pass", pass}, {"dtype", dt}, {"m", m}, {"n", n}, {"k", k}, {"ns", s.median}};
    if (b > 1) e["batch"] = b;
    kernels.push_back(std::move(e));
  }
  out.table_kernels = kernels.size();
  out.table_collectives = colls.size();
  table["kernels"] = std::move(kernels);
  table["collectives"] = std::move(colls);
  out.table = std::move(table);
  for (auto& [key, v] : tot.op_times) {
    KinetoOpStat s;
    s.key = key;
    if (auto it = tot.op_table_name.find(key); it != tot.op_table_name.end()) s.op = it->second;
    s.ns = spread_of(v);
    out.ops.push_back(std::move(s));
  }
  out.unattributed = std::move(tot.unattributed);
  return out;
}

namespace {

double ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

std::string human_bytes(int64_t b) {
  const double x = static_cast<double>(b);
  if (b >= (1LL << 30)) return fmt::format("{:.2f} GiB", x / (1LL << 30));
  if (b >= (1LL << 20)) return fmt::format("{:.2f} MiB", x / (1LL << 20));
  if (b >= (1LL << 10)) return fmt::format("{:.1f} KiB", x / (1LL << 10));
  return fmt::format("{} B", b);
}

Json spread_json(const Spread& s) {
  return {{"count", s.count},
          {"median_ms", ms(s.median)},
          {"min_ms", ms(s.min)},
          {"max_ms", ms(s.max)},
          {"total_ms", ms(s.total)}};
}

}  // namespace

Json kineto_summary_json(const KinetoImport& k) {
  Json j;
  Json ranks = Json::array();
  for (const auto& r : k.ranks) {
    Json e = {{"file", r.file},
              {"rank", r.rank},
              {"rank_from_file_order", r.rank_from_file_order},
              {"world_size", r.world_size},
              {"backend", r.backend},
              {"device", r.device},
              {"events", r.events},
              {"bytes", r.bytes},
              {"gzip", r.gzip},
              {"steps_seen", r.steps_seen},
              {"steps_used", r.steps_used},
              {"step", spread_json(r.step)},
              {"kernels", r.kernels},
              {"kernel_ms", ms(r.kernel_ns)},
              {"memcpy", r.memcpy},
              {"memcpy_ms", ms(r.memcpy_ns)},
              {"memset", r.memset},
              {"memset_ms", ms(r.memset_ns)},
              {"cpu_ops", r.cpu_ops},
              {"labelled_ops", r.labelled_ops}};
    Json pm = Json::object();
    for (const auto& [dev, b] : r.peak_memory) pm[dev] = b;
    e["peak_memory_bytes"] = pm;
    ranks.push_back(std::move(e));
  }
  j["ranks"] = std::move(ranks);
  j["step"] = k.step ? Json{{"number", k.step->number}, {"ms", ms(k.step->duration())}} : Json();
  // a distribution with the fields that say what it is of
  auto with = [](const Spread& s, Json fields) {
    Json e = spread_json(s);
    e.update(fields);
    return e;
  };
  Json kern = Json::array();
  for (const auto& [name, s] : k.top_kernels) kern.push_back(with(s, {{"name", name}}));
  j["top_kernels"] = std::move(kern);
  Json colls = Json::array();
  for (const auto& c : k.collectives)
    colls.push_back(with(c.ns, {{"kind", c.kind},
                                {"group_size", c.group_size},
                                {"bytes", c.bytes},
                                {"dtype", c.dtype},
                                {"host_timed", c.host_timed},
                                {"timing", c.timing},
                                {"refused", c.refused},
                                {"algbw_GBps", c.algbw_GBps},
                                {"busbw_GBps", c.busbw_GBps}}));
  j["collectives"] = std::move(colls);
  Json ops = Json::array();
  for (const auto& o : k.ops) ops.push_back(with(o.ns, {{"key", o.key}, {"op", o.op}}));
  j["ops"] = std::move(ops);
  j["unattributed"] = k.unattributed;
  j["warnings"] = k.warnings;
  j["table_kernels"] = k.table_kernels;
  j["table_collectives"] = k.table_collectives;
  return j;
}

std::string kineto_summary_table(const KinetoImport& k) {
  std::string o;
  size_t kernels = 0, steps = 0, memcpy = 0, memset = 0;
  int64_t kns = 0, cns = 0, sns = 0;
  for (const auto& r : k.ranks) {
    kernels += r.kernels, kns += r.kernel_ns, steps += r.steps_used;
    memcpy += r.memcpy, cns += r.memcpy_ns, memset += r.memset, sns += r.memset_ns;
  }
  o += fmt::format("ranks          {}\n", k.ranks.size());
  o += fmt::format("steps used     {} (over all ranks; the first step of each rank is warm-up)\n",
                   steps);
  if (k.step)
    o += fmt::format("step           {:.3f} ms, ProfilerStep#{} (the median used step, over all "
                     "ranks, with the GPU work it launched)\n",
                     ms(k.step->duration()), k.step->number);
  o += fmt::format("kernels        {}, {:.3f} ms of kernel time\n", kernels, ms(kns));
  o += fmt::format("memcpy         {}, {:.3f} ms\n", memcpy, ms(cns));
  o += fmt::format("memset         {}, {:.3f} ms\n\n", memset, ms(sns));
  o += fmt::format("{:>5}  {:>6}  {:>11}  {:>9}  {:>8}  {:>11}  {:>8}  {}\n", "rank", "steps",
                   "step ms", "kernels", "cpu ops", "kernel ms", "labelled", "file");
  for (const auto& r : k.ranks) {
    o += fmt::format("{:>5}  {:>6}  {:>11.3f}  {:>9}  {:>8}  {:>11.3f}  {:>8}  {}{}\n", r.rank,
                     fmt::format("{}/{}", r.steps_used, r.steps_seen), ms(r.step.median), r.kernels,
                     r.cpu_ops, ms(r.kernel_ns), r.labelled_ops, r.file,
                     r.rank_from_file_order ? "  (no distributedInfo: rank = file order)" : "");
  }
  if (!k.top_kernels.empty()) {
    o += fmt::format("\n{:>9}  {:>11}  {:>11}  {}\n", "count", "total ms", "median us",
                     "kernel (top by total time)");
    for (const auto& [name, s] : k.top_kernels)
      o += fmt::format("{:>9}  {:>11.3f}  {:>11.2f}  {}\n", s.count, ms(s.total),
                       static_cast<double>(s.median) / 1e3, name.substr(0, 90));
  }
  if (!k.collectives.empty()) {
    // by kind
    std::map<std::string, std::tuple<size_t, int64_t, int64_t, double>> kinds;
    for (const auto& c : k.collectives) {
      if (c.refused || c.timing == "host") continue;  // listed below, not measured transfers
      auto& [n, bytes, ns, bus_bytes] = kinds[c.kind];
      n += c.ns.count;
      bytes += c.bytes * static_cast<int64_t>(c.ns.count);
      ns += c.ns.total;
      bus_bytes += static_cast<double>(c.bytes) * static_cast<double>(c.ns.count) *
                   busbw_factor(c.kind, c.group_size);
    }
    o += fmt::format("\n{:<15}  {:>7}  {:>12}  {:>10}  {:>14}\n", "collective", "count", "bytes",
                     "time ms", "bus bw GB/s");
    for (auto& [kind, t] : kinds) {
      auto& [n, bytes, ns, bus_bytes] = t;
      // achieved bus bandwidth over all instances: bus bytes / time (1 GB/s = 1 byte/ns)
      const double busbw = ns > 0 ? bus_bytes / static_cast<double>(ns) : 0;
      o += fmt::format("{:<15}  {:>7}  {:>12}  {:>10.3f}  {:>14.3f}\n", kind, n, human_bytes(bytes),
                       ms(ns), busbw);
    }
    o += fmt::format("\n{:<15}  {:>5}  {:>12}  {:>6}  {:>11}  {:>10}  {:>10}  {}\n", "kind", "group",
                     "bytes", "count", "median us", "algbw GB/s", "busbw GB/s", "");
    for (const auto& c : k.collectives)
      o += fmt::format("{:<15}  {:>5}  {:>12}  {:>6}  {:>11.2f}  {:>10.3f}  {:>10.3f}  {}{}\n",
                       c.kind, c.group_size, human_bytes(c.bytes), c.ns.count,
                       static_cast<double>(c.ns.median) / 1e3, c.algbw_GBps, c.busbw_GBps, c.dtype,
                       c.refused                  ? " (REFUSED: faster than the link; not filed)"
                       : c.timing == "host"       ? " (host launch time: no GPU kernel; not filed)"
                       : c.timing == "cpu_thread" ? " (CPU backend thread)"
                                                  : "");
  }
  if (!k.ops.empty()) {
    o += fmt::format("\n{:>6}  {:>11}  {:>11}  {:>11}  {}\n", "count", "median ms", "min ms",
                     "max ms", "labelled op (PASS, PP, EP; over microbatches)");
    for (const auto& op : k.ops)
      o += fmt::format("{:>6}  {:>11.3f}  {:>11.3f}  {:>11.3f}  {}\n", op.ns.count, ms(op.ns.median),
                       ms(op.ns.min), ms(op.ns.max), op.key);
  }
  o += fmt::format("\nprofiled table  {} kernel entries, {} collective entries\n", k.table_kernels,
                   k.table_collectives);
  for (const auto& w : k.warnings) o += "\nwarning: " + w + "\n";
  if (!k.unattributed.empty()) {
    o += "\nnot attributed:\n";
    for (const auto& [why, n] : k.unattributed) o += fmt::format("  {:>8}  {}\n", n, why);
  }
  return o;
}

}  // namespace stretto::traces
