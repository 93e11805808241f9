"""PSSC stage by stage on a labelled set (issue 52 item 3: where the scattering → PCA/POC → U-SPEC chain loses the
classes): what each stage keeps, measured with the true labels, one seed.

  1. scattering: each order's share of a channel's energy, raw and after path normalisation (authors' max norm);
     NMI of k-means (sklearn, 4 starts) on the raw and the normalised features;
  2. PCA: the leading directions' share of variance, the classes' share of their variance (eta², between-class /
     total) and their correlation with each channel's total intensity; NMI of k-means before and after POC;
  3. U-SPEC: representatives standing for one item only, the K leading transfer-cut eigenvalues (near 1: pieces hanging
     off the graph), cluster sizes and scores with one kernel width (the paper's) and each item's own (ours);
  4. the pipeline's two contrast devices switched on and off (path_norm × poc) with each width: NMI / largest cluster.

    PYTHONPATH=src python benchmarks/pssc_stages.py --dataset ifc [--subset 1500] [--out benchmarks/results/pssc_stages.md]

Datasets: those of benchmarks/real_cells.py (the same seeded subsets), and mnist-2000 (a seeded 2,000 of MNIST-test).
The Markdown is appended to --out under a heading naming the set, the commit and the load.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import data_dir, load_average  # noqa: E402
from real_cells import DATASETS, commit, load_set  # noqa: E402


def load(name: str, subset: int | None):
    if name == "mnist-2000":
        d = np.load(data_dir() / "mnist.npz")
        keep = np.sort(np.random.default_rng(0).choice(10000, 2000, replace=False))
        return d["x_test"][keep], d["y_test"][keep].astype(np.int64), 10
    cells = load_set(name, subset if subset is not None else DATASETS[name].subset, data_dir())
    return cells.images, cells.labels, cells.n_clusters


def eta2(v: np.ndarray, y: np.ndarray) -> float:
    """Share of v's variance between the classes of y."""
    total = ((v - v.mean()) ** 2).sum()
    return float(sum((y == c).sum() * (v[y == c].mean() - v.mean()) ** 2 for c in np.unique(y)) / max(total, 1e-30))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="ifc")
    ap.add_argument("--subset", type=int, default=None)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "pssc_stages.md"))
    args = ap.parse_args()
    import torch
    from sklearn.cluster import KMeans

    from ticlust.core.stack import Stack
    from ticlust.events import drain
    from ticlust.features.scattering_features import Scatterer, path_scales, scattering_features
    from ticlust.kernels.pca import pca_poc_steps
    from ticlust.kernels.pssc import PSSCConfig, uspec_steps
    from ticlust.kernels.spectral import kmeans_restarts
    from ticlust.metrics import evaluate

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    load_before = load_average()
    x, y, k = load(args.dataset, args.subset)
    x = x.astype(np.float32)
    stack, cfg, cpu = Stack(x, float(x.min()), float(x.max())), PSSCConfig(k=k), torch.device("cpu")
    raw = drain(scattering_features(stack, cfg, cpu, {}))
    op = Scatterer(stack.item_shape, cfg, cpu)
    groups, spatial, paths = op.channels * op.paths, op.spatial, op.paths
    order = np.array([0] + [1] * (cfg.scales * cfg.angles) + [2] * (paths - 1 - cfg.scales * cfg.angles))
    lines = [f"## {args.dataset}: {len(x)} items {tuple(x.shape[1:])}, K = {k}, {raw.shape[1]} scattering features",
             "", f"Commit {commit()}, seed 0, load (filled in at the end).", ""]
    say = lines.append

    def km(f) -> dict:
        lab = KMeans(k, n_init=4, random_state=0).fit_predict(f)
        return evaluate(y, lab)

    norms = np.sqrt((raw.reshape(len(raw), groups, spatial).astype(np.float64) ** 2).sum(-1))
    scales = path_scales(raw, groups, spatial)
    normed = (raw.reshape(len(raw), groups, spatial) / scales[None, :, None]).reshape(len(raw), -1)
    say("**1. Scattering.** Each order's share of the channel's energy (mean over items), raw → path-normalised:")
    say("")
    for c in range(op.channels):
        cols = slice(c * paths, (c + 1) * paths)
        shares = []
        for n in (norms[:, cols], norms[:, cols] / scales[cols]):
            e = (n ** 2).mean(0)
            shares.append([e[order == o].sum() / e.sum() for o in range(3)])
        say(f"- channel {c}: " + ", ".join(f"order {o} {shares[0][o]:.3f} → {shares[1][o]:.3f}" for o in range(3)))
    say("")
    say(f"k-means on the raw features NMI {km(raw)['nmi']:.3f}; on the path-normalised ones {km(normed)['nmi']:.3f}.")
    say("")
    say("**2. PCA.** The leading directions (variance share; classes' share eta²; correlation with each channel's total):")
    say("")
    say("| features | PC | variance | eta² | corr. with channel totals | k-means NMI, poc = 0 / 2 |")
    say("|---|---|---|---|---|---|")
    totals = x.reshape(len(x), -1, op.channels).sum(1)
    spaces = {}
    for tag, f in (("raw", raw), ("path-normalised", normed)):
        z, _, _, ev = drain(pca_poc_steps(np.array(f), cfg.pca_dim, 0, "randomized", cpu, np.random.default_rng(0)))
        zn, ev = z.numpy(), ev.double().numpy()
        spaces[tag] = z
        nmis = f"{km(zn)['nmi']:.3f} / {km(zn[:, 2:])['nmi']:.3f}"
        for i in range(3):
            corr = [np.corrcoef(zn[:, i], totals[:, c])[0, 1] for c in range(op.channels)]
            say(f"| {tag} | {i + 1} | {ev[i] / ev.sum():.3f} | {eta2(zn[:, i], y):.2f} | "
                f"{', '.join(f'{r:+.2f}' for r in corr)} | {nmis if i == 0 else ''} |")
    say("")
    say("**3–4. U-SPEC** on the PCA space (POC = dropping its leading columns), each kernel width:")
    say("")
    say("| path_norm | poc | kernel_width | reps of one item | K-th eigenvalue | NMI | ARI | largest cluster |")
    say("|---|---|---|---|---|---|---|---|")
    for tag, norm in (("raw", False), ("path-normalised", True)):
        for poc in (0, 2):
            z = spaces[tag][:, poc:]
            for width in ("global", "local"):
                c2 = dataclasses.replace(cfg, kernel_width=width)
                space, fitted, extras, params = drain(uspec_steps(z, c2, np.random.default_rng(0), 0, {}))
                lab = drain(kmeans_restarts(space, k, cfg.restarts, cfg.kmeans_iter, np.random.default_rng(0)))[1].numpy()
                own = np.bincount(params["nearest_representatives"][:, 0], minlength=len(fitted["representatives"]))
                e, sizes = evaluate(y, lab), np.bincount(lab, minlength=k)
                say(f"| {norm} | {poc} | {width} | {(own == 1).sum()} of {len(own)} | {extras['transfer_eigenvalues'][-1]:.4f} | "
                    f"{e['nmi']:.3f} | {e['ari']:.3f} | {sizes.max()} of {len(lab)} |")
    lines[2] = f"Commit {commit()}, seed 0, load averages {load_before} → {load_average()}."
    text = "\n".join(lines) + "\n\n"
    print(text)
    out = Path(args.out)
    if not out.exists():
        out.write_text("# PSSC stage by stage on labelled sets (benchmarks/pssc_stages.py)\n\n" + __doc__.split("\n\n")[0]
                       + f"\n\nMachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; accuracy only.\n\n")
    with open(out, "a") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
