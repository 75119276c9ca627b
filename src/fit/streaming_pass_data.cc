// The streaming strategy's data path (objective.h MakeStreamingPassData, DESIGN section 3):
// every fetch reads its batches from the file; with prefetch, the next fetch's batches are read
// by a background thread into the second of two buffers while the current ones are computed.
#include <algorithm>
#include <future>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/objective.h"

namespace homodyne {
namespace {

// The batches [first, last) of every angle, read into one buffer: batch by batch, angle by angle.
struct ChunkBuffer {
  int first = -1;
  int last = -1;
  std::vector<float> values;
  std::vector<size_t> starts;  // per (batch, angle): first value in `values`
};

// Reads batches [first, last); `chunk` holds exactly those batches.
void ReadChunk(BatchSource& source, std::span<const RowBatch> chunk, int first, int last,
               int num_angles, ChunkBuffer& buffer) {
  size_t total = 0;
  for (const RowBatch& batch : chunk) total += static_cast<size_t>(batch.points) * num_angles;
  // Never shrinks: the buffers settle at the largest chunk, so memory stays constant per pass.
  if (buffer.values.size() < total) buffer.values.resize(total);
  buffer.starts.clear();
  size_t start = 0;
  for (const RowBatch& batch : chunk) {
    for (int k = 0; k < num_angles; ++k) {
      buffer.starts.push_back(start);
      source.ReadUpperTriangleRows(
          k, batch.row_begin, batch.row_end,
          std::span<float>(buffer.values.data() + start, static_cast<size_t>(batch.points)));
      start += static_cast<size_t>(batch.points);
    }
  }
  buffer.first = first;
  buffer.last = last;
}

class StreamingPassData : public PassData {
 public:
  StreamingPassData(BatchSource& source, bool prefetch) : source_(source), prefetch_(prefetch) {}
  // Waits for a read in flight: the source is the caller's again afterwards.
  ~StreamingPassData() override {
    if (pending_.valid()) {
      try {
        pending_.get();
      } catch (...) {
        // A failed read nobody asked for any more (the fit is over or failing already).
      }
    }
  }

  void Fetch(std::span<const RowBatch> batches, int first, int last, int num_angles,
             std::vector<const float*>& pointers) override {
    bool fetched = false;
    if (pending_.valid()) {
      pending_.get();  // rethrows the background read's DataError
      const ChunkBuffer& prefetched = buffers_[1 - current_];
      if (prefetched.first == first && prefetched.last == last) {
        current_ = 1 - current_;
        fetched = true;
      }
    }
    if (!fetched) {
      ReadChunk(source_,
                batches.subspan(static_cast<size_t>(first), static_cast<size_t>(last - first)),
                first, last, num_angles, buffers_[current_]);
    }
    const ChunkBuffer& ready = buffers_[current_];
    pointers.clear();
    for (size_t s = 0; s < ready.starts.size(); ++s) {
      pointers.push_back(ready.values.data() + ready.starts[s]);
    }
    chunk_ = std::max(chunk_, last - first);  // only a pass's last fetch is shorter
    if (prefetch_) StartPrefetch(batches, last, num_angles);
  }

 private:
  // Reads the fetch expected next: the following chunk of this pass, or the first of the next.
  void StartPrefetch(std::span<const RowBatch> batches, int next, int num_angles) {
    const int num_batches = static_cast<int>(batches.size());
    const int first = next < num_batches ? next : 0;
    const int last = std::min(first + chunk_, num_batches);
    ChunkBuffer& target = buffers_[1 - current_];
    // The task owns a copy of its batches: it may outlive the caller's batch list (a read in
    // flight when the objective is destroyed is waited for in this object's destructor).
    std::vector<RowBatch> chunk(batches.begin() + first, batches.begin() + last);
    pending_ = std::async(std::launch::async,
                          [this, chunk = std::move(chunk), first, last, num_angles, &target] {
                            ReadChunk(source_, chunk, first, last, num_angles, target);
                          });
  }

  BatchSource& source_;
  bool prefetch_;
  ChunkBuffer buffers_[2];
  int current_ = 0;
  int chunk_ = 1;  // batches per fetch: the largest fetch seen
  std::future<void> pending_;
};

}  // namespace

std::unique_ptr<PassData> MakeStreamingPassData(BatchSource& source, bool prefetch) {
  return std::make_unique<StreamingPassData>(source, prefetch);
}

}  // namespace homodyne
