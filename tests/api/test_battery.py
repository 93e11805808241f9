"""Issue 32, item 4: a battery of odd inputs, not a list. Hypothesis draws inputs over dtypes (every NumPy
kind, torch's incl. bfloat16, float16, bool, complex), shapes (0-size, 1 item, huge aspect, channels,
volumes), values (NaN, ±inf, 1e-300, 1e300, constant) and containers (lists, tensors that require grad,
memmaps, dask arrays, read-only and strided arrays) and feeds them to every public entry point: fit, run,
predict, Stack construction (as_stack), landmarks (as_landmarks, the CSV reader) and extract + open_objects.

Each example must end in a clear refusal (one InputError sentence, no traceback or wrapped exception in
it) or a sane result (labels in range, finite prototypes and scores), never another exception and never a
RuntimeWarning (an overflow or 0/0 on the way to a result); the input must be unchanged afterwards.

Bounded and deterministic in CI (profile "ci"); ``HYPOTHESIS_PROFILE=long`` runs 5,000 examples per
entry point (docs/robustness.md has the result of that run)."""
import atexit
import hashlib
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings, strategies as st

import ticlust
from ticlust.errors import InputError
from ticlust.events import Done
from ticlust.core.validation import as_landmarks, as_stack

pytestmark = pytest.mark.usefixtures("one_thread")

_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile("battery-ci", max_examples=30, **_COMMON)
settings.register_profile("battery-long", max_examples=5000, **_COMMON)
PROFILE = "battery-long" if os.environ.get("HYPOTHESIS_PROFILE") == "long" else "battery-ci"
BATTERY = settings(settings.get_profile(PROFILE))

ST_TINY = dict(steps=2, affine_steps=2, predict_steps=2, max_iter=2, landmarks=3)
FIT_METHODS = {"kmeans": {"max_iter": 5}, "gmm": {"max_iter": 5}, "st-kmeans": ST_TINY}

# ---- what is drawn ---------------------------------------------------------------------------------------
NUMPY_DTYPES = [np.float32, np.float64, np.uint8, np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint16,
                np.uint32, np.uint64, np.float16, np.longdouble, np.complex64, np.complex128, np.clongdouble,
                np.object_, np.str_, np.bytes_, "datetime64[s]", "timedelta64[ms]"]
TORCH_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.bool, torch.uint8, torch.int8, torch.int16,
                torch.int32, torch.int64, torch.uint16, torch.float64, torch.complex32, torch.complex64,
                torch.complex128] + [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]
IMAGE_SHAPES = st.one_of(
    st.tuples(st.sampled_from([6, 12, 3, 2, 1]), st.just(8), st.just(8)),        # the fitted results' item shape
    st.tuples(st.sampled_from([0, 1, 2, 3, 6]), st.sampled_from([0, 1, 3, 4, 8]), st.sampled_from([0, 1, 4, 8])),
    st.sampled_from([(3, 4, 700), (3, 700, 4), (2, 2, 3000), (4, 8, 8, 3), (4, 3, 8, 8), (3, 8, 8, 1), (2, 8, 8, 2),
                     (3, 9, 9, 9), (2, 4, 4, 4, 4), (5, 6), (6, 5), (6,), (), (3, 8, 2), (4, 0, 8)]))
LANDMARK_SHAPES = st.one_of(st.tuples(st.sampled_from([6, 3, 2, 1, 0]), st.sampled_from([5, 3, 2, 1, 0]),
                                      st.sampled_from([2, 2, 2, 1, 3])),
                            st.sampled_from([(4, 5), (4,), (), (3, 6, 2, 1)]))
VALUES = ["random", "random", "integers", "negative", "constant", "tiny", "huge", "nan", "inf", "-inf", "outlier",
          "tiny-spread"]
CONTAINERS = ["array", "array", "readonly", "memmap", "dask", "dask-unknown", "list", "nested-list", "tensor",
              "tensor-grad", "strided", "fortran"]


