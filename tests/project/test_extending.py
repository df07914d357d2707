"""Extending by adding files (README, "Extending"): a scheme is src/ropelab/core/positional/<name>.py + conf/pos/<name>.yaml,
a task is tasks/<name>.py + conf/task/<name>.yaml, and nothing else names them."""

import json
import shutil
from pathlib import Path

from conftest import ROOT, TINY, run_train

COPIES = {  # new file: the file it copies, unchanged
    "src/ropelab/core/positional/rope_copy.py": "src/ropelab/core/positional/rope.py",
    "conf/pos/rope_copy.yaml": "conf/pos/rope.yaml",
    "tasks/mod_arith_copy.py": "tasks/mod_arith.py",
    "conf/task/mod_arith_copy.yaml": "conf/task/mod_arith.yaml",
}


def test_a_copied_scheme_and_task_train_under_their_new_names_with_no_other_edit(tmp_path):
    """The tree is copied, the four files are added as plain copies, and ``train.py task=mod_arith_copy
    pos=rope_copy`` (with momentum, which wraps any scheme) trains a step there, the copies found by presence."""
    tree = tmp_path / "tree"
    for part in ("src", "tasks", "conf"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "train.py", tree / "train.py")
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    for new, old in COPIES.items():
        shutil.copy(tree / old, tree / new)
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == sorted([*before, *map(Path, COPIES)])

    overrides = ["task=mod_arith_copy", "pos=rope_copy", "pos.momentum.gamma=0.5", *TINY, "trainer.max_steps=1",
                 "hydra.run.dir=run"]
    result = run_train(*overrides, cwd=tmp_path, root=tree, env={"PYTHONPATH": f"{tree / 'src'}:{tree}"})
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 1
    assert (summary["task"], summary["pos"]) == ("mod_arith_copy", "rope_copy")
