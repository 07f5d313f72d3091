#pragma once
// NCCL's collective cost model, rebuilt from its structure (reference/simulators.md §13).
//
// NCCL picks an (algorithm, protocol) pair per collective call by predicting its time with an
// alpha-beta model whose constants live in src/graph/tuning.cc; the pair with the lowest
// prediction wins. We reproduce the three stages, pinned to the NCCL 2.28 constant tables:
//
//  1. topology  (search.cc, ncclTopoCompute): a communicator of `n_ranks` over `n_nodes` gets
//     `n_channels` rings/trees of `bw_per_channel` GB/s each. NCCL finds them by trying the
//     per-architecture speed arrays from fast to slow until paths fit the links; we take the
//     speed that maximises nChannels x speed under the cluster's per-device link bandwidths
//     (NCCL's own comparison criterion), then duplicate channels as ncclTopoDupChannels does.
//  2. tuning    (tuning.cc, ncclTopoTuneModel): per (collective, algorithm, protocol) a latency
//     (base + per-hop hardware latency per link class) and a bus bandwidth (nChannels x speed,
//     capped per protocol and algorithm), converted to algorithm bandwidth (ring: nRanks/nsteps,
//     tree: 1/2).
//  3. choice    (tuning.cc ncclTopoGetAlgoTime + enqueue.cc topoGetAlgoInfo): query-time
//     corrections (tree correction factors, ring plateau), time = lat + nBytes / algBw, the
//     minimum over enabled pairs, first one on ties; NCCL_ALGO / NCCL_PROTO masks.
//
// Modelled algorithms: Tree, Ring, PAT (all-gather / reduce-scatter with one rank per node).
// Not modelled: CollNet (needs SHARP-capable switches and an opt-in), NVLS / NVLSTree (needs
// NVSwitch multicast; deliberately left out, see docs/costmodel.md), tuner plugins, Broadcast
// and Reduce (the DAG has none). Where our cluster description differs from NCCL's topology,
// the deviation is documented next to the code (src/nccl.cpp).
//
// Units: latencies in microseconds, bandwidths in GB/s (== bytes/ns), sizes in bytes, as in NCCL.

#include <array>
#include <cstdint>
#include <string_view>

#include "stretto/compiler/dag.h"
#include "stretto/plan/plan.h"

