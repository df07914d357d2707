"""Momentum-attention study (issue 10): frequency profiles as an axis, degradation γ = 0 → 2, γ-verdicts and the
attention-sharpening number, on synthetic inputs (no training)."""

import math

import numpy as np
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir

from conftest import ROOT
from ropelab.analysis import momentum_report as mr
from ropelab.analysis.report import gamma as momentum
from ropelab.analysis.report.momentum import attention_section
from ropelab.analysis.stats import t975
from ropelab.core import config, locality
from ropelab.core.errors import ConfigError
from ropelab.core.model import LlamaConfig, build_model
from ropelab.core.positional.rotary import inverse_frequencies

CONF = ROOT / "conf"

# ------------------------------------------------------------------------------ frequency profiles (README numbers)

GEOMETRIC = [10000.0 ** (-i / 16) for i in range(16)]            # 1, 0.562, 0.316, … 1.78e-4 (rad/token)
THIRD = 10.0 ** (-1.25)                                             # one third of the 3.75-decade log range
BANDS = {"high": (THIRD, 1.0), "mid": (THIRD ** 2, THIRD), "low": (THIRD ** 3, THIRD ** 2)}


def _band(low, high, n=16):
    return [high * (low / high) ** (k / (n - 1)) for k in range(n)]


@pytest.mark.parametrize("profile, expected", [
    ("geometric", GEOMETRIC),
    ("single@1", [1.0] * 16), ("single@0.1", [0.1] * 16), ("single@0.01", [0.01] * 16),
    ("single", [0.01] * 16),                      # the old default: the median, base^(-1/2)
    ("bandpass@high", _band(*BANDS["high"])), ("bandpass@mid", _band(*BANDS["mid"])),
    ("bandpass@low", _band(*BANDS["low"])), ("bandpass", _band(*BANDS["mid"])),
])
def test_profile_frequencies_are_the_readme_numbers(profile, expected):
    got = inverse_frequencies(16, profile, 10000.0)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float32), rtol=1e-6, atol=0)


def test_band_edges_and_readme_values():
    torch.testing.assert_close(inverse_frequencies(16, "bandpass@high")[[0, -1]], torch.tensor([1.0, 0.056234]),
                               rtol=1e-5, atol=0)
    torch.testing.assert_close(inverse_frequencies(16, "bandpass@mid")[[0, -1]], torch.tensor([0.056234, 0.0031623]),
                               rtol=1e-4, atol=0)
    torch.testing.assert_close(inverse_frequencies(16, "bandpass@low")[[0, -1]], torch.tensor([0.0031623, 1.7783e-4]),
                               rtol=1e-4, atol=0)
    # the thirds tile the geometric range: geometric's θ_5 and θ_10 are the edges
    geo = inverse_frequencies(16, "geometric")
    assert math.isclose(float(geo[5]), THIRD, rel_tol=1e-6) and math.isclose(float(geo[10]), THIRD ** 2, rel_tol=1e-6)
    # the old spellings still work and agree with the new ones
    assert torch.equal(inverse_frequencies(16, "single", single_freq=0.1), inverse_frequencies(16, "single@0.1"))
    assert torch.equal(inverse_frequencies(16, "bandpass", band="low"), inverse_frequencies(16, "bandpass@low"))
    torch.testing.assert_close(inverse_frequencies(16, "bandpass", band=[0.01, 0.2])[[0, -1]], torch.tensor([0.2, 0.01]))


