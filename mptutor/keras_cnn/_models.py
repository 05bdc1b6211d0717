"""The two CNNs of the experiment, built under a dtype policy, and batches of random images."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from mptutor._checks import check_scalar

_CLASSES = 10  # Imagenette's classes: the dense layer's outputs
#: The post's convolutions, in order: (filters, kernel size, stride). Each has ``same`` padding
#: and a ReLU, and is followed by BatchNorm.
CONVOLUTIONS: tuple[tuple[int, int, int], ...] = ((32, 5, 2), (64, 7, 2), (128, 11, 2))
_MODELS = ("blog", "changed")  # the post's model; the same function arranged for Tensor Cores


class PadChannels(keras.layers.Layer):
    """Append zero channels to an NHWC tensor, up to ``channels``.

    Parameters
    ----------
    channels : int
        The number of channels of the output; at least the number of the input.
    **kwargs
        Passed to ``keras.layers.Layer`` (``name``, ``dtype``, ...).
    """

    def __init__(self, channels: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.channels = check_scalar(channels, "channels", int, min_val=1)

    def call(self, x: Any) -> Any:
        """Return ``x`` with zero channels appended."""
        extra = self.channels - x.shape[-1]
        if extra < 0:
            raise ValueError(f"input has {x.shape[-1]} channels, more than {self.channels}")
        return keras.ops.pad(x, [[0, 0], [0, 0], [0, 0], [0, extra]])

    def compute_output_shape(self, input_shape: tuple[Any, ...]) -> tuple[Any, ...]:
        """Return the input shape with ``channels`` channels."""
        return (*input_shape[:-1], self.channels)

    def get_config(self) -> dict[str, Any]:
        """Return the layer's configuration, ``channels`` included."""
        return {**super().get_config(), "channels": self.channels}


def build_model(
    kind: str = "blog",
    image_size: int = 256,
    policy: str = "float32",
    convolutions: tuple[tuple[int, int, int], ...] = CONVOLUTIONS,
) -> keras.Model:
    """Build the ``blog`` or ``changed`` CNN under a dtype policy, compiled with Adam.

    Parameters
    ----------
    kind : {"blog", "changed"}, optional
        ``blog`` takes float32 images in [0, 1]; ``changed`` takes uint8 images, scales them
        and pads them to 8 channels, then computes the same function.
    image_size : int, optional
        Side of the square input images in pixels.
    policy : str, optional
        A Keras dtype policy: ``"float32"``, ``"mixed_float16"``, ``"mixed_bfloat16"``.
    convolutions : tuple of (int, int, int), optional
        (filters, kernel size, stride) of each convolution, the post's by default.

    Returns
    -------
    keras.Model
        Compiled with Adam and sparse categorical cross-entropy; under a ``mixed_float16``
        policy ``compile`` wraps Adam in a ``LossScaleOptimizer``.

    Raises
    ------
    ValueError
        If ``kind`` is unknown or ``image_size`` is not a positive int.
    """
    if kind not in _MODELS:
        raise ValueError(f"unknown model {kind!r}; choose from {_MODELS}")
    image_size = check_scalar(image_size, "image_size", int, min_val=1)
    previous = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(policy)  # for the layers created below only
    try:
        if kind == "blog":
            images = keras.Input((image_size, image_size, 3), name="images")
            h = images
        else:
            images = keras.Input((image_size, image_size, 3), dtype="uint8", name="images")
            h = keras.layers.Rescaling(1 / 255, name="rescale")(images)
            h = PadChannels(8, name="pad_to_8")(h)
        for i, (filters, kernel, stride) in enumerate(convolutions, start=1):
            h = keras.layers.Conv2D(
                filters, kernel, strides=stride, padding="same", activation="relu", name=f"conv{i}"
            )(h)
            h = keras.layers.BatchNormalization(name=f"bn{i}")(h)  # after the ReLU
        h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
        h = keras.layers.Dense(_CLASSES, name="dense")(h)
        # float32 whatever the global policy: the probabilities and the loss are float32
        probs = keras.layers.Activation("softmax", dtype="float32", name="softmax")(h)
        model = keras.Model(images, probs, name=kind)
    finally:
        keras.mixed_precision.set_dtype_policy(previous)  # even if building failed
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def make_batch(
    kind: str, size: int, image_size: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Random images as a model takes them (random pixels cost what photos cost), and labels.

    Parameters
    ----------
    kind : {"blog", "changed"}
        ``blog``: float32 images scaled to [0, 1], as the post's input pipeline made them;
        ``changed``: the uint8 pixels themselves.
    size, image_size : int
        Images in the batch, and the side of the square images in pixels.
    seed : int, optional
        Seed of the NumPy generator.

    Returns
    -------
    images, labels : numpy.ndarray
        Shapes ``(size, image_size, image_size, 3)`` and ``(size,)`` (int32 in ``[0, 10)``).

    Raises
    ------
    ValueError
        If ``kind`` is unknown.
    """
    if kind not in _MODELS:
        raise ValueError(f"unknown model {kind!r}; choose from {_MODELS}")
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size, image_size, image_size, 3), dtype=np.uint8)
    labels = rng.integers(0, _CLASSES, size).astype(np.int32)
    if kind == "blog":
        return (pixels / np.float32(255)).astype(np.float32), labels
    return pixels, labels
