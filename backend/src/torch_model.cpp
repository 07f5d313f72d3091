// The plan's model in LibTorch (see torch_model.h).
#include "torch_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "device_program.h"

// The LibTorch versions that have each fused kernel (torch_kernels()).
#define STRETTO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
#define STRETTO_TORCH_HAS_RMS_NORM STRETTO_TORCH_AT_LEAST(2, 4)
#define STRETTO_TORCH_HAS_SDPA STRETTO_TORCH_AT_LEAST(2, 0)
#define STRETTO_TORCH_HAS_SDPA_GQA STRETTO_TORCH_AT_LEAST(2, 5)

namespace stretto::backend::detail {

namespace {
constexpr bool kHasRmsNorm = STRETTO_TORCH_HAS_RMS_NORM;
constexpr bool kHasSdpa = STRETTO_TORCH_HAS_SDPA;
constexpr bool kHasSdpaGqa = STRETTO_TORCH_HAS_SDPA_GQA;
}  // namespace

TorchKernels torch_kernels() { return {kHasRmsNorm, kHasSdpa, kHasSdpaGqa}; }

using compiler::ModelOp;
using compiler::OpKind;
using plan::ModelSpec;

namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool same_tensor(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
}

}  // namespace

at::Tensor repeat_kv_heads(const at::Tensor& t, int64_t rep) {
  if (rep == 1) return t;
  const auto sz = t.sizes();
  return t.unsqueeze(2)
      .expand({sz[0], sz[1], rep, sz[2], sz[3]})
      .reshape({sz[0], sz[1] * rep, sz[2], sz[3]});
}

int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t experts, double factor) {
  if (factor <= 0) return 0;
  const double c = std::ceil(static_cast<double>(tokens * top_k) / static_cast<double>(experts) * factor);
  return std::clamp<int64_t>(static_cast<int64_t>(c), 1, tokens);
}

namespace {

// With a capacity: each (expert, source) list holds C of the source's routed tokens, padded to
// C. A token's place in its list is its rank among the source's tokens routed to that expert:
// under the position policy the running count in token order (a cumulative sum on the
// device), under the probs policy the rank by descending gate (a stable sort on the device, so
// equal gates keep token order; unrouted tokens have gate 0 and rank after every routed one).
// Tokens placed below C are kept and scattered to their slots of a [experts, sources, C]
// buffer, dropped ones to one spare slot past its end. Every size follows from the plan: no
// host read, the same operators in every step (CUDA graphs capture it).
ExpertTokens route_to_capacity(const at::Tensor& gates, int64_t S, int64_t C,
                               plan::MoeSpec::DropPolicy policy) {
  const int64_t N = gates.size(0), L = gates.size(1), T = N / S;
  const auto lng = at::TensorOptions().dtype(at::kLong).device(gates.device());
  const at::Tensor g = gates.detach().reshape({S, T, L});
  const at::Tensor r = g.gt(0);
  at::Tensor place;
  if (policy == plan::MoeSpec::DropPolicy::kPosition) {
    place = r.to(at::kLong).cumsum(1).sub_(1);  // [S, T, L]
  } else {
    const at::Tensor order = std::get<1>(at::sort(g, /*stable=*/true, /*dim=*/1, /*descending=*/true));
    place = at::empty_like(order).scatter_(1, order, at::arange(T, lng).view({1, T, 1}).expand({S, T, L}));
  }
  const at::Tensor keep = r.logical_and(place.lt(C));
  const at::Tensor list = at::arange(L, lng).mul_(S).view({1, 1, L}) + at::arange(S, lng).view({S, 1, 1});
  const at::Tensor slot = (list.mul(C) + place).masked_fill_(keep.logical_not(), L * S * C);
  const at::Tensor token = (at::arange(S, lng).mul_(T).view({S, 1, 1}) + at::arange(T, lng).view({1, T, 1}))
                               .expand({S, T, L});
  ExpertTokens e;
  // Padding names token N (one past the last); kept tokens overwrite their slots.
  const at::Tensor buf = at::full({L * S * C + 1}, N, lng).scatter_(0, slot.reshape({-1}), token.reshape({-1}));
  const at::Tensor listed = buf.narrow(0, 0, L * S * C).reshape({L, S * C});
  e.valid = listed.lt(N);
  e.tokens = listed.masked_fill(e.valid.logical_not(), 0);
  return e;
}

}  // namespace

ExpertTokens route_tokens(const at::Tensor& gates, int64_t sources, int64_t capacity,
                          plan::MoeSpec::DropPolicy policy) {
  if (capacity > 0) return route_to_capacity(gates, sources, capacity, policy);
  // Token t goes to local expert e where its gate is positive (the router's top-k). One sort
  // of the keys e * N + t (routed) and E * N (not) on the device lists every expert's tokens
  // in ascending order, expert after expert: the lists the per-expert nonzero() gave, without
  // a host synchronisation per expert.
  const at::Tensor routed = gates.detach().gt(0).t();  // [E, N]
  const int64_t E = routed.size(0), N = routed.size(1);
  const auto lng = at::TensorOptions().dtype(at::kLong).device(gates.device());
  const at::Tensor keys = at::arange(E, lng).mul_(N).unsqueeze(1) + at::arange(N, lng).unsqueeze(0);
  const at::Tensor sorted = std::get<0>(at::sort(keys.masked_fill(routed.logical_not(), E * N).reshape({-1})));
  ExpertTokens r;
  r.tokens = sorted.remainder(N);
  at::Tensor counts = routed.sum(1);
  {
    // The experts' GEMM sizes: the one device-to-host read of the op (Megatron's dropless
    // MoE reads its tokens_per_expert the same way), named for profilers and tests.
    RECORD_USER_SCOPE("stretto::moe_token_counts_to_host");
    counts = counts.to(at::kCPU);
  }
  r.counts.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + E);
  return r;
}

