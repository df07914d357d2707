"""The one rule (issue 36) on synthetic seeds: every verdict class, the MDE and the solve rate."""

import math

import numpy as np
import pytest
from scipy.stats import fisher_exact, nct, t as student_t

from ropelab.analysis import verdict as V


def seeds(*values):
    return dict(enumerate(values))


def test_interval_on_the_papers_side_is_reproduced_and_on_the_other_opposite():
    a, b = seeds(0.9, 0.8, 0.85), seeds(0.5, 0.45, 0.52)
    up = V.paired(a, b, direction=+1)
    assert up.word == "reproduced" and up.n == up.planned == 3 and up.low > 0
    assert up.diff == pytest.approx(np.mean([0.4, 0.35, 0.33]))
    sd = np.std([0.4, 0.35, 0.33], ddof=1)
    assert up.high - up.diff == pytest.approx(student_t.ppf(0.975, 2) * sd / math.sqrt(3))
    down = V.paired(a, b, direction=-1)
    assert down.word == "opposite" and (down.diff, down.low, down.high) == (up.diff, up.low, up.high)


def test_interval_across_zero_is_no_difference_with_the_mde_at_80_percent_power():
    a, b = seeds(1.0, 3.0, 2.0, 6.0), seeds(2.0, 1.0, 4.0, 4.0)  # differences −1, +2, −2, +2
    v = V.paired(a, b, direction=+1)
    assert v.word == "no difference detected" and v.low < 0 < v.high and v.diff == pytest.approx(0.25)
    sd = np.std([-1, 2, -2, 2], ddof=1)
    crit = student_t.ppf(0.975, 3)
    shift = v.mde / sd * math.sqrt(4)
    assert nct.sf(crit, 3, shift) + nct.cdf(-crit, 3, shift) == pytest.approx(0.80, abs=1e-6), "power at the MDE"
    normal_approx = (1.959964 + 0.841621) * sd / 2
    assert v.mde > normal_approx, "the exact MDE at n = 4 is wider than the normal approximation"
    assert V.mde(30, 1.0) == pytest.approx(
        (student_t.ppf(0.975, 29) + student_t.ppf(0.80, 29)) / math.sqrt(30), rel=0.02), "≈ the textbook sum at large n"
    assert "(MDE " in V.render(v)


def test_mde_shrinks_with_n_and_scales_with_the_sd():
    assert V.mde(10, 2.0) == pytest.approx(2 * V.mde(10, 1.0))
    assert V.mde(3, 1.0) > V.mde(5, 1.0) > V.mde(20, 1.0)
    assert V.mde(4, 0.0) == 0.0 and math.isnan(V.mde(1, 1.0))


def test_cells_at_the_floor_or_the_ceiling_say_nothing():
    floor = V.paired(seeds(0.11, 0.12, 0.10), seeds(0.10, 0.10, 0.10), direction=+1, floor=0.1, margin=0.03)
    assert floor.word == "says nothing" and "floor" in floor.reason and floor.diff is not None
    ceiling = V.paired(seeds(1.0, 0.99, 1.0), seeds(0.995, 1.0, 0.99), direction=+1, ceiling=1.0, margin=0.02)
    assert ceiling.word == "says nothing" and "ceiling" in ceiling.reason
    one_side = V.paired(seeds(0.9, 0.95, 0.92), seeds(0.1, 0.11, 0.1), direction=+1, floor=0.1, margin=0.03)
    assert one_side.word == "reproduced", "only one side at the floor still ranks them"
    single = V.paired({0: 0.9}, {0: 0.1}, direction=+1)
    assert single.word == "says nothing" and single.low is None and single.mde is None
    assert V.render(V.paired({0: 0.30}, {0: 0.38}, direction=-1)) == "says nothing (one pair: no interval): −0.080, n = 1"


def test_an_accuracy_difference_interval_stays_within_the_ceiling_and_keeps_its_word():
    a, b = seeds(0.95, 0.20, 0.90), seeds(0.10, 0.15, 0.30)   # three pairs this spread: a t interval past ±1
    free = V.paired(a, b, direction=+1)
    assert free.high > 1.0 and free.mde > 1.0
    bounded = V.paired(a, b, direction=+1, ceiling=1.0)
    assert (bounded.low, bounded.high, bounded.mde) == (free.low, 1.0, free.mde)
    assert bounded.word == free.word == "no difference detected" and bounded.diff == free.diff
    relative = V.paired(a, b, direction=+1, ceiling=1.0, sides=(0.7, 0.2))   # compared values are not accuracies
    assert relative.high == free.high


