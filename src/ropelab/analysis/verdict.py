"""The one rule that turns seeds into a verdict's words (issue 36). Every claim ropelab checks is decided here, so
no verdict is typed by hand and no two tables word the same interval differently.

A comparison pairs A and B by seed (same seed = same data and initialisation, ``stats.paired_difference``) and
reads the 95 % t interval of the mean difference A − B against the direction the paper expects:

* no records on either side                        → **not run**
* fewer pairs than the seeds planned before the runs → **incomplete** (k of n), with the interval so far
* fewer than two pairs (no interval), or both compared cells (their means) within ``margin`` of the floor, or
  both of the ceiling (a task that nothing learns, or everything saturates, cannot rank A and B) → **says nothing**
* interval excludes 0 on the paper's side           → **reproduced**
* interval excludes 0 on the other side             → **opposite**
* interval includes 0                               → **no difference detected**, with the MDE: the smallest
  |A − B| a paired t test on n pairs of this spread detects with 80 % power at two-sided α = .05
* a composite of several such parts, combined by its declared rule (``composite``):
  ``all``: the parts' common word; **partly** only when at least one part is reproduced and at least one is not;
  parts that disagree with none reproduced read **not reproduced**, with how many parts got each word;
  ``any``: reproduced when any part is; ``primary``: the named primary part's word, the others shown beside it

Multiplicity: a composite's parts are one family. Its method is Bonferroni-widened intervals: each part's t
interval is the 1 − α/m interval (m = the parts in the family; 98.3 % for 3 parts), its MDE computed at α/m, so
"excludes 0" in any part keeps the family's error rate at α. Intervals rather than Holm's step-down p values,
because the rule reads intervals and the rows print them: an interval and its word cannot disagree.

A paper that expects no difference (direction 0, "barely changes") gets **opposite** when the interval excludes 0
and **no difference detected** (with its MDE) when it does not.

Beside the mean, where seeds split into learned (≥ ``learned``) and not, the solve rates of A and B with Fisher's
exact test between them: a mean over a 99 / 98 / 58 / 62 / 98 % split says less than the 3-of-5 beside it.
**refused** is given by the caller (``refused``) when the records may not be paired at all (two code versions).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from scipy.optimize import brentq
from scipy.stats import fisher_exact, nct, t as student_t

from ropelab.analysis.stats import Estimate, estimate, paired_difference

WORDS = ("reproduced", "opposite", "no difference detected", "says nothing", "not reproduced", "incomplete", "not run",
         "partly", "refused")
COMBINE = ("all", "any", "primary")
ALPHA, POWER = 0.05, 0.80
DIRECTIONS = (1, -1, 0)  # the paper expects A > B, A < B, or no difference (a robustness claim)


@dataclass(frozen=True)
class Verdict:
    word: str          # one of WORDS
    diff: float | None  # mean of the paired differences A − B (by seed)
    low: float | None
    high: float | None  # 95 % t interval
    n: int             # pairs used
    planned: int
    mde: float | None  # smallest |A − B| detectable at 80 % power (two-sided α = .05) from the paired SD and n
    solve: tuple[int, ...] | None  # (learned A, n A, learned B, n B) where ``learned`` is declared; (A, n A) for a level
    solve_p: float | None                    # exact (Fisher) test between the two solve rates
    reason: str = ""   # for says nothing / refused / incomplete / partly: the one line why
    parts: tuple[tuple[str, "Verdict"], ...] = ()  # a composite's named parts
    so_far: str = ""   # for incomplete: the word the pairs there are would give
    alpha: float = ALPHA  # the two-sided error rate of the interval (α/m for a part of a family of m)
    note: str = ""     # a trend's reading of its steps (``no_reversal``)

    def __post_init__(self):
        if self.word not in WORDS:
            raise ValueError(f"verdict word {self.word!r}: valid words are {', '.join(WORDS)}")


@functools.cache
def mde(n: int, sd: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference a two-sided paired t test on ``n`` pairs with SD ``sd`` detects with
    probability ``power``: solved exactly on the noncentral t (not the normal approximation, which is optimistic
    at the n of a few seeds)."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    df = n - 1
    crit = float(student_t.ppf(1 - alpha / 2, df))

    def power_at(effect: float) -> float:
        shift = effect * math.sqrt(n)
        wrong_side = float(nct.cdf(-crit, df, shift))  # scipy returns NaN where this tail underflows
        return float(nct.sf(crit, df, shift)) + (0.0 if math.isnan(wrong_side) else wrong_side)

    high = 1.0
    while power_at(high) < power:  # the bracket grows until it holds the answer (n = 2 needs ~ 10 SD)
        high *= 2
    effect = brentq(lambda e: power_at(e) - power, 0.0, high)
    return effect * sd


def solve_rates(a: Mapping[int, float], b: Mapping[int, float], learned: float
                ) -> tuple[tuple[int, int, int, int] | None, float | None]:
    """(learned A, n A, learned B, n B), always (0/3 against 0/3 says the mean is between two failures), and
    Fisher's exact p between the two rates; p is None when every seed on both sides is on the same side of
    ``learned`` (no split to test)."""
    la, lb = sum(v >= learned for v in a.values()), sum(v >= learned for v in b.values())
    na, nb = len(a), len(b)
    if la + lb in (0, na + nb):
        return (int(la), na, int(lb), nb), None
    p = float(fisher_exact([[la, na - la], [lb, nb - lb]]).pvalue)
    return (int(la), na, int(lb), nb), p


def calibration_state(accuracies: Iterable[float], floor: float, margin: float, ceiling: float) -> str:
    """floor | partial | ceiling for the final accuracies of one setting's seeds (the calibration's rule: a seed
    within ``margin`` of the floor makes it floor; else one within ``margin`` of the ceiling makes it ceiling)."""
    accuracies = list(accuracies)
    if min(accuracies) < floor + margin:
        return "floor"
    return "ceiling" if max(accuracies) > ceiling - margin else "partial"


def _cell_at(mean: float, floor: float | None, ceiling: float | None, margin: float) -> str | None:
    if floor is not None and mean <= floor + margin:
        return "floor"
    if ceiling is not None and mean >= ceiling - margin:
        return "ceiling"
    return None


def _finite_values(values: Mapping[int, float]) -> dict[int, float]:
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def paired(a: dict[int, float], b: dict[int, float], *, direction: int, planned: int | None = None,
           floor: float | None = None, ceiling: float | None = None, margin: float = 0.0,
           learned: float | None = None, alpha: float = ALPHA,
           sides: tuple[float, float] | None = None) -> Verdict:
    """The verdict on A − B by seed. ``direction`` +1: the paper expects A > B; −1: A < B; 0: no difference (an
    interval that excludes 0 is then "opposite", one that includes it "no difference detected", with its MDE). ``planned``: the pairs
    fixed before the runs (default: the pairs there are). ``floor`` / ``ceiling`` with ``margin``: the metric's
    uninformative ends (the guess accuracy, 100 %), read on the compared cells' means (the interval of A − B then
    stays within ±``ceiling``), or on ``sides`` (the means that say whether each side learned, when the compared
    values are not accuracies: a relative drop, an analysis of the run). ``learned``: the level a seed counts as
    learned at. ``alpha``: the interval's two-sided error rate."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: valid directions are +1 (A > B), -1 (A < B) and 0 (no difference)")
    a, b = _finite_values(a), _finite_values(b)
    seeds = sorted(set(a) & set(b))
    planned = len(seeds) if planned is None else planned
    if not seeds:
        reason = "no seed has both sides" if (a or b) else ""
        return Verdict("not run", None, None, None, 0, planned, None, None, None, reason)
    est = paired_difference(a, b)
    ea, eb = estimate(a[s] for s in seeds), estimate(b[s] for s in seeds)
    solve, solve_p = solve_rates({s: a[s] for s in seeds}, {s: b[s] for s in seeds}, learned) if learned is not None \
        else (None, None)
    mean_a, mean_b = sides if sides is not None else (ea.mean, eb.mean)
    word, reason = _word(est, direction, _cell_at(mean_a, floor, ceiling, margin),
                         _cell_at(mean_b, floor, ceiling, margin), alpha)
    verdict = _from_estimate(word, est, planned, solve, solve_p, reason, alpha)
    if ceiling is not None and sides is None and verdict.low is not None:
        # A and B both lie in [0, ceiling], so their difference cannot leave ±ceiling: a t interval wider than that,
        # at few seeds, is cut there; clipping keeps 0 on the side it was, so the word is the same. The MDE is left
        # whole: past the ceiling it says that no possible difference is detectable
        verdict = replace(verdict, low=max(verdict.low, -ceiling), high=min(verdict.high, ceiling))
    if len(seeds) < planned:
        return replace(verdict, word="incomplete", so_far=word,
                       reason=f"{len(seeds)} of {planned} planned seeds" + (f"; {reason}" if reason else ""))
    return verdict