namespace stretto::cost {

/// NCCL algorithms we model, in NCCL's iteration order (Tree=0, Ring=1, ..., PAT=6).
enum class NcclAlgo : uint8_t { kTree, kRing, kPat };
inline constexpr int kNcclNumAlgos = 3;
/// NCCL protocols, in NCCL's order.
enum class NcclProto : uint8_t { kLL, kLL128, kSimple };
inline constexpr int kNcclNumProtos = 3;
/// GPU generation: selects NCCL's per-architecture constant rows.
enum class NcclArch : uint8_t { kVolta, kAmpere, kHopper, kBlackwell };

std::string_view nccl_algo_name(NcclAlgo a);    ///< "tree", "ring", "pat"
std::string_view nccl_proto_name(NcclProto p);  ///< "ll", "ll128", "simple"
std::string_view nccl_arch_name(NcclArch a);    ///< "volta", "ampere", "hopper", "blackwell"

/// What the machine looks like to NCCL, derived from the ClusterSpec (plus options).
struct NcclSystem {
  NcclArch arch = NcclArch::kHopper;
  bool nvlink = true;            ///< intra-node GPU links are NVLink (else PCIe)
  double intra_GBps = 0;         ///< per device, per direction (ClusterSpec::intra_node)
  double inter_GBps = 0;         ///< per device NIC, per direction (ClusterSpec::inter_node)
  double net_latency_us = 0;     ///< the topology's network latency (NCCL graph->latencyInter)
  double net_overhead_us = 1.0;  ///< per-step network post overhead (tuning.cc: 1 us Intel x86)
  bool amd_cpu = false;          ///< selects the AMD rows of llMaxBws for multi-node
  /// NCCL_ALGO / NCCL_PROTO: which pairs may be used. proto_default_ll128 mirrors NCCL's
  /// "enable LL128 only where tested" default (protoEnable == 2) when the user did not say.
  std::array<bool, kNcclNumAlgos> algo_enabled{true, true, true};
  std::array<bool, kNcclNumProtos> proto_enabled{true, true, true};
  bool proto_default_ll128 = true;
};

/// NCCL's per-hop hardware latency hwLat[link][algo][proto] (us) for the intra-node link class
/// of `sys` (NVLink or PCI), or for the network when `net`.
double nccl_hw_latency_us(const NcclSystem& sys, bool net, NcclAlgo a, NcclProto p);

/// One communicator as NCCL's tuning sees it.
struct NcclComm {
  int n_ranks = 1;
  int n_nodes = 1;
  double ppn = 1;                 ///< ranks per node (n_ranks / n_nodes, as a float like NCCL)
  int n_channels = 1;             ///< after channel duplication
  double bw_per_channel = 0;      ///< GB/s per channel (NCCL bwIntra == bwInter for our graphs)
  bool inter_bottleneck = false;  ///< the per-device NIC, not the intra-node link, limits busBw
  double bus_bw() const { return n_channels * bw_per_channel; }
};

/// Topology stage: channels and per-channel speed of a communicator (see header comment).
NcclComm nccl_comm(const NcclSystem& sys, int n_ranks, int n_nodes);

/// NCCL's tuning entry for one (collective, algorithm, protocol) on a communicator:
/// `bus_bw == 0` means unavailable or disabled (NCCL stores bandwidth 0).
struct NcclTuning {
  double latency_us = 0;  ///< lat[c][a][p]
  double bus_bw = 0;      ///< GB/s after protocol/algorithm caps, before bus->algo conversion
  double ratio = 1;       ///< bus -> algorithm bandwidth factor (ring nRanks/nsteps, tree .5)
};
/// Tuning stage (ncclTopoTuneModel) for one collective kind (AllReduce, AllGather or
/// ReduceScatter), with the system's algorithm/protocol masks applied.
NcclTuning nccl_tune(const NcclSystem& sys, const NcclComm& comm, compiler::CommKind kind,
                     NcclAlgo a, NcclProto p);

/// A predicted time for one pair at one size (ncclTopoGetAlgoTime), with its parts.
struct NcclEstimate {
  NcclAlgo algo = NcclAlgo::kRing;
  NcclProto proto = NcclProto::kSimple;
  bool available = false;
  double latency_us = 0;  ///< after query-time corrections (ring plateau)
  double bus_bw = 0;      ///< GB/s after query-time corrections (tree correction factor)
  double ratio = 1;       ///< bus -> algorithm bandwidth factor
  double time_us = 0;     ///< latency_us + bytes / (1000 * bus_bw * ratio)
};
NcclEstimate nccl_estimate(const NcclSystem& sys, const NcclComm& comm, compiler::CommKind kind,
                           NcclAlgo a, NcclProto p, int64_t bytes);

/// Choice stage (topoGetAlgoInfo): the enabled pair with the lowest predicted time, first in
/// NCCL's (algorithm, protocol) order on ties; FP8 rings over more than 8 ranks are ranked as
/// if 1024x slower (NCCL's precision guard) but the returned time is the unpenalised one.
/// If the masks leave nothing for this collective (NCCL would fail with ncclInvalidUsage), the
/// masks are ignored rather than failing a simulation: the unmasked choice is returned.
/// `available` is false only for n_ranks <= 1 or a kind that is not an NCCL collective.
NcclEstimate nccl_choose(const NcclSystem& sys, const NcclComm& comm, compiler::CommKind kind,
                         int64_t bytes, plan::DType dtype);

}  // namespace stretto::cost
