"""Embedding the app into a portal: the documented recipe, portal teams, template blocks."""
