"""The default redactor's secret rules: token formats and context rules (:func:`redact_secrets`).

Secrets become ``[REDACTED:<kind>]``. Two kinds of rule find them:

* **Token formats**: credentials whose shape names them: API keys of the model providers
  (Anthropic, OpenAI, Google, Groq, xAI, Hugging Face, Replicate), cloud keys (AWS, Azure,
  DigitalOcean), VCS and CI tokens (GitHub, GitLab, Docker Hub, npm, PyPI, Terraform Cloud,
  Vault, Pulumi, Doppler, Databricks, Grafana, Postman), chat tokens (Slack bot, user, app and
  config tokens, Discord, Telegram), payment keys (Stripe, Square, Braintree), mail and SaaS
  keys (SendGrid, Mailgun, Mailchimp, Twilio, New Relic, Linear, Notion, Atlassian, Shopify,
  Firebase), JWTs, age keys and private-key blocks. The whole token goes.
* **Context rules**, for secrets that have no shape of their own:

  - a value under a *secret-named key*, recognised by the normalised name: ``aws_secret_access_key``,
    ``SecretAccessKey``, ``JWT_SIGNING_KEY``, ``x-api-key``, ``PGPASSWORD`` and ``passphrase`` all
    split into words (camelCase, snake_case, kebab-case, dots, upper case) and name a secret when
    the last word is a secret noun (password, passphrase, secret, token, credentials, cookie,
    auth, ...) or the last two say which key (api/access/secret/signing/private/encryption/...
    key); ``max_tokens``, ``token_type``, ``eos_token``, ``secret_name``, ``primary key`` and
    ``apiKeyEnv`` do not. The key may be written as a JSON or Python key, an environment or
    shell assignment, YAML, TOML, INI or properties, an XML element, a command-line flag
    (``--password x``, ``--api-key=x``), a header, a query parameter, a line's label
    (``Secret access key: ...``) or a name/value pair (``- name: DB_PASSWORD`` / ``value: ...``,
    ``<add key="ApiKey" value="..."/>``);
  - the value is taken whole: a quoted value to its closing quote (single, double, triple and
    backtick quotes, escapes honoured), a header value to the end of its line or string, an
    unquoted value at the start of a line (YAML, INI, ``.env``, ``Password: ...``) to the end of
    the line, a YAML block scalar (``key: |``) with its indented lines, so pass phrases with
    spaces go whole;
  - what is plainly not a value stays: references (``$DB_PASSWORD``, ``${{ secrets.X }}``,
    ``os.environ[...]``, ``settings.DB_PASSWORD``, ``var.db_password``), placeholders
    (``<your-api-key>``, ``***``, ``{{ password }}``), ``null``/``true``/empty, type annotations
    (``password: str``) and, in code, a variable passed along (``password=password``);
  - ``Authorization``/``Proxy-Authorization`` keep their scheme word and lose the rest,
    ``Cookie``/``Set-Cookie`` lose their whole value;
  - credentials in URLs are found by parsing the authority as a URL does (the user information
    ends at the *last* ``@``), so a password holding ``@``, ``:``, percent-escapes (or a raw
    ``/``, which a parser would not accept) goes whole, and a token used as the whole user
    information (``https://<token>@host``) goes too;
  - command lines: ``curl -u user:pw``, ``mysql -pPW``, ``sshpass -p PW``, ``redis-cli -a PW``,
    ``docker login -p PW``, ``openssl ... pass:PW``, ``smbclient -U user%PW``, ``.netrc`` lines.

What counts as a secret-named key and as a value (rather than a reference, a placeholder or
code) is :mod:`monoagent_plugins.observability.redaction_names`.
"""

from __future__ import annotations

import re

from monoagent import LazyPattern
from monoagent_plugins.observability.redaction_names import (
    AUTH_SCHEME,
    FLAG_END,
    HEADER_ONLY,
    INLINE_END,
    JSON_NUMBER,
    LINE_PREFIX,
    NAME_STEMS,
    PLACEHOLDER_LEAD,
    QUERY_ONLY,
    is_placeholder,
    is_redacted,
    is_secret_name,
    line_end,
    not_a_value,
    quoted_value,
    token_value,
)

_lazy = LazyPattern  # the patterns compile on first use (CLI start-up)

