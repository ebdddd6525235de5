"""Text a server or the product shows: hostile text, names, bounded results, translations."""
