"""Screenshots of the judge page and the staff judging-quality page for the docs, from a
running arena with the seeded demo (``manage.py seed_demo``: judged battles, redundancy
votes, exclusions).

    make run &                                   # the arena on 127.0.0.1:8000
    .venv/bin/python tests/e2e/screenshot_judging.py [--base-url URL] [--out-dir DIR]

Logs in as the demo's ``admin`` (password from ARENA_ADMIN_PASSWORD, else the
demo-logins.txt that seed_demo wrote), opens /judge/ (which serves admin the next battle),
waits for the reading time so the vote buttons are live, and takes docs/judge.png (at
1280 × 800, both sides on their latest screen); then
docs/judging-quality.png of /judging/quality/. Only loopback addresses are accepted."""

import argparse
import os
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.e2e.screenshot_leaderboard import CHROMIUM, CHROMIUM_ARGS, ROOT, loopback_only

# The judge page fits a 1280 × 800 window whole (docs/pages.md): the picture shows it so.
JUDGE_VIEWPORT = {"width": 1280, "height": 800}
QUALITY_VIEWPORT = {"width": 1280, "height": 900}


def admin_password(logins: Path) -> str:
    if os.environ.get("ARENA_ADMIN_PASSWORD"):
        return os.environ["ARENA_ADMIN_PASSWORD"]
    if logins.exists():
        for line in logins.read_text().splitlines():
            user, _, password = line.partition(" ")
            if user == "admin":
                return password
    sys.exit(f"screenshot: no admin password (ARENA_ADMIN_PASSWORD, or {logins})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs")
    parser.add_argument(
        "--logins",
        type=Path,
        default=Path(os.environ.get("ARENA_DATA_DIR", ROOT / "var")) / "demo-logins.txt",
    )
    args = parser.parse_args()
    base_url = loopback_only(args.base_url)
    password = admin_password(args.logins)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            chromium_sandbox=os.geteuid() != 0,  # Chromium's sandbox refuses root
            args=CHROMIUM_ARGS,
        )
        try:
            context = browser.new_context(
                bypass_csp=True,  # wait_for_function evaluates a string
                base_url=base_url,
                viewport=JUDGE_VIEWPORT,
                device_scale_factor=1,
            )
            page = context.new_page()
            page.goto("/accounts/login/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", password)
            page.get_by_role("button", name="Log in", exact=True).click()
            page.wait_for_load_state("networkidle")
            if "/accounts/login/" in page.url:
                sys.exit("screenshot: the admin log-in was refused")

            page.goto("/judge/")
            if page.locator("#vote-form").count() == 0:
                sys.exit("screenshot: nothing to judge; seed the demo first (seed_demo)")
            read_s = float(page.locator("#vote-form").get_attribute("data-read-left"))
            page.locator('#vote-form button[value="A"]').wait_for(state="visible")
            page.wait_for_function(
                "!document.querySelector('#vote-form button[value=\"A\"]').disabled",
                timeout=(read_s + 10) * 1000,
            )
            # each side rests on its latest meaningful screen, as a judge first sees it
            page.wait_for_load_state("networkidle")
            judge_png = args.out_dir / "judge.png"
            page.screenshot(path=str(judge_png), full_page=False)

            page.set_viewport_size(QUALITY_VIEWPORT)
            response = page.goto("/judging/quality/")
            if response is None or not response.ok:
                sys.exit(f"screenshot: /judging/quality/ answered {response and response.status}")
            quality_png = args.out_dir / "judging-quality.png"
            page.screenshot(path=str(quality_png), full_page=True)
        finally:
            browser.close()
    print(f"screenshot: wrote {judge_png} and {quality_png}")


if __name__ == "__main__":
    main()
