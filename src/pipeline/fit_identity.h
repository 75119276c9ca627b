// Every field of a resolved Config, each marked by whether it can change a fit's numbers: the
// list behind the checkpoint identity (FitIdentityText, fit_checkpoints.h) and its tests.
//
// One list, so that no field is hashed by accident or missed in silence: each struct is unpacked
// by a structured binding that names all of its fields, so a field added to any of these structs
// breaks the build here until it is listed (and its role decided).
#pragma once

#include <type_traits>

#include "homodyne/config.h"

namespace homodyne {

// What a field is to the fit's identity.
enum class FieldRole {
  kNumbers,    // can change the fit's numbers: part of the identity
  kInputFile,  // a file the fit reads: its absolute path is part of the identity (the data
               // fingerprint checks the content)
  kNotNumbers  // cannot change the numbers (threads, paths of outputs, checkpoint cadence,
               // progress, warnings), or enters the identity resolved (the global method, the
               // batch size): not part of it
};
// The role as a type, so that a visitor compiles only what it does with each role (the identity
// needs no text form of a field it leaves out).
template <FieldRole kRole>
using FieldRoleTag = std::integral_constant<FieldRole, kRole>;
inline constexpr FieldRoleTag<FieldRole::kNumbers> kNumbersField{};
inline constexpr FieldRoleTag<FieldRole::kInputFile> kInputFileField{};
inline constexpr FieldRoleTag<FieldRole::kNotNumbers> kNotNumbersField{};

namespace fit_identity_internal {

// `Struct` is a config struct or its const.
template <typename Struct, typename Visitor>
void VisitGeometry(Struct& geometry, Visitor& visit) {
  auto& [q_inv_angstrom, gap_angstrom, dt_seconds] = geometry;
  visit("geometry.q_inv_angstrom", kNumbersField, q_inv_angstrom);
  visit("geometry.gap_angstrom", kNumbersField, gap_angstrom);
  visit("geometry.dt_seconds", kNumbersField, dt_seconds);
}

template <typename Struct, typename Visitor>
void VisitData(Struct& data, Visitor& visit) {
  auto& [file_path, wavevector_q_target, start_frame, end_frame, dt_seconds, q_tolerance_fraction,
         phi_filtering_enabled, phi_ranges, phi_selected_degrees, wavevector_q_list, all_q_rings,
         data_q_range, data_phi_range, data_filtering_fallback_on_empty, q_fit,
         diagonal_correction] = data;
  visit("data.file_path", kInputFileField, file_path);
  visit("data.wavevector_q_target", kNumbersField, wavevector_q_target);
  visit("data.start_frame", kNumbersField, start_frame);
  visit("data.end_frame", kNumbersField, end_frame);
  visit("data.dt_seconds", kNumbersField, dt_seconds);
  visit("data.q_tolerance_fraction", kNumbersField, q_tolerance_fraction);
  visit("data.phi_filtering_enabled", kNumbersField, phi_filtering_enabled);
  visit("data.phi_ranges", kNumbersField, phi_ranges);  // VisitPhiRange per element
  // In the identity only when given (--phi), so those of fits without it are what they were.
  visit("data.phi_selected_degrees", kNumbersField, phi_selected_degrees);
  // The rings (docs/configuration.md, Several q rings), in the identity only when set, so that
  // single-ring fits keep theirs. A ring of an independent run has its own q alone in the list
  // (SelectionOfRing): rings never share a checkpoint.
  visit("data.wavevector_q_list", kNumbersField, wavevector_q_list);
  visit("data.all_q_rings", kNotNumbersField, all_q_rings);    // resolved into the list first
  visit("data.data_q_range", kNotNumbersField, data_q_range);  // resolved into the list first
  visit("data.data_phi_range", kNumbersField, data_phi_range);
  visit("data.data_filtering_fallback_on_empty", kNumbersField, data_filtering_fallback_on_empty);
  visit("data.q_fit", kNotNumbersField, q_fit);  // the list and the matrices say it
  // The diagonal is never fitted (docs/model.md, Diagonal correction): no fitted number depends
  // on how the result files' diagonal is corrected.
  visit("data.diagonal_correction.apply", kNotNumbersField, diagonal_correction.apply);
  visit("data.diagonal_correction.method", kNotNumbersField, diagonal_correction.method);
  visit("data.diagonal_correction.estimator", kNotNumbersField, diagonal_correction.estimator);
  visit("data.diagonal_correction.window", kNotNumbersField, diagonal_correction.window);
  visit("data.diagonal_correction.trim_fraction", kNotNumbersField,
        diagonal_correction.trim_fraction);
}

template <typename Struct, typename Visitor>
void VisitInitial(Struct& initial, Visitor& visit) {
  auto& [parameter_names, values, per_angle_contrast, per_angle_offset, fixed_parameters] = initial;
  visit("initial_parameters.parameter_names", kNumbersField, parameter_names);
  visit("initial_parameters.values", kNumbersField, values);
  visit("initial_parameters.per_angle_scaling.contrast", kNumbersField, per_angle_contrast);
  visit("initial_parameters.per_angle_scaling.offset", kNumbersField, per_angle_offset);
  visit("initial_parameters.fixed_parameters", kNumbersField, fixed_parameters);
}

template <typename Struct, typename Visitor>
void VisitGlobalSearch(Struct& global, Visitor& visit) {
  auto& [method, method_from_config, method_reason, max_points] = global;
  // The method enters resolved, with the --global-search flag and the multi_start and cmaes
  // enables (FitIdentityText's global_search_method).
  visit("optimization.nlsq.global_search.method", kNotNumbersField, method);
  visit("optimization.nlsq.global_search.method_from_config", kNotNumbersField, method_from_config);
  visit("optimization.nlsq.global_search.method_reason", kNotNumbersField, method_reason);
  visit("optimization.nlsq.global_search.max_points", kNumbersField, max_points);
}

template <typename Struct, typename Visitor>
void VisitMultiStart(Struct& multi, Visitor& visit) {
  auto& [enable, n_starts, seed, sampling_strategy, use_screening, screen_keep_fraction,
         refine_top_k, refinement_ftol, degeneracy_threshold, custom_starts] = multi;
  visit("optimization.nlsq.multi_start.enable", kNotNumbersField, enable);  // the method
  visit("optimization.nlsq.multi_start.n_starts", kNumbersField, n_starts);
  visit("optimization.nlsq.multi_start.seed", kNumbersField, seed);
  visit("optimization.nlsq.multi_start.sampling_strategy", kNumbersField, sampling_strategy);
  visit("optimization.nlsq.multi_start.use_screening", kNumbersField, use_screening);
  visit("optimization.nlsq.multi_start.screen_keep_fraction", kNumbersField, screen_keep_fraction);
  visit("optimization.nlsq.multi_start.refine_top_k", kNumbersField, refine_top_k);
  visit("optimization.nlsq.multi_start.refinement_ftol", kNumbersField, refinement_ftol);
  // Only which minima a warning calls degenerate; the minima and the choice are the same.
  visit("optimization.nlsq.multi_start.degeneracy_threshold", kNotNumbersField,
        degeneracy_threshold);
  visit("optimization.nlsq.multi_start.custom_starts", kNumbersField, custom_starts);
}

template <typename Struct, typename Visitor>
void VisitCmaes(Struct& cmaes, Visitor& visit) {
  auto& [enable, preset, max_generations, popsize, sigma, sigma_warmstart, tol_fun, tol_x,
         restart_strategy, max_restarts, refine_with_nlsq] = cmaes;
  visit("optimization.nlsq.cmaes.enable", kNotNumbersField, enable);  // the method
  visit("optimization.nlsq.cmaes.preset", kNumbersField, preset);
  visit("optimization.nlsq.cmaes.max_generations", kNumbersField, max_generations);
  visit("optimization.nlsq.cmaes.popsize", kNumbersField, popsize);
  visit("optimization.nlsq.cmaes.sigma", kNumbersField, sigma);
  visit("optimization.nlsq.cmaes.sigma_warmstart", kNumbersField, sigma_warmstart);
  visit("optimization.nlsq.cmaes.tol_fun", kNumbersField, tol_fun);
  visit("optimization.nlsq.cmaes.tol_x", kNumbersField, tol_x);
  visit("optimization.nlsq.cmaes.restart_strategy", kNumbersField, restart_strategy);
  visit("optimization.nlsq.cmaes.max_restarts", kNumbersField, max_restarts);
  visit("optimization.nlsq.cmaes.refine_with_nlsq", kNumbersField, refine_with_nlsq);
}

template <typename Struct, typename Visitor>
void VisitNlsq(Struct& nlsq, Visitor& visit) {
  auto& [max_iterations, tolerance, xtol, gtol, sigma, sigma_auto, loss, x_scale,
         anti_degeneracy_enabled, per_angle_mode, constant_scaling_threshold, fourier_order,
         per_angle_mode_from_config, variable_projection, solver, statistical_tolerance,
         profile_check, uncertainty, profile_intervals, global_search, multi_start, cmaes] = nlsq;
  visit("optimization.nlsq.max_iterations", kNumbersField, max_iterations);
  visit("optimization.nlsq.tolerance", kNumbersField, tolerance);
  visit("optimization.nlsq.xtol", kNumbersField, xtol);
  visit("optimization.nlsq.gtol", kNumbersField, gtol);
  visit("optimization.nlsq.sigma", kNumbersField, sigma);
  // Enters resolved: each of the two fits of sigma auto runs with it false and a number in sigma.
  visit("optimization.nlsq.sigma_auto", kNotNumbersField, sigma_auto);
  // The objective the fit minimises (docs/model.md, Robust loss): the function and f_scale, in
  // the identity only when the loss is not linear (f_scale changes nothing then), so the
  // identities of linear fits are what they were before the key was read.
  visit("optimization.nlsq.loss", kNumbersField, loss);
  // Checked and not used: changes no step (config.h NlsqOptions::x_scale).
  visit("optimization.nlsq.x_scale", kNotNumbersField, x_scale);
  // Switches the per-angle modes on and off (PlanFit): the number of parameters.
  visit("optimization.nlsq.anti_degeneracy.enable", kNumbersField, anti_degeneracy_enabled);
  visit("optimization.nlsq.anti_degeneracy.per_angle_mode", kNumbersField, per_angle_mode);
  visit("optimization.nlsq.anti_degeneracy.constant_scaling_threshold", kNumbersField,
        constant_scaling_threshold);
  visit("optimization.nlsq.anti_degeneracy.fourier_order", kNumbersField, fourier_order);
  // Read by nothing after the loader: per_angle_mode holds the value either way.
  visit("optimization.nlsq.anti_degeneracy.per_angle_mode_from_config", kNotNumbersField,
        per_angle_mode_from_config);
  visit("optimization.nlsq.variable_projection", kNumbersField, variable_projection);
  // A checkpoint of the other optimiser is refused with its own message (Fit): the states differ.
  visit("optimization.nlsq.solver", kNotNumbersField, solver);
  visit("optimization.nlsq.statistical_tolerance", kNumbersField, statistical_tolerance);
  // Adds warnings after the fit and changes none of its numbers.
  visit("optimization.nlsq.profile_check", kNotNumbersField, profile_check);
  // Chooses what the result reports as uncertainties, after the fit: none of its numbers.
  visit("optimization.nlsq.uncertainty", kNotNumbersField, uncertainty);
  // Adds intervals after the fit: none of its numbers.
  visit("optimization.nlsq.profile_intervals", kNotNumbersField, profile_intervals);
  VisitGlobalSearch(global_search, visit);
  VisitMultiStart(multi_start, visit);
  VisitCmaes(cmaes, visit);
}

template <typename Struct, typename Visitor>
void VisitStreaming(Struct& streaming, Visitor& visit) {
  auto& [enable_checkpoints, checkpoint_dir, checkpoint_frequency, checkpoint_min_interval_seconds,
         resume_from_checkpoint, keep_last_checkpoints, enable_fault_tolerance,
         max_retries_per_batch, min_success_rate, batch_size, enable_compression] = streaming;
  constexpr auto checkpointing = kNotNumbersField;  // where and when to save, not what
  visit("optimization.streaming.enable_checkpoints", checkpointing, enable_checkpoints);
  visit("optimization.streaming.checkpoint_dir", checkpointing, checkpoint_dir);
  // Also the chunk size of the chunked strategy: passes reduce per batch, in batch order.
  visit("optimization.streaming.checkpoint_frequency", checkpointing, checkpoint_frequency);
  visit("optimization.streaming.checkpoint_min_interval_seconds", checkpointing,
        checkpoint_min_interval_seconds);
  visit("optimization.streaming.resume_from_checkpoint", checkpointing, resume_from_checkpoint);
  visit("optimization.streaming.keep_last_checkpoints", checkpointing, keep_last_checkpoints);
  // Read retries (on or off, how many): a retry reads the same values, or the fit fails.
  visit("optimization.streaming.enable_fault_tolerance", kNotNumbersField, enable_fault_tolerance);
  visit("optimization.streaming.max_retries_per_batch", kNotNumbersField, max_retries_per_batch);
  visit("optimization.streaming.min_success_rate", kNotNumbersField,
        min_success_rate);  // validated, not used: a fit never leaves batches out
  // Enters resolved, as the points per batch (automatic when null).
  visit("optimization.streaming.batch_size", kNotNumbersField, batch_size);
  visit("optimization.streaming.enable_compression", checkpointing, enable_compression);
}

template <typename Struct, typename Visitor>
void VisitPerformance(Struct& performance, Visitor& visit) {
  auto& [strategy_override, memory_limit_gb, memory_limit_from_command_line, fast_mode, backend,
         gpu_devices, cpu_threads, enable_progress] = performance;
  // The strategies compute bitwise the same passes (batched_objective.h), and a fit may fall back
  // to a leaner one after an allocation failure: a checkpoint of one resumes in another.
  visit("performance.strategy_override", kNotNumbersField, strategy_override);
  // Enters through the batch size it resolves to.
  visit("performance.memory_limit_gb", kNotNumbersField, memory_limit_gb);
  visit("performance.memory_limit_from_command_line", kNotNumbersField,
        memory_limit_from_command_line);
  // Numerical validation: a fit stops (failed) where a fast-mode fit goes on.
  visit("performance.fast_mode", kNumbersField, fast_mode);
  // Only the CPU computes passes in this version (SelectBackend refuses cuda; auto means cpu).
  // A backend that computes passes must give the CPU's numbers before this role can stay.
  visit("performance.backend", kNotNumbersField, backend);
  // The batches split over the devices give bitwise the sums of one (device_pass_backend.h).
  visit("performance.gpu_devices", kNotNumbersField, gpu_devices);
  // Sums are reduced in batch and block order, whatever the thread count.
  visit("performance.computation.cpu_threads", kNotNumbersField, cpu_threads);
  visit("performance.enable_progress", kNotNumbersField, enable_progress);
}

}  // namespace fit_identity_internal

// Calls visit(path, role, field) for every field of `config` (a Config or a const Config), with
// its YAML path (or a name for fields that are no key) and role (a FieldRoleTag). Fields that are
// structs are unpacked, except vectors of PhiRange and ParameterBound (VisitPhiRange, VisitBound
// give their fields) and SimulationOptions (homodyne-simulate's section, not read by a fit).
template <typename ConfigType, typename Visitor>
void VisitConfigFields(ConfigType& config, Visitor&& visit) {
  using namespace fit_identity_internal;
  auto& [source_path, analysis_mode, geometry, data, bounds, initial, nlsq, streaming, performance,
         logging, simulation, warnings, unknown_sections, ignored_keys, dt_source] = config;
  visit("source_path", kNotNumbersField, source_path);  // its values count, not its place
  visit("analysis_mode", kNumbersField, analysis_mode);
  VisitGeometry(geometry, visit);
  VisitData(data, visit);
  visit("parameter_space.bounds", kNumbersField, bounds);  // VisitBound per element
  VisitInitial(initial, visit);
  VisitNlsq(nlsq, visit);
  VisitStreaming(streaming, visit);
  VisitPerformance(performance, visit);
  visit("logging", kNotNumbersField, logging);  // the performance log only writes a file
  visit("simulation", kNotNumbersField, simulation);
  visit("warnings", kNotNumbersField, warnings);
  visit("unknown_sections", kNotNumbersField, unknown_sections);
  visit("ignored_keys", kNotNumbersField, ignored_keys);  // keys without effect
  visit("dt_source", kNotNumbersField, dt_source);        // data.dt_seconds counts, not its origin
}

// The fields of one element of DataSelection::phi_ranges and of Config::bounds.
template <typename Range, typename Visitor>
void VisitPhiRange(Range& range, Visitor&& visit) {
  auto& [min_angle_degrees, max_angle_degrees] = range;
  visit("min_angle", kNumbersField, min_angle_degrees);
  visit("max_angle", kNumbersField, max_angle_degrees);
}
template <typename Bound, typename Visitor>
void VisitBound(Bound& bound, Visitor&& visit) {
  auto& [name, min, max] = bound;
  visit("name", kNumbersField, name);
  visit("min", kNumbersField, min);
  visit("max", kNumbersField, max);
}

}  // namespace homodyne
