"""Secret names and values, for the redactor's context rules.

:func:`is_secret_name` says whether a key names a secret, by its normalised words
(``aws_secret_access_key``, ``SecretAccessKey``, ``JWT_SIGNING_KEY``, ``x-api-key``); the value
helpers say where a value starts and ends (:func:`quoted_value`, :func:`token_value`,
:func:`line_end`) and whether it is plainly not one: a reference, a placeholder
(:func:`is_placeholder`), an earlier redaction, a type annotation or code (:func:`not_a_value`).
"""

from __future__ import annotations

import functools
import re

from monoagent import LazyPattern

_lazy = LazyPattern  # the patterns compile on first use (CLI start-up)

# ---------------------------------------------------------------------------------------- secret names

_SECRET_NOUNS = frozenset(
    "password passwd pwd passphrase pass passcode secret token credential credentials cookie auth authorization "
    "apikey privkey".split()
)
_SECRET_COMPOUNDS = ("password", "passwd", "passphrase", "secret", "token", "credentials")
_KEY_QUALIFIERS = frozenset(
    "api access secret signing sign private priv encryption decryption crypt master auth app client account shared "
    "session consumer webhook hmac license service db database admin root jwt deploy aes cipher storage subscription "
    "server write ingest ingestion integration bot sas developer merchant partner".split()
)
_NOT_SECRET_TOKENS = frozenset(
    "page next continuation sync cursor bos eos pad unk sep cls mask start end stop max min num input output total "
    "special prompt completion context last first".split()
)
_NAME_SUFFIXES = frozenset("value base b64 base64 hex raw plain plaintext str string".split())
HEADER_ONLY = frozenset(("authorization", "proxy-authorization", "cookie", "set-cookie"))
QUERY_ONLY = frozenset(("key", "sig", "signature", "x-amz-signature", "code_verifier"))

