"""Second-pass variants of issue 8, items 12 and 15: secrets of the same classes in shapes the first
corpus did not hold, and code or prose that names a secret without one. Every credential is FAKE.
"""

from __future__ import annotations

import pytest

from monoagent.testing.redaction_measure import leaks
from monoagent_plugins.observability.redaction import redact_structure, redact_text
from monoagent_plugins.observability.redaction_names import is_secret_name


@pytest.mark.parametrize(
    "text, secret",
    [
        # a secret-named header or key whose qualifier word was missing (Azure API Management)
        ("Ocp-Apim-Subscription-Key: FAKEocp0123456789abcdef", "FAKEocp0123456789abcdef"),
        ('{"subscription_key": "FAKEsub0123456789abcdef"}', "FAKEsub0123456789abcdef"),
        ("SEGMENT_WRITE_KEY=FAKEsegment0123456789", "FAKEsegment0123456789"),
        # name/value pairs written as a tuple or an array (gRPC metadata, header lists, HAR)
        ("metadata = [('x-api-key', 'FAKEgrpckey0123456789'), ('x-request-id', 'abc')]", "FAKEgrpckey0123456789"),
        ('headers: [["X-Auth-Token", "FAKEarraytok0123456789"], ["Accept", "text/plain"]]', "FAKEarraytok0123456789"),
        ("[('authorization', 'Basic RkFLRXVzZXI6RkFLRXBhc3M=')]", "RkFLRXVzZXI6RkFLRXBhc3M="),
        # private-key blocks in PuTTY's format
        (
            "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: k\nPublic-Lines: 1\nAAAAC3NzaC1lZDI1NTE5\n"
            "Private-Lines: 2\r\nAAAAIFAKEFAKEprivate0123456789abcdefgh\r\nFAKEFAKEprivate0123456789abcdefghij\r\n"
            "Private-MAC: deadbeef0123456789\n",
            "AAAAIFAKEFAKEprivate0123456789abcdefgh",
        ),
        # command lines that take a password
        ("ldapsearch -x -D 'cn=admin,dc=ex,dc=com' -w FAKEldap0123 -H ldap://ldap", "FAKEldap0123"),
        ("ldapmodify -D cn=admin -w 'FAKE ldap pw' -f x.ldif", "FAKE ldap pw"),
        ("htpasswd -b -c .htpasswd admin FAKEhtpw0123", "FAKEhtpw0123"),
        ("$p = ConvertTo-SecureString 'FAKEpsplain0123' -AsPlainText -Force", "FAKEpsplain0123"),
        ("jdbc:oracle:thin:scott/FAKEtiger0123@db.example.com:1521:orcl", "FAKEtiger0123"),
        ("sqlplus system/FAKEsqlplus0123@//db:1521/XE", "FAKEsqlplus0123"),
        # a vendor's live key of the sk_live_ family, vendor unknown
        ("use xyz_live_FAKE51Hq2Kx9zPqR7sT0uVw here", "xyz_live_FAKE51Hq2Kx9zPqR7sT0uVw"),
        # a Kubernetes Secret: every value under data/stringData is secret, whatever its key
        (
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n"
            "  DATABASE_URL: cG9zdGdyZXM6Ly9hZG1pbjpGQUtFcHdAZGIvYXBw\n  username: YWRtaW4=\n",
            "cG9zdGdyZXM6Ly9hZG1pbjpGQUtFcHdAZGIvYXBw",
        ),
        ("kind: Secret\nstringData:\n  config.yaml: 'FAKEstringdata0123456789'\n", "FAKEstringdata0123456789"),
        (
            '{"apiVersion": "v1", "kind": "Secret", "data": {"DATABASE_URL": "cG9zdGdyZXM6Ly9GQUtFQGRi"}}',
            "cG9zdGdyZXM6Ly9GQUtFQGRi",
        ),
    ],
)
def test_secrets_of_known_classes_in_new_shapes_are_redacted(text, secret):
    out = redact_text(text)
    assert not leaks(secret, text, out), out
    assert "[REDACTED:" in out


@pytest.mark.parametrize("name", ["Ocp-Apim-Subscription-Key", "subscriptionKey", "writeKey", "INGESTION_KEY"])
def test_more_key_qualifiers_name_secrets(name):
    assert is_secret_name(name)
    assert redact_structure({name: "FAKE0123456789"}) == {name: "[REDACTED:secret_value]"}


@pytest.mark.parametrize(
    "text",
    [
        # code that names a secret and computes it: no value in sight
        "const token = await getToken();",
        "let secret = new SecretClient(vault, credential);",
        "api_key = yield from fetch_key()",
        "headers.Authorization = `Bearer ${token}`;",
        "headers['Authorization'] = f'Bearer {token}'",
        # documentation of a header with a placeholder
        "Use `Authorization: Bearer <token>` in every request.",
        "Send `X-Api-Key: <your key>` with each call.",
        # near misses of the new rules
        "metadata = [('x-request-id', 'abc123'), ('user-agent', 'grpc-python/1.60')]",
        "kind: ConfigMap\ndata:\n  LOG_LEVEL: debug\n  REGION: eu-west-1\n",
        "kind: Secret\nmetadata:\n  name: db\ntype: Opaque\n",
        "is_live_streaming_enabled = True",
        "the pk_live_ prefix marks a publishable key",
        "Private-Lines: see the PuTTY documentation",
        "jdbc:oracle:thin:@db.example.com:1521:orcl",
        "the primary_key column and the sort key",
    ],
)
def test_code_and_prose_that_name_secrets_without_values_are_unchanged(text):
    assert redact_text(text) == text


def test_structured_arguments_lose_the_same_values_as_text():
    """The tool-history sidecar redacts arguments structurally: the same classes hold there."""
    manifest = {"apiVersion": "v1", "kind": "Secret", "data": {"DATABASE_URL": "cG9zdGdyZXM6Ly9GQUtFQGRi"}, "type": "Opaque"}
    assert redact_structure(manifest)["data"] == {"DATABASE_URL": "[REDACTED:secret_value]"}
    pairs = {"metadata": [["x-api-key", "FAKEgrpckey0123456789"], ["x-request-id", "abc"]]}
    assert redact_structure(pairs) == {"metadata": [["x-api-key", "[REDACTED:secret_value]"], ["x-request-id", "abc"]]}
    config_map = {"kind": "ConfigMap", "data": {"LOG_LEVEL": "debug"}}
    assert redact_structure(config_map) == config_map
