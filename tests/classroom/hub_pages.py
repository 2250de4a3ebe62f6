"""The pages the classroom test drives: the hub's login, JupyterLab's Assignments tab, formgrader.

Selectors are nbgrader 0.9's and JupyterLab 4's; each helper waits for what it needs, with
bounded waits, so a slow machine is slow rather than flaky.
"""

from __future__ import annotations

import time

LESSON = "05_choosing_the_numbers"  # the quickest lesson to execute (about 9 s on 2 cores)


def login(browser, url: str, user: str, password: str):
    """A browser context of its own, logged in through the hub's form; the hub starts the
    user's server meanwhile (its progress page) and :func:`lab` waits for it."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(lambda u: "/hub/login" not in u)
    return page


def lab(page, user: str):
    """Wait for the user's JupyterLab, started by the hub after :func:`login`."""
    page.wait_for_url(f"**/user/{user}/lab**", timeout=180_000)  # the spawn
    page.wait_for_selector(".jp-LabShell", timeout=120_000)
    return page


def dismiss_dialogs(page) -> None:
    """Close Lab's dialogs (a slow machine can time out a stylesheet and say so in one)."""
    while page.locator(".jp-Dialog").count():
        page.keyboard.press("Escape")
        time.sleep(0.3)


def open_assignments(page) -> None:
    """Nbgrader → Assignment List (retried: menus can be mid-layout on a busy machine)."""
    for attempt in range(4):
        dismiss_dialogs(page)
        try:
            page.get_by_role("menuitem", name="Nbgrader", exact=True).click(timeout=15_000)
            page.get_by_role("menuitem", name="Assignment List").click(timeout=15_000)
            page.locator("#released_assignments_list").wait_for(timeout=30_000)
            return
        except Exception:
            page.keyboard.press("Escape")
            if attempt == 3:
                raise


def in_list(page, list_id: str):
    return page.locator(f"#{list_id} .list_item", has_text=LESSON).first


def formgrader_button(page, column: str, timeout: float = 300) -> str:
    """Click the lesson's button in formgrader's Manage Assignments; the dialog's text."""
    row = page.locator("tr", has_text=LESSON).first
    row.locator(f"td.{column} a").click()
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = " ".join(page.locator(".modal-dialog:visible").all_inner_texts())
        if "Success" in text or "Error" in text or "rror" in text:
            break
        time.sleep(0.3)
    assert "Success" in text, f"formgrader {column}: {text[-2000:]}"
    page.locator(".modal-dialog:visible").get_by_role("button", name="OK").click()
    page.locator(".modal-dialog:visible").wait_for(state="hidden")
    return text
