"""The issue-3 task generators: answers checked against reference solutions, shapes, splits, configs."""

import itertools
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

import ropelab.core.schema  # noqa: F401  (registers ${ladder:…}, which a task yaml resolves; alone, nothing else does)
import tasks
from conftest import HANG_GUARD_S
from tasks.base import IGNORE

ROOT = Path(__file__).resolve().parents[2]
PROPS = settings(max_examples=25, deadline=None)
OPEN, CLOSE = "([{", ")]}"


def task_cfg(name):
    """conf/task/<name>.yaml as a run gets it: named by its file."""
    return {"name": name, **OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "task" / f"{name}.yaml"), resolve=True)}


def unpack(task, x, y):
    """(full token strings, indices of the answer tokens in them); checks padding and target/input agreement."""
    ans = np.flatnonzero(y != IGNORE)
    assert len(ans), "every example has an answer"
    last = ans[-1]
    assert np.all(x[last + 1:] == 0), "only padding after the answer"
    assert np.all(x[: last + 1] != 0), "no padding inside the sequence"
    inside = ans[ans < last]
    assert np.array_equal(y[inside], x[inside + 1]), "targets are the next inputs"
    seq = list(x[: last + 1]) + [y[last]]
    return [task.vocab[t] for t in seq], list(ans + 1)


def batch(task, seed, n=16):
    x, y, g = task.sample_grouped(np.random.default_rng(seed), n)
    assert x.shape == y.shape == (n, task.seq_len) and x.dtype == y.dtype == np.int64
    assert g.shape == (n,) and np.issubdtype(g.dtype, np.integer)
    return x, y, g


# ---- dyck3 ----------------------------------------------------------------------------------------------------


def balanced(tokens):
    stack = []
    for t in tokens:
        if t in OPEN:
            stack.append(t)
        elif not stack or OPEN.index(stack.pop()) != CLOSE.index(t):
            return False
    return not stack


@st.composite
def dyck_params(draw):
    depth_min = draw(st.integers(1, 5))
    depth_max = depth_min + draw(st.integers(0, 4))
    len_min = draw(st.integers(1, 20))
    len_max = max(len_min + 1, depth_max) + draw(st.integers(0, 20))
    return dict(depth_min=depth_min, depth_max=depth_max, len_min=len_min, len_max=len_max)


@PROPS
@given(dyck_params(), st.integers(0, 2**32 - 1))
def test_dyck3_answer_is_the_unique_closure(params, seed):
    task = tasks.build("dyck3", **params)
    for x, y, depth in zip(*batch(task, seed)):
        toks, ans = unpack(task, x, y)
        assert toks[0] == "<bos>" and toks[ans[0] - 1] == ">"
        prefix, answer = toks[1: ans[0] - 1], toks[ans[0]:]
        assert ans == list(range(ans[0], len(toks))) and len(answer) == depth
        assert params["depth_min"] <= depth <= params["depth_max"]
        assert max(params["len_min"], depth) <= len(prefix) <= params["len_max"]
        stack, deepest = [], 0  # reference stack: the prefix is a valid prefix, never deeper than depth_max
        for t in prefix:
            if t in OPEN:
                stack.append(t)
                deepest = max(deepest, len(stack))
            else:
                assert stack and CLOSE.index(t) == OPEN.index(stack.pop())
        assert len(stack) == depth and deepest <= params["depth_max"]
        assert answer == [CLOSE[OPEN.index(t)] for t in reversed(stack)]
        assert balanced(prefix + answer)
        if depth <= 4:  # brute force: exactly one string of `depth` closers balances the prefix
            closers = [list(c) for c in itertools.product(CLOSE, repeat=depth) if balanced(prefix + list(c))]
            assert closers == [answer]


def test_dyck3_uses_every_bracket_type_and_depth():
    task = tasks.build("dyck3")
    x, y, g = batch(task, 0, n=512)
    assert set(g) == set(range(1, 9))
    assert {task.vocab[t] for t in np.unique(x)} >= set(OPEN + CLOSE)


# ---- mod_arith ------------------------------------------------------------------------------------------------


