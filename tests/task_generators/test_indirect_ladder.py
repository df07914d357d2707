"""Issue 22: indirect indexing's size ladder (the alphabet knob ``n_letters``, the rungs ``task.rung`` set through
``${ladder:…}``) and the paper's data regime, a fixed training set of ``data.train_size`` examples."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from omegaconf import OmegaConf

import tasks
import tasks.indirect_indexing as ii
from conftest import ROOT, TINY, train_here
from ropelab.experiments import calibrate, extrapolate
from ropelab.core.build import check_config
from ropelab.core.config import compose
from ropelab.core.data import TRAIN_SET_CHUNK, FixedTrainSet, TaskDataModule, compact_dtype, draw, draw_train_set
from ropelab.core.errors import ConfigError
from ropelab.core.schema import resolved
from ropelab.analysis.guess import context_guess_accuracy, guess_accuracy
from tasks.base import IGNORE

DOC_RUNG = re.compile(r"^\s+rung (\d)\s+len (\d+)–(\d+),\s+shift ±(\d+),\s+(\d+) letters.*OOD (\d+)–(\d+)\s+(\S.*)$")


def first_example(task, seed=0):
    """The first of ``sample_grouped(default_rng(seed), 4)`` as the paper writes it."""
    x, y, _ = task.sample_grouped(np.random.default_rng(seed), 4)
    answer = np.flatnonzero(y[0] != IGNORE)[0]
    return task.text(list(x[0][: answer + 1]) + [y[0][answer]])


def documented_rungs():
    return {int(m[1]): m.groups()[1:] for line in ii.__doc__.splitlines() if (m := DOC_RUNG.match(line))}


def rung_task_config(rung, preset="pope_ladder"):
    """The task section a preset's job at ``rung`` trains (the ladder resolved)."""
    cfg = compose([f"experiment={preset}", f"task.rung={rung}", "pos=rope", "seed=0"])
    return OmegaConf.to_container(cfg.task, resolve=True)


# ---- the knobs and the rungs decode to their documented examples ---------------------------------------------


def test_every_rung_is_documented_and_decodes_to_its_example():
    documented = documented_rungs()
    assert set(documented) == set(ii.RUNGS)
    for rung, (lo, hi, shift, letters, ood_lo, ood_hi, example) in documented.items():
        sizes = ii.RUNGS[rung]
        assert [int(v) for v in (lo, hi, shift, letters, ood_lo, ood_hi)] == [
            sizes[k] for k in ("len_min", "len_max", "shift_max", "n_letters", "ood_len_min", "ood_len_max")]
        task_cfg = rung_task_config(rung)
        assert task_cfg["rung"] == rung and task_cfg["ood"] == {"len_min": sizes["ood_len_min"],
                                                               "len_max": sizes["ood_len_max"]}
        task, ood = tasks.build_with_ood(task_cfg)
        assert first_example(task) == example
        s, src, shift_, answer = re.match(r"^([A-Za-z]+), ([A-Za-z]), (-?\d+), ([A-Za-z])$", example).groups()
        assert s[s.index(src) + int(shift_)] == answer and len(set(s)) == len(s)
        assert set(s) <= set(ii.LETTERS[: sizes["n_letters"]])
        assert ood.vocab == task.vocab and ood.seq_len > task.seq_len
        _, _, g_in = task.sample_grouped(np.random.default_rng(1), 256)
        _, _, g_ood = ood.sample_grouped(np.random.default_rng(1), 256)
        assert g_ood.min() > g_in.max(), "no length bin mixes training and OOD strings"


def test_the_alphabet_knob_decodes_to_the_docstrings_example():
    task = tasks.build("indirect_indexing", len_min=5, len_max=10, shift_max=2, n_letters=13)
    assert "    JBLAGEFMCI, G, 1, E\n" in ii.__doc__ and first_example(task) == "JBLAGEFMCI, G, 1, E"
    assert '"JBLAGEFMCI, G, 1, E"' in (ROOT / "conf" / "task" / "indirect_indexing.yaml").read_text()
    letters = [t for t in task.vocab if t.isalpha() and len(t) == 1]
    assert "".join(letters) == "ABCDEFGHIJKLM", "the vocabulary holds the alphabet's letters only"
    x, y, _ = task.sample_grouped(np.random.default_rng(3), 2000)
    used = {task.vocab[i] for i in np.concatenate([x.ravel(), y[y != IGNORE]]) if task.vocab[i].isalpha()}
    assert used == set("ABCDEFGHIJKLM")


