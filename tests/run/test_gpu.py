"""The GPU path, marked ``gpu``: on CUDA when torch sees it, skipped otherwise.

``ROPELAB_TEST_DEVICE=cpu`` runs the same tests on the CPU (``make gpu-check ACCEL=cpu`` does, and so does
tests/commands/test_gpucheck.py), so the first run on a GPU is not the first run of this code. Everything goes through
the public paths a GPU user takes: ``trainer.accelerator``, ``trainer.precision=auto``, the bench's ``--device``.
"""

import math
import os

# trainer(deterministic=True) needs this before cuBLAS starts; Lightning sets it too, but only when the Trainer is
# built, and an earlier test in this process may have started cuBLAS already
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest  # noqa: E402
import torch  # noqa: E402

import tasks  # noqa: E402
from conftest import TINY  # noqa: E402
from ropelab.core import config, machine, positional  # noqa: E402
from ropelab.core.build import model_for  # noqa: E402
from ropelab.core.data import draw  # noqa: E402
from ropelab.core.lit import LitLM, Member, answer_loss, train_step  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device() -> str:
    forced = os.environ.get("ROPELAB_TEST_DEVICE")
    if forced:
        if forced == "cuda" and not torch.cuda.is_available():
            pytest.fail("ROPELAB_TEST_DEVICE=cuda but torch sees no CUDA device")
        return forced
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (ROPELAB_TEST_DEVICE=cpu runs these tests on the CPU)")
    return "cuda"


def _tiny_model(scheme: str, max_len: int, overrides: list[str] = ()):
    cfg = config.compose([f"pos={scheme}", *overrides, "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
                          "model.mlp_hidden=64"])
    return model_for(cfg, vocab_size=16, max_len=max_len)


SCHEMES = [(name, []) for name in positional.names()] + [("rope", ["pos.momentum.gamma=0.5"]),
                                                          ("alibi", ["pos.heads_fraction=0.5"])]


@pytest.mark.parametrize("scheme, overrides", SCHEMES,
                         ids=[n + "".join(f"+{o.split('=')[0].split('.')[1]}" for o in os) for n, os in SCHEMES])
def test_every_scheme_trains_on_the_device_at_auto_precision(device, scheme, overrides):
    """A real bio_rotation batch, the autocast a run with trainer.precision=auto gets there, two of the one
    training step (``lit.train_step``: AdamW, schedule, the scheme's projection): the loss is finite and every
    parameter, gradient and optimizer state stays on the device."""
    _, precision, _ = machine.choose(device, "auto")
    task, ood = tasks.build_with_ood({"name": "bio_rotation", "gap_min": 10, "gap_max": 20, "ood": {"gap_min": 20, "gap_max": 30}})
    model = _tiny_model(scheme, max(task.seq_len, ood.seq_len), overrides).to(device)
    inputs, targets = (torch.from_numpy(a).to(device) for a in draw(task.for_split("train"), 0, "train", 4))
    lit = LitLM(model, {"lr": 1e-3, "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-8, "warmup_steps": 1,
                        "min_lr_ratio": 0.1}, max_steps=2)
    member = Member.of(lit, clip=None)
    logits = []

    def loss():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision.startswith("bf16")):
            logits[:] = [model(inputs)]
        return answer_loss(logits[0], targets).reshape(1)

    for step in range(2):
        (value,) = train_step([member], loss, step)
    assert member.diverged is None and member.grad_norm is not None
    assert logits[0].device.type == device and math.isfinite(value)
    optimizer = member.optimizer
    for name, p in model.named_parameters():
        assert p.device.type == device, name
    for state in optimizer.state.values():
        for value in state.values():
            assert not torch.is_tensor(value) or value.dim() == 0 or value.device.type == device
    with torch.no_grad():  # the evaluation path (in-place MLP) on the OOD length
        ood_inputs = torch.from_numpy(draw(ood.for_split("ood"), 0, "ood", 4, grouped=True)[0]).to(device)
        assert torch.isfinite(model(ood_inputs).float()).all()


@pytest.mark.parametrize("scheme", ["rope", "alibi", "pope", "spectral"])
def test_the_device_computes_what_the_cpu_computes(device, scheme):
    """fp32 logits and gradients on the device equal the CPU's up to float rounding: ALiBi takes the CPU flash kernel
    with its bias there and plain SDPA elsewhere, PoPE pads v, spectral builds its tables per forward."""
    cpu = _tiny_model(scheme, 40)
    dev = _tiny_model(scheme, 40).to(device)
    idx = torch.randint(0, 16, (3, 40), generator=torch.Generator().manual_seed(1))
    out_cpu, out_dev = cpu(idx), dev(idx.to(device))
    out_cpu.square().mean().backward()
    out_dev.square().mean().backward()
    torch.testing.assert_close(out_dev.cpu(), out_cpu, rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-3, atol=1e-6, msg=name)


def test_a_run_through_hydra_and_lightning_on_the_device(device, tmp_path):
    """train.run with trainer.accelerator=<device>, precision auto: completes, and summary.json says where it ran."""
    from ropelab.core.train import run

    accelerator = "cuda" if device == "cuda" else "cpu"
    cfg = config.compose([*TINY, "pos=spectral", "trainer.max_steps=3", "trainer.val_every=2",
                          f"trainer.accelerator={accelerator}", "trainer.precision=auto", "task.gap_min=10",
                          "task.gap_max=20", "task.ood.gap_min=20", "task.ood.gap_max=30"])
    summary = run(cfg, tmp_path / "run")
    assert summary["status"] == "completed", summary.get("error")
    assert summary["accelerator"] == device and summary["precision"] == machine.choose(device, "auto")[1]
    assert summary["compile"] is False  # trainer.compile=auto: off until measured to pay (machine.choose_compile)
    assert math.isfinite(summary["final"]["val/loss"]) and "ood/acc" in summary["final"]
    assert (tmp_path / "run" / "positional_trace.npz").is_file()
    if device == "cuda":
        assert summary["machine"]["gpu"]


def test_the_bench_runs_on_the_device(device, tmp_path):
    from ropelab.experiments import bench

    out = tmp_path / "bench.json"
    result = bench.main(["--quick", "--silent", "--device", device, "--schemes", "rope", "alibi", "--out", str(out)])
    assert result["device"] == device and {"rope", "alibi"} <= set(result["steps"])
    assert result["precision"] == machine.choose(device, "auto")[1]
    rope = result["steps"]["rope"]
    assert rope["limit_s"] > 0 and rope["fraction_of_limit"] > 0
    if "hf" in result["steps"]:
        assert "vs_hf" in rope and "vs_hf_fp32" in rope
