"""The ``invariances`` choice of the aligning methods (DTI K-means and GMM, AI and ST K-means): what a
warp may change when it aligns an item with a prototype. One name, one meaning in every method.

A clustering ignores exactly what its warps can undo. On digits a bent stroke is a nuisance; on nuclei
cut from a segmentation the outline is the signal: a warp that may stretch a disc into an ellipse, or
pinch an ellipse into a dumbbell, erases the difference between the kinds. The families, from the
most to the least constrained:

- ``rigid``: position and orientation (rotation + translation);
- ``similarity``: position, orientation and size (+ isotropic scale);
- ``affine``: + shear and stretch along any axis;
- ``deformable``: + local bending (DTI: morphology and thin-plate spline; ST K-means: thin-plate spline);
- ``auto``: the method's paper default for image stacks, and ``OBJECTS`` for objects cut out of a
  segmentation (``api.object_params``), whose shape is what tells them apart.

Brightness and contrast (DTI's colour module) are allowed in every family.

Where the alignment starts (``start``, AI/ST K-means and DTI) is a separate choice: a gradient alignment
from the identity stops in the nearest local minimum, so a pattern turned 120° is never found; ``rigid``
(``rigid+flip``) first searches every in-plane angle (and the mirror) and every shift exhaustively
(``transforms.rigid``) and the warps refine that pose: for items with no preferred orientation.
"""
from __future__ import annotations

from .base import param

FAMILIES = ("rigid", "similarity", "affine", "deformable")
#: What ``auto`` means for objects from a segmentation: shape kept, size ignored (docs/objects.md).
OBJECTS = "similarity"


def invariances_param(auto: str, families: tuple[str, ...] = FAMILIES):
    """The ``invariances`` config field: ``auto`` (described by ``auto``) or one of ``families``."""
    return param("auto", "What the warps may change: rigid (shift, rotation), similarity (+ size), affine (+ shear, "
                 f"stretch){', deformable (+ local bending)' if 'deformable' in families else ''}; auto: {auto} "
                 f"for image stacks, {OBJECTS} for objects from a segmentation",
                 choices=("auto", *families), essential=True)


#: Where each alignment starts: the identity (the papers), or the best global rigid pose [+ mirror flip].
STARTS = ("identity", "rigid", "rigid+flip")


def start_param(refine: str):
    """The ``start`` config field: ``refine`` says what the method's warps do from the rigid pose."""
    return param("identity", "Where every (item, prototype) alignment starts: identity (the paper), or rigid / "
                 "rigid+flip: the best rotation [+ mirror] and shift, searched exhaustively over every angle, "
                 f"which {refine} (finds a pattern at any angle; for items with no preferred orientation)",
                 choices=STARTS)
