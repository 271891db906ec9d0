"""
Throw-away certificate authorities and certificates for TLS tests, made with ``cryptography`` at
run time (nothing secret is checked in).

    pki = TestPKI(directory)                 # a CA: pki.ca_cert (PEM path)
    server = pki.issue("server", hosts=["127.0.0.1", "localhost"])   # .cert, .key paths
    client = pki.issue("admin-role", client=True)                    # CN = role

Keys are EC P-256 (fast to make); certificates last a day.
"""

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    """PEM files of one certificate and its key."""

    cert: str
    key: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class TestPKI:
    """A CA in ``directory`` (files ``<name>-ca.pem``), issuing server and client certificates."""

    def __init__(self, directory: str, name: str = "test"):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.name = name
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.ca_certificate = (
            x509.CertificateBuilder().subject_name(_name(f"{name} CA")).issuer_name(_name(f"{name} CA"))
            .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self.ca_key, hashes.SHA256()))
        self.ca_cert = _write(os.path.join(directory, f"{name}-ca.pem"),
                              self.ca_certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, hosts=(), client: bool = False, days: float = 1) -> Issued:
        """A certificate for ``common_name`` (SAN ``hosts``: IPs or DNS names) signed by the CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name))
            .issuer_name(self.ca_certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
                critical=False))
        names = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.ca_key, hashes.SHA256())
        stem = os.path.join(self.directory, f"{self.name}-{common_name}")
        return Issued(_write(stem + ".cert.pem", certificate.public_bytes(serialization.Encoding.PEM)),
                      _write(stem + ".key.pem", _key_pem(key)))
