// The standard strategy (docs/design.md section 3): the objective of docs/design.md section 1 as
// Ceres residual blocks (runs of whole rows of one angle's strict upper triangle), solved by
// Ceres' Levenberg-Marquardt with DENSE_QR and bounds; the summary is filled as the LM core's.
//
// Ceres is linked as its shared library (src/optimize/CMakeLists.txt), and only Ceres headers that
// do not include Eigen are used here, so no Eigen code built for another instruction set is mixed
// with ours.
#include <ceres/cost_function.h>
#include <ceres/evaluation_callback.h>
#include <ceres/iteration_callback.h>
#include <ceres/manifold.h>
#include <ceres/problem.h>
#include <ceres/solver.h>
#include <glog/logging.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "objective/batched_objective.h"
#include "optimize/bounds.h"
#include "optimize/ceres_standard_fit.h"
#include "optimize/ceres_termination.h"
#include "optimize/number_text.h"

namespace homodyne {
namespace {

// A residual block holds whole rows of one angle and is closed once it has at least this many
// points: enough work per block for Ceres' threads, small per-thread scratch (rows x 9 doubles).
constexpr int64_t kBlockPoints = 4096;

// Ceres works on scaled parameters: the reduced point (per_angle_mode.h) divided elementwise by a
// vector of powers of two (see PowerOfTwoJacobiScale), so that both directions of the conversion
// are exact and a checkpoint can hold the reduced point itself.
//
// The model at the point Ceres evaluates next, shared by every residual block. Ceres calls
// PrepareForEvaluation before each evaluation, with the user's parameter block (`scaled`) holding
// the point (ceres/evaluation_callback.h); the O(N) model work is done there once instead of once
// per block. Counts the passes over the data.
class ModelAtPoint : public ceres::EvaluationCallback {
 public:
  // model and map must outlive this object; scaled points at map.num_reduced() values; the full
  // layout has num_angles contrasts and offsets (batched_objective.h). The scale starts at 1.
  ModelAtPoint(const HomodyneModel& model, const ScalingMap& map, int num_angles,
               const double* scaled)
      : model_(model),
        map_(map),
        num_angles_(num_angles),
        scaled_(scaled),
        scale_(Eigen::VectorXd::Ones(map.num_reduced())) {}

  void PrepareForEvaluation(bool evaluate_jacobians, bool new_evaluation_point) override {
    if (evaluate_jacobians) {
      ++full_passes_;
    } else {
      ++cost_passes_;
    }
    last_evaluation_with_jacobian_ = evaluate_jacobians;
    if (new_evaluation_point || !evaluation_) {
      SetPoint(Eigen::Map<const Eigen::VectorXd>(scaled_, map_.num_reduced()));
    }
  }

  // Evaluates the model at a scaled point (also used outside Ceres: scaling and covariance).
  void SetPoint(const Eigen::VectorXd& scaled) {
    point_ = scaled;
    full_ = map_.Expand(Unscale(scaled));
    const int num_physical = model_.num_physical();
    evaluation_.emplace(model_, std::span<const double>(full_.data(), num_physical));
  }

  // reduced = scaled * scale (elementwise); powers of two, so Scale(Unscale(x)) == x bitwise.
  void SetScale(const Eigen::VectorXd& scale) {
    scale_ = scale;
    evaluation_.reset();
  }
  const Eigen::VectorXd& scale() const { return scale_; }
  Eigen::VectorXd Unscale(const Eigen::VectorXd& scaled) const {
    return scaled.cwiseProduct(scale_);
  }
  Eigen::VectorXd Scale(const Eigen::VectorXd& reduced) const {
    return reduced.cwiseQuotient(scale_);
  }

  // True when the prepared point is `scaled` bitwise (the contract of the evaluation callback).
  bool IsAt(const double* scaled) const {
    return evaluation_ && std::equal(point_.data(), point_.data() + point_.size(), scaled);
  }
  const ModelEvaluation& evaluation() const { return *evaluation_; }
  // The (scaled) point of the last evaluation, Ceres' or SetPoint's.
  const Eigen::VectorXd& point() const { return point_; }
  // Whether Ceres' last evaluation asked for the Jacobian (false: cost only, or none yet).
  bool last_evaluation_with_jacobian() const { return last_evaluation_with_jacobian_; }
  double contrast(int angle) const { return full_[model_.num_physical() + angle]; }
  double offset(int angle) const { return full_[model_.num_physical() + num_angles_ + angle]; }
  int64_t full_passes() const { return full_passes_; }
  int64_t cost_passes() const { return cost_passes_; }

