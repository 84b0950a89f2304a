"""How the hot path uses a CPU: the allocator, the floating-point environment, threads.

Process- and thread-wide settings, kept apart from the maths in ``fastpath``: glibc's
allocator keeps freed memory, subnormal numbers are flushed while the float32 kernel runs,
seeds run on worker threads, and numpy's BLAS runs each call on the calling thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_allocator_tuned = False
_numpy_blas_limited = False
_libm = None  # the C maths library (fegetenv, fesetenv), loaded on first use; False: none


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse instead of returning them to the system.

    A training step allocates a few MB of temporaries. By default glibc serves blocks above
    128 KiB with mmap and unmaps them on free, so every step pays thousands of page faults
    (measured here: ~3,000 per step in float32, ~13,000 in float64, about half the step's
    time). Raising the mmap and trim thresholds keeps those pages mapped. Process-wide,
    idempotent; returns False where the C library is not glibc (nothing changes then).
    """
    global _allocator_tuned
    if _allocator_tuned:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1
        ok = ok and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30) == 1
    except (OSError, AttributeError):
        return False
    _allocator_tuned = ok
    return ok


@contextmanager
def denormals_flushed():
    """Subnormal numbers read and written as 0 (x86 DAZ/FTZ) on this thread; its setting is restored after.

    As training goes the attention saturates: a few percent of the float32 weights 2^(score - max)
    fall below 2^-126, and every operation on such subnormal numbers takes a slow microcode path:
    measured here, the kernel of a 5-seed float32 step went from 3.4 to 4.1 ms once training was under way.
    Flushed, those weights are 0 (under 1.2e-38, far below the rounding of any sum they enter).
    """
    env = _fenv_get()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        _fenv_set(env)


def _fenv_get():
    """The thread's floating-point environment (x86: the SSE control word, which holds DAZ/FTZ), or None."""
    global _libm
    if _libm is None:
        try:
            _libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        except OSError:
            _libm = False
    if not _libm:
        return None
    env = ctypes.create_string_buffer(64)  # fenv_t: 32 bytes on x86-64 glibc
    return env if _libm.fegetenv(env) == 0 else None


def _fenv_set(env) -> None:
    if env is None:
        torch.set_flush_denormal(False)  # torch's default; without libm the previous setting is unknown
    else:
        _libm.fesetenv(env)


class SeedWorkers:
    """Runs per-seed work on up to ``threads`` worker threads, each doing single-threaded torch ops.

    A step is a few hundred small operations per seed. Split across cores op by op (torch's
    intra-op threads) each one pays a fork/join, and when another process holds a core every
    join waits for it: measured here, 2 threads on a shared 2-core machine made a step 5 to 10
    times slower than 1. Whole seeds on separate threads need no joins within a step, and
    every seed's numbers are then those of a one-thread run whatever ``threads`` is.
    On a GPU, or with one thread, the work runs inline.
    """

    def __init__(self, threads: int, n_seeds: int, device: torch.device):
        self.inline = device.type != "cpu" or threads <= 1
        self.workers = max(1, min(threads, n_seeds))
        self._restore_threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def map(self, fn, n: int) -> list:
        """[fn(0), ..., fn(n - 1)], in order."""
        if self.inline:
            return [fn(s) for s in range(n)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.workers, thread_name_prefix="seed", initializer=torch.set_num_threads, initargs=(1,)
            )
        out = list(self._pool.map(fn, range(n)))
        # torch.set_num_threads acts per OS thread on the op kernels, but also sets a process-wide
        # default that a worker's start just lowered to 1: put the job's value back (microseconds)
        torch.set_num_threads(self._restore_threads)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def numpy_blas_one_thread() -> None:
    """Process-wide, once: numpy's BLAS runs each call on the calling thread (its default pool would
    take every core, under each seed worker). Other code that wants more sets its own limit
    (the transfer runner does, with threadpoolctl)."""
    global _numpy_blas_limited
    if not _numpy_blas_limited:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _numpy_blas_limited = True
