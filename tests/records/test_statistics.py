"""Statistics over seeds and the loss-curve landmarks (``ropelab.analysis.stats``) against their definitions, with no
optional extra (issue 27: the survivors of mutation testing, results/mutation/). Each test checks a known value, an
identity the math gives or a hand-computed example."""

import math

import numpy as np
import pytest


# --- statistics over seeds and the loss-curve landmarks ---------------------------------------------

def test_estimates_and_paired_differences_by_hand():
    from ropelab.analysis.stats import Estimate, estimate, paired_difference, t975

    e = estimate([1.0, None, 2.0, math.nan, 3.0])  # None and NaN are left out
    assert (e.mean, e.sd, e.n) == (2.0, 1.0, 3)
    assert e.half_width == pytest.approx(t975(2) / math.sqrt(3)) and t975(2) == pytest.approx(4.302653, rel=1e-6)
    two = estimate([1.0, 3.0])
    assert two.sd == pytest.approx(math.sqrt(2)) and two.n == 2
    one = estimate([5.0])
    assert one.mean == 5.0 and math.isnan(one.sd) and one.n == 1 and math.isnan(one.half_width)
    empty = estimate([None, math.nan])
    assert math.isnan(empty.mean) and math.isnan(empty.sd) and empty.n == 0
    assert math.isnan(t975(0))
    d = paired_difference({0: 3.0, 1: 5.0, 2: None, 3: 1.0, 4: math.nan}, {0: 1.0, 1: 2.0, 2: 7.0, 4: 1.0, 5: 0.0})
    assert (d.mean, d.n) == (2.5, 2)  # seeds 0 and 1 only
    # excludes_zero: strictly, and only with n > 1
    hw = t975(2) * 1.0 / math.sqrt(3)
    assert not Estimate(hw, 1.0, 3).excludes_zero()  # low is exactly 0
    assert not Estimate(-hw, 1.0, 3).excludes_zero()  # high is exactly 0
    assert Estimate(hw + 0.01, 1.0, 3).excludes_zero() and Estimate(-hw - 0.01, 1.0, 3).excludes_zero()
    assert not Estimate(0.2, 1.0, 3).excludes_zero()  # the interval spans 0 (its high is below 1)
    assert Estimate(10.0, 1.0, 2).excludes_zero() and not Estimate(10.0, math.nan, 1).excludes_zero()
    assert Estimate(2.0, 1.0, 4).text() == "2 [0.409, 3.59] (n=4)"
    assert Estimate(2.0, math.nan, 1).text() == "2 (n=1)" and Estimate(math.nan, math.nan, 0).text() == "–"
    assert Estimate(2.0, 1.0, 4).text("{:.1f}") == "2.0 [0.4, 3.6] (n=4)"


def test_stays_below_from_by_hand():
    import pandas as pd
    from ropelab.analysis.stats import stays_below_from

    #                  0   1   2   3  4  5    6  7  8  9
    s = pd.Series([20, 20, 10, 6, 4, 9, 3.0, 2, 1, 1], dtype=float)
    # plateau window = steps 2..4 inclusive: median(10, 6, 4) = 6, threshold 0.5 × 6 = 3; step 6 is exactly 3
    # (not below), so the loss stays below from step 7 on
    assert stays_below_from(s, 0.5, (2, 4)) == 7.0
    assert stays_below_from(s, 0.9, (2, 4)) == 6.0  # threshold 5.4: last at or above it is step 5
    assert stays_below_from(s, 2.0, (2, 4)) == 2.0  # below from the window's start on
    assert math.isnan(stays_below_from(pd.Series([5.0] * 10), 0.5, (2, 4)))  # never gets there
    assert stays_below_from(s[:5], 0.5, (2, 4)) is None  # ends at the window's end
    assert stays_below_from(s[:6], 0.5, (2, 4)) is not None


def test_onset_uses_a_centred_mean_and_lockin_the_series_it_is_given():
    import pandas as pd
    from ropelab.analysis.stats import Landmarks, lockin_step, onset_step

    loss = pd.Series([10.0] * 8 + [1.0] * 8)
    rule = Landmarks(smooth=3, plateau=(0, 4), lockin_frac=0.5, onset_drop=0.1)
    # centred mean over 3 steps: step 7 = (10 + 10 + 1) / 3 = 7 < 9, step 6 = 10: the loss leaves at step 7
    # (a trailing mean would say step 8, with the first value its own mean)
    assert onset_step(loss, rule) == 7.0
    assert lockin_step(loss, rule) == 8.0
    # min_periods=1: with a centred window of 2, step 0 is its own mean (1), so the plateau is median(1, 5.5, 10)
    # = 5.5 and the loss stays below 4.95 from step 9 (without step 0 the plateau would be 7.75, the answer 8)
    first = pd.Series([1.0] + [10.0] * 7 + [1.0] * 8)
    assert onset_step(first, Landmarks(smooth=2, plateau=(0, 2))) == 9.0


def test_curves_keep_the_last_value_of_each_step():
    import pandas as pd
    from ropelab.analysis.stats import first_step_at, metric_curve, train_loss

    metrics = pd.DataFrame({"step": [0, 0, 1, 2, 2, 3], "train/loss": [5.0, 4.0, 3.0, math.nan, 2.0, 1.0],
                            "val/acc": [math.nan, 0.2, math.nan, 0.9, 0.95, math.nan]})
    assert train_loss(metrics).to_dict() == {0: 4.0, 1: 3.0, 2: 2.0, 3: 1.0}
    assert metric_curve(metrics).to_dict() == {0: 0.2, 2: 0.95}
    assert train_loss(None).empty and metric_curve(metrics, "val/exact").empty
    assert train_loss(metrics.drop(columns="step")).empty
    curve = pd.Series([0.1, 0.5, 0.9, 0.95], index=[10, 20, 30, 40])
    assert first_step_at(curve, 0.9) == 30.0 and first_step_at(curve, 0.5) == 20.0
    assert math.isnan(first_step_at(curve, 0.99))


def test_sawtooth_statistics_by_hand():
    from ropelab.analysis.stats import binomial_two_sided, sawtooth

    assert binomial_two_sided(3, 10) == pytest.approx(2 * (1 + 10 + 45 + 120) / 1024)  # P(X ≤ 3) + P(X ≥ 7)
    assert binomial_two_sided(5, 10) == 1.0
    phase = np.array([[0.5, -1.0] * 4, [-1.0, 0.5] * 4])  # a perfect saw-tooth on both heads
    s = sawtooth(phase, permutations=2000)
    assert (s["alternation"], s["neighbours"], s["alternating"]) == (1.0, 14, 14)
    assert s["binomial_p"] == pytest.approx(2 * 0.5 ** 14)
    # a row of four + and four − alternates perfectly in 2 of its C(8, 4) = 70 orders: both rows, (2/70)² ≈ 0.0008
    assert s["permutation_p"] < 0.01 and s["permutation_p"] >= 1 / 2001
    assert s["lag1_autocorrelation"] == pytest.approx(-7 / 8)  # centred ±0.75: 7 products of −0.5625 over 8 squares
    assert (s["mean_abs_phase"], s["mean_abs_neighbour_step"], s["max_abs_phase"], s["positive_fraction"]) == \
        pytest.approx((0.75, 1.5, 1.0, 0.5))
    flat = sawtooth(np.ones((2, 6)), permutations=50)
    assert flat["alternation"] == 0.0 and flat["permutation_p"] == 1.0 and flat["lag1_autocorrelation"] is None
