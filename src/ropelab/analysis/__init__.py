"""Analyses of finished runs and records (reports, statistics). Import ``ropelab.core``, never
``ropelab.experiments``."""
