"""The dock's steps for the other issues, each with a real napari viewer: Segment nuclei before Run (issue 53 item 1),
the K scan's plot (issue 52), a movie's states on napari's Tracks with a strip per track (issue 54 item 3), and DTI's
schedule in the form (issue 52 item 4)."""
import numpy as np
import pytest

napari = pytest.importorskip("napari")

import ticlust  # noqa: E402

pytestmark = pytest.mark.gui


def test_segment_nuclei_adds_labels_the_user_corrects_before_run(dock, run_to_end, make_napari_viewer, qtbot):
    """A field without masks: Segment nuclei finds them (ticlust.segment_nuclei, in a worker) as a Labels layer picked
    as the field's labels; a nucleus erased there, as napari's eraser does, is not among the objects Run clusters."""
    field = ticlust.nuclei_field(n=14, shape=(192, 192), seed=3)
    viewer = make_napari_viewer()
    viewer.add_image(field.image, name="DNA")
    widget = dock(viewer)
    assert widget.source is widget.field                 # a lone 2-D image: the field source, to segment
    widget.field.diameter.value, widget.field.threshold.value = 15, "li"
    widget.field.segment_run.button.native.click()
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    layer = viewer.layers["DNA nuclei"]
    np.testing.assert_array_equal(layer.data, ticlust.segment_nuclei(field.image, 15, threshold="li"))
    found = int(layer.data.max())
    assert found >= 8 and widget.field.labels.value == "DNA nuclei", widget.status.value
    corrected = layer.data.copy()
    corrected[corrected == 1] = 0                        # the user erases nucleus 1
    layer.data = corrected
    widget.form.method.value, widget.form.k.value = "kmeans", 2
    run_to_end(qtbot, widget)
    labels = set(np.asarray(widget.field.table["label"]).tolist())
    assert 1 not in labels and labels <= set(range(2, found + 1)) and widget.result.n == len(labels) >= found - 3
    # a field layer that cannot be segmented: one sentence, no layer
    viewer.add_image(np.full((64, 64), np.nan, np.float32), name="blank")
    widget.field.pick("blank")
    widget.field.segment_run.button.native.click()
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    assert "blank nuclei" not in viewer.layers and "NaN" in widget.status.value, widget.status.value


def test_three_channel_layers_segmented_and_run_keep_every_layer(dock, run_to_end, make_napari_viewer, qtbot):
    """Issue 53's walk: a field opened as three channel layers and no masks; Segment nuclei on the first picked (the
    nuclear channel), Run on all three; every layer the user had is there, with the labels, objects and clusters."""
    field = ticlust.nuclei_field(n=16, shape=(192, 192), seed=5)
    viewer = make_napari_viewer()
    names = ["DNA", "Actin", "Tubulin"]
    for i, name in enumerate(names):
        viewer.add_image(np.rot90(field.image, i).copy(), name=name)
    widget = dock(viewer)
    widget.field.pick(*names)
    widget.field.diameter.value = 15
    widget.field.segment_run.button.native.click()
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    np.testing.assert_array_equal(viewer.layers["DNA nuclei"].data, ticlust.segment_nuclei(field.image, 15))
    assert widget.field.labels.value == "DNA nuclei", widget.status.value
    widget.form.method.value, widget.form.k.value = "kmeans", 2
    run_to_end(qtbot, widget)
    assert widget.result.config["channels"] == names and widget.result.prototypes.shape[-1] == 3
    assert viewer.layers["DNA objects"].data.shape[1] == 3                 # N×C×H×W crops of the three channels
    for name in names + ["DNA nuclei", "DNA objects", "DNA objects by cluster"]:
        assert name in viewer.layers, (name, [layer.name for layer in viewer.layers])


