package actors

import (
	"context"
	"time"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/transport"
)

// refreshAdapters reads the LoRA adapters an engine running LoRA has loaded (its GET /v1/models,
// each adapter with its base model), once per scrape: adapters are loaded and unloaded at run
// time (POST /v1/load_lora_adapter), so the list placement reads is at most one scrape old. An
// engine whose /metrics carries no vllm:lora_requests_info runs no LoRA and is not asked; a
// failed read keeps the last list (the scrape itself says whether the engine answers).
func refreshAdapters(ctx context.Context, v *placement.Engine, timeout time.Duration, l transport.EngineLoad) {
	if l.LoRA == nil && v.Adapters.Load() == nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	list, err := v.Client.Adapters(actx)
	cancel()
	if err == nil {
		v.StoreAdapters(list)
	}
}
