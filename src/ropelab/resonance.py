"""``python -m ropelab.resonance``: the command's entry point; the code is ``ropelab.analysis.resonance``."""

from ropelab.analysis.resonance import main

if __name__ == "__main__":
    raise SystemExit(main())
