"""``python -m ropelab.reproduce``: the command's entry point; the code is ``ropelab.experiments.reproduce``."""

from ropelab.experiments.reproduce import main

if __name__ == "__main__":
    raise SystemExit(main())