at::Tensor dropout_keep(const at::Tensor& index, uint64_t key, double p) {
  // Park-Miller's multiplier (48271) and the other minimal-standard one (69621) modulo the
  // Mersenne prime 2^31 - 1, with xor-shifts between them to break the congruential structure
  // between neighbouring indices. Every intermediate value is below 2^49: exact in int64 on
  // every device. Indices are folded to 31 bits (a period of 2^31 elements).
  constexpr int64_t kP = 2147483647;
  const int64_t s1 = static_cast<int64_t>(key % kP), s2 = static_cast<int64_t>((key >> 31) % kP);
  at::Tensor x = index.bitwise_and(kP);
  x.add_(s1).remainder_(kP).mul_(48271).remainder_(kP);
  x.bitwise_xor_(x.bitwise_right_shift(15));
  x.add_(s2).mul_(69621).remainder_(kP);
  x.bitwise_xor_(x.bitwise_right_shift(13));
  x.mul_(48271).remainder_(kP);
  return x.ge(static_cast<int64_t>(std::llround(p * static_cast<double>(kP))));
}

int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
}

TorchModel::TorchModel(const compiler::CompiledPlan& cp, uint64_t seed, at::TensorOptions opts,
                       ModelKernels kernels, int context_parallel)
    : cp_(cp), seed_(seed), opts_(opts), kernels_(kernels), ctx_par_(std::max(1, context_parallel)) {
  const auto& ops = cp.model.ops;
  const ModelSpec& m = cp.plan.model;
  residual_.assign(ops.size(), compiler::kNone);
  consumers_.assign(ops.size(), 0);
  for (uint32_t o = 0; o < ops.size(); ++o) {
    for (uint32_t i : ops[o].inputs) ++consumers_[i];
    if (ops[o].kind == OpKind::kOptimizer) consumers_[o] = -1;  // not a model op: never "last"
  }
  if (m.family == ModelSpec::Family::kSynthetic) {
    const int dt = plan::dtype_bytes(cp.model.dtype);
    const double P = std::max<double>(1, static_cast<double>(m.param_bytes) / dt);
    const double F = std::max<double>(1, m.flops);
    const double B = std::max<double>(1, static_cast<double>(m.boundary_bytes) / dt);
    rows_ = std::clamp<int64_t>(std::llround(F / (2 * P)), 1, 1 << 16);
    width_ = std::clamp<int64_t>(std::llround(B / static_cast<double>(rows_)), 1, 4096);
    gemms_ = std::clamp<int64_t>(
        std::llround(P / static_cast<double>(width_ * width_)), 1, 64);
    return;
  }
  // A CP rank's ops run on its s/cp tokens of each sequence (the compiler checked that 2·cp
  // divides seq_len).
  s_ = m.seq_len / ctx_par_;
  T_ = static_cast<int64_t>(m.microbatch_size) * s_;
  h_ = m.hidden;
  heads_ = m.heads;
  kv_ = m.kv_heads > 0 ? m.kv_heads : m.heads;
  d_ = h_ / heads_;
  f_ = m.ffn_hidden;
  V_ = m.vocab;
  if (m.moe) {
    E_ = m.moe->experts;
    k_ = m.moe->top_k;
    ef_ = m.moe->expert_ffn_hidden;
  }
  // The residual stream is explicit: every sub-block ends in an OpKind::kResidual op (the
  // bias-dropout-add), so no op adds a residual behind the compiler's back.

  // The causal mask, once per model (not per op and microbatch): unfused attention's scores
  // op needs it, and so does the reference path of fused attention.
  bool mask = false;
  for (const ModelOp& op : ops)
    mask = mask || op.kind == OpKind::kAttnScores ||
           (op.kind == OpKind::kAttention && (kernels_ == ModelKernels::kReference || !kHasSdpa));
  if (mask)
    causal_mask_ = at::ones({m.seq_len, m.seq_len},
                            at::TensorOptions().dtype(at::kBool).device(opts_.device()))
                       .triu(1);
}

at::Tensor TorchModel::full_weight(const std::string& name, std::vector<int64_t> shape,
                                   int64_t fan_in, bool ones) const {
  auto gen = at::detail::createCPUGenerator(fnv1a(name, seed_ * 0x9E3779B97F4A7C15ull + 1));
  at::Tensor w = at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
  if (ones)
    w = w.mul_(0.1).add_(1.0);
  else
    w = w.mul_(1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, fan_in))));
  return w;
}

