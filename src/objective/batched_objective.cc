// BatchedObjective and PackedDataObjective (src/objective/batched_objective.h): chi2 and normal
// equations as passes over a fixed batch list, chunk by chunk, the per-batch sums of a chunk
// computed by the backend (backend.h) and reduced here in batch order.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include "homodyne/errors.h"
#include "objective/batched_objective.h"
#include "objective/c2_rows.h"
#include "objective/pass_backend.h"

namespace homodyne {
namespace {

using Clock = std::chrono::steady_clock;

// For PassProgress's wall times only; no number of the fit depends on them.
double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The batches of a pass's chunks (BatchedObjective::PassChunkBatches): as many as
// PassOptions::chunk_batches asks (0: 1024), at most the pass's batches (>= 1), and at most
// kMaxChunkPointsPerAngle points per angle (at least one batch), so that the checks between chunks
// (on_chunk, stop_requested) come at least every few seconds however wide the rows are. The sums
// are reduced in batch order, so the chunk size changes no result (batched_objective.h).
constexpr int64_t kMaxChunkPointsPerAngle = int64_t{1} << 24;

int PassChunkBatchesOf(const PassOptions& options, std::span<const RowBatch> batches) {
  int64_t widest = 1;
  for (const RowBatch& batch : batches) widest = std::max(widest, batch.points);
  const int64_t by_points = std::max<int64_t>(1, kMaxChunkPointsPerAngle / widest);
  const int64_t asked = options.chunk_batches > 0 ? options.chunk_batches : 1024;
  const int64_t num_batches = std::max<int64_t>(static_cast<int64_t>(batches.size()), 1);
  return static_cast<int>(std::min({asked, by_points, num_batches}));
}

// Rows [row_begin, row_end) of every angle k into out[k] (their packed values,
// UpperTriangleRowsSize of them), in the pieces the source prepares for every angle at once
// (BatchSource::PrefetchRows: compressed chunks decoded on the passes' threads, as the streaming
// reads do), every angle's rows of a piece before the next piece is prepared. The same values as
// one ReadC2Rows per angle.
void ReadRowsOfEveryAngle(BatchSource& source, int row_begin, int row_end,
                          std::span<float* const> out) {
  const int64_t n = source.info().num_times();
  const int64_t origin = UpperTriangleRowOffset(n, row_begin);
  const int threads = omp_get_max_threads();
  for (int piece_begin = row_begin; piece_begin < row_end;) {
    const int piece_end =
        std::clamp(source.PrefetchRows(piece_begin, row_end, threads), piece_begin + 1, row_end);
    const int64_t offset = UpperTriangleRowOffset(n, piece_begin) - origin;
    const size_t points = static_cast<size_t>(UpperTriangleRowsSize(n, piece_begin, piece_end));
    for (size_t k = 0; k < out.size(); ++k) {
      ReadC2Rows(source, static_cast<int>(k), piece_begin, piece_end,
                 std::span<float>(out[k] + offset, points));
    }
    piece_begin = piece_end;
  }
}

// More than one rank shares the passes.
bool IsDistributed(const PassOptions& options) {
  return options.group != nullptr && options.group->size() > 1;
}

// The data of an objective on `batches` with these options: on several ranks only the rows of
// this rank's share (the runs KeepOwnShare keeps), else every row of the source.
std::unique_ptr<InMemoryPassData> ReadRowsOfThisRank(BatchSource& source,
                                                     std::span<const RowBatch> batches,
                                                     const PassOptions& options,
                                                     int64_t rows_block_points) {
  const ProcessGroup& group = *options.group;
  return InMemoryPassData::ReadRuns(
      source, batches,
      RankShareRuns(batches, PassChunkBatchesOf(options, batches), group.rank(), group.size()),
      rows_block_points);
}

}  // namespace

std::vector<RowBatch> SplitIntoBatches(int n_times, int64_t batch_points) {
  if (batch_points < 1) {
    throw std::invalid_argument("batch_points = " + std::to_string(batch_points) +
                                ": must be >= 1");
  }
  std::vector<RowBatch> batches;
  int row_begin = 0;
  while (row_begin < n_times - 1) {
    RowBatch batch{row_begin, row_begin, UpperTriangleRowOffset(n_times, row_begin), 0};
    while (batch.row_end < n_times - 1 && batch.points < batch_points) {
      batch.points += n_times - 1 - batch.row_end;
      ++batch.row_end;
    }
    batches.push_back(batch);
    row_begin = batch.row_end;
  }
  return batches;
}

uint64_t NewStableDataId() {
  static std::atomic<uint64_t> last_id{0};
  return last_id.fetch_add(1, std::memory_order_relaxed) + 1;
}

void InMemoryPassData::Fetch(std::span<const RowBatch> batches, int first, int last, int num_angles,
                             std::vector<const float*>& pointers) {
  pointers.clear();
  if (!runs_.empty()) {
    // The run that holds [first, last): runs are sorted and disjoint.
    auto run = std::upper_bound(runs_.begin(), runs_.end(), first,
                                [](int batch, const Run& r) { return batch < r.first; });
    if (run == runs_.begin() || (--run)->last < last) {
      throw std::logic_error("in-memory data: batches " + std::to_string(first) + " to " +
                             std::to_string(last) + " are not in this rank's share");
    }
    const int64_t run_offset = batches[static_cast<size_t>(run->first)].offset;
    for (int b = first; b < last; ++b) {
      for (int k = 0; k < num_angles; ++k) {
        pointers.push_back(data_[static_cast<size_t>(k)].data() + run->held_offset +
                           (batches[static_cast<size_t>(b)].offset - run_offset));
      }
    }
    return;
  }
  for (int b = first; b < last; ++b) {
    for (int k = 0; k < num_angles; ++k) {
      pointers.push_back(data_[static_cast<size_t>(k)].data() +
                         batches[static_cast<size_t>(b)].offset);
    }
  }
}

std::vector<InMemoryPassData::Run> InMemoryPassData::PlaceRuns(
    std::span<const RowBatch> batches, std::span<const std::pair<int, int>> runs, int64_t* held) {
  std::vector<Run> placed;
  *held = 0;
  for (const auto& [first, last] : runs) {
    const RowBatch& last_batch = batches[static_cast<size_t>(last) - 1];
    const int64_t begin = batches[static_cast<size_t>(first)].offset;
    placed.push_back({first, last, *held, begin, last_batch.offset + last_batch.points});
    *held += last_batch.offset + last_batch.points - begin;
  }
  // A rank with no batch holds nothing; an empty list of runs would mean "everything".
  if (placed.empty()) placed.push_back({0, 0, 0, 0, 0});
  return placed;
}

void InMemoryPassData::KeepOnly(std::span<const RowBatch> batches,
                                std::span<const std::pair<int, int>> runs, int num_angles) {
  int64_t held = 0;
  std::vector<Run> kept = PlaceRuns(batches, runs, &held);
  if (!runs_.empty()) {
    const bool same = std::equal(
        runs_.begin(), runs_.end(), kept.begin(), kept.end(),
        [](const Run& a, const Run& b) { return a.first == b.first && a.last == b.last; });
    if (same) return;  // ReadRuns (or an earlier KeepOnly) holds these runs already
    throw std::logic_error("in-memory data: KeepOnly of other runs than those held");
  }
  for (int k = 0; k < num_angles; ++k) {
    std::vector<float> values(static_cast<size_t>(held));
    for (const Run& run : kept) {
      std::copy(data_[static_cast<size_t>(k)].begin() + run.source_begin,
                data_[static_cast<size_t>(k)].begin() + run.source_end,
                values.begin() + run.held_offset);
    }
    data_[static_cast<size_t>(k)] = std::move(values);  // the full array is freed here
  }
  runs_ = std::move(kept);
  stable_data_id_ = NewStableDataId();  // other arrays: copies of the old ones must not be used
}

std::unique_ptr<InMemoryPassData> InMemoryPassData::ReadRuns(
    BatchSource& source, std::span<const RowBatch> batches,
    std::span<const std::pair<int, int>> runs, int64_t rows_block_points) {
  int64_t held = 0;
  std::vector<Run> placed = PlaceRuns(batches, runs, &held);
  const int num_angles = source.info().num_angles();
  const int64_t n = source.info().num_times();
  PackedData data(static_cast<size_t>(num_angles));
  for (std::vector<float>& values : data) values.resize(static_cast<size_t>(held));
  for (const Run& run : placed) {
    for (int b = run.first; b < run.last;) {
      const RowBatch& begin = batches[static_cast<size_t>(b)];
      const int64_t held_begin = run.held_offset + (begin.offset - run.source_begin);
      if (begin.row_stride > 1) {  // a subsample's batch: its rows one by one, angle by angle
        for (int k = 0; k < num_angles; ++k) {
          float* held_values = data[static_cast<size_t>(k)].data() + held_begin;
          ForEachRowOf(begin, static_cast<int>(n), [&](int i, int64_t first_point, int64_t points) {
            ReadC2Rows(source, k, i, i + 1,
                       std::span<float>(held_values + first_point, static_cast<size_t>(points)));
          });
        }
        ++b;
        continue;
      }
      // Batches of rows that follow each other are read together, up to rows_block_points
      // points a read (a read per batch would decompress the same chunks again and again), every
      // angle at once (ReadRowsOfEveryAngle). The values are the same, in the same places.
      int64_t points = begin.points;
      int end = b + 1;
      while (end < run.last && batches[static_cast<size_t>(end)].row_stride == 1 &&
             batches[static_cast<size_t>(end)].row_begin ==
                 batches[static_cast<size_t>(end) - 1].row_end &&
             points + batches[static_cast<size_t>(end)].points <= rows_block_points) {
        points += batches[static_cast<size_t>(end)].points;
        ++end;
      }
      std::vector<float*> out(static_cast<size_t>(num_angles));
      for (int k = 0; k < num_angles; ++k) {
        out[static_cast<size_t>(k)] = data[static_cast<size_t>(k)].data() + held_begin;
      }
      ReadRowsOfEveryAngle(source, begin.row_begin, batches[static_cast<size_t>(end) - 1].row_end,
                           out);
      b = end;
    }
  }
  source.ReleaseReadBuffers();  // the rank's rows are in memory now
  auto result = std::make_unique<InMemoryPassData>(std::move(data));
  result->runs_ = std::move(placed);
  return result;
}

std::vector<int> InMemoryPassData::HeldRows(std::span<const RowBatch> batches) const {
  std::vector<int> rows;
  auto add = [&rows, batches](int first, int last) {
    for (int b = first; b < last; ++b) {
      const RowBatch& batch = batches[static_cast<size_t>(b)];
      for (int i = batch.row_begin; i < batch.row_end; i += batch.row_stride) rows.push_back(i);
    }
  };
  if (runs_.empty()) {
    add(0, static_cast<int>(batches.size()));
  } else {
    for (const Run& run : runs_) add(run.first, run.last);
  }
  return rows;
}

BatchedObjective::BatchedObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                   double sigma, std::unique_ptr<PassData> data,
                                   PassOptions options, std::shared_ptr<PassBackend> backend)
    // model and options are copied: the batch list reads them in the same argument list.
    : BatchedObjective(model, std::move(phi_degrees), sigma, std::move(data), options,
                       SplitIntoBatches(model.num_times(), options.batch_points),
                       std::move(backend)) {}

