// Package chattemplate renders a model's own chat template the way Hugging
// Face transformers does, and extends a rendered conversation turn by turn.
//
// # Loading
//
// Load reads a model directory as transformers does: chat_template.jinja
// and additional_chat_templates/<name>.jinja when present, else
// chat_template in tokenizer_config.json (one template, or a list of named
// ones: a name given to Load, else "tool_use" when the input has tools and
// the model has it, else "default"), and the special tokens bos_token,
// eos_token, unk_token, sep_token, pad_token, cls_token and mask_token
// (strings or AddedToken objects) from tokenizer_config.json.
//
// # Rendering
//
// Template.Render is apply_chat_template(messages, tools=..., documents=...,
// add_generation_prompt=..., tokenize=False, **kwargs). The template sees
// messages, tools and documents (None when not given), add_generation_prompt,
// the special tokens that are set, and the keyword arguments, which override
// the rest. It is rendered with gonja under Jinja2's rules as transformers
// configures them: trim_blocks and lstrip_blocks, no autoescape, the final
// newline dropped, loop controls ({% break %}, {% continue %}), namespace(),
// raise_exception(msg) (a *RaiseError carrying msg), strftime_now(fmt), and
// tojson as transformers defines it (json.dumps with ensure_ascii=False,
// optional indent, separators and sort_keys; key order kept).
//
// Where gonja departs from Jinja2 this package bridges it:
//
//   - a conditional expression "A if C else B" anywhere in an expression
//     (gonja parses it only as a whole {{ }} tag) is rewritten in the token
//     stream into ((C) and [A] or [B])[0], which evaluates only the chosen
//     branch;
//   - a subscript x[i] is rewritten into a call that follows Python:
//     negative indexes count from the end (gonja misses messages[-1] on a
//     one-message list) and strings index by character, not byte;
//   - x % y and x ** y are rewritten into calls: % formats strings
//     printf-style ("%s=%d" % (k, v), %(name)s with a mapping) and takes
//     the divisor's sign on numbers, as Python; ** gives an int for ints,
//     grouping to the left as Jinja2 does (gonja computes % as integer
//     modulo only and ** always as a float);
//   - lstrip_blocks strips the blanks before a {% %} or {# #} tag only
//     when they start a line (gonja also strips them after another tag);
//   - None is a value of its own, apart from undefined: a JSON null, tools and
//     documents when absent, and `none` print as "None", are defined, and are
//     the only values `is none` accepts; `x in None` is an error, as in
//     Python (the right operand of `in` is checked by a rewritten call);
//   - str methods strip, lstrip, rstrip, split, rsplit, startswith,
//     endswith, replace, upper, lower, title and capitalize follow Python
//     (whitespace runs without arguments, tuples of prefixes);
//   - JSON objects keep their key order through tojson, items() and the
//     items filter; a Go map given as input has its keys sorted;
//   - the tests sequence, iterable, none, true and false, and the filters
//     trim, string, items and dictsort, follow Jinja2;
//   - transformers' {% generation %} block renders its body;
//   - range() returns a list of at most 100000 items, as Jinja2's sandbox
//     allows (gonja's feeds a channel from a goroutine that leaks when not
//     drained); macro recursion, loop iterations (a million per rendering)
//     and the output (64 MiB) are bounded.
//
// Refused with ErrUnsupported rather than rendered differently: {% include
// %}, {% import %}, {% from %}, {% extends %}, {% block %}, {% trans %},
// {% autoescape %}, strftime_now directives outside the C locale's common
// set, printf conversions other than s r a d i u f e g x o c, and integer
// powers past 64 bits. Known remaining differences from Jinja2, on input
// Jinja2 rejects or templates do not write: gonja concatenates a string with
// a non-string where Python raises TypeError, and the capitalised literal
// None behaves as undefined (templates write none).
//
// # Turns
//
// A trajectory grows turn by turn and its earlier tokens never change, as
// token-in/token-out trainers (slime, AReaL) keep them. One rule defines
// the text a new turn appends:
//
//	delta = Render(conversation so far + new messages) − text so far
//
// valid only when the text so far is a byte prefix of the longer rendering.
// Delta(prev, next) applies it to two renderings. Extend(prev, completion,
// next) applies it after a generation step: the text so far is Render(prev)
// with the generation prompt (for example "<|im_start|>assistant\n")
// followed by the completion exactly as the model generated it, including
// the end-of-turn token it stopped on (<|im_end|>); next holds the reply as
// an assistant message followed by the new messages, normally with the
// generation prompt again. The delta is then what the template renders
// after the end-of-turn token (Qwen's "\n", the next user or tool turn, the
// next generation prompt), to be tokenized on its own and appended. The rule
// is on text: tokenizing the delta alone can differ from tokenizing the whole
// rendering where a merge would span the boundary, which the end-of-turn
// special token before it prevents in practice.
//
// When the text so far is not a prefix, Delta and Extend return a
// *PrefixError with the byte offset where the renderings diverge and a short
// excerpt of both; they never return a delta that would silently disagree
// with the template. Templates that rewrite earlier turns break the rule:
// Qwen3 drops the reasoning of assistant turns before the last user message
// and does not repeat the empty think block its enable_thinking=false prompt
// ends with; templates that trim content (Llama 3.1's | trim) break it when
// a reply ends in whitespace; templates that move the system prompt or
// insert a date as the conversation grows break it at that point.
package chattemplate
