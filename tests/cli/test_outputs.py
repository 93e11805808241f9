"""Outputs never overwrite an input, two outputs never share a file, and a failed write leaves the previous
file whole (issue "Nothing lost, nothing silently wrong", item 1: the cases that lost data)."""
import numpy as np
import pytest

import ticlust
from ticlust.cli import main
from ticlust.datasets.samples import glyphs_sample


@pytest.fixture
def stack_file(tmp_path):
    x, _ = glyphs_sample(n_per_class=5, size=16, seed=0)
    path = tmp_path / "in.npz"
    np.savez(path, x=x)
    return path


@pytest.mark.parametrize("outputs", [["-o", "{input}"], ["-o", "{dir}/r.npz", "--csv", "{input}"],
                                     ["-o", "{dir}/r.npz", "--csv", "{dir}/r.npz"]])
def test_fit_refuses_an_output_on_an_input_or_on_another_output(stack_file, tmp_path, capsys, outputs):
    before = stack_file.read_bytes()
    args = [a.format(input=stack_file, dir=tmp_path) for a in outputs]
    assert main(["fit", str(stack_file), "--method", "kmeans", "--k", "2", "--quiet", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ("is the input INPUT" in err or "are the same file" in err), err
    assert stack_file.read_bytes() == before
    assert not (tmp_path / "r.npz").exists()


def test_predict_refuses_a_csv_on_the_result(stack_file, tmp_path, capsys):
    assert main(["fit", str(stack_file), "--method", "kmeans", "--k", "2", "--quiet", "-o", str(tmp_path / "r.npz")]) == 0
    before = (tmp_path / "r.npz").read_bytes()
    assert main(["predict", str(tmp_path / "r.npz"), str(stack_file), "--csv", str(tmp_path / "r.npz")]) == 2
    assert "is the input RESULT" in capsys.readouterr().err
    assert (tmp_path / "r.npz").read_bytes() == before


def test_a_failed_save_leaves_the_previous_file_whole(stack_file, tmp_path, monkeypatch):
    x = np.load(stack_file)["x"]
    res = ticlust.fit(x, method="kmeans", k=2, device="cpu", progress=False)
    path = res.save(tmp_path / "r.npz")
    res.assignments_table(tmp_path / "r.csv")
    before = path.read_bytes(), (tmp_path / "r.csv").read_bytes()

    def broken(fh, **arrays):
        fh.write(b"half a file")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(np, "savez_compressed", broken)
    with pytest.raises(OSError):
        res.save(path)
    assert path.read_bytes() == before[0] and ticlust.load_result(path).k == 2
    assert not list(tmp_path.glob("*.partial"))
    assert (tmp_path / "r.csv").read_bytes() == before[1]
