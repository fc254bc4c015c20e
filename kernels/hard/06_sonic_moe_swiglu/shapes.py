"""Graded shapes (the hard deck table) and CPU/interpreter smoke shapes."""

SHAPES = [
    {"T_TOTAL": 32768, "H": 4096, "I": 1536, "E": 128, "K": 8},
    {"T_TOTAL": 4096, "H": 2048, "I": 1024, "E": 64, "K": 4},
    {"T_TOTAL": 16384, "H": 2048, "I": 4096, "E": 64, "K": 8},
]

# Ragged experts (some likely empty at E=8 over 48 rows), row counts off any tile grid.
SMALL_SHAPES = [
    {"T_TOTAL": 24, "H": 64, "I": 48, "E": 8, "K": 2},
    {"T_TOTAL": 40, "H": 32, "I": 32, "E": 4, "K": 1},
]
