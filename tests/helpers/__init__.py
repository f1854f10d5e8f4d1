"""Test helpers: ``lake`` (real samples, small lakes, SQL over them) and ``sessions`` (the
SessionBuilder that makes a policy's SessionInput in code)."""
