import sys

from ropelab.analysis.report.cli import main

sys.exit(main())
