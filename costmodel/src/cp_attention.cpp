#include "stretto/costmodel/cp_attention.h"

#include <algorithm>

#include "stretto/support/diag.h"

namespace stretto::cost {

int64_t cp_kv_chunk_bytes(int64_t microbatch, int64_t seq_len, int cp, int64_t kv_heads, int tp,
                          int64_t head_dim, int dtype_bytes) {
  STRETTO_ASSERT(cp >= 1 && tp >= 1 && seq_len % (2 * cp) == 0 && kv_heads % tp == 0,
                 "CP needs s divisible by 2·cp and kv_heads by tp (checked by the plan)");
  return 2 * microbatch * (seq_len / cp) * (kv_heads / tp) * head_dim * dtype_bytes;
}

int64_t cp_attention_fwd_ns(int cp, int64_t attn_ns, int64_t kv_ns) {
  if (cp <= 1) return attn_ns;
  const int64_t a = (attn_ns + cp - 1) / cp;  // one step, rounded up
  return a + (cp - 1) * std::max(a, kv_ns);
}

int64_t cp_attention_bwd_ns(int cp, int64_t attn_ns, int64_t kv_ns, int64_t kv_dkv_ns) {
  if (cp <= 1) return attn_ns;
  const int64_t a = (attn_ns + cp - 1) / cp;
  return 2 * std::max(a, kv_ns) + (cp - 2) * std::max(a, kv_dkv_ns);
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
