#pragma once
// Tags and filters (DESIGN.md §2).
//
// Every schedulable op carries a small fixed set of tags, as Piper's annotated model would:
// PP (pipeline region), EP (expert block), LAYER, MB (microbatch, added by `split`) and the
// compiler's PASS (F, B, BI, BW). A filter is a conjunction of per-tag conditions:
// a number (tag present with that value), "*" (present, any value), "-" (absent), or
// nothing (no condition). `{}` matches everything.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stretto::plan {

enum class Pass : uint8_t { kNone, kF, kB, kBI, kBW };
std::string_view pass_name(Pass p);  // "F", "B", "BI", "BW", "-"
std::optional<Pass> parse_pass(std::string_view s);

/// Tag keys, in display order. PASS is kept separately in `Tags::pass`.
enum class TagKey : uint8_t { kPP, kEP, kLayer, kMB, kCount };
inline constexpr std::array<std::string_view, 4> kTagKeyNames = {"PP", "EP", "LAYER", "MB"};
std::optional<TagKey> parse_tag_key(std::string_view s);

inline constexpr int32_t kAbsent = -1;

struct Tags {
  std::array<int32_t, 4> v = {kAbsent, kAbsent, kAbsent, kAbsent};
  Pass pass = Pass::kNone;

  int32_t get(TagKey k) const { return v[static_cast<size_t>(k)]; }
  void set(TagKey k, int32_t x) { v[static_cast<size_t>(k)] = x; }
  int32_t pp() const { return get(TagKey::kPP); }
  int32_t ep() const { return get(TagKey::kEP); }
  int32_t layer() const { return get(TagKey::kLayer); }
  int32_t mb() const { return get(TagKey::kMB); }
  /// "PP1 MB3 F" style, user-facing.
  std::string str() const;
  bool operator==(const Tags&) const = default;
};

struct TagCond {
  enum Kind : uint8_t { kAny, kPresent, kAbsentOnly, kEquals } kind = kAny;
  int32_t value = 0;
  bool operator==(const TagCond&) const = default;
  bool matches(int32_t x) const {
    switch (kind) {
      case kAny:
        return true;
      case kPresent:
        return x != kAbsent;
      case kAbsentOnly:
        return x == kAbsent;
      case kEquals:
        return x == value;
    }
    return false;
  }
};

struct Filter {
  std::array<TagCond, 4> cond{};
  std::optional<Pass> pass;  // nullopt = any pass (including kNone)
  std::string pointer;       // JSON pointer of the filter object in the plan
  bool matches(const Tags& t) const {
    for (size_t i = 0; i < cond.size(); ++i)
      if (!cond[i].matches(t.v[i])) return false;
    return !pass || *pass == t.pass;
  }
  /// Canonical JSON-ish text: {"PP":0,"MB":"*","PASS":"F"}.
  std::string str() const;
};

}  // namespace stretto::plan
