#!/usr/bin/env python3
"""Golden data for Corolla's tokenizers and chat templates, produced by Hugging Face itself.

Tokenizers: learns SMALL BPE vocabularies of our own (a plain deterministic trainer below, on text written
for this project), builds Hugging Face `tokenizers` objects in the shapes real models use, and writes for each
    tests/data/tokenizers/<name>/tokenizer.json, tokenizer_config.json, golden.json
where golden.json holds texts with the ids HF `tokenizers` gives them (with and without special tokens) and
the text HF decodes back, plus id sequences chosen to exercise decoding (split multi-byte characters, byte
tokens, special tokens).

  bpe-smollm    byte-level BPE, Digits(individual) + ByteLevel pre-tokenizer (SmolLM / GPT-2 style)
  bpe-llama3    byte-level BPE, Llama-3 Split regex, ignore_merges, BOS added by TemplateProcessing
  bpe-qwen2     byte-level BPE, NFC normalizer, Qwen2 Split regex (single digits)
  bpe-bloom     byte-level BPE, BLOOM's Split regex (words with their leading space, a nested character class
                of punctuation), no BOS added (BLOOM's layout)
  bpe-falcon    byte-level BPE, Falcon's pre-tokenizer: Punctuation (contiguous), ByteLevel, then Digits and a
                Split of digit triples, which read the words in the byte alphabet (a UTF-8 continuation byte
                0xB2 reads as '²' there, so Cyrillic 'в' is cut in two)
  bpe-deepseek-llm, bpe-deepseek-coder, bpe-deepseek-v3
                byte-level BPE with DeepSeek's Sequence of Splits (letters, marks, CJK, digits), Digits(individual)
                for the first two, BOS added by TemplateProcessing
  spm-legacy    SentencePiece-style BPE with byte fallback, Prepend/Replace normalizer, Strip decoder
                (Llama-2's tokenizer.json layout)
  spm-metaspace SentencePiece-style BPE with byte fallback, Metaspace pre-tokenizer (prepend_scheme "first")
                and Metaspace decoder (newer Llama/Mistral layout)
  spm-gemma     SentencePiece-style BPE with byte fallback in Gemma's layout (transformers' GemmaTokenizer):
                <pad> <eos> <bos> <unk> first, spaces replaced by ▁ with no prefix added, a Split on spaces
                (merged with the previous piece), BOS added, a decoder without Strip

For each byte-level one whose pre-tokenizer llama.cpp names (tokenizer.ggml.pre), also vocab.gguf (the same
vocabulary as llama.cpp's converter writes it, with the `gguf` package) and gguf_golden.json (the ids llama.cpp's
split rules give each text, computed by Hugging Face tokenizers with those rules in place of the model's, marked
where they differ from the model's own tokenizer.json).

Chat templates: renders conversations with transformers' apply_chat_template and the real Jinja templates of
SmolLM2-Instruct, Qwen2-Instruct, Llama-3-Instruct, Llama-2-chat, Mistral-Instruct, Gemma 2, Phi-3 (both published
forms, and Phi-3-medium's), Phi-3.5, Phi-4-mini, Phi-4 (both forms), Qwen3 (also with enable_thinking=False),
DeepSeek-LLM chat and Falcon 2, and writes
    tests/data/chat_templates/golden.json

Needs the PyPI packages `tokenizers`, `transformers` and `gguf` (no model hub access). Output is deterministic; rerun
after changing this script and commit the result:  python3 tools/make_tokenizer_golden.py
"""

import json
import os
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

ROOT = Path(__file__).resolve().parent.parent
OUT_TOK = ROOT / "tests" / "data" / "tokenizers"
OUT_CHAT = ROOT / "tests" / "data" / "chat_templates"

