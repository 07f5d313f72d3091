// Sweep spec parsing, grid enumeration, and point -> plan generation (spec.h).
#include "stretto/explore/spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include "stretto/pipelines/builders.h"
#include "stretto/plan/layout.h"
#include "stretto/plan/plan.h"
#include "stretto/plan/resolved.h"

namespace stretto::explore {

using pipelines::canonical_family;
using plan::Json;
using plan::JsonSource;
using plan::pointer_escape;

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxAxisValues = 100000;
// Grid bounds, so that no spec exhausts the machine or runs for hours before its first point:
// at most kMaxGrid combinations are evaluated against the constraints (~7 us each), and at most
// kMaxPoints points are kept in memory (~0.5 KB each) or asked of a sample.
constexpr size_t kMaxGrid = 10'000'000;
constexpr size_t kMaxPoints = 1'000'000;

const std::vector<std::string>& known_axes() {
  static const std::vector<std::string> k = {
      "family",    "ranks",          "pp",        "tp",      "dp",
      "ep",        "stages_per_rank", "microbatches", "microbatch_size", "zero",
      "bucket_size_MB", "recompute", "streams",   "prefetch", "sequence_parallel",
      "tp_comm_overlap", "cp", "cp_comm_type", "layout"};
  return k;
}
// Axes that regenerate the schedule (microbatch_size and pointers do not).
bool schedule_axis(const std::string& n) {
  return n != "microbatch_size" && !n.empty() && n[0] != '/';
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class SpecReader {
 public:
  SpecReader(const JsonSource& src, Diagnostics& d) : src_(src), diags_(d) {}
  void error(const std::string& ptr, std::string msg, std::string hint = {}, bool key = false) {
    diags_.push_back(src_.error_at(ptr, std::move(msg), std::move(hint), key));
  }

  // A range object {from, to, step} or {from, to, times} -> values.
  std::vector<Json> range(const Json& r, const std::string& ptr) {
    std::vector<Json> out;
    for (const auto& [k, v] : r.items())
      if (k != "from" && k != "to" && k != "step" && k != "times") {
        error(ptr + "/" + pointer_escape(k), fmt::format("unknown key '{}' in a range", k),
              "a range is {\"from\": A, \"to\": B, \"step\": S} or {\"from\": A, \"to\": B, "
              "\"times\": K}",
              true);
        return out;
      }
    if (!r.contains("from") || !r.contains("to") || !r["from"].is_number() ||
        !r["to"].is_number()) {
      error(ptr, "a range needs numeric 'from' and 'to'");
      return out;
    }
    const bool integral = r["from"].is_number_integer() && r["to"].is_number_integer() &&
                          (!r.contains("step") || r["step"].is_number_integer());
    const double from = r["from"].get<double>(), to = r["to"].get<double>();
    if (r.contains("times")) {
      if (!r["times"].is_number() || r["times"].get<double>() <= 1 || from <= 0) {
        error(ptr + "/times", "'times' must be a number > 1 and 'from' positive");
        return out;
      }
      const double k = r["times"].get<double>();
      for (double x = from; x <= to * (1 + 1e-12) && out.size() <= kMaxAxisValues; x *= k)
        out.push_back(integral ? Json(static_cast<int64_t>(std::llround(x))) : Json(x));
    } else {
      const double step = r.contains("step") && r["step"].is_number() ? r["step"].get<double>() : 1;
      if (!(step > 0)) {
        error(ptr + "/step", "'step' must be positive");
        return out;
      }
      for (double x = from; x <= to + 1e-9 * std::abs(step) && out.size() <= kMaxAxisValues;
           x += step)
        out.push_back(integral ? Json(static_cast<int64_t>(std::llround(x))) : Json(x));
    }
    if (out.size() > kMaxAxisValues) {
      error(ptr, fmt::format("range has more than {} values", kMaxAxisValues));
      out.clear();
    } else if (out.empty()) {
      error(ptr, "range is empty ('from' > 'to')");
    }
    return out;
  }

  // {"factorize": N, "dims": ["tp","pp","dp"], "ep": "dp"|1} -> layout objects.
  std::vector<Json> factorize(const Json& f, const std::string& ptr) {
    std::vector<Json> out;
    if (!f["factorize"].is_number_integer() || f["factorize"].get<int64_t>() < 1 ||
        f["factorize"].get<int64_t>() > (1 << 20)) {
      error(ptr + "/factorize", "'factorize' must be a device count between 1 and 1048576");
      return out;
    }
    const int64_t n = f["factorize"].get<int64_t>();
    std::vector<std::string> dims = {"tp", "pp", "dp"};
    if (f.contains("dims")) {
      dims.clear();
      if (!f["dims"].is_array() || f["dims"].empty()) {
        error(ptr + "/dims", "'dims' must be a non-empty list of tp, pp, dp");
        return out;
      }
      for (size_t i = 0; i < f["dims"].size(); ++i) {
        const Json& d = f["dims"][i];
        if (!d.is_string() || (d != "tp" && d != "pp" && d != "dp")) {
          error(fmt::format("{}/dims/{}", ptr, i), "a factorisation dimension is tp, pp or dp");
          return out;
        }
        if (std::find(dims.begin(), dims.end(), d.get<std::string>()) != dims.end()) {
          error(fmt::format("{}/dims/{}", ptr, i), fmt::format("'{}' is listed twice", d.get<std::string>()),
                "each of tp, pp and dp at most once");
          return out;
        }
        dims.push_back(d.get<std::string>());
      }
    }
    for (const auto& [k, v] : f.items())
      if (k != "factorize" && k != "dims" && k != "ep")
        error(ptr + "/" + pointer_escape(k), fmt::format("unknown key '{}' in a factorisation", k),
              "keys: factorize, dims, ep", true);
    // Every ordered tuple of divisors with product n.
    std::vector<int64_t> cur(dims.size(), 1);
    auto rec = [&](auto&& self, size_t i, int64_t rest) -> void {
      if (i + 1 == dims.size()) {
        cur[i] = rest;
        Json o = Json::object();
        for (size_t k = 0; k < dims.size(); ++k) o[dims[k]] = cur[k];
        if (f.contains("ep")) o["ep"] = f["ep"];
        out.push_back(o);
        return;
      }
      for (int64_t d = 1; d <= rest && out.size() <= kMaxAxisValues; ++d)
        if (rest % d == 0) {
          cur[i] = d;
          self(self, i + 1, rest / d);
        }
    };
    rec(rec, 0, n);
    if (out.size() > kMaxAxisValues) {
      error(ptr, fmt::format("the factorisation has more than {} layouts", kMaxAxisValues));
      out.clear();
    }
    return out;
  }

  void axis(const std::string& name, const Json& v, const std::string& ptr, SweepSpec& spec) {
    if (name.empty() || (name[0] != '/' &&
                         std::find(known_axes().begin(), known_axes().end(), name) ==
                             known_axes().end())) {
      std::string near = nearest(name, known_axes());
      error(ptr, fmt::format("unknown axis '{}'", name),
            near.empty() ? "axes: " + fmt::format("{}", fmt::join(known_axes(), ", ")) +
                               ", or a JSON pointer into the plan such as "
                               "/cluster/inter_node/bandwidth_GBps"
                         : fmt::format("did you mean '{}'?", near),
            true);
      return;
    }
    if (name[0] == '/') {
      try {
        (void)Json::json_pointer(name);
      } catch (const std::exception& e) {
        error(ptr, fmt::format("axis '{}' is not a valid JSON pointer: {}", name, e.what()), "",
              true);
        return;
      }
    }
    Axis a;
    a.name = name == "ranks" ? "pp" : name;
    if (v.is_array()) {
      if (v.empty()) error(ptr, fmt::format("axis '{}' has no values", name));
      if (v.size() > kMaxAxisValues)
        error(ptr, fmt::format("axis '{}' has more than {} values", name, kMaxAxisValues));
      a.values.assign(v.begin(), v.end());
    } else if (v.is_object() && v.contains("factorize")) {
      if (name != "layout") {
        error(ptr, "'factorize' belongs to the 'layout' axis");
        return;
      }
      a.values = factorize(v, ptr);
    } else if (v.is_object()) {
      a.values = range(v, ptr);
    } else {
      error(ptr, fmt::format("axis '{}' must be a list of values or a range", name),
            "e.g. [1, 2, 4] or {\"from\": 8, \"to\": 64, \"step\": 8}");
      return;
    }
    if (a.name == "layout")
      for (size_t i = 0; i < a.values.size(); ++i) {
        const Json& o = a.values[i];
        bool ok = o.is_object() && !o.empty();
        if (ok)
          for (const auto& [k, x] : o.items())
            ok = ok && (k == "tp" || k == "pp" || k == "dp" || k == "ep") &&
                 (x.is_number_integer() || (k == "ep" && x == "dp"));
        if (!ok) {
          error(fmt::format("{}/{}", ptr, i),
                "a layout value is an object of integers {tp, pp, dp[, ep]} (ep may be \"dp\")");
          break;
        }
      }
    // Each value as the plan parser checks it (its words), at the value.
    if (a.name[0] != '/' && v.is_array())
      for (size_t i = 0; i < a.values.size(); ++i) {
        std::vector<std::pair<std::string, Json>> keys;
        if (a.name == "layout" && a.values[i].is_object())
          for (const auto& [k, x] : a.values[i].items()) keys.emplace_back(k, x);
        else if (a.name != "layout")
          keys.emplace_back(a.name, a.values[i]);
        for (const auto& [k, x] : keys)
          if (auto d = check_axis_value(k, x)) {
            error(fmt::format("{}/{}", ptr, i),
                  fmt::format("axis '{}' value {}: {}", k, x.dump(), d->message), d->hint);
            break;
          }
      }
    for (const auto& s : spec.axes)
      if (s.name == a.name) error(ptr, fmt::format("axis '{}' given twice", a.name), "", true);
    spec.axes.push_back(std::move(a));
  }

 private:
  const JsonSource& src_;
  Diagnostics& diags_;
};

Diagnostic plain(std::string msg, std::string hint = {}) {
  Diagnostic d;
  d.message = std::move(msg);
  d.hint = std::move(hint);
  return d;
}

Expected<SweepSpec> finish(SweepSpec spec, const JsonSource& src, const Json& base_inline) {
  Diagnostics diags;
  SpecReader rd(src, diags);
  const Json& root = src.root();
  if (!root.is_object()) return fail(src.error_at("", "a sweep spec is a JSON object"));
  for (const auto& [k, v] : root.items())
    if (k != "base" && k != "axes" && k != "constraints" && k != "sample" &&
        k != "memory_cap_GiB" && k != "granularity" && k != "name" && k != "description") {
      std::string near = nearest(
          k, {"base", "axes", "constraints", "sample", "memory_cap_GiB", "granularity", "name"});
      rd.error("/" + pointer_escape(k), fmt::format("unknown key '{}' in a sweep spec", k),
               near.empty() ? "keys: base, axes, constraints, sample, memory_cap_GiB, "
                              "granularity, name"
                            : fmt::format("did you mean '{}'?", near),
               true);
    }
  spec.base = base_inline;
  if (root.contains("axes")) {
    if (!root["axes"].is_object()) {
      rd.error("/axes", "'axes' must be an object: axis name -> values");
    } else {
      for (const auto& [k, v] : root["axes"].items())
        rd.axis(k, v, "/axes/" + pointer_escape(k), spec);
    }
  }
  if (root.contains("constraints")) {
    const Json& c = root["constraints"];
    if (!c.is_array()) {
      rd.error("/constraints", "'constraints' must be a list of expressions");
    } else {
      for (size_t i = 0; i < c.size(); ++i) {
        if (!c[i].is_string()) {
          rd.error(fmt::format("/constraints/{}", i), "a constraint is a string");
          continue;
        }
        auto e = Expr::parse(c[i].get<std::string>());
        if (!e) {
          Diagnostic d = src.error_at(fmt::format("/constraints/{}", i), e.error()[0].message,
                                      e.error()[0].hint);
          diags.push_back(d);
        } else {
          spec.constraints.push_back(std::move(*e));
        }
      }
    }
  }
  if (root.contains("sample")) {
    const Json& s = root["sample"];
    if (!s.is_object() || !s.contains("n") || !s["n"].is_number_integer() || s["n"] <= 0) {
      rd.error("/sample", "'sample' is {\"n\": POINTS, \"seed\": S} with n >= 1");
    } else {
      spec.sample_n = s["n"].get<size_t>();
      if (*spec.sample_n > kMaxPoints)
        rd.error("/sample/n", fmt::format("a sample has at most {} points", kMaxPoints),
                 "shard a larger sweep into several specs (or several seeds)");
      if (s.contains("seed")) {
        if (!s["seed"].is_number_integer() || s["seed"] < 0)
          rd.error("/sample/seed", "'seed' must be a non-negative integer");
        else
          spec.seed = s["seed"].get<uint64_t>();
      }
    }
  }
  if (root.contains("memory_cap_GiB")) {
    // At most 1e9 GiB (as search --memory-cap): the cap is compared in bytes, in 64 bits.
    if (!root["memory_cap_GiB"].is_number() || !(root["memory_cap_GiB"].get<double>() > 0) ||
        root["memory_cap_GiB"].get<double>() > 1e9)
      rd.error("/memory_cap_GiB", "'memory_cap_GiB' must be a number in (0, 1e9]");
    else
      spec.memory_cap_GiB = root["memory_cap_GiB"].get<double>();
  }
  if (root.contains("granularity")) {
    const Json& g = root["granularity"];
    const auto parsed =
        g.is_string() ? sim::parse_granularity(g.get<std::string>()) : std::nullopt;
    if (!parsed)
      rd.error("/granularity", "'granularity' must be \"op\" or \"pass\"",
               "\"pass\" merges each region pass's ops into one engine task (faster, "
               "approximate under interference; docs/semantics.md)");
    else
      spec.granularity = *parsed;
  }
  if (!diags.empty()) return fail(std::move(diags));
  if (root.contains("name") && root["name"].is_string()) spec.name = root["name"].get<std::string>();
  Json canon = root;
  canon["base"] = base_inline;
  canon.erase("name");
  canon.erase("description");
  spec.canonical = std::move(canon);
  spec.hash = stable_hash(spec.canonical);
  return spec;
}

}  // namespace

std::string stable_hash(const Json& j) {
  const std::string s = j.dump();
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  // FNV's low bits barely change between similar points: finish with MurmurHash3's fmix64
  // avalanche so that every bit (and so `hash mod N`, the shard) depends on every byte.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return fmt::format("{:016x}", h);
}

Expected<SweepSpec> parse_spec(const JsonSource& src, const std::string& dir) {
  const Json& root = src.root();
  if (!root.is_object() || !root.contains("base"))
    return fail(src.error_at("", "a sweep spec needs 'base': the plan file the points start from",
                             "e.g. {\"base\": \"plan.json\", \"axes\": {\"microbatches\": [8, "
                             "16]}}"));
  SweepSpec spec;
  spec.file = src.file();
  Json base;
  if (root["base"].is_string()) {
    spec.base_path = root["base"].get<std::string>();
    fs::path p = fs::path(spec.base_path);
    if (p.is_relative()) p = fs::path(dir) / p;
    auto b = JsonSource::load(p.string());
    if (!b) {
      Diagnostics d = b.error();
      d.insert(d.begin(), src.error_at("/base", fmt::format("cannot read the base plan '{}'",
                                                            spec.base_path)));
      return fail(std::move(d));
    }
    base = b->root();
    spec.base_dir = p.parent_path().string();
  } else if (root["base"].is_object()) {
    base = root["base"];
    spec.base_dir = dir;
  } else {
    return fail(src.error_at("/base", "'base' is a plan file path or an inline plan object"));
  }
  if (spec.base_dir.empty()) spec.base_dir = ".";
  return finish(std::move(spec), src, base);
}

Expected<SweepSpec> load_spec(const std::string& path) {
  auto src = JsonSource::load(path);
  if (!src) return fail(std::move(src).error());
  std::string dir = fs::path(path).parent_path().string();
  return parse_spec(*src, dir.empty() ? "." : dir);
}

Expected<Bindings> bindings_of(const Json& base_plan, const Json& params) {
  auto d = base_defaults(base_plan);
  if (!d) return fail(std::move(d).error());
  return bindings_from(*d, params);
}

Expected<Bindings> bindings_from(const Resolved& defaults, const Json& params) {
  Bindings b;
  for (const auto& [k, v] : params.items()) {
    if (v.is_number()) b[k] = v.get<double>();
    else if (v.is_boolean()) b[k] = v.get<bool>() ? 1.0 : 0.0;
    else if (v.is_string()) b[k] = v.get<std::string>();
  }
  auto rr = resolve_from(defaults, params);
  if (!rr) return fail(std::move(rr).error());
  const Resolved& r = *rr;
  b.try_emplace("tp", static_cast<double>(r.tp));
  b.try_emplace("pp", static_cast<double>(r.pp));
  b.try_emplace("dp", static_cast<double>(r.dp));
  b.try_emplace("ep", static_cast<double>(r.ep));
  b.try_emplace("cp", static_cast<double>(r.cp));
  b.try_emplace("microbatches", static_cast<double>(r.microbatches));
  b.try_emplace("microbatch_size", static_cast<double>(r.microbatch_size));
  b.try_emplace("zero", static_cast<double>(r.zero));
  b.try_emplace("family", r.family);
  b["devices"] = static_cast<double>(r.devices());
  b["global_batch"] = static_cast<double>(r.global_batch());
  b["stages"] = static_cast<double>(
      r.pp * (r.stages_per_rank > 0 ? r.stages_per_rank : 1));
  return b;
}

Expected<Grid> enumerate(const SweepSpec& spec,
                         const std::function<void(size_t, size_t)>& progress) {
  Grid g;
  // The cartesian size, exact up to SIZE_MAX (beyond it only sampling draws from the grid,
  // axis by axis).
  g.grid_size = 1;
  bool overflow = false;
  for (const auto& a : spec.axes)
    if (!overflow && __builtin_mul_overflow(g.grid_size, a.values.size(), &g.grid_size)) {
      overflow = true;
      g.grid_size = SIZE_MAX;
    }
  const bool sampled = spec.sample_n.has_value();
  // Grid-wide errors point at the spec's axes.
  auto at_axes = [&](Diagnostic d) {
    d.loc.file = spec.file;
    d.loc.json_pointer = "/axes";
    return fail(std::move(d));
  };
  if (g.grid_size > kMaxGrid && !sampled)
    return at_axes(plain(fmt::format("the grid has {} points, more than the {} a sweep evaluates",
                                  overflow ? std::string("over 2^64")
                                           : fmt::format("{}", g.grid_size),
                                  kMaxGrid),
                      "add \"sample\": {\"n\": N, \"seed\": S} to draw a random sample, or fewer "
                      "axis values (a 'layout' axis with 'factorize' lists only the layouts of "
                      "one device count)"));
  // Point idx of the grid: the last axis varies fastest. Without `idx`, each axis's value is
  // drawn at random (a uniform draw from the grid, however large).
  auto point_at = [&](uint64_t idx, uint64_t* rng) {
    Json p = Json::object();
    for (auto it = spec.axes.rbegin(); it != spec.axes.rend(); ++it) {
      const size_t k = rng ? splitmix(*rng) % it->values.size() : idx % it->values.size();
      const Json& v = it->values[k];
      idx /= it->values.size();
      if (it->name == "layout")
        for (const auto& [key, x] : v.items()) p[key] = x;
      else
        p[it->name] = v;
    }
    return p;
  };
  std::set<std::string> seen;
  Diagnostics errs;
  // The base's resolved values (not re-read for every point); a base the parser refuses is
  // refused here, with the parser's diagnostics.
  auto base_values = base_defaults(spec.base);
  if (!base_values) return fail(std::move(base_values).error());
  const Resolved& defaults = *base_values;
  // 1 kept (its hash in `hash`), 0 pruned or a duplicate, -1 error.
  auto admit = [&](const Json& p, std::string& hash) -> int {
    auto bb = bindings_from(defaults, p);
    if (!bb) {
      errs = std::move(bb).error();
      return -1;
    }
    const Bindings& b = *bb;
    for (size_t ci = 0; ci < spec.constraints.size(); ++ci) {
      auto ok = spec.constraints[ci].test(b);
      if (!ok) {
        errs = ok.error();
        for (Diagnostic& d : errs) {  // at the constraint, with the point that failed it
          d.loc.file = spec.file;
          d.loc.json_pointer = fmt::format("/constraints/{}", ci);
          if (d.hint.empty()) d.hint = fmt::format("at the point {}", p.dump());
        }
        return -1;
      }
      if (!*ok) return 0;
    }
    hash = point_hash(p);
    if (!seen.insert(hash).second) return 0;  // a duplicate value in an axis list
    return 1;
  };
  auto too_many = [&] {
    return at_axes(plain(
        fmt::format("the grid keeps more than {} points after its constraints", kMaxPoints),
        "add \"sample\": {\"n\": N, \"seed\": S}, tighter constraints or fewer axis values"));
  };
  auto tick = [&](uint64_t done, uint64_t of) {
    if (progress && (done & 0xffff) == 0 && done > 0) progress(done, of);
  };
  std::string hash;
  if (!sampled) {
    for (uint64_t i = 0; i < g.grid_size; ++i) {
      tick(i, g.grid_size);
      Json p = point_at(i, nullptr);
      const int r = admit(p, hash);
      if (r < 0) return fail(std::move(errs));
      if (r == 0) {
        ++g.pruned;
        continue;
      }
      if (g.points.size() == kMaxPoints) return too_many();
      g.points.push_back({std::move(p), std::move(hash)});
    }
  } else if (g.grid_size <= 4 * *spec.sample_n || g.grid_size <= 1'000'000) {
    // Every kept point's grid index, then a seeded partial Fisher-Yates over them, back to grid
    // order for readable output (indices only: a sample of a few million points holds 8 bytes
    // per candidate, not the point).
    std::vector<uint64_t> kept;
    for (uint64_t i = 0; i < g.grid_size; ++i) {
      tick(i, g.grid_size);
      const int r = admit(point_at(i, nullptr), hash);
      if (r < 0) return fail(std::move(errs));
      if (r == 0) ++g.pruned;
      else kept.push_back(i);
    }
    if (kept.size() > *spec.sample_n) {
      uint64_t s = spec.seed;
      std::vector<size_t> idx(kept.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      for (size_t i = 0; i < *spec.sample_n; ++i)
        std::swap(idx[i], idx[i + splitmix(s) % (idx.size() - i)]);
      idx.resize(*spec.sample_n);
      std::sort(idx.begin(), idx.end());
      std::vector<uint64_t> chosen;
      for (size_t i : idx) chosen.push_back(kept[i]);
      kept = std::move(chosen);
    }
    for (uint64_t i : kept) {
      Json p = point_at(i, nullptr);
      g.points.push_back({p, point_hash(p)});
    }
  } else {
    // Huge grid: rejection-sample points, at most kMaxGrid tries (as many evaluations as a
    // full grid may take).
    uint64_t s = spec.seed;
    const size_t tries = std::min(kMaxGrid, 100 * *spec.sample_n);
    for (size_t t = 0; t < tries && g.points.size() < *spec.sample_n; ++t) {
      tick(t, tries);
      Json p = overflow ? point_at(0, &s) : point_at(splitmix(s) % g.grid_size, nullptr);
      const int r = admit(p, hash);
      if (r < 0) return fail(std::move(errs));
      if (r == 0) ++g.pruned;
      else g.points.push_back({std::move(p), std::move(hash)});
    }
  }
  return g;
}

bool Resolved::same_schedule(const Resolved& o) const {
  return family == o.family && tp == o.tp && pp == o.pp && dp == o.dp && ep == o.ep &&
         stages_per_rank == o.stages_per_rank && microbatches == o.microbatches &&
         zero == o.zero && bucket_size_MB == o.bucket_size_MB && recompute == o.recompute &&
         streams == o.streams && prefetch == o.prefetch &&
         reshard_after_forward == o.reshard_after_forward &&
         sequence_parallel == o.sequence_parallel && tp_comm_overlap == o.tp_comm_overlap &&
         cp == o.cp && cp_comm_type == o.cp_comm_type && order == o.order;
}

Expected<Resolved> base_defaults(const Json& base) {
  if (!base.is_object()) return fail(plain("the base plan is not a JSON object"));
  const JsonSource src = JsonSource::from_json(base, "<base plan>");
  auto plan = plan::parse_plan(src);
  if (!plan) return fail(std::move(plan).error());
  std::vector<plan::Directive> expanded = plan->schedule;
  if (plan->builder) {
    auto ds = pipelines::expand_builder(*plan->builder);
    if (!ds) return fail(std::move(ds).error());
    expanded = std::move(*ds);
  }
  const plan::ResolvedPlan rp = plan::resolve_structure(*plan, expanded, &src);
  Resolved r;
  if (plan->builder) {
    r.family = canonical_family(plan->builder->builder).value_or(plan->builder->builder);
    // 0 = the family's default, so that a family axis picks each family's own v.
    r.stages_per_rank = plan->builder->stages_per_rank;
    r.layout_base = plan->builder->layout.has_value();
  }
  r.tp = rp.tp;
  r.pp = rp.ranks;
  r.dp = rp.dp;
  r.ep = rp.ep;
  r.microbatches = rp.microbatches;
  r.microbatch_size = rp.microbatch_size;
  r.zero = rp.zero;
  r.bucket_size_MB = rp.bucket_size_MB;
  r.recompute = rp.recompute;
  r.streams = rp.streams;
  if (rp.zero == 3 && rp.prefetch != 1) r.prefetch = rp.prefetch;
  r.reshard_after_forward = rp.zero < 3 || rp.reshard_after_forward;
  // The cluster's devices per node as plan/ resolves it: written, or the preset's.
  r.devices_per_node = std::max(1, plan->cluster.devices_per_node);
  r.sequence_parallel = rp.sequence_parallel;
  r.tp_comm_overlap = rp.tp_comm_overlap;
  r.cp = rp.cp;
  r.cp_comm_type = rp.cp_comm_type;
  r.order = rp.order;
  return r;
}

Expected<Resolved> resolve(const Json& base, const Json& params) {
  auto d = base_defaults(base);
  if (!d) return fail(std::move(d).error());
  return resolve_from(std::move(*d), params);
}

std::optional<Diagnostic> check_axis_value(const std::string& axis, const Json& v) {
  // Layout keys: the layout parser's own check (plan/layout.h), on a one-key layout.
  if (axis == "tp" || axis == "pp" || axis == "dp" || axis == "ep" || axis == "zero" ||
      axis == "sequence_parallel" || axis == "tp_comm_overlap" || axis == "cp" ||
      axis == "cp_comm_type") {
    if (axis == "ep" && v == "dp") return std::nullopt;
    Json l = {{axis, v}};
    if (axis == "ep") l["dp"] = v;  // ep is 1 or dp: check the value alone
    // tp_comm_overlap needs TP and sequence parallelism: check the value alone, on a layout
    // that has both (a point's own tp is checked when its plan is compiled)
    if (axis == "tp_comm_overlap") l.update({{"tp", 2}, {"sequence_parallel", true}});
    if (axis == "cp_comm_type") l["cp"] = 2;  // (likewise: it needs cp > 1)
    const JsonSource src = JsonSource::from_json(Json{{"layout", l}}, "<axis>");
    Diagnostics ds;
    if (!plan::parse_layout(src, "/layout", ds) && !ds.empty()) return ds[0];
    return std::nullopt;
  }
  // Builder-call and model numbers: the plan parser's words (plan.cpp Reader::number).
  // The range is the schema table's (plan/schema.h), the one the parser checks.
  auto integer = [&](const char* section, const char* key) -> std::optional<Diagnostic> {
    const plan::PlanKey& k = plan::schema_key(section, key);
    if (!v.is_number_integer())
      return plain(fmt::format("'{}' must be an integer, found {}", key, v.type_name()));
    if (!k.in_range(static_cast<double>(v.get<int64_t>())))
      return plain(fmt::format("'{}' = {} is out of range [{}, {}]", key, v.dump(), k.min, k.max));
    return std::nullopt;
  };
  if (axis == "microbatches") return integer("builder", "microbatches");
  if (axis == "stages_per_rank") return integer("builder", "stages_per_rank");
  if (axis == "microbatch_size") return integer("model", "microbatch_size");
  // Directive values: the directive parser on a one-directive list.
  auto directive = [&](Json d) -> std::optional<Diagnostic> {
    const JsonSource src = JsonSource::from_json(Json::array({std::move(d)}), "<axis>");
    auto ds = plan::parse_directives(src, "");
    if (!ds) return ds.error()[0];
    return std::nullopt;
  };
  if (axis == "recompute") {
    if (v == "none") return std::nullopt;
    return directive({{"op", "recompute"}, {"filter", Json::object()}, {"mode", v}});
  }
  if (axis == "bucket_size_MB")
    return directive(
        {{"op", "replicate"}, {"filter", Json::object()}, {"devices", {0}}, {"bucket_size", v}});
  if (axis == "prefetch")
    return directive({{"op", "replicate"},
                      {"filter", Json::object()},
                      {"devices", {0}},
                      {"shard_grads", true},
                      {"shard_params", true},
                      {"prefetch", v}});
  if (axis == "family") {
    if (!v.is_string()) return plain(fmt::format("'builder' must be a string, found {}", v.type_name()));
    if (!canonical_family(v.get<std::string>()))
      return plain(
          fmt::format("unknown pipeline schedule '{}'", v.get<std::string>()),
          fmt::format("families: {}", fmt::join(pipelines::schedule_family_names(), ", ")));
    return std::nullopt;
  }
  if (axis == "streams" && v != "separate" && v != "shared")
    return plain(fmt::format("streams = {}", v.dump()),
                 "separate (pp, dp, ep, tp streams) or shared (one 'comm' stream)");
  return std::nullopt;
}

Expected<Resolved> resolve_from(Resolved r, const Json& params) {
  Diagnostics bad;
  for (const auto& [k, v] : params.items()) {
    if (schedule_axis(k)) r.schedule_axes = true;
    if (k.empty() || k[0] == '/') continue;
    if (auto d = check_axis_value(k, v)) {
      d->message = fmt::format("axis '{}' = {}: {}", k, v.dump(), d->message);
      bad.push_back(std::move(*d));
    }
  }
  if (!bad.empty()) return fail(std::move(bad));
  auto num = [&](const char* k, auto& dst) {
    if (params.contains(k)) dst = static_cast<std::decay_t<decltype(dst)>>(params[k].get<double>());
  };
  // ep follows dp when the base spreads experts over every replica and the point moves dp.
  const bool ep_is_dp = r.ep > 1 && r.ep == r.dp;
  num("tp", r.tp);
  num("pp", r.pp);
  num("dp", r.dp);
  num("cp", r.cp);
  num("stages_per_rank", r.stages_per_rank);
  num("microbatches", r.microbatches);
  num("microbatch_size", r.microbatch_size);
  num("zero", r.zero);
  num("bucket_size_MB", r.bucket_size_MB);
  if (params.contains("family")) r.family = *canonical_family(params["family"].get<std::string>());
  if (params.contains("recompute")) r.recompute = params["recompute"];
  if (params.contains("streams")) r.streams = params["streams"];
  if (params.contains("prefetch")) r.prefetch = params["prefetch"];
  if (params.contains("sequence_parallel")) r.sequence_parallel = params["sequence_parallel"];
  if (params.contains("tp_comm_overlap")) r.tp_comm_overlap = params["tp_comm_overlap"];
  if (params.contains("cp_comm_type")) r.cp_comm_type = params["cp_comm_type"];
  if (params.contains("ep")) r.ep = params["ep"] == "dp" ? -1 : params["ep"].get<int>();
  if (r.ep == -1 || (!params.contains("ep") && ep_is_dp)) r.ep = r.dp;
  if (r.family.empty() && r.schedule_axes) r.family = "1f1b";
  // What the layout parser refuses of cp (plan/src/layout.cpp), for the point as a whole.
  if (r.cp > 1 && r.ep > 1)
    return fail(plain(fmt::format("layout cp = {} with ep = {}: expert parallelism with context "
                                  "parallelism is not modelled",
                                  r.cp, r.ep),
                      "set ep or cp to 1"));
  // A cp_comm_type of the base means nothing on a point without CP; an axis that asks for one
  // is refused there as the layout parser refuses it.
  if (r.cp < 2 && r.cp_comm_type != "p2p") {
    if (params.contains("cp_comm_type"))
      return fail(plain(fmt::format("'cp_comm_type' {} with cp = {}: there is no context-parallel "
                                    "communication",
                                    r.cp_comm_type, r.cp),
                        "set cp to 2 or more, or cp_comm_type to p2p"));
    r.cp_comm_type = "p2p";
  }
  // What the layout parser refuses of tp_comm_overlap (plan/src/layout.cpp), for the point as a
  // whole: a regenerated schedule has no shard_tensor to carry it when tp = 1.
  if (r.tp_comm_overlap && (r.tp < 2 || !r.sequence_parallel))
    return fail(plain(
        r.tp < 2 ? fmt::format("'tp_comm_overlap' with tp = {}: there is no TP communication to "
                               "overlap",
                               r.tp)
                 : std::string("'tp_comm_overlap' needs 'sequence_parallel': Transformer Engine "
                               "overlaps the sequence-parallel all-gathers and reduce-scatters"),
        r.tp < 2 ? "set tp to 2 or more, or tp_comm_overlap to false"
                 : "set sequence_parallel to true (Megatron-LM asserts the same)"));
  return r;
}

Expected<GeneratedSchedule> layout_schedule(const Resolved& r) {
  auto bad = [](std::string m, std::string h = {}) { return fail(plain(std::move(m), std::move(h))); };
  if (r.tp < 1 || r.pp < 1 || r.dp < 1) return bad("tp, pp and dp must be at least 1");
  if (r.devices() > kMaxLayoutDevices)
    return bad(fmt::format("the layout uses {} devices, more than 2^20", r.devices()),
               "tp x pp x dp is at most 1048576");
  if (r.ep != 1 && r.ep != r.dp)
    return bad(fmt::format("ep = {} with dp = {}: experts are sharded over the data-parallel "
                           "group, so ep must be 1 or dp",
                           r.ep, r.dp),
               "use \"ep\": \"dp\" or 1");
  if (r.zero < 0 || r.zero > 3) return bad(fmt::format("zero = {}: ZeRO levels are 0-3", r.zero));
  if (r.recompute != "none" && r.recompute != "selective" && r.recompute != "full")
    return bad(fmt::format("recompute = '{}'", r.recompute), "none, selective or full");
  if (r.streams != "separate" && r.streams != "shared")
    return bad(fmt::format("streams = '{}'", r.streams),
               "separate (pp, dp, ep, tp streams) or shared (one 'comm' stream)");
  if (r.microbatches < 1) return bad("microbatches must be at least 1");
  auto sched = pipelines::build_schedule(r.family, r.pp, r.stages_per_rank, r.microbatches);
  if (!sched) return fail(std::move(sched).error());
  const int stages = sched->stages;
  const bool shared = r.streams == "shared";
  // Device numbering in the base's rank order (innermost first; Megatron's tp-dp-pp default).
  plan::Layout order;
  order.tp = r.tp;
  order.pp = r.pp;
  order.dp = r.dp;
  order.cp = r.cp;
  order.order = r.order;
  auto dev = [&](int t, int d, int p, int c) { return plan::layout_device(order, t, d, p, c); };
  auto rank_devices = [&](int rank) {  // dp-major, a replica's CP ranks consecutive
    Json a = Json::array();
    for (int d = 0; d < r.dp; ++d)
      for (int c = 0; c < r.cp; ++c) a.push_back(dev(0, d, rank, c));
    return a;
  };
  Json base = Json::array();
  for (int s = 0; s < stages; ++s) {
    const int rank = sched->bidirectional ? s : sched->stage_to_rank[s];
    Json devs = rank_devices(rank);
    Json place = {{"op", "place"}, {"filter", {{"PP", s}}}, {"devices", devs}};
    place["stream"] = shared ? "comm" : "pp";
    base.push_back(place);
    if (r.dp * r.cp > 1) {
      Json rep = {{"op", "replicate"}, {"filter", {{"PP", s}}}, {"devices", devs}};
      if (r.cp > 1) rep["context_parallel"] = r.cp;
      if (r.cp > 1 && r.cp_comm_type != "p2p") rep["cp_comm_type"] = r.cp_comm_type;
      rep["reduce_stream"] = shared ? "comm" : "dp";
      rep["gather_stream"] = shared ? "comm" : "dp";
      rep["bucket_size"] = r.bucket_size_MB;
      if (r.zero >= 1) rep["shard_optimizer"] = true;
      if (r.zero >= 2) rep["shard_grads"] = true;
      if (r.zero >= 3) rep["shard_params"] = true;
      if (!r.prefetch.is_null()) rep["prefetch"] = r.prefetch;
      if (r.zero >= 3 && !r.reshard_after_forward) rep["reshard_after_forward"] = false;
      base.push_back(rep);
      if (r.ep > 1)
        base.push_back({{"op", "shard"},
                        {"filter", {{"PP", s}, {"EP", "*"}}},
                        {"devices", devs},
                        {"stream", shared ? "comm" : "ep"}});
    }
  }
  if (r.tp > 1) {
    Json groups = Json::array();
    for (int p = 0; p < r.pp; ++p)
      for (int d = 0; d < r.dp; ++d)
        for (int c = 0; c < r.cp; ++c) {
          Json g = Json::array();
          for (int t = 0; t < r.tp; ++t) g.push_back(dev(t, d, p, c));
          groups.push_back(g);
        }
    Json st = {{"op", "shard_tensor"},
               {"filter", Json::object()},
               {"devices", groups},
               {"stream", shared ? "comm" : "tp"},
               {"sequence_parallel", r.sequence_parallel}};
    if (r.tp_comm_overlap) st["tp_comm_overlap"] = true;
    base.push_back(std::move(st));
  }
  if (r.recompute != "none")
    base.push_back({{"op", "recompute"}, {"filter", Json::object()}, {"mode", r.recompute}});
  GeneratedSchedule g;
  g.schedule = {{"builder", r.family},
                {"ranks", r.pp},
                {"stages_per_rank", sched->stages_per_rank},
                {"microbatches", r.microbatches},
                {"base", base}};
  g.pp_regions = stages;
  return g;
}

std::string point_name(const Json& base_plan, const Json& params) {
  std::string base = plan::plan_name(JsonSource::from_json(base_plan));
  if (base.empty()) base = "plan";
  std::string edits;
  for (const auto& [k, v] : params.items())
    edits += fmt::format("{}{}={}", edits.empty() ? "" : ", ", k,
                         v.is_string() ? v.get<std::string>() : v.dump());
  return edits.empty() ? base : fmt::format("{} (sweep point: {})", base, edits);
}

namespace {

// Sizes the cluster to the point's devices: whole nodes of the base's resolved devices_per_node
// (`dpn`, the plan's or its preset's); n devices within one node are one node of n.
Expected<void> size_cluster(Json& plan, int64_t n, int dpn) {
  if (n > kMaxLayoutDevices)
    return fail(plain(fmt::format("the layout uses {} devices, more than 2^20", n),
                      "tp x pp x dp is at most 1048576"));
  const Json::json_pointer nodes("/cluster/nodes"), per_node("/cluster/devices_per_node");
  if (n <= int64_t{dpn}) {
    plan[nodes] = 1;
    plan[per_node] = n;
  } else {
    if (n % dpn != 0)
      return fail(plain(
          fmt::format("the layout uses {} devices, not a whole number of {}-device nodes", n, dpn)));
    plan[nodes] = n / dpn;
  }
  return {};
}

// Where `ptr` walks through a list at an index past its end (beyond the one-past-the-end that
// appends): what is wrong, else nothing.
std::optional<std::string> index_past_end(const Json& doc, const Json::json_pointer& ptr) {
  std::vector<std::string> tokens;
  for (Json::json_pointer p = ptr; !p.empty(); p.pop_back()) tokens.push_back(p.back());
  const Json* cur = &doc;
  for (size_t i = tokens.size(); i-- > 0;) {
    const std::string& t = tokens[i];
    const bool last = i == 0;
    if (cur->is_array()) {
      if (t == "-" && last) return std::nullopt;
      const bool digits =
          !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits) return std::nullopt;  // the pointer's own error follows
      const uint64_t idx = t.size() <= 18 ? std::stoull(t) : UINT64_MAX;
      if (idx > cur->size() || (idx == cur->size() && !last))
        return fmt::format("index {} is past the end of a list of {} (at most {}, or '-' to append)",
                           t, cur->size(), cur->size());
      if (idx == cur->size()) return std::nullopt;
      cur = &(*cur)[idx];
    } else if (cur->is_object() && cur->contains(t)) {
      cur = &(*cur)[t];
    } else {
      // A new field: the pointer creates what follows, a list for a numeric token (padded up
      // to its index as well).
      for (size_t j = i; j-- > 0;) {
        const std::string& u = tokens[j];
        if (!u.empty() && u != "0" &&
            std::all_of(u.begin(), u.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return fmt::format("index {} of a list the axis would create (only 0 or '-')", u);
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// On a base written with the layout shorthand, a point that changes only what the shorthand
// expresses edits the builder call: the layout's order and everything else stay as written.
bool layout_expressible(const Resolved& base, const Resolved& r) {
  return base.layout_base && r.recompute == base.recompute && r.streams == base.streams &&
         r.bucket_size_MB == base.bucket_size_MB && r.prefetch == base.prefetch;
}

}  // namespace

Expected<Json> point_plan(const Json& base_plan, const Json& params) {
  auto p = resolve_point(base_plan, params);
  if (!p) return fail(std::move(p).error());
  return std::move(p->doc);
}

Expected<PointPlan> resolve_point(const Json& base_plan, const Json& params,
                                  const Resolved* base_given) {
  Json plan = base_plan;
  bool edited = false;  // by a JSON-pointer axis (then the base's defaults are resolved again)
  if (!plan.is_object()) return fail(plain("the base plan is not a JSON object"));
  // JSON-pointer axes first, so the layout sees an edited cluster.
  for (const auto& [k, v] : params.items()) {
    if (k.empty() || k[0] != '/') continue;
    try {
      Json::json_pointer ptr(k);
      // The top-level section must exist (a typo there would silently add a new one); fields
      // below it may be new (an override of a preset value).
      const std::string top = "/" + k.substr(1, k.find('/', 1) == std::string::npos
                                                    ? std::string::npos
                                                    : k.find('/', 1) - 1);
      if (!plan.contains(Json::json_pointer(top)))
        return fail(plain(fmt::format("axis '{}': the base plan has no '{}'", k, top),
                          "pointer axes start at model, cluster, costmodel or schedule"));
      // An index into a list names an element or the end ('-' or the size): the pointer's
      // assignment would pad the list with nulls up to any index (10^8 of them).
      if (auto far = index_past_end(plan, ptr)) return fail(plain(fmt::format("axis '{}': {}", k, *far)));
      plan[ptr] = v;
      edited = true;
    } catch (const std::exception& e) {
      return fail(plain(fmt::format("axis '{}': {}", k, e.what())));
    }
  }
  std::optional<Resolved> own;
  const Resolved* base_values = edited ? nullptr : base_given;
  if (!base_values) {
    auto d = base_defaults(plan);
    if (!d) return fail(std::move(d).error());
    base_values = &own.emplace(std::move(*d));
  }
  auto rr = resolve_from(*base_values, params);
  if (!rr) return fail(std::move(rr).error());
  const Resolved& r = *rr;
  // Edits go in by JSON pointer, at the keys the schema table names.
  if (!params.empty()) plan[Json::json_pointer("/name")] = point_name(base_plan, params);
  if (params.contains("microbatch_size") && r.microbatch_size != base_values->microbatch_size)
    plan[Json::json_pointer("/model/microbatch_size")] = r.microbatch_size;
  // Pinning every schedule value to the base's own changes nothing (a hand-written schedule
  // has no family: only a family axis gives it one).
  Resolved same = r;
  if (base_values->family.empty() && !params.contains("family")) same.family.clear();
  if (!r.schedule_axes || same.same_schedule(*base_values)) return PointPlan{std::move(plan), r};
  const int dpn = base_values->devices_per_node;
  if (layout_expressible(*base_values, r)) {
    auto sched = pipelines::build_schedule(r.family, r.pp, r.stages_per_rank, r.microbatches);
    if (!sched) return fail(std::move(sched).error());
    auto set = [&](const char* ptr, Json v) { plan[Json::json_pointer(ptr)] = std::move(v); };
    set("/schedule/builder", r.family);
    set("/schedule/microbatches", r.microbatches);
    plan::erase_at(plan, "/schedule/ranks");
    if (r.stages_per_rank > 0) set("/schedule/stages_per_rank", r.stages_per_rank);
    else
      plan::erase_at(plan, "/schedule/stages_per_rank");
    set("/schedule/layout/tp", r.tp);
    set("/schedule/layout/pp", r.pp);
    set("/schedule/layout/dp", r.dp);
    set("/schedule/layout/ep", r.ep);
    set("/schedule/layout/zero", r.zero);
    set("/schedule/layout/sequence_parallel", r.sequence_parallel);
    if (r.tp_comm_overlap || base_values->tp_comm_overlap)
      set("/schedule/layout/tp_comm_overlap", r.tp_comm_overlap);
    if (r.cp > 1 || base_values->cp > 1) set("/schedule/layout/cp", r.cp);
    if (r.cp_comm_type != "p2p")
      set("/schedule/layout/cp_comm_type", r.cp_comm_type);
    else
      plan::erase_at(plan, "/schedule/layout/cp_comm_type");
    set("/model/pp_regions", sched->stages);
    if (auto ok = size_cluster(plan, r.devices(), dpn); !ok) return fail(std::move(ok).error());
    return PointPlan{std::move(plan), r};
  }
  auto g = layout_schedule(r);
  if (!g) return fail(std::move(g).error());
  plan[Json::json_pointer("/schedule")] = std::move(g->schedule);
  plan[Json::json_pointer("/model/pp_regions")] = g->pp_regions;
  if (auto ok = size_cluster(plan, r.devices(), dpn); !ok) return fail(std::move(ok).error());
  return PointPlan{std::move(plan), r};
}

}  // namespace stretto::explore
