#pragma once
// Profiled cost tables: measured kernel and collective times, interpolated in size.
//
// File format (JSON, one object; `"kind":"profiled","profile":"table.json"` in the plan, the
// path relative to the plan file):
//
//   {
//     "version": 1,                               // required, must be 1
//     "device": "h100-sxm",                       // optional, informational
//     "kernels": [                                // optional
//       // a GEMM-like op, keyed by its FORWARD shape [m,k] x [k,n] (after any TP split):
//       {"op": "mlp_up", "pass": "F", "dtype": "bf16", "m": 4096, "n": 28672, "k": 4096,
//        "batch": 1, "ns": 1012345},
//       // any op keyed by its HBM bytes for the pass (memory-bound ops, or GEMMs without shape):
//       {"op": "norm", "pass": "F", "dtype": "bf16", "bytes": 67108864, "ns": 25000}
//     ],
//     "collectives": [                            // optional
//       {"kind": "all_reduce", "group_size": 8, "nodes": 1, "bytes": 16777216, "ns": 95000}
//     ],
//     "options": {"comm_sm_share": 0.12}          // optional: analytic options measured with
//   }                                             // the table; the plan's own options win
//
//   op     embedding norm qkv attention out_proj mlp_up mlp_act mlp_down router experts
//          shared_experts head loss synthetic
//   pass   F B BI BW            dtype  fp32 bf16 fp16 fp8 (default bf16)
//   kind   send_recv all_reduce reduce_scatter all_gather all_to_all
//   bytes  for collectives: the buffer size per rank, as CommQuery::bytes (cost_model.h)
//   ns     measured duration of the op / collective alone, > 0
//
// Keys and interpolation. A kernel entry with a shape belongs to the series
// (op, pass, dtype, n, k, batch) and is placed at size m (the token dimension, the one that
// changes with microbatch size and routing); an entry with `bytes` belongs to the series
// (op, pass, dtype) and is placed at size bytes. A collective entry belongs to the series
// (kind, group_size, nodes) at size bytes. Within a series, a query size x between two measured
// sizes is interpolated linearly in log(size)-log(time); exactly at a measured size it returns
// the measurement; above the largest size the largest measurement is scaled linearly
// (t = t_max * x / x_max, the bandwidth regime); below the smallest size the smallest
// measurement is kept (t = t_min: small kernels and collectives are latency-bound, so scaling
// them down would predict near-zero times). A query whose series is absent falls back to the
// analytic model. For GEMM-like queries with a shape, the shape series is tried first, then the
// bytes series.
//
// Errors (unreadable file, bad JSON, a missing or mistyped field, an unknown op / pass / dtype /
// kind, a duplicate measurement) are Diagnostics naming the table file and the JSON pointer of
// the offending value (e.g. "/kernels/3/ns"); all of them are collected before failing.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "stretto/costmodel/cost_model.h"

namespace stretto::cost {

/// A series of (size, ns) measurements, sorted by size, sizes distinct.
struct ProfileSeries {
  std::vector<std::pair<double, double>> points;
  /// Interpolated time at `size` (see the header comment). Requires a non-empty series.
  double at(double size) const;
};

/// A parsed table.
struct ProfileTable {
  // (op, pass, dtype, n, k, batch) -> series over m
  using ShapeKey = std::tuple<compiler::OpKind, plan::Pass, plan::DType, int64_t, int64_t, int64_t>;
  // (op, pass, dtype) -> series over bytes
  using BytesKey = std::tuple<compiler::OpKind, plan::Pass, plan::DType>;
  // (kind, group_size, nodes) -> series over bytes
  using CommKey = std::tuple<compiler::CommKind, int, int>;

  std::string file;
  std::string device;
  std::map<ShapeKey, ProfileSeries> shape_kernels;
  std::map<BytesKey, ProfileSeries> bytes_kernels;
  std::map<CommKey, ProfileSeries> collectives;
  /// Optional analytic options measured with the table ("options": {"comm_sm_share": 0.1}),
  /// applied under the plan's own `costmodel` options.
  plan::Json options = plan::Json::object();

  /// Measured or interpolated ns for a compute query; nullopt if its series is absent.
  std::optional<double> kernel_ns(const ComputeQuery& q) const;
  /// Measured or interpolated ns for a communication query; nullopt if its series is absent.
  std::optional<double> comm_ns(const CommQuery& q) const;
};

/// Parses a table from text; `file` names it in diagnostics.
Expected<ProfileTable> parse_profile_table(const std::string& text, const std::string& file);
/// Reads and parses a table file.
Expected<ProfileTable> load_profile_table(const std::string& path);

/// Names used in tables (and accepted when parsing them).
std::string_view profile_op_name(compiler::OpKind k);
std::string_view profile_pass_name(plan::Pass p);  // F, B, BI, BW, none (the optimizer step)
std::string_view profile_comm_name(compiler::CommKind k);
std::string_view profile_dtype_name(plan::DType d);

}  // namespace stretto::cost
