"""Runbooks, one markdown file per alert rule; shipped as package data."""
