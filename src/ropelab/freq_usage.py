"""``python -m ropelab.freq_usage``: the command's entry point; the code is ``ropelab.analysis.freq_usage``."""

from ropelab.analysis.freq_usage import main

if __name__ == "__main__":
    raise SystemExit(main())