def test_scan_k_draws_each_criterion_and_use_k_sets_the_form(dock, make_napari_viewer, qtbot):
    from ticlust.datasets.samples import glyphs_sample
    from ticlust.evaluation import scan_k

    images, _ = glyphs_sample(n_per_class=15, size=16, seed=2)
    viewer = make_napari_viewer()
    viewer.add_image(images.astype(np.float32), name="glyphs")
    widget = dock(viewer)
    widget.form.method.value = "kmeans"
    part = widget.choose_k
    part.low.value, part.high.value = 2, 6
    part.run.button.native.click()
    qtbot.waitUntil(lambda: not widget.busy and part.scan is not None, timeout=120_000)
    scan = part.scan
    again = scan_k(images.astype(np.float32), "kmeans", range(2, 7), device=widget.device_value(), seed=0,
                   progress=False)
    assert scan.ks == [2, 3, 4, 5, 6] and scan.suggested == again.suggested
    np.testing.assert_allclose(scan.scores["knee"], again.scores["knee"], atol=1e-6)
    x, y = part.plot.lines["knee"].getData()
    assert list(x) == scan.ks and np.nanmax(y) == pytest.approx(1.0)
    assert part.plot.mark.value() == scan.suggested and f"K = {scan.suggested}" in widget.status.value
    widget.form.k.value = 9
    part.use.native.click()
    assert widget.form.k.value == scan.suggested and widget.result is None      # the scan fits nothing of its own
    # a plate's store is not scanned here: one sentence, no job
    widget.use(widget.plate)
    assert part.start() is None and "ticlust.scan_k" in widget.status.value


def test_a_movie_has_its_tracks_coloured_by_state_and_a_strip_per_track(dock, run_to_end, make_napari_viewer, qtbot):
    """A T×Y×X movie and labels whose ids are tracks: after Run a Tracks layer coloured by state (the smoothed states
    of ticlust.track_states for the dock's result) and a strip of states per track; a click on the strip shows that
    track's object at that frame."""
    from ticlust.objects.states import track_states
    from ticlust.objects.tracks import object_tracks

    movie = ticlust.time_lapse(frames=16, cells=6, shape=(96, 96), seed=1)
    viewer = make_napari_viewer()
    viewer.add_image(movie.movie, name="H2B")
    viewer.add_labels(movie.labels, name="tracked")
    widget = dock(viewer)
    widget.use(widget.field)
    widget.field.pick("H2B", labels="tracked")
    widget.form.method.value, widget.form.k.value = "kmeans", 3
    run_to_end(qtbot, widget)
    tracks = viewer.layers["H2B tracks"]
    assert isinstance(tracks, napari.layers.Tracks) and tracks.color_by == "state"
    expected = track_states(widget.result, object_tracks(widget.field.table, labels=movie.labels))
    data, properties, _ = expected.napari_tracks(widget.field.table)
    np.testing.assert_allclose(tracks.data, data)
    np.testing.assert_array_equal(tracks.properties["state"], properties["state"])
    strip = widget.field.movie.strip
    ids, states = expected.strip()
    assert strip.image.image.shape[:2] == states.shape and list(strip.ids) == ids.tolist()
    row = next(r for r in range(len(ids)) if (states[r] >= 0).sum() >= 2)
    frame = int(np.flatnonzero(states[row] >= 0)[1])
    strip.clicked(int(ids[row]), frame)
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    objects = expected.objects
    item = int(objects[(objects.track == ids[row]) & (objects.frame == frame)]["item"].iloc[0])
    assert viewer.dims.current_step[0] == item and f"object {item}" in widget.status.value
    # the raw clusters instead of the smoothed states: the layer is drawn again
    widget.field.movie.order.value = "none"
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    raw = viewer.layers["H2B tracks"].properties
    np.testing.assert_array_equal(raw["state"], widget.result.labels[raw["item"]])


def test_dti_offers_its_schedule_where_its_parameters_are_set(dock, make_napari_viewer):
    viewer = make_napari_viewer()
    viewer.add_image(np.zeros((8, 16, 16), np.float32), name="s")
    widget = dock(viewer)
    widget.form.method.value = "dti-kmeans"
    schedule = widget.form.param("schedule")
    assert list(schedule.choices) == ["paper", "quick"] and schedule.value == "paper"
    assert "schedule" in [w.name for w in widget.form.params]          # up front, with the essentials
    schedule.value = "quick"
    assert widget.form.values()["schedule"] == "quick"
