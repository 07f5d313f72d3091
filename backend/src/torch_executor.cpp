// One rank's replay (see replay.h): the device program executed with LibTorch and c10d.
//
// Threads: the host thread walks the program in order. A compute op runs on it (after waiting
// for its same-device predecessors); a communication op is posted asynchronously (after its
// inputs are ready) and handed to the waiter thread of its logical stream, which waits for
// the c10d work in FIFO order and stamps its end. Results of communication (a received
// activation, a reduced gradient) are applied on the host thread the first time something
// needs them ("finalize"), so all tensor bookkeeping stays single-threaded.
// Every p2p op is posted as soon as the program reaches it, before anything waits on it, so
// Gloo's rendezvous send/recv cannot deadlock: the programs are cut from one global order.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "device_program.h"
#include "torch_comm.h"
#include "torch_executor.h"
#include "torch_model.h"

#ifdef STRETTO_BACKEND_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stretto::backend {

using compiler::CommKind;
using compiler::CommPurpose;
using compiler::CompiledPlan;
using compiler::kNone;
using compiler::ModelOp;
using compiler::Node;
using compiler::NodeKind;
using compiler::OpKind;
using plan::DType;
using plan::OptimizerSpec;
using plan::Pass;

namespace detail {
namespace {

int64_t cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr size_t kParams = 0, kGrads = 1, kOptim = 2, kActs = 3, kCommBuf = 4, kBuckets = 5,
                 kGathered = 6;

struct Memory {
  std::array<int64_t, sim::kMemCategories> cur{}, at_peak{};
  int64_t peak = 0;
  void add(size_t cat, int64_t bytes) {
    cur[cat] += bytes;
    int64_t total = 0;
    for (int64_t c : cur) total += c;
    if (total > peak) {
      peak = total;
      at_peak = cur;
    }
  }
};

struct OpState {
  bool done = false, finalized = false;
  bool posted = false;  // a collective posted before its place in the program (async_comm_)
  int64_t post_ns = 0, start_ns = 0, end_ns = 0, unpack_ns = 0;
};

struct WaitItem {
  size_t op;
  std::vector<WorkPtr> works;
  int64_t post_ns;
};

// Status line for the launcher: the op this rank is in, in a small shared file.
class Status {
 public:
  Status(int rank) {
    const char* dir = std::getenv("STRETTO_REPLAY_STATUS_DIR");
    if (!dir) return;
    const std::string path = fmt::format("{}/rank{}", dir, rank);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0) return;
    if (::ftruncate(fd, kSize) == 0) {
      void* p = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) buf_ = static_cast<char*>(p);
    }
    ::close(fd);
  }
  ~Status() {
    if (buf_) ::munmap(buf_, kSize);
  }
  void set(const std::string& s) {
    if (!buf_) return;
    const size_t n = std::min(s.size(), kSize - 1);
    std::memcpy(buf_, s.data(), n);
    buf_[n] = '\0';
  }
  static constexpr size_t kSize = 512;

 private:
  char* buf_ = nullptr;
};

// Gradient clipping's coefficient from the squared global norm, on the device:
// min(1, kMaxGradNorm / (norm + 1e-6)), torch's clip_grad_norm_ (whose C++ version reads the
// norm on the host to return it; the scale itself never needs the host).
at::Tensor clip_coefficient(const at::Tensor& sq_norm) {
  return at::clamp_max(at::reciprocal(sq_norm.sqrt().add(1e-6)).mul(kMaxGradNorm), 1.0);
}

class RankRun {
 public:
  RankRun(const CompiledPlan& cp, const RankSpec& spec, const ReplayOptions& opt)
      : cp_(cp),
        spec_(spec),
        opt_(opt),
        me_(spec.rank),
        cuda_(opt.device == DeviceKind::kCuda),
        model_(cp, opt.seed, tensor_options(), opt.kernels, context_parallel(cp)),
        status_(spec.rank) {}

  ~RankRun() { stop_waiters(); }

  RankResult run(std::vector<GradDump>* grads);
  bool failed() const { return failed_; }
  c10::intrusive_ptr<c10d::Store> store() const { return store_; }

 private:
  const CompiledPlan& cp_;
  RankSpec spec_;
  ReplayOptions opt_;
  int me_;
  bool cuda_;
  TorchModel model_;
  Status status_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<Group> world_;
  std::map<std::vector<int32_t>, std::unique_ptr<Group>> groups_;
  std::vector<DeviceOp> ops_;
  std::vector<std::vector<uint32_t>> preds_;
  std::vector<std::vector<size_t>> node_ops_;
  std::vector<OpState> st_;
  std::vector<at::Tensor> buf_, buf2_;              // per op: posted buffers
  std::vector<std::vector<at::Tensor>> gather_out_;  // per op: all-gather outputs
  // per op index in the model
  std::vector<std::vector<Param>> params_;
  std::vector<OpPlacement> place_;
  std::vector<std::pair<int64_t, int64_t>> owned_;  // op-flat range this rank updates
  // Optimizer state per op: the first moment (SGD's momentum buffer, Adam's m) and Adam's v,
  // each one flat tensor over the op's owned range owned_[o] only (a ZeRO rank's shard, as the
  // cost model prices it; the whole op without ZeRO). Undefined until the op's first step.
  // With 16-bit parameters and the plan's master_weights (mixed precision): an fp32 master copy
  // of the owned range too, the moments in fp32, and the step updates the master and writes
  // it back in the parameters' dtype (Megatron's distributed optimizer).
  std::vector<at::Tensor> moment1_, moment2_, master_;
  std::vector<char> stepped_;
  std::vector<char> synced_;  // per op: a ZeRO-1/2 all-gather wrote every shard's step this step
  // Adam's step count and this step's bias corrections, on the device: a captured step
  // (--cuda-graphs) advances them on every replay, as a host scalar would not.
  at::Tensor adam_step_, adam_c1_, adam_c2_;
  // Plan ops of the merged compiler: forwards recomputed on this device (per (op, mb) key),
  // and gradient clipping (the global norm from the kGradNorm all-reduce scales the step).
  std::vector<char> recomputed_;
  std::vector<int64_t> copies_of_op_;  // devices of the norm's group computing each op
  std::vector<int64_t> zero_shards_;   // ZeRO reduce-scatter group of each op (1: none)
  // min(1, max norm / global norm) as a device tensor (undefined until the norm is known this
  // step): the step scales by it without reading it on the host.
  at::Tensor clip_scale_;
  bool norm_all_reduced_ = false;  // this rank's program has the kGradNorm all-reduce
  // per (op, mb)
  std::vector<at::Tensor> val_, grad_acc_, pending_out_, ep_in_, ep_dy_;
  // Per (op, mb): grad_acc_ holds a tensor that something else holds too (add_grad): read it,
  // never write into it.
  std::vector<char> acc_shared_;
  std::vector<std::vector<at::Tensor>> pending_dx_;
  std::vector<OpCtx> ctx_;
  std::vector<std::vector<at::Tensor>> saved_inputs_;  // recompute: the forward's inputs
  std::vector<char> fwd_post_, bwd_post_, bwd_pre_;
  // Per op: its output is read by no backward once its one consumer has run its forward
  // (release_unread_inputs).
  std::vector<char> unread_after_consumer_;
  // Per op: the input-gradient collective of a column-parallel op's B node that Megatron-LM
  // issues asynchronously (compiler TpOverlap::kAsync, model async_tp_grad_reduce): run_compute
  // posts it between the B node's input- and weight-gradient GEMMs. SIZE_MAX: none.
  std::vector<size_t> async_comm_;
  std::vector<std::vector<uint32_t>> bucket_of_node_;
  double loss_scale_ = 1;
  double loss_ = 0;
  at::Tensor loss_sum_;  // the first step's loss on the device, until the step ends
  Memory mem_;
  // waiters
  std::mutex m_;
  std::condition_variable cv_;
  bool failed_ = false;
  std::string fail_msg_;
  struct Waiter {
    std::thread th;
    std::mutex m;
    std::condition_variable cv;
    std::deque<WaitItem> q;
    bool stop = false;
    int64_t last_end = 0;
  };
  std::map<std::string, std::unique_ptr<Waiter>> waiters_;
  int64_t op_counter_ = 0;
  int iteration_ = 0;
  int64_t t_compute_ = 0, t_wait_ = 0, cpu_compute_ = 0, cpu_pack_ = 0;
  int64_t t_post_ = 0, t_unpack_ = 0;  // host thread in post_comm / in finalize (wall)
  // CPU time of bucket and shard packing, measured around a post or finalize.
  struct PackTimer {
    int64_t& acc;
    bool on;
    int64_t c0;
    PackTimer(int64_t& a, bool o) : acc(a), on(o), c0(o ? cpu_ns() : 0) {}
    ~PackTimer() {
      if (on) acc += cpu_ns() - c0;
    }
  };
  static bool packs(const Node& n) {
    return n.purpose == CommPurpose::kGradReduce || n.purpose == CommPurpose::kParamSync ||
           n.purpose == CommPurpose::kParamGather;
  }
  std::vector<std::string> labels_;  // op_label() of every op, for the status line
  // A compute op's scope for ATen's profilers and hooks: "stretto::<pass> <kind> <op> mb<m>",
  // formatted once in setup(); RECORD_USER_SCOPE records it only while a profiler or hook
  // listens (tests count the operators inside).
  std::vector<std::string> scopes_;
  int64_t drop_counter_ = 0;  // fault "drop": received data so far
  std::atomic<size_t> waiting_for_{SIZE_MAX};  // op the host thread is blocked on
  int cuda_index_ = 0;
#ifdef STRETTO_BACKEND_CUDA
  // CUDA: compute ops are timed with events on the compute stream (the current stream); the
  // communication streams are c10d NCCL's, which order themselves against it with events.
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> ev_begin_, ev_end_;
  std::unique_ptr<at::cuda::CUDAEvent> ev_step_, ev_graph_end_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;  // --cuda-graphs: the captured step
  bool capturing_ = false;                      // inside the capture: no per-op events
#endif

