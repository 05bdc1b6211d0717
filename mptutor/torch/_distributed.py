"""Run functions in a few ``torch.distributed`` processes on one machine, and clean up.

The processes are spawned, so the function is named (``"package.module:function"`` or
``"path/to/file.py:function"``) and called with ``(rank, world_size, device, *args)`` in one
process group. When a worker raises, dies or times out, or the caller is interrupted, every
process is ended before the error reaches the caller (the others may wait in a collective).
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
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mptutor._checks import check_scalar


class _Run(NamedTuple):
    """What one call brings back: each rank's result and output, the backend, the wall time."""

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
    """Pick ``"nccl"`` (NCCL and a CUDA GPU for each of ``world_size`` processes) or ``"gloo"``.

    GPUs hidden by ``MPTUTOR_DEVICE=cpu`` (see :func:`mptutor.torch.device`) do not count.
    """
    from mptutor.torch import device

    if device() == "cuda" and torch.cuda.device_count() >= world_size and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def _resolve(target: str) -> Any:
    """Import the target function; a .py file is executed afresh, so that edits take effect."""
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


def _target_name(target: str) -> str:
    """Check a target string; a file's path is made absolute for the workers."""
    if not isinstance(target, str):
        raise TypeError(f"target must be a 'module:function' string, got {target!r:.80}")
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(
            f"target must be 'module:function' or 'path/to/file.py:function', got {target!r}"
        )
    if not where.endswith(".py"):
        return target
    if not Path(where).is_file():
        raise ValueError(f"target file {where} does not exist")
    return f"{Path(where).resolve()}:{name}"


def _serve(
    rank: int, world_size: int, backend: str, workdir: str, tasks: Any, results: Any, timeout: float
) -> None:
    """Run the loop of a worker process: output to a log file, join the group, run tasks."""
    log = open(Path(workdir) / f"rank{rank}.log", "w", buffering=1)  # noqa: SIM115
    os.dup2(log.fileno(), 1)  # C++ libraries write to the file descriptors
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    try:
        torch.set_num_threads(1)
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


def _cleanup(processes: list[Any], workdir: Path) -> None:
    """Terminate, then kill, whatever is still alive; remove the folder of logs."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join()
    shutil.rmtree(workdir, ignore_errors=True)


class Workers:
    """``world_size`` processes in one process group, kept for several calls (a context manager).

    They start at the first :meth:`run` and stay until :meth:`close` or a failure.

    Parameters
    ----------
    world_size : int, optional
        Number of processes.
    backend : str, optional
        ``"gloo"`` (the CPU) or ``"nccl"`` (rank ``r`` on GPU ``r``); by default
        :func:`choose_backend`.
    timeout : float, optional
        Seconds that one :meth:`run` may take (and the process group's timeout).

    Raises
    ------
    TypeError, ValueError
        For a ``world_size`` or ``timeout`` that is not positive, or an unknown ``backend``.
    """

    def __init__(
        self, world_size: int = 2, backend: str | None = None, timeout: float = 300.0
    ) -> None:
        self.world_size = check_scalar(world_size, "world_size", int, min_val=1)
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
        """Start the processes, with a finalizer that ends them."""
        self._workdir = Path(tempfile.mkdtemp(prefix="mptutor-dist-"))
        ctx = mp.get_context("spawn")
        self._tasks = [ctx.Queue() for _ in range(self.world_size)]
        self._results = ctx.Queue()
        self._offsets = [0] * self.world_size
        self._processes = []
        for rank in range(self.world_size):
            args = (
                rank, self.world_size, self.backend, str(self._workdir), self._tasks[rank],
                self._results, self.timeout,
            )  # fmt: skip
            process = ctx.Process(target=_serve, args=args, daemon=True)
            process.start()
            self._processes.append(process)
        self._finalizer = weakref.finalize(self, _cleanup, self._processes, self._workdir)

    def _logs(self, advance: bool = True) -> list[str]:
        """Return each rank's output since the last call that advanced."""
        logs = []
        for rank in range(self.world_size):
            path = self._workdir / f"rank{rank}.log" if self._workdir else None
            text = path.read_text(errors="replace") if path and path.exists() else ""
            logs.append(text[self._offsets[rank] :])
            if advance:
                self._offsets[rank] = len(text)
        return logs

    def run(self, target: str, *args: Any) -> _Run:
        """Call ``target(rank, world_size, device, *args)`` in every process and wait.

        Parameters
        ----------
        target : str
            ``"package.module:function"`` or ``"path/to/file.py:function"`` (read at every call).
        *args : object
            Further arguments (picklable), the same for every rank.

        Returns
        -------
        object
            With ``results`` and ``logs`` (each rank's return value and output, in rank order),
            ``backend`` and ``seconds`` (the wall time).

        Raises
        ------
        TypeError, ValueError
            For a target that is not such a string.
        WorkerError
            If a worker raised (its traceback in the message), died, or ran past ``timeout``.
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
            return _Run(results, self._logs(), self.backend, time.perf_counter() - start)
        finally:
            if not completed:  # an error, a timeout or an interruption: end the workers now,
                self._close(grace=0.0)  # since a rank may hang in its target or a collective

    def _collect(self, deadline: float) -> list[Any]:
        """Wait for every rank's result; a WorkerError on a failure, a death or the deadline."""
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
        self._close(grace=10.0)

    def _close(self, grace: float) -> None:
        """:meth:`close`, waiting up to ``grace`` seconds for the processes to leave."""
        if self._finalizer is not None:
            for tasks, process in zip(self._tasks, self._processes, strict=True):
                if process.is_alive():
                    tasks.put(None)
            deadline = time.monotonic() + grace
            for process in self._processes:
                process.join(max(0.0, deadline - time.monotonic()))
            self._finalizer()
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


def launch(
    target: str,
    *args: Any,
    world_size: int = 2,
    backend: str | None = None,
    timeout: float = 300.0,
) -> _Run:
    """Run ``target`` once in ``world_size`` new processes, ended before this returns or raises.

    Parameters
    ----------
    target, *args
        As for :meth:`Workers.run`, which also says what is returned and raised.
    world_size, backend, timeout
        As for :class:`Workers`.

    Returns
    -------
    object
        As :meth:`Workers.run` (``results``, ``logs``, ``backend``, ``seconds``).
    """
    with Workers(world_size, backend, timeout) as workers:
        return workers.run(target, *args)