 private:
  const HomodyneModel& model_;
  const ScalingMap& map_;
  int num_angles_;
  const double* scaled_;
  Eigen::VectorXd scale_;
  Eigen::VectorXd point_;  // scaled
  Eigen::VectorXd full_;   // map_.Expand(Unscale(point_))
  std::optional<ModelEvaluation> evaluation_;
  int64_t full_passes_ = 0;
  int64_t cost_passes_ = 0;
  bool last_evaluation_with_jacobian_ = false;
};

// One residual block: the finite points of rows [row_begin, row_end) of one angle. Residual of a
// point: sqrt(2) (data - c2) / sigma (the point stands for itself and its mirror image,
// docs/design.md section 1); Jacobian row with respect to the scaled parameters: -sqrt(2) / sigma
// (d c2 / d theta_full) T diag(scale), T = ScalingMap::matrix.
class UpperTriangleRowsCost : public ceres::CostFunction {
 public:
  // point: must outlive this object. packed_data: the angle's packed triangle from row_begin on
  // (not owned). finite_points: the block's finite points as indices from row_begin's first
  // point, empty when all are finite. reduced_rows: rows of T that c2 of this angle depends on
  // (physical..., contrast_k, offset_k), num_point_derivatives() x num_reduced.
  UpperTriangleRowsCost(const ModelAtPoint& point, double phi_degrees, int angle, RowBatch rows,
                        int64_t num_points, const float* packed_data,
                        std::vector<int32_t> finite_points, Eigen::MatrixXd reduced_rows,
                        double weight)
      : point_(point),
        phi_degrees_(phi_degrees),
        angle_(angle),
        rows_(rows),
        num_points_(num_points),
        packed_data_(packed_data),
        finite_points_(std::move(finite_points)),
        reduced_rows_(std::move(reduced_rows)),
        weight_(weight) {
    set_num_residuals(
        static_cast<int>(finite_points_.empty() ? num_points_ : finite_points_.size()));
    mutable_parameter_block_sizes()->push_back(static_cast<int32_t>(reduced_rows_.cols()));
  }

  bool Evaluate(double const* const* parameters, double* residuals,
                double** jacobians) const override {
    HOMODYNE_CHECK(point_.IsAt(parameters[0]));
    const bool with_jacobian = jacobians != nullptr && jacobians[0] != nullptr;
    const Eigen::Index stride = reduced_rows_.rows();  // num_point_derivatives()
    // Per-thread scratch: Ceres calls blocks concurrently, and a block's Jacobian scratch is
    // larger than malloc's mmap threshold, so it is kept instead of allocated per call.
    thread_local std::vector<double> c2;
    thread_local std::vector<double> derivatives;
    c2.resize(static_cast<size_t>(num_points_));
    derivatives.resize(with_jacobian ? static_cast<size_t>(num_points_ * stride) : 0);
    // The matrix's own q (docs/design.md section 2d).
    point_.evaluation().OfAngle(angle_).EvaluateUpperTriangleRows(
        phi_degrees_, point_.contrast(angle_), point_.offset(angle_), rows_.row_begin,
        rows_.row_end, c2, derivatives);

    const int num_finite = num_residuals();
    if (finite_points_.empty()) {
      for (int p = 0; p < num_finite; ++p) {
        residuals[p] = weight_ * (static_cast<double>(packed_data_[p]) - c2[p]);
      }
    } else {
      // Compact the finite points to the front (f <= finite_points_[f], so in place).
      for (int f = 0; f < num_finite; ++f) {
        const int64_t p = finite_points_[static_cast<size_t>(f)];
        residuals[f] = weight_ * (static_cast<double>(packed_data_[p]) - c2[p]);
        if (with_jacobian) {
          std::copy_n(derivatives.begin() + p * stride, stride, derivatives.begin() + f * stride);
        }
      }
    }
    if (with_jacobian) {
      using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
      const Eigen::Map<const RowMajor> model_jacobian(derivatives.data(), num_finite, stride);
      Eigen::Map<RowMajor> jacobian(jacobians[0], num_finite, reduced_rows_.cols());
      thread_local Eigen::MatrixXd scaled_rows;
      scaled_rows = reduced_rows_ * point_.scale().asDiagonal();
      jacobian.noalias() = (-weight_) * (model_jacobian * scaled_rows);
    }
    return true;
  }

 private:
  const ModelAtPoint& point_;
  double phi_degrees_;
  int angle_;
  RowBatch rows_;       // rows [row_begin, row_end) of the strict upper triangle
  int64_t num_points_;  // points in the rows, finite or not
  const float* packed_data_;
  std::vector<int32_t> finite_points_;
  Eigen::MatrixXd reduced_rows_;
  double weight_;
};

// Reports Ceres' iterations to LevenbergMarquardtOptions::callback and keeps the run's state:
// counters, chi2 history and, after the start and every accepted step, the resumable state from
// which a new Ceres run continues exactly as this one (FitStandardWithCeres). Needs
// Solver::Options::update_state_every_iteration, so that `scaled` holds the current point.
class IterationReporter : public ceres::IterationCallback {
 public:
  // start: the state the run continues (a checkpoint's) or a fresh one with zero counters;
  // passes_before: full passes made before Ceres started (the scaling pass, a resumed run's).
  IterationReporter(const LevenbergMarquardtOptions& options, const ModelAtPoint& point,
                    const double* scaled, int num_reduced, LevenbergMarquardtState start,
                    bool resumed, int64_t passes_before,
                    std::chrono::steady_clock::time_point start_time)
      : options_(options),
        point_(point),
        scaled_(scaled),
        num_reduced_(num_reduced),
        state_(std::move(start)),
        resumed_(resumed),
        passes_before_(passes_before),
        cost_passes_before_(state_.cost_passes),
        start_time_(start_time) {}

