"""Uploaded SFT training data, versioned by (entity, project, name) and addressed by URL."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

from ...types.training import Artifact
from ..errors import NotFound, Unprocessable
from .common import new_id, now_iso
from .db import Database
from .users import User

URL_RE = re.compile(
    r"^wandb-artifact:///(?P<entity>[^/]+)/(?P<project>[^/]+)/(?P<name>[^/:]+)(?::(?P<version>v\d+|latest))?$"
)


def _artifact(row: sqlite3.Row) -> Artifact:
    return Artifact(
        id=row["id"],
        url=f"wandb-artifact:///{row['entity']}/{row['project']}/{row['name']}:v{row['version']}",
        entity=row["entity"],
        project=row["project"],
        name=row["name"],
        version=row["version"],
        files=json.loads(row["files"]),
        num_records=row["num_records"],
        created_at=row["created_at"],
    )


class Artifacts:
    def __init__(self, db: Database, root: Path) -> None:
        self.db = db
        self.root = root

    def create(
        self,
        user: User,
        *,
        entity: str,
        project: str,
        name: str,
        files: dict[str, bytes],
        num_records: int,
        model_id: str | None,
    ) -> Artifact:
        """Write the files to a fresh folder, then record the artifact (the next version of its name)."""
        artifact_id = new_id()
        folder = self.root / user.id / artifact_id
        tmp = folder.with_name(folder.name + ".tmp")
        tmp.mkdir(parents=True)
        for filename, data in files.items():
            (tmp / filename).write_bytes(data)
        tmp.rename(folder)
        try:
            with self.db.write() as conn:
                version = conn.execute(
                    "SELECT COALESCE(MAX(version) + 1, 0) FROM artifacts"
                    " WHERE user_id=? AND entity=? AND project=? AND name=?",
                    (user.id, entity, project, name),
                ).fetchone()[0]
                conn.execute(
                    "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        artifact_id,
                        user.id,
                        entity,
                        project,
                        name,
                        version,
                        json.dumps(sorted(files)),
                        num_records,
                        str(folder),
                        model_id,
                        now_iso(),
                    ),
                )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return self.get(user, artifact_id)

    def get(self, user: User, artifact_id: str) -> Artifact:
        row = self.db.conn.execute(
            "SELECT * FROM artifacts WHERE id = ? AND user_id = ?", (artifact_id, user.id)
        ).fetchone()
        if row is None:
            raise NotFound(f"Artifact {artifact_id} not found")
        return _artifact(row)

    def all(self, user: User) -> list[Artifact]:
        rows = self.db.conn.execute(
            "SELECT * FROM artifacts WHERE user_id = ? ORDER BY created_at", (user.id,)
        ).fetchall()
        return [_artifact(r) for r in rows]

    def resolve(
        self, user: User, url: str, loc: tuple[str, ...] = ("body", "training_data_url")
    ) -> tuple[Artifact, Path]:
        """The artifact a ``wandb-artifact:///entity/project/name[:vN|:latest]`` URL names, and its folder."""
        match = URL_RE.match(url)
        if match is None:
            raise Unprocessable(loc, "expected wandb-artifact:///<entity>/<project>/<name>[:v<N>|:latest]")
        version = match["version"]
        sql = "SELECT * FROM artifacts WHERE user_id=? AND entity=? AND project=? AND name=?"
        args: list[object] = [user.id, match["entity"], match["project"], match["name"]]
        if version and version != "latest":
            sql += " AND version = ?"
            args.append(int(version[1:]))
        row = self.db.conn.execute(sql + " ORDER BY version DESC LIMIT 1", args).fetchone()
        if row is None:
            raise Unprocessable(loc, f"no uploaded training data at {url}")
        return _artifact(row), Path(row["path"])