# Training text, written for this project.
CORPUS = """
The lighthouse keeper rose before dawn, as he had done for thirty-one years. He climbed the spiral stairs,
counted the steps out of habit (there were 117 of them), and wiped the salt from the great lens. Outside,
the sea was the colour of pewter and the gulls were already arguing over the harbour.

"You'll want your coat," his daughter said when he came down. "The wind's turned north, and it isn't going
to turn back before Thursday." She was right, of course; she usually was. They'd lived together in the
cottage since her mother died, and between them they kept the light, the garden, and a ledger of every ship
that passed: 4,312 entries, the oldest written in pencil that had faded almost to nothing.

On the first Monday of each month a boat brought flour, lamp oil, letters and newspapers that were already a
week old. The keeper read them anyway, slowly, from the front page to the tide tables. He didn't trust news
that arrived too quickly. "If it matters," he liked to say, "it'll still matter next week."

In the evenings they played chess by the stove. She won more often than he did, which pleased him more than
he admitted. Sometimes, when the weather was calm, they walked along the cliff path to the old signal station
and watched the lights of the fishing fleet go out one by one, like candles on a cake that nobody had wished on.

Numbers in the ledger: 1, 12, 123, 1234, 12345, 3.14159, 2.71828, 1,000,000 and 0.5% of the total.
Dates: 1999-12-31, 2024-02-29. Times: 07:45, 23:59. Prices: $19.99, €5, £12.50.
Code: def add(a, b): return a + b  # adds two numbers
      for (int i = 0; i < n; ++i) { sum += x[i]; }
      if x != None and y >= 10: print("ok")
Shouting: THE STORM IS COMING! DON'T GO OUT! WE'LL WAIT. I'M SURE. THEY'VE GONE.

Le gardien du phare se levait avant l'aube. Il était fier de son travail, même en hiver.
Der Leuchtturmwärter stand vor der Morgendämmerung auf. Über die Jahre hatte er viel gesehen.
Смотритель маяка вставал до рассвета и поднимался по винтовой лестнице.
灯台守は夜明け前に起きた。彼は三十一年間、毎朝そうしていた。
灯塔看守人每天黎明前起床，擦亮巨大的透镜。
¡Qué tormenta! ¿Vendrá el barco mañana? Ñandú, acción, corazón.
Emoji: 🌊🌊 ⛵ 🐟🐟🐟 👍 ❤️ ☕
"""

# Texts the golden files record (written for this project).
TEXTS = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    " \t\n ",
    "Hello world",
    " Hello world",
    "Hello  world",
    "Hello world!  ",
    "The lighthouse keeper rose before dawn.",
    "the LIGHTHOUSE Keeper",
    "I'm sure you'll see they've gone, don't you think? It's WE'LL and I'M and They'RE.",
    "1 12 123 1234 12345 123456 1234567",
    "3.14159 and 2,718.28 and 1e10",
    "Version 2.0.1 released on 2024-02-29 at 07:45.",
    "$19.99 €5 £12.50 ¥300",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += x[i];\n}",
    "line one\nline two\r\nline three\n\n\nend",
    "   leading spaces and trailing spaces   ",
    "Le gardien du phare se levait avant l'aube.",
    "Über die Jahre hatte er viel gesehen: Größe, Maß, Straße.",
    "Смотритель маяка вставал до рассвета.",
    "灯台守は夜明け前に起きた。",
    "灯塔看守人每天黎明前起床",
    "Emoji: 🌊⛵🐟 👍🏽 👨‍👩‍👧 ❤️",
    "Rare characters: ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∮ E⋅da = Q, 𓀀",
    "Combining: e\u0301 a\u0300 n\u0303 (decomposed) é à ñ (composed)",
    "Arabic: مرحبا بالعالم",
    "Mixed123abc456DEF",
    "!!!???...---",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<s>[INST] Who are you? [/INST] A keeper.</s>",
    "text with <|endoftext|> in the middle",
    "not quite special: <|im_start and im_end|> and <s and /s>",
    "a" * 300,
    "fill the <mask> here,  <mask>\t<mask>x and <sep>  next <sep>\nend [NOTE] [NOTE]x",
    "zorp zorps xzorp zorp_ zorp. (zorp) gatezorp zorp1 ézorp zorpé 'zorp' 灯zorp",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
]

# Conversations for the chat template golden file.
CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one?"},
    ],
    [
        {"role": "system", "content": "You keep a lighthouse."},
        {"role": "user", "content": "  How many steps?  "},
        {"role": "assistant", "content": "   There are 117 steps.   "},
        {"role": "user", "content": "Thanks!\n"},
    ],
    [{"role": "user", "content": "Écris « bonjour » en 日本語, please.\nTwo lines."}],
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "Then I answer."}],
    # Reasoning in an earlier answer (Qwen3 drops it from turns before the last question) and in the last one.
    [
        {"role": "user", "content": "Solve 2+2."},
        {"role": "assistant", "content": "<think>\nTwo and two.\n</think>\n\nIt is 4."},
        {"role": "user", "content": "And 3+3?"},
    ],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!"}],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "One"},
        {"role": "assistant", "content": "Two"},
        {"role": "system", "content": "Be brief from now on."},
        {"role": "user", "content": "Three"},
    ],
]

