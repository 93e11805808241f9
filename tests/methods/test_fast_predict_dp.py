"""Fast assignment for dti-kmeans and pssc (issue 29, item 5): the faster predict gives the labels of the
previous computation, the same labels for the same seed and for any batch size, and stays device-agnostic."""

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

import ticlust
from ticlust.features import scattering_features
from ticlust.kernels import pssc as kpssc
from ticlust.methods import dti
from ticlust.methods.dti.net import InferenceEncoder, ResNetEncoder, cpu_bfloat16
from ticlust.result import load_result
from ticlust.datasets.samples import glyphs_sample
from ticlust.core.stack import Stack, to_nchw

pytestmark = pytest.mark.usefixtures("one_thread")

DTI_FAST = dict(max_epochs=2, min_stage_epochs=1, patience=1, final_epochs=1, batch_size=16, threads=1)
PSSC_FAST = dict(pad_to=16, scales=2, candidates=40, representatives=12, restarts=2)


@pytest.fixture(scope="module")
def glyphs():
    """64 items to fit on and 40 held back (four glyph kinds, 16×16)."""
    x, y = glyphs_sample(n_per_class=26, size=16, seed=4)
    return x[:64], x[64:]


@pytest.fixture(scope="module")
def saved(glyphs, tmp_path_factory):
    """A dti-kmeans and a pssc fit, written to disk and read back (what a plate's predict starts from)."""
    folder = tmp_path_factory.mktemp("fits")
    fits = {}
    for method, params in (("dti-kmeans", DTI_FAST), ("pssc", PSSC_FAST)):
        result = ticlust.fit(glyphs[0], method=method, k=4, seed=1, device="cpu", progress=False, **params)
        fits[method] = (result, load_result(result.save(folder / f"{method}.npz")))
    return fits


def _random_batch_norms(encoder: nn.Module, seed: int = 0) -> None:
    """Trained-looking batch-norm statistics and affine weights (fresh ones are the identity, which hides mistakes)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in encoder.modules():
            if isinstance(m, nn.BatchNorm2d):
                for t, lo, hi in ((m.running_mean, -0.2, 0.2), (m.running_var, 0.3, 2.0), (m.weight, 0.5, 1.5), (m.bias, -0.2, 0.2)):
                    t.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)


@pytest.mark.parametrize("kind,channels", [("resnet20", 1), ("resnet18", 3)])
def test_inference_encoder_gives_the_encoders_features(kind, channels):
    torch.manual_seed(0)
    encoder = ResNetEncoder(channels, kind, width=0.25 if kind == "resnet18" else 1.0)
    _random_batch_norms(encoder)
    encoder.eval()
    x = torch.rand(6, channels, 32, 32)
    before = [p.detach().clone() for p in encoder.state_dict().values()]
    with torch.no_grad():
        want, got = encoder(x), InferenceEncoder(encoder)(x)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    assert all(torch.equal(a, b) for a, b in zip(before, encoder.state_dict().values())), "the trained encoder was changed"
    assert not any(isinstance(m, nn.BatchNorm2d) for m in InferenceEncoder(encoder).modules())


def test_inference_encoder_is_device_and_dtype_agnostic():
    """Built where the encoder lives, in its dtype: nothing assumes the CPU (a meta-device encoder stands in for CUDA)."""
    for device, dtype in ((torch.device("meta"), torch.float32), (torch.device("cpu"), torch.float64)):
        encoder = ResNetEncoder(1, "resnet20").to(device=device, dtype=dtype).eval()
        fast = InferenceEncoder(encoder)
        assert {(p.device, p.dtype) for p in fast.parameters()} == {(device, dtype)}
        out = fast(torch.zeros(2, 1, 16, 16, device=device, dtype=dtype))
        assert out.device == device and out.dtype == dtype and out.shape == (2, encoder.out_features)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_dti_predict_on_cuda_gives_the_cpu_labels(glyphs, saved):
    _, loaded = saved["dti-kmeans"]
    cpu = ticlust.predict(loaded, glyphs[1], device="cpu", aligned=False)
    gpu = ticlust.predict(loaded, glyphs[1], device="cuda", aligned=False)
    assert (cpu.labels == gpu.labels).mean() >= 0.95


def _dti_reference(result, items):
    """Labels and scores the way predict computed them before: the model's own encoder, batch norms in eval mode."""
    model, cfg = dti.DTI_KMEANS.rebuild(result, torch.device("cpu"))
    model.eval()
    weights, autocast = dti.loss_setup(cfg, model.size, torch.device("cpu"))
    xb = to_nchw(torch.from_numpy(Stack(items, *result.config["input_range"]).numpy()))
    _, _, scores = dti._align_batch(model, xb, len(model.sequence.names), weights, autocast, False, cfg)
    return scores.argmin(1).numpy(), scores.numpy()


def _float32(result):
    """The result with predict's encoder in float32 (mixed_precision off): the previous computation exactly."""
    return dataclasses.replace(result, config={**result.config, "mixed_precision": False})


