"""Graded shapes (the hard deck table; page size 16) and CPU/interpreter smoke shapes."""

SHAPES = [
    {"BATCH": 8, "NUM_HEADS": 32, "NUM_KV_HEADS": 8, "HEAD_DIM": 128, "SEQ_LEN": 1024},
    {"BATCH": 32, "NUM_HEADS": 32, "NUM_KV_HEADS": 8, "HEAD_DIM": 128, "SEQ_LEN": 2048},
    {"BATCH": 4, "NUM_HEADS": 64, "NUM_KV_HEADS": 8, "HEAD_DIM": 128, "SEQ_LEN": 4096},
    {"BATCH": 16, "NUM_HEADS": 32, "NUM_KV_HEADS": 8, "HEAD_DIM": 128, "SEQ_LEN": 1535},
    {"BATCH": 8, "NUM_HEADS": 16, "NUM_KV_HEADS": 4, "HEAD_DIM": 64, "SEQ_LEN": 2000},
]

# GQA groups of 4 and 2, a partial last page, several pages per sequence.
SMALL_SHAPES = [
    {"BATCH": 2, "NUM_HEADS": 8, "NUM_KV_HEADS": 2, "HEAD_DIM": 32, "SEQ_LEN": 100},
    {"BATCH": 3, "NUM_HEADS": 4, "NUM_KV_HEADS": 2, "HEAD_DIM": 64, "SEQ_LEN": 48},
]
