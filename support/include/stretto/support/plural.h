#pragma once
// Counts in messages for people: "1 microbatch", "4 microbatches".
#include <fmt/format.h>

#include <string>
#include <string_view>

namespace stretto {

/// A count and its noun, singular for exactly one.
inline std::string count_noun(long long n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace stretto
