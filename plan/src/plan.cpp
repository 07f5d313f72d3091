// Plan parser (DESIGN.md §2). Every field is type- and range-checked; every problem becomes a
// diagnostic at its JSON location with a hint; all diagnostics are collected before failing.
#include "stretto/plan/plan.h"

#include "stretto/plan/layout.h"
#include "stretto/plan/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>

namespace stretto::plan {

int dtype_bytes(DType d) {
  switch (d) {
    case DType::kFP32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kFP16:
      return 2;
    case DType::kFP8:
      return 1;
  }
  return 2;
}

std::string_view cp_comm_type_name(CpCommType t) {
  static constexpr std::string_view kN[] = {"p2p", "all_gather", "a2a"};  // schema.cpp kCpComm
  return kN[static_cast<size_t>(t)];
}

std::string_view directive_op_name(DirectiveOp op) {
  switch (op) {
    case DirectiveOp::kPlace:
      return "place";
    case DirectiveOp::kReplicate:
      return "replicate";
    case DirectiveOp::kShard:
      return "shard";
    case DirectiveOp::kShardTensor:
      return "shard_tensor";
    case DirectiveOp::kSplit:
      return "split";
    case DirectiveOp::kOrder:
      return "order";
    case DirectiveOp::kRecompute:
      return "recompute";
  }
  return "?";
}

bool OptimizerSpec::keeps_master(int dt) const {
  // Megatron-LM keeps fp32 main params only under --fp16/--bf16 (Float16OptimizerWithFloat16
  // Params); an fp32 model's own weights are the master (FP32Optimizer).
  return master_weights && dt < 4;
}

int64_t OptimizerSpec::state_bytes_per_param(int dt) const {
  // fp32 master copy when kept (mixed precision); moments in fp32 alongside it, else in the
  // parameters' dtype (torch.optim keeps state in the parameter's dtype).
  const bool m = keeps_master(dt);
  const int64_t s = m ? 4 : dt;
  switch (kind) {
    case Kind::kAdam:
      return (m ? 4 : 0) + 2 * s;
    case Kind::kSgd:
      return (m ? 4 : 0) + s;
    case Kind::kNone:
      return 0;
  }
  return 0;
}

int64_t OptimizerSpec::step_bytes_per_param(int dt) const {
  if (kind == Kind::kNone) return 0;
  // HBM traffic of one step per parameter (each tensor read or written once per kernel pass;
  // Megatron's mixed-precision optimizer, fused multi-tensor Adam):
  //  - master weights: copy the dtype grads to fp32 main grads (read dt, write 4) and, after
  //    the update, the fp32 master weights back to the model dtype (read 4, write dt);
  //  - gradient clipping: one read of the grads for the norm, one read + write to scale them;
  //  - Adam: read grad, weight, m, v; write weight, m, v. SGD (momentum): read grad, weight,
  //    momentum; write weight, momentum.
  const bool m = keeps_master(dt);
  const int64_t g = m ? 4 : dt;  // grads as the update reads them
  const int64_t w = m ? 4 : dt;  // weights and moments as the update keeps them
  int64_t b = 0;
  if (m) b += (dt + 4) + (4 + dt);
  if (grad_clip) b += 3 * g;
  b += kind == Kind::kAdam ? g + 6 * w : g + 4 * w;
  return b;
}

int64_t OptimizerSpec::unfused_step_bytes_per_param(int dt) const {
  // The update as Stretto's replay runs it unfused (backend/src/torch_executor.cpp,
  // RankRun::optimizer_step), one pass per elementwise kernel, each tensor read or written once
  // per pass; g: the gradient as the update reads it, w: the weight and moments as it keeps
  // them (fp32 with a master copy, else the parameters' dtype; temporaries in the moments'
  // dtype). The master's casts and the clipping are priced as in step_bytes_per_param.
  //  - SGD with momentum, three kernels (as torch.optim.SGD: torch/optim/sgd.py,
  //    _single_tensor_sgd and its foreach twin _multi_tensor_sgd, the default on CUDA):
  //    m.mul_(momentum) 2 w, m.add_(g) g + 2 w, w.add_(m, -lr) 3 w: g + 7 w, where a fused SGD
  //    (one kernel: Megatron-Core's FusedSGD from Transformer Engine or Apex) moves g + 4 w.
  //  - Adam, nine kernels: m.mul_(b1) 2 w, .add_(g, 1 - b1) g + 2 w, v.mul_(b2) 2 w,
  //    .addcmul_(g, g, 1 - b2) g + 2 w (g is one tensor, read once), m / c1 2 w, v / c2 2 w,
  //    .sqrt_() 2 w, .add_(eps) 2 w, w.addcdiv_(m/c1, den, -lr) 4 w: 2 g + 20 w, where a fused
  //    Adam (FusedAdam) moves g + 6 w. torch.optim.Adam / AdamW without weight decay
  //    (torch/optim/adam.py, _single_tensor_adam and _multi_tensor_adam, the foreach default on
  //    CUDA: the same passes over every tensor of a group) runs seven, 2 g + 16 w: lerp_ for
  //    the first moment's two and 1/c1 folded into the step size (a host scalar; the replay's
  //    bias corrections stay on the device for --cuda-graphs).
  const int64_t w = keeps_master(dt) ? 4 : dt;
  const int64_t g = w;  // the update reads the fp32 main grads with a master, else dt ones
  switch (kind) {
    case Kind::kSgd:
      return step_bytes_per_param(dt) + (g + 7 * w) - (g + 4 * w);
    case Kind::kAdam:
      return step_bytes_per_param(dt) + (2 * g + 20 * w) - (g + 6 * w);
    case Kind::kNone:
      return 0;
  }
  return 0;
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::null:
      return "null";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

// Typed access to a JSON document with diagnostics at the exact location.
class Reader {
 public:
  Reader(const JsonSource& src, Diagnostics& diags) : src_(src), diags_(diags) {}

  const Json* at(const std::string& ptr) const { return src_.find(ptr); }
  void error(const std::string& ptr, std::string msg, std::string hint = {}, int directive = -1,
             bool at_key = false) {
    Diagnostic d = src_.error_at(ptr, std::move(msg), std::move(hint), at_key);
    d.directive = directive;
    diags_.push_back(std::move(d));
  }

  // Checks that `ptr` is an object whose keys are all in `allowed`.
  bool object(const std::string& ptr, const std::vector<std::string>& allowed, int directive = -1,
              const std::string& what = "") {
    const Json* j = at(ptr);
    if (!j || !j->is_object()) {
      error(ptr,
            fmt::format("{} must be an object, found {}", what.empty() ? ptr : what,
                        j ? type_name(*j) : "nothing"),
            "", directive);
      return false;
    }
    for (auto it = j->begin(); it != j->end(); ++it) {
      if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end()) continue;
      std::string near = nearest(it.key(), allowed);
      error(ptr + "/" + pointer_escape(it.key()),
            fmt::format("unknown key '{}'{}", it.key(), what.empty() ? "" : " in " + what),
            near.empty() ? "valid keys: " + join(allowed) : "did you mean '" + near + "'?",
            directive, true);
    }
    return true;
  }

  bool has(const std::string& obj, const std::string& key) const {
    const Json* j = at(obj);
    return j && j->is_object() && j->contains(key);
  }

  // Checks that `ptr` is an object whose keys are all keys of the schema section `section`.
  bool section(const std::string& ptr, std::string_view section, int directive = -1,
               const std::string& what = "") {
    return object(ptr, section_keys(section), directive, what);
  }

  // A number of the schema section `section`: type, range and (unless `required` says
  // otherwise, for keys required only in some cases) requirement from the table.
  template <class T>
  bool num(const std::string& obj, std::string_view section, const std::string& key, T& out,
           int directive = -1) {
    const PlanKey& k = schema_key(section, key);
    return number(obj, key, out, k.min, k.max, k.required(), directive);
  }
  template <class T>
  bool num(const std::string& obj, std::string_view section, const std::string& key, T& out,
           bool required, int directive = -1) {
    const PlanKey& k = schema_key(section, key);
    return number(obj, key, out, k.min, k.max, required, directive);
  }

  // One of the table's `choices` of an enum key; `values[i]` is what choice i means.
  template <class E>
  bool pick(const std::string& obj, std::string_view section, const std::string& key, E& out,
            const std::vector<E>& values, int directive = -1) {
    const PlanKey& k = schema_key(section, key);
    STRETTO_ASSERT(k.choices.size() == values.size(), "an enum key's values and choices differ");
    std::vector<std::pair<std::string, E>> options;
    for (size_t i = 0; i < values.size(); ++i)
      options.emplace_back(std::string(k.choices[i]), values[i]);
    return choice(obj, key, out, options, k.required(), directive);
  }

  template <class T>
  bool number(const std::string& obj, const std::string& key, T& out, double lo, double hi,
              bool required, int directive = -1) {
    std::string ptr = obj + "/" + key;
    const Json* j = at(ptr);
    if (!j) {
      if (required) error(obj, fmt::format("missing required key '{}'", key), "", directive);
      return false;
    }
    if (!j->is_number() || (std::is_integral_v<T> && !j->is_number_integer())) {
      error(ptr,
            fmt::format("'{}' must be {}, found {}", key,
                        std::is_integral_v<T> ? "an integer" : "a number", type_name(*j)),
            "", directive);
      return false;
    }
    double v = j->get<double>();
    if (!(v >= lo && v <= hi)) {
      error(ptr, fmt::format("'{}' = {} is out of range [{}, {}]", key, j->dump(), lo, hi), "",
            directive);
      return false;
    }
    out = std::is_integral_v<T> ? static_cast<T>(j->get<int64_t>()) : static_cast<T>(v);
    return true;
  }

  bool string(const std::string& obj, const std::string& key, std::string& out, bool required,
              int directive = -1) {
    std::string ptr = obj + "/" + key;
    const Json* j = at(ptr);
    if (!j) {
      if (required) error(obj, fmt::format("missing required key '{}'", key), "", directive);
      return false;
    }
    if (!j->is_string()) {
      error(ptr, fmt::format("'{}' must be a string, found {}", key, type_name(*j)), "", directive);
      return false;
    }
    out = j->get<std::string>();
    return true;
  }

  bool boolean(const std::string& obj, const std::string& key, bool& out, int directive = -1) {
    std::string ptr = obj + "/" + key;
    const Json* j = at(ptr);
    if (!j) return false;
    if (!j->is_boolean()) {
      error(ptr, fmt::format("'{}' must be true or false, found {}", key, type_name(*j)), "",
            directive);
      return false;
    }
    out = j->get<bool>();
    return true;
  }

  template <class E>
  bool choice(const std::string& obj, const std::string& key, E& out,
              const std::vector<std::pair<std::string, E>>& options, bool required,
              int directive = -1) {
    std::string s;
    if (!string(obj, key, s, required, directive)) return false;
    std::vector<std::string> names;
    for (const auto& [n, e] : options) {
      if (n == s) {
        out = e;
        return true;
      }
      names.push_back(n);
    }
    std::string near = nearest(s, names);
    error(obj + "/" + key, fmt::format("unknown {} '{}'", key, s),
          near.empty() ? "valid values: " + join(names) : "did you mean '" + near + "'?",
          directive);
    return false;
  }

  bool int_list(const std::string& ptr, std::vector<int>& out, int directive, bool allow_empty) {
    const Json* j = at(ptr);
    if (!j || !j->is_array()) {
      error(ptr,
            fmt::format("expected a list of device ids, found {}", j ? type_name(*j) : "nothing"),
            "e.g. \"devices\": [0, 1]", directive);
      return false;
    }
    if (j->empty() && !allow_empty) {
      error(ptr, "the device list is empty", "list at least one device id", directive);
      return false;
    }
    bool ok = true;
    std::set<int> seen;
    for (size_t i = 0; i < j->size(); ++i) {
      const Json& e = (*j)[i];
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > 1 << 24) {
        error(ptr + "/" + std::to_string(i), "device ids are non-negative integers", "", directive);
        ok = false;
        continue;
      }
      int v = e.get<int>();
      if (!seen.insert(v).second) {
        error(ptr + "/" + std::to_string(i), fmt::format("device {} is listed twice", v), "",
              directive);
        ok = false;
      }
      out.push_back(v);
    }
    return ok;
  }

