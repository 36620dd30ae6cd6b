"""A throwaway virtualenv over the main environment's packages, for installing a plugin distribution.

Nothing is downloaded. The new venv sees the main environment's packages through a ``.pth``
file (``site.addsitedir``, so the main environment's own ``.pth`` files, among them the
editable install of monoagent, are processed too), and pip builds a distribution offline with
the hatchling that environment already has. Only then is the distribution a real installed one
whose entry points ``importlib.metadata`` discovers; the main environment gets nothing.
"""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without the developer's MONO_AGENT_* variables (and without pip's index)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.pop("PYTHONPATH", None)
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def venv_site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, env=clean_env(),
    )
    return Path(out.stdout.strip())


def make_venv(venv: Path) -> Path:
    """A venv at ``venv`` that also sees the main environment's packages: its python."""
    has_pip = importlib.util.find_spec("pip") is not None
    subprocess.run(
        [sys.executable, "-m", "venv", *(["--without-pip"] if has_pip else []), str(venv)],
        check=True, capture_output=True, env=clean_env(),
    )
    python = venv_python(venv)
    main_dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    lines = [f"import site; site.addsitedir({d!r})" for d in dict.fromkeys(main_dirs)]
    (venv_site_packages(python) / "_monoagent_main_env.pth").write_text("\n".join(lines) + "\n")
    return python


def pip_install(python: Path, *args: str) -> None:
    """``pip install --no-deps --no-build-isolation --no-index ARGS`` into ``python``'s venv."""
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--no-cache-dir", "--quiet", *args],
        capture_output=True, text=True, env=clean_env(),
    )
    assert install.returncode == 0, install.stdout + install.stderr