# ---------------------------------------------------------------------------------------- token formats

_PRIVATE_KEY = _lazy(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)

_PUTTY_PRIVATE_LINES = _lazy(r"(?m)^(Private-Lines:[ \t]*[0-9]+[ \t]*\r?\n)(?:[A-Za-z0-9+/]+={0,2}[ \t]*(?:\r?\n|\Z))+")

# (kind, hints, pattern): the pattern runs only on text whose lower-cased form holds one of the hints.
_TOKENS: list[tuple[str, tuple[str, ...], LazyPattern[str]]] = [
    ("anthropic_key", ('sk-ant-',), _lazy(r"\bsk-ant-[A-Za-z0-9_\-]{16,}")),
    ("openai_key", ('sk-',), _lazy(r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}")),
    ("groq_key", ('gsk_',), _lazy(r"\bgsk_[A-Za-z0-9]{20,}")),
    ("xai_key", ('xai-',), _lazy(r"\bxai-[A-Za-z0-9]{20,}")),
    ("replicate_token", ('r8_',), _lazy(r"\br8_[A-Za-z0-9]{20,}")),
    ("huggingface_token", ('hf_',), _lazy(r"\bhf_[A-Za-z0-9]{30,}")),
    ("google_api_key", ('AIza',), _lazy(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("google_oauth_token", ('ya29.',), _lazy(r"\bya29\.[0-9A-Za-z_\-]{20,}")),
    ("aws_access_key", ('AKIA', 'ASIA', 'AGPA', 'AIDA', 'AROA', 'ANPA', 'ANVA', 'AIPA'), _lazy(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),
    ("azure_key", ('AccountKey=', 'SharedAccessKey=', 'sig='), _lazy(r"(?i)(?:(?<=AccountKey=)|(?<=SharedAccessKey=)|(?<=[?&]sig=))[A-Za-z0-9%/+]{20,}={0,2}")),
    ("github_token", ('ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_', 'github_pat_'), _lazy(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("gitlab_token", ('glpat-', 'glrt-', 'gldt-', 'glptt-', 'glft-', 'glsoat-', 'glcbt-', 'glimt-', 'glagent-', 'gloas-'), _lazy(r"\bgl(?:pat|rt|dt|ptt|ft|soat|cbt|imt|agent|oas)-[A-Za-z0-9_\-]{20,}")),
    ("slack_token", ('xox', 'xapp-'), _lazy(r"\b(?:xox[abposre]|xapp|xoxe\.xox[bp])-[A-Za-z0-9-]{10,}")),
    ("slack_webhook", ('hooks.slack.com',), _lazy(r"(?<=https://hooks\.slack\.com/services/)[A-Za-z0-9/_\-]+")),
    ("discord_webhook", ('/api/webhooks/',), _lazy(r"(?<=/api/webhooks/)[0-9]+/[A-Za-z0-9_\-]+")),
    ("discord_token", ('.',), _lazy(r"\b[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}\b")),
    ("telegram_bot_token", (':AA',), _lazy(r"\b[0-9]{8,10}:AA[A-Za-z0-9_\-]{30,40}\b")),
    ("stripe_key", ('_live_', '_test_'), _lazy(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("live_key", ('_live_',), _lazy(r"\b[a-z][a-z0-9]{1,15}_live_(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}\b")),
    ("stripe_webhook_secret", ('whsec_',), _lazy(r"\bwhsec_[A-Za-z0-9]{24,}")),
    ("square_token", ('sq0',), _lazy(r"\bsq0(?:atp|csp)-[A-Za-z0-9_\-]{22,}")),
    ("braintree_token", ('access_token$',), _lazy(r"\baccess_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}")),
    ("npm_token", ('npm_',), _lazy(r"\bnpm_[A-Za-z0-9]{36}")),
    ("pypi_token", ('pypi-AgE',), _lazy(r"\bpypi-AgE[A-Za-z0-9_\-]{20,}")),
    ("dockerhub_token", ('dckr_pat_',), _lazy(r"\bdckr_pat_[A-Za-z0-9_\-]{20,}")),
    ("sendgrid_key", ('SG.',), _lazy(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}")),
    ("twilio_key", ('SK',), _lazy(r"\bSK[0-9a-fA-F]{32}\b")),
    ("mailgun_key", ('key-',), _lazy(r"\bkey-[0-9a-f]{32}\b")),
    ("mailchimp_key", ('-us',), _lazy(r"\b[0-9a-f]{32}-us[0-9]{1,2}\b")),
    ("digitalocean_token", ('_v1_',), _lazy(r"\bdo[por]_v1_[a-f0-9]{64}")),
    ("shopify_token", ('shp',), _lazy(r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}")),
    ("vault_token", ('hvs.', 'hvb.'), _lazy(r"\bhv[sb]\.[A-Za-z0-9_\-]{24,}")),
    ("terraform_token", ('.atlasv1.',), _lazy(r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,}")),
    ("age_secret_key", ('AGE-SECRET-KEY-1',), _lazy(r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}")),
    ("new_relic_key", ('NRAK-',), _lazy(r"\bNRAK-[A-Z0-9]{27}")),
    ("linear_key", ('lin_api_',), _lazy(r"\blin_api_[A-Za-z0-9]{40}")),
    ("notion_token", ('secret_', 'ntn_'), _lazy(r"\b(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,})")),
    ("atlassian_token", ('ATATT3',), _lazy(r"\bATATT3[A-Za-z0-9_\-=]{40,}")),
    ("postman_key", ('PMAK-',), _lazy(r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}")),
    ("pulumi_token", ('pul-',), _lazy(r"\bpul-[a-f0-9]{40}")),
    ("doppler_token", ('dp.',), _lazy(r"\bdp\.(?:st|pt|ct|sa|scim|audit)\.[A-Za-z0-9_\-.]{40,}")),
    ("databricks_token", ('dapi',), _lazy(r"\bdapi[a-f0-9]{32}(?:-[0-9])?")),
    ("grafana_token", ('glc_', 'glsa_'), _lazy(r"\bgl(?:c|sa)_[A-Za-z0-9_=+/]{32,}")),
    ("firebase_key", (':APA91b',), _lazy(r"\bAAAA[A-Za-z0-9_\-]{7}:APA91b[A-Za-z0-9_\-]{100,}")),
    ("jwt", ('eyJ',), _lazy(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
]

# ---------------------------------------------------------------------------------------- context rules

_KEY_VALUE = _lazy(
    r"(?:(?<![\w.\\])|(?<=\\[nrt]))(?P<kq>[\"']?)(?P<key>(?=[\w.\-]*?(?i:pass|pwd|secret|token|key|auth|cred|cookie))[A-Za-z_][\w.\-]*)"
    r"(?P=kq)\]?[ \t]*(?P<sep>=>|:=|==?|:(?!:))[ \t]*"
)
_FLAG = _lazy(
    r"(?:(?<![\w\\-])|(?<=\\[nrt]))--?(?P<key>(?=[\w.-]*?(?i:pass|pwd|secret|token|key|auth|cred|cookie))[A-Za-z][\w.-]*)(?:=|[ \t]+)"
)
_XML_ELEMENT = _lazy(
    r"<(?P<key>(?=[\w.\-:]*?(?i:pass|pwd|secret|token|key|auth|cred))[A-Za-z_][\w.\-:]*)>(?P<value>[^<]+)</(?P=key)>"
)
_NAMED_VALUE = _lazy(
    r"(?i)(?P<q1>[\"']?)\b(?:name|key)(?P=q1)[ \t]*[=:][ \t]*(?P<q2>[\"']?)(?P<name>[\w.\-]+)(?P=q2)"
    r"[^{}<>\[\]]{0,120}?(?P<q3>[\"']?)\bvalue(?P=q3)[ \t]*[=:][ \t]*"
)
_NAMED_ELEMENT = _lazy(
    r"<(?P<tag>[\w.\-:]+)[^<>]*?\b(?:name|key)=[\"'](?P<name>[^\"'<>]+)[\"'][^<>]*>(?P<value>[^<]+)</(?P=tag)>"
)
_LABEL = _lazy(r"(?m)^[ \t]*(?:[-*][ \t]+)?(?P<key>[A-Za-z]+(?:[ \t][A-Za-z]+){1,3})[ \t]*:[ \t]*(?P<value>[^\n]*?)[ \t\r]*$")
_PAIR = _lazy(r"[(\[][ \t]*(?P<q>[\"'])(?P<name>[\w.\-]{1,256})(?P=q)[ \t]*,[ \t]*(?=[\"'])")
_K8S_SECRET = _lazy(r"(?m)^[ \t]*kind:[ \t]*[\"']?Secret[\"']?[ \t]*$|\"kind\"[ \t]*:[ \t]*\"Secret\"")
_K8S_DATA_YAML = _lazy(r"(?m)^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*\r?\n")
_K8S_ENTRY = _lazy(r"(?m)^(?:[ \t]*(?:#[^\n]*)?\r?\n)*(?P<indent>[ \t]*)(?:[\"'][^\"'\n]+[\"']|[^\s:#][^\s:]*):[ \t]*(?P<value>[^\n]*?)[ \t\r]*$")
_K8S_DATA_JSON = _lazy(r'"(?:data|stringData)"[ \t\r\n]*:[ \t\r\n]*\{(?P<body>[^{}]*)\}')
_JSON_STRING_MEMBER = _lazy(r'"(?:[^"\\\n]|\\.)*"[ \t\r\n]*:[ \t\r\n]*"(?P<value>(?:[^"\\\n]|\\.)*)"')
_CREDENTIAL_WORD = _lazy(r"(?=\S*[^a-z\s])\S{6,}")  # one word, not plain lower-case prose
_QUERY = _lazy(r"(?<=[?&;])(?P<key>[\w.\-\[\]]+)=(?P<value>[^&#\s\"'<>]+)")
_BEARER = _lazy(r"(?i)(?<=\bbearer )[A-Za-z0-9._~+/\-]{16,}=*")
# A password holding a raw "/" is no valid URL, but it is written; the user information still ends at the last "@".
_URL_SLASHED_PASSWORD = _lazy(
    r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s/:@\"'<>`]+:(?P<password>[^\s/@\"'<>`]*/[^\s\"'<>`]*)@(?=[\w\[])"
)
_URL_AUTHORITY = _lazy(r"(?i)\b[a-z][a-z0-9+.\-]*://(?P<authority>[^\s/?#\"'<>`\\]+)")
_COMMAND_SECRETS: list[tuple[str, tuple[str, ...], LazyPattern[str]]] = [
    ("cli_credentials", ('-u', '--user', '--proxy-user'), _lazy(r"(?i)(?:^|(?<=\s))(?:-u|--user|-U|--proxy-user)(?:[ \t]+|=)[\"']?[^\s:\"'/%]+:(?!//)(?P<value>[^\s\"']+)")),
    ("cli_credentials", ('mysql', 'mariadb'), _lazy(r"\b(?:mysql\w*|mariadb[\w-]*)\b[^\n|;&]*?[ \t]-p(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)")),
    ("cli_credentials", ('sshpass',), _lazy(r"\bsshpass\b[^\n|;&]*?[ \t]-p[ \t]*(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)")),
    ("cli_credentials", ('redis-cli',), _lazy(r"\bredis-cli\b[^\n|;&]*?[ \t]-a[ \t]+(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)")),
    ("cli_credentials", ('docker',), _lazy(r"\bdocker\s+login\b[^\n|;&]*?[ \t]-p[ \t]+(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)")),
    ("cli_credentials", ('pass:',), _lazy(r"(?<![\w-])-pass(?:in|out)?[ \t]+pass:(?P<value>\S+)")),
    ("cli_credentials", ('smbclient',), _lazy(r"\bsmbclient\b[^\n|;&]*?[ \t]-U[ \t]*[^\s%]+%(?P<value>\S+)")),
    ("cli_credentials", ('-b', '--cookie'), _lazy(r"(?i)(?<![\w-])(?:-b|--cookie)[ \t]+(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]*=\S+)")),
    ("cli_credentials", ('ldap',), _lazy(r"\bldap\w*\b[^\n|;&]*?[ \t]-w[ \t]*(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)")),
    (
        "cli_credentials",
        ("htpasswd",),
        _lazy(
            r"\bhtpasswd(?:[ \t]+-[A-Za-z]+)*[ \t]+-[A-Za-z]*b[A-Za-z]*(?:[ \t]+-[A-Za-z]+)*[ \t]+(?:(?!-)\S+[ \t]+){1,2}"
            r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"
        ),
    ),
    (
        "cli_credentials",
        ("convertto-securestring",),
        _lazy(r"(?i)\bConvertTo-SecureString\b(?=[^\n|;]*-AsPlainText)[^\n|;'\"]*(?P<value>'[^'\n]*'|\"[^\"\n]*\")"),
    ),
    (
        "cli_credentials",
        ("oracle", "sqlplus"),
        _lazy(r"(?i)(?:\bjdbc:oracle:\w+:|\bsqlplus\w*(?:[ \t]+-\w+)*[ \t]+)[\w$#]+/(?P<value>[^\s@/\"']+)@"),
    ),
    (
        "netrc_password",
        ("password",),
        _lazy(r"(?i)\b(?:machine\s+\S+|default)\s+(?:(?:login|account)\s+\S+\s+)*password\s+(?P<value>(?!\[REDACTED)\S+)"),
    ),
]


def _replace(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with each (start, end, replacement) span replaced; a span overlapping an earlier one is dropped."""
    if not spans:
        return text
    out: list[str] = []
    last = 0
    for start, end, replacement in sorted(spans, key=lambda s: (s[0], -s[1])):
        if start < last:
            continue
        out.append(text[last:start])
        out.append(replacement)
        last = end
    out.append(text[last:])
    return "".join(out)


def _value_spans(text: str, start: int, end: int, kind: str) -> list[tuple[int, int, str]]:
    value = text[start:end]
    return [] if not value.strip() or is_redacted(value) else [(start, end, f"[REDACTED:{kind}]")]


def _header_value(text: str, start: int, end: int, header: str) -> list[tuple[int, int, str]]:
    """The credential part of a header value: after the scheme word for Authorization, else all of it."""
    value = text[start:end]
    if "authorization" in header:
        scheme = AUTH_SCHEME.match(value)
        if scheme:
            start += scheme.end()
        if is_placeholder(text[start:end]) or PLACEHOLDER_LEAD.match(text, start, end):
            return []
        return _value_spans(text, start, end, "authorization")
    if is_placeholder(value) or PLACEHOLDER_LEAD.match(text, start, end):
        return []
    return _value_spans(text, start, end, "cookie" if "cookie" in header else "secret_header")


def _line_bounds(text: str, key_start: int) -> tuple[int, bool]:
    """Where the line holding ``key_start`` starts, and whether it starts after a JSON-escaped ``\\n``."""
    real = text.rfind("\n", 0, key_start) + 1
    escaped = text.rfind("\\n", real, key_start) + 2
    return (escaped, True) if escaped > 1 else (real, False)


def _block_scalar(text: str, start: int, line_start: int) -> tuple[int, int] | None:
    """The lines of a YAML block scalar (``key: |``) whose indicator is at ``start``, or None."""
    header = re.compile(r"[|>][-+]?[0-9]?[ \t]*(?:#[^\n]*)?\n").match(text, start)
    if header is None:
        return None
    indent = len(text[line_start:]) - len(text[line_start:].lstrip(" "))
    first = end = header.end()
    for line in re.compile(r"[^\n]*(?:\n|$)").finditer(text, first):
        body = line.group(0).rstrip("\n")
        if not line.group(0) or (body.strip() and len(body) - len(body.lstrip(" ")) <= indent):
            break
        end = line.start() + len(body)
    first += len(text[first:end]) - len(text[first:end].lstrip(" "))
    return (first, end) if end > first else None


def _key_starts(text: str, folded: str) -> list[int]:
    """Where the words holding a secret-name stem start (found with ``str.find``, cheaper than a regex scan)."""
    starts: set[int] = set()
    for stem in NAME_STEMS:
        at = folded.find(stem)
        while at >= 0:
            start = at
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
                start -= 1
            if start > 0 and text[start - 1] == "\\" and text[start] in "nrt":
                start += 1  # "\npassword": the n belongs to the escape
            while start < at and not (text[start].isalpha() or text[start] == "_"):
                start += 1
            starts.add(start)
            at = folded.find(stem, at + len(stem))
    return sorted(starts)


def _key_matches(text: str, starts: list[int]) -> list[re.Match[str]]:
    matches: list[re.Match[str]] = []
    for start in starts:
        if matches and start < matches[-1].end():
            continue
        quoted = start > 0 and text[start - 1] in "\"'" and _KEY_VALUE.match(text, start - 1)
        match = quoted or _KEY_VALUE.match(text, start)
        if match:
            matches.append(match)
    return matches


def _key_values(text: str, starts: list[int]) -> list[tuple[int, int, str]]:
    """Values under secret-named keys: ``key = value``, ``"key": "value"``, ``key: value``, ``KEY=value`` ..."""
    spans: list[tuple[int, int, str]] = []
    for match in _key_matches(text, starts):
        key = match.group("key")
        start = match.end()
        if not is_secret_name(key) or start >= len(text) or text[start] == "\n":
            continue
        sep, quote, lowered = match.group("sep"), match.group("kq"), key.lower()
        key_start = match.start("key") - len(quote)
        line_start, escaped = _line_bounds(text, key_start)
        at_line_start = bool(LINE_PREFIX.fullmatch(text, line_start, key_start))
        open_quote = text[key_start - 1] if not quote and key_start > 0 and text[key_start - 1] in "\"'" else ""
        before = key_start
        while before > 0 and text[before - 1] in " \t":
            before -= 1
        code = (sep == ":" and bool(quote)) or text[before - 1 : before] in ("{", "(", ",")
        header = lowered in HEADER_ONLY or (sep == ":" and "-" in key and not quote)
        prefix = re.compile(r"(?:[fFrRbBuU]{1,2}|\$)(?=[\"'])").match(text, start)
        value_start = prefix.end() if prefix else start
        opener = text[value_start]
        if open_quote and opener == open_quote:
            continue
        quoted = quoted_value(text, value_start)
        if quoted is not None:
            inner_start, inner_end = quoted
            if header:
                spans += _header_value(text, inner_start, inner_end, lowered)
            elif not not_a_value(text[inner_start:inner_end], quoted=True, sep=sep, code=code, key=key):
                spans += _value_spans(text, inner_start, inner_end, "secret_assignment")
            continue
        if opener in "|>" and at_line_start:
            block = _block_scalar(text, value_start, line_start)
            if block is not None:
                spans += _value_spans(text, *block, "secret_assignment")
            continue
        if opener in "{[(|<>":
            continue
        if open_quote:
            end = text.find("\n", value_start)
            end = len(text) if end < 0 else end
            closing = text.find(open_quote, value_start, end)
            end = closing if closing >= 0 else end
        elif (header and sep == ":") or at_line_start:
            end = line_end(text, value_start, escaped)
        else:
            scheme = AUTH_SCHEME.match(text, value_start) if header else None
            stop = INLINE_END.search(text, scheme.end() if scheme else value_start)
            end = stop.start() if stop else len(text)
            if text[end : end + 1] == "(":
                continue
        value = text[value_start:end]
        if header:
            spans += _header_value(text, value_start, end, lowered)
        elif JSON_NUMBER.fullmatch(value) and quote == '"':
            spans.append((value_start, end, '"[REDACTED:secret_assignment]"'))  # the JSON stays JSON
        elif not not_a_value(value, quoted=False, sep=sep, code=code, key=key) and not (
            sep == ":" and not at_line_start and not quote and re.fullmatch(r"[a-z]+", value)  # prose: "auth: failed"
        ):
            spans += _value_spans(text, value_start, end, "secret_assignment")
    return spans


def _flags(text: str, starts: list[int]) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    for start in starts:
        dashes = 2 if text[max(start - 2, 0) : start] == "--" else 1 if text[start - 1 : start] == "-" else 0
        match = _FLAG.match(text, start - dashes) if dashes else None
        if match is None or not is_secret_name(match.group("key")):
            continue
        start = match.end()
        if start >= len(text) or text[start] in "\n<>|-" or text[start - 1] == "\n":
            continue
        inner = token_value(text, start, FLAG_END)
        quoted = text[start] in "\"'`"
        if not not_a_value(text[inner[0] : inner[1]], quoted=quoted, sep="=", code=False, key=match.group("key")):
            spans += _value_spans(text, *inner, "cli_credentials")
    return spans


def _url_credentials(text: str) -> list[tuple[int, int, str]]:
    """User information of URLs, split at the last ``@`` of the authority the way a URL parser does."""
    spans: list[tuple[int, int, str]] = []
    for match in _URL_AUTHORITY.finditer(text) if "@" in text else ():
        authority = match.group("authority")
        userinfo, at, _host = authority.rpartition("@")
        if not at or not userinfo:
            continue
        start = match.start("authority")
        user, colon, password = userinfo.partition(":")
        if colon and password:
            spans += _value_spans(text, start + len(user) + 1, start + len(userinfo), "url_credentials")
        elif not colon and len(user) >= 16 and not is_redacted(user):
            spans.append((start, start + len(user), "[REDACTED:url_credentials]"))
    for match in _URL_SLASHED_PASSWORD.finditer(text) if "@" in text else ():
        if not re.match(r"[0-9]+(?:/|$)", match.group("password")):  # host:port/path@..., not a password
            spans += _value_spans(text, *match.span("password"), "url_credentials")
    return spans


def _commands(text: str, folded: str) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    for kind, hints, pattern in _COMMAND_SECRETS:
        if not any(hint in folded for hint in hints):
            continue
        for match in pattern.finditer(text):
            start, end = match.span("value")
            if text[start] in "\"'" and end - start >= 2:
                start, end = start + 1, end - 1
            spans += _value_spans(text, start, end, kind)
    return spans


def _named_values(text: str) -> list[tuple[int, int, str]]:
    """Name/value pairs: ``{"name": "DB_PASSWORD", "value": "..."}``, ``- name: X`` / ``value: ...``, ``<add key=.. value=..>``."""
    spans: list[tuple[int, int, str]] = []
    folded = text.lower()
    for match in _NAMED_VALUE.finditer(text) if "value" in folded else ():
        start = match.end()
        if not is_secret_name(match.group("name")) or start >= len(text):
            continue
        inner = token_value(text, start, INLINE_END)
        quoted = text[start] in "\"'`"
        if not not_a_value(text[inner[0] : inner[1]], quoted=quoted, sep="=", code=False, key=match.group("name")):
            spans += _value_spans(text, *inner, "secret_assignment")
    for match in _NAMED_ELEMENT.finditer(text) if "</" in text else ():
        if is_secret_name(match.group("name")) and not is_placeholder(match.group("value")):
            spans += _value_spans(text, *match.span("value"), "secret_assignment")
    return spans


def _pairs(text: str) -> list[tuple[int, int, str]]:
    """Name/value pairs written as a tuple or an array: ``('x-api-key', '...')``, ``["Authorization", "Bearer ..."]``."""
    spans: list[tuple[int, int, str]] = []
    for match in _PAIR.finditer(text) if "," in text else ():
        name = match.group("name")
        if not is_secret_name(name):
            continue
        inner = quoted_value(text, match.end())
        if inner is None:
            continue
        if name.lower() in HEADER_ONLY:
            spans += _header_value(text, *inner, name.lower())
        elif not not_a_value(text[inner[0] : inner[1]], quoted=True, sep=",", code=True, key=name):
            spans += _value_spans(text, *inner, "secret_assignment")
    return spans


def _kubernetes_secrets(text: str) -> list[tuple[int, int, str]]:
    """Every value under ``data`` or ``stringData`` of a Kubernetes ``kind: Secret``, whatever its key (YAML or JSON)."""
    spans: list[tuple[int, int, str]] = []
    if not _K8S_SECRET.search(text):
        return spans
    for block in _K8S_DATA_YAML.finditer(text):
        indent, position = len(block.group("indent")), block.end()
        for entry in _K8S_ENTRY.finditer(text, block.end()):
            if entry.start() != position or len(entry.group("indent")) <= indent:
                break  # the block ends at its first line that is not one of its entries
            position = entry.end() + 1
            start, end = entry.span("value")
            if text[start : start + 1] in ("|", ">"):
                found = _block_scalar(text, start, entry.start())
                start, end = found if found is not None else (start, start)
            else:
                start, end = quoted_value(text, start) or (start, end)
            spans += _value_spans(text, start, end, "secret_value")
    for block in _K8S_DATA_JSON.finditer(text):
        for member in _JSON_STRING_MEMBER.finditer(text, *block.span("body")):
            spans += _value_spans(text, *member.span("value"), "secret_value")
    return spans


def _labels(text: str) -> list[tuple[int, int, str]]:
    """``Secret access key: ...`` and ``API Key: ...``: a label of a few words at the start of a line."""
    spans: list[tuple[int, int, str]] = []
    for match in _LABEL.finditer(text) if ":" in text else ():
        key, value = match.group("key"), match.group("value")
        quoted = quoted_value(text, match.start("value")) if value else None
        if not is_secret_name(key) or not value or (quoted is None and not _CREDENTIAL_WORD.fullmatch(value)):
            continue  # a sentence ("The API key: see the dashboard"), not a credential
        start, end = quoted or match.span("value")
        if not not_a_value(text[start:end], quoted=quoted is not None, sep=":", code=False, key=key):
            spans += _value_spans(text, start, end, "secret_assignment")
    return spans


def _xml_and_query(text: str) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    for match in _XML_ELEMENT.finditer(text) if "</" in text else ():
        if is_secret_name(match.group("key").rpartition(":")[2]):
            spans += _value_spans(text, *match.span("value"), "secret_assignment")
    for match in _QUERY.finditer(text) if "=" in text else ():
        key = match.group("key")
        if key.lower() in QUERY_ONLY or is_secret_name(key):
            value = match.group("value")
            if not is_placeholder(value) and not is_redacted(value):
                spans.append((*match.span("value"), "[REDACTED:secret_parameter]"))
    for match in _BEARER.finditer(text) if "bearer " in text.lower() else ():
        spans.append((match.start(), match.end(), "[REDACTED:bearer_token]"))
    return spans


_REDACTION = LazyPattern(r"(\[REDACTED:[a-z_]+\])")
_OTHER_LINE_BREAKS = LazyPattern("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every line break but LF (``monoagent.LINE_BREAKS``): the line rules read each as LF, and the CR of CR LF as a space."""


def redact_secrets(text: str) -> str:
    """``text`` with every secret the rules above recognise replaced by ``[REDACTED:<kind>]``.

    The rules that read lines (a label at the start of a line, a YAML block, a PuTTY key's lines)
    spell a line break as LF. A text holding another line break (``monoagent.LINE_BREAKS``: CR LF,
    a lone CR, VT, FF, the separators, NEL, U+2028, U+2029), which a reader breaks lines at just
    the same, is redacted as if each were LF (the CR of a CR LF as a space before it); what the
    rules leave in place keeps its own line breaks (taken back from the text), so a secret after
    a U+2028 or in a CR LF file goes as one after an LF does.
    """
    if _OTHER_LINE_BREAKS.search(text) is None:
        return _redact_secrets(text)
    view = _OTHER_LINE_BREAKS.sub(lambda found: " " if found.group() == "\r" and text.startswith("\n", found.end()) else "\n", text)
    redacted = _redact_secrets(view)
    if redacted == view:
        return text
    # The redaction is the view with spans replaced by [REDACTED:<kind>]: the text between those is
    # copied from the view, in order, so each piece is found there and taken from the text instead
    # (the same characters but for the line breaks). A piece not found keeps its LFs.
    out: list[str] = []
    at = 0
    for piece in _REDACTION.split(redacted):
        found = view.find(piece, at) if piece and not _REDACTION.fullmatch(piece) else -1
        if found < 0:
            out.append(piece)
            continue
        out.append(text[found : found + len(piece)])
        at = found + len(piece)
    return "".join(out)


def _redact_secrets(text: str) -> str:
    if "-----begin" in text.lower():
        text = _PRIVATE_KEY.sub("[REDACTED:private_key]", text)
    if "Private-Lines:" in text:
        text = _PUTTY_PRIVATE_LINES.sub("\\1[REDACTED:private_key]\n", text)
    for kind, hints, pattern in _TOKENS:
        if any(hint in text for hint in hints):
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    text = _replace(text, _url_credentials(text) + _commands(text, text.lower()))
    starts = _key_starts(text, text.lower())
    spans = _key_values(text, starts) + _flags(text, starts) + _named_values(text) + _labels(text) + _xml_and_query(text)
    if "secret" in text.lower():
        spans += _kubernetes_secrets(text)
    return _replace(text, spans + (_pairs(text) if "(" in text or "[" in text else []))
