"""normdiff: differential testing of LLM normalization layers.

The code lives in the top-level folders harness/, implementations/, cases/ and reports/, installed
as normdiff.harness, normdiff.implementations, normdiff.cases and normdiff.reports.
"""
__version__ = "0.1.0"
