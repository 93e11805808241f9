"""Clustering scores against ground-truth labels (Hungarian ACC, majority-map ACC, NMI, ARI), and a segmentation's
object-matching score against true masks (F1 at an IoU threshold)."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score


def _contingency(labels_true, labels_pred) -> np.ndarray:
    t = np.unique(np.asarray(labels_true), return_inverse=True)[1]
    p = np.unique(np.asarray(labels_pred), return_inverse=True)[1]
    table = np.zeros((p.max() + 1, t.max() + 1), dtype=np.int64)
    np.add.at(table, (p, t), 1)
    return table


def hungarian_accuracy(labels_true, labels_pred) -> float:
    """Accuracy under the best one-to-one map from clusters to classes (the usual clustering ACC)."""
    table = _contingency(labels_true, labels_pred)
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / table.sum())


def majority_accuracy(labels_true, labels_pred) -> float:
    """Accuracy when each cluster is named after its most frequent class (many-to-one; >= Hungarian)."""
    table = _contingency(labels_true, labels_pred)
    return float(table.max(axis=1).sum() / table.sum())


def nmi(labels_true, labels_pred) -> float:
    """Normalised mutual information (arithmetic normalisation)."""
    return float(normalized_mutual_info_score(labels_true, labels_pred))


def ari(labels_true, labels_pred) -> float:
    """Adjusted Rand index."""
    return float(adjusted_rand_score(labels_true, labels_pred))


def evaluate(labels_true, labels_pred) -> dict[str, float]:
    """All four scores in one dictionary."""
    labels_true = np.asarray(labels_true).ravel()
    labels_pred = np.asarray(labels_pred).ravel()
    if labels_true.shape != labels_pred.shape:
        raise ValueError(f"Got {labels_true.size} true labels for {labels_pred.size} items: they must match one to one.")
    return {
        "acc": hungarian_accuracy(labels_true, labels_pred),
        "acc_majority": majority_accuracy(labels_true, labels_pred),
        "nmi": nmi(labels_true, labels_pred),
        "ari": ari(labels_true, labels_pred),
    }


def segmentation_f1(truth, labels, iou: float = 0.5) -> dict[str, float]:
    """How well a label image finds the objects of a true one: an object is found when a predicted object overlaps
    it with an intersection over union above ``iou`` (above 0.5 such a match is one to one). Returns the counts of
    true positives, false positives (predicted objects matching none) and false negatives (true objects found by
    none), precision, recall and F1 = 2 TP / (2 TP + FP + FN), the score of the cell-segmentation literature
    (Caicedo et al. 2019; Cellpose, StarDist)."""
    truth, labels = np.asarray(truth), np.asarray(labels)
    if truth.shape != labels.shape:
        raise ValueError(f"The label images differ in shape ({truth.shape} and {labels.shape}): compare one field's.")
    if not 0.5 <= iou < 1:
        raise ValueError(f"iou={iou!r} must be from 0.5 (one-to-one matches) to below 1.")
    t_ids, t = np.unique(truth.ravel(), return_inverse=True)
    p_ids, p = np.unique(labels.ravel(), return_inverse=True)
    both = (t_ids[t] > 0) & (p_ids[p] > 0)
    pairs, overlap = np.unique(t[both].astype(np.int64) * len(p_ids) + p[both], return_counts=True)
    t_area, p_area = np.bincount(t, minlength=len(t_ids)), np.bincount(p, minlength=len(p_ids))
    ti, pi = pairs // len(p_ids), pairs % len(p_ids)
    tp = int(np.sum(overlap / (t_area[ti] + p_area[pi] - overlap) > iou))
    n_true, n_pred = int(np.sum(t_ids > 0)), int(np.sum(p_ids > 0))
    fp, fn = n_pred - tp, n_true - tp
    f1 = 2 * tp / (2 * tp + fp + fn) if n_true + n_pred else 1.0
    return {"tp": tp, "fp": fp, "fn": fn, "precision": tp / n_pred if n_pred else 1.0,
            "recall": tp / n_true if n_true else 1.0, "f1": float(f1)}
