// The fields of `stretto simulate --format json` (see metrics_json.h), as a Json object.
#include "stretto/sim/metrics_json.h"

#include <string>

#include "stretto/sim/coverage.h"
#include "stretto/sim/critical_path.h"
#include "stretto/sim/session.h"

namespace stretto::sim {

namespace {

// metrics_json.h's writer over a Json object.
struct JsonFields {
  nlohmann::json& j;
  void number(std::string_view key, double v) { j[std::string(key)] = v; }
  template <typename Int>
  void integer(std::string_view key, Int v) {
    j[std::string(key)] = v;
  }
  void boolean(std::string_view key, bool v) { j[std::string(key)] = v; }
  void string(std::string_view key, std::string_view v) { j[std::string(key)] = std::string(v); }
  void strings(std::string_view key, const std::vector<std::string>& v) { j[std::string(key)] = v; }
  template <typename F>
  void object(std::string_view key, F&& f) {
    JsonFields child{j[std::string(key)] = nlohmann::json::object()};
    f(child);
  }
};

}  // namespace

nlohmann::json metrics_json(const compiler::CompiledPlan& cp, const Result& r,
                            const PipelineMetrics& pm) {
  nlohmann::json j = nlohmann::json::object();
  JsonFields top{j};
  bool over = false;
  nlohmann::json devs = nlohmann::json::array();
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const DeviceMetrics& d = r.devices[i];
    over = over || d.over_capacity;
    JsonFields e{devs.emplace_back(nlohmann::json::object())};
    device_fields(e, d, pm.devices[i], d.over_capacity);
  }
  step_fields(top, cp, r, pm, over);
  j["devices"] = std::move(devs);
  return j;
}

nlohmann::json simulate_json(const compiler::CompiledPlan& cp, const Result& r,
                             const PipelineMetrics& pm, const std::vector<CriticalStep>* path,
                             bool full_path) {
  nlohmann::json j = metrics_json(cp, r, pm);
  if (const auto coverage = profiled_coverage(cp)) j["table_coverage"] = coverage_json(*coverage);
  if (path) j.update(critical_path_json(cp, r, *path, full_path));
  return j;
}

}  // namespace stretto::sim
