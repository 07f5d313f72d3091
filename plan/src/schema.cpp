// The plan's schema table (schema.h) and the JSON Schema generated from it.
#include "stretto/plan/schema.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "stretto/support/diag.h"

namespace stretto::plan {

std::string_view value_source_name(ValueSource s) {
  switch (s) {
    case ValueSource::kPlan:
      return "plan";
    case ValueSource::kLayout:
      return "layout";
    case ValueSource::kDirectives:
      return "directives";
    case ValueSource::kBuilder:
      return "builder";
    case ValueSource::kPreset:
      return "preset";
    case ValueSource::kDefault:
      return "default";
    case ValueSource::kDerived:
      return "derived";
  }
  return "default";
}

namespace {

using K = KeyType;
using R = Requirement;
using S = ValueSource;
constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr std::string_view kFamilies[] = {"transformer", "synthetic"};
constexpr std::string_view kDTypes[] = {"bf16", "fp16", "fp32", "fp8"};
constexpr std::string_view kAttention[] = {"flash", "unfused"};
constexpr std::string_view kTokenDropPolicies[] = {"probs", "position"};
constexpr std::string_view kPresets[] = {"h100-sxm", "h200", "a100-sxm", "cpu"};
constexpr std::string_view kCostKinds[] = {"analytic", "profiled", "fixed"};
constexpr std::string_view kKernelStyles[] = {"fused", "eager", "roofline"};
constexpr std::string_view kUnits[] = {"ns", "us", "ms", "s"};
constexpr std::string_view kOptimizers[] = {"adam", "sgd", "none"};
constexpr std::string_view kOrders[] = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp",
                                        "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};
constexpr std::string_view kRecompute[] = {"full", "selective"};
constexpr std::string_view kCpComm[] = {"p2p", "all_gather", "a2a"};  // plan.h CpCommType
constexpr std::string_view kPasses[] = {"F", "B", "BI", "BW"};
constexpr std::string_view kNcclArch[] = {"volta", "ampere", "hopper", "blackwell"};
constexpr std::string_view kNcclIntraLink[] = {"nvlink", "pci"};
constexpr std::string_view kNcclCpu[] = {"intel", "amd"};

// JSON Schema fragments of the values a type and a range do not describe.
constexpr std::string_view kDeviceList =
    R"({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 16777216}})";
constexpr std::string_view kFactor = R"({"type": "number", "minimum": 0.25, "maximum": 4})";

// The table. Within a section, keys are in the parser's order (hints list them so).
constexpr PlanKey kKeys[] = {
    // ---- the top level
    {.section = "plan", .key = "model", .type = K::kObject, .requirement = R::kRequired,
     .section_ref = "model", .doc = "what is trained"},
    {.section = "plan", .key = "cluster", .type = K::kObject, .requirement = R::kRequired,
     .section_ref = "cluster", .doc = "where: devices, nodes and links"},
    {.section = "plan", .key = "costmodel", .type = K::kObject, .fallback = R"({"kind": "analytic"})",
     .section_ref = "costmodel", .doc = "how long ops and collectives take"},
    {.section = "plan", .key = "schedule", .type = K::kOther, .requirement = R::kRequired,
     .schema = R"({"oneOf": [{"type": "array", "items": {"$ref": "#/definitions/directive"}},
                             {"$ref": "#/definitions/builder"}]})",
     .doc = "a list of directives, or a builder call"},
    {.section = "plan", .key = "name", .type = K::kString, .doc = "free text"},
    {.section = "plan", .key = "comment", .type = K::kString, .doc = "free text"},
    {.section = "plan", .key = "optimizer", .type = K::kObject, .section_ref = "optimizer",
     .doc = "the optimizer step after the last gradient reduction; without this key no step "
            "is modelled"},

    // ---- model
    {.section = "model", .key = "family", .type = K::kEnum, .choices = kFamilies,
     .requirement = R::kRequired,
     .doc = "a decoder-only transformer (dense or MoE), or a chain of identical regions"},
    {.section = "model", .key = "name", .type = K::kString, .doc = "free text"},
    {.section = "model", .key = "layers", .type = K::kInteger, .min = 1, .max = 1e5,
     .requirement = R::kRequired, .doc = "transformer layers, or synthetic regions"},
    {.section = "model", .key = "hidden", .type = K::kInteger, .min = 1, .max = 1e7,
     .requirement = R::kConditional, .doc = "model width; divisible by heads unless head_dim is given; required", .applies = "transformer"},
    {.section = "model", .key = "heads", .type = K::kInteger, .min = 1, .max = 1e5,
     .requirement = R::kConditional, .doc = "attention heads; every TP degree must divide it, as Megatron splits attention by heads; required", .applies = "transformer"},
    {.section = "model", .key = "kv_heads", .type = K::kInteger, .min = 1, .max = 1e5,
     .when_absent = S::kDerived, .doc = "key/value heads (GQA); divides heads, and every TP degree must divide it too; default heads", .applies = "transformer"},
    {.section = "model", .key = "head_dim", .type = K::kInteger, .min = 1, .max = 1e5,
     .when_absent = S::kDerived,
     .doc = "width of one attention head (Megatron's --kv-channels; Qwen3-32B: 64 heads of 128 at hidden 5,120); default hidden / heads. The QKV GEMM maps hidden to (heads + 2 kv_heads) x head_dim, and core attention's FLOPs and saved tensors use heads x head_dim",
     .applies = "transformer"},
    {.section = "model", .key = "ffn_hidden", .type = K::kInteger, .min = 1, .max = 1e8,
     .requirement = R::kConditional,
     .doc = "MLP width of the dense layers; required unless every layer is an MoE layer (moe.first_layer 0, moe.every 1)", .applies = "transformer"},
    {.section = "model", .key = "vocab", .type = K::kInteger, .min = 1, .max = 1e8,
     .requirement = R::kConditional, .doc = "vocabulary size before padding: the embedding, head and loss use it padded up to a multiple of make_vocab_size_divisible_by x the TP degree, as Megatron-LM allocates them (50,257 -> 50,304 without TP, 50,304 -> 51,200 at TP 8); required", .applies = "transformer"},
    {.section = "model", .key = "make_vocab_size_divisible_by", .type = K::kInteger, .min = 1,
     .max = 1e8, .fallback = "128",
     .doc = "Megatron-LM's --make-vocab-size-divisible-by (its default is 128): the padding multiple of vocab before the TP degree; 1 pads only to a multiple of the TP degree", .applies = "transformer"},
    {.section = "model", .key = "seq_len", .type = K::kInteger, .min = 1, .max = 1e8,
     .requirement = R::kConditional, .doc = "tokens per sequence; required", .applies = "transformer"},
    {.section = "model", .key = "microbatch_size", .type = K::kInteger, .min = 1, .max = 1e7,
     .fallback = "1", .doc = "sequences per microbatch"},
    {.section = "model", .key = "dtype", .type = K::kEnum, .choices = kDTypes,
     .fallback = R"("bf16")", .doc = "activations and weights. fp8 is Transformer Engine's recipe: GEMMs in fp8 at the fp8 peak, weights and gradients in bf16, fp32 master weights and optimizer state as for bf16, plus 2 B per linear-layer parameter for TE's cached fp8 weight copies"},
    {.section = "model", .key = "gated_mlp", .type = K::kBoolean, .fallback = "true",
     .doc = "SwiGLU-style MLP (3 weight matrices) instead of GELU (2)", .applies = "transformer"},
    {.section = "model", .key = "tie_embeddings", .type = K::kBoolean, .fallback = "false",
     .doc = "the output layer shares the embedding's weights; with the head on other devices than the embedding, the two copies' gradients are all-reduced", .applies = "transformer"},
    {.section = "model", .key = "moe", .type = K::kObject, .section_ref = "moe",
     .doc = "MoE layers; their expert blocks are tagged EP", .applies = "transformer"},
    {.section = "model", .key = "pp_regions", .type = K::kOther, .min = 1, .max = 1e5,
     .fallback = "1",
     .schema = R"({"oneOf": [
         {"type": "integer", "minimum": 1, "maximum": 100000,
          "description": "N regions, layers split evenly"},
         {"type": "array", "minItems": 1, "maxItems": 100000,
          "items": {"type": "integer", "minimum": 0, "maximum": 100000},
          "description": "layers per region, summing to 'layers'; only the first and last entry may be 0"}]})",
     .doc = "the layers cut into N contiguous regions tagged PP=0..N-1, one per pipeline stage: a count N (at most layers) splits them evenly, a list gives each region's layers, sums to layers, and may be 0 only in its first and last entry. The embedding belongs to the first region; the final norm, head and loss to the last"},
    {.section = "model", .key = "activation_bytes", .type = K::kNumber, .min = 0, .max = 1e15,
     .fallback = "0", .doc = "synthetic: bytes saved for the backward per region and microbatch", .applies = "synthetic"},
    {.section = "model", .key = "param_bytes", .type = K::kNumber, .min = 0, .max = 1e15,
     .fallback = "0", .doc = "synthetic: parameter bytes per region", .applies = "synthetic"},
    {.section = "model", .key = "boundary_bytes", .type = K::kNumber, .min = 0, .max = 1e15,
     .fallback = "0", .doc = "synthetic: activation bytes sent to the next region", .applies = "synthetic"},
    {.section = "model", .key = "flops", .type = K::kNumber, .min = 0, .max = 1e20,
     .fallback = "0", .doc = "synthetic: forward FLOPs per region and microbatch (backward 2x)", .applies = "synthetic"},
    {.section = "model", .key = "attention", .type = K::kEnum, .choices = kAttention,
     .fallback = R"("flash")",
     .doc = "core attention: one fused flash kernel, or Megatron-LM's unfused path (QK^T over the dense s x s matrix, softmax with dropout when dropout > 0, and PV), which keeps the s x s scores for the backward", .applies = "transformer"},
    {.section = "model", .key = "bias", .type = K::kBoolean, .fallback = "false",
     .doc = "biases on every linear layer, and LayerNorm (weight and bias, 2h per norm) instead of RMSNorm (h)", .applies = "transformer"},
    {.section = "model", .key = "dropout", .type = K::kNumber, .min = 0, .max = 0.999999,
     .fallback = "0",
     .doc = "hidden and attention dropout probability; > 0 adds the masks' traffic and memory (1 byte per element) to the bias-dropout-add kernels and, with unfused attention, a dropout over the s x s probabilities. 0 = no dropout kernels", .applies = "transformer"},
    {.section = "model", .key = "async_tp_grad_reduce", .type = K::kBoolean, .fallback = "true",
     .doc = "the TP all-reduce (reduce-scatter with sequence parallelism) of a column-parallel linear's input gradient runs beside its weight-gradient GEMM, as Megatron-LM has done since 2022 (ColumnParallelLinearWithAsyncAllreduce, later LinearWithGradAccumulationAndAsyncCommunication; Megatron-Core, Transformer Engine). false: it follows both GEMMs, as in 2021 Megatron-LM (ColumnParallelLinear's copy_to_tensor_model_parallel_region)", .applies = "transformer"},

    // ---- model.moe
    {.section = "moe", .key = "experts", .type = K::kInteger, .min = 1, .max = 1e6,
     .requirement = R::kRequired, .doc = "routed experts"},
    {.section = "moe", .key = "top_k", .type = K::kInteger, .min = 1, .max = 1e4, .fallback = "1",
     .doc = "experts per token"},
    {.section = "moe", .key = "expert_ffn_hidden", .type = K::kInteger, .min = 1, .max = 1e8,
     .requirement = R::kRequired, .doc = "MLP width of one expert"},
    {.section = "moe", .key = "shared_experts", .type = K::kInteger, .min = 0, .max = 1e4,
     .fallback = "0", .doc = "experts every token goes through"},
    {.section = "moe", .key = "first_layer", .type = K::kInteger, .min = 0, .max = 1e5,
     .fallback = "0", .doc = "the first MoE layer"},
    {.section = "moe", .key = "every", .type = K::kInteger, .min = 1, .max = 1e5, .fallback = "1",
     .doc = "layers first_layer, first_layer + every, ... are MoE layers"},
    {.section = "moe", .key = "capacity_factor", .type = K::kNumber, .min = 0, .max = 1e4,
     .fallback = "0",
     .doc = "tokens per expert padded to capacity_factor x the balanced share T*k/E (GShard/Switch capacity), which sizes the expert GEMMs and the all-to-alls; 0 = no capacity (dropless)"},
    {.section = "moe", .key = "token_drop_policy", .type = K::kEnum, .choices = kTokenDropPolicies,
     .fallback = R"("probs")",
     .doc = "with a capacity_factor, which of an expert's tokens over its capacity are dropped (Megatron-Core's --moe-token-drop-policy, default probs): probs keeps the tokens with the highest routing probabilities, position the first ones. Both keep the same number of tokens, so the cost model prices them alike; the replay runs the one given. Without a capacity_factor it is an error (dropless routing drops no token)"},
    {.section = "moe", .key = "imbalance", .type = K::kNumber, .min = 1, .max = 1e4,
     .fallback = "1",
     .doc = "the busiest expert's tokens over the mean (1 = balanced); it sets the grouped GEMM's time when there is no capacity_factor"},

    // ---- cluster (a preset fills what the plan does not write)
    {.section = "cluster", .key = "preset", .type = K::kEnum, .choices = kPresets,
     .fallback = R"("h100-sxm")", .doc = "device and link numbers from the vendor data sheets"},
    {.section = "cluster", .key = "nodes", .type = K::kInteger, .min = 1, .max = 1e6,
     .fallback = "1", .doc = "nodes"},
    {.section = "cluster", .key = "devices_per_node", .type = K::kInteger, .min = 1, .max = 1e4,
     .when_absent = S::kPreset, .doc = "devices per node; device d is on node floor(d / devices_per_node)"},
    {.section = "cluster", .key = "peak_tflops", .type = K::kNumber, .min = 1e-6, .max = 1e7,
     .when_absent = S::kPreset, .doc = "dense BF16/FP16 tensor-core peak per device"},
    {.section = "cluster", .key = "hbm_GBps", .type = K::kNumber, .min = 1e-6, .max = 1e7,
     .when_absent = S::kPreset, .doc = "memory bandwidth per device"},
    {.section = "cluster", .key = "memory_GiB", .type = K::kNumber, .min = 1e-6, .max = 1e7,
     .when_absent = S::kPreset, .doc = "memory capacity per device; a device total (reserved bytes, CUDA context, NCCL buffers) beyond it is reported as over_capacity"},
    {.section = "cluster", .key = "sms", .type = K::kInteger, .min = 1, .max = 1e5,
     .when_absent = S::kPreset, .doc = "streaming multiprocessors"},
    {.section = "cluster", .key = "cuda_context_MiB", .type = K::kNumber, .min = 0, .max = 1e7,
     .when_absent = S::kPreset,
     .doc = "device memory the CUDA context of each process holds, outside PyTorch's caching allocator; h100-sxm, h200, a100-sxm 400 (pytorch/pytorch#109888, lazy module loading), cpu 0"},
    {.section = "cluster", .key = "nccl_channels", .type = K::kInteger, .min = 0, .max = 1024,
     .when_absent = S::kPreset,
     .doc = "channels NCCL runs per communicator, each with its own buffers per peer; GPU presets 16 (NCCL's log on 8-GPU Hopper nodes), cpu 0 (no NCCL)"},
    {.section = "cluster", .key = "intra_node", .type = K::kObject, .when_absent = S::kPreset,
     .section_ref = "link", .doc = "NVLink, per direction per device (h100-sxm: {\"bandwidth_GBps\": 450, \"latency_us\": 2})"},
    {.section = "cluster", .key = "inter_node", .type = K::kObject, .when_absent = S::kPreset,
     .section_ref = "link", .doc = "the NIC of each device (h100-sxm: {\"bandwidth_GBps\": 50, \"latency_us\": 5})"},
    {.section = "cluster", .key = "islands", .type = K::kInteger, .min = 1, .max = 1e6,
     .fallback = "1", .doc = "nodes split evenly into islands joined by dcn"},
    {.section = "cluster", .key = "dcn", .type = K::kObject, .when_absent = S::kDerived,
     .section_ref = "link", .doc = "the link between islands; default inter_node / 4, 20 us"},

    // ---- a link
    {.section = "link", .key = "bandwidth_GBps", .type = K::kNumber, .min = 1e-6, .max = 1e6,
     .when_absent = S::kPreset, .doc = "per direction, per device, GB/s"},
    {.section = "link", .key = "latency_us", .type = K::kNumber, .min = 0, .max = 1e7,
     .when_absent = S::kPreset, .doc = "microseconds"},

    // ---- costmodel: the plan's keys, the fixed model's, then the analytic model's options
    // (costmodel/src/analytic.cpp reads them with these ranges; docs/costmodel.md)
    {.section = "costmodel", .key = "kind", .type = K::kEnum, .choices = kCostKinds,
     .requirement = R::kRequired,
     .doc = "analytic (roofline compute and an NCCL-like collective model), profiled (measured times, interpolated, falling back to the analytic model) or fixed (per-pass constants)"},
    {.section = "costmodel", .key = "profile", .type = K::kString, .requirement = R::kConditional,
     .doc = "profiled: the measured table, relative to the plan file"},
    {.section = "costmodel", .key = "F", .type = K::kNumber, .min = 0, .max = 1e12,
     .requirement = R::kConditional, .doc = "fixed: a forward pass, in unit (required)", .applies = "fixed"},
    {.section = "costmodel", .key = "B", .type = K::kNumber, .min = 0, .max = 1e12,
     .requirement = R::kConditional, .doc = "fixed: a whole backward pass (required)", .applies = "fixed"},
    {.section = "costmodel", .key = "BI", .type = K::kNumber, .min = 0, .max = 1e12,
     .when_absent = S::kDerived, .doc = "fixed: backward for inputs; default B / 2", .applies = "fixed"},
    {.section = "costmodel", .key = "BW", .type = K::kNumber, .min = 0, .max = 1e12,
     .when_absent = S::kDerived, .doc = "fixed: backward for weights; default B - BI", .applies = "fixed"},
    {.section = "costmodel", .key = "comm", .type = K::kNumber, .min = 0, .max = 1e12,
     .fallback = "0", .doc = "fixed: every communication op", .applies = "fixed"},
    {.section = "costmodel", .key = "unit", .type = K::kEnum, .choices = kUnits,
     .fallback = R"("ms")", .doc = "fixed: the unit of F, B, BI, BW and comm", .applies = "fixed"},
    {.section = "costmodel", .key = "gemm_efficiency", .type = K::kNumber, .min = 0, .max = 1,
     .min_exclusive = true, .when_absent = S::kPreset,
     .doc = "analytic: asymptotic GEMM fraction of peak; default h100-sxm 0.711, h200 0.704 (measured), else 0.80. A GEMM's efficiency is this asymptote x SM fill x depth kd/(kd + gemm_k_half)"},
    {.section = "costmodel", .key = "attention_efficiency", .type = K::kNumber, .min = 0,
     .max = 1, .min_exclusive = true, .when_absent = S::kPreset,
     .doc = "analytic: flash attention's asymptotic fraction of peak; default h100-sxm 0.711, "
            "h200 0.701 (measured), else 0.40"},
    {.section = "costmodel", .key = "attention_seq_half", .type = K::kNumber, .min = 0,
     .when_absent = S::kPreset,
     .doc = "analytic: sequence length at which flash attention reaches half its asymptote (x s/(s + attention_seq_half)); default h100-sxm 646, h200 546 (measured), else 0 = no term"},
    {.section = "costmodel", .key = "attention_waves_half", .type = K::kNumber, .min = 0,
     .when_absent = S::kPreset,
     .doc = "analytic: waves of 128-row query blocks over the SMs at which flash attention reaches half its asymptote (x waves/(waves + attention_waves_half)); default h100-sxm 1.17, h200 1.19 (measured), else 0 = no term"},
    {.section = "costmodel", .key = "attention_bwd_ratio", .type = K::kNumber, .min = 0,
     .max = 2, .min_exclusive = true, .when_absent = S::kPreset,
     .doc = "analytic: flash attention's backward efficiency over its forward's (the backward is priced at 2.5x the forward's FLOPs); default h100-sxm 0.835, h200 0.852 (measured), else 1"},
    {.section = "costmodel", .key = "memory_efficiency", .type = K::kNumber, .min = 0, .max = 1,
     .min_exclusive = true, .fallback = "0.9",
     .doc = "analytic: fraction of HBM bandwidth memory-bound kernels reach"},
    {.section = "costmodel", .key = "gemm_tile_m", .type = K::kInteger, .min = 1, .max = 4096,
     .fallback = "128", .doc = "analytic: GEMM tile rows (SM fill)"},
    {.section = "costmodel", .key = "gemm_tile_n", .type = K::kInteger, .min = 1, .max = 4096,
     .fallback = "128", .doc = "analytic: GEMM tile columns (SM fill)"},
    {.section = "costmodel", .key = "gemm_k_half", .type = K::kNumber, .min = 0,
     .when_absent = S::kPreset,
     .doc = "analytic: reduction depth at which a GEMM reaches half its asymptote; default "
            "h100-sxm 188, h200 191 (measured), else 256"},
    {.section = "costmodel", .key = "gemm_split_k_min", .type = K::kNumber, .min = 0,
     .min_exclusive = true, .when_absent = S::kPreset,
     .doc = "analytic: minimum depth per split-K slice; default h100-sxm 157, h200 321 "
            "(measured), else 256"},
    {.section = "costmodel", .key = "wave_quantization", .type = K::kBoolean,
     .when_absent = S::kPreset,
     .doc = "analytic: whole waves of GEMM tiles; default false on h100-sxm and h200 "
            "(measured), else true"},
    {.section = "costmodel", .key = "launch_floor_us", .type = K::kNumber, .min = 0,
     .fallback = "3", .doc = "analytic: the shortest kernel (launch and ramp), microseconds"},
    {.section = "costmodel", .key = "dispatch_us", .type = K::kNumber, .min = 0, .fallback = "5",
     .doc = "analytic: host time to issue one op, microseconds"},
    {.section = "costmodel", .key = "comm_sm_share", .type = K::kNumber, .min = 0, .max = 1,
     .when_absent = S::kDerived,
     .doc = "analytic: fraction of compute a running comm kernel takes; default 20 / the "
            "device's SMs"},
    {.section = "costmodel", .key = "comm_hbm_share", .type = K::kNumber, .min = 0, .max = 1,
     .fallback = "0.1", .doc = "analytic: fraction of HBM bandwidth a running comm kernel takes"},
    {.section = "costmodel", .key = "nccl_algo", .type = K::kString,
     .doc = "analytic: NCCL_ALGO syntax: \"ring,tree\" enables those, \"^tree\" all but those"},
    {.section = "costmodel", .key = "nccl_proto", .type = K::kString,
     .doc = "analytic: NCCL_PROTO syntax: \"simple,ll128\" enables those, \"^ll\" all but those"},
    {.section = "costmodel", .key = "nccl_arch", .type = K::kEnum, .choices = kNcclArch,
     .when_absent = S::kDerived, .doc = "analytic: NCCL's tuning architecture; default from the "
                                        "device kind"},
    {.section = "costmodel", .key = "nccl_intra_link", .type = K::kEnum, .choices = kNcclIntraLink,
     .when_absent = S::kDerived,
     .doc = "analytic: default nvlink when the intra-node link is faster than PCIe 5.0 x16"},
    {.section = "costmodel", .key = "nccl_net_overhead_us", .type = K::kNumber, .min = 0,
     .when_absent = S::kDerived, .doc = "analytic: NCCL's per-step network overhead"},
    {.section = "costmodel", .key = "nccl_net_latency_us", .type = K::kNumber, .min = 0,
     .fallback = "0", .doc = "analytic: latency the network plugin reports"},
    {.section = "costmodel", .key = "nccl_cpu", .type = K::kEnum, .choices = kNcclCpu,
     .fallback = R"("intel")", .doc = "analytic: the host CPU vendor NCCL tunes for"},
    {.section = "costmodel", .key = "p2p_latency_us", .type = K::kNumber, .min = 0,
     .when_absent = S::kDerived,
     .doc = "analytic: fixed latency of a send/recv or all-to-all; default derived"},
    {.section = "costmodel", .key = "kernel_style", .type = K::kEnum, .choices = kKernelStyles,
     .when_absent = S::kPreset,
     .doc = "analytic: how norms, activations, loss and embedding run: fused (Megatron-Core / Transformer Engine kernels), eager (an unfused PyTorch program; the kernels Stretto's CUDA replay calls), both at measured rates and only on h100-sxm and h200, or roofline (memory_efficiency x HBM); default fused on h100-sxm and h200, else roofline"},
    {.section = "costmodel", .key = "nccl_intra_GBps", .type = K::kNumber, .min = 0,
     .min_exclusive = true, .when_absent = S::kDerived,
     .doc = "analytic: intra-node bandwidth NCCL's collectives see (GB/s), never above the link's; default the intra-node bandwidth x NCCL's NVLink ratio (A100 300 -> 240, H100 450 -> 370.8), the link's own when it is not NVLink. Send/recv and all-to-all keep the link's bandwidth"},
    {.section = "costmodel", .key = "sustained_clock_ratio", .type = K::kNumber, .min = 0,
     .max = 1, .min_exclusive = true, .when_absent = S::kDerived,
     .doc = "analytic: sustained tensor-core clock under a training load over the data-sheet peak's clock, multiplying the peak in the GEMM and attention rooflines; default 1305/1410 = 0.926 on A100, else 1"},
    {.section = "costmodel", .key = "host_cores", .type = K::kNumber, .min = 0, .max = 4096,
     .fallback = "0",
     .doc = "analytic: cores one node's CPU-process devices share (a node with more devices than cores time-shares them); 0 = not limited. stretto profile --device cpu records the host's cores"},
    {.section = "costmodel", .key = "host_compute", .type = K::kBoolean,
     .when_absent = S::kDerived,
     .doc = "analytic: compute runs on the thread that issues the device's ops (a CPU process), so the next op is issued only after the previous compute op ended; default true for device kind cpu, else false"},
    {.section = "costmodel", .key = "host_op_us", .type = K::kNumber, .min = 0, .max = 1e6,
     .fallback = "0",
     .doc = "analytic: with host_compute, host-thread time per op issued, outside the ops' own times, paid before the device's next compute op (stretto profile --device cpu measures it)"},
    {.section = "costmodel", .key = "host_cold_factor", .type = K::kOther, .min = 0.25, .max = 4,
     .fallback = "1",
     .schema = R"({"oneOf": [{"type": "number", "minimum": 0.25, "maximum": 4},
         {"type": "object", "additionalProperties": false, "properties": {
           "send_recv": {"type": "number", "minimum": 0.25, "maximum": 4},
           "all_reduce": {"type": "number", "minimum": 0.25, "maximum": 4},
           "reduce_scatter": {"type": "number", "minimum": 0.25, "maximum": 4},
           "all_gather": {"type": "number", "minimum": 0.25, "maximum": 4},
           "all_to_all": {"type": "number", "minimum": 0.25, "maximum": 4}}}]})",
     .doc = "analytic: with host_compute, factor on a compute op's time when its device issued communication since its previous compute op: one number, or one per kind of the last such op (send_recv, all_reduce, reduce_scatter, all_gather, all_to_all); 1 = none"},
    {.section = "costmodel", .key = "host_share_efficiency", .type = K::kNumber, .min = 0,
     .max = 1, .min_exclusive = true, .fallback = "1",
     .doc = "analytic: with host_cores, the share of the cores that a node's computing devices "
            "get while they outnumber them; 1 = pure processor sharing"},
    {.section = "costmodel", .key = "host_reuse_factor", .type = K::kOther, .min = 0.25,
     .max = 4, .fallback = "1",
     .schema = R"({"oneOf": [{"type": "number", "minimum": 0.25, "maximum": 4},
         {"type": "array", "minItems": 1, "maxItems": 3,
          "items": {"type": "number", "minimum": 0.25, "maximum": 4}}]})",
     .doc = "analytic: with host_compute, factor on a backward op's time (B, BI, BW) by reuse distance, the number of other microbatches whose forward ran on its device since its own: one for every distance, or [d1, d2, d3] (the last also for larger distances)"},

    // ---- optimizer
    {.section = "optimizer", .key = "kind", .type = K::kEnum, .choices = kOptimizers,
     .fallback = R"("adam")", .doc = "Adam (two moments), SGD with momentum (one), or no step and no state"},
    {.section = "optimizer", .key = "master_weights", .type = K::kBoolean, .fallback = "true",
     .doc = "fp32 master weights (mixed precision) for a 16-bit or fp8 model: 4 B per parameter of state, moments in fp32, and the grad-to-fp32 and weight-to-dtype copies in the step; an fp32 model keeps none (its weights are the master, as Megatron-LM's FP32Optimizer); false: everything in the model's dtype"},
    {.section = "optimizer", .key = "grad_clip", .type = K::kBoolean, .fallback = "true",
     .doc = "global gradient-norm clipping: one fp32 all-reduce over Megatron-Core's group (the model-parallel TP x PP devices of a replica; every device with ZeRO) before any step, and the norm and scaling traffic in the step"},
    {.section = "optimizer", .key = "comment", .type = K::kString, .doc = "free text"},

    // ---- schedule: a builder call
    {.section = "builder", .key = "builder", .type = K::kString, .requirement = R::kRequired,
     .doc = "the schedule family, case-insensitive (torch class names such as ScheduleInterleaved1F1B work too): gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zb-v, dualpipe, dualpipev"},
    {.section = "builder", .key = "ranks", .type = K::kInteger, .min = 1, .max = 1e5,
     .when_absent = S::kLayout, .requirement = R::kConditional,
     .doc = "pipeline ranks; default layout.pp or the base's (required without them)"},
    {.section = "builder", .key = "stages_per_rank", .type = K::kInteger, .min = 1, .max = 1e4,
     .when_absent = S::kBuilder,
     .doc = "stages (model chunks) per rank; default 2 for interleaved-1f1b, looped-bfs, zb-v, dualpipe and dualpipev, else 1"},
    {.section = "builder", .key = "microbatches", .type = K::kInteger, .min = 1, .max = 1e6,
     .requirement = R::kRequired, .doc = "microbatches per step"},
    {.section = "builder", .key = "base", .type = K::kOther, .section_ref = "directive",
     .schema = R"({"type": "array", "items": {"$ref": "#/definitions/directive"}})",
     .doc = "hand-written placement and parallelism directives (instead of layout)"},
    {.section = "builder", .key = "layout", .type = K::kObject, .section_ref = "layout",
     .doc = "parallel degrees: generates the placement"},

    // ---- schedule.layout
    {.section = "layout", .key = "tp", .type = K::kInteger, .min = 1, .max = 1024, .fallback = "1",
     .doc = "tensor-parallel degree (Megatron shard_tensor)"},
    {.section = "layout", .key = "pp", .type = K::kInteger, .min = 1, .max = 4096, .fallback = "1",
     .doc = "pipeline ranks"},
    {.section = "layout", .key = "dp", .type = K::kInteger, .min = 1, .max = 1 << 20,
     .fallback = "1", .doc = "data-parallel replicas"},
    {.section = "layout", .key = "ep", .type = K::kInteger, .min = 1, .max = 1 << 20,
     .fallback = "1", .doc = "expert parallelism: experts spread over a stage's data-parallel replicas; must be 1 or dp"},
    {.section = "layout", .key = "order", .type = K::kEnum, .choices = kOrders,
     .fallback = R"("tp-dp-pp")", .doc = "rank order, innermost first (Megatron's default: TP innermost, PP outermost)"},
    {.section = "layout", .key = "zero", .type = K::kInteger, .min = 0, .max = 3, .fallback = "0",
     .doc = "ZeRO level of the data-parallel replicas (1: optimizer state, 2: + gradients, 3: + parameters)"},
    {.section = "layout", .key = "sequence_parallel", .type = K::kBoolean, .fallback = "false",
     .doc = "Megatron sequence parallelism with TP"},
    {.section = "layout", .key = "cp", .type = K::kInteger, .min = 1, .max = 1024, .fallback = "1",
     .doc = "context-parallel degree (Megatron-Core --context-parallel-size): each sequence split "
            "over cp ranks (2·cp chunks, load-balanced causal ring attention); CP ranks sit next to "
            "TP, outside it (Megatron-Core's tp-cp-dp-pp order); gradients reduce over dp × cp"},
    {.section = "layout", .key = "cp_comm_type", .type = K::kEnum, .choices = kCpComm,
     .fallback = "\"p2p\"",
     .doc = "context parallelism's communication (Megatron-Core --cp-comm-type, Transformer "
            "Engine's cp_comm_type): p2p = K/V ring overlapped with the attention steps; "
            "all_gather = K/V all-gathered before the attention (exposed), dK/dV "
            "reduce-scattered after; a2a = all-to-alls of Q/K/V before and of the output after "
            "(DeepSpeed-Ulysses), needs heads / tp and kv_heads / tp divisible by cp; needs cp > 1"},
    {.section = "layout", .key = "tp_comm_overlap", .type = K::kBoolean, .fallback = "false",
     .doc = "Megatron-Core --tp-comm-overlap: TP collectives overlapped with their GEMMs "
            "(Transformer Engine userbuffers); needs tp > 1 and sequence_parallel"},

    // ---- a filter
    {.section = "filter", .key = "PP", .type = K::kOther,
     .schema = R"({"$ref": "#/definitions/tagValue"})", .doc = "pipeline region"},
    {.section = "filter", .key = "EP", .type = K::kOther,
     .schema = R"({"$ref": "#/definitions/tagValue"})", .doc = "expert block"},
    {.section = "filter", .key = "LAYER", .type = K::kOther,
     .schema = R"({"$ref": "#/definitions/tagValue"})", .doc = "layer"},
    {.section = "filter", .key = "MB", .type = K::kOther,
     .schema = R"({"$ref": "#/definitions/tagValue"})", .doc = "microbatch (after split)"},
    {.section = "filter", .key = "PASS", .type = K::kEnum, .choices = kPasses,
     .doc = "F, B (whole backward), BI (backward for inputs), BW (backward for weights)"},

    // ---- directives, one section per op
    {.section = "place", .key = "op", .type = K::kString, .requirement = R::kRequired, .doc = "run the matching regions on these devices; cross-device edges become send/recv on stream"},
    {.section = "place", .key = "filter", .type = K::kObject, .requirement = R::kRequired,
     .section_ref = "filter", .doc = "the regions to place", .example = "{}"},
    {.section = "place", .key = "devices", .type = K::kOther, .requirement = R::kRequired,
     .schema = kDeviceList, .doc = "one device per data-parallel replica", .example = "[0]"},
    {.section = "place", .key = "stream", .type = K::kString, .fallback = R"("pp")",
     .doc = "the stream of the send/recv at cross-device edges"},
    {.section = "place", .key = "comment", .type = K::kString, .doc = "free text"},

    {.section = "replicate", .key = "op", .type = K::kString, .requirement = R::kRequired, .doc = "data-parallel replicas of the matching regions, with gradient reduction (and ZeRO gathers) as collectives"},
    {.section = "replicate", .key = "filter", .type = K::kObject, .requirement = R::kRequired,
     .section_ref = "filter", .doc = "the regions to replicate", .example = "{}"},
    {.section = "replicate", .key = "devices", .type = K::kOther, .requirement = R::kRequired,
     .schema = kDeviceList, .doc = "the replicas", .example = "[0, 1]"},
    {.section = "replicate", .key = "reduce_stream", .type = K::kString, .fallback = R"("dp")", .doc = "the stream of the gradient reduction"},
    {.section = "replicate", .key = "gather_stream", .type = K::kString, .fallback = R"("dp")", .doc = "the stream of ZeRO's parameter gathers"},
    {.section = "replicate", .key = "bucket_size", .type = K::kNumber, .min = 1e-6, .max = 1e9,
     .fallback = "25", .doc = "gradient bucket, MB (PyTorch DDP's default 25)", .example = "25"},
    {.section = "replicate", .key = "shard_grads", .type = K::kBoolean, .fallback = "false",
     .doc = "ZeRO-2 (implies shard_optimizer)"},
    {.section = "replicate", .key = "shard_params", .type = K::kBoolean, .fallback = "false",
     .doc = "ZeRO-3 (requires shard_grads)"},
    {.section = "replicate", .key = "shard_optimizer", .type = K::kBoolean, .fallback = "false",
     .doc = "ZeRO-1"},
    {.section = "replicate", .key = "prefetch", .type = K::kInteger, .min = 0, .max = 1e6,
     .fallback = "1",
     .doc = "ZeRO-3 (shard_params only): FSDP units (the parameter ops of one PP region and layer) gathered ahead of the one in use, so at most prefetch + 1 units of a region pass are gathered at once"},
    {.section = "replicate", .key = "reshard_after_forward", .type = K::kBoolean,
     .fallback = "true",
     .doc = "ZeRO-3 (shard_params only): free a unit's gathered parameters after its forward and gather them again for the backward (FSDP FULL_SHARD); false: gather each unit once and keep it until its gradient is reduce-scattered (FSDP SHARD_GRAD_OP)"},
    {.section = "replicate", .key = "context_parallel", .type = K::kInteger, .min = 1,
     .max = 1024, .fallback = "1",
     .doc = "context parallelism (Megatron-Core --context-parallel-size): every cp consecutive "
            "devices of the list are one CP group, splitting each sequence over its ranks with "
            "ring attention (K/V exchanged on stream cp); the gradient reduction spans all the "
            "devices (dp × cp); must divide the list and seq_len / 2"},
    {.section = "replicate", .key = "cp_comm_type", .type = K::kEnum, .choices = kCpComm,
     .fallback = "\"p2p\"",
     .doc = "context parallelism's communication (layout cp_comm_type): p2p (K/V ring), "
            "all_gather (K/V all-gathered, exposed) or a2a (Q/K/V and output all-to-alls; "
            "heads / tp and kv_heads / tp divisible by cp); needs context_parallel > 1"},
    {.section = "replicate", .key = "comment", .type = K::kString, .doc = "free text"},

    {.section = "recompute", .key = "op", .type = K::kString, .requirement = R::kRequired, .doc = "activation recomputation (checkpointing) of the matching model ops"},
    {.section = "recompute", .key = "filter", .type = K::kObject, .requirement = R::kRequired,
     .section_ref = "filter", .doc = "the model ops to recompute, without PASS ({\"LAYER\": \"*\"}: every layer)", .example = "{}"},
    {.section = "recompute", .key = "mode", .type = K::kEnum, .choices = kRecompute,
     .fallback = R"("full")",
     .doc = "full: the matching ops of one PP region and layer keep only their input and re-run their forward, collectives included, right before the backward (Megatron's uniform method); selective: only the core attention is recomputed, keeping q, k and v",
     .example = R"("full")"},
    {.section = "recompute", .key = "comment", .type = K::kString, .doc = "free text"},

    {.section = "shard", .key = "op", .type = K::kString, .requirement = R::kRequired, .doc = "split the matching expert blocks across devices, with all-to-all dispatch and combine"},
    {.section = "shard", .key = "filter", .type = K::kObject, .requirement = R::kRequired,
     .section_ref = "filter", .doc = "the expert blocks to split", .example = R"({"EP": "*"})"},
    {.section = "shard", .key = "devices", .type = K::kOther, .requirement = R::kRequired,
     .schema = kDeviceList, .doc = "the devices the expert blocks are split over",
     .example = "[0, 1]"},
    {.section = "shard", .key = "stream", .type = K::kString, .fallback = R"("ep")", .doc = "the stream of the all-to-alls"},
    {.section = "shard", .key = "comment", .type = K::kString, .doc = "free text"},

    {.section = "shard_tensor", .key = "op", .type = K::kString, .requirement = R::kRequired, .doc = "Megatron tensor parallelism of the matching layers"},
    {.section = "shard_tensor", .key = "filter", .type = K::kObject,
     .requirement = R::kRequired, .section_ref = "filter", .doc = "the layers to split", .example = "{}"},
    {.section = "shard_tensor", .key = "devices", .type = K::kOther,
     .requirement = R::kRequired,
     .schema = R"({"type": "array", "items": {"type": "array",
         "items": {"type": "integer", "minimum": 0, "maximum": 16777216}}})",
     .doc = "TP groups, one per placed replica", .example = "[[0, 1]]"},
    {.section = "shard_tensor", .key = "stream", .type = K::kString, .fallback = R"("tp")", .doc = "the stream of the TP collectives"},
    {.section = "shard_tensor", .key = "sequence_parallel", .type = K::kBoolean,
     .fallback = "false", .doc = "Megatron sequence parallelism"},
    {.section = "shard_tensor", .key = "tp_comm_overlap", .type = K::kBoolean,
     .fallback = "false",
     .doc = "Megatron-Core --tp-comm-overlap: the TP all-gathers and reduce-scatters of the "
            "transformer layers' linear layers chunked and overlapped with their GEMMs, as "
            "Transformer Engine's userbuffers run them; needs sequence_parallel, TP groups of 2 "
            "or more devices, each on one node, and a device of more than 16 SMs"},
    {.section = "shard_tensor", .key = "comment", .type = K::kString, .doc = "free text"},

    {.section = "split", .key = "op", .type = K::kString, .requirement = R::kRequired, .doc = "copy the matched DAG per microbatch, tagged MB=i"},
    {.section = "split", .key = "filter", .type = K::kObject, .requirement = R::kRequired,
     .section_ref = "filter", .doc = "the ops to copy", .example = "{}"},
    {.section = "split", .key = "dim_name", .type = K::kString, .fallback = R"("MB")",
     .doc = "only MB (microbatches)", .example = R"("MB")"},
    {.section = "split", .key = "num_microbatches", .type = K::kInteger, .min = 1, .max = 1e6,
     .requirement = R::kRequired, .doc = "microbatches per step", .example = "4"},
    {.section = "split", .key = "comment", .type = K::kString, .doc = "free text"},

    {.section = "order", .key = "op", .type = K::kString, .requirement = R::kRequired, .doc = "on each device, every op of group k+1 waits for every op of group k; the filters of one group may interleave"},
    {.section = "order", .key = "filters", .type = K::kOther, .requirement = R::kRequired,
     .schema = R"({"type": "array", "items": {"type": "array",
         "items": {"$ref": "#/definitions/filter"}}})",
     .doc = "groups of filters: every op of group k+1 waits for every op of group k",
     .example = "[]"},
    {.section = "order", .key = "comment", .type = K::kString, .doc = "free text"},
};

