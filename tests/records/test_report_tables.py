"""The report's tables as text (pandas' Markdown and LaTeX writers): cells as str shows them, a | that would end
a Markdown cell escaped, LaTeX's special characters and the cells' symbols escaped in body, header and caption."""

import pandas as pd

from ropelab.analysis.report import latex_table, markdown_table

CELLS = pd.DataFrame({"rope": ["0.391 ± 0.026 (n=3) ⚠ 1 failed", "a|b"], "γ=0.5 pos_x": ["—", 100.0]},
                     index=["bio_rotation", "mod_arith"])


def test_markdown_table_keeps_cells_as_they_are():
    assert markdown_table(CELLS).splitlines() == [
        "| task | rope | γ=0.5 pos_x |",
        "|--------------|--------------------------------|---------------|",
        "| bio_rotation | 0.391 ± 0.026 (n=3) ⚠ 1 failed | — |",
        "| mod_arith | a\\|b | 100.0 |"]
    assert markdown_table(CELLS, "claim").startswith("| claim | rope |")


def test_latex_table_escapes_body_header_and_caption():
    tex = latex_table(CELLS, "bifocal_table1: 50% of runs", "tab:bifocal_table1-val_loss")
    assert tex.splitlines() == [
        r"\begin{table}[t]", r"\centering", r"\caption{bifocal\_table1: 50\% of runs}", r"\small",
        r"\label{tab:bifocal_table1-val_loss}", r"\begin{tabular}{lcc}", r"\toprule",
        r"task & rope & $\gamma$=0.5 pos\_x \\", r"\midrule",
        r"bio\_rotation & 0.391 $\pm$ 0.026 (n=3) (!) 1 failed & -- \\",
        r"mod\_arith & a|b & 100.0 \\", r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    odd = latex_table(pd.DataFrame({"x": ["a & b #1 {c} \\ ~^$"]}, index=["t"]), "c", "l")
    assert r"t & a \& b \#1 \{c\} \textbackslash{} \textasciitilde{}\textasciicircum{}\$ \\" in odd


def test_pipe_table_writes_rows_unpadded_under_a_three_dash_rule():
    from ropelab.analysis.report.tables import pipe_table

    lines = pipe_table(["scheme", "1×", "2×"], [["rope", 1.5, ""], ["pope", "0.25 ± 0.01 (n=3)", "x"]], "lrr")
    assert lines == ["| scheme | 1× | 2× |", "|---|---:|---:|", "| rope | 1.5 |  |", "| pope | 0.25 ± 0.01 (n=3) | x |"]
    assert pipe_table(["a", "b"], [], "ll") == ["| a | b |", "|---|---|"]
    assert pipe_table(["n"], [["007"]], "r") == ["| n |", "|---:|", "| 007 |"], "a number-like cell stays as written"
