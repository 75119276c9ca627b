// The chi2 objective of docs/design.md section 1 as passes over a fixed list of batches: the data
// path of the large, chunked and streaming strategies (docs/design.md section 3). They differ only
// in where a batch's data come from (PassData: packed arrays in memory, or the HDF5 file on every
// pass) and in how many batches a chunk holds (progress and the checkpoint hook run between
// chunks); the per-batch sums and their batch-order reduction are the same, so the three return
// bitwise the same normal equations for the same batch size, whatever the threads or chunk size.
//
// Parameter vector layout (P = P_phys + 2 n_angles):
//   theta = [physical_0 .. physical_{P_phys-1},             PhysicalParameterNames order
//            contrast_0 .. contrast_{n-1},                   one per angle, angle order
//            offset_0   .. offset_{n-1}]                     one per angle, angle order
// (the reference orders contrasts, offsets, physical; callers map to results by these indices).
//
// Residuals follow least_squares_problem.h: r = (data - model) / sigma, J = dr/dtheta. Only the
// strict upper triangle is evaluated; every point counts twice (chi2, J^T J, J^T r are doubled and
// num_residuals() is twice the number of finite points), which equals the fit of the full
// symmetric matrices without the diagonal. Non-finite data points are skipped and counted.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "checkpoint/checkpoint_state.h"
#include "homodyne/dataset.h"
#include "homodyne/fit_events.h"
#include "homodyne/model.h"
#include "homodyne/process_group.h"
#include "homodyne/robust_loss.h"
#include "model/robust_loss.h"
#include "objective/frame_block_sums.h"
#include "objective/least_squares_problem.h"

