"""Media inputs (images): where their bytes come from (sources.py) and how they are checked
and decoded (images.py). Budgets (how many bytes and pixels a request and the server may
hold) live in inferd/scheduling/media.py, which calls these."""
