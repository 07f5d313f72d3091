#pragma once
// The plan file (DESIGN.md §2): model + cluster + costmodel + schedule.
//
// `parse_plan` turns a JSON document into these value types, checking every field, and
// reporting each problem with its location (file:line:col and JSON pointer) and a hint.
// All diagnostics are collected before failing. Nothing here expands or compiles; see
// model.h, cluster.h and compiler.h for that.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stretto/support/diag.h"
#include "stretto/plan/json_source.h"
#include "stretto/plan/tags.h"

namespace stretto::plan {

enum class DType : uint8_t { kFP32, kBF16, kFP16, kFP8 };
int dtype_bytes(DType d);

struct MoeSpec {
  int experts = 0;
  int top_k = 1;
  int64_t expert_ffn_hidden = 0;
  int shared_experts = 0;
  /// Which layers are MoE: every `every`-th layer starting at `first` (default: all).
  int first_layer = 0;
  int every = 1;
  /// Tokens an expert may take, as a multiple of the balanced share T*top_k/experts
  /// (GShard / Switch capacity). 0 = no capacity limit (dropless). With a limit, expert GEMMs
  /// and all-to-alls are padded to it.
  double capacity_factor = 0;
  /// Which tokens an expert over its capacity keeps (Megatron-Core's --moe-token-drop-policy):
  /// the highest routing probabilities (its default) or the first in sequence order. The count
  /// kept is the capacity either way, so costs do not depend on it; the replay runs it.
  enum class DropPolicy : uint8_t { kProbs, kPosition } token_drop_policy = DropPolicy::kProbs;
  /// Routing imbalance: tokens of the busiest expert over the mean (1 = balanced). The busiest
  /// expert sets the grouped-GEMM time and the all-to-all size; capped by capacity_factor.
  double imbalance = 1.0;
  /// Load factor the expert GEMMs and all-to-alls are sized by (see above).
  double load_factor() const {
    return capacity_factor > 0 ? capacity_factor : imbalance;
  }
};

/// Core attention implementation: fused flash attention (never materialises the s x s scores)
/// or the unfused 2021-22 Megatron path (QK^T and AV batched GEMMs over the dense s x s matrix,
/// a fused scale-mask-softmax kernel and dropout on the probabilities).
enum class AttentionImpl : uint8_t { kFlash, kUnfused };

struct ModelSpec {
  enum class Family : uint8_t { kTransformer, kSynthetic } family = Family::kTransformer;
  std::string name;
  // transformer
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // 0 = heads (MHA)
  /// Width of one attention head (Megatron's --kv-channels): Qwen3 and Gemma use head_dim !=
  /// hidden / heads. 0 = hidden / heads (attention_head_dim() gives the value in use).
  int64_t head_dim = 0;
  /// Megatron-LM's --make-vocab-size-divisible-by: the vocabulary is padded to a multiple of
  /// this x the TP degree of the embedding and head.
  int64_t vocab_divisible_by = 128;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  int64_t microbatch_size = 1;
  DType dtype = DType::kBF16;
  bool gated_mlp = true;  // SwiGLU-style (3 weight matrices) vs GELU (2)
  bool tie_embeddings = false;
  AttentionImpl attention = AttentionImpl::kFlash;
  bool bias = false;     // biases on every linear layer and LayerNorm (GPT-2/3) vs none (RMSNorm)
  double dropout = 0;    // hidden and attention dropout probability; 0 = no dropout kernels
  /// The input gradient's TP all-reduce (reduce-scatter with SP) of a column-parallel linear
  /// runs asynchronously beside its weight-gradient GEMM, as in Megatron-LM since 2022
  /// (ColumnParallelLinearWithAsyncAllreduce; Megatron-Core's and Transformer Engine's
  /// linears). false: it follows both GEMMs, as in 2021 Megatron-LM's ColumnParallelLinear
  /// (copy_to_tensor_model_parallel_region's backward).
  bool async_tp_grad_reduce = true;
  std::optional<MoeSpec> moe;
  // synthetic: `layers` identical regions
  int64_t activation_bytes = 0;  // saved for backward per region per microbatch
  int64_t param_bytes = 0;       // per region
  int64_t boundary_bytes = 0;    // activation sent to the next region
  double flops = 0;              // forward FLOPs per region per microbatch (backward = 2x)
  // both
  int pp_regions = 1;
  /// Layers per PP region when given as a list (`"pp_regions": [7, 8, 8, 9]`); empty = even split
  /// (region i holds layers [floor(i*L/N), floor((i+1)*L/N))).
  std::vector<int> region_layers;
  std::string pointer = "/model";

  /// The head width in use: head_dim, or hidden / heads when the plan leaves it out.
  int64_t attention_head_dim() const {
    return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0);
  }
};

struct LinkSpec {
  double bandwidth_GBps = 0;  // per direction, per device
  double latency_us = 0;
};

