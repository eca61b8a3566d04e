"""inferd: one local process serving chat LLMs, encoders, speech, OCR and tabular models
over the OpenAI, Ollama and Antfly HTTP APIs."""

__version__ = "0.1.0"