bool is_op(std::string_view s) {
  const auto ops = directive_ops();
  return std::find(ops.begin(), ops.end(), s) != ops.end();
}

Json parse_fragment(std::string_view text) { return Json::parse(text); }

}  // namespace

double PlanKey::clamp(double x) const {
  if (std::isnan(x)) return min_exclusive ? std::nextafter(min, kInf) : min;
  const double lo = min_exclusive ? std::nextafter(min, kInf) : min;
  return std::clamp(x, lo, max);
}

Json PlanKey::default_value() const {
  return fallback.empty() ? Json() : parse_fragment(fallback);
}

std::span<const PlanKey> plan_schema() { return kKeys; }

const PlanKey* plan_key(std::string_view section, std::string_view key) {
  for (const PlanKey& k : kKeys)
    if (k.section == section && k.key == key) return &k;
  return nullptr;
}

const PlanKey& schema_key(std::string_view section, std::string_view key) {
  const PlanKey* k = plan_key(section, key);
  STRETTO_ASSERT(k != nullptr, "a key the schema table does not list");
  return *k;
}

std::vector<std::string> section_keys(std::string_view section) {
  std::vector<std::string> v;
  for (const PlanKey& k : kKeys)
    if (k.section == section) v.emplace_back(k.key);
  return v;
}

