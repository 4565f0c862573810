"""The chat page in headless Chromium (Debian's chromium and chromedriver, driven by Selenium): it lists the
model, sends a message, shows the reply streaming in and then its token count; the health page draws the
swarm. Screenshots go to the directory given (default build/test-artifacts). Exits 77 (skipped) when Selenium
or the browser is missing: tools/setup.sh installs them.

    python tests/api/test_chat_page.py build/bin/corolla [SCREENSHOT_DIR]
"""
import os
import shutil
import sys
import tempfile

from corolla_run import ROOT, CorollaRun, skip

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    skip("the selenium Python package is missing (bash tools/setup.sh installs it into .venv)")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
    skip("chromium or chromedriver is not installed (apt-get install chromium chromium-driver)")

BINARY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/bin/corolla")
SHOTS = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build/test-artifacts")


def browser(profile):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1100,900", "--user-data-dir=" + profile):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=opts)


def main():
    os.makedirs(SHOTS, exist_ok=True)
    failures, passed = [], []

    def check(ok, what):
        print(("ok: " if ok else "FAILED: ") + what)
        (passed if ok else failures).append(what)

    with CorollaRun(BINARY) as run, tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            driver.get(run.base + "/")
            wait = WebDriverWait(driver, 60)
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
            check(driver.find_element(By.CSS_SELECTOR, "#model option").get_attribute("value") == run.model,
                  "the model picker lists " + run.model)
            # Greedy, and short on the tiny model so that the test stays quick.
            driver.find_element(By.CSS_SELECTOR, "#settings summary").click()
            temperature = driver.find_element(By.ID, "temperature")
            temperature.clear()
            temperature.send_keys("0")
            max_tokens = driver.find_element(By.ID, "max_tokens")
            max_tokens.clear()
            max_tokens.send_keys("48" if run.demo else "40")  # three turns fit the tiny model's 512 positions
            box = driver.find_element(By.ID, "input")
            # Record, in the page, the reply's length at every change while it is marked as streaming.
            driver.execute_script("""
              window.__lengths = [];
              new MutationObserver(() => {
                const all = document.querySelectorAll('.msg.assistant');
                const last = all[all.length - 1];
                if (last && last.classList.contains('streaming'))
                  window.__lengths.push(last.querySelector('.text').textContent.length);
              }).observe(document.getElementById('dialogue'), {subtree: true, childList: true, characterData: true});
            """)
            box.send_keys("Name the capital of France.")
            driver.find_element(By.ID, "send").click()
            WebDriverWait(driver, 120).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant .meta"))
            lengths = sorted(set(n for n in driver.execute_script("return window.__lengths") if n > 0))
            streaming_seen = len(lengths) >= 2
            reply = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")
            check(bool(reply), "an assistant reply appeared")
            text = reply[-1].find_element(By.CSS_SELECTOR, ".text").text if reply else ""
            meta = reply[-1].find_elements(By.CSS_SELECTOR, ".meta") if reply else []
            check(len(text) > 0, "the reply has text: %r" % text[:80])
            check(bool(meta) and "tokens" in meta[0].text, "the reply ends with its token count and speed")
            check(streaming_seen, "the reply grew piece by piece while streaming (lengths %s)" % lengths[:8])
            if run.demo:
                check("Paris" in text, "the demo model answers Paris")
            check(not driver.find_element(By.ID, "error").is_displayed(), "no error shown")
            driver.save_screenshot(os.path.join(SHOTS, "chat.png"))
            # A second turn continues the conversation.
            box.send_keys("And of Italy?")
            driver.find_element(By.ID, "send").click()
            WebDriverWait(driver, 120).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant .meta")) == 2)
            check(len(driver.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2, "a second turn")
            driver.save_screenshot(os.path.join(SHOTS, "chat-2.png"))
            # An error is shown in words, and Retry sends the message again.
            max_tokens.clear()
            max_tokens.send_keys("100000")
            box.send_keys("Hello")
            driver.find_element(By.ID, "send").click()
            WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "error").is_displayed())
            error = driver.find_element(By.ID, "error-text").text
            check("at most" in error and "max_tokens" in error, "a bad setting shows the API's message: %r" % error)
            driver.save_screenshot(os.path.join(SHOTS, "chat-error.png"))
            max_tokens.clear()
            max_tokens.send_keys("16")
            driver.find_element(By.ID, "retry").click()
            WebDriverWait(driver, 120).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant .meta")) == 3)
            check(not driver.find_element(By.ID, "error").is_displayed(), "Retry succeeds and clears the error")
            check(len(driver.find_elements(By.CSS_SELECTOR, ".msg.user")) == 3, "the retried message shows once")
            # The health page draws each server's span.
            driver.get(run.base + "/health")
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".model table tr td"))
            rows = driver.find_elements(By.CSS_SELECTOR, ".model table tr")
            check(len(rows) == 1 + 2, "the health page lists the 2 servers")
            check("healthy" in driver.find_element(By.CSS_SELECTOR, ".model h2").text, "the swarm is healthy")
            check(len(driver.find_elements(By.CSS_SELECTOR, ".cell.online")) > 0, "the block map shows online spans")
            driver.save_screenshot(os.path.join(SHOTS, "health.png"))
        finally:
            driver.quit()
    print("screenshots in " + SHOTS)
    print("%d passed, %d failed" % (len(passed), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
