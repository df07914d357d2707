"""Sweep reports: ``ropelab report SWEEP_DIR [--out DIR]`` (or ``make report SWEEP=runs/<name>``).

Reads every run folder under SWEEP_DIR (``config.yaml``, ``summary.json``, ``metrics.csv``,
``positional_trace.npz``; ``.hydra/`` for jobs that never got further) and writes into ``SWEEP_DIR/report/``:

* ``report.md``  — budget, run status, one table per metric (rows: task; columns: what the sweep varies —
  scheme, γ, base, frequency profile — detected from the configs), mean ± SD over seeds, the papers' values
  beside ours (``conf/paper_values.yaml``), lock-in steps, learned-parameter summaries, relative degradation
  for γ sweeps, and links to the figures;
* ``table.csv``  — the same cells in long form (one row per task × column), ``runs.csv`` — one row per run;
* ``table.tex``  — the headline tables as LaTeX tabulars;
* ``curves_<task>.png`` (loss curves), ``params_<task>_<column>.png`` (Ω, A, Φ over training),
  ``attention_<task>.png`` (γ sweeps: one attention map per γ on a validation example).

Metrics are those of ``summary.json``'s ``final`` block, over completed runs only; every other run is counted
by status (failed, diverged, interrupted, running, no summary) in the table cell it belongs to, never dropped.

Landmarks of a run's train-loss curve (Bifocal paper, Fig. 4): the *onset*, where the loss leaves its early
plateau, and the *lock-in*, where it crosses half the plateau for good (defined in ``ropelab.analysis.stats``; set by
``--smooth``, ``--plateau``, ``--onset-drop``, ``--lockin-frac``). Sweeps whose columns are schemes also get
scheme-against-scheme differences paired by seed with 95 % t intervals. The report lists the machines,
precisions and code versions its runs ran on, and warns when one table mixes them.

The package, by job (each module imports only those above it):

* ``records``  — run folders → ``Run`` (config, summary, metrics, positional trace);
* ``sweep``    — ``Sweep``: the runs, the axes the configs vary, the runs of each task × column cell;
* ``papers``   — the papers' values and which one belongs beside a cell;
* ``tables``   — Markdown and LaTeX tables, written by pandas;
* ``cells``    — statistics per cell (``aggregate``), cell texts, pivots, relative degradation;
* ``status``   — budget, run status, machines; ``runs.csv``;
* ``figures``  — loss curves, learned parameters, attention maps, and the sections that show them;
* ``results``  — the metric tables, paired scheme differences, degradation, papers sections;
* ``gamma``    — a γ sweep's numbers: degradation, γ verdicts;
* ``momentum`` — a γ sweep's momentum section: tables, figures, attention sharpening, claims;
* ``write``    — ``write_report``: the report folder;  ``cli`` — the command line.
"""

from ropelab.analysis.report.cells import aggregate, pivot, rel_degradation
from ropelab.analysis.report.cli import compare_runs, main
from ropelab.analysis.report.figures import file_part, pyplot
from ropelab.analysis.report.papers import load_paper_values, paper_for
from ropelab.analysis.report.records import Run, flatten, load_run, smoothed_train_loss
from ropelab.analysis.report.status import budget_lines
from ropelab.analysis.report.sweep import Sweep
from ropelab.analysis.report.tables import latex_table, markdown_table
from ropelab.analysis.report.write import open_report, write_report

__all__ = ["Run", "Sweep", "aggregate", "budget_lines", "compare_runs", "file_part", "flatten",
           "latex_table", "load_paper_values", "load_run", "main", "markdown_table", "open_report", "paper_for",
           "pivot", "pyplot", "rel_degradation", "smoothed_train_loss", "write_report"]
