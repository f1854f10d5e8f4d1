-- source_state(label, generation, lines, sha256): a source's state as text, behind a label (its id, or a session's), what session fingerprints and keys are made of
CREATE OR REPLACE MACRO source_state(label, generation, lines, sha256) AS
    label || ':' || CAST(generation AS VARCHAR) || ':' || CAST(coalesce(lines, 0) AS VARCHAR) || ':' || coalesce(sha256, '')
