"""Sample data for File > Open Sample > ticlust (made on the fly, no download)."""
from __future__ import annotations

from ..data import sample


def digits():
    images, labels = sample("digits")
    return [(images, {"name": "digits", "metadata": {"labels": labels}}, "image")]


def glyphs():
    images, labels = sample("glyphs")
    return [(images, {"name": "glyphs", "metadata": {"labels": labels}}, "image")]
