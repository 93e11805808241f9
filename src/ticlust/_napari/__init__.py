"""The napari shell around ticlust: the only package that imports napari or Qt."""
