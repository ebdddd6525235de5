"""The audit trail: events, their chain under concurrency, statements, and the history pages."""
