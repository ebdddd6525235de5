"""The standalone site and the demo command: checks, login throttle, secret keys."""
