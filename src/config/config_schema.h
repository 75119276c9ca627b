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

// True for a known key (leaf, section or free-form path) that is accepted and has no effect here
// (docs/configuration.md, Accepted but not used), the documentation-only keys (metadata,
// analysis_settings, units, priors, ...) left out: a section or free-form path true here has no
// effect with everything below it.
bool HasNoEffect(const std::string& schema_path);

}  // namespace homodyne::config_internal
