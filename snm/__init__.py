"""Command-line interface of the SNM language-model toolkit (``snm``)."""
