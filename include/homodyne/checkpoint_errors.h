// The error of a checkpoint that belongs to another fit, whose advice each shell words its own
// way (docs/checkpoints.md, How resume picks a file).
#pragma once

#include <string>
#include <string_view>

#include "homodyne/errors.h"

namespace homodyne {

// A checkpoint in the checkpoint folder written for another config or data set (CheckpointStore::
// LoadNewestValid, CheckCheckpointFits). Its message ends with the way to start afresh, which the
// shell names: what() with the command line's flag ("...; remove it or use --no-resume"),
// Message() with another shell's (Python's "resume=False").
class CheckpointMismatchError : public InputError {
 public:
  // The command line's way to start afresh: what() ends with it.
  static constexpr std::string_view kCommandLineFreshStart = "--no-resume";

  // `before_fresh_start`: the message up to the way to start afresh, e.g. "<file>: checkpoint was
  // written for a different config (...); remove it or use ".
  explicit CheckpointMismatchError(const std::string& before_fresh_start)
      : InputError(before_fresh_start + std::string(kCommandLineFreshStart)),
        before_fresh_start_(before_fresh_start) {}

  // The message with `fresh_start` as the way to start afresh.
  std::string Message(std::string_view fresh_start) const {
    return before_fresh_start_ + std::string(fresh_start);
  }

 private:
  std::string before_fresh_start_;
};

}  // namespace homodyne
