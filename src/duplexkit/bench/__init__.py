"""The benchmark layer: a shared harness and one package per benchmark.

The harness: `runner` (sample lifecycle, capacity waits, retry policy from `retry`), `artifacts` (the atomic,
resumable run folder), `sources` and `media` (dataset plumbing and media preparation), `aggregate`, `judge/`
(judge protocol, chat client, lenient parsing, `score_run`) and `report/` (the HTML report framework). Each
benchmark package (`omni_duplex_eval/`, ...) supplies its hooks as `BENCHMARK`; see `benchmark`.
"""
