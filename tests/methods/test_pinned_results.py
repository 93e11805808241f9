"""Every method's pinned fit (tests/conftest.py: a small sample, a fixed seed, the CPU, one thread) against
the arrays stored in tests/pins/, labels exactly and floats within a float32 roundoff budget; and the
same-seed guarantee across processes, threads and CPU dispatches (docs/reproducibility.md).

If a deliberate change of a method's maths moves its pin, re-make it with ``python tests/conftest.py METHOD``
in the same commit and say why.
"""
import os
import subprocess
import sys

import numpy as np
import pytest


@pytest.mark.usefixtures("one_thread")
def test_results_are_pinned(pinned_method, pins):
    method = pinned_method
    problem = pins.mismatch(method, pins.arrays_of(pins.pinned_fit(method)), pins.load_pin(method))
    assert problem is None, problem


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method, change, what", [
    ("kmeans", {"init": "random"}, "labels differ"),                 # another initialisation
    ("kmeans", {"max_iter": 1}, "labels differ"),                    # one Lloyd step fewer
    ("st-kmeans", {"max_displacement": 0.45}, "st-kmeans: prototypes moved"),   # a 10 % tighter TPS bound
    ("ai-kmeans", {"lowpass": 0.08}, "ai-kmeans: prototypes moved"),            # a slightly wider low-pass
])
def test_a_deliberate_change_fails_its_pin_and_says_what_moved(method, change, what, pins):
    problem = pins.mismatch(method, pins.arrays_of(pins.pinned_fit(method, **change)), pins.load_pin(method))
    assert problem is not None and problem.startswith(f"{method}: ") and what in problem, problem


def test_a_mismatch_names_the_array_the_difference_and_where(pins):
    pin = pins.load_pin("st-kmeans")
    moved = {name: a.copy() for name, a in pin.items()}
    moved["prototypes"][1, 2, 3] += 0.01
    problem = pins.mismatch("st-kmeans", moved, pin)
    assert problem.startswith("st-kmeans: prototypes moved by up to 0.01 at index (1, 2, 3)"), problem
    assert pins.mismatch("st-kmeans", {name: a.copy() for name, a in pin.items()}, pin) is None


def _run_pins(script, args, out_env: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, **out_env}
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=600)


def test_pins_hold_under_the_portable_cpu_dispatch(pins):
    """Another CPU's vector units, imitated: torch's plain (non-SIMD) kernels."""
    done = _run_pins(pins.script, ["--check"], {"ATEN_CPU_CAPABILITY": "default"})
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


# the portable dispatch's two-process run is slow (four processes fitting every method); its pins are held in the
# default run by test_pins_hold_under_the_portable_cpu_dispatch
@pytest.mark.parametrize("dispatch", ["native", pytest.param("default", marks=pytest.mark.slow)])
def test_same_seed_gives_identical_fits_in_two_processes_at_two_threads(tmp_path, dispatch, pins):
    """Every method (and two on the objects route) fitted in two separate processes, two torch threads,
    sample large enough for the threads to split the work: identical labels, prototypes and scores."""
    env = {"OMP_NUM_THREADS": "2"} | ({"ATEN_CPU_CAPABILITY": "default"} if dispatch == "default" else {})
    outs = [tmp_path / f"run{i}.npz" for i in range(2)]
    for out in outs:
        done = _run_pins(pins.script, ["--same-seed", str(out)], env)
        assert done.returncode == 0, done.stderr[-2000:]
    with np.load(outs[0]) as a, np.load(outs[1]) as b:
        assert sorted(a.files) == sorted(b.files) and len(a.files) == 3 * (len(pins.CASES) + 2)
        differ = [key for key in a.files if not np.array_equal(a[key], b[key])]
    assert not differ, f"same seed, two processes, different arrays: {differ}"