BatchedObjective::BatchedObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                   double sigma, std::unique_ptr<PassData> data,
                                   PassOptions options, std::vector<RowBatch> batches,
                                   std::shared_ptr<PassBackend> backend)
    : model_(std::move(model)),
      phi_degrees_(std::move(phi_degrees)),
      sigma_(sigma),
      data_(std::move(data)),
      options_(std::move(options)),
      backend_(backend != nullptr ? std::move(backend) : MakeCpuPassBackend()),
      num_physical_(model_.num_physical()),
      batches_(std::move(batches)) {
  if (!(sigma_ > 0.0) || !std::isfinite(sigma_)) {
    throw std::invalid_argument("objective: sigma = " + std::to_string(sigma_) +
                                ": must be finite and > 0");
  }
  if (!(options_.loss.f_scale > 0.0) || !std::isfinite(options_.loss.f_scale)) {
    throw std::invalid_argument("objective: f_scale = " + std::to_string(options_.loss.f_scale) +
                                ": must be finite and > 0");
  }
  if (phi_degrees_.empty()) throw std::invalid_argument("objective: no angle");
  if (!model_.angle_q_inv_angstrom().empty() &&
      model_.angle_q_inv_angstrom().size() != phi_degrees_.size()) {
    throw std::invalid_argument(
        "objective: the model has " + std::to_string(model_.angle_q_inv_angstrom().size()) +
        " matrix q values for " + std::to_string(phi_degrees_.size()) + " angles");
  }
  if (data_ == nullptr) throw std::invalid_argument("objective: no data");
  if (options_.chunk_batches < 0) {
    throw std::invalid_argument(
        "objective: chunk_batches = " + std::to_string(options_.chunk_batches) + ": must be >= 0");
  }
  for (const RowBatch& batch : batches_) num_points_ += batch.points;
  num_points_ *= num_angles();
  num_finite_points_ = num_points_;  // until a pass or the data say otherwise
  pass_chunk_batches_ = PassChunkBatchesOf(options_, batches_);
}

