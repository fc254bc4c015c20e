"""Safe archive ingest and parsing: pure library, no web or database imports."""
