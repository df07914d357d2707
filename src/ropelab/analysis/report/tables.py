"""Tables as text, written by libraries: Markdown through tabulate (``DataFrame.to_markdown`` for a frame,
``pipe_table`` for rows) and LaTeX (``Styler.to_latex``, booktabs rules). Cells are shown as ``str`` shows them;
the row labels head the first column."""

from __future__ import annotations

from typing import Iterable, Sequence

import pandas as pd
from tabulate import DataRow, TableFormat, tabulate

# LaTeX's special characters and the few non-ASCII symbols the cells use; one character each, so a single pass
# never re-escapes what it wrote (a backslash → \textbackslash{}, whose braces stay braces)
LATEX = str.maketrans({"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                       "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                       "±": r"$\pm$", "γ": r"$\gamma$", "⚠": "(!)", "—": "--", "–": "--", "·": r"$\cdot$"})


def latex_escape(text: object) -> str:
    return str(text).translate(LATEX)


def _markdown_cell(value: object) -> str:
    return str(value).replace("|", "\\|")  # a bare | would end the cell


def markdown_table(df: pd.DataFrame, index_name: str = "task") -> str:
    """A pipe table, cells unpadded (a table's rows diff line by line when one cell changes)."""
    shown = df.map(_markdown_cell).rename(columns=_markdown_cell).rename_axis(index_name)
    return shown.to_markdown(stralign=None, numalign=None, disable_numparse=True)


def pipe_table(header: Sequence[object], rows: Iterable[Sequence[object]], align: str) -> list[str]:
    """A Markdown pipe table as lines: cells as ``str`` writes them, unpadded, and a rule of three dashes per column
    (``---:`` where ``align`` has ``r``, one letter per column), so a table's rows diff line by line when one cell
    changes and the committed tables keep their bytes."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    row = DataRow("| ", " | ", " |")
    fmt = TableFormat(lineabove=None, linebelowheader=lambda widths, aligns: rule, linebetweenrows=None,
                      linebelow=None, headerrow=row, datarow=row, padding=0, with_header_hide=None)
    text = tabulate([[str(c) for c in r] for r in rows], headers=[str(h) for h in header], tablefmt=fmt,
                    stralign=None, numalign=None, disable_numparse=True)
    return text.split("\n")


def latex_table(df: pd.DataFrame, caption: str, label: str) -> str:
    """A floating booktabs table: row labels under "task", then one centred column per column of ``df``."""
    styler = df.rename_axis("task").reset_index().style.hide(axis="index")
    styler = styler.format(latex_escape).format_index(latex_escape, axis="columns")
    styler.set_table_styles([{"selector": "small", "props": ":;"}])
    return styler.to_latex(environment="table", position="t", position_float="centering", hrules=True,
                           column_format="l" + "c" * len(df.columns), caption=latex_escape(caption), label=label)
