// What Megatron-LM refuses or pads, Stretto refuses or pads: TP degrees that do not divide the
// attention heads, the vocabulary padded to make-vocab-size-divisible-by (128) x TP, and no
// `ffn_hidden` needed when every layer is an MoE layer.
#include <gtest/gtest.h>

#include <string>

#include "stretto/compiler/compiler.h"

using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;
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

TEST(MegatronRules, VocabularyPaddingMultipleIsAPlanKey) {
  // --make-vocab-size-divisible-by 64 at TP 2: 50,257 -> 50,304 (a multiple of 128), where the
  // default 128 x 2 gives 50,432.
  json m = transformer(16, 16, 50257);
  m["make_vocab_size_divisible_by"] = 64;
  auto cp = compile_json(plan_of(m, 2));
  ASSERT_TRUE(cp) << render_all(cp.error());
  EXPECT_EQ(op_named(*cp, "head")->gemm.n, 50304);
  m["make_vocab_size_divisible_by"] = 1;  // no padding beyond TP's
  cp = compile_json(plan_of(m, 1));
  ASSERT_TRUE(cp) << render_all(cp.error());
  EXPECT_EQ(op_named(*cp, "head")->gemm.n, 50257);
}

TEST(MegatronRules, HeadDimWiderThanHiddenOverHeads) {
  // Qwen3-8B's attention: hidden 4096, 32 heads of width 128, 8 KV heads: a·d = h. Qwen3-32B:
  // hidden 5120, 64 heads of width 128 (a·d = 8192 > h), 8 KV heads (Qwen3 technical report,
  // config.json). The QKV GEMM is h -> (a + 2kv)·d, the output projection a·d -> h, core
  // attention 2·b·s²·a·d forward (causal flash), and the saved q, k, v and output a·d wide.
  const int64_t h = 5120, a = 64, kv = 8, d = 128, s = 512, ffn = 25600;
  json m = {{"family", "transformer"}, {"layers", 2},    {"hidden", h},
            {"heads", a},              {"kv_heads", kv}, {"head_dim", d},
            {"ffn_hidden", ffn},       {"vocab", 151936}, {"seq_len", s}};
  auto cp = compile_json(plan_of(m, 8));
  ASSERT_TRUE(cp) << render_all(cp.error());
  const ModelOp* qkv = op_named(*cp, "layer0.attn.qkv");
  const ModelOp* core = op_named(*cp, "layer0.attn.core");
  const ModelOp* proj = op_named(*cp, "layer0.attn.out_proj");
  ASSERT_TRUE(qkv && core && proj);
  EXPECT_EQ(qkv->gemm.k, h);
  EXPECT_EQ(qkv->gemm.n, (a + 2 * kv) * d);  // 10,240, not (64 + 16) x 80 = 6,400
  EXPECT_EQ(qkv->param_count, h * (a + 2 * kv) * d);
  EXPECT_EQ(proj->gemm.k, a * d);
  EXPECT_EQ(proj->gemm.n, h);
  EXPECT_EQ(proj->param_count, a * d * h);
  EXPECT_DOUBLE_EQ(core->fwd_flops, 2.0 * s * s * a * d);
  EXPECT_EQ(core->gemm.k, d);
  // q, k, v (a + 2kv)·d, output a·d, fp32 logsumexp per head, bf16.
  EXPECT_EQ(core->saved_bytes, s * (a + 2 * kv) * d * 2 + s * a * d * 2 + s * a * 4);
  EXPECT_EQ(proj->saved_bytes, s * a * d * 2);

  // Without head_dim the head width is h / a, and hidden must divide by heads (Megatron asserts
  // it when --kv-channels is not given); with head_dim it need not.
  m.erase("head_dim");
  cp = compile_json(plan_of(m, 8));
  ASSERT_TRUE(cp) << render_all(cp.error());
  EXPECT_EQ(op_named(*cp, "layer0.attn.qkv")->gemm.n, (a + 2 * kv) * (h / a));
  m["heads"] = 48;
  m["kv_heads"] = 8;
  auto bad = compile_json(plan_of(m, 8));  // 5120 / 48 is not an integer
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error()[0].loc.json_pointer, "/model/heads");
  EXPECT_NE(bad.error()[0].hint.find("head_dim"), std::string::npos);
  m["head_dim"] = 128;
  EXPECT_TRUE(compile_json(plan_of(m, 8)));
}

TEST(MegatronRules, Fp8KeepsBf16WeightsAndFp32OptimizerState) {
  // Transformer Engine's fp8 recipe under Megatron-LM: GEMMs run in fp8 from bf16 weights, with
  // the fp8 weight and its transpose cached per linear layer; gradients are bf16, and the
  // distributed optimizer keeps fp32 master weights and Adam's two fp32 moments (12 B) as for
  // bf16. Same model, one device: bf16 holds 2 + 2 + 12 B per parameter; fp8 the same plus
  // 2 B per parameter of the transformer layers' linear layers.
  auto mem = [](const char* dtype) {
    json m = transformer(16, 16, 32000);
    m["dtype"] = dtype;
    json plan = plan_of(m, 1);
    plan["cluster"]["devices_per_node"] = 1;
    plan["optimizer"] = {{"kind", "adam"}};
    auto cp = compile_json(plan);
    EXPECT_TRUE(cp) << (cp ? "" : render_all(cp.error()));
    return cp ? std::make_pair(cp->static_mem.at(0), cp->model) : std::make_pair(StaticMemory{}, ModelGraph{});
  };
  const auto [bf16, bf16_model] = mem("bf16");
  const auto [fp8, fp8_model] = mem("fp8");
  int64_t n = 0, linear = 0;
  for (const ModelOp& op : bf16_model.ops) {
    n += op.param_count;
    if (op.kind == OpKind::kQKV || op.kind == OpKind::kOutProj || op.kind == OpKind::kMlpUp ||
        op.kind == OpKind::kMlpDown)
      linear += op.param_count;
  }
  ASSERT_GT(linear, 0);
  EXPECT_EQ(bf16.params, 2 * n);
  EXPECT_EQ(bf16.grads, 2 * n);
  EXPECT_EQ(bf16.optimizer, 12 * n);
  EXPECT_EQ(fp8.params, 2 * n + 2 * linear);  // bf16 weights + fp8 weight and transpose
  EXPECT_EQ(fp8.grads, 2 * n);
  EXPECT_EQ(fp8.optimizer, 12 * n);
  // What data parallelism reduces and ZeRO-3 gathers: the bf16 weights and gradients.
  ASSERT_EQ(bf16_model.ops.size(), fp8_model.ops.size());
  for (size_t i = 0; i < fp8_model.ops.size(); ++i)
    EXPECT_EQ(fp8_model.ops[i].param_bytes, bf16_model.ops[i].param_bytes) << fp8_model.ops[i].name;
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