struct DeviceSpec {
  std::string kind;        // "h100-sxm", ...
  double peak_tflops = 0;  // dense BF16/FP16 tensor-core peak
  double hbm_GBps = 0;
  double memory_GiB = 0;
  int sms = 0;
  // Device memory outside PyTorch's caching allocator (docs/semantics.md "Memory outside the
  // allocator"): the CUDA context of the process, and the channels NCCL runs per communicator.
  double cuda_context_MiB = 0;
  int nccl_channels = 0;
};

struct ClusterSpec {
  std::string preset;
  int nodes = 1;
  int devices_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node;
  LinkSpec inter_node;
  int islands = 1;  // nodes are split evenly into islands joined by `dcn`
  LinkSpec dcn;
  /// Saturates at INT32_MAX (nodes x devices_per_node may overflow int; such clusters are
  /// refused by check_plan_sizes, estimate.h).
  int num_devices() const {
    const int64_t n = int64_t{nodes} * devices_per_node;
    return n > INT32_MAX ? INT32_MAX : static_cast<int>(n);
  }
  std::string pointer = "/cluster";
};

struct CostModelSpec {
  enum class Kind : uint8_t { kAnalytic, kProfiled, kFixed } kind = Kind::kAnalytic;
  // fixed: per-pass constants in `unit` (converted to ns here)
  int64_t f_ns = 0, b_ns = 0, bi_ns = 0, bw_ns = 0, comm_ns = 0;
  std::string profile;  // profiled: path of the table (relative to the plan file)
  Json options;         // everything else, passed through to the cost model (interference etc.)
  std::string pointer = "/costmodel";
};

enum class DirectiveOp : uint8_t {
  kPlace,
  kReplicate,
  kShard,
  kShardTensor,
  kSplit,
  kOrder,
  kRecompute,
};

/// Activation recomputation (Megatron / torch.utils.checkpoint). `full`: every matching op keeps
/// only the input of its checkpoint segment (the ops of one PP region and layer) after its
/// forward, and the whole segment's forward re-runs right before the segment's backward.
/// `selective` (Korthikanti et al. 2022): only the core attention re-runs; its s x s scores,
/// softmax output and dropout mask are not kept.
enum class RecomputeMode : uint8_t { kFull, kSelective };
/// Context parallelism's communication (Transformer Engine's cp_comm_type, Megatron-Core's
/// --cp-comm-type): the K/V ring (p2p), K/V all-gathered before the attention (all_gather), or
/// all-to-alls of Q/K/V and the output (a2a, DeepSpeed-Ulysses).
enum class CpCommType : uint8_t { kP2P, kAllGather, kA2A };
std::string_view cp_comm_type_name(CpCommType t);
std::string_view directive_op_name(DirectiveOp op);

struct Directive {
  DirectiveOp op = DirectiveOp::kPlace;
  int index = 0;        // position in schedule[]
  std::string pointer;  // "/schedule/3"
  Filter filter;        // place/replicate/shard/shard_tensor/split
  std::vector<int> devices;
  std::vector<std::vector<int>> device_groups;  // shard_tensor: TP groups
  std::string stream;                           // place/shard/shard_tensor
  std::string reduce_stream, gather_stream;     // replicate
  double bucket_size_MB = 25.0;                 // replicate (PyTorch DDP default)
  bool shard_grads = false;                     // ZeRO-2
  bool shard_params = false;                    // ZeRO-3
  bool shard_optimizer = false;                 // ZeRO-1 (implied by the two above)
  int context_parallel = 1;  // replicate: every cp consecutive devices form one CP group
  CpCommType cp_comm_type = CpCommType::kP2P;  // replicate, with context_parallel
  bool sequence_parallel = false;               // shard_tensor
  bool tp_comm_overlap = false;                 // shard_tensor (needs sequence_parallel)
  int prefetch = 1;                 // replicate + shard_params: FSDP units gathered ahead
  bool reshard_after_forward = true;  // replicate + shard_params: free after F, regather for B
  RecomputeMode recompute = RecomputeMode::kFull;  // recompute
  std::string dim_name;                         // split
  int num_microbatches = 1;                     // split
  std::vector<std::vector<Filter>> groups;      // order
};

/// Layout shorthand of a builder call (layout.h): parallel degrees and rank order.
struct Layout {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  int cp = 1;  // context parallelism: next to TP, outside it (Megatron-Core's tp-cp-dp-pp)
  CpCommType cp_comm_type = CpCommType::kP2P;  // replicate's
  std::vector<std::string> order = {"tp", "dp", "pp"};  // innermost first (Megatron)
  int zero = 0;                                        // 0-3: replicate's ZeRO level
  bool sequence_parallel = false;                      // shard_tensor's
  bool tp_comm_overlap = false;                        // shard_tensor's
  std::string pointer;                                 // "/schedule/layout"
};