def test_the_default_is_the_papers_task_as_before():
    """52 letters, 20–40, ±15: the draw of the code before the knobs (rung 4's example is the default's)."""
    task = tasks.build("indirect_indexing")
    assert task.n_letters == 52 and task.rung is None and task.seq_len == 51 and len(task.vocab) == 67
    assert first_example(task) == documented_rungs()[4][-1] == "JBSLAzuTeNsxQhnplXdqRigPGmoEWtVbUacfF, T, -6, B"


@pytest.mark.parametrize("params, key", [
    (dict(n_letters=1), "task.n_letters"),
    (dict(n_letters=53), "task.n_letters"),
    (dict(n_letters=True), "task.n_letters"),
    (dict(n_letters="13"), "task.n_letters"),
    (dict(n_letters=30), "task.len_max"),                       # 20–40 letters, each once, from 30
    (dict(len_min=5, len_max=14, shift_max=2, n_letters=13), "task.len_max"),
    (dict(rung=7), "task.rung"),
    (dict(rung=2), "task.rung"),                                # the paper's sizes are not rung 2's
    (dict(group_by="depth"), "task.group_by"),
])
def test_bad_knobs_are_one_line_naming_the_key(params, key):
    with pytest.raises(ConfigError) as err:
        tasks.build("indirect_indexing", **params)
    assert str(err.value).startswith(f"{key}=") and "\n" not in str(err.value)


def test_grouping_by_shift_keys_each_example_by_the_shift_it_writes():
    by_length = tasks.build("indirect_indexing", **{k: ii.RUNGS[2][k] for k in ("len_min", "len_max", "shift_max", "n_letters")})
    by_shift = tasks.build("indirect_indexing", group_by="shift",
                           **{k: ii.RUNGS[2][k] for k in ("len_min", "len_max", "shift_max", "n_letters")})
    x, y, groups = by_shift.sample_grouped(np.random.default_rng(3), 200)
    x0, y0, _ = by_length.sample_grouped(np.random.default_rng(3), 200)
    assert (x == x0).all() and (y == y0).all()          # the grouping changes only the key, not the draws
    assert by_shift.group_name == "shift" and by_length.group_name == "length"
    for row, group in zip(x, groups):
        written = by_shift.text(row).split(", ")[2]        # "JBLAGEFMCI, G, 1, " → "1"
        assert int(written) == group
    assert set(groups.tolist()) == set(range(-2, 3))


def test_a_bad_rung_through_the_ladder_is_one_line_naming_task_rung():
    for bad in ("task.rung=9", "task.rung=0"):
        with pytest.raises(ConfigError, match=r"^task\.rung=(9|0) is invalid: one of 1, 2, 3, 4"):
            check_config(compose(["experiment=pope_ladder", "pos=rope", "seed=0", bad]))


def test_the_rung_alone_sets_every_size_and_null_is_the_papers():
    def sizes(*overrides):
        task = resolved(compose(["task=indirect_indexing", "pos=rope", *overrides]))["task"]
        ood = task.pop("ood")
        return {**{k: task[k] for k in ii.RUNGS[1] if not k.startswith("ood")},
                "ood_len_min": ood["len_min"], "ood_len_max": ood["len_max"]}

    assert sizes() == ii.RUNGS[4]
    bare = tasks.build("indirect_indexing")
    assert {k: getattr(bare, k) for k in ("len_min", "len_max", "shift_max", "n_letters", "group_bin")} == \
        {k: ii.RUNGS[4][k] for k in ("len_min", "len_max", "shift_max", "n_letters", "group_bin")}
    for rung in ii.RUNGS:
        assert sizes(f"task.rung={rung}") == ii.RUNGS[rung]
    assert sizes("task.rung=2", "task.len_max=12")["len_max"] == 12   # a size set on its own wins


def test_the_guess_floor_of_a_rung_is_a_uniform_guess_among_the_strings_letters():
    for rung in (1, 2, 3):
        task = tasks.from_config(rung_task_config(rung))
        sizes = ii.RUNGS[rung]
        expected = np.mean([1 / n for n in range(sizes["len_min"], sizes["len_max"] + 1)])
        assert context_guess_accuracy(task, n=4000) == pytest.approx(expected, abs=0.006)
        assert guess_accuracy(task, n=4000) == pytest.approx(expected, abs=0.006), "better than the letter's mode"
    tiny = tasks.build("indirect_indexing", len_min=4, len_max=4, shift_max=1, n_letters=4, group_bin=1)
    assert context_guess_accuracy(tiny, n=500) == 0.25, "every string is the whole alphabet"


