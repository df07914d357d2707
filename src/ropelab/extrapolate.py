"""``python -m ropelab.extrapolate``: the command's entry point; the code is ``ropelab.experiments.extrapolate``."""

from ropelab.experiments.extrapolate import main

if __name__ == "__main__":
    raise SystemExit(main())
