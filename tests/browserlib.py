"""A real headless browser for the tests: Debian's chromium driven through
chromium-driver by selenium (scripts/setup.sh installs all three). Tests that
need one exit 77 (reported skipped) where it is missing, saying so."""
import os
import shutil
import sys

from testlib import source_dir

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def browser(width=1280, height=800, dark=False):
    """A headless Chromium at width x height CSS pixels (device scale 1)."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        print("SKIPPED: chromium or chromium-driver is not installed (scripts/setup.sh test "
              "installs them)")
        sys.exit(77)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={width},{height}", "--force-device-scale-factor=1",
              "--no-first-run", "--disable-extensions"]:
        opts.add_argument(a)
    if dark:
        opts.add_argument("--force-dark-mode")
        opts.add_argument("--blink-settings=preferredColorScheme=0")
    else:
        opts.add_argument("--blink-settings=preferredColorScheme=1")
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    # The window's outer size includes no chrome in headless mode; set the viewport exactly.
    driver.set_window_size(width, height)
    return driver


def artifacts_dir(name):
    """Where a test leaves its screenshots: $HEADROOM_ARTIFACTS or
    build/test-artifacts, one folder per test."""
    root = os.environ.get("HEADROOM_ARTIFACTS",
                          os.path.join(source_dir(), "build", "test-artifacts"))
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    return path
