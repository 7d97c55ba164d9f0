"""A tab that closes while the server is sending it a message: not an error worth a traceback in the log.

Streamlit 1.67 sends each session's messages from a task of its own (``StarletteSessionClient._sender``) and
logs anything but Starlette's ``WebSocketDisconnect`` there with its traceback. When a browser closes its
tab, uvicorn's websocket protocol (``websockets-sansio``, the one Streamlit picks) answers the close frame
and marks it sent; until the connection is gone a moment later, a message still on its way to that tab is
refused with ``RuntimeError: Unexpected ASGI message 'websocket.send', after sending 'websocket.close'``
rather than the ``ClientDisconnected`` that Starlette turns into ``WebSocketDisconnect``. The tab is gone
either way: its session is disconnected by the receiving side as for any closed tab. :func:`install` drops
exactly that record — that logger, that message, that error — and lets every other through.
"""

from __future__ import annotations

import logging

LOGGER = "streamlit.web.server.starlette.starlette_websocket"
SENDING = "Error sending websocket payload"
CLOSED = "after sending 'websocket.close'"


class ClosedTabFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        closed = isinstance(error, RuntimeError) and CLOSED in str(error)
        return not (closed and record.getMessage() == SENDING)


def install() -> None:
    """Once per process (a rerun finds it installed)."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(f, ClosedTabFilter) for f in logger.filters):
        logger.addFilter(ClosedTabFilter())
