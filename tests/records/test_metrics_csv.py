"""metrics.csv: RunCSVLogger writes the file Lightning's CSVLogger writes, but keeps what a folder already holds."""

import torch
from lightning.pytorch.loggers import CSVLogger

from ropelab.core.loggers import RunCSVLogger, truncate_metrics

# what a run logs: training rows every step, validation rows (a new metric widens the header), test rows
STEPS = [({"train/loss": torch.tensor(2.5 - s / 7), "train/lr": 1e-4 * (s + 1), "epoch": 0}, s) for s in range(7)]
STEPS[4][0].update({"val/loss": torch.tensor(2.0), "val/acc": torch.tensor(0.25), "pos/omega_mean": 0.5})
STEPS.append(({"test/exact": torch.tensor(0.125), "epoch": 0}, 6))


def _log(logger, steps):
    for metrics, step in steps:
        logger.log_metrics(dict(metrics), step)
        if step == 4:  # FlushLoggers: a save after each validation
            logger.save()
    logger.finalize("success")


def test_a_fresh_file_is_lightnings_byte_for_byte(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    _log(RunCSVLogger(str(ours), flush_logs_every_n_steps=3), STEPS)
    _log(CSVLogger(str(theirs), name="", version="", flush_logs_every_n_steps=3), STEPS)
    assert (ours / "metrics.csv").read_bytes() == (theirs / "metrics.csv").read_bytes()


def test_a_restart_keeps_the_rows_before_its_checkpoint(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for d in (straight, resumed):
        d.mkdir()
    _log(RunCSVLogger(str(straight), flush_logs_every_n_steps=3), STEPS)
    _log(RunCSVLogger(str(resumed), flush_logs_every_n_steps=3), STEPS[:3])  # killed after step 2
    truncate_metrics(resumed / "metrics.csv", 2)  # the checkpoint is of step 2: step 2 is logged again
    _log(RunCSVLogger(str(resumed), flush_logs_every_n_steps=3), STEPS[2:])
    assert (resumed / "metrics.csv").read_bytes() == (straight / "metrics.csv").read_bytes()
