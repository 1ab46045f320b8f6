"""Python jobs in a child process of their own, stopped at their deadline.

A thread cannot be stopped: a job past its deadline that runs on in a thread keeps its CPU
and memory, and the next jobs of every tenant in the same worker pay for it. So each
attempt of a Python job runs in a child forked for it, and the worker kills the child
(and anything it started: the child leads its own process group) when the deadline comes.
A job that sleeps, spins or ignores signals past its deadline is gone at its deadline.

Results, exceptions and progress updates come back over a pipe, as length-prefixed
pickles. A plain ``os.fork`` and ``os.pipe``, not ``multiprocessing``: AWS Lambda has no
``/dev/shm``, so multiprocessing's queues, pools and semaphores fail there. Heartbeats
(long jobs) are sent by the parent while it waits, so a child cannot forget them, and
they stop when the child is stopped.

The child is a copy of the worker at the moment of the fork: it can use what the handler
module set up at import. Its writes to the parent's memory are its own (a handler's
effects go through its targets, databases and queues, never through worker memory). Only
the forking thread exists in the child, so a lock another worker thread held at the fork
stays held there: a handler makes the clients it needs (boto3, HTTP pools) in the job
rather than sharing the worker's. (Python's logging locks are reset at a fork.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import select
import signal
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from fireline.services import targets

# A frame: 4 bytes of length, then a pickle of (kind, value).
_HEADER = struct.Struct("!I")
_READ_CHUNK = 1 << 16
# What the child's exit status says when it failed to report at all (EX_SOFTWARE).
_CHILD_BROKEN = 70
# After the child's end of the pipe closes, how long its exit may take to be seen.
_EXIT_GRACE_SECONDS = 1.0
# How often a waiting parent looks whether its child has ended without closing the pipe.
_EXIT_CHECK_SECONDS = 0.25
# At the deadline, how many chunks already in the pipe are still read (1 MiB).
_DRAIN_CHUNKS = 16


def run_in_child_process(
    handler: Callable[[targets.JobContext], Any], context: targets.JobContext, timeout: float
) -> Any:
    """Run ``handler(context)`` in a forked child within ``timeout`` seconds: its result,
    or its exception raised here. Past the deadline the child's process group is killed
    and :class:`targets.DeadlineExceeded` raised; a child that dies without an answer is
    :class:`targets.TargetFailed`."""
    # Whatever the parent has buffered would otherwise be written twice (by both).
    _flush_standard_streams()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its outcome is what the parent reads
        os.close(read_fd)
        _run_child(handler, context, write_fd)
    os.close(write_fd)
    # Also done by the child, whichever runs first; failing means the child already did
    # (or already ended).
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    try:
        return _supervise(pid, read_fd, context, timeout)
    finally:
        os.close(read_fd)
        stop(pid)


def stop(pid: int) -> None:
    """Kill the child's process group (the child and what it started) and reap it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group is empty: the child ended and started nothing that remains
    except PermissionError:
        # The group's leader was reaped and its number reused by another user's
        # process: nothing of ours is left in it.
        pass
    with contextlib.suppress(ChildProcessError):  # reaped already
        os.waitpid(pid, 0)


def _supervise(pid: int, fd: int, context: targets.JobContext, timeout: float) -> Any:
    ends = time.monotonic() + timeout
    frames = _Frames()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    exited = False
    while True:
        left = ends - time.monotonic()
        if left <= 0 and not exited:
            # What the child wrote by its deadline still counts (a busy parent may not
            # have read it yet): its progress is delivered, and an answer is the outcome.
            # Bounded, as a child still writing could keep the pipe full.
            for _ in range(_DRAIN_CHUNKS):
                if not poller.poll(0):
                    break
                chunk = os.read(fd, _READ_CHUNK)
                answer = _deliver(frames.feed(chunk), context) if chunk else None
                if answer is not None:
                    return _answered(*answer)
                if not chunk:
                    break
            raise targets.DeadlineExceeded(f"ran past {timeout:.0f} s and was stopped")
        # The pipe's end may outlive the child (a process it started, or a job forked by
        # another thread in the moment this pipe was open, holds a copy of its write end),
        # so the child's own end is watched too: once it has exited, what it wrote is
        # read, and no more waited for.
        wait = 0.0 if exited else min(left, _EXIT_CHECK_SECONDS)
        if poller.poll(int(wait * 1000)):
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                raise targets.TargetFailed(_ended_without_answer(pid, ends))
            answer = _deliver(frames.feed(chunk), context)
            if answer is not None:
                return _answered(*answer)
        elif exited:
            raise targets.TargetFailed(_ended_without_answer(pid, ends))
        else:
            exited = _has_exited(pid)


