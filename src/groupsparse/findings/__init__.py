"""The README's findings and `groupsparse review`'s summary, one module per README question.

The README's section between its findings markers is generated (`groupsparse snapshot`) from the
committed tables of the shipped studies, docs/<page>/tables/*.csv (:mod:`.tables`), and
`groupsparse review` prints the same questions' short answers from one study's results/ tables.
Each question is one module with two functions, so that its wording lives in one place:

- ``finding(studies) -> str``: the README's paragraph, every number read from a committed table
  (or the config it quotes) and each bullet naming its tables and config;
- ``summary(tables) -> list[str]``: its lines of the review, from any one study's tables (none
  when the study has no table for it).
"""

from __future__ import annotations

from . import images, theorem, training, transfer

# The README's questions, in its order.
QUESTIONS = (theorem, training, transfer, images)
