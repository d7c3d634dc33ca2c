package api

import "fmt"

// Code classifies an API error. Clients decide on the code, never on the message.
type Code string

// The error codes of the API.
const (
	// CodeInvalid: the request is malformed (bad JSON, a bad field, a bad id).
	CodeInvalid Code = "invalid"
	// CodeNotFound: the session, job or child named does not exist.
	CodeNotFound Code = "not_found"
	// CodeNoWorkingDir, CodeWorkingDirGone, CodeWorkingDirNotDir: a session create named no
	// working directory, one that does not exist, or one that is not a directory.
	CodeNoWorkingDir     Code = "no_working_dir"
	CodeWorkingDirGone   Code = "working_dir_gone"
	CodeWorkingDirNotDir Code = "working_dir_not_dir"
	// CodeConflict: the request conflicts with the state (an ended job, a workspace that
	// exists, a session being closed).
	CodeConflict Code = "conflict"
	// CodeUnconfirmed: a job stop whose end was not confirmed within the stop's wait. The
	// outcome is unknown; read the job before trying again (stops are never retried).
	CodeUnconfirmed Code = "unconfirmed"
	// CodeUnavailable: the kernel could not be started or is gone.
	CodeUnavailable Code = "unavailable"
	// CodeOutputRefused: a page read the retained output cannot answer whole (see
	// ErrorBody.Use for a read that works).
	CodeOutputRefused Code = "output_refused"
	// CodeTooLarge: the request body is over its route's limit, or a cell's code would
	// make a frame over the protocol's line limit (32 MiB); the message names the limit.
	CodeTooLarge Code = "too_large"
	// CodeTimeout: the request body did not arrive within the daemon's body timeout.
	CodeTimeout Code = "timeout"
	// CodeNoRoute: no route of the API has the request's path (404).
	CodeNoRoute Code = "no_route"
	// CodeMethodNotAllowed: the path's routes do not take the request's method (405; the
	// Allow header lists those they take).
	CodeMethodNotAllowed Code = "method_not_allowed"
	// CodeUnknown: a keyed cell (Idempotency-Key) was sent to a kernel that is gone
	// (a daemon restart found it ended): whether it ran is unknown, and it is never sent
	// again. A cell reply of state "unknown" carries it.
	CodeUnknown Code = "unknown"
	// CodeNoSpace: the daemon's state directory has no room to record the request (507);
	// nothing was done, and what was recorded before is intact.
	CodeNoSpace Code = "no_space"
	// CodeInternal: anything else.
	CodeInternal Code = "internal"
)

// ErrorBody is the JSON body of every error reply: {"error": {...}}.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is an API error: a code, a message for people, and for refused output reads the
// read that works instead.
type Error struct {
	// Status is the HTTP status of the reply (not sent in the body).
	Status int `json:"-"`
	// Code is the error's class.
	Code Code `json:"code"`
	// Message describes the error for people.
	Message string `json:"message"`
	// Use is, for CodeOutputRefused, a page read that works; nil when none does.
	Use *Span `json:"use,omitempty"`
}

// Error reads "CODE: MESSAGE".
func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Span is a byte range of a job's output.
type Span struct {
	Offset int64 `json:"offset"`
	Limit  int64 `json:"limit"`
}
