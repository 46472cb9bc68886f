// `hyla serve --port 0` as a child process for the Node.js end-to-end tests (openai_client_test.mjs,
// chat_page_test.mjs): started, its port read from its stderr ("... on http://127.0.0.1:PORT ..."),
// /health awaited; killed on every way out of the test (normal end, exception, signal, deadline).
import { spawn } from 'node:child_process';

const children = new Set();
function killAll() {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}
process.on('exit', killAll);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    killAll();
    process.exit(1);
  });

/// Ends the test with exit 1 after `ms` whatever it is doing (the children are killed on exit).
export function setDeadline(ms) {
  setTimeout(() => {
    console.log(`FAIL: the test took more than ${ms / 1000} s`);
    process.exit(1);
  }, ms).unref();
}

/// Registers a child process to be killed when the test ends.
export function track(child) {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/// Stops a child: SIGTERM, then SIGKILL after `graceMs`; resolves once it has exited.
export async function stop(child, graceMs = 5_000) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/// Starts `hyla serve` on the CPU on a free port; resolves to {child, port} once /health answers.
export async function startServe(hyla, modelDir, extraArgs = []) {
  const child = track(spawn(hyla, ['serve', '--model', modelDir, '--device', 'cpu', '--port', '0',
                                   ...extraArgs], { stdio: ['ignore', 'ignore', 'pipe'] }));
  const port = await new Promise((resolve, reject) => {
    let stderr = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      const match = /on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
      if (match) resolve(Number(match[1]));
    });
    child.on('error', (e) => reject(new Error(`cannot run ${hyla}: ${e.message}`)));
    child.on('exit', (code, signal) =>
      reject(new Error(`hyla serve exited (${code ?? signal}) before listening:\n${stderr}`)));
  });
  for (let i = 0; i < 200; ++i) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) return { child, port };
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`/health on port ${port} did not answer 200 within 10 s`);
}

/// Runs named cases one after another; each prints "ok" or "FAIL" with its error, and the failed
/// names are kept for the summary.
export class Cases {
  failures = [];
  async check(name, body) {
    try {
      await body();
      console.log(`ok   ${name}`);
    } catch (e) {
      this.failures.push(name);
      console.log(`FAIL ${name}\n${String(e?.stack ?? e).replace(/^/gm, '     ')}`);
    }
  }
  /// Prints the summary and exits: 1 when a case failed, else 0.
  finish() {
    if (this.failures.length > 0) {
      console.log(`${this.failures.length} case(s) failed: ${this.failures.join('; ')}`);
      process.exit(1);
    }
    console.log('all cases passed');
    process.exit(0);
  }
}
