"""The clustering methods. Importing this package registers every method: the built-in ones below, in the
order the widget and ``ticlust methods`` list them, then any other module of this package, by name — so a
new method is one file here and nothing else."""
import importlib
import pkgutil

from .base import Method, available_methods, get_method, param, register  # noqa: F401

from . import kmeans  # noqa: F401,E402
from . import gmm  # noqa: F401,E402
from . import shape_kmeans  # noqa: F401,E402
from . import procrustes_kmeans  # noqa: F401,E402
from . import st_kmeans  # noqa: F401,E402
from . import nt  # noqa: F401,E402
from . import pssc  # noqa: F401,E402
from . import dti  # noqa: F401,E402

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")   # the rest: a method file dropped in is registered