@st.composite
def mod_params(draw):
    terms_min = draw(st.integers(1, 4))
    operand_min = draw(st.integers(0, 5))
    return dict(modulus=draw(st.integers(2, 20)), terms_min=terms_min, terms_max=terms_min + draw(st.integers(0, 3)),
                operand_min=operand_min, operand_max=operand_min + draw(st.integers(0, 15)))


@PROPS
@given(mod_params(), st.integers(0, 2**32 - 1))
def test_mod_arith_sums_are_correct(params, seed):
    task = tasks.build("mod_arith", **params)
    for x, y, terms in zip(*batch(task, seed)):
        toks, ans = unpack(task, x, y)
        assert ans == [len(toks) - 1] and toks[0] == "<bos>" and toks[-2] == "="
        body = toks[1:-2]
        operands = [int(t) for t in body[::2]]
        assert all(t == "+" for t in body[1::2])
        assert len(operands) == terms and params["terms_min"] <= terms <= params["terms_max"]
        assert all(params["operand_min"] <= v <= params["operand_max"] for v in operands)
        assert int(toks[-1]) == sum(operands) % params["modulus"]


def test_mod_arith_default_is_the_papers_task():
    task = tasks.build("mod_arith")
    x, y, g = batch(task, 3, n=64)
    assert set(g) == {3} and task.seq_len == 7
    assert task.decode_example(x[0], y[0])[0].count("+") == 2


# ---- indirect_indexing ----------------------------------------------------------------------------------------


@st.composite
def indirect_params(draw):
    shift_max = draw(st.integers(0, 15))
    len_min = draw(st.integers(shift_max + 1, 40))
    return dict(shift_max=shift_max, len_min=len_min, len_max=draw(st.integers(len_min, 52)), group_bin=1)


@PROPS
@given(indirect_params(), st.integers(0, 2**32 - 1))
def test_indirect_indexing_answers_are_correct(params, seed):  # the compact format (paper: test_indirect_format)
    task = tasks.build("indirect_indexing", format="compact", **params)
    for x, y, length in zip(*batch(task, seed)):
        toks, ans = unpack(task, x, y)
        assert ans == [len(toks) - 1] and toks[0] == "<bos>"
        letters, (c1, src, c2, shift, c3, answer) = toks[1:-6], toks[-6:]
        assert c1 == c2 == c3 == ","
        assert all(t.isalpha() and len(t) == 1 for t in letters) and len(set(letters)) == len(letters) == length
        assert params["len_min"] <= length <= params["len_max"]
        shift = int(shift)
        assert abs(shift) <= params["shift_max"] and src in letters
        target = letters.index(src) + shift
        assert 0 <= target < len(letters) and answer == letters[target]


