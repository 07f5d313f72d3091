// The analytic model (see analytic.h): options, roofline compute, NCCL collectives and
// point-to-point flows.

#include "stretto/costmodel/analytic.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "models.h"
#include "stretto/plan/schema.h"
#include "util.h"

namespace stretto::cost {

using compiler::CommKind;
using compiler::OpKind;
using plan::ClusterSpec;
using plan::DeviceSpec;
using plan::Json;
using plan::Pass;
using plan::PlanKey;
using plan::schema_key;
using plan::ValueSource;

namespace {

// DeepSeek-V3 technical report (arXiv 2412.19437): 20 of the H800's 132 SMs run communication.
constexpr double kCommSms = 20.0;
constexpr double kDefaultSms = 132.0;
// A100 SXM: data-sheet peaks at the 1410 MHz boost clock; ~1305 MHz sustained at the 400 W
// power limit under GEMM load (NVIDIA's A100 HPL Rpeak clock; see sustained_clock_ratio).
constexpr double kA100BoostMHz = 1410.0;
constexpr double kA100SustainedMHz = 1305.0;
// Curves fitted to kernels measured on one H100 80GB HBM3 (SXM) and one H200, both at 700 W
// and 1980 MHz, torch 2.11.0+cu130 (bench/gpu/kernel_sweep.py; CUDA events, median of 20, random
// bf16 data): tests/data/costmodel/{h100,h200}_kernels_measured_raw.json, fitted by
// bench/gpu/fit_curves.py (GEMMs >= 50 us of the h2048/h4096/h5120/h12288 widths; held-out
// Llama widths: mean |error| 4.2 % on H100, 3.4 % on H200; causal SDPA, head dim 128, F and B).
// docs/fidelity.md has the tables.
struct Calibration {
  const char* kind;
  double gemm_efficiency, gemm_k_half, gemm_split_k_min;
  double attention_efficiency, attention_seq_half, attention_waves_half, attention_bwd_ratio;
};
constexpr Calibration kCalibrations[] = {
    // h100_kernels_measured_raw.json (NVIDIA H100 80GB HBM3), fit_curves.py
    {"h100-sxm", 0.711, 188, 157, 0.711, 646, 1.17, 0.835},
    // h200_kernels_measured_raw.json (NVIDIA H200), fit_curves.py
    {"h200", 0.704, 191, 321, 0.701, 546, 1.19, 0.852},
};
// Memory-bound op classes (MemOpClass) under kernel_style fused / eager: bytes per ns each op
// class and pass reaches in PyTorch kernels measured on one H200 (torch 2.11.0+cu130), on the
// byte counts the compiler gives the op (compiler/src/model.cpp), Llama-3-8B layer shapes
// (4096 tokens, hidden 4096, ffn 14336, vocab 32000, bf16).
// Sources: M = tests/data/costmodel/h200_pytorch_ops_measured.json (20 back-to-back calls,
// field results.<row>.F_ms / B_ms); S = tests/data/costmodel/h200_kernels_measured_raw.json
// (kind "memory", median of the rows of >= 200 MB). A backward in M also writes the output
// gradient (torch.ones_like) and accumulates every input's .grad (never zeroed: read two, write
// one); that time is taken out at the stream rate S measures for `add` (4237 GB/s, 9 rows):
// kernel ns = B - (3 x input bytes + output bytes) / 4237 (m_backward_ns below).
struct MemRates {
  double norm_f, norm_b, act_f, act_b, loss_f, loss_b, emb_f, emb_b;
};
constexpr double kAddGBps = 4237.0;  // S: add, F
constexpr double m_backward_ns(double b_ms, double input_bytes, double output_bytes) {
  return b_ms * 1e6 - (3 * input_bytes + output_bytes) / kAddGBps;
}
constexpr double kHidden = 33554432;                       // [T,h] bf16
constexpr double kActIn = 234881024, kActOut = 117440512;  // SwiGLU in [T,2f], out [T,f] bf16
constexpr double kLogits = 262144000;                      // [T,V] bf16
constexpr double kEmbWeight = 262144000;                   // [V,h] bf16
constexpr double kNormW = 8192;                            // [h] bf16
// H200 at the data-sheet 4800 GB/s HBM.
constexpr MemRates kH200Fused = {
    // M rmsnorm_aten_rms_norm F 0.0254 ms; bytes 2 x T x h x 2 + h x 2
    (2 * kHidden + kNormW) / 25400.0,
    // S layer_norm B, 2401 GB/s on 3 x T x h x 2 (Transformer Engine-style fused backward: one
    // sweep reads x and dY and writes dX, the dW partials come from the same sweep; PyTorch
    // 2.11's rms_norm backward is not one kernel: M rmsnorm_aten_rms_norm B runs at ~500 GB/s)
    2401.0,
    // M swiglu_compiled F 0.0875 ms (one fused kernel); bytes 3 x T x f x 2
    (kActIn + kActOut) / 87500.0,
    // M swiglu_eager B 0.4585 ms (the fastest backward measured; swiglu_compiled B is slower,
    // 0.5549 ms); bytes 4 x T x f x 2
    (kActIn + 2 * kActOut) / m_backward_ns(0.4585, kActIn, kActOut),
    // M cross_entropy_compiled F 0.2002 ms (bf16 logits read, fp32 softmax); bytes T x V x 6
    kLogits * 3 / 200200.0,
    // M cross_entropy_compiled B 0.5604 ms; bytes 2 x T x V x 6 (scalar output)
    kLogits * 6 / m_backward_ns(0.5604, kLogits, 0),
    // M embedding F 0.0206 ms; bytes T x h x 2 + T x 8
    (kHidden + 32768) / 20600.0,
    // M embedding B 0.6289 ms: the dense index-add over vocab x hidden (ATen
    // embedding_dense_backward); bytes 2 x T x h x 2 + V x h x 2
    (2 * kHidden + kEmbWeight) / m_backward_ns(0.6289, kEmbWeight, kHidden),
};
// An unfused PyTorch program as torch 2.11 (the measured version) runs it: each op is the ATen
// op a plain program calls, with no compiler and no Transformer Engine.
constexpr MemRates kH200Eager = {
    // M rmsnorm_aten_rms_norm F 0.0254 ms. The norm is torch.nn.RMSNorm / F.rms_norm (torchtitan's
    // "rmsnorm"), which on CUDA dispatches to ATen's fused kernel aten::_fused_rms_norm (forward
    // and _fused_rms_norm_backward; added to PyTorch in 2025, pytorch/pytorch pull 153666; torch
    // 2.4's F.rms_norm was still a composite of pow, mean and rsqrt). The hand-written fp32
    // formula (M rmsnorm_eager, 0.2431 / 0.5701 ms: six kernels) is what a program that defines
    // its own RMSNorm module runs; it is not priced by any style.
    (2 * kHidden + kNormW) / 25400.0,
    // S layer_norm B at this shape (tokens 4096, hidden 4096): 0.09456 ms, ATen's norm backward
    // (dX, then the weight's column sums: two passes over x and dY, as F.rms_norm's backward);
    // on BI + BW bytes 5 x T x h x 2 + 2 x h x 2. Not M rmsnorm_aten_rms_norm B (0.2206 ms, 0.1889
    // less its gradient writes): twice S's kernel and twice what the replay's own call of the same
    // ATen op ran on an H200 (0.097 ms; 0.075 as a CUDA graph), so M's row is the outlier. Like
    // every rate here it is the Llama-3-8B shape's: S's rows are flat (0.086-0.108 ms) from 50 to
    // 200 MB and grow at the fused rate's 2401 GB/s above, which one rate cannot follow.
    (5 * kHidden + 2 * kNormW) / 94560.0,
    // M swiglu_eager F 0.1475 ms (silu, then a multiply)
    (kActIn + kActOut) / 147500.0,
    kH200Fused.act_b,  // M swiglu_eager B (above)
    // M cross_entropy_eager_fp32 F 0.8212 ms (logits cast to fp32, log-softmax, nll: the loss of
    // torchtitan's cross_entropy_loss and Hugging Face's causal-LM loss, both upcast the logits)
    kLogits * 3 / 821200.0,
    // M cross_entropy_eager_fp32 B 1.0388 ms
    kLogits * 6 / m_backward_ns(1.0388, kLogits, 0),
    kH200Fused.emb_f,  // the same ATen kernels either way
    kH200Fused.emb_b,
};
// H100 SXM: the classes S measures on both GPUs (h100_kernels_measured_raw.json, same rows)
// scaled by the H100 / H200 rate of their proxy: layer norm F 1836 / 2279, layer norm B measured
// (1790), GeLU F 2756 / 3006, GeLU B 2982 / 3376; loss and embedding were measured on the H200
// only and are scaled by the HBM ratio 3350 / 4800 (taken as bandwidth-bound).
constexpr double kH100Hbm = 3350.0 / 4800.0;
constexpr MemRates h100_of(const MemRates& r, double norm_b) {
  return {r.norm_f * 1836.0 / 2279.0, norm_b,
          r.act_f * 2756.0 / 3006.0,  r.act_b * 2982.0 / 3376.0,
          r.loss_f * kH100Hbm,        r.loss_b * kH100Hbm,
          r.emb_f * kH100Hbm,         r.emb_b * kH100Hbm};
}
constexpr MemRates kH100Fused = h100_of(kH200Fused, 1790.0);
constexpr MemRates kH100Eager = h100_of(kH200Eager, kH200Eager.norm_b * 1790.0 / 2401.0);
struct MemCalibration {
  const char* kind;
  MemRates fused, eager;
};
constexpr MemCalibration kMemCalibrations[] = {
    {"h100-sxm", kH100Fused, kH100Eager},
    {"h200", kH200Fused, kH200Eager},
};

// PCIe 5.0 x16 moves 64 GB/s per direction; a faster intra-node link is taken to be NVLink.
constexpr double kPcieGen5x16GBps = 64.0;
// Fused attention kernels tile the query rows by 128 (FlashAttention-2/3 block size on H100).
constexpr double kAttentionBlockRows = 128.0;
// Plan-level keys that may reach the options object depending on how the plan parser splits
// the costmodel object; they are not options and are ignored here.
constexpr std::string_view kPlanKeys[] = {"kind", "profile"};
// Keys of the fixed model: an error here, with a pointed message.

NcclArch arch_from_kind(const std::string& kind) {
  // Device presets are named after the GPU ("h100-sxm", "a100-sxm", "gb200", ...).
  std::string k = detail::lower(kind);
  if (!k.empty() && k[0] == 'g') k.erase(0, 1);  // Grace-* superchips
  if (k.empty()) return NcclArch::kHopper;
  switch (k[0]) {
    case 'v':
      return NcclArch::kVolta;
    case 'a':
      return NcclArch::kAmpere;
    case 'h':
      return NcclArch::kHopper;
    case 'b':
      return NcclArch::kBlackwell;
    default:
      return NcclArch::kHopper;
  }
}

struct OptionReader {
  const std::string& pointer;
  const std::string& file;
  Diagnostics& ds;

