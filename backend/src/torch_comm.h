#pragma once
// c10d process groups for the replay (private). Holds concrete process-group types (LibTorch
// 1.13's ProcessGroupGloo derives from ProcessGroup, 2.x's from c10d::Backend: never upcast).
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// A CUDA wheel may define USE_C10D_GLOO without shipping gloo's headers: then this build is
// CUDA/NCCL-only.
#if defined(USE_C10D_GLOO) && __has_include(<gloo/algorithm.h>)
#define STRETTO_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef STRETTO_BACKEND_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <string>
#include <vector>

namespace stretto::backend::detail {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

/// Store values are bounded (torch 2.x's libuv TCPStore server refuses a payload over 8 MiB):
/// a value goes as numbered chunks of at most 4 MiB under `key/0..n-1`, its chunk count under
/// `key`. `store_take` waits for the key like `Store::get`.
void store_put(c10d::Store& s, const std::string& key, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> store_take(c10d::Store& s, const std::string& key);

/// One process group over `members` (sorted device ids); this device's rank is its position.
class Group {
 public:
  Group(c10::intrusive_ptr<c10d::Store> store, const std::string& prefix, int rank, int size,
        bool cuda, std::chrono::milliseconds timeout);
  int rank() const { return rank_; }
  int size() const { return size_; }
  WorkPtr allreduce(at::Tensor& t, bool max = false);
  WorkPtr allgather(std::vector<at::Tensor>& out, at::Tensor& in);
  WorkPtr alltoall(at::Tensor& out, at::Tensor& in);
  WorkPtr send(at::Tensor& t, int dst, int tag);
  WorkPtr recv(at::Tensor& t, int src, int tag);
  WorkPtr barrier();
  /// Posts a batch of p2p ops as one unit (NCCL coalescing; Gloo posts them one by one, which
  /// is enough because every op is posted before any is waited for).
  void start_batch();
  void end_batch(std::vector<WorkPtr>& works);

 private:
  int rank_ = 0, size_ = 1;
  bool cuda_ = false;
#ifdef STRETTO_HAVE_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
#endif
#ifdef STRETTO_BACKEND_CUDA
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;
#endif
};

}  // namespace stretto::backend::detail
