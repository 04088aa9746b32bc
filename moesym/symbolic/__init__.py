"""SymPy helpers every stage may import: the declared symbols, the expression helpers (smooth max/min, substitution), the special functions and the compiler to NumPy."""
