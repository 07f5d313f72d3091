// launch_local (fork + exec one process per device, TCP store hosted here), the gradient check
// against a single-process reference, and the gradient dump format.
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "stretto/backend/replay.h"
#include "torch_comm.h"
#include "torch_executor.h"
#include "torch_model.h"

#ifdef STRETTO_BACKEND_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

extern char** environ;

namespace stretto::backend {

bool has_cuda_build() {
#ifdef STRETTO_BACKEND_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef STRETTO_BACKEND_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

bool cuda_available() {
#ifdef STRETTO_BACKEND_CUDA
  return c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

namespace detail {

std::vector<uint8_t> encode_grads(const std::vector<GradDump>& g) {
  Json h = Json::array();
  size_t floats = 0;
  for (const auto& d : g) {
    h.push_back({{"name", d.name},
                 {"full_shape", d.full_shape},
                 {"dim", d.dim},
                 {"start", d.start},
                 {"length", d.length},
                 {"owned_begin", d.owned_begin},
                 {"owned_end", d.owned_end},
                 {"n", d.values.size()}});
    floats += d.values.size();
  }
  const std::string hs = h.dump();
  std::vector<uint8_t> out(8 + hs.size() + floats * sizeof(float));
  const uint64_t len = hs.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, hs.data(), hs.size());
  size_t off = 8 + hs.size();
  for (const auto& d : g) {
    std::memcpy(out.data() + off, d.values.data(), d.values.size() * sizeof(float));
    off += d.values.size() * sizeof(float);
  }
  return out;
}

std::vector<GradDump> decode_grads(const std::vector<uint8_t>& b) {
  std::vector<GradDump> out;
  if (b.size() < 8) return out;
  uint64_t len = 0;
  std::memcpy(&len, b.data(), 8);
  if (8 + len > b.size()) return out;
  const Json h = Json::parse(std::string(b.begin() + 8, b.begin() + 8 + static_cast<ptrdiff_t>(len)));
  size_t off = 8 + len;
  for (const auto& e : h) {
    GradDump d;
    d.name = e.at("name").get<std::string>();
    d.full_shape = e.at("full_shape").get<std::vector<int64_t>>();
    d.dim = e.at("dim").get<int>();
    d.start = e.at("start").get<int64_t>();
    d.length = e.at("length").get<int64_t>();
    d.owned_begin = e.at("owned_begin").get<int64_t>();
    d.owned_end = e.at("owned_end").get<int64_t>();
    const size_t n = e.at("n").get<size_t>();
    if (off + n * sizeof(float) > b.size()) break;
    d.values.resize(n);
    std::memcpy(d.values.data(), b.data() + off, n * sizeof(float));
    off += n * sizeof(float);
    out.push_back(std::move(d));
  }
  return out;
}

CheckReport check_against_reference(const CompiledPlan& cp, const ReplayOptions& opt,
                                    const std::vector<std::vector<GradDump>>& ranks,
                                    double replayed_loss) {
  CheckReport rep;
  rep.loss = replayed_loss;
  TorchModel model(cp, opt.seed, at::TensorOptions().dtype(at::kFloat));
  const auto& ops = cp.model.ops;
  std::vector<std::vector<Param>> params(ops.size());
  std::map<std::string, at::Tensor> by_name;
  for (uint32_t o = 0; o < ops.size(); ++o) params[o] = model.make_params(o, OpPlacement{});
  // The global batch: every replica of the loss op, every microbatch.
  int R = 1;
  for (const Node& n : cp.dag.nodes)
    if (n.kind == NodeKind::kCompute && n.tags.pass == Pass::kF && model.is_last(n.op)) {
      R = static_cast<int>(cp.dag.device_sets[n.devs].devices.size()) / std::max<int>(1, n.tp);
      break;
    }
  const int M = std::max(1, cp.num_microbatches);
  const double scale = 1.0 / (static_cast<double>(R) * M);
  double loss_sum = 0;
  for (int r = 0; r < R; ++r)
    for (int mb = 0; mb < M; ++mb) {
      std::vector<at::Tensor> val(ops.size());
      at::Tensor loss;
      for (uint32_t o = 0; o < ops.size(); ++o) {
        if (ops[o].kind == OpKind::kOptimizer) continue;  // the step, not a model op
        std::vector<at::Tensor> in;
        for (uint32_t p : ops[o].inputs) in.push_back(val[p]);
        OpCtx c = model.forward(o, in, params[o], OpPlacement{}, r, mb, scale, {});
        at::Tensor v = c.out.dim() == 3 ? c.out.sum(0) : c.out;
        if (model.residual_source(o) != kNone) v = v + val[model.residual_source(o)];
        val[o] = v;
        if (model.is_last(o)) loss = v;
      }
      loss_sum += loss.item<double>();
      torch::autograd::backward({loss});
    }
  rep.reference_loss = loss_sum;
  for (uint32_t o = 0; o < ops.size(); ++o)
    for (auto& p : params[o]) {
      at::Tensor g = p.value.grad();
      by_name[p.slice.name] = g.defined() ? g.detach() : at::zeros_like(p.value).detach();
    }
  // fp32 everywhere (CPU, or fp32 plans on GPU): agreement to float rounding. bf16/fp16 on
  // GPU: to that precision.
  // A gradient that is zero analytically (a key bias: softmax ignores a per-query constant) is
  // float rounding noise in both runs: relative differences are taken against at least 1e-3 of
  // the model's largest gradient, not against that noise.
  double global_scale = 0;
  for (const auto& [name, g] : by_name) global_scale = std::max(global_scale, g.abs().max().item<double>());
  const bool low_precision = opt.device == DeviceKind::kCuda && cp.model.dtype != DType::kFP32;
  rep.tolerance = low_precision ? 5e-2 : 1e-4;
  for (size_t rank = 0; rank < ranks.size(); ++rank)
    for (const auto& d : ranks[rank]) {
      // A gradient the reference cannot be matched with fails the check (it is not skipped:
      // a skipped parameter would pass unchecked).
      auto it = by_name.find(d.name);
      if (it == by_name.end()) {
        rep.unmatched.push_back(fmt::format(
            "{} on device {}: no parameter of that name in the reference", d.name, rank));
        continue;
      }
      at::Tensor ref = it->second;
      const int64_t full = d.dim >= 0 && d.dim < ref.dim() ? ref.size(d.dim) : 0;
      const bool in_shape =
          d.dim < ref.dim() &&
          (d.dim < 0 || (d.start >= 0 && d.length >= 0 && d.start + d.length <= full));
      if (!in_shape) {
        rep.unmatched.push_back(fmt::format(
            "{} on device {}: slice [{}, +{}) of dimension {} is outside the reference's shape",
            d.name, rank, d.start, d.length, d.dim));
        continue;
      }
      if (d.owned_end <= d.owned_begin) continue;  // this rank owns none of it (a ZeRO shard)
      if (d.dim >= 0) ref = ref.narrow(d.dim, d.start, d.length);
      ref = ref.contiguous().view({-1});
      if (static_cast<int64_t>(d.values.size()) != ref.numel() || d.owned_begin < 0 ||
          d.owned_end > ref.numel()) {
        rep.unmatched.push_back(fmt::format(
            "{} on device {}: {} values (owned [{}, {})), the reference's slice has {}", d.name,
            rank, d.values.size(), d.owned_begin, d.owned_end, ref.numel()));
        continue;
      }
      const at::Tensor mine =
          at::from_blob(const_cast<float*>(d.values.data()), {static_cast<int64_t>(d.values.size())},
                        at::TensorOptions().dtype(at::kFloat))
              .narrow(0, d.owned_begin, d.owned_end - d.owned_begin);
      const at::Tensor refp = ref.narrow(0, d.owned_begin, d.owned_end - d.owned_begin);
      GradCheck gc;
      gc.param = d.name;
      gc.device = static_cast<int>(rank);
      gc.elements = mine.numel();
      gc.max_abs_diff = (mine - refp).abs().max().item<double>();
      const double scale_ref = std::max(refp.abs().max().item<double>(), 1e-3 * global_scale);
      gc.max_rel_diff = scale_ref > 0 ? gc.max_abs_diff / scale_ref : gc.max_abs_diff;
      if (gc.max_rel_diff >= rep.max_rel_diff) {
        rep.max_rel_diff = gc.max_rel_diff;
        rep.worst_param = fmt::format("{} on device {}", d.name, rank);
      }
      rep.max_abs_diff = std::max(rep.max_abs_diff, gc.max_abs_diff);
      rep.params.push_back(std::move(gc));
    }
  rep.passed = !rep.params.empty() && rep.unmatched.empty() && rep.max_rel_diff <= rep.tolerance &&
               std::abs(rep.loss - rep.reference_loss) <=
                   rep.tolerance * std::max(1.0, std::abs(rep.reference_loss));
  return rep;
}

}  // namespace detail

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int sig) {
  g_interrupted = sig;
}

std::string read_status(const std::string& dir, int rank) {
  std::ifstream f(fmt::format("{}/rank{}", dir, rank), std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  s = s.substr(0, s.find('\0'));
  return s.empty() ? "starting up" : s;
}

void remove_dir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      ::unlink((dir + "/" + e->d_name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

Expected<ReplayResult> launch_local(const CompiledPlan& cp, const ReplayOptions& opt_in,
                                    const LaunchOptions& launch) {
  const auto t_start = std::chrono::steady_clock::now();
  ReplayOptions opt = opt_in;
  if (opt.check) {
    opt.iterations = 1;
    opt.warmup = 0;
  }
  if (opt.device == DeviceKind::kAuto) opt.device = cuda_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (auto d = check_supported(cp, opt); !d.empty()) return fail(std::move(d));
  auto failure = [&](std::string msg, std::string hint = "") {
    Diagnostic d;
    d.message = std::move(msg);
    d.hint = std::move(hint);
    d.loc.file = cp.plan.file;
    return fail(std::move(d));
  };
  const int N = cp.num_devices;
  // The rendezvous store lives here: an OS-chosen port on loopback, no file anywhere.
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = std::chrono::milliseconds(opt.timeout_ms);
    store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so);
  } catch (const std::exception& e) {
    return failure(fmt::format("cannot start the rendezvous store: {}", e.what()));
  }
  const int port = store->getPort();
  std::string tmpl = launch.tmp_dir + "/stretto-replay-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return failure(fmt::format("cannot create a temporary directory in {} for the ranks' status",
                               launch.tmp_dir));
  const std::string dir = tmpl;
  // argv and envp are built before fork: the child only calls exec.
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    if (s.rfind("STRETTO_REPLAY_", 0) == 0) continue;
    env_s.push_back(std::move(s));
  }
  env_s.push_back("STRETTO_REPLAY_STATUS_DIR=" + dir);
  env_s.push_back("STRETTO_REPLAY_STORE_EXTERNAL=1");
  const std::string threads = std::to_string(std::max(1, opt.threads));
  if (!std::getenv("OPENBLAS_NUM_THREADS")) env_s.push_back("OPENBLAS_NUM_THREADS=" + threads);
  if (!std::getenv("OMP_NUM_THREADS")) env_s.push_back("OMP_NUM_THREADS=" + threads);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::vector<std::string>> argv_s(N);
  std::vector<std::vector<char*>> argv(N);
  for (int r = 0; r < N; ++r) {
    argv_s[r].push_back(launch.exe);
    for (const auto& a : launch.args) argv_s[r].push_back(a);
    for (std::string a : {std::string("--rank"), std::to_string(r), std::string("--world-size"),
                          std::to_string(N), std::string("--master"),
                          fmt::format("{}:{}", launch.master_addr, port)})
      argv_s[r].push_back(a);
    for (auto& s : argv_s[r]) argv[r].push_back(s.data());
    argv[r].push_back(nullptr);
  }
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  g_interrupted = 0;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(N, -1);
  std::vector<int> status(N, 0);
  std::vector<char> alive(N, 0);
  int started = 0;
  for (int r = 0; r < N; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::execve(argv[r][0], argv[r].data(), envp.data());
      ::_exit(127);
    }
    if (pid < 0) break;
    pids[r] = pid;
    alive[r] = 1;
    ++started;
  }
  if (!launch.quiet)
    std::fprintf(stderr, "replay: %d processes on %s:%d (status in %s)\n", started,
                 launch.master_addr.c_str(), port, dir.c_str());
  // Watch the group: the first failure gives the others a grace period to fail on their own
  // (they name the op they were in), then everyone left is killed.
  int first_failed = -1;
  std::string first_status;
  std::vector<std::string> notes;
  auto kill_all = [&](int sig) {
    for (int r = 0; r < N; ++r)
      if (alive[r]) ::kill(pids[r], sig);
  };
  const auto grace = std::chrono::milliseconds(std::min<int64_t>(opt.timeout_ms, 3000));
  auto deadline = std::chrono::steady_clock::time_point::max();
  auto last_progress = std::chrono::steady_clock::now();
  std::vector<std::string> last_status(N);
  bool killed = false, interrupted = false, stalled = false;
  int remaining = started;
  if (started < N) {
    first_failed = started;
    first_status = "could not be started (fork failed)";
    deadline = std::chrono::steady_clock::now();
  }
  int poll = 0;
  while (remaining > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < N; ++r)
        if (pids[r] == pid && alive[r]) {
          alive[r] = 0;
          status[r] = st;
          --remaining;
          const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
          if (!ok && first_failed < 0 && !killed) {
            first_failed = r;
            first_status = fmt::format("rank {} {} (last op: {})", r, describe_status(st),
                                       read_status(dir, r));
            deadline = std::chrono::steady_clock::now() + grace;
          } else if (!ok && !killed) {
            notes.push_back(fmt::format("rank {} {} (last op: {})", r, describe_status(st),
                                        read_status(dir, r)));
          }
        }
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (g_interrupted && !interrupted) {
      interrupted = true;
      kill_all(SIGTERM);
      deadline = now + std::chrono::seconds(2);
    }
    if (now >= deadline && !killed) {
      for (int r = 0; r < N; ++r)
        if (alive[r])
          notes.push_back(fmt::format("rank {} was stopped by the launcher (last op: {})", r,
                                      read_status(dir, r)));
      killed = true;
      kill_all(SIGKILL);
    }
    // No rank changed its status line for longer than the timeout: the group is stuck.
    if (++poll % 10 == 0 && first_failed < 0 && !interrupted) {
      bool changed = false;
      for (int r = 0; r < N; ++r) {
        std::string s = read_status(dir, r);
        if (s != last_status[r]) changed = true, last_status[r] = std::move(s);
      }
      if (changed) last_progress = now;
      if (now - last_progress > std::chrono::milliseconds(opt.timeout_ms) + std::chrono::seconds(5)) {
        stalled = true;
        first_failed = 0;
        first_status = fmt::format("no rank made progress for {} s", opt.timeout_ms / 1000 + 5);
        deadline = now;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  // Results (before the status files go: nothing is read from them afterwards).
  std::vector<RankResult> results;
  std::vector<std::vector<detail::GradDump>> grads;
  std::string err;
  if (first_failed < 0 && !interrupted) {
    try {
      for (int r = 0; r < N; ++r) {
        auto b = detail::store_take(*store, fmt::format("stretto/result/{}", r));
        auto parsed = rank_result_from_json(Json::parse(std::string(b.begin(), b.end())));
        if (!parsed) {
          err = parsed.error().front().message;
          break;
        }
        results.push_back(std::move(*parsed));
        if (opt.check) grads.push_back(detail::decode_grads(detail::store_take(*store, fmt::format("stretto/grads/{}", r))));
      }
    } catch (const std::exception& e) {
      err = fmt::format("collecting the ranks' results failed: {}", e.what());
    }
  }
  remove_dir(dir);
  if (interrupted) return failure("replay interrupted: every rank was stopped");
  if (first_failed >= 0) {
    Diagnostic d;
    d.message = fmt::format("replay failed: {}", first_status);
    for (const auto& n : notes) d.notes.push_back({SourceLoc{}, n});
    d.hint = stalled ? "a rank is stuck; raise --timeout if an op legitimately takes longer"
                     : "the rank's own message above names the op it failed in";
    d.loc.file = cp.plan.file;
    return fail(std::move(d));
  }
  if (!err.empty()) return failure(err);
  ReplayResult out = merge_results(cp, opt, std::move(results));
  if (opt.check) out.check = detail::check_against_reference(cp, opt, grads, out.loss);
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  return out;
}

}  // namespace stretto::backend
