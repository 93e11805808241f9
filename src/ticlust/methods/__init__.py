"""The clustering methods. Importing this package registers every method: each module of the package is
imported (the built-in ones in the order below, which is the order the widget and ``ticlust methods``
list them; any other module after them, by name), so a new method is one file here and nothing else."""
import importlib
import pkgutil

from .base import Method, available_methods, get_method, param, register  # noqa: F401

_BUILT_IN = ("kmeans", "gmm", "shape_kmeans", "procrustes_kmeans", "st_kmeans", "nt", "pssc", "dti")
for _name in (*_BUILT_IN, *sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _BUILT_IN)):
    importlib.import_module(f"{__name__}.{_name}")
