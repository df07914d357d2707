"""``python -m ropelab.claims``: the command's entry point; the code is ``ropelab.analysis.claims``."""

from ropelab.analysis.claims import main

if __name__ == "__main__":
    raise SystemExit(main())