def level(a: dict[int, float], threshold: float, *, direction: int, planned: int | None = None,
          floor: float | None = None, ceiling: float | None = None, margin: float = 0.0,
          learned: float | None = None, alpha: float = ALPHA, sides: tuple[float, float] | None = None) -> Verdict:
    """The verdict on A against a fixed level (a threshold, the guess floor, a shortcut's accuracy): the same rule
    on A − ``threshold`` by seed, so "above the floor" is decided exactly like "A beats B"."""
    verdict = paired(a, {s: threshold for s in a}, direction=direction, planned=planned, floor=floor,
                     ceiling=ceiling, margin=margin, learned=learned, alpha=alpha, sides=sides)
    if verdict.solve is not None:  # the level has no seeds to count: A's solve count alone
        verdict = replace(verdict, solve=verdict.solve[:2], solve_p=None)
    return verdict


def interval(est: Estimate, alpha: float = ALPHA) -> tuple[float, float]:
    """The two-sided 1 − ``alpha`` t interval of the mean."""
    half = float(student_t.ppf(1 - alpha / 2, est.n - 1)) * est.sd / math.sqrt(est.n)
    return est.mean - half, est.mean + half


def _word(est: Estimate, direction: int, cell_a: str | None, cell_b: str | None,
          alpha: float = ALPHA) -> tuple[str, str]:
    if cell_a and cell_a == cell_b:
        return "says nothing", f"both sides at the {cell_a}"
    if est.n < 2:
        return "says nothing", "one pair: no interval"
    low, high = interval(est, alpha)
    if low > 0 or high < 0:
        if direction == 0:
            return "opposite", "the paper expects no difference"
        return ("reproduced" if (est.mean > 0) == (direction > 0) else "opposite"), ""
    return "no difference detected", ""


