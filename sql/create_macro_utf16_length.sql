-- utf16_length(t): length of t in UTF-16 code units (JavaScript's .length): astral characters count 2; ASCII skips the regex
CREATE OR REPLACE MACRO utf16_length(t) AS
    CASE WHEN t IS NULL THEN 0
         WHEN strlen(t) = length(t) THEN length(t)
         ELSE 2 * length(t) - length(regexp_replace(t, '[\x{10000}-\x{10ffff}]', '', 'g'))
    END
