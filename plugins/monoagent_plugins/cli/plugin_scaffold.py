"""What ``monoagent plugin new NAME`` writes: the names a plugin derives from NAME, and its files.

A plugin has one name, its entry-point name (``weather-notes``), and the names that follow
from it by the convention llm (``llm-<name>``) and datasette (``datasette-<name>``) use: the
distribution ``monoagent-weather-notes``, the import package ``monoagent_weather_notes``, the
configuration table ``[weatherNotes]``, the section ``weather_notes`` and the tool
``weather_notes_repeat``. :func:`plugin_names` derives them and refuses a NAME that would not
make every one of them valid and free: anything but lower-case words of letters and digits
joined by ``-`` (so no path separator, ``..``, space or control character can reach a path),
the name of a bundled or installed plugin, an import package or distribution that already
exists, a configuration table that is monoagent's own or a bundled plugin's. A Python keyword
is fine: every identifier built from NAME carries a prefix or a suffix (``monoagent_class``).

:func:`write_plugin` renders the templates of ``plugin_template/`` (package data, shipped in
the wheel) with :class:`string.Template` into a new folder ``<parent>/<distribution>`` that it
creates itself: an existing folder is refused, never overwritten or merged into, and a failure
half-way removes what was written.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import string
import unicodedata
from importlib import metadata, resources
from pathlib import Path

import attrs

from monoagent import MonoagentError, open_file_under

NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
MAX_NAME_CHARS = 40
NAME_RULE = (
    "lower-case letters and digits, words joined by single '-', starting with a letter, "
    f"at most {MAX_NAME_CHARS} characters (for example 'weather' or 'build-notes')"
)
DISTRIBUTION_PREFIX = "monoagent-"
MAX_DESCRIPTION_CHARS = 200
TEMPLATES = "plugin_template"
FILES = (
    ("pyproject.toml.tmpl", "pyproject.toml"),
    ("README.md.tmpl", "README.md"),
    ("gitignore.tmpl", ".gitignore"),
    ("package_init.py.tmpl", "src/${package}/__init__.py"),
    ("test_plugin.py.tmpl", "tests/test_${section_id}.py"),
)
"""Each template and the path it is written to inside the new folder (itself a template)."""


class PluginNameError(MonoagentError):
    """NAME cannot be a new plugin's name; the message says why and what is allowed."""


class PluginScaffoldError(MonoagentError):
    """The plugin's folder cannot be written (it exists, the parent is missing, a bad description)."""


@attrs.frozen
class PluginNames:
    """Every name a plugin distribution derives from the plugin's one name."""

    name: str
    distribution: str
    package: str
    section: str
    section_id: str
    tool: str
    config_class: str


def _derive_names(name: str) -> PluginNames:
    """The names for ``name``, which must already match :data:`NAME_PATTERN`."""
    words = name.split("-")
    snake = "_".join(words)
    return PluginNames(
        name=name,
        distribution=DISTRIBUTION_PREFIX + name,
        package="monoagent_" + snake,
        section=words[0] + "".join(word.capitalize() for word in words[1:]),
        section_id=snake,
        tool=snake + "_repeat",
        config_class="".join(word.capitalize() for word in words) + "Config",
    )


def _shape_problem(name: str) -> str | None:
    """Why ``name`` does not have the shape of a plugin name, with the nearest fix; None if it does."""
    if NAME_PATTERN.fullmatch(name) and len(name) <= MAX_NAME_CHARS:
        return None
    if not name:
        return "the plugin name is empty"
    if "/" in name or "\\" in name or ".." in name or name == ".":
        return f"{name!r} is a path, not a name (the folder is made inside --dir, named after the distribution)"
    hint = ""
    suggestion = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if suggestion != name and NAME_PATTERN.fullmatch(suggestion) and len(suggestion) <= MAX_NAME_CHARS:
        hint = f" (did you mean {suggestion!r}?)"
    return f"{name!r} is not a valid plugin name{hint}"


def _installed_plugin_names() -> dict[str, str]:
    """Every installed ``monoagent`` entry point's name, with the distribution providing it."""
    found: dict[str, str] = {}
    for entry_point in metadata.entry_points(group="monoagent"):
        dist = entry_point.dist
        found[entry_point.name] = dist.metadata["Name"] if dist is not None else entry_point.value
    return found


def _taken_sections() -> set[str]:
    """The configuration tables a new plugin cannot declare: the kernel's and installed plugins'."""
    from monoagent import kernel_config_tables as kernel_tables

    declared = {entry_point.name for entry_point in metadata.entry_points(group="monoagent.config_sections")}
    return {path.split(".")[0] for path in (*kernel_tables(), *declared)}


