"""The parameter-prediction network of DTI clustering: a small shared ResNet encoder and K×M MLP heads.

The encoder reads the item; for every transformation module m and prototype k an MLP (two hidden
layers of 128) predicts that module's parameters. The K heads of one module are stored as stacked
weights (K, in, out) and evaluated with batched matrix products, so the cost does not grow with a
Python loop over prototypes. The last layer of every head starts at zero: each predicted transform
starts as the exact identity.
"""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with batch norm and an identity (or 1×1 projection) shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class ResNetEncoder(nn.Module):
    """ResNet truncated after global average pooling.

    "resnet20": the CIFAR-style ResNet-20 (3×3 stem, 3 stages of 3 blocks, 16/32/64 channels) for
    images under 64 px; "resnet18": the ImageNet-style ResNet-18 (7×7/2 stem + max-pool, 4 stages
    of 2 blocks, 64…512 channels) otherwise. ``width`` scales the channel counts (at least 8: oneDNN crashed on 4-channel channels-last convolutions).
    ``stride``: of ResNet-20's stem (2: every stage works at half the resolution, a third of the work).
    """

    def __init__(self, channels: int, kind: str = "resnet20", width: float = 1.0, stride: int = 1):
        super().__init__()
        if kind == "resnet20":
            widths = [max(8, int(round(c * width))) for c in (16, 32, 64)]
            self.stem = nn.Sequential(nn.Conv2d(channels, widths[0], 3, stride, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
            blocks, depth = widths, 3
        elif kind == "resnet18":
            widths = [max(8, int(round(c * width))) for c in (64, 128, 256, 512)]
            self.stem = nn.Sequential(nn.Conv2d(channels, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, depth = widths, 2
        else:
            raise ValueError(f"unknown encoder {kind!r}")
        layers, c_in = [], blocks[0]
        for i, c in enumerate(blocks):
            for j in range(depth):
                layers.append(BasicBlock(c_in, c, 2 if (j == 0 and i > 0) else 1))
                c_in = c
        self.layers = nn.Sequential(*layers)
        self.out_features = blocks[-1]
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        return self.layers(self.stem(x)).mean((2, 3))


class BatchedMLP(nn.Module):
    """K independent MLPs in → 128 → 128 → out, evaluated together; the last layer starts at zero."""

    def __init__(self, k: int, n_in: int, n_out: int, hidden: int = 128):
        super().__init__()
        self.k, self.hidden = k, hidden
        self.w1, self.b1 = self._linear(k, n_in, hidden)
        self.w2, self.b2 = self._linear(k, hidden, hidden)
        self.w3 = nn.Parameter(torch.zeros(k, hidden, n_out))
        self.b3 = nn.Parameter(torch.zeros(k, n_out))

    @staticmethod
    def _linear(k, n_in, n_out):
        bound = 1 / math.sqrt(n_in)  # nn.Linear's default initialisation, per head
        w = nn.Parameter(torch.empty(k, n_in, n_out).uniform_(-bound, bound))
        b = nn.Parameter(torch.empty(k, n_out).uniform_(-bound, bound))
        return w, b

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(B, in) → (B, K, out)."""
        b, n_in = features.shape
        h = features @ self.w1.permute(1, 0, 2).reshape(n_in, -1)          # (B, K·hidden), one matmul
        h = F.relu(h.reshape(b, self.k, self.hidden) + self.b1)
        h = F.relu(torch.baddbmm(self.b2[:, None], h.transpose(0, 1), self.w2))  # (K, B, hidden)
        out = torch.baddbmm(self.b3[:, None], h, self.w3)                  # (K, B, out)
        return out.transpose(0, 1)



def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    """One convolution computing bn(conv(x)) with the batch norm's running statistics (eval mode)."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=True)
    fused = fused.to(device=conv.weight.device, dtype=conv.weight.dtype)
    fused.weight.data.copy_(conv.weight * scale[:, None, None, None])
    fused.bias.data.copy_(bn.bias - bn.running_mean * scale)
    return fused


class _FoldedBlock(nn.Module):
    """A BasicBlock with its batch norms folded into the convolutions."""

    def __init__(self, block: BasicBlock):
        super().__init__()
        self.conv1, self.conv2 = _fold(block.conv1, block.bn1), _fold(block.conv2, block.bn2)
        self.shortcut = None if block.shortcut is None else _fold(block.shortcut[0], block.shortcut[1])

    def forward(self, x):   # in place: no fresh tensor per activation (the same numbers, a third less time measured)
        out = self.conv2(F.relu_(self.conv1(x)))
        out += x if self.shortcut is None else self.shortcut(x)
        return F.relu_(out)


class InferenceEncoder(nn.Module):
    """A trained encoder for inference only: every batch norm folded into the convolution before it and the
    weights in channels-last order. The same features to float32 rounding (measured 2e-6 at a scale of 3),
    for half the CPU time: a batch norm pass per convolution (a third of predict's time) is gone.

    ``bfloat16``: the convolutions under bfloat16 autocast, the features pooled and returned in float32 (predict
    on a CPU that computes bfloat16 natively, ``cpu_bfloat16``: 2.2x the rate on MNIST, 2 of 2,000 labels changed,
    both near-ties); off, the features are float32's, which the fit's own pass keeps."""

    def __init__(self, encoder: ResNetEncoder, bfloat16: bool = False):
        super().__init__()
        self.bfloat16 = bfloat16
        stem = list(encoder.stem)
        self.stem = nn.Sequential(_fold(stem[0], stem[1]), *[nn.ReLU(inplace=True) if isinstance(m, nn.ReLU) else m for m in stem[2:]])
        self.layers = nn.Sequential(*[_FoldedBlock(b) for b in encoder.layers])
        self.out_features = encoder.out_features
        self.eval().requires_grad_(False)
        self.to(memory_format=torch.channels_last)

    def forward(self, x):
        x = x.contiguous(memory_format=torch.channels_last)
        if not self.bfloat16:
            return self.layers(self.stem(x)).mean((2, 3))
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            maps = self.layers(self.stem(x))
        return maps.float().mean((2, 3))


def cpu_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 convolutions natively (AVX512-BF16 or AMX): elsewhere oneDNN emulates
    them, slower than float32."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False
