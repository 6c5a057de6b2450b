package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// apiError is an error answered in OpenAI's shape with its HTTP status.
type apiError struct {
	status     int
	message    string
	typ        string
	param      string
	code       string
	retryAfter int // seconds; 0: no Retry-After header
}

// errorBody is OpenAI's error object; param and code are null when unset.
type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	f := errorFields{Message: e.message, Type: e.typ}
	if e.param != "" {
		f.Param = &e.param
	}
	if e.code != "" {
		f.Code = &e.code
	}
	return errorBody{Error: f}
}

// invalid is a 400 about one field of the request.
func invalid(param, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, message: msg, typ: "invalid_request_error", param: param}
}

// writeError answers e as JSON.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // the responses are plain structs: this is a bug
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// decodeError turns a body that does not decode into the request struct
// into a 400 naming the field (or a 413 for a body over the cap).
func decodeError(err error, limit int64) *apiError {
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &tooBig):
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
			message: fmt.Sprintf("the request body is larger than the server's limit of %d bytes", limit)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "the body is not valid JSON: it ends before its object does")
	case errors.As(err, &typeErr):
		// The fields both endpoints share are in an embedded struct, which
		// the decoder names; the API does not.
		typeErr.Field = strings.TrimPrefix(typeErr.Field, "sampling.")
		return invalid(typeErr.Field, fmt.Sprintf("%s: want %s, not a JSON %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value))
	case errors.As(err, &syntaxErr):
		return invalid("", fmt.Sprintf("the body is not valid JSON: %v (at byte %d)", syntaxErr, syntaxErr.Offset))
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		name, _ := strconv.Unquote(f)
		return invalid(name, fmt.Sprintf("unrecognized request argument supplied: %s", name))
	}
	// A field's own decoder failing: "json: cannot unmarshal ... : <why>".
	return invalid("", "the body is not a valid request: "+strings.TrimPrefix(msg, "json: "))
}

// jsonKind names a Go type as the JSON it takes.
func jsonKind(t reflect.Type) string {
	switch kind := t.Kind().String(); {
	case t == reflect.TypeFor[stringList]():
		return "a string or an array of strings"
	case t == reflect.TypeFor[chatContent]():
		return "a string or an array of text parts"
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "a boolean"
	case kind == "slice":
		return "an array"
	}
	return "an object"
}
