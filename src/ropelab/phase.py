"""``python -m ropelab.phase``: the command's entry point; the code is ``ropelab.analysis.phase``."""

from ropelab.analysis.phase import main

if __name__ == "__main__":
    raise SystemExit(main())
