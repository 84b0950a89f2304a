"""The benchmark's cases, one module each, run by ``benchmarks/bench.py`` in the order of its ``CASES``.

A case module has ``NAME`` (what ``--skip`` takes), its parameter grid as module constants, and
``run(ctx) -> targets``: it adds its rows to ``ctx.table`` and returns its targets as tuples (name, value,
target, unit) or (name, value, target, unit, "<=") for a cap; the harness judges them, PASS or FAIL. A case
may add PASS/FAIL rows of its own (a check that is not a measured speed). ``ctx`` holds ``torch``, ``table``,
``args`` (the command line), ``ceilings`` (GEMM GFLOP/s per dtype), ``allocator_tuned`` and ``timed``
(``bench.timed_blocks``). A case with a ``run_first(ctx)`` also runs it before anything large is allocated
and before the allocator is tuned (``ctx.ceilings`` is None then)."""