  std::string ptr(const std::string& key) const { return detail::child_pointer(pointer, key); }

  bool number(const std::string& key, const Json& v, double lo, double hi, bool lo_open,
              double& out) {
    if (!v.is_number()) {
      ds.push_back(detail::diag_at(file, ptr(key), "option '" + key + "' must be a number"));
      return false;
    }
    double x = v.get<double>();
    bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
    if (!ok) {
      std::string range = std::string(lo_open ? "(" : "[") + fmt(lo) + ", " +
                          (std::isinf(hi) ? std::string("inf)") : fmt(hi) + "]");
      ds.push_back(detail::diag_at(
          file, ptr(key), "option '" + key + "' = " + v.dump() + " is out of range " + range));
      return false;
    }
    out = x;
    return true;
  }

  // An option's range from the plan's schema table (plan/schema.h).
  bool number(const std::string& key, const Json& v, double& out) {
    const PlanKey& k = schema_key("costmodel", key);
    return number(key, v, k.min, k.max, k.min_exclusive, out);
  }
  bool integer(const std::string& key, const Json& v, int& out) {
    const PlanKey& k = schema_key("costmodel", key);
    return integer(key, v, static_cast<int>(k.min), static_cast<int>(k.max), out);
  }

  bool integer(const std::string& key, const Json& v, int lo, int hi, int& out) {
    if (!v.is_number_integer()) {
      ds.push_back(detail::diag_at(file, ptr(key), "option '" + key + "' must be an integer"));
      return false;
    }
    int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) {
      ds.push_back(detail::diag_at(file, ptr(key),
                                   "option '" + key + "' = " + v.dump() + " is out of range [" +
                                       std::to_string(lo) + ", " + std::to_string(hi) + "]"));
      return false;
    }
    out = static_cast<int>(x);
    return true;
  }

