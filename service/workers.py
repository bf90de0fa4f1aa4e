"""Solves in worker processes: a pool sized to cores, each worker killed and replaced when
its request runs out of time, its client leaves, or it outgrows its memory budget.

The event loop never blocks on a solve: a job is sent down a pipe to an idle worker and the
loop waits on the pipe's file descriptor (loop.add_reader). Workers come from a forkserver
whose preload (service.jobs) already imported the solver and warmed its caches on the seed
problem, so a replacement is ready in milliseconds and answers at warm speed.

Units: `_s` seconds, `_bytes` bytes (RSS read from /proc/<pid>/statm).
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Awaitable, Callable

log = logging.getLogger("trainplan.workers")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
POLL_S = 0.2  # how often a waiting request checks its client, deadline and worker memory
READY_S = 120.0  # longest wait for a new worker's "ready" (its start-up imports)


class JobStopped(Exception):
    """A job did not finish: `reason` is deadline | disconnect | memory | crashed | busy."""

    def __init__(self, reason: str, message: str, stages: list[str], elapsed_s: float) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.stages = stages
        self.elapsed_s = elapsed_s


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` in bytes (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["service.worker_boot"])
    return ctx


@dataclass(eq=False)
class _Worker:
    process: Any
    conn: Any
    jobs: int = 0


@dataclass
class _Run:
    """What one job has reported so far."""

    stages: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


class WorkerPool:
    """`size` worker processes; `run()` hands a job to an idle one (waiting up to `wait_s`).

    Started by the app's lifespan (in the background: probes answer meanwhile, /readyz
    says not ready until the workers are up) or else by the first job.
    """

    def __init__(self, size: int, wait_s: float, max_rss_bytes: int) -> None:
        self.size = size
        self.wait_s = wait_s
        self.max_rss_bytes = max_rss_bytes
        self._idle: asyncio.Queue[_Worker] | None = None
        self._starting: asyncio.Future | None = None
        self._replacing: set[asyncio.Future] = set()
        self._all: set[_Worker] = set()
        self._closed = False
        self.replaced = 0  # workers killed and replaced (deadline, disconnect, memory, crash)

    # ---- lifecycle -------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        """Fork a worker (returns at once; `_ready` waits until it can take a job)."""
        from service.jobs import worker_main

        parent, child = multiprocessing.Pipe()
        proc = _context().Process(target=worker_main, args=(child, self.max_rss_bytes),
                                  daemon=True, name="trainplan-worker")
        proc.start()
        child.close()
        worker = _Worker(proc, parent)
        self._all.add(worker)
        return worker

    def _fork_ready(self) -> _Worker | None:
        """A new worker that has said "ready" (blocking; called in a thread), or None once
        the pool is closed. A forked child still re-imports the server's main module before
        it runs (multiprocessing's spawn preparation), a second or more on a loaded
        machine: a job handed over before then would spend that time of its deadline
        waiting. A worker that dies or stays silent for READY_S is killed and forked again."""
        while not self._closed:
            worker = self._spawn()
            try:
                if worker.conn.poll(READY_S) and worker.conn.recv() == ("ready",):
                    return worker
            except (EOFError, OSError):
                pass
            self._kill(worker)
            if not self._closed:
                log.error("solve worker %s did not start; forking another", worker.process.pid)
                time.sleep(1.0)
        return None

    def _kill(self, worker: _Worker) -> None:
        self._all.discard(worker)
        if worker.process.is_alive():
            try:
                os.kill(worker.process.pid, signal.SIGKILL)
            except ProcessLookupError:  # died meanwhile
                pass
        worker.process.join(timeout=5)
        try:
            worker.conn.close()
        except OSError:  # closed meanwhile by a retiring thread racing the shutdown (EBADF)
            pass

    def _retire(self, worker: _Worker) -> None:
        """Kill `worker` (SIGKILL: a solve does not stop for less) and put a fresh one in.
        Reaping it and forking the replacement happen in a thread, off the event loop."""
        self._all.discard(worker)
        if worker.process.is_alive():
            os.kill(worker.process.pid, signal.SIGKILL)
        self.replaced += 1
        task = asyncio.ensure_future(self._replace(worker))
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _replace(self, dead: _Worker) -> None:
        def reap_and_fork() -> _Worker | None:
            dead.process.join(timeout=5)
            dead.conn.close()
            return self._fork_ready()

        fresh = await asyncio.to_thread(reap_and_fork)
        if fresh is None:
            return
        if self._closed or self._idle is None:  # closed while it forked
            self._kill(fresh)
            return
        self._idle.put_nowait(fresh)

    async def start(self) -> None:
        """Start the workers (once; later calls wait for that start). Forks run in a thread:
        the first one waits for the forkserver's warm-up (seconds), the loop does not."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        forked = await asyncio.gather(*[asyncio.to_thread(self._fork_ready)
                                        for _ in range(self.size)])
        workers = [w for w in forked if w is not None]
        if self._closed or len(workers) < self.size:  # closed while starting
            self.close()
            return
        idle: asyncio.Queue[_Worker] = asyncio.Queue()
        for worker in workers:
            idle.put_nowait(worker)
        self._idle = idle

    def alive(self) -> int:
        """Worker processes now alive (0 before the first job)."""
        return sum(w.process.is_alive() for w in self._all)

    def healthy(self) -> bool:
        """Started, and every worker alive."""
        return self._idle is not None and self.alive() == len(self._all) > 0

    def close(self) -> None:
        self._closed = True
        for worker in list(self._all):
            self._kill(worker)

    # ---- running a job ---------------------------------------------------------------------
    async def run(self, kind: str, payload: dict[str, Any], deadline: float,
                  disconnected: Callable[[], Awaitable[bool]]) -> Any:
        """Run job `kind` (service.jobs.JOBS) on `payload` before `deadline` (monotonic s).

        Returns the job's result, re-raises its PlannerError, or raises JobStopped.
        """
        run = _Run()
        await self.start()
        idle = self._idle
        if idle is None:  # closed while starting
            raise JobStopped("busy", "the server is shutting down", [], 0.0)
        worker = await self._take(idle, deadline, run)
        try:
            result = await self._exchange(worker, kind, payload, deadline, disconnected, run)
        except BaseException:
            self._retire(worker)
            raise
        worker.jobs += 1
        if rss_bytes(worker.process.pid) > self.max_rss_bytes:
            self._retire(worker)
        else:
            idle.put_nowait(worker)
        return result

    async def _take(self, idle: asyncio.Queue[_Worker], deadline: float, run: _Run) -> _Worker:
        """An idle worker: at once when one is idle, whatever time the request has left
        (Python 3.11's asyncio.wait_for with a timeout <= 0 gives up before even a ready get()
        runs, so a request that reached the pool late on a loaded machine was refused as
        saturated with a worker idle); else the first freed within queue_wait_s and the
        deadline. Raises: JobStopped('busy')."""
        try:
            return idle.get_nowait()
        except asyncio.QueueEmpty:
            pass
        wait = max(0.0, min(self.wait_s, deadline - time.monotonic()))
        try:
            return await asyncio.wait_for(idle.get(), timeout=wait)
        except TimeoutError:
            raise JobStopped("busy", f"all {self.size} solve workers are busy; retry shortly",
                             run.stages, time.monotonic() - run.started) from None

    async def _exchange(self, worker: _Worker, kind, payload, deadline, disconnected, run) -> Any:
        loop = asyncio.get_running_loop()
        try:
            worker.conn.send((kind, payload))
        except OSError:  # the worker died while idle (killed from outside, out of memory)
            raise JobStopped("crashed", "the solve worker had died; retry", run.stages,
                             time.monotonic() - run.started) from None
        readable = asyncio.Event()
        loop.add_reader(worker.conn.fileno(), readable.set)
        try:
            while True:
                try:
                    await asyncio.wait_for(readable.wait(), timeout=POLL_S)
                except TimeoutError:
                    await self._check(worker, deadline, disconnected, run)
                    continue
                readable.clear()
                while worker.conn.poll():
                    message = self._receive(worker, run)
                    if message[0] == "stage":
                        run.stages.append(message[1])
                        continue
                    return _outcome(message)
        finally:
            loop.remove_reader(worker.conn.fileno())

    def _receive(self, worker: _Worker, run: _Run) -> tuple:
        try:
            return worker.conn.recv()
        except (EOFError, OSError):
            raise JobStopped("crashed", "the solve worker died (its memory or a bug); retry",
                             run.stages, time.monotonic() - run.started) from None

    async def _check(self, worker: _Worker, deadline: float, disconnected, run: _Run) -> None:
        elapsed = time.monotonic() - run.started
        if time.monotonic() >= deadline:
            raise JobStopped("deadline", "the request ran out of time", run.stages, elapsed)
        if await disconnected():
            raise JobStopped("disconnect", "the client left", run.stages, elapsed)
        if rss_bytes(worker.process.pid) > self.max_rss_bytes:
            raise JobStopped("memory", f"the solve outgrew the worker memory budget of "
                             f"{self.max_rss_bytes} bytes", run.stages, elapsed)
        if not worker.process.is_alive():
            raise JobStopped("crashed", "the solve worker died; retry", run.stages, elapsed)


def _outcome(message: tuple) -> Any:
    from service.jobs import rebuild_error

    if message[0] == "done":
        return message[1]
    raise rebuild_error(message[1])
