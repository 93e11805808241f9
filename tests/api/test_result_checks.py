"""A result checks itself (issue 32 item 2) and ``ticlust export`` refuses what it cannot draw: every case is a
real file on disk, edited as a user might (NumPy, zipfile), and ends in a clean load or one InputError
sentence naming the file and what is wrong; inputs stay byte-identical."""
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ticlust
from ticlust.cli import main
from ticlust.errors import InputError
from ticlust.io.gallery import export_gallery
from ticlust.result import CHECKSUMS, ITEM_NAMES, load_result
from ticlust.datasets.samples import glyphs_sample


pytestmark = pytest.mark.usefixtures("one_thread")
FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def glyphs():
    x, _ = glyphs_sample(n_per_class=6, size=16, seed=1)
    return x


@pytest.fixture(scope="module")
def saved(glyphs, tmp_path_factory):
    """A rigid-kmeans result on disk: labels, scores, prototypes, aligned, grids, params and a state."""
    res = ticlust.fit(glyphs, "rigid-kmeans", k=3, device="cpu", seed=0, progress=False, max_iter=3)
    return res.save(tmp_path_factory.mktemp("saved") / "r.npz")


def contents_of(path) -> dict:
    with np.load(path) as npz:
        return dict(npz)


def edited(path, tmp_path, checksum=True, name="edited.npz", **changes) -> Path:
    """The saved file rewritten with NumPy as a user would, entries changed (None: removed); without its
    checksums when ``checksum`` is False (a file from before checksums existed)."""
    contents = contents_of(path)
    for key, value in changes.items():
        if value is None:
            contents.pop(key)
        else:
            contents[key] = value
    if not checksum:
        contents.pop(CHECKSUMS)
    np.savez(tmp_path / name, **contents)
    return tmp_path / name


def refusal(path) -> str:
    with pytest.raises(InputError) as info:
        load_result(path)
    message = str(info.value)
    assert str(path) in message and message.count(". ") == 0, message      # one sentence naming the file
    return message


# ---- what loads ------------------------------------------------------------------------------------------
def test_every_methods_pinned_result_loads_checked(pinned_method, pins, tmp_path):
    res = pins.pinned_fit(pinned_method)
    path = res.save(tmp_path / "r.npz")
    assert CHECKSUMS in contents_of(path)
    back = load_result(path)
    assert back.state is not None and type(back.state) is type(res.state)
    for name in ("labels", "scores", "prototypes", *ITEM_NAMES):
        mine, theirs = getattr(back, name), getattr(res, name)
        assert mine is theirs is None or np.array_equal(mine, theirs, equal_nan=True), name


def test_old_files_without_checksums_load_and_are_still_validated(tmp_path):
    for name in ("old_gmm.npz", "old_st_kmeans.npz"):
        assert CHECKSUMS not in contents_of(FIXTURES / name)
        before = (FIXTURES / name).read_bytes()
        assert load_result(FIXTURES / name).state is not None
        assert (FIXTURES / name).read_bytes() == before
    labels = contents_of(FIXTURES / "old_gmm.npz")["labels"].copy()
    labels[0] = 7
    old = edited(FIXTURES / "old_gmm.npz", tmp_path, checksum=True, labels=labels)
    assert "labels run from 0 to 7, outside its 2 clusters" in refusal(old)


def test_a_file_rewritten_unchanged_still_loads(saved, tmp_path):
    assert load_result(edited(saved, tmp_path)).n == 24


def test_ticlust_load_result_reads_the_state_back_typed_in_a_fresh_process(saved):
    code = ("import ticlust, sys; r = ticlust.load_result(sys.argv[1]); "
            "print(type(r.state).__name__, ticlust.predict(r, r.aligned[:2]).n)")
    done = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["RigidState", "2"], done.stderr[-2000:]


