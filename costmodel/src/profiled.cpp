// The profiled cost model: a measured table (profile_table.h) over the analytic model.

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "models.h"
#include "stretto/support/limits.h"
#include "stretto/costmodel/profile_table.h"
#include "util.h"

namespace stretto::cost {

using plan::ClusterSpec;
using plan::DType;
using plan::Json;
using plan::Pass;

std::string_view profile_op_name(compiler::OpKind k) {
  return detail::op_name(k);
}
std::string_view profile_pass_name(Pass p) {
  return detail::pass_key(p);
}
std::string_view profile_comm_name(compiler::CommKind k) {
  return detail::comm_name(k);
}
std::string_view profile_dtype_name(DType d) {
  return detail::dtype_name(d);
}

double ProfileSeries::at(double x) const {
  const auto& p = points;
  if (p.empty()) return 0;
  if (x <= p.front().first) return p.front().second;  // latency floor below the range
  if (x >= p.back().first) return p.back().second * (x / p.back().first);  // bandwidth regime
  auto hi = std::lower_bound(p.begin(), p.end(), x,
                             [](const auto& pt, double v) { return pt.first < v; });
  if (hi->first == x) return hi->second;
  auto lo = hi - 1;
  const double t =
      (std::log(x) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return std::exp(std::log(lo->second) + t * (std::log(hi->second) - std::log(lo->second)));
}

std::optional<double> ProfileTable::kernel_ns(const ComputeQuery& q) const {
  auto one = [&](Pass pass, bool use_bytes) -> std::optional<double> {
    const compiler::GemmShape& g = q.gemm;
    if (g.m > 0 && g.n > 0 && g.k > 0) {
      auto it =
          shape_kernels.find({q.kind, pass, q.dtype, g.n, g.k, std::max<int64_t>(g.batch, 1)});
      if (it != shape_kernels.end()) return it->second.at(static_cast<double>(g.m));
    }
    if (use_bytes && q.bytes > 0) {
      auto it = bytes_kernels.find({q.kind, pass, q.dtype});
      if (it != bytes_kernels.end()) return it->second.at(static_cast<double>(q.bytes));
    }
    return std::nullopt;
  };
  if (auto t = one(q.pass, true)) return t;
  // A full backward is its two halves when only those were measured. The query's bytes cover
  // both halves, so only shape-keyed series can be combined this way.
  if (q.pass == Pass::kB) {
    auto bi = one(Pass::kBI, false);
    auto bw = one(Pass::kBW, false);
    if (bi && bw) return *bi + *bw;
  }
  return std::nullopt;
}

std::optional<double> ProfileTable::comm_ns(const CommQuery& q) const {
  if (q.bytes <= 0) return std::nullopt;
  auto it = collectives.find({q.kind, q.group_size, q.nodes_spanned});
  if (it == collectives.end()) return std::nullopt;
  return it->second.at(static_cast<double>(q.bytes));
}

namespace {

// Reads one table entry's fields, reporting problems at their JSON pointers.
class EntryReader {
 public:
  EntryReader(const Json& obj, std::string pointer, const std::string& file, Diagnostics& ds,
              std::vector<std::string> allowed)
      : obj_(obj),
        pointer_(std::move(pointer)),
        file_(file),
        ds_(ds),
        allowed_(std::move(allowed)) {
    for (const auto& [key, v] : obj_.items()) {
      (void)v;
      if (std::find(allowed_.begin(), allowed_.end(), key) == allowed_.end())
        error(detail::child_pointer(pointer_, key), "unknown field '" + key + "'",
              detail::did_you_mean(key, allowed_));
    }
  }

  bool has(const std::string& key) const { return obj_.contains(key); }

  std::optional<std::string> str(const std::string& key, bool required) {
    if (!obj_.contains(key)) {
      if (required) missing(key);
      return std::nullopt;
    }
    const Json& v = obj_.at(key);
    if (!v.is_string()) {
      error(ptr(key), "field '" + key + "' must be a string");
      return std::nullopt;
    }
    return v.get<std::string>();
  }

  // A positive number (integers for sizes, any number for ns).
  std::optional<double> positive(const std::string& key, bool required, bool integer,
                                 double max = std::numeric_limits<double>::max()) {
    if (!obj_.contains(key)) {
      if (required) missing(key);
      return std::nullopt;
    }
    const Json& v = obj_.at(key);
    if (integer ? !v.is_number_integer() : !v.is_number()) {
      error(ptr(key), "field '" + key + "' must be " +
                          (integer ? "a positive integer" : "a positive number"));
      return std::nullopt;
    }
    double x = v.get<double>();
    if (!(x > 0) || !std::isfinite(x)) {
      error(ptr(key), "field '" + key + "' must be > 0 (got " + v.dump() + ")");
      return std::nullopt;
    }
    if (x > max) {
      error(ptr(key), fmt::format("field '{}' must be at most {:g} (got {}): no op of a step "
                                  "takes longer than 1,000 s",
                                  key, max, v.dump()));
      return std::nullopt;
    }
    return x;
  }

  template <class E>
  std::optional<E> name(const std::string& key, bool required,
                        std::optional<E> (*parse)(std::string_view),
                        std::vector<std::string> (*names)(), const char* what) {
    auto s = str(key, required);
    if (!s) return std::nullopt;
    auto e = parse(*s);
    if (!e)
      error(ptr(key), std::string("unknown ") + what + " '" + *s + "'",
            detail::did_you_mean(*s, names()));
    return e;
  }

  std::string ptr(const std::string& key) const { return detail::child_pointer(pointer_, key); }
  const std::string& pointer() const { return pointer_; }

  void error(const std::string& pointer, std::string message, std::string hint = {}) {
    ds_.push_back(detail::diag_at(file_, pointer, std::move(message), std::move(hint)));
  }

 private:
  void missing(const std::string& key) { error(pointer_, "missing field '" + key + "'"); }

  const Json& obj_;
  std::string pointer_;
  const std::string& file_;
  Diagnostics& ds_;
  std::vector<std::string> allowed_;
};

// Collects points per key, then sorts them and rejects duplicates.
template <class Key>
struct SeriesBuilder {
  std::map<Key, std::vector<std::tuple<double, double, std::string>>> raw;  // size, ns, pointer

  void add(const Key& k, double size, double ns, std::string pointer) {
    raw[k].emplace_back(size, ns, std::move(pointer));
  }

  void build(std::map<Key, ProfileSeries>& out, const std::string& file, Diagnostics& ds) {
    for (auto& [key, pts] : raw) {
      std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) {
        return std::get<0>(a) < std::get<0>(b);
      });
      ProfileSeries s;
      for (size_t i = 0; i < pts.size(); ++i) {
        if (i > 0 && std::get<0>(pts[i]) == std::get<0>(pts[i - 1])) {
          ds.push_back(detail::diag_at(
              file, std::get<2>(pts[i]),
              "duplicate measurement: same key and size as " + std::get<2>(pts[i - 1])));
          continue;
        }
        s.points.emplace_back(std::get<0>(pts[i]), std::get<1>(pts[i]));
      }
      out.emplace(key, std::move(s));
    }
  }
};

void parse_kernels(const Json& arr, const std::string& file, Diagnostics& ds,
                   SeriesBuilder<ProfileTable::ShapeKey>& shapes,
                   SeriesBuilder<ProfileTable::BytesKey>& bytes) {
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string ptr = "/kernels/" + std::to_string(i);
    const Json& e = arr[i];
    if (!e.is_object()) {
      ds.push_back(detail::diag_at(file, ptr, "a kernel entry must be an object"));
      continue;
    }
    const size_t before = ds.size();
    EntryReader r(e, ptr, file, ds, {"op", "pass", "dtype", "m", "n", "k", "batch", "bytes", "ns"});
    auto op = r.name<compiler::OpKind>("op", true, detail::parse_op, detail::op_names, "op");
    auto pass = r.name<Pass>("pass", true, detail::parse_pass_key, detail::pass_keys, "pass");
    std::optional<DType> dtype = DType::kBF16;
    if (r.has("dtype"))
      dtype = r.name<DType>("dtype", true, detail::parse_dtype, detail::dtype_names, "dtype");
    auto ns = r.positive("ns", true, false, detail::kMaxOpNs);
    const bool has_shape = r.has("m") || r.has("n") || r.has("k") || r.has("batch");
    const bool has_bytes = r.has("bytes");
    if (has_shape && has_bytes) {
      r.error(ptr, "a kernel entry has either a shape (m, n, k) or 'bytes', not both");
      continue;
    }
    if (has_shape) {
      auto m = r.positive("m", true, true);
      auto n = r.positive("n", true, true);
      auto k = r.positive("k", true, true);
      std::optional<double> batch = 1.0;
      if (r.has("batch")) batch = r.positive("batch", true, true);
      if (ds.size() != before || !op || !pass || !dtype || !ns || !m || !n || !k || !batch)
        continue;
      shapes.add({*op, *pass, *dtype, static_cast<int64_t>(*n), static_cast<int64_t>(*k),
                  static_cast<int64_t>(*batch)},
                 *m, *ns, ptr);
    } else if (has_bytes) {
      auto b = r.positive("bytes", true, true);
      if (ds.size() != before || !op || !pass || !dtype || !ns || !b) continue;
      bytes.add({*op, *pass, *dtype}, *b, *ns, ptr);
    } else {
      r.error(ptr, "missing field 'bytes' (or a shape: 'm', 'n', 'k')");
    }
  }
}