  const JsonSource& src() const { return src_; }

 private:
  const JsonSource& src_;
  Diagnostics& diags_;
};


// `pp_regions`: a count (even split) or a list of layers per region.
void parse_pp_regions(Reader& r, const std::string& P, ModelSpec& m) {
  const Json* j = r.at(P + "/pp_regions");
  if (!j || !j->is_array()) {
    r.num(P, "model", "pp_regions", m.pp_regions);
    return;
  }
  const std::string Q = P + "/pp_regions";
  if (j->empty() || j->size() > 100000) {
    r.error(Q, "pp_regions lists no regions", "e.g. \"pp_regions\": [7, 8, 8, 9]");
    return;
  }
  bool ok = true;
  for (size_t i = 0; i < j->size(); ++i) {
    const Json& e = (*j)[i];
    const bool end = i == 0 || i + 1 == j->size();
    if (!e.is_number_integer() || e.get<int64_t>() < (end && j->size() > 1 ? 0 : 1) ||
        e.get<int64_t>() > 100000) {
      r.error(Q + "/" + std::to_string(i),
              fmt::format("pp_regions[{}] must be a layer count {} 1", i,
                          end && j->size() > 1 ? "of at least 0 (first or last region), else" : ">="),
              "only the first and last region may hold no transformer layer (embedding, head)");
      ok = false;
      continue;
    }
    m.region_layers.push_back(e.get<int>());
  }
  if (!ok) {
    m.region_layers.clear();
    return;
  }
  m.pp_regions = static_cast<int>(m.region_layers.size());
}

