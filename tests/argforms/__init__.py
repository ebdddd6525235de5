"""Generated argument fields for nested tool schemas (issue 28 item 2, :mod:`mrtrweb.argforms`)."""