  at::TensorOptions tensor_options() const {
    at::TensorOptions o = at::TensorOptions().dtype(at::kFloat);
#ifdef STRETTO_BACKEND_CUDA
    if (cuda_) {
      const DType dt = cp_.model.dtype;
      o = o.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(
                                             spec_.rank % std::max(1, static_cast<int>(c10::cuda::device_count())))))
              .dtype(dt == DType::kBF16   ? at::kBFloat16
                     : dt == DType::kFP16 ? at::kHalf
                                          : at::kFloat);
    }
#endif
    return o;
  }
  size_t key(uint32_t op, int mb) const {
    return static_cast<size_t>(std::max(0, mb)) * cp_.model.ops.size() + op;
  }
  static int mb_of(const Node& n) { return std::max(0, n.tags.mb()); }
  std::string op_label(size_t i) const {
    const DeviceOp& o = ops_[i];
    std::string s = fmt::format("'{}' (node {}, stream {}", o.name, o.node, o.stream);
    const Node& n = cp_.dag.nodes[o.node];
    if (n.op != kNone) s += ", " + cp_.model.ops[n.op].name;
    return s + ")";
  }

  void setup();
  void setup_plan_ops();
  void step(bool measured, RankResult& rr);
  // --cuda-graphs: a measured step as the replay of the step captured once (CUDA only).
  void graph_step(RankResult& rr);
  void run_program();    // every op of the device's program, in order, all finalized
  void run_optimizer();  // the optimizer step of every op this rank holds
  void execute(size_t i);
  void run_compute(size_t i);
  void post_comm(size_t i);
  void finalize(size_t i);
  void wait_op(size_t i);
  void wait_node(uint32_t n);
  void finish_forward(uint32_t o, int mb, const at::Tensor& t);
  void release_unread_inputs(uint32_t o, int mb);
  void add_input_grads(uint32_t o, int mb, const std::vector<at::Tensor>& dx);
  void add_grad(uint32_t o, int mb, const at::Tensor& g);
  at::Tensor flat_params(uint32_t o) const;
  at::Tensor flat_grads(uint32_t o) const;
  void write_params(uint32_t o, const at::Tensor& flat);
  void write_grads(uint32_t o, const at::Tensor& flat, int64_t keep_begin, int64_t keep_end);
  int64_t op_numel(uint32_t o) const;
  void optimizer_step(uint32_t o);
  void plan_optimizer_step();
  at::Tensor local_grad_sq_norm() const;
  at::Tensor clip_scale();  // clip_scale_, from the local norm on a plan without the all-reduce
  void enqueue(size_t i, std::vector<WorkPtr> works);
  void stop_waiters();
  Group& group(const std::vector<int32_t>& devices);
  void fault_check();
};

Group& RankRun::group(const std::vector<int32_t>& devices) {
  std::vector<int32_t> s = devices;
  std::sort(s.begin(), s.end());
  auto it = groups_.find(s);
  if (it == groups_.end())
    throw std::runtime_error(fmt::format("internal: no process group for {} devices", s.size()));
  return *it->second;
}

void RankRun::setup() {
  const compiler::TrainingDag& dag = cp_.dag;
  const size_t nops = cp_.model.ops.size();
  const size_t M = static_cast<size_t>(std::max(1, cp_.num_microbatches));
  const auto timeout = std::chrono::milliseconds(opt_.timeout_ms);
  // Store and the world group.
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(spec_.master_port);
  so.isServer = !spec_.store_is_external && me_ == 0;
  so.numWorkers = spec_.world_size;
  so.waitWorkers = false;
  so.timeout = timeout;
  store_ = c10::make_intrusive<c10d::TCPStore>(spec_.master_addr, so);
  world_ = std::make_unique<Group>(store_, "world", me_, spec_.world_size, cuda_, timeout);
  // Every group any collective (or tensor-parallel loss) uses, created in one global order.
  std::set<std::vector<int32_t>> all;
  for (const Node& n : dag.nodes) {
    int gs = 0;
    if (n.kind == NodeKind::kCollective) gs = dag.device_sets[n.devs].group_size;
    if (n.kind == NodeKind::kCompute && n.tp > 1) gs = n.tp;
    if (gs <= 0) continue;
    const auto& d = dag.device_sets[n.devs].devices;
    for (size_t b = 0; b + gs <= d.size(); b += gs) {
      std::vector<int32_t> g(d.begin() + static_cast<ptrdiff_t>(b),
                             d.begin() + static_cast<ptrdiff_t>(b + gs));
      std::sort(g.begin(), g.end());
      all.insert(std::move(g));
    }
  }
  for (const auto& g : all) {
    auto pos = std::find(g.begin(), g.end(), me_);
    if (pos == g.end()) continue;
    std::string name = "g";
    for (int32_t d : g) name += fmt::format(".{}", d);
    groups_[g] = std::make_unique<Group>(store_, name, static_cast<int>(pos - g.begin()),
                                         static_cast<int>(g.size()), cuda_, timeout);
  }
  // The program.
  ops_ = device_ops(cp_, me_);
  preds_ = local_preds(cp_, ops_);
  node_ops_.assign(dag.nodes.size(), {});
  for (size_t i = 0; i < ops_.size(); ++i) node_ops_[ops_[i].node].push_back(i);
  async_comm_.assign(ops_.size(), SIZE_MAX);
  for (const auto& pr : dag.tp_overlaps)
    if (pr.method == compiler::TpOverlap::kAsync && !node_ops_[pr.compute].empty() &&
        !node_ops_[pr.comm].empty()) {
      const size_t b = node_ops_[pr.compute].front(), c = node_ops_[pr.comm].front();
      // The collective reduces what B computes (local_preds orders it after B).
      if (c < b)
        throw std::runtime_error(fmt::format("internal: asynchronous collective {} before its "
                                             "backward {} in the program",
                                             op_label(c), op_label(b)));
      async_comm_[b] = c;
    }
  st_.assign(ops_.size(), OpState{});
  labels_.clear();
  for (size_t i = 0; i < ops_.size(); ++i) labels_.push_back(op_label(i));
  scopes_.assign(ops_.size(), {});
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Node& n = dag.nodes[ops_[i].node];
    if (n.kind == NodeKind::kCompute && n.op != kNone)
      scopes_[i] = fmt::format("stretto::{} {} {} mb{}", plan::pass_name(n.tags.pass),
                               compiler::op_kind_name(cp_.model.ops[n.op].kind),
                               cp_.model.ops[n.op].name, mb_of(n));
  }
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_) {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(model_.options().device().index()));
    ev_step_ = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    ev_graph_end_ = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    for (size_t i = 0; i < ops_.size(); ++i) {
      ev_begin_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
      ev_end_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    }
  }
#endif
  buf_.assign(ops_.size(), {});
  buf2_.assign(ops_.size(), {});
  gather_out_.assign(ops_.size(), {});
  // Placements and parameters of the ops this device computes.
  place_.assign(nops, OpPlacement{});
  params_.assign(nops, {});
  std::vector<char> holds(nops, 0);
  for (const auto& o : ops_) {
    const Node& n = dag.nodes[o.node];
    if (n.kind == NodeKind::kCompute && !holds[n.op]) {
      holds[n.op] = 1;
      place_[n.op].tp = n.tp;
      place_[n.op].tp_rank = o.rank_in_group % std::max<int>(1, n.tp);
    }
    if (n.kind == NodeKind::kCollective && n.comm == CommKind::kAllToAll) {
      std::vector<int32_t> g = o.group;
      std::sort(g.begin(), g.end());
      place_[n.op].ep = static_cast<int>(g.size());
      place_[n.op].ep_rank = static_cast<int>(std::find(g.begin(), g.end(), me_) - g.begin());
    }
  }
  for (uint32_t o = 0; o < nops; ++o)
    if (holds[o]) {
      params_[o] = model_.make_params(o, place_[o]);
      for (const auto& p : params_[o]) {
        mem_.add(kParams, tensor_bytes(p.value));
        mem_.add(kGrads, tensor_bytes(p.grad));
      }
    }
  owned_.assign(nops, {0, 0});
  for (uint32_t o = 0; o < nops; ++o) owned_[o] = {0, op_numel(o)};
  moment1_.assign(nops, {});
  adam_step_ = at::zeros({}, model_.options().dtype(at::kDouble));
  moment2_.assign(nops, {});
  master_.assign(nops, {});
  // Roles of collectives around compute, gradient buckets, ZeRO ownership.
  fwd_post_.assign(nops * M, 0);
  bwd_post_.assign(nops * M, 0);
  bwd_pre_.assign(nops * M, 0);
  bucket_of_node_.assign(dag.nodes.size(), {});
  for (const auto& o : ops_) {
    const Node& n = dag.nodes[o.node];
    if (n.kind != NodeKind::kCollective) continue;
    const bool fwd = n.tags.pass == Pass::kF;
    const bool bwd = n.tags.pass == Pass::kB || n.tags.pass == Pass::kBI;
    if (n.purpose == CommPurpose::kTensorPar || n.purpose == CommPurpose::kCombine) {
      if (fwd) fwd_post_[key(n.op, mb_of(n))] = 1;
    }
    if (n.purpose == CommPurpose::kTensorPar || n.purpose == CommPurpose::kDispatch) {
      if (bwd) bwd_post_[key(n.op, mb_of(n))] = 1;
    }
    if (n.purpose == CommPurpose::kCombine && bwd) bwd_pre_[key(n.op, mb_of(n))] = 1;
    if (n.purpose == CommPurpose::kGradReduce) {
      // The bucket's ops are its compute predecessors, and the ops whose backward ends in a
      // tensor-parallel all-reduce of the input gradient (column-parallel ops under TP: the
      // compiler orders the bucket after that all-reduce, not after their compute).
      std::set<uint32_t> bucket;
      for (uint32_t k = dag.pred_begin[o.node]; k < dag.pred_begin[o.node + 1]; ++k) {
        const Node& p = dag.nodes[dag.edges[dag.pred[k]].from];
        if (p.kind == NodeKind::kCompute ||
            (p.kind == NodeKind::kCollective && p.purpose == CommPurpose::kTensorPar &&
             p.op != kNone))
          bucket.insert(p.op);
      }
      bucket_of_node_[o.node].assign(bucket.begin(), bucket.end());
      if (n.comm == CommKind::kReduceScatter) {
        std::vector<int32_t> g = o.group;
        std::sort(g.begin(), g.end());
        const int64_t R = static_cast<int64_t>(g.size());
        const int64_t r = std::find(g.begin(), g.end(), me_) - g.begin();
        for (uint32_t b : bucket) {
          const int64_t n_o = op_numel(b), c = (n_o + R - 1) / R;
          owned_[b] = {std::min(n_o, r * c), std::min(n_o, (r + 1) * c)};
        }
      }
    }
    if (n.purpose == CommPurpose::kParamSync) {
      for (uint32_t k = dag.pred_begin[o.node]; k < dag.pred_begin[o.node + 1]; ++k) {
        const uint32_t p = dag.edges[dag.pred[k]].from;
        if (dag.nodes[p].purpose == CommPurpose::kGradReduce)
          bucket_of_node_[o.node] = bucket_of_node_[p];
      }
    }
  }
  // Loss scale: the global batch is every replica's microbatches.
  for (const Node& n : dag.nodes)
    if (n.kind == NodeKind::kCompute && n.tags.pass == Pass::kF && model_.is_last(n.op)) {
      const double R = static_cast<double>(dag.device_sets[n.devs].devices.size()) /
                       std::max<int>(1, n.tp);
      loss_scale_ = 1.0 / (R * static_cast<double>(M));
      break;
    }
  const size_t keys = nops * M;
  val_.assign(keys, {});
  grad_acc_.assign(keys, {});
  acc_shared_.assign(keys, 0);
  pending_out_.assign(keys, {});
  ep_in_.assign(keys, {});
  ep_dy_.assign(keys, {});
  pending_dx_.assign(keys, {});
  ctx_.assign(keys, {});
  saved_inputs_.assign(keys, {});
  stepped_.assign(nops, 0);
  synced_.assign(nops, 0);
  setup_plan_ops();
}

