"""mistral.rs's continuous batching behind engines.protocol (importing it imports mistralrs;
build its venv with `bash ci/mistralrs-env.sh`).

`engines.adapters.mistralrs:make_engine` is a public spec path: the adapter is in
engines.adapters.mistralrs.adapter, and this re-exports its `__all__`."""

from engines.adapters.mistralrs.adapter import *  # noqa: F403
