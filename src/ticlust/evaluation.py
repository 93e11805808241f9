"""Experiment drivers built on the public API: model selection (ST / AI K-means, paper 000 Sec. 4.2), choosing K
(a K scan on a method's own labels and scores) and k-NN accuracy on NT representations (paper 004 Table 5). They use
the methods; no method uses them."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from .api import fit, predict, prepare
from .core.execute import Job, best_of, execute
from .core.stack import Stack
from .errors import InputError, whole_number
from .methods import get_method
from .methods.nt import standardise
from .methods.st_kmeans import LANDMARK_GRID, LR_GRID, AIKMeans
from .metrics import ari
from .core.validation import as_stack, check_distinct, check_k, check_seed, random_subset


def select_model(data, method: str = "st-kmeans", k: int | None = None, device: str = "auto", seed: int = 0,
                 landmarks=LANDMARK_GRID, lrs=LR_GRID, **params):
    """Model selection of Sec. 4.2 / Fig. 5: sweep landmarks {3², …, 8²} (ST only) × the paper's learning
    rates, keep the run with the lowest distortion (Eq. 2). Returns (best result, table of every run:
    landmarks, lr, distortion, iterations, fit_s). Other grids can be given for quick looks."""
    spec = get_method(method)
    if not isinstance(spec, AIKMeans):
        raise InputError(f"Model selection is for st-kmeans and ai-kmeans, not {method!r}.")
    stack = prepare(data, spec)
    cfg = spec.make_config(check_k(spec.default_k if k is None else k, stack.n), **params)
    spec.validate(stack)
    tps = spec.landmarks(cfg) is not None
    if not len(lrs) or (tps and not len(landmarks)):
        raise InputError("The model-selection grids are empty: give at least one learning rate and landmark grid.")
    bad = [g for g in landmarks if not 3 <= int(g) <= 8] if tps else []
    if bad:
        raise InputError(f"Landmark grid side {bad[0]} is out of range: choose sides between 3 and 8.")
    rows: list[dict] = []

    def work(dev, seed):
        best, table = yield from spec.sweep(stack, cfg, dev, seed, landmarks, lrs)
        rows.extend(table)
        return best

    best = execute(Job(work, device=device, seed=check_seed(seed), label="selection", losses=False))
    return best, rows


def knn_evaluate(train, train_labels, test, test_labels, k: int | None = None, n_neighbors: int = 1,
                 device: str = "auto", seed: int = 0, **params) -> dict:
    """Table 5: fit NT on ``train``, represent ``test``, and k-NN accuracy on NT representations vs raw data.

    Returns {"acc_nt", "acc_raw", "fit": the training result}. k-NN (scikit-learn, Euclidean) searches the test
    items among the training items; the raw baseline uses the same standardised pixels.
    """
    from sklearn.neighbors import KNeighborsClassifier

    train_labels, test_labels = np.asarray(train_labels).ravel(), np.asarray(test_labels).ravel()
    if len(train_labels) != len(train) or len(test_labels) != len(test):
        raise InputError("Give one label per item for both the training and the test split.")
    if not isinstance(n_neighbors, (int, np.integer)) or not 1 <= n_neighbors <= len(train_labels):
        raise InputError(f"n_neighbors = {n_neighbors!r} must be a whole number between 1 and the training size.")
    res = fit(train, method="nt", k=k, device=device, seed=seed, progress=False, **params)
    rep_test = predict(res, test, device=device).params["representation"]
    knn = KNeighborsClassifier(n_neighbors=n_neighbors).fit(res.params["representation"], train_labels)
    acc_nt = float((knn.predict(rep_test) == test_labels).mean())
    tr, te = (standardise(torch.from_numpy(as_stack(a, allow_vectors=True).numpy().reshape(len(a), -1))).numpy()
              for a in (train, test))
    acc_raw = float((KNeighborsClassifier(n_neighbors=n_neighbors).fit(tr, train_labels).predict(te) == test_labels).mean())
    return {"acc_nt": acc_nt, "acc_raw": acc_raw, "fit": res}


# ---- choosing K --------------------------------------------------------------------------------------------------
#: The criteria a K scan measures, each a score per K where higher is better (``KScan.scores``):
#: "stability"  mean adjusted Rand index between the repeats' labels of every scanned item, each repeat fitted on
#:              its own seeded subsample and assigning every item (Ben-Hur et al. 2002; Lange et al. 2004);
#: "silhouette" the simplified silhouette of the method's own scores, (b − a) / max(a, b) with a the item's cost to its
#:              cluster and b to the next nearest (Hruschka et al. 2004), averaged over items and repeats;
#: "knee"       how far the method's mean cost per item, fallen from its value at the smallest K and scaled to [0, 1],
#:              lies above the straight line from the first K to the last (the Kneedle knee, Satopää et al. 2011).
#: The default is the knee: on the labelled sets here it found the true K (± 1) most often, the real cells above all
#: (benchmarks/results/k_scan.md); stability and the silhouette mostly rank K = 2 or 3 first on real data.
CRITERIA = ("stability", "silhouette", "knee")
K_SCAN_DEFAULT = (2, 16)


@dataclass
class ScanFit:
    """One fit of a K scan (or one K of a merged one), reduced to what the criteria read: every scanned item's label,
    its mean cost and its mean simplified silhouette (the fit's own scores on every item), and the fit's final loss."""

    k: int
    labels: np.ndarray
    cost: float
    silhouette: float
    final_loss: float
    scores: np.ndarray | None = None     # (N, K) costs, kept where the scan merges


@dataclass
class KScan:
    """A K scan: for each K of ``ks`` the score of every criterion (``scores[name]``, higher is better) and its spread
    over the repeats (``spread[name]``, 0 where the criterion is one number per K), the criterion that decides and the K
    it suggests. Plain numbers, so a table or a plot draws it as it is (``rows``)."""

    method: str
    ks: list[int]
    scores: dict[str, list[float]]
    spread: dict[str, list[float]]
    criterion: str
    suggested: int
    items: int
    repeats: int
    fraction: float
    seed: int
    merged: bool = False         # the smaller Ks are the top K's clusters dissolved (over-clustering then merging)
    cost: list[float] | None = None   # per K the method's mean cost per item (the elbow curve the knee is read from)

    def suggestion(self, criterion: str) -> int:
        """The K that ``criterion`` scores highest (ties: the larger K, the finer partition scored as well): the scan's
        ``suggested`` for its own criterion, another criterion's answer without fitting again."""
        if criterion not in self.scores:
            raise InputError(f"criterion = {criterion!r} is not one of {', '.join(self.scores)}.")
        best = np.asarray(self.scores[criterion])
        return max(k for k, v in zip(self.ks, best) if v >= best.max() - 1e-9)

    def rows(self) -> list[dict]:
        """One dict per K: ``k``, each criterion's score and ``<criterion>_sd``, ``cost`` and ``suggested`` (bool)."""
        return [{"k": k, **{c: self.scores[c][i] for c in self.scores}, **{f"{c}_sd": self.spread[c][i] for c in self.spread},
                 "cost": None if self.cost is None else self.cost[i], "suggested": k == self.suggested}
                for i, k in enumerate(self.ks)]

    def table(self) -> str:
        """The scan as a text table, the deciding criterion first and the suggested K marked."""
        names = [self.criterion] + [c for c in self.scores if c != self.criterion]
        lines = ["   K  " + "  ".join(f"{n:>16s}" for n in names)]
        for row in self.rows():
            cells = [f"{row[n]:8.3f} ± {row[n + '_sd']:5.3f}" for n in names]
            lines.append(f"{row['k']:4d}  " + "  ".join(cells) + ("   <- suggested" if row["suggested"] else ""))
        return "\n".join(lines)


def scan_k(data, method: str = "kmeans", ks=range(K_SCAN_DEFAULT[0], K_SCAN_DEFAULT[1] + 1), device: str = "auto",
           seed: int = 0, repeats: int = 3, fraction: float = 0.8, criterion: str = "knee",
           max_items: int | None = 5000, merge: bool = False, progress: bool | None = None, **params) -> KScan:
    """Fit ``method`` at every K of ``ks`` and suggest the K whose ``criterion`` scores best (``CRITERIA``).

    Each K is fitted ``repeats`` times, on seeded subsamples of ``fraction`` of the items (seeds seed, seed+1, …), and
    each fit assigns every item; the criteria are read from those fits (the method's own labels and scores). A stack of
    more than ``max_items`` items is scanned on a seeded sample of that many (None: all). ``merge``: over-cluster then
    merge — each repeat fits the top K once and the smaller Ks are its clusters dissolved into their neighbours
    (:func:`merged`), ``repeats`` fits in all instead of one per K and repeat. ``params`` are the method's.
    Runs through the execution seam (:func:`scan_job`), so the events are a fit's; returns a :class:`KScan`."""
    from .api import TerminalProgress

    bar = TerminalProgress() if (progress if progress is not None else sys.stderr.isatty()) else None
    job = scan_job(data, method, ks, device, seed, repeats, fraction, criterion, max_items, merge, **params)
    return execute(job, None if bar is None else bar.sink)


def scan_job(data, method: str = "kmeans", ks=range(K_SCAN_DEFAULT[0], K_SCAN_DEFAULT[1] + 1), device: str = "auto",
             seed: int = 0, repeats: int = 3, fraction: float = 0.8, criterion: str = "knee",
             max_items: int | None = 5000, merge: bool = False, **params) -> Job:
    """:func:`scan_k` as a :class:`~ticlust.core.execute.Job`: the input and the range checked now, before any fit."""
    spec = get_method(method)
    seed = check_seed(seed)
    items = prepare(data, spec)
    n = items.n if isinstance(items, Stack) else len(items)
    keep = None if max_items is None else random_subset(n, whole_number(max_items, "max_items", 2, "items"), seed)
    if keep is not None:
        items, n = (items.subset(keep) if isinstance(items, Stack) else items[keep]), len(keep)
    ks, repeats, size = scan_range(ks, n, repeats, fraction, criterion)
    configs = {k: spec.make_config(check_k(k, n), **params) for k in ks}
    if isinstance(items, Stack):
        items.pictures = False
        check_distinct(items, ks[-1])
    subsets = [np.sort(np.random.default_rng([seed, r]).choice(n, size, replace=False)) for r in range(repeats)]

    def work(dev, seed):
        fits = [(k, r) for k in (ks[-1:] if merge else ks) for r in range(repeats)]
        candidates = [lambda k=k, r=r: scan_fit(spec, items, subsets[r], configs[k], dev, seed + r, merge) for k, r in fits]
        _, done = yield from best_of(candidates, lambda i, _n: f"K scan: K={fits[i][0]}, fit {fits[i][1] + 1}/{repeats}")
        if merge:
            done = [f for fit in done for f in merged(fit, ks)]
        groups = [[f for f in done if f.k == k] for k in ks]
        scores, spread = scan_scores(ks, groups)
        scan = KScan(spec.name, list(ks), scores, spread, criterion, 0, n, repeats, float(fraction), seed, bool(merge),
                     [float(np.mean([f.cost for f in group])) for group in groups])
        scan.suggested = scan.suggestion(criterion)
        return scan

    return Job(work, device=device, seed=seed, label="K scan", losses=False, stamp=False)


def scan_range(ks, n: int, repeats, fraction, criterion: str) -> tuple[list[int], int, int]:
    """The scan's Ks (sorted, distinct), repeats and subsample size, checked: each a sentence when wrong."""
    values = list(ks) if hasattr(ks, "__iter__") and not isinstance(ks, (str, bytes)) else None
    if values is None or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) for k in values):
        raise InputError(f"ks = {ks!r} must be whole numbers of clusters, e.g. range(2, 17).")
    ks = sorted({int(k) for k in values})
    if criterion not in CRITERIA:
        raise InputError(f"criterion = {criterion!r} is not one of {', '.join(CRITERIA)}.")
    if len(ks) < 3:
        raise InputError(f"The K range holds {len(ks)} whole number(s): give at least 3 values of K (e.g. 2 to 16) so "
                         "that the scores can rise and fall.")
    if ks[0] < 2 or ks[-1] > n - 1:
        raise InputError(f"The K range {ks[0]}–{ks[-1]} is outside 2–{n - 1}: a scan compares partitions of the {n} "
                         "items into at least 2 clusters and fewer clusters than items.")
    repeats = whole_number(repeats, "repeats", 2, "fits per K")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise InputError(f"fraction = {fraction!r} must be a number in (0, 1]: the share of the items each fit sees.")
    size = int(round(fraction * n))
    if size <= ks[-1]:
        raise InputError(f"A subsample of {size} items ({fraction:g} of {n}) cannot hold K = {ks[-1]} clusters: raise "
                         "fraction or lower the top of the K range.")
    return ks, repeats, size


