"""Portal's pluggy hook specifications.

Three shapes only:

* registration hooks (plural nouns) return a list of small frozen spec objects carrying a
  ``name``; the plugin manager flattens them, normalises names and refuses duplicates;
* one-answer hooks (``firstresult=True``) return ``T | None``; Portal's own defaults are
  ``trylast=True`` so a plugin wins;
* event hooks return ``None``.

Hooks evolve only by adding parameters. Implement them with :data:`hookimpl`::

    from portal.core.hookspecs import hookimpl

    @hookimpl
    def portal_notice_sources():
        return [NoticeSourceSpec(name="acme", provider="acme", factory=AcmeSource)]

and register the module under the ``portal`` entry-point group of your distribution::

    [project.entry-points.portal]
    acme = "portal_acme.plugin"
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Mapping

    from portal.core.domain import Event
    from portal.core.specs import (
        CaptureExtensionSpec,
        CatalogSpec,
        KeyStore,
        NoticeSourceSpec,
        PlacementPolicySpec,
        SerializerSpec,
        SettingSpec,
        StorageBackendSpec,
    )

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "portal"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def portal_notice_sources() -> list[NoticeSourceSpec]:
    """Register notice sources: watchers of a platform's preemption notices.

    :return: the sources this plugin provides.

    Example::

        @hookimpl
        def portal_notice_sources():
            return [NoticeSourceSpec(name="acme", provider="acme", factory=AcmeNotices)]
    """
    raise NotImplementedError


@hookspec
def portal_storage_backends() -> list[StorageBackendSpec]:
    """Register storage backends for URL schemes.

    :return: the backends this plugin provides.

    Example::

        @hookimpl
        def portal_storage_backends():
            return [StorageBackendSpec(name="acme", schemes=("acme",), factory=AcmeBackend)]
    """
    raise NotImplementedError


@hookspec
def portal_serializers() -> list[SerializerSpec]:
    """Register pickle reducers for types the capture engine cannot pickle on its own.

    :return: serializer specs, keyed by fully qualified type names (no import needed).

    Example::

        @hookimpl
        def portal_serializers():
            return [SerializerSpec(name="acme", reducers={"acme.Handle": reduce_handle})]
    """
    raise NotImplementedError


@hookspec
def portal_capture_extensions() -> list[CaptureExtensionSpec]:
    """Register capture/restore pairs for process-level state (RNGs, settings, cwd...).

    :return: capture extension specs.

    Example::

        @hookimpl
        def portal_capture_extensions():
            return [CaptureExtensionSpec(name="acme_rng", capture=acme.get_state,
                                         restore=acme.set_state, modules=("acme",))]
    """
    raise NotImplementedError


@hookspec
def portal_placement_policies() -> list[PlacementPolicySpec]:
    """Register placement policies.

    :return: placement policy specs.

    Example::

        @hookimpl
        def portal_placement_policies():
            return [PlacementPolicySpec(name="cheapest", factory=Cheapest)]
    """
    raise NotImplementedError


@hookspec
def portal_catalogs() -> list[CatalogSpec]:
    """Register providers' catalogs of machine types (vCPUs, memory, GPUs) and their offers.

    :return: catalog specs.

    Example::

        @hookimpl
        def portal_catalogs():
            return [CatalogSpec(name="acme", provider="acme", machine_types=load_acme_types)]
    """
    raise NotImplementedError


@hookspec
def portal_settings() -> list[SettingSpec]:
    """Declare the settings a plugin reads. Each joins Portal's settings: it can be set in
    ``PORTAL_HOME/config.toml``, a project's ``portal.toml`` or its environment variable, is
    validated once by its parser (a bad value names the file and line), is listed by
    ``portal config show``, and reaches the plugin's notice sources in
    ``NoticeSourceContext.settings`` under its name.

    :return: the settings this plugin reads.

    Example::

        @hookimpl
        def portal_settings():
            return [SettingSpec(name="acme.poll_interval_s", parse=float, default=1.0,
                                env="PORTAL_ACME_POLL_INTERVAL_S",
                                description="seconds between two reads of the notice document")]
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def portal_key_store(home: str) -> KeyStore | None:
    """Provide the store of job keys (a KMS, a vault). Stops at first non-None result.

    :param home: Portal's home directory (``PORTAL_HOME``), where the default file store lives.
    :return: a key store, or ``None`` to let another plugin (or the default) answer.

    Example::

        @hookimpl
        def portal_key_store(home):
            return AcmeKms() if os.environ.get("ACME_KMS") else None
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def portal_machine_exists(
    provider: str,
    machine: str,
    home: str,
    facts: Mapping[str, str],
    settings: Mapping[str, Any],
) -> bool | None:
    """Whether a machine a job ran on still exists, as its provider says now. The lost-job
    rules ask it about once a minute while the job's node is silent: a job is lost only once the
    provider says twice, a minute apart, that its machine is gone (AWS DescribeInstances, GCP
    instances.get, Azure's instance view). Stops at the first non-None answer.

    :param provider: the machine's provider (``aws``, ``gcp``, ``azure``) as the node reported
        it, or ``""`` when it reported none.
    :param machine: the machine as the job's attempt records it (an instance id, or the
        simulated cloud's ``sim-0002 spot aws c7i.large (us-east-1)``).
    :param home: Portal's home directory (``PORTAL_HOME``).
    :param facts: what the node reported of its machine when it started (``region``, ``zone``,
        ``instance_type``, ``capacity``, and the provider's own name for it: ``instance_id``,
        GCP's ``project``, Azure's ``subscription`` and ``resource_group``; empty when it
        reported nothing).
    :param settings: every setting's value by its dotted name, Portal's and the plugins'
        (``aws.ec2_endpoint``...), as the control plane resolved them.
    :return: True (still there), False (gone), or ``None``: not a machine this plugin knows, or
        it cannot tell now (a failed API call is ``None``, never ``False``).

    Example::

        @hookimpl
        def portal_machine_exists(provider, machine):
            if provider != "acme":
                return None
            return acme.instances.get(machine) is not None
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def portal_machine_vcpus(
    provider: str, machine_type: str, settings: Mapping[str, Any]
) -> int | None:
    """How many vCPUs the provider's own listing gives a machine type no catalog knows (EC2's
    DescribeInstanceTypes, Azure's resource SKUs): the state-size bound of a spot offer grows
    with the machine's size. Asked once per type and remembered; stops at the first non-None.

    :param provider: the type's provider (``aws``, ``azure``).
    :param machine_type: the type's name as the provider spells it (``c7i.large``).
    :param settings: every setting's value by its dotted name, Portal's and the plugins'.
    :return: the vCPUs, or ``None``: not this plugin's provider, or the listing cannot say (a
        failed call is ``None``; the type is then sized as its default class, and says so).

    Example::

        @hookimpl
        def portal_machine_vcpus(provider, machine_type):
            return acme.instance_types.get(machine_type).cpus if provider == "acme" else None
    """
    raise NotImplementedError


@hookspec
def portal_job_listings(home: str) -> list[dict[str, Any]]:
    """Jobs another tool ran with this Portal home, listed beside Portal's own by ``portal
    jobs`` (and ``--json``, the console, the MCP server): bladekit's runs, a scheduler's tasks.

    :param home: Portal's home folder (``PORTAL_HOME``), where such a tool keeps its records.
    :return: one row per job with the keys of ``portal jobs --json`` (docs/cli-json.md), its
        ``source`` the tool's name; ``status``, ``logs`` and ``resume`` stay that tool's own. A
        plugin that fails is logged and lists nothing (Portal's jobs are listed all the same).

    Example::

        @hookimpl
        def portal_job_listings(home):
            return [acme_row(task) for task in acme.tasks(home)]
    """
    raise NotImplementedError


@hookspec
def portal_event(event: Event) -> None:
    """Observe every event Portal records for a job (notice, suspended, resumed, warnings...).

    :param event: the event, already recorded.

    Example::

        @hookimpl
        def portal_event(event):
            if event.kind == "notice":
                pager.send(event.message)
    """