void BatchedObjective::ObserveRange(int first, int last,
                                    const std::vector<const float*>& pointers) {
  if (!ObservesRange(first, last)) return;
  WidenRange(range_next_batch_, last, first, pointers, range_);
  range_next_batch_ = last;
  range_.complete = range_next_batch_ == static_cast<int>(batches_.size());
}

void BatchedObjective::CheckTheta(const Eigen::VectorXd& theta) const {
  if (theta.size() != num_parameters()) {
    throw std::invalid_argument("objective: theta has " + std::to_string(theta.size()) +
                                " values, expected " + std::to_string(num_parameters()));
  }
}

void BatchedObjective::StopIfRequested() const {
  if (options_.stop_requested && options_.stop_requested()) {
    throw PassInterrupted("a pass stopped between two chunks: an interruption was requested");
  }
}

void BatchedObjective::BeginPass(const Eigen::VectorXd& theta, bool full_pass) {
  ++passes_;
  if (resume_pass_ && resume_pass_->full_pass == full_pass &&
      resume_pass_->theta.size() == theta.size() &&
      (resume_pass_->theta.array() == theta.array()).all()) {
    pass_ = std::move(*resume_pass_);
    resume_pass_.reset();
    return;
  }
  const int p_total = num_parameters();
  pass_ = PassState{};
  pass_.theta = theta;
  pass_.full_pass = full_pass;
  if (full_pass) {
    pass_.jtj = Eigen::MatrixXd::Zero(p_total, p_total);
    pass_.jtr = Eigen::VectorXd::Zero(p_total);
  }
}

// The model at theta's physical parameters and the backend prepared at theta (with theta's
// per-angle scaling): what every pass at theta needs. Not copyable (the prepared pass refers to
// the evaluation).
struct BatchedObjective::PassAt {
  PassAt(const BatchedObjective& objective, const Eigen::VectorXd& theta, PassLoss loss,
         PassColumns columns = PassColumns::kAll)
      : evaluation(
            objective.model_,
            std::span<const double>(theta.data(), static_cast<size_t>(objective.num_physical_))),
        pass(PrepareByRing(*objective.backend_,
                           {&evaluation, objective.phi_degrees_,
                            std::span<const double>(theta.data() + objective.ContrastIndex(0),
                                                    static_cast<size_t>(objective.num_angles())),
                            std::span<const double>(theta.data() + objective.OffsetIndex(0),
                                                    static_cast<size_t>(objective.num_angles())),
                            loss, objective.data_->stable_data_id(), columns})) {}
  PassAt(const PassAt&) = delete;
  PassAt& operator=(const PassAt&) = delete;

  const ModelEvaluation evaluation;
  const std::unique_ptr<PreparedPass> pass;
};

// The per-point sums of one full pass: for every batch of a chunk and every angle, the Gram
// matrix of [J | e] (backend.h) and the finite point count.
struct BatchedObjective::ChunkGrams {
  ChunkGrams(int chunk, int n_angles, int gram_size)
      : grams(static_cast<size_t>(chunk) * n_angles, Eigen::MatrixXd(gram_size, gram_size)),
        finite(static_cast<size_t>(chunk) * n_angles) {}
  // Slot (b - first) * n_angles + k: batch b, angle k.
  std::vector<Eigen::MatrixXd> grams;
  std::vector<int64_t> finite;
};

void BatchedObjective::ComputeChunkGrams(PreparedPass& pass, int first, int last,
                                         ChunkGrams& chunk) {
  if (distributed()) {
    ComputeSharedChunkGrams(pass, first, last, chunk);
    return;
  }
  const int n_angles = num_angles();
  data_->Fetch(batches_, first, last, n_angles, pointers_);
  if (!range_.complete) ObserveRange(first, last, pointers_);
  // The last chunk of a pass may hold fewer batches than the buffers.
  const size_t entries = static_cast<size_t>(last - first) * n_angles;
  pass.ComputeGrams(std::span<const RowBatch>(batches_).subspan(static_cast<size_t>(first),
                                                                static_cast<size_t>(last - first)),
                    pointers_, std::span<Eigen::MatrixXd>(chunk.grams).first(entries),
                    std::span<int64_t>(chunk.finite).first(entries));
}

