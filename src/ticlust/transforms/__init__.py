"""Differentiable image transformations for transformation-invariant clustering (torch, napari-free).

Plain functions of parameter tensors (``affine_grid``, ``similarity_affine``, ``projective_grid``, ``tps_grid`` + ``warp``,
``color_apply``, ``morpho_apply``) for methods that optimise parameters directly, and modules plus
:class:`TransformSequence` for methods that predict them (DTI). Zero parameters are the identity.
``transforms.align`` is the alignment engine built on them: per-pair warps of images onto centroids
optimised by a batched Adam (ST and AI K-means); import it from there.
"""
from .core import (TPSBasis, affine_grid, affine_inverse, affine_matrix, affine_points, color_apply,  # noqa: F401
                   color_inverse, identity_points, lattice_pixels, morpho_apply, projective_grid,
                   projective_inverse, projective_matrix, projective_points, similarity_affine, to_normalized, to_pixels, tps_basis,
                   tps_grid, tps_inverse_points, tps_points, warp)
from .modules import (MODULE_NAMES, TPS, Affine, Color, Identity, Module, Morpho, Projective, Rigid,  # noqa: F401
                      Similarity, TransformSequence, make_module)
