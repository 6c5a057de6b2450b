#!/usr/bin/env python3
"""Reference data for lowbit's tokenizer tests.

Run where `sentencepiece`, `tokenizers`, `jinja2` (and optionally `transformers`) are
installed:

    python3 gen.py SRC OUT

SRC holds copies of the shared test files (see FILES below); OUT receives:
  strings.json                 the test strings (hand-written, Alice spans, random unicode)
  ref_<name>.json              ids (no BOS) and decoded text per string, per tokenizer
  bytelevel_llama3.json        a byte-level BPE trained on Alice (Llama-3 split regex,
                               ignore_merges, special tokens, TemplateProcessing BOS)
  bytelevel_gpt2.json          the same vocab and merges with GPT-2's ByteLevel(use_regex)
  spm_nodummy.model            a SentencePiece BPE trained on Alice: no dummy prefix,
                               byte fallback, user-defined symbols (Gemma-like)
  chat.json                    chat templates rendered the way transformers renders them
"""
import json
import os
import random
import sys

SRC, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
FILES = {
    "llama2_spm": "tokenizer.model",                 # llama2-tokenizer/tokenizer.model
    "tok512_spm": "tok512.model",                    # stories260K/tok512.model
    "tinyllama_hf": "tinyllama/tokenizer.json",      # llama2-tokenizer/hf-tinyllama-1.1b-chat-v1.0/
    "alice": "alice.txt",                            # eval-text/alice_in_wonderland_pg11.txt
}
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>"]


def p(name):
    return os.path.join(SRC, name)


def dump(name, obj):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


alice = open(p(FILES["alice"]), encoding="utf-8").read()

HAND = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n\n", " \n", "\n ", "\r\n", "Hello world", " Hello world",
    "  Hello world", "Hello World", "hello", "HELLO", "Hello, world!", "Hello\nworld",
    "Once upon a time, there was a little girl named Lily.",
    "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "3", "33", "333", "3333", "33333", "333333", "1234567890", "3.14159", "-42", "$1,000,000",
    "I'm", "I'M", "you're", "YOU'RE", "they'll", "we've", "it's", "he'd", "don't", "'s", "'S",
    "line1\r\nline2", "  leading spaces", "trailing spaces   ", "tabs\tand\tspaces",
    "multiple    spaces    here", "a\u00a0b", "\u3000full width space", "café", "naïve",
    "Zürich", "straße", "e\u0301", "日本語のテキスト", "中文测试", "한국어 텍스트", "Русский текст",
    "العربية", "עברית", "हिन्दी", "ไทย", "🦙", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "emoji 🎉🎉🎉 party",
    "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "<html><body>hi</body></html>", "https://example.com/path?q=1&b=2", "user@example.com",
    "{\"key\": [1, 2, 3]}", "<s>", "</s>", "<unk>", "<s>Hello</s>", " <s> x </s> ",
    "<|begin_of_text|>", "<|eot_id|>", "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<|user|>\nHi</s>",
    "<|tool|> call", "x<|tool|>y", "<0x41>", "▁", "▁▁", "a▁b", "\u2581leading", "!!!???...",
    "...", "—", "“quoted” ‘single’", "«guillemets»", "x²+y²=z²", "∑∫√∞≠≤", "\u200b zero width",
    "\ufeffBOM", "\x00 null", "\x7f del", "\U0010ffff", "ａｂｃ fullwidth", "Ⅷ roman", "ﬁ ligature",
    "A" * 100, "ab" * 50, " " * 20 + "x", "\n" * 5 + "x", "x" + " " * 7, " \t \n \r\n  y",
    "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "it'S I'Ll",
    "  \n\n  \n", "a  b   c    d", "1 22 333 4444 55555", "12abc34def", "ö̲", "Ω≈ç√∫˜µ≤≥÷",
    "Hello\u2028world", "tab\tafter", "\t\tx", "'twas", "''", "'ll'll", " 's", "\n's",
]

rng = random.Random(20240611)
ALICE = []
for _ in range(90):
    n = rng.choice([1, 2, 5, 10, 30, 80, 200, 400])
    i = rng.randrange(0, len(alice) - n)
    ALICE.append(alice[i:i + n])
ALICE.append(alice[:3000])

POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
        list(" \t\n\r   .,;:!?'\"-_()[]{}<>/\\|@#$%^&*+=~`") +
        list("éüßñçøåÆŒ") + list("日本語中文测试한국어") + list("Жщыэ") + list("αβγΩ") +
        ["🦙", "😁", "👍", "🏽", "\u200d", "\u0301", "\u00a0", "\u3000", "▁", "<s>", "</s>",
         "<|eot_id|>", "'s", "'LL", "\U0001f600", "\u0900", "\ufffd", "\U00020000"])
