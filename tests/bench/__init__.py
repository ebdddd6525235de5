"""The benchmark and its goals."""
