"""Sampling text from a model (``snm sample``)."""
