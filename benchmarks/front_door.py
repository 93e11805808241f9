"""The napari front door: how long a user waits for ``ticlust gui`` to be ready, and from pressing Run to Done.

    xvfb-run -a python benchmarks/front_door.py [--methods ai-kmeans st-kmeans] [--cases sample field300]
                                               [--processes 3] [--runs 3] [--timeline]

Each measured process is started fresh (``--processes`` per case and method) and does what ``ticlust gui`` does —
``ticlust.cli.main(["gui"])``, with napari's event loop entered through a driver instead of ``napari.run``:

* **start → dock ready**: from just before the process is spawned (the parent's clock) to the turn of Qt's event
  loop after the dock's method form is built (the window drawn, the nuclei sample open, the dock set up, the method
  registry imported in its worker): what a user waits for before Run can be pressed.
* case ``sample``: the nuclei sample ``ticlust gui`` opens (60 nuclei, 320×320; 50 objects cut out) on the objects
  route it is set up for; case ``field300``: ``ticlust.nuclei_field(n=300)`` (1024×1024; 287 objects) opened as an
  Image and a Labels layer and chosen in the main dock's input and labels boxes, the way a user opens a field.
* the method is picked in the main dock's method box, K = 3 set (a method change resets K and the layer choices,
  so they are chosen again after it), and Run is clicked with a real mouse click (``QTest.mouseClick``).
* **Run → Done**: from the click to the state where the result layers are drawn, the status line says Done, the
  worker has ended and the inspector's layers (the prototypes aligned onto the item under the slider, drawn from a
  worker of their own) are shown, then one more turn of the event loop (a paint). ``done_s`` is the click to the
  status line's Done (every result layer made); ``ready_s`` to the end (the inspector drawn too).
  The first Run in a fresh process (``cold``: first calls of the kernels) and the ``--runs`` after it (``warm``)
  are reported apart.
* CPU: every thread's CPU time (``/proc/self/task``, 10 ms ticks) between the click and the end, split into the
  GUI thread (``gui_cpu_s``) and the others (``other_cpu_s``: the worker running the objects route and the fit,
  torch's pool, the inspector's worker, on a first Run the dock's warm-up); ``fit_cpu_s`` is the other threads'
  CPU while ``ticlust.api.run`` ran (the fit's own), ``fit_wall_s`` the result's own ``total_s``.
* ``--timeline`` adds, per Run, when (seconds after the click) the worker's first event arrived, the objects were
  drawn, the fit ended (Done reached the GUI thread), the result layers were made, and the inspector was drawn,
  with the GUI thread's CPU inside ``show_result`` — where the time goes.

One JSON line per process to ``--jsonl`` (default benchmarks/results/front_door.jsonl); benchmarks/results/
front_door.md is rebuilt from it (medians and ranges per case and method) with the machine and load beside.
Hold the benchmark lock while timing (``flock /work/wt/bench.lock xvfb-run -a python ...``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
RESULTS = HERE / "results"
TARGETS = {"sample": 5.0, "field300": 20.0}      # Run → Done, seconds, on 2 CPU cores
CASES = {"sample": "the nuclei sample of `ticlust gui` (50 objects)",
         "field300": "nuclei_field(n=300), 1024×1024 (287 objects)"}


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python {platform.python_version()}"


# ---- the measured process ---------------------------------------------------------------------------
def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of every thread of this process, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:          # the thread ended while listed
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_split(before: dict, after: dict, gui_tid: int) -> tuple[float, float]:
    """(GUI thread's CPU, every other thread's CPU) between two ``thread_cpu`` readings (a thread that ended in
    between is missed: a napari worker thread stays in its pool, so none of ours ends)."""
    gui = after.get(gui_tid, 0.0) - before.get(gui_tid, 0.0)
    other = sum(v - before.get(t, 0.0) for t, v in after.items() if t != gui_tid)
    return gui, other


def wait_until(done, timeout_s: float = 300.0) -> None:
    """Turn Qt's event loop until ``done()`` (checked every 2 ms), then once more."""
    from qtpy.QtCore import QEventLoop, QTimer

    loop, timer = QEventLoop(), QTimer()
    start = time.perf_counter()

    def check():
        if done() or time.perf_counter() - start > timeout_s:
            loop.quit()
    timer.timeout.connect(check)
    timer.start(2)
    loop.exec_()
    timer.stop()
    if not done():
        raise SystemExit(f"timed out after {timeout_s} s")
    settle()


