"""A sweep's report folder: ``report.md`` assembled from the sections, ``table.csv`` (one row per cell),
``runs.csv`` (one row per run), ``table.tex`` (the headline tables) and the figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ropelab.analysis.report.cells import aggregate, rel_degradation
from ropelab.analysis.report.figures import attention_section, curves_section, params_section
from ropelab.analysis.report.momentum import default_ckpt_roots, section as momentum_section
from ropelab.analysis.report.papers import PAPER_VALUES, load_paper_values
from ropelab.core.record import read_yaml
from ropelab.analysis.report.results import (comparison_section, degradation_section, group_section, metric_tables,
                                             papers_section)
from ropelab.analysis.report.status import runs_table, status_section
from ropelab.analysis.report.sweep import GAMMA, Sweep
from ropelab.analysis.stats import Landmarks
from ropelab.core.runs import atomic_write_text, shorter


def open_report(sweep_dir: Path, out: Path | None, rule: Landmarks, title: str,
                command: str) -> tuple[Sweep, Path, list[str]]:
    """The sweep read, the output folder made (default SWEEP/report), and the report's opening lines; exits in one
    line if the sweep is no folder."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SystemExit(f"error: {sweep_dir} is not a folder")
    out = Path(out) if out else sweep_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    sweep = Sweep(sweep_dir, rule)
    # no date and no build time: the same records and code give the same report, byte for byte, so a committed
    # report that matches its records regenerates without a diff
    md = [f"# {title}: {sweep_dir.name}", "", f"`{shorter(sweep_dir)}` · {len(sweep.runs)} runs · by `{command}`", ""]
    return sweep, out, md


def write_report(sweep_dir: Path, out: Path | None = None, rule: Landmarks | None = None, dpi: int = 100,
                 attention: bool = True, attn_layer: int = 0, paper_values: Path = PAPER_VALUES) -> Path:
    sweep, out, md = open_report(sweep_dir, out, rule or Landmarks(), "Report", "python -m ropelab.report")
    if not sweep.runs:
        md += ["No run folders found (folders holding summary.json, config.yaml or .hydra/overrides.yaml)."]
        atomic_write_text(out / "report.md", "\n".join(md) + "\n")
        atomic_write_text(out / "table.csv", pd.DataFrame().to_csv(index=False))
        atomic_write_text(out / "table.tex", "% no runs\n")
        return out

    name = sweep.root.name
    entries, papers = load_paper_values(paper_values), read_yaml(paper_values) or {}
    agg, runs = aggregate(sweep, entries), runs_table(sweep)
    md += status_section(sweep, agg, runs)
    results, tex = metric_tables(sweep, agg)
    md += results + comparison_section(sweep)
    deg = rel_degradation(agg, sweep, entries)
    if deg is not None:
        deg_md, deg_tex = degradation_section(deg, name)
        md += deg_md
        tex.append(deg_tex)
    if GAMMA in sweep.col_keys:  # momentum study (issue 10): degradation by seed, γ verdicts, sharpening
        md += momentum_section(sweep, out, dpi, attention, attn_layer, ckpt_roots=default_ckpt_roots(sweep.root))
    md += group_section(sweep)
    md += curves_section(sweep, out, dpi)
    md += params_section(sweep, out, dpi, (papers.get("bifocal") or {}).get("phase_mean_offset_rad"))
    if attention and GAMMA in sweep.col_keys:
        md += attention_section(sweep, out, dpi, attn_layer)
    md += papers_section(agg, deg, entries, papers)

    atomic_write_text(out / "report.md", "\n".join(md))
    atomic_write_text(out / "table.csv", agg.to_csv(index=False))
    atomic_write_text(out / "runs.csv", runs.to_csv(index=False))
    tex_head = f"% ropelab report for {name}; needs \\usepackage{{booktabs}}"
    atomic_write_text(out / "table.tex", "\n".join([tex_head, "", *tex]))
    return out
