import sys

from ropelab.report.cli import main

sys.exit(main())
