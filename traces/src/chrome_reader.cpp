// Chrome Trace Event reader (see chrome_reader.h).
#include "stretto/traces/chrome_reader.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace stretto::traces {

Expected<ChromeTrace> read_chrome_trace(const std::string& path) {
  auto error = [&](std::string msg, std::string hint) {
    Diagnostic d;
    d.message = std::move(msg);
    d.loc.file = path;
    d.hint = std::move(hint);
    return fail(std::move(d));
  };
  std::ifstream f(path, std::ios::binary);
  if (!f) return error("cannot read the trace '" + path + "'", "check the path");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) return error("the trace is not valid JSON", "a Chrome Trace Event file (JSON) is expected");
  const nlohmann::json* events = nullptr;
  if (j.is_array())
    events = &j;
  else if (j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array())
    events = &j["traceEvents"];
  if (!events) return error("no \"traceEvents\" array in the trace", "a Chrome Trace Event file is expected");
  ChromeTrace t;
  auto num = [](const nlohmann::json& e, const char* k, int64_t def) -> int64_t {
    if (!e.contains(k)) return def;
    const auto& v = e[k];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number()) return static_cast<int64_t>(v.get<double>());
    return def;
  };
  for (const auto& e : *events) {
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) {
      ++t.skipped;
      continue;
    }
    const std::string ph = e["ph"].get<std::string>();
    const int64_t pid = num(e, "pid", 0), tid = num(e, "tid", 0);
    if (ph == "M") {
      const std::string name = e.value("name", "");
      if (e.contains("args") && e["args"].is_object() && e["args"].contains("name") && e["args"]["name"].is_string()) {
        if (name == "process_name") t.process_names[pid] = e["args"]["name"].get<std::string>();
        if (name == "thread_name") t.thread_names[{pid, tid}] = e["args"]["name"].get<std::string>();
      }
      continue;
    }
    if (ph != "X" || !e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) {
      ++t.skipped;
      continue;
    }
    // A region pass's enclosing slice (chrome_trace.h) holds ops; it is not one.
    if (e.contains("cat") && e["cat"] == "pass") continue;
    TraceSlice s;
    s.pid = pid;
    s.tid = tid;
    // Microseconds with nanosecond precision: round to the nearest ns.
    s.start_ns = std::llround(e["ts"].get<double>() * 1000.0);
    s.end_ns = s.start_ns + std::llround(e["dur"].get<double>() * 1000.0);
    s.name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
    s.cat = e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    if (e.contains("args") && e["args"].is_object() && e["args"].contains("tags") && e["args"]["tags"].is_string())
      s.tags = e["args"]["tags"].get<std::string>();
    t.slices.push_back(std::move(s));
  }
  return t;
}

}  // namespace stretto::traces
