-- est_tokens(t): the docs/policies.md token estimate of one string (0 for NULL or empty)
CREATE OR REPLACE MACRO est_tokens(t) AS
    est_tokens_from(cjk_count(t), utf16_length(t))