std::vector<std::string> fixed_costmodel_keys() {
  std::vector<std::string> v = {"kind"};
  for (const PlanKey& k : kKeys)
    if (k.section == "costmodel" && k.applies == "fixed") v.emplace_back(k.key);
  return v;
}

std::span<const std::string_view> directive_ops() {
  // DirectiveOp's order (plan.h): place, replicate, shard, shard_tensor, split, order, recompute.
  static constexpr std::string_view kInOrder[] = {"place", "replicate", "shard", "shard_tensor",
                                                  "split", "order",     "recompute"};
  return kInOrder;
}

namespace {

// The section of the object at `pointer`, walking the plan where it holds the path (a
// directive's section is its op) and the table where it does not.
std::string walk(const Json& plan, std::string_view pointer) {
  std::string section = "plan";
  const Json* at = &plan;
  size_t pos = 0;
  bool in_list = false;  // at a directive list (the schedule, or a builder's base)
  while (pos < pointer.size()) {
    if (pointer[pos] != '/') return "";
    size_t end = pointer.find('/', pos + 1);
    if (end == std::string_view::npos) end = pointer.size();
    const std::string tok(pointer.substr(pos + 1, end - pos - 1));
    pos = end;
    if (in_list) {
      if (!at || !at->is_array() || tok.empty() ||
          tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 9)
        return "";
      const size_t i = std::stoul(tok);
      if (i >= at->size()) return "";
      at = &(*at)[i];
      const Json* op = at->is_object() && at->contains("op") ? &(*at)["op"] : nullptr;
      if (!op || !op->is_string() || !is_op(op->get<std::string>())) return "";
      section = op->get<std::string>();
      in_list = false;
      continue;
    }
    const Json* next = at && at->is_object() && at->contains(tok) ? &(*at)[tok] : nullptr;
    if (section == "plan" && tok == "schedule") {
      // A list of directives, or a builder call (an object, or a schedule not written yet).
      at = next;
      if (next && next->is_array()) in_list = true;
      else section = "builder";
      continue;
    }
    const PlanKey* k = plan_key(section, tok);
    if (!k) return "";
    at = next;
    if (k->section_ref == "directive") {
      in_list = true;
      continue;
    }
    if (k->type != KeyType::kObject) return "";
    section = std::string(k->section_ref);
  }
  return in_list ? "" : section;
}

}  // namespace