# ---- edited after saving -----------------------------------------------------------------------------------
def test_an_edited_file_is_refused_naming_what_changed(saved, tmp_path):
    labels = contents_of(saved)["labels"].copy()
    labels[0] = (labels[0] + 1) % 3                       # a label still in range: only the checksum sees it
    assert "was changed after it was saved (changed: labels)" in refusal(edited(saved, tmp_path, labels=labels))
    assert "(removed: scores)" in refusal(edited(saved, tmp_path, scores=None))
    assert "(added: extras__note)" in refusal(edited(saved, tmp_path, extras__note=np.arange(3)))
    meta = json.loads(str(contents_of(saved)["meta_json"]))
    meta["method"] = "kmeans"
    assert "changed: meta_json" in refusal(edited(saved, tmp_path, meta_json=np.array(json.dumps(meta))))


def test_a_member_replaced_inside_the_zip_is_refused(saved, tmp_path):
    target = tmp_path / "zipped.npz"
    with zipfile.ZipFile(saved) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item)
            if item.filename == "scores.npy":
                buffer = tempfile.SpooledTemporaryFile()
                np.save(buffer, np.zeros((24, 3), np.float32))
                buffer.seek(0)
                data = buffer.read()
            new.writestr(item, data)
    assert "(changed: scores)" in refusal(target)


def test_a_file_cut_short_is_refused(saved, tmp_path):
    cut = tmp_path / "cut.npz"
    cut.write_bytes(saved.read_bytes()[:-200])
    assert "is not a readable ticlust result file" in refusal(cut)


def test_damaged_checksums_are_refused(saved, tmp_path):
    assert "checksums_json entry is not valid JSON metadata" in refusal(edited(saved, tmp_path, checksums_json=np.array("[1")))
    assert "not a table of checksums" in refusal(edited(saved, tmp_path, checksums_json=np.array('{"labels": 3}')))


# ---- validated with or without a checksum --------------------------------------------------------------------
@pytest.mark.parametrize("change, fragment", [
    (lambda c: {"prototypes": None}, "it has no prototypes array"),
    (lambda c: {"labels": c["labels"] + 5}, "labels run from"),
    (lambda c: {"labels": -c["labels"] - 1}, "labels run from -"),
    (lambda c: {"labels": c["labels"][:10]}, "it has 10 labels but 24 rows of scores"),
    (lambda c: {"labels": c["labels"].astype(np.float64)}, "labels are float64"),
    (lambda c: {"scores": c["scores"][:, :2]}, "labels run from"),
    (lambda c: {"scores": np.where(np.arange(3) == 1, np.nan, c["scores"])}, "scores hold NaN"),
    (lambda c: {"scores": c["scores"].astype(np.int32)}, "scores are int32"),
    (lambda c: {"prototypes": c["prototypes"][:2]}, "not 3 prototypes"),
    (lambda c: {"prototypes": np.full_like(c["prototypes"], np.inf)}, "prototypes hold NaN or infinite"),
    (lambda c: {"aligned": c["aligned"][:5]}, "its aligned has 5 rows but it has 24 items"),
    (lambda c: {"aligned": c["aligned"][:, :8]}, "its aligned are float32 of shape (24, 8, 16)"),
    (lambda c: {"grids": c["grids"][..., 0]}, "grids are float32 of shape (24, 12, 12)"),
    (lambda c: {"params__angle": c["params__angle"][1:]}, "params__angle has 23 rows"),
    (lambda c: {"pinned": np.full(24, 9)}, "pinned clusters are not all"),
    (lambda c: {"rejected": np.zeros((24, 2), bool)}, "rejected are bool of shape (24, 2)"),
    (lambda c: {"meta_json": np.array("[]")}, "meta_json entry is not valid JSON metadata"),
    (lambda c: {"meta_json": np.array(7)}, "meta_json entry is not valid JSON metadata"),
    (lambda c: {"meta_json": np.array('{"method": 5}')}, "metadata's method is a int, not a str"),
    (lambda c: {"meta_json": np.array('{"history": []}')}, "names no method"),
    (lambda c: {"meta_json": np.array('{"method": "deep-magic"}')}, "method 'deep-magic', which this ticlust does not have"),
    (lambda c: {"config_json": np.array('{"input_range": [0, "x"]}')}, "input_range is [0, 'x']"),
    (lambda c: {"config_json": np.array('{"fit_sample": {"index": [0, 1]}}')}, "fit_sample does not list the 24"),
    (lambda c: {"state__centers": None}, None),                    # no state: edited by hand, loads (refine first)
])
def test_each_array_is_validated(saved, tmp_path, change, fragment):
    path = edited(saved, tmp_path, checksum=False, **change(contents_of(saved)))
    if fragment is None:
        assert load_result(path).state is None
    else:
        message = refusal(path)
        assert "is a damaged ticlust result" in message or "ticlust does not have" in message
        assert fragment in message, message