void parse_model(Reader& r, ModelSpec& m) {
  const std::string P = "/model";
  if (!r.section(P, "model", -1, "model")) return;
  r.pick<ModelSpec::Family>(P, "model", "family", m.family,
                            {ModelSpec::Family::kTransformer, ModelSpec::Family::kSynthetic});
  r.string(P, "name", m.name, false);
  r.num(P, "model", "layers", m.layers);
  parse_pp_regions(r, P, m);
  r.num(P, "model", "microbatch_size", m.microbatch_size);
  r.pick<DType>(P, "model", "dtype", m.dtype,
                {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8});
  if (m.family == ModelSpec::Family::kSynthetic) {
    r.num(P, "model", "activation_bytes", m.activation_bytes);
    r.num(P, "model", "param_bytes", m.param_bytes);
    r.num(P, "model", "boundary_bytes", m.boundary_bytes);
    r.num(P, "model", "flops", m.flops);
    for (const char* k : {"hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab",
                          "make_vocab_size_divisible_by", "seq_len", "moe", "attention", "bias",
                          "dropout", "async_tp_grad_reduce", "gated_mlp", "tie_embeddings"})
      if (r.has(P, k))
        r.error(P + "/" + k, fmt::format("'{}' does not apply to a synthetic model", k),
                "synthetic models take activation_bytes, param_bytes, boundary_bytes, flops", -1,
                true);
    return;
  }
  r.num(P, "model", "hidden", m.hidden, true);
  r.num(P, "model", "heads", m.heads, true);
  r.num(P, "model", "kv_heads", m.kv_heads);
  r.num(P, "model", "head_dim", m.head_dim);
  // ffn_hidden: required unless every layer is an MoE layer (checked below, with `moe` read).
  r.num(P, "model", "ffn_hidden", m.ffn_hidden);
  r.num(P, "model", "vocab", m.vocab, true);
  r.num(P, "model", "make_vocab_size_divisible_by", m.vocab_divisible_by);
  r.num(P, "model", "seq_len", m.seq_len, true);
  r.boolean(P, "gated_mlp", m.gated_mlp);
  r.boolean(P, "tie_embeddings", m.tie_embeddings);
  r.pick<AttentionImpl>(P, "model", "attention", m.attention,
                        {AttentionImpl::kFlash, AttentionImpl::kUnfused});
  r.boolean(P, "bias", m.bias);
  r.num(P, "model", "dropout", m.dropout);
  r.boolean(P, "async_tp_grad_reduce", m.async_tp_grad_reduce);
  for (const char* k : {"activation_bytes", "param_bytes", "boundary_bytes", "flops"})
    if (r.has(P, k))
      r.error(P + "/" + k, fmt::format("'{}' only applies to a synthetic model", k), "", -1, true);
  // Megatron-LM asserts hidden % heads == 0 only when --kv-channels (head_dim) is not given.
  if (m.heads > 0 && m.head_dim == 0 && m.hidden % m.heads != 0)
    r.error(P + "/heads",
            fmt::format("hidden ({}) is not divisible by heads ({})", m.hidden, m.heads),
            "give the head width as 'head_dim' when it is not hidden / heads (Qwen3, Gemma)");
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.heads > 0 && m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    r.error(P + "/kv_heads",
            fmt::format("heads ({}) must be a multiple of kv_heads ({})", m.heads, m.kv_heads));
  if (r.has(P, "moe")) {
    const std::string Q = P + "/moe";
    if (r.section(Q, "moe", -1, "moe")) {
      MoeSpec moe;
      r.num(Q, "moe", "experts", moe.experts);
      r.num(Q, "moe", "top_k", moe.top_k);
      r.num(Q, "moe", "expert_ffn_hidden", moe.expert_ffn_hidden);
      r.num(Q, "moe", "shared_experts", moe.shared_experts);
      r.num(Q, "moe", "first_layer", moe.first_layer);
      r.num(Q, "moe", "every", moe.every);
      r.num(Q, "moe", "capacity_factor", moe.capacity_factor);
      r.pick<MoeSpec::DropPolicy>(Q, "moe", "token_drop_policy", moe.token_drop_policy,
                                  {MoeSpec::DropPolicy::kProbs, MoeSpec::DropPolicy::kPosition});
      r.num(Q, "moe", "imbalance", moe.imbalance);
      if (moe.top_k > moe.experts)
        r.error(Q + "/top_k",
                fmt::format("top_k ({}) exceeds experts ({})", moe.top_k, moe.experts));
      // The policy picks which tokens over an expert's capacity are dropped; dropless routing
      // (no capacity_factor) drops none, so a policy given there would be silently unused.
      if (r.has(Q, "token_drop_policy") && !(moe.capacity_factor > 0))
        r.error(Q + "/token_drop_policy",
                "token_drop_policy without capacity_factor: dropless routing drops no token",
                "set moe.capacity_factor (e.g. 1.0) to drop tokens over an expert's capacity, or "
                "remove token_drop_policy");
      m.moe = moe;
    }
  }
  // A dense layer needs ffn_hidden; a model whose every layer is an MoE layer does not.
  const bool all_moe = m.moe && m.moe->first_layer == 0 && m.moe->every == 1;
  if (m.ffn_hidden == 0 && !all_moe && !r.has(P, "ffn_hidden"))
    r.error(P, "missing required key 'ffn_hidden'",
            m.moe ? "only a model whose every layer is an MoE layer (moe.first_layer 0, "
                    "moe.every 1) has no dense MLP and may leave it out"
                  : "the width of every layer's MLP");
}

