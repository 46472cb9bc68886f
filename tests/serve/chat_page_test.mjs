// The chat page at GET / of the real `hyla serve` (demo model, CPU) in headless Chromium, driven
// over the DevTools protocol (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 / 4):
// ?prompt=Hello&temperature=0 auto-sends (the page's test hook) and the streamed reply in the DOM
// equals the server's greedy non-streamed chat reply; Enter sends a second turn whose reply equals
// the greedy reply to the whole conversation (the page keeps it); the served model is named; Stop
// ends a long reply and the server frees it; a 400 shows the server's error message. A screenshot
// of the first conversation goes to SCREENSHOT (the path is printed).
//   node tests/serve/chat_page_test.mjs HYLA_BINARY MODEL_DIR SCREENSHOT.png
// Exit 77 (skipped) with the reason when no Chromium is installed (Debian's chromium-headless-shell
// or chromium; $HYLA_CHROMIUM names another) or there is no demo model.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Cases, setDeadline, startServe, stop, track } from './serve_process.mjs';

const kSkip = 77;
function skip(reason) {
  console.log(`skipped: ${reason}`);
  process.exit(kSkip);
}

const [hyla, modelDir, screenshot] = process.argv.slice(2);
if (!hyla || !modelDir || !screenshot) {
  console.error('usage: node chat_page_test.mjs HYLA_BINARY MODEL_DIR SCREENSHOT.png');
  process.exit(2);
}
if (!existsSync(path.join(modelDir, 'model.safetensors'))) skip(`no demo model in ${modelDir}`);

function findChromium() {
  const names = process.env.HYLA_CHROMIUM ? [process.env.HYLA_CHROMIUM]
                                          : ['chromium-headless-shell', 'chromium'];
  for (const name of names) {
    const found = spawnSync('sh', ['-c', 'command -v "$0"', name], { encoding: 'utf8' });
    if (found.status === 0) return found.stdout.trim();
  }
  return null;
}
const chromium = findChromium();
if (!chromium)
  skip('no chromium-headless-shell or chromium on PATH (Debian package chromium-headless-shell: ' +
       'tools/install_deps.sh; or set HYLA_CHROMIUM)');
setDeadline(150_000);  // the whole test; ~15 s on 2 busy cores

// ---- the browser, over the DevTools pipe ----

class Browser {
  constructor(binary) {
    this.profile = mkdtempSync(path.join(os.tmpdir(), 'hyla-chat-page-'));
    const args = ['--headless', '--remote-debugging-pipe', '--disable-gpu', '--no-first-run',
                  '--no-default-browser-check', `--user-data-dir=${this.profile}`,
                  '--window-size=1000,720', 'about:blank'];
    // Chromium's sandbox refuses to run as root (CI runs as root).
    if (process.getuid?.() === 0) args.unshift('--no-sandbox');
    // Its own process group, so that its helper processes (renderer, network service) can be
    // ended with it: they may otherwise outlive it for seconds, still writing the profile.
    this.child = track(spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
                                             detached: true }));
    process.on('exit', () => this.killGroup());
    this.stderr = '';
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (chunk) => { this.stderr = (this.stderr + chunk).slice(-4000); });
    this.nextId = 1;
    this.pending = new Map();
    let buffer = Buffer.alloc(0);
    this.child.stdio[4].on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      let end;
      while ((end = buffer.indexOf(0)) >= 0) {
        const message = JSON.parse(buffer.subarray(0, end).toString('utf8'));
        buffer = buffer.subarray(end + 1);
        const waiter = this.pending.get(message.id);
        if (!waiter) continue;  // an event
        this.pending.delete(message.id);
        if (message.error) waiter.reject(new Error(`${waiter.method}: ${message.error.message}`));
        else waiter.resolve(message.result);
      }
    });
    const failAll = (why) => {
      for (const waiter of this.pending.values()) waiter.reject(new Error(why));
      this.pending.clear();
    };
    this.child.on('exit', (code, signal) =>
      failAll(`chromium exited (${code ?? signal}):\n${this.stderr}`));
    this.child.on('error', (e) => failAll(`cannot run ${binary}: ${e.message}`));
    this.child.stdio[3].on('error', (e) => failAll(`the DevTools pipe to ${binary}: ${e.message}`));
  }

  send(method, params = {}, sessionId = undefined) {
    const id = this.nextId++;
    const message = JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) });
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.child.stdio[3].write(message + '\0');
    });
  }

  killGroup() {
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {}  // the group is gone already
  }

  async close() {
    await this.send('Browser.close').catch(() => {});
    await stop(this.child);
    this.killGroup();
    try {
      rmSync(this.profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    } catch (e) {
      console.log(`note: could not remove the browser profile ${this.profile}: ${e.message}`);
    }
  }
}