std::string section_at(const Json& plan, std::string_view pointer) { return walk(plan, pointer); }

const PlanKey* plan_key_at(const Json& plan, std::string_view pointer) {
  const size_t slash = pointer.rfind('/');
  if (slash == std::string_view::npos) return nullptr;
  const std::string parent = walk(plan, pointer.substr(0, slash));
  if (parent.empty()) return nullptr;
  return plan_key(parent, pointer.substr(slash + 1));
}

Json directive_template(std::string_view op) {
  Json d = Json::object();
  d["op"] = std::string(op);
  for (const PlanKey& k : kKeys)
    if (k.section == op && !k.example.empty()) d[std::string(k.key)] = parse_fragment(k.example);
  return d;
}

namespace {

using OJ = nlohmann::ordered_json;

OJ value_schema(const PlanKey& k) {
  OJ s = OJ::object();
  switch (k.type) {
    case KeyType::kInteger:
    case KeyType::kNumber:
      s["type"] = k.type == KeyType::kInteger ? "integer" : "number";
      if (std::isfinite(k.min)) s[k.min_exclusive ? "exclusiveMinimum" : "minimum"] = k.min;
      if (std::isfinite(k.max)) s["maximum"] = k.max;
      break;
    case KeyType::kBoolean:
      s["type"] = "boolean";
      break;
    case KeyType::kString:
      s["type"] = "string";
      break;
    case KeyType::kEnum: {
      OJ e = OJ::array();
      for (std::string_view c : k.choices) e.push_back(std::string(c));
      s["enum"] = std::move(e);
      break;
    }
    case KeyType::kObject:
      s["$ref"] = "#/definitions/" + std::string(k.section_ref);
      break;
    case KeyType::kOther:
      s = OJ::parse(k.schema);
      break;
  }
  if (!k.fallback.empty()) s["default"] = OJ::parse(k.fallback);
  if (!k.doc.empty()) s["description"] = std::string(k.doc);
  return s;
}

// A section as an object schema: its keys, required ones, no others.
OJ section_schema(std::string_view section, bool closed = true, std::string_view doc = {}) {
  OJ s = OJ::object();
  s["type"] = "object";
  if (!doc.empty()) s["description"] = std::string(doc);
  if (closed) s["additionalProperties"] = false;
  OJ req = OJ::array(), props = OJ::object();
  for (const PlanKey& k : kKeys) {
    if (k.section != section) continue;
    if (k.required()) req.push_back(std::string(k.key));
    props[std::string(k.key)] = value_schema(k);
  }
  if (!req.empty()) s["required"] = std::move(req);
  s["properties"] = std::move(props);
  return s;
}

}  // namespace