std::vector<Param> TorchModel::make_params(uint32_t o, const OpPlacement& pl) const {
  const ModelOp& op = cp_.model.ops[o];
  const bool gated = cp_.plan.model.gated_mlp;
  const bool bias = cp_.plan.model.bias;
  std::vector<Param> out;
  auto finish = [&](Param p, const at::Tensor& local) {
    p.value = local.contiguous().to(opts_).detach().clone();
    p.value.set_requires_grad(true);
    p.grad = at::zeros_like(p.value).detach();
    out.push_back(std::move(p));
  };
  auto add = [&](const std::string& suffix, std::vector<int64_t> shape, int64_t fan_in, int dim,
                 int64_t parts, int64_t part, bool ones = false) {
    Param p;
    p.slice.name = op.name + "." + suffix;
    p.slice.full_shape = shape;
    at::Tensor full = full_weight(p.slice.name, shape, fan_in, ones);
    if (dim >= 0 && parts > 1) {
      const int64_t len = shape[dim] / parts;
      p.slice.dim = dim;
      p.slice.ranges = {{part * len, len}};
      full = full.narrow(dim, part * len, len);
    }
    finish(std::move(p), full);
  };
  // One weight stored fused along dim 0, as Megatron-Core stores linear_qkv and a SwiGLU's
  // linear_fc1, so that its forward is one GEMM: the concatenation of `parts` (each
  // initialised under its own name, so the values are those separate weights had). Under TP
  // every part is sharded on its own (rank r holds its rows of Q, K and V, or of gate and up,
  // in that order), not the concatenation.
  auto add_fused = [&](const std::string& suffix,
                       const std::vector<std::pair<std::string, int64_t>>& parts,
                       const std::vector<int64_t>& tail, int64_t fan_in, int64_t tp_parts,
                       int64_t part) {
    Param p;
    p.slice.name = op.name + "." + suffix;
    int64_t rows = 0;
    std::vector<at::Tensor> local;
    for (const auto& [init, n] : parts) {
      std::vector<int64_t> shape{n};
      shape.insert(shape.end(), tail.begin(), tail.end());
      at::Tensor w = full_weight(op.name + "." + init, shape, fan_in);
      if (tp_parts > 1) {
        const int64_t len = n / tp_parts;
        p.slice.dim = 0;
        p.slice.ranges.emplace_back(rows + part * len, len);
        w = w.narrow(0, part * len, len);
      }
      local.push_back(w);
      rows += n;
    }
    p.slice.full_shape = {rows};
    p.slice.full_shape.insert(p.slice.full_shape.end(), tail.begin(), tail.end());
    finish(std::move(p), at::cat(local, 0));
  };
  const int64_t tp = pl.tp, r = pl.tp_rank;
  switch (op.kind) {
    case OpKind::kEmbedding:
      add("weight", {V_, h_}, 1, 0, tp, r);
      break;
    case OpKind::kNorm:
      add("weight", {h_}, 1, -1, 1, 0, true);
      if (bias) add("bias", {h_}, h_, -1, 1, 0);  // LayerNorm
      break;
    case OpKind::kQKV:
      add_fused("weight", {{"q.weight", heads_ * d_}, {"k.weight", kv_ * d_}, {"v.weight", kv_ * d_}},
                {h_}, h_, tp, r);
      if (bias)
        add_fused("bias", {{"q.bias", heads_ * d_}, {"k.bias", kv_ * d_}, {"v.bias", kv_ * d_}}, {},
                  h_, tp, r);
      break;
    case OpKind::kOutProj:
      add("weight", {h_, heads_ * d_}, heads_ * d_, 1, tp, r);
      break;
    case OpKind::kMlpUp:
      if (gated) {
        add_fused("weight", {{"gate.weight", f_}, {"up.weight", f_}}, {h_}, h_, tp, r);
        if (bias) add_fused("bias", {{"gate.bias", f_}, {"up.bias", f_}}, {}, h_, tp, r);
      } else {
        add("up.weight", {f_, h_}, h_, 0, tp, r);
        if (bias) add("up.bias", {f_}, h_, 0, tp, r);
      }
      break;
    case OpKind::kResidual:  // the bias of the preceding row-parallel GEMM (replicated)
      if (bias) add("bias", {h_}, h_, -1, 1, 0);
      break;
    case OpKind::kMlpDown:
      add("weight", {h_, f_}, f_, 1, tp, r);
      break;
    case OpKind::kRouter:
      add("weight", {E_, h_}, h_, -1, 1, 0);
      break;
    case OpKind::kExperts: {
      const int64_t local = E_ / std::max(1, pl.ep);
      for (int64_t j = 0; j < local; ++j) {
        const int64_t e = pl.ep_rank * local + j;
        // An expert's fc1 fused as the dense MLP's (Megatron-Core's experts store linear_fc1
        // [2 f, h] each).
        if (gated)
          add_fused(fmt::format("{}.fc1.weight", e),
                    {{fmt::format("{}.gate.weight", e), ef_}, {fmt::format("{}.up.weight", e), ef_}},
                    {h_}, h_, 1, 0);
        else
          add(fmt::format("{}.up.weight", e), {ef_, h_}, h_, -1, 1, 0);
        add(fmt::format("{}.down.weight", e), {h_, ef_}, ef_, -1, 1, 0);
      }
      break;
    }
    case OpKind::kSharedExperts: {
      const int64_t sf = ef_ * cp_.plan.model.moe->shared_experts;
      if (gated)
        add_fused("fc1.weight", {{"gate.weight", sf}, {"up.weight", sf}}, {h_}, h_, 1, 0);
      else
        add("up.weight", {sf, h_}, h_, -1, 1, 0);
      add("down.weight", {h_, sf}, sf, -1, 1, 0);
      break;
    }
    case OpKind::kHead:
      add("weight", {V_, h_}, h_, 0, tp, r);
      break;
    case OpKind::kSynthetic:
      for (int64_t i = 0; i < gemms_; ++i) add(fmt::format("w{}", i), {width_, width_}, width_, -1, 1, 0);
      break;
    default:
      break;
  }
  return out;
}

