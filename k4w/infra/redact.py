"""Keep proxy credentials and per-build passwords out of every log line, plan and error.

`redact` is the one redaction function: the console (k4w.infra.ui), the build's progress and log
(k4w.bake), the dry runs and the cache index all call it.
"""

import re

# The userinfo of a URL (RFC 3986 section 3.2.1: userinfo = *( unreserved / pct-encoded /
# sub-delims / ":" ), ended by the LAST "@" of the authority). Every shape is covered:
# user:password@, :password@ (empty user), user@, :@, percent-encoded characters, an "@" left
# unencoded in the password (the authority ends at the last "@" before "/", "?", "#" or
# whitespace, which is where curl and Go's net/url put the host too), IPv6 hosts ([::1]) and any
# scheme (http, https, socks5...). Quotes and angle brackets end it: they never appear unencoded
# in a URL, and printed command lines and JSON put URLs between them.
_AUTHORITY_END = r"/?#\s\"'<>`"
_URL_CREDENTIALS = re.compile(rf"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^{_AUTHORITY_END}]*@")
# The same without a scheme, as some tools print a proxy (user:password@proxy:3128). It needs the
# ':' of a password, so a plain e-mail address or an ssh target (vagrant@host) stays readable.
_BARE_CREDENTIALS = re.compile(rf"(?<![^\s\"'=(<,\[{{])[^{_AUTHORITY_END}:@]*:[^{_AUTHORITY_END}]*@(?=[\w\[])")

# An HTTP credential header, as Packer, curl -v or a proxy log prints it, e.g.
# "Proxy-Authorization: Basic Ym9iOnMzY3JldA==" (base64 is an encoding, not a secret-keeper).
_AUTH_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*)(basic|bearer|digest|ntlm|negotiate)\s+[^\s\"',]+")

# A kubeadm bootstrap token, as `kubeadm init` prints it in its join command: id.secret
# (k8s.io/cluster-bootstrap@v0.37.2 token/api/types.go BootstrapTokenPattern
# `\A([a-z0-9]{6})\.([a-z0-9]{16})\z`). The secret authenticates a joining node; the id only names
# the token, so it stays readable.
_BOOTSTRAP_TOKEN = re.compile(r"\b([a-z0-9]{6})\.[a-z0-9]{16}\b")
# A kubeconfig's credentials, as `cat admin.conf` prints them: the AuthInfo fields client-go marks
# datapolicy security-key, token and password (k8s.io/client-go@v0.37.2 tools/clientcmd/api/v1/types.go).
_KUBECONFIG_SECRET = re.compile(r"(?m)^([\s-]*(?:client-key-data|token|password):[ \t]*)\S+")

_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a value that must never be printed (e.g. a generated password)."""
    if value and len(value) >= 4:
        _secrets.add(value)


def redact(text: str) -> str:
    text = _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)
    text = _BARE_CREDENTIALS.sub("***@", text)
    text = _AUTH_HEADER.sub(r"\1\2 ***", text)
    text = _BOOTSTRAP_TOKEN.sub(r"\1.***", text)
    text = _KUBECONFIG_SECRET.sub(r"\1***", text)
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
