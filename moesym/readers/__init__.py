"""Reading a user's inputs that need the attention catalog: models (the built-in catalog,
spec TOML, HuggingFace configs, :mod:`.model`) and llama.cpp GGUF file types (:mod:`.gguf`)."""
