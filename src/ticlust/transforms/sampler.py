"""Bilinear sampling whose backward pass is deterministic on every device.

``torch.nn.functional.grid_sample`` accumulates the gradient of its input with atomic adds on CUDA, so
two runs with the same seed drift apart (and ``torch.use_deterministic_algorithms`` refuses it). Here the
four bilinear taps are gathers, and the input's gradient is a segment sum over the taps sorted by the
pixel they read, taken as differences of one float64 running sum: no atomics, the same order every time.
Values and gradients equal ``grid_sample(..., mode="bilinear", align_corners=False)`` with zero or
border padding (``tests/test_dti_transforms.py``).
"""
from __future__ import annotations

import torch


class _TapGather(torch.autograd.Function):
    """out[n, c, p] = images[n, c, index[n, p]]; backward sums the gradient per source pixel in a fixed order."""

    @staticmethod
    def forward(ctx, images: torch.Tensor, index: torch.Tensor) -> torch.Tensor:   # (N, C, Q), (N, P)
        ctx.save_for_backward(index)
        ctx.pixels = images.shape[-1]
        return images.gather(2, index[:, None].expand(-1, images.shape[1], -1))

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (index,) = ctx.saved_tensors
        n, c, p = grad_out.shape
        q = ctx.pixels
        flat = (index + torch.arange(n, device=index.device)[:, None] * q).reshape(-1)     # global pixel per tap
        order = torch.sort(flat, stable=True).indices
        keys = flat[order]
        values = grad_out.permute(1, 0, 2).reshape(c, -1)[:, order].double()               # (C, N·P) sorted by pixel
        running = torch.cumsum(values, dim=1)
        last = torch.ones_like(keys, dtype=torch.bool)
        last[:-1] = keys[1:] != keys[:-1]                                                  # the last tap of each pixel
        ends = running[:, last]
        sums = torch.diff(ends, dim=1, prepend=torch.zeros_like(ends[:, :1]))
        grad = torch.zeros(c, n * q, dtype=torch.float64, device=grad_out.device)
        grad[:, keys[last]] = sums
        return grad.reshape(c, n, q).permute(1, 0, 2).to(grad_out.dtype), None


def bilinear_sample(images: torch.Tensor, grid: torch.Tensor, padding_mode: str = "zeros") -> torch.Tensor:
    """``grid_sample`` (bilinear, ``align_corners=False``, zeros or border padding) with a deterministic backward.

    images (N, C, H, W), grid (N, Ho, Wo, 2) of normalised (x, y) → (N, C, Ho, Wo).
    """
    if padding_mode not in ("zeros", "border"):
        raise ValueError(f"padding_mode {padding_mode!r}: the deterministic sampler does zeros or border")
    n, c, h, w = images.shape
    ho, wo = grid.shape[1:3]
    x = ((grid[..., 0] + 1) * w - 1) / 2                       # pixel coordinates, 0 = first pixel's centre
    y = ((grid[..., 1] + 1) * h - 1) / 2
    if padding_mode == "border":
        x, y = x.clamp(0, w - 1), y.clamp(0, h - 1)
    x0, y0 = torch.floor(x), torch.floor(y)
    fx, fy = x - x0, y - y0
    flat = images.reshape(n, c, h * w)
    out = 0
    for dy, dx, weight in ((0, 0, (1 - fy) * (1 - fx)), (0, 1, (1 - fy) * fx), (1, 0, fy * (1 - fx)), (1, 1, fy * fx)):
        xi, yi = x0 + dx, y0 + dy
        inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long().reshape(n, -1)
        taps = _TapGather.apply(flat, index).reshape(n, c, ho, wo)
        out = out + taps * (weight * inside)[:, None]
    return out
