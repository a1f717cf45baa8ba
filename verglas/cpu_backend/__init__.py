"""CPU backend: one numba-jitted function per program."""
