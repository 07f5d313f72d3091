#include "stretto/costmodel/tp_overlap.h"

#include <algorithm>
#include <cmath>

#include "stretto/support/diag.h"

namespace stretto::cost {

CommCost overlapped_comm_cost(const CostModel& cm, const CommQuery& q, compiler::TpOverlap method) {
  STRETTO_ASSERT(method != compiler::TpOverlap::kCpRing, "a CP ring is priced by cp_attention.h");
  if (method == compiler::TpOverlap::kBulk || method == compiler::TpOverlap::kNone ||
      method == compiler::TpOverlap::kAsync)
    return cm.comm(q);
  const int t = std::max(2, q.group_size);
  CommQuery chunk = q;
  int steps = 0;
  if (method == compiler::TpOverlap::kRing) {
    // One ring step: this rank's B/t chunk to its neighbour, inside the node.
    chunk.kind = compiler::CommKind::kSendRecv;
    chunk.group_size = 2;
    chunk.nodes_spanned = 1;
    chunk.crosses_island = false;
    chunk.bytes = q.bytes / t;
    steps = t - 1;
  } else {
    chunk.bytes = q.bytes / kTePipelineSplits;
    steps = kTePipelineSplits;
  }
  const CommCost one = cm.comm(chunk);
  CommCost c = one;
  c.latency_ns = one.latency_ns * steps;
  c.wire_bytes = one.wire_bytes * steps;
  c.time_ns = c.latency_ns + transfer_ns(c.wire_bytes, c.rate_cap);
  return c;
}

int64_t overlapped_pair_ns(compiler::TpOverlap method, int64_t gemm_ns, int64_t comm_ns, int tp, int sms) {
  STRETTO_ASSERT(sms > kTeCommSms, "tp_comm_overlap needs more SMs than TE's comm kernels take");
  const double g = static_cast<double>(gemm_ns);
  const double c = static_cast<double>(comm_ns);
  double t = 0;
  switch (method) {
    case compiler::TpOverlap::kRing: {
      const double n = std::max(2, tp);
      t = std::max(g, c + g / n);
      break;
    }
    case compiler::TpOverlap::kPipeline: {
      const double gm = g * sms / (sms - kTeCommSms);
      const double n = kTePipelineSplits;
      t = std::max(gm + c / n, gm / n + c);
      break;
    }
    case compiler::TpOverlap::kBulk:
      t = std::max(g * sms / (sms - kTeCommSms), c);
      break;
    case compiler::TpOverlap::kNone:
    case compiler::TpOverlap::kCpRing:  // (priced by cp_attention.h, not here)
    case compiler::TpOverlap::kAsync:   // (async_pair_ns: it needs the interference share)
      return gemm_ns;
  }
  return static_cast<int64_t>(std::ceil(t - 1e-6));
}

int64_t async_pair_ns(int64_t gemm_ns, int64_t comm_ns, double comm_sm_share) {
  STRETTO_ASSERT(comm_sm_share >= 0 && comm_sm_share <= 1, "comm_sm_share outside [0, 1]");
  const double g = static_cast<double>(gemm_ns);
  const double c = static_cast<double>(comm_ns);
  return static_cast<int64_t>(std::ceil(std::max(c, g + comm_sm_share * c) - 1e-6));
}

}  // namespace stretto::cost