  bool boolean(const std::string& key, const Json& v, bool& out) {
    if (!v.is_boolean()) {
      ds.push_back(detail::diag_at(file, ptr(key), "option '" + key + "' must be true or false"));
      return false;
    }
    out = v.get<bool>();
    return true;
  }

  bool string(const std::string& key, const Json& v, std::string& out) {
    if (!v.is_string()) {
      ds.push_back(detail::diag_at(file, ptr(key), "option '" + key + "' must be a string"));
      return false;
    }
    out = v.get<std::string>();
    return true;
  }

  // One of `names` (case-insensitive); returns its index or -1 with a diagnostic.
  int choice(const std::string& key, const std::string& word,
             const std::vector<std::string>& names) {
    for (size_t i = 0; i < names.size(); ++i)
      if (detail::iequals(word, names[i])) return static_cast<int>(i);
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    ds.push_back(detail::diag_at(
        file, ptr(key),
        "option '" + key + "': unknown value '" + word + "' (expected one of " + all + ")",
        detail::did_you_mean(word, names)));
    return -1;
  }

  // NCCL_ALGO / NCCL_PROTO syntax: "a,b" enables exactly those, "^a,b" everything but those.
  template <size_t N>
  bool mask(const std::string& key, const Json& v, const std::vector<std::string>& names,
            std::array<bool, N>& out) {
    std::string text;
    if (!string(key, v, text)) return false;
    bool invert = !text.empty() && text[0] == '^';
    std::string list = invert ? text.substr(1) : text;
    std::array<bool, N> m;
    m.fill(invert);
    bool ok = true, any = false;
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      std::string tok =
          list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      tok.erase(0, tok.find_first_not_of(' '));
      tok.erase(tok.find_last_not_of(' ') + 1);
      if (!tok.empty()) {
        int i = choice(key, tok, names);
        if (i < 0)
          ok = false;
        else
          m[static_cast<size_t>(i)] = !invert;
        any = true;
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (!any) {
      ds.push_back(detail::diag_at(file, ptr(key), "option '" + key + "' names nothing"));
      return false;
    }
    if (ok) out = m;
    return ok;
  }

  static std::string fmt(double x) {
    Json j = x;
    return j.dump();
  }
};

}  // namespace

double nccl_nvlink_ratio(NcclArch arch) {
  // NCCL src/graph/topo.h per-link NVLink bandwidths over the data sheets' per-link,
  // per-direction figures (NVLink 2/3/4: 25 GB/s; NVLink 5: 50 GB/s).
  switch (arch) {
    case NcclArch::kVolta:
      return 20.0 / 25.0;  // SM70_NVLINK_BW
    case NcclArch::kAmpere:
      return 20.0 / 25.0;  // SM80_NVLINK_BW
    case NcclArch::kHopper:
      return 20.6 / 25.0;  // SM90_NVLINK_BW
    case NcclArch::kBlackwell:
      return 40.1 / 50.0;  // SM100_NVLINK_BW
  }
  return 1.0;
}

const std::vector<std::string>& analytic_option_names() {
  // The plan's schema table lists the cost-model keys: the plan's own (kind, profile), the
  // fixed model's, then these.
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    const std::vector<std::string> fixed = plan::fixed_costmodel_keys();
    for (const std::string& k : plan::section_keys("costmodel"))
      if (k != "profile" && std::find(fixed.begin(), fixed.end(), k) == fixed.end())
        v.push_back(k);
    return v;
  }();
  return names;
}

const char* kernel_style_name(KernelStyle s) {
  switch (s) {
    case KernelStyle::kFused:
      return "fused";
    case KernelStyle::kEager:
      return "eager";
    default:
      return "roofline";
  }
}

namespace {

// The rates of `style` on `device_kind`; false when that kind has no measured kernels (only
// roofline is then available).
bool set_kernel_style(AnalyticParams& p, const std::string& device_kind, KernelStyle style) {
  p.kernel_style = style;
  p.op_GBps.fill(0);
  if (style == KernelStyle::kRoofline) return true;
  for (const MemCalibration& c : kMemCalibrations) {
    if (!detail::iequals(device_kind, c.kind)) continue;
    const MemRates& r = style == KernelStyle::kFused ? c.fused : c.eager;
    p.op_GBps = {r.norm_f, r.norm_b, r.act_f, r.act_b, r.loss_f, r.loss_b, r.emb_f, r.emb_b};
    return true;
  }
  p.kernel_style = KernelStyle::kRoofline;
  return false;
}

}  // namespace

AnalyticParams calibrated_defaults(const std::string& device_kind) {
  AnalyticParams p;
  for (const Calibration& c : kCalibrations) {
    if (!detail::iequals(device_kind, c.kind)) continue;
    p.gemm_efficiency = c.gemm_efficiency;
    p.gemm_k_half = c.gemm_k_half;
    p.gemm_split_k_min = c.gemm_split_k_min;
    // Fitted with 128x128 tiles and without wave quantization: with it the held-out error is
    // larger on both GPUs (fit_curves.py prints both variants).
    p.wave_quantization = false;
    p.attention_efficiency = c.attention_efficiency;
    p.attention_seq_half = c.attention_seq_half;
    p.attention_waves_half = c.attention_waves_half;
    p.attention_bwd_ratio = c.attention_bwd_ratio;
  }
  for (const MemCalibration& c : kMemCalibrations)
    if (detail::iequals(device_kind, c.kind)) p.kernel_style = KernelStyle::kFused;
  set_kernel_style(p, device_kind, p.kernel_style);
  return p;
}

