"""OpenVINO GenAI's continuous batching behind engines.protocol (importing it imports
openvino_genai; build its venv with `bash ci/openvino-env.sh`).

`engines.adapters.openvino:make_engine` is a public spec path: the adapter is in
engines.adapters.openvino.adapter, and this re-exports its `__all__`."""

from engines.adapters.openvino.adapter import *  # noqa: F403
