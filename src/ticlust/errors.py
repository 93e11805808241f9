"""The one exception a user can cause."""


class InputError(ValueError):
    """Bad input, with one sentence that names the problem and the fix."""
