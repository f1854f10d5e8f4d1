-- utf16_length(t): length of t in UTF-16 code units (JavaScript's .length): astral characters count 2; ASCII skips the regex, astral-dense text (emoji) deletes the BMP runs instead
CREATE OR REPLACE MACRO utf16_length(t) AS
    CASE WHEN t IS NULL THEN 0
         WHEN strlen(t) = length(t) THEN length(t)
         WHEN strlen(t) > 3 * length(t) THEN length(t) + length(regexp_replace(t, '[\x{0}-\x{ffff}]+', '', 'g'))
         ELSE 2 * length(t) - length(regexp_replace(t, '[\x{10000}-\x{10ffff}]+', '', 'g'))
    END
