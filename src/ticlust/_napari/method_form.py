"""The method form both docks build: a method picker, K, the method's essential parameters and the rest under
**Advanced parameters**, every widget made from the method's config (``methods.base.param_infos``: its defaults,
limits, choices and docs as tooltips); and the objects route's crop options, with its defaults. The ticlust widget
and the plate dock place these widgets in their own layouts and read them through the form. The method registry
(and torch with it) is imported when a form is made, not with this module: the plate dock opens without it.
"""
from magicgui.widgets import CheckBox, ComboBox, Container, LineEdit, SpinBox

from ..objects.crops import ROUTE_OPTIONS

#: The most pixels the advanced parameters take before they scroll (st-kmeans has 17): a dock fits 1000 pixels.
ADVANCED_HEIGHT = 260


class MethodForm:
    """The widgets of a method's settings: ``method``, ``k``, ``params`` (essentials), ``show_advanced`` and
    ``advanced`` (in the scroll box ``area``, with any ``extras`` containers below them). Picking another method
    rebuilds the parameters from its config (connected first, so an owner's own handler sees the new form)."""

    def __init__(self, extras=(), default: str = "kmeans"):
        from qtpy.QtWidgets import QFrame, QScrollArea

        from ..methods import available_methods

        methods = available_methods()
        self.method = ComboBox(label="method", choices=methods, value=default if default in methods else methods[0],
                               tooltip="Clustering method")
        self.k = SpinBox(label="K", min=1, max=100000, tooltip="Number of clusters")
        self.params = Container(labels=True)
        self.show_advanced = CheckBox(value=False, text="Advanced parameters",
                                      tooltip="Show every parameter of the method, not only the essential ones")
        self.advanced = Container(labels=True)
        self.area = QScrollArea()
        self.area.setWidgetResizable(True)
        self.area.setFrameShape(QFrame.Shape.NoFrame)
        self.area.setWidget(Container(widgets=[self.advanced, *extras], labels=False).native)
        self.area.setMaximumHeight(ADVANCED_HEIGHT)
        self.area.setVisible(False)
        self.show_advanced.changed.connect(lambda on: self.area.setVisible(bool(on)))
        self.method.changed.connect(self.rebuild)
        self.rebuild()

    @property
    def spec(self):
        from ..methods import get_method

        return get_method(self.method.value)

    def rebuild(self, _=None) -> None:
        """The method's form from its config: essentials first, the rest under Advanced; K from the config. The
        picker's tooltip names the method and, where measured, when another one serves better."""
        from ..methods.base import param_infos

        spec = self.spec
        self.method.tooltip = " ".join(filter(None, [f"{spec.title}.", spec.caution, "Its parameters appear below."]))
        self.params.clear()
        self.advanced.clear()
        for info in param_infos(spec.config):
            if info.gui:
                (self.params if info.essential else self.advanced).append(param_widget(info))
        self.k.value = spec.config().k     # every config field has a default (docs/architecture.md)

    def widgets(self) -> list:
        return [*self.params, *self.advanced]

    def param(self, name: str):
        """The form widget of a method parameter (essential or advanced)."""
        return next(w for w in self.widgets() if w.name == name)

    def values(self) -> dict:
        """The method parameters as set in the form (strings are converted by the method's config)."""
        return {w.name: w.value for w in self.widgets()}

    def set(self, config: dict) -> None:
        """Show a result's method, K and every parameter it used."""
        if config.get("method") in self.method.choices:
            self.method.value = config["method"]
        if "k" in config:
            self.k.value = int(config["k"])
        for widget in self.widgets():
            if widget.name in config:
                widget.value = form_value(widget, config[widget.name])


def crop_options(size_label: str = "crop size") -> Container:
    """The objects route's options as form widgets, with its defaults (``objects.crops.ROUTE_OPTIONS``): keep border
    objects, the crop size (0: the smallest that holds every object), orient, normalize, rescale."""
    return Container(labels=True, widgets=[
        CheckBox(name="keep_border", value=False, text="keep border objects",
                 tooltip="Also cluster objects that touch the field's edge (they are cut off by it)"),
        SpinBox(name="size", label=size_label, value=0, min=0, max=1024,
                tooltip="Side of each object's crop in pixels; 0 = the smallest that holds every object"),
        CheckBox(name="orient", value=ROUTE_OPTIONS["orient"], text="orient objects",
                 tooltip="Turn each object so that its major axis points right (image methods)"),
        CheckBox(name="normalize", value=ROUTE_OPTIONS["normalize"], text="normalize brightness",
                 tooltip="Divide each object by its mean brightness, so kinds compare by shape (image methods)"),
        CheckBox(name="rescale", value=False, text="rescale objects",
                 tooltip="Zoom each object to fill its crop, whatever its size (image methods)"),
    ])


def form_value(widget, value):
    """A saved parameter value as its form widget holds it."""
    if isinstance(widget, LineEdit):
        if value is None:
            return "none"
        if isinstance(value, (list, tuple)):
            return ", ".join(map(str, value))
        return str(value)
    return value


def param_widget(info):
    """A form widget for one config parameter, with its doc as tooltip."""
    options = dict(name=info.name, label=info.name.replace("_", " "), tooltip=info.doc)
    if info.choices is not None and not isinstance(info.default, tuple):
        return ComboBox(choices=list(info.choices), value=info.default, **options)
    if isinstance(info.default, bool):
        return CheckBox(value=info.default, **options)
    if isinstance(info.default, int):
        low = int(info.low) if info.low is not None else -(2**31)
        high = int(info.high) if info.high is not None else 2**31 - 1
        return SpinBox(value=info.default, min=low, max=high, **options)
    if isinstance(info.default, tuple):
        return LineEdit(value=", ".join(map(str, info.default)), **options)
    return LineEdit(value="none" if info.default is None else str(info.default), **options)