@pytest.mark.parametrize("pos, key", [
    ({"freqs": "single@abc"}, "pos.freqs"), ({"freqs": "single@-1"}, "pos.freqs"), ({"freqs": "single@"}, "pos.freqs"),
    ({"freqs": "bandpass@top"}, "pos.freqs"), ({"freqs": "geometric@1"}, "pos.freqs"),
    ({"freqs": "single@1", "single_freq": 0.5}, "pos.single_freq"),
    ({"freqs": "bandpass@low", "band": "mid"}, "pos.band"), ({"freqs": "bandpass", "band": "lowest"}, "pos.band"),
])
def test_bad_profiles_are_refused_naming_the_key(pos, key):
    with pytest.raises(ConfigError) as err:
        build_model(LlamaConfig(vocab_size=7, d_model=32, n_layers=1, n_heads=2, mlp_hidden=32, max_len=8),
                    {"name": "rope", **pos})
    assert key in str(err.value) and "\n" not in str(err.value)


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.parametrize("profile", ["geometric", "single@1", "single@0.1", "single@0.01", "bandpass@low",
                                     "bandpass@mid", "bandpass@high"])
@pytest.mark.parametrize("scheme", ["rope", "spectral", "bifocal"])
def test_profiles_compose_into_the_model(profile, scheme):
    """A profile given on the command line reaches the scheme's frequency table (Ω for spectral/bifocal)."""
    from omegaconf import OmegaConf

    cfg = config.compose(["task=assoc_recall", f"pos={scheme}", f"pos.freqs={profile}", "model.n_layers=1"])
    pos = OmegaConf.to_container(cfg.pos, resolve=True)
    model = build_model(LlamaConfig(vocab_size=11, max_len=16, **OmegaConf.to_container(cfg.model)), pos)
    expected = inverse_frequencies(16, profile, 10000.0)
    pos = model.pos
    tables = [pos.inv_freq] if scheme == "rope" else [pos.omega] if scheme == "spectral" else \
        [pos.spectral.omega, pos.geometric.inv_freq]
    for table in tables:
        assert torch.equal(table.detach().reshape(-1, 16), expected.expand(table.numel() // 16, -1))


def test_momentum_freqs_sweeps_the_seven_profiles():
    cfg = _compose("experiment=momentum_freqs")
    params = {k: {v.strip() for v in str(vals).split(",")} for k, vals in cfg.hydra.sweeper.params.items()}
    assert params["pos.freqs"] == {"geometric", "single@1", "single@0.1", "single@0.01", "bandpass@low",
                                   "bandpass@mid", "bandpass@high"}
    assert params["pos.momentum.gamma"] == {"0", "2"} and params["seed"] == {"0", "1", "2"}
    assert len(params["task"]) == 4
    for profile in params["pos.freqs"]:  # every job of the sweep builds
        one = _compose("experiment=momentum_freqs", f"pos.freqs={profile}", "task=mean_pooling")
        assert one.pos.freqs == profile and one.record == "results/momentum_freqs"


# ------------------------------------------------------------------------------ degradation on a synthetic record set

ACC = {  # task → (a(γ=0), a(γ=2)) per seed 0, 1, 2
    "assoc_recall": ([0.8, 0.8, 0.8], [0.6, 0.6, 0.6]),           # 25 % each seed
    "variable_tracking": ([0.4, 0.4, 0.4], [0.4, 0.4, 0.4]),      # 0
    "global_counting": ([0.5, 0.5, 0.5], [0.45, 0.4, 0.5]),       # 10, 20, 0
    "mean_pooling": ([1.0, 1.0, 1.0], [0.9, 0.9, 0.9]),           # 10
}


def _values(acc=ACC):
    import pandas as pd

    return pd.DataFrame([{"task": t, "gamma": g, "seed": s, "value": a[s]} for t, pair in acc.items()
                         for g, a in zip((0.0, 2.0), pair) for s in range(len(a))])


def test_degradation_per_task_and_averages():
    d = momentum.degradation(_values())
    assert d.per_task["assoc_recall"].mean == pytest.approx(25) and d.per_task["assoc_recall"].sd == pytest.approx(0)
    gc = d.per_task["global_counting"]
    assert (gc.mean, gc.sd, gc.n) == (pytest.approx(10), pytest.approx(10), 3)
    assert gc.half_width == pytest.approx(t975(2) * 10 / math.sqrt(3))          # 24.84: the t interval over seeds
    assert d.per_task_of_means["global_counting"] == pytest.approx(100 * (0.5 - 0.45) / 0.5)
    # ∫ tasks: per seed (gc + mp) / 2 = 10, 15, 5
    integral = d.mean_of_drops["∫ tasks"]
    assert (integral.mean, integral.sd, integral.n) == (pytest.approx(10), pytest.approx(5), 3)
    # all four: per seed 11.25, 13.75, 8.75
    four = d.mean_of_drops["all four"]
    assert (four.mean, four.sd) == (pytest.approx(11.25), pytest.approx(2.5))
    # drop of the task-mean accuracy: Ā(0) = 0.675; Ā(2) = 0.5875, 0.575, 0.6 per seed
    expected = [100 * (0.675 - a) / 0.675 for a in (0.5875, 0.575, 0.6)]
    assert d.drop_of_mean["all four"].mean == pytest.approx(np.mean(expected))
    assert d.drop_of_mean["all four"].sd == pytest.approx(np.std(expected, ddof=1))
    assert d.absolute["all four"].mean == pytest.approx(np.mean([8.75, 10, 7.5]))


def test_degradation_pairs_by_seed_and_drops_incomplete_seeds():
    values = _values()
    values = values[~((values["task"] == "mean_pooling") & (values["gamma"] == 2.0) & (values["seed"] == 2))]
    d = momentum.degradation(values)
    assert d.per_task["mean_pooling"].n == 2 and d.per_task["global_counting"].n == 3
    assert d.seeds["∫ tasks"] == [0, 1] and d.mean_of_drops["∫ tasks"].mean == pytest.approx(12.5)
    one_gamma = values[values["gamma"] == 0.0]
    assert momentum.degradation(one_gamma).per_task == {}


# ------------------------------------------------------------------------------ γ verdicts on synthetic curves

GAMMAS = (0.0, 0.3, 0.5, 0.7, 1.0, 2.0)
NOISE = np.array([[0.004, -0.003, 0.002, -0.004, 0.003, -0.002],
                  [-0.002, 0.004, -0.003, 0.002, -0.004, 0.003],
                  [0.001, -0.002, 0.003, 0.001, -0.001, 0.002]])


def _curve(means, noise=NOISE):
    return {g: {s: means[i] + noise[s][i] for s in range(len(noise))} for i, g in enumerate(GAMMAS)}


@pytest.mark.parametrize("means, label", [
    ([0.50, 0.55, 0.60, 0.65, 0.70, 0.75], "monotone gain"),
    ([0.50, 0.60, 0.70, 0.60, 0.50, 0.40], "inverted U"),
    ([0.75, 0.70, 0.65, 0.60, 0.55, 0.50], "monotone drop"),
    ([0.60, 0.50, 0.40, 0.50, 0.60, 0.70], "U"),
    ([0.50, 0.50, 0.51, 0.49, 0.50, 0.50], "flat"),
])
def test_gamma_verdicts_on_synthetic_curves(means, label):
    v = momentum.gamma_verdict(_curve(means))
    assert v.label == label, v.reason
    if label == "inverted U":
        assert v.peak == 0.5
    assert set(v.diffs) == set(GAMMAS[1:]) and v.means[0.0].n == 3


def test_gamma_verdict_needs_the_spread_not_the_means():
    # the means rise by 5 points per step, but the seeds disagree in sign: no trend is shown
    spread = {g: {0: 0.5 + 0.2 * i / 5, 1: 0.5 - 0.15 * i / 5, 2: 0.5 + 0.1 * i / 5} for i, g in enumerate(GAMMAS)}
    assert momentum.gamma_verdict(spread).label == "no clear change"
    # mean Δ is 0 at every γ but the seeds scatter by ±10 points: not "flat"
    wide = {g: ({0: 0.5, 1: 0.5, 2: 0.5} if g == 0 else {0: 0.6, 1: 0.4, 2: 0.5}) for g in GAMMAS}
    v = momentum.gamma_verdict(wide)
    assert v.label == "no clear change" and "flatness not shown" in v.reason
    assert momentum.gamma_verdict(wide, margin=0.5).label == "flat"
    # a consistent jump at γ = 0.3 with seeds that disagree on the trend afterwards: "other"
    other = {0.0: {0: 0.5, 1: 0.5, 2: 0.5}, 0.3: {0: 0.6, 1: 0.6, 2: 0.6},
             **{g: {0: 0.9, 1: 0.3, 2: 0.6} for g in GAMMAS[2:]}}
    v = momentum.gamma_verdict(other)
    assert v.label == "other" and "0.3" in v.reason
    assert momentum.gamma_verdict({0.0: {0: 0.5}, 2.0: {0: 0.7}}).label == "too few seeds"


# ------------------------------------------------------------------------------ sharpening on synthetic attention

def _uniform(T):
    w = np.tril(np.ones((T, T)))
    return w / w.sum(-1, keepdims=True)


def test_local_mass_on_synthetic_attention():
    T = 10
    eye = np.broadcast_to(np.eye(T), (2, 4, T, T))       # (layers, heads, T, T): all mass on the query itself
    assert locality.local_mass(eye, k=1) == pytest.approx(1) and locality.local_mass(eye, k=3) == pytest.approx(1)
    previous = np.eye(T, k=-1)
    previous[0, 0] = 1                                     # each query on the token before it
    assert locality.local_mass(previous, k=1) == pytest.approx(0) and locality.local_mass(previous, k=2) == pytest.approx(1)
    first = np.zeros((T, T))
    first[:, 0] = 0.5
    first[np.arange(T), np.arange(T)] += 0.5               # half on itself, half on the first token
    assert locality.local_mass(first, k=3) == pytest.approx(0.5)  # queries i ≥ 3 only: token 0 is outside their band
    assert locality.local_mass(_uniform(T), k=3) == pytest.approx(locality.uniform_local_mass(T, 3))
    assert locality.uniform_local_mass(T, 3) == pytest.approx(np.mean([3 / (i + 1) for i in range(3, T)]))
    # heads differ: the mean over heads
    heads = np.stack([np.eye(T), _uniform(T)])
    assert locality.local_mass(heads, k=3) == pytest.approx((1 + locality.uniform_local_mass(T, 3)) / 2)
    mass, ref = locality.sharpening([np.eye(6)[None], _uniform(12)[None]], k=3)
    assert mass == pytest.approx((1 + locality.uniform_local_mass(12, 3)) / 2)
    assert ref == pytest.approx((locality.uniform_local_mass(6, 3) + locality.uniform_local_mass(12, 3)) / 2)
    assert math.isnan(locality.local_mass(np.eye(3), k=3))


# ------------------------------------------------------------------------------ the section on a tiny record set

def _fake_sweep(root, tasks=("assoc_recall", "mean_pooling"), gammas=(0.0, 0.5, 2.0), seeds=(0, 1), checkpoints=False,
                freqs=("geometric",)):
    """Run folders as a sweep leaves them (config.yaml, summary.json; checkpoints of an untrained tiny model)."""
    import json

    from omegaconf import OmegaConf

    for task in tasks:
        for profile in freqs:
            for g in gammas:
                for s in seeds:
                    cfg = config.compose([f"task={task}", "pos=rope", f"pos.freqs={profile}", f"pos.momentum.gamma={g}",
                                          f"seed={s}", "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
                                          "model.mlp_hidden=32", "data.val_size=8", "data.eval_batch_size=8"])
                    cfg = OmegaConf.to_container(cfg, resolve=False)
                    job = root / f"pos.freqs={profile},pos.momentum.gamma={g:g},pos=rope,seed={s},task={task}"
                    job.mkdir(parents=True)
                    (job / "config.yaml").write_text(yaml.safe_dump(cfg))
                    # assoc_recall gains with γ; mean_pooling drops 10 % at γ = 2
                    acc = {"assoc_recall": 0.4 + 0.1 * g + 0.01 * s, "mean_pooling": 0.5 - 0.025 * g + 0.01 * s}[task]
                    (job / "summary.json").write_text(json.dumps({"status": "completed", "steps": 10, "task": task,
                                                                  "pos": "rope", "seed": s, "final": {"val/acc": acc}}))
                    if checkpoints:
                        from ropelab.analysis.attention_maps import model_from_config

                        torch.manual_seed(s)
                        model, _ = model_from_config(cfg)
                        (job / "checkpoints").mkdir()
                        torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}},
                                   job / "checkpoints" / "last.ckpt")
    return root