def test_fewer_pairs_than_planned_are_incomplete_and_none_not_run():
    v = V.paired(seeds(0.9, 0.8, 0.85), seeds(0.5, 0.45, 0.52), direction=+1, planned=5)
    assert v.word == "incomplete" and v.so_far == "reproduced" and (v.n, v.planned) == (3, 5)
    assert V.render(v).startswith("incomplete (3 of 5), so far reproduced: +")
    unpaired = V.paired({0: 0.9, 1: 0.8}, {2: 0.5}, direction=+1, planned=3)
    assert unpaired.word == "not run" and unpaired.n == 0 and "both sides" in unpaired.reason
    nothing = V.paired({}, {}, direction=+1, planned=5)
    assert nothing.word == "not run" and V.render(nothing) == "not run (0 of 5)"


def test_seeds_missing_a_side_or_nan_leave_their_pair_out():
    v = V.paired({0: 1.0, 1: 2.0, 2: float("nan"), 3: 4.0}, {0: 0.0, 1: 0.5, 2: 0.0, 4: 9.0}, direction=+1)
    assert v.n == 2 and v.diff == pytest.approx(1.25)


def test_split_seeds_report_the_solve_rate_with_fishers_exact_test():
    alibi = seeds(0.99, 0.98, 0.58, 0.62, 0.98)
    rope = seeds(0.99, 0.99, 0.99, 0.98, 0.99)
    v = V.paired(alibi, rope, direction=-1, learned=0.9)
    assert v.solve == (3, 5, 5, 5)

    assert v.solve_p == pytest.approx(fisher_exact([[3, 2], [5, 0]]).pvalue)
    assert "learned 3/5 vs 5/5 (Fisher p = 0.44)" in V.render(v, " pts", scale=100)
    all_learned = V.paired(rope, seeds(0.95, 0.96, 0.97, 0.92, 0.99), direction=+1, learned=0.9)
    assert all_learned.solve == (5, 5, 5, 5) and all_learned.solve_p is None, "no split: counts, no test"
    neither = V.paired(seeds(0.48, 0.50, 0.49), seeds(0.45, 0.47, 0.46), direction=+1, learned=0.9)
    assert "learned 0/3 vs 0/3" in V.render(neither, " pts", scale=100) and "Fisher" not in V.render(neither)


def test_a_level_is_decided_by_the_same_rule():
    assert V.level(seeds(0.95, 0.97, 0.96), 0.9, direction=+1).word == "reproduced"
    assert V.level(seeds(0.85, 0.84, 0.86), 0.9, direction=+1).word == "opposite"
    v = V.level(seeds(0.95, 0.85, 0.90), 0.9, direction=+1)
    assert v.word == "no difference detected" and v.diff == pytest.approx(0.0, abs=1e-12)


def test_a_composite_is_partly_when_its_parts_disagree_and_lists_each():
    yes = V.paired(seeds(2.0, 3.0, 2.5), seeds(0.0, 0.5, 0.2), direction=+1)
    null = V.paired(seeds(1.0, 3.0, 2.0), seeds(2.0, 1.0, 2.5), direction=+1)
    mixed = V.composite([("mod 7", yes), ("Dyck-3", null)])
    assert mixed.word == "partly" and [name for name, _ in mixed.parts] == ["mod 7", "Dyck-3"]
    text = V.render(mixed)
    assert text.startswith("partly: 1 reproduced, 1 no difference detected — mod 7: reproduced: +")
    assert "; Dyck-3: no difference detected: " in text
    assert V.composite([("a", yes), ("b", yes)]).word == "reproduced"
    pending = V.composite([("a", yes), ("b", V.paired({}, {}, direction=+1, planned=3))])
    assert pending.word == "incomplete" and pending.reason == "short: b" and (pending.n, pending.planned) == (3, 6)
    assert V.render(pending).startswith("incomplete (3 of 6 pairs) — a: reproduced")
    none = V.composite([("a", V.paired({}, {}, direction=+1, planned=3))] * 2)
    assert none.word == "not run"
    refused = V.composite([("a", yes), ("b", V.refused("two commits"))])
    assert refused.word == "refused" and refused.reason == "refused: b"


