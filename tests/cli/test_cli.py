"""The command line, run as a user would (subprocess)."""
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import ticlust


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ticlust.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_methods_lists_parameters():
    out = cli("methods")
    assert out.returncode == 0
    assert "kmeans" in out.stdout and "gmm" in out.stdout and "variance_floor = 0.01" in out.stdout
    # papers by their authors and titles, not by the numbers of our copies ("(000)")
    assert "(000)" not in out.stdout and "Cosentino et al., Spatial Transformer K-Means" in out.stdout
    assert "Kostadinov et al." in out.stdout and "Villar-Corrales" in out.stdout


def test_fit_sample_prints_scores_and_saves(tmp_path):
    out = cli("fit", "--sample", "digits", "--method", "kmeans", "--k", "10", "-o", tmp_path / "r.npz",
              "--csv", tmp_path / "r.csv", "--quiet")
    assert out.returncode == 0, out.stderr
    assert "ACC" in out.stdout and "NMI" in out.stdout and "ARI" in out.stdout
    acc = float(out.stdout.split("ACC ")[1].split()[0])
    assert acc > 0.6
    with np.load(tmp_path / "r.npz", allow_pickle=False) as npz:
        assert {"labels", "scores", "prototypes", "config_json"} <= set(npz.files)
        assert npz["labels"].shape == (1797,)
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 1798


def test_fit_npz_with_keys_subset_and_set(tmp_path):
    images, labels = ticlust.sample("glyphs")
    np.savez(tmp_path / "g.npz", y=labels, x=images)
    out = cli("fit", tmp_path / "g.npz", "--key", "x", "--labels-key", "y", "--method", "gmm", "--k", "4",
              "--max-images", "200", "--set", "max_iter=20", "--seed", "1", "-o", tmp_path / "o.npz", "--quiet")
    assert out.returncode == 0, out.stderr
    res = ticlust.load_result(tmp_path / "o.npz")
    assert res.n == 200 and res.config["max_iter"] == 20 and res.config["seed"] == 1


def test_fit_npy_tif_and_folder(tmp_path):
    import tifffile

    images, _ = ticlust.sample("glyphs")
    stack = (images[:40] * 255).astype(np.uint8)
    np.save(tmp_path / "s.npy", stack)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i, im in enumerate(stack):
        Image.fromarray(im).save(folder / f"{i:03d}.png")
    labels = []
    for source in ("s.npy", "s.tif", "imgs"):
        out = cli("fit", tmp_path / source, "--k", "4", "-o", tmp_path / f"{source}.npz", "--quiet")
        assert out.returncode == 0, out.stderr
        labels.append(ticlust.load_result(tmp_path / f"{source}.npz").labels)
    assert np.array_equal(labels[0], labels[1]) and np.array_equal(labels[0], labels[2])
    # a folder's assignments table names each row by its file, also for a random subset
    out = cli("fit", folder, "--k", "4", "--max-images", "10", "-o", tmp_path / "sub.npz", "--csv", tmp_path / "sub.csv",
              "--quiet")
    assert out.returncode == 0, out.stderr
    rows = (tmp_path / "sub.csv").read_text().splitlines()
    assert rows[0].startswith("item,") and len(rows) == 11
    assert all(row.split(",")[0].endswith(".png") for row in rows[1:])


def test_error_exits_2_with_one_sentence(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    out = cli("fit", tmp_path / "bad.npz", cwd=tmp_path)
    assert out.returncode == 2 and "bad.npz is not an .npz archive" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("args, fragment", [
    (["fit", "missing.npz"], "no file or folder"),
    (["fit", "--sample", "digits", "--k", "0"], "K = 0 is out of range"),
    (["fit", "--sample", "digits", "--method", "nope"], "Unknown method"),
    (["fit", "--sample", "digits", "--set", "oops"], "name=value"),
    (["fit"], "INPUT file or --sample"),
    (["fit", "--sample", "shapes", "--method", "kmeans"], "use the shape-kmeans method"),
])
def test_errors_are_one_sentence(tmp_path, monkeypatch, capsys, args, fragment):
    from ticlust.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.strip().splitlines()[-1].startswith("ticlust: error:")
