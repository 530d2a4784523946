"""Full-Duplex-Bench v1 / v1.5 (arXiv 2503.04721, 2507.23159): pauses, backchannels, turn-taking and
interruptions."""
