"""A conformance fake of the GCE metadata server for tests, on 127.0.0.1.

Written from Google's documented behaviour (no emulator of the metadata server exists), shipped so
that tests elsewhere and third-party plugins can drive the same fake::

    from portal.providers.gcp.testing import FakeGCEMetadata

    with FakeGCEMetadata() as gce:
        source = GcpNoticeSource(host=gce.host)   # what GCE_METADATA_HOST carries
        gce.preempt()
        gce.fail_next(503)        # faults come from portal.providers.base.testing

What it models: ``Metadata-Flavor: Google`` required (403 without, or with ``X-Forwarded-For``) and
sent back; an ``ETag`` on every answer, derived from the value; hanging GETs
(``wait_for_change=true``, ``last_etag``, ``timeout_sec``) that return at once when ``last_etag``
differs from the current ETag, when the value changes, or with the current value at the timeout;
``instance/preempted``, ``instance/maintenance-event``, the scheduling and placement values
(``provisioning-model`` can be made to 404, as on older VMs), 404 for anything else.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import urllib.parse
from pathlib import Path

from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply

__all__ = ["FakeComputeAPI", "FakeGCEMetadata"]

PREFIX = "/computeMetadata/v1/"
#: A hanging GET without ``timeout_sec`` waits this long here (the real server waits much longer).
DEFAULT_HANG_S = 60.0


def etag_of(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


class FakeGCEMetadata(FakeHTTPServer):
    """The GCE metadata server, scriptable from tests."""

    def __init__(
        self,
        *,
        machine_type: str = "n2-standard-4",
        zone: str = "us-central1-a",
        provisioning_model: str | None = "SPOT",
    ) -> None:
        super().__init__()
        self.values: dict[str, str] = {
            "instance/preempted": "FALSE",
            "instance/maintenance-event": "NONE",
            "instance/machine-type": f"projects/123456789/machineTypes/{machine_type}",
            "instance/zone": f"projects/123456789/zones/{zone}",
            "instance/id": "1234567890123456789",
            "instance/name": "portal-test-vm",
            "project/project-id": "portal-test",
            "instance/scheduling/preemptible": "TRUE" if provisioning_model == "SPOT" else "FALSE",
        }
        if provisioning_model is not None:
            self.values["instance/scheduling/provisioning-model"] = provisioning_model
        self.hanging = 0  # hanging GETs waiting now

    # --- scripting ------------------------------------------------------------------------------

    def set(self, key: str, value: str) -> None:
        """Change a value (``instance/...``); hanging GETs on it answer at once."""
        with self.lock:
            self.values[key] = value
        self.changed()

    def preempt(self, in_seconds: float | None = None) -> None:
        """Set ``instance/preempted`` to ``TRUE``. GCE states no deadline (a Spot VM stops 30 s
        later), so ``in_seconds`` is accepted for symmetry with the other fakes and ignored."""
        self.set("instance/preempted", "TRUE")

    def cancel(self) -> None:
        """Flip ``instance/preempted`` back to ``FALSE``: the notice is void."""
        self.set("instance/preempted", "FALSE")

    def maintenance(self, value: str = "TERMINATE_ON_HOST_MAINTENANCE") -> None:
        self.set("instance/maintenance-event", value)

    def end_maintenance(self) -> None:
        self.set("instance/maintenance-event", "NONE")

    def wait_for_hanging(self, count: int = 1, timeout_s: float = 5.0) -> bool:
        """Wait until ``count`` hanging GETs are waiting (so a change is seen by a hanging GET)."""
        return self.wait_for(lambda: self.hanging >= count, timeout_s)

    # --- the service ------------------------------------------------------------------------------

    def respond(self, request: RecordedRequest) -> Reply:
        flavor = {"Metadata-Flavor": "Google"}
        if request.header("metadata-flavor") != "Google" or request.header("x-forwarded-for"):
            return Reply(403, b"Missing Metadata-Flavor:Google header.", flavor, "text/html")
        if not request.path.startswith(PREFIX):
            return Reply(404, b"Not Found", flavor, "text/html")
        if request.method != "GET":
            return Reply(405, b"Method Not Allowed", flavor, "text/html")
        key = request.path[len(PREFIX) :]
        with self.lock:
            if key not in self.values:
                return Reply(404, b"Not Found", flavor, "text/html")
            if request.query.get("wait_for_change", "").lower() == "true":
                try:
                    hang_s = float(request.query.get("timeout_sec", DEFAULT_HANG_S))
                except ValueError:
                    return Reply(400, b"Bad Request: timeout_sec", flavor, "text/html")
                last = request.query.get("last_etag", "0")
                start = etag_of(self.values[key])
                if last == start:  # otherwise the caller is behind: answer at once
                    self.hanging += 1
                    self.changed()
                    try:
                        self.wait_for(lambda: etag_of(self.values.get(key, "")) != start, hang_s)
                    finally:
                        self.hanging -= 1
                        self.changed()
            value = self.values.get(key, "")
        headers = {**flavor, "ETag": etag_of(value)}
        return Reply(200, value.encode(), headers, "application/text")


class FakeComputeAPI(FakeHTTPServer):
    """Compute Engine's ``instances.get`` and Google's OAuth token endpoint, on 127.0.0.1, for
    the lost-job rules' VM check. Written from the documented API (no emulator of Compute
    Engine exists)::

        with FakeComputeAPI() as api:
            api.add("portal-test", "us-central1-a", "vm-1", "123")
            credentials = api.service_account_file(tmp_path)  # GOOGLE_APPLICATION_CREDENTIALS
            api.set_status("vm-1", "TERMINATED")              # preempted, stopped
            api.delete("vm-1")                                # preempted, deleted

    What it models: the service-account grant (``POST /token``, a JWT assertion, answered with a
    bearer token); ``GET /compute/v1/projects/P/zones/Z/instances/NAME`` answered with the
    instance (``id``, ``name``, ``status``), 404 for one that does not exist, 401 without a token
    it issued, each error in Google's JSON error shape.
    """

    TOKEN_PATH = "/token"

    def __init__(self) -> None:
        super().__init__()
        self.instances: dict[tuple[str, str, str], dict[str, str]] = {}
        self.tokens: set[str] = set()
        self.scopes: list[str] = []  # the scope of each grant, as its assertion asked
        self.refuse_tokens = False  # True: every token is refused (401), as a revoked account's

    # --- scripting ------------------------------------------------------------------------------

    def add(
        self, project: str, zone: str, name: str, instance_id: str, status: str = "RUNNING"
    ) -> None:
        with self.lock:
            self.instances[(project, zone, name)] = {"id": instance_id, "status": status}

    def set_status(self, name: str, status: str) -> None:
        with self.lock:
            for key, vm in self.instances.items():
                if key[2] == name:
                    vm["status"] = status

    def delete(self, name: str) -> None:
        with self.lock:
            self.instances = {k: v for k, v in self.instances.items() if k[2] != name}

    def service_account_file(self, directory: Path) -> Path:
        """A service-account key file whose ``token_uri`` is this fake (a fresh RSA key)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        path = directory / "service-account.json"
        path.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": "portal-test",
                    "private_key_id": "portal-test-key",
                    "private_key": pem,
                    "client_email": "portal-test@portal-test.iam.gserviceaccount.com",
                    "client_id": "1",
                    "token_uri": f"{self.url}{self.TOKEN_PATH}",
                }
            )
        )
        return path

    # --- the service ----------------------------------------------------------------------------

    def respond(self, request: RecordedRequest) -> Reply:
        if request.path == self.TOKEN_PATH:
            return self._grant(request)
        if request.method != "GET":
            return _error(405, "Method Not Allowed")
        parts = request.path.strip("/").split("/")
        shape = ["compute", "v1", "projects", "*", "zones", "*", "instances", "*"]
        if len(parts) != len(shape) or any(
            s not in ("*", p) for s, p in zip(shape, parts, strict=True)
        ):
            return _error(404, "Not Found")
        auth = request.header("authorization") or ""
        with self.lock:
            if self.refuse_tokens or not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
                return _error(401, "Request is missing required authentication credential.")
            project, zone, name = parts[3], parts[5], parts[7]
            vm = self.instances.get((project, zone, name))
            if vm is None:
                return _error(
                    404,
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
                )
            body = {
                "kind": "compute#instance",
                "id": vm["id"],
                "name": name,
                "zone": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}",
                "status": vm["status"],
            }
        return Reply(200, json.dumps(body).encode(), {}, "application/json")

    def _grant(self, request: RecordedRequest) -> Reply:
        form = urllib.parse.parse_qs(request.body.decode())
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            return Reply(400, b'{"error": "unsupported_grant_type"}', {}, "application/json")
        try:
            payload = form["assertion"][0].split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (KeyError, IndexError, ValueError):
            return Reply(400, b'{"error": "invalid_grant"}', {}, "application/json")
        token = "ya29.portal-test-" + secrets.token_urlsafe(16)
        with self.lock:
            self.tokens.add(token)
            self.scopes.append(str(claims.get("scope", "")))
        body = {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}
        return Reply(200, json.dumps(body).encode(), {}, "application/json")


def _error(status: int, message: str) -> Reply:
    body = {"error": {"code": status, "message": message, "errors": [{"message": message}]}}
    return Reply(status, json.dumps(body).encode(), {}, "application/json")