const TorchModel::Data& TorchModel::data(int replica, int mb) const {
  if (auto it = data_.find({replica, mb}); it != data_.end()) return it->second;
  // A CP rank draws its data replica's sequences (replica / cp) and keeps its two chunks.
  const int data_replica = replica / ctx_par_, cp_rank = replica % ctx_par_;
  auto gen = at::detail::createCPUGenerator(
      fnv1a(fmt::format("data/{}/{}", data_replica, mb), seed_ * 0x9E3779B97F4A7C15ull + 7));
  Data d;
  if (cp_.plan.model.family == ModelSpec::Family::kSynthetic) {
    d.input = at::randn({rows_, width_}, gen, at::TensorOptions().dtype(at::kFloat)).to(opts_);
  } else {
    const ModelSpec& m = cp_.plan.model;
    const at::Tensor ids =
        at::randint(V_, {m.microbatch_size, m.seq_len}, gen, at::TensorOptions().dtype(at::kLong));
    at::Tensor labels = at::roll(ids, {-1}, {1});  // the next token of the whole sequence
    at::Tensor mine = ids;
    if (ctx_par_ > 1) {
      // Megatron's load-balanced causal split: 2·cp chunks, CP rank r holds chunks r and
      // 2cp-1-r (the early, cheap queries of one with the late, expensive ones of another).
      const int64_t chunk = m.seq_len / (2 * ctx_par_);
      const at::Tensor at_ = at::cat({at::arange(cp_rank * chunk, (cp_rank + 1) * chunk, at::kLong),
                                      at::arange((2 * ctx_par_ - 1 - cp_rank) * chunk,
                                                 (2 * ctx_par_ - cp_rank) * chunk, at::kLong)});
      mine = ids.index_select(1, at_);
      labels = labels.index_select(1, at_);
    }
    d.input = mine.contiguous().to(opts_.device());
    d.labels = labels.reshape({-1}).to(opts_.device());
  }
  return data_.emplace(std::make_pair(replica, mb), std::move(d)).first->second;
}

const at::Tensor& TorchModel::input_data(int replica, int mb) const {
  return data(replica, mb).input;
}

const at::Tensor& TorchModel::labels(int replica, int mb) const { return data(replica, mb).labels; }

void TorchModel::prepare(int replica, int mb) const { (void)data(replica, mb); }

std::vector<int64_t> TorchModel::output_shape(uint32_t o) const {
  const ModelOp& op = cp_.model.ops[o];
  switch (op.kind) {
    case OpKind::kSynthetic:
      return is_last(o) ? std::vector<int64_t>{} : std::vector<int64_t>{rows_, width_};
    case OpKind::kQKV:
      return {T_, (heads_ + 2 * kv_) * d_};
    case OpKind::kAttention:
    case OpKind::kAttnContext:
      return {T_, heads_ * d_};
    case OpKind::kAttnScores:
    case OpKind::kSoftmax:
      return {cp_.plan.model.microbatch_size, heads_, cp_.plan.model.seq_len, cp_.plan.model.seq_len};
    case OpKind::kMlpUp:
      return {T_, cp_.plan.model.gated_mlp ? 2 * f_ : f_};
    case OpKind::kMlpAct:
      return {T_, f_};
    case OpKind::kRouter:
      return {T_, h_ + E_};
    case OpKind::kHead:
      return {T_, V_};
    case OpKind::kLoss:
      return {};
    default:
      return {T_, h_};
  }
}

at::Tensor TorchModel::in_output_layout(uint32_t o, const at::Tensor& v) const {
  const bool column_major = cp_.model.ops[o].kind == OpKind::kMlpUp && cp_.plan.model.gated_mlp &&
                            kernels_ == ModelKernels::kFused;
  return column_major ? v.t().contiguous().t() : v;
}

at::Tensor TorchModel::causal_attention(const at::Tensor& q, at::Tensor k, at::Tensor v) const {
  const int64_t a = q.size(1), kvh = k.size(1);
  auto repeat_kv = [&] {  // GQA by repeating KV heads in memory
    if (a == kvh) return;
    k = repeat_kv_heads(k, a / kvh);
    v = repeat_kv_heads(v, a / kvh);
  };
  if (kernels_ == ModelKernels::kFused && kHasSdpa) {
    // Causal attention without a materialised mask (flash / memory-efficient kernels where
    // the device has them): what the analytic model prices by default.
#if STRETTO_TORCH_HAS_SDPA_GQA
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, /*scale=*/std::nullopt,
                                            /*enable_gqa=*/a != kvh);  // GQA in the kernel
#elif STRETTO_TORCH_HAS_SDPA
    repeat_kv();
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true);
#endif
  }
  // The reference formula, and LibTorch 1.x's attention: its private SDPA entry point reads
  // scalars on the host (.item(), seen by tests/backend's operator hook) and builds a mask per
  // call, so 1.x keeps the dense s x s scores with the model's causal mask.
  repeat_kv();
  const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d_));
  return at::matmul(
      at::softmax(scores.masked_fill(causal_mask_, -std::numeric_limits<float>::infinity()), -1), v);
}

