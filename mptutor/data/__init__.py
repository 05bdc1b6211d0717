"""Image-folder datasets for the training notebooks: Caltech 101 and a small digits set.

Both datasets are written as two folders of class sub-folders, the layout that
``mxnet.gluon.data.vision.ImageFolderDataset`` (and torchvision's ``ImageFolder``, and Keras'
``image_dataset_from_directory``) read::

    <train>/<class>/<image>     <test>/<class>/<image>

:func:`caltech101`
    The Caltech 101 archive from CaltechDATA, downloaded with :mod:`pooch` (checked against its
    published SHA-256), extracted, and split per class into ``101_ObjectCategories`` (train)
    and ``101_ObjectCategories_test`` (test), the folder names the MXNet Gluon tutorials use.
:func:`digits_image_folder`
    scikit-learn's bundled 8x8 digits (1,797 images, 10 classes, no download) rendered as RGB
    PNG files: a real dataset small enough for CPU runs and CI.
:func:`check_image_folder`, :func:`split_image_folder`
    Count the images of any such folder; split one into train and test folders.

Where the files go: ``root`` when given, else the folder named by the environment variable
``MPTUTOR_DATA_DIR``, else ``data/cache/`` of the project checkout (git-ignored) when this
package runs from one, else pooch's per-user cache folder (``pooch.os_cache("mptutor")``).

Every folder is built in a temporary sibling and renamed into place only when complete
(:mod:`mptutor.atomic`), with a ``mptutor-complete.json`` marker inside. A failed or
interrupted run therefore leaves nothing that a later run takes for finished: the later run
removes the leftovers and does the work again. Run one preparation of a given folder at a time.
Importing this package imports none of pooch, Pillow or scikit-learn; they are imported when a
dataset is built.

Examples
--------
>>> from mptutor import data
>>> folders = data.digits_image_folder()  # doctest: +SKIP
>>> folders.num_classes, folders.num_train, folders.num_test  # doctest: +SKIP
(10, 1438, 359)
>>> caltech = data.caltech101()  # downloads 137 MB once  # doctest: +SKIP
>>> from mxnet.gluon.data.vision import ImageFolderDataset  # doctest: +SKIP
>>> train = ImageFolderDataset(str(caltech.train))  # doctest: +SKIP
"""

from mptutor.data._caltech101 import (
    CALTECH101,
    CALTECH101_BACKGROUND,
    ArchiveSource,
    caltech101,
)
from mptutor.data._digits import digits_image_folder
from mptutor.data._image_folders import IMAGE_EXTENSIONS, check_image_folder, split_image_folder
from mptutor.data._store import ENV_VAR, MARKER, DatasetError, DatasetFolders, data_dir

__all__ = [
    "ArchiveSource",
    "CALTECH101",
    "CALTECH101_BACKGROUND",
    "DatasetError",
    "DatasetFolders",
    "ENV_VAR",
    "IMAGE_EXTENSIONS",
    "MARKER",
    "caltech101",
    "check_image_folder",
    "data_dir",
    "digits_image_folder",
    "split_image_folder",
]
