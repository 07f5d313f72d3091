// Recursive-descent parser and tree evaluator for constraint expressions (expr.h).
#include "stretto/explore/expr.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <vector>

namespace stretto::explore {

struct Expr::Node {
  enum Kind : uint8_t { kNum, kStr, kVar, kUnary, kBinary } kind = kNum;
  double num = 0;
  std::string str;  // string literal, identifier, or operator spelling
  std::shared_ptr<const Node> a, b;
};

namespace {

using NodeP = std::shared_ptr<const Expr::Node>;

class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}

  NodeP parse() {
    NodeP n = binary(0);
    skip();
    if (ok() && i_ < t_.size()) fail_at(fmt::format("unexpected '{}'", t_[i_]));
    return ok() ? n : nullptr;
  }
  bool ok() const { return err_.empty(); }
  const std::string& error() const { return err_; }

 private:
  const std::string& t_;
  size_t i_ = 0;
  int depth_ = 0;
  std::string err_;

  void fail_at(std::string msg) {
    if (err_.empty()) err_ = fmt::format("column {}: {}", i_ + 1, msg);
  }
  void skip() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  // Binary operators by precedence level (lowest first).
  static int level_of(std::string_view op) {
    if (op == "||") return 0;
    if (op == "&&") return 1;
    if (op == "==" || op == "!=") return 2;
    if (op == "<" || op == "<=" || op == ">" || op == ">=") return 3;
    if (op == "+" || op == "-") return 4;
    if (op == "*" || op == "/" || op == "%") return 5;
    return -1;
  }
  std::string peek_op() {
    skip();
    if (i_ >= t_.size()) return {};
    static const char* two[] = {"||", "&&", "==", "!=", "<=", ">="};
    for (const char* o : two)
      if (t_.compare(i_, 2, o) == 0) return o;
    char c = t_[i_];
    if (std::string_view("<>+-*/%").find(c) != std::string_view::npos) return std::string(1, c);
    auto word = [&](std::string_view w) {
      return t_.compare(i_, w.size(), w) == 0 &&
             (i_ + w.size() >= t_.size() ||
              !std::isalnum(static_cast<unsigned char>(t_[i_ + w.size()])));
    };
    if (word("and")) return "and";
    if (word("or")) return "or";
    return {};
  }
  static std::string canonical(const std::string& op) {
    return op == "and" ? "&&" : op == "or" ? "||" : op;
  }
  NodeP binary(int level) {
    if (level > 5) return unary();
    NodeP lhs = binary(level + 1);
    while (ok()) {
      std::string op = peek_op();
      if (op.empty() || level_of(canonical(op)) != level) break;
      i_ += op.size();
      NodeP rhs = binary(level + 1);
      if (!ok()) return nullptr;
      auto n = std::make_shared<Expr::Node>();
      n->kind = Expr::Node::kBinary;
      n->str = canonical(op);
      n->a = lhs;
      n->b = rhs;
      lhs = n;
    }
    return lhs;
  }
  NodeP unary() {
    skip();
    if (++depth_ > 64) {
      fail_at("expression nested too deeply");
      return nullptr;
    }
    NodeP r;
    // Unary operators: '!' (also spelled 'not') and '-'.
    char op = 0;
    if (i_ < t_.size() && (t_[i_] == '!' || t_[i_] == '-') &&
        !(t_[i_] == '!' && i_ + 1 < t_.size() && t_[i_ + 1] == '=')) {
      op = t_[i_++];
    } else if (t_.compare(i_, 3, "not") == 0 &&
               (i_ + 3 >= t_.size() || !std::isalnum(static_cast<unsigned char>(t_[i_ + 3])))) {
      i_ += 3;
      op = '!';
    }
    if (op != 0) {
      auto n = std::make_shared<Expr::Node>();
      n->kind = Expr::Node::kUnary;
      n->str.assign(1, op);
      n->a = unary();
      r = n;
    } else {
      r = primary();
    }
    --depth_;
    return ok() ? r : nullptr;
  }
  NodeP primary() {
    skip();
    if (i_ >= t_.size()) {
      fail_at("expected a number, a name, a string or '('");
      return nullptr;
    }
    auto n = std::make_shared<Expr::Node>();
    const char c = t_[i_];
    if (c == '(') {
      ++i_;
      NodeP inner = binary(0);
      skip();
      if (i_ >= t_.size() || t_[i_] != ')') {
        fail_at("expected ')'");
        return nullptr;
      }
      ++i_;
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      size_t used = 0;
      try {
        n->num = std::stod(t_.substr(i_), &used);
      } catch (const std::exception&) {
        fail_at("bad number");
        return nullptr;
      }
      i_ += used;
      n->kind = Expr::Node::kNum;
      return n;
    }
    if (c == '\'' || c == '"') {
      size_t e = t_.find(c, i_ + 1);
      if (e == std::string::npos) {
        fail_at("unterminated string");
        return nullptr;
      }
      n->kind = Expr::Node::kStr;
      n->str = t_.substr(i_ + 1, e - i_ - 1);
      i_ = e + 1;
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = i_;
      while (i_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_'))
        ++i_;
      n->kind = Expr::Node::kVar;
      n->str = t_.substr(b, i_ - b);
      return n;
    }
    fail_at(fmt::format("unexpected '{}'", c));
    return nullptr;
  }
};

Diagnostic diag(std::string msg, std::string hint = {}) {
  Diagnostic d;
  d.message = std::move(msg);
  d.hint = std::move(hint);
  return d;
}

bool truthy(const Value& v) {
  if (const double* d = std::get_if<double>(&v)) return *d != 0;
  return !std::get<std::string>(v).empty();
}

Expected<Value> eval_node(const Expr::Node& n, const Bindings& b, const std::string& text) {
  switch (n.kind) {
    case Expr::Node::kNum:
      return Value(n.num);
    case Expr::Node::kStr:
      return Value(n.str);
    case Expr::Node::kVar: {
      auto it = b.find(n.str);
      if (it == b.end()) {
        std::vector<std::string> names;
        for (const auto& [k, v] : b) names.push_back(k);
        std::string near = nearest(n.str, names);
        return fail(diag(fmt::format("constraint '{}': unknown name '{}'", text, n.str),
                         near.empty() ? "names are the axes of the spec and devices, "
                                        "global_batch, stages"
                                      : fmt::format("did you mean '{}'?", near)));
      }
      return it->second;
    }
    case Expr::Node::kUnary: {
      auto a = eval_node(*n.a, b, text);
      if (!a) return a;
      if (n.str == "!") return Value(truthy(*a) ? 0.0 : 1.0);
      if (!std::holds_alternative<double>(*a))
        return fail(diag(fmt::format("constraint '{}': '-' applied to a string", text)));
      return Value(-std::get<double>(*a));
    }
    case Expr::Node::kBinary:
      break;
  }
  auto a = eval_node(*n.a, b, text);
  if (!a) return a;
  const std::string& op = n.str;
  if (op == "&&" || op == "||") {  // short-circuit
    bool l = truthy(*a);
    if (op == "&&" && !l) return Value(0.0);
    if (op == "||" && l) return Value(1.0);
    auto c = eval_node(*n.b, b, text);
    if (!c) return c;
    return Value(truthy(*c) ? 1.0 : 0.0);
  }
  auto c = eval_node(*n.b, b, text);
  if (!c) return c;
  if (a->index() != c->index())
    return fail(diag(fmt::format("constraint '{}': '{}' compares a string with a number", text, op),
                     "quote strings on both sides, e.g. family == 'dualpipev'"));
  if (std::holds_alternative<std::string>(*a)) {
    const auto &x = std::get<std::string>(*a), &y = std::get<std::string>(*c);
    if (op == "==") return Value(x == y ? 1.0 : 0.0);
    if (op == "!=") return Value(x != y ? 1.0 : 0.0);
    return fail(diag(fmt::format("constraint '{}': '{}' on strings", text, op),
                     "strings support == and != only"));
  }
  const double x = std::get<double>(*a), y = std::get<double>(*c);
  if (op == "==") return Value(x == y ? 1.0 : 0.0);
  if (op == "!=") return Value(x != y ? 1.0 : 0.0);
  if (op == "<") return Value(x < y ? 1.0 : 0.0);
  if (op == "<=") return Value(x <= y ? 1.0 : 0.0);
  if (op == ">") return Value(x > y ? 1.0 : 0.0);
  if (op == ">=") return Value(x >= y ? 1.0 : 0.0);
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (y == 0) return fail(diag(fmt::format("constraint '{}': division by zero", text)));
  if (op == "/") return Value(x / y);
  return Value(std::fmod(x, y));
}

}  // namespace

Expected<Expr> Expr::parse(const std::string& text) {
  if (text.size() > 4096) return fail(diag("constraint longer than 4096 characters"));
  Parser p(text);
  NodeP n = p.parse();
  if (!p.ok())
    return fail(diag(fmt::format("constraint '{}': {}", text, p.error()),
                     "operators: || && ! == != < <= > >= + - * / %, parentheses, 'strings'"));
  Expr e;
  e.root_ = n;
  e.text_ = text;
  return e;
}

Expected<Value> Expr::eval(const Bindings& b) const {
  return eval_node(*root_, b, text_);
}

Expected<bool> Expr::test(const Bindings& b) const {
  auto v = eval(b);
  if (!v) return fail(std::move(v).error());
  return truthy(*v);
}

}  // namespace stretto::explore
