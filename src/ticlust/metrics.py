"""Clustering scores against ground-truth labels: Hungarian ACC, majority-map ACC, NMI, ARI."""
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
