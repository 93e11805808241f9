"""Deep Transformation-Invariant clustering (Monnier, Groueix & Aubry, NeurIPS 2020): DTI K-means and DTI GMM.

Prototypes live in pixel space; a shared ResNet encoder and one MLP per (prototype, module) predict,
for every item, the parameters that transform each prototype onto it (colour, affine, projective,
morphology, thin-plate spline). DTI K-means minimises Eq. 4, Σ_i min_k ||x_i − T_{f_k(x_i)}(c_k)||²;
DTI GMM minimises the expected negative log-likelihood of Eq. 5 with the batch EM of Algorithm 1
(π = softmax(η), variances warped by the spatial modules only, plus σ_min²). Modules are added one
at a time (curriculum) when the loss plateaus, after an identity-only start; tiny clusters
(< 20% of N/K) are re-seeded from the largest one, Adam moments included; before each new module a
redundant prototype is moved onto the cluster that a second one would help most, its two halves held apart
for a while (ours, ``split_ratio``, ``split_hold``). See docs/dti.md.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from ...errors import InputError
from ...core.stack import Stack, StackImages, from_nchw, to_nchw
from ...core.validation import check_images, check_same_size
from ...result import Assignments, ClusteringResult, FittedState
from ...transforms import TransformSequence, lattice_pixels
from ...transforms.core import (affine_grid, affine_inverse, affine_points, identity_points, projective_inverse,
                               projective_points, tps_inverse_points, warp)
from ...transforms.rigid import SHIFT_FRACTION, rigid_search, shift_pixels
from ...events import Progress, Snapshot, drain
from ...kernels import Rows, bisect, keep_pinned, kmeans_plus_plus, own_and_runner_up, random_init
from ..base import Method, param, register, seed_everything
from .net import BatchedMLP, InferenceEncoder, ResNetEncoder, cpu_bfloat16
from ..invariances import invariances_param, start_param

MODULE_CHOICES = ("auto", "color", "rigid", "similarity", "affine", "projective", "tps", "morpho")
#: The modules of each invariance family, in curriculum order (methods/invariances.py); colour first in all.
FAMILY_MODULES = {"rigid": ("color", "rigid"), "similarity": ("color", "similarity"), "affine": ("color", "affine"),
                  "deformable": ("color", "affine", "morpho", "tps")}


#: The ``quick`` schedule: the CPU recipe measured in docs/dti.md (on 15 MNIST-1k runs 2.7× less CPU than the paper's
#: schedule at the same load, a final loss 16 % lower in every pair, mean ACC 0.861 against 0.851; not the default:
#: on one subset its lowest-loss run of five fell below 0.90). Each of these fields left at the paper's value takes it.
QUICK_SCHEDULE = {"encoder_stride": 2, "prototype_lr": 20.0, "stage_share": 0.2, "max_epochs": 60, "final_epochs": 8}


@dataclass
class DTIKMeansConfig:
    k: int = 10
    schedule: str = param("paper", "Training schedule: paper (the paper's curriculum, 120 epochs), or quick: about 3× less "
                          "CPU for a lower loss on MNIST subsets, a little less sure of each digit (encoder_stride=2, "
                          "prototype_lr=20, stage_share=0.2, max_epochs=60, final_epochs=8, each where left at the "
                          "paper's value; docs/dti.md)", choices=("paper", "quick"), essential=True)
    invariances: str = invariances_param("the transforms below")
    transforms: tuple = param(("auto",), "Transformation modules, in order of the curriculum, for experts (with invariances "
                              "auto; 'auto': affine,morpho,tps for grey images, color,affine,tps for small colour images, "
                              "color,projective for photos ≥ 64 px)", choices=MODULE_CHOICES)
    curriculum: str = param("plateau", "When to add the next module: when the loss plateaus, or at fixed epochs (milestones)",
                            choices=("plateau", "milestones"))
    milestones: tuple = param((), "Epochs at which each next module is added and, last, the learning rate drops "
                              "(curriculum = milestones; e.g. 100,500,700,1000)", gui=False)
    init: str = param("k-means++", "First prototypes: images picked by k-means++ seeding (spread out; ours) or random images (the paper)",
                      choices=("random", "k-means++"), essential=True)
    # not essential: the schedule sets the training's length (quick: 60), this overrides it under Advanced (a form
    # shows at most three essentials: schedule, invariances, init)
    max_epochs: int = param(120, "Most training epochs in all; each curriculum stage gets at most half of the epochs left", low=1)
    patience: int = param(4, "Plateau: window (epochs); the stage ends when the mean loss of the last window improves on the window before by less than plateau_tol", low=1)
    plateau_tol: float = param(0.01, "Plateau: smallest relative improvement between windows that counts as progress", low=0.0)
    min_stage_epochs: int = param(6, "Plateau: fewest epochs in each curriculum stage", low=1)
    final_epochs: int = param(10, "Epochs at the reduced learning rate once every module is in (plateau mode)", low=0)
    lr: float = param(1e-3, "Adam learning rate (divided by 10 for the final epochs, or decayed: lr_decay)", low=1e-7, high=1.0)
    lr_decay: str = param("step", "Learning rate once the first module is in: kept, then divided by 10 for the final "
                          "epochs (step); or decayed every epoch from lr to lr × lr_floor at max_epochs, along a "
                          "half cosine or a line (then the final epochs drop nothing)", choices=("step", "cosine", "linear"),
                          gui=False)
    lr_floor: float = param(0.1, "lr_decay cosine or linear: the learning rate reached at max_epochs, as a fraction of lr",
                            low=0.0, high=1.0, gui=False)
    stage_share: float = param(0.5, "Plateau: the most of the epochs left before the final ones that a module stage "
                               "(the identity stage included, not the last module's) may use", low=0.05, high=1.0,
                               gui=False)
    prototype_lr: float = param(1.0, "Learning rate of the prototypes (and the GMM's variances and weights) as a multiple "
                                "of the network's: Adam moves each pixel by about lr a step, so prototypes that must "
                                "travel far in few epochs need more", low=0.1, high=100.0, gui=False)
    lr_scaling: bool = param(True, "Batches larger than 128 (a GPU's): learning rate × batch/128, warmed up linearly "
                             "over warmup_epochs (Goyal et al.'s rule); no effect at 128 or below", gui=False)
    warmup_epochs: int = param(2, "Epochs of learning-rate warm-up for batches larger than 128", low=0, gui=False)
    compile: bool = param(False, "torch.compile the encoder (GPU runs: faster steps after a slower first epoch; "
                          "needs a C compiler)", gui=False)
    weight_decay: float = param(1e-6, "Adam weight decay on the network (not on the prototypes)", low=0.0)
    batch_size: int = param(0, "Items per training batch (0: 128, or N/32 if smaller, at least 16: small sets get enough steps per epoch)", low=0)
    empty_threshold: float = param(0.2, "Re-seed clusters holding less than this fraction of N/K items", low=0.0, high=1.0)
    reassign_noise: float = param(1e-3, "Std of the noise added to a re-seeded prototype", low=0.0)
    split_ratio: float = param(0.3, "Before each new module (from the second on), a prototype whose removal costs less than this "
                               "fraction of the median prototype's becomes a copy of the cluster whose items' residuals split best in two "
                               "(two patterns under one prototype); 0: off (the paper)",
                               low=0.0, high=1.0)
    split_hold: int = param(2, "Epochs after a split during which the split cluster's two halves (bisected on what its "
                            "prototype leaves unexplained) are held one in each copy, so the copies learn apart; "
                            "0: the copy starts free, from noise alone", low=0)
    encoder: str = param("auto", "Encoder: ResNet-20 below 64 px, ResNet-18 otherwise ('auto')", choices=("auto", "resnet20", "resnet18"))
    encoder_width: float = param(1.0, "Channel multiplier of the encoder", low=0.125, high=4.0, gui=False)
    encoder_stride: int = param(1, "Stride of ResNet-20's first convolution (2: the encoder reads the images at half "
                                "their resolution, a third of its work)", choices=(1, 2), gui=False)
    tps_grid: int = param(4, "Thin-plate spline control grid (g×g points)", low=2, high=10)
    morpho_kernel: int = param(7, "Morphology window (k×k)", choices=(3, 5, 7, 9))
    gaussian_weighting: bool = param(False, "Weight the pixel loss by a centred Gaussian (the paper's SVHN variant)")
    gaussian_sigma: float = param(7.0, "Std (pixels) of the Gaussian pixel weights", low=0.1)
    mixed_precision: bool = param(True, "bfloat16 autocast for the network on CUDA; on a CPU with native bfloat16 "
                                  "(AVX512-BF16, AMX) for predict's encoder only (the fit stays float32 unless cpu_bfloat16_fit)")
    cpu_bfloat16_fit: bool = param(False, "The fit's network under bfloat16 autocast too, on a CPU that computes bfloat16 "
                                   "natively (a third less time per step; off by default: the same seed then gives "
                                   "another run on such a CPU than on others)", gui=False)
    grid_lattice: int = param(10, "Display warp grid: points per side", low=2, high=64, gui=False)
    infer_batch_size: int = param(256, "Images per batch when aligning every image after training or assigning new ones",
                                  low=1, gui=False)
    threads: int = param(0, "CPU threads for torch (0: leave as is)", low=0, gui=False)
    refine_epochs: int = param(10, "Epochs of a Refine (from a clustering edited by hand): a fresh network with every "
                               "module in learns the alignments onto the edited prototypes, the first half with "
                               "every item held in its edited cluster", low=1)
    start: str = start_param("the network's transforms then refine (each batch, every prototype is turned onto each item first)")
    record_labels: bool = param(False, "Keep every epoch's training assignments in extras['epoch_labels'] (for benchmarks)", gui=False)


    def __post_init__(self):
        """The quick schedule's values for the fields it sets that are still at the paper's (see QUICK_SCHEDULE)."""
        if self.schedule == "quick":
            paper = {f.name: f.default for f in dataclasses.fields(DTIKMeansConfig)}
            for name, value in QUICK_SCHEDULE.items():
                if getattr(self, name) == paper[name]:
                    setattr(self, name, value)


@dataclass
class DTIGMMConfig(DTIKMeansConfig):
    sigma_min: float = param(0.25, "Minimal standard deviation σ_min: σ_min² is added to every variance", low=1e-4)
    init_variance: float = param(0.5, "Initial variance of every pixel", low=1e-4)


# ---- model -----------------------------------------------------------------------------------------
def default_modules(channels: int, size: tuple[int, int]) -> tuple[str, ...]:
    """The paper's Appendix A sequences: aff-morpho-tps (grey digits), col-aff-tps (colour), col-proj (photos)."""
    if channels == 1:
        return ("affine", "morpho", "tps")
    return ("color", "projective") if min(size) >= 64 else ("color", "affine", "tps")


