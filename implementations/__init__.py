"""Adapters, one module per source. Nothing here imports a framework at package import time:
`catalog.builtin()` only describes implementations; each module is imported inside its worker."""
