"""Cost terms: pure functions returning SymPy expressions (never numbers-only NumPy code)."""
