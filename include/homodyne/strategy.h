// The four fitting strategies of DESIGN section 3.
#pragma once

#include <optional>
#include <string_view>

namespace homodyne {

enum class StrategyKind { kStandard, kLarge, kChunked, kStreaming };

// "standard", "large", "chunked", "streaming".
std::string_view ToString(StrategyKind kind);
// Case-insensitive; std::nullopt for an unknown name.
std::optional<StrategyKind> ParseStrategyKind(std::string_view text);

}  // namespace homodyne