struct Preset {
  const char* name;
  DeviceSpec dev;
  int devices_per_node;
  LinkSpec intra, inter;
};

// Published peak numbers. Dense BF16 tensor-core peak (no sparsity), HBM bandwidth, memory,
// SM count from the vendor data sheets; intra-node = NVLink per-direction bandwidth per GPU;
// inter-node = one 400 Gb/s (H100/H200, NDR) or 200 Gb/s (A100, HDR) NIC per GPU.
//
// Outside the allocator (plan keys cuda_context_MiB, nccl_channels; docs/semantics.md):
// - kCudaContextMiB: the CUDA context a PyTorch process creates on its device, "around 400MB"
//   with CUDA >= 11.7's lazy module loading (PyTorch's default), per NVIDIA's PyTorch engineer
//   in pytorch/pytorch#109888 (pytorch/pytorch#107667: ~300 MB; > 1000 MB before lazy loading).
//   It grows with the kernels a process loads; set the key from nvidia-smi on your machine.
// - kNcclChannels: NCCL's collective channels on an 8-GPU Hopper node: "16 coll channels ...
//   16 p2p channels per peer" in the NCCL INFO log of NVIDIA/nccl#892 (8 x H800, NVSwitch),
//   "Channel 01/16" in NVIDIA/nccl#1538 (2 x 8 Hopper GPUs). Not measured for A100; the same
//   value there. NCCL picks it from the topology: read it from NCCL_DEBUG=INFO on your machine.
constexpr double kCudaContextMiB = 400;
constexpr int kNcclChannels = 16;
const Preset kPresets[] = {
    {"h100-sxm", {"h100-sxm", 989.4, 3350, 80, 132, kCudaContextMiB, kNcclChannels}, 8,
     {450, 2.0}, {50, 5.0}},
    {"h200", {"h200", 989.4, 4800, 141e9 / (1u << 30), 132, kCudaContextMiB, kNcclChannels}, 8,
     {450, 2.0}, {50, 5.0}},
    {"a100-sxm", {"a100-sxm", 312, 2039, 80, 108, kCudaContextMiB, kNcclChannels}, 8,
     {300, 2.0}, {25, 5.0}},
    // A CPU process as used by the Gloo backend: numbers for one multi-core socket; links are
    // loopback TCP (Gloo) — calibrate with `stretto profile` on the machine at hand. No CUDA
    // context, no NCCL.
    {"cpu", {"cpu", 1.0, 50, 64, 1, 0, 0}, 1, {5, 20.0}, {5, 20.0}},
};

void parse_link(Reader& r, const std::string& obj, const std::string& key, LinkSpec& l) {
  if (!r.has(obj, key)) return;
  std::string P = obj + "/" + key;
  if (!r.section(P, "link", -1, key)) return;
  r.num(P, "link", "bandwidth_GBps", l.bandwidth_GBps);
  r.num(P, "link", "latency_us", l.latency_us);
}

void parse_cluster(Reader& r, ClusterSpec& c) {
  const std::string P = "/cluster";
  if (!r.section(P, "cluster", -1, "cluster")) return;
  c.preset = "h100-sxm";
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.push_back(p.name);
  if (r.string(P, "preset", c.preset, false) &&
      std::find(names.begin(), names.end(), c.preset) == names.end()) {
    std::string near = nearest(c.preset, names);
    r.error(P + "/preset", fmt::format("unknown cluster preset '{}'", c.preset),
            near.empty() ? "presets: " + join(names) : "did you mean '" + near + "'?");
    c.preset = "h100-sxm";
  }
  for (const auto& p : kPresets)
    if (p.name == c.preset) {
      c.device = p.dev;
      c.devices_per_node = p.devices_per_node;
      c.intra_node = p.intra;
      c.inter_node = p.inter;
      c.dcn = LinkSpec{p.inter.bandwidth_GBps / 4, 20.0};
    }
  r.num(P, "cluster", "nodes", c.nodes);
  r.num(P, "cluster", "devices_per_node", c.devices_per_node);
  r.num(P, "cluster", "peak_tflops", c.device.peak_tflops);
  r.num(P, "cluster", "hbm_GBps", c.device.hbm_GBps);
  r.num(P, "cluster", "memory_GiB", c.device.memory_GiB);
  r.num(P, "cluster", "sms", c.device.sms);
  r.num(P, "cluster", "cuda_context_MiB", c.device.cuda_context_MiB);
  r.num(P, "cluster", "nccl_channels", c.device.nccl_channels);
  parse_link(r, P, "intra_node", c.intra_node);
  parse_link(r, P, "inter_node", c.inter_node);
  r.num(P, "cluster", "islands", c.islands);
  parse_link(r, P, "dcn", c.dcn);
  if (c.nodes % c.islands != 0)
    r.error(P + "/islands",
            fmt::format("{} nodes cannot be split evenly into {} islands", c.nodes, c.islands));
}

