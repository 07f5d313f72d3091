// Streaming Chrome/Kineto trace reader (trace_reader.h): zlib + nlohmann::json SAX.

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <istream>
#include <optional>
#include <streambuf>
#include <vector>

#include "stretto/traces/trace_reader.h"

namespace stretto::traces {

using plan::Json;
using plan::pointer_escape;

namespace {

constexpr size_t kChunk = 256 * 1024;
// The parser holds a whole string or number while it reads it, and an event's values while the
// event is read: a small .gz can expand to one 2 GiB name, or to 268 M args in one event
// (5-6 GiB each). Kineto's longest names are a few KiB and its events carry tens of args.
constexpr uint64_t kMaxToken = 16 << 20;      // bytes of one string or number
constexpr size_t kMaxEventValues = 100000;    // values in one event (or one kept metadata member)

// A read-only streambuf over a file through zlib's gzread, which reads gzip and plain files
// alike. Counts the bytes handed out, so the parser's position is known at every callback.
class GzBuf final : public std::streambuf {
 public:
  explicit GzBuf(const std::string& path) : buf_(kChunk) {
    f_ = gzopen(path.c_str(), "rb");
    if (f_) {
      gzbuffer(f_, 128 * 1024);
      gzip_ = gzdirect(f_) == 0;
    }
  }
  ~GzBuf() override {
    if (f_) gzclose(f_);
  }
  GzBuf(const GzBuf&) = delete;
  GzBuf& operator=(const GzBuf&) = delete;

  bool ok() const { return f_ != nullptr; }
  bool gzip() {
    // gzdirect is only reliable after the first read.
    if (f_ && !started_) underflow();
    return f_ && gzdirect(f_) == 0;
  }
  /// Bytes consumed by the reader so far.
  uint64_t consumed() const { return base_ + static_cast<uint64_t>(gptr() - eback()); }
  /// A zlib error message, if reading stopped on one (or zlib has one pending).
  const std::string& error() {
    if (error_.empty() && f_) {
      int code = Z_OK;
      const char* msg = gzerror(f_, &code);
      if (code != Z_OK && msg) error_ = msg;
    }
    return error_;
  }
  /// True when the whole input has been handed out.
  bool at_end() { return sgetc() == traits_type::eof(); }
  /// Where a string or number longer than kMaxToken began (the input stops there), if one did.
  std::optional<uint64_t> overlong() const { return overlong_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (!f_ || overlong_) return traits_type::eof();
    base_ += static_cast<uint64_t>(egptr() - eback());
    started_ = true;
    int n = gzread(f_, buf_.data(), static_cast<unsigned>(buf_.size()));
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      error_ = msg ? msg : "read error";
      if (code == Z_ERRNO) error_ = std::strerror(errno);
      n = 0;
    }
    n = static_cast<int>(bound_tokens(static_cast<size_t>(n)));
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    if (n == 0) return traits_type::eof();
    return traits_type::to_int_type(*gptr());
  }

 private:
  // Follows strings (and escapes) and bare tokens through the chunk; returns how many of its
  // n bytes to hand out: all, or up to where a token grew past kMaxToken.
  size_t bound_tokens(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char c = buf_[i];
      if (in_string_) {
        if (escape_) escape_ = false;
        else if (c == '\\') escape_ = true;
        else if (c == '"') in_string_ = false, token_ = 0;
      } else if (c == '"') {
        in_string_ = true;
        token_ = 0;
        token_start_ = base_ + i;
      } else if (c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':' ||
                 c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        token_ = 0;
        continue;
      } else if (token_ == 0) {
        token_start_ = base_ + i;
      }
      if (++token_ > kMaxToken) {
        overlong_ = token_start_;
        return i;
      }
    }
    return n;
  }

  gzFile f_ = nullptr;
  std::vector<char> buf_;
  bool in_string_ = false, escape_ = false;
  uint64_t token_ = 0, token_start_ = 0;
  std::optional<uint64_t> overlong_;
  uint64_t base_ = 0;
  bool gzip_ = false;
  bool started_ = false;
  std::string error_;
};

