"""Where a run's numbers come from: the versions of everything that computed them, and the commit
of the normdiff checkout that ran."""
from __future__ import annotations

import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from normdiff.implementations.frameworks import FRAMEWORKS

CORE = ("normdiff", "numpy", "ml_dtypes", "pandas")


def distributions() -> tuple[str, ...]:
    """normdiff's core distributions, then each framework's and its libraries' (the records')."""
    names = list(CORE)
    for framework in FRAMEWORKS.values():
        names += [d for d in framework.distributions + tuple(framework.libraries) if d not in names]
    return tuple(names)


def versions() -> dict:
    found = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in distributions():
        found[dist] = _version(dist)
    return found


@functools.lru_cache(maxsize=1)
def _providers() -> dict:
    """{top-level module: the distributions that provide it}: a scan of every installed
    distribution, made once, and only for a name that is not a distribution's."""
    return metadata.packages_distributions()


@functools.lru_cache(maxsize=None)  # per process: every check asks again, ~0.15 s each time
def _version(name: str) -> str | None:
    """The installed version of a distribution, or of the one that provides a library's module when
    they are named differently (the module haiku is the distribution dm-haiku); None if absent."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
    for dist in _providers().get(name, []):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def git_revision() -> str:
    """The short commit of the normdiff checkout this code runs from, or "unknown" (no git, or an
    installed copy that is not a checkout: a site-packages copy inside some other repository does
    not count)."""
    source = Path(__file__).resolve().parents[2]  # harness/engine/ -> the checkout root
    try:
        proc = subprocess.run(["git", "-C", str(source), "rev-parse", "--show-toplevel", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = proc.stdout.split("\n")
    if proc.returncode != 0 or len(lines) < 2 or not lines[1].strip():
        return "unknown"
    try:
        if Path(lines[0].strip()).resolve() != source or not (source / "pyproject.toml").is_file():
            return "unknown"
    except OSError:
        return "unknown"
    return lines[1].strip()
