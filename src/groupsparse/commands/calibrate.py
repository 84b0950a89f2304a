"""`groupsparse calibrate`: time a small pretraining and a small transfer job on this machine and
compare with the cost model (see :mod:`groupsparse.costs.calibrate`); the workflow's onstart runs it."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import OutputFile, threads

    p = sub.add_parser("calibrate", help="time small jobs here against the cost model (a few seconds)")
    p.add_argument("--threads", type=threads(), default=1, help="torch threads, as the study's jobs use")
    p.add_argument(
        "--out", type=OutputFile(), default=None, help="write the calibration as JSON here (default: print it)"
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from ..costs.calibrate import measure
    from ..io.files import write_text_atomic

    cal = measure(args.threads)
    text = json.dumps(cal, indent=1)
    if args.out:
        write_text_atomic(args.out, text + "\n")
    print(
        f"pretraining {cal['pretrain_measured_s']:.2f} s against {cal['pretrain_predicted_s']:.2f} s predicted "
        f"({cal['pretrain_scale']:.2f}x); fits {cal['transfer_measured_s']:.2f} s against "
        f"{cal['transfer_predicted_s']:.2f} s ({cal['transfer_scale']:.2f}x)"
    )
    return 0