void RankRun::setup_plan_ops() {
  const compiler::TrainingDag& dag = cp_.dag;
  const size_t nops = cp_.model.ops.size();
  recomputed_.assign(val_.size(), 0);
  norm_all_reduced_ = false;
  for (const auto& o : ops_) {
    const Node& n = dag.nodes[o.node];
    norm_all_reduced_ = norm_all_reduced_ || (n.kind == NodeKind::kCollective &&
                                              n.purpose == CommPurpose::kGradNorm);
    if (n.kind != NodeKind::kCompute || n.op == kNone) continue;
    if (n.recompute) recomputed_[key(n.op, mb_of(n))] = 1;
    // Token ids, labels and synthetic inputs go to the device now, not inside a timed op.
    const OpKind kind = cp_.model.ops[n.op].kind;
    if (kind == OpKind::kEmbedding || kind == OpKind::kLoss || kind == OpKind::kSynthetic)
      model_.prepare(o.rank_in_group / std::max<int>(1, n.tp), mb_of(n));
  }
  // The devices this rank's squared norm is summed over: its kGradNorm all-reduce's group (the
  // compiler's grad_norm_groups: one model replica, or every device with the distributed
  // optimizer), or itself alone where it has none. Each op's copies are its holders there.
  std::vector<int32_t> norm_group{me_};
  for (const auto& o : ops_)
    if (dag.nodes[o.node].kind == NodeKind::kCollective &&
        dag.nodes[o.node].purpose == CommPurpose::kGradNorm)
      norm_group = o.group;
  std::vector<std::set<int32_t>> holders(nops);
  for (const Node& n : dag.nodes)
    if (n.kind == NodeKind::kCompute && n.tags.pass == Pass::kF && n.op < nops)
      for (int32_t d : dag.device_sets[n.devs].devices)
        if (std::find(norm_group.begin(), norm_group.end(), d) != norm_group.end())
          holders[n.op].insert(d);
  // Outputs that no backward reads: the out projection's and the MLP down projection's, whose
  // one consumer is a residual add without dropout (an add saves neither operand), and the
  // head's logits, whose consumer is the loss without tensor parallelism (log_softmax to fp32
  // saves its result, not the logits; derivatives.yaml). A GEMM's backward reads its input
  // and weight, not its output. What a PyTorch program keeps of the model (docs/semantics.md,
  // "Saved activations of an eager program").
  std::vector<int> consumers(nops, 0), consumer(nops, -1);
  for (uint32_t c = 0; c < nops; ++c)
    for (uint32_t i : cp_.model.ops[c].inputs) ++consumers[i], consumer[i] = static_cast<int>(c);
  unread_after_consumer_.assign(nops, 0);
  for (uint32_t o = 0; o < nops; ++o) {
    const OpKind kind = cp_.model.ops[o].kind;
    if (consumers[o] != 1 || place_[o].tp > 1 || place_[o].ep > 1) continue;
    const uint32_t c = static_cast<uint32_t>(consumer[o]);
    const OpKind ck = cp_.model.ops[c].kind;
    const bool residual = (kind == OpKind::kOutProj || kind == OpKind::kMlpDown) &&
                          ck == OpKind::kResidual && cp_.plan.model.dropout <= 0;
    const bool logits = kind == OpKind::kHead && ck == OpKind::kLoss && place_[c].tp <= 1;
    unread_after_consumer_[o] = residual || logits;
  }
  copies_of_op_.assign(nops, 1);
  for (size_t o = 0; o < nops; ++o)
    copies_of_op_[o] = std::max<int64_t>(1, static_cast<int64_t>(holders[o].size()));
  zero_shards_.assign(nops, 1);
  for (const auto& o : ops_) {
    const Node& n = dag.nodes[o.node];
    if (n.kind == NodeKind::kCollective && n.purpose == CommPurpose::kGradReduce &&
        n.comm == CommKind::kReduceScatter)
      for (uint32_t b : bucket_of_node_[o.node]) zero_shards_[b] = static_cast<int64_t>(o.group.size());
  }
  opt_.optimizer = step_optimizer(cp_, opt_);
}

at::Tensor RankRun::local_grad_sq_norm() const {
  // This rank's share of the squared global norm: each gradient element counted once over
  // the devices holding a copy of it (DP replicas, TP-replicated parameters), after the
  // gradient reductions (ZeRO: only the owned shard is final here).
  at::Tensor sum = at::zeros({1}, model_.options().dtype(at::kFloat));
  for (uint32_t o = 0; o < params_.size(); ++o) {
    int64_t off = 0;
    for (const auto& p : params_[o]) {
      const int64_t n = p.grad.numel();
      const int64_t a = std::clamp<int64_t>(owned_[o].first - off, 0, n);
      const int64_t b = std::clamp<int64_t>(owned_[o].second - off, 0, n);
      off += n;
      if (b <= a) continue;
      const int64_t slices = p.slice.dim >= 0 ? std::max(1, place_[o].tp) : 1;
      const double copies = std::max<double>(
          1, static_cast<double>(copies_of_op_[o]) /
                 static_cast<double>(slices * std::max(1, place_[o].ep) * zero_shards_[o]));
      // fp32: one BLAS dot over the gradient in place (what a fused multi-tensor L2 norm does
      // on a GPU: one read of the gradients). A double copy of every gradient would make the
      // norm a page-faulting pass over fresh memory, several ms per step that a training run
      // does not spend and the simulator does not model.
      // Summed on the device (fp32): no host read per gradient. A 16-bit gradient (CUDA) is
      // reduced by the norm kernel reading it in its own dtype and accumulating in fp32, not
      // copied to fp32 first (a step-sized allocation and copy of every gradient).
      const at::Tensor g = p.grad.view({-1}).narrow(0, a, b - a);
      if (g.scalar_type() == at::kFloat)
        sum.add_(at::dot(g, g), 1.0 / copies);
      else
        sum.add_(at::linalg_vector_norm(g, 2, {}, false, at::kFloat).square(),
                 1.0 / copies);
    }
  }
  return sum;
}

at::Tensor RankRun::clip_scale() {
  if (!clip_scale_.defined()) {
    // The kGradNorm all-reduce sets it in finalize(); the compiler emits none where one device
    // holds every parameter, and then the local norm is the global one.
    if (norm_all_reduced_)
      throw std::runtime_error("internal: the optimizer step ran before the gradient norm");
    clip_scale_ = clip_coefficient(local_grad_sq_norm());
  }
  return clip_scale_;
}

void RankRun::plan_optimizer_step() {
  // The compiler's optimizer step (OpKind::kOptimizer): this rank's shard of every op it holds.
  for (uint32_t o = 0; o < params_.size(); ++o) optimizer_step(o);
}

int64_t RankRun::op_numel(uint32_t o) const {
  int64_t n = 0;
  for (const auto& p : params_[o]) n += p.value.numel();
  return n;
}

at::Tensor RankRun::flat_params(uint32_t o) const {
  std::vector<at::Tensor> v;
  for (const auto& p : params_[o]) v.push_back(p.value.detach().reshape({-1}));
  return v.empty() ? at::zeros({0}, model_.options()) : at::cat(v);
}

at::Tensor RankRun::flat_grads(uint32_t o) const {
  std::vector<at::Tensor> v;
  for (const auto& p : params_[o]) v.push_back(p.grad.reshape({-1}));
  return v.empty() ? at::zeros({0}, model_.options()) : at::cat(v);
}

void RankRun::write_params(uint32_t o, const at::Tensor& flat) {
  // Fresh leaves, as ZeRO-3 materialises gathered parameters: forwards of other microbatches
  // still hold the previous tensors in their graphs (an in-place write would invalidate them).
  int64_t off = 0;
  for (auto& p : params_[o]) {
    const int64_t n = p.value.numel();
    at::Tensor v = flat.narrow(0, off, n).reshape(p.value.sizes()).clone();
    v.set_requires_grad(true);
    p.value = v;
    off += n;
  }
}

void RankRun::write_grads(uint32_t o, const at::Tensor& flat, int64_t keep_begin,
                          int64_t keep_end) {
  int64_t off = 0;
  for (auto& p : params_[o]) {
    const int64_t n = p.grad.numel();
    at::Tensor g = p.grad.view({-1});
    g.copy_(flat.narrow(0, off, n));
    // Outside the owned shard the reduced values are not this rank's (ZeRO): drop them.
    const int64_t a = std::clamp<int64_t>(keep_begin - off, 0, n);
    const int64_t b = std::clamp<int64_t>(keep_end - off, 0, n);
    if (a > 0) g.narrow(0, 0, a).zero_();
    if (b < n) g.narrow(0, b, n - b).zero_();
    off += n;
  }
}

