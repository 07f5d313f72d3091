// `bench-ops`: the plan's distinct ops timed in isolation (bench_ops.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <stdexcept>

#include "stretto/backend/bench_ops.h"
#include "torch_model.h"

#ifdef STRETTO_BACKEND_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stretto::backend {

using compiler::OpKind;
using plan::DType;

namespace {

using detail::OpCtx;
using detail::OpPlacement;
using detail::Param;
using detail::TorchModel;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void sync(bool cuda) {
#ifdef STRETTO_BACKEND_CUDA
  if (cuda) c10::cuda::device_synchronize();
#else
  (void)cuda;
#endif
}

BenchTiming summarise(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return {v[(v.size() - 1) / 2], v.front(), v.back()};
}

// `warmup` untimed then `iterations` timed runs of forward, an untimed step, backward, an
// untimed clean-up; each timed region ends in a device synchronisation. Returns the forward
// and backward summaries.
std::pair<BenchTiming, BenchTiming> time_runs(const BenchOpsOptions& opt, bool cuda,
                                              const std::function<void()>& forward,
                                              const std::function<void()>& between,
                                              const std::function<void()>& backward,
                                              const std::function<void()>& after) {
  std::vector<int64_t> f, b;
  for (int it = 0; it < opt.warmup + opt.iterations; ++it) {
    sync(cuda);
    const int64_t t0 = now_ns();
    forward();
    sync(cuda);
    const int64_t t1 = now_ns();
    between();
    sync(cuda);
    const int64_t t2 = now_ns();
    backward();
    sync(cuda);
    const int64_t t3 = now_ns();
    after();
    if (it >= opt.warmup) {
      f.push_back(t1 - t0);
      b.push_back(t3 - t2);
    }
  }
  return {summarise(f), summarise(b)};
}

bool any_nonzero(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && t.ne(0).any().item<bool>();
}

// Whether a full backward wrote anything: a parameter gradient, or an input gradient that is
// not the output gradient `dy` itself (or a view of it). A residual add without bias or
// dropout passes dy through to both inputs: its backward launches no kernel, and a CUDA graph
// captured of it would be empty.
bool backward_writes(const std::vector<at::Tensor>& dx, const at::Tensor& dy,
                     const std::vector<Param>& params) {
  if (!params.empty()) return true;
  for (const at::Tensor& g : dx)
    if (g.defined() && !g.is_alias_of(dy)) return true;
  return false;
}

#ifdef STRETTO_BACKEND_CUDA
// One op's forward and full backward, each captured once in a CUDA graph on a side stream
// (after eager warm-up runs there, as capture requires) and then replayed `iterations` times.
// Inputs, parameters, the output gradient and the saved activations are the graphs' static
// buffers: a replay rewrites them in place. Throws where the op cannot be captured (a host
// synchronisation inside the op: dropless MoE routing's token counts).
void time_graphs(const TorchModel& model, BenchOp& b, std::vector<at::Tensor>& inputs,
                 std::vector<Param>& params, const detail::TpAllReduce& no_reduce,
                 const BenchOpsOptions& opt) {
  const OpPlacement pl;
  const OpKind kind = model.plan().model.ops[b.op].kind;
  const auto& moe = model.plan().plan.model.moe;
  if (kind == OpKind::kExperts && (!moe || moe->capacity_factor <= 0))
    throw std::runtime_error(
        "not capturable: dropless expert routing reads its per-expert token counts on the host "
        "(give moe.capacity_factor)");
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(side);
  at::Tensor dy;
  for (int w = 0; w < 3; ++w) {
    OpCtx c = model.forward(b.op, inputs, params, pl, 0, 0, 1.0, no_reduce);
    if (!dy.defined()) dy = c.out.dim() == 0 ? at::ones_like(c.out) : at::randn_like(c.out);
    if (c.out.requires_grad()) detail::backward_inputs(c, dy, /*full=*/true, params);
  }
  c10::cuda::device_synchronize();
  at::cuda::CUDAGraph fwd, bwd;
  // A failed capture is ended before the error propagates, so the side stream is usable again.
  auto capture = [](at::cuda::CUDAGraph& g, const std::function<void()>& body) {
    g.capture_begin();
    try {
      body();
    } catch (...) {
      try {
        g.capture_end();
      } catch (...) {
      }
      throw;
    }
    g.capture_end();
  };
  OpCtx c;
  capture(fwd, [&] { c = model.forward(b.op, inputs, params, pl, 0, 0, 1.0, no_reduce); });
  // A backward that launches no kernel is not captured (an empty graph; LibTorch warns): its
  // graph time is zero.
  const bool has_backward = c.out.requires_grad() && b.backward_kernel;
  if (has_backward)
    capture(bwd, [&] { detail::backward_inputs(c, dy, /*full=*/true, params); });
  std::tie(b.graph_forward, b.graph_backward) = time_runs(
      opt, /*cuda=*/true, [&] { fwd.replay(); }, [] {},
      [&] {
        if (has_backward) bwd.replay();
      },
      [] {});
  // What time_runs measured of no replay at all is its own event pair (about 2.6 us on the
  // H200): the backward's graph time is zero, as the comment above says.
  if (!has_backward) b.graph_backward = BenchTiming{};
  b.graphed = true;
}
#endif

}  // namespace

