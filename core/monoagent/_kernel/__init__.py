"""The kernel: the hook catalogue, the plugin host, configuration, the data model and the interfaces.

Nothing here knows a provider, a store, a tier, a channel or a policy by name; every default is a
bundled plugin (``monoagent_plugins``) registered exactly as a third party's would be.

* :mod:`~monoagent._kernel.hookspecs`: every hook, each docstring its reference documentation;
* :mod:`~monoagent._kernel.host`: one pluggy manager per Agent, load order, records, registries;
* :mod:`~monoagent._kernel.hooks`: the typed facade every hook call goes through (``agent.hooks``);
* :mod:`~monoagent._kernel.registrars`: the typed ``register`` of each registry hook;
* :mod:`~monoagent._kernel.config`: the kernel's documented keys and ``setting`` to declare keys;
  :mod:`~monoagent._kernel.config_keys` describes, validates and structures keys, and
  :mod:`~monoagent._kernel.config_loading` reads the file and the ``MONO_AGENT_*`` variables;
* :mod:`~monoagent._kernel.model` and :mod:`~monoagent._kernel.turn`: what flows through a turn;
* :mod:`~monoagent._kernel.interfaces`: the protocols components implement (providers, stores, tiers).
"""
