"""Screenshot of the live leaderboard for the docs: a 1280×800 PNG of a running arena.

    make run &                                   # the arena on 127.0.0.1:8000
    .venv/bin/python tests/e2e/screenshot_leaderboard.py [--base-url URL] [--out PATH]

Waits until the page's websocket has delivered the current rows, so the picture shows
what a visitor sees live. Only loopback addresses are accepted: the headless Chromium
talks to nothing else."""

import argparse
import ipaddress
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/lib/chromium/chromium"
CHROMIUM_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 800}
PAGE_PROBE = """
window.__wsMessages = 0;
document.addEventListener("htmx:wsAfterMessage", () => { window.__wsMessages += 1; });
"""


def loopback_only(url: str) -> str:
    host = urlsplit(url).hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise SystemExit(f"screenshot: {url} is not a loopback address")
    return url.rstrip("/")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "leaderboard.png")
    args = parser.parse_args()
    base_url = loopback_only(args.base_url)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            chromium_sandbox=os.geteuid() != 0,  # Chromium's sandbox refuses root
            args=CHROMIUM_ARGS,
        )
        try:
            context = browser.new_context(
                viewport=VIEWPORT,
                device_scale_factor=1,
                bypass_csp=True,  # wait_for_function
            )
            context.add_init_script(PAGE_PROBE)
            page = context.new_page()
            response = page.goto(base_url + "/")
            if response is None or not response.ok:
                status = response.status if response else "no response"
                sys.exit(f"screenshot: {base_url}/ answered {status}")
            page.wait_for_function("window.__wsMessages >= 1", timeout=15_000)
            page.screenshot(path=str(args.out), full_page=False)
        finally:
            browser.close()
    print(f"screenshot: wrote {args.out} ({VIEWPORT['width']}x{VIEWPORT['height']})")


if __name__ == "__main__":
    main()
