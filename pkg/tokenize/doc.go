// Package tokenize turns chat messages into token ids and token ids back into
// text. A trajectory's token ids are the source of truth in actloop: generated
// tokens are kept exactly as the inference server returned them, and only the
// messages actloop itself adds (system prompt, task, observations, format
// errors) are tokenized here, through a Tokenizer and a ChatTemplate.
//
// Bytes is a byte-level tokenizer shared with the simulator (pkg/sim); a real
// model's tokenizer and chat template plug in behind the same interfaces.
package tokenize