OpCtx TorchModel::forward(uint32_t o, const std::vector<at::Tensor>& inputs,
                          const std::vector<Param>& params, const OpPlacement& pl, int replica,
                          int mb, double loss_scale, const TpAllReduce& tp_allreduce,
                          const CpComm& cp_comm) const {
  const ModelOp& op = cp_.model.ops[o];
  const bool gated = cp_.plan.model.gated_mlp;
  OpCtx c;
  c.leaves = inputs;
  auto lin = [&](const at::Tensor& x, size_t pi, int bi = -1) {
    at::Tensor z = at::matmul(x, params.at(pi).value.t());
    if (bi < 0) {
      c.sites.push_back(Site{z, {params[pi].value}, {pi}});
    } else {
      const size_t b = static_cast<size_t>(bi);
      z = z + params.at(b).value;
      c.sites.push_back(Site{z, {params[pi].value, params[b].value}, {pi, b}});
    }
    return z;
  };
  // The transposed GEMM W x^T: [rows, n] for x [n, h], each block of rows contiguous. A fused
  // SwiGLU fc1's output, whose gate and up halves are then contiguous (x W^T's [n, 2f] has them
  // in strided columns, off the elementwise kernels' vectorised path).
  auto lin_t = [&](const at::Tensor& x, size_t pi, int bi = -1) {
    at::Tensor z = at::mm(params.at(pi).value, x.t());
    if (bi < 0) {
      c.sites.push_back(Site{z, {params[pi].value}, {pi}});
    } else {
      const size_t b = static_cast<size_t>(bi);
      z = z + params.at(b).value.unsqueeze(1);
      c.sites.push_back(Site{z, {params[pi].value, params[b].value}, {pi, b}});
    }
    return z;
  };
  // silu(gate) * up of fc1's W x^T [2f, n] (its two contiguous halves), as [n, f] (the
  // transpose of a contiguous [f, n]: the next GEMM reads it as it is).
  auto swiglu_t = [](const at::Tensor& z) {
    const std::vector<at::Tensor> gu = z.split(z.size(0) / 2, 0);
    return (at::silu(gu[0]) * gu[1]).t();
  };
  const bool bias = cp_.plan.model.bias;
  // A bias follows its weight in make_params(): QKV's fused weight then its bias; the MLP's up
  // projection (fused gate and up when gated) then its bias.
  auto bias_at = [&](int i) { return bias ? i : -1; };
  // An expert's MLP: a gated one's fc1 is one GEMM of its fused [2f, h] weight.
  auto mlp = [&](const at::Tensor& x, size_t first) {
    const at::Tensor a = gated ? swiglu_t(lin_t(x, first)) : at::gelu(lin(x, first));
    return lin(a, first + 1);
  };
  at::Tensor out;
  switch (op.kind) {
    case OpKind::kEmbedding: {
      // at::embedding's autograd backward is PyTorch's own (embedding_dense_backward, a
      // sorted index-add on CUDA): the kernel a training job runs.
      const at::Tensor ids = input_data(replica, mb).reshape({-1});
      const at::Tensor& w = params.at(0).value;
      if (pl.tp > 1) {  // vocab-parallel (Megatron): rows outside this rank's slice are zero
        const int64_t vl = w.size(0), v0 = pl.tp_rank * vl;
        const at::Tensor outside = ids.lt(v0).logical_or(ids.ge(v0 + vl));
        out = at::embedding(w, (ids - v0).masked_fill(outside, 0))
                  .masked_fill(outside.unsqueeze(1), 0);
      } else {
        out = at::embedding(w, ids);
      }
      c.sites.push_back(Site{out, {w}, {0}});
      break;
    }
    case OpKind::kNorm: {
      const at::Tensor& x = inputs.at(0);
      if (kernels_ == ModelKernels::kFused && bias) {  // one fused kernel each way
        out = at::layer_norm(x, {h_}, params.at(0).value, params.at(1).value, 1e-5);
        c.sites.push_back(Site{out, {params[0].value, params[1].value}, {0, 1}});
        break;
      }
#if STRETTO_TORCH_HAS_RMS_NORM
      if (kernels_ == ModelKernels::kFused) {  // at::rms_norm: fused where the device has it
        out = at::rms_norm(x, {h_}, params.at(0).value, 1e-5);
        c.sites.push_back(Site{out, {params[0].value}, {0}});
        break;
      }
#endif
      if (bias) {  // LayerNorm (GPT-2/3 models with biases)
        const at::Tensor xc = x - x.mean({-1}, true);
        const at::Tensor xn = xc * at::rsqrt(xc.pow(2).mean({-1}, true) + 1e-5);
        out = xn * params.at(0).value + params.at(1).value;
        c.sites.push_back(Site{out, {params[0].value, params[1].value}, {0, 1}});
      } else {  // RMSNorm
        const at::Tensor xn = x * at::rsqrt(x.pow(2).mean({-1}, true) + 1e-5);
        out = xn * params.at(0).value;
        c.sites.push_back(Site{out, {params[0].value}, {0}});
      }
      break;
    }
    case OpKind::kQKV:
      // One GEMM of the fused weight (Megatron-Core's linear_qkv): [T, (a + 2 kv) d], this
      // rank's Q, K and V columns, which attention takes as views (one split).
      out = lin(inputs.at(0), 0, bias_at(1));
      break;
    case OpKind::kAttention: {
      const at::Tensor& in = inputs.at(0);
      const int64_t al = heads_ / pl.tp, kvl = kv_ / pl.tp;
      const int64_t bs = cp_.plan.model.microbatch_size, s = s_;
      // One split of the QKV rows, not three narrow()s: split's backward writes the three
      // gradients into one [T, (al + 2 kvl) d] tensor (one cat), where each narrow() scatters
      // into its own zero-filled tensor of that size and the three are then added.
      const std::vector<at::Tensor> qkv = in.split_with_sizes({al * d_, kvl * d_, kvl * d_}, 1);
      auto heads = [&](const at::Tensor& x, int64_t n) {
        return x.reshape({bs, s, n, d_}).transpose(1, 2);
      };
      at::Tensor q = heads(qkv[0], al), k = heads(qkv[1], kvl), v = heads(qkv[2], kvl);
      if (ctx_par_ > 1) {  // context parallelism: attention over the CP group
        const int r = replica % ctx_par_;
        if (!cp_comm.ring && !cp_comm.all_gather && !cp_comm.all_to_all)
          throw std::runtime_error("internal: context-parallel attention without its communication");
        out = (cp_comm.ring         ? ring_attention(q, k, v, r, cp_comm.ring, c)
               : cp_comm.all_gather ? gathered_attention(q, k, v, r, cp_comm, c)
                                    : a2a_attention(q, k, v, r, cp_comm, c))
                  .to(in.scalar_type())
                  .transpose(1, 2)
                  .reshape({bs * s, al * d_});
        break;
      }
      out = causal_attention(q, k, v);
      out = out.transpose(1, 2).reshape({bs * s, al * d_});
      break;
    }
    case OpKind::kOutProj:
    case OpKind::kMlpDown:
    case OpKind::kHead:
      out = lin(inputs.at(0), 0);
      break;
    case OpKind::kMlpUp:
      if (gated && kernels_ == ModelKernels::kFused)
        // One GEMM of the fused [2f, h] weight (Megatron-Core's linear_fc1), transposed: W x^T
        // is [2f, T] with gate and up each a contiguous block, so that the SwiGLU's elementwise
        // kernels run on their vectorised contiguous path; the output is its [T, 2f] view
        // (column-major, no copy).
        out = lin_t(inputs.at(0), 0, bias_at(1)).t();
      else  // [T, 2f] row-major (gate columns, then up), or [T, f] ungated
        out = lin(inputs.at(0), 0, bias_at(1));
      break;
    case OpKind::kResidual:
      out = residual_forward(o, inputs, params, replica, mb, c);
      break;
    case OpKind::kAttnScores:
    case OpKind::kSoftmax:
    case OpKind::kAttnContext:
      out = unfused_attention(o, inputs, pl, replica, mb);
      break;
    case OpKind::kMlpAct: {
      const at::Tensor& in = inputs.at(0);
      if (gated && kernels_ == ModelKernels::kFused) {
        // kMlpUp's column-major [T, 2f]: its transpose is the GEMM's contiguous [2f, T], split
        // into contiguous gate and up views; the backward is one cat of both halves' gradients
        // (narrow() would scatter each into a zero-filled full-size tensor, then added).
        out = swiglu_t(in.t());
      } else if (gated) {
        const int64_t fl = in.size(1) / 2;
        out = at::silu(in.narrow(1, 0, fl)) * in.narrow(1, fl, fl);
      } else {
        out = at::gelu(in);
      }
      break;
    }
    case OpKind::kRouter: {
      const at::Tensor& x = inputs.at(0);
      const at::Tensor probs = at::softmax(lin(x, 0).to(at::kFloat), -1);
      auto [topv, topi] = at::topk(probs, k_, -1);
      const at::Tensor gates = at::zeros_like(probs).scatter(1, topi, topv);
      out = at::cat({x, gates.to(x.scalar_type())}, 1);
      break;
    }
    case OpKind::kExperts: {
      at::Tensor in = inputs.at(0);
      if (in.dim() == 2) in = in.unsqueeze(0);
      const int64_t S = in.size(0), T = in.size(1);
      const at::Tensor x = in.narrow(2, 0, h_).reshape({S * T, h_});
      const at::Tensor g = in.narrow(2, h_, E_).reshape({S * T, E_});
      at::Tensor acc = at::zeros({S * T, h_}, x.options());
      const int64_t local = E_ / std::max(1, pl.ep), per = 2;  // fc1, down
      const int64_t capacity = expert_capacity(T, k_, E_, cp_.plan.model.moe->capacity_factor);
      const ExpertTokens route = route_tokens(g.narrow(1, pl.ep_rank * local, local), S, capacity,
                                              cp_.plan.model.moe->token_drop_policy);
      for (int64_t j = 0, off = 0; j < local; ++j) {
        const at::Tensor col = g.select(1, pl.ep_rank * local + j);
        at::Tensor idx, gate;
        if (capacity > 0) {  // S x C rows, padding with a zero gate (a zero contribution)
          idx = route.tokens.select(0, j);
          gate = col.index_select(0, idx) * route.valid.select(0, j).to(col.scalar_type());
        } else {
          const int64_t n = route.counts[static_cast<size_t>(j)];
          off += n;
          if (n == 0) continue;
          idx = route.tokens.narrow(0, off - n, n);
          gate = col.index_select(0, idx);
        }
        const at::Tensor y = mlp(x.index_select(0, idx), static_cast<size_t>(j * per));
        acc = acc.index_add(0, idx, y * gate.unsqueeze(1));
      }
      out = acc.reshape({S, T, h_});
      break;
    }
    case OpKind::kSharedExperts:  // summed into the stream by the MoE block's residual op
      out = mlp(inputs.at(0), 0);
      break;
    case OpKind::kLoss: {
      const at::Tensor& lab = labels(replica, mb);
      at::Tensor loss;
      if (pl.tp <= 1 && kernels_ == ModelKernels::kFused) {
        // log_softmax reads the logits in their own dtype (bf16 on a bf16 plan) and writes
        // fp32 log-probabilities, its reductions accumulating in fp32: the fp32 formula
        // without an fp32 copy of the [tokens, vocab] logits.
        loss = at::nll_loss(at::log_softmax(inputs.at(0), 1, at::kFloat), lab);
      } else if (pl.tp <= 1) {
        loss = at::cross_entropy_loss(inputs.at(0).to(at::kFloat), lab);
      } else {
        const at::Tensor lf = inputs.at(0).to(at::kFloat);
        // Vocab-parallel cross-entropy (Megatron): max, sum of exponentials and the target
        // logit are all-reduced over the TP group; each rank's gradient is for its slice.
        at::Tensor m = lf.detach().amax({1}, true);
        tp_allreduce(m, true);
        const at::Tensor se = at::exp(lf - m).sum({1});
        at::Tensor total = se.detach().clone();
        tp_allreduce(total, false);
        const int64_t vl = lf.size(1), v0 = pl.tp_rank * vl;
        const at::Tensor in_range = lab.ge(v0).logical_and(lab.lt(v0 + vl));
        const at::Tensor tl =
            lf.gather(1, (lab - v0).clamp(0, vl - 1).unsqueeze(1)).squeeze(1) *
            in_range.to(at::kFloat);
        at::Tensor tl_all = tl.detach().clone();
        tp_allreduce(tl_all, false);
        loss = (at::log(se + (total - se.detach())) + m.squeeze(1) - (tl + (tl_all - tl.detach())))
                   .mean();
      }
      out = loss * loss_scale;
      break;
    }
    case OpKind::kSynthetic: {
      at::Tensor x = inputs.empty() ? input_data(replica, mb) : inputs.at(0);
      for (int64_t i = 0; i < gemms_; ++i) {
        at::Tensor z = lin(x, static_cast<size_t>(i));
        x = i + 1 < gemms_ ? at::tanh(z) : z;
      }
      out = is_last(o) ? x.pow(2).mean() * loss_scale : x;
      break;
    }
    default:
      throw std::runtime_error(fmt::format("replay: no implementation of op {}", op.name));
  }
  c.out = out;
  c.live = true;
  c.bytes = tensor_bytes(out);
  for (const auto& l : c.leaves) c.bytes += tensor_bytes(l);
  for (const auto& t : c.cp_kv) c.bytes += tensor_bytes(t);
  c.bytes += tensor_bytes(c.cp_root);
  for (const auto& s : c.sites)
    if (!same_tensor(s.z, out) && !s.z.is_alias_of(out)) c.bytes += tensor_bytes(s.z);
  return c;
}

