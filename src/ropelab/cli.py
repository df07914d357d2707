"""``ropelab <command> [its arguments]``: one command line over the commands of the three layers.

Each command is its module's ``main(argv)``, handed the rest of the line untouched, so it keeps its own flags, output
and exit code (``ropelab report --help`` is the report's help). A module is imported only when its command runs:
``ropelab --help`` stays fast, and a command whose module is missing from the checkout is one line, not a traceback.
A run is not a command here: ``python train.py …`` (Hydra's command line) stays the run's entry.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command → (its module, one line for ``ropelab --help``); the module's ``main(argv)`` runs it
COMMANDS: dict[str, tuple[str, str]] = {
    "report": ("ropelab.analysis.report.cli", "a sweep's or a table's report from its records (report.md, tables, figures)"),
    "claims": ("ropelab.analysis.claims", "every declared paper claim decided from the records; --write-readme, --check"),
    "card": ("ropelab.experiments.card", "the benchmark card: score | baselines | plan | cost"),
    "campaign": ("ropelab.experiments.campaign", "every planned job without a record, run table by table (--table, --plan)"),
    "reproduce": ("ropelab.experiments.reproduce", "retrain a table's records into runs/reproduce/ and compare them"),
    "calibrate": ("ropelab.experiments.calibrate", "pick the budget and size at which the baseline learns a task"),
    "extrapolate": ("ropelab.experiments.extrapolate", "evaluate trained runs at 1x, 2x, 4x, 8x their training length"),
    "bench": ("ropelab.experiments.bench.cli", "the training step against Hugging Face's Llama (needs the hf extra)"),
    "surgery": ("ropelab.experiments.surgery.cli", "spectral surgery: pretrain rope, swap in learnable spectral RoPE, fine-tune"),
    "export": ("ropelab.experiments.wandb_export", "a table's records as offline W&B runs"),
    "smoke": ("ropelab.experiments.smoke", "one training step of every scheme on every task"),
    "gpucheck": ("ropelab.experiments.gpucheck", "the GPU path: gpu tests, a run per scheme, the bench, jobs per GPU"),
    "prune": ("ropelab.experiments.prune", "delete run folders' checkpoints under runs/ (never results/), print what it freed"),
    "depth-manifold": ("ropelab.analysis.depth_manifold", "Dyck-3 states by depth (Bifocal Fig. 3)"),
    "escape-routes": ("ropelab.analysis.escape_routes", "rotary pairs' share of the attention logits under momentum"),
    "freq-usage": ("ropelab.analysis.freq_usage", "query and key norm per frequency of trained models (PoPE)"),
    "resonance": ("ropelab.analysis.resonance", "resonance of learned frequencies (Bifocal Fig. 5)"),
    "learning-speed": ("ropelab.analysis.learning_speed", "learning speed and extrapolation, scheme against scheme"),
    "momentum-report": ("ropelab.analysis.momentum_report", "a momentum sweep's report alone (momentum.md, figures)"),
    "phase": ("ropelab.analysis.phase", "the bio_rotation phase diagram"),
    "guess": ("ropelab.analysis.guess", "the accuracy of guessing without reading the sequence (a task's floor)"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"ropelab: {message}\n")  # one line: argparse's message names the bad command and the choices


def parser() -> argparse.ArgumentParser:
    """The commands, for ``ropelab --help`` and for refusing an unknown one; the arguments after the command are not
    parsed here but by the command itself."""
    p = _Parser(prog="ropelab", formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=21, width=110),
                description="ropelab <command> --help prints that command's own arguments.",
                epilog="A run is python train.py [overrides] (make run ARGS=\"…\").")
    commands = p.add_subparsers(dest="command", metavar="<command>", title="commands", required=True)
    for name, (_, summary) in COMMANDS.items():
        commands.add_parser(name, help=summary, add_help=False)
    return p


def run(command: str, args: list[str]) -> int:
    module_name = COMMANDS[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not module_name.startswith(e.name):
            raise  # a dependency missing inside the module: its own error
        print(f"ropelab {command}: its module {module_name} is not in this checkout", file=sys.stderr)
        return 1
    returned = module.main(args)
    # the bench and surgery return their results (a dict): done is success, as their own entry points exit
    return returned if isinstance(returned, int) else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser().print_help(sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        parser().parse_args(argv[:1])  # --help (exit 0), else no command or an unknown one: one line, exit 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
