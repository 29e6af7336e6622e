"""Batch entry points: a thin CLI over the pipeline library (``dhash``, ``python -m dhash.jobs``)."""
