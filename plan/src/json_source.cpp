#include "stretto/plan/json_source.h"

#include "stretto/support/limits.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cstring>
#include <tuple>

namespace stretto::plan {

std::string pointer_escape(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

namespace {

// Line:column (1-based) of a byte offset.
std::pair<uint32_t, uint32_t> line_col(const std::string& text, size_t offset) {
  uint32_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n')
      ++line, col = 1;
    else
      ++col;
  }
  return {line, col};
}

// Appends the UTF-8 encoding of code point `cp`.
void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Walks already-validated JSON text alongside its parsed document and records where every
// value (and every object member's key) starts, keyed by the value's node. Iterative: an
// explicit stack of open containers, so nesting depth costs no call stack.
class PositionScanner {
 public:
  using Pos = std::array<uint32_t, 4>;
  PositionScanner(const std::string& t, const Json& root,
                  std::unordered_map<const Json*, Pos>& out, Pos& root_pos)
      : t_(t), root_(root), out_(out), root_pos_(root_pos) {}

  void run() {
    skip_ws();
    if (i_ >= t_.size()) return;
    root_pos_ = {line_, col_, line_, col_};
    begin(&root_, 0, 0, true);
    while (!stack_.empty()) {
      skip_ws();
      if (i_ >= t_.size()) return;
      char c = t_[i_];
      if (c == '}' || c == ']') {
        adv();
        stack_.pop_back();
        continue;
      }
      if (c == ',') {
        adv();
        skip_ws();
        if (i_ >= t_.size()) return;
      }
      Frame& f = stack_.back();
      const Json* node = f.node;
      if (f.object) {
        const uint32_t kl = line_, kc = col_;
        const std::string key = string_token();
        skip_ws();
        if (i_ < t_.size()) adv();  // ':'
        skip_ws();
        const Json* child = nullptr;
        if (node && node->is_object()) {
          auto it = node->find(key);
          if (it != node->end()) child = &*it;
        }
        begin(child, kl, kc, false);
      } else {
        const size_t k = f.index++;
        const Json* child = node && node->is_array() && k < node->size() ? &(*node)[k] : nullptr;
        begin(child, 0, 0, false);
      }
    }
  }

 private:
  struct Frame {
    const Json* node;
    bool object;
    size_t index;
  };
  const std::string& t_;
  const Json& root_;
  std::unordered_map<const Json*, Pos>& out_;
  Pos& root_pos_;
  std::vector<Frame> stack_;
  size_t i_ = 0;
  uint32_t line_ = 1, col_ = 1;

  void adv() {
    if (t_[i_] == '\n')
      ++line_, col_ = 1;
    else
      ++col_;
    ++i_;
  }
  void skip_ws() {
    while (i_ < t_.size() &&
           (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\t' || t_[i_] == '\r'))
      adv();
  }
  uint32_t hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4 && i_ < t_.size(); ++k) {
      const char h = t_[i_];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      adv();
    }
    return v;
  }
  std::string string_token() {  // at '"'
    std::string s;
    if (i_ < t_.size()) adv();
    while (i_ < t_.size() && t_[i_] != '"') {
      if (t_[i_] != '\\') {
        s += t_[i_];
        adv();
        continue;
      }
      adv();
      if (i_ >= t_.size()) break;
      const char c = t_[i_];
      adv();
      switch (c) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i_ + 1 < t_.size() && t_[i_] == '\\' &&
              t_[i_ + 1] == 'u') {
            adv();
            adv();
            const uint32_t lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(s, cp);
          break;
        }
        default: s += c;  // '"', '\\', '/'
      }
    }
    if (i_ < t_.size()) adv();  // closing quote
    return s;
  }
  void begin(const Json* node, uint32_t kl, uint32_t kc, bool is_root) {
    if (node && !is_root) out_[node] = {line_, col_, kl ? kl : line_, kc ? kc : col_};
    if (i_ >= t_.size()) return;
    const char c = t_[i_];
    if (c == '{' || c == '[') {
      adv();
      stack_.push_back({node, c == '{', 0});
    } else if (c == '"') {
      (void)string_token();
    } else {
      while (i_ < t_.size() && !std::strchr(",]} \n\t\r", t_[i_])) adv();
    }
  }
};

// Unescapes one JSON pointer reference token ("~1" -> "/", "~0" -> "~").
std::string pointer_unescape(std::string_view tok) {
  std::string out;
  out.reserve(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
      out += tok[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += tok[i];
    }
  }
  return out;
}

}  // namespace

