"""What to install when an optional extra is missing: the packages it lacks, and the pip command for this install.

A feature that needs an extra (``serve``, ``mcp``, ``memory``, ``rich``, ``tokens``, ...) says so with
:func:`missing_extra`: which of the extra's packages are not installed (read from monoagent's own
metadata, so the hint names the package the extra installs, ``mcp``, not whichever of its
dependencies an import happened to reach first), and the command that installs the extra for the
way monoagent itself was installed: ``pip install 'monoagent[serve]'`` from an index, ``pip
install -e '/path/to/checkout[serve]'`` for an editable install of a checkout (PEP 610's
``direct_url.json``), ``pip install '/path/to/checkout[serve]'`` for a non-editable install of
a local directory.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shlex
from urllib.parse import unquote, urlsplit

DISTRIBUTION = "monoagent"

_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_packages(extra: str) -> list[str]:
    """The distributions monoagent's metadata lists for ``extra`` (empty for an unknown extra or no metadata)."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    found: list[str] = []
    for requirement in requires:
        requirement_text, _, marker = requirement.partition(";")
        name = _NAME.match(requirement_text.strip())
        if name and _normal(extra) in {_normal(e) for e in _EXTRA_MARKER.findall(marker)}:
            found.append(name.group(0).split("[")[0])
    return list(dict.fromkeys(found))


def _importable(distribution: str, modules: dict[str, list[str]]) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    tops = modules.get(_normal(distribution)) or [distribution.replace("-", "_")]
    for top in tops:
        try:
            if importlib.util.find_spec(top) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def missing_packages(extra: str, error: ImportError | None = None) -> list[str]:
    """The packages of ``extra`` that cannot be imported; else the top-level module ``error`` could not import."""
    modules: dict[str, list[str]] = {}
    for module, distributions in importlib.metadata.packages_distributions().items():
        if module.isidentifier():
            for distribution in distributions:
                modules.setdefault(_normal(distribution), []).append(module)
    missing = sorted(package for package in extra_packages(extra) if not _importable(package, modules))
    if not missing and error is not None and error.name:
        missing = [error.name.partition(".")[0]]
    return missing


def install_source() -> tuple[str, bool] | None:
    """The local directory monoagent was installed from and whether editably (PEP 610), or None (an index)."""
    try:
        text = importlib.metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        direct = json.loads(text)
    except ValueError:
        return None
    url = direct.get("url") if isinstance(direct, dict) else None
    dir_info = direct.get("dir_info") if isinstance(direct, dict) else None
    if not isinstance(url, str) or not isinstance(dir_info, dict):
        return None
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    return unquote(parts.path), bool(dir_info.get("editable"))


def install_command(extra: str) -> str:
    """``pip install 'monoagent[extra]'``, or the command for the local checkout monoagent was installed from."""
    source = install_source()
    if source is None:
        return f"pip install {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"
    path, editable = source
    target = shlex.quote(f"{path}[{extra}]")
    return f"pip install -e {target}" if editable else f"pip install {target}"


def missing_extra(extra: str, what: str, error: ImportError | None = None) -> str:
    """One line: ``what`` needs ``extra``, the packages it lacks, and the install command.

    ``error`` is the :class:`ImportError` met; its module is named when the extra's own packages
    all seem installed (a broken install, or a dependency of theirs missing).
    """
    missing = missing_packages(extra, error)
    lacking = f" (not installed: {', '.join(missing)})" if missing else ""
    return f"{what} needs the {extra!r} extra{lacking}: {install_command(extra)}"
