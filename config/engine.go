package config

// EngineTimeouts are the engine legs' timeouts and the bounds on what a leg may hold.
type EngineTimeouts struct {
	PrefillTimeoutS    Seconds `yaml:"prefill_timeout_s"`
	FirstTokenTimeoutS Seconds `yaml:"first_token_timeout_s"`
	// DecodeReadTimeoutS bounds silence between stream chunks after the first token; 0 leaves
	// the stream bounded by the request deadline alone.
	DecodeReadTimeoutS Seconds `yaml:"decode_read_timeout_s"`
	// ConnectTimeoutS bounds a TCP connect to an engine; it is also capped by the leg budget.
	ConnectTimeoutS Seconds `yaml:"connect_timeout_s"`
	// ModelsTimeoutS bounds one GET /v1/models asked of an engine without configured models.
	ModelsTimeoutS Seconds `yaml:"models_timeout_s"`
	// IdleConnTimeoutS drops pooled engine connections idle for longer than this. Keep it below
	// the engine's own keep-alive timeout (uvicorn's default is 5 s) so a request never lands on
	// a connection the engine is closing.
	IdleConnTimeoutS Seconds `yaml:"idle_conn_timeout_s"`
	// PassthroughTimeoutS bounds a passthrough request (embeddings, tokenize, score, rerank)
	// from connect to the last byte of the engine's answer.
	PassthroughTimeoutS Seconds `yaml:"passthrough_timeout_s"`
	// MaxHeldBytes and MaxHeldEvents bound what a decode leg may send before its first
	// generated token (it is held until commit); SSE comments do not count (past 1 KiB of
	// them, they are dropped).
	MaxHeldBytes  int `yaml:"max_held_bytes"`
	MaxHeldEvents int `yaml:"max_held_events"`
}

func defaultEngineTimeouts() EngineTimeouts {
	return EngineTimeouts{
		PrefillTimeoutS:    60,
		FirstTokenTimeoutS: 60,
		DecodeReadTimeoutS: 30,
		ConnectTimeoutS:    5,
		ModelsTimeoutS:     5,
		IdleConnTimeoutS:   4,

		PassthroughTimeoutS: 60,
		MaxHeldBytes:        4 << 20,
		MaxHeldEvents:       256,
	}
}

func (t EngineTimeouts) check(ck *checker) {
	ck.positive("engine.prefill_timeout_s", t.PrefillTimeoutS)
	ck.positive("engine.first_token_timeout_s", t.FirstTokenTimeoutS)
	ck.nonNegative("engine.decode_read_timeout_s", t.DecodeReadTimeoutS)
	ck.positive("engine.connect_timeout_s", t.ConnectTimeoutS)
	ck.positive("engine.models_timeout_s", t.ModelsTimeoutS)
	ck.positive("engine.idle_conn_timeout_s", t.IdleConnTimeoutS)
	ck.positive("engine.passthrough_timeout_s", t.PassthroughTimeoutS)
	if v := t.MaxHeldBytes; v < 1 || v > 1<<30 {
		ck.fail("engine.max_held_bytes", "%d is not allowed; want a byte count from 1 to 1073741824", v)
	}
	if v := t.MaxHeldEvents; v < 1 || v > 1<<20 {
		ck.fail("engine.max_held_events", "%d is not allowed; want an event count from 1 to 1048576", v)
	}
}