namespace homodyne {

// One batch: rows [row_begin, row_end) of the strict upper triangle of every angle
// (docs/design.md section 3; the rows of all angles together, so the angle-independent factors
// are shared). A row subsample's batch (MakeRowSubsampleObjective) holds every row_stride-th row
// of that range, row_begin first, their points one after the other from offset; only a backend
// whose SupportsRowStride() is true is given such batches.
struct RowBatch {
  int row_begin = 0;
  int row_end = 0;
  int64_t offset = 0;  // first point of row_begin in an angle's data (dataset.h order)
  int64_t points = 0;  // points per angle
  int row_stride = 1;
};

// Calls row(i, first_point, points) for each row i of the batch, in order: first_point is the
// row's first point relative to batch.offset, points its points (n_times - 1 - i).
template <typename Row>
void ForEachRowOf(const RowBatch& batch, int n_times, Row row) {
  int64_t first_point = 0;
  for (int i = batch.row_begin; i < batch.row_end; i += batch.row_stride) {
    const int64_t points = n_times - 1 - i;
    row(i, first_point, points);
    first_point += points;
  }
}

// Runs of whole rows of the strict upper triangle of n_times times, each closed once it holds
// >= batch_points points per angle (the last may hold fewer). batch_points >= 1.
std::vector<RowBatch> SplitIntoBatches(int n_times, int64_t batch_points);

// Where a pass gets its batches' data. One interface for in-memory and streamed data.
class PassData {
 public:
  virtual ~PassData() = default;
  // Makes batches[first, last) available; pointers receives (last - first) * num_angles values:
  // for batch b and angle k, pointers[(b - first) * num_angles + k] points at that batch's
  // batches[b].points values of angle k. They stay valid until the next Fetch. A pass fetches
  // consecutive ranges from 0 to the end; the next pass starts at 0 again. Read failures throw
  // DataError (they end the fit; levenberg_marquardt.h).
  virtual void Fetch(std::span<const RowBatch> batches, int first, int last, int num_angles,
                     std::vector<const float*>& pointers) = 0;
  // A hint: the Fetch after the next one asks for batches [first, last) (first < last), not the
  // range that follows it (a rank of a distributed pass fetches only its share of each chunk).
  // Data read ahead (streaming's prefetch) read those; others ignore it.
  virtual void ExpectNextFetch(int /*first*/, int /*last*/) {}
  // Batch reads retried so far (docs/design.md section 7 batch statistics); 0 for data in memory.
  virtual int64_t read_retries() const { return 0; }
  // Keeps only batches[first, last) of each run (sorted, disjoint; data in memory free the rest):
  // a rank of a distributed pass computes only those (BatchedObjective::KeepOwnShare). Later
  // fetches must stay within one run. Data read from the file on every pass ignore it.
  virtual void KeepOnly(std::span<const RowBatch> /*batches*/,
                        std::span<const std::pair<int, int>> /*runs*/, int /*num_angles*/) {}
  // Nonzero when every pointer Fetch hands out stays valid, its values unchanged, for as long
  // as this id is returned (data in memory); a data object that replaces its values (KeepOnly)
  // takes a new id, and no two data objects of a process ever return the same nonzero id
  // (NewStableDataId). 0: Fetch may reuse its buffers for other values (streaming). The
  // objective passes it to its backend (pass_backend.h PassPoint::stable_data_id), so a device
  // backend keeps stable data on the device, uploaded once (docs/backends.md).
  virtual uint64_t stable_data_id() const { return 0; }
};

// A nonzero id no earlier call of this process returned (thread-safe): the identity of a set of
// stable data (PassData::stable_data_id).
uint64_t NewStableDataId();

// The batches a rank of `size` ranks computes in every pass of an objective on `batches` whose
// chunks hold chunk_batches batches (BatchedObjective's pass chunk: chunks start at multiples of
// it): one run [first, last) per chunk where the rank has a share, sorted and disjoint. The
// shares depend only on the batch list, the chunk size and the rank count (docs/design.md
// section 5b), so a rank can read its rows before its objective exists.
std::vector<std::pair<int, int>> RankShareRuns(std::span<const RowBatch> batches, int chunk_batches,
                                               int rank, int size);

// Packed strict upper triangles held in memory (large and chunked strategies).
class InMemoryPassData : public PassData {
 public:
  // One packed strict upper triangle per angle (dataset.h order, UpperTriangleSize(N) values).
  using PackedData = std::vector<std::vector<float>>;
  explicit InMemoryPassData(PackedData data)
      : data_(std::move(data)), stable_data_id_(NewStableDataId()) {}
  // Only the rows of batches[first, last) of each run (sorted, disjoint; RankShareRuns) of every
  // angle, read from the source in blocks of whole rows (about rows_block_points points per read,
  // rows that follow each other in one read): what KeepOnly(batches, runs) keeps of the whole
  // data, the same floats, without ever holding the rest. Propagates the source's DataError.
  static std::unique_ptr<InMemoryPassData> ReadRuns(BatchSource& source,
                                                    std::span<const RowBatch> batches,
                                                    std::span<const std::pair<int, int>> runs,
                                                    int64_t rows_block_points = 1 << 20);
  void Fetch(std::span<const RowBatch> batches, int first, int last, int num_angles,
             std::vector<const float*>& pointers) override;
  // Keeps only the runs' values; afterwards data() holds them, run after run. Data that hold
  // exactly these runs already (ReadRuns, or a KeepOnly before) are left as they are; other runs
  // than those held are a logic error.
  void KeepOnly(std::span<const RowBatch> batches, std::span<const std::pair<int, int>> runs,
                int num_angles) override;
  // Every angle's values: the packed triangles, or after KeepOnly (or ReadRuns) the kept runs
  // only.
  const PackedData& data() const { return data_; }
  // The rows data() holds, ascending (row i's segment j = i+1..N-1 of the packed triangle, one
  // after another): every row of the triangle, or those of the kept runs.
  std::vector<int> HeldRows(std::span<const RowBatch> batches) const;
  // Stable: the arrays are never written after construction; KeepOnly, which replaces them,
  // takes a new id.
  uint64_t stable_data_id() const override { return stable_data_id_; }

