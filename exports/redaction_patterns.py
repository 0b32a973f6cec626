"""The redaction's own detectors, as data: regular expressions (the ``regex`` module's
dialect, which Presidio compiles them with) for what Presidio does not ship — street
addresses, UK postcodes and credentials.

Every pattern is linear on hostile input: bounded repetitions, possessive loops where a
block spans lines, and lookbehinds anchored on a literal so that the value alone (not
the ``password=`` before it) is replaced. They are case-sensitive unless they say
``(?i)``. Pure data: nothing here imports Django or Presidio."""

from typing import NamedTuple


class PatternSpec(NamedTuple):
    entity_type: str
    name: str
    regex: str
    score: float


_STREET_TYPES = (
    r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl"
    r"|Terrace|Way|Square|Sq|Highway|Hwy|Parkway|Pkwy|Circle|Cir|Crescent|Close|Row"
    r"|Alley|Trail|Mews|Gardens|Walk|Hill)"
)
# a capitalised word or an ordinal ("5th"), the parts of a street's name
_NAME_WORD = r"(?:[A-Z][A-Za-z'\-]{0,30}|\d{1,3}(?:st|nd|rd|th))"
_UNIT = r"(?:,?\s{1,3}(?:Apt|Apartment|Suite|Ste|Unit|Flat|Floor|#)\.?\s{0,3}[\w\-]{1,8})?"

STREET_ADDRESS_PATTERNS = (
    # 42 Baker Street / 1600 Pennsylvania Ave NW, Apt 4 / 350 5th Avenue
    PatternSpec(
        "STREET_ADDRESS",
        "number, street name, street type",
        rf"\b\d{{1,6}}[A-Za-z]?(?:-\d{{1,6}})?,?[ \t]{{1,3}}(?:{_NAME_WORD}[ \t]{{1,3}}){{0,3}}"
        rf"{_NAME_WORD}[ \t]{{1,3}}{_STREET_TYPES}\b\.?(?:[ \t]{{1,3}}(?:N|S|E|W|NE|NW|SE|SW)\b)?"
        rf"{_UNIT}",
        0.7,
    ),
    # Hauptstraße 5 / Berliner Str. 12a / Am Lindenweg 3
    PatternSpec(
        "STREET_ADDRESS",
        "German street and number",
        r"\b(?:[A-ZÄÖÜ][a-zäöüß\-]{1,30}[ \t]{1,3}){0,2}[A-ZÄÖÜ][a-zäöüß\-]{0,30}"
        r"(?:straße|strasse|str\.|Straße|Strasse|Str\.|weg|Weg|gasse|Gasse|allee|Allee"
        r"|platz|Platz|ring|damm)[ \t]{1,3}\d{1,4}[a-z]?\b",
        0.7,
    ),
    # 12 rue de la Paix / 5 bis, avenue Victor Hugo
    PatternSpec(
        "STREET_ADDRESS",
        "French number and street",
        r"\b\d{1,4}(?:[ \t]?(?:bis|ter))?,?[ \t]{1,3}(?:rue|avenue|av\.|boulevard|bd|place"
        r"|chemin|allée|impasse|quai|cours)[ \t]{1,3}(?:de[ \t]la[ \t]|de[ \t]l'|du[ \t]"
        r"|des[ \t]|de[ \t]|d')?[A-ZÉÈ][\w'\-]{0,30}(?:[ \t][A-ZÉÈ][\w'\-]{0,30}){0,3}",
        0.7,
    ),
)

POSTAL_CODE_PATTERNS = (
    PatternSpec(
        "POSTAL_CODE",
        "UK postcode",
        r"\b(?:[A-PR-UWYZ][A-HK-Y]?\d[A-Z\d]?)[ \t]?\d[ABD-HJLNP-UW-Z]{2}\b",
        0.5,
    ),
)

# key = value, key: value, "key": "value" — the value after a credential's name
_CREDENTIAL_NAME = (
    r"(?:[A-Za-z0-9]{1,30}[_.\-]){0,4}(?:password|passwd|passphrase|pwd|pass|secret"
    r"|token|api[_\-]?key|apikey|access[_\-]?key|secret[_\-]?key|private[_\-]?key"
    r"|credentials?|client[_\-]?secret|auth)"
)
_VALUE = r"[^\s\"'&,;<>]{3,300}"

