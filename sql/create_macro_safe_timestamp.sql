-- The time of a raw timestamp, or NULL outside 0002-01-01 .. 9998-12-31 UTC (infinity, BC years, year 294247, year 1 or 9999 near a time-zone edge: values DuckDB holds and Python's datetime cannot, in every time zone, so that no later stage receives one)
CREATE OR REPLACE MACRO safe_timestamp(raw) AS (
    CASE
        WHEN try_cast(raw AS TIMESTAMPTZ) BETWEEN TIMESTAMPTZ '0002-01-01 00:00:00+00' AND TIMESTAMPTZ '9998-12-31 23:59:59+00'
            THEN try_cast(raw AS TIMESTAMPTZ)
    END
)