  ceres::CallbackReturnType operator()(const ceres::IterationSummary& summary) override {
    current_ = point_.Unscale(Eigen::Map<const Eigen::VectorXd>(scaled_, num_reduced_));
    const double chi2 = 2.0 * summary.cost;  // after a rejected step: the current point's
    if (summary.iteration == 0) {
      if (!resumed_) {
        state_.initial_chi2 = chi2;
        state_.chi2_history.push_back(chi2);
      }
    } else {
      ++state_.iterations;
      ++(summary.step_is_successful ? state_.accepted_steps : state_.rejected_steps);
      state_.chi2_history.push_back(chi2);
    }
    state_.passes = passes_before_ + point_.full_passes();
    state_.cost_passes = cost_passes_before_ + point_.cost_passes();
    // After an accepted step Ceres' Levenberg-Marquardt strategy holds nothing but the radius
    // (its decrease factor is reset and the next diagonal is computed afresh), so the point and
    // the radius are all a new run needs. After a rejected step it holds more: not resumable.
    if (summary.iteration == 0 || summary.step_is_successful) {
      state_.theta = current_;
      state_.chi2 = chi2;
      state_.solver = StateSolver::kCeres;
      state_.trust_region_radius = summary.trust_region_radius;
      resumable_ = state_;
    }
    // A resumed run's iteration 0 is the checkpoint's last iteration, already reported.
    if (!options_.callback || (resumed_ && summary.iteration == 0)) return ceres::SOLVER_CONTINUE;
    LevenbergMarquardtIteration report;
    report.iteration = state_.iterations;
    report.step_accepted = summary.iteration > 0 && summary.step_is_successful;
    report.chi2 = chi2;
    // After a rejected step `cost` is the current point's and cost_change the trial's decrease.
    report.trial_chi2 = summary.iteration == 0 || summary.step_is_successful
                            ? report.chi2
                            : (summary.step_is_valid ? 2.0 * (summary.cost - summary.cost_change)
                                                     : std::numeric_limits<double>::quiet_NaN());
    report.damping = summary.trust_region_radius > 0.0 ? 1.0 / summary.trust_region_radius : 0.0;
    report.step_norm = summary.step_norm;
    report.gain_ratio = summary.iteration > 0 ? summary.relative_decrease : 0.0;
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
    report.passes = state_.passes;
    report.cost_passes = state_.cost_passes;
    report.theta = current_;
    report.state = resumable_;
    return options_.callback(report) ? ceres::SOLVER_CONTINUE
                                     : ceres::SOLVER_TERMINATE_SUCCESSFULLY;
  }

  // The current (reduced) point after the last iteration reported; empty before the first.
  const Eigen::VectorXd& current() const { return current_; }
  // Counters and chi2 history after the last iteration reported.
  const LevenbergMarquardtState& state() const { return state_; }

 private:
  const LevenbergMarquardtOptions& options_;
  const ModelAtPoint& point_;
  const double* scaled_;
  int num_reduced_;
  LevenbergMarquardtState state_;
  LevenbergMarquardtState resumable_;
  bool resumed_;
  int64_t passes_before_;
  int64_t cost_passes_before_;
  std::chrono::steady_clock::time_point start_time_;
  Eigen::VectorXd current_;
};

// Raises glog's threshold to errors while alive: Ceres' informational and warning lines do not
// belong in our logs (the summary carries its message). Not thread-safe (a global flag).
class QuietGlog {
 public:
  QuietGlog() : saved_(FLAGS_minloglevel) {
    FLAGS_minloglevel = std::max<int>(saved_, google::GLOG_ERROR);
  }
  ~QuietGlog() { FLAGS_minloglevel = saved_; }
  QuietGlog(const QuietGlog&) = delete;
  QuietGlog& operator=(const QuietGlog&) = delete;

