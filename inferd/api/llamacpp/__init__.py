"""llama-server's native API (its tools/server README): POST /completion and /completions."""
