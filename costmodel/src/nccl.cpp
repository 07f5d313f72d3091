// NCCL's tuning model (see nccl.h). Constants are NCCL 2.28's (src/graph/tuning.cc,
// src/graph/search.cc), which are also those of the 2.30 snapshot described in
// reference/simulators.md §13. Indices: [algo] Tree=0 Ring=1 PAT=2 (NCCL's 0, 1, 6);
// [proto] LL=0 LL128=1 Simple=2; [arch] Volta, Ampere, Hopper, Blackwell; [nodes] N1, N2, N>=3.

#include "stretto/costmodel/nccl.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

namespace stretto::cost {

using compiler::CommKind;

namespace {

// tuning.cc ncclTunerConstantsDefaults.baseLatencies (us): Tree, Ring, PAT rows.
constexpr double kBaseLat[kNcclNumAlgos][kNcclNumProtos] = {
    {6.8, 14.0, 8.4},  // Tree
    {6.6, 14.0, 8.4},  // Ring
    {8.0, 8.0, 8.0},   // PAT
};

// tuning.cc hwLatencies[NVLINK|PCI|NET][algo][proto] (us).
enum Hw { kHwNvlink = 0, kHwPci = 1, kHwNet = 2 };
constexpr double kHwLat[3][kNcclNumAlgos][kNcclNumProtos] = {
    {{.6, 1.25, 4.0}, {.6, 1.9, 3.4}, {0, 0, 4.0}},   // NVLink: Tree, Ring, PAT
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 4.0}},  // PCI
    {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 14}},   // NET
};

// tuning.cc llMaxBws[index1][index2] (GB/s). index1 = arch for one node, else CPU vendor
// (row 0 Intel, row 1 AMD); index2 = N1 / N2 / N>=3 ("N4" in NCCL's comments).
constexpr double kLlMaxBw[4][3] = {
    {39.0, 39.0, 20.4},               // Volta-N1 / Intel-N2 / Intel-N4
    {87.7, 22.5, 19.0},               // Ampere-N1 / AMD-N2 / AMD-N4
    {141.0, 45.0, 35.0},              // Hopper-N1 / ...
    {2 * 141.0, 2 * 45.0, 2 * 35.0},  // Blackwell-N1 / ...
};
// tuning.cc perChMaxRingLL128Bws[arch][index2] (GB/s per channel).
constexpr double kPerChMaxRingLL128Bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {2 * 36.7, 2 * 36.7, 2 * 36.7}};
// tuning.cc perChMaxTreeLL128Bws.
constexpr double kPerChMaxTreeLL128Bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
// tuning.cc perChMaxTreeBws.
constexpr double kPerChMaxTreeBw[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};

// tuning.cc treeCorrectionFactor[proto][log2(nBytes/64)], powers of two from 64 B to 256 MB:
// "Trees are not perfectly sticking to the model for medium sizes."
constexpr double kTreeCorrection[kNcclNumProtos][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9},
};

// search.cc speed arrays (GB/s per channel), tried from fast to slow.
constexpr double kSpeedIntra[] = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0,
                                  9.0,  7.0,  6.0,  5.0,  4.0,  3.0};
constexpr double kSpeedInter[] = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                  7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSm90SpeedIntra[] = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0,
                                      15.0, 12.0, 11.0, 6.0,  3.0};
constexpr double kSm90SpeedInter[] = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                      15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSm100SpeedIntra[] = {90.0, 80.0, 70.0, 60.0, 50.0, 40.0,
                                       30.0, 24.0, 20.0, 19.0, 18.0};
constexpr double kSm100SpeedInter[] = {96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                                       17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};

// Channel limits. NCCL 2.x searches up to MAXCHANNELS/2 = 16 channels and duplicates up to
// MAXCHANNELS = 32 (ncclTopoDupChannels); newer releases raise MAXCHANNELS, which does not
// change bus bandwidth, only the per-channel caps below.
constexpr int kMaxSearchChannels = 16;
constexpr int kMaxChannels = 32;

int arch_index(NcclArch a) {
  return static_cast<int>(a);
}
int comp_cap(NcclArch a) {
  switch (a) {
    case NcclArch::kVolta:
      return 70;
    case NcclArch::kAmpere:
      return 80;
    case NcclArch::kHopper:
      return 90;
    case NcclArch::kBlackwell:
      return 100;
  }
  return 90;
}