 private:
  int saved_;
};

// Normal equations over every residual block at `scaled`, reduced in block order (so the result
// does not depend on the thread count), with respect to the reduced (unscaled) parameters: J^T J,
// J^T r and chi2 = sum of squared Ceres residuals (both triangles, our convention), num_points =
// the residuals chi2 counts (2 per finite point).
NormalEquations AccumulateNormalEquations(
    const std::vector<std::unique_ptr<UpperTriangleRowsCost>>& blocks, ModelAtPoint& point,
    const Eigen::VectorXd& scaled) {
  point.SetPoint(scaled);
  const int p = static_cast<int>(scaled.size());
  const int num_blocks = static_cast<int>(blocks.size());
  std::vector<Eigen::MatrixXd> block_jtj(static_cast<size_t>(num_blocks));
  std::vector<Eigen::VectorXd> block_jtr(static_cast<size_t>(num_blocks));
  std::vector<double> block_chi2(static_cast<size_t>(num_blocks), 0.0);
#pragma omp parallel for schedule(dynamic)
  for (int b = 0; b < num_blocks; ++b) {
    const UpperTriangleRowsCost& block = *blocks[static_cast<size_t>(b)];
    const int m = block.num_residuals();
    Eigen::VectorXd residuals(m);
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> jacobian(m, p);
    const double* parameters[] = {scaled.data()};
    double* jacobians[] = {jacobian.data()};
    HOMODYNE_CHECK(block.Evaluate(parameters, residuals.data(), jacobians));
    const size_t slot = static_cast<size_t>(b);
    block_jtj[slot] = jacobian.transpose() * jacobian;
    block_jtr[slot] = jacobian.transpose() * residuals;
    block_chi2[slot] = residuals.squaredNorm();
  }
  NormalEquations equations;
  equations.jtj = Eigen::MatrixXd::Zero(p, p);
  equations.jtr = Eigen::VectorXd::Zero(p);
  for (int b = 0; b < num_blocks; ++b) {
    const size_t slot = static_cast<size_t>(b);
    equations.jtj += block_jtj[slot];
    equations.jtr += block_jtr[slot];
    equations.chi2 += block_chi2[slot];
    equations.num_points += 2 * int64_t{blocks[slot]->num_residuals()};
  }
  // Back from the scaled parameters (exact: the scale holds powers of two).
  const Eigen::VectorXd& scale = point.scale();
  equations.jtj =
      scale.cwiseInverse().asDiagonal() * equations.jtj * scale.cwiseInverse().asDiagonal();
  equations.jtr = equations.jtr.cwiseQuotient(scale);
  return equations;
}

// The scale of the parameters Ceres sees (ModelAtPoint): Ceres' Jacobi scaling 1 / (1 + |J_i|)
// (column norms at the start), rounded to the nearest power of two. Ours rather than Ceres'
// (which it recomputes at every start) so that a resumed run scales as the original did.
Eigen::VectorXd PowerOfTwoJacobiScale(const Eigen::MatrixXd& jtj) {
  Eigen::VectorXd scale = Eigen::VectorXd::Ones(jtj.rows());
  for (Eigen::Index i = 0; i < jtj.rows(); ++i) {
    const double column_norm = std::sqrt(jtj(i, i));
    if (!std::isfinite(column_norm) || column_norm <= 0.0) continue;
    const long exponent = std::lround(std::log2(1.0 / (1.0 + column_norm)));
    scale[i] = std::ldexp(1.0, static_cast<int>(std::clamp(exponent, -1000L, 0L)));
  }
  return scale;
}

// True when every residual and Jacobian entry of every block at `scaled` is finite: what Ceres
// requires of an evaluation (its ResidualBlock::Evaluate fails otherwise).
bool EvaluationIsFinite(const std::vector<std::unique_ptr<UpperTriangleRowsCost>>& blocks,
                        ModelAtPoint& point, const Eigen::VectorXd& scaled) {
  point.SetPoint(scaled);
  const int p = static_cast<int>(scaled.size());
  const int num_blocks = static_cast<int>(blocks.size());
  bool finite = true;
#pragma omp parallel for schedule(dynamic) reduction(&& : finite)
  for (int b = 0; b < num_blocks; ++b) {
    const UpperTriangleRowsCost& block = *blocks[static_cast<size_t>(b)];
    Eigen::VectorXd residuals(block.num_residuals());
    Eigen::MatrixXd jacobian(block.num_residuals(), p);
    const double* parameters[] = {scaled.data()};
    double* jacobians[] = {jacobian.data()};
    HOMODYNE_CHECK(block.Evaluate(parameters, residuals.data(), jacobians));
    finite = finite && residuals.allFinite() && jacobian.allFinite();
  }
  return finite;
}

// Size and value checks of FitStandardWithCeres' inputs (std::invalid_argument).
void CheckInputs(const LevenbergMarquardtOptions& options, const HomodyneModel& model,
                 const std::vector<double>& phi_degrees, double sigma,
                 const PackedDataObjective::PackedData& data, const ScalingMap& map,
                 const Eigen::VectorXd& theta0_reduced) {
  const int num_angles = static_cast<int>(phi_degrees.size());
  const int p = map.num_reduced();
  auto fail = [](const std::string& message) {
    throw std::invalid_argument("FitStandardWithCeres: " + message);
  };
  if (!(sigma > 0.0) || !std::isfinite(sigma))
    fail("sigma = " + FormatNumber(sigma) + ": must be > 0");
  if (num_angles == 0) fail("no angles");
  if (static_cast<int>(data.size()) != num_angles) {
    fail(std::to_string(data.size()) + " data angles but " + std::to_string(num_angles) +
         " phi angles");
  }
  const int64_t points = UpperTriangleSize(model.num_times());
  for (const std::vector<float>& angle : data) {
    if (static_cast<int64_t>(angle.size()) != points) {
      fail("an angle holds " + std::to_string(angle.size()) + " points; the upper triangle of " +
           std::to_string(model.num_times()) + " times has " + std::to_string(points));
    }
  }
  if (map.num_full() != model.num_physical() + 2 * num_angles ||
      map.shift.size() != map.num_full()) {
    fail("the scaling map has " + std::to_string(map.num_full()) + " full parameters; " +
         std::to_string(model.num_physical() + 2 * num_angles) + " expected");
  }
  if (p == 0) fail("the scaling map has no parameter to fit");
  if (theta0_reduced.size() != p) {
    fail("theta0 has " + std::to_string(theta0_reduced.size()) + " values; the map has " +
         std::to_string(p) + " parameters");
  }
  if (options.lower_bounds.size() != 0 && options.lower_bounds.size() != p) {
    fail(std::to_string(options.lower_bounds.size()) + " bounds for " + std::to_string(p) +
         " parameters");
  }
  if (!options.parameter_names.empty() && static_cast<int>(options.parameter_names.size()) != p) {
    fail(std::to_string(options.parameter_names.size()) + " parameter names for " +
         std::to_string(p) + " parameters");
  }
  if (const std::optional<LevenbergMarquardtState>& state = options.resume_state) {
    if (state->solver != StateSolver::kCeres || state->theta.size() != p ||
        !state->theta.allFinite() || !(state->trust_region_radius > 0.0) ||
        !std::isfinite(state->trust_region_radius) || state->iterations < 0 ||
        state->iterations > options.max_iterations) {
      fail("resume_state is not a state of this standard fit (written by Ceres, " +
           std::to_string(p) +
           " parameters, trust region radius > 0, at most max_iterations iterations)");
    }
  }
}

}  // namespace

namespace fit_internal {

LevenbergMarquardtStatus StatusOfCeresTermination(const CeresTermination& termination) {
  switch (termination.type) {
    case ceres::CONVERGENCE: {
      if (!termination.last_iteration) {
        return LevenbergMarquardtStatus::kConvergedFtol;  // nothing to optimise: all held fixed
      }
      const ceres::IterationSummary& last = *termination.last_iteration;
      if (last.step_is_successful && last.gradient_max_norm <= termination.gradient_tolerance) {
        return LevenbergMarquardtStatus::kConvergedGtol;
      }
      if (last.trust_region_radius <= termination.min_trust_region_radius) {
        return LevenbergMarquardtStatus::kFailedDamping;
      }
      const double x_norm =
          termination.bounded || termination.accepted_step ? termination.result.norm() : -1.0;
      const double xtol = termination.parameter_tolerance;
      const double step_norm = (termination.result - termination.last_evaluated).norm();
      return step_norm <= xtol * (x_norm + xtol) ? LevenbergMarquardtStatus::kConvergedXtol
                                                 : LevenbergMarquardtStatus::kConvergedFtol;
    }
    case ceres::NO_CONVERGENCE:
      return LevenbergMarquardtStatus::kMaxIterations;
    case ceres::FAILURE:
      return termination.jacobian_evaluation_failed ? LevenbergMarquardtStatus::kFailedNonFinite
                                                    : LevenbergMarquardtStatus::kFailedRejections;
    case ceres::USER_SUCCESS:
    case ceres::USER_FAILURE:
      return LevenbergMarquardtStatus::kStoppedByCallback;
  }
  return LevenbergMarquardtStatus::kFailedRejections;
}

}  // namespace fit_internal

namespace {

// Step 2 of the fit: the residual blocks over the finite data points. Per angle, runs of whole
// rows of its strict upper triangle (the batches of the other strategies, batched_objective.h,
// with a smaller size), each over the run's finite points (a run with none is left out), mapping
// the reduced parameters to the angle's physical, contrast and offset rows of `map`; each reads
// the model at `point`. Throws DataError when every data point is NaN or infinite.
std::vector<std::unique_ptr<UpperTriangleRowsCost>> MakeResidualBlocks(
    const HomodyneModel& model, const std::vector<double>& phi_degrees, double sigma,
    const PackedDataObjective::PackedData& data, const ScalingMap& map, const ModelAtPoint& point) {
  const int num_angles = static_cast<int>(phi_degrees.size());
  const int num_physical = model.num_physical();
  const int p = map.num_reduced();
  const double weight = std::sqrt(2.0) / sigma;
  const std::vector<RowBatch> runs = SplitIntoBatches(model.num_times(), kBlockPoints);
  std::vector<std::unique_ptr<UpperTriangleRowsCost>> blocks;
  for (int k = 0; k < num_angles; ++k) {
    Eigen::MatrixXd reduced_rows(model.num_point_derivatives(), p);
    reduced_rows.topRows(num_physical) = map.matrix.topRows(num_physical);
    reduced_rows.row(num_physical) = map.matrix.row(num_physical + k);
    reduced_rows.row(num_physical + 1) = map.matrix.row(num_physical + num_angles + k);
    const std::vector<float>& angle_data = data[static_cast<size_t>(k)];
    for (const RowBatch& run : runs) {
      const int64_t first = run.offset;
      const int64_t num_points = run.points;
      std::vector<int32_t> finite_points;
      int64_t num_finite = 0;
      for (int64_t q = 0; q < num_points; ++q) {
        if (std::isfinite(angle_data[static_cast<size_t>(first + q)])) ++num_finite;
      }
      if (num_finite == 0) continue;
      if (num_finite < num_points) {
        for (int64_t q = 0; q < num_points; ++q) {
          if (std::isfinite(angle_data[static_cast<size_t>(first + q)])) {
            finite_points.push_back(static_cast<int32_t>(q));
          }
        }
      }
      blocks.push_back(std::make_unique<UpperTriangleRowsCost>(
          point, phi_degrees[static_cast<size_t>(k)], k, run, num_points, angle_data.data() + first,
          std::move(finite_points), reduced_rows, weight));
    }
  }
  if (blocks.empty()) throw DataError("standard fit: every data point is NaN or infinite");
  return blocks;
}

// Where Ceres starts: the normal equations at the (clipped) start and the state the run
// continues (a resumed run's, or a fresh one that counts the start's points).
struct CeresStart {
  NormalEquations at_start;
  LevenbergMarquardtState state;
};

// Step 3 of the fit: the scale of the parameters, from the Jacobian at the start `theta` (which
// `scaled`, Ceres' parameter block, holds unscaled on entry), set on `point`; a resumed run
// recomputes it bit for bit. Then the point Ceres starts from, the start or the resumed state's,
// scaled and written into `scaled` in place (Ceres holds its address).
CeresStart ScaleAndPlaceTheStart(const std::vector<std::unique_ptr<UpperTriangleRowsCost>>& blocks,
                                 ModelAtPoint& point, Eigen::VectorXd& scaled,
                                 const Eigen::VectorXd& theta,
                                 const std::optional<LevenbergMarquardtState>& resumed) {
  CeresStart start;
  start.at_start = AccumulateNormalEquations(blocks, point, scaled);
  point.SetScale(PowerOfTwoJacobiScale(start.at_start.jtj));
  const Eigen::Index p = scaled.size();
  if (resumed) {
    start.state = *resumed;
    Eigen::VectorXd::Map(scaled.data(), p) = point.Scale(resumed->theta);
  } else {
    start.state.num_points = start.at_start.num_points;
    Eigen::VectorXd::Map(scaled.data(), p) = point.Scale(theta);
  }
  return start;
}

// Step 3 of the fit: Ceres' problem, one parameter block `block` (p scaled parameters) with the
// finite bounds, scaled, and every residual block (the problem owns none). Ceres rejects
// lower == upper as a bound: such a parameter is held constant instead (the whole block when
// every parameter is).
void AddBlocksAndBounds(ceres::Problem& problem, double* block, const Eigen::VectorXd& lower,
                        const Eigen::VectorXd& upper, const ModelAtPoint& point,
                        const std::vector<std::unique_ptr<UpperTriangleRowsCost>>& blocks) {
  const int p = static_cast<int>(lower.size());
  const Eigen::VectorXd scaled_lower = point.Scale(lower);
  const Eigen::VectorXd scaled_upper = point.Scale(upper);
  std::vector<int> fixed_by_bounds;
  for (int i = 0; i < p; ++i) {
    if (lower[i] == upper[i]) fixed_by_bounds.push_back(i);
  }
  if (static_cast<int>(fixed_by_bounds.size()) == p) {
    problem.AddParameterBlock(block, p);
    problem.SetParameterBlockConstant(block);
  } else if (!fixed_by_bounds.empty()) {
    problem.AddParameterBlock(block, p, new ceres::SubsetManifold(p, fixed_by_bounds));
  } else {
    problem.AddParameterBlock(block, p);
  }
  for (int i = 0; i < p; ++i) {
    if (lower[i] == upper[i]) continue;
    if (std::isfinite(lower[i])) problem.SetParameterLowerBound(block, i, scaled_lower[i]);
    if (std::isfinite(upper[i])) problem.SetParameterUpperBound(block, i, scaled_upper[i]);
  }
  for (const std::unique_ptr<UpperTriangleRowsCost>& residuals : blocks) {
    problem.AddResidualBlock(residuals.get(), nullptr, block);
  }
}

// Step 4 of the fit: Ceres' Levenberg-Marquardt with our tolerances (ceres_standard_fit.h says
// how they map), continuing the start's state (a resumed one with its radius and the iterations
// it has left). The caller adds the iteration callback.
ceres::Solver::Options LevenbergMarquardtSolverOptions(
    const LevenbergMarquardtOptions& options, const LevenbergMarquardtState& start_state,
    const std::optional<LevenbergMarquardtState>& resumed) {
  ceres::Solver::Options solver_options;
  solver_options.minimizer_type = ceres::TRUST_REGION;
  solver_options.trust_region_strategy_type = ceres::LEVENBERG_MARQUARDT;
  solver_options.linear_solver_type = ceres::DENSE_QR;
  solver_options.function_tolerance = options.ftol;
  solver_options.parameter_tolerance = options.xtol;
  solver_options.gradient_tolerance = options.gtol;
  solver_options.max_num_iterations = options.max_iterations - start_state.iterations;
  solver_options.initial_trust_region_radius =
      resumed ? resumed->trust_region_radius : 1.0 / options.initial_damping;
  solver_options.jacobi_scaling = false;  // ModelAtPoint's scale instead
  solver_options.min_trust_region_radius =
      std::min(1.0 / options.max_damping, solver_options.initial_trust_region_radius);
  solver_options.max_trust_region_radius =
      std::max(solver_options.max_trust_region_radius, solver_options.initial_trust_region_radius);
  solver_options.num_threads = std::max(1, omp_get_max_threads());
  solver_options.minimizer_progress_to_stdout = false;
  solver_options.logging_type = ceres::SILENT;
  solver_options.update_state_every_iteration = true;  // IterationReporter reads the point
  // No projected line search on bounded problems: with Ceres' default cubic interpolation it
  // costs a Jacobian pass per step, and steps are projected onto the bounds anyway (as the core).
  solver_options.max_num_line_search_step_size_iterations = 0;
  return solver_options;
}

// Step 5 of the fit: how the run ended, as the LM core's status
// (fit_internal::StatusOfCeresTermination), from Ceres' summary, the options it ran with, the
// bounds set in AddBlocksAndBounds, Ceres' result `scaled` and the last point evaluated.
LevenbergMarquardtStatus StatusOfRun(
    const ceres::Solver::Summary& ceres_summary, const ceres::Solver::Options& solver_options,
    const Eigen::VectorXd& lower, const Eigen::VectorXd& upper, const Eigen::VectorXd& scaled,
    ModelAtPoint& point, const std::vector<std::unique_ptr<UpperTriangleRowsCost>>& blocks) {
  fit_internal::CeresTermination termination;
  termination.type = ceres_summary.termination_type;
  if (!ceres_summary.iterations.empty()) {
    termination.last_iteration = ceres_summary.iterations.back();
  }
  termination.accepted_step = std::any_of(
      ceres_summary.iterations.begin(), ceres_summary.iterations.end(),
      [](const ceres::IterationSummary& it) { return it.iteration > 0 && it.step_is_successful; });
  termination.gradient_tolerance = solver_options.gradient_tolerance;
  termination.parameter_tolerance = solver_options.parameter_tolerance;
  termination.min_trust_region_radius = solver_options.min_trust_region_radius;
  for (Eigen::Index i = 0; i < lower.size(); ++i) {
    termination.bounded |=
        lower[i] != upper[i] && (std::isfinite(lower[i]) || std::isfinite(upper[i]));
  }
  termination.result = scaled;
  termination.last_evaluated = point.point();
  if (ceres_summary.termination_type == ceres::FAILURE && point.last_evaluation_with_jacobian()) {
    // The evaluation that failed (if one did) is the last: Ceres stops at a failed Jacobian
    // evaluation and takes a failed cost-only one for an infinite cost.
    termination.jacobian_evaluation_failed = !EvaluationIsFinite(blocks, point, point.point());
  }
  return fit_internal::StatusOfCeresTermination(termination);
}

// Step 5 of the fit: the summary's counters, chi2 history, start chi2 and final damping, as
// Minimize fills them (counters continued from a resumed state). Ceres reports no iteration when
// no parameter block varies (every parameter held by equal bounds); the start's chi2 is then the
// pass at the start (or the resumed state's), never NaN, which the result would take for a
// non-finite objective (src/pipeline/fit_solution.h).
void CopyRunCounters(const IterationReporter& reporter, const ceres::Solver::Summary& ceres_summary,
                     const std::optional<LevenbergMarquardtState>& resumed,
                     const NormalEquations& at_start, LevenbergMarquardtSummary& summary) {
  const LevenbergMarquardtState& final_state = reporter.state();
  summary.iterations = final_state.iterations;
  summary.accepted_steps = final_state.accepted_steps;
  summary.rejected_steps = final_state.rejected_steps;
  summary.chi2_history = final_state.chi2_history;
  summary.initial_chi2 = !final_state.chi2_history.empty() ? final_state.initial_chi2
                         : resumed                         ? resumed->initial_chi2
                                                           : at_start.chi2;
  if (!ceres_summary.iterations.empty()) {
    const double radius = ceres_summary.iterations.back().trust_region_radius;
    summary.final_damping = radius > 0.0 ? 1.0 / radius : 0.0;
  }
}

// Step 5 of the fit: the result point in `scaled`. After FAILURE and USER_FAILURE Ceres does not
// write its result there, which then holds the last point evaluated: the last accepted one
// (the reporter's) is put there instead.
void PlaceTheResult(const ceres::Solver::Summary& ceres_summary, const IterationReporter& reporter,
                    const ModelAtPoint& point, Eigen::VectorXd& scaled) {
  const bool ceres_wrote_result = ceres_summary.termination_type == ceres::CONVERGENCE ||
                                  ceres_summary.termination_type == ceres::NO_CONVERGENCE ||
                                  ceres_summary.termination_type == ceres::USER_SUCCESS;
  if (!ceres_wrote_result && reporter.current().size() == scaled.size()) {
    Eigen::VectorXd::Map(scaled.data(), scaled.size()) = point.Scale(reporter.current());
  }
}

// Step 6 of the fit: one pass at the result `scaled` for chi2 and the covariance (docs/design.md
// section 4), and the passes: the start's state's, the scale's pass, Ceres' Jacobian passes and
// this one (cost-only evaluations as cost passes).
void FinishAtTheResult(const std::vector<std::unique_ptr<UpperTriangleRowsCost>>& blocks,
                       ModelAtPoint& point, const Eigen::VectorXd& scaled,
                       const Eigen::VectorXd& lower, const Eigen::VectorXd& upper,
                       const LevenbergMarquardtState& start_state,
                       const ceres::Solver::Summary& ceres_summary,
                       LevenbergMarquardtSummary& summary) {
  const int p = static_cast<int>(scaled.size());
  const NormalEquations equations = AccumulateNormalEquations(blocks, point, scaled);
  summary.passes = start_state.passes + 1 + std::max(ceres_summary.num_jacobian_evaluations, 0) + 1;
  summary.cost_passes =
      start_state.cost_passes + std::max(ceres_summary.num_residual_evaluations, 0);
  summary.final_chi2 = equations.chi2;
  summary.dof = equations.num_points - p;
  if (summary.dof <= 0) {
    summary.warnings.push_back("degrees of freedom = " + std::to_string(summary.dof) +
                               " (<= 0): covariance uses dof = 1");
  }
  const double s2 = equations.chi2 / static_cast<double>(std::max<int64_t>(summary.dof, 1));
  summary.reduced_chi2 = s2;
  if (std::isfinite(equations.chi2) && equations.jtj.allFinite() && equations.jtr.allFinite()) {
    ComputeCovarianceAtSolution(equations, summary.theta, lower, upper, s2, summary);
  } else {
    summary.warnings.push_back("no covariance: chi2 or J^T J is not finite at the result");
  }
}

}  // namespace

// The fit as its steps: 1 the start clipped into the bounds, 2 the residual blocks, 3 the scale,
// the start and Ceres' problem, 4 Ceres' run, 5 the summary from it, 6 the pass at the result.
LevenbergMarquardtSummary FitStandardWithCeres(const LevenbergMarquardtOptions& options,
                                               const HomodyneModel& model,
                                               const std::vector<double>& phi_degrees, double sigma,
                                               const PackedDataObjective::PackedData& data,
                                               const ScalingMap& map,
                                               const Eigen::VectorXd& theta0_reduced) {
  const auto start_time = std::chrono::steady_clock::now();
  std::string error;
  if (!options.IsValid(&error)) throw ConfigError(error);
  CheckInputs(options, model, phi_degrees, sigma, data, map, theta0_reduced);
  const int num_angles = static_cast<int>(phi_degrees.size());
  const int p = map.num_reduced();
  const ParameterBounds bounds = BoundsOrUnbounded(options.lower_bounds, options.upper_bounds, p);
  const Eigen::VectorXd& lower = bounds.lower;
  const Eigen::VectorXd& upper = bounds.upper;
  auto seconds_since_start = [start_time] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  };

