"""The coarse-to-fine rigid search against the exhaustive one it replaced, paired on generated sets at 64 px
(issue 52 item 4: accuracy may not move by more than 0.01 ACC).

Below 48 px the search is the exhaustive one (``transforms.rigid.pyramid_levels``), so the 32-px generated sets and
rotated MNIST (28 px) cannot move; rotated MNIST-test 2,000 is run once to show it. The pyramid's sets are
benchmarks/rotation.py's 32-px sets upsampled 2× (bilinear) to 64 px: the inner-pattern nuclei (plain and route
crops), the nuclei sample and the outline field cut by the objects route (orient); the exhaustive search takes
minutes per fit there, the pyramid seconds. Each (set, method, seed) is fitted once by each tree, in its own child
process importing that tree's ticlust (``benchmarks/_paired.py``): ``--base`` (a checkout of the code before, e.g.
``git archive <commit> src | tar -x -C DIR``) and ``--this`` (default: this checkout). Rows go to
benchmarks/results/rigid_pyramid.jsonl; the table to benchmarks/results/rigid_pyramid.md.

    PYTHONPATH=src python benchmarks/rigid_pyramid.py --base /tmp/base [--this TREE] [--methods rigid-kmeans] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _data import load_average  # noqa: E402
from _paired import child_json, in_turn  # noqa: E402

RESULTS = HERE / "results"
METHODS = ("rigid-kmeans", "rigid-spectral")


def load_set(name: str):
    """One named set as (images, labels): rotated MNIST-test 2,000 (28 px), or a 32-px set of benchmarks/rotation.py
    upsampled 2× ("... at 64 px")."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    import rotation
    import ticlust

    if name == "rotated MNIST-test 2000":
        return rotation.rotated_mnist(2000)
    base = name.removesuffix(" at 64 px")
    if base == "nuclei":
        x, y = ticlust.sample(base)
    elif base.startswith("route "):
        x, y = rotation.route_sets(crops=("orient",))[base]
    else:
        x, y = rotation.inner_sets()[base]
    x = torch.from_numpy(np.asarray(x, np.float32))[:, None]
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)[:, 0].numpy(), np.asarray(y)


SETS = ("inner (plain) at 64 px", "inner (route) at 64 px", "nuclei at 64 px", "route outline (orient, normalize) at 64 px",
        "rotated MNIST-test 2000")


def child(set_name: str, method: str, seed: int) -> None:
    """Fit one set in this process (the tree on PYTHONPATH) and print one JSON row."""
    import time

    import numpy as np
    import torch
    import ticlust
    from ticlust.metrics import evaluate

    torch.set_num_threads(2)
    x, y = load_set(set_name)
    params = {}
    if set_name.startswith("route "):
        from ticlust.api import object_params
        params = object_params(method, {})
    start, cpu = time.perf_counter(), time.process_time()
    r = ticlust.fit(x, method, k=int(len(np.unique(y))), device="cpu", seed=seed, progress=False, **params)
    scores = evaluate(y, r.labels)
    print(json.dumps({"set": set_name, "size": int(np.asarray(x).shape[1]), "n": int(len(y)), "method": method,
                      "seed": seed, "acc": float(scores["acc"]), "nmi": float(scores["nmi"]),
                      "wall_s": round(time.perf_counter() - start, 2), "cpu_s": round(time.process_time() - cpu, 2),
                      "load": load_average()}))


def table(rows: list[dict]) -> str:
    by = {}
    for r in rows:
        by.setdefault((r["set"], r["method"], r["seed"]), {})[r["tree"]] = r
    lines = ["| set | px | method | seed | ACC before | ACC after | change | NMI before | NMI after | CPU s before | CPU s after |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (s, m, seed), pair in by.items():
        if len(pair) < 2:
            continue
        b, a = pair["base"], pair["this"]
        lines.append(f"| {s} | {a['size']} | {m} | {seed} | {b['acc']:.3f} | {a['acc']:.3f} | {a['acc'] - b['acc']:+.3f} | "
                     f"{b['nmi']:.3f} | {a['nmi']:.3f} | {b['cpu_s']} | {a['cpu_s']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="the tree before (its src/ is imported by the base runs)")
    ap.add_argument("--this", default=str(HERE.parent), help="the tree after (default: this checkout)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--sets", nargs="+", help="set names (default: every set listed in the module doc)")
    ap.add_argument("--child", nargs=3, metavar=("SET", "METHOD", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]))
    if not args.base:
        ap.error("--base is required")
    trees = [("base", Path(args.base)), ("this", Path(args.this))]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    log = RESULTS / "rigid_pyramid.jsonl"
    turn = 0
    for set_name in args.sets or SETS:
        for method in args.methods:
            for seed in args.seeds:
                for tree, path in in_turn(trees, turn):
                    row = {**child_json(path, [__file__, "--child", set_name, method, str(seed)], env), "tree": tree}
                    print(json.dumps(row), flush=True)
                    with open(log, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                turn += 1
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    (RESULTS / "rigid_pyramid.md").write_text(
        "# Rigid search: coarse to fine against the exhaustive search (paired, same seeds)\n\n"
        "`python benchmarks/rigid_pyramid.py --base BASE`: each fit a child process of its tree, 2 threads, CPU, "
        "the trees in turn. ACC (Hungarian) and NMI; CPU s of the fit (user + sys, both threads).\n\n" + table(rows))


if __name__ == "__main__":
    main()
