"""The committed reports are what today's code writes from the committed records (issue 24): regenerating one
where it is committed leaves the checkout clean, so the README's report command never rewrites history."""

from pathlib import Path

import pytest

from conftest import ROOT
from ropelab.analysis import phase, report

TEXT = (".md", ".csv", ".tex")  # byte for byte; figures by name (their bytes depend on matplotlib's version)


def _same_report(written: Path, committed: Path) -> None:
    assert sorted(p.name for p in written.iterdir()) == sorted(p.name for p in committed.iterdir())
    for path in written.iterdir():
        if path.suffix in TEXT:
            assert path.read_bytes() == (committed / path.name).read_bytes(), f"{committed / path.name} is stale"


@pytest.mark.parametrize("table", ["bifocal_table1", "pope_indirect", "momentum_options", "rope_base"])
def test_a_committed_table_report_is_what_the_code_writes(table, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the report names its sweep as the user typed it: results/<table>
    written = report.write_report(Path("results") / table, tmp_path / "report")
    _same_report(written, ROOT / "results" / table / "report")


def test_the_committed_phase_diagram_is_what_the_code_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    written = phase.write(list(phase.DEFAULT_SOURCES), tmp_path / "report")
    committed = ROOT / "results" / "bio_phase" / "report"
    _same_report(written, committed)


def test_two_builds_of_a_report_are_byte_identical(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    first = report.write_report(Path("results/pope_indirect"), tmp_path / "a")
    second = report.write_report(Path("results/pope_indirect"), tmp_path / "b")
    for path in first.iterdir():
        assert path.read_bytes() == (second / path.name).read_bytes(), path.name


def test_a_committed_gamma_report_is_not_rewritten_without_its_checkpoints(tmp_path, monkeypatch):
    """Records keep no checkpoints; results/momentum_gamma/report's attention maps came from them: the report
    command without --out refuses (naming --out) instead of dropping them."""
    from ropelab.analysis.report import cli

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(cli, "default_ckpt_roots", lambda sweep: [tmp_path / "no_checkpoints"])
    before = (ROOT / "results" / "momentum_gamma" / "report" / "report.md").read_bytes()
    with pytest.raises(SystemExit, match=r"rewriting it would drop them; write elsewhere with --out DIR"):
        report.main(["results/momentum_gamma"])
    assert (ROOT / "results" / "momentum_gamma" / "report" / "report.md").read_bytes() == before


@pytest.mark.slow
def test_the_committed_momentum_freqs_report_is_what_its_readme_commands_write(tmp_path, monkeypatch):
    """results/momentum_freqs/README.md: the report and the momentum report, both without attention maps."""
    from ropelab.analysis import momentum_report

    monkeypatch.chdir(ROOT)
    out = tmp_path / "report"
    assert report.main(["results/momentum_freqs", "--out", str(out), "--no-attention"]) == 0
    assert momentum_report.main(["results/momentum_freqs", "--out", str(out), "--no-attention"]) == 0
    _same_report(out, ROOT / "results" / "momentum_freqs" / "report")