void RankRun::optimizer_step(uint32_t o) {
  if (stepped_[o] || params_[o].empty() || opt_.optimizer == Optimizer::kNone) return;
  stepped_[o] = 1;
  // Fault "skip-step" (tests): this rank leaves model op `fault_op`'s shard unstepped, which
  // --check must notice in the parameters (the gradients stay right).
  if (opt_.fault_kind == "skip-step" && me_ == opt_.fault_rank && o == opt_.fault_op) return;
  at::NoGradGuard ng;
  const auto [ob, oe] = owned_[o];
  int64_t off = 0;
  const bool adam = opt_.optimizer == Optimizer::kAdam;
  const bool master = cp_.plan.optimizer.master_weights &&
                      params_[o].front().value.scalar_type() != at::kFloat;
  if (!moment1_[o].defined()) {
    // Zero buffers: SGD's first momentum is then the gradient, as torch.optim.SGD starts it.
    const at::TensorOptions g = params_[o].front().grad.options();
    const at::TensorOptions st = master ? g.dtype(at::kFloat) : g;
    moment1_[o] = at::zeros({oe - ob}, st);
    if (adam) moment2_[o] = at::zeros({oe - ob}, st);
    if (master) {  // the owned elements of the initial parameters, in fp32
      std::vector<at::Tensor> parts;
      for (const auto& p : params_[o]) parts.push_back(p.value.detach().reshape({-1}));
      master_[o] = at::cat(parts).narrow(0, ob, oe - ob).to(at::kFloat);
    }
    mem_.add(kOptim, tensor_bytes(moment1_[o]) + tensor_bytes(moment2_[o]) + tensor_bytes(master_[o]));
  }
  for (size_t k = 0; k < params_[o].size(); ++k) {
    auto& p = params_[o][k];
    const int64_t n = p.value.numel();
    const int64_t a = std::clamp<int64_t>(ob - off, 0, n), b = std::clamp<int64_t>(oe - off, 0, n);
    off += n;
    if (b <= a) continue;
    at::Tensor w = p.value.detach().view({-1}).narrow(0, a, b - a);
    at::Tensor g = p.grad.view({-1}).narrow(0, a, b - a);
    const at::Tensor w16 = w;
    if (master) {
      w = master_[o].narrow(0, off - n + a - ob, b - a);
      g = g.to(at::kFloat);
    }
    if (clips_gradients(cp_)) g = g * clip_scale();  // to kMaxGradNorm (grads stay as reduced)
    // The moments of elements [off + a, off + b) of the op, at their place in the owned range.
    at::Tensor m = moment1_[o].narrow(0, off - n + a - ob, b - a);
    if (!adam) {
      // SGD with momentum (the plan's `sgd`, what the cost model prices): torch.optim.SGD with
      // momentum kSgdMomentum, no dampening, no Nesterov, no weight decay.
      m.mul_(kSgdMomentum).add_(g);
      w.add_(m, -opt_.lr);
    } else {
      const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
      at::Tensor v = moment2_[o].narrow(0, off - n + a - ob, b - a);
      m.mul_(b1).add_(g, 1 - b1);
      v.mul_(b2).addcmul_(g, g, 1 - b2);
      if (!adam_c1_.defined()) {  // the step's first Adam update: t += 1, on the device
        adam_step_.add_(1);
        adam_c1_ = at::pow(b1, adam_step_).neg_().add_(1);  // 1 - b1^t (fp64)
        adam_c2_ = at::pow(b2, adam_step_).neg_().add_(1);
      }
      w.addcdiv_(m / adam_c1_, (v / adam_c2_).sqrt_().add_(eps), -opt_.lr);
    }
    if (master) w16.copy_(w);  // the master back in the parameters' dtype
  }
}

void RankRun::enqueue(size_t i, std::vector<WorkPtr> works) {
  const std::string& s = ops_[i].stream;
  auto& w = waiters_[s];
  if (!w) {
    w = std::make_unique<Waiter>();
    Waiter* wp = w.get();
    wp->th = std::thread([this, wp] {
      for (;;) {
        WaitItem item;
        {
          std::unique_lock lk(wp->m);
          wp->cv.wait(lk, [&] { return wp->stop || !wp->q.empty(); });
          if (wp->q.empty()) return;
          item = std::move(wp->q.front());
          wp->q.pop_front();
        }
        std::string err;
        try {
          for (auto& wk : item.works) {
            if (cuda_) {
              // NCCL's wait() only orders streams: poll for completion to stamp its end.
              const auto dl = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(opt_.timeout_ms);
              while (!wk->isCompleted() && std::chrono::steady_clock::now() < dl)
                std::this_thread::sleep_for(std::chrono::microseconds(20));
              if (!wk->isCompleted()) err = fmt::format("timed out after {} ms", opt_.timeout_ms);
              if (auto ex = wk->exception()) std::rethrow_exception(ex);
            } else if (!wk->wait(std::chrono::milliseconds(opt_.timeout_ms))) {
              err = fmt::format("timed out after {} ms", opt_.timeout_ms);
            }
          }
        } catch (const std::exception& e) {
          err = e.what();
        }
        const int64_t end = now_ns();
        {
          std::lock_guard lk(m_);
          OpState& s2 = st_[item.op];
          s2.start_ns = std::max(item.post_ns, wp->last_end);
          s2.end_ns = end;
          s2.done = true;
          if (!err.empty() && !failed_) {
            failed_ = true;
            const std::string first = err.substr(0, err.find('\n'));
            fail_msg_ = fmt::format("rank {} failed in op {} at step {}: {}", me_, op_label(item.op),
                                    iteration_, first);
          }
        }
        wp->last_end = end;
        if (waiting_for_.load(std::memory_order_relaxed) == item.op || !err.empty())
          cv_.notify_all();
      }
    });
  }
  {
    std::lock_guard lk(w->m);
    w->q.push_back(WaitItem{i, std::move(works), st_[i].post_ns});
  }
  w->cv.notify_one();
}

void RankRun::stop_waiters() {
  for (auto& [name, w] : waiters_) {
    {
      std::lock_guard lk(w->m);
      w->stop = true;
    }
    w->cv.notify_all();
    if (w->th.joinable()) {
      // After a failure a waiter may sit in a c10d wait until its own timeout: leave it.
      if (failed_)
        w->th.detach();
      else
        w->th.join();
    }
  }
  if (failed_)
    for (auto& [name, w] : waiters_) (void)w.release();  // detached threads still use it
  waiters_.clear();
}

void RankRun::wait_op(size_t i) {
  const int64_t t0 = now_ns();
  std::unique_lock lk(m_);
  if (st_[i].done && !failed_) return;
  waiting_for_.store(i, std::memory_order_relaxed);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(opt_.timeout_ms);
  while (!st_[i].done && !failed_) {
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && !st_[i].done && !failed_) {
      failed_ = true;
      fail_msg_ = fmt::format("rank {} timed out after {} ms waiting for op {} at step {}", me_,
                              opt_.timeout_ms, op_label(i), iteration_);
    }
  }
  waiting_for_.store(SIZE_MAX, std::memory_order_relaxed);
  t_wait_ += now_ns() - t0;
  if (failed_) throw std::runtime_error(fail_msg_);
}

void RankRun::wait_node(uint32_t n) {
  for (size_t j : node_ops_[n]) {
    if (st_[j].finalized) continue;
    wait_op(j);
    finalize(j);
  }
}

void RankRun::add_grad(uint32_t o, int mb, const at::Tensor& g) {
  if (!g.defined()) return;
  const size_t k = key(o, mb);
  at::Tensor& acc = grad_acc_[k];
  if (!acc.defined()) {
    // The first contribution is taken as it is, never copied (autograd's AccumulateGrad
    // steals the same way). One that something else holds too (a gradient a residual add
    // passes through unchanged: the output gradient itself, given to both inputs) is shared:
    // nothing writes into it, and the next contribution is added out of place.
    acc = g.detach();
    acc_shared_[k] = !stealable(g);
  } else if (acc_shared_[k]) {
    // Into the new contribution when nothing else holds it (a GEMM's fresh input gradient),
    // else into a new tensor: one kernel either way, as the in-place add of an owned sum.
    acc = stealable(g) ? g.detach().add_(acc) : acc + g;
    acc_shared_[k] = 0;
  } else {
    acc.add_(g);
  }
}

void RankRun::add_input_grads(uint32_t o, int mb, const std::vector<at::Tensor>& dx) {
  const ModelOp& op = cp_.model.ops[o];
  for (size_t k = 0; k < dx.size() && k < op.inputs.size(); ++k) {
    if (!dx[k].defined()) continue;
    // The experts' leaf is [S, T, ...]; without expert parallelism S = 1: the kind decides,
    // not the rank. (dx[k] itself, not a copy of the handle, so that add_grad may take it
    // over.)
    if (op.kind == OpKind::kExperts && dx[k].dim() == 3)
      add_grad(op.inputs[k], mb, dx[k].sum(0));
    else
      add_grad(op.inputs[k], mb, dx[k]);
  }
}

void RankRun::finish_forward(uint32_t o, int mb, const at::Tensor& t) {
  at::Tensor v = t.detach();
  if (cp_.model.ops[o].kind == OpKind::kExperts && v.dim() == 3) v = v.sum(0);  // [S, T, h]
  const uint32_t r = model_.residual_source(o);
  if (r != kNone) {
    const at::Tensor& res = val_[key(r, mb)];
    if (!res.defined())
      throw std::runtime_error(
          fmt::format("internal: residual of {} not available", cp_.model.ops[o].name));
    v = v + res;
  }
  val_[key(o, mb)] = v;
  // The first step's loss, summed on the device and read once the step has ended (no host
  // synchronisation inside the step).
  if (model_.is_last(o) && place_[o].tp_rank == 0 && iteration_ == 0)
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + v.to(at::kDouble) : v.to(at::kDouble);
}

