"""Data a fit cannot be trusted with, given as a dict of arrays (the third entry point beside a
file and the C++ API; tests/pipeline/fit_data_check_test.cc runs the same table through those):
each ends in DataError naming c2_exp, never in a result with success True (docs/results.md,
When a fit is refused)."""
import numpy as np
import pytest

import homodyne_cpp as hc

TRUTH = [1500.0, -0.6, 5.0, 3e-4, -0.3, 0.0, 10.0]
PHI = np.array([-30.0, 20.0, 75.0])


def good_data(n_t=60):
    t = 0.1 * np.arange(1, n_t + 1)
    c2 = hc.compute_c2(TRUTH, t, PHI, q=0.0054, L=2e6, contrast=0.3, offset=1.0)
    noisy = c2 + np.random.default_rng(5).normal(0.0, 0.01, c2.shape)
    return {"c2_exp": 0.5 * (noisy + noisy.transpose(0, 2, 1)), "t1": t, "t2": t,
            "phi_angles_list": PHI, "wavevector_q_list": np.full(3, 0.0054)}


def bad(change):
    data = good_data()
    data["c2_exp"] = change(data["c2_exp"])
    return data


def three_frames():
    data = good_data(3)
    return data


CASES = {
    "all_nan": (lambda: bad(lambda c2: np.full_like(c2, np.nan)), "too few finite c2_exp points"),
    "all_inf": (lambda: bad(lambda c2: np.full_like(c2, np.inf)), "too few finite c2_exp points"),
    "beyond_float32": (lambda: bad(lambda c2: c2 * 1e300), "values beyond +-3.4e38"),
    "constant": (lambda: bad(lambda c2: np.ones_like(c2)), "every finite c2_exp point equals 1"),
    "three_frames": (three_frames, "too few finite c2_exp points"),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("strategy, global_search", [("standard", "off"), ("standard", "auto"),
                                                     ("streaming", "off"), ("streaming", "auto")])
def test_bad_data_dict_is_refused(laminar_set, name, strategy, global_search):
    make, message = CASES[name]
    config = hc.load_config(str(laminar_set[1]))
    with pytest.raises(hc.DataError, match=message.replace("+", r"\+")):
        hc.fit_nlsq(make(), config, checkpoints=False, strategy=strategy,
                    global_search=global_search)


def test_good_data_dict_is_fitted(laminar_set):
    config = hc.load_config(str(laminar_set[1]))
    result = hc.fit_nlsq(good_data(), config, checkpoints=False, global_search="off")
    assert result.success, result.message