RAND = []
for _ in range(130):
    n = rng.randint(1, 24)
    RAND.append("".join(rng.choice(POOL) for _ in range(n)))

STRINGS = HAND + ALICE + RAND
dump("strings.json", STRINGS)
print("strings:", len(STRINGS))

import sentencepiece as spm  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Tokenizer, Regex, AddedToken  # noqa: E402
from tokenizers import models, pre_tokenizers, decoders, processors, trainers  # noqa: E402

print("sentencepiece", spm.__version__, "tokenizers", tokenizers.__version__)


def ref_spm(name, path):
    sp = spm.SentencePieceProcessor(model_file=path)
    cases = []
    for s in STRINGS:
        ids = sp.encode(s)
        cases.append({"ids": ids, "decoded": sp.decode(ids)})
    dump("ref_%s.json" % name, {"tool": "sentencepiece " + spm.__version__,
                                "model": os.path.basename(path), "cases": cases})


def ref_hf(name, tok):
    tok.no_truncation()
    cases = []
    for k, s in enumerate(STRINGS):
        enc = tok.encode(s, add_special_tokens=False)
        c = {"ids": enc.ids, "decoded": tok.decode(enc.ids, skip_special_tokens=False)}
        if k < 40:
            c["ids_special"] = tok.encode(s, add_special_tokens=True).ids
        cases.append(c)
    dump("ref_%s.json" % name, {"tool": "tokenizers " + tokenizers.__version__, "cases": cases})


ref_spm("llama2_spm", p(FILES["llama2_spm"]))
ref_spm("tok512_spm", p(FILES["tok512_spm"]))

# Gemma-like SentencePiece: no dummy prefix, byte fallback, whitespace pieces, user symbols.
spm.SentencePieceTrainer.train(
    input=p(FILES["alice"]), model_prefix=os.path.join(OUT, "spm_nodummy"), model_type="bpe",
    vocab_size=1000, byte_fallback=True, add_dummy_prefix=False, split_digits=True,
    normalization_rule_name="identity", remove_extra_whitespaces=False,
    allow_whitespace_only_pieces=True, user_defined_symbols=["<start_of_turn>", "<end_of_turn>", "\n\n"],
    character_coverage=1.0, num_threads=1, minloglevel=2, max_sentence_length=100000)
os.remove(os.path.join(OUT, "spm_nodummy.vocab"))
ref_spm("spm_nodummy", os.path.join(OUT, "spm_nodummy.model"))

tl = Tokenizer.from_file(p(FILES["tinyllama_hf"]))
ref_hf("tinyllama_hf", tl)

# The same vocab in the newer (legacy=false) layout: no normalizer, Metaspace pre-tokenizer.
tlj = json.load(open(p(FILES["tinyllama_hf"]), encoding="utf-8"))
tlj["normalizer"] = None
tlj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                        "split": False}
ref_hf("tinyllama_metaspace", Tokenizer.from_str(json.dumps(tlj)))

# Byte-level BPE, Llama-3 style.
bl = Tokenizer(models.BPE())
bl.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
bl.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, special_tokens=SPECIALS,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              show_progress=False)
bl.train([p(FILES["alice"])], trainer)
bl.add_tokens([AddedToken("<|tool|>", special=False, normalized=False)])
bos = bl.token_to_id("<|begin_of_text|>")
bl.post_processor = processors.Sequence([
    processors.ByteLevel(trim_offsets=False),
    processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                  pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                  special_tokens=[("<|begin_of_text|>", bos)])])
blj = json.loads(bl.to_str())
blj["model"]["ignore_merges"] = True
bl = Tokenizer.from_str(json.dumps(blj))
with open(os.path.join(OUT, "bytelevel_llama3.json"), "w", encoding="utf-8") as f:
    f.write(bl.to_str(pretty=True))
ref_hf("bytelevel_llama3", bl)