 private:
  struct Run {
    int first = 0;  // batches [first, last)
    int last = 0;
    int64_t held_offset = 0;   // where the run's values start in data_'s arrays
    int64_t source_begin = 0;  // ... and where they were before KeepOnly
    int64_t source_end = 0;
  };
  // The runs' places in data_ (held run after run) and in the full packed triangle.
  static std::vector<Run> PlaceRuns(std::span<const RowBatch> batches,
                                    std::span<const std::pair<int, int>> runs, int64_t* held);
  PackedData data_;
  std::vector<Run> runs_;  // empty: every batch, at its offset
  uint64_t stable_data_id_;
};

// Batches read from the file on every pass (streaming strategy): the batches of the next fetch
// are read by a background thread while the current ones are computed (double buffering, when
// prefetch is on), so memory holds two chunks whatever the data size. The source must outlive
// this object and must not be used by anyone else while it exists (HDF5 is not thread-safe).
// prefetch = false reads on demand (same values, for tests and debugging).
struct StreamingReadOptions {
  bool prefetch = true;  // read the next chunk in the background (false: on demand, same values)
  int max_retries = 2;   // optimization.streaming.max_retries_per_batch: retries of a failed read
  double retry_backoff_seconds = 0.05;  // wait before the first retry; doubles each retry
};
// A failed batch read is retried options.max_retries times; then Fetch throws DataError naming the
// file, the dataset, the batch and its rows.
std::unique_ptr<PassData> MakeStreamingPassData(BatchSource& source, StreamingReadOptions options);
std::unique_ptr<PassData> MakeStreamingPassData(BatchSource& source, bool prefetch = true);

// Thrown by a pass that PassOptions::stop_requested stopped between two chunks (an interruption
// asked for by a signal: the caller saves what it can and stops).
class PassInterrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PassOptions {
  int64_t batch_points = 10000;  // points per angle per batch (docs/design.md section 3), >= 1
  // Batches per chunk; 0 = 1024. Chunks bound scratch memory and the time between the checks
  // below; a chunk holds at most 2^24 points per angle (at least one batch) whatever this says.
  int chunk_batches = 0;
  std::function<void(const PassProgress&)> on_chunk;  // optional, after every chunk
  // optimization.nlsq.{loss, f_scale} (docs/model.md, Robust loss): what Accumulate and Cost
  // minimise. Linear: chi2. Otherwise chi2, J^T J and J^T r of the NormalEquations are the robust
  // objective 2 cost = f_scale^2 sum rho(z) over both triangles and scipy's rescaled J^T J, J^T r.
  LossOptions loss;
  // The ranks that share the passes (include/homodyne/process_group.h; null = this process
  // alone). Each rank computes a contiguous share of every chunk's batches; the per-batch sums
  // are gathered and reduced in batch order on every rank, so every rank returns bitwise what
  // one process returns (docs/design.md section 5b). Every rank must make the same passes.
  std::shared_ptr<ProcessGroup> group;
  // Optional, polled between two chunks of every pass (not after the last): true abandons the
  // pass, whose partial sums are lost, with PassInterrupted. On several ranks (group) it must
  // return the same on every rank at the same point (a collective check).
  std::function<bool()> stop_requested;
};

class PassBackend;   // backend.h: computes the per-batch sums of a pass
class PreparedPass;  // backend.h: a backend bound to one point

// Which columns of [J | e] a prepared pass's Gram matrices cover (pass_backend.h,
// PassPoint::columns).
//   kAll: every column, [d c2 / d(physical..., contrast_k, offset_k) | e] (M + 1 = P_phys + 3);
//   kScaling: the scaling columns and e only, [d c2 / d contrast_k, d c2 / d offset_k, e] (3):
//     the sums that the projected chi2 of variable projection needs (variable_projection.h),
//     for about the price of a cost pass on the CPU. Linear loss only.
//   kSummedPhysical: kAll's columns, but of the physical block (the physical parameters' rows
//     and columns) only the sum over the angles is defined: a backend may hold it in any angle's
//     block and leave the others' 0 (every other entry is kAll's, to rounding). Per-angle blocks
//     meet it, so a backend without a kernel of its own (the device backends, the homodyne modes
//     on the CPU) gives kAll's; the CPU's two-component body sums the angles in the pass under
//     the linear loss (docs/design.md section 2, The two-component physical block summed over the
//     angles), for variable projection's passes at the scaling they solved (variable_projection.h).
enum class PassColumns { kAll, kScaling, kSummedPhysical };

// Per-angle sums of one full pass, for variable projection (variable_projection.h).
struct AngleGrams {
  // grams[k]: for angle k, the Gram matrix G = [J | e]^T [J | e] over its finite points, with
  //   J = d c2 / d(physical..., contrast_k, offset_k)   (M = P_phys + 2 columns, model units)
  //   e = data - c2                                      (column M)
  // at the evaluated theta (a PassColumns::kScaling pass: the 3 x 3 matrices of the contrast_k,
  // offset_k and e columns); unscaled (no 1/sigma^2, each point once), full symmetric, and
  // reduced in batch order (deterministic). In the objective's scaling the pass's chi2 is
  // 2 / sigma^2 * sum_k G_k(M, M). A weighted pass (AccumulateAngleGrams) has each row of
  // [J | e] times sqrt(rho'(z)) and s^2 sum rho(z) in G_k(M, M): its robust cost.
  std::vector<Eigen::MatrixXd> grams;
  int64_t finite_points = 0;  // finite upper-triangle points of all angles
};

// The range of an objective's finite data values (BatchedObjective::finite_value_range), for the
// checks a fit makes before trusting itself (src/pipeline/fit_data_check.h). complete: every
// batch has been seen (data in memory: from construction; streamed data: once passes have
// fetched every batch); before that the range covers the batches seen. Empty (min > max) when no
// finite value has been seen.
struct FiniteValueRange {
  float min = std::numeric_limits<float>::infinity();
  float max = -std::numeric_limits<float>::infinity();
  bool complete = false;
};

class BatchedObjective : public LeastSquaresProblem {
 public:
  // model: the fitted grid (N = model.num_times()). phi_degrees: one angle per data angle.
  // sigma > 0: the per-point noise (optimization.nlsq.sigma). backend: computes each chunk's
  // per-batch sums (backend.h; null = the CPU backend); the objective reduces them in batch
  // order, so every backend that gives the same per-batch sums gives the same passes. Throws
  // std::invalid_argument on inconsistent sizes or values.
  BatchedObjective(HomodyneModel model, std::vector<double> phi_degrees, double sigma,
                   std::unique_ptr<PassData> data, PassOptions options,
                   std::shared_ptr<PassBackend> backend = nullptr);
  // The same on an explicit batch list (any rows, in pass order; offsets index the data's
  // arrays): e.g. a subsample of rows (MakeRowSubsampleObjective). options.batch_points is
  // ignored.
  BatchedObjective(HomodyneModel model, std::vector<double> phi_degrees, double sigma,
                   std::unique_ptr<PassData> data, PassOptions options,
                   std::vector<RowBatch> batches, std::shared_ptr<PassBackend> backend = nullptr);

