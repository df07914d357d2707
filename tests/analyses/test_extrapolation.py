"""Length extrapolation (issue 25): RoPE's scalings (pos.scaling) and ``ropelab extrapolate``.

The scalings are checked bit for bit: at factor 1 each is plain rope, and at other factors their frequencies,
attention factors and (YaRN) cos/sin tables are those of transformers' own rope-init functions. The evaluation is
checked on tiny runs trained here: at 1× it reproduces the run's own validation loss exactly.
"""

import math
import sys
import warnings

import pandas as pd
import pytest
import torch

from conftest import ROOT, TINY, train_here
from ropelab.core.errors import ConfigError
from ropelab.core.model import LlamaConfig, build_model
from ropelab.core.positional.rope import RoPE
from ropelab.experiments import extrapolate

HEAD_DIM, HEADS, L0 = 32, 4, 64


def _transformers():
    hf_dir = ROOT / ".venv" / "hf"  # make test installs the pinned hf extra here (tests/analyses/test_surgery.py)
    if hf_dir.is_dir() and str(hf_dir) not in sys.path:
        sys.path.append(str(hf_dir))
    return pytest.importorskip("transformers", reason="transformers (the hf extra) is not installed: make test "
                                                      "installs it into .venv/hf")


def hf_config(hf, rope: dict, max_positions: int = L0):
    return hf.LlamaConfig(hidden_size=HEAD_DIM * HEADS, num_attention_heads=HEADS, vocab_size=16,
                          max_position_embeddings=max_positions, rope_parameters=rope)


# ------------------------------------------------------------------------------------------------- scalings

@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn"])
def test_each_scaling_at_factor_1_is_plain_rope_bit_for_bit(scaling):
    plain = RoPE(HEAD_DIM, HEADS, 256)
    scaled = RoPE(HEAD_DIM, HEADS, 256, scaling=scaling, scaling_factor=1.0, original_max_len=L0)
    assert scaled.attention_scaling == 1.0
    for table in ("inv_freq", "cos", "sin", "sin_signed"):
        assert torch.equal(getattr(plain, table), getattr(scaled, table)), table
    cfg = LlamaConfig(vocab_size=16, d_model=HEAD_DIM * HEADS, n_heads=HEADS, n_layers=1, mlp_hidden=64, max_len=256)
    idx = torch.randint(0, 16, (2, 200), generator=torch.Generator().manual_seed(0))
    logits = []
    for pos in ({"name": "rope"}, {"name": "rope", "scaling": scaling, "scaling_factor": 1, "original_max_len": L0}):
        torch.manual_seed(0)
        with torch.no_grad():
            logits.append(build_model(cfg, pos)(idx))
    assert torch.equal(*logits)


