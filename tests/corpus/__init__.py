"""Regression corpus: one archive per seed situation, built from source trees in sources/."""