  int num_parameters() const override { return num_physical_ + 2 * num_angles(); }
  // 2 * (finite upper-triangle points), as counted by the last Accumulate (or the data set's
  // count when known before the first pass).
  int64_t num_residuals() const override { return 2 * num_finite_points_; }
  NormalEquations Accumulate(const Eigen::VectorXd& theta) override;
  double Cost(const Eigen::VectorXd& theta) override;
  // The plain sum of squared residuals sum r^2 (both triangles) at theta, whatever the loss: the
  // reported chi2 of a robust fit. One cost-only pass; calls no on_chunk and takes no part in
  // resume (a pending ResumePass state stays pending).
  double SumOfSquares(const Eigen::VectorXd& theta);
  const LossOptions& loss() const { return options_.loss; }
  // A full pass at theta that keeps every angle's sums apart (AngleGrams), for variable
  // projection. Counts as a pass (passes()); calls no on_chunk and takes no part in resume (a
  // pending ResumePass state stays pending). weighted = false: the plain [J | e] whatever the
  // loss; true (a robust loss): each point's row of [J | e] weighted by sqrt(rho'(z)) and the
  // (e, e) entry s^2 sum rho(z) (PassWeighting::kIrls, src/model/robust_loss.h); under the
  // linear loss both are the plain pass. columns = PassColumns::kScaling (pass_backend.h): the
  // 3 x 3 Gram matrices of [d c2 / d contrast_k, d c2 / d offset_k, e] only (the plain ones;
  // not weighted under a robust loss), about a cost pass's work on the CPU; a pass all the
  // same.
  AngleGrams AccumulateAngleGrams(const Eigen::VectorXd& theta, bool weighted = false,
                                  PassColumns columns = PassColumns::kAll);
  double sigma() const { return sigma_; }
  // The sums of the frame-block jackknife at theta (frame_block_sums.h; docs/results.md, What the
  // uncertainties mean): one pass over the data with the model's scalar form (ModePoint::
  // EvaluateSegment), counted in passes(); no on_chunk, no part in resume. Bitwise the same for
  // any thread count and, on several ranks, for any rank count (each rank computes its share of
  // every chunk; the per-batch sums are gathered and reduced in batch order). num_blocks: the
  // frame blocks kept (FineFrameBlocks). Linear loss: the plain e = data - c2 whatever the loss.
  FrameBlockSums AccumulateFrameBlockSums(const Eigen::VectorXd& theta, int num_blocks);

