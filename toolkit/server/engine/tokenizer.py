"""An offline byte-level tokenizer (token id = byte value) with ChatML special tokens.

Built with the ``tokenizers`` library from nothing: no download, identical on every machine.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel

IM_START, IM_END, EOS, PAD = "<|im_start|>", "<|im_end|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = (IM_START, IM_END, EOS, PAD)

CHATML_TEMPLATE = (
    "{% set system = messages[0] if messages and messages[0].role == 'system' else none %}"
    "{% if tools %}<|im_start|>system\n"
    "{% if system %}{{ system.content if system.content is string else "
    "system.content | map(attribute='text') | join('') }}\n{% endif %}"
    "# Tools\n"
    "{% for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}"
    "{% set p = f.parameters if f.parameters is defined and f.parameters else {} %}"
    "{% set required = p['required'] if p['required'] is defined else [] %}"
    "{{ f.name }}("
    "{% for name, arg in (p['properties'] if p['properties'] is defined else {}).items() %}"
    "{{ name }}{% if name not in required %}?{% endif %}: "
    "{% if arg['enum'] is defined %}{{ arg['enum'] | map('tojson') | join('|') }}"
    "{% elif arg['type'] is string and arg['type'] == 'array' and arg['items'] is defined "
    "and arg['items']['type'] is string %}{{ arg['items']['type'] }}[]"
    "{% elif arg['type'] is string %}{{ arg['type'] }}"
    "{% elif arg['type'] is defined %}{{ arg['type'] | join('|') }}"
    "{% else %}any{% endif %}"
    "{% if not loop.last %}, {% endif %}{% endfor %})"
    "{% if not loop.last %}{{ '\\n' }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}"
    "{% if documents %}<|im_start|>system\n# Documents\n"
    "{% for d in documents %}{{ d.title | default('') }}: {{ d.text | default('') }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user\n{% endif %}"
    "<tool_response>"
    "{% if message.content is string %}{{ message.content }}"
    "{% elif message.content %}{% for part in message.content %}{{ part.text | default('') }}{% endfor %}"
    "{% endif %}</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% elif not (loop.first and system and tools) %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}"
    "{% elif message.content %}{% for part in message.content %}{{ part.text | default('') }}{% endfor %}"
    "{% endif %}"
    "{% for call in message.tool_calls or [] %}"
    "{% set c = call.function if call.function is defined else call %}"
    '<tool_call>{"name": {{ c.name | tojson }}, "arguments": '
    "{% if c.arguments is string %}{{ c.arguments }}{% else %}{{ c.arguments | tojson }}{% endif %}"
    "}</tool_call>{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The built-in model's template, ChatML with Qwen's tool conventions in a compact form (its context
is 1024 bytes): the tools go in the system turn (after the system message, if any) under ``# Tools``,
one line per tool, ``name(arg: type, optional?: type, choice: "a"|"b")`` (no descriptions); a call
is ``<tool_call>{"name": N, "arguments": A}</tool_call>`` right after the assistant's text; the
results of consecutive ``tool`` messages share one ``user`` turn as ``<tool_response>`` blocks."""


def byte_tokenizer() -> Tokenizer:
    """A BPE model over the 256 byte-level characters (no merges) plus the four special tokens."""
    alphabet = ByteLevel.alphabet()
    byte_to_char = bytes_to_unicode()
    vocab = {byte_to_char[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel uses)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars), strict=True))
