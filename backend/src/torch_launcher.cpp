// launch_local (fork + exec one process per device, TCP store hosted here), the check of
// gradients and stepped parameters against a single-process reference, and their dump format.
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/types.h>  // before clip_grad.h, which uses torch::Tensor without it
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "device_program.h"
#include "stretto/backend/replay.h"
#include "torch_comm.h"
#include "torch_executor.h"
#include "torch_model.h"

#ifdef STRETTO_BACKEND_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

extern char** environ;

namespace stretto::backend {

using compiler::CompiledPlan;
using plan::Json;

bool has_cuda_build() {
#ifdef STRETTO_BACKEND_CUDA
  return true;
#else
  return false;
#endif
}

bool has_gloo_build() {
#ifdef STRETTO_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef STRETTO_BACKEND_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

bool cuda_available() {
#ifdef STRETTO_BACKEND_CUDA
  return c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

namespace detail {

std::vector<uint8_t> encode_grads(const std::vector<GradDump>& g) {
  Json h = Json::array();
  size_t floats = 0;
  for (const auto& d : g) {
    h.push_back({{"name", d.name},
                 {"full_shape", d.full_shape},
                 {"dim", d.dim},
                 {"ranges", d.ranges},
                 {"owned_begin", d.owned_begin},
                 {"owned_end", d.owned_end},
                 {"n", d.values.size()},
                 {"n_first", d.first_values.size()},
                 {"stepped_begin", d.stepped_begin},
                 {"stepped_end", d.stepped_end},
                 {"n_weights", d.weights.size()}});
    floats += d.values.size() + d.first_values.size() + d.weights.size();
  }
  const std::string hs = h.dump();
  std::vector<uint8_t> out(8 + hs.size() + floats * sizeof(float));
  const uint64_t len = hs.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, hs.data(), hs.size());
  size_t off = 8 + hs.size();
  for (const auto& d : g)
    for (const auto* v : {&d.values, &d.first_values, &d.weights}) {
      std::memcpy(out.data() + off, v->data(), v->size() * sizeof(float));
      off += v->size() * sizeof(float);
    }
  return out;
}

std::vector<GradDump> decode_grads(const std::vector<uint8_t>& b) {
  std::vector<GradDump> out;
  if (b.size() < 8) return out;
  uint64_t len = 0;
  std::memcpy(&len, b.data(), 8);
  if (8 + len > b.size()) return out;
  const Json h = Json::parse(std::string(b.begin() + 8, b.begin() + 8 + static_cast<ptrdiff_t>(len)));
  size_t off = 8 + len;
  for (const auto& e : h) {
    GradDump d;
    d.name = e.at("name").get<std::string>();
    d.full_shape = e.at("full_shape").get<std::vector<int64_t>>();
    d.dim = e.at("dim").get<int>();
    d.ranges = e.at("ranges").get<std::vector<std::pair<int64_t, int64_t>>>();
    d.owned_begin = e.at("owned_begin").get<int64_t>();
    d.owned_end = e.at("owned_end").get<int64_t>();
    d.stepped_begin = e.at("stepped_begin").get<int64_t>();
    d.stepped_end = e.at("stepped_end").get<int64_t>();
    const size_t n = e.at("n").get<size_t>(), nf = e.at("n_first").get<size_t>(),
                 nw = e.at("n_weights").get<size_t>();
    if (off + (n + nf + nw) * sizeof(float) > b.size()) break;
    for (auto [v, k] : {std::pair{&d.values, n}, std::pair{&d.first_values, nf}, std::pair{&d.weights, nw}}) {
      v->resize(k);
      std::memcpy(v->data(), b.data() + off, k * sizeof(float));
      off += k * sizeof(float);
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

// The single-process reference: the plan's global batch (every replica's microbatches) through
// the whole model without any parallelism. Gradients and initial parameters by name.
// The single-process reference's model and parameters (full tensors, fp32).
class Reference {
 public:
  Reference(const CompiledPlan& cp, const ReplayOptions& opt)
      : cp_(cp), model_(cp, opt.seed, at::TensorOptions().dtype(at::kFloat)), params_(cp.model.ops.size()) {
    for (uint32_t o = 0; o < params_.size(); ++o) params_[o] = model_.make_params(o, OpPlacement{});
    // A 16-bit replay (CUDA, bf16/fp16 plan) starts from the fp32 initial values rounded to its
    // dtype, and so does its fp32 master: the reference starts from the same rounded values, or
    // their rounding (2^-9 of |w| for bf16) would dwarf an optimizer step's update in the
    // parameters' comparison.
    if (opt.device == DeviceKind::kCuda && cp.model.dtype != plan::DType::kFP32) {
      const at::ScalarType low = cp.model.dtype == plan::DType::kBF16 ? at::kBFloat16 : at::kHalf;
      at::NoGradGuard ng;
      for (auto& ps : params_)
        for (auto& p : ps) p.value.copy_(p.value.to(low).to(at::kFloat));
    }
  }

  // The parameters' current values, by name.
  std::map<std::string, at::Tensor> values() const {
    std::map<std::string, at::Tensor> out;
    for (const auto& ps : params_)
      for (const auto& p : ps) out[p.slice.name] = p.value.detach().clone();
    return out;
  }
  void set_values(const std::map<std::string, at::Tensor>& v) {
    at::NoGradGuard ng;
    for (auto& ps : params_)
      for (auto& p : ps) p.value.copy_(v.at(p.slice.name));
  }

  // The global batch (every data replica's microbatches) forward and backward at the current
  // values: the summed loss, and every parameter's gradient.
  double gradients(std::map<std::string, at::Tensor>& grad) {
    const auto& ops = cp_.model.ops;
    for (auto& ps : params_)
      for (auto& p : ps) p.value.mutable_grad() = at::Tensor();
    int R = 1;
    for (const compiler::Node& n : cp_.dag.nodes)
      if (n.kind == compiler::NodeKind::kCompute && n.tags.pass == plan::Pass::kF &&
          model_.is_last(n.op)) {
        R = static_cast<int>(cp_.dag.device_sets[n.devs].devices.size()) / std::max<int>(1, n.tp);
        break;
      }
    // Context parallelism: cp replicas share one data replica's sequences (each rank holds two
    // of its 2·cp chunks); the reference runs each whole sequence once, on the full-sequence
    // model (ordinary causal attention, no ring).
    R /= context_parallel(cp_);
    const int M = std::max(1, cp_.num_microbatches);
    const double scale = 1.0 / (static_cast<double>(R) * M);
    double total = 0;
    for (int r = 0; r < R; ++r)
      for (int mb = 0; mb < M; ++mb) {
        std::vector<at::Tensor> val(ops.size());
        at::Tensor loss;
        for (uint32_t o = 0; o < ops.size(); ++o) {
          if (ops[o].kind == compiler::OpKind::kOptimizer) continue;  // the step, not a model op
          std::vector<at::Tensor> in;
          for (uint32_t p : ops[o].inputs) in.push_back(val[p]);
          OpCtx c = model_.forward(o, in, params_[o], OpPlacement{}, r, mb, scale, {});
          // The experts' [S, T, h] summed over sources.
          const bool per_source = ops[o].kind == compiler::OpKind::kExperts && c.out.dim() == 3;
          at::Tensor v = per_source ? c.out.sum(0) : c.out;
          if (model_.residual_source(o) != compiler::kNone) v = v + val[model_.residual_source(o)];
          val[o] = v;
          if (model_.is_last(o)) loss = v;
        }
        total += loss.item<double>();
        torch::autograd::backward({loss});
      }
    grad.clear();
    for (const auto& ps : params_)
      for (const auto& p : ps) {
        const at::Tensor g = p.value.grad();
        grad[p.slice.name] = g.defined() ? g.detach().clone() : at::zeros_like(p.value).detach();
      }
    return total;
  }

 private:
  const CompiledPlan& cp_;
  TorchModel model_;
  std::vector<std::vector<Param>> params_;
};

// LibTorch's own optimizer on full tensors, its state kept from step to step: clip_grad_norm_
// (the plan's `grad_clip`), then torch::optim (SGD with momentum kSgdMomentum, no dampening or
// Nesterov; Adam with PyTorch's betas 0.9, 0.999 and eps 1e-8; no weight decay), the step the
// replay takes (the plan's `optimizer`, else --optimizer).
class LibTorchStep {
 public:
  LibTorchStep(const CompiledPlan& cp, const ReplayOptions& opt,
               const std::map<std::string, at::Tensor>& params)
      : clip_(clips_gradients(cp)) {
    for (const auto& [name, p] : params) {
      at::Tensor w = p.clone().set_requires_grad(true);
      leaves_[name] = w;
      list_.push_back(w);
    }
    switch (step_optimizer(cp, opt)) {
      case Optimizer::kSgd:
        optim_ = std::make_unique<torch::optim::SGD>(
            list_, torch::optim::SGDOptions(opt.lr).momentum(kSgdMomentum));
        break;
      case Optimizer::kAdam:
        optim_ = std::make_unique<torch::optim::Adam>(list_, torch::optim::AdamOptions(opt.lr));
        break;
      case Optimizer::kNone:
        break;
    }
  }

  // One step with these gradients: the parameters after it.
  std::map<std::string, at::Tensor> step(const std::map<std::string, at::Tensor>& grads) {
    for (auto& [name, w] : leaves_) w.mutable_grad() = grads.at(name).clone();
    if (clip_) torch::nn::utils::clip_grad_norm_(list_, kMaxGradNorm);
    if (optim_) optim_->step();
    std::map<std::string, at::Tensor> out;
    for (const auto& [name, w] : leaves_) out[name] = w.detach().clone();
    return out;
  }

 private:
  bool clip_;
  std::map<std::string, at::Tensor> leaves_;
  std::vector<at::Tensor> list_;
  std::unique_ptr<torch::optim::Optimizer> optim_;
};

// The elements of the reference tensor that the flat range [begin, end) of a rank's local
// tensor holds (`d` names the TP slice), as flat indices.
// The part of a full tensor a rank's local tensor holds: its ranges of dimension d.dim,
// concatenated (the whole tensor when d.dim < 0).
at::Tensor local_part(const GradDump& d, const at::Tensor& full) {
  if (d.dim < 0) return full;
  std::vector<at::Tensor> parts;
  for (const auto& [start, length] : d.ranges) parts.push_back(full.narrow(d.dim, start, length));
  return at::cat(parts, d.dim);
}

at::Tensor flat_indices(const GradDump& d, const at::Tensor& ref, int64_t begin, int64_t end) {
  const at::Tensor idx = local_part(d, at::arange(ref.numel(), at::kLong).view(ref.sizes()));
  return idx.contiguous().view({-1}).narrow(0, begin, end - begin);
}

// Which elements of every reference parameter some rank's values were compared with.
class Coverage {
 public:
  explicit Coverage(const std::map<std::string, at::Tensor>& ref) {
    for (const auto& [name, t] : ref) seen_[name] = at::zeros({t.numel()}, at::kBool);
  }
  void mark(const std::string& name, const at::Tensor& flat_idx) {
    seen_.at(name).index_fill_(0, flat_idx, true);
  }
  // "name: k of n elements" for every parameter not fully compared.
  void report(const char* what, std::vector<std::string>& out) const {
    for (const auto& [name, s] : seen_) {
      const int64_t missed = s.numel() - s.sum().item<int64_t>();
      if (missed > 0)
        out.push_back(fmt::format("{}: {} of its {} {} were compared on no device", name, missed,
                                  s.numel(), what));
    }
  }

 private:
  std::map<std::string, at::Tensor> seen_;
};

// One rank's values of a parameter (its local tensor, flattened) over [begin, end), against
// the same elements of the reference, relative to the reference's largest |x - base| there
// (`base` zero for gradients; the initial parameters for stepped ones: relative to the update),
// after `ulps` x |x| of float rounding. A rank's tensor that matches no parameter or slice of
// the reference is refused (a line in `unmatched`), not skipped: a skipped parameter would
// pass unchecked.
std::optional<GradCheck> compare(const GradDump& d, size_t rank, const char* what,
                                 const std::vector<float>& values, int64_t begin, int64_t end,
                                 at::Tensor ref, at::Tensor base, double floor, double ulps,
                                 std::vector<std::string>& unmatched) {
  const int64_t full = d.dim >= 0 && d.dim < ref.dim() ? ref.size(d.dim) : 0;
  for (const auto& [start, length] : d.ranges)
    if (d.dim >= ref.dim() || (d.dim >= 0 && (start < 0 || length < 0 || start + length > full))) {
      unmatched.push_back(fmt::format(
          "{} on device {}: slice [{}, +{}) of dimension {} is outside the reference's shape",
          d.name, rank, start, length, d.dim));
      return std::nullopt;
    }
  if (d.dim >= 0 && d.ranges.empty()) {
    unmatched.push_back(fmt::format("{} on device {}: a slice of dimension {} without a range",
                                    d.name, rank, d.dim));
    return std::nullopt;
  }
  ref = local_part(d, ref);
  base = local_part(d, base);
  ref = ref.contiguous().view({-1});
  base = base.contiguous().view({-1});
  if (static_cast<int64_t>(values.size()) != ref.numel() || begin < 0 || end > ref.numel() ||
      begin > end) {
    unmatched.push_back(fmt::format("{} on device {}: {} {} (range [{}, {})), the reference's slice has {}",
                                    d.name, rank, values.size(), what, begin, end, ref.numel()));
    return std::nullopt;
  }
  const at::Tensor mine =
      at::from_blob(const_cast<float*>(values.data()), {static_cast<int64_t>(values.size())},
                    at::TensorOptions().dtype(at::kFloat))
          .narrow(0, begin, end - begin);
  const at::Tensor b = base.narrow(0, begin, end - begin);
  const at::Tensor refp = ref.narrow(0, begin, end - begin);
  GradCheck gc;
  gc.param = d.name;
  gc.device = static_cast<int>(rank);
  gc.elements = end - begin;
  if (gc.elements == 0) return gc;
  // Both runs round their result to float: up to one unit in the last place of |x| apart
  // without any error (a parameter's update is small against the parameter it is added to).
  const at::Tensor diff = ((mine - refp).abs() - ulps * refp.abs()).clamp_min(0);
  gc.max_abs_diff = diff.max().item<double>();
  const double scale_ref = std::max((refp - b).abs().max().item<double>(), floor);
  gc.max_rel_diff = scale_ref > 0 ? gc.max_abs_diff / scale_ref : gc.max_abs_diff;
  return gc;
}

}  // namespace

CheckReport check_against_reference(const CompiledPlan& cp, const ReplayOptions& opt,
                                    const std::vector<std::vector<GradDump>>& ranks,
                                    double replayed_loss) {
  CheckReport rep;
  rep.loss = replayed_loss;
  // The reference runs the check's steps: each step's gradients at its current parameters,
  // compared with the replay's; then LibTorch's optimizer steps it with the gradients the
  // replay reduced (Adam divides by |g|, so a gradient that is float noise in both runs would
  // give the reference an update of unrelated sign). The parameters after the last step are
  // compared with the replay's, relative to that step's update: after two steps SGD's momentum
  // and Adam's moments and bias correction are in it.
  Reference ref(cp, opt);
  const std::map<std::string, at::Tensor> initial = ref.values();
  LibTorchStep optim(cp, opt, initial);
  std::map<std::string, at::Tensor> before = initial, after = initial, ref_grad;
  rep.optimizer = std::array{"sgd", "adam", "none"}[static_cast<int>(step_optimizer(cp, opt))];
  rep.grad_clip = clips_gradients(cp);
  // fp32 everywhere (CPU, or fp32 plans on GPU): agreement to float rounding. bf16/fp16 on
  // GPU: to that precision.
  // A gradient that is zero analytically (a key bias: softmax ignores a per-query constant) is
  // float rounding noise in both runs: relative differences are taken against at least 1e-3 of
  // the model's largest gradient (largest update, for parameters), not against that noise.
  const bool low_precision =
      opt.device == DeviceKind::kCuda && cp.model.dtype != plan::DType::kFP32;
  rep.tolerance = low_precision ? 5e-2 : 1e-4;
  auto record = [](GradCheck&& gc, std::vector<GradCheck>& list, double& max_rel, double& max_abs,
                   std::string& worst, int step) {
    if (gc.elements == 0) return;
    if (gc.max_rel_diff >= max_rel) {
      max_rel = gc.max_rel_diff;
      worst = fmt::format("{} on device {} (step {})", gc.param, gc.device, step);
    }
    max_abs = std::max(max_abs, gc.max_abs_diff);
    list.push_back(std::move(gc));
  };
  Coverage grads_seen(initial), weights_seen(initial);
  for (int step = 1; step <= kCheckSteps; ++step) {
    const double loss = ref.gradients(ref_grad);
    if (step == 1) rep.reference_loss = loss;  // the replay reports its first step's loss
    double grad_floor = 0;
    for (const auto& [name, g] : ref_grad) grad_floor = std::max(grad_floor, 1e-3 * g.abs().max().item<double>());
    // Gradients, and the replayed gradient assembled from every rank's owned part.
    std::map<std::string, at::Tensor> replayed;
    for (const auto& [name, g] : ref_grad) replayed[name] = at::zeros_like(g);
    std::vector<std::string> again;  // the second step's mismatches repeat the first's
    for (size_t rank = 0; rank < ranks.size(); ++rank)
      for (const auto& d : ranks[rank]) {
        auto it = ref_grad.find(d.name);
        if (it == ref_grad.end()) {
          if (step == 1)
            rep.unmatched.push_back(fmt::format(
                "{} on device {}: no parameter of that name in the reference", d.name, rank));
          continue;
        }
        const std::vector<float>& values = step == kCheckSteps ? d.values : d.first_values;
        auto g = compare(d, rank, "gradient values", values, d.owned_begin, d.owned_end,
                         it->second, at::zeros_like(it->second), grad_floor, 0,
                         step == 1 ? rep.unmatched : again);
        if (!g) continue;
        const at::Tensor idx = flat_indices(d, it->second, d.owned_begin, d.owned_end);
        grads_seen.mark(d.name, idx);
        replayed.at(d.name).view({-1}).index_put_(
            {idx}, at::tensor(at::ArrayRef<float>(values)).narrow(0, d.owned_begin,
                                                                  d.owned_end - d.owned_begin));
        record(std::move(*g), rep.params, rep.max_rel_diff, rep.max_abs_diff, rep.worst_param, step);
      }
    if (step == 1) {
      grads_seen.report("gradient elements", rep.unmatched);
      rep.max_rel_diff_first_step = rep.max_rel_diff;
    }
    // Only when every gradient element was returned.
    if (!rep.unmatched.empty()) break;
    before = after;
    after = optim.step(replayed);
    ref.set_values(after);
  }
  // Parameters after the last step, against the reference's.
  if (rep.unmatched.empty()) {
    double step_floor = 0;
    for (const auto& [name, w] : after)
      step_floor = std::max(step_floor, 1e-3 * (w - before.at(name)).abs().max().item<double>());
    constexpr double kFloatUlp = 1.0 / (1 << 23);
    for (size_t rank = 0; rank < ranks.size(); ++rank)
      for (const auto& d : ranks[rank]) {
        auto w = compare(d, rank, "parameter values", d.weights, d.stepped_begin, d.stepped_end,
                         after.at(d.name), before.at(d.name), step_floor, kFloatUlp,
                         rep.unmatched);
        if (!w) continue;
        weights_seen.mark(d.name, flat_indices(d, initial.at(d.name), d.stepped_begin, d.stepped_end));
        record(std::move(*w), rep.weights, rep.max_rel_diff_weights, rep.max_abs_diff_weights,
               rep.worst_weight, kCheckSteps);
      }
    weights_seen.report("stepped parameter elements", rep.unmatched);
  }
  rep.passed = !rep.params.empty() && !rep.weights.empty() && rep.unmatched.empty() &&
               rep.max_rel_diff <= rep.tolerance && rep.max_rel_diff_weights <= rep.tolerance &&
               std::abs(rep.loss - rep.reference_loss) <=
                   rep.tolerance * std::max(1.0, std::abs(rep.reference_loss));
  return rep;
}

}  // namespace detail

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int sig) {
  g_interrupted = sig;
}

std::string read_status(const std::string& dir, int rank) {
  std::ifstream f(fmt::format("{}/rank{}", dir, rank), std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  s = s.substr(0, s.find('\0'));
  return s.empty() ? "starting up" : s;
}

void remove_dir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      ::unlink((dir + "/" + e->d_name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

Expected<ReplayResult> launch_local(const CompiledPlan& cp, const ReplayOptions& opt_in,
                                    const LaunchOptions& launch) {
  const auto t_start = std::chrono::steady_clock::now();
  ReplayOptions opt = opt_in;
  if (opt.check) {
    opt.iterations = detail::kCheckSteps;
    opt.warmup = 0;
  }
  if (opt.device == DeviceKind::kAuto) opt.device = cuda_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (auto d = check_supported(cp, opt); !d.empty()) return fail(std::move(d));
  auto failure = [&](std::string msg, std::string hint = "") {
    Diagnostic d;
    d.message = std::move(msg);
    d.hint = std::move(hint);
    d.loc.file = cp.plan.file;
    return fail(std::move(d));
  };
  const int N = cp.num_devices;
  // The rendezvous store lives here: an OS-chosen port on loopback, no file anywhere.
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = std::chrono::milliseconds(opt.timeout_ms);
    store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so);
  } catch (const std::exception& e) {
    return failure(fmt::format("cannot start the rendezvous store: {}", e.what()));
  }
  const int port = store->getPort();
  std::string tmpl = launch.tmp_dir + "/stretto-replay-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return failure(fmt::format("cannot create a temporary directory in {} for the ranks' status",
                               launch.tmp_dir));
  const std::string dir = tmpl;
  // argv and envp are built before fork: the child only calls exec.
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    if (s.rfind("STRETTO_REPLAY_", 0) == 0) continue;
    env_s.push_back(std::move(s));
  }
  env_s.push_back("STRETTO_REPLAY_STATUS_DIR=" + dir);
  env_s.push_back("STRETTO_REPLAY_STORE_EXTERNAL=1");
  const std::string threads = std::to_string(std::max(1, opt.threads));
  if (!std::getenv("OPENBLAS_NUM_THREADS")) env_s.push_back("OPENBLAS_NUM_THREADS=" + threads);
  if (!std::getenv("OMP_NUM_THREADS")) env_s.push_back("OMP_NUM_THREADS=" + threads);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::vector<std::string>> argv_s(N);
  std::vector<std::vector<char*>> argv(N);
  for (int r = 0; r < N; ++r) {
    argv_s[r].push_back(launch.exe);
    for (const auto& a : launch.args) argv_s[r].push_back(a);
    for (std::string a : {std::string("--rank"), std::to_string(r), std::string("--world-size"),
                          std::to_string(N), std::string("--master"),
                          fmt::format("{}:{}", launch.master_addr, port)})
      argv_s[r].push_back(a);
    for (auto& s : argv_s[r]) argv[r].push_back(s.data());
    argv[r].push_back(nullptr);
  }
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  g_interrupted = 0;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(N, -1);
  std::vector<int> status(N, 0);
  std::vector<char> alive(N, 0);
  int started = 0;
  for (int r = 0; r < N; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::execve(argv[r][0], argv[r].data(), envp.data());
      ::_exit(127);
    }
    if (pid < 0) break;
    pids[r] = pid;
    alive[r] = 1;
    ++started;
  }
  if (!launch.quiet)
    std::fprintf(stderr, "replay: %d processes on %s:%d (status in %s)\n", started,
                 launch.master_addr.c_str(), port, dir.c_str());
  // Watch the group: the first failure gives the others a grace period to fail on their own
  // (they name the op they were in), then everyone left is killed.
  int first_failed = -1;
  std::string first_status;
  std::vector<std::string> notes;
  auto kill_all = [&](int sig) {
    for (int r = 0; r < N; ++r)
      if (alive[r]) ::kill(pids[r], sig);
  };
  const auto grace = std::chrono::milliseconds(std::min<int64_t>(opt.timeout_ms, 3000));
  auto deadline = std::chrono::steady_clock::time_point::max();
  auto last_progress = std::chrono::steady_clock::now();
  std::vector<std::string> last_status(N);
  bool killed = false, interrupted = false, stalled = false;
  int remaining = started;
  if (started < N) {
    first_failed = started;
    first_status = "could not be started (fork failed)";
    deadline = std::chrono::steady_clock::now();
  }
  int poll = 0;
  while (remaining > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < N; ++r)
        if (pids[r] == pid && alive[r]) {
          alive[r] = 0;
          status[r] = st;
          --remaining;
          const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
          if (!ok && first_failed < 0 && !killed) {
            first_failed = r;
            first_status = fmt::format("rank {} {} (last op: {})", r, describe_status(st),
                                       read_status(dir, r));
            deadline = std::chrono::steady_clock::now() + grace;
          } else if (!ok && !killed) {
            notes.push_back(fmt::format("rank {} {} (last op: {})", r, describe_status(st),
                                        read_status(dir, r)));
          }
        }
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (g_interrupted && !interrupted) {
      interrupted = true;
      kill_all(SIGTERM);
      deadline = now + std::chrono::seconds(2);
    }
    if (now >= deadline && !killed) {
      for (int r = 0; r < N; ++r)
        if (alive[r])
          notes.push_back(fmt::format("rank {} was stopped by the launcher (last op: {})", r,
                                      read_status(dir, r)));
      // How long the group ran on without progress before it was stopped (a rank's --timeout,
      // then the grace period), as polled here: what a stuck run costs.
      if (!interrupted)
        notes.push_back(fmt::format(
            "the group was stopped {:.2f} s after a rank last made progress (--timeout {:.0f} s, "
            "then {:.0f} s of grace)",
            std::chrono::duration<double>(now - last_progress).count(), opt.timeout_ms / 1000.0,
            grace.count() / 1000.0));
      killed = true;
      kill_all(SIGKILL);
    }
    // No rank changed its status line for longer than the timeout: the group is stuck.
    if (++poll % 10 == 0 && first_failed < 0 && !interrupted) {
      bool changed = false;
      for (int r = 0; r < N; ++r) {
        std::string s = read_status(dir, r);
        if (s != last_status[r]) changed = true, last_status[r] = std::move(s);
      }
      if (changed) last_progress = now;
      if (now - last_progress > std::chrono::milliseconds(opt.timeout_ms) + std::chrono::seconds(5)) {
        stalled = true;
        first_failed = 0;
        first_status = fmt::format("no rank made progress for {} s", opt.timeout_ms / 1000 + 5);
        deadline = now;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  // Results (before the status files go: nothing is read from them afterwards).
  std::vector<RankResult> results;
  std::vector<std::vector<detail::GradDump>> grads;
  std::string err;
  if (first_failed < 0 && !interrupted) {
    try {
      for (int r = 0; r < N; ++r) {
        auto b = detail::store_take(*store, fmt::format("stretto/result/{}", r));
        auto parsed = rank_result_from_json(Json::parse(std::string(b.begin(), b.end())));
        if (!parsed) {
          err = parsed.error().front().message;
          break;
        }
        results.push_back(std::move(*parsed));
        if (opt.check) grads.push_back(detail::decode_grads(detail::store_take(*store, fmt::format("stretto/grads/{}", r))));
      }
    } catch (const std::exception& e) {
      err = fmt::format("collecting the ranks' results failed: {}", e.what());
    }
  }
  remove_dir(dir);
  if (interrupted) return failure("replay interrupted: every rank was stopped");
  if (first_failed >= 0) {
    Diagnostic d;
    d.message = fmt::format("replay failed: {}", first_status);
    for (const auto& n : notes) d.notes.push_back({SourceLoc{}, n});
    d.hint = stalled ? "a rank is stuck; raise --timeout if an op legitimately takes longer"
                     : "the rank's own message above names the op it failed in";
    d.loc.file = cp.plan.file;
    return fail(std::move(d));
  }
  if (!err.empty()) return failure(err);
  ReplayResult out = merge_results(cp, opt, std::move(results));
  if (opt.check) out.check = detail::check_against_reference(cp, opt, grads, out.loss);
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  return out;
}

}  // namespace stretto::backend
