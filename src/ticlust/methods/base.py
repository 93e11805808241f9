"""What every method shares: the Method base class, the method registry and config parameters (``param``,
declared in ``core.params`` so that a config two methods share can live below them).

A method is a :class:`Method` subclass: a config dataclass, a fitted-state dataclass, a ``train``
generator that yields :class:`Progress` and :class:`Snapshot` events and returns its result, and a
``predict`` that assigns new items. ``register`` makes it known to ``ticlust.fit``, the CLI and the
napari widget, which build everything else from it. The events themselves live in ``ticlust.events``
(the kernels and the alignment engine yield them too).
"""
from __future__ import annotations

import abc
import dataclasses
import random
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..errors import InputError
from ..events import Done, Event, Progress
from ..core.execute import best_of  # noqa: F401  (the minLoss loop lives in the execution seam)
from ..result import STATE_TYPES, ClusteringResult, FittedState
from ..core.params import ParamInfo, coerce, param, param_infos  # noqa: F401  (every method's config fields)


# ---- the fitted-method contract ------------------------------------------------------------------
class Method(abc.ABC):
    """A clustering method, shared like scikit-learn's ``_BaseKMeans`` is between its variants.

    A subclass sets the class attributes and writes its maths: ``train`` (a generator of Progress /
    Snapshot events that *returns* its ClusteringResult, made with :meth:`result`), ``refine`` (the same
    from an edited result) and ``predict`` (new items → a result), and ``align`` if it aligns prototypes
    onto images. The base owns the rest:
    the registered name, the config ⇄ result round trip, the typed fitted state, result assembly,
    and draining a generator (keeping the best of several runs is the execution seam's ``best_of``).
    """

    name: str = ""
    title: str = ""
    config: type = object          # the config dataclass; its first field is ``k``
    state: type = object           # the fitted-state dataclass (a result.FittedState) ``predict`` reads
    inputs: tuple[str, ...] = ("images",)   # any of "images", "vectors", "landmarks"
    paper: str = ""
    caution: str = ""              # when to pick another method: shown in the method picker's tooltip
    # align(result, one-item Stack, device, index=None) -> (every prototype aligned onto the item (K, ...),
    # its scores (K,)); ``index``: the item's place in the fitted stack, when it is one of those
    align: Callable[..., Any] | None = None
    #: What the object map embeds of an item (:meth:`embed`): "scores" (its scores to the K prototypes, the generic
    #: fallback), "pixels" (the item itself), "aligned" (the item carried onto its own prototype by its
    #: ``params/affine`` and, with a thin-plate spline, ``params/displacements``), "spectral" (its spectral
    #: coordinates, ``extras["embedding"]``), "landmarks" (its shape aligned onto the prototypes' frame, ``aligned``),
    #: "representation" (``params/representation``). Where a result lacks what its family reads, its scores.
    embeds: str = "scores"

    # ---- config ----------------------------------------------------------------------------------
    @property
    def default_k(self) -> int:
        return int(next(f for f in dataclasses.fields(self.config) if f.name == "k").default)

    def make_config(self, k: int | None = None, **params):
        """The config from user parameters (strings allowed), each checked against its limits."""
        infos = {p.name: p for p in param_infos(self.config)}
        unknown = sorted(set(params) - set(infos))
        if unknown:
            raise InputError(f"Method {self.name} has no parameter {unknown[0]!r}: its parameters are {', '.join(infos) or 'none'}.")
        return self.config(k=self.default_k if k is None else k,
                           **{name: coerce(infos[name], value) for name, value in params.items()})

    def config_of(self, result: ClusteringResult):
        """The config a result was fitted with (lists read back from JSON become tuples)."""
        names = {f.name for f in dataclasses.fields(self.config)}
        return self.config(**{key: (tuple(v) if isinstance(v, list) else v)
                              for key, v in result.config.items() if key in names})

    # ---- training --------------------------------------------------------------------------------
    @abc.abstractmethod
    def train(self, items, cfg, device: torch.device, seed: int):
        """The method's maths: yield Progress / Snapshot events, return the result (see ``result``)."""

    def run(self, items, cfg, device: torch.device, seed: int) -> Iterator[Event]:
        """One training run as events, ending with Done(result)."""
        result = yield from self.train(items, cfg, device, seed)
        yield Done(result)

    def result(self, cfg, state, **fields) -> ClusteringResult:
        """A result of this method: its name, its config and its fitted state filled in."""
        return ClusteringResult(method=self.name, config=config_dict(cfg), state=state, **fields)

    def predicted(self, fitted: ClusteringResult, **fields) -> ClusteringResult:
        """A result for new items that keeps the fitted prototypes, config and state."""
        return ClusteringResult(method=fitted.method, config=fitted.config, state=fitted.state,
                                **{"prototypes": fitted.prototypes, **fields})

    @abc.abstractmethod
    def predict(self, result: ClusteringResult, items, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """New items assigned with the fitted prototypes (and transforms); ``batch_size`` None: the config's."""

    # ---- the object map ----------------------------------------------------------------------------
    def embed(self, result: ClusteringResult, items, rows, device: torch.device) -> np.ndarray:
        """The invariant features (B, F) float32 of ``items``, which are rows ``rows`` (a slice or item numbers) of
        ``result`` (a fit, or the prediction of these items): what ``embeds`` names, read from the result's rows
        and the items. A method whose family needs another reading overrides this."""
        from ..kernels.embedding import aligned_pixels, pixels

        params, extras = result.params, result.extras
        if self.embeds == "pixels" and hasattr(items, "batch"):
            return pixels(items.batch(0, items.n))
        if self.embeds == "aligned" and "affine" in params and hasattr(items, "batch"):
            nu = params.get("displacements")
            return aligned_pixels(items.batch(0, items.n), params["affine"][rows],
                                  None if nu is None else nu[rows], device)
        if self.embeds == "spectral" and "embedding" in extras:
            return pixels(extras["embedding"][rows])
        if self.embeds == "landmarks" and result.aligned is not None:
            return pixels(result.aligned[rows])
        if self.embeds == "representation" and "representation" in params:
            return pixels(params["representation"][rows])
        return pixels(result.scores[rows])

    def with_map(self, result: ClusteringResult, items, device: torch.device, seed: int):
        """The fit's object map, learned on ``items`` (the fitted stack or landmarks) and put into ``result``: the PCA
        of a seeded sample's features (``kernels.embedding``), every item's embedding (block by block), the t-SNE
        layout of a sample of those and every item's place; the model (small arrays) goes to the extras, the
        embedding and the places to the per-item fields. A generator: a Progress per block (stage ``MAP_STAGE``; an
        aligning method's features can take as long as a short fit, DTI's inverse warps); returns ``result``."""
        from ..kernels import embedding as emb

        rng = np.random.default_rng(seed)
        n = _count(items)
        learn = np.sort(rng.choice(n, emb.PCA_SAMPLE, replace=False)) if n > emb.PCA_SAMPLE else np.arange(n)
        block = map_block(n)
        parts = np.split(learn, range(block, len(learn), block))
        steps = len(parts) + (0 if n == len(learn) else -(-n // block)) + 1
        feats = []
        for i, part in enumerate(parts):                # read a block at a time
            feats.append(self.embed(result, _rows(items, part), part, device))
            yield Progress(i + 1, steps, stage=MAP_STAGE)
        feats = np.concatenate(feats)
        mean, basis = emb.learn_pca(feats, emb.EMBED_DIMS, device, rng)
        model = emb.MapModel(mean, basis, np.zeros((0, basis.shape[1]), np.float32), np.zeros((0, 2), np.float32))
        if n == len(learn):
            embedded = model.embed(feats, device).cpu().numpy()
        else:
            embedded = []
            for s, part in _blocks(items, block):
                embedded.append(model.embed(self.embed(result, part, slice(s, s + _count(part)), device), device).cpu().numpy())
                yield Progress(len(parts) + len(embedded), steps, stage=MAP_STAGE)
            embedded = np.concatenate(embedded)
        model.anchors, model.coords = emb.learn_layout(embedded, rng)
        yield Progress(steps, steps, stage=MAP_STAGE)
        result.extras = {**result.extras, **model.to_extras()}
        result.embedding = embedded
        result.map = model.place(torch.from_numpy(embedded).to(device)).cpu().numpy()
        return result

    def extend_map(self, fitted: ClusteringResult, out: ClusteringResult, items, device: torch.device) -> ClusteringResult:
        """``out``, the prediction of ``items`` with ``fitted``, given their embedding and map places through the fit's
        model, block by block (the same for every block size: each item's place depends on it alone); unchanged when
        ``fitted`` has no map (a result saved before maps were made: ``ticlust.plate.maps.compute_map`` adds one)."""
        from ..kernels.embedding import MapModel

        model = MapModel.from_extras(fitted.extras)
        if model is None or out.n == 0:
            return out
        embedded, places = [], []
        for s, block in _blocks(items):
            z = model.embed(self.embed(out, block, slice(s, s + _count(block)), device), device)
            embedded.append(z.cpu().numpy())
            places.append(model.place(z).cpu().numpy())
        out.embedding, out.map = np.concatenate(embedded), np.concatenate(places)
        return out

    @abc.abstractmethod
    def refine(self, items, cfg, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """Re-fit from an edited result (``ticlust.curation``): a generator like ``train``, warm started from
        ``start``'s labels or prototypes (its fitted state was dropped by the edit), keeping every item with
        ``pinned`` ≥ 0 in that cluster; randomness from the fit's seed (``start.config``), so it repeats."""


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Make a method known to ``ticlust.fit``, the CLI and the widget (and its state loadable)."""
    _REGISTRY[method.name] = method
    if isinstance(method.state, type) and issubclass(method.state, FittedState):
        STATE_TYPES[method.name] = method.state
    return method


def unregister(name: str) -> None:
    """Forget a registered method (tests that register a toy method clean up with this)."""
    _REGISTRY.pop(name, None)
    STATE_TYPES.pop(name, None)


def get_method(name: str) -> Method:
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


#: Items whose map features are computed at once (``Method.with_map``, ``Method.extend_map``).
MAP_BLOCK = 4096
#: The object map's blocks while it is learned: at least this many (each item's features depend on it alone, so the
#: block size changes nothing but how often progress is told), of at least ``MAP_MIN_BLOCK`` items.
MAP_STEPS, MAP_MIN_BLOCK = 16, 64
#: The stage name of the object map's Progress events.
MAP_STAGE = "object map"


def map_block(n: int) -> int:
    """Items per block of the object map learned on ``n`` items (``MAP_STEPS``)."""
    return max(MAP_MIN_BLOCK, min(MAP_BLOCK, -(-n // MAP_STEPS)))


def _count(items) -> int:
    return int(items.n if hasattr(items, "n") else len(items))


def _rows(items, index: np.ndarray):
    """The items at ``index`` of a stack (read now) or of a landmark array."""
    return items.subset(index) if hasattr(items, "subset") else items[index]


def _blocks(items, block: int = MAP_BLOCK):
    """(start, block) of ``block`` items at a time, in order, of a stack or a landmark array."""
    if hasattr(items, "blocks"):
        yield from items.blocks(block)
        return
    for s in range(0, len(items), block):
        yield s, items[s:s + block]
