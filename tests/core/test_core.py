"""Core library: metrics, input validation, result persistence, K-means and GMM against scikit-learn."""
import json
import warnings

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture

import ticlust
from ticlust.errors import InputError
from ticlust.core.validation import as_stack, random_subset
from ticlust.core.device import DeviceFallbackWarning, resolve_device
from ticlust.events import Done, Progress, Snapshot
from ticlust.methods.gmm import em
from ticlust.kernels import Rows, bisect, kmeans_plus_plus, lloyd
from ticlust.metrics import evaluate, hungarian_accuracy, majority_accuracy


def blobs(n_per=60, k=3, size=8, seed=0):
    """K well-separated synthetic 'images' (bright square in different places) plus noise."""
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for c in range(k):
        base = np.zeros((size, size), np.float32)
        base[c * 2:c * 2 + 3, c * 2:c * 2 + 3] = 1.0
        images.append(base + 0.1 * rng.standard_normal((n_per, size, size)).astype(np.float32))
        labels += [c] * n_per
    return np.concatenate(images), np.array(labels)


# ---- metrics -------------------------------------------------------------------------------------
def test_metrics_hand_computed():
    truth = [0, 0, 0, 1, 1, 1]
    assert hungarian_accuracy(truth, [1, 1, 1, 0, 0, 0]) == 1.0
    # clusters {0,1,2,3}->A and {4,5}->B: best one-to-one map gets 3 + 2 = 5 of 6
    assert hungarian_accuracy(truth, [0, 0, 0, 0, 1, 1]) == pytest.approx(5 / 6)
    # three clusters, two classes: Hungarian can use only two clusters, majority uses all three
    pred = [0, 0, 1, 2, 2, 2]
    assert hungarian_accuracy(truth, pred) == pytest.approx(5 / 6)
    assert majority_accuracy(truth, pred) == pytest.approx(1.0)
    scores = evaluate(truth, [5, 5, 5, 7, 7, 7])
    assert scores["nmi"] == pytest.approx(1.0) and scores["ari"] == pytest.approx(1.0)
    # ARI by hand for truth=[0,0,1,1], pred=[0,1,0,1]: index 0, expected 1/3, max 2 -> -0.5
    assert evaluate([0, 0, 1, 1], [0, 1, 0, 1])["ari"] == pytest.approx(-0.5)
    assert evaluate([0, 0, 1, 1], [0, 1, 0, 1])["nmi"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="match one to one"):
        evaluate([0, 1], [0, 1, 2])


# ---- input validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("data, fragment", [
    (np.zeros((0, 8, 8)), "empty"),
    (np.zeros((8, 8)), "single image"),
    (np.zeros((5, 8, 8, 12)), "3-D volumes"),
    (np.zeros((5, 6, 8, 8)), "3-D volumes"),
    (np.ones((5, 8, 8)), "constant"),
    (np.array([["a"]]), "dtype"),
    ([np.zeros((8, 8)), np.zeros((9, 9))], "differ in size"),
    ("not an array", "not an array"),
    (np.zeros((1, 8, 8)), "single item"),
])
def test_bad_stacks_fail_with_one_sentence(data, fragment):
    with pytest.raises(InputError, match=fragment) as err:
        as_stack(data)
    message = str(err.value)
    assert message.count(". ") == 0 and message.endswith(".")


def test_nan_names_the_item():
    x = np.random.default_rng(0).random((6, 8, 8))
    x[4, 1, 1] = np.inf
    with pytest.raises(InputError, match="item 4"):
        ticlust.fit(x, k=2)


@pytest.mark.parametrize("k", [0, 7, 2.5, "3"])
def test_bad_k(k):
    with pytest.raises(InputError, match="K"):
        ticlust.fit(np.random.default_rng(0).random((6, 8, 8)), k=k)


def test_unknown_method_and_parameter():
    x = np.random.default_rng(0).random((6, 8, 8))
    with pytest.raises(InputError, match="Unknown method"):
        ticlust.fit(x, method="nope", k=2)
    with pytest.raises(InputError, match="no parameter 'foo'"):
        ticlust.fit(x, k=2, foo=1)
    with pytest.raises(InputError, match="at least 1"):
        ticlust.fit(x, k=2, max_iter=0)
    with pytest.raises(InputError, match="choose from"):
        ticlust.fit(x, k=2, init="bad")