def values(kind: str, shape: tuple, seed: int, constant: float) -> np.ndarray:
    """float64 values of one kind (NaN and ±inf at one drawn place)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.random(shape))
    if kind == "integers":
        x = rng.integers(0, 256, shape).astype(np.float64)
    elif kind == "negative":
        x = x - 0.7
    elif kind == "constant":
        x = np.full(shape, constant)
    elif kind == "tiny":
        x = x * 1e-300
    elif kind == "huge":
        x = x * 1e300
    elif kind == "tiny-spread":
        x = 1.0 + x * 1e-12
    elif kind in ("nan", "inf", "-inf", "outlier") and x.size:
        x.flat[rng.integers(x.size)] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "outlier": 1e30}[kind]
    return np.asarray(x)          # arithmetic on a 0-d array gives a NumPy scalar


def cast(x: np.ndarray, dtype) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if np.dtype(dtype).kind in "mM":
            return np.nan_to_num(x, nan=0, posinf=0, neginf=0).clip(-1e9, 1e9).astype(np.int64).astype(dtype)
        return np.asarray(x.astype(dtype))


def contain(x: np.ndarray, container: str, torch_dtype, scratch: Path):
    """``x`` in one container; None when that container cannot hold this dtype (the draw is rejected)."""
    if container in ("tensor", "tensor-grad"):
        if torch_dtype is None:
            return None
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                t = torch.from_numpy(np.ascontiguousarray(x.astype(np.complex64 if torch_dtype.is_complex else
                                                                   np.float32))).to(torch_dtype)
            except (TypeError, RuntimeError):
                return None
        if container == "tensor-grad":
            if not (t.is_floating_point() or t.is_complex()):
                return None
            try:
                t.requires_grad_(True)
            except RuntimeError:
                return None
        return t
    if container == "readonly":
        x = np.array(x, copy=True)
        x.flags.writeable = False
        return x
    if container == "memmap":
        if x.dtype.kind in "OUS" or x.size == 0:
            return None
        path = Path(tempfile.mkstemp(suffix=".dat", dir=scratch)[1])
        mm = np.memmap(path, dtype=x.dtype, mode="w+", shape=x.shape)
        mm[...] = x
        mm.flush()
        return np.memmap(path, dtype=x.dtype, mode="r+", shape=x.shape)
    if container == "dask":
        import dask.array as da

        return da.from_array(x, chunks=max(1, x.shape[0] // 2) if x.ndim else ()) if x.dtype.kind != "O" else None
    if container == "dask-unknown":                                  # boolean indexing: sizes unknown (NaN)
        import dask.array as da

        if x.dtype.kind == "O" or not x.ndim:
            return None
        lazy = da.from_array(x, chunks=max(1, x.shape[0] // 2))
        return lazy[da.from_array(np.ones(x.shape[0], bool), chunks=lazy.chunks[0])]
    if container == "list":
        return list(x) if x.ndim else None
    if container == "nested-list":
        return x.tolist() if x.ndim else None
    if container == "strided":
        return np.repeat(x, 2, axis=-1)[..., ::2] if x.ndim else x
    if container == "fortran":
        return np.asfortranarray(x)
    return x


@st.composite
def odd_inputs(draw, shapes=IMAGE_SHAPES, plain_shape=(12, 8, 8)):
    """An input that is odd in one way (its dtype, shape, values or container; the rest plain: float32
    random values in a NumPy array of ``plain_shape``) or in every way at once."""
    odd = draw(st.sampled_from(["dtype", "shape", "values", "container", "everything"]))
    shape = draw(shapes) if odd in ("shape", "everything") else plain_shape
    kind = draw(st.sampled_from(VALUES)) if odd in ("values", "everything") else "random"
    x = values(kind, shape, draw(st.integers(0, 2**16)), draw(st.sampled_from([0.0, 1.0, -3.5, 1e-300, 255.0])))
    container = draw(st.sampled_from(CONTAINERS)) if odd in ("container", "dtype", "everything") else "array"
    pick = odd in ("dtype", "everything")
    if container.startswith("tensor"):
        data = contain(x, container, draw(st.sampled_from(TORCH_DTYPES)) if pick else torch.float32, SCRATCH)
    else:
        data = contain(cast(x, draw(st.sampled_from(NUMPY_DTYPES)) if pick else np.float32), container, None, SCRATCH)
    return data if data is not None else cast(x, np.float32)


SCRATCH = Path(tempfile.mkdtemp(prefix="ticlust-battery-"))   # memmaps, CSVs and stores drawn (removed at exit)
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)


# ---- what every example must satisfy -----------------------------------------------------------------------
def fingerprint(data):
    """What "unchanged" compares: dtype, shape, flags and every byte (NaN-safe), or the nested values."""
    if isinstance(data, torch.Tensor):
        raw = data.detach().cpu().contiguous()
        view = raw.view(torch.uint8) if raw.dim() and raw.numel() else raw.clone()
        return ("tensor", str(data.dtype), tuple(data.shape), data.requires_grad, data.grad is None,
                hashlib.sha256(view.numpy().tobytes() if raw.dim() and raw.numel() else repr(raw.tolist()).encode()).hexdigest())
    if isinstance(data, list):
        return ("list", repr([fingerprint(d) if not isinstance(d, (int, float, list)) else repr(d) for d in data]))
    if type(data).__module__.startswith("dask"):
        return ("dask", fingerprint(np.asarray(data.compute())))
    arr = np.asarray(data)
    body = repr(arr.tolist()) if arr.dtype.kind == "O" else np.ascontiguousarray(arr).tobytes()
    return (str(arr.dtype), arr.shape, bool(arr.flags.writeable), hashlib.sha256(body if isinstance(body, bytes)
                                                                                   else body.encode()).hexdigest())


WRAPPED = re.compile(r"\b[A-Z]\w*(Error|Exception|Warning)\b:")


def outcome(call, *inputs):
    """Run ``call()``: its value, or None after a clear refusal; fails on any other exception, on a
    RuntimeWarning on the way, and when an input changed."""
    before = [fingerprint(x) for x in inputs]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.simplefilter("error", RuntimeWarning)
            try:
                value = call()
                event("a result")
                return value
            except InputError as err:
                event("a refusal")
                message = str(err)
                assert message.strip() and "\n" not in message and "Traceback" not in message, message
                assert not WRAPPED.search(message), f"an internal error wrapped as a refusal: {message}"
                return None
    finally:
        assert [fingerprint(x) for x in inputs] == before, "the input was modified"


def assert_sane(result, n: int, k: int):
    assert result.labels.shape == (n,) and result.labels.dtype.kind in "iu"
    assert result.labels.min() >= 0 and result.labels.max() < k
    assert np.isfinite(np.asarray(result.prototypes, np.float64)).all()
    assert result.scores.shape == (n, k) and np.isfinite(result.scores).all()


def item_count(data) -> int:
    if isinstance(data, list):
        return len(data)
    n = data.shape[0]
    return int(n) if n == n else len(np.asarray(data))      # NaN: a dask array of unknown size


K_VALUES = st.one_of(st.integers(1, 3), st.integers(-1, 6), st.sampled_from([None, 2.0, 2.5, True, "2", np.int64(2)]))


# ---- the entry points ------------------------------------------------------------------------------------------
@BATTERY
@given(data=odd_inputs(), method=st.sampled_from(sorted(FIT_METHODS)), k=K_VALUES, seed=st.sampled_from([0, 1, 0, -1]))
def test_fit(data, method, k, seed):
    result = outcome(lambda: ticlust.fit(data, method, k=k, seed=seed, device="cpu", **FIT_METHODS[method]), data)
    if result is not None:
        assert_sane(result, item_count(data), result.k)


@BATTERY
@given(data=odd_inputs(), method=st.sampled_from(["kmeans", "ai-kmeans"]), k=st.integers(1, 3))
def test_run(data, method, k):
    params = {"max_iter": 3} if method == "kmeans" else {key: v for key, v in ST_TINY.items() if key != "landmarks"}
    events = outcome(lambda: list(ticlust.run(data, method, k=k, device="cpu", **params)), data)
    if events is not None:
        assert isinstance(events[-1], Done)
        assert_sane(events[-1].result, item_count(data), k)


@pytest.fixture(scope="module")
def fitted():
    """Results fitted on 12 float32 8×8 images in [0, 1], one per fit method."""
    x = np.random.default_rng(0).random((12, 8, 8)).astype(np.float32)
    return {m: ticlust.fit(x, m, k=3, device="cpu", seed=0, **params) for m, params in FIT_METHODS.items()}


@BATTERY
@given(data=odd_inputs(), method=st.sampled_from(sorted(FIT_METHODS)),
       batch_size=st.sampled_from([None, None, 1, 2, 0, -1, 2.5]))
def test_predict(fitted, data, method, batch_size):
    result = fitted[method]
    out = outcome(lambda: ticlust.predict(result, data, device="cpu", batch_size=batch_size), data, result.labels,
                  result.prototypes, result.scores)
    if out is not None:
        assert_sane(out, item_count(data), result.k)


@BATTERY
@given(data=odd_inputs(), item=st.integers(0, 3))
def test_align_one(fitted, data, item):
    result = fitted["st-kmeans"]
    one = data[item] if isinstance(data, list) and item < len(data) else (
        data[item] if hasattr(data, "shape") and len(getattr(data, "shape", ())) and data.shape[0] > item else data)
    out = outcome(lambda: ticlust.api.align_one(result, one, device="cpu"), one, result.prototypes)
    if out is not None:
        aligned, scores = out
        assert aligned.shape == (result.k, 8, 8) and np.isfinite(aligned).all() and np.isfinite(scores).all()


@BATTERY
@given(data=odd_inputs(), allow_vectors=st.booleans(), to_predict=st.booleans())
def test_stack_construction(data, allow_vectors, to_predict):
    stack = outcome(lambda: as_stack(data, allow_vectors=allow_vectors, to_predict=to_predict), data)
    if stack is not None:
        assert stack.n == item_count(data) and stack.n >= 1 and stack.hi > stack.lo
        for _, batch in stack.batches(2):
            assert batch.dtype == np.float32 and np.isfinite(batch).all()
            if stack.n:
                assert batch.min() >= 0 and batch.max() <= 1 + 1e-5


@BATTERY
@given(data=odd_inputs(LANDMARK_SHAPES, (6, 5, 2)), to_predict=st.booleans())
def test_landmarks(data, to_predict):
    arr = outcome(lambda: as_landmarks(data, to_predict=to_predict), data)
    if arr is not None:
        assert arr.dtype == np.float64 and arr.ndim == 3 and arr.shape[2] == 2 and np.isfinite(arr).all()
        assert arr.shape[0] == item_count(data) >= 1


CELLS = st.sampled_from(["0", "1", "2.5", "-3", "1e300", "1e-300", "nan", "inf", "-inf", "", " 4 ", "x", "1.5", "1,5",
                         '"7"', "\u00e9", "0x10"])


@st.composite
def landmark_csvs(draw):
    """A landmark CSV's bytes: a header (maybe misspelt, reordered or upper case), rows of drawn cells, an
    optional byte-order mark, CRLF line ends, an encoding."""
    columns = ["shape_id", "landmark", "x", "y"]
    header = draw(st.permutations(columns))
    header = [draw(st.sampled_from([c, c.upper(), f" {c} ", c])) for c in header]
    if draw(st.integers(0, 9)) == 9:
        header = header[:-1]
    n, n_lm = draw(st.integers(2, 4) | st.integers(0, 1)), draw(st.integers(3, 5) | st.integers(0, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rows = []
    for s in range(n):
        for j in rng.permutation(n_lm):
            cell = {"shape_id": f"s{s}", "landmark": str(j), "x": repr(float(rng.normal(0, 100))),
                    "y": repr(float(rng.normal(0, 100)))}
            if draw(st.integers(0, 15)) == 15:
                cell[draw(st.sampled_from(columns))] = draw(CELLS)
            rows.append(",".join(cell[c.strip().lower()] if c.strip().lower() in cell else "" for c in header))
    text = "\n".join([",".join(header), *rows]) + draw(st.sampled_from(["\n", "", "\n\n"]))
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    data = text.encode(draw(st.sampled_from(["utf-8"] * 4 + ["latin-1", "utf-16"])), errors="replace")
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + data


@BATTERY
@given(content=landmark_csvs())
def test_landmark_csv_reader(content):
    from ticlust.io.landmarks import read_landmarks

    path = Path(tempfile.mkstemp(suffix=".csv", dir=SCRATCH)[1])
    path.write_bytes(content)
    read = outcome(lambda: read_landmarks(path))
    assert path.read_bytes() == content
    if read is not None:
        arr, ids = read
        assert arr.ndim == 3 and arr.shape[2] == 2 and np.isfinite(arr).all() and len(ids) == arr.shape[0] >= 2


MASK_DTYPES = [np.uint8, np.uint16, np.int32, np.int64, np.int8, np.bool_, np.float32, np.float64]


@st.composite
def fields(draw):
    """One field (an image of a drawn dtype, shape and values) and its mask (rectangles of labels, in a drawn
    dtype, sometimes of another shape or with a fractional or negative label)."""
    shape = draw(st.sampled_from([(24, 24), (16, 40), (8, 64), (3, 30), (24, 24, 3), (2, 24, 24), (1, 1)]))
    image = cast(values(draw(st.sampled_from(VALUES)), shape, draw(st.integers(0, 2**16)), 3.0),
                 draw(st.sampled_from([np.uint8, np.uint16, np.int16, np.float16, np.float32, np.float64, np.bool_,
                                       np.int64])))
    plane = shape[:2] if len(shape) == 2 or shape[2] == 3 else shape[1:]
    mask = np.zeros(plane if draw(st.integers(0, 9)) < 9 else (plane[0] + 1, plane[1]), np.float64)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    for label in range(1, draw(st.integers(1, 4) | st.just(0)) + 1):
        r, c = rng.integers(1, max(2, mask.shape[0] - 3)), rng.integers(1, max(2, mask.shape[1] - 3))
        mask[r:r + rng.integers(1, 9), c:c + rng.integers(1, 9)] = label     # mostly away from the border
    odd = draw(st.sampled_from([None, None, None, 1.5, -2.0]))
    if odd is not None and mask.any():
        mask[mask == mask.max()] = odd
    return image, cast(mask, draw(st.sampled_from(MASK_DTYPES)))


@BATTERY
@given(field=fields(), crop_size=st.sampled_from([None, None, 8, 3, 0]), normalize=st.booleans())
def test_extract_and_open_objects(field, crop_size, normalize):
    image, mask = field
    folder = Path(tempfile.mkdtemp(dir=SCRATCH))
    np.save(folder / "field.npy", image)
    np.save(folder / "field_masks.npy", mask)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def cut():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ticlust.extract(folder / "field.npy", folder / "store.zarr", labels=folder / "field_masks.npy",
                            crop_size=crop_size, normalize=normalize)
        return ticlust.open_objects(folder / "store.zarr")

    store = outcome(cut)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    if store is not None:
        crops, masks, table = np.asarray(store.crops), np.asarray(store.masks), store.table
        assert len(store) == len(table) == len(crops) == len(masks)
        assert crops.shape[1:3] == (store.size, store.size) and masks.dtype == bool
        if crops.dtype.kind == "f":
            assert np.isfinite(crops).all() or not np.isfinite(image).all()


# ---- the cases issue 32 names, one by one ------------------------------------------------------------------
def images(n=12, seed=0):
    return np.random.default_rng(seed).random((n, 8, 8)).astype(np.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64, torch.uint8, torch.bool]
                         + [getattr(torch, n) for n in ("float8_e4m3fn",) if hasattr(torch, n)])
def test_torch_dtypes_numpy_lacks_are_converted(dtype):
    x = torch.from_numpy(images() > 0.5 if dtype == torch.bool else images() * (255 if dtype == torch.uint8 else 1)).to(dtype)
    result = ticlust.fit(x, k=2, seed=0, device="cpu")
    assert result.labels.shape == (12,) and np.isfinite(result.prototypes).all()


def test_complex_data_is_refused_by_name():
    for x in (images().astype(np.complex64), torch.from_numpy(images()).to(torch.complex32)):
        with pytest.raises(InputError, match="dtype complex.*real part"):
            ticlust.fit(x, k=2)


def test_a_tensor_that_requires_grad_is_read_and_left_as_it_was():
    x = torch.from_numpy(images()).requires_grad_(True)
    before = x.detach().clone()
    for data in (x, list(x)):                     # a list of such tensors too
        result = ticlust.fit(data, k=2, seed=0, device="cpu")
        assert np.array_equal(result.labels, ticlust.fit(images(), k=2, seed=0, device="cpu").labels)
    assert x.requires_grad and x.grad is None and torch.equal(x.detach(), before)


@pytest.mark.parametrize("method", ["st-kmeans", "kmeans", "gmm"])
def test_k_above_the_number_of_distinct_items_is_refused_before_any_work(method):
    x = np.stack([images()[0]] * 5 + [images()[1]] * 5)
    with pytest.raises(InputError, match=r"K = 3 but the input holds only 2 distinct items: lower K to at most 2"):
        ticlust.fit(x, method, k=3, device="cpu", **(ST_TINY if method == "st-kmeans" else {}))
    assert ticlust.fit(x, method, k=2, device="cpu", **(ST_TINY if method == "st-kmeans" else {})).k == 2


def test_values_below_float32s_range_keep_their_spread():
    x = images().astype(np.float64)
    tiny = ticlust.fit(x * 1e-300, k=2, seed=0, device="cpu")
    fine = ticlust.fit(1.0 + x * 1e-12, k=2, seed=0, device="cpu")        # differences float32 cannot hold
    plain = ticlust.fit(x, k=2, seed=0, device="cpu")
    for result in (tiny, fine):
        assert np.isfinite(result.prototypes).all() and np.isfinite(result.scores).all()
        assert np.array_equal(result.labels, plain.labels)
        assert np.allclose(result.prototypes, plain.prototypes, atol=1e-3)


def test_new_items_far_outside_the_fitted_range_are_refused():
    result = ticlust.fit(images(), k=2, seed=0, device="cpu")
    with pytest.raises(InputError, match="far outside the range the result was fitted on"):
        ticlust.predict(result, images(3) * 1e25)
    assert ticlust.predict(result, images(3) * 255).labels.shape == (3,)    # another scale, still computable


def test_a_landmark_csv_saved_by_excel_is_read(tmp_path):
    from ticlust.io.landmarks import read_landmarks, write_landmarks_csv

    shapes = ticlust.sample("shapes")[0][:5]
    write_landmarks_csv(tmp_path / "plain.csv", shapes)
    text = (tmp_path / "plain.csv").read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbf" + text)            # byte-order mark, CRLF
    landmarks, ids = read_landmarks(tmp_path / "excel.csv")
    assert np.allclose(landmarks, shapes) and ids == ["0", "1", "2", "3", "4"]
    (tmp_path / "half.csv").write_bytes(text.replace(b"\r\n0,1,", b"\r\n0,1.5,", 1))
    with pytest.raises(InputError, match="landmark 1.5, not a whole number"):
        read_landmarks(tmp_path / "half.csv")


@pytest.mark.parametrize("make", ["memmap", "dask", "readonly", "list", "nested"])
def test_containers_give_the_arrays_result(tmp_path, make):
    x = images()
    if make == "memmap":
        np.save(tmp_path / "x.npy", x)
        data = np.load(tmp_path / "x.npy", mmap_mode="r")
    elif make == "dask":
        import dask.array as da

        data = da.from_array(x, chunks=5)
    elif make == "readonly":
        data = x.copy()
        data.flags.writeable = False
    else:
        data = list(x) if make == "list" else x.tolist()
    assert np.array_equal(ticlust.fit(data, k=2, seed=0, device="cpu").labels,
                          ticlust.fit(x, k=2, seed=0, device="cpu").labels)


def test_empty_single_constant_and_huge_aspect_stacks():
    with pytest.raises(InputError, match=r"empty \(shape \(0, 8, 8\)\): give a stack of at least 2 images"):
        ticlust.fit(images()[:0], k=1)
    result = ticlust.fit(images(), k=2, device="cpu")
    with pytest.raises(InputError, match="at least 1 item"):
        ticlust.predict(result, images()[:0])
    with pytest.raises(InputError, match="single item"):
        ticlust.fit(images()[:1], k=1)
    with pytest.raises(InputError, match="constant"):
        ticlust.fit(np.full((4, 8, 8), 7, np.uint8), k=2)
    assert ticlust.predict(result, np.zeros((2, 8, 8))).labels.shape == (2,)  # a blank item can be assigned
    wide = np.random.default_rng(1).random((5, 4, 3000))
    assert ticlust.fit(wide, k=2, device="cpu").prototypes.shape == (2, 4, 3000)
