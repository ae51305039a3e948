"""The reverse-proxy parts the admission gateway and the operator's activator share.

- :func:`send_upstream` forwards one request (method, path and query, body, end-to-end
  headers) to an upstream base URL.
- :func:`respond` passes the upstream's answer back byte for byte: a body of known, small
  length in one write, anything else (server-sent events, chunked) chunk by chunk as it
  arrives; a client that goes away closes the upstream connection, so the engine aborts
  the sequence instead of generating into the void.
- :func:`start_site` serves an application with ``handler_cancellation``, which is how a
  departed client's handler (and with it its upstream request) gets cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE",
    "Trailer", "Trailers", "Transfer-Encoding", "Upgrade", "Host", "Content-Length"))
# Largest request body a proxy reads (the OpenAI API's prompts are JSON documents).
DEFAULT_MAX_BODY_BYTES = 4 * 2**20
# Bodies above this size, or of unknown length, are relayed chunk by chunk.
WHOLE_BODY_BYTES = 2**20
# What a handler sees when its client went away: aiohttp cancels the handler
# (handler_cancellation), or a write to the closed connection fails.
CLIENT_GONE: tuple[type[BaseException], ...] = (
    asyncio.CancelledError, ConnectionError, aiohttp.ClientConnectionResetError)
# What ends a relay half way: the client went away, or the upstream broke off its body.
_BROKEN: tuple[type[BaseException], ...] = (*CLIENT_GONE, aiohttp.ClientPayloadError)
# What an upstream that cannot be reached raises from :func:`send_upstream`.
UPSTREAM_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError)


def error_response(status: int, message: str, typ: str) -> web.Response:
    """A JSON error in the OpenAI API's shape."""
    return web.json_response({"error": {"message": message, "type": typ, "param": None,
                                        "code": status}}, status=status)


def new_session() -> aiohttp.ClientSession:
    """A client session for proxying: no pool limit (the caller bounds concurrency), bodies
    left compressed as the upstream sent them, no total timeout (streams run long)."""
    conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=conn, auto_decompress=False,
                                 timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))


async def send_upstream(session: aiohttp.ClientSession, request: web.Request, base: str,
                        body: bytes, path_qs: str | None = None) -> aiohttp.ClientResponse:
    """Send ``request`` (with its already read ``body``) to ``base`` (scheme://host:port);
    the reply's headers are in, its body not yet read. Raises one of
    :data:`UPSTREAM_ERRORS` when the upstream cannot be reached."""
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    url = base + (path_qs if path_qs is not None else request.rel_url.raw_path_qs)
    return await session.request(request.method, url, data=body or None, headers=headers,
                                 allow_redirects=False)


async def respond(request: web.Request, up: aiohttp.ClientResponse, *, stream: bool = False,
                  on_first_chunk: Callable[[], None] | None = None) -> web.StreamResponse:
    """Pass ``up``'s answer to ``request``'s client and release the upstream connection.

    ``stream`` relays chunk by chunk even when the length is known; ``on_first_chunk`` is
    called as the first body chunk is relayed. When the client goes away (one of
    :data:`CLIENT_GONE`) the upstream connection is closed and the error raised again."""
    headers_out = [(k, v) for k, v in up.headers.items() if k.lower() not in HOP_BY_HOP]
    try:
        if stream or up.content_length is None or up.content_length > WHOLE_BODY_BYTES:
            resp = await _relay(request, up, headers_out, on_first_chunk)
        else:
            # A whole body of known length: one write instead of headers and body apart.
            body_out = await up.read()
            resp = web.Response(body=body_out, status=up.status, reason=up.reason,
                                headers=CIMultiDict(headers_out))
    except _BROKEN:
        up.close()
        raise
    up.release()
    return resp


async def _relay(request: web.Request, up: aiohttp.ClientResponse,
                 headers_out: list[tuple[str, str]],
                 on_first_chunk: Callable[[], None] | None) -> web.StreamResponse:
    """Copy the body chunk by chunk as it arrives (server-sent events, chunked)."""
    resp = web.StreamResponse(status=up.status, reason=up.reason,
                              headers=CIMultiDict(headers_out))
    if up.content_length is not None:
        resp.content_length = up.content_length
    await resp.prepare(request)
    first = True
    async for chunk in up.content.iter_any():
        if first and on_first_chunk is not None:
            on_first_chunk()
        first = False
        await resp.write(chunk)
    await resp.write_eof()
    return resp


async def start_site(app: web.Application, host: str, port: int, *,
                     shutdown_timeout: float = 60.0) -> tuple[web.AppRunner, int]:
    """Start ``app`` on host:port (0 = any free port); returns the runner and the port.

    ``handler_cancellation`` makes aiohttp cancel a handler whose client disconnected,
    which is how a departed client's request gets cancelled upstream.
    ``shutdown_timeout``: how long the runner's cleanup lets requests in flight finish
    before it closes their connections (aiohttp's default, 60 s).
    """
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    return runner, sock.getsockname()[1]
