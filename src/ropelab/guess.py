"""``python -m ropelab.guess``: the command's entry point; the code is ``ropelab.analysis.guess``."""

from ropelab.analysis.guess import main

if __name__ == "__main__":
    raise SystemExit(main())
