"""Fits per second of every transfer method (``groupsparse.transfer.method_names``) at the default sizes and
downstream tasks (``--quick``: n = 8 and 64, the ``transfer`` task), 5 seeds, from a checkpoint of
``--transfer-pretrain-steps`` steps."""

from __future__ import annotations

import tempfile
from pathlib import Path

from workloads import run_spec

NAME = "transfer"


def run(ctx) -> list:
    try:
        from groupsparse.io import files as io
        from groupsparse.training.pretrain import Trainer, checkpoint_payload
        from groupsparse.transfer import DEFAULT_SIZES, TransferSpec, method_names
        from groupsparse.transfer.runner import run_transfer
    except ImportError as exc:
        ctx.table.add("transfer", "not measurable", "-", note=f"import failed: {exc}")
        return []
    table, args = ctx.table, ctx.args
    spec = run_spec("float32", steps=args.transfer_pretrain_steps)
    sizes = [8, 64] if args.quick else list(DEFAULT_SIZES)
    tspec = TransferSpec.from_dict({"downstream": ["transfer"]} if args.quick else {})
    with tempfile.TemporaryDirectory() as tmp:
        res = Trainer(spec, list(range(5))).run()
        ckpt = Path(tmp) / "pre.safetensors"
        tensors, meta = checkpoint_payload(spec, res, list(range(5)))
        io.save_checkpoint(ckpt, tensors, meta)
        for method in method_names():
            try:
                out = run_transfer(spec, tspec, ckpt, [method], sizes)
            except Exception as exc:  # the transfer package is young: report, do not hide the other rows
                table.add("transfer", method, "-", note=f"failed: {type(exc).__name__}: {exc}"[:120])
                continue
            fits = int((out.table["method"] == method).sum())
            secs = out.seconds_per_method.get(method, out.wall_seconds)
            extra = (
                f"; numba compile {out.group_lasso_compile_seconds:.1f} s excluded"
                if method == "group_lasso" and out.group_lasso_compile_seconds
                else ""
            )
            table.add(
                "transfer",
                method,
                fits / secs,
                "fits/s",
                note=f"{fits} fits (n in {sizes[0]}..{sizes[-1]}, {len(tspec.downstream)} downstream, "
                f"5 seeds) in {secs:.1f} s{extra}",
            )
    return []
