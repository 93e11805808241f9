"""The bad-input tour of issue 19, one case per row class: every failure is one InputError sentence (exit
status 2 in the CLI, no traceback), nothing is silently reinterpreted, and the input is never modified."""
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import ticlust
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
