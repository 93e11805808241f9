"""ticlust's hand-written image maths against kornia's equivalents: speed, results, gradients, determinism.

Every pair (ours, kornia's) is run on the CPU at fixed torch thread counts (``--threads``, default 1 and 2) on the
shapes ticlust uses: batches of 32×32 and 64×64 images with 1 to 5 channels, 2,000 to 20,000 (item, prototype)
warps. Per pair and shape:

- time: the median of ``--repeats`` runs of each, ours and kornia's interleaved (their order alternating) so that
  load from other jobs on the shared cores falls on both; the ratio is the median of the per-repeat ratios
  kornia / ours (> 1: kornia slower). Where ticlust differentiates through the function, forward + backward too;
- results: the largest absolute difference of the outputs in float32 and in float64 (float64 tells roundoff from
  another formula: the same maths agrees to ~1e-15 there), and of the gradients (relative to their largest value);
- determinism: two runs of each, outputs and gradients bit for bit.

Every measured row is appended to benchmarks/results/kornia.jsonl (beside ``--out``), so that pairs can be measured in
several runs (``--only``); benchmarks/results/kornia.md (``--out``) is rebuilt from it after every run (``--report``:
only that), with the machine, its load and the date.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

try:
    import kornia
except ImportError:
    raise SystemExit("kornia is not installed: pip install -c constraints.txt kornia (measured with kornia 0.9.0).") from None
from kornia.filters import gaussian_blur2d, get_gaussian_kernel2d, spatial_gradient
from kornia.geometry.conversions import angle_to_rotation_matrix, convert_affinematrix_to_homography, denormalize_homography
from kornia.geometry.grid import create_meshgrid
from kornia.geometry.linalg import transform_points
from kornia.geometry.transform import (get_rotation_matrix2d, get_tps_transform, invert_affine_transform, remap, rotate,
                                       warp_affine, warp_points_tps)

from ticlust.methods.dti import gaussian_weights
from ticlust.transforms.align import gaussian_lowpass, image_slopes
from ticlust.transforms.core import (affine_grid, affine_inverse, affine_matrix, identity_points, projective_matrix,
                                     projective_points, similarity_affine, tps_basis, tps_grid, warp)
from ticlust.transforms.rigid import angle_count, rotations, turned_prototypes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import load_average  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


# ---- kornia's side of every pair, in ticlust's conventions --------------------------------------------------------
def k_lowpass(images, sigma):
    """gaussian_blur2d with our kernel: radius ceil(3σ), zeros outside."""
    k = 2 * max(1, int(math.ceil(3 * sigma))) + 1
    return gaussian_blur2d(images, (k, k), (sigma, sigma), border_type="constant")


def k_slopes(images, padding):
    """spatial_gradient('diff') in grid units; kornia pads by replicating, so zeros padding pads first and crops."""
    h, w = images.shape[-2:]
    if padding == "zeros":
        g = spatial_gradient(F.pad(images, (1, 1, 1, 1)), mode="diff", normalized=False)[..., 1:-1, 1:-1]
    else:
        g = spatial_gradient(images, mode="diff", normalized=False)
    return torch.cat([images, g[:, :, 0] * (w / 4), g[:, :, 1] * (h / 4)], -3)   # kernel [-1, 0, 1]: w/2 px per unit, halved


def k_similarity(params):
    """get_rotation_matrix2d about the origin (degrees, kornia's opposite sense), the shift added."""
    p = params.reshape(-1, params.shape[-1])
    s = torch.exp(p[:, 1]) if p.shape[-1] == 4 else torch.ones_like(p[:, 0])
    m = get_rotation_matrix2d(torch.zeros_like(p[:, :2]), -torch.rad2deg(p[:, 0]), torch.stack([s, s], -1))
    m = torch.cat([m[..., :2], p[:, -2:, None]], -1) - torch.eye(2, 3, dtype=p.dtype)
    return m.reshape(*params.shape[:-1], 6)


def k_rotations(angles, flips):
    r = angle_to_rotation_matrix(-torch.rad2deg(angles))
    fx = torch.where(flips, -torch.ones_like(angles), torch.ones_like(angles))
    return r * torch.stack([fx, torch.ones_like(fx)], -1)[..., None, :]


def k_affine_grid(params, size):
    """transform_points of the homogeneous 3×3 maps on the pixel centres."""
    m = convert_affinematrix_to_homography(affine_matrix(params).reshape(-1, 2, 3))
    pts = identity_points(size, params.device, params.dtype).reshape(1, -1, 2).expand(m.shape[0], -1, -1)
    return transform_points(m, pts).reshape(*params.shape[:-1], *size, 2)


def k_projective_points(params, points):
    h = projective_matrix(params).reshape(-1, 3, 3)
    return transform_points(h, points.expand(h.shape[0], -1, -1))


def k_affine_inverse(params):
    inv = invert_affine_transform(affine_matrix(params).reshape(-1, 2, 3))
    return (inv - torch.eye(2, 3, dtype=params.dtype)).reshape(params.shape)


def k_tps_grid(displacements, size):
    """get_tps_transform from the control points to their displaced copies, warp_points_tps on the pixel centres."""
    disp = displacements
    n = disp.shape[0]
    src = tps_basis(int(round(math.sqrt(disp.shape[-2])))).sources.to(disp.dtype).expand(n, -1, -1)
    dst = src + disp
    kw, aw = get_tps_transform(src, dst)
    pts = identity_points(size, disp.device, disp.dtype).reshape(1, -1, 2).expand(n, -1, -1)
    return warp_points_tps(pts, dst, kw, aw).reshape(n, *size, 2)


def ours_warp_affine(images, theta):
    """Items (B, C, H, W) by the (B, K) affine maps: ticlust's affine_grid + warp."""
    return warp(images[:, None], affine_grid(theta, tuple(images.shape[-2:])), padding_mode="zeros")


def k_warp_affine(images, theta):
    """kornia.warp_affine takes the pixel map source → destination: our normalised sampling map inverted."""
    b, c, h, w = images.shape
    k = theta.shape[1]
    inv = convert_affinematrix_to_homography(affine_matrix(affine_inverse(theta)).reshape(-1, 2, 3))
    m = denormalize_homography(inv, (h, w), (h, w), align_corners=False)[:, :2]
    x = images[:, None].expand(b, k, c, h, w).reshape(b * k, c, h, w)
    return warp_affine(x, m, (h, w), padding_mode="zeros", align_corners=False).reshape(b, k, c, h, w)


def ours_warp(images, grid):
    return warp(images[:, None], grid, padding_mode="zeros")


def k_remap(images, grid):
    b, c, h, w = images.shape
    k = grid.shape[1]
    x = images[:, None].expand(b, k, c, h, w).reshape(b * k, c, h, w)
    g = grid.reshape(b * k, h, w, 2)
    out = remap(x, g[..., 0], g[..., 1], padding_mode="zeros", align_corners=False, normalized_coordinates=True)
    return out.reshape(b, k, c, h, w)


def ours_turned(mu, angles, flips):
    return turned_prototypes(mu, angles, flips)


def k_turned(mu, angles, flips):
    """rotate about the centre pixel, the mirrored prototypes (x ↦ −x: a flip of the columns) for flipped poses."""
    k, c, h, w = mu.shape
    m = angles.shape[0]
    src = torch.where(flips[None, :, None, None, None], mu.flip(-1)[:, None], mu[:, None]).reshape(k * m, c, h, w)
    deg = -torch.rad2deg(angles).repeat(k)
    centre = torch.tensor([[(w - 1) / 2, (h - 1) / 2]], dtype=mu.dtype).expand(k * m, 2)
    return rotate(src, deg, centre, padding_mode="zeros", align_corners=False).reshape(k, m, c, h, w)


def k_identity_points(size, dtype):
    return create_meshgrid(*size, normalized_coordinates=True, dtype=dtype)[0]


def k_gaussian_weights(size, sigma, dtype):
    g = get_gaussian_kernel2d(size, (sigma, sigma), force_even=True, dtype=dtype)[0]
    return g / g.mean()


# ---- the pairs and their shapes -----------------------------------------------------------------------------------
@dataclass
class Case:
    """One pair: ticlust's function and kornia's, the inputs of each shape (``make(dtype, gen) -> kwargs``), the inputs
    ticlust differentiates through (timed forward + backward then), and where ticlust uses it."""

    name: str
    kornia: str
    ours: object
    theirs: object
    shapes: list = field(default_factory=list)
    grad: tuple = ()
    where: str = ""
    float64: bool = True


def _rand(gen, *shape, dtype, scale=1.0, low=0.0):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * scale + low).to(dtype)


