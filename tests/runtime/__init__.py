"""The worker process and its services: drain, health, leases, metrics, outages, restarts."""