def test_indirect_indexing_compact_format_shifts_and_groups():
    task = tasks.build("indirect_indexing", format="compact")
    assert task.vocab.count("-15") == task.vocab.count("15") == 1 and "16" not in task.vocab
    x, y, g = batch(task, 1, n=2000)
    shifts = [int(task.vocab[row[np.flatnonzero(row)[-2]]]) for row in x]  # the token before the last ","
    assert set(shifts) == set(range(-15, 16))  # 0 included, as in the paper
    assert set(g) == {20, 25, 30, 35, 40}  # bins labelled by their longest length: 25 = lengths 21–25
    lengths = [np.flatnonzero(row)[-1] - 5 for row in x]  # <bos> + letters + ", src , shift ,"
    assert all(-(-n // 5) * 5 == b for n, b in zip(lengths, g))


# ---- assoc_recall ---------------------------------------------------------------------------------------------


@st.composite
def recall_params(draw):
    n_keys = draw(st.integers(1, 40))
    pairs_min = draw(st.integers(1, n_keys))
    return dict(n_keys=n_keys, n_values=draw(st.integers(1, 40)), pairs_min=pairs_min,
                pairs_max=draw(st.integers(pairs_min, n_keys)), n_queries=draw(st.integers(1, pairs_min)))


@PROPS
@given(recall_params(), st.integers(0, 2**32 - 1))
def test_assoc_recall_answers_are_the_stored_values(params, seed):
    task = tasks.build("assoc_recall", **params)
    q = params["n_queries"]
    for x, y, pairs in zip(*batch(task, seed)):
        toks, ans = unpack(task, x, y)
        assert toks[0] == "<bos>" and toks[-2 * q - 1] == ">"
        body, queries = toks[1: -2 * q - 1], toks[-2 * q:]
        keys, values = body[::2], body[1::2]
        assert len(keys) == len(values) == pairs and params["pairs_min"] <= pairs <= params["pairs_max"]
        assert all(k[0] == "k" for k in keys) and all(v[0] == "v" for v in values) and len(set(keys)) == len(keys)
        assert all(int(k[1:]) < params["n_keys"] for k in keys) and all(int(v[1:]) < params["n_values"] for v in values)
        table = dict(zip(keys, values))
        asked = queries[::2]
        assert len(set(asked)) == q and all(k in table for k in asked)
        assert queries[1::2] == [table[k] for k in asked]
        assert ans == list(range(len(toks) - 2 * q + 1, len(toks), 2))  # loss on the values only


# ---- variable_tracking ----------------------------------------------------------------------------------------


@st.composite
def tracking_params(draw):
    chain_min = draw(st.integers(1, 4))
    chain_max = chain_min + draw(st.integers(0, 3))
    n_distractors = draw(st.integers(0, 4))
    chains = 1 + n_distractors
    return dict(chain_min=chain_min, chain_max=chain_max, n_distractors=n_distractors,
                n_vars=draw(st.integers(chains * chain_max, 52)), n_values=draw(st.integers(chains, 12)))


@PROPS
@given(tracking_params(), st.integers(0, 2**32 - 1))
def test_variable_tracking_answers_follow_the_chain(params, seed):
    task = tasks.build("variable_tracking", **params)
    for x, y, chain in zip(*batch(task, seed)):
        toks, ans = unpack(task, x, y)
        assert ans == [len(toks) - 1] and toks[0] == "<bos>"
        body, (qmark, var, eq, answer) = toks[1:-4], toks[-4:]
        assert qmark == "?" and eq == "=" and len(body) % 4 == 0
        value_of, hops, chain_values = {}, {}, []
        for name, e, source, comma in zip(*(body[i::4] for i in range(4))):
            assert e == "=" and comma == "," and name not in value_of, "each variable is assigned once"
            if source.isdigit():
                value_of[name], hops[name] = source, 1
                chain_values.append(source)
            else:
                assert source in value_of, "a copy reads an already assigned variable"
                value_of[name], hops[name] = value_of[source], hops[source] + 1
        assert len(chain_values) == 1 + params["n_distractors"] and len(set(chain_values)) == len(chain_values)
        assert answer == value_of[var] and hops[var] == chain
        assert params["chain_min"] <= chain <= params["chain_max"]
        assert not any(source == var for source in body[2::4]), "the queried variable ends its chain"


def adjacent_chain_answer(tokens):
    """(the answer the chains give, the queried chain's hops) of an adjacent-format example, or an assertion."""
    assert tokens[0] == "<bos>" and tokens[-3] == "?"
    body, var, answer = tokens[1:-3], tokens[-2], tokens[-1]
    assert len(body) % 2 == 0 and "=" not in tokens and "," not in tokens
    value_of, hops = {}, {}
    for name, source in zip(body[::2], body[1::2]):
        assert not name.isdigit() and name not in value_of, "each variable is assigned once"
        value_of[name], hops[name] = (source, 1) if source.isdigit() else (value_of[source], hops[source] + 1)
    assert answer == value_of[var], "the answer is the queried chain's value"
    return answer, hops[var]


def test_variable_tracking_adjacent_docstring_example_follows_its_chain():
    doc = tasks.registry()["variable_tracking"].__module__
    text = next(line.strip() for line in sys.modules[doc].__doc__.splitlines() if line.strip().startswith("<bos> q 4"))
    assert adjacent_chain_answer(text.split()) == ("3", 3)


@PROPS
@given(tracking_params(), st.integers(0, 2**32 - 1))
def test_variable_tracking_adjacent_format_is_the_same_chains_without_separators(params, seed):
    equals = tasks.build("variable_tracking", **params)
    adjacent = tasks.build("variable_tracking", **params, format="adjacent")
    assert adjacent.seq_len == 1 + 2 * (1 + params["n_distractors"]) * params["chain_max"] + 2
    (xe, ye, ge), (xa, ya, ga) = batch(equals, seed), batch(adjacent, seed)
    assert np.array_equal(ge, ga), "the same draws: only the writing differs"
    for row_e, tgt_e, row_a, tgt_a, chain in zip(xe, ye, xa, ya, ga):
        toks_e, _ = unpack(equals, row_e, tgt_e)
        toks_a, ans = unpack(adjacent, row_a, tgt_a)
        assert ans == [len(toks_a) - 1]
        assert toks_a == [t for t in toks_e if t not in ("=", ",")]
        assert adjacent_chain_answer(toks_a) == (toks_e[-1], chain)


def test_variable_tracking_format_is_checked():
    with pytest.raises(tasks.ConfigError, match=r"task.format.*equals, adjacent"):
        tasks.build("variable_tracking", format="pairs")


# ---- global_counting ------------------------------------------------------------------------------------------


@st.composite
def counting_params(draw):
    len_min = draw(st.integers(1, 40))
    len_max = draw(st.integers(len_min, 80))
    return dict(len_min=len_min, len_max=len_max, n_symbols=draw(st.integers(1, 26)),
                max_count=draw(st.integers(len_max, 100)), group_bin=1)


@PROPS
@given(counting_params(), st.integers(0, 2**32 - 1))
def test_global_counting_counts_are_correct(params, seed):
    task = tasks.build("global_counting", **params)
    for x, y, length in zip(*batch(task, seed)):
        toks, ans = unpack(task, x, y)
        assert ans == [len(toks) - 1] and toks[0] == "<bos>"
        symbols, (qmark, queried, eq, answer) = toks[1:-4], toks[-4:]
        assert qmark == "?" and eq == "=" and len(symbols) == length
        assert params["len_min"] <= length <= params["len_max"]
        assert answer == f"#{symbols.count(queried)}"


def test_global_counting_vocab_covers_the_ood_counts():
    cfg = task_cfg("global_counting")
    task = tasks.build("global_counting", **{k: v for k, v in cfg.items() if k not in ("name", "ood")})
    assert f"#{cfg['ood']['len_max']}" in task.vocab
    with pytest.raises(tasks.ConfigError, match="task.max_count"):
        tasks.build("global_counting", len_max=200, max_count=128)


# ---- mean_pooling ---------------------------------------------------------------------------------------------


def test_mean_pooling_rounds_half_up():
    from tasks.mean_pooling import rounded_mean

    rows = [[0, 1, 0], [1, 2, 0], [0, 0, 1], [2, 3, 4], [9, 9, 8], [4, 5, 0]]
    lengths = [2, 2, 3, 3, 3, 2]
    assert list(rounded_mean(np.array(rows), np.array(lengths))) == [1, 2, 0, 3, 9, 5]


@PROPS
@given(st.integers(1, 40), st.integers(0, 40), st.integers(2, 20), st.sampled_from(["mixed", "uniform"]),
       st.integers(0, 2**32 - 1))
def test_mean_pooling_means_are_correct(len_min, extra, n_values, dist, seed):
    params = dict(len_min=len_min, len_max=len_min + extra, n_values=n_values, dist=dist, group_bin=1)
    task = tasks.build("mean_pooling", **params)
    for x, y, length in zip(*batch(task, seed)):
        toks, ans = unpack(task, x, y)
        assert ans == [len(toks) - 1] and toks[0] == "<bos>" and toks[-2] == "="
        numbers = [int(t) for t in toks[1:-2]]
        assert len(numbers) == length and len_min <= length <= len_min + extra
        assert all(0 <= v < n_values for v in numbers)
        exact = Fraction(sum(numbers), len(numbers)) + Fraction(1, 2)
        assert int(toks[-1]) == exact.numerator // exact.denominator


def test_mean_pooling_mixed_spreads_the_means():
    task = tasks.build("mean_pooling")
    x, y, _ = batch(task, 0, n=512)
    answers = y[y != IGNORE] - task.vocab.index("0")
    assert set(answers) == set(range(10))


# ---- code_lm --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def code_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("code")
    for i in range(60):
        folder = root / f"pkg{i % 3}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i}.py").write_text(f"# file {i}: é\n" + "".join(f"def f{i}_{j}(x):\n\treturn x + {j}\n"
                                                                        for j in range(20)), encoding="utf-8")
    (root / "notes.txt").write_text("not python " * 100)
    return root


def test_code_lm_splits_by_file_and_windows_come_from_one_file(code_root):
    from tasks.code_lm import file_split, list_files

    task = tasks.build("code_lm", window=32, val_percent=20, test_percent=20, root=str(code_root))
    files = list_files(str(code_root))
    assert len(files) == 60 and all(f.endswith(".py") for f in files)
    texts = {s: [(code_root / f).read_text(encoding="utf-8").replace("é", "\x00")
                 for f in files if file_split(f, 20, 20) == s] for s in ("train", "val", "test")}
    assert all(texts.values()), "every split has files"
    for split, own in [("train", "train"), ("val", "val"), ("test", "test"), ("ood", "test")]:
        sub = task.for_split(split)
        x, y, g = sub.sample_grouped(np.random.default_rng(0), 64)
        assert x.shape == y.shape == (64, 32) and x.dtype == y.dtype == np.int64 and set(g) == {32}
        assert np.array_equal(x[:, 1:], y[:, :-1]) and np.all(y != IGNORE) and np.all(y != 0) and np.all(x != 0)
        for row_x, row_y in zip(x, y):
            text = "".join("\x00" if t == 1 else task.vocab[t] for t in [*row_x, row_y[-1]])
            assert any(text in t for t in texts[own]), f"a {split} window lies inside one {own} file"
    assert task.for_split("ood").window == 32 and task.split == "train", "for_split returns a copy"


def test_code_lm_maps_non_ascii_to_one_unk_per_character():
    from tasks.code_lm import encode

    task = tasks.build("code_lm", root=str(ROOT / "tasks"))
    ids = encode("a\té\r\n~€".encode("utf-8"))
    assert [task.vocab[i] for i in ids] == ["a", "\t", "<unk>", "<unk>", "\n", "~", "<unk>"]
    assert len(task.vocab) == 99 and task.vocab[0] == "<pad>"


def test_code_lm_reads_torch_sources_without_importing_torch():
    script = ("import sys, numpy as np, tasks, tasks.code_lm as code_lm; task = tasks.build('code_lm'); "
              "assert not code_lm._CORPORA and code_lm.list_files.cache_info().currsize == 0, 'build is lazy'; "
              "x, y = task.for_split('val').sample(np.random.default_rng(0), 4); "
              "assert x.shape == (4, 128); [tasks.build(n) for n in tasks.names() if n != 'code_lm']; "
              "assert 'torch' not in sys.modules, 'tasks/ never imports torch'")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr


# ---- every task -----------------------------------------------------------------------------------------------

TASKS = tasks.names()  # every task there is: tasks/<name>.py + conf/task/<name>.yaml
OOD_GROUPS_TOUCH = {"bio_rotation"}  # its OOD gaps start where training's end; every other task's lie beyond


def from_yaml(name):
    task, ood = tasks.build_with_ood(task_cfg(name))
    if name == "code_lm":  # keep the test light: the validation files, not the 40 MB training split
        task = task.for_split("val")
    return task, ood.for_split("ood")


def test_a_task_is_a_module_and_a_yaml_of_one_name():
    assert {"bio_rotation", "dyck3", "mod_arith", "indirect_indexing", "assoc_recall", "variable_tracking",
            "global_counting", "mean_pooling", "code_lm"} <= set(TASKS)
    assert {p.stem for p in (ROOT / "conf" / "task").glob("*.yaml")} == set(TASKS)
    for name, cls in tasks.registry().items():
        yaml_cfg = OmegaConf.load(ROOT / "conf" / "task" / f"{name}.yaml")
        assert cls.name == name and "name" not in yaml_cfg and "ood" in yaml_cfg


@pytest.mark.parametrize("name", TASKS)
def test_builds_from_yaml_and_ood_is_longer_or_deeper(name):
    task, ood = from_yaml(name)
    assert ood.vocab == task.vocab, "one model serves both splits"
    assert task.vocab[0] == "<pad>" and len(set(task.vocab)) == len(task.vocab)
    assert ood.seq_len > task.seq_len
    _, _, g_in = batch(task, 0, n=128)
    _, _, g_ood = batch(ood, 0, n=128)
    assert g_ood.min() >= g_in.max() and g_ood.max() > g_in.max()
    if name not in OOD_GROUPS_TOUCH:  # training and OOD lengths / depths never share a group
        assert g_ood.min() > g_in.max()


@pytest.mark.parametrize("name", TASKS)
def test_targets_pads_and_seeds(name):
    task, ood = from_yaml(name)
    for t in (task, ood):
        x, y = t.sample(np.random.default_rng(7), 32)
        assert x.min() >= 0 and x.max() < len(t.vocab)
        answers = y[y != IGNORE]
        assert len(answers) and answers.min() >= 1 and answers.max() < len(t.vocab), "pad (0) is never a target"
        assert np.all(y[x == 0] == IGNORE), "no loss where the input is padding"
        again = t.sample(np.random.default_rng(7), 32)
        other = t.sample(np.random.default_rng(8), 32)
        assert np.array_equal(x, again[0]) and np.array_equal(y, again[1])
        assert not np.array_equal(x, other[0])


BAD = [
    ("dyck3", dict(depth_min=0), "task.depth_min"),
    ("dyck3", dict(depth_min=5, depth_max=3), "task.depth_max"),
    ("dyck3", dict(depth_max=8, len_max=6), "task.len_max"),
    ("dyck3", dict(len_min=10, len_max=10), "task.len_max"),
    ("mod_arith", dict(modulus=1), "task.modulus"),
    ("mod_arith", dict(modulus=True), "task.modulus"),
    ("mod_arith", dict(terms_min=0), "task.terms_min"),
    ("mod_arith", dict(terms_min=4, terms_max=3), "task.terms_max"),
    ("mod_arith", dict(operand_min=5, operand_max=2), "task.operand_max"),
    ("indirect_indexing", dict(len_max=53), "task.len_max"),
    ("indirect_indexing", dict(len_min=15), "task.len_min"),
    ("indirect_indexing", dict(shift_max=-1), "task.shift_max"),
    ("assoc_recall", dict(pairs_max=65), "task.pairs_max"),
    ("assoc_recall", dict(n_keys=8, pairs_min=4, pairs_max=9), "task.pairs_max"),
    ("assoc_recall", dict(n_queries=5), "task.n_queries"),
    ("assoc_recall", dict(n_values=0), "task.n_values"),
    ("variable_tracking", dict(chain_max=14), "task.chain_max"),
    ("variable_tracking", dict(n_distractors=10), "task.n_distractors"),
    ("variable_tracking", dict(n_vars=53), "task.n_vars"),
    ("global_counting", dict(len_max=129), "task.max_count"),
    ("global_counting", dict(n_symbols=27), "task.n_symbols"),
    ("global_counting", dict(len_min=0), "task.len_min"),
    ("mean_pooling", dict(dist="median"), "task.dist"),
    ("mean_pooling", dict(n_values=1), "task.n_values"),
    ("mean_pooling", dict(len_min=10, len_max=9), "task.len_max"),
    ("code_lm", dict(window=0), "task.window"),
    ("code_lm", dict(root="/no/such/dir"), "task.root"),
    ("code_lm", dict(val_percent=0), "task.val_percent"),
    ("code_lm", dict(val_percent=60, test_percent=50), "task.test_percent"),
]


@pytest.mark.parametrize("name, params, key", BAD)
def test_bad_parameters_name_the_key(name, params, key):
    with pytest.raises(tasks.ConfigError, match=key.replace(".", r"\.")) as err:
        tasks.build(name, **params)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", TASKS)
def test_unknown_key_is_a_config_error(name):
    with pytest.raises(tasks.ConfigError, match="valid keys"):
        tasks.build(name, no_such_key=1)
