"""Public spec path `engines.static:StaticBatchEngine`: the engine is engines.slot.static."""

from engines.slot.static import StaticBatchEngine as StaticBatchEngine