// After op `o`'s forward on microbatch `mb`: the storage of each input that no backward reads
// (unread_after_consumer_) is released, as a PyTorch program frees the tensor once its last
// reference goes. The replay's own references stay (the producer's output, the root of its
// backward; the consumer's input leaf, a target of its), without data: autograd needs their
// metadata only. Not when either forward is recomputed (the recompute reads the input) or the
// value came through a collective (its buffer is the collective's).
void RankRun::release_unread_inputs(uint32_t o, int mb) {
  const size_t k = key(o, mb);
  if (opt_.recompute_full || recomputed_[k] || !ctx_[k].live) return;
  for (uint32_t p : cp_.model.ops[o].inputs) {
    const size_t kp = key(p, mb);
    if (!unread_after_consumer_[p] || recomputed_[kp] || fwd_post_[kp] || !ctx_[kp].live) continue;
    const at::Tensor& v = val_[kp];
    if (!v.defined() || v.storage().nbytes() == 0) continue;  // (released already)
    const int64_t b = tensor_bytes(v);
    v.storage().unsafeGetStorageImpl()->reset();
    // The replay's bookkeeping counted it in both contexts.
    ctx_[kp].bytes -= b;
    ctx_[k].bytes -= b;
    mem_.add(kActs, -2 * b);
  }
}

void RankRun::fault_check() {
  if (me_ != opt_.fault_rank || op_counter_ != opt_.fault_op) return;
  if (opt_.fault_kind == "drop" || opt_.fault_kind == "skip-step") return;  // finalize, optimizer_step
  if (opt_.fault_kind == "hang") {
    for (;;) ::pause();
  }
  if (opt_.fault_kind == "exit") ::_exit(7);
  struct rlimit no_core {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  std::raise(opt_.fault_kind == "kill" ? SIGKILL : SIGABRT);
}

void RankRun::execute(size_t i) {
  const DeviceOp& op = ops_[i];
  char line[Status::kSize];
  std::snprintf(line, sizeof line, "step %d op %zu/%zu: %s", iteration_, i, ops_.size(),
                labels_[i].c_str());
  status_.set(line);
  fault_check();
  ++op_counter_;
  if (st_[i].posted) return;  // posted inside its B node (async_comm_)
  for (uint32_t p : preds_[op.node]) wait_node(p);
  if (op.kind == NodeKind::kCompute) {
    run_compute(i);
  } else {
    const int64_t t0 = now_ns();
    post_comm(i);
    t_post_ += now_ns() - t0;
  }
}

void RankRun::run_compute(size_t i) {
  const DeviceOp& dop = ops_[i];
  const Node& n = cp_.dag.nodes[dop.node];
  const uint32_t o = n.op;
  const int mb = mb_of(n);
  const size_t k = key(o, mb);
  const ModelOp& op = cp_.model.ops[o];
  const int replica = dop.rank_in_group / std::max<int>(1, n.tp);
  TpAllReduce tpar;
  if (n.tp > 1) {
    const auto& d = cp_.dag.device_sets[n.devs].devices;
    const size_t b = static_cast<size_t>(dop.rank_in_group / n.tp) * n.tp;
    std::vector<int32_t> g(d.begin() + static_cast<ptrdiff_t>(b),
                           d.begin() + static_cast<ptrdiff_t>(b + n.tp));
    Group* grp = &group(g);
    tpar = [grp, this](at::Tensor& t, bool max) {
      auto w = grp->allreduce(t, max);
      if (!w->wait(std::chrono::milliseconds(opt_.timeout_ms)))
        throw std::runtime_error("tensor-parallel loss all-reduce timed out");
    };
  }
  // Context parallelism: the attention's communication over its CP group (CP rank c of
  // replica r is r % cp, its group the cp consecutive replicas, same TP rank). p2p: ring hops
  // to the neighbours, tagged past every transfer's tag (the node id) by this node and the
  // hop's slot. all_gather: all-gather and all-reduce over the group's process group; a2a:
  // all-to-alls over it.
  CpComm cp_comm;
  const int cpd = model_.context_parallel();
  if (cpd > 1 && op.kind == OpKind::kAttention) {
    const auto& d = cp_.dag.device_sets[n.devs].devices;
    const int tp = std::max<int>(1, n.tp), t = dop.rank_in_group % tp, c = replica % cpd;
    auto device = [&](int cr) {
      return d.at(static_cast<size_t>((replica - c + (cr + cpd) % cpd) * tp + t));
    };
    if (cp_comm_type(cp_) != plan::CpCommType::kP2P) {
      std::vector<int32_t> ring;  // by CP rank
      for (int cr = 0; cr < cpd; ++cr) ring.push_back(device(cr));
      std::vector<int32_t> sorted = ring;
      std::sort(sorted.begin(), sorted.end());
      Group* grp = &group(sorted);
      std::vector<size_t> slot_of;  // CP rank -> rank in the group (sorted devices)
      for (int32_t dev : ring)
        slot_of.push_back(
            static_cast<size_t>(std::find(sorted.begin(), sorted.end(), dev) - sorted.begin()));
      auto wait = [this, i](const WorkPtr& w, const char* what) {
        if (!w->wait(std::chrono::milliseconds(opt_.timeout_ms)))
          throw std::runtime_error(fmt::format("context-parallel {} of {} timed out after {} ms",
                                               what, op_label(i), opt_.timeout_ms));
      };
      if (cp_comm_type(cp_) == plan::CpCommType::kAllGather) {
        cp_comm.all_gather = [grp, slot_of, wait](const at::Tensor& t) {
          at::Tensor in = t.contiguous();
          std::vector<at::Tensor> out;
          for (size_t j = 0; j < slot_of.size(); ++j) out.push_back(at::empty_like(in));
          wait(grp->allgather(out, in), "all-gather");
          std::vector<at::Tensor> by_rank;
          for (size_t cr = 0; cr < slot_of.size(); ++cr) by_rank.push_back(out[slot_of[cr]]);
          return by_rank;
        };
        cp_comm.all_reduce = [grp, wait](at::Tensor& t) {
          wait(grp->allreduce(t), "reduce-scatter");
        };
      } else {
        // a2a: row cr of `t` to CP rank cr; the group's ranks are its sorted devices.
        cp_comm.all_to_all = [grp, slot_of, wait](const at::Tensor& t) {
          std::vector<at::Tensor> rows(slot_of.size());
          for (size_t cr = 0; cr < slot_of.size(); ++cr)
            rows[slot_of[cr]] = t.select(0, static_cast<int64_t>(cr));
          at::Tensor in = at::stack(rows), out = at::empty_like(in);
          wait(grp->alltoall(out, in), "all-to-all");
          std::vector<at::Tensor> by_rank;
          for (size_t cr = 0; cr < slot_of.size(); ++cr)
            by_rank.push_back(out.select(0, static_cast<int64_t>(slot_of[cr])));
          return by_rank;
        };
      }
    } else {
      const int next = device(c + 1), prev = device(c - 1);
      const int64_t base =
          static_cast<int64_t>(cp_.dag.nodes.size()) + static_cast<int64_t>(dop.node) * 2 * cpd;
      cp_comm.ring = [this, next, prev, base, i](const at::Tensor& send, int slot) {
        const int tag = static_cast<int>(base + slot);
        at::Tensor out = send.contiguous(), in = at::empty_like(out);
        std::vector<WorkPtr> w;
        world_->start_batch();
        w.push_back(world_->send(out, next, tag));
        w.push_back(world_->recv(in, prev, tag));
        world_->end_batch(w);
        return std::function<at::Tensor()>([this, w, out, in, i]() {
          for (const auto& wk : w)
            if (!wk->wait(std::chrono::milliseconds(opt_.timeout_ms)))
              throw std::runtime_error(fmt::format("context-parallel ring hop of {} timed out "
                                                   "after {} ms",
                                                   op_label(i), opt_.timeout_ms));
          return in;
        });
      };
    }
  }
  auto run_forward = [&](bool grad) {
    std::vector<at::Tensor> in = saved_inputs_[k];
    for (auto& t : in)
      if (t.defined()) t.set_requires_grad(grad);
    std::unique_ptr<at::NoGradGuard> ng;
    if (!grad) ng = std::make_unique<at::NoGradGuard>();
    return model_.forward(o, in, params_[o], place_[o], replica, mb, loss_scale_, tpar, cp_comm);
  };
  const int64_t t0 = now_ns(), c0 = cpu_ns();
  st_[i].start_ns = t0;
  RECORD_USER_SCOPE(scopes_[i]);
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_ && !capturing_) ev_begin_[i]->record();
#endif
  if (op.kind == OpKind::kOptimizer) {
    plan_optimizer_step();
  } else if (n.recompute) {
    // A recomputed forward, right before its backward: rerun from the checkpointed inputs
    // with autograd; the backward finds the live context.
    OpCtx& c = ctx_[k];
    mem_.add(kActs, -c.bytes);
    c = run_forward(true);
    mem_.add(kActs, c.bytes);
  } else switch (n.tags.pass) {
    case Pass::kF: {
      std::vector<at::Tensor> in;
      if (n.op != kNone && op.kind == OpKind::kExperts) {
        at::Tensor x = fwd_post_[k] && ep_in_[k].defined() ? ep_in_[k] : val_[key(op.inputs.at(0), mb)];
        if (!x.defined()) throw std::runtime_error("internal: experts input missing");
        if (x.dim() == 2) x = x.unsqueeze(0);
        in.push_back(x.detach());
      } else {
        for (uint32_t p : op.inputs) {
          const at::Tensor& v = val_[key(p, mb)];
          if (!v.defined())
            throw std::runtime_error(fmt::format("internal: input {} of {} (mb {}) missing",
                                                 cp_.model.ops[p].name, op.name, mb));
          in.push_back(v.detach());
        }
      }
      saved_inputs_[k] = in;
      const bool keep_only_inputs = opt_.recompute_full || recomputed_[k];
      OpCtx c = run_forward(!keep_only_inputs);
      const at::Tensor out = c.out;
      if (keep_only_inputs) {
        c = OpCtx{};
        c.bytes = 0;
        for (const auto& t : in) c.bytes += tensor_bytes(t);
      }
      mem_.add(kActs, c.bytes);
      ctx_[k] = std::move(c);
      if (fwd_post_[k])
        pending_out_[k] = out.detach();
      else
        finish_forward(o, mb, out);
      release_unread_inputs(o, mb);
      break;
    }
    case Pass::kB:
    case Pass::kBI: {
      OpCtx& c = ctx_[k];
      if (!c.live) {  // recompute the forward, with autograd this time
        mem_.add(kActs, -c.bytes);
        c = run_forward(true);
        mem_.add(kActs, c.bytes);
      }
      at::Tensor dy;
      if (bwd_pre_[k]) {
        dy = ep_dy_[k];
      } else if (model_.is_last(o)) {
        dy = at::ones_like(c.out);
      } else {
        dy = grad_acc_[k];
        if (dy.defined() && op.kind == OpKind::kExperts && c.out.dim() == 3) dy = dy.unsqueeze(0);
      }
      if (!dy.defined())
        throw std::runtime_error(fmt::format("internal: output gradient of {} (mb {}) missing",
                                             op.name, mb));
      const uint32_t r = model_.residual_source(o);
      if (r != kNone) add_grad(r, mb, grad_acc_[k]);
      if (c.cp_root.defined()) dy = cp_output_grad(c, dy, cp_comm);  // a2a: to the head groups
      // Megatron-LM's asynchronous input-gradient all-reduce (LinearWithGradAccumulationAnd-
      // AsyncCommunication): the input gradient first, its collective issued at once, then the
      // weight gradient while it runs; the consumers wait for the collective (local_preds).
      const size_t async = n.tags.pass == Pass::kB && bwd_post_[k] ? async_comm_[i] : SIZE_MAX;
      std::vector<at::Tensor> dx =
          backward_inputs(c, dy, n.tags.pass == Pass::kB && async == SIZE_MAX, params_[o]);
      if (!c.cp_dkv.empty())  // the received K/V's gradients go back to their CP ranks
        cp_backward(c, dx, cp_comm,
                         cp_.plan.model.hidden / std::max<int>(1, n.tp));
      if (bwd_post_[k])
        pending_dx_[k] = std::move(dx);
      else
        add_input_grads(o, mb, dx);
      grad_acc_[k] = at::Tensor();
      if (async != SIZE_MAX) {
        const int64_t p0 = now_ns();
        post_comm(async);
        st_[async].posted = true;
        t_post_ += now_ns() - p0;
        backward_weights(c, params_[o]);
      }
      if (n.tags.pass == Pass::kB || !op.has_weight_grad()) {  // (no BW node follows)
        mem_.add(kActs, -c.bytes);
        c = OpCtx{};
      }
      break;
    }
    case Pass::kBW: {
      OpCtx& c = ctx_[k];
      backward_weights(c, params_[o]);
      mem_.add(kActs, -c.bytes);
      c = OpCtx{};
      saved_inputs_[k].clear();
      break;
    }
    default:
      throw std::runtime_error("internal: compute node without a pass");
  }
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_ && !capturing_) ev_end_[i]->record();
#endif
  const int64_t t1 = now_ns();
  t_compute_ += t1 - t0;
  cpu_compute_ += cpu_ns() - c0;
  st_[i].end_ns = t1;
  st_[i].done = st_[i].finalized = true;
}

