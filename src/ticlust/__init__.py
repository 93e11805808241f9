"""ticlust: transformation-invariant clustering of image stacks and landmark shapes."""
__version__ = "0.1.0"

from .api import fit, predict, run  # noqa: E402
from .curation import refine  # noqa: E402
from .errors import InputError  # noqa: E402
from .readers import read_input  # noqa: E402
from .samples import sample  # noqa: E402
from .methods import available_methods, get_method  # noqa: E402
from .metrics import evaluate  # noqa: E402
from .nuclei import nuclei_field  # noqa: E402
from .objects import objects_from_labels, shapes_from_labels  # noqa: E402
from .result import ClusteringResult, load_result  # noqa: E402
from .store import ObjectStore, extract, open_objects  # noqa: E402

__all__ = ["fit", "run", "predict", "refine", "load_result", "ClusteringResult", "InputError", "available_methods",
           "get_method", "evaluate", "read_input", "sample", "__version__",
           "objects_from_labels", "shapes_from_labels", "nuclei_field", "extract", "open_objects", "ObjectStore"]
