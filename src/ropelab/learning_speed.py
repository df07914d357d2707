"""``python -m ropelab.learning_speed``: the command's entry point; the code is ``ropelab.analysis.learning_speed``."""

from ropelab.analysis.learning_speed import main

if __name__ == "__main__":
    raise SystemExit(main())