Expected<JsonSource> JsonSource::parse(std::string text, std::string file) {
  JsonSource s;
  s.file_ = std::move(file);
  s.text_ = std::move(text);
  const bool echo = looks_like_json(s.text_);
  if (auto deep = find_excess_nesting(s.text_)) {
    auto [line, col] = line_col(s.text_, *deep);
    Diagnostic d;
    d.message = fmt::format("JSON nested more than {} levels deep", kMaxJsonDepth);
    d.loc = SourceLoc{s.file_, line, col, ""};
    if (echo) d.source_line = s.line_window(line, d.caret_col = col);
    d.hint = "a plan nests about 6 levels; this file is not a plan or was generated wrongly";
    return fail(std::move(d));
  }
  try {
    s.root_ = Json::parse(s.text_);
  } catch (const Json::out_of_range& e) {
    // e.g. "number overflow parsing '10E48576'": no byte offset; find the token in the text.
    std::string msg = e.what();
    size_t q = msg.find('\''), q2 = msg.rfind('\'');
    std::string tok = q != std::string::npos && q2 > q ? msg.substr(q + 1, q2 - q - 1) : "";
    size_t off = tok.empty() ? std::string::npos : s.text_.find(tok);
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    Diagnostic d;
    d.message = "invalid JSON: " + msg;
    uint32_t line = 0, col = 0;
    if (off != std::string::npos) std::tie(line, col) = line_col(s.text_, off);
    d.loc = SourceLoc{s.file_, line, col, ""};
    if (line && echo) d.source_line = s.line_window(line, d.caret_col = col);
    d.hint = "numbers must fit in a 64-bit integer or a double";
    return fail(std::move(d));
  } catch (const Json::parse_error& e) {
    // nlohmann reports the byte just past the offending token; point at the last byte read.
    size_t off = e.byte > 0 ? e.byte - 1 : 0;
    if (off >= s.text_.size()) off = s.text_.empty() ? 0 : s.text_.size() - 1;
    // Point at the start of the offending token, not its end.
    if (s.text_[off] == '"' && off > 0) {
      size_t k = off;
      while (k > 0) {
        --k;
        if (s.text_[k] == '"' && (k == 0 || s.text_[k - 1] != '\\')) break;
      }
      off = k;
    } else {
      while (off > 0 && (std::isalnum(static_cast<unsigned char>(s.text_[off - 1])) ||
                         s.text_[off - 1] == '.' || s.text_[off - 1] == '-'))
        --off;
    }
    auto [line, col] = line_col(s.text_, off);
    std::string msg = e.what();
    // Strip nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
    if (auto p = msg.find(": syntax error"); p != std::string::npos)
      msg = msg.substr(p + 2);
    else if (auto q = msg.rfind(": "); q != std::string::npos)
      msg = msg.substr(q + 2);
    Diagnostic d;
    d.message = "invalid JSON: " + msg;
    d.loc = SourceLoc{s.file_, line, col, ""};
    if (echo) d.source_line = s.line_window(line, d.caret_col = col);
    d.hint = "check for a missing comma, bracket or quote just before this point";
    return fail(std::move(d));
  }
  s.index_positions();
  return s;
}

Expected<JsonSource> JsonSource::load(const std::string& path) {
  auto text = read_input_file(path, "plan");
  if (!text) return fail(std::move(text.error()));
  return parse(std::move(*text), path == "-" ? std::string("<stdin>") : path);
}

JsonSource JsonSource::from_json(Json value, std::string file) {
  JsonSource s;
  s.root_ = std::move(value);
  s.file_ = std::move(file);
  return s;
}

JsonSource::JsonSource(const JsonSource& o)
    : root_(o.root_), file_(o.file_), text_(o.text_) {
  if (!o.pos_.empty() || o.root_pos_[0]) index_positions();
}

JsonSource& JsonSource::operator=(const JsonSource& o) {
  if (this != &o) {
    JsonSource c(o);
    *this = std::move(c);
  }
  return *this;
}

void JsonSource::index_positions() {
  pos_.clear();
  std::array<uint32_t, 4> rp{0, 0, 0, 0};
  PositionScanner(text_, root_, pos_, rp).run();
  root_pos_ = rp;
}

