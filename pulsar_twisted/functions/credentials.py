"""
The credentials function and connector instances connect with, as Pulsar gives them: the
worker's ``clientAuthenticationPlugin`` / ``clientAuthenticationParameters`` (the embedded
worker of a standalone: the broker's ``brokerClientAuthentication*``) and, for ``pulsar+ssl://``
service URLs, ``tlsTrustCertsFilePath`` / ``tlsAllowInsecureConnection``.

The worker puts them in each instance spec (``instance_spec_fields``), written readable by its
owner only (``write_spec``: the spec holds a secret). The instance process builds the official
client's plugin from them (``official_client_options``) and sends the ``Authorization`` header
of the same credentials on its HTTP calls to the worker (``http_headers``: state, schemas).
"""

import json
import os

from pulsar_twisted.client.auth import BASIC_PLUGINS, TOKEN_PLUGINS, from_plugin
from pulsar_twisted.client.http_lookup import authorization_header

PLUGIN, PARAMETERS = "clientAuthenticationPlugin", "clientAuthenticationParameters"
TLS_TRUST, TLS_INSECURE = "tlsTrustCertsFilePath", "tlsAllowInsecureConnection"


def instance_spec_fields(plugin: str = "", parameters: str = "", tls_trust_certs: str = "",
                         tls_allow_insecure: bool = False) -> dict:
    """The spec entries of the instances' credentials (empty when there are none); ValueError
    when the plugin or its parameters are malformed (checked here, at the worker's start)."""
    fields = {}
    if plugin:
        from_plugin(plugin, parameters)
        fields.update({PLUGIN: plugin, PARAMETERS: parameters or ""})
    if tls_trust_certs:
        fields[TLS_TRUST] = tls_trust_certs
    if tls_allow_insecure:
        fields[TLS_INSECURE] = True
    return fields


def write_spec(path: str, spec: dict) -> None:
    """``spec`` as JSON at ``path``, mode 0600 (also when the file was there before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        json.dump(spec, f)


def _credentials(spec: dict):
    try:
        return from_plugin(spec.get(PLUGIN) or "", spec.get(PARAMETERS) or "")
    except ValueError as e:
        raise ValueError(f"{PLUGIN}/{PARAMETERS}: {e}") from None


def official_client_options(spec: dict, pulsar) -> dict:
    """The keyword arguments of ``pulsar.Client(service_url, ...)`` (module ``pulsar``) that
    carry the spec's credentials and TLS trust."""
    options = {}
    plugin = spec.get(PLUGIN) or ""
    credentials = _credentials(spec)
    if plugin in TOKEN_PLUGINS:
        # A callable: a file:///path token is read again when the client needs it.
        options["authentication"] = pulsar.AuthenticationToken(
            lambda: credentials.auth_data().decode())
    elif plugin in BASIC_PLUGINS:
        values = json.loads(spec[PARAMETERS])
        options["authentication"] = pulsar.AuthenticationBasic(values["userId"], values["password"])
    if spec.get(TLS_TRUST):
        options["tls_trust_certs_file_path"] = spec[TLS_TRUST]
    if spec.get(TLS_INSECURE):
        options["tls_allow_insecure_connection"] = True
    return options


def http_headers(spec: dict) -> dict:
    """``{"Authorization": ...}`` for the instance's HTTP calls to the worker ({} without)."""
    value = authorization_header(_credentials(spec))
    return {} if value is None else {"Authorization": value.decode()}


def add_localrun_flags(parser) -> None:
    """Pulsar's ``localrun`` flags for the instances' credentials and TLS trust."""
    parser.add_argument("--client-auth-plugin", default="",
                        help="Authentication plugin the instances connect with (AuthenticationToken, "
                             "AuthenticationBasic)")
    parser.add_argument("--client-auth-params", default="",
                        help="Its parameters (token:<jwt>, file:///path, or basic's JSON)")
    parser.add_argument("--tls-trust-cert-path", default="",
                        help="PEM CA certificate for pulsar+ssl:// service URLs")
    parser.add_argument("--tls-allow-insecure", action="store_true",
                        help="Accept an untrusted TLS certificate from the broker")


def localrun_spec_fields(args) -> dict:
    """The spec entries of ``add_localrun_flags``'s flags; ValueError when malformed."""
    return instance_spec_fields(args.client_auth_plugin, args.client_auth_params,
                                args.tls_trust_cert_path, args.tls_allow_insecure)