/// One tab: open(url), evaluate(js), waitFor(js) (polls until truthy), screenshot(file).
class Tab {
  constructor(browser, sessionId) {
    this.browser = browser;
    this.sessionId = sessionId;
  }
  static async open(browser, url) {
    const { targetId } = await browser.send('Target.createTarget', { url });
    const { sessionId } = await browser.send('Target.attachToTarget', { targetId, flatten: true });
    return new Tab(browser, sessionId);
  }
  async evaluate(expression) {
    const { result, exceptionDetails } = await this.browser.send(
        'Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true }, this.sessionId);
    if (exceptionDetails)
      throw new Error(`${expression}: ${exceptionDetails.exception?.description ??
                                        exceptionDetails.text}`);
    return result.value;
  }
  async waitFor(expression, what, timeoutMs = 60_000) {
    const start = Date.now();
    for (;;) {
      const value = await this.evaluate(expression).catch(() => undefined);
      if (value) return value;
      if (Date.now() - start > timeoutMs)
        throw new Error(`waited ${timeoutMs / 1000} s for ${what} (${expression}); the page: ` +
                        JSON.stringify(await this.evaluate(kPageState).catch((e) => e.message)));
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  async screenshot(file) {
    const { data } = await this.browser.send('Page.captureScreenshot', { format: 'png' },
                                             this.sessionId);
    writeFileSync(file, Buffer.from(data, 'base64'));
  }
}

// What the page shows: its state, the model name, and each message's class and text.
const kPageState = `({
  state: document.body?.dataset.state,
  model: document.getElementById('model')?.textContent,
  messages: [...document.querySelectorAll('#log .msg')].map((m) => ({
    cls: m.className, text: m.querySelector('.content').textContent,
    note: m.querySelector('.note')?.textContent ?? null }))
})`;
const kSettled = `['done', 'stopped', 'error'].includes(document.body?.dataset.state)`;

// ---- the cases ----

const cases = new Cases();
const check = (name, body) => cases.check(name, body);

async function chatReply(port, messages, maxTokens) {
  const response = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens: maxTokens, temperature: 0 }) });
  assert.equal(response.status, 200);
  return (await response.json()).choices[0].message.content;
}

async function metric(port, name) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, `/metrics has no ${name}`);
  return Number(line.split(' ')[1]);
}

async function main(port, browser) {
  const base = `http://127.0.0.1:${port}`;
  const maxTokens = 24;

  await check('GET / and /index.html: the page as text/html', async () => {
    for (const target of ['/', '/index.html']) {
      const response = await fetch(base + target);
      assert.equal(response.status, 200);
      assert.equal(response.headers.get('content-type'), 'text/html; charset=utf-8');
      const html = await response.text();
      assert.match(html, /^<!DOCTYPE html>/);
      assert.doesNotMatch(html, /(src|href)=["']?(https?:)?\/\//, 'an external URL');
    }
  });

  const tab = await Tab.open(browser, `${base}/?prompt=Hello&temperature=0&max_tokens=${maxTokens}`);
  await check('?prompt=Hello: the streamed reply in the DOM == the greedy chat reply', async () => {
    await tab.waitFor(kSettled, 'the reply to end');
    const page = await tab.evaluate(kPageState);
    const want = await chatReply(port, [{ role: 'user', content: 'Hello' }], maxTokens);
    assert.equal(page.state, 'done', JSON.stringify(page));
    assert.equal(page.model, 'hyla-demo');
    assert.deepEqual(page.messages.map((m) => m.cls), ['msg user', 'msg assistant']);
    assert.equal(page.messages[0].text, 'Hello');
    assert.ok(want.length > 0);
    assert.equal(page.messages[1].text, want);
    assert.equal(page.messages[1].note, '(max tokens reached)');
  });
  await check('Enter sends a second turn; its reply continues the conversation', async () => {
    const first = (await tab.evaluate(kPageState)).messages[1].text;
    await tab.evaluate(`(() => {
      const input = document.getElementById('input');
      input.value = 'And then?';
      input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    })()`);
    await tab.waitFor(`document.querySelectorAll('#log .msg').length === 4 && ${kSettled}`,
                      'the second reply');
    const page = await tab.evaluate(kPageState);
    assert.equal(page.state, 'done');
    const want = await chatReply(port, [{ role: 'user', content: 'Hello' },
                                        { role: 'assistant', content: first },
                                        { role: 'user', content: 'And then?' }], maxTokens);
    assert.equal(page.messages[2].text, 'And then?');
    assert.equal(page.messages[3].text, want);
    assert.equal(await tab.evaluate(`document.getElementById('input').value`), '');
  });
  await tab.screenshot(screenshot);
  console.log(`screenshot: ${screenshot}`);

  await check('Stop ends a long reply; the server frees its request', async () => {
    const long = await Tab.open(browser, `${base}/?prompt=Tell%20me%20a%20story&temperature=0` +
                                         `&max_tokens=4000`);
    await long.waitFor(`document.querySelector('.msg.assistant .content')?.textContent.length > 0`,
                       'the first streamed text');
    assert.equal(await long.evaluate(`document.body.dataset.state`), 'generating');
    await long.evaluate(`document.getElementById('stop').click()`);
    await long.waitFor(kSettled, 'the page to stop');
    const page = await long.evaluate(kPageState);
    assert.equal(page.state, 'stopped');
    assert.equal(page.messages[1].note, 'stopped');
    assert.ok(page.messages[1].text.length > 0);
    const start = Date.now();
    while ((await metric(port, 'hyla_requests_running')) !== 0) {
      assert.ok(Date.now() - start < 10_000, 'the stopped request still runs after 10 s');
      await new Promise((r) => setTimeout(r, 100));
    }
  });
  await check('a refused request shows the server\'s error message', async () => {
    const bad = await Tab.open(browser, `${base}/?prompt=Hi&temperature=5`);
    await bad.waitFor(kSettled, 'the error');
    const page = await bad.evaluate(kPageState);
    assert.equal(page.state, 'error');
    const error = page.messages.find((m) => m.cls === 'msg error');
    assert.ok(error, JSON.stringify(page));
    assert.match(error.text, /HTTP 400: 'temperature' is 5, expected a number in \[0, 2\] \(temperature\)/);
  });
}

let server = null, browser = null;
try {
  server = await startServe(hyla, modelDir);
  console.log(`hyla serve on port ${server.port}; ${chromium}`);
  browser = new Browser(chromium);
  await browser.send('Browser.getVersion').then((v) => console.log(v.product));
  await main(server.port, browser);
} catch (e) {
  await check('setup', () => {
    throw e;
  });
} finally {
  if (browser) await browser.close();
  if (server) await stop(server.child);
}
cases.finish();