# Extra template arguments some cases are rendered with too (Qwen3's switch).
TEMPLATE_KWARGS = {"qwen3": [{"enable_thinking": False}]}

# The chat templates as the models publish them (tokenizer_config.json "chat_template").
CHAT_TEMPLATES = {
    "smollm2": {
        "bos": "<|im_start|>",
        "eos": "<|im_end|>",
        "template": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
        "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    },
    "qwen2": {
        "bos": None,
        "eos": "<|im_end|>",
        "template": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    },
    "llama3": {
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        "template": "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
        " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    },
    "llama2": {
        "bos": "<s>",
        "eos": "</s>",
        "template": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    },
    "mistral": {
        "bos": "<s>",
        "eos": "</s>",
        "template": "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    },
    # Gemma and Gemma 2 instruction-tuned (google/gemma-7b-it, google/gemma-2-9b-it).
    "gemma2": {
        "bos": "<bos>",
        "eos": "<eos>",
        "template": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
        "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
    },
    # Phi-3-mini-4k/128k-instruct (the form published since mid-2024).
    "phi3": {
        "bos": "<s>",
        "eos": "<|endoftext|>",
        "template": "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
        "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
    },
    # Phi-3.5-mini-instruct: as Phi-3's, without an empty system message.
    "phi3.5": {
        "bos": "<s>",
        "eos": "<|endoftext|>",
        "template": "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
        "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
        "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
    },
    # Phi-3-mini-4k-instruct as first released: every user turn opens the assistant's, system messages dropped.
    "phi3-original": {
        "bos": "<s>",
        "eos": "<|endoftext|>",
        "template": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
        "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}"
        "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
    },
    # Phi-3-medium-4k/128k-instruct: the same without BOS.
    "phi3-medium": {
        "bos": "<s>",
        "eos": "<|endoftext|>",
        "template": "{% for message in messages %}{% if (message['role'] == 'user') %}"
        "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}"
        "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
    },
    # Phi-4-mini-instruct.
    "phi4-mini": {
        "bos": "<|endoftext|>",
        "eos": "<|endoftext|>",
        "template": "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and "
        "message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + "
        "message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + "
        "message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}",
    },
    # Phi-4 (microsoft/phi-4), with the generation prompt on request.
    "phi4": {
        "bos": "<|endoftext|>",
        "eos": "<|im_end|>",
        "template": "{% for message in messages %}{% if (message['role'] == 'system') %}"
        "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}"
        "{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}}"
        "{% elif (message['role'] == 'assistant') %}"
        "{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}",
    },
    # Phi-4 as first released: every user turn opens the assistant's.
    "phi4-original": {
        "bos": "<|endoftext|>",
        "eos": "<|im_end|>",
        "template": "{% for message in messages %}{% if (message['role'] == 'system') %}"
        "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}"
        "{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}"
        "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
    },
    # Qwen3 (Qwen/Qwen3-0.6B as released; the hybrid thinking models share it).
    "qwen3": {
        "bos": None,
        "eos": "<|im_end|>",
        "template": (
        "{%- if tools %}\n"
        "    {{- '<|im_start|>system\\n' }}\n"
        "    {%- if messages[0].role == 'system' %}\n"
        "        {{- messages[0].content + '\\n\\n' }}\n"
        "    {%- endif %}\n"
        "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
        "    {%- for tool in tools %}\n"
        "        {{- \"\\n\" }}\n"
        "        {{- tool | tojson }}\n"
        "    {%- endfor %}\n"
        "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
        "{%- else %}\n"
        "    {%- if messages[0].role == 'system' %}\n"
        "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endif %}\n"
        "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
        "{%- for message in messages[::-1] %}\n"
        "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
        "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
        "        {%- set ns.multi_step_tool = false %}\n"
        "        {%- set ns.last_query_index = index %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- for message in messages %}\n"
        "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
        "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
        "    {%- elif message.role == \"assistant\" %}\n"
        "        {%- set content = message.content %}\n"
        "        {%- set reasoning_content = '' %}\n"
        "        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n"
        "            {%- set reasoning_content = message.reasoning_content %}\n"
        "        {%- else %}\n"
        "            {%- if '</think>' in message.content %}\n"
        "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
        "                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
        "            {%- endif %}\n"
        "        {%- endif %}\n"
        "        {%- if loop.index0 > ns.last_query_index %}\n"
        "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
        "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
        "            {%- else %}\n"
        "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
        "            {%- endif %}\n"
        "        {%- else %}\n"
        "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
        "        {%- endif %}\n"
        "        {%- if message.tool_calls %}\n"
        "            {%- for tool_call in message.tool_calls %}\n"
        "                {%- if (loop.first and content) or (not loop.first) %}\n"
        "                    {{- '\\n' }}\n"
        "                {%- endif %}\n"
        "                {%- if tool_call.function %}\n"
        "                    {%- set tool_call = tool_call.function %}\n"
        "                {%- endif %}\n"
        "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
        "                {{- tool_call.name }}\n"
        "                {{- '\", \"arguments\": ' }}\n"
        "                {%- if tool_call.arguments is string %}\n"
        "                    {{- tool_call.arguments }}\n"
        "                {%- else %}\n"
        "                    {{- tool_call.arguments | tojson }}\n"
        "                {%- endif %}\n"
        "                {{- '}\\n</tool_call>' }}\n"
        "            {%- endfor %}\n"
        "        {%- endif %}\n"
        "        {{- '<|im_end|>\\n' }}\n"
        "    {%- elif message.role == \"tool\" %}\n"
        "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
        "            {{- '<|im_start|>user' }}\n"
        "        {%- endif %}\n"
        "        {{- '\\n<tool_response>\\n' }}\n"
        "        {{- message.content }}\n"
        "        {{- '\\n</tool_response>' }}\n"
        "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
        "            {{- '<|im_end|>\\n' }}\n"
        "        {%- endif %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|im_start|>assistant\\n' }}\n"
        "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
        "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endif %}"
        ),
    },
    # DeepSeek-LLM chat (deepseek-ai/deepseek-llm-7b-chat).
    "deepseek-llm": {
        "bos": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
        "eos": "<\uff5cend\u2581of\u2581sentence\uff5c>",
        "template": "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}"
        "{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
        "{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
        "{{ 'Assistant:' }}{% endif %}",
    },
    # Falcon 2 (tiiuae/falcon-11B). Falcon-7B/40B-instruct publish no template (plain).
    "falcon2": {
        "bos": None,
        "eos": "<|endoftext|>",
        "template": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ 'User: \n' + "
        "message['content'] }}\n{% elif message['role'] == 'system' %}\n{{ 'System: ' + message['content'] }}\n"
        "{% elif message['role'] == 'assistant' %}\n{{ 'Falcon:\n'  + message['content']}}\n{% endif %}\n"
        "{% if loop.last and add_generation_prompt %}\n{{ 'Falcon:' }}\n{% endif %}\n{% endfor %}",
    },
}

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# BLOOM's: a run of anything but whitespace and a few punctuation marks (and "(", "|", ")", which the nested class
# also names), with its leading space.
BLOOM_SPLIT = " ?[^(\\s|[.,!?…。，、।۔،])]+"
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPM_SPACE = "\u2581"


def char_class(ranges):
    """A regex character class body holding the code point ranges, written as the characters themselves (as a
    tokenizer.json holds them)."""
    return "".join(chr(a) if a == b else chr(a) + "-" + chr(b) for a, b in ranges)


# DeepSeek's pre-tokenizers (the Splits of deepseek-llm-7b-base's, deepseek-coder-6.7b-base's and DeepSeek-V3's
# tokenizer.json). The letter class of DeepSeek-LLM: the cased letters of the alphabetic scripts.
DEEPSEEK_LLM_LETTERS = [
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF),
    (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F), (0x386, 0x386),
    (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481), (0x48A, 0x52F), (0x531, 0x556),
    (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107), (0x210A, 0x2113),
    (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D),
    (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184),
    (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B),
    (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943),
]
DEEPSEEK_MARKS = char_class([(0x21, 0x2F), (0x3A, 0x7E), (0xFF01, 0xFF0F), (0xFF1A, 0xFF5E), (0x2018, 0x201F),
                             (0x3000, 0x3002)])
DEEPSEEK_CJK = char_class([(0x4E00, 0x9FA5), (0x800, 0x4E00), (0xAC00, 0xD7FF)])
DEEPSEEK_LLM_SPLITS = ["[\r\n]", "\\s?[" + char_class(DEEPSEEK_LLM_LETTERS) + "]+", "\\s?[" + DEEPSEEK_MARKS + "]+",
                       "\\s+$", "[" + DEEPSEEK_CJK + "]+"]
DEEPSEEK_CODER_SPLITS = ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[" + DEEPSEEK_CJK + "]+"]
DEEPSEEK_V3_SPLITS = [
    r"\p{N}{1,3}",
    "[" + char_class([(0x4E00, 0x9FA5), (0x3040, 0x309F), (0x30A0, 0x30FF)]) + "]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]


def corpus_lines():
    return [line for line in CORPUS.split("\n") if line.strip()]


def learn_merges(words, alphabet, n_merges):
    """A plain, deterministic BPE trainer: repeatedly merge the most frequent adjacent pair (ties: the
    smallest pair in string order). `words` maps a word (tuple of symbols) to its count."""
    words = {tuple(w): c for w, c in words.items()}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, c in words.items():
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + c
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        if counts[best] < 2:
            break
        merges.append(best)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    return merges


def word_counts(pre_tokenizer, normalizer=None):
    counts = {}
    for line in corpus_lines():
        if normalizer is not None:
            line = normalizer.normalize_str(line)
        for word, _ in pre_tokenizer.pre_tokenize_str(line):
            counts[word] = counts.get(word, 0) + 1
    return counts


def byte_level_tokenizer(pre_tokenizer, specials, n_merges, normalizer=None, ignore_merges=False):
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    counts = word_counts(pre_tokenizer, normalizer)
    merges = learn_merges({tuple(w): c for w, c in counts.items()}, alphabet, n_merges)
    vocab = {}
    for piece in specials + alphabet + [a + b for a, b in merges]:
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def make_bpe_smollm():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok = byte_level_tokenizer(pre, specials, 450)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("[NOTE]", special=False, normalized=False)])
    # lstrip/rstrip and single_word as some models declare them.
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False)])
    tok.add_tokens([AddedToken("<sep>", lstrip=False, rstrip=True, special=False, normalized=False),
                    AddedToken("zorp", single_word=True, special=False, normalized=False)])
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATES["smollm2"]["template"],
    }
    return tok, config


