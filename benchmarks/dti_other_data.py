"""DTI K-means on data other than MNIST: USPS-test (2,007 digits, 16×16, K = 10) and COIL-20 (1,440 object views,
32×32, K = 20), with the defaults or any ``--set`` parameters: ACC, NMI, final loss and CPU seconds (the process's
own), one JSON line per run appended to ``--log``. To check a schedule tuned on MNIST-1k on other data.

    python benchmarks/dti_other_data.py --data usps --seeds 0 1 2 --set encoder_stride=2 --log out.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402
from _data import data_dir, load_average  # noqa: E402


def load(name: str, folder) -> tuple[np.ndarray, np.ndarray, int]:
    """(images float32 in [0, 1], labels, K) of a data set."""
    if name == "usps":
        with np.load(folder / "usps.npz") as d:
            x, y = d["x_test"].astype(np.float32), d["y_test"]
        x = (x - x.min()) / max(float(x.max() - x.min()), 1e-12)
        return x, y, 10
    with np.load(folder / "coil20_32x32.npz") as d:
        return d["images"].astype(np.float32) / 255.0, d["labels"], 20


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("usps", "coil20"), required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--log", required=True)
    ap.add_argument("--data-dir")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    x, y, k = load(args.data, data_dir(args.data_dir))
    params = dict(item.split("=", 1) for item in args.set)
    for seed in args.seeds:
        load_before, cpu, wall = load_average(), time.process_time(), time.perf_counter()
        r = ticlust.fit(x, "dti-kmeans", k=k, device="cpu", seed=seed, progress=False, **params)
        row = {"data": args.data, "seed": seed, "params": params, **{m: round(float(v), 4) for m, v in
               evaluate(y, r.labels).items() if m in ("acc", "nmi")}, "loss": float(r.final_loss),
               "cpu": round(time.process_time() - cpu, 1), "wall": round(time.perf_counter() - wall, 1),
               "load": f"{load_before} -> {load_average()}"}
        with open(args.log, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
