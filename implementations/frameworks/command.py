"""External commands in any language (`normdiff check --command`): arrays cross as safetensors
files (implementations/command.py), so there is nothing to import and nothing to convert. Commands
run in a worker of their own, so a slow program never holds up an in-process framework."""
from __future__ import annotations

from normdiff.implementations.frameworks.record import Framework

FRAMEWORK = Framework("command")
