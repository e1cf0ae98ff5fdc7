"""A message's `content` as readable text: the rules of `berth_core::content::content_text`
(crates/berth-core/src/content.rs), which every reader of berth follows — the inspector,
`berth sessions cat --transcript`, listing previews — in Python, for the presenters.

A string is itself; typed parts give their text (`text`, `input_text`, `output_text`,
Gemini's `{text}`), refusals `[refusal] …`, images, files and audio a labelled
placeholder; parts are separated by a newline. Nothing is dropped silently: a part of an
unknown type shows its text, its nested content, or its type as a placeholder. What was
shown as a placeholder is reported too (`Text.unmapped`), so a presenter can say what it
did not carry over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: Nesting of parts followed; anything deeper is shown as `[…]` (as the core's reader).
CONTENT_DEPTH_MAX = 16
#: Characters of a name shown in a placeholder (`[file: …]`).
LABEL_CHARS_MAX = 64


@dataclass
class Text:
    """The text of one content value, and the kinds of parts shown only as placeholders
    (`"image"`, `"file"`, `"audio"`, `"refusal"`, or an unknown part's type)."""

    text: str = ""
    unmapped: list[str] = field(default_factory=list)


def content_text(content: Any) -> Text:
    """The readable text of `content`: a string, a list of typed parts, one part, or any
    other JSON value (see the module's rules)."""
    writer = _Writer()
    writer.value(content, 0)
    return Text("\n".join(writer.lines), writer.unmapped)


def _one_line(text: str, chars_max: int = LABEL_CHARS_MAX) -> str:
    line = " ".join(text.split())
    line = "".join(character for character in line if character.isprintable())
    return line if len(line) <= chars_max else line[:chars_max] + "…"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.unmapped: list[str] = []

    def push(self, text: str) -> None:
        if text:
            self.lines.append(text)

    def placeholder(self, kind: str, name: str | None) -> None:
        self.unmapped.append(kind)
        label = _one_line(name) if isinstance(name, str) else ""
        self.push(f"[{kind}: {label}]" if label else f"[{kind}]")

    def value(self, value: Any, depth: int) -> None:
        if depth > CONTENT_DEPTH_MAX:
            self.push("[…]")
        elif value is None:
            return
        elif isinstance(value, str):
            self.push(value)
        elif isinstance(value, bool):
            self.push("true" if value else "false")
        elif isinstance(value, (int, float)):
            self.push(json.dumps(value))
        elif isinstance(value, list):
            for item in value:
                self.value(item, depth + 1)
        elif isinstance(value, dict):
            kind = value.get("type")
            if isinstance(kind, str):
                self.typed_part(kind, value, depth)
            else:
                self.untyped_part(value, depth)

    def typed_part(self, kind: str, part: dict[str, Any], depth: int) -> None:
        if kind in ("text", "input_text", "output_text"):
            text = part.get("text")
            if isinstance(text, dict) and "value" in text:  # the Assistants API's {value, annotations}
                text = text["value"]
            self.value(text, depth + 1)
        elif kind == "refusal":
            reason = part.get("refusal")
            reason = reason.strip() if isinstance(reason, str) else ""
            self.unmapped.append("refusal")
            self.push(f"[refusal] {reason}" if reason else "[refusal]")
        elif kind in ("input_image", "image_url", "image"):
            self.placeholder("image", _file_name(part))
        elif kind in ("input_file", "file", "document"):
            self.placeholder("file", _file_name(part))
        elif kind in ("input_audio", "audio"):
            self.placeholder("audio", _file_name(part))
        else:
            self.unknown_part(kind, part, depth)

    def unknown_part(self, kind: str, part: dict[str, Any], depth: int) -> None:
        if isinstance(part.get("text"), str):
            return self.value(part["text"], depth + 1)
        nested = part.get("content", part.get("parts"))
        if nested is not None:
            return self.value(nested, depth + 1)
        name = part.get("name") if isinstance(part.get("name"), str) else _file_name(part)
        self.placeholder(_one_line(kind), name)

    def untyped_part(self, part: dict[str, Any], depth: int) -> None:
        def field_of(snake: str, camel: str) -> Any:
            return part.get(snake, part.get(camel))

        if "text" in part:
            return self.value(part["text"], depth + 1)
        data = field_of("inline_data", "inlineData") or field_of("file_data", "fileData")
        if isinstance(data, dict):
            mime = data.get("mime_type", data.get("mimeType"))
            mime = mime if isinstance(mime, str) else ""
            name = _file_name(data) or _uri_name(data)
            kind = mime.split("/")[0]
            if kind in ("image", "audio", "video"):
                return self.placeholder(kind, name)
            return self.placeholder("file", name or mime)
        call = field_of("function_call", "functionCall")
        if call is not None:
            return self.placeholder("function call", call.get("name") if isinstance(call, dict) else None)
        response = field_of("function_response", "functionResponse")
        if response is not None:
            return self.placeholder("function response", response.get("name") if isinstance(response, dict) else None)
        nested = part.get("parts", part.get("content"))
        if nested is not None:
            return self.value(nested, depth + 1)
        if part:
            self.push(json.dumps(part, ensure_ascii=False, separators=(",", ":")))


def _file_name(part: dict[str, Any]) -> str | None:
    def own_name(value: dict[str, Any]) -> str | None:
        for key in ("filename", "file_name", "display_name", "displayName", "title"):
            name = value.get(key)
            if isinstance(name, str):
                return name
        return None

    nested = part.get("file")
    return own_name(part) or (own_name(nested) if isinstance(nested, dict) else None)


def _uri_name(data: dict[str, Any]) -> str | None:
    uri = data.get("file_uri", data.get("fileUri"))
    if not isinstance(uri, str):
        return None
    return uri.rsplit("/", 1)[-1] or None
