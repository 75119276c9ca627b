// The table of YAML key paths homodyne-cpp knows (private to src/config).
//
// Paths are dot-separated; "[]" stands for "any element of a sequence" (e.g.
// "parameter_space.bounds[].min"). A path is one of:
// - a leaf: a known key whose value the loader reads (or accepts and ignores);
// - a section: a mapping (or a sequence of mappings) that has known keys below it;
// - free-form: a subtree accepted with any content (metadata.*, optimization.cmc.*, ...);
// - unknown: anything else; the loader warns and names the closest known key.
#pragma once

#include <string>
#include <vector>

namespace homodyne::config_internal {

enum class KeyKind { kUnknown, kLeaf, kSection, kFreeForm };

// Classifies a schema path (indices written as "[]").
KeyKind ClassifyKey(const std::string& schema_path);

// The known leaf or free-form path closest to schema_path by edit distance (ties: first in the
// table). Never empty.
std::string ClosestKnownKey(const std::string& schema_path);

// Every known leaf and free-form path ("prefix.*"), in table order.
const std::vector<std::string>& KnownKeys();

}  // namespace homodyne::config_internal
