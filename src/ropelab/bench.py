"""``python -m ropelab.bench``: the command's entry point; the code is ``ropelab.experiments.bench``."""

from ropelab.experiments.bench import main

if __name__ == "__main__":
    main()
