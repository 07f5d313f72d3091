#include "stretto/costmodel/cp_attention.h"

#include <algorithm>
#include <cmath>

#include "stretto/support/diag.h"

namespace stretto::cost {

int64_t cp_kv_chunk_bytes(int64_t microbatch, int64_t seq_len, int cp, int64_t kv_heads, int tp,
                          int64_t head_dim, int dtype_bytes) {
  STRETTO_ASSERT(cp >= 1 && tp >= 1 && seq_len % (2 * cp) == 0 && kv_heads % tp == 0,
                 "CP needs s divisible by 2·cp and kv_heads by tp (checked by the plan)");
  return 2 * microbatch * (seq_len / cp) * (kv_heads / tp) * head_dim * dtype_bytes;
}

namespace {
// A step of `x` ns alone beside a transfer of `p` ns: while the transfer runs the step has
// 1 − sm_share of the SMs, then all of them (the engine's rate rule for compute beside a comm
// kernel). It ends with the transfer when x ≤ (1 − sm_share)·p, else after x + sm_share·p;
// both are max(p, x + sm_share·p). Defined for every share in [0, 1] (1: the two serialise).
int64_t beside(int64_t x, int64_t p, double sm_share) {
  STRETTO_ASSERT(sm_share >= 0 && sm_share <= 1, "comm_sm_share is a fraction (schema)");
  const auto lost = static_cast<int64_t>(std::ceil(sm_share * static_cast<double>(p) - 1e-6));
  return std::max(p, x + lost);
}
int64_t step_ns(int64_t whole_ns, int cp, double ratio) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(whole_ns) * ratio / cp - 1e-6));
}
}  // namespace

CpSteps cp_attention_steps(const CostModel& cm, const ComputeQuery& whole, int64_t whole_ns,
                           int cp) {
  if (cp <= 1) return {whole_ns, whole_ns};
  const double at_whole = static_cast<double>(cm.compute(whole).ns);
  auto ratio = [&](int64_t m, int64_t n) {
    ComputeQuery q = whole;  // the same work on the step's kernel shape
    q.gemm.m = std::max<int64_t>(1, m);
    q.gemm.n = std::max<int64_t>(1, n);
    return at_whole > 0 ? static_cast<double>(cm.compute(q).ns) / at_whole : 1.0;
  };
  const int64_t local = whole.gemm.m;  // the rank's s/cp queries (= keys of one rank)
  return {step_ns(whole_ns, cp, ratio(local, local)),
          step_ns(whole_ns, cp, ratio(local / 2, local))};
}

int64_t cp_attention_fwd_ns(int cp, CpSteps a, int64_t kv_ns, double sm_share) {
  if (cp <= 1) return a.diag;
  return beside(a.diag, kv_ns, sm_share) + (cp - 2) * beside(a.off, kv_ns, sm_share) + a.off;
}

int64_t cp_attention_bwd_ns(int cp, CpSteps a, int64_t kv_ns, int64_t kv_dkv_ns,
                            double sm_share) {
  if (cp <= 1) return a.diag;
  return beside(a.diag, kv_ns, sm_share) + (cp - 2) * beside(a.off, kv_dkv_ns, sm_share) +
         beside(a.off, kv_ns, sm_share);
}

namespace {
CommQuery step_query(const CommQuery& q, int chunks) {
  CommQuery one = q;
  one.kind = compiler::CommKind::kSendRecv;
  one.group_size = 2;
  one.nodes_spanned = q.nodes_spanned > 1 ? 2 : 1;
  one.bytes = q.bytes * chunks;
  return one;
}
}  // namespace

int64_t cp_step_ns(const CostModel& cm, const CommQuery& q, int chunks) {
  return cm.comm(step_query(q, chunks)).time_ns;
}

CommCost cp_ring_comm_cost(const CostModel& cm, const CommQuery& q, bool backward) {
  const int cp = std::max(2, q.group_size);
  const CommCost one = cm.comm(step_query(q, 1));
  CommCost c = one;
  if (!backward) {
    c.latency_ns = one.latency_ns * (cp - 1);
    c.wire_bytes = one.wire_bytes * (cp - 1);
  } else {
    const CommCost two = cm.comm(step_query(q, 2));
    c.latency_ns = 2 * one.latency_ns + (cp - 2) * two.latency_ns;
    c.wire_bytes = 2 * one.wire_bytes + (cp - 2) * two.wire_bytes;
  }
  c.time_ns = c.latency_ns + transfer_ns(c.wire_bytes, c.rate_cap);
  return c;
}

}  // namespace stretto::cost
