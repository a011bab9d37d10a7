"""Scoring: a model's scoring arrays in their layouts, line and state scoring, the model card."""
