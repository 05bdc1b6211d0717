"""Model-zoo networks built in a type, layer widths for Tensor Cores, image-folder loaders."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mptutor import data
from mptutor._checks import check_scalar
from mptutor.mxnet._core import (
    ImageFolderDataset,
    _check_dtype,
    _init_amp_bf16,
    _refuse_after_amp,
    _resolve_context,
    gluon,
    mx,
    transforms,
    vision,
)
from mptutor.table import Table

# The names mxnet.gluon.model_zoo.vision.get_model knows.
_NETWORKS = tuple(
    """alexnet densenet121 densenet161 densenet169 densenet201 inceptionv3 mobilenet0.25
    mobilenet0.5 mobilenet0.75 mobilenet1.0 mobilenetv2_0.25 mobilenetv2_0.5 mobilenetv2_0.75
    mobilenetv2_1.0 resnet101_v1 resnet101_v2 resnet152_v1 resnet152_v2 resnet18_v1 resnet18_v2
    resnet34_v1 resnet34_v2 resnet50_v1 resnet50_v2 squeezenet1.0 squeezenet1.1 vgg11 vgg11_bn
    vgg13 vgg13_bn vgg16 vgg16_bn vgg19 vgg19_bn""".split()
)


def round_up(value: int, multiple: int = 8) -> int:
    """Round a positive int up to a multiple, e.g. a layer width for Tensor Cores.

    Parameters
    ----------
    value, multiple : int
        The number to round and the multiple (default 8), both at least 1.

    Returns
    -------
    int
        The smallest multiple of ``multiple`` that is at least ``value``.

    Raises
    ------
    TypeError, ValueError
        If an argument is not an int, or is below 1.
    """
    value = check_scalar(value, "value", int, min_val=1)
    multiple = check_scalar(multiple, "multiple", int, min_val=1)
    return -(-value // multiple) * multiple


def get_network(
    name: str, classes: int, dtype: str = "float32", ctx: mx.Context | None = None, *, pretrained:
    bool = False, classes_multiple: int = 1,
) -> gluon.HybridBlock:  # fmt: skip
    """Build a model-zoo network, initialise it, hybridise it and cast it, as the tutorial does.

    Parameters
    ----------
    name : str
        A name of ``mxnet.gluon.model_zoo.vision``, e.g. ``"resnet50_v2"``.
    classes : int
        Number of classes of the dataset.
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        ``"float16"``: ``net.cast("float16")`` (BatchNorm keeps float32), on a GPU context.
        ``"bfloat16"``: ``amp.init(target_dtype="bfloat16")`` first (once per process, for
        good), float32 parameters, AMP casts inside. Other spellings as
        :func:`mptutor.formats.dtype_name` knows them.
    ctx : mxnet.Context, optional
        Where the parameters live; default :func:`~mptutor.mxnet.context`.
    pretrained : bool, default False
        Start the feature layers from the model zoo's ImageNet weights (downloaded to
        ``$MXNET_HOME/models``), with a new output layer for ``classes``.
    classes_multiple : int, default 1
        Round the output layer's width up to this multiple (8 keeps a ResNet's GEMMs multiples
        of 8 for float16 Tensor Cores); the extra outputs are never a target.

    Returns
    -------
    mxnet.gluon.HybridBlock
        The network, hybridised; its input channels are inferred from the first batch.

    Raises
    ------
    TypeError, ValueError
        For an unknown ``name`` or ``dtype``, ``classes`` or ``classes_multiple`` not an int of
        at least 1, ``ctx`` not a Context, or a ``dtype`` it cannot run (float16 on a CPU,
        bfloat16 on a GPU).
    RuntimeError
        For a float32 or float16 network after ``amp.init`` in this process.
    """
    if not isinstance(name, str) or name.lower() not in _NETWORKS:
        raise ValueError(f"unknown network {name!r}; known names: {', '.join(_NETWORKS)}")
    classes = check_scalar(classes, "classes", int, min_val=1)
    classes_multiple = check_scalar(classes_multiple, "classes_multiple", int, min_val=1)
    ctx = _resolve_context(ctx)
    dtype = _check_dtype(dtype, ctx)
    if dtype == "bfloat16":
        _init_amp_bf16()
    else:
        _refuse_after_amp(f"{dtype} network")
    net = vision.get_model(name.lower(), classes=round_up(classes, classes_multiple))
    if pretrained:
        zoo = vision.get_model(name.lower(), pretrained=True, ctx=ctx)
        net.features = zoo.features
        net.output.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)
    else:
        net.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)
    net.hybridize()
    if dtype == "float16":
        net.cast("float16")
    return net


def channel_alignment(net: gluon.Block) -> Table:
    """List the convolution and dense layers whose channel counts are not a multiple of 8.

    float16 Tensor Cores run at full speed on channel (or unit) counts that are multiples of 8.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network, after one batch (so that every shape is known).

    Returns
    -------
    Table
        One row per layer that is not aligned: ``layer``, ``kind``, ``in``, ``out``; its title
        counts the aligned layers.

    Raises
    ------
    ValueError
        If a layer's shape is not known yet, or the network has no convolution or dense layer.
    """
    rows: list[dict[str, Any]] = []
    total = 0
    for key, param in net._collect_params_with_prefix().items():
        if not key.endswith("weight") or len(param.shape) not in (2, 4):
            continue
        if 0 in param.shape:
            raise ValueError(
                f"the shape of {key} is not known yet ({param.shape}): run one batch through "
                "the network first"
            )
        total += 1
        out_ch, in_ch = param.shape[0], param.shape[1]
        if out_ch % 8 or in_ch % 8:
            kind = "dense" if len(param.shape) == 2 else "convolution"
            rows.append({"layer": key[: -len(".weight")], "kind": kind, "in": in_ch, "out": out_ch})
    if total == 0:
        raise ValueError("the network has no convolution or dense layer")
    aligned = total - len(rows)
    title = f"{aligned} of {total} convolution and dense layers are multiples of 8"
    return Table(rows, title=title)


@dataclass
class Loaders:
    """Train and test ``DataLoader`` of an image-folder dataset, its class names and sizes."""

    train: gluon.data.DataLoader = field(repr=False)
    test: gluon.data.DataLoader = field(repr=False)
    classes: tuple[str, ...]
    num_train: int
    num_test: int
    image_size: int
    batch_size: int

    @property
    def num_classes(self) -> int:
        """The number of classes: the width of the network's output layer."""
        return len(self.classes)


