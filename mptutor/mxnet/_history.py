"""What a training run measured: an :class:`EpochStats` per epoch, kept in a :class:`History`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mptutor.mxnet._imports import gluon
from mptutor.table import Table

__all__ = ["EpochStats", "History"]


@dataclass
class EpochStats:
    """What one epoch of :func:`~mptutor.mxnet.train` measured.

    Attributes
    ----------
    epoch : int
        Epoch number, from 1.
    loss : float
        Mean training loss over the epoch's images.
    train_accuracy : float
        Share of training images classified correctly during the epoch.
    test_accuracy : float
        Share of test images classified correctly after the epoch.
    seconds : float
        Wall time of the epoch's training (data loading included, evaluation excluded).
    images_per_second : float
        Training images per second.
    memory_mib : float or None
        GPU memory in use at the end of the epoch minus that in use before training, in MiB
        (MXNet keeps freed memory in its pool, so this is the run's high-water mark); ``None``
        on a CPU.
    """

    epoch: int
    loss: float
    train_accuracy: float
    test_accuracy: float
    seconds: float
    images_per_second: float
    memory_mib: float | None = None


@dataclass
class History:
    """Per-epoch results of :func:`~mptutor.mxnet.train` and the trainer that produced them.

    Attributes
    ----------
    dtype : str
        ``"float32"``, ``"float16"`` or ``"bfloat16"``.
    multi_precision : bool
        Whether the optimizer kept float32 master weights.
    context : str
        Where it ran, e.g. ``"cpu(0)"``.
    epochs : list of EpochStats
        One entry per epoch.
    trainer : mxnet.gluon.Trainer
        The trainer (its optimizer holds the master weights); not part of ``as_dict``.
    """

    dtype: str
    multi_precision: bool
    context: str
    epochs: list[EpochStats] = field(default_factory=list)
    trainer: gluon.Trainer | None = field(default=None, repr=False, compare=False)

    def column(self, name: str) -> list[Any]:
        """One statistic for every epoch, e.g. ``history.column("loss")``.

        Parameters
        ----------
        name : str
            A field of :class:`EpochStats`.

        Returns
        -------
        list
            Its values, in epoch order.

        Raises
        ------
        KeyError
            If ``name`` is not a field of :class:`EpochStats`.
        """
        names = list(EpochStats.__dataclass_fields__)
        if name not in names:
            raise KeyError(f"no statistic {name!r}; statistics are {names}")
        return [getattr(e, name) for e in self.epochs]

    @property
    def final(self) -> EpochStats:
        """The last epoch's statistics.

        Returns
        -------
        EpochStats
            ``epochs[-1]``.
        """
        return self.epochs[-1]

    def table(self, digits: int = 4) -> Table:
        """Return the history as a table, one row per epoch.

        Parameters
        ----------
        digits : int, default 4
            Significant digits of loss and accuracy.

        Returns
        -------
        Table
            Columns epoch, loss, train acc, test acc, seconds, images/s (and GPU MiB on a GPU).
        """
        rows = []
        for e in self.epochs:
            row = {
                "epoch": e.epoch,
                "loss": float(f"{e.loss:.{digits}g}"),
                "train acc": float(f"{e.train_accuracy:.{digits}g}"),
                "test acc": float(f"{e.test_accuracy:.{digits}g}"),
                "seconds": round(e.seconds, 1),
                "images/s": round(e.images_per_second, 1),
            }
            if e.memory_mib is not None:
                row["GPU MiB"] = round(e.memory_mib)
            rows.append(row)
        title = f"{self.dtype}, multi_precision={self.multi_precision}, on {self.context}"
        return Table(rows, title=title)

    def as_dict(self) -> dict[str, Any]:
        """Return the history as plain data (for JSON).

        Returns
        -------
        dict
            ``dtype``, ``multi_precision``, ``context`` and ``epochs`` as a list of dicts.
        """
        return {
            "dtype": self.dtype,
            "multi_precision": self.multi_precision,
            "context": self.context,
            "epochs": [asdict(e) for e in self.epochs],
        }
