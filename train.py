#!/usr/bin/env python
"""python train.py task=<task> pos=<scheme> seed=<int> [trainer.max_steps=…] — see README."""

import sys

from ropelab.cli import check_group_choices

if __name__ == "__main__":
    check_group_choices(sys.argv[1:])
    from ropelab.train import main

    main()