def wait_for(seconds: float) -> None:
    """Turn Qt's event loop for ``seconds``."""
    from qtpy.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    loop.exec_()


def settle() -> None:
    """One turn of the event loop after everything queued so far (a zero timer fires after pending paints)."""
    from qtpy.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(0, loop.quit)
    loop.exec_()


class Timeline:
    """Wraps the dock's steps to note when (after the click) each happened, and the GUI CPU inside show_result."""

    def __init__(self, widget):
        from ticlust._napari import layers as L

        self.marks, self.t0 = {}, 0.0
        self._wrap(widget, "on_event", "first_event", first_only=True)
        self._wrap(widget.field, "fit_event", "objects_drawn")
        self._wrap(widget, "_fitted", "layers_made", before="fit_ended", cpu="show_result_gui_cpu_s")
        self._wrap(L, "show_inspector", "inspector_drawn")

    def start(self) -> None:
        self.marks, self.t0 = {}, time.perf_counter()

    def _wrap(self, owner, name, mark, first_only=False, before=None, cpu=None):
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            if before:
                self.marks.setdefault(before, round(time.perf_counter() - self.t0, 3))
            c = time.thread_time()
            out = original(*args, **kwargs)
            if cpu:
                self.marks[cpu] = round(time.thread_time() - c, 3)
            if not (first_only and mark in self.marks):
                self.marks[mark] = round(time.perf_counter() - self.t0, 3)
            return out
        setattr(owner, name, wrapped)


class FitCPU:
    """Wraps ``ticlust.api.run`` (what the dock's worker iterates) to note the CPU time of every thread but the GUI
    thread from its start to its last event: the fit's own CPU (torch's pool included)."""

    def __init__(self, gui_tid: int):
        import ticlust.api

        self.gui_tid, self.cpu_s = gui_tid, None
        original = ticlust.api.run

        def run(*args, **kwargs):
            before = thread_cpu()
            yield from original(*args, **kwargs)
            self.cpu_s = cpu_split(before, thread_cpu(), self.gui_tid)[1]
        ticlust.api.run = run


def open_field300(viewer, widget):
    """Open a 300-nucleus field as a user opens one (an Image and a Labels layer); the seconds it took."""
    import numpy as np

    from ticlust import nuclei_field

    start = time.perf_counter()
    field = nuclei_field(n=300)
    viewer.add_image(field.image, name="field", colormap="gray")
    viewer.add_labels(field.labels, name="field labels", opacity=0.3,
                      metadata={"kinds": np.asarray(field.kinds), "kind_names": field.kind_names})
    settle()
    return time.perf_counter() - start


def choose(widget, method: str, case: str) -> None:
    """Pick the field and its labels layer, then the method in the dock's method box and K = 3, as a user does."""
    image = "nuclei" if case == "sample" else "field"
    widget.use(widget.field)
    widget.field.pick(image, labels=f"{image} labels")
    combo = widget.form.method.native
    combo.setCurrentIndex(combo.findText(method))
    widget.form.k.value = 3
    settle()


def press_run(widget, timeline) -> dict:
    """Click Run and wait until Done with the inspector drawn; the row of times."""
    from qtpy.QtCore import Qt
    from qtpy.QtTest import QTest

    gui_tid = __import__("threading").get_native_id()
    button = widget.run_button.native
    before, gui_c = thread_cpu(), time.thread_time()
    timeline.start()
    start = time.perf_counter()
    QTest.mouseClick(button, Qt.LeftButton)
    done_at = []

    def done():
        if not done_at and widget.status.value.startswith("Done:"):
            done_at.append(time.perf_counter() - start)
        return bool(done_at) and not widget.busy
    wait_until(done)
    ready = time.perf_counter() - start
    gui, other = cpu_split(before, thread_cpu(), gui_tid)
    result = widget.result
    row = {"done_s": round(done_at[0], 3), "ready_s": round(ready, 3), "fit_wall_s": round(result.timing["total_s"], 3),
           "fit_cpu_s": round(FIT.cpu_s, 2), "other_cpu_s": round(other, 2), "gui_cpu_s": round(gui, 2), "gui_thread_cpu_s": round(time.thread_time() - gui_c, 3),
           "n": int(result.n), "status": widget.status.value[:90]}
    if timeline.marks:
        row["timeline"] = dict(timeline.marks)
    return row


