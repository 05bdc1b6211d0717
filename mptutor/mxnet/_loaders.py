"""Data: the tutorial's image transform and train/test ``DataLoader`` pairs on image folders."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from mptutor import data
from mptutor._checks import check_scalar
from mptutor.mxnet._imports import ImageFolderDataset, gluon, transforms

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "Loaders", "image_transform", "image_folder_loaders"]

#: Per-channel mean and standard deviation of ImageNet, as the model zoo's weights expect.
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


@dataclass
class Loaders:
    """Train and test ``DataLoader`` for an image-folder dataset.

    Attributes
    ----------
    train : mxnet.gluon.data.DataLoader
        Shuffled training batches ``(images, labels)``; images are float32 ``(N, 3, H, W)``.
    test : mxnet.gluon.data.DataLoader
        Test batches in folder order.
    classes : tuple of str
        Class names; label ``i`` is ``classes[i]``.
    num_train : int
        Number of training images.
    num_test : int
        Number of test images.
    image_size : int
        Edge of the square images, in pixels.
    batch_size : int
        Images per batch.
    """

    train: gluon.data.DataLoader = field(repr=False)
    test: gluon.data.DataLoader = field(repr=False)
    classes: tuple[str, ...]
    num_train: int
    num_test: int
    image_size: int
    batch_size: int

    @property
    def num_classes(self) -> int:
        """The number of classes, ``len(classes)``: the width of the network's output layer."""
        return len(self.classes)


def image_transform(
    image_size: int,
    resize: int | None = None,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
) -> transforms.Compose:
    """Build the tutorial's transform: resize the short edge, crop the centre, normalise.

    Parameters
    ----------
    image_size : int
        Edge of the square crop, in pixels.
    resize : int, optional
        Length the short edge is resized to first; default ``image_size``.
    mean, std : tuple of float
        Per-channel statistics for ``Normalize``; default ImageNet's.

    Returns
    -------
    mxnet.gluon.data.vision.transforms.Compose
        Maps an HWC uint8 image to a normalised CHW float32 array.
    """
    resize = image_size if resize is None else resize
    return transforms.Compose(
        [
            transforms.Resize(resize, keep_ratio=True),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )


def image_folder_loaders(
    train_root: str | os.PathLike[str],
    test_root: str | os.PathLike[str],
    image_size: int = 224,
    batch_size: int = 64,
    num_workers: int = 0,
    *,
    resize: int | None = None,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
    pin_memory: bool = False,
) -> Loaders:
    """Build the tutorial's input pipeline on two image folders.

    ``ImageFolderDataset`` reads ``<root>/<class>/<image>``; :func:`image_transform` resizes,
    crops, converts to CHW float32 and normalises; ``DataLoader`` batches, shuffling the
    training set with NumPy's global random state (seed it for a repeatable order) and keeping
    the last, smaller batch.

    Parameters
    ----------
    train_root, test_root : path-like
        Image folders, e.g. :func:`mptutor.data.caltech101` or
        :func:`mptutor.data.digits_image_folder` results' ``train`` and ``test``.
    image_size : int, default 224
        Edge of the square images given to the network.
    batch_size : int, default 64
        Images per batch (a multiple of 8 suits float16 Tensor Cores).
    num_workers : int, default 0
        Worker processes that decode images; 0 decodes in this process (what CI uses), e.g.
        ``os.cpu_count()`` on a GPU machine. The batch order comes from NumPy's global random
        state either way.
    resize : int, optional
        Short edge before the centre crop; default ``image_size``.
    mean, std : tuple of float
        Normalisation statistics; default ImageNet's.
    pin_memory : bool, default False
        Put batches in page-locked memory (faster copies to a GPU).

    Returns
    -------
    Loaders
        The two loaders and the dataset's sizes and class names.

    Raises
    ------
    FileNotFoundError, NotADirectoryError
        If a folder is missing or is a file.
    TypeError
        If a size or ``num_workers`` is not an int.
    ValueError
        If a folder has no class sub-folders or an empty class, the two folders have different
        classes, a size is below 1 or ``num_workers`` below 0.
    """
    image_size = check_scalar(image_size, "image_size", int, min_val=1)
    batch_size = check_scalar(batch_size, "batch_size", int, min_val=1)
    num_workers = check_scalar(num_workers, "num_workers", int, min_val=0)
    resize = check_scalar(resize, "resize", int, min_val=1, allow_none=True)
    train_counts = data.check_image_folder(train_root)
    test_counts = data.check_image_folder(test_root)
    if sorted(train_counts) != sorted(test_counts):
        only = sorted(set(train_counts) ^ set(test_counts))
        raise ValueError(
            f"{train_root} and {test_root} have different classes ({', '.join(only[:5])} in only "
            "one of them): labels would not match. Split both from the same source."
        )
    transform = image_transform(image_size, resize, mean, std)
    train_set = ImageFolderDataset(str(train_root)).transform_first(transform)
    test_set = ImageFolderDataset(str(test_root)).transform_first(transform)
    common = {"batch_size": batch_size, "num_workers": num_workers, "pin_memory": pin_memory}
    return Loaders(
        train=gluon.data.DataLoader(train_set, shuffle=True, last_batch="keep", **common),
        test=gluon.data.DataLoader(test_set, shuffle=False, last_batch="keep", **common),
        classes=tuple(sorted(train_counts)),
        num_train=len(train_set),
        num_test=len(test_set),
        image_size=image_size,
        batch_size=batch_size,
    )
