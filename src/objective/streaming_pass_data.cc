// The streaming strategy's data path (batched_objective.h MakeStreamingPassData,
// docs/design.md section 3): every fetch reads its batches from the file; with prefetch, a reader
// thread of its own (one per data path, for its whole life) reads the next fetch's batches into the
// second of two buffers while the current ones are computed, so a fetch waits only for what is
// left of that read. A failed batch read is retried with backoff (docs/design.md section 7) before
// the fit is stopped; the reader's error (naming file, dataset, batch and rows) is rethrown by the
// next Fetch, on the caller's thread.
//
// Fault point (src/base/fault_injection.h): an installed injector can make the reads of a
// batch fail, as a truncated file or an unreadable dataset would, so retries and the stop can be
// tested.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/fault_injection.h"
#include "homodyne/errors.h"
#include "objective/batched_objective.h"
#include "objective/c2_rows.h"

namespace homodyne {
namespace {

// The batches [first, last) of every angle, read into one buffer: batch by batch, angle by angle.
struct ChunkBuffer {
  int first = -1;
  int last = -1;
  std::vector<float> values;
  std::vector<size_t> starts;  // per (batch, angle): first value in `values`
};

class StreamingPassData : public PassData {
 public:
  StreamingPassData(BatchSource& source, StreamingReadOptions options)
      : source_(source),
        options_(options),
        faults_(InstalledFaultInjector()),
        prefetch_threads_(omp_get_max_threads()) {}
  // Lets a read in flight finish, then ends the reader thread: the source is the caller's again
  // afterwards.
  ~StreamingPassData() override {
    if (!reader_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_reader_.notify_one();
    reader_.join();
  }

  void Fetch(std::span<const RowBatch> batches, int first, int last, int num_angles,
             std::vector<const float*>& pointers) override {
    bool fetched = false;
    if (reader_.joinable()) {
      WaitForReader();  // rethrows the reader's DataError
      const ChunkBuffer& prefetched = buffers_[1 - current_];
      if (prefetched.first == first && prefetched.last == last) {
        current_ = 1 - current_;
        fetched = true;
      }
    }
    if (!fetched) {
      ReadChunk(batches.subspan(static_cast<size_t>(first), static_cast<size_t>(last - first)),
                first, last, num_angles, buffers_[current_]);
    }
    const ChunkBuffer& ready = buffers_[current_];
    pointers.clear();
    for (size_t s = 0; s < ready.starts.size(); ++s) {
      pointers.push_back(ready.values.data() + ready.starts[s]);
    }
    chunk_ = std::max(chunk_, last - first);  // only a pass's last fetch is shorter
    if (options_.prefetch) {
      if (expected_next_) {
        StartPrefetchOf(batches, expected_next_->first, expected_next_->second, num_angles);
        expected_next_.reset();
      } else {
        StartPrefetch(batches, last, num_angles);
      }
    }
  }

  void ExpectNextFetch(int first, int last) override { expected_next_.emplace(first, last); }

  int64_t read_retries() const override { return retries_.load(); }

 private:
  // Reads batches [first, last); `chunk` holds exactly those batches. Runs on the caller's
  // thread or the prefetch thread, never on both at once. Angle by angle, the chunk's batches lie
  // next to each other in row order, which is the packed upper triangle of the chunk's rows: one
  // read per angle fetches them all (one preadv for direct reads, docs/design.md section 8), or
  // one per angle and piece of rows the source prepares (compressed chunks). If a read fails, or
  // a fault is injected into one of the batches, that angle's batches are read one by one with
  // their retries, so the retries and the error are those of the batch that fails.
  void ReadChunk(std::span<const RowBatch> chunk, int first, int last, int num_angles,
                 ChunkBuffer& buffer) {
    // Holds no chunk until the read succeeds: a failed read leaves part-written values behind.
    buffer.first = buffer.last = -1;
    size_t chunk_points = 0;  // per angle
    bool consecutive = true;
    for (size_t c = 0; c < chunk.size(); ++c) {
      chunk_points += static_cast<size_t>(chunk[c].points);
      if (c > 0) {
        consecutive = consecutive && chunk[c].row_begin == chunk[c - 1].row_end &&
                      chunk[c].offset == chunk[c - 1].offset + chunk[c - 1].points;
      }
    }
    const size_t total = chunk_points * static_cast<size_t>(num_angles);
    // Never shrinks: the buffers settle at the largest chunk, so memory stays constant per pass.
    if (buffer.values.size() < total) buffer.values.resize(total);
    // starts[c * num_angles + k]: batch c of angle k, in the order Fetch hands them out.
    buffer.starts.assign(chunk.size() * static_cast<size_t>(num_angles), 0);
    for (int k = 0; k < num_angles; ++k) {
      size_t start = static_cast<size_t>(k) * chunk_points;
      for (size_t c = 0; c < chunk.size(); ++c) {
        buffer.starts[c * static_cast<size_t>(num_angles) + static_cast<size_t>(k)] = start;
        start += static_cast<size_t>(chunk[c].points);
      }
    }
    // The chunk's rows, angle after angle, in the pieces the source prepares (PrefetchRows:
    // compressed chunks decoded on the passes' threads; dataset.h): every angle's rows of a piece
    // are read before the next piece is prepared. An angle whose read fails is read again batch by
    // batch below, with retries.
    std::vector<char> read_whole(static_cast<size_t>(num_angles), 0);
    if (consecutive && chunk.size() > 1 && !FaultInjectedInto(first, last)) {
      std::fill(read_whole.begin(), read_whole.end(), 1);
      const int row_begin = chunk.front().row_begin;
      const int row_end = chunk.back().row_end;
      const int64_t n = source_.info().num_times();
      const int64_t origin = UpperTriangleRowOffset(n, row_begin);
      for (int piece_begin = row_begin; piece_begin < row_end;) {
        const int piece_end =
            std::clamp(source_.PrefetchRows(piece_begin, row_end, prefetch_threads_),
                       piece_begin + 1, row_end);
        const size_t offset = static_cast<size_t>(UpperTriangleRowOffset(n, piece_begin) - origin);
        const size_t points = static_cast<size_t>(UpperTriangleRowsSize(n, piece_begin, piece_end));
        for (int k = 0; k < num_angles; ++k) {
          if (!read_whole[static_cast<size_t>(k)]) continue;
          float* angle_values = buffer.values.data() + static_cast<size_t>(k) * chunk_points;
          try {
            ReadC2Rows(source_, k, piece_begin, piece_end,
                       std::span<float>(angle_values + offset, points));
          } catch (const Error&) {
            read_whole[static_cast<size_t>(k)] = 0;
          }
        }
        piece_begin = piece_end;
      }
    }
    for (int k = 0; k < num_angles; ++k) {
      if (read_whole[static_cast<size_t>(k)]) continue;
      for (size_t c = 0; c < chunk.size(); ++c) {
        const RowBatch& batch = chunk[c];
        ReadWithRetries(
            first + static_cast<int>(c), batch, k,
            std::span<float>(
                buffer.values.data() +
                    buffer.starts[c * static_cast<size_t>(num_angles) + static_cast<size_t>(k)],
                static_cast<size_t>(batch.points)));
      }
    }
    buffer.first = first;
    buffer.last = last;
  }

  // Whether the installed injector fails a read of one of batches [first, last).
  bool FaultInjectedInto(int first, int last) const {
    if (faults_ == nullptr) return false;
    for (int b = first; b < last; ++b) {
      if (faults_->FailBatchRead(b)) return true;
    }
    return false;
  }

  // One batch of one angle, retried max_retries times with doubling backoff; then a DataError
  // naming the file, the dataset, the batch and its rows.
  void ReadWithRetries(int batch_index, const RowBatch& batch, int angle, std::span<float> out) {
    const RowReadRetries retries{
        .max_retries = options_.max_retries,
        .backoff_seconds = options_.retry_backoff_seconds,
        .rows_name = "batch " + std::to_string(batch_index),
        .retry_count = &retries_,
        .before_each_read =
            [this, batch_index] {
              if (faults_ != nullptr && faults_->FailBatchRead(batch_index)) {
                throw DataError("injected read fault");
              }
            },
    };
    ReadC2Rows(source_, angle, batch.row_begin, batch.row_end, out, &retries);
  }

  // A read the reader thread is asked to make: batches [first, last) (a copy: the caller's batch
  // list may be gone when it runs) into `target`.
  struct ReadRequest {
    std::vector<RowBatch> chunk;
    int first = 0;
    int last = 0;
    int num_angles = 0;
    ChunkBuffer* target = nullptr;
  };

  // Waits until the reader has no request pending or in progress; rethrows its error, if any.
  void WaitForReader() {
    std::unique_lock<std::mutex> lock(mutex_);
    read_done_.wait(lock, [this] { return !request_ && !reading_; });
    if (error_) {
      std::exception_ptr error = std::exchange(error_, nullptr);
      std::rethrow_exception(error);
    }
  }

  // The reader thread: one request at a time, until stop_.
  void ReaderLoop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_reader_.wait(lock, [this] { return stop_ || request_.has_value(); });
      if (stop_) return;
      ReadRequest request = std::move(*request_);
      request_.reset();
      reading_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        ReadChunk(request.chunk, request.first, request.last, request.num_angles, *request.target);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      reading_ = false;
      error_ = error;
      read_done_.notify_all();
    }
  }

