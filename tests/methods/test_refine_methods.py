"""Refine for every method (issue 18): from a spoiled clustering mended by hand, back to a good run's accuracy.

For each method: a good fit is spoiled (two groups merged under one prototype, another group split over
two), the user mends it (split the shared cluster, merge the two halves) and moves two items into a wrong
cluster; refine must reach the good run's accuracy on the other items and keep the moved ones where they
were put (and, told not to, send them back), give the same result twice, leave its input as it was, and
save, load and predict.
"""
import copy

import numpy as np
import pytest

import ticlust
from ticlust import curation
from ticlust.datasets.shapes import MEAN_SHAPE_A, MEAN_SHAPE_B, simulate_shapes
from ticlust.events import Done, Progress
from ticlust.datasets.samples import digits_sample

pytestmark = pytest.mark.usefixtures("one_thread")


def three_shapes():
    """45 shapes of 8 landmarks from three mean shapes (A, B and A with a bent vault), rotated and shifted."""
    bent = MEAN_SHAPE_A.copy()
    bent[2:4] += np.array([[-15.0, 20.0], [10.0, 25.0]])
    return simulate_shapes(np.stack([MEAN_SHAPE_A, MEAN_SHAPE_B, bent]), n=45, sigma=3.0, seed=0)


def four_digits():
    """30 each of the digits 0, 1, 4 and 7 at 16×16 (the package's sample), labelled 0-3."""
    x, y = digits_sample(16)
    index = np.concatenate([np.flatnonzero(y == d)[:30] for d in (0, 1, 4, 7)])
    return x[index], np.repeat(np.arange(4), 30)


def majority(labels, y, group) -> int:
    return int(np.bincount(labels[y == group]).argmax())


def spoiled_and_mended(x, y, method, opts):
    """(good fit, spoiled result, mended result, moved items): the last two groups merged and the first
    split, then mended by hand (split the shared cluster, merge the two halves), then two items of the
    first group moved (pinned) into the last group's cluster."""
    groups = len(np.unique(y))
    good = ticlust.fit(x, method=method, k=groups, seed=0, device="cpu", progress=False, **opts)
    merged = curation.merge(good, majority(good.labels, y, groups - 2), majority(good.labels, y, groups - 1))
    spoiled = curation.split(x, merged, majority(merged.labels, y, 0), seed=0, device="cpu")
    shared = majority(spoiled.labels, y, groups - 1)
    halves = np.bincount(spoiled.labels[y == 0], minlength=spoiled.k).argsort()[-2:]
    mended = curation.split(x, spoiled, shared, seed=1, device="cpu")
    mended = curation.merge(mended, int(halves.min()), int(halves.max()))
    moved = np.flatnonzero(y == 0)[:2]
    return good, spoiled, curation.move(mended, moved, majority(mended.labels, y, groups - 1)), moved


DTI_SMALL = dict(max_epochs=4, min_stage_epochs=1, patience=1, final_epochs=1, batch_size=16, encoder_width=0.25,
                 threads=1, refine_epochs=3)
CASES = {
    "procrustes-kmeans": (three_shapes, {}),
    "shape-kmeans": (three_shapes, {}),
    "dti-kmeans": (four_digits, DTI_SMALL),
    "dti-gmm": (four_digits, DTI_SMALL),
    "nt": (four_digits, dict(max_iter=5, m=256, init="kmeans")),
    "pssc": (four_digits, dict(pad_to=16, scales=2, candidates=120, representatives=40, restarts=3, poc=0)),
    "rigid-spectral": (four_digits, dict(anchors=60)),
    "cell-kmeans": (four_digits, dict(scale=0.5, n_init=3)),   # digits: fine structure
}


@pytest.mark.parametrize("method", list(CASES))
def test_refine_mends_a_spoiled_clustering(method, tmp_path):
    make, opts = CASES[method]
    x, y = make()
    good, spoiled, mended, moved = spoiled_and_mended(x, y, method, opts)
    others = np.setdiff1d(np.arange(len(y)), moved)
    good_acc = ticlust.evaluate(y, good.labels)["acc"]
    assert ticlust.evaluate(y, spoiled.labels)["acc"] <= good_acc - 0.15
    before = copy.deepcopy(mended)
    refined = curation.refine(x, mended, device="cpu")
    assert np.all(refined.labels[moved] == mended.labels[moved])                      # pinned items stay
    assert ticlust.evaluate(y[others], refined.labels[others])["acc"] >= good_acc - 0.05   # the others: a good run's
    assert refined.k == good.k and refined.state is not None and refined.edits[-1]["op"] == "refine"
    assert [e["op"] for e in refined.edits] == ["merge", "split", "split", "merge", "move", "refine"]
    assert refined.history and np.isfinite(refined.history[-1])
    for field in ("labels", "scores", "prototypes", "pinned"):                        # the input is left as it was
        assert np.array_equal(getattr(mended, field), getattr(before, field))
    events = list(curation.refine_events(x, mended, device="cpu"))                    # events for the widget's bar
    assert any(isinstance(e, Progress) for e in events) and isinstance(events[-1], Done)
    again = events[-1].result                                                         # and the same result twice
    assert np.array_equal(again.labels, refined.labels) and np.array_equal(again.prototypes, refined.prototypes)
    free = curation.refine(x, mended, device="cpu", keep_pinned=False)               # unpinned, they go back
    assert np.all(free.labels[moved] == majority(free.labels, y, 0))
    back = ticlust.load_result(refined.save(tmp_path / "r.npz"))
    assert back.edits == refined.edits and np.array_equal(back.labels, refined.labels)
    predicted = ticlust.predict(back, x).labels                                       # the refit state predicts
    assert np.mean(predicted[others] == refined.labels[others]) >= 0.95
