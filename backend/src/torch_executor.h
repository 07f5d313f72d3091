#pragma once
// One rank's replay of its device program (private; see replay.h for the model).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stretto/backend/replay.h"

namespace stretto::backend::detail {

/// A parameter as a rank holds it after the check's kCheckSteps steps (--check): its gradient of
/// the first and of the last step, and its value after the last optimizer step, each the local
/// tensor (a TP slice or the whole parameter) flattened; the
/// flat range of the gradient this rank owns (ZeRO-2/3 shards), and the range of the value
/// that holds the step (this rank's shard, or the whole tensor where a ZeRO-1/2 all-gather
/// brought every shard's step back).
struct GradDump {
  std::string name;
  std::vector<int64_t> full_shape;
  int dim = -1;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // of `dim`, concatenated (ParamSlice)
  int64_t owned_begin = 0, owned_end = 0;
  std::vector<float> values;        // the local gradient of the last step, flattened
  std::vector<float> first_values;  // the local gradient of the first step, flattened
  int64_t stepped_begin = 0, stepped_end = 0;
  std::vector<float> weights;  // the local parameter after the step, flattened
};

/// Steps a --check replays: two, so that the optimizer's state (SGD's momentum, Adam's moments
/// and bias correction) enters the second update; after one step, SGD with and without
/// momentum are the same update.
inline constexpr int kCheckSteps = 2;

std::vector<uint8_t> encode_grads(const std::vector<GradDump>& g);
std::vector<GradDump> decode_grads(const std::vector<uint8_t>& b);

/// The optimizer a replay steps with: the plan's `optimizer` when it has one, else --optimizer.
Optimizer step_optimizer(const compiler::CompiledPlan& cp, const ReplayOptions& opt);
/// Whether the step clips gradients to a global norm of kMaxGradNorm (the plan's `grad_clip`).
bool clips_gradients(const compiler::CompiledPlan& cp);
inline constexpr double kMaxGradNorm = 1.0;  // Megatron-LM's --clip-grad default
/// SGD's momentum: the plan's `sgd` is SGD with one momentum buffer (docs/fidelity.md prices
/// it); 0.9 is Megatron-LM's --sgd-momentum default (megatron/training/arguments.py).
inline constexpr double kSgdMomentum = 0.9;

/// Whether the executor may take `g` over as a gradient accumulator that later contributions
/// are added to in place, instead of copying it: one reference holds its TensorImpl, no other
/// tensor (a view, a saved variable) shares its storage, and no two of its elements share
/// memory (an expanded tensor). A view counts as fresh when nothing but the view holds its
/// base (a transposed GEMM gradient).
bool stealable(const at::Tensor& g);

/// Compares the ranks' gradients, and their parameters after the optimizer step, with a
/// single-process run of the same global batch stepped by LibTorch's own optimizer.
CheckReport check_against_reference(const compiler::CompiledPlan& cp, const ReplayOptions& opt,
                                    const std::vector<std::vector<GradDump>>& ranks,
                                    double replayed_loss);

}  // namespace stretto::backend::detail
