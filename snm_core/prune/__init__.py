"""Pruning a model to a size: the bucket criteria and relative entropy in the back-off form."""
