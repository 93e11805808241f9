"""CellProfiler's three real Drosophila sites from raw TIFFs (no masks) to a predicted store and CSV, through the
ticlust dock in a real napari window as a user drives it (issue 53's "CLI and dock, ≤ 60 s"): Extract with segment
nuclei (diameter 20) and the channel files' suffixes D,F,R, Fit kmeans (K = 3) on every object, Predict, Export the
CSV. Wall seconds per step and end to end (the dock's own waits included), the nuclei kept and listed, the load.

    xvfb-run -a env PYTHONPATH=src python benchmarks/raw_fields_dock.py [--data-dir ../shared/datasets]

Appends a row to benchmarks/results/raw_fields_dock.md.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _data import data_dir

HERE = Path(__file__).parent
OUT = HERE / "results" / "raw_fields_dock.md"


def wait_until_idle(app, dock, timeout: float = 600.0) -> None:
    """Let Qt run until the dock has no job, read or drawing left."""
    end = time.monotonic() + timeout
    while dock.busy:
        app.processEvents()
        time.sleep(0.01)
        if time.monotonic() > end:
            raise SystemExit("the dock did not finish within the timeout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="the folder holding real_fields/ (default: shared/datasets beside the repo)")
    args = parser.parse_args()
    folder = data_dir(args.data_dir) / "real_fields" / "example_fly"

    import napari
    from qtpy.QtWidgets import QApplication

    from ticlust._napari.dock import TiclustDock

    load_before = os.getloadavg()
    viewer = napari.Viewer(show=False)
    app = QApplication.instance()
    _, dock = viewer.window.add_plugin_dock_widget("napari-ticlust")
    assert isinstance(dock, TiclustDock)
    while not dock.ready:
        app.processEvents()
        time.sleep(0.01)
    dock.use(dock.plate)
    wait_until_idle(app, dock)
    steps = {}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        extract = dock.plate.extract
        extract.source.value, extract.target.value = str(folder), str(Path(tmp) / "fly.zarr")
        extract.diameter.value, extract.suffixes.value, extract.channels.value = 20, "D,F,R", "D,F,R"
        extract.extract_button.native.click()
        wait_until_idle(app, dock)
        steps["extract + segment"] = time.monotonic() - start
        store = dock.plate.store
        if store is None:
            raise SystemExit(f"extract failed: {dock.status.value}")
        dock.form.method.value, dock.form.k.value, dock.plate.sample.value = "kmeans", 3, 0
        t = time.monotonic()
        dock.run_button.native.click()
        wait_until_idle(app, dock)
        steps["fit"] = time.monotonic() - t
        t = time.monotonic()
        dock.plate.predict_run.button.native.click()
        wait_until_idle(app, dock)
        steps["predict"] = time.monotonic() - t
        said = dock.status.value
        total = time.monotonic() - start
        kept, skipped = len(store), len(store.skipped)
    viewer.close()
    load_after = os.getloadavg()
    line = (f"| {time.strftime('%Y-%m-%d')} | {kept} kept, {skipped} listed | "
            + " | ".join(f"{steps[k]:.1f}" for k in ("extract + segment", "fit", "predict"))
            + f" | **{total:.1f}** | {load_before[0]:.2f} → {load_after[0]:.2f} |")
    if not OUT.exists():
        OUT.write_text("# Raw Drosophila fields to a predicted store in the dock (issue 53)\n\n"
                       "Made by `benchmarks/raw_fields_dock.py`: CellProfiler's three ExampleFly sites (1006×1000, three "
                       "TIFFs each, no masks) through the ticlust dock in a real napari window (Xvfb): Extract with "
                       "segment nuclei (diameter 20) and channel files D,F,R, Fit kmeans K = 3 on every object, Predict. "
                       "Wall seconds, the dock's waits included; load = 1-minute load average before → after on the "
                       "shared 2-core machine.\n\n"
                       "| date | nuclei | extract + segment s | fit s | predict s | end to end s | load |\n"
                       "|---|---|---|---|---|---|---|\n")
    with OUT.open("a") as out:
        out.write(line + "\n")
    print(line)
    print(said)


if __name__ == "__main__":
    main()