void parse_collectives(const Json& arr, const std::string& file, Diagnostics& ds,
                       SeriesBuilder<ProfileTable::CommKey>& out) {
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string ptr = "/collectives/" + std::to_string(i);
    const Json& e = arr[i];
    if (!e.is_object()) {
      ds.push_back(detail::diag_at(file, ptr, "a collective entry must be an object"));
      continue;
    }
    const size_t before = ds.size();
    EntryReader r(e, ptr, file, ds, {"kind", "group_size", "nodes", "bytes", "ns"});
    auto kind = r.name<compiler::CommKind>("kind", true, detail::parse_comm, detail::comm_names,
                                           "collective kind");
    auto g = r.positive("group_size", true, true);
    std::optional<double> nodes = 1.0;
    if (r.has("nodes")) nodes = r.positive("nodes", true, true);
    auto b = r.positive("bytes", true, true);
    auto ns = r.positive("ns", true, false, detail::kMaxOpNs);
    if (g && nodes && *nodes > *g)
      r.error(r.ptr("nodes"), "'nodes' (" + std::to_string(static_cast<int64_t>(*nodes)) +
                                  ") exceeds 'group_size' (" +
                                  std::to_string(static_cast<int64_t>(*g)) + ")");
    if (ds.size() != before || !kind || !g || !nodes || !b || !ns) continue;
    out.add({*kind, static_cast<int>(*g), static_cast<int>(*nodes)}, *b, *ns, ptr);
  }
}

}  // namespace

