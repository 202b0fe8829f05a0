"""The reference renders of core/text's chat template tests.

    /usr/bin/python3 chat_ref.py CASES.json > OUT.jsonl

CASES.json is {"templates": [source, ...], "cases": [case, ...]}; each case
names a template by index ("t") and gives messages, tools, documents,
add_generation_prompt, continue_final_message, kwargs, special (the
tokenizer's special tokens map), now ("YYYY-MM-DD HH:MM:SS", the clock
strftime_now reads) and format ("auto", "string", "openai": vLLM's content
handling; "none": the messages as they are). Each output line is
{"text": ..., "format": ...} or {"error": exception class, "message": ...}.

The environment is transformers' _compile_jinja_template and the render
its render_jinja_template, copied from huggingface/transformers:
src/transformers/utils/chat_template_utils.py (read at the 4.5x series:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), its tojson filter, the
raise_exception and strftime_now globals, the continue_final_message tag).
The content handling is vLLM's, copied from vllm-project/vllm:
vllm/entrypoints/chat_utils.py (_detect_content_format and its AST walk,
string parts joined with "\\n", tool call arguments json.loads'd).
Debian's python3-jinja2 (3.1.x) is the engine.
"""

import json
import sys
from collections import deque
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime(2025, 1, 2, 3, 4, 5)


class AssistantTracker(jinja2.ext.Extension):
    # transformers' generation block, without the index tracking (which
    # renders nothing).
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return NOW.strftime(format)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
ENV.globals["strftime_now"] = strftime_now


# vLLM's content-format detection (vllm/entrypoints/chat_utils.py).
def _is_var_access(node, varname):
    if isinstance(node, jinja2.nodes.Name):
        return node.ctx == "load" and node.name == varname
    return False


def _is_attr_access(node, varname, key):
    if isinstance(node, jinja2.nodes.Getitem):
        return _is_var_access(node.node, varname) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node, varname, key=None):
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _iter_nodes_assign_var_or_elems(root, varname):
    yield root, varname
    related_varnames = deque([varname])
    while related_varnames:
        related_varname = related_varnames.popleft()
        for assign_ast in root.find_all(jinja2.nodes.Assign):
            lhs = assign_ast.target
            rhs = assign_ast.node
            if _is_var_or_elems_access(rhs, related_varname):
                assert isinstance(lhs, jinja2.nodes.Name)
                yield assign_ast, lhs.name
                if lhs.name != related_varname:
                    related_varnames.append(lhs.name)


def _iter_nodes_assign_messages_item(root):
    messages_varnames = [varname for _, varname in _iter_nodes_assign_var_or_elems(root, "messages")]
    for loop_ast in root.find_all(jinja2.nodes.For):
        for varname in messages_varnames:
            if _is_var_or_elems_access(loop_ast.iter, varname):
                assert isinstance(loop_ast.target, jinja2.nodes.Name)
                yield loop_ast, loop_ast.target.name
                break


def _iter_nodes_assign_content_item(root):
    message_varnames = [varname for _, varname in _iter_nodes_assign_messages_item(root)]
    for loop_ast in root.find_all(jinja2.nodes.For):
        for varname in message_varnames:
            if _is_var_or_elems_access(loop_ast.iter, varname, "content"):
                assert isinstance(loop_ast.target, jinja2.nodes.Name)
                yield loop_ast, loop_ast.target.name
                break


def detect_content_format(source, default="string"):
    try:
        ast = ENV.parse(source)
    except Exception:
        return default
    try:
        next(_iter_nodes_assign_content_item(ast))
    except StopIteration:
        return "string"
    except Exception:
        return default
    return "openai"


def vllm_messages(messages, fmt):
    out = []
    for m in messages:
        m = dict(m)
        content = m.get("content")
        if content is None:
            parts = []
        elif isinstance(content, str):
            parts = [content]
        else:
            parts = [p["text"] if isinstance(p, dict) else p for p in content if not isinstance(p, dict) or p.get("type", "text") == "text"]
        if fmt == "string":
            m["content"] = "\n".join(parts)
        else:
            m["content"] = [{"type": "text", "text": p} for p in parts]
        if m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list):
            calls = []
            for c in m["tool_calls"]:
                c = dict(c)
                f = dict(c.get("function", {}))
                args = f.get("arguments")
                if args:
                    if not isinstance(args, (dict, list)):
                        f["arguments"] = json.loads(args)
                else:
                    f["arguments"] = {}
                c["function"] = f
                calls.append(c)
            m["tool_calls"] = calls
        out.append(m)
    return out


def render(source, compiled, case):
    messages = case["messages"]
    fmt = case.get("format", "none")
    if fmt == "auto":
        fmt = detect_content_format(source)
    if fmt != "none":
        messages = vllm_messages(messages, fmt)
    kwargs = dict(case.get("special") or {})
    kwargs.update(case.get("kwargs") or {})
    agp = case.get("add_generation_prompt", False)
    cfm = case.get("continue_final_message", False)
    if cfm and agp:
        raise ValueError("continue_final_message and add_generation_prompt are not compatible.")
    tag = "CONTINUE_FINAL_MESSAGE_TAG "
    if cfm:
        messages = [dict(m) for m in messages]
        final = messages[-1]["content"]
        if isinstance(final, (list, tuple)):
            final = [dict(b) for b in final]
            messages[-1]["content"] = final
            for block in reversed(final):
                if "text" in block:
                    text = block["text"]
                    block["text"] = block["text"] + tag
                    final = text
                    break
            else:
                raise ValueError("continue_final_message is set but we could not find any text to continue in the final message!")
        else:
            messages[-1]["content"] = final + tag
    out = compiled.render(messages=messages, tools=case.get("tools"), documents=case.get("documents"), add_generation_prompt=agp, **kwargs)
    if cfm:
        if final.strip() not in out or tag.strip() not in out:
            raise ValueError("continue_final_message is set but the final message does not appear in the chat after applying the chat template!")
        loc = out.rindex(tag.strip())
        if out[loc : loc + len(tag)] == tag:
            out = out[:loc]
        else:
            out = out[:loc].rstrip()
    return out, fmt


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        data = json.load(f)
    compiled = []
    for src in data["templates"]:
        try:
            compiled.append(ENV.from_string(src))
        except Exception as e:
            compiled.append(e)
    w = sys.stdout
    for case in data["cases"]:
        t = case["t"]
        c = compiled[t]
        try:
            if isinstance(c, Exception):
                raise c
            text, fmt = render(data["templates"][t], c, case)
            res = {"text": text, "format": fmt}
        except Exception as e:
            res = {"error": type(e).__name__, "message": str(e)}
        w.write(json.dumps(res, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