std::span<const double> speed_array(NcclArch a, bool inter) {
  switch (a) {
    case NcclArch::kBlackwell:
      return inter ? std::span<const double>(kSm100SpeedInter)
                   : std::span<const double>(kSm100SpeedIntra);
    case NcclArch::kHopper:
      return inter ? std::span<const double>(kSm90SpeedInter)
                   : std::span<const double>(kSm90SpeedIntra);
    default:
      return inter ? std::span<const double>(kSpeedInter) : std::span<const double>(kSpeedIntra);
  }
}

// NCCL's log2i: floor(log2(n)), -1 for n == 0 (2.28 guards the table index with >= 0).
int log2i(uint64_t n) {
  if (n == 0) return -1;
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}

int coll_nsteps(CommKind kind, int n_ranks) {
  return kind == CommKind::kAllReduce ? 2 * (n_ranks - 1) : n_ranks - 1;
}

bool is_nccl_coll(CommKind k) {
  return k == CommKind::kAllReduce || k == CommKind::kAllGather || k == CommKind::kReduceScatter;
}

}  // namespace

std::string_view nccl_algo_name(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::kTree:
      return "tree";
    case NcclAlgo::kRing:
      return "ring";
    case NcclAlgo::kPat:
      return "pat";
  }
  return "?";
}

std::string_view nccl_proto_name(NcclProto p) {
  switch (p) {
    case NcclProto::kLL:
      return "ll";
    case NcclProto::kLL128:
      return "ll128";
    case NcclProto::kSimple:
      return "simple";
  }
  return "?";
}

std::string_view nccl_arch_name(NcclArch a) {
  switch (a) {
    case NcclArch::kVolta:
      return "volta";
    case NcclArch::kAmpere:
      return "ampere";
    case NcclArch::kHopper:
      return "hopper";
    case NcclArch::kBlackwell:
      return "blackwell";
  }
  return "?";
}

double nccl_hw_latency_us(const NcclSystem& sys, bool net, NcclAlgo a, NcclProto p) {
  const Hw hw = net ? kHwNet : sys.nvlink ? kHwNvlink : kHwPci;
  return kHwLat[hw][static_cast<int>(a)][static_cast<int>(p)];
}

NcclComm nccl_comm(const NcclSystem& sys, int n_ranks, int n_nodes) {
  NcclComm c;
  c.n_ranks = std::max(1, n_ranks);
  c.n_nodes = std::clamp(n_nodes, 1, c.n_ranks);
  c.ppn = static_cast<double>(c.n_ranks) / c.n_nodes;

  // Deviation from NCCL: NCCL measures each GPU's NVLink/PCIe/NIC paths; we only have the
  // cluster's per-device link bandwidths. A ring or tree that spans nodes crosses each node
  // boundary once per channel, one NIC per channel, so with `ppn` ranks (and NICs) per node
  // the channels can use ppn NICs: busBw <= min(intra, ppn * inter), and each channel's speed
  // is bounded by one NIC (NCCL: speedArray[i] <= system->maxBw).
  const bool multi = c.n_nodes > 1;
  const double intra = sys.intra_GBps > 0 ? sys.intra_GBps : sys.inter_GBps;
  const double inter = sys.inter_GBps > 0 ? sys.inter_GBps : intra;
  const double max_speed = multi ? std::min(inter, intra) : intra;
  auto channels_at = [&](double s) {
    constexpr double eps = 1e-9;
    int by_intra = static_cast<int>(std::floor(intra / s + eps));
    int n = by_intra;
    if (multi) {
      int per_nic = static_cast<int>(std::floor(inter / s + eps));
      n = std::min(n, static_cast<int>(std::floor(c.ppn * per_nic + eps)));
    }
    return std::clamp(n, 0, kMaxSearchChannels);
  };

  // NCCL keeps the graph with the largest nChannels x bw (ncclTopoCompareGraphs), trying
  // speeds from fast to slow; on a tie the faster (earlier) solution stays.
  double best_total = 0, best_speed = 0;
  int best_n = 0;
  for (double s : speed_array(sys.arch, multi)) {
    if (s > max_speed + 1e-9) continue;
    int n = channels_at(s);
    if (n * s > best_total + 1e-9) {
      best_total = n * s;
      best_speed = s;
      best_n = n;
    }
  }
  if (best_n == 0) {
    // Slower than the slowest speed NCCL tries: one channel at the link's speed.
    best_n = 1;
    best_speed = std::max(max_speed, 1e-6);
  }

  // ncclTopoDupChannels: double the channels (halving their speed) on fast links, except on
  // sm > 80 when the speed is below 50 GB/s and there are already more than 4 channels.
  if (best_speed >= 25.0 && !(comp_cap(sys.arch) > 80 && best_speed < 50.0 && best_n > 4)) {
    int dup = std::min(best_n * 2, kMaxChannels);
    int div = (dup + best_n - 1) / best_n;
    best_speed /= div;
    best_n = dup;
  }
  c.n_channels = best_n;
  c.bw_per_channel = best_speed;
  c.inter_bottleneck = multi && c.ppn * inter <= intra;
  return c;
}