void RankRun::post_comm(size_t i) {
  const DeviceOp& dop = ops_[i];
  const Node& n = cp_.dag.nodes[dop.node];
  const int mb = mb_of(n);
  const size_t k = n.op != kNone ? key(n.op, mb) : 0;
  std::vector<WorkPtr> works;
  // The op's span starts here, before the host prepares its buffers: packing a bucket or a
  // ZeRO shard, the ZeRO-1/2 optimizer step of a parameter-sync bucket, the routing of an
  // all-to-all, the local squared norm of the clipping all-reduce. That host work delays the
  // collective as much as its transfer does, and the simulator has it in the collective's time
  // only (a profiled table entry spans from the last member's start to the last member's end).
  // Unpacking a result (finalize) stays between ops: the op's stream is a FIFO whose next op
  // starts when this one's transfer ends.
  st_[i].post_ns = now_ns();
  if (n.kind == NodeKind::kTransfer) {
    const int tag = static_cast<int>(dop.node);
    if (dop.is_send) {
      at::Tensor t = n.purpose == CommPurpose::kGradient ? grad_acc_[k] : val_[k];
      if (!t.defined())
        throw std::runtime_error(fmt::format("internal: nothing to send for {}", op_label(i)));
      buf_[i] = t.contiguous();
      works.push_back(world_->send(buf_[i], dop.peer, tag));
    } else {
      buf_[i] = at::empty(model_.output_shape(n.op), model_.options());
      works.push_back(world_->recv(buf_[i], dop.peer, tag));
    }
    mem_.add(kCommBuf, tensor_bytes(buf_[i]));
    enqueue(i, std::move(works));
    return;
  }
  Group& g = group(dop.group);
  const bool zero_bucket = n.comm == CommKind::kReduceScatter;
  PackTimer pack_timer(cpu_pack_, packs(n));
  switch (n.purpose) {
    case CommPurpose::kGradReduce: {
      const auto& bucket = bucket_of_node_[dop.node];
      if (!zero_bucket) {
        std::vector<at::Tensor> v;
        for (uint32_t o : bucket) v.push_back(flat_grads(o));
        buf_[i] = at::cat(v);
        mem_.add(kCommBuf, tensor_bytes(buf_[i]));
      } else {
        // ZeRO: [rank][op][chunk] layout, so that rank r's shard is contiguous. Gloo has no
        // reduce-scatter: all-reduce, then each rank keeps its shard.
        const int64_t R = g.size();
        std::vector<at::Tensor> rows;
        for (uint32_t o : bucket) {
          const int64_t n_o = op_numel(o), c = (n_o + R - 1) / R;
          at::Tensor f = flat_grads(o);
          if (c * R > n_o) f = at::cat({f, at::zeros({c * R - n_o}, f.options())});
          rows.push_back(f.view({R, c}));
        }
        buf_[i] = at::cat(rows, 1).reshape({-1}).contiguous();
        mem_.add(kBuckets, tensor_bytes(buf_[i]));
      }
      works.push_back(g.allreduce(buf_[i]));
      break;
    }
    case CommPurpose::kParamSync:
    case CommPurpose::kParamGather: {
      std::vector<uint32_t> list =
          n.purpose == CommPurpose::kParamSync ? bucket_of_node_[dop.node] : std::vector<uint32_t>{n.op};
      const int64_t R = g.size(), r = g.rank();
      if (n.purpose == CommPurpose::kParamSync) {
        for (uint32_t o : list) optimizer_step(o);  // ZeRO-1/2: step this bucket's shard now
      }
      std::vector<at::Tensor> mine;
      for (uint32_t o : list) {
        const int64_t n_o = op_numel(o), c = (n_o + R - 1) / R;
        at::Tensor f = flat_params(o);
        if (c * R > n_o) f = at::cat({f, at::zeros({c * R - n_o}, f.options())});
        mine.push_back(f.narrow(0, r * c, c));
      }
      buf_[i] = at::cat(mine).contiguous();
      gather_out_[i].clear();
      for (int64_t q = 0; q < R; ++q) gather_out_[i].push_back(at::empty_like(buf_[i]));
      mem_.add(n.purpose == CommPurpose::kParamGather ? kGathered : kCommBuf,
               tensor_bytes(buf_[i]) * R);
      works.push_back(g.allgather(gather_out_[i], buf_[i]));
      break;
    }
    case CommPurpose::kGradNorm:  // gradient clipping: the squared global norm, summed
      buf_[i] = local_grad_sq_norm();
      works.push_back(g.allreduce(buf_[i]));
      break;
    case CommPurpose::kTensorPar: {
      if (n.tags.pass == Pass::kF)
        buf_[i] = pending_out_[k].contiguous();
      else
        buf_[i] = pending_dx_[k].at(0).contiguous();
      if (!buf_[i].defined())
        throw std::runtime_error(fmt::format("internal: nothing to reduce for {}", op_label(i)));
      mem_.add(kCommBuf, tensor_bytes(buf_[i]));
      works.push_back(g.allreduce(buf_[i]));
      break;
    }
    case CommPurpose::kDispatch:
    case CommPurpose::kCombine: {
      const ModelOp& op = cp_.model.ops[n.op];
      const int64_t S = g.size();
      at::Tensor src;
      const bool fwd = n.tags.pass == Pass::kF;
      if (n.purpose == CommPurpose::kDispatch && fwd)
        src = val_[key(op.inputs.at(0), mb)];
      else if (n.purpose == CommPurpose::kCombine && fwd)
        src = pending_out_[k];
      else if (n.purpose == CommPurpose::kCombine)
        src = grad_acc_[k];
      else
        src = pending_dx_[k].at(0);
      if (!src.defined())
        throw std::runtime_error(fmt::format("internal: nothing to exchange for {}", op_label(i)));
      // Per-source rows: replicate a [T, ...] tensor to every peer; a [S, T, ...] one is
      // already per peer.
      buf_[i] = (src.dim() == 2 ? src.unsqueeze(0).expand({S, src.size(0), src.size(1)}) : src)
                    .contiguous();
      buf2_[i] = at::empty_like(buf_[i]);
      mem_.add(kCommBuf, 2 * tensor_bytes(buf_[i]));
      works.push_back(g.alltoall(buf2_[i], buf_[i]));
      break;
    }
    case CommPurpose::kLossReduce:
      // The vocab-parallel loss's three all-reduces run inside the loss op's forward
      // (TorchModel, OpKind::kLoss): the node only marks their place in the schedule.
      break;
    case CommPurpose::kContextPar:
      // Context parallelism's p2p ring runs inside the attention op, hop by hop beside its
      // steps (TorchModel::ring_attention, cp_backward); all_gather's all-gathers and
      // reduce-scatters (gathered_attention) and a2a's all-to-alls (a2a_attention,
      // cp_output_grad) run inside it too: the node marks their place.
      break;
    default:
      throw std::runtime_error(fmt::format("replay cannot execute {}", op_label(i)));
  }
  enqueue(i, std::move(works));
}

