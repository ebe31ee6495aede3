"""In-process tunes share their executors: one registry per configuration, lent to each
tune, closed once no tune has used it for ``idle_s`` (and at the process's exit)."""

from __future__ import annotations

import threading
import time

import pytest

import pipetune
from service.runs import shared_executors
from service.runs.executors import ExecutorRegistry
from service.runs.shared_executors import SharedExecutors


class _Registry:
    """A stand-in registry that says when it is closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        assert not self.closed.is_set(), "closed twice"
        self.closed.set()


def _maker(made: list[_Registry]):
    def make() -> _Registry:
        made.append(_Registry())
        return made[-1]
    return make


def test_tunes_one_after_the_other_borrow_one_registry_that_stays_open() -> None:
    shared, made = SharedExecutors(idle_s=30.0), []
    with shared.lend("gpu", _maker(made)) as first:
        pass
    with shared.lend("gpu", _maker(made)) as second:
        pass
    assert second is first and len(made) == 1
    assert not first.closed.is_set()
    assert shared.open_keys() == ["gpu"]
    shared.close_all()
    assert first.closed.is_set() and shared.open_keys() == []


def test_a_registry_is_closed_once_idle_and_the_next_tune_makes_another() -> None:
    shared, made = SharedExecutors(idle_s=0.05), []
    with shared.lend("gpu", _maker(made)) as first:
        time.sleep(0.1)  # in use: longer than idle_s, never closed under a tune
        assert not first.closed.is_set()
    assert first.closed.wait(5.0)
    assert shared.open_keys() == []
    with shared.lend("gpu", _maker(made)) as second:
        assert second is not first and not second.closed.is_set()
    shared.close_all()


def test_no_idle_time_closes_the_registry_when_its_tune_ends() -> None:
    shared, made = SharedExecutors(idle_s=0.0), []
    with shared.lend("gpu", _maker(made)) as registry:
        assert not registry.closed.is_set()
    assert registry.closed.is_set() and shared.open_keys() == []


def test_concurrent_tunes_share_it_and_the_idle_clock_starts_when_the_last_ends() -> None:
    shared, made = SharedExecutors(idle_s=0.05), []
    first_in, release_first = threading.Event(), threading.Event()
    borrowed: list[_Registry] = []

    def long_tune() -> None:
        with shared.lend("gpu", _maker(made)) as registry:
            borrowed.append(registry)
            first_in.set()
            release_first.wait(5.0)

    thread = threading.Thread(target=long_tune)
    thread.start()
    assert first_in.wait(5.0)
    with shared.lend("gpu", _maker(made)) as registry:
        borrowed.append(registry)
    time.sleep(0.15)  # the short tune ended past idle_s ago; the long one still holds it
    assert not registry.closed.is_set()
    release_first.set()
    thread.join(5.0)
    assert borrowed[0] is borrowed[1] and len(made) == 1
    assert registry.closed.wait(5.0)


def test_configurations_get_registries_of_their_own() -> None:
    shared, made = SharedExecutors(idle_s=30.0), []
    with shared.lend(("dir-a", 8), _maker(made)) as a, shared.lend(("dir-b", 8), _maker(made)) as b:
        assert a is not b
    assert sorted(shared.open_keys()) == [("dir-a", 8), ("dir-b", 8)]
    shared.close_all()
    assert a.closed.is_set() and b.closed.is_set()


@pytest.mark.parametrize(("idle_s", "registries"), [(60.0, 1), (0.0, 2)])
def test_pipetune_tune_twice_in_a_process(monkeypatch, tmp_path, idle_s: float,
                                          registries: int) -> None:
    """Two in-process tunes of different workloads: with an idle time they run on one
    registry (the second tune's GPU worker would already be up), without one each makes
    its own and closes it."""
    made: list[ExecutorRegistry] = []
    closed: list[ExecutorRegistry] = []
    make = ExecutorRegistry.from_settings.__func__  # type: ignore[attr-defined]

    def recording(cls, settings, gpu_pool_factory=None):
        made.append(make(cls, settings, gpu_pool_factory))
        return made[-1]

    monkeypatch.setattr(ExecutorRegistry, "from_settings", classmethod(recording))
    monkeypatch.setattr(ExecutorRegistry, "close",
                        lambda self: closed.append(self))
    monkeypatch.setattr(shared_executors, "_shared", SharedExecutors(idle_s))
    monkeypatch.setenv("PIPETUNE_LOCAL_POOL_IDLE_S", str(idle_s))
    monkeypatch.setenv("PIPETUNE_DATA_DIR", str(tmp_path))
    url = f"sqlite:///{tmp_path / 'local.db'}"
    for m in (256, 512):
        result = pipetune.tune("gemm", device="sim:h200", budget={"trials": 4},
                               database_url=url, progress=False, m=m, n=512, k=512,
                               dtype="float16")
        assert result.status == "succeeded" and not result.cached
    assert len(made) == registries
    assert len(closed) == (0 if idle_s else 2)
    shared_executors._shared.close_all()
    assert sorted(map(id, closed)) == sorted(map(id, made))


def test_an_interrupted_tune_closes_its_registry_and_an_error_does_not() -> None:
    shared, made = SharedExecutors(idle_s=30.0), []
    with pytest.raises(ValueError), shared.lend("gpu", _maker(made)):
        raise ValueError("a bad request")
    assert not made[0].closed.is_set() and shared.open_keys() == ["gpu"]
    with pytest.raises(KeyboardInterrupt), shared.lend("gpu", _maker(made)):
        raise KeyboardInterrupt
    assert made[0].closed.is_set() and shared.open_keys() == []
