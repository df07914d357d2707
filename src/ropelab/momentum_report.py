"""``python -m ropelab.momentum_report``: the command's entry point; the code is ``ropelab.analysis.momentum_report``."""

from ropelab.analysis.momentum_report import main

if __name__ == "__main__":
    raise SystemExit(main())
