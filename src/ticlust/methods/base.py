"""What every method shares: config parameters, training events, and the method registry (GUIDE §2).

A method is a config dataclass plus a ``run(data, cfg, device, seed)`` generator that yields
:class:`Progress` and :class:`Snapshot` events and finally a :class:`Done` carrying the result,
and a ``predict(result, data, device)`` that assigns new items. ``register`` makes it known to
``ticlust.fit``, the CLI and the napari widget, which build everything else from the spec.
"""
from __future__ import annotations

import dataclasses
import random
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..data import InputError


# ---- events --------------------------------------------------------------------------------------
@dataclass
class Progress:
    """A step of training: ``step`` of ``total`` done, the current loss, and what stage this is."""

    step: int
    total: int
    loss: float = float("nan")
    stage: str = ""
    eta: float | None = None  # seconds left, filled in by ticlust.api.run


@dataclass
class Snapshot:
    """Current prototypes, for a live view (K, *item_shape)."""

    prototypes: np.ndarray


@dataclass
class Done:
    """Training finished; ``result`` is the ClusteringResult."""

    result: Any


Event = typing.Union[Progress, Snapshot, Done]


# ---- parameters ----------------------------------------------------------------------------------
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
    """Turn ``value`` (possibly a string from the command line) into the parameter's type, checking limits."""
    kind = typing.get_origin(info.type) or info.type
    try:
        if isinstance(value, str) and kind is not str:
            text = value.strip()
            if kind is bool:
                if text.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(text)
                value = text.lower() in ("1", "true", "yes", "on")
            elif kind is tuple:
                value = tuple(t.strip() for t in text.split(",") if t.strip())
            elif kind is typing.Union:  # Optional[...]: "none" means None
                inner = [a for a in typing.get_args(info.type) if a is not type(None)][0]
                value = None if text.lower() == "none" else inner(text)
            else:
                value = kind(float(text)) if kind is int else kind(text)
        elif kind is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        elif kind is float and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            value = float(value)
        elif kind is tuple and isinstance(value, list):
            value = tuple(value)
    except (TypeError, ValueError):
        raise InputError(f"Parameter {info.name} = {value!r} is not a valid {getattr(kind, '__name__', kind)}.") from None
    if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise InputError(f"Parameter {info.name} = {value!r} must be a number.")
    if info.choices is not None:
        items = value if isinstance(value, tuple) else (value,)
        bad = [v for v in items if v not in info.choices]
        if bad:
            raise InputError(f"Parameter {info.name} = {bad[0]!r} is not allowed: choose from {', '.join(map(str, info.choices))}.")
    if info.low is not None and value is not None and value < info.low:
        raise InputError(f"Parameter {info.name} = {value} is too small: it must be at least {info.low}.")
    if info.high is not None and value is not None and value > info.high:
        raise InputError(f"Parameter {info.name} = {value} is too large: it must be at most {info.high}.")
    return value


# ---- registry ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MethodSpec:
    """Everything the front ends need to know about a method."""

    name: str
    title: str
    config: type
    run: Callable[..., Iterator[Event]]
    predict: Callable[..., Any]
    inputs: tuple[str, ...] = ("images",)   # any of "images", "vectors", "landmarks"
    paper: str = ""
    # align(result, one-item Stack, device) -> (every prototype aligned onto the item (K, ...), scores (K,));
    # for methods that align; the inspector falls back to the plain prototypes without it.
    align: Callable[..., Any] | None = None

    def make_config(self, k: int, **params):
        infos = {p.name: p for p in param_infos(self.config)}
        unknown = sorted(set(params) - set(infos))
        if unknown:
            raise InputError(f"Method {self.name} has no parameter {unknown[0]!r}: its parameters are {', '.join(infos) or 'none'}.")
        return self.config(k=k, **{name: coerce(infos[name], value) for name, value in params.items()})


_REGISTRY: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    _REGISTRY[spec.name] = spec
    return spec


def get_method(name: str) -> MethodSpec:
    if name not in _REGISTRY:
        raise InputError(f"Unknown method {name!r}: choose one of {', '.join(_REGISTRY)}.")
    return _REGISTRY[name]


def available_methods() -> list[str]:
    return list(_REGISTRY)


# ---- shared helpers for method implementations ---------------------------------------------------
def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and torch (CPU and CUDA); returns a NumPy generator for the method's own draws."""
    random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def config_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def own_and_runner_up(dist: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From (N, K) costs and each item's cluster: its own cost, its runner-up's cost and that runner-up (N,).

    Swap moves (ST K-means, DTI) price dropping a centroid by what its members pay at their runner-up.
    """
    own = dist.gather(1, labels[:, None])[:, 0]
    others = dist.scatter(1, labels[:, None], float("inf")).min(1)
    return own, others.values, others.indices
