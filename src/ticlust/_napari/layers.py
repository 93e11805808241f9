"""Turning a ClusteringResult into napari layers, reusing layers by name (GUIDE §3)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..result import ClusteringResult

CLUSTER_COLORS = np.array([
    [0.12, 0.47, 0.71], [1.00, 0.50, 0.05], [0.17, 0.63, 0.17], [0.84, 0.15, 0.16], [0.58, 0.40, 0.74],
    [0.55, 0.34, 0.29], [0.89, 0.47, 0.76], [0.50, 0.50, 0.50], [0.74, 0.74, 0.13], [0.09, 0.75, 0.81],
])


def cluster_color(label: int) -> np.ndarray:
    """A distinct RGBA colour per cluster (cycling after ten); grey for rejected items (-1)."""
    if label < 0:
        return np.array([0.3, 0.3, 0.3, 1.0])
    return np.append(CLUSTER_COLORS[label % len(CLUSTER_COLORS)], 1.0)


def layer_names(input_name: str) -> dict[str, str]:
    """The names of every layer ticlust makes for an input layer."""
    return {key: f"{input_name} {suffix}" for key, suffix in [
        ("prototypes", "prototypes"), ("sorted", "sorted by cluster"), ("aligned", "aligned"),
        ("grid", "warp grid"), ("inspector", "inspector"), ("frames", "inspector frames"), ("landmarks", "clusters"),
        ("ellipses", "landmark ellipses"), ("means", "mean shapes")]}


def set_image(viewer, name: str, data, **kwargs):
    """Update the Image layer called ``name`` in place, or add it."""
    if name in viewer.layers:
        layer = viewer.layers[name]
        layer.data = data
        layer.reset_contrast_limits()
        return layer
    return viewer.add_image(data, name=name, **kwargs)


def set_shapes(viewer, name: str, shapes: list, shape_type: str, edge_color, **kwargs):
    """Replace the Shapes layer ``name`` (or add it) with ``shapes`` of one type."""
    if name in viewer.layers:
        layer = viewer.layers[name]
        layer.data = []
        if shapes:
            layer.add(shapes, shape_type=shape_type, edge_color=edge_color, face_color="transparent")
        return layer
    return viewer.add_shapes(shapes or None, shape_type=shape_type, edge_color=edge_color, face_color="transparent",
                             name=name, **kwargs)


def sorted_order(result: ClusteringResult) -> np.ndarray:
    """Items ordered by cluster, closest to the prototype first within each cluster."""
    own = result.scores[np.arange(result.n), result.labels]
    return np.lexsort((own, result.labels))


def assignment_features(result: ClusteringResult) -> dict[str, np.ndarray]:
    """Per-item columns for ``layer.features``."""
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


def grid_paths(grid: np.ndarray, frame: int | None = None) -> list[np.ndarray]:
    """The rows and columns of one (gh, gw, 2) (x, y) grid as napari paths in (row, col) order."""
    yx = grid[..., ::-1]
    lines = [yx[r] for r in range(yx.shape[0])] + [yx[:, c] for c in range(yx.shape[1])]
    if frame is not None:
        lines = [np.column_stack([np.full(len(line), frame), line]) for line in lines]
    return lines


def show_image_result(viewer, input_layer, result: ClusteringResult) -> list[str]:
    """Prototypes, assignments, sorted view, aligned stack and warp grid for an image result.

    Returns the names of the layers it made or updated. The input layer's data is left alone.
    napari Image layers have no ``features``, so the per-item assignment table goes into the input
    layer's ``metadata["ticlust_assignments"]`` (a pandas DataFrame, one row per image).
    """
    names = layer_names(input_layer.name)
    rgb = result.prototypes.ndim == 4 and result.prototypes.shape[-1] == 3
    made = [set_image(viewer, names["prototypes"], result.prototypes, rgb=rgb, colormap=None if rgb else "gray").name]
    input_layer.metadata["ticlust_assignments"] = pd.DataFrame(assignment_features(result))
    order = sorted_order(result)
    made.append(set_image(viewer, names["sorted"], np.asarray(input_layer.data)[order], rgb=rgb,
                          colormap=None if rgb else "gray", visible=False,
                          metadata={"order": order, "labels": result.labels[order]}).name)
    if result.aligned is not None and result.aligned.shape[0] == result.n:
        made.append(set_image(viewer, names["aligned"], result.aligned, rgb=rgb, colormap=None if rgb else "gray",
                              opacity=0.6, blending="additive",
                              metadata={"aligned_kind": result.aligned_kind}).name)
    if result.grids is not None and result.grids.shape[0] == result.n:
        made.append(update_grid(viewer, input_layer, result).name)
    return made


def update_grid(viewer, input_layer, result: ClusteringResult):
    """Draw the warp grid of the image under the slider only (many paths are slow in napari)."""
    frame = int(viewer.dims.current_step[0]) if viewer.dims.ndim >= 3 else 0
    frame = min(max(frame, 0), result.n - 1)
    color = cluster_color(int(result.labels[frame]))
    return set_shapes(viewer, layer_names(input_layer.name)["grid"], grid_paths(result.grids[frame], frame), "path",
                      color, edge_width=0.25)


def shape_index_of_points(points_layer) -> np.ndarray:
    """For each point, the index of its shape (shapes numbered in order of first appearance)."""
    shape_ids = np.asarray(points_layer.features["shape_id"]).tolist()
    order = {sid: i for i, sid in enumerate(dict.fromkeys(shape_ids))}
    return np.array([order[s] for s in shape_ids])


def show_landmark_result(viewer, input_layer, result: ClusteringResult) -> list[str]:
    """Landmarks coloured by cluster, the Procrustes-aligned view, one mean ± 2 sd ellipse per landmark
    per cluster, and the cluster mean shapes as closed polygons.

    The input layer's data stay as they are; its ``features`` gain ``cluster`` and ``score`` columns.
    """
    from ..landmarks import ellipse_corners, landmarks_to_points  # napari-free geometry

    names = layer_names(input_layer.name)
    shape_of_point = shape_index_of_points(input_layer)
    own = result.scores[np.arange(result.n), result.labels]
    features = input_layer.features.copy()
    features["cluster"] = result.labels[shape_of_point]
    features["score"] = own[shape_of_point]
    input_layer.features = features
    size = float(np.mean(input_layer.size)) if np.size(input_layer.size) else 3.0
    point_colors = np.array([cluster_color(int(c)) for c in features["cluster"]])
    _set_points(viewer, names["landmarks"], np.asarray(input_layer.data), point_colors, size)
    made = [names["landmarks"]]
    # The aligned view (aligned shapes, ellipses, means) sits to the right of the raw landmarks.
    raw = np.asarray(input_layer.data)[:, -2:]
    aligned_frame = result.aligned if result.aligned is not None else result.prototypes
    gap = 0.15 * max(np.ptp(raw[:, 1]), 1e-9)
    offset = np.array([0.0, raw[:, 1].max() + gap - aligned_frame[..., 0].min()])
    if result.aligned is not None and result.aligned.shape[0] == result.n:
        coords, shape_id, landmark = landmarks_to_points(result.aligned)
        colors = np.array([cluster_color(int(result.labels[s])) for s in shape_id])
        layer = _set_points(viewer, names["aligned"], coords + offset, colors, size * 0.7)
        layer.features = {"shape_id": shape_id, "landmark": landmark, "cluster": result.labels[shape_id]}
        made.append(names["aligned"])
    means = result.prototypes  # (K, L, 2) (x, y), in the frame of the aligned shapes
    if result.covariances is not None:
        corners = ellipse_corners(means, result.covariances)  # (K, L, 4, 2)
        ellipses = [box[:, ::-1] + offset for box in corners.reshape(-1, 4, 2)]
        edge = np.repeat([cluster_color(c) for c in range(means.shape[0])], means.shape[1], axis=0)
        set_shapes(viewer, names["ellipses"], ellipses, "ellipse", edge, edge_width=size * 0.25)
        made.append(names["ellipses"])
    set_shapes(viewer, names["means"], [m[:, ::-1] + offset for m in means], "polygon",
               np.array([cluster_color(c) for c in range(means.shape[0])]), edge_width=size * 0.4)
    made.append(names["means"])
    return made


def _set_points(viewer, name: str, coords: np.ndarray, colors: np.ndarray, size: float):
    if name in viewer.layers:
        layer = viewer.layers[name]
        layer.data = coords
        layer.face_color = colors
        return layer
    return viewer.add_points(coords, name=name, face_color=colors, size=size, border_width=0)


def highlight_shapes(viewer, input_layer, result: ClusteringResult, shapes: list[int]) -> None:
    """Enlarge the aligned landmarks of the given shapes and ring them in white."""
    name = layer_names(input_layer.name)["aligned"]
    if name not in viewer.layers:
        return
    layer = viewer.layers[name]
    chosen = np.isin(np.asarray(layer.features["shape_id"]), shapes)
    base = float(np.min(layer.size)) if np.size(layer.size) else 1.0
    layer.size = np.where(chosen, base * 2.5, base)
    layer.border_color = np.where(chosen[:, None], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0])
    layer.border_width = np.where(chosen, 0.2, 0.0)


def montage(tiles: np.ndarray, gap: int = 2) -> np.ndarray:
    """K tiles (K, H, W[, 3]) side by side in one row with ``gap`` blank pixels between them."""
    k, h, w = tiles.shape[:3]
    out = np.zeros((h, k * (w + gap) - gap, *tiles.shape[3:]), dtype=np.float32)
    for i, tile in enumerate(tiles):
        out[:, i * (w + gap): i * (w + gap) + w] = tile
    return out


def show_inspector(viewer, input_layer, aligned: np.ndarray, scores: np.ndarray, chosen: int, gap: int = 2) -> None:
    """Every prototype aligned onto the current image, in a row under it, each framed with its score.

    so a user sees why the image went to its cluster and not to the runner-up (DTI paper, Fig. 2b):
    the chosen prototype is framed in yellow, the runner-up in blue, the rest in grey.
    """
    names = layer_names(input_layer.name)
    k, h, w = aligned.shape[:3]
    rgb = aligned.ndim == 4 and aligned.shape[-1] == 3
    top = h + 2 * gap + 2
    strip = montage(aligned, gap)
    if names["inspector"] in viewer.layers:
        layer = viewer.layers[names["inspector"]]
        layer.data = strip
    else:
        viewer.add_image(strip, name=names["inspector"], translate=(top, 0), rgb=rgb, colormap=None if rgb else "gray")
    order = np.argsort(scores)
    runner = int(order[1]) if k > 1 and order[0] == chosen else int(order[0])
    boxes, colors, widths = [], [], []
    for i in range(k):
        x0 = i * (w + gap) - 0.5
        boxes.append(np.array([[top - 0.5, x0], [top - 0.5, x0 + w], [top + h - 0.5, x0 + w], [top + h - 0.5, x0]]))
        colors.append(np.array([1.0, 0.85, 0.0, 1.0]) if i == chosen else np.array([0.0, 0.8, 1.0, 1.0]) if i == runner
                      else np.array([0.45, 0.45, 0.45, 1.0]))
        widths.append(0.8 if i == chosen else 0.4 if i == runner else 0.2)
    frames = names["frames"]
    features = {"label": [f"{i}: {s:.3g}" for i, s in enumerate(scores)]}
    text = {"string": "{label}", "anchor": "upper_left", "translation": [-2.5, 0], "size": 8, "color": "white"}
    if frames in viewer.layers:
        layer = viewer.layers[frames]
        layer.data = []
        layer.add(boxes, shape_type="rectangle", edge_color=colors, edge_width=widths, face_color="transparent")
        layer.features = features
        layer.text = text
    else:
        viewer.add_shapes(boxes, shape_type="rectangle", edge_color=colors, edge_width=widths,
                          face_color="transparent", name=frames, features=features, text=text)
        viewer.layers.selection.active = input_layer
