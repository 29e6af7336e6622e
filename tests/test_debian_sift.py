"""The debian-sift source: real SIFT descriptors of images, deterministic, one file per image,
and one-line errors when what it is built from is missing."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dask_hashcodes.data import debian_sift
from dask_hashcodes.errors import InputError

try:
    import cv2
except ImportError:  # the test extra installs it: in CI a missing OpenCV fails instead of skipping
    if os.environ.get("CI"):
        raise
    pytest.skip("the sift extra (opencv-python-headless) is not installed", allow_module_level=True)


def _scene(path, seed):
    """A picture with corners and blobs at many sizes (SIFT finds keypoints in it)."""
    rng = np.random.default_rng(seed)
    image = np.full((600, 900), 40, np.uint8)
    for _ in range(60):
        x, y, r = int(rng.integers(0, 900)), int(rng.integers(0, 600)), int(rng.integers(3, 60))
        if rng.random() < 0.5:
            cv2.circle(image, (x, y), r, int(rng.integers(80, 255)), -1)
        else:
            cv2.rectangle(image, (x, y), (x + r, y + r // 2), int(rng.integers(80, 255)), -1)
    cv2.imwrite(str(path), image)
    return str(path)


def test_one_file_per_image_keeps_the_largest_variant():
    paths = [
        "/w/Kite/contents/images/1920x1080.jpg",
        "/w/Kite/contents/images/5120x2880.jpg",
        "/w/Kite/contents/images_dark/1920x1080.jpg",
        "/b/Elephants.jpg",
        "/b/Elephants_3840x2160.jpg",
        "/b/Dune.jpg",
    ]
    assert debian_sift.one_file_per_image(paths) == [
        "/b/Dune.jpg",
        "/b/Elephants_3840x2160.jpg",
        "/w/Kite/contents/images/5120x2880.jpg",
        "/w/Kite/contents/images_dark/1920x1080.jpg",
    ]


def test_descriptors_are_bytes_labelled_by_image_and_the_same_on_every_build(tmp_path):
    images = [_scene(tmp_path / f"scene{i}.png", i) for i in range(2)]
    first = debian_sift.write_debian_sift(tmp_path / "a.zarr", paths=images)
    again = debian_sift.write_debian_sift(tmp_path / "b.zarr", paths=images, chunk_rows=500)
    X, labels = np.asarray(first.features[...]), np.asarray(first.labels[...])
    assert X.dtype == np.uint8 and X.shape[1] == 128 and len(X) > 500
    np.testing.assert_array_equal(X, np.asarray(again.features[...]))
    counts = np.array(first.attrs["descriptors_per_image_and_scale"])
    assert counts.shape == (2, len(debian_sift.SCALES)) and (counts > 0).all()
    np.testing.assert_array_equal(labels, np.repeat([0, 1], counts.sum(axis=1)))
    # SIFT vectors are normalised: every row's length is close to 512 (OpenCV's scale)
    norms = np.sqrt((X.astype(np.float64) ** 2).sum(axis=1))
    assert 400 < np.median(norms) < 600


def test_missing_packages_and_unreadable_images_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(debian_sift, "IMAGE_PACKAGES", ("dhash-no-such-wallpapers",))
    with pytest.raises(InputError, match="apt-get install dhash-no-such-wallpapers") as err:
        debian_sift.wallpaper_images()
    assert "\n" not in str(err.value)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    with pytest.raises(InputError, match="cannot be read as an image"):
        debian_sift.write_debian_sift(tmp_path / "c.zarr", paths=[str(broken)])
    assert not (tmp_path / "c.zarr").exists()
