"""Every method's pinned fit (tests/pins.py: a small sample, a fixed seed, the CPU, one thread) against
the arrays stored in tests/pins/, labels exactly and floats within a float32 roundoff budget; and the
same-seed guarantee across processes, threads and CPU dispatches (docs/reproducibility.md).

If a deliberate change of a method's maths moves its pin, re-make it with ``python tests/pins.py METHOD``
in the same commit and say why.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pins import CASES, arrays_of, load_pin, mismatch, pinned_fit

PINS_SCRIPT = Path(__file__).parent / "pins.py"


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method", list(CASES))
def test_results_are_pinned(method):
    problem = mismatch(method, arrays_of(pinned_fit(method)), load_pin(method))
    assert problem is None, problem


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method, change, what", [
    ("kmeans", {"init": "random"}, "labels differ"),                 # another initialisation
    ("kmeans", {"max_iter": 1}, "labels differ"),                    # one Lloyd step fewer
    ("st-kmeans", {"max_displacement": 0.45}, "st-kmeans: prototypes moved"),   # a 10 % tighter TPS bound
    ("ai-kmeans", {"lowpass": 0.08}, "ai-kmeans: prototypes moved"),            # a slightly wider low-pass
])
def test_a_deliberate_change_fails_its_pin_and_says_what_moved(method, change, what):
    problem = mismatch(method, arrays_of(pinned_fit(method, **change)), load_pin(method))
    assert problem is not None and problem.startswith(f"{method}: ") and what in problem, problem


def test_a_mismatch_names_the_array_the_difference_and_where():
    pin = load_pin("st-kmeans")
    moved = {name: a.copy() for name, a in pin.items()}
    moved["prototypes"][1, 2, 3] += 0.01
    problem = mismatch("st-kmeans", moved, pin)
    assert problem.startswith("st-kmeans: prototypes moved by up to 0.01 at index (1, 2, 3)"), problem
    assert mismatch("st-kmeans", {name: a.copy() for name, a in pin.items()}, pin) is None


def _run_pins(args, out_env: dict, tmp_path=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **out_env}
    return subprocess.run([sys.executable, str(PINS_SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=600)


def test_pins_hold_under_the_portable_cpu_dispatch():
    """Another CPU's vector units, imitated: torch's plain (non-SIMD) kernels."""
    done = _run_pins(["--check"], {"ATEN_CPU_CAPABILITY": "default"})
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize("dispatch", ["native", "default"])
def test_same_seed_gives_identical_fits_in_two_processes_at_two_threads(tmp_path, dispatch):
    """Every method (and two on the objects route) fitted in two separate processes, two torch threads,
    sample large enough for the threads to split the work: identical labels, prototypes and scores."""
    env = {"OMP_NUM_THREADS": "2"} | ({"ATEN_CPU_CAPABILITY": "default"} if dispatch == "default" else {})
    outs = [tmp_path / f"run{i}.npz" for i in range(2)]
    for out in outs:
        done = _run_pins(["--same-seed", str(out)], env)
        assert done.returncode == 0, done.stderr[-2000:]
    with np.load(outs[0]) as a, np.load(outs[1]) as b:
        assert sorted(a.files) == sorted(b.files) and len(a.files) == 3 * (len(CASES) + 2)
        differ = [key for key in a.files if not np.array_equal(a[key], b[key])]
    assert not differ, f"same seed, two processes, different arrays: {differ}"
