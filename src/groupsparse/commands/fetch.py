"""`groupsparse fetch cifar10 --dest DIR`: download, check and safely extract CIFAR-10 once.

The workflow's `fetch_cifar10` rule calls it when a study's task.path has no data yet; see
:mod:`groupsparse.data.fetch`.
"""

from __future__ import annotations


def register(sub) -> None:
    from ._args import POSITIVE, OutputFolder, Text

    URL = Text(r"(https?|file)://\S+", "an http(s):// or file:// URL")
    MD5 = Text(r"[0-9a-fA-F]{32}", "an MD5 digest: 32 hexadecimal digits")
    p = sub.add_parser("fetch", help="download a dataset once (cifar10), check its MD5 and extract it safely")
    p.add_argument("dataset", choices=["cifar10"])
    p.add_argument(
        "--dest", type=OutputFolder(), required=True, nargs="+", help="folder(s) that will hold cifar-10-batches-py/"
    )
    p.add_argument(
        "--url", type=URL, default=None, help="archive URL (default: $GROUPSPARSE_CIFAR10_URL, else the official one)"
    )
    p.add_argument(
        "--md5", type=MD5, default=None, help="expected MD5 (default: $GROUPSPARSE_CIFAR10_MD5, else the published one)"
    )
    p.add_argument("--timeout", type=POSITIVE, default=60.0, help="seconds to wait for the server")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from ..data.fetch import FetchError, fetch_cifar10
    from ._args import EXIT_INPUT

    try:
        for dest in args.dest:
            print(fetch_cifar10(dest, url=args.url, md5=args.md5, timeout=args.timeout))
    except FetchError as exc:
        print(f"groupsparse fetch: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return 0
