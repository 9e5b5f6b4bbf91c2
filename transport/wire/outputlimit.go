package wire

// outputLimitKey is the member that bounds the request's output on its endpoint: max_tokens,
// max_output_tokens on the Responses API, max_completion_tokens on chat when it is present.
func (b *ClientBody) outputLimitKey() string {
	switch {
	case b.Endpoint == EndpointResponses:
		return "max_output_tokens"
	case b.Endpoint.EngineShape() == EndpointChat:
		if _, ok := b.intMember("max_completion_tokens"); ok {
			return "max_completion_tokens"
		}
	}
	return "max_tokens"
}

// OutputLimit is the most tokens the client lets the request generate, and whether it set a
// bound (what the admission queue counts as a request's expected output).
func (b *ClientBody) OutputLimit() (int64, bool) { return b.intMember(b.outputLimitKey()) }
