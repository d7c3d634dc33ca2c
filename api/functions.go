package api

import "encoding/json"

// Function is one @remote function a session's kernel registered (kennel.remote): GET
// /sessions/{id}/functions lists them.
type Function struct {
	// Name is what a call names it by (POST /sessions/{id}/functions/{name}).
	Name string `json:"name"`
	// Module and QualName are the function's __module__ and __qualname__.
	Module   string `json:"module"`
	QualName string `json:"qualname"`
	// Doc is its docstring, "" for none.
	Doc string `json:"doc"`
	// Async: an async def function, run on the kernel's event loop.
	Async bool `json:"async"`
	// Schema is the JSON schema of its keyword arguments, from its type hints.
	Schema json.RawMessage `json:"schema"`
}

// FunctionList is the body of GET /sessions/{id}/functions: the functions by name, none
// when no kernel runs.
type FunctionList struct {
	Functions []Function `json:"functions"`
}

// CallFunction is the body of POST /sessions/{id}/functions/{name}.
type CallFunction struct {
	// Args are the call's keyword arguments, a JSON object; absent: none.
	Args json.RawMessage `json:"args,omitempty"`
	// BudgetMS bounds the call below the session's blocking budget (60 s); absent, zero
	// or more: that budget. Past it the call answers error code timeout.
	BudgetMS *int64 `json:"budget_ms,omitempty"`
}

// CallReply is how a @remote call ended: Status "ok" with Value (or, for a value over
// the session's limits, Truncated) and Output, or "error" with Error.
type CallReply struct {
	// ID is the call's id in the session, "" for a call that was never sent.
	ID     string `json:"id"`
	Status string `json:"status"`
	// Value is the function's value, whole when its JSON text is within the session's
	// output limits; absent when Truncated is set or Status is "error".
	Value json.RawMessage `json:"value,omitempty"`
	// Truncated is the value's JSON text bounded by the session's limits, when it was
	// over them.
	Truncated *Output `json:"truncated,omitempty"`
	// Output is what the function wrote to stdout and stderr, bounded by the limits.
	Output *Output `json:"output,omitempty"`
	// Error says why a call with Status "error" has no value.
	Error *CallError `json:"error,omitempty"`
}

// CallError is a @remote call's typed error (a RemoteCallError).
type CallError struct {
	// Code is "not_running" (no kernel runs), "unreachable" (the kernel ended, was
	// replaced or is out of reach before it answered), "unknown" (no such function),
	// "timeout" (no answer within the budget) or "failed" (it raised, or its value
	// cannot be carried: Reason "unencodable" or "too_large").
	Code    string `json:"code"`
	Message string `json:"message"`
	// Reason is the kernel's reason for a failed call: "failed", "unencodable" or
	// "too_large".
	Reason string `json:"reason,omitempty"`
	// Exception is what the function raised, for a failed call.
	Exception *Exception `json:"exception,omitempty"`
}
