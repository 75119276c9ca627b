// The one read of c2 rows (c2_rows.h).
#include "objective/c2_rows.h"

#include <chrono>
#include <thread>

#include "homodyne/errors.h"

namespace homodyne {

void ReadC2Rows(BatchSource& source, int angle, int row_begin, int row_end, std::span<float> out,
                const RowReadRetries* retries) {
  if (retries == nullptr) {
    source.ReadUpperTriangleRows(angle, row_begin, row_end, out);
    return;
  }
  std::chrono::duration<double> backoff(retries->backoff_seconds);
  for (int attempt = 0;; ++attempt) {
    try {
      if (retries->before_each_read) retries->before_each_read();
      source.ReadUpperTriangleRows(angle, row_begin, row_end, out);
      return;
    } catch (const Error& error) {
      if (attempt >= retries->max_retries) {
        const DatasetInfo& info = source.info();
        throw DataError(info.file_path + ": dataset " +
                        info.angles[static_cast<size_t>(angle)].dataset_path + ": " +
                        retries->rows_name + " (fitted rows " + std::to_string(row_begin) + "-" +
                        std::to_string(row_end - 1) + ") could not be read after " +
                        std::to_string(retries->max_retries) + " retries: " + error.what());
      }
      if (retries->retry_count != nullptr) retries->retry_count->fetch_add(1);
      std::this_thread::sleep_for(backoff);
      backoff *= 2.0;
    }
  }
}

}  // namespace homodyne