NormalEquations BatchedObjective::Accumulate(const Eigen::VectorXd& theta) {
  CheckTheta(theta);
  const Clock::time_point pass_start = Clock::now();
  BeginPass(theta, /*full_pass=*/true);
  const int n_angles = num_angles();
  const PassAt at(*this, theta, PassLossOfFit());
  const int g = at.pass->gram_size();  // M + 1, M = P_phys + 2
  const int m = g - 1;
  const int num_batches = static_cast<int>(batches_.size());
  const int chunk_size = PassChunkBatches();

  ChunkGrams chunk(chunk_size, n_angles, g);
  std::vector<int> index(static_cast<size_t>(m));
  for (int a = 0; a < num_physical_; ++a) index[static_cast<size_t>(a)] = a;
  const double scale = 2.0 / (sigma_ * sigma_);  // r = e / sigma, every point counts twice

  while (pass_.next_batch < num_batches) {
    const Clock::time_point chunk_start = Clock::now();
    const int first = pass_.next_batch;
    // Chunks of whole multiples of chunk_size (a pass resumed by a run of another chunk size
    // first completes its chunk): a batch belongs to the same rank share in every pass.
    const int last = std::min((first / chunk_size + 1) * chunk_size, num_batches);
    ComputeChunkGrams(*at.pass, first, last, chunk);
    // Scatter in batch order, then angle order, into the lower triangle of J^T J. The block
    // index maps monotonically to the global one, so (a >= c) stays in the lower triangle.
    for (int b = first; b < last; ++b) {
      for (int k = 0; k < n_angles; ++k) {
        const size_t slot = static_cast<size_t>(b - first) * n_angles + k;
        const Eigen::MatrixXd& gram = chunk.grams[slot];
        index[static_cast<size_t>(m - 2)] = ContrastIndex(k);
        index[static_cast<size_t>(m - 1)] = OffsetIndex(k);
        for (int c = 0; c < m; ++c) {
          const int gc = index[static_cast<size_t>(c)];
          for (int a = c; a < m; ++a) {
            pass_.jtj(index[static_cast<size_t>(a)], gc) += scale * gram(a, c);
          }
          pass_.jtr[gc] -= scale * gram(m, c);  // J_r = -J_model / sigma
        }
        pass_.chi2 += scale * gram(m, m);
        pass_.finite_points += chunk.finite[slot];
      }
    }
    pass_.next_batch = last;
    if (options_.on_chunk) {
      options_.on_chunk({passes_, true, last, num_batches, last - first, &pass_,
                         SecondsSince(chunk_start), SecondsSince(pass_start)});
    }
    if (last < num_batches) StopIfRequested();
  }
  NormalEquations result;
  result.jtj = pass_.jtj;
  const int p_total = num_parameters();
  for (int c = 0; c < p_total; ++c) {
    for (int a = c + 1; a < p_total; ++a) result.jtj(c, a) = result.jtj(a, c);
  }
  result.jtr = pass_.jtr;
  result.chi2 = pass_.chi2;
  num_finite_points_ = pass_.finite_points;
  result.num_points = 2 * pass_.finite_points;
  return result;
}

AngleGrams BatchedObjective::AccumulateAngleGrams(const Eigen::VectorXd& theta, bool weighted,
                                                  PassColumns columns) {
  CheckTheta(theta);
  // The scaling columns' sums are the plain [J | e]'s: no weighted variant.
  HOMODYNE_CHECK(columns == PassColumns::kAll || !weighted || options_.loss.is_linear());
  ++passes_;
  const int n_angles = num_angles();
  // Plain: [J | e] as it is (the linear loss's projection); weighted: the reweighted rows of a
  // robust loss's projection (variable_projection.h).
  PassLoss loss;
  if (weighted && !options_.loss.is_linear()) {
    loss = PassLossOfFit();
    loss.weighting = PassWeighting::kIrls;
  }
  const PassAt at(*this, theta, loss, columns);
  const int g = at.pass->gram_size();
  const int num_batches = static_cast<int>(batches_.size());
  const int chunk_size = PassChunkBatches();

  AngleGrams result;
  result.grams.assign(static_cast<size_t>(n_angles), Eigen::MatrixXd::Zero(g, g));
  ChunkGrams chunk(chunk_size, n_angles, g);
  for (int first = 0; first < num_batches; first += chunk_size) {
    const int last = std::min(first + chunk_size, num_batches);
    ComputeChunkGrams(*at.pass, first, last, chunk);
    for (int b = first; b < last; ++b) {  // batch order, as Accumulate
      for (int k = 0; k < n_angles; ++k) {
        const size_t slot = static_cast<size_t>(b - first) * n_angles + k;
        result.grams[static_cast<size_t>(k)] += chunk.grams[slot];
        result.finite_points += chunk.finite[slot];
      }
    }
    if (last < num_batches) StopIfRequested();
  }
  for (Eigen::MatrixXd& gram : result.grams) {
    gram.triangularView<Eigen::StrictlyUpper>() = gram.transpose();
  }
  num_finite_points_ = result.finite_points;
  return result;
}

PassLoss BatchedObjective::PassLossOfFit() const {
  PassLoss loss;
  loss.function = options_.loss.function;
  loss.residual_scale = sigma_ * options_.loss.f_scale;  // z = (e / (sigma f_scale))^2
  return loss;
}

void BatchedObjective::AddChunkCost(PreparedPass& pass, int first, int last,
                                    std::vector<double>& sums, double& total) {
  if (distributed()) {
    ComputeSharedChunkCost(pass, first, last, sums);
  } else {
    data_->Fetch(batches_, first, last, num_angles(), pointers_);
    if (!range_.complete) ObserveRange(first, last, pointers_);
    pass.ComputeSquaredResiduals(std::span<const RowBatch>(batches_).subspan(
                                     static_cast<size_t>(first), static_cast<size_t>(last - first)),
                                 pointers_,
                                 std::span<double>(sums).first(static_cast<size_t>(last - first)));
  }
  const double scale = 2.0 / (sigma_ * sigma_);
  for (int b = first; b < last; ++b) total += scale * sums[static_cast<size_t>(b - first)];
}

