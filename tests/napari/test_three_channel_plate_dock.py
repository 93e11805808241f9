"""The dock on a three-channel plate (issue 55): during Fit every live update of the prototypes raised in
napari (``layers.show_prototypes`` → ``set_image``: "could not broadcast input array from shape (2,) into shape
(1,)", then "units=(pixel,) must have length ndim=2" on each later draw), nothing was drawn and the user was told
nothing. A store of three-channel crops gets its layers made ahead as RGB layers, while the inspector's blank object
layer was grey, so the prototypes came grey into an RGB layer (its columns read as colours: a 1-D layer). The
five-channel plate of the other dock tests never shows it: five channels are never RGB.

The default test is a small generated plate of three channels (one TIFF per channel, a LoadData CSV); the slow one is
CellProfiler's ExampleFly (three real sites, three channels, segmented here by an Otsu threshold)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

napari = pytest.importorskip("napari")

import ticlust  # noqa: E402
from ticlust._napari import layers as L  # noqa: E402

pytestmark = pytest.mark.gui



def loaddata(rows, path: Path) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def generated_plate(root: Path) -> Path:
    """Two generated fields of three channels, one TIFF per channel, listed in a LoadData CSV (OrigBlue = DNA,
    OrigGreen, OrigRed) with ObjectsFileName_Nuclei masks."""
    from ticlust.datasets.nuclei import nuclei_field

    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for site in range(2):
        field = nuclei_field(n=10, shape=(96, 96), seed=site)
        rng = np.random.default_rng(site)
        planes = {"OrigBlue": field.image, "OrigGreen": (field.image // 2 + 9).astype(np.uint16),
                  "OrigRed": rng.integers(0, 500, field.image.shape).astype(np.uint16)}
        for channel, plane in planes.items():
            tifffile.imwrite(root / f"s{site}_{channel}.tif", plane)
        tifffile.imwrite(root / f"s{site}_nuclei.tif", field.labels)
        rows.append({"Metadata_Site": site, **{f"FileName_{c}": f"s{site}_{c}.tif" for c in planes},
                     **{f"PathName_{c}": str(root) for c in planes},
                     "ObjectsFileName_Nuclei": f"s{site}_nuclei.tif", "ObjectsPathName_Nuclei": str(root)})
    return loaddata(rows, root / "load_data.csv")


def fly_plate(fly: Path, root: Path) -> Path:
    """ExampleFly's three sites, nuclei segmented on the DNA channel (smoothed, Otsu threshold, labelled; clumps
    wider than 60 pixels and specks under 40 dropped), as CellProfiler's LoadData CSV lists them."""
    from skimage.filters import gaussian, threshold_otsu
    from skimage.measure import label, regionprops

    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for site in ("002", "076", "218"):
        dna = tifffile.imread(fly / f"01_POS{site}_D.TIF").astype(float)
        smooth = gaussian(dna, 2)
        labels = label(smooth > threshold_otsu(smooth))
        for region in regionprops(labels):
            y0, x0, y1, x1 = region.bbox
            if max(y1 - y0, x1 - x0) > 60 or region.area < 40:
                labels[labels == region.label] = 0
        tifffile.imwrite(root / f"POS{site}_nuclei.tif", label(labels > 0).astype(np.uint16))
        channels = {"OrigBlue": "D", "OrigGreen": "F", "OrigRed": "R"}
        rows.append({"Metadata_Plate": "01", "Metadata_Site": site,
                     **{f"FileName_{c}": f"01_POS{site}_{ch}.TIF" for c, ch in channels.items()},
                     **{f"PathName_{c}": str(fly) for c in channels},
                     "ObjectsFileName_Nuclei": f"POS{site}_nuclei.tif", "ObjectsPathName_Nuclei": str(root)})
    return loaddata(rows, root / "load_data.csv")


def fit_live(store_path, plate_dock, qtbot, monkeypatch, sample: int):
    """Fit kmeans in the dock with every live update drawn; an exception in napari fails the test (pytest-qt)."""
    monkeypatch.setattr("ticlust._napari.dock.LIVE_UPDATE_S", 0.0)
    drawn = []
    show = L.show_prototypes
    monkeypatch.setattr(L, "show_prototypes", lambda *a, **k: (drawn.append(np.shape(a[2])), show(*a, **k))[1])
    viewer, panel = plate_dock(store_path)
    panel.form.method.value = "kmeans"
    panel.form.k.value, panel.plate.sample.value, panel.seed.value, panel.device.value = 3, sample, 0, "cpu"
    panel.run_button.native.click()
    qtbot.waitUntil(lambda: not panel.busy, timeout=300_000)
    assert panel.result is not None and "Fitted kmeans" in panel.status.value, panel.status.value
    assert len(drawn) >= 2                           # live updates, then the result's own
    layer = viewer.layers[L.layer_names(panel.plate.names()["object"])["prototypes"]]
    assert layer.visible and layer.rgb and layer.ndim == 2 and layer.data.shape[-1] == 3
    assert np.isfinite(np.asarray(layer.data)).all()
    return viewer, panel


def test_the_prototypes_of_a_three_channel_plate_are_drawn_live_while_fitting(tmp_path, plate_dock, qtbot,
                                                                              monkeypatch):
    store = ticlust.extract(generated_plate(tmp_path / "plate"), tmp_path / "s.zarr", progress=False)
    assert store.channels == 3
    fit_live(store.path, plate_dock, qtbot, monkeypatch, sample=0)


def test_an_image_layer_of_another_kind_is_made_anew_not_broken(make_napari_viewer):
    """``set_image`` with a grey picture into an RGB layer (and back) gives a working layer of the new kind."""
    viewer = make_napari_viewer()
    L.set_image(viewer, "p", np.zeros((1, 1, 3), np.float32), rgb=True)
    layer = L.set_image(viewer, "p", np.ones((20, 30), np.float32), scale=(2.0, 2.0), colormap="gray")
    assert not layer.rgb and layer.ndim == 2 and layer.data.shape == (20, 30) and tuple(layer.scale) == (2.0, 2.0)
    layer = L.set_image(viewer, "p", np.ones((20, 30, 3), np.float32), scale=(2.0, 2.0), rgb=True)
    assert layer.rgb and layer.ndim == 2
    same = L.set_image(viewer, "p", np.zeros((10, 10, 3), np.float32), rgb=True)
    assert same is layer                                # a picture of the same kind: the layer is reused


@pytest.mark.slow
def test_the_fly_plate_fits_in_the_dock_with_live_prototypes(tmp_path, plate_dock, qtbot, monkeypatch, shared_datasets):
    fly = shared_datasets("real_fields/example_fly")       # skipped where ../shared is not there
    store = ticlust.extract(fly_plate(fly, tmp_path / "fly"), tmp_path / "fly.zarr", progress=False)
    assert store.channels == 3 and len(store) > 500
    fit_live(store.path, plate_dock, qtbot, monkeypatch, sample=300)
