"""``python -m ropelab.report``: the command's entry point; the code is ``ropelab.analysis.report``."""
