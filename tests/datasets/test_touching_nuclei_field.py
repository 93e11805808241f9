"""The generated fields a nucleus segmentation is measured on: a partition of touching nuclei, the same for a seed."""
import numpy as np
import pytest

from ticlust.datasets.touching_nuclei import DIFFICULTIES, touching_nuclei_field
from ticlust.errors import InputError


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_fields_are_seeded_and_their_truth_is_every_nucleus(difficulty):
    a = touching_nuclei_field(difficulty, n=30, shape=(200, 200), seed=1)
    b = touching_nuclei_field(difficulty, n=30, shape=(200, 200), seed=1)
    assert np.array_equal(a.image, b.image) and np.array_equal(a.labels, b.labels)
    assert a.image.dtype == np.uint16 and a.labels.dtype == np.int32
    assert set(np.unique(a.labels)) == set(range(31)) and 14 <= a.diameter <= 22
    pairs = {(int(x), int(y)) for x, y in zip(a.labels[:, :-1].ravel(), a.labels[:, 1:].ravel()) if x and y and x != y}
    assert (len(pairs) == 0) == (difficulty == "separate")         # touching nuclei meet, separate ones never


def test_uneven_fields_are_brighter_on_one_side_and_bad_difficulty():
    f = touching_nuclei_field("uneven", n=20, shape=(256, 256), seed=0)
    background = f.image[f.labels == 0].astype(float)
    assert np.ptp([np.median(q) for q in (f.image[:64][f.labels[:64] == 0], f.image[-64:][f.labels[-64:] == 0],
                                          f.image[:, :64][f.labels[:, :64] == 0],
                                          f.image[:, -64:][f.labels[:, -64:] == 0])]) > 0.2 * np.median(background)
    with pytest.raises(InputError, match="difficulty='hard' is not known: choose one of separate, touching"):
        touching_nuclei_field("hard")
    with pytest.raises(InputError, match="do not fit"):
        touching_nuclei_field("separate", n=400, shape=(64, 64))
