"""``python -m ropelab.smoke``: the command's entry point; the code is ``ropelab.experiments.smoke``."""

from ropelab.experiments.smoke import main

if __name__ == "__main__":
    raise SystemExit(main())
