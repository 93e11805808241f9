"""Editing a clustering by hand and re-fitting from the edit (issue 18, library part)."""
import numpy as np
import pytest

import ticlust
from ticlust import curation
from ticlust.errors import InputError
from ticlust.result import OUTLIER
from ticlust.datasets.samples import glyphs_sample


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def blobs(corner_squares):
    """Four well-separated groups of 8×8 images (a bright square in one of four corners)."""
    return corner_squares()


def bad_start(x, y):
    """A K = 4 result with two prototypes on group 0 and groups 2 and 3 under one prototype."""
    good = ticlust.fit(x, method="kmeans", k=4, seed=0)
    assert ticlust.evaluate(y, good.labels)["acc"] == 1.0
    by_group = [int(np.bincount(good.labels[y == g]).argmax()) for g in range(4)]
    merged = curation.merge(good, by_group[2], by_group[3])
    group0 = [int(np.bincount(merged.labels[y == 0]).argmax())][0]
    bad = curation.split(x, merged, group0, seed=0)
    assert ticlust.evaluate(y, bad.labels)["acc"] <= 0.8
    return good, bad


def test_split_the_merged_merge_the_duplicated_then_refine(blobs):
    x, y = blobs
    good, bad = bad_start(x, y)
    shared = int(np.bincount(bad.labels[y == 2]).argmax())          # the prototype holding groups 2 and 3
    halves = sorted({int(c) for c in bad.labels[y == 0]})           # group 0's two prototypes
    fixed = curation.split(x, bad, shared, seed=1)
    fixed = curation.merge(fixed, halves[0], halves[1])
    assert fixed.state is None and [e["op"] for e in fixed.edits] == ["merge", "split", "split", "merge"]
    with pytest.raises(InputError, match="refine"):
        ticlust.predict(fixed, x)
    refined = ticlust.refine(x, fixed)                              # ticlust.refine is curation.refine
    assert ticlust.evaluate(y, refined.labels)["acc"] == ticlust.evaluate(y, good.labels)["acc"] == 1.0
    assert refined.k == 4 and refined.edits[-1]["op"] == "refine"
    assert np.array_equal(ticlust.predict(refined, x).labels, refined.labels)


@pytest.mark.parametrize("method", ["kmeans", "gmm"])
def test_moved_items_stay_where_the_user_put_them(blobs, tmp_path, method):
    x, y = blobs
    res = ticlust.fit(x, method=method, k=4, seed=0)
    target = int(res.labels[y == 1][0])
    moved = curation.move(res, [0, 1], target)                        # two group-0 images into group 1's cluster
    assert moved.labels[0] == moved.labels[1] == target and res.labels[0] != target   # the input is unchanged
    refined = curation.refine(x, moved)
    assert refined.labels[0] == refined.labels[1] == target
    assert ticlust.evaluate(y[2:], refined.labels[2:])["acc"] == 1.0   # the others are where they belong
    free = curation.refine(x, moved, keep_pinned=False)
    assert free.labels[0] != target
    back = ticlust.load_result(refined.save(tmp_path / "r.npz"))       # the edit history round-trips
    assert back.edits == refined.edits and np.array_equal(back.pinned, refined.pinned)


def test_refine_re_aligns_for_st_kmeans():
    x, y = glyphs_sample(n_per_class=6, size=16, seed=1)
    fast = dict(steps=4, affine_steps=3, predict_steps=4, max_iter=3, landmarks=3)
    res = ticlust.fit(x, method="st-kmeans", k=4, seed=0, device="cpu", **fast)
    moved = curation.move(res, [0], int((res.labels[0] + 1) % 4))
    refined = curation.refine(x, moved, device="cpu")
    assert refined.labels[0] == moved.labels[0] and refined.aligned.shape == res.aligned.shape
    assert refined.state is not None and refined.prototypes.shape == res.prototypes.shape
    # an outlier is fitted without, then aligned onto the new prototypes like a new image: every
    # per-item field (aligned images, grids, warp parameters) is whole again
    again = curation.refine(x, curation.mark_outliers(refined, [5]), device="cpu")
    assert again.aligned.shape == res.aligned.shape and again.grids.shape == res.grids.shape
    assert {k: v.shape for k, v in again.params.items()} == {k: v.shape for k, v in res.params.items()}
    assert again.pinned[5] == OUTLIER and again.labels[0] == moved.labels[0]


