#pragma once
// Context parallelism's attention (Megatron-Core --context-parallel-size, Transformer Engine's
// AttnFuncWithCPAndKVP2P, the "p2p" cp_comm_type): closed forms for one CP rank's core
// attention with its K/V ring exchange. The compiler pairs each attention node with a ring
// exchange node (compiler/dag.h TpOverlap::kCpRing); sim prices the pair with these.
//
// The sequence of s tokens is cut into 2·cp chunks; CP rank r holds chunks r and 2·cp − 1 − r
// (the causal load balance), s/cp tokens. Its attention runs in cp steps: step 0 on its own
// K/V (the two diagonal blocks, causal), step i on the K/V of the rank i hops up the ring
// (half of it, or half of its own queries: a block of the same size). Every step is the same
// work, a = A/cp for the rank's whole attention A (its 1/cp of the causal attention's FLOPs).
//
// Forward (TE: for i in range(cp_size + 1); step i < cp − 1 launches the send/recv of the K/V
// step i + 1 needs; step i waits for its own): cp − 1 transfers of this rank's K/V chunk, p
// each, each overlapping one step's compute:
//     T_f = a + (cp − 1) · max(a, p)
// Backward (TE: step 0 sends K/V only, steps 1 .. cp − 2 send K/V and the dK/dV accumulated so
// far together, step cp − 1 sends dK/dV only, each overlapping that step's compute):
//     T_b = max(a_b, p) + (cp − 2) · max(a_b, p2) + max(a_b, p)      (cp ≥ 2)
// with a_b = A_b/cp, p one transfer of the K/V chunk and p2 one of twice its bytes.
// Source: TransformerEngine, transformer_engine/pytorch/attention/dot_product_attention/
// context_parallel.py, AttnFuncWithCPAndKVP2P.forward and .backward (bf16, no fp8).

#include <cstdint>

#include "stretto/costmodel/cost_model.h"

namespace stretto::cost {

/// Bytes of one CP rank's K/V chunk (what one ring step sends): K and V of its s/cp tokens,
/// kv_heads/tp heads of head_dim each, `dtype_bytes` an element.
int64_t cp_kv_chunk_bytes(int64_t microbatch, int64_t seq_len, int cp, int64_t kv_heads, int tp,
                          int64_t head_dim, int dtype_bytes);

/// T_f above: `attn_ns` is the rank's whole forward attention alone (A), `kv_ns` one transfer
/// of its K/V chunk (p).
int64_t cp_attention_fwd_ns(int cp, int64_t attn_ns, int64_t kv_ns);

/// T_b above: `attn_ns` the rank's whole attention backward alone (A_b), `kv_ns` one transfer
/// of the K/V chunk (p), `kv_dkv_ns` one of K/V and dK/dV together (p2).
int64_t cp_attention_bwd_ns(int cp, int64_t attn_ns, int64_t kv_ns, int64_t kv_dkv_ns);

/// One ring step's transfer of `chunks` (1: K/V or dK/dV; 2: both) K/V chunks of `q.bytes`
/// each to the ring neighbour: a send/recv, across nodes when the CP group spans nodes (every
/// rank sends at once; the step ends with the slowest link).
int64_t cp_step_ns(const CostModel& cm, const CommQuery& q, int chunks);

/// The ring exchange node's own cost, its steps back to back: forward cp − 1 chunks; backward
/// two single chunks and cp − 2 double ones. `q` is the node's (a send/recv of one chunk over
/// the CP groups: group_size = cp).
CommCost cp_ring_comm_cost(const CostModel& cm, const CommQuery& q, bool backward);

}  // namespace stretto::cost
