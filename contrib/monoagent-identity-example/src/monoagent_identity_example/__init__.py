"""An example third-party plugin: section 2, Identity, from the ``identityExample`` config section.

It shows the whole shape of a plugin distribution in one module: a config section declared
with ``register_config_sections`` (validated like the kernel's own, unknown keys included) and
a ``section_identity`` implementation that replaces the bundled IDENTITY.md section. Plain
``@hookimpl`` (not ``trylast``) is enough to win: third-party entry points load after the
bundled plugins, and the bundled ones are marked ``trylast``.

Configuration (``monoagent.toml``)::

    [identityExample]
    name = "Ada"
    role = "the build bot of this repository"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from monoagent import Section, hookimpl

if TYPE_CHECKING:
    from monoagent import ConfigSectionRegistrar, Turn

__version__ = "0.1.0"

CONFIG_SECTION = "identityExample"


@attrs.define
class IdentityExampleConfig:
    """The ``identityExample`` table: who the agent says it is."""

    name: str = "Ada"
    role: str = "a helpful assistant"


def identity_text(config: IdentityExampleConfig) -> str:
    """The identity section's text for ``config``."""
    return f"# Identity\n\nYou are {config.name}, {config.role}."


@hookimpl
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    """Declare ``identityExample`` (keys ``name`` and ``role``)."""
    register(CONFIG_SECTION, IdentityExampleConfig)


@hookimpl
def section_identity(turn: Turn) -> Section:
    """The configured name and role, in place of the bundled IDENTITY.md section."""
    config = turn.config.section(CONFIG_SECTION, IdentityExampleConfig)
    return Section(
        id="identity",
        text=identity_text(config),
        order=200,
        stability="stable",
        source="identity-example",
    )
