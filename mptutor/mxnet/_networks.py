"""Networks: model-zoo networks built in a type, layer widths for Tensor Cores, parameters."""

from __future__ import annotations

from typing import Any

from mptutor import formats
from mptutor._checks import check_scalar
from mptutor.mxnet._amp import init_amp_bf16, refuse_after_amp
from mptutor.mxnet._context import check_dtype, resolve_context
from mptutor.mxnet._imports import gluon, mx, vision
from mptutor.table import Table

__all__ = [
    "NETWORKS",
    "round_up",
    "get_network",
    "channel_alignment",
    "params_of",
    "param_dtypes",
    "net_context",
]

#: Names that :func:`get_network` accepts: the model zoo of ``mxnet.gluon.model_zoo.vision``.
NETWORKS: tuple[str, ...] = (
    "alexnet",
    "densenet121",
    "densenet161",
    "densenet169",
    "densenet201",
    "inceptionv3",
    "mobilenet0.25",
    "mobilenet0.5",
    "mobilenet0.75",
    "mobilenet1.0",
    "mobilenetv2_0.25",
    "mobilenetv2_0.5",
    "mobilenetv2_0.75",
    "mobilenetv2_1.0",
    "resnet101_v1",
    "resnet101_v2",
    "resnet152_v1",
    "resnet152_v2",
    "resnet18_v1",
    "resnet18_v2",
    "resnet34_v1",
    "resnet34_v2",
    "resnet50_v1",
    "resnet50_v2",
    "squeezenet1.0",
    "squeezenet1.1",
    "vgg11",
    "vgg11_bn",
    "vgg13",
    "vgg13_bn",
    "vgg16",
    "vgg16_bn",
    "vgg19",
    "vgg19_bn",
)


def round_up(value: int, multiple: int = 8) -> int:
    """Round a positive int up to a multiple, e.g. a layer width for Tensor Cores.

    Parameters
    ----------
    value : int
        The number to round (at least 1).
    multiple : int, default 8
        The multiple (at least 1).

    Returns
    -------
    int
        The smallest multiple of ``multiple`` that is at least ``value``.

    Raises
    ------
    TypeError
        If either argument is not an int.
    ValueError
        If either argument is below 1.
    """
    value = check_scalar(value, "value", int, min_val=1)
    multiple = check_scalar(multiple, "multiple", int, min_val=1)
    return -(-value // multiple) * multiple


def get_network(
    name: str,
    classes: int,
    dtype: str = "float32",
    ctx: mx.Context | None = None,
    *,
    pretrained: bool = False,
    hybridize: bool = True,
    classes_multiple: int = 1,
) -> gluon.HybridBlock:
    """Build a model-zoo network, initialise it, hybridise it and cast it, as the tutorial does.

    Parameters
    ----------
    name : str
        A name from :data:`NETWORKS`, e.g. ``"resnet50_v2"``.
    classes : int
        Number of classes of the dataset.
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        ``"float16"`` casts the network with ``net.cast("float16")`` (BatchNorm keeps float32
        parameters, as Gluon's BatchNorm does); it needs a GPU context. ``"bfloat16"`` calls
        ``amp.init(target_dtype="bfloat16")`` first (if not done yet) and keeps float32
        parameters; AMP casts inside the network. Other spellings (``"fp16"``, ...) as for
        :func:`~mptutor.mxnet.check_dtype`.
    ctx : mxnet.Context, optional
        Where the parameters live; default :func:`~mptutor.mxnet.context`.
    pretrained : bool, default False
        Start the feature layers from the model zoo's ImageNet weights (downloaded on first use
        to ``$MXNET_HOME/models``, which needs network access) and give the network a new,
        Xavier-initialised output layer for ``classes``.
    hybridize : bool, default True
        Call ``net.hybridize()``.
    classes_multiple : int, default 1
        Round the width of the output layer up to this multiple (8 keeps every GEMM of a
        ResNet a multiple of 8 for float16 Tensor Cores). The extra outputs are never a target
        and learn to stay low; labels are unchanged.

    Returns
    -------
    mxnet.gluon.HybridBlock
        The network. Its first convolution infers its input channels from the first batch.

    Raises
    ------
    TypeError
        If ``classes`` or ``classes_multiple`` is not an int, or ``ctx`` is not a Context.
    ValueError
        For an unknown ``name``, ``classes`` or ``classes_multiple`` below 1, a ``dtype`` not in
        :data:`~mptutor.mxnet.DTYPES`, or a ``dtype`` the context cannot run (see
        :func:`~mptutor.mxnet.check_dtype`).
    RuntimeError
        For a float32 or float16 network after ``amp.init`` in this process (see
        :func:`~mptutor.mxnet.amp_initialized`).
    """
    if not isinstance(name, str) or name.lower() not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; known names: {', '.join(NETWORKS)}")
    classes = check_scalar(classes, "classes", int, min_val=1)
    classes_multiple = check_scalar(classes_multiple, "classes_multiple", int, min_val=1)
    ctx = resolve_context(ctx)
    dtype = check_dtype(dtype, ctx)
    outputs = round_up(classes, classes_multiple)
    if dtype == "bfloat16":
        init_amp_bf16()
    else:
        refuse_after_amp(f"{dtype} network")
    net = vision.get_model(name.lower(), classes=outputs)
    if pretrained:
        zoo = vision.get_model(name.lower(), pretrained=True, ctx=ctx)
        net.features = zoo.features
        net.output.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)
    else:
        net.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)
    if hybridize:
        net.hybridize()
    if dtype == "float16":
        net.cast("float16")
    return net


