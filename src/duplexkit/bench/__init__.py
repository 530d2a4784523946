"""The benchmark runner: datasets, the sample lifecycle, the retry policy, artifacts, judging and reports."""
