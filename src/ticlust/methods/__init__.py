"""The clustering methods. Importing this package registers every method (one import line each)."""
from .base import Method, available_methods, get_method, param, register  # noqa: F401

from . import kmeans  # noqa: F401,E402
from . import gmm  # noqa: F401,E402
from . import shape_kmeans  # noqa: F401,E402
from . import procrustes_kmeans  # noqa: F401,E402
from . import st_kmeans  # noqa: F401,E402
from . import nt  # noqa: F401,E402
from . import pssc  # noqa: F401,E402
from . import dti  # noqa: F401,E402
from . import rigid_kmeans  # noqa: F401,E402
from . import rigid_pssc  # noqa: F401,E402
