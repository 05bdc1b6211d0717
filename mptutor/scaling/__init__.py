"""Loss scaling without a framework: the dynamic loss-scale state machine of mixed precision.

Small FP16 gradients underflow to zero. Loss scaling multiplies the loss by a factor ``S``
before the backward pass, so every gradient comes out ``S`` times larger, and divides the
gradients by ``S`` before the optimizer step. A *dynamic* scaler finds ``S`` by trial: it starts
high; when a step's gradients contain inf or NaN it skips that optimizer step and multiplies
``S`` by a backoff factor (0.5); after ``growth_interval`` consecutive clean steps it multiplies
``S`` by a growth factor (2). ``S`` so stays near the largest value that does not overflow.

:class:`DynamicLossScaler` reproduces ``torch.amp.GradScaler``'s scale trajectory bit for bit,
float32 arithmetic included, as long as that scale stays at or above its floor ``min_scale``
(1 by default; GradScaler has none and can halve its scale down to 0 for good), and counts the
overflows at the floor (:attr:`DynamicLossScaler.overflows_at_floor`); :class:`StaticLossScaler`
keeps one scale. Both record a :class:`ScaleHistory` to plot and provide :class:`LossScaler`,
the protocol that the framework adapters type their scaler with. Only the standard library and
NumPy are imported, so one state machine serves PyTorch, Keras and MXNet alike.

How the frameworks' own scalers behave (their defaults, their float32 arithmetic at the ends of
the range, MXNet's one-step delay) and where ``DynamicLossScaler`` departs from them is written
up in ``docs/loss-scaling-notes.md``; the ``tests/test_scaling_vs_*.py`` files check it against
each framework.

Examples
--------
>>> s = DynamicLossScaler(init_scale=8.0, growth_interval=2)
>>> [s.update(found_inf) for found_inf in (False, True, False, False)]
[True, False, True, True]
>>> s.scale, list(s.history.scales), list(s.history.skipped)
(8.0, [8.0, 8.0, 4.0, 4.0], [0, 1, 0, 0])
"""

from mptutor.scaling._dynamic import DynamicLossScaler
from mptutor.scaling._float32 import FLOAT32_MAX
from mptutor.scaling._history import ScaleHistory
from mptutor.scaling._protocol import LossScaler
from mptutor.scaling._static import StaticLossScaler

__all__ = [
    "LossScaler",
    "DynamicLossScaler",
    "StaticLossScaler",
    "ScaleHistory",
    "FLOAT32_MAX",
]
