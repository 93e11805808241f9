"""segment_nuclei: the classical nucleus recipe finds touching nuclei, reads the channel it is told, reports its
steps as Progress events, leaves its input as it was, and refuses bad parameters in one sentence each."""
import numpy as np
import pytest
from scipy import ndimage

import ticlust
from ticlust.datasets.touching_nuclei import touching_nuclei_field
from ticlust.errors import InputError
from ticlust.events import Progress, drain, each_progress
from ticlust.metrics import segmentation_f1
from ticlust.objects.segment import STEPS, nuclei_steps, segment_nuclei


@pytest.fixture(scope="module")
def touching():
    return touching_nuclei_field("touching", n=40, shape=(256, 256), seed=3)


def test_touching_nuclei_are_found_one_by_one(touching):
    before = touching.image.copy()
    labels = segment_nuclei(touching.image, touching.diameter, keep_border=True)
    assert np.array_equal(touching.image, before)
    assert labels.dtype == np.int32 and labels.shape == touching.image.shape
    assert np.array_equal(np.unique(labels), np.arange(labels.max() + 1))            # ids 1..n, no gaps
    assert segmentation_f1(touching.labels, labels)["f1"] >= 0.85
    # the same field with a threshold that ignores the clumps' seams still splits them: seeds come from the blobs
    assert segmentation_f1(touching.labels, segment_nuclei(touching.image, touching.diameter, threshold="local",
                                                           keep_border=True))["f1"] >= 0.85


def test_the_nuclear_channel_by_index_or_name_gives_the_grey_result(touching):
    grey = segment_nuclei(touching.image, touching.diameter)
    noise = np.random.default_rng(0).integers(0, 4000, touching.image.shape).astype(np.uint16)
    last = np.stack([noise, touching.image, noise], axis=-1)
    assert np.array_equal(segment_nuclei(last, touching.diameter, channel=1), grey)
    assert np.array_equal(segment_nuclei(last, touching.diameter, channel="DNA", names=["ER", "DNA", "Mito"]), grey)
    first = np.moveaxis(last, -1, 0)
    assert np.array_equal(segment_nuclei(first, touching.diameter, channel=-2), grey)


def test_border_nuclei_and_debris_are_filtered(touching):
    inside = segment_nuclei(touching.image, touching.diameter)
    kept = segment_nuclei(touching.image, touching.diameter, keep_border=True)
    edge = np.concatenate([inside[0], inside[-1], inside[:, 0], inside[:, -1]])
    assert not edge.any() and inside.max() < kept.max()
    yy, xx = np.mgrid[0:128, 0:128]
    flat = np.where((yy - 50) ** 2 + (xx - 50) ** 2 <= 12 ** 2, 3000.0, 100.0)    # saturated, 1.3 times expected
    specks = ndimage.gaussian_filter(flat, 1.0)
    specks[20, 20] = specks[100, 90] = 5000                     # single bright pixels: debris, no nucleus
    found = segment_nuclei(specks.astype(np.uint16), 18)
    assert found.max() == 1 and found[50, 50] == 1


def test_a_blank_field_holds_no_nuclei():
    assert not segment_nuclei(np.full((64, 64), 7, np.uint8), 10).any()


def test_steps_are_progress_events_and_stopping_leaves_nothing(touching):
    events = []
    labels = drain(each_progress(nuclei_steps(touching.image, touching.diameter), events.append))
    assert [e.stage for e in events] == list(STEPS) and all(isinstance(e, Progress) for e in events)
    assert [e.step for e in events] == list(range(len(STEPS))) and labels.max() > 0
    stopped = nuclei_steps(touching.image, touching.diameter)
    next(stopped), next(stopped)
    stopped.close()                                              # a thread worker's quit: nothing to clean up


@pytest.mark.parametrize("kwargs, fragment", [
    ({"diameter": 0}, "diameter=0 must be the nuclei's expected diameter in pixels"),
    ({"diameter": float("nan")}, "diameter=nan must be"),
    ({"diameter": True}, "diameter=True must be"),
    ({"diameter": "12"}, "diameter='12' must be"),
    ({"threshold": "max"}, "threshold='max' is not a threshold method: choose one of li, otsu, triangle, local"),
    ({"channel": 3}, "channel=3 was given but the image is grey"),
])
def test_bad_parameters_are_one_sentence(kwargs, fragment):
    args = {"diameter": 12, **kwargs}
    with pytest.raises(InputError, match=fragment) as err:
        segment_nuclei(np.zeros((32, 32), np.uint16), **args)
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")


@pytest.mark.parametrize("image, kwargs, fragment", [
    (np.zeros((32, 32, 3)), {}, "The image has 3 channels: name the one that shows the nuclei"),
    (np.zeros((32, 32, 3)), {"channel": 5}, "channel=5 is not a channel of an image with 3"),
    (np.zeros((32, 32, 3)), {"channel": "DNA"}, "There is no channel 'DNA' \\(the image does not name its channels\\)"),
    (np.zeros((32, 32, 3)), {"channel": "DNA", "names": ["a", "b", "c"]}, "its channels are a, b, c"),
    (np.zeros((4, 32, 32, 2)), {}, "The image has 4 dimensions"),
    (np.zeros((20, 32, 32)), {}, "no channel axis of at most 8 channels"),
    (np.array([["a"]]), {}, "dtype <U1: give a numeric image"),
    ([[1, 2], [3, 4]], {}, "is a list, not an array"),
    (np.full((32, 32), np.nan), {}, "NaN or infinite values"),
])
def test_bad_images_are_one_sentence(image, kwargs, fragment):
    with pytest.raises(InputError, match=fragment):
        segment_nuclei(image, 12, **kwargs)


def test_it_is_public():
    assert ticlust.segment_nuclei is segment_nuclei
