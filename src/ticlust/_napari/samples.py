"""Sample data for File > Open Sample > ticlust (made on the fly, no download)."""
from __future__ import annotations

from ..datasets.samples import sample


def digits():
    images, labels = sample("digits")
    return [(images, {"name": "digits", "metadata": {"labels": labels}}, "image")]


def glyphs():
    images, labels = sample("glyphs")
    return [(images, {"name": "glyphs", "metadata": {"labels": labels}}, "image")]


def shapes():
    """Landmark shapes as a Points layer: one point per landmark, grouped by a shape_id feature."""
    from ..io.landmarks import landmarks_to_points

    landmarks, labels = sample("shapes")
    coords, shape_id, landmark = landmarks_to_points(landmarks)
    features = {"shape_id": shape_id, "landmark": landmark, "true_group": labels[shape_id]}
    return [(coords, {"name": "shapes", "features": features, "size": 2.0, "face_color": "white"}, "points")]


def nuclei():
    """A generated fluorescence field of nuclei of three kinds and its segmentation (a Labels layer);
    the labels' metadata keep every id's true kind, so a run says how well it found them."""
    from ..datasets.nuclei import nuclei_field

    field = nuclei_field(n=60, shape=(320, 320), seed=0)   # small enough to see the objects beside the field
    return [(field.image, {"name": "nuclei", "colormap": "gray"}, "image"),
            (field.labels, {"name": "nuclei labels", "metadata": {"kinds": field.kinds, "kind_names": field.kind_names},
                            "opacity": 0.3}, "labels")]


def inner_nuclei():
    """A generated field of nuclei that differ inside (uniform, rim, foci, pole; one outline distribution, random
    angles) and its segmentation; the labels' metadata keep every id's true kind."""
    from ..datasets.inner_nuclei import inner_nuclei_field

    field = inner_nuclei_field(n=60, shape=(320, 320), seed=0)
    return [(field.image, {"name": "inner nuclei", "colormap": "gray"}, "image"),
            (field.labels, {"name": "inner nuclei labels", "metadata": {"kinds": field.kinds, "kind_names": field.kind_names},
                            "opacity": 0.3}, "labels")]
