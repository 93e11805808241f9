"""Choose K in the dock: the form's method fitted at every K of a range (``ticlust.scan_k``, through the dock's one job
runner: progress, Cancel), each criterion's score per K drawn with pyqtgraph and the suggested K marked; Use K puts it
in the form. The items are the source's (``Source.scan_items``): a stack, a field's objects cut as Run cuts them,
landmark shapes; a plate's store is refused in one sentence, as ``ticlust fit STORE --k-scan`` refuses it.
"""
import numpy as np
import pyqtgraph as pg
from magicgui.widgets import Container, PushButton, SpinBox
from qtpy.QtCore import Qt

from ..errors import InputError
from ..events import Progress
from .plots import BACKGROUND, CAPTION_COLOR

#: One colour per criterion (``evaluation.CRITERIA``), the suggested K's line in the deciding one's.
COLORS = {"knee": (255, 200, 60), "stability": (120, 170, 230), "silhouette": (150, 220, 140)}


class ScanPlot(pg.PlotWidget):
    """Each criterion's score per K, scaled to 0…1 so that they share an axis (the scan's table keeps the numbers),
    and a vertical line at the suggested K."""

    def __init__(self, parent=None):
        super().__init__(parent, background=BACKGROUND)
        self.setFixedHeight(150)
        self.setMinimumWidth(120)
        item = self.getPlotItem()
        item.hideButtons()
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        item.hideAxis("left")
        item.setLabel("bottom", "K")
        self.legend = item.addLegend(offset=(4, 4), labelTextColor=CAPTION_COLOR, labelTextSize="7pt")
        self.lines = {name: item.plot(name=name, pen=pg.mkPen(color, width=1.5), symbol="o", symbolSize=4,
                                      symbolBrush=color, symbolPen=None) for name, color in COLORS.items()}
        self.mark = pg.InfiniteLine(angle=90, pen=pg.mkPen((255, 255, 255), width=1, style=Qt.PenStyle.DashLine))
        item.addItem(self.mark)
        self.show_scan(None)

    def show_scan(self, scan) -> None:
        """Draw a :class:`ticlust.evaluation.KScan` (None: an empty plot that says what it is for)."""
        ks = np.asarray(scan.ks if scan is not None else [], float)
        for name, line in self.lines.items():
            values = np.asarray(scan.scores.get(name, []) if scan is not None else [], float)
            span = np.ptp(values) if values.size else 0.0
            line.setData(ks[:values.size], (values - values.min()) / span if span > 0 else values * 0)
        self.mark.setVisible(scan is not None)
        title = "Scan K: each criterion per K (higher is better)" if scan is None else \
            f"{scan.method}: K = {scan.suggested} suggested by the {scan.criterion}"
        self.getPlotItem().setTitle(title, color=CAPTION_COLOR, size="8pt", justify="left")
        if scan is not None:
            self.mark.setValue(scan.suggested)
            self.setRange(xRange=(ks[0], ks[-1]), yRange=(-0.05, 1.05), padding=0.02)


class ChooseK(Container):
    """The Fit tab's K scan: a K range, Scan K (a job of the dock), the plot, Use K."""

    def __init__(self, dock):
        from .sources import row

        super().__init__(labels=True)
        self.dock, self.scan = dock, None
        self.low = SpinBox(label="scan K from", min=2, max=10_000, value=2)
        self.high = SpinBox(label="scan K to", min=3, max=10_000, value=10)
        self.run = dock.button("Scan K", self.start, tooltip="Fit the method at every K of the range (3 seeded "
                               "subsamples each) and suggest the K at the knee of its cost (ticlust.scan_k)")
        self.use = PushButton(text="Use K", enabled=False, tooltip="Put the suggested K in the form")
        self.plot = ScanPlot()
        self.extend([self.low, self.high, row(self.run.button, self.use)])
        self.native.layout().addWidget(self.plot)
        self.use.changed.connect(self._use)

    def start(self):
        """Scan the source's items with the form's method and parameters in a worker. Returns the worker (None: said
        why not)."""
        from ..core.execute import execute
        from ..evaluation import scan_job

        dock = self.dock
        if dock.form is None:
            dock.say("The methods are still loading: press Scan K in a moment.")
            return None
        method, params, ks = dock.form.method.value, dock.form.values(), range(self.low.value, self.high.value + 1)
        device, seed = dock.device_value(), dock.seed.value
        try:
            items = dock.source.scan_items(method, params)
        except InputError as exc:
            dock.refuse(str(exc))
            return None

        def call(sink):
            return execute(scan_job(items() if callable(items) else items, method, ks, device, seed, **params), sink)
        dock.say(f"Scanning K = {ks.start}…{ks.stop - 1} with {method}…")
        return dock.run_job(self.run, call, done=self.show, kept="the form's K is as it was", busy=True,
                            event=lambda event: isinstance(event, Progress) and dock.on_event(event))

    def _use(self, _=None) -> None:
        if self.scan is not None and self.dock.job is None:
            self.dock.form.k.value = self.scan.suggested

    def show(self, scan) -> None:
        self.scan = scan
        self.plot.show_scan(scan)
        self.use.enabled = True
        self.dock.say(f"K scan of {scan.items} items with {scan.method}: the {scan.criterion} suggests K = "
                      f"{scan.suggested} (Use K puts it in the form).")
