"""A real HTTP server on loopback that plays a model provider, for the adapters' wire tests.

Each test queues the replies it wants (:class:`Scripted`), in order; the server answers every
``POST`` with the next one and records the request (:class:`Recorded`), so a test asserts on
exactly what went over the wire. It speaks both protocols through the builders below: OpenAI
chat completions (``POST /v1/chat/completions``, JSON or SSE ending in ``data: [DONE]``) and
Anthropic messages (``POST /v1/messages``, JSON or named SSE events).

A streamed reply is sent with chunked transfer encoding, one chunk per event, so the client
sees the pieces arrive separately. A float among the events is a pause (a stalled server); a
``cut`` reply drops the connection before the stream ends; a ``reset`` reply resets the
connection (TCP RST) right after reading the request, before any answer.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tidings.models import ModelRequest, PromptMessage, ToolSpec

JSON = dict[str, Any]


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: JSON


@dataclass(frozen=True)
class Scripted:
    """One reply: a JSON ``body``, or SSE ``events`` (bytes to send, or seconds to pause)."""

    status: int = 200
    body: JSON | None = None
    events: tuple[bytes | float, ...] = ()
    delay_seconds: float = 0.0
    cut: bool = False
    reset: bool = False


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 and an ephemeral port; use it as a context manager."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="loopback"
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def push(self, *replies: Scripted) -> None:
        """Queue replies, answered in order."""
        with self._lock:
            self._replies.extend(replies)

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()  # wakes handlers that are pausing
        self._httpd.shutdown()
        self._thread.join()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # unblocks handlers waiting on idle keep-alive reads
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()  # joins the handler threads

    # -- used by the handler ---------------------------------------------------------------

    def _record(self, request: Recorded) -> Scripted:
        with self._lock:
            self.requests.append(request)
            if self._replies:
                return self._replies.popleft()
        return Scripted(status=500, body={"error": {"message": "no scripted reply left"}})

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; False when the server is stopping."""
        return not self._stopping.wait(seconds)

    def _track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)


