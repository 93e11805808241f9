"""The bad-input tour of issue 19, one case per row class: every failure is one InputError sentence (exit
status 2 in the CLI, no traceback), nothing is silently reinterpreted, and the input is never modified."""
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ticlust
from ticlust import curation
from ticlust.cli import main
from ticlust.errors import InputError

pytestmark = pytest.mark.usefixtures("one_thread")


def stack(n=12, size=8, seed=0):
    return np.random.default_rng(seed).random((n, size, size)).astype(np.float32)


# ---- raw tracebacks become one sentence ----------------------------------------------------------------
@pytest.mark.parametrize("args, fragment", [
    (["--device", "banana"], "Unknown device"),
    (["--seed", "-1"], "seed = -1"),
    (["--seed", str(2**70)], "seed ="),
    (["--set", "max_iter=inf"], "max_iter"),
    (["--set", "tol=nan"], "tol"),
    (["--set", "max_iter=1.5"], "max_iter = '1.5' is not a valid whole number"),
    (["--method", "dti-kmeans", "--set", "curriculum=milestones", "--set", "milestones=5,x"], "whole epoch numbers"),
])
def test_cli_parameter_errors_are_one_line(tmp_path, monkeypatch, capsys, args, fragment):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--sample", "digits", "--quiet", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("ticlust: error:")]
    assert errors == [err[-1]] and fragment in err[-1] and not any("Traceback" in line for line in err)
    assert not (tmp_path / "ticlust_result.npz").exists()


@pytest.mark.parametrize("flag, target", [("-o", "/proc/x.npz"), ("--csv", "nodir/x.csv")])
def test_output_paths_are_checked_before_the_fit(tmp_path, monkeypatch, capsys, flag, target):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--sample", "digits", "--quiet", flag, target]) == 2
    err = capsys.readouterr().err
    assert "cannot write there" in err and "device" not in err        # failed before any fitting was reported


def test_npz_files_that_hold_no_stack(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "scalar.npz", x=np.array(3.0))
    with zipfile.ZipFile(tmp_path / "empty.npz", "w"):
        pass
    (tmp_path / "text.npz").write_text("hello")
    for name, fragment in (("scalar.npz", "single number"), ("empty.npz", "holds no arrays"), ("text.npz", "not an .npz archive")):
        assert main(["fit", name, "--quiet"]) == 2
        assert fragment in capsys.readouterr().err


def test_a_damaged_result_file(tmp_path):
    res = ticlust.fit(stack(), k=2, seed=0)
    path = res.save(tmp_path / "r.npz")
    with np.load(path) as npz:
        contents = dict(npz)
    contents["meta_json"] = np.array("{not json")
    np.savez(tmp_path / "broken.npz", **contents)
    with pytest.raises(InputError, match=r"broken\.npz was changed after it was saved \(changed: meta_json\)"):
        ticlust.load_result(tmp_path / "broken.npz")
    contents.pop("checksums_json")                       # a file from before checksums: its metadata is checked
    np.savez(tmp_path / "old.npz", **contents)
    with pytest.raises(InputError, match=r"old\.npz is a damaged ticlust result"):
        ticlust.load_result(tmp_path / "old.npz")


def test_library_values_that_used_to_raise_raw_errors():
    x = stack()
    with pytest.raises(InputError, match="device"):
        ticlust.fit(x, k=2, device=3)
    with pytest.raises(InputError, match="float32"):
        ticlust.fit(x.astype(np.float64) * 1e300, k=2)
    with pytest.raises(InputError, match="batch_size"):
        ticlust.predict(ticlust.fit(x, k=2), x, batch_size=0)
    with pytest.raises(InputError, match="too large"):
        ticlust.fit(np.random.default_rng(0).random((6, 5, 2)) * 1e200, method="shape-kmeans", k=2)