def make_bpe_llama3():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok = byte_level_tokenizer(pre, specials, 500, ignore_merges=True)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", bos)],
            ),
        ]
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "chat_template": CHAT_TEMPLATES["llama3"]["template"],
    }
    return tok, config


def make_bpe_qwen2():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok = byte_level_tokenizer(pre, specials, 350, normalizer=normalizers.NFC())
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATES["qwen2"]["template"],
    }
    return tok, config


def make_bpe_bloom():
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(BLOOM_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok = byte_level_tokenizer(pre, specials, 400)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {
        "tokenizer_class": "BloomTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_prefix_space": False,
    }
    return tok, config


def make_bpe_falcon():
    specials = [">>TITLE<<", ">>ABSTRACT<<", ">>INTRODUCTION<<", ">>SUMMARY<<", ">>COMMENT<<", ">>ANSWER<<",
                ">>QUESTION<<", ">>DOMAIN<<", ">>PREFIX<<", ">>SUFFIX<<", ">>MIDDLE<<", "<|endoftext|>"]
    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Punctuation(behavior="contiguous"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False),
        ]
    )
    # Merges learned without the two rules after ByteLevel, so that some join bytes those rules separate (Cyrillic
    # 'в' is 'Ð' '²' in the byte alphabet): only a tokenizer that cuts where Hugging Face cuts gives its ids.
    learn = pre_tokenizers.Sequence(
        [pre_tokenizers.Punctuation(behavior="contiguous"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok = byte_level_tokenizer(learn, specials, 400)
    tok.pre_tokenizer = pre
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "add_prefix_space": False,
    }
    return tok, config


def deepseek_specials():
    return ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"]


def make_bpe_deepseek(splits, digits, chat_template=None):
    """A DeepSeek-shaped tokenizer: its Splits, Digits(individual_digits) when `digits`, ByteLevel without the regex,
    BOS added by TemplateProcessing (tokenizer_config: add_bos_token)."""
    specials = deepseek_specials()
    steps = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in splits]
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok = byte_level_tokenizer(pre_tokenizers.Sequence(steps), specials, 450)
    bos = tok.token_to_id(specials[0])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{specials[0]} $A", pair=f"{specials[0]} $A {specials[0]} $B", special_tokens=[(specials[0], bos)])
    config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": specials[0],
        "eos_token": specials[1],
        "add_bos_token": True,
        "add_eos_token": False,
    }
    if chat_template:
        config["chat_template"] = chat_template
    return tok, config