std::string plan_json_schema_text() {
  OJ root = section_schema("plan");
  OJ doc = OJ::object();
  doc["$schema"] = "http://json-schema.org/draft-07/schema#";
  doc["$id"] = "https://github.com/stretto/stretto/docs/plan.schema.json";
  doc["title"] = "Stretto plan";
  doc["description"] =
      "A Stretto plan file: model, cluster, cost model, optimizer and schedule. Generated by "
      "`stretto schema` from the schema table in plan/src/schema.cpp; reference: "
      "docs/plan-format.md.";
  for (auto& [k, v] : root.items()) doc[k] = v;
  OJ defs = OJ::object();
  defs["tagValue"] = OJ::parse(
      R"({"oneOf": [{"type": "integer", "minimum": 0}, {"enum": ["*", "-"]}]})");
  defs["filter"] = section_schema(
      "filter", true,
      "conjunctive tag map; a value is an integer, \"*\" (present) or \"-\" (absent)");
  defs["link"] = section_schema("link");
  OJ one_of = OJ::array();
  for (std::string_view op : directive_ops()) {
    OJ d = section_schema(op);
    d["properties"]["op"] = OJ{{"const", std::string(op)}};
    one_of.push_back(std::move(d));
  }
  defs["directive"] = OJ{{"oneOf", std::move(one_of)}};
  for (std::string_view s : {"model", "moe", "cluster", "optimizer", "builder", "layout"})
    defs[std::string(s)] = section_schema(s);
  // Cost-model options are checked by the cost model, which knows which apply to which kind.
  defs["costmodel"] = section_schema(
      "costmodel", true, "fixed-model keys and analytic options: docs/costmodel.md");
  doc["definitions"] = std::move(defs);
  return doc.dump(2) + "\n";
}

