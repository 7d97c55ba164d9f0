"""A tab closed while a message was on its way leaves no traceback in the server's log (issue 49): exactly
that record of Streamlit's sender is dropped, every other still logged."""

import inspect
import logging

import pytest
from streamlit.web.server.starlette import starlette_server, starlette_websocket
from uvicorn.protocols.websockets import websockets_sansio_impl

from sharding_lab.app.runtime import closed_tabs

# uvicorn's words when a message is sent after its close frame (websockets_sansio_impl.WebSocketsSansIOProtocol.send)
UVICORN_CLOSED = "Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def streamlit_sender_log():
    logger = logging.getLogger(closed_tabs.LOGGER)
    kept = Kept()
    logger.addHandler(kept)
    closed_tabs.install()
    closed_tabs.install()  # a rerun of app.py installs nothing twice
    yield logger, kept.records
    logger.removeHandler(kept)


def log_error(logger, message, error):
    try:
        raise error
    except Exception:
        logger.exception(message)


def test_the_closed_tab_record_is_dropped_and_others_kept(streamlit_sender_log):
    logger, records = streamlit_sender_log
    assert sum(isinstance(f, closed_tabs.ClosedTabFilter) for f in logger.filters) == 1
    log_error(logger, closed_tabs.SENDING, RuntimeError(UVICORN_CLOSED))
    assert records == []
    log_error(logger, closed_tabs.SENDING, RuntimeError("something else"))
    log_error(logger, closed_tabs.SENDING, ValueError(UVICORN_CLOSED))
    log_error(logger, "Error deserializing back message", RuntimeError(UVICORN_CLOSED))
    assert [(r.getMessage(), type(r.exc_info[1]).__name__) for r in records] == [
        (closed_tabs.SENDING, "RuntimeError"),
        (closed_tabs.SENDING, "ValueError"),
        ("Error deserializing back message", "RuntimeError"),
    ]


def test_the_filter_matches_the_installed_streamlit_and_uvicorn():
    """The words the filter looks for are those the installed packages write: the logger's name, the sender's
    message, and uvicorn's error (an upgrade that changes one fails here, not silently in a class)."""
    assert starlette_websocket._LOGGER.name == closed_tabs.LOGGER
    assert f'_LOGGER.exception("{closed_tabs.SENDING}")' in inspect.getsource(
        starlette_websocket.StarletteSessionClient._sender
    )
    assert starlette_server._get_websocket_protocol() == "websockets-sansio"
    source = inspect.getsource(websockets_sansio_impl.WebSocketsSansIOProtocol.send)
    assert "Unexpected ASGI message '{message['type']}', " + closed_tabs.CLOSED in source
    assert UVICORN_CLOSED.endswith(closed_tabs.CLOSED + ".")
