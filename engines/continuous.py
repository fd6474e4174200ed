"""Public spec path `engines.continuous:ContinuousBatchEngine`: the engine is
engines.slot.continuous."""

from engines.slot.continuous import ContinuousBatchEngine as ContinuousBatchEngine
