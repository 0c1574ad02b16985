"""Users and their API keys. Keys are stored as SHA-256 hashes only, and looked up by that hash (an
equality on a digest of a 192-bit random key: no constant-time compare is needed)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from .common import new_id, now_iso
from .db import Database

KEY_PREFIX = "tk-"
LOCAL_USER = "local"  # the user of the key in ``local.key``


@dataclass(frozen=True)
class User:
    id: str
    name: str


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Users:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get_or_create(self, name: str) -> User:
        with self.db.write() as conn:
            row = conn.execute("SELECT id, name FROM users WHERE name = ?", (name,)).fetchone()
            if row:
                return User(row["id"], row["name"])
            user = User(new_id(), name)
            conn.execute("INSERT INTO users VALUES (?, ?, ?)", (user.id, user.name, now_iso()))
            return user

    def create_key(self, user: User, key: str | None = None) -> str:
        """Store a key for ``user`` (a new random one unless given) and return it in clear."""
        key = key or KEY_PREFIX + secrets.token_hex(24)
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO api_keys VALUES (?, ?, ?, ?)",
                (hash_key(key), user.id, key[:6], now_iso()),
            )
        return key

    def authenticate(self, key: str) -> User | None:
        digest = hash_key(key)
        row = self.db.conn.execute(
            "SELECT u.id, u.name FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.key_hash = ?",
            (digest,),
        ).fetchone()
        return None if row is None else User(row["id"], row["name"])