def test_momentum_report_on_a_tiny_record_set(tmp_path):
    sweep = _fake_sweep(tmp_path / "momentum_gamma", checkpoints=True)
    path = mr.write(sweep, tmp_path / "out", n_examples=2, ckpt_roots=[])
    md = path.read_text()
    # degradation: assoc_recall gains (negative drop), mean_pooling drops 0.05 / 0.5 = 10 % (seed 0), 0.05/0.51 (seed 1)
    assert "Degradation γ = 0 → 2" in md and "geometric" in md
    from ropelab.analysis.report import Sweep
    from ropelab.analysis.stats import Landmarks

    d = momentum.degradation(momentum.seed_table(Sweep(sweep, Landmarks())).query("group == 'freqs=geometric'"))
    assert d.per_task["mean_pooling"].mean == pytest.approx(100 * np.mean([0.05 / 0.5, 0.05 / 0.51]))
    assert d.per_task["assoc_recall"].mean < 0
    assert "9.8" in md  # the paper's geometric value beside ours
    # verdicts: assoc_recall's rise is the same in both seeds → monotone gain
    assert "| assoc_recall | monotone gain | monotone gain |" in md
    # sharpening table and the figures
    assert "Attention sharpening" in md and "uniform" in md
    assert (tmp_path / "out" / "attention_momentum.png").stat().st_size > 5000
    assert (tmp_path / "out" / "gamma_response_geometric.png").stat().st_size > 5000
    assert "Momentum claims" in md and "associative recall improves monotonically" in md
    assert "1 layers, hidden 32, 2 heads" in md