// Line, column (1-based) and the text of that line (a window of it for very long lines) at
// byte `offset` of the decompressed file; with `to_value`, first skips whitespace and one ':'
// (an object member's value after its key).
struct Place {
  uint32_t line = 0, col = 0;
  std::string text;  // the line, for a caret display (empty for very long lines)
  std::string near;  // a snippet around the place, for very long lines
  uint64_t offset = 0;
};

Place locate(const std::string& path, uint64_t offset, bool to_value) {
  Place p;
  GzBuf b(path);
  if (!b.ok()) return p;
  std::istream in(&b);
  uint64_t pos = 0, line_start = 0;
  uint32_t line = 1;
  std::string cur;  // current line's text so far (capped)
  constexpr size_t kCap = 1 << 16;
  int c = 0;
  while (pos < offset && (c = in.get()) != EOF) {
    ++pos;
    if (c == '\n') {
      ++line;
      line_start = pos;
      cur.clear();
    } else if (cur.size() < kCap) {
      cur += static_cast<char>(c);
    }
  }
  if (to_value) {
    bool colon = false;
    while ((c = in.peek()) != EOF) {
      if (c == ' ' || c == '\t' || c == '\r' || (c == ':' && !colon)) {
        colon = colon || c == ':';
        cur += static_cast<char>(in.get());
        ++pos;
      } else if (c == '\n') {
        in.get();
        ++pos;
        ++line;
        line_start = pos;
        cur.clear();
      } else {
        break;
      }
    }
  }
  p.offset = pos;
  const uint64_t col = pos - line_start + 1;
  std::string rest;  // the rest of the line
  while ((c = in.get()) != EOF && c != '\n' && rest.size() < 200) rest += static_cast<char>(c);
  p.line = line;
  p.col = static_cast<uint32_t>(std::min<uint64_t>(col, UINT32_MAX));
  if (col <= 400 && cur.size() + 1 >= col) {
    p.text = (cur + rest).substr(0, std::max<size_t>(240, static_cast<size_t>(col) + 80));
  } else {
    // A very long line (a minified trace): no caret display, a snippet of the text instead.
    const size_t keep = std::min<size_t>(cur.size(), 40);
    p.near = cur.substr(cur.size() - keep) + rest.substr(0, 40);
  }
  return p;
}

// Puts a place into a diagnostic: location, caret line or a snippet.
void place_into(Diagnostic& d, const std::string& path, const Place& p, std::string pointer) {
  d.loc = {path, p.line, p.col, std::move(pointer)};
  d.source_line = p.text;
  if (!p.near.empty()) d.message += fmt::format(" (near '{}')", p.near);
}

const std::array<std::string_view, 7> kKeptTop = {
    "distributedInfo", "deviceProperties", "otherData",  "baseTimeNanoseconds",
    "displayTimeUnit", "schemaVersion",    "traceName"};

class Handler {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  Handler(const std::string& path, GzBuf& buf, const EventCallback& cb, const TraceReadOptions& o,
          TraceHeader& h, Diagnostics& ds)
      : path_(path), buf_(buf), cb_(cb), opt_(o), h_(h), ds_(ds) {}

