"""Sample data for File > Open Sample > ticlust (made on the fly, no download)."""
from __future__ import annotations

from ..samples import sample


def digits():
    images, labels = sample("digits")
    return [(images, {"name": "digits", "metadata": {"labels": labels}}, "image")]


def glyphs():
    images, labels = sample("glyphs")
    return [(images, {"name": "glyphs", "metadata": {"labels": labels}}, "image")]


def shapes():
    """Landmark shapes as a Points layer: one point per landmark, grouped by a shape_id feature."""
    from ..landmarks import landmarks_to_points

    landmarks, labels = sample("shapes")
    coords, shape_id, landmark = landmarks_to_points(landmarks)
    features = {"shape_id": shape_id, "landmark": landmark, "true_group": labels[shape_id]}
    return [(coords, {"name": "shapes", "features": features, "size": 2.0, "face_color": "white"}, "points")]
