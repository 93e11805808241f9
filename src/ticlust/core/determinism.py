"""The same-seed guarantee's process-wide switch, without importing torch (``import ticlust`` stays light):
``TICLUST_DETERMINISTIC=0`` turns it off; docs/reproducibility.md says what it holds."""
from __future__ import annotations

import os

DETERMINISM_VARIABLE = "TICLUST_DETERMINISTIC"   # "0" turns the same-seed guarantee's settings off


def determinism_wanted() -> bool:
    """The same-seed guarantee is on unless TICLUST_DETERMINISTIC is 0, false, no or off."""
    return os.environ.get(DETERMINISM_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def request_reproducible_blas() -> None:
    """Ask MKL, torch's CPU BLAS, for its reproducible mode (MKL_CBWR=AUTO,STRICT: the best code path of
    this CPU, with the run-to-run variations of threaded kernels, memory alignment and non-Intel CPUs
    turned off). MKL reads the variable at its first call, so ticlust sets it when imported; a value the
    user set wins, and TICLUST_DETERMINISTIC=0 leaves it alone."""
    if determinism_wanted():
        os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
