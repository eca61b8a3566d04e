"""Server-side storage: uploaded files (files.py)."""
