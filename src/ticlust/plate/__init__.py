"""Plates of many fields: listing fields, the on-disk object store, fit and predict on a store, the napari-free plate view."""

#: A store is fitted whole, without a sample, up to this many objects (``ticlust fit STORE``, the dock's Fit).
STORE_FIT_ALL = 50_000