std::vector<plan::ResolvedField> resolved_options(const plan::CostModelSpec& spec,
                                                  const ClusterSpec& cluster) {
  std::vector<plan::ResolvedField> out;
  if (spec.kind == plan::CostModelSpec::Kind::kFixed) return out;
  const Json options = spec.options.is_object() ? spec.options : Json::object();
  auto parsed = parse_analytic_params(options, cluster, spec.pointer, "");
  if (!parsed) return out;
  const AnalyticParams plain;
  const AnalyticParams preset = calibrated_defaults(cluster.device.kind);
  // The scalar options, by key: written in the plan; derived from other values where the
  // schema table says so (comm_sm_share from the SMs, ...); else the preset's calibration when
  // it differs from the plain default.
  auto add = [&](const char* key, auto AnalyticParams::*member) {
    const ValueSource s = options.contains(key) ? ValueSource::kPlan
                          : schema_key("costmodel", key).when_absent == ValueSource::kDerived
                              ? ValueSource::kDerived
                          : preset.*member != plain.*member ? ValueSource::kPreset
                                                             : ValueSource::kDefault;
    out.push_back({key, spec.pointer + "/" + key, Json((*parsed).*member), s});
  };
  add("gemm_efficiency", &AnalyticParams::gemm_efficiency);
  add("attention_efficiency", &AnalyticParams::attention_efficiency);
  add("attention_seq_half", &AnalyticParams::attention_seq_half);
  add("attention_waves_half", &AnalyticParams::attention_waves_half);
  add("attention_bwd_ratio", &AnalyticParams::attention_bwd_ratio);
  add("memory_efficiency", &AnalyticParams::memory_efficiency);
  add("gemm_tile_m", &AnalyticParams::gemm_tile_m);
  add("gemm_tile_n", &AnalyticParams::gemm_tile_n);
  add("gemm_k_half", &AnalyticParams::gemm_k_half);
  add("gemm_split_k_min", &AnalyticParams::gemm_split_k_min);
  add("wave_quantization", &AnalyticParams::wave_quantization);
  add("sustained_clock_ratio", &AnalyticParams::sustained_clock_ratio);
  add("launch_floor_us", &AnalyticParams::launch_floor_us);
  add("dispatch_us", &AnalyticParams::dispatch_us);
  add("comm_sm_share", &AnalyticParams::comm_sm_share);
  add("comm_hbm_share", &AnalyticParams::comm_hbm_share);
  add("host_cores", &AnalyticParams::host_cores);
  add("host_compute", &AnalyticParams::host_compute);
  add("host_op_us", &AnalyticParams::host_op_us);
  add("host_share_efficiency", &AnalyticParams::host_share_efficiency);
  add("p2p_latency_us", &AnalyticParams::p2p_latency_us);
  add("nccl_intra_GBps", &AnalyticParams::nccl_intra_GBps);
  out.push_back({"kernel_style", spec.pointer + "/kernel_style",
                 Json(kernel_style_name(parsed->kernel_style)),
                 options.contains("kernel_style")               ? ValueSource::kPlan
                 : preset.kernel_style != plain.kernel_style ? ValueSource::kPreset
                                                               : ValueSource::kDefault});
  return out;
}

