// The fixed cost model (DESIGN §2): per-pass constants for analytic checks of schedules.

#include <algorithm>

#include "models.h"

namespace stretto::cost {

using plan::Pass;

namespace {

// Node k of n of a region pass gets C*(k+1)/n - C*k/n, so the n nodes sum to exactly C.
// Computed as q*(k+1) + r*(k+1)/n with C = q*n + r, which cannot overflow for any C < 2^63.
int64_t share(int64_t c, int k, int n) {
  if (n <= 1) return c;
  k = std::clamp(k, 0, n - 1);
  const int64_t q = c / n, r = c % n;
  auto upto = [&](int64_t j) { return q * j + r * j / n; };  // floor(C*j/n)
  return upto(k + 1) - upto(k);
}

class FixedModel final : public CostModel {
 public:
  explicit FixedModel(const plan::CostModelSpec& s)
      : f_(s.f_ns), b_(s.b_ns), bi_(s.bi_ns), bw_(s.bw_ns), comm_(s.comm_ns) {}

  ComputeCost compute(const ComputeQuery& q) const override {
    int64_t c = 0;
    switch (q.pass) {
      case Pass::kF:
        c = f_;
        break;
      case Pass::kB:
        c = b_;
        break;
      case Pass::kBI:
        c = bi_;
        break;
      case Pass::kBW:
        c = bw_;
        break;
      case Pass::kNone:
        c = 0;
        break;
    }
    return {share(std::max<int64_t>(c, 0), q.region_k, q.region_n), false};
  }

  CommCost comm(const CommQuery&) const override {
    CommCost c;
    c.latency_ns = std::max<int64_t>(comm_, 0);
    c.time_ns = c.latency_ns;  // zero wire bytes: the transfer is pure latency
    c.algo = "fixed";
    return c;
  }

  Interference interference() const override { return {}; }
  int64_t dispatch_ns() const override { return 0; }
  std::string_view name() const override { return "fixed"; }

 private:
  int64_t f_, b_, bi_, bw_, comm_;
};

}  // namespace

namespace detail {

std::unique_ptr<CostModel> make_fixed_model(const plan::CostModelSpec& spec) {
  return std::make_unique<FixedModel>(spec);
}

}  // namespace detail

}  // namespace stretto::cost
