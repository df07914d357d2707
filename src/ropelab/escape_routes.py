"""``python -m ropelab.escape_routes``: the command's entry point; the code is ``ropelab.analysis.escape_routes``."""

from ropelab.analysis.escape_routes import main

if __name__ == "__main__":
    raise SystemExit(main())
