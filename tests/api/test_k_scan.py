"""Choosing K (issue 52 item 5): ``ticlust.scan_k``, its refusals, its suggestion on an easy case, the events it
reports through the execution seam, and ``ticlust fit --k-scan``."""
import re

import numpy as np
import pytest

import ticlust
from ticlust.cli import main
from ticlust.core.execute import stream
from ticlust.errors import InputError
from ticlust.evaluation import CRITERIA, KScan, scan_job
from ticlust.events import Done, Progress


def blobs(k: int = 4, per: int = 30, seed: int = 0) -> np.ndarray:
    """``k`` random binary 8×8 templates, ``per`` noisy copies of each: K = k is the one clear answer."""
    rng = np.random.default_rng(seed)
    templates = (rng.random((k, 8, 8)) > 0.5).astype(np.float32)
    return np.concatenate([t + 0.15 * rng.standard_normal((per, 8, 8)).astype(np.float32) for t in templates])


@pytest.fixture(scope="module")
def easy_scan() -> KScan:
    return ticlust.scan_k(blobs(), "kmeans", ks=range(2, 8), device="cpu", progress=False)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_each_criterion_suggests_the_true_k_on_separated_blobs(easy_scan, criterion):
    assert easy_scan.suggestion(criterion) == 4


def test_the_scan_is_plain_data_a_plot_can_draw(easy_scan):
    assert easy_scan.suggested == 4 and easy_scan.criterion == "knee" and easy_scan.ks == [2, 3, 4, 5, 6, 7]
    rows = easy_scan.rows()
    assert [r["k"] for r in rows] == easy_scan.ks
    assert [r["suggested"] for r in rows] == [False, False, True, False, False, False]
    assert all(a["cost"] > b["cost"] for a, b in zip(rows, rows[1:]))      # the elbow curve falls with K
    for name in CRITERIA:
        assert len(easy_scan.scores[name]) == len(easy_scan.ks) == len(easy_scan.spread[name])
        assert all(isinstance(v, float) and np.isfinite(v) for v in easy_scan.scores[name])
    stability = easy_scan.scores["stability"]
    assert stability[2] == pytest.approx(1.0)                # every repeat finds the same 4 blobs
    assert stability[0] < 0.9 and max(stability[3:]) < 0.95   # 2 of 4 blobs, or a blob split: no single answer
    assert easy_scan.items == 120 and easy_scan.repeats == 3 and easy_scan.method == "kmeans"
    assert "<- suggested" in easy_scan.table().splitlines()[3]
    with pytest.raises(InputError, match="not one of stability, silhouette, knee"):
        easy_scan.suggestion("gap")


def test_same_seed_same_scan_and_the_criterion_decides():
    one = ticlust.scan_k(blobs(seed=1), "kmeans", ks=range(2, 6), device="cpu", seed=3, repeats=2, progress=False)
    two = ticlust.scan_k(blobs(seed=1), "kmeans", ks=range(2, 6), device="cpu", seed=3, repeats=2,
                         criterion="silhouette", progress=False)
    assert one.criterion == "knee" and one.suggested == one.suggestion("knee")
    for name in CRITERIA:
        np.testing.assert_allclose(one.scores[name], two.scores[name], atol=1e-6)
    assert two.criterion == "silhouette" and two.suggested == two.suggestion("silhouette") == 4


def test_the_scan_reports_progress_through_the_seam_and_leaves_the_input_alone():
    x = blobs()
    before = x.copy()
    events = list(stream(scan_job(x, "kmeans", ks=range(2, 5), device="cpu", repeats=2)))
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress and any("K scan: K=3, fit 2/2" in e.stage for e in progress)
    assert isinstance(events[-1], Done) and isinstance(events[-1].result, KScan)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("kwargs, words", [
    (dict(ks=range(2, 4)), "at least 3 values of K"),
    (dict(ks=[1, 2, 3]), "outside 2–119"),
    (dict(ks=range(100, 121)), "outside 2–119"),
    (dict(ks=[2, 3, 4.5]), "whole numbers of clusters"),
    (dict(ks="2-16"), "whole numbers of clusters"),
    (dict(ks=range(2, 6), repeats=1), "repeats=1 must be a whole number of fits per K, at least 2"),
    (dict(ks=range(2, 6), fraction=0), "must be a number in (0, 1]"),
    (dict(ks=range(2, 60), fraction=0.4), "cannot hold K = 59 clusters"),
    (dict(ks=range(2, 6), criterion="gap"), "not one of stability, silhouette, knee"),
    (dict(ks=range(2, 6), max_items=1), "max_items=1 must be a whole number of items, at least 2"),
])
def test_refusals_are_one_sentence_before_any_fit(kwargs, words):
    with pytest.raises(InputError) as info:
        scan_job(blobs(), "kmeans", **kwargs)
    message = str(info.value)
    assert words in message and message.endswith(".") and not re.search(r"\. [A-Z]", message)   # one sentence


