"""No number in prose that the command did not write (issue 45): README.md, results/*/README.md and docs/*.md type
no interval and no verdict outside generated text. Generated text is what lies between a claims block's markers
(`python -m ropelab.claims --write-readme`) or a whole file its command writes; the legend that defines the verdict
words sits between `<!-- vocabulary ... -->` and `<!-- /vocabulary -->`, where the words may appear but no interval."""

import json
import re

import pytest
from conftest import ROOT

from ropelab.analysis.verdict import WORDS

NUMBER = r"[+\-−±]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+\-−]?\d+)?"
UNIT = r"(?:\s*(?:%|pts|points|nats|steps))?"
# a point estimate, then its interval: "+0.46 [−0.02, +0.93]", "+2.9 pts [+0.4, +5.5]", "27.5 [23.8, 31.2] %"
TYPED_INTERVAL = re.compile(rf"{NUMBER}{UNIT}\s*\[\s*{NUMBER}\s*%?\s*,\s*{NUMBER}\s*%?\s*\]")
# the rule's words as results: the unambiguous ones anywhere, the everyday ones when quoted or bold
VERDICT = re.compile(r"\b(?:not )?reproduced\b|\bno difference detected\b|\bsays nothing\b"
                     r"|[\"*]{1,2}(?:partly|opposite|refused|incomplete|not run)[\"*]{1,2}", re.IGNORECASE)
GENERATED_BLOCK = re.compile(r"<!-- claims:(\w+) .*?<!-- /claims:\1 -->", re.DOTALL)
VOCABULARY_BLOCK = re.compile(r"<!-- vocabulary.*?<!-- /vocabulary -->", re.DOTALL)
# whole files a command writes (each checked below to be exactly what its command writes)
GENERATED_FILES = {"results/surgery/README.md", "results/card/README.md"}

PROSE = sorted({ROOT / "README.md", *ROOT.glob("results/*/README.md"), *ROOT.glob("docs/*.md")})


def _blank(pattern: re.Pattern, text: str) -> str:
    """``text`` with every match of ``pattern`` emptied, its line breaks kept so that line numbers still hold."""
    return pattern.sub(lambda m: "\n" * m.group().count("\n"), text)


def _hits(pattern: re.Pattern, text: str) -> list[str]:
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group()!r}" for m in pattern.finditer(text)]


def typed_intervals(text: str) -> list[str]:
    return _hits(TYPED_INTERVAL, _blank(GENERATED_BLOCK, text))


def typed_verdicts(text: str) -> list[str]:
    return _hits(VERDICT, _blank(VOCABULARY_BLOCK, _blank(GENERATED_BLOCK, text)))


def _prose():
    return [pytest.param(path, id=str(path.relative_to(ROOT))) for path in PROSE
            if str(path.relative_to(ROOT)) not in GENERATED_FILES]


@pytest.mark.parametrize("path", _prose())
def test_no_typed_interval_outside_generated_text(path):
    assert not typed_intervals(path.read_text()), "point to the generated report or claims row instead"


@pytest.mark.parametrize("path", _prose())
def test_no_typed_verdict_outside_generated_text(path):
    assert not typed_verdicts(path.read_text()), "point to the generated claims row instead"


def test_the_patterns_catch_typed_results_and_nothing_else():
    for typed in ("+0.46 [−0.02, +0.93]", "+2.9 pts [+0.4, +5.5]", "0.40 [0.29, 0.51]", "27.5 [23.8, 31.2] %",
                  "−1.2e-3 [−2.0e-3, +0.4e-3]", "1,366 [1,021, 1,711]", "+12 % [+3 %, +21 %]"):
        assert typed_intervals(f"a difference of {typed} here"), typed
    for prose in ("seeds (results/calibration/dyck3, [0, 1])", "[Results so far](#results-so-far)",
                  "`--factors 1 2 4 8 [--split val|test]`", "a 95 % t interval [lower, upper]", "base 10000 [1k, 100k]"):
        assert not typed_intervals(prose), prose
    for typed in ("spectral − rope: no difference detected", "the smallest rung is reproduced", 'it reads "partly"',
                  "**opposite**"):
        assert typed_verdicts(typed), typed
    for prose in ("make reproduce TABLE=x", "a bad value is refused in one line", "neighbours with opposite sign"):
        assert not typed_verdicts(prose), prose


def test_generated_and_vocabulary_blocks_are_exempt_only_where_they_may_be():
    start, end = "<!-- claims:x (generated) -->", "<!-- /claims:x -->"
    assert not typed_intervals(f"{start}\n| a | reproduced: +2.9 pts [+0.4, +5.5] |\n{end}\n")
    assert typed_intervals(f"{start}\n{end}\nours: +2.9 pts [+0.4, +5.5]\n") == ["line 3: '+2.9 pts [+0.4, +5.5]'"]
    assert typed_intervals("<!-- claims:x -->\n+2.9 [+0.4, +5.5]\n<!-- /claims:y -->"), "markers must pair by name"
    legend = "<!-- vocabulary -->\n**reproduced** means the interval excludes 0\n<!-- /vocabulary -->\n"
    assert not typed_verdicts(legend)
    assert typed_intervals(legend.replace("excludes 0", "+1.0 [+0.2, +1.8]")), "a legend may not hide an interval"


def test_readme_legend_defines_every_verdict_word():
    legend = VOCABULARY_BLOCK.findall((ROOT / "README.md").read_text())
    assert len(legend) == 1 and all(f"**{word}**" in legend[0].replace("**reproduced** /", "**reproduced**")
                                    for word in WORDS)


def test_a_file_exempt_as_generated_is_what_its_command_writes():
    from ropelab.experiments.surgery.report import markdown

    surgery = ROOT / "results" / "surgery"
    assert GENERATED_FILES == {"results/surgery/README.md", "results/card/README.md"}
    assert (surgery / "README.md").read_text() == markdown(json.loads((surgery / "surgery.json").read_text()))


def test_the_card_readme_is_what_ropelab_card_readme_writes_from_the_committed_records(tmp_path):
    from ropelab.analysis import card, card_suite

    suite = card_suite.load(ROOT / "conf" / "card" / "suite.yaml")
    records = ROOT / "results" / "card"
    written = card.write_cross_table(suite, list(suite.tasks.values()), records, tmp_path, name="README.md")
    assert written.read_text() == (records / "README.md").read_text(), "rerun `ropelab card readme` and commit it"