std::vector<std::string_view> markdown_sections() {
  std::vector<std::string_view> v = {"plan",      "model",     "moe",     "cluster", "link",
                                     "costmodel", "optimizer", "builder", "layout",  "filter"};
  for (std::string_view op : directive_ops()) v.push_back(op);
  return v;
}

namespace {

// A number of the table as a reader writes it: 1, 0.25, 1e5, 1e-6, 1048576.
std::string md_number(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e5) return fmt::format("{}", static_cast<int64_t>(x));
  const double e = std::round(std::log10(std::fabs(x)));
  if (x > 0 && std::pow(10.0, e) == x) return fmt::format("1e{}", static_cast<int>(e));
  if (x == std::floor(x) && std::fabs(x) < 1e15) return fmt::format("{}", static_cast<int64_t>(x));
  return fmt::format("{}", x);
}

std::string code(std::string_view s) { return "`" + std::string(s) + "`"; }

// The type of a value a JSON Schema fragment describes ("integer or array", "filter").
std::string schema_type(const OJ& s) {
  if (s.contains("oneOf")) {
    std::string t;
    for (const OJ& alt : s["oneOf"]) t += (t.empty() ? "" : " or ") + schema_type(alt);
    return t;
  }
  if (s.contains("$ref")) {
    const std::string r = s["$ref"].get<std::string>();
    return r.substr(r.rfind('/') + 1);
  }
  if (s.contains("type")) {
    const std::string t = s["type"].get<std::string>();
    if (t == "array" && s.contains("items")) return "list of " + schema_type(s["items"]);
    return t;
  }
  return "any";
}

