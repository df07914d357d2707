"""The speed levers of issue 23 change nothing they must not: fused AdamW takes the unfused update's steps up to
fp32 rounding, clipping by the divergence check's norm is Lightning's clipping bit for bit, and ``optim.fused``
refuses bad values in one line. Their speed is the bench's (``ropelab bench --mixes``), not a test's."""

import json
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from conftest import HANG_GUARD_S, ROOT, train_here
from ropelab.core.build import model_for
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError
from ropelab.core.lit import LitLM, Member, answer_loss, choose_fused, train_step

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.mlp_hidden=64"]


def _lit(pos: str = "rope", fused: bool | str = False, *extra: str) -> LitLM:
    cfg = compose([f"pos={pos}", *TINY, *extra])
    model = model_for(cfg, vocab_size=12, max_len=16)
    return LitLM(model, {**OmegaConf.to_container(cfg.optim, resolve=True), "fused": fused}, max_steps=20)


def _batches(n: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 12, (4, 16), generator=g), torch.randint(0, 12, (4, 16), generator=g)) for _ in range(n)]


def _train(lit: LitLM, batches) -> list[float]:
    member = Member.of(lit, clip=1.0)
    return [train_step([member], lambda: answer_loss(lit.model(inputs), targets).reshape(1), step)[0]
            for step, (inputs, targets) in enumerate(batches)]


@pytest.mark.parametrize("pos", ["rope", "spectral", "pope"])
def test_fused_adamw_takes_the_unfused_steps_up_to_fp32_rounding(pos):
    batches = _batches(6)
    # no warm-up: full-size updates (≈ lr per weight), so a wrong decay or bias correction would show in them
    plain, fused = _lit(pos, False, "optim.warmup_steps=0"), _lit(pos, True, "optim.warmup_steps=0")
    init = [p.detach().clone() for p in plain.model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(init, fused.model.parameters()))  # the same init
    plain_losses, fused_losses = _train(plain, batches), _train(fused, batches)
    assert plain.fused is False and fused.fused is True
    assert plain_losses[0] == fused_losses[0]  # the first forward precedes any update
    torch.testing.assert_close(torch.tensor(fused_losses), torch.tensor(plain_losses), rtol=1e-5, atol=0)
    for (name, a), b, start in zip(plain.model.named_parameters(), fused.model.parameters(), init):
        assert not torch.equal(a, start), name  # every parameter moved
        # atol: 1e-4 of 6 steps' ≈ lr-sized moves, where an element with a near-zero gradient amplifies rounding
        # in m/√v; a wrong weight decay (lr · 0.1 · |w| a step) would be ≈ 40× larger
        torch.testing.assert_close(b - start, a - start, rtol=1e-4, atol=1e-6, msg=name)


def test_fused_optimiser_is_what_auto_builds_on_cpu():
    lit = _lit("rope", "auto")
    opt = lit.configure_optimizers()["optimizer"]
    assert lit.fused is True and all(g["fused"] for g in opt.param_groups)
    plain = _lit("rope", False)
    assert not any(g["fused"] for g in plain.configure_optimizers()["optimizer"].param_groups)


def test_auto_is_unfused_where_torch_has_no_fused_kernel():
    assert choose_fused("auto", [torch.zeros(2, device="meta")])[0] is False
    assert choose_fused("auto", [torch.zeros(2, dtype=torch.int64)])[0] is False
    assert choose_fused(False, [torch.zeros(2)]) == (False, "as configured")
    # 16-mixed's GradScaler: a fused step unscales inside itself, after the clipping saw scaled gradients
    assert choose_fused("auto", [torch.zeros(2)], grad_scaler=True)[0] is False
    with pytest.raises(ConfigError) as err:
        choose_fused(True, [torch.zeros(2)], grad_scaler=True)
    assert str(err.value).startswith("optim.fused=True is invalid") and "16-mixed" in str(err.value)


