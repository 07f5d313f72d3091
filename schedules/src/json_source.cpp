#include "stretto/schedules/json_source.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

namespace stretto {

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

// Walks already-validated JSON text and records the position of every value by JSON pointer.
// It only has to recognise token boundaries, since nlohmann::json has accepted the text.
class PositionScanner {
 public:
  PositionScanner(const std::string& t,
                  std::unordered_map<std::string, std::array<uint32_t, 4>>& out)
      : t_(t), out_(out) {}
  void run() {
    skip_ws();
    value("", 0, 0);
  }

 private:
  const std::string& t_;
  std::unordered_map<std::string, std::array<uint32_t, 4>>& out_;
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
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\t' || t_[i_] == '\r'))
      adv();
  }
  std::string string_token() {  // at '"'
    std::string s;
    adv();
    while (i_ < t_.size() && t_[i_] != '"') {
      if (t_[i_] == '\\') {
        adv();
        char c = t_[i_];
        s += (c == 'n' ? '\n' : c == 't' ? '\t' : c);  // keys with exotic escapes are rare
        if (c == 'u') {
          for (int k = 0; k < 4; ++k) adv();
        }
        adv();
        continue;
      }
      s += t_[i_];
      adv();
    }
    adv();  // closing quote
    return s;
  }
  void value(const std::string& ptr, uint32_t kl, uint32_t kc) {
    out_[ptr] = {line_, col_, kl ? kl : line_, kc ? kc : col_};
    char c = t_[i_];
    if (c == '{') {
      adv();
      skip_ws();
      if (t_[i_] == '}') return adv();
      while (true) {
        skip_ws();
        uint32_t l = line_, co = col_;
        std::string key = string_token();
        skip_ws();
        adv();  // ':'
        skip_ws();
        value(ptr + "/" + pointer_escape(key), l, co);
        skip_ws();
        if (t_[i_] == ',') {
          adv();
          continue;
        }
        adv();  // '}'
        return;
      }
    } else if (c == '[') {
      adv();
      skip_ws();
      if (t_[i_] == ']') return adv();
      for (size_t k = 0;; ++k) {
        skip_ws();
        value(ptr + "/" + std::to_string(k), 0, 0);
        skip_ws();
        if (t_[i_] == ',') {
          adv();
          continue;
        }
        adv();  // ']'
        return;
      }
    } else if (c == '"') {
      string_token();
    } else {
      while (i_ < t_.size() && !std::strchr(",]} \n\t\r", t_[i_])) adv();
    }
  }
};

}  // namespace

Expected<JsonSource> JsonSource::parse(std::string text, std::string file) {
  JsonSource s;
  s.file_ = std::move(file);
  s.text_ = std::move(text);
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
    if (line) d.source_line = s.line_text(line);
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
    d.source_line = s.line_text(line);
    d.hint = "check for a missing comma, bracket or quote just before this point";
    return fail(std::move(d));
  }
  s.index_positions();
  return s;
}

Expected<JsonSource> JsonSource::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    Diagnostic d;
    d.message = fmt::format("cannot open '{}'", path);
    d.loc.file = path;
    d.hint = "check the path; relative paths are taken from the current directory";
    return fail(std::move(d));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), path);
}

JsonSource JsonSource::from_json(Json value, std::string file) {
  JsonSource s;
  s.root_ = std::move(value);
  s.file_ = std::move(file);
  return s;
}

void JsonSource::index_positions() {
  std::unordered_map<std::string, std::array<uint32_t, 4>> raw;
  PositionScanner(text_, raw).run();
  pos_.reserve(raw.size());
  for (auto& [k, v] : raw) pos_[k] = Pos{v[0], v[1], v[2], v[3]};
}

SourceLoc JsonSource::loc(const std::string& pointer) const {
  std::string p = pointer;
  while (true) {
    if (auto it = pos_.find(p); it != pos_.end())
      return SourceLoc{file_, it->second.line, it->second.col, pointer};
    if (p.empty()) break;
    p = p.substr(0, p.rfind('/'));
  }
  return SourceLoc{file_, 0, 0, pointer};
}

SourceLoc JsonSource::key_loc(const std::string& pointer) const {
  if (auto it = pos_.find(pointer); it != pos_.end())
    return SourceLoc{file_, it->second.key_line, it->second.key_col, pointer};
  return loc(pointer);
}

std::string JsonSource::line_text(uint32_t line) const {
  size_t start = 0;
  for (uint32_t l = 1; l < line; ++l) {
    start = text_.find('\n', start);
    if (start == std::string::npos) return {};
    ++start;
  }
  size_t end = text_.find('\n', start);
  std::string s = text_.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

Diagnostic JsonSource::error_at(const std::string& pointer, std::string message, std::string hint,
                                bool at_key) const {
  Diagnostic d;
  d.message = std::move(message);
  d.hint = std::move(hint);
  d.loc = at_key ? key_loc(pointer) : loc(pointer);
  if (d.loc.known()) d.source_line = line_text(d.loc.line);
  return d;
}

}  // namespace stretto
