"""segmentation_f1: objects matched one to one above an IoU of 0.5, counted as the segmentation literature does."""
import numpy as np
import pytest

from ticlust.metrics import segmentation_f1


def squares():
    truth = np.zeros((40, 40), np.int32)
    truth[2:10, 2:10], truth[2:10, 20:28], truth[20:30, 20:30] = 1, 2, 3
    return truth


def test_the_same_objects_under_other_ids_score_one():
    truth = squares()
    relabelled = np.choose(truth, [0, 7, 5, 9])
    assert segmentation_f1(truth, relabelled) == {"tp": 3, "fp": 0, "fn": 0, "precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_merges_misses_and_debris_count_as_they_should():
    truth = squares()
    pred = np.zeros_like(truth)
    pred[2:10, 2:28] = 1                       # objects 1 and 2 merged: IoU 64/208 each, neither found
    pred[21:30, 20:30] = 2                     # object 3, a row short: IoU 90/100, found
    pred[35:37, 35:37] = 3                     # debris
    s = segmentation_f1(truth, pred)
    assert (s["tp"], s["fp"], s["fn"]) == (1, 2, 2)
    assert s["f1"] == pytest.approx(2 / (2 + 2 + 2)) and s["precision"] == pytest.approx(1 / 3)


def test_empty_images_and_bad_arguments():
    empty = np.zeros((8, 8), np.int32)
    assert segmentation_f1(empty, empty)["f1"] == 1.0
    assert segmentation_f1(squares(), np.zeros((40, 40), np.int32))["f1"] == 0.0
    with pytest.raises(ValueError, match="differ in shape"):
        segmentation_f1(empty, np.zeros((9, 8), np.int32))
    with pytest.raises(ValueError, match="iou=0.3 must be from 0.5"):
        segmentation_f1(empty, empty, iou=0.3)