def test_the_copy_shortcut_is_what_copying_the_source_letter_scores_on_drawn_examples(tmp_path):
    """Task.shortcuts' closed form against the strategy itself on 20,000 drawn examples (paper format): answer the
    source letter on a written shift of 0, else a uniform guess among the string's letters."""
    for rung, documented in ((1, 0.451), (2, 0.313)):
        task = tasks.from_config(rung_task_config(rung))
        inputs, targets, _ = task.sample_grouped(np.random.default_rng(5), 20000)
        hits = []
        for x, y in zip(inputs, targets):
            answer = np.flatnonzero(y != IGNORE)[0]
            text = task.text(x[: answer + 1])              # "JBAGEFCI, A, 1, " (the answer left out)
            string, source, shift = text.split(", ")[:3]
            hits.append(float(y[answer] == task.token_id[source]) if shift == "0" else 1 / len(string))
        level = task.shortcuts()["copy"]
        assert round(level, 3) == documented                # the numbers README quotes
        assert np.mean(hits) == pytest.approx(level, abs=0.01)
    assert tasks.build("mod_arith").shortcuts() == {}, "a task names no shortcut unless it defines one"
    from ropelab.analysis.guess import shortcut_levels
    assert shortcut_levels([{"task": rung_task_config(2)}]) == {"indirect_indexing rung 2": {"copy": level}}


def test_extrapolation_scales_a_rungs_lengths_and_refuses_past_its_alphabet():
    task_cfg = rung_task_config(3)  # 10–20 letters of 26
    longer = extrapolate.scaled_task_config(task_cfg, 1.25)
    assert (longer["len_min"], longer["len_max"], longer["n_letters"], longer["rung"]) == (13, 25, 26, 3)
    assert extrapolate.build_task(longer).len_max == 25
    with pytest.raises(ConfigError, match=r"^task\.len_max=40 is invalid: .*task\.n_letters \(26\)"):
        extrapolate.build_task(extrapolate.scaled_task_config(task_cfg, 2))