void RankRun::finalize(size_t i) {
  OpState& s = st_[i];
  if (s.finalized) return;
  s.finalized = true;
  struct Unpack {  // OpRecord::unpack_ns: the host time of what follows
    OpState& s;
    int64_t& total;
    int64_t t0;
    ~Unpack() {
      s.unpack_ns = now_ns() - t0;
      total += s.unpack_ns;
    }
  } unpack{s, t_unpack_, now_ns()};
  // Fault "drop" (tests): the fault_op-th data this rank receives is lost, which --check
  // must notice.
  if (opt_.fault_kind == "drop" && me_ == opt_.fault_rank && !ops_[i].is_send &&
      ops_[i].kind != NodeKind::kCompute && drop_counter_++ == opt_.fault_op) {
    if (buf_[i].defined()) buf_[i].zero_();
    if (buf2_[i].defined()) buf2_[i].zero_();
    for (auto& t : gather_out_[i]) t.zero_();
  }
  const DeviceOp& dop = ops_[i];
  const Node& n = cp_.dag.nodes[dop.node];
  const int mb = mb_of(n);
  const size_t k = n.op != kNone ? key(n.op, mb) : 0;
  if (n.kind == NodeKind::kTransfer) {
    mem_.add(kCommBuf, -tensor_bytes(buf_[i]));
    if (!dop.is_send) {
      if (n.purpose == CommPurpose::kGradient)
        add_grad(n.op, mb, std::exchange(buf_[i], at::Tensor()));  // the buffer taken over
      else
        val_[k] = buf_[i];
    }
    buf_[i] = at::Tensor();
    return;
  }
  PackTimer pack_timer(cpu_pack_, packs(n));
  switch (n.purpose) {
    case CommPurpose::kGradReduce: {
      const auto& bucket = bucket_of_node_[dop.node];
      if (n.comm != CommKind::kReduceScatter) {
        int64_t off = 0;
        for (uint32_t o : bucket) {
          const int64_t n_o = op_numel(o);
          write_grads(o, buf_[i].narrow(0, off, n_o), 0, n_o);
          off += n_o;
        }
        mem_.add(kCommBuf, -tensor_bytes(buf_[i]));
      } else {
        std::vector<int32_t> g = dop.group;
        const int64_t R = static_cast<int64_t>(g.size());
        int64_t width = 0;
        std::vector<int64_t> cs;
        for (uint32_t o : bucket) {
          cs.push_back((op_numel(o) + R - 1) / R);
          width += cs.back();
        }
        const at::Tensor all = buf_[i].view({R, width});
        int64_t col = 0;
        for (size_t b = 0; b < bucket.size(); ++b) {
          const uint32_t o = bucket[b];
          const int64_t n_o = op_numel(o);
          at::Tensor f = all.narrow(1, col, cs[b]).reshape({-1}).narrow(0, 0, n_o);
          write_grads(o, f, owned_[o].first, owned_[o].second);
          col += cs[b];
        }
        mem_.add(kBuckets, -tensor_bytes(buf_[i]));
      }
      break;
    }
    case CommPurpose::kParamSync:
    case CommPurpose::kParamGather: {
      std::vector<uint32_t> list =
          n.purpose == CommPurpose::kParamSync ? bucket_of_node_[dop.node] : std::vector<uint32_t>{n.op};
      const int64_t R = static_cast<int64_t>(gather_out_[i].size());
      int64_t off = 0;
      for (uint32_t o : list) {
        const int64_t n_o = op_numel(o), c = (n_o + R - 1) / R;
        std::vector<at::Tensor> chunks;
        for (int64_t q = 0; q < R; ++q) chunks.push_back(gather_out_[i][q].narrow(0, off, c));
        write_params(o, at::cat(chunks).narrow(0, 0, n_o));
        if (n.purpose == CommPurpose::kParamSync) synced_[o] = 1;  // every shard's step is here
        off += c;
      }
      mem_.add(n.purpose == CommPurpose::kParamGather ? kGathered : kCommBuf,
               -tensor_bytes(buf_[i]) * R);
      gather_out_[i].clear();
      break;
    }
    case CommPurpose::kGradNorm: {
      clip_scale_ = clip_coefficient(buf_[i]);
      break;
    }
    case CommPurpose::kTensorPar:
      mem_.add(kCommBuf, -tensor_bytes(buf_[i]));
      if (n.tags.pass == Pass::kF) {
        pending_out_[k] = at::Tensor();
        finish_forward(n.op, mb, buf_[i]);
      } else {
        std::vector<at::Tensor> dx = std::move(pending_dx_[k]);
        dx.at(0) = std::move(buf_[i]);  // add_grad may take the reduced buffer over
        add_input_grads(n.op, mb, dx);
      }
      break;
    case CommPurpose::kDispatch:
    case CommPurpose::kCombine: {
      mem_.add(kCommBuf, -2 * tensor_bytes(buf_[i]));
      const bool fwd = n.tags.pass == Pass::kF;
      const ModelOp& op = cp_.model.ops[n.op];
      if (n.purpose == CommPurpose::kDispatch && fwd) {
        ep_in_[k] = buf2_[i];
      } else if (n.purpose == CommPurpose::kCombine && fwd) {
        pending_out_[k] = at::Tensor();
        finish_forward(n.op, mb, buf2_[i].sum(0));
      } else if (n.purpose == CommPurpose::kCombine) {
        ep_dy_[k] = buf2_[i];
      } else {
        pending_dx_[k].clear();
        add_grad(op.inputs.at(0), mb, buf2_[i].sum(0));
      }
      buf2_[i] = at::Tensor();
      break;
    }
    default:
      break;
  }
  buf_[i] = at::Tensor();
}

void RankRun::run_program() {
  for (size_t i = 0; i < ops_.size(); ++i) execute(i);
  for (size_t i = 0; i < ops_.size(); ++i)
    if (!st_[i].finalized) {
      wait_op(i);
      finalize(i);
    }
}

void RankRun::run_optimizer() {
  status_.set(fmt::format("step {}: optimizer step", iteration_));
  for (uint32_t o = 0; o < params_.size(); ++o) optimizer_step(o);
}

void RankRun::graph_step(RankResult& rr) {
#ifdef STRETTO_BACKEND_CUDA
  if (!graph_) {
    // Captured once, at the first measured step and untimed: the device's whole program (every
    // op of every microbatch) and the optimizer step, on a side stream. The tensors it
    // allocates stay in the graph's pool; every later step replays it in place. check_supported
    // admits only what can be captured (one device, no MoE routing).
    c10::cuda::device_synchronize();
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    {
      c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
      capturing_ = true;
      graph_->capture_begin();
      try {
        run_program();
        run_optimizer();
      } catch (...) {
        capturing_ = false;
        try {
          graph_->capture_end();
        } catch (...) {
        }
        throw;
      }
      graph_->capture_end();
      capturing_ = false;
    }
    c10::cuda::device_synchronize();
  }
  const int64_t t0 = now_ns();
  ev_step_->record();
  graph_->replay();
  ev_graph_end_->record();
  c10::cuda::device_synchronize();
  const int64_t dur = static_cast<int64_t>(ev_step_->elapsed_time(*ev_graph_end_) * 1e6);
  rr.step_ns.push_back(dur);
  rr.t0_ns.push_back(t0);
  // One graph: no per-op times, so no op records and no busy / bubble split.
  rr.report.step_ns += dur;
  rr.report.ops_per_step = static_cast<int>(ops_.size());
#else
  (void)rr;
  throw std::runtime_error("--cuda-graphs: this build has no CUDA backend");
#endif
}

void RankRun::step(bool measured, RankResult& rr) {
  // Fresh per-step state; gradients start at zero.
  for (auto& ps : params_)
    for (auto& p : ps) p.grad.zero_();
  for (auto& s : st_) s = OpState{};
  std::fill(stepped_.begin(), stepped_.end(), 0);
  std::fill(synced_.begin(), synced_.end(), 0);
  clip_scale_ = at::Tensor();
  adam_c1_ = adam_c2_ = at::Tensor();
  for (auto* v : {&val_, &grad_acc_, &pending_out_, &ep_in_, &ep_dy_})
    for (auto& t : *v) t = at::Tensor();
  for (auto& d : pending_dx_) d.clear();
  for (auto& s : saved_inputs_) s.clear();
  auto b = world_->barrier();
  if (!b->wait(std::chrono::milliseconds(opt_.timeout_ms)))
    throw std::runtime_error(fmt::format("rank {} timed out at the start barrier of step {}", me_,
                                         iteration_));
  for (auto& [name, w] : waiters_) w->last_end = 0;
  t_compute_ = t_wait_ = cpu_compute_ = cpu_pack_ = t_post_ = t_unpack_ = 0;
  if (opt_.cuda_graphs && measured) return graph_step(rr);  // CUDA only (check_supported)
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_) {
    c10::cuda::device_synchronize();
    ev_step_->record();
  }
#endif
  const int64_t t0 = now_ns(), cpu0 = cpu_ns();
  for (auto& [name, w] : waiters_) w->last_end = t0;
  int64_t t_opt = 0, cpu_opt = 0;
  {
    // The step's work, named for ATen's profilers and hooks (tests/backend counts the host
    // synchronisations inside it).
    RECORD_USER_SCOPE("stretto::step");
    run_program();
    t_opt = now_ns();
    cpu_opt = cpu_ns();
    run_optimizer();
  }
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_) {
    // Kernels run asynchronously: compute times come from the events, on the step's clock.
    c10::cuda::device_synchronize();
    for (size_t i = 0; i < ops_.size(); ++i)
      if (ops_[i].kind == NodeKind::kCompute) {
        st_[i].start_ns = t0 + static_cast<int64_t>(ev_step_->elapsed_time(*ev_begin_[i]) * 1e6);
        st_[i].end_ns = t0 + static_cast<int64_t>(ev_step_->elapsed_time(*ev_end_[i]) * 1e6);
      }
  }