NcclTuning nccl_tune(const NcclSystem& sys, const NcclComm& comm, CommKind kind, NcclAlgo algo,
                     NcclProto proto) {
  NcclTuning t;
  if (!is_nccl_coll(kind) || comm.n_ranks <= 1) return t;
  const int a = static_cast<int>(algo);
  const int p = static_cast<int>(proto);
  const int n_ranks = comm.n_ranks;
  const int n_nodes = comm.n_nodes;
  const double ppn = comm.ppn;
  const bool allreduce = kind == CommKind::kAllReduce;

  // Which (collective, algorithm, protocol) exist (ncclTopoTuneModel's `continue`s).
  if (algo == NcclAlgo::kTree && !allreduce) return t;  // trees: AllReduce only
  if (algo == NcclAlgo::kPat) {
    // PAT: AllGather/ReduceScatter, Simple only, one GPU per node (ncclPatEnable).
    if (allreduce || proto != NcclProto::kSimple || n_nodes != n_ranks) return t;
  }

  const int ai = arch_index(sys.arch);
  const int index2 = n_nodes <= 2 ? n_nodes - 1 : 2;
  const int index1 = n_nodes == 1 ? ai : (sys.amd_cpu ? 1 : 0);
  const double ll_max_bw = kLlMaxBw[index1][index2];
  const double per_ch_max_tree_bw = kPerChMaxTreeBw[ai][index2];
  const double per_ch_max_ring_ll128_bw = kPerChMaxRingLL128Bw[ai][index2];
  const double per_ch_max_tree_ll128_bw = kPerChMaxTreeLL128Bw[ai][index2];
  const double nch = comm.n_channels;

  // --- bandwidth ---
  double bus_bw = comm.bus_bw();
  if (algo == NcclAlgo::kRing && proto == NcclProto::kLL) bus_bw = std::min(ll_max_bw, bus_bw * .5);
  if (algo == NcclAlgo::kRing && proto == NcclProto::kLL128)
    bus_bw = std::min(bus_bw * 0.92, nch * per_ch_max_ring_ll128_bw);
  if (algo == NcclAlgo::kTree && allreduce)
    bus_bw = std::min(bus_bw * .92, nch * per_ch_max_tree_bw);
  if (algo == NcclAlgo::kTree && proto == NcclProto::kLL)
    bus_bw = std::min(bus_bw / 3.8, ll_max_bw);
  if (algo == NcclAlgo::kTree && proto == NcclProto::kLL128)
    bus_bw = std::min(bus_bw * (n_nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                      nch * per_ch_max_tree_ll128_bw);
  // (The x0.85 of a pure NCCL_TOPO_PATTERN_TREE graph does not apply: NCCL's default tree
  // pattern is the balanced tree.)
  if (algo == NcclAlgo::kPat) bus_bw *= .75;

  // Bus -> algorithm bandwidth; NCCL skips the conversion for non-ring AllGather/ReduceScatter.
  double ratio = 1.0;
  if (algo == NcclAlgo::kRing)
    ratio = static_cast<double>(n_ranks) / coll_nsteps(kind, n_ranks);
  else if (allreduce)
    ratio = .5;

  // --- latency ---
  const Hw intra_hw = sys.nvlink ? kHwNvlink : kHwPci;
  double lat = kBaseLat[a][p];
  double intra_lat = kHwLat[intra_hw][a][p];
  // "With ppn=1 latencies are fully exposed, use the Tree network latency".
  double inter_lat =
      ppn == 1 ? kHwLat[kHwNet][static_cast<int>(NcclAlgo::kTree)][p] : kHwLat[kHwNet][a][p];
  inter_lat += sys.net_latency_us;
  if (proto == NcclProto::kSimple) inter_lat += sys.net_latency_us;  // "flush extra latency"

  if (algo == NcclAlgo::kRing) {
    // "Inter-node rings still have to launch nsteps * net overhead."
    double net_overhead = 0.0;
    if (n_nodes > 1) {
      net_overhead = sys.net_overhead_us;
      if (proto == NcclProto::kSimple) net_overhead *= 3;
    }
    intra_lat = std::max(intra_lat, net_overhead);
    const int nsteps = coll_nsteps(kind, n_ranks);
    const int n_inter_steps = n_nodes == 1 ? 0 : allreduce ? 2 * (n_nodes - 1) : n_nodes - 1;
    lat += (nsteps - n_inter_steps) * intra_lat + n_inter_steps * inter_lat;
  } else if (algo == NcclAlgo::kTree) {
    const int local_ranks = n_ranks / n_nodes;  // integer division, as NCCL's nRanks/nNodes
    lat += 2 * ((local_ranks - 1) * intra_lat + log2i(n_nodes) * inter_lat);
  } else {  // PAT
    lat += log2i(n_nodes) * (inter_lat / 3.5) + n_ranks * 2.8;
  }

  // --- enable / disable (NCCL_ALGO, NCCL_PROTO and the LL128 default) ---
  bool enabled = sys.algo_enabled[a] && sys.proto_enabled[p];
  if (proto == NcclProto::kLL128 && sys.proto_default_ll128) {
    // "Enable LL128 by default only on ... " intra-node paths up to NVLink (typeIntra <= NVB).
    enabled = enabled && sys.nvlink;
  }
  if (!enabled) bus_bw = 0;

  t.latency_us = lat;
  t.bus_bw = bus_bw;
  t.ratio = ratio;
  return t;
}

NcclEstimate nccl_estimate(const NcclSystem& sys, const NcclComm& comm, CommKind kind,
                           NcclAlgo algo, NcclProto proto, int64_t bytes) {
  NcclEstimate e;
  e.algo = algo;
  e.proto = proto;
  const NcclTuning t = nccl_tune(sys, comm, kind, algo, proto);
  if (t.bus_bw <= 0) return e;
  const uint64_t n_bytes = static_cast<uint64_t>(std::max<int64_t>(bytes, 0));
  double bus_bw = t.bus_bw;
  double lat = t.latency_us;
  const int log_size = log2i(n_bytes >> 6);
  if (algo == NcclAlgo::kTree && kind == CommKind::kAllReduce && log_size >= 0 && log_size < 23)
    bus_bw *= kTreeCorrection[static_cast<int>(proto)][log_size];
  if (algo == NcclAlgo::kRing && proto == NcclProto::kSimple && comm.n_nodes > 1 &&
      kind == CommKind::kAllReduce &&
      n_bytes / static_cast<uint64_t>(comm.n_channels * comm.n_ranks) >= 64) {
    lat *= comp_cap(sys.arch) < 80 ? 1.9 : 1.4;  // "Plateau effect of ring"
  }
  e.available = true;
  e.latency_us = lat;  // x latCount: one op per call here (no group aggregation)
  e.bus_bw = bus_bw;
  e.ratio = t.ratio;
  e.time_us = lat + static_cast<double>(n_bytes) / (1000.0 * bus_bw * t.ratio);
  return e;
}

NcclEstimate nccl_choose(const NcclSystem& sys, const NcclComm& comm, CommKind kind, int64_t bytes,
                         plan::DType dtype) {
  NcclEstimate none;
  if (!is_nccl_coll(kind) || comm.n_ranks <= 1) return none;
  auto pick = [&](const NcclSystem& s) {
    NcclEstimate best;
    double best_cost = std::numeric_limits<double>::max();
    for (int a = 0; a < kNcclNumAlgos; ++a) {
      for (int p = 0; p < kNcclNumProtos; ++p) {
        NcclEstimate e = nccl_estimate(s, comm, kind, static_cast<NcclAlgo>(a),
                                       static_cast<NcclProto>(p), bytes);
        if (!e.available) continue;
        double cost = e.time_us;
        // enqueue.cc updateCollCostTable: "Relegate fp8 reduction trees of sufficient depth
        // that they incur precision loss to be least preferred."
        if (dtype == plan::DType::kFP8 && e.algo == NcclAlgo::kRing && comm.n_ranks > 8)
          cost *= 1024.0;
        if (cost < best_cost) {
          best_cost = cost;
          best = e;
        }
      }
    }
    return best;
  };
  NcclEstimate best = pick(sys);
  if (!best.available) {
    NcclSystem unmasked = sys;
    unmasked.algo_enabled = {true, true, true};
    unmasked.proto_enabled = {true, true, true};
    best = pick(unmasked);
  }
  return best;
}

}  // namespace stretto::cost