Expected<AnalyticParams> parse_analytic_params(const Json& options, const ClusterSpec& cluster,
                                               const std::string& pointer,
                                               const std::string& file) {
  AnalyticParams p = calibrated_defaults(cluster.device.kind);
  p.nccl.arch = arch_from_kind(cluster.device.kind);
  p.nccl.nvlink = cluster.intra_node.bandwidth_GBps > kPcieGen5x16GBps;
  p.nccl.intra_GBps = cluster.intra_node.bandwidth_GBps;
  p.nccl.inter_GBps = cluster.inter_node.bandwidth_GBps;
  // NCCL's graph->latencyInter is what the network plugin reports on top of hwLat's NET row;
  // NCCL's IB and socket plugins report none, so the default is 0 (the cluster's inter-node
  // latency is used for point-to-point transfers, and a DCN's latency for island crossings).
  p.nccl.net_latency_us = 0;

  Diagnostics ds;
  OptionReader r{pointer, file, ds};
  if (!options.is_null() && !options.is_object()) {
    ds.push_back(detail::diag_at(file, pointer, "cost model options must be a JSON object"));
    return fail(std::move(ds));
  }
  bool sm_share_given = false;
  // Keys of the fixed model: an error here, with a pointed message.
  const std::vector<std::string> fixed = plan::fixed_costmodel_keys();
  if (options.is_object()) {
    for (const auto& [key, v] : options.items()) {
      if (std::find(std::begin(kPlanKeys), std::end(kPlanKeys), key) != std::end(kPlanKeys))
        continue;
      if (key != "kind" && std::find(fixed.begin(), fixed.end(), key) != fixed.end()) {
        ds.push_back(detail::diag_at(file, r.ptr(key),
                                     "'" + key + "' applies only to the fixed cost model",
                                     "use \"kind\": \"fixed\" for per-pass constants"));
        continue;
      }
      if (key == "gemm_efficiency") {
        r.number(key, v, p.gemm_efficiency);
      } else if (key == "attention_efficiency") {
        r.number(key, v, p.attention_efficiency);
      } else if (key == "attention_seq_half") {
        r.number(key, v, p.attention_seq_half);
      } else if (key == "attention_waves_half") {
        r.number(key, v, p.attention_waves_half);
      } else if (key == "attention_bwd_ratio") {
        r.number(key, v, p.attention_bwd_ratio);
      } else if (key == "memory_efficiency") {
        r.number(key, v, p.memory_efficiency);
      } else if (key == "gemm_tile_m") {
        r.integer(key, v, p.gemm_tile_m);
      } else if (key == "gemm_tile_n") {
        r.integer(key, v, p.gemm_tile_n);
      } else if (key == "gemm_k_half") {
        r.number(key, v, p.gemm_k_half);
      } else if (key == "gemm_split_k_min") {
        r.number(key, v, p.gemm_split_k_min);
      } else if (key == "wave_quantization") {
        r.boolean(key, v, p.wave_quantization);
      } else if (key == "launch_floor_us") {
        r.number(key, v, p.launch_floor_us);
      } else if (key == "dispatch_us") {
        r.number(key, v, p.dispatch_us);
      } else if (key == "comm_sm_share") {
        sm_share_given = r.number(key, v, p.comm_sm_share);
      } else if (key == "comm_hbm_share") {
        r.number(key, v, p.comm_hbm_share);
      } else if (key == "nccl_algo") {
        std::vector<std::string> names;
        for (int a = 0; a < kNcclNumAlgos; ++a)
          names.emplace_back(nccl_algo_name(static_cast<NcclAlgo>(a)));
        r.mask(key, v, names, p.nccl.algo_enabled);
      } else if (key == "nccl_proto") {
        std::vector<std::string> names;
        for (int q = 0; q < kNcclNumProtos; ++q)
          names.emplace_back(nccl_proto_name(static_cast<NcclProto>(q)));
        if (r.mask(key, v, names, p.nccl.proto_enabled)) p.nccl.proto_default_ll128 = false;
      } else if (key == "nccl_arch") {
        std::string s;
        if (r.string(key, v, s)) {
          std::vector<std::string> names;
          for (int a = 0; a < 4; ++a) names.emplace_back(nccl_arch_name(static_cast<NcclArch>(a)));
          int i = r.choice(key, s, names);
          if (i >= 0) p.nccl.arch = static_cast<NcclArch>(i);
        }
      } else if (key == "nccl_intra_link") {
        std::string s;
        if (r.string(key, v, s)) {
          int i = r.choice(key, s, {"nvlink", "pci"});
          if (i >= 0) p.nccl.nvlink = i == 0;
        }
      } else if (key == "nccl_cpu") {
        std::string s;
        if (r.string(key, v, s)) {
          int i = r.choice(key, s, {"intel", "amd"});
          if (i >= 0) p.nccl.amd_cpu = i == 1;
        }
      } else if (key == "nccl_net_overhead_us") {
        r.number(key, v, p.nccl.net_overhead_us);
      } else if (key == "nccl_net_latency_us") {
        r.number(key, v, p.nccl.net_latency_us);
      } else if (key == "p2p_latency_us") {
        r.number(key, v, p.p2p_latency_us);
      } else if (key == "sustained_clock_ratio") {
        r.number(key, v, p.sustained_clock_ratio);
      } else if (key == "host_compute") {
        bool b = false;
        if (r.boolean(key, v, b)) p.host_compute = b ? 1 : 0;
      } else if (key == "host_cores") {
        r.number(key, v, p.host_cores);
      } else if (key == "host_op_us") {
        r.number(key, v, p.host_op_us);
      } else if (key == "host_share_efficiency") {
        r.number(key, v, p.host_share_efficiency);
      } else if (key == "host_reuse_factor") {
        // a number (every distance from 1) or [f1, f2, f3]: by distance, the last one for
        // every larger distance
        const PlanKey& range = schema_key("costmodel", key);
        const double kLo = range.min, kHi = range.max;
        if (v.is_number()) {
          double f = 1;
          if (r.number(key, v, f))
            std::fill(p.host_reuse_factor.begin() + 1, p.host_reuse_factor.end(), f);
        } else if (v.is_array() && !v.empty() && v.size() < kReuseDistances) {
          OptionReader sub{r.ptr(key), file, ds};
          for (size_t j = 0; j < v.size(); ++j) {
            double f = 1;
            if (!sub.number(std::to_string(j), v[j], kLo, kHi, false, f)) continue;
            // distance j + 1, and every larger one until a later entry says otherwise
            std::fill(p.host_reuse_factor.begin() + static_cast<std::ptrdiff_t>(j + 1),
                      p.host_reuse_factor.end(), f);
          }
        } else {
          ds.push_back(detail::diag_at(
              file, r.ptr(key), "option 'host_reuse_factor' must be a number or a list of 1 to 3 numbers",
              "e.g. [1.02, 1.1, 1.2]: the factor at reuse distance 1, 2, and 3 or more"));
        }
      } else if (key == "host_cold_factor") {
        // a number (every kind) or {"all_gather": 1.2, ...} by communication kind
        const PlanKey& range = schema_key("costmodel", key);
        const double kLo = range.min, kHi = range.max;
        if (v.is_number()) {
          double f = 1;
          if (r.number(key, v, f)) p.host_cold_factor.fill(f);
        } else if (v.is_object()) {
          for (const auto& [kind, f] : v.items()) {
            auto k = detail::parse_comm(kind);
            if (!k || *k == CommKind::kNone) {
              ds.push_back(detail::diag_at(file, detail::child_pointer(r.ptr(key), kind),
                                           "unknown communication kind '" + kind + "'",
                                           detail::did_you_mean(kind, detail::comm_names())));
              continue;
            }
            OptionReader sub{r.ptr(key), file, ds};
            sub.number(kind, f, kLo, kHi, false, p.host_cold_factor[static_cast<size_t>(*k)]);
          }
        } else {
          ds.push_back(detail::diag_at(
              file, r.ptr(key), "option 'host_cold_factor' must be a number or an object",
              "e.g. {\"all_gather\": 1.25}: a factor per communication kind"));
        }
      } else if (key == "nccl_intra_GBps") {
        r.number(key, v, p.nccl_intra_GBps);
      } else if (key == "kernel_style") {
        std::string st;
        if (r.string(key, v, st)) {
          const int i = r.choice(key, st, {"roofline", "fused", "eager"});
          if (i >= 0 && !set_kernel_style(p, cluster.device.kind, static_cast<KernelStyle>(i)))
            ds.push_back(detail::diag_at(
                file, r.ptr(key),
                "kernel_style '" + st + "' has no measured kernels on device kind '" +
                    cluster.device.kind + "'",
                "the fused and eager rates were measured on h100-sxm and h200; use "
                "\"roofline\" (memory_efficiency x HBM) or a profiled table"));
        }
      } else {
        std::vector<std::string> candidates = analytic_option_names();
        for (auto k : kPlanKeys) candidates.emplace_back(k);
        ds.push_back(detail::diag_at(file, r.ptr(key), "unknown cost model option '" + key + "'",
                                     detail::did_you_mean(key, candidates)));
      }
    }
  }
  if (!sm_share_given) {
    const double sms = cluster.device.sms > 0 ? cluster.device.sms : kDefaultSms;
    p.comm_sm_share = std::min(1.0, kCommSms / sms);
  }
  if (!ds.empty()) return fail(std::move(ds));
  if (p.sustained_clock_ratio < 0)
    p.sustained_clock_ratio = detail::lower(cluster.device.kind).rfind("a100", 0) == 0
                                  ? kA100SustainedMHz / kA100BoostMHz
                                  : 1.0;
  if (p.host_compute < 0) p.host_compute = detail::iequals(cluster.device.kind, "cpu") ? 1 : 0;
  if (p.nccl_intra_GBps < 0)
    p.nccl_intra_GBps = cluster.intra_node.bandwidth_GBps *
                        (p.nccl.nvlink ? nccl_nvlink_ratio(p.nccl.arch) : 1.0);
  p.nccl.intra_GBps = p.nccl_intra_GBps;
  return p;
}

