"""``python -m ropelab.wandb_export``: the command's entry point; the code is ``ropelab.experiments.wandb_export``."""

from ropelab.experiments.wandb_export import main

if __name__ == "__main__":
    raise SystemExit(main())
