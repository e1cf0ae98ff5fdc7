"""An incremental decoder of Server-Sent Events (the live tail's framing).

Fed raw chunks as they arrive (split anywhere, even inside a UTF-8 sequence or a
`\\r\\n`), it yields complete messages. Comments (`: heartbeat`) are dropped; a message
with no `data` is dropped, as the SSE specification says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class SseMessage:
    event: str
    data: str
    id: str | None


class SseDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes) -> Iterator[SseMessage]:
        self._buffer += chunk
        while True:
            cut = self._line_end()
            if cut is None:
                return
            end, width = cut
            line = self._buffer[:end].decode("utf-8", "replace")
            self._buffer = self._buffer[end + width :]
            message = self._line(line)
            if message is not None:
                yield message

    def _line_end(self) -> tuple[int, int] | None:
        newline = self._buffer.find(b"\n")
        carriage = self._buffer.find(b"\r", 0, None if newline < 0 else newline)
        if carriage < 0:
            return None if newline < 0 else (newline, 1)
        if carriage + 1 == len(self._buffer):
            return None  # a "\r" that may start a "\r\n": wait for more
        return carriage, 2 if self._buffer[carriage + 1] == 0x0A else 1

    def _line(self, line: str) -> SseMessage | None:
        if line == "":
            if not self._data:
                self._event = ""
                return None
            message = SseMessage(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data = "", []
            return message
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None