def _from_estimate(word: str, est: Estimate, planned: int, solve, solve_p, reason: str,
                   alpha: float = ALPHA) -> Verdict:
    if est.n < 2:
        return Verdict(word, est.mean, None, None, est.n, planned, None, solve, solve_p, reason, alpha=alpha)
    low, high = interval(est, alpha)
    return Verdict(word, est.mean, low, high, est.n, planned, mde(est.n, est.sd, alpha), solve, solve_p, reason,
                   alpha=alpha)


def refused(reason: str, planned: int = 0) -> Verdict:
    """The records may not be compared (two code versions, two CPU kinds): no numbers, the one line why."""
    return Verdict("refused", None, None, None, 0, planned, None, None, None, reason)


def composite(parts: Iterable[tuple[str, Verdict]], combine: str = "all", primary: str | None = None) -> Verdict:
    """Several parts of one claim, combined by ``combine`` (``COMBINE``): ``all`` — their common word when they
    agree, "partly" when at least one is reproduced and at least one is not, "not reproduced" when they disagree
    and none is reproduced; ``any`` — reproduced when any part is, else as ``all``; ``primary`` — the part named
    ``primary`` decides. A refused, not-run or incomplete part (the primary, under ``primary``) makes the whole so,
    since the claim is then undecided. ``render`` lists how many parts got each word."""
    parts = tuple(parts)
    if not parts:
        raise ValueError("a composite claim needs at least one part")
    if combine not in COMBINE:
        raise ValueError(f"combine {combine!r}: valid rules are {', '.join(COMBINE)}")
    n, planned = sum(v.n for _, v in parts), sum(v.planned for _, v in parts)
    deciding = parts
    if combine == "primary":
        deciding = tuple((name, v) for name, v in parts if name == primary)
        if not deciding:
            raise ValueError(f"primary {primary!r}: valid parts are {', '.join(name for name, _ in parts)}")
    words = [v.word for _, v in deciding]

    def named(*which: str) -> str:
        return ", ".join(name for name, v in deciding if v.word in which)

    if "refused" in words:
        return Verdict("refused", None, None, None, n, planned, None, None, None, f"refused: {named('refused')}", parts)
    if set(words) == {"not run"}:
        return Verdict("not run", None, None, None, 0, planned, None, None, None, "", parts)
    if "not run" in words or "incomplete" in words:
        return Verdict("incomplete", None, None, None, n, planned, None, None, None,
                       f"short: {named('not run', 'incomplete')}", parts)
    if len(set(words)) == 1:
        word = words[0]
    elif "reproduced" in words:
        word = "reproduced" if combine == "any" else "partly"
    else:
        word = "not reproduced"
    return Verdict(word, None, None, None, n, planned, None, None, None, "", parts)


