"""One selector grammar for curation (issue 32): item numbers, text ranges ("3, 8-12") or a boolean mask,
read by ``curation.item_index`` for the API, the widget's text box and ``ticlust curate``."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ticlust
from ticlust import curation
from ticlust.curation import item_index
from ticlust.errors import InputError
from ticlust.result import OUTLIER, load_result


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def blobs_fit(corner_squares):
    """80 images of four well-separated groups (a bright corner square) and a K = 4 kmeans fit."""
    x, _ = corner_squares()
    return x, ticlust.fit(x, method="kmeans", k=4, seed=0, device="cpu", progress=False)


# ---- the grammar -----------------------------------------------------------------------------------
@pytest.mark.parametrize("selection, expected", [
    ("3, 8-12", [3, 8, 9, 10, 11, 12]),
    (" 3 ,8 - 12 , ", [3, 8, 9, 10, 11, 12]),     # spaces and a trailing comma tolerated
    ("12; 3", [3, 12]),
    ("4, 4, 2-5", [2, 3, 4, 5]),                  # duplicates and overlaps: counted once
    (7, [7]),
    (np.int32(7), [7]),
    ([5, 1, 5], [1, 5]),
    ((0, 19), [0, 19]),
    ({2, 9}, [2, 9]),
    (range(3, 6), [3, 4, 5]),
    (np.array([6, 2], np.uint8), [2, 6]),
    ([2.0, 3.0], [2, 3]),                         # whole numbers stored as floats are whole numbers
    (np.arange(20) % 5 == 0, [0, 5, 10, 15]),
    ([i == 4 for i in range(20)], [4]),
])
def test_selectors_name_the_intended_items(selection, expected):
    index = item_index(selection, 20)
    assert index.dtype == np.int64 and index.tolist() == expected


@pytest.mark.parametrize("selection, message", [
    ("", "No items to move were given"),
    (" , ;", "No items to move were given"),
    ([], "No items to move were selected"),
    (np.zeros(20, bool), "No items to move were selected"),
    ("3.5", r"'3.5' is not an item number or range"),
    ([1.5], "Item 1.5 is not a whole number"),
    (np.array([2.9]), "Item 2.9 is not a whole number"),        # never truncated to 2
    ([np.nan], "Item nan is not a whole number"),
    ([20], "Item 20 is out of range: the items to move are numbered from 0 to 19"),
    ("3, 18-25", "Item 25 is out of range"),
    ("0-99999999999999999999999", "is out of range"),          # refused before anything is expanded
    ([1e300], r"Item 1e\+300 is out of range"),
    ([-1], "Item -1 is negative"),
    ("-1", r"'-1' is not an item number or range \(items are numbered from 0\)"),
    ("12-8", "The range '12-8' runs backwards: write it from the smaller number, e.g. 8-12"),
    (np.ones(19, bool), "The boolean mask of items to move has 19 values but there are 20 items"),
    ([True, 3], "mix True/False with numbers"),
    (True, "True alone does not name items"),
    ([[1, 2]], r"must be a flat list, not an array of shape \(1, 2\)"),
    ("3 4", r"'3 4' is not an item number or range"),
    ("x", "'x' is not an item number or range"),
    ("²", "is not an item number or range"),                   # a digit to str.isdigit, not to int()
    (None, "cannot be read from None"),
    ([1, None], "cannot be read from"),
    ({"a": 1}, "cannot be read from"),
    (["3"], "cannot be read from"),
    (b"3", "cannot be read from"),
    ([[1], [2, 3]], "cannot be read from"),                    # ragged
    (3 + 0j, "cannot be read from"),
])
def test_anything_else_is_refused_by_name(selection, message):
    with pytest.raises(InputError, match=message):
        item_index(selection, 20, "move")


def test_tensors_are_read_like_arrays():
    torch = pytest.importorskip("torch")
    assert item_index(torch.tensor([4, 1]), 10).tolist() == [1, 4]
    assert item_index(torch.arange(10) > 7, 10).tolist() == [8, 9]
    with pytest.raises(InputError, match="cannot be read from"):
        item_index(torch.ones(2, dtype=torch.bfloat16), 10)


# ---- the API: move and mark_outliers take the grammar ---------------------------------------------
def test_move_with_a_mask_moves_exactly_the_masks_items(blobs_fit):
    """The bug: a boolean mask was cast to 0/1 and moved items 0 and 1 instead."""
    _, res = blobs_fit
    mask = np.zeros(res.n, bool)
    mask[[5, 40, 77]] = True
    target = int((res.labels[40] + 1) % 4)
    before = res.labels.copy()
    moved = curation.move(res, mask, target)
    changed = np.flatnonzero(moved.pinned >= 0)
    assert changed.tolist() == [5, 40, 77] and np.all(moved.labels[changed] == target)
    assert np.array_equal(moved.labels[~mask], before[~mask])
    assert moved.edits[-1] == {"op": "move", "items": [5, 40, 77], "cluster": target}
    assert np.array_equal(res.labels, before) and res.pinned is None          # the input result is untouched
    outliers = curation.mark_outliers(res, mask)
    assert np.flatnonzero(outliers.pinned == OUTLIER).tolist() == [5, 40, 77]


def test_text_lists_and_masks_edit_alike(blobs_fit):
    _, res = blobs_fit
    as_text = curation.move(res, "3, 8-12", 2)
    mask = np.isin(np.arange(res.n), [3, 8, 9, 10, 11, 12])
    for same in ([3, 8, 9, 10, 11, 12], np.array([12, 3, 8, 9, 10, 11, 3]), mask):
        other = curation.move(res, same, 2)
        assert np.array_equal(other.labels, as_text.labels) and np.array_equal(other.pinned, as_text.pinned)
    with pytest.raises(InputError, match="Item 2.5 is not a whole number"):
        curation.move(res, [2.5], 1)
    with pytest.raises(InputError, match="The boolean mask of items to mark as outliers has 79 values"):
        curation.mark_outliers(res, mask[:-1])


# ---- property: any N, any selector ------------------------------------------------------------------
def _ranges_text(draw, n: int) -> tuple[str, set[int]]:
    parts, wanted = [], set()
    for _ in range(draw(st.integers(1, 5))):
        first = draw(st.integers(0, n - 1))
        last = draw(st.integers(first, min(n - 1, first + 30)))
        parts.append(f"{first}" if first == last and draw(st.booleans()) else
                     f"{first}{' ' * draw(st.integers(0, 2))}-{' ' * draw(st.integers(0, 2))}{last}")
        wanted.update(range(first, last + 1))
    separators = [draw(st.sampled_from([",", ", ", " ,", ";", " ; "])) for _ in parts]
    return "".join(p + s for p, s in zip(parts, separators))[:-len(separators[-1])], wanted


@st.composite
def good_selection(draw):
    """(N, a selector, the set of items it means): a list, an integer array, a mask or text ranges."""
    n = draw(st.integers(1, 300))
    kind = draw(st.sampled_from(["list", "array", "mask", "text"]))
    if kind == "text":
        text, wanted = _ranges_text(draw, n)
        return n, text, wanted
    if kind == "mask":
        mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        mask[draw(st.integers(0, n - 1))] = True
        return n, mask, set(np.flatnonzero(mask).tolist())
    items = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=40))
    dtype = draw(st.sampled_from([np.int64, np.int32, np.uint16, np.int8 if n <= 127 else np.int16]))
    return n, (items if kind == "list" else np.array(items, dtype)), set(items)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(good_selection())
def test_property_parsed_index_is_the_intended_set(case):
    n, selection, wanted = case
    index = item_index(selection, n)
    assert index.tolist() == sorted(wanted)


@st.composite
def odd_selection(draw):
    """(N, anything): well-formed or not, of any type a caller might pass."""
    n = draw(st.integers(1, 50))
    selection = draw(st.one_of(
        st.text(alphabet=st.sampled_from(list("0123456789 ,;-.+x²٣e\n")), max_size=20),
        st.text(max_size=10),
        st.lists(st.integers(-2**70, 2**70), max_size=5),
        st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=5),
        st.lists(st.booleans(), max_size=60),
        st.lists(st.one_of(st.integers(-3, 60), st.booleans(), st.none(), st.text(max_size=2)), max_size=5),
        st.integers(-2**70, 2**70), st.floats(), st.booleans(), st.none(), st.binary(max_size=4),
        st.complex_numbers(max_magnitude=100),
        st.builds(np.array, st.lists(st.integers(-5, 60), max_size=5)).map(lambda a: a.reshape(1, -1)),
        st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    ))
    return n, selection


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd_selection())
def test_property_anything_malformed_raises_input_error_and_nothing_else(case):
    n, selection = case
    try:
        index = item_index(selection, n)
    except InputError:
        return
    assert index.dtype == np.int64 and index.ndim == 1 and index.size > 0
    assert np.all(np.diff(index) > 0) and index[0] >= 0 and index[-1] < n


# ---- the CLI: ticlust curate ----------------------------------------------------------------------
@pytest.fixture
def saved(blobs_fit, tmp_path):
    _, res = blobs_fit
    return res, res.save(tmp_path / "r.npz")


def test_cli_curate_moves_marks_and_merges_with_the_same_grammar(saved, tmp_path, capsys):
    from ticlust.cli import main

    res, path = saved
    before = path.read_bytes()
    target = int((res.labels[3] + 1) % 4)
    out = tmp_path / "moved.npz"
    assert main(["curate", str(path), "--move", "3, 8-12", "--to", str(target), "-o", str(out)]) == 0
    moved = load_result(out)
    assert np.flatnonzero(moved.pinned >= 0).tolist() == [3, 8, 9, 10, 11, 12]
    assert np.all(moved.labels[[3, 8, 9, 10, 11, 12]] == target)
    assert moved.edits[-1] == curation.move(res, "3, 8-12", target).edits[-1]
    assert f"moved 6 items to cluster {target}" in capsys.readouterr().out
    # one edit per call, chained through files; the CSV flags the outliers
    marked, csv = tmp_path / "marked.npz", tmp_path / "marked.csv"
    assert main(["curate", str(out), "--outliers", "0-1, 79", "-o", str(marked), "--csv", str(csv)]) == 0
    assert np.flatnonzero(load_result(marked).pinned == OUTLIER).tolist() == [0, 1, 79]
    rows = csv.read_text().splitlines()
    assert len(rows) == res.n + 1 and "outlier" in rows[0].split(",")
    merged = tmp_path / "merged.npz"
    assert main(["curate", str(marked), "--merge", "0", "3", "-o", str(merged)]) == 0
    assert load_result(merged).k == 3 and load_result(merged).edits[-1] == {"op": "merge", "a": 0, "b": 3}
    assert path.read_bytes() == before                       # the input file is never touched


@pytest.mark.parametrize("args, message", [
    (["--move", "12-8", "--to", "1"], "runs backwards"),
    (["--move", "2.5", "--to", "1"], "'2.5' is not an item number or range"),
    (["--move", "-1", "--to", "1"], "items are numbered from 0"),
    (["--move", "80", "--to", "1"], "Item 80 is out of range"),
    (["--move", "", "--to", "1"], "No items to move were given"),
    (["--move", "3"], "--move needs --to CLUSTER"),
    (["--outliers", "3", "--to", "1"], "--to only applies with --move"),
    (["--move", "3", "--to", "9"], "cluster = 9 is not a cluster of this result"),
    (["--merge", "1", "1"], "Cannot merge cluster 1 with itself"),
])
def test_cli_curate_refuses_with_one_sentence_and_writes_nothing(saved, tmp_path, capsys, args, message):
    from ticlust.cli import main

    _, path = saved
    out = tmp_path / "out.npz"
    assert main(["curate", str(path), *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ticlust: error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_cli_curate_never_writes_over_its_input(saved, tmp_path, capsys):
    from ticlust.cli import main

    _, path = saved
    before = path.read_bytes()
    assert main(["curate", str(path), "--move", "3", "--to", "1", "-o", str(path)]) == 2
    assert main(["curate", str(path), "--move", "3", "--to", "1", "-o", str(path)[:-4]]) == 2     # .npz appended
    assert main(["curate", str(path), "--outliers", "3", "-o", str(tmp_path / "a.npz"), "--csv", str(path)]) == 2
    assert "is the input RESULT" in capsys.readouterr().err
    assert path.read_bytes() == before
    with pytest.raises(SystemExit):                          # exactly one edit per call (argparse says so)
        main(["curate", str(path), "--move", "3", "--to", "1", "--merge", "0", "1", "-o", str(tmp_path / "b.npz")])


# ---- the dock's text box --------------------------------------------------------------------------
@pytest.mark.gui
def test_the_docks_text_box_reads_the_same_grammar(dock, run_to_end, make_napari_viewer, qtbot):
    """Typed into the items box, the Move / Mark as outlier buttons pressed: the same items as the API;
    a malformed text is one notification in the status line and changes nothing."""
    from ticlust._napari import samples

    viewer = make_napari_viewer()
    viewer.add_image(samples.digits()[0][0][:60], name="digits")
    widget = dock(viewer)
    widget.form.k.value, widget.inspector.enabled.value = 4, False     # the inspector is not what this test is about
    run_to_end(qtbot, widget)
    first, panel = widget.result, widget.curate
    panel.to.value = 2
    qtbot.keyClicks(panel.items.native, " 3 ,8 - 12, 9")
    panel.move_button.native.click()
    assert np.flatnonzero(widget.result.pinned >= 0).tolist() == [3, 8, 9, 10, 11, 12]
    assert np.array_equal(widget.result.labels, curation.move(first, [3, 8, 9, 10, 11, 12], 2).labels)
    assert "Moved 6 items to cluster 2" in widget.status.value
    moved, depth = widget.result, len(widget.undo_stack)
    for text, message in (("12-8", "The range '12-8' runs backwards"), ("2.5", "'2.5' is not an item number"),
                          ("-1", "items are numbered from 0"), ("3, 60", "Item 60 is out of range"),
                          (" , ", "")):
        panel.items.native.clear()
        qtbot.keyClicks(panel.items.native, text)
        panel.outlier_button.native.click()
        if message:
            assert widget.status.value.startswith("Not done: ") and message in widget.status.value
        assert widget.result is moved and len(widget.undo_stack) == depth     # nothing changed
    panel.items.native.clear()
    qtbot.keyClicks(panel.items.native, "0-2; 59")
    panel.outlier_button.native.click()
    assert np.flatnonzero(widget.result.pinned == OUTLIER).tolist() == [0, 1, 2, 59]


# ---- ticlust gui ------------------------------------------------------------------------------------
@pytest.fixture
def gui(qtbot, make_napari_viewer):
    """What `ticlust gui` calls (napari's event loop is not entered): the viewer and its ticlust dock.
    make_napari_viewer is asked for (not used) for its fresh napari app: a viewer built outside it after other
    viewer tests registers napari's plugin commands a second time."""
    from ticlust._napari.dock import TiclustDock
    from ticlust._napari.launcher import gui_viewer

    viewer = gui_viewer()
    try:
        widget = next(w for w in viewer.window.dock_widgets.values() if isinstance(w, TiclustDock))
        qtbot.waitUntil(lambda: widget.ready, timeout=60_000)
        yield viewer, widget
    finally:
        viewer.close()


@pytest.mark.gui
def test_gui_opens_the_nuclei_field_ready_to_run_on_its_objects(gui, qtbot):
    """The nuclei field and its segmentation, the dock set up for the objects route (st-kmeans, K = 3) so that
    Run is the one click left; the digits one click away in File > Open Sample > ticlust."""
    from napari.layers import Image, Labels
    from qtpy.QtWidgets import QMenu

    viewer, widget = gui
    assert [(type(layer), layer.name) for layer in viewer.layers] == [(Image, "nuclei"), (Labels, "nuclei labels")]
    assert (widget.form.method.value, widget.form.k.value) == ("st-kmeans", 3)
    assert widget.source is widget.field and widget.field.labels.value == "nuclei labels"
    assert [layer.name for layer in widget.field.field_layers()] == ["nuclei"]
    assert widget.status.value.startswith("Ready: Run cuts the objects of nuclei labels out of nuclei")
    menu = next(m for m in viewer.window._qt_window.findChildren(QMenu) if m.title() == "ticlust")
    next(a for a in menu.actions() if a.text().startswith("Digits (10 classes")).trigger()
    qtbot.waitUntil(lambda: "digits" in viewer.layers, timeout=20_000)
    assert viewer.layers["digits"].data.shape == (1797, 32, 32)


@pytest.mark.gui
def test_gui_front_door_runs_ai_kmeans_to_done(gui, qtbot):
    """The front door as a user walks it: ai-kmeans picked in the dock's method box (which resets K and the layer
    choices, so they are chosen again), the Run button clicked, and the run reaches Done — the objects cut out,
    every result layer drawn (the field painted by cluster, the inspector), the status line saying Done."""
    from qtpy.QtCore import Qt

    viewer, widget = gui
    combo = widget.form.method.native
    combo.setCurrentIndex(combo.findText("ai-kmeans"))
    assert widget.form.method.value == "ai-kmeans"
    widget.form.k.value = 3
    qtbot.mouseClick(widget.run_button.native, Qt.MouseButton.LeftButton)
    assert widget.job is not None and widget.run_button.text == "Cancel"
    qtbot.waitUntil(lambda: not widget.busy, timeout=120_000)
    assert widget.status.value.startswith("Done: 3 clusters"), widget.status.value
    assert (widget.result.method, widget.result.k, widget.result.n) == ("ai-kmeans", 3, 50)
    for name in ("nuclei objects", "nuclei objects by cluster", "nuclei objects prototypes", "nuclei objects inspector"):
        assert name in viewer.layers, name
    painted = viewer.layers["nuclei objects by cluster"].data
    assert sorted(np.unique(painted).tolist()) == list(range(51))        # every object painted, nothing else
    assert widget.run_button.text == "Run"


@pytest.mark.gui
@pytest.mark.slow
def test_gui_run_as_prepared_finds_the_three_kinds(run_to_end, gui, qtbot):
    """Run pressed as `ticlust gui` leaves it: the 50 inner nuclei, all three kinds found (GUI_RUN's claim)."""

    viewer, widget = gui
    run_to_end(qtbot, widget, timeout=180_000)
    assert viewer.layers["nuclei objects"].data.shape[0] == widget.result.n == 50
    assert "Against the layer's 3 true classes: ACC 1.000" in widget.status.value
