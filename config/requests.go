package config

// Request bounds one client request end to end, retries included.
type Request struct {
	DeadlineS Seconds `yaml:"deadline_s"`
}

func defaultRequest() Request { return Request{DeadlineS: 600} }

func (r Request) check(ck *checker) { ck.positive("request.deadline_s", r.DeadlineS) }

// Admission bounds how many requests may wait for an engine slot and for how long.
type Admission struct {
	MaxQueue      int     `yaml:"max_queue"`
	QueueTimeoutS Seconds `yaml:"queue_timeout_s"`
}

func defaultAdmission() Admission { return Admission{MaxQueue: 10000, QueueTimeoutS: 5} }

func (a Admission) check(ck *checker) {
	if a.MaxQueue < 0 {
		ck.fail("admission.max_queue", "must be 0 (no waiting) or more, got %d", a.MaxQueue)
	}
	ck.nonNegative("admission.queue_timeout_s", a.QueueTimeoutS)
}

// Handoff governs the KV handoff descriptor between the legs.
type Handoff struct {
	MaxAgeS   Seconds `yaml:"max_age_s"`
	OnMissing string  `yaml:"on_missing"`
}

// Handoff.OnMissing values.
const (
	OnMissingRecompute = "recompute"
	OnMissingFail      = "fail"
)

func defaultHandoff() Handoff { return Handoff{MaxAgeS: 30, OnMissing: OnMissingRecompute} }

func (h Handoff) check(ck *checker) {
	ck.positive("handoff.max_age_s", h.MaxAgeS)
	ck.oneOf("handoff.on_missing", h.OnMissing, OnMissingRecompute, OnMissingFail)
}
