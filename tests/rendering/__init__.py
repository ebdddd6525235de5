"""mrtrweb.rendering: results as people read them (issue 28, item 3)."""
