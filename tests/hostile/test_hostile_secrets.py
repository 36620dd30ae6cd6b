"""Hostile-input regressions for the redactor (issue 8, items 12 and 15) and its measured recall and precision.

Item 12: secrets the redactor let through into the tool-history database, continuity accounts and
``run_failed`` events (secret-named keys by normalised name, header values, URL passwords holding
``@``, quoted pass phrases, ``mysql -pPASS``, Slack ``xapp-`` tokens). Item 15: the path heuristic
turned JSON escapes (``"\\tTabbed"``, ``\\nexport``) and closing tags (``</html>``) into ``<root:…>``
tokens. Every credential here is FAKE.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import sqlite3
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monoagent._kernel.errors import ProviderError
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.model import ToolSpec
from monoagent.testing import collect_events, scripted_agent
from monoagent.testing.redaction_measure import leaks, measure_redactor
from monoagent_plugins.history.tool_calls.sidecar import SIDECAR
from monoagent_plugins.observability.redaction import redact_structure, redact_text
from monoagent_plugins.observability.redaction_names import is_secret_name

DATA = Path(__file__).resolve().parent.parent / "data"
RECALL = json.loads((DATA / "redaction_recall.json").read_text(encoding="utf-8"))["entries"]
PRECISION = json.loads((DATA / "redaction_precision.json").read_text(encoding="utf-8"))["entries"]

# The figures docs/security.md reports, held as floors (measured: recall 287/287, 0 of 134 changed).
RECALL_FLOOR = 0.97
FALSE_POSITIVE_CEILING = 0.02

# Deterministic by default; HOSTILE_EXAMPLES=5000 explores that many random examples instead.
HYPOTHESIS = settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "200")),
    derandomize=not os.environ.get("HOSTILE_EXAMPLES"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PASSWORD_CHARS = string.ascii_letters + string.digits + "!#%^*()-_+=[]{}~.,@:/$&?"


def gone(secret: str, text: str) -> bool:
    return not leaks(secret, text, redact_text(text))


# --------------------------------------------------------------------------- item 12: the reported misses


@pytest.mark.parametrize(
    "text, secret",
    [
        ('{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEFAKEKEY"}', "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEFAKEKEY"),
        ('{"SecretAccessKey": "FAKEsecretAccessKeyValue0123456789abcdef"}', "FAKEsecretAccessKeyValue0123456789abcdef"),
        ('{"secret_key": "FAKE-django-insecure-0123456789"}', "FAKE-django-insecure-0123456789"),
        ('{"signing_key": "FAKEsigningKey0123456789"}', "FAKEsigningKey0123456789"),
        ('{"passphrase": "fake correct horse battery"}', "fake correct horse battery"),
        ("SECRET_KEY = 'FAKE-0123456789abcdef'", "FAKE-0123456789abcdef"),
        ("JWT_SIGNING_KEY=FAKEjwtSigning0123456789", "FAKEjwtSigning0123456789"),
        ("export SLACK_APP=xapp-1-A0FAKE0000-1234567890123-deadbeef0123456789abcdef", "xapp-1-A0FAKE0000-1234567890123-deadbeef0123456789abcdef"),
        ("Authorization: token FAKEghToken0123456789abcdef", "FAKEghToken0123456789abcdef"),
        ("Cookie: session=FAKEsession0123456789; theme=dark", "session=FAKEsession0123456789; theme=dark"),
        ("passphrase: fake correct horse battery staple", "fake correct horse battery staple"),
        ('PASSPHRASE="fake correct horse battery staple"', "fake correct horse battery staple"),
        ("mysql -u root -pFAKEmysqlPass1 app", "FAKEmysqlPass1"),
        ("postgres://app:FAKE@pass@word@db.internal:5432/app", "FAKE@pass@word"),
        ("GPG_PASSPHRASE=fake correct horse battery staple", "fake correct horse battery staple"),
        ("headers = dict(authorization='Bearer FAKEinline0123456789')", "FAKEinline0123456789"),
        ("x?authorization=token%20FAKEquery0123&y=1", "token%20FAKEquery0123"),
        ("postgres://app:FAKE/slash@pw@db.internal/app", "FAKE/slash@pw"),
        ("Secret access key: FAKEsecretAccess0123/+x\nRegion: eu", "FAKEsecretAccess0123/+x"),
    ],
)
def test_the_reported_misses_are_redacted(text, secret):
    out = redact_text(text)
    assert not leaks(secret, text, out), out
    assert "[REDACTED:" in out


SECRET_NAMES = [
    "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "SecretAccessKey", "secretAccessKey", "secret-access-key",
    "secret_key", "SECRET_KEY", "secretKey", "signing_key", "SigningKey", "JWT_SIGNING_KEY", "jwt.signing.key",
    "passphrase", "PASSPHRASE", "pass_phrase", "keyPassphrase", "password", "PGPASSWORD", "db-password",
    "spring.datasource.password", "MYSQL_PWD", "DB_PASS", "api_key", "apiKey", "X-Api-Key", "APIKEY",
    "client_secret", "clientSecret", "GITHUB_TOKEN", "accessToken", "id_token", "_authToken", "auth",
    "private_key", "PrivateKey", "encryption_key", "master_key", "secret_key_base", "credentials", "webhook_secret",
]
NOT_SECRET_NAMES = [
    "max_tokens", "token_type", "eos_token", "next_page_token", "token_count", "tokens", "secret_name", "secretName",
    "secrets", "password_policy", "password_min_length", "primary_key", "public_key", "key", "cache_key", "apiKeyEnv",
    "password_hash", "session_id", "keyboard", "monkey", "author", "tokenizer", "passthrough", "bypass",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_named_keys_are_recognised_by_their_normalised_name(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRET_NAMES)
def test_names_that_only_mention_a_secret_word_are_not_secret(name):
    assert not is_secret_name(name)


SYNTAXES = [
    '{{"{k}": "{v}"}}',  # JSON
    "{k}={v}",  # env file
    "export {k}='{v}'",  # shell
    "{k}: {v}",  # YAML, at the start of a line
    "  {k}: \"{v}\"",  # YAML, quoted and indented
    '{k} = "{v}"',  # TOML
    "[section]\n{k} = {v}\n",  # INI
    "tool --{k} {v} --verbose",  # CLI flag
    "tool --{k}={v}",  # CLI flag with =
    "https://api.example.com/x?{k}={v}&page=2",  # query parameter
    "cfg[\"{k}\"] = '{v}'",  # Python / PHP subscript
    "<{k}>{v}</{k}>",  # XML element
    "new({k}: \"{v}\")",  # keyword argument
]


@pytest.mark.parametrize("syntax", SYNTAXES)
@pytest.mark.parametrize("name", ["aws_secret_access_key", "SecretAccessKey", "JWT_SIGNING_KEY", "passphrase", "x-api-key"])
def test_secret_named_keys_lose_their_values_in_every_syntax(syntax, name):
    value = "FAKEv4lue0123456789xyz"
    text = syntax.format(k=name, v=value)
    assert gone(value, text), redact_text(text)


@pytest.mark.parametrize("syntax", SYNTAXES)
@pytest.mark.parametrize("name", ["max_tokens", "token_type", "secret_name", "password_policy"])
def test_keys_that_are_not_secret_keep_their_values(syntax, name):
    text = syntax.format(k=name, v="ordinary-value-42")
    assert redact_text(text) == text


_WORD = st.sampled_from(["db", "app", "my", "aws", "prod", "github", "slack", "jwt", "app_config", "service"])
_SECRET_TAIL = st.sampled_from(
    [["password"], ["passwd"], ["passphrase"], ["secret"], ["token"], ["api", "key"], ["secret", "key"],
     ["secret", "access", "key"], ["signing", "key"], ["private", "key"], ["client", "secret"], ["access", "token"],
     ["auth", "token"], ["credentials"], ["encryption", "key"]]
)


def _spell(words: list[str], style: str) -> str:
    if style == "snake":
        return "_".join(words)
    if style == "upper":
        return "_".join(words).upper()
    if style == "kebab":
        return "-".join(words)
    if style == "dotted":
        return ".".join(words)
    if style == "pascal":
        return "".join(w.capitalize() for w in words)
    return words[0] + "".join(w.capitalize() for w in words[1:])  # camel


@HYPOTHESIS
@given(
    prefix=st.lists(_WORD, max_size=2),
    tail=_SECRET_TAIL,
    style=st.sampled_from(["snake", "upper", "kebab", "dotted", "pascal", "camel"]),
    syntax=st.sampled_from(SYNTAXES),
    value=st.text(alphabet=string.ascii_letters + string.digits + "+/=_-!%", min_size=10, max_size=40).map(lambda v: "Q9" + v),
)
def test_property_any_spelling_of_a_secret_name_in_any_syntax_loses_its_value(prefix, tail, style, syntax, value):
    name = _spell([w for p in prefix for w in p.split("_")] + tail, style)
    assert is_secret_name(name), name
    text = syntax.format(k=name, v=value)
    assert gone(value, text), (text, redact_text(text))
    assert redact_structure({name: value}) == {name: "[REDACTED:secret_value]"}


@HYPOTHESIS
@given(
    quote=st.sampled_from(['"', "'", '"""', "'''", "`"]),
    words=st.lists(st.text(alphabet=string.ascii_letters + string.digits + "!#%-_.", min_size=3, max_size=10), min_size=2, max_size=6),
    syntax=st.sampled_from(["{k} = {q}{v}{q}", "{k}: {q}{v}{q}", "{k}={q}{v}{q}", '{{"{k}": {q}{v}{q}}}', "f({k}={q}{v}{q})"]),
    name=st.sampled_from(["password", "passphrase", "SECRET_KEY", "api_key", "clientSecret"]),
)
def test_property_quoted_values_go_whole(quote, words, syntax, name):
    value = "FAKE " + " ".join(words)
    text = syntax.format(k=name, q=quote, v=value)
    out = redact_text(text)
    assert not leaks(value, text, out), out
    visible = re.sub(r"\[REDACTED:[a-z0-9_]+\]", "", out)
    assert all(word not in visible for word in words if word not in text.replace(value, "")), out


@HYPOTHESIS
@given(
    header=st.sampled_from(["Authorization", "authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "X-Auth-Token", "PRIVATE-TOKEN"]),
    scheme=st.sampled_from(["Bearer", "token", "Basic", "SSWS", "Api-Key", "Digest", ""]),
    credential=st.lists(st.text(alphabet=string.ascii_letters + string.digits + "=;,_-.~+/", min_size=4, max_size=24), min_size=1, max_size=4).map(" ".join),
    frame=st.sampled_from(["{h}: {s}{c}\nnext: line", "curl -H '{h}: {s}{c}' https://x.example", 'curl -H "{h}: {s}{c}" x', '{{"{h}": "{s}{c}"}}']),
)
def test_property_header_values_go_whole(header, scheme, credential, frame):
    credential = "FAKE" + credential
    text = frame.format(h=header, s=f"{scheme} " if scheme else "", c=credential)
    out = redact_text(text)
    assert not leaks(credential, text, out), out
    assert "next: line" in out if "next: line" in text else True


@HYPOTHESIS
@given(
    scheme=st.sampled_from(["postgres", "postgresql", "mysql", "mongodb+srv", "redis", "amqp", "https", "ftp", "smtp"]),
    user=st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=12),
    password=st.text(alphabet=string.ascii_letters + string.digits + "@:%!$&*+=~;,", min_size=1, max_size=24),
    host=st.sampled_from(["db.internal", "127.0.0.1:5432", "cluster0.fake.example.net", "[::1]:6379"]),
    tail=st.sampled_from(["", "/app", "/app?sslmode=require", "/0"]),
)
def test_property_url_passwords_go_whole_whatever_they_hold(scheme, user, password, host, tail):
    password = "FAKE" + password
    url = f"{scheme}://{user}:{password}@{host}{tail}"
    out = redact_text(f"DATABASE_URL={url} ")
    assert not leaks(password, url, out), out
    assert f"@{host}" in out


@pytest.mark.parametrize(
    "text, secret",
    [
        ("mysql -uroot -p'FAKE pass word' -e 'select 1'", "FAKE pass word"),
        ("mysqldump --user=root -pFAKEdump99 shop > shop.sql", "FAKEdump99"),
        ("sshpass -p FAKEssh99 ssh deploy@host", "FAKEssh99"),
        ("redis-cli -a FAKEredis99 ping", "FAKEredis99"),
        ("docker login -u ci -p FAKEdocker99 registry.example.com", "FAKEdocker99"),
        ("openssl rsa -in k.pem -passin pass:FAKEopenssl99", "FAKEopenssl99"),
        ("curl -u admin:FAKEcurl99 https://x.example", "FAKEcurl99"),
        ("curl --cookie 'sid=FAKEcookie99' https://x.example", "sid=FAKEcookie99"),
    ],
)
def test_command_line_credentials_are_redacted(text, secret):
    assert gone(secret, text), redact_text(text)


def test_structures_redact_values_under_secret_names_including_numbers_and_keep_placeholders():
    value = {"SecretAccessKey": "FAKE0123456789", "signingKey": 987654321, "password": "${DB_PASSWORD}",
             "max_tokens": 4096, "nested": {"db": {"passphrase": "fake horse battery"}},
             "api_keys_by_env": {"prod": {"api_key": ["FAKEkey1", "FAKEkey2", None]}},
             "env": [{"name": "DB_PASSWORD", "value": "FAKEpair123"}, {"name": "REGION", "value": "eu"}]}
    out = redact_structure(value)
    assert out["SecretAccessKey"] == out["signingKey"] == out["nested"]["db"]["passphrase"] == "[REDACTED:secret_value]"
    assert out["api_keys_by_env"]["prod"]["api_key"] == ["[REDACTED:secret_value]", "[REDACTED:secret_value]", None]
    assert out["env"] == [{"name": "DB_PASSWORD", "value": "[REDACTED:secret_value]"}, {"name": "REGION", "value": "eu"}]
    assert out["password"] == "${DB_PASSWORD}" and out["max_tokens"] == 4096


def test_a_json_number_under_a_secret_key_stays_json():
    out = redact_text('{"signing_key": 12345678, "n": 1}')
    assert json.loads(out) == {"signing_key": "[REDACTED:secret_assignment]", "n": 1}


class SecretTool:
    @hookimpl
    def register_tools(self, register):
        async def deploy(context):
            return "Cookie: session=FAKEresultCookie0123; theme=dark\nAuthorization: token FAKEresultToken0123"

        register(ToolSpec("deploy", "Deploy."), deploy)


LEAKS_IN_ARGUMENTS = {
    "aws_secret_access_key": "FAKEargAwsSecret0123456789",
    "config": "SECRET_KEY = 'FAKEargSecretKey0123'\npassphrase: fake argument horse battery",
    "dsn": "postgres://app:FAKE@argPass@db.internal/app",
    "cmd": "mysql -uroot -pFAKEargMysql0123 app",
}


def test_no_reported_secret_reaches_the_tool_history_database_the_account_or_run_failed(tmp_path):
    """Through the real stores: the SQLite sidecar's bytes, the continuity account and the event stream."""
    steps = [
        {"tool_calls": [{"name": "deploy", "arguments": LEAKS_IN_ARGUMENTS}]},
        {"error": "upstream rejected JWT_SIGNING_KEY=FAKEerrSigning0123 and Authorization: token FAKEerrToken0123"},
    ]
    events: list = []
    agent = scripted_agent(tmp_path, steps, config={"providers": {"client": {"maxRetries": 0}}}, plugins=[SecretTool()])
    with pytest.raises(ProviderError):
        agent.run_sync("deploy it", conversation_id="c", on_event=collect_events(events))
    asyncio.run(agent.tool_history_store().flush())
    messages = asyncio.run(agent.history_store.load("c"))
    agent.close()
    database = b"".join(p.read_bytes() for p in (agent.config.history_dir / SIDECAR).parent.glob("*"))
    with contextlib.closing(sqlite3.connect(agent.config.history_dir / SIDECAR)) as db:
        rows = db.execute("SELECT * FROM calls").fetchall()
    stored = json.dumps(rows)
    account = "\n".join(m.content for m in messages)
    failed = json.dumps([e.data for e in events if e.type == "run_failed"])
    assert len(rows) == 1 and "deploy" in account  # the call was recorded, and accounted for
    for needle in ("FAKEargAwsSecret", "FAKEargSecretKey", "argument horse battery", "argPass", "FAKEargMysql",
                   "FAKEresultCookie", "FAKEresultToken", "FAKEerrSigning", "FAKEerrToken"):
        for where, text in (("database", stored), ("database file", database.decode("utf-8", "replace")), ("account", account), ("run_failed", failed)):
            assert needle not in text, f"{needle} in the {where}"
    assert "[REDACTED:" in stored and "[REDACTED:" in account and "[REDACTED:" in failed


# --------------------------------------------------------------------------- item 15: the path heuristic


@pytest.mark.parametrize(
    "text",
    [
        '{"text": "\\tTabbed"}',
        '{"html": "</html>", "tail": "</body></html>"}',
        '{"script": "set -e\\nexport PATH=x\\n"}',
        '{"a": "\\\\network\\\\share is not UNC here", "b": "\\\\d+"}',
        '{"html": "<p>x<\\/p><br\\/>", "url": "https:\\/\\/example.com\\/a\\/b"}',
        "<html><body><h1>Hi</h1></body></html>",
        "<svg><path d=\"M1 2\"/></svg>",
        "type /help, /reset or /model; GET /api/v1/users/42 returned 200",
        "app.get('/api/v1/users/:id', handler)",
        "a/b, /a/b and /x/y/z are not filesystem paths; nor is /app/config",
    ],
)
def test_json_escapes_markup_and_routes_are_not_paths(text):
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "text, hidden, kept",
    [
        (json.dumps({"path": "C:\\Users\\carol\\proj\\notes.txt"}), ["carol"], "proj/notes.txt"),
        (json.dumps({"path": "/home/alice/proj/notes.txt"}).replace("/", "\\/"), ["alice"], "proj/notes.txt"),
        (json.dumps({"path": "\\\\fileserver\\share\\team\\plan.md"}), ["fileserver"], "team/plan.md"),
        (json.dumps({"text": "see /home/alice/proj/notes.txt\nthen run"}), ["alice"], "proj/notes.txt\\nthen run"),
        (json.dumps({"text": "\tC:\\Users\\dave\\x.txt"}), ["dave"], "\\t<root:"),
        ("cat ~/.ssh/id_ed25519 /etc/hosts", [".ssh", "id_ed25519"], "/hosts"),
        ("cd /c/Users/alice/proj/src && ls", ["alice"], "proj/src"),
        ("python /srv/builds/alice/run.py", ["/srv/builds"], "alice/run.py"),
    ],
)
def test_real_paths_are_still_tokenised_json_escaped_or_not(text, hidden, kept):
    out = redact_text(text)
    assert "<root:" in out and kept in out, out
    assert all(h not in out for h in hidden), out


_ESCAPED_TEXT = st.lists(
    st.one_of(
        st.sampled_from(["\t", "\n", "\r", "\\", "/", "</html>", "</div>", "<br/>", "\\n", "\\t", " ", "export", "Tabbed",
                         "notes", "a/b", "3/4", "and/or", "</", "/>", "<", ">", "\"", "'"]),
        st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8),
    ),
    max_size=24,
).map("".join)


@HYPOTHESIS
@given(content=_ESCAPED_TEXT, key=st.sampled_from(["text", "content", "html", "body"]))
def test_property_json_encoded_text_without_paths_comes_back_unchanged(content, key):
    for text in (json.dumps({key: content}), json.dumps({key: content}, ensure_ascii=False)):
        if "/home" in text or "/Users" in text:
            continue
        assert redact_text(text) == text
        assert redact_structure(json.loads(text)) == json.loads(text)


# --------------------------------------------------------------------------- recall and precision


def test_the_corpora_are_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("make_redaction_corpora", DATA / "make_redaction_corpora.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, text in module.render().items():
        assert (DATA / name).read_text(encoding="utf-8") == text, f"{name} is stale: run python tests/data/make_redaction_corpora.py"


def test_the_recall_corpus_is_at_least_200_secrets_of_40_kinds():
    assert len(RECALL) >= 200 and len({row["kind"] for row in RECALL}) >= 40
    assert all(row["secret"] in row["text"] for row in RECALL)


def test_recall_and_precision_hold_their_floors():
    measure = measure_redactor(redact_text, RECALL, PRECISION)
    missed = [row["kind"] for row in measure.missed]
    changed = [(row["kind"], out) for row, out in measure.changed]
    assert measure.recall >= RECALL_FLOOR, missed
    assert measure.false_positive_rate <= FALSE_POSITIVE_CEILING, changed


def test_the_hook_chain_redacts_the_corpus_like_the_default(tmp_path):
    agent = scripted_agent(tmp_path, [{"text": "x"}])
    measure = measure_redactor(lambda text: agent.redact(text, "tool_result"), RECALL, PRECISION)
    agent.close()
    assert measure.recall >= RECALL_FLOOR and measure.false_positive_rate <= FALSE_POSITIVE_CEILING
