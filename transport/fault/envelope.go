package fault

import (
	"strconv"

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

// ClientEnvelope is the error body the router's client gets for f: FaultEnvelope, except that
// the error object of an in-stream engine error keeps only the engine's type, param and code
// unless exposeEngine is set (server.expose_engine_errors). An engine's message can name
// internal addresses ("KV pull from 10.20.30.40:5600 failed"), so by default it is replaced by a
// generic one naming the fault kind and the engine's status; the full text stays in f.Detail
// for the access log. Engine 4xx answers (Rejected: a context length error, say) pass through
// whole either way: they describe the client's own request.
func ClientEnvelope(f *Fault, exposeEngine bool) []byte {
	if f.Kind != StreamError || exposeEngine {
		return FaultEnvelope(f)
	}
	var env struct {
		Error struct {
			Type  string          `json:"type"`
			Param json.RawMessage `json:"param"`
			Code  json.RawMessage `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(f.Body, &env) // what did not parse is left out
	e := env.Error
	if e.Type == "" {
		e.Type = ErrorType(f.ClientStatus())
	}
	if !scalar(e.Code) {
		e.Code = strconv.AppendInt(nil, int64(f.Status), 10)
	}
	if !scalar(e.Param) {
		e.Param = []byte("null")
	}
	inner, err := json.Marshal(struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    json.RawMessage `json:"code"`
	}{"engine reported an error (" + StreamError.String() + ", status " + strconv.Itoa(f.Status) + ")", e.Type, e.Param, e.Code})
	if err != nil { // unreachable: the raw members are checked scalars
		return AppendErrorEnvelope(nil, ErrorBody{Message: "engine reported an error", Type: ErrorType(f.ClientStatus()), Code: StreamError.String()})
	}
	return AppendEnvelope(nil, inner)
}

// scalar says v is a JSON string or number as the engine sent it: an object or an array in the
// engine's param or code could carry anything, so it is not relayed.
func scalar(v []byte) bool {
	return len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) && json.Valid(v)
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
