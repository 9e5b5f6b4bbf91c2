package fault

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
	return AppendEnvelope(dst, inner)
}

// AppendEnvelope wraps an error object as {"error":obj}.
func AppendEnvelope(dst, obj []byte) []byte {
	dst = append(dst, `{"error":`...)
	dst = append(dst, obj...)
	return append(dst, '}')
}

// ErrorType names the envelope's type for each status the router itself produces.
func ErrorType(status int) string {
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
	if (f.Kind.row().Status == PassThrough) && len(f.Body) > 0 && json.Valid(f.Body) {
		if isErrorData(f.Body) {
			return f.Body
		}
		return AppendEnvelope(nil, f.Body) // vLLM before 0.10.1 sent the error object bare
	}
	status := f.ClientStatus()
	return AppendErrorEnvelope(nil, ErrorBody{Message: f.Detail, Type: ErrorType(status), Code: f.Kind.String()})
}

// isErrorData reports whether data is an error object: {"error": ...} at the top level.
func isErrorData(data []byte) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	return len(data)-i >= 7 && string(data[i:i+7]) == `"error"`
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}
