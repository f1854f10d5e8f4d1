-- cjk_count(t): characters of t in the CJK classes of the docs/policies.md token estimate (all BMP); ASCII skips the regex; runs are deleted whole (fewer matches), and CJK-dense text deletes the non-CJK runs instead
CREATE OR REPLACE MACRO cjk_count(t) AS
    CASE WHEN t IS NULL THEN 0
         WHEN strlen(t) = length(t) THEN 0
         WHEN strlen(t) > 2 * length(t) THEN length(regexp_replace(t, '[^\x{4e00}-\x{9fff}\x{3400}-\x{4dbf}\x{f900}-\x{faff}\x{3000}-\x{303f}\x{ff00}-\x{ffef}]+', '', 'g'))
         ELSE length(t) - length(regexp_replace(t, '[\x{4e00}-\x{9fff}\x{3400}-\x{4dbf}\x{f900}-\x{faff}\x{3000}-\x{303f}\x{ff00}-\x{ffef}]+', '', 'g'))
    END
