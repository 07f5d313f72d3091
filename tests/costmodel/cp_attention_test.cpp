// Context parallelism's attention closed forms (costmodel/cp_attention.h), by hand.
#include <gtest/gtest.h>

#include "stretto/costmodel/cp_attention.h"

namespace stretto::cost {
namespace {

// Llama-3 70B's attention (kv_heads 8, head_dim 128, bf16) at TP 8, one 8192-token sequence:
// a CP rank's K/V chunk is K and V of its 8192/cp tokens, one KV head of 128, 2 bytes.
TEST(CpAttention, KvChunkIsKAndVOfTheRanksTokens) {
  EXPECT_EQ(cp_kv_chunk_bytes(1, 8192, 2, 8, 8, 128, 2), 2 * 4096 * 1 * 128 * 2);  // 2 MiB
  EXPECT_EQ(cp_kv_chunk_bytes(1, 8192, 4, 8, 8, 128, 2), 2 * 2048 * 1 * 128 * 2);  // 1 MiB
  EXPECT_EQ(cp_kv_chunk_bytes(2, 8192, 4, 8, 4, 128, 2), 2 * 2 * 2048 * 2 * 128 * 2);
}

// Forward, cp 4, steps alone: the diagonal 1000 ns, each other 1200 ns (a smaller kernel of
// the same work, slower), no SM share: step 0 and the two middle steps beside a transfer of
// 1500 ns, the last alone: 1500 + 2 · 1500 + 1200; with 500 ns transfers they hide:
// 1000 + 2 · 1200 + 1200. cp 1 is the attention alone.
TEST(CpAttention, ForwardStepsOverlapTheNextSteps) {
  EXPECT_EQ(cp_attention_fwd_ns(4, {1000, 1200}, 1500, 0), 1500 + 2 * 1500 + 1200);
  EXPECT_EQ(cp_attention_fwd_ns(4, {1000, 1200}, 500, 0), 1000 + 2 * 1200 + 1200);
  EXPECT_EQ(cp_attention_fwd_ns(2, {2000, 2000}, 3000, 0), 3000 + 2000);
  EXPECT_EQ(cp_attention_fwd_ns(1, {4000, 4000}, 9999, 0), 4000);
}

// The ring's send/recv kernels hold comm_sm_share of the SMs while a transfer runs, and give
// them back when it ends: a step of x beside a transfer of p takes max(p, x + share · p),
// rounded up; the last forward step runs on every SM. H100's 20 of 132 SMs, x = 1000:
//   p = 1100: 1100 · 20 / 132 = 166.67 -> 167, the step 1167 (> p: the step ends last);
//   p = 1300: the step done on 112/132 of the SMs by 1178.6 < 1300, so it ends with p;
//   p = 0: no transfer, no SMs lost (x / (1 − share) would give 1179).
TEST(CpAttention, StepsBesideATransferLoseTheCommunicationSmsWhileItRuns) {
  const double share = 20.0 / 132;
  EXPECT_EQ(cp_attention_fwd_ns(2, {1000, 1000}, 0, share), 1000 + 1000);
  EXPECT_EQ(cp_attention_fwd_ns(2, {1000, 1000}, 1100, share), 1167 + 1000);
  EXPECT_EQ(cp_attention_fwd_ns(2, {1000, 1000}, 1300, share), 1300 + 1000);
  EXPECT_EQ(cp_attention_fwd_ns(4, {1000, 1000}, 1100, share), 1167 + 2 * 1167 + 1000);
  EXPECT_EQ(cp_attention_bwd_ns(2, {1000, 1000}, 0, 0, share), 2 * 1000);
  // The middle steps beside a K/V + dK/dV transfer of 2200: 1000 + 334 < 2200, they end with it.
  EXPECT_EQ(cp_attention_bwd_ns(4, {1000, 1000}, 1100, 2200, share), 1167 + 2 * 2200 + 1167);
}

// A share of 1 (a device of 20 SMs or fewer, e.g. the `cpu` preset's one: comm_sm_share
// = min(1, 20 / sms)) serialises a step and its transfer instead of dividing by zero.
TEST(CpAttention, AWholeShareSerialisesTheStepAndItsTransfer) {
  EXPECT_EQ(cp_attention_fwd_ns(2, {1000, 1000}, 300, 1.0), 1300 + 1000);
  EXPECT_EQ(cp_attention_bwd_ns(4, {1000, 1000}, 300, 500, 1.0), 1300 + 2 * 1500 + 1300);
}

// Backward, cp 4, steps alone 2000 ns (diagonal and others): the first and last transfers
// carry one chunk (K/V, then dK/dV: 1500 ns), the cp − 2 = 2 middle ones K/V and dK/dV
// (2500 ns): 2 · max(2000, 1500) + 2 · max(2000, 2500) = 9000. cp 2 has no middle step.
TEST(CpAttention, BackwardCarriesKvAndDkvBetweenTheEnds) {
  EXPECT_EQ(cp_attention_bwd_ns(4, {2000, 2000}, 1500, 2500, 0), 2 * 2000 + 2 * 2500);
  EXPECT_EQ(cp_attention_bwd_ns(4, {2000, 2000}, 2200, 1000, 0), 2 * 2200 + 2 * 2000);
  EXPECT_EQ(cp_attention_bwd_ns(2, {4000, 4000}, 1500, 2500, 0), 2 * 4000);
  EXPECT_EQ(cp_attention_bwd_ns(4, {1000, 3000}, 1500, 2500, 0), 1500 + 2 * 3000 + 3000);
  EXPECT_EQ(cp_attention_bwd_ns(1, {8000, 8000}, 1500, 2500, 0), 8000);
}

}  // namespace
}  // namespace stretto::cost
