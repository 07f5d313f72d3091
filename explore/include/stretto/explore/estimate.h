#pragma once
// A fast analytic estimate of a plan's step time and peak memory, for pruning a search
// (docs/sweeps.md "How search works"). It prices the same model ops with the same cost model
// the simulator uses, but replaces the discrete-event simulation by closed forms:
//
//   per-chunk times F, B (= BI + W) of every pipeline chunk for one microbatch: the sum of its
//   layers' op times after the TP split, plus the TP collectives as the compiler emits them
//   (the embedding's, head's and loss's too: one all-reduce per row-parallel output in the
//   forward, one per column-parallel input gradient in the backward; with sequence parallelism
//   each becomes a reduce-scatter + all-gather pair on the whole gathered bytes, a
//   column-parallel op re-gathers its input beside its backward, and unsplit ops work on 1/tp
//   of the tokens), the EP all-to-alls (dispatch and combine, forward and backward; on the
//   compiler's bytes, the busiest expert's load: MoeSpec::load_factor) and, with ZeRO-3, one
//   parameter all-gather per pass of the layers' parameters (the simulator runs them just
//   before each op; an EP-sharded expert op is not gathered, and the embedding's and the
//   head's gathers are left out);
//   step = m x (the busiest rank's work per microbatch: its chunks as the family places them)
//        + the family's fill/drain term over the mean chunk (cF, cB, cBI, cW; reference: the
//          schedule-builders spec, §4, and tests/integration/closed_forms_test.cpp):
//     gpipe, 1f1b, interleaved, looped   (p-1)(cF+cB)
//     zb-h1                              (p-1)(cF+cBI-cW)
//     zb-h2                              (p-1)·max(0, cF+cBI-2cW)
//     zb-v                               (p-1)cF
//     dualpipev                          (p-1)(cF+2cB-3cW)
//     dualpipe                           (p/2-1)(cF+2cB-3cW)
//   plus 2(p-1) stage-boundary transfers, plus the data-parallel gradient reduction less a
//   quarter of the last microbatch's backward (at least one bucket; what the simulator hides,
//   measured by bench_explore BM_Agreement) over the copies the compiler reduces (dp x cp; both
//   directions' under DualPipe; not an EP-sharded expert's, whose group dp x cp / ep is one
//   device), plus the tied embedding's gradient all-reduce between its two copies (exposed:
//   after the first stage's last backward), plus ZeRO-1/2's parameter all-gather after the
//   step, plus gradient clipping's norm all-reduce (4 bytes over Megatron-Core's
//   grad_stats_parallel_group: TP x PP, every device with ZeRO >= 1 or EP; exposed), plus the
//   optimizer step of the slowest rank (its parameters, sharded over dp x cp with ZeRO >= 1,
//   an expert's over its dp x cp / ep replicas, as the compiler shards each op's state,
//   x the plan's step bytes per parameter, priced memory-bound as the simulator's step node).
//   The vocabulary is padded as the compiler pads it (make_vocab_size_divisible_by x TP), and
//   with tied embeddings on different ranks the head's rank holds a copy of the embedding.
//   memory (allocated) = parameters, gradients and optimizer state of the largest stage by ZeRO level
//   (the simulator's bytes per parameter: compiler::static_bytes_per_param of the plan's dtype
//   and optimizer, e.g. 2 + 2 + 12 for bf16 Adam with master weights) + saved activations of the
//   chunks the first rank holds at its peak (1F1B: min(m, p); GPipe and looped BFS: all;
//   interleaved: 2(p-1) + (v-1)p + 1; ZB-H2: 2p-1; V schedules: 2p + 1 chunks).
//   device total = per rank, that + NCCL's buffers of the groups it communicates in (TP, DP x
//   CP, CP, the gradient norm's, tied embeddings) and the devices it receives point-to-point
//   from (pipeline neighbours, EP and CP all-to-all peers), by sim::nccl_buffer_bytes, + the
//   CUDA context (sim::cuda_context_bytes); the largest rank's.
//
// Everything it needs per (microbatch size, TP degree) is computed once and cached, so one
// estimate is a few hundred arithmetic operations.

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "stretto/costmodel/cost_model.h"
#include "stretto/explore/spec.h"
#include "stretto/compiler/model.h"

