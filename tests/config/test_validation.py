"""A bad config fails before anything trains, in one line naming the key; the default config is valid."""

import pytest

from conftest import TINY, run_train
from ropelab.core.build import check_config
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError


def composed(*overrides):
    return compose([*TINY, *overrides])


BAD = [
    (["seed=abc"], "seed"),
    (["seed=1.5"], "seed"),
    (["seed=-1"], "seed"),
    (["pos.base=-5"], "pos.base"),
    (["pos.base=0"], "pos.base"),
    (["pos=spectral", "pos.phase_on=middle"], "pos.phase_on"),
    (["pos.momentum.gamma=-0.5"], "pos.momentum.gamma"),
    (["pos=bifocal", "pos.spectral_fraction=1.5"], "pos.spectral_fraction"),
    (["pos.freqs=triangular"], "pos.freqs"),
    (["model.n_heads=3"], "model.n_heads"),
    (["model.d_model=6", "model.n_heads=2"], "model.d_model"),  # head dim 3: odd, rotary refuses
    (["task.gap_min=50", "task.gap_max=10"], "task.gap_max"),
    (["task=mod_arith", "task.modulus=1"], "task.modulus"),
    (["task=assoc_recall", "task.pairs_max=1000"], "task.pairs_max"),
    (["data.batch_size=0"], "data.batch_size"),
    (["trainer.max_steps=abc"], "trainer.max_steps"),
    (["trainer.max_steps=0"], "trainer.max_steps"),
    (["trainer.precision=fp8"], "trainer.precision"),
    (["optim.lr=-1"], "optim.lr"),
    (["optim.min_lr_ratio=2"], "optim.min_lr_ratio"),
    (["optim.betas=[0.9]"], "optim.betas"),
    (["+trainer.max_stepz=3"], "trainer.max_stepz"),
    (["+pos.phase_sdt=0.1", "pos=spectral"], "pos.phase_sdt"),
    (["+task.motif_length=5"], "motif_length"),
    (["trainer.val_every=-3"], "trainer.val_every"),
    (["model.attn_fp32=maybe"], "model.attn_fp32"),
    (["optim.fused=sometimes"], "optim.fused"),
]


@pytest.mark.parametrize("overrides, key", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_config_fails_before_training_naming_the_key(overrides, key):
    cfg = composed(*overrides)
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    message = str(err.value)
    assert key in message and "\n" not in message


@pytest.mark.parametrize("args, key", [
    (["task=nonsense"], "task="), (["trainer.max_stepz=3"], "trainer.max_stepz"),
    (["pos=spectral", "pos.phase_sdt=0.1"], "pos.phase_sdt"), (["-m", "pos=rope,nonsense"], "pos="),
])
def test_cli_errors_are_one_line(tmp_path, args, key):
    result = run_train(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and key in result.stderr and "Traceback" not in result.stderr


def test_default_config_is_valid():
    check_config(composed())