def image_folder_loaders(
    train_root: str | os.PathLike[str], test_root: str | os.PathLike[str], image_size: int = 224,
    batch_size: int = 64, num_workers: int = 0, *, pin_memory: bool = False,
) -> Loaders:  # fmt: skip
    """Build the tutorial's input pipeline on two ``<class>/<image>`` folders.

    Short edge resized to ``image_size``, centre crop, CHW float32 normalised with ImageNet's
    mean and deviation; the training set shuffled with NumPy's global random state; the last,
    smaller batch kept.

    Parameters
    ----------
    train_root, test_root : path-like
        Image folders, e.g. the ``train`` and ``test`` of :func:`mptutor.data.caltech101`.
    image_size : int, default 224
        Edge of the square images given to the network.
    batch_size : int, default 64
        Images per batch.
    num_workers : int, default 0
        Worker processes that decode images; 0 decodes in this process.
    pin_memory : bool, default False
        Put batches in page-locked memory (faster copies to a GPU).

    Returns
    -------
    Loaders
        ``train`` and ``test`` loaders, ``classes`` (label ``i`` is ``classes[i]``), the counts.

    Raises
    ------
    FileNotFoundError, NotADirectoryError
        If a folder is missing or is a file.
    TypeError, ValueError
        If a size or ``num_workers`` is not an int, or is too small (1; 0), a folder has no
        class or an empty class, or the two folders have different classes.
    """
    image_size = check_scalar(image_size, "image_size", int, min_val=1)
    batch_size = check_scalar(batch_size, "batch_size", int, min_val=1)
    num_workers = check_scalar(num_workers, "num_workers", int, min_val=0)
    train_counts = data.check_image_folder(train_root)
    test_counts = data.check_image_folder(test_root)
    if sorted(train_counts) != sorted(test_counts):
        only = sorted(set(train_counts) ^ set(test_counts))
        raise ValueError(
            f"{train_root} and {test_root} have different classes ({', '.join(only[:5])} in only "
            "one of them): labels would not match. Split both from the same source."
        )
    transform = transforms.Compose(
        [
            transforms.Resize(image_size, keep_ratio=True),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # ImageNet's
        ]
    )
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
