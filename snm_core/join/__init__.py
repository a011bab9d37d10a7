"""The join: held-out events and small M (``snm join``'s logic)."""
