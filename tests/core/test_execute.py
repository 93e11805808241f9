"""The execution seam (execute.py): events reach a plain sink as picklable records, every route runs under
deterministic kernels, the runs' minLoss is unchanged, and the objects route is one function."""
import ast
import pathlib
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import ticlust
from ticlust import curation
from ticlust.cli import fit as cli_fit
from ticlust.api import fit_job
from ticlust.evaluation import select_model
from ticlust.events import Done, Progress, Snapshot
from ticlust.core.execute import Backend, Job, LocalBackend, best_of, execute, stream
from ticlust.methods import base, get_method
from ticlust.methods.base import MAP_STAGE, register, unregister
from ticlust.datasets.samples import glyphs_sample

SRC = pathlib.Path(ticlust.__file__).parent


@pytest.fixture
def watched(toy_method):
    """The toy method registered as "toy-watched", noting whether deterministic kernels are on while it trains and
    refines: the list of (train | refine, on)."""
    seen = []

    class Watched(toy_method):
        name = "toy-watched"

        def train(self, stack, cfg, device, seed):
            seen.append(("train", torch.are_deterministic_algorithms_enabled()))
            return (yield from super().train(stack, cfg, device, seed))

        def refine(self, stack, cfg, start, pinned, device):
            seen.append(("refine", torch.are_deterministic_algorithms_enabled()))
            return (yield from super().refine(stack, cfg, start, pinned, device))

    register(Watched())
    yield seen
    unregister("toy-watched")


def test_events_reach_a_plain_callable_as_picklable_records():
    x, _ = glyphs_sample(n_per_class=6, size=12, seed=0)
    got = []
    result = execute(fit_job(x, "kmeans", k=3, device="cpu", seed=0), got.append)
    assert isinstance(got[-1], Done) and got[-1].result is result and result.config["method"] == "kmeans"
    assert any(isinstance(e, Progress) for e in got) and all(isinstance(e, (Progress, Snapshot, Done)) for e in got)
    back = pickle.loads(pickle.dumps(got))         # plain data: they can cross a process boundary
    assert [type(e) for e in back] == [type(e) for e in got]
    assert np.array_equal(back[-1].result.labels, result.labels)
    assert [(e.step, e.total, e.stage) for e in back if isinstance(e, Progress)] == \
        [(e.step, e.total, e.stage) for e in got if isinstance(e, Progress)]
    # the generator adapter yields exactly what the sink receives; fit returns the same result
    again = list(ticlust.run(x, "kmeans", k=3, device="cpu", seed=0))
    assert [type(e) for e in again] == [type(e) for e in got]
    assert np.array_equal(again[-1].result.labels, ticlust.fit(x, "kmeans", k=3, device="cpu").labels)


def test_fit_refine_and_predict_run_under_deterministic_kernels(dark_and_bright, watched):
    assert not torch.are_deterministic_algorithms_enabled()
    x = dark_and_bright()
    res = ticlust.fit(x, method="toy-watched", device="cpu")
    refined = curation.refine(x, curation.move(res, [0], 2), device="cpu")
    list(curation.refine_events(x, curation.move(res, [1], 0), device="cpu"))
    assert [kind for kind, _ in watched].count("refine") == 2 and all(on for _, on in watched)   # (the toy's refine trains)
    assert refined.device.startswith("cpu") and refined.timing["total_s"] >= 0 and refined.edits[-1]["op"] == "refine"
    assert not torch.are_deterministic_algorithms_enabled()            # restored after each run


def test_determinism_can_be_turned_off(dark_and_bright, watched, monkeypatch):
    monkeypatch.setenv("TICLUST_DETERMINISTIC", "0")
    ticlust.fit(dark_and_bright(), method="toy-watched", device="cpu")
    assert watched == [("train", False)]


