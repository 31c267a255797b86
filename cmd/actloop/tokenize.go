package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/chattemplate"
	"github.com/actloop/actloop/internal/tokenize"
)

// tokenizeOptions are actloop tokenize's flags.
type tokenizeOptions struct {
	model, messages, tools, kwargs, text string
	noGenerationPrompt, textSet          bool
}

func newTokenizeCmd() *cobra.Command {
	var o tokenizeOptions
	cmd := &cobra.Command{
		Use:   "tokenize --model DIR [--messages FILE] [--tools FILE] [--no-generation-prompt] [--template-kwargs JSON] [--text STRING]",
		Short: "Render a conversation with a model's own chat template and print its token ids",
		Long: `Render a conversation with the chat template of the model in DIR (a Hugging
Face snapshot, or any folder with tokenizer.json and tokenizer_config.json,
optionally chat_template.jinja: what ACTLOOP_MODEL_DIR names) as
apply_chat_template(messages, tools=..., add_generation_prompt=...,
**template_kwargs) does, tokenize it with the model's tokenizer.json, and
print one JSON object: {"text": the rendering, "ids": its token ids}.

--messages is a JSON file holding an array of messages in the OpenAI chat
format; --tools a JSON file holding an array of tools; --template-kwargs a
JSON object of extra template variables ({"enable_thinking": false}). The
generation prompt is added unless --no-generation-prompt. With --text, the
text is tokenized as it is (special-token text maps to the special token, no
token added) and "text" is the text.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.textSet = cmd.Flags().Changed("text")
			return runTokenize(o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "the model directory (required)")
	f.StringVar(&o.messages, "messages", "", "a JSON file: the conversation, an array of OpenAI-format messages")
	f.StringVar(&o.tools, "tools", "", "a JSON file: the tools, an array of tool definitions")
	f.BoolVar(&o.noGenerationPrompt, "no-generation-prompt", false, "render without the generation prompt")
	f.StringVar(&o.kwargs, "template-kwargs", "", "a JSON object of extra template variables")
	f.StringVar(&o.text, "text", "", "tokenize this text instead of a conversation")
	return cmd
}

// tokenized is what actloop tokenize prints.
type tokenized struct {
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

// runTokenize checks the flags and reads the files before it loads the
// tokenizer, so a usage error is quick.
func runTokenize(o tokenizeOptions, stdout io.Writer) error {
	if o.model == "" {
		return usageError(errors.New("tokenize: --model DIR is required"))
	}
	if o.textSet && (o.messages != "" || o.tools != "" || o.kwargs != "" || o.noGenerationPrompt) {
		return usageError(errors.New("tokenize: --text tokenizes text as it is: it takes no --messages, --tools, --template-kwargs or --no-generation-prompt"))
	}
	if !o.textSet && o.messages == "" {
		return usageError(errors.New("tokenize: want --messages FILE (a conversation) or --text STRING"))
	}
	var in chattemplate.Input
	if !o.textSet {
		var err error
		if in.Messages, err = readJSONArray("--messages", o.messages, "message", "role"); err != nil {
			return err
		}
		if o.tools != "" {
			if in.Tools, err = readJSONArray("--tools", o.tools, "tool", ""); err != nil {
				return err
			}
		}
		if o.kwargs != "" {
			if err := json.Unmarshal([]byte(o.kwargs), &in.Kwargs); err != nil || in.Kwargs == nil {
				return usageError(fmt.Errorf("tokenize: --template-kwargs: want a JSON object (%v)", err))
			}
		}
		in.AddGenerationPrompt = !o.noGenerationPrompt
	}
	tok, err := tokenize.LoadHF(filepath.Join(o.model, tokenize.TokenizerFile))
	if err != nil {
		return fmt.Errorf("tokenize: --model %s: %w", o.model, err)
	}
	out := tokenized{Text: o.text}
	if !o.textSet {
		tmpl, err := chattemplate.Load(o.model, "")
		if err != nil {
			return fmt.Errorf("tokenize: --model %s: %w", o.model, err)
		}
		if out.Text, err = tmpl.Render(in); err != nil {
			return fmt.Errorf("tokenize: rendering --messages %s with the chat template of --model %s: %w", o.messages, o.model, err)
		}
	}
	out.IDs = append([]int32{}, tok.Encode(out.Text)...)
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// readJSONArray reads file (the value of flag), a JSON array of objects
// (each with the string field key, when key is set); errors name the flag,
// the file and the item.
func readJSONArray(flag, file, item, key string) ([]any, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", flag, err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("tokenize: %s %s: want a JSON array of %ss: %w", flag, file, item, err)
	}
	out := make([]any, len(raw))
	for i, r := range raw {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(r, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("tokenize: %s %s: %s %d is not a JSON object", flag, file, item, i)
		}
		if key != "" {
			var s string
			if err := json.Unmarshal(fields[key], &s); err != nil || s == "" {
				return nil, fmt.Errorf("tokenize: %s %s: %s %d: field %q: want a string", flag, file, item, i, key)
			}
		}
		out[i] = json.RawMessage(bytes.TrimSpace(r))
	}
	return out, nil
}
