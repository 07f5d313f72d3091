// Every collective and transfer the compiler emits, audited against NCCL's definitions.
//
// For each way a plan makes communication (TP with and without sequence parallelism, DP
// gradient buckets, ZeRO-1/2/3, EP dispatch and combine, pipeline send/recv, tied embeddings,
// the gradient-norm all-reduce, the vocab-parallel loss), on groups of 2, 4, 8 and 16 ranks
// and at two model sizes, the test compiles a plan and checks every communication node of the
// DAG (and, under TP, how many of each the forward and backward of a microbatch make):
//
//  * its bytes are what nccl-tests calls the size of the operation (docs/costmodel.md,
//    "Conventions"): the whole buffer of an all-reduce, the gathered output of an all-gather,
//    the input of a reduce-scatter, each rank's whole send buffer of an all-to-all, the message
//    of a send/recv. Expected sizes are written from the model's shapes (b·s·h activations,
//    parameter counts), not from the compiler's own op sizes;
//  * its predicted time, asked of the cost model exactly as the simulator asks it
//    (sim::CostQueries), equals an α–β hand computation with nccl-tests' bus bandwidth
//    convention: time = α + bytes / algbw, busbw = algbw · (n−1)/n for all-gather and
//    reduce-scatter, algbw · 2(n−1)/n for all-reduce. α is NCCL 2.28's ring/Simple latency
//    (tuning.cc: base 8.4 µs + 3.4 µs per NVLink step), busbw the 360 GB/s that NCCL's channel
//    search reaches on the 360 GB/s links of the test cluster (12 channels x 30 GB/s, forced to
//    ring/Simple so that the hand computation has one term); point-to-point flows move their
//    bytes at the link's bandwidth after the link latency plus NCCL's Simple-ring hop (3.4 µs).
//
// A node whose (purpose, kind) the table does not list fails the test, so a collective the
// compiler starts to emit must be added here with its definition.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "stretto/sim/session.h"