def channel_alignment(net: gluon.Block, multiple: int = 8) -> Table:
    """List the convolution and dense layers whose channel counts are not a multiple of 8.

    float16 Tensor Cores run a convolution or GEMM at full speed when its channel (or unit)
    counts are multiples of 8. Run one batch through the network first so that every shape is
    known.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    multiple : int, default 8
        The multiple to check against (at least 1).

    Returns
    -------
    Table
        One row per convolution or dense layer that is not aligned: ``layer``, ``kind``,
        ``in``, ``out``; its title counts the aligned layers.

    Raises
    ------
    TypeError
        If ``multiple`` is not an int.
    ValueError
        If ``multiple`` is below 1, a layer's shape is not known yet, or the network has no
        such layer.
    """
    multiple = check_scalar(multiple, "multiple", int, min_val=1)
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
        if out_ch % multiple or in_ch % multiple:
            kind = "dense" if len(param.shape) == 2 else "convolution"
            rows.append({"layer": key[: -len(".weight")], "kind": kind, "in": in_ch, "out": out_ch})
    if total == 0:
        raise ValueError("the network has no convolution or dense layer")
    aligned = total - len(rows)
    title = f"{aligned} of {total} convolution and dense layers are multiples of {multiple}"
    return Table(rows, title=title)


def params_of(net: gluon.Block) -> dict[str, gluon.Parameter]:
    """Return every parameter of a Gluon Block by structural name (``"features.1.weight"``).

    The names are those of ``save_parameters``. Anything but a Block is a ``TypeError``, a
    Block without parameters a ``ValueError``.
    """
    if not isinstance(net, gluon.Block):
        raise TypeError(f"expected a Gluon Block, got {type(net).__name__}")
    params = net._collect_params_with_prefix()
    if not params:
        raise ValueError("the network has no parameters")
    return params


def param_dtypes(net: gluon.Block) -> set[str]:
    """Name the types of a network's parameters as :func:`mptutor.formats.dtype_name` does."""
    return {formats.dtype_name(p.dtype) for p in params_of(net).values()}


def net_context(net: gluon.Block) -> mx.Context:
    """Return where a network's parameters live (a ``ValueError`` if none is initialised)."""
    for param in params_of(net).values():
        try:
            return param.list_ctx()[0]
        except RuntimeError:
            continue
    raise ValueError("the network's parameters are not initialised: call net.initialize() first")
