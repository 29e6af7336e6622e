"""The built-in ``debian-sift`` source: real SIFT descriptors of real photographs, built offline
from what a Debian machine can install.

sift-synth imitates SIFT's statistics; this set is the real thing, so that the quality of a
code (and the recall of re-ranking) is also measured on descriptors no generator made. The
images are the wallpapers of three Debian packages (IMAGE_PACKAGES: photographs of nature,
cities and objects, and some illustrations), the descriptors OpenCV's SIFT (Lowe 2004: 128
bytes per keypoint, the format of the TexMex SIFT1M/BIGANN sets; OpenCV computes them as
floats holding integers 0..255, stored here as uint8).

Choices, each made so that the set is reproducible and not dominated by one picture:

* one file per image: where a package ships an image at several resolutions (KDE's
  ``contents/images/WxH.jpg``, MATE's ``Name_WxH.jpg``), the largest is taken;
* every image is converted to grey levels and reduced so its longer side is at most
  MAX_SIDE pixels (a 5120-pixel wallpaper would otherwise give ten times the keypoints of
  the others), then described at SCALES of that size (several scales per image, as an
  image collection holds the same scene at several sizes);
* rows are ordered by image (sorted paths), scale, then OpenCV's keypoint order; the label
  of a row is its image's index, so a contiguous partition of the rows gives each node
  different images (the DisH paper's non-iid setting);
* OpenCV runs single-threaded per image (images run in parallel): the descriptors are the
  same on every run;
* the dataset records the packages' versions and OpenCV's: other versions may describe the
  images slightly differently, and the set says what it was built from.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from dask_hashcodes.distributed.progress import rows_bar
from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.datasets import write_dataset

IMAGE_PACKAGES = ("mate-backgrounds", "plasma-workspace-wallpapers", "ukui-wallpapers")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
MAX_SIDE = 2560
SCALES = (1.0, 0.5, 0.25)
DESCRIPTOR_DIM = 128
EXTRA_HINT = "install the sift extra: pip install 'dask-hashcodes[sift]' (opencv-python-headless)"
_KDE_VARIANT = re.compile(r"^(?P<image>.*/contents/images[^/]*)/(?P<w>\d+)x(?P<h>\d+)\.\w+$")
_NAMED_VARIANT = re.compile(r"^(?P<image>.*?)_(?P<w>\d+)x(?P<h>\d+)\.\w+$")


def _opencv():
    try:
        import cv2
    except ImportError:
        raise InputError(f"debian-sift needs OpenCV; {EXTRA_HINT}") from None
    return cv2


def installed_versions(packages=IMAGE_PACKAGES) -> dict[str, str]:
    """{package: version} of the installed ones (dpkg-query)."""
    if shutil.which("dpkg-query") is None:
        return {}
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {
        p: v
        for p, v, status in (line.split() for line in out.splitlines() if line.count(" ") == 2)
        if status == "installed"
    }


def package_files(package: str) -> list[str]:
    out = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True).stdout
    return sorted(line for line in out.splitlines() if line.lower().endswith(IMAGE_SUFFIXES))


def one_file_per_image(paths: list[str]) -> list[str]:
    """The largest resolution of each image shipped at several (sorted by path)."""
    best: dict[str, tuple[int, str]] = {}
    for path in paths:
        match = _KDE_VARIANT.match(path) or _NAMED_VARIANT.match(path)
        # a file without a size in its name is its image's "0 x 0" variant: any sized one wins
        image, pixels = (match["image"], int(match["w"]) * int(match["h"])) if match else (path.rsplit(".", 1)[0], 0)
        if image not in best or pixels > best[image][0]:
            best[image] = (pixels, path)
    return sorted(path for _, path in best.values())


def wallpaper_images() -> list[str]:
    """Every image of IMAGE_PACKAGES, one file per image; refuses when a package is missing."""
    versions = installed_versions()
    missing = [p for p in IMAGE_PACKAGES if p not in versions]
    if missing:
        raise InputError(
            f"debian-sift is built from the images of the Debian packages {', '.join(IMAGE_PACKAGES)}; "
            f"install the missing ones: apt-get install {' '.join(missing)}"
        )
    return one_file_per_image([f for p in IMAGE_PACKAGES for f in package_files(p)])


def image_descriptors(path: str) -> list[np.ndarray]:
    """SIFT descriptors (k, 128) uint8 of one image at each of SCALES (grey levels, longer
    side reduced to MAX_SIDE first)."""
    cv2 = _opencv()
    image = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
    if image is None:
        raise InputError(f"debian-sift: {path} cannot be read as an image; reinstall its package")
    shrink = MAX_SIDE / max(image.shape)
    if shrink < 1:
        image = cv2.resize(image, None, fx=shrink, fy=shrink, interpolation=cv2.INTER_AREA)
    sift = cv2.SIFT_create()
    out = []
    for scale in SCALES:
        scaled = image if scale == 1 else cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        _, found = sift.detectAndCompute(scaled, None)
        found = np.zeros((0, DESCRIPTOR_DIM), np.float32) if found is None else found
        if found.size and (found.min() < 0 or found.max() > 255 or not np.array_equal(found, np.round(found))):
            raise InputError(
                f"debian-sift: OpenCV gave non-byte SIFT values for {path}; use opencv-python-headless 4.x"
            )
        out.append(found.astype(np.uint8))
    return out


def describe_images(paths: list[str], *, threads: int = 2, progress=None) -> tuple[list[list[np.ndarray]], str]:
    """Per image, its descriptors at each scale, in ``paths`` order; and OpenCV's version."""
    cv2 = _opencv()
    cv2.setNumThreads(1)  # one thread per image: the same keypoints on every run
    with ThreadPoolExecutor(max(1, threads)) as pool:
        described = []
        for found in pool.map(image_descriptors, paths):
            described.append(found)
            if progress is not None:
                progress(1)
    return described, cv2.__version__


def write_debian_sift(out, *, paths: list[str] | None = None, chunk_rows=None, overwrite=False, progress=False):
    """Build the dataset at ``out`` from the wallpapers of IMAGE_PACKAGES (or from ``paths``,
    a list of image files: tests and other image collections). Describing the images takes
    most of the time, so a progress bar counts them."""
    images = wallpaper_images() if paths is None else sorted(str(Path(p)) for p in paths)
    with rows_bar(len(images), "images", show=bool(progress)) as bar:
        described, opencv_version = describe_images(images, progress=bar.update)
    counts = np.array([[len(d) for d in per_scale] for per_scale in described], dtype=np.int64)
    if counts.sum() == 0:
        raise InputError("debian-sift: the images gave no SIFT keypoints; check the image files")
    labels = np.repeat(np.arange(len(images), dtype=np.int32), counts.sum(axis=1))
    blocks = (block for per_scale in described for block in per_scale if len(block))
    return write_dataset(
        out,
        blocks,
        n=int(counts.sum()),
        d=DESCRIPTOR_DIM,
        dtype=np.uint8,
        source="debian-sift",
        labels=labels,
        chunk_rows=chunk_rows,
        overwrite=overwrite,
        attrs={
            "origin": "OpenCV SIFT descriptors of Debian wallpaper images; label = image index",
            "packages": installed_versions() if paths is None else None,
            "opencv": opencv_version,
            "images": images,
            "scales": list(SCALES),
            "max_side": MAX_SIDE,
            "descriptors_per_image_and_scale": counts.tolist(),
        },
    )