def test_calibration_reads_the_rung_as_the_size(tmp_path):
    """Records of two rungs: the size axis is task.rung (the sizes follow it), each with its own floor."""
    records = tmp_path / "records"
    for rung in (1, 2):
        for seed in (0, 1):
            folder = records / f"seed={seed},task.rung={rung},trainer.max_steps=100"
            folder.mkdir(parents=True)
            config = {"task": rung_task_config(rung, "calibrate_indirect_indexing"), "pos": {"name": "rope"},
                      "seed": seed, "trainer": {"max_steps": 100}, "record": "x"}
            (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # as train.py: in order
            (folder / "summary.json").write_text(json.dumps({"status": "completed", "steps": 100, "seed": seed,
                                                             "final": {"val/acc": 0.5}}))
            pd.DataFrame({"step": [49, 99], "val/acc": [0.2, 0.5]}).to_csv(folder / "metrics.csv", index=False)
    _, runs, sizes = calibrate.load(records, calibrate.Rule())
    assert sizes == ["task.rung"]
    floors = runs.groupby("task.rung")["floor"].first()
    assert floors["1"] == pytest.approx(0.177, abs=0.01) and floors["2"] == pytest.approx(0.141, abs=0.01)


# ---- a fixed training set: N examples, epochs over it -----------------------------------------------------------


def paper_task():
    return tasks.build("indirect_indexing")


def test_the_fixed_set_repeats_exactly_its_n_examples_every_epoch_in_a_new_order():
    task, n, batch = paper_task(), 50, 8  # batches straddle epochs: 50 is no multiple of 8
    inputs, targets = draw_train_set(task, 0, n)
    assert len({row.tobytes() for row in inputs}) == n, "N distinct examples (the paper's sizes never repeat)"
    stream = iter(FixedTrainSet(inputs, targets, seed=0, batch_size=batch))
    rows = torch.cat([next(stream)[0] for _ in range(-(-3 * n // batch))]).numpy()
    epochs = [rows[e * n: (e + 1) * n] for e in range(3)]
    for epoch in epochs:
        assert sorted(r.tobytes() for r in epoch) == sorted(r.tobytes() for r in inputs.astype(np.int64)), \
            "each epoch is the set, each example once"
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2]), "reshuffled"


def test_the_fixed_set_resumes_exactly_and_depends_on_the_seed():
    inputs, targets = draw_train_set(paper_task(), 0, 30)
    whole = FixedTrainSet(inputs, targets, seed=0, batch_size=7)
    straight = [next(it) for it in [whole.indices(0)] for _ in range(20)]
    for start in (0, 3, 4, 9, 13):  # steps within an epoch, at its end and across several
        resumed = whole.indices(start)
        assert all(np.array_equal(next(resumed), straight[s]) for s in range(start, 20))
    other = FixedTrainSet(inputs, targets, seed=1, batch_size=7)
    assert not np.array_equal(other.epoch_order(0), whole.epoch_order(0))
    a, b = iter(FixedTrainSet(inputs, targets, 0, 7, start_step=5)), iter(FixedTrainSet(inputs, targets, 0, 7))
    for _ in range(5):
        next(b)
    x, y = next(a)
    assert x.dtype == torch.int64 and torch.equal(x, next(b)[0]) and (y == IGNORE).any()


def test_the_fixed_set_is_drawn_in_seeded_chunks_compact_and_apart_from_the_other_splits():
    task = paper_task()
    inputs, targets = draw_train_set(task, 3, TRAIN_SET_CHUNK + 5)
    assert inputs.dtype == np.int8 and compact_dtype(len(task.vocab)) is np.int8 and compact_dtype(200) is np.int16
    first, second = draw(task, 3, "train", TRAIN_SET_CHUNK, index=0), draw(task, 3, "train", TRAIN_SET_CHUNK, index=1)
    assert np.array_equal(inputs, np.concatenate([first[0], second[0][:5]]))
    assert np.array_equal(targets, np.concatenate([first[1], second[1][:5]])), "IGNORE (−100) survives int8"
    smaller = draw_train_set(task, 3, 100)[0]
    assert np.array_equal(smaller, inputs[:100]), "a smaller set is a prefix of a larger one"
    dm = TaskDataModule(task, task, seed=3, val_size=64, test_size=8, ood_size=8, eval_batch_size=64,
                        train_size=TRAIN_SET_CHUNK + 5)
    val = {row.tobytes() for row in dm.fixed_set("val").tensors[0].numpy()}
    assert not val & {row.tobytes() for row in inputs.astype(np.int64)}
    assert dm.train_set()[0] is dm.train_set()[0], "drawn once"


@pytest.mark.parametrize("value", [0, -5, True, 2.5, "1M"])
def test_a_bad_train_size_is_one_line_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^data\.train_size=.* is invalid: an integer >= 1 or null$"):
        check_config(compose([f"data.train_size={value}"]))
    with pytest.raises(ConfigError, match=r"^data\.train_size="):
        TaskDataModule(paper_task(), paper_task(), seed=0, train_size=value)


def test_a_run_trains_on_a_fixed_set(tmp_path):
    summary = train_here(*TINY, "task=indirect_indexing", "task.rung=1", "task.len_min=4", "task.len_max=8",
                         "task.shift_max=1", "task.n_letters=10", "task.ood.len_min=9", "task.ood.len_max=10",
                         "data.train_size=10", "trainer.max_steps=6", "trainer.val_every=3", run_dir=tmp_path / "r")
    assert summary["status"] == "completed" and summary["steps"] == 6
    saved = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert saved["data"]["train_size"] == 10 and saved["task"]["rung"] == 1


def test_a_ladder_reports_columns_by_scheme_and_rung(tmp_path):
    """pope_ladder's records: the rung's sizes follow task.rung, so a column is 'rope rung=1', not its sizes."""
    from ropelab.analysis.report.sweep import Sweep
    from ropelab.analysis.stats import Landmarks

    for pos in ("rope", "pope"):
        for rung in (1, 2):
            folder = tmp_path / f"pos={pos},seed=0,task.rung={rung},task=indirect_indexing"
            folder.mkdir()
            cfg = compose(["experiment=pope_ladder", f"pos={pos}", f"task.rung={rung}", "seed=0"])
            (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
            (folder / "summary.json").write_text(json.dumps({"status": "completed", "steps": 10,
                                                             "final": {"val/acc": 0.5}}))
            pd.DataFrame({"step": [9], "train/loss": [1.0], "val/acc": [0.5]}).to_csv(folder / "metrics.csv",
                                                                                     index=False)
    sweep = Sweep(tmp_path, Landmarks())
    assert sweep.col_keys == ["pos.name", "task.rung"]
    assert sweep.columns() == ["rope rung=1", "rope rung=2", "pope rung=1", "pope rung=2"]