def test_integer_dtypes_normalise_without_overflow():
    x16 = np.zeros((4, 8, 8), np.uint16)
    x16[:, 2:4, 2:4] = 65535
    x16[0, 0, 0] = 100
    stack = as_stack(x16)
    values = stack.numpy()
    assert values.dtype == np.float32 and values.max() == 1.0 and values.min() == 0.0
    assert values[0, 0, 0] == pytest.approx(100 / 65535)
    x8 = (x16 // 257).astype(np.uint8)
    np.testing.assert_allclose(as_stack(x8).numpy(), np.round(values * 255) / 255, atol=1e-6)


def test_input_is_never_modified_and_rgb_works():
    rng = np.random.default_rng(1)
    x = (rng.random((12, 8, 8, 3)) * 255).astype(np.uint8)
    before = x.copy()
    res = ticlust.fit(x, k=3, seed=0)
    np.testing.assert_array_equal(x, before)
    assert res.prototypes.shape == (3, 8, 8, 3)


def test_memmap_and_dask_inputs(tmp_path):
    dask_array = pytest.importorskip("dask.array")
    x, _ = blobs()
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    ref = ticlust.fit(x, k=3, seed=0)
    assert np.array_equal(ticlust.fit(mm, k=3, seed=0).labels, ref.labels)
    assert np.array_equal(ticlust.fit(dask_array.from_array(x, chunks=(50, 8, 8)), k=3, seed=0).labels, ref.labels)
    # predict streams the new items batch by batch
    assert np.array_equal(ticlust.predict(ref, dask_array.from_array(x, chunks=(50, 8, 8)), batch_size=32).labels, ref.labels)


def test_random_subset_is_seeded():
    a, b = random_subset(100, 10, 3), random_subset(100, 10, 3)
    assert np.array_equal(a, b) and len(set(a)) == 10 and np.all(np.diff(a) > 0)
    assert random_subset(5, 10, 0) is None


# ---- device --------------------------------------------------------------------------------------
def test_device_auto_and_fallback(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu"
    with pytest.warns(DeviceFallbackWarning, match="CPU"):
        assert resolve_device("cuda").type == "cpu"
    with pytest.raises(ValueError, match="Unknown device"):
        resolve_device("tpu")


@pytest.mark.parametrize("gpu", [True, False])
def test_an_explicit_request_is_kept_silently_when_possible(monkeypatch, gpu):
    """'cpu' (any spelling, or a torch.device) means the CPU even beside a GPU, with no fallback notice;
    a named GPU keeps its index when CUDA is there (simulated: this runs on CPU-only machines too)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for request in ("cpu", " CPU ", torch.device("cpu")):
            assert resolve_device(request) == torch.device("cpu")
        assert resolve_device("auto") == torch.device("cuda" if gpu else "cpu")
        if gpu:
            assert resolve_device("cuda:1") == torch.device("cuda:1")
            assert resolve_device(torch.device("cuda", 1)) == torch.device("cuda:1")


def test_oom_retry_halves_the_batch():
    from ticlust.core.device import with_oom_retry

    tried = []

    def work(batch_size):
        tried.append(batch_size)
        if batch_size > 100:
            raise torch.cuda.OutOfMemoryError("fake")
        return batch_size

    with pytest.warns(RuntimeWarning, match="out of memory"):
        assert with_oom_retry(work, 800) == 100
    assert tried == [800, 400, 200, 100]
    with pytest.raises(torch.cuda.OutOfMemoryError):
        with_oom_retry(lambda bs: work(10**6), 10**6, min_batch_size=10**6)


# ---- K-means and GMM -----------------------------------------------------------------------------
def test_kmeans_lloyd_matches_sklearn_from_same_init():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(c, 1.0, size=(150, 5)) for c in (0, 3, 6, 9)]).astype(np.float64)
    init = x[rng.choice(len(x), 4, replace=False)]
    sk = KMeans(4, init=init, n_init=1, max_iter=300, tol=1e-4, algorithm="lloyd").fit(x)
    *_, (it, inertia, centers, labels) = lloyd(torch.from_numpy(x), torch.from_numpy(init.copy()), 300, 1e-4)
    np.testing.assert_allclose(np.sort(centers.numpy(), 0), np.sort(sk.cluster_centers_, 0), atol=1e-6)
    assert np.array_equal(labels.numpy(), sk.labels_)
    assert inertia == pytest.approx(sk.inertia_, rel=1e-6)


def test_bisect_block_by_block_splits_as_whole():
    """A set bisected from its row blocks (a new pass per call, as read back from a scratch) splits as the whole
    tensor does: the same sides, the same sums of squares and means to float tolerance; two groups are found."""
    g = torch.Generator().manual_seed(0)
    rows = torch.cat([torch.randn(70, 12, generator=g) + 3, torch.randn(50, 12, generator=g) - 3])
    whole = bisect(rows)
    passes = []

    def blocks():
        passes.append(1)
        return iter(rows.split(16))
    blocked = bisect(blocks)
    assert len(passes) > 3
    assert torch.equal(whole[3], blocked[3]) and whole[3][:70].all() != whole[3][70:].any()
    assert blocked[1] < 0.2 * blocked[0]
    np.testing.assert_allclose(whole[:2], blocked[:2], rtol=1e-5)
    torch.testing.assert_close(whole[2], blocked[2], rtol=1e-5, atol=1e-5)


def test_kmeans_fit_recovers_clusters_and_is_deterministic():
    x, y = blobs()
    a = ticlust.fit(x, method="kmeans", k=3, seed=5)
    b = ticlust.fit(x, method="kmeans", k=3, seed=5)
    assert evaluate(y, a.labels)["acc"] == 1.0
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.prototypes, b.prototypes)
    assert a.prototypes.shape == (3, 8, 8) and a.scores.shape == (len(x), 3)
    assert np.all(np.diff(a.history[:-1]) <= 1e-6)   # Lloyd never increases the inertia
    assert a.config["seed"] == 5 and a.config["k"] == 3 and a.config["method"] == "kmeans"


def test_gmm_em_matches_sklearn_from_same_init():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(c, s, size=(200, 4)) for c, s in ((0, 0.5), (4, 1.0), (8, 2.0))])
    labels = np.repeat(np.arange(3), 200)
    resp = np.eye(3)[labels]
    nk = resp.sum(0)
    means = resp.T @ x / nk[:, None]
    variances = resp.T @ x**2 / nk[:, None] - means**2 + 1e-6
    sk = GaussianMixture(3, covariance_type="diag", tol=1e-6, reg_covar=1e-6, max_iter=200, weights_init=nk / len(x),
                         means_init=means, precisions_init=1 / variances).fit(x)
    *_, (it, nll, log_w, mu, var, loglik) = em(torch.from_numpy(x), torch.from_numpy(resp), 200, 1e-6, 1e-6)
    order = np.argsort(mu.numpy()[:, 0])
    np.testing.assert_allclose(mu.numpy()[order], sk.means_[np.argsort(sk.means_[:, 0])], atol=1e-3)
    np.testing.assert_allclose(var.numpy()[order], sk.covariances_[np.argsort(sk.means_[:, 0])], rtol=1e-2)
    assert nll == pytest.approx(-sk.score(x), rel=1e-4)


def test_gmm_fit_gives_responsibilities_and_predicts():
    x, y = blobs()
    res = ticlust.fit(x, method="gmm", k=3, seed=0)
    assert evaluate(y, res.labels)["acc"] == 1.0
    np.testing.assert_allclose(res.responsibilities.sum(1), 1.0, atol=1e-5)
    assert np.array_equal(ticlust.predict(res, x).labels, res.labels)
    assert np.all(np.diff(res.history) <= 1e-4)   # EM never decreases the likelihood


def test_runs_keep_lowest_loss_and_record_all():
    x, _ = blobs(k=4, seed=3)
    res = ticlust.fit(x, k=4, runs=3, seed=0)
    assert len(res.run_losses) == 3 and res.final_loss == pytest.approx(min(res.run_losses))
    assert res.config["runs"] == 3


def test_run_yields_progress_snapshots_and_done():
    x, _ = blobs()
    events = list(ticlust.run(x, method="kmeans", k=3, seed=0))
    assert isinstance(events[-1], Done)
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress and all(p.total >= p.step >= 1 for p in progress)
    assert progress[0].eta is None    # no guess before the stage has shown its pace
    assert any(isinstance(e, Snapshot) and e.prototypes.shape == (3, 8, 8) for e in events)


def test_eta_comes_from_the_current_stage_pace_only():
    """Setup time and earlier stages must not skew the ETA (a 2 s K-means once said 4 minutes)."""
    from ticlust.api import StagePace, format_eta

    pace = StagePace()
    assert pace.eta("Lloyd iteration 1", 1, 299, now=100.0) is None        # first step: nothing measured yet
    assert pace.eta("Lloyd iteration 2", 2, 298, now=100.1) is None        # too few steps, too little time
    assert pace.eta("Lloyd iteration 5", 5, 295, now=100.4) is None        # enough steps, under 2 s
    assert pace.eta("Lloyd iteration 21", 21, 279, now=102.1) == pytest.approx(2.1 / 20 * 279)
    assert pace.eta("identity+affine", 22, 100, now=103.0) is None         # a new stage starts over
    assert pace.eta("identity+affine", 30, 92, now=107.0) == pytest.approx(4.0 / 8 * 92)
    assert format_eta(None) == "ETA estimating…" and "pace" in format_eta(61.0) and "1m01s" in format_eta(61.0)


def test_the_eta_counts_what_a_method_says_its_later_stages_cost(monkeypatch):
    """A stage's ETA is its pace times its own steps left plus the steps' worth the method forecasts for the stages
    after it (``Progress.later``: a fit's last passes and its object map); an unknown rest (inf: DTI's identity epochs,
    which skip the encoder) shows no ETA rather than a wrong one."""
    from ticlust.core import execute
    from ticlust.events import Progress

    class Clock:                         # one second per event: a pace of 1 s per step
        now = 0.0

        @classmethod
        def perf_counter(cls):
            cls.now += 1.0
            return cls.now
    monkeypatch.setattr(execute, "time", Clock)
    monkeypatch.setattr(execute, "ETA_MIN_SECONDS", 0.0)
    events = [Progress(i, 10, stage="identity", later=float("inf")) for i in range(6)]
    events += [Progress(i, 10, stage="identity+affine", later=5.0) for i in range(10)]
    shown = [e.eta for e in execute.with_eta(iter(events))]
    assert shown[:6] == [None] * 6                                      # the rest unknown at this pace
    assert shown[6 + 3:] == [pytest.approx(10 - i + 5.0) for i in range(3, 10)]   # 1 s/step × (own left + later)


# ---- result --------------------------------------------------------------------------------------
def test_result_save_load_round_trip(tmp_path):
    x, _ = blobs()
    res = ticlust.fit(x, method="gmm", k=3, seed=0)
    res.params["affine"] = np.zeros((len(x), 2, 3))
    path = res.save(tmp_path / "r.npz")
    with np.load(path, allow_pickle=False) as npz:   # no pickled object inside
        assert {"labels", "scores", "prototypes", "config_json"} <= set(npz.files)
        assert json.loads(str(npz["config_json"]))["k"] == 3
    back = ticlust.load_result(path)
    for name in ("labels", "scores", "prototypes", "responsibilities"):
        np.testing.assert_array_equal(getattr(back, name), getattr(res, name))
    assert back.config == res.config and back.history == res.history and back.device == res.device
    assert back.params["affine"].shape == (len(x), 2, 3)
    assert np.array_equal(ticlust.predict(back, x).labels, res.labels)


def test_assignments_csv(tmp_path):
    x, _ = blobs()
    res = ticlust.fit(x, k=3, seed=0)
    rows = res.assignments_table(tmp_path / "a.csv")
    text = (tmp_path / "a.csv").read_text().splitlines()
    assert text[0] == "item,cluster,score,runner_up,runner_up_score,map_x,map_y" and len(text) == len(x) + 1
    assert all(r["score"] <= r["runner_up_score"] for r in rows)


def test_load_result_errors(tmp_path):
    with pytest.raises(InputError, match="No result file"):
        ticlust.load_result(tmp_path / "missing.npz")
    np.savez(tmp_path / "plain.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a ticlust result"):
        ticlust.load_result(tmp_path / "plain.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(InputError, match=r"junk\.npz is not a ticlust result file \(it is not an \.npz archive\)"):
        ticlust.load_result(tmp_path / "junk.npz")


def test_samples_are_made_locally():
    images, labels = ticlust.sample("digits")
    assert images.shape == (1797, 32, 32) and set(labels) == set(range(10))
    glyphs, glabels = ticlust.sample("glyphs")
    assert glyphs.shape == (600, 32, 32) and np.bincount(glabels).tolist() == [150] * 4
    assert np.array_equal(ticlust.sample("glyphs")[0], glyphs)   # seeded
    with pytest.raises(InputError, match="Unknown sample"):
        ticlust.sample("nope")


def test_landmark_files_read_as_landmarks(tmp_path):
    from ticlust.io.landmarks import write_landmarks_csv, write_tps

    shapes, groups = ticlust.sample("shapes")
    write_landmarks_csv(tmp_path / "s.csv", shapes)
    write_tps(tmp_path / "s.tps", shapes)
    for name in ("s.csv", "s.tps"):
        array, labels = ticlust.read_input(tmp_path / name)
        np.testing.assert_allclose(array, shapes, atol=1e-4)
        res = ticlust.fit(array, method="shape-kmeans", k=2, seed=0)
        assert evaluate(groups, res.labels)["ari"] == 1.0


def test_kmeans_and_gmm_stream_a_stack_too_large_to_load():
    """Rows read batch by batch (the path of memory-mapped stacks over the in-memory budget) give the
    same K-means and EM as the whole tensor in memory."""
    from ticlust.methods.gmm import em
    from ticlust.core.validation import as_stack

    x = np.random.default_rng(4).random((300, 6, 6)).astype(np.float32)
    x[:100] += 1.0
    stack = as_stack(x)
    streamed = Rows(stack, "cpu", batch_size=64, in_memory_bytes=0)
    whole = Rows(stack, "cpu", batch_size=64)
    assert streamed.streams and not whole.streams
    c_s = kmeans_plus_plus(streamed, 3, np.random.default_rng(0))
    c_w = kmeans_plus_plus(whole, 3, np.random.default_rng(0))
    torch.testing.assert_close(c_s, c_w)
    *_, (_, inertia_s, centers_s, labels_s) = lloyd(streamed, c_s)
    *_, (_, inertia_w, centers_w, labels_w) = lloyd(whole, c_w)
    assert torch.equal(labels_s, labels_w) and abs(inertia_s - inertia_w) < 1e-3 * inertia_w
    torch.testing.assert_close(centers_s, centers_w)
    resp = torch.nn.functional.one_hot(labels_w, 3).float()
    *_, last_s = em(streamed, resp, 5, 0.0, 1e-3)
    *_, last_w = em(whole, resp, 5, 0.0, 1e-3)
    assert abs(last_s[1] - last_w[1]) < 1e-4
    assert streamed.mean_variance() == pytest.approx(whole.mean_variance(), rel=1e-5)
    # in row blocks and two passes, never a copy of the data: torch's whole-array variance to float roundoff
    flat = torch.from_numpy(stack.numpy().reshape(stack.n, -1)).double()
    assert whole.mean_variance(rows=7) == pytest.approx(float(flat.var(0, unbiased=False).mean()), rel=1e-9)


@pytest.mark.parametrize("layout", ["last", "first"])
@pytest.mark.parametrize("channels", [2, 4, 5])
def test_multichannel_stacks_are_accepted_channels_last(layout, channels):
    """Microscopy stacks with 2, 4 or more channels, channels last (N,H,W,C) or first (N,C,H,W)."""
    rng = np.random.default_rng(0)
    x = rng.random((12, 16, 16, channels)).astype(np.float32)
    x[:6, :8] += 1.0
    data = x if layout == "last" else np.moveaxis(x, -1, 1)
    stack = as_stack(data)
    assert stack.item_shape == (16, 16, channels) and stack.channels == channels
    np.testing.assert_allclose(stack.numpy(), (x - x.min()) / (x.max() - x.min()), rtol=1e-6)
    res = ticlust.fit(data, method="kmeans", k=2, seed=0, progress=False)
    assert res.prototypes.shape == (2, 16, 16, channels)
    assert len(set(res.labels[:6])) == 1 and len(set(res.labels[6:])) == 1 and res.labels[0] != res.labels[-1]
