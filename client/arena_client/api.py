"""The arena's REST API over HTTP: a bearer token on every request, the API's error
envelope (``{"error": {"code", "message"}}``) turned into ``ApiError``. The token is sent
and never shown: no message here quotes it."""

import time
from typing import Any

import httpx

# A poll (GET) answered 429 or 503 is asked again after the server's Retry-After, at most
# this many times; anything else is the caller's to report.
GET_RETRIES = 5
RETRY_AFTER_CAP_S = 30.0
TIMEOUT_S = 60.0


class ApiError(Exception):
    """The server said no (``status`` and its ``code``), or could not be reached
    (``status`` 0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        if self.status == 0:
            return self.message
        hint = ""
        if self.status == 401:
            hint = " (the token was refused: check ARENA_TOKEN or --token)"
        return f"HTTP {self.status} {self.code}: {self.message}{hint}"


def _error_of(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "message" in error:
        message = str(error["message"])
        if isinstance(error.get("fields"), dict):
            message += " " + "; ".join(f"{k}: {v}" for k, v in error["fields"].items())
        return ApiError(response.status_code, str(error.get("code", "error")), message)
    text = response.text.strip().splitlines()
    return ApiError(
        response.status_code,
        "error",
        f"{response.reason_phrase or 'error'}: {text[0][:200] if text else 'no body'}",
    )


def _retry_after(response: httpx.Response) -> float:
    try:
        seconds = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.1), RETRY_AFTER_CAP_S)


class Api:
    def __init__(self, url: str, token: str, *, transport: httpx.BaseTransport | None = None):
        self.base = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "arena-client"},
            timeout=TIMEOUT_S,
            transport=transport,
        )

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        attempts = GET_RETRIES + 1 if method == "GET" else 1
        for attempt in range(attempts):
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                raise ApiError(
                    0, "unreachable", f"cannot reach the arena at {self.base}: {exc}"
                ) from None
            if response.status_code in (429, 503) and attempt + 1 < attempts:
                time.sleep(_retry_after(response))
                continue
            if response.status_code >= 400:
                raise _error_of(response)
            return response
        raise AssertionError("unreachable")  # the loop returns or raises

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        response = self.request("POST", path, **kwargs)
        return response.status_code, response.json()
