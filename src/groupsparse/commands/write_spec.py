"""`groupsparse write-spec`: write a JSON file the workflow built from the checked study (a job's spec
file, the record of who owns the results folder), atomically: the workflow's parse step writes nothing."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import JsonObject, OutputFile

    JSON_TEXT = JsonObject(text=True)
    p = sub.add_parser("write-spec", help="write a spec file the workflow built from the checked study")
    p.add_argument("--json", type=JSON_TEXT, required=True, help="the file's bytes: a JSON object")
    p.add_argument(
        "--out",
        type=OutputFile(),
        required=True,
        help="the file; a name <stem>.<12 hex>.json must be the sha256 of those bytes",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    import re
    from pathlib import Path

    from ..io.files import InputError, content_path, write_text_atomic

    try:
        is_object = isinstance(json.loads(args.json), dict)
    except json.JSONDecodeError as exc:
        raise InputError(f"--json: not valid JSON ({exc})") from None
    if not is_object:
        raise InputError("--json: must be a JSON object")
    out = Path(args.out)
    named = re.fullmatch(r"(.+)\.[0-9a-f]{12}\.json", out.name)
    if named and content_path(out.parent, named.group(1), args.json) != out:
        raise InputError(f"{out}: its name is not the hash of the JSON given (a spec file is named by its bytes)")
    write_text_atomic(out, args.json)
    print(f"wrote {out}")
    return 0
