"""Placeholder until the Python hook lands: chains to the user's own sitecustomize."""