double BatchedObjective::SumOfSquares(const Eigen::VectorXd& theta) {
  CheckTheta(theta);
  ++passes_;
  const PassAt at(*this, theta, PassLoss());
  const int num_batches = static_cast<int>(batches_.size());
  const int chunk = PassChunkBatches();
  std::vector<double> sums(static_cast<size_t>(chunk));
  double chi2 = 0.0;
  for (int first = 0; first < num_batches; first += chunk) {
    if (first > 0) StopIfRequested();
    AddChunkCost(*at.pass, first, std::min(first + chunk, num_batches), sums, chi2);
  }
  return chi2;
}

double BatchedObjective::Cost(const Eigen::VectorXd& theta) {
  CheckTheta(theta);
  const Clock::time_point pass_start = Clock::now();
  BeginPass(theta, /*full_pass=*/false);
  const PassAt at(*this, theta, PassLossOfFit());
  const int num_batches = static_cast<int>(batches_.size());
  const int chunk = PassChunkBatches();
  std::vector<double> sums(static_cast<size_t>(chunk));
  while (pass_.next_batch < num_batches) {
    const Clock::time_point chunk_start = Clock::now();
    const int first = pass_.next_batch;
    const int last = std::min((first / chunk + 1) * chunk, num_batches);  // as Accumulate
    AddChunkCost(*at.pass, first, last, sums, pass_.chi2);
    pass_.next_batch = last;
    if (options_.on_chunk) {
      options_.on_chunk({passes_, false, last, num_batches, last - first, &pass_,
                         SecondsSince(chunk_start), SecondsSince(pass_start)});
    }
    if (last < num_batches) StopIfRequested();
  }
  return pass_.chi2;
}

namespace {

// The rank shares of batches [first, last), a part of the chunk of chunk_size batches that
// holds them (chunks start at multiples of chunk_size): rank r computes [bounds[r],
// bounds[r + 1]), the part of its share of the whole chunk, where rank r's share starts at the
// first batch that starts at or after r / size of the chunk's points. A batch's rank depends only
// on the batch list, the chunk size and the rank count.
void ShareBoundsOf(std::span<const RowBatch> batches, int first, int last, int chunk_size, int size,
                   std::vector<int>& bounds) {
  const int chunk_first = first - first % chunk_size;
  const int chunk_last = std::min(chunk_first + chunk_size, static_cast<int>(batches.size()));
  bounds.assign(static_cast<size_t>(size) + 1, chunk_last);
  bounds[0] = chunk_first;
  int64_t total = 0;
  for (int b = chunk_first; b < chunk_last; ++b) total += batches[static_cast<size_t>(b)].points;
  int64_t before = 0;  // points of batches [chunk_first, b)
  int r = 1;
  for (int b = chunk_first; b < chunk_last && r < size; ++b) {
    while (r < size && before * size >= total * r) bounds[static_cast<size_t>(r++)] = b;
    before += batches[static_cast<size_t>(b)].points;
  }
  for (int& bound : bounds) bound = std::clamp(bound, first, last);
}

// This rank's share of the chunk after [first, last) (chunks of chunk_size batches): the pass's
// next chunk, or the first of the next pass.
std::pair<int, int> NextShare(const std::vector<RowBatch>& batches, int last, int chunk_size,
                              int rank, int size) {
  const int num_batches = static_cast<int>(batches.size());
  const int first = last < num_batches ? last : 0;
  std::vector<int> bounds;
  ShareBoundsOf(batches, first, std::min(first + chunk_size, num_batches), chunk_size, size,
                bounds);
  return {bounds[static_cast<size_t>(rank)], bounds[static_cast<size_t>(rank) + 1]};
}

}  // namespace

std::vector<std::pair<int, int>> RankShareRuns(std::span<const RowBatch> batches, int chunk_batches,
                                               int rank, int size) {
  const int num_batches = static_cast<int>(batches.size());
  std::vector<std::pair<int, int>> runs;
  std::vector<int> bounds;
  for (int first = 0; first < num_batches; first += chunk_batches) {
    ShareBoundsOf(batches, first, std::min(first + chunk_batches, num_batches), chunk_batches, size,
                  bounds);
    const int begin = bounds[static_cast<size_t>(rank)];
    const int end = bounds[static_cast<size_t>(rank) + 1];
    if (end > begin) runs.emplace_back(begin, end);
  }
  return runs;
}

int BatchedObjective::PassChunkBatches() const { return pass_chunk_batches_; }

void BatchedObjective::ShareBounds(int first, int last, std::vector<int>& bounds) const {
  ShareBoundsOf(batches_, first, last, PassChunkBatches(), options_.group->size(), bounds);
}

void BatchedObjective::KeepOwnShare() {
  if (!distributed()) return;
  data_->KeepOnly(
      batches_,
      RankShareRuns(batches_, PassChunkBatches(), options_.group->rank(), options_.group->size()),
      num_angles());
}

void BatchedObjective::WidenRange(int from, int to, int first,
                                  const std::vector<const float*>& pointers,
                                  FiniteValueRange& range) const {
  const int n_angles = num_angles();
  for (int b = from; b < to; ++b) {
    const int64_t points = batches_[static_cast<size_t>(b)].points;
    for (int k = 0; k < n_angles; ++k) {
      const float* values = pointers[static_cast<size_t>((b - first) * n_angles + k)];
      for (int64_t i = 0; i < points; ++i) {
        if (!std::isfinite(values[i])) continue;
        range.min = std::min(range.min, values[i]);
        range.max = std::max(range.max, values[i]);
      }
    }
  }
}

void BatchedObjective::ObserveSharedRange(int first, int last,
                                          std::span<const double> rank_ranges) {
  if (!ObservesRange(first, last)) return;
  for (size_t r = 0; r + 1 < rank_ranges.size(); r += 2) {
    range_.min = std::min(range_.min, static_cast<float>(rank_ranges[r]));
    range_.max = std::max(range_.max, static_cast<float>(rank_ranges[r + 1]));
  }
  range_next_batch_ = last;
  range_.complete = range_next_batch_ == static_cast<int>(batches_.size());
}

