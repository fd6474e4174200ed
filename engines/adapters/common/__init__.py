"""What every adapter shares: the request book (validation, finish reasons), the tally of
what an engine exercised, the presets written as checkpoint directories (cached by their
weights' digest) and the 1:1 tokenizer those carry. Imports no third-party engine library."""