def test_a_record_keeps_the_sharpening_number_the_report_rebuilds_without_checkpoint(tmp_path, tiny):
    from conftest import train_here
    from ropelab.analysis import attention_maps
    from ropelab.analysis.report import Sweep
    from ropelab.analysis.stats import Landmarks

    run = tmp_path / "sweep" / "pos.momentum.gamma=0.5,pos=rope,seed=0,task=assoc_recall"
    summary = train_here(*tiny, "task=assoc_recall", "pos.momentum.gamma=0.5", "trainer.max_steps=4",
                         "trainer.val_every=4", run_dir=run)
    kept = summary["attention"]
    assert kept["k"] == locality.K and kept["examples"] == 8, "capped at the first validation batch (8 here)"
    model, task, cfg = attention_maps.load_run_model(run)  # the final weights, from the checkpoint
    mass, uniform = locality.sharpening(locality.run_maps(model, task, cfg, 8))
    assert kept["local_mass"] == pytest.approx(mass, abs=1e-6) and kept["uniform"] == pytest.approx(uniform)
    assert 0 < kept["local_mass"] <= 1 and 0 < kept["uniform"] < 1
    import shutil

    shutil.rmtree(run / "checkpoints")  # a record: no checkpoint
    table = momentum.seed_table(Sweep(tmp_path / "sweep", Landmarks()))
    md, masses = attention_section(table, tmp_path / "out", 80, k=locality.K, layer=0, n_examples=8, ckpt_roots=[])
    assert masses == {("assoc_recall", 0.5): {0: kept["local_mass"]}}
    assert "Attention sharpening" in md[0]


