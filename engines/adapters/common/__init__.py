"""What every adapter shares: the request book (validation, finish reasons) and the tally of
what an engine exercised. Imports no third-party engine library."""
