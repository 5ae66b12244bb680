"""Micro-benchmarks of the rating engines (``stream-rater bench ...``)."""