  bool null() { return scalar(Json(nullptr)); }
  bool boolean(bool v) { return scalar(Json(v)); }
  bool number_integer(number_integer_t v) {
    if (at_event_member()) time_int(v);
    return scalar(Json(v));
  }
  bool number_unsigned(number_unsigned_t v) {
    if (at_event_member()) time_int(static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)));
    return scalar(Json(v));
  }
  bool number_float(number_float_t v, const string_t& raw) {
    if (at_event_member() && (key_ == "ts" || key_ == "dur")) {
      auto ns = us_text_to_ns(raw);
      if (ns) {
        if (key_ == "ts")
          ts_ = *ns, has_ts_ = true;
        else
          dur_ = *ns, has_dur_ = true;
      }
    }
    return scalar(Json(v));
  }
  bool string(string_t& v) { return scalar(Json(std::move(v))); }
  bool binary(binary_t&) { return scalar(Json()); }

  bool start_object(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(false); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    if (skip_ > 0) return true;
    if (depth_ == 1 && !bare_) {
      top_key_ = k;
      return true;
    }
    if (!stack_.empty()) {
      key_ = k;
      // event members, and members of the event's args: remember where they are for errors
      if (building_event_ && stack_.size() <= 2) {
        const std::string member = stack_.size() == 1 ? k : "args/" + k;
        if (stack_.size() == 1 || in_args_) keys_.emplace_back(member, buf_.consumed());
      }
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last, const nlohmann::detail::exception& ex) {
    (void)last;
    std::string what = ex.what();
    size_t at = what.find("column");
    size_t colon = at == std::string::npos ? std::string::npos : what.find(": ", at);
    std::string why = colon == std::string::npos ? what : what.substr(colon + 2);
    const uint64_t off = position > 0 ? position - 1 : 0;
    Diagnostic d;
    std::string hint;
    if (auto at = buf_.overlong()) {
      d.message = fmt::format("a string or number longer than {} MiB (byte {}{}): refused",
                              kMaxToken >> 20, *at, h_.gzip ? " of the decompressed text" : "");
      d.hint = "not a profiler trace, or a damaged one: Kineto's names are at most a few KiB";
      place_into(d, path_, locate(path_, *at, false), pointer_here());
      ds_.push_back(std::move(d));
      return false;
    }
    if (!buf_.error().empty()) {
      why = "corrupt or truncated gzip data (" + buf_.error() + ")";
      hint = "the compressed file is damaged or was cut short; re-copy it or re-export the trace";
    } else if (why.find("end of input") != std::string::npos || buf_.at_end()) {
      why = "the trace ends early: " + why;
      hint = "the file is truncated (was the profiler stopped while writing it?)";
    }
    d.message = fmt::format("invalid JSON in trace (byte {}{}): {}", off,
                            h_.gzip ? " of the decompressed text" : "", why);
    d.hint = std::move(hint);
    place_into(d, path_, locate(path_, off, false), pointer_here());
    ds_.push_back(std::move(d));
    return false;
  }

  bool saw_events() const { return saw_events_; }
  bool root_seen() const { return root_seen_; }

 private:
  bool at_event_member() const { return building_event_ && stack_.size() == 1; }
  void time_int(int64_t v) {
    if (key_ == "ts")
      ts_ = v * 1000, has_ts_ = true;
    else if (key_ == "dur")
      dur_ = v * 1000, has_dur_ = true;
  }

  // JSON pointer of the current position (for syntax errors): the event, if inside one.
  std::string pointer_here() const {
    if (events_depth_ == 0) return depth_ == 1 && !bare_ ? "/" + pointer_escape(top_key_) : "";
    const std::string base = bare_ ? "" : "/traceEvents";
    if (depth_ > events_depth_) return fmt::format("{}/{}", base, index_);
    return base;
  }

  bool scalar(Json v) {
    if (skip_ > 0) return true;
    if (!stack_.empty()) {
      if (!count_value()) return false;
      insert(std::move(v));
      return true;
    }
    if (depth_ == 0) return root_error("a trace must be a JSON object or array");
    if (depth_ == events_depth_) return event_not_object();
    if (depth_ == 1 && !bare_) {
      if (std::find(kKeptTop.begin(), kKeptTop.end(), top_key_) != kKeptTop.end())
        h_.metadata[top_key_] = std::move(v);
      else if (top_key_ == "traceEvents")
        return root_error("'traceEvents' must be an array");
    }
    return true;
  }

  // Counts a value of the event (or kept metadata member) being built: false past the bound.
  bool count_value() {
    if (++values_ <= kMaxEventValues) return true;
    Diagnostic d;
    d.message = building_event_
                    ? fmt::format("an event with more than {} values (args and their contents)",
                                  kMaxEventValues)
                    : fmt::format("'{}' holds more than {} values", top_key_, kMaxEventValues);
    d.hint = "not a profiler trace, or a damaged one: Kineto's events carry tens of args";
    place_into(d, path_, locate(path_, building_event_ ? event_offset_ : buf_.consumed() - 1, false),
               building_event_ ? (bare_ ? fmt::format("/{}", index_)
                                        : fmt::format("/traceEvents/{}", index_))
                               : "/" + pointer_escape(top_key_));
    ds_.push_back(std::move(d));
    return false;
  }

  void insert(Json v) {
    Json& top = *stack_.back();
    if (top.is_object())
      top[key_] = std::move(v);
    else
      top.push_back(std::move(v));
  }

  bool open(bool object) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    if (depth_ == 0) {
      root_seen_ = true;
      depth_ = 1;
      if (!object) {
        bare_ = true;
        h_.bare_array = true;
        events_depth_ = 1;
        saw_events_ = true;
      }
      return true;
    }
    if (!stack_.empty()) {  // inside an event or a kept metadata value
      if (!count_value()) return false;
      Json child = object ? Json::object() : Json::array();
      Json& top = *stack_.back();
      Json* p;
      if (top.is_object()) {
        if (building_event_ && stack_.size() == 1 && key_ == "args") in_args_ = object;
        p = &(top[key_] = std::move(child));
      } else {
        top.push_back(std::move(child));
        p = &top.back();
      }
      stack_.push_back(p);
      ++depth_;
      return true;
    }
    ++depth_;
    if (depth_ == events_depth_ + 1 && events_depth_ > 0) {
      if (!object) {
        --depth_;
        return event_not_object();
      }
      // a new event
      event_ = Json::object();
      values_ = 0;
      stack_.push_back(&event_);
      building_event_ = true;
      in_args_ = false;
      ts_ = dur_ = 0;
      has_ts_ = has_dur_ = false;
      keys_.clear();
      event_offset_ = buf_.consumed() - 1;
      return true;
    }
    if (depth_ == 2 && !bare_) {
      if (top_key_ == "traceEvents") {
        if (object) return root_error("'traceEvents' must be an array");
        events_depth_ = 2;
        saw_events_ = true;
        return true;
      }
      if (std::find(kKeptTop.begin(), kKeptTop.end(), top_key_) != kKeptTop.end()) {
        Json& slot = h_.metadata[top_key_] = object ? Json::object() : Json::array();
        values_ = 0;
        stack_.push_back(&slot);
        return true;
      }
    }
    // anything else: parse and drop
    --depth_;
    skip_ = 1;
    return true;
  }

  bool close() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    if (!stack_.empty()) {
      stack_.pop_back();
      --depth_;
      if (stack_.size() == 1 && building_event_) in_args_ = false;
      if (stack_.empty() && building_event_) {
        building_event_ = false;
        return deliver();
      }
      return true;
    }
    --depth_;
    return true;
  }

  bool deliver() {
    RawEvent e;
    e.json = &event_;
    e.index = index_;
    e.ts_ns = ts_;
    e.dur_ns = dur_;
    e.has_ts = has_ts_;
    e.has_dur = has_dur_;
    auto str = [&](const char* k) -> std::string_view {
      auto it = event_.find(k);
      return it != event_.end() && it->is_string() ? std::string_view(it->get_ref<const std::string&>())
                                                   : std::string_view();
    };
    e.ph = str("ph");
    e.name = str("name");
    e.cat = str("cat");
    ++h_.events;
    if (auto err = cb_(e)) {
      // locate the member at fault
      uint64_t off = event_offset_;
      bool to_value = false;
      for (const auto& [k, o] : keys_)
        if (k == err->member) off = o, to_value = true;
      std::string ptr = bare_ ? fmt::format("/{}", index_) : fmt::format("/traceEvents/{}", index_);
      if (!err->member.empty()) ptr += "/" + err->member;
      Diagnostic d;
      d.message = std::move(err->message);
      d.hint = std::move(err->hint);
      place_into(d, path_, locate(path_, off, to_value), ptr);
      ds_.push_back(std::move(d));
      if (ds_.size() >= opt_.max_errors) {
        ds_.back().notes.push_back(
            {{path_, 0, 0, ""}, fmt::format("stopped after {} errors", opt_.max_errors)});
        ++index_;
        return false;
      }
    }
    ++index_;
    return true;
  }

  bool event_not_object() {
    Diagnostic d;
    d.message = "a trace event must be a JSON object";
    place_into(d, path_, locate(path_, buf_.consumed() - 1, false),
               bare_ ? fmt::format("/{}", index_) : fmt::format("/traceEvents/{}", index_));
    ds_.push_back(std::move(d));
    return false;
  }

  bool root_error(std::string msg) {
    Diagnostic d;
    d.message = std::move(msg);
    d.hint = "expected a Chrome trace: {\"traceEvents\": [...]} or a bare array of events";
    place_into(d, path_, locate(path_, buf_.consumed() > 0 ? buf_.consumed() - 1 : 0, false),
               depth_ <= 1 ? "" : "/" + pointer_escape(top_key_));
    ds_.push_back(std::move(d));
    return false;
  }

  const std::string& path_;
  GzBuf& buf_;
  const EventCallback& cb_;
  const TraceReadOptions& opt_;
  TraceHeader& h_;
  Diagnostics& ds_;

  int depth_ = 0;
  int events_depth_ = 0;  // depth of the events array (1 bare, 2 under traceEvents)
  bool bare_ = false, root_seen_ = false, saw_events_ = false;
  int skip_ = 0;
  std::string top_key_;
  std::string key_;
  std::vector<Json*> stack_;
  Json event_;
  bool building_event_ = false, in_args_ = false;
  int64_t ts_ = 0, dur_ = 0;
  bool has_ts_ = false, has_dur_ = false;
  std::vector<std::pair<std::string, uint64_t>> keys_;
  uint64_t event_offset_ = 0;
  size_t index_ = 0;
  size_t values_ = 0;  // values of the event or metadata member being built
};

}  // namespace

