package actors

import (
	"bufio"
	"io"
	"sync"
	"time"

	"github.com/goccy/go-json"
)

// accessLine is one request's access-log record. It never holds prompt or output text.
type accessLine struct {
	Time      string `json:"ts"`
	RequestID string `json:"request_id"`
	BackendID string `json:"backend_request_id,omitempty"`
	Endpoint  string `json:"endpoint"`
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	Status    int    `json:"status"`
	Outcome   string `json:"outcome"`
	Attempts  int    `json:"attempts"`
	Producer  string `json:"producer,omitempty"`
	Consumer  string `json:"consumer,omitempty"`
	// Tenant and Band are the request's flow (flow_control): the admission queue's tenant and
	// priority band.
	Tenant string `json:"tenant,omitempty"`
	Band   string `json:"band,omitempty"`
	// Disaggregation is the placement's decision ("disaggregated" or "local") and DisaggReason
	// the rule that made it; PrefixMatch the consumer's prefix-index match, in blocks.
	Disaggregation string `json:"disaggregation,omitempty"`
	DisaggReason   string `json:"disaggregation_reason,omitempty"`
	PrefixMatch    int    `json:"prefix_match_blocks,omitempty"`
	// PredictedLocal and PredictedDisagg are the times to first token the decision predicted
	// on the consumer alone and through the producer, when it predicted (a long prompt under
	// auto once rates are measured): set beside TTFT, they show how good the prediction is.
	PredictedLocal  float64 `json:"predicted_ttft_local_s,omitempty"`
	PredictedDisagg float64 `json:"predicted_ttft_disaggregated_s,omitempty"`
	TTFT            float64 `json:"ttft_s,omitempty"`
	FirstByte       float64 `json:"first_byte_s,omitempty"`
	HandoffAge      float64 `json:"handoff_age_s,omitempty"`
	Total           float64 `json:"total_s"`
	OutputTokens    int     `json:"output_tokens"`
	PromptTokens    int     `json:"prompt_tokens,omitempty"`
	CachedTokens    int     `json:"cached_tokens,omitempty"`
	// PredictedCached is the prompt tokens placement predicted the engine computing the prompt
	// had cached, from PromptBlocks ("tokens": the prompt's token blocks; "estimate": its
	// words), to be read beside CachedTokens.
	PredictedCached int    `json:"predicted_cached_tokens"`
	PromptBlocks    string `json:"prompt_blocks,omitempty"`
	ErrorKind       string `json:"error_kind,omitempty"`
	ErrorEngine     string `json:"error_engine,omitempty"`
	ErrorDetail     string `json:"error_detail,omitempty"`
	Reason          string `json:"descriptor_reason,omitempty"`
}

// accessLog writes one JSON line per request through a buffer flushed every interval
// (log.access_log_flush_s, 200 ms by default), so the request supervisor never waits on a write
// system call.
type accessLog struct {
	mu       sync.Mutex
	w        *bufio.Writer
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
}

func newAccessLog(w io.Writer, interval time.Duration) *accessLog {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	l := &accessLog{w: bufio.NewWriterSize(w, 64<<10), interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	go l.flusher()
	return l
}

func (l *accessLog) write(line *accessLine) {
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.w.Write(b)
	l.w.WriteByte('\n')
	l.mu.Unlock()
}

func (l *accessLog) flusher() {
	defer close(l.done)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.flush()
		case <-l.stop:
			l.flush()
			return
		}
	}
}

func (l *accessLog) flush() {
	l.mu.Lock()
	l.w.Flush()
	l.mu.Unlock()
}

func (l *accessLog) close() {
	close(l.stop)
	<-l.done
}
