"""The study's answers: per README question its data (one module each: ``theorem`` for question 1,
``training`` 2, ``transfer`` 3, ``images`` 4, each with ``context(studies) -> dict``) and one renderer
(:mod:`.render`, jinja2 templates in findings/templates/) that words them for docs/findings.md, the
README's answers table, the study pages and `groupsparse review`.

The data are read from the committed tables of the shipped studies, docs/<page>/tables/*.csv
(:mod:`.tables`), or from one results folder's tables, the claims selected by their typed columns
(analysis/statements.py), never by their text.
"""
