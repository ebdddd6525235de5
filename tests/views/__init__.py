"""The person's pages: the browser end to end, listings, error pages, static files, attacks on the pages."""
