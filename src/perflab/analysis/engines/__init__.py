"""Serving engines: per-step batches, prefill stalls and padding, from engine logs and vLLM/SGLang bench files."""
