"""Rule modules."""
