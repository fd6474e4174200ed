"""CTranslate2's static batching behind engines.protocol (importing it imports ctranslate2;
build its venv with `bash ci/ct2-env.sh`).

`engines.adapters.ct2:make_engine` is a public spec path: the adapter is in
engines.adapters.ct2.adapter, and this re-exports its `__all__`."""

from engines.adapters.ct2.adapter import *  # noqa: F403
