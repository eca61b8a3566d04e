"""The built-in web console: static files only (static/), vanilla JS modules and CSS,
served by inferd/api/console.py. No build step, nothing fetched from the internet."""

from pathlib import Path

STATIC = Path(__file__).parent / "static"