def train_spm_style(n_merges, min_char_count=3):
    """A SentencePiece-style BPE: pieces start with ▁ and never cross words; characters seen fewer than
    `min_char_count` times are left out so that byte fallback is used. Returns (vocab, merges) with <unk>,
    <s>, </s> and the 256 byte tokens first, as Llama has them."""
    pre = pre_tokenizers.Metaspace(replacement=SPM_SPACE, prepend_scheme="always", split=True)
    counts = word_counts(pre)
    chars = {}
    for w, c in counts.items():
        for ch in w:
            chars[ch] = chars.get(ch, 0) + c
    alphabet = sorted(ch for ch, c in chars.items() if c >= min_char_count)
    known = set(alphabet)
    # Words are cut at unknown characters, which never merge.
    words = {}
    for w, c in counts.items():
        part = []
        for ch in list(w) + [None]:
            if ch in known:
                part.append(ch)
                continue
            if part:
                words[tuple(part)] = words.get(tuple(part), 0) + c
            part = []
    merges = learn_merges(words, alphabet, n_merges)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in alphabet + [a + b for a, b in merges]:
        vocab.setdefault(piece, len(vocab))
    return vocab, [list(m) for m in merges]


def spm_tokenizer_json(vocab, merges, layout, bos="<s>", specials=("<unk>", "<s>", "</s>")):
    specials = [
        {"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}
        for t in specials
    ]
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": specials,
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": bos, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}},
        },
        "decoder": None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPM_SPACE}
    decoders = [{"type": "Replace", "pattern": {"String": SPM_SPACE}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}]
    if layout == "legacy":
        data["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SPM_SPACE}, replace]}
        data["decoder"] = {"type": "Sequence",
                           "decoders": decoders + [{"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    elif layout == "gemma":  # no prefix space; a Split on spaces, which the normalizer has replaced
        data["normalizer"] = replace
        data["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                                 "invert": False}
        data["decoder"] = {"type": "Sequence", "decoders": decoders}
    else:
        data["pre_tokenizer"] = {"type": "Metaspace", "replacement": SPM_SPACE, "prepend_scheme": "first", "split": False}
        data["decoder"] = {"type": "Metaspace", "replacement": SPM_SPACE, "prepend_scheme": "first", "split": False}
    return Tokenizer.from_str(json.dumps(data))


def make_spm(layout):
    vocab, merges = train_spm_style(500)
    tok = spm_tokenizer_json(vocab, merges, layout)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "chat_template": CHAT_TEMPLATES["llama2" if layout == "legacy" else "mistral"]["template"],
    }
    return tok, config


def make_spm_gemma():
    """The spm vocabulary and merges in Gemma's layout, as transformers' GemmaTokenizer builds it."""
    vocab, merges = train_spm_style(500)
    gemma = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for piece in sorted((p for p in vocab if p not in ("<unk>", "<s>", "</s>")), key=vocab.get):
        gemma[piece] = len(gemma)
    tok = spm_tokenizer_json(gemma, merges, "gemma", bos="<bos>", specials=("<pad>", "<eos>", "<bos>", "<unk>"))
    config = {
        "tokenizer_class": "GemmaTokenizer",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_bos_token": True,
        "add_eos_token": False,
    }
    return tok, config


def decode_cases(tok):
    """Id sequences that exercise decoding: each token of a text alone, multi-byte characters cut in two,
    lone byte tokens, special tokens at the start."""
    cases = []
    for text in ["Größe 灯台 🌊 ꙮ", "Hello world", " two  spaces", "<|im_end|>Hello", "<s> Hello</s>"]:
        ids = tok.encode(text, add_special_tokens=True).ids
        cases.append(ids)
        cases.append(ids[1:])
        cases.append(ids[:-1])
        cases.extend([[i] for i in ids])
    vocab = tok.get_vocab()
    byte_ids = [vocab[f"<0x{b:02X}>"] for b in (0xE7, 0x81, 0xAF, 0x41, 0xF0)] if "<0xE7>" in vocab else []
    if byte_ids:
        cases += [byte_ids, byte_ids[:2], byte_ids[1:], byte_ids[3:4] + byte_ids[0:3]]
    unique = []
    for c in cases:
        if c not in unique:
            unique.append(c)
    return [
        {"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
         "text_skip_special": tok.decode(ids, skip_special_tokens=True)}
        for ids in unique
    ]


def write_tokenizer(name, tok, config):
    out = OUT_TOK / name
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=False)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))  # the golden ids come from the file as written
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False) + "\n")
    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        with_special = tok.encode(text, add_special_tokens=True).ids
        cases.append(
            {
                "text": text,
                "ids": ids,
                "ids_with_special": with_special,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(with_special, skip_special_tokens=True),
            }
        )
    golden = {"tokenizers_version": __import__("tokenizers").__version__, "vocab_size": tok.get_vocab_size(),
              "cases": cases, "decode_cases": decode_cases(tok)}
    (out / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=0) + "\n")


