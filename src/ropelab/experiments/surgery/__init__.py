"""The surgery experiment (issue 15; ``ropelab surgery``, ``make surgery``); the transform it tests
is ``ropelab.core.surgery``. By job: ``training`` (runs and arms), ``swap`` (outputs unchanged at the swap), ``phase``
(Ω drift, the Φ saw-tooth), ``report`` (README.md, surgery.json, surgery.png), ``cli`` (the command, documented there).
"""

from ropelab.experiments.surgery.cli import main

__all__ = ["main"]
