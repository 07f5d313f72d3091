// `bench-ops`: the plan's distinct ops timed in isolation (bench_ops.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include "stretto/backend/bench_ops.h"
#include "torch_model.h"

#ifdef STRETTO_BACKEND_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace stretto::backend {

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

}  // namespace

BenchOpsResult bench_ops(const CompiledPlan& cp, const BenchOpsOptions& opt_in) {
  BenchOpsOptions opt = opt_in;
  if (opt.device == DeviceKind::kAuto) opt.device = cuda_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (opt.device == DeviceKind::kCuda && !cuda_available())
    throw std::runtime_error("bench-ops: --device cuda, but LibTorch sees no CUDA device");
  if (opt.iterations < 1) throw std::runtime_error("bench-ops: iterations must be at least 1");
  at::set_num_threads(std::max(1, opt.threads));
  const bool cuda = opt.device == DeviceKind::kCuda;
  at::TensorOptions to = at::TensorOptions().dtype(at::kFloat);
  if (cuda) {
    const DType dt = cp.model.dtype;
    to = to.device(at::Device(at::kCUDA, 0))
             .dtype(dt == DType::kBF16 ? at::kBFloat16 : dt == DType::kFP16 ? at::kHalf : at::kFloat);
  }
  TorchModel model(cp, opt.seed, to);
  const auto& ops = cp.model.ops;
  const OpPlacement pl;  // tp = ep = 1: the full op
  const detail::TpAllReduce no_reduce = [](at::Tensor&, bool) {};

  BenchOpsResult res;
  res.device = cuda ? "cuda:0" : "cpu";
  res.dtype = std::string(c10::toString(c10::typeMetaToScalarType(to.dtype())));
  res.iterations = opt.iterations;
  res.warmup = opt.warmup;

  // Distinct ops: kind, GEMM shape, bytes and input shapes.
  std::map<std::string, size_t> seen;
  for (uint32_t o = 0; o < ops.size(); ++o) {
    const ModelOp& op = ops[o];
    if (op.kind == OpKind::kOptimizer) continue;
    std::vector<std::vector<int64_t>> in_shapes;
    for (uint32_t p : op.inputs) in_shapes.push_back(model.output_shape(p));
    std::string key = fmt::format("{} {} {} {} {} {} {} {} out {}", op_kind_name(op.kind), op.gemm.m,
                                  op.gemm.n, op.gemm.k, op.gemm.batch, op.fwd_bytes,
                                  op.bi_bytes + op.bw_bytes, model.is_last(o),
                                  fmt::join(model.output_shape(o), "x"));
    for (const auto& s : in_shapes) key += fmt::format(" in {}", fmt::join(s, "x"));
    if (auto it = seen.find(key); it != seen.end()) {
      ++res.ops[it->second].instances;
      res.ops[it->second].model_ops.push_back(o);
      continue;
    }
    seen.emplace(key, res.ops.size());
    BenchOp b;
    b.kind = std::string(op_kind_name(op.kind));
    b.name = op.name;
    b.op = o;
    b.instances = 1;
    b.model_ops = {o};
    b.input_shapes = in_shapes;
    b.output_shape = model.output_shape(o);
    res.ops.push_back(std::move(b));
  }

  for (BenchOp& b : res.ops) {
    const ModelOp& op = ops[b.op];
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
        v = at::randn(b.input_shapes[i], to);
      }
      v.set_requires_grad(true);
      inputs.push_back(v);
    }
    std::vector<int64_t> fwd, bwd;
    for (int it = 0; it < opt.warmup + opt.iterations; ++it) {
      sync(cuda);
      const int64_t t0 = now_ns();
      OpCtx c = model.forward(b.op, inputs, params, pl, 0, 0, 1.0, no_reduce);
      sync(cuda);
      const int64_t t1 = now_ns();
      at::Tensor dy = c.out.dim() == 0 ? at::ones_like(c.out) : at::randn_like(c.out);
      sync(cuda);
      const int64_t t2 = now_ns();
      if (c.out.requires_grad()) detail::backward_inputs(c, dy, /*full=*/true, params);
      sync(cuda);
      const int64_t t3 = now_ns();
      if (it >= opt.warmup) {
        fwd.push_back(t1 - t0);
        bwd.push_back(t3 - t2);
      }
    }
    b.forward = summarise(fwd);
    b.backward = summarise(bwd);
  }
  return res;
}

}  // namespace stretto::backend
