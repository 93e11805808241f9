"""Acceptance on real digits (slow, needs ../shared/datasets): Non-rigid MNIST from MNIST-test digits."""
import time
import numpy as np
import pytest

import ticlust
from ticlust.metrics import hungarian_accuracy
from ticlust.datasets.warped_digits import nonrigid_digits

@pytest.mark.slow
def test_nonrigid_mnist_acceptance(shared_datasets):
    mnist = np.load(shared_datasets("mnist.npz"))
    ds = nonrigid_digits(mnist["x_test"], mnist["y_test"], seed=0)
    start = time.perf_counter()
    st = ticlust.fit(ds["x_train"], "st-kmeans", k=10, device="cpu", seed=0, max_scale=2.0)  # see docs: relative scales > 1.5
    acc_st = hungarian_accuracy(ds["y_test"], ticlust.predict(st, ds["x_test"], device="cpu").labels)
    elapsed = time.perf_counter() - start
    km = ticlust.fit(ds["x_train"], "kmeans", k=10, device="cpu", seed=0)
    acc_km = hungarian_accuracy(ds["y_test"], ticlust.predict(km, ds["x_test"], device="cpu").labels)
    assert acc_st >= 0.95 and acc_st >= acc_km + 0.20, (acc_st, acc_km)
    assert elapsed < 15 * 60
    assert np.all(np.diff(st.history) <= 1e-5 * np.asarray(st.history[:-1]))
