"""The core: what a training run needs (``python train.py``). Imports neither ``ropelab.analysis`` nor
``ropelab.experiments``."""