def test_a_state_missing_a_field_predict_needs(tmp_path, glyphs):
    path = ticlust.fit(glyphs, "gmm", k=3, seed=0, device="cpu", progress=False, max_iter=3).save(tmp_path / "g.npz")
    assert "it lacks state__variances, which a gmm result needs" in refusal(edited(path, tmp_path, checksum=False,
                                                                                  state__variances=None))


# ---- any mutation: a consistent result or one InputError ------------------------------------------------------
MUTATIONS = ("drop", "dtype", "shorten", "labels out of range", "nan", "flatten")
DTYPES = (np.float16, np.float64, np.int8, np.uint16, np.bool_, np.complex64, "<U3")


def mutated(array: np.ndarray | None, how: str, dtype, cut: int, value: int):
    """One array as a careless edit leaves it (None: removed); an entry the file lacks is added instead."""
    if array is None:
        return np.full((cut, 3)[: 1 + cut % 2], value).astype(dtype)
    if how == "drop":
        return None
    if how == "dtype":
        return array.astype(dtype) if array.dtype.kind != "U" else np.array(cut)
    if how == "shorten":
        return array[: max(0, array.shape[0] - cut)] if array.ndim else array
    if how == "labels out of range":
        out = np.array(array, copy=True)
        if out.size and out.dtype.kind in "iuf":
            out.reshape(-1)[cut % out.size] = value
        return out
    if how == "nan":
        if array.dtype.kind == "U":
            return np.array(np.nan)
        out = np.array(array, dtype=np.float32 if array.dtype.kind not in "fc" else array.dtype, copy=True)
        if out.size:
            out.reshape(-1)[cut % out.size] = np.nan
        return out
    return array.reshape(-1)


def assert_consistent(res):
    n, k = res.n, res.k
    assert res.labels.shape == (n,) and res.scores.shape == (n, k) and res.prototypes.shape[0] == k
    assert n == 0 or (0 <= res.labels.min() and res.labels.max() < k)
    for name in ITEM_NAMES:
        if getattr(res, name) is not None:
            assert getattr(res, name).shape[0] == n
    assert all(v.shape[0] == n for v in res.params.values())
    assert len(res.assignments_table()) == n and res.cluster_sizes().sum() == n


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["labels", "scores", "prototypes", "aligned", "grids", "params__angle", "params__flip",
                            "state__centers", "meta_json", "config_json", "pinned", "responsibilities",
                            "rejected", "covariances", "params__new"]),
       how=st.sampled_from(MUTATIONS), dtype=st.sampled_from(DTYPES), cut=st.integers(0, 40),
       value=st.sampled_from([-3, -1, 3, 100, 2**40]), checksum=st.booleans())
def test_a_mutated_result_loads_consistent_or_is_refused(saved, key, how, dtype, cut, value, checksum):
    before = saved.read_bytes()
    with tempfile.TemporaryDirectory() as folder:
        contents = contents_of(saved)
        changed = mutated(contents.get(key), how, dtype, cut, value)
        path = edited(saved, Path(folder), checksum=checksum, **{key: changed})
        try:
            res = load_result(path)
        except InputError as exc:
            assert str(path) in str(exc)
        else:
            assert_consistent(res)
            same = key in contents and changed is not None and changed.dtype == contents[key].dtype and \
                np.array_equal(changed, contents[key])
            assert same or not checksum                   # with its checksums only an unchanged file loads
    assert saved.read_bytes() == before


