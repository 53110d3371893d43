#!/usr/bin/env python3
"""The live page of `headroom serve` (GET /) in a real headless browser
(Chromium through selenium), against a live server with SmolLM2 behind an
API key:

  - the page's files carry no data and need no key; every /v1/memory
    endpoint answers 401 without it; the page asks for the key once, says so
    when it is refused, and shows nothing until it has it;
  - under load (streaming chats from the openai client and one from the
    page's own chat box) the block grid, read back pixel by pixel from its
    canvas, shows as many owned and shared cells as blocks are in use: equal
    to the pool's own count in the snapshot it drew, and between two reads of
    /v1/memory taken before and after it (blocks only grow while every
    request decodes);
  - clicking an owned cell shows that request, its tokens (its prompt text
    among them) and its block table, the clicked block in it, each table as
    long as ceil(computed tokens / block size);
  - once every request has finished, no cell is owned, and the cached cells
    equal /v1/memory's cached blocks;
  - the chat box streams a reply (text seen before the reply ends) and
    reports its tokens, tokens/s and KV blocks;
  - the page fits a phone-width window and follows a dark browser theme;
  - when the server goes away the page says so;
  - on a pool too small for the load, the grid flashes when the engine
    preempts, and so does the preempted request's row.

Screenshots go to build/test-artifacts/live-page (HEADROOM_ARTIFACTS);
with HEADROOM_UPDATE_SCREENSHOTS=1 they also replace the README's in
docs/images.
"""
import math
import os
import re
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from serverlib import Server, fail_if  # noqa: E402
from testlib import model_path, source_dir  # noqa: E402
from browserlib import artifacts_dir, browser  # noqa: E402

KEY = "page-test-key"
BLOCK_SIZE = 16
FLAGS = ["--max-model-len", "1024", "--kv-cache-memory", "48MiB", "--max-num-seqs", "8",
         "--block-size", str(BLOCK_SIZE), "--api-key", KEY, "--served-model-name", "smollm2",
         "-q"]
PROMPTS = ["Tell me a long story about a lighthouse keeper.",
           "Explain how tides work, in detail.",
           "Describe a walk through a forest in autumn."]
CHAT_PROMPT = "Write a short poem about memory."
OUT = artifacts_dir("live-page")


def wait_for(what, fn, timeout_s=60, every_s=0.1):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every_s)
    fail_if(True, f"timed out waiting for {what}")


# Counts the grid's cells by the colour at each cell's centre, as drawn.
COUNT_CELLS = """
const st = window.headroomPage.state;
const out = [];
for (const g of st.grids) {
  const probe = document.createElement('canvas').getContext('2d');
  const rgb = {};
  for (const k of ['f', 'o', 's', 'c']) {
    probe.clearRect(0, 0, 1, 1);
    probe.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--block-' + k).trim();
    probe.fillRect(0, 0, 1, 1);
    rgb[k] = Array.from(probe.getImageData(0, 0, 1, 1).data.slice(0, 3)).join(',');
  }
  const ctx = g.canvas.getContext('2d');
  const img = ctx.getImageData(0, 0, g.canvas.width, g.canvas.height);
  const scale = g.canvas.width / (g.cols * g.cell);
  const n = { f: 0, o: 0, s: 0, c: 0, other: 0 };
  for (let j = 0; j < g.n; ++j) {
    const x = Math.floor(((j % g.cols) * g.cell + g.cell / 2 - 0.5) * scale);
    const y = Math.floor((Math.floor(j / g.cols) * g.cell + g.cell / 2 - 0.5) * scale);
    const i = (y * g.canvas.width + x) * 4;
    const c = img.data[i] + ',' + img.data[i + 1] + ',' + img.data[i + 2];
    const k = Object.keys(rgb).find((key) => rgb[key] === c);
    n[k || 'other'] += 1;
  }
  out.push(n);
}
return {cells: out, snapshot: st.blocks};
"""

REFRESH = """
const done = arguments[arguments.length - 1];
refreshBlocks().then(() => done(true), (e) => done(String(e)));
"""


def cells(d):
    r = d.execute_script(COUNT_CELLS)
    fail_if(not r["cells"], "the page drew no block grid")
    return r["cells"], r["snapshot"]


def memory(server):
    status, j = server.request("GET", "/v1/memory", headers={"Authorization": f"Bearer {KEY}"})
    fail_if(status != 200, f"/v1/memory: {status} {j}")
    return j


