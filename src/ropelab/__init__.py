"""ropelab in three layers, each importing only those below it (tests/project/test_layers.py holds the rule):

* ``ropelab.experiments`` — experiments and tools that compose both: the surgery experiment, the bench, the GPU
  check, the smoke matrix, calibration, length extrapolation, the W&B export;
* ``ropelab.analysis`` — what reads finished runs and records: the sweep report, statistics, the phase and momentum
  reports, frequency usage, attention maps, the guess floor, learning speed;
* ``ropelab.core`` — what a training run needs: the config and its schema, the builder, the model and its
  positional schemes, data, the Lightning module, training, callbacks, loggers, run folders, the machine, errors,
  the command line (``tasks/`` beside it is the core's too: tasks import only ``ropelab.core.errors``).

At this level is only the command line: ``ropelab <command>`` (``ropelab.cli``; ``python -m ropelab`` is the same),
each command its module's ``main(argv)``; nothing in a layer imports it.
"""