namespace {

// One step of a JSON pointer (RFC 6901): the child of `node` named by the unescaped token `raw`
// (an object key, or an array index: digits without a leading zero, inside the array), or null.
// `scratch` holds the unescaped key.
const Json* pointer_child(const Json& node, std::string_view raw, std::string& scratch) {
  if (node.is_object()) {
    if (raw.find('~') == std::string_view::npos)
      scratch.assign(raw);
    else
      scratch = pointer_unescape(raw);
    auto it = node.find(scratch);
    return it == node.end() ? nullptr : &*it;
  }
  if (node.is_array()) {  // ("-", past the end, is never a value)
    if (raw.empty() || raw.size() > 18 || (raw.size() > 1 && raw[0] == '0') ||
        raw.find_first_not_of("0123456789") != std::string_view::npos)
      return nullptr;
    size_t k = 0;
    for (char c : raw) k = k * 10 + static_cast<size_t>(c - '0');
    return k < node.size() ? &node[k] : nullptr;
  }
  return nullptr;
}

// Calls step(raw token) for each token of `pointer` in turn while it returns true.
template <class Step>
void for_each_token(std::string_view pointer, Step&& step) {
  size_t at = 0;
  while (at < pointer.size()) {
    const size_t next = pointer.find('/', at + 1);
    const std::string_view raw = pointer.substr(
        at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1);
    at = next == std::string_view::npos ? pointer.size() : next;
    if (!step(raw)) return;
  }
}

}  // namespace

const JsonSource::Pos* JsonSource::find_pos(const std::string& pointer, bool& exact) const {
  const Pos* best = root_pos_[0] ? &root_pos_ : nullptr;
  exact = true;
  const Json* node = &root_;
  std::string scratch;
  for_each_token(pointer, [&](std::string_view raw) {
    node = pointer_child(*node, raw, scratch);
    if (!node) {
      exact = false;
      return false;
    }
    if (auto it = pos_.find(node); it != pos_.end())
      best = &it->second;
    else
      exact = false;
    return true;
  });
  return best;
}

const Json* JsonSource::find(std::string_view pointer) const {
  if (!pointer.empty() && pointer[0] != '/') return nullptr;
  const Json* node = &root_;
  std::string scratch;
  for_each_token(pointer, [&](std::string_view raw) {
    node = pointer_child(*node, raw, scratch);
    return node != nullptr;
  });
  return node;
}

SourceLoc JsonSource::loc(const std::string& pointer) const {
  bool exact = false;
  if (const Pos* p = find_pos(pointer, exact)) return SourceLoc{file_, (*p)[0], (*p)[1], pointer};
  return SourceLoc{file_, 0, 0, pointer};
}

SourceLoc JsonSource::key_loc(const std::string& pointer) const {
  bool exact = false;
  const Pos* p = find_pos(pointer, exact);
  if (p && exact) return SourceLoc{file_, (*p)[2], (*p)[3], pointer};
  return loc(pointer);
}

std::string JsonSource::line_text(uint32_t line) const {
  if (line == 0) return {};
  if (line_starts_.empty()) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text_.size(); ++i)
      if (text_[i] == '\n') line_starts_.push_back(i + 1);
  }
  if (line > line_starts_.size()) return {};
  const size_t start = line_starts_[line - 1];
  const size_t end = line < line_starts_.size() ? line_starts_[line] - 1 : text_.size();
  std::string s = text_.substr(start, end - start);
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

std::string JsonSource::line_window(uint32_t line, uint32_t& col) const {
  return window_line(line_text(line), col);
}

Diagnostic JsonSource::error_at(const std::string& pointer, std::string message, std::string hint,
                                bool at_key) const {
  Diagnostic d;
  d.message = std::move(message);
  d.hint = std::move(hint);
  d.loc = at_key ? key_loc(pointer) : loc(pointer);
  if (d.loc.known()) d.source_line = line_window(d.loc.line, d.caret_col = d.loc.col);
  return d;
}

void erase_at(Json& doc, const std::string& pointer) {
  const size_t slash = pointer.rfind('/');
  if (slash == std::string::npos) return;
  Json::json_pointer parent(pointer.substr(0, slash));
  if (!doc.contains(parent)) return;
  Json& obj = doc[parent];
  // The last token, unescaped (RFC 6901: "~1" is "/", "~0" is "~").
  std::string key = pointer.substr(slash + 1);
  for (size_t p = 0; (p = key.find("~1", p)) != std::string::npos; ++p) key.replace(p, 2, "/");
  for (size_t p = 0; (p = key.find("~0", p)) != std::string::npos; ++p) key.replace(p, 2, "~");
  if (obj.is_object()) obj.erase(key);
}

}  // namespace stretto::plan
