package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// File names in a model directory, as transformers reads them.
const (
	ConfigFile   = "tokenizer_config.json"
	TemplateFile = "chat_template.jinja"
	// AdditionalTemplatesDir holds named templates, <name>.jinja each.
	AdditionalTemplatesDir = "additional_chat_templates"
)

// Template names transformers gives a meaning to.
const (
	DefaultName = "default"
	ToolUseName = "tool_use"
)

// maxConfigBytes bounds tokenizer_config.json. Real ones are at most a few
// MiB (large added_tokens_decoder tables); 64 MiB leaves room and still stops
// a wrong file from filling memory.
const maxConfigBytes = 64 << 20

// specialTokenKeys are the special-token attributes transformers passes to a
// chat template when they are set.
var specialTokenKeys = []string{
	"bos_token", "eos_token", "unk_token", "sep_token",
	"pad_token", "cls_token", "mask_token",
}

// Template is a model's chat template with the special tokens it renders
// with. It is immutable and safe for concurrent use.
type Template struct {
	// name is the named template chosen at load ("" when the model has a
	// single template, or when the choice is left to Render).
	name string
	// single is the template when the model has one.
	single string
	// named holds a model's named templates (a list in tokenizer_config.json).
	named map[string]string
	// special maps bos_token, eos_token... to their text; unset ones absent.
	special map[string]string
	// now is the clock strftime_now reads; nil means time.Now.
	now func() time.Time
}

// Load reads the chat template of the model in dir as transformers does.
//
// Template files win over tokenizer_config.json, as in current
// transformers: chat_template.jinja is the template (named "default" when
// there are others), and additional_chat_templates/<name>.jinja are named
// ones. Otherwise chat_template in tokenizer_config.json is either one
// template (a string) or a list of {"name", "template"} objects. With named
// templates, name selects one; an empty name leaves the choice to Render:
// "tool_use" when tools are given and it exists, else "default".
//
// Special tokens (bos_token, eos_token, unk_token, sep_token, pad_token,
// cls_token, mask_token) come from tokenizer_config.json, each a string or an
// AddedToken object {"content": ...}. A missing tokenizer_config.json is
// allowed when chat_template.jinja exists; the template then has no special
// tokens.
func Load(dir, name string) (*Template, error) {
	cfg, err := readOptional(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	jinja, err := readOptional(filepath.Join(dir, TemplateFile))
	if err != nil {
		return nil, err
	}
	extra, err := readAdditional(filepath.Join(dir, AdditionalTemplatesDir))
	if err != nil {
		return nil, err
	}
	switch {
	case jinja != nil || len(extra) > 0:
		special := map[string]string{}
		if cfg != nil {
			if special, err = parseSpecialTokens(cfg); err != nil {
				return nil, err
			}
		}
		t := &Template{special: special}
		if len(extra) == 0 {
			if name != "" && name != DefaultName {
				return nil, fmt.Errorf("template %q: %s holds a single template: %w", name, TemplateFile, ErrNoTemplate)
			}
			t.single = string(jinja)
			return t, nil
		}
		t.named = extra
		if jinja != nil {
			t.named[DefaultName] = string(jinja)
		}
		if name != "" {
			if _, ok := t.named[name]; !ok {
				return nil, fmt.Errorf("template %q not among %s: %w", name, strings.Join(t.Names(), ", "), ErrNoTemplate)
			}
			t.name = name
		}
		return t, nil
	case cfg != nil:
		return ParseConfig(cfg, name)
	default:
		return nil, fmt.Errorf("%s: neither %s nor %s: %w", dir, TemplateFile, ConfigFile, ErrNoTemplate)
	}
}

// readAdditional reads the named templates <name>.jinja in dir; nil if dir
// does not exist.
func readAdditional(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	out := map[string]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".jinja")
		if !ok || e.IsDir() || name == "" {
			continue
		}
		data, err := readOptional(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out[name] = string(data)
	}
	return out, nil
}

// readOptional reads a file of at most maxConfigBytes; nil if it does not
// exist.
func readOptional(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%s is over the %d-byte limit", path, maxConfigBytes)
	}
	return data, nil
}

