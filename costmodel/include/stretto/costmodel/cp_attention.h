#pragma once
// Context parallelism's attention (Megatron-Core --context-parallel-size, Transformer Engine's
// AttnFuncWithCPAndKVP2P, the "p2p" cp_comm_type): closed forms for one CP rank's core
// attention with its K/V ring exchange. The compiler pairs each attention node with a ring
// exchange node (compiler/dag.h TpOverlap::kCpRing); sim prices the pair with these.
//
// The sequence of s tokens is cut into 2·cp chunks of c = s/(2·cp); CP rank r holds chunks r
// and 2·cp − 1 − r (the causal load balance, Megatron-Core's get_batch_on_this_cp_rank), s/cp
// tokens. Its attention runs in cp steps, each its own kernel (TE calls the attention kernel
// once a step): step 0 on its own K/V, causal, [2c, d] x [d, 2c] (the diagonal); step i ≥ 1
// on the K/V of the rank i hops up the ring, either all its queries against the first half
// of that K/V ([2c, d] x [d, c], i ≤ r) or its second half of queries against all of it
// ([c, d] x [d, 2c], i > r). Every step is the same work, A/cp of the rank's whole attention
// A; a step is priced at that work on its own kernel shape (CpSteps below): the diagonal `d`
// at [2c, 2c], an off-diagonal step `o` at [c, 2c], the slower of the two kinds (the ring
// waits for its slowest rank, and rank 0 runs [c, 2c] at every step i ≥ 1).
//
// While a transfer runs, NCCL's send/recv kernels hold SMs the attention cannot use (the cost
// model's comm_sm_share, docs/costmodel.md); TE sets no SM margin for the ring, so the step
// gets them back when the transfer ends (the engine's rate rule for compute beside a comm
// kernel). A step of x alone beside a transfer of p then takes
//     B(x, p) = max(p, x + comm_sm_share · p)
// (it ends with the transfer when x ≤ (1 − share)·p, else after x + share·p).
//
// Forward (TE: for i in range(cp_size + 1); step i < cp − 1 launches the send/recv of the K/V
// step i + 1 needs; step i waits for its own): cp − 1 transfers of this rank's K/V chunk, p
// each, beside steps 0 .. cp − 2; the last step runs alone:
//     T_f = B(d, p) + (cp − 2) · B(o, p) + o                           (cp ≥ 2)
// Backward (TE: step 0 sends K/V only, steps 1 .. cp − 2 send K/V and the dK/dV accumulated so
// far together, step cp − 1 sends dK/dV only, each overlapping that step's compute):
//     T_b = B(d_b, p) + (cp − 2) · B(o_b, p2) + B(o_b, p)              (cp ≥ 2)
// with p one transfer of the K/V chunk and p2 one of twice its bytes.
// Source: TransformerEngine, transformer_engine/pytorch/attention/dot_product_attention/
// context_parallel.py, AttnFuncWithCPAndKVP2P.forward and .backward (bf16, no fp8).

#include <cstdint>

#include "stretto/costmodel/cost_model.h"

namespace stretto::cost {

/// Bytes of one CP rank's K/V chunk (what one ring step sends): K and V of its s/cp tokens,
/// kv_heads/tp heads of head_dim each, `dtype_bytes` an element.
int64_t cp_kv_chunk_bytes(int64_t microbatch, int64_t seq_len, int cp, int64_t kv_heads, int tp,
                          int64_t head_dim, int dtype_bytes);

/// One step's attention alone (ns), for a pass: `diag` step 0, `off` every other step.
struct CpSteps {
  int64_t diag = 0, off = 0;
};

/// The steps of a rank's attention whose whole kernel `whole` (its query: the [s/cp, d] x
/// [d, s] shape per head, the pass's FLOPs and bytes) the cost model prices at `whole_ns`:
/// each step is whole_ns / cp times the cost model's price of the same work at the step's
/// shape over its price at the whole shape (how much slower the smaller kernel runs; 1 for a
/// model that prices by op, not shape), rounded up to whole ns.
CpSteps cp_attention_steps(const CostModel& cm, const ComputeQuery& whole, int64_t whole_ns,
                           int cp);

/// T_f above: `a` the forward steps alone, `kv_ns` one transfer of the K/V chunk (p),
/// `sm_share` the SMs a transfer takes.
int64_t cp_attention_fwd_ns(int cp, CpSteps a, int64_t kv_ns, double sm_share);

/// T_b above: `a` the backward steps alone, `kv_ns` one transfer of the K/V chunk (p),
/// `kv_dkv_ns` one of K/V and dK/dV together (p2).
int64_t cp_attention_bwd_ns(int cp, CpSteps a, int64_t kv_ns, int64_t kv_dkv_ns,
                            double sm_share);

/// One ring step's transfer of `chunks` (1: K/V or dK/dV; 2: both) K/V chunks of `q.bytes`
/// each to the ring neighbour: a send/recv, across nodes when the CP group spans nodes (every
/// rank sends at once; the step ends with the slowest link).
int64_t cp_step_ns(const CostModel& cm, const CommQuery& q, int chunks);

/// The ring exchange node's own cost, its steps back to back: forward cp − 1 chunks; backward
/// two single chunks and cp − 2 double ones. `q` is the node's (a send/recv of one chunk over
/// the CP groups: group_size = cp).
CommCost cp_ring_comm_cost(const CostModel& cm, const CommQuery& q, bool backward);

}  // namespace stretto::cost
