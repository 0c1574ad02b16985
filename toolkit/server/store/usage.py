"""Chat-completion usage per user, team/project (the ``OpenAI-Project`` header) and model.

Counters only, in the ``chat_usage`` table (migration 3).
"""

from __future__ import annotations

from dataclasses import dataclass

from .db import Database
from .users import User

DEFAULT_PROJECT = "inference"


@dataclass(frozen=True)
class UsageRow:
    project: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatUsage:
    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def project_of(user: User, header: str | None) -> str:
        """``team/project`` from the header; without it the user's default project ``inference``."""
        return header.strip() if header and header.strip() else f"{user.name}/{DEFAULT_PROJECT}"

    def record(self, user: User, project: str, model: str, prompt: int, completion: int, cached: int) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO chat_usage VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT (user_id, project, model)"
                " DO UPDATE SET requests = requests + 1,"
                " prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = completion_tokens + excluded.completion_tokens,"
                " cached_tokens = cached_tokens + excluded.cached_tokens",
                (user.id, project, model, prompt, completion, cached),
            )

    def rows(self, user: User, project: str | None = None) -> list[UsageRow]:
        sql = "SELECT * FROM chat_usage WHERE user_id = ?"
        args = [user.id]
        if project is not None:
            sql += " AND project = ?"
            args.append(project)
        return [
            UsageRow(
                r["project"],
                r["model"],
                r["requests"],
                r["prompt_tokens"],
                r["completion_tokens"],
                r["cached_tokens"],
            )
            for r in self.db.conn.execute(sql + " ORDER BY project, model", args)
        ]
