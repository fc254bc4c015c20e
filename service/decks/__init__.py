"""Registered decks: the canonical deck files template integrity compares against."""