def scan_fit(spec, items, subset: np.ndarray, cfg, device, seed: int, keep_scores: bool = False):
    """One fit of a scan (events): the method trained on ``items[subset]``, then every item assigned by it; with
    ``keep_scores`` its cost to every cluster is kept (what merging reads)."""
    part = items.subset(subset) if isinstance(items, Stack) else items[subset]
    result = yield from spec.train(part, cfg, device, seed)
    costs = np.asarray(spec.predict(result, items, device).scores, np.float64)
    return reduced(costs, float(result.final_loss), costs if keep_scores else None)


def reduced(costs: np.ndarray, final_loss: float, keep: np.ndarray | None = None) -> ScanFit:
    """A fit's (N, K) costs, lower = closer, reduced to what the criteria read (an item's label: its cheapest)."""
    return ScanFit(costs.shape[1], costs.argmin(axis=1), float(np.mean(costs.min(axis=1))),
                   simplified_silhouette(costs), final_loss, keep)


def merged(fit: ScanFit, ks: list[int]) -> list[ScanFit]:
    """Over-clustering then merging: the fit's clusters dissolved one at a time down to each K of ``ks``, each
    dissolved cluster's items joining their next-nearest remaining cluster. The cluster dissolved next is the one
    whose items' cost rises least by it (their cost to the next nearest minus to their own, summed: a small or
    a redundant cluster goes first, as in Ward's merging). Returns a ScanFit per K (the fit's final loss kept)."""
    costs, keep, out = fit.scores, list(range(fit.scores.shape[1])), {}
    while True:
        if len(keep) in ks:
            out[len(keep)] = reduced(costs[:, keep], fit.final_loss)
        if len(keep) <= ks[0]:
            return [out[k] for k in ks]
        order = np.argsort(costs[:, keep], axis=1)
        rows = np.arange(len(costs))
        first, second = np.asarray(keep)[order[:, 0]], np.asarray(keep)[order[:, 1]]
        rise = np.zeros(costs.shape[1])
        np.add.at(rise, first, costs[rows, second] - costs[rows, first])
        keep.remove(min(keep, key=lambda j: rise[j]))


