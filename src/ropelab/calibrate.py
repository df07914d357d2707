"""``python -m ropelab.calibrate``: the command's entry point; the code is ``ropelab.experiments.calibrate``."""

from ropelab.experiments.calibrate import main

if __name__ == "__main__":
    raise SystemExit(main())
