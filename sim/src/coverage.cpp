// Coverage of a plan by a measured cost table (coverage.h).

#include "stretto/sim/coverage.h"

#include <fmt/format.h>

#include <set>

#include "stretto/sim/session.h"

namespace stretto::sim {

using compiler::NodeKind;

double TableCoverage::percent() const {
  const size_t all = ops + collectives;
  return all == 0 ? 100.0
                  : 100.0 * static_cast<double>(ops_measured + collectives_measured) /
                        static_cast<double>(all);
}

TableCoverage table_coverage(const compiler::CompiledPlan& cp, const cost::ProfileTable& table) {
  TableCoverage c;
  CostQueries queries(cp);
  std::set<std::string> ops, comms;
  for (const compiler::Node& nd : cp.dag.nodes) {
    if (nd.kind == NodeKind::kCompute) {
      const cost::ComputeQuery q = queries.compute(nd);
      if (q.flops <= 0 && q.bytes <= 0) continue;  // costs nothing either way
      ++c.ops;
      if (table.kernel_ns(q))
        ++c.ops_measured;
      else
        ops.insert(fmt::format("{} {}", compiler::op_kind_name(q.kind), plan::pass_name(q.pass)));
    } else if (nd.kind == NodeKind::kTransfer || nd.kind == NodeKind::kCollective) {
      const cost::CommQuery q = queries.comm(nd);
      if (q.kind == compiler::CommKind::kNone || q.bytes <= 0) continue;
      ++c.collectives;
      if (table.comm_ns(q))
        ++c.collectives_measured;
      else
        comms.insert(
            fmt::format("{} x{}{}", compiler::comm_kind_name(q.kind), q.group_size,
                        q.nodes_spanned > 1 ? fmt::format(" ({} nodes)", q.nodes_spanned) : ""));
    }
  }
  c.ops_fell_back.assign(ops.begin(), ops.end());
  c.collectives_fell_back.assign(comms.begin(), comms.end());
  return c;
}

std::optional<TableCoverage> profiled_coverage(const compiler::CompiledPlan& cp) {
  const plan::CostModelSpec& cm = cp.plan.costmodel;
  if (cm.kind != plan::CostModelSpec::Kind::kProfiled) return std::nullopt;
  auto t = cost::load_profile_table(cm.profile);
  if (!t) return std::nullopt;
  return table_coverage(cp, *t);
}

plan::Json coverage_json(const TableCoverage& c) {
  return {{"ops", c.ops},
          {"ops_measured", c.ops_measured},
          {"collectives", c.collectives},
          {"collectives_measured", c.collectives_measured},
          {"percent", c.percent()},
          {"ops_fell_back", c.ops_fell_back},
          {"collectives_fell_back", c.collectives_fell_back}};
}

std::string coverage_text(const TableCoverage& c, const std::string& indent) {
  auto list = [](const std::vector<std::string>& v) {
    std::string r;
    for (const auto& x : v) r += (r.empty() ? "" : ", ") + x;
    return r;
  };
  std::string o = fmt::format(
      "{}table covers    {:.1f} %: {} of {} ops, {} of {} collectives and transfers\n", indent,
      c.percent(), c.ops_measured, c.ops, c.collectives_measured, c.collectives);
  if (!c.ops_fell_back.empty())
    o += fmt::format("{}analytic ops    {} (not in the table: fell back)\n", indent,
                     list(c.ops_fell_back));
  if (!c.collectives_fell_back.empty())
    o += fmt::format("{}analytic comm   {} (not in the table: fell back)\n", indent,
                     list(c.collectives_fell_back));
  return o;
}

}  // namespace stretto::sim