std::optional<int64_t> us_text_to_ns(std::string_view t) {
  if (t.empty()) return std::nullopt;
  const bool neg = t.front() == '-';
  std::string_view s = neg ? t.substr(1) : t;
  if (s.find_first_of("eE") != std::string_view::npos) {
    double v = 0;
    auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec != std::errc() || !std::isfinite(v) || std::fabs(v) > 9e12) return std::nullopt;
    return static_cast<int64_t>(std::llround(v * 1000.0));
  }
  const size_t dot = s.find('.');
  std::string_view ip = s.substr(0, dot);
  std::string_view fp = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  if (ip.empty() && fp.empty()) return std::nullopt;
  int64_t whole = 0;
  if (!ip.empty()) {
    auto r = std::from_chars(ip.data(), ip.data() + ip.size(), whole);
    if (r.ec != std::errc() || r.ptr != ip.data() + ip.size() || whole > 9'000'000'000'000)
      return std::nullopt;
  }
  int64_t frac = 0;
  int digits = 0;
  bool round_up = false;
  for (size_t i = 0; i < fp.size(); ++i) {
    const char c = fp[i];
    if (c < '0' || c > '9') return std::nullopt;
    if (digits < 3) {
      frac = frac * 10 + (c - '0');
      ++digits;
    } else if (i == 3) {
      round_up = c >= '5';  // half up on the 4th decimal (sub-nanosecond)
    }
  }
  while (digits < 3) frac *= 10, ++digits;
  int64_t ns = whole * 1000 + frac + (round_up ? 1 : 0);
  return neg ? -ns : ns;
}

