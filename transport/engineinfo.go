package transport

import (
	"context"
	"fmt"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// ModelInfo is one entry of an engine's GET /v1/models.
type ModelInfo struct {
	ID          string `json:"id"`
	MaxModelLen int    `json:"max_model_len"`
	// Parent is a LoRA adapter's base model (transport/lora.go); null for a base model.
	Parent *string `json:"parent"`
}

// Models lists the models the engine serves.
func (c *EngineClient) Models(ctx context.Context) ([]ModelInfo, error) {
	body, err := c.get(ctx, "/v1/models")
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []ModelInfo `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("engine %s: /v1/models: %w", c.name, err)
	}
	return out.Data, nil
}

// ModelIDs returns the ids of the models the engine serves (GET /v1/models).
func (c *EngineClient) ModelIDs(ctx context.Context) ([]string, error) {
	info, err := c.Models(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(info))
	for i, m := range info {
		ids[i] = m.ID
	}
	return ids, nil
}

// Version returns the engine's version string (GET /version).
func (c *EngineClient) Version(ctx context.Context) (string, error) {
	body, err := c.get(ctx, "/version")
	if err != nil {
		return "", err
	}
	var out struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return "", fmt.Errorf("engine %s: /version: %w", c.name, err)
	}
	return out.Version, nil
}

// Health checks GET /health, which answers 200 while the engine is alive.
func (c *EngineClient) Health(ctx context.Context) error {
	_, err := c.get(ctx, "/health")
	return err
}

// get performs a small GET bounded by ctx's deadline (or the first-token timeout).
func (c *EngineClient) get(ctx context.Context, path string) ([]byte, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.timeouts.FirstTokenTimeoutS.Duration())
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI(c.base + path)
	req.Header.Set(HopHeader, "1")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	lc, err := openLeg(ctx, c.hc, req, nil, resp, deadline, c.timeouts.ConnectTimeoutS.Duration(), false, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("engine %s: GET %s: %w", c.name, path, err)
	}
	defer lc.close()
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("engine %s: GET %s: status %d", c.name, path, resp.StatusCode())
	}
	return append([]byte(nil), resp.Body()...), nil
}