std::pair<int, int> BatchedObjective::FetchOwnShare(int first, int last, FiniteValueRange& range) {
  const ProcessGroup& group = *options_.group;
  ShareBounds(first, last, share_bounds_);
  const int mine_first = ShareBegin(group.rank());
  const int mine_last = ShareBegin(group.rank() + 1);
  if (mine_last > mine_first) {
    const auto [next_first, next_last] =
        NextShare(batches_, last, PassChunkBatches(), group.rank(), group.size());
    if (next_last > next_first) data_->ExpectNextFetch(next_first, next_last);
    data_->Fetch(batches_, mine_first, mine_last, num_angles(), pointers_);
    if (ObservesRange(first, last)) {
      WidenRange(std::max(mine_first, range_next_batch_), mine_last, mine_first, pointers_, range);
    }
  }
  return {mine_first, mine_last};
}

void BatchedObjective::GatherShares(int first, int last, int per_batch,
                                    const FiniteValueRange& range) {
  ProcessGroup& group = *options_.group;
  share_mine_.push_back(range.min);
  share_mine_.push_back(range.max);
  share_counts_.resize(static_cast<size_t>(group.size()));
  size_t total = 0;
  for (int r = 0; r < group.size(); ++r) {
    const int batches = ShareBegin(r + 1) - ShareBegin(r);
    share_counts_[static_cast<size_t>(r)] = batches * per_batch + 2;
    total += static_cast<size_t>(share_counts_[static_cast<size_t>(r)]);
  }
  share_all_.resize(total);
  group.AllGather(share_mine_, share_counts_, share_all_);
  // Every rank's block is its batches' values, then its range: move the values together (in
  // place, batch order) and the ranges aside.
  std::vector<double> rank_ranges;
  size_t from = 0;
  size_t to = 0;
  for (int r = 0; r < group.size(); ++r) {
    const size_t values = static_cast<size_t>(share_counts_[static_cast<size_t>(r)]) - 2;
    std::copy(share_all_.begin() + static_cast<std::ptrdiff_t>(from),
              share_all_.begin() + static_cast<std::ptrdiff_t>(from + values),
              share_all_.begin() + static_cast<std::ptrdiff_t>(to));
    from += values;
    to += values;
    rank_ranges.push_back(share_all_[from++]);
    rank_ranges.push_back(share_all_[from++]);
  }
  share_all_.resize(to);
  ObserveSharedRange(first, last, rank_ranges);
}

void BatchedObjective::ComputeSharedChunkGrams(PreparedPass& pass, int first, int last,
                                               ChunkGrams& chunk) {
  const int n_angles = num_angles();
  const int g = pass.gram_size();
  const int per_batch = n_angles * (g * (g + 1) / 2 + 1);  // lower triangles and finite counts
  FiniteValueRange range;
  const auto [mine_first, mine_last] = FetchOwnShare(first, last, range);
  if (mine_last > mine_first) {
    const size_t begin = static_cast<size_t>(mine_first - first) * n_angles;
    const size_t entries = static_cast<size_t>(mine_last - mine_first) * n_angles;
    pass.ComputeGrams(
        std::span<const RowBatch>(batches_).subspan(static_cast<size_t>(mine_first),
                                                    static_cast<size_t>(mine_last - mine_first)),
        pointers_, std::span<Eigen::MatrixXd>(chunk.grams).subspan(begin, entries),
        std::span<int64_t>(chunk.finite).subspan(begin, entries));
  }
  share_mine_.clear();
  for (int b = mine_first; b < mine_last; ++b) {
    for (int k = 0; k < n_angles; ++k) {
      const size_t slot = static_cast<size_t>(b - first) * n_angles + k;
      const Eigen::MatrixXd& gram = chunk.grams[slot];
      for (int c = 0; c < g; ++c) {
        for (int a = c; a < g; ++a) share_mine_.push_back(gram(a, c));
      }
      share_mine_.push_back(static_cast<double>(chunk.finite[slot]));  // exact below 2^53
    }
  }
  GatherShares(first, last, per_batch, range);
  size_t at = 0;
  for (int b = first; b < last; ++b) {
    for (int k = 0; k < n_angles; ++k) {
      const size_t slot = static_cast<size_t>(b - first) * n_angles + k;
      Eigen::MatrixXd& gram = chunk.grams[slot];
      for (int c = 0; c < g; ++c) {
        for (int a = c; a < g; ++a) gram(a, c) = share_all_[at++];
      }
      chunk.finite[slot] = static_cast<int64_t>(share_all_[at++]);
    }
  }
}

void BatchedObjective::ComputeSharedChunkCost(PreparedPass& pass, int first, int last,
                                              std::vector<double>& sums) {
  FiniteValueRange range;
  const auto [mine_first, mine_last] = FetchOwnShare(first, last, range);
  share_mine_.assign(static_cast<size_t>(mine_last - mine_first), 0.0);
  if (mine_last > mine_first) {
    pass.ComputeSquaredResiduals(
        std::span<const RowBatch>(batches_).subspan(static_cast<size_t>(mine_first),
                                                    static_cast<size_t>(mine_last - mine_first)),
        pointers_, share_mine_);
  }
  GatherShares(first, last, 1, range);
  std::copy(share_all_.begin(), share_all_.end(), sums.begin());
}

PackedDataObjective::PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                         double sigma, PackedData data, int64_t batch_points)
    : PackedDataObjective(std::move(model), std::move(phi_degrees), sigma, std::move(data),
                          PassOptions{batch_points, 0, {}, {}, {}, {}}) {}

