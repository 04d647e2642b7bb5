"""One small blocking HTTP request, for the control calls around a measurement (readiness,
/metrics scrapes, quality evaluation). The load itself goes through probes/client.py."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


def request(
    method: str, url: str, body: dict[str, Any] | None = None, timeout_s: float = 10.0
) -> tuple[int, bytes]:
    """Send ``body`` as JSON (if any) to a full ``http://host:port/path`` URL.

    Returns:
        The status code and the raw response body.
    Raises:
        OSError / http.client.HTTPException: the server could not be reached or answered badly.
    """
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=timeout_s)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, u.path or "/", body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()