def _images(n, c, s):
    return lambda dtype, gen: {"images": _rand(gen, n, c, s, s, dtype=dtype)}


def _params(n, p, scale):
    return lambda dtype, gen: {"params": _rand(gen, n, p, dtype=dtype, scale=2 * scale, low=-scale)}


def _pairs(b, k, c, s, inputs):
    def make(dtype, gen):
        out = {"images": _rand(gen, b, c, s, s, dtype=dtype)}
        theta = _rand(gen, b, k, 6, dtype=dtype, scale=0.4, low=-0.2)
        if inputs == "theta":
            out["theta"] = theta
        else:
            out["grid"] = affine_grid(theta, (s, s)) + _rand(gen, b, k, s, s, 2, dtype=dtype, scale=0.02, low=-0.01)
        return out
    return make


def cases(quick: bool) -> list[Case]:
    big = 2000 if quick else 20000
    mid = 2000 if quick else 5000
    out = [
        Case("align.gaussian_lowpass", "filters.gaussian_blur2d (border constant)",
             gaussian_lowpass, k_lowpass,
             [(f"{n}×{c}×{s}² σ={sg:.2f}", (lambda n, c, s, sg: lambda d, g: {**_images(n, c, s)(d, g), "sigma": sg})(n, c, s, sg))
              for n, c, s, sg in ((512, 1, 32, 0.07 * 32), (512, 5, 32, 0.07 * 32), (512, 1, 64, 0.07 * 64),
                                  (10, 1, 32, 0.07 * 32), (512, 3, 32, 0.0125 * 32))],
             where="ST/AI pre-alignment pyramid (σ = 0.07·side) of the items (512 at a time) and of the K centroids at "
                   "every iteration, rigid-spectral (σ = 0.0125·side); no gradient"),
        Case("align.image_slopes", "filters.spatial_gradient (mode diff)", image_slopes, k_slopes,
             [(f"2000×{c}×{s}² {p}", (lambda c, s, p: lambda d, g: {**_images(2000, c, s)(d, g), "padding": p})(c, s, p))
              for c, s, p in ((1, 32, "zeros"), (5, 32, "zeros"), (1, 32, "border"), (1, 64, "zeros"))],
             where="Gauss-Newton (predict's fast path), no gradient"),
        Case("core.similarity_affine", "geometry.transform.get_rotation_matrix2d", similarity_affine, k_similarity,
             [(f"{n}×{p}", _params(n, p, 0.5)) for n, p in ((2000, 4), (big, 4), (big, 3))], grad=("params",),
             where="DTI similarity/rigid modules (autograd)"),
        Case("rigid.rotations", "geometry.conversions.angle_to_rotation_matrix", rotations, k_rotations,
             [(f"{n} poses", (lambda n: lambda d, g: {"angles": _rand(g, n, dtype=d, scale=2 * math.pi),
                                                      "flips": torch.rand(n, generator=g) < 0.5})(n))
              for n in (2 * angle_count((32, 32)), 2 * angle_count((64, 64)), big)],
             where="rigid search poses, no gradient"),
        Case("core.affine_grid", "geometry.linalg.transform_points", affine_grid, k_affine_grid,
             [(f"{n}×{s}²", (lambda n, s: lambda d, g: {**_params(n, 6, 0.2)(d, g), "size": (s, s)})(n, s))
              for n, s in ((2000, 32), (big, 32), (2000, 64), (mid, 64))], grad=("params",),
             where="DTI affine modules (autograd); the Aligner's grid is the same map"),
        Case("core.projective_points", "geometry.linalg.transform_points", projective_points, k_projective_points,
             [(f"{n}×{s}²", (lambda n, s: lambda d, g: {**_params(n, 8, 0.1)(d, g),
                                                       "points": identity_points((s, s), None, d).reshape(1, -1, 2)})(n, s))
              for n, s in ((2000, 32), (big, 32), (mid, 64))], grad=("params",),
             where="DTI projective module (autograd)"),
        Case("core.tps_grid", "geometry.transform.get_tps_transform + warp_points_tps", tps_grid, k_tps_grid,
             [(f"{n}×{s}² g=4", (lambda n, s: lambda d, g: {"displacements": _rand(g, n, 16, 2, dtype=d, scale=0.2, low=-0.1),
                                                             "size": (s, s)})(n, s))
              for n, s in ((2000, 32), (2000, 64))], grad=("displacements",),   # 60-120× slower, another spline: no more
             where="DTI TPS module (autograd); the Aligner's TPS grid is the same spline"),
        Case("core.affine_inverse", "geometry.transform.invert_affine_transform", affine_inverse, k_affine_inverse,
             [(f"{n}×6", _params(n, 6, 0.2)) for n in (2000, big)],
             where="display grids of DTI (prototype frame into the item's), no gradient"),
    ]
    return out + warp_cases(big, mid)


