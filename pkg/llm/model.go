package llm

import (
	"context"
	"encoding/json"
	"fmt"
)

// ModelNamer is a Generator whose server names the model it serves (for a
// trace's gen_ai.request.model, a log line).
type ModelNamer interface {
	// ModelName asks the server once for the name of its model.
	ModelName(ctx context.Context) (string, error)
}

var (
	_ ModelNamer = (*SGLang)(nil)
	_ ModelNamer = (*OpenAI)(nil)
)

// ModelName implements ModelNamer with GET /get_model_info (its
// model_path: the model as the server was started with --model-path).
func (c *SGLang) ModelName(ctx context.Context) (string, error) {
	b, err := c.get(ctx, "/get_model_info")
	if err != nil {
		return "", fmt.Errorf("model name: %w", err)
	}
	var info struct {
		ModelPath string `json:"model_path"`
	}
	if err := json.Unmarshal(b, &info); err != nil || info.ModelPath == "" {
		return "", fmt.Errorf("model name: %w: /get_model_info has no model_path", ErrBadResponse)
	}
	return info.ModelPath, nil
}

// ModelName implements ModelNamer: the model the client sends (its
// options' Model), or else the first that GET /v1/models lists (vLLM's
// served model name).
func (c *OpenAI) ModelName(ctx context.Context) (string, error) {
	if c.model != "" {
		return c.model, nil
	}
	b, err := c.get(ctx, "/v1/models")
	if err != nil {
		return "", fmt.Errorf("model name: %w", err)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("model name: %w: /v1/models lists no model", ErrBadResponse)
	}
	return list.Data[0].ID, nil
}
