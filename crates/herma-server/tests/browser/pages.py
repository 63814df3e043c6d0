"""Herma's pages in headless Chromium (Debian's chromium and chromedriver, driven by Selenium).

Run by the Rust test `pages::h14_pages_render_in_headless_chromium` with HERMA_BASE and
HERMA_ARTIFACTS (where the screenshots go). Checks, with JavaScript on: every page loads with no
console errors (CSP violations included), loads nothing from another origin, draws the SVG brand,
fits a phone's width; the playground runs a preview through /api/preview in place. With
JavaScript off: the landing and docs pages and the playground's form (posted to /preview) work.
Prints {"checks": N, "screenshots": [...]} and exits 0 when all hold.
"""

import json
import os
import sys

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["HERMA_BASE"]
ARTIFACTS = os.environ["HERMA_ARTIFACTS"]
CHROMIUM = os.environ.get("HERMA_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HERMA_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
PAGES = {"landing": "/", "docs": "/docs", "playground": "/preview"}

checks = 0
shots = []


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


def browser(javascript=True, width=1280, height=900):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-extensions", "--no-first-run",
                 "--disable-sync", "--disable-component-update", "--disable-default-apps",
                 "--hide-scrollbars", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))


def wait_decision(driver, expected):
    """Waits until the result panel shows `expected` (the panel is replaced as a whole)."""
    wait = WebDriverWait(driver, 10, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#result-body #decision").text == expected)
    return True


def console_errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]


def screenshot(driver, name):
    path = os.path.join(ARTIFACTS, f"{name}.png")
    # The whole page, not just the viewport.
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, max(height, 400))
    check(driver.save_screenshot(path), f"screenshot {name} saved")
    shots.append(path)


def foreign_resources(driver):
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [u for u in urls if not u.startswith(BASE)]


os.makedirs(ARTIFACTS, exist_ok=True)

# --- JavaScript on, desktop -----------------------------------------------------------------
driver = browser()
try:
    for name, path in PAGES.items():
        driver.get(BASE + path)
        WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.readyState") == "complete")
        check(driver.title.endswith("Herma") or driver.title.startswith("Herma"), f"{name}: title ({driver.title})")
        logo = driver.find_element(By.CSS_SELECTOR, "header .brand svg")
        check(logo.size["width"] > 0 and logo.size["height"] > 0, f"{name}: the SVG brand mark is drawn")
        sheet = driver.execute_script("return getComputedStyle(document.querySelector('header.bar')).backgroundColor")
        check(sheet == "rgb(20, 33, 61)", f"{name}: the stylesheet applied ({sheet})")
        check(foreign_resources(driver) == [], f"{name}: nothing loaded from another origin")
        overflow = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 0, f"{name}: no horizontal overflow (overflow {overflow}px)")
        errors = console_errors(driver)
        check(errors == [], f"{name}: no console errors: {errors}")
        screenshot(driver, f"{name}-desktop")
        driver.set_window_size(1280, 900)

    # The playground runs in place through /api/preview.
    driver.get(BASE + "/preview")
    driver.find_element(By.ID, "prompt").send_keys("how do I force push safely?")
    driver.find_element(By.CSS_SELECTOR, "#preview-form button[type=submit]").click()
    check(wait_decision(driver, "shim_context"), "playground (JS): decision")
    check(driver.current_url == BASE + "/preview", "playground (JS): no page load")
    body = driver.find_element(By.ID, "result-body").text
    check("git.force-push" in body and "--force-with-lease" in body, "playground (JS): the match and the shim are shown")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#result-body details")) == 1, "playground (JS): the API call is shown")
    # An example link fills the prompt and runs it.
    driver.find_element(By.CSS_SELECTOR, ".examples a[data-prompt='/herma help']").click()
    wait_decision(driver, "respond_directly")
    check("Herma" in driver.find_element(By.ID, "result-body").text, "playground (JS): a direct answer is shown")
    # Markup typed into the prompt stays text.
    driver.find_element(By.ID, "prompt").clear()
    driver.find_element(By.ID, "prompt").send_keys("<img src=x onerror=alert(1)> force push")
    driver.find_element(By.CSS_SELECTOR, "#preview-form button[type=submit]").click()
    wait_decision(driver, "shim_context")
    check(driver.find_elements(By.CSS_SELECTOR, "#result-body img") == [], "playground (JS): markup is not interpreted")
    errors = console_errors(driver)
    check(errors == [], f"playground (JS): no console errors: {errors}")
    overflow = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    check(overflow <= 0, f"playground result: no horizontal overflow (overflow {overflow}px)")

    screenshot(driver, "playground-result-desktop")
finally:
    driver.quit()

# --- JavaScript on, a phone's width -----------------------------------------------------------
driver = browser(width=390, height=844)
try:
    for name, path in PAGES.items():
        driver.get(BASE + path)
        overflow = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 0, f"{name}: fits a phone's width (overflow {overflow}px)")
        check(console_errors(driver) == [], f"{name} (phone): no console errors")
        screenshot(driver, f"{name}-phone")
        driver.set_window_size(390, 844)
finally:
    driver.quit()

# --- JavaScript off ---------------------------------------------------------------------------
driver = browser(javascript=False)
try:
    check(driver.execute_script is not None, "driver ready")
    driver.get(BASE + "/")
    check("rules and context" in driver.find_element(By.TAG_NAME, "h1").text, "landing (no JS): content")
    driver.get(BASE + "/docs")
    check(len(driver.find_elements(By.CSS_SELECTOR, "article h2")) >= 8, "docs (no JS): sections")
    driver.find_element(By.CSS_SELECTOR, "aside a[href='#mcp']").click()
    check(driver.current_url.endswith("#mcp"), "docs (no JS): in-page navigation")
    driver.get(BASE + "/preview")
    driver.find_element(By.ID, "prompt").send_keys("rotate the api key in config/.env")
    driver.find_element(By.CSS_SELECTOR, "#preview-form button[type=submit]").click()
    check(wait_decision(driver, "shim_context"), "playground (no JS): decision")
    check("secrets.hygiene" in driver.find_element(By.ID, "result-body").text, "playground (no JS): the match is shown")
    check(driver.find_elements(By.CSS_SELECTOR, "#result-body details") == [], "playground (no JS): rendered by the server")
    check(driver.find_element(By.ID, "prompt").get_attribute("value") == "rotate the api key in config/.env", "playground (no JS): the prompt is kept")
    # An example link pre-fills the form.
    driver.find_element(By.CSS_SELECTOR, ".examples a[data-prompt='/herma help']").click()
    check(driver.find_element(By.ID, "prompt").get_attribute("value") == "/herma help", "playground (no JS): example link fills the prompt")
    screenshot(driver, "playground-nojs")
finally:
    driver.quit()

print(json.dumps({"checks": checks, "screenshots": shots}))