# ---- ticlust export ----------------------------------------------------------------------------------------
@pytest.fixture
def exported(tmp_path, glyphs):
    """A fitted result and its stack on disk, and a check that a refused export left both untouched and wrote
    nothing."""
    np.save(tmp_path / "x.npy", glyphs)
    assert main(["fit", str(tmp_path / "x.npy"), "--k", "3", "--quiet", "-o", str(tmp_path / "r.npz")]) == 0
    inputs = [tmp_path / "x.npy", tmp_path / "r.npz"]
    before = [p.read_bytes() for p in inputs]

    def refused(capsys, *args, gallery="out"):
        capsys.readouterr()
        try:
            rc = main(["export", str(tmp_path / "r.npz"), "--gallery", str(tmp_path / gallery), *args])
        except SystemExit as exc:            # argparse's own refusal
            rc = exc.code
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and "Traceback" not in "\n".join(err) and err[-1].count(". ") == 0, err
        assert [p.read_bytes() for p in inputs] == before
        assert not any(Path(tmp_path / gallery).glob("*.png")) if (tmp_path / gallery).is_dir() else True
        return err[-1]
    return tmp_path, refused


def test_export_refuses_another_item_size_or_channel_count(exported, capsys, glyphs):
    tmp_path, refused = exported
    np.save(tmp_path / "big.npy", np.pad(glyphs, ((0, 0), (2, 2), (2, 2))))
    np.save(tmp_path / "rgb.npy", np.repeat(glyphs[..., None], 3, axis=-1))
    assert "are 20×20 but the result was fitted on 16×16" in refused(capsys, "--input", str(tmp_path / "big.npy"))
    assert "are 16×16×3 but the result was fitted on 16×16" in refused(capsys, "--input", str(tmp_path / "rgb.npy"))
    np.save(tmp_path / "few.npy", glyphs[:10])
    assert "The images are 10 but the result has 24 items" in refused(capsys, "--input", str(tmp_path / "few.npy"))


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "many"])
def test_export_refuses_max_items_below_one(exported, capsys, value):
    tmp_path, refused = exported
    message = refused(capsys, "--input", str(tmp_path / "x.npy"), "--max-items", value)
    assert "argument --max-items" in message and ("at least 1" in message or "not a whole number" in message)


def test_export_refuses_a_gallery_it_cannot_write(exported, capsys):
    tmp_path, refused = exported
    (tmp_path / "a_file").write_text("keep me")
    assert "is a file: give a folder" in refused(capsys, "--input", str(tmp_path / "x.npy"), gallery="a_file")
    assert "Cannot make the gallery folder" in refused(capsys, "--input", str(tmp_path / "x.npy"), gallery="a_file/sub")
    assert (tmp_path / "a_file").read_text() == "keep me"
    assert "is the input RESULT" in refused(capsys, "--input", str(tmp_path / "x.npy"), gallery="r.npz")


def test_export_never_writes_over_an_input(exported, capsys):
    tmp_path, refused = exported
    assert main(["export", str(tmp_path / "r.npz"), "--input", str(tmp_path / "x.npy"), "--gallery", str(tmp_path / "out")]) == 0
    picture = tmp_path / "out" / "prototypes.png"
    before = picture.read_bytes()
    capsys.readouterr()
    assert main(["export", str(tmp_path / "r.npz"), "--input", str(picture), "--gallery", str(tmp_path / "out")]) == 2
    assert "prototypes.png is the input --input" in capsys.readouterr().err and picture.read_bytes() == before


def test_export_replaces_its_own_files_and_names_left_over_ones(exported, capsys):
    tmp_path, _ = exported
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "cluster_07.png").write_bytes(b"from an earlier export")
    assert main(["export", str(tmp_path / "r.npz"), "--input", str(tmp_path / "x.npy"), "--gallery", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "note: " in captured.err and "cluster_07.png from an earlier export" in captured.err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "cluster_00.png", "cluster_01.png", "cluster_02.png", "cluster_07.png", "prototypes.png"]


def test_export_gallery_checks_its_arguments(saved, glyphs, tmp_path):
    res = load_result(saved)
    with pytest.raises(InputError, match="max_items=0 must be a whole number of members shown per cluster, at least 1"):
        export_gallery(res, glyphs, tmp_path / "g", max_items=0)
    with pytest.raises(InputError, match="fitted on 16×16"):
        export_gallery(res, glyphs[:, :8], tmp_path / "g")
    assert not (tmp_path / "g").exists()                  # refused before the folder is made
