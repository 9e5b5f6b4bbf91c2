// Package health holds the engine health policies as pure decisions over counters, the clock
// and the randomness passed in, so that a table test drives each without actors or sockets:
// backpressure (Pushback: an engine answering only 429/503 is passed over for its
// Retry-After), the blame board's evidence against a producer (ProducerSuspect: handoffs failed
// on two or more consumers in placement; an engine already out is no evidence against its
// partner) and the order a readmission probe tries its partners in (Partners). The actors own
// the state these read: the engine actor stays the only writer of breaker state.
package health