void parse_costmodel(Reader& r, CostModelSpec& cm, bool present) {
  const std::string P = "/costmodel";
  if (!present) return;
  const Json* j = r.at(P);
  if (!j->is_object()) {
    r.error(P, "costmodel must be an object", "e.g. {\"kind\": \"analytic\"}");
    return;
  }
  r.pick<CostModelSpec::Kind>(P, "costmodel", "kind", cm.kind,
                              {CostModelSpec::Kind::kAnalytic, CostModelSpec::Kind::kProfiled,
                               CostModelSpec::Kind::kFixed});
  if (cm.kind == CostModelSpec::Kind::kFixed) {
    r.object(P, fixed_costmodel_keys(), -1, "a fixed cost model");
    double scale = 1e6;  // ms
    std::string unit = "ms";
    if (r.string(P, "unit", unit, false)) {
      if (unit == "ns")
        scale = 1;
      else if (unit == "us")
        scale = 1e3;
      else if (unit == "ms")
        scale = 1e6;
      else if (unit == "s")
        scale = 1e9;
      else
        r.error(P + "/unit", fmt::format("unknown unit '{}'", unit), "use ns, us, ms or s");
    }
    double f = 0, b = 0, bi = -1, bw = -1, comm = 0;
    r.num(P, "costmodel", "F", f, true);
    r.num(P, "costmodel", "B", b, true);
    r.num(P, "costmodel", "BI", bi);
    r.num(P, "costmodel", "BW", bw);
    r.num(P, "costmodel", "comm", comm);
    auto ns = [&](double x) { return static_cast<int64_t>(std::llround(x * scale)); };
    cm.f_ns = ns(f);
    cm.b_ns = ns(b);
    // Without explicit BI/BW, a split backward halves B (the ZB papers' F = BI = BW setting).
    cm.bi_ns = bi >= 0 ? ns(bi) : cm.b_ns / 2;
    cm.bw_ns = bw >= 0 ? ns(bw) : cm.b_ns - cm.bi_ns;
    cm.comm_ns = ns(comm);
    return;
  }
  r.string(P, "profile", cm.profile, cm.kind == CostModelSpec::Kind::kProfiled);
  if (!cm.profile.empty() && !r.src().file().empty()) {
    std::filesystem::path base = std::filesystem::path(r.src().file()).parent_path();
    if (std::filesystem::path(cm.profile).is_relative()) cm.profile = (base / cm.profile).string();
  }
  cm.options = Json::object();
  for (auto it = j->begin(); it != j->end(); ++it)
    if (it.key() != "kind" && it.key() != "profile") cm.options[it.key()] = it.value();
}

void parse_optimizer(Reader& r, OptimizerSpec& o) {
  const std::string P = "/optimizer";
  if (!r.section(P, "optimizer", -1, "optimizer")) return;
  o.given = true;
  r.pick<OptimizerSpec::Kind>(P, "optimizer", "kind", o.kind,
                              {OptimizerSpec::Kind::kAdam, OptimizerSpec::Kind::kSgd,
                               OptimizerSpec::Kind::kNone});
  r.boolean(P, "master_weights", o.master_weights);
  r.boolean(P, "grad_clip", o.grad_clip);
}

const std::vector<std::string> kTagKeys = section_keys("filter");

}  // namespace

namespace detail {

// Filter parsing shared by directives and order groups.
bool parse_filter_into(Reader& r, const std::string& ptr, Filter& f, int directive) {
  const Json* j = r.at(ptr);
  if (!j || !j->is_object()) {
    r.error(
        ptr,
        fmt::format("a filter must be an object of tags, found {}", j ? type_name(*j) : "nothing"),
        "e.g. {\"PP\": 0, \"MB\": \"*\", \"PASS\": \"F\"}; {} matches everything", directive);
    return false;
  }
  f.pointer = ptr;
  bool ok = true;
  for (auto it = j->begin(); it != j->end(); ++it) {
    const std::string kp = ptr + "/" + pointer_escape(it.key());
    const Json& v = it.value();
    if (it.key() == "PASS") {
      auto p = v.is_string() ? parse_pass(v.get<std::string>()) : std::nullopt;
      if (!p) {
        std::string s = v.is_string() ? v.get<std::string>() : v.dump();
        std::string near = nearest(s, {"F", "B", "BI", "BW"});
        r.error(kp, fmt::format("unknown PASS {}", v.dump()),
                near.empty() ? "PASS is one of F, B, BI, BW" : "did you mean '" + near + "'?",
                directive);
        ok = false;
      } else {
        f.pass = *p;
      }
      continue;
    }
    auto key = parse_tag_key(it.key());
    if (!key) {
      std::string near = nearest(it.key(), kTagKeys);
      r.error(kp, fmt::format("unknown tag '{}'", it.key()),
              near.empty() ? "tags are PP, EP, LAYER, MB and PASS" : "did you mean '" + near + "'?",
              directive, true);
      ok = false;
      continue;
    }
    TagCond& c = f.cond[static_cast<size_t>(*key)];
    if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1ll << 31)) {
      c = {TagCond::kEquals, v.get<int32_t>()};
    } else if (v.is_string() && v.get<std::string>() == "*") {
      c = {TagCond::kPresent, 0};
    } else if (v.is_string() && v.get<std::string>() == "-") {
      c = {TagCond::kAbsentOnly, 0};
    } else {
      r.error(kp, fmt::format("tag value {} is not an index, \"*\" or \"-\"", v.dump()),
              "\"*\" = tag present with any value, \"-\" = tag absent", directive);
      ok = false;
    }
  }
  return ok;
}

}  // namespace detail

