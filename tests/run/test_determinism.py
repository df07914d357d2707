"""Bit-identical runs (issue 24): the same config, seed, machine, precision and thread count give the same numbers
in every process. Two identical 20-step runs once differed from step 0 on the 2-core AMX Xeon (README
"Determinism"); these tests perturb what can differ between two processes of the same command — where the heap
puts each tensor, and the process itself — and compare the first training step bit for bit: its loss and every
gradient, at the default model size (the tiny test model takes other kernel paths)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import HANG_GUARD_S, ROOT, run_train, torch_threads_kept

HERE = Path(__file__).resolve().parent  # where a fresh process finds this module to import it


def first_step_fingerprint(threads: int) -> dict:
    """The default run's first training step (bio_rotation, spectral, seed 0, precision auto), the step every run
    takes (``ropelab.core.lit.train_step``): its loss and a digest of the loss and every gradient."""
    from ropelab.core import machine
    from ropelab.core.build import build
    from ropelab.core.config import compose
    from ropelab.core.data import TrainStream
    from ropelab.core.lit import Member, answer_loss, train_step

    cfg = compose(["task=bio_rotation", "pos=spectral", "seed=0"])
    built = build(cfg)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)  # as Lightning's deterministic=True
    _, precision, _ = machine.choose("cpu", "auto")
    inputs, targets = next(iter(TrainStream(built.task.for_split("train"), 0, cfg.data.batch_size)))
    losses = []

    def loss():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            losses.append(answer_loss(built.model(inputs), targets).reshape(1))
        return losses[0]

    digest = hashlib.sha256()

    def fingerprint():  # the loss and every gradient, before the step clips and applies them
        digest.update(losses[0].detach().numpy().tobytes())
        for p in built.model.parameters():
            digest.update(p.grad.numpy().tobytes())

    value, = train_step([Member.of(built.lit, cfg.trainer.gradient_clip_val)], loss, 0, fingerprint)
    return {"loss": value, "digest": digest.hexdigest(), "precision": precision}


def first_step(threads: int, ballast: list[int]) -> dict:
    """``first_step_fingerprint`` in a fresh process whose heap first holds tensors of ``ballast`` sizes, which
    shifts where every later tensor lands."""
    code = (f"import json, sys, torch; sys.path[:0] = [{str(HERE)!r}, {str(ROOT / 'tests')!r}, {str(ROOT)!r}]; "
            f"ballast = [torch.empty(n) for n in {ballast!r}]; "
            f"from test_determinism import first_step_fingerprint; print(json.dumps(first_step_fingerprint({threads})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_first_step_is_bit_identical_in_every_process_whatever_the_heap():
    """This process (its heap as the tests before left it) against a fresh one with its heap shifted."""
    with torch_threads_kept():
        deterministic = torch.are_deterministic_algorithms_enabled()
        try:
            here = first_step_fingerprint(2)
        finally:
            torch.use_deterministic_algorithms(deterministic)
    there = first_step(2, [1237, 3, 77777])
    assert here["digest"] == there["digest"], (here, there)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_the_first_step_is_bit_identical_over_many_processes(threads):
    """The issue's failure was one run in ten: ten processes at each thread count."""
    runs = [first_step(threads, [17 * i, i * i]) for i in range(10)]
    assert len({r["digest"] for r in runs}) == 1, [r["loss"] for r in runs]


@pytest.mark.slow
def test_two_runs_of_the_same_command_write_the_same_metrics(tmp_path):
    """The issue's command, at 20 steps, twice."""
    written = []
    for name in ("a", "b"):
        result = run_train("task=bio_rotation", "pos=spectral", "trainer.max_steps=20", f"hydra.run.dir={name}",
                           cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        written.append((tmp_path / name / "metrics.csv").read_text())
    assert written[0] == written[1]