BenchOpsResult bench_ops(const compiler::CompiledPlan& cp, const BenchOpsOptions& opt_in) {
  BenchOpsOptions opt = opt_in;
  if (opt.device == DeviceKind::kAuto) opt.device = cuda_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (opt.device == DeviceKind::kCuda && !cuda_available())
    throw std::runtime_error("bench-ops: --device cuda, but LibTorch sees no CUDA device");
  if (opt.iterations < 1) throw std::runtime_error("bench-ops: iterations must be at least 1");
  if (opt.cuda_graphs && opt.device != DeviceKind::kCuda)
    throw std::runtime_error("bench-ops: --cuda-graphs needs --device cuda (CUDA graphs are CUDA-only)");
  at::set_num_threads(std::max(1, opt.threads));
  const bool cuda = opt.device == DeviceKind::kCuda;
  at::TensorOptions to = at::TensorOptions().dtype(at::kFloat);
  if (cuda) {
    const DType dt = cp.model.dtype;
    to = to.device(at::Device(at::kCUDA, 0))
             .dtype(dt == DType::kBF16 ? at::kBFloat16 : dt == DType::kFP16 ? at::kHalf : at::kFloat);
  }
  TorchModel model(cp, opt.seed, to, opt.kernels);
  model.prepare(0, 0);  // token ids and labels on the device before any timed run
  const auto& ops = cp.model.ops;
  const OpPlacement pl;  // tp = ep = 1: the full op
  const detail::TpAllReduce no_reduce = [](at::Tensor&, bool) {};

  BenchOpsResult res;
  res.device = cuda ? "cuda:0" : "cpu";
  res.kernel_families = kernel_uses(cp, opt.kernels);
  res.dtype = std::string(c10::toString(c10::typeMetaToScalarType(to.dtype())));
  res.iterations = opt.iterations;
  res.warmup = opt.warmup;

  // Distinct ops: kind, GEMM shape, bytes and input shapes.
  std::map<std::string, size_t> seen;
  for (uint32_t o = 0; o < ops.size(); ++o) {
    const compiler::ModelOp& op = ops[o];
    if (op.kind == OpKind::kOptimizer) continue;
    std::vector<std::vector<int64_t>> in_shapes;
    for (uint32_t p : op.inputs) in_shapes.push_back(model.output_shape(p));
    std::string key =
        fmt::format("{} {} {} {} {} {} {} {} out {}", compiler::op_kind_name(op.kind), op.gemm.m,
                    op.gemm.n, op.gemm.k, op.gemm.batch, op.fwd_bytes, op.bi_bytes + op.bw_bytes,
                    model.is_last(o), fmt::join(model.output_shape(o), "x"));
    for (const auto& s : in_shapes) key += fmt::format(" in {}", fmt::join(s, "x"));
    if (auto it = seen.find(key); it != seen.end()) {
      ++res.ops[it->second].instances;
      res.ops[it->second].model_ops.push_back(o);
      continue;
    }
    seen.emplace(key, res.ops.size());
    BenchOp b;
    b.kind = std::string(compiler::op_kind_name(op.kind));
    b.name = op.name;
    b.op = o;
    b.instances = 1;
    b.model_ops = {o};
    b.input_shapes = in_shapes;
    b.output_shape = model.output_shape(o);
    res.ops.push_back(std::move(b));
  }

  for (BenchOp& b : res.ops) {
    const compiler::ModelOp& op = ops[b.op];
    std::vector<Param> params = model.make_params(b.op, pl);
    // Inputs: synthetic values of the producers' shapes; a router's output carries real gates.
    std::vector<at::Tensor> inputs;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const uint32_t p = op.inputs[i];
      at::Tensor v;
      if (ops[p].kind == OpKind::kRouter) {
        std::vector<Param> rp = model.make_params(p, pl);
        std::vector<at::Tensor> rin;
        for (uint32_t q : ops[p].inputs) rin.push_back(at::randn(model.output_shape(q), to));
        at::NoGradGuard ng;
        v = model.forward(p, rin, rp, pl, 0, 0, 1.0, no_reduce).out.detach();
      } else {
        v = model.in_output_layout(p, at::randn(b.input_shapes[i], to));  // as the producer lays it out
      }
      v.set_requires_grad(true);
      inputs.push_back(v);
    }
    std::vector<at::Tensor> dx;
    OpCtx c;
    at::Tensor dy;
    std::tie(b.forward, b.backward) = time_runs(
        opt, cuda, [&] { c = model.forward(b.op, inputs, params, pl, 0, 0, 1.0, no_reduce); },
        [&] { dy = c.out.dim() == 0 ? at::ones_like(c.out) : at::randn_like(c.out); },
        [&] {
          if (c.out.requires_grad()) dx = detail::backward_inputs(c, dy, /*full=*/true, params);
          b.backward_kernel = c.out.requires_grad() && backward_writes(dx, dy, params);
        },
        [&] {  // the pass's tensors are freed outside the timed regions
          c = OpCtx{};
          dy = at::Tensor();
        });
    // The backward ran: every parameter accumulated a gradient, every input received one.
    for (const Param& p : params) {
      ++b.params;
      b.params_with_gradient += any_nonzero(p.grad);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      ++b.grad_inputs;
      b.inputs_with_gradient += i < dx.size() && any_nonzero(dx[i]);
    }
#ifdef STRETTO_BACKEND_CUDA
    if (opt.cuda_graphs) {
      try {
        time_graphs(model, b, inputs, params, no_reduce, opt);
      } catch (const std::exception& e) {
        b.graph_error = e.what();
        const size_t nl = b.graph_error.find('\n');
        if (nl != std::string::npos) b.graph_error.resize(nl);
        c10::cuda::device_synchronize();
      }
    }
#endif
  }
  return res;
}

}  // namespace stretto::backend