  // Asks the reader for the fetch expected next: the following chunk of this pass, or the first
  // of the next. The reader is idle (Fetch waited for it).
  void StartPrefetch(std::span<const RowBatch> batches, int next, int num_angles) {
    const int num_batches = static_cast<int>(batches.size());
    const int first = next < num_batches ? next : 0;
    StartPrefetchOf(batches, first, std::min(first + chunk_, num_batches), num_angles);
  }
  // Asks the reader for batches [first, last) (first < last).
  void StartPrefetchOf(std::span<const RowBatch> batches, int first, int last, int num_angles) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      request_ = ReadRequest{std::vector<RowBatch>(batches.begin() + first, batches.begin() + last),
                             first, last, num_angles, &buffers_[1 - current_]};
    }
    if (!reader_.joinable()) {
      reader_ = std::thread([this] { ReaderLoop(); });
    } else {
      wake_reader_.notify_one();
    }
  }

  BatchSource& source_;
  StreamingReadOptions options_;
  const FaultInjector* faults_;  // the injector installed at construction, or nullptr
  // The threads a chunk's reads may decompress on (BatchSource::PrefetchRows): the passes' count,
  // read here on the constructing thread (the reader thread has OpenMP's default).
  const int prefetch_threads_;
  ChunkBuffer buffers_[2];
  int current_ = 0;
  int chunk_ = 1;                                     // batches per fetch: the largest fetch seen
  std::optional<std::pair<int, int>> expected_next_;  // ExpectNextFetch's, for the next Fetch
  std::atomic<int64_t> retries_{0};
  // The reader thread (started by the first prefetch) and what it shares with Fetch, under mutex_.
  std::mutex mutex_;
  std::condition_variable wake_reader_;  // a request or stop_
  std::condition_variable read_done_;    // the request taken and read (or failed)
  std::optional<ReadRequest> request_;   // asked for, not yet taken by the reader
  bool reading_ = false;                 // the reader is reading a request
  bool stop_ = false;
  std::exception_ptr error_;  // the last read's failure, until a Fetch rethrows it
  std::thread reader_;        // last: started after the state above exists, joined first
};

}  // namespace

std::unique_ptr<PassData> MakeStreamingPassData(BatchSource& source, StreamingReadOptions options) {
  return std::make_unique<StreamingPassData>(source, options);
}

std::unique_ptr<PassData> MakeStreamingPassData(BatchSource& source, bool prefetch) {
  StreamingReadOptions options;
  options.prefetch = prefetch;
  return MakeStreamingPassData(source, options);
}

}  // namespace homodyne