/// A builder call instead of hand-written directives (issue: schedule builders).
struct BuilderCall {
  std::string builder;
  int ranks = 0;            // 0: inferred from the base placement
  int stages_per_rank = 0;  // 0: the family's default (1, or 2 for V schedules)
  int microbatches = 0;
  std::vector<Directive> base;
  std::optional<Layout> layout;  // generates the base (layout.h)
  std::string pointer = "/schedule";
};

/// Top-level `optimizer`: the step each device runs after its last gradient reduction, over its
/// own (ZeRO-sharded) parameter shard; `grad_clip` adds the global gradient-norm all-reduce.
struct OptimizerSpec {
  enum class Kind : uint8_t { kAdam, kSgd, kNone } kind = Kind::kAdam;
  bool master_weights = true;  // fp32 master copy (mixed precision) for 16-bit models
  bool grad_clip = true;
  bool given = false;  // false: the plan has no `optimizer` (no step is modelled)
  /// Whether the step keeps an fp32 master copy: `master_weights` on a model whose parameters
  /// are narrower than fp32 (an fp32 model's weights are their own master).
  bool keeps_master(int dtype_bytes) const;
  /// Bytes of optimizer state per parameter: fp32 master weights (4) if kept, plus Adam's two
  /// moments or SGD's momentum in fp32 (with master weights) or the model dtype (without).
  int64_t state_bytes_per_param(int dtype_bytes) const;
  /// HBM bytes the step moves per parameter (see model.cpp: optimizer_step_bytes).
  int64_t step_bytes_per_param(int dtype_bytes) const;
  /// HBM bytes the step moves per parameter as an unfused optimizer runs it, one pass per
  /// elementwise op (what kernel_style eager prices; step_bytes_per_param is the fused step).
  int64_t unfused_step_bytes_per_param(int dtype_bytes) const;
  std::string pointer = "/optimizer";
};

struct Plan {
  std::string file;
  OptimizerSpec optimizer;
  ModelSpec model;
  ClusterSpec cluster;
  CostModelSpec costmodel;
  std::vector<Directive> schedule;
  std::optional<BuilderCall> builder;
};

/// Parses a whole plan. `src` keeps positions for later (compile-time) diagnostics.
Expected<Plan> parse_plan(const JsonSource& src);
/// Parses a plan's `costmodel` alone, as parse_plan does (the defaults when the plan has none),
/// and reads nothing else: equal to parse_plan(src)->costmodel, with the same diagnostics, when
/// the rest of the plan parses (an edit of the cost model alone: plan::same_but_costmodel).
Expected<CostModelSpec> parse_costmodel(const JsonSource& src);
/// A plan's `schedule`: a directive list, or a builder call (not expanded; pipelines'
/// expand_builder does that).
struct Schedule {
  std::vector<Directive> directives;
  std::optional<BuilderCall> builder;
};
/// Parses the schedule at `pointer`: a builder call when it is an object, else a directive list.
Expected<Schedule> parse_schedule(const JsonSource& src, const std::string& pointer);
/// Parses one builder call object (`{"builder", "ranks", "stages_per_rank", "microbatches",
/// "base", "layout"}`) at `pointer`.
Expected<BuilderCall> parse_builder_call(const JsonSource& src, const std::string& pointer);
/// Whether `j` looks like a plan (an object with a `schedule`), as opposed to a trace or a
/// result; and a whole plan (with a `model` too), as opposed to a directive-list file.
bool is_plan_document(const Json& j);
bool is_whole_plan(const Json& j);
/// Whether `a` and `b` are plan objects with equal members, "costmodel" aside: an edit between
/// them changes the cost model only (added, removed or changed), so the compiled plan stands
/// unless eager_kernel_style() changes with it.
bool same_but_costmodel(const Json& a, const Json& b);
/// Whether the cost model is the analytic one with `"kernel_style": "eager"` (any case): an
/// unfused PyTorch program, which the cost model prices and whose saved activations the
/// compiler counts (docs/semantics.md, "Saved activations of an eager program"). The one
/// reader of that key outside the cost model.
bool eager_kernel_style(const CostModelSpec& cm);
/// The vocabulary as Megatron-LM pads it (_vocab_size_with_padding): the next multiple of
/// make_vocab_size_divisible_by x `tp`, the TP degree of the embedding and head; unchanged for
/// models other than transformers and for no vocabulary. The compiler's and the search
/// estimate's one rule.
int64_t padded_vocab(const ModelSpec& m, int tp);
/// The plan's top-level `name` ("" when it has none).
std::string plan_name(const JsonSource& src);
/// Parses one directive list (a JSON array), e.g. a `--base` file or builder output.
Expected<std::vector<Directive>> parse_directives(const JsonSource& src,
                                                  const std::string& pointer);

/// Serialises directives back to the plan's JSON form (round-trips through parse_directives).
Json directives_to_json(const std::vector<Directive>& ds);
Json filter_to_json(const Filter& f);

}  // namespace stretto::plan