namespace stretto::sim {

using compiler::comm_kind_name;
using compiler::comm_purpose_name;
using compiler::CommKind;
using compiler::CommPurpose;

namespace {

using nlohmann::json;

// The test cluster: one node of 32 devices joined by 360 GB/s links with 1 µs latency.
constexpr double kLinkGBps = 360;  // = NCCL's busbw on it (12 channels x 30 GB/s)
constexpr double kLinkLatencyUs = 1;
constexpr double kRingBaseUs = 8.4;   // NCCL 2.28 tuning.cc baseLat[Ring][Simple]
constexpr double kNvlinkHopUs = 3.4;  // NCCL 2.28 tuning.cc hwLat[NVLink][Ring][Simple]

// Model sizes: two message sizes per collective.
struct Size {
  int64_t hidden, heads, seq, batch, vocab;
};
constexpr Size kSizes[] = {{256, 16, 256, 1, 4096}, {1024, 16, 1024, 2, 16384}};
constexpr int64_t kDtype = 2;  // bf16
constexpr int kExperts = 16, kTopK = 2;

// How many TP nodes of one (purpose, kind, forward or backward) a microbatch has. The models
// have 2 layers: 5 column-parallel GEMMs (QKV and MLP up per layer, the head) and 5
// row-parallel ops (the vocab-parallel embedding, the output projection and MLP down per layer).
struct Count {
  CommPurpose purpose;
  CommKind kind;
  bool forward;
  int per_microbatch;
};
constexpr int kColumn = 5, kRow = 5, kMicrobatches = 2;

// A scenario: the layout that makes the communication, for a group size n.
struct Scenario {
  const char* name;
  json (*layout)(int n);
  bool moe = false;
  bool tied = false;
  std::vector<Count> counts = {};  // TP nodes per microbatch (checked when not empty)
};

// Megatron-LM with TP (Shoeybi et al. 2019, Fig. 3): the row-parallel outputs are all-reduced
// in the forward, the column-parallel inputs' gradients in the backward; the vocab-parallel
// cross-entropy all-reduces the max logit, the target logit and the sum of exponentials.
const std::vector<Count> kTpCounts = {
    {CommPurpose::kTensorPar, CommKind::kAllReduce, true, kRow},
    {CommPurpose::kTensorPar, CommKind::kAllReduce, false, kColumn},
    {CommPurpose::kLossReduce, CommKind::kAllReduce, true, 3}};
// With sequence parallelism (Korthikanti et al. 2022, Fig. 5): g = all-gather / reduce-scatter
// in the forward, ḡ = reduce-scatter / all-gather in the backward, and Megatron-Core's column-
// parallel backward all-gathers its sequence-sharded input again for the weight gradient.
const std::vector<Count> kSpCounts = {
    {CommPurpose::kTensorPar, CommKind::kReduceScatter, true, kRow},
    {CommPurpose::kTensorPar, CommKind::kAllGather, true, kColumn},
    {CommPurpose::kTensorPar, CommKind::kAllGather, false, kRow + kColumn},
    {CommPurpose::kTensorPar, CommKind::kReduceScatter, false, kColumn},
    {CommPurpose::kLossReduce, CommKind::kAllReduce, true, 3}};

const Scenario kScenarios[] = {
    {"TP", [](int n) { return json{{"tp", n}}; }, false, false, kTpCounts},
    {"TP+SP", [](int n) { return json{{"tp", n}, {"sequence_parallel", true}}; }, false, false,
     kSpCounts},
    {"DP", [](int n) { return json{{"dp", n}}; }},
    {"ZeRO-1", [](int n) { return json{{"dp", n}, {"zero", 1}}; }},
    {"ZeRO-2", [](int n) { return json{{"dp", n}, {"zero", 2}}; }},
    {"ZeRO-3", [](int n) { return json{{"dp", n}, {"zero", 3}}; }},
    {"EP", [](int n) { return json{{"dp", n}, {"ep", n}}; }, true},
    {"PP+TP, tied embeddings", [](int n) { return json{{"pp", 2}, {"tp", n}}; }, false, true,
     kTpCounts},
    {"PP+DP", [](int n) { return json{{"pp", 2}, {"dp", n}}; }},
    // TP 2 beside DP n: the DP buckets and ZeRO's gathers carry a TP rank's share of the split
    // weights and the replicated norms whole (TP counts are per TP group: not checked here).
    {"TP+DP", [](int n) { return json{{"tp", 2}, {"dp", n}}; }},
    {"TP+ZeRO-1", [](int n) { return json{{"tp", 2}, {"dp", n}, {"zero", 1}}; }},
    {"TP+ZeRO-3", [](int n) { return json{{"tp", 2}, {"dp", n}, {"zero", 3}}; }},
};

json plan_of(const Scenario& sc, int n, const Size& z) {
  json layout = sc.layout(n);
  const int pp = layout.value("pp", 1);
  json model = {{"family", "transformer"}, {"layers", 2},       {"hidden", z.hidden},
                {"heads", z.heads},        {"ffn_hidden", 4 * z.hidden},
                {"vocab", z.vocab},        {"seq_len", z.seq}, {"microbatch_size", z.batch},
                {"pp_regions", pp},        {"tie_embeddings", sc.tied}};
  if (sc.moe)
    model["moe"] = {{"experts", kExperts}, {"top_k", kTopK}, {"expert_ffn_hidden", z.hidden}};
  return {{"model", model},
          {"cluster",
           {{"preset", "h100-sxm"},
            {"nodes", 1},
            {"devices_per_node", 32},
            {"intra_node", {{"bandwidth_GBps", kLinkGBps}, {"latency_us", kLinkLatencyUs}}}}},
          {"costmodel",
           {{"kind", "analytic"},
            {"nccl_algo", "ring"},
            {"nccl_proto", "simple"},
            {"nccl_intra_GBps", kLinkGBps}}},
          {"optimizer", {{"kind", "adam"}}},
          {"schedule", {{"builder", "1f1b"}, {"microbatches", kMicrobatches}, {"layout", layout}}}};
}

// The α–β time of one collective or transfer of `bytes` over g ranks on the test cluster.
int64_t alpha_beta_ns(CommKind kind, int64_t bytes, int g) {
  const double b = static_cast<double>(bytes), n = g;
  double alpha_us = 0, bus_bytes = 0;
  switch (kind) {
    case CommKind::kAllReduce:  // busbw = algbw * 2(n-1)/n
      alpha_us = kRingBaseUs + 2 * (n - 1) * kNvlinkHopUs;
      bus_bytes = b * 2 * (n - 1) / n;
      break;
    case CommKind::kAllGather:  // busbw = algbw * (n-1)/n
    case CommKind::kReduceScatter:
      alpha_us = kRingBaseUs + (n - 1) * kNvlinkHopUs;
      bus_bytes = b * (n - 1) / n;
      break;
    case CommKind::kAllToAll:  // each rank keeps 1/n of its send buffer
      alpha_us = kLinkLatencyUs + kNvlinkHopUs;
      bus_bytes = b * (n - 1) / n;
      break;
    case CommKind::kSendRecv:
      alpha_us = kLinkLatencyUs + kNvlinkHopUs;
      bus_bytes = b;
      break;
    default:
      ADD_FAILURE() << "no hand computation for " << comm_kind_name(kind);
  }
  return std::llround(alpha_us * 1000) +
         static_cast<int64_t>(std::ceil(bus_bytes / kLinkGBps));
}

struct Seen {
  int nodes = 0;
  int64_t bytes = 0;  // summed (buckets)
};

TEST(CollectiveBytes, EveryCollectiveCarriesNcclTestsBytesAndAlphaBetaTime) {
  std::set<std::pair<CommPurpose, CommKind>> covered;
  for (const Scenario& sc : kScenarios)
    for (int n : {2, 4, 8, 16})
      for (const Size& z : kSizes) {
        SCOPED_TRACE(std::string(sc.name) + ", group " + std::to_string(n) + ", hidden " +
                     std::to_string(z.hidden));
        const json plan = plan_of(sc, n, z);
        auto s = Session::from_text(plan.dump(), "collectives.json");
        ASSERT_TRUE(s) << render_all(s.error());
        const compiler::CompiledPlan& cp = s->compiled();
        const json layout = sc.layout(n);
        const int tp = layout.value("tp", 1);
        const int64_t T = z.seq * z.batch;
        const int64_t act = T * z.hidden * kDtype;  // one b x s x h activation, whole
        // The bytes of an op's parameters one TP rank holds: a TP-split op's 1/tp, a
        // replicated op's (the norms) whole, as Megatron keeps a LayerNorm's weight whole on
        // every TP rank (and its gradient in every rank's DP buckets).
        auto rank_param_bytes = [&](const compiler::ModelOp& op) {
          const bool split =
              op.tp != compiler::TpSplit::kReplicated && op.tp != compiler::TpSplit::kNone;
          return op.param_count * kDtype / (split ? tp : 1);
        };
        // Parameters a data-parallel group reduces, per TP rank: every op's, but the routed
        // experts' (their shards are distinct parameters).
        int64_t dense_param_bytes = 0, replicated_param_bytes = 0;
        for (const compiler::ModelOp& op : cp.model.ops)
          if (op.kind != compiler::OpKind::kExperts && op.kind != compiler::OpKind::kOptimizer) {
            dense_param_bytes += rank_param_bytes(op);
            if (op.param_count > 0 && (op.tp == compiler::TpSplit::kReplicated ||
                                       op.tp == compiler::TpSplit::kNone))
              replicated_param_bytes += op.param_count * kDtype;
          }
        // (the audit must see replicated parameters under TP, or it checks nothing of them)
        if (tp > 1) {
          EXPECT_GT(replicated_param_bytes, 0);
        }
        CostQueries queries(cp);
        std::map<std::pair<CommPurpose, CommKind>, Seen> seen;
        std::map<std::tuple<CommPurpose, CommKind, bool>, int> per_pass;
        for (const compiler::Node& nd : cp.dag.nodes) {
          if (nd.kind != compiler::NodeKind::kCollective &&
              nd.kind != compiler::NodeKind::kTransfer)
            continue;
          const auto key = std::make_pair(nd.purpose, nd.comm);
          covered.insert(key);
          if (nd.purpose == CommPurpose::kTensorPar || nd.purpose == CommPurpose::kLossReduce)
            ++per_pass[{nd.purpose, nd.comm, nd.tags.pass == plan::Pass::kF}];
          Seen& k = seen[key];
          ++k.nodes;
          k.bytes += nd.bytes;
          const cost::CommQuery q = queries.comm(nd);
          const std::string what = std::string(comm_purpose_name(nd.purpose)) + " " +
                                   std::string(comm_kind_name(nd.comm)) + " of " +
                                   cp.model.ops[nd.op].name;
          // Expected size and group, from the model's shapes.
          int64_t want = -1;  // -1: summed over the nodes below
          int group = n;
          switch (nd.purpose) {
            case CommPurpose::kTensorPar:  // TP/SP: the whole b x s x h activation
              want = act;
              group = tp;
              break;
            case CommPurpose::kActivation:  // PP: the b x s x h boundary activation, of which
            case CommPurpose::kGradient:    // each TP rank sends its 1/tp (Megatron's scatter-
              want = act / tp;              // gather, Narayanan et al. 2021 §4.1)
              group = 2;
              break;
            case CommPurpose::kDispatch:  // EP: a rank's tokens, top_k slots each, h wide
            case CommPurpose::kCombine:
              want = T * kTopK * z.hidden * kDtype;
              break;
            case CommPurpose::kParamGather:  // ZeRO-3: the op's parameters a TP rank holds,
              want = rank_param_bytes(cp.model.ops[nd.op]);  // gathered
              break;
            case CommPurpose::kTiedGrad:  // the word embedding's gradient, TP rank's share
              want = z.vocab * z.hidden * kDtype / tp;
              group = 2;
              break;
            case CommPurpose::kLossReduce:  // vocab-parallel loss: one fp32 per token, over TP
              want = T * 4;
              group = tp;
              break;
            case CommPurpose::kGradNorm:  // one fp32 scalar over Megatron-Core's group: TP x PP,
              want = 4;                     // every device with the distributed optimizer or EP
              group = tp * layout.value("pp", 1) *
                      (layout.value("zero", 0) > 0 || sc.moe ? layout.value("dp", 1) : 1);
              break;
            case CommPurpose::kGradReduce:  // buckets: whole gradients, summed below
            case CommPurpose::kParamSync:
              break;
            default:
              ADD_FAILURE() << "a node the audit does not know: " << what;
          }
          if (want >= 0) {
            EXPECT_EQ(nd.bytes, want) << what;
          }
          EXPECT_EQ(q.group_size, group) << what;
          EXPECT_EQ(q.bytes, nd.bytes) << what;
          const cost::CommCost c = s->cost_model().comm(q);
          EXPECT_NEAR(static_cast<double>(c.time_ns),
                      static_cast<double>(alpha_beta_ns(nd.comm, want >= 0 ? want : nd.bytes,
                                                        q.group_size)),
                      2.0)
              << what << ", " << nd.bytes << " bytes over " << q.group_size << " ranks ("
              << c.algo << "/" << c.proto << ")";
        }
        // Every TP collective the scenario's Megatron counterpart makes, and no other.
        if (!sc.counts.empty()) {
          std::map<std::tuple<CommPurpose, CommKind, bool>, int> want;
          for (const Count& c : sc.counts)
            want[{c.purpose, c.kind, c.forward}] = c.per_microbatch * kMicrobatches;
          for (const auto& [k, v] : want)
            EXPECT_EQ(per_pass[k], v)
                << comm_purpose_name(std::get<0>(k)) << " " << comm_kind_name(std::get<1>(k))
                << (std::get<2>(k) ? " forward" : " backward");
          for (const auto& [k, v] : per_pass)
            EXPECT_TRUE(want.count(k))
                << v << " unexpected " << comm_purpose_name(std::get<0>(k)) << " "
                << comm_kind_name(std::get<1>(k)) << (std::get<2>(k) ? " forward" : " backward");
        }
        // Gradient buckets (all-reduce, or ZeRO's reduce-scatter) hold every DP-replicated
        // gradient once, as a TP rank holds it; ZeRO-1/2 all-gather every updated parameter.
        const int64_t grads = dense_param_bytes;
        const bool dp = layout.value("dp", 1) > 1, zero = layout.value("zero", 0) > 0;
        const CommKind reduce = zero ? CommKind::kReduceScatter : CommKind::kAllReduce;
        const int64_t reduced = seen[std::make_pair(CommPurpose::kGradReduce, reduce)].bytes;
        const int64_t synced =
            seen[std::make_pair(CommPurpose::kParamSync, CommKind::kAllGather)].bytes;
        if (dp) {
          EXPECT_EQ(reduced, grads);
        }
        if (dp && zero && layout.value("zero", 0) < 3) {
          EXPECT_EQ(synced, grads);
        }
      }
  // The table covers what plans emit: every kind of communication was met at least once.
  for (auto want : std::initializer_list<std::pair<CommPurpose, CommKind>>{
           {CommPurpose::kTensorPar, CommKind::kAllReduce},
           {CommPurpose::kTensorPar, CommKind::kAllGather},
           {CommPurpose::kTensorPar, CommKind::kReduceScatter},
           {CommPurpose::kGradReduce, CommKind::kAllReduce},
           {CommPurpose::kGradReduce, CommKind::kReduceScatter},
           {CommPurpose::kParamSync, CommKind::kAllGather},
           {CommPurpose::kParamGather, CommKind::kAllGather},
           {CommPurpose::kDispatch, CommKind::kAllToAll},
           {CommPurpose::kCombine, CommKind::kAllToAll},
           {CommPurpose::kActivation, CommKind::kSendRecv},
           {CommPurpose::kGradient, CommKind::kSendRecv},
           {CommPurpose::kTiedGrad, CommKind::kAllReduce},
           {CommPurpose::kLossReduce, CommKind::kAllReduce},
           {CommPurpose::kGradNorm, CommKind::kAllReduce}})
    EXPECT_TRUE(covered.count(want)) << comm_purpose_name(want.first) << " "
                                     << comm_kind_name(want.second);
}

}  // namespace
}  // namespace stretto::sim
