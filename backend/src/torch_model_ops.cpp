// Ops of the merged cost model the replay executes beyond the original set (see
// torch_model.h): the bias-dropout-add that ends every sub-block (OpKind::kResidual) and
// unfused attention (scores, softmax with dropout on the probabilities, context).
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>

#include "torch_model.h"

namespace stretto::backend::detail {

using compiler::OpKind;

at::Tensor TorchModel::dropout_mask(uint32_t o, int replica, int mb,
                                    const std::vector<int64_t>& full, int dim, int64_t start,
                                    int64_t len) const {
  const double p = cp_.plan.model.dropout;
  const std::string key = fmt::format("dropout/{}/{}/{}/{}", seed_, cp_.model.ops[o].name, replica, mb);
  // Each element's index in the full tensor: [outer, len, inner] around dimension `dim`.
  const size_t d = static_cast<size_t>(dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= full[i];
  for (size_t i = d + 1; i < full.size(); ++i) inner *= full[i];
  if (len < 0) len = full[d] - start;
  const auto lng = at::TensorOptions().dtype(at::kLong).device(opts_.device());
  const at::Tensor index = at::arange(outer, lng).mul_(full[d] * inner).view({outer, 1, 1}) +
                           at::arange(start, start + len, lng).mul_(inner).view({1, len, 1}) +
                           at::arange(inner, lng).view({1, 1, inner});
  std::vector<int64_t> shape = full;
  shape[d] = len;
  const at::Tensor keep = dropout_keep(index, std::hash<std::string>{}(key), p).reshape(shape);
  return keep.to(opts_.dtype()).mul_(1.0 / (1.0 - p));
}

at::Tensor TorchModel::residual_forward(uint32_t o, const std::vector<at::Tensor>& inputs,
                                        const std::vector<Param>& params, int replica, int mb,
                                        OpCtx& c) const {
  // out = residual + dropout(sum of the branch outputs + bias); the residual stream is the
  // last input (model.cpp: {out_proj, block input}, {mlp.down, ...}, {experts, [shared], ...}).
  if (inputs.size() < 2)
    throw std::runtime_error(fmt::format("replay: {} needs a branch and a residual input",
                                         cp_.model.ops[o].name));
  at::Tensor x = inputs[0];
  for (size_t i = 1; i + 1 < inputs.size(); ++i) x = x + inputs[i];
  if (!params.empty()) {
    x = x + params[0].value;
    c.sites.push_back(Site{x, {params[0].value}, {0}});
  }
  if (cp_.plan.model.dropout > 0) x = x * dropout_mask(o, replica, mb, x.sizes().vec());
  return x + inputs.back();
}

at::Tensor TorchModel::unfused_attention(uint32_t o, const std::vector<at::Tensor>& inputs,
                                         const OpPlacement& pl, int replica, int mb) const {
  const compiler::ModelOp& op = cp_.model.ops[o];
  const int64_t al = heads_ / pl.tp, kvl = kv_ / pl.tp;
  const int64_t bs = cp_.plan.model.microbatch_size, s = cp_.plan.model.seq_len;
  // Heads of the QKV output [T, (al + 2 kvl) d] as [bs, heads, s, d], KV repeated for GQA.
  auto heads = [&](const at::Tensor& qkv, int64_t off, int64_t n) {
    at::Tensor t = qkv.narrow(1, off * d_, n * d_).reshape({bs, s, n, d_}).transpose(1, 2);
    return repeat_kv_heads(t, al / n);
  };
  switch (op.kind) {
    case OpKind::kAttnScores: {
      const at::Tensor& qkv = inputs.at(0);
      const at::Tensor scores = at::matmul(heads(qkv, 0, al), heads(qkv, al, kvl).transpose(-2, -1)) /
                                std::sqrt(static_cast<double>(d_));
      return scores.masked_fill(causal_mask_, -std::numeric_limits<float>::infinity());
    }
    case OpKind::kSoftmax: {
      at::Tensor p = at::softmax(inputs.at(0), -1);
      if (cp_.plan.model.dropout > 0)  // the full model's mask, this rank's heads
        p = p * dropout_mask(o, replica, mb, {bs, heads_, s, s}, 1, pl.tp_rank * al, al);
      return p;
    }
    case OpKind::kAttnContext:
      return at::matmul(inputs.at(0), heads(inputs.at(1), al + kvl, kvl))
          .transpose(1, 2)
          .reshape({bs * s, al * d_});
    default:
      throw std::runtime_error(fmt::format("replay: {} is not an attention op", op.name));
  }
}

}  // namespace stretto::backend::detail