# The GGUF names (tokenizer.ggml.pre) of the pre-tokenizers above, and the rules llama.cpp gives each name (its
# src/llama-vocab.cpp), which a GGUF file is tokenized with: each is applied to every piece the previous one left.
GPT2_WORDS = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
CASED_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA_CPP_RULES = {
    "bpe-smollm": ("smollm", [r"\p{N}", GPT2_WORDS]),
    "bpe-llama3": ("llama-bpe", [CASED_CONTRACTIONS + LLAMA3_SPLIT[len("(?i:'s|'t|'re|'ve|'m|'ll|'d)"):]]),
    "bpe-qwen2": ("qwen2", [CASED_CONTRACTIONS + QWEN2_SPLIT[len("(?i:'s|'t|'re|'ve|'m|'ll|'d)"):]]),
    "bpe-bloom": ("bloom", [" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"]),
    "bpe-falcon": ("falcon", [r"[\p{P}\$\+<=>\^~\|`]+", GPT2_WORDS, "[0-9][0-9][0-9]"]),
    "bpe-deepseek-llm": ("deepseek-llm", DEEPSEEK_LLM_SPLITS + [r"\p{N}+"]),
    "bpe-deepseek-coder": ("deepseek-coder", DEEPSEEK_CODER_SPLITS + [r"\p{N}"]),
    "bpe-deepseek-v3": ("deepseek-v3", DEEPSEEK_V3_SPLITS),
}
# Why llama.cpp's tokenization of a name differs from the model's tokenizer.json on some golden texts.
LLAMA_CPP_DIFFERENCES = {
    "bpe-smollm": "GGUF has no lstrip, rstrip or single_word for added tokens (llama.cpp sets them only for a few "
                  "models it names), so <mask>, <sep> and zorp match as plain added tokens",
    "bpe-falcon": "llama.cpp splits digit runs and triples on the text; Falcon's tokenizer.json does it after "
                  "ByteLevel, in the byte alphabet (' 12' is two words there, a UTF-8 byte that reads as a digit "
                  "there cuts a character)",
}