std::vector<at::Tensor> backward_inputs(OpCtx& ctx, const at::Tensor& dy, bool full,
                                        std::vector<Param>& params) {
  std::vector<at::Tensor> targets;
  std::vector<int> leaf_at(ctx.leaves.size(), -1), site_at(ctx.sites.size(), -1);
  for (size_t i = 0; i < ctx.leaves.size(); ++i)
    if (ctx.leaves[i].defined() && ctx.leaves[i].requires_grad()) {
      leaf_at[i] = static_cast<int>(targets.size());
      targets.push_back(ctx.leaves[i]);
    }
  std::vector<std::pair<size_t, int>> param_at;  // (param index, target)
  if (full) {
    std::vector<char> seen(params.size(), 0);
    for (const auto& s : ctx.sites)
      for (size_t k = 0; k < s.params.size(); ++k)
        if (!seen[s.param_index[k]]) {
          seen[s.param_index[k]] = 1;
          param_at.emplace_back(s.param_index[k], static_cast<int>(targets.size()));
          targets.push_back(s.params[k]);
        }
  } else {
    for (size_t i = 0; i < ctx.sites.size(); ++i)
      if (!same_tensor(ctx.sites[i].z, ctx.out)) {
        site_at[i] = static_cast<int>(targets.size());
        targets.push_back(ctx.sites[i].z);
      }
  }
  // The K/V chunks a context-parallel attention received (their gradients go back around the
  // ring: cp_backward).
  const size_t cp_at = targets.size();
  for (const auto& t : ctx.cp_kv) targets.push_back(t);
  std::vector<at::Tensor> grads;
  // a2a context parallelism differentiates this rank's heads over the whole sequence (dy is
  // already cp_output_grad()'s).
  const at::Tensor& root = ctx.cp_root.defined() ? ctx.cp_root : ctx.out;
  if (!targets.empty())
    grads = torch::autograd::grad({root}, targets, {dy}, /*retain_graph=*/!full,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  std::vector<at::Tensor> dx(ctx.leaves.size());
  for (size_t i = 0; i < ctx.leaves.size(); ++i)
    if (leaf_at[i] >= 0) dx[i] = grads[leaf_at[i]];
  ctx.cp_dkv.clear();
  for (size_t i = 0; i < ctx.cp_kv.size(); ++i) {
    const at::Tensor& g = grads.at(cp_at + i);
    ctx.cp_dkv.push_back(g.defined() ? g : at::zeros_like(ctx.cp_kv[i]));
  }
  if (full) {
    for (auto [pi, t] : param_at)
      if (grads[t].defined()) params[pi].grad.add_(grads[t]);
  } else {
    ctx.dz.assign(ctx.sites.size(), at::Tensor());
    for (size_t i = 0; i < ctx.sites.size(); ++i)
      ctx.dz[i] = site_at[i] >= 0 ? grads[site_at[i]] : dy;
  }
  return dx;
}

void backward_weights(OpCtx& ctx, std::vector<Param>& params) {
  for (size_t i = 0; i < ctx.sites.size(); ++i) {
    if (i >= ctx.dz.size() || !ctx.dz[i].defined()) continue;
    const Site& s = ctx.sites[i];
    auto g = torch::autograd::grad({s.z}, s.params, {ctx.dz[i]}, /*retain_graph=*/true,
                                   /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < g.size(); ++k)
      if (g[k].defined()) params[s.param_index[k]].grad.add_(g[k]);
  }
}

}  // namespace stretto::backend::detail

