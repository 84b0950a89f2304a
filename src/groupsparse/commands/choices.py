"""`groupsparse choices`: write docs/STUDY.md section 9 (each choice, its keys, the schema's default and
the default study's value) from config.schema.yaml and config.yaml; see :mod:`groupsparse.config.choices`."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import InputFile

    p = sub.add_parser("choices", help="rewrite docs/STUDY.md's table of choices from the schema and config.yaml")
    p.add_argument(
        "--study",
        type=InputFile(),
        default="docs/STUDY.md",
        help="the Markdown file holding the table between its markers",
    )
    p.add_argument(
        "--config",
        type=InputFile(),
        default="config.yaml",
        help="the default study, whose values the last column shows",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    import yaml

    from ..config.choices import rewritten
    from ..io.files import InputError, write_text_atomic

    study, config = Path(args.study), Path(args.config)
    for path in (study, config):
        if not path.is_file():
            raise InputError(f"{path}: no such file")
    try:
        text = rewritten(study.read_text(), yaml.safe_load(config.read_text()))
    except ValueError as exc:
        raise InputError(f"{study}: {exc}") from None
    changed = text != study.read_text()
    if changed:
        write_text_atomic(study, text)
    print(f"{study}: table of choices {'rewritten' if changed else 'already in step'}")
    return 0
