"""The README's first screen (issues 24, 36): its tally of the papers' claims says what the generated claims tables
below it say, claim by claim, in the same order, and its counts add up. README stays short (issue 44: what moved went
to docs/ and the tables' READMEs), and every link between README, docs/ and results/*/README.md resolves."""

import re
from collections import Counter

from conftest import ROOT

from ropelab.analysis.verdict import WORDS

README = (ROOT / "README.md").read_text()
CLAIMS = {  # the tally's paper → the section whose generated claims table it tallies
    "Bifocal": "### The Bifocal paper's claims against ours", "PoPE": "### The PoPE paper's claims against ours",
    "Momentum": "### The Momentum paper's claims against ours", "Length": "### Length extrapolation (issue 25)"}
GENERATED = "| claim (paper) | verdict (computed) |"


def _rows(text: str, after: str, header: str = "|") -> list[list[str]]:
    """The body rows of the first Markdown table after the line ``after`` whose header starts with ``header``."""
    lines = text[text.index(after):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    table = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return table


def _verdict(cell: str) -> str:
    """A generated claims table's verdict: the rule's word its cell starts with ("no difference detected: …")."""
    return next(word for word in sorted(WORDS, key=len, reverse=True) if cell.startswith(word))


def test_the_tally_says_what_the_claims_tables_say():
    tables = [(paper, _verdict(row[1])) for paper, heading in CLAIMS.items()
              for row in _rows(README, heading, GENERATED)]
    tally = [(re.sub(r"\[(.+?)\]\(.+?\)", r"\1", row[0]), row[2]) for row in _rows(README, "| paper | claim | verdict |")]
    assert [verdict for _, verdict in tally] == [verdict for _, verdict in tables]
    assert all(said == paper for (said, _), (paper, _) in zip(tally, tables))
    headline = re.search(r"\*\*(\d+) claims computed from the records[^:*]*: (.+?)\*\*", README.replace("\n", " "))
    assert int(headline.group(1)) == len(tables)
    overall, _, after_data = headline.group(2).partition("; ")
    said = Counter()
    for item in overall.split(" · "):
        count, word = item.split(" ", 1)
        said[word] += int(count)
    assert said == Counter(verdict for _, verdict in tables)
    declared_after = [row[2] for row in _rows(README, "| paper | claim | verdict |") if "after the data" in row[3]]
    assert after_data.startswith(f"declared or edited after the data: {len(declared_after)} (")
    after_counts = Counter()
    for item in after_data.split(" (", 1)[1].rstrip(")").split(" · "):
        count, word = item.split(" ", 1)
        after_counts[word] += int(count)
    assert after_counts == Counter(declared_after)


def test_the_first_screen_has_the_two_commands_and_the_tally():
    first_screen = "\n".join(README.splitlines()[:40])
    assert "make run" in first_screen and "make test" in first_screen and "| paper | claim | verdict |" in first_screen


def test_every_command_line_in_the_readme_and_docs_names_a_make_target_or_a_ropelab_command():
    from ropelab.cli import COMMANDS

    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    texts = {path.name: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    stale = [f"{name}: make {t}" for name, text in texts.items() for t in re.findall(r"(?:`|^)make ([a-z][a-z-]*)\b", text, re.M)
             if t not in targets]
    stale += [f"{name}: ropelab {c}" for name, text in texts.items()
              for c in re.findall(r"(?:`|^|\$ |bin/)ropelab ([a-z][a-z-]*)\b", text, re.M) if c not in COMMANDS]
    stale += [f"{name}: python -m ropelab.{m}" for name, text in texts.items()
              for m in re.findall(r"python -m ropelab\.([a-z_]+)", text)
              if m not in ("claims",)]  # claims' generated blocks name its old entry (analysis/claims.py COMMAND)
    assert not stale


PROSE = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md")), *sorted(ROOT.glob("results/*/README.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
GENERATED_BLOCK = re.compile(r"<!-- claims:(\w+) .*?<!-- /claims:\1 -->", re.DOTALL)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def test_every_relative_link_names_a_file_and_heading_that_exist():
    broken = []
    for path in PROSE:
        for target in LINK.findall(path.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            name, _, anchor = target.partition("#")
            dest = (path.parent / name) if name else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in {
                    _anchor(line) for line in dest.read_text().splitlines() if line.startswith("#")}:
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken


def test_the_anchor_rule_is_githubs():
    assert _anchor("### The Bifocal paper's claims against ours") == "the-bifocal-papers-claims-against-ours"
    assert _anchor("### Length extrapolation (issue 25)") == "length-extrapolation-issue-25"
    assert _anchor("## Tasks (`task=…`)") == "tasks-task"


def test_readme_reads_in_one_sitting():
    """About 300 lines (issue 44): what is not generated stays under 250; the generated claims blocks grow with the
    claims declared."""
    prose = GENERATED_BLOCK.sub("", README)
    assert len(prose.splitlines()) <= 250
