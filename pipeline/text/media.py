"""Tokens of the media in a tool result: images and PDF documents sent as base64.

A tool result that holds an image (a Claude Code ``Read`` of a screenshot, a Codex
``input_image``) has the text ``[image]``: a text estimate gives it ~2 tokens, while the model
reads it as hundreds. These are the estimates the messages add to their text's
(``messages.media_tokens``), so that a pruned screenshot shows the tokens it frees.

- **Image**: Anthropic's rule for vision input: the image is scaled down (aspect kept) until
  its long edge is at most 1568 px and it costs at most about 1,600 tokens, then costs
  ``width * height / 750`` tokens. The size is read from the image's header (PNG, JPEG, GIF,
  WebP), decoding at most the first ``HEADER_BYTES`` of its base64; an image whose size cannot
  be read (another format, a URL, cut data) counts as ``IMAGE_MAX_TOKENS``, what a full-size
  image costs.
- **PDF document**: Anthropic gives 1,500 to 3,000 tokens a page (its text and an image of
  it): ``PDF_PAGE_TOKENS`` per page, pages counted in the decoded file (``/Type /Page``
  objects); one page when none is found.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from typing import Any

IMAGE_MAX_EDGE = 1568
IMAGE_MAX_TOKENS = 1600
IMAGE_PIXELS_PER_TOKEN = 750
PDF_PAGE_TOKENS = 2250
HEADER_BYTES = 65536
_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(;[^,]*)?;base64,", re.ASCII)


def media_tokens(content: Any) -> int | None:
    """The estimated tokens of the images and PDF documents in a tool result's content (a
    block list, Codex's ``{content: [...]}``, or Gemini's parts with ``inlineData``/
    ``fileData``; a ``fileData`` image is a reference, counted at full size), None when it
    holds none."""
    blocks = content.get("content") if isinstance(content, dict) else content
    if not isinstance(blocks, list):
        return None
    total, found = 0, False
    for block in blocks:
        if not isinstance(block, dict):
            continue
        gemini = block.get("inlineData") or block.get("fileData")
        if isinstance(gemini, dict):    # a Gemini part: {inlineData: {mimeType, data}}
            media_type = gemini.get("mimeType") if isinstance(gemini.get("mimeType"), str) else ""
            data = gemini.get("data") if isinstance(gemini.get("data"), str) else None
            if media_type.startswith("image/"):
                found = True
                total += image_tokens(data)
            elif media_type.endswith("pdf") and data is not None:
                found = True
                total += pdf_tokens(data)
            continue
        kind = block.get("type")
        if kind in ("image", "input_image", "image_url"):
            found = True
            total += image_tokens(_base64_of(block))
        elif kind in ("document", "input_file", "file"):
            data, media_type = _base64_of(block), _media_type(block)
            if data is not None and (media_type or "").endswith("pdf"):
                found = True
                total += pdf_tokens(data)
    return total if found else None


def _base64_of(block: dict) -> str | None:
    """The base64 data of an image/document block: Anthropic's ``source.data``, or a
    ``data:`` URL (OpenAI ``image_url.url``, Codex ``image_url``, ``file_data``)."""
    source = block.get("source")
    if isinstance(source, dict) and isinstance(source.get("data"), str):
        return source["data"]
    for key in ("image_url", "file_data", "url"):
        value = block.get(key)
        if isinstance(value, dict):
            value = value.get("url")
        if isinstance(value, str):
            match = _DATA_URL.match(value)
            if match:
                return value[match.end():]
    return None


def _media_type(block: dict) -> str | None:
    source = block.get("source")
    if isinstance(source, dict) and isinstance(source.get("media_type"), str):
        return source["media_type"]
    for key in ("file_data", "url"):
        value = block.get(key)
        if isinstance(value, str):
            match = _DATA_URL.match(value)
            if match and match.group(1):
                return match.group(1)
    filename = block.get("filename")
    return "application/pdf" if isinstance(filename, str) and filename.lower().endswith(".pdf") else None


def _decode(data: str, limit: int | None) -> bytes:
    """The bytes of the first ``limit`` (None: all) decoded bytes of base64 ``data``
    (whitespace and a cut tail tolerated: what cannot be decoded is left out)."""
    text = "".join(data[: None if limit is None else (limit // 3 + 2) * 4].split())
    text = text[: len(text) // 4 * 4]
    try:
        return base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError):
        return b""


def image_tokens(data: str | None) -> int:
    """Tokens of one base64 image (see the module docstring)."""
    size = image_size(_decode(data, HEADER_BYTES)) if data else None
    if size is None:
        return IMAGE_MAX_TOKENS
    width, height = size
    scale = min(1.0, IMAGE_MAX_EDGE / max(width, height))
    tokens = (width * scale) * (height * scale) / IMAGE_PIXELS_PER_TOKEN
    return max(1, min(IMAGE_MAX_TOKENS, int(round(tokens))))


def image_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a PNG, GIF, WebP or JPEG file, else None."""
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24 and head[12:16] == b"IHDR":
        width, height = struct.unpack(">II", head[16:24])
    elif head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        chunk = head[12:16]
        if chunk == b"VP8X":
            width = 1 + int.from_bytes(head[24:27], "little")
            height = 1 + int.from_bytes(head[27:30], "little")
        elif chunk == b"VP8L":
            bits = int.from_bytes(head[21:25], "little")
            width, height = 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
        elif chunk == b"VP8 ":
            width = int.from_bytes(head[26:28], "little") & 0x3FFF
            height = int.from_bytes(head[28:30], "little") & 0x3FFF
        else:
            return None
    elif head[:2] == b"\xff\xd8":
        size = _jpeg_size(head)
        if size is None:
            return None
        width, height = size
    else:
        return None
    return (width, height) if width > 0 and height > 0 else None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The frame size of a JPEG (its first SOF marker), walking the segments."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:          # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None


def pdf_tokens(data: str) -> int:
    """Tokens of one base64 PDF: ``PDF_PAGE_TOKENS`` a page (see the module docstring)."""
    pages = len(_PAGE.findall(_decode(data, None)))
    return PDF_PAGE_TOKENS * max(1, pages)
