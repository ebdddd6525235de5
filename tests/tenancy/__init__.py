"""Tenancy: who belongs to which tenant and who may act on what."""