def _deliver(decoded: list[tuple[str, Any]], context: targets.JobContext) -> tuple[str, Any] | None:
    """Pass progress frames to ``context``; the child's answer once it has arrived."""
    for kind, value in decoded:
        if kind == "progress":
            context.progress(value)
        else:
            return kind, value
    return None


def _answered(kind: str, value: Any) -> Any:
    """The child's answer as the call's outcome: its value returned, its error raised."""
    if kind == "value":
        return value
    raise value


def _has_exited(pid: int) -> bool:
    """Has the child ended? (It stays waitable: its status is read later.)"""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _ended_without_answer(pid: int, ends: float) -> str:
    """Why the child's pipe closed before it answered (it exited, or was killed)."""
    waited_until = min(ends, time.monotonic() + _EXIT_GRACE_SECONDS)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() >= waited_until:
            return "the job's process closed its output without an answer"
        time.sleep(0.01)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"the job's process was killed ({name}) before it answered"
    return (
        f"the job's process exited (status {os.waitstatus_to_exitcode(status)}) before it answered"
    )


class _Frames:
    """Decodes the frames of a byte stream that arrives in arbitrary chunks."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str, Any]]:
        self._buffer += chunk
        decoded: list[tuple[str, Any]] = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            decoded.append(pickle.loads(self._buffer[_HEADER.size : end]))
            self._buffer = self._buffer[end:]
        return decoded


# --- the child -------------------------------------------------------------------------------


def _run_child(
    handler: Callable[[targets.JobContext], Any], context: targets.JobContext, fd: int
) -> None:  # pragma: no cover - runs in the forked child
    code = 0
    try:
        os.setpgid(0, 0)
        # The worker's handlers (e.g. a Lambda runtime's) are not the job's to run.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

        def send(kind: str, value: Any) -> None:
            body = pickle.dumps((kind, value))
            _write_all(fd, _HEADER.pack(len(body)) + body)

        own = dataclasses.replace(context, report_progress=lambda update: send("progress", update))
        try:
            value = handler(own)
        except BaseException as exc:  # every failure is the attempt's, reported to the parent
            _flush_standard_streams()
            send("error", _portable_error(exc))
        else:
            _flush_standard_streams()
            send("value", _portable_value(value))
    except BaseException:
        code = _CHILD_BROKEN
    finally:
        # Never return into the worker's code (its threads are not here), and never run
        # its exit handlers: leave at once.
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:  # pragma: no cover - runs in the child
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _portable_value(value: Any) -> Any:  # pragma: no cover - runs in the child
    """The handler's result as the parent can receive it: itself, or what stands for it
    when it cannot be pickled (the outcome stores a preview of such values anyway)."""
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:
        return repr(value)[: targets.PREVIEW_CHARS]
    return value


def _portable_error(exc: BaseException) -> Exception:  # pragma: no cover - runs in the child
    """The handler's exception as the parent raises it: itself if it survives pickling and
    is an ordinary exception (never SystemExit or KeyboardInterrupt in the worker), else a
    TargetFailed naming it."""
    if isinstance(exc, Exception):
        try:
            restored = pickle.loads(pickle.dumps(exc))
        except Exception:
            pass
        else:
            if isinstance(restored, Exception):
                return restored
    return targets.TargetFailed(f"{type(exc).__name__}: {exc}")


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing to keep
            stream.flush()
