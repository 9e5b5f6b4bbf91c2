package sim

import (
	"net/http"
	"strconv"
)

// apiError is one error answer in vLLM's envelope
// {"error":{"message","type","param","code"}}; code is the HTTP status.
type apiError struct {
	code    int
	typ     string
	message string
	param   string // "" is written as null
}

// vLLM names error types two ways: its serving layer uses exception-like names
// (create_error_response), while FastAPI-level failures (request validation, a raised
// HTTPException) use the HTTP reason phrase.
func errorType(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusInternalServerError:
		return "InternalServerError"
	case http.StatusNotImplemented:
		return "NotImplementedError"
	}
	if text := http.StatusText(code); text != "" {
		return text
	}
	return "Error"
}

// newError builds an error of the serving layer's kind for code.
func newError(code int, param, message string) *apiError {
	return &apiError{code: code, typ: errorType(code), message: message, param: param}
}

// invalidRequest is what vLLM answers when pydantic or FastAPI reject the body: 400
// with type "Bad Request" rather than "BadRequestError".
func invalidRequest(param, message string) *apiError {
	return &apiError{code: http.StatusBadRequest, typ: "Bad Request", message: message, param: param}
}

// simulatedError is the answer to a status=CODE or error_in_stream=CODE fault.
func simulatedError(code int) *apiError {
	msg := http.StatusText(code)
	if code == http.StatusInternalServerError {
		msg = "Internal server error" // vLLM's GenerationError message
	}
	if msg == "" {
		msg = "Error " + strconv.Itoa(code)
	}
	return newError(code, "", msg+" (simulated fault)")
}

func (e *apiError) appendJSON(b []byte) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, e.message)
	b = append(b, `,"type":`...)
	b = appendString(b, e.typ)
	b = append(b, `,"param":`...)
	if e.param == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, e.param)
	}
	b = append(b, `,"code":`...)
	b = appendInt(b, e.code)
	return append(b, "}}"...)
}

// write sends e as a complete JSON response; 429 and 503 carry Retry-After.
func (e *apiError) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.code == http.StatusTooManyRequests || e.code == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(e.code)
	_, _ = w.Write(e.appendJSON(nil))
}