def plugin_names(name: str) -> PluginNames:
    """The names of a new plugin called ``name``, or :class:`PluginNameError` saying why not."""
    for prefix in (DISTRIBUTION_PREFIX, "monoagent_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            own = name[len(prefix):]
            raise PluginNameError(
                f"give the plugin's own name, {own!r}: the distribution is then named {DISTRIBUTION_PREFIX}{own}"
            )
    problem = _shape_problem(name)
    if problem is not None:
        raise PluginNameError(f"{problem}; a plugin name is {NAME_RULE}")
    names = _derive_names(name)
    owner = _installed_plugin_names().get(name)
    if owner == "monoagent":
        raise PluginNameError(
            f"{name!r} is the name of a bundled plugin; a plugin that replaces it takes a name of its own "
            f"and the bundled one is blocked with plugins.block = [{name!r}]"
        )
    if owner is not None:
        raise PluginNameError(f"{name!r} is the name of a plugin already installed, from the distribution {owner}")
    if importlib.util.find_spec(names.package) is not None:
        raise PluginNameError(f"{name!r} would make the import package {names.package}, which already exists here")
    try:
        metadata.distribution(names.distribution)
    except metadata.PackageNotFoundError:
        pass
    else:
        raise PluginNameError(f"{name!r} would make the distribution {names.distribution}, which is installed already")
    if names.section in _taken_sections():
        raise PluginNameError(
            f"{name!r} would declare the configuration table [{names.section}], which is monoagent's own "
            f"or an installed plugin's; choose another name"
        )
    return names


def check_description(description: str) -> str:
    """``description`` as one line of printable text, or :class:`PluginScaffoldError`."""
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise PluginScaffoldError(f"the description is {len(description)} characters; at most {MAX_DESCRIPTION_CHARS} are allowed")
    if any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in description):
        raise PluginScaffoldError(
            "the description has a control or format character (a line break, a tab, an escape); "
            "it must be one line of printable text"
        )
    return description.strip()


def monoagent_requirement() -> str:
    """``monoagent>=<major>.<minor>`` of the running monoagent: the API the template is written against."""
    version = re.match(r"(\d+)\.(\d+)", metadata.version("monoagent"))
    return f"monoagent>={version[1]}.{version[2]}" if version else "monoagent"


def render_files(names: PluginNames, description: str) -> dict[str, str]:
    """Every file of the new distribution, by its path relative to the distribution's folder."""
    import tomli_w

    text = description or f"The monoagent plugin {names.name}."
    values = {
        **attrs.asdict(names),
        "description": text,
        "description_line": tomli_w.dumps({"description": text}).strip(),
        "monoagent_requirement": monoagent_requirement(),
    }
    templates = resources.files("monoagent_plugins.cli").joinpath(TEMPLATES)
    return {
        string.Template(target).substitute(values): string.Template(
            templates.joinpath(template).read_text(encoding="utf-8")
        ).substitute(values)
        for template, target in FILES
    }


def write_plugin(parent: Path, names: PluginNames, description: str = "") -> tuple[Path, list[str]]:
    """Write the distribution into the new folder ``parent / names.distribution``.

    Returns the folder and the files written, relative to it. :class:`PluginScaffoldError` when
    ``parent`` is not a directory, the folder (or anything by its name, a link included) exists,
    or the description is not one printable line; nothing is written then.
    """
    files = render_files(names, check_description(description))
    if not parent.is_dir():
        raise PluginScaffoldError(f"the parent folder {str(parent)!r} does not exist or is not a directory")
    target = parent / names.distribution
    try:
        target.mkdir()
    except FileExistsError:
        raise PluginScaffoldError(
            f"{str(target)!r} exists already; nothing was written (remove it, or choose another --dir)"
        ) from None
    except OSError as exc:
        raise PluginScaffoldError(f"cannot create {str(target)!r}: {exc.strerror or exc}") from exc
    try:
        for relative, content in files.items():  # from the parent down, nothing followed through a symlink
            fd = open_file_under(parent, os.path.join(names.distribution, relative), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                 0o666, create_directories=True, directory_mode=0o777, what="plugin file")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(content)
    except OSError as exc:
        shutil.rmtree(target)  # the folder is ours: made above, by this call
        raise PluginScaffoldError(f"cannot write the plugin in {str(target)!r}: {exc}; nothing was kept") from exc
    except BaseException:
        shutil.rmtree(target)
        raise
    return target, list(files)
