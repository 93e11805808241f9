"""The result model: per-item fields declared once (result.ITEM_FIELDS) in an Assignments part written batch
by batch; per-item pictures only on request or while small; result files of the fork-point code still load."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import ticlust
from ticlust import curation
from ticlust.api import align_one
from ticlust.result import ITEM_NAMES, PICTURES, Assignments, load_result
from ticlust.core.stack import PICTURE_BYTES, Stack

FIXTURES = Path(__file__).parents[1] / "fixtures"
ST = dict(max_iter=2, steps=3, affine_steps=3, predict_steps=3)


@pytest.fixture(scope="module")
def items():
    return np.load(FIXTURES / "old_items.npy")


def test_old_result_files_still_load(items, tmp_path):
    old = load_result(FIXTURES / "old_st_kmeans.npz")
    assert old.method == "st-kmeans" and old.n == len(items) and old.aligned.shape == items.shape
    assert {"pair_theta", "pair_nu", "affine"} <= set(old.params) and old.grids.shape[0] == old.n
    # the inspector still replays the fit's own warps exactly
    pictures, scores = align_one(old, items[4], device="cpu", index=4)
    np.testing.assert_array_equal(scores, old.scores[4])
    np.testing.assert_allclose(pictures, np.load(FIXTURES / "old_st_kmeans_align4.npy"), atol=1e-6)
    gmm = load_result(FIXTURES / "old_gmm.npz")
    assert gmm.responsibilities.shape == (gmm.n, gmm.k)
    # and save again to the same keys
    again = load_result(old.save(tmp_path / "again.npz"))
    for name in ITEM_NAMES:
        a, b = getattr(old, name), getattr(again, name)
        assert (a is None and b is None) or np.array_equal(a, b)
    assert set(again.params) == set(old.params)


def test_assignments_write_by_batch_read_by_slice():
    out = Assignments(5)
    out.write(0, {"labels": np.array([1, 0]), "scores": np.ones((2, 3)), "params/affine": np.zeros((2, 2, 3))})
    out.write(2, {"labels": np.array([2, 2, 1]), "scores": np.zeros((3, 3)), "params/affine": np.ones((3, 2, 3)),
                  "aligned": None})
    assert out.names == ["labels", "scores", "params/affine"]
    np.testing.assert_array_equal(out.read(["labels"], slice(1, 4))["labels"], [0, 2, 2])
    fields = out.result_fields([0, 4])
    assert set(fields) == {"labels", "scores", "params"} and fields["params"]["affine"].shape == (2, 2, 3)
    assert "aligned" in PICTURES and "grids" in PICTURES and curation._PER_ITEM == ITEM_NAMES


def test_pictures_only_on_request_or_while_small(items):
    assert Stack(np.zeros((4, 8, 8)), 0, 1).wants_pictures()
    assert not Stack(np.zeros((4, 8, 8)), 0, 1, pictures=False).wants_pictures()
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (PICTURE_BYTES // (4 * 1024) + 1, 32, 32), (0, 0, 0))
    assert not Stack(big, 0, 1).wants_pictures()


@pytest.mark.parametrize("method", ["st-kmeans", "ai-kmeans"])
def test_st_without_pictures_same_assignments(items, method, tmp_path):
    full = ticlust.fit(items, method=method, k=3, seed=0, device="cpu", **ST)
    lean = ticlust.fit(items, method=method, k=3, seed=0, device="cpu", aligned=False, **ST)
    assert full.aligned is not None and "pair_theta" in full.params
    assert lean.aligned is None and lean.grids is None and "pair_theta" not in lean.params and "pair_nu" not in lean.params
    np.testing.assert_array_equal(lean.labels, full.labels)
    np.testing.assert_array_equal(lean.scores, full.scores)
    np.testing.assert_array_equal(lean.params["affine"], full.params["affine"])
    # the inspector: exact replay when the pair warps were kept, a fresh alignment when not
    _, exact = align_one(full, items[2], device="cpu", index=2)
    np.testing.assert_array_equal(exact, full.scores[2])
    pictures, fresh = align_one(lean, items[2], device="cpu", index=2)
    assert pictures.shape == (3, *items.shape[1:]) and np.isfinite(fresh).all()
    new = ticlust.predict(lean, items[:5], device="cpu", aligned=False)
    assert new.aligned is None and new.labels.shape == (5,)
    np.testing.assert_array_equal(new.labels, ticlust.predict(full, items[:5], device="cpu").labels)
    back = load_result(lean.save(tmp_path / "lean"))
    assert back.aligned is None and np.array_equal(back.labels, lean.labels)


def test_dti_without_pictures_same_assignments(items):
    res = ticlust.fit(items, method="dti-kmeans", k=3, seed=0, device="cpu", max_epochs=1, aligned=False)
    assert res.aligned is None and res.grids is None and res.params
    full = ticlust.predict(res, items, device="cpu", aligned=True)
    lean = ticlust.predict(res, items, device="cpu", batch_size=5)
    assert full.aligned.shape == items.shape and lean.aligned is not None   # small: kept by default
    lean = ticlust.predict(res, items, device="cpu", batch_size=5, aligned=False)
    assert lean.aligned is None
    np.testing.assert_array_equal(lean.labels, full.labels)
    np.testing.assert_allclose(lean.scores, full.scores, rtol=1e-5, atol=1e-6)


def test_blocks_cover_the_stack_in_order():
    x = np.arange(10 * 4 * 4, dtype=np.float32).reshape(10, 4, 4)
    stack = Stack(x, 0.0, 1.0, pictures=False)
    blocks = list(stack.blocks(4))
    assert [s for s, _ in blocks] == [0, 4, 8] and all(b.pictures is False for _, b in blocks)
    np.testing.assert_array_equal(np.concatenate([b.numpy() for _, b in blocks]), stack.batch(0, 10))


def test_refine_with_outliers_joins_per_item_fields(items):
    res = ticlust.fit(items, method="st-kmeans", k=3, seed=0, device="cpu", **ST)
    edited = curation.mark_outliers(res, [0, 5])
    refined = curation.refine(items, edited, device="cpu")
    assert refined.n == res.n and refined.aligned.shape == items.shape
    assert set(refined.params) == set(res.params)
    assert dataclasses.replace(refined).labels.shape == (res.n,)
