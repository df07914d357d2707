"""``python -m ropelab.surgery_experiment``: the command's entry point; the code is ``ropelab.experiments.surgery``."""

from ropelab.experiments.surgery import main

if __name__ == "__main__":
    main()