std::string md_type(const PlanKey& k) {
  switch (k.type) {
    case KeyType::kInteger:
      return "integer";
    case KeyType::kNumber:
      return "number";
    case KeyType::kBoolean:
      return "boolean";
    case KeyType::kString:
    case KeyType::kEnum:
      return "string";
    case KeyType::kObject:
      return k.section_ref == "link" || k.section_ref == "filter" ? std::string(k.section_ref)
                                                                  : "object";
    case KeyType::kOther:
      return schema_type(OJ::parse(k.schema));
  }
  return "";
}

std::string md_range(const PlanKey& k) {
  if (k.type == KeyType::kEnum) {
    std::string r;
    for (std::string_view c : k.choices) r += (r.empty() ? "" : ", ") + code(c);
    return r;
  }
  const bool lo = std::isfinite(k.min), hi = std::isfinite(k.max);
  if (!k.numeric() && !(k.type == KeyType::kOther && (lo || hi))) return "";
  const std::string low = md_number(k.min), high = md_number(k.max);
  if (lo && hi) return (k.min_exclusive ? "> " : "") + low + " - " + high;
  if (lo) return (k.min_exclusive ? "> " : "≥ ") + low;
  if (hi) return "≤ " + high;
  return "";
}

std::string md_default(const PlanKey& k) {
  if (k.requirement == Requirement::kRequired) return "required";
  std::string d;
  if (!k.fallback.empty()) d = code(k.fallback);
  else if (k.when_absent != ValueSource::kDefault) d = std::string(value_source_name(k.when_absent));
  else d = "none";
  if (k.requirement == Requirement::kConditional) d = d == "none" ? "conditional" : "conditional; " + d;
  return d;
}

