"""The one exception a user can cause."""


class InputError(ValueError):
    """Bad input, with one sentence that names the problem and the fix."""


def whole_number(value, name: str, low: int, unit: str = "", none_means: str = "") -> int:
    """``value`` as an int if it is a whole number of at least ``low`` (not a bool, not a float), else the one
    sentence every count in the package answers with: "crop_size=3 must be a whole number of pixels, at least 4
    (or None: fit the objects)." Lives here, beside the error, so light modules check counts without torch."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        of = f" of {unit}" if unit else ""
        otherwise = f" (or None: {none_means})" if none_means else ""
        raise InputError(f"{name}={value!r} must be a whole number{of}, at least {low}{otherwise}.")
    return int(value)
