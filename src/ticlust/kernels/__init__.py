"""The shared maths of the clustering methods, with no method of its own (below ``ticlust.methods``: what
two methods share lives here, never in one method's file).

- :mod:`.kmeans` — rows of a stack on a device, distances, k-means++, Lloyd, bisection, runner-up costs;
- :mod:`.spectral` — U-SPEC's nearest representatives, affinities, transfer cut and embedding extension;
- :mod:`.pca` — PCA (covariance or Gram matrix) and POC;
- :mod:`.pssc` — PSSC's pipeline, config and state (pssc, rigid-pssc);
- :mod:`.aligned_lloyd` — AI/ST K-means' aligned Lloyd iteration (ai-kmeans, st-kmeans, rigid-kmeans' refinement);
- :mod:`.rigid_lloyd` — k-means under the rigid distance (rigid-kmeans, rigid-pssc);
- :mod:`.chunked` — the same Lloyd steps over a store's fit sample, one pure task per chunk on a backend.

The package imports only :mod:`.kmeans` and :mod:`.spectral`; the others are imported by name.
"""
from .kmeans import (BISECT_BLOCK, IN_MEMORY_BYTES, LloydStep, Rows, as_rows, assign, bisect,  # noqa: F401
                     keep_pinned, kmeans_plus_plus, kmeans_plus_plus_steps, lloyd, lloyd_e_step, lloyd_steps,
                     own_and_runner_up, partition_means, random_init, squared_distances)
from .spectral import affinities, extend_embedding, kmeans_restarts, transfer_cut  # noqa: F401
