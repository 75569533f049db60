"""Whether a Compute Engine VM still exists: the GCP answer to the lost-job rules' question
(``portal_machine_exists``), asked about once a minute while a job's node is silent.

Compute Engine's ``instances.get`` names the VM's ``status``. A Spot VM that was preempted is
``TERMINATED`` (its termination action ``STOP``) or no longer exists (``DELETE``: 404). For the
job, ``STOPPING``, ``STOPPED``, ``SUSPENDING``, ``SUSPENDED``, ``TERMINATED`` and 404 are "gone"
(the VM's memory, so the job's process, is gone); so is a VM of the same name with another id
(the node's VM was deleted and a new one took its name). ``PROVISIONING``, ``STAGING``,
``RUNNING`` and ``REPAIRING`` are "still there". Anything else (no credentials, a refused or
failed call) is "cannot tell" (None), never "gone".

Credentials are Google's Application Default Credentials of the control plane (google-auth:
``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's, or the metadata server on GCE) with the
``compute.readonly`` scope; the ``api`` extra installs it. ``gcp.compute_endpoint`` points the
call at a private endpoint or a test server.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

from portal.providers.base.sdk import sdk_missing

__all__ = ["DEFAULT_ENDPOINT", "GONE_STATUSES", "instance_exists", "machine_exists"]

log = logging.getLogger("portal.providers.gcp")

DEFAULT_ENDPOINT = "https://compute.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/compute.readonly"
#: Statuses in which the job's process cannot be running any more.
GONE_STATUSES = frozenset({"STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "TERMINATED"})
TIMEOUT_S = 10.0


def instance_exists(
    *,
    project: str,
    zone: str,
    name: str,
    instance_id: str | None = None,
    endpoint: str | None = None,
) -> bool | None:
    """Compute Engine's answer for VM ``name`` (of id ``instance_id``, when known)."""
    try:
        import google.auth
        import google.auth.exceptions
        import requests
        from google.auth.transport.requests import AuthorizedSession
    except ImportError as exc:
        sdk_missing(exc, api="Compute Engine's API", extra="portal-providers-gcp[api]")
        return None
    quote = urllib.parse.quote
    url = (
        f"{(endpoint or DEFAULT_ENDPOINT).rstrip('/')}/compute/v1/projects/{quote(project)}"
        f"/zones/{quote(zone)}/instances/{quote(name)}"
    )
    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
        authorized: Any = AuthorizedSession  # untyped where google-auth is installed
        with authorized(credentials) as session:
            answer = session.get(url, timeout=TIMEOUT_S)
    except (google.auth.exceptions.GoogleAuthError, requests.RequestException, OSError) as exc:
        log.warning("Compute Engine could not be asked whether VM %s exists: %s", name, exc)
        return None
    if answer.status_code == 404:
        return False
    if answer.status_code != 200:
        log.warning(
            "Compute Engine could not say whether VM %s exists: HTTP %s %s",
            name,
            answer.status_code,
            answer.text[:200],
        )
        return None
    try:
        vm = answer.json()
        status, found_id = str(vm["status"]), str(vm.get("id", ""))
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("Compute Engine's answer about VM %s is not an instance: %s", name, exc)
        return None
    if instance_id and found_id and found_id != instance_id:
        return False  # the name now belongs to another VM: the node's is gone
    return status not in GONE_STATUSES


def machine_exists(
    provider: str, facts: Mapping[str, str], settings: Mapping[str, Any]
) -> bool | None:
    """The hook's answer: only for a GCP VM whose node reported its project, zone and name."""
    if provider != "gcp":
        return None
    project, zone, name = facts.get("project"), facts.get("zone"), facts.get("instance_name")
    if not (project and zone and name):
        return None
    endpoint = settings.get("gcp.compute_endpoint")
    return instance_exists(
        project=project,
        zone=zone,
        name=name,
        instance_id=facts.get("instance_id"),
        endpoint=str(endpoint) if endpoint else None,
    )