def test_refused_carries_its_reason_and_no_numbers():
    v = V.refused("pairs commit 0577cb1 with e7b213e: two code versions", planned=5)
    assert v.diff is None and V.render(v) == "refused: pairs commit 0577cb1 with e7b213e: two code versions"


def test_render_writes_the_line_of_the_brief():
    # differences chosen to give mean −2.5 with the interval ±19.9 of n = 3
    sd = 19.9 / student_t.ppf(0.975, 2) * math.sqrt(3)
    diffs = [-2.5 - sd, -2.5, -2.5 + sd]
    v = V.paired(seeds(*diffs), seeds(0.0, 0.0, 0.0), direction=-1)
    assert V.render(v) == f"no difference detected: −2.5 [−22.4, +17.4], n = 3 (MDE {v.mde:.1f})"
    small = V.paired(seeds(0.012, 0.010, 0.014), seeds(0.0, 0.0, 0.0), direction=+1)
    assert V.render(small).startswith("reproduced: +0.0120 [+0.0070, +0.0170], n = 3"), "two digits of the half-width"


def test_a_claim_of_no_difference_is_opposite_when_a_difference_is_found():
    drop = V.paired(seeds(0.93, 0.94, 0.92), seeds(0.70, 0.68, 0.69), direction=0)
    assert drop.word == "opposite" and "no difference" in drop.reason
    flat = V.paired(seeds(0.93, 0.90, 0.92), seeds(0.91, 0.93, 0.90), direction=0)
    assert flat.word == "no difference detected" and flat.mde > 0


def test_bad_words_and_directions_are_refused_by_name():
    with pytest.raises(ValueError, match="valid words are reproduced"):
        V.Verdict("confirmed", None, None, None, 0, 0, None, None, None)
    with pytest.raises(ValueError, match=r"valid directions are \+1"):
        V.paired({0: 1.0}, {0: 0.0}, direction=2)


def test_partly_needs_a_reproduced_part_and_otherwise_the_row_reads_its_parts():
    against = V.paired(seeds(0.0, 0.5, 0.2), seeds(2.0, 3.0, 2.5), direction=+1)
    null = V.paired(seeds(1.0, 3.0, 2.0), seeds(2.0, 1.0, 2.5), direction=+1)
    mixed = V.composite([("a", against), ("b", against), ("c", null)])
    assert mixed.word == "not reproduced"
    assert V.render(mixed).startswith("not reproduced: 2 opposite, 1 no difference detected — a: opposite")


def test_combine_any_and_primary():
    yes = V.paired(seeds(2.0, 3.0, 2.5), seeds(0.0, 0.5, 0.2), direction=+1)
    null = V.paired(seeds(1.0, 3.0, 2.0), seeds(2.0, 1.0, 2.5), direction=+1)
    assert V.composite([("a", yes), ("b", null)], "any").word == "reproduced"
    assert V.composite([("a", null), ("b", null)], "any").word == "no difference detected"
    assert V.composite([("a", yes), ("b", null)], "primary", "b").word == "no difference detected"
    assert V.composite([("a", null), ("b", yes)], "primary", "b").word == "reproduced"
    with pytest.raises(ValueError, match="valid rules are all, any, primary"):
        V.composite([("a", yes)], "most")


def test_bonferroni_widens_each_parts_interval_to_one_minus_alpha_over_m():
    # differences 1, 2, 3: mean 2, SD 1, n 3; for m = 3 parts the interval is the 98.33 % t interval
    v = V.paired(seeds(1.0, 2.0, 3.0), seeds(0.0, 0.0, 0.0), direction=+1, alpha=0.05 / 3)
    half = student_t.ppf(1 - 0.05 / 6, 2) / math.sqrt(3)
    assert half == pytest.approx(7.6488 / math.sqrt(3), rel=1e-4)   # t(0.99167, 2) = 7.649, against 4.303 at 95 %
    assert (v.low, v.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert v.word == "no difference detected" and v.low < 0
    plain = V.paired(seeds(1.0, 2.0, 3.0), seeds(0.0, 0.0, 0.0), direction=+1)
    assert plain.high - plain.diff == pytest.approx(student_t.ppf(0.975, 2) / math.sqrt(3))
    assert v.mde == pytest.approx(V.mde(3, 1.0, 0.05 / 3)) and v.mde > plain.mde
    text = V.render(V.composite([("a", v), ("b", v), ("c", v)]))
    assert "Bonferroni over 3 parts, 98.3 % intervals" in text