namespace {

std::vector<std::string> op_names() {
  std::vector<std::string> v;
  for (std::string_view op : directive_ops()) v.emplace_back(op);
  return v;
}

bool parse_directive(Reader& r, const std::string& ptr, int index, Directive& d) {
  d.index = index;
  d.pointer = ptr;
  const Json* j = r.at(ptr);
  if (!j || !j->is_object()) {
    r.error(ptr,
            fmt::format("directive {} must be an object, found {}", index,
                        j ? type_name(*j) : "nothing"),
            "e.g. {\"op\": \"place\", \"filter\": {\"PP\": 0}, \"devices\": [0]}", index);
    return false;
  }
  std::string op;
  if (!r.string(ptr, "op", op, true, index)) return false;
  const std::vector<std::string> kOps = op_names();
  auto it = std::find(kOps.begin(), kOps.end(), op);
  if (it == kOps.end()) {
    std::string near = nearest(op, kOps);
    r.error(ptr + "/op", fmt::format("unknown directive op '{}'", op),
            near.empty() ? "ops: " + join(kOps) : "did you mean '" + near + "'?", index);
    return false;
  }
  d.op = static_cast<DirectiveOp>(it - kOps.begin());
  bool ok = true;
  auto need_filter = [&] {
    if (!r.has(ptr, "filter")) {
      r.error(ptr, fmt::format("'{}' needs a 'filter'", op), "{} matches everything", index);
      ok = false;
      return;
    }
    ok &= detail::parse_filter_into(r, ptr + "/filter", d.filter, index);
  };
  auto need_devices = [&] {
    if (!r.has(ptr, "devices")) {
      r.error(ptr, fmt::format("'{}' needs 'devices'", op), "e.g. \"devices\": [0, 1]", index);
      ok = false;
      return;
    }
    ok &= r.int_list(ptr + "/devices", d.devices, index, false);
  };
  switch (d.op) {
    case DirectiveOp::kPlace:
      ok &= r.section(ptr, "place", index, "place");
      need_filter();
      need_devices();
      r.string(ptr, "stream", d.stream, false, index);
      break;
    case DirectiveOp::kReplicate:
      ok &= r.section(ptr, "replicate", index, "replicate");
      need_filter();
      need_devices();
      r.string(ptr, "reduce_stream", d.reduce_stream, false, index);
      r.string(ptr, "gather_stream", d.gather_stream, false, index);
      r.num(ptr, "replicate", "bucket_size", d.bucket_size_MB, index);
      r.boolean(ptr, "shard_grads", d.shard_grads, index);
      r.boolean(ptr, "shard_params", d.shard_params, index);
      r.boolean(ptr, "shard_optimizer", d.shard_optimizer, index);
      if (r.num(ptr, "replicate", "context_parallel", d.context_parallel, index) &&
          d.context_parallel > 1 && d.devices.size() % static_cast<size_t>(d.context_parallel) != 0) {
        r.error(ptr + "/context_parallel",
                fmt::format("'context_parallel' = {} does not divide the {} devices listed",
                            d.context_parallel, d.devices.size()),
                "list dp × cp devices, each CP group's cp devices consecutively", index);
        ok = false;
      }
      if (r.has(ptr, "cp_comm_type")) {
        r.pick<CpCommType>(ptr, "replicate", "cp_comm_type", d.cp_comm_type,
                           {CpCommType::kP2P, CpCommType::kAllGather, CpCommType::kA2A}, index);
        if (d.context_parallel <= 1) {
          r.error(ptr + "/cp_comm_type",
                  "'cp_comm_type' without context parallelism: there is no CP communication",
                  "set \"context_parallel\" to 2 or more, or drop cp_comm_type", index, true);
          ok = false;
        }
      }
      if (d.shard_params && !d.shard_grads) {
        r.error(ptr + "/shard_params", "shard_params (ZeRO-3) requires shard_grads (ZeRO-2)",
                "set \"shard_grads\": true as well", index, true);
        ok = false;
      }
      if (d.shard_grads) d.shard_optimizer = true;
      r.num(ptr, "replicate", "prefetch", d.prefetch, index);
      r.boolean(ptr, "reshard_after_forward", d.reshard_after_forward, index);
      for (const char* k : {"prefetch", "reshard_after_forward"})
        if (r.has(ptr, k) && !d.shard_params) {
          r.error(ptr + "/" + k, fmt::format("'{}' applies only with shard_params (ZeRO-3)", k),
                  "set \"shard_params\": true, or drop it", index, true);
          ok = false;
        }
      break;
    case DirectiveOp::kRecompute:
      ok &= r.section(ptr, "recompute", index, "recompute");
      need_filter();
      r.pick<RecomputeMode>(ptr, "recompute", "mode", d.recompute,
                            {RecomputeMode::kFull, RecomputeMode::kSelective}, index);
      break;
    case DirectiveOp::kShard:
      ok &= r.section(ptr, "shard", index, "shard");
      need_filter();
      need_devices();
      r.string(ptr, "stream", d.stream, false, index);
      break;
    case DirectiveOp::kShardTensor: {
      ok &= r.section(ptr, "shard_tensor", index, "shard_tensor");
      need_filter();
      r.string(ptr, "stream", d.stream, false, index);
      r.boolean(ptr, "sequence_parallel", d.sequence_parallel, index);
      r.boolean(ptr, "tp_comm_overlap", d.tp_comm_overlap, index);
      const Json* dv = r.at(ptr + "/devices");
      if (!dv || !dv->is_array() || dv->empty()) {
        r.error(dv ? ptr + "/devices" : ptr, "'shard_tensor' needs 'devices': a list of TP groups",
                "e.g. \"devices\": [[0,1,2,3],[4,5,6,7]] (one group per placed replica)", index);
        ok = false;
        break;
      }
      if ((*dv)[0].is_array()) {
        for (size_t g = 0; g < dv->size(); ++g) {
          d.device_groups.emplace_back();
          ok &= r.int_list(ptr + "/devices/" + std::to_string(g), d.device_groups.back(), index,
                           false);
        }
      } else {
        d.device_groups.emplace_back();
        ok &= r.int_list(ptr + "/devices", d.device_groups.back(), index, false);
      }
      size_t tp = d.device_groups[0].size();
      for (size_t g = 0; g < d.device_groups.size(); ++g)
        if (d.device_groups[g].size() != tp) {
          r.error(ptr + "/devices/" + std::to_string(g),
                  fmt::format("TP group {} has {} devices, group 0 has {}", g,
                              d.device_groups[g].size(), tp),
                  "all TP groups of one directive have the same size", index);
          ok = false;
        }
      // Megatron-LM refuses --tp-comm-overlap without --sequence-parallel (arguments.py), and
      // with one device per group there is no TP communication to overlap.
      if (d.tp_comm_overlap && !d.sequence_parallel) {
        r.error(ptr + "/tp_comm_overlap",
                "'tp_comm_overlap' needs 'sequence_parallel': Transformer Engine overlaps the "
                "sequence-parallel all-gathers and reduce-scatters",
                "add \"sequence_parallel\": true (Megatron-LM asserts the same)", index);
        ok = false;
      } else if (d.tp_comm_overlap && tp < 2) {
        r.error(ptr + "/tp_comm_overlap",
                "'tp_comm_overlap' with TP groups of one device: there is no TP communication "
                "to overlap",
                "list TP groups of two or more devices, or drop tp_comm_overlap", index);
        ok = false;
      }
      break;
    }
    case DirectiveOp::kSplit:
      ok &= r.section(ptr, "split", index, "split");
      need_filter();
      d.dim_name = "MB";
      r.string(ptr, "dim_name", d.dim_name, false, index);
      if (d.dim_name != "MB") {
        r.error(ptr + "/dim_name", fmt::format("cannot split along '{}'", d.dim_name),
                "only \"MB\" (microbatches) is supported", index);
        ok = false;
      }
      ok &= r.num(ptr, "split", "num_microbatches", d.num_microbatches, index);
      break;
    case DirectiveOp::kOrder: {
      ok &= r.section(ptr, "order", index, "order");
      const Json* fs = r.at(ptr + "/filters");
      if (!fs || !fs->is_array()) {
        r.error(fs ? ptr + "/filters" : ptr, "'order' needs 'filters': a list of filter groups",
                "e.g. \"filters\": [[{\"MB\":0,\"PASS\":\"F\"}], [{\"MB\":1,\"PASS\":\"F\"}]]",
                index);
        ok = false;
        break;
      }
      for (size_t g = 0; g < fs->size(); ++g) {
        std::string gp = ptr + "/filters/" + std::to_string(g);
        const Json& gj = (*fs)[g];
        d.groups.emplace_back();
        if (gj.is_object()) {  // a lone filter is a group of one
          Filter f;
          ok &= detail::parse_filter_into(r, gp, f, index);
          d.groups.back().push_back(std::move(f));
          continue;
        }
        if (!gj.is_array() || gj.empty()) {
          r.error(gp, "each order group is a non-empty list of filters",
                  "filters in one group may run interleaved; groups run one after another", index);
          ok = false;
          continue;
        }
        for (size_t k = 0; k < gj.size(); ++k) {
          Filter f;
          ok &= detail::parse_filter_into(r, gp + "/" + std::to_string(k), f, index);
          d.groups.back().push_back(std::move(f));
        }
      }
      break;
    }
  }
  return ok;
}

}  // namespace

