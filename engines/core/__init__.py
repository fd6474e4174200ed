"""What every reference engine shares: per-request state, sampling, validation, the engine
core (model set-up, queue, aborts) and the decoder parts every batched forward is built of.
Imports only engines.protocol and engines.models."""