CREDENTIAL_PATTERNS = (
    PatternSpec(
        "PRIVATE_KEY",
        "PEM private key block",
        # the header, then base64 or "Name: value" lines (newlines real or escaped),
        # possessively, then the footer when there is one: a truncated key goes too
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:(?:\r?\n|\\n)"
        r"(?:[A-Za-z0-9+/=]{1,200}|[A-Za-z\-]{1,40}: [^\r\n\\]{0,200})?)*+"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
        1.0,
    ),
    PatternSpec(
        "JWT",
        "JSON Web Token",
        r"\beyJ[A-Za-z0-9_\-]{5,4000}\.eyJ[A-Za-z0-9_\-]{5,8000}\.[A-Za-z0-9_\-]{0,2000}",
        0.95,
    ),
    PatternSpec(
        "API_KEY",
        "provider API key",
        r"\b(?:sk-[A-Za-z0-9_\-]{20,300}"  # OpenAI, Anthropic (sk-ant-...)
        r"|gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{30,255}"  # GitHub
        r"|glpat-[A-Za-z0-9_\-]{20,100}"  # GitLab
        r"|xox[abposr]-[A-Za-z0-9\-]{10,200}"  # Slack
        r"|AIza[0-9A-Za-z_\-]{35}"  # Google
        r"|[rsp]k_(?:live|test)_[0-9A-Za-z]{16,200}"  # Stripe
        r"|hf_[A-Za-z0-9]{30,100}"  # Hugging Face
        r"|npm_[A-Za-z0-9]{36}"  # npm
        r"|arena_[A-Za-z0-9_\-]{40,100}|invite_[A-Za-z0-9_\-]{40,100}"  # this arena's own
        r")",
        0.95,
    ),
    PatternSpec(
        "AWS_ACCESS_KEY",
        "AWS access key id",
        r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|APKA)[0-9A-Z]{16}\b",
        0.95,
    ),
    PatternSpec(
        "URL_CREDENTIALS",
        "user and password in a URL",
        r"(?<=\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://)[^\s/?#@\"'<>]{1,200}(?=@[^\s/?#@])",
        0.95,
    ),
    PatternSpec(
        "BEARER_TOKEN",
        "Authorization header value",
        r"(?i)(?<=\bauthorization[\"']?[ \t]{0,5}[:=][ \t]{0,5}[\"']?"
        r"(?:(?:bearer|basic|token|digest)[ \t]{1,5})?)[A-Za-z0-9._~+/=\-]{8,4000}",
        0.9,
    ),
    PatternSpec(
        "BEARER_TOKEN",
        "Bearer token",
        r"(?i)(?<=\bbearer[ \t]{1,5})[A-Za-z0-9._~+/\-]{16,4000}=*",
        0.9,
    ),
    PatternSpec(
        "PASSWORD",
        "credential-named assignment",
        rf"(?i)(?<=\b{_CREDENTIAL_NAME}[\"']?[ \t]{{0,5}}[:=][ \t]{{0,5}}[\"']?){_VALUE}",
        0.8,
    ),
    # a quoted value may hold spaces: up to its closing quote
    PatternSpec(
        "PASSWORD",
        "credential-named assignment, double-quoted",
        rf"(?i)(?<=\b{_CREDENTIAL_NAME}\"?[ \t]{{0,5}}[:=][ \t]{{0,5}}\")[^\"\r\n]{{1,300}}(?=\")",
        0.8,
    ),
    PatternSpec(
        "PASSWORD",
        "credential-named assignment, single-quoted",
        rf"(?i)(?<=\b{_CREDENTIAL_NAME}'?[ \t]{{0,5}}[:=][ \t]{{0,5}}')[^'\r\n]{{1,300}}(?=')",
        0.8,
    ),
    PatternSpec(
        "PASSWORD",
        "credential-named URL query parameter",
        r"(?i)(?<=[?&;](?:[a-z0-9_.\-]{0,30}(?:token|key|secret|password|passwd|pwd|sig"
        r"|signature|credential|auth|code|session|sessionid|sid)|x-amz-[a-z\-]{1,30})=)"
        r"[^\s&#\"'<>]{3,4000}",
        0.8,
    ),
    PatternSpec(
        "PASSWORD",
        "credential-named command-line option",
        r"(?i)(?<=(?:^|[ \t])--?(?:password|passwd|pass|token|api-key|apikey|secret"
        r"|access-token|auth-token|client-secret)(?:=|[ \t]{1,5})[\"']?)[^\s\"']{3,300}",
        0.8,
    ),
    PatternSpec(
        "PASSWORD",
        "user:password after -u or --user (curl, wget)",
        r"(?<=(?:^|[ \t])(?:-u|--user)[ \t=]{1,5}[\"']?)[^\s\"':]{1,100}:[^\s\"']{1,300}",
        0.8,
    ),
    PatternSpec(
        "PASSWORD",
        "sshpass -p password",
        r"(?<=\bsshpass[ \t]{1,5}-p[ \t]{0,5}[\"']?)[^\s\"']{1,300}",
        0.8,
    ),
)

PATTERNS: tuple[PatternSpec, ...] = (
    *STREET_ADDRESS_PATTERNS,
    *POSTAL_CODE_PATTERNS,
    *CREDENTIAL_PATTERNS,
)
