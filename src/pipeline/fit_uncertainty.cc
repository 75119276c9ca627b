// The frame-block jackknife (fit_uncertainty.h).
#include "pipeline/fit_uncertainty.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "optimize/scaled_pseudo_inverse.h"

namespace homodyne {

int NoiseCorrelationFrames(const FrameBlockSums& sums) {
  const double threshold = std::exp(-1.0);
  double previous = 1.0;  // the correlation at lag 0
  for (size_t l = 0; l < sums.lags.size(); ++l) {
    const double scale = std::sqrt(sums.lag_left[l] * sums.lag_right[l]);
    const double correlation = scale > 0.0 ? sums.lag_products[l] / scale : 0.0;
    if (correlation < threshold) {
      if (l == 0) return 1;
      // Between the lags d0 = lags[l - 1] and d1 = 2 d0: linear in log(lag).
      const double d0 = sums.lags[l - 1];
      const double fraction = (previous - threshold) / (previous - correlation);
      return std::max(1, static_cast<int>(std::lround(d0 * std::pow(2.0, fraction))));
    }
    previous = correlation;
  }
  return std::max(1, sums.num_frames());
}

double RowCorrelationAtLag1(const FrameBlockSums& sums) {
  if (sums.lags.empty() || sums.lags.front() != 1) return std::numeric_limits<double>::quiet_NaN();
  const double scale = std::sqrt(sums.lag_left[0] * sums.lag_right[0]);
  return scale > 0.0 ? sums.lag_products[0] / scale : std::numeric_limits<double>::quiet_NaN();
}

bool ResidualsUncorrelated(const FrameBlockSums& sums) {
  const double correlation = RowCorrelationAtLag1(sums);
  // The pairs (i, j), (i, j + 1) of the upper triangle over every angle, about.
  const double frames = sums.num_frames();
  const double pairs = std::max(1.0, sums.num_angles * (frames - 1.0) * (frames - 2.0) / 2.0);
  return correlation < std::max(kUncorrelatedLag1, 4.0 / std::sqrt(pairs));
}

namespace {

// The merge of the fine blocks: `factor` consecutive fine blocks per block.
struct Merge {
  int factor = 1;
  int blocks = 1;
  bool too_short = false;
};

Merge ChooseMerge(int fine_blocks, int frames, int correlation_frames) {
  const int fewest = std::min(kMinJackknifeBlocks, fine_blocks);
  // About one correlation length per block, rounded to the next larger number of blocks.
  const double wanted = static_cast<double>(frames) / std::max(1, correlation_frames);
  Merge chosen{1, fine_blocks, wanted < kMinJackknifeBlocks};
  for (int factor = 2;; factor *= 2) {
    const int blocks = (fine_blocks + factor - 1) / factor;
    if (blocks < fewest || blocks < wanted) break;
    chosen.factor = factor;
    chosen.blocks = blocks;
    if (blocks == 1) break;
  }
  return chosen;
}

// Adds an angle's local vector / matrix (derivatives physical..., contrast, offset) at the full
// layout's indices `index`.
void AddLocal(const double* local_values, const std::vector<int>& index, Eigen::VectorXd& full) {
  for (size_t l = 0; l < index.size(); ++l) full[index[l]] += local_values[l];
}
void AddLocal(const double* local_values, const std::vector<int>& index, Eigen::MatrixXd& full) {
  const size_t n = index.size();
  for (size_t c = 0; c < n; ++c) {
    for (size_t r = 0; r < n; ++r) full(index[r], index[c]) += local_values[c * n + r];
  }
}

Eigen::VectorXd Restrict(const Eigen::VectorXd& v, const std::vector<int>& support) {
  Eigen::VectorXd out(static_cast<Eigen::Index>(support.size()));
  for (size_t i = 0; i < support.size(); ++i) out[static_cast<Eigen::Index>(i)] = v[support[i]];
  return out;
}

}  // namespace

std::optional<BlockLeverage> BlockLeverage::Of(const Eigen::MatrixXd& h,
                                               const std::vector<int>& support) {
  BlockLeverage result;
  result.support_ = support;
  const int n = static_cast<int>(support.size());
  result.scale_ = JacobiScale(h, support);
  const Eigen::MatrixXd scaled = ScaledBlock(h, support, result.scale_);
  if (!scaled.allFinite()) return std::nullopt;
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(scaled);
  if (eigen.info() != Eigen::Success) return std::nullopt;
  const Eigen::VectorXd& values = eigen.eigenvalues();
  const double cutoff = kPseudoInverseRcond * std::max(values.maxCoeff(), 0.0);
  Eigen::VectorXd inverse_root(n);
  for (int i = 0; i < n; ++i) {
    inverse_root[i] = values[i] > cutoff && values[i] > 0.0 ? 1.0 / std::sqrt(values[i]) : 0.0;
  }
  result.inverse_root_ =
      eigen.eigenvectors() * inverse_root.asDiagonal() * eigen.eigenvectors().transpose();
  return result;
}

std::optional<Eigen::VectorXd> BlockLeverage::Adjust(const Eigen::MatrixXd& h_block,
                                                     const Eigen::VectorXd& gradient,
                                                     double power) const {
  const Eigen::MatrixXd share =
      inverse_root_ * ScaledBlock(h_block, support_, scale_) * inverse_root_;
  if (!share.allFinite()) return std::nullopt;
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(share);
  if (eigen.info() != Eigen::Success) return std::nullopt;
  const Eigen::VectorXd& values = eigen.eigenvalues();
  Eigen::VectorXd factors(values.size());
  for (Eigen::Index i = 0; i < values.size(); ++i) {
    const double rest = 1.0 - values[i];
    factors[i] = rest > kPseudoInverseRcond ? std::pow(rest, -power) : 0.0;
  }
  const Eigen::VectorXd root_gradient = inverse_root_ * (scale_.asDiagonal() * gradient);
  const Eigen::VectorXd adjusted =
      eigen.eigenvectors() *
      (factors.asDiagonal() * (eigen.eigenvectors().transpose() * root_gradient));
  return Eigen::VectorXd(scale_.asDiagonal() * (inverse_root_ * adjusted));
}

std::optional<FrameBlockJackknife> ComputeFrameBlockJackknife(const FrameBlockSums& sums,
                                                              const ScalingMap& map,
                                                              const std::vector<int>& support,
                                                              int num_physical) {
  const int angles = sums.num_angles;
  const int full = num_physical + 2 * angles;
  const int reduced = map.num_reduced();
  if (map.num_full() != full || sums.num_local != num_physical + 2 || support.empty()) {
    return std::nullopt;
  }
  FrameBlockJackknife result;
  result.correlation_frames = NoiseCorrelationFrames(sums);
  const Merge merge = ChooseMerge(sums.num_blocks(), sums.num_frames(), result.correlation_frames);
  result.blocks = merge.blocks;
  result.blocks_too_short = merge.too_short;
  const int blocks = merge.blocks;

  // Full-layout sums per block and per cell of blocks A < B.
  std::vector<std::vector<int>> index(static_cast<size_t>(angles));
  for (int k = 0; k < angles; ++k) {
    for (int p = 0; p < num_physical; ++p) index[static_cast<size_t>(k)].push_back(p);
    index[static_cast<size_t>(k)].push_back(num_physical + k);
    index[static_cast<size_t>(k)].push_back(num_physical + angles + k);
  }
  std::vector<Eigen::VectorXd> block_gradient(static_cast<size_t>(blocks),
                                              Eigen::VectorXd::Zero(full));
  std::vector<Eigen::MatrixXd> block_gram(static_cast<size_t>(blocks),
                                          Eigen::MatrixXd::Zero(full, full));
  std::vector<Eigen::VectorXd> cell_gradient(static_cast<size_t>(blocks) * blocks,
                                             Eigen::VectorXd::Zero(full));
  Eigen::MatrixXd total = Eigen::MatrixXd::Zero(full, full);
  for (int a = 0; a < sums.num_blocks(); ++a) {
    for (int b = a; b < sums.num_blocks(); ++b) {
      const int block_a = a / merge.factor;
      const int block_b = b / merge.factor;
      for (int k = 0; k < angles; ++k) {
        const double* gradient = sums.gradient.data() + sums.GradientOffset(a, b, k);
        const double* gram = sums.gram.data() + sums.GramOffset(a, b, k);
        const std::vector<int>& at = index[static_cast<size_t>(k)];
        AddLocal(gram, at, total);
        AddLocal(gradient, at, block_gradient[static_cast<size_t>(block_a)]);
        AddLocal(gram, at, block_gram[static_cast<size_t>(block_a)]);
        if (block_b != block_a) {
          AddLocal(gradient, at, block_gradient[static_cast<size_t>(block_b)]);
          AddLocal(gram, at, block_gram[static_cast<size_t>(block_b)]);
          AddLocal(
              gradient, at,
              cell_gradient[static_cast<size_t>(block_a) * blocks + static_cast<size_t>(block_b)]);
        }
      }
    }
  }

  // To the reduced layout.
  const Eigen::MatrixXd& m = map.matrix;
  const auto to_reduced_matrix = [&](const Eigen::MatrixXd& x) -> Eigen::MatrixXd {
    return m.transpose() * x * m;
  };
  const Eigen::MatrixXd h = to_reduced_matrix(total);
  ScaledPseudoInverse inverse;
  if (!InvertScaledBlock(h, support, inverse)) return std::nullopt;
  const int s = static_cast<int>(support.size());
  Eigen::MatrixXd v = Eigen::MatrixXd::Zero(s, s);
  const std::optional<BlockLeverage> leverage = BlockLeverage::Of(h, support);
  if (!leverage) return std::nullopt;
  for (int b = 0; b < blocks; ++b) {
    const std::optional<Eigen::VectorXd> u =
        leverage->Adjust(to_reduced_matrix(block_gram[static_cast<size_t>(b)]),
                         Restrict(m.transpose() * block_gradient[static_cast<size_t>(b)], support),
                         kJackknifeLeveragePower);
    if (!u) return std::nullopt;
    v.noalias() += *u * u->transpose();
  }
  for (int a = 0; a < blocks; ++a) {
    for (int b = a + 1; b < blocks; ++b) {
      const Eigen::VectorXd w = inverse.Solve(Restrict(
          m.transpose() * cell_gradient[static_cast<size_t>(a) * blocks + static_cast<size_t>(b)],
          support));
      v.noalias() -= w * w.transpose();
    }
  }
  if (!v.allFinite()) return std::nullopt;
  // The two sums estimate one covariance; their difference may have small negative directions.
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(v);
  if (eigen.info() != Eigen::Success) return std::nullopt;
  const Eigen::VectorXd clipped = eigen.eigenvalues().cwiseMax(0.0);
  v = eigen.eigenvectors() * clipped.asDiagonal() * eigen.eigenvectors().transpose();
  result.covariance = Eigen::MatrixXd::Zero(reduced, reduced);
  for (int i = 0; i < s; ++i) {
    for (int j = 0; j < s; ++j) result.covariance(support[i], support[j]) = v(i, j);
  }
  return result;
}

ProfileEnd FindProfileEnd(const std::function<double(double)>& rise, double value,
                          double first_step, int direction, double bound, double target) {
  const double limit = std::abs(bound - value);  // how far the side goes (inf: unbounded)
  const double goal = std::sqrt(target);
  // (distance, sqrt(rise)) of the last two evaluations; the profile starts at (0, 0).
  double near_distance = 0.0, near_root = 0.0;
  double distance = std::min(first_step, limit);
  for (int evaluation = 0; evaluation < kProfileEndEvaluations; ++evaluation) {
    const double at = value + direction * distance;
    const double risen = rise(at);
    if (!std::isfinite(risen)) return {std::numeric_limits<double>::quiet_NaN(), "failed"};
    const double root = std::sqrt(std::max(risen, 0.0));
    if (std::abs(risen - target) <= 0.01 * target) return {at, ""};
    if (risen < target && distance >= limit) return {value + direction * limit, "bound"};
    // The secant through the last two points (through the minimum first), kept within the side.
    double next =
        root > near_root
            ? near_distance + (goal - near_root) * (distance - near_distance) / (root - near_root)
            : 2.0 * distance;
    if (!(next > 0.0)) next = 0.5 * distance;
    near_distance = distance;
    near_root = root;
    distance = std::min(next, limit);
  }
  return {value + direction * distance, ""};  // the last secant step: within a few %
}

ProfileEnd WidenProfileEnd(const ProfileEnd& end, double value, int direction, double bound,
                           double target, const std::vector<std::pair<double, double>>& points) {
  if (end.note == "failed" || !std::isfinite(end.value)) return end;
  ProfileEnd widened = end;
  double reach = direction * (end.value - value);  // how far the end lies from the value
  // The bound as FindProfileEnd holds it (the same expression, so the same bits).
  const double at_bound = value + direction * std::abs(bound - value);
  for (const auto& [held, risen] : points) {
    const double distance = direction * (held - value);
    if (distance > reach && risen < target) {
      reach = distance;
      widened = {held, held == at_bound ? "bound" : ""};
    }
  }
  return widened;
}

}  // namespace homodyne