def test_outliers_are_left_out_of_refine_flagged_and_saved(blobs, tmp_path):
    x, y = blobs
    debris = np.concatenate([x, np.full((3, 8, 8), 0.9, np.float32)])     # three bright squares: debris
    res = ticlust.fit(debris, method="kmeans", k=4, seed=0)
    marked = curation.mark_outliers(res, [80, 81, 82])
    assert res.pinned is None and marked.edits[-1] == {"op": "outliers", "items": [80, 81, 82]}
    refined = curation.refine(debris, marked)
    lo, hi = res.config["input_range"]
    scaled, kept = (debris - lo) / (hi - lo), np.arange(80)
    for c in range(4):     # Lloyd converged: each prototype is the mean of its members, the debris left out
        np.testing.assert_allclose(refined.prototypes[c], scaled[kept[refined.labels[kept] == c]].mean(0), atol=1e-5)
    assert ticlust.evaluate(y, refined.labels[:80])["acc"] == 1.0 and refined.scores.shape == (83, 4)
    rows = refined.assignments_table(tmp_path / "a.csv")
    assert [r["outlier"] for r in rows] == [False] * 80 + [True] * 3
    assert "outlier" in (tmp_path / "a.csv").read_text().splitlines()[0]
    back = ticlust.load_result(refined.save(tmp_path / "r.npz"))
    assert np.array_equal(back.pinned, refined.pinned) and back.edits == refined.edits
    unrefined = ticlust.load_result(marked.save(tmp_path / "m.npz"))     # edited, no fitted state: loads as such
    assert unrefined.state is None and unrefined.edits == marked.edits and np.array_equal(unrefined.pinned, marked.pinned)
    free = curation.refine(debris, curation.move(marked, [0], 3), keep_pinned=False)     # moves go, outliers stay
    assert list(np.flatnonzero(free.pinned != -1)) == [80, 81, 82]
    back_in = curation.move(marked, [81], 2)                                              # moved: no longer an outlier
    assert back_in.pinned[81] == 2 and back_in.assignments_table()[81]["outlier"] is False
    with pytest.raises(InputError, match="fewer than K"):
        curation.refine(debris, curation.mark_outliers(res, np.arange(81)))
    with pytest.raises(InputError, match="No items to mark as outliers were selected"):
        curation.mark_outliers(res, [])


def test_edits_are_checked(blobs):
    x, _ = blobs
    res = ticlust.fit(x, method="kmeans", k=4, seed=0)
    with pytest.raises(InputError, match="itself"):
        curation.merge(res, 1, 1)
    with pytest.raises(InputError, match="not a cluster"):
        curation.merge(res, 0, 7)
    with pytest.raises(InputError, match="Item 500 is out of range"):
        curation.move(res, [500], 0)
    with pytest.raises(InputError, match="items"):
        curation.refine(x[:10], curation.move(res, [0], 1))


def test_export_gallery_from_the_cli(blobs, tmp_path, capsys):
    from PIL import Image

    from ticlust.cli import main

    x, _ = blobs
    np.save(tmp_path / "x.npy", x)
    assert main(["fit", str(tmp_path / "x.npy"), "--method", "kmeans", "--k", "4", "--quiet", "-o", str(tmp_path / "r.npz")]) == 0
    assert main(["export", str(tmp_path / "r.npz"), "--input", str(tmp_path / "x.npy"), "--gallery", str(tmp_path / "out")]) == 0
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["cluster_00.png", "cluster_01.png", "cluster_02.png", "cluster_03.png", "prototypes.png"]
    first = np.asarray(Image.open(tmp_path / "out" / "cluster_00.png"))
    assert first.ndim == 3 and first.shape[2] == 3 and first.shape[0] >= 2 * 8    # 20 members: two rows of 8×8 tiles
    assert main(["export", str(tmp_path / "r.npz"), "--input", str(tmp_path / "x.npy")[:-4] + "_missing.npy",
                 "--gallery", str(tmp_path / "o2")]) == 2


def test_split_off_a_selection_makes_a_new_cluster_refine_learns(blobs):
    """A selection (a lasso on the object map) split off: cluster K, pinned; Refine learns its prototype."""
    x, y = blobs
    res = ticlust.fit(x, method="kmeans", k=3, seed=0)           # four groups in three clusters: two share one
    shared = int(np.bincount(res.labels).argmax())
    group = int(np.bincount(y[res.labels == shared]).argmax())
    picked = np.flatnonzero((res.labels == shared) & (y == group))
    off = curation.split_off(res, picked)
    assert off.k == 4 and off.state is None and res.k == 3          # the input is unchanged
    assert (off.labels[picked] == 3).all() and (off.pinned[picked] == 3).all()
    assert off.edits[-1] == {"op": "split_off", "items": picked.tolist(), "cluster": 3, "from": shared}
    assert np.array_equal(off.prototypes[3], res.prototypes[shared]) and off.scores.shape == (len(x), 4)
    refined = curation.refine(x, off)
    assert refined.k == 4 and (refined.labels[picked] == 3).all()
    assert ticlust.evaluate(y, refined.labels)["acc"] == 1.0
    assert np.array_equal(ticlust.predict(refined, x).labels, refined.labels)
    with pytest.raises(InputError, match="All .* items are selected"):
        curation.split_off(res, np.arange(len(x)))
    with pytest.raises(InputError, match="No items to split off"):
        curation.split_off(res, [])
