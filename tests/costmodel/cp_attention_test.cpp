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

// Forward, cp 4, the rank's attention alone 4000 ns (a step: 1000): with a transfer of
// 1500 ns the ring is exposed, 1000 + 3 · 1500; with 500 ns it hides behind the steps,
// 1000 + 3 · 1000 = A. cp 1 is the attention alone.
TEST(CpAttention, ForwardStepsOverlapTheNextSteps) {
  EXPECT_EQ(cp_attention_fwd_ns(4, 4000, 1500), 5500);
  EXPECT_EQ(cp_attention_fwd_ns(4, 4000, 500), 4000);
  EXPECT_EQ(cp_attention_fwd_ns(2, 4000, 3000), 2000 + 3000);
  EXPECT_EQ(cp_attention_fwd_ns(1, 4000, 9999), 4000);
  EXPECT_EQ(cp_attention_fwd_ns(4, 1001, 0), 4 * 251);  // each step rounded up to whole ns
}

// Backward, cp 4, 8000 ns alone (a step: 2000): the first and last transfers carry one chunk
// (K/V, then dK/dV: 1500 ns), the cp − 2 = 2 middle ones K/V and dK/dV (2500 ns):
// 2 · max(2000, 1500) + 2 · max(2000, 2500) = 9000. cp 2 has no middle step.
TEST(CpAttention, BackwardCarriesKvAndDkvBetweenTheEnds) {
  EXPECT_EQ(cp_attention_bwd_ns(4, 8000, 1500, 2500), 2 * 2000 + 2 * 2500);
  EXPECT_EQ(cp_attention_bwd_ns(4, 8000, 2200, 1000), 2 * 2200 + 2 * 2000);
  EXPECT_EQ(cp_attention_bwd_ns(2, 8000, 1500, 2500), 2 * 4000);
  EXPECT_EQ(cp_attention_bwd_ns(1, 8000, 1500, 2500), 8000);
}

}  // namespace
}  // namespace stretto::cost
