"""Run functions in a few ``torch.distributed`` processes on one machine, and clean up.

The plumbing behind the several-processes notebook, used through :mod:`mptutor.torch`::

    from mptutor.torch import Workers, launch

    run = launch("workers.py:train", 100)   # train(rank, world_size, device, 100) in 2 processes
    run.results[0], run.results[1]          # what each rank returned

    workers = Workers(world_size=2)         # or keep the processes for several calls
    workers.run("workers.py:train", 100)
    workers.run("workers.py:evaluate")
    workers.close()

The processes are started with the ``spawn`` method: each is a fresh Python interpreter, so the
function must be importable by name, as ``"package.module:function"`` or
``"path/to/file.py:function"`` (a function defined in a notebook cannot be). They join one
process group (``gloo`` on CPUs, ``nccl`` when there is a GPU per process) and call the function
with ``(rank, world_size, device, *args)``; each rank's return value comes back to the caller.

Failures end everything: when a worker raises, dies or does not answer in time, or the waiting
caller is interrupted (a notebook cell stopped with Ctrl-C), every process is ended before the
error reaches the caller, since the other ranks may be waiting in a collective that will never
complete. The next call starts fresh processes. Idle processes end with :meth:`Workers.close`,
when the object is garbage-collected, or when the interpreter exits (they are daemonic). The
workers' standard output and error go to log files, returned with each result, so that a
notebook cell shows only what the caller prints.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import queue as queue_module
import shutil
import sys
import tempfile
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mptutor._checks import check_scalar
from mptutor.torch import _device

__all__ = ["DistributedRun", "WorkerError", "Workers", "choose_backend", "launch"]


@dataclass
class DistributedRun:
    """What one call brings back from the workers.

    Attributes
    ----------
    results : list
        The value each rank's function returned, in rank order.
    logs : list of str
        What each rank printed during the call (standard output and error; empty strings when
        it printed nothing).
    backend : str
        The process group's backend, ``"gloo"`` or ``"nccl"``.
    seconds : float
        Wall time of the call, including the start of the processes if it started them.
    """

    results: list[Any]
    logs: list[str]
    backend: str
    seconds: float


class WorkerError(RuntimeError):
    """A worker raised, died or did not answer in time; every worker process has been ended.

    Attributes
    ----------
    rank : int or None
        The rank that failed (``None`` for a timeout).
    logs : list of str
        Every rank's output up to the failure.
    """

    def __init__(self, message: str, rank: int | None, logs: list[str]) -> None:
        super().__init__(message)
        self.rank = rank
        self.logs = logs


def choose_backend(world_size: int = 2) -> str:
    """Pick the process-group backend for ``world_size`` processes on this machine.

    Parameters
    ----------
    world_size : int, optional
        Number of processes.

    Returns
    -------
    str
        ``"nccl"`` when NCCL is available and there is one CUDA GPU per process (and
        :func:`mptutor.torch.device` is ``"cuda"``: ``MPTUTOR_DEVICE=cpu`` is not set), else
        ``"gloo"`` (CPU tensors).
    """
    if (
        _device.device() == "cuda"
        and torch.cuda.device_count() >= world_size
        and dist.is_nccl_available()
    ):
        return "nccl"
    return "gloo"


def _resolve(target: str) -> Callable[..., Any]:
    # Import the function in the worker; a .py file is executed afresh at every call, so that
    # edits made between calls take effect.
    where, _, name = target.rpartition(":")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(where).stem, where)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {where}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _target_name(target: str | Callable[..., Any]) -> str:
    if isinstance(target, str):
        where, sep, name = target.rpartition(":")
        if not sep or not where or not name:
            raise ValueError(
                f"target must be 'module:function' or 'path/to/file.py:function', got {target!r}"
            )
        if where.endswith(".py"):
            if not Path(where).is_file():
                raise ValueError(f"target file {where} does not exist")
            return f"{Path(where).resolve()}:{name}"
        return target
    if not callable(target):
        raise TypeError(f"target must be a function or a 'module:function' string, got {target!r}")
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", "")
    if module in (None, "__main__") or "<" in qualname or "." in qualname:
        raise ValueError(
            f"{qualname or target!r} is not a top-level function of an importable module (it is "
            "defined in a notebook, a script's __main__, or inside another function or class): "
            "spawned processes cannot import it. Put it in a .py file and pass "
            "'path/to/file.py:function'"
        )
    return f"{module}:{qualname}"


def _serve(
    rank: int,
    world_size: int,
    backend: str,
    workdir: str,
    tasks: Any,
    results: Any,
    threads: int,
    timeout: float,
) -> None:
    # The loop of each worker process: output to a log file, join the group, run tasks.
    log = open(Path(workdir) / f"rank{rank}.log", "w", buffering=1)  # noqa: SIM115
    os.dup2(log.fileno(), 1)  # C++ libraries write to the file descriptors
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    try:
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        dist.init_process_group(
            backend,
            init_method=f"file://{Path(workdir) / 'store'}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )
    except BaseException:  # noqa: BLE001 - reported to the parent, which ends every worker
        results.put((rank, "error", traceback.format_exc()))
        return
    try:
        while (task := tasks.get()) is not None:
            target, args = task
            try:
                value = _resolve(target)(rank, world_size, device, *args)
                buffer = io.BytesIO()
                torch.save(value, buffer)
                results.put((rank, "ok", buffer.getvalue()))
            except BaseException:  # noqa: BLE001
                results.put((rank, "error", traceback.format_exc()))
                return
    finally:
        log.flush()
        if dist.is_initialized():
            dist.destroy_process_group()


def _stop(processes: list[Any], grace: float = 5.0) -> None:
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(grace)
        if p.is_alive():
            p.kill()
            p.join()


class Workers:
    """A set of ``world_size`` processes in one process group, kept for several calls.

    The processes start at the first :meth:`run`, and stay, with their process group, until
    :meth:`close` (or a failure, which ends them all). Use it as a context manager to close it
    at the end of a block.

    Parameters
    ----------
    world_size : int, optional
        Number of processes (ranks).
    backend : str, optional
        ``"gloo"`` or ``"nccl"``; by default :func:`choose_backend`. With ``"nccl"`` rank ``r``
        uses GPU ``r``; with ``"gloo"`` the device is the CPU.
    timeout : float, optional
        Seconds that one :meth:`run` may take (and the process group's timeout).
    threads : int, optional
        ``torch.set_num_threads`` in each process.

    Raises
    ------
    TypeError
        For a world size or thread count that is not an integer, or a timeout that is not a
        number.
    ValueError
        For a world size, thread count, timeout or backend out of range.
    """

    def __init__(
        self,
        world_size: int = 2,
        backend: str | None = None,
        timeout: float = 300.0,
        threads: int = 1,
    ) -> None:
        self.world_size = check_scalar(world_size, "world_size", int, min_val=1)
        self.threads = check_scalar(threads, "threads", int, min_val=1)
        self.timeout = check_scalar(
            timeout, "timeout", float, min_val=0, include_boundaries="neither"
        )
        self.backend = choose_backend(world_size) if backend is None else backend
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {self.backend!r}")
        self._processes: list[Any] = []
        self._workdir: Path | None = None
        self._offsets = [0] * world_size
        self._finalizer: weakref.finalize | None = None

    @property
    def running(self) -> bool:
        """Whether worker processes are alive now."""
        return any(p.is_alive() for p in self._processes)

    def _start(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="mptutor-dist-"))
        ctx = mp.get_context("spawn")
        self._tasks = [ctx.Queue() for _ in range(self.world_size)]
        self._results = ctx.Queue()
        self._offsets = [0] * self.world_size
        self._processes = []
        for rank in range(self.world_size):
            args = (
                rank,
                self.world_size,
                self.backend,
                str(self._workdir),
                self._tasks[rank],
                self._results,
                self.threads,
                self.timeout,
            )
            process = ctx.Process(target=_serve, args=args, daemon=True)
            process.start()
            self._processes.append(process)
        self._finalizer = weakref.finalize(self, _cleanup, self._processes, self._workdir)

    def _logs(self, advance: bool = True) -> list[str]:
        logs = []
        for rank in range(self.world_size):
            path = self._workdir / f"rank{rank}.log" if self._workdir else None
            text = path.read_text(errors="replace") if path and path.exists() else ""
            logs.append(text[self._offsets[rank] :])
            if advance:
                self._offsets[rank] = len(text)
        return logs

    def run(self, target: str | Callable[..., Any], *args: Any) -> DistributedRun:
        """Call ``target(rank, world_size, device, *args)`` in every process and wait.

        Parameters
        ----------
        target : str or callable
            ``"package.module:function"``, ``"path/to/file.py:function"`` (the file is read
            again at every call), or a top-level function of an importable module.
        *args : object
            Further arguments (picklable), the same for every rank.

        Returns
        -------
        DistributedRun
            Each rank's return value and output, the backend, the wall time.

        Raises
        ------
        TypeError, ValueError
            For a target that cannot be imported by name.
        WorkerError
            If a worker raised (the message holds its traceback), died, or the call took longer
            than ``timeout``. Every process has been ended when it is raised.
        """
        name = _target_name(target)
        start = time.perf_counter()
        completed = False
        try:
            if not self.running:
                self.close()
                self._start()
            for tasks in self._tasks:
                tasks.put((name, args))
            results = self._collect(time.monotonic() + self.timeout)
            completed = True
            return DistributedRun(results, self._logs(), self.backend, time.perf_counter() - start)
        finally:
            if not completed:  # an error or an interruption: nobody may be left waiting
                self.close()

    def _collect(self, deadline: float) -> list[Any]:
        got: dict[int, Any] = {}
        while len(got) < self.world_size:
            try:
                rank, status, payload = self._results.get(timeout=0.2)
            except queue_module.Empty:
                for rank, p in enumerate(self._processes):
                    if p.exitcode is not None and rank not in got:
                        raise WorkerError(
                            f"rank {rank} exited with code {p.exitcode} before reporting a result",
                            rank,
                            self._logs(advance=False),
                        ) from None
                if time.monotonic() > deadline:
                    raise WorkerError(
                        f"not every rank finished within {self.timeout:g} s (results from ranks "
                        f"{sorted(got)})",
                        None,
                        self._logs(advance=False),
                    ) from None
                continue
            if status == "error":
                raise WorkerError(
                    f"rank {rank} raised:\n{payload}", rank, self._logs(advance=False)
                )
            got[rank] = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
        return [got[r] for r in range(self.world_size)]

    def close(self) -> None:
        """End the worker processes (politely, then by force) and remove their files."""
        if self._finalizer is not None:
            for tasks, process in zip(self._tasks, self._processes, strict=True):
                if process.is_alive():
                    tasks.put(None)
            deadline = time.monotonic() + 10
            for process in self._processes:
                process.join(max(0.0, deadline - time.monotonic()))
            self._finalizer()  # whatever is still alive is terminated, then killed
            for q in [*self._tasks, self._results]:
                q.close()
                q.cancel_join_thread()
            self._finalizer = None
        self._processes = []
        self._workdir = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"{len(self._processes)} running" if self.running else "not running"
        return f"Workers(world_size={self.world_size}, backend={self.backend!r}, {state})"


def _cleanup(processes: list[Any], workdir: Path) -> None:
    _stop(processes)
    shutil.rmtree(workdir, ignore_errors=True)


def launch(
    target: str | Callable[..., Any],
    *args: Any,
    world_size: int = 2,
    backend: str | None = None,
    timeout: float = 300.0,
    threads: int = 1,
) -> DistributedRun:
    """Run ``target(rank, world_size, device, *args)`` once in ``world_size`` new processes.

    The same as ``Workers(...).run(target, *args)`` followed by closing: the processes are
    started for this call and ended before it returns or raises.

    Parameters
    ----------
    target : str or callable
        ``"package.module:function"``, ``"path/to/file.py:function"``, or a top-level function
        of an importable module.
    *args : object
        Further arguments for ``target`` (picklable).
    world_size, backend, timeout, threads
        As for :class:`Workers`.

    Returns
    -------
    DistributedRun
        Results and output in rank order, the backend, the wall time.

    Raises
    ------
    TypeError, ValueError
        For a target that cannot be imported by name, or bad numbers.
    WorkerError
        If a worker raised, died, or did not finish within ``timeout``.
    """
    with Workers(world_size, backend, timeout, threads) as workers:
        return workers.run(target, *args)
