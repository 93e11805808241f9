"""Experiment drivers built on the public API: model selection (ST / AI K-means, paper 000 Sec. 4.2)
and k-NN accuracy on NT representations (paper 004 Table 5). They use the methods; no method uses them."""
from __future__ import annotations

import numpy as np
import torch

from .api import fit, predict, prepare
from .core.execute import Job, execute
from .errors import InputError
from .methods import get_method
from .methods.nt import standardise
from .methods.st_kmeans import LANDMARK_GRID, LR_GRID, AIKMeans
from .core.validation import as_stack, check_k, check_seed


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
