// make_cost_model: validates the costmodel section of a plan against the cluster and builds
// the model it names.

#include "stretto/costmodel/cost_model.h"

#include <filesystem>
#include <utility>

#include "models.h"
#include "util.h"

namespace stretto::cost {

using plan::ClusterSpec;
using plan::CostModelSpec;
using plan::DType;

double dtype_peak_factor(DType d) {
  // H100 SXM data sheet (dense): FP8 1979, BF16 989, TF32 495 TFLOPS. FP32 GEMMs are assumed to
  // run on TF32 tensor cores (Megatron / torch.backends.cuda.matmul.allow_tf32 setting).
  switch (d) {
    case DType::kFP8:
      return 2.0;
    case DType::kBF16:
    case DType::kFP16:
      return 1.0;
    case DType::kFP32:
      return 0.5;
  }
  return 1.0;
}

namespace {

// Keys of the plan's costmodel object itself (consumed by the plan parser; tolerated if they
// are passed through in `options`).
const std::vector<std::string>& plan_keys() {
  static const std::vector<std::string> keys = {"kind", "F",    "B",    "BI",
                                                "BW",   "comm", "unit", "profile"};
  return keys;
}

void check_fixed(const CostModelSpec& spec, const std::string& file, Diagnostics& ds) {
  const std::pair<const char*, int64_t> consts[] = {{"F", spec.f_ns},
                                                    {"B", spec.b_ns},
                                                    {"BI", spec.bi_ns},
                                                    {"BW", spec.bw_ns},
                                                    {"comm", spec.comm_ns}};
  for (const auto& [key, v] : consts)
    if (v < 0)
      ds.push_back(detail::diag_at(file, detail::child_pointer(spec.pointer, key),
                                   std::string("fixed cost '") + key + "' must not be negative"));
  if (spec.options.is_null()) return;
  if (!spec.options.is_object()) {
    ds.push_back(detail::diag_at(file, spec.pointer, "cost model options must be a JSON object"));
    return;
  }
  const auto& analytic = analytic_option_names();
  for (const auto& [key, v] : spec.options.items()) {
    (void)v;
    const auto& keys = plan_keys();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    const std::string ptr = detail::child_pointer(spec.pointer, key);
    if (std::find(analytic.begin(), analytic.end(), key) != analytic.end()) {
      ds.push_back(detail::diag_at(file, ptr,
                                   "option '" + key + "' does not apply to the fixed cost model",
                                   "use \"kind\": \"analytic\" or \"profiled\" for it"));
    } else {
      ds.push_back(detail::diag_at(file, ptr, "unknown cost model option '" + key + "'",
                                   detail::did_you_mean(key, keys)));
    }
  }
}

// The analytic and profiled models divide by these; a missing one is a plan error.
void check_cluster(const ClusterSpec& cl, const std::string& model, const std::string& file,
                   Diagnostics& ds) {
  auto need = [&](bool ok, const std::string& field, const std::string& what) {
    if (!ok)
      ds.push_back(detail::diag_at(file, cl.pointer + field,
                                   "the " + model + " cost model needs " + what,
                                   "set it in \"cluster\" or pick a preset that has it"));
  };
  need(cl.device.peak_tflops > 0, "/peak_tflops", "the device's peak_tflops > 0");
  need(cl.device.hbm_GBps > 0, "/hbm_GBps", "the device's hbm_GBps > 0");
  if (cl.devices_per_node > 1)
    need(cl.intra_node.bandwidth_GBps > 0, "/intra_node/bandwidth_GBps",
         "an intra-node link bandwidth > 0 (devices_per_node > 1)");
  if (cl.nodes > 1)
    need(cl.inter_node.bandwidth_GBps > 0, "/inter_node/bandwidth_GBps",
         "an inter-node link bandwidth > 0 (nodes > 1)");
}

Expected<std::unique_ptr<CostModel>> build(const CostModelSpec& spec, const ClusterSpec& cluster,
                                           const std::string& base_dir, const std::string& file) {
  Diagnostics ds;
  switch (spec.kind) {
    case CostModelSpec::Kind::kFixed: {
      check_fixed(spec, file, ds);
      if (!ds.empty()) return fail(std::move(ds));
      return detail::make_fixed_model(spec);
    }
    case CostModelSpec::Kind::kAnalytic:
    case CostModelSpec::Kind::kProfiled: {
      const bool profiled = spec.kind == CostModelSpec::Kind::kProfiled;
      check_cluster(cluster, profiled ? "profiled" : "analytic", file, ds);
      auto params = parse_analytic_params(spec.options, cluster, spec.pointer, file);
      if (!params) ds.insert(ds.end(), params.error().begin(), params.error().end());
      if (!profiled) {
        if (!ds.empty()) return fail(std::move(ds));
        return detail::make_analytic_model(std::move(*params), cluster);
      }
      if (spec.profile.empty()) {
        ds.push_back(detail::diag_at(file, spec.pointer,
                                     "the profiled cost model needs a 'profile' (path of a "
                                     "measured cost table)",
                                     "add \"profile\": \"table.json\", relative to the plan"));
        return fail(std::move(ds));
      }
      std::filesystem::path path(spec.profile);
      if (path.is_relative() && !base_dir.empty()) {
        // The plan parser may already have made the path relative to the plan's directory
        // (then it is valid from the working directory as it stands); joining base_dir again
        // would point into base_dir/base_dir. Prefer the documented base_dir-relative reading.
        std::error_code ec;
        std::filesystem::path joined = std::filesystem::path(base_dir) / path;
        if (std::filesystem::exists(joined, ec) || !std::filesystem::exists(path, ec))
          path = joined;
      }
      auto table = load_profile_table(path.string());
      if (!table) ds.insert(ds.end(), table.error().begin(), table.error().end());
      if (table && !table->options.empty() && ds.empty()) {
        // The table's own options first, so that a bad one is reported in the table (file and
        // /options pointer), not as the plan's.
        auto own = parse_analytic_params(table->options, cluster, "/options", path.string());
        if (!own) return fail(std::move(own.error()));
        // Options measured with the table (interference), under the plan's own.
        plan::Json merged = table->options;
        for (const auto& [k, v] : spec.options.items()) merged[k] = v;
        params = parse_analytic_params(merged, cluster, spec.pointer, file);
        if (!params) ds.insert(ds.end(), params.error().begin(), params.error().end());
      }
      if (!ds.empty()) return fail(std::move(ds));
      return detail::make_profiled_model(std::move(*params), cluster, std::move(*table));
    }
  }
  return fail(detail::diag_at(file, spec.pointer, "unknown cost model kind"));
}

}  // namespace

Expected<std::unique_ptr<CostModel>> make_cost_model(const CostModelSpec& spec,
                                                     const ClusterSpec& cluster,
                                                     const std::string& base_dir,
                                                     const plan::JsonSource* src) {
  auto m = build(spec, cluster, base_dir, src ? src->file() : std::string());
  if (!m) {
    Diagnostics ds = std::move(m.error());
    detail::locate(ds, src);  // plan diagnostics get line:col; table ones already have theirs
    return fail(std::move(ds));
  }
  return m;
}

}  // namespace stretto::cost