def write_gguf_vocab(name, config):
    """tests/data/tokenizers/<name>/vocab.gguf: the tokenizer as llama.cpp's converter writes it (byte-level BPE:
    tokens, token types, merges, pre-tokenizer name, special token ids), and gguf_golden.json: the ids llama.cpp's
    rules give each golden text (Hugging Face tokenizers with llama.cpp's splits in place of the model's own),
    marked where they differ from the model's tokenizer.json."""
    import gguf

    out = OUT_TOK / name
    data = json.loads((out / "tokenizer.json").read_text())
    pre, rules = LLAMA_CPP_RULES[name]
    added = {t["id"]: t for t in data["added_tokens"]}
    vocab = dict(data["model"]["vocab"])
    for t in data["added_tokens"]:
        vocab[t["content"]] = t["id"]
    tokens = [None] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    assert None not in tokens, f"{name}: token ids are not dense"
    types = [(3 if added[i]["special"] else 4) if i in added else 1 for i in range(len(tokens))]
    merges = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    ids_of = {t: i for i, t in enumerate(tokens)}
    bos = ids_of.get(config.get("bos_token")) if config.get("bos_token") else None
    eos = ids_of[config["eos_token"]]
    hf = Tokenizer.from_file(str(out / "tokenizer.json"))
    add_bos = bos is not None and hf.encode("x", add_special_tokens=True).ids[:1] == [bos]

    writer = gguf.GGUFWriter(str(out / "vocab.gguf"), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if bos is not None:
        writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(add_bos)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    # The same BPE model behind llama.cpp's splits; added tokens without the options GGUF cannot hold.
    emulated = dict(data)
    emulated["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in rules] + [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    emulated["added_tokens"] = [dict(t, lstrip=False, rstrip=False, single_word=False) for t in data["added_tokens"]]
    emulated["post_processor"] = None
    llama = Tokenizer.from_str(json.dumps(emulated))
    cases, differ = [], []
    for text in TEXTS:
        ids = llama.encode(text, add_special_tokens=False).ids
        same = ids == hf.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "ids_with_special": ([bos] if add_bos else []) + ids,
                      "same_as_hugging_face": same})
        if not same:
            differ.append(text)
    assert not differ or name in LLAMA_CPP_DIFFERENCES, f"{name}: llama.cpp's rules differ on {differ}"
    golden = {"pre": pre, "differences": LLAMA_CPP_DIFFERENCES.get(name, ""), "cases": cases}
    (out / "gguf_golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=0) + "\n")
    print(f"{name}: GGUF '{pre}', {len(differ)} of {len(TEXTS)} texts tokenized differently from tokenizer.json"
          + "".join(f"\n    {t[:70]!r}" for t in differ), file=sys.stderr)


def write_chat_golden():
    from transformers import PreTrainedTokenizerFast

    base = Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
    cases = []
    for name, spec in CHAT_TEMPLATES.items():
        hf = PreTrainedTokenizerFast(tokenizer_object=base, bos_token=spec["bos"], eos_token=spec["eos"])
        for kwargs in [{}] + TEMPLATE_KWARGS.get(name, []):
            for index, conversation in enumerate(CONVERSATIONS):
                for add_generation_prompt in (False, True):
                    case = {"template": name, "conversation": index, "add_generation_prompt": add_generation_prompt}
                    if kwargs:
                        case["kwargs"] = kwargs
                    try:
                        case["text"] = hf.apply_chat_template(
                            conversation, chat_template=spec["template"], tokenize=False,
                            add_generation_prompt=add_generation_prompt, **kwargs,
                        )
                    except Exception as e:  # the template raised: roles out of order, unsupported role
                        case["error"] = str(e)
                    cases.append(case)
    import transformers

    golden = {"transformers_version": transformers.__version__, "templates": CHAT_TEMPLATES,
              "conversations": CONVERSATIONS, "cases": cases}
    OUT_CHAT.mkdir(parents=True, exist_ok=True)
    (OUT_CHAT / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n")


def main():
    makers = {
        "bpe-smollm": make_bpe_smollm,
        "bpe-llama3": make_bpe_llama3,
        "bpe-qwen2": make_bpe_qwen2,
        "bpe-bloom": make_bpe_bloom,
        "bpe-falcon": make_bpe_falcon,
        "bpe-deepseek-llm": lambda: make_bpe_deepseek(DEEPSEEK_LLM_SPLITS, True,
                                                      CHAT_TEMPLATES["deepseek-llm"]["template"]),
        "bpe-deepseek-coder": lambda: make_bpe_deepseek(DEEPSEEK_CODER_SPLITS, True),
        "bpe-deepseek-v3": lambda: make_bpe_deepseek(DEEPSEEK_V3_SPLITS, False),
        "spm-legacy": lambda: make_spm("legacy"),
        "spm-metaspace": lambda: make_spm("metaspace"),
        "spm-gemma": make_spm_gemma,
    }
    for name, make in makers.items():
        tok, config = make()
        write_tokenizer(name, tok, config)
        if name in LLAMA_CPP_RULES:
            write_gguf_vocab(name, config)
    write_chat_golden()
    total = sum(f.stat().st_size for d in (OUT_TOK, OUT_CHAT) for f in d.rglob("*") if f.is_file())
    print(f"wrote {OUT_TOK} and {OUT_CHAT}: {total / 1024:.0f} KiB", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