def resolve_modules(cfg, channels: int, size) -> tuple[str, ...]:
    """The modules a run uses: its invariance family's, else the transforms given, else the paper's."""
    names = tuple(cfg.transforms)
    auto = names in ((), ("auto",))
    if cfg.invariances != "auto":
        if not auto:
            raise InputError(f"invariances = {cfg.invariances} and transforms = {','.join(names)} both choose the warps: "
                             "give one of them and leave the other auto.")
        return FAMILY_MODULES[cfg.invariances]
    if auto:
        return default_modules(channels, size)
    if "auto" in names:
        raise InputError("transforms = 'auto' cannot be combined with named modules: give either auto or a list such as affine,morpho,tps.")
    if len(set(names)) != len(names):
        raise InputError(f"transforms = {','.join(names)} repeats a module: name each module once.")
    return names


class DTIModel(nn.Module):
    """Prototypes, encoder and K×M heads; ``predict_params`` gives the per-module parameters (B, K, P_m).

    Sized by the config (k, encoder, encoder_width, tps_grid, morpho_kernel; the GMM's init_variance),
    so training and rebuilding a saved result read the same fields.
    """

    def __init__(self, cfg, channels: int, size: tuple[int, int], modules: tuple[str, ...], gmm: bool = False):
        super().__init__()
        self.k, self.channels, self.size = cfg.k, channels, tuple(size)
        self.sequence = TransformSequence(modules, size, channels, cfg.tps_grid, cfg.morpho_kernel)
        kind = cfg.encoder if cfg.encoder != "auto" else ("resnet20" if min(size) < 64 else "resnet18")
        self.encoder = ResNetEncoder(channels, kind, cfg.encoder_width, cfg.encoder_stride)
        self.heads = nn.ModuleList(BatchedMLP(cfg.k, self.encoder.out_features, m.n_params) for m in self.sequence.modules)
        self.prototypes = nn.Parameter(torch.zeros(cfg.k, channels, *size))
        self.gmm = gmm
        if gmm:
            self.variances = nn.Parameter(torch.full((cfg.k, channels, *size), float(cfg.init_variance)))
            self.eta = nn.Parameter(torch.ones(cfg.k))

    def network_parameters(self):
        return [p for n, p in self.named_parameters() if n.startswith(("encoder.", "heads."))]

    def cluster_parameters(self):
        return [p for n, p in self.named_parameters() if not n.startswith(("encoder.", "heads."))]

    def predict_params(self, x: torch.Tensor, active: int, autocast: bool = False, encoder: nn.Module | None = None) -> list[torch.Tensor]:
        """Per-module parameters (B, K, P_m) for the first ``active`` modules (fp32). ``encoder``: what reads the
        items (default: the model's own; inference passes its ``InferenceEncoder``)."""
        if active == 0:
            return []
        ctx = torch.autocast(device_type=x.device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with ctx:
            feats = (self.encoder if encoder is None else encoder)(x)
            out = [self.heads[m](feats) for m in range(active)]
        return [o.float() for o in out]

    def transform(self, images, params, active, spatial_only=False):
        return self.sequence.apply(images, params, active=active, spatial_only=spatial_only)


def gaussian_weights(size, sigma, device) -> torch.Tensor:
    """Centred Gaussian pixel weights (H, W) with mean 1."""
    h, w = size
    yy = torch.arange(h, device=device, dtype=torch.float32) - (h - 1) / 2
    xx = torch.arange(w, device=device, dtype=torch.float32) - (w - 1) / 2
    g = torch.exp(-(yy[:, None] ** 2 + xx[None] ** 2) / (2 * sigma ** 2))
    return g / g.mean()


def gmm_loglik(x, means, variances, sigma_min, weights):
    """log G(x; μ, diag(Σ + σ_min²)) per item and component, pixels weighted; x (B,1,C,H,W), means (B,K,C,H,W)."""
    var = variances.abs() + sigma_min ** 2
    terms = math.log(2 * math.pi) + torch.log(var) + (x - means) ** 2 / var
    return -0.5 * (terms * weights).flatten(2).sum(2)


def weighted_mse(x, recon, weights):
    """Mean (weighted) squared pixel difference per item and prototype, (B, K)."""
    return ((x - recon) ** 2 * weights).flatten(2).mean(2)


# ---- training ------------------------------------------------------------------------------------
class Curriculum:
    """Which modules are active and the learning rate, epoch by epoch (plateau detection or milestones)."""

    def __init__(self, cfg, n_modules: int):
        self.cfg, self.n_modules = cfg, n_modules
        self.active = 0          # modules in use (0: identity only)
        self.final = False       # reduced learning rate phase
        self.stage_start = 0
        self.stage_losses: list[float] = []
        self.done = False
        self.events: list[tuple[int, str]] = []
        if cfg.curriculum == "milestones":
            if not all(str(m).strip().isdigit() for m in cfg.milestones):
                raise InputError(f"milestones = {','.join(map(str, cfg.milestones))}: give whole epoch numbers, e.g. 20,40,60,80.")
            ms = [int(m) for m in cfg.milestones]
            if len(ms) != n_modules + 1 or ms != sorted(ms):
                raise InputError(f"milestones = {','.join(map(str, ms)) or 'none'}: give {n_modules + 1} increasing epochs "
                                 f"(one per module, then the learning-rate drop), e.g. {','.join(str(20 * (i + 1)) for i in range(n_modules + 1))}.")
            self.milestones = ms

    def update(self, epoch: int, loss: float) -> str | None:
        """Called after each epoch (1-based); returns 'module', 'lr' or None (and sets ``done``)."""
        cfg = self.cfg
        if cfg.curriculum == "milestones":
            if self.active < self.n_modules and epoch == self.milestones[self.active]:
                return self._next(epoch)
            if not self.final and epoch == self.milestones[-1]:
                return self._next(epoch)
            self.done = epoch >= cfg.max_epochs
            return None
        if self.final:
            self.done = epoch - self.stage_start >= cfg.final_epochs or epoch >= cfg.max_epochs
            return None
        self.stage_losses.append(loss)
        if epoch >= cfg.max_epochs:
            self.done = True
            return None
        # budget: a stage may use at most stage_share (half) of the epochs left before the final phase
        # (the last module all of them), so every module gets its turn within max_epochs
        left = cfg.max_epochs - cfg.final_epochs - self.stage_start
        share = left if self.active == self.n_modules else left * cfg.stage_share
        if epoch - self.stage_start >= max(share, 1):
            return self._next(epoch)
        p = cfg.patience
        recent = self.stage_losses[-p:]
        before = self.stage_losses[-2 * p:-p]
        if len(self.stage_losses) >= max(cfg.min_stage_epochs, 2 * p):
            gain = (sum(before) / p - sum(recent) / p) / abs(sum(before) / p)
            if gain < cfg.plateau_tol:
                return self._next(epoch)
        return None

    def _next(self, epoch):
        self.stage_start, self.stage_losses = epoch, []
        if self.active < self.n_modules:
            self.active += 1
            self.events.append((epoch, "module"))
            return "module"
        self.final = True
        self.events.append((epoch, "lr"))
        if self.cfg.curriculum == "plateau" and self.cfg.final_epochs == 0:
            self.done = True
        return "lr"


def lr_factor(cfg, done: int, total: int) -> float:
    """The learning rate of the next epoch over ``lr`` under ``lr_decay`` cosine or linear, ``done`` of the ``total``
    epochs with modules having run: 1 before the first, ``lr_floor`` at the end (a smooth decay instead of one drop,
    so every module stage trains at a falling rate and the last one ends annealed)."""
    t = min(max(done / max(total, 1), 0.0), 1.0)
    shape = 0.5 * (1 + math.cos(math.pi * t)) if cfg.lr_decay == "cosine" else 1 - t
    return cfg.lr_floor + (1 - cfg.lr_floor) * shape


def copy_cluster(model: DTIModel, optimizer, i: int, j: int, noise: float, generator: torch.Generator) -> None:
    """Make cluster i a copy of cluster j: prototype (plus Gaussian noise), every head's weights and
    their Adam moments (and, for the GMM, the variances; the mixing weight is split between the two)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("encoder."):
                continue
            if name == "eta":
                p[i] = p[j] = p[j] - math.log(2.0)
            else:
                p[i] = p[j]
                if name == "prototypes" and noise > 0:
                    p[i] += noise * torch.randn(p[i].shape, generator=generator, device="cpu").to(p.device)
            state = optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key][i] = state[key][j]


def reassign_tiny_clusters(model: DTIModel, optimizer, counts: np.ndarray, threshold: float, noise: float,
                           generator: torch.Generator) -> list[tuple[int, int]]:
    """Re-seed clusters with fewer than ``threshold``·N/K items from the currently largest cluster
    (the paper's rule, with ``copy_cluster``). Returns (tiny, source) pairs."""
    counts = counts.astype(np.float64)  # a copy: the caller's counts stay as they are
    limit = threshold * counts.sum() / model.k
    moved = []
    for i in np.argsort(counts):
        if counts[i] >= limit:
            break
        j = int(np.argmax(counts))
        if j == i:
            break
        copy_cluster(model, optimizer, int(i), j, noise, generator)
        counts[i] = counts[j] = counts[j] / 2
        moved.append((int(i), j))
    return moved


def split_redundant_cluster(model: DTIModel, optimizer, removal: np.ndarray, gains: np.ndarray, counts: np.ndarray,
                            ratio: float, noise: float, generator: torch.Generator, keep=()) -> tuple[int, int] | None:
    """Swap move for two prototypes on one pattern (ours; the paper's < 20 % rule cannot see it).

    ``removal[k]``: how much the distortion would grow if prototype k were dropped (its members going
    to their runner-up); ``gains[k]``: what a second prototype would save cluster k (``DTIRun.cluster_halves``).
    When the cheapest prototype to drop costs less than ``ratio`` times the median prototype's cost, it
    becomes a copy (``copy_cluster``) of the cluster with the largest gain, whose halves the run then
    holds apart for ``split_hold`` epochs. Prototypes in ``keep`` (the pair of the previous move, still separating) are not dropped.
    Returns (moved, source) or None.
    """
    live = counts > 0                       # empty clusters are the tiny-cluster rule's
    if ratio <= 0 or live.sum() < 2:
        return None
    removal = np.where(live, removal, np.inf)
    median = np.median(removal[live])
    removal[list(keep)] = np.inf
    a = int(np.argmin(removal))
    if not removal[a] < ratio * median:
        return None
    gains = gains.astype(np.float64)  # a copy (astype copies)
    gains[a] = -np.inf
    j = int(np.argmax(gains))
    copy_cluster(model, optimizer, a, j, noise, generator)
    return a, j


SEED_BATCH = 8192   # rows per batch of the k-means++ start's passes over the stack (Rows' default, as before)


def initial_prototypes(x: StackImages | torch.Tensor, k: int, init: str, rng: np.random.Generator) -> torch.Tensor:
    """K images of the stack as (K, C, H, W): k-means++ seeding (spread out, so no two start on the same pattern)
    or uniform (the paper). ``x``: the fit's images read from the stack (streamed through ``Rows``: never held
    together) or images (N, C, H, W) in hand."""
    pick = kmeans_plus_plus if init == "k-means++" else random_init
    if isinstance(x, StackImages):
        return to_nchw(pick(Rows(x.stack, x.device, SEED_BATCH, in_memory_bytes=0), k, rng).reshape(k, *x.stack.item_shape))
    return pick(x.flatten(1), k, rng).view(k, *x.shape[1:])


def auto_batch_size(n: int) -> int:
    """128 (the paper's batch) unless the set is small: then N/32 (at least 16), so an epoch has ≥ 32 steps."""
    return int(min(128, max(16, n // 32)))


def _batches(n, bs, gen):
    perm = torch.randperm(n, generator=gen)
    return [perm[i:i + bs] for i in range(0, n, bs)]


def _channels_last(stack: Stack) -> bool:
    """Whether the items are H×W×C colour images (the network reads C×H×W)."""
    return stack.channels > 1 and len(stack.item_shape) == 3


def loss_setup(cfg, size, device) -> tuple[torch.Tensor, bool]:
    """The loss's pixel weights (H, W), and whether the network runs under bfloat16 autocast."""
    h, w = size
    weights = gaussian_weights((h, w), cfg.gaussian_sigma, device) if cfg.gaussian_weighting else torch.ones(h, w, device=device)
    return weights, bool(cfg.mixed_precision and device.type == "cuda")


SPLIT_SAMPLE_BYTES = 256 * 2 ** 20   # the split move's residuals: every item of a small set, a sample of a large one
REPORT_EVERY_S = 0.5   # the loss shown in Progress is read back from the device at most this often
#: For the ETA, what a fit's end costs: the pass aligning every item (a forward of each through the network, every
#: prototype warped onto it) and the object map (each item pulled back through its inverse warp), as training epochs
#: with every module in (measured: 1.7), and the map as passes of that alignment (1.8); both grow with the items as an
#: epoch does (benchmarks/eta.py, 400 MNIST digits).
AFTER_TRAINING_EPOCHS, MAP_AS_ALIGNMENT = 2.0, 1.5


class EpochTally:
    """Per-cluster sums over an epoch, which the moves between epochs read: members and what dropping the
    prototype would cost them (runner-up minus own distance). Summed on the
    device and read back once per epoch (``numpy``), so a training step never waits for the GPU."""

    def __init__(self, k: int, device: torch.device):
        self.k = k
        self.counts = torch.zeros(k, dtype=torch.int64, device=device)
        self.removal = torch.zeros(k, dtype=torch.float64, device=device)

    def add(self, assigned: torch.Tensor, own: torch.Tensor, runner_up: torch.Tensor) -> None:
        self.counts += torch.bincount(assigned, minlength=self.k)
        self.removal += torch.bincount(assigned, (runner_up - own).double(), minlength=self.k)

    def numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """(counts, removal) on the host."""
        return self.counts.cpu().numpy(), self.removal.cpu().numpy()


class DTIRun:
    """One training run: the model, its optimizer and curriculum, and the bookkeeping its result
    reports (loss per epoch, timings, cluster moves, optionally every epoch's labels)."""

    def __init__(self, stack: Stack, cfg, device: torch.device, seed: int, gmm: bool, prototypes: torch.Tensor | None = None):
        check_images(stack, "dti-gmm" if gmm else "dti-kmeans", min_side=8)
        size = stack.item_shape[:2]
        rng = seed_everything(seed)
        self.gen = torch.Generator().manual_seed(seed)   # batch order and re-seeding noise
        self.stack, self.cfg, self.device = stack, cfg, device
        self.channels_last = _channels_last(stack)
        self.x = StackImages(stack, device)   # (N, C, H, W), each mini-batch read from the stack when indexed
        self.modules = resolve_modules(cfg, self.x.shape[1], size)
        self.model = model = DTIModel(cfg, self.x.shape[1], size, self.modules, gmm).to(device)
        with torch.no_grad():
            model.prototypes.copy_(initial_prototypes(self.x, cfg.k, cfg.init, rng) if prototypes is None else prototypes)
        if device.type == "cpu":
            model.encoder.to(memory_format=torch.channels_last)
        if cfg.compile:
            model.encoder.compile()        # in place: the saved weights keep their names
        self.batch_size = cfg.batch_size or auto_batch_size(len(self.x))
        large = cfg.lr_scaling and self.batch_size > 128
        self.lr = cfg.lr * self.batch_size / 128 if large else cfg.lr
        self.warmup_steps = cfg.warmup_epochs * math.ceil(len(self.x) / self.batch_size) if large else 0
        self.optimizer = torch.optim.Adam([{"params": model.cluster_parameters(), "weight_decay": 0.0, "scale": cfg.prototype_lr},
                                           {"params": model.network_parameters(), "weight_decay": cfg.weight_decay, "scale": 1.0}],
                                          lr=self.lr)
        self.set_lr(self.lr)
        self.weights, self.autocast = loss_setup(cfg, size, device)
        self.autocast = self.autocast or bool(cfg.cpu_bfloat16_fit and cfg.mixed_precision and device.type == "cpu"
                                              and cpu_bfloat16())
        self.curriculum = Curriculum(cfg, len(self.modules))
        self.total = cfg.max_epochs * math.ceil(len(self.x) / self.batch_size)
        self.history, self.stage_log, self.reassigned, self.splits, self.epoch_end, self.epoch_labels = [], [], [], [], [], []
        self.epoch = self.step = 0
        self.start = self.reported_at = time.perf_counter()
        self.reported = float("nan")      # the last loss read back from the device, for Progress
        self.pinned: torch.Tensor | None = None   # (N,) clusters the user fixed items to (-1: free), for Refine
        self.held_until = 0                        # training holds the last split's halves (in pinned) until this epoch
        self.decay_from: int | None = None         # lr_decay: the last epoch without modules, after which the lr decays
        model.train()

    def run_epoch(self):
        """One pass in random batches, a gradient step each (yields Progress); returns its EpochTally."""
        cfg, n = self.cfg, len(self.x)
        self.epoch += 1
        tally = EpochTally(cfg.k, self.device)
        labels = np.zeros(n, dtype=np.int16) if cfg.record_labels else None
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for idx in _batches(n, self.batch_size, self.gen):
            xb = self.x[idx.to(self.device)]
            if self.device.type == "cpu":
                xb = xb.contiguous(memory_format=torch.channels_last)
            pins = None if self.pinned is None else self.pinned[idx.to(self.device)]
            loss, assigned, report, dist = _step(self.model, xb, self.curriculum.active, self.weights, self.autocast,
                                                 self.model.gmm, cfg, pins)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.step < self.warmup_steps:
                self.set_lr(self.lr * (self.step + 1) / self.warmup_steps)
            self.optimizer.step()
            own, runner_up, _ = own_and_runner_up(dist, assigned)
            tally.add(assigned, own, runner_up)
            if labels is not None:
                labels[idx.numpy()] = assigned.cpu().numpy()
            loss_sum += report.double() * len(idx)
            self.step += 1
            if self.step == 1 or time.perf_counter() - self.reported_at >= REPORT_EVERY_S:
                self.reported, self.reported_at = float(report), time.perf_counter()   # the one read-back
            yield Progress(min(self.step, self.total), self.total, self.reported, _stage_name(self.modules, self.curriculum),
                           later=self.later_steps())
        self.history.append(float(loss_sum) / n)
        self.epoch_end.append(time.perf_counter() - self.start)
        if labels is not None:
            self.epoch_labels.append(labels)
        return tally

    def later_steps(self) -> float:
        """What the run's end costs (every item aligned, the object map) in training steps, for the ETA; unknown
        (inf: no ETA) while only the identity trains, whose steps skip the encoder and say nothing of the modules' pace."""
        if self.curriculum.active == 0 and self.modules:
            return math.inf
        return AFTER_TRAINING_EPOCHS * math.ceil(len(self.x) / self.batch_size)

    def end_epoch(self, tally: EpochTally) -> None:
        """The moves between epochs: re-seed tiny clusters, advance the curriculum, and before a new
        module split a redundant prototype; at the last stage divide the learning rate by 10."""
        cfg, epoch = self.cfg, self.epoch
        counts, removal = tally.numpy()
        moved = reassign_tiny_clusters(self.model, self.optimizer, counts, cfg.empty_threshold, cfg.reassign_noise, self.gen)
        self.reassigned.extend((epoch, i, j) for i, j in moved)
        change = self.curriculum.update(epoch, self.history[-1])
        # before each new module from the second on: the stage that just ended had a module in (in
        # pixel space every prototype is cheap to drop) and the next stage lets a moved pair separate
        if change == "module" and self.curriculum.active >= 2 and not moved and cfg.split_ratio > 0:
            gains, halves = self.cluster_halves()                 # one inference pass
            split = split_redundant_cluster(self.model, self.optimizer, removal, gains, counts,
                                            cfg.split_ratio, cfg.reassign_noise, self.gen,
                                            keep=self.splits[-1][1:] if self.splits else ())
            if split:
                self.splits.append((epoch, *split))
                a, j = split
                if cfg.split_hold and j in halves:        # j has two items or more
                    held = torch.full((len(self.x),), -1, dtype=torch.int64)
                    held[halves[j][0]], held[halves[j][1]] = j, a
                    self.pinned, self.held_until = held.to(self.device), epoch + cfg.split_hold
        if self.held_until and (epoch >= self.held_until or self.curriculum.done):
            self.pinned, self.held_until = None, 0
        if change == "lr" and cfg.lr_decay == "step":
            self.set_lr(self.lr / 10)
        elif cfg.lr_decay != "step" and self.curriculum.active:
            if self.decay_from is None:
                self.decay_from = epoch                                   # the last epoch without modules
            self.set_lr(self.lr * lr_factor(cfg, epoch - self.decay_from, cfg.max_epochs - self.decay_from))
        if change:
            self.stage_log.append((epoch, time.perf_counter() - self.start, change))

    def set_lr(self, lr: float) -> None:
        """The network's learning rate ``lr``; the prototypes' ``lr`` × prototype_lr."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["scale"]

    @torch.no_grad()
    def cluster_halves(self) -> tuple[np.ndarray, dict]:
        """Every cluster bisected (``bisect``) on what its prototype leaves unexplained: the residuals of its
        items after alignment with the modules trained so far. A cluster holding two patterns leaves two kinds
        of residual, so it gains most from a second prototype. Returns the split gains SSE₁ − SSE₂ (K,) and, per
        cluster of two or more items, (its items, those of its second half). Large sets are read through a
        random sample of at most ``SPLIT_SAMPLE_BYTES`` of residuals (every item below that)."""
        model, active, bs, n = self.model, self.curriculum.active - 1, self.cfg.infer_batch_size, len(self.x)
        cap = max(2 * model.k, SPLIT_SAMPLE_BYTES // (4 * self.stack.dim))
        items = torch.arange(n) if n <= cap else torch.randperm(n, generator=self.gen)[:cap].sort().values
        labels, residuals = [], []
        model.eval()
        for i in range(0, len(items), bs):
            xb = self.x[items[i:i + bs].to(self.device)]
            _, recon, score = _align_batch(model, xb, active, self.weights, self.autocast, model.gmm, self.cfg)
            own = score.argmin(1)
            labels.append(own.cpu())
            recon = recon.expand(len(xb), *recon.shape[1:])      # identity only: one row for all items
            residuals.append(((xb - recon[torch.arange(len(xb), device=xb.device), own]) * self.weights.sqrt()).flatten(1))
        model.train()
        labels, residuals = torch.cat(labels), torch.cat(residuals).float()
        gains, halves = np.zeros(model.k), {}
        for c in range(model.k):
            members = torch.nonzero(labels == c).flatten()
            if len(members) >= 2:
                sse1, sse2, _, side = bisect(residuals[members.to(residuals.device)])
                gains[c], halves[c] = sse1 - sse2, (items[members], items[members[side.cpu()]])
        return gains, halves

    def report(self, train_s: float) -> tuple[dict, dict]:
        """The run's timing and extras (cluster moves, epoch end times, optionally every epoch's labels)."""
        timing = {"train_s": train_s, "epochs": self.epoch, "steps": self.step, "batch_size": self.batch_size,
                  "stages": [[e, round(t, 2), what] for e, t, what in self.stage_log]}
        extras = {"reassignments": np.asarray(self.reassigned, dtype=np.int64).reshape(-1, 3),
                  "splits": np.asarray(self.splits, dtype=np.int64).reshape(-1, 3),
                  "epoch_end_s": np.asarray(self.epoch_end)}
        if self.cfg.record_labels:
            extras["epoch_labels"] = np.stack(self.epoch_labels)
        return timing, extras


@contextlib.contextmanager
def torch_threads(n: int):
    """torch's CPU thread count set to ``n`` (0: left as is) for one run only: the count is the process's."""
    before = torch.get_num_threads()
    try:
        if n:
            torch.set_num_threads(n)
        yield
    finally:
        torch.set_num_threads(before)


def _stage_name(modules, curriculum):
    names = ["identity", *modules[: curriculum.active]]
    return "+".join(names) + (" (lr/10)" if curriculum.final else "")


def _protos_numpy(model, channels_last):
    return from_nchw(model.prototypes.detach(), channels_last).cpu().numpy().copy()


def _rigid_poses(cfg, x: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor | None:
    """With ``start`` rigid / rigid+flip, the affine maps (B, K, 6) that turn every prototype onto every item x by
    their pair's best global rigid pose (``transforms.rigid``: every angle [and the mirror] × every shift within
    SHIFT_FRACTION), so the network's transforms refine a pose instead of searching for it; None with identity."""
    if cfg.start == "identity":
        return None
    with torch.no_grad():
        match = rigid_search(x.float(), prototypes.detach().float(), flip=cfg.start == "rigid+flip",
                             max_shift=shift_pixels(SHIFT_FRACTION, tuple(x.shape[-2:])))
    return affine_inverse(match.theta)   # the search's map carries the item onto the prototype: the other way round


def _posed(images: torch.Tensor, poses: torch.Tensor | None) -> torch.Tensor:
    """Prototype-frame images (K, C, H, W) (prototypes, or the GMM's variances) for a batch: (1, K, C, H, W) as
    they are, or (B, K, C, H, W) each turned by its pair's rigid pose (``_rigid_poses``; zero outside)."""
    if poses is None:
        return images[None]
    return warp(images[None], affine_grid(poses, tuple(images.shape[-2:])), padding_mode="zeros")


def _step(model: DTIModel, xb, active, weights, autocast, gmm, cfg, pinned=None):
    """One batch: the loss to back-propagate, each item's cluster, the loss value to report (a 0-d
    tensor: reading it would wait for the device) and the (B, K) squared distances to every transformed
    prototype (GMM: mean), without a graph.

    K-means: Eq. 4's gradient only involves each item's closest transformed prototype, so all B×K
    transforms are computed without a graph and only the B winners are re-done with one (the same
    loss and gradient, a fraction of the memory and time). ``pinned`` (B,): clusters the user fixed
    items to (-1: free); such an item is assigned there (GMM: its responsibility is one-hot there).
    """
    params = model.predict_params(xb, active, autocast)
    poses = _rigid_poses(cfg, xb, model.prototypes)
    protos = _posed(model.prototypes, poses)
    x = xb[:, None]
    if not gmm:
        with torch.no_grad():
            d = weighted_mse(x, model.transform(protos, [p.detach() for p in params], active), weights)
            best = keep_pinned(d.argmin(1), pinned)
        rows = torch.arange(len(best), device=best.device)
        chosen = [p[rows, best] for p in params]
        recon = model.transform(model.prototypes[best] if poses is None else protos[rows, best], chosen, active)
        loss = ((xb - recon) ** 2 * weights).flatten(1).mean(1).mean()
        return loss, best, loss.detach(), d
    means = model.transform(protos, params, active)
    var = model.transform(_posed(model.variances, poses), params, active, spatial_only=True)
    log_pi = torch.log_softmax(model.eta, 0)
    joint = gmm_loglik(x, means, var, cfg.sigma_min, weights) + log_pi
    gamma = torch.softmax(joint.detach(), 1)
    if pinned is not None:
        gamma = torch.where((pinned >= 0)[:, None], torch.nn.functional.one_hot(pinned.clamp_min(0), model.k).to(gamma.dtype), gamma)
    d = xb[0].numel()
    loss = -(gamma * joint).sum(1).mean() / d
    nll = -torch.logsumexp(joint.detach(), 1).mean() / d
    return loss, keep_pinned(joint.detach().argmax(1), pinned), nll, weighted_mse(x, means.detach(), weights)


@torch.no_grad()
def _align_batch(model: DTIModel, xb, active, weights, autocast, gmm, cfg, encoder=None):
    """Every prototype transformed onto every image of a batch: (per-module params, (B, K, C, H, W), scores (B, K)).

    Scores are squared distances (K-means) or negative joint log-likelihoods (GMM): lower is closer.
    ``encoder``: see ``DTIModel.predict_params``.
    """
    params = model.predict_params(xb, active, autocast, encoder)
    poses = _rigid_poses(cfg, xb, model.prototypes)
    recon = model.transform(_posed(model.prototypes, poses), params, active)
    if gmm:
        var = model.transform(_posed(model.variances, poses), params, active, spatial_only=True)
        joint = gmm_loglik(xb[:, None], recon, var, cfg.sigma_min, weights) + torch.log_softmax(model.eta, 0)
        return params, recon, -joint
    return params, recon, weighted_mse(xb[:, None], recon, weights)


def _infer(model: DTIModel, stack: Stack, device, cfg, weights, autocast, batch_size: int, pinned=None,
           bfloat16: bool = False):
    """Every item aligned by the model, with all its modules (generator: Progress per batch, so a long
    pass can be cancelled): returns the result's fields (scores, labels, per-module parameters; with
    ``stack.wants_pictures()`` the aligned prototypes and display grids; GMM: responsibilities, variances
    and mixing weights) and the mean loss. The stack is read batch by batch and each batch's outputs are
    written into the per-item arrays (``Assignments``). ``pinned`` (N,): clusters the user fixed items to
    (-1: free); those are assigned and aligned there. ``bfloat16``: the encoder's (``InferenceEncoder``)."""
    model.eval()
    encoder = InferenceEncoder(model.encoder, bfloat16)
    modules, gmm = model.sequence.names, model.gmm
    active = len(modules)
    channels_last = _channels_last(stack)
    lattice = (cfg.grid_lattice, cfg.grid_lattice)
    out, pictures = Assignments(stack.n), stack.wants_pictures()
    spatial = any(mod.spatial for mod in model.sequence.modules[:active])
    losses = np.empty(stack.n, np.float32)   # per-item losses: their float32 mean is the run's final loss
    n_batches = -(-stack.n // batch_size)
    yield Progress(0, n_batches, float("nan"), "Aligning every image", later=n_batches * MAP_AS_ALIGNMENT)  # the pace's start
    for i, (s, batch) in enumerate(stack.batches(batch_size)):
        xb = to_nchw(torch.from_numpy(batch).to(device))
        params, recon, score = _align_batch(model, xb, active, weights, autocast, gmm, cfg, encoder)
        labels = keep_pinned(score.argmin(1), None if pinned is None else pinned[s:s + len(batch)])
        fields = {"scores": score, "labels": labels}
        if gmm:
            fields["responsibilities"] = torch.softmax(-score, 1)
            loss = -torch.logsumexp(-score, 1) / xb[0].numel()
        else:
            loss = score.gather(1, labels[:, None])[:, 0]
        losses[s:s + len(batch)] = loss.cpu().numpy()
        rows = torch.arange(len(labels), device=labels.device)
        chosen = [p[rows, labels] for p in params]
        fields.update({f"params/{m}": mod.shaped(p) for m, mod, p in zip(modules, model.sequence.modules, chosen)})
        if pictures:
            fields["aligned"] = from_nchw(recon[rows, labels], channels_last)
            fields["grids"] = (model.sequence.display_grid([p.double() for p in chosen], lattice).float() if spatial
                               else model_lattice(model.size, lattice, len(labels), device))
        out.write(s, fields)
        yield Progress(i + 1, n_batches, float("nan"), "Aligning every image", later=n_batches * MAP_AS_ALIGNMENT)
    result = dict(aligned_kind="prototype-on-item", extras={}, **out.result_fields())
    if gmm:
        var = (model.variances.abs() + cfg.sigma_min ** 2).detach()
        result["extras"] = {"variances": from_nchw(var, channels_last).cpu().numpy(),
                            "weights": torch.softmax(model.eta, 0).detach().cpu().numpy()}
    model.train()
    return result, float(torch.from_numpy(losses).mean())


def model_lattice(size, lattice, n, device):
    """The undeformed display lattice, for sequences without spatial modules."""
    return lattice_pixels(size, lattice, device).expand(n, *lattice, 2)


#: The spatial modules whose warps ``DTIKMeans.embed`` undoes, by the shape ``params/<module>`` keeps them in.
SPATIAL_MODULES = ("affine", "similarity", "rigid", "projective", "tps")


def inverse_points(name: str, shaped: torch.Tensor, pts: torch.Tensor) -> torch.Tensor:
    """Normalised points (B, M, 2) mapped by the inverse of each item's warp, given as ``params/<name>`` keeps it: a
    2×3 affine matrix (affine, similarity, rigid), a 3×3 homography (projective) or TPS displacements (g², 2)."""
    shaped = shaped.to(pts.dtype)
    if name == "projective":
        flat = (shaped / shaped[..., 2:, 2:] - torch.eye(3, device=pts.device, dtype=pts.dtype)).reshape(len(pts), 9)
        return projective_points(projective_inverse(flat[:, :8]), pts)
    if name == "tps":
        return tps_inverse_points(shaped, pts)
    theta = (shaped - torch.eye(2, 3, device=pts.device, dtype=pts.dtype)).reshape(len(pts), 6)
    return affine_points(affine_inverse(theta), pts)


@dataclass
class DTIState(FittedState):
    modules: np.ndarray   # the transformation modules, in order
    model: dict           # the trained network's and prototypes' weights (torch state_dict as arrays)


class DTIKMeans(Method):
    name, title = "dti-kmeans", "DTI K-means (deep transformation-invariant)"
    config, state, inputs = DTIKMeansConfig, DTIState, ("images",)
    paper = "Monnier et al. 2020, Deep Transformation-Invariant Clustering"
    gmm = False   # DTI GMM (Eq. 5) instead of K-means (Eq. 4)

    def train(self, stack: Stack, cfg, device: torch.device, seed: int):
        """Train on the images (Progress each step, Snapshot each epoch) and return the result."""
        with torch_threads(cfg.threads):
            run = DTIRun(stack, cfg, device, seed, self.gmm)
            while not run.curriculum.done:
                tally = yield from run.run_epoch()
                run.end_epoch(tally)
                yield Snapshot(_protos_numpy(run.model, run.channels_last))
            train_s = time.perf_counter() - run.start
            return (yield from self._fitted(run, train_s))

    def refine(self, stack: Stack, cfg, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """``refine_epochs`` epochs from the edited prototypes with every module in, then every item aligned; pinned
        items are assigned to their cluster in training and in the result.

        The edit dropped the network (the state), so encoder and heads start fresh, with the fit's seed. The heads
        start at the identity, so the first steps see the edited prototypes as they are, and the curriculum is
        skipped: it exists to find prototypes before warps can hide them, and these are already found. The first
        half of the epochs hold every item in its edited cluster, so that the fresh network learns the alignments
        the edit asks for before assignments may change (measured: freeing them at once lost accuracy, see
        docs/refine.md). No cluster moves (re-seeding, splits): the clusters are the user's. GMM variances and
        weights start afresh."""
        with torch_threads(cfg.threads):
            protos = to_nchw(torch.from_numpy(np.asarray(start.prototypes, np.float32)).to(device))
            run = DTIRun(stack, cfg, device, int(start.config.get("seed", 0)), self.gmm, protos)
            edited = torch.from_numpy(np.asarray(start.labels, np.int64)).to(device)
            run.curriculum.active = len(run.modules)
            run.total = cfg.refine_epochs * math.ceil(len(run.x) / run.batch_size)
            for epoch in range(cfg.refine_epochs):
                run.pinned = edited if epoch < cfg.refine_epochs // 2 else pinned.to(device)
                yield from run.run_epoch()
                yield Snapshot(_protos_numpy(run.model, run.channels_last))
            return (yield from self._fitted(run, time.perf_counter() - run.start))

    def _fitted(self, run: DTIRun, train_s: float):
        """The result of a finished run (generator): every item aligned by the final model, the run's report
        and the weights."""
        cfg, model = run.cfg, run.model
        fields, final_loss = yield from _infer(model, run.stack, run.device, cfg, run.weights, run.autocast,
                                               max(run.batch_size, cfg.infer_batch_size), run.pinned)
        timing, extras = run.report(train_s)
        fields["extras"].update(extras)
        state = DTIState(np.asarray(run.modules), {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()})
        return self.result(cfg, state, prototypes=_protos_numpy(model, run.channels_last),
                           history=run.history + [final_loss], timing=timing, **fields)

    def rebuild(self, result: ClusteringResult, device) -> tuple[DTIModel, object]:
        """The trained model of a DTI result (from its saved state), and its config."""
        cfg = self.config_of(result)
        modules = tuple(str(m) for m in np.asarray(result.state.modules).reshape(-1))
        _, c, h, w = np.asarray(result.state.model["prototypes"]).shape
        model = DTIModel(cfg, c, (h, w), modules, self.gmm)
        model.load_state_dict({key: torch.from_numpy(np.asarray(v)) for key, v in result.state.model.items()})
        return model.to(device), cfg

    def _inference_setup(self, result: ClusteringResult, stack: Stack, device: torch.device):
        """The trained model of a result, checked against new images, with what inference needs."""
        model, cfg = self.rebuild(result, device)
        check_same_size(stack, int(np.prod(result.prototypes.shape[1:])))
        if stack.item_shape != tuple(result.prototypes.shape[1:]):
            raise InputError(f"The new images are {stack.item_shape} but the result was fitted on {tuple(result.prototypes.shape[1:])}: give images of the same size.")
        weights, autocast = loss_setup(cfg, model.size, device)
        return model, cfg, weights, autocast

    @staticmethod
    def encoder_bfloat16(cfg, device: torch.device) -> bool:
        """Predict's encoder in bfloat16 on the CPU: with mixed_precision, where the CPU computes it natively.
        Measured on MNIST (K = 10, 2,000 held back): ACC 0.6540 vs 0.6545, 2 labels changed (both near-ties),
        2.2x the rate. On CUDA the whole network already runs under autocast (``loss_setup``)."""
        return bool(cfg.mixed_precision and device.type == "cpu" and cpu_bfloat16())

    def embed(self, result: ClusteringResult, items, rows, device: torch.device) -> np.ndarray:
        """The object map's features: each image pulled back into its own prototype's frame through the inverse of its
        spatial modules' warps (``params/<module>``; exact for affine and projective maps, iterative for the TPS), so
        what is left is its appearance; the scores (``Method.embed``) when the result keeps no warps (a result
        edited by hand) or the images are not a stack."""
        names = () if result.state is None else tuple(str(m) for m in np.asarray(result.state.modules).reshape(-1))
        if not hasattr(items, "batch") or any(n in SPATIAL_MODULES and n not in result.params for n in names):
            return super().embed(result, items, rows, device)
        x = to_nchw(torch.from_numpy(items.batch(0, items.n)).to(device))
        pts = identity_points(tuple(x.shape[-2:]), device).reshape(1, -1, 2).expand(len(x), -1, -1)
        for name in names:        # g⁻¹ = g_M⁻¹ ∘ … ∘ g_1⁻¹ (TransformSequence.display_points)
            if name in SPATIAL_MODULES:
                pts = inverse_points(name, torch.as_tensor(np.asarray(result.params[name][rows]), device=device), pts)
        grid = pts.reshape(len(x), *x.shape[-2:], 2).to(x.dtype)
        return warp(x, grid, padding_mode="zeros").reshape(len(x), -1).cpu().numpy()

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Align every fitted prototype onto each new image and assign the closest (or most probable)."""
        model, cfg, weights, autocast = self._inference_setup(result, stack, device)
        fields, _ = drain(_infer(model, stack, device, cfg, weights, autocast, batch_size or cfg.infer_batch_size,
                                 bfloat16=self.encoder_bfloat16(cfg, device)))
        return self.predicted(result, **fields)

    def align(self, result: ClusteringResult, stack: Stack, device: torch.device, index: int | None = None):
        """For the alignment inspector: every prototype transformed onto one image, and the image's scores
        (a function of the image alone: ``index`` in the fitted stack changes nothing)."""
        model, cfg, weights, autocast = self._inference_setup(result, stack, device)
        model.eval()
        xb = to_nchw(torch.from_numpy(stack.batch(0, 1)).to(device))
        with torch.no_grad():
            _, recon, scores = _align_batch(model, xb, len(model.sequence.names), weights, autocast, self.gmm, cfg,
                                            InferenceEncoder(model.encoder))   # float32: the fit's numbers
        return from_nchw(recon[0].float(), _channels_last(stack)).cpu().numpy(), scores[0].float().cpu().numpy()


class DTIGMM(DTIKMeans):
    name, title, config, gmm = "dti-gmm", "DTI GMM (deep transformation-invariant)", DTIGMMConfig, True


DTI_KMEANS = register(DTIKMeans())
DTI_GMM = register(DTIGMM())