// ParseConfig reads the chat template and special tokens from the contents
// of a tokenizer_config.json; name is as for Load.
func ParseConfig(data []byte, name string) (*Template, error) {
	var raw struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parse %s: %w", ConfigFile, err)
	}
	special, err := parseSpecialTokens(data)
	if err != nil {
		return nil, err
	}
	t := &Template{special: special}
	ct := strings.TrimSpace(string(raw.ChatTemplate))
	switch {
	case ct == "" || ct == "null":
		return nil, fmt.Errorf("%s has no chat_template: %w", ConfigFile, ErrNoTemplate)
	case strings.HasPrefix(ct, `"`):
		if err := json.Unmarshal(raw.ChatTemplate, &t.single); err != nil {
			return nil, fmt.Errorf("parse chat_template: %w", err)
		}
		if name != "" && name != DefaultName {
			return nil, fmt.Errorf("template %q: the model has a single template: %w", name, ErrNoTemplate)
		}
		return t, nil
	case strings.HasPrefix(ct, "["):
		var list []struct {
			Name     *string `json:"name"`
			Template *string `json:"template"`
		}
		if err := json.Unmarshal(raw.ChatTemplate, &list); err != nil {
			return nil, fmt.Errorf("parse chat_template list: %w", err)
		}
		t.named = make(map[string]string, len(list))
		for i, e := range list {
			if e.Name == nil || e.Template == nil {
				return nil, fmt.Errorf("chat_template[%d]: want {\"name\", \"template\"}", i)
			}
			t.named[*e.Name] = *e.Template
		}
		if name != "" {
			if _, ok := t.named[name]; !ok {
				return nil, fmt.Errorf("template %q not among %s: %w", name, strings.Join(t.Names(), ", "), ErrNoTemplate)
			}
			t.name = name
		}
		return t, nil
	default:
		return nil, fmt.Errorf("chat_template is neither a string nor a list")
	}
}

// parseSpecialTokens reads the special-token attributes of a
// tokenizer_config.json. A token is a string, an AddedToken object with a
// string "content", or null; anything else is an error naming the key.
func parseSpecialTokens(data []byte) (map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parse %s: %w", ConfigFile, err)
	}
	out := map[string]string{}
	for _, k := range specialTokenKeys {
		v, ok := raw[k]
		if !ok {
			continue
		}
		var s *string
		if err := json.Unmarshal(v, &s); err == nil {
			if s != nil && *s != "" {
				out[k] = *s
			}
			continue
		}
		var obj struct {
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(v, &obj); err != nil || obj.Content == nil {
			return nil, fmt.Errorf("%s: want a string or an object with a string \"content\"", k)
		}
		if *obj.Content != "" {
			out[k] = *obj.Content
		}
	}
	return out, nil
}

// New returns a template from its source text and special tokens (keys as
// in tokenizer_config.json: "bos_token", "eos_token"...).
func New(source string, special map[string]string) *Template {
	s := make(map[string]string, len(special))
	for k, v := range special {
		s[k] = v
	}
	return &Template{single: source, special: s}
}

// Names lists the named templates, sorted; nil for a single template.
func (t *Template) Names() []string {
	if t.named == nil {
		return nil
	}
	names := make([]string, 0, len(t.named))
	for n := range t.named {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// SpecialTokens returns the special tokens the template renders with, keyed
// as in tokenizer_config.json ("bos_token", "eos_token"...); unset ones are
// absent.
func (t *Template) SpecialTokens() map[string]string {
	out := make(map[string]string, len(t.special))
	for k, v := range t.special {
		out[k] = v
	}
	return out
}

// BOS returns the beginning-of-sequence token, "" if unset.
func (t *Template) BOS() string { return t.special["bos_token"] }

// EOS returns the end-of-sequence token, "" if unset.
func (t *Template) EOS() string { return t.special["eos_token"] }

// Source returns the template text Render uses for in: the one chosen at
// Load, else "tool_use" when in has tools and the model has it, else
// "default".
func (t *Template) Source(in Input) (string, error) {
	if t.named == nil {
		return t.single, nil
	}
	if t.name != "" {
		return t.named[t.name], nil
	}
	if len(in.Tools) > 0 {
		if s, ok := t.named[ToolUseName]; ok {
			return s, nil
		}
	}
	if s, ok := t.named[DefaultName]; ok {
		return s, nil
	}
	return "", fmt.Errorf("the model has templates %s and none is %q; name one: %w",
		strings.Join(t.Names(), ", "), DefaultName, ErrNoTemplate)
}