Expected<std::vector<Directive>> parse_directives(const JsonSource& src,
                                                  const std::string& pointer) {
  Diagnostics diags;
  Reader r(src, diags);
  std::vector<Directive> out;
  const Json* j = r.at(pointer);
  if (!j || !j->is_array()) {
    r.error(pointer, "a schedule must be a list of directives",
            "e.g. [{\"op\": \"place\", \"filter\": {\"PP\": 0}, \"devices\": [0]}]");
    return fail(std::move(diags));
  }
  for (size_t i = 0; i < j->size(); ++i) {
    Directive d;
    if (parse_directive(r, pointer + "/" + std::to_string(i), static_cast<int>(i), d))
      out.push_back(std::move(d));
  }
  if (!diags.empty()) return fail(std::move(diags));
  return out;
}

Expected<Plan> parse_plan(const JsonSource& src) {
  Diagnostics diags;
  Reader r(src, diags);
  Plan plan;
  plan.file = src.file();
  if (!r.section("", "plan", -1, "the plan"))
    return fail(std::move(diags));
  for (const char* k : {"model", "cluster", "schedule"})
    if (!r.has("", k))
      r.error("", fmt::format("the plan has no '{}'", k),
              "a plan has \"model\", \"cluster\", \"costmodel\" (optional) and \"schedule\"");
  if (r.has("", "model")) parse_model(r, plan.model);
  if (r.has("", "cluster")) parse_cluster(r, plan.cluster);
  parse_costmodel(r, plan.costmodel, r.has("", "costmodel"));
  if (r.has("", "optimizer")) parse_optimizer(r, plan.optimizer);
  if (r.has("", "schedule")) {
    auto s = parse_schedule(src, "/schedule");
    if (s) {
      plan.schedule = std::move(s->directives);
      plan.builder = std::move(s->builder);
    } else {
      diags.insert(diags.end(), s.error().begin(), s.error().end());
    }
  }
  if (!diags.empty()) return fail(std::move(diags));
  return plan;
}

Expected<CostModelSpec> parse_costmodel(const JsonSource& src) {
  Diagnostics diags;
  Reader r(src, diags);
  CostModelSpec cm;
  parse_costmodel(r, cm, r.has("", "costmodel"));
  if (!diags.empty()) return fail(std::move(diags));
  return cm;
}

