// Package tokenize turns chat messages into token ids and token ids back into
// text. A trajectory's token ids are the source of truth in actloop: generated
// tokens are kept exactly as the inference server returned them, and only the
// messages actloop itself adds (system prompt, task, observations, format
// errors) are tokenized here, through a Tokenizer and a ChatTemplate.
//
// Tokenizers: HF reads a Hugging Face tokenizer.json with a BPE model,
// byte-level (Qwen2/2.5/3, Llama 3, DeepSeek V3, GPT-OSS) or
// SentencePiece-style with byte fallback (Llama 2, Mistral, Gemma), and
// encodes and decodes as the tokenizers library does; it refuses, when
// loading, a model or component it does not implement (Unigram, WordPiece,
// a Precompiled normalizer, ...), naming it. testdata/hfref holds
// reference encodings of real model files that the tests compare with, id
// for id. Qwen returns the Qwen3 tokenizer built into the binary; Bytes is
// a byte-level toy tokenizer (one token per byte plus three ChatML
// specials) for tests and benchmarks. Templates: ChatML (Qwen2.5), Llama3, and Qwen3 (Qwen3's own
// template, with or without thinking), which is also a ToolTemplate: it
// renders tool definitions, tool calls and tool results. Model is a
// model's own Jinja chat template (internal/chattemplate) as a
// ChatTemplate, its pieces the deltas of the template's renderings, checked
// when it is built (a template that rewrites earlier turns is refused,
// naming the offset where its renderings diverge). Chat picks a tokenizer
// and a template as the ACTLOOP_MODEL_DIR, ACTLOOP_TOKENIZER and
// ACTLOOP_CHAT_TEMPLATE settings do.
//
// Every template delimits messages with special tokens, which the
// tokenizer cuts out before any merge, so appending a conversation's turns
// one by one yields the ids of tokenizing it whole, except where Qwen3's
// template rewrites earlier assistant turns on a whole rendering (see
// ChatTemplate and Qwen3).
package tokenize
