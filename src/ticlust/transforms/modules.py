"""Transformation modules (identity, colour, rigid, similarity, affine, projective, TPS, morphology) and their composition.

A module knows how many parameters it takes and how to apply them; a :class:`TransformSequence`
applies modules in order, fusing consecutive spatial modules into ONE sampling grid (one
``grid_sample`` per run of spatial modules for the whole batch), and gives the display grid
(where a lattice of the source frame lands in the target frame) of the composed spatial warp.
"""
from __future__ import annotations

import abc

import numpy as np
import torch

from . import core

MODULE_NAMES = ("identity", "color", "rigid", "similarity", "affine", "projective", "tps", "morpho")


class Module(abc.ABC):
    """A parametric transformation; zero parameters are the identity."""

    name = "module"
    spatial = False

    def __init__(self, channels: int = 1):
        self.channels = channels

    @property
    @abc.abstractmethod
    def n_params(self) -> int:
        """How many parameters one instance of this transformation takes."""

    def shaped(self, params: torch.Tensor) -> torch.Tensor:
        """The parameters in this module's natural shape, for reporting (default: flat)."""
        return params


class Identity(Module):
    name = "identity"

    @property
    def n_params(self) -> int:
        return 0

    def apply(self, images, params):
        return images


class Color(Module):
    """Per-channel affine intensity map x·(1 + a) + b (2 parameters grey, 6 RGB)."""

    name = "color"

    @property
    def n_params(self) -> int:
        return 2 * self.channels

    def apply(self, images, params):
        return core.color_apply(images, params)

    def inverse(self, params):
        return core.color_inverse(params)


class Morpho(Module):
    """Soft dilation / erosion (Eq. 6) over a k×k window: α and k² window weights."""

    name = "morpho"

    def __init__(self, channels: int = 1, kernel_size: int = 7):
        super().__init__(channels)
        self.kernel_size = kernel_size

    @property
    def n_params(self) -> int:
        return 1 + self.kernel_size ** 2

    def apply(self, images, params):
        return core.morpho_apply(images, params, self.kernel_size)


class Spatial(Module):
    """A warp given by a map of points: output pixel q reads the input at ``points(params, q)``."""

    spatial = True

    def grid(self, params, size):
        pts = core.identity_points(size, params.device, params.dtype).reshape(-1, 2)
        return self.points(params, pts).reshape(*params.shape[:-1], *size, 2)


class Affine(Spatial):
    """A general affine map (6 parameters: the 2×3 matrix minus the identity's)."""

    name = "affine"

    @property
    def n_params(self) -> int:
        return 6

    def as_affine(self, params):
        """The affine parameters (..., 6) of this module's parameters."""
        return params

    def points(self, params, pts):
        return core.affine_points(self.as_affine(params), pts)

    def grid(self, params, size):
        return core.affine_grid(self.as_affine(params), size)

    def inverse(self, params):
        """Affine parameters (..., 6) of the inverse maps."""
        return core.affine_inverse(self.as_affine(params))

    def inverse_points(self, params, pts):
        return core.affine_points(self.inverse(params), pts)

    def shaped(self, params):
        return core.affine_matrix(self.as_affine(params))


class Similarity(Affine):
    """Rotation, isotropic scale and shift (4 parameters: angle, log-scale, t_x, t_y): keeps shape."""

    name = "similarity"

    @property
    def n_params(self) -> int:
        return 4

    def as_affine(self, params):
        return core.similarity_affine(params)


class Rigid(Similarity):
    """Rotation and shift (3 parameters: angle, t_x, t_y): keeps shape and size."""

    name = "rigid"

    @property
    def n_params(self) -> int:
        return 3


class Projective(Spatial):
    name = "projective"

    @property
    def n_params(self) -> int:
        return 8

    def points(self, params, pts):
        return core.projective_points(params, pts)

    def grid(self, params, size):
        return core.projective_grid(params, size)

    def inverse(self, params):
        return core.projective_inverse(params)

    def inverse_points(self, params, pts):
        return core.projective_points(self.inverse(params), pts)

    def shaped(self, params):
        return core.projective_matrix(params)


class TPS(Spatial):
    """Thin-plate spline with fixed source landmarks on a g×g grid (2·g² parameters)."""

    name = "tps"

    def __init__(self, channels: int = 1, grid_size: int = 4):
        super().__init__(channels)
        self.grid_size = grid_size

    @property
    def n_params(self) -> int:
        return 2 * self.grid_size ** 2

    def points(self, params, pts):
        return core.tps_points(params, pts, self.grid_size)

    def grid(self, params, size):
        return core.tps_grid(params, size, self.grid_size)

    def inverse_points(self, params, pts):
        return core.tps_inverse_points(params, pts, self.grid_size)

    def shaped(self, params):
        return params.reshape(*params.shape[:-1], self.grid_size ** 2, 2)


