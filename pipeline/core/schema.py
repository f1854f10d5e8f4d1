"""Column contracts of the lake's stored tables.

Readers emit rows with the *staged* columns below (plain Python values); the ingest engine
turns a batch into Arrow with these exact types and writes Parquet through DuckDB, which adds
the derived columns in SQL (``sql/select_*_part.sql``: parsed timestamps, lengths, CJK counts,
``est_tokens``, hashes). Table and column names are a public contract: users query them.

Provenance on every row: ``source_id`` (the file), ``generation`` (bumped when a file is
re-ingested from scratch; views keep only the current one), ``line_no`` (1-based line, or 1
for a whole-JSON document), ``byte_offset``/``byte_len`` of that line, and ``json_path``
(JSON pointer of the object inside a whole-JSON document).
"""

from __future__ import annotations

import pyarrow as pa

PROVENANCE = {
    "source_id": pa.string(),
    "generation": pa.int32(),
    "line_no": pa.int64(),
    "byte_offset": pa.int64(),
    "byte_len": pa.int64(),
    "json_path": pa.string(),
}

STAGED: dict[str, dict[str, pa.DataType]] = {
    "records": {
        **PROVENANCE,
        "record_type": pa.string(),
        "session_id": pa.string(),
        "raw": pa.string(),
    },
    "messages": {
        **PROVENANCE,
        "block_no": pa.int32(),
        "seq": pa.int64(),
        "session_id": pa.string(),
        "uuid": pa.string(),
        "parent_uuid": pa.string(),
        "role": pa.string(),          # system | user | assistant | tool
        "kind": pa.string(),          # text | thinking | tool_use | tool_result | summary | meta | boundary | other
        "subtype": pa.string(),       # format-specific detail (system subtype, event type, ...)
        "timestamp_raw": pa.string(),
        "model": pa.string(),
        "text": pa.string(),
        "call_id": pa.string(),
        "tool_name": pa.string(),
        "is_sidechain": pa.bool_(),
        "is_meta": pa.bool_(),
        "is_prompt": pa.bool_(),      # a real human prompt (not meta, not a tool result, not a slash-command wrapper)
        "is_demo": pa.bool_(),        # SWE-agent demonstration messages: kept but not part of the run
        "api_call_id": pa.string(),   # dedup key of one API call (Claude: message.id:requestId)
        "input_tokens": pa.int64(),
        "output_tokens": pa.int64(),
        "cache_creation_tokens": pa.int64(),
        "cache_read_tokens": pa.int64(),
        "cache_write_1h_tokens": pa.int64(),  # the 1-hour part of cache_creation_tokens (Claude)
        "reasoning_tokens": pa.int64(),
        "usage_scope": pa.string(),   # call | run : what the recorded usage on this row covers
        "cost_usd_recorded": pa.float64(),
        "text_sha256": pa.string(),   # sha256 of the UTF-8 text, for tool_result rows (set by the engine)
        "cjk_count": pa.int64(),      # the estimate's inputs, measured by the engine
        "utf16_len": pa.int64(),      # (pipeline.text.tokens.text_counts; checked against SQL)
        "media_tokens": pa.int64(),   # a tool result's images/PDFs (pipeline.text.media), else NULL
    },
    "tool_calls": {
        **PROVENANCE,
        "block_no": pa.int32(),
        "seq": pa.int64(),
        "session_id": pa.string(),
        "call_id": pa.string(),
        "tool_name": pa.string(),
        "tool_family": pa.string(),   # read/write/edit/shell/search/glob/web/todo/task/memory/other
        "input_json": pa.string(),
        "cwd": pa.string(),
        "timestamp_raw": pa.string(),
    },
    "tool_results": {
        **PROVENANCE,
        "block_no": pa.int32(),
        "seq": pa.int64(),
        "session_id": pa.string(),
        "call_id": pa.string(),
        "tool_name": pa.string(),
        "is_error": pa.bool_(),
        "payload_shape": pa.string(),  # string | text_object | blocks | json
        # a block list whose text leaves blocks out (images, documents: see
        # pipeline.formats.base.media_payload): its compact JSON's size and sha256, else null
        "payload_json_bytes": pa.int64(),
        "payload_json_sha256": pa.string(),
        "timestamp_raw": pa.string(),
    },
    "session_info": {
        **PROVENANCE,
        "session_id": pa.string(),
        "format": pa.string(),
        "project": pa.string(),
        "git_branch": pa.string(),
        "parent_session_id": pa.string(),
        "agent_id": pa.string(),
        "cli_version": pa.string(),
        "timestamp_raw": pa.string(),
        "meta_json": pa.string(),
    },
    "quarantine": {
        "source_id": pa.string(),
        "generation": pa.int32(),
        "path": pa.string(),
        "line_no": pa.int64(),
        "byte_offset": pa.int64(),
        "byte_len": pa.int64(),
        "severity": pa.string(),      # error | notice (a blank line)
        "reason": pa.string(),
        "excerpt": pa.string(),
        "detected_at": pa.string(),
    },
}

