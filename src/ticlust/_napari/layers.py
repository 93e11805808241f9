"""Turning a ClusteringResult into napari layers, reusing layers by name (so a re-run updates them in place).

Where things go (data pixels; the input stack occupies rows 0…H, columns 0…W and owns the slider):

    [ image + warp grid ] [ aligned prototype ]   [ prototype mosaic, numbered ]
    [ inspector: every prototype aligned onto the image, a score band above each ]

Only the input, its aligned stack and the sorted view are per-image (N frames on the slider); the
prototype mosaic, the inspector and their labels are 2-D layers placed beside the stack, so napari
shows them on every slider position and they never cover the image. Text (cluster numbers, scores,
the landmark legend) is drawn into small RGBA images with Pillow rather than with napari's Shapes
text, which crashed vispy under Xvfb when such a layer was removed and made again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..plate.labels import cluster_color      # the palette, shared with the OME-Zarr label images
from ..result import ClusteringResult

CHOSEN_COLOR = np.array([1.0, 0.85, 0.0, 1.0])
RUNNER_UP_COLOR = np.array([0.0, 0.8, 1.0, 1.0])
OTHER_COLOR = np.array([0.55, 0.55, 0.55, 1.0])
# line widths in screen pixels; layers hold data units, so widths are divided by the camera zoom
SCREEN_WIDTHS = {"grid": 1.5, "chosen": 3.0, "runner_up": 2.0, "other": 1.0, "ellipse": 1.5, "mean": 3.0}
INSPECTOR_COLUMNS = 5


SUFFIXES = {
    "prototypes": "prototypes", "prototype_labels": "prototype numbers", "sorted": "sorted by cluster",
    "aligned": "aligned", "grid": "warp grid", "inspector": "inspector", "scores": "inspector scores",
    "frames": "inspector frames", "landmarks": "clusters", "ellipses": "landmark ellipses",
    "means": "mean shapes", "legend": "legend", "objects": "objects", "painted": "objects by cluster",
    "contours": "contours", "channels": "(channels)",
}


def layer_names(input_name: str) -> dict[str, str]:
    """The names of every layer ticlust makes for an input layer."""
    return {key: f"{input_name} {suffix}" for key, suffix in SUFFIXES.items()}


def is_ticlust_layer(name: str) -> bool:
    return any(name.endswith(" " + suffix) for suffix in SUFFIXES.values())


def origin(input_layer) -> np.ndarray:
    """Where the input's top-left pixel sits (row, col): everything ticlust draws for it is placed from there."""
    return np.asarray(input_layer.translate[-2:], dtype=float)


def unit(input_layer) -> float:
    """World units per pixel of the input's images (its scale): what ticlust draws beside it is drawn as large."""
    return float(input_layer.scale[-1])


def place(input_layer, yx) -> np.ndarray:
    """World position of (row, col) pixel coordinates of the input's scene."""
    return origin(input_layer) + unit(input_layer) * np.asarray(yx, dtype=float)