def screenshot(d, name):
    path = os.path.join(OUT, name)
    d.save_screenshot(path)
    if os.environ.get("HEADROOM_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(path, os.path.join(source_dir(), "docs", "images", name))
    return path


with Server(["-m", model_path("smollm2-135m"), *FLAGS]) as server:
    import openai

    # The data needs the key; the page's files do not, and load nothing from elsewhere.
    for path in ["/v1/memory", "/v1/memory/blocks", "/v1/memory/history"]:
        status, body = server.request("GET", path)
        fail_if(status != 401, f"{path} without the key: {status} {body}")
        status, body = server.request("GET", path, headers={"Authorization": f"Bearer {KEY}"})
        fail_if(status != 200, f"{path} with the key: {status}")
    for path, kind in [("/", "text/html"), ("/page.js", "text/javascript"),
                       ("/page.css", "text/css")]:
        status, text = server.request("GET", path)
        fail_if(status != 200 or kind not in server.last_headers.get("Content-Type", ""),
                f"{path}: {status} {server.last_headers}")
        for external in ["http://", "https://", "@import", "url("]:
            fail_if(external in text, f"{path} refers to something elsewhere: {external!r}")

    d = browser(1280, 800)
    try:
        d.get(server.base + "/")
        wait_for("the key dialog", lambda: d.execute_script(
            "return document.getElementById('key-dialog').open"))
        fail_if(d.execute_script("return document.querySelectorAll('#pools canvas').length") != 0,
                "the page drew blocks without the key")
        fail_if(d.execute_script("return document.getElementById('devices').children.length"),
                "the page showed memory without the key")
        d.find_element("id", "key-input").send_keys("wrong-key")
        d.find_element("css selector", "#key-form button").click()
        wait_for("the refused-key message", lambda: d.execute_script(
            "const e = document.getElementById('key-error');"
            "return document.getElementById('key-dialog').open && !e.hidden"))
        d.find_element("id", "key-input").send_keys(KEY)
        d.find_element("css selector", "#key-form button").click()
        wait_for("the model name", lambda: d.execute_script(
            "return window.headroomPage.state.model") == "smollm2")
        wait_for("the grid", lambda: d.execute_script(
            "return window.headroomPage.state.grids.length") == 1)
        wait_for("the memory bars", lambda: d.execute_script(
            "return document.querySelectorAll('.bar .seg').length") >= 4)
        grid0, snap0 = cells(d)
        n_blocks = snap0["pools"][0]["n_blocks"]
        fail_if(grid0[0]["f"] + grid0[0]["c"] != n_blocks,
                f"an idle server's grid is all free or cached: {grid0}")
        # The budget bar shows the four terms with the numbers /v1/memory has.
        m = memory(server)
        titles = d.execute_script(
            "return Array.from(document.querySelectorAll('.bar .seg')).map(s => s.title)")
        fail_if(len(titles) != 4 or not titles[0].startswith("weights"), f"bar segments {titles}")
        weights_mib = m["terms"]["weights"]["reserved_bytes"] / 2**20
        fail_if(f"reserved {weights_mib:.1f} MiB" not in titles[0],
                f"the weights segment says {titles[0]!r}, /v1/memory {weights_mib:.1f} MiB")

        # Load: three streams from the openai client, one from the chat box.
        client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0)
        texts = {}

        def stream(i):
            out = []
            for chunk in client.chat.completions.create(
                    model="smollm2", messages=[{"role": "user", "content": PROMPTS[i]}],
                    max_tokens=560, stream=True, extra_body={"ignore_eos": True}):
                if chunk.choices and chunk.choices[0].delta.content:
                    out.append(chunk.choices[0].delta.content)
            texts[i] = "".join(out)

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        d.execute_script("document.getElementById('chat-max-tokens').value = 200")
        d.find_element("id", "chat-input").send_keys(CHAT_PROMPT)
        d.find_element("id", "chat-send").click()
        wait_for("four running requests on the page", lambda: (
            lambda s: s and sum(r["state"] == "running" and r["output_tokens"] > 0
                                for r in s["requests"]) == 4)(
            d.execute_script("return window.headroomPage.state.blocks")), timeout_s=120)
        partial = wait_for("the chat box's streamed text", lambda: d.execute_script(
            "const m = document.querySelector('.msg.assistant');"
            "return m && !m.dataset.done && m.querySelector('.text').textContent"))

        # Under load: the grid against the pool's count and two reads of /v1/memory.
        for _ in range(3):
            before = memory(server)["kv_blocks_used"]
            time.sleep(0.25)  # the snapshot the page fetches next is newer than `before`
            fail_if(d.execute_async_script(REFRESH) is not True, "refreshing the page failed")
            grid, snap = cells(d)
            after = memory(server)["kv_blocks_used"]
            in_use = grid[0]["o"] + grid[0]["s"]
            running = [r for r in snap["requests"] if r["state"] == "running"]
            print(f"under load: {len(running)} running; grid {grid[0]}; snapshot blocks_used "
                  f"{snap['blocks_used']}; /v1/memory before {before}, after {after}")
            fail_if(grid[0]["other"] != 0, f"cells of no known colour: {grid}")
            fail_if(in_use != snap["blocks_used"],
                    f"owned + shared cells {in_use} != the pool's {snap['blocks_used']}")
            if len(running) == 4:  # nothing finished between the reads
                fail_if(not before <= in_use <= after,
                        f"the grid's {in_use} blocks in use are not between /v1/memory's "
                        f"{before} and {after}")
            for r in running:
                for s in r["sequences"]:
                    want = math.ceil(s["computed"] / BLOCK_SIZE)
                    fail_if(len(s["block_tables"][0]) != want,
                            f"request {r['id']}: {len(s['block_tables'][0])} blocks for "
                            f"{s['computed']} tokens, expected {want}")
            time.sleep(0.3)
        screenshot(d, "live-page-under-load.png")

        # Clicking an owned cell: its request, tokens and block table.
        snap = d.execute_script("return window.headroomPage.state.blocks")
        g = d.execute_script("const g = window.headroomPage.state.grids[0];"
                             "return {cols: g.cols, cell: g.cell}")
        pool = snap["pools"][0]
        j = next(b for b in range(pool["n_blocks"]) if pool["state"][b] == "o")
        owner = pool["owner"][j]
        canvas = d.find_element("css selector", "#pools canvas")
        x = (j % g["cols"]) * g["cell"] + g["cell"] // 2
        y = (j // g["cols"]) * g["cell"] + g["cell"] // 2
        from selenium.webdriver.common.action_chains import ActionChains
        ActionChains(d).move_to_element_with_offset(
            canvas, x - canvas.size["width"] // 2, y - canvas.size["height"] // 2).click().perform()
        detail = wait_for(f"the detail of request {owner}", lambda: d.execute_script(
            "const e = document.getElementById('detail');"
            "return !e.hidden && e.querySelector('.tokens') && e.innerText"), timeout_s=30)
        fail_if(f"request {owner}" not in detail, f"clicked block {j} of request {owner}: {detail}")
        tables = re.findall(r"block table \[([0-9, ]*)\]", detail)
        fail_if(not tables or str(j) not in [b.strip() for t in tables for b in t.split(",")],
                f"block {j} not in the block table shown: {tables}")
        fail_if(not any(p.split()[0] in detail for p in PROMPTS + [CHAT_PROMPT]),
                f"the detail shows none of the prompts' text: {detail[:300]}")
        screenshot(d, "live-page-detail.png")

        for t in threads:
            t.join(300)
        fail_if(len(texts) != 3 or not all(texts.values()), f"client streams: {texts}")
        wait_for("the chat reply to end", lambda: d.execute_script(
            "const m = document.querySelector('.msg.assistant');"
            "return m && m.dataset.done === 'true'"), timeout_s=120)
        reply, stats = d.execute_script(
            "const m = document.querySelector('.msg.assistant');"
            "return [m.querySelector('.text').textContent, m.querySelector('.stats').textContent]")
        print(f"chat reply ({len(reply)} chars; {len(partial)} seen mid-stream): {stats}")
        fail_if(len(reply) <= len(partial) or not reply.startswith(partial),
                f"the reply did not stream: {partial!r} then {reply!r}")
        fail_if(not re.search(r"^\d+ tokens · [\d.]+ tokens/s .* · \d+ KV blocks", stats),
                f"chat stats: {stats!r}")

        # Idle: no cell owned; the cached ones are /v1/memory's cached blocks.
        wait_for("the requests to leave the page", lambda: d.execute_script(
            "const b = window.headroomPage.state.blocks; return b && b.requests.length === 0"),
            timeout_s=30)
        fail_if(d.execute_async_script(REFRESH) is not True, "refreshing the page failed")
        grid, snap = cells(d)
        m = memory(server)
        cached = m["kv_groups"][0]["blocks_cached"]
        print(f"idle: grid {grid[0]}; /v1/memory in use {m['kv_blocks_used']}, cached {cached}")
        fail_if(grid[0]["o"] + grid[0]["s"] != 0 or m["kv_blocks_used"] != 0,
                f"blocks still in use after every request ended: {grid}, {m['kv_blocks_used']}")
        fail_if(grid[0]["c"] != cached or cached == 0,
                f"cached cells {grid[0]['c']} != /v1/memory's {cached}")
        fail_if(grid[0]["f"] != n_blocks - cached, f"free cells {grid[0]['f']}")
        d.execute_script("document.getElementById('chat').scrollIntoView()")
        screenshot(d, "live-page-chat.png")

        # A phone-width window: nothing wider than the screen.
        d.set_window_size(390, 844)
        time.sleep(1.5)
        over = d.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        fail_if(over > 1, f"at 390 px the page is {over} px too wide")
        d.execute_script("window.scrollTo(0, 0)")
        screenshot(d, "live-page-phone.png")
    finally:
        d.quit()

    # The dark theme follows the browser's setting.
    dark = browser(1280, 800, dark=True)
    try:
        dark.get(server.base + "/")
        wait_for("the key dialog", lambda: dark.execute_script(
            "return document.getElementById('key-dialog').open"))
        dark.execute_script(f"sessionStorage.setItem('headroom-api-key', '{KEY}'); "
                            "location.reload()")
        wait_for("the grid", lambda: dark.execute_script(
            "return window.headroomPage && window.headroomPage.state.grids.length") == 1)
        bg = dark.execute_script("return getComputedStyle(document.body).backgroundColor")
        rgb = [int(v) for v in re.findall(r"\d+", bg)[:3]]
        fail_if(sum(rgb) / 3 > 80, f"dark theme background {bg}")
        screenshot(dark, "live-page-dark.png")

        # The server goes away: the page says so.
        server.stop()
        wait_for("the page to show the server down", lambda: dark.execute_script(
            "return !document.getElementById('banner').hidden && "
            "document.getElementById('status').textContent"), timeout_s=30)
        banner = dark.execute_script("return document.getElementById('banner').textContent")
        fail_if("not answering" not in banner, f"banner: {banner!r}")
        screenshot(dark, "live-page-server-down.png")
    finally:
        dark.quit()

# Preemptions flash: three requests that cannot all hold their blocks at once.
with Server(["-m", model_path("smollm2-135m"), "--max-model-len", "512", "--kv-cache-memory",
             "12MiB", "--max-num-seqs", "4", "--served-model-name", "smollm2", "-q"]) as small:
    import openai
    client = openai.OpenAI(base_url=small.base + "/v1", api_key="none", max_retries=0)
    d = browser(1280, 800)
    try:
        d.get(small.base + "/")
        wait_for("the grid", lambda: d.execute_script(
            "return window.headroomPage.state.grids.length") == 1)
        d.execute_script(
            "window.flashes = {pool: 0, row: 0};"
            "new MutationObserver((ms) => { for (const m of ms) {"
            "  if (!m.target.classList.contains('flash')) continue;"
            "  if (m.target.classList.contains('pool')) window.flashes.pool++;"
            "  if (m.target.tagName === 'TR') window.flashes.row++; } })"
            ".observe(document.body, {attributes: true, subtree: true, attributeFilter: ['class']})")

        def run(i):
            client.completions.create(model="smollm2", prompt=PROMPTS[i], max_tokens=240,
                                      extra_body={"ignore_eos": True})

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        time.sleep(1.0)
        flashes = d.execute_script("return window.flashes")
        samples, _ = small.metrics()
        n_pre = samples.get("headroom_preemptions_total", 0)
        print(f"small pool: {n_pre:.0f} preemptions; flashes {flashes}")
        fail_if(n_pre == 0, "the small pool preempted nothing: the check would prove nothing")
        fail_if(flashes["pool"] == 0, "the grid did not flash on a preemption")
        screenshot(d, "live-page-preempted.png")
    finally:
        d.quit()
print("live page: ok")