@pytest.mark.parametrize("value", ["sometimes", 1, None, "True"])
def test_bad_fused_value_is_one_line_naming_the_key(value):
    with pytest.raises(ConfigError) as err:
        choose_fused(value, [torch.zeros(2)])
    assert str(err.value).startswith("optim.fused=") and "true, false or auto" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("max_norm", [1e-3, 1e6])  # clipped, and a norm under the bound (scaled by 1.0)
def test_clipping_by_the_divergence_checks_norm_is_lightnings_clipping_bit_for_bit(max_norm):
    lit = _lit("spectral")
    opt = lit.configure_optimizers()["optimizer"]
    inputs, targets = _batches(1)[0]
    LitLM.loss(lit.model(inputs), targets).backward()
    params = [p for g in opt.param_groups for p in g["params"]]
    saved = [p.grad.clone() for p in params]
    expected_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)  # what Lightning's clipping does
    expected = [p.grad.clone() for p in params]
    for p, g in zip(params, saved):
        p.grad = g.clone()
    lit.log = lambda *args, **kwargs: None  # no trainer here: the hook's logging is not what is tested
    lit.on_before_optimizer_step(opt)
    assert torch.equal(lit._grad_norm, expected_norm)
    lit.configure_gradient_clipping(opt, max_norm, "norm")
    assert all(torch.equal(p.grad, e) for p, e in zip(params, expected))
    assert lit._grad_norm is None  # used once: a later step computes its own
    if max_norm < 1:
        assert not torch.equal(expected[0], saved[0])  # the bound did clip


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_run_clips_with_the_fused_optimiser_and_records_it(precision, tmp_path):
    """Lightning's own clipping refuses an optimiser that unscales in its step, which a fused AdamW claims to even
    under bf16-mixed: the run clips through LitLM.configure_gradient_clipping instead."""
    summary = train_here("task=mod_arith", *TINY, "optim.fused=auto", "trainer.max_steps=3", "trainer.val_every=3",
                         "trainer.threads=1",
                         f"trainer.precision={precision}", "trainer.accelerator=cpu", "trainer.progress=off",
                         "trainer.gradient_clip_val=1e-3", run_dir=tmp_path / "run")
    assert summary["status"] == "completed", summary.get("error")
    assert summary["fused_adamw"] is True


def test_mix_bench_quick_writes_every_lever_and_the_targets(tmp_path):
    out = tmp_path / "mixes.json"
    result = subprocess.run([sys.executable, "-m", "ropelab", "bench", "--quick", "--silent", "--threads", "1",
                             "--mixes", "momentum_gamma", "pope_indirect", "--out", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-3000:]
    mixes = json.loads(out.read_text())["mixes"]
    assert set(mixes["tables"]) == {"momentum_gamma", "pope_indirect"}
    table = mixes["tables"]["momentum_gamma"]
    assert table["jobs"] == 4 * 6 * 3  # the preset's 72 jobs: 4 tasks × 6 γ × 3 seeds
    assert list(table["levers"]) == ["today", "fused AdamW", "one grad norm", "levers on"]
    assert table["levers"]["today"]["speedup"] == 1.0 and all(v["jobs_per_core_hour"] > 0
                                                              for v in table["levers"].values())
    assert [t["threshold"] for t in mixes["targets"]] == [2.0, 0.85]  # momentum's target, then PoPE's vs rope
    assert set(mixes["profiles"]) == {"momentum_gamma", "pope_indirect", "pope_indirect (pope)"}
    assert mixes["profiles"]["pope_indirect (pope)"]["ops_ms"]["softplus (PoPE)"] > 0
    assert mixes["profiles"]["pope_indirect"]["ops_ms"]["softplus (PoPE)"] == 0  # rope has none
    packed = [c["cell"] for c in mixes["tables"]["pope_indirect"]["cells"] if "packed ×4" in c]
    assert [name.split(" (")[0] for name in packed] == ["rope", "pope"]  # packed beside rope's and PoPE's singles
    assert "| momentum_gamma | 72 |" in (tmp_path / "mixes.md").read_text()