def test_closed_pipe_is_not_an_error(tmp_path):
    out = subprocess.run(f"{sys.executable} -m ticlust.cli methods | head -1", shell=True, capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.stdout.startswith("kmeans") and "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


# ---- nothing silently reinterpreted ----------------------------------------------------------------------
def test_a_single_image_file_is_not_clustered_row_by_row(tmp_path, monkeypatch, capsys):
    import tifffile

    monkeypatch.chdir(tmp_path)
    tifffile.imwrite(tmp_path / "one.tif", (stack(n=1, size=32)[0] * 1000).astype(np.uint16))
    assert main(["fit", "one.tif", "--method", "kmeans", "--quiet"]) == 2
    assert "single 2-D image" in capsys.readouterr().err


def test_predict_checks_the_item_shape_not_only_the_pixel_count():
    res = ticlust.fit(stack(size=16), k=2, seed=0)
    with pytest.raises(InputError, match="same shape"):
        ticlust.predict(res, np.random.default_rng(1).random((3, 8, 32)).astype(np.float32))


def test_a_2d_array_that_looks_like_one_image_is_not_clustered_silently():
    image = stack(n=1, size=28)[0]
    with pytest.warns(UserWarning, match="clustered as 28 vectors"):
        ticlust.fit(image, method="kmeans", k=2, seed=0)
    with pytest.raises(InputError, match="single image"):
        ticlust.fit(image, method="st-kmeans", k=2)            # image-only methods refuse it outright


@pytest.mark.parametrize("param, value", [("max_iter", 1.5), ("tol", float("nan")), ("max_iter", float("inf"))])
def test_parameters_are_never_rounded_or_non_finite(param, value):
    with pytest.raises(InputError, match=param):
        ticlust.fit(stack(), k=2, **{param: value})


# ---- messages that used to mislead ----------------------------------------------------------------------
def test_numpy_scalars_and_torch_tensors_are_accepted():
    x = stack()
    res = ticlust.fit(torch.from_numpy(x), k=np.int64(2), seed=np.int64(0), max_iter=np.int64(3), tol=np.float32(1e-4))
    assert res.k == 2 and res.config["max_iter"] == 3
    assert np.array_equal(res.labels, ticlust.fit(x, k=2, seed=0, max_iter=3).labels)


def test_one_landmark_shape_can_be_assigned():
    x, _ = ticlust.sample("shapes")
    res = ticlust.fit(x, method="shape-kmeans", k=2, seed=0, device="cpu")
    assert ticlust.predict(res, x[:1], device="cpu").labels.shape == (1,)


def test_tps_with_a_negative_landmark_count(tmp_path):
    (tmp_path / "bad.tps").write_text("LM=-2\n1 2\nID=0\n")
    with pytest.raises(InputError, match="at least one landmark"):
        ticlust.read_input(tmp_path / "bad.tps")


# ---- the input is never modified --------------------------------------------------------------------------
def test_inputs_are_left_untouched():
    x = (stack() * 1000).astype(np.uint16)
    copy = x.copy()
    ticlust.fit(x, k=2, seed=0)
    assert np.array_equal(x, copy)


# ---- the single-stack route: tables, curation, files, paths ---------------------------------------------------
def one_sentence(info) -> str:
    message = str(info.value)
    assert info.type is InputError and "\n" not in message and message.endswith("."), message
    return message


@pytest.fixture(scope="module")
def grey16():
    """Twelve 16×16 images and a kmeans result fitted on them."""
    x = stack(size=16)
    return x, ticlust.fit(x, k=2, seed=0, progress=False)


def test_assignments_table_refuses_names_or_columns_of_another_length(grey16, tmp_path):
    _, res = grey16
    path = tmp_path / "table.csv"
    names = [f"cell{i}" for i in range(3)]
    for kwargs, fragment in (({"names": names}, "The names list has 3 entries but the result has 12 items"),
                             ({"names": "abc"}, "The names are a str"),
                             ({"columns": {"area": [1.0, 2.0]}}, "The extra column(s) area (2 values) need one value per item (12)"),
                             ({"columns": {"box": np.zeros((12, 2))}}, "box (shape (12, 2))")):
        with pytest.raises(InputError) as info:
            res.assignments_table(path, **kwargs)
        assert fragment in one_sentence(info) and not path.exists()
    assert names == ["cell0", "cell1", "cell2"]
    path.write_text("an earlier table")
    with pytest.raises(InputError):
        res.assignments_table(path, names=names)
    assert path.read_text() == "an earlier table"


@pytest.mark.parametrize("edit", ["split", "refine"])
@pytest.mark.parametrize("size, channels, fragment", [(8, 0, "are 8×8 but the result was fitted on 16×16"),
                                                       (16, 3, "are 16×16×3 but the result was fitted on 16×16")])
def test_split_and_refine_refuse_items_of_another_shape(grey16, edit, size, channels, fragment):
    x, res = grey16
    data = stack(size=size, seed=3) if not channels else np.repeat(x[..., None], channels, axis=-1)
    before, labels = data.copy(), res.labels.copy()
    with pytest.raises(InputError) as info:
        curation.split(data, res, 0) if edit == "split" else curation.refine(data, res)
    assert fragment in one_sentence(info) and "give the data it was fitted on" in str(info.value)
    assert np.array_equal(data, before) and np.array_equal(res.labels, labels) and res.edits == []


@pytest.mark.parametrize("edit", ["split", "refine"])
def test_split_and_refine_refuse_shapes_with_other_landmarks(edit):
    x, _ = ticlust.sample("shapes")
    res = ticlust.fit(x, method="shape-kmeans", k=2, seed=0, device="cpu")
    fewer = x[:, :5].copy()
    with pytest.raises(InputError) as info:
        curation.split(fewer, res, 0) if edit == "split" else curation.refine(fewer, res)
    assert "have 5 landmarks each but the result was fitted on shapes of 8" in one_sentence(info)
    assert np.array_equal(fewer, x[:, :5])


@pytest.mark.parametrize("content", [np.random.default_rng(0).bytes(300), b"item,value\n1,2\n"])
def test_a_file_that_is_not_npy_is_not_blamed_on_pickles(tmp_path, monkeypatch, capsys, content):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.npy").write_bytes(content)
    with pytest.raises(InputError) as info:
        ticlust.read_input(tmp_path / "x.npy")
    assert "x.npy could not be read as a NumPy file" in one_sentence(info) and "pickle" not in str(info.value)
    assert main(["fit", "x.npy", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "could not be read as a NumPy file" in err and "pickle" not in err
    assert (tmp_path / "x.npy").read_bytes() == content


def test_an_npz_whose_first_array_is_not_a_stack_names_its_arrays(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "cells.npz", labels=np.arange(12), images=stack())
    with pytest.raises(InputError) as info:
        ticlust.read_input(tmp_path / "cells.npz")
    message = one_sentence(info)
    assert "first array 'labels'" in message and "(labels, images)" in message and "key=" in message
    assert main(["fit", "cells.npz", "--quiet"]) == 2
    assert "(labels, images)" in capsys.readouterr().err
    assert main(["fit", "cells.npz", "--key", "images", "--k", "2", "--quiet", "-o", "r.npz"]) == 0


@pytest.mark.parametrize("method", ["shape-kmeans", "procrustes-kmeans"])
def test_landmarks_too_small_to_align_are_not_called_one_point(method):
    x, _ = ticlust.sample("shapes")
    tiny = x * 1e-200
    with pytest.raises(InputError) as info:
        ticlust.fit(tiny, method=method, k=2, device="cpu")
    message = one_sentence(info)
    assert "too small to align" in message and "rescale" in message and "one point" not in message
    assert np.array_equal(tiny, x * 1e-200)
    flat = x.copy()
    flat[3] = 7.0                                      # a shape that really is one point keeps its message
    with pytest.raises(InputError, match="Shape 3 has all its landmarks at one point"):
        ticlust.fit(flat, method=method, k=2, device="cpu")


def test_a_file_that_is_not_a_result_is_not_blamed_on_pickles(tmp_path):
    (tmp_path / "notes.txt").write_text("my notes\n")
    np.savez(tmp_path / "objects.npz", a=np.array([{"x": 1}], dtype=object))
    with zipfile.ZipFile(tmp_path / "zipped.npz", "w") as z:
        z.writestr("readme.txt", "hello")
    for name, fragment in (("notes.txt", "is not a ticlust result file (it is not an .npz archive)"),
                           ("objects.npz", "is not a ticlust result file (it holds Python objects"),
                           ("zipped.npz", "is an .npz file but not a ticlust result")):
        with pytest.raises(InputError) as info:
            ticlust.load_result(tmp_path / name)
        message = one_sentence(info)
        assert fragment in message and "pickle" not in message and "give a file that ticlust saved" in message


def test_predict_names_a_path_that_does_not_exist(grey16, tmp_path):
    _, res = grey16
    with pytest.raises(InputError) as info:
        ticlust.predict(res, str(tmp_path / "missing.zarr"))
    message = one_sentence(info)
    assert "missing.zarr" in message and "no file or folder" in message and "is a str" not in message
    np.save(tmp_path / "x.npy", stack(size=16))            # a path that exists is read as the stack it holds
    assert len(ticlust.predict(res, tmp_path / "x.npy").labels) == len(np.load(tmp_path / "x.npy"))


# ---- any mismatch: one refusal, inputs unchanged ----------------------------------------------------------
@pytest.fixture(scope="module")
def shapes_fit():
    x, _ = ticlust.sample("shapes")
    return ticlust.fit(x, method="shape-kmeans", k=2, seed=0, device="cpu")


def assert_refused_untouched(call, inputs: list, res):
    """``call`` raises one InputError sentence; the arrays in ``inputs`` and the result are as they were."""
    before = [np.array(a, copy=True) for a in inputs]
    labels, scores, prototypes, edits = res.labels.copy(), res.scores.copy(), res.prototypes.copy(), list(res.edits)
    with pytest.raises(InputError) as info:
        call()
    one_sentence(info)
    assert all(np.array_equal(a, b) for a, b in zip(inputs, before))
    assert np.array_equal(res.labels, labels) and np.array_equal(res.scores, scores)
    assert np.array_equal(res.prototypes, prototypes) and res.edits == edits


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=st.sampled_from(["split", "refine"]), landmarks=st.booleans(), n=st.sampled_from([12, 100, 7]),
       h=st.integers(3, 20), w=st.integers(4, 20), channels=st.sampled_from([0, 0, 2, 3]), seed=st.integers(0, 9))
def test_split_and_refine_refuse_any_other_item_shape(grey16, shapes_fit, edit, landmarks, n, h, w, channels, seed):
    rng = np.random.default_rng(seed)
    if landmarks:
        assume(h != 8)
        res, data = shapes_fit, rng.normal(0, 10, (n, h, 2))            # h landmarks per shape
    else:
        assume((h, w, channels) != (16, 16, 0))
        res, data = grey16[1], rng.random((n, h, w, channels) if channels else (n, h, w)).astype(np.float32)
    call = (lambda: curation.split(data, res, 0, device="cpu")) if edit == "split" else (
        lambda: curation.refine(data, res, device="cpu"))
    assert_refused_untouched(call, [data], res)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(length=st.integers(0, 30), what=st.sampled_from(["names", "column", "2-D column"]), to_file=st.booleans())
def test_assignments_table_refuses_any_other_length(grey16, tmp_path, length, what, to_file):
    res = grey16[1]
    assume(length != res.n or what == "2-D column")
    path = tmp_path / f"table{length}{what}.csv" if to_file else None
    values = np.arange(length * 2, dtype=np.float64).reshape(length, 2)
    kwargs = {"names": [f"cell{i}" for i in range(length)]} if what == "names" else {
        "columns": {"area": values if what == "2-D column" else values[:, 0].copy()}}
    inputs = [np.asarray(kwargs["names"])] if what == "names" else [kwargs["columns"]["area"]]
    assert_refused_untouched(lambda: res.assignments_table(path, **kwargs), inputs, res)
    assert path is None or not path.exists()
