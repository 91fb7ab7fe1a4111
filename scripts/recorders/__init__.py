"""The recorders of scripts/record.py, one module each, named for what they record."""