def test_model_selection_runs_under_deterministic_kernels(monkeypatch):
    spec = get_method("st-kmeans")
    seen = []
    sweep = spec.sweep

    def watched_sweep(*args, **kwargs):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return (yield from sweep(*args, **kwargs))

    monkeypatch.setattr(spec, "sweep", watched_sweep)
    x, _ = glyphs_sample(n_per_class=6, size=16, seed=1)
    best, table = select_model(x[:12], "st-kmeans", k=2, device="cpu", landmarks=(3,), lrs=(5e-2,),
                               steps=2, affine_steps=1, max_iter=2)
    assert seen == [True] and len(table) == 1 and best.config["select"] and best.device.startswith("cpu")
    assert not torch.are_deterministic_algorithms_enabled()


def test_runs_keep_the_lowest_final_loss_as_before():
    x, _ = glyphs_sample(n_per_class=6, size=12, seed=0)
    singles = [ticlust.fit(x, "kmeans", k=4, device="cpu", seed=s, init="random", max_iter=3) for s in (5, 6, 7)]
    events = list(ticlust.run(x, "kmeans", k=4, device="cpu", seed=5, runs=3, init="random", max_iter=3))
    best = events[-1].result
    losses = [r.final_loss for r in singles]
    assert best.run_losses == losses and best.config["runs"] == 3 and best.config["seed"] == 5
    assert np.array_equal(best.labels, singles[int(np.argmin(losses))].labels)
    fit = [e for e in events if isinstance(e, Progress) and e.stage != MAP_STAGE]
    assert fit[0].stage.startswith("run 1/3: ") and fit[-1].stage.startswith("run 3/3: ")
    steps = [e.step for e in fit]                                            # one overall bar, moving on
    assert steps == sorted(steps) and all(e.step <= e.total for e in fit)
    mapped = [e for e in events if isinstance(e, Progress)][len(fit):]       # then the kept run's object map
    assert mapped and all(e.stage == MAP_STAGE for e in mapped) and mapped[-1].step == mapped[-1].total


def test_best_of_takes_plain_results_and_generators_and_keeps_the_first_of_equals():
    a, b, c = (SimpleNamespace(final_loss=v, name=n) for v, n in ((2.0, "a"), (1.0, "b"), (1.0, "c")))

    def run(result):
        yield Progress(1, 2, result.final_loss, "step")
        return result

    events = best_of([lambda: a, lambda: run(b), lambda: run(c)], lambda i, n: f"try {i + 1}/{n}")
    with pytest.raises(StopIteration) as stop:
        while True:
            next(events)
    best, results = stop.value.value
    assert best is b and results == [a, b, c]
    assert base.best_of is best_of           # st_kmeans' sweep uses the seam's loop


def test_a_job_of_plain_work_is_stamped_and_its_finish_has_the_last_word(dark_and_bright):
    x = dark_and_bright()
    fitted = ticlust.fit(x, method="kmeans", k=2, device="cpu")
    spec = get_method("kmeans")
    out = execute(Job(lambda dev, seed: spec.predict(fitted, curation._fitted_items(x, fitted), dev), device="cpu",
                      losses=False, finish=lambda best, results: (best, len(results))))
    assert out[1] == 1 and out[0].run_losses == [] and out[0].device.startswith("cpu")
    assert set(out[0].versions) >= {"ticlust", "torch"}
    events = list(stream(Job(lambda dev, seed: dev.type + str(seed), device="cpu", seed=4)))
    assert [type(e) for e in events] == [Done] and events[0].result == "cpu4"


def test_the_local_backend_maps_in_task_order():
    assert issubclass(LocalBackend, Backend) and LocalBackend().name == "local"
    assert LocalBackend().map(lambda t: t * t, [3, 1, 2]) == [9, 1, 4]
    with pytest.raises(TypeError):
        Backend()                                # one abstract method: map


def test_the_device_is_resolved_only_by_the_seam():
    """resolve_device is called in execute.py only (device.py defines it)."""
    callers = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "resolve_device":
                callers.add(path.name)
    assert callers == {"execute.py"}, callers


# ---- the objects route, written once -------------------------------------------------------------
def _cli_args(**kw):
    base_args = dict(input="field.tif", labels="mask.tif", method="kmeans", keep_border=False, crop_size=None, channel=None,
                     rescale=False, orient=None, normalize=None)
    return SimpleNamespace(**{**base_args, **kw})


