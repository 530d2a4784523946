"""The configuration error every layer of the harness raises (run options, judge settings, scoring
options), kept in a leaf module so the benchmark hooks, the judge settings and the benchmarks share it
without importing each other."""

from __future__ import annotations


class ConfigError(ValueError):
    """A run, judge or scoring configuration a benchmark refuses; the message names the option to change."""
