"""The package's layers, import graph and the old paths the house move kept."""
