// Every YAML key path of the reference templates (configs/homodyne_static.yaml,
// configs/homodyne_laminar_flow.yaml; docs/configuration.md) and the keys the reference's code and
// documentation use, the keys of the successor xpcsjax's templates (its two_component template is
// tests/data/xpcsjax_two_component.yaml; analyzer_parameters.{frame_step, time_unit},
// experimental_data.{cache_directory, use_caching}, anti_degeneracy.execute_layers,
// optimization.angle_filtering, output.formats.{yaml, npz}, output.include_diagnostics), plus the
// additions of homodyne-cpp (performance.{strategy_override,
// memory_limit_gb, fast_mode, backend, gpu_devices, computation.cpu_threads},
// optimization.streaming.{batch_size, enable_compression, ...} also under
// optimization.nlsq.streaming, top-level fast_mode, simulation.*). Which of them the engine reads
// is documented in docs/configuration.md; the rest are accepted so that reference configs load.
#include "config/config_schema.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

namespace homodyne::config_internal {
namespace {

// One row: a section path and the space-separated names of its children. A child "*" makes the
// section free-form; a row with an empty section lists top-level keys.
struct SchemaRow {
  const char* section;
  const char* children;
};

constexpr const char* kStreamingKeys =
    "enable_checkpoints checkpoint_dir checkpoint_frequency checkpoint_min_interval_seconds "
    "resume_from_checkpoint "
    "keep_last_checkpoints enable_fault_tolerance max_retries_per_batch min_success_rate "
    "batch_size adaptive_batching enable_compression";
constexpr const char* kRecoveryKeys =
    "enable max_attempts lr_decay lambda_growth trust_decay log_retries";

const SchemaRow kSchema[] = {
    {"",
     "analysis_mode q_tolerance_fraction fast_mode "
     // Flat legacy keys, accepted with a deprecation warning (docs/configuration.md, Errors and
     // warnings).
     "data_file dt start_frame end_frame"},
    {"metadata", "*"},
    {"analyzer_parameters", "dt start_frame end_frame frame_step time_unit"},
    {"analyzer_parameters.scattering", "wavevector_q q_fit"},
    {"analyzer_parameters.geometry", "stator_rotor_gap"},
    {"analysis_settings", "*"},
    {"experimental_data",
     "file_path data_folder_path data_file_name phi_angles_path phi_angles_file cache_file_path "
     "cache_filename_template cache_compression data_type file_format exchange_key dt "
     "sample_detector_distance cache_directory use_caching apply_diagonal_correction"},
    {"experimental_data.diagonal_correction", "method estimator window trim_fraction"},
    {"experimental_data.geometry", "stator_rotor_gap"},
    {"phi_filtering", "enabled fallback_to_all_angles algorithm tolerance"},
    {"phi_filtering.target_ranges[]", "min_angle max_angle description"},
    {"phi_filtering.quality_control",
     "min_angles_required max_angle_spread validate_coverage require_orthogonal_angles"},
    {"initial_parameters", "parameter_names values units active_parameters fixed_parameters"},
    {"initial_parameters.per_angle_scaling", "contrast offset"},
    {"parameter_space", "model"},
    {"parameter_space.bounds[]", "name min max type prior_mu prior_sigma unit"},
    {"parameter_space.priors", "*"},
    {"optimization", "method max_iterations fast_chi2_mode"},
    {"optimization.nlsq",
     "workflow goal memory_fraction memory_threshold_gb max_iterations tolerance ftol xtol gtol "
     "variable_projection statistical_tolerance profile_check profile_intervals solver uncertainty "
     "sigma trust_region_scale verbose loss f_scale x_scale use_streaming "
     "enable_quality_validation "
     "quality_reduced_chi_squared_threshold quality_warn_on_max_restarts "
     "quality_warn_on_bounds_hit quality_warn_on_convergence_failure quality_bounds_tolerance"},
    {"optimization.nlsq.x_scale_map", "*"},
    {"optimization.nlsq.shear_transforms", "*"},
    {"optimization.nlsq.progress", "enable verbose log_interval"},
    {"optimization.nlsq.diagnostics", "enabled sample_size check_gradients log_jacobian_norms"},
    {"optimization.nlsq.hybrid_streaming",
     "enable normalize normalization_strategy warmup_iterations max_warmup_iterations "
     "warmup_learning_rate gauss_newton_max_iterations gauss_newton_tol chunk_size "
     "trust_region_initial regularization_factor enable_checkpoints checkpoint_frequency "
     "validate_numerics verbose log_frequency enable_warm_start_detection warm_start_threshold "
     "enable_adaptive_warmup_lr warmup_lr_refinement warmup_lr_careful enable_cost_guard "
     "cost_increase_tolerance enable_step_clipping max_warmup_step_size "
     "use_learning_rate_schedule lr_schedule_end_value enable_group_variance_regularization "
     "group_variance_lambda"},
    {"optimization.nlsq.anti_degeneracy",
     "enable per_angle_mode constant_scaling_threshold fourier_order fourier_auto_threshold "
     "execute_layers"},
    {"optimization.nlsq.anti_degeneracy.hierarchical",
     "enable max_outer_iterations outer_tolerance physical_max_iterations "
     "per_angle_max_iterations"},
    {"optimization.nlsq.anti_degeneracy.regularization",
     "enable mode lambda target_cv target_contribution max_cv auto_tune_lambda"},
    {"optimization.nlsq.anti_degeneracy.gradient_monitoring",
     "enable ratio_threshold consecutive_triggers response"},
    {"optimization.nlsq.anti_degeneracy.shear_weighting",
     "enable alpha min_weight update_frequency normalize"},
    {"optimization.nlsq.multi_start",
     "enable n_starts seed sampling_strategy n_workers use_screening screen_keep_fraction "
     "refine_top_k refinement_ftol degeneracy_threshold custom_starts"},
    {"optimization.nlsq.global_search", "method max_points"},
    {"optimization.nlsq.cmaes",
     "enable preset max_generations sigma sigma_warmstart warmstart_auto_skip "
     "warmstart_skip_threshold popsize tol_fun tol_x restart_strategy max_restarts "
     "population_batch_size data_chunk_size memory_limit_gb auto_select scale_threshold "
     "normalize normalization_epsilon refine_with_nlsq refinement_workflow refinement_ftol "
     "refinement_xtol refinement_gtol refinement_max_nfev refinement_loss"},
    {"optimization.nlsq.quality_validation",
     "enable reduced_chi_squared_threshold warn_on_max_restarts warn_on_bounds_hit "
     "warn_on_convergence_failure bounds_tolerance"},
    {"optimization.nlsq.streaming", kStreamingKeys},
    {"optimization.nlsq.recovery", kRecoveryKeys},
    {"optimization.streaming", kStreamingKeys},
    {"optimization.stratification",
     "enabled target_chunk_size max_imbalance_ratio force_sequential_fallback "
     "check_memory_safety use_index_based collect_diagnostics log_diagnostics"},
    {"optimization.sequential", "min_success_rate weighting"},
    {"optimization.recovery", kRecoveryKeys},
    {"optimization.angle_filtering", "enabled target_angle_ranges"},
    {"optimization.mcmc", "*"},
    {"optimization.cmc", "*"},
    {"optimization.lsq", "*"},
    {"optimization_config", "*"},
    {"noise_estimation", "*"},
    {"performance",
     "strategy_override memory_limit_gb enable_progress fast_mode backend gpu_devices"},
    {"performance.memory_optimization",
     "enabled max_memory_usage_gb chunk_size enable_caching cache_strategy"},
    {"performance.computation", "enable_jit cpu_threads vectorization_level"},
    {"logging", "enabled level"},
    {"logging.console", "enabled level format colors show_progress"},
    {"logging.file", "enabled level path filename max_size_mb backup_count"},
    {"logging.performance", "enabled level filename threshold_seconds"},
    {"logging.modules", "*"},
    {"quality_control", "*"},
    {"plotting", "*"},
    {"output",
     "directory base_directory create_subdirs timestamp_dirs compress_hdf5 compression_level "
     "include_diagnostics"},
    {"output.formats", "hdf5 json csv yaml npz"},
    {"output.plots", "*"},
    {"validation", "*"},
    {"v2_features", "*"},
    {"data_filtering", "*"},
    {"preprocessing", "*"},
    {"simulation",
     "output format frames phi_angles contrast offset noise_sigma noise_model pixels modes seed "
     "dtype "
     "compression"},
    {"simulation.parameters", "*"},
};

// The keys of docs/configuration.md (Accepted but not used) that could be taken for settings:
// leaves, and sections or free-form paths whose whole subtree has no effect. The documentation
// keys are not here (a template's metadata is no setting anyone expects to act).
const char* const kNoEffectKeys[] = {
    "experimental_data.phi_angles_path",
    "experimental_data.phi_angles_file",
    "experimental_data.cache_file_path",
    "experimental_data.cache_filename_template",
    "experimental_data.cache_compression",
    "experimental_data.data_type",
    "experimental_data.file_format",
    "experimental_data.exchange_key",
    "experimental_data.cache_directory",
    "experimental_data.use_caching",
    "analyzer_parameters.frame_step",
    "analyzer_parameters.time_unit",
    "phi_filtering.fallback_to_all_angles",
    "phi_filtering.algorithm",
    "phi_filtering.tolerance",
    "phi_filtering.quality_control",
    "initial_parameters.active_parameters",
    "v2_features",
    "preprocessing",
    "quality_control",
    "noise_estimation",
    "optimization.method",
    "optimization.max_iterations",
    "optimization.nlsq.workflow",
    "optimization.nlsq.goal",
    "optimization.nlsq.memory_fraction",
    "optimization.nlsq.memory_threshold_gb",
    "optimization.nlsq.trust_region_scale",
    "optimization.nlsq.verbose",
    "optimization.nlsq.x_scale",
    "optimization.nlsq.x_scale_map",
    "optimization.nlsq.use_streaming",
    "optimization.nlsq.enable_quality_validation",
    "optimization.nlsq.quality_reduced_chi_squared_threshold",
    "optimization.nlsq.quality_warn_on_max_restarts",
    "optimization.nlsq.quality_warn_on_bounds_hit",
    "optimization.nlsq.quality_warn_on_convergence_failure",
    "optimization.nlsq.quality_bounds_tolerance",
    "optimization.nlsq.progress",
    "optimization.nlsq.diagnostics",
    "optimization.nlsq.hybrid_streaming",
    "optimization.nlsq.quality_validation",
    "optimization.nlsq.recovery",
    "optimization.nlsq.shear_transforms",
    "optimization.nlsq.multi_start.n_workers",
    "optimization.nlsq.cmaes.warmstart_auto_skip",
    "optimization.nlsq.cmaes.warmstart_skip_threshold",
    "optimization.nlsq.cmaes.population_batch_size",
    "optimization.nlsq.cmaes.data_chunk_size",
    "optimization.nlsq.cmaes.memory_limit_gb",
    "optimization.nlsq.cmaes.auto_select",
    "optimization.nlsq.cmaes.scale_threshold",
    "optimization.nlsq.cmaes.normalize",
    "optimization.nlsq.cmaes.normalization_epsilon",
    "optimization.nlsq.cmaes.refinement_workflow",
    "optimization.nlsq.cmaes.refinement_ftol",
    "optimization.nlsq.cmaes.refinement_xtol",
    "optimization.nlsq.cmaes.refinement_gtol",
    "optimization.nlsq.cmaes.refinement_max_nfev",
    "optimization.nlsq.cmaes.refinement_loss",
    "optimization.nlsq.anti_degeneracy.fourier_auto_threshold",
    "optimization.nlsq.anti_degeneracy.execute_layers",
    "optimization.nlsq.anti_degeneracy.hierarchical",
    "optimization.nlsq.anti_degeneracy.regularization",
    "optimization.nlsq.anti_degeneracy.gradient_monitoring",
    "optimization.nlsq.anti_degeneracy.shear_weighting",
    "optimization.angle_filtering",
    "optimization.streaming.adaptive_batching",
    "optimization.nlsq.streaming.adaptive_batching",
    "optimization.stratification",
    "optimization.sequential",
    "optimization.recovery",
    "optimization.mcmc",
    "optimization.cmc",
    "optimization.lsq",
    "optimization_config",
    "performance.memory_optimization",
    "performance.computation.enable_jit",
    "performance.computation.vectorization_level",
    "logging.enabled",
    "logging.level",
    "logging.console",
    "logging.file",
    "logging.modules",
    "plotting",
    "output",
    "validation",
};

struct Schema {
  std::vector<std::string> known;  // leaves and "prefix.*", table order
  std::set<std::string> leaves;
  std::set<std::string> sections;
  std::set<std::string> free_form;  // prefixes without ".*"
};

std::string Join(const std::string& section, const std::string& child) {
  return section.empty() ? child : section + "." + child;
}

// Adds every ancestor of a path as a section ("a.b[].c" -> "a", "a.b").
void AddAncestors(const std::string& path, std::set<std::string>& sections) {
  for (size_t pos = path.find('.'); pos != std::string::npos; pos = path.find('.', pos + 1)) {
    std::string prefix = path.substr(0, pos);
    if (prefix.size() > 2 && prefix.ends_with("[]")) prefix.resize(prefix.size() - 2);
    sections.insert(prefix);
  }
}

const Schema& GetSchema() {
  static const Schema schema = [] {
    Schema s;
    for (const SchemaRow& row : kSchema) {
      std::istringstream children(row.children);
      std::string child;
      while (children >> child) {
        if (child == "*") {
          s.free_form.insert(row.section);
          s.known.push_back(std::string(row.section) + ".*");
          AddAncestors(std::string(row.section) + ".x", s.sections);
          s.sections.erase(row.section);
          continue;
        }
        const std::string path = Join(row.section, child);
        s.leaves.insert(path);
        s.known.push_back(path);
        AddAncestors(path, s.sections);
      }
    }
    return s;
  }();
  return schema;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

}  // namespace

KeyKind ClassifyKey(const std::string& schema_path) {
  const Schema& s = GetSchema();
  // A path at or below a free-form prefix is accepted whatever it holds.
  for (size_t pos = schema_path.size();; pos = schema_path.rfind('.', pos - 1)) {
    if (s.free_form.count(schema_path.substr(0, pos))) return KeyKind::kFreeForm;
    if (pos == 0 || pos == std::string::npos) break;
  }
  if (s.leaves.count(schema_path)) return KeyKind::kLeaf;
  if (s.sections.count(schema_path)) return KeyKind::kSection;
  return KeyKind::kUnknown;
}

namespace {

// The parent of a schema path and its last key: "a.b.c" -> {"a.b", "c"}, "a" -> {"", "a"}.
std::pair<std::string, std::string> SplitLastKey(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

// The known key or section beside schema_path (same parent) closest to its last key, when it is
// close enough to be a misspelling of it (at most 2 edits, or a third of the key's length); "".
std::string ClosestSibling(const Schema& s, const std::string& schema_path) {
  const auto [parent, key] = SplitLastKey(schema_path);
  std::string best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  const auto consider = [&](const std::string& candidate) {
    const auto [candidate_parent, candidate_key] = SplitLastKey(candidate);
    if (candidate_parent != parent || candidate_key == "*") return;
    const size_t distance = EditDistance(key, candidate_key);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  };
  for (const std::string& candidate : s.known) consider(candidate);
  for (const std::string& candidate : s.sections) consider(candidate);
  for (const std::string& candidate : s.free_form) consider(candidate);
  return best;
}

}  // namespace

std::string ClosestKnownKey(const std::string& schema_path) {
  const Schema& s = GetSchema();
  // A misspelt key is most likely one of its own mapping's keys: a key of another section,
  // however close the whole path, would send the user to the wrong place.
  if (std::string sibling = ClosestSibling(s, schema_path); !sibling.empty()) return sibling;
  std::string best = s.known.front();
  size_t best_distance = EditDistance(schema_path, best);
  for (const std::string& candidate : s.known) {
    const size_t distance = EditDistance(schema_path, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

const std::vector<std::string>& KnownKeys() { return GetSchema().known; }

bool HasNoEffect(const std::string& schema_path) {
  static const std::set<std::string> keys(std::begin(kNoEffectKeys), std::end(kNoEffectKeys));
  return keys.count(schema_path) > 0;
}

}  // namespace homodyne::config_internal
