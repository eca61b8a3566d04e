"""Getting models: Hugging Face Hub downloads (hub.py, with the quant picker in quants.py),
Ollama registry pulls (ollama.py), resumable verified transfers (transfer.py) and the
installation of a finished download into the Antfly layout (install.py). Blocking code,
run on worker threads; nothing here knows about HTTP serving."""
