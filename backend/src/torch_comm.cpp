// c10d process groups (see torch_comm.h).
#include "torch_comm.h"

#include <torch/version.h>

#include <algorithm>
#include <stdexcept>

namespace stretto::backend::detail {

Group::Group(c10::intrusive_ptr<c10d::Store> store, const std::string& prefix, int rank, int size,
             bool cuda, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), cuda_(cuda) {
  auto pstore = c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
  if (cuda) {
#ifdef STRETTO_BACKEND_CUDA
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(pstore, rank, size, opts);
    return;
#else
    throw std::runtime_error("this build of the backend has no CUDA/NCCL");
#endif
  }
#ifdef STRETTO_HAVE_GLOO
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  opts->threads = 1;
  gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(pstore, rank, size, opts);
#else
  throw std::runtime_error("this LibTorch has no Gloo: CPU replay is not available");
#endif
}

// One dispatcher for both kinds: the calls are spelled the same on ProcessGroupGloo and
// ProcessGroupNCCL in 1.13 and 2.x.
#if defined(STRETTO_HAVE_GLOO) && defined(STRETTO_BACKEND_CUDA)
#define STRETTO_PG(call) (cuda_ ? nccl_->call : gloo_->call)
#elif defined(STRETTO_HAVE_GLOO)
#define STRETTO_PG(call) (gloo_->call)
#elif defined(STRETTO_BACKEND_CUDA)
#define STRETTO_PG(call) (nccl_->call)
#endif

WorkPtr Group::allreduce(at::Tensor& t, bool max) {
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  return STRETTO_PG(allreduce(v, o));
}

WorkPtr Group::allgather(std::vector<at::Tensor>& out, at::Tensor& in) {
  std::vector<std::vector<at::Tensor>> o{out};
  std::vector<at::Tensor> i{in};
  auto w = STRETTO_PG(allgather(o, i));
  // Gloo/NCCL write into the tensors of `o`, which share storage with `out`.
  return w;
}

WorkPtr Group::alltoall(at::Tensor& out, at::Tensor& in) {
  std::vector<int64_t> counts;
  return STRETTO_PG(alltoall_base(out, in, counts, counts));
}

WorkPtr Group::send(at::Tensor& t, int dst, int tag) {
  std::vector<at::Tensor> v{t};
  return STRETTO_PG(send(v, dst, tag));
}

WorkPtr Group::recv(at::Tensor& t, int src, int tag) {
  std::vector<at::Tensor> v{t};
  return STRETTO_PG(recv(v, src, tag));
}

WorkPtr Group::barrier() {
  return STRETTO_PG(barrier());
}

void Group::start_batch() {
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_) nccl_->startCoalescing();
#endif
}

void Group::end_batch(std::vector<WorkPtr>& works) {
#ifdef STRETTO_BACKEND_CUDA
  if (cuda_) {
#if TORCH_VERSION_MAJOR >= 2
    auto w = nccl_->endCoalescing();
    if (w) works.push_back(w);
#else
    nccl_->endCoalescing(works);
#endif
  }
#endif
  (void)works;
}

namespace {
constexpr size_t kStoreChunk = size_t{4} << 20;
}  // namespace

void store_put(c10d::Store& s, const std::string& key, const std::vector<uint8_t>& bytes) {
  const size_t n = (bytes.size() + kStoreChunk - 1) / kStoreChunk;
  for (size_t i = 0; i < n; ++i) {
    const auto b = bytes.begin() + static_cast<std::ptrdiff_t>(i * kStoreChunk);
    const auto e = bytes.begin() + static_cast<std::ptrdiff_t>(std::min(bytes.size(), (i + 1) * kStoreChunk));
    s.set(key + "/" + std::to_string(i), std::vector<uint8_t>(b, e));
  }
  // The count last: a reader that sees it finds every chunk.
  const std::string count = std::to_string(n);
  s.set(key, std::vector<uint8_t>(count.begin(), count.end()));
}

std::vector<uint8_t> store_take(c10d::Store& s, const std::string& key) {
  const auto c = s.get(key);
  const size_t n = std::stoull(std::string(c.begin(), c.end()));
  std::vector<uint8_t> out;
  for (size_t i = 0; i < n; ++i) {
    const auto part = s.get(key + "/" + std::to_string(i));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace stretto::backend::detail