def make_module(name: str, channels: int = 1, tps_grid_size: int = 4, kernel_size: int = 7) -> Module:
    """A module by name (one of MODULE_NAMES)."""
    if name == "identity":
        return Identity(channels)
    if name == "color":
        return Color(channels)
    if name == "rigid":
        return Rigid(channels)
    if name == "similarity":
        return Similarity(channels)
    if name == "affine":
        return Affine(channels)
    if name == "projective":
        return Projective(channels)
    if name == "tps":
        return TPS(channels, tps_grid_size)
    if name == "morpho":
        return Morpho(channels, kernel_size)
    raise ValueError(f"unknown transformation {name!r}: choose from {', '.join(MODULE_NAMES)}")


class TransformSequence:
    """Modules applied in order: T = T_M ∘ … ∘ T_1 (T_1 acts first on the image).

    ``apply(images, params)`` takes images (..., C, H, W) and one parameter tensor per module
    (..., P_m) with broadcastable leading dims, e.g. prototypes (1, K, C, H, W) and parameters
    (B, K, P_m) for all B×K prototype-on-item warps in one call.
    """

    def __init__(self, names, size: tuple[int, int], channels: int = 1, tps_grid_size: int = 4, kernel_size: int = 7):
        self.names = tuple(names)
        self.size = tuple(size)
        self.channels = channels
        self.modules = [make_module(n, channels, tps_grid_size, kernel_size) for n in self.names]

    @property
    def n_params(self) -> list[int]:
        return [m.n_params for m in self.modules]

    def spatial_grid(self, params: list[torch.Tensor], modules: list[Module]) -> torch.Tensor:
        """The one sampling grid of consecutive spatial modules: q ↦ g_1(g_2(…g_m(q)))."""
        grid = modules[-1].grid(params[-1], self.size)
        lead = grid.shape[:-3]
        pts = grid.reshape(*lead, -1, 2)
        for m, p in zip(reversed(modules[:-1]), reversed(params[:-1])):
            pts = m.points(p, pts)
        return pts.reshape(*pts.shape[:-2], *self.size, 2)

    def apply(self, images: torch.Tensor, params: list[torch.Tensor | None], active: int | None = None,
              spatial_only: bool = False, padding_mode: str = "border") -> torch.Tensor:
        """Transform ``images``; only the first ``active`` modules (all by default) are used.

        ``spatial_only`` skips colour and morphology (the T* of DTI GMM, used for variances).
        """
        mods = self.modules[: len(self.modules) if active is None else active]
        x = images
        pending: list[tuple[Module, torch.Tensor]] = []

        def flush(x):
            if pending:
                grid = self.spatial_grid([p for _, p in pending], [m for m, _ in pending])
                x = core.warp(x, grid, padding_mode=padding_mode)
                pending.clear()
            return x

        for m, p in zip(mods, params):
            if m.n_params == 0:
                continue
            if m.spatial:
                pending.append((m, p))
            elif not spatial_only:
                x = flush(x)
                x = m.apply(x, p)
        return flush(x)

    def display_points(self, params: list[torch.Tensor | None], pixels: torch.Tensor, active: int | None = None,
                       inverse: bool = True) -> torch.Tensor:
        """Where pixel positions (..., M, 2) of the source frame land under the composed spatial warp.

        With ``inverse`` (prototype-on-item: the output is the item's frame) this maps prototype
        positions into the item frame, g⁻¹ = g_M⁻¹ ∘ … ∘ g_1⁻¹ (exact for affine/projective, an
        iterative approximation for TPS). Without it, the forward sampling map g = g_1 ∘ … ∘ g_M
        (item-on-prototype: where each prototype position reads the item). Pixels in, pixels out.
        """
        mods = self.modules[: len(self.modules) if active is None else active]
        spatial = [(m, p) for m, p in zip(mods, params) if m.spatial and m.n_params]
        pts = core.to_normalized(pixels, self.size)
        if inverse:
            for m, p in spatial:
                pts = m.inverse_points(p, pts)
        else:
            for m, p in reversed(spatial):
                pts = m.points(p, pts)
        return core.to_pixels(pts, self.size)

    def display_grid(self, params: list[torch.Tensor | None], lattice: tuple[int, int] = (10, 10),
                     active: int | None = None, inverse: bool = True) -> torch.Tensor:
        """(…, gh, gw, 2) pixel positions of a regular gh×gw lattice of the source frame (see display_points)."""
        mods = self.modules[: len(self.modules) if active is None else active]
        used = [p for m, p in zip(mods, params) if m.spatial and m.n_params]
        dtype = used[0].dtype if used else torch.float32
        device = used[0].device if used else None
        lead = np.broadcast_shapes(*[p.shape[:-1] for p in used]) if used else ()
        lat = core.lattice_pixels(self.size, lattice, device, dtype).reshape(-1, 2)
        out = self.display_points(params, lat, active, inverse)
        return out.expand(*lead, *out.shape[-2:]).reshape(*lead, *lattice, 2)
