"""Swapping a model's linear layers for another kind, all or nothing: shared by to_fp8, to_fp4."""

from __future__ import annotations

from collections.abc import Callable, Collection

from torch import nn

from mptutor._checks import _short, check_type


def swap_linears(
    model: nn.Module,
    skip: Collection[str],
    build: Callable[[str, int, nn.Linear], nn.Module],
    caller: str,
    layer: str,
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` not named in ``skip`` by ``build(name, k, old)``.

    ``k`` counts in the order of the names; the new layer takes over the old one's Parameters.
    All are built before the first is put in: on any error the model is unchanged. ``caller``
    and ``layer`` name the public function and the new class in the messages.
    """
    check_type(model, "model", nn.Module, "a torch.nn.Module")
    if type(model) is nn.Linear:
        raise ValueError(
            f"model is itself a torch.nn.Linear, which {caller} cannot replace in place: build "
            f"{layer}(in_features, out_features, ...) and copy the weights, or pass a model "
            "that holds the layer (e.g. torch.nn.Sequential(layer))"
        )
    if isinstance(skip, (str, bytes)) or not isinstance(skip, Collection):
        raise TypeError(
            f"skip must be a collection of layer names, e.g. {{'head'}}, got {_short(skip)}"
        )
    linear = {n for n, m in model.named_modules() if type(m) is nn.Linear}
    if set(skip) - linear:
        wrong = sorted(map(str, set(skip) - linear))
        raise ValueError(f"skip names no linear layer of the model: {wrong}")
    swaps = []
    for k, name in enumerate(sorted(linear - set(skip))):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, child)
        new = build(name, k, old)
        new.weight, new.bias = old.weight, old.bias
        swaps.append((parent, child, new))
    for parent, child, new in swaps:  # all built: now put them in
        setattr(parent, child, new)
    return model
