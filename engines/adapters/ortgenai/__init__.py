"""onnxruntime-genai's `Engine` behind engines.protocol (importing it imports onnxruntime_genai;
build its venv with `bash ci/ortgenai-env.sh`).

`engines.adapters.ortgenai:make_engine` is a public spec path: the adapter is in
engines.adapters.ortgenai.adapter, and this re-exports its `__all__`."""

from engines.adapters.ortgenai.adapter import *  # noqa: F403
