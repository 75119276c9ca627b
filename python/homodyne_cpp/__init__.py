"""homodyne-cpp from Python: fits of the homodyne XPCS model (docs/python.md).

The engine is the compiled extension ``homodyne_cpp._core``; this package gives it the notebook
API of the reference package (``load_config``, ``load_xpcs_data``, ``fit_nlsq``, ``compute_c2``)
and checks the Python types of the arguments first, so that a wrong argument raises a short
``TypeError`` or ``ValueError`` naming it, never printing arrays or the data dict. Values are then
checked by the engine itself, with the rules and messages of the CLI's flags.
"""
import numbers
import os
import warnings as _warnings

import numpy as _np

from ._core import (
    CheckpointMismatchError,
    Config,
    ConfigError,
    DataError,
    FitInterrupted,
    HomodyneError,
    InputError,
    NlsqResult,
    __version__,
    set_log_level,
)
from . import _core

__all__ = [
    "CheckpointMismatchError",
    "Config",
    "ConfigError",
    "DataError",
    "FitInterrupted",
    "HomodyneError",
    "InputError",
    "NlsqResult",
    "__version__",
    "compute_c2",
    "fit_nlsq",
    "load_config",
    "load_xpcs_data",
    "set_log_level",
]


def _type_name(value):
    return type(value).__name__


_INT_MIN, _INT_MAX = -2**31, 2**31 - 1  # the engine's int options


def _integer(value, name):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {_type_name(value)}")
    if not _INT_MIN <= int(value) <= _INT_MAX:
        raise ValueError(f"{name} = {int(value)}: must be an int from {_INT_MIN} to {_INT_MAX}")
    return int(value)


def _real(value, name):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {_type_name(value)}")
    return float(value)


def _flag(value, name):
    if value is None:
        return None
    if not isinstance(value, (bool, _np.bool_)):
        raise TypeError(f"{name} must be True or False, not {_type_name(value)}")
    return bool(value)


def _text(value, name):
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {_type_name(value)}")
    return value


def _path(value, name):
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), not {_type_name(value)}")
    return os.fsdecode(os.fspath(value))


def _numbers(value, name):
    """value as a 1-D list of floats (a number is one value); TypeError naming it otherwise."""
    if isinstance(value, (str, bytes, dict)) or value is None:
        raise TypeError(f"{name} must be a number or a sequence of numbers, not "
                        f"{_type_name(value)}")
    try:
        array = _np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or a sequence of numbers, not "
                        f"{_type_name(value)}") from None
    if array.ndim > 1:
        raise ValueError(f"{name} must be a number or 1-D, not of shape {array.shape}")
    return [float(each) for each in array.reshape(-1)]


# ----------------------------------------------------------------------------------------------
# Configs