PackedDataObjective::PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                         double sigma, PackedData data, PassOptions options,
                                         std::shared_ptr<PassBackend> backend)
    : BatchedObjective(std::move(model), std::move(phi_degrees), sigma,
                       std::make_unique<InMemoryPassData>(std::move(data)), std::move(options),
                       std::move(backend)),
      data_view_(static_cast<const InMemoryPassData*>(&pass_data())) {
  const PackedData& values = data_view_->data();
  if (values.size() != static_cast<size_t>(num_angles())) {
    throw std::invalid_argument("objective: " + std::to_string(num_angles()) + " angles for " +
                                std::to_string(values.size()) +
                                " data arrays: need the same number");
  }
  const int n = this->model().num_times();
  const int64_t per_angle = UpperTriangleSize(n);
  for (size_t k = 0; k < values.size(); ++k) {
    if (static_cast<int64_t>(values[k].size()) != per_angle) {
      throw std::invalid_argument("objective: angle " + std::to_string(k) + " has " +
                                  std::to_string(values[k].size()) + " points, expected " +
                                  std::to_string(per_angle) + " (N = " + std::to_string(n) + ")");
    }
  }
  CountFiniteValues(/*gather_over_ranks=*/false);
}

namespace {

// The data of PackedDataObjective(source, ...): on several ranks only this rank's rows, else all.
std::unique_ptr<InMemoryPassData> PackedDataOfThisRank(BatchSource& source, int n_times,
                                                       const PassOptions& options) {
  if (source.info().num_times() != n_times) {
    throw std::invalid_argument("objective: the source has " +
                                std::to_string(source.info().num_times()) +
                                " fitted times, the model " + std::to_string(n_times));
  }
  if (!IsDistributed(options)) {
    return std::make_unique<InMemoryPassData>(PackedDataObjective::LoadPackedData(source));
  }
  return ReadRowsOfThisRank(source, SplitIntoBatches(n_times, options.batch_points), options,
                            int64_t{1} << 20);
}

}  // namespace

PackedDataObjective::PackedDataObjective(BatchSource& source, HomodyneModel model,
                                         std::vector<double> phi_degrees, double sigma,
                                         PassOptions options, std::shared_ptr<PassBackend> backend)
    // model and options are copied: the data and the batch list read them in the same list.
    : BatchedObjective(model, std::move(phi_degrees), sigma,
                       PackedDataOfThisRank(source, model.num_times(), options), options,
                       SplitIntoBatches(model.num_times(), options.batch_points),
                       std::move(backend)),
      data_view_(static_cast<const InMemoryPassData*>(&pass_data())) {
  if (data_view_->data().size() != static_cast<size_t>(num_angles())) {
    throw std::invalid_argument("objective: " + std::to_string(num_angles()) + " angles for " +
                                std::to_string(data_view_->data().size()) +
                                " data arrays: need the same number");
  }
  CountFiniteValues(/*gather_over_ranks=*/true);
}

void PackedDataObjective::CountFiniteValues(bool gather_over_ranks) {
  int64_t finite_points = 0;
  FiniteValueRange range;
  // kLanes running counts, minima and maxima, branch-free, so that the loop is vectorised (a tenth
  // of the in-memory load's CPU when it was a loop of branches); the same count and the same
  // extreme values (equal values differ only as -0 and +0, which compare equal). The lanes' counts
  // are 32-bit, added up every kBlock values.
  constexpr size_t kLanes = 16;
  constexpr size_t kBlock = size_t{1} << 30;
  constexpr float kLargest = std::numeric_limits<float>::max();
  constexpr float kInfinity = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& values : data_view_->data()) {
    float low[kLanes], high[kLanes];
    std::fill(low, low + kLanes, range.min);
    std::fill(high, high + kLanes, range.max);
    const float* data = values.data();
    const size_t whole = values.size() / kLanes * kLanes;
    for (size_t block = 0; block < whole; block += kBlock) {
      const size_t block_end = std::min(whole, block + kBlock);
      int32_t counts[kLanes] = {};
      for (size_t i = block; i < block_end; i += kLanes) {
        for (size_t l = 0; l < kLanes; ++l) {
          const float value = data[i + l];
          const bool finite = std::fabs(value) <= kLargest;  // false for NaN and +-inf
          counts[l] += finite ? 1 : 0;
          const float as_low = finite ? value : kInfinity;
          const float as_high = finite ? value : -kInfinity;
          low[l] = as_low < low[l] ? as_low : low[l];
          high[l] = as_high > high[l] ? as_high : high[l];
        }
      }
      for (size_t l = 0; l < kLanes; ++l) finite_points += counts[l];
    }
    for (size_t l = 0; l < kLanes; ++l) {
      range.min = std::min(range.min, low[l]);
      range.max = std::max(range.max, high[l]);
    }
    for (size_t i = whole; i < values.size(); ++i) {
      const float value = values[i];
      if (!std::isfinite(value)) continue;
      ++finite_points;
      range.min = std::min(range.min, value);
      range.max = std::max(range.max, value);
    }
  }
  if (gather_over_ranks && group() != nullptr && group()->size() > 1) {
    // Every rank's count (exact in a double below 2^53) and range, summed in rank order.
    ProcessGroup& ranks = *group();
    const std::vector<double> mine = {static_cast<double>(finite_points), range.min, range.max};
    const std::vector<int> counts(static_cast<size_t>(ranks.size()), 3);
    std::vector<double> all(static_cast<size_t>(3 * ranks.size()));
    ranks.AllGather(mine, counts, all);
    finite_points = 0;
    for (int r = 0; r < ranks.size(); ++r) {
      finite_points += static_cast<int64_t>(all[static_cast<size_t>(3 * r)]);
      range.min = std::min(range.min, static_cast<float>(all[static_cast<size_t>(3 * r + 1)]));
      range.max = std::max(range.max, static_cast<float>(all[static_cast<size_t>(3 * r + 2)]));
    }
  }
  set_num_finite_points(finite_points);
  range.complete = true;
  set_finite_value_range(range);
}

std::vector<int> PackedDataObjective::held_rows() const {
  return data_view_->HeldRows(batch_list());
}

