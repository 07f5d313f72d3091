#pragma once
// Device memory a PyTorch training process holds outside its CUDA caching allocator
// (docs/semantics.md "Memory outside the allocator"): the CUDA context and NCCL's buffers.
// Neither is in torch.cuda.max_memory_reserved(); both are in what nvidia-smi shows.
#include <cstdint>
#include <vector>

#include "stretto/compiler/dag.h"

namespace stretto::sim {

// NCCL's default buffer per connection and protocol (NCCL src/init.cc; the NCCL_BUFFSIZE,
// NCCL_LL_BUFFSIZE and NCCL_LL128_BUFFSIZE environment variables override them):
/// Simple: DEFAULT_BUFFSIZE, 1 << 22 (the NCCL documentation of NCCL_BUFFSIZE: 4 MiB).
inline constexpr int64_t kNcclSimpleBuffSize = int64_t{1} << 22;
/// LL: DEFAULT_LL_BUFFSIZE, NCCL_LL_LINES_PER_THREAD (8) x NCCL_LL_MAX_NTHREADS (512) x
/// NCCL_STEPS (8) x sizeof(union ncclLLFifoLine) (16) = 512 KiB.
inline constexpr int64_t kNcclLlBuffSize = int64_t{8} * 512 * 8 * 16;
/// LL128: DEFAULT_LL128_BUFFSIZE, NCCL_LL128_ELEMS_PER_THREAD (120) x NCCL_LL128_MAX_NTHREADS
/// (640) x NCCL_STEPS (8) x sizeof(uint64_t) (8) = 4,915,200 B.
inline constexpr int64_t kNcclLl128BuffSize = int64_t{120} * 640 * 8 * 8;

struct OutsideAllocator {
  int64_t cuda_context = 0;  // the cluster's cuda_context_MiB
  int64_t nccl = 0;          // NCCL's connection buffers
  int communicators = 0;     // ring communicators this device is a member of
  int peers = 0;             // devices it receives point-to-point from (send/recv, all-to-all)
  int64_t total() const { return cuda_context + nccl; }
};

/// The CUDA context a process holds on a device of `dev`: its cuda_context_MiB (0 on a "cpu"
/// device: Gloo, no CUDA).
int64_t cuda_context_bytes(const plan::DeviceSpec& dev);
/// NCCL's buffers of a device in `communicators` ring communicators that receives
/// point-to-point data from `peers` devices: nccl_channels connections into it per
/// communicator, each with the LL, LL128 and Simple buffers, and per peer, each with the Simple
/// buffer (0 on a "cpu" device). The one formula of outside_allocator and of the sweep
/// estimate (explore/estimate.h).
int64_t nccl_buffer_bytes(const plan::DeviceSpec& dev, int64_t communicators, int64_t peers);

/// Per device of `cp`. A device of kind "cpu" (Gloo, no CUDA) and an idle device hold none.
/// The CUDA context: the cluster's cuda_context_MiB. NCCL's buffers:
/// every distinct group of devices a collective other than all-to-all runs over is one
/// communicator, a ring: nccl_channels connections into this device, each with the LL, LL128
/// and Simple buffers; every device it receives point-to-point data from (a send/recv, or an
/// all-to-all's other members) is nccl_channels connections with the Simple buffer. Only what
/// the step uses (NCCL >= 2.22 connects at first use, NCCL_RUNTIME_CONNECT); tree and NVLS
/// buffers, proxy and host memory are not counted.
std::vector<OutsideAllocator> outside_allocator(const compiler::CompiledPlan& cp);

}  // namespace stretto::sim