bool is_gemm_like(OpKind k) {
  switch (k) {
    case OpKind::kQKV:
    case OpKind::kOutProj:
    case OpKind::kMlpUp:
    case OpKind::kMlpDown:
    case OpKind::kRouter:
    case OpKind::kExperts:
    case OpKind::kSharedExperts:
    case OpKind::kHead:
    case OpKind::kSynthetic:
    case OpKind::kAttnScores:
    case OpKind::kAttnContext:
      return true;
    default:
      return false;
  }
}

double gemm_efficiency(const AnalyticParams& p, const DeviceSpec& dev, int64_t rows, int64_t cols,
                       int64_t depth, int64_t batch) {
  if (rows <= 0 || cols <= 0 || depth <= 0) return p.gemm_efficiency;  // no shape known
  const double b = static_cast<double>(std::max<int64_t>(batch, 1));
  const double tm = p.gemm_tile_m, tn = p.gemm_tile_n;
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  const double d = static_cast<double>(depth);
  // Useful work measured in whole tiles (edge tiles are partly empty).
  const double area_tiles = r * c * b / (tm * tn);
  double fill = 1.0, splits = 1.0;
  if (dev.sms > 0) {
    const double sms = dev.sms;
    const double max_splits = std::max(1.0, std::floor(d / p.gemm_split_k_min));
    if (p.wave_quantization) {
      const double tiles = std::ceil(r / tm) * std::ceil(c / tn) * b;
      if (tiles < sms) splits = std::clamp(std::floor(sms / tiles), 1.0, max_splits);
      const double units = tiles * splits;
      const double waves = std::ceil(units / sms);
      fill = area_tiles * splits / (waves * sms);
    } else {
      if (area_tiles < sms)
        splits = std::clamp(sms / area_tiles, 1.0, std::max(1.0, d / p.gemm_split_k_min));
      fill = std::min(1.0, area_tiles * splits / sms);
    }
  }
  const double kd = d / splits;
  const double depth_eff = kd / (kd + p.gemm_k_half);
  return p.gemm_efficiency * fill * depth_eff;
}

double gemm_efficiency(const AnalyticParams& p, const DeviceSpec& dev,
                       const compiler::GemmShape& g) {
  return gemm_efficiency(p, dev, g.m, g.n, g.k, g.batch);
}

namespace {

// A memory-bound op's time at the measured rate of its class and pass under the kernel style
// (AnalyticParams::op_GBps), or nothing when that class has no measured rate (roofline).
std::optional<double> measured_mem_ns(const AnalyticParams& p, const ComputeQuery& q) {
  if (p.kernel_style == KernelStyle::kRoofline) return std::nullopt;
  const bool fwd = q.pass == Pass::kF;
  MemOpClass cls;
  double bytes = static_cast<double>(q.bytes);
  switch (q.kind) {
    case OpKind::kNorm:
      cls = fwd ? MemOpClass::kNormF : MemOpClass::kNormB;
      // A fused norm backward reads x and dY once for dX and the dW partials.
      if (q.pass == Pass::kB && p.kernel_style == KernelStyle::kFused)
        bytes -= static_cast<double>(q.bw_bytes);
      break;
    case OpKind::kMlpAct:
      cls = fwd ? MemOpClass::kActF : MemOpClass::kActB;
      break;
    case OpKind::kLoss:
      cls = fwd ? MemOpClass::kLossF : MemOpClass::kLossB;
      break;
    case OpKind::kEmbedding:
      cls = fwd ? MemOpClass::kEmbeddingF : MemOpClass::kEmbeddingB;
      // The backward is a dense index-add into the vocab x hidden weight gradient.
      if (!fwd) bytes += static_cast<double>(q.param_bytes);
      break;
    default:
      return std::nullopt;
  }
  const double rate = p.op_GBps[static_cast<size_t>(cls)];
  if (rate <= 0 || bytes <= 0) return std::nullopt;
  return bytes / rate;
}

// The work an unfused (kernel_style eager) PyTorch program runs around an op that a fused
// kernel or a fused optimizer does not, in HBM bytes (docs/costmodel.md, "Kernel style"):
//  - split's backward: the gradients of an input the op read as split views of one tensor are
//    gathered with one `cat`, read and written (ComputeQuery::split_grad_bytes; B and BI);
//  - the weight gradient's accumulation into the parameter's .grad (`grad.add_(g)`, autograd's
//    AccumulateGrad: read both, write one, 3 x param_bytes; B and BW), on every microbatch as
//    the replay runs it (gradients zeroed once a step, backend/src/torch_executor.cpp): the
//    measured rates leave it out (m_backward_ns takes each input's accumulation out of M's
//    backwards; S and the GEMM sweep time the kernels alone);
//  - the optimizer step's extra passes over its state (SGD's momentum step is three kernels
//    and Adam's nine as the replay runs them, a fused optimizer's one):
//    ComputeQuery::unfused_step_bytes in place of `bytes`.
// The fused style prices none of them: Transformer Engine's kernels write split gradients in
// place, Megatron-Core accumulates weight gradients in the GEMM (gradient_accumulation_fusion)
// and steps with a fused multi-tensor optimizer (FusedSGD / FusedAdam).
double unfused_extra_bytes(const AnalyticParams& p, const ComputeQuery& q) {
  if (p.kernel_style != KernelStyle::kEager) return 0;
  double b = 0;
  if (q.pass == Pass::kB || q.pass == Pass::kBI)
    b += 2.0 * static_cast<double>(q.split_grad_bytes);
  if (q.pass == Pass::kB || q.pass == Pass::kBW) b += 3.0 * static_cast<double>(q.param_bytes);
  if (q.kind == OpKind::kOptimizer && q.unfused_step_bytes > q.bytes)
    b += static_cast<double>(q.unfused_step_bytes - q.bytes);
  return b;
}

}  // namespace

