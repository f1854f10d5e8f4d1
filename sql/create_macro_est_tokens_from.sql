-- est_tokens_from(cjk, utf16_len): ceil(cjk * 1.5) + ceil((utf16_len - cjk) / 4), the docs/policies.md estimate
CREATE OR REPLACE MACRO est_tokens_from(cjk, utf16_len) AS
    CAST(ceil(cjk * 3 / 2.0) + ceil((utf16_len - cjk) / 4.0) AS BIGINT)
