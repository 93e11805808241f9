"""Config parameters: a config dataclass field with its one-line doc and limits (``param``), read back for the
CLI, the widget and the API (``param_infos``) and checked when a user sets one (``coerce``).

Below the methods: a config shared by two methods (``kernels.pssc.PSSCConfig``) is declared in the lower room
that holds what they share, with the same fields as a method's own.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError


def param(default, doc: str, *, choices: tuple | None = None, low: float | None = None,
          high: float | None = None, gui: bool = True, essential: bool = False):
    """A config field with a one-line doc (shown as tooltip and in ``ticlust methods``) and limits.

    ``essential``: shown at the top of the widget's form; the others wait under "Advanced"."""
    meta = {"doc": doc, "choices": choices, "low": low, "high": high, "gui": gui, "essential": essential}
    if isinstance(default, (list, dict, np.ndarray)):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ParamInfo:
    name: str
    type: type
    default: Any
    doc: str
    choices: tuple | None
    low: float | None
    high: float | None
    gui: bool
    essential: bool = False


def param_infos(config_cls) -> list[ParamInfo]:
    """The parameters of a config class, except ``k`` (asked for separately everywhere)."""
    hints = typing.get_type_hints(config_cls)
    infos = []
    for f in dataclasses.fields(config_cls):
        if f.name == "k":
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        meta = dict(f.metadata)
        infos.append(ParamInfo(f.name, hints[f.name], default, meta.get("doc", ""), meta.get("choices"),
                               meta.get("low"), meta.get("high"), meta.get("gui", True),
                               meta.get("essential", False)))
    return infos


def coerce(info: ParamInfo, value):
    """Turn ``value`` (possibly a string from the command line, or a NumPy scalar) into the parameter's
    type, checking limits. Whole numbers must be whole and finite numbers finite: nothing is rounded."""
    kind = typing.get_origin(info.type) or info.type
    if kind is typing.Union:  # Optional[...]: None or "none" means None
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            return None
        kind = [a for a in typing.get_args(info.type) if a is not type(None)][0]
    if isinstance(value, np.generic):
        value = value.item()
    try:
        value = _converted(kind, value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"Parameter {info.name} = {value!r} is not a valid {_kind_word(kind)}.") from None
    if info.choices is not None:
        items = value if isinstance(value, tuple) else (value,)
        bad = [v for v in items if v not in info.choices]
        if bad:
            raise InputError(f"Parameter {info.name} = {bad[0]!r} is not allowed: choose from {', '.join(map(str, info.choices))}.")
    if info.low is not None and value < info.low:
        raise InputError(f"Parameter {info.name} = {value} is too small: it must be at least {info.low}.")
    if info.high is not None and value > info.high:
        raise InputError(f"Parameter {info.name} = {value} is too large: it must be at most {info.high}.")
    return value


def _kind_word(kind) -> str:
    return {int: "whole number", float: "finite number", bool: "true/false value", tuple: "comma-separated list",
            str: "text"}.get(kind, getattr(kind, "__name__", str(kind)))


def _converted(kind, value):
    """``value`` as ``kind``, or ValueError/TypeError; strings are parsed, other types must already fit."""
    if kind is bool:
        if isinstance(value, str):
            text = value.strip().lower()
            if text not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(text)
            return text in ("1", "true", "yes", "on")
        if not isinstance(value, bool):
            raise TypeError(value)
        return value
    if kind is int:
        number = float(value.strip()) if isinstance(value, str) else value
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) or number != int(number):
            raise ValueError(value)
        return int(number)
    if kind is float:
        number = float(value.strip()) if isinstance(value, str) else value
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise ValueError(value)
        return float(number)
    if kind is tuple:
        if isinstance(value, str):
            return tuple(t.strip() for t in value.split(",") if t.strip())
        if not isinstance(value, (list, tuple)):
            raise TypeError(value)
        return tuple(value)
    if kind is str and not isinstance(value, str):
        raise TypeError(value)
    return value
