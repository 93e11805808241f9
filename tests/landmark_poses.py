"""Test data helper shared by the landmark-method tests."""
import math

import numpy as np


def similar(shape, angle, scale, shift):
    """The shape (L, 2) rotated by angle, scaled and shifted: a new similarity pose."""
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return scale * shape @ rot.T + shift