  // Resume (docs/design.md section 6): the next Accumulate (state.full_pass) or Cost at bitwise
  // the same theta continues this saved pass from state.next_batch instead of starting at batch 0,
  // with the same result as the uninterrupted pass. Calls at another point leave it pending.
  void ResumePass(PassState state) { resume_pass_ = std::move(state); }

  int num_physical() const { return num_physical_; }
  int num_angles() const { return static_cast<int>(phi_degrees_.size()); }
  int ContrastIndex(int angle) const { return num_physical_ + angle; }
  int OffsetIndex(int angle) const { return num_physical_ + num_angles() + angle; }
  // Upper-triangle points of all angles, finite or not.
  int64_t num_points() const { return num_points_; }
  // Upper-triangle data points skipped because they are NaN or +-inf.
  int64_t num_nonfinite_points() const { return num_points_ - num_finite_points_; }
  const FiniteValueRange& finite_value_range() const { return range_; }
  int num_batches() const { return static_cast<int>(batches_.size()); }
  int64_t batch_points() const { return options_.batch_points; }  // per angle per batch
  int64_t read_retries() const { return data_->read_retries(); }
  const HomodyneModel& model() const { return model_; }
  int64_t passes() const { return passes_; }

  // On a group of several ranks (PassOptions::group): frees the data of the batches other ranks
  // compute, so that each rank holds about 1/K of data kept in memory (docs/design.md section
  // 5b). Call after everything that reads the whole data (PackedDataObjective::data()) is done.
  // Nothing for one process, streamed data, or data that hold only this rank's share already
  // (PackedDataObjective(source, ...), MakeRowSubsampleObjective(source, ...) on several ranks).
  void KeepOwnShare();

 protected:
  void set_num_finite_points(int64_t count) { num_finite_points_ = count; }
  // Widens the range by the finite values of batches [first, last) as fetched in `pointers`
  // (Fetch's layout) and marks it complete once batches [0, num_batches) have all been seen.
  // Batches already seen are skipped, so each pass costs nothing once the range is complete.
  void ObserveRange(int first, int last, const std::vector<const float*>& pointers);
  // For data known up front (PackedDataObjective): the range over every point, complete.
  void set_finite_value_range(FiniteValueRange range) { range_ = range; }
  PassData& pass_data() { return *data_; }
  const std::vector<RowBatch>& batch_list() const { return batches_; }
  // The group of the passes; null for one process.
  ProcessGroup* group() const { return options_.group.get(); }

