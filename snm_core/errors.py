"""The one exception type for bad user input: the CLI turns it into exit status 2."""


class SnmInputError(ValueError):
    """Input that cannot be used (file, option, configuration); the message says what to change."""