std::string md_cell(std::string s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else o += c;
  }
  return o;
}

}  // namespace

std::string plan_schema_markdown_table(std::string_view section) {
  std::string o =
      "| key | type | range | default | meaning |\n|---|---|---|---|---|\n";
  for (const PlanKey& k : kKeys) {
    if (k.section != section) continue;
    std::string doc(k.doc);
    if (!k.applies.empty() && doc.rfind(std::string(k.applies) + ":", 0) != 0)
      doc = std::string(k.applies) + " only: " + doc;
    o += "| " + code(k.key) + " | " + md_cell(md_type(k)) + " | " + md_cell(md_range(k)) +
         " | " + md_cell(md_default(k)) + " | " + md_cell(doc) + " |\n";
  }
  return o;
}

std::string plan_schema_markdown() {
  std::string o;
  for (std::string_view s : markdown_sections()) {
    o += "<!-- schema:" + std::string(s) + " -->\n" + plan_schema_markdown_table(s) +
         "<!-- /schema:" + std::string(s) + " -->\n\n";
  }
  return o;
}

std::string splice_schema_tables(std::string_view doc, std::string* error) {
  const auto sections = markdown_sections();
  std::vector<std::string_view> seen;
  std::string out;
  size_t pos = 0;
  const std::string_view open = "<!-- schema:", close = "<!-- /schema:";
  while (true) {
    const size_t at = doc.find(open, pos);
    if (at == std::string_view::npos) break;
    const size_t name_end = doc.find(" -->\n", at);
    if (name_end == std::string_view::npos) {
      *error = "a `<!-- schema:` marker without ` -->` and a newline";
      return "";
    }
    const std::string_view name = doc.substr(at + open.size(), name_end - at - open.size());
    if (std::find(sections.begin(), sections.end(), name) == sections.end()) {
      *error = "`<!-- schema:" + std::string(name) + " -->` names no section of the schema table";
      return "";
    }
    const std::string end_marker = std::string(close) + std::string(name) + " -->";
    const size_t body = name_end + 5;
    const size_t end = doc.find(end_marker, body);
    const size_t next_open = doc.find(open, body);
    if (end == std::string_view::npos || (next_open != std::string_view::npos && next_open < end)) {
      *error = "`<!-- schema:" + std::string(name) + " -->` has no `" + end_marker + "` after it";
      return "";
    }
    out += doc.substr(pos, body - pos);
    out += plan_schema_markdown_table(name);
    pos = end;
    seen.push_back(name);
  }
  out += doc.substr(pos);
  if (out.find(close, 0) != std::string::npos) {
    // Every closing marker must follow its opening one (checked above); count them.
    size_t closes = 0;
    for (size_t p = out.find(close); p != std::string::npos; p = out.find(close, p + 1)) ++closes;
    if (closes != seen.size()) {
      *error = "a `<!-- /schema:S -->` marker without its opening marker";
      return "";
    }
  }
  for (std::string_view s : sections)
    if (std::find(seen.begin(), seen.end(), s) == seen.end()) {
      *error = "no `<!-- schema:" + std::string(s) + " -->` table";
      return "";
    }
  return out;
}

}  // namespace stretto::plan