 private:
  struct ChunkGrams;
  struct PassAt;
  void CheckTheta(const Eigen::VectorXd& theta) const;
  // Fetches batches [first, last) and fills chunk with their per-batch, per-angle Gram matrices
  // (computed by the backend).
  void ComputeChunkGrams(PreparedPass& pass, int first, int last, ChunkGrams& chunk);
  // Fetches batches [first, last) and adds each one's cost term (2 / sigma^2 times the pass's
  // per-batch sum), in batch order, to total; sums: scratch of at least last - first entries.
  void AddChunkCost(PreparedPass& pass, int first, int last, std::vector<double>& sums,
                    double& total);
  // The batches of a pass's chunks: PassOptions::chunk_batches (0: 1024), at most the pass's
  // batches (>= 1) and at most 2^24 points per angle (at least one batch).
  int PassChunkBatches() const;
  // Throws PassInterrupted when PassOptions::stop_requested says so; between chunks.
  void StopIfRequested() const;
  // More than one rank shares the passes (PassOptions::group).
  bool distributed() const { return options_.group != nullptr && options_.group->size() > 1; }
  // The rank shares of batches [first, last), a part of one chunk: rank r computes [bounds[r],
  // bounds[r + 1]), contiguous runs of about equal points of the whole chunk (size + 1 entries,
  // bounds[0] = first).
  void ShareBounds(int first, int last, std::vector<int>& bounds) const;
  // share_bounds_[r]: where rank r's share of the current chunk starts (r = size: its end).
  int ShareBegin(int rank) const { return share_bounds_[static_cast<size_t>(rank)]; }
  // The finite values of batches [from, to) (a sub-range of the fetched [first, ...) in
  // `pointers`), widened into range.
  void WidenRange(int from, int to, int first, const std::vector<const float*>& pointers,
                  FiniteValueRange& range) const;
  // Distributed passes: fetches and computes this rank's share of [first, last), gathers every
  // rank's per-batch sums (lower triangles and finite counts of ComputeGrams, or the sums of
  // ComputeSquaredResiduals) and the finite range of their values, so that every rank holds
  // those of every batch of the chunk, bitwise as one process computes them.
  void ComputeSharedChunkGrams(PreparedPass& pass, int first, int last, ChunkGrams& chunk);
  void ComputeSharedChunkCost(PreparedPass& pass, int first, int last, std::vector<double>& sums);
  // Their two common steps. FetchOwnShare: this rank's share [mine_first, mine_last) of the
  // chunk (share_bounds_ set), fetched (the next share announced to the data), its finite values
  // widened into range when the chunk is observed. GatherShares: this rank's share_mine_
  // (per_batch values per batch of its share) and range sent to every rank; on return
  // share_all_ holds per_batch values per batch of [first, last) in batch order, and the ranks'
  // ranges have widened range_ (ObserveSharedRange).
  std::pair<int, int> FetchOwnShare(int first, int last, FiniteValueRange& range);
  void GatherShares(int first, int last, int per_batch, const FiniteValueRange& range);
  // Whether a chunk [first, last) holds the next batches the finite range has not seen.
  bool ObservesRange(int first, int last) const {
    return !range_.complete && first <= range_next_batch_ && last > range_next_batch_;
  }
  // After a distributed chunk: the range widened by the gathered ranks' ranges when the chunk
  // holds the next batches ObserveRange would look at.
  void ObserveSharedRange(int first, int last, std::span<const double> rank_ranges);
  // The fit's loss as the passes apply it (residual scale sigma f_scale in data units).
  PassLoss PassLossOfFit() const;
  // Starts pass_ at theta: from the pending resume state when it matches, else from zero.
  void BeginPass(const Eigen::VectorXd& theta, bool full_pass);

  HomodyneModel model_;
  std::vector<double> phi_degrees_;
  double sigma_;
  std::unique_ptr<PassData> data_;
  PassOptions options_;
  std::shared_ptr<PassBackend> backend_;  // never null
  int num_physical_;
  int64_t num_points_ = 0;
  int64_t num_finite_points_ = 0;
  FiniteValueRange range_;
  int range_next_batch_ = 0;  // batches [0, range_next_batch_) are in range_
  int64_t passes_ = 0;
  std::vector<RowBatch> batches_;
  int pass_chunk_batches_ = 1;  // PassChunkBatches(), from the batch list and the options
  PassState pass_;              // the pass in progress: its point and partial sums
  std::optional<PassState> resume_pass_;
  std::vector<const float*> pointers_;  // the batches of the current Fetch
  // Scratch of distributed passes: share bounds, counts, this rank's and everyone's values.
  std::vector<int> share_bounds_;
  std::vector<int> share_counts_;
  std::vector<double> share_mine_;
  std::vector<double> share_all_;
};

// The objective on packed data in memory (large and chunked strategies). Counts the finite
// points up front, so num_residuals() is right before the first pass.
class PackedDataObjective : public BatchedObjective {
 public:
  using PackedData = InMemoryPassData::PackedData;

