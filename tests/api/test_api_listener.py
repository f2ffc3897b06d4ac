"""The listeners of `coordinator serve` and of the sandbox answer kept-alive connections without
Nagle's delay: asyncio turns TCP_NODELAY on for an accepted socket only when its protocol says
TCP, so the listening socket must be made with IPPROTO_TCP (with 0, every answer on a reused
connection waited ~40 ms for the client's delayed ACK)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from coordinator_api.serve import _bind as serve_bind
from coordinator_api.serve import run_loop
from coordinator_sandbox.server import _bind as sandbox_bind


async def _accepted_nodelay(listener: socket.socket) -> int:
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accept, sock=listener)
    host, port = listener.getsockname()[:2]
    _reader, writer = await asyncio.open_connection(host, port)
    try:
        return await asyncio.wait_for(seen, timeout=5)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("bind", [serve_bind, sandbox_bind], ids=["serve", "sandbox"])
@pytest.mark.parametrize("run", [asyncio.run, run_loop], ids=["asyncio", "service-loop"])
def test_an_accepted_connection_has_nagle_turned_off(
    bind: Callable[[str, int], socket.socket], run: Callable[[Any], int]
) -> None:
    """On asyncio's own loop (the sandbox) and on the loop `coordinator serve` runs (uvloop
    where it is installed)."""
    listener = bind("127.0.0.1", 0)
    try:
        assert listener.proto == socket.IPPROTO_TCP
        listener.listen(8)
        assert run(_accepted_nodelay(listener)) != 0
    finally:
        listener.close()
