"""Page tokens for List RPCs: the token is the last name of the previous page, base64-encoded."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from gateway.errors import InvalidArgument

DEFAULT_PAGE = 100
MAX_PAGE = 1000


def page(names: Sequence[str], page_size: int, page_token: str) -> tuple[list[str], str]:
    """One page of sorted names, and the token of the next page ('' when this is the last)."""
    if page_size < 0:
        raise InvalidArgument(f"page_size must not be negative, got {page_size}.")
    size = min(page_size or DEFAULT_PAGE, MAX_PAGE)
    after = ""
    if page_token:
        try:
            after = base64.b64decode(page_token.encode(), altchars=b"-_", validate=True).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise InvalidArgument(f"Invalid page_token: {page_token!r}.") from None
        if not after:
            raise InvalidArgument(f"Invalid page_token: {page_token!r}.")
    rest = [n for n in names if n > after]
    chunk = rest[:size]
    token = base64.urlsafe_b64encode(chunk[-1].encode()).decode() if len(rest) > size else ""
    return chunk, token
