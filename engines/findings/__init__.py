"""The findings ledger: re-runs each standalone repro of docs/findings.md (docs/findings/rNN_*.py,
whose contract is docs/findings/README.md) at its library's pinned version and at the newest
release, and keeps the status table at the top of docs/findings.md.

One job per module: `ledger` reads the scripts' LEDGER headers, `reports` the report headings
of docs/findings.md, `run` runs one script and reads its verdict, `venvs` finds or builds the
interpreters, `models` exports the model files, `table` renders and rewrites the status table,
`check` ties them together, and `__main__` is the command line (`python -m engines.findings`).
"""