  // Step 1: the start, clipped into the bounds (one warning per clipped parameter, as Minimize).
  LevenbergMarquardtSummary summary;
  Eigen::VectorXd theta = theta0_reduced;
  if (std::optional<std::string> non_finite =
          ClipStartIntoBounds(theta, lower, upper, options.parameter_names, summary.warnings)) {
    summary.status = LevenbergMarquardtStatus::kFailedNonFinite;
    summary.reason = std::move(*non_finite);
    summary.theta = theta;
    summary.seconds = seconds_since_start();
    return summary;
  }

  // Step 2: the residual blocks over one parameter block, `scaled`: Ceres' parameter block,
  // written in place only (an Eigen move assignment would swap buffers). The scale is 1 until
  // step 3.
  Eigen::VectorXd scaled = theta;
  double* const block = scaled.data();
  ModelAtPoint point(model, map, num_angles, block);
  const std::vector<std::unique_ptr<UpperTriangleRowsCost>> blocks =
      MakeResidualBlocks(model, phi_degrees, sigma, data, map, point);

  // Step 3: the scale and the start; Ceres' problem.
  const std::optional<LevenbergMarquardtState>& resumed = options.resume_state;
  const CeresStart start = ScaleAndPlaceTheStart(blocks, point, scaled, theta, resumed);
  ceres::Problem::Options problem_options;
  problem_options.cost_function_ownership = ceres::DO_NOT_TAKE_OWNERSHIP;
  problem_options.evaluation_callback = &point;
  ceres::Problem problem(problem_options);
  AddBlocksAndBounds(problem, block, lower, upper, point, blocks);

