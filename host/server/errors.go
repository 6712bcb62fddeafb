package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/chat"
	"github.com/kvhost/kvhost/host/sampling"
)

// apiError is the body of every error response, OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}. Param and Code are null
// when empty.
type apiError struct {
	Message string
	Type    string
	Param   string
	Code    string
}

func (e apiError) MarshalJSON() ([]byte, error) {
	nullable := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return json.Marshal(struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}{e.Message, e.Type, nullable(e.Param), nullable(e.Code)})
}

type errorBody struct {
	Error apiError `json:"error"`
}

// requestError is a request the server refuses before it reaches the engine:
// bad JSON, a wrong type, a value out of range, a field kvhost does not
// implement. Status is 400 unless set; Code is the body's code (null when
// empty).
type requestError struct {
	Param   string
	Message string
	Status  int
	Code    string
}

func (e *requestError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("server: invalid %s: %s", e.Param, e.Message)
	}
	return "server: invalid request: " + e.Message
}

func badRequest(param, format string, args ...any) *requestError {
	return &requestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// errorResponse is the one place errors become HTTP statuses and bodies.
// It reports whether the error is the server's fault (logged by the caller).
func errorResponse(err error) (status int, body apiError, internal bool) {
	var (
		re  *requestError
		fe  *sampling.FieldError
		ire *engine.InvalidRequestError
		rde *chat.RenderError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &re):
		status = re.Status
		if status == 0 {
			status = http.StatusBadRequest
		}
		msg := re.Message
		if re.Param != "" {
			msg = fmt.Sprintf("invalid %s: %s", re.Param, re.Message)
		}
		return status, apiError{Message: msg, Type: "invalid_request_error", Param: re.Param, Code: re.Code}, false
	case errors.As(err, &fe):
		return http.StatusBadRequest, apiError{
			Message: fmt.Sprintf("invalid %s: %s", fe.Field, fe.Problem),
			Type:    "invalid_request_error", Param: fe.Field,
		}, false
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, apiError{
			Message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit),
			Type:    "invalid_request_error", Code: "request_too_large",
		}, false
	case errors.As(err, &ire):
		return http.StatusBadRequest, apiError{
			Message: fmt.Sprintf("invalid %s: %s", ire.Field, ire.Problem),
			Type:    "invalid_request_error", Param: ire.Field,
		}, false
	case errors.As(err, &rde) && !rde.Panicked:
		return http.StatusBadRequest, apiError{
			Message: fmt.Sprintf("messages do not fit the model's chat template: %v", rde.Err),
			Type:    "invalid_request_error", Param: "messages",
		}, false
	case errors.Is(err, engine.ErrQueueFull):
		return http.StatusTooManyRequests, apiError{
			Message: "the request queue is full; retry later",
			Type:    "rate_limit_error", Code: "queue_full",
		}, false
	case errors.Is(err, engine.ErrShuttingDown):
		return http.StatusServiceUnavailable, apiError{
			Message: "the server is shutting down and admits no new requests",
			Type:    "service_unavailable", Code: "shutting_down",
		}, false
	}
	return http.StatusInternalServerError, apiError{
		Message: "internal server error",
		Type:    "server_error", Code: "internal_error",
	}, true
}

// writeError maps err and writes it; internal errors are logged with their
// detail, which the client never sees.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body, internal := errorResponse(err)
	if internal {
		s.logFor(r).Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	s.observeError(r, errorKind(status, body))
	writeAPIError(w, status, body)
}

func writeAPIError(w http.ResponseWriter, status int, e apiError) {
	noteReason(w, e.Message)
	writeJSON(w, status, errorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here; they always marshal.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"internal server error","type":"server_error","param":null,"code":"internal_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