ComputeCost analytic_compute(const AnalyticParams& p, const DeviceSpec& dev,
                             const ComputeQuery& q) {
  ComputeCost c;
  if (q.flops <= 0 && q.bytes <= 0) return c;  // nothing to do in this pass (e.g. BW, no weights)
  const bool gemm = is_gemm_like(q.kind);
  const bool attention = q.kind == OpKind::kAttention;
  const bool two = q.kind == OpKind::kAttnScores || q.kind == OpKind::kAttnContext
                       ? q.pass == Pass::kB || q.pass == Pass::kBI
                       : q.pass == Pass::kB;
  const int kernels = (gemm && two) ? 2 : 1;  // B = the BI and BW GEMMs
  const double floor_ns = p.launch_floor_us * 1000.0 * kernels;
  const double hbm = dev.hbm_GBps * p.memory_efficiency;  // bytes per ns
  const double t_mem = (q.bytes > 0 && hbm > 0) ? static_cast<double>(q.bytes) / hbm : 0.0;
  // Unfused work around the op (eager only), at the stream rate the model gives memory-bound
  // work without a measured rate: memory_efficiency x HBM (4320 GB/s on an H200, 2 % over the
  // 4237 GB/s the H200 sweep's `add` rows reach).
  const double t_unfused = hbm > 0 ? unfused_extra_bytes(p, q) / hbm : 0.0;

  if (!gemm && !attention) {  // memory-bound: Norm, MlpAct, Loss, Embedding, ...
    c.ns = detail::ceil_ns(
        std::max(floor_ns, measured_mem_ns(p, q).value_or(t_mem) + t_unfused));
    c.mem_bound = true;
    return c;
  }

  const double peak = dev.peak_tflops * 1e3 * dtype_peak_factor(q.dtype) *
                      (p.sustained_clock_ratio > 0 ? p.sustained_clock_ratio : 1.0);  // flops/ns
  double t_comp = 0;
  if (q.flops > 0 && peak > 0) {
    const compiler::GemmShape& g = q.gemm;
    if (attention) {
      double fill = 1.0, eff = p.attention_efficiency;
      if (g.m > 0 && p.attention_seq_half > 0) {
        const double s = static_cast<double>(g.m);
        eff *= s / (s + p.attention_seq_half);
      }
      if (dev.sms > 0 && g.m > 0) {
        const double blocks = std::ceil(g.m / kAttentionBlockRows) * std::max<int64_t>(g.batch, 1);
        fill = std::min(1.0, blocks / dev.sms);
        const double waves = blocks / dev.sms;
        if (p.attention_waves_half > 0) eff *= waves / (waves + p.attention_waves_half);
      }
      if (q.pass != Pass::kF) eff *= p.attention_bwd_ratio;
      t_comp = q.flops / (peak * eff * fill);
    } else if (g.m > 0 && g.n > 0 && g.k > 0) {
      // The GEMMs of each pass, from the forward [m,k]x[k,n]: F -> (m,n | k),
      // BI: dX = dY W^T -> (m,k | n), BW: dW = X^T dY -> (k,n | m).
      const double e_f = gemm_efficiency(p, dev, g.m, g.n, g.k, g.batch);
      const double e_bi = gemm_efficiency(p, dev, g.m, g.k, g.n, g.batch);
      const double e_bw = gemm_efficiency(p, dev, g.k, g.n, g.m, g.batch);
      // Activation-by-activation GEMMs (unfused attention) have no weight gradient: their BI
      // is both input gradients, shaped like the BI and BW GEMMs of a weight GEMM.
      const bool act_gemm = q.kind == OpKind::kAttnScores || q.kind == OpKind::kAttnContext;
      switch (act_gemm && q.pass == Pass::kBI ? Pass::kB : q.pass) {
        case Pass::kBI:
          t_comp = q.flops / (peak * e_bi);
          break;
        case Pass::kBW:
          t_comp = q.flops / (peak * e_bw);
          break;
        case Pass::kB:
          t_comp = 0.5 * q.flops / (peak * e_bi) + 0.5 * q.flops / (peak * e_bw);
          break;
        default:
          t_comp = q.flops / (peak * e_f);
          break;
      }
    } else {
      t_comp = q.flops / (peak * p.gemm_efficiency);
    }
  }
  c.mem_bound = t_mem > t_comp;
  c.ns = detail::ceil_ns(std::max({floor_ns, t_comp, t_mem}) + t_unfused);
  return c;
}

