// Device programs and the support check (torch-free). See device_program.h and replay.h.
#include "device_program.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "stretto/backend/replay.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto::backend {

using compiler::comm_kind_name;
using compiler::CommKind;
using compiler::CommPurpose;
using compiler::CompiledPlan;
using compiler::DeviceSet;
using compiler::Node;
using compiler::NodeKind;
using compiler::OpKind;
using compiler::TrainingDag;

namespace detail {

int position_in(const DeviceSet& set, int device) {
  const auto it = std::find(set.devices.begin(), set.devices.end(), device);
  return it == set.devices.end() ? -1 : static_cast<int>(it - set.devices.begin());
}

int context_parallel(const CompiledPlan& cp) {
  int c = 1;
  for (const auto& d : cp.plan.schedule)
    if (d.op == plan::DirectiveOp::kReplicate) c = std::max(c, d.context_parallel);
  return c;
}

plan::CpCommType cp_comm_type(const CompiledPlan& cp) {
  for (const auto& d : cp.plan.schedule)
    if (d.op == plan::DirectiveOp::kReplicate && d.context_parallel > 1) return d.cp_comm_type;
  return plan::CpCommType::kP2P;
}

std::vector<DeviceOp> device_ops(const CompiledPlan& cp, int device) {
  std::vector<DeviceOp> out;
  if (device < 0 || device >= cp.num_devices) return out;
  const int c = cp.class_of_device[device];
  if (c < 0) return out;
  const TrainingDag& dag = cp.dag;
  for (uint32_t n : cp.classes[c].program) {
    const Node& nd = dag.nodes[n];
    DeviceOp op;
    op.node = n;
    op.kind = nd.kind;
    op.name = traces::slice_name(cp, n);
    const DeviceSet& ds = dag.device_sets[nd.devs];
    switch (nd.kind) {
      case NodeKind::kCompute:
        op.stream = dag.streams[nd.stream];
        op.rank_in_group = position_in(ds, device);
        out.push_back(op);
        break;
      case NodeKind::kTransfer: {
        const DeviceSet& dst = dag.device_sets[nd.devs2];
        for (size_t i = 0; i < ds.devices.size(); ++i) {
          if (ds.devices[i] == device) {
            DeviceOp s = op;
            s.is_send = true;
            s.peer = dst.devices[i];
            s.stream = fmt::format("{}:{}", dag.streams[nd.stream], s.peer);
            out.push_back(std::move(s));
          }
          if (dst.devices[i] == device) {
            DeviceOp r = op;
            r.is_send = false;
            r.peer = ds.devices[i];
            r.stream = fmt::format("{}:{}", dag.streams[nd.stream], r.peer);
            out.push_back(std::move(r));
          }
        }
        break;
      }
      case NodeKind::kCollective: {
        const int pos = position_in(ds, device);
        if (pos < 0) break;
        const int g = std::max(1, ds.group_size);
        op.group_index = pos / g;
        op.rank_in_group = pos % g;
        op.group.assign(ds.devices.begin() + static_cast<ptrdiff_t>(op.group_index) * g,
                        ds.devices.begin() + static_cast<ptrdiff_t>(op.group_index + 1) * g);
        op.stream = dag.streams[nd.stream];
        out.push_back(std::move(op));
        break;
      }
      default:  // barriers are joins; unknown kinds were refused by check_supported
        break;
    }
  }
  return out;
}

std::vector<std::vector<uint32_t>> local_preds(const CompiledPlan& cp,
                                               const std::vector<DeviceOp>& ops) {
  const TrainingDag& dag = cp.dag;
  std::vector<char> mine(dag.nodes.size(), 0);
  for (const auto& o : ops) mine[o.node] = 1;
  std::vector<std::vector<uint32_t>> preds(dag.nodes.size());
  std::vector<char> done(dag.nodes.size(), 0);
  std::vector<uint32_t> stack;
  for (const auto& o : ops) {
    if (done[o.node]) continue;
    done[o.node] = 1;
    std::set<uint32_t> found;
    std::set<uint32_t> seen_barriers;
    stack.assign(1, o.node);
    while (!stack.empty()) {
      const uint32_t x = stack.back();
      stack.pop_back();
      for (uint32_t k = dag.pred_begin[x]; k < dag.pred_begin[x + 1]; ++k) {
        const uint32_t p = dag.edges[dag.pred[k]].from;
        if (dag.nodes[p].kind == NodeKind::kBarrier) {
          if (seen_barriers.insert(p).second) stack.push_back(p);
        } else if (mine[p]) {
          found.insert(p);
        }
      }
    }
    preds[o.node].assign(found.begin(), found.end());
  }
  // Megatron-LM's asynchronous input-gradient all-reduce (compiler TpOverlap::kAsync) depends
  // on its B node's predecessors in the DAG, and the B node's consumers on the B node alone (the
  // simulator prices the collective inside the node): the replay reduces the gradient that B
  // computes, so the collective waits for B, and whatever waits for B waits for it too.
  std::map<uint32_t, uint32_t> comm_of;
  for (const auto& pr : dag.tp_overlaps)
    if (pr.method == compiler::TpOverlap::kAsync && mine[pr.compute] && mine[pr.comm]) {
      comm_of[pr.compute] = pr.comm;
      preds[pr.comm].push_back(pr.compute);
    }
  if (!comm_of.empty())
    for (const auto& o : ops) {
      std::vector<uint32_t>& p = preds[o.node];
      const size_t n = p.size();
      for (size_t i = 0; i < n; ++i)
        if (auto it = comm_of.find(p[i]); it != comm_of.end() && it->second != o.node)
          p.push_back(it->second);
      std::sort(p.begin(), p.end());
      p.erase(std::unique(p.begin(), p.end()), p.end());
    }
  return preds;
}

std::vector<std::pair<int64_t, int64_t>> merge_intervals(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (auto iv : v) {
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}

}  // namespace detail

std::vector<OpRecord> expected_ops(const CompiledPlan& cp, int device) {
  std::vector<OpRecord> out;
  for (const auto& o : detail::device_ops(cp, device)) {
    OpRecord r;
    r.device = device;
    r.stream = o.stream;
    r.name = o.name;
    r.node = o.node;
    out.push_back(std::move(r));
  }
  return out;
}

Diagnostics check_supported(const CompiledPlan& cp, const ReplayOptions& opt) {
  Diagnostics ds;
  auto refuse = [&](std::string msg, std::string hint, const std::string& ptr = "") {
    Diagnostic d;
    d.message = std::move(msg);
    d.hint = std::move(hint);
    d.loc.file = cp.plan.file;
    d.loc.json_pointer = ptr;
    ds.push_back(std::move(d));
  };
  const plan::ModelSpec& m = cp.plan.model;
  const TrainingDag& dag = cp.dag;
  if (cp.classes.empty()) {
    refuse("the plan has no lowered program", "compile it with lowering (the default)");
    return ds;
  }
  if (opt.max_procs > 0 && cp.num_devices > opt.max_procs)
    refuse(fmt::format("the plan has {} devices, more processes than --max-procs {} allows",
                       cp.num_devices, opt.max_procs),
           "replay runs one process per device: use a plan with fewer devices (see "
           "examples/cpu_*.json) or raise --max-procs",
           "/cluster");
  if (opt.iterations < 1) refuse("--iterations must be at least 1", "");
  if (opt.warmup < 0) refuse("--warmup must not be negative", "");
  if (opt.cuda_graphs) {
    // The whole step is captured: nothing in it may synchronise the host or read host state.
    const std::string why = "--cuda-graphs captures one device's whole step as a CUDA graph";
    if (opt.device == DeviceKind::kCpu || (opt.device == DeviceKind::kAuto && !cuda_available()))
      refuse("--cuda-graphs needs --device cuda (CUDA graphs are CUDA-only)",
             "drop --cuda-graphs, or replay on a GPU");
    if (cp.num_devices != 1)
      refuse(fmt::format("{}: the plan has {} devices", why, cp.num_devices),
             "use a one-device plan, or replay without --cuda-graphs", "/cluster");
    if (opt.warmup < 1 || opt.check)
      refuse(fmt::format("{} after an eager warm-up step: it needs --warmup 1 or more and no "
                         "--check", why),
             "");
    // Dropout masks are drawn on the device, clipping scales by a device tensor and Adam's
    // bias correction follows a device step count: all capture; so does MoE routing padded to
    // a capacity. Dropless MoE routing reads its per-expert token counts on the host.
    if (cp.plan.model.moe && cp.plan.model.moe->capacity_factor <= 0)
      refuse(fmt::format("{}: dropless MoE routing reads its per-expert token counts on the host",
                         why),
             "give moe.capacity_factor (experts padded to a capacity have static shapes), or "
             "replay without --cuda-graphs",
             "/model/moe");
  }
  // Every node and op kind must be one the executor knows (a newer compiler may add some).
  std::set<std::string> unknown;
  for (const Node& n : dag.nodes) {
    switch (n.kind) {
      case NodeKind::kCompute:
      case NodeKind::kTransfer:
      case NodeKind::kCollective:
      case NodeKind::kBarrier:
        break;
      default:
        unknown.insert(fmt::format("node kind {}", static_cast<int>(n.kind)));
    }
    // Context parallelism's exchanges (the p2p ring, all_gather's and a2a's collectives) run
    // inside the attention op; the node marks their place.
    if (n.purpose == CommPurpose::kContextPar) continue;
    if (n.kind == NodeKind::kCollective) {
      const bool known = (n.purpose == CommPurpose::kGradReduce &&
                          (n.comm == CommKind::kAllReduce || n.comm == CommKind::kReduceScatter)) ||
                         (n.purpose == CommPurpose::kParamSync && n.comm == CommKind::kAllGather) ||
                         (n.purpose == CommPurpose::kParamGather && n.comm == CommKind::kAllGather) ||
                         ((n.purpose == CommPurpose::kDispatch || n.purpose == CommPurpose::kCombine) &&
                          n.comm == CommKind::kAllToAll) ||
                         (n.purpose == CommPurpose::kTensorPar && n.comm == CommKind::kAllReduce) ||
                         (n.purpose == CommPurpose::kGradNorm && n.comm == CommKind::kAllReduce) ||
                         (n.purpose == CommPurpose::kLossReduce && n.comm == CommKind::kAllReduce);
      if (!known)
        unknown.insert(
            fmt::format("{} {}", comm_kind_name(n.comm), compiler::comm_purpose_name(n.purpose)));
    }
    if (n.kind == NodeKind::kTransfer && n.comm != CommKind::kSendRecv)
      unknown.insert(fmt::format("transfer {}", comm_kind_name(n.comm)));
    const bool step = n.kind == NodeKind::kCompute && n.op < cp.model.ops.size() &&
                      cp.model.ops[n.op].kind == OpKind::kOptimizer;
    if (n.kind == NodeKind::kCompute && n.tags.pass == plan::Pass::kNone && !step)
      unknown.insert("a compute node without a pass");
    // A recomputed forward's own TP/EP collectives would need the forward's collective
    // bookkeeping replayed inside the backward: not done yet.
    if (n.kind == NodeKind::kCollective && n.recompute &&
        (n.purpose == CommPurpose::kTensorPar || n.purpose == CommPurpose::kDispatch ||
         n.purpose == CommPurpose::kCombine))
      unknown.insert(
          fmt::format("the {} {} of a recomputed forward (recompute of tensor- or "
                      "expert-parallel ops)",
                      comm_kind_name(n.comm), compiler::comm_purpose_name(n.purpose)));
  }
  for (const auto& u : unknown)
    refuse(fmt::format("replay cannot execute {} (an op kind this backend does not know)", u),
           "simulate the plan instead, or extend backend/src/executor.cpp");
  bool cp_checked = false;  // one degree and cp_comm_type per plan (the compiler checked)
  for (const auto& d : cp.plan.schedule) {
    if (d.op == plan::DirectiveOp::kShardTensor && d.sequence_parallel)
      refuse("replay does not support sequence parallelism yet", "drop \"sequence_parallel\"",
             d.pointer);
    if (d.op != plan::DirectiveOp::kReplicate || d.context_parallel <= 1 || cp_checked) continue;
    cp_checked = true;
    // a layout's generated replicate carries the layout's pointer: its keys are cp, cp_comm_type
    const bool layout = d.pointer.ends_with("/layout");
    const std::string at = d.pointer + (layout ? "/cp" : "/context_parallel");
    if (m.dropout > 0)
      refuse(fmt::format("replay does not run dropout with context parallelism (context_parallel "
                         "{}): a CP rank's masks would have to be drawn for its two sequence "
                         "chunks of the full sequence's mask",
                         d.context_parallel),
             "set the model's dropout to 0, or replay with context_parallel 1", at);
    if (m.moe)
      refuse(fmt::format("replay does not run MoE layers with context parallelism "
                         "(context_parallel {}): expert capacity and routing are per rank's "
                         "tokens, not the sequence's",
                         d.context_parallel),
             "replay a dense model with context parallelism, or context_parallel 1", at);
  }
  if (m.family == plan::ModelSpec::Family::kTransformer) {
    const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
    if (m.head_dim > 0 && m.head_dim * m.heads != m.hidden)
      refuse("replay builds heads of width hidden / heads; this plan's head_dim differs",
             "simulate the plan instead", "/model/head_dim");
    if (m.heads <= 0 || m.hidden % m.heads != 0 || m.heads % kv != 0)
      refuse("replay needs hidden divisible by heads and heads divisible by kv_heads", "",
             "/model");
    if (m.tie_embeddings)
      refuse("replay does not support tie_embeddings yet (the head would share the embedding's "
             "weight and the tied-embedding gradient all-reduce sum the two copies)",
             "set \"tie_embeddings\": false", "/model/tie_embeddings");
  }
  // Tensor parallelism: degrees must divide heads, kv heads, ffn and vocab; no MoE layers.
  std::set<int> tps;
  for (const Node& n : dag.nodes)
    if (n.kind == NodeKind::kCompute && n.tp > 1) {
      tps.insert(n.tp);
      const OpKind k = cp.model.ops[n.op].kind;
      if (k == OpKind::kExperts || k == OpKind::kSharedExperts || k == OpKind::kRouter)
        tps.insert(-1);
      if (k == OpKind::kSynthetic) tps.insert(-2);
    }
  for (int t : tps) {
    if (t == -1) {
      refuse("replay does not support tensor parallelism of MoE layers yet", "shard_tensor only "
             "dense layers");
      continue;
    }
    if (t == -2) {
      refuse("replay does not support tensor parallelism of synthetic regions", "");
      continue;
    }
    const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
    if (m.heads % t || kv % t || m.ffn_hidden % t || m.vocab % t)
      refuse(fmt::format("TP degree {} must divide heads ({}), kv_heads ({}), ffn_hidden ({}) and "
                         "vocab ({})",
                         t, m.heads, kv, m.ffn_hidden, m.vocab),
             "", "/schedule");
  }
  // Expert parallelism: the experts must split evenly.
  for (const Node& n : dag.nodes)
    if (n.kind == NodeKind::kCollective && n.comm == CommKind::kAllToAll && m.moe) {
      const int ep = dag.device_sets[n.devs].group_size;
      if (ep > 0 && m.moe->experts % ep != 0) {
        refuse(fmt::format("{} experts do not split evenly over {} devices", m.moe->experts, ep),
               "", "/model/moe/experts");
        break;
      }
    }
  // A layer runs on one device set per microbatch (its residual stream stays local), and a
  // consumer with several inputs gets them all from its own device or one transfer.
  {
    std::map<std::pair<int, int>, uint32_t> layer_set;  // (layer, mb) -> device set
    std::vector<uint32_t> fwd_set(cp.model.ops.size() * std::max(1, cp.num_microbatches),
                                  compiler::kNone);
    for (const Node& n : dag.nodes) {
      if (n.kind != NodeKind::kCompute || n.tags.pass != plan::Pass::kF) continue;
      const int mb = std::max(0, n.tags.mb());
      fwd_set[static_cast<size_t>(mb) * cp.model.ops.size() + n.op] = n.devs;
      const int layer = n.tags.layer();
      if (layer < 0) continue;
      auto [it, added] = layer_set.emplace(std::make_pair(layer, mb), n.devs);
      if (!added && it->second != n.devs) {
        refuse(fmt::format("layer {} runs on more than one device set (its ops are placed apart)",
                           layer),
               "place whole layers (filter by PP or LAYER), so the residual stream stays on one "
               "device");
        break;
      }
    }
    // The compiler sends one transfer per remote device set (the largest producer's output):
    // two inputs from the same remote set would leave one of them missing.
    for (uint32_t o = 0; o < cp.model.ops.size(); ++o) {
      const auto& in = cp.model.ops[o].inputs;
      if (in.size() < 2) continue;
      for (int mb = 0; mb < cp.num_microbatches; ++mb) {
        const size_t base = static_cast<size_t>(mb) * cp.model.ops.size();
        std::map<uint32_t, int> remote;  // device set -> inputs from it
        bool bad = false;
        for (uint32_t i : in)
          if (fwd_set[base + i] != fwd_set[base + o]) bad |= ++remote[fwd_set[base + i]] > 1;
        if (bad) {
          refuse(fmt::format("{} takes several inputs from one other device set",
                             cp.model.ops[o].name),
                 "place the shared experts with the routed experts and the residual stream");
          break;
        }
      }
    }
  }
  // Host memory: parameters, gradients and Adam state in fp32 per process, plus activations.
  {
    int64_t params = 0;
    for (const auto& op : cp.model.ops) params += op.param_count;
    const compiler::CompileSummary s = compiler::summarize(cp);
    int64_t act = 0;
    for (const auto& d : s.devices) act += d.activation_bytes_per_mb;
    const int dt = plan::dtype_bytes(cp.model.dtype);
    const double need = static_cast<double>(params) * 16 +
                        static_cast<double>(act) * 4.0 / dt * cp.num_microbatches;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const double ram = pages > 0 && page > 0 ? static_cast<double>(pages) * page : 0;
    if (ram > 0 && need > 0.5 * ram)
      refuse(fmt::format("the model needs about {:.1f} GiB in fp32 (parameters, gradients, Adam "
                         "state, activations), more than half of this host's {:.1f} GiB",
                         need / (1 << 30), ram / (1 << 30)),
             "replay a CPU-sized plan (examples/cpu_*.json): fewer layers, a smaller hidden size",
             "/model");
  }
  return ds;
}

}  // namespace stretto::backend
