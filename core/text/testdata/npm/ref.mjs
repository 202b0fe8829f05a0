// The reference ids of core/text's exactness tests: Hugging Face's
// tokenizers.js (@huggingface/tokenizers) over a model's tokenizer.json and
// tokenizer_config.json.
//
//   node ref.mjs MODELDIR CORPUS.jsonl ADD_SPECIAL(0|1)
//
// CORPUS.jsonl holds one JSON string a line; the output holds, a line
// each, the JSON array of its ids. With MODE=decode the lines are JSON
// arrays of ids and the output their decoded strings. With TIMING=1 the last line is
// {"ns": N}, the nanoseconds the encodes took (loading excluded); with
// REPEAT=K the corpus is encoded K times and N is the last pass's (the
// JIT warm).
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";

const [dir, corpus, special] = process.argv.slice(2);
const tok = new Tokenizer(
  JSON.parse(fs.readFileSync(dir + "/tokenizer.json", "utf8")),
  JSON.parse(fs.readFileSync(dir + "/tokenizer_config.json", "utf8")),
);
const inputs = fs.readFileSync(corpus, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
const opts = { add_special_tokens: special === "1" };
if (process.env.MODE === "decode") {
  // The lines are JSON arrays of ids; the output their decoded strings.
  process.stdout.write(inputs.map((ids) => JSON.stringify(!ids || ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: false }))).join("\n") + "\n");
} else {
  let out, ns;
  for (let k = Number(process.env.REPEAT || 1); k > 0; k--) {
    const start = process.hrtime.bigint();
    out = inputs.map((s) => JSON.stringify(tok.encode(s, opts).ids));
    ns = process.hrtime.bigint() - start;
  }
  if (process.env.TIMING === "1") out.push(JSON.stringify({ ns: Number(ns) }));
  process.stdout.write(out.join("\n") + "\n");
}
