#pragma once
// One rank's replay of its device program (private; see replay.h for the model).
#include <cstdint>
#include <string>
#include <vector>

#include "stretto/backend/replay.h"

namespace stretto::backend::detail {

/// A parameter's gradient as a rank holds it after one step (--check): the local tensor (a TP
/// slice or the whole parameter) and the flat range of it that this rank owns (ZeRO shards).
struct GradDump {
  std::string name;
  std::vector<int64_t> full_shape;
  int dim = -1;
  int64_t start = 0, length = 0;
  int64_t owned_begin = 0, owned_end = 0;
  std::vector<float> values;  // the local gradient, flattened
};

std::vector<uint8_t> encode_grads(const std::vector<GradDump>& g);
std::vector<GradDump> decode_grads(const std::vector<uint8_t>& b);

/// Compares the ranks' gradients with a single-process run of the same global batch.
CheckReport check_against_reference(const CompiledPlan& cp, const ReplayOptions& opt,
                                    const std::vector<std::vector<GradDump>>& ranks,
                                    double replayed_loss);

}  // namespace stretto::backend::detail
