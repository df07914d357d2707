"""The one training step (``ropelab.core.lit.train_step``): over one member it is Lightning's step of a run bit for
bit. Packed members (``ropelab.core.packed``, issue 23 item 3): in fp32 a member of a pack takes its single run's
steps — the losses ``python train.py`` logs — within 1e-5 relative over the first 50 steps, beside a member with
another seed and learning rate; a diverging member stops alone; configs that change shapes are refused."""

import pandas as pd
import pytest
import torch

from conftest import train_here
from ropelab.core.build import build
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError
from ropelab.core.lit import Member, answer_loss, train_step
from ropelab.core.packed import Pack

STEPS = 50
COMMON = ["task=mod_arith", "model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.mlp_hidden=64",
          "data.batch_size=8", "data.val_size=16", "data.test_size=16", "data.ood_size=16", "data.eval_batch_size=16",
          "trainer.precision=32-true", "trainer.accelerator=cpu", "trainer.threads=1", f"trainer.max_steps={STEPS}",
          f"trainer.val_every={STEPS}", "trainer.progress=off"]
SCHEMES = {"rope": ["pos=rope"], "spectral": ["pos=spectral"], "pope": ["pos=pope", "pos.delta_init=uniform"],
           "momentum": ["pos=rope", "pos.momentum.gamma=0.5"]}
OTHER = ["seed=1", "optim.lr=1e-3", "trainer.gradient_clip_val=0.5"]  # the member compared with its single run


@pytest.mark.parametrize("extra", [["pos=pope", "pos.delta_init=uniform", "optim.pos_lr_scale=100"],  # δ's clamp
                                   ["pos=rope", "pos.momentum.adaptive.enabled=true"]])  # γ from the gradient norm
def test_one_member_step_is_lightnings_step_of_a_run_bit_for_bit(extra):
    import lightning as L

    cfg = compose([*COMMON, *extra, "trainer.gradient_clip_val=0.05", "optim.warmup_steps=2"])
    steps = 6
    run = build(cfg)
    trainer = L.Trainer(accelerator="cpu", max_steps=steps, gradient_clip_val=cfg.trainer.gradient_clip_val,
                        limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, deterministic=True)
    trainer.fit(run.lit, train_dataloaders=run.datamodule.train_dataloader())
    ours = build(cfg)
    member = Member.of(ours.lit, cfg.trainer.gradient_clip_val)
    batches = iter(ours.datamodule.train_dataloader())
    for step in range(steps):
        inputs, targets = next(batches)
        train_step([member], lambda: answer_loss(ours.model(inputs), targets).reshape(1), step)
    assert member.diverged is None and member.last_finite_loss == run.lit.last_finite_loss
    for (name, theirs), mine in zip(run.model.state_dict().items(), ours.model.state_dict().values()):
        assert torch.equal(theirs, mine), name  # parameters, and buffers such as an adaptive γ
    assert member.optimizer.param_groups[0]["lr"] == trainer.optimizers[0].param_groups[0]["lr"]


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_a_packed_member_takes_its_single_runs_steps_in_fp32(scheme, tmp_path):
    overrides = COMMON + SCHEMES[scheme]
    summary = train_here(*overrides, *OTHER, run_dir=tmp_path / "single")
    assert summary["status"] == "completed"
    metrics = pd.read_csv(tmp_path / "single" / "metrics.csv")
    single = metrics.dropna(subset=["train/loss"]).sort_values("step")["train/loss"].to_numpy()
    assert len(single) == STEPS
    pack = Pack([compose(overrides + ["seed=0"]), compose(overrides + OTHER)])
    packed = [pack.step() for _ in range(STEPS)]
    member = torch.tensor([losses[1] for losses in packed], dtype=torch.float64)
    torch.testing.assert_close(member, torch.tensor(single, dtype=torch.float64), rtol=1e-5, atol=0)
    first = torch.tensor([losses[0] for losses in packed], dtype=torch.float64)
    assert not torch.allclose(first, member, rtol=1e-3)  # the other member is another run, not a copy


def test_members_with_their_own_momentum_gamma_take_their_single_runs_steps(tmp_path):
    """γ differs inside one pack (the momentum table's axis): the member at γ 0 computes q + 0·(q − q_prev), its
    single run skips momentum; both take their single runs' steps."""
    members = [["seed=0", "pos.momentum.gamma=0"], ["seed=1", "pos.momentum.gamma=0.7"]]
    singles = []
    for i, member in enumerate(members):
        train_here(*COMMON, "pos=rope", *member, run_dir=tmp_path / str(i))
        metrics = pd.read_csv(tmp_path / str(i) / "metrics.csv").dropna(subset=["train/loss"]).sort_values("step")
        singles.append(torch.tensor(metrics["train/loss"].to_numpy(), dtype=torch.float64))
    pack = Pack([compose(COMMON + ["pos=rope", *member]) for member in members])
    assert torch.equal(pack.gammas, torch.tensor([[0.0, 0.0], [0.7, 0.7]]))  # per member and layer
    packed = [pack.step() for _ in range(STEPS)]
    for k, single in enumerate(singles):
        torch.testing.assert_close(torch.tensor([losses[k] for losses in packed], dtype=torch.float64), single,
                                   rtol=1e-5, atol=0)
    assert [b.attn.momentum_gamma for b in pack.template.blocks] == [0.0, 0.0]  # the floats are back after a step


def test_a_diverging_member_stops_alone():
    overrides = COMMON + ["pos=pope"]
    pack = Pack([compose(overrides + ["trainer.diverge_grad_norm=1e-9"]), compose(overrides + ["seed=1"])])
    weight = pack.params["blocks.0.attn.qkv.weight"]
    start = weight.detach().clone()
    losses = [pack.step() for _ in range(3)]
    assert pack.diverged == [0, None]
    assert losses[0][0] is not None and losses[1][0] is None and all(step[1] is not None for step in losses)
    assert torch.equal(weight[0], start[0])  # the diverged member's weights never moved
    assert not torch.equal(weight[1], start[1])


def test_pope_members_keep_their_own_delta_within_its_range():
    overrides = COMMON + ["pos=pope", "pos.delta_init=uniform", "optim.pos_lr_scale=1000"]
    pack = Pack([compose(overrides), compose(overrides + ["seed=1"])])
    for _ in range(3):
        pack.step()
    delta = pack.params["pos.delta"]
    assert delta.min() >= -2 * torch.pi and delta.max() <= 0  # each member's project_ clamped its own slice
    assert torch.equal(delta[1], pack.models[1].pos.delta)  # a member's parameter is its slice
    assert not torch.equal(delta[0], delta[1])


@pytest.mark.parametrize("other, key", [(["model.d_model=64"], "model.d_model"), (["pos=spectral"], "pos.name"),
                                        (["data.batch_size=4"], "data.batch_size")])
def test_members_that_differ_in_shape_are_refused_in_one_line(other, key):
    with pytest.raises(ConfigError) as err:
        Pack([compose(COMMON + ["pos=rope"]), compose(COMMON + ["pos=rope", *other])])
    assert str(err.value).startswith(key) and "\n" not in str(err.value)