Expected<ProfileTable> parse_profile_table(const std::string& text, const std::string& file) {
  Json root;
  // Lines are echoed only from files that look like JSON (a path naming /etc/passwd must not
  // print it), and nesting is bounded before parsing (limits.h).
  const bool echo = looks_like_json(text);
  if (auto deep = find_excess_nesting(text)) {
    uint32_t line = 0, col = 0;
    std::string line_text;
    detail::line_col(text, *deep, line, col, line_text);
    uint32_t caret = col;
    std::string shown = echo ? window_line(line_text, caret) : std::string();
    Diagnostic d = detail::diag_at_line(
        file, line, col, fmt::format("cost table nested more than {} levels deep", kMaxJsonDepth),
        std::move(shown));
    d.caret_col = caret;
    return fail(std::move(d));
  }
  try {
    root = Json::parse(text);
  } catch (const Json::out_of_range& e) {
    // "number overflow parsing '1e999'" has no byte offset: locate the token (found by
    // profile_fuzz: this exception used to escape and abort the process).
    const std::string what = e.what();
    const size_t q = what.find('\''), q2 = what.rfind('\'');
    const std::string tok = q != std::string::npos && q2 > q ? what.substr(q + 1, q2 - q - 1) : "";
    const size_t off = tok.empty() ? std::string::npos : text.find(tok);
    uint32_t line = 0, col = 0;
    std::string line_text;
    if (off != std::string::npos) detail::line_col(text, off, line, col, line_text);
    uint32_t caret = col;
    std::string shown = echo && line ? window_line(line_text, caret) : std::string();
    Diagnostic d = detail::diag_at_line(
        file, line, col,
        "invalid JSON in cost table: number overflow parsing '" +
            (tok.size() > 40 ? tok.substr(0, 40) + "..." : tok) + "'",
        std::move(shown));
    d.caret_col = caret;
    d.hint = "numbers must fit in a 64-bit integer or a double";
    return fail(std::move(d));
  } catch (const Json::parse_error& e) {
    uint32_t line = 0, col = 0;
    std::string line_text;
    detail::line_col(text, e.byte > 0 ? e.byte - 1 : 0, line, col, line_text);
    std::string what = e.what();
    // nlohmann: "[json.exception.parse_error.101] parse error at line L, column C: <why>"
    size_t at = what.find("column");
    size_t colon = at == std::string::npos ? std::string::npos : what.find(": ", at);
    std::string why = colon == std::string::npos ? what : what.substr(colon + 2);
    // nlohmann points at the last character of the offending token; point at its start: the
    // opening quote of a string, or the start of the text it quotes ("last read: '...'").
    const std::string tag = "last read: '";
    size_t lr = why.rfind(tag);
    if (col >= 2 && col <= line_text.size() && line_text[col - 1] == '"') {
      size_t open = line_text.rfind('"', col - 2);
      while (open != std::string::npos && open > 0 && line_text[open - 1] == '\\')
        open = open >= 2 ? line_text.rfind('"', open - 2) : std::string::npos;
      if (open != std::string::npos) col = static_cast<uint32_t>(open + 1);
    } else if (lr != std::string::npos && why.size() >= lr + tag.size() + 1 && why.back() == '\'') {
      std::string tok = why.substr(lr + tag.size(), why.size() - lr - tag.size() - 1);
      if (!tok.empty() && tok.size() <= col &&
          line_text.compare(col - tok.size(), tok.size(), tok) == 0)
        col = static_cast<uint32_t>(col - tok.size() + 1);
    }
    Diagnostic d = detail::diag_at_line(file, line, col, "invalid JSON in cost table: " + why,
                                        std::string());
    if (echo) {
      uint32_t caret = col;
      d.source_line = window_line(line_text, caret);
      d.caret_col = caret;
    } else {
      d.message = "the cost table is not JSON";
      d.hint = "a cost table is a JSON object {\"version\": 1, \"kernels\": [...]}; check the "
               "\"profile\" path";
    }
    return fail(std::move(d));
  }

  Diagnostics ds;
  ProfileTable t;
  t.file = file;
  if (!root.is_object())
    return fail(detail::diag_at(file, "", "a cost table must be a JSON object"));

  static const std::vector<std::string> kTop = {"version", "device", "kernels", "collectives",
                                                "options"};
  for (const auto& [key, v] : root.items()) {
    (void)v;
    if (std::find(kTop.begin(), kTop.end(), key) == kTop.end())
      ds.push_back(detail::diag_at(file, detail::child_pointer("", key),
                                   "unknown field '" + key + "'", detail::did_you_mean(key, kTop)));
  }
  if (!root.contains("version")) {
    ds.push_back(detail::diag_at(file, "", "missing field 'version'"));
  } else if (!root["version"].is_number_integer() || root["version"].get<int64_t>() != 1) {
    ds.push_back(detail::diag_at(
        file, "/version",
        "unsupported cost table version " + root["version"].dump() + " (expected 1)"));
  }
  if (root.contains("device")) {
    if (root["device"].is_string())
      t.device = root["device"].get<std::string>();
    else
      ds.push_back(detail::diag_at(file, "/device", "field 'device' must be a string"));
  }

  if (root.contains("options")) {
    if (root["options"].is_object())
      t.options = root["options"];
    else
      ds.push_back(detail::diag_at(file, "/options", "field 'options' must be an object"));
  }
  SeriesBuilder<ProfileTable::ShapeKey> shapes;
  SeriesBuilder<ProfileTable::BytesKey> bytes;
  SeriesBuilder<ProfileTable::CommKey> colls;
  if (root.contains("kernels")) {
    if (root["kernels"].is_array())
      parse_kernels(root["kernels"], file, ds, shapes, bytes);
    else
      ds.push_back(detail::diag_at(file, "/kernels", "field 'kernels' must be an array"));
  }
  if (root.contains("collectives")) {
    if (root["collectives"].is_array())
      parse_collectives(root["collectives"], file, ds, colls);
    else
      ds.push_back(detail::diag_at(file, "/collectives", "field 'collectives' must be an array"));
  }
  shapes.build(t.shape_kernels, file, ds);
  bytes.build(t.bytes_kernels, file, ds);
  colls.build(t.collectives, file, ds);
  if (!ds.empty()) {
    // The text parsed above, so positions can be indexed for line:column.
    auto src = plan::JsonSource::parse(text, file);
    if (src) detail::locate(ds, &*src);
    return fail(std::move(ds));
  }
  return t;
}