def child(args) -> None:
    """The measured process: ``ticlust gui`` with a driver in place of napari's event loop."""
    import napari

    spawned = float(os.environ["FRONT_DOOR_SPAWNED"])

    def drive():
        from qtpy.QtWidgets import QApplication

        from ticlust._napari.dock import TiclustDock

        viewer = napari.current_viewer()
        widget = next(w for w in viewer.window.dock_widgets.values() if isinstance(w, TiclustDock))
        wait_until(lambda: widget.ready)         # the form built: Run can be pressed
        ready = time.time() - spawned
        row = {"case": args.case, "method": args.method, "start_to_dock_s": round(ready, 3),
               "start_cpu_s": round(sum(os.times()[:2]), 2)}
        if args.case == "field300":
            row["field_open_s"] = round(open_field300(viewer, widget), 3)
        if args.think:
            wait_for(args.think)
        timeline = Timeline(widget) if args.timeline else None
        choose(widget, args.method, args.case)
        row["runs"] = []
        for i in range(1 + args.runs):
            profiler = _profile_start() if args.profile else None
            row["runs"].append(press_run(widget, timeline or _NoTimeline()))
            if profiler is not None:
                _profile_report(profiler, i)
        print("FRONT_DOOR " + json.dumps(row), flush=True)
        viewer.close()
        QApplication.instance().quit()

    global FIT
    FIT = FitCPU(__import__("threading").get_native_id())
    napari.run = drive        # launch() calls napari.run() once the viewer is built
    from ticlust.cli import main

    main(["gui"])


def _profile_start():
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _profile_report(profiler, run: int) -> None:
    """The GUI thread's functions by own and cumulative time over the cold Run (``run`` 0), to stderr; with
    FRONT_DOOR_PROFILE set, every Run's raw stats to that path + ``.<run>`` (for pstats' callers and callees)."""
    import pstats

    profiler.disable()
    if os.environ.get("FRONT_DOOR_PROFILE"):
        profiler.dump_stats(f"{os.environ['FRONT_DOOR_PROFILE']}.{run}")
    if run:
        return
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(25)


FIT: FitCPU | None = None


class _NoTimeline:
    marks = {}

    def start(self) -> None:
        pass