NAME_STEMS = ("pass", "pwd", "secret", "token", "key", "auth", "cred", "cookie")
_CAMEL = _lazy(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NAME_SPLIT = _lazy(r"[^a-z0-9]+")


def name_words(name: str) -> list[str]:
    """``name`` as lower-case words: ``SecretAccessKey`` and ``x-api-key`` -> ``[secret, access, key]``, ``[x, api, key]``."""
    return [w for w in _NAME_SPLIT.split(_CAMEL.sub(" ", name).lower()) if w]


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a key, variable, flag, header or parameter called ``name`` holds a secret."""
    words = name_words(name)
    while len(words) > 1 and words[-1] in _NAME_SUFFIXES:
        words.pop()
    if not words:
        return False
    last, before = words[-1], (words[-2] if len(words) > 1 else "")
    if last == "token" or (last.endswith("token") and last[:-5] not in _NOT_SECRET_TOKENS):
        return before not in _NOT_SECRET_TOKENS
    if last in _SECRET_NOUNS or last.endswith(_SECRET_COMPOUNDS) or before + last in _SECRET_NOUNS:
        return True
    if last == "key":
        return before in _KEY_QUALIFIERS
    return last.endswith("key") and last[:-3] in _KEY_QUALIFIERS


# ---------------------------------------------------------------------------------------- values

_MARKER = _lazy(r"(?:\s*\[REDACTED:[^\]\s]*\](?:#[0-9]+)?)+\s*")
_TRAILING_COMMENT = re.compile(r"[ \t]+#[^\n]*\Z")
_PLACEHOLDER = _lazy(
    r"(?is)|null|none|nil|true|false|yes|no|on|off|undefined|required|optional|enabled|disabled|inherit|auto|"
    r"\*+|x{3,}|\.{3}|•+|-+|\$(?![\"']).*|%\(?\w*\)?s?%?|\{\{.*\}\}|\{\w*\}|<[^<>]*>|\[REDACTED.*"
)
_TYPE_NAME = _lazy(
    r"(?:Optional|Union|SecretStr|SecretBytes|Secret|str|bytes|int|bool|float|string|number|boolean|Any|list|dict|List|Dict)\b"
)
_REFERENCE = _lazy(r"[A-Za-z_$][A-Za-z_$]*(?:\.[A-Za-z_$][\w$]*)+(?:[\[(].*)?|[A-Za-z_$][\w$.]*\(.*")
_EXPRESSION_TAIL = _lazy(r"(?:or|and|if|else|\|\||&&|\?\?|[-+*/%]|==|!=)\s")
_IDENTIFIER = _lazy(r"[A-Za-z_][A-Za-z_]*[0-9]*")
_EXPRESSION_WORDS = frozenset("await new yield typeof lambda function async".split())
PLACEHOLDER_LEAD = _lazy(r"(?:<[^<>\n]*>|\$\{[^}\n]*\}|\{\{[^}\n]*\}\}|\*{3,}|\.{3})(?=$|[\s`'\"),;])")
_SNAKE_VARIABLE = _lazy(r"[a-z]+(?:_[a-z]+)+")
LINE_PREFIX = _lazy(r"[ \t]*(?:(?:export|set|setx|declare(?:[ \t]+-\w+)?|local|readonly|ENV|ARG)[ \t]+|\$env:|-[ \t]+)?")
AUTH_SCHEME = _lazy(
    r"(?i)(?:Bearer|Basic|Digest|token|SSWS|Api-?Key|Key|Negotiate|NTLM|OAuth|DPoP|MAC|HOBA|Mutual|GoogleLogin|Splunk|"
    r"Client-ID|AWS4-HMAC-SHA256|SharedKey|SharedAccessSignature)[ \t]+(?=\S)"
)
JSON_NUMBER = _lazy(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
INLINE_END = _lazy(r"[\s;&,\"'<>`)\]}]")
FLAG_END = _lazy(r"[\s\"'`;&|)]")
_QUOTED = {quote: _lazy(rf"{quote}(?P<body>(?:[^{quote}\\\n]|\\.)*){quote}?") for quote in ("\"", "'")}


def is_placeholder(value: object) -> bool:
    """Whether ``value`` is a placeholder (``null``, ``***``, ``${X}``, ``<token>``, ...), trailing punctuation aside."""
    return isinstance(value, str) and bool(_PLACEHOLDER.fullmatch(value.strip().rstrip(".,;")))


def is_redacted(value: str) -> bool:
    return bool(_MARKER.fullmatch(value))


def not_a_value(value: str, *, quoted: bool, sep: str, code: bool, key: str) -> bool:
    """Whether ``value`` (found under a secret-named ``key``) is a reference, placeholder or type, not a secret."""
    stripped = value.strip()
    if is_placeholder(stripped) or is_redacted(stripped):
        return True
    comment = None if quoted else _TRAILING_COMMENT.search(stripped)
    if comment is not None and is_placeholder(stripped[: comment.start()]):
        return True  # `apiKey = null  # default` (config show, TOML, YAML, shell): a placeholder and its comment
    scheme = AUTH_SCHEME.match(stripped)
    if scheme and is_placeholder(stripped[scheme.end() :]):
        return True  # `Bearer ${token}`: the scheme and a reference
    if quoted:
        return False
    if sep == ":" and _TYPE_NAME.match(stripped):
        return True
    first, _, rest = stripped.partition(" ")
    if first.rstrip(":;,") in _EXPRESSION_WORDS:
        return True  # "= await get_token()", "= new Client(...)": code computing the value
    if rest and _EXPRESSION_TAIL.match(rest):
        stripped = first  # "api_key or os.environ[...]": an expression over a reference
    stripped = stripped.rstrip(":;,")
    if _REFERENCE.fullmatch(stripped):
        return True
    if _IDENTIFIER.fullmatch(stripped):
        return code or bool(_SNAKE_VARIABLE.fullmatch(stripped)) or name_words(stripped)[-1:] == name_words(key)[-1:]
    return False


def quoted_value(text: str, start: int) -> tuple[int, int] | None:
    """The inside of the quoted string opening at ``start``, or None when none opens there.

    Double, single, backtick and triple quotes, and a JSON-escaped ``\\"`` or ``\\'``; escapes are
    honoured, and an unterminated single-line string ends with its line.
    """
    for triple in ('"""', "'''"):
        if text.startswith(triple, start):
            end = text.find(triple, start + 3)
            return start + 3, len(text) if end < 0 else end
    opener = text[start : start + 1]
    if opener == "\\" and text[start + 1 : start + 2] in ("\"", "'"):
        end = text.find(text[start : start + 2], start + 2)
        return start + 2, end if end >= 0 else line_end(text, start, escaped=True)
    if opener == "`":
        end = text.find("`", start + 1)
        return start + 1, len(text) if end < 0 else end
    if opener in ("\"", "'"):
        quoted = _QUOTED[opener].match(text, start)
        assert quoted is not None, "the pattern matches its opening quote alone"
        return quoted.span("body")
    return None


def token_value(text: str, start: int, stops: re.Pattern[str] | LazyPattern[str]) -> tuple[int, int]:
    """The quoted value at ``start``, else the run of characters up to the first of ``stops``."""
    quoted = quoted_value(text, start)
    if quoted is not None:
        return quoted
    stop = stops.search(text, start)
    return start, stop.start() if stop else len(text)


def line_end(text: str, start: int, escaped: bool = False) -> int:
    """The end of the line from ``start``, trailing blanks and ``,``/``;`` left out (a JSON string's too if ``escaped``)."""
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    if escaped:
        stops = [text.find("\\n", start, end), text.find("\\r", start, end), unescaped_quote(text, start, end)]
        end = min((s for s in stops if s >= 0), default=end)
    while end > start and text[end - 1] in " \t\r,;":
        end -= 1
    return end


def unescaped_quote(text: str, start: int, end: int) -> int:
    match = re.compile(r'(?<!\\)"').search(text, start, end)
    return match.start() if match else -1
