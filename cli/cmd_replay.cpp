// `stretto replay PLAN [--iterations N] [--warmup K] [--check] [--trace FILE] [--format table|json]
//   [--timeout S] [--max-procs N] [--device auto|cpu|cuda] [--optimizer sgd|adam|none] ...`
// Launches one process per device on this host (fork + exec of this binary), or -- with
// --rank/--world-size/--master, or torchrun/srun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT --
// runs one rank of a multi-host group (rank 0 prints the merged result).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include "commands.h"
#include "output.h"
#include "stretto/backend/replay.h"
#include "stretto/backend/validate.h"
#include "stretto/plan/json_source.h"
#include "stretto/sim/session.h"

namespace stretto::cli {

namespace {

struct ReplayOpts {
  std::string plan, trace, format, device = "auto", optimizer = "sgd", master, fault_kind = "crash",
      kernels = "fused";
  int iterations = 5, warmup = 1, max_procs = 64, threads = 1, rank = -1, world_size = -1;
  int fault_rank = -1;
  int64_t fault_op = -1;
  double timeout_s = 60, lr = 1e-3;
  uint64_t seed = 1234;
  bool check = false, compare = true, recompute = false, cuda_graphs = false;
};

int diag_exit(const std::string& msg, const std::string& hint = "") {
  Diagnostic d;
  d.message = msg;
  d.hint = hint;
  return report({d});
}

// Bounds of the options the launcher and LibTorch take as given: a timeout of 0 ms (or one
// overflowing int64 milliseconds) made Gloo enforce-fail or hang, an infinite learning rate
// made every parameter NaN, 100,000 intra-op threads per rank exhausted the host.
constexpr double kMinTimeoutS = 0.1, kMaxTimeoutS = 86400;  // a rank waiting a day is hung
constexpr double kMaxLr = 10;  // training learning rates are below 1; 10 leaves room, not inf
constexpr int kMaxThreads = 1024;  // the most cores one host has, with room for oversubscription

Diagnostic option_error(std::string option, std::string message, std::string hint) {
  Diagnostic d;
  d.loc.file = std::move(option);
  d.message = std::move(message);
  d.hint = std::move(hint);
  return d;
}

// ADDR:PORT, the port in 1..65535 and digits only ("127.0.0.1:abc" read as port 0, and
// ":70000" wrapped to 4464).
std::optional<std::pair<std::string, int>> parse_master(const std::string& master) {
  const auto colon = master.rfind(':');
  const std::string addr = colon == std::string::npos ? master : master.substr(0, colon);
  const std::string port = colon == std::string::npos ? "29500" : master.substr(colon + 1);
  if (addr.empty() || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int p = std::stoi(port);
  if (p < 1 || p > 65535) return std::nullopt;
  return std::pair{addr, p};
}

// The options, before the plan is read or anything is launched.
Diagnostics check_replay_options(const ReplayOpts& o) {
  Diagnostics ds;
  if (!(o.timeout_s >= kMinTimeoutS && o.timeout_s <= kMaxTimeoutS))
    ds.push_back(option_error("--timeout",
                              fmt::format("{} is outside [{}, {}] seconds", o.timeout_s,
                                          kMinTimeoutS, kMaxTimeoutS),
                              "the seconds a rank waits for a peer before the group is stopped; "
                              "default 60"));
  if (!(o.lr >= 0 && o.lr <= kMaxLr))
    ds.push_back(option_error("--lr",
                              fmt::format("{} is outside [0, {}]", o.lr, kMaxLr),
                              "the learning rate of the replay's optimizer; default 1e-3"));
  if (o.threads < 1 || o.threads > kMaxThreads)
    ds.push_back(option_error("--threads",
                              fmt::format("{} is outside [1, {}]", o.threads, kMaxThreads),
                              "intra-op threads per rank; each rank is one process, so the "
                              "host runs ranks x threads"));
  if (!o.master.empty() && !parse_master(o.master))
    ds.push_back(option_error("--master",
                              fmt::format("'{}' is not ADDR:PORT with a port from 1 to 65535",
                                          o.master),
                              "e.g. --master 10.0.0.1:29500"));
  if (!o.master.empty() && o.rank < 0 && !std::getenv("RANK"))
    ds.push_back(option_error("--master",
                              "only used with --rank and --world-size (or $RANK)",
                              "a replay on this host picks a free port itself: drop --master"));
  return ds;
}

// Rank 0 hosts the rendezvous store on the master's port on every interface: a port another
// process holds made LibTorch's store fail after the plan was built (exit 1).
std::optional<Diagnostic> port_taken(int port) {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  const int fd4 = fd < 0 ? ::socket(AF_INET, SOCK_STREAM, 0) : -1;
  int rc = 0, err = 0;
  const int one = 1;
  if (fd >= 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    err = errno;
    ::close(fd);
  } else if (fd4 >= 0) {
    ::setsockopt(fd4, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd4, reinterpret_cast<sockaddr*>(&a), sizeof a);
    err = errno;
    ::close(fd4);
  }
  if (rc == 0 || (err != EADDRINUSE && err != EACCES)) return std::nullopt;
  return option_error("--master",
                      fmt::format("port {} {}: rank 0 cannot host the rendezvous store there", port,
                                  err == EADDRINUSE ? "is in use on this host"
                                                    : "needs privileges to listen on"),
                      "choose a free port above 1023 (e.g. 29500), the same for every rank");
}

void warn_kernel_fallbacks(const compiler::CompiledPlan& cp, const backend::ReplayOptions& ro) {
  std::fputs(backend::kernel_fallback_warning(backend::kernel_uses(cp, ro.kernels)).c_str(), stderr);
}

int run_replay(const ReplayOpts& o) {
  if (auto ds = check_replay_options(o); !ds.empty()) return report(ds);
  if (auto ok = check_output(o.trace, {o.plan}); !ok) return report(ok.error());
  auto s = sim::Session::open(o.plan);
  if (!s) return report(s.error());
  const compiler::CompiledPlan& cp = s->compiled();
  backend::ReplayOptions ro;
  ro.iterations = o.iterations;
  ro.warmup = o.warmup;
  ro.timeout_ms = static_cast<int64_t>(o.timeout_s * 1000);
  ro.device = o.device == "cpu" ? backend::DeviceKind::kCpu
              : o.device == "cuda" ? backend::DeviceKind::kCuda
                                   : backend::DeviceKind::kAuto;
  if (ro.device == backend::DeviceKind::kCuda && !backend::has_cuda_build())
    return diag_exit("--device cuda: this build of stretto has no CUDA/NCCL backend",
                     "Debian's LibTorch is CPU-only; build against a CUDA LibTorch (scripts/gpu_check.sh)");
  if (ro.device == backend::DeviceKind::kCuda && !backend::cuda_available())
    return diag_exit("--device cuda: no CUDA device is available", "use --device cpu");
  const bool on_gpu = ro.device == backend::DeviceKind::kCuda ||
                      (ro.device == backend::DeviceKind::kAuto && backend::cuda_available());
  if (on_gpu && o.rank < 0 && !std::getenv("RANK") && cp.num_devices > backend::cuda_device_count())
    return diag_exit(fmt::format("the plan has {} devices but this host has {} GPUs (NCCL needs one "
                                 "GPU per rank)",
                                 cp.num_devices, backend::cuda_device_count()),
                     "use --device cpu, or a plan with at most that many devices");
  ro.optimizer = o.optimizer == "adam"   ? backend::Optimizer::kAdam
                 : o.optimizer == "none" ? backend::Optimizer::kNone
                                         : backend::Optimizer::kSgd;
  ro.lr = o.lr;
  ro.seed = o.seed;
  ro.check = o.check;
  ro.max_procs = o.max_procs;
  ro.threads = o.threads;
  ro.recompute_full = o.recompute;
  ro.kernels = o.kernels == "reference" ? backend::Kernels::kReference : backend::Kernels::kFused;
  ro.cuda_graphs = o.cuda_graphs;
  ro.fault_rank = o.fault_rank;
  ro.fault_op = o.fault_op;
  ro.fault_kind = o.fault_kind;
  if (auto d = backend::check_supported(cp, ro); !d.empty()) {
    // The backend names JSON pointers; the plan's text gives them a line and column.
    if (auto src = plan::JsonSource::load(o.plan))
      for (Diagnostic& x : d) {
        if (x.loc.known() || x.loc.json_pointer.empty()) continue;
        const SourceLoc at = src->loc(x.loc.json_pointer);
        if (!at.known()) continue;
        x.loc.line = at.line;
        x.loc.col = at.col;
        x.source_line = src->line_window(at.line, x.caret_col = at.col);
      }
    return report(d);
  }

  // Rank mode: explicit flags, or the variables torchrun and srun set.
  backend::RankSpec spec;
  int rank = o.rank, world = o.world_size;
  std::string master = o.master;
  if (rank < 0 && std::getenv("RANK")) rank = std::atoi(std::getenv("RANK"));
  if (world < 0 && std::getenv("WORLD_SIZE")) world = std::atoi(std::getenv("WORLD_SIZE"));
  if (master.empty() && std::getenv("MASTER_ADDR"))
    master = fmt::format("{}:{}", std::getenv("MASTER_ADDR"),
                         std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "29500");
  const bool child = std::getenv("STRETTO_REPLAY_STORE_EXTERNAL") != nullptr;
  backend::ReplayResult result;
  if (rank >= 0) {
    if (world != cp.num_devices)
      return diag_exit(fmt::format("the plan has {} devices but the world size is {}",
                                   cp.num_devices, world),
                       "run one process per device of the plan");
    if (rank >= world) return diag_exit(fmt::format("rank {} is out of range (world size {})", rank, world));
    spec.rank = rank;
    spec.world_size = world;
    const auto where = master.empty() ? std::optional(std::pair<std::string, int>("127.0.0.1", 29500))
                                      : parse_master(master);
    if (!where)  // $MASTER_ADDR:$MASTER_PORT (the option itself was checked above)
      return report({option_error("MASTER_PORT",
                                  fmt::format("'{}' is not ADDR:PORT with a port from 1 to 65535",
                                              master),
                                  "set MASTER_ADDR and MASTER_PORT as torchrun does, or pass "
                                  "--master ADDR:PORT")});
    spec.master_addr = where->first;
    spec.master_port = where->second;
    spec.store_is_external = child;
    if (rank == 0 && !child)
      if (auto taken = port_taken(spec.master_port)) return report({*taken});
    // Once, from the process that reports, as the run starts: op families without a fused kernel.
    if (rank == 0 && !child) warn_kernel_fallbacks(cp, ro);
    auto r = backend::run_rank(cp, spec, ro);
    if (!r) {
      std::fputs(render_all(r.error()).c_str(), stderr);
      std::fflush(stderr);
      // A failed group's c10d objects can block in their destructors: leave at once.
      ::_exit(1);
    }
    if (child || rank != 0) {
      std::fflush(stdout);
      ::_exit(0);
    }
    result = std::move(*r);
  } else {
    backend::LaunchOptions lo;
    lo.exe = self_exe();
    lo.quiet = !isatty(STDERR_FILENO);
    lo.args = {"replay",
               o.plan,
               "--iterations",
               std::to_string(o.iterations),
               "--warmup",
               std::to_string(o.warmup),
               "--timeout",
               fmt::format("{}", o.timeout_s),
               "--device",
               o.device,
               "--optimizer",
               o.optimizer,
               "--lr",
               fmt::format("{}", o.lr),
               "--seed",
               std::to_string(o.seed),
               "--threads",
               std::to_string(o.threads),
               "--max-procs",
               std::to_string(o.max_procs),
               "--kernels",
               o.kernels};
    if (o.check) lo.args.push_back("--check");
    if (o.recompute) lo.args.push_back("--recompute");
    if (o.cuda_graphs) lo.args.push_back("--cuda-graphs");
    if (o.fault_rank >= 0)
      for (std::string a : {std::string("--fault-rank"), std::to_string(o.fault_rank),
                            std::string("--fault-op"), std::to_string(o.fault_op),
                            std::string("--fault-kind"), o.fault_kind})
        lo.args.push_back(a);
    warn_kernel_fallbacks(cp, ro);
    auto r = backend::launch_local(cp, ro, lo);
    if (!r) {
      std::fputs(render_all(r.error()).c_str(), stderr);
      return 1;
    }
    result = std::move(*r);
  }
  std::optional<sim::Result> pred;
  if (o.compare) {
    auto p = s->simulate();
    if (p) pred = std::move(*p);
  }
  const sim::Result* pp = pred ? &*pred : nullptr;
  // Where the prediction is printed: is it in the style of the kernels that ran?
  const auto style = pp ? backend::kernel_style_check(
                                 cp, result.backend.find("cuda") != std::string::npos, ro.kernels)
                        : std::nullopt;
  if (style && !style->matches)
    std::fprintf(stderr, "warning: %s: %s\n  hint: %s\n", o.plan.c_str(), style->message.c_str(),
                 style->hint.c_str());
  if (!o.trace.empty() && !write_output(o.trace, backend::chrome_trace(cp, result))) return 2;
  const std::string f = o.format.empty() ? (stdout_is_tty() ? "table" : "json") : o.format;
  std::string text;
  if (f == "json") {
    plan::Json j = backend::result_json(cp, result, pp);
    if (style) {
      j["kernel_style"] = backend::kernel_style_json(*style);
      j["kernel_style_mismatch"] = !style->matches;
    }
    text = j.dump(2) + "\n";
  } else {
    text = backend::result_table(cp, result, pp);
    if (style && !style->matches)
      text += fmt::format("\nwarning: kernel style: {}\n  hint: {}\n", style->message, style->hint);
  }
  if (f != "json" && !o.trace.empty())
    text += fmt::format("\ntrace written to {} (open it in https://ui.perfetto.dev)\n", o.trace);
  if (!write_output("", text)) return 2;
  return result.check && !result.check->passed ? 1 : 0;
}

}  // namespace

void add_replay_command(CLI::App& app, Commands& out) {
  auto o = std::make_shared<ReplayOpts>();
  auto* cmd = app.add_subcommand("replay", kReplaySummary);
  cmd->add_option("PLAN", o->plan, "Plan file (JSON)")->required();
  cmd->add_option("--iterations", o->iterations, "Measured steps (default 5)")->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o->warmup, "Steps run first and not measured (default 1)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace of the last measured step");
  cmd->add_option("--format", o->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_flag("--check", o->check,
                "Compare every gradient after one step with a single-process reference");
  cmd->add_option("--timeout", o->timeout_s,
                  "Seconds a rank waits for a peer before the group is stopped (default 60; 0.1 to 86400)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-procs", o->max_procs,
                  "Refuse plans needing more processes on this host (default 64; 0: no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", o->device, "auto (CUDA when available), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--optimizer", o->optimizer,
                  "sgd (default: SGD with momentum 0.9, as the plan's \"sgd\" is priced), adam or none")
      ->check(CLI::IsMember({"sgd", "adam", "none"}));
  cmd->add_option("--lr", o->lr, "Learning rate (default 1e-3; 0 to 10)");
  cmd->add_option("--seed", o->seed, "Seed of parameters and synthetic data (default 1234)");
  cmd->add_option("--threads", o->threads, "Intra-op (and BLAS) threads per rank (default 1; at most 1024)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kernels", o->kernels,
                  "fused (default: the fused kernels ATen offers) or reference (explicit formulas)")
      ->check(CLI::IsMember({"fused", "reference"}));
  cmd->add_flag("--cuda-graphs", o->cuda_graphs,
                "CUDA only: capture the one device's step once, replay it per measured step");
  cmd->add_flag("--recompute", o->recompute,
                "Full activation recomputation: every backward reruns its forward first");
  cmd->add_flag("--compare-with-simulation,!--no-compare", o->compare,
                "Print the simulator's prediction next to the measurement (default on)");
  cmd->add_option("--rank", o->rank, "Run as this rank of a multi-host group (default: $RANK)");
  cmd->add_option("--world-size", o->world_size, "Group size (default: $WORLD_SIZE)");
  cmd->add_option("--master", o->master,
                  "Rendezvous ADDR:PORT, hosted by rank 0 (default: $MASTER_ADDR:$MASTER_PORT)");
  cmd->add_option("--fault-rank", o->fault_rank)->group("");
  cmd->add_option("--fault-op", o->fault_op)->group("");
  cmd->add_option("--fault-kind", o->fault_kind)->group("");
  out.push_back({cmd, [o] { return run_replay(*o); }});
}

}  // namespace stretto::cli