  // Default batch size in points (the automatic size is clamped to [1e3, 1e5]:
  // docs/design.md section 3).
  static constexpr int64_t kDefaultBatchPoints = 10000;

  PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees, double sigma,
                      PackedData data, int64_t batch_points = kDefaultBatchPoints);
  PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees, double sigma,
                      PackedData data, PassOptions options,
                      std::shared_ptr<PassBackend> backend = nullptr);
  // On the ranks of options.group (several; docs/design.md section 5b): reads from the source
  // only the rows of the batches this rank computes (InMemoryPassData::ReadRuns of
  // RankShareRuns), so K ranks hold K times the data of one. The finite point count and value
  // range are those of the whole data (gathered from every rank: a collective call, made by every
  // rank), so every rank's objective is bitwise that of one process after KeepOwnShare. With one
  // process (a null group or one rank) it reads every row (LoadPackedData). Propagates the
  // source's DataError.
  PackedDataObjective(BatchSource& source, HomodyneModel model, std::vector<double> phi_degrees,
                      double sigma, PassOptions options,
                      std::shared_ptr<PassBackend> backend = nullptr);

  // Every angle's packed strict upper triangle from the source, read as float in blocks of whole
  // rows (about rows_block_points points per read). Propagates the source's DataError.
  static PackedData LoadPackedData(BatchSource& source, int64_t rows_block_points = 1 << 20);

  // Every angle's packed triangle; after KeepOwnShare on several ranks, or when read from the
  // source on several ranks, this rank's runs only, whose rows held_rows() lists.
  const PackedData& data() const { return data_view_->data(); }
  // The rows data() holds, ascending (InMemoryPassData::HeldRows).
  std::vector<int> held_rows() const;

 private:
  // Counts the finite points and the value range of data() (on several ranks: of every rank's
  // data, gathered from all of them when gather_over_ranks).
  void CountFiniteValues(bool gather_over_ranks);

  const InMemoryPassData* data_view_;
};

// The objective on every row_stride-th row (0, s, 2s, ...) of every angle's strict upper
// triangle, read from the source into memory (about UpperTriangleSize(N) / s points per angle):
// the data of the global phase (global_search.h), whose chi2 tracks the full one at a bounded
// cost whatever the data size. Each row keeps all its lags, so short and long times are both
// represented. The same source and stride give the same objective whatever strategy the fit
// uses, so every strategy's global phase sums in the same order. row_stride >= 1; propagates
// the source's DataError.
// backend: as BatchedObjective's (null = the CPU backend); group: the ranks that share its passes
// (PassOptions::group; null = this process alone). On several ranks each reads only the rows of
// its share of the subsample's batches (what KeepOwnShare would keep). loss: the fit's
// (PassOptions::loss), which the global phase minimises too (docs/design.md section 4c).
std::unique_ptr<BatchedObjective> MakeRowSubsampleObjective(
    BatchSource& source, HomodyneModel model, std::vector<double> phi_degrees, double sigma,
    int row_stride, std::shared_ptr<PassBackend> backend = nullptr,
    std::shared_ptr<ProcessGroup> group = nullptr, LossOptions loss = LossOptions());
// The same from packed data already in memory (PackedDataObjective::data(), read from the same
// source): the same floats, so the same objective, without reading the file again (row reads
// of a compressed file decompress a whole chunk each).
std::unique_ptr<BatchedObjective> MakeRowSubsampleObjective(
    const InMemoryPassData::PackedData& packed, HomodyneModel model,
    std::vector<double> phi_degrees, double sigma, int row_stride,
    std::shared_ptr<PassBackend> backend = nullptr, std::shared_ptr<ProcessGroup> group = nullptr,
    LossOptions loss = LossOptions());

}  // namespace homodyne
