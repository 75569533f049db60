"""`portal server --tls-cert --tls-key` serves https (uvicorn's TLS, nothing hand-written), and
the CLI checks the server's certificate: against the system's CAs, or the CA that
PORTAL_CONTROL_CA names. A certificate it does not trust, and a bad certificate/key pair, are told
with the way out."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from conftest import run_portal as portal
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from portal.server.testing import running_server


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Key identifiers: Python 3.13's default context checks strictly (VERIFY_X509_STRICT)
        # and refuses a chain without them ("Missing Authority Key Identifier").
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if ca:
        usage = x509.KeyUsage(
            digital_signature=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=True,
            crl_sign=True,
            encipher_only=False,
            decipher_only=False,
        )
        builder = builder.add_extension(usage, critical=True)
    else:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A private CA, a server certificate for 127.0.0.1 it signed, and a key that is not the
    certificate's."""
    ca_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = _certificate("Portal test CA", ca_key, "Portal test CA", ca_key, ca=True)
    server = _certificate("127.0.0.1", server_key, "Portal test CA", ca_key, ca=False)
    files = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "server.pem",
        "key": tmp_path / "server.key",
        "other_key": tmp_path / "other.key",
    }
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(_pem_key(server_key))
    files["other_key"].write_bytes(_pem_key(ec.generate_private_key(ec.SECP256R1())))
    return files


def test_the_server_serves_https_and_the_cli_checks_its_certificate(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    tls = ("--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]))
    with running_server("sqlite", home=tmp_path / "server", args=tls) as server:
        assert server.url.startswith("https://127.0.0.1:")
        env = server.env()
        trusted = portal(tmp_path / "a", "jobs", env={**env, "PORTAL_CONTROL_CA": str(pki["ca"])})
        assert trusted.returncode == 0, trusted.stderr

        untrusted = portal(tmp_path / "b", "jobs", env=env)
        assert untrusted.returncode == 69, untrusted.stderr
        assert "has a certificate this machine does not trust" in untrusted.stderr
        assert "set PORTAL_CONTROL_CA" in untrusted.stderr
        assert "Traceback" not in untrusted.stderr

        plain = portal(
            tmp_path / "c",
            "jobs",
            env={**env, "PORTAL_CONTROL_PLANE": server.url.replace("https", "http")},
        )
        assert plain.returncode == 69 and "Traceback" not in plain.stderr  # no http on it

    missing = portal(
        tmp_path / "d", "jobs", env={**env, "PORTAL_CONTROL_CA": str(tmp_path / "none.pem")}
    )
    assert missing.returncode == 64, missing.stderr
    assert (
        "control_ca names" in missing.stderr and "not a readable CA certificate" in missing.stderr
    )


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--tls-cert", "cert"), "--tls-cert was given without --tls-key"),
        (("--tls-key", "key"), "--tls-key was given without --tls-cert"),
        (("--tls-cert", "cert", "--tls-key", "other_key"), "cannot serve https"),
        (("--tls-cert", "ca.missing", "--tls-key", "key"), "cannot serve https"),
    ],
)
def test_a_bad_certificate_or_key_is_refused_before_the_server_starts(
    tmp_path: Path, pki: dict[str, Path], flags: tuple[str, ...], words: str
) -> None:
    home = tmp_path / "server"
    assert portal(home, "server", "token", "create", "alice").returncode == 0
    args = [str(pki.get(f, tmp_path / f)) if not f.startswith("--") else f for f in flags]
    started = portal(home, "server", "--port", "0", *args)
    assert started.returncode == 64, started.stderr
    assert words in started.stderr and "Traceback" not in started.stderr
