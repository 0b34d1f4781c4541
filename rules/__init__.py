"""Rule files (YAML data) and their tests; shipped as package data."""
