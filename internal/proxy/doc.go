// Package proxy is the pure core of the proxy flow's endpoint: a sample
// runs the user's own agent in its sandbox with OPENAI_BASE_URL
// and OPENAI_API_KEY pointing at an endpoint for that trajectory alone, and
// each POST /v1/chat/completions or /v1/completions call becomes one
// generation step. This package decodes the calls, keeps the trajectory's
// calls as one token stream, and turns a generation back into OpenAI's
// response, whole or as server-sent events. It does no I/O, reads no
// clock and keeps no global state; the HTTP handler, the scheduler and the
// trajectory's state machine are the caller's: the env-worker serves the
// endpoint to a proxy-flow sample's agent (internal/envworker, proxy.go;
// docs/agent.md, "The proxy flow").
//
// # One call
//
//	req, err := DecodeChatRequest(body)          // err: a *RequestError; ErrorFor(err) is the 400
//	step, err := conv.Next(req.Call(), tmpl)     // what the call appends to the stream
//	params, err := req.Sampling(base, room)      // room < 1: ErrNoRoom
//	res := generate(step.Prompt, params)         // the caller's generation step
//	reply, err := ParseChatReply(tmpl, res, ParsersFor(tmpl).ForRequest(req))
//	conv.Commit(step, req.Call(), reply)
//	resp := reply.Chat(Meta{ID: id, Created: now, Model: req.Model}, len(step.Prompt), req.Logprobs)
//	// req.Stream: WriteChatStream(w, resp, req.IncludeUsage); else write resp as JSON
//
// A text completion is the same with DecodeCompletionRequest,
// conv.NextText(req.Prompt, tmpl) or conv.NextIDs(req.PromptIDs),
// ParseTextReply, reply.Completion and WriteCompletionStream.
//
// # The token stream
//
// The stream is the trajectory's token ids: what each call appends (Step.Append,
// loss mask 0) followed by its generated ids (Reply.IDs, as the server
// returned them, loss mask 1). It is cut into segments: a segment is one
// prompt the model could have seen whole, and a call either continues the
// current segment or starts a new one. As AReaL's proxy does when it
// exports a conversation "concat", a call continues when its prompt is the
// previous prompt and reply with more turns after them, and otherwise the
// agent has rewritten its history (compacted, truncated or edited it), and
// its whole prompt is a new segment. Exactly:
//
// A chat call continues the segment when all of these hold:
//   - the previous call committed was a chat call (not the first call, nor
//     a text completion);
//   - its tools equal the previous call's, each compared as JSON with
//     insignificant white space removed, in order;
//   - its messages start with the previous call's messages, each the same,
//     then the reply as returned, then at least one more message. Two
//     messages are the same when their roles, contents and tool calls
//     are: a content null and "" alike, text parts joined with "\n" first
//     (developer read as system), tool calls by name and arguments, the
//     arguments compared as JSON without insignificant white space (ids
//     ignored). A message's name and tool_call_id and an assistant
//     message's reasoning_content are not compared: chat templates do not
//     render them. The reply as returned is the assistant message with
//     the response's content (what follows the reasoning, before the first
//     tool call) and tool calls;
//   - no message after the reply is an assistant message with tool calls
//     (the template renders those only in a whole conversation).
//
// Then the call appends, in order: ChatTemplate.CloseTurn of the reply's
// generated ids (the generated ids themselves are already in the stream,
// token for token); each message after the reply, a run of consecutive
// tool messages as one ToolTemplate.ToolResults turn (as the tool_call
// flow appends a tool message, and as Qwen3's template merges them), any
// other message as ChatTemplate.Message(role, content); then
// GenerationPrompt. Otherwise the call starts a new segment: its messages
// and tools rendered whole as agent.MessagesOpening renders a sample's
// messages (apply_chat_template(messages, tools=tools,
// add_generation_prompt=True), encoded by the template's tokenizer), and
// Step.Reason says why: "first call", "the previous call was a text
// completion", "tools changed", "N messages do not extend the previous
// call's M and its reply", "message I differs", "message I is not the reply
// as returned", "message I is an assistant message with tool calls the
// model did not generate".
//
// A text completion continues the segment when its prompt's ids (a string
// prompt encoded by the template's tokenizer, or the ids as given) start
// with the segment's ids, the previous reply's generated ids included; it
// appends the rest. Otherwise its ids are a new segment ("first call",
// "the prompt differs from the segment at token I", or a prompt shorter
// than the segment). A text prompt that re-encodes a reply differently
// from the ids generated starts a new segment; send ids to avoid that.
//
// Next and NextIDs do not change the Conversation; Commit records a call
// once its generation is done, so a call whose generation failed or was
// aborted can be made again with the same result.
//
// # Requests
//
// Requests are decoded as OpenAI's API and vLLM's OpenAI-compatible server
// define them (vllm/entrypoints/openai/protocol.py; see openai.go). What
// the endpoint cannot serve is refused by name with CodeUnsupported: n
// other than 1, tool_choice "required" or a named function,
// top_logprobs > 0 (or a completion's logprobs > 0), non-zero presence or
// frequency penalties, a response_format other than text, content parts
// other than text, a list of prompts, echo, suffix, best_of, and a last
// message from the assistant. seed is accepted and not applied; so is a
// tool_choice without tools, which vLLM refuses. Unknown fields are
// ignored, as vLLM does. Sampling fields override the trajectory's own
// (SamplingFields.Params); max tokens is capped by the room left.
//
// # Replies
//
// A reply's text is its ids decoded without the trailing stop token; a
// ReasoningParser (Think, vLLM's qwen3) splits off reasoning_content and a
// ToolCallParser (Hermes, vLLM's hermes) reads <tool_call> blocks into
// tool_calls; ParsersFor picks them for a chat template. Tool call ids are
// deterministic (ToolCallID). Reasoning goes out as reasoning_content, the
// name vLLM's protocol.py used when this was written (later versions also
// write it as reasoning).
package proxy
