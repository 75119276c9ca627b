// The one read of c2 rows from a data source for the fit: the objective's data (in memory, row
// subsample, streamed), the scaling estimate of streamed data and the checkpoints' data
// fingerprint all read through ReadC2Rows, so they read the same values in the same way.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "homodyne/dataset.h"

namespace homodyne {

// How a failed read is retried (docs/design.md section 7; the streaming strategy's batches).
struct RowReadRetries {
  int max_retries = 0;           // retries after a failed first read, >= 0
  double backoff_seconds = 0.0;  // wait before the first retry; doubled before each next one
  std::string rows_name;         // names the rows in the final error, e.g. "batch 7"
  // Incremented once per retry, before its wait, if not null (the pass's read-retry count).
  std::atomic<int64_t>* retry_count = nullptr;
  // Called before each read, if set: what it throws counts as a failed read (a test's fault).
  std::function<void()> before_each_read;
};

// Rows [row_begin, row_end) of angle `angle`, the packed strict upper triangle as
// BatchSource::ReadUpperTriangleRows gives it (float32), into `out` of
// UpperTriangleRowsSize(N, row_begin, row_end) values.
// Without `retries` a failed read throws the source's error unchanged (a DataError naming file and
// dataset). With it, a read that throws an Error is retried retries->max_retries times, waiting
// backoff_seconds, then twice that, ...; after the last it throws DataError
//   "FILE: dataset DATASET: ROWS_NAME (fitted rows A-B) could not be read after R retries: ERROR"
// with B = row_end - 1 and ERROR the last failure's message.
void ReadC2Rows(BatchSource& source, int angle, int row_begin, int row_end, std::span<float> out,
                const RowReadRetries* retries = nullptr);

}  // namespace homodyne
