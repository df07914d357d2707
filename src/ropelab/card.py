"""``python -m ropelab.card``: the benchmark card's command (``make card``); the code is ``ropelab.experiments.card``."""

from ropelab.experiments.card import main

if __name__ == "__main__":
    raise SystemExit(main())
