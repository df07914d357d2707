"""``python -m ropelab <command>``: the ``ropelab`` command line where its console script is not on the PATH."""

import sys

from ropelab.cli import main

sys.exit(main())
