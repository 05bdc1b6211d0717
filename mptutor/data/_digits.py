"""scikit-learn's 8x8 digits written as PNG files in train and test image folders."""

from __future__ import annotations

from mptutor._checks import check_scalar
from mptutor.data._image_folders import plan_split, split_info
from mptutor.data._store import (
    DatasetFolders,
    StrPath,
    building,
    check_path,
    check_seed,
    complete_split,
    finished_split,
    make_root,
    write_marker,
)


def digits_image_folder(
    root: StrPath | None = None,
    size: int = 32,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> DatasetFolders:
    """Write scikit-learn's digits as RGB PNG files in train and test image folders.

    The 1,797 8x8 grey images of :func:`sklearn.datasets.load_digits` (shipped with
    scikit-learn, no download) are scaled from 0..16 to 0..255, enlarged to ``size`` x ``size``
    pixels (bilinear) and saved as 3-channel PNG files, ``train/<digit>/<index>.png`` and
    ``test/<digit>/<index>.png`` (``<index>`` is the position in ``load_digits()``, four
    digits). The result is the same files with the same bytes for the same arguments, and is
    reused when already complete.

    Parameters
    ----------
    root : path-like, optional
        Data folder, see :func:`data_dir`. The images go to
        ``root/digits-<size>px-seed<seed>-test<test_fraction>``.
    size : int, default 32
        Edge length of the images in pixels (at least 8).
    seed : int, default 0
        Seed of the per-class train/test split.
    test_fraction : float, default 0.2
        Fraction of each class put in the test folder (rounded per class).

    Returns
    -------
    DatasetFolders
        Ten classes ``"0"`` to ``"9"``, 1,797 images in all.

    Raises
    ------
    ValueError
        If ``size`` is below 8 or ``test_fraction`` is not strictly between 0 and 1.
    TypeError
        If ``size`` or ``seed`` is not an int, ``test_fraction`` not a number, or ``root`` not
        a path.
    """
    size = check_scalar(size, "size (the image edge in pixels)", int, min_val=8)
    seed = check_seed(seed)
    if root is not None:
        check_path(root, "root")
    test_fraction = check_scalar(
        test_fraction,
        "test_fraction (the test share of each class)",
        float,
        min_val=0,
        max_val=1,
        include_boundaries="neither",
    )
    dest = make_root(root) / f"digits-{size}px-seed{seed}-test{test_fraction:g}"
    done = complete_split(dest)
    if done is not None:
        return done

    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = np.rint(np.asarray(digits.images, dtype=np.float64) * (255.0 / 16.0))
    pixels = np.clip(pixels, 0, 255).astype(np.uint8)
    labels = np.asarray(digits.target)
    files = {
        str(label): [f"{i:04d}.png" for i in np.flatnonzero(labels == label)]
        for label in np.unique(labels)
    }
    plan = plan_split(files, test_fraction, seed)
    with building(dest) as tmp:
        for name, (train_files, test_files) in plan.items():
            for split, names in (("train", train_files), ("test", test_files)):
                folder = tmp / split / name
                folder.mkdir(parents=True)
                for file in names:
                    grey = pixels[int(file[:4])]
                    rgb = Image.fromarray(np.repeat(grey[:, :, None], 3, axis=2))
                    rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
                    rgb.save(folder / file, format="PNG")
        info = {"dataset": "sklearn-digits", "size": size, "seed": seed}
        info |= {"test_fraction": test_fraction, **split_info(("train", "test"), plan)}
        write_marker(tmp, info)
    return finished_split(dest)
