"""Correctness check of ./solution.py against this problem (kaudit's grader; see PROMPT.txt)."""

import sys
from pathlib import Path

try:
    from graders.entry import check_main
except ImportError:  # run from inside the deck folder: the repo root holds graders/
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from graders.entry import check_main

if __name__ == "__main__":
    raise SystemExit(check_main(Path(__file__).resolve().parent))
