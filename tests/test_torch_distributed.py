import multiprocessing
import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
import torch.distributed as dist

from mptutor.torch import WorkerError, Workers, choose_backend, launch

HERE = __file__


# --- functions the worker processes run (they import this file by its path) ----------------


def all_reduce_rank(rank, world_size, device, offset):
    t = torch.tensor([rank + offset], dtype=torch.float32, device=device)
    dist.all_reduce(t)
    print(f"rank {rank} says hello")
    return {"rank": rank, "world_size": world_size, "device": str(device), "sum": t}


def fail_on_rank_one(rank, world_size, device):
    if rank == 1:
        raise ValueError("rank one is broken")
    dist.barrier()  # rank 0 waits here for a rank that never comes


def sleep_forever(rank, world_size, device):
    time.sleep(600)


def _no_children():
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    return multiprocessing.active_children() == []


# --- tests ------------------------------------------------------------------------------


def test_choose_backend_on_a_cpu(monkeypatch):
    monkeypatch.setenv("MPTUTOR_DEVICE", "cpu")
    assert choose_backend(2) == "gloo"


def test_workers_run_calls_every_rank_and_keep_their_processes():
    with Workers(world_size=2, backend="gloo") as workers:
        run = workers.run(f"{HERE}:all_reduce_rank", 10.0)
        assert run.backend == "gloo" and run.seconds > 0
        assert [r["rank"] for r in run.results] == [0, 1]
        assert all(r["world_size"] == 2 and r["device"] == "cpu" for r in run.results)
        assert all(torch.equal(r["sum"], torch.tensor([21.0])) for r in run.results)
        assert run.logs == ["rank 0 says hello\n", "rank 1 says hello\n"]
        assert workers.running
        again = workers.run(f"{HERE}:all_reduce_rank", 0.0)  # the same processes, new output
        assert [r["sum"].item() for r in again.results] == [1.0, 1.0]
        assert again.logs == ["rank 0 says hello\n", "rank 1 says hello\n"]
    assert not workers.running and _no_children()


def test_a_failing_rank_ends_every_process_and_reports_its_traceback():
    workers = Workers(world_size=2, backend="gloo")
    with pytest.raises(WorkerError, match="rank one is broken") as info:
        workers.run(f"{HERE}:fail_on_rank_one")
    assert info.value.rank == 1
    assert "ValueError" in str(info.value)
    assert not workers.running and _no_children()


def test_launch_times_out_and_cleans_up():
    start = time.monotonic()
    with pytest.raises(WorkerError, match="within 3 s") as info:
        launch(f"{HERE}:sleep_forever", world_size=2, backend="gloo", timeout=3)
    assert info.value.rank is None
    # the hung workers are ended at once: close()'s 10 s for a polite exit is not waited for
    assert time.monotonic() - start < 3 + 7
    assert _no_children()


def test_targets_that_cannot_be_imported_by_name_are_refused():
    def local(rank, world_size, device):
        return rank

    for bad in (local, lambda r, w, d: r, 42):
        with pytest.raises(TypeError, match="target must be a 'module:function' string"):
            launch(bad)
    with pytest.raises(ValueError, match="module:function"):
        launch("no_colon_here")
    with pytest.raises(ValueError, match="does not exist"):
        launch("/nonexistent/workers.py:train")
    assert _no_children()


def test_bad_settings_are_refused():
    for kwargs, match in (
        ({"world_size": 0}, "world_size"),
        ({"timeout": 0}, "timeout"),
        ({"backend": "mpi"}, "backend"),
    ):
        with pytest.raises(ValueError, match=match):
            Workers(**kwargs)
    for kwargs, match in (
        ({"world_size": 2.0}, "world_size must be an int"),
        ({"world_size": True}, "world_size must be an int"),
        ({"timeout": "300"}, "timeout must be a real number"),
    ):
        with pytest.raises(TypeError, match=match):
            Workers(**kwargs)
    assert Workers(timeout=1, backend="gloo").timeout == 1.0
    assert not Workers(backend="gloo").running
