"""How rigid K-means' seeding decides its clusters: rigid-kmeans (and rigid-pssc, whose first stage it is) on rotated
MNIST-test (2,000 digits, seeds 0-2) and on generated nuclei fields of 600 cut by the objects route (outline kinds and
inner-pattern kinds, benchmarks/object_map_quality.py's fields, seeds 0-2): ACC, final loss, CPU s, one JSON line
per fit. Paired: run it once per source tree with PYTHONPATH pointing at that tree's src.

    PYTHONPATH=/path/to/before/src python benchmarks/rigid_seeding.py before > before.jsonl
    PYTHONPATH=src python benchmarks/rigid_seeding.py after > after.jsonl
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import object_map_quality as omq  # noqa: E402
import rotation  # noqa: E402

import ticlust  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402


def data_sets(data_dir: str | None) -> dict:
    """Rotated MNIST-test (2,000) and the outline and inner nuclei fields of seeds 0-2: name -> (x, y)."""
    sets = {"rotated-mnist-2000": rotation.rotated_mnist(2000, data=data_dir)}
    for kind in ("outline", "inner"):
        for seed in (0, 1, 2):
            x, y, _ = omq.field(kind, seed, 600)
            sets[f"{kind}-{seed}"] = (x, y)
    return sets


def main(label: str, data_dir: str | None = None) -> None:
    for name, (x, y) in data_sets(data_dir).items():
        rotated = name.startswith("rotated")
        fits = [("rigid-kmeans", s) for s in ((0, 1, 2) if rotated else (int(name[-1]),))]
        fits += [("rigid-pssc", 0)] if rotated else []
        for method, seed in fits:
            cpu = time.process_time()
            r = ticlust.fit(x, method, k=len(np.unique(y)), device="cpu", seed=seed, progress=False)
            print(json.dumps({"code": label, "set": name, "method": method, "seed": seed,
                              "acc": round(evaluate(y, r.labels)["acc"], 4), "loss": round(float(r.final_loss), 5),
                              "cpu_s": round(time.process_time() - cpu, 1)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
