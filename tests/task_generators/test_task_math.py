"""The tasks against their definitions, with no optional extra (issue 27: the survivors of mutation testing,
results/mutation/): the papers' defaults, exact sequence lengths, decoding, each by a known value or a hand-computed
example."""

import numpy as np
import pytest

from tasks.base import IGNORE


# --- tasks: the papers' defaults, exact sequence lengths, decoding ----------------------------------

PAPER_DEFAULTS = {  # each task's documented defaults (its module docstring; the papers' settings)
    "assoc_recall": dict(n_keys=64, n_values=64, pairs_min=4, pairs_max=16, n_queries=4),
    "bio_rotation": dict(motif_len=8, gap_min=100, gap_max=200, noise="lower", group_bin=25),
    "dyck3": dict(depth_min=1, depth_max=8, len_min=8, len_max=48),
    "global_counting": dict(len_min=16, len_max=64, n_symbols=4, max_count=128, group_bin=8),
    "indirect_indexing": dict(len_min=20, len_max=40, shift_max=15, group_bin=5, format="paper", n_letters=52),
    "mean_pooling": dict(len_min=8, len_max=64, n_values=10, dist="mixed", group_bin=8),
    "mod_arith": dict(modulus=7, terms_min=3, terms_max=3, operand_min=0, operand_max=6),
    "variable_tracking": dict(chain_min=1, chain_max=4, n_distractors=3, n_vars=52, n_values=10, format="equals"),
}


@pytest.mark.parametrize("name", sorted(PAPER_DEFAULTS))
def test_a_bare_task_has_the_papers_defaults(name):
    import tasks

    task = tasks.build(name)
    assert {k: getattr(task, k) for k in PAPER_DEFAULTS[name]} == PAPER_DEFAULTS[name]


# options that fix every example's length: the longest sequence then fills seq_len exactly
FIXED_LENGTH = {"bio_rotation": dict(gap_min=20, gap_max=20), "assoc_recall": dict(pairs_min=8, pairs_max=8),
                "global_counting": dict(len_min=16, len_max=16), "mod_arith": dict(terms_min=4, terms_max=4)}


@pytest.mark.parametrize("name", sorted(FIXED_LENGTH))
def test_every_example_fills_seq_len_exactly_when_lengths_are_fixed(name):
    import tasks

    task = tasks.build(name, **FIXED_LENGTH[name])
    inputs, targets = task.sample(np.random.default_rng(0), 16)
    assert inputs.shape == targets.shape == (16, task.seq_len)
    # the last position predicts the last answer token (bio_rotation keeps one pad column past it: its seq_len is
    # 1 + 2 · motif_len + gap_max + 1, one more than its inputs use)
    last = task.seq_len - (2 if name == "bio_rotation" else 1)
    assert (targets[:, last] != IGNORE).all() and (targets[:, last + 1:] == IGNORE).all()
    used = set(inputs.ravel().tolist()) | set(targets[targets != IGNORE].tolist())
    assert max(used) < len(task.vocab)


def test_bio_rotation_draws_every_base_and_every_noise_letter():
    import tasks

    task = tasks.build("bio_rotation", gap_min=30, gap_max=30)
    inputs, _ = task.sample(np.random.default_rng(0), 32)
    motif, noise = inputs[:, 1:9], inputs[:, 9:39]
    assert set(np.unique(motif).tolist()) == {2, 3, 4, 5}   # A C G T
    assert set(np.unique(noise).tolist()) == {6, 7, 8, 9}   # a c g t (noise: lower)
    same = tasks.build("bio_rotation", gap_min=30, gap_max=30, noise="same").sample(np.random.default_rng(0), 32)[0]
    assert set(np.unique(same[:, 9:39]).tolist()) == {2, 3, 4, 5}


def test_mod_arith_numbers_cover_operands_and_residues():
    import tasks

    assert tasks.build("mod_arith").n_numbers == 7  # 0..6: operands and residues mod 7
    assert tasks.build("mod_arith", modulus=5, operand_max=9).n_numbers == 10
    assert tasks.build("mod_arith", modulus=12, operand_max=3).n_numbers == 12
    assert tasks.build("global_counting", len_min=2, len_max=4, max_count=5).vocab[-1] == "#5"


def test_decode_and_decode_example_by_hand():
    import tasks

    task = tasks.build("mod_arith")
    vocab = task.vocab
    ids = [vocab.index(t) for t in ("<bos>", "3", "+", "4", "+", "5", "=", "5")]
    inputs = np.array(ids[:-1] + [0, 0])  # right-padded
    targets = np.full(len(inputs), IGNORE)
    targets[6] = ids[-1]
    assert task.decode(ids) == "<bos> 3 + 4 + 5 = 5" and task.decode([0, ids[1], IGNORE], sep="") == "3"
    assert task.decode([ids[1]], sep="") == "3"
    assert task.decode_example(inputs, targets) == ("<bos> 3 + 4 + 5 = 5", "5")
    assert task.decode_example(inputs, np.full(len(inputs), IGNORE)) == ("<bos> 3 + 4 + 5 =", "")


def test_pack_refuses_a_sequence_longer_than_seq_len_plus_one():
    from tasks.base import pack

    inputs, targets = pack([[1, 2, 3]], [2], seq_len=2)  # fits exactly: inputs drop the last token
    assert inputs.tolist() == [[1, 2]] and targets.tolist() == [[IGNORE, 3]]
    with pytest.raises(ValueError, match="does not fit"):
        pack([[1, 2, 3, 4]], [2], seq_len=2)
