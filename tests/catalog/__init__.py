"""mrtrweb.catalog: what a server offers, shown as the server means it (issue 28, item 1)."""