@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0])
@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn"])
def test_scalings_match_transformers_rope_init_functions(scaling, factor):
    """The same inverse frequencies and attention factor, bit for bit. transformers has NTK-aware scaling only in
    its dynamic form: its base at sequence length L is base · (s·L/L₀ − (s − 1))^(D/(D−2)), the static one at
    L = L₀(2s − 1)/s."""
    hf = _transformers()
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if scaling == "linear":
        inv, attention = ROPE_INIT_FUNCTIONS["linear"](
            hf_config(hf, {"rope_type": "linear", "rope_theta": 10000.0, "factor": factor}), "cpu")
    elif scaling == "ntk":
        inv, attention = ROPE_INIT_FUNCTIONS["dynamic"](
            hf_config(hf, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": factor}), "cpu",
            seq_len=int(L0 * (2 * factor - 1) / factor))
    else:
        inv, attention = ROPE_INIT_FUNCTIONS["yarn"](hf_config(hf, {
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": factor, "original_max_position_embeddings": L0}),
            "cpu")
    ours = RoPE(HEAD_DIM, HEADS, 512, scaling=scaling, scaling_factor=factor, original_max_len=L0)
    assert torch.equal(ours.inv_freq, inv)
    assert ours.attention_scaling == attention
    if scaling == "yarn":
        assert attention == 1 + 0.1 * math.log(factor)


@pytest.mark.parametrize("options", [{}, {"beta_fast": 16, "beta_slow": 2}, {"attention_factor": 1.3}])
def test_yarn_cos_sin_tables_are_transformers_rotary_embedding(options):
    """YaRN's temperature multiplies cos and sin, as LlamaRotaryEmbedding does: the whole tables agree."""
    hf = _transformers()
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    factor, length = 4.0, 512
    config = hf_config(hf, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": factor,
                            "original_max_position_embeddings": L0, **options}, max_positions=int(L0 * factor))
    cos, sin = LlamaRotaryEmbedding(config)(torch.zeros(1, length, HEAD_DIM), torch.arange(length)[None])
    ours = RoPE(HEAD_DIM, HEADS, length, scaling="yarn", scaling_factor=factor, original_max_len=L0, **options)
    assert ours.attention_scaling != 1.0
    assert torch.equal(ours.cos, cos[0]) and torch.equal(ours.sin, sin[0])


@pytest.mark.parametrize("options, key", [
    ({"scaling": "dynamic"}, "pos.scaling"),
    ({"scaling": "linear", "scaling_factor": 0.5}, "pos.scaling_factor"),
    ({"scaling_factor": 2.0}, "pos.scaling_factor"),
    ({"scaling": "yarn", "scaling_factor": 2.0}, "pos.original_max_len"),
    ({"scaling": "ntk", "scaling_factor": 2.0, "freqs": "single@0.1"}, "pos.scaling"),
    ({"scaling": "yarn", "scaling_factor": 2.0, "original_max_len": 64, "beta_fast": 1}, "pos.beta_fast"),
])
def test_bad_scaling_options_are_one_line_errors(options, key):
    with pytest.raises(ConfigError) as err:
        RoPE(HEAD_DIM, HEADS, 128, **options)
    assert str(err.value).startswith(f"{key}=") and "\n" not in str(err.value)


def test_variants_parse_and_refuse_in_one_line():
    assert extrapolate.Variant.parse("none") == extrapolate.Variant()
    assert extrapolate.Variant.parse("yarn:4") == extrapolate.Variant("yarn", 4.0)
    auto = extrapolate.Variant.parse("ntk:auto")
    assert auto.factor_at(0.5) == 1.0 and auto.factor_at(8) == 8.0
    for bad in ("yarn", "pi:2", "linear:0.5", "none:2"):
        with pytest.raises(ConfigError, match=r"^--scaling="):
            extrapolate.Variant.parse(bad)


def test_length_knobs_scale_the_task_and_a_refusal_is_a_note():
    assert extrapolate.scaled_task_config({"name": "code_lm", "window": 64, "ood": {"window": 128}}, 4) == {
        "name": "code_lm", "window": 256}
    assert extrapolate.scaled_task_config({"name": "dyck3", "len_min": 8, "len_max": 48}, 1.5)["len_max"] == 72
    with pytest.raises(ConfigError, match=r"^task.len_max=80 is invalid"):  # 52 letters, each used once
        extrapolate.build_task(extrapolate.scaled_task_config({"name": "indirect_indexing"} | {
            "len_min": 20, "len_max": 40}, 2))


# ------------------------------------------------------------------------------------------------- evaluation

@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """rope and learned_abs on code_lm at window 16 (OOD 32: learned_abs's table), 20 steps, trained here."""
    root = tmp_path_factory.mktemp("extrapolate")
    common = [*TINY, "task=code_lm", "task.window=16", "task.ood.window=32", "trainer.max_steps=20",
              "trainer.val_every=10", "trainer.progress=off"]
    for pos in ("rope", "learned_abs"):
        summary = train_here(*common, f"pos={pos}", run_dir=root / pos)
        assert summary["status"] == "completed"
    return root


def test_a_synthetic_task_scales_its_own_knob_until_the_task_refuses(tmp_path):
    """assoc_recall: 4–8 pairs over 16 keys; 2× is 8–16 pairs, 4× would need 32 distinct keys."""
    run = tmp_path / "assoc"
    assert train_here(*TINY, "task=assoc_recall", "pos=pope", "trainer.max_steps=10", "trainer.val_every=10",
                      "trainer.progress=off", run_dir=run)["status"] == "completed"
    df = pd.DataFrame(extrapolate.extrapolate_run(run, [1.0, 2.0, 4.0], [extrapolate.Variant()])).set_index("factor")
    assert df.loc[1.0, "loss"] == df.loc[1.0, "val_loss_run"]
    assert df.loc[2.0, "length"] > df.loc[1.0, "length"] and df.loc[2.0, "loss"] > 0
    assert df.loc[4.0, "note"].startswith("task refuses 4×: task.pairs_max=32 is invalid")


def test_evaluation_at_1x_reproduces_the_runs_validation_loss(tiny_runs):
    rows = extrapolate.extrapolate_run(tiny_runs / "rope", [1.0, 2.0, 4.0], [extrapolate.Variant(),
                                                                              extrapolate.Variant("yarn", None)])
    df = pd.DataFrame(rows)
    one = df[df["factor"] == 1.0]
    assert len(one) == 2 and (one["loss"] == one["val_loss_run"]).all()  # exactly, plain and yarn:auto (= plain)
    assert list(df["length"]) == [16, 32, 64] * 2 and df["loss"].notna().all() and not df["note"].any()
    yarn = df[df["label"] == "rope+yarn×auto (eval)"]
    assert list(yarn["scaling_factor"]) == [1.0, 2.0, 4.0]


def test_a_fine_tune_counts_factors_from_its_pretraining_and_reproduces_its_own_loss_at_its_length(tiny_runs,
                                                                                                  tmp_path):
    """rope fine-tuned at 2× the window (32) from the window-16 run: its 2× is its own validation set."""
    run = tmp_path / "ft"
    summary = train_here(*TINY, "task=code_lm", "task.window=32", "task.ood.window=64", "trainer.max_steps=10",
                         "trainer.val_every=10", "trainer.progress=off", "pos=rope",
                         f"init_from={tiny_runs / 'rope'}", run_dir=run)
    assert summary["status"] == "completed"
    df = pd.DataFrame(extrapolate.extrapolate_run(run, [1.0, 2.0, 4.0], [extrapolate.Variant("yarn", None)]))
    assert list(df["length"]) == [16, 32, 64] and set(df["label"]) == {"rope +ft"}  # no variants: not plain rope
    assert df.loc[1, "loss"] == df.loc[1, "val_loss_run"] == summary["final"]["val/loss"]  # exactly
    assert df.loc[[0, 2], "val_loss_run"].isna().all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fine-tune alone gets its panel only, no empty one (matplotlib warned)
        extrapolate.figure(df.to_dict("records"), "code_lm", tmp_path / "figure.png")
    assert (tmp_path / "figure.png").stat().st_size > 0


def test_a_table_scheme_says_it_has_no_position_past_its_table(tiny_runs, capsys):
    rows = extrapolate.extrapolate_run(tiny_runs / "learned_abs", [1.0, 2.0, 4.0], [extrapolate.Variant("yarn", 2.0)])
    df = pd.DataFrame(rows).set_index("factor")
    assert df.loc[1.0, "loss"] == df.loc[1.0, "val_loss_run"]
    assert df.loc[2.0, "loss"] is not None and not df.loc[2.0, "note"]  # in its table (trained to 16 of 32 rows)
    assert df.loc[4.0, "loss"] is None or math.isnan(df.loc[4.0, "loss"])
    assert df.loc[4.0, "note"] == "pos=learned_abs has no position past 32 (its table): length 64 left empty"
    assert df["label"].unique().tolist() == ["learned_abs"]  # scalings are for rope only
    assert capsys.readouterr().out.count("no position past 32") == 1


def test_command_writes_the_table_and_the_figure(tiny_runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert extrapolate.main([str(tiny_runs), "--factors", "1", "2", "4", "--scaling", "none", "linear:auto",
                             "--out", str(out)]) == 0
    df = pd.read_csv(out / "extrapolation.csv")
    assert set(df["label"]) == {"rope", "rope+linear×auto (eval)", "learned_abs"} and len(df) == 9
    text = (out / "extrapolation.md").read_text()
    assert "## code_lm: loss against length" in text and "4× (64)" in text
    assert "+0.00e+00" in text and "no position past 32" in text
    assert "## code_lm: loss − rope's loss at the same length, paired by seed" in text
    assert "| rope+linear×auto (eval) | +0.000 (n=1) |" in text  # at 1× linear:auto is rope itself
    assert (out / "extrapolation_code_lm.png").stat().st_size > 0
    assert extrapolate.main([str(tmp_path / "nothing-here")]) == 2
    assert "error: path=" in capsys.readouterr().out


def test_tables_are_rebuilt_from_the_csv_alone_with_more_references(tiny_runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert extrapolate.main([str(tiny_runs / "rope"), "--factors", "1", "2", "--scaling", "none", "ntk:auto",
                             "--out", str(out)]) == 0
    again = tmp_path / "again"
    assert extrapolate.main(["--tables-from", str(out / "extrapolation.csv"), "--out", str(again)]) == 0
    assert (again / "extrapolation.md").read_text() == (out / "extrapolation.md").read_text()  # no evaluation needed
    assert (again / "extrapolation.csv").read_bytes() == (out / "extrapolation.csv").read_bytes()
    both = tmp_path / "both"
    assert extrapolate.main(["--tables-from", str(out / "extrapolation.csv"), "--reference", "rope",
                             "rope+ntk×auto (eval)", "--out", str(both)]) == 0
    text = (both / "extrapolation.md").read_text()
    assert "loss − rope's loss at the same length" in text
    assert "loss − rope+ntk×auto (eval)'s loss at the same length" in text
    assert "| rope | +0.000 (n=1) |" in text  # at 1× ntk:auto is rope itself
    capsys.readouterr()
    assert extrapolate.main(["--tables-from", str(tmp_path / "missing.csv")]) == 2
    assert extrapolate.main([]) == 2
    out_lines = capsys.readouterr().out.strip().splitlines()
    assert out_lines[0].startswith("error: --tables-from=") and out_lines[1].startswith("error: paths=")
    # evaluation options would be silently ignored by a rebuild: refused in one line, nothing written
    assert extrapolate.main(["--tables-from", str(out / "extrapolation.csv"), "--factors", "1", "8", "--scaling",
                             "yarn:4", "--out", str(tmp_path / "refused")]) == 2
    assert capsys.readouterr().out.strip() == ("error: --factors, --scaling with --tables-from: it rebuilds tables "
                                               "from CSVs without evaluating; drop them, or evaluate the runs "
                                               "without --tables-from")
    assert not (tmp_path / "refused").exists()


def test_a_method_keeps_its_figure_colour_whether_scaled_at_evaluation_or_fine_tuned():
    assert {extrapolate.method_of(label) for label in ("rope+yarn×4 (eval)", "rope+yarn×4 +ft", "rope+yarn×4")} == {
        "rope+yarn×4"}
    assert extrapolate.method_of("pope +ft") == "pope" != extrapolate.method_of("rope +ft")


def test_evaluations_of_different_runs_merge_into_the_table_of_all(tiny_runs, tmp_path):
    args = ["--factors", "1", "2", "--scaling", "none", "yarn:auto"]
    assert extrapolate.main([str(tiny_runs), *args, "--out", str(tmp_path / "all")]) == 0
    for name in ("rope", "learned_abs"):
        assert extrapolate.main([str(tiny_runs / name), *args, "--out", str(tmp_path / name)]) == 0
    # learned_abs given twice: the later file's rows replace the earlier ones, nothing is counted twice
    parts = [str(tmp_path / name / "extrapolation.csv") for name in ("learned_abs", "learned_abs", "rope")]
    assert extrapolate.main(["--tables-from", *parts, "--out", str(tmp_path / "merged")]) == 0
    for file in ("extrapolation.csv", "extrapolation.md"):
        assert (tmp_path / "merged" / file).read_bytes() == (tmp_path / "all" / file).read_bytes()


def test_the_fine_tune_preset_starts_from_the_pretraining_job_of_its_scheme_and_seed(tmp_path, monkeypatch):
    from ropelab.core import build, config

    monkeypatch.chdir(tmp_path)  # a folder without the pretraining runs

    cfg = config.compose(["experiment=extrapolation_code_lm_ft", "pos=rope", "seed=2", "pos.scaling=yarn",
                          "pos.scaling_factor=4", "pos.original_max_len=128"])
    # Hydra names a pretraining job by its sorted overrides: pos=…,seed=…,task=code_lm
    assert cfg.init_from == "runs/extrapolation_code_lm/pos=rope,seed=2,task=code_lm"
    assert cfg.task.window == 4 * config.compose(["experiment=extrapolation_code_lm"]).task.window
    with pytest.raises(ConfigError, match=r"^init_from='runs/extrapolation_code_lm/pos=rope,seed=2,task=code_lm' is "
                                          r"invalid: a run folder with checkpoints/last.ckpt"):
        build.check_config(cfg)  # refused in one line, before anything trains
