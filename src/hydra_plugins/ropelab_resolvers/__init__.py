"""Registers ropelab's resolvers in every Hydra app that composes conf/ (Hydra imports each ``hydra_plugins`` module
before it loads a config): ``${ropelab_job_name_excludes:}``, conf/config.yaml's job-name excludes
(``ropelab.core.identity``), resolves in a joblib worker or a test's own ``@hydra.main`` as in train.py."""

from ropelab.core import identity  # noqa: F401  (registers the resolver on import)