  // Step 4: Ceres' run, reported iteration by iteration to options.callback.
  ceres::Solver::Options solver_options =
      LevenbergMarquardtSolverOptions(options, start.state, resumed);
  IterationReporter reporter(options, point, block, p, start.state, resumed.has_value(),
                             start.state.passes + 1, start_time);
  solver_options.callbacks.push_back(&reporter);
  std::string ceres_error;
  HOMODYNE_CHECK(solver_options.IsValid(&ceres_error));
  ceres::Solver::Summary ceres_summary;
  {
    const QuietGlog quiet;
    ceres::Solve(solver_options, &problem, &ceres_summary);
  }

  // Step 5: the summary, as Minimize fills it.
  summary.status = StatusOfRun(ceres_summary, solver_options, lower, upper, scaled, point, blocks);
  summary.reason = "Ceres: " + ceres_summary.message;
  CopyRunCounters(reporter, ceres_summary, resumed, start.at_start, summary);
  PlaceTheResult(ceres_summary, reporter, point, scaled);
  summary.theta = point.Unscale(scaled);

  // Step 6: one pass at the result for chi2 and the covariance.
  FinishAtTheResult(blocks, point, scaled, lower, upper, start.state, ceres_summary, summary);
  summary.seconds = seconds_since_start();
  return summary;
}

}  // namespace homodyne