def test_freqs_sweep_report_has_a_row_per_profile(tmp_path):
    sweep = _fake_sweep(tmp_path / "momentum_freqs", gammas=(0.0, 2.0), freqs=("geometric", "single@1", "bandpass@low"))
    md = mr.write(sweep, tmp_path / "out", attention=False, ckpt_roots=[]).read_text()
    for profile in ("geometric", "single@1", "bandpass@low"):
        assert f"| {profile} |" in md
    assert "15.8" in md and "16.5" in md  # the paper's single and band-pass values, by family
    assert "Accuracy against γ" not in md  # two γ values: no curve to judge


def test_the_sweep_report_carries_the_momentum_section(tmp_path):
    from ropelab.analysis import report

    sweep = _fake_sweep(tmp_path / "momentum_gamma", tasks=("mean_pooling",))
    md = (report.write_report(sweep, tmp_path / "out", attention=False) / "report.md").read_text()
    assert "## Momentum attention" in md and "Degradation γ = 0 → 2" in md and "| mean_pooling | flat |" in md


def test_both_momentum_sweeps_record_into_their_tables():
    for name in ("momentum_gamma", "momentum_freqs"):
        assert _compose(f"experiment={name}").record == f"results/{name}"  # recorded jobs are skipped on a rerun


def test_a_task_no_gamma_lifts_above_its_guess_floor_is_not_learned():
    at_floor = {0.0: {0: 0.25, 1: 0.26}, 1.0: {0: 0.24, 1: 0.27}, 2.0: {0: 0.29, 1: 0.25}}
    assert momentum.gamma_verdict(at_floor, margin=0.05, floor=0.25).label == "not learned"
    assert momentum.gamma_verdict(at_floor, margin=0.05, floor=0.10).label != "not learned"   # 15 pts above a lower floor
    learned_once = {**at_floor, 2.0: {0: 0.60, 1: 0.62}}
    assert momentum.gamma_verdict(learned_once, margin=0.05, floor=0.25).label == "monotone gain"


