"""``python -m ropelab.gpucheck``: the command's entry point; the code is ``ropelab.experiments.gpucheck``."""

from ropelab.experiments.gpucheck import main

if __name__ == "__main__":
    raise SystemExit(main())