def counts(v: Verdict) -> str:
    """How many of a composite's parts got each word: "2 opposite, 3 no difference detected"."""
    found = [p.word for _, p in v.parts]
    return ", ".join(f"{found.count(w)} {w}" for w in WORDS if w in found)


# ----------------------------------------------------------------------------------------------- words

def _decimals(v: Verdict) -> int:
    spread = [abs(x) for x in ((v.high - v.low) / 2 if v.low is not None else None, v.mde, v.diff)
              if x is not None and math.isfinite(x) and x != 0]
    if not spread:
        return 1
    return max(1, 1 - math.floor(math.log10(spread[0])))  # two significant digits of the half-width


def _signed(x: float, decimals: int) -> str:
    text = f"{x:+.{decimals}f}"
    return text.replace("-", "−")


def numbers(v: Verdict, unit: str = "", scale: float = 1.0, decimals: int | None = None) -> str:
    """The verdict's numbers without its word: "−2.5 [−22.4, +17.4], n = 3 (MDE 31.0)"; "" when it has none."""
    if v.diff is None:
        return ""
    scaled = replace(v, diff=v.diff * scale, low=None if v.low is None else v.low * scale,
                     high=None if v.high is None else v.high * scale, mde=None if v.mde is None else v.mde * scale)
    d = _decimals(scaled) if decimals is None else decimals
    text = _signed(scaled.diff, d) + unit
    if scaled.low is not None:
        text += f" [{_signed(scaled.low, d)}, {_signed(scaled.high, d)}]"
    text += f", n = {v.n}"
    if v.word in ("no difference detected", "incomplete") and scaled.mde is not None and v.low is not None \
            and v.low <= 0 <= v.high:
        text += f" (MDE {scaled.mde:.{d}f}{unit})"
    if v.solve is not None and len(v.solve) == 2:
        text += f"; learned {v.solve[0]}/{v.solve[1]}"
    elif v.solve is not None:
        la, na, lb, nb = v.solve
        text += f"; learned {la}/{na} vs {lb}/{nb}" + (f" (Fisher p = {v.solve_p:.2g})" if v.solve_p is not None else "")
    if v.note:
        text += f"; {v.note}"
    return text


def render(v: Verdict, unit: str = "", scale: float = 1.0, decimals: int | None = None,
           words: Mapping[str, str] | None = None) -> str:
    """The verdict words and numbers in one line, e.g. "no difference detected: −2.5 [−22.4, +17.4], n = 3
    (MDE 31.0)"; ``scale`` multiplies the numbers (100 for accuracies stored as fractions, with unit " pts");
    ``words`` says the rule's words (a verdict's, and an incomplete one's word so far) in another's: a card's."""
    if v.parts:
        reasons = {part.reason for _, part in v.parts}
        if v.word == "refused" and len(reasons) == 1 and all(part.word == "refused" for _, part in v.parts):
            return f"refused (all {len(v.parts)} parts): {reasons.pop()}"
        inner = "; ".join(f"{name}: {render(part, unit, scale, decimals, words)}" for name, part in v.parts)
        head = {"incomplete": f"incomplete ({v.n} of {v.planned} pairs)", "not run": f"not run (0 of {v.planned})"
                }.get(v.word, v.word)
        family = {p.alpha for _, p in v.parts if p.low is not None}
        corrected = [a for a in family if a < ALPHA]
        if v.word not in ("incomplete", "not run"):
            agree = len({p.word for _, p in v.parts}) == 1
            head += f" (all {len(v.parts)} parts)" if agree else f": {counts(v)}"
            if corrected:
                m = round(ALPHA / corrected[0])
                head += f"; Bonferroni over {m} parts, {100 * (1 - corrected[0]):.1f} % intervals"
        return f"{head} — {inner}"
    if v.word == "refused":
        return f"refused: {v.reason}"
    if v.word == "not run":
        return f"not run (0 of {v.planned})" + (f": {v.reason}" if v.reason else "")
    said = words or {}
    head = f"incomplete ({v.n} of {v.planned}), so far {said.get(v.so_far, v.so_far)}" if v.word == "incomplete" \
        else said.get(v.word, v.word)
    if v.word == "says nothing" and v.reason:
        head += f" ({v.reason})"
    body = numbers(v, unit, scale, decimals)
    return f"{head}: {body}" if body else head