Expected<TraceHeader> read_trace(const std::string& path, const EventCallback& on_event,
                                 const TraceReadOptions& opt) {
  GzBuf buf(path);
  if (!buf.ok()) {
    Diagnostic d;
    d.message = fmt::format("cannot read trace '{}': {}", path, std::strerror(errno));
    d.loc = {path, 0, 0, ""};
    return fail(std::move(d));
  }
  TraceHeader h;
  h.gzip = buf.gzip();
  Diagnostics ds;
  Handler handler(path, buf, on_event, opt, h, ds);
  std::istream in(&buf);
  bool ok = false;
  try {
    ok = Json::sax_parse(in, &handler, Json::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& e) {  // nlohmann may throw on invalid UTF-8 in some paths
    Diagnostic d;
    d.message = std::string("invalid trace: ") + e.what();
    d.loc = {path, 0, 0, ""};
    ds.push_back(std::move(d));
    ok = false;
  }
  h.bytes = buf.consumed();
  if (!ok || !ds.empty()) {
    if (ds.empty()) {
      Diagnostic d;
      d.message = "invalid trace";
      d.loc = {path, 0, 0, ""};
      ds.push_back(std::move(d));
    }
    return fail(std::move(ds));
  }
  if (!handler.saw_events()) {
    Diagnostic d;
    d.message = "not a Chrome/Kineto trace: no 'traceEvents' array";
    d.hint = "PyTorch writes traces with prof.export_chrome_trace() or tensorboard_trace_handler";
    d.loc = {path, 1, 1, ""};
    return fail(std::move(d));
  }
  return h;
}

}  // namespace stretto::traces