def test_dti_predict_matches_the_previous_computation(glyphs, saved):
    fitted, loaded = saved["dti-kmeans"]
    loaded = _float32(loaded)
    held = glyphs[1]
    before = held.copy()
    out = ticlust.predict(loaded, held, device="cpu", aligned=False)
    labels, scores = _dti_reference(loaded, held)
    assert not np.allclose(out.params["affine"], np.eye(2, 3), atol=1e-4), "untrained heads: the encoder would not matter"
    assert np.array_equal(out.labels, labels)
    assert np.allclose(out.scores, scores, rtol=1e-4, atol=1e-6)
    assert np.array_equal(held, before), "predict changed its input"
    # the fit sample gets the fit's clusters back (the fit's final pass is the same inference)
    again = ticlust.predict(loaded, glyphs[0], device="cpu", aligned=False)
    assert np.array_equal(again.labels, fitted.labels)


def test_dti_bfloat16_encoder_where_the_cpu_has_it(glyphs, saved):
    """With mixed_precision, predict's encoder runs in bfloat16 on a CPU that computes it natively (never on
    one that emulates it, nor in the fit): the float32 path's labels, scores within bfloat16's rounding."""
    _, loaded = saved["dti-kmeans"]
    cfg, cpu = dti.DTI_KMEANS.config_of(loaded), torch.device("cpu")
    assert dti.DTI_KMEANS.encoder_bfloat16(cfg, cpu) == cpu_bfloat16()
    assert not dti.DTI_KMEANS.encoder_bfloat16(dataclasses.replace(cfg, mixed_precision=False), cpu)
    assert not dti.DTI_KMEANS.encoder_bfloat16(cfg, torch.device("cuda"))   # CUDA: the whole network's autocast
    exact = ticlust.predict(_float32(loaded), glyphs[1], device="cpu", aligned=False)
    fast = ticlust.predict(loaded, glyphs[1], device="cpu", aligned=False)
    assert np.array_equal(fast.labels, exact.labels)
    assert np.allclose(fast.scores, exact.scores, rtol=2e-2, atol=1e-4)
    # the encoder itself, on any CPU (emulated where not native): float32 features, close to float32's
    encoder = ResNetEncoder(1, "resnet20")
    _random_batch_norms(encoder)
    x = torch.rand(6, 1, 16, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours, theirs = InferenceEncoder(encoder, bfloat16=True)(x), InferenceEncoder(encoder)(x)
    assert ours.dtype == torch.float32 and torch.allclose(ours, theirs, rtol=5e-2, atol=5e-2 * float(theirs.abs().max()))


def test_dti_predict_same_labels_for_every_batch_size_and_run(glyphs, saved):
    _, loaded = saved["dti-kmeans"]
    runs = [ticlust.predict(loaded, glyphs[1], device="cpu", batch_size=b, aligned=False) for b in (256, 7, 256)]
    assert np.array_equal(runs[0].labels, runs[1].labels) and np.array_equal(runs[0].labels, runs[2].labels)
    assert np.allclose(runs[0].scores, runs[1].scores, rtol=1e-5, atol=1e-7)
    assert np.array_equal(runs[0].scores, runs[2].scores)


def test_dti_same_seed_same_fit_and_predict(glyphs, saved):
    fitted, loaded = saved["dti-kmeans"]
    twin = ticlust.fit(glyphs[0], method="dti-kmeans", k=4, seed=1, device="cpu", progress=False, **DTI_FAST)
    assert np.array_equal(twin.labels, fitted.labels)
    a = ticlust.predict(loaded, glyphs[1], device="cpu", aligned=False)
    b = ticlust.predict(twin, glyphs[1], device="cpu", aligned=False)
    assert np.array_equal(a.labels, b.labels)


def test_scattering_in_chunks_equals_one_batch():
    cfg = kpssc.PSSCConfig(**PSSC_FAST)
    op = scattering_features.Scatterer((16, 16), cfg, torch.device("cpu"))
    x = np.random.default_rng(0).random((37, 16, 16), dtype=np.float32)
    whole, chunked = op(x), scattering_features.scattered(op, x, 5)
    assert chunked.shape == whole.shape == (37, op.dim)
    assert torch.allclose(chunked, whole, rtol=1e-5, atol=1e-6)


def test_pssc_predict_matches_fit_and_any_batch_size(glyphs, saved):
    fitted, loaded = saved["pssc"]
    again = ticlust.predict(loaded, glyphs[0], device="cpu", aligned=False)
    assert np.array_equal(again.labels, fitted.labels)
    assert np.allclose(again.scores, fitted.scores, rtol=1e-4, atol=1e-5)
    runs = [ticlust.predict(loaded, glyphs[1], device="cpu", batch_size=b, aligned=False) for b in (256, 3, 256)]
    assert np.array_equal(runs[0].labels, runs[1].labels) and np.array_equal(runs[0].labels, runs[2].labels)
    # batches of 3 against 256 sum in other orders (the local affinity width too): float32 round-off, as above
    assert np.allclose(runs[0].scores, runs[1].scores, rtol=1e-4, atol=1e-5)
    assert np.array_equal(runs[0].scores, runs[2].scores)


def test_runs_skip_the_nan_fill_and_restore_it(monkeypatch):
    """Deterministic kernels stay on while a run lasts, but not torch's NaN fill of every new tensor (a fifth of
    predict's time, no result changed); both settings come back after the run."""
    from ticlust.core.device import reproducible

    monkeypatch.delenv("TICLUST_DETERMINISTIC", raising=False)
    before = torch.utils.deterministic.fill_uninitialized_memory
    with reproducible(torch.device("cpu")):
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.utils.deterministic.fill_uninitialized_memory
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory == before
