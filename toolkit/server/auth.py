"""Authentication: ``Authorization: Bearer <key>`` everywhere, Basic ``api:<key>`` too (Weave's form)."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import Depends, Request

from .errors import Unauthorized
from .store.users import User, Users


def key_from_header(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return value.strip() or None
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, _, key = decoded.partition(":")
        return key or None
    return None


async def current_user(request: Request) -> User:
    """The user of the request's key (a FastAPI dependency); 401 without a valid one. An indexed
    read of one row, done on the event loop: a thread hop would cost more than the read."""
    users: Users = request.app.state.users
    key = key_from_header(request.headers.get("authorization")) or request.headers.get("wandb-api-key")
    if key is None:
        raise Unauthorized("Not authenticated")
    user = users.authenticate(key)
    if user is None:
        raise Unauthorized("Invalid API key")
    return user


CurrentUser = Annotated[User, Depends(current_user)]