def test_an_image_method_refuses_landmarks_and_vectors_in_one_sentence():
    with pytest.raises(InputError, match="shape-kmeans"):
        scan_job(np.random.default_rng(0).random((40, 12, 2)), "rigid-kmeans", ks=range(2, 5))
    with pytest.raises(InputError, match="a single image or vector"):
        scan_job(np.random.default_rng(0).random((40, 30)), "rigid-kmeans", ks=range(2, 5))


def test_fewer_distinct_items_than_the_top_k_is_refused():
    x = np.repeat(blobs(k=3, per=1), 20, axis=0)
    with pytest.raises(InputError, match="only 3 distinct items"):
        scan_job(x, "kmeans", ks=range(2, 6))


def test_cli_k_scan_prints_the_table_and_saves_only_with_o(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)                       # where the default -o would land
    np.save(tmp_path / "blobs.npy", blobs())
    assert main(["fit", str(tmp_path / "blobs.npy"), "--k-scan", "2-6", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["K", "knee", "stability", "silhouette"] and len(lines) == 1 + 5 + 1
    assert "<- suggested" in lines[3] and lines[-1].startswith("suggested K = 4 (highest knee")
    assert not list(tmp_path.glob("*.npz"))
    assert main(["fit", str(tmp_path / "blobs.npy"), "--k-scan", "2-6", "--quiet", "-o", str(tmp_path / "r.npz")]) == 0
    assert "suggested K = 4" in capsys.readouterr().out
    assert ticlust.load_result(tmp_path / "r.npz").k == 4
    assert main(["fit", str(tmp_path / "blobs.npy"), "--k-scan", "2-6", "--k-scan-merge", "--k-scan-criterion",
                 "stability", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["K", "stability", "silhouette", "knee"]
    assert lines[-1] == "suggested K = 4 (highest stability; 3 fits of K=6 merged down on 80% subsamples of 120 items)"


@pytest.mark.parametrize("args, words", [
    (["--k-scan", "2-x"], "--k-scan 2-x must look like KMIN-KMAX, e.g. 2-16."),
    (["--k-scan", "--k", "4"], "--k and --k-scan both choose K: give one of them."),
    (["--k-scan", "2-3"], "at least 3 values of K"),
    (["--k-scan-merge"], "--k-scan-merge and --k-scan-criterion apply to --k-scan: add --k-scan KMIN-KMAX."),
])
def test_cli_k_scan_refusals(tmp_path, capsys, args, words):
    np.save(tmp_path / "blobs.npy", blobs())
    assert main(["fit", str(tmp_path / "blobs.npy"), *args, "--quiet"]) != 0
    assert words in capsys.readouterr().err


def test_merging_dissolves_the_clusters_whose_items_lose_least():
    """Six clusters made of three pairs, each item's second choice its pair's other half: dissolving down to 3 keeps
    one cluster of each pair (whatever the order), and a cluster no item chose goes first."""
    from ticlust.evaluation import ScanFit, merged

    rng = np.random.default_rng(0)
    n = 60
    own = np.repeat(np.arange(6), n // 6)
    costs = 10.0 + rng.random((n, 7))
    costs[np.arange(n), own] = 1.0 + 0.1 * rng.random(n)
    costs[np.arange(n), own ^ 1] = 2.0 + 0.1 * rng.random(n)         # the pair's other half, a close second
    costs[:, 6] = 50.0                                                # a cluster no item chose
    fit = ScanFit(7, costs.argmin(1), 0.0, 0.0, 1.0, costs)
    by_k = {f.k: f for f in merged(fit, [3, 4, 5, 6, 7])}
    assert sorted(by_k) == [3, 4, 5, 6, 7]
    assert ticlust.evaluate(by_k[7].labels, by_k[6].labels)["ari"] == 1.0    # the empty one went first
    assert ticlust.evaluate(own // 2, by_k[3].labels)["ari"] == 1.0
    assert by_k[3].cost > by_k[6].cost == by_k[7].cost                      # dissolving costs what the items lose


def test_a_merged_scan_fits_the_top_k_only(easy_scan):
    events = list(stream(scan_job(blobs(), "kmeans", ks=range(2, 8), device="cpu", merge=True)))
    stages = {e.stage.split(":")[1].split(",")[0].strip() for e in events if isinstance(e, Progress)}
    scan = events[-1].result
    assert stages == {"K=7"} and scan.merged
    assert [scan.suggestion(c) for c in CRITERIA] == [4, 4, 4]
