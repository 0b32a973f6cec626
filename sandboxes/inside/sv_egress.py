"""The egress forwarder inside a sandbox: ``127.0.0.1:3128`` (Chromium's proxy, the
shell's ``http_proxy``) forwarded connection by connection to the host's filtering
proxy on the unix socket the host bound in (``sandboxes.egress``, docs/egress.md)."""

import asyncio

# The host binds its proxy's socket for this sandbox in beside the control socket.
EGRESS_SOCKET = "/run/arena/egress.sock"
PROXY_PORT = 3128


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def egress_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Forwards one TCP connection from inside to the host's filtering proxy."""
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(EGRESS_SOCKET)
    except OSError:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        writer.close()
        return
    await asyncio.gather(forward(reader, up_writer), forward(up_reader, writer))
