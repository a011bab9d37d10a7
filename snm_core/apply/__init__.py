"""Apply: the fitted adjustment applied to the counts (``snm apply``)."""
