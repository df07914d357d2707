"""Momentum-attention study (issue 10): frequency profiles as an axis, degradation γ = 0 → 2, γ-verdicts and the
attention-sharpening number, on synthetic inputs (no training)."""

import math

import numpy as np
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir

from conftest import ROOT
from ropelab import momentum_report as mr
from ropelab.model import LlamaConfig, build_model
from ropelab.positional.rotary import inverse_frequencies
from ropelab.stats import t975
from tasks.base import ConfigError

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

    cfg = _compose("task=assoc_recall", f"pos={scheme}", f"pos.freqs={profile}", "model.n_layers=1")
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