class _Server(ThreadingHTTPServer):
    def __init__(
        self, address: tuple[str, int], handler: type[_Handler], owner: LoopbackServer
    ) -> None:
        super().__init__(address, handler)
        self.owner = owner

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout test) leaves a closed socket behind: not a failure.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, open_=True)

    def finish(self) -> None:
        self.server.owner._track(self.connection, open_=False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length) if length else b""
        owner = self.server.owner
        reply = owner._record(
            Recorded(
                method="POST",
                path=self.path,
                headers={key.lower(): value for key, value in self.headers.items()},
                body=json.loads(raw) if raw else {},
            )
        )
        if reply.delay_seconds and not owner._pause(reply.delay_seconds):
            self.close_connection = True
            return
        if reply.reset:
            self._reset()
            return
        if reply.events:
            self._stream(reply)
        else:
            self._json(reply.status, reply.body or {})

    def _reset(self) -> None:
        # A zero linger makes close() send RST instead of FIN; the socket really closes only
        # once the reader made from it is closed too (the writer holds no reference).
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()

    def _json(self, status: int, body: JSON) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, reply: Scripted) -> None:
        owner = self.server.owner
        self.send_response(reply.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for event in reply.events:
            if isinstance(event, float):
                if not owner._pause(event):
                    self.close_connection = True
                    return
                continue
            self.wfile.write(f"{len(event):X}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        if reply.cut:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port that listens but never accepts, its queue already full: a connect there
    is neither refused nor answered, it times out."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        fillers = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(3)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            yield port
        finally:
            for filler in fillers:
                filler.close()


def _sse_data(payload: JSON | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


def _sse_event(name: str, payload: JSON) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()


# -- OpenAI chat completions -------------------------------------------------------------------


def openai_tool_call(call_id: str, name: str, arguments: str) -> JSON:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def openai_completion(
    *,
    text: str | None = None,
    tool_calls: Sequence[JSON] = (),
    finish_reason: str = "stop",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    cached_tokens: int | None = None,
    model: str = "served-model",
) -> Scripted:
    message: JSON = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    return Scripted(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": _openai_usage(prompt_tokens, completion_tokens, cached_tokens),
        }
    )


def _openai_usage(prompt: int, completion: int, cached: int | None) -> JSON:
    """A ``usage`` object; ``cached`` is reported in ``prompt_tokens_details``, a part of
    ``prompt_tokens``, as the API does."""
    usage: JSON = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    return usage


def openai_chunk(
    *,
    content: str | None = None,
    tool_calls: Sequence[JSON] = (),
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = None,
    cached_tokens: int | None = None,
    role: bool = False,
) -> JSON:
    """One ``chat.completion.chunk``; ``usage`` alone makes the final, choiceless chunk
    (``cached_tokens`` its part of the prompt read from the cache)."""
    chunk: JSON = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "served-model",
    }
    if usage is not None:
        chunk["choices"] = []
        chunk["usage"] = _openai_usage(usage[0], usage[1], cached_tokens)
        return chunk
    delta: JSON = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    if tool_calls:
        delta["tool_calls"] = list(tool_calls)
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    return chunk


def openai_tool_fragment(
    index: int, *, call_id: str | None = None, name: str | None = None, arguments: str = ""
) -> JSON:
    fragment: JSON = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    if name is not None:
        fragment["function"]["name"] = name
    return fragment


def openai_stream(
    chunks: Sequence[JSON | float], *, done: bool = True, cut: bool = False
) -> Scripted:
    events: list[bytes | float] = [
        chunk if isinstance(chunk, float) else _sse_data(chunk) for chunk in chunks
    ]
    if done:
        events.append(_sse_data("[DONE]"))
    return Scripted(events=tuple(events), cut=cut)


def openai_error(status: int, message: str, *, code: str | None = None) -> Scripted:
    return Scripted(
        status=status,
        body={"error": {"message": message, "type": "invalid_request_error", "code": code}},
    )


# -- Anthropic messages ------------------------------------------------------------------------


def anthropic_message(
    content: Sequence[JSON],
    *,
    stop_reason: str = "end_turn",
    input_tokens: int = 11,
    output_tokens: int = 7,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
) -> Scripted:
    usage: JSON = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read_input_tokens is not None:
        usage["cache_read_input_tokens"] = cache_read_input_tokens
    if cache_creation_input_tokens is not None:
        usage["cache_creation_input_tokens"] = cache_creation_input_tokens
    return Scripted(
        body={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "served-model",
            "content": list(content),
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
    )


def anthropic_text(text: str) -> JSON:
    return {"type": "text", "text": text}


def anthropic_tool_use(call_id: str, name: str, arguments: JSON) -> JSON:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def anthropic_event(name: str, **payload: Any) -> bytes:
    return _sse_event(name, {"type": name, **payload})


def anthropic_start(
    *,
    input_tokens: int = 11,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
) -> bytes:
    usage: JSON = {"input_tokens": input_tokens, "output_tokens": 1}
    if cache_read_input_tokens is not None:
        usage["cache_read_input_tokens"] = cache_read_input_tokens
    if cache_creation_input_tokens is not None:
        usage["cache_creation_input_tokens"] = cache_creation_input_tokens
    message: JSON = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "served-model",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return anthropic_event("message_start", message=message)


def anthropic_text_block(index: int, pieces: Sequence[str]) -> Iterator[bytes]:
    yield anthropic_event(
        "content_block_start", index=index, content_block={"type": "text", "text": ""}
    )
    for piece in pieces:
        yield anthropic_event(
            "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
        )
    yield anthropic_event("content_block_stop", index=index)


def anthropic_tool_block(
    index: int, call_id: str, name: str, json_pieces: Sequence[str]
) -> Iterator[bytes]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    yield anthropic_event("content_block_start", index=index, content_block=block)
    for piece in json_pieces:
        delta = {"type": "input_json_delta", "partial_json": piece}
        yield anthropic_event("content_block_delta", index=index, delta=delta)
    yield anthropic_event("content_block_stop", index=index)


def anthropic_end(
    stop_reason: str = "end_turn", *, output_tokens: int = 7, **usage: int | None
) -> list[bytes]:
    """``message_delta`` and ``message_stop``; ``usage`` adds counts to the delta's (the API
    may repeat there the cumulative ``input_tokens`` and cache counts, or send them null)."""
    return [
        anthropic_event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens, **usage},
        ),
        anthropic_event("message_stop"),
    ]


def anthropic_stream(events: Sequence[bytes | float], *, cut: bool = False) -> Scripted:
    return Scripted(events=tuple(events), cut=cut)


def anthropic_error(status: int, error_type: str, message: str) -> Scripted:
    return Scripted(
        status=status,
        body={"type": "error", "error": {"type": error_type, "message": message}},
    )


SHELL = ToolSpec(
    name="shell",
    description="Run a command.",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
)
"""The tool the adapters' wire tests offer the model."""


def request(
    *messages: PromptMessage,
    system: str = "You are careful.",
    suffix: tuple[str, ...] = (),
    tools: tuple[ToolSpec, ...] = (SHELL,),
) -> ModelRequest:
    """A request to ``served-model``: a system prompt, the messages (a person's "hello" when
    none), a suffix, the tools."""
    return ModelRequest(
        model="served-model",
        system=system,
        tools=tools,
        messages=messages or (PromptMessage(role="user", content="hello"),),
        suffix=suffix,
        max_output_tokens=512,
    )
