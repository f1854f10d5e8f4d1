"""The token estimate of images and PDFs in tool results (pipeline.text.media)."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

from pipeline.text.media import IMAGE_MAX_TOKENS, PDF_PAGE_TOKENS, image_size, media_tokens


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png(width: int, height: int) -> bytes:
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sIIBBBBB", 13, b"IHDR", width, height, 8, 6, 0, 0, 0)
            + b"\0" * 4 + b"pixels" * 100)


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\1\1\0\0\1\0\1\0\0"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\1\x11\0"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xda" + b"scan" * 50


def image_block(data: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": _b64(data)}}


def test_an_image_costs_its_pixels_over_750_after_the_scaling_anthropic_applies():
    assert media_tokens([image_block(png(1280, 800))]) == 1365          # 1,024,000 px / 750
    assert media_tokens([image_block(png(100, 100))]) == 13
    assert media_tokens([image_block(png(3000, 2000))]) == IMAGE_MAX_TOKENS   # scaled, capped
    assert media_tokens([image_block(jpeg(640, 480), "image/jpeg")]) == 410


def test_image_sizes_are_read_from_png_jpeg_gif_and_webp_headers():
    assert image_size(png(1280, 800)) == (1280, 800)
    assert image_size(jpeg(640, 480)) == (640, 480)
    assert image_size(b"GIF89a" + struct.pack("<HH", 320, 200) + b"\0" * 10) == (320, 200)
    vp8x = b"RIFF\0\0\0\0WEBPVP8X" + b"\0" * 8 + (799).to_bytes(3, "little") + (599).to_bytes(3, "little")
    assert image_size(vp8x) == (800, 600)
    assert image_size(b"not an image at all") is None


def test_an_image_whose_size_cannot_be_read_counts_as_a_full_size_image():
    assert media_tokens([image_block(b"BM unknown bitmap" * 10, "image/bmp")]) == IMAGE_MAX_TOKENS
    assert media_tokens([{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]) \
        == IMAGE_MAX_TOKENS
    cut = {"type": "image", "source": {"type": "base64", "data": _b64(png(1280, 800))[:10]}}
    assert media_tokens([cut]) == IMAGE_MAX_TOKENS


def test_data_urls_of_openai_and_codex_image_parts_are_read_and_several_images_add_up():
    url = "data:image/png;base64," + _b64(png(750, 100))
    assert media_tokens([{"type": "image_url", "image_url": {"url": url}}]) == 100
    assert media_tokens({"content": [{"type": "input_image", "image_url": url},
                                     {"type": "input_text", "text": "and"},
                                     {"type": "input_image", "image_url": url}]}) == 200


def test_a_pdf_document_costs_a_fixed_estimate_per_page():
    pdf = (b"%PDF-1.7\n1 0 obj <</Type /Pages /Count 3>> endobj\n"
           + b"".join(b"%d 0 obj <</Type /Page /Parent 1 0 R>> endobj\n" % n for n in (2, 3, 4))
           + b"%%EOF")
    block = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": _b64(pdf)}}
    assert media_tokens([block]) == 3 * PDF_PAGE_TOKENS


def test_content_without_media_has_no_media_tokens():
    assert media_tokens([{"type": "text", "text": "plain"}]) is None
    assert media_tokens("a string result") is None
    assert media_tokens({"content": "text"}) is None


def test_gemini_media_parts_count_and_a_tool_result_image_is_measured_pruned_and_restored(tmp_path):
    # gemini-cli returns a tool's binary output as an inlineData part beside the
    # functionResponse: it was "[inlineData]", 22 bytes, 6 tokens, never pruned
    import json

    from pipeline.core.lake import Lake
    from pipeline.stages.nightly import run_nightly
    from pipeline.stages.restore import restore
    from tests.helpers.lake import REAL, rows

    image = png(600, 300) + b"\0" * 150_000
    assert media_tokens([{"inlineData": {"mimeType": "image/png", "data": _b64(image)}},
                         {"fileData": {"mimeType": "image/jpeg", "fileUri": "gs://b/x.jpg"}}]) == \
        600 * 300 // 750 + IMAGE_MAX_TOKENS
    doc = json.loads((REAL / "gemini" / "gemini_session.json").read_text(encoding="utf-8"))
    call = next(c for m in doc["messages"] for c in m.get("toolCalls") or [])
    call["result"].append({"inlineData": {"mimeType": "image/png", "data": _b64(image)}})
    path = tmp_path / "archive" / "gemini" / "session.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    lake = Lake(tmp_path / "lake")
    summary = run_nightly([tmp_path / "archive"], lake=lake, tz="UTC", workers=1,
                          policies=("payload_prune(max_bytes=10000)",))
    assert summary.exit_code == 0
    (shape, size, media), = rows(lake, "SELECT r.payload_shape, r.payload_bytes, m.media_tokens "
                                       "FROM tool_results r JOIN messages m USING (source_id, seq) "
                                       "WHERE r.call_id = ?", [call["id"]])
    assert (shape, media) == ("blocks", 600 * 300 // 750)
    assert size == len(json.dumps(call["result"], separators=(",", ":")))
    (applied,) = summary.applied.values()
    assert applied.evictions_applied >= 1 and applied.problems == []
    pruned = Path(applied.out) / "gemini" / "session.json"
    assert pruned.stat().st_size < path.stat().st_size - 150_000
    assert restore(pruned, store=lake.store_dir).data == path.read_bytes()