# Tables whose rows come from sources and are filtered to the current generation by views.
PART_TABLES = list(STAGED)

SOURCES = pa.schema([
    ("source_id", pa.string()),
    ("path", pa.string()),
    ("root", pa.string()),
    ("rel_path", pa.string()),
    ("format", pa.string()),
    ("size_bytes", pa.int64()),
    ("mtime", pa.timestamp("us", tz="UTC")),
    ("mtime_ns", pa.int64()),
    ("ctime_ns", pa.int64()),     # with the inode: a file replaced with the same size and mtime is noticed
    ("inode", pa.int64()),
    ("sha256", pa.string()),
    ("lines", pa.int64()),
    ("records", pa.int64()),
    ("quarantined", pa.int64()),
    ("held_back", pa.int64()),
    ("watermark", pa.int64()),
    ("watermark_sha256", pa.string()),
    ("generation", pa.int32()),
    ("reader_state", pa.string()),
    ("ingested_at", pa.timestamp("us", tz="UTC")),
    ("run_id", pa.string()),
    # the part files ("<table>/<part name>") holding the rows of the file's current
    # generation: a part gone from tables/ is noticed and its files are read again
    # (null: not known, a lake made before this was kept)
    ("parts", pa.list_(pa.string())),
])

RUNS = pa.schema([
    ("run_id", pa.string()),
    ("started_at", pa.timestamp("us", tz="UTC")),
    ("finished_at", pa.timestamp("us", tz="UTC")),
    ("files", pa.int64()),
    ("files_skipped", pa.int64()),
    ("lines", pa.int64()),
    ("records", pa.int64()),
    ("quarantined", pa.int64()),
    ("held_back", pa.int64()),
    # which command (ingest | run), its state (running | ok | problems | failed |
    # interrupted), and whether its ingest committed (its parts are visible)
    ("command", pa.string()),
    ("status", pa.string()),
    ("ingest_committed", pa.bool_()),
    ("exit_code", pa.int32()),
    ("pid", pa.int64()),
    ("sessions_done", pa.int64()),
    ("sessions_skipped", pa.int64()),
    ("sessions_failed", pa.int64()),
    ("warnings", pa.list_(pa.string())),
    ("stages_json", pa.string()),     # per stage: seconds, done, skipped, failed, removed
    ("settings_json", pa.string()),   # the settings in force (time zone, policies, ...)
])


def staged_schema(table: str) -> pa.Schema:
    return pa.schema(list(STAGED[table].items()))


# ---------------------------------------------------------------------------------------
# Derived tables (written by later stages under <lake>/derived/<name>/<key>.parquet).
# ---------------------------------------------------------------------------------------
# plans: one row per (policy, session, compaction point). ``metadata_json`` holds the
# per-plan metadata of docs/policies.md: a superset of Claude Code's microcompactMetadata
# (trigger, preTokens, tokensSaved, compactedToolIds) and Anthropic's applied_edits
# (cleared_tool_uses, cleared_input_tokens).
PLANS = pa.schema([
    ("plan_id", pa.string()),          # sha256 of (policy, config_hash, session_id, at_seq)[:16]
    ("policy", pa.string()),           # policy (or chain) name as configured
    ("config_hash", pa.string()),
    ("session_id", pa.string()),
    ("trigger", pa.string()),          # idle | size | force | threshold | window | suggestion | ...
    ("at_seq", pa.int64()),            # the message seq at which the compaction happens
    ("at_time", pa.timestamp("us", tz="UTC")),
    ("tokens_before", pa.int64()),
    ("tokens_after", pa.int64()),
    ("tokens_saved", pa.int64()),
    ("evicted", pa.int64()),
    ("preserved", pa.int64()),
    ("kept", pa.int64()),
    ("metadata_json", pa.string()),
])

# evictions: one row per cleared/pruned item. Provenance columns let ``apply`` find the exact
# bytes to rewrite; ``replacement`` is the exact text that takes the payload's place.
EVICTIONS = pa.schema([
    ("plan_id", pa.string()),
    ("policy", pa.string()),
    ("session_id", pa.string()),
    ("call_id", pa.string()),
    ("tool_name", pa.string()),
    ("action", pa.string()),           # clear | prune | clear_input
    ("reason", pa.string()),           # the trigger and rule that chose it
    ("paths", pa.list_(pa.string())),  # request-side paths of the call
    ("tokens_before", pa.int64()),
    ("tokens_after", pa.int64()),
    ("bytes_before", pa.int64()),
    ("bytes_after", pa.int64()),
    ("locator", pa.string()),          # compaction://<sha256> when the payload is stored
    ("payload_sha256", pa.string()),
    ("replacement", pa.string()),
    ("source_id", pa.string()),
    ("line_no", pa.int64()),
    ("json_path", pa.string()),
    ("seq", pa.int64()),
    ("block_no", pa.int32()),
    ("at_seq", pa.int64()),            # when (in the session) the item is evicted
])
