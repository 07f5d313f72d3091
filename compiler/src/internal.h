#pragma once
// Private interfaces between the compiler's passes.
#include <map>
#include <unordered_map>

#include "stretto/compiler/compiler.h"

namespace stretto::compiler::detail {

/// Interns device sets so nodes refer to them by index.
class DeviceSetTable {
 public:
  explicit DeviceSetTable(std::vector<DeviceSet>& sets) : sets_(sets) {}
  uint32_t intern(std::vector<int32_t> devices, int32_t group_size) {
    auto key = std::make_pair(devices, group_size);
    if (auto it = index_.find(key); it != index_.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(sets_.size());
    sets_.push_back(DeviceSet{std::move(devices), group_size});
    index_.emplace(std::move(key), id);
    return id;
  }

 private:
  std::vector<DeviceSet>& sets_;
  std::map<std::pair<std::vector<int32_t>, int32_t>, uint32_t> index_;
};

/// Bytes of one parameter as the model keeps its weights and gradients (and as data-parallel
/// reductions and ZeRO gathers move them): the dtype's, but 2 (bf16) for fp8. Transformer
/// Engine runs GEMMs in fp8 from bf16 weights, casting them to fp8 copies it caches
/// (fp8_weight_copy_bytes), and Megatron-LM keeps fp32 master weights and Adam states beside
/// them as for bf16.
inline int param_dtype_bytes(plan::DType d) {
  return d == plan::DType::kFP8 ? 2 : plan::dtype_bytes(d);
}
/// Bytes per parameter of the fp8 weight copies Transformer Engine caches for a GEMM of an fp8
/// model: the fp8 weight and its fp8 transpose (the forward GEMM reads one, the input-gradient
/// GEMM the other: Hopper's fp8 GEMMs take only the TN layout); 0 for other dtypes.
inline int fp8_weight_copy_bytes(plan::DType d) {
  return d == plan::DType::kFP8 ? 2 : 0;
}

/// Groups over all `order` directives (each adds at most one barrier per class of devices).
inline size_t order_groups(const plan::Plan& plan) {
  size_t n = 0;
  for (const auto& d : plan.schedule)
    if (d.op == plan::DirectiveOp::kOrder) n += d.groups.size();
  return n;
}

/// Adds temporal edges for `order` directives, orders all nodes (CompiledPlan::topo_order),
/// lowers to per-class programs when `class_programs` and checks for deadlocks. Appends
/// diagnostics on failure.
bool order_and_lower(CompiledPlan& cp, const plan::JsonSource* src, bool class_programs,
                     Diagnostics& diags);

/// A diagnostic at a JSON pointer, with the source line if a source is known.
Diagnostic diag_at(const plan::JsonSource* src, const std::string& file, const std::string& ptr,
                   std::string msg, std::string hint, int directive);

}  // namespace stretto::compiler::detail