def test_two_bases_of_one_sweep_are_two_rows_of_the_attention_and_claims_tables(tmp_path):
    """Each base its own rows, every seed counted: none kept silently over the other (n = 2 where two runs exist)."""
    import json

    from omegaconf import OmegaConf

    from ropelab.analysis.report import Sweep
    from ropelab.analysis.report.momentum import claims_section
    from ropelab.analysis.stats import Landmarks

    root = tmp_path / "sweep"
    for base in (500, 10000):
        for g in (0.0, 2.0):
            for s in (0, 1):
                cfg = OmegaConf.to_container(config.compose(["task=assoc_recall", "pos=rope", f"pos.base={base}",
                                                             f"pos.momentum.gamma={g}", f"seed={s}"]), resolve=False)
                job = root / f"pos.base={base},pos.momentum.gamma={g:g},seed={s}"
                job.mkdir(parents=True)
                (job / "config.yaml").write_text(yaml.safe_dump(cfg))
                mass = 0.3 + 0.1 * g + 0.01 * s + base / 1e6
                (job / "summary.json").write_text(json.dumps({
                    "status": "completed", "steps": 10, "task": "assoc_recall", "pos": "rope", "seed": s,
                    "final": {"val/acc": 0.5}, "attention": {"k": locality.K, "examples": 8, "local_mass": mass,
                                                             "uniform": 0.2}}))
    sweep = Sweep(root, Landmarks())
    table = momentum.seed_table(sweep)
    md, masses = attention_section(table, tmp_path / "out", 80, k=locality.K, layer=0, n_examples=8, ckpt_roots=[])
    assert sorted(masses) == [("assoc_recall (base=10000)", 0.0), ("assoc_recall (base=10000)", 2.0),
                              ("assoc_recall (base=500)", 0.0), ("assoc_recall (base=500)", 2.0)]
    assert all(len(seeds) == 2 for seeds in masses.values())
    claims = "\n".join(claims_section(sweep, {}, {}, masses, 0.05))
    assert "attention sharpens along the diagonal as γ grows (assoc_recall (base=500))" in claims
    assert "(assoc_recall (base=10000))" in claims and "rope base 500, 10000" in claims
