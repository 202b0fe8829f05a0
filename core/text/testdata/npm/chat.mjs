// The second-opinion renders of core/text's chat template tests:
// Hugging Face's jinja.js (@huggingface/jinja), and the real templates
// the tests render (@huggingface/ollama-utils' map of Ollama models to
// their Hugging Face chat templates).
//
//   node chat.mjs templates           the map, as JSON {model: template}
//   node chat.mjs render CASES.json   one JSON line a case (chat_ref.py's
//                                     input): {"text"} or {"error"}; a
//                                     case with vLLM content handling or
//                                     continue_final_message is null
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import { createRequire } from "node:module";

// The package bundles the map without exporting it: its array literal is
// read out of the bundle and evaluated (data only: strings and objects).
function ollamaMap() {
  const path = createRequire(import.meta.url).resolve("@huggingface/ollama-utils").replace(/index\.js$/, "index.mjs");
  const src = fs.readFileSync(path, "utf8");
  const start = src.indexOf("[", src.indexOf("OLLAMA_CHAT_TEMPLATE_MAPPING = ["));
  const end = src.indexOf("\n];", start);
  return new Function("return " + src.slice(start, end + 2))();
}

const [mode, file] = process.argv.slice(2);
if (mode === "templates") {
  const out = {};
  for (const e of ollamaMap()) if (e.gguf && !(e.model in out)) out[e.model] = e.gguf;
  process.stdout.write(JSON.stringify(out) + "\n");
} else {
  const data = JSON.parse(fs.readFileSync(file, "utf8"));
  const compiled = data.templates.map((src) => {
    try {
      return new Template(src);
    } catch (e) {
      return e;
    }
  });
  const lines = data.cases.map((c) => {
    if ((c.format || "none") !== "none" || c.continue_final_message) return "null";
    const t = compiled[c.t];
    try {
      if (t instanceof Error) throw t;
      const vars = {
        ...(c.special || {}),
        ...(c.kwargs || {}),
        messages: c.messages,
        tools: c.tools ?? null,
        documents: c.documents ?? null,
        add_generation_prompt: !!c.add_generation_prompt,
      };
      return JSON.stringify({ text: t.render(vars) });
    } catch (e) {
      return JSON.stringify({ error: "Error", message: String(e.message) });
    }
  });
  process.stdout.write(lines.join("\n") + "\n");
}
