#!/usr/bin/env python
"""python train.py task=<task> pos=<scheme> seed=<int> [trainer.max_steps=…] — see README."""

import sys

from ropelab.core.cli import check_overrides

if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    from ropelab.core.train import entry

    entry()