@pytest.mark.gui
@pytest.mark.parametrize("method, options", [
    ("kmeans", {}),
    ("st-kmeans", {"keep_border": True, "size": 24, "rescale": True, "orient": False}),
    ("shape-kmeans", {"keep_border": True}),
])
def test_the_objects_route_is_the_same_from_the_cli_and_the_widget(dock, make_napari_viewer, monkeypatch, method, options):
    pytest.importorskip("napari")

    viewer = make_napari_viewer()
    field, labels = viewer.open_sample("napari-ticlust", "nuclei")
    widget = dock(viewer)
    widget.field.pick(field.name, labels=labels.name)
    for name, value in options.items():
        widget.field.crop[name].value = value
    from_widget = widget.field.cut(method, {})()
    monkeypatch.setattr(cli_fit, "read_input", lambda path, **kw: (labels.data, None))
    flags = {"keep_border": options.get("keep_border", False), "crop_size": options.get("size"),
             "rescale": options.get("rescale", False), "orient": options.get("orient")}
    items, table, params = cli_fit.field_objects(_cli_args(method=method, **flags), field.data, {})
    assert np.array_equal(items, from_widget.items) and items.dtype == from_widget.items.dtype
    assert list(table) == list(from_widget.table)
    assert all(np.array_equal(table[c], from_widget.table[c]) for c in table)
    assert params == from_widget.params
    if method == "st-kmeans":
        assert params["invariances"] == "similarity" and "scale" in table and "angle" not in table


def test_runs_in_two_threads_do_not_undo_each_others_determinism():
    import gc

    from ticlust.core.device import reproducible

    gc.collect()                  # a run an earlier test left unfinished ends here (its generator closed), not mid-test
    before = torch.are_deterministic_algorithms_enabled()
    cpu = torch.device("cpu")
    outer, inner = reproducible(cpu), reproducible(cpu)
    outer.__enter__()
    inner.__enter__()                                    # e.g. the inspector while a Refine runs
    outer.__exit__(None, None, None)                     # the first one leaves first
    assert torch.are_deterministic_algorithms_enabled()  # the other is still deterministic
    inner.__exit__(None, None, None)
    assert torch.are_deterministic_algorithms_enabled() == before      # the setting from before both


def test_forecast_extends_the_decline_of_label_changes_and_never_ends_early():
    """A Lloyd-type loop's iterations: max_iter until the changes decline, then their geometric decline extended to under
    one change (plus the iteration that finds none); never fewer than one more than done, never more than max_iter."""
    from ticlust.events import Forecast

    halving = Forecast(30)
    said = [halving.total(c) for c in (None, 400, 200, 100, 50, 25, 12, 6, 3, 1)]
    assert said[:3] == [30, 30, 12] and all(10 <= s <= 13 for s in said[2:])        # 11 iterations in all
    stuck = Forecast(30)
    assert [stuck.total(c) for c in (None, 40, 50, 45)] == [30, 30, 30, 30]      # no decline: the cap
    capped = Forecast(5)
    assert max(capped.total(c) for c in (None, 1000, 900, 800, 700)) == 5
    late = Forecast(30)
    assert [late.total(c) for c in (None, 100, 1, 0, 3)] == [30, 30, 4, 5, 30]  # a change after none (a repair move)


def test_forecast_with_a_tolerance_stops_where_the_changes_reach_it():
    """A loop that stops once an iteration changes at most ``settle`` labels is forecast to stop there, sooner than one
    that waits for none; reaching the tolerance says one more iteration at most."""
    from ticlust.events import Forecast

    strict, tolerant = Forecast(40), Forecast(40, settle=10)
    changes = (None, 640, 320, 160, 80)
    strict_said = [strict.total(c) for c in changes]
    tolerant_said = [tolerant.total(c) for c in changes]
    assert tolerant_said[-1] < strict_said[-1]
    assert 7 <= tolerant_said[-1] <= 9 and 12 <= strict_said[-1] <= 14     # 80 -> 10 in 3 halvings; -> 0 in 7
    assert tolerant.total(9) == 7                                            # at the tolerance: this one is the last
