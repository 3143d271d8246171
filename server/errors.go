package server

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/slots"
	"github.com/goprovider/provider/stages"
)

// Edge errors: found by the server itself.
var (
	errTooLarge = errors.New("server: request body too large")
	errBadBody  = errors.New("server: request body unreadable")
	errNotFound = errors.New("server: no such route")
	errMethod   = errors.New("server: method not allowed")
	// errUnauthorized: RequireToken found no valid bearer token.
	errUnauthorized = errors.New("server: missing or invalid API key")
)

// Error classes: the metrics label and log field of a failed request.
const (
	classCancelled    = "cancelled"
	classInvalid      = "invalid"
	classUnknownModel = "unknown_model"
	classTooLarge     = "too_large"
	classQueueFull    = "queue_full"
	classUnavailable  = "unavailable"
	classInternal     = "internal"
)

// outcome is what an error becomes at the edge.
type outcome struct {
	status  int
	class   string
	typ     string // OpenAI error type
	code    string
	param   string
	message string
}

// provider reports whether the outcome is the provider's fault.
func (o outcome) provider() bool {
	return o.class == classUnavailable || o.class == classInternal
}

// StatusClientClosedRequest is the status of a request whose client went
// away (nginx's 499).
const StatusClientClosedRequest = 499

var invalidMessages = map[stages.Code]string{
	stages.CodeInvalidJSON:      "The request body is not valid JSON.",
	stages.CodeInvalidType:      "A request parameter has the wrong type.",
	stages.CodeInvalidValue:     "A request parameter has an invalid value.",
	stages.CodeMissing:          "A required request parameter is missing.",
	stages.CodeUnknownParameter: "The request contains an unrecognized parameter.",
	stages.CodeUnsupported:      "A request parameter has a value this server does not support.",
	stages.CodeUnsupportedMedia: "The request contains media this model does not support.",
	stages.CodeContextLength:    "The request exceeds the model's context length.",
	stages.CodeEmptyPrompt:      "The prompt is empty.",
	stages.CodeNoChatTemplate:   "The model has no chat template; use /v1/completions.",
	stages.CodeTemplateRejected: "The model's chat template rejected the conversation.",
	stages.CodeInvalidSchema:    "The response_format's JSON schema cannot be enforced: it uses a keyword or format the server does not support, or no value satisfies it.",
}

// refusalMessages are the fixed messages of the slots' refusal reasons.
var refusalMessages = map[string]string{
	"no_kv_headroom":     "The server has no memory left for this model; retry elsewhere.",
	"reslice_floor":      "Loading this model would leave a loaded model too little KV cache; retry elsewhere.",
	"engine_init_failed": "The model's engine could not be started; retry elsewhere.",
	"unsupported_model":  "This server cannot serve the model; retry elsewhere.",
	"rank_lost":          "A process serving the model is gone; retry elsewhere.",
}

func invalidRequest(code, message string) outcome {
	return outcome{status: 400, class: classInvalid, typ: "invalid_request_error", code: code, message: message}
}

func unavailable(code, message string) outcome {
	return outcome{status: 503, class: classUnavailable, typ: "service_unavailable_error", code: code, message: message}
}

// classify maps an error of any layer to its outcome. It is the only place
// that decides a status.
func classify(err error) outcome {
	var inv *stages.Invalid
	var carve *stages.CarveError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcome{status: StatusClientClosedRequest, class: classCancelled, typ: "invalid_request_error", code: "client_closed_request", message: "The client closed the request."}
	case errors.As(err, &inv):
		msg, ok := invalidMessages[inv.Code]
		if !ok {
			msg = "The request is invalid."
		}
		o := invalidRequest(string(inv.Code), msg)
		o.param = inv.Param
		return o
	case errors.Is(err, engine.ErrDuplicateID):
		return invalidRequest("duplicate_request_id", "A request with this id is already running.")
	case errors.Is(err, engine.ErrInvalidID):
		return invalidRequest("invalid_request_id", "The request id is invalid.")
	case errors.Is(err, engine.ErrEmptyPrompt):
		return invalidRequest(string(stages.CodeEmptyPrompt), invalidMessages[stages.CodeEmptyPrompt])
	case errors.Is(err, engine.ErrInvalidToken):
		return invalidRequest("invalid_token", "The prompt contains a token outside the model's vocabulary.")
	case errors.Is(err, engine.ErrInvalidSpan):
		return invalidRequest("invalid_media_span", "The request's media placeholders do not match its media.")
	case errors.Is(err, errBadBody):
		return invalidRequest("invalid_body", "The request body could not be read.")
	case errors.Is(err, stages.ErrUnknownModel):
		return outcome{status: 404, class: classUnknownModel, typ: "invalid_request_error", code: "model_not_found", message: "The requested model does not exist."}
	case errors.Is(err, errUnauthorized):
		return outcome{status: 401, class: classInvalid, typ: "invalid_request_error", code: "invalid_api_key", message: "Missing or invalid API key; send it as Authorization: Bearer <key>."}
	case errors.Is(err, errNotFound):
		return outcome{status: 404, class: classInvalid, typ: "invalid_request_error", code: "not_found", message: "No such endpoint."}
	case errors.Is(err, errMethod):
		return outcome{status: 405, class: classInvalid, typ: "invalid_request_error", code: "method_not_allowed", message: "Method not allowed for this endpoint."}
	case errors.Is(err, errTooLarge):
		return outcome{status: 413, class: classTooLarge, typ: "invalid_request_error", code: "request_too_large", message: "The request body is too large."}
	case errors.Is(err, graph.ErrBusy), errors.Is(err, engine.ErrQueueFull):
		return outcome{status: 429, class: classQueueFull, typ: "rate_limit_error", code: "queue_full", message: "The server is busy; retry later."}
	case errors.As(err, &carve):
		// The prompt's placeholders and the tower's media disagree: our
		// template or tower is at fault, not the request. The reason is a
		// closed set, safe to name.
		o := unavailable("media_span_mismatch", "The server could not place the request's media in its prompt; retry elsewhere.")
		o.param = carve.Reason.String()
		return o
	case errors.Is(err, stages.ErrVision), errors.Is(err, engine.ErrBadEmbed):
		// The tower failed on media that decoded, or its output does not
		// fit the model: ours to fix, another provider may serve it.
		return unavailable("vlm_extraction_failed", "The server could not encode the request's media; retry elsewhere.")
	case errors.Is(err, engine.ErrQueueTimeout):
		return unavailable("queue_timeout", "The request waited too long for the model; retry later.")
	case slots.Reason(err) != "":
		// A closed set of refusals (package slots): another provider, or
		// this one later, may serve the request.
		return unavailable(slots.Reason(err), refusalMessages[slots.Reason(err)])
	case errors.Is(err, slots.ErrUnknown):
		return outcome{status: 404, class: classUnknownModel, typ: "invalid_request_error", code: "model_not_found", message: "The requested model does not exist."}
	case errors.Is(err, engine.ErrNeverFits):
		return unavailable("kv_capacity", "The request does not fit the model's KV cache capacity.")
	case errors.Is(err, engine.ErrDraining), errors.Is(err, graph.ErrClosed), errors.Is(err, engine.ErrShutdown):
		return unavailable("draining", "The server is shutting down; retry elsewhere.")
	}
	return outcome{status: 500, class: classInternal, typ: "server_error", code: "generation_failed", message: "The generation failed."}
}

type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (o outcome) body() []byte {
	e := errorJSON{Message: o.message, Type: o.typ, Code: o.code}
	if o.param != "" {
		e.Param = &o.param
	}
	b, _ := json.Marshal(errorBody{Error: e})
	return b
}