namespace stretto::explore {

struct Estimate {
  double step_ms = 0;
  int64_t peak_memory_bytes = 0;  // allocated: static state + saved activations (largest rank)
  // Outside the allocator, as the simulator counts it (sim/outside_allocator.h): the CUDA
  // context, and NCCL's buffers of the communicators and point-to-point peers of the rank that
  // has the most; peak_device_bytes = the largest rank's allocated peak + its NCCL buffers +
  // the context, what capacity is judged on (docs/semantics.md "Capacity").
  int64_t cuda_context_bytes = 0, nccl_buffer_bytes = 0, peak_device_bytes = 0;
  double chunk_f_ms = 0, chunk_b_ms = 0;  // mean chunk, one microbatch
  double bubble_ms = 0, dp_exposed_ms = 0;
  // Gradient clipping's norm all-reduce (part of step_ms; 0 without clipping or when its group
  // is one device), priced as the simulator prices the compiled plan's.
  double grad_norm_ms = 0;
  // The optimizer step (part of step_ms; 0 without an optimizer), as the simulator prices it.
  double optimizer_step_ms = 0;
  // Tied embeddings on two ranks: the all-reduce of the two copies' gradients (part of step_ms;
  // 0 without a copy), priced as the simulator prices the compiled plan's.
  double tied_grad_ms = 0;
  // The data-parallel gradient reduction of the rank that reduces the most: its group (the
  // copies of an op's parameters: dp x cp, twice that under DualPipe; 0 when one) and bytes.
  int grad_reduce_group = 0;
  int64_t grad_reduce_bytes = 0;
  // ZeRO-3: the parameter bytes the largest chunk gathers per pass (its layers'; 0 without).
  int64_t zero3_gather_bytes = 0;
  // With expert parallelism: the bytes of one EP all-to-all (a MoE layer's dispatch or combine
  // of one microbatch, sized by the busiest expert's load as the compiler sizes it; 0 without).
  int64_t ep_all_to_all_bytes = 0;
};

/// Estimates for one base plan's model, cluster and cost model under many layouts.
/// Thread-compatible (one per thread), or guarded by the caller.
class Estimator {
 public:
  static Expected<Estimator> make(const plan::Plan& plan, const std::string& base_dir = ".");
  /// Estimate for a resolved point; fails for layouts the estimate cannot price (unknown family).
  Expected<Estimate> operator()(const Resolved& r);

 private:
  struct LayerCosts {
    // Per layer (index) and for the ops before the first / after the last layer.
    std::vector<double> f, bi, bw;   // ns, compute only, after the TP split
    std::vector<double> tp_f, tp_b;  // ns of TP collectives (and CP all-gathers / all-to-alls)
    // ns of tp_b hidden when the backward is one B node (not with a split BI/BW): what
    // Megatron's asynchronous input-gradient reduction hides behind the weight-gradient GEMM
    // (model async_tp_grad_reduce), and SP's re-gather behind the weight gradient too
    std::vector<double> tp_b_async;
    std::vector<double> a2a;         // ns of one all-to-all (MoE layers), 0 otherwise
    int64_t a2a_bytes = 0;           // its bytes
    std::vector<double> attn_f;      // ns of core attention forward (selective recompute)
    std::vector<double> saved, boundary;  // bytes per microbatch (after TP)
    std::vector<double> params, expert_params;  // parameter counts
    double pre_f = 0, pre_b = 0, post_f = 0, post_b = 0, pre_params = 0, post_params = 0;
    double pre_b_async = 0, post_b_async = 0;  // as tp_b_async, of pre_b and post_b
    double pre_saved = 0, post_saved = 0;
    double embedding_params = 0;  // the word embedding's (a tied head's copy, on another rank)
    double embedding_bytes = 0;   // its parameter bytes (the tied copies' gradient all-reduce)
    double out_bytes = 0;  // stage boundary activation
    std::vector<double> layer_param_bytes;  // for ZeRO-3 gathers
  };
  const LayerCosts& costs(int64_t mbs, int tp, int ep, bool sp, int cp,
                          plan::CpCommType cp_comm);
  double comm_ns(compiler::CommKind k, int64_t bytes, int group, int nodes);
  // NCCL's buffers of a device of each pipeline rank (`rank_of`: each chunk's rank, per
  // pipeline direction; `experts`: the chunks with MoE layers).
  std::vector<int64_t> nccl_per_rank(const Resolved& r, const std::vector<std::vector<int>>& rank_of,
                                     const std::vector<char>& experts,
                                     plan::CpCommType cp_comm) const;

  plan::Plan plan_;
  std::shared_ptr<const cost::CostModel> cm_;
  std::map<std::tuple<int64_t, int, int, bool, int, plan::CpCommType>, LayerCosts> cache_;
};

/// Search's pruning rule (docs/sweeps.md "How search works"): a point is kept when its
/// estimated device total (peak_device_bytes) is within 10 % over the cap, the estimate's
/// margin (it leaves out the caching allocator's rounding and fragmentation, which the
/// simulator's reserved bytes have).
bool estimated_to_fit(const Estimate& e, double cap_bytes);

/// One-shot estimate of a plan (builds an Estimator; for sweeps' estimate column).
Expected<Estimate> estimate(const plan::Plan& plan, const Resolved& r);

}  // namespace stretto::explore