#endif
  const int64_t t1 = now_ns(), cpu1 = cpu_ns();
  t_compute_ += t1 - t_opt;
  cpu_compute_ += cpu1 - cpu_opt;
  if (loss_sum_.defined()) {  // after the step's clock stopped
    loss_ = loss_sum_.item<double>();
    loss_sum_ = at::Tensor();
  }
  if (!measured) return;
  const int it = static_cast<int>(rr.step_ns.size());
  rr.step_ns.push_back(t1 - t0);
  rr.t0_ns.push_back(t0);
  // Metrics: busy = union of compute, comm = union of comm, exposed = comm outside compute.
  std::vector<std::pair<int64_t, int64_t>> comp, comm;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const auto& s = st_[i];
    const std::pair<int64_t, int64_t> iv{s.start_ns - t0, s.end_ns - t0};
    (ops_[i].kind == NodeKind::kCompute ? comp : comm).push_back(iv);
    if (opt_.record_ops) {
      OpRecord r;
      r.device = me_;
      r.stream = ops_[i].stream;
      r.name = ops_[i].name;
      r.node = ops_[i].node;
      r.iteration = it;
      r.start_ns = iv.first;
      r.end_ns = iv.second;
      r.post_ns = ops_[i].kind == NodeKind::kCompute ? iv.first : s.post_ns - t0;
      r.unpack_ns = ops_[i].kind == NodeKind::kCompute ? 0 : s.unpack_ns;
      rr.ops.push_back(std::move(r));
    }
  }
  comp.emplace_back(t_opt - t0, t1 - t0);
  const auto cu = merge_intervals(std::move(comp)), mu = merge_intervals(std::move(comm));
  int64_t busy = 0, commt = 0, overlap = 0;
  for (auto [a, b2] : cu) busy += b2 - a;
  for (auto [a, b2] : mu) commt += b2 - a;
  for (auto [a, b2] : mu)
    for (auto [c, d] : cu) overlap += std::max<int64_t>(0, std::min(b2, d) - std::max(a, c));
  DeviceReport& r = rr.report;
  r.busy_ns += busy;
  r.comm_ns += commt;
  r.exposed_comm_ns += commt - overlap;
  r.step_ns += t1 - t0;
  r.overhead_ns += std::max<int64_t>(0, (t1 - t0) - t_compute_ - t_wait_);
  r.post_ns += t_post_;
  r.unpack_ns += t_unpack_;
  r.ops_per_step = static_cast<int>(ops_.size());
  r.overhead_cpu_ns += std::max<int64_t>(0, (cpu1 - cpu0) - cpu_compute_ - cpu_pack_);
  r.pack_cpu_ns += cpu_pack_;
  r.compute_cpu_ns += cpu_compute_;
}

// A tensor's values as host floats, flattened (what --check compares).
std::vector<float> float_values(const at::Tensor& t) {
  const at::Tensor f = t.detach().to(at::kCPU).to(at::kFloat).contiguous().view({-1});
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

RankResult RankRun::run(std::vector<GradDump>* grads) {
  at::set_num_threads(std::max(1, opt_.threads));
  setup();
  RankResult rr;
  rr.rank = me_;
  rr.report.id = me_;
  rr.device = cuda_ ? fmt::format("cuda:{}", static_cast<int>(model_.options().device().index())) : "cpu";
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) == 0) rr.host = host;
  const int total = opt_.warmup + opt_.iterations;
  std::vector<std::vector<float>> first_grads;  // --check: every gradient of the first step
  for (iteration_ = 0; iteration_ < total; ++iteration_) {
    step(iteration_ >= opt_.warmup, rr);
    if (grads && iteration_ == 0)
      for (const auto& ps : params_)
        for (const auto& p : ps) first_grads.push_back(float_values(p.grad));
  }
  status_.set("finished");
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(rr.step_ns.size()));
  DeviceReport& r = rr.report;
  r.busy_ns /= n;
  r.comm_ns /= n;
  r.exposed_comm_ns /= n;
  r.step_ns /= n;
  r.overhead_ns /= n;
  r.post_ns /= n;
  r.unpack_ns /= n;
  r.overhead_cpu_ns /= n;
  r.compute_cpu_ns /= n;
  r.pack_cpu_ns /= n;
  r.bubble_ns = std::max<int64_t>(0, r.step_ns - r.busy_ns);
  r.bubble_ratio = r.step_ns > 0 ? static_cast<double>(r.bubble_ns) / r.step_ns : 0;
  r.peak_memory = mem_.peak;
  r.breakdown = mem_.at_peak;
  for (size_t o = 0; o < moment1_.size(); ++o)
    r.optimizer_state_bytes +=
        tensor_bytes(moment1_[o]) + tensor_bytes(moment2_[o]) + tensor_bytes(master_[o]);
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<int>(model_.options().device().index()));
    r.peak_memory = stats.allocated_bytes[0].peak;
  }
#endif
  rr.loss = loss_;
  if (grads) {
    for (uint32_t o = 0; o < params_.size(); ++o) {
      int64_t off = 0;
      for (const auto& p : params_[o]) {
        GradDump g;
        g.name = p.slice.name;
        g.full_shape = p.slice.full_shape;
        g.dim = p.slice.dim;
        g.ranges = p.slice.ranges;
        const int64_t n_p = p.grad.numel();
        g.owned_begin = std::clamp<int64_t>(owned_[o].first - off, 0, n_p);
        g.owned_end = std::clamp<int64_t>(owned_[o].second - off, 0, n_p);
        off += n_p;
        g.values = float_values(p.grad);
        g.first_values = std::move(first_grads.at(grads->size()));
        g.stepped_begin = synced_[o] ? 0 : g.owned_begin;
        g.stepped_end = synced_[o] ? n_p : g.owned_end;
        g.weights = float_values(p.value);
        if (master_[o].defined() && g.owned_end > g.owned_begin) {
          // Mixed precision: the parameter the optimizer holds is the fp32 master of the owned
          // elements (the 16-bit tensor is its rounding, 2^-9 of |w| for bf16, more than a
          // step's update); the other ranks' masters report the rest.
          const std::vector<float> m = float_values(master_[o].narrow(
              0, off - n_p + g.owned_begin - owned_[o].first, g.owned_end - g.owned_begin));
          std::copy(m.begin(), m.end(), g.weights.begin() + g.owned_begin);
          g.stepped_begin = g.owned_begin;
          g.stepped_end = g.owned_end;
        }
        grads->push_back(std::move(g));
      }
    }
  }
  stop_waiters();
  return rr;
}

}  // namespace

bool stealable(const at::Tensor& g) {
  if (g.use_count() > 1 || !g.is_non_overlapping_and_dense()) return false;
  // A view whose base only the view itself holds (the transpose a GEMM's backward returns for
  // a column-major operand, e.g. the fused SwiGLU's): no other tensor shares its memory either.
  if (g.is_view()) return g._base().use_count() <= 1 && g.storage().use_count() <= 2;
  return g.storage().use_count() <= 1;
}

Optimizer step_optimizer(const CompiledPlan& cp, const ReplayOptions& opt) {
  // A plan with an `optimizer` names the step the compiler scheduled: Adam or SGD.
  if (!cp.plan.optimizer.given) return opt.optimizer;
  switch (cp.plan.optimizer.kind) {
    case OptimizerSpec::Kind::kSgd:
      return Optimizer::kSgd;
    case OptimizerSpec::Kind::kAdam:
      return Optimizer::kAdam;
    case OptimizerSpec::Kind::kNone:
      return Optimizer::kNone;
  }
  return Optimizer::kNone;
}

bool clips_gradients(const CompiledPlan& cp) {
  return cp.plan.optimizer.given && cp.plan.optimizer.grad_clip;
}

}  // namespace detail

Expected<ReplayResult> run_rank(const CompiledPlan& cp, const RankSpec& spec,
                                const ReplayOptions& opt_in) {
  ReplayOptions opt = opt_in;
  if (opt.check) {
    opt.iterations = detail::kCheckSteps;
    opt.warmup = 0;
  }
  if (opt.device == DeviceKind::kAuto) opt.device = cuda_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (auto d = check_supported(cp, opt); !d.empty()) return fail(std::move(d));
  auto failure = [&](const std::string& msg) {
    Diagnostic d;
    d.message = msg;
    d.loc.file = cp.plan.file;
    return fail(std::move(d));
  };
  // Leaked on failure on purpose: a failed group's c10d objects may block in their
  // destructors (waiting for peers that are gone); the process exits right after.
  auto* run = new detail::RankRun(cp, spec, opt);
  RankResult rr;
  std::vector<detail::GradDump> grads;
  try {
    rr = run->run(opt.check ? &grads : nullptr);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    msg = msg.substr(0, msg.find("\nException raised from"));
    if (msg.rfind("rank ", 0) != 0) msg = fmt::format("rank {}: {}", spec.rank, msg);
    return failure(msg);
  }
  // Rank 0 of a multi-host group hosts the store: keep it while the others publish.
  c10::intrusive_ptr<c10d::Store> store = run->store();
  delete run;
  // Publish this rank's result; rank 0 of a multi-host group gathers everyone's.
  ReplayResult out;
  try {
    const std::string js = to_json(rr).dump();
    detail::store_put(*store, fmt::format("stretto/result/{}", spec.rank),
                      std::vector<uint8_t>(js.begin(), js.end()));
    if (opt.check)
      detail::store_put(*store, fmt::format("stretto/grads/{}", spec.rank), detail::encode_grads(grads));
    store->add("stretto/done", 1);
    if (spec.store_is_external || spec.rank != 0) {
      out = merge_results(cp, opt, {rr});
      return out;
    }
    std::vector<RankResult> all;
    std::vector<std::vector<detail::GradDump>> all_grads;
    for (int r = 0; r < spec.world_size; ++r) {
      auto b = detail::store_take(*store, fmt::format("stretto/result/{}", r));
      auto parsed = rank_result_from_json(plan::Json::parse(std::string(b.begin(), b.end())));
      if (!parsed) return fail(parsed.error());
      all.push_back(std::move(*parsed));
      if (opt.check)
        all_grads.push_back(detail::decode_grads(detail::store_take(*store, fmt::format("stretto/grads/{}", r))));
    }
    out = merge_results(cp, opt, std::move(all));
    if (opt.check) out.check = detail::check_against_reference(cp, opt, all_grads, out.loss);
    // Keep the store up until every rank has published.
    while (store->add("stretto/done", 0) < spec.world_size)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } catch (const std::exception& e) {
    return failure(fmt::format("rank {}: publishing the result failed: {}", spec.rank, e.what()));
  }
  return out;
}

}  // namespace stretto::backend