Expected<BuilderCall> parse_builder_call(const JsonSource& src, const std::string& pointer) {
  Diagnostics diags;
  Reader r(src, diags);
  BuilderCall b;
  b.pointer = pointer;
  const std::string& P = pointer;
  if (r.section(P, "builder", -1, "a builder call")) {
    r.string(P, "builder", b.builder, true);
    r.num(P, "builder", "ranks", b.ranks, !r.has(P, "base") && !r.has(P, "layout"));
    if (r.has(P, "layout")) b.layout = parse_layout(src, P + "/layout", diags);  // layout.h
    r.num(P, "builder", "stages_per_rank", b.stages_per_rank);
    r.num(P, "builder", "microbatches", b.microbatches);
    if (r.has(P, "base")) {
      auto base = parse_directives(src, P + "/base");
      if (base)
        b.base = std::move(*base);
      else
        diags.insert(diags.end(), base.error().begin(), base.error().end());
    }
  }
  if (!diags.empty()) return fail(std::move(diags));
  return b;
}

Expected<Schedule> parse_schedule(const JsonSource& src, const std::string& pointer) {
  Schedule s;
  const Json* j = src.find(pointer);
  if (j && j->is_object()) {
    auto b = parse_builder_call(src, pointer);
    if (!b) return fail(std::move(b).error());
    s.builder = std::move(*b);
    return s;
  }
  auto ds = parse_directives(src, pointer);
  if (!ds) return fail(std::move(ds).error());
  s.directives = std::move(*ds);
  return s;
}

bool is_plan_document(const Json& j) { return j.is_object() && j.contains("schedule"); }

bool is_whole_plan(const Json& j) { return is_plan_document(j) && j.contains("model"); }

bool same_but_costmodel(const Json& a, const Json& b) {
  if (!a.is_object() || !b.is_object()) return false;
  if (a.size() - a.count("costmodel") != b.size() - b.count("costmodel")) return false;
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (it.key() == "costmodel") continue;
    const auto other = b.find(it.key());
    if (other == b.end() || *other != it.value()) return false;
  }
  return true;
}

bool eager_kernel_style(const CostModelSpec& cm) {
  if (cm.kind != CostModelSpec::Kind::kAnalytic || !cm.options.is_object()) return false;
  const auto it = cm.options.find("kernel_style");
  if (it == cm.options.end() || !it->is_string()) return false;
  std::string style = it->get<std::string>();
  std::transform(style.begin(), style.end(), style.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return style == "eager";
}

int64_t padded_vocab(const ModelSpec& m, int tp) {
  if (m.family != ModelSpec::Family::kTransformer || m.vocab <= 0) return m.vocab;
  const int64_t multiple = m.vocab_divisible_by * std::max(tp, 1);
  return (m.vocab + multiple - 1) / multiple * multiple;
}

std::string plan_name(const JsonSource& src) {
  const Json* n = src.find("/name");
  return n && n->is_string() ? n->get<std::string>() : std::string();
}

Json filter_to_json(const Filter& f) {
  Json j = Json::object();
  for (size_t i = 0; i < f.cond.size(); ++i) {
    const auto& c = f.cond[i];
    std::string k(kTagKeyNames[i]);
    if (c.kind == TagCond::kEquals)
      j[k] = c.value;
    else if (c.kind == TagCond::kPresent)
      j[k] = "*";
    else if (c.kind == TagCond::kAbsentOnly)
      j[k] = "-";
  }
  if (f.pass) j["PASS"] = std::string(pass_name(*f.pass));
  return j;
}

Json directives_to_json(const std::vector<Directive>& ds) {
  Json arr = Json::array();
  for (const auto& d : ds) {
    Json j;
    j["op"] = std::string(directive_op_name(d.op));
    if (d.op != DirectiveOp::kOrder) j["filter"] = filter_to_json(d.filter);
    switch (d.op) {
      case DirectiveOp::kPlace:
      case DirectiveOp::kShard:
        j["devices"] = d.devices;
        if (!d.stream.empty()) j["stream"] = d.stream;
        break;
      case DirectiveOp::kReplicate:
        j["devices"] = d.devices;
        if (!d.reduce_stream.empty()) j["reduce_stream"] = d.reduce_stream;
        if (!d.gather_stream.empty()) j["gather_stream"] = d.gather_stream;
        j["bucket_size"] = d.bucket_size_MB;
        if (d.shard_grads) j["shard_grads"] = true;
        if (d.shard_params) j["shard_params"] = true;
        if (d.shard_optimizer && !d.shard_grads) j["shard_optimizer"] = true;
        if (d.shard_params && d.prefetch != 1) j["prefetch"] = d.prefetch;
        if (d.shard_params && !d.reshard_after_forward) j["reshard_after_forward"] = false;
        if (d.context_parallel > 1) j["context_parallel"] = d.context_parallel;
        if (d.context_parallel > 1 && d.cp_comm_type != CpCommType::kP2P)
          j["cp_comm_type"] = std::string(cp_comm_type_name(d.cp_comm_type));
        break;
      case DirectiveOp::kRecompute:
        j["mode"] = d.recompute == RecomputeMode::kFull ? "full" : "selective";
        break;
      case DirectiveOp::kShardTensor:
        j["devices"] = d.device_groups;
        if (!d.stream.empty()) j["stream"] = d.stream;
        if (d.sequence_parallel) j["sequence_parallel"] = true;
        if (d.tp_comm_overlap) j["tp_comm_overlap"] = true;
        break;
      case DirectiveOp::kSplit:
        j["dim_name"] = d.dim_name.empty() ? "MB" : d.dim_name;
        j["num_microbatches"] = d.num_microbatches;
        break;
      case DirectiveOp::kOrder: {
        Json gs = Json::array();
        for (const auto& g : d.groups) {
          Json ga = Json::array();
          for (const auto& f : g) ga.push_back(filter_to_json(f));
          gs.push_back(std::move(ga));
        }
        j["filters"] = std::move(gs);
        break;
      }
    }
    arr.push_back(std::move(j));
  }
  return arr;
}

}  // namespace stretto::plan
