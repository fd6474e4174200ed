"""The slot engines: a compacting per-slot KV cache (SlotCache), the masked batched forward
over it (SlotForward), and static and continuous batching on top. Imports only engines.core,
engines.protocol and engines.models."""