Expected<ProfileTable> load_profile_table(const std::string& path) {
  auto text = read_input_file(path, "cost table");  // regular files up to the input limit
  if (!text) return fail(std::move(text.error()));
  return parse_profile_table(*text, path);
}

namespace {

class ProfiledModel final : public CostModel {
 public:
  ProfiledModel(AnalyticParams p, ClusterSpec cluster, ProfileTable table)
      : params_(std::move(p)), cluster_(std::move(cluster)), table_(std::move(table)) {}

  ComputeCost compute(const ComputeQuery& q) const override {
    ComputeCost a = analytic_compute(params_, cluster_.device, q);
    if (auto t = table_.kernel_ns(q)) return {detail::ceil_ns(*t), a.mem_bound};
    return a;
  }

  CommCost comm(const CommQuery& q) const override {
    CommCost a = analytic_comm(params_, cluster_, q);
    auto t = table_.comm_ns(q);
    if (!t) return a;
    // Keep the analytic structure (algorithm, bottleneck link, wire bytes) and fit latency
    // and rate to the measured total.
    const int64_t total = std::max<int64_t>(1, detail::ceil_ns(*t));
    CommCost c = a;
    if (a.wire_bytes <= 0) {
      c.latency_ns = total;
      c.rate_cap = 0;
      c.time_ns = total;
      return c;
    }
    c.latency_ns = std::min(a.latency_ns, total / 2);
    const int64_t xfer = total - c.latency_ns;
    double rate = static_cast<double>(a.wire_bytes) / static_cast<double>(xfer);
    while (transfer_ns(a.wire_bytes, rate) > xfer) rate = std::nextafter(rate, HUGE_VAL);
    c.rate_cap = rate;
    c.time_ns = c.latency_ns + transfer_ns(c.wire_bytes, c.rate_cap);
    return c;
  }

  Interference interference() const override {
    return {params_.comm_sm_share, params_.comm_hbm_share, params_.host_cores,
            params_.host_compute > 0, detail::ceil_ns(params_.host_op_us * 1000.0),
            params_.host_cold_factor, params_.host_share_efficiency, params_.host_reuse_factor};
  }
  int64_t dispatch_ns() const override { return detail::ceil_ns(params_.dispatch_us * 1000.0); }
  std::string_view name() const override { return "profiled"; }

 private:
  AnalyticParams params_;
  ClusterSpec cluster_;
  ProfileTable table_;
};

}  // namespace

namespace detail {

std::unique_ptr<CostModel> make_profiled_model(AnalyticParams p, const ClusterSpec& cluster,
                                               ProfileTable table) {
  return std::make_unique<ProfiledModel>(std::move(p), cluster, std::move(table));
}

}  // namespace detail

}  // namespace stretto::cost
