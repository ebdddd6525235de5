"""The per-user WebSocket: consumers, origin checks, sessions, pushes and the channel layer."""
