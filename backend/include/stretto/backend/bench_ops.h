#pragma once
// `stretto bench-ops`: every distinct compute op of a plan timed in isolation, on the replay's
// own model code (TorchModel, the same forward and autograd backward `replay` runs), so the
// replay's per-op time can be set next to the op alone and next to the cost model's price.
//
// Ops are grouped by kind and shape (the model op's kind, its GEMM shape or HBM bytes and its
// inputs' shapes): the 32 layers' QKV GEMMs of a plan are one row. Each row runs as on one
// device without tensor or expert parallelism (tp = ep = 1: the full op), inputs synthetic of
// the producers' output shapes (a router's real gates for the experts). Forward and full
// backward (BI + BW) are timed separately: `warmup` untimed runs, then `iterations` timed ones;
// each row reports the median, minimum and maximum. On CUDA every timed region ends in a device
// synchronisation. Torch-free header.

#include <cstdint>
#include <string>
#include <vector>

#include "stretto/backend/replay.h"
#include "stretto/compiler/compiler.h"

namespace stretto::backend {

struct BenchOpsOptions {
  int iterations = 10;  ///< timed runs per op and direction
  int warmup = 2;       ///< untimed runs first
  DeviceKind device = DeviceKind::kAuto;
  uint64_t seed = 1234;
  int threads = 1;  ///< intra-op threads (as ReplayOptions::threads)
  Kernels kernels = Kernels::kFused;  ///< as ReplayOptions::kernels
  /// CUDA only: also time each op's forward and full backward captured once in a CUDA graph
  /// and replayed (launch overhead removed); an op that cannot be captured says why.
  bool cuda_graphs = false;
};

/// Median, minimum and maximum of the timed runs, ns.
struct BenchTiming {
  int64_t median_ns = 0, min_ns = 0, max_ns = 0;
};

/// One distinct op (kind and shape).
struct BenchOp {
  std::string kind;        ///< op_kind_name(): "qkv", "attention", ...
  std::string name;        ///< the first model op of this kind and shape ("layer0.attn.qkv")
  uint32_t op = 0;         ///< its index in CompiledPlan::model.ops
  int instances = 0;       ///< model ops of this kind and shape in the plan
  std::vector<uint32_t> model_ops;  ///< their indices (the first is `op`)
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<int64_t> output_shape;
  BenchTiming forward, backward;  ///< backward: the full B (input and weight gradients)
  /// False when the backward launches no kernel: it writes no parameter gradient and every
  /// input gradient is the output gradient itself (a residual add without bias or dropout
  /// passes it through). Its time is then autograd's host bookkeeping alone; --cuda-graphs does
  /// not capture it (the graph would be empty) and reports a graph time of zero.
  bool backward_kernel = true;
  /// Proof that the timed backward ran: the op's parameter tensors, and its inputs that take
  /// a gradient, and how many of each hold a non-zero gradient after the timed runs.
  int params = 0, params_with_gradient = 0;
  int grad_inputs = 0, inputs_with_gradient = 0;
  /// --cuda-graphs: the same forward and backward as one CUDA graph each, replayed.
  bool graphed = false;
  BenchTiming graph_forward, graph_backward;
  std::string graph_error;  ///< why the op could not be captured (empty: captured or not asked)
};

struct BenchOpsResult {
  std::string device;  ///< "cpu", "cuda:0"
  std::string dtype;   ///< LibTorch's name of the tensors' dtype ("Float"; the plan's on CUDA)
  int iterations = 0, warmup = 0;
  std::vector<KernelUse> kernel_families;  ///< what each op family ran (kernel_uses())
  std::vector<BenchOp> ops;  ///< in the order of their first model op
};

/// Times the plan's distinct ops. Throws std::runtime_error when the device is unavailable.
BenchOpsResult bench_ops(const compiler::CompiledPlan& cp, const BenchOpsOptions& opt);

}  // namespace stretto::backend
