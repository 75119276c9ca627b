#include <algorithm>
#include <cctype>
#include <string>

#include "homodyne/strategy.h"

namespace homodyne {

std::string_view ToString(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kStandard:
      return "standard";
    case StrategyKind::kLarge:
      return "large";
    case StrategyKind::kChunked:
      return "chunked";
    case StrategyKind::kStreaming:
      return "streaming";
  }
  return "unknown";
}

std::optional<StrategyKind> ParseStrategyKind(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (StrategyKind kind : {StrategyKind::kStandard, StrategyKind::kLarge, StrategyKind::kChunked,
                            StrategyKind::kStreaming}) {
    if (lower == ToString(kind)) return kind;
  }
  return std::nullopt;
}

}  // namespace homodyne
