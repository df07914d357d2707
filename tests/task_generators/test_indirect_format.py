"""Issue 11: indirect_indexing in the PoPE paper's appendix-B.1 character format (the default) and the compact
one, PoPE's δ initialisation by config, and the pope_indirect preset's budget (the paper's 1M examples)."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

import tasks
from tasks.base import IGNORE

ROOT = Path(__file__).resolve().parents[2]
PAPER_EXAMPLE = "QEOHoUbKfeSrMVNlCzXu, z, -3, N"
B1 = re.compile(r"^([A-Za-z]+), ([A-Za-z]), (-?\d+), ([A-Za-z])$")


def examples(task, seed, n=64):
    """(text of the whole example, answer position, inputs, targets) per example."""
    x, y, g = task.sample_grouped(np.random.default_rng(seed), n)
    out = []
    for row, tgt in zip(x, y):
        ans = np.flatnonzero(tgt != IGNORE)
        assert len(ans) == 1, "loss on the answer token only"
        out.append((task.text(list(row[: ans[0] + 1]) + [tgt[ans[0]]]), ans[0], row, tgt))
    return out, g


def parse(text):
    m = B1.match(text)
    assert m, f"not the B.1 form: {text!r}"
    s, src, shift, answer = m.groups()
    return s, src, int(shift), answer


def test_the_paper_example_encodes_to_characters_and_decodes_back():
    task = tasks.build("indirect_indexing")
    assert task.format == "paper"
    ids = task.encode(PAPER_EXAMPLE)
    toks = [task.vocab[i] for i in ids]
    assert toks[0] == "<bos>" and len(ids) == 1 + len(PAPER_EXAMPLE), "one token per character"
    assert toks[-10:] == [",", " ", "z", ",", " ", "-", "3", ",", " ", "N"], "shift as '-' '3', separators ', '"
    assert task.text(ids) == PAPER_EXAMPLE
    s, src, shift, answer = parse(task.text(ids))
    assert s[s.index(src) + shift] == answer == "N"  # z is at 17, three to its left: N


def test_the_paper_vocabulary_is_characters_only():
    task = tasks.build("indirect_indexing")
    assert all(len(t) == 1 for t in task.vocab[2:]) and {",", " ", "-"} <= set(task.vocab)
    assert set("0123456789") <= set(task.vocab) and "-3" not in task.vocab and "+" not in task.vocab
    ood = tasks.build("indirect_indexing", len_min=41, len_max=52)
    assert ood.vocab == task.vocab


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 15).flatmap(lambda m: st.tuples(st.just(m), st.integers(m + 1, 52))), st.integers(0, 2**32 - 1))
def test_generated_examples_decode_to_the_b1_form_with_the_right_answer(bounds, seed):
    shift_max, len_min = bounds
    task = tasks.build("indirect_indexing", shift_max=shift_max, len_min=len_min, len_max=52, group_bin=1)
    batch, groups = examples(task, seed)
    for (text, pos, row, tgt), length in zip(batch, groups):
        s, src, shift, answer = parse(text)
        assert len(s) == len(set(s)) == length and len_min <= length <= 52
        assert abs(shift) <= shift_max and src in s
        assert 0 <= s.index(src) + shift < len(s) and s[s.index(src) + shift] == answer
        assert row[pos] == task.token_id[" "] and np.all(row[pos + 1:] == 0), "the answer follows ', '"
        assert task.encode(text)[:-1] == list(row[: pos + 1]), "text and tokens agree"
        assert pos + 1 <= task.seq_len


def test_shifts_reach_both_ends_of_the_string():
    task = tasks.build("indirect_indexing")
    batch, _ = examples(task, 3, n=20000)
    ends = {"first": 0, "last": 0}
    shifts = set()
    for text, *_ in batch:
        s, src, shift, answer = parse(text)
        target = s.index(src) + shift
        assert 0 <= target < len(s) and s[target] == answer
        shifts.add(shift)
        if target == 0 and shift == -15:  # the answer is the first letter, fifteen to the left of the source
            ends["first"] += 1
        if target == len(s) - 1 and shift == 15:  # the last letter, fifteen to the right
            ends["last"] += 1
    assert shifts == set(range(-15, 16))
    assert ends["first"] > 0 and ends["last"] > 0, ends


def test_the_longest_example_fits_seq_len_exactly():
    task = tasks.build("indirect_indexing", len_min=40, len_max=40)
    x, y = task.sample(np.random.default_rng(0), 4000)
    lengths = (x != 0).sum(axis=1)
    assert lengths.max() == task.seq_len  # 40 letters and a shift of -15 / -1x fill every input position
    assert task.seq_len == 51 and tasks.build("indirect_indexing", format="compact").seq_len == 46


def test_both_formats_draw_the_same_examples():
    paper, compact = tasks.build("indirect_indexing"), tasks.build("indirect_indexing", format="compact")
    a, ga = examples(paper, 11)
    b, gb = examples(compact, 11)
    assert np.array_equal(ga, gb)
    for (tp, *_), (tc, _, row, tgt) in zip(a, b):
        toks = tc.split(" ")
        assert [compact.vocab[t] for t in row if t > 1][-6:] == toks[-7:-1]
        assert "".join(toks[:-6]) + ", " + ", ".join(toks[-5::2]) == tp  # same string, source, shift, answer


def test_the_compact_format_still_works():
    task = tasks.build("indirect_indexing", format="compact")
    assert "-15" in task.vocab and " " not in task.vocab
    batch, _ = examples(task, 5, n=500)
    for text, pos, row, tgt in batch:
        toks = text.split(" ")
        letters, (c1, src, c2, shift, c3, answer) = toks[:-6], toks[-6:]
        assert c1 == c2 == c3 == "," and src in letters
        assert letters[letters.index(src) + int(shift)] == answer
        assert tgt[pos] == task.token_id[answer] and (tgt != IGNORE).sum() == 1


def test_a_bad_format_is_one_line():
    with pytest.raises(tasks.ConfigError, match=r"task.format='chars' is invalid: one of paper, compact"):
        tasks.build("indirect_indexing", format="chars")


# ---- PoPE's δ initialisation, chosen by config ---------------------------------------------------------------


@pytest.mark.parametrize("delta_init", ["zero", "uniform"])
def test_pope_delta_init_by_config(delta_init):
    from ropelab.core.build import build
    from ropelab.core.config import compose

    assert OmegaConf.load(ROOT / "conf/pos/pope.yaml").delta_init == "zero", "the default: zero helps length " \
        "generalisation (paper)"
    cfg = compose(["task=indirect_indexing", "pos=pope", f"pos.delta_init={delta_init}", "model.d_model=32",
                   "model.n_layers=1", "model.n_heads=2", "model.mlp_hidden=64"])
    delta = build(cfg).model.pos.delta.detach()
    assert delta.shape == (2, 16)
    if delta_init == "zero":
        assert torch_all_zero(delta)
    else:
        assert float(delta.min()) >= -2 * math.pi and float(delta.max()) <= 0 and float(delta.std()) > 1


def torch_all_zero(t):
    return bool((t == 0).all())


# ---- the preset: the paper's budget ---------------------------------------------------------------------------


def test_the_pope_preset_trains_on_the_papers_1m_examples_with_curves_and_10k_sets():
    cfg = OmegaConf.load(ROOT / "conf/experiment/pope_indirect.yaml")
    examples_seen = cfg.trainer.max_steps * cfg.data.batch_size
    assert 1_000_000 <= examples_seen < 1_000_000 + cfg.data.batch_size, "the paper's 1M training examples"
    assert cfg.trainer.val_every * cfg.data.batch_size <= 50_000, "validation at least every 50k examples"
    assert cfg.data.test_size >= 10_000 and cfg.data.ood_size >= 10_000
    # the standard error of an accuracy is at most 1 point on validation: sqrt(0.25 / n) <= 0.01
    assert cfg.data.val_size >= 2_500