g2 = json.loads(bl.to_str())
g2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                       "use_regex": True}
g2["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                        "use_regex": True}
g2["model"]["ignore_merges"] = False
g2["added_tokens"] = [a for a in g2["added_tokens"] if a["content"] in ("<|end_of_text|>",)]
g2 = Tokenizer.from_str(json.dumps(g2))
with open(os.path.join(OUT, "bytelevel_gpt2.json"), "w", encoding="utf-8") as f:
    f.write(g2.to_str(pretty=True))
ref_hf("bytelevel_gpt2", g2)

# Chat templates, rendered as transformers does (sandboxed jinja2, trim_blocks, lstrip_blocks).
import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

tinyllama_tpl = json.load(open(os.path.join(os.path.dirname(p(FILES["tinyllama_hf"])),
                                            "tokenizer_config.json")))["chat_template"]
TEMPLATES = {
    "tinyllama": tinyllama_tpl,
    # The following are written for these tests in the style of public model templates.
    "llama3_style": (
        "{{- bos_token }}\n{%- for message in messages %}\n"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n"
        "{%- endfor %}\n{%- if add_generation_prompt %}\n"
        "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"),
    "mistral_style": (
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system_message = messages[0]['content'] %}\n"
        "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n"
        "    {%- set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n"
        "{%- for message in loop_messages %}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
        "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
        "    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
        "        {%- if loop.first and system_message is defined %}\n"
        "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
        "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
        "        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n"
        "        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n"
        "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
        "    {%- endif %}\n{%- endfor %}\n"),
    "gemma_style": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"),
    "features": (
        "{% set ns = namespace(n=0, sys='') %}\n"
        "{% for m in messages %}\n"
        "  {% if m.role == 'system' %}{% set ns.sys = m.content %}{% continue %}{% endif %}\n"
        "  {% set ns.n = ns.n + 1 %}\n"
        "[{{ loop.index }}/{{ loop.length }}:{{ m.role | upper }}{% if loop.first %} first{% endif %}{% if loop.last %} last{% endif %}] {{ m.content.strip() }}\n"
        "{% endfor %}\n"
        "{# a comment #}\n"
        "sys={{ ns.sys | default('none', true) }} n={{ ns.n }} len={{ messages | length }} "
        "{{ messages | map(attribute='role') | join(',') }} {{ 'yes' if add_generation_prompt else 'no' }} "
        "{{ messages[0] | tojson }} {{ ('a b c'.split(' ')) | length }} {{ '%d-%s' | format(3, 'x') }} "
        "{{ 'Hi'.startswith('H') }} {{ 'x' ~ 1 ~ none }} {{ [1,2,3] | last }} {{ 7 // 2 }} {{ -7 % 3 }}\n"),
}

CONVS = {
    "two_turn": [{"role": "user", "content": "Hi there!"},
                 {"role": "assistant", "content": "Hello! How can I help?"}],
    "with_system": [{"role": "system", "content": "You are a friendly chatbot who always responds in the style of a pirate"},
                    {"role": "user", "content": "How many helicopters can a human eat in one sitting?"}],
    "three_turn": [{"role": "user", "content": "  What is 2+2?  "},
                   {"role": "assistant", "content": "4"},
                   {"role": "user", "content": "And 3+3? 日本 🦙"}],
    "bad_order": [{"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}],
}

chat = []
for tname, tpl in TEMPLATES.items():
    t = env.from_string(tpl)
    for cname, msgs in CONVS.items():
        for agp in (False, True):
            case = {"template": tname, "conversation": cname, "add_generation_prompt": agp,
                    "bos_token": "<s>", "eos_token": "</s>"}
            try:
                case["output"] = t.render(messages=msgs, bos_token="<s>", eos_token="</s>",
                                          add_generation_prompt=agp)
            except jinja2.exceptions.TemplateError as e:
                case["error"] = str(e)
            chat.append(case)

# transformers' own apply_chat_template for TinyLlama, as a cross-check of the env above.
tf = None
try:
    import transformers
    from transformers import PreTrainedTokenizerFast
    tk = PreTrainedTokenizerFast(tokenizer_file=p(FILES["tinyllama_hf"]), bos_token="<s>",
                                 eos_token="</s>", unk_token="<unk>")
    tf = {"version": transformers.__version__, "two_turn": tk.apply_chat_template(
        CONVS["two_turn"], chat_template=tinyllama_tpl, tokenize=False, add_generation_prompt=True),
        "with_system": tk.apply_chat_template(
        CONVS["with_system"], chat_template=tinyllama_tpl, tokenize=False, add_generation_prompt=False)}
except Exception as e:  # keep the rest of the data if transformers is missing
    tf = {"error": repr(e)}
dump("chat.json", {"tool": "jinja2 " + jinja2.__version__, "templates": TEMPLATES,
                   "conversations": CONVS, "cases": chat, "transformers_tinyllama": tf})
print("done")