def simplified_silhouette(scores: np.ndarray) -> float:
    """Mean of (b − a) / max(a, b) over items, a and b the lowest and second-lowest of the item's costs (shifted to be
    non-negative where a method's costs are not, a negative log-likelihood)."""
    costs = np.sort(scores - min(0.0, float(scores.min())), axis=1)
    a, b = costs[:, 0], costs[:, 1]
    return float(np.mean((b - a) / np.maximum(b, 1e-12)))


def scan_scores(ks: list[int], fits: list[list[ScanFit]]) -> tuple[dict, dict]:
    """Every criterion's score and spread per K, from the fits of each K (``CRITERIA`` says what each is)."""
    stab = [[ari(a.labels, b.labels) for i, a in enumerate(group) for b in group[i + 1:]] for group in fits]
    sil = [[f.silhouette for f in group] for group in fits]
    cost = np.array([np.mean([f.cost for f in group]) for group in fits])
    drop = (cost[0] - cost) / (cost[0] - cost[-1]) if cost[0] != cost[-1] else np.zeros_like(cost)
    knee = drop - (np.asarray(ks) - ks[0]) / (ks[-1] - ks[0])
    scores = {"stability": [float(np.mean(s)) for s in stab], "silhouette": [float(np.mean(s)) for s in sil],
              "knee": [float(v) for v in knee]}
    spread = {"stability": [float(np.std(s)) for s in stab], "silhouette": [float(np.std(s)) for s in sil],
              "knee": [0.0] * len(ks)}
    return scores, spread