namespace stretto::backend {

std::vector<KernelUse> kernel_uses(const compiler::CompiledPlan& cp, Kernels kernels) {
  using compiler::OpKind;
  const detail::TorchKernels has = detail::torch_kernels();
  const plan::ModelSpec& m = cp.plan.model;
  std::vector<KernelUse> out;
  if (m.family != plan::ModelSpec::Family::kTransformer) return out;
  std::set<OpKind> kinds;
  for (const compiler::ModelOp& op : cp.model.ops) kinds.insert(op.kind);
  bool loss_tp = false;
  for (const compiler::Node& n : cp.dag.nodes)
    loss_tp = loss_tp || (n.kind == compiler::NodeKind::kCompute && n.op < cp.model.ops.size() &&
                          cp.model.ops[n.op].kind == OpKind::kLoss && n.tp > 1);
  const bool fused = kernels == Kernels::kFused;
  const std::string torch = fmt::format("LibTorch {}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
  auto add = [&](std::string family, std::string kernel, std::string op, std::string reason = "") {
    const bool fallback = !reason.empty();
    out.push_back({std::move(family), std::move(kernel), std::move(op), std::move(reason), fallback});
  };
  // The same decisions as TorchModel::forward, from the same constants (torch_model.h).
  if (kinds.count(OpKind::kEmbedding))
    add("embedding", "at::embedding (backward: embedding_dense_backward)", "aten::embedding");
  if (kinds.count(OpKind::kNorm)) {
    if (m.bias)
      add("layer_norm", fused ? "at::layer_norm" : "formula: (x - mean) * rsqrt(var + eps) * weight + bias",
          fused ? "aten::layer_norm" : "aten::rsqrt");
    else if (fused && has.rms_norm)
      add("rms_norm", "at::rms_norm", "aten::rms_norm");
    else
      add("rms_norm", "formula: x * rsqrt(mean(x^2) + eps) * weight", "aten::rsqrt",
          fused ? torch + " has no at::rms_norm (LibTorch 2.4 and later)" : "");
  }
  if (kinds.count(OpKind::kAttention)) {
    const bool gqa = m.kv_heads > 0 && m.kv_heads < m.heads;
    const std::string sdpa =
        "at::scaled_dot_product_attention (is_causal, no mask tensor; ATen picks flash, "
        "memory-efficient or math)";
    const int ctx = detail::context_parallel(cp);
    const bool gathered = detail::cp_comm_type(cp) == plan::CpCommType::kAllGather;
    const bool a2a = detail::cp_comm_type(cp) == plan::CpCommType::kA2A;
    if (ctx > 1 && gathered)  // TorchModel::gathered_attention, whatever --kernels says
      add("attention",
          fmt::format("the whole sequence's K/V all-gathered over {} CP ranks, then the formula "
                      "softmax(q k^T / sqrt(d), position mask) v in fp32{}",
                      ctx, gqa ? ", KV heads repeated in memory" : ""),
          "aten::softmax",
          fused ? "a CP rank's queries are two chunks of the sequence: is_causal does not "
                  "describe their mask"
                : "");
    else if (ctx > 1 && !a2a)  // TorchModel::ring_attention, whatever --kernels says
      add("attention",
          fmt::format("ring attention over {} CP ranks (p2p): per ring step the formula "
                      "softmax(q k^T / sqrt(d)) v and its log-sum-exp in fp32, steps merged by "
                      "log-sum-exp{}",
                      ctx, gqa ? ", KV heads repeated in memory" : ""),
          "aten::logsumexp",
          fused ? "the public scaled_dot_product_attention returns no log-sum-exp to merge "
                  "ring steps by"
                : "");
    else {
      // Plain causal attention over the whole sequence (TorchModel::causal_attention); a2a runs
      // it over its heads after the all-to-all.
      const std::string split =
          ctx > 1 ? fmt::format("the heads split over {} CP ranks by all-to-alls (Q, K, V in, the "
                                "output back), then ",
                                ctx)
                  : "";
      if (fused && has.sdpa_gqa)
        add("attention", split + sdpa + (gqa ? ", GQA in the kernel (enable_gqa)" : ""),
            "aten::scaled_dot_product_attention");
      else if (fused && has.sdpa)
        add("attention", split + sdpa + (gqa ? ", KV heads repeated in memory" : ""),
            "aten::scaled_dot_product_attention",
            gqa ? torch + " has no enable_gqa (LibTorch 2.5 and later)" : "");
      else
        add("attention",
            split + "formula: softmax(q k^T / sqrt(d), causal mask) v" +
                (gqa ? ", KV heads repeated in memory" : ""),
            "aten::softmax",
            fused ? torch +
                        " has no public at::scaled_dot_product_attention (LibTorch 2.0 and "
                        "later); its private one reads scalars on the host (.item())"
                  : "");
    }
  }
  if (kinds.count(OpKind::kAttnScores))
    add("attention", "the plan's unfused attention: scores with the causal mask, softmax, context",
        "aten::softmax");
  if (kinds.count(OpKind::kMlpAct)) {
    if (m.gated_mlp)
      add("swiglu",
          fused ? "silu(gate) * up on the contiguous halves of the up projection's one GEMM (W x^T)"
                : "silu(gate) * up on narrow() views",
          "aten::silu");
    else
      add("gelu", "at::gelu", "aten::gelu");
  }
  if (kinds.count(OpKind::kLoss)) {
    if (loss_tp)
      add("cross_entropy",
          "vocab-parallel: max, sum of exponentials and target logit all-reduced over the TP "
          "group, fp32",
          "aten::exp");
    else
      add("cross_entropy",
          fused ? "nll_loss(log_softmax(logits, fp32)) over the logits' own dtype"
                : "cross_entropy over an fp32 copy of the logits",
          fused ? "aten::log_softmax" : "aten::cross_entropy_loss");
  }
  if (m.dropout > 0)
    add("dropout",
        "mask from a counter-based hash of (seed, op, replica, microbatch, element) on the device",
        "aten::bitwise_xor_");
  if (kinds.count(OpKind::kExperts)) {
    if (m.moe && m.moe->capacity_factor > 0 &&
        m.moe->token_drop_policy == plan::MoeSpec::DropPolicy::kPosition)
      add("moe_routing",
          "capacity-padded, position policy: each expert's first C tokens of every source placed "
          "by a cumulative sum on the device, padded to C (C from moe.capacity_factor); nothing "
          "read on the host",
          "aten::cumsum");
    else if (m.moe && m.moe->capacity_factor > 0)
      add("moe_routing",
          "capacity-padded, probs policy: each expert's C highest-gate tokens of every source "
          "placed by a stable sort on the device, padded to C (C from moe.capacity_factor); "
          "nothing read on the host",
          "aten::sort");
    else
      add("moe_routing",
          "dropless: one sort of the routed (expert, token) keys on the device; the per-expert "
          "token counts read on the host once per experts forward (the experts' GEMM sizes)",
          "aten::sort");
  }
  return out;
}

}  // namespace stretto::backend