# ---- the parent ---------------------------------------------------------------------------------------
def spawn(case: str, method: str, runs: int, timeline: bool, profile: bool = False, src: Path = SRC,
          think: float = 0.0) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
           "FRONT_DOOR_SPAWNED": repr(time.time())}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--case", case, "--method", method,
           "--runs", str(runs), "--think", str(think)] + (["--timeline"] if timeline else []) + (["--profile"] if profile else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if profile:
        print(out.stderr, file=sys.stderr)
    line = next((l for l in out.stdout.splitlines() if l.startswith("FRONT_DOOR ")), None)
    if line is None:
        raise SystemExit(f"the measured process gave no result:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(line[len("FRONT_DOOR "):])


def commit(root: Path = HERE) -> str:
    """The short commit of the tree at ``root`` ("" for an exported copy without .git: say it in the label)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()


def spread(values) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def table(rows: list[dict]) -> str:
    """Markdown: per label, case and method, medians (min–max) of each number over processes / runs."""
    lines = ["| label | case | method | start → dock s | Run → Done s, cold | (status Done) | fit wall / CPU s, cold | "
             "GUI CPU s, cold | Run → Done s, warm | (status Done) | fit wall / CPU s, warm | GUI CPU s, warm | target "
             "(median cold) | load |", "|" + "---|" * 14]
    keys = sorted({(r["label"], r["case"], r["method"]) for r in rows}, key=lambda k: (k[1] != "sample", k[1], k[2], k[0]))
    for label, case, method in keys:
        group = [r for r in rows if (r["label"], r["case"], r["method"]) == (label, case, method)]
        cold = [r["runs"][0] for r in group]
        warm = [run for r in group for run in r["runs"][1:]] or cold
        worst = statistics.median(x["ready_s"] for x in cold)
        verdict = f"≤ {TARGETS[case]:.0f} s: {'met' if worst <= TARGETS[case] else 'over'}"
        cells = [label, case, method, spread([r["start_to_dock_s"] for r in group])]
        for runs in (cold, warm):
            cells += [spread([x["ready_s"] for x in runs]), spread([x["done_s"] for x in runs]),
                      f"{statistics.median(x['fit_wall_s'] for x in runs):.2f} / "
                      f"{statistics.median(x['fit_cpu_s'] for x in runs):.2f}",
                      spread([x["gui_cpu_s"] for x in runs])]
        loads = [float(r["load"].split()[0]) for r in group]
        cells += [verdict, f"{min(loads):.1f}–{max(loads):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_markdown(path: Path, rows: list[dict]) -> None:
    head = rows[-1]
    text = [
        "# Front door: `ticlust gui` to Run to Done",
        "",
        "Written by `benchmarks/front_door.py` (see its docstring for what each number is). Each process is started",
        "fresh and does what `ticlust gui` does in a real napari window under Xvfb; Run is a mouse click on the main",
        "dock's button. Cold = the first Run in the process, warm = the Runs after it. Run → Done is counted to the end",
        "(result layers drawn, status says Done, the inspector drawn); `(status Done)` is the click to the status",
        "line's Done (every result layer made) before the inspector's own worker has drawn. Medians (min–max).",
        "CPU: the fit's own (every thread but the GUI thread while ticlust.api.run ran) and the GUI thread's, click to",
        "end; fit wall is the result's own total_s. Load: the 1-minute load average at each process's start (min–max).",
        "",
        f"Machine: {head['machine']}. Trees: "
        + ", ".join(sorted({f"{r['label']} = {r['commit'] or '?'}" for r in rows})) + ".",
        "",
        "Cases: " + "; ".join(f"`{k}`: {v}" for k, v in CASES.items()) + ".",
        "",
        table(rows),
        "",
    ]
    path.write_text("\n".join(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["ai-kmeans", "st-kmeans"])
    parser.add_argument("--cases", nargs="+", default=["sample", "field300"], choices=sorted(CASES))
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per case and method")
    parser.add_argument("--runs", type=int, default=3, help="warm Runs after the first in each process")
    parser.add_argument("--timeline", action="store_true", help="note when each step of a Run happened")
    parser.add_argument("--profile", action="store_true", help="cProfile the GUI thread over each Run and print "
                        "the cold one's (the measured process's stderr is printed)")
    parser.add_argument("--trees", nargs="*", default=[], metavar="LABEL=ROOT",
                        help="source trees to compare (ROOT/src is imported), alternated process by process; "
                             "default: this checkout, labelled --label or its commit")
    parser.add_argument("--think", type=float, default=0.0, help="seconds between dock ready and the first choice in the "
                        "form (a user reading the window); 0: at once")
    parser.add_argument("--label", default="", help="a name for these rows in the table (e.g. before / after)")
    parser.add_argument("--jsonl", type=Path, default=RESULTS / "front_door.jsonl")
    parser.add_argument("--markdown", type=Path, default=RESULTS / "front_door.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    trees = [tree.split("=", 1) for tree in args.trees] or [[args.label or commit(), str(SRC.parent)]]
    for _ in range(args.processes):          # interleaved over cases, methods and trees: load drifts cancel out
        for case in args.cases:
            for method in args.methods:
                for label, root in trees:
                    before = load_average()
                    row = spawn(case, method, args.runs, args.timeline, args.profile, Path(root) / "src", args.think)
                    row.update(label=label, load=before, load_after=load_average(), machine=machine(), commit=commit(Path(root)),
                               think_s=args.think)
                    print(json.dumps(row), flush=True)
                    with args.jsonl.open("a") as out:
                        out.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in args.jsonl.read_text().splitlines() if line.strip()]
    write_markdown(args.markdown, rows)


if __name__ == "__main__":
    main()