def _yaml_flow(value, where):
    """value (the YAML structure as Python objects) as YAML flow text, the same node a file with
    that structure gives the loader. TypeError naming the place of anything else."""
    if value is None:
        return "null"
    if isinstance(value, (bool, _np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if number != number:
            return ".nan"
        if number in (float("inf"), float("-inf")):
            return ".inf" if number > 0 else "-.inf"
        return repr(number)
    if isinstance(value, str):
        # A JSON string is a YAML double-quoted scalar with the same escapes.
        import json
        return json.dumps(value)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"config{where}: keys must be str, not {_type_name(key)}")
            items.append(f"{_yaml_flow(key, where)}: {_yaml_flow(item, f'{where}[{key!r}]')}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, _np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_flow(item, f"{where}[{k}]")
                               for k, item in enumerate(value)) + "]"
    raise TypeError(f"config{where} is a {_type_name(value)}: a config dict holds dicts, lists, "
                    "str, numbers, bools and None")


def load_config(config):
    """Reads and validates a config: a path (str or os.PathLike) of a YAML file, or a dict holding
    the YAML structure as Python objects (validated exactly as a file with that content, unknown
    keys included; relative paths in it are relative to the working directory). A Config is
    returned as it is. Raises ConfigError naming the file (or "config dict"), the YAML path, the
    value and the rule; InputError for a missing file. Each warning of the config (an unknown or
    deprecated key) is also given to Python's warnings module (UserWarning)."""
    if isinstance(config, Config):
        return config
    if isinstance(config, dict):
        loaded = _core._load_config_text(_yaml_flow(config, "") + "\n", "config dict")
    elif isinstance(config, (str, os.PathLike)):
        path = _path(config, "config")
        if "\0" in path:
            raise ValueError(f"config = {path!r}: contains a NUL character at position "
                             f"{path.index(chr(0))}; the system would read the path only up to "
                             "it")
        loaded = _core._load_config_file(path)
    else:
        raise TypeError("config must be a path (str or os.PathLike), a dict or a Config, not "
                        f"{_type_name(config)}")
    # Unknown and deprecated keys: shown as the CLI shows them, not only stored in .warnings.
    for warning in loaded.warnings:
        _warnings.warn(warning, UserWarning, stacklevel=2)
    return loaded


def load_xpcs_data(config):
    """The config's data set as the fit sees it: a dict of c2_exp (n_phi, n_t, n_t) float64 on the
    fitted grid (frame 0 dropped, diagonal corrected), t1, t2 (t_i = (i + 1) dt), phi_angles_list,
    wavevector_q_list, dt and file_path. config: anything load_config takes. A config of several
    q rings (wavevector_q a list or all) gives every selected ring's matrices, ring after ring:
    wavevector_q_list holds each matrix's q (docs/python.md, Several q rings)."""
    return _core._load_xpcs_data(load_config(config))


# ----------------------------------------------------------------------------------------------
# Fits


def _initial_values(initial_params, config):
    """initial_params as (name, value, origin) triples for the engine."""
    if initial_params is None:
        return []
    if isinstance(initial_params, dict):
        values = []
        for name, value in initial_params.items():
            if not isinstance(name, str):
                raise TypeError(f"initial_params keys must be parameter names (str), not "
                                f"{_type_name(name)}")
            origin = f"initial_params[{name!r}]"
            values.append((name, _real(value, origin), origin))
        return values
    if isinstance(initial_params, (str, bytes)) or not hasattr(initial_params, "__len__"):
        raise TypeError("initial_params must be a dict {name: value} or a sequence of numbers "
                        f"(config.param_names order), not {_type_name(initial_params)}")
    names = config.param_names
    given = list(initial_params)
    if len(given) != len(names):
        raise ValueError(f"initial_params has {len(given)} values; {config.analysis_mode} has "
                         f"{len(names)} physical parameters")
    return [(name, _real(value, f"initial_params[{k}]"), f"initial_params[{k}]")
            for k, (name, value) in enumerate(zip(names, given))]


def fit_nlsq(data, config, initial_params=None, *, threads=None, strategy=None,
             memory_limit_gb=None, global_search=None, fast_mode=None, max_iterations=None,
             checkpoint_dir=None, checkpoints=None, resume=None, progress=None,
             output_dir=None, verbose=False, uncertainty=None):
    """Fits data with the config's settings and returns an NlsqResult.

    data: None (read the config's file, as the CLI does) or a dict as load_xpcs_data returns
    (float32/float64 C-contiguous c2_exp, used without a copy). config: anything load_config
    takes. initial_params: a dict {name: value} or one value per physical parameter
    (config.param_names order). The keyword options override the config for this call only, as
    the CLI flags of the same name do, and are checked as those flags are: threads,
    strategy, memory_limit_gb, global_search, fast_mode, max_iterations, checkpoint_dir,
    checkpoints (False: none), resume (False: start afresh), output_dir (also write the CLI's
    result files there), uncertainty ('auto', the default: 'jackknife' where the residuals are
    correlated along frames, else 'standard'; 'jackknife'; 'standard'; 'curvature': the
    reference's numbers). progress: a callable given a dict per event (stage, index, total,
    value); an exception it raises stops the fit and is raised as it is. verbose: True shows the
    engine's progress lines (phases, iterations) for this call; by default only its warnings.

    Several q rings (analyzer_parameters.scattering.wavevector_q a list or all): q_fit
    independent returns a dict {q: NlsqResult}, one fit per ring in the rings' order (with
    output_dir, each ring's files in output_dir/q_<q>/ and the summary in
    output_dir/nlsq/q_summary.json); q_fit joint returns one NlsqResult of every ring's matrices
    (docs/python.md, Several q rings).
    """
    if data is not None and not isinstance(data, dict):
        raise TypeError("data must be None (read the config's file) or a dict as load_xpcs_data "
                        f"returns, not {_type_name(data)}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable taking one dict, or None, not "
                        f"{_type_name(progress)}")
    options = dict(
        threads=_integer(threads, "threads"),
        strategy=_text(strategy, "strategy"),
        memory_limit_gb=_real(memory_limit_gb, "memory_limit_gb"),
        global_search=_text(global_search, "global_search"),
        fast_mode=_flag(fast_mode, "fast_mode"),
        max_iterations=_integer(max_iterations, "max_iterations"),
        checkpoint_dir=_path(checkpoint_dir, "checkpoint_dir"),
        checkpoints=_flag(checkpoints, "checkpoints"),
        resume=_flag(resume, "resume"),
        output_dir=_path(output_dir, "output_dir"),
        uncertainty=_text(uncertainty, "uncertainty"),
    )
    verbose = _flag(verbose, "verbose")
    config = load_config(config)
    initial_values = _initial_values(initial_params, config)
    rings = _core._rings(config)
    previous_level = _core._log_level()
    if verbose:
        set_log_level("info")
    try:
        if rings is not None and rings[0] == "independent":
            return _fit_rings(data, config, rings[1], initial_values, progress, options)
        return _core._fit_nlsq(data, config, initial_values, progress=progress, **options)
    finally:
        set_log_level(previous_level)


def _fit_rings(data, config, ring_qs, initial_values, progress, options):
    """Independent fits of several q rings, one after the other (docs/python.md, Several q
    rings): {q: NlsqResult} in the rings' order; with output_dir, each ring's files in
    output_dir/q_<q>/ and the summary in output_dir/nlsq/q_summary.json and .csv."""
    import os
    results = {}
    output_dir = options.pop("output_dir")
    for q in ring_qs:
        ring_data = data
        if data is not None:
            # The ring's matrices of a dict as load_xpcs_data returns it (a q per matrix).
            q_list = [float(value) for value in data["wavevector_q_list"]]
            keep = [k for k, value in enumerate(q_list) if abs(value - q) <= 1e-10]
            if not keep:
                raise ValueError(f"data has no matrix of the ring q = {q:g} 1/A "
                                 f"(its wavevector_q_list: {sorted(set(q_list))})")
            ring_data = dict(data)
            for key in ("c2_exp", "phi_angles_list", "wavevector_q_list"):
                ring_data[key] = data[key][keep]
        ring_output = (None if output_dir is None
                       else os.path.join(output_dir, _core._ring_folder_name(q)))
        results[q] = _core._fit_nlsq(ring_data, config, initial_values, progress=progress,
                                     output_dir=ring_output, ring_q=q, **options)
    if output_dir is not None:
        _core._write_ring_summary(output_dir, list(ring_qs))
    return results


def compute_c2(params, t, phi, q, L=None, contrast=0.5, offset=1.0, mode="laminar_flow", dt=0.0):
    """The model c2 (docs/model.md) on the 1-D grid t (seconds) for each angle of phi (degrees;
    a number is one angle): array (n_phi, n_t, n_t). params: the mode's physical parameters in
    order; q in 1/A (> 0), one value or one per angle (matrices of several q rings); L the
    stator-rotor gap in A (> 0), required for laminar_flow only (the
    other modes do not use it; None leaves it out); contrast and offset: one value or one per
    angle; dt: the grid step (0: t[1] - t[0]; another value gives a UserWarning). t must be
    uniform. No diagonal correction. The angles, q and the step pass the checks of a fit's data
    (DataError); other bad values raise ValueError, wrong types TypeError, each naming the
    argument."""
    return _core._compute_c2(
        _numbers(params, "params"), _numbers(t, "t"), _numbers(phi, "phi"), _numbers(q, "q"),
        _real(L, "L"), _numbers(contrast, "contrast"), _numbers(offset, "offset"),
        _text(mode, "mode"), _real(dt, "dt"))


# ----------------------------------------------------------------------------------------------
# NlsqResult in a notebook


def _physical(self):
    """{name: the physical parameter's entry of to_dict()} (value, unit, fixed, intervals, ...)."""
    return {p["name"]: p for p in self.to_dict()["physical"]}


def _units_and_fixed(physical):
    """{name: unit} of the physical parameters of _physical ("" dimensionless; docs/model.md,
    Symbols and units) and the set of those initial_parameters.fixed_parameters held."""
    return ({name: p["unit"] for name, p in physical.items()},
            {name for name, p in physical.items() if p["fixed"]})


def _not_determined(entry):
    """Whether an entry of _physical has a 68 % interval that is its bounds (docs/results.md,
    Intervals: its interval_note starts with the engine's note for that)."""
    return entry.get("interval_note", "").startswith(_core._NOT_DETERMINED_NOTE)


def _repr_html_(self):
    """An HTML table for notebooks: parameter, value, uncertainty and a mark ("at lower bound",
    "at upper bound", or "fixed" where the uncertainty is 0; "not determined within the bounds"
    where the 68 % interval is the bounds), then chi2, reduced chi2 and the quality flag."""
    import html
    rows = []
    held = self.at_bound
    physical = _physical(self)
    units, fixed = _units_and_fixed(physical)
    for name, value, error in zip(self.param_names, self.parameters, self.uncertainties):
        mark = (f"at {held[name]} bound" if name in held
                else "fixed" if name in fixed or error == 0 else "")
        if _not_determined(physical.get(name, {})):
            mark = (mark + ", " if mark else "") + "not determined within the bounds"
        rows.append(f"<tr><td>{html.escape(name)}</td><td>{value:.6g}</td><td>{error:.3g}</td>"
                    f"<td>{html.escape(units.get(name, ''))}</td><td>{mark}</td></tr>")
    quality = html.escape(self.quality_flag)
    if self.quality_reasons:
        quality += ": " + html.escape("; ".join(self.quality_reasons))
    return ("<table><thead><tr><th>parameter</th><th>value</th><th>uncertainty</th><th>unit</th>"
            "<th></th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            f"<p>chi2 {self.chi_squared:.6g}, reduced chi2 {self.reduced_chi_squared:.4g}, "
            f"quality {quality}, {html.escape(self.convergence_status)}</p>")


NlsqResult._repr_html_ = _repr_html_


def _str(self):
    """The printed result: the final fit's line, then parameter, value, uncertainty and mark, the
    per-angle scaling, chi2 and the quality flag (as the CLI prints it)."""
    held = self.at_bound
    physical = _physical(self)
    units, fixed = _units_and_fixed(physical)
    lines = [self.report]
    for name, value, error in zip(self.param_names, self.parameters, self.uncertainties):
        unit = f" {units[name]}" if units.get(name) else ""
        estimate = physical.get(name, {})
        # An end not computed is null in to_dict(), NaN in the CLI's table ("+nan").
        interval = [float("nan") if end is None else end
                    for end in estimate.get("interval_68") or []]
        # The 68 % profile interval relative to the value (docs/results.md, Profile intervals).
        shown = (f"  [{interval[0] - value:+.3g}, {interval[1] - value:+.3g}]"
                 if estimate.get("interval_method") == "profile" and len(interval) == 2 else "")
        mark = (" (fixed)" if name in fixed else "") + shown + (
            f" (at {held[name]} bound)" if name in held else "") + (
            " (not determined within the bounds)" if _not_determined(estimate) else "")
        lines.append(f"  {name:<20} {value:14.6g} +- {error:.3g}{unit}{mark}")
    for k, phi in enumerate(self.phi_angles):
        lines.append(f"  phi {phi:8.2f} deg      contrast {self.contrast[k]:.6f} +- "
                     f"{self.contrast_uncertainties[k]:.2g}   offset {self.offset[k]:.6f} +- "
                     f"{self.offset_uncertainties[k]:.2g}")
    method = self.uncertainty_method
    if method == "jackknife":
        ratios = list(self.uncertainty_ratio_to_standard.values())
        spread = (f"; {min(ratios):.2g} to {max(ratios):.2g} times the independent-noise ones"
                  if ratios else "")
        lines.append(f"  uncertainties: frame-block jackknife over {self.uncertainty_blocks} blocks "
                     f"(residuals correlated over about {self.noise_correlation_frames} "
                     f"frame{'' if self.noise_correlation_frames == 1 else 's'}{spread})")
    elif method == "standard":
        lag1 = self.residual_lag1_correlation
        lines.append("  uncertainties: standard errors of independent noise" +
                     (f" (residuals uncorrelated along frames: lag-1 correlation {lag1:.3f})"
                      if lag1 == lag1 else ""))
    elif method == "curvature":
        lines.append("  uncertainties: curvature, the reference's numbers")
    lines.append(f"  chi2 {self.chi_squared:.6g}, reduced chi2 {self.reduced_chi_squared:.6g}, "
                 f"{self.n_points} points, {self.iterations} iterations, "
                 f"{self.convergence_status}")
    quality = self.quality_flag
    if self.quality_reasons:
        quality += ": " + "; ".join(self.quality_reasons)
    lines.append(f"  quality {quality}")
    return "\n".join(lines)


NlsqResult.__str__ = _str


def _nlsq_result_from_state(state):
    """The NlsqResult of a pickled state (NlsqResult.__reduce__)."""
    return _core._nlsq_result_from_state(state)


def _reduce(self):
    """Pickled as a call of _nlsq_result_from_state: unpickling never makes an NlsqResult through
    __new__, which the engine refuses."""
    return _nlsq_result_from_state, (self._state(),)


NlsqResult.__reduce__ = _reduce