def warp_cases(big: int, mid: int) -> list[Case]:
    pairs = ((500, 4, 1, 32), (big // 10, 10, 1, 32), (500, 4, 5, 32), (mid // 4, 4, 1, 64))
    return [
        Case("core.affine_grid + core.warp", "geometry.transform.warp_affine", ours_warp_affine, k_warp_affine,
             [(f"{b}×{k} pairs ×{c}×{s}²", _pairs(b, k, c, s, "theta")) for b, k, c, s in pairs], grad=("images", "theta"),
             where="warps of items onto centroids (ST/AI, autograd in θ), DTI (autograd in θ and prototypes)"),
        Case("core.warp (grid_sample)", "geometry.transform.remap", ours_warp, k_remap,
             [(f"{b}×{k} pairs ×{c}×{s}²", _pairs(b, k, c, s, "grid")) for b, k, c, s in pairs], grad=("images", "grid"),
             where="every warp (autograd in the grid and the images)"),
        Case("rigid.turned_prototypes", "geometry.transform.rotate", ours_turned, k_turned,
             [(f"{k}×{n} poses ×{s}²", (lambda k, n, s: lambda d, g: {
                 "mu": _rand(g, k, 1, s, s, dtype=d),
                 "angles": (torch.arange(n // 2, dtype=d) * (2 * math.pi / (n // 2))).repeat(2),
                 "flips": torch.arange(n) >= n // 2})(k, n, s))
              for k, n, s in ((10, 2 * angle_count((32, 32)), 32), (10, 2 * angle_count((64, 64)), 64))],
             where="rigid search: every prototype at every angle and mirror, no gradient"),
        Case("core.identity_points", "geometry.grid.create_meshgrid (normalized)",
             lambda size, dtype: identity_points(size, None, dtype), k_identity_points,
             [(f"{s}²", (lambda s: lambda d, g: {"size": (s, s), "dtype": d})(s)) for s in (32, 64)],
             where="every grid's base points (made once per size), no gradient"),
        Case("dti.gaussian_weights", "filters.get_gaussian_kernel2d", lambda size, sigma, dtype: gaussian_weights(size, sigma, None),
             k_gaussian_weights, [(f"{s}² σ={sg}", (lambda s, sg: lambda d, g: {"size": (s, s), "sigma": sg, "dtype": d})(s, sg))
                                  for s, sg in ((32, 8.0), (64, 16.0))],
             where="DTI-GMM pixel weights (once per fit), float32 only", float64=False),
    ]


# ---- measuring ----------------------------------------------------------------------------------------------------
def _tensors(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def run_once(fn, inputs: dict, grad: tuple, weight=None):
    """The outputs and, for ``grad``, the gradients of Σ weight·output with respect to those inputs."""
    if not grad:
        with torch.no_grad():
            return [t.detach() for t in _tensors(fn(**inputs))], []
    leaves = {n: inputs[n].detach().clone().requires_grad_(True) for n in grad}
    out = _tensors(fn(**{**inputs, **leaves}))
    loss = sum((o * w).sum() for o, w in zip(out, weight))
    return [o.detach() for o in out], list(torch.autograd.grad(loss, list(leaves.values())))


def _max_diff(a: list, b: list) -> float:
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b)) if a else 0.0


def _scale(a: list) -> float:
    return max(float(x.double().abs().max()) for x in a) if a else 0.0


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1]))


def compare(case: Case, make, threads: int) -> tuple[dict, dict, list | None]:
    """Differences (float32, float64), gradient agreement and determinism of one shape at ``threads`` threads."""
    torch.set_num_threads(threads)
    inputs = make(torch.float32, torch.Generator().manual_seed(0))
    probe = run_once(case.ours, inputs, ())[0]
    gen = torch.Generator().manual_seed(1)
    weight = [torch.randn(o.shape, generator=gen) for o in probe] if case.grad else None
    o1, o2 = run_once(case.ours, inputs, case.grad, weight), run_once(case.ours, inputs, case.grad, weight)
    k1, k2 = run_once(case.theirs, inputs, case.grad, weight), run_once(case.theirs, inputs, case.grad, weight)
    row = {"diff32": _max_diff(o1[0], k1[0]), "scale": _scale(o1[0]), "det_ours": _same(o1, o2), "det_kornia": _same(k1, k2),
           "grad": _max_diff(o1[1], k1[1]) / max(_scale(o1[1]), 1e-30) if case.grad else None, "diff64": None}
    row["grad64"] = None
    if case.float64:
        in64 = make(torch.float64, torch.Generator().manual_seed(0))
        w64 = [w.double() for w in weight] if case.grad else None
        o64, k64 = run_once(case.ours, in64, case.grad, w64), run_once(case.theirs, in64, case.grad, w64)
        row["diff64"] = _max_diff(o64[0], k64[0])
        if case.grad:
            row["grad64"] = _max_diff(o64[1], k64[1]) / max(_scale(o64[1]), 1e-30)
    return row, inputs, weight


def timed(fn, inputs, grad, weight, loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        run_once(fn, inputs, grad, weight)
    return (time.perf_counter() - start) / loops


def time_pair(case: Case, inputs, weight, repeats: int, min_seconds: float = 0.01) -> tuple[float, float, float]:
    """Median seconds of ours and kornia's, interleaved (order alternating per repeat), and the median ratio."""
    once = min(timed(case.ours, inputs, case.grad, weight, 1) for _ in range(3))   # warm both up, then calibrate
    timed(case.theirs, inputs, case.grad, weight, 2)
    loops = max(1, min(1000, math.ceil(min_seconds / max(once, 1e-7))))
    ours, theirs = [], []
    for r in range(repeats):
        pair = [(case.ours, ours), (case.theirs, theirs)]
        for fn, store in (pair if r % 2 == 0 else pair[::-1]):
            store.append(timed(fn, inputs, case.grad, weight, loops))
    ratios = [k / o for o, k in zip(ours, theirs)]
    return statistics.median(ours), statistics.median(theirs), statistics.median(ratios)


def measure(case: Case, threads: list[int], repeats: int) -> list[dict]:
    rows = []
    for label, make in case.shapes:
        for t in threads:
            row, inputs, weight = compare(case, make, t)
            row["ours_s"], row["kornia_s"], row["ratio"] = time_pair(case, inputs, weight, repeats)
            rows.append({"case": case.name, "shape": label, "threads": t, "repeats": repeats, "load": load_average(), **row})
            print(f"{case.name:32s} {label:28s} t={t} ratio {row['ratio']:.2f} diff32 {row['diff32']:.2e} "
                  f"diff64 {row['diff64']} grad {row['grad']} / {row['grad64']} det {row['det_ours']}/{row['det_kornia']}", flush=True)
            del inputs, weight
    return rows


# ---- report -------------------------------------------------------------------------------------------------------
def ulps(row: dict) -> float:
    """The float32 difference in units of 2⁻²³ at the output's scale (the pins' unit)."""
    return row["diff32"] / (2.0 ** -23 * max(1.0, row["scale"]))


def _fmt(v, spec):
    return "—" if v is None else format(v, spec)


def machine() -> str:
    model = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip()
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return (f"- machine: {model.split(':', 1)[-1].strip()} ({platform.machine()}), `uptime`: {up}\n"
            f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; torch {torch.__version__}, "
            f"kornia {kornia.__version__}, numpy {np.__version__}")


def import_seconds(runs: int = 3) -> tuple[float, float]:
    """Median seconds of ``import torch`` and then of ``import kornia.filters`` in a fresh process: what a process
    that calls kornia pays once, before its first call."""
    code = ("import time; t = time.perf_counter(); import torch; u = time.perf_counter(); import kornia.filters; "
            "print(u - t, time.perf_counter() - u)")
    runs_ = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
             for _ in range(runs)]
    return statistics.median(float(r[0]) for r in runs_), statistics.median(float(r[1]) for r in runs_)


def summary(rows: list[dict], by_case: dict[str, Case]) -> list[str]:
    lines = ["| function (ours) | kornia | timed | worst ratio | median ratio | max diff f32 (ulps) | max diff f64 | "
             "grad rel. diff f32 / f64 | deterministic ours / kornia |", "|---|---|---|---|---|---|---|---|---|"]
    for name, case in by_case.items():
        rs = [r for r in rows if r["case"] == name]
        if not rs:
            continue
        d64 = [r["diff64"] for r in rs if r["diff64"] is not None]
        grads = [r["grad"] for r in rs if r["grad"] is not None]
        grads64 = [r["grad64"] for r in rs if r["grad64"] is not None]
        lines.append(f"| {name} | {case.kornia} | {'fwd+bwd' if case.grad else 'fwd'} | {max(r['ratio'] for r in rs):.2f} | "
                     f"{statistics.median(r['ratio'] for r in rs):.2f} | {max(ulps(r) for r in rs):.3g} | "
                     f"{_fmt(max(d64) if d64 else None, '.2e')} | {_fmt(max(grads) if grads else None, '.2e')} / "
                     f"{_fmt(max(grads64) if grads64 else None, '.2e')} | "
                     f"{all(r['det_ours'] for r in rs)} / {all(r['det_kornia'] for r in rs)} |")
    return lines


def detail(rows: list[dict]) -> list[str]:
    lines = ["| function | shape | threads | repeats | load | ours (ms) | kornia (ms) | ratio | diff f32 | ulps | diff f64 | "
             "grad rel. f32 | grad rel. f64 | det o/k |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['shape']} | {r['threads']} | {r['repeats']} | {r['load'].split()[0]} | {r['ours_s'] * 1e3:.3g} | {r['kornia_s'] * 1e3:.3g} | "
                     f"{r['ratio']:.2f} | {r['diff32']:.2e} | {ulps(r):.3g} | {_fmt(r['diff64'], '.2e')} | "
                     f"{_fmt(r['grad'], '.2e')} | {_fmt(r['grad64'], '.2e')} | {'y' if r['det_ours'] else 'N'}/{'y' if r['det_kornia'] else 'N'} |")
    return lines


def write(rows: list[dict], by_case: dict[str, Case], args, out: Path) -> None:
    text = ["# ticlust's image maths against kornia's (CPU)", "",
            "`python benchmarks/kornia_compare.py` (rows from one or more runs, `--only`; each row gives its repeats "
            "and the 1-minute load average when it was measured)", "", machine(),
            "- 2 cores shared with other jobs: the ratios, taken per repeat with ours and kornia's interleaved, are what "
            "to read; the absolute times are not. At 2 threads a loaded machine adds milliseconds to any op that wakes "
            "the second thread (torch.exp of 1,024 floats: 2 µs at 1 thread, 15-20 ms at 2 here), which falls on "
            "whichever side launches such an op: small inputs at 2 threads are noisy",
            "- importing kornia, paid once by any process that calls it: `import kornia.filters` {1:.2f} s after "
            "`import torch` {0:.2f} s (medians of 3 fresh processes, when the report was written)".format(*import_seconds()), "",
            "Ratio = kornia / ours (> 1: kornia slower), the median of the per-repeat ratios; *worst* is the largest over "
            "shapes and thread counts. Diff f32 in ulps = max |ours − kornia| / (2⁻²³ · max(1, max |ours|)), the unit "
            "of tests/conftest.py (budget 8,192). Diff f64 on float64 inputs: ~1e-15 is the same formula rounded "
            "differently, more is another formula. Grad rel. = max |∇ours − ∇kornia| / max |∇ours| for the inputs "
            "ticlust differentiates, in float32 and float64 (a bilinear sample's slope jumps where it crosses a pixel: "
            "grids that differ in the last bit give a few samples the other side's slope in float32). Deterministic: two runs bit-identical (outputs and gradients).", "",
            "## Summary", "", *summary(rows, by_case), "", "## Uses", "",
            *[f"- {c.name}: {c.where}" for c in by_case.values()], "", "## Every shape", "", *detail(rows), ""]
    out.write_text("\n".join(text))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="at most 2,000 warps per shape (a smoke run)")
    ap.add_argument("--only", nargs="*", help="functions (ours) to run, by name")
    ap.add_argument("--out", type=Path, default=RESULTS / "kornia.md")
    ap.add_argument("--report", action="store_true", help="only rebuild --out from the rows stored beside it (.jsonl)")
    args = ap.parse_args(argv)
    store = args.out.with_suffix(".jsonl")
    by_case = {c.name: c for c in cases(args.quick) if not args.only or c.name in args.only}
    if not args.report:
        with store.open("a") as f:
            for case in by_case.values():
                for row in measure(case, args.threads, args.repeats):
                    f.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in store.read_text().splitlines()] if store.exists() else []
    latest = {(r["case"], r["shape"], r["threads"]): r for r in rows}   # a shape measured again replaces the older row
    by_case = {c.name: c for c in cases(args.quick)}
    order = {(c.name, label): (i, j) for i, c in enumerate(by_case.values()) for j, (label, _) in enumerate(c.shapes)}
    rows = sorted(latest.values(), key=lambda r: (order.get((r["case"], r["shape"]), (len(order), 0)), r["threads"]))
    write(rows, by_case, args, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