PackedDataObjective::PackedData PackedDataObjective::LoadPackedData(BatchSource& source,
                                                                    int64_t rows_block_points) {
  const int n = source.info().num_times();
  PackedData data(static_cast<size_t>(source.info().num_angles()));
  const std::vector<RowBatch> blocks = SplitIntoBatches(n, std::max<int64_t>(rows_block_points, 1));
  std::vector<float*> out(data.size());
  for (size_t k = 0; k < data.size(); ++k) {
    data[k].resize(static_cast<size_t>(UpperTriangleSize(n)));
  }
  // Block after block, every angle's rows of a block (ReadRowsOfEveryAngle: compressed chunks
  // decoded on every thread).
  for (const RowBatch& block : blocks) {
    for (size_t k = 0; k < data.size(); ++k) out[k] = data[k].data() + block.offset;
    ReadRowsOfEveryAngle(source, block.row_begin, block.row_end, out);
  }
  source.ReleaseReadBuffers();  // the data are in memory now
  return data;
}

namespace {

// The kept rows (0, s, 2s, ...) as batches with offsets into compact arrays. strided (the
// backend's SupportsRowStride): batches of kept rows that follow each other (RowBatch::row_stride
// = s), each closed once it holds at least kSubsampleBatchPoints points per angle; else one batch
// per row. Stride 1: runs of rows of about kRunPoints points per angle. Sets *total to the points
// per angle.
// kSubsampleBatchPoints: one row per batch made a pass of the two-component example's coarse
// level (rows of 2 to 498 points) spend about a quarter of its time on each batch's own work
// (clearing, adding up and scattering its Gram matrices); batches of at least 1024 points keep
// that to a few per cent and leave 14 batches to the threads on that level
// (docs/history/performance-notebook.md, "The coarse level's passes").
inline constexpr int64_t kSubsampleBatchPoints = 1024;

std::vector<RowBatch> SubsampleRows(int n, int row_stride, bool strided, int64_t* total) {
  if (row_stride < 1) {
    throw std::invalid_argument("row_stride = " + std::to_string(row_stride) + ": must be >= 1");
  }
  if (row_stride == 1) {
    constexpr int64_t kRunPoints = 4096;
    *total = UpperTriangleSize(n);
    return SplitIntoBatches(n, kRunPoints);
  }
  std::vector<RowBatch> batches;
  int64_t offset = 0;
  for (int i = 0; i + 1 < n; i += row_stride) {
    const int64_t points = n - 1 - i;
    const bool extend =
        strided && !batches.empty() && batches.back().points < kSubsampleBatchPoints;
    if (extend) {
      batches.back().row_end = i + 1;
      batches.back().points += points;
    } else {
      batches.push_back({i, i + 1, offset, points, row_stride});
    }
    offset += points;
  }
  *total = offset;
  return batches;
}

// True when the subsample's passes may take strided batches: the backend's (a null backend is
// the CPU's, BatchedObjective).
bool StridedBatches(const std::shared_ptr<PassBackend>& backend) {
  return backend == nullptr || backend->SupportsRowStride();
}

PassOptions SubsamplePassOptions(std::shared_ptr<ProcessGroup> group, LossOptions loss) {
  PassOptions options;
  options.group = std::move(group);
  options.loss = loss;
  return options;
}

}  // namespace

std::unique_ptr<BatchedObjective> MakeRowSubsampleObjective(
    BatchSource& source, HomodyneModel model, std::vector<double> phi_degrees, double sigma,
    int row_stride, std::shared_ptr<PassBackend> backend, std::shared_ptr<ProcessGroup> group,
    LossOptions loss) {
  int64_t total = 0;
  std::vector<RowBatch> rows =
      SubsampleRows(source.info().num_times(), row_stride, StridedBatches(backend), &total);
  PassOptions options = SubsamplePassOptions(std::move(group), loss);
  if (IsDistributed(options)) {
    // Only the rows of this rank's share: the same floats KeepOwnShare would keep.
    std::unique_ptr<InMemoryPassData> data =
        ReadRowsOfThisRank(source, rows, options, int64_t{1} << 20);
    return std::make_unique<BatchedObjective>(std::move(model), std::move(phi_degrees), sigma,
                                              std::move(data), std::move(options), std::move(rows),
                                              std::move(backend));
  }
  InMemoryPassData::PackedData data(static_cast<size_t>(source.info().num_angles()));
  for (size_t k = 0; k < data.size(); ++k) {
    data[k].resize(static_cast<size_t>(total));
    for (const RowBatch& batch : rows) {
      ForEachRowOf(batch, source.info().num_times(),
                   [&](int i, int64_t first_point, int64_t points) {
                     ReadC2Rows(source, static_cast<int>(k), i, i + 1,
                                std::span<float>(data[k].data() + batch.offset + first_point,
                                                 static_cast<size_t>(points)));
                   });
    }
  }
  source.ReleaseReadBuffers();  // the subsample is in memory now
  return std::make_unique<BatchedObjective>(std::move(model), std::move(phi_degrees), sigma,
                                            std::make_unique<InMemoryPassData>(std::move(data)),
                                            std::move(options), std::move(rows),
                                            std::move(backend));
}

std::unique_ptr<BatchedObjective> MakeRowSubsampleObjective(
    const InMemoryPassData::PackedData& packed, HomodyneModel model,
    std::vector<double> phi_degrees, double sigma, int row_stride,
    std::shared_ptr<PassBackend> backend, std::shared_ptr<ProcessGroup> group, LossOptions loss) {
  const int n = model.num_times();
  int64_t total = 0;
  std::vector<RowBatch> rows = SubsampleRows(n, row_stride, StridedBatches(backend), &total);
  InMemoryPassData::PackedData data(packed.size());
  for (size_t k = 0; k < data.size(); ++k) {
    data[k].resize(static_cast<size_t>(total));
    for (const RowBatch& batch : rows) {
      ForEachRowOf(batch, n, [&](int i, int64_t first_point, int64_t points) {
        const float* from = packed[k].data() + UpperTriangleRowOffset(n, i);
        std::copy(from, from + points, data[k].data() + batch.offset + first_point);
      });
    }
  }
  return std::make_unique<BatchedObjective>(std::move(model), std::move(phi_degrees), sigma,
                                            std::make_unique<InMemoryPassData>(std::move(data)),
                                            SubsamplePassOptions(std::move(group), loss),
                                            std::move(rows), std::move(backend));
}

}  // namespace homodyne
