"""An operation's round path: start, hold, answer, expire, stop, its limits and outcomes."""
