// What Megatron-LM refuses or pads, Stretto refuses or pads: TP degrees that do not divide the
// attention heads, the vocabulary padded to make-vocab-size-divisible-by (128) x TP, and no
// `ffn_hidden` needed when every layer is an MoE layer.
#include <gtest/gtest.h>

#include <string>

#include "stretto/compiler/compiler.h"

using namespace stretto;
using nlohmann::json;

namespace {

json transformer(int heads, int kv_heads, int64_t vocab) {
  return {{"family", "transformer"}, {"layers", 2},   {"hidden", 1024},
          {"heads", heads},          {"kv_heads", kv_heads}, {"ffn_hidden", 4096},
          {"vocab", vocab},          {"seq_len", 512}};
}
json plan_of(json model, int tp) {
  return {{"model", std::move(model)},
          {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", 8}}},
          {"schedule", {{"builder", "1f1b"}, {"microbatches", 1}, {"layout", {{"tp", tp}}}}}};
}
Expected<CompiledPlan> compile_json(const json& plan) {
  auto src = JsonSource::parse(plan.dump(1), "plan.json");
  if (!src) return fail(src.error());
  auto p = parse_plan(*src);
  if (!p) return fail(p.error());
  return compile(*p, &*src);
}
const ModelOp* op_named(const CompiledPlan& cp, const std::string& name) {
  for (const ModelOp& op : cp.model.ops)
    if (op.name == name) return &op;
  return nullptr;
}

TEST(MegatronRules, TensorParallelDegreeMustDivideHeadsAndKvHeads) {
  // 12 heads over TP 8: refused at the layout's TP (the shard_tensor it generates), with a note
  // at /model/heads.
  json twelve = transformer(12, 12, 32000);
  twelve["hidden"] = 768;
  auto bad = compile_json(plan_of(twelve, 8));
  ASSERT_FALSE(bad);
  ASSERT_EQ(bad.error().size(), 1u) << render_all(bad.error());
  const Diagnostic& d = bad.error()[0];
  EXPECT_EQ(d.message,
            "tensor parallelism of degree 8 splits attention by heads, but heads (12) is not "
            "divisible by 8");
  EXPECT_EQ(d.hint, "use a TP degree that divides both heads (12) and kv_heads (12), as "
                    "Megatron-LM requires");
  EXPECT_EQ(d.loc.json_pointer.rfind("/schedule", 0), 0u) << d.loc.json_pointer;
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_EQ(d.notes[0].loc.json_pointer, "/model/heads");
  // GQA: 16 query heads but 4 key/value heads over TP 8.
  auto gqa = compile_json(plan_of(transformer(16, 4, 32000), 8));
  ASSERT_FALSE(gqa);
  EXPECT_NE(gqa.error()[0].message.find("kv_heads (4) is not divisible by 8"), std::string::npos)
      << render_all(gqa.error());
  EXPECT_EQ(gqa.error()[0].notes[0].loc.json_pointer, "/model/kv_heads");
  // 16 and 8 over TP 8 compile.
  EXPECT_TRUE(compile_json(plan_of(transformer(16, 8, 32000), 8)));
}

TEST(MegatronRules, VocabularyPaddedToDivisibleByTimesTp) {
  // GPT-2's 50,257 tokens: Megatron pads to a multiple of 128 x TP (_vocab_size_with_padding):
  // 50,304 at TP 1, 51,200 at TP 8. The head's GEMM, the embedding's table and the loss's logits
  // are that wide.
  auto head_width = [](int tp, int64_t vocab) {
    auto cp = compile_json(plan_of(transformer(16, 16, vocab), tp));
    EXPECT_TRUE(cp) << (cp ? "" : render_all(cp.error()));
    if (!cp) return int64_t{-1};
    const ModelOp* head = op_named(*cp, "head");
    const ModelOp* emb = op_named(*cp, "embedding");
    EXPECT_TRUE(head && emb);
    if (!head || !emb) return int64_t{-1};
    EXPECT_EQ(emb->param_count, head->gemm.n * 1024);
    return head->gemm.n;
  };
  EXPECT_EQ(head_width(1, 50257), 50304);
  EXPECT_EQ(head_width(8, 50257), 51200);
  EXPECT_EQ(head_width(2, 50304), 50432);
  EXPECT_EQ(head_width(8, 32768), 32768);  // already a multiple of 1024
}

TEST(MegatronRules, FfnHiddenOnlyForDenseLayers) {
  // Every layer an MoE layer: no dense MLP, no ffn_hidden needed.
  json m = transformer(16, 16, 32000);
  m.erase("ffn_hidden");
  m["moe"] = {{"experts", 8}, {"top_k", 2}, {"expert_ffn_hidden", 512}};
  EXPECT_TRUE(compile_json(plan_of(m, 1)));
  // A dense layer (every second layer MoE) needs it: located at /model.
  m["moe"]["every"] = 2;
  auto bad = compile_json(plan_of(m, 1));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error()[0].message, "missing required key 'ffn_hidden'");
  EXPECT_EQ(bad.error()[0].loc.json_pointer, "/model");
  EXPECT_NE(bad.error()[0].hint.find("every layer is an MoE layer"), std::string::npos);
}

}  // namespace
