"""The portal's own organisations (a model mrtrweb knows nothing of) and its tenant resolver."""
