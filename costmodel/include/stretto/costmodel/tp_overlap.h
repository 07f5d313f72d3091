#pragma once
// Tensor-parallel communication overlap (Megatron-Core --tp-comm-overlap on Transformer
// Engine's userbuffers; compiler/dag.h TpOverlap says which collective uses which method),
// and Megatron-LM's asynchronous input-gradient all-reduce (async_pair_ns, at the end).
//
// A pair is one GEMM (alone: G ns on every SM) and one TP collective of B bytes, run as TE
// runs them, chunked, on a device whose GEMMs may give up SMs to the communication kernels:
//
//  - ring exchange (all-gather before a GEMM): t − 1 point-to-point steps, each sending this
//    rank's current 1/t chunk (B/t bytes) to its ring neighbour, priced as a send/recv of B/t
//    bytes, so C = (t − 1) · p; t GEMM chunks of q = G/t, the first on the local shard, chunk
//    k waiting for step k. Copies run on the copy engines (TE's default use_ce, num_sm 1 and
//    no SM margin for ring_exchange), so the GEMM keeps every SM:
//        T = max(t·q, (t − 1)·p + q) = max(G, C + G/t)
//  - pipeline (reduce-scatter after a GEMM): the GEMM in n = 4 chunks (TE's num_splits for
//    pipeline), each chunk's reduce-scatter (B/4 bytes, priced as an NCCL reduce-scatter)
//    after it; the GEMM runs on sms − 16 SMs (TE's num_sm 16 with set_sm_margin), G' =
//    G·sms/(sms − 16), C = 4 · r:
//        T = max(G' + C/4, G'/4 + C)
//  - bulk (the input re-gather beside the input-gradient GEMM, the input gradient's
//    reduce-scatter beside the weight-gradient GEMM): the whole collective at once beside the
//    whole GEMM, on 16 SMs with the margin:
//        T = max(G', C)
//
// Source of the constants: Transformer Engine, transformer_engine/pytorch/module/base.py,
// initialize_ub()'s default per-layer config (used by Megatron-Core when no
// --tp-comm-overlap-cfg file is given): ring_exchange {num_sm 1, set_sm_margin False,
// num_splits = tp, use_ce True}, pipeline and bulk {num_sm 16, set_sm_margin True,
// num_splits 4}; and which layer uses which method: ring_exchange for qkv_fprop, fc1_fprop,
// proj_dgrad, fc2_dgrad; pipeline for proj_fprop, fc2_fprop; bulk for qkv_dgrad, qkv_wgrad,
// fc1_dgrad, fc1_wgrad.

#include <cstdint>

#include "stretto/compiler/dag.h"
#include "stretto/costmodel/cost_model.h"

namespace stretto::cost {

/// SMs TE's pipeline and bulk communication kernels take (num_sm 16), held back from the
/// overlapped GEMM (set_sm_margin): base.py initialize_ub, get_default_config.
inline constexpr int kTeCommSms = 16;
/// GEMM chunks of the pipeline method (num_splits 4): the same source.
inline constexpr int kTePipelineSplits = 4;

/// The communication of an overlapped collective, as its chunks: `q` is the collective as the
/// compiler emits it (NCCL's bytes, docs/costmodel.md), `tp` its group size. Ring exchange:
/// t − 1 send/recv steps of B/t bytes over the intra-node link; pipeline: 4 reduce-scatters of
/// B/4; bulk: the collective itself. Latencies and wire bytes add up; the rate is a chunk's.
CommCost overlapped_comm_cost(const CostModel& cm, const CommQuery& q, compiler::TpOverlap method);

/// The closed form above: how long the GEMM (alone `gemm_ns`) and its overlapped
/// communication (`comm_ns`, from overlapped_comm_cost) take together, on a device of `sms`
/// SMs (> kTeCommSms), with a TP degree `tp` (the ring's chunks).
int64_t overlapped_pair_ns(compiler::TpOverlap method, int64_t gemm_ns, int64_t comm_ns, int tp, int sms);

/// Megatron-LM's asynchronous input-gradient all-reduce (reduce-scatter with SP) beside the
/// weight-gradient GEMM (TpOverlap::kAsync; not tp_comm_overlap): an ordinary NCCL collective
/// of `comm_ns` (CostModel::comm) launched with the GEMM (alone `gemm_ns`), whose kernels take
/// `comm_sm_share` of the SMs while they run, as the engine slows any compute beside a
/// collective (Interference::comm_sm_share). The GEMM runs at 1 − s while the collective runs,
/// so the pair takes max(C, G + s·C): the collective alone when the GEMM finishes inside it,
/// else the GEMM plus the SM time the collective took from it. Source of the overlap:
/// Megatron-LM megatron/mpu/layers.py (2022) ColumnParallelLinearWithAsyncAllreduce.backward
/// (all_reduce(grad_input, async_op=True), then grad_weight, then handle.wait()), with SP
/// ColumnParallelLinearWithSequenceParallelism (_reduce_scatter_base async); Megatron-Core's
/// LinearWithGradAccumulationAndAsyncCommunication.backward does the same.
int64_t async_pair_ns(int64_t gemm_ns, int64_t comm_ns, double comm_sm_share);

}  // namespace stretto::cost
