"""Plates of many fields: listing fields, the on-disk object store, fit and predict on a store, the napari-free plate view."""
