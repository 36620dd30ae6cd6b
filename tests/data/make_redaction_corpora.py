"""Write the redaction measurement corpora: ``redaction_recall.json`` and ``redaction_precision.json``.

Every credential in them is FAKE and generated here from a fixed seed, so the files are
reproducible byte for byte (``tests/test_redaction_measure.py`` checks that the committed files
are what this script writes). Generated tokens carry an obvious marker (``FAKE``, ``EXAMPLE``
or ``deadbeef`` where the format's alphabet allows one) and never a valid checksum, so they
match the formats without being anybody's credential.

* recall: ``{"kind", "text", "secret"}``; the redactor must leave no 8-character run of
  ``secret`` (all of it when shorter) that is not also in the surrounding text.
* precision: ``{"kind", "text"}``; ordinary prose, code, logs, hashes, ids and JSON with
  escapes that must come back byte for byte unchanged (no absolute paths in it: those are
  tokenised by design and tested separately).

    python tests/data/make_redaction_corpora.py
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

HERE = Path(__file__).parent
SEED = 20240608
ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
LOWER = string.ascii_lowercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"

R = random.Random(SEED)


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


def fake(n: int, alphabet: str = ALNUM) -> str:
    """``n`` characters of ``alphabet`` starting with an obvious marker."""
    marker = next(m for m in ("FAKE", "fake", "deadbeef", "0000") if set(m) <= set(alphabet))
    return (marker + rnd(max(n - len(marker), 0), alphabet))[:n]


def b64(raw: str) -> str:
    return base64.b64encode(raw.encode()).decode()


# Neutral contexts: nothing in them says "secret", so only the token's own format can be recognised.
NEUTRAL = [
    'Request failed: rejected credential "{v}" (HTTP 401)',
    "client = Client({v!r}, timeout=30)",
    '{{"id": 17, "value": "{v}", "ok": false}}',
    "2024-06-08T10:15:02Z worker-3 retry with {v} after backoff",
    "- {v}",
]


def vendor(kind: str, env: str, make, n: int = 3) -> list[dict[str, str]]:
    out = []
    for i in range(n):
        value = make()
        template = f"export {env}={{v}}" if i == 0 else NEUTRAL[(len(kind) + i) % len(NEUTRAL)]
        out.append({"kind": kind, "text": template.format(v=value), "secret": value})
    return out


def vendor_tokens() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    add = rows.extend
    add(vendor("anthropic_key", "ANTHROPIC_API_KEY", lambda: "sk-ant-api03-" + fake(86, URLSAFE) + "AA"))
    add(vendor("anthropic_admin_key", "ANTHROPIC_ADMIN_KEY", lambda: "sk-ant-admin01-" + fake(86, URLSAFE) + "AA"))
    add(vendor("openai_project_key", "OPENAI_API_KEY", lambda: "sk-proj-" + fake(74, URLSAFE) + "T3BlbkFJ" + rnd(74, URLSAFE)))
    add(vendor("openai_legacy_key", "OPENAI_KEY", lambda: "sk-" + fake(20) + "T3BlbkFJ" + rnd(20)))
    add(vendor("openai_service_key", "OPENAI_SVC", lambda: "sk-svcacct-" + fake(60, URLSAFE)))
    add(vendor("google_api_key", "GOOGLE_API_KEY", lambda: "AIza" + fake(35, URLSAFE)))
    add(vendor("google_oauth_token", "GOOGLE_ACCESS", lambda: "ya29." + fake(120, URLSAFE)))
    add(vendor("aws_access_key_id", "AWS_ACCESS_KEY_ID", lambda: R.choice(["AKIA", "ASIA"]) + fake(16, UPPER)))
    add(vendor("github_classic_token", "GITHUB_TOKEN", lambda: R.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + fake(36)))
    add(vendor("github_fine_grained_token", "GH_TOKEN", lambda: "github_pat_11" + fake(20, UPPER) + "_" + rnd(59)))
    add(vendor("gitlab_token", "GITLAB_TOKEN", lambda: R.choice(["glpat-", "glrt-", "gldt-", "glptt-"]) + fake(20, URLSAFE)))
    add(vendor("slack_bot_token", "SLACK_BOT_TOKEN", lambda: f"xoxb-{rnd(12, string.digits)}-{rnd(13, string.digits)}-{fake(24)}"))
    add(vendor("slack_user_token", "SLACK_USER_TOKEN", lambda: f"xoxp-{rnd(12, string.digits)}-{rnd(12, string.digits)}-{rnd(13, string.digits)}-{fake(32, HEX)}"))
    add(vendor("slack_app_token", "SLACK_APP_TOKEN", lambda: f"xapp-1-A{rnd(10, UPPER)}-{rnd(13, string.digits)}-{fake(64, HEX)}"))
    add(vendor("slack_config_token", "SLACK_CONFIG", lambda: f"xoxe.xoxp-1-{fake(140, ALNUM)}"))
    add(vendor("discord_bot_token", "DISCORD_TOKEN", lambda: "MT" + rnd(24, ALNUM) + "." + rnd(6, URLSAFE) + "." + fake(38, URLSAFE)))
    add(vendor("telegram_bot_token", "TELEGRAM_BOT_TOKEN", lambda: rnd(10, string.digits) + ":AA" + fake(33, URLSAFE)))
    add(vendor("stripe_secret_key", "STRIPE_SECRET_KEY", lambda: R.choice(["sk_live_", "rk_live_", "sk_test_"]) + fake(99)))
    add(vendor("stripe_webhook_secret", "STRIPE_WEBHOOK_SECRET", lambda: "whsec_" + fake(32)))
    add(vendor("square_token", "SQUARE_TOKEN", lambda: R.choice(["sq0atp-", "sq0csp-"]) + fake(43, URLSAFE)))
    add(vendor("paypal_braintree_token", "BRAINTREE_TOKEN", lambda: f"access_token$production${rnd(16, LOWER)}${fake(32, HEX)}"))
    add(vendor("twilio_api_key", "TWILIO_KEY", lambda: "SK" + fake(32, HEX)))
    add(vendor("sendgrid_key", "SENDGRID_API_KEY", lambda: "SG." + fake(22, URLSAFE) + "." + rnd(43, URLSAFE)))
    add(vendor("mailgun_key", "MAILGUN_KEY", lambda: "key-" + fake(32, HEX)))
    add(vendor("mailchimp_key", "MAILCHIMP_KEY", lambda: fake(32, HEX) + "-us" + str(R.randint(1, 21))))
    add(vendor("npm_token", "NPM_TOKEN", lambda: "npm_" + fake(36)))
    add(vendor("pypi_token", "PYPI_TOKEN", lambda: "pypi-AgEIcHlwaS5vcmc" + fake(60, URLSAFE)))
    add(vendor("dockerhub_token", "DOCKERHUB_TOKEN", lambda: "dckr_pat_" + fake(27, URLSAFE)))
    add(vendor("huggingface_token", "HF_TOKEN", lambda: "hf_" + fake(34)))
    add(vendor("replicate_token", "REPLICATE_API_TOKEN", lambda: "r8_" + fake(37)))
    add(vendor("groq_key", "GROQ_API_KEY", lambda: "gsk_" + fake(52)))
    add(vendor("xai_key", "XAI_API_KEY", lambda: "xai-" + fake(80)))
    add(vendor("digitalocean_token", "DIGITALOCEAN_TOKEN", lambda: R.choice(["dop_v1_", "doo_v1_"]) + fake(64, HEX)))
    add(vendor("shopify_token", "SHOPIFY_TOKEN", lambda: R.choice(["shpat_", "shpss_", "shpca_", "shppa_"]) + fake(32, HEX)))
    add(vendor("hashicorp_vault_token", "VAULT_TOKEN", lambda: R.choice(["hvs.", "hvb."]) + fake(90, URLSAFE)))
    add(vendor("terraform_cloud_token", "TF_TOKEN", lambda: rnd(14, ALNUM) + ".atlasv1." + fake(67, ALNUM)))
    add(vendor("age_secret_key", "SOPS_AGE_KEY", lambda: "AGE-SECRET-KEY-1" + fake(58, UPPER)))
    add(vendor("new_relic_key", "NEW_RELIC_API_KEY", lambda: "NRAK-" + fake(27, UPPER)))
    add(vendor("linear_key", "LINEAR_API_KEY", lambda: "lin_api_" + fake(40)))
    add(vendor("notion_token", "NOTION_TOKEN", lambda: R.choice(["secret_", "ntn_"]) + fake(43)))
    add(vendor("atlassian_token", "JIRA_TOKEN", lambda: "ATATT3xFfGF0" + fake(180, URLSAFE) + "=" + rnd(8, HEX.upper())))
    add(vendor("postman_key", "POSTMAN_API_KEY", lambda: "PMAK-" + fake(24, HEX) + "-" + rnd(34, HEX)))
    add(vendor("pulumi_token", "PULUMI_ACCESS_TOKEN", lambda: "pul-" + fake(40, HEX)))
    add(vendor("doppler_token", "DOPPLER_TOKEN", lambda: "dp.st." + fake(44)))
    add(vendor("databricks_token", "DATABRICKS_TOKEN", lambda: "dapi" + fake(32, HEX)))
    add(vendor("grafana_token", "GRAFANA_TOKEN", lambda: R.choice(["glsa_", "glc_"]) + fake(32) + "_" + rnd(8, HEX)))
    add(vendor("firebase_fcm_key", "FCM_SERVER_KEY", lambda: "AAAA" + rnd(7, URLSAFE) + ":APA91b" + fake(134, URLSAFE)))
    add(vendor("jwt", "ID_TOKEN", lambda: ".".join([
        b64('{"alg":"HS256","typ":"JWT"}').rstrip("="),
        b64('{"sub":"FAKE-' + rnd(8, LOWER) + '","name":"Fake User","iat":1516239022}').rstrip("="),
        fake(43, URLSAFE),
    ])))
    return rows


def private_keys() -> list[dict[str, str]]:
    rows = []
    for label in ("RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "DSA PRIVATE KEY"):
        body = "\n".join(fake(64, B64) for _ in range(R.randint(3, 8)))
        rows.append({"kind": "private_key_block", "text": f"$ cat key.pem\n-----BEGIN {label}-----\n{body}\n-----END {label}-----\n$ ", "secret": body})
    body = "\n".join(fake(64, B64) for _ in range(4))
    rows.append({"kind": "pgp_private_key_block", "text": f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{body}\n=AbCd\n-----END PGP PRIVATE KEY BLOCK-----", "secret": body})
    inner = "-----BEGIN PRIVATE KEY-----\\n" + "\\n".join(fake(64, B64) for _ in range(3)) + "\\n-----END PRIVATE KEY-----\\n"
    sa = {"type": "service_account", "project_id": "fake-project", "private_key_id": fake(40, HEX), "private_key": "PLACEHOLDER"}
    text = json.dumps(sa, indent=2).replace("PLACEHOLDER", inner)
    rows.append({"kind": "gcp_service_account_key", "text": text, "secret": inner.split("\\n")[1]})
    cut = "\n".join(fake(64, B64) for _ in range(3))
    rows.append({"kind": "private_key_block_truncated", "text": f"-----BEGIN RSA PRIVATE KEY-----\n{cut}", "secret": cut})
    return rows


def passwords() -> list[dict[str, str]]:
    """Passwords and other secret-named values, in the syntaxes they are written in."""
    words = ["correct", "horse", "battery", "staple", "violet", "anchor", "meadow", "copper", "lantern", "orbit"]

    def pw() -> str:
        return "FAKE" + rnd(4) + R.choice("!#%^*-_+") + rnd(6)

    def phrase() -> str:
        return "fake " + " ".join(R.sample(words, 4))

    def secret40() -> str:
        return fake(40, B64)

    cases: list[tuple[str, str, object]] = [
        # key-value syntaxes, the key spelled in its ecosystem's style
        ("env_password", "DB_PASSWORD={v}", pw),
        ("env_password", "export PGPASSWORD={v}", pw),
        ("env_password", "MYSQL_ROOT_PASSWORD='{v}' docker compose up -d", pw),
        ("env_password", "docker run -e POSTGRES_PASSWORD={v} -p 5432:5432 postgres:16", pw),
        ("env_password", "set REDIS_PASS={v}", pw),
        ("env_password", "$env:ADMIN_PWD = \"{v}\"", pw),
        ("dockerfile_env", "ENV SMTP_PASSWORD={v}", pw),
        ("yaml_password", "database:\n  host: db.internal\n  password: {v}\n  pool: 5", pw),
        ("yaml_password", "  - name: smtp\n    passwd: \"{v}\"", pw),
        ("toml_password", "[db]\nuser = \"app\"\npassword = \"{v}\"", pw),
        ("ini_password", "[client]\nuser=root\npassword={v}\n", pw),
        ("properties_password", "spring.datasource.password={v}", pw),
        ("json_password", '{{"username": "svc", "password": "{v}"}}', pw),
        ("json_password", '{{"dbPassword":"{v}","port":5432}}', pw),
        ("python_kwarg", "conn = psycopg.connect(host='db', user='app', password='{v}')", pw),
        ("python_assignment", "PASSWORD = \"{v}\"", pw),
        ("js_object", "const cfg = {{ user: 'svc', password: '{v}' }};", pw),
        ("js_backtick", "const pass = `{v}`;", pw),
        ("go_struct", "cfg := Config{{User: \"svc\", Password: \"{v}\"}}", pw),
        ("ruby_hash", "{{ :password => \"{v}\", :user => \"svc\" }}", pw),
        ("php_array", "$config['db_pass'] = '{v}';", pw),
        ("hcl", "resource \"x\" \"y\" {{\n  admin_password = \"{v}\"\n}}", pw),
        ("xml_element", "<connection><user>svc</user><password>{v}</password></connection>", pw),
        ("connection_string", "Server=tcp:db.example.net,1433;Database=app;User Id=svc;Password={v};Encrypt=True", pw),
        ("cli_long_flag", "app-cli login --username svc --password {v}", pw),
        ("cli_long_flag", "wget --http-password={v} https://files.example.com/a.tgz", pw),
        ("cli_long_flag", "vault login --token={v}", pw),
        ("mysql_p", "mysql -u root -p{v} -h db.internal app", pw),
        ("mysql_p", "mysqldump -uroot -p'{v}' --all-databases > dump.sql", pw),
        ("sshpass", "sshpass -p {v} ssh deploy@build.example.com", pw),
        ("sshpass", "sshpass -p '{v}' scp a.txt host:", pw),
        ("redis_cli", "redis-cli -h cache.internal -a {v} ping", pw),
        ("docker_login", "docker login -u ci -p {v} registry.example.com", pw),
        ("openssl_pass", "openssl pkcs12 -export -in c.pem -passout pass:{v} -out c.p12", pw),
        ("smbclient", "smbclient //fs/share -U alice%{v}", pw),
        ("curl_user", "curl -u admin:{v} https://api.example.com/v1/items", pw),
        ("curl_user", "curl --user 'deploy:{v}' https://ci.example.com", pw),
        ("netrc", "machine api.example.com login alice password {v}", pw),
        ("netrc", "machine build.example.org\n  login bob\n  password {v}", pw),
        ("passphrase_quoted", "PASSPHRASE=\"{v}\"", phrase),
        ("passphrase_quoted", "passphrase = '{v}'", phrase),
        ("passphrase_yaml", "ssh:\n  key_passphrase: {v}\n  user: git", phrase),
        ("passphrase_ini", "[gpg]\npassphrase = {v}\n", phrase),
        ("passphrase_json", '{{"passphrase": "{v}"}}', phrase),
        ("passphrase_triple_quotes", 'PASS_PHRASE = """{v}"""', phrase),
        ("password_with_spaces", "Password: {v}", phrase),
        # secret-named keys the old rules missed
        ("aws_secret_access_key", "aws_secret_access_key = {v}", secret40),
        ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY={v}", secret40),
        ("aws_secret_access_key", '{{"Credentials": {{"AccessKeyId": "ASIAFAKEFAKEFAKE1234", "SecretAccessKey": "{v}", "Expiration": "2024-06-08T12:00:00Z"}}}}', secret40),
        ("aws_secret_access_key", "secret_access_key: {v}", secret40),
        ("aws_session_token", "AWS_SESSION_TOKEN={v}", lambda: fake(300, B64)),
        ("secret_key", "SECRET_KEY = '{v}'", lambda: "django-insecure-" + fake(50, LOWER + "!@#$%^&*(-_=+)")),
        ("secret_key", "secret_key: {v}", secret40),
        ("secret_key", "app.config['SECRET_KEY'] = \"{v}\"", lambda: fake(32, HEX)),
        ("secret_key_base", "SECRET_KEY_BASE={v}", lambda: fake(128, HEX)),
        ("signing_key", "JWT_SIGNING_KEY={v}", lambda: fake(64, B64)),
        ("signing_key", '{{"signingKey": "{v}"}}', lambda: fake(44, B64)),
        ("signing_key", "signing-key: {v}", lambda: fake(32, HEX)),
        ("encryption_key", "ENCRYPTION_KEY={v}", lambda: fake(44, B64)),
        ("master_key", "RAILS_MASTER_KEY={v}", lambda: fake(32, HEX)),
        ("client_secret", "client_secret: {v}", lambda: fake(34, URLSAFE + "~.")),
        ("client_secret", "AZURE_CLIENT_SECRET=\"{v}\"", lambda: fake(3, ALNUM) + "8Q~" + rnd(31, URLSAFE + "~.")),
        ("webhook_secret", "GITHUB_WEBHOOK_SECRET={v}", lambda: fake(40, HEX)),
        ("hmac_key", "hmac_key = \"{v}\"", lambda: fake(64, HEX)),
        ("api_key_generic", "X_API_KEY={v}", lambda: fake(32, HEX)),
        ("api_key_generic", "apiKey: \"{v}\"", lambda: fake(40)),
        ("api_key_generic", "DATADOG_API_KEY={v}", lambda: fake(32, HEX)),
        ("api_key_generic", "HEROKU_API_KEY={v}", lambda: "deadbeef-" + rnd(4, HEX) + "-" + rnd(4, HEX) + "-" + rnd(4, HEX) + "-" + rnd(12, HEX)),
        ("access_token_generic", "CLOUDFLARE_API_TOKEN={v}", lambda: fake(40, URLSAFE)),
        ("access_token_generic", '{{"access_token": "{v}", "token_type": "Bearer", "expires_in": 3600}}', lambda: fake(40, URLSAFE)),
        ("refresh_token", '{{"refresh_token":"{v}"}}', lambda: fake(64, URLSAFE)),
        ("auth_token", "TWILIO_AUTH_TOKEN={v}", lambda: fake(32, HEX)),
        ("credentials", "credentials = \"{v}\"", lambda: "svc:" + fake(20)),
        ("private_key_value", "PRIVATE_KEY={v}", lambda: "0x" + fake(64, HEX)),
        ("npm_auth", "//registry.npmjs.org/:_authToken={v}", lambda: "deadbeef-" + rnd(4, HEX) + "-" + rnd(4, HEX) + "-" + rnd(4, HEX) + "-" + rnd(12, HEX)),
        ("docker_auth", '{{"auths": {{"registry.example.com": {{"auth": "{v}"}}}}}}', lambda: b64("ci:FAKE" + rnd(12))),
        # HTTP headers: the whole value, whatever the scheme
        ("authorization_bearer", "Authorization: Bearer {v}", lambda: fake(40, URLSAFE)),
        ("authorization_token", "curl -H \"Authorization: token {v}\" https://api.github.com/user", lambda: fake(40, HEX)),
        ("authorization_token", "Authorization: token {v}", lambda: fake(40, HEX)),
        ("authorization_basic", "authorization: Basic {v}", lambda: b64("svc:FAKE" + rnd(10))),
        ("authorization_other", "Authorization: SSWS {v}", lambda: "00" + fake(40, URLSAFE)),
        ("authorization_other", "Authorization: Api-Key {v}", lambda: fake(32)),
        ("authorization_other", "Proxy-Authorization: Digest username=\"svc\", response=\"{v}\"", lambda: fake(32, HEX)),
        ("cookie_header", "Cookie: sessionid={v}; csrftoken=abc123; theme=dark", lambda: fake(32, LOWER)),
        ("cookie_header", "Set-Cookie: session={v}; Path=/; HttpOnly; Secure", lambda: fake(48, URLSAFE)),
        ("cookie_header", "curl -b 'remember_token={v}' https://app.example.com", lambda: fake(40, HEX)),
        ("api_key_header", "X-Api-Key: {v}", lambda: fake(32)),
        ("api_key_header", "curl -H 'X-Auth-Token: {v}' https://cloud.example.com/v2", lambda: fake(32, HEX)),
        ("api_key_header", "PRIVATE-TOKEN: {v}", lambda: "glpat-" + fake(20, URLSAFE)),
        ("api_key_header", '{{"headers": {{"x-api-key": "{v}", "accept": "application/json"}}}}', lambda: fake(40)),
        # query parameters
        ("query_secret", "GET https://api.example.com/export?format=csv&access_token={v}", lambda: fake(32)),
        ("query_secret", "https://login.example.com/oauth/token?client_id=app&client_secret={v}&grant_type=x", lambda: fake(32)),
        ("query_secret", "https://maps.example.com/geo?q=berlin&key={v}", lambda: fake(39)),
        ("query_secret", "https://bucket.s3.amazonaws.com/o.txt?X-Amz-Signature={v}&X-Amz-Expires=60", lambda: fake(64, HEX)),
        ("query_secret", "wss://stream.example.com/ws?api_key={v}", lambda: fake(24)),
        # name/value pairs: the secret name is a value, the secret its sibling
        ("k8s_env_pair", "env:\n  - name: DB_PASSWORD\n    value: {v}\n  - name: LOG_LEVEL\n    value: debug", pw),
        ("json_name_value_pair", '[{{"name": "API_TOKEN", "value": "{v}"}}, {{"name": "REGION", "value": "eu-west-1"}}]', lambda: fake(32)),
        ("dotnet_app_setting", '<appSettings><add key="StripeSecretKey" value="{v}" /></appSettings>', lambda: fake(32)),
        ("xml_named_entry", '<entry name="smtp.password">{v}</entry>', pw),
        # more syntaxes
        ("helm_set", "helm upgrade app ./chart --set db.password={v} --set replicas=2", pw),
        ("kubectl_literal", "kubectl create secret generic app --from-literal=api-key={v}", lambda: fake(32)),
        ("odbc_connection_string", "Driver={{ODBC Driver 18}};Server=db;Uid=svc;Pwd={v};", pw),
        ("go_short_assignment", "apiKey := \"{v}\"", lambda: fake(32)),
        ("java_string", "private static final String DB_PASSWORD = \"{v}\";", pw),
        ("php_variable", "$password = '{v}';", pw),
        ("shell_ansi_c_quote", "export PASSWORD=$'{v}'", pw),
        ("yaml_block_scalar", "tls:\n  private_key: |\n    {v}\n  cert: ok", lambda: fake(64, B64)),
        ("env_passphrase_unquoted", "GPG_PASSPHRASE={v}", phrase),
        ("label", "Access key ID: AKIAFAKEFAKEFAKE0000\nSecret access key: {v}\nRegion: eu-west-1", secret40),
        ("label", "- API Key: {v}", lambda: fake(32)),
        ("authorization_inline", "requests.get(url, headers=dict(authorization='Bearer {v}'))", lambda: fake(40, URLSAFE)),
    ]
    rows = []
    for kind, template, make in cases:
        value = make()  # type: ignore[operator]
        rows.append({"kind": kind, "text": template.format(v=value), "secret": value})
    return rows


def urls() -> list[dict[str, str]]:
    """Credentials inside URLs: parsed as URLs, so ``@``, ``:`` and percent-escapes in a password count."""

    def pw(extra: str = "") -> str:
        return "FAKE" + rnd(5) + extra + rnd(5)

    cases = [
        ("db_url", "DATABASE_URL=postgres://appuser:{v}@db.internal:5432/app", pw()),
        ("db_url", "postgresql://app_user:{v}@db.example:5432/prod?sslmode=require", pw("%21")),
        ("db_url", "mysql://root:{v}@127.0.0.1:3306/shop", pw("@")),
        ("db_url", "mongodb+srv://svc:{v}@cluster0.fake.mongodb.net/?retryWrites=true", pw("@:")),
        ("db_url", "redis://:{v}@cache.local:6379/0", pw()),
        ("db_url", "rediss://default:{v}@redis.example.com:6380", pw("@@")),
        ("db_url", "amqp://guest:{v}@mq.internal:5672/vhost", pw(":")),
        ("db_url", "jdbc:postgresql://db:5432/app?user=svc&password={v}", pw()),
        ("db_url", "SQLALCHEMY_DATABASE_URI = 'mssql+pyodbc://sa:{v}@sql.example/app'", pw("%40")),
        ("url_userinfo", "pip install --index-url https://ci:{v}@pypi.example.com/simple pkg", pw()),
        ("url_userinfo", "git clone https://x-access-token:{v}@github.com/org/repo.git", "ghs_" + fake(36)),
        ("url_userinfo", "https://oauth2:{v}@gitlab.example.com/group/repo.git", "glpat-" + fake(20, URLSAFE)),
        ("url_userinfo", "https://alice:{v}@github.com (from ~/.git-credentials)", pw("@")),
        ("url_userinfo", "ftp://anon:{v}@ftp.example.org/pub/file.iso", pw(":")),
        ("url_userinfo", "smtp://mailer:{v}@smtp.example.com:587", pw("@")),
        ("url_userinfo", "postgres://app:{v}@db.internal/app", pw("/")),
        ("url_token_userinfo", "SENTRY_DSN=https://{v}@o123456.ingest.sentry.io/4504", fake(32, HEX)),
        ("url_token_userinfo", "https://{v}@github.com/org/private.git", "ghp_" + fake(36)),
        ("url_webhook", "post to https://hooks.slack.com/services/T0FAKE000/B0FAKE000/{v} now", fake(24)),
        ("url_webhook", "https://discord.com/api/webhooks/123456789012345678/{v}", fake(68, URLSAFE)),
        ("url_sas", "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&se=2024-07-01&sig={v}", fake(40, B64).replace("+", "%2B").replace("/", "%2F") + "%3D"),
    ]
    return [{"kind": kind, "text": template.format(v=value), "secret": value} for kind, template, value in cases]


def recall_corpus() -> list[dict[str, str]]:
    rows = vendor_tokens() + private_keys() + passwords() + urls()
    azure = "AccountKey=" + fake(86, B64) + "=="
    rows.append({"kind": "azure_storage_key", "text": f"DefaultEndpointsProtocol=https;AccountName=fake;{azure};EndpointSuffix=core.windows.net", "secret": azure[len("AccountKey="):]})
    sas = fake(44, B64) + "="
    rows.append({"kind": "azure_storage_key", "text": f"Endpoint=sb://fake-ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={sas}", "secret": sas})
    return rows


PRECISION: list[tuple[str, str]] = [
    # prose
    ("prose", "The password must be at least 12 characters long and may not reuse your last five passwords."),
    ("prose", "Tokens are counted with the provider's tokenizer; max_tokens caps the reply, not the prompt."),
    ("prose", "Rotate the API key every 90 days and store secrets in the vault, never in the repository."),
    ("prose", "If authentication fails, check that the Authorization header is present and not expired."),
    ("prose", "We fixed a bug where the session token was refreshed twice; see the changelog for 0.4.2."),
    ("prose", "A private key never leaves the machine; only the public key is uploaded to the server."),
    ("prose", "Cookies are set with SameSite=Lax by default, which is what most sites want."),
    ("prose", "Use /help to list commands, /reset to start over and /model to switch models."),
    ("prose", "Read it as and/or, not either/or; roughly 3/4 of the tests passed on 12/31/2024."),
    ("prose", "The secret to good sourdough is time: 18 hours at 21 degrees, then a hot oven."),
    ("prose", "Forgot your password? Use the reset link we emailed to you."),
    ("prose", "Key points: the cache key is the SHA-256 of the stable prefix; the primary key is (id, seq)."),
    ("prose", "To deploy the api, run make deploy; the token budget is 8 KiB per turn."),
    ("prose", "Bearer tokens go in a header, not in the URL, so proxies do not log them."),
    ("prose", "Passwords with spaces are fine: pass phrases are easier to remember and harder to guess."),
    ("prose", "The meeting moved to 14:30; agenda: budget, hiring, roadmap."),
    ("prose", "Ratio 16:9, time 09:41:07, scale 1:50,000 and a score of 3:2."),
    ("prose", "She said: \"keys are cheap, locks are not\" and left the room."),
    ("markdown", "## Configuration\n\n| key | default |\n| --- | --- |\n| `runtime.maxTurns` | 0 |\n| `context.skillMaxBytes` | 48000 |"),
    ("markdown", "- `password`: the database password (required)\n- `token_url`: where to fetch tokens from\n- `secret_name`: the name of the Kubernetes secret"),
    ("markdown", "See [the docs](https://docs.python.org/3/library/secrets.html) and `secrets.token_hex(32)`."),
    ("markdown", "```sh\npip install monoagent\nmonoagent run \"hello\"\n```"),
    # Python
    ("python", "def login(username: str, password: str) -> Session:\n    token = issue_token(username)\n    return Session(token=token)"),
    ("python", "class Settings(BaseSettings):\n    api_key: SecretStr\n    secret_key: Optional[str] = None\n    max_tokens: int = 4096"),
    ("python", "api_key = os.environ[\"OPENAI_API_KEY\"]\ntoken = os.getenv(\"GITHUB_TOKEN\")\npassword = getpass.getpass()"),
    ("python", "self.password = password\nself.api_key = api_key\nclient = Client(api_key=api_key, token=self.token)"),
    ("python", "if not token:\n    raise AuthError(\"missing token\")\nfor token in tokens:\n    count += len(token)"),
    ("python", "headers = {\"Authorization\": f\"Bearer {token}\", \"Accept\": \"application/json\"}"),
    ("python", "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())\nsecret = secrets.token_urlsafe(32)"),
    ("python", "conn = psycopg.connect(password=settings.DB_PASSWORD, host=settings.DB_HOST)"),
    ("python", "kwargs = {\"token\": token, \"password\": pw, \"secret\": None}\nreturn cls(**kwargs)"),
    ("python", "token_count = sum(len(t) for t in chunks)\npage_token = response.next_page_token\nmax_tokens = 1024"),
    ("python", "TOKEN_RE = re.compile(r\"\\b[A-Z]{3}-\\d{4}\\b\")\nSECRET_PATTERNS = [TOKEN_RE]"),
    ("python", "assert redact(text) == text, f\"changed: {text!r}\""),
    ("python", "parser.add_argument(\"--password\", help=\"the password (prompted when omitted)\")\nparser.add_argument(\"--api-key\", default=None)"),
    ("python", "cfg = {\"eos_token\": \"</s>\", \"bos_token\": \"<s>\", \"pad_token\": \"<pad>\", \"unk_token\": \"<unk>\"}"),
    ("python", "def test_login(client):\n    resp = client.post(\"/login\", data={\"username\": \"u\", \"password\": password})\n    assert resp.status_code == 200"),
    ("python", "import hashlib\ndigest = hashlib.sha256(b\"hello\").hexdigest()  # 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
    # JavaScript / TypeScript
    ("javascript", "const token = req.headers.authorization;\nconst password = process.env.DB_PASSWORD;\nexport default { token, password };"),
    ("javascript", "interface Credentials {\n  username: string;\n  password: string;\n  apiKey?: string;\n}"),
    ("javascript", "fetch(`${base}/v1/users/${id}`, { headers: { Authorization: `Bearer ${token}` } })"),
    ("javascript", "const html = '<div class=\"card\"><p>Hello</p></div>';\ndocument.body.innerHTML = html;"),
    ("javascript", "if (password.length < 12) { throw new Error('password too short'); }"),
    ("javascript", "app.get('/api/v1/users/:id', async (req, res) => res.json(await users.get(req.params.id)));"),
    # shell
    ("shell", "export PATH=$HOME/.local/bin:$PATH\nexport EDITOR=vim\nexport PGPASSWORD=$DB_PASSWORD"),
    ("shell", "docker run -p 8080:80 -e API_KEY=\"$API_KEY\" nginx:1.25"),
    ("shell", "ssh -p 2222 deploy@build.example.com 'systemctl restart app'"),
    ("shell", "git log --oneline -n 3\n3f2a9c1 Fix the retry loop\n8b0c4d7 Add the journal tier\nd41d8cd Initial commit"),
    ("shell", "curl -sS https://api.github.com/repos/pluggy/pluggy/releases/latest | jq -r .tag_name"),
    ("shell", "mysql -u root -p -h db.internal app   # prompts for the password"),
    ("shell", "read -s -p \"Password: \" PASSWORD\necho \"token length: ${#TOKEN}\""),
    ("shell", "for f in src/*.py; do python -m py_compile \"$f\"; done"),
    ("shell", "kubectl create secret generic db --from-literal=password=\"$(cat pw.txt)\""),
    ("shell", "gh auth login --with-token < token.txt"),
    ("shell", "ls -la ./build && tar -czf out.tgz build/ && sha256sum out.tgz"),
    # config files with references, not values
    ("yaml", "env:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n  NPM_TOKEN: ${{ secrets.NPM_TOKEN }}\nwith:\n  token: ${{ github.token }}"),
    ("yaml", "spec:\n  containers:\n    - name: app\n      env:\n        - name: DB_PASSWORD\n          valueFrom:\n            secretKeyRef:\n              name: db-credentials\n              key: password"),
    ("yaml", "password_min_length: 12\npassword_policy: strict\ntoken_ttl_seconds: 3600\nsecretName: tls-cert"),
    ("yaml", "database:\n  password: ${DB_PASSWORD}\n  user: ${DB_USER:-app}"),
    ("yaml", "auth:\n  enabled: true\n  provider: oidc\nsecrets: inherit"),
    ("toml", "[tool.poetry]\nname = \"app\"\nversion = \"1.2.3\"\n\n[tool.pytest.ini_options]\naddopts = \"-q\""),
    ("toml", "[providers.anthropic]\napiKeyEnv = \"ANTHROPIC_API_KEY\"\nmaxRetries = 2"),
    ("terraform", "resource \"aws_db_instance\" \"db\" {\n  password = var.db_password\n  username = \"app\"\n}"),
    ("json", "{\"token_type\": \"Bearer\", \"expires_in\": 3600, \"scope\": \"read write\"}"),
    ("json", "{\"usage\": {\"input_tokens\": 1200, \"output_tokens\": 512, \"cache_read_input_tokens\": 1024}}"),
    ("json", "{\"password\": null, \"token\": \"\", \"secret\": false, \"api_key\": \"<your-api-key>\"}"),
    ("json", "{\"apiKey\": \"${API_KEY}\", \"password\": \"{{ password }}\", \"token\": \"***\"}"),
    ("ini", "[mysqld]\nport = 3306\nmax_connections = 200\n# password is read from the environment"),
    # JSON-encoded content: escapes are not paths (the finding of item 15)
    ("json_escapes", "{\"text\": \"\\tTabbed\\nexport FOO=bar\\n\"}"),
    ("json_escapes", "{\"html\": \"<html><body><h1>Hi</h1></body></html>\", \"closed\": \"</div>\"}"),
    ("json_escapes", "{\"html\": \"<p>a<\\/p><br\\/>\", \"url\": \"https:\\/\\/example.com\\/a\"}"),
    ("json_escapes", "{\"cmd\": \"echo hi\\r\\nexit\", \"sep\": \"\\\\\", \"quote\": \"\\\"x\\\"\"}"),
    ("json_escapes", "{\"pattern\": \"\\\\d+\\\\s\\\\w+\", \"unicode\": \"\\u00e9\\u2014\\ud83d\\ude00\"}"),
    ("json_escapes", "{\"arguments\": {\"content\": \"line one\\n\\tindented\\n\\\\nliteral\\\\t\", \"mode\": \"w\"}}"),
    ("json_escapes", "[\"\\treport\", \"\\nnotes\", \"\\\\network\", \"\\u0041\"]"),
    ("markup", "<html>\n<head><title>Status</title></head>\n<body><ul><li>ok</li></ul></body>\n</html>"),
    ("markup", "<svg viewBox=\"0 0 24 24\"><path d=\"M12 2L2 7l10 5 10-5-10-5z\"/></svg>"),
    ("markup", "<?xml version=\"1.0\"?><config><timeout>30</timeout><retries>2</retries></config>"),
    ("markup", "<Button onClick={save}>Save</Button>\n</Form>\n</Layout>"),
    # logs
    ("log", "2024-06-08T10:15:02.123Z INFO  http GET /api/v1/users/42 200 12.3ms ua=\"curl/8.5.0\""),
    ("log", "127.0.0.1 - - [08/Jun/2024:10:15:02 +0000] \"POST /v1/chat/completions HTTP/1.1\" 200 1532"),
    ("log", "ERROR auth: invalid token for user_id=1842 (expired 2024-06-07T23:59:59Z)"),
    ("log", "WARN retrying request_id=req_01HZX3K9 attempt=2 delay_ms=400 code=http_429"),
    ("log", "run 7f9c2d1e-5b3a-4e8f-9c0d-1a2b3c4d5e6f settled: completed in 4.2 s (3 tool calls)"),
    ("log", "Traceback (most recent call last):\n  File \"app/main.py\", line 12, in <module>\n    main()\nKeyError: 'password'"),
    ("log", "[2024-06-08 10:15:02] token refresh ok; next refresh in 3600 s"),
    ("log", "Authorization failed: 403 Forbidden (missing scope repo)"),
    # ids and hashes that are not secrets
    ("hash", "commit 3f2a9c1e8b0c4d7a51de02aa9b0c4d7a3f2a9c1e\nAuthor: Alice <alice@example.com>"),
    ("hash", "sha256:9b0c4d7a51de02aa3f2a9c1e8b0c4d7a51de02aa3f2a9c1e8b0c4d7a51de02aa"),
    ("hash", "d41d8cd98f00b204e9800998ecf8427e  empty.txt\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  empty.bin"),
    ("hash", "\"integrity\": \"sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUR9hHV/qHgKvDyAzg==\""),
    ("uuid", "550e8400-e29b-41d4-a716-446655440000 123e4567-e89b-12d3-a456-426614174000"),
    ("uuid", "{\"id\": \"0f8fad5b-d9cb-469f-a165-70867728950e\", \"conversation_id\": \"c-42\"}"),
    ("id", "request id: req_01HZX3K9QWERTY, trace 4bf92f3577b34da6a3ce929d0e0e4736, span 00f067aa0ba902b7"),
    ("id", "image: ghcr.io/org/app@sha256:3f2a9c1e8b0c4d7a51de02aa9b0c4d7a3f2a9c1e8b0c4d7a51de02aa9b0c4d7a"),
    ("base64", "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="),
    # URLs without credentials
    ("url", "https://docs.python.org/3/library/sqlite3.html#sqlite3.Connection"),
    ("url", "https://example.com/search?q=sqlite+durability&page=2&sort=desc"),
    ("url", "https://github.com/pluggy/pluggy/issues/123#issuecomment-456"),
    ("url", "git@github.com:org/repo.git and ssh://git@github.com/org/repo.git"),
    ("url", "http://127.0.0.1:8080/v1/chat/completions and http://[::1]:9000/health"),
    ("url", "https://example.com/oauth/authorize?response_type=code&client_id=app&redirect_uri=https%3A%2F%2Fapp.example.com%2Fcb"),
    ("url", "https://user@example.com is a user, mailto:alice@example.com is mail"),
    ("url", "https://mastodon.social/@alice and https://host.example:8080/@team/notes"),
    ("prose", "The secret key: keep it safe. Secret name: db-creds"),
    # chat
    ("chat", "Can you summarise the thread? Keep it short: 3 bullets, no more."),
    ("chat", "I tried `pip install -U monoagent` and it worked, thanks!"),
    ("chat", "the key: keep history bounded, and the secret: fsync before rename"),
    ("chat", "Here is the diff:\n-    timeout = 30\n+    timeout = 60"),
    ("diff", "--- a/app/config.py\n+++ b/app/config.py\n@@ -1,3 +1,3 @@\n-MAX_TOKENS = 1024\n+MAX_TOKENS = 2048"),
    ("sql", "SELECT id, password_hash FROM users WHERE email = ? AND deleted_at IS NULL;"),
    ("sql", "CREATE TABLE api_keys (id INTEGER PRIMARY KEY, key_hash TEXT NOT NULL, created_at TEXT);"),
    ("csv", "name,role,team\nalice,admin,infra\nbob,dev,app"),
    ("regex", "s/foo/bar/g; tr/a-z/A-Z/; m/^\\d+$/"),
    ("windows", "cd src\\app && dir build\\out"),
    ("misc", "version 1.2.3-rc.1+build.5, python>=3.11,<4, numpy==1.26.4"),
    ("misc", "$ make test\n42 passed, 0 failed in 1.23s"),
    # code and configuration that name secrets without holding one
    ("python", "def check(password):\n    return hash(password) == stored\nuser.password = hashed_password"),
    ("python", "if token == expected_token:\n    return {'access_token': access_token, 'token_type': 'bearer'}"),
    ("python", "password: Optional[SecretStr] = Field(default=None, description='DB password')\ntoken: str | None = None"),
    ("python", "api_key = api_key or os.environ['KEY']\nauth = HTTPBasicAuth(user, password)\nsecret_key = get_random_secret_key()"),
    ("python", "credentials = service_account.Credentials.from_service_account_file(path)"),
    ("python", "tokens = tokenizer.encode(text)\nn_tokens = len(tokens)"),
    ("javascript", "const { token } = await login();"),
    ("yaml", "password: <%= ENV['DB_PASSWORD'] %>\ntoken: {{ .Values.api.token }}"),
    ("yaml", "- name: GITHUB_TOKEN\n  value: ${{ secrets.GITHUB_TOKEN }}\n- name: LOG_LEVEL\n  value: debug"),
    ("yaml", "max_tokens: 4096\ntemperature: 0.2\nauth: enabled\ncookie: none"),
    ("yaml", "key_file: certs/server.key\npassword_file: secrets/db.txt\ntoken_url: https://auth.example.com/token"),
    ("yaml", "api_key_header: X-Api-Key\nTOKEN_LIMIT: 4096\nis_secret: true"),
    ("shell", "echo \"$PASSWORD\" | docker login --password-stdin registry.example.com"),
    ("shell", "ssh-keygen -t ed25519 -C me@example.com && git config credential.helper store"),
    ("prose", "The API key: see the dashboard. Passwords: at least 12 characters. Authorization: required."),
    ("log", "Token usage: 1,234 input, 567 output. Session token expired at 10:15."),
    ("json", "[{\"name\": \"REGION\", \"value\": \"eu-west-1\"}, {\"name\": \"DB_PASSWORD\", \"valueFrom\": \"arn:aws:ssm:eu-west-1:123456789012:parameter/db\"}]"),
]


def precision_corpus() -> list[dict[str, str]]:
    return [{"kind": kind, "text": text} for kind, text in PRECISION]


def render() -> dict[str, str]:
    """The files' contents as :func:`write` would write them (the seed makes them reproducible)."""
    global R
    R = random.Random(SEED)
    note = "Every credential here is FAKE, generated by make_redaction_corpora.py from a fixed seed."
    return {
        name: json.dumps({"note": note, "entries": rows}, indent=1, ensure_ascii=False) + "\n"
        for name, rows in (("redaction_recall.json", recall_corpus()), ("redaction_precision.json", precision_corpus()))
    }


if __name__ == "__main__":
    for name, text in render().items():
        (HERE / name).write_text(text, encoding="utf-8")