# ---- where things go -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Scene:
    """Positions (row, col offsets in data pixels) of everything drawn beside an H×W image stack."""

    h: int
    w: int
    k: int

    @property
    def gap(self) -> int:
        return max(2, round(self.w / 8))

    @property
    def band(self) -> int:
        """Height of the text band above each labelled tile."""
        return max(5, round(self.h * 0.32))

    @property
    def aligned_offset(self) -> tuple[float, float]:
        return (0.0, float(self.w + self.gap))

    @property
    def inspector_columns(self) -> int:
        return min(self.k, INSPECTOR_COLUMNS)

    @property
    def inspector_offset(self) -> tuple[float, float]:
        return (float(self.h + self.gap), 0.0)

    @property
    def mosaic_columns(self) -> int:
        return max(1, math.ceil(math.sqrt(self.k)))

    @property
    def mosaic_offset(self) -> tuple[float, float]:
        right = max(2 * (self.w + self.gap), self.inspector_columns * (self.w + self.gap))
        return (0.0, float(right + 2 * self.gap))

    def tile_origins(self, columns: int) -> np.ndarray:
        """(K, 2) top-left pixel of each tile in a labelled grid of ``columns`` (band above each tile)."""
        i = np.arange(self.k)
        return np.stack([(i // columns) * (self.band + self.h + self.gap) + self.band,
                         (i % columns) * (self.w + self.gap)], axis=1)

    def grid_shape(self, columns: int) -> tuple[int, int]:
        rows = math.ceil(self.k / columns)
        return rows * (self.band + self.h + self.gap) - self.gap, columns * (self.w + self.gap) - self.gap

    def extent(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """(top-left, bottom-right) of the whole scene, for framing the view."""
        ih, iw = self.grid_shape(self.inspector_columns)
        mh, mw = self.grid_shape(self.mosaic_columns)
        bottom = max(self.inspector_offset[0] + ih, mh)
        right = self.mosaic_offset[1] + mw
        return (-0.5, -0.5), (bottom - 0.5, right - 0.5)


def scene_for(result: ClusteringResult) -> Scene:
    return Scene(int(result.prototypes.shape[1]), int(result.prototypes.shape[2]), int(result.k))


# ---- display layout of image data ----------------------------------------------------------------
def is_rgb(layer) -> bool:
    return bool(getattr(layer, "rgb", False))


def channel_first_display(input_layer) -> bool:
    """Multichannel (non-RGB) inputs are shown as N×C×H×W: channels on a slider of their own."""
    return input_layer.ndim == 4 and not is_rgb(input_layer)


def for_display(items: np.ndarray, input_layer, stacked: bool = True) -> np.ndarray:
    """Channels-last result images (…, H, W[, C]) laid out like the input layer shows them."""
    items = np.asarray(items)
    per_item = 3 if stacked else 2
    if channel_first_display(input_layer) and items.ndim == per_item + 1:
        return np.moveaxis(items, -1, -3)
    return items


def image_kwargs(input_layer) -> dict:
    return {"rgb": True} if is_rgb(input_layer) else {"colormap": "gray"}


def tiles_grid(tiles: np.ndarray, scene: Scene, columns: int) -> np.ndarray:
    """K channels-last tiles (K, H, W[, C]) placed on a labelled grid (blank bands and gaps)."""
    out = np.zeros((*scene.grid_shape(columns), *tiles.shape[3:]), dtype=np.float32)
    for (y, x), tile in zip(scene.tile_origins(columns), tiles):
        out[y:y + scene.h, x:x + scene.w] = tile
    return out


def text_raster(scene: Scene, columns: int, texts: list[str], colors, factor: int | None = None):
    """An RGBA image of the grid's text bands (each text centred above its tile) and its pixel scale."""
    from PIL import Image as PILImage, ImageDraw, ImageFont

    height, width = scene.grid_shape(columns)
    if factor is None:
        factor = int(max(2, min(10, 3000 // max(height, width, 1))))
    canvas = PILImage.new("RGBA", (width * factor, height * factor), (0, 0, 0, 0))
    draw = ImageDraw.Draw(canvas)
    box_w, box_h = scene.w * factor, scene.band * factor
    fonts: dict[int, object] = {}
    for (y, x), text, color in zip(scene.tile_origins(columns), texts, colors):
        size = max(6, int(box_h * 0.8))
        while True:
            font = fonts.setdefault(size, ImageFont.load_default(size=size))
            if size <= 6 or draw.textlength(text, font=font) <= box_w * 0.96:
                break
            size -= 1
        rgba = tuple(int(round(255 * c)) for c in np.asarray(color)[:3]) + (255,)
        draw.text(((x + scene.w / 2) * factor, (y - scene.band / 2) * factor), text, fill=rgba, font=font, anchor="mm")
    return np.asarray(canvas), factor


def set_text_layer(viewer, name: str, raster: np.ndarray, factor: int, offset, metadata=None, unit: float = 1.0):
    """Show an RGBA text raster whose pixels are unit/factor data units, its top-left at ``offset``."""
    scale = (unit / factor, unit / factor)
    translate = (offset[0] + unit * (-0.5 + 0.5 / factor), offset[1] + unit * (-0.5 + 0.5 / factor))
    if name in viewer.layers:
        layer = viewer.layers[name]
        reveal(layer)
        layer.data = raster
        place_layer(layer, scale=scale, translate=translate)
        if metadata is not None:
            layer.metadata.update(metadata)
        return layer
    return viewer.add_image(raster, name=name, rgb=True, scale=scale, translate=translate,
                            metadata=dict(metadata or {}))


# ---- generic layer reuse -------------------------------------------------------------------------
#: Metadata key of a layer made ahead of its first picture (hidden, empty): the first drawing into it shows it.
UNDRAWN = "ticlust_undrawn"


def add_undrawn_layer(viewer, name: str, kind: str, shape=(1, 1), dtype=None, **kwargs):
    """A hidden, empty layer (``kind``: image, labels or shapes; ``dtype`` that of the pictures it will show, which
    sets an image's contrast range: uint8 for a text raster) made ahead of its first picture: making a napari layer
    takes tenths of a second of the GUI thread (its controls, its vispy visual), drawing into one that exists
    hundredths; ``set_image``, ``set_text_layer``, ``set_shapes`` and :func:`reveal` show it."""
    metadata = {UNDRAWN: True}
    if kind == "shapes":
        return viewer.add_shapes(None, name=name, visible=False, metadata=metadata, **kwargs)
    data = np.zeros(shape, dtype or (np.int32 if kind == "labels" else np.float32))
    add = viewer.add_labels if kind == "labels" else viewer.add_image
    return add(data, name=name, visible=False, metadata=metadata, **kwargs)


#: What vispy's text visual renders of its font on its first draw, even for an empty text (its line metrics).
MEASURED_GLYPHS = "ÅÉÑŐjgpqy "


def load_text_glyphs(widget) -> None:
    """Render the glyphs of napari's canvas font that the first text drawn renders (``MEASURED_GLYPHS``; a Shapes
    layer always draws a text, empty or not): about a tenth of a second of the GUI thread once a session (its
    distance fields computed on the CPU), paid here, in a turn of the caller's choosing, rather than in the repaint
    that first shows a Shapes layer (the inspector's frames). ``widget``: a Qt widget in the viewer's window (the
    canvas is found through Qt, not through the window's private attributes). No canvas found: nothing is done,
    and only that repaint is slower."""
    from napari.qt import QtViewer

    window = widget.window()
    qt_viewer = window if isinstance(window, QtViewer) else window.findChild(QtViewer)
    info = getattr(getattr(qt_viewer, "canvas", None), "font_info", None)
    if callable(info):
        fonts = info()
        font = fonts.font_manager.get_font(fonts.face)
        for char in MEASURED_GLYPHS:
            font[char]                                # rendered and kept by the font on first use


def drawn(viewer, name: str) -> bool:
    """Whether the layer ``name`` is there with a picture (not missing, not an undrawn layer)."""
    return name in viewer.layers and not viewer.layers[name].metadata.get(UNDRAWN, False)


def reveal(layer) -> None:
    """Show an undrawn layer before something is drawn into it (napari measures a hidden layer's extent again only
    when data is set on it shown)."""
    if layer.metadata.get(UNDRAWN, False):
        layer.metadata.pop(UNDRAWN)
        layer.visible = True


def hide(layer) -> None:
    """Turn a drawn layer back into a hidden, undrawn layer (its picture no longer applies; the layer is kept)."""
    layer.metadata[UNDRAWN] = True
    layer.visible = False


def place_layer(layer, **where) -> None:
    """Set a layer's ``scale`` and ``translate`` only where they change: each setter redraws the layer and has the
    viewer measure every layer's extent again (a few hundredths of a second of the GUI thread each)."""
    for key, value in where.items():
        now = np.asarray(getattr(layer, key), float)
        value = np.asarray(value, float)
        if now.shape != value.shape or not np.allclose(now, value):
            setattr(layer, key, tuple(value.tolist()))


def set_image(viewer, name: str, data, **kwargs):
    """Update the Image layer called ``name`` in place (shown, if it was undrawn), or add it. napari fixes whether a
    layer is RGB when it is made: a picture of the other kind (or of other dimensions) gets a new layer, where setting
    it would break the layer (grey data in an RGB layer reads its columns as colours: a 1-D layer)."""
    if name in viewer.layers and (viewer.layers[name].rgb != bool(kwargs.get("rgb", False)) or
                                  np.ndim(viewer.layers[name].data) != np.ndim(data)):
        viewer.layers.remove(name)
    if name in viewer.layers:
        layer = viewer.layers[name]
        reveal(layer)
        layer.data = data
        place_layer(layer, **{key: kwargs[key] for key in ("scale", "translate") if key in kwargs})
        if "metadata" in kwargs:
            layer.metadata = kwargs["metadata"]
        layer.reset_contrast_limits()
        return layer
    return viewer.add_image(data, name=name, **kwargs)


def set_shapes(viewer, name: str, shapes: list, shape_type: str, edge_color, edge_width, face_color="transparent",
               **kwargs):
    """Replace the shapes of the Shapes layer ``name`` (or add it); never with text (see the module doc)."""
    metadata = kwargs.pop("metadata", {})
    if name in viewer.layers:
        layer = viewer.layers[name]
        reveal(layer)
        layer.data = []
        if shapes:
            layer.add(shapes, shape_type=shape_type, edge_color=edge_color, edge_width=edge_width,
                      face_color=face_color)
    else:
        layer = viewer.add_shapes(shapes or None, shape_type=shape_type, edge_color=edge_color,
                                  edge_width=edge_width, face_color=face_color, name=name, **kwargs)
    layer.metadata.update(metadata)
    return layer


def zoom_widths(layer, zoom: float) -> None:
    """Give a Shapes layer's lines their screen width at this zoom (stored per shape in metadata)."""
    widths = layer.metadata.get("screen_widths")
    if widths is None or len(widths) != len(layer.data) or not len(widths):
        return
    layer.edge_width = [px / zoom for px in widths]
    layer.refresh()   # the setter updates the data but not the drawn mesh


def rescale_lines(viewer, input_name: str) -> None:
    """Keep every ticlust line (warp grid, frames, ellipses, means) a fixed number of screen pixels wide."""
    zoom = max(float(viewer.scene.camera.zoom), 1e-6)
    names = layer_names(input_name)
    for key in ("grid", "frames", "ellipses", "means"):
        if names[key] in viewer.layers:
            zoom_widths(viewer.layers[names[key]], zoom)


def frame_result(viewer, input_layer, extra=()) -> None:
    """Fit the view to the input stack and everything ticlust drew beside it (not the hidden sorted view),
    and to the ``extra`` layers (the field the objects came from)."""
    names = layer_names(input_layer.name)
    keys = ("prototypes", "prototype_labels", "aligned", "inspector", "scores", "landmarks", "aligned", "ellipses",
            "means", "legend")
    shown = [viewer.layers[names[key]] for key in dict.fromkeys(keys) if names[key] in viewer.layers]
    shown += [layer for layer in (input_layer, *extra) if layer.visible]
    if shown:
        viewer.fit_to_view(layers=shown, margin=0.04)


def visible_box(viewer) -> tuple[tuple[float, float], tuple[float, float]]:
    """The data-space box (rows, cols) the canvas shows now."""
    canvas_h, canvas_w = viewer.canvas.size
    cy, cx = viewer.scene.camera.center[-2:]
    half_h, half_w = canvas_h / 2 / viewer.scene.camera.zoom, canvas_w / 2 / viewer.scene.camera.zoom
    return (cy - half_h, cx - half_w), (cy + half_h, cx + half_w)


# ---- assignments ---------------------------------------------------------------------------------
def sorted_order(result: ClusteringResult) -> np.ndarray:
    """Items ordered by cluster, closest to the prototype first within each cluster."""
    own = result.scores[np.arange(result.n), result.labels]
    return np.lexsort((own, result.labels))


def assignment_features(result: ClusteringResult) -> dict[str, np.ndarray]:
    """Per-item columns for ``layer.features``: the result's assignments table (one source for the
    status line, the inspector and the saved CSV)."""
    rows = result.assignments_table()
    features = {key: np.array([row[key] for row in rows]) for key in rows[0] if key != "item"}
    if result.responsibilities is not None:
        features["responsibility"] = result.responsibilities[np.arange(result.n), result.labels]
    return features


def cluster_summary(result: ClusteringResult) -> list[dict]:
    """One row per cluster: size, mean score, and its closest members."""
    own = result.scores[np.arange(result.n), result.labels]
    rows = []
    for c in range(result.k):
        members = np.flatnonzero(result.labels == c)
        best = members[np.argsort(own[members])][:5]
        rows.append({"cluster": c, "size": int(members.size),
                     "mean score": float(own[members].mean()) if members.size else float("nan"),
                     "closest items": ", ".join(map(str, best))})
    return rows


# ---- image results -------------------------------------------------------------------------------
def show_prototypes(viewer, input_layer, prototypes: np.ndarray, sizes=None, picture: bool = True,
                    later=None) -> None:
    """The K prototypes as one numbered 2-D mosaic beside the stack (live while training); ``picture`` False redraws
    the numbers only (the same prototypes, other cluster sizes). ``later(draw)``, where given, runs ``draw`` in the
    event loop's next turn: the numbers are then drawn in the turn after the picture."""
    names = layer_names(input_layer.name)
    k, h, w = prototypes.shape[:3]
    scene = Scene(h, w, k)
    at, u = place(input_layer, scene.mosaic_offset), unit(input_layer)
    drew = picture or names["prototypes"] not in viewer.layers
    if drew:
        mosaic = for_display(tiles_grid(np.asarray(prototypes, np.float32), scene, scene.mosaic_columns), input_layer,
                             stacked=False)
        set_image(viewer, names["prototypes"], mosaic, translate=tuple(at), scale=(u, u), **image_kwargs(input_layer))
    texts = [f"{c}" if sizes is None else f"{c} (n={sizes[c]})" for c in range(k)]
    drawn_as = (tuple(texts), h, w, tuple(at.tolist()), u)     # as drawn: a live fit redraws the same numbers
    if drawn(viewer, names["prototype_labels"]) and viewer.layers[names["prototype_labels"]].metadata.get(
            "ticlust_texts") == drawn_as:
        return

    def numbers():
        raster, factor = text_raster(scene, scene.mosaic_columns, texts, [cluster_color(c) for c in range(k)])
        set_text_layer(viewer, names["prototype_labels"], raster, factor, at, metadata={"ticlust_texts": drawn_as},
                       unit=u)
    if drew and later is not None:
        later(numbers)
    else:
        numbers()


def show_image_result(viewer, input_layer, result: ClusteringResult) -> list[str]:
    """Prototypes, assignments, sorted view, aligned stack and warp grid for an image result.

    Returns the names of the layers it made or updated. The input layer's data is left alone.
    napari Image layers have no ``features``, so the per-item assignment table goes into the input
    layer's ``metadata["ticlust_assignments"]`` (a pandas DataFrame, one row per image).
    """
    names = layer_names(input_layer.name)
    scene = scene_for(result)
    show_prototypes(viewer, input_layer, result.prototypes, result.cluster_sizes())
    made = [names["prototypes"], names["prototype_labels"]]
    input_layer.metadata["ticlust_assignments"] = pd.DataFrame(assignment_features(result))
    order = sorted_order(result)
    made.append(set_image(viewer, names["sorted"], np.asarray(input_layer.data)[order], visible=False,
                          translate=tuple(input_layer.translate), scale=tuple(input_layer.scale),
                          metadata={"order": order, "labels": result.labels[order]}, **image_kwargs(input_layer)).name)
    if result.aligned is not None and result.aligned.shape[0] == result.n:
        made.append(set_image(viewer, names["aligned"], for_display(result.aligned, input_layer),
                              translate=(0.0,) * (input_layer.ndim - 2) + tuple(place(input_layer, scene.aligned_offset)),
                              scale=tuple(input_layer.scale),
                              metadata={"aligned_kind": result.aligned_kind}, **image_kwargs(input_layer)).name)
    if result.grids is not None and result.grids.shape[0] == result.n:
        made.append(update_grid(viewer, input_layer, result).name)
    return made


def clip_path(points: np.ndarray, lo, hi, refine: int = 6) -> list[np.ndarray]:
    """The parts of a polyline (P, 2) that lie inside the box lo…hi (a finely resampled cut)."""
    t = np.linspace(0, 1, refine, endpoint=False)
    if len(points) > 1:
        steps = points[:-1, None] + t[None, :, None] * np.diff(points, axis=0)[:, None]
        dense = np.concatenate([steps.reshape(-1, 2), points[-1:]], axis=0)
    else:
        dense = points
    inside = np.all((dense >= lo) & (dense <= hi), axis=1)
    pieces, start = [], None
    for i, ok in enumerate(np.append(inside, False)):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            if i - start >= 2:
                pieces.append(dense[start:i])
            start = None
    return pieces


def grid_paths(grid: np.ndarray, frame: int | None = None, bounds=None, channels: int = 0) -> list[np.ndarray]:
    """The rows and columns of one (gh, gw, 2) (x, y) grid as napari paths in (row, col) order, cut to
    ``bounds`` ((row0, col0), (row1, col1)) when given, with leading frame (and channel) coordinates."""
    yx = grid[..., ::-1]
    lines = [yx[r] for r in range(yx.shape[0])] + [yx[:, c] for c in range(yx.shape[1])]
    if bounds is not None:
        lines = [piece for line in lines for piece in clip_path(line, np.asarray(bounds[0]), np.asarray(bounds[1]))]
    if frame is None:
        return lines
    leads = [[frame]] if not channels else [[frame, c] for c in range(channels)]
    return [np.column_stack([np.tile(lead, (len(line), 1)), line]) for lead in leads for line in lines]


def update_grid(viewer, input_layer, result: ClusteringResult):
    """Draw the warp grid of the image under the slider only (many paths are slow in napari), cut to
    the image so that it never runs over the prototypes or the inspector."""
    frame = int(viewer.dims.current_step[0]) if viewer.dims.ndim >= 3 else 0
    frame = min(max(frame, 0), result.n - 1)
    return draw_grid(viewer, input_layer, result.grids[frame], int(result.labels[frame]), frame)


def draw_grid(viewer, input_layer, grid: np.ndarray, cluster: int, frame: int | None = None):
    """One item's warp grid ((gh, gw, 2) of (x, y) pixels of the item) over the input layer, in its cluster's colour,
    cut to the item's box; ``frame``: the item's place on a stack's slider (None: a 2-D input layer)."""
    h, w = input_layer.data.shape[-2:] if not is_rgb(input_layer) else input_layer.data.shape[-3:-1]
    channels = int(input_layer.data.shape[1]) if channel_first_display(input_layer) else 0
    paths = grid_paths(place(input_layer, np.asarray(grid)[..., ::-1])[..., ::-1], frame,
                       tuple(tuple(place(input_layer, corner)) for corner in ((-0.5, -0.5), (h - 0.5, w - 0.5))), channels)
    width = SCREEN_WIDTHS["grid"] / max(float(viewer.scene.camera.zoom), 1e-6)
    return set_shapes(viewer, layer_names(input_layer.name)["grid"], paths, "path", cluster_color(int(cluster)), width,
                      metadata={"screen_widths": [SCREEN_WIDTHS["grid"]] * len(paths), "item": frame})


def pose_text(result, item: int) -> str:
    """How a rigidly aligned item (rigid-kmeans, rigid-pssc) sits against its prototype — the angle found by
    the exhaustive search and, when flips were searched, whether it is a mirror image — for the status line
    beside the inspector; empty for methods that keep no rigid pose."""
    params = getattr(result, "params", None) or {}
    if "angle" not in params or not 0 <= item < len(params["angle"]):
        return ""
    degrees = float(np.degrees(params["angle"][item])) % 360.0
    mirrored = "flip" in params and bool(params["flip"][item])
    return f"; pose: turned {degrees:.0f}°" + (", mirrored" if mirrored else "")


def show_inspector(viewer, input_layer, aligned: np.ndarray, scores: np.ndarray, chosen: int, runner_up: int,
                   item: int, later=None) -> None:
    """Every prototype aligned onto the current image, on a grid under it, each with its score above
    it; the chosen prototype framed in yellow, the runner-up in blue, the rest in grey (DTI Fig. 2b).

    ``scores``, ``chosen`` and ``runner_up`` are the caller's one source of truth (the result's own
    assignment for a fitted item); ``aligned`` only supplies the pictures. ``later(draw)``, where given, runs
    ``draw`` in the event loop's next turn: the pictures are drawn now, the scores in the next turn and the frames
    in the one after (the first drawing into each layer and the repaint after it take a turn of their own).
    """
    names = layer_names(input_layer.name)
    k, h, w = aligned.shape[:3]
    scene = Scene(h, w, k)
    cols, offset, u = scene.inspector_columns, tuple(place(input_layer, scene.inspector_offset)), unit(input_layer)
    strip = for_display(tiles_grid(aligned, scene, cols), input_layer, stacked=False)
    info = {"item": int(item), "chosen": int(chosen), "runner_up": int(runner_up), "scores": np.asarray(scores).copy()}
    role = ["chosen" if i == chosen else "runner_up" if i == runner_up else "other" for i in range(k)]
    colors = [CHOSEN_COLOR if r == "chosen" else RUNNER_UP_COLOR if r == "runner_up" else OTHER_COLOR for r in role]

    def scores_band():
        texts = [f"{i}: {s:.3g}" for i, s in enumerate(scores)]
        raster, factor = text_raster(scene, cols, texts, colors)
        set_text_layer(viewer, names["scores"], raster, factor, offset, metadata={**info, "texts": texts}, unit=u)

    def frames():
        boxes = [u * np.array([[y - 0.5, x - 0.5], [y - 0.5, x + w - 0.5], [y + h - 0.5, x + w - 0.5],
                               [y + h - 0.5, x - 0.5]]) + np.asarray(offset) for y, x in scene.tile_origins(cols)]
        px = [SCREEN_WIDTHS[r] for r in role]
        zoom = max(float(viewer.scene.camera.zoom), 1e-6)
        existed = names["frames"] in viewer.layers
        set_shapes(viewer, names["frames"], boxes, "rectangle", np.array(colors), [p / zoom for p in px],
                   metadata={**info, "screen_widths": px})
        if not existed:
            viewer.layers.selection.active = input_layer

    set_image(viewer, names["inspector"], strip, translate=offset, scale=(u, u), metadata=dict(info),
              **image_kwargs(input_layer))
    def scores_then_frames():
        scores_band()
        if later is None:
            frames()
        else:
            later(frames)
    if later is None:
        scores_then_frames()
    else:
        later(scores_then_frames)


# ---- landmark results ----------------------------------------------------------------------------
def shape_index_of_points(points_layer) -> np.ndarray:
    """For each point, the index of its shape (shapes numbered in order of first appearance)."""
    shape_ids = np.asarray(points_layer.features["shape_id"]).tolist()
    order = {sid: i for i, sid in enumerate(dict.fromkeys(shape_ids))}
    return np.array([order[s] for s in shape_ids])


def landmark_gallery(landmarks: np.ndarray, labels: np.ndarray, spacing: float) -> np.ndarray:
    """Each (x, y) shape centred in its own cell of a gallery, one row of cells per cluster
    (clusters in order), as napari (row, col) points shape by shape."""
    n, n_lm = landmarks.shape[:2]
    centred = landmarks - landmarks.mean(axis=1, keepdims=True)
    cell = np.zeros((n, 2))
    per_row = max(1, math.ceil(math.sqrt(n)))
    row = 0
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        for j, s in enumerate(members):
            cell[s] = (row + j // per_row, j % per_row)
        row += math.ceil(len(members) / per_row) + 0.5
    yx = centred[:, :, ::-1] + (cell * spacing)[:, None, :]
    return yx.reshape(n * n_lm, 2)


def show_landmark_result(viewer, input_layer, result: ClusteringResult) -> list[str]:
    """A gallery of the shapes coloured by cluster (one row of cells per cluster), the Procrustes-aligned
    view beside it, one mean ± 2 sd ellipse per landmark per cluster (tinted), the cluster mean shapes,
    and a colour legend.

    The input layer's data stay as they are (it is hidden: the overlaid raw shapes form an unreadable
    ring); its ``features`` gain ``cluster`` and ``score`` columns.
    """
    from ..io.landmarks import points_to_landmarks  # napari-free geometry

    names = layer_names(input_layer.name)
    shape_of_point = shape_index_of_points(input_layer)
    own = result.scores[np.arange(result.n), result.labels]
    features = input_layer.features.copy()
    features["cluster"] = result.labels[shape_of_point]
    features["score"] = own[shape_of_point]
    input_layer.features = features
    input_layer.visible = False
    raw, _ = points_to_landmarks(np.asarray(input_layer.data), np.asarray(features["shape_id"]),
                                 np.asarray(features["landmark"]) if "landmark" in features else None)
    span = float(np.max(np.ptp(raw, axis=1))) if raw.size else 1.0
    spacing = 1.25 * max(span, 1e-9)
    gallery = landmark_gallery(raw, result.labels, spacing) + origin(input_layer)
    size = 0.09 * spacing
    point_colors = np.array([cluster_color(int(result.labels[s])) for s in np.repeat(np.arange(result.n), raw.shape[1])])
    _set_points(viewer, names["landmarks"], gallery, point_colors, size)
    made = [names["landmarks"]]
    zoom = _show_aligned_shapes(viewer, names, result, gallery, spacing, size, made)
    _show_landmark_legend(viewer, names, result, gallery, spacing, zoom)
    made.append(names["legend"])
    return made


def _show_aligned_shapes(viewer, names: dict, result: ClusteringResult, gallery: np.ndarray, spacing: float,
                         size: float, made: list) -> float:
    """The aligned view right of the gallery (aligned shapes, per-landmark ellipses, the mean shapes), scaled so
    that a mean shape is as wide as the gallery is tall at most; appends the layers it made, returns the zoom."""
    from ..io.landmarks import landmarks_to_points
    from ..transforms.procrustes import ellipse_corners

    aligned_frame = result.aligned if result.aligned is not None else result.prototypes
    g_lo, g_hi = gallery.min(0), gallery.max(0)
    a_span = float(np.ptp(aligned_frame.reshape(-1, 2), axis=0).max()) or 1.0
    zoom = (g_hi[0] - g_lo[0] + spacing) / a_span
    centre = aligned_frame.reshape(-1, 2).mean(0)[::-1]
    place = lambda yx: (yx - centre) * zoom + np.array([(g_lo[0] + g_hi[0]) / 2, g_hi[1] + spacing + a_span * zoom / 2])  # noqa: E731
    if result.aligned is not None and result.aligned.shape[0] == result.n:
        coords, shape_id, landmark = landmarks_to_points(result.aligned)
        colors = np.array([cluster_color(int(result.labels[s])) for s in shape_id])
        layer = _set_points(viewer, names["aligned"], place(coords), colors, size * 0.8)
        layer.features = {"shape_id": shape_id, "landmark": landmark, "cluster": result.labels[shape_id]}
        layer.opacity = 0.6
        made.append(names["aligned"])
    means = result.prototypes  # (K, L, 2) (x, y), in the frame of the aligned shapes
    k = means.shape[0]
    if result.covariances is not None:
        corners = ellipse_corners(means, result.covariances)  # (K, L, 4, 2)
        ellipses = [place(box[:, ::-1]) for box in corners.reshape(-1, 4, 2)]
        edge = np.repeat([cluster_color(c) for c in range(k)], means.shape[1], axis=0)
        face = edge.copy()
        face[:, 3] = 0.3
        px = [SCREEN_WIDTHS["ellipse"]] * len(ellipses)
        set_shapes(viewer, names["ellipses"], ellipses, "ellipse", edge, [p / viewer.scene.camera.zoom for p in px],
                   face_color=face, metadata={"screen_widths": px}, blending="translucent_no_depth", opacity=1.0)
        made.append(names["ellipses"])
    px = [SCREEN_WIDTHS["mean"]] * k
    # closed paths, not polygons: a polygon's transparent face hid its own edges under software OpenGL
    loops = [place(np.vstack([m, m[:1]])[:, ::-1]) for m in means]
    set_shapes(viewer, names["means"], loops, "path", np.array([cluster_color(c) for c in range(k)]),
               [p / viewer.scene.camera.zoom for p in px], metadata={"screen_widths": px},
               blending="translucent_no_depth", opacity=1.0)
    made.append(names["means"])
    return zoom


def _show_landmark_legend(viewer, names: dict, result: ClusteringResult, gallery: np.ndarray, spacing: float,
                          zoom: float) -> None:
    """The colour legend left of the gallery: each cluster's size and what the two views show."""
    k = result.prototypes.shape[0]
    sizes = result.cluster_sizes()
    texts = [f"cluster {c}: {sizes[c]} shapes" for c in range(k)] + [
        "left: every shape, by cluster (input units)", "right: Procrustes-aligned, mean ± 2 sd per landmark"]
    colors = [cluster_color(c) for c in range(k)] + [np.ones(4), np.ones(4)]
    legend = Scene(1, 80, len(texts))
    raster, factor = text_raster(legend, 1, texts, colors)
    unit = 0.1 * spacing
    g_lo = gallery.min(0)
    offset = (g_lo[0] - (legend.grid_shape(1)[0] + 2) * unit, g_lo[1])
    set_text_layer(viewer, names["legend"], raster, factor, offset, unit=unit,
                   metadata={"texts": texts, "units": "gallery: the input's own units; aligned view: Procrustes-"
                                                      f"aligned coordinates scaled by {zoom:.3g} to fit"})


def _set_points(viewer, name: str, coords: np.ndarray, colors: np.ndarray, size: float):
    if name in viewer.layers:
        layer = viewer.layers[name]
        layer.data = coords
        layer.face_color = colors
        layer.size = size
        return layer
    return viewer.add_points(coords, name=name, face_color=colors, size=size, border_width=0)


def highlight_shapes(viewer, input_layer, result: ClusteringResult, shapes: list[int]) -> None:
    """Enlarge the chosen shapes' landmarks (gallery and aligned view) and ring them in white."""
    names = layer_names(input_layer.name)
    for key in ("landmarks", "aligned"):
        if names[key] not in viewer.layers:
            continue
        layer = viewer.layers[names[key]]
        n_lm = len(layer.data) // max(result.n, 1)
        chosen = np.isin(np.repeat(np.arange(result.n), n_lm), shapes)
        base = float(np.min(layer.size)) if np.size(layer.size) else 1.0
        layer.size = np.where(chosen, base * 2.5, base)
        layer.border_color = np.where(chosen[:, None], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0])
        layer.border_width = np.where(chosen, 0.3, 0.0)


# ---- objects from a segmentation -----------------------------------------------------------------
def show_objects(viewer, field_layer, stack: np.ndarray, metadata: dict):
    """The cut-out objects as an image stack (one object per slider step) to the right of the field,
    so that the per-item layers (aligned, sorted, inspector, prototypes) work on it as on any stack.
    Small objects beside a large field are shown enlarged (a whole zoom factor, about a sixth of the
    field's height per object) so that they stay readable when the view holds both."""
    name = layer_names(field_layer.name)["objects"]
    lo, hi = field_extent(field_layer)
    u = unit(field_layer) * max(1, round((hi[0] - lo[0]) / unit(field_layer) / (6 * stack.shape[1])))
    gap = max(8.0 * unit(field_layer), (hi[1] - lo[1]) / 32)
    edge = unit(field_layer) / 2             # extents run between pixel centres: align the top edges
    translate, scale = (0.0, float(lo[0] - edge + u / 2), float(hi[1] + edge + gap + u / 2)), (1.0, u, u)
    rgb = stack.ndim == 4 and is_rgb(field_layer)
    if stack.ndim == 4 and not rgb:          # channels on a slider of their own, as for any multichannel stack
        stack, translate, scale = np.moveaxis(stack, -1, 1), (0.0, *translate), (1.0, *scale)
    return set_image(viewer, name, stack, translate=translate, scale=scale, metadata=dict(metadata),
                     **({"rgb": True} if rgb else {"colormap": "gray"}))


def field_extent(layer) -> tuple[np.ndarray, np.ndarray]:
    """(top-left, bottom-right) of a layer's last two axes in world pixels."""
    extent = np.asarray(layer.extent.world)[:, -2:]
    return extent[0], extent[1]


def paint_objects(viewer, labels_layer, table: dict, assigned: dict, name: str):
    """A Labels layer over the field with every kept object painted in its cluster's colour.

    Its values are the object's place in the stack + 1 (so that a time series, where an id names one
    object per frame, stays unambiguous), and its ``features`` are the per-object table (label id,
    frame, centroid, …) with the assignment columns ``assigned`` (cluster, score, runner-up, …: a result's
    :func:`assignment_features`, or what :func:`ticlust.plate.view.assign_objects` returns), keyed by value
    (``index``); objects marked ``outlier`` are grey. The input Labels layer is read, never changed.
    """
    from napari.utils.colormaps import DirectLabelColormap

    from ..plate.view import object_values

    painted = object_values(labels_layer.data, table["label"], table["frame"])
    clusters = np.asarray(assigned["cluster"])
    shown = np.where(np.asarray(assigned["outlier"], bool), -1, clusters) if "outlier" in assigned else clusters
    colors = {None: np.zeros(4), 0: np.zeros(4)}
    colors.update({pos + 1: cluster_color(int(c)) for pos, c in enumerate(shown)})
    features = pd.DataFrame({"index": np.arange(1, len(clusters) + 1), **{c: np.asarray(v) for c, v in table.items()}})
    for key, values in assigned.items():
        features[key] = np.asarray(values)
    kwargs = dict(colormap=DirectLabelColormap(color_dict=colors), features=features, opacity=0.55,
                  metadata={"ticlust_objects": True})
    if name in viewer.layers:
        layer = viewer.layers[name]
        layer.data = painted
        for key, value in kwargs.items():
            setattr(layer, key, value)
        return layer
    return viewer.add_labels(painted, name=name, scale=labels_layer.scale, translate=labels_layer.translate, **kwargs)


def click_without_drag(event):
    """The body of a napari mouse-drag callback (``yield from`` it): it yields while the button is down and returns
    True when the mouse did not move in between — a click, which picks; a drag pans the view and picks nothing."""
    yield
    dragged = False
    while event.type == "mouse_move":
        dragged = True
        yield
    return not dragged


def object_at(painted_layer, position) -> int | None:
    """The stack index of the object under a world ``position`` of the painted layer (None: background)."""
    coords = np.round(painted_layer.world_to_data(np.asarray(position)[-painted_layer.ndim:])).astype(int)
    if np.any(coords < 0) or np.any(coords >= np.asarray(painted_layer.data.shape)):
        return None
    value = int(painted_layer.data[tuple(coords)])
    return value - 1 if value > 0 else None