namespace {

struct Link {
  double GBps = 0;
  double latency_us = 0;
};

// The per-device link used to leave the node for this query (DCN between islands).
Link network_link(const ClusterSpec& cl, bool crosses_island) {
  if (crosses_island && cl.dcn.bandwidth_GBps > 0)
    return {cl.dcn.bandwidth_GBps, cl.dcn.latency_us};
  return {cl.inter_node.bandwidth_GBps, cl.inter_node.latency_us};
}

// A usable bandwidth even for a link the cluster leaves at 0 (the factory rejects clusters
// whose used links have no bandwidth; this only keeps rate_cap > 0 for odd queries).
double usable(double GBps, double fallback) {
  if (GBps > 0) return GBps;
  if (fallback > 0) return fallback;
  return 1.0;
}

double p2p_latency_us(const AnalyticParams& p, bool net, const Link& link) {
  if (p.p2p_latency_us >= 0) return p.p2p_latency_us;
  // NCCL has no send/recv model; one ring step with the Simple protocol over the same link
  // class is the closest thing its tables hold.
  return link.latency_us + nccl_hw_latency_us(p.nccl, net, NcclAlgo::kRing, NcclProto::kSimple);
}

CommCost finish(int64_t latency_ns, double wire, double rate, std::string algo, std::string proto,
                bool inter) {
  CommCost c;
  c.latency_ns = latency_ns;
  c.wire_bytes = wire > 0 ? static_cast<int64_t>(std::ceil(wire)) : 0;
  c.rate_cap = c.wire_bytes > 0 ? rate : 0.0;
  c.time_ns = c.latency_ns + transfer_ns(c.wire_bytes, c.rate_cap);
  c.algo = std::move(algo);
  c.proto = std::move(proto);
  c.inter_node = inter;
  return c;
}

int64_t us_to_ns(double us) {
  return static_cast<int64_t>(std::llround(us * 1000.0));
}

}  // namespace

CommCost analytic_comm(const AnalyticParams& p, const ClusterSpec& cl, const CommQuery& q) {
  CommCost none;
  none.algo = "none";
  if (q.kind == CommKind::kNone || q.bytes <= 0) return none;
  const int g = std::max(1, q.group_size);
  const int nodes = std::clamp(q.nodes_spanned, 1, g);
  const Link intra{cl.intra_node.bandwidth_GBps, cl.intra_node.latency_us};
  const Link net = network_link(cl, q.crosses_island);
  const double intra_bw = usable(intra.GBps, net.GBps);
  const double net_bw = usable(net.GBps, intra.GBps);

  switch (q.kind) {
    case CommKind::kSendRecv: {
      const bool inter = nodes > 1 || q.crosses_island;
      const Link& link = inter ? net : intra;
      return finish(us_to_ns(p2p_latency_us(p, inter, link)), static_cast<double>(q.bytes),
                    inter ? net_bw : intra_bw, "p2p", "simple", inter);
    }
    case CommKind::kAllToAll: {
      if (g <= 1) return none;
      const double ppn = static_cast<double>(g) / nodes;
      const double s = static_cast<double>(q.bytes);
      const double intra_bytes = s * (ppn - 1) / g;
      const double net_bytes = s * (g - ppn) / g;
      const bool inter = net_bytes > 0 && net_bytes / net_bw >= intra_bytes / intra_bw;
      const Link& link = inter ? net : intra;
      return finish(us_to_ns(p2p_latency_us(p, inter, link)), inter ? net_bytes : intra_bytes,
                    inter ? net_bw : intra_bw, "p2p", "simple", inter);
    }
    case CommKind::kAllReduce:
    case CommKind::kAllGather:
    case CommKind::kReduceScatter: {
      if (g <= 1) return none;
      NcclSystem sys = p.nccl;
      // NCCL's own view of the intra-node link (nccl_intra_GBps), never above the link.
      sys.intra_GBps = p.nccl_intra_GBps > 0 ? std::min(p.nccl_intra_GBps, intra_bw) : intra_bw;
      sys.inter_GBps = net_bw;
      if (q.crosses_island && cl.dcn.bandwidth_GBps > 0) sys.net_latency_us += net.latency_us;
      const NcclComm comm = nccl_comm(sys, g, nodes);
      const NcclEstimate e = nccl_choose(sys, comm, q.kind, q.bytes, q.dtype);
      if (!e.available) return none;
      // Payload over each device's bottleneck link: the ring/tree bus bytes; when the NICs are
      // the bottleneck, a node's ppn NICs share the channels, so each carries 1/ppn of them.
      double wire = static_cast<double>(q.bytes) / e.ratio;
      double rate = e.bus_bw;
      if (comm.inter_bottleneck) {
        wire /= comm.ppn;
        rate /= comm.ppn;
      }
      return finish(us_to_ns(e.latency_us), wire, rate, std::string(nccl_algo_name(e.algo)),
                    std::string(nccl_proto_name(e.proto)), comm.inter_bottleneck);
    }
    default:
      return none;
  }
}

namespace {

class AnalyticModel final : public CostModel {
 public:
  AnalyticModel(AnalyticParams p, ClusterSpec cluster)
      : params_(std::move(p)), cluster_(std::move(cluster)) {}
  ComputeCost compute(const ComputeQuery& q) const override {
    return analytic_compute(params_, cluster_.device, q);
  }
  CommCost comm(const CommQuery& q) const override { return analytic_comm(params_, cluster_, q); }
  Interference interference() const override {
    return {params_.comm_sm_share, params_.comm_hbm_share, params_.host_cores,
            params_.host_compute > 0, detail::ceil_ns(params_.host_op_us * 1000.0),
            params_.host_cold_factor, params_.host_share_efficiency, params_.host_reuse_factor};
  }
  int64_t dispatch_ns() const override { return detail::ceil_ns(params_.dispatch_us * 1000.0); }
  std::string_view name() const override { return "analytic"; }

 private:
  AnalyticParams params_;
  ClusterSpec cluster_;
};

}  // namespace

namespace detail {

std::unique_ptr<CostModel> make_analytic_model(AnalyticParams p, const ClusterSpec& cluster) {
  return std::make_unique<AnalyticModel>(std::move(p), cluster);
}

}  // namespace detail

}  // namespace stretto::cost
