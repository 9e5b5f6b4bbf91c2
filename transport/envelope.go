package transport

import (
	"github.com/goccy/go-json"
)

// ErrorBody is the OpenAI error envelope's inner object.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// AppendErrorEnvelope appends {"error":{...}} for a router-made error.
func AppendErrorEnvelope(dst []byte, e ErrorBody) []byte {
	inner, err := json.Marshal(e)
	if err != nil { // unreachable: ErrorBody holds only strings
		inner = []byte(`{"message":"internal error","type":"internal_error","param":null,"code":null}`)
	}
	return appendEnvelope(dst, inner)
}

// appendEnvelope wraps an error object as {"error":obj}.
func appendEnvelope(dst, obj []byte) []byte {
	dst = append(dst, `{"error":`...)
	dst = append(dst, obj...)
	return append(dst, '}')
}

// errorTypes names the envelope's type for each status the router itself produces.
func errorType(status int) string {
	switch status {
	case 400, 404, 413:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 502:
		return "bad_gateway"
	case 503:
		return "service_unavailable"
	case 504:
		return "gateway_timeout"
	}
	return "server_error"
}

// FaultEnvelope is the error body a client gets for f before commit. Engine errors that pass
// through (4xx, in-stream errors) keep the engine's own body; everything else gets a router
// envelope whose code names the fault kind and whose message never holds an engine URL.
func FaultEnvelope(f *Fault) []byte {
	if (f.Kind == FaultRejected || f.Kind == FaultStreamError) && len(f.Body) > 0 && json.Valid(f.Body) {
		if isErrorData(f.Body) {
			return f.Body
		}
		return appendEnvelope(nil, f.Body) // vLLM before 0.10.1 sent the error object bare
	}
	status := f.ClientStatus()
	return AppendErrorEnvelope(nil, ErrorBody{Message: f.Detail, Type: errorType(status), Code: f.Kind.String()})
}
